"""Joining, splitting and rearranging tensors (cat, stack, split, chunk, repeat, roll, tril/triu, diagonal, meshgrid, pad)
and the sliding windows convolution and pooling build from movement ops only (pad, shrink, reshape, expand, permute)."""
from __future__ import annotations
from functools import reduce as _fold
from typing import Any, Sequence, TYPE_CHECKING
from baregrad.ir.dtype import dtypes, promote
from baregrad.tensor.common import _axis
if TYPE_CHECKING: from baregrad.tensor.tensor import Tensor

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

def cat(tensors: Sequence[Tensor], dim: int | None = None, axis: int | None = None) -> Tensor:
  """Concatenate along dim: each piece is zero-padded to the full size and the pieces are added (one fused kernel)."""
  from baregrad.tensor.tensor import Tensor
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

def _repeat_axis(x: Tensor, axis: int, times: int) -> Tensor:
  s = x.shape
  return x.reshape(s[:axis] + (1,) + s[axis:]).expand(s[:axis] + (times,) + s[axis:]).reshape(s[:axis] + (times * s[axis],) + s[axis + 1:])

def _tri_mask(x: Tensor, diagonal: int, lower: bool) -> Tensor:
  from baregrad.tensor.tensor import Tensor
  if x.ndim < 2: raise RuntimeError(f"tril/triu need a tensor of at least 2 dimensions, got shape {x.shape}")
  n, m = x.shape[-2:]
  diff = Tensor.arange(m, device=x.device, dtype=dtypes.int32).reshape(1, m) - Tensor.arange(n, device=x.device, dtype=dtypes.int32).reshape(n, 1)
  return diff <= diagonal if lower else diff >= diagonal

def meshgrid(*tensors: Any, indexing: str = "ij") -> tuple[Tensor, ...]:
  """Coordinate grids from 1-D (or 0-d) tensors: with 'ij' output k varies along axis k; 'xy' swaps the first two
  axes (NumPy's default). Views (reshape + expand), no copies."""
  from baregrad.tensor.tensor import Tensor
  ts = list(tensors[0]) if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else list(tensors)
  if indexing not in ("ij", "xy"): raise RuntimeError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
  if not ts: raise RuntimeError("meshgrid: expects a non-empty list of tensors")
  for i, t in enumerate(ts):
    if not isinstance(t, Tensor): raise TypeError(f"meshgrid: element {i} is a {type(t).__name__}, not a Tensor")
    if t.ndim > 1: raise RuntimeError(f"meshgrid: expects 0-d or 1-D tensors, got tensor {i} of shape {t.shape}")
    if t.dtype != ts[0].dtype or t.device != ts[0].device:
      raise RuntimeError(f"meshgrid: expects all tensors to have the same dtype and device: tensor {i} is {t.dtype} on {t.device}, tensor 0 {ts[0].dtype} on "
          f"{ts[0].device}")
  flat = [t.reshape(-1) for t in ts]
  swap = indexing == "xy" and len(flat) >= 2
  if swap: flat[0], flat[1] = flat[1], flat[0]
  shape = tuple(t.shape[0] for t in flat)
  out = [t.reshape(tuple(-1 if k == i else 1 for k in range(len(flat)))).expand(shape) for i, t in enumerate(flat)]
  if swap: out[0], out[1] = out[1], out[0]
  return tuple(out)

def pad(input: Tensor, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> Tensor:
  """torch.nn.functional.pad: pad is (left, right) for the last axis, then the one before, ...; mode 'constant',
  'reflect', 'replicate' or 'circular' (the last three built from slices, flips and expands joined with cat)."""
  if mode == "constant": return input.pad(pad, "constant", 0.0 if value is None else value)
  if mode not in ("reflect", "replicate",
      "circular"): raise NotImplementedError(f"pad: unrecognised padding mode {mode!r}: expected 'constant', 'reflect', 'replicate' or 'circular'")
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

class ShapeOps:
  """Joins, splits, repeats and triangular/diagonal views: Tensor methods (x.split(n), a.cat(b), x.tril())."""
  __slots__ = ()   # (Tensor has slots: a base without them would give every tensor a __dict__)
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
      if sum(sizes) != n or any(s < 0 for s in sizes): raise RuntimeError(f"split sections {sizes} must be non-negative and sum to the size {n} of dimension "
          f"{d} (shape {tensor.shape})")
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
    return ShapeOps.split(tensor, max(1, -(-n // chunks)), d)
  def repeat(tensor: Tensor, *sizes: Any) -> Tensor:
    """torch.Tensor.repeat: tile the tensor (expand + reshape, no copy until used)."""
    from baregrad.tensor.tensor import Tensor
    reps = tuple(int(s) for s in (sizes[0] if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else sizes))
    if len(reps) < tensor.ndim: raise RuntimeError(f"repeat: {len(reps)} repeat sizes {reps} for a tensor of {tensor.ndim} dimensions (shape {tensor.shape}): "
        f"need at least {tensor.ndim}")
    if any(r < 0 for r in reps): raise RuntimeError(f"repeat sizes must be non-negative, got {reps}")
    shape = (1,) * (len(reps) - tensor.ndim) + tensor.shape
    x = tensor.reshape(shape)
    if 0 in reps: return Tensor.zeros(*[r * s for r, s in zip(reps, shape)], dtype=tensor.dtype, device=tensor.device)
    x = x.reshape(tuple(v for s in shape for v in (1, s))).expand(tuple(v for r, s in zip(reps, shape) for v in (r, s)))
    return x.reshape(tuple(r * s for r, s in zip(reps, shape)))
  def roll(tensor: Tensor, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
    """Elements shifted by shifts along dims, wrapping around (flattened when dims is None)."""
    if dims is None:
      if not isinstance(shifts, int) and len(shifts) != 1: raise RuntimeError(f"roll without dims takes one shift, got {shifts}")
      return ShapeOps.roll(tensor.reshape(-1), shifts if isinstance(shifts, int) else shifts[0], 0).reshape(tensor.shape)
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
  def tril(tensor: Tensor, diagonal: int = 0) -> Tensor:
    """The lower triangle of the last two axes (on and below diagonal), zeros above."""
    return _tri_mask(tensor, diagonal, True).where(tensor, _zero(tensor))
  def triu(tensor: Tensor, diagonal: int = 0) -> Tensor:
    """The upper triangle of the last two axes (on and above diagonal), zeros below."""
    return _tri_mask(tensor, diagonal, False).where(tensor, _zero(tensor))
  def unfold(input: Tensor, dimension: int, size: int, step: int) -> Tensor:
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
    from baregrad.tensor.tensor import Tensor
    if input.ndim == 2: return ShapeOps.diagonal(input, diagonal, 0, 1)
    if input.ndim != 1: raise RuntimeError(f"diag needs a 1-D or 2-D tensor, got shape {input.shape}")
    n = input.shape[0]
    eye = Tensor.arange(n, device=input.device, dtype=dtypes.int32)
    sq = eye.reshape(n, 1).eq(eye.reshape(1, n)).where(input.reshape(1, n), _zero(input.reshape(1, n)))
    k = abs(diagonal)
    return sq._pad(((0, k), (k, 0)) if diagonal >= 0 else ((k, 0), (0, k)))
  def cat(first: Any, *rest: Any, dim: int | None = None, axis: int | None = None) -> Tensor:
    """Tensor.cat([a, b], dim) as PyTorch's torch.cat, or a.cat(b, c, dim=...)."""
    from baregrad.tensor.tensor import Tensor
    if isinstance(first, Tensor): return cat([first, *rest], dim=dim, axis=axis)
    if len(rest) == 1 and dim is None and axis is None: dim = rest[0]
    elif rest: raise TypeError(f"cat(): unexpected positional arguments {rest}")
    return cat(first, dim=dim, axis=axis)
  def stack(first: Any, *rest: Any, dim: int | None = None, axis: int | None = None) -> Tensor:
    """Tensor.stack([a, b], dim) as PyTorch's torch.stack, or a.stack(b, c, dim=...): tensors of one shape on a new axis."""
    from baregrad.tensor.tensor import Tensor
    if isinstance(first, Tensor): return stack([first, *rest], dim=dim, axis=axis)
    if len(rest) == 1 and dim is None and axis is None: dim = rest[0]
    elif rest: raise TypeError(f"stack(): unexpected positional arguments {rest}")
    return stack(first, dim=dim, axis=axis)
