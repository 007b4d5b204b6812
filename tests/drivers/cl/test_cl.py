"""The OpenCL fallback's runtime (drivers/cl.py) on the system's OpenCL (PoCL in CI): hand-written kernels, build errors
with the build log, timing events, waits with a timeout, views, limits; and what happens without libOpenCL or without
a platform (CL is unavailable with a message, the default device stays the CPU)."""
from tests.paths import REPO
import os, subprocess, sys, textwrap
import numpy as np
import pytest
from baregrad.hal import Device, Buffer, DeviceUnavailable, CompileError, OutOfMemory
from baregrad.ir.dtype import dtypes

def _cl():
  try: return Device["CL"]
  except DeviceUnavailable as e: pytest.skip(f"no OpenCL device here: {e}")

ROOT = str(REPO)
ADD1 = """__kernel void add1(__global float* restrict a, __global const float* restrict b, const long n) {
  int i = get_group_id(0) * get_local_size(0) + get_local_id(0);
  if (i < n) a[i] = b[i] + 1.0f;
}"""
SPIN = """__kernel void spin(__global float* a, const long n) {
  float x = a[0];
  for (long i = 0; i < n; i++) x = x * 0.999999f + 1.0f;
  a[0] = x;
}"""

def _buf(dev, x: np.ndarray) -> Buffer:
  b = Buffer(dev.device, x.size, dtypes.float32).allocate()
  return b.copyin(memoryview(np.ascontiguousarray(x)).cast("B"))

def _read(b: Buffer) -> np.ndarray:
  out = np.empty(b.size, np.float32)
  b.copyout(memoryview(out).cast("B"))
  return out

def test_hand_written_kernel_runs_and_is_timed():
  dev = _cl()
  prg = dev.runtime(dev, "add1", dev.compiler.compile_cached(ADD1))
  x = np.arange(100, dtype=np.float32)
  a, b = _buf(dev, np.zeros(100, np.float32)), _buf(dev, x)
  t = prg(a._buf, b._buf, global_size=(13, 1, 1), local_size=(8, 1, 1), vals=(100,), wait=True)
  assert isinstance(t, float) and 0 < t < 10
  np.testing.assert_array_equal(_read(a), x + 1)
  assert prg(a._buf, b._buf, global_size=(13, 1, 1), local_size=(8, 1, 1), vals=(100,)) is None  # not waited for
  dev.synchronize()
  np.testing.assert_array_equal(_read(a), x + 1)

def test_build_error_names_the_device_and_carries_the_log_and_source():
  dev = _cl()
  with pytest.raises(CompileError) as e: dev.compiler.compile("__kernel void bad(__global float* a) { a[0] = nope; }")
  msg = str(e.value)
  assert "clBuildProgram" in msg and dev.caps.name in msg and "CL_BUILD_PROGRAM_FAILURE" in msg
  assert "nope" in e.value.msg            # the compiler's own log
  assert "1 | __kernel void bad" in msg   # and the numbered source

def test_wait_times_out_with_a_message_and_the_device_recovers():
  from baregrad.drivers.cl import wait_event
  dev = _cl()
  prg = dev.runtime(dev, "spin", dev.compiler.compile_cached(SPIN))
  a = _buf(dev, np.zeros(1, np.float32))
  prg(a._buf, global_size=(1, 1, 1), local_size=(1, 1, 1), vals=(300_000_000,))
  with pytest.raises(TimeoutError, match=r"synchronize did not finish within 0\.0 s \(its command is CL_(QUEUED|SUBMITTED|RUNNING); set CL_TIMEOUT_MS"):
    wait_event(dev.queue, dev._last, f"{dev.device} synchronize", timeout=0.0)
  dev.synchronize()   # the long kernel still finishes; the device keeps working
  assert _read(a)[0] > 1000

def test_caps_limits_and_dtypes_come_from_the_device():
  dev = _cl()
  c = dev.caps
  assert c.max_work_group >= 1 and len(dev.max_local_size) == 3 and dev.max_shared_mem == c.local_mem > 0
  assert dev.renderer.local_max == c.max_work_group
  assert dev.supports_dtype(dtypes.float64) == c.fp64 == dev.renderer.supports_dtype(dtypes.float64)
  assert dev.supports_dtype(dtypes.float16)  # half storage (vload_half/vstore_half) is core OpenCL

def test_work_group_larger_than_the_kernel_allows_is_an_error():
  dev = _cl()
  prg = dev.runtime(dev, "add1", dev.compiler.compile_cached(ADD1))
  a = _buf(dev, np.zeros(4, np.float32))
  with pytest.raises(ValueError, match="exceeds what .* runs for this kernel"):
    prg(a._buf, a._buf, global_size=(1, 1, 1), local_size=(prg.max_work_group + 1, 1, 1), vals=(4,))

def test_views_at_aligned_offsets_and_a_clear_error_elsewhere():
  dev = _cl()
  align = dev.caps.base_align
  n = 3 * align // 4
  base = _buf(dev, np.arange(n, dtype=np.float32))
  v = base.view(4, dtypes.float32, align).allocate()
  np.testing.assert_array_equal(_read(v), np.arange(align // 4, align // 4 + 4, dtype=np.float32))
  with pytest.raises(ValueError, match="CL_DEVICE_MEM_BASE_ADDR_ALIGN"): base.view(4, dtypes.float32, 4).allocate()
  del v

def test_allocation_over_the_device_limit_is_out_of_memory():
  dev = _cl()
  with pytest.raises(OutOfMemory, match="CL_DEVICE_MAX_MEM_ALLOC_SIZE"): dev.allocator.alloc(dev.caps.max_alloc + 1)

def test_zero_size_buffer():
  dev = _cl()
  b = Buffer(dev.device, 0, dtypes.float32).allocate()
  assert b.as_memoryview().nbytes == 0

def _run_py(code: str, **env) -> subprocess.CompletedProcess:
  e = {**os.environ, "PYTHONPATH": ROOT, **env}
  return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=e, timeout=120)

def test_no_platform_makes_cl_unavailable_and_the_default_stays_cpu(tmp_path):
  # an ICD loader with no vendor file: clGetPlatformIDs answers CL_PLATFORM_NOT_FOUND_KHR
  p = _run_py("""
    from baregrad.hal import Device, DeviceUnavailable
    try: Device["CL"]; print("OPENED")
    except DeviceUnavailable as e: print("UNAVAILABLE", e)
    print("DEFAULT", Device.DEFAULT)
  """, DEV="CL", OCL_ICD_VENDORS=str(tmp_path), OCL_ICD_FILENAMES="")
  if "libOpenCL is not available" in p.stdout: pytest.skip("no ICD loader here")
  assert "UNAVAILABLE CL is unavailable: libOpenCL found no OpenCL platform" in p.stdout, p.stdout + p.stderr
  assert "DEFAULT CPU" in p.stdout and "DEV=CL is unavailable" in p.stderr and "falling back to CPU" in p.stderr

def test_no_libopencl_makes_cl_unavailable_with_the_install_hint():
  # the library's absence, simulated by pointing the binding at a name no system has (a subprocess: nothing leaks)
  p = _run_py("""
    from baregrad.ctypes_autogen import opencl
    opencl._lib.candidates = ("libOpenCL-absent-for-this-test.so",)
    from baregrad.hal import Device, DeviceUnavailable
    try: Device["CL"]; print("OPENED")
    except DeviceUnavailable as e: print("UNAVAILABLE", e)
    from baregrad import Tensor
    print("DEFAULT", Device.DEFAULT, Tensor([1.0, 2.0]).sum().item())
  """, DEV="CL")
  assert "UNAVAILABLE CL is unavailable: libOpenCL is not available" in p.stdout and "ocl-icd-libopencl1" in p.stdout, p.stdout + p.stderr
  assert "DEFAULT CPU 3.0" in p.stdout, p.stdout + p.stderr

def test_asking_for_a_device_index_that_is_not_there_lists_the_devices():
  _cl()
  with pytest.raises(DeviceUnavailable, match=r"OpenCL device\(s\) here: CL:0 "): Device["CL:99"]

def test_half_end_to_end_accumulates_in_float32():
  # float16 storage on any OpenCL device (vload_half/vstore_half are core): sums, matmul and conv accumulate in float32
  from baregrad import Tensor
  import baregrad.tensor.functional as F
  dev = _cl().device
  assert Tensor.ones(10000, dtype=dtypes.float16, device=dev).sum().item() == 10000.0   # a half accumulator stalls at 2048
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((33, 70)).astype(np.float32), rng.standard_normal((70, 20)).astype(np.float32)
  x, w = rng.standard_normal((2, 3, 9, 9)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
  for f32, f16 in ((lambda: Tensor(a, device=dev) @ Tensor(b, device=dev), lambda: Tensor(a, device=dev).half() @ Tensor(b, device=dev).half()),
                   (lambda: F.conv2d(Tensor(x, device=dev), Tensor(w, device=dev), padding=1),
                    lambda: F.conv2d(Tensor(x, device=dev).half(), Tensor(w, device=dev).half(), padding=1))):
    ref, got = f32().numpy(), f16()
    assert got.dtype == dtypes.float16
    np.testing.assert_allclose(got.numpy().astype(np.float32), ref, rtol=1e-2, atol=1e-2 * np.abs(ref).max())
