"""Every ALU op, CAST and BITCAST against NumPy, for every dtype it supports, on both CPU renderers.

Semantics are the documented ones (baregrad/ir/alu.py): IDIV truncates, x//0 == x%0 == 0, INT_MIN//-1 wraps,
shift amounts are taken modulo the bit width, float->int casts saturate with NaN -> 0; float16/bfloat16 arithmetic
runs in float32 and rounds after each op; MAX is llvm.maximum (NaN propagates, +0 > -0).

Kept fast: one kernel per (dtype, device) computes every op of a kind (a SINK of one STORE per op) over an array
holding all pairs of special values plus random values; the tests per op read the cached results."""
from __future__ import annotations
import functools, math
import numpy as np
import pytest
from baregrad.ir.dtype import DType, dtypes
from baregrad.ir.ops import UOp, Ops
from baregrad.codegen.astbuild import load, store, sink
from baregrad.codegen.kernel import Opt, OptOps
from tests.helpers import (DEVICES, INTS, FLOATS, ALL, np_dtype, ref_dtype, special_values, random_values, pairs, run,
                           round_bf16, assert_equal, assert_float_equal, bits, f32_to_bf16_bits)

SMALL = (dtypes.float16, dtypes.bfloat16)
UNARY_F = [Ops.NEG, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.TRUNC]
BINARY_F = [Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ]
BINARY_I = [Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR,
            Ops.SHL, Ops.SHR]
BINARY_B = [Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR, Ops.IDIV, Ops.MOD]
CMP = (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ)

def binary_ops(dt: DType) -> list[Ops]:
  return BINARY_F if dtypes.is_float(dt) else BINARY_B if dt == dtypes.bool else BINARY_I
def unary_ops(dt: DType) -> list[Ops]: return UNARY_F if dtypes.is_float(dt) else [Ops.NEG]

def out_dtype(op: Ops, dt: DType) -> DType: return dtypes.bool if op in CMP else dt

def finish(x: np.ndarray, dt: DType) -> np.ndarray:
  """A float32/float64 reference result rounded to dt (bfloat16 kept as float32 values)."""
  with np.errstate(all="ignore"):
    if dt == dtypes.bfloat16: return round_bf16(x.astype(np.float32))
    return x.astype(ref_dtype(dt))

def compute_dtype(dt: DType) -> np.dtype:
  """What float16/bfloat16 arithmetic runs in (float32); other floats run in themselves."""
  return np.dtype(np.float32) if dt in SMALL else ref_dtype(dt)

# ---------------------------------------------------------------- references
def wrap(v: np.ndarray, dt: DType) -> np.ndarray:
  """Exact Python-int results (object array) wrapped to dt, two's complement."""
  nb = 8 * dt.itemsize
  m = 1 << nb
  lo = 0 if dtypes.is_unsigned(dt) else -(1 << (nb - 1))
  return np.array([((int(x) - lo) % m) + lo for x in v], dtype=np_dtype(dt))

def tdiv(a: int, b: int) -> int:
  if b == 0: return 0
  q = abs(a) // abs(b)
  return q if (a < 0) == (b < 0) else -q

def ref_int_binary(op: Ops, dt: DType, a: np.ndarray, b: np.ndarray) -> np.ndarray:
  A, B = [int(x) for x in a], [int(x) for x in b]
  nb = 8 * dt.itemsize
  if op in CMP: return np.array([{Ops.CMPLT: x < y, Ops.CMPNE: x != y, Ops.CMPEQ: x == y}[op] for x, y in zip(A, B)])
  f = {Ops.ADD: lambda x, y: x + y, Ops.SUB: lambda x, y: x - y, Ops.MUL: lambda x, y: x * y, Ops.IDIV: tdiv,
       Ops.MOD: lambda x, y: 0 if y == 0 else x - tdiv(x, y) * y, Ops.MAX: max, Ops.AND: lambda x, y: x & y,
       Ops.OR: lambda x, y: x | y, Ops.XOR: lambda x, y: x ^ y, Ops.SHL: lambda x, y: x << (y % nb),
       Ops.SHR: lambda x, y: x >> (y % nb)}[op]
  return wrap(np.array([f(x, y) for x, y in zip(A, B)], dtype=object), dt)

def ref_bool_binary(op: Ops, a: np.ndarray, b: np.ndarray) -> np.ndarray:
  return {Ops.ADD: a | b, Ops.MUL: a & b, Ops.MAX: a | b, Ops.CMPLT: ~a & b, Ops.CMPNE: a != b, Ops.CMPEQ: a == b,
          Ops.AND: a & b, Ops.OR: a | b, Ops.XOR: a ^ b, Ops.IDIV: a & b, Ops.MOD: np.zeros_like(a)}[op]  # x//0 == x%0 == 0

def fmax_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """llvm.maximum: NaN propagates, +0 > -0."""
  r = np.maximum(a, b)
  both0 = (a == 0) & (b == 0)
  return np.where(both0, np.where(np.signbit(a) & np.signbit(b), -0.0, 0.0).astype(r.dtype), r)

def ref_float_binary(op: Ops, dt: DType, a: np.ndarray, b: np.ndarray) -> np.ndarray:
  cd = compute_dtype(dt)
  x, y = a.astype(cd), b.astype(cd)
  with np.errstate(all="ignore"):
    if op in CMP: return {Ops.CMPLT: x < y, Ops.CMPNE: x != y, Ops.CMPEQ: x == y}[op]
    r = {Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.FDIV: np.divide, Ops.MAX: fmax_ref}[op](x, y)
  return finish(r, dt)

def ref_float_unary(op: Ops, dt: DType, a: np.ndarray) -> np.ndarray:
  with np.errstate(all="ignore"):
    if op in (Ops.EXP2, Ops.LOG2, Ops.SIN):  # transcendental: a float64 reference, compared with an ulp tolerance
      x = a.astype(np.float64)
      r = {Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin}[op](x)
      return finish(r.astype(compute_dtype(dt)) if dt != dtypes.float64 else r, dt)
    x = a.astype(compute_dtype(dt))
    r = {Ops.NEG: np.negative, Ops.SQRT: np.sqrt, Ops.RECIP: np.reciprocal, Ops.TRUNC: np.trunc}[op](x)
  return finish(r, dt)

ULPS = {Ops.EXP2: 2, Ops.LOG2: 2, Ops.SIN: 2}

def inputs_for(dt: DType, seed: int, binary: bool) -> tuple[np.ndarray, ...]:
  rng = np.random.default_rng(seed)
  sv = special_values(dt)
  if not binary: return (np.concatenate([sv, random_values(dt, 300, rng)]),)
  a, b = pairs(sv, sv)
  return np.concatenate([a, random_values(dt, 400, rng)]), np.concatenate([b, random_values(dt, 400, rng)])

# ---------------------------------------------------------------- cached kernels: one per (kind, dtype, device)
@functools.cache
def binary_results(dtname: str, device: str):
  dt = dtypes.from_name(dtname)
  a, b = inputs_for(dt, 1, True)
  ops = binary_ops(dt)
  n = len(a)
  x, y = load(len(ops), dt, (n,)), load(len(ops) + 1, dt, (n,))
  ast = sink(*[store(i, (n,), x.alu(op, y)) for i, op in enumerate(ops)])
  outs = run(ast, [(n, out_dtype(op, dt)) for op in ops], [(a, dt), (b, dt)], device)
  return a, b, dict(zip(ops, outs))

@functools.cache
def unary_results(dtname: str, device: str):
  dt = dtypes.from_name(dtname)
  (a,) = inputs_for(dt, 2, False)
  ops = unary_ops(dt)
  n = len(a)
  x = load(len(ops), dt, (n,))
  ast = sink(*[store(i, (n,), x.alu(op)) for i, op in enumerate(ops)])
  outs = run(ast, [(n, dt) for _ in ops], [(a, dt)], device)
  return a, dict(zip(ops, outs))

@functools.cache
def cast_results(dtname: str, device: str):
  dt = dtypes.from_name(dtname)
  (a,) = inputs_for(dt, 3, False)
  n = len(a)
  x = load(len(ALL), dt, (n,))
  ast = sink(*[store(i, (n,), x.cast(to)) for i, to in enumerate(ALL)])
  outs = run(ast, [(n, to) for to in ALL], [(a, dt)], device)
  return a, dict(zip([d.name for d in ALL], outs))

BITCASTABLE = [d for d in ALL if d != dtypes.bool]

@functools.cache
def bitcast_results(dtname: str, device: str):
  dt = dtypes.from_name(dtname)
  (a,) = inputs_for(dt, 4, False)
  n = len(a)
  tos = [d for d in BITCASTABLE if d.itemsize == dt.itemsize and d != dt]
  x = load(len(tos), dt, (n,))
  ast = sink(*[store(i, (n,), x.bitcast(to)) for i, to in enumerate(tos)])
  outs = run(ast, [(n, to) for to in tos], [(a, dt)], device)
  return a, dict(zip([d.name for d in tos], outs))

def ids(x): return x.name if isinstance(x, (DType, Ops)) else str(x)

# ---------------------------------------------------------------- tests
BIN_CASES = [(dt, op) for dt in ALL for op in binary_ops(dt)]
UN_CASES = [(dt, op) for dt in ALL for op in unary_ops(dt)]

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt,op", BIN_CASES, ids=[f"{op.name}-{dt.name}" for dt, op in BIN_CASES])
def test_binary_op_matches_numpy_on_special_and_random_values(device, dt, op):
  a, b, res = binary_results(dt.name, device)
  got = res[op]
  if dt == dtypes.bool: want = ref_bool_binary(op, a, b)
  elif dtypes.is_int(dt): want = ref_int_binary(op, dt, a, b)
  else: want = ref_float_binary(op, dt, a, b)
  assert_equal(got, want, f"{op.name} {dt.name} on {device}", inputs=(a, b))

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt,op", UN_CASES, ids=[f"{op.name}-{dt.name}" for dt, op in UN_CASES])
def test_unary_op_matches_numpy_on_special_and_random_values(device, dt, op):
  a, res = unary_results(dt.name, device)
  got = res[op]
  if dt == dtypes.bool: want = ~a
  elif dtypes.is_int(dt): want = wrap(np.array([-int(x) for x in a], dtype=object), dt)
  else:
    want = ref_float_unary(op, dt, a)
    return assert_float_equal(got, want, f"{op.name} {dt.name} on {device}", ulps=ULPS.get(op, 0), inputs=(a,))
  assert_equal(got, want, f"{op.name} {dt.name} on {device}", inputs=(a,))

def cast_ref(a: np.ndarray, fr: DType, to: DType) -> np.ndarray:
  if to == dtypes.bool: return a != 0
  if dtypes.is_int(to):
    if dtypes.is_float(fr):  # saturate, NaN -> 0, truncate toward zero
      lo, hi = int(np.iinfo(np_dtype(to)).min), int(np.iinfo(np_dtype(to)).max)
      vals = [0 if math.isnan(x) else hi if x >= hi else lo if x <= lo else int(x) for x in map(float, a)]
      return np.array([max(lo, min(hi, v)) for v in vals], dtype=np_dtype(to))
    return wrap(np.array([int(x) for x in a], dtype=object), to)
  # to a float
  with np.errstate(all="ignore"):
    if to == dtypes.bfloat16:  # everything goes through float32, then rounds to nearest even
      return round_bf16(a.astype(np.float32))
    if to == dtypes.float16 and fr == dtypes.bfloat16: return a.astype(np.float32).astype(np.float16)
    return a.astype(ref_dtype(to))

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fr", ALL, ids=ids)
@pytest.mark.parametrize("to", ALL, ids=ids)
def test_cast_between_every_pair_of_dtypes(device, fr, to):
  a, res = cast_results(fr.name, device)
  got = res[to.name]
  want = cast_ref(a, fr, to)
  assert_equal(got, want, f"CAST {fr.name} -> {to.name} on {device}", inputs=(a,))

BC_CASES = [(fr, to) for fr in BITCASTABLE for to in BITCASTABLE if fr.itemsize == to.itemsize and fr != to]

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fr,to", BC_CASES, ids=[f"{a.name}-{b.name}" for a, b in BC_CASES])
def test_bitcast_between_equal_sizes_keeps_bits(device, fr, to):
  a, res = bitcast_results(fr.name, device)
  got = res[to.name]
  src_bits = bits(f32_to_bf16_bits(a) if fr == dtypes.bfloat16 else a)
  got_bits = bits(f32_to_bf16_bits(got) if to == dtypes.bfloat16 else got)
  if to == dtypes.bfloat16 or fr == dtypes.bfloat16:
    # bfloat16 results come back as float32 values: compare the raw 16 bits (NaN payloads included)
    got_bits = bits(got).astype(np.uint64) >> 16 if to == dtypes.bfloat16 else got_bits
  assert (np.asarray(got_bits, dtype=np.uint64) == np.asarray(src_bits, dtype=np.uint64)).all(), \
    f"BITCAST {fr.name} -> {to.name} on {device} changed bits"

# ---------------------------------------------------------------- ternary ops
@functools.cache
def ternary_results(dtname: str, device: str):
  dt = dtypes.from_name(dtname)
  rng = np.random.default_rng(5)
  sv = special_values(dt)
  a, b = pairs(sv, sv)
  c = np.resize(sv[::-1], len(a))
  cond = rng.integers(0, 2, len(a)).astype(bool)
  n = len(a)
  x, y, z = load(2, dt, (n,)), load(3, dt, (n,)), load(4, dt, (n,))
  cnd = load(5, dtypes.bool, (n,))
  fused = x.alu(Ops.MULACC, y, z) if dt != dtypes.bool else x * y + z
  ast = sink(store(0, (n,), cnd.where(x, y)), store(1, (n,), fused))
  w, m = run(ast, [(n, dt), (n, dt)], [(a, dt), (b, dt), (c, dt), (cond, dtypes.bool)], device)
  return a, b, c, cond, w, m

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", ALL, ids=ids)
def test_where_selects_bits_exactly(device, dt):
  a, b, c, cond, w, _ = ternary_results(dt.name, device)
  want = np.where(cond, a, b)
  if dtypes.is_float(dt): assert (bits(w) == bits(want.astype(w.dtype))).all() or \
    assert_float_equal(w, want, f"WHERE {dt.name}", inputs=(cond, a, b))
  else: assert_equal(w, want, f"WHERE {dt.name} on {device}", inputs=(cond, a, b))

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", INTS, ids=ids)
def test_mulacc_of_ints_wraps(device, dt):
  a, b, c, _, _, m = ternary_results(dt.name, device)
  want = wrap(np.array([int(x) * int(y) + int(z) for x, y, z in zip(a, b, c)], dtype=object), dt)
  assert_equal(m, want, f"MULACC {dt.name} on {device}", inputs=(a, b, c))

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", FLOATS, ids=ids)
def test_mulacc_is_a_single_rounding_fma(device, dt):
  a, b, c, _, _, m = ternary_results(dt.name, device)
  if dt in SMALL:  # a float32 fma of the widened values, rounded to dt once more
    from fractions import Fraction
    want = []
    for x, y, z in zip(a.astype(np.float64), b.astype(np.float64), c.astype(np.float64)):
      with np.errstate(all="ignore"): inexact = np.float32(np.float32(x) * np.float32(y) + np.float32(z))
      if not (math.isfinite(x) and math.isfinite(y) and math.isfinite(z)) or not np.isfinite(inexact):
        want.append(inexact)
        continue
      want.append(np.float32(_round_fraction(Fraction(x) * Fraction(y) + Fraction(z), np.float32)))
    want = finish(np.array(want, dtype=np.float32), dt)
    return assert_float_equal(m, want, f"MULACC {dt.name} on {device}", check_zero_sign=False, inputs=(a, b, c))
  if dt == dtypes.float32:  # float32 product is exact in float64; sum rounded once more: check vs exact via Fraction
    from fractions import Fraction
    want = []
    for x, y, z in zip(a.astype(np.float64), b.astype(np.float64), c.astype(np.float64)):
      if not (math.isfinite(x) and math.isfinite(y) and math.isfinite(z)) or not math.isfinite(x * y + z):
        with np.errstate(all="ignore"): want.append(np.float32(np.float32(x) * np.float32(y) + np.float32(z)))
        continue
      exact = Fraction(x) * Fraction(y) + Fraction(z)
      want.append(np.float32(_round_fraction(exact, np.float32)))
    want = np.array(want, dtype=np.float32)
  else:
    from fractions import Fraction
    want = []
    for x, y, z in zip(a, b, c):
      with np.errstate(all="ignore"): inexact = x * y + z
      if not (math.isfinite(x) and math.isfinite(y) and math.isfinite(z)) or not np.isfinite(inexact) or abs(inexact) > 1e307:
        want.append(inexact)
        continue
      want.append(_round_fraction(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)), np.float64))
    want = np.array(want, dtype=np.float64)
  assert_float_equal(m, want, f"MULACC {dt.name} on {device}", check_zero_sign=False, inputs=(a, b, c))

def _round_fraction(q, npdt) -> float:
  """Correctly rounded (nearest even) value of a Fraction in npdt, inf on overflow."""
  from fractions import Fraction
  if q == 0: return 0.0
  f = float(q)   # correctly rounded to float64 (Fraction.__float__ rounds correctly)
  if npdt == np.float64: return f
  with np.errstate(all="ignore"):
    c = np.float32(f)  # may double round: fix it up with the exact value
    if not np.isfinite(c): return float(c)
    lo, hi = np.nextafter(c, np.float32(-np.inf)), np.nextafter(c, np.float32(np.inf))
  best = min((c, lo, hi), key=lambda v: (abs(Fraction(float(v)) - q) if np.isfinite(v) else Fraction(10 ** 400),
                                         int(np.float32(v).view(np.uint32)) & 1))
  return float(best)

# ---------------------------------------------------------------- specific IEEE and integer facts, spelled out
@pytest.mark.parametrize("device", DEVICES)
def test_signed_zeros_ieee(device):
  n = 4
  a = np.array([-0.0, 0.0, -0.0, 0.0], np.float32)
  b = np.array([0.0, -0.0, -0.0, 0.0], np.float32)
  x, y = load(4, dtypes.float32, (n,)), load(5, dtypes.float32, (n,))
  ast = sink(store(0, (n,), x.alu(Ops.MAX, y)), store(1, (n,), x * 1.0), store(2, (n,), x + y), store(3, (n,), -x))
  mx, m1, ad, ng = run(ast, [(n, dtypes.float32)] * 4, [(a, dtypes.float32), (b, dtypes.float32)], device)
  assert list(np.signbit(mx)) == [False, False, True, False], f"MAX of zeros: {mx}"   # +0 > -0
  assert list(np.signbit(m1)) == [True, False, True, False], f"x*1 must keep the sign of zero: {m1}"
  assert list(np.signbit(ad)) == [False, False, True, False], f"-0 + -0 is -0, else +0: {ad}"
  assert list(np.signbit(ng)) == [False, True, False, True], f"NEG of zeros: {ng}"

@pytest.mark.parametrize("device", DEVICES)
def test_integer_edge_cases_documented(device):
  # INT_MIN // -1 wraps, INT_MIN % -1 == 0, x // 0 == x % 0 == 0, -7 // 2 == -3 (trunc), -7 % 2 == -1
  a = np.array([-2 ** 31, -2 ** 31, 5, -5, -7, 7, -7, 0], np.int32)
  b = np.array([-1, -1, 0, 0, 2, -2, -2, 0], np.int32)
  n = len(a)
  x, y = load(2, dtypes.int32, (n,)), load(3, dtypes.int32, (n,))
  q, r = run(sink(store(0, (n,), x // y), store(1, (n,), x % y)), [(n, dtypes.int32)] * 2,
             [(a, dtypes.int32), (b, dtypes.int32)], device)
  assert list(q) == [-2 ** 31, -2 ** 31, 0, 0, -3, -3, 3, 0]
  assert list(r) == [0, 0, 0, 0, -1, 1, -1, 0]

@pytest.mark.parametrize("device", DEVICES)
def test_constant_operands_fold_like_the_kernel_computes(device):
  # the same op with a constant operand goes through constant folding / literals of each renderer
  a = special_values(dtypes.float32)
  n = len(a)
  x = load(5, dtypes.float32, (n,))
  ast = sink(store(0, (n,), x * 0.0), store(1, (n,), x + (-0.0)), store(2, (n,), x.alu(Ops.MAX, float("nan"))),
             store(3, (n,), x / 0.0), store(4, (n,), x.alu(Ops.MAX, -0.0)))
  outs = run(ast, [(n, dtypes.float32)] * 5, [(a, dtypes.float32)], device)
  with np.errstate(all="ignore"):
    wants = [a * np.float32(0), a + np.float32(-0.0), np.full(n, np.nan, np.float32), a / np.float32(0),
             fmax_ref(a, np.full(n, -0.0, np.float32))]
  for i, (g, w) in enumerate(zip(outs, wants)): assert_float_equal(g, w, f"constant-operand op #{i} on {device}", inputs=(a,))

@pytest.mark.parametrize("device", DEVICES)
def test_shift_by_mixed_dtype_amount(device):
  # SHL/SHR may take an amount of another int dtype (verify_ast allows it)
  a = np.array([1, -8, 255, 3], np.int32)
  s = np.array([3, 1, 33, 255], np.uint8)
  n = len(a)
  x, y = load(2, dtypes.int32, (n,)), load(3, dtypes.uint8, (n,))
  l, r = run(sink(store(0, (n,), x.alu(Ops.SHL, y)), store(1, (n,), x.alu(Ops.SHR, y))), [(n, dtypes.int32)] * 2,
             [(a, dtypes.int32), (s, dtypes.uint8)], device)
  amt = [int(v) % 32 for v in s]
  assert list(l) == list(wrap(np.array([int(v) << k for v, k in zip(a, amt)], dtype=object), dtypes.int32))
  assert list(r) == [int(v) >> k for v, k in zip(a, amt)]

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", FLOATS, ids=ids)
def test_float_ops_with_constant_operands_every_float_dtype(device, dt):
  # constants of each float dtype reach the renderers as literals (bfloat16 ones lowered to float32 first)
  (a,) = inputs_for(dt, 6, False)
  n = len(a)
  x = load(5, dt, (n,))
  exprs = [x * 2.5 + 0.5, x.alu(Ops.MAX, -0.0), x / 3.0, x - 0.001, (x < 0.0).where(0.0, x)]
  ast = sink(*[store(i, (n,), e) for i, e in enumerate(exprs)])
  outs = run(ast, [(n, dt)] * len(exprs), [(a, dt)], device)
  cd = compute_dtype(dt)
  def cst(v): return finish(np.array([v], np.float64), dt).astype(cd)[0]  # the constant as dt holds it
  x_ = a.astype(cd)
  with np.errstate(all="ignore"):
    wants = [finish(finish(x_ * cst(2.5), dt).astype(cd) + cst(0.5), dt), finish(fmax_ref(x_, np.full(n, -0.0, cd)), dt),
             finish(x_ / cst(3.0), dt), finish(x_ - cst(0.001), dt), finish(np.where(x_ < 0, cd.type(0), x_), dt)]
  for i, (g, w) in enumerate(zip(outs, wants)):
    assert_float_equal(g, w, f"constant-operand expr #{i} {dt.name} on {device}", inputs=(a,))

# ---------------------------------------------------------------- constant folding (ir/alu.py in Python) == what kernels compute
def _const_py(x, dt: DType):
  if dt == dtypes.bool: return bool(x)
  return int(x) if dtypes.is_int(dt) else float(x)

def _same_value(folded, got, dt: DType) -> bool:
  if dtypes.is_float(dt):
    f, g = float(folded), float(got)
    return (math.isnan(f) and math.isnan(g)) or (f == g and math.copysign(1, f) == math.copysign(1, g))
  return _const_py(folded, dt) == _const_py(got, dt)

def _check_folding(pairs_in, got, dt_out: DType, fold, what: str):
  bad = []
  for i, args in enumerate(pairs_in):
    u = fold(*args).simplify()
    if u.op is not Ops.CONST: bad.append((args, "not folded", got[i])); continue
    if not _same_value(u.arg, got[i], dt_out): bad.append((args, u.arg, got[i]))
  assert not bad, f"{what}: constant folding differs from the kernel (args, folded, kernel): {bad[:6]} ({len(bad)} in all)"

@pytest.mark.parametrize("dt,op", BIN_CASES, ids=[f"{op.name}-{dt.name}" for dt, op in BIN_CASES])
def test_constant_folding_of_binary_ops_matches_the_kernel(dt, op):
  a, b, res = binary_results(dt.name, "CPU")
  k = len(special_values(dt)) ** 2
  args = [(_const_py(x, dt), _const_py(y, dt)) for x, y in zip(a[:k], b[:k])]
  _check_folding(args, res[op][:k], out_dtype(op, dt), lambda x, y: UOp.const(dt, x).alu(op, UOp.const(dt, y)), f"{op.name} {dt.name}")

@pytest.mark.parametrize("dt,op", UN_CASES, ids=[f"{op.name}-{dt.name}" for dt, op in UN_CASES])
def test_constant_folding_of_unary_ops_matches_the_kernel(dt, op):
  a, res = unary_results(dt.name, "CPU")
  k = len(special_values(dt))
  if op in ULPS: pytest.skip("transcendental: folded with Python's math, compared with an ulp tolerance elsewhere")
  _check_folding([(_const_py(x, dt),) for x in a[:k]], res[op][:k], dt, lambda x: UOp.const(dt, x).alu(op), f"{op.name} {dt.name}")

@pytest.mark.parametrize("fr", ALL, ids=ids)
def test_constant_folding_of_casts_matches_the_kernel(fr):
  a, res = cast_results(fr.name, "CPU")
  bad = []
  for to in ALL:
    try: _check_folding([(_const_py(x, fr),) for x in a], res[to.name], to, lambda x: UOp.const(fr, x).cast(to), f"CAST {fr.name} -> {to.name}")
    except AssertionError as e: bad.append(str(e)[:400])
  assert not bad, "\n".join(bad)

@pytest.mark.parametrize("device", DEVICES)
def test_int64_to_float_cast_rounds_once_in_kernels_and_folding(device):
  # ints that round differently through float64 first (double rounding): 2**60 + 2**36 + 1 is 2**60 + 2**37 in float32
  vals = np.array([2 ** 60 + 2 ** 36 + 1, -(2 ** 60 + 2 ** 36 + 1), 2 ** 62 + 2 ** 38 + 1, 2 ** 55 + 2 ** 31 + 3, 2 ** 24 + 1,
                   2 ** 63 - 1, -2 ** 63, 2 ** 53 + 1], np.int64)
  n = len(vals)
  (got,) = run(sink(store(0, (n,), load(1, dtypes.int64, (n,)).cast(dtypes.float32))), [(n, dtypes.float32)], [(vals, dtypes.int64)], device)
  want = vals.astype(np.float32)  # NumPy's int64 -> float32 array cast rounds once
  assert (got == want).all(), f"kernel {got} vs {want}"
  folded = np.array([UOp.const(dtypes.int64, int(v)).cast(dtypes.float32).simplify().arg for v in vals], np.float32)
  assert (folded == want).all(), f"constant folding {folded} vs {want}"
  assert UOp.const(dtypes.float32, 2 ** 60 + 2 ** 36 + 1).arg == 2.0 ** 60 + 2.0 ** 37, "a Python int constant rounds once too"

@pytest.mark.parametrize("device", DEVICES)
def test_self_comparison_of_an_int_vector_folds_to_a_bool_vector(device):
  # regression: x < x on upcast int8 lanes folded to a scalar False, then XOR with a bool vector was invalid LLVM IR
  n = 64
  b, x = np.arange(n) % 3 == 0, np.arange(n, dtype=np.int8)
  lb, lx = load(2, dtypes.bool, (n,)), load(3, dtypes.int8, (n,))
  ast = sink(store(0, (n,), lb ^ (lx < lx)), store(1, (n,), lb & lx.ne(lx)))
  got_x, got_a = run(ast, [(n, dtypes.bool), (n, dtypes.bool)], [(b, dtypes.bool), (x, dtypes.int8)], device, opts=[Opt(OptOps.UPCAST, 0, 16)])
  assert (got_x == b).all() and not got_a.any()

# ---------------------------------------------------------------- finding 7: half -> int on CPUs with native fp16
@pytest.mark.parametrize("to", [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16], ids=ids)
@pytest.mark.parametrize("fr", SMALL, ids=ids)
def test_half_to_int_never_converts_fp16_directly_on_sapphirerapids(fr, to):
  """hw/h100-580.159.04 finding 7: on an Intel CPU with AVX512-FP16, CAST half -> int16 of NaN gave -32768. LLVM
  lowers llvm.fptosi.sat.i16.f16 there to vcvttsh2si and two clamping compares with no NaN test. The renderer goes
  through float32 instead; checked on the assembly LLVM emits for -mcpu=sapphirerapids (no such CPU here)."""
  import llvmlite.binding as llvm
  from baregrad.codegen.renderer.llvmir import LLVMRenderer
  from baregrad.codegen.program import get_program
  llvm.initialize_all_targets(); llvm.initialize_all_asmprinters()
  for n in (1, 64):  # scalar and vectorized
    spec = get_program(sink(store(0, (n,), load(1, fr, (n,)).cast(to))), LLVMRenderer(), [])
    mod = llvm.parse_assembly(spec.src)
    tm = llvm.Target.from_triple("x86_64-unknown-linux-gnu").create_target_machine(cpu="sapphirerapids", opt=3)
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    asm = tm.emit_assembly(mod)
    direct = [l.strip() for l in asm.splitlines() if any(m in l for m in ("vcvttsh2si", "vcvttsh2usi", "vcvttph2w", "vcvttph2uw",
                                                                            "vcvttph2dq", "vcvttph2udq", "vcvttph2qq"))]
    assert not direct, f"CAST {fr.name} -> {to.name} (n={n}) converts fp16 straight to an integer: {direct[:3]}"
