"""The symbolic simplifier keeps values (hypothesis), is idempotent, and its bounds (vmin/vmax) hold; pattern matcher
unit tests (captures, commutative matching, fixed point rewriting) and hash-consing of UOps."""
from __future__ import annotations
import math
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import UOp, Ops
from baregrad.ir.symbolic import evaluate
from baregrad.ir.pattern import UPat, PatternMatcher, graph_rewrite

VARS = {"a": (0, 9), "b": (-5, 12), "c": (3, 40), "d": (0, 1)}
BIG = [2 ** 20, -2 ** 24, 2 ** 31 - 1, -2 ** 31, 65536, 1000003, 2 ** 30]
HYP = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

def var(n: str) -> UOp: return UOp.variable(n, *VARS[n])

@st.composite
def int_expr(draw, depth: int = 0) -> UOp:
  if depth >= 4 or draw(st.integers(0, 9)) < 2 + depth:
    if draw(st.booleans()): return var(draw(st.sampled_from(sorted(VARS))))
    # mostly small constants; sometimes ones near the int32 limits, so sums and products wrap
    return UOp.const(dtypes.int32, draw(st.one_of(st.integers(-8, 12), st.sampled_from(BIG))))
  kind = draw(st.sampled_from(["add", "sub", "mulc", "mulv", "div", "mod", "max", "where", "neg"]))
  x = draw(int_expr(depth + 1))
  if kind == "add": return x + draw(int_expr(depth + 1))
  if kind == "sub": return x - draw(int_expr(depth + 1))
  if kind == "mulc": return x * draw(st.one_of(st.integers(-4, 6), st.sampled_from(BIG)))
  if kind == "mulv": return x * var(draw(st.sampled_from(sorted(VARS))))
  if kind == "div": return x // draw(st.integers(1, 9))
  if kind == "mod": return x % draw(st.integers(1, 9))
  if kind == "max": return x.maximum(draw(int_expr(depth + 1)))
  if kind == "neg": return -x
  cond = x < draw(int_expr(depth + 1))
  return cond.where(draw(int_expr(depth + 1)), draw(int_expr(depth + 1)))

envs = st.fixed_dictionaries({n: st.integers(lo, hi) for n, (lo, hi) in VARS.items()})

def corners():
  import itertools
  return [dict(zip(VARS, vs)) for vs in itertools.product(*[(lo, hi) for lo, hi in VARS.values()])]

@HYP
@given(int_expr(), st.lists(envs, min_size=4, max_size=4))
def test_simplify_keeps_the_value_for_every_env_in_bounds(e, es):
  s = e.simplify()
  for env in es + corners()[:6]:
    want, got = evaluate(e, env), evaluate(s, env)
    assert got == want, f"{e.render()} = {want} but simplified {s.render()} = {got} at {env}"

@HYP
@given(int_expr())
def test_simplify_is_idempotent(e):
  s = e.simplify()
  assert s.simplify() is s, f"{e.render()} -> {s.render()} -> {s.simplify().render()}"

@HYP
@given(int_expr(), st.lists(envs, min_size=4, max_size=4))
def test_bounds_contain_every_value(e, es):
  s = e.simplify()
  for u in (e, s):
    for env in es + corners()[:4]:
      val = evaluate(u, env)
      assert u.vmin <= val <= u.vmax, f"{u.render()} = {val} at {env} outside [{u.vmin}, {u.vmax}]"

@HYP
@given(int_expr(), envs)
def test_bounds_of_every_subexpression(e, env):
  for u in e.toposort():
    if u.op in (Ops.CONST, Ops.DEFINE_VAR) or not u.src: continue
    val = evaluate(u, env)
    assert u.vmin <= val <= u.vmax, f"{u.render()} = {val} at {env} outside [{u.vmin}, {u.vmax}]"

@HYP
@given(st.integers(-30, 30), st.integers(1, 9), st.integers(-30, 30))
def test_div_mod_of_linear_terms_with_offsets(k, c, off):
  # (a*k + off) // c and % c for every a in bounds: the folding rules for linear forms
  a = var("a")
  e1, e2 = (a * k + off) // c, (a * k + off) % c
  s1, s2 = e1.simplify(), e2.simplify()
  for av in range(VARS["a"][0], VARS["a"][1] + 1):
    env = {"a": av}
    assert evaluate(s1, env) == evaluate(e1, env), f"{e1.render()} -> {s1.render()} at a={av}"
    assert evaluate(s2, env) == evaluate(e2, env), f"{e2.render()} -> {s2.render()} at a={av}"

def test_comparison_fold_respects_int32_wraparound():
  # regression: (a + INT_MAX) < -8 was folded to a < (-8 - INT_MAX), a bound that wraps: it became True
  a = var("a")
  for e in ((a + (2 ** 31 - 1)) < -8, (a + 10) < -(2 ** 31) + 1, (a * 2 ** 30 + 7) < 0, (a - 2 ** 31) < 5):
    s = e.simplify()
    for av in range(0, 10):
      assert evaluate(s, {"a": av}) == evaluate(e, {"a": av}), f"{e.render()} -> {s.render()} at a={av}"

def test_simplify_folds_known_identities():
  a, c = var("a"), var("c")
  assert (a + 0).simplify() is a
  assert (a * 1).simplify() is a
  assert (a - a).simplify().arg == 0
  assert (a * 4 + 8) // 4 is not None and ((a * 4 + 8) // 4).simplify().render() == "(a+2)"
  assert ((a * 4 + 3) % 4).simplify().arg == 3
  assert (a // 10).simplify().arg == 0        # a in [0, 9]
  assert (a % 10).simplify() is a
  assert (c < 3).simplify().arg is False       # c in [3, 40]
  assert (c.maximum(a)).simplify() is not None

def test_float_expressions_are_not_folded_unsafely():
  x = UOp.variable("x", 0, 1).cast(dtypes.float32)
  z = x * 0.0  # not 0 for inf/nan
  assert z.simplify().op is Ops.MUL
  assert (x + 0.0).simplify() is not x or True  # x + 0.0 changes -0.0: allowed only if it keeps -0.0 + 0.0 = +0.0
  neg0 = UOp.const(dtypes.float32, -0.0)
  folded = (neg0 + 0.0).simplify()
  assert folded.op is Ops.CONST and math.copysign(1, folded.arg) == 1.0, "-0.0 + 0.0 must fold to +0.0"
  folded = (neg0 * 1.0).simplify()
  assert folded.op is Ops.CONST and math.copysign(1, folded.arg) == -1.0, "-0.0 * 1.0 must fold to -0.0"

def test_constant_folding_of_int_edge_cases_follows_documented_semantics():
  i32 = dtypes.int32
  c = lambda v: UOp.const(i32, v)
  assert (c(-7) // c(2)).simplify().arg == -3
  assert (c(-7) % c(2)).simplify().arg == -1
  assert (c(5) // c(0)).simplify().arg == 0
  assert (c(5) % c(0)).simplify().arg == 0
  assert (c(-2 ** 31) // c(-1)).simplify().arg == -2 ** 31
  assert (c(2 ** 31 - 1) + c(1)).simplify().arg == -2 ** 31
  assert (c(1) << c(33)).simplify().arg == 2
  assert (c(-8) >> c(1)).simplify().arg == -4

# ---------------------------------------------------------------- pattern matcher
def test_named_captures_bind_nodes():
  a, b = var("a"), var("b")
  pm = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("y"))), lambda x, y: x * y)])
  out = pm.rewrite(a + b)
  assert out is a * b

def test_same_name_twice_must_bind_the_same_node():
  a, b = var("a"), var("b")
  pm = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("x"))), lambda x: x * 2)])
  assert pm.rewrite(a + a) is a * 2
  assert pm.rewrite(a + b) is None

def test_commutative_matching_with_src_list():
  a = var("a")
  one = UOp.const(dtypes.int32, 1)
  pm = PatternMatcher([(UPat(Ops.ADD, src=[UPat.var("x"), UPat.cvar("c")]), lambda x, c: x - c)])
  assert pm.rewrite(a + 1) is a - 1
  assert pm.rewrite(UOp(Ops.ADD, dtypes.int32, (one, a))) is a - one
  pm_t = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c"))), lambda x, c: x - c)])
  assert pm_t.rewrite(UOp(Ops.ADD, dtypes.int32, (one, a))) is None, "a tuple src is ordered"

def test_operator_upats_are_commutative_for_commutative_ops():
  a = var("a")
  pm = PatternMatcher([(UPat.var("x") * 2, lambda x: x + x)])
  assert pm.rewrite(UOp(Ops.MUL, dtypes.int32, (UOp.const(dtypes.int32, 2), a))) is a + a

def test_dtype_and_arg_filters():
  a = var("a")
  f = a.cast(dtypes.float32)
  pm = PatternMatcher([(UPat(Ops.CAST, dtype=dtypes.float32, name="c"), lambda c: c.src[0]),
                       (UPat(Ops.CONST, arg=7, name="k"), lambda k: k.const_like(8))])
  assert pm.rewrite(f) is a
  assert pm.rewrite(a.cast(dtypes.float64)) is None
  assert pm.rewrite(UOp.const(dtypes.int32, 7)) is UOp.const(dtypes.int32, 8)
  assert pm.rewrite(UOp.const(dtypes.int32, 6)) is None

def test_rule_returning_none_declines_and_next_rule_is_tried():
  a = var("a")
  pm = PatternMatcher([(UPat(Ops.ADD, name="x"), lambda x: None), (UPat(Ops.ADD, name="x"), lambda x: x.src[0])])
  assert pm.rewrite(a + 3) is a

def test_graph_rewrite_reaches_a_fixed_point():
  # x + 1 -> x, applied until no rule matches: ((a+1)+1)+1 -> a, and nested inside other nodes
  a = var("a")
  pm = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.const(None, 1))), lambda x: x)])
  e = ((a + 1) + 1) + 1
  assert graph_rewrite(e, pm) is a
  assert graph_rewrite((e * 3).maximum(e), pm) is (a * 3).maximum(a)
  # a rewrite that produces a new match above it: MUL(x, 2) -> ADD(x, x) then ADD(x, x) -> x << 1
  pm2 = PatternMatcher([(UPat(Ops.MUL, src=(UPat.var("x"), UPat.const(None, 2))), lambda x: x + x),
                        (UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("x"))), lambda x: x << 1)])
  assert graph_rewrite(a * 2 + 5, pm2) is (a << 1) + 5

def test_graph_rewrite_raises_on_a_rewrite_cycle():
  from baregrad.ir.pattern import RewriteError
  a, b = var("a"), var("b")
  pm = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("y"))), lambda x, y: UOp(Ops.ADD, x.dtype, (y, x)))])
  with pytest.raises(RewriteError): graph_rewrite(a + b, pm, max_steps=1000)

def test_ctx_is_passed_to_rules_that_ask_for_it():
  a = var("a")
  seen = []
  pm = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="v"), lambda ctx, v: seen.append(ctx) or None)])
  graph_rewrite(a + 1, pm, ctx="hello")
  assert seen == ["hello"]

# ---------------------------------------------------------------- hash-consing
def test_hash_consing_returns_the_same_object():
  a = var("a")
  assert UOp(Ops.ADD, dtypes.int32, (a, UOp.const(dtypes.int32, 1))) is a + 1
  assert UOp.const(dtypes.float32, 1.5) is UOp.const(dtypes.float32, 1.5)
  assert UOp.variable("a", 0, 9) is a
  assert UOp.variable("a", 0, 10) is not a
  assert UOp.const(dtypes.int32, 1) is not UOp.const(dtypes.int64, 1)

def test_negative_zero_and_zero_consts_are_different_nodes():
  p, n = UOp.const(dtypes.float32, 0.0), UOp.const(dtypes.float32, -0.0)
  assert p is not n
  assert math.copysign(1, n.arg) == -1.0
  assert UOp.const(dtypes.float32, -0.0) is n

def test_nan_consts_are_one_node():
  assert UOp.const(dtypes.float32, float("nan")) is UOp.const(dtypes.float32, float("nan"))

def test_int_and_bool_and_float_consts_with_equal_values_differ():
  assert UOp.const(dtypes.bool, True) is not UOp.const(dtypes.int32, 1)
  assert UOp.const(dtypes.float32, 1.0) is not UOp.const(dtypes.int32, 1)

def test_the_node_table_lets_go_of_dead_nodes():
  """A BUFFER's entry leaves with its node (its key holds the BufRef and so device memory); the others are swept
  once the table has doubled since the last sweep, and a node built again after its death is a new, live one."""
  import gc, weakref
  from baregrad.ir import ops
  from baregrad.engine.graph import BufRef, buffer_uop
  ref = BufRef("CPU", 4, dtypes.float32)
  b = buffer_uop(ref)
  key = next(k for k, r in ops._ucache.items() if r() is b)
  wref = weakref.ref(ref)
  del b, ref
  assert key not in ops._ucache
  del key
  gc.collect()
  assert wref() is None
  c = UOp.const(dtypes.int32, 123456789)
  del c
  assert UOp.const(dtypes.int32, 123456789).arg == 123456789   # built again over the dead entry
  d = UOp.const(dtypes.int32, 987654321)
  dkey = next(k for k, r in ops._ucache.items() if r() is d)
  del d
  assert dkey in ops._ucache   # (no callback: still there, dead)
  # building new nodes sweeps the table once it has doubled since the last sweep (the new nodes kept alive: they stay)
  keep, cap = [], 4 * ops._swept[0] + 16
  while dkey in ops._ucache and len(keep) < cap: keep.append(UOp.const(dtypes.int64, 10 ** 12 + len(keep)))
  assert dkey not in ops._ucache and len(ops._ucache) <= 2 * ops._swept[0]
  assert keep[0] is UOp.const(dtypes.int64, 10 ** 12)

def test_uops_are_immutable():
  a = var("a")
  with pytest.raises(AttributeError): a.arg = ("b", 0, 1)  # type: ignore[misc]

def test_bool_neg_bounds_and_folding():
  # regression: NEG of a bool had bounds (-1, 0), so -(x < -x) folded to True; it is x
  x = UOp.variable("x", False, True, dtypes.bool)
  e = -(x < -x)
  s = e.simplify()
  for xv in (False, True):
    assert evaluate(s, {"x": xv}) == evaluate(e, {"x": xv}) == xv
  n = -x
  assert (n.vmin, n.vmax) == (False, True)

def test_ops_is_an_enumeration_of_singletons():
  """Ops is a plain class of Op singletons (not an Enum, whose metaclass __getattr__ slows every Ops.X read): members
  iterate in definition order, are found by name, pickle and copy to themselves, and hash by identity."""
  import copy, pickle
  from baregrad.ir.ops import Op
  members = list(Ops)
  assert len(members) == len(Ops) == len({id(m) for m in members}) and members[0] is Ops.SINK
  assert [m.value for m in members] == sorted(m.value for m in members)
  assert all(Ops[m.name] is m and getattr(Ops, m.name) is m and repr(m) == f"Ops.{m.name}" for m in members)
  assert isinstance(Ops.ADD, Ops) and isinstance(Ops.ADD, Op) and not isinstance("ADD", Ops)
  with pytest.raises(KeyError): Ops["NOT_AN_OP"]
  with pytest.raises(KeyError): Ops["_members"]
  assert all(pickle.loads(pickle.dumps(m)) is m and copy.deepcopy(m) is m for m in members)
  u = UOp(Ops.ADD, dtypes.int32, (UOp.const(dtypes.int32, 1), UOp.const(dtypes.int32, 2)))
  assert pickle.loads(pickle.dumps(u)) is u   # (a UOp pickles through its op: hash-consed back to the live node)
  assert {Ops.ADD: 1}[Ops.ADD] == 1 and Ops.ADD != Ops.MUL and hash(Ops.ADD) == object.__hash__(Ops.ADD)

@settings(max_examples=200, deadline=None)
@given(st.sampled_from([2, 4, 8, 16, 32]), st.integers(1, 4), st.integers(1, 40), st.integers(0, 3))
def test_block_division_folds_exactly(g, m, n, k):
  # (g*q + j + k) // (g*m) and % (g*m) with 0 <= j + k < g: the block and the offset in it (ir/symbolic _block_fold),
  # checked at every point against Python's arithmetic; it must fold to an expression without j in the division
  jmax = max(1, g - k)
  q, j = UOp.range(n, 0), UOp.range(jmax, 1)
  x = q * g + j + k
  for e, ref in ((x // (g * m), lambda a, b: (g * a + b + k) // (g * m)), (x % (g * m), lambda a, b: (g * a + b + k) % (g * m))):
    s = e.simplify()
    for a in range(n):
      for b in range(jmax): assert evaluate(s, {"r0": a, "r1": b}) == ref(a, b), (g, m, n, k, a, b)
  if m > 1 and n >= g * m: assert j not in (x // (g * m)).simplify().toposort(), (x // (g * m)).simplify()
