"""Loss functions (PyTorch's semantics and `reduction` argument)."""
from __future__ import annotations
import math
from typing import Any, TYPE_CHECKING
from baregrad.ir.dtype import dtypes
from baregrad.tensor.bounds import checked
from baregrad.tensor.recipe import function_recipe
from baregrad.tensor.ops.indexing import _onehot
from baregrad.tensor.ops.shape import _zero
if TYPE_CHECKING: from baregrad.tensor.tensor import Tensor

def _reduction(loss: Tensor, reduction: str) -> Tensor:
  if reduction == "mean": return loss.mean()
  if reduction == "sum": return loss.sum()
  if reduction == "none": return loss
  raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")

def _class_shape(input: Tensor, target: Tensor, name: str) -> None:
  want = input.shape[:1] + input.shape[2:] if input.ndim >= 2 else ()
  if target.shape != want:
    # a batch size that differs is a ValueError in PyTorch, any other shape a RuntimeError
    exc = ValueError if target.ndim >= 1 and want and target.shape[0] != want[0] else RuntimeError
    raise exc(f"{name}: target of shape {target.shape} does not match input of shape {input.shape} (expected target shape {want})")

def _check_same(input: Tensor, target: Tensor, name: str) -> None:
  if input.shape != target.shape: raise ValueError(f"{name}: target of shape {target.shape} must have the input's shape {input.shape}")

class LossOps:
  """Losses: Tensor methods (logits.cross_entropy(target), x.mse_loss(y))."""
  __slots__ = ()   # (Tensor has slots: a base without them would give every tensor a __dict__)
  @function_recipe("nll_loss")
  def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100, reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of class-index targets; input is (N, C, ...) or (C,) of log-probabilities."""
    from baregrad.tensor.tensor import Tensor
    if input.ndim == 1: return LossOps.nll_loss(input.unsqueeze(0), target.reshape(1), weight, ignore_index,
        reduction).reshape(()) if reduction == "none" else \
        LossOps.nll_loss(input.unsqueeze(0), target.reshape(1), weight, ignore_index, reduction)
    _class_shape(input, target, "nll_loss")
    if dtypes.is_float(target.dtype): raise TypeError(f"nll_loss: class-index target must be an integer tensor, got {target.dtype}")
    C = input.shape[1]
    if weight is not None and weight.shape != (C,): raise RuntimeError(f"nll_loss: weight of shape {weight.shape}, expected ({C},)")
    x = input.permute(0, *range(2, input.ndim), 1) if input.ndim > 2 else input   # (N, ..., C)
    valid = target.ne(ignore_index)
    oh = checked(_onehot(target, C), valid.where(target, 0), 0, C, f"nll_loss/cross_entropy: target {{index}} is out of bounds for {C} classes")  # (N, ..., C)
    picked = oh.where(x, _zero(x)).sum(-1)
    w = oh.where(weight.cast(x.dtype), 0.0).sum(-1) if weight is not None else Tensor.full((), 1.0, dtype=x.dtype, device=x.device)
    w = valid.where(w, 0.0)
    loss = -picked * w
    if reduction == "none": return loss
    if reduction == "sum": return loss.sum()
    if reduction == "mean": return loss.sum() / w._bcast(loss.shape).sum()
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
  @function_recipe("cross_entropy")
  def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average: Any = None, ignore_index: int = -100,
                    reduce: Any = None, reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """Cross entropy of logits (N, C, ...) or (C,) against class indices or class probabilities (PyTorch's formulas,
    label smoothing and class weights included)."""
    if size_average is not None or reduce is not None: raise TypeError("cross_entropy: size_average and reduce are deprecated; use reduction")
    if not 0.0 <= label_smoothing <= 1.0: raise RuntimeError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    cdim = 0 if input.ndim == 1 else 1
    C = input.shape[cdim]
    logp = input.log_softmax(cdim)
    wshape = tuple(C if k == cdim else 1 for k in range(input.ndim))
    if weight is not None and weight.shape != (C,): raise RuntimeError(f"cross_entropy: weight of shape {weight.shape}, expected ({C},)")
    if dtypes.is_float(target.dtype):
      if target.shape != input.shape: raise RuntimeError(f"cross_entropy: probability target of shape {target.shape} must match input shape {input.shape}")
      t = target * (1 - label_smoothing) + label_smoothing / C if label_smoothing > 0 else target
      prodt = logp * t
      if weight is not None: prodt = prodt * weight.reshape(wshape)
      if reduction == "none": return -prodt.sum(cdim)
      if reduction == "sum": return -prodt.sum()
      if reduction == "mean": return -prodt.sum() / (input.numel() // C) if input.numel() else prodt.sum() * math.nan
      raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    nll = LossOps.nll_loss(logp, target, weight, ignore_index, reduction)
    if label_smoothing == 0.0: return nll
    ignore = target.ne(ignore_index)
    smooth = -(logp * weight.reshape(wshape)).sum(cdim) if weight is not None else -logp.sum(cdim)
    smooth = ignore.where(smooth, 0.0)
    if reduction == "mean":
      if weight is not None:
        oh = _onehot(target, C)
        den = ignore.where(oh.where(weight, 0.0).sum(-1), 0.0).sum()
      else: den = ignore.sum()
      ret = smooth.sum() / den
    elif reduction == "sum": ret = smooth.sum()
    elif reduction == "none": ret = smooth
    else: raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    return (1 - label_smoothing) * nll + ret * (label_smoothing / C)
  def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average: Any = None, reduce: Any = None,
                           reduction: str = "mean") -> Tensor:
    """-(t log p + (1 - t) log(1 - p)) with the logs clamped at -100, as PyTorch; reduced by reduction."""
    _check_same(input, target, "binary_cross_entropy")
    x = input._float()
    # log clamped at -100, as PyTorch does, so 0 and 1 give finite losses
    loss = -(target * x.log().maximum(-100.0) + (1 - target) * (1 - x).log().maximum(-100.0))
    if weight is not None: loss = loss * weight
    return _reduction(loss, reduction)
  @function_recipe("binary_cross_entropy_with_logits")
  def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average: Any = None, reduce: Any = None,
                                       reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
    """binary_cross_entropy(sigmoid(x), t) computed stably from the logits; pos_weight scales the positive term."""
    _check_same(input, target, "binary_cross_entropy_with_logits")
    x = input._float()
    # log(1 + exp(-|x|)) + max(-x, 0) is log(1 + exp(-x)) without overflow
    sp = (1 + (-x.abs()).exp()).log() + (-x).maximum(0)
    if pos_weight is not None: loss = (1 - target) * x + ((pos_weight - 1) * target + 1) * sp
    else: loss = (1 - target) * x + sp
    if weight is not None: loss = loss * weight
    return _reduction(loss, reduction)
  @function_recipe("mse_loss")
  def mse_loss(input: Tensor, target: Tensor, size_average: Any = None, reduce: Any = None, reduction: str = "mean") -> Tensor:
    """(input - target)^2, reduced by reduction ('mean', 'sum' or 'none')."""
    d = input - target
    return _reduction(d * d, reduction)
  def l1_loss(input: Tensor, target: Tensor, size_average: Any = None, reduce: Any = None, reduction: str = "mean") -> Tensor:
    """|input - target|, reduced by reduction."""
    return _reduction((input - target).abs(), reduction)
  def smooth_l1_loss(input: Tensor, target: Tensor, size_average: Any = None, reduce: Any = None, reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """0.5 d^2 / beta where |d| < beta, |d| - 0.5 beta elsewhere; reduced by reduction."""
    d = (input - target).abs()
    loss = d if beta == 0 else (d < beta).where(0.5 * d * d / beta, d - 0.5 * beta)
    return _reduction(loss, reduction)
  def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0) -> Tensor:
    """0.5 d^2 where |d| < delta, delta (|d| - 0.5 delta) elsewhere; reduced by reduction."""
    d = (input - target).abs()
    return _reduction((d < delta).where(0.5 * d * d, delta * (d - 0.5 * delta)), reduction)
