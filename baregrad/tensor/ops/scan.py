"""Scans along an axis: cummax, cummin, logcumsumexp, and cumsum/cumprod of long axes.

An inclusive scan in log2(n) steps (Hillis & Steele, 1986): step s combines every element with the one s places
before it (the first s with the operation's identity). Each step is one elementwise kernel; the shift is a padded view
of the previous step, which the scheduler realizes, so forward and backward both stay log2(n) small kernels instead
of one expression that doubles with every step. O(n log n) work, against O(n^2) for the masked sum Tensor.cumsum
uses on short axes. The scan's association order differs from a sequential loop, so float sums can differ from
PyTorch's in the last bits.

cummax/cummin carry (value, index) pairs: a later element wins ties and NaN wins over numbers (a later NaN over an
earlier one), which is PyTorch's rule; values are selected (where), so the gradient of each output goes to the
index it reports, as PyTorch's does."""
from __future__ import annotations
from typing import Any, Callable, TYPE_CHECKING
from baregrad.ir.dtype import dtypes
from baregrad.tensor.common import ValuesIndices, _axis
if TYPE_CHECKING: from baregrad.tensor.tensor import Tensor

def _shift(x: Tensor, s: int, fill: Any) -> Tensor:
  """x moved s places later along the last axis, the first s places holding fill."""
  from baregrad.tensor.tensor import Tensor
  n = x.shape[-1]
  keep = tuple((0, d) for d in x.shape[:-1])
  y = x._shrink(keep + ((0, n - s),))._pad(((0, 0),) * (x.ndim - 1) + ((s, 0),))
  if fill == 0: return y
  mask = Tensor.full(x.shape[:-1] + (n - s,), True, dtype=dtypes.bool, device=x.device)._pad(((0, 0),) * (x.ndim - 1) + ((s, 0),))
  return mask.where(y, Tensor.full((), fill, dtype=x.dtype, device=x.device))

def scan(xs: list[Tensor], combine: Callable[[list[Tensor], list[Tensor]], list[Tensor]], fills: list[Any]) -> list[Tensor]:
  """Inclusive scan along the last axis of tensors of one shape: combine(earlier, later) -> combined, associative,
  with fills its identity."""
  from baregrad.tensor.tensor import Tensor
  n, s = xs[0].shape[-1], 1
  while s < n:
    xs = combine([_shift(x, s, f) for x, f in zip(xs, fills)], xs)
    xs = [x.contiguous() for x in xs]
    Tensor.realize(*xs)
    s *= 2
  return xs

def _along(x: Tensor, dim: int, name: str) -> tuple[Tensor, int]:
  from baregrad.tensor.tensor import Tensor
  if not isinstance(x, Tensor): raise TypeError(f"{name}: input must be a Tensor, got {type(x).__name__}")
  if not isinstance(dim, int) or isinstance(dim, bool): raise TypeError(f"{name}: dim must be an int, got {type(dim).__name__} {dim!r}")
  d = _axis(dim, x.ndim)
  return (x.transpose(d, -1) if x.ndim and d != x.ndim - 1 else x), d

def _back(y: Tensor, x: Tensor, d: int) -> Tensor: return y.transpose(d, -1) if x.ndim and d != x.ndim - 1 else y

def _cumext(x: Tensor, dim: int, largest: bool, name: str) -> ValuesIndices:
  from baregrad.tensor.tensor import Tensor
  xt, d = _along(x, dim, name)
  if x.ndim == 0: return ValuesIndices(x * 1 if x.dtype != dtypes.bool else x, Tensor.zeros((), dtype=dtypes.int64, device=x.device))
  v = xt.cast(dtypes.uint8) if x.dtype == dtypes.bool else xt
  n = v.shape[-1]
  if n == 0: return ValuesIndices(x, Tensor.zeros(x.shape, dtype=dtypes.int64, device=x.device))
  idx = Tensor.arange(n, device=x.device, dtype=dtypes.int32)._bcast(v.shape)
  worst = dtypes.min(v.dtype) if largest else dtypes.max(v.dtype)
  def combine(early: list[Tensor], late: list[Tensor]) -> list[Tensor]:
    (ev, ei), (lv, li) = early, late
    take = (lv >= ev) if largest else (lv <= ev)
    if dtypes.is_float(v.dtype): take = take | lv.isnan()
    return [take.where(lv, ev), take.where(li, ei)]
  vals, inds = scan([v, idx], combine, [worst, -1])
  if x.dtype == dtypes.bool: vals = vals.cast(dtypes.bool)
  return ValuesIndices(_back(vals, x, d), _back(inds.cast(dtypes.int64), x, d))

def cumsum_scan(x: Tensor, d: int) -> Tensor:
  """Running sum along axis d by the log-step scan (x already in its result dtype)."""
  xt = x.transpose(d, -1) if d != x.ndim - 1 else x
  (out,) = scan([xt], lambda e, l: [e[0] + l[0]], [0])
  return out.transpose(d, -1) if d != x.ndim - 1 else out

class ScanOps:
  """Scans along an axis with (value, index) results or a log-sum: Tensor methods (x.cummax(dim), x.logcumsumexp(dim))."""
  __slots__ = ()   # (Tensor has slots: a base without them would give every tensor a __dict__)
  def cummax(input: Tensor, dim: int, axis: int | None = None) -> ValuesIndices:
    """(running maximum, int64 index of the element it came from) along dim; ties and NaNs report the latest index."""
    return _cumext(input, dim if axis is None else axis, True, "cummax")
  def cummin(input: Tensor, dim: int, axis: int | None = None) -> ValuesIndices:
    """(running minimum, int64 index of the element it came from) along dim; ties and NaNs report the latest index."""
    return _cumext(input, dim if axis is None else axis, False, "cummin")
  def logcumsumexp(input: Tensor, dim: int, axis: int | None = None) -> Tensor:
    """log(cumsum(exp(x))) along dim without overflow: a scan of logaddexp (float; ints compute in the default float)."""
    xt, d = _along(input, dim if axis is None else axis, "logcumsumexp")
    x = xt._float()
    if input.ndim == 0 or x.shape[-1] == 0: return _back(x * 1, input, d)
    (out,) = scan([x], lambda e, l: [e[0].logaddexp(l[0])], [float("-inf")])
    return _back(out, input, d)
