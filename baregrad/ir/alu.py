"""Python evaluation of ALU ops with the semantics generated kernels have (constant folding, tests).

Integer semantics (documented, and what every renderer emits):
- IDIV truncates toward zero and MOD takes the sign of the dividend (C). Division or modulo by zero gives 0;
  INT_MIN // -1 wraps to INT_MIN and INT_MIN % -1 is 0 (no trap).
- SHL/SHR take the shift amount modulo the bit width; SHR is arithmetic for signed types.
- Results wrap (two's complement).
Float semantics are IEEE: x/0 is +-inf, 0/0 NaN, MAX propagates NaN, comparisons with NaN are false (CMPNE true).
Casts from float to int saturate to the integer range, NaN gives 0.
"""
from __future__ import annotations
import math
from typing import Any
from baregrad.ir.dtype import DType, dtypes, truncate
from baregrad.ir.ops import Ops

def _tdiv(a: int, b: int) -> int:
  if b == 0: return 0
  q = abs(a) // abs(b)
  return q if (a >= 0) == (b >= 0) else -q

def _tmod(a: int, b: int) -> int: return 0 if b == 0 else a - _tdiv(a, b) * b

def _fdiv(a: float, b: float) -> float:
  if b == 0:
    if a == 0 or math.isnan(a): return math.nan
    return math.copysign(math.inf, a) * math.copysign(1.0, b)
  return a / b

def _exp2(x: float) -> float:
  try: return 2.0 ** x
  except OverflowError: return math.inf

def _log2(x: float) -> float:
  if math.isnan(x) or x < 0: return math.nan
  if x == 0: return -math.inf
  return math.log2(x)

def _sin(x: float) -> float: return math.nan if math.isinf(x) else math.sin(x)
def _sqrt(x: float) -> float: return math.nan if x < 0 else math.sqrt(x)

def _fmax(a: Any, b: Any) -> Any:
  if isinstance(a, float) and (math.isnan(a) or math.isnan(b)): return math.nan
  if isinstance(a, float) and a == b == 0: return b if math.copysign(1.0, a) < 0 else a  # +0 > -0 (llvm.maximum)
  return a if a >= b else b

def _shift_amount(b: int, dt: DType) -> int: return b % (8 * dt.itemsize)

def _shr(a: int, b: int, dt: DType) -> int:
  return a >> _shift_amount(b, dt) if not dtypes.is_unsigned(dt) else (a & ((1 << 8 * dt.itemsize) - 1)) >> _shift_amount(b, dt)

def cast_value(x: Any, dt: DType) -> Any:
  """Python value of a CAST (float -> int saturates; NaN -> 0)."""
  dt = dt.scalar
  if dtypes.is_int(dt) and isinstance(x, float):
    if math.isnan(x): return 0
    return max(dtypes.min(dt), min(dtypes.max(dt), int(x))) if not math.isinf(x) else (dtypes.max(dt) if x > 0 else dtypes.min(dt))
  if dtypes.is_float(dt): return truncate(dt, x if isinstance(x, int) and not isinstance(x, bool) else float(x))
  return truncate(dt, x)

_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)

def _u32(v: int) -> int: return v & 0xFFFFFFFF

def threefry2x32(x0: Any, x1: Any, k0: Any, k1: Any, wrap: Any = lambda v: v) -> Any:
  """The first output word of Threefry-2x32 with 20 rounds (Salmon et al., SC'11) of the counter (x0, x1) under the
  key (k0, k1). One definition for both users: uint32 UOps, whose arithmetic wraps (the kernels), and Python ints
  with wrap masking to 32 bits (constant folding, tests)."""
  ks = (k0, k1, k0 ^ k1 ^ 0x1BD11BDA)   # the third key word: the key's parity with Threefry's constant
  x0, x1 = wrap(x0 + k0), wrap(x1 + k1)
  for i in range(5):   # 5 groups of 4 rounds, a key injection after each group
    for j in range(4):
      r = _ROTATIONS[(i % 2) * 4 + j]
      x0 = wrap(x0 + x1)
      x1 = wrap((x1 << r) | (x1 >> (32 - r))) ^ x0
    x0 = wrap(x0 + ks[(i + 1) % 3])
    x1 = wrap(x1 + ks[(i + 2) % 3] + (i + 1))
  return x0

def exec_alu(op: Ops, dtype: DType, src: tuple) -> Any:
  """Evaluate one ALU op on Python scalars; dtype is the result's."""
  dt = dtype.scalar
  isint = dtypes.is_int(dt) or dtypes.is_bool(dt)
  r: Any
  if op is Ops.NEG: r = (not src[0]) if dtypes.is_bool(dt) else -src[0]
  elif op is Ops.EXP2: r = _exp2(src[0])
  elif op is Ops.LOG2: r = _log2(src[0])
  elif op is Ops.SIN: r = _sin(src[0])
  elif op is Ops.SQRT: r = _sqrt(src[0])
  elif op is Ops.RECIP: r = _fdiv(1.0, src[0]) if not isint else _tdiv(1, src[0])
  elif op is Ops.TRUNC:  # IEEE trunc keeps the sign: trunc(-0.5) == -0.0
    r = src[0] if isint or math.isinf(src[0]) or math.isnan(src[0]) else math.copysign(float(math.trunc(src[0])), src[0])
  elif op is Ops.ADD: r = src[0] + src[1]
  elif op is Ops.SUB: r = src[0] - src[1]
  elif op is Ops.MUL: r = src[0] * src[1]
  elif op is Ops.FDIV: r = _fdiv(src[0], src[1])
  elif op is Ops.IDIV:
    a, b = src
    r = _tdiv(a, b) if b != -1 else -a
  elif op is Ops.MOD: r = _tmod(src[0], src[1])
  elif op is Ops.MAX: r = _fmax(src[0], src[1])
  elif op is Ops.CMPLT: return src[0] < src[1]
  elif op is Ops.CMPNE: return src[0] != src[1]
  elif op is Ops.CMPEQ: return src[0] == src[1]
  elif op is Ops.AND: r = src[0] & src[1] if not isinstance(src[0], bool) else (src[0] and src[1])
  elif op is Ops.OR: r = src[0] | src[1] if not isinstance(src[0], bool) else (src[0] or src[1])
  elif op is Ops.XOR: r = src[0] ^ src[1]
  elif op is Ops.SHL: r = src[0] << _shift_amount(src[1], dt)
  elif op is Ops.SHR: r = _shr(src[0], src[1], dt)
  elif op is Ops.WHERE: r = src[1] if src[0] else src[2]
  elif op is Ops.MULACC: r = src[0] * src[1] + src[2]
  elif op is Ops.THREEFRY: r = threefry2x32(*src, wrap=_u32)  # type: ignore[misc]  # (src is 4 words, never wrap)
  else: raise ValueError(f"exec_alu: {op} is not an ALU op")
  return truncate(dt, r)
