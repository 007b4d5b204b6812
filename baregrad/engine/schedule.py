"""Cut a tensor graph into kernels. Fusion is the default: elementwise chains, elementwise ops into a reduction's
input and output, and movement ops (pushed down to the loads) all land in one kernel. A node is realized (gets
a buffer and its own kernel) only at true boundaries:
  - what the caller asked for, COPY, CONTIGUOUS and ASSIGN;
  - a reduction whose result is moved (reshaped, expanded, ...) or reduced again;
  - a padded view of a computed value (the padding must be zeros, not f(0));
  - a second reduction in one kernel over a different iteration space.
A reduction broadcast back over the rows it reduced (softmax, layer/rms norm: x - x.max(-1, keepdim=True)) is not a
boundary where its rows are short and contiguous (FUSE_NORMS, _row_fusion): the kernel of its consumer computes it
once per row, before the elementwise tail, over axes of its own appended to the iteration space.
"""
from __future__ import annotations
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast
from baregrad.ir.ops import UOp, Ops, GroupOp
import math
from baregrad import knobs
from baregrad.ir.alu import threefry2x32, exec_alu
from baregrad.ir.dtype import dtypes
from baregrad.ir.view import ShapeTracker, View, strides_for_shape
from baregrad.codegen.astbuild import gbuf
from baregrad.codegen.kernel import verify_ast, KernelError
from baregrad.codegen.gridreduce import split_reduce, spreads
from baregrad.codegen.pack import pack_operand
from baregrad.codegen.rowstream import row_stream
from baregrad.hal import Device
from baregrad.engine import checks
from baregrad.engine.graph import BufRef, shape_of, numel, base_of, fold_movements, stale_error
from baregrad.engine.merge import merge_producers

# elementwise kernels whose output the next kernel reads element for element become extra outputs of that kernel
MERGE_OUTPUTS = True

@dataclass
class ScheduleItem:
  ast: UOp | None          # kernel AST; None for a copy between devices
  bufs: list[BufRef]       # by the kernel's buffer numbers: bufs[0] is written
  kind: str = "kernel"     # "kernel" or "copy"
  srcnode: UOp | None = field(default=None, repr=False)
  check: tuple[UOp, str] | None = field(default=None, repr=False)  # (checked node, message): this item computes a bounds flag
  # more outputs of a merged kernel (engine/merge.py): (the node it computes, its buffer number) each
  also: list[tuple[UOp, int]] = field(default_factory=list, repr=False)
  def outputs(self) -> list[tuple[UOp | None, int]]:
    """(node, buffer number) of every buffer the item writes: bufs[0] first."""
    return [(self.srcnode, 0)] + self.also

_LEAVES = (Ops.BUFFER, Ops.CONST, Ops.IOTA)   # tensor-graph nodes without sources

class _NeedRealize(Exception):
  def __init__(self, u: UOp): self.u = u

class _NoFusion(Exception): """Row fusion cannot place a view of this kernel in its iteration space."""

def compose(lower: ShapeTracker, upper: ShapeTracker) -> ShapeTracker:
  """upper (root index -> this node's index) followed by lower (this node -> its source)."""
  if len(upper.views) == 1 and upper.views[0].is_contiguous and upper.shape == lower.shape: return lower
  # a contiguous lower maps the flat offset upper produces to itself, whatever shape upper's first View has (a reshape
  # merged into it): dropped. Kept, it left every load of `a @ b` a two-View stack whose index the kernel recomputed
  # with 64-bit div/rem (issue 32: 222 registers for the 4096^3 half matmul, 128 without).
  if len(lower.views) == 1 and lower.views[0].is_contiguous: return upper
  # the same for a stack whose top View is contiguous (a reshape of a sliding window): it unravels the flat offset
  # upper produces and lays it out again, the identity; the Views below it read that offset directly
  if lower.views[-1].is_contiguous: return ShapeTracker(lower.views[:-1] + upper.views)
  if (box := _as_box(lower, upper)) is not None: return box
  return ShapeTracker(lower.views + upper.views)

def _as_box(lower: ShapeTracker, upper: ShapeTracker) -> ShapeTracker | None:
  """upper as a shrink and pad of lower where upper is one View that only crops and pads lower's shape (its strides
  those of lower's shape laid out contiguously: a padded elementwise value over a strided read, relu(conv + b) padded
  for the next convolution), else None. Stacked, the two Views take a division and a remainder per element."""
  if len(upper.views) != 1 or len(upper.shape) != len(lower.shape) or any(not isinstance(x, int) for x in lower.shape + upper.shape): return None
  if not isinstance(upper.views[0].offset, int): return None   # (a symbolic offset: left stacked)
  v, n = upper.views[0], lower.shape
  cs = strides_for_shape(n)
  if any(sh != 1 and st != c for sh, st, c in zip(v.shape, v.strides, cs)): return None
  if v.mask is not None and any(not isinstance(x, int) for m in v.mask for x in m): return None
  vshape, off = cast(tuple[int, ...], v.shape), cast(int, v.offset)   # (ints: checked above)
  lo_hi: tuple[tuple[int, int], ...] = cast(tuple, v.mask) or tuple((0, sh) for sh in vshape)
  d: list[int | None] = [None] * len(n)
  for i, ((lo, hi), sh) in enumerate(zip(lo_hi, v.shape)):
    if hi <= lo: return None                                   # (an empty box: nothing to read)
    if (lo, hi) != (0, sh): d[i] = -lo                         # a padded axis: its first valid index reads lower's 0
    elif sh == n[i] or sh == 1 and n[i] == 1: d[i] = 0
  free = [i for i, x in enumerate(d) if x is None]
  rest = off - sum(x * c for x, c in zip(d, cs) if x is not None)
  if len(free) > 1 or (not free and rest != 0): return None
  if free:
    if cs[free[0]] == 0 or rest % cs[free[0]]: return None
    d[free[0]] = rest // cs[free[0]]
  box = [(lo + x, hi + x) for (lo, hi), x in zip(lo_hi, d) if x is not None]
  if len(box) != len(n) or any(a < 0 or b > m for (a, b), m in zip(box, n)): return None
  return lower.shrink(tuple(box)).pad(tuple((lo, sh - hi) for (lo, hi), sh in zip(lo_hi, vshape)))

def _is_buffer_view(u: UOp) -> bool: return base_of(u).op is Ops.BUFFER

class _KernelBuilder:
  """Builds one kernel's AST. With `fuse` = (input shape, reduced axes), row fusion (_row_fusion): reductions of that
  kind may sit under a broadcast and inside each other; every view is lowered in the node's own shape as usual and
  placed in the kernel's iteration space where its leaf is built (_kview): the output's axes first, then one axis per
  reduced axis, which only the reductions' inputs move along."""
  def __init__(self, realized: dict[UOp, BufRef], fuse: tuple[tuple[int, ...], tuple[int, ...]] | None = None):
    self.realized = realized
    self.fuse = fuse
    self.bufs: list[BufRef] = []
    self.memo: dict[tuple[UOp, ShapeTracker, bool], UOp] = {}
    self.reduce_shapes: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    self.loads_output = False
    self.costly: dict[UOp, bool] = {}   # _costly's answers

  def buf_index(self, ref: BufRef) -> int:
    # one argument per storage: an ASSIGN reads the old version of the memory it writes (x += y)
    for i, b in enumerate(self.bufs):
      if b.storage is ref.storage: return i
    self.bufs.append(ref)
    return len(self.bufs) - 1

  def load(self, ref: BufRef, st: ShapeTracker) -> UOp:
    i = self.buf_index(ref)
    if i == 0: self.loads_output = True  # an ASSIGN reading what it writes (checked by _assign_check)
    return UOp(Ops.LOAD, ref.dtype, (gbuf(i, ref.dtype), UOp(Ops.VIEW, src=(), arg=st)))

  def kview(self, st: ShapeTracker, in_reduce: bool) -> ShapeTracker:
    """st (over the root's shape, or over the fused reductions' input shape under a reduction) in the kernel's
    iteration space: unchanged without row fusion."""
    if self.fuse is None: return st
    ishape, axes = self.fuse
    v = st.views[-1]
    if len(v.shape) != len(ishape): raise _NoFusion()   # (a view of another rank: not this kind of kernel)
    if not in_reduce:   # the output's axes: size 1 along the reductions' own axes
      top = View(v.shape + (1,) * len(axes), v.strides + (0,) * len(axes), v.offset, v.mask + ((0, 1),) * len(axes) if v.mask else None)
    else:               # a reduction's input: its reduced axes moved to the appended axes
      keep = [d not in axes for d in range(len(v.shape))]
      def mv(xs: tuple, one: Any) -> tuple: return tuple(x if k else one for x, k in zip(xs, keep)) + tuple(xs[a] for a in axes)
      top = View(mv(v.shape, 1), mv(v.strides, 0), v.offset, mv(v.mask, (0, 1)) if v.mask else None)
    return ShapeTracker(st.views[:-1] + (top,))

  def lower(self, u: UOp, st: ShapeTracker, in_reduce: bool, root: bool = False) -> UOp:
    """u's value read through st, as a kernel AST (raises _NeedRealize where u's graph needs a buffer first).
    Iterative (an explicit stack of pending nodes, not recursion): a fused chain can be as deep as MAX_FUSE_DEPTH."""
    memo = self.memo
    # entries: (key, root, finish): finish is None until the node's sources were asked for; then the function that
    # builds its value from theirs (memo entries by then)
    stack: list[tuple[tuple, bool, Any]] = [((u, st, in_reduce), root, None)]
    while stack:
      key, is_root, finish = stack.pop()
      if finish is not None: memo[key] = finish(); continue
      if key in memo: continue
      step = self._step(key[0], key[1], key[2], is_root)
      if not isinstance(step, tuple): memo[key] = step; continue
      needs, fin = step
      stack.append((key, is_root, fin))
      stack += [(k, False, None) for k in reversed(needs) if k not in memo]
    return memo[(u, st, in_reduce)]

  def _step(self, u: UOp, st: ShapeTracker, in_reduce: bool, root: bool) -> UOp | tuple[list[tuple], Callable[[], UOp]]:
    """u's kernel value, or (the (node, view, in_reduce) keys it is built from, the function building it from their
    values in self.memo)."""
    memo = self.memo
    if not root and u in self.realized: return self.load(self.realized[u], self.kview(st, in_reduce))
    if u.op is Ops.BUFFER:
      if u.arg.stale: raise stale_error(u.arg)
      return self.load(u.arg, self.kview(st, in_reduce))
    if u.op in GroupOp.Movement:
      inner, vst = fold_movements(u)
      if any(v.mask is not None for v in vst.views) and not (inner.op in _LEAVES or inner in self.realized):
        # a padded value is computed inside this kernel where the padding reads as zero anyway: the mask then moves
        # to its loads and constants (each reads 0 outside it), so the value there is f(0, ..., 0). Where that is 0
        # (relu(x + bias)), no buffer of its own: a CPU convolution's padded copy computes the layer's epilogue
        # instead of a kernel before it writing it (ResNet: one kernel per convolution fewer). Not under a
        # reduction: there the value would be computed once per output it is broadcast to.
        if in_reduce or not self._zero_at_pad(inner): raise _NeedRealize(inner)
      if in_reduce and inner.op not in _LEAVES and inner not in self.realized and _expanded(vst) and not self._per_row(inner) and self._costly(inner):
        # an expensive value broadcast into a reduction (softmax's gradient into the next matmul) would be recomputed
        # for every output it is broadcast to: computed once into a buffer instead
        raise _NeedRealize(inner)
      k = (inner, compose(vst, st), in_reduce)
      return [k], lambda: memo[k]
    if u.op is Ops.CONST:
      masked = any(v.mask is not None for v in st.views)
      # under a reduce the view stays: it carries the reduced axes' sizes (else sum of a constant lost its count)
      return UOp(Ops.CONST, u.dtype, (UOp(Ops.VIEW, src=(), arg=self.kview(st, in_reduce)),), u.arg) if masked or in_reduce else UOp.const(u.dtype, u.arg)
    if u.op is Ops.IOTA: return UOp(Ops.IOTA, u.dtype, (UOp(Ops.VIEW, src=(), arg=self.kview(st, in_reduce)),))   # (a load without memory)
    if u.op is Ops.REDUCE_AXIS and self.fuse is not None:
      # row fusion: a reduction of the kernel's kind read per row (its own shape, or broadcast along its reduced axes),
      # wherever it is: at the root, under the elementwise tail, inside another reduction (softmax's sum of exp(x - max))
      ishape, axes = self.fuse
      if (shape_of(u.src[0]), tuple(sorted(u.arg[1]))) != self.fuse or not _per_row_view(st, shape_of(u)): raise _NeedRealize(u)
      k = (u.src[0], ShapeTracker.from_shape(ishape), True)
      return [k], lambda: UOp(Ops.REDUCE_AXIS, u.dtype, (memo[k],), (u.arg[0], tuple(range(len(ishape), len(ishape) + len(axes)))))
    if u.op is Ops.REDUCE_AXIS:
      if in_reduce or not (len(st.views) == 1 and st.views[0].is_contiguous and st.shape == shape_of(u)): raise _NeedRealize(u)
      ishape = shape_of(u.src[0])
      self.reduce_shapes.add((ishape, tuple(sorted(u.arg[1]))))
      if len({s for s, _ in self.reduce_shapes}) > 1: raise _NeedRealize(u)
      k = (u.src[0], ShapeTracker.from_shape(ishape), True)
      return [k], lambda: UOp(Ops.REDUCE_AXIS, u.dtype, (memo[k],), u.arg)
    if u.op is Ops.GATHER: return self._gather(u, st, in_reduce)
    if u.op is Ops.DETACH:
      k = (u.src[0], st, in_reduce)
      return [k], lambda: memo[k]
    if u.op is Ops.THREEFRY or u.op in GroupOp.ALU or u.op in (Ops.CAST, Ops.BITCAST):
      ks = [(s, st, in_reduce) for s in u.src]
      # THREEFRY: its rounds (no renderer has an instruction for it)
      if u.op is Ops.THREEFRY: return ks, lambda: threefry2x32(*(memo[k] for k in ks))
      return ks, lambda: u.replace(src=tuple([memo[k] for k in ks]))
    if u.op in (Ops.COPY, Ops.CONTIGUOUS, Ops.ASSIGN): raise _NeedRealize(u)
    raise NotImplementedError(f"schedule: cannot lower {u.op}")

  def _gather(self, u: UOp, st: ShapeTracker, in_reduce: bool) -> tuple[list[tuple], Callable[[], UOp]]:
    """A load from the source's memory whose index along dim is the index's value (LOAD with a third source). Only
    where the kernel's index is the gather's own (its output, or elementwise code over it in the same shape): a view
    between the two, or a reduction over it, would need the index replaced inside the view (and the CPU's operand
    packing and the GPUs' staging rebuild loads from their views), so those get the gather's buffer instead.
    Returns the index's key and the function building the load (see _step)."""
    if in_reduce or not (len(st.views) == 1 and st.views[0].is_contiguous and st.shape == shape_of(u)): raise _NeedRealize(u)
    if self.fuse is not None: raise _NeedRealize(u)   # (row fusion: the gather's view would need the appended axes too)
    src, dim = u.src[0], u.arg[0]
    inner, vst = (src, ShapeTracker.from_shape(shape_of(src))) if src in self.realized else fold_movements(src)
    if inner in self.realized: ref = self.realized[inner]
    elif inner.op is Ops.BUFFER:
      if inner.arg.stale: raise stale_error(inner.arg)
      ref = inner.arg
    else: raise _NeedRealize(inner)
    # a padded or twice-reshaped source gets its own buffer, read through one plain view (a buffer's own view is one)
    if len(vst.views) != 1 or vst.views[0].mask is not None: raise _NeedRealize(src)
    # gathering from the memory this kernel writes (x.assign(x.gather(...))): the gather gets its own buffer first
    if ref.storage is self.bufs[0].storage: raise _NeedRealize(u)
    v = vst.views[0]
    k = (u.src[1], st, False)
    def finish() -> UOp:
      val = self.memo[k]
      if any(x.op is Ops.REDUCE_AXIS for x in val.toposort()): raise _NeedRealize(u.src[1])   # (a reduction computes the index)
      # the source's view in the kernel's iteration space (the output's shape) with the source's strides: along dim the
      # kernel's index is replaced by the value (not canonicalized: where the output's extent is 1, dim's stride stays)
      gv = ShapeTracker((View(shape_of(u), v.strides, v.offset, None),))
      i = self.buf_index(ref)
      if i == 0: self.loads_output = True
      return UOp(Ops.LOAD, ref.dtype, (gbuf(i, ref.dtype), UOp(Ops.VIEW, src=(), arg=gv), val), (dim, v.shape[dim]))
    return [k], finish

  def _zero_at_pad(self, u: UOp) -> bool:
    """Whether u is 0 where every buffer it reads (and every constant) reads as 0: u's padding may then be the
    padding of its sources (see _step). Reductions, gathers and copies count as buffers (they get their own).
    Only a short epilogue (bias, activation, scale, residual) qualifies: a long value, or one padded again inside (a
    cat, a sort's stages), would nest masks kernel after kernel, each recomputing it (test_sort 11 s -> 5 min)."""
    stops = (Ops.BUFFER, Ops.CONST, Ops.REDUCE_AXIS, Ops.GATHER, Ops.COPY, Ops.CONTIGUOUS, Ops.ASSIGN)
    order: list[UOp] = []
    seen: set[UOp] = set()
    stack: list[tuple[UOp, bool]] = [(u, False)]
    while stack:   # post-order over u's own computation, not below its buffers and realized nodes
      x, done = stack.pop()
      if done: order.append(x); continue
      if x in seen: continue
      seen.add(x)
      if len(seen) > PAD_FUSE_MAX_OPS or x.op is Ops.PAD: return False
      stack.append((x, True))
      if not (x in self.realized or x.op in stops): stack.extend((s, False) for s in x.src)
    vals: dict[UOp, Any] = {}
    def zero(dt: Any) -> Any: return False if dtypes.is_bool(dt) else 0 if dtypes.is_int(dt) else 0.0
    for x in order:
      if x in self.realized or x.op in stops: vals[x] = zero(x.dtype.scalar)
      elif x.op in GroupOp.Movement or x.op is Ops.DETACH: vals[x] = vals[x.src[0]]
      elif x.op in (Ops.CAST, Ops.BITCAST):
        if vals[x.src[0]] != 0: return False   # (a nonzero value converted: not worth modelling)
        vals[x] = zero(x.dtype.scalar)          # (0 converts and bitcasts to 0 in every type)
      elif x.op in GroupOp.ALU:
        try: vals[x] = exec_alu(x.op, x.dtype, tuple(vals[s] for s in x.src))
        except (ArithmeticError, ValueError, TypeError, OverflowError): return False
      else: return False   # (IOTA, THREEFRY, anything new: realized as before)
    r = vals.get(u)
    return r is not None and not (isinstance(r, float) and math.isnan(r)) and r == 0

  def _per_row(self, u: UOp) -> bool:
    """Row fusion: u has one value per row (size 1 along every reduced axis): under a reduction it is computed once per
    row, before the reduction's loop, however expensive."""
    if self.fuse is None: return False
    sh = shape_of(u)
    return len(sh) == len(self.fuse[0]) and all(sh[a] == 1 for a in self.fuse[1])

  def _costly(self, u: UOp) -> bool:
    """u's own computation (down to buffers and realized nodes) has a transcendental, a reciprocal or a division."""
    if (hit := self.costly.get(u)) is not None: return hit   # (asked again for each broadcast of the same value)
    stack, seen, found = [u], set(), False
    while stack and not found:
      x = stack.pop()
      if x in seen or x in self.realized or x.op in _LEAVES: continue
      seen.add(x)
      found = x.op in _EXPENSIVE
      stack.extend(x.src)
    self.costly[u] = found
    return found

PAD_FUSE_MAX_OPS = 24   # most nodes (ops, buffers, constants) of a padded value computed in the padding's kernel (_zero_at_pad)
_EXPENSIVE = GroupOp.Transcendental | {Ops.RECIP, Ops.FDIV, Ops.IDIV, Ops.MOD}

def _expanded(st: ShapeTracker) -> bool:
  """The view reads some element for several indices along an axis (a broadcast)."""
  v = st.views[-1]
  return any(s == 0 and n > 1 for s, n in zip(v.strides, v.shape))

def _per_row_view(st: ShapeTracker, oshape: tuple) -> bool:
  """st reads a reduction's output (of shape oshape) as itself or broadcast along the reduced (size-1) axes: one
  plain view, no mask or offset."""
  if len(st.views) != 1 or len(st.shape) != len(oshape): return False
  v = st.views[0]
  if v.mask is not None or v.offset != 0 or any(not isinstance(n, int) or (o != 1 and n != o) for n, o in zip(v.shape, oshape)): return False
  return v == View.contiguous(oshape).expand(tuple(n for n in v.shape if isinstance(n, int)))

def _row_fusion(r: UOp, dev: str | None) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
  """(input shape, reduced axes) of reduction r where its consumers may compute it in their own kernel, per row
  (FUSE_NORMS): its reduced axes the innermost ones of its input (size-1 axes aside: the row is contiguous in the
  input's order), its row at most FUSE_NORMS_MAX_ROW elements, and not so long, with rows so few, that device `dev`
  spreads it over its compute units on its own (codegen/gridreduce.py); else None."""
  if r.op is not Ops.REDUCE_AXIS or not knobs.get("FUSE_NORMS"): return None
  ishape, axes = shape_of(r.src[0]), tuple(sorted(r.arg[1]))
  if not axes or not all(isinstance(s, int) for s in ishape): return None   # (symbolic sizes: not fused)
  row = 1
  for a in axes: row *= ishape[a]
  if row <= 1 or row > knobs.get("FUSE_NORMS_MAX_ROW"): return None
  if any(ishape[d] != 1 and d not in axes for d in range(axes[0], len(ishape))): return None
  try: ren = Device[dev].renderer if dev is not None else None
  except Exception: ren = None   # (a device that cannot open here)
  if ren is not None and spreads(ishape, axes, ren): return None
  return ishape, axes

def _fused_kernel(realized: dict[UOp, BufRef], ref: BufRef, val: UOp, st: ShapeTracker, u: UOp,
                  fuse: tuple[tuple[int, ...], tuple[int, ...]]) -> tuple[_KernelBuilder, UOp] | None:
  """val lowered with row fusion of reductions of kind `fuse` (its builder and value), or None where something in it
  still needs a buffer of its own."""
  kb = _KernelBuilder(realized, fuse)
  kb.buf_index(ref)
  try: return kb, kb.lower(val, st, False, root=val is u)
  except (_NeedRealize, _NoFusion): return None

def _append_axes(st: ShapeTracker, n: int) -> ShapeTracker:
  """st with n size-1 axes appended (the axes row fusion adds to the iteration space)."""
  v = st.views[-1]
  return ShapeTracker(st.views[:-1] + (View(v.shape + (1,) * n, v.strides + (0,) * n, v.offset, v.mask + ((0, 1),) * n if v.mask else None),))

def _value_of(u: UOp) -> UOp:
  return u.src[1] if u.op is Ops.ASSIGN else u.src[0] if u.op is Ops.CONTIGUOUS else u

def create_schedule(targets: list[UOp], default_device: str | None = None) -> tuple[list[ScheduleItem], dict[UOp, BufRef]]:
  """Kernels that compute every target, in order; returns them and the buffer each realized node lives in.
  A graph that reads no buffer (a constant) runs on default_device."""
  from baregrad.engine.attention_fusion import attention_kernel, internal_nodes, root_value   # (it builds on this module's kernel builder)
  realized: dict[UOp, BufRef] = {}
  nodes = _all_nodes(targets)  # topological order; the graph does not change while kernels are cut
  # bounds checks on computed nodes are computed alongside (engine/checks.py)
  check_of: dict[UOp, tuple[UOp, str]] = {}
  if checks.registry and (fs := checks.found(nodes)):
    check_of = {p: (n, m) for n, p, m in fs}
    targets = list(targets) + list(check_of)
    seen = dict.fromkeys(nodes)
    nodes += [u for u in _all_nodes(list(check_of)) if u not in seen]  # still topological: they only add on top
  pos = {u: i for i, u in enumerate(nodes)}
  for u in nodes:
    if u.op is Ops.ASSIGN:
      tgt = u.src[0]
      if tgt.op is not Ops.BUFFER: raise ValueError("ASSIGN target must be a realized buffer")
  # a node already backed by a buffer needs no kernel
  must: set[UOp] = {t for t in targets if not _is_buffer_view(t)}
  devices = _devices(nodes)
  for u in nodes:
    if u.op in (Ops.COPY, Ops.CONTIGUOUS, Ops.ASSIGN): must.add(u)
    # a reshaped reduction may still fuse into an elementwise root (_reshape_to_reduce); if not, lowering asks for it
    # (unless row fusion may compute it per row in its consumers' kernels: _row_fusion)
    if u.op in GroupOp.Movement and u.op is not Ops.RESHAPE and u.src[0].op is Ops.REDUCE_AXIS and \
       _row_fusion(u.src[0], devices.get(u) or default_device) is None: must.add(u.src[0])
  _cut_deep_chains(nodes, must)
  _cut_shared_values(nodes, must)
  # an attention product is a kernel of its own; its scores, softmax and statistics are computed in it (those the
  # caller asked for aside)
  roots = {root_value(t) for t in must}
  for u in nodes:
    if u.op is Ops.REDUCE_AXIS and (inside := internal_nodes(u)):
      if u not in roots: must.add(u)
      must -= inside - set(targets)
  # reads of a storage's current version run before the ASSIGN that writes its next one: nodes that depend on no
  # ASSIGN come first (a valid topological order: such a node has no ASSIGN below it)
  after_write: set[UOp] = set()
  for u in nodes:
    if u.op is Ops.ASSIGN or any(s in after_write for s in u.src): after_write.add(u)
  key = {u: (u in after_write, i) for i, u in enumerate(nodes)}
  items: list[ScheduleItem] = []
  while True:
    # kernels of nodes before the last newly realized one cannot contain it (it is not among their inputs): keep them
    order = sorted((u for u in nodes if u in must and u not in realized), key=key.__getitem__)
    try:
      for u in order:
        if u.op is Ops.COPY:
          src = u.src[0]
          sref = _src_ref(src, realized)
          ref = BufRef(u.arg, numel(u), u.dtype)
          realized[u] = ref
          items.append(ScheduleItem(None, [ref, sref], "copy", u))
          continue
        dev = devices.get(u) or default_device
        if dev is None: raise ValueError("cannot tell which device computes this tensor (it has no buffers): give it a device")
        ref = u.src[0].arg if u.op is Ops.ASSIGN else BufRef(dev, numel(u), u.dtype)
        kb = _KernelBuilder(realized)
        kb.buf_index(ref)
        n_app, unfused = 0, _NeedRealize(u)   # axes row fusion appended to the iteration space; what fails without it
        val = _value_of(u)
        if u.op is Ops.ASSIGN and u.arg is not None:
          # a write into part of the buffer (x[a:b] = v, a KV cache's rows at a position): stored through that view, the
          # rest of the buffer keeps its bytes
          shape = u.arg.shape
          st, store_st = ShapeTracker.from_shape(shape), u.arg
        else:
          # a reshape at the root only relabels the contiguous output: store the computed value in its own shape
          inner = val
          while inner.op is Ops.RESHAPE and inner.src[0] not in realized: inner = inner.src[0]
          if inner.op not in GroupOp.Movement and inner.op is not Ops.BUFFER and inner not in realized: val = inner
          val = _reshape_to_reduce(val, realized)
          shape = shape_of(val) if val is not _value_of(u) else shape_of(u)
          st = store_st = ShapeTracker.from_shape(shape)
        # softmax(q k^T) v: one kernel over (..., L, D, S, K) where the graph fits (engine/attention_fusion.py)
        att = None if u.op is Ops.ASSIGN and u.arg is not None else attention_kernel(realized, ref, val, st, store_st, u)
        if att is not None: kb, ast = att
        else:
          try: lowered = kb.lower(val, st, False, root=val is u)
          except _NeedRealize as e:
            # a reduction broadcast back over its rows: one kernel computing it per row, where that works (else as before)
            if (fuse := _row_fusion(e.u, dev)) is None or (fk := _fused_kernel(realized, ref, val, st, u, fuse)) is None: raise
            kb, lowered = fk
            n_app, unfused = len(fuse[1]), e
            st, store_st = _append_axes(st, n_app), _append_axes(store_st, n_app)
          if not any(x.op is Ops.VIEW for x in lowered.toposort()) and shape == (): st = store_st = ShapeTracker.from_shape(())
          ast = UOp(Ops.SINK, src=(UOp(Ops.STORE, src=(gbuf(0, u.dtype), UOp(Ops.VIEW, src=(), arg=store_st), lowered)),))
          if n_app:
            try: verify_ast(ast)
            except KernelError: raise unfused from None   # (views that do not fit one iteration space: the kernels as before)
        if u.op is Ops.ASSIGN and kb.loads_output: _assign_check(ast, kb, ref, store_st)
        realized[u] = ref
        items.extend(_device_split(ast, kb.bufs, dev, u, check_of.get(u)))
      _check_write_order(items)
      if MERGE_OUTPUTS: items = merge_producers(items)
      return items, realized
    except _NeedRealize as e:
      if e.u in must: raise RuntimeError(f"scheduler loop on {e.u.op}") from None
      must.add(e.u)
      cut = pos[e.u]
      # keep the longest prefix that cannot contain e.u and writes nothing: a kernel added now may read what a kept
      # ASSIGN would already have overwritten
      # (type: ignore: every item built here has its node)
      k = next((i for i, it in enumerate(items) if pos[it.srcnode] >= cut or it.srcnode.op is Ops.ASSIGN), len(items))  # type: ignore[index, union-attr]
      items = items[:k]
      realized = {it.srcnode: it.bufs[0] for it in items}  # type: ignore[misc]

# The deepest chain of ops one kernel computes. A lazy chain of 100,000 ops (x = x + 1 in a loop) fused whole would be
# one kernel of 100,000 dependent ops: LLVM takes minutes over it, and its AST is deeper than any walk should recurse.
# Every this many ops a node gets its own buffer instead; the kernels between cuts are alike (the same AST over other
# buffers), so they compile once. A movement counts MOVE_WEIGHT ops (a reshape 1): each one that cannot merge into
# the view below adds a view, and a kernel's loads carry the whole stack (hashed and unravelled per access). A
# reduction starts the count again (a kernel holds at most one level of reduction, so at most twice this depth).
# Real models' fused chains stay far below it (an attention block's longest is a few dozen ops).
MAX_FUSE_DEPTH = 256
MOVE_WEIGHT = 8

def _cut_deep_chains(nodes: list[UOp], must: set[UOp]) -> None:
  """Add to `must` a node wherever a chain that would fuse reaches MAX_FUSE_DEPTH (nodes: topological order)."""
  depth: dict[UOp, int] = {}
  for u in nodes:
    if u in must or not u.src or u.op is Ops.REDUCE_AXIS: depth[u] = 0; continue
    d = max([depth[s] for s in u.src])
    op = u.op
    if op in GroupOp.Movement:   # (folded into the loads: never cut here, the next op is)
      depth[u] = d + (1 if op is Ops.RESHAPE else MOVE_WEIGHT)
      continue
    d += 1
    if d >= MAX_FUSE_DEPTH: must.add(u); d = 0
    depth[u] = d

# An elementwise value that several kernels with reductions would each compute in full: a transformer's residual
# stream (x + attn + mlp + ...) is read by both reductions of the next layer norm and by the next residual add, so
# fused everywhere, layer L's norms would recompute all 2L terms before it (ViT-tiny: 42 kernels of 197x192 re-adding
# up to 25 buffers, 8 ms of its 34). Such a value gets its own buffer when at least SHARED_MIN_LOADS buffers feed it
# (a cheap one, x * 2 or a bias add, stays fused: a second read of memory costs more than recomputing it).
SHARED_MIN_LOADS = 3

def _cut_shared_values(nodes: list[UOp], must: set[UOp]) -> None:
  """Add to `must` each elementwise node two or more reductions' kernels would compute, where SHARED_MIN_LOADS or
  more buffers feed it (nodes: topological order)."""
  loads: dict[UOp, int] = {}
  for u in nodes:   # the buffers (or realized values) a node's fused computation reads, counted up to SHARED_MIN_LOADS
    if not u.src or u in must or u.op is Ops.REDUCE_AXIS or u.op not in _FUSES: loads[u] = 1
    else: loads[u] = min(SHARED_MIN_LOADS, sum(loads[x] for x in u.src))
  users: dict[UOp, list[UOp]] = {}
  for u in nodes:
    for x in u.src: users.setdefault(x, []).append(u)
  # the kernels with a reduction a node's value is computed in (at most two kept: two is already shared)
  into: dict[UOp, frozenset] = {}
  for u in reversed(nodes):
    ks: set[UOp] = set()
    for p in users.get(u, ()):
      if p.op is Ops.REDUCE_AXIS: ks.add(p)
      elif p in must or p.op not in _FUSES: continue   # (its own kernel: a reduction there computes u only once)
      else: ks |= into[p]
      if len(ks) >= 2: break
    if len(ks) >= 2 and u.op in _ELEMENTWISE and loads[u] >= SHARED_MIN_LOADS and u not in must:
      must.add(u); ks = set()
    into[u] = frozenset(ks)

_ELEMENTWISE = GroupOp.ALU | {Ops.CAST, Ops.BITCAST}
_FUSES = _ELEMENTWISE | GroupOp.Movement   # what a consumer's kernel computes inline

def _devices(nodes: list[UOp]) -> dict[UOp, str | None]:
  """graph.device_of of every node (topological order) in one pass: asked node by node, each walk would go down to a
  buffer through every kernel before it (quadratic in a long chain's length)."""
  dev: dict[UOp, str | None] = {}
  for u in nodes:
    if u.op is Ops.BUFFER: dev[u] = u.arg.device
    elif u.op is Ops.COPY: dev[u] = u.arg
    else: dev[u] = next((d for s in reversed(u.src) if (d := dev[s]) is not None), None)
  return dev

def _check_write_order(items: list[ScheduleItem]) -> None:
  """No kernel reads a version of a storage that an earlier kernel of the schedule has already overwritten."""
  written: dict = {}
  for it in items:
    outs = it.outputs()
    written_idx = {i for _, i in outs}
    for i, b in enumerate(it.bufs):
      if i not in written_idx and (w := written.get(b.storage)) is not None and w > b.version:
        # (type: ignore: items built here have their node)
        raise RuntimeError(f"schedule: {it.srcnode.op.name} reads version {b.version} of a buffer ({b.size} x {b.dtype.name}) after an "  # type: ignore[union-attr]
                           f"earlier kernel of the same schedule wrote version {w}")
    for n, i in outs:
      if n is not None and n.op is Ops.ASSIGN: written[it.bufs[i].storage] = it.bufs[i].version

def _device_split(ast: UOp, bufs: list[BufRef], dev: str, u: UOp, check: tuple[UOp, str] | None) -> list[ScheduleItem]:
  """One kernel, or several where the device spreads a long reduction over its compute units (codegen/gridreduce) or
  a CPU reads a matmul operand from packed panels (codegen/pack).
  A bounds check's flag is the last kernel's output (the one that writes bufs[0])."""
  try: ren = Device[dev].renderer
  except Exception: ren = None   # a device that cannot open here: its kernels are cut when they run
  if (plan := split_reduce(ast, ren) or row_stream(ast, ren) or pack_operand(ast, ren)) is None: return [ScheduleItem(ast, bufs, "kernel", u, check)]
  refs = list(bufs) + [BufRef(dev, n, dt) for n, dt in plan.temps]
  items = [ScheduleItem(a, [refs[i] for i in ids], "kernel", u) for a, ids in plan.kernels]
  assert items[-1].bufs[0] is bufs[0], "a plan's last kernel writes the output"
  items[-1].check = check
  return items

# (DETACH: the identity in a kernel; erf and gelu are built under one for their own gradients, and a leaf there kept a
# matmul's bias-add and gelu out of its kernel: ViT-tiny's fc1 output written, read back and written again)
def _is_elementwise(u: UOp) -> bool: return u.op in GroupOp.ALU or u.op in (Ops.CAST, Ops.BITCAST, Ops.DETACH)

def _reshape_to_reduce(val: UOp, realized: dict[UOp, BufRef]) -> UOp:
  """An elementwise root over a reshaped reduction (x.sum(-1) + 1: the reduction's size-1 axes dropped) runs in the
  reduction's own shape: every leaf is reshaped to it instead, and the output, contiguous, is the same bytes."""
  if not _is_elementwise(val): return val
  # (loops, not recursive closures: a closure that calls itself is a reference cycle, which kept every graph scheduled
  # here, and the buffers it reads, alive until the next collection)
  leaves: dict[UOp, None] = {}
  inner: list[UOp] = []   # the elementwise nodes, each after its sources
  seen: set[UOp] = set()
  stack: list[tuple[UOp, bool]] = [(val, False)]
  while stack:
    u, expanded = stack.pop()
    if expanded: inner.append(u); continue
    if u in seen: continue
    seen.add(u)
    if u in realized or not _is_elementwise(u): leaves[u] = None
    else: stack += [(u, True)] + [(x, False) for x in reversed(u.src)]
  n = numel(val)
  rshape = next((shape_of(b) for l in leaves if l.op is Ops.RESHAPE and (b := _unreshaped(l, realized)).op is Ops.REDUCE_AXIS
                 and b not in realized and numel(b) == n), None)
  if rshape is None or rshape == shape_of(val): return val
  memo: dict[UOp, UOp] = {}
  for u in leaves:
    if shape_of(u) == (): memo[u] = u
    elif u.op is Ops.RESHAPE and shape_of(b := _unreshaped(u, realized)) == rshape: memo[u] = b
    else: memo[u] = UOp(Ops.RESHAPE, u.dtype, (u,), rshape)
  for u in inner: memo[u] = u.replace(src=tuple(memo[x] for x in u.src))
  return memo[val]

def _unreshaped(u: UOp, realized: dict[UOp, BufRef]) -> UOp:
  while u.op is Ops.RESHAPE and u not in realized: u = u.src[0]
  return u

def _assign_check(ast: UOp, kb: _KernelBuilder, ref: BufRef, store: ShapeTracker) -> None:
  # reading the buffer being written is fine only where every element reads its own position (x += y, x[a:b] += y)
  for u in ast.toposort():
    if u.op is Ops.LOAD and kb.bufs[u.src[0].arg].storage is ref.storage and \
       (not (u.src[1].arg == store or (store.contiguous and u.src[1].arg.contiguous)) or len(u.src) == 3):
      raise ValueError("ASSIGN reads its own target through a view: the result would depend on the order of writes")

def _src_ref(src: UOp, realized: dict[UOp, BufRef]) -> BufRef:
  """The buffer a COPY reads: its source's, where the source is a buffer or a reshape of a whole one (a reshape keeps
  the bytes in order: a realized gradient seen in its parameter's shape is copied with no kernel making it contiguous
  first); else the source must be computed into a buffer of its own (_NeedRealize)."""
  base = src
  while base.op is Ops.RESHAPE and base not in realized: base = base.src[0]
  ref = realized.get(base)
  if ref is None and base.op is Ops.BUFFER:
    if base.arg.stale: raise stale_error(base.arg)
    ref = base.arg
  if ref is not None and (base is src or (ref.size == numel(src) and ref.dtype == src.dtype)): return ref
  raise _NeedRealize(src)

def _all_nodes(targets: list[UOp]) -> list[UOp]:
  seen: dict[UOp, None] = {}
  for t in targets:
    for u in t.toposort(): seen.setdefault(u, None)
  return list(seen)
