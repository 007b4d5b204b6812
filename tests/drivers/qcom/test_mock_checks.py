"""Checks of the mock Adreno that no other test drove: each case breaks one rule the mock enforces (its source cited
beside the check in drivers/mock/adreno/) and expects the mock's refusal. No compiler needed."""
import ctypes
import errno

import numpy as np
import pytest

from baregrad.ctypes_autogen import kgsl as k
from baregrad.drivers.mock.adreno import tex as MT
from baregrad.drivers.mock.adreno.cp import CP, CPError, GpuMemory
from baregrad.drivers.mock.adreno.ir3_exec import Executor, Ir3Error, parse
from baregrad.drivers.mock.adreno.kgsl import MAX_NUMIBS, MockKGSL
from baregrad.drivers.port import IoctlError, MockPort
from baregrad.drivers.qcom.ir3_compile import Ir3Program
from baregrad.drivers.qcom.kgsl import KGSL
from baregrad.drivers.qcom.pm4 import CommandStream, pkt7_header

BASE = 0x10000


@pytest.fixture
def dev():
  d = KGSL(MockPort(MockKGSL()))
  yield d
  d.close()


def _err(port, fd, request, arg) -> int:
  with pytest.raises(IoctlError) as e: port.ioctl(fd, request, arg)
  return e.value.errno


# ---- kgsl.py: the GPU_COMMAND and WAITTIMESTAMP_CTXTID errnos

def test_gpu_command_numcmds_over_max_numibs_is_einval(dev):
  ctx = dev.create_context()
  objs = (k.struct_kgsl_command_object * 1)(k.struct_kgsl_command_object(gpuaddr=0x1000, size=4))
  cmd = k.struct_kgsl_gpu_command(cmdlist=ctypes.addressof(objs), cmdsize=ctypes.sizeof(objs[0]), numcmds=MAX_NUMIBS + 1, context_id=ctx)
  assert _err(dev.port, dev.fd, k.IOCTL_KGSL_GPU_COMMAND, cmd) == errno.EINVAL


def test_gpu_command_ib_of_size_zero_is_einval(dev):
  ctx = dev.create_context()
  ib = dev.alloc(4096)
  objs = (k.struct_kgsl_command_object * 1)(k.struct_kgsl_command_object(gpuaddr=ib.gpuaddr, size=0))
  cmd = k.struct_kgsl_gpu_command(cmdlist=ctypes.addressof(objs), cmdsize=ctypes.sizeof(objs[0]), numcmds=1, context_id=ctx)
  assert _err(dev.port, dev.fd, k.IOCTL_KGSL_GPU_COMMAND, cmd) == errno.EINVAL


def test_gpu_command_object_without_a_cmdlist_flag_is_einval(dev):
  # kgsl_drawobj_cmd_add_cmdlist: an IB object must say what it is (KGSL_CMDLIST_IB and the preamble flags)
  ctx = dev.create_context()
  ib = dev.alloc(4096)
  objs = (k.struct_kgsl_command_object * 1)(k.struct_kgsl_command_object(gpuaddr=ib.gpuaddr, size=4, flags=0))
  cmd = k.struct_kgsl_gpu_command(cmdlist=ctypes.addressof(objs), cmdsize=ctypes.sizeof(objs[0]), numcmds=1, context_id=ctx)
  assert _err(dev.port, dev.fd, k.IOCTL_KGSL_GPU_COMMAND, cmd) == errno.EINVAL


def test_wait_on_faulted_context_is_eproto_and_unretired_is_etimedout(dev):
  ctx, ib = dev.create_context(), dev.alloc(4096)
  ctypes.memmove(ib.cpu, np.array(CommandStream().mem_write(0xDEAD0000, 1).words, np.uint32).tobytes(), 16)
  ts = dev.submit(ctx, [(ib.gpuaddr, 4)])
  w = k.struct_kgsl_device_waittimestamp_ctxtid(context_id=ctx, timestamp=ts, timeout=10)
  assert _err(dev.port, dev.fd, k.IOCTL_KGSL_DEVICE_WAITTIMESTAMP_CTXTID, w) == errno.EPROTO
  ctx2 = dev.create_context()
  w = k.struct_kgsl_device_waittimestamp_ctxtid(context_id=ctx2, timestamp=5, timeout=10)   # never submitted
  assert _err(dev.port, dev.fd, k.IOCTL_KGSL_DEVICE_WAITTIMESTAMP_CTXTID, w) == errno.ETIMEDOUT


def test_context_of_a_closed_file_is_einval():
  m = MockKGSL()
  fd = m.open("/dev/kgsl-3d0", 2)
  p = k.struct_kgsl_drawctxt_create()
  assert m.ioctl(fd, k.IOCTL_KGSL_DRAWCTXT_CREATE, ctypes.addressof(p), ctypes.sizeof(p)) == 0
  m.close(fd)
  fd2 = m.open("/dev/kgsl-3d0", 2)
  w = k.struct_kgsl_device_waittimestamp_ctxtid(context_id=p.drawctxt_id, timestamp=0)
  assert m.ioctl(fd2, k.IOCTL_KGSL_DEVICE_WAITTIMESTAMP_CTXTID, ctypes.addressof(w), ctypes.sizeof(w)) == -errno.EINVAL
  assert m.ioctl(fd, k.IOCTL_KGSL_DEVICE_WAITTIMESTAMP_CTXTID, ctypes.addressof(w), ctypes.sizeof(w)) == -errno.EBADF


# ---- cp.py: payload sizes and streams cut short

def _cp(gen=6):
  mem = GpuMemory()
  mem.map(BASE, bytearray(0x4000))
  return CP(mem, gen=gen)


@pytest.mark.parametrize("words,msg,gen", [
  ([pkt7_header(0x3d, 2), BASE, 0], "CP_MEM_WRITE needs an address and at least one dword", 6),
  ([pkt7_header(0x34, 2), 0, 0], "needs 3 header dwords", 6),
  ([pkt7_header(0x3f, 2), BASE, 0], "CP_INDIRECT_BUFFER takes 3", 6),
  ([pkt7_header(0x3e, 2), 0x980 | 1 << 18, BASE], "CP_REG_TO_MEM takes 3", 6),
  ([pkt7_header(0x33, 3), 0, 1, 1], "CP_EXEC_CS takes 4", 6),
  ([pkt7_header(0x46, 0)], "CP_EVENT_WRITE7 without its dword 0", 7),
  (CommandStream().pkt4(0x980, 1, 2).words[:2], "packet needs 2 payload dwords, its buffer has 1 left", 6),   # type-4 cut short
])
def test_short_payloads_refused(words, msg, gen):
  cp = _cp(gen)
  cp.submit(words)
  with pytest.raises(CPError, match=msg): cp.run()


# ---- tex.py: descriptor and sampler lengths

def test_short_descriptor_and_sampler_refused():
  with pytest.raises(MT.TextureError, match="A6XX_TEX_CONST is 16"): MT.decode_tex_const([0] * 15, 0)
  with pytest.raises(MT.TextureError, match="A6XX_TEX_SAMP is 4"): MT.decode_tex_samp([0] * 3, 0)


# ---- ir3_exec.py: programs that do not end, and local memory past SHARED_SIZE

def _prg(shared=0):
  return Ir3Program(630, b"\0" * 16, 0, -1, 1, 0, shared, 1, 0, 0, (), 0xFC, 0xFC, (1, 1, 1), False, 0, ())


def test_program_without_end_refused():
  with pytest.raises(Ir3Error, match="ran past the end of the program"):
    Executor(GpuMemory()).run(_prg(), (1,), b"", program=parse("mov.u32u32 r0.x, 1\n"))


def test_program_that_never_ends_refused():
  with pytest.raises(Ir3Error, match="did not end after 100 instructions"):
    Executor(GpuMemory()).run(_prg(), (1,), b"", program=parse("jump #l0\nend\n"), max_steps=100)


def test_branch_without_target_refused():
  with pytest.raises(Ir3Error, match="a branch without a target"): parse("jump\nend\n")


def test_local_memory_past_shared_size_faults():
  text = "mov.u32u32 r0.x, {}\nldl.u32 r1.x, l[r0.x], 1\nend\n"
  Executor(GpuMemory()).run(_prg(64), (1,), b"", program=parse(text.format(60)))   # the last dword of 64 bytes
  with pytest.raises(Ir3Error, match="local memory access outside the 64 bytes"):
    Executor(GpuMemory()).run(_prg(64), (1,), b"", program=parse(text.format(64)))
