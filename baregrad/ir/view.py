"""Views: movement ops (reshape, permute, expand, pad, shrink, flip) as index arithmetic, never copies.

A View maps an index tuple into a flat buffer offset: offset + sum(i*stride), valid only inside `mask` (padding).
A ShapeTracker is a stack of Views, for reshapes one View cannot express; the last View is the visible shape."""
from __future__ import annotations
from dataclasses import dataclass
from typing import Any
import functools
from baregrad.helpers import prod
from baregrad.ir.dtype import DType, dtypes
from baregrad.ir.ops import UOp, Ops
from baregrad.ir.sint import sint, is_sym, has_sym, norm, smax, sym_eq, sym_le, sym_prod_eq

def strides_for_shape(shape: tuple[sint, ...]) -> tuple[int, ...]:
  """Row-major strides; a symbolic size strides as its largest value (ir/sint.py: memory holds the largest shape)."""
  out, acc = [], 1
  for s in reversed(shape):
    out.append(acc if s != 1 else 0)
    acc *= smax(s)
  return tuple(reversed(out))

def _symbolic_unsupported(what: str, shape: tuple, arg: Any = None) -> ViewError:
  return ViewError(f"{what} of a view with symbolic sizes (shape {shape}{'' if arg is None else f', {arg}'}) is not supported: "
                   f"make the value contiguous first, or keep symbolic sizes to shrink, expand, permute and reshapes that keep them")

class ViewError(ValueError): pass

def moved_shape(shape: tuple[sint, ...], op: str, arg: Any) -> tuple[sint, ...]:
  """The shape after movement `op` ("reshape", "expand", "permute", "shrink", "pad", "flip") with `arg` of a value of
  `shape`; ViewError naming what is wrong where the movement is invalid. The views check through it, and shape
  inference reads shapes off it without building a view."""
  if op in ("reshape", "expand") and any(not (isinstance(x, UOp) and x.vmin >= 0) and (not isinstance(x, int) or x < 0) for x in arg):
    raise ViewError(f"shape must be non-negative ints, got {arg}")
  if op == "reshape":
    if has_sym(shape) or has_sym(arg):
      if not sym_prod_eq(tuple(shape), tuple(arg)):
        raise ViewError(f"cannot reshape {shape} to {arg}: a reshape keeps each symbolic size as an axis of its own, in order")
    elif prod(arg) != prod(shape): raise ViewError(f"cannot reshape {shape} ({prod(shape)} elements) to {arg} ({prod(arg)} elements)")
    return tuple(arg)
  if op == "expand":
    if len(arg) != len(shape) or any(not sym_eq(s, n) and s != 1 for s, n in zip(shape, arg)):
      raise ViewError(f"cannot expand shape {shape} to {arg}: only size-1 axes expand")
    return tuple(arg)
  if op == "permute":
    if sorted(arg) != list(range(len(shape))): raise ViewError(f"permute order {arg} is not a permutation of {len(shape)} axes")
    return tuple(shape[i] for i in arg)
  if op == "shrink":
    if len(arg) != len(shape) or any(not (sym_le(0, lo) and sym_le(lo, hi) and sym_le(hi, s)) for (lo, hi), s in zip(arg, shape)):
      raise ViewError(f"shrink {arg} out of range for shape {shape}")
    return tuple(hi - lo if isinstance(hi, int) and isinstance(lo, int) else norm(hi - lo) for lo, hi in arg)
  if op == "pad":
    if len(arg) != len(shape) or any(not (sym_le(0, b) and sym_le(0, a)) for b, a in arg):
      raise ViewError(f"pad {arg} is not one non-negative (before, after) per axis of {shape}")
    return tuple(s + b + a if isinstance(s, int) and isinstance(b, int) and isinstance(a, int) else norm(s + b + a) for s, (b, a) in zip(shape, arg))
  if op == "flip": return tuple(shape)
  raise ViewError(f"{op} is not a movement")

@dataclass(frozen=True)
class View:
  shape: tuple[sint, ...]     # (sizes may be symbolic, ir/sint.py; strides never are)
  strides: tuple[int, ...]
  offset: sint = 0
  mask: tuple[tuple[sint, sint], ...] | None = None

  @staticmethod
  def contiguous(shape: tuple[sint, ...]) -> View:
    """Row-major over `shape`; with symbolic sizes, the leading corner of the largest shape's layout (ir/sint.py)."""
    if any(not is_sym(s) and (not isinstance(s, int) or s < 0) for s in shape): raise ViewError(f"shape must be non-negative ints, got {shape}")
    return View(tuple(shape), strides_for_shape(tuple(shape)), 0, None)
  @property
  def is_contiguous(self) -> bool: return self.offset == 0 and self.mask is None and self.strides == strides_for_shape(self.shape)
  def size(self) -> int: return prod(self.shape)

  def _canon(self) -> View:
    # stride of a size-1 dim is meaningless; a mask covering everything is no mask
    strides = tuple(0 if s == 1 else st for s, st in zip(self.shape, self.strides))
    mask = self.mask
    if mask is not None and all(m == (0, s) for m, s in zip(mask, self.shape)): mask = None
    if mask is not None and any(sym_le(hi, lo) for lo, hi in mask):  # nothing valid: canonical empty mask
      mask = tuple((0, 0) for _ in self.shape)
    return View(self.shape, strides, self.offset, mask)

  def permute(self, order: tuple[int, ...]) -> View:
    moved_shape(self.shape, "permute", order)
    return View(tuple(self.shape[i] for i in order), tuple(self.strides[i] for i in order), self.offset,
                tuple(self.mask[i] for i in order) if self.mask else None)._canon()

  def expand(self, shape: tuple[int, ...]) -> View:
    moved_shape(self.shape, "expand", shape)
    if 0 in shape: return View.contiguous(shape)
    mask = tuple((0, n) if s == 1 and m != (0, 0) else (m if s == n else (0, 0)) for s, n, m in
                 zip(self.shape, shape, self.mask)) if self.mask else None
    return View(tuple(shape), tuple(0 if s == 1 else st for s, st in zip(self.shape, self.strides)), self.offset, mask)._canon()

  def shrink(self, arg: tuple[tuple[sint, sint], ...]) -> View:
    shape = moved_shape(self.shape, "shrink", arg)
    if self.mask and (has_sym(self.shape) or any(is_sym(x) for a in arg for x in a)): raise _symbolic_unsupported("shrink of a padded", self.shape, arg)
    if has_sym(shape) or is_sym(self.offset) or any(is_sym(lo) for lo, _ in arg):
      # (a symbolic offset: the start of a slice at a variable position, a KV cache's write at start_pos)
      return View(shape, self.strides, norm(self.offset + sum(lo * st for (lo, _), st in zip(arg, self.strides))), None)._canon()
    off = self.offset + sum(lo * st for (lo, _), st in zip(arg, self.strides))
    mask = tuple((max(0, mlo - lo), max(0, min(mhi, hi) - lo)) for (mlo, mhi), (lo, hi) in zip(self.mask, arg)) if self.mask else None  # type: ignore[type-var]
    return View(tuple(hi - lo for lo, hi in arg), self.strides, off, mask)._canon()

  def pad(self, arg: tuple[tuple[int, int], ...]) -> View:
    moved_shape(self.shape, "pad", arg)
    if all(b == 0 and a == 0 for b, a in arg): return self
    if has_sym(self.shape) or any(is_sym(x) for a in arg for x in a): raise _symbolic_unsupported("pad", self.shape, arg)
    mask = self.mask or tuple((0, s) for s in self.shape)
    new_mask = tuple((lo + b, hi + b) for (lo, hi), (b, _) in zip(mask, arg))
    off = self.offset - sum(b * st for (b, _), st in zip(arg, self.strides))
    return View(tuple(s + b + a for s, (b, a) in zip(self.shape, arg)), self.strides, off, new_mask)._canon()

  def flip(self, axes: tuple[bool, ...]) -> View:
    if has_sym(self.shape) and self.mask: raise _symbolic_unsupported("flip of a padded", self.shape)
    if has_sym(self.shape):
      off_s = self.offset + sum((s - 1) * st for s, st, f in zip(self.shape, self.strides, axes) if f and smax(s) > 0)
      return View(self.shape, tuple(-st if f else st for st, f in zip(self.strides, axes)), norm(off_s), None)._canon()
    off = self.offset + sum((s - 1) * st for s, st, f in zip(self.shape, self.strides, axes) if f and s > 0)
    mask = tuple((s - hi, s - lo) if f else (lo, hi) for (lo, hi), s, f in zip(self.mask, self.shape, axes)) if self.mask else None
    return View(self.shape, tuple(-st if f else st for st, f in zip(self.strides, axes)), off, mask)._canon()

  def reshape(self, shape: tuple[int, ...]) -> View | None:
    """The same elements in a new shape as ONE view, or None when a single view can't express it."""
    moved_shape(self.shape, "reshape", shape)
    if self.shape == shape: return self
    if 0 in shape or self.is_contiguous: return View.contiguous(shape)._with_offset(self.offset)
    # drop size-1 axes (any mask on them must be full, or the view is empty)
    if self.mask and any(s == 1 and m != (0, 1) for s, m in zip(self.shape, self.mask)): return None
    dims = [(s, st, m) for s, st, m in zip(self.shape, self.strides, self.mask or [(0, s) for s in self.shape]) if s != 1]
    # merge runs of old axes that are contiguous with each other, then split them into the new axes
    groups: list[list] = []  # [size, stride of innermost, mask of merged axis or None if unmergeable]
    for s, st, m in dims:
      if groups and groups[-1][1] == st * s and groups[-1][3] is None and m == (0, s) and groups[-1][2] == (0, groups[-1][0]):
        g = groups[-1]; g[0] *= s; g[1] = st; g[2] = (0, g[0])
      else: groups.append([s, st, m, None])
    new_strides, new_mask, gi = [], [], 0
    rem = [g[0] for g in groups]
    for n in shape:
      if n == 1: new_strides.append(0); new_mask.append((0, 1)); continue
      if gi >= len(groups): return None
      g = groups[gi]
      if is_sym(rem[gi]) or is_sym(n):   # a symbolic size stays one axis of its own (moved_shape checked the order)
        if not sym_eq(rem[gi], n): return None
        new_strides.append(g[1]); new_mask.append(g[2] if g[2] != (0, g[0]) else (0, n))
        rem[gi] = 1; gi += 1
        continue
      if rem[gi] % n != 0: return None
      rem[gi] //= n
      # a masked group can only be kept whole (no split), else masks would need several views
      if g[2] != (0, g[0]) and (rem[gi] != 1 or n != g[0]): return None
      new_strides.append(g[1] * rem[gi]); new_mask.append(g[2] if g[2] != (0, g[0]) else (0, n))
      if rem[gi] == 1: gi += 1
    if gi != len(groups): return None
    return View(tuple(shape), tuple(new_strides), self.offset, tuple(new_mask) if self.mask else None)._canon()

  def _with_offset(self, off: sint) -> View: return View(self.shape, self.strides, off, self.mask)

  def to_index(self, idxs: list[UOp], dtype: DType = dtypes.int32) -> tuple[UOp, UOp]:
    """(flat index, validity) of this view at index tuple idxs, in their dtype (`dtype` where there are none: a view
    of shape () still has an offset, which may be past 2^31)."""
    it = idxs[0].dtype if idxs else dtype  # the kernel's index dtype (int64 for views past 2^31 elements)
    off = self.offset
    idx: UOp = (off if off.dtype == it else off.cast(it)) if isinstance(off, UOp) else UOp.const(it, off)
    valid: UOp = UOp.const(dtypes.bool, True)
    for i, (s, st) in enumerate(zip(self.shape, self.strides)):
      if st != 0 and s != 1: idx = idx + idxs[i] * st
      if self.mask is not None:
        lo, hi = self.mask[i]
        if not sym_le(lo, 0): valid = valid & (idxs[i] >= lo) if valid.op is not Ops.CONST else (idxs[i] >= lo)
        if not sym_le(s, hi): valid = valid & (idxs[i] < hi) if valid.op is not Ops.CONST else (idxs[i] < hi)
        if sym_le(hi, lo): valid = UOp.const(dtypes.bool, False)
    return idx, valid

@dataclass(frozen=True)
class ShapeTracker:
  views: tuple[View, ...]

  def __hash__(self) -> int:
    # kept once computed: the scheduler keys its memo by (node, ShapeTracker) and asks several times per node, and a
    # long chain of movements stacks many views (hashing them all again each time was most of scheduling it)
    if (h := self.__dict__.get("_hash")) is None: object.__setattr__(self, "_hash", h := hash(self.views))
    return h
  def __reduce__(self) -> tuple: return (ShapeTracker, (self.views,))   # (not the kept hash: None's differs per process)

  @staticmethod
  def from_shape(shape: tuple[int, ...]) -> ShapeTracker: return ShapeTracker((View.contiguous(tuple(shape)),))
  @property
  def shape(self) -> tuple[sint, ...]: return self.views[-1].shape
  @property
  def size(self) -> int: return prod(self.shape)
  @property
  def contiguous(self) -> bool: return len(self.views) == 1 and self.views[0].is_contiguous
  def _top(self, v: View) -> ShapeTracker: return ShapeTracker(self.views[:-1] + (v,))

  def permute(self, order: tuple[int, ...]) -> ShapeTracker: return self._top(self.views[-1].permute(tuple(order)))
  def expand(self, shape: tuple[int, ...]) -> ShapeTracker: return self._top(self.views[-1].expand(tuple(shape)))
  def shrink(self, arg: tuple[tuple[int, int], ...]) -> ShapeTracker: return self._top(self.views[-1].shrink(tuple(arg)))
  def pad(self, arg: tuple[tuple[int, int], ...]) -> ShapeTracker: return self._top(self.views[-1].pad(tuple(arg)))
  def flip(self, axes: tuple[bool, ...]) -> ShapeTracker: return self._top(self.views[-1].flip(tuple(axes)))
  def reshape(self, shape: tuple[int, ...]) -> ShapeTracker:
    shape = tuple(shape)
    v = self.views[-1].reshape(shape)
    if v is None and (has_sym(shape) or has_sym(self.shape)):
      # (a view stacked on top indexes the largest shape's layout, which the view below does not have)
      raise _symbolic_unsupported("this reshape", self.shape, shape)
    if v is not None: return self._top(v)
    base = self.merged()
    if base is not self and (v := base.views[-1].reshape(shape)) is not None: return base._top(v)
    return ShapeTracker(base.views + (View.contiguous(shape),))

  def merged(self) -> ShapeTracker:
    """This stack as one View where its index is affine in every axis and nothing is masked (sliding windows built
    by expand-and-reshape: a convolution's windows over a padded channels-last image), else self. Stacked, each view
    unravels the one above with a division and a remainder per axis; merged, the index is one multiply-add per axis,
    which a reshape on top may then split or merge without stacking again."""
    if len(self.views) < 2 or any(v.mask is not None or has_sym(v.shape) or not isinstance(v.offset, int) for v in self.views): return self
    from baregrad.ir.symbolic import linear
    rs = [UOp.range(s, i, dtype=dtypes.int64) for i, s in enumerate(self.shape)]
    idx, _ = self.to_index(rs, dtypes.int64)
    terms, off = linear(idx)
    if any(t not in rs for t in terms) or not isinstance(off, int): return self
    return ShapeTracker((View(self.shape, tuple(terms.get(r, 0) if s != 1 else 0 for r, s in zip(rs, self.shape)), off, None)._canon(),))

  def to_index(self, idxs: list[UOp], dtype: DType = dtypes.int32) -> tuple[UOp, UOp]:
    """Flat buffer index and validity for the visible index tuple idxs (simplified), in the dtype of idxs (`dtype`
    where the shape is ())."""
    idx, valid = self.views[-1].to_index(idxs, dtype)
    for v in reversed(self.views[:-1]):
      # unravel the flat index of the view above into this view's shape
      parts, acc = [], idx
      for s in reversed(v.shape):
        parts.append(acc % s if s != 1 else UOp.const(acc.dtype, 0))
        acc = acc // s
      nidx, nvalid = v.to_index(list(reversed(parts)), idx.dtype)
      idx, valid = nidx, (valid & nvalid) if nvalid.op is not Ops.CONST or not nvalid.arg else valid
    return idx.simplify(), valid.simplify()

  @functools.cache  # noqa: B019 (immutable values, asked often)
  def valid_axes(self) -> frozenset[int]:
    """The axes the validity (the masks of the views) depends on: an axis may have stride 0 and still decide whether
    an element is read or is 0 (padding)."""
    if all(v.mask is None for v in self.views): return frozenset()
    rs = [UOp.range(smax(s) if is_sym(s) else s, i, dtype=dtypes.int64) for i, s in enumerate(self.shape)]
    _, valid = self.to_index(rs, dtypes.int64)
    used = set(valid.toposort())
    return frozenset(i for i, r in enumerate(rs) if r in used)

  @functools.cache  # noqa: B019 (ShapeTrackers are immutable values; the optimizer asks for the same ones often)
  def real_strides(self) -> tuple[int | None, ...]:
    """Stride of each axis where the index is affine in that axis alone, else None (used by the optimizer).
    Read off the simplified index expression, so stacks of views (reshapes of moved views) work too."""
    if len(self.views) == 1 and self.views[0].mask is None: return tuple(st for st in self.views[0].strides)
    if any(has_sym(v.shape) for v in self.views): return tuple(None for _ in self.shape)   # (not analysed: no opts lean on it)
    from baregrad.ir.symbolic import linear
    # (in int64: an analysis, and a view's offset may be past 2^31, which int32 constants would wrap)
    rs = [UOp.range(s, i, dtype=dtypes.int64) for i, s in enumerate(self.shape)]
    idx, _ = self.to_index(rs, dtypes.int64)
    terms, _ = linear(idx)
    out: list[int | None] = []
    for i, r in enumerate(rs):
      if self.shape[i] == 1: out.append(0); continue
      inside = [t for t in terms if t is not r and r in t.toposort()]
      out.append(None if inside else terms.get(r, 0))
    return tuple(out)

@functools.cache
def _range_vars(shape: tuple[int, ...]) -> list[UOp]: return [UOp.range(s, i) for i, s in enumerate(shape)]
