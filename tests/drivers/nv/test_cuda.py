"""The CUDA fallback (drivers/cuda.py). Without libcuda (CI, this machine) the parts that do not need it are tested: the
module image (the cubin ptxas makes from our PTX) and its parameter layout, argument packing, and the error
translation layer (with a fake libcuda that is only ever handed to that layer). With a GPU and libcuda the device runs
kernels; with our NV driver too, NV and CUDA must give bit-identical results on the same kernels."""
import ctypes, struct
import numpy as np
import pytest
from baregrad.hal import Device, Buffer, DeviceUnavailable
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import Ops
from baregrad.ir.view import ShapeTracker
from baregrad.codegen.astbuild import load, store, reduce, sink, const
from baregrad.codegen.program import get_program
from baregrad.codegen.renderer.ptx import PTXRenderer, param_layout
from baregrad.drivers import cuda as C
from baregrad.drivers.nv_compile import find_ptxas
from baregrad.ctypes_autogen import cuda as cu
from tests.helpers import make_buffer, read_buffer, bits

f32, f16, i32 = dtypes.float32, dtypes.float16, dtypes.int32
needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas not found: no cubin can be made here")

def _cuda():
  try: return Device["CUDA"]
  except DeviceUnavailable as e: pytest.skip(f"DEV=CUDA is unavailable here: {e}")

# ---------------------------------------------------------------- kernels shared by the image and cross-check tests
M, K, N = 8, 12, 16
_sa = ShapeTracker.from_shape((M, K)).reshape((M, 1, K)).expand((M, N, K))
_sb = ShapeTracker.from_shape((K, N)).permute((1, 0)).reshape((1, N, K)).expand((M, N, K))
KERNELS = {
  "elementwise_math": (sink(store(0, (64,), ((load(1, f32, (64,)) * 3.0).alu(Ops.EXP2) + load(2, f32, (64,)).alu(Ops.SQRT)).alu(Ops.MAX, const(f32, 1.5)))),
                       lambda r: [(64, f32), (r.random(64, dtype=np.float32) - 0.5, f32), (r.random(64, dtype=np.float32), f32)]),
  "int_divmod": (sink(store(0, (32,), load(1, i32, (32,)).alu(Ops.IDIV, load(2, i32, (32,))) + load(1, i32, (32,)).alu(Ops.MOD, load(2, i32, (32,))))),
                 lambda r: [(32, i32), (r.integers(-100, 100, 32, dtype=np.int32), i32), (r.integers(-5, 5, 32, dtype=np.int32), i32)]),
  "matmul": (sink(store(0, (M, N, 1), reduce(load(1, f32, _sa) * load(2, f32, _sb), Ops.ADD, (2,)))),
             lambda r: [(M * N, f32), (r.random((M, K), dtype=np.float32), f32), (r.random((K, N), dtype=np.float32), f32)]),
  "masked_pad": (sink(store(0, (10,), load(1, f32, ShapeTracker.from_shape((6,)).pad(((2, 2),))) + 1.0)),
                 lambda r: [(10, f32), (r.random(6, dtype=np.float32), f32)]),
  "half_chain": (sink(store(0, (64,), (load(1, f16, (64,)) * load(2, f16, (64,)) + 0.5).cast(f16))),
                 lambda r: [(64, f16), (r.standard_normal(64).astype(np.float16), f16), (r.standard_normal(64).astype(np.float16), f16)]),
}

# ---------------------------------------------------------------- the module image and argument packing (no GPU)
def _var(name, dt):
  from baregrad.ir.ops import UOp
  return UOp.variable(name, -100, 100, dt)

@needs_ptxas
def test_module_image_is_the_cubin_ptxas_makes_with_the_renderers_parameter_layout():
  from baregrad.drivers.nv_compile import PTXCompiler, parse_cubin
  i64 = dtypes.int64
  n, m = _var("n", i32), _var("m", i64)
  ast = sink(store(0, (8,), load(1, f32, (8,)) * load(2, f32, (8,)) + n.cast(f32) + m.cast(f32)))
  spec = get_program(ast, PTXRenderer("sm_90"))
  lib = PTXCompiler("sm_90").compile(spec.src)
  info = parse_cubin(lib)
  assert info["arch"] == "sm_90" and spec.name in info["kernels"]
  params = C.image_params(lib, spec.name)
  # what the cubin says is what the renderer declared: data0..data2 (8 bytes), then the variables sorted by name
  assert params == [(off, size) for _, off, size in param_layout(spec.bufs, spec.vars)]
  assert [s for _, s in params] == [8, 8, 8, 8, 4]   # m (int64) sorts before n (int32)

def test_image_params_refuse_what_is_not_a_cubin_or_lacks_the_kernel():
  with pytest.raises(ValueError, match="not a cubin"): C.image_params(b"\x7fELF garbage", "k")
  if find_ptxas() is None: return
  from baregrad.drivers.nv_compile import PTXCompiler
  spec = get_program(KERNELS["masked_pad"][0], PTXRenderer("sm_90"))
  with pytest.raises(ValueError, match=f"has no kernel nope; it has \\['{spec.name}'\\]"):
    C.image_params(PTXCompiler("sm_90").compile(spec.src), "nope")

def test_pack_args_places_each_value_at_its_offset():
  params = [(0, 8), (8, 8), (16, 4), (24, 8), (32, 2)]
  buf = C.pack_args(params, [0x7f0000001000, 0xdeadbeef00], [-3, -(2 ** 63), 65535])
  assert len(buf) == 34
  assert struct.unpack_from("<QQi", buf, 0) == (0x7f0000001000, 0xdeadbeef00, -3)
  assert struct.unpack_from("<q", buf, 24)[0] == -(2 ** 63) and struct.unpack_from("<H", buf, 32)[0] == 65535
  assert buf[20:24] == b"\0" * 4   # padding stays zero

def test_pack_args_errors_name_the_mismatch():
  with pytest.raises(ValueError, match="takes 3 parameters, got 1 buffers and 1 values"): C.pack_args([(0, 8), (8, 4), (12, 4)], [1], [2])
  with pytest.raises(ValueError, match="70000 does not fit in 2 bytes"): C.pack_args([(0, 2)], [], [70000])

# ---------------------------------------------------------------- error translation (a fake libcuda, for this layer only)
class FakeLibcudaForTranslationTests:
  """Stands in for libcuda in the error-translation tests only: cuGetErrorName/cuGetErrorString as the real ones
  behave (CUDA_ERROR_INVALID_VALUE and NULL for a code they do not know). Never a device."""
  KNOWN = {2: (b"CUDA_ERROR_OUT_OF_MEMORY", b"out of memory"), 700: (b"CUDA_ERROR_ILLEGAL_ADDRESS", b"an illegal memory access was encountered")}
  def _answer(self, status, out, i):
    if status not in self.KNOWN: out._obj.value = None; return cu.CUDA_ERROR_INVALID_VALUE
    out._obj.value = self.KNOWN[status][i]
    return cu.CUDA_SUCCESS
  def cuGetErrorName(self, status, out): return self._answer(status, out, 0)
  def cuGetErrorString(self, status, out): return self._answer(status, out, 1)

def test_error_names_come_from_libcuda():
  fake = FakeLibcudaForTranslationTests()
  e = C.CUDAError("cuMemAlloc", 2, "4096 bytes", api=fake)
  assert str(e) == "cuMemAlloc failed with CUDA_ERROR_OUT_OF_MEMORY (2): out of memory (4096 bytes)" and e.name == "CUDA_ERROR_OUT_OF_MEMORY"
  with pytest.raises(C.CUDAError, match="CUDA_ERROR_ILLEGAL_ADDRESS .700.: an illegal memory access"): C.check(700, "cuStreamQuery", api=fake)
  C.check(0, "cuInit", api=fake)   # success raises nothing

def test_codes_libcuda_does_not_know_fall_back_to_the_header_then_to_the_number():
  fake = FakeLibcudaForTranslationTests()
  assert C.error_text(cu.CUDA_ERROR_NO_DEVICE, fake) == f"CUDA_ERROR_NO_DEVICE ({cu.CUDA_ERROR_NO_DEVICE})"
  assert C.error_text(123456, fake) == "unknown CUresult (123456)"

def test_without_libcuda_the_translation_still_names_the_error():
  if _libcuda_loadable(): pytest.skip("libcuda is here")
  assert C.error_text(2) == "CUDA_ERROR_OUT_OF_MEMORY (2)"

def test_poll_raises_the_failure_of_the_waited_work_and_times_out():
  fake = FakeLibcudaForTranslationTests()
  answers = iter([cu.CUDA_ERROR_NOT_READY, 700])
  with pytest.raises(C.CUDAError, match=r"query failed with CUDA_ERROR_ILLEGAL_ADDRESS .* \(kernel k\)"):
    C.poll(lambda _: next(answers), None, "kernel k", api=fake)
  with pytest.raises(TimeoutError, match="kernel k did not finish within 0.0 s .*CUDA_TIMEOUT_MS"):
    C.poll(lambda _: cu.CUDA_ERROR_NOT_READY, None, "kernel k", timeout=0.0, api=fake)

def _libcuda_loadable() -> bool:
  try: ctypes.CDLL("libcuda.so.1"); return True
  except OSError: return False

def test_no_libcuda_makes_cuda_unavailable_with_a_message():
  if _libcuda_loadable(): pytest.skip("libcuda is here")
  with pytest.raises(DeviceUnavailable, match="CUDA is unavailable: libcuda is not available .*NVIDIA driver"): Device["CUDA"]

# ---------------------------------------------------------------- on a GPU
def _run_on(device, ast, arrays, opts=None):
  bufs = [make_buffer(device, None, dt, size) if isinstance(size, int) else make_buffer(device, size, dt) for size, dt in arrays]
  from baregrad.engine.runner import run_ast
  t = run_ast(ast, bufs, device=device, opts=opts)
  return read_buffer(bufs[0]), t

@pytest.mark.parametrize("name", sorted(KERNELS))
def test_cuda_runs_kernels(name):
  _cuda()
  ast, make = KERNELS[name]
  arrays = make(np.random.default_rng(0))
  out, t = _run_on("CUDA", ast, arrays)
  ref, _ = _run_on("CPU", ast, arrays)
  assert t is not None and t > 0
  np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64), rtol=1e-5 if name != "half_chain" else 1e-3, atol=1e-6)

def _real_nv():
  import os
  if os.environ.get("MOCKGPU"): pytest.skip("MOCKGPU=1: NV is the mock GPU, not the hardware CUDA runs on")
  try: return Device["NV"]
  except DeviceUnavailable as e: pytest.skip(f"NV is unavailable here: {e}")

@pytest.mark.parametrize("name", sorted(KERNELS))
def test_nv_and_cuda_give_identical_results(name):
  cuda_dev, nv = _cuda(), _real_nv()
  if cuda_dev.arch != nv.arch: pytest.skip(f"CUDA is {cuda_dev.arch}, NV is {nv.arch}: not the same GPU")
  ast, make = KERNELS[name]
  arrays = make(np.random.default_rng(1))
  spec = get_program(ast, nv.renderer)
  a, _ = _run_on("NV", ast, arrays, opts=spec.opts)
  b, _ = _run_on("CUDA", ast, arrays, opts=spec.opts)
  assert (bits(a) == bits(b)).all(), f"{name}: NV and CUDA differ at {np.nonzero(bits(a) != bits(b))[0][:8]}"

def test_cuda_buffers_views_and_limits():
  dev = _cuda()
  x = np.arange(64, dtype=np.float32)
  b = make_buffer("CUDA", x, f32)
  v = b.view(8, f32, 16).allocate()
  np.testing.assert_array_equal(read_buffer(v), x[4:12])
  del v
  assert dev.max_local_size[0] >= 1024 and dev.max_shared_mem > 0
  assert isinstance(Buffer("CUDA", 0, f32).allocate().as_memoryview(), memoryview)
