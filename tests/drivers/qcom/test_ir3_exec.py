"""The mock Adreno's ir3 executor against NumPy: kernels rendered to NIR, compiled by Mesa's ir3 and run by the mock.

Every instruction form the compiler emits for these kernels runs here (test_forms_covered lists them), and each
kernel's output is compared with NumPy, so a wrong semantic in the executor (or in the renderer) fails a test."""
from __future__ import annotations

import struct

import numpy as np
import pytest

pytest.importorskip("tinymesa")
from baregrad.ir.dtype import dtypes  # noqa: E402
from baregrad.ir.ops import Ops  # noqa: E402
from baregrad.ir.view import ShapeTracker  # noqa: E402
from baregrad.codegen.astbuild import const, load, store, reduce, sink  # noqa: E402
from baregrad.codegen.kernel import Opt, OptOps  # noqa: E402
from baregrad.codegen.program import get_program  # noqa: E402
from baregrad.codegen.renderer.nir import NIRRenderer  # noqa: E402
from baregrad.drivers.qcom.ir3_compile import IR3Compiler, Ir3Program  # noqa: E402
from baregrad.drivers.qcom.ir3_disasm import disassemble  # noqa: E402
from baregrad.drivers.mock.adreno.cp import GpuMemory, CPError  # noqa: E402
from baregrad.drivers.mock.adreno.ir3_exec import Executor, Ir3Error, parse  # noqa: E402
from tests.helpers import np_dtype  # noqa: E402

f32, i32, u32 = dtypes.float32, dtypes.int32, dtypes.uint32
SEEN: set[str] = set()


def texture_state(prg: Ir3Program, bufs: list) -> tuple[dict, dict]:
  from baregrad.drivers.qcom.dispatch import texture_block
  from baregrad.drivers.mock.adreno.tex import decode_tex_const, decode_tex_samp
  tw, n = texture_block(prg, [(b[0], len(b[1])) for b in bufs]), prg.tex_count
  return ({t: decode_tex_const(tw[16 * t:16 * t + 16], t) for _, t, _ in prg.images},
          {t: decode_tex_samp(tw[16 * n + 4 * t:16 * n + 4 * t + 4], t) for _, t, _ in prg.images})


def run_ast(ast, outs: list[np.ndarray], ins: list[np.ndarray], opts=None, program=None):
  p = get_program(ast, NIRRenderer(630), opts=opts)
  prg = Ir3Program.unpack(IR3Compiler(630).compile(p.src))
  mem, va, bufs = GpuMemory(), 0x100000, []
  for arr in outs + ins:
    data = bytearray(arr.tobytes()) + bytearray(16)
    mem.map(va, data)
    bufs.append((va, data))
    va += (len(data) + 0xFFFF) & ~0xFFFF
  params = b"".join(struct.pack("<Q", b[0]) for b in bufs)
  ex = Executor(mem)
  if prg.images:   # the texture state a dispatch loads (drivers/qcom/dispatch.texture_block), decoded as the SP does
    ex.textures, ex.samplers = texture_state(prg, bufs)
  ex.run(prg, p.global_size, params, program=program(disassemble(prg.words())) if program else None)
  SEEN.update(ex.executed)
  return [np.frombuffer(bytes(bufs[i][1][:o.nbytes]), o.dtype).copy() for i, o in enumerate(outs)]


def elementwise(fn, dt, a, b=None, out_dt=None):
  n = len(a)
  x = load(1, dt, (n,))
  y = load(2, dt, (n,)) if b is not None else None
  out_dt = out_dt or dt
  ins = [a] + ([b] if b is not None else [])
  (o,) = run_ast(sink(store(0, (n,), fn(x, y) if y is not None else fn(x))), [np.zeros(n, np_dtype(out_dt))], ins)
  return o


RNG = np.random.default_rng(0)
FA = np.concatenate([RNG.standard_normal(61).astype(np.float32) * 10, np.array([0.0, -0.0, 1.5, -2.5, np.nan, np.inf], np.float32)])
FB = np.concatenate([RNG.standard_normal(61).astype(np.float32) * 10, np.array([-0.0, 3.0, np.nan, 2.5, 1.0, -1.0], np.float32)])


@pytest.mark.parametrize("name,fn,ref", [
  ("add", lambda x, y: x + y, lambda a, b: a + b),
  ("mul", lambda x, y: x * y, lambda a, b: a * b),
  ("sub", lambda x, y: x - y, lambda a, b: a - b),
  ("max", lambda x, y: x.alu(Ops.MAX, y), lambda a, b: np.where(np.isnan(a) | np.isnan(b), a + b, np.maximum(a, b))),
  ("where_lt", lambda x, y: (x < y).where(x, y), lambda a, b: np.where(a < b, a, b)),
  ("where_ne", lambda x, y: x.ne(y).where(x, -y), lambda a, b: np.where(a != b, a, -b)),
  ("fdiv", lambda x, y: x / y, lambda a, b: a / b),
], ids=lambda v: v if isinstance(v, str) else "")
def test_float_binary(name, fn, ref):
  o = elementwise(fn, f32, FA, FB)
  with np.errstate(all="ignore"): want = ref(FA, FB).astype(np.float32)
  np.testing.assert_allclose(o, want, rtol=2e-6 if name == "fdiv" else 0, atol=0, equal_nan=True)


@pytest.mark.parametrize("name,op,ref,a", [
  ("exp2", Ops.EXP2, np.exp2, RNG.uniform(-20, 20, 64).astype(np.float32)),
  ("log2", Ops.LOG2, np.log2, RNG.uniform(0.01, 1000, 64).astype(np.float32)),
  ("sin", Ops.SIN, np.sin, RNG.uniform(-3, 3, 64).astype(np.float32)),
  ("sqrt", Ops.SQRT, np.sqrt, RNG.uniform(0, 1000, 64).astype(np.float32)),
  ("recip", Ops.RECIP, lambda a: 1 / a, RNG.uniform(0.5, 100, 64).astype(np.float32)),
  ("trunc", Ops.TRUNC, np.trunc, RNG.uniform(-100, 100, 64).astype(np.float32)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_float_unary(name, op, ref, a):
  o = elementwise(lambda x: x.alu(op), f32, a)
  np.testing.assert_allclose(o, ref(a), rtol=1e-5, atol=1e-6)


def test_sin_of_large_arguments_is_reduced_first():
  # ir3 reduces sin's argument by fract(x / 2pi) in float32 (1e4 -> off by 7e-4); the renderer reduces by 2pi first
  a = np.concatenate([RNG.uniform(-1e4, 1e4, 60), [1e4, -1e4, 200.0, 3.0, 0.0, np.inf, np.nan]]).astype(np.float32)
  with np.errstate(invalid="ignore"): want = np.sin(a.astype(np.float64))
  np.testing.assert_allclose(elementwise(lambda x: x.alu(Ops.SIN), f32, a), want, rtol=0, atol=2e-6, equal_nan=True)


def _bf16(a: np.ndarray) -> np.ndarray:
  """float32 -> bfloat16 bits (uint16), round to nearest even."""
  u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
  return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _f32(b: np.ndarray) -> np.ndarray: return (b.astype(np.uint32) << 16).view(np.float32)


def test_bfloat16_arithmetic_and_reductions():
  # bfloat16 is its bits: arithmetic in float32 rounded after each op, a max and a sum over bfloat16 accumulators
  bf = dtypes.bfloat16
  a, b = _bf16(RNG.standard_normal(64) * 4), _bf16(RNG.standard_normal(64))
  got = elementwise(lambda x, y: x * y + const(bf, 1.5), bf, a.view(np.int16), b.view(np.int16)).view(np.uint16)
  np.testing.assert_array_equal(got, _bf16(_f32(_bf16(_f32(a) * _f32(b))) + np.float32(1.5)))
  x = _bf16(RNG.standard_normal((4, 16)))
  for op in (Ops.MAX, Ops.ADD):
    (o,) = run_ast(sink(store(0, (4, 1), reduce(load(1, bf, (4, 16)), op, (1,)))), [np.zeros(4, np.uint16)], [x.ravel()], [])   # one loop, in order
    want = np.zeros(4, np.uint16)
    for r in range(4):
      acc = _bf16(np.array([-np.inf if op is Ops.MAX else 0.0]))[0]
      for v in x[r]: acc = _bf16(np.array([max(_f32(acc), _f32(v)) if op is Ops.MAX else _f32(acc) + _f32(v)]))[0]
      want[r] = acc
    np.testing.assert_array_equal(o, want, err_msg=str(op))


def test_float_neg_and_casts():
  a = np.array([1.5, -2.5, 3e9, -3e9, np.nan, 0.0, 255.7, -1.2, 70000.0, 300.0], np.float32)
  np.testing.assert_array_equal(elementwise(lambda x: -x, f32, a), -a)
  np.testing.assert_array_equal(elementwise(lambda x: x.cast(i32), f32, a, out_dt=i32),
                                np.where(np.isnan(a), 0, np.clip(np.trunc(np.nan_to_num(a.astype(np.float64))), -2 ** 31, 2 ** 31 - 1)).astype(np.int32))
  np.testing.assert_array_equal(elementwise(lambda x: x.cast(dtypes.uint8), f32, a, out_dt=dtypes.uint8),
                                np.where(np.isnan(a), 0, np.clip(np.trunc(np.nan_to_num(a)), 0, 255)).astype(np.uint8))
  with np.errstate(over="ignore"): want16 = a.astype(np.float16)
  np.testing.assert_array_equal(elementwise(lambda x: x.cast(dtypes.float16), f32, a, out_dt=dtypes.float16), want16)


IA = np.concatenate([RNG.integers(-2 ** 31, 2 ** 31, 56, dtype=np.int64), [0, 1, -1, 7, -7, 2 ** 31 - 1, -2 ** 31, 100]]).astype(np.int32)
IB = np.concatenate([RNG.integers(-2 ** 31, 2 ** 31, 56, dtype=np.int64), [5, 0, -1, 2, -3, -1, -1, 0]]).astype(np.int32)


def _tdiv(a, b):
  a, b = a.astype(np.int64), b.astype(np.int64)
  safe = np.where(b == 0, 1, b)
  q = np.where(b == 0, 0, np.sign(a) * np.sign(safe) * (np.abs(a) // np.abs(safe)))
  r = np.where(b == 0, 0, a - q * safe)
  return q.astype(np.int32), r.astype(np.int32)   # (wraps INT_MIN // -1 as int32 does)


@pytest.mark.parametrize("name,fn,ref", [
  ("add", lambda x, y: x + y, lambda a, b: a + b),
  ("mul", lambda x, y: x * y, lambda a, b: a * b),
  ("sub", lambda x, y: x - y, lambda a, b: a - b),
  ("max", lambda x, y: x.alu(Ops.MAX, y), np.maximum),
  ("and", lambda x, y: x & y, lambda a, b: a & b),
  ("or", lambda x, y: x | y, lambda a, b: a | b),
  ("xor", lambda x, y: x ^ y, lambda a, b: a ^ b),
  ("shl", lambda x, y: x << y, lambda a, b: (a.astype(np.uint32) << (b.astype(np.uint32) & 31)).astype(np.int32)),
  ("shr", lambda x, y: x >> y, lambda a, b: a >> (b & 31)),
  ("idiv", lambda x, y: x // y, lambda a, b: _tdiv(a, b)[0]),
  ("mod", lambda x, y: x % y, lambda a, b: _tdiv(a, b)[1]),
  ("cmplt", lambda x, y: (x < y).where(x, y), lambda a, b: np.where(a < b, a, b)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_int32_binary(name, fn, ref):
  with np.errstate(all="ignore"): want = ref(IA, IB).astype(np.int32)
  np.testing.assert_array_equal(elementwise(fn, i32, IA, IB), want)


def test_uint32_ops():
  a, b = IA.view(np.uint32), IB.view(np.uint32)
  np.testing.assert_array_equal(elementwise(lambda x, y: x.alu(Ops.MAX, y), u32, a, b), np.maximum(a, b))
  np.testing.assert_array_equal(elementwise(lambda x, y: x >> y, u32, a, b), a >> (b & 31))
  np.testing.assert_array_equal(elementwise(lambda x, y: (x < y).where(x, y), u32, a, b), np.where(a < b, a, b))
  with np.errstate(all="ignore"): q = np.where(b == 0, 0, a // np.where(b == 0, 1, b))
  np.testing.assert_array_equal(elementwise(lambda x, y: x // y, u32, a, b), q)


def test_int64_ops_lowered_to_32_bit_pairs():
  # ir3 has no 64-bit ALU: NIR lowers these to 32-bit pairs, the division to a divergent loop (brao/braa) and the
  # conversion to float through ufind_msb (clz: 0 gives -1)
  a = np.array([0, 1, -1, 2 ** 40 + 3, -2 ** 40 - 5, 2 ** 62, -2 ** 63 + 1, 12345678901], np.int64)
  b = np.array([3, -7, 5, 2 ** 33 + 1, 2 ** 20, -3, 1, -2 ** 35], np.int64)
  i64 = dtypes.int64
  np.testing.assert_array_equal(elementwise(lambda x, y: x + y, i64, a, b), a + b)
  with np.errstate(over="ignore"): np.testing.assert_array_equal(elementwise(lambda x, y: x * y, i64, a, b), a * b)
  np.testing.assert_array_equal(elementwise(lambda x, y: (x < y).where(x, y), i64, a, b), np.where(a < b, a, b))
  np.testing.assert_array_equal(elementwise(lambda x, y: x >> (y & 63), i64, a, b), a >> (b & 63))
  q = np.array([int(x / y) if abs(x) < 2 ** 52 else (abs(x) // abs(y)) * (1 if (x < 0) == (y < 0) else -1) for x, y in zip(a, b)], np.int64)
  np.testing.assert_array_equal(elementwise(lambda x, y: x // y, i64, a, b), q)
  np.testing.assert_array_equal(elementwise(lambda x: x.cast(f32), i64, a, out_dt=f32), a.astype(np.float32))


def test_int_casts():
  np.testing.assert_array_equal(elementwise(lambda x: x.cast(f32), i32, IA, out_dt=f32), IA.astype(np.float32))
  np.testing.assert_array_equal(elementwise(lambda x: x.cast(dtypes.int8), i32, IA, out_dt=dtypes.int8), IA.astype(np.int8))
  a8 = RNG.integers(0, 256, 40).astype(np.uint8)
  np.testing.assert_array_equal(elementwise(lambda x: x.cast(i32) * 3, dtypes.uint8, a8, out_dt=i32), a8.astype(np.int32) * 3)


def test_8bit_values_sign_and_zero_extension():
  # int8 arithmetic runs widened (cov.u8s16 sign-extends); uint8 widening masks with 0xff: both against NumPy
  u = np.array([0, 1, 127, 128, 200, 255, 3, 250], np.uint8)
  s8 = u.view(np.int8)
  for to in (f32, i32, dtypes.int16):
    np.testing.assert_array_equal(elementwise(lambda x: x.cast(to), dtypes.uint8, u, out_dt=to), u.astype(np_dtype(to)))
    np.testing.assert_array_equal(elementwise(lambda x: x.cast(to), dtypes.int8, s8, out_dt=to), s8.astype(np_dtype(to)))
  np.testing.assert_array_equal(elementwise(lambda x, y: x.alu(Ops.MAX, y), dtypes.int8, s8, s8[::-1].copy()), np.maximum(s8, s8[::-1]))
  np.testing.assert_array_equal(elementwise(lambda x: -x, dtypes.int8, s8), -s8)


def test_half_consts_are_the_low_bits_of_their_own_slot():
  # ir3 puts a 16-bit operand's immediate in a 32-bit const slot of its own and reads it as hcN.c (max.s hr, hr, hc1.y):
  # an int8 clamp and a half-float add with constants, against NumPy
  s8 = np.array([-128, -5, -1, 0, 5, 6, 7, 127], np.int8)
  clamp = lambda x: -(-x.alu(Ops.MAX, const(dtypes.int8, -1))).alu(Ops.MAX, const(dtypes.int8, -6))   # min(max(x, -1), 6)
  np.testing.assert_array_equal(elementwise(clamp, dtypes.int8, s8), np.clip(s8, -1, 6))
  h = np.array([0.5, -1.25, 3.0, 100.0, -0.0, 2.5], np.float16)
  got = elementwise(lambda x: x * const(dtypes.float16, 1.5) + const(dtypes.float16, -0.75), dtypes.float16, h)
  np.testing.assert_array_equal(got, h * np.float16(1.5) + np.float16(-0.75))


def test_sign_of_nan_is_zero():
  # NIR turns (0 < x) - (x < 0) into fsign, which ir3 runs as sign.f: NaN must give 0 as the comparisons do
  a = np.array([0.0, -0.0, np.nan, -np.nan, 1e-30, -1e-30, np.inf, -np.inf, 3.0], np.float32)
  got = elementwise(lambda x: (const(f32, 0.0) < x).cast(f32) - (x < const(f32, 0.0)).cast(f32), f32, a)
  assert "sign.f" in SEEN, sorted(SEEN)
  np.testing.assert_array_equal(got, (a > 0).astype(np.float32) - (a < 0).astype(np.float32))


def test_a_stored_bool_that_is_also_a_select_condition():
  # a bool made by an ALU op (and.b in a half register) that is both stored as a byte and a 32-bit select's
  # condition: Mesa's ir3_cf folded both conversions of it as half->full and failed validation (the renderer widens
  # the stored byte through 32 bits instead); compiled and run against NumPy
  n = len(FA)
  x, y = load(2, f32, (n,)), load(3, f32, (n,))
  cond = (x < y).alu(Ops.AND, x.ne(x).alu(Ops.CMPNE, const(dtypes.bool, True)))
  ast = sink(store(0, (n,), cond), store(1, (n,), cond.where(x, const(f32, 1.0))))
  ob, of = run_ast(ast, [np.zeros(n, np.bool_), np.zeros(n, np.float32)], [FA, FB])
  with np.errstate(invalid="ignore"): want = (FA < FB) & ~np.isnan(FA)
  np.testing.assert_array_equal(ob, want)
  np.testing.assert_array_equal(of, np.where(want, FA, np.float32(1.0)))


def matmul(M_, K, N, opts):
  sa = ShapeTracker.from_shape((M_, K)).reshape((M_, 1, K)).expand((M_, N, K))
  sb = ShapeTracker.from_shape((K, N)).permute((1, 0)).reshape((1, N, K)).expand((M_, N, K))
  A, B = RNG.standard_normal((M_, K)).astype(np.float32), RNG.standard_normal((K, N)).astype(np.float32)
  (o,) = run_ast(sink(store(0, (M_, N, 1), reduce(load(1, f32, sa) * load(2, f32, sb), Ops.ADD, (2,)))), [np.zeros(M_ * N, np.float32)],
                 [A.ravel(), B.ravel()], opts)
  np.testing.assert_allclose(o.reshape(M_, N), A @ B, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opts", [[], None], ids=["loops", "heuristic"])
def test_matmul_loops(opts): matmul(5, 33, 7, opts)


def test_workgroup_reduce_with_shared_memory_and_barrier():
  x = RNG.standard_normal(1024).astype(np.float32)
  (o,) = run_ast(sink(store(0, (1,), reduce(load(1, f32, (1024,)), Ops.ADD, (0,)))), [np.zeros(1, np.float32)], [x], [Opt(OptOps.GROUP, 0, 128)])
  np.testing.assert_allclose(o[0], x.sum(dtype=np.float64), rtol=1e-5)


@pytest.mark.parametrize("batch", [8192, 200], ids=["one_batch", "split"])
def test_workgroups_in_a_batch_have_their_own_local_memory_and_barriers(batch, monkeypatch):
  # 13 workgroups of 32 threads, each reducing its row through local memory: run together (one batch) or split over
  # batches of 200 lanes (6 groups per batch, then the rest), every row must be its own sum
  from baregrad.drivers.mock.adreno import ir3_exec
  monkeypatch.setattr(ir3_exec, "LANES_PER_BATCH", batch)
  x = RNG.standard_normal((13, 256)).astype(np.float32)
  (o,) = run_ast(sink(store(0, (13, 1), reduce(load(1, f32, (13, 256)), Ops.ADD, (1,)))), [np.zeros(13, np.float32)], [x.ravel()],
                 [Opt(OptOps.PARALLEL, 0, 0), Opt(OptOps.GROUP, 1, 32)])
  np.testing.assert_allclose(o, x.sum(1, dtype=np.float64), rtol=1e-5, atol=1e-5)


def test_barrier_skipped_by_some_lanes_of_one_workgroup_is_refused():
  # lanes of workgroup 1 with local id 0 branch past the barrier: refused naming the count; workgroup 0 alone is fine
  text = ("cmps.u.eq p0.x, r0.x, 0\ncmps.u.eq p0.y, r48.x, 1\nbraa p0.x, p0.y, #l4\nbar\nend\n")
  prg = Ir3Program(630, b"\0" * 16, 0, -1, 1, 0, 0, 1, 0, 0, (), 4 * 48, 0, (4, 1, 1), False, 0, ())
  Executor(GpuMemory()).run(prg, (1,), b"", program=parse(text))
  with pytest.raises(Ir3Error, match="barrier reached by 3 of 4 live lanes"): Executor(GpuMemory()).run(prg, (2,), b"", program=parse(text))


def test_max_reduce_and_padded_load():
  x = RNG.standard_normal(300).astype(np.float32)
  (o,) = run_ast(sink(store(0, (1,), reduce(load(1, f32, (300,)), Ops.MAX, (0,)))), [np.zeros(1, np.float32)], [x])
  assert o[0] == x.max()
  st = ShapeTracker.from_shape((10,)).pad(((3, 2),))   # a masked (padded) view: reads outside give 0
  y = RNG.standard_normal(10).astype(np.float32)
  (o,) = run_ast(sink(store(0, (15,), load(1, f32, st) + 1.0)), [np.zeros(15, np.float32)], [y])
  np.testing.assert_array_equal(o, np.pad(y, (3, 2)) + 1)


def test_missing_sy_is_a_reported_hazard():
  a = np.arange(8, dtype=np.float32)
  def strip_sy(text: str):
    prog = parse(text)
    for ins in prog: ins.sy = False
    return prog
  with pytest.raises(Ir3Error, match=r"hazard .* before a \(sy\) wait"):
    run_ast(sink(store(0, (8,), load(1, f32, (8,)) * 2.0)), [np.zeros(8, np.float32)], [a], program=strip_sy)


def test_missing_ss_is_a_reported_hazard():
  a = np.arange(1, 9, dtype=np.float32)
  def strip_ss(text: str):
    prog = parse(text)
    for ins in prog: ins.ss = False
    return prog
  with pytest.raises(Ir3Error, match=r"hazard .* before a \(ss\) wait"):
    run_ast(sink(store(0, (8,), load(1, f32, (8,)).alu(Ops.SQRT) + 1.0)), [np.zeros(8, np.float32)], [a], program=strip_ss)


def test_unknown_instruction_refused_by_name():
  prog = parse("foo.u r0.x, r0.y, r0.z\nend\n")
  prg = Ir3Program(630, b"\0" * 16, 0, -1, 1, 0, 0, 1, 0, 0, (), 0xFC, 0xFC, (1, 1, 1), False, 0, ())
  with pytest.raises(Ir3Error, match="'foo' is not modelled"): Executor(GpuMemory()).run(prg, (1,), b"", program=prog)


def test_half_result_of_a_full_source_is_the_32_bit_op_low_half():
  # `shr.b hr, r, 16`: ir3 folds the 32->16 bit move after a shift into it (how it takes the bytes of a 32-bit word
  # after a vector ldl); the shift is 32-bit, its low half written (a Q8_0 matmul read zeros for bytes 2 and 3)
  prog = parse("mov.u32u32 r0.x, 305419896\nmov.u32u32 r1.x, 4096\nmov.u32u32 r1.y, 0\nshr.b hr8.x, r0.x, 16\n"
               "shr.b hr8.y, r0.x, 24\nstg.u16 g[r1.x], hr8.x, 1\nstg.u16 g[r1.x+2], hr8.y, 1\nend\n")
  prg = Ir3Program(630, b"\0" * 16, 0, -1, 1, 0, 0, 1, 0, 0, (), 0xFC, 0xFC, (1, 1, 1), False, 0, ())
  mem, out = GpuMemory(), bytearray(16)
  mem.map(4096, out)
  Executor(mem).run(prg, (1,), b"", program=prog)
  assert struct.unpack_from("<2H", out) == (0x1234, 0x12)


def test_unmapped_store_is_a_page_fault():
  prog = parse("mov.u32u32 r0.x, 4096\nmov.u32u32 r0.y, 0\nstg.u32 g[r0.x], r0.x, 1\nend\n")
  prg = Ir3Program(630, b"\0" * 16, 0, -1, 1, 0, 0, 1, 0, 0, (), 0xFC, 0xFC, (1, 1, 1), False, 0, ())
  with pytest.raises(CPError, match="page fault: 4 bytes at 0x1000"): Executor(GpuMemory()).run(prg, (1,), b"", program=prog)


def test_forms_covered():
  # the forms the kernels of this file make the executor run, so a compiler change that emits a new form shows up here
  # (and an executor without it fails the kernel test that needs it). The file's tests run again here, in this process:
  # under pytest -n they are spread over workers, each seeing part of the forms
  SEEN.clear()
  for name, fn in list(globals().items()):
    if not name.startswith("test_") or fn is test_forms_covered or not callable(fn): continue
    marks = [m for m in getattr(fn, "pytestmark", []) if m.name == "parametrize"]
    if not marks: calls: list[tuple] = [()]
    else:
      n = len([a for a in marks[0].args[0].split(",") if a.strip()])
      vals = [v.values if hasattr(v, "values") and not isinstance(v, (list, tuple)) else v for v in marks[0].args[1]]
      calls = [tuple(v) if n > 1 else (v,) for v in vals]
    for args in calls:
      try: fn(*args)
      except Exception: pass   # (a failure is reported by that test itself)
  for form in ("ldg.u32", "stg.u32", "add.f", "mul.f", "mad.f32", "madsh.m16", "mull.u", "cmps.s.lt", "sel.b32", "cov.u16s32", "shrg",
               "ldl.u32", "stl.u32", "bar.g", "br", "jump", "rcp", "sqrt", "exp2", "log2", "sin", "predt", "prede"):
    assert form in SEEN, f"{form} never ran; ran: {sorted(SEEN)}"
