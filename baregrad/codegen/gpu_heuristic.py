"""Default opts for targets with workgroups (GPUs), chosen from what the renderer declares (threads per workgroup,
shared memory, warp size, multiprocessors, tensor cores), never from which device it is.

Shapes it aims for:
- elementwise: 4 lanes per thread along the axis the stores walk contiguously (128-bit accesses where aligned),
  up to 256 threads per workgroup over it, the rest of the output on the grid;
- reduction: when the reduced axis is contiguous or the outputs are too few to fill the device, a workgroup of up to
  256 threads shares each output (GROUP) and every thread reads 4 neighbouring elements per step; otherwise one thread
  per output, neighbouring threads on neighbouring outputs;
- matmul-like (a reduction with reuse on two output axes): tensor cores where the target declares a matching shape,
  else register tiles with operand tiles staged in shared memory.
Awkward sizes are padded (PADTO) to the tile rather than falling back to tiny workgroups."""
from __future__ import annotations
from baregrad.helpers import prod
from baregrad.ir.ops import UOp, Ops
from baregrad.codegen.kernel import Kernel, Opt, OptOps, OptError
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
  if red_axes and len(reuse) >= 2 and _matmul(k, ren, reuse, red_axes, loads, stores): pass
  elif red_axes: _reduction(k, ren, out_axes, red_axes, loads, stores, n_out, tmax, cu)
  else: _elementwise(k, ren, out_axes, loads, stores, tmax, cu)
  _grid(k, ren)
  return list(k.applied)

def _contiguous(ss: list, o: int) -> bool: return any(s[o] == 1 for s in ss)

def _elementwise(k: Kernel, ren: Renderer, out_axes: list[int], loads: list, stores: list, tmax: int, cu: int) -> None:
  if not out_axes: return
  o = next((a for a in reversed(out_axes) if _contiguous(stores, a)), out_axes[-1])
  n_out = prod(k.full_shape[a] for a in out_axes)
  # 4 lanes a thread where the memory is contiguous and there is work enough to keep every multiprocessor busy
  if (_contiguous(stores, o) or _contiguous(loads, o)) and n_out >= 4 * 128 * cu and size_of(k, o, ("loop",)) % 4 == 0:
    apply(k, OptOps.UPCAST, o, 4, ("loop",))
  lsz = fit(k, o, ("loop",), tmax, 32)
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
    g = min(g, tmax)
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
  lsz = fit(k, o, ("loop",), tmax, 32)
  if lsz > 1: apply(k, OptOps.LOCAL, o, lsz, ("loop",))

def _matmul(k: Kernel, ren: Renderer, reuse: list[int], red_axes: list[int], loads: list, stores: list) -> bool:
  """Register tiles: 4x4 outputs per thread, 16x16 threads, the reduction unrolled by 4."""
  n = next((a for a in reversed(reuse) if _contiguous(stores, a)), reuse[-1])
  m = next(a for a in reversed(reuse) if a != n)
  r = red_axes[-1]
  for ax, tile in ((n, 64), (m, 64)):
    s = size_of(k, ax, ("loop",))
    if s % tile and s > tile // 2: apply(k, OptOps.PADTO, ax, tile, ("loop",))
  for ax in (n, m):
    if size_of(k, ax, ("loop",)) % 4 == 0: apply(k, OptOps.UPCAST, ax, 4, ("loop",))
  for ax in (n, m):
    l = pow2_divisor(size_of(k, ax, ("loop",)), 16)
    if l > 1: apply(k, OptOps.LOCAL, ax, l, ("loop",))
  if size_of(k, r, ("reduce",)) % 4 == 0: apply(k, OptOps.UNROLL, r, 4, ("reduce",))
  return True

def _grid(k: Kernel, ren: Renderer) -> None:
  """The remaining output loops go on the grid, innermost first (x), within the grid's limits per dimension."""
  limits = list(ren.global_max)
  while limits:
    loops = k.loop_axes()
    cand = [n for n, i in enumerate(loops) if k.axes[i].kind == "loop"]
    if not cand: break
    n = cand[-1]
    if k.axes[loops[n]].size > limits[0]: break
    try: k.apply_opt(Opt(OptOps.PARALLEL, n))
    except OptError: break
    limits.pop(0)
