"""Movement ops: views that change the shape or the order of elements (reshape, permute, expand, pad, shrink, flip, ...);
they build view nodes, no copy."""
from __future__ import annotations
from typing import Any, Sequence, TYPE_CHECKING
import numpy as np
from baregrad.helpers import prod
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import UOp, Ops
from baregrad.engine.graph import permute_uop
from baregrad.ir.view import moved_shape, ViewError
from baregrad.ir.sint import has_sym, is_sym, max_shape, sym_eq
from baregrad.tensor.common import MAX_NUMEL, _axis, _shape_arg, _node
if TYPE_CHECKING: from baregrad.tensor.tensor import Tensor

class MovementOps:
  """Movement: Tensor methods (x.reshape(2, -1), x.permute(1, 0), x.expand(4, 3), x.pad((1, 1)))."""
  __slots__ = ()   # (Tensor has slots: a base without them would give every tensor a __dict__)
  # ---- movement
  def reshape(self, *shape: Any) -> Tensor:
    """The same elements in a new shape (one -1 is inferred); a view, never a copy (PyTorch copies when it cannot view)."""
    shape = _shape_arg(shape)
    if shape.count(-1) > 1: raise RuntimeError(f"reshape {shape}: only one dimension can be inferred (-1)")
    if has_sym(shape) or has_sym(self.shape): return self._reshape_sym(shape)
    if any(s < -1 for s in shape): raise RuntimeError(f"reshape {shape}: invalid shape dimension {min(shape)}")
    if -1 in shape:
      known = prod(s for s in shape if s != -1)
      if known == 0 or self.numel() % known: raise RuntimeError(f"cannot reshape {self.shape} ({self.numel()} elements) to {shape}")
      shape = tuple(self.numel() // known if s == -1 else s for s in shape)
    if prod(shape) != self.numel(): raise RuntimeError(f"cannot reshape tensor of shape {self.shape} ({self.numel()} elements) to {shape} ({prod(shape)} "
        f"elements)")
    if shape == self.shape: return self
    return self._new(_node(Ops.RESHAPE, self.dtype, (self.uop,), shape, shape))   # (shape checked above: none inferred)
  def _reshape_sym(self, shape: tuple) -> Tensor:
    # symbolic sizes (ir/sint.py) stay axes of their own, in order; a -1 is what the int sizes leave
    if -1 in shape:
      known = prod(s for s in shape if s != -1 and not is_sym(s))
      have = prod(s for s in self.shape if not is_sym(s))
      if known == 0 or have % known: raise RuntimeError(f"cannot reshape {self.shape} to {shape}")
      shape = tuple(have // known if s == -1 else s for s in shape)
    try: moved_shape(self.shape, "reshape", shape)
    except ViewError as e: raise RuntimeError(f"reshape: {e}") from None
    if shape == self.shape: return self
    return self._new(_node(Ops.RESHAPE, self.dtype, (self.uop,), shape, shape))
  def permute(self, *order: Any) -> Tensor:
    """The axes reordered (a view): out.shape[i] == self.shape[order[i]]."""
    order = _shape_arg(order)
    nd = self.ndim
    o = tuple(_axis(a, nd) for a in order)
    if sorted(o) != list(range(nd)): raise RuntimeError(f"permute {order} is not a permutation of {nd} axes of shape {self.shape}")
    if o == tuple(range(nd)): return self
    return self._new(permute_uop(self.uop, o))
  def transpose(self, dim0: int = -2, dim1: int = -1) -> Tensor:
    """Axes dim0 and dim1 swapped (a view); defaults to the last two."""
    o = list(range(self.ndim))
    a, b = _axis(dim0, self.ndim), _axis(dim1, self.ndim)
    o[a], o[b] = o[b], o[a]
    return self.permute(*o)
  def expand(self, *shape: Any) -> Tensor:
    """Size-1 axes broadcast to the given sizes (-1 keeps a size; new axes go in front); a view."""
    shape = _shape_arg(shape)
    if len(shape) < self.ndim: raise RuntimeError(f"expand to {shape}: fewer axes than the tensor's shape {self.shape}")
    x = self.reshape((1,) * (len(shape) - self.ndim) + self.shape) if len(shape) > self.ndim else self
    lead = len(shape) - self.ndim
    for i, s in enumerate(shape):   # (-1 keeps an existing size; a new axis has none to keep)
      if not is_sym(s) and (s < -1 or (s == -1 and i < lead)):
        raise RuntimeError(f"expand to {shape}: invalid size {s} at axis {i} (sizes are >= 0; -1 only for an existing axis)")
    new = tuple(x.shape[i] if s == -1 else s for i, s in enumerate(shape))
    if prod(max_shape(new)) > MAX_NUMEL: raise RuntimeError(f"expand to {shape}: {prod(max_shape(new))} elements overflow (at most {MAX_NUMEL})")
    for a, b in zip(x.shape, new):
      if not sym_eq(a, b) and a != 1: raise RuntimeError(f"cannot expand shape {self.shape} to {shape}: only size-1 axes expand")
    if new == x.shape: return x
    return x._new(_node(Ops.EXPAND, x.dtype, (x.uop,), new, new))   # (checked above)
  def expand_as(self, other: Tensor) -> Tensor:
    """expand() to other's shape."""
    return self.expand(other.shape)
  def _pad(self, arg: tuple[tuple[int, int], ...]) -> Tensor:
    if all(a == (0, 0) for a in arg): return self
    return self._new(UOp(Ops.PAD, self.dtype, (self.uop,), tuple(arg)))
  def shrink(self, arg: Sequence[tuple[Any, Any] | None]) -> Tensor:
    """The part [lo, hi) along each axis (None: the whole axis), a view. A bound may be symbolic: an expression of a
    bound variable (`Variable("pos", 0, 1023).bind(n)`, ir/sint.py), which makes one kernel serve every n."""
    if len(arg) != self.ndim: raise RuntimeError(f"shrink: {len(arg)} (lo, hi) pairs for a tensor of {self.ndim} dims (shape {self.shape})")
    full = tuple((0, s) if a is None else (a[0], a[1]) for a, s in zip(arg, self.shape))
    moved_shape(self.shape, "shrink", full)   # (out of range: the error names the shape)
    return self._shrink(full)
  def _shrink(self, arg: tuple[tuple[int, int], ...]) -> Tensor:
    if all(a == (0, s) for a, s in zip(arg, self.shape)): return self
    return self._new(UOp(Ops.SHRINK, self.dtype, (self.uop,), tuple(arg)))
  def flip(self, *dims: Any) -> Tensor:
    """The elements in reverse order along the given axes (a view)."""
    dims = _shape_arg(dims)
    axl = [_axis(d, self.ndim) for d in dims]
    if len(set(axl)) != len(axl): raise RuntimeError(f"flip: a dim appears multiple times in the list of dims {dims}")
    ax = set(axl)
    if not ax: return self
    return self._new(UOp(Ops.FLIP, self.dtype, (self.uop,), tuple(i in ax for i in range(self.ndim))))
  def pad(self, pad: Sequence[Any], mode: str = "constant", value: float | None = None) -> Tensor:
    """Pad (negative amounts crop). PyTorch's flat form: (left, right) for the last axis, then (top, bottom) for the
    one before, ...; or tinygrad's form: one (before, after) pair or None per axis. mode 'constant' (value, default
    0), 'reflect', 'replicate' or 'circular' (see functional.pad)."""
    if len(pad) and all(p is None or isinstance(p, (tuple, list)) for p in pad):  # tinygrad: ((before, after) | None, ...) per axis
      if len(pad) != self.ndim: raise RuntimeError(f"pad: {len(pad)} (before, after) pairs for a tensor of {self.ndim} dimensions (shape {self.shape})")
      pad = [v for p in reversed(pad) for v in (tuple(p) if p is not None else (0, 0))]
    if len(pad) % 2: raise RuntimeError(f"pad {tuple(pad)}: padding length must be divisible by 2")
    if len(pad) // 2 > self.ndim: raise RuntimeError(f"pad {tuple(pad)}: padding length must be at most 2*{self.ndim} (two per dimension of shape "
        f"{self.shape})")
    if any(isinstance(p, bool) or not isinstance(p, (int, np.integer)) for p in pad): raise TypeError(f"pad {tuple(pad)}: sizes must be ints")
    if mode != "constant":
      from baregrad.tensor.ops.shape import pad as fpad
      if value is not None: raise RuntimeError(f"pad: padding mode {mode!r} doesn't take in value argument (got value={value})")
      return fpad(self, pad, mode)
    value = 0.0 if value is None else value
    arg = [(0, 0)] * self.ndim
    for i in range(len(pad) // 2): arg[self.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    if has_sym(self.shape): raise RuntimeError(f"pad of a tensor with symbolic sizes (shape {self.shape}) is not supported: pad before the symbolic slice")
    # negative padding crops
    crop = tuple((max(0, -b), s - max(0, -a)) for (b, a), s in zip(arg, self.shape))
    if any(lo > hi for lo, hi in crop): raise RuntimeError(f"pad {tuple(pad)}: negative padding crops more than the size of shape {self.shape}")
    x = self._shrink(crop)
    arg2 = tuple((max(0, b), max(0, a)) for b, a in arg)
    out = x._pad(arg2)
    if value != 0:
      from baregrad.tensor.tensor import Tensor
      ones = Tensor.full(x.shape, True, dtype=dtypes.bool, device=self.device)._pad(arg2)
      out = ones.where(out, value)
    return out
  def squeeze(self, dim: int | None = None) -> Tensor:
    """Remove axes of size 1 (all, or those named by dim, an int or a tuple)."""
    if dim is None: return self.reshape(tuple(s for s in self.shape if s != 1))
    ds = {_axis(d, self.ndim) for d in ((dim,) if isinstance(dim, int) else dim)}  # PyTorch >= 2.0 takes a tuple
    return self.reshape(tuple(s for i, s in enumerate(self.shape) if not (i in ds and s == 1)))
  def unsqueeze(self, dim: int) -> Tensor:
    """A new axis of size 1 inserted at dim."""
    d = _axis(dim, self.ndim + 1)
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])
  def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Axes start_dim..end_dim merged into one (a 0-d tensor becomes 1-D)."""
    if self.ndim == 0: return self.reshape(1)
    s, e = _axis(start_dim, self.ndim), _axis(end_dim, self.ndim)
    return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])
  def unflatten(self, dim: int, sizes: Sequence[int]) -> Tensor:
    """Axis dim split into the given sizes."""
    d = _axis(dim, self.ndim)
    return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d + 1:])
  view = reshape
