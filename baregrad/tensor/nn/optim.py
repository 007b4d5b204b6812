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

def check_param(i: int, p: Any) -> None:
  """Refuse what an optimizer cannot update, at construction, naming the parameter (its index in the list, shape and
  dtype), as PyTorch's "can't optimize a non-leaf Tensor": a non-Tensor, a result computed from a tensor that
  requires grad (w * 2: the update would go to a temporary and w would never move), or a tensor that is not floating
  point (it cannot have gradients)."""
  from baregrad.ir.dtype import dtypes
  from baregrad.tensor.ops.inplace_ops import is_grad_leaf
  if not isinstance(p, Tensor): raise TypeError(f"optimizer params must be Tensors, got {type(p).__name__} at index {i}")
  if not dtypes.is_float(p.dtype):
    raise ValueError(f"optimizer parameter {i} (shape {p.shape}) has dtype {p.dtype}: only floating-point tensors can be optimized")
  if p.requires_grad and not is_grad_leaf(p):
    raise ValueError(f"can't optimize a non-leaf Tensor: optimizer parameter {i} (shape {p.shape}, {p.dtype}) is the result of an op on "
                     "tensors that require grad; pass the tensor made with requires_grad=True itself (w, not w * 2)")

class ParamGroup(dict):
  """One parameter group: a dict with "params", "lr" and the optimizer's other hyperparameters, as PyTorch's. The
  learning rate is a device value the update kernel reads: writing group["lr"] (a scheduler does) writes that value
  at once, so the compiled update (and a jit replay of it) sees the new rate without being rebuilt."""
  def __init__(self, lr_value: Tensor, items: dict):
    self._lr_t = lr_value
    super().__init__()
    for k, v in items.items(): self[k] = v
  def __setitem__(self, key: Any, value: Any) -> None:
    if key == "lr":
      # (the sign is checked by the optimizer's constructor, as PyTorch's: a schedule may go past its end, below 0)
      if isinstance(value, bool) or not isinstance(value, (int,
          float)) or value != value: raise ValueError(f"invalid learning rate: {value!r} (expected a number)")
      value = float(value)
      self._lr_t.assign(Tensor(np.array(value, np.float32), device=self._lr_t.device))
    super().__setitem__(key, value)
  def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
    for k, v in dict(*args, **kwargs).items(): self[k] = v
  def setdefault(self, key: Any, default: Any = None) -> Any:
    if key not in self: self[key] = default
    return self[key]

class Optimizer:
  """Base of the optimizers: `param_groups` (a list of ParamGroup dicts, PyTorch's) hold the parameters and the
  hyperparameters; `defaults` the constructor's. A hyperparameter read as an attribute (opt.lr, opt.momentum) is the
  first group's; set as one, it is set in every group."""
  def __init__(self, params: Iterable[Any], lr: float, defaults: dict[str, Any] | None = None):
    object.__setattr__(self, "defaults", {"lr": lr, **(defaults or {})})
    self.params: list[Tensor] = []
    self.param_groups: list[ParamGroup] = []
    self._group_of: dict[int, int] = {}   # id(parameter) -> index of its group
    given = list(params)
    groups = given if given and all(isinstance(g, dict) for g in given) else [{"params": given}]
    seen: set[int] = set()
    for g in groups:
      if not isinstance(g, dict) or "params" not in g: raise TypeError(f"a parameter group must be a dict with a 'params' entry, got {type(g).__name__}")
      ps = [g["params"]] if isinstance(g["params"], Tensor) else list(g["params"])
      mine: list[Tensor] = []
      for p in ps:
        check_param(len(seen), p)
        if id(p) in seen:
          if id(p) not in {id(q) for q in mine}: raise ValueError("some parameters appear in more than one parameter group")
          continue
        seen.add(id(p))
        # a parameter frozen by Module.requires_grad_(False) stays frozen (it gets no gradient, so no update), as in PyTorch
        if not p.requires_grad and not is_frozen(p): p.requires_grad_(True)
        buffer_ref(p)
        self.params.append(p)
        mine.append(p)
        self._group_of[id(p)] = len(self.param_groups)
      unknown = set(g) - set(self.defaults) - {"params", "initial_lr", "max_lr", "min_lr", "base_momentum", "max_momentum", "name"}
      if unknown: raise TypeError(f"{type(self).__name__}: parameter group has unknown options {sorted(unknown)} (expected {sorted(self.defaults)})")
      dev = mine[0].device if mine else (self.params[0].device if self.params else None)
      # the learning rate lives on the device, like the step counters: a schedule that changes it is seen by jit replays
      lr_t = Tensor(np.array([0.0], np.float32), device=dev).reshape(())
      self.param_groups.append(ParamGroup(lr_t, {**self.defaults, **{k: v for k, v in g.items() if k != "params"}, "params": mine}))
    if not self.params: raise ValueError("optimizer got an empty parameter list")
    for g in self.param_groups:
      if g["lr"] < 0: raise ValueError(f"invalid learning rate: {g['lr']} (expected >= 0)")
    self.device = self.params[0].device
    self._templates: dict[tuple, tuple | None] = {}   # see _cached_updates

  # hyperparameters as attributes: the first group's value; setting one sets it in every group
  def __getattr__(self, name: str) -> Any:
    d = self.__dict__
    if name in d.get("defaults", ()) and d.get("param_groups"): return d["param_groups"][0][name]
    raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
  def __setattr__(self, name: str, value: Any) -> None:
    if name in self.__dict__.get("defaults", ()) and "param_groups" in self.__dict__:
      for g in self.param_groups: g[name] = value
    else: object.__setattr__(self, name, value)

  @property
  def _lr(self) -> Tensor:
    """The first group's learning rate on the device."""
    return self.param_groups[0]._lr_t
  def _group(self, p: Tensor) -> ParamGroup: return self.param_groups[self._group_of[id(p)]]
  def _lr_of(self, p: Tensor) -> Tensor: return self._group(p)._lr_t
  def _group_key(self, names: Sequence[str]) -> tuple:
    """The named hyperparameters of every group (part of the update graph's structure)."""
    return tuple(tuple(g[n] for n in names) for g in self.param_groups)

  def add_param_group(self, param_group: dict[str, Any]) -> None:
    """Add a group of parameters (with its own hyperparameters; the rest from defaults), as PyTorch's."""
    ps = [param_group["params"]] if isinstance(param_group.get("params"), Tensor) else list(param_group.get("params", []))
    if any(id(p) in self._group_of for p in ps): raise ValueError("some parameters appear in more than one parameter group")
    gi = len(self.param_groups)
    for p in ps:
      check_param(len(self.params), p)
      if not p.requires_grad and not is_frozen(p): p.requires_grad_(True)
      buffer_ref(p)
      self.params.append(p)
      self._group_of[id(p)] = gi
    lr_t = Tensor(np.array([0.0], np.float32), device=self.device).reshape(())
    self.param_groups.append(ParamGroup(lr_t, {**self.defaults, **{k: v for k, v in param_group.items() if k != "params"}, "params": ps}))
    self._new_params(ps)

  def _new_params(self, ps: list[Tensor]) -> None:
    """Make the state of parameters added by add_param_group."""

  def zero_grad(self, set_to_none: bool = True) -> None:
    """Drop every parameter's gradient (set_to_none=False: set it to zeros instead)."""
    for p in self.params: p.grad = None if set_to_none or p.grad is None else p.grad.zeros_like()

  # ---- state, in PyTorch's layout: {"state": {index: {name: value}}, "param_groups": [{hyperparameters, "params": [index, ...]}]}
  def state_dict(self) -> dict[str, Any]:
    """The optimizer's state: per-parameter state by the parameter's index (the tensors themselves, as PyTorch's) and
    each group's hyperparameters with the indices of its parameters."""
    index = {id(p): i for i, p in enumerate(self.params)}
    state = {index[id(p)]: st for p in self.params if (st := self._param_state(p))}
    groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [index[id(p)] for p in g["params"]]} for g in self.param_groups]
    return {"state": state, "param_groups": groups}

  def load_state_dict(self, state_dict: dict[str, Any]) -> None:
    """Load a state_dict() of an optimizer of this kind over the same parameters (the same groups and sizes): the
    hyperparameters (the learning rate written to the device) and the per-parameter state, in place."""
    if not isinstance(state_dict, dict) or "param_groups" not in state_dict or "state" not in state_dict:
      raise ValueError("optimizer state_dict must be a dict with 'state' and 'param_groups' (Optimizer.state_dict())")
    groups = state_dict["param_groups"]
    if len(groups) != len(self.param_groups):
      raise ValueError(f"loaded state dict has {len(groups)} parameter groups, the optimizer has {len(self.param_groups)}")
    for i, (saved, g) in enumerate(zip(groups, self.param_groups)):
      if len(saved["params"]) != len(g["params"]):
        raise ValueError(f"loaded state dict's parameter group {i} has {len(saved['params'])} parameters, the optimizer's has {len(g['params'])}")
    state = {int(k): v for k, v in state_dict["state"].items()}
    for saved, g in zip(groups, self.param_groups):
      for k, v in saved.items():
        if k != "params": g[k] = tuple(v) if k == "betas" else v
      for i, p in zip(saved["params"], g["params"]): self._load_param_state(p, state.get(int(i), {}))

  def _param_state(self, p: Tensor) -> dict[str, Any]:
    """p's state for state_dict ({} when it has none)."""
    return {}
  def _load_param_state(self, p: Tensor, st: dict[str, Any]) -> None:
    """Load p's state saved by _param_state."""

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
    key = (len(params), tuple((t.shape, t.dtype) for t in leaves), tuple(self._group_of[id(p)] for p in params), self._structure())
    if key not in self._templates:
      # a hyperparameter that changes every step (OneCycleLR's momentum) makes a template per value: keep the newest few
      if len(self._templates) >= _MAX_TEMPLATES: del self._templates[next(iter(self._templates))]
      return self._build_template(key, params, leaves)
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

_MAX_TEMPLATES = 32   # update templates kept per optimizer (oldest dropped first)

@functools.lru_cache(maxsize=None)
def _templated(cls: type) -> bool:
  """Whether cls's update may be built once per structure: a subclass that writes its own _updates (and no
  _structure beside it) may read tensors and hyperparameters that _leaves and _structure do not name."""
  owner = lambda name: next(c for c in cls.__mro__ if name in c.__dict__)
  return issubclass(owner("_structure"), owner("_updates"))

class SGD(Optimizer):
  """SGD with momentum, dampening, weight decay, Nesterov momentum and maximize (PyTorch's formulas), per parameter group."""
  def __init__(self, params: Iterable[Any], lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0, weight_decay: float = 0.0,
               nesterov: bool = False, maximize: bool = False):
    super().__init__(params, lr, dict(momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov, maximize=maximize))
    for g in self.param_groups:
      if g["nesterov"] and (g["momentum"] <= 0 or g["dampening"] != 0): raise ValueError("Nesterov momentum requires a momentum and zero dampening")
    # state is made up front, so that step() is one schedule from the first step on
    self.momentum_buffer: dict[int, Tensor] = {}
    self._started: set[int] = set()
    self._new_params(self.params)
  def _new_params(self, ps: list[Tensor]) -> None:
    for p in ps:
      if self._group(p)["momentum"]: self.momentum_buffer[id(p)] = self._state(p)
  def _buffer(self, p: Tensor) -> Tensor:
    # a group whose momentum was set after construction gets its buffer at its first step with it
    if id(p) not in self.momentum_buffer: self.momentum_buffer[id(p)] = self._state(p)
    return self.momentum_buffer[id(p)]

  def _updates(self, params: list[Tensor]) -> list[tuple[Tensor, Tensor]]:
    pairs = []
    for p in params:
      assert p.grad is not None
      grp = self._group(p)
      momentum, dampening, weight_decay = grp["momentum"], grp["dampening"], grp["weight_decay"]
      g = p.grad.detach()
      if grp["maximize"]: g = -g
      if weight_decay: g = g + weight_decay * p.detach()
      if momentum:
        buf = self._buffer(p)
        if id(p) not in self._started:  # PyTorch: the first buffer is the gradient itself (no dampening)
          self._started.add(id(p))
          new_buf = g
        else: new_buf = buf * momentum + g * (1 - dampening)
        pairs.append((buf, new_buf))
        g = g + new_buf * momentum if grp["nesterov"] else new_buf
      pairs.append((p, p.detach() - g * grp._lr_t.cast(g.dtype)))
    return pairs

  def _leaves(self, params: list[Tensor]) -> list[Tensor] | None:
    out = [g._lr_t for g in self.param_groups]
    for p in params: out += [p, p.grad] + ([self._buffer(p)] if self._group(p)["momentum"] else [])  # type: ignore[list-item]
    return out
  def _structure(self) -> tuple:
    return (self._group_key(("momentum", "dampening", "weight_decay", "nesterov", "maximize")), tuple(id(p) in self._started for p in self.params))
  def _replayed(self, params: list[Tensor]) -> None:
    self._started.update(id(p) for p in params if self._group(p)["momentum"])

  def _param_state(self, p: Tensor) -> dict[str, Any]:
    return {"momentum_buffer": self.momentum_buffer[id(p)]} if id(p) in self._started and id(p) in self.momentum_buffer else {}
  def _load_param_state(self, p: Tensor, st: dict[str, Any]) -> None:
    if "momentum_buffer" in st and st["momentum_buffer"] is not None:
      _copy_into(self._buffer(p), st["momentum_buffer"], "momentum_buffer")
      self._started.add(id(p))
    else: self._started.discard(id(p))

class _AdamBase(Optimizer):
  def __init__(self, params: Iterable[Any], lr: float, betas: tuple[float, float], eps: float, weight_decay: float):
    super().__init__(params, lr, dict(betas=(float(betas[0]), float(betas[1])), eps=float(eps), weight_decay=float(weight_decay)))
    for g in self.param_groups:
      b = g["betas"]
      if not (0 <= b[0] < 1 and 0 <= b[1] < 1): raise ValueError(f"invalid betas {b}")
    self._betas()
    self.exp_avg: dict[int, Tensor] = {}
    self.exp_avg_sq: dict[int, Tensor] = {}
    self._new_params(self.params)
    # beta1**t and beta2**t, kept on the device (float32; PyTorch computes them in float64 on the host)
    self.b1_t = Tensor.ones(1, device=self.device).reshape(())
    self.b2_t = Tensor.ones(1, device=self.device).reshape(())
    self.steps = 0
  def _new_params(self, ps: list[Tensor]) -> None:
    for p in ps: self.exp_avg[id(p)], self.exp_avg_sq[id(p)] = self._state(p), self._state(p)

  def _betas(self) -> tuple[float, float]:
    b = {tuple(g["betas"]) for g in self.param_groups}
    # the bias corrections beta**t are one device value per optimizer (shared by every group)
    if len(b) != 1: raise NotImplementedError(f"{type(self).__name__}: parameter groups with different betas {sorted(b)} are not supported")
    b1, b2 = b.pop()
    return float(b1), float(b2)
  @property
  def b1(self) -> float: return self._betas()[0]
  @property
  def b2(self) -> float: return self._betas()[1]

  def _moments(self, params: list[Tensor]) -> tuple[list, Tensor, Tensor]:
    self.steps += 1
    b1, b2 = self._betas()
    b1_t, b2_t = self.b1_t * b1, self.b2_t * b2
    pairs: list[tuple[Tensor, Tensor]] = [(self.b1_t, b1_t), (self.b2_t, b2_t)]
    out = []
    for p in params:
      assert p.grad is not None
      g = p.grad.detach()
      m, v = self.exp_avg[id(p)], self.exp_avg_sq[id(p)]
      out.append((p, g, m, v))
    return out, (1 - b1_t), (1 - b2_t), pairs  # type: ignore[return-value]

  def _leaves(self, params: list[Tensor]) -> list[Tensor] | None:
    out = [g._lr_t for g in self.param_groups] + [self.b1_t, self.b2_t]
    for p in params: out += [p, p.grad, self.exp_avg[id(p)], self.exp_avg_sq[id(p)]]  # type: ignore[list-item]
    return out
  def _replayed(self, params: list[Tensor]) -> None: self.steps += 1

  def _param_state(self, p: Tensor) -> dict[str, Any]:
    return {"step": self.steps, "exp_avg": self.exp_avg[id(p)], "exp_avg_sq": self.exp_avg_sq[id(p)]}
  def _load_param_state(self, p: Tensor, st: dict[str, Any]) -> None:
    for k, d in (("exp_avg", self.exp_avg), ("exp_avg_sq", self.exp_avg_sq)):
      if k in st: _copy_into(d[id(p)], st[k], k)
    if "step" in st: self._load_steps(int(float(st["step"].item() if isinstance(st["step"], Tensor) else st["step"])))
  def _load_steps(self, steps: int) -> None:
    self.steps = steps
    b1, b2 = self._betas()
    # beta**t as repeated float32 products, the way step() computes them on the device
    f1 = f2 = np.float32(1.0)
    for _ in range(steps): f1, f2 = np.float32(f1 * np.float32(b1)), np.float32(f2 * np.float32(b2))
    self.b1_t.assign(Tensor(np.array(f1, np.float32), device=self.device))
    self.b2_t.assign(Tensor(np.array(f2, np.float32), device=self.device))

class Adam(_AdamBase):
  """Adam; weight_decay is L2 added to the gradient (decoupled=True, or AdamW, decays the weights directly)."""
  def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
               weight_decay: float = 0.0, decoupled: bool = False):
    super().__init__(params, lr, betas, eps, weight_decay)
    self.decoupled = decoupled
  def _structure(self) -> tuple: return (self._group_key(("betas", "eps", "weight_decay")), self.decoupled)

  def _updates(self, params: list[Tensor]) -> list[tuple[Tensor, Tensor]]:
    items, bc1, bc2, pairs = self._moments(params)
    b1, b2 = self._betas()
    step_size: dict[int, Tensor] = {}
    bc2_sqrt = bc2.sqrt()
    for p, g, m, v in items:
      grp = self._group(p)
      lr, wd, eps = grp._lr_t, grp["weight_decay"], grp["eps"]
      if id(grp) not in step_size: step_size[id(grp)] = lr / bc1
      pd = p.detach()
      if wd and self.decoupled: pd = pd * (1 - lr.cast(pd.dtype) * wd)
      elif wd: g = g + pd * wd
      m_new = m + (g - m) * (1 - b1)  # torch: exp_avg.lerp_(grad, 1 - beta1)
      v_new = v * b2 + g * g * (1 - b2)
      denom = v_new.sqrt() / bc2_sqrt + eps
      pairs += [(m, m_new), (v, v_new), (p, pd - step_size[id(grp)] * (m_new / denom))]
    return pairs

class AdamW(Adam):
  def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
               weight_decay: float = 0.01):
    super().__init__(params, lr, betas, eps, weight_decay, decoupled=True)

class LAMB(_AdamBase):
  """LAMB (You et al., 2019, "Large Batch Optimization for Deep Learning", Algorithm 2):
    m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  m^ = m / (1-b1^t);  v^ = v / (1-b2^t)
    r = m^ / (sqrt(v^) + eps) + wd * p;  trust = ||p|| / ||r|| (1 where either norm is 0);  p -= lr * trust * r
  adam=True drops the trust ratio (Adam with decoupled weight decay on r)."""
  def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
               weight_decay: float = 0.0, adam: bool = False):
    super().__init__(params, lr, betas, eps, weight_decay)
    self.adam = adam
  def _structure(self) -> tuple: return (self._group_key(("betas", "eps", "weight_decay")), self.adam)

  def _updates(self, params: list[Tensor]) -> list[tuple[Tensor, Tensor]]:
    items, bc1, bc2, pairs = self._moments(params)
    b1, b2 = self._betas()
    for p, g, m, v in items:
      grp = self._group(p)
      pd = p.detach()
      m_new = m * b1 + g * (1 - b1)
      v_new = v * b2 + g * g * (1 - b2)
      r = (m_new / bc1) / ((v_new / bc2).sqrt() + grp["eps"])
      if grp["weight_decay"]: r = r + pd * grp["weight_decay"]
      if self.adam: trust: Any = 1.0
      else:
        r1, r2 = pd.square().sum().sqrt(), r.square().sum().sqrt()
        trust = (r1 > 0).where((r2 > 0).where(r1 / r2, 1.0), 1.0)
      pairs += [(m, m_new), (v, v_new), (p, pd - r * trust * grp._lr_t.cast(r.dtype))]
    return pairs

def _copy_into(t: Tensor, v: Any, name: str) -> None:
  """Write a saved state value (a Tensor or an array) into the optimizer's state tensor t in place."""
  if not isinstance(v, Tensor): v = Tensor(np.asarray(v, dtype=np.float32), device=t.device).reshape(np.shape(v))
  if tuple(v.shape) != t.shape: raise ValueError(f"optimizer state {name!r}: saved shape {tuple(v.shape)} does not match the parameter's {t.shape}")
  if v.device != t.device: v = v.to(t.device)
  t.assign(v.cast(t.dtype) if v.dtype != t.dtype else v)

__all__ = ["Optimizer", "ParamGroup", "SGD", "Adam", "AdamW", "LAMB", "assign_all"]

from baregrad.tensor.nn import lr_scheduler  # noqa: E402,F401  (optim.lr_scheduler, as torch.optim.lr_scheduler)
