"""Sorting on the device: a bitonic sorting network (Batcher, 1968) built from Tensor ops, and the ops made from it.

The sorted axis is padded to N = 2^L; the network runs L(L+1)/2 compare-exchange stages. At stage (k, j) element i
pairs with i ^ j, and its block sorts ascending when i & k == 0: reshaping the axis to (N/2k, 2, k/2j, 2, j) puts the
direction bit and the pair member on two axes of size 2, so the partner is the other slot of the member axis (a
flip: no arithmetic on the values, so -0.0 and NaN payloads pass untouched). Every stage is a kernel per sorted
tensor, in the backward pass too (see _barrier), so gradients flow through the selections at O(n log^2 n) cost.

The order is lexicographic over keys, each ascending or descending; the last key is always the original index,
which makes the order total and the sort stable (torch.sort(stable=True); PyTorch's default may order ties
differently). NaN sorts above every number (last ascending, first descending), as in PyTorch. Padding sorts after
everything, whatever the direction.

Data-dependent shapes (nonzero, masked_select, boolean-mask indexing, unique, repeat_interleave with a tensor):
the result's size is a count that must be read back from the device first (one .item(), a host-device sync) before
the rest is built lazily; the selection itself is a stable sort of (not selected, index) keys carrying the values."""
from __future__ import annotations
from typing import Any, NamedTuple, TYPE_CHECKING
from baregrad.ir.dtype import dtypes
from baregrad.tensor.common import _axis, broadcast_shape
from baregrad.tensor.ops.shape import stack
from baregrad.tensor.ops.indexing import take_along
if TYPE_CHECKING: from baregrad.tensor.tensor import Tensor

class SortResult(NamedTuple):
  """(values, indices) as torch.return_types.sort / topk."""
  values: Tensor
  indices: Tensor

def _barrier(x: Tensor, pos: Tensor) -> Tensor:
  """x itself, rebuilt from its two halves along the last axis, each padded back into place: in the backward pass
  the gradient arriving here is a padded view of a computed value, which the scheduler realizes, so every stage of
  the network stays its own small kernel in the backward pass (the forward realizes each stage explicitly) instead
  of one expression that doubles with every stage. Only tensors that require grad need it."""
  if not x.requires_grad or x.shape[-1] < 2: return x
  N, h = x.shape[-1], x.shape[-1] // 2
  keep = tuple((0, s) for s in x.shape[:-1])
  lo = x._shrink(keep + ((0, h),))._pad(((0, 0),) * (x.ndim - 1) + ((0, N - h),))
  hi = x._shrink(keep + ((h, N),))._pad(((0, 0),) * (x.ndim - 1) + ((h, 0),))
  return (pos < h).where(lo, hi)

def _before(a: list[Tensor], b: list[Tensor], desc: list[bool]) -> Tensor:
  """a strictly before b in the lexicographic order of the keys (the last key is distinct, so the order is total)."""
  before, eq = None, None
  for ka, kb, d in zip(a, b, desc):
    bk = ka > kb if d else ka < kb
    ek = ka.eq(kb)
    if dtypes.is_float(ka.dtype):
      na, nb = ka.isnan(), kb.isnan()
      bk = bk | ((na & nb.logical_not()) if d else (nb & na.logical_not()))
      ek = ek | (na & nb)
    before = bk if before is None else before | (eq & bk)
    eq = ek if eq is None else eq & ek
  return before

def _network(keys: list[Tensor], desc: list[bool], payloads: list[Tensor], n_valid: int) -> tuple[list[Tensor], list[Tensor]]:
  """Sort along axis -1 of the keys (shape (*P, N), N a power of two); payloads have shape (*P, N, *S) and move with
  them. Elements at positions >= n_valid are padding (the last key is the position) and end up last.

  A stage's kernel depends only on j (the pair distance, which sets the view): the block direction i & k is computed
  from the position and k read from a one-element buffer, so the L(L+1)/2 stages compile L kernels per tensor."""
  from baregrad.tensor.tensor import Tensor
  N = keys[0].shape[-1]
  pre = keys[0].shape[:-1]
  npre = len(pre)
  dev = keys[0].device
  pad_aware = n_valid < N
  pos = Tensor.arange(N, device=dev, dtype=dtypes.int32).contiguous().realize()
  member = Tensor([0, 1], device=dev, dtype=dtypes.int32).reshape(2, 1)
  k = 2
  while k <= N:
    kt = Tensor([k], device=dev, dtype=dtypes.int32)
    j = k // 2
    while j >= 1:
      inner = (N // (2 * j), 2, j)
      m_ax = npre + 1
      # this slot wants the later element of its pair: member 1 of an ascending block, member 0 of a descending one
      md = (pos.reshape(inner) & kt.reshape(1, 1, 1)).ne(0) ^ member.ne(0)
      ks = [_barrier(t, pos).reshape(pre + inner) for t in keys]
      fs = [t.flip(m_ax) for t in ks]   # the partner: the other slot of the pair
      bf = _before(fs, ks, desc)
      if pad_aware:  # padding after everything: compare "is padding" first
        pa, pb = fs[-1] >= n_valid, ks[-1] >= n_valid
        bf = (pb & pa.logical_not()) | (pa.eq(pb) & bf)
      take = bf ^ md
      outs = [take.where(f, t).reshape(pre + (N,)) for f, t in zip(fs, ks)]
      pouts = []
      for p in payloads:
        extra = (1,) * (p.ndim - npre - 1)
        pr = p if not p.requires_grad else _barrier(p.reshape(pre + (N, -1)).transpose(-1, -2), pos).transpose(-1, -2)
        pr = pr.reshape(pre + inner + p.shape[npre + 1:])
        pouts.append(take.reshape(take.shape + extra).where(pr.flip(m_ax), pr).reshape(p.shape))
      keys, payloads = [o.contiguous() for o in outs], [o.contiguous() for o in pouts]
      Tensor.realize(*keys, *payloads)
      j //= 2
    k *= 2
  return keys, payloads

def _pow2(n: int) -> int: return 1 << max(0, (n - 1).bit_length())

def _sort_last(x: Tensor, descending: bool) -> tuple[Tensor, Tensor]:
  """(values, int32 indices) of a stable sort along the last axis."""
  from baregrad.tensor.tensor import Tensor
  n = x.shape[-1]
  v = x.cast(dtypes.uint8) if x.dtype == dtypes.bool else x
  if n <= 1: return x, Tensor.zeros(*x.shape, dtype=dtypes.int32, device=x.device)
  N = _pow2(n)
  idx = Tensor.arange(N, device=x.device, dtype=dtypes.int32)._bcast(x.shape[:-1] + (N,))
  vp = v._pad(((0, 0),) * (x.ndim - 1) + ((0, N - n),))
  (sv, si), _ = _network([vp, idx], [descending, False], [], n)
  keep = tuple((0, s) for s in x.shape[:-1]) + ((0, n),)
  sv, si = sv._shrink(keep), si._shrink(keep)
  return (sv.cast(dtypes.bool) if x.dtype == dtypes.bool else sv), si

def _check_dim(x: Any, dim: Any, name: str) -> int:
  from baregrad.tensor.tensor import Tensor
  if not isinstance(x, Tensor): raise TypeError(f"{name}: input must be a Tensor, got {type(x).__name__}")
  if not isinstance(dim, int) or isinstance(dim, bool): raise TypeError(f"{name}: dim must be an int, got {type(dim).__name__} {dim!r}")
  return _axis(dim, x.ndim)

def _select_last(x: Tensor, k: int, largest: bool) -> Tensor:
  """int32 indices (*P, k) of the k largest (smallest) elements along the last axis of x (*P, n), in the order a
  stable sort gives (ties by index; NaN above every number): k passes, each taking the best element left."""
  from baregrad.tensor.tensor import Tensor
  n = x.shape[-1]
  v = x.cast(dtypes.int32) if x.dtype == dtypes.bool else x
  lo, hi = dtypes.min(v.dtype), dtypes.max(v.dtype)
  score = Tensor.arange(n, 0, -1, device=x.device, dtype=dtypes.int32)._bcast(x.shape)   # n - index: the first wins
  nan = v.isnan() if dtypes.is_float(v.dtype) else None
  left = score > 0   # (all True)
  picks = []
  for _ in range(k):
    num = left if nan is None else left & nan.logical_not()
    best = num.where(v, lo).amax(-1, keepdim=True) if largest else num.where(v, hi).amin(-1, keepdim=True)
    cand = num & v.eq(best)
    if nan is not None:   # NaN is the largest: first among the largest, after every number among the smallest
      nans = left & nan
      cand = nans.any(-1, keepdim=True).where(nans, cand) if largest else num.any(-1, keepdim=True).where(cand, nans)
    first = cand.where(score, 0).amax(-1, keepdim=True)
    picks.append(n - first)
    left = (left & score.ne(first)).contiguous().realize()   # (each pass a few kernels, not a growing expression)
  return picks[0].cat(*picks[1:], dim=-1) if len(picks) > 1 else picks[0]

# topk of at most this many elements selects them pass by pass (2 reads of the axis each) instead of sorting the whole
# axis (L(L+1)/2 stages of 2 tensors for 2^L elements): topk(8) of 2048x1024 took 228 ms sorted
def _select_wins(k: int, n: int) -> bool:
  L = max(1, (n - 1).bit_length())
  return 0 < k <= 64 and 2 * k < L * (L + 1) // 2

# ---------------------------------------------------------------- data-dependent shapes

def _count(mask: Tensor) -> int:
  """How many elements are True: read back from the device (a sync)."""
  return int(mask.cast(dtypes.int32).sum().item()) if mask.numel() else 0

def _select(flag: Tensor, payloads: list[Tensor], count: int) -> list[Tensor]:
  """Rows of each payload (shape (n, *S)) where flag (n,) is True, in order: a stable sort of (not flag, index)
  packed in one int key, carrying the payloads; the first count rows."""
  from baregrad.tensor.tensor import Tensor
  n = flag.shape[0]
  if count == 0 or n == 0: return [p._shrink(((0, 0),) + tuple((0, s) for s in p.shape[1:])) for p in payloads]
  N = _pow2(n)
  kd = dtypes.int32 if 2 * N < 2 ** 31 else dtypes.int64
  pos = Tensor.arange(N, device=flag.device, dtype=kd)
  notf = flag.logical_not()._pad(((0, N - n),))
  # padding gets flag "not selected" and sorts after every real element by its position
  key = (notf | Tensor.arange(N, device=flag.device, dtype=dtypes.int32).ge(n)).where(pos + N, pos)
  pp = [p._pad(((0, N - n),) + ((0, 0),) * (p.ndim - 1)) for p in payloads]
  _, outs = _network([key], [False], pp, N)
  return [o._shrink(((0, count),) + tuple((0, s) for s in o.shape[1:])) for o in outs]

def mask_rows(x: Tensor, mask: Tensor) -> Tensor:
  """x[mask] for a bool mask over x's first mask.ndim axes: (count, *x.shape[mask.ndim:])."""
  k = mask.ndim
  if mask.shape != x.shape[:k]:
    raise IndexError(f"the shape of the mask {mask.shape} does not match the shape of the indexed tensor {x.shape} at its first {k} dimensions")
  rows = x.reshape((-1,) + x.shape[k:]) if x.numel() else x.reshape((mask.numel(),) + x.shape[k:])
  m = mask.reshape(-1)
  return _select(m, [rows], _count(m))[0]

def _groups(s: Tensor, perm: Tensor, first: Tensor, inv_shape: tuple[int, ...], return_inverse: bool, return_counts: bool) -> Any:
  """unique's outputs from the sorted values s (n, ...), the permutation perm (n,) that sorted them and the flags
  (n,) of the first element of each group of equal values."""
  from baregrad.tensor.tensor import Tensor
  n, dev = s.shape[0], s.device
  u = _count(first)
  pos = Tensor.arange(n, device=dev, dtype=dtypes.int64)
  vals, starts = _select(first, [s, pos], u)
  out = [vals]
  if return_inverse:
    gid = first.cast(dtypes.int64).cumsum(0) - 1                 # group of each sorted element
    # scatter the groups back to the original order: sort (original position, group) pairs by position
    N = _pow2(n)
    _, (inv,) = _network([_perm_pad(perm.cast(dtypes.int32), n)], [False], [gid._pad(((0, N - n),))], N)
    out.append(inv._shrink(((0, n),)).reshape(inv_shape))
  if return_counts:
    ends = starts._shrink(((1, u),))._pad(((0, 1),)) + Tensor.arange(u, device=dev, dtype=dtypes.int64).eq(u - 1).where(n, 0)
    out.append(ends - starts)
  return out[0] if len(out) == 1 else tuple(out)

_KEYS_PER_PASS = 4  # columns compared per sorting pass: more make each compare-exchange kernel longer

def _unique_dim(input: Tensor, d: int, return_inverse: bool, return_counts: bool) -> Any:
  """unique(dim=d): the slices along d as rows (n, m), sorted lexicographically by least-significant-digit passes of
  the stable network (a few columns per pass), then grouped where a row differs from the one before it."""
  # d to the front, the other axes in their order: the rows compare in the order PyTorch compares the slices
  from baregrad.tensor.tensor import Tensor
  fwd = (d,) + tuple(a for a in range(input.ndim) if a != d)
  back = tuple(fwd.index(a) for a in range(input.ndim))
  x = input.detach().permute(fwd)
  n, rest = x.shape[0], x.shape[1:]
  m = 1
  for s in rest: m *= s
  dev = input.device
  if n and m == 0:
    raise RuntimeError(f"unique: dim={d} of shape {input.shape}: the other axes hold no elements, so there are no slices to "
                       "compare (expected a 0-size axis only at dim, as PyTorch)")
  if n == 0:
    out = [x.permute(back)] + [Tensor.zeros(0, dtype=dtypes.int64, device=dev)] * (int(return_inverse) + int(return_counts))
    return out[0] if len(out) == 1 else tuple(out)
  rows = x.reshape(n, m)
  rk = rows.cast(dtypes.uint8) if rows.dtype == dtypes.bool else rows
  perm = Tensor.arange(n, device=dev, dtype=dtypes.int32)
  N = _pow2(n)
  idx = Tensor.arange(N, device=dev, dtype=dtypes.int32)
  cols = rk.T.contiguous()                                          # (m, n): one column per row
  for hi in range(m, 0, -_KEYS_PER_PASS):
    lo = max(0, hi - _KEYS_PER_PASS)
    # the columns lo..hi of the rows in their current order, then a stable sort by them (the position is the last key)
    ks = [cols[c][perm]._pad(((0, N - n),)) for c in range(lo, hi)]
    _, (p,) = _network(ks + [idx], [False] * (hi - lo + 1), [perm._pad(((0, N - n),))], n)
    perm = p._shrink(((0, n),)).contiguous().realize()
  srt = rk[perm]
  prev = srt._shrink(((0, n - 1), (0, m)))._pad(((1, 0), (0, 0)))
  first = Tensor.arange(n, device=dev, dtype=dtypes.int32).eq(0) | srt.ne(prev).any(1)
  res = _groups(x[perm], perm, first, (n,), return_inverse, return_counts)
  if not isinstance(res, tuple): return res.permute(back)
  return (res[0].permute(back),) + res[1:]

def _perm_pad(perm: Tensor, n: int) -> Tensor:
  """A permutation of 0..n-1 padded to a power of two with n, n+1, ... (distinct keys that sort after it)."""
  from baregrad.tensor.tensor import Tensor
  N = _pow2(n)
  if N == n: return perm
  pos = Tensor.arange(N, device=perm.device, dtype=perm.dtype)
  return pos.ge(n).where(pos, perm._pad(((0, N - n),)))

class SortingOps:
  """Sorting and data-dependent selections: Tensor methods (x.sort(dim), x.topk(k), x.nonzero(), x.unique())."""
  __slots__ = ()   # (Tensor has slots: a base without them would give every tensor a __dict__)
  def sort(input: Tensor, dim: int = -1, descending: bool = False, stable: bool = False, *, axis: int | None = None) -> SortResult:
    """(values, int64 indices) sorted along dim by a bitonic network on the device. Always stable (ties keep their
    order); NaN sorts last (first when descending). Gradients flow to the elements each value came from."""
    from baregrad.tensor.tensor import Tensor
    d = _check_dim(input, dim if axis is None else axis, "sort")
    if input.ndim == 0: return SortResult(input * 1 if input.dtype != dtypes.bool else input, Tensor.zeros((), dtype=dtypes.int64, device=input.device))
    x = input.transpose(d, -1) if d != input.ndim - 1 else input
    v, i = _sort_last(x, bool(descending))
    if d != input.ndim - 1: v, i = v.transpose(d, -1), i.transpose(d, -1)
    return SortResult(v, i.cast(dtypes.int64))
  def argsort(input: Tensor, dim: int = -1, descending: bool = False, stable: bool = False, *, axis: int | None = None) -> Tensor:
    """int64 indices that sort input along dim (stable; see sort)."""
    return SortingOps.sort(input, dim, descending, stable, axis=axis).indices
  def msort(input: Tensor) -> Tensor:
    """input sorted along its first axis."""
    return SortingOps.sort(input, 0).values
  def topk(input: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True, *, axis: int | None = None) -> SortResult:  # noqa: A002
    """(values, int64 indices) of the k largest (or smallest) elements along dim, in order: k selection passes for a
    small k, else a full sort on the device and its first k. Among equal values the earlier index comes first (PyTorch
    may pick others); NaN is the largest."""
    d = _check_dim(input, dim if axis is None else axis, "topk")
    n = input.shape[d] if input.ndim else 1
    if not isinstance(k, int) or isinstance(k, bool): raise TypeError(f"topk: k must be an int, got {type(k).__name__} {k!r}")
    if not 0 <= k <= n: raise RuntimeError(f"topk: k={k} is out of range for dimension {d} of size {n} (expected 0 <= k <= {n})")
    if input.ndim and input.numel() and _select_wins(k, n):
      x = input.transpose(d, -1) if d != input.ndim - 1 else input
      i = _select_last(x, k, bool(largest))
      vals = take_along(x, i, x.ndim - 1)   # (the gradient flows to the elements taken)
      if d != input.ndim - 1: vals, i = vals.transpose(d, -1), i.transpose(d, -1)
      return SortResult(vals, i.cast(dtypes.int64))
    v, i = SortingOps.sort(input, d, descending=largest)
    if input.ndim == 0: return SortResult(v, i)
    keep = tuple((0, k) if a == d else (0, s) for a, s in enumerate(v.shape))
    return SortResult(v._shrink(keep), i._shrink(keep))
  def kthvalue(input: Tensor, k: int, dim: int = -1, keepdim: bool = False) -> SortResult:
    """(value, int64 index) of the k-th smallest element (1-based) along dim."""
    d = _check_dim(input, dim, "kthvalue")
    n = input.shape[d] if input.ndim else 1
    if not isinstance(k,
        int) or not 1 <= k <= n: raise RuntimeError(f"kthvalue: k={k!r} is out of range for dimension {d} of size {n} (expected 1 <= k <= {n})")
    v, i = SortingOps.sort(input, d)
    if input.ndim == 0: return SortResult(v, i)
    keep = tuple((k - 1, k) if a == d else (0, s) for a, s in enumerate(v.shape))
    v, i = v._shrink(keep), i._shrink(keep)
    return SortResult(v, i) if keepdim else SortResult(v.squeeze(d), i.squeeze(d))
  def nonzero(input: Tensor, *, as_tuple: bool = False) -> Any:
    """int64 indices of the non-zero elements, (count, ndim) in row-major order (or a tuple of ndim (count,) tensors
    with as_tuple=True). The count is read back from the device (a sync) before the indices are built."""
    from baregrad.tensor.tensor import Tensor
    if not isinstance(input, Tensor): raise TypeError(f"nonzero: input must be a Tensor, got {type(input).__name__}")
    x = input.reshape(1) if input.ndim == 0 else input
    flag = x.ne(0).reshape(-1) if x.dtype != dtypes.bool else x.reshape(-1)
    cnt = _count(flag)
    (flat,) = _select(flag, [Tensor.arange(flag.shape[0], device=x.device, dtype=dtypes.int64)], cnt)
    coords, rest = [], flat
    for s in reversed(x.shape):
      coords.append(rest % s if s else rest)
      rest = rest // s if s else rest
    coords = coords[::-1] if input.ndim else []
    if as_tuple: return tuple(coords) if input.ndim else (Tensor.zeros(cnt, dtype=dtypes.int64, device=input.device),)
    if not coords: return Tensor.zeros(cnt, 0, dtype=dtypes.int64, device=input.device)
    return stack(coords, 1)
  def argwhere(input: Tensor) -> Tensor:
    """nonzero(input): (count, ndim) int64 indices of the non-zero elements."""
    return SortingOps.nonzero(input)
  def masked_select(input: Tensor, mask: Tensor) -> Tensor:
    """1-D tensor of input's elements where mask (bool, broadcast with input) is True, in row-major order. The count
    is read back from the device (a sync); gradients flow back to the selected elements."""
    from baregrad.tensor.tensor import Tensor
    if not isinstance(input, Tensor) or not isinstance(mask, Tensor):
      raise TypeError(f"masked_select: input and mask must be Tensors, got {type(input).__name__} and {type(mask).__name__}")
    if mask.dtype != dtypes.bool: raise RuntimeError(f"masked_select: mask must be a bool tensor, got {mask.dtype}")
    try: shape = broadcast_shape(input.shape, mask.shape)
    except (ValueError,
        RuntimeError): raise RuntimeError(f"masked_select: mask of shape {mask.shape} does not broadcast with input of shape {input.shape}") from None
    x, m = input._bcast(shape).reshape(-1), mask._bcast(shape).reshape(-1)
    return _select(m, [x], _count(m))[0]
  def unique(input: Tensor, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False, dim: int | None = None) -> Any:  # noqa: A002
    """The distinct elements of the flattened input, ascending (NaNs are each distinct, as in PyTorch), with
    optionally the inverse indices (input's shape, int64) and the counts. With dim, the distinct slices along dim
    (sorted lexicographically, first element first), the inverse indices of shape (input.shape[dim],) and the counts.
    The number of distinct values is read back from the device (a sync)."""
    from baregrad.tensor.tensor import Tensor
    if not isinstance(input, Tensor): raise TypeError(f"unique: input must be a Tensor, got {type(input).__name__}")
    if dim is not None: return _unique_dim(input, _check_dim(input, dim, "unique"), return_inverse, return_counts)
    x = input.reshape(-1)
    n = x.shape[0]
    dev = input.device
    if n == 0:
      out: list[Tensor] = [x]
      if return_inverse: out.append(Tensor.zeros(*input.shape, dtype=dtypes.int64, device=dev))
      if return_counts: out.append(Tensor.zeros(0, dtype=dtypes.int64, device=dev))
      return out[0] if len(out) == 1 else tuple(out)
    s, perm = _sort_last(x.detach(), False)
    sk = s.cast(dtypes.uint8) if s.dtype == dtypes.bool else s
    prev = sk._shrink(((0, n - 1),))._pad(((1, 0),))
    first = Tensor.arange(n, device=dev, dtype=dtypes.int32).eq(0) | sk.ne(prev)
    return _groups(s, perm, first, input.shape, return_inverse, return_counts)
