"""Functional ops on Tensor, with PyTorch's names, arguments and semantics (torch.* and torch.nn.functional.*).

Everything here is composed from Tensor's primitive ops (elementwise, movement, reductions), so it is lazy, fuses
like the rest of the frontend and is differentiable without any hand-written backward. Convolutions and pooling
build their sliding windows with movement ops only (pad, shrink, reshape, expand, permute): no im2col copy.
"""
from __future__ import annotations
import math, struct
from functools import reduce as _fold
from typing import Any, Sequence
from baregrad.helpers import prod
from baregrad.ir.dtype import DType, dtypes, promote
from baregrad.ir.ops import UOp, Ops
from baregrad.tensor.tensor import Tensor, _axis
from baregrad.tensor.bounds import checked
from baregrad.tensor.recipe import function_recipe

__all__ = ["cat", "concat", "concatenate", "stack", "split", "chunk", "repeat", "roll", "tril", "triu", "gather", "scatter",
           "scatter_add", "masked_fill", "diagonal", "diag", "einsum", "where", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
           "max_pool2d", "avg_pool2d", "max_pool1d", "avg_pool1d", "max_pool3d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "interpolate", "dropout", "layer_norm", "batch_norm",
           "group_norm", "rms_norm", "scaled_dot_product_attention", "cross_entropy", "nll_loss", "binary_cross_entropy",
           "binary_cross_entropy_with_logits", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "one_hot", "pad", "scatter_reduce",
           "index_select", "repeat_interleave", "meshgrid", "unfold", "fold", "max_unpool1d", "max_unpool2d", "conv_transpose3d", "normalize",
           "softmin", "softsign", "logsigmoid"]

# ---------------------------------------------------------------- helpers

def _dim(dim: Any, axis: Any, default: Any = 0) -> Any:
  """PyTorch's `dim`, with NumPy's `axis` accepted too."""
  if dim is not None and axis is not None and dim != axis: raise TypeError(f"got both dim={dim} and axis={axis}")
  return dim if dim is not None else axis if axis is not None else default

def _tuple(v: Any, n: int, name: str) -> tuple[int, ...]:
  if isinstance(v, int): return (v,) * n
  v = tuple(int(x) for x in v)
  if len(v) == 1: return v * n
  if len(v) != n: raise RuntimeError(f"{name} must be an int or a tuple of {n} ints, got {v}")
  return v

def _fit(x: Tensor, axis: int, n: int) -> Tensor:
  """x cropped or zero-padded at the end of `axis` to length n."""
  s = x.shape[axis]
  if n == s: return x
  if n < s: return x._shrink(tuple((0, n) if i == axis else (0, d) for i, d in enumerate(x.shape)))
  return x._pad(tuple((0, n - s) if i == axis else (0, 0) for i in range(x.ndim)))

def _pad_crop(x: Tensor, arg: Sequence[tuple[int, int]]) -> Tensor:
  """Pad (positive) or crop (negative) each axis: arg is ((before, after), ...) for the trailing axes."""
  arg = [(0, 0)] * (x.ndim - len(arg)) + list(arg)
  crop = tuple((max(0, -b), s - max(0, -a)) for (b, a), s in zip(arg, x.shape))
  return x._shrink(crop)._pad(tuple((max(0, b), max(0, a)) for b, a in arg))

def _zero(x: Tensor) -> Tensor: return x.zeros_like_uop()

def _reduction(loss: Tensor, reduction: str) -> Tensor:
  if reduction == "mean": return loss.mean()
  if reduction == "sum": return loss.sum()
  if reduction == "none": return loss
  raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")

def _f32(v: float) -> float:
  """v rounded to float32 (index arithmetic the way PyTorch's float kernels do it)."""
  return struct.unpack("f", struct.pack("f", v))[0]

def _onehot(idx: Tensor, n: int) -> Tensor:
  """(*idx.shape, n) bool: idx[...] == k, negative indices counted from the end."""
  i = idx.cast(dtypes.int32)
  i = (i < 0).where(i + n, i)
  return i.unsqueeze(-1).eq(Tensor.arange(n, device=idx.device, dtype=dtypes.int32))

# ---------------------------------------------------------------- joining and splitting

def cat(tensors: Sequence[Tensor], dim: int | None = None, axis: int | None = None) -> Tensor:
  """Concatenate along dim: each piece is zero-padded to the full size and the pieces are added (one fused kernel)."""
  ts = list(tensors)
  if not ts: raise ValueError(f"cat(): tensors must be a non-empty sequence of Tensors, got {tensors!r}")  # PyTorch: ValueError
  for i, t in enumerate(ts):
    if not isinstance(t, Tensor): raise TypeError(f"cat(): element {i} is a {type(t).__name__}, not a Tensor")
  d0 = _dim(dim, axis)
  # PyTorch skips legacy 1-D empty tensors of shape (0,)
  parts = [t for t in ts if not (t.shape == (0,))] or ts[:1]
  ref = parts[0]
  if ref.ndim == 0: raise RuntimeError("cat(): zero-dimensional tensors cannot be concatenated")
  d = _axis(d0, ref.ndim)
  for i, t in enumerate(parts):
    if t.device != ref.device: raise RuntimeError(f"cat(): tensors on different devices: {ref.device} and {t.device}")
    if t.ndim != ref.ndim or any(a != b for k, (a, b) in enumerate(zip(t.shape, ref.shape)) if k != d):
      raise RuntimeError(f"cat(): sizes must match except in dimension {d}: got shapes {[tuple(p.shape) for p in parts]} "
                       f"(shape {t.shape} differs from {ref.shape})")
  dt = _fold(promote, [t.dtype for t in parts])
  total = sum(t.shape[d] for t in parts)
  out, off = None, 0
  for t in parts:
    n = t.shape[d]
    if n == 0: continue
    p = t.cast(dt)._pad(tuple((off, total - off - n) if k == d else (0, 0) for k in range(t.ndim)))
    out = p if out is None else (out | p if dt == dtypes.bool else out + p)
    off += n
  if out is None: out = ref.cast(dt)
  return out

concat = concatenate = cat

def stack(tensors: Sequence[Tensor], dim: int | None = None, axis: int | None = None) -> Tensor:
  """Tensors of one shape joined along a new axis dim."""
  ts = list(tensors)
  if not ts: raise RuntimeError("stack() needs a non-empty sequence of tensors")
  for i, t in enumerate(ts):
    if t.shape != ts[0].shape: raise RuntimeError(f"stack(): every tensor must have the same shape: tensor 0 has {ts[0].shape}, tensor {i} has {t.shape}")
  d = _axis(_dim(dim, axis), ts[0].ndim + 1)
  return cat([t.unsqueeze(d) for t in ts], d)

def split(tensor: Tensor, split_size_or_sections: int | Sequence[int], dim: int | None = None, axis: int | None = None) -> tuple[Tensor, ...]:
  """Pieces of split_size along dim (the last may be smaller), or of the listed sizes; views."""
  d = _axis(_dim(dim, axis), tensor.ndim)
  n = tensor.shape[d]
  if isinstance(split_size_or_sections, int):
    s = split_size_or_sections
    if s <= 0 and not (s == 0 and n == 0): raise RuntimeError(f"split_size must be positive, got {s}")
    sizes = [min(s, n - i) for i in range(0, n, s)] if n else [0]
  else:
    sizes = [int(s) for s in split_size_or_sections]
    if sum(sizes) != n or any(s < 0 for s in sizes): raise RuntimeError(f"split sections {sizes} must be non-negative and sum to the size {n} of dimension {d} (shape {tensor.shape})")
  out, off = [], 0
  for s in sizes:
    out.append(tensor._shrink(tuple((off, off + s) if k == d else (0, sz) for k, sz in enumerate(tensor.shape))))
    off += s
  return tuple(out)

def chunk(tensor: Tensor, chunks: int, dim: int | None = None, axis: int | None = None) -> tuple[Tensor, ...]:
  """chunks pieces along dim of ceil(n / chunks) each (fewer when n is small); views."""
  if chunks <= 0: raise RuntimeError(f"chunk expects chunks > 0, got {chunks}")
  d = _axis(_dim(dim, axis), tensor.ndim)
  n = tensor.shape[d]
  return split(tensor, max(1, -(-n // chunks)), d)

def repeat(tensor: Tensor, *sizes: Any) -> Tensor:
  """torch.Tensor.repeat: tile the tensor (expand + reshape, no copy until used)."""
  reps = tuple(int(s) for s in (sizes[0] if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else sizes))
  if len(reps) < tensor.ndim: raise RuntimeError(f"repeat: {len(reps)} repeat sizes {reps} for a tensor of {tensor.ndim} dimensions (shape {tensor.shape}): need at least {tensor.ndim}")
  if any(r < 0 for r in reps): raise RuntimeError(f"repeat sizes must be non-negative, got {reps}")
  shape = (1,) * (len(reps) - tensor.ndim) + tensor.shape
  x = tensor.reshape(shape)
  if 0 in reps: return Tensor.zeros(*[r * s for r, s in zip(reps, shape)], dtype=tensor.dtype, device=tensor.device)
  x = x.reshape(tuple(v for s in shape for v in (1, s))).expand(tuple(v for r, s in zip(reps, shape) for v in (r, s)))
  return x.reshape(tuple(r * s for r, s in zip(reps, shape)))

def _repeat_axis(x: Tensor, axis: int, times: int) -> Tensor:
  s = x.shape
  return x.reshape(s[:axis] + (1,) + s[axis:]).expand(s[:axis] + (times,) + s[axis:]).reshape(s[:axis] + (times * s[axis],) + s[axis + 1:])

def roll(tensor: Tensor, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
  """Elements shifted by shifts along dims, wrapping around (flattened when dims is None)."""
  if dims is None:
    if not isinstance(shifts, int) and len(shifts) != 1: raise RuntimeError(f"roll without dims takes one shift, got {shifts}")
    return roll(tensor.reshape(-1), shifts if isinstance(shifts, int) else shifts[0], 0).reshape(tensor.shape)
  sh = (shifts,) if isinstance(shifts, int) else tuple(shifts)
  ds = (dims,) if isinstance(dims, int) else tuple(dims)
  if len(sh) != len(ds): raise RuntimeError(f"roll: shifts {sh} and dims {ds} must have the same length")
  x = tensor
  for s, d in zip(sh, ds):
    d = _axis(d, x.ndim)
    n = x.shape[d]
    if n == 0 or s % n == 0: continue
    s %= n
    # two copies end to end, then the window starting at n - s
    x = _repeat_axis(x, d, 2)._shrink(tuple((n - s, 2 * n - s) if k == d else (0, sz) for k, sz in enumerate(x.shape)))
  return x

def _tri_mask(x: Tensor, diagonal: int, lower: bool) -> Tensor:
  if x.ndim < 2: raise RuntimeError(f"tril/triu need a tensor of at least 2 dimensions, got shape {x.shape}")
  n, m = x.shape[-2:]
  diff = Tensor.arange(m, device=x.device, dtype=dtypes.int32).reshape(1, m) - Tensor.arange(n, device=x.device, dtype=dtypes.int32).reshape(n, 1)
  return diff <= diagonal if lower else diff >= diagonal

def tril(tensor: Tensor, diagonal: int = 0) -> Tensor:
  """The lower triangle of the last two axes (on and below diagonal), zeros above."""
  return _tri_mask(tensor, diagonal, True).where(tensor, _zero(tensor))
def triu(tensor: Tensor, diagonal: int = 0) -> Tensor:
  """The upper triangle of the last two axes (on and above diagonal), zeros below."""
  return _tri_mask(tensor, diagonal, False).where(tensor, _zero(tensor))

def _check_index(name: str, x: Tensor, d: int, index: Tensor, src: Tensor | None = None) -> None:
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

def _scatter_parts(x: Tensor, d: int, index: Tensor, src: Any, name: str, last: bool = False) -> tuple[Tensor, Tensor]:
  """(sum of the values sent to each position, whether any value was sent), both of x's shape. With last, only the
  value with the largest index along d counts where an index repeats (what PyTorch's CPU kernels leave there)."""
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

def scatter(input: Tensor, dim: int, index: Tensor, src: Any = None, value: Any = None, reduce: str | None = None) -> Tensor:
  """Out-of-place torch.scatter: out = input with out[..index..] = src. Where an index repeats along dim, the last
  value wins (PyTorch documents that case as undefined; its CPU kernels write in order); reduce='add' is scatter_add."""
  if src is None: src = value
  if src is None: raise TypeError("scatter needs src (a tensor) or value (a number)")
  d = _axis(dim, input.ndim)
  if reduce == "add": return scatter_add(input, d, index, src if isinstance(src, Tensor) else Tensor.full(index.shape, src, dtype=input.dtype, device=input.device))
  if reduce == "multiply":
    return scatter_reduce(input, d, index, src if isinstance(src, Tensor) else Tensor.full(index.shape, src, dtype=input.dtype, device=input.device), "prod")
  if reduce is not None: raise RuntimeError(f"scatter: reduce must be 'add' or 'multiply', got {reduce!r}")
  contrib, hit = _scatter_parts(input, d, index, src, "scatter", last=True)
  return hit.where(contrib, input)

def scatter_add(input: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
  """Out-of-place torch.scatter_add: out = input, then out[..index..] += src (repeated indices accumulate)."""
  d = _axis(dim, input.ndim)
  contrib, _ = _scatter_parts(input, d, index, src, "scatter_add")
  return input + contrib

_SCATTER_REDUCES = ("sum", "prod", "mean", "amax", "amin")

def scatter_reduce(input: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, *, include_self: bool = True) -> Tensor:
  """Out-of-place torch.scatter_reduce: every src value reduced ('sum', 'prod', 'mean', 'amax', 'amin') into the
  position its index names along dim, together with input's value there when include_self. Positions no index names
  keep input. A one-hot compare against the indices and a masked reduction: O(index.numel() * input.shape[dim]).
  'mean' of integers rounds down (floor), as PyTorch's does; amax/amin gradients split ties as max() does."""
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
  if not isinstance(index, Tensor) or index.ndim > 1 or dtypes.is_float(index.dtype) or index.dtype == dtypes.bool:
    raise IndexError(f"index_select: index must be a 0-d or 1-D integer tensor, got {index if not isinstance(index, Tensor) else f'{index.dtype} of shape {index.shape}'}")
  d = _axis(dim, input.ndim)
  return input[(slice(None),) * d + (index.reshape(-1),)]

def repeat_interleave(input: Tensor, repeats: Any, dim: int | None = None, *, output_size: int | None = None) -> Tensor:
  """Repeat each element (each slice along dim; the flattened input when dim is None) repeats times, in place.
  An int repeats is a view (expand + reshape). A tensor of per-element counts has a data-dependent size: its sum is
  read back from the device (a sync) unless output_size gives it; each output slot finds its source by counting the
  running totals at or below it (O(output_size * n) compares)."""
  x = input.reshape(-1) if dim is None else input
  d = 0 if dim is None else _axis(dim, x.ndim)
  if x.ndim == 0: x, d = x.reshape(1), 0
  n = x.shape[d]
  if isinstance(repeats, Tensor) and repeats.numel() == 1 and repeats.ndim <= 1 and n != 1: repeats = int(repeats.item())
  if isinstance(repeats, bool) or not isinstance(repeats, (int, Tensor)): raise TypeError(f"repeat_interleave: repeats must be an int or a Tensor, got {type(repeats).__name__}")
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
  return index_select(x, d, src)

def meshgrid(*tensors: Any, indexing: str = "ij") -> tuple[Tensor, ...]:
  """Coordinate grids from 1-D (or 0-d) tensors: with 'ij' output k varies along axis k; 'xy' swaps the first two
  axes (NumPy's default). Views (reshape + expand), no copies."""
  ts = list(tensors[0]) if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else list(tensors)
  if indexing not in ("ij", "xy"): raise RuntimeError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
  if not ts: raise RuntimeError("meshgrid: expects a non-empty list of tensors")
  for i, t in enumerate(ts):
    if not isinstance(t, Tensor): raise TypeError(f"meshgrid: element {i} is a {type(t).__name__}, not a Tensor")
    if t.ndim > 1: raise RuntimeError(f"meshgrid: expects 0-d or 1-D tensors, got tensor {i} of shape {t.shape}")
    if t.dtype != ts[0].dtype or t.device != ts[0].device:
      raise RuntimeError(f"meshgrid: expects all tensors to have the same dtype and device: tensor {i} is {t.dtype} on {t.device}, tensor 0 {ts[0].dtype} on {ts[0].device}")
  flat = [t.reshape(-1) for t in ts]
  swap = indexing == "xy" and len(flat) >= 2
  if swap: flat[0], flat[1] = flat[1], flat[0]
  shape = tuple(t.shape[0] for t in flat)
  out = [t.reshape(tuple(-1 if k == i else 1 for k in range(len(flat)))).expand(shape) for i, t in enumerate(flat)]
  if swap: out[0], out[1] = out[1], out[0]
  return tuple(out)

def unfold_dim(input: Tensor, dimension: int, size: int, step: int) -> Tensor:
  """Tensor.unfold: every window of size elements along dimension, step apart, as a new last axis (a view)."""
  d = _axis(dimension, input.ndim)
  n = input.shape[d] if input.ndim else 1
  if not isinstance(size, int) or size < 0 or size > n:
    raise RuntimeError(f"unfold: maximum size for tensor at dimension {d} is {n} but size is {size}")
  if not isinstance(step, int) or step <= 0: raise RuntimeError(f"unfold: step is {step} but must be > 0")
  x = input.reshape(1) if input.ndim == 0 else input
  xt = x.transpose(d, -1) if d != x.ndim - 1 else x
  o = (n - size) // step + 1
  if size == 0: w = xt._shrink(tuple((0, s) for s in xt.shape[:-1]) + ((0, 0),)).unsqueeze(-2).expand(xt.shape[:-1] + (o, 0))
  else: w = _pool(xt, (size,), (step,), (1,))                                # (..., o, size)
  if d != x.ndim - 1: w = w.transpose(d, -2)
  return w.reshape(size) if input.ndim == 0 else w

def unfold(input: Tensor, kernel_size: Any, dilation: Any = 1, padding: Any = 0, stride: Any = 1) -> Tensor:
  """torch.nn.functional.unfold (im2col): sliding blocks of a (N, C, H, W) or (C, H, W) input as columns,
  (N, C * kh * kw, L) with L the number of blocks; built from movement ops (no copy until used)."""
  x = input
  if x.ndim not in (3, 4): raise RuntimeError(f"unfold: input must be 3-D (C, H, W) or 4-D (N, C, H, W), got shape {x.shape}")
  unbatched = x.ndim == 3
  if unbatched: x = x.unsqueeze(0)
  k_, d_, p_, s_ = (_tuple(v, 2, nm) for v, nm in ((kernel_size, "kernel_size"), (dilation, "dilation"), (padding, "padding"), (stride, "stride")))
  if any(v <= 0 for v in k_ + d_ + s_) or any(v < 0 for v in p_):
    raise RuntimeError(f"unfold: kernel_size {k_}, dilation {d_} and stride {s_} must be positive and padding {p_} non-negative")
  N, C = x.shape[:2]
  xp = x._pad(((0, 0), (0, 0)) + tuple((p, p) for p in p_))
  win = _pool(xp, k_, s_, d_)                                              # (N, C, oh, ow, kh, kw)
  oh, ow = win.shape[2:4]
  out = win.permute(0, 1, 4, 5, 2, 3).reshape(N, C * k_[0] * k_[1], oh * ow)
  return out.squeeze(0) if unbatched else out

def fold(input: Tensor, output_size: Any, kernel_size: Any, dilation: Any = 1, padding: Any = 0, stride: Any = 1) -> Tensor:
  """torch.nn.functional.fold (col2im), the adjoint of unfold: columns (N, C * kh * kw, L) summed back into a
  (N, C, H, W) image where blocks overlap. Each kernel offset is a strided placement (pad + reshape) of its column."""
  x = input
  if x.ndim not in (2, 3): raise RuntimeError(f"fold: input must be 2-D or 3-D (N, C * kh * kw, L), got shape {x.shape}")
  unbatched = x.ndim == 2
  if unbatched: x = x.unsqueeze(0)
  o_, k_, d_, p_, s_ = (_tuple(v, 2, nm) for v, nm in ((output_size, "output_size"), (kernel_size, "kernel_size"), (dilation, "dilation"),
                                                      (padding, "padding"), (stride, "stride")))
  N, CK, L = x.shape
  K = k_[0] * k_[1]
  if CK % K: raise RuntimeError(f"fold: expected size of input's dimension 1 ({CK}) to be divisible by the product of kernel_size {k_} ({K})")
  H, W = o_[0] + 2 * p_[0], o_[1] + 2 * p_[1]
  bh, bw = (H - d_[0] * (k_[0] - 1) - 1) // s_[0] + 1, (W - d_[1] * (k_[1] - 1) - 1) // s_[1] + 1
  if bh * bw != L: raise RuntimeError(f"fold: expected L={bh * bw} blocks for output_size {o_}, kernel {k_}, dilation {d_}, padding {p_}, stride {s_}; got {L}")
  C = CK // K
  cols = x.reshape(N, C, k_[0], k_[1], bh, bw)
  out = None
  for i in range(k_[0]):
    for j in range(k_[1]):
      c = cols[:, :, i, j]                                                   # (N, C, bh, bw)
      # spread by the stride: (bh, bw) -> (bh * sh, bw * sw), then shift by the kernel offset times the dilation
      c = c.reshape(N, C, bh, 1, bw, 1)._pad(((0, 0), (0, 0), (0, 0), (0, s_[0] - 1), (0, 0), (0, s_[1] - 1))).reshape(N, C, bh * s_[0], bw * s_[1])
      c = _pad_crop(c, [(i * d_[0], H - i * d_[0] - bh * s_[0]), (j * d_[1], W - j * d_[1] - bw * s_[1])])
      out = c if out is None else out + c
  assert out is not None
  out = out._shrink(((0, N), (0, C), (p_[0], p_[0] + o_[0]), (p_[1], p_[1] + o_[1])))
  return out.squeeze(0) if unbatched else out

def _max_unpool(x: Tensor, indices: Tensor, kernel_size: Any, stride: Any, padding: Any, output_size: Any, nsp: int, name: str) -> Tensor:
  if not isinstance(indices, Tensor) or dtypes.is_float(indices.dtype) or indices.dtype == dtypes.bool:
    raise TypeError(f"{name}: indices must be an integer tensor, got {indices.dtype if isinstance(indices, Tensor) else type(indices).__name__}")
  if x.ndim not in (nsp + 1, nsp + 2): raise RuntimeError(f"{name}: input must have {nsp + 1} or {nsp + 2} dimensions, got shape {x.shape}")
  if indices.shape != x.shape: raise RuntimeError(f"{name}: indices of shape {indices.shape} must have the input's shape {x.shape}")
  k_ = _tuple(kernel_size, nsp, "kernel_size")
  s_ = k_ if stride is None else _tuple(stride, nsp, "stride")
  p_ = _tuple(padding, nsp, "padding")
  i_ = x.shape[-nsp:]
  if output_size is None: o_ = tuple((i - 1) * s - 2 * p + k for i, k, s, p in zip(i_, k_, s_, p_))
  else:
    o_ = tuple(int(v) for v in output_size)[-nsp:]
    if len(o_) != nsp: raise ValueError(f"{name}: output_size {tuple(output_size)} must name {nsp} spatial sizes")
  lead = x.shape[:-nsp]
  xf, idx = x.reshape(lead + (prod(i_),)), indices.reshape(lead + (prod(i_),))
  base = Tensor.zeros(*lead, prod(o_), dtype=x.dtype, device=x.device)
  out = scatter(base, -1, idx, xf.detach())
  if xf.requires_grad:
    # PyTorch's gradient is grad_output gathered at the indices, for every input, duplicates included: the adjoint of
    # scatter_add, added here as a term that is exactly 0 in the forward
    xs = xf.isfinite().where(xf, 0.0)
    out = out + (scatter_add(base, -1, idx, xs) - scatter_add(base, -1, idx, xs.detach()))
  return out.reshape(lead + o_)

def max_unpool1d(input: Tensor, indices: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, output_size: Any = None) -> Tensor:
  """Inverse of max_pool1d(return_indices=True): each value written at its index in a zero (N, C, L_out) tensor."""
  return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 1, "max_unpool1d")

def max_unpool2d(input: Tensor, indices: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, output_size: Any = None) -> Tensor:
  """Inverse of max_pool2d(return_indices=True): each value written at its flat index in a zero (N, C, H_out, W_out) tensor."""
  return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 2, "max_unpool2d")

def masked_fill(input: Tensor, mask: Tensor, value: Any) -> Tensor:
  """value where mask (bool, broadcast to the input's shape) is True, the input elsewhere."""
  if mask.dtype != dtypes.bool: raise TypeError(f"masked_fill: mask must be a bool tensor, got {mask.dtype}")
  v = value.cast(input.dtype) if isinstance(value, Tensor) else Tensor.full((), value, dtype=input.dtype, device=input.device)
  out = mask.where(v, input)
  if out.shape != input.shape: raise RuntimeError(f"masked_fill: mask of shape {mask.shape} does not broadcast to the input shape {input.shape}")
  return out

def diagonal(input: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
  """The diagonal of dims (dim1, dim2) as a new last axis (a view: shrink, reshape, pad)."""
  x = input
  a, b = _axis(dim1, x.ndim), _axis(dim2, x.ndim)
  if a == b: raise RuntimeError(f"diagonal: dim1 and dim2 are the same dimension {a}")
  x = x.permute(*[k for k in range(x.ndim) if k not in (a, b)], a, b)
  n, m = x.shape[-2:]
  lo_r, lo_c = (0, offset) if offset >= 0 else (-offset, 0)
  L = max(0, min(n - lo_r, m - lo_c))
  pre = x.shape[:-2]
  if L == 0: return x._shrink(tuple((0, s) for s in pre) + ((0, 0), (0, 0))).reshape(pre + (0,))
  x = x._shrink(tuple((0, s) for s in pre) + ((lo_r, lo_r + L), (lo_c, lo_c + L)))
  # elements k*(L+1) of the flattened square: pad to L*(L+1), rows of L+1, first column
  x = x.reshape(pre + (L * L,))._pad(((0, 0),) * len(pre) + ((0, L),)).reshape(pre + (L, L + 1))
  return x._shrink(tuple((0, s) for s in pre) + ((0, L), (0, 1))).reshape(pre + (L,))

def diag(input: Tensor, diagonal: int = 0) -> Tensor:
  """A 1-D tensor's values on a square matrix's diagonal (offset by diagonal), or a 2-D tensor's diagonal."""
  if input.ndim == 2: return globals()["diagonal"](input, diagonal, 0, 1)
  if input.ndim != 1: raise RuntimeError(f"diag needs a 1-D or 2-D tensor, got shape {input.shape}")
  n = input.shape[0]
  eye = Tensor.arange(n, device=input.device, dtype=dtypes.int32)
  sq = eye.reshape(n, 1).eq(eye.reshape(1, n)).where(input.reshape(1, n), _zero(input.reshape(1, n)))
  k = abs(diagonal)
  return sq._pad(((0, k), (k, 0)) if diagonal >= 0 else ((k, 0), (0, k)))

def einsum(equation: str, *operands: Any) -> Tensor:
  """General einsum: repeated indices take diagonals, then every operand is permuted to one letter order and
  broadcast, multiplied, and the contracted letters (placed last) are summed."""
  ops = list(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) else list(operands)
  eq = equation.replace(" ", "")
  lhs, rhs = (eq.split("->") + [None])[:2] if "->" in eq else (eq, None)
  terms = lhs.split(",")
  if len(terms) != len(ops): raise RuntimeError(f"einsum {equation!r}: {len(terms)} operand terms but {len(ops)} tensors given")
  used = set(c for c in eq if c.isalpha())
  free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in used]
  ell_nd = 0
  for t, x in zip(terms, ops):
    if "..." in t: ell_nd = max(ell_nd, x.ndim - (len(t) - 3))
  ell = "".join(free[:ell_nd])
  norm: list[str] = []
  for i, (t, x) in enumerate(zip(terms, ops)):
    if "..." in t:
      k = x.ndim - (len(t) - 3)
      if k < 0: raise RuntimeError(f"einsum {equation!r}: operand {i} has {x.ndim} dimensions (shape {x.shape}), fewer than term {t!r} names")
      t = t.replace("...", ell[ell_nd - k:])
    if not all(c.isalpha() for c in t): raise RuntimeError(f"einsum {equation!r}: invalid subscript in {t!r}")
    if len(t) != x.ndim: raise RuntimeError(f"einsum {equation!r}: term {t!r} names {len(t)} dimensions but operand {i} has shape {x.shape}")
    norm.append(t)
  if rhs is None:
    counts: dict[str, int] = {}
    for t in norm:
      for c in t: counts[c] = counts.get(c, 0) + 1
    rhs = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
  else:
    rhs = rhs.replace("...", ell)
    if not all(c.isalpha() for c in rhs) or len(set(rhs)) != len(rhs): raise RuntimeError(f"einsum {equation!r}: invalid output subscripts {rhs!r}")
  # repeated letters within one operand: take the diagonal
  xs: list[Tensor] = []
  for t, x in zip(norm, ops):
    while len(set(t)) != len(t):
      c = next(c for c in t if t.count(c) > 1)
      p = t.index(c); q = t.index(c, p + 1)
      if x.shape[p] != x.shape[q]: raise RuntimeError(f"einsum {equation!r}: subscript {c!r} repeated with sizes {x.shape[p]} and {x.shape[q]}")
      x = diagonal(x, 0, p, q)
      t = "".join(ch for k, ch in enumerate(t) if k not in (p, q)) + c
    xs.append(x); norm_t = t
    norm[len(xs) - 1] = norm_t
  sizes: dict[str, int] = {}
  for t, x in zip(norm, xs):
    for c, s in zip(t, x.shape):
      if c in sizes and sizes[c] != s and 1 not in (sizes[c], s):
        raise RuntimeError(f"einsum {equation!r}: subscript {c!r} has size {sizes[c]} in one operand and {s} in another")
      sizes[c] = max(sizes.get(c, s), s) if 1 in (sizes.get(c, s), s) else s
  for c in rhs:
    if c not in sizes: raise RuntimeError(f"einsum {equation!r}: output subscript {c!r} appears in no input")
  contracted = [c for t in norm for c in t if c not in rhs]
  order = list(rhs) + list(dict.fromkeys(contracted))
  aligned = []
  for t, x in zip(norm, xs):
    mine = [c for c in order if c in t]
    x = x.permute(*[t.index(c) for c in mine]) if mine else x
    aligned.append(x.reshape(tuple(x.shape[mine.index(c)] if c in t else 1 for c in order) if order else ()))
  out = aligned[0]
  for a in aligned[1:]: out = out * a
  full = tuple(sizes[c] for c in order)
  if out.shape != full: out = out.expand(full)
  dt = out.dtype
  nc = len(order) - len(rhs)
  if nc: out = out.sum(tuple(range(len(rhs), len(order))))
  return out.cast(dt)

def where(condition: Tensor, input: Any, other: Any) -> Tensor:
  """input where condition (bool) is True, other elsewhere; the three broadcast and input/other promote."""
  if not isinstance(condition, Tensor): raise TypeError(f"where: condition must be a Tensor, got {type(condition).__name__}")
  return condition.where(input, other)

def pad(input: Tensor, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> Tensor:
  """torch.nn.functional.pad: pad is (left, right) for the last axis, then the one before, ...; mode 'constant',
  'reflect', 'replicate' or 'circular' (the last three built from slices, flips and expands joined with cat)."""
  if mode == "constant": return input.pad(pad, "constant", 0.0 if value is None else value)
  if mode not in ("reflect", "replicate", "circular"): raise NotImplementedError(f"pad: unrecognised padding mode {mode!r}: expected 'constant', 'reflect', 'replicate' or 'circular'")
  if value is not None: raise RuntimeError(f"pad: padding mode {mode!r} doesn't take in value argument (got value={value})")
  if len(pad) % 2 or len(pad) // 2 > input.ndim: raise RuntimeError(f"pad {tuple(pad)} must have an even length of at most 2*{input.ndim}")
  x = input
  for i in range(len(pad) // 2):
    ax, (b, a) = x.ndim - 1 - i, (int(pad[2 * i]), int(pad[2 * i + 1]))
    if b == 0 and a == 0: continue
    n = x.shape[ax]
    def sl(lo: int, hi: int) -> Tensor: return x._shrink(tuple((lo, hi) if k == ax else (0, sz) for k, sz in enumerate(x.shape)))
    if min(b, a) < 0:  # negative padding crops first
      x = sl(max(0, -b), n - max(0, -a)); b, a, n = max(b, 0), max(a, 0), x.shape[ax]
    if mode == "reflect":
      if b >= n or a >= n: raise RuntimeError(f"pad: reflect padding ({b}, {a}) must be smaller than the size {n} of dimension {ax} (shape {input.shape})")
      parts = [sl(1, b + 1).flip(ax), x, sl(n - 1 - a, n - 1).flip(ax)]
    elif mode == "replicate":
      if n == 0: raise RuntimeError(f"pad: replicate padding of an empty dimension {ax} (shape {input.shape})")
      def edge(k: int, cnt: int) -> Tensor:
        e = sl(k, k + 1)
        return e.expand(tuple(cnt if j == ax else sz for j, sz in enumerate(e.shape)))
      parts = [edge(0, b), x, edge(n - 1, a)]
    else:
      if b > n or a > n: raise RuntimeError(f"pad: circular padding ({b}, {a}) must be at most the size {n} of dimension {ax} (shape {input.shape})")
      parts = [sl(n - b, n), x, sl(0, a)]
    x = cat([p for p in parts if p.shape[ax] > 0], ax)
  return x

# ---------------------------------------------------------------- convolution and pooling

def _pool(x: Tensor, k_: tuple[int, ...], s_: tuple[int, ...], d_: tuple[int, ...]) -> Tensor:
  """Sliding windows over the last len(k_) axes: (*prefix, *i_) -> (*prefix, *o_, *k_), with movement ops only."""
  nk = len(k_)
  prefix, i_ = x.shape[:-nk], x.shape[-nk:]
  o_ = tuple((i - d * (k - 1) - 1) // s + 1 for i, k, s, d in zip(i_, k_, s_, d_))
  if any(o <= 0 for o in o_):
    raise RuntimeError(f"window {k_} (dilation {d_}) is larger than the padded input {i_}: output size would be {o_}")
  npf = len(prefix)
  noop = tuple((0, p) for p in prefix)
  if all(k <= s for k, s in zip(k_, s_)) and all(d == 1 for d in d_):
    # windows do not overlap: crop (or pad) each axis to o*s, split it into (o, s), keep the first k of each s
    for j, (o, s) in enumerate(zip(o_, s_)): x = _fit(x, npf + j, o * s)
    x = x.reshape(prefix + tuple(v for o, s in zip(o_, s_) for v in (o, s)))
    x = x._shrink(noop + tuple(v for o, k in zip(o_, k_) for v in ((0, o), (0, k))))
    return x.permute(*range(npf), *[npf + 2 * j for j in range(nk)], *[npf + 2 * j + 1 for j in range(nk)])
  # overlapping or dilated windows: repeat each axis e times, view it as rows of i+d (row j starts at j*d), then
  # take every s-th position of each row
  e_ = tuple(-(-k * (i + d) // i) for k, i, d in zip(k_, i_, d_))
  x = x.reshape(prefix + tuple(v for i in i_ for v in (1, i))).expand(prefix + tuple(v for e, i in zip(e_, i_) for v in (e, i)))
  x = x.reshape(prefix + tuple(e * i for e, i in zip(e_, i_)))
  x = x._shrink(noop + tuple((0, k * (i + d)) for k, i, d in zip(k_, i_, d_)))
  x = x.reshape(prefix + tuple(v for k, i, d in zip(k_, i_, d_) for v in (k, i + d)))
  for j, (o, s) in enumerate(zip(o_, s_)): x = _fit(x, npf + 2 * j + 1, o * s)
  x = x.reshape(prefix + tuple(v for k, o, s in zip(k_, o_, s_) for v in (k, o, s)))
  x = x._shrink(noop + tuple(v for k, o in zip(k_, o_) for v in ((0, k), (0, o), (0, 1))))
  x = x.reshape(prefix + tuple(v for k, o in zip(k_, o_) for v in (k, o)))
  return x.permute(*range(npf), *[npf + 2 * j + 1 for j in range(nk)], *[npf + 2 * j for j in range(nk)])

def _conv_padding(padding: Any, k_: tuple[int, ...], d_: tuple[int, ...], s_: tuple[int, ...], name: str) -> list[tuple[int, int]]:
  n = len(k_)
  if isinstance(padding, str):
    if padding == "valid": return [(0, 0)] * n
    if padding == "same":
      if any(s != 1 for s in s_): raise RuntimeError(f"{name}: padding='same' is not supported for strided convolutions (stride={s_})")
      tot = [d * (k - 1) for k, d in zip(k_, d_)]
      return [(t // 2, t - t // 2) for t in tot]
    raise RuntimeError(f"{name}: padding must be 'valid', 'same', an int or a tuple, got {padding!r}")
  p = _tuple(padding, n, "padding")
  if any(v < 0 for v in p): raise RuntimeError(f"{name}: negative padding {p}")
  return [(v, v) for v in p]

def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
  """2-D convolution (cross-correlation, as PyTorch). Pad, take sliding windows with movement ops, multiply by the
  weight and sum over (in-channels, kh, kw): one fused kernel (bias included) when the result is what is realized."""
  return _convnd(input, weight, bias, stride, padding, dilation, groups, 2, "conv2d")

@function_recipe("convnd")   # (also the convolution inside a transposed one)
def _convnd(x: Tensor, w: Tensor, bias: Tensor | None, stride: Any, padding: Any, dilation: Any, groups: int, nsp: int, name: str) -> Tensor:
  if w.ndim != nsp + 2: raise RuntimeError(f"{name}: weight must have {nsp + 2} dimensions (out_channels, in_channels/groups, *kernel), got shape {w.shape}")
  unbatched = x.ndim == nsp + 1
  if unbatched: x = x.unsqueeze(0)
  if x.ndim != nsp + 2: raise RuntimeError(f"{name}: input must have {nsp + 1} or {nsp + 2} dimensions, got shape {x.shape}")
  if groups < 1: raise RuntimeError(f"{name}: groups must be positive, got {groups}")
  N, C = x.shape[:2]
  Cout, Cg = w.shape[:2]
  k_ = w.shape[2:]
  if C != Cg * groups:
    raise RuntimeError(f"{name}: input of shape {x.shape} has {C} channels but weight of shape {w.shape} with groups={groups} expects {Cg * groups} (= {Cg} x {groups})")
  if Cout % groups: raise RuntimeError(f"{name}: out_channels {Cout} (weight shape {w.shape}) is not divisible by groups={groups}")
  if bias is not None and bias.shape != (Cout,): raise RuntimeError(f"{name}: bias must have shape ({Cout},), got {bias.shape}")
  s_, d_ = _tuple(stride, nsp, "stride"), _tuple(dilation, nsp, "dilation")
  if any(v <= 0 for v in s_ + d_): raise RuntimeError(f"{name}: stride {s_} and dilation {d_} must be positive")
  pads = _conv_padding(padding, k_, d_, s_, name)
  x = x._pad(((0, 0), (0, 0)) + tuple(pads))
  win = _pool(x, k_, s_, d_)                                   # (N, C, *o, *k)
  o_ = win.shape[2:2 + nsp]
  G, Cog = groups, Cout // groups
  # (N, G, 1, *o, Cg, *k): the channel axis moves on the input side, so the reduction's result needs no permute
  win = win.reshape((N, G, 1, Cg) + o_ + k_).permute(0, 1, 2, *range(4, 4 + nsp), 3, *range(4 + nsp, 4 + 2 * nsp))
  wr = w.reshape((1, G, Cog) + (1,) * nsp + (Cg,) + k_)
  red = tuple(range(3 + nsp, 4 + 2 * nsp))
  if promote(win.dtype, wr.dtype) in (dtypes.float16, dtypes.bfloat16):
    # products and sums in float32, one rounding at the end, as PyTorch's half/bfloat16 convolutions accumulate
    out = (win.float() * wr.float()).sum(red).cast(promote(win.dtype, wr.dtype)).reshape((N, Cout) + o_)
  else: out = (win * wr).sum(red).reshape((N, Cout) + o_)
  # elementwise work on the reshaped reduction (bias, an activation after) fuses into the same kernel
  if bias is not None: out = out + bias.reshape((1, Cout) + (1,) * nsp)
  return out.squeeze(0) if unbatched else out

def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
  """1-D convolution (cross-correlation): (N, C_in, L) with weight (C_out, C_in/groups, k) -> (N, C_out, L')."""
  if weight.ndim != 3: raise RuntimeError(f"conv1d: weight must have 3 dimensions (out_channels, in_channels/groups, k), got shape {weight.shape}")
  if input.ndim not in (2, 3): raise RuntimeError(f"conv1d: input must have 2 or 3 dimensions, got shape {input.shape}")
  return _convnd(input, weight, bias, stride, padding, dilation, groups, 1, "conv1d")

def conv3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
  """3-D convolution: (N, C_in, D, H, W) with weight (C_out, C_in/groups, kd, kh, kw) -> (N, C_out, D', H', W')."""
  return _convnd(input, weight, bias, stride, padding, dilation, groups, 3, "conv3d")

def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0, output_padding: Any = 0,
                     groups: int = 1, dilation: Any = 1) -> Tensor:
  """Transposed convolution: spread the input with stride-1 zeros between elements, pad by dilation*(k-1)-padding,
  and run conv2d with the flipped, in/out-swapped weight."""
  return _conv_transposend(input, weight, bias, stride, padding, output_padding, groups, dilation, 2, "conv_transpose2d")

def conv_transpose1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0, output_padding: Any = 0,
                     groups: int = 1, dilation: Any = 1) -> Tensor:
  """1-D transposed convolution: (N, C_in, L) with weight (C_in, C_out/groups, k) -> (N, C_out, L')."""
  return _conv_transposend(input, weight, bias, stride, padding, output_padding, groups, dilation, 1, "conv_transpose1d")

def conv_transpose3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0, output_padding: Any = 0,
                     groups: int = 1, dilation: Any = 1) -> Tensor:
  """3-D transposed convolution: (N, C_in, D, H, W) with weight (C_in, C_out/groups, kd, kh, kw) -> (N, C_out, D', H', W')."""
  return _conv_transposend(input, weight, bias, stride, padding, output_padding, groups, dilation, 3, "conv_transpose3d")

def _conv_transposend(x: Tensor, w: Tensor, bias: Tensor | None, stride: Any, padding: Any, output_padding: Any, groups: int, dilation: Any,
                      nsp: int, name: str) -> Tensor:
  if w.ndim != nsp + 2: raise RuntimeError(f"{name}: weight must have {nsp + 2} dimensions (in_channels, out_channels/groups, *kernel), got shape {w.shape}")
  unbatched = x.ndim == nsp + 1
  if unbatched: x = x.unsqueeze(0)
  if x.ndim != nsp + 2: raise RuntimeError(f"{name}: input must have {nsp + 1} or {nsp + 2} dimensions, got shape {x.shape}")
  Cin, Cog = w.shape[:2]
  k_ = w.shape[2:]
  if x.shape[1] != Cin: raise RuntimeError(f"{name}: input of shape {x.shape} has {x.shape[1]} channels but weight of shape {w.shape} expects {Cin}")
  if Cin % groups: raise RuntimeError(f"{name}: in_channels {Cin} (weight shape {w.shape}) is not divisible by groups={groups}")
  s_, d_ = _tuple(stride, nsp, "stride"), _tuple(dilation, nsp, "dilation")
  p_, op_ = _tuple(padding, nsp, "padding"), _tuple(output_padding, nsp, "output_padding")
  for op, s, d in zip(op_, s_, d_):
    if op >= max(s, d): raise RuntimeError(f"{name}: output_padding {op_} must be smaller than stride {s_} or dilation {d_}")
  N, i_ = x.shape[0], x.shape[2:]
  # zeros between the elements: (i) -> (i, 1) padded to (i, s) -> (i*s) cropped to (i-1)*s+1
  if any(s > 1 for s in s_):
    x = x.reshape((N, Cin) + tuple(v for i in i_ for v in (i, 1)))
    x = x._pad(((0, 0), (0, 0)) + tuple(v for s in s_ for v in ((0, 0), (0, s - 1))))
    x = x.reshape((N, Cin) + tuple(i * s for i, s in zip(i_, s_)))
    x = x._shrink(((0, N), (0, Cin)) + tuple((0, (i - 1) * s + 1) for i, s in zip(i_, s_)))
  x = _pad_crop(x, [(d * (k - 1) - p, d * (k - 1) - p + op) for k, d, p, op in zip(k_, d_, p_, op_)])
  G, Cig = groups, Cin // groups
  wt = w.reshape((G, Cig, Cog) + k_).transpose(1, 2).reshape((G * Cog, Cig) + k_).flip(*range(2, 2 + nsp))
  out = _convnd(x, wt, bias, 1, 0, d_, groups, nsp, name)
  return out.squeeze(0) if unbatched else out

def _pool_args(x: Tensor, kernel_size: Any, stride: Any, padding: Any, dilation: Any, ceil_mode: bool, nsp: int, name: str):
  if x.ndim not in (nsp + 1, nsp + 2): raise RuntimeError(f"{name}: input must have {nsp + 1} or {nsp + 2} dimensions, got shape {x.shape}")
  k_ = _tuple(kernel_size, nsp, "kernel_size")
  s_ = k_ if stride is None or (not isinstance(stride, int) and len(stride) == 0) else _tuple(stride, nsp, "stride")
  p_, d_ = _tuple(padding, nsp, "padding"), _tuple(dilation, nsp, "dilation")
  if any(v <= 0 for v in k_ + s_ + d_): raise RuntimeError(f"{name}: kernel_size {k_}, stride {s_} and dilation {d_} must be positive")
  for k, p, d in zip(k_, p_, d_):
    if p < 0 or p > (d * (k - 1) + 1) // 2: raise RuntimeError(f"{name}: padding {p_} must be non-negative and at most half the effective kernel size {k_}")
  i_ = x.shape[-nsp:]
  o_ = []
  for i, k, s, p, d in zip(i_, k_, s_, p_, d_):
    num = i + 2 * p - d * (k - 1) - 1
    o = (-(-num // s) if ceil_mode else num // s) + 1
    if ceil_mode and (o - 1) * s >= i + p: o -= 1
    if o <= 0: raise RuntimeError(f"{name}: input of shape {x.shape} is too small for kernel {k_}, padding {p_}, dilation {d_}: output size {o}")
    o_.append(o)
  # extra right padding so the last (ceil_mode) window fits
  extra = [max(0, (o - 1) * s + d * (k - 1) + 1 - (i + 2 * p)) for o, i, k, s, p, d in zip(o_, i_, k_, s_, p_, d_)]
  return k_, s_, p_, d_, tuple(o_), extra

@function_recipe("max_pool2d")
def max_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = False) -> Tensor:
  """Max over sliding windows of the last two axes: (N, C, H, W) -> (N, C, H', W'); return_indices gives PyTorch's flat indices too."""
  return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 2, "max_pool2d")

@function_recipe("max_pool1d")
def max_pool1d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = False) -> Tensor:
  """Max over sliding windows of the last axis: (N, C, L) -> (N, C, L'); return_indices gives PyTorch's flat indices too."""
  return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 1, "max_pool1d")

def max_pool3d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = False) -> Tensor:
  """Max over sliding windows of the last three axes: (N, C, D, H, W) -> (N, C, D', H', W')."""
  return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 3, "max_pool3d")

def avg_pool3d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:
  """Mean over sliding windows of the last three axes: (N, C, D, H, W) -> (N, C, D', H', W')."""
  return _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 3, "avg_pool3d")

def _max_pool(x: Tensor, kernel_size, stride, padding, dilation, ceil_mode, return_indices, nsp, name) -> Any:
  k_, s_, p_, d_, o_, extra = _pool_args(x, kernel_size, stride, padding, dilation, ceil_mode, nsp, name)
  fill = -math.inf if dtypes.is_float(x.dtype) else dtypes.min(x.dtype)
  flat = [v for p, e in zip(reversed(p_), reversed(extra)) for v in (p, p + e)]
  xp = x.pad(flat, value=fill) if any(flat) else x
  win = _pool(xp, k_, s_, d_)
  out = win.amax(tuple(range(-nsp, 0)))
  if not return_indices: return out
  # the flat spatial position of each window's first maximum (PyTorch's indices, for max_unpool)
  i_, K = x.shape[-nsp:], prod(k_)
  pos = Tensor.arange(prod(i_), device=x.device, dtype=dtypes.int32).reshape(i_)
  posw = _pool(pos.pad(flat, value=-1) if any(flat) else pos, k_, s_, d_).reshape(o_ + (K,))
  am = win.reshape(win.shape[:-nsp] + (K,)).argmax(-1)
  idx = _onehot(am, K).where(posw, 0).sum(-1)
  return out, idx.cast(dtypes.int64)

@function_recipe("avg_pool2d")
def avg_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:
  """Mean over sliding windows of the last two axes: (N, C, H, W) -> (N, C, H', W')."""
  return _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 2, "avg_pool2d")

@function_recipe("avg_pool1d")
def avg_pool1d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False, count_include_pad: bool = True) -> Tensor:
  """Mean over sliding windows of the last axis: (N, C, L) -> (N, C, L')."""
  return _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, None, 1, "avg_pool1d")

def _avg_pool(x: Tensor, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, nsp, name) -> Tensor:
  k_, s_, p_, d_, o_, extra = _pool_args(x, kernel_size, stride, padding, 1, ceil_mode, nsp, name)
  x = x._float()
  pads = tuple((p, p + e) for p, e in zip(p_, extra))
  win = _pool(x._pad(((0, 0),) * (x.ndim - nsp) + pads), k_, s_, d_)
  total = win.sum(tuple(range(-nsp, 0)))
  if divisor_override is not None: return total / divisor_override
  if not any(extra) and (count_include_pad or not any(p_)): return total / prod(k_)
  # a window's divisor: how many of its positions lie in the input (or in the padded input, count_include_pad)
  i_ = x.shape[-nsp:]
  if count_include_pad: ones = Tensor.full(tuple(i + 2 * p for i, p in zip(i_, p_)), 1.0, device=x.device)._pad(tuple((0, e) for e in extra))
  else: ones = Tensor.full(i_, 1.0, device=x.device)._pad(pads)
  div = _pool(ones, k_, s_, d_).sum(tuple(range(-nsp, 0)))
  return total / div

def interpolate(input: Tensor, size: Any = None, scale_factor: Any = None, mode: str = "nearest", align_corners: bool | None = None,
                recompute_scale_factor: bool | None = None, antialias: bool = False) -> Tensor:
  """Resize the spatial axes (all but the first two). Each axis is resampled by a small constant matrix (its rows
  are the nearest source position, or the two linear weights) built from the sizes; the data path is a matmul."""
  x = input
  nsp = x.ndim - 2
  # PyTorch raises NotImplementedError for an input rank or mode it has no kernel for
  if nsp < 1: raise NotImplementedError(f"interpolate: input must have at least 3 dimensions (N, C, *spatial), got shape {x.shape}")
  want = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}
  if mode in want and want[mode] != nsp: raise NotImplementedError(f"interpolate: mode {mode!r} needs {want[mode] + 2}-D input, got shape {x.shape}")
  if mode not in ("nearest", "nearest-exact", "area") and mode not in want:
    raise NotImplementedError(f"interpolate: mode must be one of 'nearest', 'nearest-exact', 'linear', 'bilinear', 'bicubic', 'trilinear', 'area', got {mode!r}")
  if antialias: raise NotImplementedError("interpolate: antialias=True is not implemented")
  if mode.startswith("nearest") and align_corners is not None: raise ValueError("interpolate: align_corners only applies to the linear modes")
  i_ = x.shape[2:]
  if (size is None) == (scale_factor is None): raise ValueError("interpolate: give exactly one of size and scale_factor")
  if size is not None:
    o_ = (int(size),) * nsp if isinstance(size, int) else tuple(int(v) for v in size)
    if len(o_) != nsp: raise ValueError(f"interpolate: size {tuple(size)} must name {nsp} spatial sizes (input shape {x.shape})")
    scales: list[float | None] = [None] * nsp
  else:
    sf = (float(scale_factor),) * nsp if isinstance(scale_factor, (int, float)) else tuple(float(v) for v in scale_factor)
    if len(sf) != nsp: raise ValueError(f"interpolate: scale_factor {scale_factor} for {nsp} spatial dims")
    o_ = tuple(int(math.floor(i * s)) for i, s in zip(i_, sf))
    scales = [None if recompute_scale_factor else s for s in sf]
  if any(o <= 0 for o in o_): raise RuntimeError(f"interpolate: output size {o_} must be positive (input shape {x.shape})")
  if mode == "area": return _adaptive_avg_pool(x, o_, nsp, "interpolate")
  x = x._float() if mode in want else x
  for j, (i, o, sc) in enumerate(zip(i_, o_, scales)):
    if i == o and sc in (None, 1.0): continue
    rows = _resample_rows(i, o, sc, mode, bool(align_corners))
    ax = 2 + j
    xt = x.transpose(ax, -1)
    if mode.startswith("nearest"):
      idx = Tensor([r[0][0] for r in rows], device=x.device, dtype=dtypes.int32)
      y = xt[(Ellipsis, idx)]
    else:
      m = [[0.0] * i for _ in range(o)]
      for r, row in enumerate(rows):
        for src, wgt in row: m[r][src] += wgt
      y = xt.matmul(Tensor(m, device=x.device, dtype=x.dtype).T)
    x = y.transpose(ax, -1)
  return x

def _resample(x: Tensor, ax: int, m: list[list[float]]) -> Tensor:
  """x with axis ax replaced by m @ (that axis): a constant (out, in) matrix."""
  y = x.transpose(ax, -1).matmul(Tensor(m, device=x.device, dtype=x.dtype).T)
  return y.transpose(ax, -1)

def _adaptive_avg_pool(x: Tensor, output_size: Any, nsp: int, name: str) -> Tensor:
  if x.ndim not in (nsp + 1, nsp + 2): raise RuntimeError(f"{name}: input must have {nsp + 1} or {nsp + 2} dimensions, got shape {x.shape}")
  i_ = x.shape[-nsp:]
  req = (output_size,) * nsp if isinstance(output_size, int) or output_size is None else tuple(output_size)
  if len(req) != nsp: raise RuntimeError(f"{name}: output_size {output_size} must name {nsp} sizes")
  o_ = tuple(i if o is None else int(o) for i, o in zip(i_, req))
  if any(o < 0 for o in o_): raise RuntimeError(f"{name}: output_size {output_size} must be non-negative")
  x = x._float()
  if 0 in o_: return Tensor.zeros(*x.shape[:-nsp], *o_, dtype=x.dtype, device=x.device)  # an empty result, as PyTorch
  for j, (i, o) in enumerate(zip(i_, o_)):
    if i == o: continue
    ax = x.ndim - nsp + j
    if i % o == 0:  # equal windows: a reshape and a mean
      x = x.reshape(x.shape[:ax] + (o, i // o) + x.shape[ax + 1:]).mean(ax + 1)
      continue
    # bin r averages [floor(r*i/o), ceil((r+1)*i/o)), as PyTorch's adaptive pooling does
    m = [[0.0] * i for _ in range(o)]
    for r in range(o):
      lo, hi = (r * i) // o, -(-((r + 1) * i) // o)
      for c in range(lo, hi): m[r][c] = 1.0 / (hi - lo)
    x = _resample(x, ax, m)
  return x

def adaptive_avg_pool2d(input: Tensor, output_size: Any) -> Tensor:
  """Mean pooling of the last two axes to output_size (H', W') bins (PyTorch's bin edges)."""
  return _adaptive_avg_pool(input, output_size, 2, "adaptive_avg_pool2d")
def adaptive_avg_pool1d(input: Tensor, output_size: Any) -> Tensor:
  """Mean pooling of the last axis to output_size bins (PyTorch's bin edges)."""
  return _adaptive_avg_pool(input, output_size, 1, "adaptive_avg_pool1d")

def _resample_rows(i: int, o: int, scale: float | None, mode: str, align_corners: bool) -> list[list[tuple[int, float]]]:
  """For each output position: [(source index, weight), ...], computed in float32 as PyTorch's CPU kernels do."""
  if mode.startswith("nearest"):
    sc = _f32(1.0 / scale) if scale is not None and scale > 0 else _f32(i / o)
    if mode == "nearest": return [[(min(int(math.floor(_f32(r * sc))), i - 1), 1.0)] for r in range(o)]
    return [[(min(int(math.floor(_f32(_f32(r + 0.5) * sc))), i - 1), 1.0)] for r in range(o)]
  if align_corners: sc = _f32((i - 1) / (o - 1)) if o > 1 else 0.0
  else: sc = _f32(1.0 / scale) if scale is not None and scale > 0 else _f32(i / o)
  if mode == "bicubic": return _cubic_rows(i, o, sc, align_corners)
  rows = []
  for r in range(o):
    src = _f32(sc * r) if align_corners else max(0.0, _f32(_f32(sc * _f32(r + 0.5)) - 0.5))
    i0 = min(int(math.floor(src)), i - 1)
    i1 = min(i0 + 1, i - 1)
    l1 = _f32(src - i0)
    rows.append([(i0, _f32(1.0 - l1)), (i1, l1)])
  return rows

def _cubic_rows(i: int, o: int, sc: float, align_corners: bool) -> list[list[tuple[int, float]]]:
  """Keys' cubic convolution (A = -0.75) over the 4 nearest sources, clamped at the borders, in float32 as
  PyTorch's upsample_bicubic2d computes it (the source position is not clamped at 0, unlike the linear modes)."""
  A = -0.75
  def c1(t: float) -> float: return _f32(_f32(_f32(_f32((A + 2) * t) - (A + 3)) * t) * t + 1)
  def c2(t: float) -> float: return _f32(_f32(_f32(_f32(_f32(A * t) - 5 * A) * t) + 8 * A) * t - 4 * A)
  rows = []
  for r in range(o):
    src = _f32(sc * r) if align_corners else _f32(_f32(sc * _f32(r + 0.5)) - 0.5)
    i0 = math.floor(src)
    t = _f32(src - i0)
    ws = (c2(_f32(t + 1)), c1(t), c1(_f32(1 - t)), c2(_f32(2 - t)))
    rows.append([(min(max(i0 - 1 + k, 0), i - 1), w) for k, w in enumerate(ws)])
  return rows

# ---------------------------------------------------------------- regularization and normalization

def dropout(input: Tensor, p: float = 0.5, training: bool | None = True, inplace: bool = False) -> Tensor:
  """Zero each element with probability p and scale the rest by 1/(1-p) when `training` is true (the default, as
  torch.nn.functional.dropout); identity when it is false. training=None follows the global Tensor.training switch,
  which is what the tinygrad-style method x.dropout(p) does by default. inplace=True writes the result into input
  (Tensor.copy_'s rules)."""
  if not 0.0 <= p <= 1.0: raise ValueError(f"dropout probability must be in [0, 1], got {p}")
  if training is None: training = Tensor.training
  if not training or p == 0.0: return input
  out = _dropout(input, p)
  return input.copy_(out) if inplace else out

def _dropout_method(self: Tensor, p: float = 0.5, training: bool | None = None) -> Tensor:
  """Zero each element with probability p and scale the rest by 1/(1-p) while training; `training` defaults to the
  global Tensor.training switch (tinygrad's x.dropout(p)); pass it to decide per call (F.dropout defaults to True)."""
  return dropout(self, p, training)

def _dropout(x: Tensor, p: float) -> Tensor:
  if p == 1.0: return x * 0
  keep = Tensor.rand(*x.shape, device=x.device) >= p
  return keep.where(x * (1.0 / (1.0 - p)), _zero(x))

def _affine(x: Tensor, weight: Tensor | None, bias: Tensor | None, shape: tuple[int, ...]) -> Tensor:
  if weight is not None: x = x * weight.reshape(shape)
  if bias is not None: x = x + bias.reshape(shape)
  return x

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
  if num_groups <= 0 or C % num_groups: raise RuntimeError(f"group_norm: {C} channels (input shape {input.shape}) are not divisible into num_groups={num_groups}")
  for nm, t in (("weight", weight), ("bias", bias)):
    if t is not None and t.shape != (C,): raise RuntimeError(f"group_norm: {nm} of shape {t.shape}, expected ({C},)")
  x = input._float().reshape(N, num_groups, -1)
  mean = x.mean(-1, keepdim=True)
  xc = x - mean
  var = (xc * xc).mean(-1, keepdim=True)
  out = (xc * (var + eps).rsqrt()).reshape(input.shape)
  return _affine(out, weight, bias, (1, C) + (1,) * (input.ndim - 2))

# ---------------------------------------------------------------- attention

def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False) -> Tensor:
  """softmax(q k^T * scale + mask) v. A bool mask keeps where True; a float mask is added. Dropout on the weights
  applies whenever dropout_p > 0, as in PyTorch."""
  q, k, v = query, key, value
  if q.ndim < 2 or k.ndim < 2 or v.ndim < 2: raise RuntimeError(f"scaled_dot_product_attention: q, k, v need at least 2 dimensions, got {q.shape}, {k.shape}, {v.shape}")
  if q.shape[-1] != k.shape[-1]: raise RuntimeError(f"scaled_dot_product_attention: query {q.shape} and key {k.shape} differ in the embedding dimension")
  if k.shape[-2] != v.shape[-2]: raise RuntimeError(f"scaled_dot_product_attention: key {k.shape} and value {v.shape} differ in the sequence dimension")
  if enable_gqa and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
    hq, hk = q.shape[-3], k.shape[-3]
    if hq % hk: raise RuntimeError(f"scaled_dot_product_attention: {hq} query heads are not a multiple of {hk} key/value heads")
    def _rep(t: Tensor) -> Tensor:
      s = t.shape
      return t.unsqueeze(-3).expand(s[:-2] + (hq // hk,) + s[-2:]).reshape(s[:-3] + (hq,) + s[-2:])
    k, v = _rep(k), _rep(v)
  L, S = q.shape[-2], k.shape[-2]
  sc = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
  attn = q.matmul(k.transpose(-2, -1)) * sc
  if is_causal:
    if attn_mask is not None: raise RuntimeError("scaled_dot_product_attention: give attn_mask or is_causal, not both")
    attn_mask = _tri_mask(Tensor.full((L, S), True, device=q.device), 0, True)
  if attn_mask is not None:
    if attn_mask.dtype == dtypes.bool: attn = attn_mask.where(attn, -math.inf)
    else: attn = attn + attn_mask
  w = attn.softmax(-1)
  if dropout_p > 0.0: w = _dropout(w, dropout_p)
  return w.matmul(v)

# ---------------------------------------------------------------- losses

def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
  """int64 (*, num_classes) with 1 at each index (num_classes=-1 reads the maximum back from the device: a sync)."""
  if dtypes.is_float(tensor.dtype) or tensor.dtype == dtypes.bool: raise TypeError(f"one_hot is only applicable to index tensors, got {tensor.dtype}")
  if num_classes == -1: num_classes = int(tensor.max().item()) + 1 if tensor.numel() else 0
  out = tensor.unsqueeze(-1).eq(Tensor.arange(num_classes, device=tensor.device, dtype=tensor.dtype)).cast(dtypes.int64)
  return checked(out, tensor, 0, num_classes, f"one_hot: class value {{index}} is out of range for num_classes={num_classes}")

def _class_shape(input: Tensor, target: Tensor, name: str) -> None:
  want = input.shape[:1] + input.shape[2:] if input.ndim >= 2 else ()
  if target.shape != want:
    # a batch size that differs is a ValueError in PyTorch, any other shape a RuntimeError
    exc = ValueError if target.ndim >= 1 and want and target.shape[0] != want[0] else RuntimeError
    raise exc(f"{name}: target of shape {target.shape} does not match input of shape {input.shape} (expected target shape {want})")

@function_recipe("nll_loss")
def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100, reduction: str = "mean") -> Tensor:
  """Negative log-likelihood of class-index targets; input is (N, C, ...) or (C,) of log-probabilities."""
  if input.ndim == 1: return nll_loss(input.unsqueeze(0), target.reshape(1), weight, ignore_index, reduction).reshape(()) if reduction == "none" else \
      nll_loss(input.unsqueeze(0), target.reshape(1), weight, ignore_index, reduction)
  _class_shape(input, target, "nll_loss")
  if dtypes.is_float(target.dtype): raise TypeError(f"nll_loss: class-index target must be an integer tensor, got {target.dtype}")
  C = input.shape[1]
  if weight is not None and weight.shape != (C,): raise RuntimeError(f"nll_loss: weight of shape {weight.shape}, expected ({C},)")
  x = input.permute(0, *range(2, input.ndim), 1) if input.ndim > 2 else input   # (N, ..., C)
  valid = target.ne(ignore_index)
  oh = checked(_onehot(target, C), valid.where(target, 0), 0, C, f"nll_loss/cross_entropy: target {{index}} is out of bounds for {C} classes")  # (N, ..., C)
  picked = oh.where(x, _zero(x)).sum(-1)
  w = oh.where(weight.cast(x.dtype), 0.0).sum(-1) if weight is not None else Tensor.full((), 1.0, dtype=x.dtype, device=x.device)
  w = valid.where(w, 0.0)
  loss = -picked * w
  if reduction == "none": return loss
  if reduction == "sum": return loss.sum()
  if reduction == "mean": return loss.sum() / w._bcast(loss.shape).sum()
  raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")

@function_recipe("cross_entropy")
def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average: Any = None, ignore_index: int = -100,
                  reduce: Any = None, reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
  """Cross entropy of logits (N, C, ...) or (C,) against class indices or class probabilities (PyTorch's formulas,
  label smoothing and class weights included)."""
  if size_average is not None or reduce is not None: raise TypeError("cross_entropy: size_average and reduce are deprecated; use reduction")
  if not 0.0 <= label_smoothing <= 1.0: raise RuntimeError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
  cdim = 0 if input.ndim == 1 else 1
  C = input.shape[cdim]
  logp = input.log_softmax(cdim)
  wshape = tuple(C if k == cdim else 1 for k in range(input.ndim))
  if weight is not None and weight.shape != (C,): raise RuntimeError(f"cross_entropy: weight of shape {weight.shape}, expected ({C},)")
  if dtypes.is_float(target.dtype):
    if target.shape != input.shape: raise RuntimeError(f"cross_entropy: probability target of shape {target.shape} must match input shape {input.shape}")
    t = target * (1 - label_smoothing) + label_smoothing / C if label_smoothing > 0 else target
    prodt = logp * t
    if weight is not None: prodt = prodt * weight.reshape(wshape)
    if reduction == "none": return -prodt.sum(cdim)
    if reduction == "sum": return -prodt.sum()
    if reduction == "mean": return -prodt.sum() / (input.numel() // C) if input.numel() else prodt.sum() * math.nan
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
  nll = nll_loss(logp, target, weight, ignore_index, reduction)
  if label_smoothing == 0.0: return nll
  ignore = target.ne(ignore_index)
  smooth = -(logp * weight.reshape(wshape)).sum(cdim) if weight is not None else -logp.sum(cdim)
  smooth = ignore.where(smooth, 0.0)
  if reduction == "mean":
    if weight is not None:
      oh = _onehot(target, C)
      den = ignore.where(oh.where(weight, 0.0).sum(-1), 0.0).sum()
    else: den = ignore.sum()
    ret = smooth.sum() / den
  elif reduction == "sum": ret = smooth.sum()
  elif reduction == "none": ret = smooth
  else: raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
  return (1 - label_smoothing) * nll + ret * (label_smoothing / C)

def _check_same(input: Tensor, target: Tensor, name: str) -> None:
  if input.shape != target.shape: raise ValueError(f"{name}: target of shape {target.shape} must have the input's shape {input.shape}")

def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average: Any = None, reduce: Any = None,
                         reduction: str = "mean") -> Tensor:
  """-(t log p + (1 - t) log(1 - p)) with the logs clamped at -100, as PyTorch; reduced by reduction."""
  _check_same(input, target, "binary_cross_entropy")
  x = input._float()
  # log clamped at -100, as PyTorch does, so 0 and 1 give finite losses
  loss = -(target * x.log().maximum(-100.0) + (1 - target) * (1 - x).log().maximum(-100.0))
  if weight is not None: loss = loss * weight
  return _reduction(loss, reduction)

@function_recipe("binary_cross_entropy_with_logits")
def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average: Any = None, reduce: Any = None,
                                     reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
  """binary_cross_entropy(sigmoid(x), t) computed stably from the logits; pos_weight scales the positive term."""
  _check_same(input, target, "binary_cross_entropy_with_logits")
  x = input._float()
  # log(1 + exp(-|x|)) + max(-x, 0) is log(1 + exp(-x)) without overflow
  sp = (1 + (-x.abs()).exp()).log() + (-x).maximum(0)
  if pos_weight is not None: loss = (1 - target) * x + ((pos_weight - 1) * target + 1) * sp
  else: loss = (1 - target) * x + sp
  if weight is not None: loss = loss * weight
  return _reduction(loss, reduction)

@function_recipe("mse_loss")
def mse_loss(input: Tensor, target: Tensor, size_average: Any = None, reduce: Any = None, reduction: str = "mean") -> Tensor:
  """(input - target)^2, reduced by reduction ('mean', 'sum' or 'none')."""
  d = input - target
  return _reduction(d * d, reduction)

def l1_loss(input: Tensor, target: Tensor, size_average: Any = None, reduce: Any = None, reduction: str = "mean") -> Tensor:
  """|input - target|, reduced by reduction."""
  return _reduction((input - target).abs(), reduction)

def smooth_l1_loss(input: Tensor, target: Tensor, size_average: Any = None, reduce: Any = None, reduction: str = "mean", beta: float = 1.0) -> Tensor:
  """0.5 d^2 / beta where |d| < beta, |d| - 0.5 beta elsewhere; reduced by reduction."""
  d = (input - target).abs()
  loss = d if beta == 0 else (d < beta).where(0.5 * d * d / beta, d - 0.5 * beta)
  return _reduction(loss, reduction)

def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0) -> Tensor:
  """0.5 d^2 where |d| < delta, delta (|d| - 0.5 delta) elsewhere; reduced by reduction."""
  d = (input - target).abs()
  return _reduction((d < delta).where(0.5 * d * d, delta * (d - 0.5 * delta)), reduction)

# ---------------------------------------------------------------- activations and normalization by a norm

def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
  """input / max(||input||_p over dim, eps) (torch.nn.functional.normalize); the norm's gradient at 0 is 0."""
  if not isinstance(input, Tensor): raise TypeError(f"normalize: input must be a Tensor, got {type(input).__name__}")
  return input / input.norm(p, dim, keepdim=True).clip(min=eps)

def softmin(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
  """softmax(-input) along dim."""
  return input.softmin(dim, dtype)

def softsign(input: Tensor) -> Tensor:
  """input / (1 + |input|)."""
  return input.softsign()

def logsigmoid(input: Tensor) -> Tensor:
  """log(sigmoid(input)), finite for any input."""
  return input.logsigmoid()

# ---------------------------------------------------------------- Tensor methods

def _cat_method(first: Any, *rest: Any, dim: int | None = None, axis: int | None = None) -> Tensor:
  """Tensor.cat([a, b], dim) as PyTorch's torch.cat, or a.cat(b, c, dim=...)."""
  if isinstance(first, Tensor): return cat([first, *rest], dim=dim, axis=axis)
  if len(rest) == 1 and dim is None and axis is None: dim = rest[0]
  elif rest: raise TypeError(f"cat(): unexpected positional arguments {rest}")
  return cat(first, dim=dim, axis=axis)

def _stack_method(first: Any, *rest: Any, dim: int | None = None, axis: int | None = None) -> Tensor:
  """Tensor.stack([a, b], dim) as PyTorch's torch.stack, or a.stack(b, c, dim=...): tensors of one shape on a new axis."""
  if isinstance(first, Tensor): return stack([first, *rest], dim=dim, axis=axis)
  if len(rest) == 1 and dim is None and axis is None: dim = rest[0]
  elif rest: raise TypeError(f"stack(): unexpected positional arguments {rest}")
  return stack(first, dim=dim, axis=axis)

Tensor.cat = _cat_method  # type: ignore[attr-defined]
Tensor.stack = _stack_method  # type: ignore[attr-defined]
Tensor.einsum = staticmethod(einsum)  # type: ignore[attr-defined]
Tensor.unfold = unfold_dim  # type: ignore[attr-defined]
for _name in ("scatter_reduce", "index_select", "repeat_interleave", "conv_transpose3d", "max_unpool1d", "max_unpool2d", "normalize"):
  setattr(Tensor, _name, globals()[_name])
for _name in ("split", "chunk", "repeat", "roll", "tril", "triu", "gather", "scatter", "scatter_add", "masked_fill", "diagonal", "diag",
              "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d",
              "avg_pool2d", "avg_pool3d", "interpolate", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "dropout", "layer_norm", "rms_norm", "batch_norm", "group_norm", "scaled_dot_product_attention", "cross_entropy", "nll_loss",
              "binary_cross_entropy", "binary_cross_entropy_with_logits", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "one_hot"):
  setattr(Tensor, _name, globals()[_name])
Tensor.dropout = _dropout_method  # type: ignore[attr-defined]   # (follows Tensor.training unless told)
del _name
