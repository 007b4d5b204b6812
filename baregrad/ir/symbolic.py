"""Symbolic simplification: constant folding, algebraic identities, linear-term canonical form for integers,
and folding of // and % using known value ranges (vmin/vmax)."""
from __future__ import annotations
import functools, math
from typing import Any
from baregrad.ir.dtype import DType, dtypes
from baregrad.ir.ops import UOp, Ops, GroupOp
from baregrad.ir.pattern import UPat, PatternMatcher, graph_rewrite
from baregrad.ir.alu import exec_alu, cast_value

def _isint(u: UOp) -> bool: return dtypes.is_int(u.dtype) and u.dtype.count == 1

# ---- linear form of integer expressions: sum(coeff * term) + const
def linear(u: UOp) -> tuple[dict[UOp, int], int]:
  if u.op is Ops.CONST: return {}, u.arg
  if u.op is Ops.ADD:
    (a, ka), (b, kb) = linear(u.src[0]), linear(u.src[1])
    out = dict(a)
    for t, c in b.items(): out[t] = out.get(t, 0) + c
    return {t: c for t, c in out.items() if c != 0}, ka + kb
  if u.op is Ops.SUB:
    (a, ka), (b, kb) = linear(u.src[0]), linear(u.src[1])
    out = dict(a)
    for t, c in b.items(): out[t] = out.get(t, 0) - c
    return {t: c for t, c in out.items() if c != 0}, ka - kb
  if u.op is Ops.NEG:
    a, ka = linear(u.src[0])
    return {t: -c for t, c in a.items()}, -ka
  if u.op is Ops.MUL and u.src[1].op is Ops.CONST:
    a, ka = linear(u.src[0])
    k = u.src[1].arg
    return ({t: c * k for t, c in a.items()} if k else {}), ka * k
  if u.op is Ops.MUL and u.src[0].op is Ops.CONST:
    return linear(u.src[1].alu(Ops.MUL, u.src[0]))
  return {u: 1}, 0

@functools.lru_cache(maxsize=None)
def _sortkey(u: UOp) -> tuple:
  # deterministic order of terms: ranges/vars by their names, then structure
  if u.op is Ops.RANGE: return (0, u.arg[0], ())
  if u.op is Ops.SPECIAL: return (1, u.arg[0], ())
  if u.op is Ops.DEFINE_VAR: return (2, u.arg[0], ())
  return (3 + u.op.value, repr(u.arg), tuple(_sortkey(s) for s in u.src))

def build_linear(terms: dict[UOp, int], const: int, dtype: DType) -> UOp:
  out: UOp | None = None
  for t in sorted(terms, key=_sortkey):
    c = terms[t]
    x = t if c == 1 else UOp(Ops.MUL, dtype, (t, UOp.const(dtype, c)))
    out = x if out is None else UOp(Ops.ADD, dtype, (out, x))
  if out is None: return UOp.const(dtype, const)
  return out if const == 0 else UOp(Ops.ADD, dtype, (out, UOp.const(dtype, const)))

def _canon_linear(x: UOp) -> UOp | None:
  if not _isint(x): return None
  terms, k = linear(x)
  new = build_linear(terms, k, x.dtype)
  return new if new is not x else None

def _divmod_fold(x: UOp, c: int, want_div: bool) -> UOp | None:
  """x // c or x % c for a positive constant c and x >= 0 (truncation == floor there)."""
  if c <= 0 or x.vmin < 0 or not _isint(x): return None
  dt = x.dtype
  if x.vmax < c: return UOp.const(dt, 0) if want_div else x
  terms, k = linear(x)
  # common factor of every coefficient, the constant and c: divide it out
  g = math.gcd(c, k, *terms.values())
  if g > 1 and all(t.vmin >= 0 for t in terms):
    xs = build_linear({t: v // g for t, v in terms.items()}, k // g, dt)
    return xs.alu(Ops.IDIV, c // g) if want_div else xs.alu(Ops.MOD, c // g) * g
  q = {t: v // c for t, v in terms.items() if v % c == 0}
  r = {t: v for t, v in terms.items() if v % c != 0}
  qk, rk = divmod(k, c)
  rem = build_linear(r, rk, dt)
  lo, hi = rem.vmin, rem.vmax
  if lo // c == hi // c:  # the remainder stays in one period: exact fold
    m = lo // c
    return build_linear(q, qk + m, dt) if want_div else build_linear(r, rk - m * c, dt)  # type: ignore[arg-type]  # (int bounds)
  if all(t.vmin >= 0 for t in terms):
    # every coefficient taken modulo c (x = sum((v//c)*c*t) + reduced, all parts >= 0): when the reduced part stays below
    # c it is x % c, e.g. (ox + 14*kx) % 13 == ox + kx for ox + kx < 13 (a convolution's window read through a reshape)
    red = build_linear({t: v % c for t, v in terms.items() if v % c}, k % c, dt)
    if red.vmin >= 0 and red.vmax < c:
      return build_linear({t: v // c for t, v in terms.items() if v // c}, k // c, dt) if want_div else red
  if (f := _block_fold(terms, k, c, want_div, dt)) is not None: return f
  if q and lo >= 0:  # pull the multiples of c out
    return build_linear(q, qk, dt) + rem.alu(Ops.IDIV, c) if want_div else rem.alu(Ops.MOD, c)
  return None

def _block_fold(terms: dict[UOp, int], k: int, c: int, want_div: bool, dt: DType) -> UOp | None:
  """x = g*a + s with g dividing c, a >= 0 and 0 <= s < g (the terms whose coefficients are multiples of g, and the
  rest): x // c = a // (c/g) and x % c = g * (a % (c/g)) + s. An index split into aligned blocks and the offset in a
  block, e.g. (32*q + j) // 64 == q // 2 for j < 32 (a tile of an im2col operand's reduction over (kh, kw, c))."""
  for g in sorted({math.gcd(c, v) for v in terms.values()} - {1, c}, reverse=True):
    big = {t: v // g for t, v in terms.items() if v % g == 0}
    small = build_linear({t: v for t, v in terms.items() if v % g}, k % g, dt)
    a = build_linear(big, k // g, dt)
    if small.vmin < 0 or small.vmax >= g or a.vmin < 0 or not big: continue
    return a.alu(Ops.IDIV, c // g) if want_div else a.alu(Ops.MOD, c // g) * g + small
  return None

def _fold_const(op: Ops, x: UOp) -> UOp | None:
  if not all(s.op is Ops.CONST for s in x.src): return None
  try: return UOp.const(x.dtype, exec_alu(op, x.dtype, tuple(s.arg for s in x.src)))
  except (OverflowError, ValueError, ZeroDivisionError): return None

def _fold_alu(x: UOp) -> UOp | None:
  if x.dtype.count > 1 or any(s.dtype.count > 1 for s in x.src): return None
  if (r := _fold_const(x.op, x)) is not None: return r
  # an integer/bool expression whose range is one value is that value (ALU ops have no side effects)
  if (dtypes.is_int(x.dtype) or dtypes.is_bool(x.dtype)) and x.vmin == x.vmax: return UOp.const(x.dtype, x.vmin)
  return None

def _cmplt_fold(x: UOp, c: UOp) -> UOp | None:
  # (sum g*t + k) < c  <=>  sum t' < ceil((c-k)/g)  when g divides every coefficient (g > 0)
  if not _isint(x) or x.op not in (Ops.ADD, Ops.MUL): return None
  terms, k = linear(x)
  if not terms: return None
  g = math.gcd(*terms.values())
  if g <= 1 and k == 0: return None
  if any(v < 0 for v in terms.values()): return None
  lhs = build_linear({t: v // g for t, v in terms.items()}, 0, x.dtype)
  bound = -((k - c.arg) // g)  # ceil((c-k)/g)
  # moving k across the comparison is only valid if neither side wraps around in the dtype
  lo = sum(min(v * t.vmin, v * t.vmax) for t, v in terms.items())
  hi = sum(max(v * t.vmin, v * t.vmax) for t, v in terms.items())
  if not dtypes.min(x.dtype) <= min(lo, lo + k, bound) <= max(hi, hi + k, bound) <= dtypes.max(x.dtype): return None
  if lhs is x and bound == c.arg: return None
  return lhs.alu(Ops.CMPLT, bound)

def _canon_commutative(x: UOp) -> UOp | None:
  # constants go right so patterns need one form
  if x.op in GroupOp.Commutative and x.src[0].op is Ops.CONST and x.src[1].op is not Ops.CONST:
    return x.replace(src=(x.src[1], x.src[0]))
  return None

symbolic_simple = PatternMatcher([
  (UPat(GroupOp.ALU, name="x"), _fold_alu),
  (UPat(GroupOp.Commutative, name="x"), _canon_commutative),
  # identities valid for every dtype
  (UPat.var("x") * 1, lambda x: x),
  (UPat(Ops.FDIV, src=(UPat.var("x"), UPat.const(None, 1.0))), lambda x: x),
  (UPat.var("x") // 1, lambda x: x),
  (UPat(Ops.WHERE, src=(UPat.var(), UPat.var("a"), UPat.var("a"))), lambda a: a),
  (UPat(Ops.WHERE, src=(UPat(Ops.CONST, name="c"), UPat.var("a"), UPat.var("b"))), lambda c, a, b: a if c.arg else b),
  (UPat(Ops.CAST, name="x", src=(UPat(Ops.CONST, name="c"),)),
   lambda x, c: UOp.const(x.dtype, cast_value(c.arg, x.dtype)) if x.dtype.count == 1 else None),
  (UPat(Ops.CAST, name="x", src=(UPat.var("y"),)), lambda x, y: y if x.dtype == y.dtype else None),
  # bools
  (UPat(Ops.AND, dtype=dtypes.bool, src=[UPat.var("x"), UPat.const(dtypes.bool, True)]), lambda x: x),
  (UPat(Ops.AND, dtype=dtypes.bool, src=[UPat.var(), UPat.const(dtypes.bool, False)], name="z"), lambda z: z.const_like(False)),
  (UPat(Ops.OR, dtype=dtypes.bool, src=[UPat.var("x"), UPat.const(dtypes.bool, False)]), lambda x: x),
  (UPat(Ops.AND, src=(UPat.var("x"), UPat.var("x"))), lambda x: x),
  (UPat(Ops.OR, src=(UPat.var("x"), UPat.var("x"))), lambda x: x),
  (UPat(Ops.CMPNE, dtype=dtypes.bool, src=(UPat(Ops.CMPNE, src=(UPat.var("x"), UPat.const(dtypes.bool, True))), UPat.const(dtypes.bool, True))), lambda x: x),
])

def _int(name: str) -> UPat: return UPat(dtype=tuple(d for d in (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8,
                                                                   dtypes.uint16, dtypes.uint32, dtypes.uint64)), name=name)

symbolic = symbolic_simple + PatternMatcher([
  # integer-only identities (x*0 is not 0 for floats: inf, nan)
  (_int("x") * 0, lambda x: x.const_like(0)),
  (_int("x") + 0, lambda x: x),
  (UPat(Ops.SUB, src=(_int("x"), UPat.const(None, 0))), lambda x: x),
  (UPat(Ops.SUB, src=(_int("x"), UPat.var("x"))), lambda x: x.const_like(0)),
  (UPat(Ops.MOD, src=(_int("x"), UPat.const(None, 1))), lambda x: x.const_like(0)),
  (UPat(Ops.CMPLT, src=(_int("x"), UPat.var("x"))), lambda x: UOp.const(dtypes.bool.vec(x.dtype.count), False)),
  (UPat(Ops.CMPNE, src=(_int("x"), UPat.var("x"))), lambda x: UOp.const(dtypes.bool.vec(x.dtype.count), False)),
  (UPat(Ops.MAX, src=(UPat.var("x"), UPat.var("y"))), lambda x, y: x if _isint(x) and x.vmin >= y.vmax else y if _isint(x) and y.vmin >= x.vmax else None),
  # canonical linear form of integer sums (merges like terms, distributes constant factors)
  (UPat((Ops.ADD, Ops.SUB, Ops.NEG), name="x"), _canon_linear),
  (UPat(Ops.MUL, name="x", src=(UPat((Ops.ADD, Ops.SUB, Ops.MUL)), UPat(Ops.CONST))), _canon_linear),
  # division and modulo by a positive constant
  (UPat(Ops.IDIV, src=(_int("x"), UPat.cvar("c"))), lambda x, c: _divmod_fold(x, c.arg, True)),
  (UPat(Ops.MOD, src=(_int("x"), UPat.cvar("c"))), lambda x, c: _divmod_fold(x, c.arg, False)),
  (UPat(Ops.IDIV, src=(UPat(Ops.IDIV, src=(_int("x"), UPat.cvar("a"))), UPat.cvar("b"))),
   lambda x, a, b: x.alu(Ops.IDIV, a.arg * b.arg) if x.vmin >= 0 and a.arg > 0 and b.arg > 0 else None),
  (UPat(Ops.MOD, src=(UPat(Ops.MOD, src=(_int("x"), UPat.cvar("a"))), UPat.cvar("b"))),
   lambda x, a, b: x.alu(Ops.MOD, b.arg) if x.vmin >= 0 and b.arg > 0 and a.arg % b.arg == 0 else None),
  (UPat(Ops.CMPLT, src=(_int("x"), UPat.cvar("c"))), _cmplt_fold),
])

def simplify(u: UOp) -> UOp: return graph_rewrite(u, symbolic)

def evaluate(u: UOp, env: dict[str, Any]) -> Any:
  """Evaluate a scalar expression with DEFINE_VAR/RANGE values from env (keyed by var name or 'r<axis>')."""
  vals: dict[UOp, Any] = {}
  for n in u.toposort():
    if n.op is Ops.CONST: vals[n] = n.arg
    elif n.op is Ops.DEFINE_VAR: vals[n] = env[n.arg[0]]
    elif n.op is Ops.RANGE: vals[n] = env[f"r{n.arg[0]}"]
    elif n.op is Ops.CAST: vals[n] = cast_value(vals[n.src[0]], n.dtype)
    elif n.op in GroupOp.ALU: vals[n] = exec_alu(n.op, n.dtype, tuple(vals[s] for s in n.src))
    else: raise ValueError(f"evaluate: cannot evaluate {n.op}")
  return vals[u]
