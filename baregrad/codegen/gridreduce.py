"""Grid-wide reductions: a long reduction with few outputs is split into two kernels so it spreads over every
multiprocessor of the device (a GPU's SMs or CUs, a CPU's threads).

    stage 1: out_partial[o, p] = reduce(x[o, p*inner : (p+1)*inner])        P partials per output, P*outputs workgroups
    stage 2: out[o] = post(reduce(out_partial[o, :]))                          the AST's elementwise tail stays here

The reduced axis is padded up to a multiple of P where it does not divide; the padding feeds the reduction its identity
(0 for sums, 1 for products, the lowest value for max). (A CPU splits a prefix of whole chunks instead, and reduces
the tail in stage 2: _split_prefix.) A kernel with several reductions (softmax's max then sum, a
norm's mean then variance) first gets its inner reductions realized into their own (split) kernels, so each one is
spread the same way. Results are exact for integers and reassociated (like any parallel reduction) for floats.

Split: targets that declare workgroups and a number of compute units (Renderer.has_local, compute_units), and CPUs
that run a parallel axis over more than one thread (has_threads, compute_units = the threads). A CPU's partials are
longer: each is a chunk of the pool's work (a handoff costs a few us, the second kernel an eager launch), and one core
streams only part of the memory bandwidth the cores do together (a 16M-float sum: one kernel on one thread ran at
NumPy's speed)."""
from __future__ import annotations
import functools
from dataclasses import dataclass, field
from typing import Callable
from baregrad.helpers import prod
from baregrad.ir.dtype import DType, dtypes
from baregrad.ir.ops import UOp, Ops, identity_element
from baregrad.ir.view import ShapeTracker
from baregrad.codegen.kernel import verify_ast
from baregrad.ir.sint import ints, ints_or_none
from baregrad.codegen.astbuild import gbuf, view

MIN_REDUCE = 1 << 14      # shorter reductions run in one workgroup (a GROUP of 256 threads takes them in a few steps)
MIN_PER_PARTIAL = 2048    # elements each stage-1 output reduces at least
CPU_MIN_REDUCE = 1 << 21        # a CPU sums 2M floats in ~0.5 ms on one core; at 1M a second launch ate the gain
CPU_MIN_PER_PARTIAL = 1 << 17   # elements per CPU partial (~40 us of one core's streaming)

@dataclass
class SplitPlan:
  """Kernels in order; each AST numbers its buffers densely from 0 (0 is written), `bufs[i]` is the plan-wide id of
  its buffer i: ids below `n_orig` are the original AST's buffers, the rest index `temps` (elements, dtype)."""
  n_orig: int
  kernels: list[tuple[UOp, tuple[int, ...]]] = field(default_factory=list)
  temps: list[tuple[int, DType]] = field(default_factory=list)

def _partials(full: tuple[int, ...], axes: tuple[int, ...], compute_units: int, cpu: bool) -> tuple[int, int] | None:
  """(reduced axis to split, partial count P), or None when one workgroup (a CPU: one thread) per output already fills
  the device."""
  n_out = prod(s for i, s in enumerate(full) if i not in axes)
  a = max(axes, key=lambda i: full[i])
  n = full[a]
  min_reduce, min_part = (CPU_MIN_REDUCE, CPU_MIN_PER_PARTIAL) if cpu else (MIN_REDUCE, MIN_PER_PARTIAL)
  if n < min_reduce or n_out >= 2 * compute_units: return None
  p = 1
  while p * 2 * n_out <= 4 * compute_units and p * 2 * min_part <= n: p *= 2
  return (a, p) if p >= 2 else None

def _renumber(ast: UOp) -> tuple[UOp, tuple[int, ...]]:
  """Dense buffer numbers (the written buffer first): the AST and, per new number, the old one."""
  gl = sorted({u.arg for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL})
  outs = sorted({st.src[0].arg for st in ast.src})
  order = outs + [g for g in gl if g not in outs]
  sub = {u: UOp(Ops.DEFINE_GLOBAL, u.dtype, (), order.index(u.arg)) for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL}
  return ast.substitute(sub), tuple(order)

def _shape_of(u: UOp, ndim: int) -> tuple[int, ...]:
  shapes = [x.arg.shape for x in u.toposort() if x.op is Ops.VIEW]
  return tuple(max((s[i] for s in shapes), default=1) for i in range(ndim))

def spreads(ishape: tuple[int, ...], axes: tuple[int, ...], ren: object) -> bool:
  """Whether a reduction of ishape over axes is long enough, with outputs few enough, that split_reduce spreads it over
  the device (the scheduler keeps such a reduction in a kernel of its own rather than fusing it per row)."""
  cu = int(getattr(ren, "compute_units", 0) or 0)
  if getattr(ren, "has_local", False) and cu > 0: return _partials(ishape, axes, cu, False) is not None
  if getattr(ren, "has_threads", False) and cu > 1: return _partials(ishape, axes, cu, True) is not None
  return False

def split_reduce(ast: UOp, ren: object) -> SplitPlan | None:
  """The kernels that compute `ast` with its long reductions spread over the device, or None to keep it whole."""
  cu = int(getattr(ren, "compute_units", 0) or 0)
  if getattr(ren, "has_local", False) and cu > 0: return _split_cached(ast, cu, False)
  if getattr(ren, "has_threads", False) and cu > 1: return _split_cached(ast, cu, True)
  return None

@functools.lru_cache(maxsize=4096)
def _split_cached(ast: UOp, cu: int, cpu: bool) -> SplitPlan | None:
  # every eager op asks (UOps are hash-consed: the same kernel is the same key), and a walk of the AST costs tens of us
  red = [u for u in ast.toposort() if u.op is Ops.REDUCE_AXIS]
  if not red: return None
  if (full := ints_or_none(verify_ast(ast))) is None: return None   # (symbolic sizes: one loop, never split over the grid)
  if _partials(full, red[0].arg[1], cu, cpu) is None: return None
  nb = max(u.arg for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL) + 1
  plan = SplitPlan(nb)
  _split(ast, tuple(range(nb)), plan, cu, cpu)
  return plan

def new_temp(plan: SplitPlan, n: int, dt: DType) -> int:
  """A temporary buffer of n elements for the plan's kernels: its plan-wide id."""
  plan.temps.append((n, dt))
  return plan.n_orig + len(plan.temps) - 1

def emit(plan: SplitPlan, ast: UOp, ids: tuple[int, ...]) -> None:
  """Append a kernel whose buffer i is plan-wide id ids[i] (its buffers renumbered densely, the written one first)."""
  local, order = _renumber(ast)
  plan.kernels.append((local, tuple(ids[o] for o in order)))

def _split(ast: UOp, ids: tuple[int, ...], plan: SplitPlan, cu: int, cpu: bool) -> None:
  """ast numbers its buffers into `ids` (plan-wide); append its kernels to the plan."""
  red = [u for u in ast.toposort() if u.op is Ops.REDUCE_AXIS]
  if (full := ints_or_none(verify_ast(ast))) is None: return None   # (symbolic sizes: one loop, never split over the grid)
  if not red or (pa := _partials(full, red[0].arg[1], cu, cpu)) is None:
    emit(plan, ast, ids)
    return
  nloc = len(ids)
  if len(red) > 1:
    # the innermost reduction (it contains no other) is realized first, then read by the rest
    r0 = red[0]
    shp = tuple(1 if i in r0.arg[1] else s for i, s in enumerate(_shape_of(r0, len(full))))
    t = new_temp(plan, prod(shp), r0.dtype)
    _split(UOp(Ops.SINK, src=(UOp(Ops.STORE, src=(gbuf(nloc, r0.dtype), view(shp), r0)),)), ids + (t,), plan, cu, cpu)
    rest = ast.substitute({r0: UOp(Ops.LOAD, r0.dtype, (gbuf(nloc, r0.dtype), view(shp)))})
    _split(rest, ids + (t,), plan, cu, cpu)
    return
  r = red[0]
  a, p = pa
  n = full[a]
  if cpu:
    _split_prefix(ast, ids, plan, r, full, a, p, nloc)
    return
  inner = -(-n // p)
  pad = inner * p - n
  def reshape(st: ShapeTracker) -> ShapeTracker:
    sh = ints(st.shape)
    if sh[a] == 1: return st.reshape(sh[:a] + (1, 1) + sh[a + 1:])
    if pad: st = st.pad(_at(len(sh), a, (0, pad)))
    return st.reshape(sh[:a] + (p, inner) + sh[a + 1:])
  src = moved_views(r.src[0], reshape)
  if pad:  # the padding must not change the result: the reduction sees its identity there
    vshape = tuple(n if i == a else 1 for i in range(len(full)))
    valid = UOp(Ops.CONST, dtypes.bool, (view(reshape(ShapeTracker.from_shape(vshape))),), True)
    src = valid.where(src, _identity(r))
  t, shape2 = _emit_partials(plan, ids, r, src, full, a, p, inner, nloc)
  part = UOp(Ops.REDUCE_AXIS, r.dtype, (UOp(Ops.LOAD, r.dtype, (gbuf(nloc, r.dtype), view(shape2))),), r.arg)
  emit(plan, ast.substitute({r: part}), ids + (t,))

def _at(ndim: int, a: int, pair: tuple[int, int]) -> tuple[tuple[int, int], ...]:
  """Pad arguments: `pair` on axis a, nothing elsewhere."""
  return tuple(pair if i == a else (0, 0) for i in range(ndim))

def moved_views(u: UOp, f: Callable[[ShapeTracker], ShapeTracker]) -> UOp:
  """u with every view in it replaced by f(view) (public: codegen/rowstream moves views the same way)."""
  return u.substitute({v: UOp(Ops.VIEW, src=(), arg=f(v.arg)) for v in u.toposort() if v.op is Ops.VIEW})

def _identity(r: UOp) -> UOp: return UOp.const(r.dtype, identity_element(r.arg[0], r.dtype.scalar))

def _emit_partials(plan: SplitPlan, ids: tuple[int, ...], r: UOp, src: UOp, full: tuple[int, ...], a: int, p: int, inner: int,
                   nloc: int) -> tuple[int, tuple[int, ...]]:
  """Stage 1: reduce `src` (axis a already cut into (p, inner)) into a temporary of P partials per output. Returns the
  temporary's id and the shape stage 2 reads it in (axis a: the P partials)."""
  axes1 = tuple(sorted({a + 1} | {x + (x > a) for x in r.arg[1] if x != a}))
  shape1 = tuple(1 if i in axes1 else s for i, s in enumerate(full[:a] + (p, inner) + full[a + 1:]))
  t = new_temp(plan, prod(shape1), r.dtype)
  stage1 = UOp(Ops.SINK, src=(UOp(Ops.STORE, src=(gbuf(nloc, r.dtype), view(shape1), UOp(Ops.REDUCE_AXIS, r.dtype, (src,), (r.arg[0], axes1)))),))
  emit(plan, stage1, ids + (t,))
  return t, tuple(p if i == a else 1 if i in r.arg[1] else s for i, s in enumerate(full))

CPU_PARTIAL_ALIGN = 1024   # a CPU partial's length is a multiple of this: its loop vectorizes without edge masks

def _split_prefix(ast: UOp, ids: tuple[int, ...], plan: SplitPlan, r: UOp, full: tuple[int, ...], a: int, p: int, nloc: int) -> None:
  """The CPU's split: P partials over a prefix of whole aligned chunks (no padding: a padded stage 1 masks every
  element, ~10x slower on a CPU), and the few elements past it reduced in stage 2 together with the partials (their
  axis there is P partials followed by the tail: each region reads its own source, the other is masked off)."""
  n = full[a]
  inner = n // p // CPU_PARTIAL_ALIGN * CPU_PARTIAL_ALIGN
  pre, rem = p * inner, n - p * inner
  nd = len(full)
  def prefix(st: ShapeTracker) -> ShapeTracker:
    sh = ints(st.shape)
    if sh[a] == 1: return st.reshape(sh[:a] + (1, 1) + sh[a + 1:])   # (broadcast along the axis: stays so)
    return st.shrink(tuple((0, pre) if i == a else (0, s) for i, s in enumerate(sh))).reshape(sh[:a] + (p, inner) + sh[a + 1:])
  def tail(st: ShapeTracker) -> ShapeTracker:
    sh = ints(st.shape)
    return st if sh[a] == 1 else st.shrink(tuple((pre, n) if i == a else (0, s) for i, s in enumerate(sh))).pad(_at(nd, a, (p, 0)))
  t, shape2 = _emit_partials(plan, ids, r, moved_views(r.src[0], prefix), full, a, p, inner, nloc)
  val = UOp(Ops.LOAD, r.dtype, (gbuf(nloc, r.dtype), view(shape2)))
  if rem:
    # axis a of stage 2: the P partials, then the tail of the source. The tail keeps the extent of the other reduced
    # axes, where the partials have one element: they are read at index 0 of those axes only, and every element
    # that is in neither region is the reduction's identity
    shape2t = tuple(p + rem if i == a else full[i] if i in r.arg[1] else s for i, s in enumerate(shape2))
    grow = tuple((0, rem) if i == a else (0, full[i] - 1) if i in r.arg[1] else (0, 0) for i in range(nd))
    part = UOp(Ops.LOAD, r.dtype, (gbuf(nloc, r.dtype), view(ShapeTracker.from_shape(shape2).pad(grow))))
    ones = tuple(p if i == a else 1 for i in range(nd))
    in_partials = UOp(Ops.CONST, dtypes.bool, (view(ShapeTracker.from_shape(ones).pad(grow).expand(shape2t)),), True)
    tshape = tuple(rem if i == a else full[i] if i in r.arg[1] else 1 for i in range(nd))
    in_tail = UOp(Ops.CONST, dtypes.bool, (view(ShapeTracker.from_shape(tshape).pad(_at(nd, a, (p, 0))).expand(shape2t)),), True)
    val = in_partials.where(part, in_tail.where(moved_views(r.src[0], tail), _identity(r)))
  emit(plan, ast.substitute({r: UOp(Ops.REDUCE_AXIS, r.dtype, (val,), r.arg)}), ids + (t,))
