"""Row-streamed reductions on CPUs: a sum down the rows of a large matrix into many contiguous outputs (a vector-matrix
product x @ W with W (K, N) row-major, a column sum W.sum(0)) reads the matrix in order instead of in column strips.

The default CPU tiling (codegen/cpu_heuristic) keeps a strip of 128 outputs in registers and walks all K rows for it:
each row is read in 512-byte pieces 16 KiB apart, once per strip, and the prefetcher falls behind (a 4096x4096 float32
vector-matrix product ran at ~24 GB/s where a contiguous sum streams ~40). Here each thread's chunk of columns is
accumulated in memory (it stays in the L1/L2 cache) while the rows stream past it, U rows per pass:

    kernel 1: T[s, m, c*JC + jj] = (kb > 0 ? T[s, m, c*JC + jj] : 0) + sum_u f(..., W[k, c*JC + jj], x[m, k], ...)
              with k = (s*KB + kb)*U + u; iteration shape (S, C, KB, rows m..., JC, U): S or C over the cores, then the
              passes kb, the rows, the columns jj in vector lanes; u unrolled. The store's stride along kb is 0 (an
              accumulating axis: codegen/kernel.py keeps it a serial loop).
    kernel 2: out = post(sum_s T[s, ...])     the AST's elementwise tail; left out where S = 1 and there is no tail

Columns split over the cores (C) while each chunk keeps >= MIN_CHUNK columns, else rows (S partial sums). Measured in C
on a 2-core Zen 4 (4096x4096 float32, a chunk per thread): chunks of 2048 columns 44 GB/s, 1024 39, 512 31, 128 28;
U = 4 rows per pass 44 GB/s, 1 row 25 (the chunk's load and store per row). This kernel there: 1x4096x4096 2.6-2.8 ->
1.6-1.7 ms, a 4096x4096 column sum 22 -> 32 GB/s (bench/compiler_core.py). ROWSTREAM=0 turns it off."""
from __future__ import annotations
import functools
from baregrad import knobs
from baregrad.helpers import prod
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import UOp, Ops
from baregrad.ir.view import ShapeTracker, View, strides_for_shape
from baregrad.codegen.kernel import verify_ast
from baregrad.ir.sint import ints, ints_or_none
from baregrad.codegen.astbuild import gbuf
from baregrad.codegen.gridreduce import SplitPlan, emit, new_temp, moved_views
from baregrad.codegen.pack import affine_view

U = 4                  # rows per pass (the chunk is loaded and stored once per pass)
MIN_BYTES = 8 << 20    # under this the strips cost about as much (a 4 MiB matrix is read from the L3 cache), and a
                       # split into row partials adds a launch
MAX_ROWS = 4           # outputs per column (x's rows): each pass reads the U rows of W once per output row from cache
MIN_CHUNK = 1024       # columns per thread's chunk (4 KiB of float32 per row visit) before rows are split instead
LANES = 16             # the chunk's width must be whole vectors (64 bytes: a cache line)

def row_stream(ast: UOp, ren: object) -> SplitPlan | None:
  """The kernels computing `ast` with its strided reduction streamed by rows, or None to keep it as it is. Only CPU
  targets (threads, no workgroups) take it."""
  if getattr(ren, "has_local", False) or not getattr(ren, "has_threads", False) or not knobs.get("ROWSTREAM"): return None
  return _plan_cached(ast, max(1, int(getattr(ren, "compute_units", 0) or 1)))

def _find(ast: UOp) -> tuple[UOp, int, int, list[int], tuple[int, ...]] | None:
  """(the reduction, its axis k, the contiguous output axis j, the row axes, the full shape), or None."""
  if len(ast.src) != 1: return None
  red = [u for u in ast.toposort() if u.op is Ops.REDUCE_AXIS]
  if len(red) != 1 or red[0].arg[0] is not Ops.ADD or len(red[0].arg[1]) != 1: return None
  r = red[0]
  if not dtypes.is_float(r.dtype) or r.dtype.itemsize < 4: return None
  if (full := ints_or_none(verify_ast(ast))) is None: return None   # (symbolic sizes: not streamed)
  k = r.arg[1][0]
  st = ast.src[0].src[1].arg
  if len(st.views) != 1 or st.views[0].mask is not None or st.views[0].offset != 0: return None
  sst = st.real_strides()
  if sst != tuple(0 if n == 1 else s for n, s in zip(st.shape, strides_for_shape(st.shape))): return None   # a plain output
  outs = [o for o, n in enumerate(full) if n > 1 and o != k]
  js = [o for o in outs if sst[o] == 1]
  if not js or full[k] % U: return None
  j = js[0]
  rows = [o for o in outs if o != j]
  if prod(full[o] for o in rows) > MAX_ROWS or full[j] % LANES: return None
  loads = [u for u in r.src[0].toposort() if u.op is Ops.LOAD]
  if any(len(u.src) != 2 for u in loads): return None   # (a gather's arg names an axis of its view)
  def big(b: UOp) -> bool:
    v = affine_view(b.src[1].arg)
    if v is None or v.strides[j] != 1 or abs(v.strides[k]) < full[j]: return False
    if any(s != 0 and n > 1 for o, (n, s) in enumerate(zip(v.shape, v.strides)) if o not in (j, k)): return False
    return b.dtype.itemsize * full[k] * full[j] >= MIN_BYTES
  if not any(big(b) for b in loads): return None
  return r, k, j, rows, full

def _split(threads: int, n: int, kk: int) -> tuple[int, int]:
  """(S, C): row partials and column chunks, one of them 1."""
  if threads > 1 and n // threads >= MIN_CHUNK and n % (threads * LANES) == 0: return 1, threads
  if threads > 1 and kk % (threads * U) == 0: return threads, 1
  return 1, 1

@functools.lru_cache(maxsize=4096)
def _plan_cached(ast: UOp, threads: int) -> SplitPlan | None:
  # asked for every kernel of every CPU schedule (ASTs are hash-consed: the same kernel is the same key)
  if (found := _find(ast)) is None: return None
  r, k, j, rows, full = found
  n, kk = full[j], full[k]
  s_, c_ = _split(threads, n, kk)
  jc, kb = n // c_, kk // (s_ * U)
  nd = len(full)
  ones = [o for o in range(nd) if o not in (k, j, *rows)]
  perm = (k, *rows, j, *ones)
  nr = len(rows)
  # after the permute and the reshape: (S, KB, U, rows..., C, JC, ones...); the kernel's order is
  # (S, C, KB, rows..., JC, U, ones...)
  order = (0, 3 + nr, 1, *range(3, 3 + nr), 4 + nr, 2, *range(5 + nr, 5 + nr + len(ones)))
  def reshape(st: ShapeTracker) -> ShapeTracker:
    st = st.permute(perm)
    sh = ints(st.shape)
    ks = (s_, kb, U) if sh[0] != 1 else (1, 1, 1)
    js = (c_, jc) if sh[1 + nr] != 1 else (1, 1)
    return st.reshape(ks + sh[1:1 + nr] + js + sh[2 + nr:]).permute(order)
  src = moved_views(r.src[0], reshape)
  shape1 = (s_, c_, kb, *(full[o] for o in rows), jc, 1, *(1 for _ in ones))
  # T as (S, rows..., N), contiguous
  rstrides = strides_for_shape(tuple(full[o] for o in rows) + (n,))
  tstrides = (prod(full[o] for o in rows) * n, jc, 0, *rstrides[:nr], 1, 0, *(0 for _ in ones))
  tview = View(shape1, tuple(0 if d == 1 else s for d, s in zip(shape1, tstrides)))
  nb = max(u.arg for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL) + 1
  plan = SplitPlan(nb)
  store = ast.src[0]
  out = store.src[0]
  direct = (s_ == 1 and store.src[2] is r and out.dtype.base == r.dtype  # type: ignore[attr-defined]  # (a pointer: PtrDType)
            and not any(u.op is Ops.LOAD and u.src[0].arg == out.arg for u in ast.toposort()))
  tb = out if direct else gbuf(nb, r.dtype)
  part = UOp(Ops.REDUCE_AXIS, r.dtype, (src,), (Ops.ADD, (4 + nr,)))
  if kb > 1:
    # the pass kb adds to what the passes before it left; the first reads 0 (the view is masked there)
    prev = ShapeTracker((View(shape1[:2] + (kb - 1,) + shape1[3:], tview.strides),)).pad(tuple((1, 0) if i == 2 else (0, 0) for i in range(len(shape1))))
    part = UOp(Ops.LOAD, r.dtype, (tb, UOp(Ops.VIEW, src=(), arg=prev))) + part
  k1 = UOp(Ops.SINK, src=(UOp(Ops.STORE, src=(tb, UOp(Ops.VIEW, src=(), arg=ShapeTracker((tview,))), part)),))
  if direct:
    emit(plan, k1, tuple(range(nb)))
    return plan
  t = new_temp(plan, s_ * prod(full[o] for o in rows) * n, r.dtype)
  emit(plan, k1, tuple(range(nb)) + (t,))
  # kernel 2: the reduction becomes a sum over the S partials (axis k of size S), the rest of the AST as it was
  shape2 = tuple(s_ if o == k else full[o] if o in rows or o == j else 1 for o in range(nd))
  st2 = [0] * nd
  st2[k], st2[j] = prod(full[o] for o in rows) * n, 1
  for o, s in zip(rows, rstrides[:nr]): st2[o] = s
  v2 = View(shape2, tuple(0 if d == 1 else s for d, s in zip(shape2, st2)))
  red2 = UOp(Ops.REDUCE_AXIS, r.dtype, (UOp(Ops.LOAD, r.dtype, (gbuf(nb, r.dtype), UOp(Ops.VIEW, src=(), arg=ShapeTracker((v2,))))),), r.arg)
  emit(plan, ast.substitute({r: red2}), tuple(range(nb)) + (t,))
  return plan
