"""Shape and data-movement ONNX operators: the Reshape family, Concat/Split/Slice, Gather/Scatter, Expand/Tile/Pad,
Shape/Size/ConstantOfShape/Range, OneHot, Trilu, CumSum, TopK, NonZero, ... (with host folds for shape arithmetic)."""
from __future__ import annotations
import math
from typing import Any
import numpy as np
from baregrad import dtypes
from baregrad.tensor import Tensor, functional as F
from baregrad.onnx.errors import OnnxError, UnsupportedOperator
from baregrad.onnx.registry import op, fold
from baregrad.onnx.proto import dtype_of_np

def _ax(a: int, nd: int, what: str = "axis") -> int:
  if not -max(nd, 1) <= a < max(nd, 1): raise OnnxError(f"{what} {a} is out of range for a tensor of rank {nd}")
  return a % max(nd, 1)

def _shape_of(v: Any) -> tuple[int, ...]: return tuple(v.shape)

# ---------------------------------------------------------------- Shape, Size

@op("Shape")
def shape(ctx, n, x):
  s = _shape_of(x)
  nd = len(s)
  start, end = n.attrs.get("start", 0), n.attrs.get("end", nd)
  start, end = (start + nd if start < 0 else start), (end + nd if end < 0 else end)
  return np.array(s[max(0, min(start, nd)):max(0, min(end, nd))], np.int64)

@op("Size")
def size(ctx, n, x): return np.array(int(np.prod(_shape_of(x))), np.int64)

fold("Shape")(shape)
fold("Size")(size)

# ---------------------------------------------------------------- the Reshape family

def _reshape_target(ins: tuple, shape: list[int], allowzero: int) -> tuple[int, ...]:
  out = [ins[i] if (s == 0 and not allowzero) else s for i, s in enumerate(shape)]
  if out.count(-1) > 1: raise OnnxError(f"Reshape to {shape}: at most one -1")
  if -1 in out:
    known = int(np.prod([s for s in out if s != -1]))
    total = int(np.prod(ins))
    if known == 0 or total % known: raise OnnxError(f"cannot reshape shape {ins} to {shape}")
    out[out.index(-1)] = total // known
  if int(np.prod(out)) != int(np.prod(ins)): raise OnnxError(f"cannot reshape shape {ins} ({int(np.prod(ins))} elements) to {shape}")
  return tuple(out)

@op("Reshape")
def reshape(ctx, n, x, s=None):
  shp = ctx.ints(s, "Reshape's shape") if n.opset >= 5 else n.attrs.get("shape", [])
  return ctx.t(x).reshape(_reshape_target(_shape_of(x), shp, n.attrs.get("allowzero", 0)))

@fold("Reshape")
def fold_reshape(ctx, n, x, s=None):
  shp = [int(v) for v in s] if n.opset >= 5 else n.attrs.get("shape", [])
  return x.reshape(_reshape_target(x.shape, shp, n.attrs.get("allowzero", 0)))

def _flat2(shp: tuple, axis: int) -> tuple[int, int]:
  if not -len(shp) <= axis <= len(shp): raise OnnxError(f"Flatten axis {axis} is out of range for a tensor of rank {len(shp)}")
  a = axis + len(shp) if axis < 0 else axis
  return int(np.prod(shp[:a])), int(np.prod(shp[a:]))

@op("Flatten")
def flatten(ctx, n, x): return ctx.t(x).reshape(_flat2(_shape_of(x), n.attrs.get("axis", 1)))
@fold("Flatten")
def fold_flatten(ctx, n, x): return x.reshape(_flat2(x.shape, n.attrs.get("axis", 1)))

def _axes_arg(ctx, n, axes_in: Any, what: str) -> list[int] | None:
  if n.opset >= 13 or axes_in is not None:
    return None if axes_in is None else ctx.ints(axes_in, f"{n.op}'s axes")
  a = n.attrs.get("axes")
  return None if a is None else list(a)

def _squeezed(shp: tuple, axes: list[int] | None) -> tuple:
  if axes is None: return tuple(s for s in shp if s != 1)
  ax = {_ax(a, len(shp)) for a in axes}
  for a in ax:
    if shp[a] != 1: raise OnnxError(f"Squeeze of axis {a} of size {shp[a]} (shape {shp}): only size-1 axes squeeze")
  return tuple(s for i, s in enumerate(shp) if i not in ax)

def _unsqueezed(shp: tuple, axes: list[int]) -> tuple:
  nd = len(shp) + len(axes)
  ax = sorted(_ax(a, nd) for a in axes)
  if len(set(ax)) != len(ax): raise OnnxError(f"Unsqueeze axes {axes} repeat an axis")
  out, it = [], iter(shp)
  for i in range(nd): out.append(1 if i in ax else next(it))
  return tuple(out)

@op("Squeeze")
def squeeze(ctx, n, x, axes=None): return ctx.t(x).reshape(_squeezed(_shape_of(x), _axes_arg(ctx, n, axes, "Squeeze")))
@fold("Squeeze")
def fold_squeeze(ctx, n, x, axes=None): return x.reshape(_squeezed(x.shape, _axes_arg(ctx, n, axes, "Squeeze")))
@op("Unsqueeze")
def unsqueeze(ctx, n, x, axes=None): return ctx.t(x).reshape(_unsqueezed(_shape_of(x), _axes_arg(ctx, n, axes, "Unsqueeze") or []))
@fold("Unsqueeze")
def fold_unsqueeze(ctx, n, x, axes=None): return x.reshape(_unsqueezed(x.shape, _axes_arg(ctx, n, axes, "Unsqueeze") or []))

@op("Transpose")
def transpose(ctx, n, x):
  nd = len(_shape_of(x))
  return ctx.t(x).permute(*n.attrs.get("perm", list(range(nd))[::-1]))
@fold("Transpose")
def fold_transpose(ctx, n, x): return np.transpose(x, n.attrs.get("perm", list(range(x.ndim))[::-1]))

# ---------------------------------------------------------------- Concat, Split, Slice

@op("Concat")
def concat(ctx, n, *xs):
  ts = [ctx.t(x) for x in xs if x is not None]
  nd = ts[0].ndim
  return F.cat(ts, _ax(n.attrs.get("axis", 0), nd))
@fold("Concat")
def fold_concat(ctx, n, *xs):
  xs = [x for x in xs if x is not None]
  if len({x.dtype for x in xs}) != 1: return NotImplemented
  return np.concatenate(xs, _ax(n.attrs.get("axis", 0), xs[0].ndim))

def _split_sizes(ctx, n, dim: int, split: Any) -> list[int]:
  if split is not None: return ctx.ints(split, "Split's split")
  if n.opset < 13 and "split" in n.attrs: return list(n.attrs["split"])
  k = n.attrs.get("num_outputs", len(n.outputs))
  if "num_outputs" in n.attrs:
    c = -(-dim // k)
    return [min(c, dim - i * c) for i in range(k)]
  if dim % k: raise OnnxError(f"Split of an axis of size {dim} into {k} equal parts")
  return [dim // k] * k

@op("Split")
def split(ctx, n, x, s=None):
  x = ctx.t(x)
  a = _ax(n.attrs.get("axis", 0), x.ndim)
  return tuple(F.split(x, _split_sizes(ctx, n, x.shape[a], s), a))
@fold("Split")
def fold_split(ctx, n, x, s=None):
  a = _ax(n.attrs.get("axis", 0), x.ndim)
  sizes = _split_sizes(ctx, n, x.shape[a], s)
  return tuple(np.split(x, np.cumsum(sizes)[:-1], a))

def _slices(shp: tuple, starts: list[int], ends: list[int], axes: list[int] | None, steps: list[int] | None) -> tuple:
  nd = len(shp)
  axes = list(range(len(starts))) if axes is None else [_ax(a, nd) for a in axes]
  steps = [1] * len(starts) if steps is None else steps
  sl = [slice(None)] * nd
  for a, s, e, st in zip(axes, starts, ends, steps):
    d = shp[a]
    if st == 0: raise OnnxError("Slice step cannot be 0")
    s, e = (s + d if s < 0 else s), (e + d if e < 0 else e)
    if st > 0: s, e = min(max(s, 0), d), min(max(e, 0), d)
    else: s, e = min(max(s, 0), d - 1), min(max(e, -1), d - 1)
    sl[a] = slice(s, None if e < 0 else e, st)
  return tuple(sl)

def _slice_args(ctx, n, starts, ends, axes, steps) -> tuple:
  if n.opset < 10: return n.attrs["starts"], n.attrs["ends"], n.attrs.get("axes"), None
  return (ctx.ints(starts, "Slice's starts"), ctx.ints(ends, "Slice's ends"), None if axes is None else ctx.ints(axes, "Slice's axes"),
          None if steps is None else ctx.ints(steps, "Slice's steps"))

@op("Slice")
def slice_(ctx, n, x, starts=None, ends=None, axes=None, steps=None):
  x = ctx.t(x)
  sl = _slices(x.shape, *_slice_args(ctx, n, starts, ends, axes, steps))
  # an empty result: cut with a zero-length shrink (indexing would refuse no elements on some axes)
  return x[sl]
@fold("Slice")
def fold_slice(ctx, n, x, starts=None, ends=None, axes=None, steps=None):
  return x[_slices(x.shape, *_slice_args(ctx, n, starts, ends, axes, steps))]

# ---------------------------------------------------------------- Gather / Scatter

@op("Gather")
def gather(ctx, n, x, idx):
  x = ctx.t(x)
  a = _ax(n.attrs.get("axis", 0), x.ndim)
  d = x.shape[a]
  pre = (slice(None),) * a
  if isinstance(idx, np.ndarray) or ctx.is_const(idx):
    iv = ctx.host(idx, "Gather's indices").astype(np.int64)
    iv = np.where(iv < 0, iv + d, iv)
    if iv.size and (iv.min() < 0 or iv.max() >= d): raise OnnxError(f"Gather indices {iv.reshape(-1).tolist()[:8]} out of range for axis {a} of size {d}")
    if iv.ndim == 0: return x[pre + (int(iv),)]
    flat = iv.reshape(-1)
    if flat.size and np.all(np.diff(flat) == 1):  # a run of consecutive indices is a slice
      return x[pre + (slice(int(flat[0]), int(flat[-1]) + 1),)].reshape(x.shape[:a] + iv.shape + x.shape[a + 1:])
    if flat.size == 0: return Tensor.full(x.shape[:a] + iv.shape + x.shape[a + 1:], 0, dtype=x.dtype, device=x.device)
    idx = Tensor(iv, device=x.device)
  idx = ctx.t(idx)
  if idx.ndim == 0: idx = idx.reshape(1); out = x[pre + (idx,)]; return out.reshape(x.shape[:a] + x.shape[a + 1:])
  return x[pre + (idx,)]

@fold("Gather")
def fold_gather(ctx, n, x, idx):
  a = _ax(n.attrs.get("axis", 0), x.ndim)
  return np.take(x, np.where(idx < 0, idx + x.shape[a], idx), a)

def _wrap(idx: Tensor, size: int) -> Tensor:
  """ONNX's negative indices count from the end (PyTorch's gather/scatter refuse them)."""
  return (idx < 0).where(idx + size, idx) if not dtypes.is_unsigned(idx.dtype) else idx

@op("GatherElements")
def gather_elements(ctx, n, x, idx):
  x, idx = ctx.t(x), ctx.t(idx)
  a = _ax(n.attrs.get("axis", 0), x.ndim)
  return F.gather(x, a, _wrap(idx, x.shape[a]))

def _nd_linear(x: Tensor, idx: Tensor, b: int) -> tuple[Tensor, Tensor, tuple]:
  """GatherND/ScatterND bookkeeping: data as (B, N, R) rows, indices as (B, M) row numbers (negatives wrapped)."""
  k = idx.shape[-1]
  bs, ds = x.shape[:b], x.shape[b:b + k]
  B, N, rest = int(np.prod(bs)), int(np.prod(ds)), x.shape[b + k:]
  mshape = idx.shape[b:-1]
  lin = None
  stride = 1
  for j in range(k - 1, -1, -1):
    i = idx[..., j].cast(dtypes.int64)
    i = (i < 0).where(i + ds[j], i)
    lin = i * stride if lin is None else lin + i * stride
    stride *= ds[j]
  if lin is None: lin = Tensor.full(idx.shape[:-1], 0, dtype=dtypes.int64, device=x.device)
  return x.reshape(B, N, *rest), lin.reshape(B, int(np.prod(mshape))), mshape

@op("GatherND")
def gather_nd(ctx, n, x, idx):
  x, idx = ctx.t(x), ctx.t(idx)
  b = n.attrs.get("batch_dims", 0)
  data, lin, mshape = _nd_linear(x, idx, b)
  B, N = data.shape[:2]
  off = Tensor.arange(B, device=x.device, dtype=dtypes.int64).reshape(B, 1) * N
  flat = data.reshape(B * N, *data.shape[2:])[(lin + off).reshape(-1)]
  return flat.reshape(x.shape[:b] + mshape + data.shape[2:])

def _reduce_name(r: str) -> str:
  return {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}[r]

@op("ScatterND")
def scatter_nd(ctx, n, x, idx, upd):
  x, idx, upd = ctx.t(x), ctx.t(idx), ctx.t(upd)
  red = n.attrs.get("reduction", "none")
  data, lin, _ = _nd_linear(x, idx, 0)
  N, R = data.shape[1], int(np.prod(data.shape[2:]))
  d2, M = data.reshape(N, R), lin.shape[1]
  ind = lin.reshape(M, 1).expand(M, R)
  u2 = upd.reshape(M, R).cast(x.dtype)
  if red == "none": out = F.scatter(d2, 0, ind, u2)
  elif red == "add": out = F.scatter_add(d2, 0, ind, u2)
  else: out = d2.scatter_reduce(0, ind, u2, _reduce_name(red), include_self=True)
  return out.reshape(x.shape)

@op("ScatterElements", "Scatter")
def scatter_elements(ctx, n, x, idx, upd):
  x, idx, upd = ctx.t(x), ctx.t(idx), ctx.t(upd)
  a = _ax(n.attrs.get("axis", 0), x.ndim)
  idx = _wrap(idx, x.shape[a])
  red = n.attrs.get("reduction", "none")
  if red == "none": return F.scatter(x, a, idx, upd.cast(x.dtype))
  if red == "add": return F.scatter_add(x, a, idx, upd.cast(x.dtype))
  return x.scatter_reduce(a, idx, upd.cast(x.dtype), _reduce_name(red), include_self=True)

# ---------------------------------------------------------------- Expand, Tile, Pad

def _bcast(a: tuple, b: tuple) -> tuple:
  nd = max(len(a), len(b))
  a, b = (1,) * (nd - len(a)) + tuple(a), (1,) * (nd - len(b)) + tuple(b)
  out = []
  for x, y in zip(a, b):
    if x != y and 1 not in (x, y): raise OnnxError(f"shapes {a} and {b} do not broadcast")
    out.append(y if x == 1 else x)
  return tuple(out)

@op("Expand")
def expand(ctx, n, x, s):
  x = ctx.t(x)
  out = _bcast(x.shape, tuple(ctx.ints(s, "Expand's shape")))
  return x.reshape((1,) * (len(out) - x.ndim) + x.shape).expand(out)
@fold("Expand")
def fold_expand(ctx, n, x, s): return np.broadcast_to(x, _bcast(x.shape, tuple(int(v) for v in s))).copy()

@op("Tile")
def tile(ctx, n, x, reps):
  r = ctx.ints(reps, "Tile's repeats")
  return F.repeat(ctx.t(x), *r)
@fold("Tile")
def fold_tile(ctx, n, x, reps): return np.tile(x, [int(v) for v in reps])

@op("Pad")
def pad(ctx, n, x, pads=None, value=None, axes=None):
  x = ctx.t(x)
  nd = x.ndim
  mode = n.attrs.get("mode", "constant")
  if n.opset < 11: p, v = list(n.attrs.get("pads", [])), n.attrs.get("value", 0.0)
  else:
    p = ctx.ints(pads, "Pad's pads")
    v = 0 if value is None or (isinstance(value, np.ndarray) and value.size == 0) else ctx.scalar(value, "Pad's constant_value")
  ax = list(range(nd)) if axes is None else [_ax(a, nd) for a in ctx.ints(axes, "Pad's axes")]
  if len(p) != 2 * len(ax): raise OnnxError(f"Pad: {len(p)} pads for {len(ax)} axes (need 2 per axis)")
  full = [(0, 0)] * nd
  for i, a in enumerate(ax): full[a] = (p[i], p[i + len(ax)])
  flat = [v2 for b, e in reversed(full) for v2 in (b, e)]
  m = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}.get(mode)
  if m is None: raise UnsupportedOperator(f"Pad mode {mode!r} is not supported")
  if m == "constant":
    v = float(v) if dtypes.is_float(x.dtype) else bool(v) if x.dtype == dtypes.bool else int(v)
    return F.pad(x, flat, "constant", v)
  return F.pad(x, flat, m)

# ---------------------------------------------------------------- DepthToSpace, SpaceToDepth

@op("DepthToSpace")
def depth_to_space(ctx, n, x):
  x = ctx.t(x)
  N, C, H, W = x.shape
  b = n.attrs["blocksize"]
  if n.attrs.get("mode", "DCR") == "DCR": y = x.reshape(N, b, b, C // (b * b), H, W).permute(0, 3, 4, 1, 5, 2)
  else: y = x.reshape(N, C // (b * b), b, b, H, W).permute(0, 1, 4, 2, 5, 3)
  return y.reshape(N, C // (b * b), H * b, W * b)

@op("SpaceToDepth")
def space_to_depth(ctx, n, x):
  x = ctx.t(x)
  N, C, H, W = x.shape
  b = n.attrs["blocksize"]
  y = x.reshape(N, C, H // b, b, W // b, b)
  y = y.permute(0, 1, 3, 5, 2, 4) if n.attrs.get("mode", "DCR") == "CRD" else y.permute(0, 3, 5, 1, 2, 4)
  return y.reshape(N, C * b * b, H // b, W // b)

# ---------------------------------------------------------------- constants of a shape, ranges

@op("ConstantOfShape")
def constant_of_shape(ctx, n, s):
  shp = tuple(ctx.ints(s, "ConstantOfShape's shape"))
  v = n.attrs.get("value")
  if v is None: v = np.zeros(1, np.float16 if ctx.half else np.float32)
  d = dtype_of_np(v)
  x = v.reshape(-1)[0].item()
  return Tensor.full(shp, x, dtype=d, device=ctx.device)
@fold("ConstantOfShape")
def fold_constant_of_shape(ctx, n, s):
  v = n.attrs.get("value")
  if v is None: v = np.zeros(1, np.float16 if ctx.half else np.float32)
  return np.full(tuple(int(x) for x in s), v.reshape(-1)[0], v.dtype)

def _range_n(start: Any, limit: Any, delta: Any) -> int: return max(int(math.ceil((limit - start) / delta)), 0)

@op("Range")
def range_(ctx, n, start, limit, delta):
  bd = dtype_of_np(start) if isinstance(start, np.ndarray) else start.dtype
  s, l, dl = (ctx.scalar(v, "Range's " + w) for v, w in ((start, "start"), (limit, "limit"), (delta, "delta")))
  k = _range_n(s, l, dl)
  if k == 0: return Tensor.full((0,), 0, dtype=bd, device=ctx.device)
  return (Tensor.arange(k, device=ctx.device, dtype=bd) * dl + s).cast(bd)  # start + i * delta, as the spec writes it
@fold("Range")
def fold_range(ctx, n, start, limit, delta):
  s, l, d = start.item(), limit.item(), delta.item()
  return (s + np.arange(_range_n(s, l, d)) * d).astype(start.dtype)

@op("EyeLike")
def eye_like(ctx, n, x):
  shp = _shape_of(x)
  dt = ctx.dtype(n.attrs["dtype"]) if "dtype" in n.attrs else (x.dtype if isinstance(x, Tensor) else dtype_of_np(x))
  k = n.attrs.get("k", 0)
  r = Tensor.arange(shp[0], device=ctx.device, dtype=dtypes.int64).reshape(shp[0], 1) + k
  c = Tensor.arange(shp[1], device=ctx.device, dtype=dtypes.int64).reshape(1, shp[1])
  return r.eq(c).cast(dt)

@op("OneHot")
def one_hot(ctx, n, idx, depth, values):
  idx = ctx.t(idx)
  dep = int(ctx.scalar(depth, "OneHot's depth"))
  vals = ctx.t(values)
  axis = n.attrs.get("axis", -1)
  nd = idx.ndim + 1
  a = _ax(axis, nd)
  i = idx.cast(dtypes.int64)
  i = (i < 0).where(i + dep, i).unsqueeze(a)
  ar = Tensor.arange(dep, device=ctx.device, dtype=dtypes.int64).reshape(tuple(dep if k == a else 1 for k in range(nd)))
  return i.eq(ar).where(vals[1], vals[0])

@op("Trilu")
def trilu(ctx, n, x, k=None):
  kk = 0 if k is None else int(ctx.scalar(k, "Trilu's k"))
  x = ctx.t(x)
  return F.triu(x, kk) if n.attrs.get("upper", 1) else F.tril(x, kk)

@op("CumSum", "CumProd")
def cumulative(ctx, n, x, axis):
  x = ctx.t(x)
  a = _ax(int(ctx.scalar(axis, f"{n.op}'s axis")), x.ndim)
  rev = n.attrs.get("reverse", 0)
  y = x.flip(a) if rev else x
  c = (y.cumsum(a) if n.op == "CumSum" else y.cumprod(a)).cast(x.dtype)
  if n.attrs.get("exclusive", 0):  # shift one step along the axis, the identity entering at the front
    c = F.pad(c, [0, 0] * (x.ndim - 1 - a) + [1, -1], "constant", 0 if n.op == "CumSum" else 1)
  return c.flip(a) if rev else c

@op("ReverseSequence")
def reverse_sequence(ctx, n, x, lens):
  x, L = ctx.t(x), ctx.t(lens).cast(dtypes.int64)
  ba, ta = n.attrs.get("batch_axis", 1), n.attrs.get("time_axis", 0)
  T = x.shape[ta]
  t = Tensor.arange(T, device=ctx.device, dtype=dtypes.int64)
  shp_t = tuple(T if k == ta else 1 for k in range(x.ndim))
  shp_b = tuple(x.shape[ba] if k == ba else 1 for k in range(x.ndim))
  tt, ll = t.reshape(shp_t), L.reshape(shp_b)
  src = (tt < ll).where(ll - 1 - tt, tt)
  return F.gather(x, ta, src.expand(x.shape))

@op("CenterCropPad")
def center_crop_pad(ctx, n, x, s):
  x = ctx.t(x)
  shp = ctx.ints(s, "CenterCropPad's shape")
  axes = n.attrs.get("axes", list(range(x.ndim)))
  full = [(0, 0)] * x.ndim
  for a, want in zip(axes, shp):
    a = _ax(a, x.ndim)
    d = x.shape[a]
    if want < d: full[a] = (-((d - want) // 2), -((d - want) - (d - want) // 2))
    elif want > d: full[a] = ((want - d) // 2, (want - d) - (want - d) // 2)
  flat = [v for b, e in reversed(full) for v in (b, e)]
  return F.pad(x, flat, "constant", 0)

# ---------------------------------------------------------------- sorting and data-dependent shapes

@op("TopK")
def topk(ctx, n, x, k):
  x = ctx.t(x)
  kk = int(ctx.scalar(k, "TopK's K")) if n.opset >= 10 else n.attrs["k"]
  a = _ax(n.attrs.get("axis", -1), x.ndim)
  v, i = x.topk(kk, dim=a, largest=bool(n.attrs.get("largest", 1)), sorted=bool(n.attrs.get("sorted", 1)))
  return v, i.cast(dtypes.int64)

def _data_dependent(ctx, n, what: str) -> None:
  ctx.runner.data_dependent = ctx.runner.data_dependent or f"{n.label()}: {what} depends on the data"

@op("NonZero")
def nonzero(ctx, n, x):
  x = ctx.t(x)
  _data_dependent(ctx, n, "the output shape")
  if x.ndim == 0: x = x.reshape(1)
  return x.nonzero().T.cast(dtypes.int64)

@op("Compress")
def compress(ctx, n, x, cond):
  x = ctx.t(x)
  c = ctx.host(cond, "Compress's condition").astype(bool).reshape(-1)
  a = n.attrs.get("axis")
  if a is None: x, a = x.reshape(-1), 0
  a = _ax(a, x.ndim)
  keep = np.nonzero(c[:x.shape[a]])[0]
  if keep.size == 0: return x[(slice(None),) * a + (slice(0, 0),)]
  return x[(slice(None),) * a + (Tensor(keep.astype(np.int64), device=ctx.device),)]

@op("Unique")
def unique(ctx, n, x):
  x = ctx.t(x)
  _data_dependent(ctx, n, "the output shape")
  a = n.attrs.get("axis")
  if a is not None:  # unique slices along an axis: PyTorch's unique(dim=)
    a = _ax(a, x.ndim)
    y, inv, cnt = x.unique(sorted=True, return_inverse=True, return_counts=True, dim=a)
    L = x.shape[a]
    xs, ys = x.transpose(0, a).reshape(L, -1), y.transpose(0, a).reshape(y.shape[a], -1)
    hit = ys.unsqueeze(1).eq(xs.unsqueeze(0)).all(-1)              # (unique, L)
  else:
    flat = x.reshape(-1)
    y, inv, cnt = flat.unique(sorted=True, return_inverse=True, return_counts=True)
    L = flat.shape[0]
    hit = flat.reshape(1, -1).eq(y.reshape(-1, 1))
  # the first position of each unique value: the smallest index where it occurs
  pos = Tensor.arange(L, device=ctx.device, dtype=dtypes.int64)
  first = hit.where(pos.reshape(1, -1), L).amin(1)
  if not n.attrs.get("sorted", 1):  # in order of first occurrence
    order = first.argsort()
    y = y[order] if a is None else y[(slice(None),) * a + (order,)]
    first, cnt = first[order], cnt[order]
    inv = order.argsort()[inv]
  return y, first.cast(dtypes.int64), inv.reshape(-1).cast(dtypes.int64), cnt.cast(dtypes.int64)
