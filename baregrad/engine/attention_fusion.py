"""Attention fusion (FUSE_ATTENTION): softmax(q k^T * scale + mask) v as one kernel, no seq x seq buffer.

The scheduler asks `attention_kernel` for each kernel it cuts whose value is a product over keys (`w @ v`: a sum over
the last axis of a (..., L, D, S) input) where, under it, softmax-like row reductions over the keys (..., L, S) read
per-key dot products (`q @ k^T`: sums over the last axis of (..., L, S, K)). Such a graph, however it was built
(Tensor.scaled_dot_product_attention, nn.MultiheadAttention, an ONNX MatMul -> Div -> Add(mask) -> Softmax -> MatMul),
becomes one kernel over the iteration space (..., L, D, S, K):

  - the output (..., L, D) and the product's input (..., L, D, S) take a size-1 K axis;
  - the row reductions' inputs (..., L, S) take size-1 D and K axes, and reduce along S;
  - the dot products' inputs (..., L, S, K) take a size-1 D axis, and reduce along K.

Each pass over the keys (the max; then the sum of exponentials beside the weighted sum of values, which is divided
by it once at the end: _hoist_division) computes the dot products it reads again in its own loop (codegen/lower.py
gives a reduction nested in another, and reading its ranges, loops of its own, and lets sibling reductions share
theirs): twice the dot products, no memory traffic for scores. Only attentions of FUSE_ATTENTION_MIN_SCORES scores
or more are fused: below that the unfused kernels are faster (bench/attention.py). The masks, the scale and causal masks
(IOTA comparisons) are elementwise code in the kernel. Anything else that needs a buffer (a projection computing q)
gets one first, as everywhere; a graph that does not fit (a dot product of another shape, a mask with a padded view of
a computed value, views that do not place) keeps the kernels it had."""
from __future__ import annotations
import math
from collections.abc import Callable
from dataclasses import dataclass
from baregrad import knobs
from baregrad.ir.ops import UOp, Ops
from baregrad.ir.dtype import dtypes
from baregrad.ir.view import ShapeTracker, View
from baregrad.codegen.astbuild import gbuf
from baregrad.codegen.kernel import verify_ast, KernelError
from baregrad.engine.graph import BufRef, shape_of
from baregrad.engine.schedule import _KernelBuilder, _NeedRealize, _NoFusion, _LEAVES

@dataclass(frozen=True)
class AttentionPattern:
  """The shapes of one attention graph and its reductions: batch axes `nb`; kinds: reduction -> "final" (w @ v, the
  kernel's root), "row" (softmax's max and sum over the keys) or "score" (q @ k^T); internal: the nodes whose value
  depends on a score (they must not get a buffer: that would be the seq x seq matrix)."""
  nb: int
  L: int
  D: int
  S: int
  K: int
  kinds: dict[UOp, str]
  internal: frozenset[UOp]

  def inserts(self, space: str) -> tuple[int, ...]:
    """Where a view of `space` ("out", "final", "row", "score") gets size-1 axes in the kernel's (..., L, D, S, K)."""
    nb = self.nb
    return {"out": (nb + 3,), "final": (nb + 3,), "row": (nb + 1, nb + 3), "score": (nb + 1,)}[space]

  def out_shape(self, kind: str, batch: tuple[int, ...]) -> tuple[int, ...]:
    """The shape a reduction of `kind` has in the kernel's iteration space."""
    return batch + {"final": (self.L, self.D, 1, 1), "row": (self.L, 1, 1, 1), "score": (self.L, 1, self.S, 1)}[kind]

def match(val: UOp, realized: dict[UOp, BufRef]) -> AttentionPattern | None:
  """val's attention pattern (module docstring), or None where val is not softmax-weighted sums of dot products."""
  if val.op is not Ops.REDUCE_AXIS or val.arg[0] is not Ops.ADD: return None
  ish = shape_of(val.src[0])
  n = len(ish)
  if n < 3 or tuple(sorted(val.arg[1])) != (n - 1,) or not all(isinstance(s, int) for s in ish): return None
  nb = n - 3
  B, (L, D, S) = ish[:nb], ish[nb:]
  if math.prod(B) * L * S < knobs.get("FUSE_ATTENTION_MIN_SCORES"): return None   # (the unfused kernels are faster)
  kinds: dict[UOp, str] = {val: "final"}
  seen: list[UOp] = []
  visited: set[UOp] = set()
  stack = [val.src[0]]
  while stack:   # the final product's input, down to buffers and other kernels' values; scores are not entered
    x = stack.pop()
    if x in visited or x in realized or x.op in _LEAVES: continue
    visited.add(x)
    seen.append(x)
    if x.op is Ops.REDUCE_AXIS:
      xs, ax = shape_of(x.src[0]), tuple(sorted(x.arg[1]))
      if xs == B + (L, S) and ax == (nb + 1,): kinds[x] = "row"; stack.append(x.src[0])
      elif len(xs) == nb + 3 and xs[:nb + 2] == B + (L, S) and ax == (nb + 2,) and x.arg[0] is Ops.ADD and isinstance(xs[-1], int): kinds[x] = "score"
      continue   # (another reduction: a kernel of its own, as anywhere)
    if x.op in (Ops.COPY, Ops.CONTIGUOUS, Ops.ASSIGN): continue
    stack.extend(x.src)
  scores = [x for x, k in kinds.items() if k == "score"]
  if not scores or "row" not in kinds.values(): return None
  ks = {shape_of(x.src[0])[-1] for x in scores}
  if len(ks) != 1: return None
  dep: set[UOp] = set(scores)
  changed = True
  while changed:   # (a few dozen nodes: to a fixed point)
    changed = False
    for x in seen:
      if x not in dep and any(s in dep for s in x.src): dep.add(x); changed = True
  return AttentionPattern(nb, L, D, S, ks.pop(), kinds, frozenset(dep | {val}))

def internal_nodes(u: UOp) -> frozenset[UOp]:
  """The nodes of the attention pattern kernel node u computes (as create_schedule takes its value: below an ASSIGN or
  CONTIGUOUS and the reshapes at its root) that must not get buffers of their own; empty where u is none."""
  if not knobs.get("FUSE_ATTENTION"): return frozenset()
  val = root_value(u)
  return (pat.internal - {val}) if (pat := match(val, {})) is not None else frozenset()

def root_value(u: UOp) -> UOp:
  """The value the kernel of node u computes: below an ASSIGN or CONTIGUOUS and the reshapes at its root."""
  val = u.src[1] if u.op is Ops.ASSIGN else u.src[0] if u.op is Ops.CONTIGUOUS else u
  while val.op is Ops.RESHAPE: val = val.src[0]
  return val

class _AttentionBuilder(_KernelBuilder):
  """A kernel builder whose `in_reduce` says which space a view is in (False: the output's; else the kind of the
  reduction whose input it is) and places it in the kernel's iteration space (AttentionPattern.inserts)."""
  def __init__(self, realized: dict[UOp, BufRef], pat: AttentionPattern):
    super().__init__(realized)
    self.pat = pat

  def kview(self, st: ShapeTracker, in_reduce: bool | str) -> ShapeTracker:
    ins = self.pat.inserts(in_reduce if isinstance(in_reduce, str) else "out")
    v = st.views[-1]
    rank = self.pat.nb + 4
    if len(v.shape) + len(ins) != rank: raise _NoFusion()
    shape, strides, mask = list(v.shape), list(v.strides), list(v.mask) if v.mask else None
    for p in ins:
      shape.insert(p, 1); strides.insert(p, 0)
      if mask is not None: mask.insert(p, (0, 1))
    return ShapeTracker(st.views[:-1] + (View(tuple(shape), tuple(strides), v.offset, tuple(mask) if mask is not None else None),))

  def _per_row(self, u: UOp) -> bool:
    # a value that depends on the scores is computed in the kernel wherever it is read, however costly: that is the
    # point (a buffer of it would be seq x seq)
    return u in self.pat.internal

  def _step(self, u: UOp, st: ShapeTracker, in_reduce: bool, root: bool) -> UOp | tuple[list[tuple], Callable[[], UOp]]:
    if u.op is not Ops.REDUCE_AXIS or (not root and u in self.realized): return super()._step(u, st, in_reduce, root)
    kind = self.pat.kinds.get(u)
    if kind is None: raise _NeedRealize(u)
    kst = self.kview(st, in_reduce)
    nb = self.pat.nb
    batch = kst.shape[:nb]
    # a reduction's value is read where its own output index is the kernel's (or broadcast over the axes it lacks)
    want = View.contiguous(self.pat.out_shape(kind, batch)).expand(kst.shape)  # type: ignore[arg-type]
    if (got := _one_view(kst)) is None or (got.shape, got.strides, got.offset, got.mask) != (want.shape, want.strides, want.offset, want.mask):
      raise _NoFusion()
    axis = nb + 3 if kind == "score" else nb + 2
    k = (u.src[0], ShapeTracker.from_shape(shape_of(u.src[0])), kind)
    def build() -> UOp:
      val = self.memo[k]  # type: ignore[index]
      if kind == "final" and (h := _hoist_division(val, axis)) is not None: return h
      return UOp(Ops.REDUCE_AXIS, u.dtype, (val,), (u.arg[0], (axis,)))
    return [k], build

def _hoist_division(val: UOp, axis: int) -> UOp | None:
  """sum over `axis` of (e / l) * v as (sum of e * v) / l where l is a reduction over that axis (softmax's sum: the same
  for every key); None where val is not of that form. The sum of e * v and the sum l then share their loop over the
  keys (codegen/lower.py: sibling reductions over the same axes), so the dot products of the two passes are computed
  once: two passes over the keys, not three."""
  if val.op is not Ops.MUL or not dtypes.is_float(val.dtype): return None
  for a, b in (val.src, val.src[::-1]):
    if a.op is Ops.FDIV and a.src[1].op is Ops.REDUCE_AXIS and axis in a.src[1].arg[1] and a.src[1].arg[0] is Ops.ADD:
      num = UOp(Ops.REDUCE_AXIS, val.dtype, (a.src[0] * b,), (Ops.ADD, (axis,)))
      return UOp(Ops.FDIV, val.dtype, (num, a.src[1]))
  return None

def _one_view(st: ShapeTracker) -> View | None:
  """st as one unmasked view where it is one, or two whose upper one (a reshape of an expanded row statistic) steps
  through the lower one's axes without carrying from one into the next; else None."""
  if len(st.views) == 1: return st.views[0]
  if len(st.views) != 2 or any(v.mask is not None for v in st.views) or st.views[1].offset != 0: return None
  lo, up = st.views
  if not all(isinstance(x, int) for x in lo.shape + lo.strides + up.shape + up.strides): return None
  cs = [1] * len(lo.shape)   # (the flat index of lo's shape, laid out contiguously)
  for j in range(len(lo.shape) - 2, -1, -1): cs[j] = cs[j + 1] * lo.shape[j + 1]  # type: ignore[assignment]
  reach = [0] * len(lo.shape)
  strides: list[int] = []
  for n, s in zip(up.shape, up.strides):
    if n == 1 or s == 0: strides.append(0); continue
    j = next((j for j in range(len(lo.shape)) if lo.shape[j] > 1 and s % cs[j] == 0 and s // cs[j] < lo.shape[j]), None)  # type: ignore[assignment]
    if j is None or s < 0: return None
    reach[j] += s // cs[j] * (n - 1)  # type: ignore[assignment]
    strides.append(s // cs[j] * lo.strides[j])
  if any(r >= n for r, n in zip(reach, lo.shape) if r): return None
  return View(up.shape, tuple(strides), lo.offset, None)

def attention_kernel(realized: dict[UOp, BufRef], ref: BufRef, val: UOp, st: ShapeTracker, store_st: ShapeTracker,
                     u: UOp) -> tuple[_KernelBuilder, UOp] | None:
  """The one-kernel AST (SINK) of attention value `val` written to `ref` through store_st (st: the value's view), and
  its builder; None where FUSE_ATTENTION is off or val is no attention pattern, or where its graph does not fit one
  kernel. Raises _NeedRealize for a node outside the pattern that needs a buffer first (a projection computing q)."""
  if not knobs.get("FUSE_ATTENTION") or (pat := match(val, realized)) is None: return None
  kb = _AttentionBuilder(realized, pat)
  kb.buf_index(ref)
  try: lowered = kb.lower(val, st, False, root=val is u)
  except _NeedRealize as e:
    if e.u in pat.internal: return None
    raise
  except _NoFusion: return None
  v = store_st.views[-1]
  top = View(v.shape + (1,), v.strides + (0,), v.offset, v.mask + ((0, 1),) if v.mask else None)
  ast = UOp(Ops.SINK, src=(UOp(Ops.STORE, src=(gbuf(0, u.dtype), UOp(Ops.VIEW, src=(), arg=ShapeTracker(store_st.views[:-1] + (top,))), lowered)),))
  try: verify_ast(ast)
  except KernelError: return None
  return kb, ast
