"""Grid-wide reductions: a long reduction with few outputs is split into two kernels so it spreads over every
multiprocessor of the device.

    stage 1: out_partial[o, p] = reduce(x[o, p*inner : (p+1)*inner])        P partials per output, P*outputs workgroups
    stage 2: out[o] = post(reduce(out_partial[o, :]))                          the AST's elementwise tail stays here

The reduced axis is padded up to a multiple of P where it does not divide; the padding feeds the reduction its identity
(0 for sums, 1 for products, the lowest value for max). A kernel with several reductions (softmax's max then sum, a
norm's mean then variance) first gets its inner reductions realized into their own (split) kernels, so each one is
spread the same way. Results are exact for integers and reassociated (like any parallel reduction) for floats.

Only targets that declare workgroups and a number of compute units (Renderer.has_local, compute_units) are split."""
from __future__ import annotations
import functools
from dataclasses import dataclass, field
from baregrad.helpers import prod
from baregrad.ir.dtype import DType, dtypes
from baregrad.ir.ops import UOp, Ops, identity_element
from baregrad.ir.view import ShapeTracker
from baregrad.codegen.kernel import verify_ast
from baregrad.codegen.astbuild import gbuf, view

MIN_REDUCE = 1 << 14      # shorter reductions run in one workgroup (a GROUP of 256 threads takes them in a few steps)
MIN_PER_PARTIAL = 2048    # elements each stage-1 output reduces at least

@dataclass
class SplitPlan:
  """Kernels in order; each AST numbers its buffers densely from 0 (0 is written), `bufs[i]` is the plan-wide id of
  its buffer i: ids below `n_orig` are the original AST's buffers, the rest index `temps` (elements, dtype)."""
  n_orig: int
  kernels: list[tuple[UOp, tuple[int, ...]]] = field(default_factory=list)
  temps: list[tuple[int, DType]] = field(default_factory=list)

def _partials(full: tuple[int, ...], axes: tuple[int, ...], compute_units: int) -> tuple[int, int] | None:
  """(reduced axis to split, partial count P), or None when one workgroup per output already fills the device."""
  n_out = prod(s for i, s in enumerate(full) if i not in axes)
  a = max(axes, key=lambda i: full[i])
  n = full[a]
  if n < MIN_REDUCE or n_out >= 2 * compute_units: return None
  p = 1
  while p * 2 * n_out <= 4 * compute_units and p * 2 * MIN_PER_PARTIAL <= n: p *= 2
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

def split_reduce(ast: UOp, ren: object) -> SplitPlan | None:
  """The kernels that compute `ast` with its long reductions spread over the device, or None to keep it whole."""
  cu = int(getattr(ren, "compute_units", 0) or 0)
  if not getattr(ren, "has_local", False) or cu <= 0: return None
  return _split_cached(ast, cu)

@functools.lru_cache(maxsize=4096)
def _split_cached(ast: UOp, cu: int) -> SplitPlan | None:
  # every eager op asks (UOps are hash-consed: the same kernel is the same key), and a walk of the AST costs tens of us
  red = [u for u in ast.toposort() if u.op is Ops.REDUCE_AXIS]
  if not red: return None
  full = verify_ast(ast)
  if _partials(full, red[0].arg[1], cu) is None: return None
  nb = max(u.arg for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL) + 1
  plan = SplitPlan(nb)
  _split(ast, tuple(range(nb)), plan, cu)
  return plan

def new_temp(plan: SplitPlan, n: int, dt: DType) -> int:
  """A temporary buffer of n elements for the plan's kernels: its plan-wide id."""
  plan.temps.append((n, dt))
  return plan.n_orig + len(plan.temps) - 1

def emit(plan: SplitPlan, ast: UOp, ids: tuple[int, ...]) -> None:
  """Append a kernel whose buffer i is plan-wide id ids[i] (its buffers renumbered densely, the written one first)."""
  local, order = _renumber(ast)
  plan.kernels.append((local, tuple(ids[o] for o in order)))

def _split(ast: UOp, ids: tuple[int, ...], plan: SplitPlan, cu: int) -> None:
  """ast numbers its buffers into `ids` (plan-wide); append its kernels to the plan."""
  red = [u for u in ast.toposort() if u.op is Ops.REDUCE_AXIS]
  full = verify_ast(ast)
  if not red or (pa := _partials(full, red[0].arg[1], cu)) is None:
    emit(plan, ast, ids)
    return
  nloc = len(ids)
  if len(red) > 1:
    # the innermost reduction (it contains no other) is realized first, then read by the rest
    r0 = red[0]
    shp = tuple(1 if i in r0.arg[1] else s for i, s in enumerate(_shape_of(r0, len(full))))
    t = new_temp(plan, prod(shp), r0.dtype)
    _split(UOp(Ops.SINK, src=(UOp(Ops.STORE, src=(gbuf(nloc, r0.dtype), view(shp), r0)),)), ids + (t,), plan, cu)
    rest = ast.substitute({r0: UOp(Ops.LOAD, r0.dtype, (gbuf(nloc, r0.dtype), view(shp)))})
    _split(rest, ids + (t,), plan, cu)
    return
  r = red[0]
  a, p = pa
  n = full[a]
  inner = -(-n // p)
  pad = inner * p - n
  def reshape(st: ShapeTracker) -> ShapeTracker:
    sh = st.shape
    if sh[a] == 1: return st.reshape(sh[:a] + (1, 1) + sh[a + 1:])
    if pad: st = st.pad(tuple((0, pad) if i == a else (0, 0) for i in range(len(sh))))
    return st.reshape(sh[:a] + (p, inner) + sh[a + 1:])
  src = r.src[0].substitute({v: UOp(Ops.VIEW, src=(), arg=reshape(v.arg)) for v in r.src[0].toposort() if v.op is Ops.VIEW})
  if pad:  # the padding must not change the result: the reduction sees its identity there
    vshape = tuple(n if i == a else 1 for i in range(len(full)))
    valid = UOp(Ops.CONST, dtypes.bool, (view(reshape(ShapeTracker.from_shape(vshape))),), True)
    src = valid.where(src, UOp.const(src.dtype, identity_element(r.arg[0], src.dtype.scalar)))
  axes1 = tuple(sorted({a + 1} | {x + (x > a) for x in r.arg[1] if x != a}))
  shape1 = tuple(1 if i in axes1 else s for i, s in enumerate(full[:a] + (p, inner) + full[a + 1:]))
  t = new_temp(plan, prod(shape1), r.dtype)
  stage1 = UOp(Ops.SINK, src=(UOp(Ops.STORE, src=(gbuf(nloc, r.dtype), view(shape1), UOp(Ops.REDUCE_AXIS, r.dtype, (src,), (r.arg[0], axes1)))),))
  emit(plan, stage1, ids + (t,))
  shape2 = tuple(p if i == a else 1 if i in r.arg[1] else s for i, s in enumerate(full))
  part = UOp(Ops.REDUCE_AXIS, r.dtype, (UOp(Ops.LOAD, r.dtype, (gbuf(nloc, r.dtype), view(shape2))),), r.arg)
  emit(plan, ast.substitute({r: part}), ids + (t,))
