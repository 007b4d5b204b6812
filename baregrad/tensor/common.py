"""Helpers shared by tensor.py and the op mixins (tensor/ops/): axis and broadcast rules, the (values, indices) pair,
the registry of tensors that require grad. Nothing here imports tensor.py, so the mixins can import it at load time."""
from __future__ import annotations
import weakref
from typing import Any, NamedTuple, Sequence, TYPE_CHECKING
import numpy as np
from baregrad.helpers import prod
from baregrad.ir.dtype import DType, dtypes
from baregrad.ir.ops import UOp, Ops, make_keyed
if TYPE_CHECKING: from baregrad.tensor.tensor import Tensor

ShapeLike = int | Sequence[int]

# id -> tensor (a WeakSet compares its members with ==, which is elementwise for a Tensor)
_all_grad_tensors: weakref.WeakValueDictionary = weakref.WeakValueDictionary()

def _axis(axis: int, ndim: int) -> int:
  if not -max(ndim, 1) <= axis < max(ndim,
      1): raise IndexError(f"dimension {axis} is out of range for a tensor of {ndim} dimensions (expected in [{-max(ndim, 1)}, {max(ndim, 1) - 1}])")
  return axis % max(ndim, 1)

def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
  nd = max(len(s) for s in shapes)
  ps = [(1,) * (nd - len(s)) + tuple(s) for s in shapes]
  out = []
  for dims in zip(*ps):
    big = {d for d in dims if d != 1}
    if len(big) > 1: raise RuntimeError(f"shapes {' and '.join(str(tuple(s)) for s in shapes)} do not broadcast (axis sizes {sorted(big)})")
    out.append(big.pop() if big else 1)
  return tuple(out)

class ValuesIndices(NamedTuple):
  """(values, indices) as PyTorch's torch.return_types (max, min, cummax, ...): unpacks like a tuple, or by name."""
  values: Tensor
  indices: Tensor
  def __getattr__(self, name: str) -> Any:
    # a caller that expected a Tensor (tinygrad's max(axis) gives the values alone) is told what it got
    raise AttributeError(f"(values, indices) has no attribute {name!r}: max(dim)/min(dim) return both, as PyTorch's do; "
                         f"use .values, or amax(dim)/amin(dim) for the values alone")

def _is_whole_buffer(u: UOp) -> bool:
  """u is a buffer, or a reshape of one (all of its elements in order), not a view into part of it (x[0] is a
  RESHAPE of a SHRINK of the buffer); reshapes of reshapes of one too."""
  while u.op is Ops.RESHAPE: u = u.src[0]
  return u.op is Ops.BUFFER

def _shape_arg(shape: tuple) -> tuple[int, ...]:
  if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
  for s in shape:
    if type(s) is not int:   # (plain ints, the common case, need no conversion)
      for v in shape:
        # (a symbolic size: an integer expression of bound variables, ir/sint.py)
        if isinstance(v, UOp) and dtypes.is_int(v.dtype) and v.dtype.count == 1: continue
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)): raise TypeError(f"sizes must be ints, got {type(v).__name__} in {tuple(shape)}")
      return tuple(v if isinstance(v, UOp) else int(v) for v in shape)
  return shape if type(shape) is tuple else tuple(shape)

MAX_NUMEL = (1 << 62) - 1   # elements of one tensor: a byte offset of the largest (8-byte) elements still fits an int64

def _new_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
  """A shape to create a tensor of: PyTorch's error for a negative size, and for sizes whose product overflows."""
  if any(s < 0 for s in shape): raise RuntimeError(f"Trying to create tensor with negative dimension {min(shape)}: {list(shape)}")
  if prod(shape) > MAX_NUMEL: raise RuntimeError(f"sizes {list(shape)} overflow: {prod(shape)} elements, at most {MAX_NUMEL}")
  return shape

def _node(op: Ops, dtype: DType, srcs: tuple, arg: Any, shape: tuple[int, ...]) -> UOp:
  # (args here are shapes, axes and None, their own hash-consing keys: UOp() without its argument checks)
  u = make_keyed(op, dtype, srcs, arg, arg)
  if u._shape is None: object.__setattr__(u, "_shape", shape)
  return u
