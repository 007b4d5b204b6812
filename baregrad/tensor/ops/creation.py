"""Tensors made from a shape and a value: empty, full, zeros, ones and their _like forms, arange, linspace, eye."""
from __future__ import annotations
import math
from typing import Any, TYPE_CHECKING
import numpy as np
from baregrad.ir.dtype import DType, dtypes
from baregrad.ir.ops import UOp, Ops
from baregrad.tensor.common import ShapeLike, _shape_arg, _new_shape
if TYPE_CHECKING: from baregrad.tensor.tensor import Tensor

class CreationOps:
  """Creation: static Tensor methods (Tensor.zeros(2, 3), Tensor.arange(10)) and x.zeros_like() forms."""
  __slots__ = ()   # (Tensor has slots: a base without them would give every tensor a __dict__)
  # ---- creation
  @staticmethod
  def empty(*shape: Any, dtype: DType | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """A tensor of the given shape; unlike PyTorch it is filled with zeros (nothing is left uninitialized)."""
    from baregrad.tensor.tensor import Tensor
    return Tensor.zeros(*shape, dtype=dtype, device=device, requires_grad=requires_grad)
  @staticmethod
  def full(shape: ShapeLike, fill_value: Any, dtype: DType | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """A tensor of the given shape filled with fill_value; dtype from the value (bool, int64, float32) unless given."""
    shape = _new_shape(_shape_arg((shape,) if isinstance(shape, int) else tuple(shape)))
    from baregrad.tensor.tensor import Tensor, to_dtype
    d = to_dtype(dtype) if dtype is not None else (dtypes.bool if isinstance(fill_value, bool) else dtypes.int64 if isinstance(fill_value,
        int) else dtypes.default_float)
    c = UOp.const(d, fill_value)
    u = UOp(Ops.EXPAND, d, (UOp(Ops.RESHAPE, d, (c,), (1,) * len(shape)),), shape) if shape else c
    t = Tensor(u, device=device)
    # a tensor that asks for gradients is a leaf: give it its own buffer, as torch.full does
    return t.contiguous().realize()._leaf(True) if requires_grad else t
  @staticmethod
  def zeros(*shape: Any, dtype: DType | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """A float32 (or dtype) tensor of zeros, in its own buffer."""
    from baregrad.tensor.tensor import Tensor
    return Tensor.full(_shape_arg(shape), 0.0 if dtype is None else 0, dtype=dtype or dtypes.default_float,
        device=device).contiguous().realize()._leaf(requires_grad)
  @staticmethod
  def ones(*shape: Any, dtype: DType | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """A float32 (or dtype) tensor of ones, in its own buffer."""
    from baregrad.tensor.tensor import Tensor
    return Tensor.full(_shape_arg(shape), 1, dtype=dtype or dtypes.default_float, device=device).contiguous().realize()._leaf(requires_grad)
  def _leaf(self, requires_grad: bool | None) -> Tensor:
    if requires_grad: return self.requires_grad_(True)
    self.requires_grad = requires_grad
    return self
  def full_like(self, v: Any, dtype: DType | None = None, device: str | None = None) -> Tensor:
    """A tensor of this one's shape (and dtype, device unless given) filled with v."""
    from baregrad.tensor.tensor import Tensor
    return Tensor.full(self.shape, v, dtype=dtype or self.dtype, device=device or self.device)
  def zeros_like(self, **kw: Any) -> Tensor:
    """Zeros of this tensor's shape, dtype and device."""
    return self.full_like(0, **kw)
  def ones_like(self, **kw: Any) -> Tensor:
    """Ones of this tensor's shape, dtype and device."""
    return self.full_like(1, **kw)
  def empty_like(self, **kw: Any) -> Tensor:
    """A tensor of this one's shape, dtype and device, filled with zeros."""
    return self.full_like(0, **kw)
  @staticmethod
  def arange(start: Any, stop: Any = None, step: Any = 1, dtype: DType | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """1-D tensor start, start+step, ... below stop; int64 unless a float argument or dtype says otherwise, computed on the device."""
    if stop is None: start, stop = 0, start
    if step == 0: raise RuntimeError("arange: step must be nonzero")
    if (stop - start) * step < 0: raise RuntimeError(f"arange: upper bound and lower bound inconsistent with step sign (start {start}, end {stop}, step "
        f"{step})")
    n = max(0, math.ceil((stop - start) / step))
    from baregrad.tensor.tensor import Tensor, _np_dtype, to_dtype
    d = to_dtype(dtype) if dtype is not None else (dtypes.default_float if any(isinstance(x, float) for x in (start, stop, step)) else dtypes.int64)
    if n == 0: return Tensor(np.zeros(0, _np_dtype(d)), device=device)
    idx = Tensor._index_range(n, device).cast(d)
    out = idx if step == 1 and start == 0 else (idx * step + start).cast(d)
    return out._leaf(requires_grad) if requires_grad else out
  @staticmethod
  def _index_range(n: int, device: str | None) -> Tensor:
    """0..n-1 as int32, computed where it is read (an IOTA node: each element is the index the kernel would load it
    from), no buffer and no memory traffic."""
    if n > dtypes.max(dtypes.int32) + 1: raise ValueError(f"arange of {n} elements: int32 indices reach {dtypes.max(dtypes.int32) + 1}")
    from baregrad.tensor.tensor import Tensor
    return Tensor(UOp(Ops.IOTA, dtypes.int32, (), n), device=device)
  @staticmethod
  def linspace(start: float, end: float, steps: int, dtype: DType | None = None, device: str | None = None) -> Tensor:
    """1-D float tensor of steps values from start to end inclusive, evenly spaced."""
    if not isinstance(steps, (int, np.integer)) or isinstance(steps, bool): raise TypeError(f"linspace: steps must be an int, got {type(steps).__name__}")
    if steps < 0: raise RuntimeError(f"linspace: number of steps must be non-negative, got {steps}")
    from baregrad.tensor.tensor import Tensor
    if steps == 1: return Tensor.full((1,), start, dtype=dtype or dtypes.default_float, device=device)
    return (Tensor.arange(steps, device=device).cast(dtypes.default_float) * ((end - start) / (steps - 1)) + start).cast(dtype or dtypes.default_float)
  @staticmethod
  def eye(n: int, m: int | None = None, dtype: DType | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """2-D (n, m) tensor with ones on the main diagonal, zeros elsewhere."""
    m = n if m is None else m
    if n < 0 or m < 0: raise RuntimeError(f"eye: n and m must be greater or equal to 0, got n={n}, m={m}")
    from baregrad.tensor.tensor import Tensor
    r = Tensor.arange(n, device=device).reshape(n, 1)
    c = Tensor.arange(m, device=device).reshape(1, m)
    return r.eq(c).cast(dtype or dtypes.default_float).contiguous().realize()._leaf(requires_grad)
