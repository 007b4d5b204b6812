"""Packed matmul operands on CPUs: the operand a matmul reads along its output's vector lanes is first copied into
panels, so the register tile's loads walk memory in order.

A CPU matmul kernel (codegen/cpu_heuristic: the outer-product form) keeps a tile of 6 rows x 16 lanes in registers and,
per step of the reduce loop, loads 16 contiguous elements of the operand B (K x N) and broadcasts one element of A
per row. Read in place, B's 16 elements of step k+1 lie a whole row (N elements) after those of step k: for a 1024-wide
B every load is 4 KiB from the last, so they all fall in one set of the L1 cache and the hardware prefetcher (which
follows runs within a page) does not fetch them ahead. Packed, the same loads are consecutive:

    kernel 1 (pack):    P[jb, k, c] = B[k, jb*16 + c]               zero past N where 16 does not divide it
    kernel 2 (matmul):  out[i, jb*16 + c] = sum_k A[i, k] * P[jb, k, c]

Kernel 2 is the original kernel over its iteration space with the output axis j split into (jb, c); only the load of
B changes (panels of two vector registers: 16 columns with AVX2, 32 with AVX-512). Its panel axis jb runs over the
cores (one panel of P stays in the core's L2 while every row tile of A streams past it). Packing costs one pass over
B; it pays where B is large and read by many row tiles.
Measured on a 2-core Zen 2 (AVX2): 1024^3 ~100 -> ~150 GFLOPS in kernels, 512^3 ~120 -> ~150."""
from __future__ import annotations
import functools
from baregrad import knobs
from baregrad.helpers import prod
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import UOp, Ops
from baregrad.ir.view import ShapeTracker, View
from baregrad.codegen.kernel import verify_ast
from baregrad.ir.sint import ints, ints_or_none
from baregrad.codegen.astbuild import gbuf
from baregrad.codegen.gridreduce import SplitPlan, emit, new_temp

PANEL = 16                 # lanes of a panel where vectors are 8 floats or fewer: two AVX2 registers (cpu_heuristic's tile)
# where packing pays (2-core Zen 2, kernel time unpacked / packed): 1024^3 1.45x, 2048x256x2048 1.6x, 512^3 1.2-1.4x,
# 256x256x1024 1.0-1.5x; 128x256x784 0.75x, 64x128x784 0.65-1.0x, 32x1024x1024 0.75-1.0x (the copy is a large part of a
# short kernel)
MIN_BYTES = 512 << 10      # a smaller B stays in the L2 unpacked (257^3: no gain)
# rows of outputs (row tiles of A) that read each panel of B. Counted with the copy, packing lost below ~256 rows (the
# short kernels above); but a B that is a model's weight is packed once per model where the jit replays (JIT_HOIST
# runs the packing only when the weight changes), and then 64 rows pay: ViT-tiny's 197-row matmuls (197 x 192 x 768
# and back) and BERT-base's 128 x 768 x 768, 2 cores AVX-512: ViT 16.8 -> 15.7 ms, BERT 96.5 -> 88.4 ms per call
# (bench/models.py); MLP training steps (B rewritten every step) unchanged
MIN_ROWS = 64
# a B past the L2 pays with fewer rows: BERT-base's MLP at sequence 128 (128 x 768 x 3072 and 128 x 3072 x 768, 9 MiB
# of B, rows 12 KiB apart) 99 -> 150 and 98 -> 169 GFLOPS packed, 2-core AVX-512; 197 x 192 x 768 (0.6 MiB) loses
BIG_BYTES, BIG_MIN_ROWS = 4 << 20, 64
# a transposed B (x @ W.T) pays from fewer rows: the dot form it replaces ran 128 x 768 x 2048 at 7-25 GFLOPS
T_MIN_ROWS = 16
MAX_BYTES = 256 << 20      # P is a second copy of B while the matmul runs: a huge B (an embedding) is read in place

def pack_operand(ast: UOp, ren: object) -> SplitPlan | None:
  """The kernels that compute `ast` with its matmul operand packed into panels, or None to keep it as it is.
  Only CPU targets (threads, no workgroups) are packed; PACK=0 turns it off."""
  if getattr(ren, "has_local", False) or not getattr(ren, "has_threads", False) or not knobs.get("PACK"): return None
  return _pack_cached(ast, panel_width(ren))

def panel_width(ren: object) -> int:
  """Lanes of a panel: the register tile's two vector registers (AVX-512: 32 floats; 16 measured 1024^3 251 -> 316
  GFLOPS, BERT's 128 x 768 x 3072 249 -> 304, on a 2-core AVX-512 Xeon), at least PANEL."""
  return max(PANEL, 2 * int(getattr(ren, "simd_lanes", 0) or 0))

def _find(ast: UOp, panel: int) -> tuple[UOp, View, int, int, tuple[int, ...]] | None:
  """(the load of B, its view as one, its lane axis j, its reduce axis k, the kernel's full shape) of a matmul-shaped
  kernel with one reduction, else None."""
  if len(ast.src) != 1: return None
  red = [u for u in ast.toposort() if u.op is Ops.REDUCE_AXIS]
  if len(red) != 1 or red[0].arg[0] is not Ops.ADD or not dtypes.is_float(red[0].dtype): return None
  if (full := ints_or_none(verify_ast(ast))) is None: return None   # (symbolic sizes: not packed)
  reds = set(red[0].arg[1])
  outs = [o for o, n in enumerate(full) if n > 1 and o not in reds]
  store = ast.src[0].src[1].arg
  sst = store.real_strides()
  loads = [u for u in red[0].src[0].toposort() if u.op is Ops.LOAD]
  cands = []
  for b in loads:
    if (v := affine_view(b.src[1].arg)) is None: continue
    mv = [o for o, (n, s) in enumerate(zip(v.shape, v.strides)) if n > 1 and s != 0]
    rk = [o for o in mv if o in reds]
    for j in outs:
      # j: B contiguous along it (P is B's panels), or B read across it with its reduce axis contiguous (x @ W.T, a
      # Linear layer's weight: otherwise the dot form, every output a horizontal sum of lanes; packed, P is W.T's panels)
      if j not in mv or len(rk) != 1 or (v.strides[j] != 1 and v.strides[rk[0]] != 1): continue
      # a row axis: another load moves along it, B does not (each element of B feeds a row of outputs)
      rows = [o for o in outs if o not in mv and any(x.src[1].arg.real_strides()[o] not in (0, None) for x in loads if x is not b)]
      if not rows: continue
      # cpu_heuristic's choice of the lane axis: where the store is contiguous too, the last such
      cands.append(((v.strides[j] == 1, sst[j] in (1, -1), j), b, v, j, rk[0], rows, prod(full[o] for o in mv)))
  if not cands: return None
  key, b, v, j, k, rows, moved = max(cands, key=lambda c: c[0])
  # B's bytes per batch decide the cache behaviour, all of them (P's size) the memory
  if b.dtype.itemsize * full[k] * full[j] < MIN_BYTES or b.dtype.itemsize * moved > MAX_BYTES: return None
  nrows, nbytes = prod(full[o] for o in rows), b.dtype.itemsize * full[k] * full[j]
  if nrows < (BIG_MIN_ROWS if nbytes >= BIG_BYTES else MIN_ROWS if key[0] else T_MIN_ROWS) or full[j] < panel: return None
  return b, v, j, k, full

def affine_view(st: ShapeTracker) -> View | None:
  """st as one unmasked view where its index is affine in every axis (a window of a buffer read through a reshape is
  two views but one stride per axis), else None."""
  if len(st.views) == 1: return st.views[0] if st.views[0].mask is None else None
  if any(v.mask is not None for v in st.views) or None in (rs := st.real_strides()): return None
  off, _ = st.to_index([UOp.const(dtypes.int64, 0)] * len(st.shape), dtypes.int64)   # (an offset may pass 2^31)
  return View(st.shape, rs, off.arg) if off.op is Ops.CONST else None  # type: ignore[arg-type]  # (rs: no None, above)

def _split_view(st: ShapeTracker, j: int, n: int, npad: int, panel: int) -> ShapeTracker:
  """st over the full shape with axis j (size n, or 1) split into (npad // panel, panel); past n (padding) masked."""
  sh = ints(st.shape)
  if sh[j] == 1: return st.reshape(sh[:j] + (1, 1) + sh[j + 1:])
  top = st.views[-1]
  if top.strides[j] == 0 and (top.mask is None or top.mask[j] == (0, n)):
    # broadcast along j (A's rows): every index reads the same element, the padding too: no mask (a masked lane would
    # make each broadcast a gather)
    mask = None if top.mask is None else top.mask[:j] + ((0, npad // panel), (0, panel)) + top.mask[j + 1:]
    return ShapeTracker(st.views[:-1] + (View(sh[:j] + (npad // panel, panel) + sh[j + 1:], top.strides[:j] + (0, 0) + top.strides[j + 1:],
                                              top.offset, mask),))
  if npad != n: st = st.pad(tuple((0, npad - n) if o == j else (0, 0) for o in range(len(sh))))
  return st.reshape(sh[:j] + (npad // panel, panel) + sh[j + 1:])

@functools.lru_cache(maxsize=4096)
def _pack_cached(ast: UOp, panel: int) -> SplitPlan | None:
  # asked for every kernel of every schedule (ASTs are hash-consed: the same kernel is the same key)
  if (found := _find(ast, panel)) is None: return None
  b, v, j, k, full = found
  n, kk = full[j], full[k]
  npad = -(-n // panel) * panel
  jb = npad // panel
  # P's axes: the other axes B moves along (a batch), in order, then (jb, k, c); contiguous
  batch = [o for o, (s, st) in enumerate(zip(v.shape, v.strides)) if s > 1 and st != 0 and o not in (j, k)]
  pshape = tuple(full[o] for o in batch) + (jb, kk, panel)
  nb = max(u.arg for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL) + 1
  plan = SplitPlan(nb)
  t = new_temp(plan, prod(pshape), b.dtype)
  # kernel 1: P = B rearranged, iterated in B's order (batch..., k, jb, c): reads run along B's rows, each write fills
  # 16 consecutive elements of P
  nbt = len(batch)
  bsh = tuple(full[o] for o in batch)
  src = ShapeTracker((View(bsh + (kk, n), tuple(v.strides[o] for o in batch) + (v.strides[k], v.strides[j]), v.offset),))
  if npad != n: src = src.pad(tuple((0, 0) for _ in batch) + ((0, 0), (0, npad - n)))
  src = src.reshape(bsh + (kk, jb, panel))
  dst = ShapeTracker.from_shape(pshape).permute(tuple(range(nbt)) + (nbt + 1, nbt, nbt + 2))
  pack = UOp(Ops.SINK, src=(UOp(Ops.STORE, src=(gbuf(nb, b.dtype), UOp(Ops.VIEW, src=(), arg=dst),
                                                 UOp(Ops.LOAD, b.dtype, (b.src[0], UOp(Ops.VIEW, src=(), arg=src))))),))
  emit(plan, pack, tuple(range(nb)) + (t,))
  # kernel 2: every view with axis j split; the load of B reads P
  bshape = b.src[1].arg.shape
  pshape2 = bshape[:j] + (jb, panel) + bshape[j + 1:]
  pstrides = [0] * len(pshape2)
  acc = panel * kk * jb
  for o in reversed(batch):
    pstrides[o + (o > j)] = acc
    acc *= full[o]
  pstrides[j], pstrides[j + 1], pstrides[k + (k > j)] = panel * kk, 1, panel
  memo: dict[UOp, UOp] = {b: UOp(Ops.LOAD, b.dtype, (gbuf(nb, b.dtype), UOp(Ops.VIEW, src=(), arg=ShapeTracker((View(pshape2, tuple(pstrides)),)))))}
  for u in ast.toposort():
    if u in memo: continue
    if u.op is Ops.VIEW: memo[u] = UOp(Ops.VIEW, src=(), arg=_split_view(u.arg, j, n, npad, panel))
    elif u.op is Ops.REDUCE_AXIS: memo[u] = UOp(u.op, u.dtype, (memo[u.src[0]],), (u.arg[0], tuple(a + (a > j) for a in u.arg[1])))
    else: memo[u] = u.replace(src=tuple(memo[x] for x in u.src))
  emit(plan, memo[ast], tuple(range(nb)) + (t,))
  return plan
