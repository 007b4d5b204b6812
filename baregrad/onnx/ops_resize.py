"""Resize (and the older Upsample). Resizing is separable: each resized axis gets a constant (out, in) weight matrix
computed on the host from the sizes and attributes alone (the coordinate transform, the nearest/linear/cubic
coefficients, antialiasing, exclude_outside: the formulas of the ONNX specification), applied as a matmul along that
axis. Nearest-neighbour resizes are gathers instead (an integer upsampling factor is an expand: no work at all)."""
from __future__ import annotations
import math
from typing import Any
import numpy as np
from baregrad import dtypes
from baregrad.tensor import Tensor
from baregrad.onnx.errors import OnnxError, UnsupportedOperator
from baregrad.onnx.registry import op

def _src_coords(mode: str, out_n: int, in_n: int, scale: float, roi: tuple[float, float] | None) -> tuple[np.ndarray, np.ndarray | None]:
  """Each output position's coordinate in the input, and (tf_crop_and_resize) which positions fall outside it."""
  y = np.arange(out_n, dtype=np.float64)
  out_w = scale * in_n
  extra = None
  if mode == "align_corners": x = np.zeros(out_n) if out_w == 1 else y * (in_n - 1) / (out_w - 1)
  elif mode == "asymmetric": x = y / scale
  elif mode == "tf_crop_and_resize":
    if roi is None: raise OnnxError("Resize: tf_crop_and_resize needs the roi input")
    x = np.full(out_n, (roi[1] - roi[0]) * (in_n - 1) / 2) if out_w == 1 else y * (roi[1] - roi[0]) * (in_n - 1) / (out_w - 1)
    x = x + roi[0] * (in_n - 1)
    extra = (x < 0) | (x > in_n - 1)
  elif mode == "pytorch_half_pixel": x = np.full(out_n, -0.5) if out_w == 1 else (y + 0.5) / scale - 0.5
  elif mode == "half_pixel": x = (y + 0.5) / scale - 0.5
  elif mode == "half_pixel_symmetric":
    off = in_n / 2 * (1 - out_n / out_w)
    x = off + (y + 0.5) / scale - 0.5
  else: raise UnsupportedOperator(f"Resize coordinate_transformation_mode {mode!r} is not supported")
  return x, extra

def _coeffs(kind: str, ratio: float, scale: float, a: float, antialias: bool, nearest: str) -> np.ndarray:
  if kind == "nearest":
    if float(ratio).is_integer(): return np.array([0.0, 1.0])
    return np.array({"round_prefer_floor": [ratio <= 0.5, ratio > 0.5], "round_prefer_ceil": [ratio < 0.5, ratio >= 0.5],
                     "floor": [1, 0], "ceil": [0, 1]}[nearest], np.float64)
  if kind == "linear":
    if not antialias: return np.array([1 - ratio, ratio])
    s = min(scale, 1.0)
    start = int(np.floor(-1 / s) + 1)
    c = np.clip(1 - np.abs((np.arange(start, 2 - start) - ratio) * s), 0, 1)
    return c / c.sum()
  def cub(x: float) -> float:
    x = abs(x)
    if x <= 1: return (a + 2) * x ** 3 - (a + 3) * x * x + 1
    if x < 2: return a * x ** 3 - 5 * a * x * x + 8 * a * x - 4 * a
    return 0.0
  if not antialias: return np.array([cub(ratio + 1), cub(ratio), cub(1 - ratio), cub(2 - ratio)])
  s = min(scale, 1.0)
  st = int(np.floor(-2 / s) + 1)
  c = np.array([cub(s * (i - ratio)) for i in range(st, 2 - st)])
  return c / c.sum()

def _axis_plan(kind: str, in_n: int, out_n: int, scale: float, n: Any, roi: tuple | None) -> tuple[np.ndarray, np.ndarray | None]:
  """(out, in) weights for one axis (rows sum to 1), and the rows to fill with extrapolation_value."""
  x, extra = _src_coords(n.attrs.get("coordinate_transformation_mode", "half_pixel"), out_n, in_n, scale, roi)
  xi = np.floor(x).astype(np.int64)
  ratios = np.where(x == xi, 1.0, x - xi)
  a, aa, nm = n.attrs.get("cubic_coeff_a", -0.75), bool(n.attrs.get("antialias", 0)), n.attrs.get("nearest_mode", "round_prefer_floor")
  co = np.stack([_coeffs(kind, float(r), scale, a, aa, nm) for r in ratios]) if out_n else np.zeros((0, 2))
  k = co.shape[1]
  pad = int(math.ceil(k / 2))
  xp = x + pad
  p = np.floor(xp).astype(np.int64)
  frac = xp - p
  off = np.where(frac == 0, -(k // 2), -(k // 2) + 1) if k % 2 == 0 else np.where(frac <= 0.5, -((k - 1) // 2), -((k - 1) // 2) + 1)
  idx = (p + off)[:, None] + np.arange(k)[None, :] - pad
  if n.attrs.get("exclude_outside", 0):
    co = np.where((idx < 0) | (idx >= in_n), 0.0, co)
    s = co.sum(-1, keepdims=True)
    co = co / np.where(s == 0, 1.0, s)
  w = np.zeros((out_n, in_n))
  np.add.at(w, (np.repeat(np.arange(out_n), k), np.clip(idx, 0, in_n - 1).reshape(-1)), co.reshape(-1))
  return w, extra

def _apply(x: Tensor, ax: int, w: np.ndarray, kind: str) -> Tensor:
  out_n, in_n = w.shape
  xt = x.transpose(ax, -1) if ax != x.ndim - 1 else x
  if kind == "nearest":
    src = w.argmax(1)
    f = out_n // in_n if in_n and out_n % in_n == 0 else 0
    if f and np.array_equal(src, np.arange(out_n) // f):  # an integer upsampling factor: each element repeated
      y = xt.unsqueeze(-1).expand(xt.shape + (f,)).reshape(xt.shape[:-1] + (out_n,))
    elif out_n == 0: y = xt[..., :0]
    else: y = xt[(Ellipsis, Tensor(src.astype(np.int64), device=x.device))]
  else:
    wt = Tensor(w.T.astype(np.float32), device=x.device).cast(xt.dtype if dtypes.is_float(xt.dtype) else dtypes.float32)
    y = (xt if dtypes.is_float(xt.dtype) else xt.float()).matmul(wt)
  return y.transpose(ax, -1) if ax != x.ndim - 1 else y

def resize_tensor(x: Tensor, n: Any, kind: str, scales: list[float] | None, sizes: list[int] | None, axes: list[int], roi: list[float] | None) -> Tensor:
  r = x.ndim
  full_scale, full_size = [1.0] * r, list(x.shape)
  if sizes is not None:
    if len(sizes) != len(axes): raise OnnxError(f"Resize: {len(sizes)} sizes for {len(axes)} axes")
    for a, s in zip(axes, sizes): full_size[a] = s
    full_scale = [full_size[i] / x.shape[i] if x.shape[i] else 1.0 for i in range(r)]
    pol = n.attrs.get("keep_aspect_ratio_policy", "stretch")
    if pol != "stretch":
      sc = [full_scale[a] for a in axes]
      s = min(sc) if pol == "not_larger" else max(sc)
      full_scale = [s if i in axes else 1.0 for i in range(r)]
      full_size = [int(s * x.shape[i] + 0.5) if i in axes else x.shape[i] for i in range(r)]
  else:
    if scales is None or len(scales) != len(axes): raise OnnxError(f"Resize needs scales or sizes for its {len(axes)} axes")
    for a, s in zip(axes, scales): full_scale[a] = s
    full_size = [int(math.floor(x.shape[i] * full_scale[i])) for i in range(r)]
  rois = None
  if roi is not None and len(roi):
    rois = [(0.0, 1.0)] * r
    k = len(roi) // 2
    for j, a in enumerate(axes if k == len(axes) else range(r)): rois[a] = (roi[j], roi[j + k])
  y = x
  for a in range(r):
    o, i, s = full_size[a], x.shape[a], full_scale[a]
    ro = rois[a] if rois is not None else None
    if o == i and math.isclose(s, 1.0) and (ro is None or (math.isclose(ro[0], 0.0) and math.isclose(ro[1], 1.0))): continue
    w, extra = _axis_plan(kind, i, o, s, n, ro)
    y = _apply(y, a, w, kind)
    if extra is not None and extra.any():
      m = Tensor(extra.reshape(tuple(o if k == a else 1 for k in range(r))), device=x.device)
      y = m.where(float(n.attrs.get("extrapolation_value", 0.0)), y).cast(y.dtype)
  if y.dtype != x.dtype:
    if not dtypes.is_float(x.dtype): y = y.round().clip(dtypes.min(x.dtype), dtypes.max(x.dtype))
    y = y.cast(x.dtype)
  return y

def _floats(ctx, v: Any, what: str) -> list[float] | None:
  if v is None: return None
  a = ctx.host(v, what)
  return None if a.size == 0 else [float(f) for f in a.reshape(-1)]

@op("Resize")
def resize(ctx, n, x, roi=None, scales=None, sizes=None):
  x = ctx.t(x)
  kind = n.attrs.get("mode", "nearest")
  if kind not in ("nearest", "linear", "cubic"): raise UnsupportedOperator(f"Resize mode {kind!r} is not supported")
  if n.opset < 11:  # opset 10: (X, scales)
    scales, roi = roi, None
  axes = [a % x.ndim for a in n.attrs.get("axes", range(x.ndim))]
  sz = None if sizes is None else (ctx.ints(sizes, "Resize's sizes") or None)
  return resize_tensor(x, n, kind, _floats(ctx, scales, "Resize's scales") if sz is None else None, sz, axes, _floats(ctx, roi, "Resize's roi"))

class _UpsampleNode:
  """Upsample seen as a Resize with the asymmetric transform (its definition)."""
  def __init__(self, mode: str): self.attrs = {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor", "mode": mode}

@op("Upsample")
def upsample(ctx, n, x, scales=None):
  x = ctx.t(x)
  mode = n.attrs.get("mode", "nearest")
  sc = n.attrs.get("scales") if scales is None else _floats(ctx, scales, "Upsample's scales")
  kind = "linear" if mode in ("linear", "bilinear") else "nearest"
  return resize_tensor(x, _UpsampleNode(kind), kind, list(sc), None, list(range(x.ndim)), None)
