"""Floating-point pieces of the RDNA3 interpreter that NumPy has no single call for, each as the RDNA3 ISA guide's
pseudocode states it (AMD "RDNA3 Instruction Set Architecture", chapter 16 "Instructions"): IEEE-mode min/max, fused
multiply-add, class tests, the division helpers (v_div_scale / v_div_fmas / v_div_fixup), conversions that saturate.

Values travel as raw bits (uint16/uint32/uint64 arrays); `f(x)` views them as floats of the same width."""
from __future__ import annotations
import numpy as np

FT = {16: np.float16, 32: np.float32, 64: np.float64}
UT = {16: np.uint16, 32: np.uint32, 64: np.uint64}
IT = {16: np.int16, 32: np.int32, 64: np.int64}
EXP_BITS = {16: 5, 32: 8, 64: 11}
MANT_BITS = {16: 10, 32: 23, 64: 52}

def f(x: np.ndarray, bits: int) -> np.ndarray: return np.ascontiguousarray(x, UT[bits]).view(FT[bits])
def u(x: np.ndarray, bits: int) -> np.ndarray: return np.ascontiguousarray(x, FT[bits]).view(UT[bits])

def sign(x: np.ndarray, bits: int) -> np.ndarray: return (x >> np.array(bits - 1, x.dtype)) & np.array(1, x.dtype) == 1
def exponent(x: np.ndarray, bits: int) -> np.ndarray:
  return ((x >> np.array(MANT_BITS[bits], x.dtype)) & np.array((1 << EXP_BITS[bits]) - 1, x.dtype)).astype(np.int64)
def is_nan(x: np.ndarray, bits: int) -> np.ndarray: return np.isnan(f(x, bits))
def is_snan(x: np.ndarray, bits: int) -> np.ndarray:
  quiet = (x >> np.array(MANT_BITS[bits] - 1, x.dtype)) & np.array(1, x.dtype)
  return is_nan(x, bits) & (quiet == 0)
def quiet(x: np.ndarray, bits: int) -> np.ndarray: return x | np.array(1 << (MANT_BITS[bits] - 1), x.dtype)

def _gt_negzero(a: np.ndarray, b: np.ndarray, bits: int) -> np.ndarray:
  """a > b, where +0 > -0 (the ISA's GT_NEG_ZERO)."""
  fa, fb = f(a, bits), f(b, bits)
  zero = (fa == 0) & (fb == 0)
  return (fa > fb) | (zero & ~sign(a, bits) & sign(b, bits))

def vmax(a: np.ndarray, b: np.ndarray, bits: int, ieee: bool, is_min: bool = False) -> np.ndarray:
  """v_max_f*/v_min_f* (pseudocode of V_MAX_F32): with IEEE mode a signalling NaN input gives its quieted self; a
  quiet NaN loses to a number; +0 orders above -0."""
  pick_a = _gt_negzero(b, a, bits) if is_min else _gt_negzero(a, b, bits)
  out = np.where(pick_a, a, b)
  na, nb = is_nan(a, bits), is_nan(b, bits)
  out = np.where(nb & ~na, a, np.where(na & ~nb, b, np.where(na & nb, a, out)))
  if ieee:
    out = np.where(is_snan(b, bits), quiet(b, bits), out)
    out = np.where(is_snan(a, bits), quiet(a, bits), out)
  return out

def vmed3(a: np.ndarray, b: np.ndarray, c: np.ndarray, bits: int, ieee: bool) -> np.ndarray:
  """V_MED3_F*: with a NaN input, min3; else the middle one."""
  mx = vmax(vmax(a, b, bits, ieee), c, bits, ieee)
  mn3 = vmax(vmax(a, b, bits, ieee, True), c, bits, ieee, True)
  anynan = is_nan(a, bits) | is_nan(b, bits) | is_nan(c, bits)
  fa, fb, fm = f(a, bits), f(b, bits), f(mx, bits)
  r = np.where(fm == fa, vmax(b, c, bits, ieee), np.where(fm == fb, vmax(a, c, bits, ieee), vmax(a, b, bits, ieee)))
  return np.where(anynan, mn3, r)

def _two_sum(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """s, e with s = fl(x + y) and s + e == x + y exactly (Knuth)."""
  s = x + y
  bp = s - x
  return s, (x - (s - bp)) + (y - bp)

def round_f32(s: np.ndarray, err: np.ndarray) -> np.ndarray:
  """float32 nearest-even rounding of the exact value s + err (float64 s, tiny err): s.astype(float32) except where s
  lies exactly halfway between two float32 values (normal or denormal) and err says which side the exact value is."""
  with np.errstate(all="ignore"):
    r = s.astype(np.float32)
    r64 = r.astype(np.float64)
    other = np.nextafter(r, np.where(s > r64, np.float32(np.inf), np.float32(-np.inf)))
    tie = (r64 != s) & np.isfinite(s) & ((r64 + other.astype(np.float64)) * 0.5 == s) & (err != 0)
    fix = np.where(err > 0, np.maximum(r, other), np.minimum(r, other))
    return np.where(tie, fix, r)

def fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray, scale: np.ndarray | int = 0) -> np.ndarray:
  """Correctly rounded float32 fma (times 2**scale before the one rounding): the product is exact in float64; where
  the float64 sum could sit exactly between two float32 values its rounding error is recovered (TwoSum) to decide the
  tie round_f32 cannot see."""
  with np.errstate(all="ignore"):
    p = a.astype(np.float64) * b.astype(np.float64)
    cc = c.astype(np.float64)
    s = p + cc
    scaled = not (np.isscalar(scale) and scale == 0)
    if scaled: s = np.ldexp(s, scale)
    # exactly between two normal float32 values: the low 29 of the 52 mantissa bits are 1 followed by zeros; float32
    # denormal results round at a coarser bit, so all of those are looked at
    cand = ((s.view(np.uint64) & np.uint64(0x1FFFFFFF)) == np.uint64(0x10000000)) | ((np.abs(s) < 1.1754943508222875e-38) & (s != 0))
    r = s.astype(np.float32)
    if cand.any():
      i = np.nonzero(cand)
      s2, err = _two_sum(p[i], cc[i])
      if scaled: s2, err = np.ldexp(s2, scale[i] if not np.isscalar(scale) else scale), np.ldexp(err, scale[i] if not np.isscalar(scale) else scale)
      r[i] = round_f32(s2, np.where(np.isfinite(s2), err, 0))
    return r

def _split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  t = x * 134217729.0           # Veltkamp split: 2**27 + 1
  hi = t - (t - x)
  return hi, x - hi

def _fma64_exact(a: float, b: float, c: float) -> float:
  """One float64 fma by exact rational arithmetic (int / int true division rounds correctly, subnormals included)."""
  from fractions import Fraction
  v = Fraction(a) * Fraction(b) + Fraction(c)
  if v == 0: return (a * b) + c           # the sign of an exact zero follows IEEE's rules for the sum
  try: return v.numerator / v.denominator
  except OverflowError: return float("inf") if v > 0 else float("-inf")

def fma64(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
  """Correctly rounded float64 fma from error-free transformations: a*b = ph + pl exactly (Dekker), ph + c = s1 + e1
  and e1 + pl = t + e2 (TwoSum), s1 + t = r + e3; r is the rounding of the exact sum except where s1 + t was a tie
  (|e3| half an ulp of r) that the dropped e2 breaks. Finite operands the split cannot take exactly (|a|, |b| beyond
  2**995, products below 2**-968, |c| beyond 2**1000: products or sums near overflow, results near underflow) are
  computed one by one with exact rationals; non-finite ones give a*b + c."""
  with np.errstate(all="ignore"):
    ph = a * b
    ah, al = _split(a); bh, bl = _split(b)
    pl = ((ah * bh - ph) + ah * bl + al * bh) + al * bl
    s1, e1 = _two_sum(ph, c)
    t, e2 = _two_sum(e1, pl)
    r, e3 = _two_sum(s1, t)
    nb = r + 2 * e3
    tie = (e3 != 0) & (np.nextafter(r, nb) == nb) & ((r + e3) - r == e3) & (e2 != 0) & (np.sign(e2) == np.sign(e3))
    r = np.where(tie, nb, r)
    fin = np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
    fast = fin & (np.abs(a) < 2.0 ** 995) & (np.abs(b) < 2.0 ** 995) & ((np.abs(ph) > 2.0 ** -968) | (a == 0) | (b == 0)) & \
           (np.abs(c) < 2.0 ** 1000) & np.isfinite(r)
    out = np.where(fast, r, ph + c)
    slow = fin & ~fast
    if slow.any():
      idx = np.nonzero(slow)
      out[idx] = [_fma64_exact(float(x), float(y), float(z)) for x, y, z in zip(a[idx], b[idx], c[idx])]
    return out

def fma(a: np.ndarray, b: np.ndarray, c: np.ndarray, bits: int) -> np.ndarray:
  """fma on raw bits of width 16, 32 or 64."""
  fa, fb, fc = f(a, bits), f(b, bits), f(c, bits)
  if bits == 32: return u(fma32(fa, fb, fc), 32)
  if bits == 64: return u(fma64(fa, fb, fc), 64)
  with np.errstate(all="ignore"):   # float16: the float64 product is exact and the sum rounds once (to float64 first: rare double rounding)
    return u((fa.astype(np.float64) * fb.astype(np.float64) + fc.astype(np.float64)).astype(np.float16), 16)

def cmp_class(x: np.ndarray, mask: np.ndarray, bits: int) -> np.ndarray:
  """V_CMP_CLASS_F*: bit 0 sNaN, 1 qNaN, 2 -inf, 3 -normal, 4 -denormal, 5 -0, 6 +0, 7 +denormal, 8 +normal, 9 +inf."""
  s, e = sign(x, bits), exponent(x, bits)
  emax = (1 << EXP_BITS[bits]) - 1
  fx = f(x, bits)
  k = np.where(s, 5, 6)
  k = np.where(np.abs(fx.astype(np.float64)) > 0, np.where(s, 4, 7), k)
  k = np.where(e > 0, np.where(s, 3, 8), k)
  k = np.where(e == emax, np.where(s, 2, 9), k)
  k = np.where(is_nan(x, bits), np.where(is_snan(x, bits), 0, 1), k)
  return ((mask.astype(np.uint64) >> k.astype(np.uint64)) & np.uint64(1)) == 1

def ldexp(x: np.ndarray, n: np.ndarray, bits: int) -> np.ndarray:
  fx = f(x, bits)
  with np.errstate(all="ignore"):
    return u(np.ldexp(fx, np.clip(n.astype(np.int64), -2000, 2000).astype(np.int32)).astype(FT[bits]), bits)

def div_scale(s0: np.ndarray, s1: np.ndarray, s2: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
  """V_DIV_SCALE_F32/F64 (S0 the value to scale, S1 the denominator, S2 the numerator): (D0, VCC bit). D0 is S0
  unless a case of the pseudocode's if/elsif chain scales it by 2**k (k = 64 for f32, 128 for f64):
    S1 or S2 zero -> NaN; the quotient's exponent 96 (768) or more -> VCC, scale the denominator up;
    S1 denormal -> scale both up; 1/S1 denormal and the quotient denormal -> VCC, scale the denominator down;
    1/S1 denormal -> scale both down; the quotient denormal -> VCC, scale the numerator up; S2's exponent at most
    23 (53) -> scale both up.
  Where the guide's text is not self-consistent (it tests "1/S1 is a float64 denormal" for f32, which never holds, and
  scales the denominator up in the fourth case, which overflows it), the reading taken is the one under which
  V_DIV_FMAS undoes the scaling (see div_fmas); "denormal" includes results that underflow to 0."""
  ft = FT[bits]
  a, d, n = f(s0, bits), f(s1, bits), f(s2, bits)
  ed, en = exponent(s1, bits), exponent(s2, bits)
  k = 64 if bits == 32 else 128
  tiny = np.finfo(ft).tiny
  with np.errstate(all="ignore"):
    big_d = np.abs(d) > 1.0 / tiny                                  # 1/S1 below the normal range
    q_small = (np.abs(n.astype(np.float64) / d.astype(np.float64)) < tiny) if bits == 32 else \
              (np.abs(np.ldexp(n, 200) / d) < np.ldexp(tiny, 200))
  up, down = ldexp(s0, np.full(s0.shape, k), bits), ldexp(s0, np.full(s0.shape, -k), bits)
  d_denorm = (d != 0) & (np.abs(d) < tiny)
  conds = [((n == 0) | (d == 0), u(np.full(s0.shape, np.nan, ft), bits), False),
           ((en - ed) >= (96 if bits == 32 else 768), np.where(a == d, up, s0), True),
           (d_denorm, up, False),
           (big_d & q_small, np.where(a == d, down, s0), True),
           (big_d, down, False),
           (q_small, np.where(a == n, up, s0), True),
           (en <= (23 if bits == 32 else 53), up, False)]
  out, vcc, taken = s0.copy(), np.zeros(s0.shape, bool), np.zeros(s0.shape, bool)
  for c, val, v in conds:
    now = c & ~taken
    out = np.where(now, val, out)
    if v: vcc = vcc | now
    taken = taken | now
  return out, vcc

def div_fmas(a: np.ndarray, b: np.ndarray, c: np.ndarray, vcc: np.ndarray, bits: int) -> np.ndarray:
  """V_DIV_FMAS: fma, rescaled where VCC is set, with one rounding. The ISA guide's pseudocode says "2**32 * fma"
  (f32; 2**64 for f64), which cannot undo what V_DIV_SCALE did (it scales by 2**64 / 2**128, the denominator when the
  quotient would overflow, the numerator when it would be denormal): the quotient estimate S2 is then about 2**-64
  (resp. 2**64) times the true one, so the result is scaled by 2**64 when |S2| >= 2 (exponent above the bias) and by
  2**-64 otherwise (2**128 / 2**-128 for f64), and the scaled result is rounded once (a denormal quotient must not
  round twice). tests/drivers/amd/test_rdna3_exec.py checks fdiv bit for bit against IEEE division."""
  k, bias = (64, 127) if bits == 32 else (128, 1023)
  sc = np.where(vcc, np.where(exponent(c, bits) > bias, k, -k), 0)
  if bits == 32: return u(fma32(f(a, 32), f(b, 32), f(c, 32), sc), 32)
  r = fma(a, b, c, bits)
  return np.where(vcc, ldexp(r, sc, bits), r)

def div_fixup(s0: np.ndarray, s1: np.ndarray, s2: np.ndarray, bits: int) -> np.ndarray:
  """V_DIV_FIXUP (S0 the quotient estimate, S1 the denominator, S2 the numerator): special cases of division."""
  ft = FT[bits]
  d, n = f(s1, bits), f(s2, bits)
  sgn = sign(s1, bits) ^ sign(s2, bits)
  one = np.array(1 << (bits - 1), UT[bits])
  def signed(v: np.ndarray) -> np.ndarray: return np.where(sgn, v | one, v & ~one)
  inf = u(np.full(s0.shape, np.inf, ft), bits)
  zero = np.zeros(s0.shape, UT[bits])
  cnan = np.array({16: 0xFE00, 32: 0xFFC00000, 64: 0xFFF8000000000000}[bits], UT[bits])
  # the final case gives |S0| with the quotient's sign; S0 can only be NaN there when the scaled Newton steps
  # overflowed (the inputs' NaN/inf/0 cases come first), and the quotient then is infinite (as IEEE division gives)
  out = np.where(is_nan(s0, bits), signed(inf), signed(s0 & ~one))
  if bits != 16:
    eo, ed = exponent(s2, bits) - exponent(s1, bits), exponent(s1, bits)
    # UNDERFLOW / OVERFLOW are taken as 0 and infinity: a quotient 2**-150 below 1 (2**-1075 for f64) rounds to 0
    under, over = zero, inf
    out = np.where(ed == (1 << EXP_BITS[bits]) - 1, signed(over), out)
    out = np.where(eo < (-150 if bits == 32 else -1075), signed(under), out)
  out = np.where(np.isinf(d) | (n == 0), signed(zero), out)
  out = np.where((d == 0) | np.isinf(n), signed(inf), out)
  out = np.where(np.isinf(d) & np.isinf(n), np.full(s0.shape, cnan), out)
  out = np.where((d == 0) & (n == 0), np.full(s0.shape, cnan), out)
  out = np.where(is_nan(s1, bits), quiet(s1, bits), out)
  out = np.where(is_nan(s2, bits), quiet(s2, bits), out)
  return out

def to_int(x: np.ndarray, bits: int, signed: bool, out_bits: int = 32) -> np.ndarray:
  """f32_to_i32 / f32_to_u32 / f64_to_*: truncate toward zero, saturate, NaN -> 0 (raw bits of out_bits)."""
  fx = f(x, bits).astype(np.float64)
  lo, hi = (-(1 << (out_bits - 1)), (1 << (out_bits - 1)) - 1) if signed else (0, (1 << out_bits) - 1)
  with np.errstate(invalid="ignore"):
    t = np.trunc(np.where(np.isnan(fx), 0, fx))
    t = np.clip(t, lo, hi)
  return t.astype(np.int64).astype(UT[out_bits]) if signed else t.astype(np.uint64).astype(UT[out_bits])
