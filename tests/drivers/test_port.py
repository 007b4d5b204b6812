"""The syscall port: real (libc), mock (a fake device), tracing (decoded calls)."""
from tests.paths import REPO
import ctypes, errno, mmap, os, re
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
  pytest.importorskip("baregrad.ctypes_autogen.libc")
  p = make_port()
  with pytest.raises(OSError, match="ENOENT"): p.open("/dev/does-not-exist-baregrad", os.O_RDWR)
  fd = p.open("/dev/null", os.O_RDWR)
  try:
    with pytest.raises(IoctlError, match=r"TOY_ALLOC.*ENOTTY"): p.ioctl(fd, REQ_ALLOC, Args())
  finally: p.close(fd)

def test_driver_port_builds_the_drivers_mock(monkeypatch):
  """MOCKGPU=1: the port builds the mock of the driver that asks (drivers never import their mock); unknown names and
  a mock refusing its variables raise ValueError naming them; without MOCKGPU it is the kernel's port."""
  from baregrad.helpers import getenv
  from baregrad.drivers.port import driver_port, RealPort
  from baregrad.drivers.mock.nv import MockNVGPU
  from baregrad.drivers.mock.amd import MockAMDGPU
  def env(**kw):
    for k, v in kw.items(): monkeypatch.setenv(k, v)
    getenv.cache_clear()   # knobs are cached per process
  try:
    env(MOCKGPU="1", IOCTL_TRACE="0")
    assert isinstance(driver_port("NV").mock, MockNVGPU) and isinstance(driver_port("AMD").mock, MockAMDGPU)
    from baregrad.drivers.mock.adreno.kgsl import MockKGSL
    assert isinstance(driver_port("QCOM").mock, MockKGSL)
    with pytest.raises(ValueError, match="no mock GPU for the METAL driver; mocks exist for NV, AMD, QCOM"):
      driver_port("METAL")
    env(MOCKGPU_ARCH="sm_75")
    with pytest.raises(ValueError, match="MOCKGPU_ARCH='sm_75'"): driver_port("NV")
    env(MOCKGPU="0")
    pytest.importorskip("baregrad.ctypes_autogen.libc")
    assert isinstance(driver_port("NV"), RealPort)
  finally:
    monkeypatch.undo()
    getenv.cache_clear()

def test_no_driver_module_imports_a_mock():
  """Each driver's mock is chosen by the port: no module of drivers/nv, drivers/amd or the CPU driver names one."""
  import re
  root = REPO / "baregrad" / "drivers"
  files = [*root.glob("nv/*.py"), *root.glob("amd/*.py"), *root.glob("cpu*.py")]
  assert len(files) > 10
  bad = [f"{f.relative_to(root)}: {line.strip()}" for f in files for line in f.read_text().splitlines()
         if re.match(r"\s*(from|import)\s+baregrad\.drivers\.mock\b", line)]
  assert not bad, bad

class WindowPort:
  """Records mmap/munmap: `taken` bases answer EEXIST (something lives there); `hint` bases map elsewhere (a kernel
  that takes MAP_FIXED_NOREPLACE as a hint)."""
  def __init__(self, taken=(), hint=()): self.taken, self.hint, self.calls = set(taken), set(hint), []
  def mmap(self, addr, length, prot, flags, fd, offset):
    self.calls.append(("mmap", addr, length, flags))
    if addr in self.taken: raise OSError(errno.EEXIST, "taken")
    return addr + 0x1000 if addr in self.hint else addr
  def munmap(self, addr, length): self.calls.append(("munmap", addr, length))

def test_reserve_window_skips_taken_and_hinted_windows():
  from baregrad.drivers.vmem import reserve_window, release_to_window, MAP_FIXED_NOREPLACE, MAP_FIXED, PROT_NONE
  p = WindowPort(taken={0x1000_0000}, hint={0x2000_0000})
  assert reserve_window(p, 0x1000_0000, 0x1000_0000, 0x4000_0000) == 0x3000_0000
  assert ("munmap", 0x2000_1000, 0x1000_0000) in p.calls   # the hint's mapping is undone
  assert all(c[3] & MAP_FIXED_NOREPLACE for c in p.calls if c[0] == "mmap")
  # no window fits below the limit: None, nothing left mapped
  p = WindowPort(taken={0x1000_0000, 0x2000_0000})
  assert reserve_window(p, 0x1000_0000, 0x1000_0000, 0x3000_0000) is None and not any(c[0] == "munmap" for c in p.calls)
  p = WindowPort()
  release_to_window(p, 0x1000_0000, 0x2000)
  assert p.calls[0] == ("munmap", 0x1000_0000, 0x2000)
  assert p.calls[1][1:3] == (0x1000_0000, 0x2000) and p.calls[1][3] & MAP_FIXED
  assert PROT_NONE == 0

def test_va_allocator_aligns_and_merges():
  from baregrad.drivers.vmem import VAAllocator, round_up
  assert round_up(5, 4) == 8 and round_up(8, 4) == 8 and round_up(7, 3) == 9
  va = VAAllocator(0x1000, 0x10000)
  a = va.alloc(0x1000, 0x4000)
  b = va.alloc(0x2000)
  assert a == 0x4000 and b == 0x1000
  va.release(a, 0x1000); va.release(b, 0x2000)
  assert va.free == [(0x1000, 0x10000)]
  with pytest.raises(MemoryError, match="0x20000 bytes"): va.alloc(0x20000)

def test_tracing_port_times_calls_and_marks_rm_status_failures():
  """Each line carries the time since tracing began and the call's duration; an ioctl that returns 0 with a failing
  status inside its argument (RM's way) is marked FAILED with the status name."""
  from baregrad.ctypes_autogen.nv import nv_580 as nv
  class StatusGPU(ToyGPU):
    def ioctl(self, fd, request, argp, argsize):
      Args.from_address(argp).status = nv.NV_ERR_INVALID_OBJECT_PARENT
      return 0
  lines: list[str] = []
  p = TracingPort(MockPort(StatusGPU()), out=lines.append)
  register_ioctl(REQ_ALLOC, "TOY_ALLOC", Args)
  assert p.ioctl(3, REQ_ALLOC, Args(size=64)) == 0
  assert re.match(r"\[\s*\d+\.\d{3} ms\] ioctl\(3, TOY_ALLOC\) .* = 0 FAILED NV_ERR_INVALID_OBJECT_PARENT \[\d+\.\d{3} ms\]", lines[-1]), lines

def test_tracing_port_traces_failed_mmaps_with_flag_names(tmp_path, monkeypatch):
  """mmap lines name PROT_/MAP_ flags; a failed mmap is traced before the error propagates; IOCTL_TRACE_FILE takes them."""
  class NoMap(ToyGPU):
    def mmap(self, addr, length, prot, flags, fd, offset): raise OSError(errno.EINVAL, "bad offset")
  path = tmp_path / "trace.txt"
  from baregrad import knobs
  monkeypatch.setenv("IOCTL_TRACE_FILE", str(path)); knobs.reset()
  try:
    p = TracingPort(MockPort(NoMap()))
    with pytest.raises(OSError): p.mmap(0, 0x1000, 3, 0x1, 5, 0x2000)
  finally:
    monkeypatch.delenv("IOCTL_TRACE_FILE"); knobs.reset()
  text = path.read_text()
  assert "mmap(0x0, 0x1000, prot=PROT_READ|PROT_WRITE, flags=MAP_SHARED, fd=5, offset=0x2000) -> FAILED" in text, text

def test_describe_names_fields_follows_pointers_and_trims_arrays():
  """Fields registered with words show them beside the value; a registered pointer is followed into the struct it
  points at (and left a number when its target is unknown); arrays show their used length or lose their trailing zeros."""
  from baregrad.drivers.port import (header_names, enum_words, flag_words, register_field_words, register_pointer,
                                     register_array_count)
  class Hdr:   # a header module's constants
    TOY_KIND_A, TOY_KIND_B, TOY_FLAG_R, TOY_FLAG_W, TOY_FLAG_X = 0, 2, 1, 2, -0x80000000
  class Inner(ctypes.Structure): _fields_ = [("x", ctypes.c_uint32), ("y", ctypes.c_uint32)]
  class Outer(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_uint32), ("flags", ctypes.c_uint32), ("p", ctypes.c_uint64), ("n", ctypes.c_uint32),
                ("items", ctypes.c_uint32 * 16), ("pad", ctypes.c_uint8 * 32)]
  assert header_names(Hdr, "TOY_FLAG_") == {1: "R", 2: "W", 0x80000000: "X"}
  register_field_words(Outer, "kind", enum_words(header_names(Hdr, "TOY_KIND_")))
  register_field_words(Outer, "flags", flag_words(header_names(Hdr, "TOY_FLAG_")))
  register_pointer(Outer, "p", lambda o: Inner if o.kind == 2 else None)
  register_array_count(Outer, "items", "n")
  inner = Inner(x=5, y=6)
  o = Outer(kind=2, flags=0x80000003 | 0x100, p=ctypes.addressof(inner), n=2)
  o.items[0], o.items[1], o.items[5], o.pad[1] = 7, 8, 9, 1
  text = describe(o)
  assert "kind=2 (B)" in text and "flags=0x80000103 (R|W|X|0x100)" in text, text
  assert re.search(r"p=0x[0-9a-f]+ -> Inner \{x=5, y=6\}", text), text
  assert "items=[7, 8] (2 used of 16)" in text and "pad=[0, 1, 30 zero entries]" in text, text
  o.kind = 0
  assert "kind=0 (A)" in describe(o) and "-> Inner" not in describe(o)
  o.kind = 5
  assert "kind=5 (?)" in describe(o)

def test_tracing_port_follows_a_doorbell_with_what_it_submitted():
  lines = []
  p = TracingPort(MockPort(ToyGPU()), out=lines.append)
  p.watch_doorbell(0x1000, lambda v: f"    entries up to {v}")
  p.doorbell(0x1000, 5)
  p.doorbell(0x2000, 1)
  p.watch_doorbell(0x1000, lambda v: 1 / 0)
  p.doorbell(0x1000, 6)
  assert lines[0].endswith("doorbell 0x1000 <- 0x5\n    entries up to 5") and lines[1].endswith("doorbell 0x2000 <- 0x1"), lines
  assert "cannot decode what it submitted: ZeroDivisionError" in lines[2]

def test_describe_never_reads_a_bad_pointer():
  """A registered pointer to unmapped memory (a wrong call under test) reads as unreadable, not as a crash."""
  from baregrad.drivers.port import register_pointer
  class Inner(ctypes.Structure): _fields_ = [("x", ctypes.c_uint64)]
  class Holder(ctypes.Structure): _fields_ = [("p", ctypes.c_uint64)]
  register_pointer(Holder, "p", lambda o: Inner)
  assert describe(Holder(p=0x10)) == "{p=0x10 -> Inner (unreadable)}"
  i = Inner(x=3)
  assert describe(Holder(p=ctypes.addressof(i))).endswith("-> Inner {x=3}}")
