"""torch.nn.functional's names for baregrad (`import baregrad.nn.functional as F`).

Each function is a thin forward to what the frontend already has (baregrad.tensor.functional and Tensor methods), with
PyTorch's argument names and defaults, so `F.relu(x)`, `F.cross_entropy(logits, y, label_smoothing=0.1)` and
`F.conv2d(x, w, b, stride=2, padding=1)` read as in PyTorch. `inplace=True` is accepted and returns a new tensor
(value semantics: docs/value_semantics.md), as the module forms do."""
from __future__ import annotations
from typing import Any
from baregrad.ir.dtype import dtypes
from baregrad.tensor.tensor import Tensor
from baregrad.tensor import functional as _fn
from baregrad.tensor.ops.indexing import take_along
from baregrad.tensor.ops.loss import _reduction
from baregrad.tensor.functional import (conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, conv_transpose3d, max_pool1d, max_pool2d,  # noqa: F401
  max_pool3d, avg_pool1d, avg_pool2d, avg_pool3d, adaptive_avg_pool1d, adaptive_avg_pool2d, interpolate, layer_norm, rms_norm, batch_norm,
  group_norm, scaled_dot_product_attention, cross_entropy, nll_loss, binary_cross_entropy, binary_cross_entropy_with_logits, mse_loss, l1_loss,
  smooth_l1_loss, huber_loss, one_hot, pad, normalize, softmin, softsign, logsigmoid, unfold, fold, max_unpool1d, max_unpool2d)

def _tensor(x: Any, name: str) -> Tensor:
  if not isinstance(x, Tensor): raise TypeError(f"{name}(): argument 'input' must be a Tensor, got {type(x).__name__}")
  return x

# ---- activations
def relu(input: Tensor, inplace: bool = False) -> Tensor:
  """max(input, 0) elementwise."""
  return _tensor(input, "relu").relu()
def relu6(input: Tensor, inplace: bool = False) -> Tensor:
  """min(max(input, 0), 6)."""
  return _tensor(input, "relu6").relu6()
def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
  """input where input > 0, negative_slope * input elsewhere."""
  return _tensor(input, "leaky_relu").leaky_relu(negative_slope)
def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
  """input where input > 0, alpha * (exp(input) - 1) elsewhere."""
  return _tensor(input, "elu").elu(alpha)
def selu(input: Tensor, inplace: bool = False) -> Tensor:
  """scale * elu(input, alpha) with the self-normalizing constants."""
  return _tensor(input, "selu").selu()
def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
  """max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""
  return _tensor(input, "celu").celu(alpha)
def gelu(input: Tensor, approximate: str = "none") -> Tensor:
  """x * Phi(x) (erf form), or the tanh formula with approximate='tanh'."""
  return _tensor(input, "gelu").gelu(approximate)
def silu(input: Tensor, inplace: bool = False) -> Tensor:
  """x * sigmoid(x)."""
  return _tensor(input, "silu").silu()
def mish(input: Tensor, inplace: bool = False) -> Tensor:
  """x * tanh(softplus(x))."""
  return _tensor(input, "mish").mish()
def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
  """log(1 + exp(beta x)) / beta, x itself where beta x > threshold."""
  return _tensor(input, "softplus").softplus(beta, threshold)
def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:
  """input clipped to [min_val, max_val]."""
  return _tensor(input, "hardtanh").hardtanh(min_val, max_val)
def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
  """clip(x / 6 + 1/2, 0, 1)."""
  return _tensor(input, "hardsigmoid").hardsigmoid()
def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
  """x * clip(x + 3, 0, 6) / 6."""
  return _tensor(input, "hardswish").hardswish()
def sigmoid(input: Tensor) -> Tensor:
  """1 / (1 + exp(-x))."""
  return _tensor(input, "sigmoid").sigmoid()
def tanh(input: Tensor) -> Tensor:
  """Hyperbolic tangent."""
  return _tensor(input, "tanh").tanh()

def _softmax_dim(input: Tensor, dim: int | None, name: str) -> int:
  # PyTorch's implicit choice (deprecated there, with a warning): dim 0 for 0-, 1- and 3-D inputs, else 1
  if dim is not None: return dim
  return 0 if input.ndim in (0, 1, 3) else 1
def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
  """exp(x) / sum(exp(x)) along dim (cast to dtype first when given)."""
  return _tensor(input, "softmax").softmax(_softmax_dim(input, dim, "softmax"), dtype)
def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
  """x - logsumexp(x) along dim (cast to dtype first when given)."""
  return _tensor(input, "log_softmax").log_softmax(_softmax_dim(input, dim, "log_softmax"), dtype)

# ---- linear layers and lookups
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
  """input @ weight.T + bias: (*, in) with weight (out, in) -> (*, out)."""
  return _tensor(input, "linear").linear(weight, bias)

def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
  """y[..., o] = sum_ij x1[..., i] weight[o, i, j] x2[..., j] + bias[o]."""
  out = (input1.unsqueeze(-2).unsqueeze(-1) * weight * input2.unsqueeze(-2).unsqueeze(-2)).sum((-2, -1))
  return out + bias if bias is not None else out

def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None, max_norm: float | None = None, norm_type: float = 2.0,
              scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
  """Rows of weight (num_embeddings, dim) by integer index: (*) -> (*, dim); a gather on the device. padding_idx rows
  get no gradient, as PyTorch's. max_norm, scale_grad_by_freq and sparse are not supported (NotImplementedError)."""
  if max_norm is not None or scale_grad_by_freq or sparse:
    raise NotImplementedError("embedding: max_norm, scale_grad_by_freq and sparse are not supported")
  if not isinstance(input, Tensor): input = Tensor(input, dtype=dtypes.int32)
  if dtypes.is_float(input.dtype): raise TypeError(f"embedding: expected integer indices, got {input.dtype}")
  if weight.ndim != 2: raise RuntimeError(f"embedding: weight must be 2-D (num_embeddings, embedding_dim), got shape {weight.shape}")
  v, dim = weight.shape
  if padding_idx is not None:
    if not -v <= padding_idx < v: raise ValueError(f"embedding: padding_idx {padding_idx} must be within [-{v}, {v})")
    # the padding row reads as itself with no gradient: the weight with that row detached
    keep = Tensor.arange(v, device=weight.device).ne(padding_idx % v).reshape(v, 1)
    weight = keep.where(weight, weight.detach())
  if input.numel() == 0: return Tensor.zeros(*input.shape, dim, dtype=weight.dtype, device=weight.device)
  rows = take_along(weight, input.reshape(-1, 1).expand(input.numel(), dim), 0)
  from baregrad.tensor.bounds import checked
  return checked(rows, input, 0, v, f"embedding: index {{index}} is out of range for {v} embeddings").reshape(*input.shape, dim)

def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
  """Zero each element with probability p and scale the rest by 1/(1-p) (baregrad.tensor.functional.dropout)."""
  return _fn.dropout(_tensor(input, "dropout"), p, training, inplace)

# ---- losses with PyTorch's module-level names
def kl_div(input: Tensor, target: Tensor, size_average: Any = None, reduce: Any = None, reduction: str = "mean", log_target: bool = False) -> Tensor:
  """target * (log(target) - input) pointwise (input holds log-probabilities; log_target: target does too), 0 where
  target is 0; reduction 'mean' (over every element, as PyTorch), 'batchmean' (over the batch), 'sum' or 'none'."""
  loss = target.exp() * (target - input) if log_target else target.gt(0).where(target * (target.maximum(1e-45).log() - input), 0.0)
  if reduction == "batchmean": return loss.sum() / (input.shape[0] if input.ndim else 1)
  return _reduction(loss, reduction)

def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
  """sum(x1 * x2) / (max(||x1||, eps) * max(||x2||, eps)) along dim."""
  n1 = (x1 * x1).sum(dim).sqrt().maximum(eps)
  n2 = (x2 * x2).sum(dim).sqrt().maximum(eps)
  return (x1 * x2).sum(dim) / (n1 * n2)

__all__ = ["relu", "relu6", "leaky_relu", "elu", "selu", "celu", "gelu", "silu", "mish", "softplus", "hardtanh", "hardsigmoid", "hardswish",
           "sigmoid", "tanh", "softmax", "log_softmax", "softmin", "softsign", "logsigmoid", "linear", "bilinear", "embedding", "dropout",
           "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "max_pool1d", "max_pool2d", "max_pool3d",
           "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "interpolate", "layer_norm", "rms_norm",
           "batch_norm", "group_norm", "scaled_dot_product_attention", "cross_entropy", "nll_loss", "binary_cross_entropy",
           "binary_cross_entropy_with_logits", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div", "one_hot", "pad", "normalize",
           "cosine_similarity", "unfold", "fold", "max_unpool1d", "max_unpool2d"]
