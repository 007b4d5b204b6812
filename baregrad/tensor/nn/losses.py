"""Loss modules with torch.nn's names and constructor arguments: each holds its options and calls the functional loss
(baregrad.tensor.functional) in forward(input, target). `reduction` is 'mean', 'sum' or 'none' (checked when the
module is built, so a typo fails at the cause); the deprecated size_average/reduce arguments are refused."""
from __future__ import annotations
from typing import Any
from baregrad.tensor.tensor import Tensor
from baregrad.tensor import functional as _fn
from baregrad.tensor.nn.module import Module

def _check(reduction: str, size_average: Any = None, reduce: Any = None, allowed: tuple[str, ...] = ("mean", "sum", "none")) -> str:
  if size_average is not None or reduce is not None: raise TypeError("size_average and reduce are deprecated in PyTorch and not supported: use reduction=")
  if reduction not in allowed: raise ValueError(f"reduction must be one of {', '.join(map(repr, allowed))}, got {reduction!r}")
  return reduction

class _Loss(Module):
  def __init__(self, reduction: str = "mean", size_average: Any = None, reduce: Any = None):
    self.reduction = _check(reduction, size_average, reduce)
  def extra_repr(self) -> str: return "" if self.reduction == "mean" else f"reduction={self.reduction!r}"

class CrossEntropyLoss(_Loss):
  """Cross entropy of logits (N, C, ...) against class indices (N, ...) or class probabilities (N, C, ...)."""
  def __init__(self, weight: Tensor | None = None, size_average: Any = None, ignore_index: int = -100, reduce: Any = None,
               reduction: str = "mean", label_smoothing: float = 0.0):
    super().__init__(reduction, size_average, reduce)
    if not 0.0 <= label_smoothing <= 1.0: raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    self.weight, self.ignore_index, self.label_smoothing = weight, ignore_index, label_smoothing
  def forward(self, input: Tensor, target: Tensor) -> Tensor:
    return _fn.cross_entropy(input, target, self.weight, ignore_index=self.ignore_index, reduction=self.reduction, label_smoothing=self.label_smoothing)

class NLLLoss(_Loss):
  """Negative log-likelihood of log-probabilities (N, C, ...) against class indices."""
  def __init__(self, weight: Tensor | None = None, size_average: Any = None, ignore_index: int = -100, reduce: Any = None, reduction: str = "mean"):
    super().__init__(reduction, size_average, reduce)
    self.weight, self.ignore_index = weight, ignore_index
  def forward(self, input: Tensor, target: Tensor) -> Tensor:
    return _fn.nll_loss(input, target, self.weight, self.ignore_index, self.reduction)

class MSELoss(_Loss):
  """(input - target)^2."""
  def forward(self, input: Tensor, target: Tensor) -> Tensor: return _fn.mse_loss(input, target, reduction=self.reduction)

class L1Loss(_Loss):
  """|input - target|."""
  def forward(self, input: Tensor, target: Tensor) -> Tensor: return _fn.l1_loss(input, target, reduction=self.reduction)

class BCELoss(_Loss):
  """Binary cross entropy of probabilities (logs clamped at -100, as PyTorch)."""
  def __init__(self, weight: Tensor | None = None, size_average: Any = None, reduce: Any = None, reduction: str = "mean"):
    super().__init__(reduction, size_average, reduce)
    self.weight = weight
  def forward(self, input: Tensor, target: Tensor) -> Tensor:
    return _fn.binary_cross_entropy(input, target, self.weight, reduction=self.reduction)

class BCEWithLogitsLoss(_Loss):
  """Binary cross entropy of sigmoid(input), computed stably from the logits; pos_weight scales the positive term."""
  def __init__(self, weight: Tensor | None = None, size_average: Any = None, reduce: Any = None, reduction: str = "mean",
               pos_weight: Tensor | None = None):
    super().__init__(reduction, size_average, reduce)
    self.weight, self.pos_weight = weight, pos_weight
  def forward(self, input: Tensor, target: Tensor) -> Tensor:
    return _fn.binary_cross_entropy_with_logits(input, target, self.weight, reduction=self.reduction, pos_weight=self.pos_weight)

class SmoothL1Loss(_Loss):
  """0.5 d^2 / beta where |d| < beta, |d| - 0.5 beta elsewhere."""
  def __init__(self, size_average: Any = None, reduce: Any = None, reduction: str = "mean", beta: float = 1.0):
    super().__init__(reduction, size_average, reduce)
    if beta < 0: raise ValueError(f"SmoothL1Loss: beta must be non-negative, got {beta}")
    self.beta = beta
  def forward(self, input: Tensor, target: Tensor) -> Tensor:
    return _fn.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)

class HuberLoss(_Loss):
  """0.5 d^2 where |d| < delta, delta (|d| - 0.5 delta) elsewhere."""
  def __init__(self, reduction: str = "mean", delta: float = 1.0):
    super().__init__(reduction)
    if delta <= 0: raise ValueError(f"HuberLoss: delta must be positive, got {delta}")
    self.delta = delta
  def forward(self, input: Tensor, target: Tensor) -> Tensor: return _fn.huber_loss(input, target, reduction=self.reduction, delta=self.delta)

class KLDivLoss(_Loss):
  """KL divergence of log-probabilities input from target (reduction 'batchmean' as in PyTorch too)."""
  def __init__(self, size_average: Any = None, reduce: Any = None, reduction: str = "mean", log_target: bool = False):
    self.reduction = _check(reduction, size_average, reduce, ("mean", "sum", "none", "batchmean"))
    self.log_target = log_target
  def forward(self, input: Tensor, target: Tensor) -> Tensor:
    from baregrad.tensor.nn.functional import kl_div
    return kl_div(input, target, reduction=self.reduction, log_target=self.log_target)

__all__ = ["CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "BCELoss", "BCEWithLogitsLoss", "SmoothL1Loss", "HuberLoss", "KLDivLoss"]
