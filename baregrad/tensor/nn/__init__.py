"""Neural-network layers with PyTorch's constructor arguments, attribute names, default initialization and
forward semantics. Every layer is an nn.Module (module.py): parameters are Tensors with requires_grad=True found by
walking attributes, lists and dicts (see baregrad.tensor.nn.state), so state-dict keys match PyTorch's.

Layers call the functional Tensor methods (conv2d, layer_norm, batch_norm, dropout, max_pool2d, ...). A module
starts in training mode, as in torch.nn; train()/eval() switch the module tree. A module whose `training` is set to
None follows the global Tensor.training switch (`with Tensor.train(): ...`, tinygrad's way) instead."""
from __future__ import annotations
import math
from typing import Any, Sequence
from baregrad.ir.dtype import dtypes
from baregrad.tensor.tensor import Tensor
from baregrad.tensor.nn.module import Module, ModuleList, ModuleDict, IncompatibleKeys
from baregrad.tensor.bounds import checked

def _pair(x: int | Sequence[int], n: int = 2) -> tuple[int, ...]:
  return tuple(x) if isinstance(x, (tuple, list)) else (int(x),) * n

def _uniform(shape: tuple[int, ...], bound: float) -> Tensor:
  return Tensor.uniform(*shape, low=-bound, high=bound, requires_grad=True)

def _training(flag: bool | None) -> bool: return Tensor.training if flag is None else flag

train = Tensor.train  # `with nn.train(): ...` sets Tensor.training for a block (context manager and decorator)

def cross_entropy(logits: Tensor, target: Tensor) -> Tensor:
  """Mean cross-entropy of logits (N, C) against class indices (N,)."""
  return logits.cross_entropy(target)

# ---- layers -----------------------------------------------------------------------------------------------------
class Linear(Module):
  """y = x @ weight.T + bias over the last axis: (*, in_features) -> (*, out_features); PyTorch's init (uniform +-1/sqrt(in))."""
  def __init__(self, in_features: int, out_features: int, bias: bool = True):
    self.in_features, self.out_features = in_features, out_features
    bound = 1 / math.sqrt(in_features) if in_features else 0.0  # kaiming_uniform(a=sqrt(5)) -> 1/sqrt(fan_in)
    self.weight = _uniform((out_features, in_features), bound)
    self.bias = _uniform((out_features,), bound) if bias else None
  def forward(self, x: Tensor) -> Tensor: return x.linear(self.weight, self.bias)
  def extra_repr(self) -> str: return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"

class _ConvNd(Module):
  """Shared constructor of the convolutions: weight (out, in/groups, *k) or, transposed, (in, out/groups, *k)."""
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
    self._transposed = transposed
  def extra_repr(self) -> str:
    s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
    if any(self.padding): s += f", padding={self.padding}"
    if any(d != 1 for d in self.dilation): s += f", dilation={self.dilation}"
    if self._transposed and any(self.output_padding): s += f", output_padding={self.output_padding}"
    if self.groups != 1: s += f", groups={self.groups}"
    if self.bias is None: s += ", bias=False"
    return s

class Conv2d(_ConvNd):
  """2-D convolution layer: (N, C_in, H, W) -> (N, C_out, H', W') (or unbatched (C, H, W)), as torch.nn.Conv2d."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
               groups: int = 1, bias: bool = True):
    super().__init__(2, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)
  def forward(self, x: Tensor) -> Tensor:
    return x.conv2d(self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

class Conv1d(_ConvNd):
  """1-D convolution layer: (N, C_in, L) -> (N, C_out, L'), as torch.nn.Conv1d."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
               groups: int = 1, bias: bool = True):
    super().__init__(1, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)
  def forward(self, x: Tensor) -> Tensor:
    # a 1-d convolution is a 2-d one over a height of 1
    w = self.weight.reshape(*self.weight.shape[:2], 1, self.kernel_size[0])
    out = x.unsqueeze(2).conv2d(w, self.bias, (1, self.stride[0]), (0, self.padding[0]), (1, self.dilation[0]), self.groups)
    return out.squeeze(2)

class Conv3d(_ConvNd):
  """3-D convolution layer: (N, C_in, D, H, W) -> (N, C_out, D', H', W'), as torch.nn.Conv3d."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
               groups: int = 1, bias: bool = True):
    super().__init__(3, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)
  def forward(self, x: Tensor) -> Tensor:
    return x.conv3d(self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

class ConvTranspose1d(_ConvNd):
  """1-D transposed convolution layer: (N, C_in, L) -> (N, C_out, L'), as torch.nn.ConvTranspose1d."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0, output_padding: Any = 0,
               groups: int = 1, bias: bool = True, dilation: Any = 1):
    super().__init__(1, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, transposed=True,
                     output_padding=output_padding)
  def forward(self, x: Tensor) -> Tensor:
    return x.conv_transpose1d(self.weight, self.bias, self.stride, self.padding, self.output_padding, self.groups, self.dilation)

class ConvTranspose3d(_ConvNd):
  """3-D transposed convolution layer: (N, C_in, D, H, W) -> (N, C_out, D', H', W'), as torch.nn.ConvTranspose3d."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0, output_padding: Any = 0,
               groups: int = 1, bias: bool = True, dilation: Any = 1):
    super().__init__(3, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, transposed=True,
                     output_padding=output_padding)
  def forward(self, x: Tensor) -> Tensor:
    return x.conv_transpose3d(self.weight, self.bias, self.stride, self.padding, self.output_padding, self.groups, self.dilation)

class ConvTranspose2d(_ConvNd):
  """2-D transposed convolution layer: (N, C_in, H, W) -> (N, C_out, H', W'), as torch.nn.ConvTranspose2d."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0, output_padding: Any = 0,
               groups: int = 1, bias: bool = True, dilation: Any = 1):
    super().__init__(2, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, transposed=True,
                     output_padding=output_padding)
  def forward(self, x: Tensor) -> Tensor:
    return x.conv_transpose2d(self.weight, self.bias, self.stride, self.padding, self.output_padding, self.groups, self.dilation)

class BatchNorm(Module):
  """Batch normalization over the channel axis 1 (any rank >= 2): (N, C, *) -> same shape. Training mode (batch
  statistics, running statistics updated in place) follows `self.training` (True from construction; None: the global
Tensor.training).
  BatchNorm1d/2d/3d are this one class (it does not check the rank, unlike PyTorch)."""
  def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
               track_running_stats: bool = True, *, bias: bool = True):
    self.num_features, self.eps, self.momentum = num_features, eps, momentum
    self.affine, self.track_running_stats = affine, track_running_stats
    self.weight: Tensor | None = Tensor.ones(num_features).requires_grad_() if affine else None
    self.bias: Tensor | None = Tensor.zeros(num_features).requires_grad_() if affine and bias else None
    if track_running_stats:
      self.running_mean: Tensor | None = Tensor.zeros(num_features)
      self.running_var: Tensor | None = Tensor.ones(num_features)
      self.num_batches_tracked: Tensor | None = Tensor.zeros(1, dtype=dtypes.int64).reshape(())
    else: self.running_mean = self.running_var = self.num_batches_tracked = None

  def extra_repr(self) -> str:
    return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, bias={self.bias is not None}, " \
           f"track_running_stats={self.track_running_stats}"
  def forward(self, x: Tensor) -> Tensor:
    if x.ndim < 2 or x.shape[1] != self.num_features:
      raise RuntimeError(f"BatchNorm({self.num_features}): expected input of shape (N, {self.num_features}, ...), got {x.shape}")
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

class BatchNorm1d(BatchNorm):
  """BatchNorm over (N, C) or (N, C, L) inputs (torch.nn.BatchNorm1d)."""
class BatchNorm2d(BatchNorm):
  """BatchNorm over (N, C, H, W) inputs (torch.nn.BatchNorm2d)."""
class BatchNorm3d(BatchNorm):
  """BatchNorm over (N, C, D, H, W) inputs (torch.nn.BatchNorm3d)."""

class LayerNorm(Module):
  """Normalize over the trailing normalized_shape axes, then scale and shift: (*, *normalized_shape) -> same shape."""
  def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True):
    self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    self.eps = eps
    self.weight = Tensor.ones(*self.normalized_shape).requires_grad_() if elementwise_affine else None
    self.bias = Tensor.zeros(*self.normalized_shape).requires_grad_() if elementwise_affine and bias else None
  def extra_repr(self) -> str: return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.weight is not None}, bias={self.bias is not None}"
  def forward(self, x: Tensor) -> Tensor:
    k = len(self.normalized_shape)
    if tuple(x.shape[-k:]) != self.normalized_shape:
      raise RuntimeError(f"LayerNorm{self.normalized_shape}: input shape {x.shape} does not end in {self.normalized_shape}")
    return x.layer_norm(self.normalized_shape, self.weight, self.bias, eps=self.eps)

class GroupNorm(Module):
  """Normalize each of num_groups channel groups over (channels in group, *spatial): (N, C, *) -> same shape."""
  def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, *, bias: bool = True):
    if num_channels % num_groups: raise ValueError(f"num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
    self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
    self.weight = Tensor.ones(num_channels).requires_grad_() if affine else None
    self.bias = Tensor.zeros(num_channels).requires_grad_() if affine and bias else None
  def extra_repr(self) -> str: return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.weight is not None}, bias={self.bias is not None}"
  def forward(self, x: Tensor) -> Tensor:
    if x.ndim < 2 or x.shape[1] != self.num_channels:
      raise RuntimeError(f"GroupNorm: expected input of shape (N, {self.num_channels}, ...), got {x.shape}")
    return x.group_norm(self.num_groups, self.weight, self.bias, eps=self.eps)

class RMSNorm(Module):
  """x / sqrt(mean(x^2) + eps) over the trailing normalized_shape axes, times weight; eps defaults to the dtype's epsilon."""
  def __init__(self, normalized_shape: int | Sequence[int], eps: float | None = None, elementwise_affine: bool = True):
    self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    self.eps = eps
    self.weight = Tensor.ones(*self.normalized_shape).requires_grad_() if elementwise_affine else None
  def extra_repr(self) -> str: return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.weight is not None}"
  def forward(self, x: Tensor) -> Tensor:
    k = len(self.normalized_shape)
    if tuple(x.shape[-k:]) != self.normalized_shape:
      raise RuntimeError(f"RMSNorm{self.normalized_shape}: input shape {x.shape} does not end in {self.normalized_shape}")
    eps = self.eps if self.eps is not None else _finfo_eps(x.dtype)
    out = x * (x.square().mean(tuple(range(x.ndim - k, x.ndim)), keepdim=True) + eps).rsqrt()
    return out * self.weight if self.weight is not None else out

def _finfo_eps(d: Any) -> float:
  return {dtypes.float16: 2.0 ** -10, dtypes.bfloat16: 2.0 ** -7, dtypes.float64: 2.0 ** -52}.get(d, 2.0 ** -23)

class Embedding(Module):
  """Rows of weight by index: int (*) -> (*, embedding_dim). The lookup is a gather on the device (a load per element);
  an out-of-range index reads a zero row and raises IndexOutOfBounds at the next host read (PyTorch raises at once)."""
  def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None):
    self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
    w = Tensor.normal(num_embeddings, embedding_dim)
    if padding_idx is not None:
      keep = Tensor.arange(num_embeddings).ne(padding_idx % num_embeddings).reshape(num_embeddings, 1)
      w = (w * keep.cast(w.dtype)).contiguous().realize()
    self.weight = w.requires_grad_()
  def extra_repr(self) -> str:
    return f"{self.num_embeddings}, {self.embedding_dim}" + (f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")
  def forward(self, idx: Tensor) -> Tensor:
    if not isinstance(idx, Tensor): idx = Tensor(idx, dtype=dtypes.int32)
    if dtypes.is_float(idx.dtype): raise TypeError(f"Embedding expects integer indices, got {idx.dtype}")
    v = self.num_embeddings
    if idx.numel() and v:
      # each index's row read from the weight (a gather: one load per element, where a one-hot matmul took
      # indices x rows x dim multiply-adds); its gradient adds each row's gradient where it was read
      from baregrad.tensor.ops.indexing import take_along
      n, dim = idx.numel(), self.embedding_dim
      rows = take_along(self.weight, idx.reshape(n, 1).expand(n, dim), 0)
      return checked(rows, idx, 0, v, f"embedding: index {{index}} is out of range for {v} embeddings").reshape(*idx.shape, dim)
    onehot = idx.reshape(*idx.shape, 1).eq(Tensor.arange(v, device=idx.device, dtype=idx.dtype).reshape(*(1,) * idx.ndim, v))
    onehot = checked(onehot, idx, 0, v, f"embedding: index {{index}} is out of range for {v} embeddings")
    return onehot.cast(self.weight.dtype) @ self.weight

class Dropout(Module):
  """Zero each element with probability p and scale the rest by 1/(1-p) while training; identity otherwise."""
  def __init__(self, p: float = 0.5, inplace: bool = False):
    if not 0 <= p <= 1: raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    self.p = p
  def extra_repr(self) -> str: return f"p={self.p}, inplace=False"
  def forward(self, x: Tensor) -> Tensor:
    if not _training(self.training): return x
    from baregrad.tensor.ops.norm import dropout
    return dropout(x, self.p, training=True)

class Sequential(Module, list):
  """Layers (any callables) applied in order; a list, so state-dict keys are `0.weight`, `1.bias`, ..."""
  def __init__(self, *layers: Any): list.__init__(self, layers)
  __hash__ = object.__hash__  # type: ignore[assignment]
  def forward(self, x: Any) -> Any:
    for layer in self: x = layer(x)
    return x
  def __repr__(self) -> str: return Module.__repr__(self)

# ---- stateless layers: each applies one functional op --------------------------------------------------------------
class Identity(Module):
  """Returns its input."""
  def __init__(self, *args: Any, **kwargs: Any): pass
  def forward(self, x: Tensor) -> Tensor: return x

class ReLU(Module):
  """max(x, 0) elementwise."""
  def __init__(self, inplace: bool = False): pass
  def forward(self, x: Tensor) -> Tensor: return x.relu()

class LeakyReLU(Module):
  """x where x >= 0, negative_slope * x elsewhere."""
  def __init__(self, negative_slope: float = 0.01, inplace: bool = False): self.negative_slope = negative_slope
  def extra_repr(self) -> str: return f"negative_slope={self.negative_slope}"
  def forward(self, x: Tensor) -> Tensor: return x.leaky_relu(self.negative_slope)

class GELU(Module):
  """Gaussian error linear unit (approximate='none' uses erf, 'tanh' the tanh formula)."""
  def __init__(self, approximate: str = "none"):
    if approximate not in ("none", "tanh"): raise RuntimeError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
    self.approximate = approximate
  def extra_repr(self) -> str: return f"approximate={self.approximate!r}"
  def forward(self, x: Tensor) -> Tensor: return x.gelu(self.approximate)

class SiLU(Module):
  """x * sigmoid(x)."""
  def __init__(self, inplace: bool = False): pass
  def forward(self, x: Tensor) -> Tensor: return x.silu()

class Sigmoid(Module):
  """1 / (1 + exp(-x))."""
  def forward(self, x: Tensor) -> Tensor: return x.sigmoid()

class Tanh(Module):
  """tanh(x)."""
  def forward(self, x: Tensor) -> Tensor: return x.tanh()

class Softmax(Module):
  """softmax along dim."""
  def __init__(self, dim: int | None = None): self.dim = dim
  def extra_repr(self) -> str: return f"dim={self.dim}"
  def forward(self, x: Tensor) -> Tensor: return x.softmax(-1 if self.dim is None else self.dim)

class LogSoftmax(Module):
  """log_softmax along dim."""
  def __init__(self, dim: int | None = None): self.dim = dim
  def extra_repr(self) -> str: return f"dim={self.dim}"
  def forward(self, x: Tensor) -> Tensor: return x.log_softmax(-1 if self.dim is None else self.dim)

class Flatten(Module):
  """Flatten axes start_dim..end_dim (default: all but the batch axis)."""
  def __init__(self, start_dim: int = 1, end_dim: int = -1): self.start_dim, self.end_dim = start_dim, end_dim
  def extra_repr(self) -> str: return f"start_dim={self.start_dim}, end_dim={self.end_dim}"
  def forward(self, x: Tensor) -> Tensor: return x.flatten(self.start_dim, self.end_dim)

class _MaxPool(Module):
  def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1, return_indices: bool = False, ceil_mode: bool = False):
    self.kernel_size, self.stride, self.padding, self.dilation = kernel_size, stride if stride is not None else kernel_size, padding, dilation
    self.return_indices, self.ceil_mode = return_indices, ceil_mode
  def extra_repr(self) -> str:
    return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, dilation={self.dilation}, ceil_mode={self.ceil_mode}"
  def _args(self) -> tuple: return (self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode, self.return_indices)

class MaxPool1d(_MaxPool):
  """Max over sliding windows of the last axis: (N, C, L) -> (N, C, L') (torch.nn.MaxPool1d)."""
  def forward(self, x: Tensor) -> Any: return x.max_pool1d(*self._args())
class MaxPool2d(_MaxPool):
  """Max over sliding windows of the last two axes: (N, C, H, W) -> (N, C, H', W') (torch.nn.MaxPool2d)."""
  def forward(self, x: Tensor) -> Any: return x.max_pool2d(*self._args())

class AvgPool1d(Module):
  """Mean over sliding windows of the last axis: (N, C, L) -> (N, C, L') (torch.nn.AvgPool1d)."""
  def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False, count_include_pad: bool = True):
    self.kernel_size, self.stride, self.padding = _pair(kernel_size, 1), _pair(stride if stride is not None else kernel_size, 1), _pair(padding, 1)
    self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad
  def extra_repr(self) -> str: return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"
  def forward(self, x: Tensor) -> Tensor: return x.avg_pool1d(self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad)

class AvgPool2d(Module):
  """Mean over sliding windows of the last two axes: (N, C, H, W) -> (N, C, H', W') (torch.nn.AvgPool2d)."""
  def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None):
    self.kernel_size, self.stride, self.padding = kernel_size, stride if stride is not None else kernel_size, padding
    self.ceil_mode, self.count_include_pad, self.divisor_override = ceil_mode, count_include_pad, divisor_override
  def extra_repr(self) -> str: return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"
  def forward(self, x: Tensor) -> Tensor:
    return x.avg_pool2d(self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad, self.divisor_override)

class AdaptiveAvgPool2d(Module):
  """Mean pooling to a fixed output size (H_out, W_out)."""
  def __init__(self, output_size: Any): self.output_size = output_size
  def extra_repr(self) -> str: return f"output_size={self.output_size}"
  def forward(self, x: Tensor) -> Tensor: return x.adaptive_avg_pool2d(self.output_size)

from baregrad.tensor.nn.state import get_parameters, get_state_dict, load_state_dict  # noqa: E402
from baregrad.tensor.nn import optim, state, init  # noqa: E402

from baregrad.tensor.nn.attention import MultiheadAttention  # noqa: E402  (it builds on Linear above)

__all__ = ["MultiheadAttention", "Module", "ModuleList", "ModuleDict", "IncompatibleKeys", "Linear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d",
           "ConvTranspose2d", "ConvTranspose3d", "BatchNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm",
           "RMSNorm", "Embedding", "Dropout", "Sequential", "Identity", "ReLU", "LeakyReLU", "GELU", "SiLU", "Sigmoid", "Tanh", "Softmax",
           "LogSoftmax", "Flatten", "MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d", "AdaptiveAvgPool2d", "train", "cross_entropy",
           "get_parameters", "get_state_dict", "load_state_dict", "optim", "state", "init"]
