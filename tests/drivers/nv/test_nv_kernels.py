"""NV kernels that need the launch set up right: many blocks (%ntid/%nctaid from constant bank 0), shared memory
(static, barriers, generic pointers through the shared window), local memory (a large private array, register
spills, generic pointers through the local window), and a graph of dependent launches replayed 1000 times.

The device comes from DEV: DEV=NV runs on Device["NV"] (the real GPU, or the mock with MOCKGPU=1); otherwise on a
private mock GPU, so CI runs them without a GPU. The kernels are PTX: ptxas assembles them for the GPU, the mock runs
the PTX."""
from __future__ import annotations
import os
import numpy as np
import pytest
from baregrad.hal import Device
from baregrad.hcq.graph import HCQGraph
from baregrad.drivers.nv import NVDevice

from baregrad.drivers.nv.testkernels import KERNELS, spill_ptx, dynamic_shared_ptx

@pytest.fixture(scope="module")
def dev():
  """DEV=NV: the registry's NV device (a GPU, or the mock under MOCKGPU=1); else a private mock GPU."""
  if os.environ.get("DEV", "").split(":")[0] == "NV":
    d = Device["NV"]
    assert isinstance(d, NVDevice)
    yield d
    return
  from baregrad.drivers.port import make_port
  from baregrad.drivers.mock.nv import MockNVGPU
  with pytest.MonkeyPatch.context() as mp:
    mp.delenv("MOCKGPU_ARCH", raising=False)
    mp.delenv("MOCKGPU_COUNT", raising=False)
    d = NVDevice("NV", port=make_port(MockNVGPU()))
  yield d
  d.close()

def prog(dev: NVDevice, name: str, src: str = KERNELS):
  return dev.runtime(dev, name, src.encode())

def put(dev: NVDevice, a: np.ndarray):
  b = dev.allocator.alloc(max(a.nbytes, 4))
  dev.allocator._copyin(b, memoryview(np.ascontiguousarray(a)).cast("B"))
  return b

def get(dev: NVDevice, b, n: int, dt=np.uint32) -> np.ndarray:
  out = np.zeros(n, dt)
  dev.allocator._copyout(memoryview(out).cast("B"), b)
  return out

def test_many_blocks(dev):
  """A 2D grid of 2D blocks, 1024 blocks in all: every element written once, by index = f(%ctaid, %ntid, %nctaid)."""
  n = 64 * 32 * 16 * 2
  out = put(dev, np.full(n, 0xFFFFFFFF, np.uint32))
  prog(dev, "idx")(out, global_size=(64, 16, 1), local_size=(32, 2, 1), vals=(n,))
  dev.synchronize()
  assert (get(dev, out, n) == np.arange(n)).all()

def test_shared_memory_reduction(dev):
  """Tree reduction through .shared with bar.sync, 96 blocks of 128 threads."""
  x = np.random.default_rng(0).integers(0, 1000, 96 * 128).astype(np.uint32)
  out, inp = dev.allocator.alloc(4 * 96), put(dev, x)
  prog(dev, "blocksum")(out, inp, global_size=(96, 1, 1), local_size=(128, 1, 1))
  dev.synchronize()
  assert (get(dev, out, 96) == x.reshape(96, 128).sum(1)).all()

def test_generic_pointer_into_shared(dev):
  """cvta.shared then generic ld/st: the address goes through the shared memory window."""
  out = dev.allocator.alloc(4 * 8 * 64)
  prog(dev, "generic_shared")(out, global_size=(8, 1, 1), local_size=(64, 1, 1))
  dev.synchronize()
  want = (np.arange(8)[:, None] * 64 + np.arange(63, -1, -1)[None, :]).reshape(-1)
  assert (get(dev, out, 8 * 64) == want).all()

def test_large_private_array(dev):
  """A 1 KiB .local array per thread indexed at run time (local memory, a 1 KiB stack frame), read back also through a
  generic pointer (cvta.local: the local window)."""
  k, n = 5, 4 * 64
  out = dev.allocator.alloc(4 * n)
  prog(dev, "local_array")(out, global_size=(4, 1, 1), local_size=(64, 1, 1), vals=(k,))
  dev.synchronize()
  gid, tid = np.arange(n), np.arange(n) % 64
  assert (get(dev, out, n) == (2 * ((k + tid) % 256) * gid).astype(np.uint32)).all()

def test_register_spills(dev):
  """More live values than .maxnreg allows: ptxas spills them to local memory."""
  x = np.random.default_rng(1).integers(0, 1 << 32, 64 + 40, dtype=np.uint64).astype(np.uint32)
  out, inp = dev.allocator.alloc(4 * 64), put(dev, x)
  prog(dev, "spill", spill_ptx())(out, inp, global_size=(2, 1, 1), local_size=(32, 1, 1))
  dev.synchronize()
  want, gid, M = np.zeros(64, np.uint64), np.arange(64, dtype=np.uint64), np.uint64(0xFFFFFFFF)
  for i in reversed(range(40)): want = ((want * np.uint64(31)) & M) ^ ((x[np.arange(64) + i].astype(np.uint64) + gid) & M)
  assert (get(dev, out, 64) == want.astype(np.uint32)).all()

def test_dependent_graph_replayed_1000_times(dev):
  """b = 3a + 1; c = 5b + 2; a = c + 7: each launch reads what the one before wrote, in one submission per replay,
  1000 replays back to back. Every replay's input alternates between two buffers (patched, as the jit does)."""
  n = 32
  S = prog(dev, "step")
  a0, a1 = put(dev, np.arange(n, dtype=np.uint32)), put(dev, np.arange(n, dtype=np.uint32) + 1000)
  b, c = dev.allocator.alloc(4 * n), dev.allocator.alloc(4 * n)
  g = HCQGraph(dev, [(S, [b, a0], (3, 1), (1, 1, 1), (n, 1, 1)), (S, [c, b], (5, 2), (1, 1, 1), (n, 1, 1)),
                     (S, [a0, c], (1, 7), (1, 1, 1), (n, 1, 1))])
  want = [np.arange(n, dtype=np.uint64), np.arange(n, dtype=np.uint64) + 1000]
  for r in range(1000):
    src = (a0, a1)[r % 2]
    g.replay([(0, 1, src.va_addr), (2, 0, src.va_addr)])
    want[r % 2] = ((want[r % 2] * 3 + 1) * 5 + 2 + 7) & 0xFFFFFFFF
  dev.synchronize()
  assert (get(dev, a0, n) == want[0].astype(np.uint32)).all() and (get(dev, a1, n) == want[1].astype(np.uint32)).all()

def test_dynamic_shared_memory_at_the_generation_limit(dev):
  """The most dynamic shared memory a block may have on this GPU (hw.GPUArch.max_shared: 227 KB on an H100), filled
  and read back by 2 blocks of 128 threads: the launch's QMD (SHARED_MEMORY_SIZE, the largest SM_CONFIG carveout) and
  constant bank 0's %dynamic_smem_size at the limit."""
  nbytes = dev.max_shared_mem
  prg = prog(dev, "dynsmem", dynamic_shared_ptx(nbytes))
  assert prg.dyn_shared == nbytes
  out = dev.allocator.alloc(4 * 256)
  prg(out, global_size=(2, 1, 1), local_size=(128, 1, 1))
  dev.synchronize()
  got = get(dev, out, 256)
  t = np.arange(256) % 128
  assert (got == nbytes // 4 - 1 - t + nbytes).all(), got[:8]
