"""The mock NVIDIA GPU as a conformance model: each rule the real kernel driver or hardware enforces (and the H100 run
found, ../shared/hw/h100-580.159.04/FINDINGS.md), exercised the way the driver got it wrong before, with the answer
the real thing gives. The driver's own calls must pass every one of them (the other NV tests open devices on this mock).
Runs on the mock only: these tests build wrong calls on purpose."""
from __future__ import annotations
import ctypes, errno, os, re
import numpy as np
import pytest
from baregrad.drivers.port import IoctlError, TracingPort, MockPort, make_port
from baregrad.drivers.mock.nvgpu import MockNVGPU
from baregrad.drivers.nv import NVDevice, RMError, hw
from baregrad.drivers.nv.device import CHANNEL_VA_BYTES
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
