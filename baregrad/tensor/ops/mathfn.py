"""Elementwise math composed from the IR's few ALU ops (EXP2, LOG2, SIN, SQRT, RECIP, ...), accurate where the
naive formula cancels, with PyTorch's gradient formulas (gradfn.with_grad).

- atan: reduced to |z| <= tan(pi/8) (atan x = pi/2 - atan(1/x), atan x = pi/4 + atan((x-1)/(x+1))), then the
  minimax polynomial of Cephes' atanf (float32, half, bfloat16) or the rational approximation of Cephes' atan
  (float64); asin(x) = atan(x / sqrt((1-x)(1+x))), acos(x) = 2 atan(sqrt((1-x)/(1+x))), so neither cancels near +-1.
- log1p, expm1: series near 0 (log1p(x) = 2 atanh(x/(2+x)) as an odd series), where log(1+x) and exp(x)-1 lose
  every digit; the device's LOG2/EXP2 elsewhere (on NV those are PTX's .approx instructions: about 2^-22 absolute).
- sinh, cosh, asinh, acosh, atanh from expm1/log1p; exp(|x|/2)^2/2 past |x| = 20 so sinh/cosh reach float's max
  without overflowing early.
Half and bfloat16 inputs compute in float32 and round once at the end, as PyTorch's CPU kernels do; integer and bool
inputs compute in the default float dtype."""
from __future__ import annotations
import math
from typing import Any, TYPE_CHECKING
from baregrad.ir.dtype import dtypes
if TYPE_CHECKING: from baregrad.tensor.tensor import Tensor
from baregrad.tensor.gradfn import with_grad

_UINT = {2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}

def _f(x: Tensor) -> tuple[Tensor, Any]:
  """(x as the float dtype the math runs in, the dtype of the result)."""
  out = x.dtype if dtypes.is_float(x.dtype) else dtypes.default_float
  work = dtypes.float32 if out in (dtypes.float16, dtypes.bfloat16) else out
  return x.cast(work), out

def _with_sign(mag: Tensor, neg: Tensor) -> Tensor: return neg.where(-mag, mag)

def _poly(x: Tensor, coeffs: list[float]) -> Tensor:
  """coeffs[0] * x^(n-1) + ... + coeffs[-1], by Horner's rule."""
  out = x * coeffs[0] + coeffs[1]
  for c in coeffs[2:]: out = out * x + c
  return out

def _is64(x: Tensor) -> bool: return x.dtype == dtypes.float64

# ---------------------------------------------------------------- atan family
_ATANF = [8.05374449538e-2, -1.38776856032e-1, 1.99777106478e-1, -3.33329491539e-1]   # Cephes atanf.c
_ATAN_P = [-8.750608600031904122785e-1, -1.615753718733365076637e1, -7.500855792314704667340e1, -1.228866684490136173410e2,
           -6.485021904942025371773e1]                                                # Cephes atan.c
_ATAN_Q = [1.0, 2.485846490142306297962e1, 1.650270098316988542046e2, 4.328810604912902668951e2, 4.853903996359136964868e2,
           1.945506571482613964425e2]
_MOREBITS = 6.123233995736765886130e-17   # pi/2 - float64(pi/2)

def _atan_core(x: Tensor) -> Tensor:
  """atan of a float32/float64 tensor, no gradient."""
  a = x.abs()
  big = a > 2.414213562373095   # tan(3 pi / 8)
  mid = (a > 0.4142135623730950).logical_and(big.logical_not())   # tan(pi / 8)
  z = big.where(-1.0 / big.where(a, 1.0), mid.where((a - 1.0) / (a + 1.0), a))
  zz = z * z
  if _is64(x): p = zz * _poly(zz, _ATAN_P) / _poly(zz, _ATAN_Q) * z + z
  else: p = _poly(zz, _ATANF) * zz * z + z
  zero = x.zeros_like_uop()   # where() of two Python floats would be float32
  base = big.where(math.pi / 2, mid.where(math.pi / 4, zero))
  if _is64(x): p = p + big.where(_MOREBITS, mid.where(0.5 * _MOREBITS, zero))
  return _with_sign(base + p, MathOps.signbit(x))

# ---------------------------------------------------------------- log1p, expm1 and the hyperbolic functions

def _log1p_core(x: Tensor) -> Tensor:
  s = x / (x + 2.0)
  ss = s * s
  # 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...): |s| <= 0.172 in the small branch
  n = 12 if _is64(x) else 6
  series = _poly(ss, [2.0 / (2 * k + 1) for k in range(n - 1, -1, -1)]) * s
  small = (x > -0.2928932188134524) & (x < 0.41421356237309503)
  return small.where(series, (x + 1.0).log())

def log1p(x: Tensor) -> Tensor:
  """log(1 + x), accurate near 0; gradient 1 / (1 + x)."""
  w, out = _f(x)
  return with_grad(_log1p_core(w.detach()), (w, 1.0 / (1.0 + w))).cast(out)

def _expm1_core(x: Tensor) -> Tensor:
  small = x.abs() < 0.5
  xs = small.where(x, 0.0)
  n = 17 if _is64(x) else 10
  series = _poly(xs, [1.0 / math.factorial(k) for k in range(n, 0, -1)]) * xs   # x + x^2/2! + ... + x^n/n!
  return small.where(series, x.exp() - 1.0)

def expm1(x: Tensor) -> Tensor:
  """exp(x) - 1, accurate near 0; gradient exp(x)."""
  w, out = _f(x)
  return with_grad(_expm1_core(w.detach()), (w, w.detach().exp())).cast(out)

def _exp_half_sq(a: Tensor) -> Tensor:
  """exp(a) / 2 for large a without overflowing before the result does: (exp(a/2) / 2) * exp(a/2)."""
  h = (a * 0.5).exp()
  return (h * 0.5) * h

def _cosh_core(x: Tensor) -> Tensor:
  a = x.abs()
  big = a > 20.0
  e = big.where(0.0, a).exp()
  return big.where(_exp_half_sq(a), 0.5 * (e + 1.0 / e))

def tanh(x: Tensor) -> Tensor:
  """Hyperbolic tangent, accurate near 0: -expm1(-2|x|) / (2 + expm1(-2|x|)) with the sign of x; gradient 1 - tanh^2."""
  w, out = _f(x)
  wd = w.detach()
  em = _expm1_core(-2.0 * wd.abs())   # in (-1, 0]: no overflow for any x
  v = _with_sign(-em / (em + 2.0), MathOps.signbit(wd))
  v = wd.isnan().where(wd, v)
  return with_grad(v, (w, 1.0 - v * v)).cast(out)

_LN2 = math.log(2.0)

# ---------------------------------------------------------------- binary ops

class MathOps:
  """Inverse trigonometric and hyperbolic functions, sign and closeness tests, norm: Tensor methods (x.atan(), x.norm(p))."""
  __slots__ = ()   # (Tensor has slots: a base without them would give every tensor a __dict__)
  def signbit(x: Tensor) -> Tensor:
    """True where the sign bit is set (-0.0 and negative NaNs included): the bit itself, read through a bitcast."""
    if not dtypes.is_float(x.dtype): return x < 0
    bits = 8 * x.dtype.itemsize
    return (x.bitcast(_UINT[x.dtype.itemsize]) >> (bits - 1)).ne(0)
  def atan(x: Tensor) -> Tensor:
    """Arctangent, elementwise; gradient 1 / (1 + x^2)."""
    w, out = _f(x)
    return with_grad(_atan_core(w.detach()), (w, 1.0 / (1.0 + w * w))).cast(out)
  def asin(x: Tensor) -> Tensor:
    """Arcsine, elementwise (NaN outside [-1, 1]); gradient 1 / sqrt(1 - x^2)."""
    w, out = _f(x)
    wd = w.detach()
    q = (1.0 - wd) * (1.0 + wd)
    return with_grad(_atan_core(wd / q.sqrt()), (w, ((1.0 - w) * (1.0 + w)).rsqrt())).cast(out)
  def acos(x: Tensor) -> Tensor:
    """Arccosine, elementwise (NaN outside [-1, 1]); gradient -1 / sqrt(1 - x^2)."""
    w, out = _f(x)
    wd = w.detach()
    v = 2.0 * _atan_core(((1.0 - wd) / (1.0 + wd)).sqrt())
    return with_grad(v, (w, -((1.0 - w) * (1.0 + w)).rsqrt())).cast(out)
  def atan2(y: Tensor, x: Any) -> Tensor:
    """atan2(y, x): the angle of the point (x, y) in (-pi, pi], with the signs of zeros as C's atan2; gradients
    x / (x^2 + y^2) and -y / (x^2 + y^2)."""
    yy, xx = y._operands(x, out_float=True)
    yw, out = _f(yy)
    xw = xx.cast(yw.dtype)
    yd, xd = yw.detach(), xw.detach()
    ya, xa = yd.abs(), xd.abs()
    # atan of the smaller over the larger magnitude, then reflected into the right octant
    swap = ya > xa
    num, den = swap.where(xa, ya), swap.where(ya, xa)
    r = _atan_core(den.eq(0).where(0.0, num / den.eq(0).where(1.0, den)))
    both_inf = xa.isinf() & ya.isinf()
    r = both_inf.where(math.pi / 4, r)
    r = swap.where(math.pi / 2 - r, r)
    r = MathOps.signbit(xd).where(math.pi - r, r)
    r = (yd.isnan() | xd.isnan()).where(math.nan, r)
    v = _with_sign(r, MathOps.signbit(yd))
    n2 = xw * xw + yw * yw
    return with_grad(v, (yw, xw / n2), (xw, -yw / n2)).cast(out)
  def sinh(x: Tensor) -> Tensor:
    """Hyperbolic sine, accurate near 0; gradient cosh(x)."""
    w, out = _f(x)
    wd = w.detach()
    a = wd.abs()
    big = a > 20.0
    em = _expm1_core(big.where(0.0, a))
    v = _with_sign(big.where(_exp_half_sq(a), 0.5 * (em + em / (em + 1.0))), MathOps.signbit(wd))
    return with_grad(v, (w, _cosh_core(wd))).cast(out)
  def cosh(x: Tensor) -> Tensor:
    """Hyperbolic cosine; gradient sinh(x)."""
    w, out = _f(x)
    wd = w.detach()
    return with_grad(_cosh_core(wd), (w, MathOps.sinh(wd))).cast(out)
  def asinh(x: Tensor) -> Tensor:
    """Inverse hyperbolic sine; gradient 1 / sqrt(x^2 + 1)."""
    w, out = _f(x)
    wd = w.detach()
    a = wd.abs()
    big = a > 2.0 ** 28
    ab = big.where(1.0, a)
    v = big.where(a.log() + _LN2, _log1p_core(ab + ab * ab / (1.0 + (1.0 + ab * ab).sqrt())))
    return with_grad(_with_sign(v, MathOps.signbit(wd)), (w, (w * w + 1.0).rsqrt())).cast(out)
  def acosh(x: Tensor) -> Tensor:
    """Inverse hyperbolic cosine (NaN below 1); gradient 1 / sqrt(x^2 - 1)."""
    w, out = _f(x)
    wd = w.detach()
    big = wd > 2.0 ** 28
    t = big.where(1.0, wd) - 1.0
    v = big.where(wd.log() + _LN2, _log1p_core(t + (2.0 * t + t * t).sqrt()))
    return with_grad(v, (w, ((w - 1.0) * (w + 1.0)).rsqrt())).cast(out)
  def atanh(x: Tensor) -> Tensor:
    """Inverse hyperbolic tangent (+-inf at +-1, NaN beyond); gradient 1 / (1 - x^2)."""
    w, out = _f(x)
    wd = w.detach()
    a = wd.abs()
    v = _with_sign(0.5 * _log1p_core(2.0 * a / (1.0 - a)), MathOps.signbit(wd))
    return with_grad(v, (w, 1.0 / ((1.0 - w) * (1.0 + w)))).cast(out)
  def copysign(input: Tensor, other: Any) -> Tensor:
    """|input| with the sign bit of other (-0.0 and NaN signs included); ints promote to float. Gradient +-1 for
    input (0 where input is 0, as PyTorch), none for other."""
    from baregrad.tensor.tensor import Tensor
    if not isinstance(other, (Tensor, bool, int, float)): raise TypeError(f"copysign: other must be a Tensor or a number, got {type(other).__name__}")
    a, b = input._operands(other, out_float=True)
    if a.dtype in (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64):
      u = _UINT[a.dtype.itemsize]
      top = 1 << (8 * a.dtype.itemsize - 1)
      bits = (a.detach().bitcast(u) & (top - 1)) | (b.detach().bitcast(u) & top)
      v = bits.bitcast(a.dtype)
    else: raise TypeError(f"copysign: unsupported dtype {a.dtype}")
    d = a.eq(0).where(0.0, (MathOps.signbit(a) ^ MathOps.signbit(b)).where(-1.0, 1.0))
    return with_grad(v, (a, d), (b, b.detach().zeros_like_uop()))   # other gets a zero gradient, as in PyTorch
  def logaddexp(input: Tensor, other: Any) -> Tensor:
    """log(exp(input) + exp(other)) without overflow: max + log1p(exp(-|input - other|)); gradients exp(input - out),
    exp(other - out)."""
    a, b = input._operands(other, out_float=True)
    aw, out = _f(a)
    bw = b.cast(aw.dtype)
    ad, bd = aw.detach(), bw.detach()
    m = ad.maximum(bd)
    same_inf = ad.isinf() & ad.eq(bd)
    diff = same_inf.where(0.0, (ad - bd).abs())
    v = same_inf.where(ad, m + _log1p_core((-diff).exp()))
    return with_grad(v, (aw, (aw.detach() - v).exp()), (bw, (bw.detach() - v).exp())).cast(out)
  def isclose(input: Tensor, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
    """|input - other| <= atol + rtol * |other| elementwise (bool); equal infinities are close, NaNs only with equal_nan."""
    if rtol < 0: raise RuntimeError(f"isclose: rtol must be greater than or equal to zero, got rtol={rtol}")
    if atol < 0: raise RuntimeError(f"isclose: atol must be greater than or equal to zero, got atol={atol}")
    a, b = input._operands(other)
    if a.dtype == dtypes.bool: return a.eq(b)
    eq = a.eq(b)
    if not dtypes.is_float(a.dtype) and rtol == 0 and atol == 0: return eq
    af, bf = (a, b) if dtypes.is_float(a.dtype) else (a.cast(dtypes.float64), b.cast(dtypes.float64))
    # infinities are close only to themselves (the tolerance test would call inf close to -inf)
    close = eq | (af.isfinite() & bf.isfinite() & ((af - bf).abs() <= atol + rtol * bf.abs()))
    if equal_nan and dtypes.is_float(a.dtype): close = close | (a.isnan() & b.isnan())
    return close
  def allclose(input: Tensor, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:
    """Whether isclose holds everywhere (a Python bool: this synchronizes with the device)."""
    return bool(MathOps.isclose(input, other, rtol, atol, equal_nan).all().item())
  def softsign(x: Tensor) -> Tensor:
    """x / (1 + |x|)."""
    return x / (1 + x.abs())
  def softmin(x: Tensor, dim: int | None = None, dtype: Any = None, axis: int | None = None) -> Tensor:
    """softmax(-x) along dim (axis= accepted too); PyTorch's implicit dim for dim=None is not guessed: dim is required."""
    d = dim if axis is None else axis
    if d is None: raise TypeError("softmin: dim is required (PyTorch's implicit choice of dim is deprecated)")
    return (-(x.cast(dtype) if dtype is not None else x._float())).softmax(d)
  def norm(x: Tensor, p: Any = "fro", dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Tensor:
    """Vector p-norm over dim (all axes when None): p = 2/'fro' (sqrt of the sum of squares), 1, inf, -inf, 0 (count
    of non-zeros) or any other number (sum |x|^p)^(1/p). The gradient at an all-zero vector is 0, as PyTorch's."""
    if dtype is not None: x = x.cast(dtype)
    x = x._float()
    if p == "fro": p = 2
    if isinstance(p, str) or not isinstance(p, (int, float)): raise RuntimeError(f"norm: p must be a number or 'fro', got {p!r}")
    if p == math.inf: return x.abs().amax(dim, keepdim)
    if p == -math.inf: return x.abs().amin(dim, keepdim)
    if p == 0: return x.ne(0).cast(x.dtype).sum(dim, keepdim)
    if p == 1: return x.abs().sum(dim, keepdim)
    s = x.abs().pow(p).sum(dim, keepdim) if p != 2 else (x * x).sum(dim, keepdim)
    zero = s.eq(0)
    r = zero.where(1.0, s).pow(1.0 / p)   # the root's gradient would be inf at 0: take it where s is not 0
    return zero.where(0.0, r)
  arctan = atan
  arcsin = asin
  arccos = acos
  arctan2 = atan2
  arcsinh = asinh
  arccosh = acosh
  arctanh = atanh
