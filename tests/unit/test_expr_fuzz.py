"""Hypothesis: random typed expression trees (ALU ops and CASTs over several dtypes) compute in kernels, on both
renderers, exactly what the documented Python semantics (baregrad/ir/alu.py, via symbolic.evaluate) give, element by
element, on inputs that include special values. Derandomized, few examples: each compiles two kernels."""
from __future__ import annotations
import math
import numpy as np
from hypothesis import given, settings, strategies as st, HealthCheck
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import UOp, Ops
from baregrad.ir.symbolic import evaluate
from baregrad.codegen.astbuild import load, store, sink
from tests.helpers import run, special_values, random_values

DTS = [dtypes.bfloat16, dtypes.int16, dtypes.uint64, dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.int64, dtypes.uint32,
       dtypes.float16, dtypes.float32, dtypes.float64]
FUZZ = settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
N = 48

@st.composite
def expr(draw, dt, depth=0):
  if depth >= 3 or draw(st.integers(0, 5)) == 0:
    return UOp.variable(f"in_{dt.name}", 0, 0, dt)  # stands for a load of this dtype's input
  isf, isb = dtypes.is_float(dt), dt == dtypes.bool
  kind = draw(st.sampled_from(["bin", "bin", "cast", "where", "un"]))
  if kind == "cast":
    return draw(expr(draw(st.sampled_from(DTS)), depth + 1)).cast(dt)
  if kind == "where":
    return draw(expr(dtypes.bool, depth + 1)).where(draw(expr(dt, depth + 1)), draw(expr(dt, depth + 1)))
  if kind == "un":
    op = draw(st.sampled_from([Ops.NEG, Ops.SQRT, Ops.TRUNC, Ops.RECIP] if isf else [Ops.NEG]))
    return draw(expr(dt, depth + 1)).alu(op)
  if isb: ops = [Ops.AND, Ops.OR, Ops.XOR, Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPLT, Ops.CMPNE]
  elif isf: ops = [Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.CMPLT, Ops.CMPEQ]
  else: ops = [Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.AND, Ops.XOR, Ops.SHL, Ops.SHR, Ops.CMPLT, Ops.CMPNE]
  op = draw(st.sampled_from(ops))
  if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) and not isb:
    return draw(expr(dt, depth + 1)).alu(op, draw(expr(dt, depth + 1))).where(draw(expr(dt, depth + 1)), draw(expr(dt, depth + 1)))
  if op in (Ops.CMPLT, Ops.CMPNE) and isb:
    sd = draw(st.sampled_from(DTS))
    return draw(expr(sd, depth + 1)).alu(op, draw(expr(sd, depth + 1)))
  return draw(expr(dt, depth + 1)).alu(op, draw(expr(dt, depth + 1)))

def inputs():
  rng = np.random.default_rng(3)
  out = {}
  for dt in DTS:
    v = np.concatenate([special_values(dt), random_values(dt, N, rng)])
    out[dt] = np.resize(rng.permutation(v), N)
  return out

INPUTS = inputs()

def py(x):
  return bool(x) if isinstance(x, np.bool_) else int(x) if isinstance(x, np.integer) else float(x)

@FUZZ
@given(st.sampled_from(DTS).flatmap(lambda dt: expr(dt)))
def test_random_expression_matches_python_semantics(e):
  vs = sorted({u for u in e.toposort() if u.op is Ops.DEFINE_VAR}, key=lambda u: u.arg[0])
  if not vs: return
  dt = e.dtype
  bufs = {v: load(1 + i, v.dtype, (N,)) for i, v in enumerate(vs)}
  ast = sink(store(0, (N,), e.substitute(bufs)))
  ins = [(INPUTS[v.dtype], v.dtype) for v in vs]
  want = [evaluate(e, {v.arg[0]: py(INPUTS[v.dtype][i]) for v in vs}) for i in range(N)]
  for device in ("CPU", "CPU:C"):
    (got,) = run(ast, [(N, dt)], ins, device)
    for i in range(N):
      g, w = py(got[i]), want[i]
      ok = (isinstance(w, float) and math.isnan(w) and math.isnan(g)) or (g == w and (not isinstance(w, float) or math.copysign(1, g) == math.copysign(1, w)))
      assert ok, f"{device}: element {i}: kernel {g!r} vs semantics {w!r} for {e.render()} with inputs {[INPUTS[v.dtype][i] for v in vs]}"
