"""The mock NVIDIA GPU as a conformance model: each rule the real kernel driver or hardware enforces (and the H100 run
found, docs/hw/h100-580.159.04-findings.md), exercised the way the driver got it wrong before, with the answer
the real thing gives. The driver's own calls must pass every one of them (the other NV tests open devices on this mock).
Runs on the mock only: these tests build wrong calls on purpose."""
from __future__ import annotations
import ctypes, errno, os, re
import numpy as np
import pytest
from baregrad.drivers.port import IoctlError, TracingPort, MockPort, make_port
from baregrad.drivers.mock.nv import MockNVGPU
from baregrad.drivers.nv import NVDevice, RMError, hw
from baregrad.drivers.nv.queues import CHANNEL_VA_BYTES
from baregrad.ctypes_autogen.nv import nv_580 as nv

@pytest.fixture(autouse=True)
def _default_mock(monkeypatch):
  monkeypatch.delenv("MOCKGPU_ARCH", raising=False)
  monkeypatch.delenv("MOCKGPU_COUNT", raising=False)

def open_mock(**kw) -> tuple[NVDevice, MockNVGPU]:
  mock = MockNVGPU(**kw)
  return NVDevice("NV", port=make_port(mock)), mock

@pytest.fixture
def dev():
  d, m = open_mock()
  yield d
  d.close()

def _sysmem(dev: NVDevice, size: int = 0x10000) -> int:
  p = nv.NV_MEMORY_ALLOCATION_PARAMS(owner=dev.root, type=nv.NVOS32_TYPE_NOTIFIER, attr=nv.NVOS32_ATTR_LOCATION_PCI << 25,
                                     size=size, alignment=0x1000, limit=size - 1, format=6)
  return dev.rm_alloc(dev.nvdevice, nv.NV01_MEMORY_SYSTEM, p)

def _map(dev: NVDevice, handle: int, fd: int, size: int = 0x10000) -> nv.NVOS33_PARAMETERS:
  w = hw.nv_ioctl_nvos33_parameters_with_fd(params=nv.NVOS33_PARAMETERS(hClient=dev.root, hDevice=dev.nvdevice, hMemory=handle, length=size), fd=fd)
  dev._esc(dev.fd_ctl, nv.NV_ESC_RM_MAP_MEMORY, w, "NV_ESC_RM_MAP_MEMORY")
  return w.params

# ---------------------------------------------------------------- finding 1: system memory through /dev/nvidiactl
def test_sysmem_map_through_device_node_is_invalid_argument(dev):
  """RM_MAP_MEMORY of NV01_MEMORY_SYSTEM naming a /dev/nvidia0 fd (what the driver did before): NV_ERR_INVALID_ARGUMENT,
  as on the H100; through a /dev/nvidiactl fd it maps, and mmap of that fd gives memory the GPU sees."""
  mock = dev.port.mock
  h = _sysmem(dev)
  fd_dev = dev.port.open("/dev/nvidia0", os.O_RDWR)
  try: assert _map(dev, h, fd_dev).status == nv.NV_ERR_INVALID_ARGUMENT
  finally: dev.port.close(fd_dev)
  assert "through /dev/nvidiactl" in mock.log[-1]
  fd_ctl = dev.port.open("/dev/nvidiactl", os.O_RDWR)
  try:
    assert _map(dev, h, fd_ctl).status == nv.NV_OK
    assert _map(dev, h, fd_ctl).status == nv.NV_ERR_STATE_IN_USE   # one mapping context per fd
    with pytest.raises(OSError) as e: dev.port.mmap(0, 0x10000, 3, 1, fd_ctl, 0x1000)
    assert e.value.errno == errno.EINVAL                           # mmap offsets are 0 (nvidia_mmap_helper)
    with pytest.raises(OSError) as e: dev.port.mmap(0, 0x20000, 3, 1, fd_ctl, 0)
    assert e.value.errno == errno.ERANGE                           # no more than the allocation
  finally: dev.port.close(fd_ctl)
  dev.rm_free(h)

def test_usermode_aperture_through_its_gpu_node():
  """The doorbell page is a BAR aperture: mapped through the GPU's own /dev/nvidiaN, not the control node."""
  mock = MockNVGPU(count=2)
  dev = NVDevice("NV", port=make_port(mock))
  try:
    for path, ok in (("/dev/nvidiactl", False), ("/dev/nvidia1", False), ("/dev/nvidia0", True)):
      fd = dev.port.open(path, os.O_RDWR)
      try: assert (_map(dev, dev.usermode, fd).status == nv.NV_OK) == ok, path
      finally: dev.port.close(fd)
  finally: dev.close()

def test_driver_maps_sysmem_through_ctl():
  lines: list[str] = []
  dev = NVDevice("NV", port=TracingPort(MockPort(MockNVGPU()), lines.append))
  try:
    text = "\n".join(lines)
    opened = {int(m.group(2)): m.group(1) for m in re.finditer(r"open\('(/dev/[^']+)', \S+\) = (\d+)", text)}
    maps = [int(m.group(1), 0) for m in re.finditer(r"NV_ESC_RM_MAP_MEMORY\) \{params=.*?\}, fd=(0x[0-9a-f]+|\d+)\}", text)]
    assert maps and sorted({opened[fd] for fd in maps}) == ["/dev/nvidia0", "/dev/nvidiactl"]
    assert opened[maps[0]] == "/dev/nvidia0" and all(opened[fd] == "/dev/nvidiactl" for fd in maps[1:])  # usermode first
  finally: dev.close()

# ---------------------------------------------------------------- finding 2: UVM_REGISTER_CHANNEL before scheduling
def _group_with_channel(dev: NVDevice) -> tuple[int, int]:
  g = dev.rm_alloc(dev.nvdevice, nv.KEPLER_CHANNEL_GROUP_A, nv.NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS(engineType=hw.NV2080_ENGINE_TYPE_GRAPHICS))
  cs = dev.rm_alloc(g, hw.FERMI_CONTEXT_SHARE_A, nv.NV_CTXSHARE_ALLOCATION_PARAMETERS(hVASpace=dev.vaspace))
  m = dev._gpu_alloc(0x3000, host=True, what="test ring")
  p = nv.NV_CHANNEL_ALLOC_PARAMS(hObjectError=m.handle, gpFifoOffset=m.va, gpFifoEntries=64, hContextShare=cs)
  p.hUserdMemory[0], p.userdOffset[0] = m.handle, 0x2000
  ch = dev.rm_alloc(g, dev.gpfifo_class, p)
  dev.rm_alloc(ch, dev.compute_class)
  return g, ch

def _register(dev: NVDevice, ch: int, base: int, length: int = CHANNEL_VA_BYTES, name: str = "UVM_REGISTER_CHANNEL") -> None:
  rc = nv.UVM_REGISTER_CHANNEL_PARAMS(rmCtrlFd=dev.fd_ctl, hClient=dev.root, hChannel=ch, base=base, length=length)
  ctypes.memmove(rc.gpuUuid.uuid, dev.uuid, 16)
  dev.uvm(nv.UVM_REGISTER_CHANNEL, rc, name)

def _unregister(dev: NVDevice, ch: int) -> None:
  p = nv.UVM_UNREGISTER_CHANNEL_PARAMS(hClient=dev.root, hChannel=ch)
  ctypes.memmove(p.gpuUuid.uuid, dev.uuid, 16)
  dev.uvm(nv.UVM_UNREGISTER_CHANNEL, p, "UVM_UNREGISTER_CHANNEL")

def test_schedule_unregistered_channel_is_invalid_state(dev):
  """GPFIFO_SCHEDULE of a group whose GR channel UVM never bound (what the driver did before): NV_ERR_INVALID_STATE,
  with RM's kernel-log line; after UVM_REGISTER_CHANNEL it schedules."""
  mock = dev.port.mock
  g, ch = _group_with_channel(dev)
  sched = lambda: dev.rm_control(g, nv.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE, nv.NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS(bEnable=1), "GPFIFO_SCHEDULE")
  with pytest.raises(RMError) as e: sched()
  assert e.value.status == nv.NV_ERR_INVALID_STATE and "UVM_REGISTER_CHANNEL" in str(mock.log[-1])
  assert any("Cannot schedule externally-owned channel" in t for _, t in mock.kmsg)
  va = dev.cpu_va.alloc(CHANNEL_VA_BYTES, 2 << 20)
  _register(dev, ch, va)
  sched()
  _unregister(dev, ch)
  dev.rm_free(g)
  dev.cpu_va.release(va, CHANNEL_VA_BYTES)

def test_uvm_register_channel_checks(dev):
  """uvm_user_channel.c: page-aligned nonzero range, below max_channel_va, a real channel in the registered VA space,
  once per channel, room for its buffers; unregister of an unknown channel is NV_ERR_INVALID_CHANNEL."""
  g, ch = _group_with_channel(dev)
  va = dev.cpu_va.alloc(CHANNEL_VA_BYTES, 2 << 20)
  for base, length, bad in ((va + 1, CHANNEL_VA_BYTES, nv.NV_ERR_INVALID_ADDRESS), (0, CHANNEL_VA_BYTES, nv.NV_ERR_INVALID_ADDRESS),
                            (va, 4 << 20, nv.NV_ERR_INVALID_ADDRESS),                           # no room for 8 MiB of buffers
                            (dev.channels["compute"].uvm_va, 8 << 20, nv.NV_ERR_INVALID_ADDRESS),  # taken by the other group's buffers
                            (1 << 57, CHANNEL_VA_BYTES, nv.NV_ERR_OUT_OF_RANGE)):
    with pytest.raises(RMError) as e: _register(dev, ch, base, length)
    assert e.value.status == bad, (hex(base), hex(length))
  with pytest.raises(RMError, match="NV_ERR_INVALID_OBJECT_HANDLE"): _register(dev, g, va)   # not a channel
  _register(dev, ch, va)
  with pytest.raises(RMError, match="NV_ERR_INVALID_CHANNEL"): _register(dev, ch, va)      # twice
  _unregister(dev, ch)
  with pytest.raises(RMError, match="NV_ERR_INVALID_CHANNEL"): _unregister(dev, ch)
  dev.rm_free(g)
  dev.cpu_va.release(va, CHANNEL_VA_BYTES)

def test_ampere_channel_va_below_2_40():
  """uvm_ampere.c/uvm_ada.c: max_channel_va = 1 << 40. The driver's channel ranges live below it (the H100 run used
  a range at 0x1000_0000_0000, which an Ampere GPU refuses)."""
  dev, mock = open_mock(arch="sm_86")
  try:
    g, ch = _group_with_channel(dev)
    with pytest.raises(RMError) as e: _register(dev, ch, 0x1000_0000_0000)
    assert e.value.status == nv.NV_ERR_OUT_OF_RANGE
    assert all(c.uvm_va + CHANNEL_VA_BYTES <= 1 << 40 for c in dev.channels.values())
    dev.rm_free(g)
  finally: dev.close()

def test_close_unregisters_channels():
  dev, mock = open_mock()
  assert len(mock.uvm_channels) == 2 and all(c.bound for c in mock.channels.values())
  dev.close()
  assert mock.uvm_channels == {} and mock.clients == {}

# ---------------------------------------------------------------- kernels used below (PTX; the mock runs it, ptxas assembles it)
from array import array
from baregrad.drivers.nv.faults import NVChannelError
from baregrad.hcq import HCQSignal

RULES_PTX = r"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry idx(.param .u64 out) {
  .reg .b32 %r<8>; .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [out]; cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x; mov.u32 %r6, %nctaid.x;
  mad.lo.s32 %r4, %r1, %r2, %r3;
  mul.lo.s32 %r5, %r6, 1000; add.s32 %r5, %r5, %r4;
  mul.wide.s32 %rd2, %r4, 4; add.s64 %rd3, %rd1, %rd2; st.global.u32 [%rd3], %r5;
  ret;
}
.visible .entry producer(.param .u64 buf, .param .u32 val) {
  .reg .b32 %r<10>; .reg .b64 %rd<8>; .reg .pred %p<2>;
  ld.param.u64 %rd1, [buf]; cvta.to.global.u64 %rd1, %rd1; ld.param.u32 %r9, [val];
  mov.u32 %r6, 0;
SPIN:
  add.s32 %r6, %r6, 1; setp.lt.s32 %p1, %r6, 50; @%p1 bra SPIN;
  mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x; mad.lo.s32 %r4, %r1, %r2, %r3;
  mul.wide.s32 %rd2, %r4, 4; add.s64 %rd3, %rd1, %rd2; st.global.u32 [%rd3], %r9;
  ret;
}
.visible .entry consumer(.param .u64 dst, .param .u64 buf) {
  .reg .b32 %r<10>; .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [dst]; cvta.to.global.u64 %rd1, %rd1; ld.param.u64 %rd4, [buf]; cvta.to.global.u64 %rd4, %rd4;
  mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x; mad.lo.s32 %r4, %r1, %r2, %r3;
  mul.wide.s32 %rd2, %r4, 4; add.s64 %rd5, %rd4, %rd2; ld.global.u32 %r5, [%rd5]; add.s32 %r5, %r5, 1;
  add.s64 %rd3, %rd1, %rd2; st.global.u32 [%rd3], %r5;
  ret;
}
.visible .entry reader(.param .u64 dst, .param .u64 src, .param .u32 n) {
  .reg .b32 %r<10>; .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [dst]; cvta.to.global.u64 %rd1, %rd1; ld.param.u64 %rd4, [src]; cvta.to.global.u64 %rd4, %rd4;
  ld.param.u32 %r9, [n]; mul.wide.s32 %rd2, %r9, 4; add.s64 %rd5, %rd4, %rd2; ld.global.u32 %r5, [%rd5];
  st.global.u32 [%rd1], %r5;
  ret;
}
"""

def _u32(dev: NVDevice, buf, n: int) -> np.ndarray:
  out = np.zeros(n, np.uint32)
  dev.allocator._copyout(memoryview(out).cast("B"), buf)
  return out

def _submit(dev: NVDevice, q) -> None:
  with dev.submit_lock:
    q.wait(dev.timeline_signal, dev.timeline_value - 1).signal(dev.timeline_signal, dev.next_timeline()).submit(dev)

# ---------------------------------------------------------------- finding 3: shader windows
@pytest.mark.parametrize("arch,refused", [("sm_89", False), ("sm_90", True), ("sm_100", True)])
def test_32bit_shared_window_refused_from_hopper_on(arch, refused):
  """The 32-bit shared window the driver set before (0xFE000000): Ampere/Ada take it; Hopper and Blackwell raise Xid 69
  into the error notifier, with RM's class-error line in the kernel log (the H100's, finding 3). The driver names the
  method, recovers, and the next launch works."""
  dev, mock = open_mock(arch=arch)
  try:
    c = hw.SUBC_COMPUTE
    with dev.submit_lock:
      dev.channels["compute"].submit(array("I", [hw.mthd(c, nv.NVC6C0_SET_SHADER_SHARED_MEMORY_WINDOW_A, 2), 0, 0xFE000000]))
    if not refused:
      dev.synchronize()
      return
    with pytest.raises(NVChannelError) as e: dev.synchronize(timeout_ms=5000)
    line = [t for _, t in mock.kmsg if "Xid" in t][-1]
    cls = dev.compute_class
    assert re.search(rf"NVRM: Xid \(PCI:[0-9a-f:]+\): 69, name=\S+, Class Error: channel 0x0000000[0-9a-f], Class {cls:08x}, "
                     r"Offset 000002a4, Data fe000000, ErrorCode 00000004", line), line
    msg = str(e.value)
    assert e.value.xid == 69 and "Xid 69 (ROBUST_CHANNEL_GR_CLASS_ERROR)" in msg
    assert "refused method 0x2a4 SET_SHADER_SHARED_MEMORY_WINDOW_B with data 0xfe000000" in msg and "recovered" in msg
    _runs_again(dev)
  finally: dev.close()

def _runs_again(dev) -> None:
  """The device works again after a channel error: a kernel runs and writes what it should."""
  prg = dev.runtime(dev, "idx", RULES_PTX.encode())
  out = dev.allocator.alloc(4 * 64)
  prg(out, global_size=(2, 1, 1), local_size=(32, 1, 1))
  dev.synchronize()
  assert (_u32(dev, out, 64) == 2000 + np.arange(64)).all()

def test_driver_windows_per_generation():
  for arch, want in (("sm_80", hw.WINDOWS_32BIT), ("sm_89", hw.WINDOWS_32BIT), ("sm_90", hw.WINDOWS_64BIT), ("sm_120", hw.WINDOWS_64BIT)):
    dev, mock = open_mock(arch=arch)
    try:
      ch = mock.channels[dev.channels["compute"].token]
      got = ((ch.regs[(1, 0x2a0)] << 32) | ch.regs[(1, 0x2a4)], (ch.regs[(1, 0x7b0)] << 32) | ch.regs[(1, 0x7b4)])
      assert dev.windows is want and got == (want.shared, want.local), arch
    finally: dev.close()

# ---------------------------------------------------------------- finding 4: instruction prefetch past the image
def test_instruction_prefetch_past_image_is_xid31(dev):
  """A program image that ends at its code (what the driver did before): the GCC's prefetch runs past the allocation:
  Xid 31 MMU fault (GPCCLIENT_GCC, FAULT_PTE ACCESS_TYPE_VIRT_READ) at the page after it, decoded by the driver as
  just past the end of that image. Images with the driver's guard run."""
  mock = dev.port.mock
  prg = dev.runtime(dev, "idx", RULES_PTX.encode())
  out = dev.allocator.alloc(4 * 32)
  prg(out, global_size=(1, 1, 1), local_size=(32, 1, 1))
  dev.synchronize()
  image, code_off = hw.pack_image(prg.ptx, "idx", b"\0" * 0x100)
  tight = dev._gpu_alloc(len(image), host=True, what="unguarded image")
  ctypes.memmove(tight.cpu, image, len(image))
  prg.code_va = tight.va + code_off
  prg(out, global_size=(1, 1, 1), local_size=(32, 1, 1))
  with pytest.raises(NVChannelError) as e: dev.synchronize(timeout_ms=5000)
  line = [t for _, t in mock.kmsg if "Xid" in t][-1]
  end = tight.va + tight.size
  assert "31, name=" in line and f"GPCCLIENT_GCC faulted @ 0x{end >> 32:x}_{end & 0xFFFFFFFF:08x}" in line and "FAULT_PTE ACCESS_TYPE_VIRT_READ" in line
  assert "0x0 bytes past the end of unguarded image" in str(e.value)

def test_data_fetch_past_allocation_is_xid31(dev):
  """A kernel load one element past the end of a buffer: Xid 31, the address decoded against the device's allocations."""
  mock = dev.port.mock
  prg = dev.runtime(dev, "reader", RULES_PTX.encode())
  src, dst = dev.allocator.alloc(4096), dev.allocator.alloc(64)
  prg(dst, src, global_size=(1, 1, 1), vals=(1023,))
  dev.synchronize()
  prg(dst, src, global_size=(1, 1, 1), vals=(1024 + 4096,))   # 4 KiB past the end: no allocation there
  with pytest.raises(NVChannelError, match="Xid 31") as e: dev.synchronize(timeout_ms=5000)
  assert "GPCCLIENT_T1_0" in [t for _, t in mock.kmsg if "Xid" in t][-1] and "bytes past the end of buffer" in str(e.value)

# ---------------------------------------------------------------- finding 5: constant bank 0
@pytest.mark.parametrize("arch", ["sm_89", "sm_90", "sm_100"])
def test_ntid_nctaid_come_from_constant_bank(arch):
  """%ntid/%nctaid are what the driver wrote into constant bank 0 at the generation's offsets, not the QMD's geometry:
  with the header zeroed (what the driver did before) a multi-block kernel writes only the first block's slots, as
  on the H100 (finding 5)."""
  dev, mock = open_mock(arch=arch)
  try:
    prg = dev.runtime(dev, "idx", RULES_PTX.encode())
    out = dev.allocator.alloc(4 * 256)
    dev.allocator._copyin(out, memoryview(np.full(256, 7, np.uint32)).cast("B"))
    prg(out, global_size=(4, 1, 1), local_size=(64, 1, 1))
    dev.synchronize()
    assert (_u32(dev, out, 256) == 4000 + np.arange(256)).all()
    dev.allocator._copyin(out, memoryview(np.full(256, 7, np.uint32)).cast("B"))
    args = prg.fill_kernargs([out])
    q = dev.compute_queue_t().exec(prg, args, (4, 1, 1), (64, 1, 1))
    ctypes.memset(args.cb_cpu, 0, prg.param_off)   # the launch header as the old driver left it
    _submit(dev, q)
    dev.synchronize()
    got = _u32(dev, out, 256)
    assert (got[:64] == np.arange(64)).all() and (got[64:] == 7).all()   # every block wrote to block 0's slots
  finally: dev.close()

# ---------------------------------------------------------------- finding 6a/6b: launches in flight
def _prod_cons(dev: NVDevice, barrier: bool, n: int = 128):
  P, C = dev.runtime(dev, "producer", RULES_PTX.encode()), dev.runtime(dev, "consumer", RULES_PTX.encode())
  buf, dst = dev.allocator.alloc(4 * n), dev.allocator.alloc(4 * n)
  dev.allocator._copyin(buf, memoryview(np.zeros(n, np.uint32)).cast("B"))
  q = dev.compute_queue_t().exec(P, P.fill_kernargs([buf], [41]), (n // 32, 1, 1), (32, 1, 1))
  if barrier: q.memory_barrier()
  q.exec(C, C.fill_kernargs([dst, buf]), (n // 32, 1, 1), (32, 1, 1))
  _submit(dev, q)
  dev.synchronize()
  return _u32(dev, dst, n)

def test_launches_without_barrier_run_concurrently(dev):
  """Producer then consumer in one submission with nothing between them: the consumer reads stale values (the H100:
  84480 of 84480, finding 6b) and the mock names the read-after-write hazard; with memory_barrier() it reads 42."""
  mock = dev.port.mock
  assert (_prod_cons(dev, barrier=False) == 1).all()
  assert any("read-after-write hazard: kernel consumer and kernel producer" in h for h in mock.hazards)
  n = len(mock.hazards)
  assert (_prod_cons(dev, barrier=True) == 42).all() and len(mock.hazards) == n

def test_qmd_relaunched_in_flight_is_xid109(dev):
  """One QMD launched twice with no wait-for-idle between (what test_graph_replay's queue did): Xid 109, CTX SWITCH
  TIMEOUT, the channel dead until the driver recovers (finding 6a). The driver's own queue puts a WFI between."""
  mock = dev.port.mock
  prg = dev.runtime(dev, "idx", RULES_PTX.encode())
  out = dev.allocator.alloc(4 * 32)
  args = prg.fill_kernargs([out])
  q = dev.compute_queue_t().exec(prg, args, (1, 1, 1), (32, 1, 1)).exec(prg, args, (1, 1, 1), (32, 1, 1))
  assert "BARRIER" not in q.decode() and "WFI" in hw.format_methods(list(q.words))   # the driver's WFI
  _submit(dev, q)
  dev.synchronize()
  launch = hw.exec_words(args.qmd_va)
  with dev.submit_lock: dev.channels["compute"].submit(array("I", launch + launch))
  with pytest.raises(NVChannelError) as e: dev.synchronize(timeout_ms=5000)
  assert e.value.xid == 109 and "CTX SWITCH TIMEOUT" in str(e.value)
  assert "errorString CTX SWITCH TIMEOUT" in [t for _, t in mock.kmsg if "Xid" in t][-1]

def test_patch_under_queued_launch_is_reported(dev):
  """Rewriting a launch's constant bank after its submission and before it ran (what HCQGraph.replay did): the mock
  reports it, and the launch runs with what it finds, as the GPU would."""
  mock = dev.port.mock
  prg = dev.runtime(dev, "idx", RULES_PTX.encode())
  a, b = dev.allocator.alloc(4 * 32), dev.allocator.alloc(4 * 32)
  dev.synchronize()
  args = prg.fill_kernargs([a], kernargs=dev.alloc_args_memory(4096))
  _submit(dev, dev.compute_queue_t().exec(prg, args, (1, 1, 1), (32, 1, 1)))
  args.update_buffer(0, b.va_addr)   # the launch above is queued, not run
  dev.synchronize()
  assert any("patched under a queued launch" in v for v in mock.violations)
  assert (_u32(dev, b, 32) == 1000 + np.arange(32)).all()

# ---------------------------------------------------------------- local and shared memory the launch must provide
from baregrad.drivers.nv_compile import find_ptxas
needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas not found: the frame and shared sizes come from the cubin")
LOCAL_PTX = r"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry frame(.param .u64 out, .param .u32 k) {
  .local .align 4 .b8 arr[512];
  .reg .b32 %r<12>; .reg .b64 %rd<8>; .reg .pred %p<2>;
  ld.param.u64 %rd1, [out]; cvta.to.global.u64 %rd1, %rd1; ld.param.u32 %r9, [k];
  mov.u32 %r3, %tid.x; mov.u64 %rd2, arr; mov.u32 %r5, 0;
FILL:
  mul.wide.u32 %rd3, %r5, 4; add.s64 %rd4, %rd2, %rd3; add.u32 %r6, %r5, %r3; st.local.u32 [%rd4], %r6;
  add.u32 %r5, %r5, 1; setp.lt.u32 %p1, %r5, 128; @%p1 bra FILL;
  and.b32 %r7, %r9, 127; mul.wide.u32 %rd5, %r7, 4; add.s64 %rd6, %rd2, %rd5; ld.local.u32 %r8, [%rd6];
  mul.wide.u32 %rd7, %r3, 4; add.s64 %rd7, %rd1, %rd7; st.global.u32 [%rd7], %r8;
  ret;
}
.visible .entry smem(.param .u64 out) {
  .shared .align 4 .b32 sm[256];
  .reg .b32 %r<8>; .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [out]; cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r3, %tid.x; mov.u32 %r1, sm; shl.b32 %r2, %r3, 2; add.u32 %r4, %r1, %r2; st.shared.u32 [%r4], %r3;
  bar.sync 0;
  ld.shared.u32 %r5, [%r4]; mul.wide.u32 %rd2, %r3, 4; add.s64 %rd3, %rd1, %rd2; st.global.u32 [%rd3], %r5;
  ret;
}
"""

@needs_ptxas
def test_local_memory_must_be_set_up(dev):
  """A kernel with a stack frame runs when the channel's shader local memory covers every thread of every TPC and the
  stack pointer (constant bank 0) sits at the top of the thread's local window; without them: Xid 13/31."""
  prg = dev.runtime(dev, "frame", LOCAL_PTX.encode())
  assert prg.local_bytes >= 512 and dev.local_mem is not None
  out = dev.allocator.alloc(4 * 32)
  prg(out, global_size=(1, 1, 1), local_size=(32, 1, 1), vals=(3,))
  dev.synchronize()
  assert (_u32(dev, out, 32) == 3 + np.arange(32)).all()
  args = prg.fill_kernargs([out], [3])
  q = dev.compute_queue_t().exec(prg, args, (1, 1, 1), (32, 1, 1))
  ctypes.memset(args.cb_cpu + dev.cb_layout.stack, 0, 4)          # no stack pointer (the old driver's zeroed header)
  _submit(dev, q)
  with pytest.raises(NVChannelError, match="Xid 13"): dev.synchronize(timeout_ms=5000)
  assert "stack pointer" in dev.port.mock.log[-1]
  c = hw.SUBC_COMPUTE
  with dev.submit_lock:  # local memory too small for the frame: 0x200 bytes per TPC
    dev.channels["compute"].submit(array("I", [hw.mthd(c, nv.NVC6C0_SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A, 3), 0, 0x200, 0xFF]))
  prg(out, global_size=(1, 1, 1), local_size=(32, 1, 1), vals=(3,))
  with pytest.raises(NVChannelError, match="Xid 13"): dev.synchronize(timeout_ms=5000)
  prg(out, global_size=(1, 1, 1), local_size=(32, 1, 1), vals=(4,))   # recovered: local memory set up again
  dev.synchronize()
  assert (_u32(dev, out, 32) == 4 + np.arange(32)).all()

@needs_ptxas
def test_shared_memory_size_includes_reserved(dev):
  """sm_90+ SASS addresses a CTA's shared data from 0x400 (LEA R0, SR_CgaCtaId, 0x400, 0x18), and ptxas counts that
  1 KiB in the cubin's shared size, which the launch allocates; a QMD with only the declared 1 KiB faults."""
  prg = dev.runtime(dev, "smem", LOCAL_PTX.encode())
  assert prg.shared_total == 1024 + 0x400
  out = dev.allocator.alloc(4 * 64)
  prg(out, global_size=(1, 1, 1), local_size=(64, 1, 1))
  dev.synchronize()
  assert (_u32(dev, out, 64) == np.arange(64)).all()
  prg.shared_total = 1024   # the declared size alone
  prg(out, global_size=(1, 1, 1), local_size=(64, 1, 1))
  with pytest.raises(NVChannelError, match="Xid 13") as e: dev.synchronize(timeout_ms=5000)
  assert "Out Of Range Address" in str(e.value)

@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_90", "sm_100"])
def test_sm_config_names_a_carveout_of_the_sm(arch):
  """The SM_CONFIG fields name the SM's shared-memory carveout (KiB / 4 + 1): the smallest one that holds the launch's
  shared memory, which SHARED_MEMORY_SIZE asks for in 128-byte units; on the H100 the old rounding to 4 KiB (a 4, 24 or
  48 KiB carveout) and a size of 0x6c0 failed with Xid 13 SKEDCHECK14_SHARED_MEMORY_SIZE (docs/hw/h100-580.159.04-2026-11-28.md)."""
  mx = hw.ARCHS[arch].max_shared
  ks = hw.sm_carveouts(mx)
  assert ks[-1] == (mx >> 10) + 1 and {8, 16, 32, 64, 100} <= set(ks)
  for shared in (1, 1024, 1536, 6208, 8192, 8193, 9216, 21504, 49152, 99 << 10, mx):
    q = hw.read_qmd(hw.build_qmd(0x1000, 0x2000, 0x300, (1, 1, 1), (32, 1, 1), shared, 32, version=hw.QMD_VERSION[hw.ARCHS[arch].compute], max_shared=mx),
                    hw.QMD_VERSION[hw.ARCHS[arch].compute])
    mn, top, tg = q["smcfg"]
    assert q["shared"] % 128 == 0 and shared <= q["shared"] < shared + 128
    assert mn == tg and (tg - 1) * 4 in ks and ((tg - 1) * 4) << 10 >= q["shared"] and top == ks[-1] // 4 + 1
    assert ks.index((tg - 1) * 4) == 0 or ks[ks.index((tg - 1) * 4) - 1] << 10 < q["shared"]   # the smallest that holds it
  with pytest.raises(ValueError, match="no carveout"): hw.build_qmd(0x1000, 0x2000, 0x300, (1, 1, 1), (32, 1, 1), mx + 2048, 32, max_shared=mx)

def test_sm_config_off_the_carveouts_is_skedcheck14(dev, monkeypatch):
  """What the driver wrote before (MIN/TARGET = shared memory rounded up to 4 KiB, MAX = max_shared rounded down):
  the mock refuses it as the H100 did, Xid 13 with SKEDCHECK14_SHARED_MEMORY_SIZE in the kernel log; the device
  recovers and the driver's own QMD runs."""
  prg = dev.runtime(dev, "smem", LOCAL_PTX.encode())
  assert prg.shared_total == 2048
  out = dev.allocator.alloc(4 * 64)
  build = hw.build_qmd
  def old(*a, **kw):
    w = build(*a, **kw)
    need, top = (-(-a[5] // 4096)) + 1, (kw["max_shared"] >> 12) + 1
    for f, v in zip(hw.QMD_LAYOUTS[kw["version"]].smcfg, (need, top, need)): hw.set_bits(w, *f, v)
    return w
  monkeypatch.setattr(hw, "build_qmd", old)
  prg.launch_templates.clear()   # (QMDs are made once per geometry: make them again with the patched build_qmd)
  prg(out, global_size=(1, 1, 1), local_size=(64, 1, 1))
  with pytest.raises(NVChannelError, match="Xid 13") as e: dev.synchronize(timeout_ms=5000)
  assert "SKEDCHECK14_SHARED_MEMORY_SIZE failed" in str(e.value) and "not carveouts" in dev.port.mock.log[-1]
  assert "last launched with kernel smem" in str(e.value)   # the ESR's QMD address, back to the kernel
  def unaligned(*a, **kw):   # the 16-byte rounding the driver used for SHARED_MEMORY_SIZE: 0x6c0 failed on the H100
    w = build(*a, **kw)
    hw.set_bits(w, *hw.QMD_LAYOUTS[kw["version"]].shared, a[5] + 0x40)
    return w
  monkeypatch.setattr(hw, "build_qmd", unaligned)
  prg.launch_templates.clear()
  prg(out, global_size=(1, 1, 1), local_size=(64, 1, 1))
  with pytest.raises(NVChannelError, match="Xid 13") as e: dev.synchronize(timeout_ms=5000)
  assert "SKEDCHECK14_SHARED_MEMORY_SIZE failed" in str(e.value) and "multiple of 128" in dev.port.mock.log[-1]
  monkeypatch.setattr(hw, "build_qmd", build)
  prg.launch_templates.clear()
  prg(out, global_size=(1, 1, 1), local_size=(64, 1, 1))
  dev.synchronize()
  assert (_u32(dev, out, 64) == np.arange(64)).all()

# ---------------------------------------------------------------- faults: recovery, the kernel log
def test_recovery_keeps_buffers_and_timeline(dev):
  """After a channel error the device has new channels, its buffers hold what they held, the timeline is usable."""
  x = np.arange(1000, dtype=np.uint32)
  buf = dev.allocator.alloc(4000)
  dev.allocator._copyin(buf, memoryview(x).cast("B"))
  old = {n: c.handle for n, c in dev.channels.items()}
  dev.copy_queue_t().copy(0x7770000000, 0x7780000000, 64).signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
  with pytest.raises(NVChannelError, match="Xid 31") as e: dev.synchronize(timeout_ms=5000)
  assert "HUBCLIENT_CE0" in str(e.value) and "in no allocation of this device" in str(e.value)
  assert all(dev.channels[n].handle != h for n, h in old.items())
  assert (_u32(dev, buf, 1000) == x).all()
  dev.synchronize()

def test_kernel_log_lines_go_to_the_channel_they_precede():
  """Kernel-log lines of two processes' Xid 13s as the H100 printed them (docs/hw/h100-580.159.04-2026-11-28.md): only
  the last line of each error names the channel, and the pid= of the lines before it can be another process's."""
  from baregrad.drivers.nv.faults import attribute, decode
  x = "NVRM: Xid (PCI:0000:00:06): 13, "
  lines = [x + "pid=645, name=python3, Graphics Exception: SKEDCHECK14_SHARED_MEMORY_SIZE failed",
           x + "pid=645, name=python3, Graphics Exception: ESR 0x407020=0x200000 0x407028=0x3f 0x40702c=0x20000106 0x407030=0x0",
           x + "pid=754, name=python3, Graphics Exception: channel 0x00000022, Class 0000cbc0, Offset 00000000, Data 00000000",
           "NVRM: GPU at PCI:0000:00:06: GPU-38860c91-4408-a1ba-e8c9-e3b79c39ecdd",
           x + "Graphics Exception: SKEDCHECK14_SHARED_MEMORY_SIZE failed",
           x + "Graphics Exception: ESR 0x407020=0x200000 0x407028=0x3f 0x40702c=0x2000015a 0x407030=0x0",
           x + "pid=708, name=python3, Graphics Exception: channel 0x00000024, Class 0000cbc0, Offset 00000000, Data 00000000"]
  mine, other = attribute(lines, {0x24})
  assert [r.line for r in mine] == lines[4:] and other == [lines[3]] and mine[-1].channel == 0x24
  assert "QMD 0x2000015a00, last launched with kernel r_4_4" in decode(mine[1], (), {0x2000015a00: "r_4_4"})
  assert [r.line for r in attribute(lines, {0x22})[0]] == lines[:3]
  assert attribute(lines, {0x10})[0] == [] and [r.line for r in attribute(lines[4:6], {0x10})[0]] == lines[4:6]  # no channel yet: kept

def test_unreadable_kernel_log_is_reported():
  mock = MockNVGPU()
  mock.kmsg_readable = False   # as under kernel.dmesg_restrict=1 without CAP_SYSLOG
  dev = NVDevice("NV", port=make_port(mock))
  try:
    c = hw.SUBC_COMPUTE
    with dev.submit_lock:
      dev.channels["compute"].submit(array("I", [hw.mthd(c, nv.NVC6C0_SET_SHADER_SHARED_MEMORY_WINDOW_A, 2), 0, 0xFE000000]))
    with pytest.raises(NVChannelError) as e: dev.synchronize(timeout_ms=5000)
    assert "kernel log: unreadable: /dev/kmsg: EPERM" in str(e.value) and "dmesg_restrict" in str(e.value)
  finally: dev.close()

def test_fault_during_wait_never_hangs(dev):
  """A channel error while the host waits on a signal that the lost work would have released: the wait ends at once
  with the error, not at its timeout."""
  import time
  s = HCQSignal(dev)
  dev.compute_queue_t().copy(0x7770000000, 0x7780000000, 64).signal(s, 1).submit(dev)
  t0 = time.perf_counter()
  with pytest.raises(NVChannelError): s.wait(1, timeout_ms=20000)
  assert time.perf_counter() - t0 < 3

# ---------------------------------------------------------------- what else RM and UVM check on the calls the driver makes
def test_uvm_fd_rules(dev):
  """uvm.c: UVM_INITIALIZE again with the same flags is fine, with others NV_ERR_INVALID_ARGUMENT; UVM_MM_INITIALIZE
  once per VA space; any other ioctl on an uninitialized fd is NV_ERR_ILLEGAL_ACTION."""
  dev.uvm(nv.UVM_INITIALIZE, nv.UVM_INITIALIZE_PARAMS(), "UVM_INITIALIZE")   # same flags as at open
  with pytest.raises(RMError, match="NV_ERR_INVALID_ARGUMENT"): dev.uvm(nv.UVM_INITIALIZE, nv.UVM_INITIALIZE_PARAMS(flags=1), "UVM_INITIALIZE")
  fd = dev.port.open("/dev/nvidia-uvm", os.O_RDWR)
  try:
    with pytest.raises(RMError, match="NV_ERR_INVALID_STATE"):   # the open VA space has its MM fd already
      dev.uvm(nv.UVM_MM_INITIALIZE, nv.UVM_MM_INITIALIZE_PARAMS(uvmFd=dev.fd_uvm), "UVM_MM_INITIALIZE", fd=fd)
    with pytest.raises(RMError, match="NV_ERR_ILLEGAL_ACTION"):
      dev.uvm(nv.UVM_CREATE_EXTERNAL_RANGE, nv.UVM_CREATE_EXTERNAL_RANGE_PARAMS(base=1 << 30, length=4096), "UVM_CREATE_EXTERNAL_RANGE", fd=fd)
  finally: dev.port.close(fd)

def test_register_fd_rules(dev):
  """escape.c NV_ESC_REGISTER_FD: a control fd, once per fd, not itself (EINVAL from the ioctl)."""
  reg = lambda fd, ctl: dev._esc(fd, nv.NV_ESC_REGISTER_FD, nv.nv_ioctl_register_fd_t(ctl_fd=ctl), "NV_ESC_REGISTER_FD")
  with pytest.raises(IoctlError) as e: reg(dev.fd_dev, dev.fd_ctl)   # registered at open already
  assert e.value.err == errno.EINVAL
  fd = dev.port.open("/dev/nvidia0", os.O_RDWR)
  try:
    with pytest.raises(IoctlError): reg(fd, fd)                       # not a control fd
    with pytest.raises(IoctlError): reg(dev.fd_ctl, dev.fd_ctl)       # itself
    reg(fd, dev.fd_ctl)
  finally: dev.port.close(fd)

def test_uvm_gpu_and_vaspace_rules(dev):
  """uvm_va_space.c: a GPU registers once, gets one GPU VA space (NV_ERR_INVALID_DEVICE); nv_gpu_ops.c: that VA space
  must be externally owned (NV_ERR_INVALID_FLAGS)."""
  reg = nv.UVM_REGISTER_GPU_PARAMS(rmCtrlFd=-1)
  ctypes.memmove(reg.gpu_uuid.uuid, dev.uuid, 16)
  with pytest.raises(RMError, match="NV_ERR_INVALID_DEVICE"): dev.uvm(nv.UVM_REGISTER_GPU, reg, "UVM_REGISTER_GPU")
  def reg_vas(flags: int) -> None:
    vas = dev.rm_alloc(dev.nvdevice, nv.FERMI_VASPACE_A, nv.NV_VASPACE_ALLOCATION_PARAMETERS(flags=flags))
    rv = nv.UVM_REGISTER_GPU_VASPACE_PARAMS(rmCtrlFd=dev.fd_ctl, hClient=dev.root, hVaSpace=vas)
    ctypes.memmove(rv.gpuUuid.uuid, dev.uuid, 16)
    try: dev.uvm(nv.UVM_REGISTER_GPU_VASPACE, rv, "UVM_REGISTER_GPU_VASPACE")
    finally: dev.rm_free(vas)
  with pytest.raises(RMError, match="NV_ERR_INVALID_FLAGS"): reg_vas(0)
  with pytest.raises(RMError, match="NV_ERR_INVALID_DEVICE"): reg_vas(nv.NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED)

def test_external_range_and_mapping_rules(dev):
  """uvm_map_external.c: ranges 4K aligned, nonzero, not at 0, not overlapping; mappings inside one range, with 1..256
  attribute entries and valid mapping/caching types (NV_ERR_INVALID_ADDRESS / NV_ERR_INVALID_ARGUMENT)."""
  rng = lambda b, l: dev.uvm(nv.UVM_CREATE_EXTERNAL_RANGE, nv.UVM_CREATE_EXTERNAL_RANGE_PARAMS(base=b, length=l), "UVM_CREATE_EXTERNAL_RANGE")
  for b, l in ((0, 4096), (0x1000, 0), (0x1001000, 100)):
    with pytest.raises(RMError, match="NV_ERR_INVALID_ADDRESS"): rng(b, l)
  m = dev._gpu_alloc(1 << 16, what="mapping test")
  def mp(**kw):
    p = nv.UVM_MAP_EXTERNAL_ALLOCATION_PARAMS(base=m.va, length=m.size, rmCtrlFd=dev.fd_ctl, hClient=dev.root, hMemory=m.handle, gpuAttributesCount=1)
    ctypes.memmove(p.perGpuAttributes[0].gpuUuid.uuid, dev.uuid, 16)
    for k, v in kw.items():
      if k in ("gpuMappingType", "gpuCachingType"): setattr(p.perGpuAttributes[0], k, v)
      else: setattr(p, k, v)
    return dev.uvm(nv.UVM_MAP_EXTERNAL_ALLOCATION, p, "UVM_MAP_EXTERNAL_ALLOCATION")
  mp()
  for kw, err in (({"gpuAttributesCount": 0}, "NV_ERR_INVALID_ARGUMENT"), ({"gpuMappingType": 7}, "NV_ERR_INVALID_ARGUMENT"),
                  ({"gpuCachingType": 5}, "NV_ERR_INVALID_ARGUMENT"), ({"length": m.size + 4096}, "NV_ERR_INVALID_ADDRESS"),
                  ({"base": m.va + 1}, "NV_ERR_INVALID_ADDRESS")):
    with pytest.raises(RMError, match=err): mp(**kw)
  dev._gpu_free(m)

def test_generation_without_known_layouts_refused_by_name(monkeypatch):
  """A GPU whose shader windows or constant bank 0 layout the driver does not know is refused by name."""
  from baregrad.hal import DeviceUnavailable
  with monkeypatch.context() as m:
    m.delitem(hw.CBANK0, "sm_90")
    with pytest.raises(DeviceUnavailable, match="no known constant bank 0 layout for sm_90"): open_mock()
  with monkeypatch.context() as m:
    m.delitem(hw.SHADER_WINDOWS, nv.HOPPER_COMPUTE_A)
    with pytest.raises(DeviceUnavailable, match="no known shader memory windows for HOPPER_COMPUTE_A"): open_mock()

# ---------------------------------------------------------------- illegal methods
def test_unknown_compute_method_is_an_illegal_method_xid():
  """A compute-class offset the header defines no method at (0x3ffc) is refused as an illegal method: Xid 13 into the
  error notifier of the channel, a "Graphics Exception" line naming class, offset and data in the kernel log, and the
  driver's error names the offset; the device recovers and the next launch works."""
  assert 0x3ffc not in hw.COMPUTE_LEGAL_METHODS and nv.NVC6C0_SEND_PCAS_A in hw.COMPUTE_LEGAL_METHODS
  assert nv.NVC6C0_SET_MME_SHADOW_SCRATCH(3) in hw.COMPUTE_LEGAL_METHODS   # indexed methods count as defined
  dev, mock = open_mock()
  try:
    with dev.submit_lock:
      dev.channels["compute"].submit(array("I", [hw.mthd(hw.SUBC_COMPUTE, 0x3ffc, 1), 0x1234]))
    with pytest.raises(NVChannelError) as e: dev.synchronize(timeout_ms=5000)
    line = [t for _, t in mock.kmsg if "Xid" in t][-1]
    assert re.search(rf"NVRM: Xid \(PCI:[0-9a-f:]+\): 13, name=\S+, Graphics Exception: channel 0x[0-9a-f]{{8}}, "
                     rf"Class {dev.compute_class:08x}, Offset 00003ffc, Data 00001234", line), line
    msg = str(e.value)
    assert e.value.xid == 13 and "ROBUST_CHANNEL_GR_EXCEPTION" in msg and "refused method 0x3ffc" in msg and "0x1234" in msg, msg
    _runs_again(dev)
  finally: dev.close()

def test_graphics_exception_line_without_method_names_only_the_channel():
  """The H100's SKED-check line (Offset 0, no ErrorCode) stays a channel-only report: no method is named."""
  from baregrad.drivers.nv import faults
  r = faults.parse_xid("NVRM: Xid (PCI:0000:00:06): 13, pid=1033, name=python3, Graphics Exception: channel 0x00000020, "
                       "Class 0000cbc0, Offset 00000000, Data 00000000")
  assert r is not None and r.channel == 0x20 and "offset" not in r.fields
