"""The syscall port: the only way drivers reach the kernel (open, close, ioctl, mmap, munmap, read, doorbells).

RealPort calls libc through the generated bindings. MockPort hands every call to a mock GPU object, which is
how drivers run on machines without a GPU. TracingPort wraps either and prints every call, ioctls decoded by
name with their struct fields and the returned status (IOCTL_TRACE=1 turns it on for the drivers).
"""
from __future__ import annotations
import ctypes, errno, os, sys, time
from typing import Any, Callable, Protocol
from baregrad import knobs

class IoctlError(OSError):
  """A failed ioctl: names the ioctl, the errno (or a driver status) and the parameters."""
  def __init__(self, name: str, err: int, detail: str = "", params: str = ""):
    self.name, self.err = name, err
    msg = f"ioctl {name} failed: {errno.errorcode.get(err, err)} ({os.strerror(err) if err in errno.errorcode else 'status'})"
    if detail: msg += f": {detail}"
    if params: msg += f"\n  parameters: {params}"
    super().__init__(err, msg)
  def __str__(self) -> str: return self.args[1]

# ioctl request number -> (name, ctypes type of its argument); drivers register theirs so traces decode
IOCTL_NAMES: dict[int, tuple[str, type | None]] = {}

def register_ioctl(request: int, name: str, argtype: type | None = None) -> None: IOCTL_NAMES[request] = (name, argtype)

def ioctl_name(request: int) -> str: return IOCTL_NAMES.get(request, (f"ioctl_{request:#x}", None))[0]

def describe(obj: Any, depth: int = 0) -> str:
  """A ctypes struct/union/array in words: name=value pairs, nested."""
  if isinstance(obj, (ctypes.Structure, ctypes.Union)):
    parts = []
    for f in obj._fields_:
      name = f[0]
      v = getattr(obj, name)
      parts.append(f"{name}={describe(v, depth + 1)}")
    return "{" + ", ".join(parts) + "}"
  if isinstance(obj, ctypes.Array):
    items = list(obj)
    if len(items) > 8: return f"[{', '.join(describe(x, depth + 1) for x in items[:8])}, ... {len(items)} items]"
    return "[" + ", ".join(describe(x, depth + 1) for x in items) + "]"
  if isinstance(obj, int): return hex(obj) if obj > 9 or obj < -9 else str(obj)
  if isinstance(obj, bytes): return repr(obj[:32])
  return repr(obj)

class Port(Protocol):
  def open(self, path: str, flags: int) -> int: ...
  def close(self, fd: int) -> None: ...
  def ioctl(self, fd: int, request: int, arg: Any, name: str | None = None) -> int: ...
  def mmap(self, addr: int, length: int, prot: int, flags: int, fd: int, offset: int) -> int: ...
  def munmap(self, addr: int, length: int) -> None: ...
  def read(self, fd: int, n: int) -> bytes: ...
  def lseek(self, fd: int, offset: int, whence: int) -> int: ...
  def doorbell(self, addr: int, value: int, nbytes: int = 4) -> None: ...

def _argptr(arg: Any) -> tuple[int, int]:
  """(address, size) of an ioctl argument: a ctypes object, a bytearray, or a plain integer value."""
  if isinstance(arg, (ctypes.Structure, ctypes.Union, ctypes.Array)): return ctypes.addressof(arg), ctypes.sizeof(arg)
  if isinstance(arg, bytearray): return ctypes.addressof((ctypes.c_char * len(arg)).from_buffer(arg)), len(arg)
  if isinstance(arg, int): return arg, 0
  raise TypeError(f"ioctl argument must be a ctypes object, bytearray or int, got {type(arg).__name__}")

class RealPort:
  """The kernel, through libc (the generated bindings)."""
  def __init__(self) -> None:
    from baregrad.ctypes_autogen import libc
    self.libc = libc
  def _err(self, what: str) -> OSError:
    e = ctypes.get_errno()
    return OSError(e, f"{what} failed: {errno.errorcode.get(e, e)} ({os.strerror(e)})")
  def open(self, path: str, flags: int) -> int:
    fd = self.libc.open(path.encode(), flags)
    if fd < 0:
      e = ctypes.get_errno()
      raise OSError(e, f"open {path} failed: {errno.errorcode.get(e, e)} ({os.strerror(e)})", path)
    return fd
  def close(self, fd: int) -> None: self.libc.close(fd)
  def ioctl(self, fd: int, request: int, arg: Any, name: str | None = None) -> int:
    addr, _ = _argptr(arg)
    r = self.libc.ioctl(fd, request, ctypes.c_void_p(addr))
    if r < 0:
      e = ctypes.get_errno()
      raise IoctlError(name or ioctl_name(request), e, params=describe(arg) if not isinstance(arg, int) else hex(arg))
    return r
  def mmap(self, addr: int, length: int, prot: int, flags: int, fd: int, offset: int) -> int:
    r = self.libc.mmap(ctypes.c_void_p(addr or None), length, prot, flags, fd, offset)
    if r is None or r == ctypes.c_void_p(-1).value: raise self._err(f"mmap of {length} bytes (fd {fd}, offset {offset:#x})")
    return r
  def munmap(self, addr: int, length: int) -> None:
    if self.libc.munmap(ctypes.c_void_p(addr), length) != 0: raise self._err(f"munmap {addr:#x}+{length:#x}")
  def read(self, fd: int, n: int) -> bytes: return os.read(fd, n)
  def lseek(self, fd: int, offset: int, whence: int) -> int: return os.lseek(fd, offset, whence)
  def doorbell(self, addr: int, value: int, nbytes: int = 4) -> None:
    """One store of `nbytes` (4, or 8 for 64-bit doorbells such as AMD's on SOC15 parts) to a mapped register."""
    (ctypes.c_uint64 if nbytes == 8 else ctypes.c_uint32).from_address(addr).value = value

class MockDevice(Protocol):
  """What a mock GPU implements: the kernel interface of its real driver."""
  def open(self, path: str, flags: int) -> int: ...
  def close(self, fd: int) -> None: ...
  def ioctl(self, fd: int, request: int, argp: int, argsize: int) -> int: ...
  def mmap(self, addr: int, length: int, prot: int, flags: int, fd: int, offset: int) -> int: ...
  def munmap(self, addr: int, length: int) -> None: ...
  def doorbell(self, addr: int, value: int) -> None: ...

class MockPort:
  """Every call goes to the mock GPU (which sees only what the real kernel driver would see)."""
  def __init__(self, mock: MockDevice): self.mock = mock
  def open(self, path: str, flags: int) -> int: return self.mock.open(path, flags)
  def close(self, fd: int) -> None: self.mock.close(fd)
  def ioctl(self, fd: int, request: int, arg: Any, name: str | None = None) -> int:
    addr, size = _argptr(arg)
    r = self.mock.ioctl(fd, request, addr, size)
    if r < 0: raise IoctlError(name or ioctl_name(request), -r, params=describe(arg) if not isinstance(arg, int) else hex(arg))
    return r
  def mmap(self, addr: int, length: int, prot: int, flags: int, fd: int, offset: int) -> int:
    return self.mock.mmap(addr, length, prot, flags, fd, offset)
  def munmap(self, addr: int, length: int) -> None: self.mock.munmap(addr, length)
  def read(self, fd: int, n: int) -> bytes: return getattr(self.mock, "read")(fd, n)
  def lseek(self, fd: int, offset: int, whence: int) -> int:
    f = getattr(self.mock, "lseek", None)
    if f is None: raise OSError(errno.ESPIPE, "lseek: this mock has no seekable files")
    return f(fd, offset, whence)
  def doorbell(self, addr: int, value: int, nbytes: int = 4) -> None:
    if nbytes == 4: self.mock.doorbell(addr, value)
    else: self.mock.doorbell(addr, value, nbytes)

def _rm_status(arg: Any) -> int:
  """The RM/UVM status an ioctl returned inside its argument (NVOS* `status`, UVM `rmStatus`, or those of a wrapped
  `params`); 0 when it carries none. RM answers most failures with ioctl() = 0 and the status here."""
  for a in (arg, getattr(arg, "params", None)):
    if a is None or isinstance(a, int): continue
    for f in ("status", "rmStatus"):
      v = getattr(a, f, None)
      if isinstance(v, int) and v: return v
  return 0

_STATUS_NAMES: dict[int, str] = {}
def _status_name(s: int) -> str:
  if not _STATUS_NAMES:   # RM's status codes (nvstatuscodes.h), from the generated NV bindings
    from baregrad.ctypes_autogen.nv import nv_580
    for k, v in vars(nv_580).items():
      if k.startswith("NV_ERR_") and isinstance(v, int): _STATUS_NAMES.setdefault(v, k)
  return _STATUS_NAMES.get(s, f"status {s:#x}")

class TracingPort:
  """Wraps a port and prints each call: the time since tracing began, ioctls decoded by name with their fields before
  and after, the call's duration, RM/UVM statuses that report a failure inside a successful ioctl marked FAILED, and
  mmaps (failed ones too) with their flags. IOCTL_TRACE_FILE=path sends the lines to that file."""
  def __init__(self, inner: Any, out: Callable[[str], None] | None = None):
    self.inner = inner
    if out is None and (path := knobs.get("IOCTL_TRACE_FILE")):
      f = open(path, "a", buffering=1)   # line-buffered: the trace survives a crash up to the last call
      out = lambda s: print(s, file=f)
    self._out = out or (lambda s: print(s, file=sys.stderr))
    self._t0 = time.perf_counter()
  def out(self, line: str) -> None: self._out(f"[{(time.perf_counter() - self._t0) * 1e3:10.3f} ms] {line}")
  @staticmethod
  def _took(t: float) -> str: return f" [{(time.perf_counter() - t) * 1e3:.3f} ms]"
  def open(self, path: str, flags: int) -> int:
    try: fd = self.inner.open(path, flags)
    except OSError as e: self.out(f"open({path!r}, {flags:#x}) -> {e}"); raise
    self.out(f"open({path!r}, {flags:#x}) = {fd}")
    return fd
  def close(self, fd: int) -> None: self.out(f"close({fd})"); self.inner.close(fd)
  def ioctl(self, fd: int, request: int, arg: Any, name: str | None = None) -> int:
    nm = name or ioctl_name(request)
    before = describe(arg) if not isinstance(arg, int) else hex(arg)
    t = time.perf_counter()
    try: r = self.inner.ioctl(fd, request, arg, nm)
    except OSError as e:
      self.out(f"ioctl({fd}, {nm}) {before} -> FAILED {e}{self._took(t)}")
      raise
    took = self._took(t)
    after = describe(arg) if not isinstance(arg, int) else hex(arg)
    st = _rm_status(arg)
    self.out(f"ioctl({fd}, {nm}) {before} = {r}" + (f" FAILED {_status_name(st)}" if st else "") + took
             + (f"\n    -> {after}" if after != before else ""))
    return r
  def mmap(self, addr: int, length: int, prot: int, flags: int, fd: int, offset: int) -> int:
    call = f"mmap({addr:#x}, {length:#x}, prot={_flags(prot, _PROT)}, flags={_flags(flags, _MAP)}, fd={fd}, offset={offset:#x})"
    t = time.perf_counter()
    try: r = self.inner.mmap(addr, length, prot, flags, fd, offset)
    except OSError as e: self.out(f"{call} -> FAILED {e}{self._took(t)}"); raise
    self.out(f"{call} = {r:#x}{self._took(t)}")
    return r
  def munmap(self, addr: int, length: int) -> None: self.out(f"munmap({addr:#x}, {length:#x})"); self.inner.munmap(addr, length)
  def read(self, fd: int, n: int) -> bytes:
    r = self.inner.read(fd, n)
    self.out(f"read({fd}, {n}) = {len(r)} bytes")
    return r
  def lseek(self, fd: int, offset: int, whence: int) -> int:
    r = self.inner.lseek(fd, offset, whence)
    self.out(f"lseek({fd}, {offset}, {whence}) = {r}")
    return r
  def doorbell(self, addr: int, value: int, nbytes: int = 4) -> None:
    self.out(f"doorbell{'64' if nbytes == 8 else ''} {addr:#x} <- {value:#x}")
    self.inner.doorbell(addr, value, nbytes)

# mmap(2) prot and flags bits by name (Linux uapi asm-generic/mman-common.h, mman.h)
_PROT = {1: "PROT_READ", 2: "PROT_WRITE", 4: "PROT_EXEC"}
_MAP = {0x01: "MAP_SHARED", 0x02: "MAP_PRIVATE", 0x10: "MAP_FIXED", 0x20: "MAP_ANONYMOUS", 0x4000: "MAP_NORESERVE",
        0x8000: "MAP_POPULATE", 0x100000: "MAP_FIXED_NOREPLACE"}
def _flags(v: int, names: dict[int, str]) -> str:
  parts = [n for b, n in names.items() if v & b]
  rest = v & ~sum(names)
  return "|".join(parts + ([f"{rest:#x}"] if rest else [])) or "0"

def make_port(mock: MockDevice | None = None) -> Any:
  """The port a driver should use: the mock's when given (MOCKGPU=1), else the kernel's; traced with IOCTL_TRACE=1."""
  p: Any = MockPort(mock) if mock is not None else RealPort()
  return TracingPort(p) if knobs.get("IOCTL_TRACE") else p

# each GPU driver's mock GPU (module, class): the port builds it, so a driver never imports its mock
MOCKS: dict[str, tuple[str, str]] = {"NV": ("baregrad.drivers.mock.nv", "MockNVGPU"),
                                     "AMD": ("baregrad.drivers.mock.amd", "MockAMDGPU"),
                                     "QCOM": ("baregrad.drivers.mock.adreno.kgsl", "MockKGSL")}

def driver_port(driver: str) -> Any:
  """The port driver `driver` ("NV", "AMD") opens its device through: with MOCKGPU=1 a new mock GPU of that driver's
  kind (its own variables, e.g. MOCKGPU_ARCH, MOCKGPU_COUNT, pick what it models), else the kernel. A mock that refuses
  its variables raises ValueError naming them."""
  if not knobs.get("MOCKGPU"): return make_port()
  if driver not in MOCKS: raise ValueError(f"no mock GPU for the {driver} driver; mocks exist for {', '.join(MOCKS)}")
  import importlib
  modname, clsname = MOCKS[driver]
  return make_port(getattr(importlib.import_module(modname), clsname)())
