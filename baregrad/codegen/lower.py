"""Lowering a Kernel: its AST over RANGE/SPECIAL indices, a graph of INDEX/LOAD/STORE/ALU/REDUCE uops.

A `Lowering` holds the state of one pass (the kernel, the index dtype, a value per axis part, the lowered nodes) and
does it in named steps: the ranges and index variables (`_ranges`), the address and validity of one view (`access`, and
`gather_access` for a gather), one AST node (`node`: loads, constants, stores), a reduction and its accumulator
(`reduce`, `tc_reduce`) and a GROUP reduction's workgroup combine (`group_combine`). Tensor-core fragments
(codegen/tc_lower.py) and shared-memory staging (codegen/stage.py) are steps of their own over the same state."""
from __future__ import annotations
from typing import TYPE_CHECKING
from baregrad.helpers import prod
from baregrad.ir.dtype import DType, dtypes
from baregrad.ir.ops import UOp, Ops, identity_element
from baregrad.ir.view import ShapeTracker
from baregrad.codegen.kernel import OptError, _may_wrap, nested_reduce_axes
from baregrad.codegen.stage import stage
from baregrad.codegen.epilogue import stage_store
from baregrad.codegen.tc_lower import tc_lanes, tc_desc_lanes
if TYPE_CHECKING: from baregrad.codegen.kernel import Kernel

# range ids give the loop nesting order: global, local, other outputs, reduces; lanes last
_ORDER = {"global": 0, "local": 1, "group": 1, "share": 1, "loop": 2, "reduce": 3, "upcast": 4, "unroll": 5, "tc": 6}
# gather index dtypes compared and clamped in int32 (wider ones in int64)
_NARROW_INDEX = (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.bool)

def _pow_n(v: UOp, n: int) -> UOp:
  """v ** n for a static n >= 1 by squaring."""
  out, b = None, v
  while n:
    if n & 1: out = b if out is None else out * b
    n >>= 1
    if n: b = b * b
  return out if out is not None else UOp.const(v.dtype, 1)

class Lowering:
  """The state of lowering kernel `k` with index dtype `it`.

  rng: each axis part's value (a RANGE, a SPECIAL thread or grid index, or 0 for a part of size 1); th, th_stride: the
  workgroup axes and their strides in the workgroup-linear thread id; memo: AST node -> lowered node; n_reduce: the
  reductions lowered so far (a second one over the same axes gets its own ranges); wraps: an int32 address or validity
  expression may wrap (Kernel.lower then lowers again in int64)."""
  def __init__(self, k: Kernel, it: DType):
    self.k, self.axes, self.it = k, k.axes, it
    self.wraps = False
    self.th = k.thread_axes()
    self.th_stride: dict[int, int] = {}
    st_ = 1
    for i in reversed(self.th): self.th_stride[i], st_ = st_, st_ * self.axes[i].size
    self.rng = self._ranges()
    self.idx_of = self.index_of(self.rng)
    # a padded axis runs past the real size: what lies there is masked off
    self.pad_valid = {o: (self.idx_of[o] < real).simplify() for o, real in k.pads.items()}
    self.red_ranges = {o: [self.rng[i] for i, a in enumerate(self.axes) if a.orig == o and self.rng[i].op is Ops.RANGE]
                       for o in k.reduce_axes}
    self.group = [i for i in self.th if self.axes[i].kind == "group"]
    self.ups = [i for i, a in enumerate(self.axes) if a.kind == "upcast" and self.rng[i].op is Ops.RANGE]
    self.memo: dict[UOp, UOp] = {}
    self.n_reduce = 0
    # the loops reductions got of their own: (the axes' ranges, their replacements, the reductions in them)
    self.passes: list[tuple[tuple[UOp, ...], dict[UOp, UOp], set[UOp]]] = []
    # an attention kernel (reductions nested in another's loop, reading its index: kernel.nested_reduce_axes) lowers
    # its passes as below; any other kernel's second reduction keeps every reduction nested in it as it is (ResNet-50's
    # residual GEMMs lowered the attention way loaded their epilogue differently and ran 20% slower)
    self.nested = bool(nested_reduce_axes(k))
    self.tcl: dict | None = None        # TC: the fragments' index values and element ranges (tc_lower.tc_lanes)
    self.opvals: dict[UOp, dict[int, UOp]] = {}   # TC: operand load -> the values its index takes
    self.staged: dict[UOp, UOp] = {}    # SMEM: staged load -> its read from shared memory
    self.pool: tuple[UOp, int] | None = None   # SMEM of a tensor-core kernel: the tiles' shared pool, its elements
    # with a GROUP, one thread of the group stores the (shared) result
    self.store_guard: UOp | None = None
    # (SHARE: the threads store different elements of the row, each its own)
    for i in ([] if any(a.kind == "share" for a in self.axes) else self.group):
      c = self.rng[i].eq(0)
      self.store_guard = c if self.store_guard is None else self.store_guard & c

  def _ranges(self) -> dict[int, UOp]:
    """Each axis part's index: a RANGE (ids in loop nesting order), 0 for a part of size 1 or the tensor-core k tile;
    on GPUs grid and workgroup parts are hardware indices (SPECIAL), x the innermost, fastest-varying axis."""
    it, axes = self.it, self.axes
    ids = sorted(range(len(axes)), key=lambda i: (_ORDER[axes[i].kind], i))
    # an axis part of size 1 (e.g. SPLIT by the whole axis) is no loop: its index is 0 (a RANGE of 1 would be folded
    # out of the index math but stay in its REDUCE, which the linearizer cannot place)
    rng: dict[int, UOp] = {}
    for rid, i in enumerate(ids):
      loop = axes[i].size != 1 and axes[i].kind != "tc"
      if (sym := self.k.sym.get(axes[i].orig)) is not None and axes[i].kind in ("loop", "reduce"):
        # a symbolic axis (apply_opt keeps it whole): the loop runs to the variable's value
        rng[i] = UOp.range(sym if sym.dtype == it else sym.cast(it), rid, axes[i].kind, it)
        continue
      rng[i] = UOp.range(axes[i].size, rid, axes[i].kind, it) if loop else UOp.const(it, 0)
    if not self.k.gpu: return rng
    gs = [i for i in range(len(axes)) if axes[i].kind == "global"]
    for n, i in enumerate(reversed(gs)): rng[i] = UOp(Ops.SPECIAL, it, (), (f"gidx{n}", axes[i].size))
    th = self.th
    if not self.k.threads_flat():
      for n, i in enumerate(reversed(th)): rng[i] = UOp(Ops.SPECIAL, it, (), (f"lidx{n}", axes[i].size))
    else:
      flat = UOp(Ops.SPECIAL, it, (), ("lidx0", prod(axes[i].size for i in th)))
      for i in th:
        v = flat if self.th_stride[i] == 1 else flat // self.th_stride[i]
        rng[i] = (v if i == th[0] else v % axes[i].size).simplify()
    # SHARE: the GROUP part's thread index
    for i, a in enumerate(axes):
      if a.kind == "share": rng[i] = next(rng[j] for j in th if axes[j].kind == "group")
    return rng

  def index_of(self, vals: dict[int, UOp]) -> list[UOp]:
    """The index along each full-shape axis, from the values of its parts (outer part first)."""
    out: list[UOp] = []
    for o in range(len(self.k.full_shape)):
      e: UOp = UOp.const(self.it, 0)
      stride = 1
      for i in reversed([i for i, a in enumerate(self.axes) if a.orig == o]):
        e = e + vals[i] * stride
        stride *= self.axes[i].size
      out.append(e.simplify())
    return out

  def access(self, st: ShapeTracker, extra: UOp | None = None, vals: dict[int, UOp] | None = None,
             store: bool = False) -> tuple[UOp, UOp | None]:
    """The address and validity (None: always valid) of view `st` at the ranges (or at `vals`, values of the axis
    parts), and'ed with `extra`; a store is masked on every padded axis, a load where it moves along one."""
    it, pads, gpu = self.it, self.k.pads, self.k.gpu
    io = self.idx_of if vals is None else self.index_of(vals)
    strides = st.real_strides() if pads else ()
    idxs = [io[o] if s != 1 else UOp.const(it, 0) for o, s in enumerate(st.shape)]
    # CPUs: a load not contiguous along a padded axis reads the last real element past its end (a clamped index: no
    # mask, so the broadcast rows of a padded register tile stay plain loads hoisted out of the reduce loop; its value
    # there is never stored, and a reduction replaces it by its identity); a store is masked on every padded axis
    clamp = [] if gpu or store else [o for o in pads if st.shape[o] != 1 and strides[o] not in (0, 1, -1)]
    for o in clamp: idxs[o] = (idxs[o] < pads[o]).where(idxs[o], UOp.const(it, pads[o] - 1)).simplify()
    idx, valid = st.to_index(idxs, it)
    if it == dtypes.int32 and not self.wraps: self.wraps = _may_wrap(idx) or _may_wrap(valid)
    for o, real in pads.items():
      # past the end of a padded axis the address would be out of range (no matter on an axis the view does not move
      # along: that value is never used, and a shared tile filled from it must not depend on the thread)
      if st.shape[o] != 1 and o not in clamp and (strides[o] != 0 or (store and not gpu)):
        pv = self.pad_valid[o] if vals is None else (io[o] < real).simplify()
        valid = pv if valid.op is Ops.CONST and valid.arg else valid & pv
    if extra is not None: valid = extra if valid.op is Ops.CONST and valid.arg else valid & extra
    valid = valid.simplify()
    return idx, (None if valid.op is Ops.CONST and valid.arg else valid)

  def gather_access(self, st: ShapeTracker, dim: int, g: UOp, extra: UOp) -> tuple[UOp, UOp | None]:
    """The address and validity of a gather's view (one, unmasked, its strides uncanonicalized): its index along `dim`
    is the value g, the others the ranges'; and'ed with `extra`."""
    it = self.it
    idxs = [self.idx_of[o] if s != 1 else UOp.const(it, 0) for o, s in enumerate(st.shape)]
    v = st.views[0]
    idx = UOp.const(it, v.offset)
    for o, (x, stv) in enumerate(zip(idxs, v.strides)):
      if stv != 0: idx = idx + (g if o == dim else x) * stv
    valid = UOp.const(dtypes.bool, True)
    for o in self.k.pads:   # (a padded position's value is never stored; along dim the index there reads 0)
      if st.shape[o] != 1 and o != dim:
        valid = valid & self.pad_valid[o] if valid.op is not Ops.CONST else self.pad_valid[o]
    valid = extra if valid.op is Ops.CONST and valid.arg else valid & extra
    valid = valid.simplify()
    return idx.simplify(), (None if valid.op is Ops.CONST and valid.arg else valid)

  def run(self) -> UOp:
    """Lower the whole AST: the tensor-core fragments and the staged tiles first, then node by node."""
    k = self.k
    # tensor cores: the operands are read in their fragments' layouts, the reduction becomes WMMAs
    if k.tc is not None:
      self.tcl = tc_desc_lanes(self) if k.tc[0].desc else tc_lanes(self)
      self.opvals = {k.tc[4]: self.tcl["a"], k.tc[5]: self.tcl["b"]}
    if k.staged: self.staged = stage(self)
    if k.tc is not None and k.tc[0].desc and not (k.tc[4] in self.staged and k.tc[5] in self.staged):
      raise OptError(f"TC {k.tc[0].name}: both operands are read from shared memory: stage them (SMEM)")
    for u in k.ast.toposort(): self.memo[u] = self.node(u)
    return self.memo[k.ast]

  def node(self, u: UOp) -> UOp:
    """One AST node over the ranges, its sources already lowered: views stay, loads, constants (IOTA) and stores get
    their addresses, a REDUCE_AXIS becomes its REDUCE, anything else takes its lowered sources."""
    src = tuple(self.memo.get(s, s) for s in u.src)
    if u.op is Ops.VIEW: return u
    if u.op is Ops.LOAD:
      if u in self.staged: return self.staged[u]
      if len(u.src) == 3: return self.gather(u, src)
      idx, valid = self.access(u.src[1].arg, vals=self.opvals.get(u))
      return UOp(Ops.LOAD, u.dtype, (src[0].index(idx, valid),))
    if (u.op is Ops.CONST and u.src) or u.op is Ops.IOTA:
      # a constant, or IOTA's value: the index a load through this view would read (arange); 0 where masked off
      idx, valid = self.access(u.src[0].arg)
      c = UOp.const(u.dtype, u.arg) if u.op is Ops.CONST else idx.cast(u.dtype)
      return c if valid is None else valid.where(c, UOp.const(u.dtype, 0))
    if u.op is Ops.STORE:
      if (through := stage_store(self, u, src)) is not None: return through
      idx, valid = self.access(u.src[1].arg, self.store_guard, store=True)
      return UOp(Ops.STORE, dtypes.void, (src[0].index(idx, valid), src[2]))
    if u.op is Ops.REDUCE_AXIS: return self.tc_reduce(u) if self.tcl is not None else self.reduce(u, src[0])
    return u if src == u.src else u.replace(src=src)

  def gather(self, u: UOp, src: tuple[UOp, ...]) -> UOp:
    """A gather LOAD: the view's index along its axis is the index value. One outside [0, extent) reads 0 (what a
    one-hot selection gives; its bounds check reports it at the next host read), and its address is clamped into the
    source too: a renderer may load before it selects."""
    it = self.it
    dim, extent = u.arg
    # compared and clamped in a dtype holding every index value and the extent: int32 for the narrow signed and
    # unsigned ones (an int8 index compared with a constant 1000 in int8 would wrap), else int64
    ct = it if it == dtypes.int64 or src[2].dtype.scalar in _NARROW_INDEX else dtypes.int64
    g0 = src[2].cast(ct)
    inside = ((g0 < 0).logical_not() & (g0 < extent)).simplify()
    g = (g0 < 0).where(UOp.const(ct, 0), g0)
    g = (g < extent - 1).where(g, UOp.const(ct, extent - 1))
    # (clamped into [0, extent): fits the kernel's index dtype, index_dtype saw to it)
    if g.dtype != it: g = g.cast(it)
    idx, valid = self.gather_access(u.src[1].arg, dim, g.simplify(), inside)
    return UOp(Ops.LOAD, u.dtype, (src[0].index(idx, valid),))

  def tc_reduce(self, u: UOp) -> UOp:
    """TC: acc += A_frag @ B_frag over the reduce loops, cast to the reduction's dtype; a padded k feeds zeros from both
    (masked) loads."""
    assert self.k.tc is not None and self.tcl is not None   # (tcl is made only with it)
    tc, la, lb = self.k.tc[0], self.k.tc[4], self.k.tc[5]
    rs = tuple(r for a in sorted(u.arg[1]) for r in self.red_ranges.get(a, []))
    wm = UOp(Ops.WMMA, tc.dtype_acc, (self.memo[la], self.memo[lb], UOp.const(tc.dtype_acc, 0.0)),
             (tc, self.tcl["ea"], self.tcl["eb"], self.tcl["ec"]))
    new = UOp(Ops.REDUCE, tc.dtype_acc, (wm,) + rs, Ops.ADD) if rs else wm
    self.n_reduce += 1
    return new.cast(u.dtype)

  def reduce(self, u: UOp, val: UOp) -> UOp:
    """A REDUCE_AXIS of the lowered value `val`: a REDUCE (the accumulator) over the ranges of its axes, its own where
    an earlier reduction used them; the identity past a padded axis' end; ranges the value does not vary over folded;
    with a GROUP, the workgroup's partial results combined."""
    rs = tuple(r for a in sorted(u.arg[1]) for r in self.red_ranges.get(a, []))
    fresh: dict[UOp, UOp] = {}
    orig, share = rs, None
    if rs and self.n_reduce:
      # a second reduction over the same axes is a separate loop: give it its own ranges. In an attention kernel
      # (self.nested), where an earlier one that got loops of its own is not inside this one (attention's sum of
      # exponentials beside its weighted sum of values), this one runs in the same loops: what both compute (the dot
      # products) once per step
      share = next((p for p in self.passes if p[0] == rs and not (p[2] & set(val.toposort()))), None) if self.nested else None
      fresh = dict(share[1]) if share is not None else \
        {r: UOp.range(r.src[0], r.arg[0] + 1000 * self.n_reduce, r.arg[1], self.it) for r in rs}
      # ...but reductions nested in it keep their own loops (softmax's max inside its sum), except, in an attention
      # kernel, one that reads its ranges (an attention score, a dot product per key, inside each pass over the keys):
      # a copy per pass, its own loops fresh too (a loop shared by two passes would need two nestings)
      keep: dict[UOp, UOp] = {}
      outer = set(rs)
      for x in val.toposort():
        if x.op is not Ops.REDUCE or x is val: continue
        if self.nested and any(r in outer and r not in x.src[1:] for r in x.src[0].toposort()):   # (its own loops aside)
          fresh.update({r: UOp.range(r.src[0], r.arg[0] + 1000 * self.n_reduce, r.arg[1], self.it) for r in x.src[1:] if r not in fresh})
        else: keep[x] = x
      val = val.substitute({**keep, **fresh})
      if share is not None: share[1].update(fresh)
      rs = tuple(fresh[r] for r in rs)
    if pv := [self.pad_valid[a] for a in sorted(u.arg[1]) if a in self.pad_valid]:
      # past the end of a padded reduce axis the reduction sees its identity
      ok = pv[0]
      for x in pv[1:]: ok = ok & x
      if fresh: ok = ok.substitute(fresh)
      val = ok.where(val, UOp.const(val.dtype, identity_element(u.arg[0], val.dtype.scalar)))
    val, rs = _fold_invariant(u.arg[0], val, rs)
    new = UOp(Ops.REDUCE, u.dtype, (val,) + rs, u.arg[0]) if rs else val
    mine: set[UOp] = {new}
    if fresh:
      if share is not None: share[2].update(mine)
      else: self.passes.append((orig, fresh, mine))
    if self.group: new = self.group_combine(u, new)
    mine.add(new)   # (a GROUP's combined value too: a reduction reading it is inside this one)
    self.n_reduce += 1
    return new

  def group_combine(self, u: UOp, partial: UOp) -> UOp:
    """GROUP: each thread's partial result goes to shared memory; after a barrier every thread reduces the group's
    partials. Slot of a thread: its workgroup-linear id times the output lanes, plus its lane (lanes store
    contiguously)."""
    axes, it, rng, n = self.axes, self.it, self.rng, self.n_reduce
    if any(axes[i].orig not in u.arg[1] for i in self.group):
      raise OptError(f"GROUP: a reduction over axes {u.arg[1]} does not reduce the grouped axis")
    deps = set(partial.toposort())
    if any(a.kind == "loop" and rng[i] in deps for i, a in enumerate(axes)):
      # the next loop iteration would overwrite the partials while slow threads still read them
      raise OptError("GROUP needs every output axis on the grid, the workgroup or lanes "
                     "(a loop would reuse shared memory)")
    nup = prod(axes[i].size for i in self.ups)
    lane, s = UOp.const(it, 0), 1
    for i in reversed(self.ups): lane, s = lane + rng[i] * s, s * axes[i].size
    def slot(vals: dict[int, UOp]) -> UOp:
      lin = UOp.const(it, 0)
      for i in self.th: lin = lin + vals.get(i, rng[i]) * self.th_stride[i]
      return (lin * nup + lane).simplify()
    smem = UOp(Ops.DEFINE_LOCAL, u.dtype.ptr(local=True), (), (f"smem{n}", prod(axes[i].size for i in self.th) * nup))
    bar = UOp(Ops.BARRIER, dtypes.void, (UOp(Ops.STORE, dtypes.void, (smem.index(slot({})), partial)),))
    # the combine reads 4 partials a step where it can (lanes: one vector load, 4 independent accumulators)
    cr: dict[int, UOp] = {}
    rs: list[UOp] = []
    for k, i in enumerate(self.group):
      sz = axes[i].size
      if sz % 4 == 0 and sz >= 8:
        outer = UOp.range(sz // 4, 100_000 + 100 * n + 2 * k, "reduce", it)
        inner = UOp.range(4, 100_000 + 100 * n + 2 * k + 1, "unroll", it)
        cr[i], rs = outer * 4 + inner, rs + [outer, inner]
      else: cr[i] = UOp.range(sz, 100_000 + 100 * n + 2 * k, "reduce", it); rs.append(cr[i])
    return UOp(Ops.REDUCE, u.dtype, (UOp(Ops.LOAD, u.dtype, (smem.index(slot(cr)), bar)),) + tuple(rs), u.arg[0])

def _fold_invariant(op: Ops, val: UOp, rs: tuple[UOp, ...]) -> tuple[UOp, tuple[UOp, ...]]:
  """A value that does not vary over a reduced range (an expanded axis, a constant) would be accumulated once, not once
  per step: fold those ranges (sum: times the count, prod: to the count's power, max: itself). Returns the value and
  the ranges left to loop over."""
  deps = set(val.toposort())
  free = [r for r in rs if r not in deps]
  if not free: return val, rs
  rs = tuple(r for r in rs if r in deps)
  n = prod(r.src[0].arg for r in free)
  if n == 0: return UOp.const(val.dtype, identity_element(op, val.dtype.scalar)), ()  # empty: the identity
  if op is Ops.ADD: val = val * UOp.const(val.dtype, n) if val.dtype != dtypes.bool else val
  elif op is Ops.MUL: val = _pow_n(val, n)
  return val, rs
