"""ONNX's low-precision types with no baregrad dtype: float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz, e8m0), float6 (e2m3,
e3m2), float4 (e2m1) and the 4- and 2-bit integers. A value of one of them is a LowP: its encodings, one per byte
(a uint8 Tensor, never packed two to a byte while it is computed on), and its ONNX type.

The conversions to and from float32 are Tensor ops on the bits (bitcast, shifts, masks), so they run as kernels
like every other operator; only the runner's boundary touches NumPy (the test harness and onnx.numpy_helper give and
expect ml_dtypes arrays, whose bytes are these same encodings).

Rounding and overflow follow the ONNX Cast specification (round to nearest, ties to even):
- saturate=1 (the default): a finite value beyond the largest one, and +-inf, become +-max; NaN stays NaN;
- saturate=0: overflow gives inf in e5m2, NaN in e4m3fn and the fnuz types (which have no inf);
- float4/float6 have no inf and no NaN: they always saturate, and NaN becomes 0;
- fnuz types have no -0: a value that rounds to zero is +0, and 0x80 is their one NaN;
- e8m0 holds only an exponent (2^(b-127), 0xFF is NaN): the sign is dropped and the mantissa rounds by round_mode
  ("up" by default, "down", "nearest"), as onnx.numpy_helper.to_float8e8m0 does;
- the integer types take the float truncated toward zero (NaN and inf give 0) and keep its low bits (wrapping, as
  ml_dtypes does); QuantizeLinear clips to their range first."""
from __future__ import annotations
from dataclasses import dataclass
from typing import Any
import numpy as np
from baregrad import dtypes
from baregrad.tensor import Tensor
from baregrad.onnx.errors import OnnxError

@dataclass(frozen=True)
class MiniFloat:
  """A sign/exponent/mantissa format of at most 8 bits."""
  name: str
  E: int            # exponent bits
  M: int            # mantissa bits
  bias: int
  max_bits: int     # encoding of the largest finite magnitude
  nan: str          # "fn": exponent and mantissa all ones is NaN; "ieee": exponent all ones is inf/NaN; "uz": 0x80 is NaN; "none"

@dataclass(frozen=True)
class SmallInt:
  name: str
  bits: int
  signed: bool
  @property
  def lo(self) -> int: return -(1 << (self.bits - 1)) if self.signed else 0
  @property
  def hi(self) -> int: return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1

E8M0 = "float8_e8m0fnu"

# ONNX TensorProto.DataType -> format; the names are ml_dtypes' (NumPy's spelling of these types)
FORMATS: dict[int, Any] = {
  17: MiniFloat("float8_e4m3fn", 4, 3, 7, 0x7E, "fn"),
  18: MiniFloat("float8_e4m3fnuz", 4, 3, 8, 0x7F, "uz"),
  19: MiniFloat("float8_e5m2", 5, 2, 15, 0x7B, "ieee"),
  20: MiniFloat("float8_e5m2fnuz", 5, 2, 16, 0x7F, "uz"),
  23: MiniFloat("float4_e2m1fn", 2, 1, 1, 0x7, "none"),
  27: MiniFloat("float6_e2m3fn", 2, 3, 1, 0x1F, "none"),
  28: MiniFloat("float6_e3m2fn", 3, 2, 3, 0x1F, "none"),
  24: E8M0,
  21: SmallInt("uint4", 4, False), 22: SmallInt("int4", 4, True),
  25: SmallInt("uint2", 2, False), 26: SmallInt("int2", 2, True),
}
_BY_NAME = {(f if isinstance(f, str) else f.name): t for t, f in FORMATS.items()}

def is_lowp(onnx_type: Any) -> bool: return onnx_type in FORMATS
def is_float_type(onnx_type: int) -> bool: return not isinstance(FORMATS[onnx_type], SmallInt)
def type_name(onnx_type: int) -> str:
  f = FORMATS[onnx_type]
  return f if isinstance(f, str) else f.name

class LowP:
  """A tensor of a low-precision ONNX type: bits (uint8 Tensor, one encoding per byte) and the ONNX type."""
  def __init__(self, bits: Tensor, onnx_type: int):
    if bits.dtype != dtypes.uint8: raise OnnxError(f"{type_name(onnx_type)} values are held as uint8 encodings, got {bits.dtype.name}")
    self.bits, self.onnx_type = bits, onnx_type
  @property
  def shape(self) -> tuple[int, ...]: return self.bits.shape
  @property
  def ndim(self) -> int: return self.bits.ndim
  @property
  def device(self) -> str: return self.bits.device
  @property
  def name(self) -> str: return type_name(self.onnx_type)
  def numel(self) -> int: return self.bits.numel()
  def __repr__(self) -> str: return f"<LowP {self.name} shape={self.shape}>"
  def numpy(self) -> np.ndarray:
    """The values as an ml_dtypes array (the encodings' bytes viewed as the type)."""
    return self.bits.numpy().view(np_type(self.onnx_type))

def np_type(onnx_type: int) -> Any:
  import ml_dtypes  # onnx depends on it
  return np.dtype(getattr(ml_dtypes, type_name(onnx_type)))

def onnx_type_of_np(a: np.ndarray) -> int | None:
  """The ONNX type of an ml_dtypes array of a low-precision type, None for any other array."""
  return _BY_NAME.get(a.dtype.name)

def from_numpy(a: np.ndarray, device: str) -> LowP:
  """An ml_dtypes array as a LowP: its bytes are the encodings (ml_dtypes keeps one per byte, in the low bits)."""
  t = onnx_type_of_np(a)
  if t is None: raise OnnxError(f"NumPy dtype {a.dtype} is not a low-precision ONNX type")
  f = FORMATS[t]
  raw = np.ascontiguousarray(a).view(np.uint8)
  if isinstance(f, SmallInt): raw = raw & np.uint8((1 << f.bits) - 1)
  return LowP(Tensor(raw, device=device, dtype=dtypes.uint8), t)

# ---------------------------------------------------------------- decoding: bits -> float32 (or int32 for the integers)

def decode(v: LowP) -> Tensor:
  """The values as float32 (the float formats) or int32 (the integer ones), computed from the bits on the device."""
  f, b = FORMATS[v.onnx_type], v.bits.cast(dtypes.int32)
  if isinstance(f, SmallInt):
    return (b >= (1 << (f.bits - 1))).where(b - (1 << f.bits), b) if f.signed else b
  if f == E8M0:  # 2^(b-127); b = 0 is 2^-127, a float32 subnormal (bits 0x00400000)
    u = b.eq(0).where(0x00400000, b << 23)
    return b.eq(0xFF).where(float("nan"), u.bitcast(dtypes.float32))
  s = (b >> (f.E + f.M)) & 1
  e = (b >> f.M) & ((1 << f.E) - 1)
  m = b & ((1 << f.M) - 1)
  normal = (((e + (127 - f.bias)) << 23) | (m << (23 - f.M))).bitcast(dtypes.float32)
  sub = m.cast(dtypes.float32) * float(2.0 ** (1 - f.bias - f.M))   # exact: a small integer times a power of two
  mag = e.eq(0).where(sub, normal)
  val = s.eq(1).where(-mag, mag)
  nan = float("nan")
  if f.nan == "fn": val = (b & 0x7F).eq(0x7F).where(nan, val)
  elif f.nan == "uz": val = b.eq(0x80).where(nan, val)
  elif f.nan == "ieee":
    top = (1 << f.E) - 1
    val = e.eq(top).where(m.eq(0).where(s.eq(1).where(float("-inf"), float("inf")), nan), val)
  return val

# ---------------------------------------------------------------- encoding: float32 / ints -> bits

def encode(x: Tensor, onnx_type: int, saturate: bool = True, round_mode: str = "up") -> LowP:
  """x (any float or integer Tensor) converted to a low-precision type, as ONNX Cast does."""
  f = FORMATS[onnx_type]
  if isinstance(f, SmallInt): return LowP(_encode_int(x, f), onnx_type)
  xf = x if x.dtype == dtypes.float32 else x.cast(dtypes.float32)
  if f == E8M0: return LowP(_encode_e8m0(xf, saturate, round_mode), onnx_type)
  return LowP(_encode_minifloat(xf, f, saturate), onnx_type)

def _encode_int(x: Tensor, f: SmallInt) -> Tensor:
  if dtypes.is_float(x.dtype):
    xf = x.cast(dtypes.float32) if x.dtype != dtypes.float64 else x
    finite = xf.isnan().logical_not() & xf.abs().ne(float("inf"))
    lim = float(2 ** 62)  # beyond it the low bits of an int64 are not defined; a float that large has none below 2^39 anyway
    x = finite.where(xf.clip(-lim, lim), 0.0).cast(dtypes.int64)  # cast truncates toward zero
  elif x.dtype == dtypes.bool: x = x.cast(dtypes.int32)
  return (x & ((1 << f.bits) - 1)).cast(dtypes.uint8)

def _encode_minifloat(x: Tensor, f: MiniFloat, saturate: bool) -> Tensor:
  u = x.bitcast(dtypes.uint32)
  sign = ((u >> 31) << (f.E + f.M)).cast(dtypes.int32)
  a = u & 0x7FFFFFFF
  isnan, isinf = a > 0x7F800000, a.eq(0x7F800000)
  e32 = (a >> 23).cast(dtypes.int32) - 127
  emin = 1 - f.bias
  sh = 23 - f.M
  # normal range: round the mantissa to M bits, ties to even (a carry moves into the exponent), then rebias
  r = ((a + ((1 << (sh - 1)) - 1) + ((a >> sh) & 1)) >> sh).cast(dtypes.int32)
  normal = r - ((127 - f.bias) << f.M)
  # below the smallest normal: multiples of 2^(emin-M); rounding 2^M of them gives the smallest normal's encoding
  ax = a.bitcast(dtypes.float32)
  sub = (ax * float(2.0 ** (f.M - emin))).round().cast(dtypes.int32)
  mag = (e32 < emin).where(sub, normal)
  over = isinf | (mag > f.max_bits)
  if saturate or f.nan == "none": mag = over.where(f.max_bits, mag)
  elif f.nan == "ieee": mag = over.where(((1 << f.E) - 1) << f.M, mag)     # inf
  elif f.nan == "fn": mag = over.where(0x7F, mag)                          # NaN
  if f.nan == "uz":
    bits = mag.eq(0).where(0, sign | mag)                                  # no -0
    bits = (isnan if saturate else isnan | over).where(0x80, bits)       # overflow was saturated above, or is NaN
  elif f.nan == "none": bits = isnan.where(0, sign | mag)
  elif f.nan == "fn": bits = isnan.where(sign | 0x7F, sign | mag)
  else: bits = isnan.where(sign | (((1 << f.E) - 1) << f.M) | 2, sign | mag)
  return bits.cast(dtypes.uint8)

def _encode_e8m0(x: Tensor, saturate: bool, round_mode: str) -> Tensor:
  u = x.bitcast(dtypes.uint32)
  ex = ((u >> 23) & 0xFF).cast(dtypes.int32)
  special = ex.eq(0xFF)
  if round_mode == "up": up = (u & 0x7FFFFF).ne(0)
  elif round_mode == "nearest":
    g, r, s = (u & 0x400000).ne(0), (u & 0x200000).ne(0), (u & 0x1FFFFF).ne(0)
    up = g & (r | s | (ex > 0))
  elif round_mode == "down": up = None
  else: raise OnnxError(f"Cast to FLOAT8E8M0: round_mode {round_mode!r} is not one of 'up', 'down', 'nearest'")
  if up is not None:
    if saturate: up = up & ex.ne(0xFE)
    ex = up.where(ex + 1, ex)
  return special.where(0xFF, ex).cast(dtypes.uint8)
