"""Neural-network layers in baregrad style: plain classes with __call__, PyTorch constructor arguments, attribute
names and default initialization. Parameters are Tensors with requires_grad=True; state is found by walking
attributes, lists and dicts (see baregrad.tensor.nn.state).

Layers call the functional Tensor methods (conv2d, layer_norm, group_norm, batch_norm, dropout, max_pool2d, ...)
where the Tensor has them; a few have a small fallback written with core ops so the layers work without them."""
from __future__ import annotations
import math
from typing import Any, Sequence
from baregrad.ir.dtype import dtypes
from baregrad.tensor.tensor import Tensor
from baregrad.tensor.bounds import checked

def _pair(x: int | Sequence[int], n: int = 2) -> tuple[int, ...]:
  return tuple(x) if isinstance(x, (tuple, list)) else (int(x),) * n

def _uniform(shape: tuple[int, ...], bound: float) -> Tensor:
  return Tensor.uniform(*shape, low=-bound, high=bound, requires_grad=True)

def _training(flag: bool | None) -> bool: return Tensor.training if flag is None else flag

class train:
  """Context manager (and decorator-free switch) for Tensor.training: `with nn.train(): ...`."""
  def __init__(self, mode: bool = True): self.mode = mode
  def __enter__(self) -> None: self.prev, Tensor.training = Tensor.training, self.mode
  def __exit__(self, *a: Any) -> None: Tensor.training = self.prev

def cross_entropy(logits: Tensor, target: Tensor) -> Tensor:
  """Mean cross-entropy of logits (N, C) against class indices (N,)."""
  return logits.cross_entropy(target)

# ---- layers -----------------------------------------------------------------------------------------------------
class Linear:
  def __init__(self, in_features: int, out_features: int, bias: bool = True):
    self.in_features, self.out_features = in_features, out_features
    bound = 1 / math.sqrt(in_features) if in_features else 0.0  # kaiming_uniform(a=sqrt(5)) -> 1/sqrt(fan_in)
    self.weight = _uniform((out_features, in_features), bound)
    self.bias = _uniform((out_features,), bound) if bias else None
  def __call__(self, x: Tensor) -> Tensor: return x.linear(self.weight, self.bias)
  def __repr__(self) -> str: return f"Linear(in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None})"

class _ConvNd:
  def __init__(self, nd: int, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
               dilation: Any = 1, groups: int = 1, bias: bool = True, transposed: bool = False, output_padding: Any = 0):
    if in_channels % groups or out_channels % groups:
      raise ValueError(f"in_channels ({in_channels}) and out_channels ({out_channels}) must be divisible by groups ({groups})")
    self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
    self.kernel_size, self.stride, self.dilation = _pair(kernel_size, nd), _pair(stride, nd), _pair(dilation, nd)
    self.output_padding = _pair(output_padding, nd)
    if isinstance(padding, str):
      if padding not in ("valid", "same"): raise ValueError(f"padding {padding!r}: expected 'valid', 'same' or integers")
      if padding == "same" and any(s != 1 for s in self.stride): raise ValueError("padding='same' needs stride 1")
      if padding == "same" and any((d * (k - 1)) % 2 for d, k in zip(self.dilation, self.kernel_size)):
        raise NotImplementedError("padding='same' with an even total padding is implemented only for odd dilation*(kernel-1)")
      padding = 0 if padding == "valid" else tuple(d * (k - 1) // 2 for d, k in zip(self.dilation, self.kernel_size))
    self.padding = _pair(padding, nd)
    wshape = (in_channels, out_channels // groups, *self.kernel_size) if transposed else (out_channels, in_channels // groups, *self.kernel_size)
    fan_in = wshape[1] * math.prod(self.kernel_size)
    bound = 1 / math.sqrt(fan_in)
    self.weight = _uniform(wshape, bound)
    self.bias = _uniform((out_channels,), bound) if bias else None

class Conv2d(_ConvNd):
  def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
               groups: int = 1, bias: bool = True):
    super().__init__(2, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)
  def __call__(self, x: Tensor) -> Tensor:
    return x.conv2d(self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

class Conv1d(_ConvNd):
  def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
               groups: int = 1, bias: bool = True):
    super().__init__(1, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)
  def __call__(self, x: Tensor) -> Tensor:
    # a 1-d convolution is a 2-d one over a height of 1
    w = self.weight.reshape(*self.weight.shape[:2], 1, self.kernel_size[0])
    out = x.unsqueeze(2).conv2d(w, self.bias, (1, self.stride[0]), (0, self.padding[0]), (1, self.dilation[0]), self.groups)
    return out.squeeze(2)

class ConvTranspose2d(_ConvNd):
  def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0, output_padding: Any = 0,
               groups: int = 1, bias: bool = True, dilation: Any = 1):
    super().__init__(2, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, transposed=True,
                     output_padding=output_padding)
  def __call__(self, x: Tensor) -> Tensor:
    return x.conv_transpose2d(self.weight, self.bias, self.stride, self.padding, self.output_padding, self.groups, self.dilation)

class BatchNorm:
  """Batch normalization over the channel axis 1 (any rank >= 2). Training mode (batch statistics, running
  statistics updated in place) follows `self.training` when set, else Tensor.training."""
  def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
               track_running_stats: bool = True):
    self.num_features, self.eps, self.momentum = num_features, eps, momentum
    self.training: bool | None = None
    self.weight: Tensor | None = Tensor.ones(num_features).requires_grad_() if affine else None
    self.bias: Tensor | None = Tensor.zeros(num_features).requires_grad_() if affine else None
    if track_running_stats:
      self.running_mean: Tensor | None = Tensor.zeros(num_features)
      self.running_var: Tensor | None = Tensor.ones(num_features)
      self.num_batches_tracked: Tensor | None = Tensor.zeros(1, dtype=dtypes.int64).reshape(())
    else: self.running_mean = self.running_var = self.num_batches_tracked = None

  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 2 or x.shape[1] != self.num_features:
      raise ValueError(f"BatchNorm({self.num_features}): expected input of shape (N, {self.num_features}, ...), got {x.shape}")
    shape = (1, self.num_features) + (1,) * (x.ndim - 2)
    use_batch = _training(self.training) or self.running_mean is None
    if use_batch:
      axes = tuple(i for i in range(x.ndim) if i != 1)
      n = x.numel() // self.num_features
      mean = x.mean(axes)
      var = (x - mean.reshape(shape)).square().mean(axes)
      if _training(self.training) and self.running_mean is not None:
        from baregrad.tensor.nn.optim import assign_all
        assert self.running_var is not None and self.num_batches_tracked is not None
        nbt = [(self.num_batches_tracked, self.num_batches_tracked + 1)]
        if self.momentum is None:  # cumulative average: the factor is 1/num_batches_tracked
          assign_all(nbt)
          m, nbt = 1.0 / float(self.num_batches_tracked.item()), []
        else: m = self.momentum
        bm, bv = mean.detach(), var.detach() * (n / max(n - 1, 1))
        # one schedule computes the input and its statistics (kept as buffers, so the forward and backward
        # that follow read them instead of recomputing the layers below) and moves the running statistics
        assign_all([(self.running_mean, self.running_mean * (1 - m) + bm * m), (self.running_var, self.running_var * (1 - m) + bv * m), *nbt],
                   also=[x, mean, var])
      out = (x - mean.reshape(shape)) * (var.reshape(shape) + self.eps).rsqrt()
    else:
      assert self.running_var is not None
      return x.batch_norm(self.running_mean, self.running_var, self.weight, self.bias, training=False, momentum=self.momentum or 0.0, eps=self.eps)
    if self.weight is not None: out = out * self.weight.reshape(shape)
    if self.bias is not None: out = out + self.bias.reshape(shape)
    return out

BatchNorm1d = BatchNorm2d = BatchNorm3d = BatchNorm

class LayerNorm:
  def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True):
    self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    self.eps = eps
    self.weight = Tensor.ones(*self.normalized_shape).requires_grad_() if elementwise_affine else None
    self.bias = Tensor.zeros(*self.normalized_shape).requires_grad_() if elementwise_affine and bias else None
  def __call__(self, x: Tensor) -> Tensor:
    k = len(self.normalized_shape)
    if tuple(x.shape[-k:]) != self.normalized_shape:
      raise ValueError(f"LayerNorm{self.normalized_shape}: input shape {x.shape} does not end in {self.normalized_shape}")
    return x.layer_norm(self.normalized_shape, self.weight, self.bias, eps=self.eps)

class GroupNorm:
  def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
    if num_channels % num_groups: raise ValueError(f"num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
    self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
    self.weight = Tensor.ones(num_channels).requires_grad_() if affine else None
    self.bias = Tensor.zeros(num_channels).requires_grad_() if affine else None
  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 2 or x.shape[1] != self.num_channels:
      raise ValueError(f"GroupNorm: expected input of shape (N, {self.num_channels}, ...), got {x.shape}")
    return x.group_norm(self.num_groups, self.weight, self.bias, eps=self.eps)

class RMSNorm:
  def __init__(self, normalized_shape: int | Sequence[int], eps: float | None = None, elementwise_affine: bool = True):
    self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    self.eps = eps
    self.weight = Tensor.ones(*self.normalized_shape).requires_grad_() if elementwise_affine else None
  def __call__(self, x: Tensor) -> Tensor:
    k = len(self.normalized_shape)
    if tuple(x.shape[-k:]) != self.normalized_shape:
      raise ValueError(f"RMSNorm{self.normalized_shape}: input shape {x.shape} does not end in {self.normalized_shape}")
    eps = self.eps if self.eps is not None else _finfo_eps(x.dtype)
    out = x * (x.square().mean(tuple(range(x.ndim - k, x.ndim)), keepdim=True) + eps).rsqrt()
    return out * self.weight if self.weight is not None else out

def _finfo_eps(d: Any) -> float:
  return {dtypes.float16: 2.0 ** -10, dtypes.bfloat16: 2.0 ** -7, dtypes.float64: 2.0 ** -52}.get(d, 2.0 ** -23)

class Embedding:
  """Rows of weight by index. The lookup is a one-hot compare with arange and a matmul, all on the device."""
  def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None):
    self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
    w = Tensor.normal(num_embeddings, embedding_dim)
    if padding_idx is not None:
      keep = Tensor.arange(num_embeddings).ne(padding_idx % num_embeddings).reshape(num_embeddings, 1)
      w = (w * keep.cast(w.dtype)).contiguous().realize()
    self.weight = w.requires_grad_()
  def __call__(self, idx: Tensor) -> Tensor:
    if not isinstance(idx, Tensor): idx = Tensor(idx, dtype=dtypes.int32)
    if dtypes.is_float(idx.dtype): raise TypeError(f"Embedding expects integer indices, got {idx.dtype}")
    v = self.num_embeddings
    onehot = idx.reshape(*idx.shape, 1).eq(Tensor.arange(v, device=idx.device, dtype=idx.dtype).reshape(*(1,) * idx.ndim, v))
    onehot = checked(onehot, idx, 0, v, f"embedding: index {{index}} is out of range for {v} embeddings")
    return onehot.cast(self.weight.dtype) @ self.weight

class Dropout:
  def __init__(self, p: float = 0.5):
    if not 0 <= p <= 1: raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    self.p, self.training = p, None
  def __call__(self, x: Tensor) -> Tensor: return x.dropout(self.p, _training(self.training))

class Sequential(list):
  """Layers (any callables) applied in order; a list, so state-dict keys are `0.weight`, `1.bias`, ..."""
  def __init__(self, *layers: Any): super().__init__(layers)
  def __call__(self, x: Any) -> Any:
    for layer in self: x = layer(x)
    return x

from baregrad.tensor.nn.state import get_parameters, get_state_dict, load_state_dict  # noqa: E402
from baregrad.tensor.nn import optim, state  # noqa: E402

__all__ = ["Linear", "Conv1d", "Conv2d", "ConvTranspose2d", "BatchNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm",
           "GroupNorm", "RMSNorm", "Embedding", "Dropout", "Sequential", "train", "cross_entropy", "get_parameters", "get_state_dict",
           "load_state_dict", "optim", "state"]
