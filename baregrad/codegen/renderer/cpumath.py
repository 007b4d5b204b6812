"""float32 EXP2, LOG2 and SIN, and float64 EXP2 and LOG2, for the CPU's LLVM IR, computed in vector registers.

LLVM lowers llvm.exp2/log2/sin of a vector to one libm call per lane: about 2 ns an element, 3-4x PyTorch's
vectorized functions on the same machine (bench/compiler_core.py --only math). These helpers compute the same
functions as straight-line vector code that LLVM inlines into the kernel:

- exp2: x = n + f with n = roundeven(x), |f| <= 1/2; 2^f by a degree-6 polynomial (coefficients fitted to 2^f by
  least squares on the relative error: 1.6e-8 at most); 2^n is applied as two power-of-two factors 2^(n>>1) and
  2^(n-(n>>1)), both normal numbers, so a result in the subnormal range or past the largest float is rounded once.
- log2: x = m * 2^e with m in [sqrt(1/2), sqrt(2)] (a subnormal x is scaled by 2^23 first); ln(m) = 2 atanh(s),
  s = (m - 1) / (m + 1), |s| <= 0.172, by its series to s^9 (the next term is below 2e-9 of the value), written as
  f - s * (f - R) with f = m - 1 (exact) so that rounding touches only a small correction; the product with 1/ln 2
  is kept to double width by fused multiply-adds.
- sin: x = q * pi/2 + r, q = roundeven(x * 2/pi), r by three fused multiply-adds with pi/2 split into three float32
  parts (|r| <= pi/4); Taylor polynomials of sin (to r^9) and cos (to r^10) of r, chosen and signed by q mod 4.
  Where a lane has |x| >= 2^16 (r would lose bits) or is not finite, libm's sinf computes every lane of that vector.

float64 EXP2 and LOG2 (float32 pow computes exp2(y log2|x|) in float64) are the same code with double constants: 2^f
by its Taylor polynomial to f^13 (the next term is below 5e-18 of the value), the atanh series of log2 to s^21, 1/ln 2
split into two doubles. Against exact values (tests/unit/test_cpumath.py, mpmath): exp2 within 1 ulp, log2 within 1.5.

Each keeps NaN, infinities, signed zeros and subnormals as libm does, and a lane's result does not depend on the
vector width (a loop's scalar tail agrees with its vector body). Against float64 (tests/unit/test_cpumath.py): exp2 within
1 ulp, log2 within 1.5, sin within 2 (measured 0.91, 1.08 and 1.45; numpy's float32 sin, libm's sinf, 1.37)."""
from __future__ import annotations
import functools, math, struct
from decimal import Decimal
from fractions import Fraction

# 2^f on [-1/2, 1/2]: the coefficients of f^1 ... f^6 (the constant term is 1)
EXP2_COEFFS = (0.6931471824645996, 0.24022647738456726, 0.05550329014658928, 0.009618373587727547,
               0.0013399848248809576, 0.00015370704932138324)
# 2/3, 2/5, 2/7, 2/9: R / s^2 in log2's ln(1 + f) = f - s (f - R) (the atanh series after its first term)
LOG_SERIES = tuple(2.0 / (2 * j + 3) for j in range(4))
# Taylor coefficients: sin(r) = r + r^3 (SIN_COEFFS in r^2), cos(r) = COS_COEFFS in r^2
SIN_COEFFS = tuple((-1) ** (j + 1) / math.factorial(2 * j + 3) for j in range(4))
COS_COEFFS = tuple((-1) ** j / math.factorial(2 * j) for j in range(6))
SIN_LIMIT = 65536.0   # |x| from which sin reduces with libm (three float32 parts of pi/2 keep r exact below it)

def _f32(v: float) -> float: return struct.unpack("<f", struct.pack("<f", v))[0]

# float64: 2^f = sum (f ln 2)^k / k!, k = 1..13, with ln 2 to 50 digits (a double has only 53 bits)
_LN2 = Fraction(Decimal("0.69314718055994530941723212145817656807550013436026"))
EXP2_COEFFS64 = tuple(float(_LN2 ** k / math.factorial(k)) for k in range(1, 14))
LOG_SERIES64 = tuple(2.0 / (2 * j + 3) for j in range(10))   # 2/3 ... 2/21
_LH64 = float(1 / _LN2)
_LL64 = float(1 / _LN2 - Fraction(_LH64))

def _hex(v: float, f64: bool = False) -> str:
  """v rounded to float32 (or kept a double), written as LLVM IR writes a float constant (the bits of a double)."""
  if math.isnan(v): return "0x7FF8000000000000"
  if math.isinf(v): return "0x7FF0000000000000" if v > 0 else "0xFFF0000000000000"
  return f"0x{struct.unpack('<Q', struct.pack('<d', v if f64 else _f32(v)))[0]:016X}"

# 1 / ln 2 = LH + LL, each a float32
_LH = _f32(1 / math.log(2))
_LL = _f32(1 / math.log(2) - _LH)
# pi/2 = P1 + P2 + P3 to about 72 bits, each part a float32 (split from pi to 50 digits: a double has only 53 bits)
_PI = Fraction(Decimal("3.14159265358979323846264338327950288419716939937510"))
_P1 = _f32(float(_PI / 2))
_P2 = _f32(float(_PI / 2 - Fraction(_P1)))
_P3 = _f32(float(_PI / 2 - Fraction(_P1) - Fraction(_P2)))

class _IR:
  """The instructions of one helper over n lanes (n == 1: scalars) of float32 (or float64), each a new value %vK."""
  lines: list[str]; decls: set[str]
  def __init__(self, n: int, f64: bool = False) -> None:
    self.n, self.f64, self.lines, self.k, self.decls = n, f64, [], 0, set()
    ft, it = ("double", "i64") if f64 else ("float", "i32")
    self.ft, self.it = ft, it
    self.T = f"<{n} x {ft}>" if n > 1 else ft
    self.I = f"<{n} x {it}>" if n > 1 else it
    self.B = f"<{n} x i1>" if n > 1 else "i1"
    self.sfx = (f"v{n}" if n > 1 else "") + ("f64" if f64 else "f32")
  def f(self, v: float) -> str: return f"splat ({self.ft} {_hex(v, self.f64)})" if self.n > 1 else _hex(v, self.f64)
  def i(self, v: int) -> str: return f"splat ({self.it} {v})" if self.n > 1 else str(v)
  def __call__(self, expr: str) -> str:
    self.k += 1
    self.lines.append(f"  %v{self.k} = {expr}")
    return f"%v{self.k}"
  def call(self, name: str, *args: str) -> str:
    """llvm.<name> of float operands (declared once)."""
    self.decls.add(f"declare {self.T} @llvm.{name}.{self.sfx}({', '.join([self.T] * len(args))})")
    return self(f"call {self.T} @llvm.{name}.{self.sfx}({', '.join(f'{self.T} {a}' for a in args)})")
  def horner(self, x: str, coeffs: tuple[float, ...]) -> str:
    """coeffs[0] + x * (coeffs[1] + x * (...)) by fused multiply-adds."""
    acc = self.f(coeffs[-1])
    for c in reversed(coeffs[:-1]): acc = self.call("fma", x, acc, self.f(c))
    return acc
  def select(self, cond: str, a: str, b: str, t: str | None = None) -> str:
    return self(f"select {self.B} {cond}, {t or self.T} {a}, {t or self.T} {b}")
  def fcmp(self, pred: str, a: str, b: str) -> str: return self(f"fcmp {pred} {self.T} {a}, {b}")

# per width: exp2's clamp (past it the result is 0 or inf either way), exponent bias, mantissa bits, smallest normal
_W = {False: (-151.0, 129.0, 127, 23, 2.0 ** -126), True: (-1076.0, 1025.0, 1023, 52, 2.0 ** -1022)}

def _exp2(ir: _IR) -> str:
  T, I = ir.T, ir.I
  lo, hi, bias, mbits, _ = _W[ir.f64]
  c = ir.call("minnum", ir.call("maxnum", "%x", ir.f(lo)), ir.f(hi))   # (a NaN lane is put back at the end)
  n = ir.call("roundeven", c)
  p = ir.horner(ir(f"fsub {T} {c}, {n}"), (1.0, *(EXP2_COEFFS64 if ir.f64 else EXP2_COEFFS)))
  ni = ir(f"fptosi {T} {n} to {I}")
  n1 = ir(f"ashr {I} {ni}, {ir.i(1)}")
  n2 = ir(f"sub {I} {ni}, {n1}")
  def pow2(e: str) -> str:   # 2^e for a normal exponent e: its bits
    biased = ir(f"add {I} {e}, {ir.i(bias)}")
    return ir(f"bitcast {I} {ir(f'shl {I} {biased}, {ir.i(mbits)}')} to {T}")
  r = ir(f"fmul {T} {ir(f'fmul {T} {p}, {pow2(n1)}')}, {pow2(n2)}")
  return ir.select(ir.fcmp("uno", "%x", "%x"), "%x", r)

def _log2(ir: _IR) -> str:
  T, I = ir.T, ir.I
  _, _, bias, mbits, tiny = _W[ir.f64]
  sub = ir.fcmp("olt", "%x", ir.f(tiny))   # subnormal (zero and negative lanes are set at the end)
  y = ir.select(sub, ir(f"fmul {T} %x, {ir.f(2.0 ** mbits)}"), "%x")
  b = ir(f"bitcast {T} {y} to {I}")
  mant = ir(f"and {I} {b}, {ir.i((1 << mbits) - 1)}")
  m = ir(f"bitcast {I} {ir(f'or {I} {mant}, {ir.i(bias << mbits)}')} to {T}")   # in [1, 2)
  big = ir.fcmp("ogt", m, ir.f(math.sqrt(2.0)))
  m = ir.select(big, ir(f"fmul {T} {m}, {ir.f(0.5)}"), m)
  e = ir(f"sub {I} {ir(f'lshr {I} {b}, {ir.i(mbits)}')}, {ir.select(big, ir.i(bias - 1), ir.i(bias), I)}")
  e = ir(f"sub {I} {e}, {ir.select(sub, ir.i(mbits), ir.i(0), I)}")
  # ln(1 + f) = 2 atanh(s) = f - s * (f - R), R = s^2 (2/3 + 2/5 s^2 + 2/7 s^4 + 2/9 s^6): f is exact and the
  # correction s * (f - R) is below f^2 / 2, so its rounding costs a fraction of an ulp
  f = ir(f"fsub {T} {m}, {ir.f(1.0)}")
  s = ir(f"fdiv {T} {f}, {ir(f'fadd {T} {f}, {ir.f(2.0)}')}")
  s2 = ir(f"fmul {T} {s}, {s}")
  rr = ir(f"fmul {T} {s2}, {ir.horner(s2, LOG_SERIES64 if ir.f64 else LOG_SERIES)}")
  c = ir(f"fmul {T} {s}, {ir(f'fsub {T} {f}, {rr}')}")
  # log2(1 + f) = (f - c) / ln 2 with 1/ln 2 = LH + LL: f * LH kept to double width by an fma
  lh, ll = (_LH64, _LL64) if ir.f64 else (_LH, _LL)
  hi = ir(f"fmul {T} {f}, {ir.f(lh)}")
  lo = ir.call("fma", f, ir.f(lh), ir(f"fneg {T} {hi}"))
  tail = ir.call("fma", ir(f"fneg {T} {c}"), ir.f(lh), ir.call("fma", f, ir.f(ll), lo))
  r = ir(f"fadd {T} {ir(f'sitofp {I} {e} to {T}')}, {ir(f'fadd {T} {hi}, {tail}')}")
  r = ir.select(ir.fcmp("oeq", "%x", ir.f(0.0)), ir.f(-math.inf), r)
  r = ir.select(ir.fcmp("olt", "%x", ir.f(0.0)), ir.f(math.nan), r)
  r = ir.select(ir.fcmp("oeq", "%x", ir.f(math.inf)), ir.f(math.inf), r)
  return ir.select(ir.fcmp("uno", "%x", "%x"), "%x", r)

def _sin(ir: _IR) -> str:
  T, I = ir.T, ir.I
  q = ir.call("roundeven", ir(f"fmul {T} %x, {ir.f(2.0 / math.pi)}"))
  nq = ir(f"fneg {T} {q}")
  r = ir.call("fma", nq, ir.f(_P3), ir.call("fma", nq, ir.f(_P2), ir.call("fma", nq, ir.f(_P1), "%x")))
  r2 = ir(f"fmul {T} {r}, {r}")
  sp = ir.call("fma", ir(f"fmul {T} {r}, {r2}"), ir.horner(r2, SIN_COEFFS), r)
  cp = ir.horner(r2, COS_COEFFS)
  k = ir(f"fptosi {T} {q} to {I}")
  v = ir.select(ir(f"icmp ne {I} {ir(f'and {I} {k}, {ir.i(1)}')}, {ir.i(0)}"), cp, sp)
  v = ir.select(ir(f"icmp ne {I} {ir(f'and {I} {k}, {ir.i(2)}')}, {ir.i(0)}"), ir(f"fneg {T} {v}"), v)
  return ir.select(ir.fcmp("oeq", "%x", ir.f(0.0)), "%x", v)   # sin(-0) = -0

_BODIES = {"exp2": _exp2, "log2": _log2, "sin": _sin}

@functools.cache
def helper(fn: str, n: int, f64: bool = False) -> tuple[str, tuple[str, ...]]:
  """(the name of the internal function computing fn ("exp2", "log2" or "sin"; float64: "exp2" and "log2") of n
  lanes of float32 (or float64), the module-level lines it needs: its definition and declarations)."""
  if f64 and fn == "sin": raise ValueError("float64 sin is libm's: no helper")
  ir = _IR(n, f64)
  name = f"@bg_{fn}_{ir.sfx}"
  out = _BODIES[fn](ir)
  if fn != "sin":
    body = "\n".join(ir.lines) + f"\n  ret {ir.T} {out}"
    return name, (*sorted(ir.decls), f"define internal {ir.T} {name}({ir.T} %x) alwaysinline {{\nentry:\n{body}\n}}")
  # sin: lanes past SIN_LIMIT (or not finite) take libm's sinf, each lane on its own (the others keep the value
  # above, as the C helper computes them): a branch, so only a vector holding such a lane pays for the calls
  ok = ir.fcmp("olt", ir.call("fabs", "%x"), ir.f(SIN_LIMIT))   # (false for NaN and infinities)
  allok = ok
  if n > 1:
    ir.decls.add(f"declare i1 @llvm.vector.reduce.and.v{n}i1(<{n} x i1>)")
    allok = ir(f"call i1 @llvm.vector.reduce.and.v{n}i1(<{n} x i1> {ok})")
  if n == 1: slow, acc = ["  %s.y0 = call float @sinf(float %x)"], "%s.y0"
  else:
    slow, acc = [], "poison"
    for j in range(n):
      slow += [f"  %s.x{j} = extractelement <{n} x float> %x, i32 {j}", f"  %s.y{j} = call float @sinf(float %s.x{j})",
               f"  %s.v{j} = insertelement <{n} x float> {acc}, float %s.y{j}, i32 {j}"]
      acc = f"%s.v{j}"
  slow += [f"  %s.r = select {ir.B} {ok}, {ir.T} {out}, {ir.T} {acc}", f"  ret {ir.T} %s.r"]
  body = "\n".join(ir.lines) + f"\n  br i1 {allok}, label %fast, label %slow\nfast:\n  ret {ir.T} {out}\nslow:\n" + "\n".join(slow)
  return name, (*sorted(ir.decls | {"declare float @sinf(float)"}), f"define internal {ir.T} {name}({ir.T} %x) {{\nentry:\n{body}\n}}")

# ---- the same functions in C, operation for operation (the CPU's C renderer): each lane bit-identical to the LLVM IR
def _c(v: float) -> str:
  """v rounded to float32 as an exact C hexadecimal float literal."""
  if math.isinf(v): return "(1.0f / 0.0f)" if v > 0 else "(-1.0f / 0.0f)"
  if math.isnan(v): return "(0.0f / 0.0f)"
  return f"{_f32(v).hex()}f"

def _c64(v: float) -> str:
  """v as an exact C hexadecimal double literal."""
  if math.isinf(v): return "(1.0 / 0.0)" if v > 0 else "(-1.0 / 0.0)"
  if math.isnan(v): return "(0.0 / 0.0)"
  return v.hex()

def _c_horner(x: str, coeffs: tuple[float, ...], f64: bool = False) -> str:
  lit, fma = (_c64, "__builtin_fma") if f64 else (_c, "__builtin_fmaf")
  acc = lit(coeffs[-1])
  for c in reversed(coeffs[:-1]): acc = f"{fma}({x}, {acc}, {lit(c)})"
  return acc

def _c_bits(f64: bool) -> str:
  """The C helpers that move a float's bits to its unsigned integer and back (float32, or float64)."""
  t, u, n, of, bits = ("double", "unsigned long long", 8, "bg_d_of", "bg_bits64_of") if f64 else ("float", "unsigned int", 4, "bg_f_of", "bg_bits_of")
  return (f"static inline {t} {of}({u} u) {{ {t} f; __builtin_memcpy(&f, &u, {n}); return f; }}\n"
          f"static inline {u} {bits}({t} f) {{ {u} u; __builtin_memcpy(&u, &f, {n}); return u; }}\n")

def _c_exp2_log2(fn: str, f64: bool) -> str:
  """exp2 or log2 in C for float32 (bg_exp2f, bg_log2f) or float64 (bg_exp2, bg_log2), operation for operation as
  _exp2/_log2 build them in LLVM IR."""
  lo, hi, bias, mbits, tiny = _W[f64]
  L = _c64 if f64 else _c
  T, I, U, us, sf, of, bits = (("double", "long long", "unsigned long long", "ull", "", "bg_d_of", "bg_bits64_of") if f64 else
                               ("float", "int", "unsigned int", "u", "f", "bg_f_of", "bg_bits_of"))
  fma = f"__builtin_fma{sf}"
  if fn == "exp2":
    return f"""static inline {T} bg_exp2{sf}({T} x) {{
  {T} c = __builtin_fmin{sf}(__builtin_fmax{sf}(x, {L(lo)}), {L(hi)});
  {T} n = __builtin_rint{sf}(c);
  {T} p = {_c_horner("(c - n)", (1.0, *(EXP2_COEFFS64 if f64 else EXP2_COEFFS)), f64)};
  {I} ni = ({I})n, n1 = ni >> 1, n2 = ni - n1;
  {T} r = (p * {of}(({U})(n1 + {bias}) << {mbits})) * {of}(({U})(n2 + {bias}) << {mbits});
  return x != x ? x : r;
}}
"""
  assert fn == "log2", fn
  lh, ll = (_LH64, _LL64) if f64 else (_LH, _LL)
  return f"""static inline {T} bg_log2{sf}({T} x) {{
  int sub = x < {L(tiny)};
  {T} y = sub ? x * {L(2.0 ** mbits)} : x;
  {U} b = {bits}(y);
  {T} m = {of}((b & {hex((1 << mbits) - 1)}{us}) | {hex(bias << mbits)}{us});
  int big = m > {L(math.sqrt(2.0))};
  m = big ? m * {L(0.5)} : m;
  {I} e = ({I})(b >> {mbits}) - (big ? {bias - 1} : {bias}) - (sub ? {mbits} : 0);
  {T} f = m - {L(1.0)}, s = f / (f + {L(2.0)}), s2 = s * s;
  {T} rr = s2 * {_c_horner("s2", LOG_SERIES64 if f64 else LOG_SERIES, f64)};
  {T} c = s * (f - rr);
  {T} hi = f * {L(lh)}, lo = {fma}(f, {L(lh)}, -hi);
  {T} tail = {fma}(-c, {L(lh)}, {fma}(f, {L(ll)}, lo));
  {T} r = ({T})e + (hi + tail);
  r = x == {L(0.0)} ? {L(-math.inf)} : r;
  r = x < {L(0.0)} ? {L(math.nan)} : r;
  r = x == {L(math.inf)} ? {L(math.inf)} : r;
  return x != x ? x : r;
}}
"""

def _c_sin() -> str:
  return f"""static inline float bg_sinf(float x) {{
  if (!(__builtin_fabsf(x) < {_c(SIN_LIMIT)})) return __builtin_sinf(x);
  float q = __builtin_rintf(x * {_c(2.0 / math.pi)}), nq = -q;
  float r = __builtin_fmaf(nq, {_c(_P3)}, __builtin_fmaf(nq, {_c(_P2)}, __builtin_fmaf(nq, {_c(_P1)}, x)));
  float r2 = r * r;
  float sp = __builtin_fmaf(r * r2, {_c_horner("r2", SIN_COEFFS)}, r);
  float cp = {_c_horner("r2", COS_COEFFS)};
  int k = (int)q;
  float v = (k & 1) ? cp : sp;
  v = (k & 2) ? -v : v;
  return x == {_c(0.0)} ? x : v;
}}
"""


def c_source(fns: list[str]) -> str:
  """C definitions of bg_exp2f, bg_log2f, bg_sinf, bg_exp2 and bg_log2 (those named in fns: "exp2", "log2", "sin",
  and "exp2_64", "log2_64" for the float64 ones)."""
  f32 = [fn for fn in fns if not fn.endswith("_64")]
  f64 = [fn[:-3] for fn in fns if fn.endswith("_64")]
  return ((_c_bits(False) if {"exp2", "log2"} & set(f32) else "") + "".join(_c_sin() if fn == "sin" else _c_exp2_log2(fn, False) for fn in f32) +
          (_c_bits(True) if f64 else "") + "".join(_c_exp2_log2(fn, True) for fn in f64))
