"""Hypothesis: random view chains (permute/reshape/pad/shrink/flip/expand) with random reductions and random opts
lists compile and match NumPy on both renderers. Few examples per run (each one compiles kernels); derandomized."""
from __future__ import annotations
import numpy as np
from hypothesis import given, settings, strategies as st, HealthCheck
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import Ops
from baregrad.ir.view import ShapeTracker
from baregrad.codegen.astbuild import load, store, reduce, sink
from baregrad.codegen.kernel import Kernel, Opt, OptOps, OptError
from tests.helpers import run
from tests.unit.test_view import movements, apply_np

i32 = dtypes.int32
FUZZ = settings(max_examples=16, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))

@st.composite
def opts_for(draw, ast):
  """A random list of opts that applies to the kernel (tried on a scratch Kernel)."""
  k = Kernel(ast)
  out = []
  for _ in range(draw(st.integers(0, 4))):
    loops = k.loop_axes()
    if not loops: break
    op = draw(st.sampled_from([OptOps.UPCAST, OptOps.UNROLL, OptOps.SPLIT, OptOps.PARALLEL, OptOps.PADTO]))
    ax = draw(st.integers(0, len(loops) - 1))
    size = k.axes[loops[ax]].size
    # PADTO: an amount that does not divide (masked edges); the others: divisors
    amt = draw(st.sampled_from([3, 4, 8, 16] if op is OptOps.PADTO else [0] + [d for d in range(2, size + 1) if size % d == 0][:4]))
    try: k.apply_opt(Opt(op, ax, amt)); out.append(Opt(op, ax, amt))
    except OptError: pass
  return out

@st.composite
def cases(draw):
  shape, ops = draw(movements())
  stk = ShapeTracker.from_shape(shape)
  for kk, arg in ops: stk = getattr(stk, kk)(arg)
  nd = len(stk.shape)
  red = tuple(sorted(draw(st.sets(st.integers(0, nd - 1), max_size=nd))))
  rop = draw(st.sampled_from([Ops.ADD, Ops.MAX, Ops.MUL]))
  ld = load(1, i32, stk)
  val = reduce(ld * 3 + 1, rop, red) if red else ld * 3 + 1
  out_shape = tuple(1 if i in red else s for i, s in enumerate(stk.shape))
  ast = sink(store(0, out_shape, val))
  return shape, ops, red, rop, ast, out_shape, draw(opts_for(ast))

def reference(shape, ops, red, rop):
  base = np.random.default_rng(0).integers(-3, 4, int(np.prod(shape))).astype(np.int32)
  ref = base.reshape(shape)
  for k, arg in ops: ref = apply_np(ref, k, arg)
  v = ref.astype(np.int64) * 3 + 1
  if red: v = {Ops.ADD: np.sum, Ops.MAX: np.max, Ops.MUL: np.prod}[rop](v, axis=red, keepdims=True)
  return base, v.astype(np.int32)  # int32 wraps like the kernel (prod may overflow)

@FUZZ
@given(cases())
def test_random_views_reductions_and_opts_match_numpy(case):
  shape, ops, red, rop, ast, out_shape, opts = case
  base, want = reference(shape, ops, red, rop)
  n = int(np.prod(out_shape))
  for device in ("CPU", "CPU:C"):
    (got,) = run(ast, [(n, i32)], [(base, i32)], device, opts=opts)
    np.testing.assert_array_equal(got.reshape(out_shape), want, err_msg=f"{device} shape={shape} ops={ops} red={red} {rop} opts={opts}")
