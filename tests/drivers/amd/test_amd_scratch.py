"""Scratch (the private segment) through the AMD driver: a 1 KiB private array indexed at run time and register spills
compared with NumPy, the amd_queue_t fields the CP reads (drivers/amd/scratch.py cites the rules), growth when a
program needs more, the CP's request for more scratch when the queue has too little, a fault past a wave's slot, and
gfx942's per-XCC sizing.

The device comes from DEV: DEV=AMD runs the kernel tests on Device["AMD"] (a GPU, or the mock with MOCKGPU=1); the
tests that break a rule or read the mock's state always use a private mock GPU."""
from __future__ import annotations
import ctypes, os
import numpy as np
import pytest
from baregrad.hal import Device
from baregrad.drivers.amd import AMDDevice, AMDFault, scratch
from baregrad.drivers.amd.testkernels import LOCAL_ARRAY, SCRATCHY, spill_ll, local_array_expected, spill_expected
from baregrad.drivers.amd_compile import AMDCompiler
from baregrad.hcq import HCQSignal, HCQTimeout
from tests.drivers.amd.test_amd_mock import open_mock, default_mock_env  # noqa: F401 (an autouse fixture: MOCKGPU_* set outside do not apply)

@pytest.fixture(scope="module")
def dev():
  """DEV=AMD: the registry's AMD device (a GPU, or the mock under MOCKGPU=1); else a private mock GPU."""
  if os.environ.get("DEV", "").split(":")[0] == "AMD":
    d = Device["AMD"]
    assert isinstance(d, AMDDevice)
    yield d
    return
  d, _ = open_mock()
  yield d
  d.close()

def lib(dev: AMDDevice, src: str) -> bytes: return AMDCompiler(dev.target.name).compile_cached(src)

def put(dev: AMDDevice, a: np.ndarray):
  b = dev.allocator.alloc(max(a.nbytes, 4))
  dev.allocator._copyin(b, memoryview(np.ascontiguousarray(a)).cast("B"))
  return b

def get(dev: AMDDevice, b, n: int) -> np.ndarray:
  out = np.zeros(n, np.uint32)
  dev.allocator._copyout(memoryview(out).cast("B"), b)
  return out

def queue_fields(dev: AMDDevice) -> dict[str, int]: return scratch.read_queue_fields(ctypes.string_at(dev.amd_queue_cpu, 0x100))

needs_exec = pytest.mark.skipif(os.environ.get("MOCKGPU_AMD_ARCH", "gfx1100") not in ("", "gfx1100") and os.environ.get("DEV", "").startswith("AMD"),
                                reason="the mock executes gfx1100 code only")

@needs_exec
def test_large_private_array(dev):
  """A 1 KiB private array per work-item indexed at run time, also read through a generic pointer (the private
  aperture): 8 workgroups of 64."""
  k, n = 5, 8 * 64
  out = dev.allocator.alloc(4 * n)
  dev.runtime(dev, "local_array", lib(dev, LOCAL_ARRAY))(out, global_size=(8, 1, 1), local_size=(64, 1, 1), vals=(k,))
  dev.synchronize()
  assert (get(dev, out, n) == np.array(local_array_expected(k, n), np.uint32)).all()

@needs_exec
def test_register_spills(dev):
  """More live values than the kernel's 16 VGPRs hold: LLVM spills to scratch."""
  x = np.random.default_rng(2).integers(0, 1 << 32, 4 * 64 + 40, dtype=np.uint64).astype(np.uint32)
  out, inp = dev.allocator.alloc(4 * 256), put(dev, x)
  dev.runtime(dev, "spill", lib(dev, spill_ll()))(out, inp, global_size=(4, 1, 1), local_size=(64, 1, 1))
  dev.synchronize()
  assert (get(dev, out, 256) == np.array(spill_expected(x.tolist(), 256), np.uint32)).all()

def test_queue_fields_and_growth():
  """What the CP reads from the amd_queue_t, for a gfx1100 (96 CUs, 6 shader engines, 32 scratch slots per CU): first a
  kernel with 68 bytes of private segment, then the 1 KiB array grows the scratch (the old VRAM is freed); the first
  kernel still runs after the growth."""
  dev, mock = open_mock()
  try:
    assert dev.scratch is None and queue_fields(dev)["compute_tmpring_size"] == 0
    small = dev.runtime(dev, "scratchy", AMDCompiler("gfx1100").compile_cached(SCRATCHY))
    lay, mem = dev.scratch
    f = queue_fields(dev)
    assert small.private_segment_size == 68 and lay.per_lane == 72                     # rounded to 256 / 32 bytes
    assert lay.wavesize == 72 * 32 // 256 == 9 and lay.waves == 96 * 32 // 6 == 512 and lay.slots == 3072
    assert f["compute_tmpring_size"] == 512 | (9 << 12) and f["scratch_backing_memory_location"] == mem.va
    assert f["scratch_backing_memory_byte_size"] == mem.size == 3072 * 9 * 256 and f["scratch_wave64_lane_byte_size"] == 72 * 32 // 64
    assert f["srd"][0] == mem.va & 0xFFFFFFFF and f["srd"][1] == (mem.va >> 32) | (1 << 30) and f["srd"][2] == mem.size
    used = dev.allocator.mem_used
    dev.runtime(dev, "local_array", AMDCompiler("gfx1100").compile_cached(LOCAL_ARRAY))
    lay2, mem2 = dev.scratch
    assert lay2.per_lane == 1032 and lay2.wavesize == 129 and queue_fields(dev)["compute_tmpring_size"] == 512 | (129 << 12)
    assert mem not in dev.memories and mem2 in dev.memories and dev.allocator.mem_used == used
    assert mock._mapping_at(mock.gpus[0], mem.va) is None or mem.va == mem2.va       # the old scratch is unmapped and freed
    out = dev.allocator.alloc(4 * 32)
    small(out, global_size=(1, 1, 1), local_size=(32, 1, 1), vals=(3,))
    dev.synchronize()
    assert get(dev, out, 1)[0] == 7
    assert "scratch" in dev.queue_state() and "WAVESIZE 129" in dev.queue_state()
  finally: dev.close()

def test_cp_requests_more_scratch_and_waits():
  """A dispatch whose private segment is larger than the queue's: the CP writes 0x401 (insufficient scratch, wave32)
  into the queue's queue_inactive_signal and waits (ROCr DynamicQueueEventsHandler); the host times out with the
  reason decoded. Once the runtime has grown the scratch and stored 0 there, the queue goes on. (The wait is on a signal of
  the test's own: a timeout on the device's timeline would recover the device, destroying the waiting queue.)"""
  dev, mock = open_mock()
  try:
    prg = dev.runtime(dev, "scratchy", AMDCompiler("gfx1100").compile_cached(SCRATCHY))
    sig = dev._gpu_alloc(4096, "userptr")                              # an amd_signal_t: kind, then the value at +8
    ctypes.c_uint64.from_address(dev.amd_queue_cpu + scratch.Q_INACTIVE_SIGNAL).value = sig.va
    lay, mem = dev.scratch
    ctypes.c_uint32.from_address(dev.amd_queue_cpu + scratch.Q_LANE64_SIZE).value = 16   # as if the queue held 32 bytes a lane
    out = dev.allocator.alloc(4 * 32)
    done = HCQSignal(dev, 0)
    dev.compute_queue_t().exec(prg, prg.fill_kernargs([out], [3]), (1, 1, 1), (32, 1, 1)).signal(done, 1).submit(dev)
    with pytest.raises(HCQTimeout) as e: done.wait(1, timeout_ms=300)
    assert "needs scratch the queue does not have" in str(mock.queue_state()) and "68 bytes per work-item needed" in mock.dmesg()
    assert ctypes.c_uint64.from_address(sig.cpu + 8).value == 0x401
    assert "queue_inactive_signal" in str(e.value) or "BLOCKED" in mock.queue_state()
    scratch.write_queue_fields(dev.amd_queue_cpu, lay, mem.va)         # the runtime's answer: scratch enough, then restart
    ctypes.c_uint64.from_address(sig.cpu + 8).value = 0
    done.wait(1, timeout_ms=5000)
    assert get(dev, out, 1)[0] == 7
  finally:
    ctypes.c_uint64.from_address(dev.amd_queue_cpu + scratch.Q_INACTIVE_SIGNAL).value = 0
    dev.close()

# reads its private array at 4096 + i: past the 1 KiB it has
OOB_IR = SCRATCHY.replace("@scratchy", "@oob").replace("%p = getelementptr [16 x i32], ptr addrspace(5) %a, i32 0, i32 %i",
                                                       "%j = add i32 %i, 4096\n  %p = getelementptr [16 x i32], ptr addrspace(5) %a, i32 0, i32 %j")

def test_access_past_the_wave_slot_is_a_vm_fault():
  """An access outside the scratch a wave was given faults like any bad GPU access: KFD's memory event, AMDFault with
  the address."""
  dev, mock = open_mock()
  try:
    prg = dev.runtime(dev, "oob", AMDCompiler("gfx1100").compile_cached(OOB_IR))
    prg(dev.allocator.alloc(128), global_size=(1, 1, 1), local_size=(32, 1, 1), vals=(0,))
    with pytest.raises(AMDFault, match="GPU VM fault at address"): dev.synchronize(timeout_ms=5000)
    assert any("outside the wave's scratch" in l for l in mock.log)
  finally: dev.close()

@needs_exec
def test_concurrent_scratch_dispatches_share_the_slots(dev):
  """Two scratch kernels with no barrier between them run interleaved on disjoint scratch slots: both right, no hazard
  (each wave's scratch is its own)."""
  mock = getattr(getattr(dev.port, "inner", dev.port), "mock", None)
  if mock is None: pytest.skip("reads the mock GPU's hazard report")
  prg = dev.runtime(dev, "local_array", lib(dev, LOCAL_ARRAY))
  a, b = dev.allocator.alloc(4 * 128), dev.allocator.alloc(4 * 128)
  n = len(mock.hazards)
  q = dev.compute_queue_t().wait(dev.timeline_signal, dev.timeline_value - 1)
  q.exec(prg, prg.fill_kernargs([a], [1]), (2, 1, 1), (64, 1, 1)).exec(prg, prg.fill_kernargs([b], [9]), (2, 1, 1), (64, 1, 1))
  q.signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
  dev.synchronize()
  assert (get(dev, a, 128) == np.array(local_array_expected(1, 128), np.uint32)).all()
  assert (get(dev, b, 128) == np.array(local_array_expected(9, 128), np.uint32)).all()
  assert len(mock.hazards) == n

def test_gfx942_scratch_per_xcc():
  """gfx942 (MI300X: 8 XCCs, 304 CUs, 32 shader engines): WAVESIZE in 1 KiB units, WAVES per XCC (a multiple of its 4
  shader engines), the byte size of one XCC's share; the CP accepts the dispatch (the mock does not run CDNA code)."""
  dev, mock = open_mock(arch="gfx942", skip_unexecutable=True)
  try:
    prg = dev.runtime(dev, "local_array", AMDCompiler("gfx942").compile_cached(LOCAL_ARRAY))
    lay, mem = dev.scratch
    f = queue_fields(dev)
    assert lay.lanes == 64 and lay.per_lane == 1040 and lay.wavesize == 1040 * 64 // 1024 == 65
    assert lay.waves == 304 * 32 // 8 == 1216 and lay.waves % 4 == 0 and lay.slots == 304 * 32
    assert f["scratch_backing_memory_byte_size"] == mem.size // 8 == f["srd"][2] and f["compute_tmpring_size"] == 1216 | (65 << 12)
    assert f["srd"][1] >> 31 == 1 and f["scratch_wave64_lane_byte_size"] == 1040
    prg(dev.allocator.alloc(4 * 64), global_size=(1, 1, 1), local_size=(64, 1, 1), vals=(1,))
    dev.synchronize(timeout_ms=5000)
    d = mock.dispatches[-1]
    assert d.scratch is not None and d.scratch.slots == 1216 * 8 and d.scratch.wave_bytes == 65 * 1024 and not mock.xcc_writes
  finally: dev.close()

def test_layout_limits():
  topo = scratch.Topology(96, 6, 1, 32, 32)
  with pytest.raises(ValueError, match="1..262128"): scratch.layout("gfx11", 32, topo, 0)
  with pytest.raises(ValueError, match="WAVESIZE holds"): scratch.layout("gfx9", 64, scratch.Topology(304, 32, 8, 32, 32), 200_000)
  low = scratch.layout("gfx11", 32, topo, 1024, occupancy=1 / 32)
  assert low.waves == 16 and low.slots == 96 and low.size == 96 * low.wave_bytes

def test_descriptor_asking_for_scratch_sgprs_is_refused(monkeypatch):
  """Architected flat scratch: a descriptor enabling the private segment buffer or flat scratch init SGPRs is refused."""
  from baregrad.drivers.amd_compile import KernelDescriptor, CodeObjectError
  dev, _ = open_mock()
  try:
    monkeypatch.setattr(KernelDescriptor, "user_sgprs", property(lambda self: ["private_segment_buffer", "kernarg_segment_ptr"]))
    with pytest.raises(CodeObjectError, match="asks for the private_segment_buffer user SGPRs: gfx1100 has architected flat scratch"):
      dev.runtime(dev, "scratchy", AMDCompiler("gfx1100").compile_cached(SCRATCHY))
  finally: dev.close()
