"""64-bit index math where a buffer or view passes 2^31 elements (smaller kernels keep int32), on every renderer;
a tensor too large for the device is an OutOfMemory error, not a crash."""
from tests.paths import REPO
import os, subprocess, tempfile
import numpy as np
import pytest
from baregrad import Tensor, dtypes, Device
from baregrad.hal import OutOfMemory
from baregrad.engine import lazy
from baregrad.engine.graph import BufRef
from baregrad.ir.view import ShapeTracker, View
from baregrad.ir.ops import Ops
from baregrad.codegen.astbuild import load, store, sink, const, reduce
from baregrad.codegen.kernel import index_dtype
from baregrad.codegen.program import get_program
from baregrad.codegen.renderer.llvmir import LLVMRenderer
from baregrad.codegen.renderer.cstyle import CRenderer
from baregrad.codegen.renderer.ptx import PTXRenderer
from baregrad.codegen.renderer.cuda import CUDARenderer

N = 2 ** 31 + 64   # just over 2^31 uint8 elements

def _mem_available() -> int:
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"): return int(line.split()[1]) * 1024
  except OSError: pass
  return 0

# the big buffer is mapped, not touched (fresh anonymous memory reads as zeros): a few pages are written
needs_memory = pytest.mark.skipif(_mem_available() < 4 << 30, reason="less than 4 GiB of memory available for a 2 GiB mapping")

def tail_ast(n: int = N):
  """out[i] = in[n - 8 + i] + 1 over uint8: 8 elements read at offsets past 2^31."""
  st = ShapeTracker.from_shape((n,)).shrink(((n - 8, n),))
  return sink(store(0, (8,), load(1, dtypes.uint8, st) + const(dtypes.uint8, 1)))

def test_index_dtype_is_int32_unless_a_view_passes_2_31():
  assert index_dtype(tail_ast(1 << 20)) == dtypes.int32
  assert index_dtype(tail_ast()) == dtypes.int64

@pytest.mark.parametrize("ren", [LLVMRenderer(), CRenderer(), PTXRenderer(), CUDARenderer()], ids=lambda r: r.name)
def test_every_renderer_renders_64_bit_index_math(ren):
  src = get_program(tail_ast(), ren).src
  wide = {"LLVM": "i64", "C": "long long", "PTX": ".s64", "CUDA": "long long"}[ren.name]
  off = [f"{wide} {N - 8}", f"(({wide}){N - 8}LL)"] if ren.name != "PTX" else [f"{N - 8:#018x}"]
  assert any(o.lower() in src.lower() for o in off), f"{ren.name}: the offset {N - 8} is not a 64-bit constant in\n{src}"

@pytest.mark.skipif(subprocess.run(["which", "nvcc"], capture_output=True).returncode != 0, reason="nvcc not found")
def test_cuda_c_64_bit_index_runs_in_the_ptx_interpreter():
  from baregrad.drivers.mock.ptx import PTXModule, Memory
  spec = get_program(tail_ast(), CUDARenderer())
  with tempfile.TemporaryDirectory() as d:
    with open(os.path.join(d, "k.cu"), "w") as f: f.write(spec.src)
    subprocess.run(["nvcc", "-ptx", "-arch=sm_90", "-o", os.path.join(d, "k.ptx"), os.path.join(d, "k.cu")], check=True, capture_output=True)
    with open(os.path.join(d, "k.ptx")) as f: ptx = f.read()
  mem = Memory()
  out, big = mem.alloc(8), mem.alloc(N)   # the interpreter's memory is calloc'd: untouched pages cost nothing
  mem.write_bytes(big + N - 8, bytes(range(100, 108)))
  PTXModule(ptx).kernel(spec.name).launch(mem, [out, big], spec.global_size, spec.local_size)
  assert list(mem.read_bytes(out, 8)) == list(range(101, 109))

@needs_memory
@pytest.mark.parametrize("device", sorted({Device.DEFAULT, "CPU:C"}))
def test_tensor_of_more_than_2_31_elements(device):
  ref = BufRef(device, N, dtypes.uint8)
  ref.ensure().view(64, dtypes.uint8, N - 64).copyin(memoryview(np.arange(64, dtype=np.uint8)))
  t = Tensor(lazy.buffer_view(ref, (N,)), device=device)
  assert (t[N - 8:] + 1).tolist() == list(range(57, 65))
  assert (t[-3:].cast(dtypes.int32) * 2).tolist() == [122, 124, 126]
  if device.startswith("CPU"): assert t.max().item() == 63   # a kernel over all 2^31 + 64 elements

def test_too_large_for_the_device_is_out_of_memory():
  with pytest.raises(OutOfMemory): Tensor.zeros(2 ** 50, dtype=dtypes.uint8)
  assert Tensor.ones(3).tolist() == [1., 1., 1.]  # and the device still works

# ---- single elements, slices, gathers and views of views past 2^31 (issue 31)
M = 2 ** 31 + 8   # the tensor: x[2**31 + 1] on 2^31 + 8 uint8 elements died with SIGSEGV (an i32 offset)

_CRASH = """
import numpy as np
from baregrad import Tensor, dtypes, Device
from baregrad.engine import lazy
from baregrad.engine.graph import BufRef
M = 2 ** 31 + 8
ref = BufRef(Device.DEFAULT, M, dtypes.uint8)
ref.ensure().view(8, dtypes.uint8, M - 8).copyin(memoryview(np.arange(1, 9, dtype=np.uint8)))
x = Tensor(lazy.buffer_view(ref, (M,)))
print(x[2 ** 31 + 1].item(), x[-1].item())
"""

@needs_memory
def test_single_element_past_2_31_does_not_crash():
  # in a subprocess: before the fix the kernel's offset was the int32 -2147483647 and the read segfaulted
  env = {**os.environ, "PYTHONPATH": str(REPO)}
  r = subprocess.run([os.sys.executable, "-c", _CRASH], capture_output=True, text=True, timeout=300, env=env)
  assert r.returncode == 0, f"exit status {r.returncode}: {r.stderr[-2000:]}"
  assert r.stdout.split() == ["2", "8"]

@pytest.fixture(scope="module", params=sorted({Device.DEFAULT, "CPU:C"}))
def big(request):
  """One 2^31 + 8 uint8 tensor whose last 8 elements are 1..8 (the rest is untouched, reads as zeros), freed after;
  on the default device and on the CPU's C renderer (one at a time)."""
  if _mem_available() < 4 << 30: pytest.skip("less than 4 GiB of memory available for a 2 GiB mapping")
  ref = BufRef(request.param, M, dtypes.uint8)
  ref.ensure().view(8, dtypes.uint8, M - 8).copyin(memoryview(np.arange(1, 9, dtype=np.uint8)))
  t = Tensor(lazy.buffer_view(ref, (M,)), device=request.param)
  yield t
  del t, ref
  import gc; gc.collect()

def test_elements_and_slices_past_2_31(big):
  assert big[2 ** 31 + 1].item() == 2 and big[-1].item() == 8 and big[M - 8].item() == 1
  assert big[2 ** 31 + 2: 2 ** 31 + 6].tolist() == [3, 4, 5, 6]
  assert big[M - 7::3].tolist() == [2, 5, 8]
  assert (big[-4:].cast(dtypes.int32) * 10).tolist() == [50, 60, 70, 80]

def test_gather_past_2_31(big):
  idx = Tensor([M - 1, 2 ** 31 - 1, M - 7, 5], dtype=dtypes.int64, device=big.device)
  assert big[idx].tolist() == [8, 0, 2, 0]
  assert big.gather(0, idx).tolist() == [8, 0, 2, 0]

def test_views_of_views_past_2_31(big):
  v = big.reshape(8, M // 8)              # rows of 2^28 + 1
  assert v[7, -1].item() == 8 and v[7, -8:].tolist() == list(range(1, 9))
  assert v.permute(1, 0)[-1].tolist() == [0] * 7 + [8]   # a strided read of the last column
  w = big[M - 16:].reshape(4, 4).flip(0)[0]               # a shrink of a flip of a reshape of a shrink
  assert w.tolist() == [5, 6, 7, 8]
  assert big.pad(((0, 2),))[-4:].tolist() == [7, 8, 0, 0]

def scalar_ast(off: int):
  """out[()] = in[off]: the single-element read of the issue, one view of shape ()."""
  return sink(store(0, (), load(1, dtypes.uint8, ShapeTracker.from_shape((M,)).reshape((M,)).shrink(((off, off + 1),)).reshape(()))))

def _all_renderers() -> list:
  from baregrad.codegen.renderer.amdgpu import AMDGPURenderer
  from baregrad.codegen.renderer.opencl import OpenCLRenderer
  return [LLVMRenderer(), CRenderer(), PTXRenderer(), CUDARenderer(), OpenCLRenderer(), AMDGPURenderer()]

@pytest.mark.parametrize("ren", _all_renderers(), ids=lambda r: r.name)
def test_single_element_offset_is_64_bit_in_every_renderer(ren):
  src = get_program(scalar_ast(2 ** 31 + 1), ren).src
  assert str(2 ** 31 + 1) in src or f"{2 ** 31 + 1:#018x}" in src.lower(), f"{ren.name}: no 64-bit offset {2 ** 31 + 1} in\n{src}"
  assert str(-(2 ** 31) + 1) not in src, f"{ren.name}: the offset wrapped to int32 in\n{src}"
  assert "-2147483647" not in src
  small = get_program(scalar_ast(12345), ren).src   # a small offset keeps int32 math
  assert {"LLVM": "i64 12345", "C": "12345LL", "PTX": "0x0000000000003039", "CUDA": "12345LL", "OpenCL": "12345L",
          "AMDGPU": "i64 12345"}[ren.name] not in small

def test_views_of_views_and_gathers_choose_64_bit():
  # a reshape the view cannot merge (two views) of a window past 2^31
  st = ShapeTracker.from_shape((M,)).shrink(((M - 12, M),)).reshape((3, 4)).permute((1, 0)).reshape((12,))
  assert len(st.views) == 2
  ast = sink(store(0, (12,), load(1, dtypes.uint8, st)))
  assert index_dtype(ast) == dtypes.int64
  assert "i64" in get_program(ast, LLVMRenderer()).src

def test_an_index_that_may_wrap_is_widened():
  # bounds past int32 (a sum or product that may overflow) make the kernel lower again in int64
  from baregrad.codegen.kernel import _may_wrap
  from baregrad.ir.ops import UOp
  r = UOp.range(1 << 20, 0)
  assert _may_wrap(r * 4096 + 7) and not _may_wrap(r * 2047 + 7)
  st_small = ShapeTracker.from_shape((1 << 20,)).shrink(((100, 112),)).reshape((3, 4)).permute((1, 0)).reshape((12,))
  assert index_dtype(sink(store(0, (12,), load(1, dtypes.uint8, st_small)))) == dtypes.int32

def test_an_expanded_stack_with_a_small_reach_keeps_32_bit():
  # a convolution's im2col operand broadcast over the output channels: 32x64x3136x576 > 2^31 positions, but each View
  # reaches 58M elements at most, and that is what the index arithmetic forms
  col = ShapeTracker((View((32, 56, 56, 3, 3, 64), (215296, 3712, 64, 3712, 64, 1), 0, None),
                      View((32, 1, 3136, 576), (1806336, 0, 576, 1), 0, None))).expand((32, 64, 3136, 576))
  ast = sink(store(0, (32, 64, 3136, 1), reduce(load(1, dtypes.float32, col), Ops.ADD, (3,))))
  assert index_dtype(ast) == dtypes.int32
