"""Neural-network ONNX operators: Conv/ConvTranspose, pools, normalizations, Gemm/MatMul/Einsum, Dropout, reductions."""
from __future__ import annotations
import math
from typing import Any
import numpy as np
from baregrad import dtypes
from baregrad.tensor import Tensor, functional as F
from baregrad.onnx.errors import OnnxError, UnsupportedOperator
from baregrad.onnx.registry import op, fold

def _ax(a: int, nd: int) -> int:
  if not -max(nd, 1) <= a < max(nd, 1): raise OnnxError(f"axis {a} is out of range for a tensor of rank {nd}")
  return a % max(nd, 1)

_HALF = (dtypes.float16, dtypes.bfloat16)
def _f32(x: Tensor) -> Tensor:
  """Half-precision inputs are normalized in float32 (ONNX's stash_type=1; also what keeps --half close to float32)."""
  return x.float() if x.dtype in _HALF else x

def _flat_pads(full: list[tuple[int, int]]) -> list[int]:
  """[(before, after) per axis] -> PyTorch's flat pad list (last axis first)."""
  return [v for b, e in reversed(full) for v in (b, e)]

# ---------------------------------------------------------------- convolution

def _conv_fn(nsp: int, transpose: bool = False) -> Any:
  name = f"conv_transpose{nsp}d" if transpose else f"conv{nsp}d"
  fn = getattr(F, name, None)
  if fn is None:
    if nsp in (1, 2, 3): return getattr(Tensor, name)  # AttributeError names the missing Tensor op
    raise UnsupportedOperator(f"{'ConvTranspose' if transpose else 'Conv'} over {nsp} spatial axes is not supported (1 to 3)")
  return fn

def _auto_pads(auto_pad: str, i_: tuple, k_: tuple, s_: tuple, d_: tuple, pads: list[int] | None) -> list[tuple[int, int]]:
  nsp = len(i_)
  if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
    out = []
    for i, k, s, d in zip(i_, k_, s_, d_):
      o = -(-i // s)
      tot = max(0, (o - 1) * s + (k - 1) * d + 1 - i)
      out.append((tot // 2, tot - tot // 2) if auto_pad == "SAME_UPPER" else (tot - tot // 2, tot // 2))
    return out
  if auto_pad == "VALID" or not pads: return [(0, 0)] * nsp
  return [(pads[j], pads[j + nsp]) for j in range(nsp)]

def _conv_attrs(n, w_shape: tuple, x_shape: tuple) -> tuple:
  nsp = len(x_shape) - 2
  k_ = tuple(n.attrs.get("kernel_shape", w_shape[2:]))
  s_ = tuple(n.attrs.get("strides", [1] * nsp))
  d_ = tuple(n.attrs.get("dilations", [1] * nsp))
  return nsp, k_, s_, d_

@op("Conv")
def conv(ctx, n, x, w, b=None):
  x, w, b = ctx.t(x), ctx.t(w), ctx.t(b)
  nsp, k_, s_, d_ = _conv_attrs(n, w.shape, x.shape)
  pads = _auto_pads(n.attrs.get("auto_pad", "NOTSET"), x.shape[2:], k_, s_, d_, n.attrs.get("pads"))
  if any(p != (0, 0) for p in pads): x = F.pad(x, _flat_pads(pads), "constant", 0)
  return _conv_fn(nsp)(x, w, b, stride=s_, padding=0, dilation=d_, groups=n.attrs.get("group", 1))

@op("DeformConv")
def deform_conv(ctx, n, x, w, offset, b=None, mask=None):
  """2-D convolution whose kernel taps sample the input at learned offsets (bilinear, zero outside the image), each
  tap's sample optionally scaled by a mask: the sampled columns (N, C*kH*kW, oH*oW) times the weights, per group."""
  x, w, offset, b, mask = ctx.t(x), ctx.t(w), ctx.t(offset), ctx.t(b), ctx.t(mask)
  if x.ndim != 4: raise UnsupportedOperator(f"DeformConv: only 2-D inputs (N, C, H, W) are supported, got shape {x.shape}")
  N, C, H, W = x.shape
  oC = w.shape[0]
  kh, kw = n.attrs.get("kernel_shape", list(w.shape[2:]))
  sh, sw = n.attrs.get("strides", [1, 1])
  dh, dw = n.attrs.get("dilations", [1, 1])
  pt, pl = n.attrs.get("pads", [0, 0, 0, 0])[:2]
  G, OG = n.attrs.get("group", 1), n.attrs.get("offset_group", 1)
  K = kh * kw
  oh, ow = offset.shape[2:]
  if C != w.shape[1] * G or oC % G or C % OG:
    raise OnnxError(f"DeformConv: X {x.shape}, W {w.shape}, group {G}, offset_group {OG} do not fit together")
  if offset.shape[:2] != (N, OG * 2 * K):
    raise OnnxError(f"DeformConv: offset of shape {offset.shape} must be (N, offset_group*2*kH*kW, oH, oW) = ({N}, {OG * 2 * K}, ...)")
  dev, L = ctx.device, oh * ow
  off = offset.cast(dtypes.float32).reshape(N, OG, K, 2, oh, ow)
  ki = Tensor.arange(K, device=dev, dtype=dtypes.int32)
  base_y = ((ki // kw) * dh).cast(dtypes.float32).reshape(1, 1, K, 1, 1) + \
    (Tensor.arange(oh, device=dev, dtype=dtypes.float32) * sh - pt).reshape(1, 1, 1, oh, 1)
  base_x = ((ki % kw) * dw).cast(dtypes.float32).reshape(1, 1, K, 1, 1) + \
    (Tensor.arange(ow, device=dev, dtype=dtypes.float32) * sw - pl).reshape(1, 1, 1, 1, ow)
  y, xx = base_y + off[:, :, :, 0], base_x + off[:, :, :, 1]                 # (N, OG, K, oh, ow)
  y0, x0 = y.floor(), xx.floor()
  fy, fx = y - y0, xx - x0
  img = x.cast(dtypes.float32).reshape(N, OG, C // OG, H * W)
  P = K * L
  acc = None
  for cy, wy in ((y0, 1.0 - fy), (y0 + 1, fy)):
    for cx, wx in ((x0, 1.0 - fx), (x0 + 1, fx)):
      ok = (cy >= 0) & (cy <= H - 1) & (cx >= 0) & (cx <= W - 1)
      pos = ok.where(cy * W + cx, 0.0).cast(dtypes.int32).reshape(N, OG, 1, P).expand(N, OG, C // OG, P)
      v = ok.where(wy * wx, 0.0).reshape(N, OG, 1, P) * F.gather(img, 3, pos)
      acc = v if acc is None else acc + v
  if mask is not None: acc = acc * mask.cast(dtypes.float32).reshape(N, OG, 1, P)
  cols = acc.reshape(N, G, (C // G) * K, L)                                 # channel-major, then the taps: W's layout
  out = w.cast(dtypes.float32).reshape(1, G, oC // G, (C // G) * K).matmul(cols).reshape(N, oC, oh, ow)
  if b is not None: out = out + b.cast(dtypes.float32).reshape(1, oC, 1, 1)
  return out.cast(x.dtype)

@op("ConvTranspose")
def conv_transpose(ctx, n, x, w, b=None):
  x, w, b = ctx.t(x), ctx.t(w), ctx.t(b)
  nsp, k_, s_, d_ = _conv_attrs(n, w.shape, x.shape)
  i_ = x.shape[2:]
  op_ = tuple(n.attrs.get("output_padding", [0] * nsp))
  auto = n.attrs.get("auto_pad", "NOTSET")
  out_shape = n.attrs.get("output_shape")
  if out_shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
    want = list(out_shape)[-nsp:] if out_shape is not None else [i * s for i, s in zip(i_, s_)]
    pads = []
    for i, k, s, d, o, w_ in zip(i_, k_, s_, d_, op_, want):
      tot = s * (i - 1) + o + (k - 1) * d + 1 - w_
      pads.append((tot // 2, tot - tot // 2) if auto == "SAME_UPPER" else (tot - tot // 2, tot // 2))
  else: pads = _auto_pads(auto, i_, k_, s_, d_, n.attrs.get("pads"))
  y = _conv_fn(nsp, True)(x, w, None, stride=s_, padding=0, output_padding=0, groups=n.attrs.get("group", 1), dilation=d_)
  # the full result covers (i-1)*s + (k-1)*d + 1: crop the pads, append output_padding
  adj = [(-pb, o - pe) for (pb, pe), o in zip(pads, op_)]
  if any(a != (0, 0) for a in adj): y = F.pad(y, _flat_pads(adj), "constant", 0)
  return y + b.reshape((1, -1) + (1,) * nsp) if b is not None else y

# ---------------------------------------------------------------- pooling

def _pool_geometry(n, x_shape: tuple) -> tuple:
  """(kernel, strides, dilations, output size, pads (before, after) covering every window, explicit pads)."""
  nsp = len(x_shape) - 2
  i_ = x_shape[2:]
  k_ = tuple(n.attrs["kernel_shape"])
  s_ = tuple(n.attrs.get("strides", [1] * nsp))
  d_ = tuple(n.attrs.get("dilations", [1] * nsp))
  auto = n.attrs.get("auto_pad", "NOTSET")
  if auto in ("SAME_UPPER", "SAME_LOWER", "VALID"):
    o_ = [(i - 1) // s + 1 if auto != "VALID" else (i - ((k - 1) * d + 1)) // s + 1 for i, k, s, d in zip(i_, k_, s_, d_)]
    pads = []
    for i, k, s, d, o in zip(i_, k_, s_, d_, o_):
      tot = max(0, (o - 1) * s + (k - 1) * d + 1 - i) if auto != "VALID" else 0
      pads.append((tot // 2, tot - tot // 2) if auto == "SAME_UPPER" else (tot - tot // 2, tot // 2))
  else:
    p = n.attrs.get("pads", [0] * 2 * nsp)
    pads = [(p[j], p[j + nsp]) for j in range(nsp)]
    o_ = []
    for i, k, s, d, (pb, pe) in zip(i_, k_, s_, d_, pads):
      num = i + pb + pe - d * (k - 1) - 1
      if n.attrs.get("ceil_mode", 0):
        o = -(-num // s) + 1
        if (o - 1) * s >= i + pb: o -= 1  # the last window starts inside the input or its left padding
      else: o = num // s + 1
      o_.append(o)
  if any(o <= 0 for o in o_): raise OnnxError(f"{n.op}: input of shape {x_shape} is too small for kernel {k_} (output {o_})")
  cover = [(pb, (o - 1) * s + (k - 1) * d + 1 - i - pb) for i, k, s, d, o, (pb, pe) in zip(i_, k_, s_, d_, o_, pads)]
  return k_, s_, d_, tuple(o_), cover, pads

def _window_sum(x: Tensor, k_: tuple, s_: tuple, d_: tuple) -> Tensor:
  """The sum of every (strided, dilated) window of the spatial axes: a depthwise convolution with a kernel of ones."""
  N, C = x.shape[:2]
  nsp = len(k_)
  ones = Tensor.full((1, 1) + k_, 1.0, dtype=x.dtype, device=x.device)
  y = _conv_fn(nsp)(x.reshape((N * C, 1) + x.shape[2:]), ones, None, stride=s_, padding=0, dilation=d_)
  return y.reshape((N, C) + y.shape[2:])

@op("MaxPool")
def max_pool(ctx, n, x):
  x = ctx.t(x)
  nsp = x.ndim - 2
  if nsp not in (1, 2, 3): raise UnsupportedOperator(f"MaxPool over {nsp} spatial axes is not supported (1 to 3)")
  k_, s_, d_, o_, cover, _ = _pool_geometry(n, x.shape)
  fill = -math.inf if dtypes.is_float(x.dtype) else dtypes.min(x.dtype)
  xp = F.pad(x, _flat_pads(cover), "constant", fill) if any(c != (0, 0) for c in cover) else x
  fn = getattr(F, f"max_pool{nsp}d")
  if len([o for o in n.outputs if o]) < 2: return fn(xp, k_, s_, 0, d_)
  y, idx = fn(xp, k_, s_, 0, d_, return_indices=True)
  # F's index is flat over the padded spatial axes: back to the input's coordinates, flat over the whole tensor
  ps = xp.shape[2:]
  i_ = x.shape[2:]
  coords, rem = [], idx
  for j in range(nsp - 1, -1, -1):
    coords.append(rem % ps[j] - cover[j][0]); rem = rem // ps[j]
  coords = coords[::-1]
  if n.attrs.get("storage_order", 0): coords, dims = coords[::-1], i_[::-1]
  else: dims = i_
  flat = coords[0]
  for c, dim in zip(coords[1:], dims[1:]): flat = flat * dim + c
  N, C = x.shape[:2]
  nc = Tensor.arange(N * C, device=x.device, dtype=dtypes.int64).reshape((N, C) + (1,) * nsp) * int(np.prod(i_))
  return y, (flat.cast(dtypes.int64) + nc)

def _avg_like(ctx, n, x: Tensor, p: int | None) -> Tensor:
  nsp = x.ndim - 2
  if nsp not in (1, 2, 3): raise UnsupportedOperator(f"{n.op} over {nsp} spatial axes is not supported (1 to 3)")
  k_, s_, d_, o_, cover, pads = _pool_geometry(n, x.shape)
  xf = _f32(x)
  v = xf if p is None else (xf.abs() if p == 1 else xf.abs() ** p)
  fp = _flat_pads(cover)
  total = _window_sum(F.pad(v, fp, "constant", 0), k_, s_, d_)
  if p is not None:
    out = total if p == 1 else total ** (1.0 / p)
    return out.cast(x.dtype)
  i_ = x.shape[2:]
  if n.attrs.get("count_include_pad", 0):  # explicit pads count, the ceil_mode tail beyond them does not
    region = tuple(i + pb + pe for i, (pb, pe) in zip(i_, pads))
    mask = Tensor.full((1, 1) + region, 1.0, dtype=xf.dtype, device=x.device)
    mask = F.pad(mask, _flat_pads([(0, c[0] + c[1] + i - r) for c, i, r in zip(cover, i_, region)]), "constant", 0)
  else:
    mask = F.pad(Tensor.full((1, 1) + i_, 1.0, dtype=xf.dtype, device=x.device), fp, "constant", 0)
  cnt = _window_sum(mask, k_, s_, d_)
  return (total / cnt).cast(x.dtype)

@op("AveragePool")
def average_pool(ctx, n, x): return _avg_like(ctx, n, ctx.t(x), None)

@op("LpPool")
def lp_pool(ctx, n, x): return _avg_like(ctx, n, ctx.t(x), n.attrs.get("p", 2))

@op("GlobalAveragePool")
def global_avg_pool(ctx, n, x):
  x = ctx.t(x)
  return x.mean(tuple(range(2, x.ndim)), keepdim=True).cast(x.dtype)
@op("GlobalMaxPool")
def global_max_pool(ctx, n, x):
  x = ctx.t(x)
  return x.amax(tuple(range(2, x.ndim)), keepdim=True)
@op("GlobalLpPool")
def global_lp_pool(ctx, n, x):
  x = ctx.t(x)
  p = n.attrs.get("p", 2)
  return (_f32(x).abs() ** p).sum(tuple(range(2, x.ndim)), keepdim=True).pow(1.0 / p).cast(x.dtype)

@op("MaxUnpool")
def max_unpool(ctx, n, x, idx, out_shape=None):
  x, idx = ctx.t(x), ctx.t(idx)
  nsp = x.ndim - 2
  k_ = n.attrs["kernel_shape"]
  s_ = n.attrs.get("strides", [1] * nsp)
  p = n.attrs.get("pads", [0] * 2 * nsp)
  inferred = x.shape[:2] + tuple((i - 1) * s - p[j] - p[j + nsp] + k for j, (i, k, s) in enumerate(zip(x.shape[2:], k_, s_)))
  total = int(np.prod(inferred))
  y = F.scatter(Tensor.full((total,), 0, dtype=x.dtype, device=x.device), 0, idx.reshape(-1), x.reshape(-1)).reshape(inferred)
  if out_shape is None: return y
  # the indices address the inferred shape; a larger output_shape is that result zero-padded at the end
  shp = ctx.ints(out_shape, "MaxUnpool's output_shape")
  return F.pad(y, _flat_pads([(0, o - i) for i, o in zip(inferred, shp)]), "constant", 0)

# ---------------------------------------------------------------- normalization

def _bshape(x: Tensor, axis: int = 1) -> tuple: return (1, -1) + (1,) * (x.ndim - 2)

@op("BatchNormalization")
def batch_norm(ctx, n, x, scale, bias, mean, var):
  x, scale, bias, mean, var = (ctx.t(v) for v in (x, scale, bias, mean, var))
  eps = n.attrs.get("epsilon", 1e-5)
  shp = (1, x.shape[1]) + (1,) * (x.ndim - 2)
  xf = _f32(x)
  training = n.attrs.get("training_mode", 0) or (n.opset < 9 and not n.attrs.get("is_test", 1) and len([o for o in n.outputs if o]) > 1)
  if training:
    axes = tuple(k for k in range(x.ndim) if k != 1)
    m = xf.mean(axes, keepdim=True)
    v = ((xf - m) * (xf - m)).mean(axes, keepdim=True)
    y = (xf - m) * (v + eps).rsqrt() * _f32(scale).reshape(shp) + _f32(bias).reshape(shp)
    mom = n.attrs.get("momentum", 0.9)
    rm = (_f32(mean) * mom + m.reshape(-1) * (1 - mom)).cast(mean.dtype)
    rv = (_f32(var) * mom + v.reshape(-1) * (1 - mom)).cast(var.dtype)
    return y.cast(x.dtype), rm, rv
  y = (xf - _f32(mean).reshape(shp)) * (_f32(var).reshape(shp) + eps).rsqrt() * _f32(scale).reshape(shp) + _f32(bias).reshape(shp)
  return y.cast(x.dtype)

@op("InstanceNormalization")
def instance_norm(ctx, n, x, scale, bias):
  x, scale, bias = ctx.t(x), ctx.t(scale), ctx.t(bias)
  eps = n.attrs.get("epsilon", 1e-5)
  xf = _f32(x)
  axes = tuple(range(2, x.ndim))
  m = xf.mean(axes, keepdim=True)
  xc = xf - m
  v = (xc * xc).mean(axes, keepdim=True)
  shp = (1, x.shape[1]) + (1,) * (x.ndim - 2)
  return (xc * (v + eps).rsqrt() * _f32(scale).reshape(shp) + _f32(bias).reshape(shp)).cast(x.dtype)

def _stash(x: Tensor, n) -> Tensor:
  return x.float() if n.attrs.get("stash_type", 1) == 1 and x.dtype in _HALF else x

@op("LayerNormalization")
def layer_norm(ctx, n, x, scale, bias=None):
  x, scale, bias = ctx.t(x), ctx.t(scale), ctx.t(bias)
  a = _ax(n.attrs.get("axis", -1), x.ndim)
  eps = n.attrs.get("epsilon", 1e-5)
  axes = tuple(range(a, x.ndim))
  xf = _stash(x, n)
  m = xf.mean(axes, keepdim=True)
  xc = xf - m
  inv = ((xc * xc).mean(axes, keepdim=True) + eps).rsqrt()
  y = (xc * inv).cast(x.dtype) * scale
  if bias is not None: y = y + bias
  return y, m, inv

@op("GroupNormalization")
def group_norm(ctx, n, x, scale, bias):
  x, scale, bias = ctx.t(x), ctx.t(scale), ctx.t(bias)
  g = n.attrs["num_groups"]
  eps = n.attrs.get("epsilon", 1e-5)
  N, C = x.shape[:2]
  xf = _stash(x, n)
  xg = xf.reshape(N, g, -1)
  m = xg.mean(-1, keepdim=True)
  xc = xg - m
  y = (xc * ((xc * xc).mean(-1, keepdim=True) + eps).rsqrt()).reshape(x.shape).cast(x.dtype)
  if scale.shape[0] == g and g != C:  # opset 18: one scale and bias per group
    scale = scale.reshape(g, 1).expand(g, C // g).reshape(C)
    bias = bias.reshape(g, 1).expand(g, C // g).reshape(C)
  shp = (1, C) + (1,) * (x.ndim - 2)
  return y * scale.reshape(shp) + bias.reshape(shp)

@op("RMSNormalization")
def rms_norm(ctx, n, x, scale):
  x, scale = ctx.t(x), ctx.t(scale)
  a = _ax(n.attrs.get("axis", -1), x.ndim)
  eps = n.attrs.get("epsilon", 1e-5)
  xf = _stash(x, n)
  y = xf * ((xf * xf).mean(tuple(range(a, x.ndim)), keepdim=True) + eps).rsqrt()
  return y.cast(x.dtype) * scale

@op("LpNormalization")
def lp_norm(ctx, n, x):
  x = ctx.t(x)
  a, p = _ax(n.attrs.get("axis", -1), x.ndim), n.attrs.get("p", 2)
  xf = _f32(x)
  nrm = xf.abs().sum(a, keepdim=True) if p == 1 else (xf * xf).sum(a, keepdim=True).sqrt()
  return nrm.eq(0).where(0.0, xf / nrm).cast(x.dtype)  # a zero norm gives 0, not NaN

@op("MeanVarianceNormalization")
def mvn(ctx, n, x):
  x = ctx.t(x)
  axes = tuple(_ax(a, x.ndim) for a in n.attrs.get("axes", [0, 2, 3]))
  xf = _f32(x)
  m = xf.mean(axes, keepdim=True)
  v = (xf * xf).mean(axes, keepdim=True) - m * m
  return ((xf - m) / (v.sqrt() + 1e-9)).cast(x.dtype)

@op("LRN")
def lrn(ctx, n, x):
  x = ctx.t(x)
  size = n.attrs["size"]
  alpha, beta, bias = n.attrs.get("alpha", 1e-4), n.attrs.get("beta", 0.75), n.attrs.get("bias", 1.0)
  xf = _f32(x)
  sq = xf * xf
  lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
  C = x.shape[1]
  sp = F.pad(sq, [0, 0] * (x.ndim - 2) + [lo, hi], "constant", 0)
  s = None
  for j in range(size):  # the channel window as `size` shifted views, summed in one fused kernel
    part = sp[(slice(None), slice(j, j + C))]
    s = part if s is None else s + part
  return (xf / (s * (alpha / size) + bias) ** beta).cast(x.dtype)

# ---------------------------------------------------------------- matrix products

@op("MatMul")
def matmul(ctx, n, a, b):
  a, b = ctx.t(a), ctx.t(b)
  return a.matmul(b)

@op("Gemm")
def gemm(ctx, n, a, b, c=None):
  a, b, c = ctx.t(a), ctx.t(b), ctx.t(c)
  if n.attrs.get("transA", 0): a = a.T
  if n.attrs.get("transB", 0): b = b.T
  alpha, beta = n.attrs.get("alpha", 1.0), n.attrs.get("beta", 1.0)
  y = a.matmul(b)
  if alpha != 1.0: y = y * alpha
  if c is not None and beta != 0.0: y = y + (c * beta if beta != 1.0 else c)
  return y.cast(a.dtype)

@op("Einsum")
def einsum(ctx, n, *xs):
  return F.einsum(n.attrs["equation"], *[ctx.t(x) for x in xs])

@op("MatMulInteger")
def matmul_integer(ctx, n, a, b, azp=None, bzp=None):
  a, b = ctx.t(a).cast(dtypes.int32), ctx.t(b).cast(dtypes.int32)
  if azp is not None:
    z = ctx.t(azp).cast(dtypes.int32)
    a = a - (z.reshape(-1, 1) if z.ndim == 1 and z.shape[0] > 1 else z)
  if bzp is not None: b = b - ctx.t(bzp).cast(dtypes.int32)
  return a.matmul(b)

# ---------------------------------------------------------------- dropout

@op("Dropout")
def dropout(ctx, n, x, ratio=None, training=None):
  x = ctx.t(x)
  train = bool(ctx.scalar(training, "Dropout's training_mode")) if training is not None else False
  r = float(ctx.scalar(ratio, "Dropout's ratio")) if ratio is not None else n.attrs.get("ratio", 0.5)
  if not train or r == 0.0:
    return x, Tensor.full(x.shape, True, dtype=dtypes.bool, device=ctx.device)
  keep = Tensor.rand(*x.shape, device=ctx.device) >= r
  return keep.where(x * (1.0 / (1.0 - r)), 0).cast(x.dtype), keep

# ---------------------------------------------------------------- reductions

_RED_IDENT = {"ReduceSum": 0, "ReduceProd": 1, "ReduceL1": 0, "ReduceL2": 0, "ReduceSumSquare": 0, "ReduceLogSum": -math.inf,
              "ReduceLogSumExp": -math.inf, "ReduceMax": -math.inf, "ReduceMin": math.inf, "ReduceMean": math.nan}

def _red_axes(ctx, n, nd: int, axes: Any) -> tuple[int, ...] | None:
  if axes is not None: ax = ctx.ints(axes, f"{n.op}'s axes")
  elif "axes" in n.attrs: ax = list(n.attrs["axes"])
  else: ax = []
  if not ax: return None if n.attrs.get("noop_with_empty_axes", 0) else tuple(range(nd))
  return tuple(sorted({_ax(a, nd) for a in ax}))

def _reduce(kind: str, x: Tensor, axes: tuple) -> Tensor:
  if kind == "ReduceSum": return x.sum(axes, keepdim=True)
  if kind == "ReduceMean": return x.mean(axes, keepdim=True)
  if kind == "ReduceMax": return x.amax(axes, keepdim=True)
  if kind == "ReduceMin": return x.amin(axes, keepdim=True)
  if kind == "ReduceProd": return x.prod(axes, keepdim=True)
  if kind == "ReduceL1": return x.abs().sum(axes, keepdim=True)
  if kind == "ReduceL2": return (x * x).sum(axes, keepdim=True).sqrt()
  if kind == "ReduceSumSquare": return (x * x).sum(axes, keepdim=True)
  if kind == "ReduceLogSum": return x.sum(axes, keepdim=True).log()
  if kind == "ReduceLogSumExp": return x.logsumexp(axes, keepdim=True)
  raise UnsupportedOperator(kind)

@op(*_RED_IDENT)
def reduce(ctx, n, x, axes=None):
  x = ctx.t(x)
  ax = _red_axes(ctx, n, x.ndim, axes)
  if ax is None:  # noop_with_empty_axes: the input, with the elementwise part of the reduction applied
    return {"ReduceL1": lambda: x.abs(), "ReduceSumSquare": lambda: x * x, "ReduceL2": lambda: x.abs(),
            "ReduceLogSum": lambda: x.log(), "ReduceLogSumExp": lambda: x}.get(n.op, lambda: x)()
  keep = n.attrs.get("keepdims", 1)
  out_shape = tuple(1 if i in ax else s for i, s in enumerate(x.shape))
  if any(x.shape[a] == 0 for a in ax):  # over an empty set: the identity of the reduction
    v = _RED_IDENT[n.op]
    if not dtypes.is_float(x.dtype) and not math.isfinite(v): v = dtypes.min(x.dtype) if v < 0 else dtypes.max(x.dtype)
    r = Tensor.full(out_shape, v, dtype=x.dtype, device=x.device)
  else:
    xf = _f32(x) if n.op not in ("ReduceMax", "ReduceMin") else x
    r = _reduce(n.op, xf, ax)
    if r.dtype != x.dtype: r = r.cast(x.dtype)
  return r if keep else r.reshape(tuple(s for i, s in enumerate(x.shape) if i not in ax))

@fold("ReduceProd", "ReduceSum", "ReduceMax", "ReduceMin")
def fold_reduce(ctx, n, x, axes=None):
  if x.dtype.kind not in "iu": return NotImplemented
  ax = _red_axes(ctx, n, x.ndim, axes)
  if ax is None: return x
  if any(x.shape[a] == 0 for a in ax) and n.op in ("ReduceMax", "ReduceMin"): return NotImplemented
  f = {"ReduceProd": np.prod, "ReduceSum": np.sum, "ReduceMax": np.max, "ReduceMin": np.min}[n.op]
  return np.asarray(f(x, axis=ax, keepdims=bool(n.attrs.get("keepdims", 1)))).astype(x.dtype)

@op("ArgMax", "ArgMin")
def argmax(ctx, n, x):
  x = ctx.t(x)
  a = _ax(n.attrs.get("axis", 0), x.ndim)
  keep = bool(n.attrs.get("keepdims", 1))
  f = (lambda t: t.argmax(a, keepdim=keep)) if n.op == "ArgMax" else (lambda t: t.argmin(a, keepdim=keep))
  if n.attrs.get("select_last_index", 0): return (x.shape[a] - 1 - f(x.flip(a))).cast(dtypes.int64)
  return f(x).cast(dtypes.int64)
