"""The syscall port: real (libc), mock (a fake device), tracing (decoded calls)."""
import ctypes, errno, mmap, os
import pytest
from baregrad.drivers.port import MockPort, TracingPort, IoctlError, register_ioctl, describe, make_port

class Args(ctypes.Structure):
  _fields_ = [("handle", ctypes.c_uint32), ("size", ctypes.c_uint64), ("status", ctypes.c_uint32)]

REQ_ALLOC, REQ_BAD = 0xC0104601, 0xC0104602
register_ioctl(REQ_ALLOC, "TOY_ALLOC", Args)

class ToyGPU:
  """A mock device: answers ioctls by reading and writing the caller's struct through its address."""
  def __init__(self): self.next, self.bells, self.maps = 1, [], {}
  def open(self, path, flags):
    if path != "/dev/toy": return -errno.ENOENT
    return 3
  def close(self, fd): pass
  def ioctl(self, fd, request, argp, argsize):
    if request == REQ_BAD: return -errno.EINVAL
    a = Args.from_address(argp)
    a.handle, a.status, self.next = self.next, 0, self.next + 1
    return 0
  def mmap(self, addr, length, prot, flags, fd, offset):
    buf = mmap.mmap(-1, length)
    self.maps[id(buf)] = buf
    return ctypes.addressof(ctypes.c_char.from_buffer(buf))
  def munmap(self, addr, length): pass
  def doorbell(self, addr, value): self.bells.append((addr, value))

def test_mock_port_round_trips_structs():
  p = MockPort(ToyGPU())
  fd = p.open("/dev/toy", os.O_RDWR)
  a = Args(size=4096)
  p.ioctl(fd, REQ_ALLOC, a)
  p.ioctl(fd, REQ_ALLOC, a)
  assert a.handle == 2 and a.size == 4096
  addr = p.mmap(0, 4096, 3, 1, fd, 0)
  ctypes.c_uint32.from_address(addr).value = 7
  assert ctypes.c_uint32.from_address(addr).value == 7

def test_failed_ioctl_names_ioctl_errno_and_params():
  p = MockPort(ToyGPU())
  register_ioctl(REQ_BAD, "TOY_BAD", Args)
  with pytest.raises(IoctlError, match=r"(?s)TOY_BAD.*EINVAL.*size=0x1000"): p.ioctl(3, REQ_BAD, Args(size=4096))

def test_tracing_port_decodes_calls():
  lines = []
  p = TracingPort(MockPort(ToyGPU()), out=lines.append)
  fd = p.open("/dev/toy", os.O_RDWR)
  p.ioctl(fd, REQ_ALLOC, Args(size=64))
  p.doorbell(0x1000, 5)
  text = "\n".join(lines)
  assert "TOY_ALLOC" in text and "size=0x40" in text and "handle=1" in text and "doorbell 0x1000 <- 0x5" in text

def test_describe_nested():
  class Outer(ctypes.Structure): _fields_ = [("a", Args), ("v", ctypes.c_uint8 * 3)]
  assert describe(Outer()) == "{a={handle=0, size=0, status=0}, v=[0, 0, 0]}"

def test_real_port_reports_errno_by_name():
  libc = pytest.importorskip("baregrad.ctypes_autogen.libc")
  p = make_port()
  with pytest.raises(OSError, match="ENOENT"): p.open("/dev/does-not-exist-baregrad", os.O_RDWR)
  fd = p.open("/dev/null", os.O_RDWR)
  try:
    with pytest.raises(IoctlError, match=r"TOY_ALLOC.*ENOTTY"): p.ioctl(fd, REQ_ALLOC, Args())
  finally: p.close(fd)
