"""Tensor cores (OptOps.TC) on the mock NVIDIA GPU: mma.sync m16n8k16 f16/bf16 and m16n8k8 tf32 (behind the allow-tf32
switch), on operands read straight from global memory or staged in shared memory (cp.async double buffering, ldmatrix
with and without .trans), edge tiles padded (PADTO), several warps and several fragments a warp; the heuristic's choice;
the 4096^3 kernel's structure (mma.sync pairs, 128x128 and 128x256 block tiles of 64x64 warp tiles, 2-3 stage cp.async
pipelines, swizzled tiles without bank conflicts, the epilogue through shared memory) at small shapes.
Results against NumPy in float64; the generated PTX assembles with ptxas for sm_80, sm_89 and sm_90."""
from __future__ import annotations
import numpy as np
import pytest
from baregrad.hal import Buffer
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import Ops
from baregrad.ir.view import ShapeTracker
from baregrad.codegen.astbuild import load, store, reduce, sink
from baregrad.codegen.kernel import Kernel, Opt, OptOps, OptError
from baregrad.codegen.program import get_program
from baregrad.codegen.renderer.ptx import PTXRenderer
from baregrad.codegen.tc import set_allow_tf32, allow_tf32
from baregrad.codegen.gpu_heuristic import apply
from baregrad.engine.runner import compile_ast
from tests.helpers import mock_nv_device
from baregrad.drivers.nv_compile import find_ptxas

f16, bf16, f32 = dtypes.float16, dtypes.bfloat16, dtypes.float32

@pytest.fixture(scope="module", autouse=True)
def nv():
  """One mock Hopper registered as Device["NV"] for the module."""
  with mock_nv_device() as dev: yield dev

def _bits(x: np.ndarray, dt) -> np.ndarray:
  if dt == bf16: return (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16)   # inputs chosen exact in bf16
  return np.asarray(x, np.float16 if dt == f16 else np.float32)

def matmul_ast(m, n, k, dt, acc=f32, b_transposed=False):
  sa = ShapeTracker.from_shape((m, k)).reshape((m, 1, k)).expand((m, n, k))
  sb = (ShapeTracker.from_shape((n, k)).reshape((1, n, k)) if b_transposed else
        ShapeTracker.from_shape((k, n)).permute((1, 0)).reshape((1, n, k))).expand((m, n, k))
  la, lb = load(1, dt, sa), load(2, dt, sb)
  prod_ = (la * lb).cast(acc) if dt != acc else la * lb   # as the Tensor frontend builds a half matmul
  return sink(store(0, (m, n, 1), reduce(prod_, Ops.ADD, (2,))))

def run_matmul(m, n, k, dt, opts, b_transposed=False, seed=0):
  rng = np.random.default_rng(seed)
  a = rng.integers(-8, 8, (m, k)).astype(np.float32) / 4   # exact in every input type: only the sum order differs
  b = rng.integers(-8, 8, (k, n)).astype(np.float32) / 4
  ast = matmul_ast(m, n, k, dt, b_transposed=b_transposed)
  r = compile_ast(ast, "NV", opts)
  bufs = [Buffer("NV", m * n, f32).allocate(), Buffer("NV", m * k, dt).allocate(), Buffer("NV", k * n, dt).allocate()]
  bufs[1].copyin(memoryview(np.ascontiguousarray(_bits(a, dt))).cast("B"))
  bufs[2].copyin(memoryview(np.ascontiguousarray(_bits(b.T if b_transposed else b, dt))).cast("B"))
  r(bufs, wait=True)
  out = np.empty(m * n, np.float32); bufs[0].copyout(memoryview(out).cast("B"))
  return out.reshape(m, n), a.astype(np.float64) @ b, r

def opts_for(m, n, k, dt, tc, warps=(1, 1), tiles=(1, 1), bk=0, smem=False, pad=True):
  """Build TC opts by full-shape axis (m=0, n=1, k=2) on a throwaway kernel, so axis numbers stay right."""
  kern = Kernel(matmul_ast(m, n, k, dt), gpu=True, ren=PTXRenderer())
  if pad:
    for o, t in ((0, 16 * warps[0] * tiles[0]), (1, 8 * warps[1] * tiles[1]), (2, 16 * max(1, bk))):
      if kern.full_shape[o] % t: assert apply(kern, OptOps.PADTO, o, t, ("loop", "reduce"))
  kern.apply_opt(Opt(OptOps.TC, tc))
  for o, u in enumerate(tiles):
    if u > 1: assert apply(kern, OptOps.UPCAST, o, u, ("loop",))
  for o, w in enumerate(warps):
    if w > 1: assert apply(kern, OptOps.LOCAL, o, w, ("loop",))
  if bk > 1: assert apply(kern, OptOps.SPLIT, 2, bk, ("reduce",))
  if smem:
    kern.apply_opt(Opt(OptOps.SMEM, 0)); kern.apply_opt(Opt(OptOps.SMEM, 1))
  for o in (1, 0):
    apply(kern, OptOps.PARALLEL, o, 0, ("loop",))
  return kern.applied

@pytest.mark.parametrize("dt,tc", [(f16, 0), (bf16, 1)])
@pytest.mark.parametrize("m,n,k,warps,tiles,bk,smem", [
  (16, 8, 16, (1, 1), (1, 1), 0, False),          # one fragment
  (32, 24, 48, (2, 1), (1, 3), 0, False),         # two warps, three n fragments a warp, a k loop, global operands
  (17, 33, 65, (1, 2), (2, 1), 2, True),          # edge tiles: every axis padded; staged (cp.async, ldmatrix / .trans)
  (64, 32, 64, (2, 2), (2, 2), 2, True),
])
def test_tc_matmul(dt, tc, m, n, k, warps, tiles, bk, smem):
  got, want, r = run_matmul(m, n, k, dt, opts_for(m, n, k, dt, tc, warps, tiles, bk, smem))
  np.testing.assert_array_equal(got, want)
  assert "mma.sync.aligned.m16n8k16" in r.spec.src
  if smem: assert all(x in r.spec.src for x in ("ldmatrix.sync.aligned.m8n8.x4.shared.b16", ".trans.shared.b16", "cp.async", "cp.async.wait_group 0;"))

def test_tc_b_operand_k_contiguous_uses_plain_ldmatrix():
  got, want, r = run_matmul(32, 16, 32, f16, opts_for(32, 16, 32, f16, 0, bk=2, smem=True), b_transposed=True)
  np.testing.assert_array_equal(got, want)
  assert ".trans" not in r.spec.src and "ldmatrix.sync.aligned.m8n8.x2.shared.b16" in r.spec.src

def test_tf32_is_off_by_default_and_switchable():
  assert not allow_tf32()
  k = Kernel(matmul_ast(16, 8, 8, f32), gpu=True, ren=PTXRenderer())
  with pytest.raises(OptError, match="tf32 is not allowed"): k.apply_opt(Opt(OptOps.TC, 2))
  spec = get_program(matmul_ast(64, 64, 64, f32), PTXRenderer())
  assert not any(o.op is OptOps.TC for o in spec.opts) and "mma" not in spec.src
  set_allow_tf32(True)
  try:
    got, want, r = run_matmul(16, 16, 24, f32, opts_for(16, 16, 24, f32, 2))
    np.testing.assert_array_equal(got, want)   # quarters: exact in tf32 too
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in r.spec.src and "cvt.rna.tf32.f32" in r.spec.src
    spec = get_program(matmul_ast(64, 64, 64, f32), PTXRenderer())
    assert any(o.op is OptOps.TC for o in spec.opts)
  finally: set_allow_tf32(None)

def test_tf32_rounds_its_inputs():
  set_allow_tf32(True)
  try:
    m, n, k = 16, 8, 8
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    r = compile_ast(matmul_ast(m, n, k, f32), "NV", opts_for(m, n, k, f32, 2))
    bufs = [Buffer("NV", m * n, f32).allocate(), Buffer("NV", m * k, f32).allocate(), Buffer("NV", k * n, f32).allocate()]
    bufs[1].copyin(memoryview(a).cast("B")); bufs[2].copyin(memoryview(b).cast("B"))
    r(bufs, wait=True)
    out = np.empty(m * n, np.float32); bufs[0].copyout(memoryview(out).cast("B"))
    def tf(x):   # cvt.rna.tf32.f32: nearest, ties away from zero, 10 mantissa bits
      u = x.view(np.uint32).astype(np.uint64)
      return ((u + 0x1000) & 0xFFFFE000).astype(np.uint32).view(np.float32).astype(np.float64)
    np.testing.assert_allclose(out.reshape(m, n), tf(a) @ tf(b), rtol=1e-6, atol=1e-6)
  finally: set_allow_tf32(None)

def test_heuristic_picks_tensor_cores_for_a_half_matmul():
  from baregrad.tensor import Tensor
  rng = np.random.default_rng(5)
  a, b = rng.integers(-4, 4, (64, 48)).astype(np.float16), rng.integers(-4, 4, (48, 64)).astype(np.float16)
  t = Tensor(a, device="NV") @ Tensor(b, device="NV")
  (item,) = t.schedule()
  spec = compile_ast(item.ast, "NV").spec
  assert any(o.op is OptOps.TC for o in spec.opts) and any(o.op is OptOps.SMEM for o in spec.opts)
  np.testing.assert_array_equal(t.numpy().astype(np.float64), a.astype(np.float64) @ b)

def test_tc_needs_a_matmul_shape_and_divisible_axes():
  k = Kernel(matmul_ast(17, 8, 16, f16), gpu=True, ren=PTXRenderer())
  with pytest.raises(OptError, match="PADTO first"): k.apply_opt(Opt(OptOps.TC, 0))
  with pytest.raises(OptError, match="takes dtypes.bfloat16"): Kernel(matmul_ast(16, 8, 16, f16), gpu=True, ren=PTXRenderer()).apply_opt(Opt(OptOps.TC, 1))
  with pytest.raises(OptError, match="0 tensor cores"): Kernel(matmul_ast(16, 8, 16, f16)).apply_opt(Opt(OptOps.TC, 0))
  ew = sink(store(0, (16, 8), load(1, f16, (16, 8)) * load(2, f16, (16, 8))))
  with pytest.raises(OptError, match="not a sum of products"): Kernel(ew, gpu=True, ren=PTXRenderer()).apply_opt(Opt(OptOps.TC, 0))
  k = Kernel(matmul_ast(32, 8, 16, f16), gpu=True, ren=PTXRenderer()); k.apply_opt(Opt(OptOps.TC, 0))
  with pytest.raises(OptError, match="tensor-core tile"): k.apply_opt(Opt(OptOps.LOCAL, 1, 2))   # the lane part of m

@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not found")
@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_90"])
def test_tc_kernels_assemble(arch):
  from baregrad.drivers.nv_compile import PTXCompiler
  set_allow_tf32(True)
  try:
    srcs = [get_program(matmul_ast(64, 32, 64, dt), PTXRenderer(), opts_for(64, 32, 64, dt, tc, (2, 2), (2, 2), 2, True)).src
            for dt, tc in ((f16, 0), (bf16, 1))]
    srcs.append(get_program(matmul_ast(32, 16, 32, f32), PTXRenderer(), opts_for(32, 16, 32, f32, 2, (2, 1), (1, 2), 2, True)).src)
    srcs.append(get_program(matmul_ast(32, 16, 32, f16), PTXRenderer(), opts_for(32, 16, 32, f16, 0, bk=2, smem=True), ).src)
  finally: set_allow_tf32(None)
  for s in srcs: PTXCompiler(arch).compile(s)

# ---- the 4096^3 kernel's structure (issue 32 item 2) at mock-sized shapes: mma.sync pairs (m16n16k16: B of two
# instructions from one ldmatrix.x4), 2x2 warps of 4x4 units = a 128x128 block of 64x64 warp tiles, k-steps of 32 staged
# through an S-stage cp.async pipeline, XOR-swizzled tiles
PAIR = {f16: 3, bf16: 4}

def gemm_opts(m, n, k, dt, stages, warp_units=(4, 4), warps=(2, 2)):
  kern = Kernel(matmul_ast(m, n, k, dt), gpu=True, ren=PTXRenderer(), max_parallel=3)   # block tiles on the grid
  for o, t in ((0, 16 * warps[0] * warp_units[0]), (1, 16 * warps[1] * warp_units[1]), (2, 32)):
    if kern.full_shape[o] % t: assert apply(kern, OptOps.PADTO, o, t, ("loop", "reduce"))
  kern.apply_opt(Opt(OptOps.TC, PAIR[dt]))
  for o, u in enumerate(warp_units): assert apply(kern, OptOps.UPCAST, o, u, ("loop",))
  for o, w in enumerate(warps): assert apply(kern, OptOps.LOCAL, o, w, ("loop",))
  assert apply(kern, OptOps.SPLIT, 2, 2, ("reduce",))
  kern.apply_opt(Opt(OptOps.SMEM, 0, stages)); kern.apply_opt(Opt(OptOps.SMEM, 1, stages))
  for o in (1, 0): apply(kern, OptOps.PARALLEL, o, 0, ("loop",))
  return kern.applied

def _loop_ops(src: str):
  from tools.sass_report import innermost_loop
  return innermost_loop(src)

@pytest.mark.parametrize("dt,stages,warps,n", [(f16, 3, (2, 2), 128), (bf16, 3, (2, 2), 128), (f16, 2, (2, 2), 128), (f16, 2, (2, 4), 256),
                                                (f16, 4, (2, 2), 128), (bf16, 3, (2, 4), 256)],
                         ids=["half-3", "bf16-3", "half-2", "half-128x256", "half-4-dynamic", "bf16-128x256-3-dynamic"])
def test_gemm_block_tile_pipeline(dt, stages, warps, n):
  """128x128 (and 128x256: 2x4 warps) block tiles of 64x64 warp tiles, four k-steps of 128 through the pipeline, every
  tile whole; the kernel assembles without spills. Up to 48 KB the tiles are static .shared; 4 stages at 128x128
  (64 KB) and 3 at 128x256 (72 KB) are dynamic shared memory, which the mock's launch (an sm_90 GPU) provides."""
  got, want, r = run_matmul(128, n, 128, dt, gemm_opts(128, n, 128, dt, stages, warps=warps))
  np.testing.assert_array_equal(got, want)
  src = r.spec.src
  need = stages * (128 + n) * 32 * 2
  assert r.spec.dyn_shared == (need if need > 48 << 10 else 0) and (".extern .shared" in src) == (need > 48 << 10)
  assert f"cp.async.wait_group {stages - 2};" in src and src.count("cp.async.commit_group;") == stages
  assert "cp.async.cg.shared.global" in src and "cp.async.ca." not in src, "fills are 16-byte copies"
  assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in src and ".x2" not in src, "B of two mma from one ldmatrix.x4"
  loop = _loop_ops(src)
  mma = sum(c for op, c in loop.items() if op.startswith("mma.sync"))
  ldsm = sum(c for op, c in loop.items() if op.startswith("ldmatrix"))
  assert (mma, ldsm) == (32, 8), f"a k-step of a 64x64 warp tile: {mma} mma.sync, {ldsm} ldmatrix"
  if find_ptxas() is not None:
    from tools.sass_report import assemble
    _, v = assemble(src, "sm_80")
    assert "0 bytes spill stores, 0 bytes spill loads" in v, v

@pytest.mark.parametrize("dt", [f16, bf16], ids=["half", "bf16"])
@pytest.mark.parametrize("m,n,k", [(130, 72, 70), (64, 136, 40)])
def test_gemm_edge_tiles_are_padded_and_masked(dt, m, n, k):
  """Shapes that are no multiple of the tile: PADTO pads every axis, the copies past an edge are zero-filled (their
  source size 0), the pipeline's copies past the last k-step are not issued; the result is exact."""
  got, want, _ = run_matmul(m, n, k, dt, gemm_opts(m, n, k, dt, 3, warp_units=(4, 2), warps=(2, 2)))
  np.testing.assert_array_equal(got, want)

def test_pipeline_stages_are_refused_where_they_cannot_run():
  kern = Kernel(matmul_ast(128, 128, 128, f16), gpu=True, ren=PTXRenderer())
  with pytest.raises(OptError, match="2 to 4 stages"): kern.apply_opt(Opt(OptOps.SMEM, 0, 5))
  kern.apply_opt(Opt(OptOps.SMEM, 0, 3))
  with pytest.raises(OptError, match="one pipeline of 3 stages"): kern.apply_opt(Opt(OptOps.SMEM, 1, 2))
  from baregrad.codegen.renderer.cuda import CUDARenderer
  cu = Kernel(matmul_ast(128, 128, 128, f16), gpu=True, ren=CUDARenderer())
  with pytest.raises(OptError, match="needs asynchronous copies"): cu.apply_opt(Opt(OptOps.SMEM, 0, 3))
  with pytest.raises(OptError, match="shared memory"):   # four 128x128 stages of 16 KB: past the 48 KB of static .shared
    get_program(matmul_ast(128, 128, 128, f16), PTXRenderer(), gemm_opts(128, 128, 128, f16, 4))

def _wavefronts(monkeypatch, m, n, k) -> dict[str, list[int]]:
  from baregrad.drivers.mock.ptx.kernel import PTXKernel
  seen: dict[str, list[int]] = {"ldmatrix": [0, 0], "cp.async": [0, 0]}
  def hook(line, text, wf, ideal):
    s = seen["ldmatrix" if text.startswith("ldmatrix") else "cp.async"]
    s[0], s[1] = s[0] + wf, s[1] + ideal
  monkeypatch.setattr(PTXKernel, "bank_conflicts", staticmethod(hook))
  got, want, _ = run_matmul(m, n, k, f16, gemm_opts(m, n, k, f16, 3))
  np.testing.assert_array_equal(got, want)
  return seen

def test_swizzled_tiles_have_no_bank_conflicts(monkeypatch):
  """The XOR swizzle (codegen/stage.py) puts the 8 rows each ldmatrix reads (A rows of k, B rows of n read .trans) and
  the 16-byte fills of each 8 threads in 8 different 16-byte bank groups: every shared request is one wavefront."""
  seen = _wavefronts(monkeypatch, 128, 128, 64)
  assert seen["ldmatrix"][1] > 0 and seen["ldmatrix"][0] == seen["ldmatrix"][1], seen
  assert seen["cp.async"][1] > 0 and seen["cp.async"][0] == seen["cp.async"][1], seen

def test_unswizzled_tiles_would_conflict(monkeypatch):
  """Without the swizzle the same kernel's ldmatrix rows (128 or 256 bytes apart) share banks: the check above can fail."""
  from baregrad.codegen import stage
  monkeypatch.setattr(stage, "_swizzler", lambda rowlen: (lambda idx: idx))
  seen = _wavefronts(monkeypatch, 128, 128, 96)
  assert seen["ldmatrix"][0] >= 4 * seen["ldmatrix"][1], seen

def _round_to(x: np.ndarray, dt) -> np.ndarray:
  """float64 values (exact in float32) rounded to nearest-even in dt, as float64."""
  if dt == f16: return x.astype(np.float32).astype(np.float16).astype(np.float64)
  u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
  return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32).astype(np.float64)

@pytest.mark.parametrize("dt", [f16, bf16], ids=["half", "bf16"])
@pytest.mark.parametrize("m,n,k", [(128, 128, 64), (130, 72, 70)])
def test_gemm_epilogue_through_shared_memory(dt, m, n, k):
  """A 16-bit output (a @ b as the Tensor frontend builds it: the float32 sum cast back) leaves through the operand
  pool: fragments into a swizzled tile in pairs, then 16-byte stores, masked past a padded edge."""
  from tools.sass_report import matmul_ast as frontend_ast
  rng = np.random.default_rng(3)
  a = rng.integers(-8, 8, (m, k)).astype(np.float32) / 4
  b = rng.integers(-8, 8, (k, n)).astype(np.float32) / 4
  ast = frontend_ast(m, n, k, dt)
  r = compile_ast(ast, "NV", gemm_opts(m, n, k, dt, 3, warp_units=(4, 2)))
  bufs = [Buffer("NV", m * n, dt).allocate(), Buffer("NV", m * k, dt).allocate(), Buffer("NV", k * n, dt).allocate()]
  bufs[1].copyin(memoryview(np.ascontiguousarray(_bits(a, dt))).cast("B"))
  bufs[2].copyin(memoryview(np.ascontiguousarray(_bits(b, dt))).cast("B"))
  r(bufs, wait=True)
  raw = np.empty(m * n, np.uint16); bufs[0].copyout(memoryview(raw).cast("B"))
  got = raw.view(np.float16).astype(np.float64) if dt == f16 else (raw.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
  np.testing.assert_array_equal(got.reshape(m, n), _round_to(a.astype(np.float64) @ b, dt))
  src = r.spec.src
  # a 128x64 block tile of 128 threads: 8 chunks of 16 bytes a thread; past a padded edge (n = 72) the chunks' stores
  # are masked value by value (the mask is not proven uniform over a chunk)
  assert src.count("ld.shared.v4.b32") == 8, src[-3000:]
  if (m, n) == (128, 128):   # fragments written in pairs (the swizzle keeps a pair in one chunk), read 16 bytes a time
    assert src.count("st.global.v4.b32") == 8 and "st.global.v2.b16" not in src and "st.shared.b16" not in src

@pytest.mark.parametrize("dt", [f16, bf16], ids=["half", "bf16"])
@pytest.mark.parametrize("m,n,k,tc", [(256, 256, 128, True), (64, 1000, 24, True), (100, 200, 300, False)])
def test_frontend_matmul_shapes(dt, m, n, k, tc):
  """a @ b from the Tensor frontend with the heuristic's opts: the pipelined tensor-core kernel (whole tiles; an
  awkward N and K padded), or, where padding would waste too much, the register-tile kernel: exact either way."""
  from baregrad.tensor import Tensor
  rng = np.random.default_rng(11)
  a = rng.integers(-8, 8, (m, k)).astype(np.float32) / 4
  b = rng.integers(-8, 8, (k, n)).astype(np.float32) / 4
  ta, tb = Tensor(a, device="NV").cast(dt).realize(), Tensor(b, device="NV").cast(dt).realize()
  t = (ta @ tb).realize()
  (item,) = (ta @ tb).schedule()
  opts = compile_ast(item.ast, "NV").spec.opts
  assert any(o.op is OptOps.TC for o in opts) == tc, opts
  # 4 stages: the mock is an sm_90 GPU, whose 227 KB a block lets the 64 KB pipeline run in dynamic shared memory
  if tc: assert any(o.op is OptOps.SMEM and o.amt == 4 for o in opts), opts
  np.testing.assert_array_equal(t.cast(f32).numpy().astype(np.float64), _round_to(a.astype(np.float64) @ b, dt))

def test_a_single_k_tile_is_not_staged():
  # K = 16, one mma.sync k step: no reduce loop to stage the operand tiles in, so none is staged (the heuristic staged
  # them and the kernel failed to lower: a half (m, 16) @ (16, n), a convolution's data gradient over 16 channels)
  from baregrad.tensor import Tensor
  a, b = np.arange(64 * 16).reshape(64, 16) % 7 - 3, np.arange(16 * 48).reshape(16, 48) % 5 - 2
  t = Tensor(a.astype(np.float16), device="NV") @ Tensor(b.astype(np.float16), device="NV")
  (item,) = t.schedule()
  spec = compile_ast(item.ast, "NV").spec
  assert any(o.op is OptOps.TC for o in spec.opts) and not any(o.op is OptOps.SMEM for o in spec.opts), spec.opts
  np.testing.assert_array_equal(t.numpy().astype(np.float64), a.astype(np.float64) @ b)
