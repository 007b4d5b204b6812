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

KERNELS = r"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry idx(.param .u64 out, .param .u32 n) {
  .reg .b32 %r<12>; .reg .b64 %rd<8>; .reg .pred %p<2>;
  ld.param.u64 %rd1, [out]; cvta.to.global.u64 %rd1, %rd1; ld.param.u32 %r9, [n];
  mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x; mad.lo.s32 %r4, %r1, %r2, %r3;
  mov.u32 %r5, %ctaid.y; mov.u32 %r6, %nctaid.x; mov.u32 %r7, %ntid.y; mov.u32 %r8, %tid.y;
  mad.lo.s32 %r5, %r5, %r7, %r8; mul.lo.s32 %r6, %r6, %r2; mad.lo.s32 %r4, %r5, %r6, %r4;
  setp.ge.u32 %p1, %r4, %r9; @%p1 bra DONE;
  mul.wide.u32 %rd2, %r4, 4; add.s64 %rd3, %rd1, %rd2; st.global.u32 [%rd3], %r4;
DONE:
  ret;
}
.visible .entry blocksum(.param .u64 out, .param .u64 inp) {
  .shared .align 4 .b32 red[128];
  .reg .b32 %r<16>; .reg .b64 %rd<12>; .reg .pred %p<4>;
  ld.param.u64 %rd1, [out]; cvta.to.global.u64 %rd1, %rd1; ld.param.u64 %rd2, [inp]; cvta.to.global.u64 %rd2, %rd2;
  mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x; mad.lo.s32 %r4, %r1, %r2, %r3;
  mul.wide.u32 %rd3, %r4, 4; add.s64 %rd4, %rd2, %rd3; ld.global.u32 %r5, [%rd4];
  mov.u32 %r6, red; shl.b32 %r7, %r3, 2; add.u32 %r8, %r6, %r7; st.shared.u32 [%r8], %r5;
  bar.sync 0;
  shr.u32 %r9, %r2, 1;
LOOP:
  setp.lt.u32 %p1, %r3, %r9;
  @!%p1 bra SKIP;
  shl.b32 %r10, %r9, 2; add.u32 %r11, %r8, %r10; ld.shared.u32 %r12, [%r11]; ld.shared.u32 %r13, [%r8];
  add.u32 %r13, %r13, %r12; st.shared.u32 [%r8], %r13;
SKIP:
  bar.sync 0;
  shr.u32 %r9, %r9, 1; setp.ne.u32 %p2, %r9, 0; @%p2 bra LOOP;
  setp.ne.u32 %p3, %r3, 0; @%p3 bra DONE;
  ld.shared.u32 %r14, [%r6]; mul.wide.u32 %rd5, %r1, 4; add.s64 %rd6, %rd1, %rd5; st.global.u32 [%rd6], %r14;
DONE:
  ret;
}
.visible .entry generic_shared(.param .u64 out) {
  .shared .align 4 .b32 sm[64];
  .reg .b32 %r<16>; .reg .b64 %rd<12>;
  ld.param.u64 %rd1, [out]; cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x; mad.lo.s32 %r4, %r1, %r2, %r3;
  mov.u64 %rd2, sm; cvta.shared.u64 %rd3, %rd2;
  mul.wide.u32 %rd4, %r3, 4; add.s64 %rd5, %rd3, %rd4; st.u32 [%rd5], %r4;
  bar.sync 0;
  sub.u32 %r5, %r2, 1; sub.u32 %r5, %r5, %r3; mul.wide.u32 %rd6, %r5, 4; add.s64 %rd7, %rd3, %rd6; ld.u32 %r6, [%rd7];
  mul.wide.u32 %rd8, %r4, 4; add.s64 %rd9, %rd1, %rd8; st.global.u32 [%rd9], %r6;
  ret;
}
.visible .entry local_array(.param .u64 out, .param .u32 k) {
  .local .align 4 .b8 arr[1024];
  .reg .b32 %r<16>; .reg .b64 %rd<12>; .reg .pred %p<2>;
  ld.param.u64 %rd1, [out]; cvta.to.global.u64 %rd1, %rd1; ld.param.u32 %r9, [k];
  mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x; mad.lo.s32 %r4, %r1, %r2, %r3;
  mov.u64 %rd2, arr; mov.u32 %r5, 0;
FILL:
  mul.wide.u32 %rd3, %r5, 4; add.s64 %rd4, %rd2, %rd3; mul.lo.u32 %r6, %r5, %r4; st.local.u32 [%rd4], %r6;
  add.u32 %r5, %r5, 1; setp.lt.u32 %p1, %r5, 256; @%p1 bra FILL;
  add.u32 %r7, %r9, %r3; and.b32 %r7, %r7, 255; mul.wide.u32 %rd5, %r7, 4; add.s64 %rd6, %rd2, %rd5; ld.local.u32 %r8, [%rd6];
  cvta.local.u64 %rd7, %rd2; add.s64 %rd8, %rd7, %rd5; ld.u32 %r10, [%rd8]; add.u32 %r8, %r8, %r10;
  mul.wide.u32 %rd9, %r4, 4; add.s64 %rd10, %rd1, %rd9; st.global.u32 [%rd10], %r8;
  ret;
}
.visible .entry step(.param .u64 dst, .param .u64 src, .param .u32 mul, .param .u32 add) {
  .reg .b32 %r<10>; .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [dst]; cvta.to.global.u64 %rd1, %rd1; ld.param.u64 %rd2, [src]; cvta.to.global.u64 %rd2, %rd2;
  ld.param.u32 %r8, [mul]; ld.param.u32 %r9, [add];
  mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x; mad.lo.s32 %r4, %r1, %r2, %r3;
  mul.wide.u32 %rd3, %r4, 4; add.s64 %rd4, %rd2, %rd3; ld.global.u32 %r5, [%rd4];
  mad.lo.u32 %r5, %r5, %r8, %r9; add.s64 %rd5, %rd1, %rd3; st.global.u32 [%rd5], %r5;
  ret;
}
"""

def _spill_ptx(n: int = 40) -> str:
  """40 values loaded with ld.volatile and combined in reverse order: all live at once, more than .maxnreg 24 holds,
  so ptxas spills them to local memory (sm_90: 88 bytes stack frame, 84 bytes spill stores)."""
  body = [f"  ld.volatile.global.u32 %v{i}, [%rd4+{4 * i}]; add.u32 %v{i}, %v{i}, %r4;" for i in range(n)]
  body += [f"  mul.lo.u32 %r5, %r5, 31; xor.b32 %r5, %r5, %v{i};" for i in reversed(range(n))]
  return "\n".join([".version 8.0", ".target sm_90", ".address_size 64",
                    ".visible .entry spill(.param .u64 out, .param .u64 inp) .maxnreg 24 {",
                    f"  .reg .b32 %v<{n}>; .reg .b32 %r<8>; .reg .b64 %rd<8>;",
                    "  ld.param.u64 %rd1, [out]; cvta.to.global.u64 %rd1, %rd1; ld.param.u64 %rd2, [inp]; cvta.to.global.u64 %rd2, %rd2;",
                    "  mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x; mad.lo.s32 %r4, %r1, %r2, %r3;",
                    "  mul.wide.u32 %rd3, %r4, 4; add.s64 %rd4, %rd2, %rd3;", "  mov.u32 %r5, 0;", *body,
                    "  add.s64 %rd5, %rd1, %rd3; st.global.u32 [%rd5], %r5;", "  ret;", "}"])

@pytest.fixture(scope="module")
def dev():
  """DEV=NV: the registry's NV device (a GPU, or the mock under MOCKGPU=1); else a private mock GPU."""
  if os.environ.get("DEV", "").split(":")[0] == "NV":
    d = Device["NV"]
    assert isinstance(d, NVDevice)
    yield d
    return
  from baregrad.drivers.port import make_port
  from baregrad.drivers.mock.nvgpu import MockNVGPU
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
  prog(dev, "spill", _spill_ptx())(out, inp, global_size=(2, 1, 1), local_size=(32, 1, 1))
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
