"""Whole kernels against NumPy: reductions over every axis and several axes, non-contiguous views (permute, expand,
pad, shrink, flip, reshape of a permuted view), explicit opts lists (UPCAST, UNROLL, SPLIT, PARALLEL), awkward
shapes (1 element, primes, sizes no vector width divides, zero-size), integer dtypes, and matmul via expand+reduce.
Every kernel runs on both CPU renderers."""
from __future__ import annotations
import functools
import numpy as np
import pytest
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import Ops
from baregrad.ir.view import ShapeTracker
from baregrad.codegen.astbuild import load, store, reduce, sink, const
from baregrad.codegen.kernel import Opt, OptOps, OptError, KernelError
from tests.helpers import DEVICES, run, random_values, np_dtype, round_bf16, make_buffer, read_buffer
from baregrad.engine.runner import run_ast

f32, f64, i32 = dtypes.float32, dtypes.float64, dtypes.int32
U, R, S, P = OptOps.UPCAST, OptOps.UNROLL, OptOps.SPLIT, OptOps.PARALLEL

def close(got, want, what, rtol=1e-5, scale=None):
  got, want = np.asarray(got, np.float64).reshape(-1), np.asarray(want, np.float64).reshape(-1)
  tol = rtol * (np.abs(want) if scale is None else np.asarray(scale, np.float64).reshape(-1)) + 1e-30
  bad = ~((np.abs(got - want) <= tol) | (np.isnan(got) & np.isnan(want)) | (got == want))
  assert not bad.any(), f"{what}: {int(bad.sum())} of {bad.size} differ, e.g. at {np.nonzero(bad)[0][:5]}: got {got[bad][:5]} want {want[bad][:5]}"

def reduce_kernel(shape, axes, op, dt):
  out_shape = tuple(1 if i in axes else s for i, s in enumerate(shape))
  return sink(store(0, out_shape, reduce(load(1, dt, shape), op, axes))), out_shape

def np_reduce(x, axes, op):
  return {Ops.ADD: np.sum, Ops.MUL: np.prod, Ops.MAX: np.max}[op](x, axis=axes, keepdims=True)

def float_input(shape, op, rng):
  if op is Ops.MUL: return (1 + 0.05 * rng.standard_normal(shape)).astype(np.float32)  # no overflow in long products
  return rng.standard_normal(shape).astype(np.float32)

# ---------------------------------------------------------------- reductions
RED_CASES = [((7, 13), (0,)), ((7, 13), (1,)), ((7, 13), (0, 1)), ((16, 64), (1,)), ((16, 64), (0,)), ((1, 1), (0, 1)),
             ((5, 1), (0,)), ((1, 9), (1,)), ((3, 5, 4), (0, 2)), ((3, 5, 4), (1,)), ((2, 3, 4, 5), (1, 3)), ((1000,), (0,)),
             ((4, 17, 3), (0, 1, 2))]

@functools.cache
def reduction_results(shape, axes, device, combined: bool):
  """Sum, product and max over `axes`: in one kernel (three stores, three reductions over the same axes) or three."""
  rng = np.random.default_rng(abs(hash((shape, axes))) % 2 ** 32)
  xs = {op: float_input(shape, op, rng) for op in (Ops.ADD, Ops.MUL, Ops.MAX)}
  out_shape = tuple(1 if i in axes else s for i, s in enumerate(shape))
  n = int(np.prod(out_shape))
  ops = list(xs)
  if combined:
    ast = sink(*[store(i, out_shape, reduce(load(3 + i, f32, shape), op, axes)) for i, op in enumerate(ops)])
    outs = run(ast, [(n, f32)] * 3, [(xs[op], f32) for op in ops], device)
  else:
    outs = [run(reduce_kernel(shape, axes, op, f32)[0], [(n, f32)], [(xs[op], f32)], device)[0] for op in ops]
  return xs, dict(zip(ops, outs))

SINGLE = {((7, 13), (1,)), ((3, 5, 4), (0, 2)), ((1000,), (0,))}  # also compiled as one kernel per reduction

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", [Ops.ADD, Ops.MUL, Ops.MAX], ids=lambda o: o.name)
@pytest.mark.parametrize("shape,axes,combined", [(s, a, True) for s, a in RED_CASES] + [(s, a, False) for s, a in RED_CASES if (s, a) in SINGLE],
                         ids=[f"{s}-{a}".replace(" ", "") for s, a in RED_CASES] +
                             [f"{s}-{a}-alone".replace(" ", "") for s, a in RED_CASES if (s, a) in SINGLE])
def test_float32_reduction_over_axes_keepdim_shape(device, op, shape, axes, combined):
  xs, res = reduction_results(shape, axes, device, combined)
  x, got = xs[op], res[op]
  want = np_reduce(x.astype(np.float64), axes, op)
  scale = np_reduce(np.abs(x.astype(np.float64)), axes, Ops.ADD if op is not Ops.MUL else Ops.MUL)
  close(got, want, f"{op.name} over {axes} of {shape} on {device}", rtol=1e-5 if op is not Ops.MAX else 0, scale=scale)

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64],
                         ids=lambda d: d.name)
def test_int_reductions_wrap_exactly(device, dt):
  # sum and product wrap in the dtype (two's complement); max is exact; all in one kernel
  rng = np.random.default_rng(7)
  shape = (9, 37)
  x = random_values(dt, 9 * 37, rng).reshape(shape)
  ld = load(3, dt, shape)
  ast = sink(store(0, (9, 1), reduce(ld, Ops.ADD, (1,))), store(1, (9, 1), reduce(ld, Ops.MUL, (1,))),
             store(2, (9, 1), reduce(ld, Ops.MAX, (1,))))
  s, p, m = run(ast, [(9, dt)] * 3, [(x, dt)], device)
  with np.errstate(all="ignore"):
    assert (s == x.sum(axis=1, dtype=np_dtype(dt))).all(), f"sum {dt.name}: {s} vs {x.sum(axis=1, dtype=np_dtype(dt))}"
    assert (p == x.prod(axis=1, dtype=np_dtype(dt))).all(), f"prod {dt.name}"
  assert (m == x.max(axis=1)).all(), f"max {dt.name}"

@pytest.mark.parametrize("device", DEVICES)
def test_bool_reductions_any_all(device):
  rng = np.random.default_rng(8)
  x = rng.random((6, 40)) < 0.1
  x[0] = False; x[1] = True
  ld = load(3, dtypes.bool, (6, 40))
  ast = sink(store(0, (6, 1), reduce(ld, Ops.ADD, (1,))), store(1, (6, 1), reduce(ld, Ops.MUL, (1,))),
             store(2, (6, 1), reduce(ld, Ops.MAX, (1,))))
  s, p, m = run(ast, [(6, dtypes.bool)] * 3, [(x, dtypes.bool)], device)
  assert (s == x.any(1)).all() and (m == x.any(1)).all(), f"any: {s} {m} vs {x.any(1)}"
  assert (p == x.all(1)).all(), f"all: {p} vs {x.all(1)}"

@pytest.mark.parametrize("device", DEVICES)
def test_max_reduction_propagates_nan_and_handles_inf(device):
  x = np.array([[1, np.nan, 3], [-np.inf, -np.inf, -np.inf], [-0.0, 0.0, -0.0], [-5, np.inf, 2]], np.float32)
  ast, _ = reduce_kernel((4, 3), (1,), Ops.MAX, f32)
  (got,) = run(ast, [(4, f32)], [(x, f32)], device)
  assert np.isnan(got[0]) and got[1] == -np.inf and got[2] == 0 and not np.signbit(got[2]) and got[3] == np.inf, got

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", [dtypes.float16, pytest.param(dtypes.bfloat16, id="bfloat16")], ids=lambda d: d.name)
def test_small_float_sum_is_close_to_float64(device, dt):
  # half/bfloat16 arithmetic rounds after every op; the sum of 64 values in [0, 1) stays within a few ulp of 64 adds
  rng = np.random.default_rng(9)
  x = rng.random((4, 64)).astype(np.float32)
  x = round_bf16(x) if dt == dtypes.bfloat16 else x.astype(np.float16)
  ast, _ = reduce_kernel((4, 64), (1,), Ops.ADD, dt)
  (got,) = run(ast, [(4, dt)], [(x, dt)], device)
  want = x.astype(np.float64).sum(1)
  eps = 2.0 ** -8 if dt == dtypes.bfloat16 else 2.0 ** -11
  close(got, want, f"{dt.name} sum on {device}", rtol=64 * eps)

# ---------------------------------------------------------------- views
def v(shape): return ShapeTracker.from_shape(shape)

VIEW_CASES = {
  "permute": (lambda a: a.permute((1, 0)), lambda x: x.T, (5, 7)),
  "permute3d": (lambda a: a.permute((2, 0, 1)), lambda x: x.transpose(2, 0, 1), (3, 4, 5)),
  "expand": (lambda a: a.reshape((1, 7)).expand((5, 7)), lambda x: np.broadcast_to(x.reshape(1, 7), (5, 7)), (7,)),
  "expand_col": (lambda a: a.reshape((6, 1)).expand((6, 9)), lambda x: np.broadcast_to(x.reshape(6, 1), (6, 9)), (6,)),
  "pad": (lambda a: a.pad(((1, 2), (0, 3))), lambda x: np.pad(x, ((1, 2), (0, 3))), (4, 5)),
  "shrink": (lambda a: a.shrink(((1, 4), (2, 5))), lambda x: x[1:4, 2:5], (6, 7)),
  "flip": (lambda a: a.flip((True, False)), lambda x: x[::-1], (4, 5)),
  "flip_both": (lambda a: a.flip((True, True)), lambda x: x[::-1, ::-1], (3, 7)),
  "pad_shrink": (lambda a: a.pad(((2, 2),)).shrink(((1, 9),)), lambda x: np.pad(x, 2)[1:9], (7,)),
  "reshape_of_permute": (lambda a: a.permute((1, 0)).reshape((15,)), lambda x: x.T.reshape(15), (3, 5)),
  "reshape_of_permute_2d": (lambda a: a.permute((1, 0)).reshape((2, 10)), lambda x: x.T.reshape(2, 10), (4, 5)),
  "flip_permute_pad": (lambda a: a.flip((False, True)).permute((1, 0)).pad(((0, 1), (1, 0))),
                       lambda x: np.pad(x[:, ::-1].T, ((0, 1), (1, 0))), (3, 4)),
  "shrink_of_expand": (lambda a: a.reshape((1, 4)).expand((6, 4)).shrink(((2, 5), (1, 3))),
                       lambda x: np.broadcast_to(x.reshape(1, 4), (6, 4))[2:5, 1:3], (4,)),
}

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opts", ["default", "none"])
@pytest.mark.parametrize("name", list(VIEW_CASES))
def test_kernel_over_non_contiguous_view(device, opts, name):
  mk, ref, base_shape = VIEW_CASES[name]
  rng = np.random.default_rng(abs(hash(name)) % 2 ** 32)
  x = rng.standard_normal(base_shape).astype(np.float32)
  st = mk(v(base_shape))
  out_shape = st.shape
  n = int(np.prod(out_shape))
  ast = sink(store(0, out_shape, load(1, f32, st) * 2.0 + 1.0))
  (got,) = run(ast, [(n, f32)], [(x, f32)], device, opts=None if opts == "default" else [])
  want = ref(x) * np.float32(2) + np.float32(1)
  assert got.shape == (n,)
  np.testing.assert_array_equal(got.reshape(out_shape), want.astype(np.float32), err_msg=f"{name} on {device}")

@pytest.mark.parametrize("device", DEVICES)
def test_padded_view_reads_zeros_and_reduces(device):
  # masked loads in a reduction: sum over a padded axis counts the pad as 0
  x = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
  st = v((3, 4)).pad(((0, 0), (2, 3)))
  ast = sink(store(0, (3, 1), reduce(load(2, f32, st), Ops.ADD, (1,))), store(1, (3, 1), reduce(load(2, f32, st), Ops.MAX, (1,))))
  s, m = run(ast, [(3, f32), (3, f32)], [(x, f32)], device)
  np.testing.assert_array_equal(s, x.sum(1))
  np.testing.assert_array_equal(m, x.max(1))
  xn = -x
  s, m = run(ast, [(3, f32), (3, f32)], [(xn, f32)], device)
  np.testing.assert_array_equal(m, np.zeros(3, np.float32), err_msg="max over a padded row of negatives is the pad's 0")

@pytest.mark.parametrize("device", DEVICES)
def test_padded_store_view_writes_only_inside(device):
  # a store through a shrunk view of a bigger output buffer leaves the rest untouched (masked/offset store)
  out_st = v((6, 6)).shrink(((1, 4), (2, 5)))
  x = np.arange(9, dtype=np.float32).reshape(3, 3)
  ast = sink(store(0, out_st, load(1, f32, (3, 3)) + 0.5))
  # the output starts as a sentinel (a fresh allocation may hold recycled memory, not zeros)
  out, inp = make_buffer(device, np.full(36, -7.0, np.float32), f32), make_buffer(device, x, f32)
  run_ast(ast, [out, inp], device=device)
  got = read_buffer(out)
  want = np.full((6, 6), -7.0, np.float32)
  want[1:4, 2:5] = x + 0.5
  np.testing.assert_array_equal(got.reshape(6, 6), want)

@pytest.mark.parametrize("device", DEVICES)
def test_const_with_padded_view_is_masked(device):
  # a CONST with a padded VIEW is the constant inside and 0 in the pad
  st = v((3,)).reshape((1, 3)).expand((2, 3)).pad(((1, 1), (0, 2)))
  ast = sink(store(0, st.shape, const(f32, 7.0, st) + load(1, f32, st.shape)))
  y = np.ones(st.shape, np.float32)
  (got,) = run(ast, [(int(np.prod(st.shape)), f32)], [(y, f32)], device)
  want = np.pad(np.full((2, 3), 7.0, np.float32), ((1, 1), (0, 2))) + 1
  np.testing.assert_array_equal(got.reshape(st.shape), want)

# ---------------------------------------------------------------- opts
def matmul_ast(M, K, N, dt=f32):
  sa = v((M, K)).reshape((M, 1, K)).expand((M, N, K))
  sb = v((K, N)).permute((1, 0)).reshape((1, N, K)).expand((M, N, K))
  return sink(store(0, (M, N, 1), reduce(load(1, dt, sa) * load(2, dt, sb), Ops.ADD, (2,))))

MATMUL_OPTS = [None, [], [Opt(P, 0)], [Opt(U, 1, 4)], [Opt(U, 0, 4), Opt(U, 1, 4)], [Opt(R, 2, 4)], [Opt(S, 2, 4)],
               [Opt(S, 0, 2), Opt(P, 0)], [Opt(U, 1, 8), Opt(R, 2, 4), Opt(P, 0)], [Opt(S, 2, 8), Opt(R, 3, 4)],
               [Opt(P, 1), Opt(U, 0, 2)], [Opt(U, 0, 0)], [Opt(R, 2, 0)], [Opt(S, 1, 2), Opt(R, 3, 4), Opt(P, 1)],
               [Opt(S, 1, 4), Opt(U, 2, 4), Opt(P, 1)]]

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opts", MATMUL_OPTS, ids=[str(o) for o in MATMUL_OPTS])
def test_matmul_with_opts(device, opts):
  M, K, N = 8, 16, 16
  rng = np.random.default_rng(21)
  a, b = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
  (got,) = run(matmul_ast(M, K, N), [(M * N, f32)], [(a, f32), (b, f32)], device, opts=opts)
  want = a.astype(np.float64) @ b.astype(np.float64)
  close(got, want, f"matmul opts={opts} on {device}", rtol=1e-5, scale=np.abs(a) @ np.abs(b))

MM_SHAPES = [(1, 1, 1), (7, 13, 5), (1, 17, 3), (13, 1, 7), (32, 32, 32), (3, 64, 1), (33, 7, 65)]

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", MM_SHAPES, ids=[str(s) for s in MM_SHAPES])
def test_matmul_awkward_shapes(device, shape):
  M, K, N = shape
  rng = np.random.default_rng(M * 1000 + K * 10 + N)
  a, b = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
  (got,) = run(matmul_ast(M, K, N), [(M * N, f32)], [(a, f32), (b, f32)], device)
  close(got, a.astype(np.float64) @ b.astype(np.float64), f"matmul {shape} on {device}", rtol=1e-5, scale=np.abs(a) @ np.abs(b))

@pytest.mark.parametrize("device", DEVICES)
def test_int_matmul_exact(device):
  M, K, N = 5, 11, 6
  rng = np.random.default_rng(22)
  a, b = rng.integers(-50, 50, (M, K), dtype=np.int32), rng.integers(-50, 50, (K, N), dtype=np.int32)
  for opts in (None, [], [Opt(U, 1, 2), Opt(R, 2, 0)]):
    (got,) = run(matmul_ast(M, K, N, i32), [(M * N, i32)], [(a, i32), (b, i32)], device, opts=opts)
    np.testing.assert_array_equal(got.reshape(M, N), a @ b, err_msg=f"int matmul opts={opts}")

RED_OPTS = [None, [], [Opt(R, 1, 4)], [Opt(R, 1, 0)], [Opt(S, 1, 4)], [Opt(S, 1, 8), Opt(R, 2, 4)], [Opt(U, 0, 2), Opt(R, 1, 2)],
            [Opt(P, 0), Opt(R, 1, 8)], [Opt(U, 0, 3), Opt(P, 0)], [Opt(S, 0, 3), Opt(S, 2, 8)], [Opt(P, 0), Opt(U, 0, 6)]]

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opts", RED_OPTS, ids=[str(o) for o in RED_OPTS])
def test_int_row_sum_with_opts_is_exact(device, opts):
  # integer sums are exact whatever the order: every opts list must give the very same result
  shape = (6, 32)
  x = np.random.default_rng(23).integers(-1000, 1000, shape, dtype=np.int32)
  ast, _ = reduce_kernel(shape, (1,), Ops.ADD, i32)
  (got,) = run(ast, [(6, i32)], [(x, i32)], device, opts=opts)
  np.testing.assert_array_equal(got, x.sum(1), err_msg=f"opts={opts}")

ELT_OPTS = [None, [], [Opt(U, 1, 5)], [Opt(U, 1, 2), Opt(U, 0, 3)], [Opt(S, 1, 5), Opt(P, 0)], [Opt(P, 1)], [Opt(U, 0, 0), Opt(U, 0, 5)],
            [Opt(S, 0, 2), Opt(U, 2, 10), Opt(P, 0)], [Opt(S, 1, 5), Opt(S, 0, 3), Opt(U, 3, 5)]]

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opts", ELT_OPTS, ids=[str(o) for o in ELT_OPTS])
def test_elementwise_over_permuted_view_with_opts(device, opts):
  x = np.arange(60, dtype=np.int32).reshape(10, 6)
  y = np.arange(60, dtype=np.int32).reshape(6, 10) * 3
  ast = sink(store(0, (6, 10), load(1, i32, v((10, 6)).permute((1, 0))) * 7 - load(2, i32, (6, 10))))
  (got,) = run(ast, [(60, i32)], [(x, i32), (y, i32)], device, opts=opts)
  np.testing.assert_array_equal(got.reshape(6, 10), x.T * 7 - y, err_msg=f"opts={opts}")

def test_opt_that_does_not_apply_raises_opterror():
  from baregrad.codegen.kernel import Kernel
  k = Kernel(matmul_ast(8, 16, 16))
  for bad in (Opt(U, 0, 3), Opt(U, 2, 4), Opt(R, 0, 2), Opt(U, 9, 2), Opt(S, 1, 5)):
    with pytest.raises(OptError): Kernel(matmul_ast(8, 16, 16)).apply_opt(bad)
  k.apply_opt(Opt(P, 0))
  with pytest.raises(OptError, match="threads"): k.apply_opt(Opt(P, 0))

# ---------------------------------------------------------------- awkward sizes
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [1, 2, 3, 7, 13, 17, 31, 33, 63, 65, 127, 1000, 1021])
def test_elementwise_sizes_not_divisible_by_vector_width(device, n):
  rng = np.random.default_rng(n)
  a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
  ast = sink(store(0, (n,), load(1, f32, (n,)) * load(2, f32, (n,)) + load(1, f32, (n,))))
  (got,) = run(ast, [(n, f32)], [(a, f32), (b, f32)], device)
  np.testing.assert_array_equal(got, a * b + a)  # two roundings (no contraction): exactly NumPy's

@pytest.mark.parametrize("device", DEVICES)
def test_float64_and_float16_elementwise_2d_prime_shape(device):
  rng = np.random.default_rng(31)
  for dt in (f64, dtypes.float16):
    x = rng.standard_normal((7, 13)).astype(np_dtype(dt))
    ast = sink(store(0, (7, 13), load(1, dt, (7, 13)) - load(1, dt, v((7, 13)).flip((True, True)))))
    (got,) = run(ast, [(91, dt)], [(x, dt)], device)
    cd = np.float32 if dt == dtypes.float16 else np.float64  # half arithmetic runs in float32, rounds once
    want = (x.astype(cd) - x[::-1, ::-1].astype(cd)).astype(np_dtype(dt))
    np.testing.assert_array_equal(got.reshape(7, 13), want)

@pytest.mark.parametrize("device", DEVICES)
def test_zero_size_kernel_runs_and_writes_nothing(device):
  ast = sink(store(0, (0,), load(1, f32, (0,)) + 1.0))
  (got,) = run(ast, [(0, f32)], [(np.zeros(0, np.float32), f32)], device)
  assert got.size == 0

@pytest.mark.parametrize("device", DEVICES)
def test_reduction_over_zero_size_axis_gives_identity(device):
  # sum over an empty axis is 0, prod 1, max -inf (NumPy's sum/prod; max of nothing is the identity)
  ld = load(3, f32, (4, 0))
  ast = sink(store(0, (4, 1), reduce(ld, Ops.ADD, (1,))), store(1, (4, 1), reduce(ld, Ops.MUL, (1,))),
             store(2, (4, 1), reduce(ld, Ops.MAX, (1,))))
  s, p, m = run(ast, [(4, f32)] * 3, [(np.zeros((4, 0), np.float32), f32)], device)
  assert (s == 0).all() and (p == 1).all() and (m == -np.inf).all(), (s, p, m)
  with pytest.raises(OptError, match="does not divide"): run(ast, [(4, f32)] * 3, [(np.zeros((4, 0), np.float32), f32)], device,
                                                            opts=[Opt(R, 1, 0)])

@pytest.mark.parametrize("device", DEVICES)
def test_one_element_kernel_with_all_opts_rejected_cleanly(device):
  ast = sink(store(0, (1, 1), reduce(load(1, f32, (1, 1)), Ops.ADD, (1,)) * 3.0))
  (got,) = run(ast, [(1, f32)], [(np.array([[2.5]], np.float32), f32)], device)
  assert got[0] == 7.5
  with pytest.raises(OptError): run(ast, [(1, f32)], [(np.array([[2.5]], np.float32), f32)], device, opts=[Opt(U, 0, 2)])

@pytest.mark.parametrize("device", DEVICES)
def test_multiple_outputs_of_different_dtypes(device):
  # one kernel: a (4, 1) int32 row max and a (4, 1) float32 row mean
  rng = np.random.default_rng(41)
  x = rng.integers(-9, 9, (4, 5), dtype=np.int32)
  ld = load(2, i32, (4, 5))
  ast = sink(store(0, (4, 1), reduce(ld, Ops.MAX, (1,))), store(1, (4, 1), reduce(ld.cast(f32), Ops.ADD, (1,)) * 0.2))
  m, h = run(ast, [(4, i32), (4, f32)], [(x, i32)], device)
  np.testing.assert_array_equal(m, x.max(1))
  np.testing.assert_array_equal(h, x.sum(1).astype(np.float32) * np.float32(0.2))

def test_store_of_unreduced_shape_beside_a_reduction_is_a_clear_kernel_error():
  # every store must have size 1 on reduced axes (the AST contract): a full-shape store next to a reduction is refused
  ld = load(2, i32, (4, 5))
  ast = sink(store(0, (4, 1), reduce(ld, Ops.MAX, (1,))), store(1, (4, 5), ld))
  with pytest.raises(KernelError, match="reduced axis 1"): run(ast, [(4, i32), (20, i32)], [(np.zeros((4, 5), np.int32), i32)])

@pytest.mark.parametrize("device", DEVICES)
def test_softmax_like_kernel_matches_numpy(device):
  # two reductions over the same axis in one kernel: sum(exp2(x - max(x))) per row, then a normalized store
  Rr, C = 5, 19
  x = np.random.default_rng(42).standard_normal((Rr, C)).astype(np.float32) * 4
  ld = load(1, f32, (Rr, C))
  m = reduce(ld, Ops.MAX, (1,))
  s = reduce((ld - m).alu(Ops.EXP2), Ops.ADD, (1,))
  for opts in (None, [], [Opt(R, 1, 0)]):
    (got,) = run(sink(store(0, (Rr, 1), s)), [(Rr, f32)], [(x, f32)], device, opts=opts)
    want = np.exp2(x.astype(np.float64) - x.max(1, keepdims=True)).sum(1)
    close(got, want, f"softmax denominator opts={opts}", rtol=1e-5)

@pytest.mark.parametrize("device", DEVICES)
def test_variable_in_kernel(device):
  # a DEFINE_VAR used as a value: out = x * n + n, n bound at launch
  from baregrad.ir.ops import UOp
  nv = UOp.variable("n", 1, 100)
  x = np.arange(10, dtype=np.int32)
  ast = sink(store(0, (10,), load(1, i32, (10,)) * nv + nv))
  for n in (1, 7, 100):
    (got,) = run(ast, [(10, i32)], [(x, i32)], device, vals={"n": n})
    np.testing.assert_array_equal(got, x * n + n)

# ---------------------------------------------------------------- masks and lanes together, nested reductions
PAD_OPTS = [None, [], [Opt(U, 1, 4)], [Opt(U, 1, 12)], [Opt(U, 0, 5)], [Opt(P, 0), Opt(U, 1, 2)], [Opt(S, 1, 3), Opt(U, 1, 4)], [Opt(S, 1, 3), Opt(U, 2, 3)]]

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opts", PAD_OPTS, ids=[str(o) for o in PAD_OPTS])
def test_padded_and_flipped_view_with_lanes(device, opts):
  # masked loads where the mask differs per lane, into a store through a shrunk view of a bigger buffer
  x = np.arange(1, 36, dtype=np.float32).reshape(5, 7)
  st_in = v((5, 7)).flip((False, True)).pad(((0, 0), (2, 3)))          # (5, 12)
  st_out = v((7, 14)).shrink(((1, 6), (1, 13)))                          # (5, 12) inside (7, 14)
  ast = sink(store(0, st_out, load(1, f32, st_in) + 1.0))
  (got,) = run(ast, [(98, f32)], [(x, f32)], device, opts=opts)
  want = np.zeros((7, 14), np.float32)
  want[1:6, 1:13] = np.pad(x[:, ::-1], ((0, 0), (2, 3))) + 1
  np.testing.assert_array_equal(got.reshape(7, 14), want, err_msg=f"opts={opts}")

PAD_RED_OPTS = [None, [], [Opt(R, 1, 4)], [Opt(R, 1, 12)], [Opt(U, 0, 5), Opt(R, 0, 3)], [Opt(S, 1, 4), Opt(R, 1, 3)], [Opt(S, 1, 4), Opt(R, 2, 4)],
                [Opt(P, 0), Opt(R, 1, 6)]]

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opts", PAD_RED_OPTS, ids=[str(o) for o in PAD_RED_OPTS])
def test_reduction_over_padded_axis_with_unroll(device, opts):
  x = np.arange(1, 36, dtype=np.int32).reshape(5, 7) * np.array([1, -1, 1, -1, 1], np.int32)[:, None]
  st_in = v((5, 7)).pad(((0, 0), (2, 3)))
  ld = load(2, i32, st_in)
  ast = sink(store(0, (5, 1), reduce(ld, Ops.ADD, (1,))), store(1, (5, 1), reduce(ld, Ops.MAX, (1,))))
  s, m = run(ast, [(5, i32), (5, i32)], [(x, i32)], device, opts=opts)
  xp = np.pad(x, ((0, 0), (2, 3)))
  np.testing.assert_array_equal(s, xp.sum(1), err_msg=f"sum opts={opts}")
  np.testing.assert_array_equal(m, xp.max(1), err_msg=f"max opts={opts}")

@pytest.mark.parametrize("device", DEVICES)
def test_nested_reductions_full_reduce_in_two_steps(device):
  # sum over axis 1, then max over axis 0 of the row sums: one (1, 1) output
  x = np.random.default_rng(51).integers(-20, 20, (6, 9)).astype(np.int32)
  ast = sink(store(0, (1, 1), reduce(reduce(load(1, i32, (6, 9)), Ops.ADD, (1,)), Ops.MAX, (0,))))
  for opts in (None, []):
    (got,) = run(ast, [(1, i32)], [(x, i32)], device, opts=opts)
    assert got[0] == x.sum(1).max(), f"opts={opts}: {got[0]} vs {x.sum(1).max()}"

@pytest.mark.parametrize("device", DEVICES)
def test_two_reductions_of_different_inputs_combined(device):
  # (sum_k a[i,k]) * (max_k b[i,k]) - sum_k a[i,k]*b[i,k]: three reductions over one axis, different inputs
  rng = np.random.default_rng(52)
  a, b = rng.integers(-9, 9, (7, 12)).astype(np.int32), rng.integers(-9, 9, (7, 12)).astype(np.int32)
  la, lb = load(1, i32, (7, 12)), load(2, i32, (7, 12))
  e = reduce(la, Ops.ADD, (1,)) * reduce(lb, Ops.MAX, (1,)) - reduce(la * lb, Ops.ADD, (1,))
  for opts in (None, [], [Opt(R, 1, 4)], [Opt(U, 0, 7)]):
    (got,) = run(sink(store(0, (7, 1), e)), [(7, i32)], [(a, i32), (b, i32)], device, opts=opts)
    np.testing.assert_array_equal(got, a.sum(1) * b.max(1) - (a * b).sum(1), err_msg=f"opts={opts}")

@pytest.mark.parametrize("device", DEVICES)
def test_reduction_result_broadcast_back_over_the_reduced_axis(device):
  # x - max(x) per row stored at full shape: the reduce must finish before the elementwise loop uses it
  x = np.random.default_rng(53).standard_normal((4, 10)).astype(np.float32)
  ld = load(1, f32, (4, 10))
  ast = sink(store(0, (4, 10), ld - reduce(ld, Ops.MAX, (1,))))
  try:
    (got,) = run(ast, [(40, f32)], [(x, f32)], device)
  except KernelError as e:  # the AST contract: stores have size 1 on reduced axes; a clear error is acceptable
    assert "reduced axis" in str(e)
    return
  np.testing.assert_array_equal(got.reshape(4, 10), x - x.max(1, keepdims=True))

@pytest.mark.parametrize("device", DEVICES)
def test_reduce_of_a_const_with_view_counts_elements(device):
  # sum of a CONST 1 over a padded view counts the unpadded elements
  st = v((3, 5)).pad(((0, 0), (1, 2)))
  ast = sink(store(0, (3, 1), reduce(const(i32, 1, st), Ops.ADD, (1,))), store(1, (3, 1), reduce(load(2, i32, (3, 8)), Ops.ADD, (1,))))
  c, s = run(ast, [(3, i32), (3, i32)], [(np.ones((3, 8), np.int32), i32)], device)
  assert list(c) == [5, 5, 5] and list(s) == [8, 8, 8], (c, s)

# ---------------------------------------------------------------- regressions for bugs found by tests/unit/test_kernel_fuzz.py
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opts", [[Opt(S, 0, 8)], [Opt(S, 0, 1)], [Opt(S, 0, 0)], [Opt(R, 0, 1)]], ids=str)
def test_split_by_the_whole_reduce_axis(device, opts):
  # a size-1 part of a reduce axis used to stay a RANGE in its REDUCE: KeyError in linearize
  x = np.arange(8, dtype=np.int32)
  (got,) = run(sink(store(0, (1,), reduce(load(1, i32, (8,)), Ops.ADD, (0,)))), [(1, i32)], [(x, i32)], device, opts=opts)
  assert got[0] == 28

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opts", [None, [], [Opt(R, 0, 5)]], ids=str)
def test_reduction_of_a_constant(device, opts):
  # the value does not use the reduce loop: the loop must still run (KeyError in linearize before)
  ast = sink(store(0, (3, 1), reduce(const(i32, 2, (3, 5)), Ops.ADD, (1,))), store(1, (3, 1), reduce(const(f32, 1.5, (3, 5)), Ops.MUL, (1,))))
  s, p = run(ast, [(3, i32), (3, f32)], [], device, opts=[Opt(R, 1, 5)] if opts and opts[0].op is R else opts)
  assert list(s) == [10, 10, 10] and list(p) == [1.5 ** 5] * 3, (s, p)

@pytest.mark.parametrize("device", DEVICES)
def test_upcast_over_a_reduce_whose_lanes_fold_differently(device):
  # lanes of one reduce where one lane's load is fully masked (its value folds to a constant): LinearizeError on C before
  from baregrad.ir.view import View
  st = ShapeTracker((View((2, 2, 2), (0, 1, 0), 0, ((0, 1), (0, 2), (0, 1))),))
  ast = sink(store(0, (2, 1, 2), reduce(load(1, i32, st) * 3 + 1, Ops.ADD, (1,))))
  for opts in (None, [], [Opt(U, 0, 0)], [Opt(U, 2, 2)], [Opt(U, 0, 0), Opt(R, 0, 2)]):
    (got,) = run(ast, [(4, i32)], [(np.array([1, 2], np.int32), i32)], device, opts=opts)
    assert list(got) == [11, 2, 2, 2], f"opts={opts}: {got}"

@pytest.mark.parametrize("device", DEVICES)
def test_unroll_over_a_partly_masked_reduce(device):
  # unrolled lanes of one reduce: two lanes fold to the same constant reduce (merged, then scaled by 2)
  from baregrad.ir.view import View
  st = ShapeTracker((View((3, 2, 2), (0, 0, 0), 0, ((0, 1), (0, 1), (0, 1))),))
  ast = sink(store(0, (1, 1, 2), reduce(load(1, i32, st) * 3 + 1, Ops.ADD, (0, 1))))
  for opts in (None, [], [Opt(R, 0, 0)], [Opt(R, 0, 3), Opt(R, 0, 2)]):
    (got,) = run(ast, [(2, i32)], [(np.array([5], np.int32), i32)], device, opts=opts)
    assert list(got) == [21, 6], f"opts={opts}: {got}"
