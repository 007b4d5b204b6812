"""Scalar and vector dtypes, with PyTorch's type promotion rules."""
from __future__ import annotations
from dataclasses import dataclass
import builtins, math, struct
from typing import Any

_INTERNED: dict[tuple, "DType"] = {}

def _make(cls: type[DType], *fields: Any) -> DType:
  """The one instance of a dtype: every dtype is interned, so equality and hashing are identity (C-level: dtypes key
  every UOp, and hash-consing hashes and compares them for each node built)."""
  fs = cls.__dataclass_fields__
  if len(fields) < len(fs): fields += tuple(f.default for f in list(fs.values())[len(fields):])   # defaults in the key
  key = (cls, *fields)
  if (d := _INTERNED.get(key)) is None: _INTERNED[key] = d = cls(*fields)
  return d

@dataclass(frozen=True, eq=False)
class DType:
  """A scalar type (count == 1) or a vector of `count` scalars. Pointers are PtrDType. Made only through _make (the
  table below, vec, ptr, unpickling): one object per dtype, compared by identity."""
  priority: int     # position in the promotion lattice; higher wins within a category
  itemsize: int     # bytes of one scalar
  name: str
  fmt: str | None   # struct/memoryview format character, None where Python has none (bfloat16)
  count: int = 1

  def __reduce__(self) -> tuple:   # unpickled (another process: BEAM's workers) as the interned instance
    return (_make, (type(self), *(getattr(self, f) for f in self.__dataclass_fields__)))

  def vec(self, n: int) -> DType:
    if n == 1: return self
    if self.count != 1: raise ValueError(f"cannot vectorize {self}: already a vector")
    return _make(DType, self.priority, self.itemsize, self.name, None, n)
  @property
  def scalar(self) -> DType: return self if self.count == 1 else _BY_NAME[self.name]
  @property
  def nbytes(self) -> int: return self.itemsize * self.count
  def ptr(self, local: bool = False) -> PtrDType: return _make(PtrDType, self.priority, self.itemsize, self.name, self.fmt, self.count, self, local)  # type: ignore[return-value]
  def __repr__(self) -> str: return f"dtypes.{self.name}" + (f".vec({self.count})" if self.count > 1 else "")

@dataclass(frozen=True, eq=False)
class PtrDType(DType):
  base: DType = None  # type: ignore[assignment]
  local: bool = False
  def __repr__(self) -> str: return f"{self.base!r}.ptr({'local=True' if self.local else ''})"

class dtypes:
  bool = _make(DType, 0, 1, "bool", "?")
  int8 = _make(DType, 1, 1, "char", "b")
  uint8 = _make(DType, 2, 1, "uchar", "B")
  int16 = _make(DType, 3, 2, "short", "h")
  uint16 = _make(DType, 4, 2, "ushort", "H")
  int32 = _make(DType, 5, 4, "int", "i")
  uint32 = _make(DType, 6, 4, "uint", "I")
  int64 = _make(DType, 7, 8, "long", "q")
  uint64 = _make(DType, 8, 8, "ulong", "Q")
  float16 = _make(DType, 9, 2, "half", "e")
  bfloat16 = _make(DType, 10, 2, "bfloat16", None)
  float32 = _make(DType, 11, 4, "float", "f")
  float64 = _make(DType, 12, 8, "double", "d")
  void = _make(DType, -1, 0, "void", None)
  # aliases
  half, float, double, int, long, uchar, char, short = float16, float32, float64, int32, int64, uint8, int8, int16
  default_float = float32
  default_int = int32

  @staticmethod
  def is_float(d: DType) -> builtins.bool: return d.scalar in _FLOAT_SET
  @staticmethod
  def is_int(d: DType) -> builtins.bool: return d.scalar in _INT_SET
  @staticmethod
  def is_unsigned(d: DType) -> builtins.bool: return d.scalar in _UNSIGNED_SET
  @staticmethod
  def is_bool(d: DType) -> builtins.bool: return d.scalar == dtypes.bool
  @staticmethod
  def from_name(name: str) -> DType:
    if name in _BY_NAME: return _BY_NAME[name]
    if name in _TORCH_NAMES: return _TORCH_NAMES[name]
    raise ValueError(f"unknown dtype {name!r}; expected one of {sorted(_TORCH_NAMES)}")
  @staticmethod
  def min(d: DType) -> builtins.int | builtins.float:
    if dtypes.is_int(d): return 0 if dtypes.is_unsigned(d) else -(2 ** (8 * d.itemsize - 1))
    if d.scalar == dtypes.bool: return False
    return -math.inf
  @staticmethod
  def max(d: DType) -> builtins.int | builtins.float:
    if dtypes.is_int(d): return 2 ** (8 * d.itemsize - (0 if dtypes.is_unsigned(d) else 1)) - 1
    if d.scalar == dtypes.bool: return True
    return math.inf

INTS = (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64)
UNSIGNED = (dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)
FLOATS = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
ALL = (dtypes.bool,) + INTS + FLOATS
_BY_NAME = {d.name: d for d in ALL}
# membership by hash (a tuple's `in` compares with each element in turn)
_INT_SET, _UNSIGNED_SET, _FLOAT_SET = frozenset(INTS), frozenset(UNSIGNED), frozenset(FLOATS)
_TORCH_NAMES = {"bool": dtypes.bool, "int8": dtypes.int8, "uint8": dtypes.uint8, "int16": dtypes.int16, "uint16": dtypes.uint16,
                "int32": dtypes.int32, "uint32": dtypes.uint32, "int64": dtypes.int64, "uint64": dtypes.uint64,
                "float16": dtypes.float16, "bfloat16": dtypes.bfloat16, "float32": dtypes.float32, "float64": dtypes.float64}

_NAME_OF = {v: k for k, v in _TORCH_NAMES.items()}

def torch_name(d: DType) -> str: return _NAME_OF[d.scalar]

def _category(d: DType) -> int: return 0 if d == dtypes.bool else 1 if d in _INT_SET else 2

def promote(a: DType, b: DType) -> DType:
  """PyTorch's promotion of two tensor dtypes (torch.promote_types)."""
  a, b = a.scalar, b.scalar
  if a == b: return a
  ca, cb = _category(a), _category(b)
  if ca != cb: return a if ca > cb else b
  if ca == 2:  # float16 with bfloat16 meet at float32
    if {a, b} == {dtypes.float16, dtypes.bfloat16}: return dtypes.float32
    return a if a.itemsize > b.itemsize else b
  # integers: same signedness -> wider; mixed -> signed type wide enough, uint64 with signed -> float32 in torch? no: error
  if dtypes.is_unsigned(a) == dtypes.is_unsigned(b): return a if a.itemsize > b.itemsize else b
  s, u = (a, b) if dtypes.is_unsigned(b) else (b, a)
  if s.itemsize > u.itemsize: return s
  wider = {1: dtypes.int16, 2: dtypes.int32, 4: dtypes.int64}.get(u.itemsize)
  if wider is None: raise TypeError(f"no dtype holds both {s} and {u} (PyTorch refuses to promote uint64 with signed ints)")
  return wider

def least_upper(*ds: DType) -> DType:
  out = ds[0]
  for d in ds[1:]: out = promote(out, d)
  return out

def scalar_dtype(x: object) -> DType:
  """The dtype PyTorch gives a Python scalar of this kind (as a 'wrapped number': it only sets the category)."""
  if isinstance(x, bool): return dtypes.bool
  if isinstance(x, int): return dtypes.int64
  if isinstance(x, float): return dtypes.float32
  raise TypeError(f"expected a Python bool, int or float, got {type(x).__name__}")

def promote_with_scalar(t: DType, x: object) -> DType:
  """Tensor op Python scalar: the scalar raises the category only (torch.result_type)."""
  sd = scalar_dtype(x)
  if _category(sd) > _category(t.scalar): return dtypes.default_float if _category(sd) == 2 else dtypes.int64
  return t.scalar

_F32: dict = {}   # float32 roundings of Python numbers met before (an eager `x + 1` truncates its constant every time)

def truncate(d: DType, x: int | float | bool) -> int | float | bool:
  """Wrap or round a Python value to what dtype d holds (two's complement, IEEE rounding)."""
  # (a float zero is never filed: -0.0 == 0.0 would find the other's entry)
  if d is dtypes.float32 and (r := _F32.get((type(x), x))) is not None: return r
  d, x0 = d.scalar, x
  if d == dtypes.bool: return bool(x)
  if dtypes.is_int(d):
    if isinstance(x, float):
      if math.isnan(x) or math.isinf(x): return 0
      x = int(x)
    bits = 8 * d.itemsize
    x = int(x) & ((1 << bits) - 1)
    return x - (1 << bits) if not dtypes.is_unsigned(d) and x >= 1 << (bits - 1) else x
  if isinstance(x, int) and not isinstance(x, bool) and d != dtypes.float64:
    # round a Python int straight to the format's precision (float(x) first would round twice for |x| >= 2**53);
    # bfloat16 goes through float32, as the kernels convert it
    x = _round_int(x, 11 if d == dtypes.float16 else 24)
  x = float(x)
  if d == dtypes.float64: return x
  if d == dtypes.float32:
    try: r = struct.unpack("f", struct.pack("f", x))[0]
    except OverflowError: r = math.copysign(math.inf, x)
    if len(_F32) >= 4096: _F32.clear()
    if x0 == x0 and (x0 != 0 or type(x0) is not float): _F32[(type(x0), x0)] = r   # (not -0.0 == 0.0, nor nan)
    return r
  if d == dtypes.float16:
    try: return struct.unpack("e", struct.pack("e", x))[0]
    except OverflowError: return math.copysign(math.inf, x)
  if d == dtypes.bfloat16: return bf16_to_float(float_to_bf16(x))
  raise TypeError(f"cannot truncate to {d}")

def _round_int(x: int, bits: int) -> int:
  """x rounded to `bits` significant bits, to nearest, ties to even."""
  m = abs(x)
  sh = m.bit_length() - bits
  if sh <= 0: return x
  q, r, half = m >> sh, m & ((1 << sh) - 1), 1 << (sh - 1)
  if r > half or (r == half and q & 1): q += 1
  return (q << sh) if x >= 0 else -(q << sh)

def float_to_bf16(x: float) -> int:
  """Round-to-nearest-even float32 -> bfloat16 bits (NaN stays NaN)."""
  try: u = struct.unpack("I", struct.pack("f", x))[0]
  except OverflowError: u = struct.unpack("I", struct.pack("f", math.copysign(math.inf, x)))[0]
  if (u & 0x7f800000) == 0x7f800000 and (u & 0x7fffff): return (u >> 16) | 0x40
  return ((u + 0x7fff + ((u >> 16) & 1)) >> 16) & 0xffff

def float_to_f16(x: float) -> int:
  """Round-to-nearest-even float -> float16 bits (overflow to infinity, NaN stays NaN)."""
  try: return struct.unpack("<H", struct.pack("<e", x))[0]
  except OverflowError: return 0xfc00 if x < 0 else 0x7c00

def bf16_to_float(b: int) -> float: return struct.unpack("f", struct.pack("I", (b & 0xffff) << 16))[0]
