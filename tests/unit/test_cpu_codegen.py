"""CPU code generation: awkward sizes keep vector tiles (PADTO: masked edges, the reduction's identity past the end),
masked vector accesses never touch memory past the end, register tiles wider than a register are split into chunks
(and concatenated back where an access has several contiguous runs), unrolled lanes reduce in a tree. Every kernel runs
on both CPU renderers against NumPy."""
from __future__ import annotations
import numpy as np
import pytest
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import Ops
from baregrad.ir.view import ShapeTracker
from baregrad.codegen.astbuild import load, store, reduce, sink, const
from baregrad.codegen.kernel import Kernel, Opt, OptOps, OptError
from baregrad.codegen.program import get_program
from baregrad.engine.runner import run_ast
from baregrad.hal import Buffer, Device
from tests.helpers import DEVICES, run, make_buffer, read_buffer

f32, i32, i8, b1 = dtypes.float32, dtypes.int32, dtypes.int8, dtypes.bool
U, R, P, PAD = OptOps.UPCAST, OptOps.UNROLL, OptOps.PARALLEL, OptOps.PADTO

def matmul(M: int, K: int, N: int, transposed_b: bool = False):
  sa = ShapeTracker.from_shape((M, K)).reshape((M, 1, K)).expand((M, N, K))
  sb = (ShapeTracker.from_shape((N, K)).reshape((1, N, K)) if transposed_b else
        ShapeTracker.from_shape((K, N)).permute((1, 0)).reshape((1, N, K))).expand((M, N, K))
  return sink(store(0, (M, N, 1), reduce(load(1, f32, sa) * load(2, f32, sb), Ops.ADD, (2,))))

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape,tb", [((37, 53, 29), False), ((67, 19, 41), True), ((1, 131, 45), False), ((45, 131, 1), False),
                                      ((33, 257, 17), False)], ids=str)
def test_awkward_matmuls_keep_vector_tiles(device, shape, tb):
  M, K, N = shape
  rng = np.random.default_rng(M * K * N)
  a, b = rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal((N, K) if tb else (K, N), dtype=np.float32)
  (got,) = run(matmul(M, K, N, tb), [(M * N, f32)], [(a, f32), (b, f32)], device)
  np.testing.assert_allclose(got.reshape(M, N), a @ (b.T if tb else b), rtol=1e-4, atol=1e-4)
  if device == "CPU":  # no scalar fallback: some axis takes a register of lanes or more, padded where the size is odd
    ren = Device["CPU"].renderer
    opts = get_program(matmul(M, K, N, tb), ren).opts
    lanes = ren.simd_lanes if ren.vectorized else 4   # (DEV=CPU:C: scalar C, lanes are separate variables)
    assert any(o.op in (U, R) and o.amt >= lanes for o in opts) or max(shape) < lanes, opts

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", [Ops.ADD, Ops.MUL, Ops.MAX], ids=lambda o: o.name)
def test_padded_unroll_reduces_with_the_identity(device, op):
  n = 1037   # 1037 = 17 * 61: no lane count divides it
  rng = np.random.default_rng(n)
  x = (1 + 0.01 * rng.standard_normal(n)).astype(np.float32) if op is Ops.MUL else (-5 - rng.random(n)).astype(np.float32)
  ast = sink(store(0, (1,), reduce(load(1, f32, (n,)), op, (0,))))
  want = {Ops.ADD: np.sum, Ops.MUL: np.prod, Ops.MAX: np.max}[op](x.astype(np.float64))
  for opts in (None, [Opt(PAD, 0, 64), Opt(R, 0, 64)], [Opt(PAD, 0, 16), Opt(R, 0, 16)]):
    (got,) = run(ast, [(1, f32)], [(x, f32)], device, opts=opts)
    # all values are negative: a padded lane that fed 0 into the max would show
    np.testing.assert_allclose(got[0], want, rtol=1e-4, err_msg=f"{op} opts={opts}")

@pytest.mark.parametrize("device", DEVICES)
def test_padded_reduction_keeps_nan_and_minus_inf(device):
  x = np.full(37, -np.inf, np.float32)
  ast = sink(store(0, (1,), reduce(load(1, f32, (37,)), Ops.MAX, (0,))))
  opts = [Opt(PAD, 0, 16), Opt(R, 0, 16)]
  assert run(ast, [(1, f32)], [(x, f32)], device, opts=opts)[0][0] == -np.inf
  x[20] = np.nan
  assert np.isnan(run(ast, [(1, f32)], [(x, f32)], device, opts=opts)[0][0])

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", [f32, i8, b1], ids=lambda d: d.name)
def test_masked_stores_write_nothing_past_the_end(device, dt):
  # the output is a view into a larger buffer whose tail holds a sentinel: a padded tile must not touch it
  n, tail = 37, 29
  x = (np.arange(n) % 5 > 1) if dt == b1 else (np.arange(n) % 100).astype(np.float32 if dt == f32 else np.int8)
  val = load(1, dt, (n,))
  ast = sink(store(0, (n,), val.logical_not() if dt == b1 else val * const(dt, 2)))
  sentinel = np.ones(n + tail, bool) if dt == b1 else np.full(n + tail, 77, np.float32 if dt == f32 else np.int8)
  for opts in (None, [Opt(PAD, 0, 16), Opt(U, 0, 16)], [Opt(PAD, 0, 32), Opt(U, 0, 32), Opt(P, 0)]):
    base = make_buffer(device, sentinel, dt)
    out = Buffer(device, n, dt, base=base, offset=0)
    run_ast(ast, [out, make_buffer(device, x, dt)], device=device, opts=opts)
    got = read_buffer(base)
    want = (~x) if dt == b1 else x * 2
    np.testing.assert_array_equal(got[:n], want, err_msg=f"opts={opts}")
    np.testing.assert_array_equal(got[n:], sentinel[n:], err_msg=f"opts={opts}: wrote past the end")

def test_masked_edge_takes_plain_accesses_where_every_lane_is_valid():
  # a padded elementwise loop: only its last iteration has lanes past the end; the others store plainly (a masked
  # store on every iteration made relu(x*y+z) 2.5x slower on AVX2), the masked forms stay for the edge. Loads take the
  # same branch where a masked load costs more (AVX2's vmaskmov); on AVX-512 it is one plain instruction, so they are
  # masked loads without a branch (see the next test)
  n = 16 * 5 + 3
  ast = sink(store(0, (n,), load(1, f32, ShapeTracker.from_shape((n,))) * load(2, f32, ShapeTracker.from_shape((n,)))))
  opts = [Opt(PAD, 0, 16), Opt(U, 0, 16)]
  if "define void" not in get_program(ast, Device["CPU"].renderer, opts).src: pytest.skip("the CPU renderer here is not LLVM IR")
  avx2, avx512 = get_program(ast, _host_like(8, 16), opts).src, get_program(ast, _host_like(16, 32), opts).src
  for src in (avx2, avx512):
    assert "@llvm.masked.store.v16f32" in src and "@llvm.vector.reduce.and.v16i1" in src and "store <16 x float>" in src
  assert avx2.count("load <16 x float>, ptr") == 2 and avx2.count("@llvm.masked.load.v16f32.p0(ptr %") == 2
  assert avx512.count("load <16 x float>, ptr") == 0 and avx512.count("@llvm.masked.load.v16f32.p0(ptr %") == 2
  x, y = np.arange(n, dtype=np.float32), np.arange(n, dtype=np.float32)[::-1].copy()
  (got,) = run(ast, [(n, f32)], [(x, f32), (y, f32)], "CPU", opts=opts)
  np.testing.assert_array_equal(got, x * y)

def test_avx512_padded_gemm_loads_without_branches():
  # a GEMM whose lanes are padded (196 positions of a 14x14 image in tiles of 32): with a branch around each masked
  # load, a row's scalar weight load and its broadcast fell in different basic blocks, so instruction selection could
  # not fold them into one broadcast load: each of the 8 broadcasts took a shuffle on an FMA port (ResNet-50's 1x1
  # layers at 14x14 2-3x slower). On AVX-512 the reduction's loop has no branch but its own; the stores after it keep theirs
  M, K, N = 16, 64, 196
  opts = [Opt(PAD, 1, 32), Opt(U, 1, 32), Opt(U, 0, 8)]
  src = get_program(matmul(M, K, N), _host_like(16, 32), opts).src
  if "define void" not in src: pytest.skip("the CPU renderer here is not LLVM IR")
  body = src[src.index("define void"):]
  last_fma = body.rindex("@llvm.fma.v16f32(")
  assert "@llvm.masked.load.v16f32.p0(ptr %" in body[:last_fma]
  assert "@llvm.vector.reduce.and" not in body[:last_fma], "a branch around a load inside the reduction"
  assert "@llvm.masked.store.v16f32" in body[last_fma:]
  rng = np.random.default_rng(5)
  a, b = rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal((K, N), dtype=np.float32)
  (got,) = run(matmul(M, K, N), [(M * N, f32)], [(a, f32), (b, f32)], "CPU", opts=opts)
  np.testing.assert_allclose(got.reshape(M, N), a @ b, rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("device", DEVICES)
def test_tile_rows_are_vector_runs(device):
  # a 2D tile of a row-major array: each row of the tile is one contiguous run (one vector access per run, concatenated)
  M, N = 13, 40
  x = np.arange(M * N, dtype=np.float32).reshape(M, N)
  st = ShapeTracker.from_shape((M, N))
  ast = sink(store(0, (M, N), load(1, f32, st) + load(2, f32, ShapeTracker.from_shape((N, M)).permute((1, 0)))))
  y = np.random.default_rng(3).standard_normal((N, M)).astype(np.float32)
  for opts in ([Opt(PAD, 0, 4), Opt(U, 0, 4), Opt(U, 1, 8)], [Opt(U, 1, 20), Opt(PAD, 0, 2), Opt(U, 0, 2)]):
    (got,) = run(ast, [(M * N, f32)], [(x, f32), (y, f32)], device, opts=opts)
    np.testing.assert_array_equal(got.reshape(M, N), x + y.T, err_msg=f"opts={opts}")

def test_register_split_renders_chunks():
  # an 8x32 accumulator tile is 256 lanes: the LLVM IR holds 16-lane registers only, one FMA per register
  spec = get_program(matmul(64, 64, 64), Device["CPU:LLVM"].renderer, [Opt(U, 1, 32), Opt(U, 0, 8)])
  assert "<256 x" not in spec.src and "<32 x" not in spec.src
  assert spec.src.count("call <16 x float> @llvm.fma.v16f32") == 16

def test_padto_rules():
  k = Kernel(matmul(36, 53, 29))
  with pytest.raises(OptError, match="already a multiple"): Kernel(matmul(32, 8, 8)).apply_opt(Opt(PAD, 0, 16))
  k.apply_opt(Opt(U, 0, 4))   # 36 = 9 x 4: the loop part of axis 0 is split already
  with pytest.raises(OptError, match="before splitting"): k.apply_opt(Opt(PAD, 0, 8))

def _host_like(simd_lanes: int, registers: int):
  # the LLVM renderer's vector tiles, whichever CPU variant DEV names (under DEV=CPU:C the default renderer is C)
  import copy
  ren = copy.copy(Device["CPU:LLVM"].renderer)
  ren.simd_lanes, ren.vector_registers = simd_lanes, registers
  return ren

@pytest.mark.parametrize("lanes,regs", [(8, 16), (16, 32), (4, 32)])
def test_matmul_register_tile_fits_the_register_file(lanes, regs):
  # accumulators (tile lanes / register lanes) leave room for the loads: an AVX2 core has 16 registers, AVX-512 32;
  # an 8x32 tile on AVX2 spilled every accumulator to the stack (a third of the 6x16 tile's speed)
  ren = _host_like(lanes, regs)
  for M, K, N, tb in ((512, 512, 512, False), (96, 300, 256, False), (128, 784, 256, True)):
    opts = get_program(matmul(M, K, N, tb), ren).opts
    tile = 1
    for o in opts:
      if o.op is U: tile *= o.amt
    accs = tile // lanes if not tb else tile   # dot form: one register per output
    if tb: assert any(o.op is R and o.amt == lanes for o in opts), opts   # reduce lanes: one register
    assert 4 <= accs <= regs - 4, (M, K, N, tb, opts)

def test_small_kernels_stay_on_one_core():
  # handing part of a few-µs kernel to a pool thread costs more than the kernel
  ren = Device["CPU"].renderer
  small = get_program(sink(store(0, (10, 256), load(1, f32, (10, 256)) * 2)), ren).opts
  big = get_program(sink(store(0, (512, 512), load(1, f32, (512, 512)) * 2)), ren).opts
  assert not any(o.op is P for o in small) and any(o.op is P for o in big), (small, big)

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(96, 64), (61, 37), (5, 40, 24)], ids=str)
def test_a_transpose_takes_a_square_tile(device, shape):
  """A load contiguous along another axis than the store's (x.T.contiguous()): lanes along the store's axis alone
  read each lane from another cache line and page (2048x1024: 16 ms); a tile of one register's lanes along both axes
  (0.8 ms). Awkward sizes keep it (a divisor or padding), and the values are the transpose."""
  from baregrad import Tensor
  a = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
  y = Tensor(a, device=device).transpose(-1, -2).contiguous()
  ren = Device[device].renderer
  opts = get_program(y.schedule()[-1].ast, ren).opts
  ups = {o.axis: o.amt for o in opts if o.op is U}
  # one register's lanes per axis, or a short axis (under two registers) taken whole (24 on a 16-lane AVX-512 host)
  if ren.vectorized: assert len(ups) == 2 and all(v <= ren.simd_lanes or (v in shape and v < 2 * ren.simd_lanes) for v in ups.values()), opts
  np.testing.assert_array_equal(y.numpy(), np.swapaxes(a, -1, -2))

def test_short_awkward_rows_take_a_divisor_not_padding():
  # a 3x3 convolution's 26-wide output rows: 16 padded lanes mask every access of both tiles of a row (4x slower than
  # 13 lanes); a divisor at least half as wide is taken instead, and the result is right
  from baregrad import Tensor, functional as F
  rng = np.random.default_rng(0)
  x, w = rng.standard_normal((2, 1, 28, 28), dtype=np.float32), rng.standard_normal((8, 1, 3, 3), dtype=np.float32)
  out = F.conv2d(Tensor(x), Tensor(w))
  # (an AVX2-like host: 8 lanes a register. With 16, two registers' 32 lanes take a 26-wide row whole: padded to 32)
  opts = get_program(out.schedule()[-1].ast, _host_like(8, 16)).opts
  assert not any(o.op is PAD for o in opts) and any(o.op is U and o.amt == 13 for o in opts), opts
  import torch
  np.testing.assert_allclose(out.numpy(), torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w)).numpy(), rtol=1e-4, atol=1e-4)

def test_short_rows_are_padded_to_whole_registers(generic_conv):
  # mnist_cnn's conv2 (8 -> 16 channels, 11-wide output rows, 72 terms per output): 11 lanes per row would make the
  # tile's 16-lane registers straddle rows (shuffles and inserts around every FMA); padded to 16 lanes, each row is
  # whole registers (4 rows: 2.3x faster on one core than 11 lanes x 8 rows). conv1's 26-wide rows keep a divisor (13,
  # no padding). Both give the right numbers.
  from baregrad import Tensor, functional as F
  import torch
  rng = np.random.default_rng(1)
  ren = _host_like(8, 16)
  for cin, cout, hw, pad, lanes, rows in ((8, 16, 13, 16, 16, 4), (1, 8, 28, None, 13, 4)):
    x, w = rng.standard_normal((2, cin, hw, hw), dtype=np.float32), rng.standard_normal((cout, cin, 3, 3), dtype=np.float32)
    out = F.conv2d(Tensor(x), Tensor(w))
    opts = get_program(out.schedule()[-1].ast, ren).opts
    assert [o.amt for o in opts if o.op is PAD] == ([pad] if pad else []), (cin, cout, opts)
    assert [o.amt for o in opts if o.op is U] == [lanes, rows], (cin, cout, opts)
    np.testing.assert_allclose(out.numpy(), torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w)).numpy(), rtol=1e-4, atol=1e-4)

def test_parallel_chunks_keep_64_bit_address_steps(generic_conv):
  # a parallel kernel runs over a chunk [start, end) of its parallel axis; without the arguments' ranges LLVM cannot
  # tell the 32-bit index math does not overflow and sign-extends and recomputes every address (mnist_cnn's conv2 ran
  # 2.5x slower per thread split over threads than whole). The machine code of a chunk's loop equals the whole loop's.
  import collections, re
  from baregrad import Tensor, functional as F
  from baregrad.drivers.cpu_compile import _llvm_target
  llvm, tm = _llvm_target()
  x, w = Tensor(np.zeros((32, 8, 13, 13), np.float32)), Tensor(np.zeros((16, 8, 3, 3), np.float32))
  ast = F.conv2d(x, w).schedule()[-1].ast
  ren = Device["CPU:LLVM"].renderer
  opts = [Opt(PAD, 3, 16), Opt(U, 3, 16), Opt(U, 1, 4)]
  def sext(src: str) -> int:
    mod = llvm.parse_assembly(src)
    mod.triple, mod.data_layout = tm.triple, str(tm.target_data)
    pto = llvm.create_pipeline_tuning_options(speed_level=2)
    pto.loop_vectorization = pto.slp_vectorization = False
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    ops = collections.Counter(re.findall(r"^\s+([a-z0-9]+)", tm.emit_assembly(mod), re.M))
    return ops["movslq"] + ops["cltq"]
  par = get_program(ast, ren, opts + [Opt(P, 0)]).src
  assert "i64 range(i64 0, 33) %start, i64 range(i64 0, 33) %end" in par
  assert sext(par) <= sext(get_program(ast, ren, opts).src)

def test_outputs_past_the_cache_are_stored_non_temporally(monkeypatch):
  # a vector store whose indices span more than the last-level cache bypasses it: a plain store reads each line it
  # writes first (relu(x*y+z) over 16M floats: kernel 11.4-13.3 -> 7.7-9.7 ms). Weakly ordered, so the kernel fences
  # before it returns (the pool then reports the chunk done). Smaller outputs, and renderers without a threshold, keep
  # plain stores, as do kernels with a reduction loop; results are equal either way, the masked edge included.
  import re
  from baregrad.drivers.cpu_compile import host_stream, _llvm_target
  from baregrad.drivers.elf_loader import disassemble
  ren = Device["CPU:LLVM"].renderer
  nbytes, fence = host_stream()
  assert ren.stream_bytes == nbytes > 0 and ren.stream_fence == fence
  n = 16 * 1024 + 3
  ast = sink(store(0, (n,), (load(1, f32, ShapeTracker.from_shape((n,))) * 2.0 + 1.0)))
  monkeypatch.setattr(ren, "stream_bytes", 4 * n)   # this kernel's output spans exactly that: streamed
  opts = [Opt(PAD, 0, 16), Opt(U, 0, 16), Opt(P, 0)]
  spec = get_program(ast, ren, opts)
  assert "!nontemporal" in spec.src and f"  {fence}\n  ret void" in spec.src
  if _llvm_target()[1].triple.startswith("x86_64"):
    lib = Device["CPU:LLVM"].compiler.compile(spec.src)
    asm = disassemble(lib, spec.name)
    assert re.search(r"\bv?movnt", asm) and "sfence" in asm
  x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
  out, inp = Buffer("CPU:LLVM", n, f32).allocate(), Buffer("CPU:LLVM", n, f32).copyin(memoryview(x))
  run_ast(ast, [out, inp], "CPU:LLVM", opts)
  np.testing.assert_array_equal(np.frombuffer(out.as_memoryview(), np.float32), x * 2.0 + 1.0)
  monkeypatch.setattr(ren, "stream_bytes", 4 * (n + 16 + 1))   # more than its (padded) indices span: plain stores
  assert "!nontemporal" not in get_program(ast, ren, opts).src and fence not in get_program(ast, ren, opts).src
  monkeypatch.setattr(ren, "stream_bytes", 0)
  assert "!nontemporal" not in get_program(ast, ren, opts).src
  # a kernel with a reduction loop keeps plain stores, however big its output (its tiles are written after their K loop)
  monkeypatch.setattr(ren, "stream_bytes", 64)
  assert "!nontemporal" not in get_program(matmul(64, 32, 64), ren, [Opt(U, 1, 16), Opt(U, 0, 4)]).src

@pytest.mark.parametrize("threads", [2, 4])
def test_parallel_loop_deals_whole_tiles_evenly(monkeypatch, threads):
  # 196 positions are 7 tiles of 32 lanes: dealt to 2 threads, one core idles for a seventh of the kernel (4 tiles
  # against 3); the 32 row tiles of 256 output channels split evenly, so they take the cores. With many position tiles
  # (3136: 98) the positions keep them (a panel of the lane operand stays in each core's cache)
  monkeypatch.setenv("CPU_THREADS", str(threads))
  ren = _host_like(16, 32)
  def parallel_size(M: int, K: int, N: int) -> int:
    k = Kernel(matmul(M, K, N), ren=ren)
    from baregrad.codegen.heuristic import heuristic_opts
    opts = heuristic_opts(k, ren)
    (p,) = [o for o in opts if o.op is P]
    return k.axes[k.loop_axes()[p.axis]].size
  assert parallel_size(256, 1152, 196) == 32
  assert parallel_size(64, 576, 3136) == 98
