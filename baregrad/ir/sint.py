"""Symbolic sizes: a shape entry, a view's offset or a slice bound may be an integer expression over variables
(`sint`: an int or a UOp) instead of an int, so one kernel serves every value of the variable (a decode step at
every position of a KV cache).

In the tensor graph a variable carries its value for the call: BIND(DEFINE_VAR(name, lo, hi), value) (UOp.bind); two
calls with different values are different graphs (value semantics hold), and the scheduler replaces each BIND by its
variable in the kernel it builds and hands the value to the launch (unbind_st), so the compiled kernel is the same.

Memory is laid out for the largest value: a buffer of a symbolic shape holds the shape at every variable's maximum,
and a value of the symbolic shape is the leading corner of it (View.contiguous): strides stay integers, and only loop
bounds, offsets and sizes are symbolic."""
from __future__ import annotations
from typing import Union
from baregrad.ir.ops import UOp, Ops

sint = Union[int, UOp]

def is_sym(x: object) -> bool: return isinstance(x, UOp)

def norm(x: sint) -> sint:
  """x simplified; an expression that folds to a constant (sp + 1 - sp) becomes its int."""
  if not isinstance(x, UOp): return x
  s = x.simplify()
  return s.arg if s.op is Ops.CONST else s

def smax(x: sint) -> int:
  """The largest value x can take (its variables at their bounds): the size memory is allocated for."""
  return x if isinstance(x, int) else int(x.vmax)

def smin(x: sint) -> int: return x if isinstance(x, int) else int(x.vmin)

def max_shape(shape: tuple[sint, ...]) -> tuple[int, ...]: return tuple(smax(s) for s in shape)

def has_sym(shape: tuple) -> bool: return any(isinstance(s, UOp) for s in shape)

def sym_eq(a: sint, b: sint) -> bool:
  """a == b for every value of the variables (ints compared; expressions by their simplified difference)."""
  if a is b: return True
  if isinstance(a, int) and isinstance(b, int): return a == b
  d = norm(a - b) if isinstance(a, UOp) else norm(b - a)   # (type: ignore-free: one of them is a UOp)
  return isinstance(d, int) and d == 0

def sym_le(a: sint, b: sint) -> bool:
  """a <= b for every value of the variables (provably; False when it cannot be shown)."""
  if isinstance(a, int) and isinstance(b, int): return a <= b
  if sym_eq(a, b): return True
  d = norm(b - a) if isinstance(b, UOp) else norm(-(a - b))
  return (d >= 0) if isinstance(d, int) else d.vmin >= 0

def sym_prod_eq(a: tuple[sint, ...], b: tuple[sint, ...]) -> bool:
  """The two shapes hold the same number of elements for every value of the variables, laid out alike: their
  symbolic entries are the same, in the same order, and the int entries between them multiply to the same products
  (so the largest-value layouts of the two shapes agree element for element)."""
  def segments(shape: tuple[sint, ...]) -> tuple[list[int], list[UOp]]:
    prods, syms, acc = [], [], 1
    for s in shape:
      if isinstance(s, UOp): prods.append(acc); syms.append(s); acc = 1
      else: acc *= s
    prods.append(acc)
    return prods, syms
  (pa, sa), (pb, sb) = segments(a), segments(b)
  if 0 in pa or 0 in pb: return 0 in pa and 0 in pb
  return len(sa) == len(sb) and all(sym_eq(x, y) for x, y in zip(sa, sb)) and pa == pb

def binds_of(x: sint) -> dict[UOp, int]:
  """The bound variables in x: {variable: value}."""
  if not isinstance(x, UOp): return {}
  return {u.src[0]: u.src[1].arg for u in x.toposort() if u.op is Ops.BIND}

def unbind(x: sint, vals: dict[UOp, int]) -> sint:
  """x with every BIND replaced by its variable; the values go into vals (a variable bound to two values in one
  kernel is an error)."""
  if not isinstance(x, UOp): return x
  found = binds_of(x)
  if not found: return x
  for v, val in found.items():
    if vals.setdefault(v, val) != val:
      raise ValueError(f"variable {v.arg[0]} is bound to both {vals[v]} and {val} in one kernel")
  return x.substitute({UOp(Ops.BIND, v.dtype, (v, UOp.const(v.dtype, val))): v for v, val in found.items()})

def unbind_view(v: object, vals: dict[UOp, int]) -> object:
  """A View (ir/view.py) with its BINDs replaced by their variables."""
  from baregrad.ir.view import View
  assert isinstance(v, View)
  if not (has_sym(v.shape) or isinstance(v.offset, UOp) or (v.mask and any(isinstance(m, UOp) for mm in v.mask for m in mm))): return v
  mask = tuple((unbind(lo, vals), unbind(hi, vals)) for lo, hi in v.mask) if v.mask else None
  return View(tuple(unbind(s, vals) for s in v.shape), v.strides, unbind(v.offset, vals), mask)

def st_vars(st: object) -> set[UOp]:
  """The variables (DEFINE_VARs) a ShapeTracker's views name."""
  out: set[UOp] = set()
  for v in st.views:  # type: ignore[attr-defined]
    for x in (*v.shape, v.offset, *(m for mm in (v.mask or ()) for m in mm)):
      if isinstance(x, UOp): out |= {u for u in x.toposort() if u.op is Ops.DEFINE_VAR}
  return out

_unbound: dict[UOp, tuple[UOp, dict[str, int]]] = {}

def unbind_ast(ast: UOp) -> tuple[UOp, dict[str, int]]:
  """A kernel AST with every bound variable in its views replaced by the variable, and the values by variable name:
  the same kernel (compiled once) for every value, the values passed at launch."""
  if (hit := _unbound.get(ast)) is not None: return hit
  from baregrad.ir.view import ShapeTracker
  vals: dict[UOp, int] = {}
  mapping: dict[UOp, UOp] = {}
  for u in ast.toposort():
    if u.op is Ops.VIEW and isinstance(u.arg, ShapeTracker):
      st = ShapeTracker(tuple(unbind_view(v, vals) for v in u.arg.views))  # type: ignore[misc]
      if st != u.arg: mapping[u] = UOp(Ops.VIEW, u.dtype, u.src, st)
    elif u.op is Ops.BIND: mapping[u] = unbind(u, vals)  # type: ignore[assignment]
  out = (ast.substitute(mapping) if mapping else ast, {v.arg[0]: val for v, val in vals.items()})
  if len(_unbound) > 4096: _unbound.clear()
  _unbound[ast] = out
  return out

def Variable(name: str, lo: int, hi: int) -> UOp:
  """A symbolic size: `Variable("start_pos", 0, 1023)`, bound per call with `.bind(n)`; the bound variable stands in
  shapes, slices and views (x[:, :pos + 1], cache[pos:pos + 1] = k), and the kernels built from it compile once for
  the whole range (the value is a kernel argument), and a jitted function taking it is captured once."""
  if not (isinstance(name, str) and name.isidentifier()): raise ValueError(f"Variable: the name must be an identifier, got {name!r}")
  if not all(isinstance(x, int) and not isinstance(x, bool) for x in (lo, hi)) or not 0 <= lo <= hi < 2 ** 31:
    raise ValueError(f"Variable {name}: the range must be ints 0 <= lo <= hi < 2^31, got [{lo!r}, {hi!r}]")
  return UOp.variable(name, lo, hi)

def bound_value(x: sint) -> int:
  """x at this call's values of its bound variables (an int)."""
  if not isinstance(x, UOp): return x
  v = x.substitute({b: b.src[1] for b in x.toposort() if b.op is Ops.BIND}).simplify()
  if v.op is not Ops.CONST: raise ValueError(f"{x} has unbound variables: no value")
  return v.arg

def bound_shape(shape: tuple[sint, ...]) -> tuple[int, ...]: return tuple(bound_value(s) for s in shape)

def ints(shape: tuple[sint, ...]) -> tuple[int, ...]:
  """shape, which must hold no symbolic size (for code that handles concrete sizes only)."""
  if has_sym(shape): raise ValueError(f"shape {shape} has symbolic sizes where concrete ones are needed")
  return shape  # type: ignore[return-value]  # (checked: ints only)

def ints_or_none(shape: tuple[sint, ...]) -> tuple[int, ...] | None:
  """shape when it holds no symbolic size, else None (a transformation that handles concrete sizes only stands aside)."""
  return None if has_sym(shape) else shape  # type: ignore[return-value]  # (checked: ints only)
