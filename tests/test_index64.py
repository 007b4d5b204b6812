"""64-bit index math where a buffer or view passes 2^31 elements (smaller kernels keep int32), on every renderer;
a tensor too large for the device is an OutOfMemory error, not a crash."""
import os, subprocess, tempfile
import numpy as np
import pytest
from baregrad import Tensor, dtypes, Device
from baregrad.hal import OutOfMemory
from baregrad.engine import lazy
from baregrad.engine.graph import BufRef
from baregrad.ir.view import ShapeTracker
from baregrad.codegen.astbuild import load, store, sink, const
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
