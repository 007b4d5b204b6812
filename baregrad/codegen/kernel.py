"""A kernel AST and its iteration space; optimization actions as data; lowering to index arithmetic over ranges.

Kernel AST (what the scheduler hands the codegen):
  SINK(STORE(DEFINE_GLOBAL, VIEW(ShapeTracker), value), ...)
  value := LOAD(DEFINE_GLOBAL, VIEW) | CONST [VIEW] | ALU(value...) | CAST/BITCAST(value) | REDUCE_AXIS(value, arg=(op, axes))
Every VIEW has the same number of dimensions; the iteration space (full shape) is their per-axis maximum; an
axis where the stores have size 1 and the inputs more is reduced by a REDUCE_AXIS over it.
"""
from __future__ import annotations
from dataclasses import dataclass, field
from enum import Enum, auto
from baregrad.helpers import prod
from baregrad.ir.dtype import DType, dtypes, PtrDType
from baregrad.ir.ops import UOp, Ops, GroupOp, identity_element
from baregrad.ir.view import ShapeTracker

class KernelError(ValueError): pass
class OptError(ValueError): pass

class OptOps(Enum):
  UPCAST = auto()    # split an output axis; the inner part becomes vector lanes (registers), vectorized loads/stores
  UNROLL = auto()    # split a reduce axis; the inner part becomes lanes: several accumulators, horizontal reduce after
  SPLIT = auto()     # split any axis into two nested loops (outer, inner of `amt`): tiling, split of a reduce loop
  PARALLEL = auto()  # run an output axis over the device's threads (CPU cores); one per kernel
  LOCAL = auto()     # split an output axis; the inner part runs over a workgroup's threads (GPUs)
  def __repr__(self) -> str: return f"OptOps.{self.name}"

@dataclass(frozen=True)
class Opt:
  op: OptOps
  axis: int
  amt: int = 0   # 0: the whole axis
  def __repr__(self) -> str: return f"Opt({self.op.name}, axis={self.axis}, amt={self.amt})"

LOOP_KINDS = ("global", "local", "loop", "reduce")
LANE_KINDS = ("upcast", "unroll")

@dataclass
class Axis:
  orig: int       # which axis of the full shape it is part of
  size: int
  kind: str       # global, local, loop, reduce, upcast, unroll

def verify_ast(ast: UOp) -> tuple[int, ...]:
  """Check the AST's structure and return the full shape; errors name what is wrong."""
  if ast.op is not Ops.SINK or not ast.src: raise KernelError(f"kernel AST must be a SINK of STOREs, got {ast.op.name}")
  shapes: list[tuple[int, ...]] = []
  for st in ast.src:
    if st.op is not Ops.STORE or len(st.src) != 3 or st.src[0].op is not Ops.DEFINE_GLOBAL or st.src[1].op is not Ops.VIEW:
      raise KernelError(f"kernel AST: each SINK source must be STORE(DEFINE_GLOBAL, VIEW, value), got {st.op.name} with "
                        f"{[s.op.name for s in st.src]}")
    if isinstance(st.src[0].dtype, PtrDType) and st.src[2].dtype.scalar != st.src[0].dtype.base.scalar:
      raise KernelError(f"STORE of a {st.src[2].dtype} value into buffer {st.src[0].arg} of {st.src[0].dtype.base}: cast first")
  for u in ast.toposort():
    if u.op is Ops.VIEW:
      if not isinstance(u.arg, ShapeTracker): raise KernelError(f"VIEW arg must be a ShapeTracker, got {type(u.arg).__name__}")
      shapes.append(u.arg.shape)
    if u.op is Ops.LOAD and (len(u.src) != 2 or u.src[0].op is not Ops.DEFINE_GLOBAL or u.src[1].op is not Ops.VIEW):
      raise KernelError(f"LOAD must be LOAD(DEFINE_GLOBAL, VIEW), got sources {[s.op.name for s in u.src]}")
    if u.op is Ops.LOAD and isinstance(u.src[0].dtype, PtrDType) and u.dtype.scalar != u.src[0].dtype.base.scalar:
      raise KernelError(f"LOAD of {u.dtype} from buffer {u.src[0].arg} of {u.src[0].dtype.base}: load the buffer's dtype and cast")
    if u.op is Ops.DEFINE_GLOBAL and not isinstance(u.dtype, PtrDType): raise KernelError(f"DEFINE_GLOBAL {u.arg} must have a pointer dtype, got {u.dtype}")
    if u.op in GroupOp.ALU:
      ds = {s.dtype for s in u.src[(1 if u.op is Ops.WHERE else 0):]}
      if len(ds) > 1 and u.op not in (Ops.SHL, Ops.SHR): raise KernelError(f"{u.op.name} sources have different dtypes {sorted(map(str, ds))}: cast first")
      if u.op is Ops.WHERE and u.src[0].dtype.scalar != dtypes.bool: raise KernelError(f"WHERE condition must be bool, got {u.src[0].dtype}")
      if u.op in (Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR) and dtypes.is_float(u.dtype):
        raise KernelError(f"{u.op.name} needs an integer or bool dtype, got {u.dtype}")
      if u.op in GroupOp.Transcendental | {Ops.FDIV, Ops.RECIP} and not dtypes.is_float(u.dtype):
        raise KernelError(f"{u.op.name} needs a float dtype, got {u.dtype}")
    if u.op is Ops.BITCAST and (u.dtype.scalar == dtypes.bool or u.src[0].dtype.scalar == dtypes.bool):
      raise KernelError(f"BITCAST from {u.src[0].dtype} to {u.dtype}: bools have no defined bit pattern, use CAST")
    if u.op is Ops.REDUCE_AXIS and (not isinstance(u.arg, tuple) or u.arg[0] not in GroupOp.Reduce):
      raise KernelError(f"REDUCE_AXIS arg must be (op, axes) with op in ADD/MUL/MAX, got {u.arg!r}")
  if not shapes: raise KernelError("kernel AST has no VIEW: nothing says the iteration space")
  ndims = {len(s) for s in shapes}
  if len(ndims) != 1: raise KernelError(f"every VIEW in a kernel must have the same number of axes, got shapes {shapes}")
  # an axis of size 0 anywhere makes the iteration space empty there (a reduction over it gives the identity)
  full = tuple(0 if any(s[i] == 0 for s in shapes) else max(s[i] for s in shapes) for i in range(ndims.pop()))
  for u in ast.toposort():
    if u.op is Ops.REDUCE_AXIS and not all(isinstance(a, int) and 0 <= a < len(full) for a in u.arg[1]):
      raise KernelError(f"REDUCE_AXIS over axes {u.arg[1]}: the kernel has {len(full)} axes (shape {full})")
  for s in shapes:
    if any(a != b and a != 1 for a, b in zip(s, full)): raise KernelError(f"VIEW shape {s} does not fit the iteration space {full}")
  return full

INT32_MAX = 2 ** 31 - 1

def index_dtype(ast: UOp) -> DType:
  """int32 index arithmetic, unless a view of the kernel can reach an index past it (a buffer or an iteration space of
  more than 2^31 elements): then int64 everywhere in the kernel's index math."""
  for u in ast.toposort():
    if u.op is not Ops.VIEW: continue
    for v in u.arg.views:
      if prod(v.shape) > INT32_MAX or abs(v.offset) + sum(abs(st) * max(s - 1, 0) for s, st in zip(v.shape, v.strides)) > INT32_MAX:
        return dtypes.int64
  return dtypes.int32

def _pow_n(v: UOp, n: int) -> UOp:
  """v ** n for a static n >= 1 by squaring."""
  out, b = None, v
  while n:
    if n & 1: out = b if out is None else out * b
    n >>= 1
    if n: b = b * b
  return out if out is not None else UOp.const(v.dtype, 1)

class Kernel:
  """The AST plus how its iteration space is split into loops and lanes; `apply_opt` changes only the latter."""
  def __init__(self, ast: UOp, name: str | None = None, max_parallel: int = 1, gpu: bool = False):
    self.ast = ast
    # CPU: one axis split over threads; GPU: up to three grid axes, and workgroup (local) axes become thread ids
    self.max_parallel, self.gpu = max_parallel, gpu
    self.full_shape = verify_ast(ast)
    red: set[int] = set()
    for u in ast.toposort():
      if u.op is Ops.REDUCE_AXIS: red |= set(u.arg[1])
    for st in ast.src:
      for a in red:
        if st.src[1].arg.shape[a] != 1: raise KernelError(f"reduced axis {a} must have size 1 in the stored VIEW, got shape {st.src[1].arg.shape}")
    self.reduce_axes = red
    self.axes: list[Axis] = [Axis(i, s, "reduce" if i in red else "loop") for i, s in enumerate(self.full_shape) if s != 1]
    self.applied: list[Opt] = []
    self.name = name

  # ---- the optimizer's view: loop axes are numbered in order; lanes are not addressable by opts
  def loop_axes(self) -> list[int]: return [i for i, a in enumerate(self.axes) if a.kind in LOOP_KINDS]
  @property
  def lanes(self) -> int: return prod(a.size for a in self.axes if a.kind in LANE_KINDS)

  def apply_opt(self, opt: Opt) -> None:
    loops = self.loop_axes()
    if not 0 <= opt.axis < len(loops): raise OptError(f"{opt}: axis out of range, kernel has {len(loops)} loop axes")
    i = loops[opt.axis]
    ax = self.axes[i]
    amt = opt.amt or ax.size
    if opt.op is OptOps.PARALLEL:
      if ax.kind != "loop": raise OptError(f"{opt}: only an output loop axis can run over threads, axis is {ax.kind}")
      if sum(a.kind == "global" for a in self.axes) >= self.max_parallel:
        raise OptError(f"{opt}: the kernel already has {self.max_parallel} parallel axis(es)")
      ax.kind = "global"
    else:
      if amt < 1 or ax.size % amt != 0: raise OptError(f"{opt}: {amt} does not divide the axis size {ax.size}")
      kind = {OptOps.UPCAST: "upcast", OptOps.UNROLL: "unroll", OptOps.SPLIT: ax.kind, OptOps.LOCAL: "local"}[opt.op]
      if opt.op is OptOps.UPCAST and ax.kind not in ("loop", "global"): raise OptError(f"{opt}: UPCAST needs an output axis, axis is {ax.kind}")
      if opt.op is OptOps.UNROLL and ax.kind != "reduce": raise OptError(f"{opt}: UNROLL needs a reduce axis, axis is {ax.kind}")
      if opt.op is OptOps.LOCAL and ax.kind not in ("loop", "global"): raise OptError(f"{opt}: LOCAL needs an output axis")
      if opt.op in (OptOps.UPCAST, OptOps.UNROLL) and self.lanes * amt > 256: raise OptError(f"{opt}: more than 256 lanes")
      if amt == ax.size and opt.op is not OptOps.SPLIT: ax.kind = kind
      else:
        ax.size //= amt
        self.axes.insert(i + 1, Axis(ax.orig, amt, kind))
    self.applied.append(opt)

  # ---- lowering: AST -> graph of INDEX/LOAD/STORE/ALU/REDUCE over RANGE uops
  def lower(self) -> UOp:
    it = index_dtype(self.ast)
    order = {"global": 0, "local": 1, "loop": 2, "reduce": 3, "upcast": 4, "unroll": 5}
    # range ids give the loop nesting order: global, local, other outputs, reduces; lanes last
    ids = sorted(range(len(self.axes)), key=lambda i: (order[self.axes[i].kind], i))
    # an axis part of size 1 (e.g. SPLIT by the whole axis) is no loop: its index is 0 (a RANGE of 1 would be folded
    # out of the index math but stay in its REDUCE, which the linearizer cannot place)
    rng: dict[int, UOp] = {i: UOp.range(self.axes[i].size, rid, self.axes[i].kind, it) if self.axes[i].size != 1 else UOp.const(it, 0)
                           for rid, i in enumerate(ids)}
    if self.gpu:
      # grid and workgroup axes are hardware indices, not loops (x is the innermost, fastest-varying axis)
      for kind, pre in (("global", "gidx"), ("local", "lidx")):
        ks = [i for i in range(len(self.axes)) if self.axes[i].kind == kind]
        for n, i in enumerate(reversed(ks)): rng[i] = UOp(Ops.SPECIAL, it, (), (f"{pre}{n}", self.axes[i].size))
    idx_of: list[UOp] = []
    for o, s in enumerate(self.full_shape):
      parts = [(i, a) for i, a in enumerate(self.axes) if a.orig == o]
      e: UOp = UOp.const(it, 0)
      stride = 1
      for i, a in reversed(parts):
        e = e + rng[i] * stride
        stride *= a.size
      idx_of.append(e.simplify())
    red_ranges = {o: [rng[i] for i, a in enumerate(self.axes) if a.orig == o and rng[i].op is Ops.RANGE] for o in self.reduce_axes}
    memo: dict[UOp, UOp] = {}
    n_reduce = 0
    def idxs_for(shape: tuple[int, ...]) -> list[UOp]:
      return [idx_of[o] if s != 1 else UOp.const(it, 0) for o, s in enumerate(shape)]
    for u in self.ast.toposort():
      src = tuple(memo.get(s, s) for s in u.src)
      if u.op is Ops.VIEW: new = u
      elif u.op is Ops.LOAD:
        idx, valid = u.src[1].arg.to_index(idxs_for(u.src[1].arg.shape))
        new = UOp(Ops.LOAD, u.dtype, (src[0].index(idx, valid if not (valid.op is Ops.CONST and valid.arg) else None),))
      elif u.op is Ops.CONST and u.src:
        _, valid = u.src[0].arg.to_index(idxs_for(u.src[0].arg.shape))
        c = UOp.const(u.dtype, u.arg)
        new = c if valid.op is Ops.CONST and valid.arg else valid.where(c, UOp.const(u.dtype, 0))
      elif u.op is Ops.STORE:
        idx, valid = u.src[1].arg.to_index(idxs_for(u.src[1].arg.shape))
        new = UOp(Ops.STORE, dtypes.void, (src[0].index(idx, valid if not (valid.op is Ops.CONST and valid.arg) else None), src[2]))
      elif u.op is Ops.REDUCE_AXIS:
        rs = tuple(r for a in sorted(u.arg[1]) for r in red_ranges.get(a, []))
        val = src[0]
        if rs and n_reduce:
          # a second reduction over the same axes is a separate loop: give it its own ranges
          fresh = {r: UOp.range(r.src[0], r.arg[0] + 1000 * n_reduce, r.arg[1], it) for r in rs}
          # ...but only outside reductions nested in it: those keep their own loops
          val = val.substitute({**{x: x for x in val.toposort() if x.op is Ops.REDUCE and x is not val}, **fresh})
          rs = tuple(fresh[r] for r in rs)
        n_reduce += 1
        # a value that does not vary over a reduced range (an expanded axis, a constant) would be accumulated once,
        # not once per step: fold those ranges here (sum: times the count, prod: to the count's power, max: itself)
        deps = set(val.toposort())
        free = [r for r in rs if r not in deps]
        if free:
          rs = tuple(r for r in rs if r in deps)
          n = prod(r.src[0].arg for r in free)
          if n == 0: val, rs = UOp.const(val.dtype, identity_element(u.arg[0], val.dtype.scalar)), ()  # empty: the identity
          elif u.arg[0] is Ops.ADD: val = val * UOp.const(val.dtype, n) if val.dtype != dtypes.bool else val
          elif u.arg[0] is Ops.MUL: val = _pow_n(val, n)
        new = UOp(Ops.REDUCE, u.dtype, (val,) + rs, u.arg[0]) if rs else val
      else: new = u if src == u.src else u.replace(src=src)
      memo[u] = new
    return memo[self.ast]

  def _dims(self, kind: str) -> tuple[int, int, int]:
    g = [a.size for a in self.axes if a.kind == kind]
    if not self.gpu: return (prod(g) if g else 1, 1, 1)
    g = list(reversed(g)) + [1, 1, 1]  # x is the innermost axis
    return (g[0], g[1], g[2])
  def global_size(self) -> tuple[int, int, int]:
    """CPU: the parallel axis' extent; GPU: workgroups per grid dimension."""
    return self._dims("global")
  def local_size(self) -> tuple[int, int, int]:
    """GPU: threads per workgroup per dimension."""
    return self._dims("local")
  def buffers(self) -> list[UOp]:
    return sorted((u for u in self.ast.toposort() if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg)
  def vars(self) -> list[UOp]:
    return sorted((u for u in self.ast.toposort() if u.op is Ops.DEFINE_VAR), key=lambda u: u.arg[0])
  def colored_shape(self) -> str:
    return " ".join(f"{a.size}{a.kind[0]}" for a in self.axes)
  def function_name(self) -> str:
    if self.name: return self.name
    kind = "r" if self.reduce_axes else "E"
    return f"{kind}_" + "_".join(str(a.size) for a in self.axes if a.kind in LOOP_KINDS) or kind
