"""Reductions over axes (sum, prod, max/min with indices, mean, var/std, any/all, logsumexp), softmax and its log, argmax
and cumulative sums/products."""
from __future__ import annotations
import math
from typing import Any, TYPE_CHECKING
from baregrad.helpers import prod
from baregrad.ir.dtype import DType, dtypes
from baregrad.ir.ops import UOp, Ops
from baregrad.engine.graph import shape_of
from baregrad.tensor.gradfn import with_grad
from baregrad.tensor.recipe import method_recipe
from baregrad.tensor.common import _axis, ValuesIndices, _node
if TYPE_CHECKING: from baregrad.tensor.tensor import Tensor

def _split_factor(n: int) -> int:
  for k in (256, 128, 64, 32, 16):
    if n % k == 0 and n // k >= 256: return k
  return 0

class ReductionOps:
  """Reductions: Tensor methods (x.sum(dim), x.max(dim), x.mean(), x.softmax(-1), x.cumsum(0))."""
  __slots__ = ()   # (Tensor has slots: a base without them would give every tensor a __dict__)
  # ---- reductions
  def _axes(self, dim: Any) -> tuple[int, ...]:
    if dim is None: return tuple(range(self.ndim))
    ds = (dim,) if isinstance(dim, int) else tuple(dim)
    axes = [_axis(d, self.ndim) for d in ds]
    if len(set(axes)) != len(axes): raise RuntimeError(f"dims {ds} name an axis more than once (tensor of shape {self.shape})")
    return tuple(sorted(axes)) if self.ndim else ()
  def _reduce(self, op: Ops, dim: Any = None, keepdim: bool = False) -> Tensor:
    axes = self._axes(dim)
    whole = dim is None
    sh = shape_of(self.uop)
    out_shape = tuple([1 if i in axes else s for i, s in enumerate(sh)])
    if 0 in sh and any(sh[a] == 0 for a in axes):
      from baregrad.ir.ops import identity_element
      if op is Ops.MAX and not (dtypes.is_unsigned(self.dtype) or self.dtype == dtypes.bool):
        # PyTorch: IndexError naming the empty dim, RuntimeError when no dim was given
        if whole: raise RuntimeError(f"max/min of an empty tensor (shape {self.shape}) has no identity: specify the reduction dim")
        raise IndexError(f"max/min: Expected reduction dim {next(a for a in axes if self.shape[a] == 0)} to have non-zero size "
                         f"(shape {self.shape}, axes {axes}): an empty axis has no identity")
      # pad each empty reduced axis to one identity element: the result stays connected to self (its gradient is empty)
      arg = tuple((0, 1) if i in axes and s == 0 else (0, 0) for i, s in enumerate(self.shape))
      ident = identity_element(op, self.dtype)
      x = self._pad(arg)
      from baregrad.tensor.tensor import Tensor
      if ident != 0: x = Tensor.full(self.shape, True, dtype=dtypes.bool, device=self.device)._pad(arg).where(x, ident)
      r = x._reduce(op, axes, keepdim=True)
    elif not axes or all(self.shape[a] == 1 for a in axes): r = self
    elif prod(out_shape) == 1 and self.numel() >= 1 << 16 and (k := _split_factor(self.numel())):
      # a big full reduction runs as partial results over k rows (in parallel), then a small one over those
      part = self.reshape(k, self.numel() // k)._new(UOp(Ops.REDUCE_AXIS, self.dtype, (self.reshape(k, self.numel() // k).uop,), (op, (1,))))
      r = part._new(UOp(Ops.REDUCE_AXIS, self.dtype, (part.uop,), (op, (0,)))).reshape(out_shape)
    else:   # (the node built with its shape: (op, axes) holds no float, so it is its own hash-consing key)
      r = self._new(_node(Ops.REDUCE_AXIS, self.uop.dtype, (self.uop,), (op, axes), out_shape))
    if keepdim: return r
    new = tuple([s for i, s in enumerate(sh) if i not in axes])
    if shape_of(r.uop) == new: return r
    return r._new(_node(Ops.RESHAPE, r.uop.dtype, (r.uop,), new, new))   # (the same elements: reshape's checks hold)
  def sum(self, dim: Any = None, keepdim: bool = False, dtype: DType | None = None, axis: Any = None) -> Tensor:
    """Sum over dim (all axes when None); ints and bools sum in int64, half/bfloat16 accumulate in float32, as PyTorch."""
    dim = axis if dim is None else dim
    x = self.cast(dtype) if dtype is not None else self.cast(dtypes.int64) if (dtypes.is_int(self.dtype) or self.dtype == dtypes.bool) else self
    if x.dtype in (dtypes.float16, dtypes.bfloat16):  # accumulate in float32, as PyTorch's CPU kernels do
      return x.float()._reduce(Ops.ADD, dim, keepdim).cast(x.dtype)
    return x._reduce(Ops.ADD, dim, keepdim)
  def prod(self, dim: Any = None, keepdim: bool = False, dtype: DType | None = None, axis: Any = None) -> Tensor:
    """Product over dim (all axes when None); ints and bools multiply in int64."""
    dim = axis if dim is None else dim
    x = self.cast(dtype) if dtype is not None else self.cast(dtypes.int64) if (dtypes.is_int(self.dtype) or self.dtype == dtypes.bool) else self
    return x._reduce(Ops.MUL, dim, keepdim)
  def amax(self, dim: Any = None, keepdim: bool = False, axis: Any = None) -> Tensor:
    """Maximum over dim (an int or a tuple; all axes when None), NaN propagating; the gradient is split evenly between
    tied maxima, as torch.amax's."""
    dim = axis if dim is None else dim
    if self.dtype == dtypes.bool: return self.cast(dtypes.uint8)._reduce(Ops.MAX, dim, keepdim).bool()
    return self._reduce(Ops.MAX, dim, keepdim)
  def amin(self, dim: Any = None, keepdim: bool = False, axis: Any = None) -> Tensor:
    """Minimum over dim (an int or a tuple; all axes when None), NaN propagating; ties split the gradient, as torch.amin's."""
    dim = axis if dim is None else dim
    if self.dtype == dtypes.bool: return self.logical_not().amax(dim, keepdim).logical_not()
    # ints: ~x reverses the order without overflow (-x of the most negative int is itself)
    if not dtypes.is_float(self.dtype): return self.bitwise_not().amax(dim, keepdim).bitwise_not()
    return -((-self).amax(dim, keepdim))
  def _max_min(self, dim: Any, keepdim: bool, axis: Any, largest: bool) -> Any:
    if dim is not None and axis is not None and dim is not axis and dim != axis: raise TypeError(f"got both dim={dim} and axis={axis}")
    dim = axis if dim is None else dim
    red = self.amax if largest else self.amin
    if dim is None:
      if keepdim: raise TypeError(f"{'max' if largest else 'min'}(): keepdim=True needs a dim")
      return red()
    from baregrad.tensor.tensor import Tensor
    if isinstance(dim, Tensor): return self.maximum(dim) if largest else self.minimum(dim)   # torch.max(input, other)
    # several axes (tinygrad's reduction over a tuple; PyTorch refuses it): the values alone
    if isinstance(dim, (tuple, list)): return red(tuple(dim), keepdim)
    d = _axis(dim, self.ndim)
    if self.ndim == 0: return ValuesIndices(red(), Tensor.zeros((), dtype=dtypes.int64, device=self.device))
    if self.shape[d] == 0:
      raise IndexError(f"{'max' if largest else 'min'}(): Expected reduction dim {dim} to have non-zero size (shape {self.shape})")
    idx = self.argmax(d, keepdim=True) if largest else self.argmin(d, keepdim=True)
    vals = red(d, keepdim=True)
    if self.requires_grad:
      # the gradient goes to the element the index names (PyTorch's rule), not split between ties as amax's
      pick = Tensor.arange(self.shape[d], device=self.device, dtype=dtypes.int64).reshape((self.shape[d],) + (1,) * (self.ndim - d - 1)).eq(idx)
      vals = with_grad(vals, (self, pick, (d,)))
    if not keepdim: vals, idx = vals.squeeze(d), idx.squeeze(d)
    return ValuesIndices(vals, idx)
  def max(self, dim: Any = None, keepdim: bool = False, axis: Any = None) -> Any:
    """max(): the maximum of all elements (a 0-d tensor). max(dim, keepdim): (values, indices) along dim as
    torch.return_types.max (the first maximum's index; NaN counts as the maximum; the gradient goes to that index);
    axis= is accepted for dim. max(other_tensor) is maximum(); a tuple of dims gives the values alone (amax)."""
    return self._max_min(dim, keepdim, axis, True)
  def min(self, dim: Any = None, keepdim: bool = False, axis: Any = None) -> Any:
    """min(): the minimum of all elements (a 0-d tensor). min(dim, keepdim): (values, indices) along dim as
    torch.return_types.min; axis= is accepted for dim; min(other_tensor) is minimum(); a tuple of dims gives amin."""
    return self._max_min(dim, keepdim, axis, False)
  def mean(self, dim: Any = None, keepdim: bool = False, axis: Any = None) -> Tensor:
    """Mean over dim (all axes when None), in float (ints compute in float32); NaN for an empty reduction."""
    dim = axis if dim is None else dim
    x = self._float()
    n = prod(x.shape[a] for a in x._axes(dim))
    s = x.sum(dim, keepdim=True)
    out = s * (1.0 / n) if n else s * math.nan
    return out if keepdim else out.reshape(tuple(sz for i, sz in enumerate(x.shape) if i not in x._axes(dim)))
  def var(self, dim: Any = None, keepdim: bool = False, correction: int = 1, axis: Any = None, unbiased: bool | None = None) -> Tensor:
    """Variance over dim with correction (1: unbiased); divides by max(0, n - correction), so too few elements give NaN or inf, as PyTorch."""
    dim = axis if dim is None else dim
    if unbiased is not None: correction = int(unbiased)
    x = self._float()
    n = prod(x.shape[a] for a in x._axes(dim))
    xc = x.detach() - x.detach().mean(dim, keepdim=True)
    # PyTorch divides by max(0, n - correction): 0/0 (one element) is NaN, a positive sum over 0 is inf; its gradient
    # 2 (x - mean) / max(0, n - correction) is given directly (a derived one would meet inf - inf there)
    den = max(0, n - correction)
    return with_grad(xc.square().sum(dim, keepdim=keepdim) / den, (x, 2.0 * xc / den, x._axes(dim)))
  def std(self, dim: Any = None, keepdim: bool = False, correction: int = 1, axis: Any = None, unbiased: bool | None = None) -> Tensor:
    """Standard deviation over dim (see var); its gradient is 0, not NaN, where the variance is 0."""
    v = self.var(dim, keepdim, correction, axis, unbiased)
    # where the variance is 0, sqrt's gradient is inf and 0 * inf made NaN; PyTorch's std gives 0 there
    zero = v.eq(0)
    return zero.where(0.0, zero.where(1.0, v).sqrt())
  def var_mean(self, dim: Any = None, keepdim: bool = False, correction: int = 1) -> tuple[Tensor, Tensor]:
    """(var, mean) over dim."""
    return self.var(dim, keepdim, correction), self.mean(dim, keepdim)
  def std_mean(self, dim: Any = None, keepdim: bool = False, correction: int = 1) -> tuple[Tensor, Tensor]:
    """(std, mean) over dim."""
    return self.std(dim, keepdim, correction), self.mean(dim, keepdim)
  def any(self, dim: Any = None, keepdim: bool = False) -> Tensor:
    """True where any element over dim is non-zero (bool)."""
    return self.bool().amax(dim, keepdim)
  def all(self, dim: Any = None, keepdim: bool = False) -> Tensor:
    """True where every element over dim is non-zero (bool)."""
    return self.logical_not().any(dim, keepdim).logical_not()
  @method_recipe("logsumexp")
  def logsumexp(self, dim: Any = None, keepdim: bool = False) -> Tensor:
    """log(sum(exp(x))) over dim, computed after subtracting the maximum (no overflow)."""
    x = self._float()
    m = x.amax(dim, keepdim=True).detach()
    m = m.isinf().where(0.0, m)
    out = (x - m).exp().sum(dim, keepdim=True).log() + m
    return out if keepdim else out.squeeze_axes(x._axes(dim))
  def squeeze_axes(self, axes: tuple[int, ...]) -> Tensor:
    """The given size-1 axes removed."""
    return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))
  @method_recipe("softmax")
  def softmax(self, dim: int = -1, dtype: Any = None, axis: int | None = None) -> Tensor:
    """exp(x) / sum(exp(x)) along dim (axis= accepted too); ints compute in the default float dtype."""
    dim = dim if axis is None else axis
    x = self.cast(dtype) if dtype else self._float()
    e = (x - x.amax(dim, keepdim=True).detach()).exp()
    return e / e.sum(dim, keepdim=True)
  @method_recipe("log_softmax")
  def log_softmax(self, dim: int = -1, dtype: Any = None, axis: int | None = None) -> Tensor:
    """x - logsumexp(x) along dim (axis= accepted too), computed after subtracting the maximum."""
    dim = dim if axis is None else axis
    x = self.cast(dtype) if dtype else self._float()
    m = x - x.amax(dim, keepdim=True).detach()
    return m - m.exp().sum(dim, keepdim=True).log()
  def argmax(self, dim: int | None = None, keepdim: bool = False, axis: int | None = None) -> Tensor:
    """int64 index of the first maximum along dim (axis= accepted too), of the flattened tensor when dim is None; NaN counts as the maximum."""
    dim = dim if axis is None else axis
    if dim is None: return self.reshape(-1).argmax(0)
    d = _axis(dim, self.ndim)
    n = self.shape[d]
    m = self.amax(d, keepdim=True)
    # the first index of the maximum: largest (n - i) where x == max
    from baregrad.tensor.tensor import Tensor
    idx = Tensor.arange(n, 0, -1, device=self.device, dtype=dtypes.int32).reshape((n,) + (1,) * (self.ndim - d - 1))
    hit = (self.eq(m) | self.isnan() if dtypes.is_float(self.dtype) else self.eq(m)).where(idx._bcast_to(self.shape), 0)
    return (n - hit.amax(d, keepdim=keepdim)).cast(dtypes.int64)
  def _bcast_to(self, shape: tuple[int, ...]) -> Tensor:
    return self.reshape((1,) * (len(shape) - self.ndim) + self.shape).expand(shape)
  def argmin(self, dim: int | None = None, keepdim: bool = False, axis: int | None = None) -> Tensor:
    """int64 index of the first minimum along dim (axis= accepted too), of the flattened tensor when dim is None."""
    dim = dim if axis is None else axis
    if dtypes.is_float(self.dtype): return (-self).argmax(dim, keepdim)
    return self.bitwise_not().argmax(dim, keepdim)  # ints: no overflow, unlike -x; bools: logical_not
  def cumsum(self, dim: int = 0, dtype: Any = None, axis: int | None = None) -> Tensor:
    """Running sum along dim (axis= accepted too); ints and bools sum in int64, as in PyTorch. Axes up to 256 long are
    one masked-sum kernel (n^2 work); longer ones a log-step scan (scan.py)."""
    dim = dim if axis is None else axis
    if dtype is not None: return self.cast(dtype).cumsum(dim)
    d = _axis(dim, self.ndim)
    if self.ndim == 0: return self.cast(dtypes.int64) if not dtypes.is_float(self.dtype) else self * 1
    n = self.shape[d]
    if n == 0: return self
    if n > 256:  # the masked sum costs n^2 per row: a log-step scan instead (scan.py)
      from baregrad.tensor.ops.scan import cumsum_scan
      x = self.cast(dtypes.int64) if not dtypes.is_float(self.dtype) else self.float() if self.dtype in (dtypes.float16, dtypes.bfloat16) else self
      return cumsum_scan(x, d).cast(self.dtype if dtypes.is_float(self.dtype) else dtypes.int64)
    x = self.transpose(d, -1) if d != self.ndim - 1 else self
    # each output i sums x[0..i]: a lower-triangular mask times the rows, reduced
    from baregrad.tensor.tensor import Tensor
    tri = Tensor.arange(n, device=self.device).reshape(n, 1) >= Tensor.arange(n, device=self.device).reshape(1, n)
    s = (x.unsqueeze(-2) * tri.cast(x.dtype if x.dtype != dtypes.bool else dtypes.int64)).sum(-1)
    return s.transpose(d, -1) if d != self.ndim - 1 else s
  def cumprod(self, dim: int = 0, dtype: Any = None, axis: int | None = None) -> Tensor:
    """Running product along dim (axis= accepted too); ints and bools multiply in int64, as in PyTorch."""
    dim = dim if axis is None else axis
    if dtype is not None: return self.cast(dtype).cumprod(dim)
    d = _axis(dim, self.ndim)
    if self.ndim == 0: return self.cast(dtypes.int64) if not dtypes.is_float(self.dtype) else self * 1
    n = self.shape[d]
    x = self.transpose(d, -1) if d != self.ndim - 1 else self
    from baregrad.tensor.tensor import Tensor
    tri = Tensor.arange(n, device=self.device).reshape(n, 1) >= Tensor.arange(n, device=self.device).reshape(1, n)
    s = tri.where(x.unsqueeze(-2), 1).prod(-1)
    return s.transpose(d, -1) if d != self.ndim - 1 else s
