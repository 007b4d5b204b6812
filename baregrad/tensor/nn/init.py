"""torch.nn.init: fill a tensor in place with values drawn on the device (PyTorch's formulas for the bounds).

Each function writes into the tensor's own buffer (it keeps its identity and requires_grad) and returns it. The
random streams are baregrad's (Tensor.manual_seed), so values differ from PyTorch's for the same seed; the
distributions are the same. `generator=` is accepted only as None."""
from __future__ import annotations
import math
from typing import Any
from baregrad.helpers import prod
from baregrad.tensor.tensor import Tensor

def _check(tensor: Any, name: str, generator: Any = None) -> None:
  if not isinstance(tensor, Tensor): raise TypeError(f"{name}: tensor must be a Tensor, got {type(tensor).__name__}")
  if generator is not None: raise NotImplementedError(f"{name}: generator={generator!r}: only the global stream (Tensor.manual_seed) is supported")

def _write(t: Tensor, v: Tensor) -> Tensor:
  from baregrad.tensor.nn.state import _assign_into
  if t.numel(): _assign_into(t, v.cast(t.dtype).reshape(t.shape))
  return t

def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
  """The recommended gain for a nonlinearity: 1 (linear, conv, sigmoid), 5/3 (tanh), sqrt(2) (relu),
  sqrt(2 / (1 + slope^2)) (leaky_relu, slope param, default 0.01), 3/4 (selu)."""
  if nonlinearity in ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "sigmoid"): return 1.0
  if nonlinearity == "tanh": return 5.0 / 3
  if nonlinearity == "relu": return math.sqrt(2.0)
  if nonlinearity == "leaky_relu":
    if param is None: slope = 0.01
    elif isinstance(param, (int, float)) and not isinstance(param, bool): slope = float(param)
    else: raise ValueError(f"calculate_gain: negative_slope {param!r} is not a valid number")
    return math.sqrt(2.0 / (1 + slope ** 2))
  if nonlinearity == "selu": return 3.0 / 4
  raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}: expected linear, conv*, sigmoid, tanh, relu, leaky_relu or selu")

def _calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
  """(fan_in, fan_out): size(1) and size(0) times the receptive field (the product of the axes after the first two)."""
  if tensor.ndim < 2:
    raise ValueError(f"fan in and fan out can not be computed for a tensor with fewer than 2 dimensions (shape {tensor.shape})")
  rf = prod(tensor.shape[2:])
  return tensor.shape[1] * rf, tensor.shape[0] * rf

def _fan(tensor: Tensor, mode: str) -> int:
  if mode not in ("fan_in", "fan_out"): raise ValueError(f"mode {mode!r} is not supported: expected 'fan_in' or 'fan_out'")
  fi, fo = _calculate_fan_in_and_fan_out(tensor)
  return fi if mode == "fan_in" else fo

def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator: Any = None) -> Tensor:
  """Fill with U(a, b)."""
  _check(tensor, "uniform_", generator)
  return _write(tensor, Tensor.uniform(*tensor.shape, low=a, high=b, device=tensor.device))

def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator: Any = None) -> Tensor:
  """Fill with N(mean, std^2)."""
  _check(tensor, "normal_", generator)
  return _write(tensor, Tensor.normal(*tensor.shape, mean=mean, std=std, device=tensor.device))

def constant_(tensor: Tensor, val: float) -> Tensor:
  """Fill with val."""
  _check(tensor, "constant_")
  return _write(tensor, Tensor.full(tensor.shape, val, dtype=tensor.dtype, device=tensor.device))

def zeros_(tensor: Tensor) -> Tensor:
  """Fill with 0."""
  return constant_(tensor, 0)

def ones_(tensor: Tensor) -> Tensor:
  """Fill with 1."""
  return constant_(tensor, 1)

def eye_(tensor: Tensor) -> Tensor:
  """Fill a 2-D tensor with the identity (ones on the main diagonal)."""
  _check(tensor, "eye_")
  if tensor.ndim != 2: raise ValueError(f"eye_: only 2-D tensors are supported, got shape {tensor.shape}")
  return _write(tensor, Tensor.eye(*tensor.shape, dtype=tensor.dtype, device=tensor.device))

def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator: Any = None) -> Tensor:
  """Fill with U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio, 2010)."""
  _check(tensor, "xavier_uniform_", generator)
  fi, fo = _calculate_fan_in_and_fan_out(tensor)
  b = gain * math.sqrt(6.0 / float(fi + fo)) if fi + fo else 0.0
  return uniform_(tensor, -b, b)

def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator: Any = None) -> Tensor:
  """Fill with N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out))."""
  _check(tensor, "xavier_normal_", generator)
  fi, fo = _calculate_fan_in_and_fan_out(tensor)
  return normal_(tensor, 0.0, gain * math.sqrt(2.0 / float(fi + fo)) if fi + fo else 0.0)

def kaiming_uniform_(tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu", generator: Any = None) -> Tensor:
  """Fill with U(-b, b), b = gain * sqrt(3 / fan) (He et al., 2015); gain from calculate_gain(nonlinearity, a)."""
  _check(tensor, "kaiming_uniform_", generator)
  if tensor.numel() == 0: return tensor
  fan = _fan(tensor, mode)
  b = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / fan)
  return uniform_(tensor, -b, b)

def kaiming_normal_(tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu", generator: Any = None) -> Tensor:
  """Fill with N(0, std^2), std = gain / sqrt(fan) (He et al., 2015)."""
  _check(tensor, "kaiming_normal_", generator)
  if tensor.numel() == 0: return tensor
  fan = _fan(tensor, mode)
  return normal_(tensor, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(fan))

def orthogonal_(tensor: Tensor, gain: float = 1.0, generator: Any = None) -> Tensor:
  """Fill with a (semi-)orthogonal matrix: the Q of a Gaussian matrix's QR, computed on the device (linalg.qr),
  with R's diagonal made positive, as PyTorch does; axes after the first are flattened; times gain."""
  _check(tensor, "orthogonal_", generator)
  if tensor.ndim < 2: raise ValueError(f"orthogonal_: only tensors with 2 or more dimensions are supported, got shape {tensor.shape}")
  if tensor.numel() == 0: return tensor
  from baregrad.tensor.ops.linalg import qr
  rows = tensor.shape[0]
  cols = tensor.numel() // rows
  flat = Tensor.randn(rows, cols, device=tensor.device)
  if rows < cols: flat = flat.T
  q, _ = qr(flat)
  if rows < cols: q = q.T
  return _write(tensor, q * gain)

__all__ = ["calculate_gain", "uniform_", "normal_", "constant_", "zeros_", "ones_", "eye_", "xavier_uniform_", "xavier_normal_",
           "kaiming_uniform_", "kaiming_normal_", "orthogonal_"]
