"""The KGSL driver layer (drivers/qcom/kgsl.py) on the mock /dev/kgsl-3d0: IB submission through to the CP model."""
import ctypes
import errno
import struct

import pytest

from baregrad.ctypes_autogen import kgsl as k
from baregrad.drivers.mock.adreno.kgsl import MockKGSL
from baregrad.drivers.port import IoctlError, MockPort
from baregrad.drivers.qcom.chips import UnknownChip
from baregrad.drivers.qcom.kgsl import KGSL, GPUFault
from baregrad.drivers.qcom.pm4 import CommandStream


@pytest.fixture
def dev():
  d = KGSL(MockPort(MockKGSL()))
  yield d
  d.close()


def _put_ib(obj, words):
  ctypes.memmove(obj.cpu, struct.pack(f"<{len(words)}I", *words), 4 * len(words))
  return (obj.gpuaddr, len(words))


def test_device_info_and_chip(dev):
  assert dev.chip.name == "a630" and dev.chip_id == 0x06030001


def test_unknown_chip_refused_by_name():
  with pytest.raises(UnknownChip, match="a540"): KGSL(MockPort(MockKGSL(chip_id=0x05040001)))


def test_submit_runs_stream_and_timestamps_retire(dev):
  ctx = dev.create_context()
  data, ib = dev.alloc(4096), dev.alloc(4096)
  ts = dev.submit(ctx, [_put_ib(ib, CommandStream().mem_write(data.gpuaddr, 5, 6).timestamp(data.gpuaddr + 16).words)])
  dev.wait(ctx, ts, timeout_ms=100)
  a, b = struct.unpack_from("<II", bytes(data.view()[:8]))
  t = struct.unpack_from("<Q", bytes(data.view()[16:24]))[0]
  assert (a, b, ts) == (5, 6, 1) and t > 0
  assert dev.submit(ctx, [_put_ib(ib, CommandStream().nop().words)]) == 2


def test_wait_times_out_then_completes_after_signal(dev):
  ctx = dev.create_context()
  sig, ib = dev.alloc(4096), dev.alloc(4096)
  ts = dev.submit(ctx, [_put_ib(ib, CommandStream().wait_reg_mem(sig.gpuaddr, 1).mem_write(sig.gpuaddr + 4, 9).words)])
  with pytest.raises(TimeoutError, match=f"context {ctx}: timestamp {ts}"): dev.wait(ctx, ts, timeout_ms=10)
  ctypes.memmove(sig.cpu, struct.pack("<I", 1), 4)  # the host signals
  dev.wait(ctx, ts, timeout_ms=10)
  assert struct.unpack("<I", bytes(sig.view()[4:8]))[0] == 9


def test_fault_names_context_and_recovers_on_new_context(dev):
  ctx = dev.create_context()
  ib = dev.alloc(4096)
  ts = dev.submit(ctx, [_put_ib(ib, CommandStream().mem_write(0xDEAD0000, 1).words)])
  with pytest.raises(GPUFault, match=f"context {ctx} .*timestamp {ts}"): dev.wait(ctx, ts)
  with pytest.raises(GPUFault, match="faulted"): dev.submit(ctx, [_put_ib(ib, CommandStream().nop().words)])
  ctx2 = dev.create_context()
  dev.wait(ctx2, dev.submit(ctx2, [_put_ib(ib, CommandStream().nop().words)]))


def test_free_unmaps_from_gpu(dev):
  ctx = dev.create_context()
  data, ib = dev.alloc(4096), dev.alloc(4096)
  addr = data.gpuaddr
  dev.free(data)
  ts = dev.submit(ctx, [_put_ib(ib, CommandStream().mem_write(addr, 1).words)])
  with pytest.raises(GPUFault): dev.wait(ctx, ts)


def test_kgsl_checks_refuse_bad_arguments(dev):
  with pytest.raises(IoctlError) as e: dev.alloc(0)
  assert e.value.errno == errno.EINVAL
  with pytest.raises(IoctlError) as e: dev.submit(99, [(0x1000, 4)])
  assert e.value.errno == errno.EINVAL
  with pytest.raises(IoctlError) as e: dev.submit(dev.create_context(), [])
  assert e.value.errno == errno.EINVAL
  with pytest.raises(IoctlError) as e: dev.wait(99, 1)
  assert e.value.errno == errno.EINVAL
  with pytest.raises(IoctlError) as e: dev.port.ioctl(dev.fd, k.IOCTL_KGSL_GPUOBJ_FREE, k.struct_kgsl_gpuobj_free(id=77))
  assert e.value.errno == errno.EINVAL
  with pytest.raises(OSError, match="object id 55"): dev.port.mmap(0, 4096, 3, 1, dev.fd, 55 * 4096)


def test_kgsl_checks_on_raw_ioctls(dev):
  port, fd = dev.port, dev.fd
  def err(request, arg):
    with pytest.raises(IoctlError) as e: port.ioctl(fd, request, arg)
    return e.value.errno
  assert err(k.IOCTL_KGSL_DEVICE_GETPROPERTY, k.struct_kgsl_device_getproperty(type=0x7777)) == errno.EINVAL
  assert err(k.IOCTL_KGSL_DEVICE_GETPROPERTY, k.struct_kgsl_device_getproperty(type=k.KGSL_PROP_DEVICE_INFO, value=0,
                                                                              sizebytes=40)) == errno.EFAULT
  assert err(k.IOCTL_KGSL_GPUOBJ_INFO, k.struct_kgsl_gpuobj_info(id=123)) == errno.EINVAL
  ctx = dev.create_context()
  objs = (k.struct_kgsl_command_object * 1)(k.struct_kgsl_command_object(gpuaddr=0x1000, size=6))
  short = k.struct_kgsl_gpu_command(cmdlist=ctypes.addressof(objs), cmdsize=8, numcmds=1, context_id=ctx)
  assert err(k.IOCTL_KGSL_GPU_COMMAND, short) == errno.EINVAL
  odd = k.struct_kgsl_gpu_command(cmdlist=ctypes.addressof(objs), cmdsize=ctypes.sizeof(objs[0]), numcmds=1, context_id=ctx)
  assert err(k.IOCTL_KGSL_GPU_COMMAND, odd) == errno.EINVAL
  assert err(k.IOCTL_KGSL_MAP_USER_MEM, k.struct_kgsl_map_user_mem()) == errno.ENOTTY
  with pytest.raises(IoctlError) as e: port.ioctl(fd + 1, k.IOCTL_KGSL_GPUOBJ_INFO, k.struct_kgsl_gpuobj_info(id=1))
  assert e.value.errno == errno.EBADF
  obj = dev.alloc(4096)
  with pytest.raises(OSError, match="too long"): port.mmap(0, 2 * 4096, 3, 1, fd, obj.id * 4096)
  with pytest.raises(OSError, match="no userspace doorbell"): port.doorbell(obj.cpu, 1)
  with pytest.raises(FileNotFoundError): port.open("/dev/kgsl-2d0", 2)


def test_context_ids_bounded_by_memstore(dev):
  with pytest.raises(IoctlError) as e:
    for _ in range(200): dev.create_context()
  assert e.value.errno == errno.ENOSPC


def test_one_submission_of_dependent_ibs(dev):
  """A graph replayed as one GPU_COMMAND: IB 1 copies and signals, IB 2 waits on the signal and copies on."""
  ctx = dev.create_context()
  data, ib1, ib2 = dev.alloc(4096), dev.alloc(4096), dev.alloc(4096)
  ctypes.memmove(data.cpu, struct.pack("<4I", 1, 2, 3, 4), 16)
  g = data.gpuaddr
  a = _put_ib(ib1, CommandStream().memcpy(g + 64, g, 4).event_write_ts(g + 512, 1).words)
  b = _put_ib(ib2, CommandStream().wait_reg_mem(g + 512, 1).memcpy(g + 128, g + 64, 4).words)
  dev.wait(ctx, dev.submit(ctx, [a, b]), 1000)
  assert struct.unpack_from("<4I", bytes(data.view()[128:144])) == (1, 2, 3, 4)


def test_allocation_past_system_memory_is_enomem_and_freeing_gives_it_back():
  d = KGSL(MockPort(MockKGSL(sysmem=64 << 10)))
  a = d.alloc(40 << 10)
  with pytest.raises(IoctlError) as e: d.alloc(40 << 10)
  assert e.value.err == errno.ENOMEM
  d.free(a)
  d.free(d.alloc(40 << 10))
  d.close()


def test_two_opens_of_one_gpu_own_their_contexts_and_share_the_process_memory():
  """Two QCOM device handles in one process: two files of one mock KGSL. Each file's contexts are its own
  (kgsl_context_get_owner: -EINVAL for another file's context id); objects and GPU
  addresses are the process's, so a context of one file copies from an object another file allocated."""
  port = MockPort(MockKGSL())
  a, b = KGSL(port), KGSL(port)
  assert a.fd != b.fd
  ca, cb = a.create_context(), b.create_context()
  src, dst, ib = a.alloc(4096), b.alloc(4096), b.alloc(4096)
  ctypes.memmove(src.cpu, struct.pack("<4I", 7, 8, 9, 10), 16)
  words = CommandStream().memcpy(dst.gpuaddr, src.gpuaddr, 4).words
  b.wait(cb, b.submit(cb, [_put_ib(ib, words)]), 1000)   # b's context reads a's object at its GPU address
  assert struct.unpack_from("<4I", bytes(dst.view()[:16])) == (7, 8, 9, 10)
  for who, ctx in ((a, cb), (b, ca)):   # another file's context: refused on submit and on wait
    with pytest.raises(IoctlError) as e: who.submit(ctx, [_put_ib(ib, CommandStream().nop().words)])
    assert e.value.errno == errno.EINVAL
    with pytest.raises(IoctlError) as e: who.wait(ctx, 1, 10)
    assert e.value.errno == errno.EINVAL
  info = k.struct_kgsl_gpuobj_info(id=src.id)   # a's object id is the process's: b's file finds it
  b.port.ioctl(b.fd, k.IOCTL_KGSL_GPUOBJ_INFO, info)
  assert info.gpuaddr == src.gpuaddr
  a.close(); b.close()
