"""The syscall port: the only way drivers reach the kernel (open, close, ioctl, mmap, munmap, read, doorbells).

RealPort calls libc through the generated bindings. MockPort hands every call to a mock GPU object, which is
how drivers run on machines without a GPU. TracingPort wraps either and prints every call, ioctls decoded by
name with their struct fields and the returned status (IOCTL_TRACE=1 turns it on for the drivers).
"""
from __future__ import annotations
import ctypes, errno, os, sys, time
from typing import Any, Callable, Protocol
from baregrad import knobs
from baregrad.hal import profile

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

# How a field reads in words, drivers register them from their generated headers (keyed by the struct type and field):
FIELD_WORDS: dict[tuple[type, str], Callable[[int], str]] = {}
# Pointer fields to follow: (struct type, field) -> f(struct) giving the ctypes type the pointer points at, or None
POINTERS: dict[tuple[type, str], Callable[[Any], Any]] = {}
# Arrays with a used length: (struct type, array field) -> the field holding how many entries are used
ARRAY_COUNTS: dict[tuple[type, str], str] = {}

def header_names(module: Any, prefix: str, bits: int = 32) -> dict[int, str]:
  """value -> name (without `prefix`) of a header's integer constants that start with `prefix`, values taken as
  unsigned `bits`-bit numbers (a C enum's or #define's value in a field of that width); the first name of a value wins."""
  out: dict[int, str] = {}
  for k, v in vars(module).items():
    if k.startswith(prefix) and type(v) is int: out.setdefault(v & ((1 << bits) - 1), k[len(prefix):])
  return out

def enum_words(names: dict[int, str]) -> Callable[[int], str]:
  """A field holding one of `names`: the value's name, or `?` where the header defines none."""
  return lambda v: names.get(v, "?")

def flag_words(names: dict[int, str]) -> Callable[[int], str]:
  """A field of flag bits `names` (one bit each): the set flags joined by |, then any bits no flag names in hex."""
  single = {b: n for b, n in names.items() if b and b & (b - 1) == 0}
  def words(v: int) -> str:
    parts = [n for b, n in sorted(single.items()) if v & b]
    rest = v & ~sum(single)
    return "|".join(parts + ([f"{rest:#x}"] if rest else [])) or "0"
  return words

def register_field_words(t: type, field: str, words: Callable[[int], str]) -> None:
  """Traces (describe) show struct `t`'s `field` as `value (words(value))`."""
  FIELD_WORDS[(t, field)] = words

def register_pointer(t: type, field: str, target: Callable[[Any], Any]) -> None:
  """Traces follow struct `t`'s pointer `field` into `target(struct)` (a ctypes type, or None to leave it a number)."""
  POINTERS[(t, field)] = target

def register_array_count(t: type, field: str, count_field: str) -> None:
  """Traces show only the first `count_field` entries of struct `t`'s array `field`."""
  ARRAY_COUNTS[(t, field)] = count_field

def _array(items: list[Any], depth: int, used: int | None = None) -> str:
  n = len(items)
  if used is not None:
    shown = items[:max(0, min(used, n))]
    return "[" + ", ".join(describe(x, depth + 1) for x in shown) + f"] ({len(shown)} used of {n})"
  last = n
  while last > 0 and _is_zero(items[last - 1]): last -= 1
  if last < n and n > 8:   # trailing zero entries: the unused part of a fixed-size array
    return "[" + ", ".join(describe(x, depth + 1) for x in items[:min(last, 8)]) + (f", ... {last - 8} more" if last > 8 else "") + \
      f"{', ' if last else ''}{n - last} zero entries]"
  if n > 8: return f"[{', '.join(describe(x, depth + 1) for x in items[:8])}, ... {n} items]"
  return "[" + ", ".join(describe(x, depth + 1) for x in items) + "]"

def _is_zero(x: Any) -> bool:
  if isinstance(x, (ctypes.Structure, ctypes.Union, ctypes.Array)): return not any(bytes(x))
  return not x

def _read_memory(addr: int, n: int) -> bytes | None:
  """`n` bytes of this process's memory at `addr`, or None where they are not mapped: read through /proc/self/mem, so
  following a bad pointer (a wrong call under test, a driver bug) gives None instead of a segmentation fault."""
  try:
    with open("/proc/self/mem", "rb", buffering=0) as f:
      f.seek(addr)
      data = f.read(n)
    return data if len(data) == n else None
  except (OSError, ValueError, OverflowError): return None

def describe(obj: Any, depth: int = 0) -> str:
  """A ctypes struct/union/array in words: name=value pairs, nested; fields registered with register_field_words in
  words, registered pointers followed into what they point at, arrays cut to their used length (register_array_count)
  or their trailing zero entries."""
  if isinstance(obj, (ctypes.Structure, ctypes.Union)):
    parts = []
    for f in obj._fields_:
      name = f[0]
      v = getattr(obj, name)
      key = (type(obj), name)
      if key in ARRAY_COUNTS and isinstance(v, ctypes.Array): text = _array(list(v), depth, int(getattr(obj, ARRAY_COUNTS[key])))
      else: text = describe(v, depth + 1)
      if key in FIELD_WORDS and isinstance(v, int): text += f" ({FIELD_WORDS[key](v)})"
      if key in POINTERS and isinstance(v, int) and v and depth < 4:
        try: target = POINTERS[key](obj)
        except Exception: target = None
        if target is not None:
          data = _read_memory(v, ctypes.sizeof(target))
          text += f" -> {type_name(target)} " + (describe(target.from_buffer_copy(data), depth + 1) if data is not None else "(unreadable)")
      parts.append(f"{name}={text}")
    return "{" + ", ".join(parts) + "}"
  if isinstance(obj, ctypes.Array): return _array(list(obj), depth)
  if isinstance(obj, int): return hex(obj) if obj > 9 or obj < -9 else str(obj)
  if isinstance(obj, bytes): return repr(obj[:32])
  return repr(obj)

def type_name(t: Any) -> str:
  """A ctypes type's name as a trace shows it (`struct_x` -> `x`, arrays as `x[n]`)."""
  if isinstance(t, type) and issubclass(t, ctypes.Array): return f"{type_name(t._type_)}[{t._length_}]"
  n = getattr(t, "__name__", str(t))
  return n[len("struct_"):] if n.startswith("struct_") else n

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
    if profile.ON: profile.instant("doorbell", "hcq", addr=hex(addr), value=hex(value))
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
    if profile.ON: profile.instant("doorbell", "hcq", addr=hex(addr), value=hex(value))
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
    self._doorbells: dict[int, Callable[[int], str]] = {}
  def watch_doorbell(self, addr: int, describe: Callable[[int], str] | None) -> None:
    """After each doorbell write to `addr`, trace `describe(value)`: the driver's words for what that write submitted
    (the GPFIFO entries or packets written since the last ring of it, decoded). None stops watching."""
    if describe is None: self._doorbells.pop(addr, None)
    else: self._doorbells[addr] = describe
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
    what = ""
    if (d := self._doorbells.get(addr)) is not None:
      try: what = d(value)
      except Exception as e: what = f"(cannot decode what it submitted: {type(e).__name__}: {e})"
    self.out(f"doorbell{'64' if nbytes == 8 else ''} {addr:#x} <- {value:#x}" + ("\n" + what if what else ""))
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
