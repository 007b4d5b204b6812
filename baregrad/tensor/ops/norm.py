"""Dropout and normalization layers' functions: layer_norm, rms_norm, batch_norm, group_norm, normalize."""
from __future__ import annotations
from typing import Any, TYPE_CHECKING
from baregrad.ir.dtype import dtypes
from baregrad.tensor.recipe import function_recipe
from baregrad.tensor.ops.shape import _zero
if TYPE_CHECKING: from baregrad.tensor.tensor import Tensor

def dropout(input: Tensor, p: float = 0.5, training: bool | None = True, inplace: bool = False) -> Tensor:
  """Zero each element with probability p and scale the rest by 1/(1-p) when `training` is true (the default, as
  torch.nn.functional.dropout); identity when it is false. training=None follows the global Tensor.training switch,
  which is what the tinygrad-style method x.dropout(p) does by default. inplace=True writes the result into input
  (Tensor.copy_'s rules)."""
  from baregrad.tensor.tensor import Tensor
  if not 0.0 <= p <= 1.0: raise ValueError(f"dropout probability must be in [0, 1], got {p}")
  if training is None: training = Tensor.training
  if not training or p == 0.0: return input
  out = _dropout(input, p)
  return input.copy_(out) if inplace else out

def _dropout(x: Tensor, p: float) -> Tensor:
  from baregrad.tensor.tensor import Tensor
  if p == 1.0: return x * 0
  keep = Tensor.rand(*x.shape, device=x.device) >= p
  return keep.where(x * (1.0 / (1.0 - p)), _zero(x))

def _affine(x: Tensor, weight: Tensor | None, bias: Tensor | None, shape: tuple[int, ...]) -> Tensor:
  if weight is not None: x = x * weight.reshape(shape)
  if bias is not None: x = x + bias.reshape(shape)
  return x

class NormOps:
  """Dropout and normalizations: Tensor methods (x.dropout(p), x.layer_norm(shape), x.normalize())."""
  __slots__ = ()   # (Tensor has slots: a base without them would give every tensor a __dict__)
  def dropout(self: Tensor, p: float = 0.5, training: bool | None = None) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1-p) while training; `training` defaults to the
    global Tensor.training switch (tinygrad's x.dropout(p)); pass it to decide per call (F.dropout defaults to True)."""
    return dropout(self, p, training)
  @function_recipe("layer_norm")
  def layer_norm(input: Tensor, normalized_shape: Any, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalize over the trailing normalized_shape axes (mean 0, variance 1, biased), then scale by weight and shift by bias."""
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if input.shape[input.ndim - len(ns):] != ns or len(ns) > input.ndim:
      raise RuntimeError(f"layer_norm: normalized_shape {ns} does not match the trailing dimensions of the input shape {input.shape}")
    for nm, t in (("weight", weight), ("bias", bias)):
      if t is not None and t.shape != ns: raise RuntimeError(f"layer_norm: {nm} of shape {t.shape}, expected {ns}")
    axes = tuple(range(input.ndim - len(ns), input.ndim))
    x = input._float()
    mean = x.mean(axes, keepdim=True)
    xc = x - mean
    var = (xc * xc).mean(axes, keepdim=True)
    return _affine(xc * (var + eps).rsqrt(), weight, bias, ns)
  @function_recipe("rms_norm")
  def rms_norm(input: Tensor, normalized_shape: Any, weight: Tensor | None = None, eps: float | None = None) -> Tensor:
    """x / sqrt(mean(x^2) + eps) over the trailing normalized_shape axes, times weight; eps defaults to the dtype's epsilon."""
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if input.shape[input.ndim - len(ns):] != ns or len(ns) > input.ndim:
      raise RuntimeError(f"rms_norm: normalized_shape {ns} does not match the trailing dimensions of the input shape {input.shape}")
    x = input._float()
    if eps is None: eps = {dtypes.float16: 2 ** -10, dtypes.bfloat16: 2 ** -7, dtypes.float64: 2 ** -52}.get(x.dtype, 2 ** -23)
    axes = tuple(range(input.ndim - len(ns), input.ndim))
    out = x * ((x * x).mean(axes, keepdim=True) + eps).rsqrt()
    return out * weight if weight is not None else out
  def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None, weight: Tensor | None = None, bias: Tensor | None = None,
                 training: bool = False, momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalize over every axis but the channels (axis 1). In training, the batch statistics are used and the running
    statistics (when given) are updated in place with assign: r = (1 - momentum) * r + momentum * batch (unbiased var)."""
    if input.ndim < 2: raise RuntimeError(f"batch_norm: input must have at least 2 dimensions (N, C, ...), got shape {input.shape}")
    C = input.shape[1]
    for nm, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight), ("bias", bias)):
      if t is not None and t.shape != (C,): raise RuntimeError(f"batch_norm: {nm} of shape {t.shape}, expected ({C},) for input of shape {input.shape}")
    shape = (1, C) + (1,) * (input.ndim - 2)
    axes = tuple(k for k in range(input.ndim) if k != 1)
    x = input._float()
    if training:
      n = input.numel() // C
      if n <= 1: raise ValueError(f"batch_norm: expected more than 1 value per channel when training, got input of shape {input.shape}")
      mean = x.mean(axes, keepdim=True)
      xc = x - mean
      var = (xc * xc).mean(axes, keepdim=True)
      if momentum is None: raise NotImplementedError("batch_norm: momentum=None (cumulative average) is not implemented")
      if running_mean is not None:
        running_mean.assign(running_mean.detach() * (1 - momentum) + mean.detach().reshape(C).cast(running_mean.dtype) * momentum)
      if running_var is not None:
        running_var.assign(running_var.detach() * (1 - momentum) + (var.detach().reshape(C) * (n / (n - 1))).cast(running_var.dtype) * momentum)
      out = xc * (var + eps).rsqrt()
    else:
      if running_mean is None or running_var is None: raise RuntimeError("batch_norm: running_mean and running_var are needed when not training")
      out = (x - running_mean.reshape(shape)) * (running_var.reshape(shape) + eps).rsqrt()
    return _affine(out, weight, bias, shape)
  def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalize each of num_groups channel groups over (its channels, *spatial) of a (N, C, *) input, then the per-channel affine."""
    if input.ndim < 2: raise RuntimeError(f"group_norm: input must have at least 2 dimensions (N, C, ...), got shape {input.shape}")
    N, C = input.shape[:2]
    if num_groups <= 0 or C % num_groups: raise RuntimeError(f"group_norm: {C} channels (input shape {input.shape}) are not divisible into "
        f"num_groups={num_groups}")
    for nm, t in (("weight", weight), ("bias", bias)):
      if t is not None and t.shape != (C,): raise RuntimeError(f"group_norm: {nm} of shape {t.shape}, expected ({C},)")
    x = input._float().reshape(N, num_groups, -1)
    mean = x.mean(-1, keepdim=True)
    xc = x - mean
    var = (xc * xc).mean(-1, keepdim=True)
    out = (xc * (var + eps).rsqrt()).reshape(input.shape)
    return _affine(out, weight, bias, (1, C) + (1,) * (input.ndim - 2))
  def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """input / max(||input||_p over dim, eps) (torch.nn.functional.normalize); the norm's gradient at 0 is 0."""
    from baregrad.tensor.tensor import Tensor
    if not isinstance(input, Tensor): raise TypeError(f"normalize: input must be a Tensor, got {type(input).__name__}")
    return input / input.norm(p, dim, keepdim=True).clip(min=eps)
