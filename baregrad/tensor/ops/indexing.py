"""Ops that index with tensors: gather, scatter (and its reductions), index_select, repeat_interleave, masked_fill,
one_hot. Indexes are bounds-checked on the device (bounds.py). x[idx] itself is tensor/indexing.py."""
from __future__ import annotations
import math
from typing import Any, TYPE_CHECKING
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import UOp, Ops
from baregrad.tensor.common import _axis
from baregrad.tensor.bounds import checked
from baregrad.tensor.ops.shape import _zero
if TYPE_CHECKING: from baregrad.tensor.tensor import Tensor

def _onehot(idx: Tensor, n: int) -> Tensor:
  """(*idx.shape, n) bool: idx[...] == k, negative indices counted from the end."""
  from baregrad.tensor.tensor import Tensor
  i = idx.cast(dtypes.int32)
  i = (i < 0).where(i + n, i)
  return i.unsqueeze(-1).eq(Tensor.arange(n, device=idx.device, dtype=dtypes.int32))

def _check_index(name: str, x: Tensor, d: int, index: Tensor, src: Tensor | None = None) -> None:
  from baregrad.tensor.tensor import Tensor
  if not isinstance(index, Tensor): raise TypeError(f"{name}: index must be a Tensor, got {type(index).__name__}")
  if dtypes.is_float(index.dtype) or index.dtype == dtypes.bool: raise TypeError(f"{name}: index must be an integer tensor, got {index.dtype}")
  if index.ndim != x.ndim: raise RuntimeError(f"{name}: index has {index.ndim} dimensions (shape {index.shape}) but the input has {x.ndim} (shape {x.shape})")
  for k in range(x.ndim):
    if k != d and index.shape[k] > x.shape[k]:
      raise RuntimeError(f"{name}: index shape {index.shape} is larger than the input shape {x.shape} in dimension {k} (dim={d})")
    if src is not None and index.shape[k] > src.shape[k]:
      raise RuntimeError(f"{name}: index shape {index.shape} is larger than the src shape {src.shape} in dimension {k}")

def take_along(src: Tensor, index: Tensor, dim: int) -> Tensor:
  """out[..., j, ...] = src[..., index[..., j, ...], ...] along dim, where src has index's shape on every other axis:
  one GATHER node, a load from src's memory at each index (an index outside [0, src.shape[dim]) reads 0, negative
  ones too). Its gradient adds each output's gradient where it was read."""
  if index.device != src.device: raise RuntimeError(f"take_along: index on {index.device}, source on {src.device}")
  if dtypes.is_float(index.dtype) or index.dtype == dtypes.bool: raise TypeError(f"take_along: index must be an integer tensor, got {index.dtype}")
  if index.ndim != src.ndim or any(a != b for k, (a, b) in enumerate(zip(index.shape, src.shape)) if k != dim):
    raise RuntimeError(f"take_along: index of shape {index.shape} must have the source's shape {src.shape} on every axis but {dim}")
  if src.shape[dim] == 0: raise RuntimeError(f"take_along: nothing to take along axis {dim} of shape {src.shape}")
  return src._new(UOp(Ops.GATHER, src.dtype, (src.uop, index.uop), (dim,)))

def _scatter_parts(x: Tensor, d: int, index: Tensor, src: Any, name: str, last: bool = False) -> tuple[Tensor, Tensor]:
  """(sum of the values sent to each position, whether any value was sent), both of x's shape. With last, only the
  value with the largest index along d counts where an index repeats (what PyTorch's CPU kernels leave there)."""
  from baregrad.tensor.tensor import Tensor
  s = src if isinstance(src, Tensor) else None
  _check_index(name, x, d, index, s)
  n, nd = x.shape[d], x.ndim
  oh = checked(_onehot(index, n), index, 0, n, f"{name}: index {{index}} is out of bounds for dimension {d} with size {n}")  # (*I, n)
  if last and index.shape[d] > 1:
    m = index.shape[d]
    j = Tensor.arange(1, m + 1, device=x.device, dtype=dtypes.int32).reshape((1,) * d + (m,) + (1,) * (nd - d))
    score = oh.where(j, 0)
    oh = oh & score.eq(score.amax(d, keepdim=True))
  if s is None: v = Tensor.full(index.shape, src, dtype=x.dtype, device=x.device)
  else: v = s.cast(x.dtype)._shrink(tuple((0, i) for i in index.shape))
  contrib = oh.where(v.unsqueeze(-1), _zero(v.unsqueeze(-1))).sum(d)  # (*I without d, n)
  hit = oh.any(d)
  order = list(range(nd - 1))
  order.insert(d, nd - 1)
  contrib, hit = contrib.cast(x.dtype).permute(*order), hit.permute(*order)
  pad = tuple((0, 0) if k == d else (0, x.shape[k] - index.shape[k]) for k in range(nd))
  return contrib._pad(pad), hit._pad(pad)

_SCATTER_REDUCES = ("sum", "prod", "mean", "amax", "amin")

class IndexingOps:
  """Gather/scatter-style ops: Tensor methods (x.gather(dim, index), x.scatter_add(dim, index, src))."""
  __slots__ = ()   # (Tensor has slots: a base without them would give every tensor a __dict__)
  def gather(input: Tensor, dim: int, index: Tensor) -> Tensor:
    """out[i][j][k] = input[i][index[i][j][k]][k] (for dim=1): a load at each index (take_along)."""
    x = input
    d = _axis(dim, x.ndim)
    _check_index("gather", x, d, index)
    n = x.shape[d]
    nd = x.ndim
    xs = x._shrink(tuple((0, n) if k == d else (0, index.shape[k]) for k in range(nd)))
    if n > 0 and index.numel() > 0:
      i = (index < 0).where(index + n, index)   # (as the one-hot form counted them; its bounds check still reports them)
      return checked(take_along(xs, i, d), index, 0, n, f"gather: index {{index}} is out of bounds for dimension {d} with size {n}")
    # the gathered axis goes last; the index's own axis d broadcasts over it
    xt = xs.permute(*[k for k in range(nd) if k != d], d).unsqueeze(d)
    oh = checked(_onehot(index, n), index, 0, n, f"gather: index {{index}} is out of bounds for dimension {d} with size {n}")
    if x.dtype == dtypes.bool: return oh.where(xt, False).any(-1)
    return oh.where(xt, _zero(xt)).sum(-1).cast(x.dtype)
  def scatter(input: Tensor, dim: int, index: Tensor, src: Any = None, value: Any = None, reduce: str | None = None) -> Tensor:
    """Out-of-place torch.scatter: out = input with out[..index..] = src. Where an index repeats along dim, the last
    value wins (PyTorch documents that case as undefined; its CPU kernels write in order); reduce='add' is scatter_add."""
    from baregrad.tensor.tensor import Tensor
    if src is None: src = value
    if src is None: raise TypeError("scatter needs src (a tensor) or value (a number)")
    d = _axis(dim, input.ndim)
    if reduce == "add": return IndexingOps.scatter_add(input, d, index, src if isinstance(src, Tensor) else Tensor.full(index.shape, src, dtype=input.dtype,
        device=input.device))
    if reduce == "multiply":
      return IndexingOps.scatter_reduce(input, d, index, src if isinstance(src, Tensor) else Tensor.full(index.shape, src, dtype=input.dtype,
          device=input.device), "prod")
    if reduce is not None: raise RuntimeError(f"scatter: reduce must be 'add' or 'multiply', got {reduce!r}")
    contrib, hit = _scatter_parts(input, d, index, src, "scatter", last=True)
    return hit.where(contrib, input)
  def scatter_add(input: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """Out-of-place torch.scatter_add: out = input, then out[..index..] += src (repeated indices accumulate)."""
    d = _axis(dim, input.ndim)
    contrib, _ = _scatter_parts(input, d, index, src, "scatter_add")
    return input + contrib
  def scatter_reduce(input: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, *, include_self: bool = True) -> Tensor:
    """Out-of-place torch.scatter_reduce: every src value reduced ('sum', 'prod', 'mean', 'amax', 'amin') into the
    position its index names along dim, together with input's value there when include_self. Positions no index names
    keep input. A one-hot compare against the indices and a masked reduction: O(index.numel() * input.shape[dim]).
    'mean' of integers rounds down (floor), as PyTorch's does; amax/amin gradients split ties as max() does."""
    from baregrad.tensor.tensor import Tensor
    if reduce not in _SCATTER_REDUCES: raise RuntimeError(f"scatter_reduce: reduce must be one of {_SCATTER_REDUCES}, got {reduce!r}")
    if not isinstance(src, Tensor): raise TypeError(f"scatter_reduce: src must be a Tensor, got {type(src).__name__}")
    x = input
    d = _axis(dim, x.ndim)
    _check_index("scatter_reduce", x, d, index, src)
    n, nd = x.shape[d], x.ndim
    oh = checked(_onehot(index, n), index, 0, n, f"scatter_reduce: index {{index}} is out of bounds for dimension {d} with size {n}")  # (*I, n)
    v = src.cast(x.dtype)._shrink(tuple((0, i) for i in index.shape)).unsqueeze(-1)
    if reduce in ("sum", "mean"): red = oh.where(v, _zero(v)).sum(d).cast(x.dtype)
    elif reduce == "prod": red = oh.where(v, Tensor.full((), 1, dtype=x.dtype, device=x.device)).prod(d).cast(x.dtype)
    else:
      big = reduce == "amax"
      worst = (-math.inf if big else math.inf) if dtypes.is_float(x.dtype) else (dtypes.min(x.dtype) if big else dtypes.max(x.dtype))
      vv = oh.where(v, Tensor.full((), worst, dtype=x.dtype, device=x.device))
      red = vv.amax(d) if big else vv.amin(d)
    hit, cnt = oh.any(d), oh.cast(dtypes.int32).sum(d)
    order = list(range(nd - 1))
    order.insert(d, nd - 1)
    pad = tuple((0, 0) if k == d else (0, x.shape[k] - index.shape[k]) for k in range(nd))
    red, hit, cnt = (t.permute(*order)._pad(pad) for t in (red, hit, cnt))
    if reduce == "sum": out = x + red if include_self else red
    elif reduce == "prod": out = x * red if include_self else red
    elif reduce == "mean":
      tot, den = (x + red, cnt + 1) if include_self else (red, cnt.maximum(1))
      out = tot / den.cast(x.dtype) if dtypes.is_float(x.dtype) else tot.floor_divide(den.cast(x.dtype))
    else: out = (x.maximum(red) if reduce == "amax" else x.minimum(red)) if include_self else red
    return hit.where(out.cast(x.dtype), x)
  def index_select(input: Tensor, dim: int, index: Tensor) -> Tensor:
    """The slices of input at the positions index (1-D ints) names along dim, in that order (a one-hot gather)."""
    from baregrad.tensor.tensor import Tensor
    if not isinstance(index, Tensor) or index.ndim > 1 or dtypes.is_float(index.dtype) or index.dtype == dtypes.bool:
      raise IndexError(f"index_select: index must be a 0-d or 1-D integer tensor, got "
          f"{index if not isinstance(index, Tensor) else f'{index.dtype} of shape {index.shape}'}")
    d = _axis(dim, input.ndim)
    return input[(slice(None),) * d + (index.reshape(-1),)]
  def repeat_interleave(input: Tensor, repeats: Any, dim: int | None = None, *, output_size: int | None = None) -> Tensor:
    """Repeat each element (each slice along dim; the flattened input when dim is None) repeats times, in place.
    An int repeats is a view (expand + reshape). A tensor of per-element counts has a data-dependent size: its sum is
    read back from the device (a sync) unless output_size gives it; each output slot finds its source by counting the
    running totals at or below it (O(output_size * n) compares)."""
    from baregrad.tensor.tensor import Tensor
    x = input.reshape(-1) if dim is None else input
    d = 0 if dim is None else _axis(dim, x.ndim)
    if x.ndim == 0: x, d = x.reshape(1), 0
    n = x.shape[d]
    if isinstance(repeats, Tensor) and repeats.numel() == 1 and repeats.ndim <= 1 and n != 1: repeats = int(repeats.item())
    if isinstance(repeats, bool) or not isinstance(repeats, (int,
        Tensor)): raise TypeError(f"repeat_interleave: repeats must be an int or a Tensor, got {type(repeats).__name__}")
    if isinstance(repeats, int):
      if repeats < 0: raise RuntimeError(f"repeat_interleave: repeats must be non-negative, got {repeats}")
      s = x.shape
      return x.reshape(s[:d + 1] + (1,) + s[d + 1:]).expand(s[:d + 1] + (repeats,) + s[d + 1:]).reshape(s[:d] + (n * repeats,) + s[d + 1:])
    if repeats.ndim != 1 or repeats.shape[0] != n or dtypes.is_float(repeats.dtype) or repeats.dtype == dtypes.bool:
      raise RuntimeError(f"repeat_interleave: repeats must be a 1-D integer tensor of size {n} (dimension {d} of shape {x.shape}), got "
                         f"{repeats.dtype} of shape {repeats.shape}")
    total = int(repeats.sum().item()) if output_size is None else int(output_size)
    ends = repeats.cast(dtypes.int64).cumsum(0)                                 # running totals: slot p comes from the first i with ends[i] > p
    src = (ends.reshape(1, n) <= Tensor.arange(total, device=x.device, dtype=dtypes.int64).reshape(total, 1)).cast(dtypes.int64).sum(1) \
        if total else Tensor.zeros(0, dtype=dtypes.int64, device=x.device)
    return IndexingOps.index_select(x, d, src)
  def masked_fill(input: Tensor, mask: Tensor, value: Any) -> Tensor:
    """value where mask (bool, broadcast to the input's shape) is True, the input elsewhere."""
    from baregrad.tensor.tensor import Tensor
    if mask.dtype != dtypes.bool: raise TypeError(f"masked_fill: mask must be a bool tensor, got {mask.dtype}")
    v = value.cast(input.dtype) if isinstance(value, Tensor) else Tensor.full((), value, dtype=input.dtype, device=input.device)
    out = mask.where(v, input)
    if out.shape != input.shape: raise RuntimeError(f"masked_fill: mask of shape {mask.shape} does not broadcast to the input shape {input.shape}")
    return out
  def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """int64 (*, num_classes) with 1 at each index (num_classes=-1 reads the maximum back from the device: a sync)."""
    from baregrad.tensor.tensor import Tensor
    if dtypes.is_float(tensor.dtype) or tensor.dtype == dtypes.bool: raise TypeError(f"one_hot is only applicable to index tensors, got {tensor.dtype}")
    if num_classes == -1: num_classes = int(tensor.max().item()) + 1 if tensor.numel() else 0
    out = tensor.unsqueeze(-1).eq(Tensor.arange(num_classes, device=tensor.device, dtype=tensor.dtype)).cast(dtypes.int64)
    return checked(out, tensor, 0, num_classes, f"one_hot: class value {{index}} is out of range for num_classes={num_classes}")
