"""The LLVM renderer ("CPU") and the C renderer ("CPU:C") promise the same semantics: for the same kernel on the same
inputs they must give bit-identical outputs (fused multiply-adds are explicit in both; no fast-math)."""
from __future__ import annotations
import numpy as np
import pytest
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import Ops
from baregrad.ir.view import ShapeTracker
from baregrad.codegen.astbuild import load, store, reduce, sink
from baregrad.codegen.kernel import Opt, OptOps
from tests.helpers import run, random_values, special_values, bits, INTS, ALL

f32 = dtypes.float32

def both(ast, outs, ins, opts=None):
  a = run(ast, outs, ins, "CPU", opts=opts)
  b = run(ast, outs, ins, "CPU:C", opts=opts)
  return a, b

def assert_bit_identical(a: list[np.ndarray], b: list[np.ndarray], what: str) -> None:
  for i, (x, y) in enumerate(zip(a, b)):
    bx, by = bits(x), bits(y)
    if x.dtype.kind == "f":
      # bit-identical, except that the sign/payload of a NaN is not defined by IEEE (x86 makes negative NaNs from
      # invalid operations, and which NaN operand propagates depends on operand order): NaN positions must match
      same = (bx == by) | (np.isnan(x) & np.isnan(y))
    else: same = x == y
    if not same.all():
      idx = np.nonzero(~same)[0][:6]
      raise AssertionError(f"{what}: output {i}: LLVM and C differ at {list(idx)}: LLVM {x[idx]} C {y[idx]}")

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16, f32, dtypes.float64], ids=lambda d: d.name)
def test_elementwise_float_chain_bit_identical(dt):
  rng = np.random.default_rng(10)
  n = 999
  a = np.concatenate([special_values(dt), random_values(dt, n, rng)])
  b = np.concatenate([random_values(dt, n, rng), special_values(dt)])
  n = len(a)
  x, y = load(4, dt, (n,)), load(5, dt, (n,))
  e1 = (x * y + x).alu(Ops.EXP2) / (y.alu(Ops.SQRT) + 1.0)
  e2 = x.alu(Ops.SIN).alu(Ops.MAX, y.alu(Ops.LOG2)) - x.alu(Ops.TRUNC)
  e3 = (x < y).where(x.alu(Ops.RECIP), -y)
  e4 = x.alu(Ops.MULACC, y, x) if dt.itemsize >= 4 else x * y + x
  ast = sink(store(0, (n,), e1), store(1, (n,), e2), store(2, (n,), e3), store(3, (n,), e4))
  a_, b_ = both(ast, [(n, dt)] * 4, [(a, dt), (b, dt)])
  assert_bit_identical(a_, b_, f"elementwise chain {dt.name}")

@pytest.mark.parametrize("dt", INTS + [dtypes.bool], ids=lambda d: d.name)
def test_elementwise_int_chain_bit_identical(dt):
  rng = np.random.default_rng(11)
  n = 777
  a = np.concatenate([special_values(dt), random_values(dt, n, rng)])
  b = np.concatenate([random_values(dt, n, rng), special_values(dt)])
  n = len(a)
  x, y = load(3, dt, (n,)), load(4, dt, (n,))
  if dt == dtypes.bool:
    e1, e2, e3 = (x ^ y) | (x & y), (x < y).where(x, y), x.alu(Ops.MAX, y) * y
  else:
    e1 = (x * y - x) // (y | 1) + x % (y + 3)
    e2 = (x << y) ^ (x >> (y + 1)) & y
    e3 = (x < y).where(x.alu(Ops.MAX, y), -x) + (x.ne(y)).cast(dt)
  ast = sink(store(0, (n,), e1), store(1, (n,), e2), store(2, (n,), e3))
  a_, b_ = both(ast, [(n, dt)] * 3, [(a, dt), (b, dt)])
  assert_bit_identical(a_, b_, f"int chain {dt.name}")

@pytest.mark.parametrize("fr", ALL, ids=lambda d: d.name)
def test_casts_bit_identical(fr):
  rng = np.random.default_rng(12)
  a = np.concatenate([special_values(fr), random_values(fr, 200, rng)])
  n = len(a)
  x = load(len(ALL), fr, (n,))
  ast = sink(*[store(i, (n,), x.cast(to)) for i, to in enumerate(ALL)])
  a_, b_ = both(ast, [(n, to) for to in ALL], [(a, fr)])
  assert_bit_identical(a_, b_, f"casts from {fr.name}")

def matmul_ast(M, K, N, dt=f32):
  sa = ShapeTracker.from_shape((M, K)).reshape((M, 1, K)).expand((M, N, K))
  sb = ShapeTracker.from_shape((K, N)).permute((1, 0)).reshape((1, N, K)).expand((M, N, K))
  return sink(store(0, (M, N, 1), reduce(load(1, dt, sa) * load(2, dt, sb), Ops.ADD, (2,))))

@pytest.mark.parametrize("opts", [None, [], [Opt(OptOps.UNROLL, 2, 4)], [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 2)]],
                         ids=["default", "noopt", "unroll", "upcast2"])
@pytest.mark.parametrize("dt", [f32, dtypes.float64, dtypes.float16, dtypes.bfloat16],
                         ids=lambda d: d.name)
def test_matmul_bit_identical(dt, opts):
  M, K, N = 12, 20, 8
  rng = np.random.default_rng(13)
  a, b = random_values(dt, M * K, rng), random_values(dt, K * N, rng)
  a_, b_ = both(matmul_ast(M, K, N, dt), [(M * N, dt)], [(a, dt), (b, dt)], opts=opts)
  assert_bit_identical(a_, b_, f"matmul {dt.name} opts={opts}")

def softmax_denominator_ast(R, C, dt=f32):
  x = load(1, dt, (R, C))
  m = reduce(x, Ops.MAX, (1,))
  s = reduce((x - m).alu(Ops.EXP2), Ops.ADD, (1,))
  return sink(store(0, (R, 1), s))

@pytest.mark.parametrize("opts", [None, [], [Opt(OptOps.UNROLL, 1, 4)], [Opt(OptOps.UPCAST, 0, 2)]], ids=["default", "noopt", "unroll", "upcast"])
def test_softmax_two_reductions_bit_identical(opts):
  R, C = 6, 28
  rng = np.random.default_rng(14)
  a = random_values(f32, R * C, rng)
  a_, b_ = both(softmax_denominator_ast(R, C), [(R, f32)], [(a, f32)], opts=opts)
  assert_bit_identical(a_, b_, f"softmax denominator opts={opts}")

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=lambda d: d.name)
def test_small_float_reductions_bit_identical(dt):
  # sum, product and max of half/bfloat16 rows: both renderers round after every accumulation step
  rng = np.random.default_rng(15)
  x = np.concatenate([special_values(dt)[:40], random_values(dt, 200, rng)])[:240]
  ld = load(3, dt, (8, 30))
  ast = sink(*[store(i, (8, 1), reduce(ld, op, (1,))) for i, op in enumerate((Ops.ADD, Ops.MUL, Ops.MAX))])
  for opts in (None, [], [Opt(OptOps.UNROLL, 1, 5)]):
    a_, b_ = both(ast, [(8, dt)] * 3, [(x, dt)], opts=opts)
    assert_bit_identical(a_, b_, f"{dt.name} reductions opts={opts}")
