"""Issue 32 item 3: the sm_90a tensor-core path (wgmma.mma_async m64n64k16 reading both operands from 128-byte swizzled
shared tiles through matrix descriptors, fed by the cp.async pipeline), chosen by the GPU heuristic on a Hopper whose
target is sm_90a (NV_SM90A=1), run on the mock NVIDIA GPU (whose PTX executor checks the warpgroup, fence and proxy
rules: drivers/mock/ptx/wgmma.py) against NumPy; and statically, the 4096^3 kernel assembled by ptxas for sm_90a."""
from __future__ import annotations
import os
import pytest
from baregrad.ir.dtype import dtypes
from baregrad.codegen.kernel import Kernel, Opt, OptOps, OptError
from baregrad.codegen.program import get_program
from baregrad.codegen.renderer.ptx import PTXRenderer
from baregrad.drivers.nv_compile import find_ptxas
from tests.helpers import mock_nv_device
from tests.drivers.nv.test_tensor_cores import run_matmul, matmul_ast

f16, bf16 = dtypes.float16, dtypes.bfloat16


@pytest.fixture(scope="module", autouse=True)
def nv():
  """One mock Hopper whose kernels target sm_90a, registered as Device["NV"] for the module."""
  saved = os.environ.get("NV_SM90A")
  os.environ["NV_SM90A"] = "1"
  try:
    with mock_nv_device() as dev:
      assert dev.renderer.arch == "sm_90a"
      yield dev
  finally:
    if saved is None: os.environ.pop("NV_SM90A", None)
    else: os.environ["NV_SM90A"] = saved


@pytest.mark.parametrize("shape,dt,bt", [((256, 128, 256), f16, False), ((256, 128, 256), bf16, False),
                                         ((1000, 192, 200), f16, False), ((64, 64, 4096), bf16, False),
                                         ((128, 128, 256), f16, True), ((200, 256, 520), bf16, True)],
                         ids=["256x128x256-half", "256x128x256-bf16", "awkward-1000x192x200-half", "64x64x4096-bf16",
                              "B-k-major-half", "B-k-major-awkward-bf16"])
def test_heuristic_matmul_runs_on_wgmma(shape, dt, bt):
  """The heuristic's kernel is wgmma (no mma.sync) with both operands staged, and equals A @ B exactly (inputs in
  quarters: every product and sum exact); awkward sizes are padded edge tiles; B stored k-contiguous is read K-major
  (N = 128), stored n-contiguous MN-major (transposed descriptor, N = 64)."""
  got, want, r = run_matmul(*shape, dt, None, b_transposed=bt)
  src = r.spec.src
  # a B stored k-contiguous is read K-major by the wider m64n128k16, one stored n-contiguous MN-major by m64n64k16
  assert f"wgmma.mma_async.sync.aligned.m64n{128 if bt else 64}k16" in src and "mma.sync" not in src, r.spec.opts
  assert [o.op for o in r.spec.opts].count(OptOps.SMEM) == 2, r.spec.opts
  # both tiles come by TMA (codegen/tma.py) through tensor maps the kernel builds in its launch scratch: no cp.async
  assert src.count("cp.async.bulk.tensor") >= 2 and "cp.async.cg" not in src and "tensormap.replace" in src
  # two consumer warpgroups: a producer warpgroup issues the copies (ptx_tma._producer), registers moved by setmaxnreg
  ws = r.spec.local_size == (384, 1, 1)
  assert ws == ("setmaxnreg.dec.sync.aligned.u32 40;" in src) == ("setmaxnreg.inc.sync.aligned.u32 232;" in src), r.spec.local_size
  if shape[0] >= 128 and not bt: assert ws
  assert (got == want).all(), f"max error {abs(got - want).max()}"


def test_a_row_pitch_tma_cannot_take_keeps_cp_async(monkeypatch):
  """A's rows 204 halves apart (408 bytes: a tensor map's strides are multiples of 16, cuTensorMapEncodeTiled) keep
  the cp.async pipeline, right; so does every shape with NV_TMA=0."""
  got, want, r = run_matmul(128, 128, 204, f16, None)
  assert "wgmma.mma_async" in r.spec.src and "cp.async.cg" in r.spec.src and "cp.async.bulk" not in r.spec.src
  assert (got == want).all()
  monkeypatch.setenv("NV_TMA", "0")
  got, want, r = run_matmul(192, 128, 128, bf16, None)
  assert "wgmma.mma_async" in r.spec.src and "cp.async.cg" in r.spec.src and "cp.async.bulk" not in r.spec.src
  assert (got == want).all()


@pytest.mark.parametrize("shape,dt,bt", [((256, 256, 192), f16, False), ((250, 504, 192), bf16, False),
                                         ((128, 256, 128), f16, True)],
                         ids=["256x256x192-half", "awkward-250x504x192-bf16", "B-k-major-half"])
def test_two_warpgroups_take_a_128x256_block_tile(shape, dt, bt):
  """N of 256 or more: the heuristic upcasts N to a 128 x 256 block tile (4 m64n64k16 a k-step and warpgroup, B read
  MN-major from four [k][64] chunks each filled by its own TMA box; 2 m64n128k16 for a k-contiguous B), exact on the
  mock; the awkward one's edge tiles are TMA's zero fill."""
  got, want, r = run_matmul(*shape, dt, None, b_transposed=bt)
  src = r.spec.src
  assert any(o.op is OptOps.UPCAST and o.amt == (2 if bt else 4) for o in r.spec.opts), r.spec.opts
  assert src.count("wgmma.mma_async") == (2 if bt else 4) and r.spec.local_size == (384, 1, 1), r.spec.opts
  # the producer's loop copies A's box and B's one (k-contiguous) or four (a chunk each)
  assert src.count("cp.async.bulk.tensor") == (2 if bt else 5) and "cp.async.cg" not in src
  assert (got == want).all(), f"max error {abs(got - want).max()}"


def test_what_wgmma_cannot_take_falls_back_to_mma_sync():
  """A reduction of one 64-wide step (no stage loop) goes to mma.sync, and is right."""
  got, want, r = run_matmul(64, 64, 64, f16, None)
  assert "wgmma" not in r.spec.src and "mma.sync" in r.spec.src
  assert (got == want).all()


def test_wgmma_needs_the_128_byte_swizzled_tile():
  """Opts that stage 32 k values a step (rows of 64 bytes, not the 128-byte swizzle wgmma is given) are refused by
  name when the kernel is lowered; without staging, too."""
  ren = PTXRenderer("sm_90a", shared_max=227 << 10)
  pick = next(i for i, tc in enumerate(ren.tensor_cores) if tc.desc and tc.dtype_in == f16)
  ast = matmul_ast(128, 64, 256, f16)
  k = Kernel(ast, gpu=True, ren=ren)
  k.apply_opt(Opt(OptOps.TC, pick))
  r = next(i for i, a in enumerate(k.loop_axes()) if k.axes[a].kind == "reduce")
  k.apply_opt(Opt(OptOps.SPLIT, r, 2))
  for j in range(2): k.apply_opt(Opt(OptOps.SMEM, j, 2))
  with pytest.raises(OptError, match="rows of 64 16-bit values"):
    get_program(ast, ren, k.applied)
  with pytest.raises(OptError, match="stage them"):
    get_program(ast, ren, [Opt(OptOps.TC, pick)])


def test_only_sm_90a_lists_wgmma():
  assert not any(tc.desc for tc in PTXRenderer("sm_90").tensor_cores)
  assert sum(tc.desc for tc in PTXRenderer("sm_90a").tensor_cores) == 4


def test_one_thread_issues_without_a_producer_warpgroup(monkeypatch):
  """NV_WARPSPEC=0: the block's own first thread issues the copies between the steps' barriers, right."""
  monkeypatch.setenv("NV_WARPSPEC", "0")
  got, want, r = run_matmul(256, 128, 320, f16, None)
  src = r.spec.src
  assert r.spec.local_size == (256, 1, 1) and "setmaxnreg" not in src and "cp.async.bulk.tensor" in src
  assert (got == want).all()


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not found")
@pytest.mark.parametrize("dt", ["half", "bf16"])
def test_4096_kernel_for_sm_90a(dt):
  """Statically (no GPU): the 4096^3 kernel for sm_90a assembles with no spills and no ptxas advisory, its main loop is
  wgmma.mma_async with no global loads; it has a producer warpgroup (384 threads, 168 registers each at the start:
  ptx_tma.register_split's budget, so setmaxnreg can move 128 of the producer's to the consumers), and where
  nvdisasm/cuobjdump are installed its SASS main loop has HGMMA and no LDG, the producer's loop UTMALDG and no HGMMA,
  and no LDGSTS is left."""
  from tools.sass_report import report, renderer_for, matmul_ast as ast_of, assemble
  from baregrad.codegen.heuristic import heuristic_opts
  f = report(4096, 4096, 4096, {"half": f16, "bf16": bf16}[dt], "sm_90a")
  from baregrad.codegen.renderer.ptx_tma import register_split
  assert f["spills"] == "0" and f["producer"] == "128" and int(f["regs"]) == register_split(256)[0] and f["advisories"] == "none", f
  # ptxas says when it has to serialize wgmma (accumulators touched between them without the fences it wants)
  ren, ast = renderer_for("sm_90a"), ast_of(4096, 4096, 4096, {"half": f16, "bf16": bf16}[dt])
  _, v = assemble(get_program(ast, ren, heuristic_opts(Kernel(ast, max_parallel=3, gpu=True, ren=ren), ren)).src, "sm_90a")
  assert "serializ" not in v.lower(), v
  assert int(f["loop_wgmma"]) >= 1 and f["loop_mma"] == "0" and f["loop_ldg"] == "0" and f["loop_cp_async"] == "0", f
  if f.get("sass") == "unavailable": pytest.skip("cuobjdump/nvdisasm not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
  # TMA (codegen/tma.py): tensor copies in the producer's loop, HGMMAs in the consumers', and no cp.async (LDGSTS) left
  assert int(f["main_HGMMA"]) > 0 and f["main_UTMALDG"] == "0" and f["main_LDG"] == "0" and f["HMMA"] == "0", f
  assert int(f["tma_loop_UTMALDG"]) > 0 and f["tma_loop_HGMMA"] == "0" and f["LDGSTS"] == "0" and f["main_BAR"] == "0", f


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not found")
def test_4096_kernel_without_a_producer_keeps_tma_in_the_main_loop(monkeypatch):
  """NV_WARPSPEC=0: the 4096^3 bf16 kernel's SASS main loop has HGMMA and UTMALDG, and no LDGSTS."""
  from tools.sass_report import report
  monkeypatch.setenv("NV_WARPSPEC", "0")
  f = report(4096, 4096, 4096, bf16, "sm_90a")
  assert f["spills"] == "0" and f["producer"] == "0" and f["loop_cp_async"] == "0", f
  if f.get("sass") == "unavailable": pytest.skip("cuobjdump/nvdisasm not found")
  assert int(f["main_HGMMA"]) > 0 and int(f["main_UTMALDG"]) > 0 and f["LDGSTS"] == "0", f


def test_fused_bias_and_relu_stay_in_the_wgmma_kernel():
  """(a @ b + bias).relu() in half through the Tensor frontend: one wgmma kernel with the epilogue fused, exact."""
  import numpy as np
  from baregrad import Tensor
  from baregrad.engine.runner import compile_ast
  rng = np.random.default_rng(0)
  a = (rng.integers(-8, 8, (256, 192)) / 4).astype(np.float16)
  b = (rng.integers(-8, 8, (192, 128)) / 4).astype(np.float16)
  bias = (rng.integers(-8, 8, (128,)) / 4).astype(np.float16)
  out = ((Tensor(a, device="NV") @ Tensor(b, device="NV")) + Tensor(bias, device="NV")).relu()
  items = [it for it in out.schedule() if hasattr(it, "ast")]
  assert len(items) == 1 and "wgmma.mma_async" in compile_ast(items[0].ast, "NV").spec.src
  np.testing.assert_array_equal(out.numpy().astype(np.float64), np.maximum(a.astype(np.float64) @ b + bias, 0))


def test_a_stored_m_contiguous_is_read_transposed():
  """a.T @ b: A's staged tile holds rows of m (one 64-value row: one warpgroup along M), read with imm-trans-a 1."""
  import numpy as np
  from baregrad import Tensor
  from baregrad.engine.runner import compile_ast
  rng = np.random.default_rng(1)
  a = (rng.integers(-8, 8, (192, 256)) / 4).astype(np.float16)
  b = (rng.integers(-8, 8, (192, 128)) / 4).astype(np.float16)
  out = Tensor(a, device="NV").T @ Tensor(b, device="NV")
  (item,) = [it for it in out.schedule() if hasattr(it, "ast")]
  src = compile_ast(item.ast, "NV").spec.src
  assert "wgmma.mma_async" in src and ", 1, 1, 1, 1, 1;" in src   # both operands transposed (MN-major)
  np.testing.assert_array_equal(out.numpy().astype(np.float64), a.astype(np.float64).T @ b)


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not found")
def test_check_archs_leave_sm_90a_kernels_alone(monkeypatch):
  """PTX_CHECK_ARCHS validates portable kernels on other targets; an sm_90a kernel (wgmma) assembles for sm_90a only."""
  from baregrad.drivers.nv_compile import PTXCompiler
  monkeypatch.setenv("PTX_CHECK_ARCHS", "sm_80,sm_89")
  assert PTXCompiler("sm_90a").check_archs == [] and PTXCompiler("sm_90").check_archs == ["sm_80", "sm_89"]


def test_batched_matmul_builds_a_map_per_block():
  """(3, 128, 192) @ (3, 192, 64) in half: one wgmma kernel whose tiles come by TMA, each block's maps starting at its
  batch's matrices (the map's global address: codegen/tma.py), exact."""
  import numpy as np
  from baregrad import Tensor
  from baregrad.engine.runner import compile_ast
  rng = np.random.default_rng(2)
  a = (rng.integers(-8, 8, (3, 128, 192)) / 4).astype(np.float16)
  b = (rng.integers(-8, 8, (3, 192, 64)) / 4).astype(np.float16)
  out = Tensor(a, device="NV") @ Tensor(b, device="NV")
  (item,) = [it for it in out.schedule() if hasattr(it, "ast")]
  src = compile_ast(item.ast, "NV").spec.src
  assert "wgmma.mma_async" in src and "cp.async.bulk.tensor" in src and "cp.async.cg" not in src
  np.testing.assert_array_equal(out.numpy().astype(np.float64), a.astype(np.float64) @ b)


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not found (the mock takes the register count from the cubin)")
def test_a_register_split_the_launch_cannot_give_is_a_hang(monkeypatch):
  """Without .minnctapersm 1, ptxas gives the producer kernel far fewer registers than 168 a thread: the consumers'
  setmaxnreg.inc 232 then waits for registers the producer's dec (to 40) does not free, which the mock reports as a
  hang from the launch's REGISTER_COUNT (mock/ptx/wgmma.py _register_budget)."""
  from baregrad.drivers.nv.faults import NVChannelError
  render = PTXRenderer.render
  monkeypatch.setattr(PTXRenderer, "render", lambda self, name, uops: render(self, name, uops).replace(".minnctapersm 1\n", ""))
  with pytest.raises(NVChannelError, match=r"hang: block 0's warpgroups hold \[232, 232, 40\] registers"):
    run_matmul(128, 128, 448, f16, None)
