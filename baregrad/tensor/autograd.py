"""Reverse-mode autograd over the tensor graph: gradients are UOp graphs too, so they fuse like forward code."""
from __future__ import annotations
import math, weakref
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import UOp, Ops, GroupOp
from baregrad.engine.graph import shape_of, set_shape, device_of, stale_error, permute_uop, broadcast_const
from baregrad.engine import lazy

def _c(like: UOp, v: float) -> UOp:
  """A constant broadcast to like's shape."""
  return broadcast_const(UOp.const(like.dtype, v), shape_of(like))

def _alu(op: Ops, *src: UOp) -> UOp:
  dt = dtypes.bool if op in GroupOp.Comparison else src[-1].dtype
  u = UOp(op, dt, src)
  # the sources' common shape, where they agree (else shape_of raises naming them, when compute_gradient asks)
  if u._shape is None and (s := src[0]._shape) is not None and all(x._shape == s for x in src): set_shape(u, s)
  return u

def _expand_to(g: UOp, shape: tuple[int, ...]) -> UOp: return g if shape_of(g) == shape else UOp(Ops.EXPAND, g.dtype, (g,), shape)

def _sum_to(g: UOp, shape: tuple[int, ...]) -> UOp:
  """Reduce g (of an expanded shape) back to shape."""
  gs = shape_of(g)
  axes = tuple(i for i, (a, b) in enumerate(zip(gs, shape)) if a != b)
  if not axes: return g
  # a kernel cannot reduce over an empty axis: pad it to one zero (the sum of nothing)
  if any(gs[a] == 0 for a in axes): g = UOp(Ops.PAD, g.dtype, (g,), tuple((0, 1) if i in axes and s == 0 else (0, 0) for i, s in enumerate(gs)))
  return UOp(Ops.REDUCE_AXIS, g.dtype, (g,), (Ops.ADD, axes))

def _inv_perm(order: tuple[int, ...]) -> tuple[int, ...]:
  out = [0] * len(order)
  for i, o in enumerate(order): out[o] = i
  return tuple(out)

def _gather_grad(u: UOp, g: UOp) -> UOp:
  """GATHER's source gradient: each output's gradient added where it was read (scatter-add): a one-hot compare of the
  index against the source's positions along dim, summed over the index's own axis there (an index out of range
  matches nothing, as its forward read 0)."""
  src, idx = u.src
  d = u.arg[0]
  ishape, n = shape_of(idx), shape_of(src)[d]
  one, big = ishape + (1,), ishape + (n,)
  ie = UOp(Ops.EXPAND, idx.dtype, (UOp(Ops.RESHAPE, idx.dtype, (idx,), one),), big)
  ar = UOp(Ops.IOTA, dtypes.int32, (), n)
  if idx.dtype != dtypes.int32: ar = UOp(Ops.CAST, idx.dtype, (ar,))
  ar = UOp(Ops.EXPAND, idx.dtype, (UOp(Ops.RESHAPE, idx.dtype, (ar,), (1,) * len(ishape) + (n,)),), big)
  ge = UOp(Ops.EXPAND, g.dtype, (UOp(Ops.RESHAPE, g.dtype, (g,), one),), big)
  w = _alu(Ops.WHERE, _alu(Ops.CMPEQ, ie, ar), ge, broadcast_const(UOp.const(g.dtype, 0), big))
  r = UOp(Ops.RESHAPE, g.dtype, (UOp(Ops.REDUCE_AXIS, g.dtype, (w,), (Ops.ADD, (d,))),), ishape[:d] + ishape[d + 1:] + (n,))
  order = list(range(len(ishape) - 1))
  order.insert(d, len(ishape) - 1)
  return permute_uop(r, tuple(order))

def grad_rule(u: UOp, g: UOp) -> tuple[UOp | None, ...]:
  """Gradients of u's sources given the gradient g of u."""
  s = u.src
  if u.op is Ops.ADD: return (g, g)
  if u.op is Ops.SUB: return (g, _alu(Ops.NEG, g))
  if u.op is Ops.MUL: return (_alu(Ops.MUL, g, s[1]), _alu(Ops.MUL, g, s[0]))
  if u.op is Ops.FDIV:
    return (_alu(Ops.FDIV, g, s[1]), _alu(Ops.NEG, _alu(Ops.FDIV, _alu(Ops.MUL, g, u), s[1])))
  if u.op is Ops.NEG: return (_alu(Ops.NEG, g),)
  if u.op is Ops.EXP2: return (_alu(Ops.MUL, _alu(Ops.MUL, g, u), _c(u, math.log(2))),)
  if u.op is Ops.LOG2: return (_alu(Ops.FDIV, g, _alu(Ops.MUL, s[0], _c(u, math.log(2)))),)
  if u.op is Ops.SIN:
    # cos x = 1 - 2 sin^2(x/2): exact halving, where pi/2 - x loses x's low bits for large x
    h = _alu(Ops.SIN, _alu(Ops.MUL, s[0], _c(s[0], 0.5)))
    return (_alu(Ops.MUL, g, _alu(Ops.SUB, _c(s[0], 1.0), _alu(Ops.MUL, _c(s[0], 2.0), _alu(Ops.MUL, h, h)))),)
  if u.op is Ops.SQRT: return (_alu(Ops.FDIV, g, _alu(Ops.MUL, u, _c(u, 2.0))),)
  if u.op is Ops.RECIP: return (_alu(Ops.NEG, _alu(Ops.MUL, g, _alu(Ops.MUL, u, u))),)
  if u.op is Ops.TRUNC: return (_alu(Ops.MUL, g, _c(g, 0.0)),)
  if u.op is Ops.MAX:
    # ties split the gradient evenly, as torch.maximum does
    gt = UOp(Ops.CAST, g.dtype, (_alu(Ops.CMPLT, s[1], s[0]),))
    eq = UOp(Ops.CAST, g.dtype, (_alu(Ops.CMPEQ, s[0], s[1]),))
    w0 = _alu(Ops.ADD, gt, _alu(Ops.MUL, eq, _c(g, 0.5)))
    w1 = _alu(Ops.SUB, _c(g, 1.0), w0)
    return (_alu(Ops.MUL, g, w0), _alu(Ops.MUL, g, w1))
  if u.op is Ops.WHERE:
    z = _c(g, 0.0)
    return (None, _alu(Ops.WHERE, s[0], g, z), _alu(Ops.WHERE, s[0], z, g))
  if u.op is Ops.MULACC: return (_alu(Ops.MUL, g, s[1]), _alu(Ops.MUL, g, s[0]), g)
  if u.op is Ops.CAST:
    return (UOp(Ops.CAST, s[0].dtype, (g,)) if dtypes.is_float(s[0].dtype) else None,)
  if u.op in GroupOp.Comparison or u.op in (Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.IDIV, Ops.MOD, Ops.BITCAST):
    return tuple(None for _ in s)
  if u.op is Ops.REDUCE_AXIS:
    op, axes = u.arg
    ishape = shape_of(s[0])
    ge = _expand_to(g, ishape)
    if op is Ops.ADD: return (ge,)
    if op is Ops.MAX:
      hit = UOp(Ops.CAST, g.dtype, (_alu(Ops.CMPEQ, s[0], _expand_to(u, ishape)),))
      cnt = _expand_to(UOp(Ops.REDUCE_AXIS, g.dtype, (hit,), (Ops.ADD, axes)), ishape)
      return (_alu(Ops.FDIV, _alu(Ops.MUL, ge, hit), cnt),)
    if op is Ops.MUL:
      # product of the others: out / x, except where x is 0 (0/0): with one zero on the axis that element gets the
      # product of the nonzeros and the rest 0; with two or more zeros every gradient is 0
      x = s[0]
      z = _alu(Ops.CMPEQ, x, _c(x, 0.0))
      nz = _alu(Ops.WHERE, z, _c(x, 1.0), x)
      p_nz = _expand_to(UOp(Ops.REDUCE_AXIS, x.dtype, (nz,), (Ops.MUL, axes)), ishape)
      zc = _expand_to(UOp(Ops.REDUCE_AXIS, x.dtype, (UOp(Ops.CAST, x.dtype, (z,)),), (Ops.ADD, axes)), ishape)
      others = _alu(Ops.WHERE, _alu(Ops.CMPEQ, zc, _c(x, 0.0)), _alu(Ops.FDIV, _expand_to(u, ishape), x),
                    _alu(Ops.WHERE, _alu(Ops.AND, z, _alu(Ops.CMPEQ, zc, _c(x, 1.0))), p_nz, _c(x, 0.0)))
      return (_alu(Ops.MUL, ge, others),)
  if u.op is Ops.RESHAPE: return (UOp(Ops.RESHAPE, g.dtype, (g,), shape_of(s[0])),)
  if u.op is Ops.PERMUTE: return (permute_uop(g, _inv_perm(u.arg)),)
  if u.op is Ops.EXPAND: return (_sum_to(g, shape_of(s[0])),)
  if u.op is Ops.PAD:
    return (UOp(Ops.SHRINK, g.dtype, (g,), tuple((b, b + n) for (b, _), n in zip(u.arg, shape_of(s[0])))),)
  if u.op is Ops.SHRINK:
    return (UOp(Ops.PAD, g.dtype, (g,), tuple((lo, n - hi) for (lo, hi), n in zip(u.arg, shape_of(s[0])))),)
  if u.op is Ops.FLIP: return (UOp(Ops.FLIP, g.dtype, (g,), u.arg),)
  if u.op in (Ops.CONTIGUOUS,): return (g,) if u.arg is None else (UOp(Ops.CONTIGUOUS, g.dtype, (g,)),)
  if u.op is Ops.COPY: return (UOp(Ops.COPY, g.dtype, (g,), device_of(s[0])),)
  if u.op is Ops.DETACH: return (None,)
  if u.op is Ops.GATHER: return (_gather_grad(u, g), None)
  raise NotImplementedError(f"no gradient rule for {u.op}")

def compute_gradient(root: UOp, root_grad: UOp, targets: set[UOp]) -> dict[UOp, UOp]:
  """d root / d t for every t in targets reachable from root."""
  topo = list(root.toposort())
  # only nodes on a path to a target matter
  on_path: set[UOp] = set()
  for u in topo:
    if u in targets or any(s in on_path for s in u.src if u.op is not Ops.DETACH): on_path.add(u)
  grads: dict[UOp, UOp] = {root: root_grad}
  for u in reversed(topo):
    if u not in grads or u in targets and not u.src: continue
    if u not in on_path or u.op is Ops.DETACH: continue
    if u.op in (Ops.BUFFER, Ops.CONST, Ops.IOTA, Ops.DEFINE_VAR): continue
    sg = grad_rule(u, grads[u])
    for src, g in zip(u.src, sg):
      if g is None or src not in on_path: continue
      if shape_of(g) != shape_of(src): raise RuntimeError(f"gradient of {u.op} has shape {shape_of(g)}, expected {shape_of(src)}")
      grads[src] = _alu(Ops.ADD, grads[src], g) if src in grads else g
  return {t: grads[t] for t in targets if t in grads}

# the gradient graphs of loss.backward() calls, by the loss graph's structure (its schedule key: engine/lazy.py _abstract)
# and which of its nodes are targets: an eager training loop builds the same loss graph over new buffers every step,
# and deriving its gradient node by node costs more than rebuilding the recorded result (tensor/recipe.py). The key
# holds every node's op, dtype, argument and sources and every buffer's place, size and device: all a gradient rule
# reads. The root's gradient is the constant 1 of the loss's shape and dtype, which the key fixes too.
GRAD_RECIPES_MAX = 256
_grad_recipes: dict[tuple, tuple | None] = {}

def _recipe_gradient(root: UOp, root_grad: UOp, targets: set[UOp], ab: tuple) -> dict[UOp, UOp]:
  from baregrad.tensor.recipe import Recipe
  key, pos, nodes, _ = ab
  tpos = tuple(sorted(pos[t] for t in targets))
  rkey = (key, tpos)
  if (rec := _grad_recipes.get(rkey, False)) is False:
    grads = compute_gradient(root, root_grad, targets)
    have = [p for p in tpos if nodes[p] in grads]
    r = Recipe.record([grads[nodes[p]] for p in have], nodes)   # (every node of the loss graph is a leaf)
    if len(_grad_recipes) >= GRAD_RECIPES_MAX: _grad_recipes.clear()
    _grad_recipes[rkey] = None if r is None else (r, have)
    return grads
  if rec is None: return compute_gradient(root, root_grad, targets)
  r, have = rec
  return dict(zip([nodes[p] for p in have], r.build(nodes)))

# called at the end of backward() with the leaves whose .grad it set (lazy gradients): a WeakMethod each, so an
# object that registers (baregrad.distributed's DistributedOptimizer starts its bucketed exchange here, computing the
# backward pass bucket by bucket) does not stay alive for it
grad_hooks: list[weakref.WeakMethod] = []

def shared_values(now: list[UOp], later: list[UOp]) -> list[UOp]:
  """Values the graphs of `now` compute that the graphs of `later` read too: nodes of both that a node of `later`
  alone consumes (a movement's source in its stead), leaving out leaves, values already computed and values with
  no reduction in them (cheaper to compute again than to store). Realized together with `now`, they are recorded as
  computed and `later` reads them instead of computing them again: gradients realized group by group (the
  activation gradient that the next layer's weight gradient also needs)."""
  mine: set[UOp] = set()
  for u in now: mine.update(u.toposort())
  theirs: dict[UOp, None] = {}
  for u in later: theirs.update(u.toposort())
  out: dict[UOp, None] = {}
  for m in theirs:
    if m in mine: continue
    for src in m.src:
      if src not in mine: continue
      b = src
      while b.op in GroupOp.Movement: b = b.src[0]
      if b in out or b.op in (Ops.BUFFER, Ops.CONST, Ops.IOTA) or lazy.realized(b) is not None: continue
      if any(n.op is Ops.REDUCE_AXIS for n in b.toposort()): out[b] = None
  return list(out)

# tensors whose graph a backward() without retain_graph went through: PyTorch frees that graph, so a second backward
# through it raises. (Tracked per tensor, not per node: hash-consing makes a rebuilt expression the same nodes.)
_freed: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # id -> tensor

def backward(loss, gradient=None, retain_graph: bool = False) -> None:
  from baregrad.tensor.tensor import Tensor
  from baregrad.tensor.common import _all_grad_tensors
  if _freed.get(id(loss)) is loss:
    raise RuntimeError("Trying to backward through the graph a second time: the first backward() freed it. Specify "
                       "retain_graph=True in the first backward() if you need to backward through it again")
  implicit = gradient is None
  if gradient is None:
    if loss.numel() != 1: raise RuntimeError(f"backward() without a gradient needs a scalar (one-element) tensor, got shape {loss.shape}")
    if not dtypes.is_float(loss.dtype): raise RuntimeError(f"backward() needs a float tensor, got {loss.dtype}")
    gradient = Tensor.full(loss.shape, 1.0, dtype=loss.dtype, device=loss.device)
  elif gradient.shape != loss.shape: raise RuntimeError(f"Mismatch in shape: gradient of shape {gradient.shape} for a tensor of shape {loss.shape}")
  if not loss.requires_grad:
    raise RuntimeError(f"backward(): this tensor (shape {loss.shape}) does not require grad: no tensor with requires_grad=True contributes to it")
  leaves = [t for t in list(_all_grad_tensors.values()) if t.requires_grad]
  # loss.backward(): the gradient graph from the recipe kept for the loss graph's structure, where it has a key
  ab = lazy._abstract([loss.uop]) if implicit else None
  nodes = ab[1] if ab is not None else set(loss.uop.toposort())
  targets = {t.uop for t in leaves if t.uop in nodes}
  if not targets:
    # the leaves were overwritten in place since the graph was built (their tensors read newer versions now)
    if (stale := next((u.arg for u in nodes if u.op is Ops.BUFFER and u.arg.stale), None)) is not None: raise stale_error(stale)
    raise RuntimeError("backward(): no tensor with requires_grad=True contributes to this tensor")
  if ab is not None: grads = _recipe_gradient(loss.uop, gradient.cast(loss.dtype).uop, targets, ab)
  else: grads = compute_gradient(loss.uop, gradient.cast(loss.dtype).uop, targets)
  if not retain_graph: _freed[id(loss)] = loss
  for t in leaves:
    if t.uop not in grads: continue
    g = Tensor(grads[t.uop], device=t.device)
    t.grad = g if t.grad is None else (t.grad + g)
  if grad_hooks:
    done = [t for t in leaves if t.uop in grads]
    for h in list(grad_hooks):
      if (fn := h()) is None: grad_hooks.remove(h)
      else: fn(done)
