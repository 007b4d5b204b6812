"""Quantization: QuantizeLinear/DequantizeLinear (per tensor, per axis, blocked), DynamicQuantizeLinear, and the
integer operators of quantized models (MatMulInteger is in ops_nn; QLinearMatMul, QLinearConv, ConvInteger here).
Integer products accumulate exactly in int32; requantization rounds half to even and saturates, as ONNX says.
Quantized types: the 8- and 16-bit integers, and the low-precision ones (float8, float4, int4/uint4, int2/uint2:
lowp.py holds them as their encodings and converts them by Tensor ops)."""
from __future__ import annotations
from typing import Any
from baregrad import dtypes
from baregrad.tensor import Tensor
from baregrad.onnx.errors import OnnxError, UnsupportedOperator
from baregrad.onnx import lowp
from baregrad.onnx.lowp import LowP
from baregrad.onnx.registry import op
from baregrad.onnx.ops_nn import conv

def _along(s: Tensor, x: Tensor, axis: int, block: int) -> Tensor:
  """A scale or zero point broadcast against x: one value (per tensor), a 1-D vector along axis, or blocks of `block`."""
  if s.numel() == 1 and not block: return s.reshape(())
  a = axis % x.ndim
  if block:
    if s.ndim != x.ndim: raise OnnxError(f"blocked quantization: scale of shape {s.shape} must have the rank of the input {x.shape}")
    n = x.shape[a]
    e = s.unsqueeze(a + 1).expand(s.shape[:a + 1] + (block,) + s.shape[a + 1:]).reshape(s.shape[:a] + (s.shape[a] * block,) + s.shape[a + 1:])
    return e[(slice(None),) * a + (slice(0, n),)]
  if s.ndim != 1 or s.shape[0] != x.shape[a]: raise OnnxError(f"per-axis scale of shape {s.shape} does not match axis {a} of input shape {x.shape}")
  return s.reshape(tuple(x.shape[a] if k == a else 1 for k in range(x.ndim)))

def _saturate(v: Tensor, d: Any) -> Tensor:
  if not dtypes.is_int(d): raise UnsupportedOperator(f"quantization to {d.name} is not supported (8- and 16-bit integers)")
  return v.clip(dtypes.min(d), dtypes.max(d)).cast(d)

def _round_even(v: Tensor) -> Tensor: return v.round()  # Tensor.round rounds half to even

@op("DequantizeLinear")
def dequantize_linear(ctx, n, x, scale, zp=None):
  x, scale, zp = ctx.value(x), ctx.t(scale), ctx.value(zp) if zp is not None else None
  axis, block = n.attrs.get("axis", 1), n.attrs.get("block_size", 0)
  out_dt = ctx.dtype(n.attrs["output_dtype"]) if n.attrs.get("output_dtype") else scale.dtype
  s = _along(scale, x, axis, block)
  if isinstance(x, LowP) and lowp.is_float_type(x.onnx_type):
    # float8/float4: the zero point must be zero (ONNX: it is ignored for these types)
    return (lowp.decode(x) * s.cast(dtypes.float32)).cast(out_dt)
  xi = lowp.decode(x) if isinstance(x, LowP) else x.cast(dtypes.int32) if x.dtype != dtypes.int32 else x
  if zp is not None: xi = xi - _along(lowp.decode(zp) if isinstance(zp, LowP) else zp, x, axis, block).cast(dtypes.int32)
  return (xi.cast(dtypes.float32) * s.cast(dtypes.float32)).cast(out_dt)

@op("QuantizeLinear")
def quantize_linear(ctx, n, x, scale, zp=None):
  x, scale, zp = ctx.t(x), ctx.t(scale), ctx.value(zp) if zp is not None else None
  axis, block = n.attrs.get("axis", 1), n.attrs.get("block_size", 0)
  to = n.attrs.get("output_dtype") or (zp.onnx_type if isinstance(zp, LowP) else None)
  v = x.cast(dtypes.float32) / _along(scale, x, axis, block).cast(dtypes.float32)
  if to is not None and lowp.is_lowp(to):
    if to == 24: raise UnsupportedOperator("QuantizeLinear to FLOAT8E8M0 is not a quantization type")
    zpf = _along(lowp.decode(zp), x, axis, block).cast(dtypes.float32) if isinstance(zp, LowP) else None
    if lowp.is_float_type(to):
      # float8 ignores the zero point (it must be 0); float4 adds it, as onnx's reference does
      if zpf is not None and lowp.FORMATS[to].nan == "none": v = v + zpf
      return lowp.encode(v, to, bool(n.attrs.get("saturate", 1)))
    f = lowp.FORMATS[to]
    v = _round_even(v)
    if zpf is not None: v = v + zpf
    return lowp.encode(v.clip(f.lo, f.hi), to)
  d = ctx.dtype(to) if to is not None else zp.dtype if zp is not None else dtypes.uint8
  v = _round_even(v)
  if zp is not None: v = v + _along(zp, x, axis, block).cast(dtypes.float32)
  return _saturate(v, d)

@op("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx, n, x):
  x = ctx.t(x).cast(dtypes.float32)
  lo, hi = x.min().minimum(0.0), x.max().maximum(0.0)
  scale = (hi - lo) / 255.0
  zp = _round_even((0.0 - lo) / scale).clip(0, 255)
  y = _saturate(_round_even(x / scale) + zp, dtypes.uint8)
  return y, scale, zp.cast(dtypes.uint8)

def _requant(acc: Tensor, scale: Tensor, yscale: Tensor, yzp: Tensor | None, d: Any) -> Tensor:
  v = _round_even(acc.cast(dtypes.float32) * (scale.cast(dtypes.float32) / yscale.cast(dtypes.float32)))
  if yzp is not None: v = v + yzp.cast(dtypes.float32)
  return _saturate(v, d)

def _centered(t: Tensor, zp: Tensor | None, rows: bool = False) -> Tensor:
  ti = t.cast(dtypes.int32)
  if zp is None: return ti
  z = zp.cast(dtypes.int32)
  if z.numel() > 1: z = z.reshape(-1, 1) if rows else z.reshape(-1)
  return ti - z

@op("QLinearMatMul")
def qlinear_matmul(ctx, n, a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp):
  a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp = (ctx.t(v) for v in (a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp))
  acc = _centered(a, a_zp, rows=True).matmul(_centered(b, b_zp))
  sc = a_s.reshape(-1, 1) if a_s.numel() > 1 else a_s.reshape(())
  sc = sc * (b_s.reshape(-1) if b_s.numel() > 1 else b_s.reshape(()))
  return _requant(acc, sc, y_s.reshape(()), y_zp.reshape(()) if y_zp is not None else None, y_zp.dtype if y_zp is not None else dtypes.uint8)

def _conv_int(ctx, n, x: Tensor, w: Tensor, xzp: Tensor | None, wzp: Tensor | None) -> Tensor:
  xi = x.cast(dtypes.int32) - (xzp.cast(dtypes.int32).reshape(()) if xzp is not None else 0)
  wi = w.cast(dtypes.int32)
  if wzp is not None:
    z = wzp.cast(dtypes.int32)
    wi = wi - (z.reshape((-1,) + (1,) * (w.ndim - 1)) if z.numel() > 1 else z.reshape(()))
  return conv(ctx, n, xi, wi).cast(dtypes.int32)  # the window sums run in int64 (Tensor.sum of ints)

@op("ConvInteger")
def conv_integer(ctx, n, x, w, xzp=None, wzp=None):
  return _conv_int(ctx, n, ctx.t(x), ctx.t(w), ctx.t(xzp), ctx.t(wzp))

@op("QLinearConv")
def qlinear_conv(ctx, n, x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp, b=None):
  x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp, b = (ctx.t(v) for v in (x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp, b))
  acc = _conv_int(ctx, n, x, w, x_zp, w_zp)
  nsp = x.ndim - 2
  if b is not None: acc = acc + b.cast(dtypes.int32).reshape((1, -1) + (1,) * nsp)
  ws = w_s.reshape((1, -1) + (1,) * nsp) if w_s.numel() > 1 else w_s.reshape(())
  return _requant(acc, x_s.reshape(()) * ws, y_s.reshape(()), y_zp.reshape(()) if y_zp is not None else None, y_zp.dtype if y_zp is not None else dtypes.uint8)
