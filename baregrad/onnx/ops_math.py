"""Elementwise ONNX operators: arithmetic, comparisons, logic, math functions and activations, Cast, Constant."""
from __future__ import annotations
from functools import reduce
import numpy as np
from baregrad import dtypes
from baregrad.tensor import Tensor
from baregrad.onnx.errors import OnnxError, UnsupportedOperator
from baregrad.onnx import lowp
from baregrad.onnx.lowp import LowP
from baregrad.onnx.registry import op, fold
from baregrad.onnx.proto import np_dtype

def _is_float(t: Tensor) -> bool: return dtypes.is_float(t.dtype)

# ---------------------------------------------------------------- arithmetic

def _div(a: Tensor, b: Tensor) -> Tensor:
  return a.div(b, rounding_mode="trunc") if not _is_float(a) and a.dtype != dtypes.bool else a / b

_BIN = {
  "Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b, "Div": _div,
  "Equal": lambda a, b: a.eq(b), "Less": lambda a, b: a < b, "Greater": lambda a, b: a > b,
  "LessOrEqual": lambda a, b: a <= b, "GreaterOrEqual": lambda a, b: a >= b,
  "And": lambda a, b: a.logical_and(b), "Or": lambda a, b: a.logical_or(b), "Xor": lambda a, b: a.logical_xor(b),
  "BitwiseAnd": lambda a, b: a & b, "BitwiseOr": lambda a, b: a | b, "BitwiseXor": lambda a, b: a ^ b,
}

@op(*_BIN)
def binary(ctx, n, a, b):
  a, b = ctx.t(a), ctx.t(b)
  if a.dtype != b.dtype and n.op not in ("And", "Or", "Xor"):
    raise OnnxError(f"{n.op} needs inputs of one type, got {a.dtype.name} and {b.dtype.name}")
  r = _BIN[n.op](a, b)
  return r if r.dtype == dtypes.bool or r.dtype == a.dtype else r.cast(a.dtype)

@op("Pow")
def pow_(ctx, n, x, y):
  x, y = ctx.t(x), ctx.t(y)
  if y.dtype != x.dtype and _is_float(x): y = y.cast(x.dtype)
  r = x.pow(y)
  return r.cast(x.dtype) if r.dtype != x.dtype else r

@op("Mod")
def mod(ctx, n, a, b):
  a, b = ctx.t(a), ctx.t(b)
  return a.fmod(b) if n.attrs.get("fmod", 0) else a.remainder(b)

@op("BitShift")
def bitshift(ctx, n, a, b):
  a, b = ctx.t(a), ctx.t(b)
  left = n.attrs.get("direction", "") == "LEFT"
  r = a << b if left else a >> b
  # shifts by the width or more, or by a negative amount, give 0 (a right shift of a negative value: -1)
  bits = 8 * a.dtype.itemsize
  out = (b >= bits) | (b < 0) if not dtypes.is_unsigned(b.dtype) else b >= bits
  fill = 0 if left or dtypes.is_unsigned(a.dtype) else (a < 0).where(-1, 0).cast(a.dtype)
  return out.where(fill, r).cast(a.dtype)

@op("BitwiseNot")
def bitwise_not(ctx, n, x): return ctx.t(x).bitwise_not()

@op("Not")
def not_(ctx, n, x): return ctx.t(x).logical_not()

def _variadic(ctx, n, xs, f):
  ts = [ctx.t(x) for x in xs if x is not None]
  if not ts: raise OnnxError(f"{n.op} needs at least one input")
  return reduce(f, ts)

@op("Max")
def max_(ctx, n, *xs): return _variadic(ctx, n, xs, lambda a, b: a.maximum(b))
@op("Min")
def min_(ctx, n, *xs): return _variadic(ctx, n, xs, lambda a, b: a.minimum(b))
@op("Sum")
def sum_(ctx, n, *xs): return _variadic(ctx, n, xs, lambda a, b: a + b)
@op("Mean")
def mean_(ctx, n, *xs):
  s = _variadic(ctx, n, xs, lambda a, b: a + b)
  return (s / len([x for x in xs if x is not None])).cast(s.dtype)

@op("Where")
def where(ctx, n, c, x, y):
  c, x, y = ctx.t(c), ctx.t(x), ctx.t(y)
  return c.where(x, y)

# ---------------------------------------------------------------- unary math and activations

_UNARY = {
  "Abs": lambda x: x.abs(), "Neg": lambda x: x.neg(), "Exp": lambda x: x.exp(), "Log": lambda x: x.log(), "Sqrt": lambda x: x.sqrt(),
  "Reciprocal": lambda x: x.reciprocal(), "Floor": lambda x: x.floor(), "Ceil": lambda x: x.ceil(), "Round": lambda x: x.round(),
  "Sign": lambda x: x.sign(), "Sin": lambda x: x.sin(), "Cos": lambda x: x.cos(), "Tan": lambda x: x.tan(), "Asin": lambda x: x.asin(),
  "Acos": lambda x: x.acos(), "Atan": lambda x: x.atan(), "Sinh": lambda x: x.sinh(), "Cosh": lambda x: x.cosh(),
  "Asinh": lambda x: x.asinh(), "Acosh": lambda x: x.acosh(), "Atanh": lambda x: x.atanh(), "Erf": lambda x: x.erf(),
  "Sigmoid": lambda x: x.sigmoid(), "Tanh": lambda x: x.tanh(), "Relu": lambda x: x.relu(), "Softplus": lambda x: x.softplus(),
  "Softsign": lambda x: x.softsign(), "HardSwish": lambda x: x.hardswish(), "Mish": lambda x: x.mish(), "IsNaN": lambda x: x.isnan(),
}

@op(*_UNARY)
def unary(ctx, n, x):
  x = ctx.t(x)
  r = _UNARY[n.op](x)
  return r if r.dtype == x.dtype or r.dtype == dtypes.bool else r.cast(x.dtype)

@op("Identity")
def identity(ctx, n, x): return x

@op("IsInf")
def isinf(ctx, n, x):
  x = ctx.t(x)
  pos, neg = n.attrs.get("detect_positive", 1), n.attrs.get("detect_negative", 1)
  r = x.isinf()
  if not pos: r = r & (x < 0)
  if not neg: r = r & (x > 0)
  return r

@op("Clip")
def clip(ctx, n, x, lo=None, hi=None):
  x = ctx.t(x)
  if n.opset < 11: lo, hi = n.attrs.get("min"), n.attrs.get("max")
  lo = ctx.t(lo).cast(x.dtype) if lo is not None and not isinstance(lo, float) else lo
  hi = ctx.t(hi).cast(x.dtype) if hi is not None and not isinstance(hi, float) else hi
  if lo is None and hi is None: return x
  return x.clip(lo, hi)

@op("LeakyRelu")
def leaky_relu(ctx, n, x): return ctx.t(x).leaky_relu(n.attrs.get("alpha", 0.01))
@op("Elu")
def elu(ctx, n, x): return ctx.t(x).elu(n.attrs.get("alpha", 1.0))
@op("Celu")
def celu(ctx, n, x): return ctx.t(x).celu(n.attrs.get("alpha", 1.0))
@op("Selu")
def selu(ctx, n, x):
  x = ctx.t(x)
  a, g = n.attrs.get("alpha", 1.67326319217681884765625), n.attrs.get("gamma", 1.05070102214813232421875)
  return (x > 0).where(x * g, (x.exp() - 1) * (a * g))
@op("HardSigmoid")
def hard_sigmoid(ctx, n, x):
  x = ctx.t(x)
  return (x * n.attrs.get("alpha", 0.2) + n.attrs.get("beta", 0.5)).clip(0, 1)
@op("ThresholdedRelu")
def thresholded_relu(ctx, n, x):
  x = ctx.t(x)
  return (x > n.attrs.get("alpha", 1.0)).where(x, 0)
@op("Shrink")
def shrink(ctx, n, x):
  x = ctx.t(x)
  b, l = n.attrs.get("bias", 0.0), n.attrs.get("lambd", 0.5)
  return (x < -l).where(x + b, (x > l).where(x - b, 0)).cast(x.dtype)
@op("Gelu")
def gelu(ctx, n, x): return ctx.t(x).gelu(n.attrs.get("approximate", "none"))
@op("Swish")
def swish(ctx, n, x):
  x = ctx.t(x)
  return x * (x * n.attrs.get("alpha", 1.0)).sigmoid()
@op("PRelu")
def prelu(ctx, n, x, slope):
  x, slope = ctx.t(x), ctx.t(slope)
  return (x < 0).where(x * slope, x)

def _coerce2d(x: Tensor, axis: int) -> tuple[Tensor, tuple]:
  a = axis % max(x.ndim, 1)
  return x.reshape(int(np.prod(x.shape[:a])), int(np.prod(x.shape[a:]))), x.shape

@op("Softmax", "LogSoftmax", "Hardmax")
def softmax(ctx, n, x):
  x = ctx.t(x)
  if n.opset < 13:  # the input is seen as 2-D [prod(shape[:axis]), prod(shape[axis:])]
    x2, shp = _coerce2d(x, n.attrs.get("axis", 1))
    return _softmax(n.op, x2, 1).reshape(shp)
  return _softmax(n.op, x, n.attrs.get("axis", -1))

def _softmax(kind: str, x: Tensor, axis: int) -> Tensor:
  if kind == "Softmax": return x.softmax(axis).cast(x.dtype)
  if kind == "LogSoftmax": return x.log_softmax(axis).cast(x.dtype)
  a = axis % x.ndim
  idx = x.argmax(a, keepdim=True)
  ar = Tensor.arange(x.shape[a], device=x.device).reshape(tuple(x.shape[a] if i == a else 1 for i in range(x.ndim)))
  return idx.eq(ar).cast(x.dtype)

# ---------------------------------------------------------------- types and constants

def _cast_to(ctx, n, x, to: int):
  """x (a Tensor, LowP or host array) as ONNX type `to`; the low-precision types convert by lowp's kernels."""
  if isinstance(x, np.ndarray) and x.dtype.kind in "OSU": raise UnsupportedOperator("Cast of strings is not supported")
  v = ctx.value(x)
  if isinstance(v, LowP):
    if v.onnx_type == to: return v
    v = lowp.decode(v)  # float32, or int32 for the integer types
  if lowp.is_lowp(to): return lowp.encode(v, to, bool(n.attrs.get("saturate", 1)), _round_mode(n))
  return v.cast(ctx.dtype(to))

def _round_mode(n) -> str:
  rm = n.attrs.get("round_mode", "up")
  return rm.decode() if isinstance(rm, bytes) else rm

@op("Cast")
def cast(ctx, n, x):
  to = n.attrs.get("to")
  if to is None: raise OnnxError("Cast needs the 'to' attribute")
  return _cast_to(ctx, n, x, to)

@op("CastLike")
def cast_like(ctx, n, x, like):
  if isinstance(like, LowP): return _cast_to(ctx, n, x, like.onnx_type)
  if isinstance(like, np.ndarray) and lowp.onnx_type_of_np(like) is not None: return _cast_to(ctx, n, x, lowp.onnx_type_of_np(like))
  d = like.dtype if isinstance(like, Tensor) else ctx.t(like).dtype
  v = ctx.value(x)
  return (lowp.decode(v) if isinstance(v, LowP) else v).cast(d)

@op("Constant")
def constant(ctx, n):
  a = n.attrs
  if "value" in a: return a["value"]
  if "value_float" in a: return np.array(a["value_float"], np.float16 if ctx.half else np.float32)
  if "value_floats" in a: return np.array(a["value_floats"], np.float16 if ctx.half else np.float32)
  if "value_int" in a: return np.array(a["value_int"], np.int64)
  if "value_ints" in a: return np.array(a["value_ints"], np.int64)
  raise UnsupportedOperator(f"Constant with attribute {sorted(a)} is not supported (strings and sparse tensors are not)")

# ---------------------------------------------------------------- host folds for shape arithmetic

def _np_bin(n, a, b):
  if n.op == "Div":
    if a.dtype.kind in "iu":
      with np.errstate(all="ignore"):
        q = np.where(b == 0, 0, np.trunc(np.divide(a, np.where(b == 0, 1, b))))
      return q.astype(a.dtype)
    return (a / b).astype(a.dtype)
  f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Equal": np.equal, "Less": np.less, "Greater": np.greater,
       "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal, "And": np.logical_and, "Or": np.logical_or,
       "Xor": np.logical_xor}[n.op]
  with np.errstate(all="ignore"): r = f(a, b)
  return r if r.dtype == np.bool_ else r.astype(a.dtype)

@fold("Add", "Sub", "Mul", "Div", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor")
def fold_bin(ctx, n, a, b):
  if a.dtype != b.dtype and n.op not in ("And", "Or", "Xor"): return NotImplemented
  if a.dtype.kind == "f" and max(a.size, b.size) > 64: return NotImplemented  # float math on weights: kernels
  if a.dtype.name == "bfloat16": return NotImplemented
  return _np_bin(n, a, b)

@fold("Neg", "Abs", "Not", "Identity", "Floor", "Ceil", "Sign")
def fold_unary(ctx, n, x):
  if x.dtype.kind == "f" and n.op in ("Floor", "Ceil", "Sign") and x.size > 64: return NotImplemented
  if x.dtype.name == "bfloat16" and n.op != "Identity": return NotImplemented
  f = {"Neg": np.negative, "Abs": np.abs, "Not": np.logical_not, "Identity": lambda v: v, "Floor": np.floor, "Ceil": np.ceil, "Sign": np.sign}[n.op]
  return np.asarray(f(x)).astype(x.dtype)

@fold("Max", "Min")
def fold_minmax(ctx, n, *xs):
  xs = [x for x in xs if x is not None]
  if len({x.dtype for x in xs}) != 1 or xs[0].dtype.kind not in "iub": return NotImplemented
  return reduce(np.maximum if n.op == "Max" else np.minimum, xs)

@fold("Cast")
def fold_cast(ctx, n, x):
  if lowp.is_lowp(n.attrs["to"]): return NotImplemented  # converted by lowp's kernels
  d = ctx.dtype(n.attrs["to"])
  if x.dtype.kind == "f" and x.dtype.itemsize < 8 and np_dtype(d).kind in "iu" and x.size > 64: return NotImplemented
  if x.dtype.name == "bfloat16" or d == dtypes.bfloat16: return NotImplemented
  if x.dtype.kind == "f" and np_dtype(d).kind in "iub" and not np.all(np.isfinite(x)): return NotImplemented  # NaN/inf: the kernels' rule
  return x.astype(np_dtype(d))

@fold("Where")
def fold_where(ctx, n, c, x, y):
  if x.dtype != y.dtype: return NotImplemented
  return np.where(c, x, y)

@fold("Constant")
def fold_constant(ctx, n): return constant(ctx, n)
