"""Graph recipes: code whose graph depends only on what it reads' shapes, dtypes, devices and gradient flags and on
its other arguments (a convolution, a loss, an optimizer's update) records the nodes it builds once, over placeholder
inputs; later calls build those nodes over the real inputs directly, without the code's intermediate tensors,
argument checks and shape arithmetic (a convolution's graph: ~1500 Python calls through tensor methods, ~20 node
builds here), and with each node's shape known (no inference later).

The rebuilt graph is the code's graph: nodes are hash-consed, so a replay returns the very nodes the code would
build, with one case taken care of: a permute of an input that is itself a permute folds into one node
(engine.graph.permute_uop), which the placeholders (buffers) could not show. A graph that reads a buffer besides the
inputs (the code realized or loaded something) is not recorded by `recorded` (such calls run the function every
time); the optimizer's template keeps such a node as it is. Bounds checks registered on the graph's nodes
(engine/checks.py) are registered again on the rebuilt nodes."""
from __future__ import annotations
import functools, struct
from typing import Any, Callable, Sequence
from baregrad import knobs
from baregrad.helpers import prod as helpers_prod
from baregrad.ir.ops import UOp, Ops, make_keyed
from baregrad.engine import checks
from baregrad.engine.graph import BufRef, shape_of, permute_uop
from baregrad.engine.lazy import buffer_view
from baregrad.tensor.grad_mode import is_grad_enabled

class Recipe:
  """The nodes between some leaves and some roots, in build order: (op, dtype, arg, its hash-consing key, sources,
  shape), a source being an index into the leaves followed by the nodes built so far; or (None, node, ...) for a node
  kept as it is."""
  __slots__ = ("nodes", "roots", "found", "nleaves")
  def __init__(self, nodes: list[tuple], roots: list[int], found: list[tuple[int, int, str]], nleaves: int) -> None:
    self.nodes, self.roots, self.found, self.nleaves = nodes, roots, found, nleaves

  @staticmethod
  def record(roots: Sequence[UOp], leaves: Sequence[UOp], keep_buffers: bool = False) -> Recipe | None:
    """The recipe of roots over leaves (distinct nodes). A BUFFER that is not a leaf: kept as it is with keep_buffers,
    else None (not recordable)."""
    idx: dict[UOp, int] = {u: i for i, u in enumerate(leaves)}
    nodes: list[tuple] = []
    found: list[tuple[UOp, UOp, str]] = []
    todo = list(roots)
    while todo:
      stack = [todo.pop()]
      while stack:   # post-order: a node after its sources
        u = stack[-1]
        if u in idx: stack.pop(); continue
        if u.op is Ops.BUFFER:
          if not keep_buffers: return None   # reads memory besides its inputs
          stack.pop()
          idx[u] = len(leaves) + len(nodes)
          nodes.append((None, u, None, None, None, None))
          continue
        if (pending := [s for s in u.src if s not in idx]): stack += pending; continue
        stack.pop()
        idx[u] = len(leaves) + len(nodes)
        nodes.append((u.op, u.dtype, u.arg, u.argkey, tuple([idx[s] for s in u.src]), shape_of(u)))
        if (e := checks.registry.get(id(u))) is not None and e[0]() is u:
          for p, m in e[1]: found.append((u, p, m)); todo.append(p)
    return Recipe._compact(nodes, [idx[r] for r in roots], [(idx[n], idx[p], m) for n, p, m in found], len(leaves), idx)

  # a small node that reads no leaf (a constant, an arange, a broadcast of a few elements) is kept as it is rather than
  # rebuilt every time: most of a loss's graph is such. Small only: a kept node lives as long as the recipe, and so
  # does what a realize of an equal graph maps to it (lazy.set_realized)
  KEEP_ELEMENTS = 1024

  @staticmethod
  def _compact(nodes: list[tuple], roots: list[int], found: list[tuple[int, int, str]], nleaves: int, idx: dict) -> Recipe:
    by_index = {i: u for u, i in idx.items()}
    reads_leaf = [True] * nleaves
    for op, _, _, _, srcs, _ in nodes: reads_leaf.append(op is None or any(reads_leaf[i] for i in srcs))
    checked = {n for n, _, _ in found}
    keep = [False] * nleaves + [not reads_leaf[nleaves + j] and e[0] is not None and nleaves + j not in checked and
                                helpers_prod(e[5]) <= Recipe.KEEP_ELEMENTS for j, e in enumerate(nodes)]
    # the nodes still built: those the roots and checks reach without passing through a kept node
    need, todo = set(), [*roots, *(n for n, _, _ in found), *(p for _, p, _ in found)]
    while todo:
      i = todo.pop()
      if i < nleaves or i in need: continue
      need.add(i)
      if not keep[i]: todo.extend(nodes[i - nleaves][4])
    remap = list(range(nleaves))
    out: list[tuple] = []
    for j, e in enumerate(nodes):
      i = nleaves + j
      remap.append(nleaves + len(out))
      if i not in need: continue
      out.append((None, by_index[i], None, None, None, None) if keep[i] else (*e[:4], tuple([remap[k] for k in e[4]]), e[5]))
    return Recipe(out, [remap[r] for r in roots], [(remap[n], remap[p], m) for n, p, m in found], nleaves)

  def build(self, leaves: Sequence[UOp]) -> list[UOp]:
    """The roots' nodes over these leaves (same shapes and dtypes as the recorded ones), checks registered."""
    made = list(leaves)   # (the leaves, then each node built: what a recorded source index names)
    get, add, PERMUTE, keyed, setattr_ = made.__getitem__, made.append, Ops.PERMUTE, make_keyed, object.__setattr__
    for op, dt, arg, akey, srcs, shape in self.nodes:
      if op is None: add(dt); continue   # (a kept node)
      ss = tuple(map(get, srcs))
      u = permute_uop(ss[0], arg) if op is PERMUTE else keyed(op, dt, ss, arg, akey)
      if u._shape is None: setattr_(u, "_shape", shape)   # (engine.graph.set_shape, inline: this loop is the point)
      add(u)
    for n, p, m in self.found: checks.add(made[n], made[p], m)
    return [made[r] for r in self.roots]

def placeholder(t: Any) -> UOp:
  """A node of t's shape, dtype and device over memory of its own (never allocated): what recipes are recorded over."""
  return buffer_view(BufRef(t.device, t.numel(), t.dtype), t.shape)

RECIPES_MAX = 1024
# key -> (recipe, the output's requires_grad), or None where the function's graph cannot be recorded
_recipes: dict[tuple, tuple | None] = {}

def _record(fn: Callable[..., Any], tensors: Sequence[Any]) -> tuple | None:
  from baregrad.tensor.tensor import Tensor
  ph = [None if t is None else Tensor(placeholder(t), device=t.device, requires_grad=bool(t.requires_grad) or None) for t in tensors]
  out = fn(*ph)
  leaves = [p.uop for p in ph if p is not None]
  if not isinstance(out, Tensor) or out.uop in leaves: return None
  r = Recipe.record([out.uop], leaves)
  return None if r is None else (r, out.requires_grad)

def recorded(name: str, fn: Callable[..., Any], tensors: Sequence[Any], params: tuple) -> Any:
  """fn(*tensors), a Tensor, with its graph built from the recipe kept for (name, each tensor's shape, dtype, device
  and gradient flag (None stays None), params, the grad mode, BOUNDS, CPU_CONV). `params` must hold every other argument fn's
  graph and its errors depend on; fn must read its tensors only through tensor ops (not their values)."""
  key = (name, tuple(None if t is None else (t.shape, t.dtype, t.device, bool(t.requires_grad)) for t in tensors), params,
         is_grad_enabled(), knobs.get("BOUNDS"), knobs.get("CPU_CONV"))
  if (r := _recipes.get(key, False)) is False:
    r = _record(fn, tensors)
    if len(_recipes) >= RECIPES_MAX: _recipes.clear()
    _recipes[key] = r
  if r is None: return fn(*tensors)
  rec, rg = r
  out = rec.build([t.uop for t in tensors if t is not None])[0]
  t = next(t for t in tensors if t is not None)._new(out)
  t.requires_grad = rg   # (the flag the function's output had: the key holds the inputs' flags and the grad mode)
  return t

def param_key(v: Any) -> Any:
  """v as part of a recipe's key: lists become tuples, and each value keeps its type beside it (2, 2.0 and True are
  equal as keys but may build different graphs). TypeError where v cannot be a key."""
  if isinstance(v, (list, tuple)): return (type(v).__name__,) + tuple(param_key(e) for e in v)
  if hasattr(v, "uop"): raise TypeError("a tensor is not a parameter")   # (hashable by identity: it would key one call)
  if isinstance(v, float) and not (v == v and v != 0.0): return ("float", struct.pack("<d", v))   # (-0.0 == 0.0; nan != nan)
  hash(v)
  return (type(v).__name__, v)

def method_recipe(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
  """Decorator for a Tensor method whose graph depends only on its tensor's shape, dtype, device and gradient flag and
  on its other (hashable) arguments: the graph is built from a recipe after the first call (`recorded`)."""
  def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def method(self: Any, *args: Any, **kw: Any) -> Any:
      try: params = (tuple([param_key(a) for a in args]), tuple(sorted((k, param_key(v)) for k, v in kw.items())) if kw else ())
      except TypeError: return fn(self, *args, **kw)
      return recorded(name, lambda t: fn(t, *args, **kw), (self,), params)
    return method
  return deco

def function_recipe(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
  """Decorator for a function of tensors (top-level arguments) and hashable other arguments whose graph depends only on
  the tensors' shapes, dtypes, devices and gradient flags and on the other arguments: built from a recipe after the
  first call (`recorded`). A call with a tensor inside a list, or an argument that cannot be a key, runs as it is."""
  def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def function(*args: Any, **kw: Any) -> Any:
      tensors: list[Any] = []   # the tensor arguments: positional ones in order, then keyword ones by name
      kitems = sorted(kw.items(), key=lambda kv: kv[0])
      try:
        pos = tuple([("T",) if hasattr(a, "uop") and not tensors.append(a) else param_key(a) for a in args])
        kws = tuple([(k, ("T",) if hasattr(v, "uop") and not tensors.append(v) else param_key(v)) for k, v in kitems])
      except TypeError: return fn(*args, **kw)
      if not tensors: return fn(*args, **kw)
      def rebuilt(*ts: Any) -> Any:
        it = iter(ts)
        a2 = [next(it) if hasattr(a, "uop") else a for a in args]
        k2 = {k: next(it) if hasattr(v, "uop") else v for k, v in kitems}
        return fn(*a2, **k2)
      return recorded(name, rebuilt, tensors, (pos, kws))
    return function
  return deco
