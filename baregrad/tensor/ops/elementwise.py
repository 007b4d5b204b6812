"""Elementwise ops: arithmetic with PyTorch's type promotion and broadcasting (and the operators), comparisons, bitwise
and logical ops, where/clip, and the unary math functions. The per-op hot path of eager code: a Python scalar operand
becomes a cached broadcast constant node, and the tensors are tested as ElementwiseOps (a base of Tensor only) so
this module needs no import of tensor.py."""
from __future__ import annotations
import math
from typing import Any, TYPE_CHECKING
from baregrad.ir.dtype import DType, dtypes, promote, promote_with_scalar, least_upper
from baregrad.ir.ops import UOp, Ops, GroupOp, make_keyed
from baregrad.hal import Device
from baregrad.engine.graph import shape_of, set_shape, broadcast_const
from baregrad.tensor.gradfn import with_grad
from baregrad.tensor.recipe import method_recipe
from baregrad.tensor.ops import mathfn as _mathfn
from baregrad.tensor.common import broadcast_shape
from baregrad.tensor import hostdata
if TYPE_CHECKING: from baregrad.tensor.tensor import Tensor

_object_new = object.__new__

# (dtype, shape, type, value) -> the scalar broadcast to the shape: eager code adds the same constants to tensors of the
# same shapes over and over (x + 1, a learning rate, an epsilon), and three hash-consed nodes cost ~3 us to build. A
# hit is the node building would give (equal nodes are one object), kept alive here. Float zeros and NaN are not
# looked up (-0.0 would find 0.0's node; NaN finds nothing)
_SCALARS: dict[tuple, UOp] = {}

_SCALAR_PROMOTION: dict[tuple, DType] = {}   # (tensor dtype, scalar type, default float) -> the op's dtype

def _scalar_node(d: DType, y: Any, shape: tuple[int, ...]) -> UOp:
  if type(y) is float and (y == 0 or y != y): return broadcast_const(UOp.const(d, y), shape)   # (-0.0 == 0.0)
  key = (d, shape, type(y), y)
  if (u := _SCALARS.get(key)) is not None: return u
  u = broadcast_const(UOp.const(d, y), shape)
  if len(_SCALARS) >= 4096: _SCALARS.clear()
  _SCALARS[key] = u
  return u

def _zero_sign_of(r: Tensor, x: Tensor) -> Tensor:
  """r, with its zeros given the sign of x (x * 0 is a zero with x's sign where x is finite)."""
  return r.eq(0).where(x * 0.0, r)

def _fmod_value(x: Tensor, y: Tensor) -> Tensor:
  """C's fmod for float tensors of one dtype (no gradient): x - trunc(x / y) * y, zeros with the sign of x, and x
  itself for a finite x and an infinite y (where the formula would give 0 * inf = NaN)."""
  r = _zero_sign_of(x - (x / y).trunc() * y, x)
  return (y.isinf() & x.isfinite()).where(x, r)

def _pow_value(x: Tensor, y: Tensor) -> Tensor:
  """x ** y for float tensors of one shape, with C's pow (and PyTorch's) at the edges: exp2(y log2|x|) with the sign
  of a negative base for odd integer exponents; NaN for a finite negative base with a non-integer exponent; x ** 0,
  1 ** y and (-1) ** +-inf are 1 (NaNs included); (+-0) ** negative is inf (-inf for -0.0 and odd exponents);
  (-inf) ** y is inf, 0 or -inf by y's sign and parity."""
  ax = x.abs()
  # exp2(y log2 |x|) multiplies the rounding error of log2 by y: float32 (and half) compute it in float64 where the
  # device has it, so results are correctly rounded in practice (3.0 ** 3.0 is 27, not 27.000002)
  if x.dtype == dtypes.float32 and Device[x.device].supports_dtype(dtypes.float64):
    mag = (y.cast(dtypes.float64) * ax.cast(dtypes.float64).log2()).exp2().cast(x.dtype)
  else: mag = (y * ax.log2()).exp2()
  yint = y.trunc().eq(y)
  odd = yint & y.abs().fmod(2).eq(1)
  neg = x.signbit()
  res = (neg & odd).where(-mag, mag)
  res = (neg & yint.logical_not() & ax.isfinite() & ax.ne(0)).where(math.nan, res)
  return (y.eq(0) | x.eq(1) | (x.eq(-1) & y.isinf())).where(1.0, res)

class ElementwiseOps:
  """Elementwise: Tensor methods and operators (x + y, x.add(y, alpha=2), x < y, x.exp(), x.where(a, b), x.clip(0, 1))."""
  __slots__ = ()   # (Tensor has slots: a base without them would give every tensor a __dict__)
  def _operands(self, y: Any, reverse: bool = False, out_float: bool = False) -> tuple[Tensor, Tensor]:
    dt, ty = self.uop.dtype, type(y)
    if ty is float or ty is int or ty is bool:   # (the commonest operand of an eager op: its promotion looked up)
      if ty is int and not -0x8000000000000000 <= y <= 0x7fffffffffffffff: hostdata.check_operand(y, dt)
      if (d := _SCALAR_PROMOTION.get(pk := (dt, ty, dtypes.default_float))) is None: d = _SCALAR_PROMOTION[pk] = promote_with_scalar(dt, y)
    elif isinstance(y, ElementwiseOps):
      if y.device != self.device: raise RuntimeError(f"Expected all tensors to be on the same device, got {self.device} and {y.device}")
      d = promote(dt, y.dtype)
    elif isinstance(y, (bool, int, float)): d = promote_with_scalar(dt, y)
    else: raise TypeError(f"unsupported operand type {type(y).__name__}")
    if out_float and not dtypes.is_float(d): d = dtypes.default_float
    x = self if d is dt else self.cast(d)
    if not isinstance(y, ElementwiseOps):  # a Python scalar: the broadcast constant _bcast would build, cached, in one step
      c = _object_new(type(self))
      # (not filed in live: it reads no buffer, so no in-place write ever needs it computed first)
      c.uop, c.device, c.grad, c.requires_grad = _scalar_node(d, y, shape_of(x.uop)), self.device, None, None
      return (c, x) if reverse else (x, c)
    y = y.cast(d)
    shape = broadcast_shape(x.shape, y.shape)
    x, y = x._bcast(shape), y._bcast(shape)
    return (y, x) if reverse else (x, y)
  def _bcast(self, shape: tuple[int, ...]) -> Tensor:
    if self.shape == shape: return self
    x = self.reshape((1,) * (len(shape) - self.ndim) + self.shape) if self.ndim < len(shape) else self
    return x.expand(shape)
  def _alu(self, op: Ops, *srcs: Tensor) -> Tensor:
    # (loops, no generators: this builds the node of every elementwise op)
    cmp = op in GroupOp.Comparison
    dt = dtypes.bool if cmp else (srcs[-1].uop.dtype if op is Ops.WHERE else self.uop.dtype)
    rg = self.requires_grad
    uops = [self.uop]
    for s in srcs:
      uops.append(s.uop)
      if s.requires_grad: rg = True
    u = make_keyed(op, dt, tuple(uops), None, None)   # (UOp(op, dt, srcs) without its argument checks)
    # the operands are broadcast already: where their shapes are known and equal, so is the result's (shape_of would
    # find the same, one inference per op later)
    if u._shape is None and (sh := uops[0]._shape) is not None:
      for x in uops:
        if x._shape != sh: break
      else: set_shape(u, sh)
    return self._new(u, requires_grad=True if rg and not cmp and dtypes.is_float(dt) else None)
  def add(self, y: Any, alpha: Any = 1) -> Tensor:
    """self + alpha * y, broadcast, with PyTorch's type promotion."""
    x, y = self._operands(y if alpha == 1 else y * alpha)
    return x._alu(Ops.ADD, y)
  def sub(self, y: Any, alpha: Any = 1) -> Tensor:
    """self - alpha * y, broadcast, with PyTorch's type promotion (bool tensors are refused)."""
    x, y = self._operands(y if alpha == 1 else y * alpha)
    if x.dtype == dtypes.bool: raise TypeError("subtraction of bool tensors is not supported; use logical_xor")
    return x._alu(Ops.SUB, y)
  def mul(self, y: Any) -> Tensor:
    """self * y, broadcast, with PyTorch's type promotion."""
    x, y = self._operands(y)
    return x._alu(Ops.MUL, y)
  def div(self, y: Any, rounding_mode: str | None = None) -> Tensor:
    """self / y: true division (ints give float); rounding_mode 'trunc' or 'floor' rounds the quotient."""
    if rounding_mode not in (None, "trunc", "floor"):
      raise RuntimeError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found {rounding_mode!r}")
    if rounding_mode == "floor": return self.floor_divide(y)
    if rounding_mode == "trunc":
      x, yy = self._operands(y)
      return x._alu(Ops.IDIV, yy) if not dtypes.is_float(x.dtype) else (x / yy).trunc()
    x, y = self._operands(y, out_float=True)
    return x._alu(Ops.FDIV, y)
  def floor_divide(self, y: Any) -> Tensor:
    """self // y rounded toward -inf, as Python and PyTorch (ints exactly; a zero int divisor gives 0, PyTorch raises)."""
    x, yy = self._operands(y)
    if dtypes.is_float(x.dtype): return (x / yy).floor()
    q = x._alu(Ops.IDIV, yy)
    r = x._alu(Ops.MOD, yy)
    # truncation -> floor: subtract one where the remainder is nonzero and the signs differ
    fix = (r.ne(0)) & ((r < 0).ne(yy < 0))
    return fix.where(q - 1, q)
  def remainder(self, y: Any) -> Tensor:
    """x - floor(x / y) * y: the sign of y, as Python's %. Computed as PyTorch does, from fmod: where fmod's result is
    nonzero and its sign differs from y's, y is added; so a zero keeps the sign of x, x % inf is x for x >= 0 and
    inf for x < 0 (-inf: the mirror image), and an infinite x gives NaN."""
    x, yy = self._operands(y)
    if dtypes.is_float(x.dtype):
      xd, yd = x.detach(), yy.detach()
      m = _fmod_value(xd, yd)
      fix = m.ne(0) & (m < 0).ne(yd < 0)
      return with_grad(fix.where(m + yd, m), (x, xd.ones_like()), (yy, -(xd / yd).floor()))
    r = x._alu(Ops.MOD, yy)
    fix = (r.ne(0)) & ((r < 0).ne(yy < 0))
    return fix.where(r + yy, r)
  def fmod(self, y: Any) -> Tensor:
    """x - trunc(x / y) * y: the sign of x, as C's fmod (zeros included); fmod(x, +-inf) is x for finite x, NaN for an
    infinite x or a zero y."""
    x, yy = self._operands(y)
    if not dtypes.is_float(x.dtype): return x._alu(Ops.MOD, yy)
    xd, yd = x.detach(), yy.detach()
    return with_grad(_fmod_value(xd, yd), (x, xd.ones_like()), (yy, -(xd / yd).trunc()))
  def pow(self, y: Any) -> Tensor:
    """self ** y with PyTorch's special cases (0**0 = 1, 0**-1 = inf, signs of negative bases, ints stay ints); gradients by PyTorch's formulas."""
    if isinstance(y, float) and not dtypes.is_float(self.dtype): return self.float().pow(y)  # int ** 2.0 is float
    if isinstance(y, (int, float)) and not isinstance(y, bool):
      if isinstance(y, int) and y < 0 and not dtypes.is_float(self.dtype):
        raise RuntimeError(f"Integers to negative integer powers are not allowed ({self.dtype} tensor ** {y}): use a float tensor")
      if y == 0 and isinstance(y, int) and self.dtype != dtypes.bool: return self.ones_like()
      if y == 2: return self * self
      if y == 1: return self * 1
      if y == 0.5: return self.float().sqrt() if not dtypes.is_float(self.dtype) else self.sqrt()
      if y == -1: return self.reciprocal()
      if y == -0.5: return self.float().rsqrt() if not dtypes.is_float(self.dtype) else self.rsqrt()  # PyTorch's rsqrt path: (-0.0) ** -0.5 is -inf
      if float(y).is_integer() and 3 <= abs(y) <= 8 and dtypes.is_float(self.dtype): return self._small_int_pow(int(y))
      if isinstance(y, int) and y > 0 and not dtypes.is_float(self.dtype):
        out, base, e = type(self).ones_like(self), self, y
        while e:
          if e & 1: out = out * base
          base, e = base * base, e >> 1
        return out
    x, yy = self._operands(y)
    if not dtypes.is_float(x.dtype) and x.dtype != dtypes.bool: return x._int_pow(yy)  # int ** int tensor stays int
    x, yy = self._operands(y, out_float=True)
    out = x.dtype
    if out in (dtypes.float16, dtypes.bfloat16): x, yy = x.float(), yy.float()  # computed in float32, rounded once
    xd, yd = x.detach(), yy.detach()
    v = _pow_value(xd, yd)
    # PyTorch's formulas: y x^(y-1) (0 where y == 0) and x^y log(x) (0 where x == 0 and y >= 0)
    dx = yd.eq(0).where(0.0, yd * _pow_value(xd, yd - 1))
    dy = (xd.eq(0) & (yd >= 0)).where(0.0, v * xd.log())
    return with_grad(v, (x, dx), (yy, dy)).cast(out)
  def _small_int_pow(self, n: int) -> Tensor:
    """x ** n for a small integer n by multiplications (exact where PyTorch's pow is, unlike exp2(n log2 x)); gradient
    n x^(n-1) given directly, so 0 ** -3 has PyTorch's -inf gradient instead of inf * 0."""
    x = self.detach()
    def mul_pow(k: int) -> Tensor:
      out, b = None, x
      while k:
        if k & 1: out = b if out is None else out * b
        b, k = b * b, k >> 1
      return out if out is not None else x.ones_like()
    v = mul_pow(abs(n)) if n > 0 else mul_pow(-n).reciprocal()
    d = n * (mul_pow(n - 1) if n > 1 else mul_pow(1 - n).reciprocal())
    return with_grad(v, (self, d))
  def _int_pow(self, e: Tensor) -> Tensor:
    """self ** e for int tensors of one dtype and shape, exactly: square-and-multiply over the low 6 bits of e.
    Past them (e >= 64) and for e < 0 only bases 0, 1, -1 have an int result (others: 0, as PyTorch gives for e < 0)."""
    out, b = self.ones_like(), self
    for bit in range(6):
      out = ((e >> bit) & 1).ne(0).where(out * b, out)
      b = b * b
    odd = (e & 1).ne(0)
    unit = self.eq(1).where(1, self.eq(-1).where(odd.where(-1, 1), 0)).cast(self.dtype)
    edge = (e >= 64) | (e < 0) if not dtypes.is_unsigned(e.dtype) else e >= 64
    return edge.where(unit, out)
  def __add__(self, y: Any) -> Tensor:
    x, y2 = self._operands(y)
    return x._alu(Ops.ADD, y2)
  def __radd__(self, y: Any) -> Tensor: x, y2 = self._operands(y, reverse=True); return x._alu(Ops.ADD, y2)
  def __sub__(self, y: Any) -> Tensor: return self.sub(y)
  def __rsub__(self, y: Any) -> Tensor: x, y2 = self._operands(y, reverse=True); return x._alu(Ops.SUB, y2)
  def __mul__(self, y: Any) -> Tensor:
    x, y2 = self._operands(y)
    return x._alu(Ops.MUL, y2)
  def __rmul__(self, y: Any) -> Tensor: x, y2 = self._operands(y, reverse=True); return x._alu(Ops.MUL, y2)
  def __truediv__(self, y: Any) -> Tensor: return self.div(y)
  def __rtruediv__(self, y: Any) -> Tensor: x, y2 = self._operands(y, reverse=True, out_float=True); return x._alu(Ops.FDIV, y2)
  def __floordiv__(self, y: Any) -> Tensor: return self.floor_divide(y)
  def __rfloordiv__(self, y: Any) -> Tensor: x, y2 = self._operands(y, reverse=True); return x.floor_divide(y2)
  def __mod__(self, y: Any) -> Tensor: return self.remainder(y)
  def __rmod__(self, y: Any) -> Tensor: x, y2 = self._operands(y, reverse=True); return x.remainder(y2)
  def __pow__(self, y: Any) -> Tensor: return self.pow(y)
  def __rpow__(self, y: Any) -> Tensor: x, y2 = self._operands(y, reverse=True); return x.pow(y2)
  def __matmul__(self, y: Tensor) -> Tensor: return self.matmul(y)
  def __rmatmul__(self, y: Tensor) -> Tensor: return y.matmul(self)
  def __neg__(self) -> Tensor: return self.neg()
  def __abs__(self) -> Tensor: return self.abs()
  def __invert__(self) -> Tensor: return self.bitwise_not()
  def __lt__(self, y: Any) -> Tensor:
    """self < y elementwise (bool), broadcast."""
    x, y2 = self._operands(y); return x._alu(Ops.CMPLT, y2)
  def __gt__(self, y: Any) -> Tensor:
    """self > y elementwise (bool), broadcast."""
    x, y2 = self._operands(y); return y2._alu(Ops.CMPLT, x)
  def __le__(self, y: Any) -> Tensor: return (self > y).logical_not()._nan_guard(self, y)
  def __ge__(self, y: Any) -> Tensor: return (self < y).logical_not()._nan_guard(self, y)
  def _nan_guard(self, x: Tensor, y: Any) -> Tensor:
    # not(a > b) is true for NaN; a <= b must be false there
    if not dtypes.is_float(x.dtype) and not (isinstance(y, ElementwiseOps) and dtypes.is_float(y.dtype)) and not isinstance(y, float): return self
    a, b = x._operands(y)
    return self & a.eq(a) & b.eq(b)
  def eq(self, y: Any) -> Tensor:
    """self == y elementwise (bool), broadcast."""
    x, y2 = self._operands(y); return x._alu(Ops.CMPEQ, y2)
  def ne(self, y: Any) -> Tensor:
    """self != y elementwise (bool), broadcast."""
    x, y2 = self._operands(y); return x._alu(Ops.CMPNE, y2)
  def le(self, y: Any) -> Tensor:
    """self <= y elementwise (bool), broadcast; False where either is NaN."""
    return self <= y
  def ge(self, y: Any) -> Tensor:
    """self >= y elementwise (bool), broadcast; False where either is NaN."""
    return self >= y
  def _bitwise(self, op: Ops, y: Any) -> Tensor:
    x, y2 = self._operands(y)
    if dtypes.is_float(x.dtype): raise TypeError(f"bitwise {op.name.lower()} needs integer or bool tensors, got {x.dtype}")
    return x._alu(op, y2)
  def __and__(self, y: Any) -> Tensor:
    """self & y for int and bool tensors."""
    return self._bitwise(Ops.AND, y)
  def __or__(self, y: Any) -> Tensor:
    """self | y for int and bool tensors."""
    return self._bitwise(Ops.OR, y)
  def __xor__(self, y: Any) -> Tensor:
    """self ^ y for int and bool tensors."""
    return self._bitwise(Ops.XOR, y)
  def __lshift__(self, y: Any) -> Tensor: return self._bitwise(Ops.SHL, y)
  def __rshift__(self, y: Any) -> Tensor: return self._bitwise(Ops.SHR, y)
  def bitwise_not(self) -> Tensor:
    """~self: bits inverted (logical not for bool)."""
    if self.dtype == dtypes.bool: return self.logical_not()
    return self ^ -1 if not dtypes.is_unsigned(self.dtype) else self ^ int(dtypes.max(self.dtype))
  def logical_not(self) -> Tensor:
    """True where self is zero (bool result)."""
    return self.cast(dtypes.bool)._alu(Ops.CMPNE, type(self)(UOp.const(dtypes.bool, True), device=self.device)._bcast(self.shape))
  def logical_and(self, y: Any) -> Tensor:
    """self and y, elementwise, as bools."""
    return self.bool() & (y.bool() if isinstance(y, ElementwiseOps) else bool(y))
  def logical_or(self, y: Any) -> Tensor:
    """self or y, elementwise, as bools."""
    return self.bool() | (y.bool() if isinstance(y, ElementwiseOps) else bool(y))
  def logical_xor(self, y: Any) -> Tensor:
    """self xor y, elementwise, as bools."""
    return self.bool() ^ (y.bool() if isinstance(y, ElementwiseOps) else bool(y))
  def maximum(self, y: Any) -> Tensor:
    """The larger of self and y elementwise (NaN propagates; ties split the gradient evenly, as PyTorch)."""
    x, y2 = self._operands(y); return x._alu(Ops.MAX, y2)
  def minimum(self, y: Any) -> Tensor:
    """The smaller of self and y elementwise (NaN propagates)."""
    x, y2 = self._operands(y)
    if not dtypes.is_float(x.dtype): return (x < y2).where(x, y2)  # ints: -x overflows for the most negative value
    return -((-x)._alu(Ops.MAX, -y2))
  def where(self: Tensor, x: Any, y: Any) -> Tensor:
    """self (a condition) selects x where True, y elsewhere; all three broadcast; x and y promote."""
    cond = self.bool() if self.dtype != dtypes.bool else self
    if isinstance(x, ElementwiseOps): a, b = x._operands(y)
    elif isinstance(y, ElementwiseOps): b, a = y._operands(x)
    else:
      d = least_upper(promote_with_scalar(dtypes.bool, x), promote_with_scalar(dtypes.bool, y))
      a, b = type(self)(UOp.const(d, x), device=self.device), type(self)(UOp.const(d, y), device=self.device)
    shape = broadcast_shape(cond.shape, a.shape, b.shape)
    return cond._bcast(shape)._alu(Ops.WHERE, a._bcast(shape), b._bcast(shape))
  def clip(self, min_: Any = None, max_: Any = None, *, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
    """Values limited to [min, max] (either may be None); the gradient at a bound goes to the input, as PyTorch's clamp."""
    min_, max_ = (min if min_ is None else min_), (max if max_ is None else max_)
    if min_ is None and max_ is None: raise RuntimeError("clip needs at least one of min or max")
    # where, not maximum/minimum: at x == min the gradient goes to x whole (maximum splits ties), as in PyTorch
    out = self
    if min_ is not None: out = (out < min_).where(min_, out)
    if max_ is not None: out = (out > max_).where(max_, out)
    return out
  def neg(self) -> Tensor:
    """-self (bool tensors are refused, as in PyTorch)."""
    if self.dtype == dtypes.bool: raise TypeError("negation of a bool tensor: use logical_not")
    return self._alu(Ops.NEG)
  def _float(self) -> Tensor: return self if dtypes.is_float(self.dtype) else self.cast(dtypes.default_float)
  def exp2(self) -> Tensor:
    """2 ** x (ints compute in float32)."""
    return self._float()._alu(Ops.EXP2)
  def log2(self) -> Tensor:
    """Base-2 logarithm (ints compute in float32)."""
    return self._float()._alu(Ops.LOG2)
  def exp(self) -> Tensor:
    """e ** x (ints compute in float32)."""
    return (self._float() * (1 / math.log(2)))._alu(Ops.EXP2)
  def log(self) -> Tensor:
    """Natural logarithm (ints compute in float32)."""
    return self._float()._alu(Ops.LOG2) * math.log(2)
  def log10(self) -> Tensor:
    """Base-10 logarithm."""
    return self.log2() * (math.log(2) / math.log(10))
  def log1p(self) -> Tensor:
    """log(1 + x), accurate near 0 (a series there, see ops/mathfn.py)."""
    return _mathfn.log1p(self)
  def expm1(self) -> Tensor:
    """exp(x) - 1, accurate near 0 (a series there, see ops/mathfn.py)."""
    return _mathfn.expm1(self)
  def sqrt(self) -> Tensor:
    """Square root (NaN below 0)."""
    return self._float()._alu(Ops.SQRT)
  def rsqrt(self) -> Tensor:
    """1 / sqrt(x)."""
    return self.sqrt().reciprocal()
  def reciprocal(self) -> Tensor:
    """1 / x (ints compute in float32)."""
    return self._float()._alu(Ops.RECIP)
  def square(self) -> Tensor:
    """x * x."""
    return self * self
  def sin(self) -> Tensor:
    """Sine (radians)."""
    return self._float()._alu(Ops.SIN)
  def cos(self) -> Tensor:
    """Cosine (radians), computed as 1 - 2 sin^2(x/2) so large arguments keep their accuracy."""
    # 1 - 2 sin^2(x/2): x/2 is exact, where pi/2 - x rounds x away (cos(1e4) was off by 1.5e-4 in float32)
    s = (self._float() * 0.5).sin()
    return 1 - 2 * s * s
  def tan(self) -> Tensor:
    """Tangent: sin / cos."""
    return self.sin() / self.cos()
  def zeros_like_uop(self) -> Tensor:
    """A zero constant broadcast to this tensor's shape (a view of one constant: no buffer)."""
    return type(self)(UOp.const(self.dtype, 0), device=self.device)._bcast(self.shape)
  @method_recipe("erf")
  def erf(self) -> Tensor:
    """Error function (Abramowitz & Stegun 7.1.26, |error| < 1.5e-7); gradient 2/sqrt(pi) exp(-x^2)."""
    x = self._float()
    xd = x.detach()
    t = 1.0 / (1.0 + 0.3275911 * xd.abs())
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * (-(xd * xd)).exp()
    return with_grad(xd.sign() * y, (x, (2 / math.sqrt(math.pi)) * (-(xd * xd)).exp()))
  def abs(self) -> Tensor:
    """|x|; abs(-0.0) is +0.0 and the gradient at 0 is 0 (sign(x)), as in PyTorch."""
    if dtypes.is_unsigned(self.dtype) or self.dtype == dtypes.bool: return self
    if dtypes.is_float(self.dtype): return self * self.sign() + 0.0  # sign carries no gradient; + 0.0 turns -0.0 into +0.0
    return (self < 0).where(-self, self)
  def sign(self) -> Tensor:
    """-1, 0 or 1 by the sign (0 for NaN; bools and unsigned ints as themselves)."""
    if self.dtype == dtypes.bool: return self
    return (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype) if not dtypes.is_unsigned(self.dtype) else (self > 0).cast(self.dtype)
  def trunc(self) -> Tensor:
    """Rounded toward zero (ints unchanged)."""
    return self._alu(Ops.TRUNC) if dtypes.is_float(self.dtype) else self
  def floor(self) -> Tensor:
    """Rounded toward -inf (ints unchanged)."""
    if not dtypes.is_float(self.dtype): return self
    t = self.trunc()
    return (t > self).where(t - 1, t)
  def ceil(self) -> Tensor:
    """Rounded toward +inf (ints unchanged)."""
    if not dtypes.is_float(self.dtype): return self
    t = self.trunc()
    return (t < self).where(t + 1, t)
  def round(self, decimals: int = 0) -> Tensor:
    """Rounded to the nearest integer, halves to even (or to `decimals` places), as PyTorch."""
    if not dtypes.is_float(self.dtype): return self
    if decimals: return (self * 10 ** decimals).round() / 10 ** decimals
    # half to even, as PyTorch does
    f = (self + 0.5).floor()
    half = (f - self).eq(0.5)
    odd = (f * 0.5).floor().ne(f * 0.5)
    return (half & odd).where(f - 1, f)
  def frac(self) -> Tensor:
    """x - trunc(x)."""
    return self - self.trunc()
  def lerp(self, end: Tensor, weight: Any) -> Tensor:
    """self + weight * (end - self)."""
    return self + (end - self) * weight
  def isnan(self) -> Tensor:
    """True where NaN."""
    return self.ne(self)
  def isinf(self) -> Tensor:
    """True where +inf or -inf."""
    return self.abs().eq(math.inf) if dtypes.is_float(self.dtype) else self.zeros_like_uop().bool()
  def isfinite(self) -> Tensor:
    """True where neither NaN nor infinite."""
    return (self.isnan() | self.isinf()).logical_not()
  def nan_to_num(self, nan: float = 0.0) -> Tensor:
    """NaNs replaced by nan (default 0); unlike PyTorch, infinities are kept."""
    return self.isnan().where(nan, self)
  clamp = clip
  __eq__ = eq  # type: ignore[assignment]
  __ne__ = ne  # type: ignore[assignment]
  lt, gt = __lt__, __gt__
  __rand__, __ror__, __rxor__ = __and__, __or__, __xor__
  bitwise_and, bitwise_or, bitwise_xor = __and__, __or__, __xor__
