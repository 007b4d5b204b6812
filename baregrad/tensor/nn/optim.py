"""Optimizers with PyTorch's update formulas: SGD, Adam, AdamW, and LAMB (You et al., 2019).

step() builds every new parameter and state value lazily and realizes them all in one schedule: the gradients
(and whatever else the caller passes to step(), such as the loss) are computed first in that schedule, then each
parameter and state buffer is overwritten in place (an ASSIGN into its own memory), so a step is a few fused
kernels and parameters keep their identity and their buffers (what a captured jit replays into).

Hyperparameters that change per step (Adam's bias corrections) live in small device tensors, so the kernels of
step 1 and step 1000 are the same and compile once. The update graph is built with tensor ops once per structure
(shapes and dtypes of what it reads, the hyperparameters that are constants in it) and later steps rebuild it over the
current parameters, gradients and state (Optimizer._cached_updates)."""
from __future__ import annotations
import functools
from typing import Any, Iterable, Sequence
import numpy as np
from baregrad.tensor.tensor import Tensor
from baregrad.tensor.inplace import write, buffer_ref, assign_nodes
from baregrad.engine.graph import buffer_uop
from baregrad.tensor.recipe import Recipe, placeholder
from baregrad.tensor.nn.module import is_frozen

def assign_all(pairs: Sequence[tuple[Tensor, Any]], also: Sequence[Tensor] = (), before: Sequence[Any] = ()) -> None:
  """Write each value into its target's buffer in place, all in one schedule. Tensors in `also` (and every live tensor
  that reads a target's current value) are realized in the same schedule before any write, so they see the old
  values. A target must be a realized buffer (a parameter, a state tensor); each value may read its own target only
  elementwise. Tensor.assign is the one-tensor form (tensor/inplace.py write). `before`: graphs (UOps) built before
  every value, which therefore read none of them (write's `before`)."""
  write(pairs, also, before)

class Optimizer:
  def __init__(self, params: Iterable[Tensor], lr: float):
    self.params: list[Tensor] = []
    seen: set[int] = set()
    for p in params:
      if not isinstance(p, Tensor): raise TypeError(f"optimizer params must be Tensors, got {type(p).__name__}")
      if id(p) in seen: continue
      seen.add(id(p))
      # a parameter frozen by Module.requires_grad_(False) stays frozen (it gets no gradient, so no update), as in PyTorch
      if not p.requires_grad and not is_frozen(p): p.requires_grad_(True)
      buffer_ref(p)
      self.params.append(p)
    if not self.params: raise ValueError("optimizer got an empty parameter list")
    self.device = self.params[0].device
    # the learning rate lives on the device, like the step counters: a schedule that changes it is seen by jit replays
    self._lr = Tensor(np.array([0.0], np.float32), device=self.device).reshape(())
    self.lr = lr
    self._templates: dict[tuple, tuple | None] = {}   # see _cached_updates

  @property
  def lr(self) -> float: return self._lr_value
  @lr.setter
  def lr(self, lr: float) -> None:
    if not isinstance(lr, (int, float)) or lr < 0: raise ValueError(f"invalid learning rate: {lr}")
    self._lr_value = float(lr)
    self._lr.assign(Tensor(np.array(lr, np.float32), device=self.device))

  def zero_grad(self) -> None:
    for p in self.params: p.grad = None

  def _state(self, p: Tensor) -> Tensor: return Tensor.zeros(*p.shape, dtype=p.dtype, device=p.device)

  def step(self, *also: Tensor) -> None:
    """One update of every parameter that has a gradient. Tensors passed in `also` (the loss, metrics) are
    realized in the same schedule, before the parameters change."""
    with_grad = [p for p in self.params if p.grad is not None]
    leaves = self._leaves(with_grad) if with_grad and _templated(type(self)) else None
    # what the update reads (the gradients among it) is built before the new values, so none of it reads them: write
    # need not search the backward graph for them
    before = [t.uop for t in leaves] if leaves else []
    pairs, prepared = self._cached_updates(with_grad, leaves) if with_grad else ([], None)
    grads = [p.grad for p in with_grad]
    write(pairs, also=[*also, *grads], before=before, prepared=prepared)  # gradients realized first, kept on p.grad

  def _updates(self, params: list[Tensor]) -> list[tuple[Tensor, Tensor]]: raise NotImplementedError

  # ---- the update graph, built once per structure. Building it with tensor ops costs ~50 Python-level tensor ops
  # per parameter every step (a third of an eager training step's host time); its structure depends only on the
  # shapes and dtypes of what it reads and on the hyperparameters below. So it is built once over placeholders (the
  # tensors it reads, their values swapped for unallocated buffers of the same shape and dtype) and each later step
  # rebuilds it over the current values (tensor/recipe.py): the same graph, a few hundred nodes built from a list.
  def _leaves(self, params: list[Tensor]) -> list[Tensor] | None:
    """Every tensor _updates reads (shared ones first, then per parameter), in a fixed order; None: not cached."""
    return None
  def _structure(self) -> tuple:
    """The hyperparameters (and host state) that change the update graph's structure, not only values in it."""
    return ()
  def _replayed(self, params: list[Tensor]) -> None:
    """The host-side effects of _updates, for a step that rebuilds a template instead of calling it."""

  def _cached_updates(self, params: list[Tensor], leaves: list[Tensor] | None) -> tuple[list[tuple[Tensor, Any]], tuple | None]:
    """The update's pairs, and where the update is templated the ASSIGNs that write them (inplace.assign_nodes's
    result for them, rebuilt from the template's recipe) with the versions they write; `leaves`: self._leaves(params),
    None where the update is not templated (_templated)."""
    # each leaf gets its own placeholder: the same tensor in two roles would make one
    if leaves is None or len({id(t) for t in leaves}) != len(leaves): return self._updates(params), None
    key = (len(params), tuple((t.shape, t.dtype) for t in leaves), self._structure())
    if key not in self._templates: return self._build_template(key, params, leaves)
    if (tmpl := self._templates[key]) is None: return self._updates(params), None
    self._replayed(params)
    return self._rebuild(tmpl, leaves)

  def _rebuild(self, tmpl: tuple, leaves: list[Tensor]) -> tuple[list[tuple[Tensor, Any]], tuple]:
    recipe, targets = tmpl
    news = [buffer_ref(leaves[i]).storage.next_ref() for i in targets]   # (before the leaves' nodes are read: a graph leaf becomes a buffer)
    assigns = recipe.build([t.uop for t in leaves] + [buffer_uop(n) for n in news])
    return [(leaves[i], None) for i in targets], (assigns, news)

  def _build_template(self, key: tuple, params: list[Tensor], leaves: list[Tensor]) -> tuple[list[tuple[Tensor, Any]], tuple | None]:
    real = [t.uop for t in leaves]
    holders = [placeholder(t) for t in leaves]
    try:
      for t, h in zip(leaves, holders): t.uop = h
      pairs = self._updates(params)   # (its host-side effects happen here, once, for this step)
      index = {id(t): i for i, t in enumerate(leaves)}
      if all(id(t) in index for t, _ in pairs) and all(isinstance(v, Tensor) for _, v in pairs):
        # what write makes of the pairs, over the placeholders and a placeholder for each version written (a buffer the
        # update reads that is not a leaf stays in the recipe as it is)
        assigns, news, _ = assign_nodes(pairs, holders)
        recipe = Recipe.record(assigns, holders + [buffer_uop(n) for n in news], keep_buffers=True)
        assert recipe is not None
        self._templates[key] = tmpl = (recipe, [index[id(t)] for t, _ in pairs])
      else: self._templates[key] = tmpl = None   # a target that is not a leaf: built by tensor ops every step
    finally:
      for t, u in zip(leaves, real): t.uop = u
    if tmpl is not None: return self._rebuild(tmpl, leaves)
    memo = dict(zip(holders, real))
    return [(t, Tensor(v.uop.substitute(memo, memo, same_shapes=True), device=t.device) if isinstance(v, Tensor) else v) for t, v in pairs], None

@functools.lru_cache(maxsize=None)
def _templated(cls: type) -> bool:
  """Whether cls's update may be built once per structure: a subclass that writes its own _updates (and no
  _structure beside it) may read tensors and hyperparameters that _leaves and _structure do not name."""
  owner = lambda name: next(c for c in cls.__mro__ if name in c.__dict__)
  return issubclass(owner("_structure"), owner("_updates"))

class SGD(Optimizer):
  def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0, weight_decay: float = 0.0,
               nesterov: bool = False, maximize: bool = False):
    super().__init__(params, lr)
    if nesterov and (momentum <= 0 or dampening != 0): raise ValueError("Nesterov momentum requires a momentum and zero dampening")
    self.momentum, self.dampening, self.weight_decay, self.nesterov, self.maximize = momentum, dampening, weight_decay, nesterov, maximize
    # state is made up front, so that step() is one schedule from the first step on
    self.momentum_buffer: dict[int, Tensor] = {id(p): self._state(p) for p in self.params} if momentum else {}
    self._started: set[int] = set()

  def _updates(self, params: list[Tensor]) -> list[tuple[Tensor, Tensor]]:
    pairs = []
    for p in params:
      assert p.grad is not None
      g = p.grad.detach()
      if self.maximize: g = -g
      if self.weight_decay: g = g + self.weight_decay * p.detach()
      if self.momentum:
        buf = self.momentum_buffer[id(p)]
        if id(p) not in self._started:  # PyTorch: the first buffer is the gradient itself (no dampening)
          self._started.add(id(p))
          new_buf = g
        else: new_buf = buf * self.momentum + g * (1 - self.dampening)
        pairs.append((buf, new_buf))
        g = g + new_buf * self.momentum if self.nesterov else new_buf
      pairs.append((p, p.detach() - g * self._lr.cast(g.dtype)))
    return pairs

  def _leaves(self, params: list[Tensor]) -> list[Tensor] | None:
    out = [self._lr]
    for p in params: out += [p, p.grad] + ([self.momentum_buffer[id(p)]] if self.momentum else [])  # type: ignore[list-item]
    return out
  def _structure(self) -> tuple:
    return (self.momentum, self.dampening, self.weight_decay, self.nesterov, self.maximize, tuple(id(p) in self._started for p in self.params))
  def _replayed(self, params: list[Tensor]) -> None:
    if self.momentum: self._started.update(id(p) for p in params)

class _AdamBase(Optimizer):
  def __init__(self, params: Iterable[Tensor], lr: float, betas: tuple[float, float], eps: float, weight_decay: float):
    super().__init__(params, lr)
    if not (0 <= betas[0] < 1 and 0 <= betas[1] < 1): raise ValueError(f"invalid betas {betas}")
    self.b1, self.b2, self.eps, self.weight_decay = float(betas[0]), float(betas[1]), float(eps), float(weight_decay)
    self.exp_avg: dict[int, Tensor] = {id(p): self._state(p) for p in self.params}
    self.exp_avg_sq: dict[int, Tensor] = {id(p): self._state(p) for p in self.params}
    # beta1**t and beta2**t, kept on the device (float32; PyTorch computes them in float64 on the host)
    self.b1_t = Tensor.ones(1, device=self.device).reshape(())
    self.b2_t = Tensor.ones(1, device=self.device).reshape(())
    self.steps = 0

  def _moments(self, params: list[Tensor]) -> tuple[list, Tensor, Tensor]:
    self.steps += 1
    b1_t, b2_t = self.b1_t * self.b1, self.b2_t * self.b2
    pairs: list[tuple[Tensor, Tensor]] = [(self.b1_t, b1_t), (self.b2_t, b2_t)]
    out = []
    for p in params:
      assert p.grad is not None
      g = p.grad.detach()
      m, v = self.exp_avg[id(p)], self.exp_avg_sq[id(p)]
      out.append((p, g, m, v))
    return out, (1 - b1_t), (1 - b2_t), pairs  # type: ignore[return-value]

  def _leaves(self, params: list[Tensor]) -> list[Tensor] | None:
    out = [self._lr, self.b1_t, self.b2_t]
    for p in params: out += [p, p.grad, self.exp_avg[id(p)], self.exp_avg_sq[id(p)]]  # type: ignore[list-item]
    return out
  def _replayed(self, params: list[Tensor]) -> None: self.steps += 1

class Adam(_AdamBase):
  """Adam; weight_decay is L2 added to the gradient (decoupled=True, or AdamW, decays the weights directly)."""
  def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
               weight_decay: float = 0.0, decoupled: bool = False):
    super().__init__(params, lr, betas, eps, weight_decay)
    self.decoupled = decoupled
  def _structure(self) -> tuple: return (self.b1, self.b2, self.eps, self.weight_decay, self.decoupled)

  def _updates(self, params: list[Tensor]) -> list[tuple[Tensor, Tensor]]:
    items, bc1, bc2, pairs = self._moments(params)
    step_size = self._lr / bc1
    bc2_sqrt = bc2.sqrt()
    for p, g, m, v in items:
      pd = p.detach()
      if self.weight_decay and self.decoupled: pd = pd * (1 - self._lr.cast(pd.dtype) * self.weight_decay)
      elif self.weight_decay: g = g + pd * self.weight_decay
      m_new = m + (g - m) * (1 - self.b1)  # torch: exp_avg.lerp_(grad, 1 - beta1)
      v_new = v * self.b2 + g * g * (1 - self.b2)
      denom = v_new.sqrt() / bc2_sqrt + self.eps
      pairs += [(m, m_new), (v, v_new), (p, pd - step_size * (m_new / denom))]
    return pairs

class AdamW(Adam):
  def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
               weight_decay: float = 0.01):
    super().__init__(params, lr, betas, eps, weight_decay, decoupled=True)

class LAMB(_AdamBase):
  """LAMB (You et al., 2019, "Large Batch Optimization for Deep Learning", Algorithm 2):
    m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  m^ = m / (1-b1^t);  v^ = v / (1-b2^t)
    r = m^ / (sqrt(v^) + eps) + wd * p;  trust = ||p|| / ||r|| (1 where either norm is 0);  p -= lr * trust * r
  adam=True drops the trust ratio (Adam with decoupled weight decay on r)."""
  def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
               weight_decay: float = 0.0, adam: bool = False):
    super().__init__(params, lr, betas, eps, weight_decay)
    self.adam = adam
  def _structure(self) -> tuple: return (self.b1, self.b2, self.eps, self.weight_decay, self.adam)

  def _updates(self, params: list[Tensor]) -> list[tuple[Tensor, Tensor]]:
    items, bc1, bc2, pairs = self._moments(params)
    for p, g, m, v in items:
      pd = p.detach()
      m_new = m * self.b1 + g * (1 - self.b1)
      v_new = v * self.b2 + g * g * (1 - self.b2)
      r = (m_new / bc1) / ((v_new / bc2).sqrt() + self.eps)
      if self.weight_decay: r = r + pd * self.weight_decay
      if self.adam: trust: Any = 1.0
      else:
        r1, r2 = pd.square().sum().sqrt(), r.square().sum().sqrt()
        trust = (r1 > 0).where((r2 > 0).where(r1 / r2, 1.0), 1.0)
      pairs += [(m, m_new), (v, v_new), (p, pd - r * trust * self._lr.cast(r.dtype))]
    return pairs

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "LAMB", "assign_all"]
