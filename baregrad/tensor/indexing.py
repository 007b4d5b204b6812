"""Tensor indexing: ints, slices with steps, None, Ellipsis (anywhere), negative indices, integer tensors, lists and
tuples (sequence indices), Python bools and boolean masks.

A boolean mask has a data-dependent result size: the number of True elements is read back from the device (one
sync) before the result is built. A mask that is the only tensor index selects with a stable sort on the device
(ops/sorting.py, O(n log^2 n)); a mask mixed with other tensor indices becomes its nonzero() coordinates, which then go
through the gather of integer indices."""
from __future__ import annotations
from typing import Any
from baregrad.helpers import prod
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import UOp
from baregrad.ir.sint import is_sym, has_sym, sym_le, norm, max_shape

def _seq_index(it: Any, device: str) -> Any:
  """A list or tuple used as an index: a bool tensor when all its leaves are bools, else an int64 tensor."""
  from baregrad.tensor.tensor import Tensor
  import numpy as np
  try: arr = np.array(it)
  except ValueError: raise IndexError(f"a ragged sequence cannot be an index: {it!r}") from None
  if arr.dtype == np.bool_: return Tensor(arr, device=device, dtype=dtypes.bool)
  if arr.size and arr.dtype.kind not in "iu": raise IndexError(f"tensors used as indices must be long, int or bool: got a sequence of {arr.dtype} {it!r}")
  return Tensor(arr.astype(np.int64), device=device, dtype=dtypes.int64)

def _consumes(i: Any) -> int:
  """How many axes of the tensor an index item uses up."""
  from baregrad.tensor.tensor import Tensor
  if i is None or i is Ellipsis or isinstance(i, bool): return 0
  if isinstance(i, Tensor) and i.dtype == dtypes.bool: return i.ndim
  return 1

def _normalize(t, idx: Any) -> list:
  items = list(idx) if isinstance(idx, tuple) else [idx]
  items = [_seq_index(i, t.device) if isinstance(i, (list, tuple)) else i for i in items]
  ell = [k for k, i in enumerate(items) if i is Ellipsis]   # by identity: Tensor's == is elementwise
  if len(ell) > 1: raise IndexError("an index can only have a single ellipsis ('...')")
  consumed = sum(_consumes(i) for i in items)
  if consumed > t.ndim: raise IndexError(f"too many indices for tensor of dimension {t.ndim}: {consumed} given")
  if ell:
    k = ell[0]
    items = items[:k] + [slice(None)] * (t.ndim - consumed) + items[k + 1:]
  else: items = items + [slice(None)] * (t.ndim - consumed)
  return items

def _step_slice(x, axis: int, start: int, stop: int, step: int):
  """x restricted to start:stop:step along axis (a view: shrink, flip for negative steps, reshape)."""
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

def _symbolic_slice(it: slice) -> bool: return any(isinstance(v, UOp) for v in (it.start, it.stop, it.step))

def _sym_bounds(it: Any, n: Any, dim: int, shape: tuple) -> tuple[Any, Any, bool]:
  """(lo, hi, keeps the axis) of an index or a slice with a symbolic bound (a bound variable, ir/sint.py): step 1,
  bounds inside the axis for every value of the variables (no negative indices: they would need the value)."""
  if isinstance(it, UOp): lo, hi, keep = it, it + 1, False
  else:
    if it.step not in (None, 1): raise IndexError(f"a slice with a symbolic bound takes step 1, got {it.step} (dimension {dim} of a tensor of shape {shape})")
    lo, hi, keep = (0 if it.start is None else it.start), (n if it.stop is None else it.stop), True
  if not (sym_le(0, lo) and sym_le(lo, hi) and sym_le(hi, n)):
    raise IndexError(f"index {lo}:{hi} is not inside dimension {dim} of size {n} for every value of its variables (tensor of shape {shape})")
  return lo, hi, keep

def getitem(t, idx: Any):
  from baregrad.tensor.tensor import Tensor
  if isinstance(idx, (list, Tensor)): idx = (idx,)
  items = _normalize(t, idx)
  n_tensors = sum(1 for i in items if isinstance(i, Tensor))
  x, axis, tensor_idx, dim = t, 0, [], 0  # axis: in x as built so far; dim: in t, for messages
  mask_only = None
  for it in items:
    if it is not None and not isinstance(it, bool): dim += _consumes(it)
    if it is None:
      x = x.reshape(x.shape[:axis] + (1,) + x.shape[axis:]); axis += 1
    elif isinstance(it, bool):  # a Python bool is a 0-d mask: a new axis of size 1 (True) or 0 (False)
      x = x.reshape(x.shape[:axis] + (1,) + x.shape[axis:])
      if not it: x = x._shrink(tuple((0, 0) if k == axis else (0, s) for k, s in enumerate(x.shape)))
      axis += 1
    elif isinstance(it, int):
      n = x.shape[axis]
      if not -n <= it < n: raise IndexError(f"index {it} is out of range for dimension {dim - 1} of size {n} (tensor of shape {t.shape})")
      i = it % n
      x = x._shrink(tuple((i, i + 1) if k == axis else (0, s) for k, s in enumerate(x.shape)))
      x = x.reshape(x.shape[:axis] + x.shape[axis + 1:])
    elif isinstance(it, UOp) or (isinstance(it, slice) and _symbolic_slice(it)):
      lo, hi, keep = _sym_bounds(it, x.shape[axis], dim - 1, t.shape)
      x = x.shrink(tuple((lo, hi) if k == axis else None for k in range(x.ndim)))
      if keep: axis += 1
      else: x = x.reshape(x.shape[:axis] + x.shape[axis + 1:])
    elif isinstance(it, slice):
      start, stop, step = it.indices(x.shape[axis])
      if step == 0: raise ValueError("slice step cannot be zero")
      x = _step_slice(x, axis, start, stop, step); axis += 1
    elif isinstance(it, Tensor) and it.dtype == dtypes.bool:
      k = it.ndim
      if it.shape != x.shape[axis:axis + k]:
        raise IndexError(f"the shape of the mask {it.shape} at index {dim - k} does not match the shape {x.shape[axis:axis + k]} of the indexed "
                         f"dimensions {dim - k}..{dim - 1} of the tensor of shape {t.shape}")
      if k == 0:  # a 0-d mask: like a Python bool, its value read back from the device
        x = x.reshape(x.shape[:axis] + (1,) + x.shape[axis:])
        if not bool(it.item()): x = x._shrink(tuple((0, 0) if j == axis else (0, s) for j, s in enumerate(x.shape)))
        axis += 1
      elif n_tensors == 1: mask_only = (axis, it); axis += k
      else:
        for j, c in enumerate(it.nonzero(as_tuple=True)): tensor_idx.append((axis + j, c))
        axis += k
    elif isinstance(it, Tensor):
      if dtypes.is_float(it.dtype): raise IndexError(f"tensors used as indices must be long, int or bool tensors, got {it.dtype}")
      tensor_idx.append((axis, it)); axis += 1
    else: raise IndexError(f"unsupported index type {type(it).__name__}: expected int, slice, None, Ellipsis, bool, a sequence or a Tensor")
  if mask_only is not None:
    from baregrad.tensor.ops.sorting import mask_rows
    ax, m = mask_only
    k = m.ndim
    rest = [a for a in range(x.ndim) if not ax <= a < ax + k]
    y = mask_rows(x.permute(*range(ax, ax + k), *rest), m)          # (count, *rest)
    return y.permute(*range(1, ax + 1), 0, *range(ax + 1, y.ndim)) if ax else y
  if tensor_idx: x = _advanced(x, tensor_idx, t.device, t.dtype)
  return x

def _advanced(x, tensor_idx: list, device: str, dtype):
  """PyTorch's advanced indexing: the index tensors broadcast together to a shape B; the result has B in place of the
  indexed axes when they are adjacent, else in front. A gather (functional.take_along) of the rows the index tuples
  name in the indexed axes flattened."""
  from baregrad.tensor.common import broadcast_shape
  from baregrad.tensor.bounds import checked
  axes = [ax for ax, _ in tensor_idx]
  try: B = broadcast_shape(*(ti.shape for _, ti in tensor_idx))
  except RuntimeError: raise IndexError(f"index tensors of shapes {', '.join(str(ti.shape) for _, ti in tensor_idx)} do not broadcast together") from None
  rest = [a for a in range(x.ndim) if a not in axes]
  xp = x.permute(*axes, *rest)  # (n_1..n_k, R...)
  k, nb = len(axes), len(B)
  nsel, nrow, row = prod(xp.shape[:k]), prod(B), prod(xp.shape[k:])
  if nsel and nrow and row:
    # a gather of the rows the indices name, each index tuple made one row number of the indexed axes flattened (a
    # load per element; the one-hot form below costs rows x indices x row length). A tuple with an index out of range
    # reads 0, as the one-hot form gives, and each index's bounds check reports it
    from baregrad.tensor.ops.indexing import take_along
    lin, inside = None, None
    # row numbers in int32 where they fit, else int64 (the gather's kernel then indexes in int64: codegen index_dtype)
    idt = dtypes.int32 if nsel <= 2 ** 31 - 1 else dtypes.int64
    for ax, ti in tensor_idx:
      n = x.shape[ax]
      i = ti.cast(idt)
      i = (i < 0).where(i + n, i)._bcast(B)
      lin = i if lin is None else lin * n + i
      if k > 1:
        ok = (i >= 0) & (i < n)
        inside = ok if inside is None else inside & ok
    if inside is not None: lin = inside.where(lin, -1)
    out = take_along(xp.reshape(nsel, row), lin.reshape(nrow, 1).expand(nrow, row), 0)
    for ax, ti in tensor_idx:
      n = x.shape[ax]
      out = checked(out, ti, -n, n, f"index {{index}} is out of bounds for dimension {ax} with size {n} (tensor indexing)")
    out = out.reshape(B + xp.shape[k:])
  else:
    out = _one_hot_rows(x, xp, tensor_idx, B, device)
  if out.dtype != dtype: out = out.cast(dtype)
  # out is (B..., R...): adjacent indexed axes put B where they were
  if axes == list(range(axes[0], axes[0] + k)) and axes[0] > 0:
    p0 = axes[0]
    order = list(range(nb, nb + p0)) + list(range(nb)) + list(range(nb + p0, out.ndim))
    out = out.permute(*order)
  return out

def _one_hot_rows(x, xp, tensor_idx: list, B: tuple[int, ...], device: str):
  """The rows of xp (the indexed axes first) the index tensors name, as a one-hot compare per index, ANDed, then a
  masked sum: for the cases a gather cannot take (nothing to read)."""
  from baregrad.tensor.tensor import Tensor
  from baregrad.tensor.bounds import checked
  k, nb = len(tensor_idx), len(B)
  rest = xp.ndim - k
  mask = None
  for j, (ax, ti) in enumerate(tensor_idx):
    n = x.shape[ax]
    i = ti.cast(dtypes.int32)
    i = (i < 0).where(i + n, i)._bcast(B)
    ar = Tensor.arange(n, device=device, dtype=dtypes.int32)
    oh = i.reshape(B + (1,) * k).eq(ar.reshape((1,) * nb + tuple(n if jj == j else 1 for jj in range(k))))
    oh = checked(oh, ti, -n, n, f"index {{index}} is out of bounds for dimension {ax} with size {n} (tensor indexing)")
    mask = oh if mask is None else mask & oh
  shp = mask.shape
  mask = mask.reshape(shp + (1,) * rest)
  xm = xp.reshape((1,) * nb + xp.shape)
  red = tuple(range(nb, nb + k))
  return mask.where(xm, 0).sum(red) if x.dtype != dtypes.bool else mask.where(xm, False).any(red)

def _region(t, idx: Any) -> tuple[tuple, tuple] | None:
  """((lo, hi) per axis, the selected part's shape) when idx is basic indexing (ints, step-1 slices, symbolic bounds,
  an Ellipsis): a box of the tensor; None otherwise."""
  items = list(idx) if isinstance(idx, tuple) else [idx]
  if any(not (isinstance(i, (int, slice, UOp)) and not isinstance(i, bool)) and i is not Ellipsis for i in items): return None
  if sum(i is Ellipsis for i in items) > 1: return None
  n_ax = sum(1 for i in items if i is not Ellipsis)
  if n_ax > t.ndim: return None
  if Ellipsis in items:
    k = items.index(Ellipsis)
    items = items[:k] + [slice(None)] * (t.ndim - n_ax) + items[k + 1:]
  else: items = items + [slice(None)] * (t.ndim - n_ax)
  region, shape = [], []
  for d, (it, n) in enumerate(zip(items, t.shape)):
    if isinstance(it, UOp) or (isinstance(it, slice) and _symbolic_slice(it)):
      lo, hi, keep = _sym_bounds(it, n, d, t.shape)
    elif isinstance(it, int):
      if not -n <= it < n: raise IndexError(f"index {it} is out of range for dimension {d} of size {n} (tensor of shape {t.shape})")
      lo, hi, keep = it % n, it % n + 1, False
    else:
      if is_sym(n): return None
      lo, hi, step = it.indices(n)
      if step != 1: return None
      hi = max(lo, hi)
      keep = True
    region.append((lo, hi))
    if keep: shape.append(norm(hi - lo) if is_sym(hi) or is_sym(lo) else hi - lo)
  return tuple(region), tuple(shape)

def setitem(t, idx: Any, v: Any) -> None:
  from baregrad.tensor.tensor import Tensor
  from baregrad.tensor.common import _is_whole_buffer
  from baregrad.engine.graph import base_of
  from baregrad.ir.ops import Ops
  from baregrad.tensor.grad_mode import is_grad_enabled
  if (box := _region(t, idx)) is not None and not (t.requires_grad and is_grad_enabled()) and (_is_whole_buffer(t.uop) or base_of(t.uop).op is not Ops.BUFFER):
    # basic indexing into a tensor that is a buffer: one kernel writes the box, the rest keeps its bytes
    from baregrad.tensor.inplace import write_region
    region, shape = box
    val = v if isinstance(v, Tensor) else Tensor.full(max_shape(shape), v, dtype=t.dtype, device=t.device)
    if not isinstance(v, Tensor) and has_sym(shape): val = val.shrink(tuple((0, s) for s in shape))
    val = val.cast(t.dtype)._bcast(shape)
    box_shape = tuple(norm(hi - lo) if is_sym(hi) or is_sym(lo) else hi - lo for lo, hi in region)
    write_region(t, region, val.reshape(box_shape))
    return
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
