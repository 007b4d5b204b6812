"""Tensor indexing: ints, slices with steps, None, Ellipsis, negative indices and integer tensors."""
from __future__ import annotations
from typing import Any
from baregrad.ir.dtype import dtypes

def _normalize(t, idx: Any) -> list:
  items = list(idx) if isinstance(idx, tuple) else [idx]
  n_ell = sum(1 for i in items if i is Ellipsis)
  if n_ell > 1: raise IndexError("an index can only have a single ellipsis ('...')")
  consumed = sum(1 for i in items if i is not None and i is not Ellipsis)
  if consumed > t.ndim: raise IndexError(f"too many indices for tensor of dimension {t.ndim}: {consumed} given")
  if n_ell:
    k = items.index(Ellipsis)
    items = items[:k] + [slice(None)] * (t.ndim - consumed) + items[k + 1:]
  else: items = items + [slice(None)] * (t.ndim - consumed)
  return items

def _step_slice(x, axis: int, start: int, stop: int, step: int):
  """x restricted to start:stop:step along axis (a view: shrink, flip for negative steps, reshape)."""
  n = x.shape[axis]
  if step > 0:
    length = max(0, -(-(stop - start) // step))
    lo, hi = start, start + (length - 1) * step + 1
  else:
    length = max(0, -(-(start - stop) // -step))
    lo, hi = start - (length - 1) * (-step), start + 1
  if length == 0:
    return x._shrink(tuple((0, 0) if i == axis else (0, s) for i, s in enumerate(x.shape)))
  x = x._shrink(tuple((lo, hi) if i == axis else (0, s) for i, s in enumerate(x.shape)))
  if step < 0: x = x.flip(axis)
  st = abs(step)
  if st == 1: return x
  # pad to a multiple of the step, split the axis into (length, step), keep the first of each group
  span = x.shape[axis]
  x = x._pad(tuple((0, length * st - span) if i == axis else (0, 0) for i in range(x.ndim)))
  x = x.reshape(x.shape[:axis] + (length, st) + x.shape[axis + 1:])
  x = x._shrink(tuple((0, 1) if i == axis + 1 else (0, s) for i, s in enumerate(x.shape)))
  return x.reshape(x.shape[:axis + 1] + x.shape[axis + 2:])

def getitem(t, idx: Any):
  from baregrad.tensor.tensor import Tensor
  if isinstance(idx, (list,)) or (isinstance(idx, Tensor)): idx = (idx,)
  items = _normalize(t, idx)
  x, axis, tensor_idx = t, 0, []
  for it in items:
    if it is None:
      x = x.reshape(x.shape[:axis] + (1,) + x.shape[axis:]); axis += 1
    elif isinstance(it, bool): raise IndexError("bool indices are not supported; use a bool tensor with where")
    elif isinstance(it, int):
      n = x.shape[axis]
      if not -n <= it < n: raise IndexError(f"index {it} is out of range for axis {axis} of size {n}")
      i = it % n
      x = x._shrink(tuple((i, i + 1) if k == axis else (0, s) for k, s in enumerate(x.shape)))
      x = x.reshape(x.shape[:axis] + x.shape[axis + 1:])
    elif isinstance(it, slice):
      start, stop, step = it.indices(x.shape[axis])
      if step == 0: raise ValueError("slice step cannot be zero")
      x = _step_slice(x, axis, start, stop, step); axis += 1
    elif isinstance(it, (Tensor, list)):
      ti = it if isinstance(it, Tensor) else Tensor(it, device=t.device, dtype=dtypes.int64)
      if ti.dtype == dtypes.bool: raise IndexError("boolean mask indexing needs a data-dependent shape; use where() instead")
      tensor_idx.append((axis, ti)); axis += 1
    else: raise IndexError(f"unsupported index type {type(it).__name__}")
  for k, (ax, ti) in enumerate(tensor_idx):
    # advanced indexing: one-hot compare along the axis, multiply and sum (fuses into one kernel)
    ax = ax + sum(ti2.ndim - 1 for _, ti2 in tensor_idx[:k])
    n = x.shape[ax]
    i = ti.cast(dtypes.int32)
    i = (i < 0).where(i + n, i)
    ar = Tensor.arange(n, device=t.device, dtype=dtypes.int32)
    onehot = i.reshape(i.shape + (1,)).eq(ar.reshape((1,) * i.ndim + (n,)))  # (*idx, n)
    xm = x.reshape(x.shape[:ax] + (1,) * i.ndim + x.shape[ax:])  # (..., 1.., n, rest)
    oh = onehot.reshape((1,) * ax + onehot.shape + (1,) * (x.ndim - ax - 1))
    red = ax + i.ndim
    x = oh.where(xm, 0).sum(red) if x.dtype != dtypes.bool else oh.where(xm, False).any(red)
    if x.dtype != t.dtype: x = x.cast(t.dtype)
  return x

def setitem(t, idx: Any, v: Any) -> None:
  from baregrad.tensor.tensor import Tensor
  # build a mask of the selected region by indexing a tensor of positions, then blend
  pos = Tensor.arange(t.numel(), device=t.device, dtype=dtypes.int32).reshape(t.shape)
  sel = getitem(pos, idx)
  val = v if isinstance(v, Tensor) else Tensor.full(sel.shape, v, dtype=t.dtype, device=t.device)
  val = val.cast(t.dtype)._bcast(sel.shape)
  flat_pos = sel.reshape(-1)
  mask_hit = flat_pos.reshape(-1, 1).eq(Tensor.arange(t.numel(), device=t.device, dtype=dtypes.int32).reshape(1, -1))
  newv = mask_hit.where(val.reshape(-1, 1), 0).sum(0).cast(t.dtype) if t.dtype != dtypes.bool else mask_hit.where(val.reshape(-1, 1), False).any(0)
  hit = mask_hit.any(0)
  t.assign(hit.reshape(t.shape).where(newv.reshape(t.shape), t))
