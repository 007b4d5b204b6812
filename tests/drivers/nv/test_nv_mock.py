"""The NV driver on the mock NVIDIA GPU: RM object tree, memory, DMA copies, semaphores across queues, timeouts,
patching, method encode/decode, and the HCQ conformance suite. The mock is handed to the driver through the port
(make_port(MockNVGPU())); nothing here sets MOCKGPU globally."""
from __future__ import annotations
from tests.paths import REPO
import ctypes, errno, re, threading, time
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from baregrad.hal import Device, Buffer, DeviceUnavailable, OutOfMemory
from baregrad.hcq import HCQSignal, HCQTimeout
from baregrad.ir.dtype import dtypes
from baregrad.drivers.port import IoctlError, TracingPort, make_port, MockPort
from baregrad.drivers.mock.nv import MockNVGPU
from baregrad.drivers.nv import NVDevice, NVComputeQueue, RMError
from baregrad.drivers.nv import hw
from baregrad.ctypes_autogen.nv import nv_580 as nv

@pytest.fixture(scope="module", autouse=True)
def hopper_mock():
  """These tests are written for the default mock (one Hopper, sm_90); MOCKGPU_ARCH/MOCKGPU_COUNT set outside do not
  apply here (tests/drivers/nv/test_nv_generations.py covers the other generations and several GPUs)."""
  with pytest.MonkeyPatch.context() as mp:
    mp.delenv("MOCKGPU_ARCH", raising=False)
    mp.delenv("MOCKGPU_COUNT", raising=False)
    yield

def open_mock(**kw) -> tuple[NVDevice, MockNVGPU]:
  mock = MockNVGPU(**kw)
  return NVDevice("NV", port=make_port(mock)), mock

@pytest.fixture(scope="module")
def nvdev():
  """One mock NV device for the module, registered as Device["NV"] so Buffers find it."""
  dev, mock = open_mock()
  prev = Device._open.get("NV")
  Device._open["NV"] = dev
  yield dev
  dev.close()
  if prev is not None: Device._open["NV"] = prev

@pytest.fixture
def mock(nvdev) -> MockNVGPU: return nvdev.port.mock

def i32(buf: Buffer) -> list[int]: return np.frombuffer(buf.as_memoryview(), np.int32).tolist()

# ---------------------------------------------------------------- HCQ conformance suite on the mock NV
# the suite's kernels (fill, inc, slow_fill: buffers, then int64 values; one thread per element), in PTX
NV_KERNELS_PTX = r"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry fill(.param .u64 out, .param .s64 val) {
  .reg .b32 %r<8>; .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [out];
  ld.param.s64 %rd2, [val];
  cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x;
  mad.lo.s32 %r4, %r1, %r2, %r3;
  cvt.u32.u64 %r5, %rd2;
  add.s32 %r5, %r5, %r4;
  mul.wide.s32 %rd3, %r4, 4;
  add.s64 %rd4, %rd1, %rd3;
  st.global.u32 [%rd4], %r5;
  ret;
}
.visible .entry inc(.param .u64 a) {
  .reg .b32 %r<8>; .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [a];
  cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x;
  mad.lo.s32 %r4, %r1, %r2, %r3;
  mul.wide.s32 %rd3, %r4, 4;
  add.s64 %rd4, %rd1, %rd3;
  ld.global.u32 %r5, [%rd4];
  add.s32 %r5, %r5, 1;
  st.global.u32 [%rd4], %r5;
  ret;
}
.visible .entry slow_fill(.param .u64 out) {
  .reg .b32 %r<8>; .reg .b64 %rd<8>; .reg .pred %p<2>;
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r6, 0;
LOOP:
  add.s32 %r6, %r6, 1;
  setp.lt.s32 %p1, %r6, 200;
  @%p1 bra LOOP;
  mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x;
  mad.lo.s32 %r4, %r1, %r2, %r3;
  mul.wide.s32 %rd3, %r4, 4;
  add.s64 %rd4, %rd1, %rd3;
  mov.u32 %r5, 7;
  st.global.u32 [%rd4], %r5;
  ret;
}
"""

def nv_test_lib(request) -> bytes: return NV_KERNELS_PTX.encode()

from tests.device import test_hcq  # noqa: E402
test_hcq.KERNEL_PROVIDERS.setdefault("NV", nv_test_lib)
from tests.device.test_hcq import (kernel, test_program_call_and_vals, test_wait_returns_kernel_time, test_timeline, test_cross_queue_ordering,  # noqa: F401,E402
                      test_timeout_reports_queue_state, test_patch_and_resubmit, test_graph_replay, test_timestamps_monotonic,
                      test_decode_names_fields, test_graph_barriers_and_argument_ring)

@pytest.fixture
def hcq_device(nvdev):
  yield nvdev
  nvdev.synchronize(timeout_ms=5000)

# ---------------------------------------------------------------- opening
def test_open_reads_gpu(nvdev, mock):
  assert nvdev.arch == "sm_90" and nvdev.sm_count == mock.gpcs * mock.tpc_per_gpc * mock.sm_per_tpc
  assert nvdev.driver_version == mock.driver_version and nvdev.uuid == mock.uuid
  assert (nvdev.gpfifo_class, nvdev.compute_class, nvdev.dma_class) == (nv.HOPPER_CHANNEL_GPFIFO_A, nv.HOPPER_COMPUTE_A, nv.HOPPER_DMA_COPY_A)
  import re
  states = re.findall(r"GP_GET (\d+) GP_PUT (\d+)", mock.channel_state())
  assert len(states) == 2 and all(g == p != "0" for g, p in states)  # both channels ran their SET_OBJECT submit and are idle

def test_unknown_driver_version_refused_by_name():
  with pytest.raises(DeviceUnavailable, match=r"999\.12\.3.*no generated bindings"): open_mock(driver_version="999.12.3")

def test_no_nvidiactl_is_unavailable(monkeypatch):
  class NoDriver(MockNVGPU):
    def open(self, path, flags): raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
  with pytest.raises(DeviceUnavailable, match="/dev/nvidiactl not found"): NVDevice("NV", port=make_port(NoDriver()))
  # the registry's default falls back to CPU when DEV=NV cannot open (this machine has no NVIDIA driver)
  import os
  if os.path.exists("/dev/nvidiactl"): pytest.skip("a real NVIDIA driver is loaded here")
  saved_open, saved_default = Device._open.pop("NV", None), Device._default
  monkeypatch.setenv("DEV", "NV")
  monkeypatch.delenv("MOCKGPU", raising=False)
  Device.reset_default()
  try: assert Device.DEFAULT == "CPU"
  finally:
    Device._default = saved_default
    if saved_open is not None: Device._open["NV"] = saved_open

def test_trace_names_ioctls():
  lines: list[str] = []
  mock = MockNVGPU()
  dev = NVDevice("NV", port=TracingPort(MockPort(mock), lines.append))
  try:
    text = "\n".join(lines)
    for name in ("NV_ESC_CHECK_VERSION_STR", "NV_ESC_CARD_INFO", "UVM_INITIALIZE", "UVM_MM_INITIALIZE", "NV_ESC_RM_ALLOC", "NV_ESC_RM_CONTROL",
                 "UVM_REGISTER_GPU_VASPACE", "UVM_MAP_EXTERNAL_ALLOCATION", "NV_ESC_RM_MAP_MEMORY", "doorbell"):
      assert name in text, name
  finally: dev.close()

def test_trace_follows_pointers_trims_arrays_and_decodes_doorbells():
  """IOCTL_TRACE on NV: pAllocParms followed into the class's parameter struct, control params into the command's,
  classes, control commands and statuses named from the headers, UVM's 256 per-GPU slots cut to gpuAttributesCount,
  and each doorbell followed by the GPFIFO entries it submitted, decoded down to the launch."""
  from baregrad.drivers.nv.testkernels import KERNELS
  lines: list[str] = []
  dev = NVDevice("NV", port=TracingPort(MockPort(MockNVGPU()), lines.append))
  try:
    prg = dev.runtime(dev, "idx", KERNELS.encode())
    out = dev.allocator.alloc(4 * 64)
    prg(out, vals=(64,), global_size=(2, 1, 1), local_size=(32, 1, 1))
    dev.synchronize()
    text = "\n".join(lines)
    assert re.search(rf"hClass={nv.FERMI_VASPACE_A:#x} \(FERMI_VASPACE_A\), pAllocParms=0x[0-9a-f]+ -> NV_VASPACE_ALLOCATION_PARAMETERS "
                     rf"\{{index=0, flags={nv.NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING | nv.NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED:#x}", text)
    assert re.search(rf"cmd={nv.NV2080_CTRL_CMD_MC_GET_ARCH_INFO:#x} \(NV2080_CTRL_CMD_MC_GET_ARCH_INFO\), flags=0, "
                     r"params=0x[0-9a-f]+ -> NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS \{architecture=", text)
    assert "status=0 (NV_OK)" in text and "grInfoList=0x" in text and "-> NVXXXX_CTRL_XXX_INFO[5]" in text
    uvm = [l for l in lines if "UVM_MAP_EXTERNAL_ALLOCATION" in l][0]
    assert "(1 used of 256), gpuAttributesCount=1" in uvm and uvm.count("gpuUuid") == 1, uvm
    bell = [l for l in lines if "doorbell" in l and "EXEC" in l]
    assert bell and "compute channel GPFIFO entry" in bell[0] and "launch 'idx' grid=(2, 1, 1) block=(32, 1, 1)" in bell[0], bell
    assert any("no new GPFIFO entries" in l for l in lines if "doorbell" in l)   # a re-ring (_kick) says it submitted nothing
  finally: dev.close()

# ---------------------------------------------------------------- RM object tree
def test_bad_parent(nvdev):
  p = nv.NV_CHANNEL_ALLOC_PARAMS(gpFifoEntries=16)
  with pytest.raises(RMError) as e: nvdev.rm_alloc(nvdev.nvdevice, nv.HOPPER_CHANNEL_GPFIFO_A, p)
  assert e.value.status == nv.NV_ERR_INVALID_OBJECT_PARENT
  msg = str(e.value)
  assert "NV_ESC_RM_ALLOC(HOPPER_CHANNEL_GPFIFO_A)" in msg and "NV_ERR_INVALID_OBJECT_PARENT" in msg and "hObjectParent=" in msg
  with pytest.raises(RMError, match="NV_ERR_INVALID_OBJECT_PARENT"): nvdev.rm_alloc(0xdead, nv.NV20_SUBDEVICE_0, nv.NV2080_ALLOC_PARAMETERS())
  # a context share's parent must be a channel group, not the device
  with pytest.raises(RMError, match="NV_ERR_INVALID_OBJECT_PARENT"):
    nvdev.rm_alloc(nvdev.nvdevice, hw.FERMI_CONTEXT_SHARE_A, nv.NV_CTXSHARE_ALLOCATION_PARAMETERS(hVASpace=nvdev.vaspace))

def test_bad_class(nvdev):
  with pytest.raises(RMError) as e: nvdev.rm_alloc(nvdev.subdevice, 0xbeef)
  assert e.value.status == nv.NV_ERR_INVALID_CLASS and "NV_ERR_INVALID_CLASS" in str(e.value)
  with pytest.raises(RMError, match="NV_ERR_INVALID_CLASS"): nvdev.rm_alloc(nvdev.nvdevice, nv.BLACKWELL_COMPUTE_A)  # not a Hopper class

def test_bad_sizes(nvdev):
  # the escape's size field must match its parameter struct: the kernel refuses with EINVAL
  p = nv.NVOS00_PARAMETERS(hRoot=nvdev.root, hObjectOld=0x1234)
  bad = NVDevice._req(nv.NV_ESC_RM_FREE, nv.NVOS21_PARAMETERS)
  with pytest.raises(IoctlError) as e: nvdev.port.ioctl(nvdev.fd_ctl, bad, p, "NV_ESC_RM_FREE")
  assert e.value.err == errno.EINVAL and "NV_ESC_RM_FREE" in str(e.value)
  # the allocation parameters' size must be the class's struct
  class Short(ctypes.Structure): _fields_ = [("x", ctypes.c_uint32)]
  with pytest.raises(RMError, match="NV_ERR_INVALID_PARAM_STRUCT"): nvdev.rm_alloc(nvdev.nvdevice, nv.FERMI_VASPACE_A, Short())
  # and a control's parameters its struct
  with pytest.raises(RMError, match="NV_ERR_INVALID_PARAM_STRUCT"):
    nvdev.rm_control(nvdev.subdevice, nv.NV2080_CTRL_CMD_MC_GET_ARCH_INFO, Short(), "MC_GET_ARCH_INFO")

def test_controls_and_handles(nvdev):
  with pytest.raises(RMError, match="NV_ERR_NOT_SUPPORTED"):  # a subdevice control on the device object
    nvdev.rm_control(nvdev.nvdevice, nv.NV2080_CTRL_CMD_MC_GET_ARCH_INFO, nv.NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS(), "MC_GET_ARCH_INFO")
  with pytest.raises(RMError, match="NV_ERR_INVALID_OBJECT_HANDLE"): nvdev.rm_free(0x5eed)
  with pytest.raises(RMError, match="NV_ERR_INSERT_DUPLICATE_NAME"):
    nvdev.rm_alloc(nvdev.nvdevice, nv.NV20_SUBDEVICE_0, nv.NV2080_ALLOC_PARAMETERS(), handle=nvdev.subdevice)

def test_free_frees_children(nvdev, mock):
  g = nvdev.rm_alloc(nvdev.nvdevice, nv.KEPLER_CHANNEL_GROUP_A, nv.NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS(engineType=hw.NV2080_ENGINE_TYPE_GRAPHICS))
  cs = nvdev.rm_alloc(g, hw.FERMI_CONTEXT_SHARE_A, nv.NV_CTXSHARE_ALLOCATION_PARAMETERS(hVASpace=nvdev.vaspace))
  p = nv.NV_CHANNEL_ALLOC_PARAMS(gpFifoOffset=nvdev.gpfifo_mem.va, gpFifoEntries=16, hContextShare=cs)
  p.hUserdMemory[0], p.userdOffset[0] = nvdev.notifier_mem.handle, 0x200
  ch = nvdev.rm_alloc(g, nv.HOPPER_CHANNEL_GPFIFO_A, p)
  nvdev.rm_alloc(ch, nv.HOPPER_COMPUTE_A)
  with pytest.raises(RMError, match="NV_ERR_INVALID_STATE"): nvdev.rm_alloc(ch, nv.HOPPER_COMPUTE_A)  # one per channel
  n = len(mock.channels)
  with pytest.raises(RMError, match="NV_ERR_INVALID_OBJECT_PARENT"): nvdev.rm_free(ch, parent=nvdev.nvdevice)
  nvdev.rm_free(g)
  assert len(mock.channels) == n - 1
  with pytest.raises(RMError, match="NV_ERR_INVALID_OBJECT_HANDLE"): nvdev.rm_free(cs)

def test_uvm_checks(nvdev):
  with pytest.raises(RMError, match="NV_ERR_UVM_ADDRESS_IN_USE"):  # overlaps the signal pool's range
    nvdev.uvm(nv.UVM_CREATE_EXTERNAL_RANGE, nv.UVM_CREATE_EXTERNAL_RANGE_PARAMS(base=nvdev.signal_pool.va_addr, length=4096), "UVM_CREATE_EXTERNAL_RANGE")
  with pytest.raises(RMError, match="NV_ERR_INVALID_ADDRESS"): nvdev.uvm(nv.UVM_FREE, nv.UVM_FREE_PARAMS(base=0x1234000, length=4096), "UVM_FREE")

# ---------------------------------------------------------------- memory
def test_alloc_free_oom_recovery():
  dev, mock = open_mock(vram_bytes=32 << 20)
  try:
    base = mock.vram_used
    with pytest.raises(OutOfMemory, match="NV_ERR_NO_MEMORY"): dev.allocator.alloc(64 << 20)
    assert mock.vram_used == base and "NV_ERR_NO_MEMORY" in mock.log[-1]
    b = dev.allocator.alloc(1 << 20)  # the driver is still usable
    dev.allocator._copyin(b, memoryview(bytearray(b"\x07" * (1 << 20))))
    out = bytearray(1 << 20)
    dev.allocator._copyout(memoryview(out), b)
    assert out == b"\x07" * (1 << 20)
    n = len(dev.memories)
    dev.allocator.free(b, 1 << 20)
    dev.allocator.free_cache()
    assert mock.vram_used == base and len(dev.memories) == n - 1
  finally: dev.close()

@pytest.mark.parametrize("n", [1, 4096, 12345, (5 << 20) + 3])
def test_copy_host_device_roundtrip(nvdev, n):
  data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
  b = Buffer("NV", n, dtypes.uint8).copyin(memoryview(data))
  assert bytes(b.as_memoryview()) == data.tobytes()

def test_device_copy_on_both_queues(nvdev):
  a = Buffer("NV", 256, dtypes.int32).copyin(memoryview(np.arange(256, dtype=np.int32)))
  b = Buffer("NV", 256, dtypes.int32).allocate()
  c = Buffer("NV", 256, dtypes.int32).allocate()
  s = HCQSignal(nvdev)
  nvdev.compute_queue_t().copy(b._buf.va_addr, a._buf.va_addr, 1024).signal(s, 1).submit(nvdev)
  nvdev.copy_queue_t().wait(s, 1).copy(c._buf.va_addr + 512, b._buf.va_addr, 512).signal(s, 2).submit(nvdev)
  s.wait(2, timeout_ms=5000)
  assert i32(b) == list(range(256)) and i32(c)[128:] == list(range(128))

# ---------------------------------------------------------------- signals, timeline, timeouts, patching
def test_signals_across_queues(nvdev):
  s1, s2, s3 = HCQSignal(nvdev), HCQSignal(nvdev), HCQSignal(nvdev)
  nvdev.copy_queue_t().wait(s1, 5).signal(s2, 7).submit(nvdev)                    # blocked until the compute queue releases s1
  assert s2.value == 0
  nvdev.compute_queue_t().signal(s1, 5).wait(s2, 7).signal(s3, 9).submit(nvdev)   # releases s1, then waits on the copy queue
  s3.wait(9, timeout_ms=5000)
  assert (s1.value, s2.value) == (5, 7) and 0 < s1.timestamp <= s2.timestamp <= s3.timestamp

def test_host_release_unblocks(nvdev):
  s1, s2 = HCQSignal(nvdev), HCQSignal(nvdev)
  nvdev.compute_queue_t().wait(s1, 3).signal(s2, 1).submit(nvdev)
  assert s2.value == 0
  s1.value = 3  # the driver rings the doorbell after a host write: the GPU re-checks the acquire
  s2.wait(1, timeout_ms=5000)

def test_timeline_over_queues(nvdev):
  dev = nvdev
  t0 = dev.timeline_value
  for i in range(10):
    q = (dev.compute_queue_t if i % 2 else dev.copy_queue_t)()
    with dev.submit_lock: q.wait(dev.timeline_signal, dev.timeline_value - 1).signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
  dev.synchronize()
  assert dev.timeline_signal.value == t0 + 9 == dev.timeline_value - 1

def test_timeout_message_has_gpfifo_state(nvdev):
  never, done = HCQSignal(nvdev), HCQSignal(nvdev)
  nvdev.copy_queue_t().wait(never, 42).signal(done, 1).submit(nvdev)
  with pytest.raises(HCQTimeout) as e: done.wait(1, timeout_ms=100)
  msg = str(e.value)
  assert "copy channel" in msg and "GP_GET" in msg and "GP_PUT" in msg and "1 entries pending" in msg
  assert f"WAIT      addr={never.va_addr:#x} value=42" in msg and "SEM_EXECUTE ACQ_STRICT_GEQ" in msg
  assert "SEM_PAYLOAD_LO" in msg  # the raw methods of the stuck segment
  assert f"->[@    1] WAIT      addr={never.va_addr:#x}" in msg and "the GPU is at" in msg  # where USERD's pushbuffer GET points
  never.value = 42
  done.wait(1, timeout_ms=5000)

def test_hang_watchdog_reports_while_still_waiting(nvdev, monkeypatch, capfd):
  """HANG_WARN_MS: a wait without progress prints the signal waited on, the value, its current value and the blocked
  packet, then keeps waiting, so a late release still completes the wait."""
  from baregrad import knobs
  monkeypatch.setenv("HANG_WARN_MS", "100"); knobs.reset()
  never, done = HCQSignal(nvdev), HCQSignal(nvdev)
  never.value = 3
  nvdev.copy_queue_t().wait(never, 42).signal(done, 1).submit(nvdev)
  releaser = threading.Timer(1.0, lambda: setattr(never, "value", 42))
  releaser.start()
  try: done.wait(1, timeout_ms=10000)   # returns: the release came after the warning
  finally:
    releaser.join()
    monkeypatch.delenv("HANG_WARN_MS"); knobs.reset()
  err = capfd.readouterr().err
  assert f"HANG? NV: no progress for 100 ms waiting for signal {done.va_addr:#x} >= 1 (it is 0;" in err, err
  assert f"->[@    1] WAIT      addr={never.va_addr:#x} value=42" in err and "OPERATION=ACQ_STRICT_GEQ" in err, err

def test_patch_and_resubmit_copy(nvdev):
  a = Buffer("NV", 64, dtypes.int32).copyin(memoryview(np.arange(64, dtype=np.int32)))
  b = Buffer("NV", 64, dtypes.int32).copyin(memoryview(np.zeros(64, np.int32)))
  c = Buffer("NV", 64, dtypes.int32).copyin(memoryview(np.zeros(64, np.int32)))
  sig = HCQSignal(nvdev)
  q = nvdev.copy_queue_t().copy(b._buf.va_addr, a._buf.va_addr, 256)
  i_copy = q.last
  q.signal(sig, 1)
  i_sig = q.last
  q.submit(nvdev)
  sig.wait(1, timeout_ms=5000)
  q.update_copy(i_copy, dest=c._buf.va_addr, src=a._buf.va_addr + 128, nbytes=64).update_signal(i_sig, value=2).submit(nvdev)
  sig.wait(2, timeout_ms=5000)
  assert i32(b) == list(range(64)) and i32(c) == list(range(32, 48)) + [0] * 48
  assert q.field(i_copy, "dest") == c._buf.va_addr and q.field(i_copy, "nbytes") == 64

def test_channel_fault_reported_fast():
  dev, mock = open_mock()
  try:
    dev.copy_queue_t().copy(0x7770000000, 0x7780000000, 64).signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
    t0 = time.perf_counter()
    with pytest.raises(RuntimeError, match="Xid 31") as e: dev.synchronize(timeout_ms=5000)
    assert time.perf_counter() - t0 < 2 and "COPY" in str(e.value)
    assert "MMU fault" in mock.log[-1]
  finally: dev.close()

def test_exec_2d_grid_and_blocks(nvdev, mock):
  prg = nvdev.runtime(nvdev, "fill", NV_KERNELS_PTX.encode())
  out = Buffer("NV", 96, dtypes.int32).allocate()
  prg(out._buf, global_size=(3, 1, 1), local_size=(32, 1, 1), vals=(1000,))
  nvdev.synchronize()
  assert i32(out) == [1000 + i for i in range(96)]
  q = mock.launches[-1]
  assert q["grid"] == (3, 1, 1) and q["block"] == (32, 1, 1) and q["cbank0"] % 64 == 0

def test_exec_fault_in_kernel_reported():
  dev, mock = open_mock()
  try:
    prg = dev.runtime(dev, "inc", NV_KERNELS_PTX.encode())
    prg.fill_kernargs([], [])  # wrong: inc takes one buffer
  except ValueError as e: assert "takes 1 parameters" in str(e)
  try:
    from baregrad.hcq import HCQBuffer
    bogus = HCQBuffer(0x7770000000, 64)
    prg(bogus, global_size=(4, 1, 1))
    with pytest.raises(RuntimeError, match="Xid 31"): dev.synchronize(timeout_ms=5000)
    assert "MMU fault in kernel inc" in mock.log[-1]
  finally: dev.close()

# ---------------------------------------------------------------- encode/decode round trips
class _Sig:
  def __init__(self, a: int) -> None: self.va_addr, self.timestamp_va_addr = a, a + 8

_addr = st.integers(0, (1 << 40) - 16).map(lambda a: a & ~7)
_cmd = st.one_of(st.tuples(st.just("wait"), _addr, st.integers(0, 2**64 - 1)), st.tuples(st.just("signal"), _addr, st.integers(0, 2**64 - 1)),
                 st.tuples(st.just("timestamp"), _addr), st.tuples(st.just("copy"), st.integers(0, 2**57 - 1), st.integers(0, 2**57 - 1),
                 st.integers(0, 2**32 - 1)), st.tuples(st.just("barrier")))

@settings(max_examples=80, deadline=None)
@given(st.lists(_cmd, max_size=10), st.data())
def test_encode_decode_roundtrip(cmds, data):
  q = NVComputeQueue()
  for c in cmds:
    if c[0] == "wait": q.wait(_Sig(c[1]), c[2])
    elif c[0] == "signal": q.signal(_Sig(c[1]), c[2])
    elif c[0] == "timestamp": q.timestamp(_Sig(c[1]))
    elif c[0] == "copy": q.copy(c[1], c[2], c[3])
    else: q.memory_barrier()
  for i, c in enumerate(cmds):  # patch some, then decode everything from the words alone
    if c[0] in ("wait", "signal") and data.draw(st.booleans()):
      c = cmds[i] = (c[0], c[1], data.draw(st.integers(0, 2**64 - 1)))
      (q.update_wait if c[0] == "wait" else q.update_signal)(i, value=c[2])
    if c[0] == "copy" and data.draw(st.booleans()):
      c = cmds[i] = ("copy", data.draw(st.integers(0, 2**57 - 1)), c[2], data.draw(st.integers(0, 2**32 - 1)))
      q.update_copy(i, dest=c[1], nbytes=c[3])
  lines = [l for _, l in hw.summarize(hw.decode_pushbuffer(list(q.words)))]
  assert len(lines) == len(cmds)
  for c, l in zip(cmds, lines):
    if c[0] == "wait": assert l.startswith("WAIT") and f"addr={c[1]:#x} value={c[2]} " in l
    elif c[0] == "signal": assert l.startswith("SIGNAL") and f"addr={c[1]:#x} value={c[2]} " in l and "+timestamp" in l
    elif c[0] == "timestamp": assert l.startswith("TIMESTAMP") and f"addr={c[1] + 8:#x}" in l
    elif c[0] == "copy": assert f"dest={c[1]:#x} src={c[2]:#x} nbytes={c[3]}" in l
    else: assert l.startswith("BARRIER")

@settings(max_examples=100, deadline=None)
@given(st.integers(0, (1 << 38) - 1).map(lambda a: a * 4), st.integers(1, (1 << 21) - 1), st.booleans())
def test_gp_entry_roundtrip(addr, n, sync):
  assert hw.decode_gp_entry(hw.gp_entry(addr, n, sync)) == (addr, n, sync)

@settings(max_examples=100, deadline=None)
@given(st.integers(0, 7), st.integers(0, 0xFFF).map(lambda m: m * 4), st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=20),
       st.sampled_from([hw.SEC_OP_INC, hw.SEC_OP_NON_INC, hw.SEC_OP_ONE_INC]))
def test_method_header_roundtrip(subc, method, data, op):
  ms = hw.decode_pushbuffer([hw.mthd(subc, method, len(data), op)] + data)
  want = [method + 4 * i if op == hw.SEC_OP_INC else method if op == hw.SEC_OP_NON_INC else method + (4 if i else 0) for i in range(len(data))]
  assert [(m.subc, m.method, m.value) for m in ms] == [(subc, w, d) for w, d in zip(want, data)]

def test_bad_pushbuffer_is_a_decode_error():
  with pytest.raises(hw.PushbufferError, match="opcode 6"): hw.decode_pushbuffer([6 << 29])
  with pytest.raises(hw.PushbufferError, match="wants 3 data words"): hw.decode_pushbuffer([hw.mthd(0, 0x5c, 3), 1])

# ---------------------------------------------------------------- tools
def _tool(name: str):
  import importlib.util, os
  path = os.path.join(str(REPO), "tools", name + ".py")
  spec = importlib.util.spec_from_file_location(name, path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod

def test_nv_decode_tool(tmp_path, capsys):
  import struct
  w = hw.sem_words(0x2000000010, 5, hw.SEM_EXEC_ACQUIRE_GEQ) + hw.copy_words(0x1000, 0x2000, 64)
  (tmp_path / "pb.bin").write_bytes(struct.pack(f"<{len(w)}I", *w))
  (tmp_path / "pb.txt").write_text(" ".join(f"{x:#010x}" for x in w))
  (tmp_path / "ring.bin").write_bytes(struct.pack("<2Q", hw.gp_entry(0x2000117000, len(w)), 0))
  q = hw.build_qmd(0x2000001100, 0x2000002040, 0x300, (5, 2, 1), (32, 4, 1), 1024, 24, max_shared=227 << 10)
  (tmp_path / "q.bin").write_bytes(struct.pack(f"<{len(q)}I", *q))
  t = _tool("nv_decode")
  for f in ("pb.bin", "pb.txt"):
    t.main(["pb", str(tmp_path / f)])
    out = capsys.readouterr().out
    assert "SEM_EXECUTE" in out and "WAIT      addr=0x2000000010 value=5" in out and "COPY      dest=0x1000 src=0x2000 nbytes=64" in out
  t.main(["gpfifo", str(tmp_path / "ring.bin"), "--get", "0", "--put", "1", "--seg", f"0x2000117000={tmp_path / 'pb.bin'}"])
  out = capsys.readouterr().out
  assert "GP_GET 0, GP_PUT 1 (1 pending)" in out and "pending pushbuffer 0x2000117000 15 words" in out and "WAIT" in out
  t.main(["qmd", str(tmp_path / "q.bin")])
  out = capsys.readouterr().out
  assert "GRID_WIDTH" in out and "grid=(5, 2, 1)" in out and "block=(32, 4, 1)" in out

def test_nv_doctor_on_mock(capsys):
  assert _tool("nv_doctor").main(["--mock", "--replays", "20"]) == 0
  out = capsys.readouterr().out
  for s in ("== open", "MOCK GPU 0: Hopper sm_90", "shader windows: shared 0x729400000000", "== channels", "UVM-registered range",
            "== copy", "== multi-block launch", "all 65536 elements right", "register spills: right", "== signals",
            "20 replays: right", "kernel log: no new lines", "OK in"):
    assert s in out, s

def test_nv_doctor_open_stage_is_told_apart_into_steps(capsys):
  """The open stage reports its steps (RM client, UVM, VA space, memory, channels, scheduling): on the mock each passes
  with its calls; on a GPU whose RM refuses GPFIFO_SCHEDULE, the scheduling step fails at that call with RM's status and
  the steps before it passed."""
  from baregrad.drivers.mock.nv import RMStatus
  assert _tool("nv_doctor").main(["--mock", "--replays", "2"]) == 0
  out = capsys.readouterr().out
  for i, step in enumerate(("RM client", "UVM", "VA space", "memory", "channels", "scheduling")):
    assert re.search(rf"step {i + 1}/6 {step}: ok, \d+ calls", out), (step, out[:3000])
  assert "step 3/6 VA space: ok, 2 calls" in out and "NV_ESC_RM_ALLOC(FERMI_VASPACE_A), UVM_REGISTER_GPU_VASPACE" in out
  assert "step 6/6 scheduling: ok, 1 calls" in out and "NV_ESC_RM_CONTROL(GPFIFO_SCHEDULE)" in out
  class NoSchedule(MockNVGPU):
    def _ctl_schedule(self, hc, o, q): raise RMStatus(nv.NV_ERR_INVALID_STATE, "refused for the test")
    _controls = {**MockNVGPU._controls, nv.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE: (MockNVGPU._controls[nv.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE][:2]
                                                                             + (_ctl_schedule,))}
  assert _tool("nv_doctor").main(["--mock"], mock=NoSchedule()) == 1
  out = capsys.readouterr().out
  assert "step 5/6 channels: ok" in out and "step 6/6 scheduling: FAILED at NV_ESC_RM_CONTROL(GPFIFO_SCHEDULE): RMError:" in out, out
  assert "NV_ERR_INVALID_STATE" in out and "the device did not open" in out

def test_nv_doctor_reports_a_failing_stage_and_goes_on(capsys):
  """A GPU that refuses the multi-block launch: the stage fails naming the Xid, the kernel log's line is decoded, the
  device recovers and the later stages pass; an unreadable kernel log is reported as such."""
  from baregrad.drivers.mock.nv import GPUError
  class Refuses(MockNVGPU):
    def _launch(self, ch, subc, qmd):
      super()._launch(ch, subc, qmd)
      if ch.inflight and ch.inflight[-1].what == "kernel idx":
        raise GPUError(13, f"Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): channel 0x{ch.token:08x}", "refused for the test")
  assert _tool("nv_doctor").main(["--mock"], mock=Refuses()) == 1
  out = capsys.readouterr().out
  assert "FAILED: NVChannelError" in out and "Xid 13 (ROBUST_CHANNEL_GR_EXCEPTION)" in out and "FAILED: multi-block launch" in out
  assert "NVRM: Xid (PCI:0000:01:00): 13" in out and "shared reduction: 96 blocks right" in out
  m = MockNVGPU()
  m.kmsg_readable = False
  _tool("nv_doctor").main(["--mock", "--replays", "2"], mock=m)
  assert "kernel log: unreadable (/dev/kmsg: EPERM" in capsys.readouterr().out

@settings(max_examples=60, deadline=None)
@given(st.tuples(st.integers(1, 2**31 - 1), st.integers(1, 65535), st.integers(1, 65535)),
       st.tuples(st.integers(1, 1024), st.integers(1, 1024), st.integers(1, 64)),
       st.integers(0, 227 << 10).map(lambda s: s // 128 * 128), st.integers(0, 255), _addr.map(lambda a: a & ~255), _addr.map(lambda a: a & ~63))
def test_qmd_roundtrip(grid, block, shared, regs, prog, cb):
  q = hw.read_qmd(hw.build_qmd(prog, cb, 0x220, grid, block, shared, regs, (0x1000, 9), max_shared=227 << 10))
  assert (q["grid"], q["block"], q["shared"], q["regs"], q["program"], q["cbank0"], q["release0"]) == (grid, block, shared, regs, prog, cb, (0x1000, 9, 1))

# ---------------------------------------------------------------- the whole stack on the mock: Tensor -> PTX -> QMD -> interpreter
def test_tensor_ops_on_mock_nv(nvdev):
  from baregrad.tensor import Tensor
  rng = np.random.default_rng(0)
  x, w = rng.standard_normal((5, 7)).astype(np.float32), rng.standard_normal((7, 3)).astype(np.float32)
  a = Tensor(x, device="NV")
  np.testing.assert_allclose((a * 2 + 1).sum(axis=1).numpy(), (x * 2 + 1).sum(axis=1), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose((a @ Tensor(w, device="NV")).numpy(), x @ w, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(a.exp().amax(axis=0).numpy(), np.exp(x).max(axis=0), rtol=1e-5)

# ---------------------------------------------------------------- rings wrap, host threads
def test_rings_wrap():
  class SmallNV(NVDevice): gpfifo_entries, cmd_ring_bytes = 8, 4096
  mock = MockNVGPU()
  dev = SmallNV("NV", port=make_port(mock))
  try:
    s = HCQSignal(dev)
    for v in range(1, 301):  # 300 submits of ~70 bytes: the 8-entry GPFIFO and the 4 KiB command ring wrap many times
      q = (dev.compute_queue_t if v % 3 else dev.copy_queue_t)()
      with dev.submit_lock: q.wait(dev.timeline_signal, dev.timeline_value - 1).signal(s, v).signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
    dev.synchronize(timeout_ms=10000)
    assert s.value == 300
    big = dev.copy_queue_t()
    for _ in range(200): big.memory_barrier()  # 200 x 28 bytes > 4 KiB
    with pytest.raises(ValueError, match="exceeds"): big.submit(dev)
    # a stuck channel fills its GPFIFO: the next submit times out naming the state instead of overwriting entries
    never = HCQSignal(dev)
    dev.default_timeout_ms = 200
    for _ in range(7): dev.copy_queue_t().wait(never, 1).submit(dev)
    with pytest.raises(RuntimeError, match="no room") as e: dev.copy_queue_t().wait(never, 1).submit(dev)
    assert "7 entries pending" in str(e.value)
    never.value = 1
    dev.synchronize(timeout_ms=5000)
    # the command ring fills before the GPFIFO: 724-byte pushbuffers behind a wait not met yet; one that no longer fits
    # waits for room (here: times out) instead of overwriting one the GPU has not read, and the rest then run
    never = HCQSignal(dev)
    def big_wait():
      q = dev.copy_queue_t().wait(never, 1)
      for _ in range(25): q.memory_barrier()
      return q
    assert 4 * len(big_wait().words) == 724
    n = 0
    with pytest.raises(RuntimeError, match="no room in the command ring") as e:
      for _ in range(7): big_wait().submit(dev); n += 1
    assert n in (4, 5) and f"{n} entries pending" in str(e.value)
    never.value = 1
    dev.synchronize(timeout_ms=5000)
    assert not dev.port.mock.violations
    with dev.submit_lock: dev.copy_queue_t().signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
    dev.synchronize(timeout_ms=5000)
  finally: dev.close()

def test_concurrent_host_threads(nvdev):
  import threading
  sigs = [HCQSignal(nvdev) for _ in range(3)]
  def work(s: HCQSignal, q) -> None:
    for v in range(1, 61): q().memory_barrier().signal(s, v).submit(nvdev)
  ts = [threading.Thread(target=work, args=(s, q)) for s, q in zip(sigs, (nvdev.compute_queue_t, nvdev.copy_queue_t, nvdev.compute_queue_t))]
  for t in ts: t.start()
  for t in ts: t.join(timeout=20)
  for s in sigs: s.wait(60, timeout_ms=5000)

def test_failed_open_gives_everything_back():
  class NoCopy(MockNVGPU):
    def __init__(self) -> None:
      super().__init__()
      del self.classes[nv.HOPPER_DMA_COPY_A]  # a GPU without the copy class we need
      self.classlist.remove(nv.HOPPER_DMA_COPY_A)
  mock = NoCopy()
  with pytest.raises(DeviceUnavailable, match="no DMA copy class"): NVDevice("NV", port=make_port(mock))
  assert mock.clients == {} and mock.files == {}
  dev, _ = open_mock()  # the address window it reserved is free again
  dev.close()

def test_mock_semaphore_and_copy_semaphore_ops(nvdev):
  """Raw pushbuffers: 32-bit releases, reductions, circular acquire, and the copy engine's own semaphore release."""
  from array import array
  s, t = HCQSignal(nvdev), HCQSignal(nvdev)
  F = hw
  red = lambda op: (F.F_SEM_OP.encode(6) | F.F_SEM_RED.encode(op) | F.F_SEM_FMT.encode(1))
  w = (F.sem_words(s.va_addr, 0xFFFFFFF0, F.F_SEM_OP.encode(1)) +           # 32-bit release
       F.sem_words(s.va_addr, 0x20, red(5)) +                               # 32-bit IADD wraps: 0x10
       F.sem_words(s.va_addr, 0x10, F.F_SEM_OP.encode(3)) +                 # circular >= 0x10: passes
       F.sem_words(s.va_addr, 7, red(1)) +                                  # IMAX -> 0x10
       [F.mthd(F.SUBC_COPY, F.SET_SEMAPHORE_A, 3), t.va_addr >> 32, t.va_addr & F.M32, 99,
        F.mthd(F.SUBC_COPY, F.LAUNCH_DMA, 1), hw.nv.NVC8B5_LAUNCH_DMA_SEMAPHORE_TYPE.encode(2)])  # no transfer, release + timestamp
  nvdev.channels["copy"].submit(array("I", w))
  nvdev.synchronize()
  assert s.value == 0x10 and t.value == 99 and t.timestamp > 0
