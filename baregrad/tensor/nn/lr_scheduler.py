"""Learning-rate schedulers with torch.optim.lr_scheduler's names, arguments and formulas (the chainable forms that
read each group's current "lr", as PyTorch 2.x computes them): StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR,
LinearLR, LambdaLR, OneCycleLR.

A scheduler writes `group["lr"]` of the optimizer's param_groups; an optimizer's group writes its learning rate to the
device value its update kernel reads (optim.ParamGroup), so a schedule costs no recompilation and a jit replay of
the training step sees the new rate. (OneCycleLR's momentum cycling changes SGD's momentum or Adam's beta1, constants
of the update graph: each new value builds and compiles the update again.)"""
from __future__ import annotations
import math
from collections import Counter
from typing import Any, Callable, Sequence

def _groups(optimizer: Any, who: str) -> list[dict]:
  groups = getattr(optimizer, "param_groups", None)
  if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
    raise TypeError(f"{who}: the optimizer ({type(optimizer).__name__}) has no 'param_groups' (a list of dicts with 'lr'): "
                    f"expected a baregrad.nn.optim optimizer")
  for i, g in enumerate(groups):
    if "lr" not in g: raise KeyError(f"{who}: param_groups[{i}] of {type(optimizer).__name__} has no 'lr'")
  return groups

class LRScheduler:
  """Base of the schedulers: step() advances last_epoch and writes get_lr()'s rates into the groups."""
  def __init__(self, optimizer: Any, last_epoch: int = -1):
    self.optimizer = optimizer
    groups = _groups(optimizer, type(self).__name__)
    if last_epoch == -1:
      for g in groups: g.setdefault("initial_lr", g["lr"])   # (kept where set: OneCycleLR sets its own)
    else:
      for i, g in enumerate(groups):
        if "initial_lr" not in g:
          raise KeyError(f"{type(self).__name__}: param 'initial_lr' is not specified in param_groups[{i}] when resuming (last_epoch={last_epoch})")
    self.base_lrs: list[float] = [g["initial_lr"] for g in groups]
    self.last_epoch = last_epoch
    self._step_count = 0
    self.step()

  def get_lr(self) -> list[float]:
    """Each group's rate at self.last_epoch."""
    raise NotImplementedError

  def step(self, epoch: int | None = None) -> None:
    """Advance one step (or, deprecated as in PyTorch, to `epoch`) and set every group's lr."""
    self._step_count += 1
    self.last_epoch = self.last_epoch + 1 if epoch is None else int(epoch)
    for g, lr in zip(self.optimizer.param_groups, self.get_lr()): g["lr"] = lr
    self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

  def get_last_lr(self) -> list[float]:
    """The rates the last step() set, one per group."""
    return list(self._last_lr)

  def state_dict(self) -> dict[str, Any]:
    """The scheduler's attributes but the optimizer (and functions, which are not saved)."""
    return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}

  def load_state_dict(self, state_dict: dict[str, Any]) -> None:
    """Restore attributes saved by state_dict()."""
    self.__dict__.update({k: v for k, v in state_dict.items() if k not in ("optimizer", "lr_lambdas")})

  def _lrs(self) -> list[float]: return [g["lr"] for g in self.optimizer.param_groups]

_LRScheduler = LRScheduler

class StepLR(LRScheduler):
  """lr * gamma every step_size steps."""
  def __init__(self, optimizer: Any, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
    if not isinstance(step_size, int) or step_size <= 0: raise ValueError(f"StepLR: step_size must be a positive int, got {step_size!r}")
    self.step_size, self.gamma = step_size, gamma
    super().__init__(optimizer, last_epoch)
  def get_lr(self) -> list[float]:
    if self.last_epoch == 0 or self.last_epoch % self.step_size != 0: return self._lrs()
    return [lr * self.gamma for lr in self._lrs()]

class MultiStepLR(LRScheduler):
  """lr * gamma at each milestone (a milestone given k times multiplies by gamma**k)."""
  def __init__(self, optimizer: Any, milestones: Sequence[int], gamma: float = 0.1, last_epoch: int = -1):
    self.milestones, self.gamma = Counter(int(m) for m in milestones), gamma
    super().__init__(optimizer, last_epoch)
  def get_lr(self) -> list[float]:
    if self.last_epoch not in self.milestones: return self._lrs()
    return [lr * self.gamma ** self.milestones[self.last_epoch] for lr in self._lrs()]

class ExponentialLR(LRScheduler):
  """lr * gamma every step."""
  def __init__(self, optimizer: Any, gamma: float, last_epoch: int = -1):
    self.gamma = gamma
    super().__init__(optimizer, last_epoch)
  def get_lr(self) -> list[float]:
    if self.last_epoch == 0: return self._lrs()
    return [lr * self.gamma for lr in self._lrs()]

class CosineAnnealingLR(LRScheduler):
  """eta_min + (base_lr - eta_min) (1 + cos(pi t / T_max)) / 2, in PyTorch's recursive form (it follows other
  changes of lr) that continues as a cosine past T_max."""
  def __init__(self, optimizer: Any, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
    if T_max <= 0: raise ValueError(f"CosineAnnealingLR: T_max must be positive, got {T_max}")
    self.T_max, self.eta_min = T_max, eta_min
    super().__init__(optimizer, last_epoch)
  def get_lr(self) -> list[float]:
    t, T, lo = self.last_epoch, self.T_max, self.eta_min
    if t == 0: return self._lrs()
    if self._step_count == 1 and t > 0:
      return [lo + (b - lo) * (1 + math.cos(t * math.pi / T)) / 2 for b in self.base_lrs]
    if (t - 1 - T) % (2 * T) == 0:
      return [lr + (b - lo) * (1 - math.cos(math.pi / T)) / 2 for lr, b in zip(self._lrs(), self.base_lrs)]
    return [(1 + math.cos(math.pi * t / T)) / (1 + math.cos(math.pi * (t - 1) / T)) * (lr - lo) + lo for lr in self._lrs()]

class LinearLR(LRScheduler):
  """The factor goes linearly from start_factor to end_factor over total_iters steps, then stays."""
  def __init__(self, optimizer: Any, start_factor: float = 1.0 / 3, end_factor: float = 1.0, total_iters: int = 5, last_epoch: int = -1):
    if not 0 < start_factor <= 1: raise ValueError(f"LinearLR: start_factor must be in (0, 1], got {start_factor}")
    if not 0 <= end_factor <= 1: raise ValueError(f"LinearLR: end_factor must be in [0, 1], got {end_factor}")
    self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
    super().__init__(optimizer, last_epoch)
  def get_lr(self) -> list[float]:
    t, s, e = self.last_epoch, self.start_factor, self.end_factor
    if t == 0: return [lr * s for lr in self._lrs()]
    if t > self.total_iters: return self._lrs()
    return [lr * (1.0 + (e - s) / (self.total_iters * s + (t - 1) * (e - s))) for lr in self._lrs()]

class LambdaLR(LRScheduler):
  """base_lr * lr_lambda(step) (one function, or one per group)."""
  def __init__(self, optimizer: Any, lr_lambda: Callable[[int], float] | Sequence[Callable[[int], float]], last_epoch: int = -1):
    n = len(_groups(optimizer, "LambdaLR"))
    if isinstance(lr_lambda, (list, tuple)):
      if len(lr_lambda) != n: raise ValueError(f"LambdaLR: expected {n} lr_lambdas (one per parameter group), got {len(lr_lambda)}")
      self.lr_lambdas = list(lr_lambda)
    else: self.lr_lambdas = [lr_lambda] * n
    for f in self.lr_lambdas:
      if not callable(f): raise TypeError(f"LambdaLR: lr_lambda must be callable, got {type(f).__name__}")
    super().__init__(optimizer, last_epoch)
  def get_lr(self) -> list[float]: return [b * f(self.last_epoch) for f, b in zip(self.lr_lambdas, self.base_lrs)]

def _per_group(name: str, groups: list[dict], v: Any) -> list[float]:
  if isinstance(v, (list, tuple)):
    if len(v) != len(groups): raise ValueError(f"expected {len(groups)} values for {name} (one per parameter group), got {len(v)}")
    return list(v)
  return [v] * len(groups)

class OneCycleLR(LRScheduler):
  """The 1cycle policy (Smith & Topin, 2017): lr from max_lr/div_factor up to max_lr over pct_start of the steps,
  then down to initial_lr/final_div_factor (three_phase: back to the initial rate first), cosine or linear; with
  cycle_momentum the optimizer's momentum (SGD) or beta1 (Adam) moves the opposite way."""
  def __init__(self, optimizer: Any, max_lr: float | Sequence[float], total_steps: int | None = None, epochs: int | None = None,
               steps_per_epoch: int | None = None, pct_start: float = 0.3, anneal_strategy: str = "cos", cycle_momentum: bool = True,
               base_momentum: float | Sequence[float] = 0.85, max_momentum: float | Sequence[float] = 0.95, div_factor: float = 25.0,
               final_div_factor: float = 1e4, three_phase: bool = False, last_epoch: int = -1):
    groups = _groups(optimizer, "OneCycleLR")
    if total_steps is not None:
      if not isinstance(total_steps, int) or total_steps <= 0: raise ValueError(f"OneCycleLR: expected a positive integer total_steps, got {total_steps!r}")
      self.total_steps = total_steps
    elif epochs is not None and steps_per_epoch is not None:
      if epochs <= 0 or steps_per_epoch <= 0: raise ValueError(f"OneCycleLR: epochs ({epochs}) and steps_per_epoch ({steps_per_epoch}) must be positive")
      self.total_steps = epochs * steps_per_epoch
    else: raise ValueError("OneCycleLR: you must define either total_steps OR (epochs AND steps_per_epoch)")
    if not 0 <= pct_start <= 1: raise ValueError(f"OneCycleLR: expected a float between 0 and 1 for pct_start, got {pct_start}")
    if anneal_strategy not in ("cos", "linear"): raise ValueError(f"OneCycleLR: anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
    n = self.total_steps
    if three_phase:
      self._phases = [(float(pct_start * n) - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                      (float(2 * pct_start * n) - 2, "max_lr", "initial_lr", "base_momentum", "max_momentum"),
                      (n - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum")]
    else:
      self._phases = [(float(pct_start * n) - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                      (n - 1, "max_lr", "min_lr", "base_momentum", "max_momentum")]
    self.anneal_strategy, self.cycle_momentum = anneal_strategy, cycle_momentum
    if last_epoch == -1:
      for g, m in zip(groups, _per_group("max_lr", groups, max_lr)):
        g["initial_lr"], g["max_lr"] = m / div_factor, m
        g["min_lr"] = g["initial_lr"] / final_div_factor
    if cycle_momentum:
      # the field a momentum cycle needs: SGD's momentum or Adam's betas (beta1)
      defaults = getattr(optimizer, "defaults", {})
      if "momentum" not in defaults and "betas" not in defaults:
        raise ValueError(f"OneCycleLR: cycle_momentum=True needs an optimizer with 'momentum' or 'betas' in its defaults; "
                         f"{type(optimizer).__name__} has {sorted(defaults)} (pass cycle_momentum=False)")
      self.use_beta1 = "betas" in defaults
      if last_epoch == -1:
        for g, mx, bs in zip(groups, _per_group("max_momentum", groups, max_momentum), _per_group("base_momentum", groups, base_momentum)):
          self._set_momentum(g, mx)
          g["max_momentum"], g["base_momentum"] = mx, bs
    super().__init__(optimizer, last_epoch)

  def _set_momentum(self, g: dict, m: float) -> None:
    if self.use_beta1: g["betas"] = (m, *g["betas"][1:])
    else: g["momentum"] = m

  def _anneal(self, start: float, end: float, pct: float) -> float:
    if self.anneal_strategy == "cos": return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
    return (end - start) * pct + start

  def get_lr(self) -> list[float]:
    t = self.last_epoch
    if t > self.total_steps: raise ValueError(f"OneCycleLR: tried to step {t} times; the specified number of total steps is {self.total_steps}")
    out = []
    for g in self.optimizer.param_groups:
      start = 0.0
      for i, (end, lr0, lr1, m0, m1) in enumerate(self._phases):
        if t <= end or i == len(self._phases) - 1:
          pct = (t - start) / (end - start)
          lr = self._anneal(g[lr0], g[lr1], pct)
          if self.cycle_momentum: self._set_momentum(g, self._anneal(g[m0], g[m1], pct))
          break
        start = end
      out.append(lr)
    return out

__all__ = ["LRScheduler", "StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "LinearLR", "LambdaLR", "OneCycleLR"]
