"""The AMD device after its work goes wrong, on the mock GPU (MOCKGPU=1 DEV=AMD): a kernel that never ends or a wait that
is never satisfied times out naming the queue and the packet or dispatch, and the device recovers (its queues destroyed
and created again) so the next computation is right; a bad packet (a queue reset) recovers the same way; a VM fault
names the address and, as amdkfd 6.12 leaves the process's queues on that GPU evicted for good, the device says it is
lost (at once, every time) instead of hanging. drivers/amd/faults.py has the kernel sources."""
from __future__ import annotations
import time
import numpy as np
import pytest
from helpers import AMDGCN_FILL_LL, raw_aql, registered
from baregrad.hal import Buffer
from baregrad.hcq import HCQSignal
from baregrad.ir.dtype import dtypes
from baregrad.drivers.port import make_port
from baregrad.drivers.mock.amd import MockAMDGPU
from baregrad.drivers.amd import AMDDevice, AMDFault, AMDDeviceLost, AMDQueueTimeout, hw

KERNELS_LL = AMDGCN_FILL_LL + r"""
define amdgpu_kernel void @spin(ptr addrspace(1) %flag, ptr addrspace(1) %out) {
entry:
  br label %loop
loop:                               ; waits for a flag nobody sets: the kernel never ends
  %v = load volatile i32, ptr addrspace(1) %flag, align 4
  %z = icmp eq i32 %v, 0
  br i1 %z, label %loop, label %done
done:
  store i32 1, ptr addrspace(1) %out, align 4
  ret void
}
"""

def _have_toolchain() -> bool:
  try:
    from baregrad.drivers.mock.rdna3.machine import RDNA3Machine  # noqa: F401
    from baregrad.drivers.amd_compile import AMDCompiler  # noqa: F401
  except ImportError: return False
  return True
needs_kernels = pytest.mark.skipif(not _have_toolchain(), reason="needs the LLVM AMDGPU compiler and the RDNA3 interpreter")

@pytest.fixture
def amd(monkeypatch):
  """A fresh mock AMD GPU (gfx1100) per test, with short time slices, registered as Device["AMD"] for Buffers and Tensors."""
  monkeypatch.delenv("MOCKGPU_AMD_ARCH", raising=False)
  monkeypatch.delenv("MOCKGPU_COUNT", raising=False)
  mock = MockAMDGPU(slice_s=0.02)
  with registered("AMD", AMDDevice("AMD", port=make_port(mock))) as dev: yield dev

def kernels(dev: AMDDevice) -> dict:
  from baregrad.drivers.amd_compile import AMDCompiler
  lib = AMDCompiler("gfx1100").compile_cached(KERNELS_LL)
  return {n: dev.runtime(dev, n, lib) for n in ("fill", "spin")}

def i32(buf: Buffer) -> list[int]: return np.frombuffer(buf.as_memoryview(), np.int32).tolist()

def zeros(n: int) -> Buffer: return Buffer("AMD", n, dtypes.int32).copyin(memoryview(np.zeros(n, np.int32)))

def check_works(dev: AMDDevice, fill) -> None:
  """The device computes right after whatever happened: a kernel, a copy round trip, the timeline."""
  out = zeros(64)
  fill(out._buf, global_size=(2, 1, 1), local_size=(32, 1, 1), vals=(100,))
  dev.synchronize()
  assert i32(out) == [100 + i for i in range(64)]
  x = np.arange(1000, dtype=np.int32) * 3
  assert i32(Buffer("AMD", 1000, dtypes.int32).copyin(memoryview(x))) == x.tolist()

@needs_kernels
def test_kernel_that_never_ends_times_out_naming_it_and_the_device_recovers(amd):
  k = kernels(amd)
  kept = Buffer("AMD", 256, dtypes.int32).copyin(memoryview(np.arange(256, dtype=np.int32)))
  flag, out = zeros(1), zeros(1)
  amd.synchronize()
  old_ids, old_queues = list(amd.queue_ids), dict(amd.port.mock.queues)
  k["spin"](flag._buf, out._buf, global_size=(1, 1, 1), local_size=(32, 1, 1))
  t = time.perf_counter()
  with pytest.raises(AMDQueueTimeout) as e: amd.synchronize(timeout_ms=300)
  assert time.perf_counter() - t < 5
  msg = str(e.value)
  assert "timed out after 300 ms" in msg and f"KFD queue {old_ids[0]}" in msg
  assert "dispatch of 'spin'" in msg and f"kernel object {k['spin'].kd_va:#x}" in msg, msg   # the dispatch that did not end
  assert e.value.recovered and "recovered" in msg and "AMDKFD_IOC_DESTROY_QUEUE" in msg
  assert all(amd.port.mock.queues[i] is not old_queues.get(i) for i in amd.queue_ids)   # new KFD queues (ids are reused)
  assert any("preempted" in l for l in amd.port.mock.log)   # KFD preempted the running waves when the queue was destroyed
  assert amd.timeline_signal.value == amd.timeline_value - 1
  check_works(amd, k["fill"])
  assert i32(kept) == list(range(256)) and i32(out) == [0]   # buffers kept; the lost kernel never stored
  from baregrad.tensor import Tensor   # a normal computation through the whole stack
  assert (Tensor(np.arange(6, dtype=np.float32), device="AMD") * 2 + 1).numpy().tolist() == [1, 3, 5, 7, 9, 11]

def test_wait_never_satisfied_on_the_copy_queue_times_out_and_recovers(amd):
  never = HCQSignal(amd, 0)
  amd.copy_queue_t().wait(never, 7).signal(amd.timeline_signal, amd.next_timeline()).submit(amd)
  with pytest.raises(AMDQueueTimeout) as e: amd.synchronize(timeout_ms=150)
  msg = str(e.value)
  assert "the copy queue (KFD queue" in msg and "POLL_REGMEM" in msg and f"{never.va_addr:#x}" in msg and "value=7" in msg, msg
  assert e.value.recovered
  never.value = 7   # too late: that work is gone, and releasing it now changes nothing
  amd.synchronize()
  x = np.arange(300, dtype=np.int32)
  assert i32(Buffer("AMD", 300, dtypes.int32).copyin(memoryview(x))) == x.tolist()

def test_timeout_on_a_callers_own_signal_does_not_recover(amd):
  """Only the device's own timeline counts as its work being stuck: a caller's signal may still be released."""
  never, done = HCQSignal(amd, 0), HCQSignal(amd, 0)
  ids = list(amd.queue_ids)
  amd.compute_queue_t().wait(never, 1).signal(done, 1).submit(amd)
  with pytest.raises(TimeoutError) as e: done.wait(1, timeout_ms=50)
  assert not isinstance(e.value, AMDQueueTimeout) and amd.queue_ids == ids
  never.value = 1
  done.wait(1, timeout_ms=5000)

@needs_kernels
def test_bad_packet_queue_reset_is_reported_and_the_device_recovers(amd):
  k = kernels(amd)
  raw_aql(amd, [hw.aql_header(hw.AQL_VENDOR, True, 2, 2) | (7 << 16)] + [0] * 15)   # vendor format 7: the CP stops the queue
  mock = amd.port.mock
  cq, sq = (mock.queues[i] for i in amd.queue_ids)
  assert cq.evicted and not sq.evicted   # KFD resets the bad queue alone (kfd_dqm_suspend_bad_queue_mes, set_queue_as_reset)
  ran = HCQSignal(amd, 0)
  amd.copy_queue_t().signal(ran, 1).submit(amd)
  assert ran.value == 1                  # the other queue still runs (the mock's engines run at the doorbell)
  with pytest.raises(AMDFault) as e: amd.synchronize(timeout_ms=2000)
  msg = str(e.value)
  assert "GPU hang/reset" in msg and "reset_cause GPU_HANG" in msg and "memory_lost 1" in msg
  assert "AQL packet 0: VENDOR" in msg and "format=7" in msg, msg   # the packet the queue stopped at
  assert e.value.recovered and "recovered" in msg and not isinstance(e.value, AMDDeviceLost)
  assert any("is reset" in l for l in amd.port.mock.log)
  check_works(amd, k["fill"])

@needs_kernels
def test_memory_fault_names_the_address_and_the_lost_device_says_so_at_once(amd):
  k = kernels(amd)
  amd.probe_ms = 200   # the recreated queues never run here: do not wait long to find that out
  buf = amd.allocator.alloc(256)
  end = max(m.va + m.size for m in amd.memories)
  st = k["fill"].fill_kernargs([buf], [1])
  st.update_buffer(0, end + 0x2000)   # out of bounds: past the last allocation, where nothing is mapped
  amd.compute_queue_t().wait(amd.timeline_signal, amd.timeline_value - 1).exec(k["fill"], st, (32, 1, 1)) \
     .signal(amd.timeline_signal, amd.next_timeline()).submit(amd)
  t = time.perf_counter()
  with pytest.raises(AMDFault) as e: amd.synchronize(timeout_ms=10000)
  assert time.perf_counter() - t < 5   # raised on KFD's memory event, not at the timeout
  msg = str(e.value)
  assert f"GPU VM fault at address {end + 0x2000:#x} (not present)" in msg and f"gpu_id {amd.gpu_id:#x}" in msg, msg
  assert "0x2000 bytes past the end of a" in msg and "dispatch of 'fill'" in msg
  # amdkfd keeps this process's queues evicted after a VM fault: the recreated queues do not run, and the device says so
  assert isinstance(e.value, AMDFault) and not e.value.recovered and "lost for this process" in msg and "create_queue_cpsch" in msg
  assert all(q.evicted for q in amd.port.mock.queues.values())
  for attempt in (lambda: amd.synchronize(), lambda: k["fill"](buf, global_size=(1, 1, 1), local_size=(32, 1, 1), vals=(0,)),
                  lambda: zeros(4)):
    t = time.perf_counter()
    with pytest.raises(AMDDeviceLost, match="GPU VM fault at address"): attempt()
    assert time.perf_counter() - t < 1
