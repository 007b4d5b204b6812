"""Default opts for targets with workgroups (GPUs), chosen from what the renderer declares (threads per workgroup,
shared memory, warp size, multiprocessors, tensor cores), never from which device it is.

Shapes it aims for:
- elementwise: 4 lanes per thread along the axis the stores walk contiguously (128-bit accesses where aligned),
  up to 256 threads per workgroup over it, the rest of the output on the grid;
- reduction: when the reduced axis is contiguous or the outputs are too few to fill the device, a workgroup of up to
  256 threads shares each output (GROUP) and every thread reads 4 neighbouring elements per step; otherwise one thread
  per output, neighbouring threads on neighbouring outputs;
- row-fused (engine/schedule.py's row fusion: reductions per row, then an elementwise tail over the same row that no
  reduction reads along): one workgroup per row, its threads share the reductions (GROUP) and then the tail's elements
  (SHARE); the tail's outer part is a loop after the reductions, never the grid (that would compute them again);
- matmul-like (a reduction with reuse on two output axes): tensor cores where the target declares a matching shape,
  else register tiles with operand tiles staged in shared memory.
Awkward sizes are padded (PADTO) to the tile rather than falling back to tiny workgroups."""
from __future__ import annotations
import math
from baregrad.helpers import prod
from baregrad.ir.ops import UOp, Ops
from baregrad.codegen.kernel import Kernel, Opt, OptOps, OptError, MAX_LANES, nested_reduce_axes
from baregrad.codegen.renderer import Renderer

def _strides(k: Kernel) -> list[tuple[UOp, tuple[int | None, ...]]]:
  return [(u, u.src[1].arg.real_strides()) for u in k.ast.toposort() if u.op in (Ops.LOAD, Ops.STORE)]

def axis_of(k: Kernel, orig: int, kinds: tuple[str, ...]) -> int | None:
  """The optimizer's number of the innermost part of full-shape axis `orig` whose kind is one of `kinds`."""
  loops = k.loop_axes()
  cands = [n for n, i in enumerate(loops) if k.axes[i].orig == orig and k.axes[i].kind in kinds]
  return cands[-1] if cands else None

def size_of(k: Kernel, orig: int, kinds: tuple[str, ...]) -> int:
  n = axis_of(k, orig, kinds)
  return 0 if n is None else k.axes[k.loop_axes()[n]].size

def apply(k: Kernel, op: OptOps, orig: int, amt: int, kinds: tuple[str, ...]) -> bool:
  """Apply op to the innermost part of `orig` of the given kinds; False (kernel unchanged) if it does not apply."""
  n = axis_of(k, orig, kinds)
  if n is None: return False
  try: k.apply_opt(Opt(op, n, amt))
  except OptError: return False
  return True

def pow2_divisor(n: int, limit: int) -> int:
  d = 1
  while d * 2 <= limit and n % (d * 2) == 0: d *= 2
  return d

def fit(k: Kernel, orig: int, kinds: tuple[str, ...], want: int, floor: int) -> int:
  """Make the axis take `want` (a power of two) or at least `floor`: the largest power-of-two divisor if that is
  enough, else pad the axis to a multiple of `want`. Returns the amount the axis now divides by."""
  size = size_of(k, orig, kinds)
  if size == 0: return 1
  want = min(want, 1 << (size.bit_length() - 1)) if size < want else want
  d = pow2_divisor(size, want)
  if d >= min(want, floor) or size <= floor: return d
  if apply(k, OptOps.PADTO, orig, want, kinds): return want
  return d

def gpu_opts(k: Kernel, ren: Renderer) -> list[Opt]:
  """Apply and return GPU-shaped opts for kernel k (see the module docstring)."""
  acc = _strides(k)
  loads = [s for u, s in acc if u.op is Ops.LOAD]
  stores = [s for u, s in acc if u.op is Ops.STORE]
  out_axes = [a.orig for a in k.axes if a.kind == "loop"]
  red_axes = [a.orig for a in k.axes if a.kind == "reduce"]
  tmax = min(ren.local_max or 256, 256)
  cu = ren.compute_units or 64
  n_out = prod(k.full_shape[o] for o in out_axes)
  reuse = [o for o in out_axes if any(s[o] == 0 for s in loads)] if red_axes else []
  tails = _row_tails(k) if red_axes else []
  if red_axes and (inner := nested_reduce_axes(k)): _attention(k, ren, stores, inner, out_axes)
  elif tails: _row_fused(k, ren, out_axes, red_axes, tails, loads, tmax)
  elif red_axes and len(reuse) >= 2 and _matmul(k, ren, reuse, red_axes, loads, stores): pass
  elif red_axes: _reduction(k, ren, out_axes, red_axes, loads, stores, n_out, tmax, cu)
  else: _elementwise(k, ren, out_axes, loads, stores, tmax, cu)
  _grid(k, ren, set(tails))
  if red_axes and k.has_images: _images(k)
  return list(k.applied)

def _images(k: Kernel) -> None:
  """Targets with a texture path (Adreno): the operands a reduction reads along a reduced axis (a convolution's weights
  and activations, a matmul's inputs) go through the texture cache, which serves these re-read, 2-D local patterns
  better than plain loads (what openpilot's models on Adreno do). Not an operand staged in shared memory (SMEM): its
  tile is read from memory once a step, cooperatively, and those many loads of a thread, hoisted by ir3 as texture
  reads, made register pressure spill (ir3 private memory, which this driver does not set up)."""
  cands = k.stage_candidates()
  staged = {cands[j].src[0].arg for j in k.staged}
  operands = {u.src[0].arg for u in cands if u.src[0].op is Ops.DEFINE_GLOBAL} - staged
  for j, slot in enumerate(k.image_candidates()):
    if slot in operands:
      try: k.apply_opt(Opt(OptOps.IMAGE, j))
      except OptError: pass

def _row_tails(k: Kernel) -> list[int]:
  """Output axes the store moves along and no reduction reads along (a row-fused kernel's elementwise tail)."""
  red_views = [x.src[1].arg.shape for r in k.ast.toposort() if r.op is Ops.REDUCE_AXIS for x in r.toposort() if x.op is Ops.LOAD]
  stores = [st.src[1].arg.shape for st in k.ast.src]
  return [a.orig for a in k.axes if a.kind == "loop" and red_views and any(s[a.orig] != 1 for s in stores)
          and all(v[a.orig] == 1 for v in red_views)]

def _row_fused(k: Kernel, ren: Renderer, out_axes: list[int], red_axes: list[int], tails: list[int], loads: list, tmax: int) -> None:
  r, t = red_axes[-1], tails[-1]
  g = pow2_divisor(math.gcd(k.full_shape[r], k.full_shape[t]), tmax)
  # (one thread per row: a row too short to split, or rows over more axes than the grid has, whose loop would reuse
  # the GROUP's shared memory)
  rows = [k.full_shape[o] for o in out_axes if o not in tails]
  if g < 2 or len(rows) > len(ren.global_max) or any(n > lim for n, lim in zip(reversed(rows), ren.global_max)): return
  if _contiguous(loads, r) and k.full_shape[r] >= 8 * g and k.full_shape[r] % (4 * g) == 0: apply(k, OptOps.UNROLL, r, 4, ("reduce",))
  if apply(k, OptOps.GROUP, r, g, ("reduce",)): apply(k, OptOps.SHARE, t, g, ("loop",))

def _attention(k: Kernel, ren: Renderer, stores: list, inner: set[int], out_axes: list[int]) -> None:
  """Attention in one kernel (engine/attention_fusion.py): one thread per query row (a workgroup of up to 64 rows), its
  output row whole in registers where it fits (else a power-of-two part at a time), so each dot product is computed once per pass over the
  keys by the one thread that needs it; every thread of the workgroup reads the same key and value rows at a step."""
  d = [o for o in out_axes if _contiguous(stores, o)]
  if not d: return
  n = k.full_shape[d[-1]]
  # (accumulators: up to half the registers a thread may use; 32 where the target does not say: Adreno's ir3 spills
  # 64 of them to private memory)
  cap = min(128, (ren.regs_per_thread or 64) // 2)
  apply(k, OptOps.UPCAST, d[-1], n if n <= cap else pow2_divisor(n, cap), ("loop",))
  for r in sorted(inner):
    for amt in (4, 2):
      if k.lanes * amt <= MAX_LANES and k.full_shape[r] % amt == 0 and apply(k, OptOps.UNROLL, r, amt, ("reduce",)): break
  rows = [o for o in out_axes if o != d[-1] and any(s[o] != 0 for s in stores) and k.full_shape[o] > 1]
  if rows and (w := fit(k, rows[-1], ("loop",), 64, 32)) > 1: apply(k, OptOps.LOCAL, rows[-1], w, ("loop",))

def _contiguous(ss: list, o: int) -> bool: return any(s[o] == 1 for s in ss)

def _elementwise(k: Kernel, ren: Renderer, out_axes: list[int], loads: list, stores: list, tmax: int, cu: int) -> None:
  if not out_axes: return
  o = next((a for a in reversed(out_axes) if _contiguous(stores, a)), out_axes[-1])
  n_out = prod(k.full_shape[a] for a in out_axes)
  # 4 lanes a thread where the memory is contiguous and there is work enough to keep every multiprocessor busy
  if (_contiguous(stores, o) or _contiguous(loads, o)) and n_out >= 4 * 128 * cu and size_of(k, o, ("loop",)) % 4 == 0:
    apply(k, OptOps.UPCAST, o, 4, ("loop",))
  lsz = fit(k, o, ("loop",), tmax, ren.warp_size or 32)
  if lsz > 1: apply(k, OptOps.LOCAL, o, lsz, ("loop",))
  # too few threads on the inner axis: the next axis out shares the workgroup
  if k.threads < 64 and len(out_axes) > 1:
    o2 = [a for a in out_axes if a != o][-1]
    l2 = pow2_divisor(size_of(k, o2, ("loop",)), max(1, tmax // max(k.threads, 1)))
    if l2 > 1: apply(k, OptOps.LOCAL, o2, l2, ("loop",))

def _reduction(k: Kernel, ren: Renderer, out_axes: list[int], red_axes: list[int], loads: list, stores: list, n_out: int,
               tmax: int, cu: int) -> None:
  r = red_axes[-1]
  rsize = k.full_shape[r]
  contig_r = _contiguous(loads, r)
  # one thread per output is enough when outputs fill the device and neighbouring outputs are neighbours in memory
  outputs_suffice = n_out >= 256 * cu and not contig_r
  use_group = rsize >= 32 and not outputs_suffice and len(out_axes) <= 3
  if use_group:
    g = 256 if rsize >= 4096 else 128 if rsize >= 1024 else 64 if rsize >= 256 else 32
    g = max(min(g, tmax), min(ren.warp_size or 1, tmax))   # at least a warp: a partial warp idles lanes
    u = 4 if contig_r and rsize >= 8 * g else 1
    if rsize % (g * u):
      if not apply(k, OptOps.PADTO, r, g * u, ("reduce",)):
        g, u = pow2_divisor(rsize, g), 1
    if u > 1: apply(k, OptOps.UNROLL, r, u, ("reduce",))
    if g >= 8 and apply(k, OptOps.GROUP, r, g, ("reduce",)):
      # a small group: several outputs per workgroup (neighbours in the output)
      if out_axes and k.threads < 128:
        o = out_axes[-1]
        l = pow2_divisor(size_of(k, o, ("loop",)), 128 // k.threads)
        if l > 1: apply(k, OptOps.LOCAL, o, l, ("loop",))
      return
  if not out_axes: return
  # a thread per output: neighbouring threads on the output axis the loads walk contiguously
  o = next((a for a in reversed(out_axes) if _contiguous(loads, a)), out_axes[-1])
  if contig_r and rsize % 4 == 0 and rsize >= 16: apply(k, OptOps.UNROLL, r, 4, ("reduce",))
  lsz = fit(k, o, ("loop",), tmax, ren.warp_size or 32)
  if lsz > 1: apply(k, OptOps.LOCAL, o, lsz, ("loop",))

def _operands(k: Kernel, reuse: list[int], loads: list, stores: list) -> tuple[int, int] | None:
  """(m, n) of a matmul-like kernel: n the reuse axis the stores walk contiguously, m a reuse axis along which the
  operand that moves with n stands still (cout of a convolution, the rows of a matmul)."""
  n = next((a for a in reversed(reuse) if _contiguous(stores, a)), reuse[-1])
  movers = [s for s in loads if s[n] != 0]
  m = next((a for a in reversed(reuse) if a != n and movers and all(s[a] == 0 for s in movers)), None)
  if m is None: m = next((a for a in reversed(reuse) if a != n), None)
  return None if m is None else (m, n)

def _tile(size: int, big: int) -> tuple[int, int]:
  """(threads, lanes) along one output axis of a matmul tile."""
  up = 8 if size >= 1024 else 4 if size >= 64 else 2 if size >= 32 else 1
  return min(16, max(1, 1 << max(0, (size // up - 1).bit_length()))), up

def _tc_tile(size: int, frag: int, big: int, warps: int = 2) -> tuple[int, int]:
  """(warps, fragments a warp) along one output axis of a tensor-core tile."""
  if size >= 256: return warps, big
  if size >= 64: return 2, max(1, big // 2)
  return 1, max(1, min(big // 2, 1 << max(0, (-(-size // frag) - 1).bit_length())))

def _tensor_cores(k: Kernel, ren: Renderer) -> bool:
  """Tensor cores where the target has one for the operands' dtype: 2x2 warps, each a register tile of fragments,
  operand tiles staged in shared memory per 32-wide step of the reduction. Not when padding to the fragment shape
  would waste more than half the work."""
  from baregrad.codegen.tc import usable
  ops = k.tc_operands()
  if ops is None: return False
  m, n, r, la, lb = ops
  # a convolution's window loops (kh, kw) around the fragments, with their masked loads, spill every register as
  # lowered today (ptxas -v: 1.6 KB a thread for a ResNet 3x3): tensor cores for plain matmuls only (BEAM may still try)
  if any(a.kind == "reduce" and a.orig != r for a in k.axes): return False
  cands = [i for i, tc in enumerate(ren.tensor_cores) if tc.dtype_in == la.dtype == lb.dtype and usable(tc)]
  if not cands: return False
  # wgmma: N = 128 where B is stored k-contiguous (read K-major) and N fills it, else N = 64 (B read MN-major takes 64)
  wg = sorted((i for i in cands if ren.tensor_cores[i].desc), key=lambda i: -ren.tensor_cores[i].dims[1])
  kmajor_b = lb.src[1].arg.real_strides()[r] == 1
  wg = [i for i in wg if ren.tensor_cores[i].dims[1] == 64 or (kmajor_b and k.full_shape[n] >= ren.tensor_cores[i].dims[1])]
  if wg and _wgmma(k, ren, wg[0], m, n, r, la.src[1].arg.real_strides()[m] == 1 and la.src[1].arg.real_strides()[r] != 1):
    return True
  cands = [i for i in cands if not ren.tensor_cores[i].desc]
  if not cands: return False
  # the widest unit along N the output fills (mma.sync pairs: one ldmatrix.x4 feeds B of two instructions)
  wide = [i for i in cands if ren.tensor_cores[i].dims[1] * 4 <= k.full_shape[n]]
  pick = max(wide or cands[:1], key=lambda i: ren.tensor_cores[i].dims[1])
  tc = ren.tensor_cores[pick]
  # fragments a warp: its accumulators and operand fragments (32-bit words a thread) within 3/4 of the declared
  # registers (the rest: addresses, the staged tiles' bookkeeping); up to a 64x64 warp tile (4x4 m16n16 units: 128
  # accumulators, 4 mma.sync per ldmatrix), 2x2 warps = a 128x128 block tile
  regs = ren.regs_per_thread or 255
  words = lambda r, c, isz: r * c * isz // 4 // tc.threads   # noqa: E731
  cw, aw, bw = (words(tc.dims[0], tc.dims[1], 4), words(tc.dims[0], tc.dims[2], tc.dtype_in.itemsize),
                words(tc.dims[2], tc.dims[1], tc.dtype_in.itemsize))
  um_max, un_max = 4, max(1, 64 // tc.dims[1])
  while um_max * un_max * cw + um_max * aw + un_max * bw > regs * 3 // 4 and un_max > 1: un_max //= 2
  (wm, um), (wn, un) = _tc_tile(k.full_shape[m], tc.dims[0], um_max), _tc_tile(k.full_shape[n], tc.dims[1], un_max)
  tiles = {m: wm * um * tc.dims[0], n: wn * un * tc.dims[1], r: 2 * tc.dims[2] if k.full_shape[r] > tc.dims[2] else tc.dims[2]}
  padded = prod(-(-k.full_shape[o] // t) * t for o, t in tiles.items())
  if padded > 1.5 * prod(k.full_shape[o] for o in tiles): return False
  for o, t in tiles.items():
    if k.full_shape[o] % t and not apply(k, OptOps.PADTO, o, t, ("loop", "reduce")): return False
  try: k.apply_opt(Opt(OptOps.TC, pick))
  except OptError: return False
  for o, u in ((m, um), (n, un)):
    if u > 1: apply(k, OptOps.UPCAST, o, u, ("loop",))
  for o, w in ((m, wm), (n, wn)):
    if w > 1: apply(k, OptOps.LOCAL, o, w, ("loop",))
  if size_of(k, r, ("reduce",)) > 1 and tiles[r] > tc.dims[2]: apply(k, OptOps.SPLIT, r, tiles[r] // tc.dims[2], ("reduce",))
  # (a reduction of one k tile leaves no loop to stage the tiles in: its operands are read straight from global memory;
  # staged, the kernel failed to lower: a half (m, 16) @ (16, n))
  if ren.shared_max and k.stage_axis() is not None:
    # the deepest cp.async pipeline (up to 4 stages: the copies of three k-steps in flight) whose tiles all fit the
    # shared memory the target allows a block (above 48 KB: dynamic shared memory, where the device declared its limit)
    cands = list(range(len(k.stage_candidates())))
    stages = next((s for s in (4, 3, 2) if sum(k.stage_bytes(j, s) for j in cands) <= ren.shared_max), 0) if k.async_copy else 0
    used = 0
    for j in cands:
      b = k.stage_bytes(j, stages or None)
      if b and used + b <= ren.shared_max and apply_smem(k, j, stages): used += b
  return True

def WIDE_N() -> bool:
  """Whether sm_90a wgmma kernels with two warpgroups take 256-wide tiles along N (NV_WGMMA_N256, default on)."""
  from baregrad import knobs
  return bool(knobs.read("NV_WGMMA_N256"))

def _wgmma(k: Kernel, ren: Renderer, pick: int, m: int, n: int, r: int, mn_major_a: bool) -> bool:
  """sm_90a wgmma (a TensorCore read through matrix descriptors): one or two warpgroups along M, each a 64 x N tile
  (N the instruction's; with two, and N of the output at least 256, 256 // N instructions side by side along N: a
  128 x 256 block tile), the operand tiles staged 64 k values a step (one 128-byte swizzled row of 16-bit values, the
  layout wgmma reads: codegen/tc_lower.py wgmma_desc) in the deepest cp.async pipeline that fits. An A stored
  m-contiguous is staged in rows of its m coordinate, which must then be one 64-value row: one warpgroup. Not when
  padding would waste more than half the work, or the tiles do not fit shared memory (the mma.sync path is tried
  then)."""
  tc = ren.tensor_cores[pick]
  wm = 2 if k.full_shape[m] > tc.dims[0] and not mn_major_a else 1
  # two warpgroups along M: each a 64 x 256 tile (the 128 x 256 block tile), 256 // N instructions along N per k-step
  un = 256 // tc.dims[1] if wm == 2 and k.full_shape[n] >= 256 and WIDE_N() else 1
  tiles = {m: wm * tc.dims[0], n: un * tc.dims[1], r: 64}
  padded = prod(-(-k.full_shape[o] // t) * t for o, t in tiles.items())
  # (a reduction of one 64-wide step leaves no stage loop around the tile: mma.sync takes it)
  if padded > 1.5 * prod(k.full_shape[o] for o in tiles) or k.full_shape[r] <= tiles[r]: return False
  isz = tc.dtype_in.itemsize
  per_stage = (tiles[m] + tiles[n]) * tiles[r] * isz
  stages = next((st for st in (4, 3, 2) if st * per_stage <= ren.shared_max), 0)
  if not stages or not k.async_copy: return False
  def opts(kk: Kernel) -> bool:
    for o, t in tiles.items():
      if kk.full_shape[o] % t and not apply(kk, OptOps.PADTO, o, t, ("loop", "reduce")): return False
    try: kk.apply_opt(Opt(OptOps.TC, pick))
    except OptError: return False
    if un > 1 and not apply(kk, OptOps.UPCAST, n, un, ("loop",)): return False
    if wm > 1 and not apply(kk, OptOps.LOCAL, m, wm, ("loop",)): return False
    if size_of(kk, r, ("reduce",)) > 1 and not apply(kk, OptOps.SPLIT, r, tiles[r] // tc.dims[2], ("reduce",)): return False
    return all(apply_smem(kk, j, stages) for j in range(len(kk.stage_candidates())))
  # first on a copy, lowered: a tile the descriptors cannot read (wgmma_desc) leaves k as it was for mma.sync
  trial = Kernel(k.ast, k.name, k.max_parallel, gpu=True, ren=ren)
  try:
    for o in k.applied: trial.apply_opt(o)
    if not opts(trial): return False
    trial.lower()
  except OptError: return False
  return opts(k)

def apply_smem(k: Kernel, j: int, stages: int = 0) -> bool:
  try: k.apply_opt(Opt(OptOps.SMEM, j, stages)); return True
  except OptError: return False

def _matmul(k: Kernel, ren: Renderer, reuse: list[int], red_axes: list[int], loads: list, stores: list) -> bool:
  """Tensor cores if the target has a matching one; else register tiles (up to 8x8 outputs a thread) on 16x16
  threads, the reduction stepping through tiles of the operands staged in shared memory (SMEM) when they fit."""
  if ren.tensor_cores and _tensor_cores(k, ren): return True
  mn = _operands(k, reuse, loads, stores)
  if mn is None: return False
  m, n = mn
  r = max(red_axes, key=lambda a: k.full_shape[a])
  (tn, un), (tm, um) = _tile(k.full_shape[n], 128), _tile(k.full_shape[m], 128)
  while ren.regs_per_thread and um * un > ren.regs_per_thread // 4 and max(um, un) > 1:   # accumulators: a quarter of the registers
    if un >= um: un //= 2
    else: um //= 2
  for ax, tile in ((n, tn * un), (m, tm * um)):
    if k.full_shape[ax] % tile: apply(k, OptOps.PADTO, ax, tile, ("loop",))
  bk = 8 if k.full_shape[r] >= 16 else 0
  if bk and k.full_shape[r] % bk: apply(k, OptOps.PADTO, r, bk, ("reduce",))
  for ax, up in ((n, un), (m, um)):
    if up > 1 and size_of(k, ax, ("loop",)) % up == 0: apply(k, OptOps.UPCAST, ax, up, ("loop",))
  for ax, t in ((n, tn), (m, tm)):
    l = pow2_divisor(size_of(k, ax, ("loop",)), t)
    if l > 1: apply(k, OptOps.LOCAL, ax, l, ("loop",))
  if bk and size_of(k, r, ("reduce",)) > bk: apply(k, OptOps.SPLIT, r, bk, ("reduce",))
  # a target with a texture path reads the operands as images (_images) instead: the texture cache serves the reuse
  if ren.shared_max and not k.has_images:
    used = 0
    for j in range(len(k.stage_candidates())):
      b = k.stage_bytes(j)
      if b and k.stage_reuse(j) and used + b <= ren.shared_max:
        try: k.apply_opt(Opt(OptOps.SMEM, j)); used += b
        except OptError: pass
  return True

def _grid(k: Kernel, ren: Renderer, keep: set[int] = set()) -> None:   # noqa: B006 (never changed)
  """The remaining output loops go on the grid, innermost first (x), within the grid's limits per dimension; those of
  the axes in `keep` stay loops."""
  limits = list(ren.global_max)
  while limits:
    loops = k.loop_axes()
    cand = [n for n, i in enumerate(loops) if k.axes[i].kind == "loop" and k.axes[i].orig not in keep]
    if not cand: break
    n = cand[-1]
    if k.axes[loops[n]].size > limits[0]: break
    try: k.apply_opt(Opt(OptOps.PARALLEL, n))
    except OptError: break
    limits.pop(0)
