"""Our PTX renderer and our CUDA C renderer give the same results: CUDA C goes through `nvcc -ptx`, both PTX
texts run in the mock GPU's PTX interpreter on the same inputs. (No GPU here: the interpreter stands in.)"""
import os, subprocess, tempfile
import numpy as np
import pytest
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import Ops
from baregrad.ir.view import ShapeTracker
from baregrad.codegen.astbuild import load, store, reduce, sink, const
from baregrad.codegen.program import get_program
from baregrad.codegen.renderer.ptx import PTXRenderer
from baregrad.codegen.renderer.cuda import CUDARenderer
from baregrad.drivers.nv_compile import find_nvcc
from baregrad.drivers.mock.ptx import PTXModule, Memory

nvcc = find_nvcc()
pytestmark = pytest.mark.skipif(nvcc is None, reason="nvcc not found: CUDA C cannot be turned into PTX here")
f32, i32 = dtypes.float32, dtypes.int32

def cuda_to_ptx(src: str) -> str:
  with tempfile.TemporaryDirectory() as d:
    p = os.path.join(d, "k.cu")
    with open(p, "w") as f: f.write(src)
    subprocess.run([nvcc, "-ptx", "-arch=sm_90", "-fmad=false", "-o", os.path.join(d, "k.ptx"), p], check=True, capture_output=True)
    with open(os.path.join(d, "k.ptx")) as f: return f.read()

def run(ptx: str, spec, arrays: list[np.ndarray]) -> np.ndarray:
  mem = Memory()
  addrs = []
  for a in arrays:
    va = mem.alloc(max(a.nbytes, 4))
    mem.write_bytes(va, a.tobytes())
    addrs.append(va)
  PTXModule(ptx).kernel(spec.name).launch(mem, addrs, spec.global_size, spec.local_size)
  return np.frombuffer(mem.read_bytes(addrs[0], arrays[0].nbytes), dtype=arrays[0].dtype).reshape(arrays[0].shape)

M, K, N = 8, 12, 16
sa = ShapeTracker.from_shape((M, K)).reshape((M, 1, K)).expand((M, N, K))
sb = ShapeTracker.from_shape((K, N)).permute((1, 0)).reshape((1, N, K)).expand((M, N, K))
CASES = {
  "elementwise_math": (sink(store(0, (64,), ((load(1, f32, (64,)) * 3.0).alu(Ops.EXP2) + load(2, f32, (64,)).alu(Ops.SQRT)).alu(Ops.MAX, const(f32, 1.5)))),
                       lambda r: [np.zeros(64, np.float32), (r.random(64, dtype=np.float32) - 0.5), r.random(64, dtype=np.float32)]),
  "int_divmod": (sink(store(0, (32,), load(1, i32, (32,)).alu(Ops.IDIV, load(2, i32, (32,))) + load(1, i32, (32,)).alu(Ops.MOD, load(2, i32, (32,))))),
                 lambda r: [np.zeros(32, np.int32), r.integers(-100, 100, 32, dtype=np.int32), r.integers(-5, 5, 32, dtype=np.int32)]),
  "matmul": (sink(store(0, (M, N, 1), reduce(load(1, f32, sa) * load(2, f32, sb), Ops.ADD, (2,)))),
             lambda r: [np.zeros((M, N), np.float32), r.random((M, K), dtype=np.float32), r.random((K, N), dtype=np.float32)]),
  "masked_pad": (sink(store(0, (10,), load(1, f32, ShapeTracker.from_shape((6,)).pad(((2, 2),))) + 1.0)),
                 lambda r: [np.zeros(10, np.float32), r.random(6, dtype=np.float32)]),
}

@pytest.mark.parametrize("case", sorted(CASES))
def test_ptx_and_cuda_renderers_agree(case):
  ast, make = CASES[case]
  rng = np.random.default_rng(0)
  arrays = make(rng)
  ptx_spec = get_program(ast, PTXRenderer("sm_90"))
  cu_spec = get_program(ast, CUDARenderer(), opts=ptx_spec.opts)
  ours = run(ptx_spec.src, ptx_spec, [a.copy() for a in arrays])
  theirs = run(cuda_to_ptx(cu_spec.src), cu_spec, [a.copy() for a in arrays])
  np.testing.assert_array_equal(ours, theirs)
