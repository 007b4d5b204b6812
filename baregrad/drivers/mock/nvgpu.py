"""MockNVGPU: the kernel interface of NVIDIA's driver (RM escapes on /dev/nvidiactl and /dev/nvidiaN, UVM ioctls on
/dev/nvidia-uvm, mmaps, the usermode doorbell, the kernel log on /dev/kmsg) and GPUs of one generation behind it
(GPFIFO channels, host semaphores, the DMA copy engine, the compute class up to the QMD launch). MOCKGPU_ARCH picks the
generation (sm_80, sm_86, sm_89: Ampere/Ada classes and QMD v03; sm_90: Hopper, QMD v04, the default; sm_100, sm_120:
Blackwell, QMD v05): RM reports its MC architecture, SM version and classlist, accepts only its classes
(NV_ERR_INVALID_CLASS otherwise), and the compute engine decodes the QMD version of its class. MOCKGPU_COUNT=n lists n GPUs.

A conformance model, not a friend: it refuses what the real kernel driver and GPU refuse, with the codes they give,
each check beside the source it comes from (a file and function of NVIDIA's open kernel modules 580.x, or a finding of
../shared/hw/h100-580.159.04). Among them: system memory mapped only through /dev/nvidiactl (finding 1), GR channels
scheduled only once UVM_REGISTER_CHANNEL bound them (finding 2), a Hopper/Blackwell shared window that is not 4 GiB
aligned refused with Xid 69 (finding 3), instruction prefetch past a program's allocation faulting with Xid 31
(finding 4), %ntid/%nctaid and the other launch values read from constant bank 0 where the SASS reads them (finding 5),
a QMD launched again while in flight taking the channel down with Xid 109 (finding 6a), and launches that no
wait-for-idle separates running concurrently (finding 6b): they are interleaved instruction by instruction, the latest
first, and the mock reports read-after-write hazards between them (`hazards`). The GPU runs what a doorbell announces
at the next doorbell (or kick), not before the host goes on, so memory a queued launch reads that the host rewrites
is reported (`violations`) and read as rewritten, as on the GPU.

The mock knows only what the real kernel driver and GPU would: ioctl parameter blocks read from the addresses passed,
GPU virtual addresses resolved through the VA space UVM was told about, pushbuffers read from memory when a doorbell
rings. Memory objects are memfds, so the driver's CPU mapping (an mmap of the device fd, anywhere it asks, MAP_FIXED
included) and the mock's own view share the same pages, as the GPU and CPU would. It runs PTX (found before the code
in the program image; it cannot run SASS).

Channel errors are reported the way RM reports them: status 0xffff and the Xid in the error notifier (hObjectError) of
every channel of the group, and an Xid line in the kernel log (`kmsg`, served on /dev/kmsg) in RM's format:
  NVRM: Xid (PCI:0000:01:00): 69, name=python3, Class Error: channel 0x00000001, Class 0000cbc0, Offset 000002a4, Data fe000000, ErrorCode 00000004
`log` is the mock's own record of what it refused and why."""
from __future__ import annotations
import bisect, ctypes, errno, os, struct, threading, time
from dataclasses import dataclass, field
from typing import Any
from baregrad.ctypes_autogen import _support
from baregrad.ctypes_autogen.nv import nv_580 as nv
from baregrad.drivers.nv import hw

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype, _libc.mmap.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.restype, _libc.munmap.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value
PROT_RW, MAP_SHARED, MAP_FIXED = 3, 0x01, 0x10
PAGE = 4096

def _rup(x: int, a: int) -> int: return (x + a - 1) // a * a

def _mmap(addr: int, size: int, prot: int, flags: int, fd: int, off: int) -> int:
  r = _libc.mmap(addr or None, size, prot, flags, fd, off)
  if r in (None, _MAP_FAILED):
    e = ctypes.get_errno()
    raise OSError(e, f"mmap({addr:#x}, {size:#x}, fd={fd}) failed: {os.strerror(e)}")
  return r

from baregrad.drivers.nv.hw import nv_ioctl_nvos33_parameters_with_fd, nv_ioctl_nvos02_parameters_with_fd, NVNotification

def _comm() -> str:
  """The process name RM puts in Xid lines (name=...)."""
  try:
    with open("/proc/self/comm") as f: return f.read().strip()
  except OSError: return "python3"

class MMUFault(ValueError):
  """A GPU access to an unmapped virtual address (`address`: the first one)."""
  def __init__(self, address: int, msg: str, access: str = "ACCESS_TYPE_VIRT_READ") -> None:
    super().__init__(msg or f"MMU fault at {address:#x}")
    self.address, self.access = address, access

class GPUError(Exception):
  """A channel error: the Xid, the rest of the kernel-log line RM prints after "name=...", and the mock's own why."""
  def __init__(self, xid: int, detail: str, why: str) -> None:
    super().__init__(f"Xid {xid}: {why}")
    self.xid, self.detail, self.why = xid, detail, why

@dataclass
class Work:
  """Engine work in flight on a channel: a grid launch or a copy, until the channel waits for idle."""
  kind: str
  what: str
  qmd: int = 0
  run: Any = None
  copy: tuple[int, int, int] | None = None
  sem: tuple[int, int, int] | None = None
  release: tuple[int, int, int] | None = None
  access: set = field(default_factory=set)   # {(allocation va, "r" | "w")} while running concurrently

def g(ch: Any, subc: int, method: int) -> int: return ch.regs.get((subc, method), 0)

# ---------------------------------------------------------------- RM objects
@dataclass
class RMObject:
  handle: int
  cls: int
  parent: int | None
  children: list[int] = field(default_factory=list)
  data: Any = None

class Memory:
  """A memory object: a memfd (its pages are the object's "physical" memory) and the mock's own mapping of it."""
  def __init__(self, size: int, kind: str) -> None:
    self.size, self.kind, self.gpu = size, kind, 0
    self.fd = os.memfd_create(f"mocknv-{kind}", os.MFD_CLOEXEC)
    os.ftruncate(self.fd, max(size, PAGE))
    self.view = _mmap(0, max(size, PAGE), PROT_RW, MAP_SHARED, self.fd, 0)
  def release(self) -> None:
    if self.fd >= 0:
      _libc.munmap(self.view, max(self.size, PAGE))
      os.close(self.fd)
      self.fd = -1

@dataclass
class Channel:
  obj: RMObject
  group: int
  token: int
  ring_va: int
  entries: int
  userd: int              # host address (the mock's view) of USERD
  error_notifier: int | None
  gp_get: int = 0
  subc_class: dict[int, int] = field(default_factory=dict)
  regs: dict[tuple[int, int], int] = field(default_factory=dict)
  cur: tuple[int, int, list] | None = None   # (GPFIFO index, pushbuffer address, decoded methods) being executed
  pos: int = 0                                # next method in cur
  blocked: str | None = None
  fault: str | None = None
  methods_done: int = 0
  client: int = 0
  vaspace: Any = None          # the VA space's data ({"flags": ...}) through the channel's context share
  bound: bool = False          # UVM_REGISTER_CHANNEL bound its buffers (RM's bIsContextBound)
  visible_put: int = 0         # GP_PUT as of the last doorbell: what the channel may run
  inflight: list = field(default_factory=list)     # Work launched since the last wait-for-idle
  snapshots: dict = field(default_factory=dict)    # (GPFIFO index, QMD) -> QMD + constant bank bytes at the doorbell

# class -> (parent classes allowed, parameter struct or None, parameters required): the classes one GPU generation offers
def _class_table(arch: hw.GPUArch) -> dict[int, tuple[tuple[int, ...], type | None, bool]]:
  dev, sub, grp, ch = (nv.NV01_DEVICE_0,), (nv.NV20_SUBDEVICE_0,), (nv.KEPLER_CHANNEL_GROUP_A,), (arch.gpfifo,)
  t: dict[int, tuple[tuple[int, ...], type | None, bool]] = {
    nv.NV01_DEVICE_0: ((nv.NV01_ROOT_CLIENT,), nv.NV0080_ALLOC_PARAMETERS, False),
    nv.NV20_SUBDEVICE_0: (dev, nv.NV2080_ALLOC_PARAMETERS, False),
    nv.FERMI_VASPACE_A: (dev + sub, nv.NV_VASPACE_ALLOCATION_PARAMETERS, False),
    nv.KEPLER_CHANNEL_GROUP_A: (dev + sub, nv.NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS, True),
    hw.FERMI_CONTEXT_SHARE_A: (grp, nv.NV_CTXSHARE_ALLOCATION_PARAMETERS, True),
    arch.gpfifo: (grp, nv.NV_CHANNEL_ALLOC_PARAMS, True),
    arch.compute: (ch, None, False),
    arch.dma: (ch, None, False),
    nv.NV01_MEMORY_SYSTEM: (dev + sub, nv.NV_MEMORY_ALLOCATION_PARAMS, True),
    nv.NV01_MEMORY_LOCAL_USER: (dev + sub, nv.NV_MEMORY_ALLOCATION_PARAMS, True),
  }
  for um in arch.usermode: t[um] = (sub, nv.NV_HOPPER_USERMODE_A_PARAMS if um == hw.HOPPER_USERMODE_A else None, False)
  return t

def arch_from_env(arch: str | None = None) -> hw.GPUArch:
  """The generation MOCKGPU_ARCH (or `arch`) names; sm_90 by default; anything else is refused by name."""
  name = arch if arch is not None else os.environ.get("MOCKGPU_ARCH", "") or "sm_90"
  a = hw.ARCHS.get(name.strip().lower())
  if a is None: raise ValueError(f"MOCKGPU_ARCH={name!r}: the mock NVIDIA GPU emulates {', '.join(hw.ARCHS)}, not {name!r}")
  return a

class RMStatus(Exception):
  def __init__(self, status: int, why: str = "") -> None:
    super().__init__(f"{hw.status_name(status)}: {why}")
    self.status = status

class MockNVGPU:
  """NVIDIA GPUs of one generation behind a mock NVIDIA kernel driver: `arch` (MOCKGPU_ARCH: sm_80, sm_86, sm_89,
  sm_90, sm_100, sm_120; default sm_90) picks what RM reports (MC architecture, SM version, classlist) and which
  classes it accepts; `count` (MOCKGPU_COUNT, default 1) how many GPUs NV_ESC_CARD_INFO lists. GPU i answers at
  /dev/nvidia<i> and to NV01_DEVICE_0 deviceId i, with its own UUID and PCI bus. The driver opens each GPU through
  its own port (its own mock instance), so every GPU's memory, page tables and channels are its own."""
  def __init__(self, driver_version: str = "580.95.05", vram_bytes: int = 80 << 30, sysmem_bytes: int = 64 << 30,
               gpcs: int = 8, tpc_per_gpc: int = 9, sm_per_tpc: int = 2, uuid: bytes = bytes(range(0x10, 0x20)),
               arch: str | None = None, count: int | None = None) -> None:
    self.driver_version, self.vram_bytes, self.sysmem_bytes, self.uuid = driver_version, vram_bytes, sysmem_bytes, uuid
    self.gpcs, self.tpc_per_gpc, self.sm_per_tpc = gpcs, tpc_per_gpc, sm_per_tpc
    self.arch_info = arch_from_env(arch)
    self.arch = self.arch_info.sm
    if count is None:
      env = os.environ.get("MOCKGPU_COUNT", "") or "1"
      if not env.isdigit() or not 1 <= int(env) <= 32: raise ValueError(f"MOCKGPU_COUNT={env!r}: 1 to 32 GPUs")
      count = int(env)
    if not 1 <= count <= 32: raise ValueError(f"count={count}: 1 to 32 GPUs")
    self.count = count
    # GPU i: the same UUID with i added to its last byte, PCI bus i + 1, /dev/nvidia<i>
    self.uuids = [uuid[:-1] + bytes([(uuid[-1] + i) & 0xFF]) for i in range(count)]
    self.registered_gpus: set[bytes] = set()
    self.registered_vaspaces: dict[bytes, Any] = {}   # GPU uuid -> the VA space UVM_REGISTER_GPU_VASPACE gave it
    self.vram_used = self.sysmem_used = 0
    self.classes = _class_table(self.arch_info)
    self.classlist = [nv.NV01_ROOT_CLIENT] + sorted(self.classes)
    self.files: dict[int, dict[str, Any]] = {}
    self.clients: dict[int, dict[int, RMObject]] = {}
    self.channels: dict[int, Channel] = {}       # work-submit token -> channel
    self.scheduled_groups: set[tuple[int, int]] = set()
    self.va_map: list[tuple[int, int, Memory, int]] = []   # sorted (va, length, memory, offset): the GPU page tables
    self.uvm_ranges: dict[int, int] = {}                     # external range base -> length
    self.maps: dict[int, tuple[int, Any]] = {}               # host mmaps the mock made: addr -> (length, memory or None)
    self.log: list[str] = []
    self.kmsg: list[tuple[int, str]] = []   # the kernel log (dmesg): (microseconds, line)
    self.kmsg_readable = True                # False: /dev/kmsg refuses us, as under kernel.dmesg_restrict=1
    self.uvm_channels: dict[tuple[int, int], dict] = {}   # UVM_REGISTER_CHANNEL'ed (client, channel) -> its VA ranges
    self.process_name = _comm()
    self.launches: list[dict[str, int]] = []
    self.hazards: list[str] = []      # launches/copies that ran concurrently and touched the same memory
    self.violations: list[str] = []   # memory of a queued launch rewritten by the host
    self._next_fd, self._next_client, self._next_handle, self._next_token = 1000, 0xc1d00000, 0xcaf00000, 1
    self._lock = threading.RLock()
    self.uvm_registered = False
    self._ptx_cache: dict[str, Any] = {}
    self._ptx_mem: tuple[Any, Any] | None = None

  # ---------------------------------------------------------------- files
  def open(self, path: str, flags: int) -> int:
    with self._lock:
      gpu = None
      if path == "/dev/nvidiactl": kind = "ctl"
      elif path == "/dev/nvidia-uvm": kind = "uvm"
      elif path.startswith("/dev/nvidia") and path[11:].isdigit() and int(path[11:]) < self.count: kind, gpu = "dev", int(path[11:])
      elif path == "/dev/kmsg":
        if not self.kmsg_readable: raise PermissionError(errno.EPERM, "open /dev/kmsg failed: EPERM (Operation not permitted)", path)
        kind = "kmsg"
      else: raise FileNotFoundError(errno.ENOENT, f"open {path} failed: ENOENT (No such file or directory)", path)
      fd, self._next_fd = self._next_fd, self._next_fd + 1
      self.files[fd] = {"path": path, "kind": kind, "gpu": gpu, "map": None, "uvm_init": False, "uvm_flags": 0, "ctl": None, "pos": 0}
      return fd

  def close(self, fd: int) -> None:
    with self._lock: self.files.pop(fd, None)

  # /dev/kmsg: one record per read, "prio,seq,usec,flags;text\n"; EAGAIN at the end (the driver opens it O_NONBLOCK)
  def read(self, fd: int, n: int) -> bytes:
    with self._lock:
      f = self.files.get(fd)
      if f is None: raise OSError(errno.EBADF, f"read: bad fd {fd}")
      if f["kind"] != "kmsg": return b""
      if f["pos"] >= len(self.kmsg): raise BlockingIOError(errno.EAGAIN, "read /dev/kmsg: EAGAIN")
      t, text = self.kmsg[f["pos"]]
      f["pos"] += 1
      rec = f"3,{f['pos'] - 1},{t},-;{text}\n".encode()
      if len(rec) > n: raise OSError(errno.EINVAL, "read /dev/kmsg: buffer smaller than the record")
      return rec

  def lseek(self, fd: int, off: int, whence: int) -> int:
    with self._lock:
      f = self.files.get(fd)
      if f is None: raise OSError(errno.EBADF, f"lseek: bad fd {fd}")
      if f["kind"] == "kmsg" and whence == os.SEEK_END: f["pos"] = len(self.kmsg)
      elif f["kind"] == "kmsg" and whence == os.SEEK_SET and off == 0: f["pos"] = 0
      else: raise OSError(errno.ESPIPE, f"lseek on {f['path']}: ESPIPE")
      return 0

  def _klog(self, text: str) -> None:
    """A line in the kernel log (what dmesg would show); also in `log`, the mock's own record of what it refused."""
    self.kmsg.append((int(time.monotonic() * 1e6), text))
    self.log.append(text)

  # ---------------------------------------------------------------- ioctl entry
  def ioctl(self, fd: int, request: int, argp: int, argsize: int) -> int:
    with self._lock:
      f = self.files.get(fd)
      if f is None: return -errno.EBADF
      if f["kind"] == "uvm": return self._uvm(f, request, argp, argsize)
      if (request >> 8) & 0xFF != nv.NV_IOCTL_MAGIC: return -errno.ENOTTY
      nr, size = request & 0xFF, (request >> 16) & 0x3FFF
      h = self._escapes.get(nr)
      if h is None: return -errno.EINVAL
      argtypes, ctl_only, fn = h
      # escape.c RmIoctl: each escape checks dataSize == sizeof(its parameters) -> NV_ERR_INVALID_ARGUMENT, which
      # nv.c nvidia_ioctl returns as -EINVAL
      if size not in [ctypes.sizeof(t) for t in argtypes] and not (nr == nv.NV_ESC_CARD_INFO and size % ctypes.sizeof(nv.nv_ioctl_card_info_t) == 0):
        self.log.append(f"nvidia: ioctl {nr:#x} with a {size}-byte argument; expected {[ctypes.sizeof(t) for t in argtypes]}")
        return -errno.EINVAL
      # escape.c NV_CTL_DEVICE_ONLY: RM_ALLOC/FREE/CONTROL/MAP_MEMORY/... only on /dev/nvidiactl -> -EINVAL
      if ctl_only and f["kind"] != "ctl": return -errno.EINVAL
      return fn(self, f, argp, size)

  def _esc_card_info(self, f: dict, argp: int, size: int) -> int:
    n = size // ctypes.sizeof(nv.nv_ioctl_card_info_t)
    cards = (nv.nv_ioctl_card_info_t * n).from_address(argp)
    ctypes.memset(argp, 0, size)
    for i in range(min(n, self.count)):  # gpu_id is the PCI location (bus << 8), as RM builds it
      cards[i].valid, cards[i].gpu_id, cards[i].minor_number = 1, (i + 1) << 8, i
      cards[i].pci_info.vendor_id, cards[i].pci_info.device_id, cards[i].pci_info.bus = 0x10de, self.arch_info.device_id, i + 1
      cards[i].fb_size = self.vram_bytes
    return 0

  def _esc_version(self, f: dict, argp: int, size: int) -> int:
    p = nv.nv_ioctl_rm_api_version_t.from_address(argp)
    mine = self.driver_version.encode()
    if p.cmd == nv.NV_RM_API_VERSION_CMD_QUERY:
      ctypes.memmove(ctypes.addressof(p) + type(p).versionString.offset, mine + b"\0", len(mine) + 1)
      p.reply = nv.NV_RM_API_VERSION_REPLY_RECOGNIZED
      return 0
    theirs = bytes(p.versionString).split(b"\0")[0]
    if p.cmd == nv.NV_RM_API_VERSION_CMD_STRICT and theirs != mine:
      p.reply = nv.NV_RM_API_VERSION_REPLY_UNRECOGNIZED
      ctypes.memmove(ctypes.addressof(p) + type(p).versionString.offset, mine + b"\0", len(mine) + 1)
      return -errno.EINVAL
    p.reply = nv.NV_RM_API_VERSION_REPLY_RECOGNIZED
    return 0

  def _esc_register_fd(self, f: dict, argp: int, size: int) -> int:
    # escape.c RmIoctl NV_ESC_REGISTER_FD (a failed status returns -EINVAL from nvidia_ioctl): an fd registers one
    # control fd once (ctl_nvfp != NULL -> NV_ERR_INVALID_STATE); ctl_fd must be a /dev/nvidiactl fd
    # (nv_get_file_private(fd, NV_TRUE)), not the fd itself nor one that has a link of its own
    ctl = nv.nv_ioctl_register_fd_t.from_address(argp).ctl_fd
    target = self.files.get(ctl)
    if f["ctl"] is not None or target is None or target["kind"] != "ctl" or target is f or target["ctl"] is not None: return -errno.EINVAL
    f["ctl"] = ctl
    return 0

  def _rm(self, p: Any, fn: Any) -> int:
    """Run an RM call: errors land in the parameters' status field; the ioctl itself succeeds."""
    try:
      fn()
      p.status = nv.NV_OK
    except RMStatus as e:
      p.status = e.status
      self.log.append(f"NVRM: {e}")
    return 0

  def _esc_alloc(self, f: dict, argp: int, size: int) -> int:
    p = (nv.NVOS64_PARAMETERS if size == ctypes.sizeof(nv.NVOS64_PARAMETERS) else nv.NVOS21_PARAMETERS).from_address(argp)
    return self._rm(p, lambda: self._alloc(p))

  def _esc_free(self, f: dict, argp: int, size: int) -> int:
    p = nv.NVOS00_PARAMETERS.from_address(argp)
    return self._rm(p, lambda: self._free(p.hRoot, p.hObjectParent, p.hObjectOld))

  def _esc_control(self, f: dict, argp: int, size: int) -> int:
    p = nv.NVOS54_PARAMETERS.from_address(argp)
    return self._rm(p, lambda: self._control(p))

  def _esc_map_memory(self, f: dict, argp: int, size: int) -> int:
    w = nv_ioctl_nvos33_parameters_with_fd.from_address(argp)
    p = w.params
    def go() -> None:
      obj = self._get(p.hClient, p.hMemory)
      # RmCreateMmapContextLocked (osapi.c): hDevice is a device, else a subdevice (subdeviceGetByHandle)
      self._get(p.hClient, p.hDevice, (nv.NV01_DEVICE_0, nv.NV20_SUBDEVICE_0))
      if not isinstance(obj.data, Memory): raise RMStatus(nv.NV_ERR_INVALID_OBJECT, f"object {p.hMemory:#x} ({hw.class_name(obj.cls)}) is not mappable memory")
      if p.offset + p.length > obj.data.size or p.length == 0:
        raise RMStatus(nv.NV_ERR_INVALID_LIMIT, f"map of {p.length:#x} bytes at {p.offset:#x} exceeds the object's {obj.data.size:#x} bytes")
      target = self.files.get(w.fd)
      # finding 1; osapi.c RmCreateMmapContextLocked: a mapping in none of the GPU's BARs (system memory) is validated
      # against the control device (pNv = nv_get_ctl_state()); nv-usermap.c nv_add_mapping_context_to_file then takes
      # the fd with nv_get_file_private(fd, NV_IS_CTL_DEVICE(nv)): system memory needs a /dev/nvidiactl fd, a BAR
      # aperture an fd of that GPU's /dev/nvidiaN (NV_STATE_PTR(nvlfp->nvptr) != nv); otherwise NV_ERR_INVALID_ARGUMENT
      want = "ctl" if obj.data.kind == "sys" else "dev"
      if target is None or target["kind"] != want or (want == "dev" and target["gpu"] != obj.data.gpu):
        what = "system memory is mapped through /dev/nvidiactl" if want == "ctl" else f"a BAR aperture of GPU {obj.data.gpu} through /dev/nvidia{obj.data.gpu}"
        raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, f"RM_MAP_MEMORY of {hw.class_name(obj.cls)} {p.hMemory:#x} names fd {w.fd} "
                       f"({target['path'] if target else 'not open'}): {what}")
      # nv_add_mapping_context_to_file: one mapping context per fd (nvamc->valid)
      if target["map"] is not None: raise RMStatus(nv.NV_ERR_STATE_IN_USE, f"fd {w.fd} already holds a mapping context")
      target["map"] = (obj.data, p.offset, p.length)
      p.pLinearAddress = p.offset
    return self._rm(p, go)

  def _esc_unmap_memory(self, f: dict, argp: int, size: int) -> int:
    p = nv.NVOS34_PARAMETERS.from_address(argp)
    return self._rm(p, lambda: self._get(p.hClient, p.hMemory))

  _escapes: dict[int, tuple[tuple[type, ...], bool, Any]] = {
    nv.NV_ESC_CARD_INFO: ((nv.nv_ioctl_card_info_t,), True, _esc_card_info),
    nv.NV_ESC_CHECK_VERSION_STR: ((nv.nv_ioctl_rm_api_version_t,), False, _esc_version),
    nv.NV_ESC_REGISTER_FD: ((nv.nv_ioctl_register_fd_t,), False, _esc_register_fd),
    nv.NV_ESC_RM_ALLOC: ((nv.NVOS21_PARAMETERS, nv.NVOS64_PARAMETERS), True, _esc_alloc),
    nv.NV_ESC_RM_FREE: ((nv.NVOS00_PARAMETERS,), True, _esc_free),
    nv.NV_ESC_RM_CONTROL: ((nv.NVOS54_PARAMETERS,), True, _esc_control),
    nv.NV_ESC_RM_MAP_MEMORY: ((nv_ioctl_nvos33_parameters_with_fd,), True, _esc_map_memory),
    nv.NV_ESC_RM_UNMAP_MEMORY: ((nv.NVOS34_PARAMETERS,), True, _esc_unmap_memory),
  }

  # ---------------------------------------------------------------- RM object tree
  def _get(self, hclient: int, h: int, cls: int | tuple[int, ...] | None = None) -> RMObject:
    # resserv rs_client.c / rs_server.c lookups: an unknown client NV_ERR_INVALID_CLIENT, an unknown handle
    # NV_ERR_INVALID_OBJECT_HANDLE, an object of another class NV_ERR_INVALID_OBJECT
    objs = self.clients.get(hclient)
    if objs is None: raise RMStatus(nv.NV_ERR_INVALID_CLIENT, f"no client {hclient:#x}")
    o = objs.get(h)
    if o is None: raise RMStatus(nv.NV_ERR_INVALID_OBJECT_HANDLE, f"client {hclient:#x} has no object {h:#x}")
    if cls is not None and o.cls not in ((cls,) if isinstance(cls, int) else cls):
      raise RMStatus(nv.NV_ERR_INVALID_OBJECT, f"object {h:#x} is a {hw.class_name(o.cls)}")
    return o

  def _alloc(self, p: Any) -> None:
    cls = p.hClass
    if cls == nv.NV01_ROOT_CLIENT or cls in (nv.NV01_ROOT, nv.NV01_ROOT_NON_PRIV):
      h = p.hObjectNew or self._next_client
      if h in self.clients: raise RMStatus(nv.NV_ERR_INSERT_DUPLICATE_NAME, f"client {h:#x} exists")
      if h == self._next_client: self._next_client += 1
      self.clients[h] = {h: RMObject(h, nv.NV01_ROOT_CLIENT, None)}
      p.hObjectNew = h
      return
    # rmapi/alloc_free.c: a class this GPU's engines do not register -> NV_ERR_INVALID_CLASS; resserv
    # rs_server.c serverAllocResourceUnderLock: the parent must exist and be a class the new one may live under
    # (NV_ERR_INVALID_OBJECT_PARENT), the handle must be free (NV_ERR_INSERT_DUPLICATE_NAME)
    if cls not in self.classes:
      raise RMStatus(nv.NV_ERR_INVALID_CLASS, f"class {hw.class_name(cls)} ({cls:#x}) is not supported by this GPU "
                     f"({self.arch_info.name}, {self.arch})")
    objs = self.clients.get(p.hRoot)
    if objs is None: raise RMStatus(nv.NV_ERR_INVALID_CLIENT, f"no client {p.hRoot:#x}")
    parent = objs.get(p.hObjectParent)
    allowed, ptype, required = self.classes[cls]
    if parent is None: raise RMStatus(nv.NV_ERR_INVALID_OBJECT_PARENT, f"parent {p.hObjectParent:#x} does not exist")
    if parent.cls not in allowed:
      raise RMStatus(nv.NV_ERR_INVALID_OBJECT_PARENT, f"a {hw.class_name(cls)} cannot be a child of a {hw.class_name(parent.cls)} "
                     f"(parent must be {' or '.join(hw.class_name(c) for c in allowed)})")
    params = None
    if p.pAllocParms:
      if ptype is not None and p.paramsSize not in (0, ctypes.sizeof(ptype)):
        raise RMStatus(nv.NV_ERR_INVALID_PARAM_STRUCT, f"{hw.class_name(cls)} parameters are {ctypes.sizeof(ptype)} bytes, got {p.paramsSize}")
      if ptype is not None: params = ptype.from_address(p.pAllocParms)
    elif required: raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, f"{hw.class_name(cls)} needs allocation parameters")
    h = p.hObjectNew
    if h == 0: h, self._next_handle = self._next_handle, self._next_handle + 1
    if h in objs: raise RMStatus(nv.NV_ERR_INSERT_DUPLICATE_NAME, f"handle {h:#x} is in use")
    o = RMObject(h, cls, parent.handle)
    o.data = self._construct(p.hRoot, o, parent, params)
    objs[h] = o
    parent.children.append(h)
    p.hObjectNew = h

  def _construct(self, hclient: int, o: RMObject, parent: RMObject, params: Any) -> Any:
    """The per-class constructors' checks. Where a check is the mock's own (RM would misbehave quietly rather than
    refuse), it says so."""
    cls = o.cls
    if cls in (nv.NV01_MEMORY_SYSTEM, nv.NV01_MEMORY_LOCAL_USER):
      size = params.size
      # mem_mgr/system_mem.c sysmemConstruct / video_mem.c vidmemConstruct (via heap alloc): size 0 -> NV_ERR_INVALID_ARGUMENT;
      # more than is free -> NV_ERR_NO_MEMORY
      if size == 0: raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, "memory of size 0")
      size = (size + PAGE - 1) // PAGE * PAGE
      vid = cls == nv.NV01_MEMORY_LOCAL_USER
      used, cap = (self.vram_used, self.vram_bytes) if vid else (self.sysmem_used, self.sysmem_bytes)
      if used + size > cap:
        raise RMStatus(nv.NV_ERR_NO_MEMORY, f"{'video' if vid else 'system'} memory: {size:#x} bytes requested, {cap - used:#x} free")
      m = Memory(size, "vid" if vid else "sys")
      m.gpu = parent.data["gpu"] if isinstance(parent.data, dict) else 0   # the GPU whose device object owns it
      if vid: self.vram_used += size
      else: self.sysmem_used += size
      params.size, params.limit = size, size - 1
      return m
    if cls in self.arch_info.usermode:
      m = Memory(hw.USERMODE_SIZE, "usermode")
      m.gpu = parent.data["gpu"]
      return m
    if cls == nv.FERMI_VASPACE_A: return {"flags": params.flags if params is not None else 0}
    if cls == nv.NV01_DEVICE_0:
      if params is not None and params.deviceId >= self.count:
        raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, f"deviceId {params.deviceId}: this system has {self.count} GPU(s)")
      return {"gpu": params.deviceId if params is not None else 0}
    if cls == nv.NV20_SUBDEVICE_0: return {"gpu": parent.data["gpu"]}
    if cls == self.arch_info.gpfifo:
      # mock: the GPFIFO ring wraps with a power-of-two mask; RM passes gpFifoEntries on to the hardware unchecked
      if params.gpFifoEntries == 0 or params.gpFifoEntries & (params.gpFifoEntries - 1):
        raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, f"gpFifoEntries={params.gpFifoEntries} must be a power of two")
      if params.hContextShare:
        cs = self._get(hclient, params.hContextShare, hw.FERMI_CONTEXT_SHARE_A)
        if cs.parent != parent.handle: raise RMStatus(nv.NV_ERR_INVALID_OBJECT_PARENT, "context share belongs to another channel group")
      # arch/volta/kernel_channel_gv100.c kchannelCreateUserdMemDesc_GV100: hUserdMemory must be a memory object
      # (NV_ERR_OBJECT_NOT_FOUND); RM shifts the USERD address right by its alignment (512 bytes), so a misaligned
      # offset would put USERD elsewhere: the mock refuses it
      try: um = self._get(hclient, params.hUserdMemory[0], (nv.NV01_MEMORY_SYSTEM, nv.NV01_MEMORY_LOCAL_USER))
      except RMStatus as e: raise RMStatus(nv.NV_ERR_OBJECT_NOT_FOUND, str(e)) from None
      if params.userdOffset[0] + 0x200 > um.data.size or params.userdOffset[0] % 0x200:
        raise RMStatus(nv.NV_ERR_INVALID_OFFSET, f"USERD offset {params.userdOffset[0]:#x} (must be 512-byte aligned, inside the memory)")
      notifier = None
      if params.hObjectError:
        en = self._get(hclient, params.hObjectError, (nv.NV01_MEMORY_SYSTEM, nv.NV01_MEMORY_LOCAL_USER))
        notifier = en.data.view
      token, self._next_token = self._next_token, self._next_token + 1
      ch = Channel(o, parent.handle, token, params.gpFifoOffset, params.gpFifoEntries, um.data.view + params.userdOffset[0], notifier)
      ch.client = hclient
      if params.hContextShare: ch.vaspace = self.clients[hclient][params.hContextShare].data  # the context share's VA space
      ctypes.memset(ch.userd, 0, 0x200)
      self.channels[token] = ch
      return ch
    if cls == nv.KEPLER_CHANNEL_GROUP_A:
      # kernel_channel_group_api.c kchangrpapiConstruct_IMPL: an engine type without a runlist -> NV_ERR_INVALID_ARGUMENT
      if params.engineType not in (hw.NV2080_ENGINE_TYPE_GRAPHICS, hw.NV2080_ENGINE_TYPE_COPY0):
        raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, f"engineType {params.engineType} has no runlist on this GPU")
    if cls == hw.FERMI_CONTEXT_SHARE_A:
      return self._get(hclient, params.hVASpace, nv.FERMI_VASPACE_A).data if params.hVASpace else {"flags": 0}
    if cls in (self.arch_info.compute, self.arch_info.dma):
      # channel_descendant.c (engine objects on a channel): one object of a class per channel -> NV_ERR_INVALID_STATE
      if any(self.clients[hclient][c].cls == cls for c in parent.children):
        raise RMStatus(nv.NV_ERR_INVALID_STATE, f"channel {parent.handle:#x} already has a {hw.class_name(cls)} object")
    return None

  def _free(self, hclient: int, hparent: int, h: int) -> None:
    objs = self.clients.get(hclient)
    if objs is None: raise RMStatus(nv.NV_ERR_INVALID_CLIENT, f"no client {hclient:#x}")
    if h == hclient:
      for c in list(objs[h].children): self._free_tree(objs, c)
      del self.clients[hclient]
      return
    o = objs.get(h)
    if o is None: raise RMStatus(nv.NV_ERR_INVALID_OBJECT_HANDLE, f"client {hclient:#x} has no object {h:#x}")
    if hparent and o.parent != hparent: raise RMStatus(nv.NV_ERR_INVALID_OBJECT_PARENT, f"object {h:#x}'s parent is {o.parent:#x}, not {hparent:#x}")
    self._free_tree(objs, h)

  def _free_tree(self, objs: dict[int, RMObject], h: int) -> None:
    o = objs.pop(h)
    for c in list(o.children): self._free_tree(objs, c)
    if o.parent is not None and o.parent in objs: objs[o.parent].children.remove(h)
    if isinstance(o.data, Memory):
      self.va_map = [m for m in self.va_map if m[2] is not o.data]
      if o.data.kind == "vid": self.vram_used -= o.data.size
      elif o.data.kind == "sys": self.sysmem_used -= o.data.size
      o.data.release()
    if isinstance(o.data, Channel):
      self.channels.pop(o.data.token, None)
      self.uvm_channels = {k: v for k, v in self.uvm_channels.items() if v["channel"] is not o.data}
    if o.cls == nv.KEPLER_CHANNEL_GROUP_A: self.scheduled_groups.discard((id(objs), h))

  # ---------------------------------------------------------------- controls
  def _control(self, p: Any) -> None:
    # resserv rs_resource.c resControlLookup_IMPL: a command the object's class does not export -> NV_ERR_NOT_SUPPORTED;
    # paramsSize other than the command's parameter struct -> NV_ERR_INVALID_PARAM_STRUCT
    o = self._get(p.hClient, p.hObject)
    entry = self._controls.get(p.cmd)
    if entry is None: raise RMStatus(nv.NV_ERR_NOT_SUPPORTED, f"control {p.cmd:#x} is not supported")
    classes, ptype, fn = entry
    if o.cls not in classes:
      raise RMStatus(nv.NV_ERR_NOT_SUPPORTED, f"control {p.cmd:#x} is not supported on a {hw.class_name(o.cls)}")
    if p.paramsSize != ctypes.sizeof(ptype) or not p.params:
      raise RMStatus(nv.NV_ERR_INVALID_PARAM_STRUCT, f"control {p.cmd:#x} takes {ctypes.sizeof(ptype)} bytes of parameters, got {p.paramsSize}")
    fn(self, p.hClient, o, ptype.from_address(p.params))

  def _ctl_classlist(self, hc: int, o: RMObject, q: Any) -> None:
    q.numClasses = len(self.classlist)
    for i, c in enumerate(self.classlist): q.classList[i] = c

  def _ctl_arch(self, hc: int, o: RMObject, q: Any) -> None:
    q.architecture, q.implementation, q.revision = self.arch_info.architecture, self.arch_info.implementation, 0xa1

  def _ctl_gr_info(self, hc: int, o: RMObject, q: Any) -> None:
    vals = {nv.NV2080_CTRL_GR_INFO_INDEX_SM_VERSION: self.arch_info.sm_version,
            nv.NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_GPCS: self.gpcs, nv.NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_TPC_PER_GPC: self.tpc_per_gpc,
            nv.NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_SM_PER_TPC: self.sm_per_tpc, nv.NV2080_CTRL_GR_INFO_INDEX_MAX_WARPS_PER_SM: 64,
            nv.NV2080_CTRL_GR_INFO_INDEX_MAX_THREADS_PER_WARP: 32}
    if q.grInfoListSize == 0 or q.grInfoListSize > nv.NV2080_CTRL_GR_INFO_INDEX_MAX + 1 or not q.grInfoList:
      raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, f"grInfoListSize={q.grInfoListSize}")
    lst = (nv.NVXXXX_CTRL_XXX_INFO * q.grInfoListSize).from_address(q.grInfoList)
    for e in lst:
      if e.index > nv.NV2080_CTRL_GR_INFO_INDEX_MAX: raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, f"GR info index {e.index}")
      e.data = vals.get(e.index, 0)

  def _ctl_gid(self, hc: int, o: RMObject, q: Any) -> None:
    uuid = self.uuids[o.data["gpu"]]
    if nv.NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT.decode(q.flags) != nv.NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY:
      text = ("GPU-" + uuid.hex()).encode()
      q.length = len(text) + 1
      ctypes.memmove(ctypes.addressof(q.data), text, len(text))
      return
    q.length = 16
    ctypes.memmove(ctypes.addressof(q.data), uuid, 16)

  def _ctl_token(self, hc: int, o: RMObject, q: Any) -> None: q.workSubmitToken = o.data.token

  def _ctl_schedule(self, hc: int, o: RMObject, q: Any) -> None:
    # finding 2; kernel_channel_group_api.c kchangrpapiCtrlCmdGpFifoSchedule_IMPL checks kchannelIsSchedulable_HAL for
    # every channel of the group: kernel_channel.c kchannelIsSchedulable_IMPL refuses a GR channel of an externally owned
    # VA space whose allocations UVM has not bound (UVM_REGISTER_CHANNEL) -> NV_ERR_INVALID_STATE
    if q.bEnable:
      for ch in self.channels.values():
        if ch.client == hc and ch.group == o.handle and not ch.bound and ch.vaspace is not None \
           and ch.vaspace["flags"] & nv.NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED:
          self._klog(f"NVRM: kchannelIsSchedulable_IMPL: Cannot schedule externally-owned channel 0x{ch.token:08x} with unbound allocations!")
          raise RMStatus(nv.NV_ERR_INVALID_STATE, f"GPFIFO_SCHEDULE: channel {ch.obj.handle:#x} (token {ch.token}) is in an externally owned "
                         "VA space and was not registered with UVM (UVM_REGISTER_CHANNEL)")
    key = (id(self.clients[hc]), o.handle)
    if q.bEnable: self.scheduled_groups.add(key)
    else: self.scheduled_groups.discard(key)
    self._run_all()

  _controls: dict[int, tuple[tuple[int, ...], type, Any]] = {
    nv.NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2: ((nv.NV01_DEVICE_0,), nv.NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS, _ctl_classlist),
    nv.NV2080_CTRL_CMD_MC_GET_ARCH_INFO: ((nv.NV20_SUBDEVICE_0,), nv.NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS, _ctl_arch),
    nv.NV2080_CTRL_CMD_GR_GET_INFO: ((nv.NV20_SUBDEVICE_0,), nv.NV2080_CTRL_GR_GET_INFO_PARAMS, _ctl_gr_info),
    nv.NV2080_CTRL_CMD_GPU_GET_GID_INFO: ((nv.NV20_SUBDEVICE_0,), nv.NV2080_CTRL_GPU_GET_GID_INFO_PARAMS, _ctl_gid),
    nv.NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN: (hw.GPFIFO_CLASSES,
                                                     nv.NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS, _ctl_token),
    nv.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE: ((nv.KEPLER_CHANNEL_GROUP_A,), nv.NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS, _ctl_schedule),
  }

  # ---------------------------------------------------------------- UVM
  def _uvm(self, f: dict, request: int, argp: int, argsize: int) -> int:
    entry = self._uvm_ioctls.get(request)
    if entry is None: return -errno.ENOTTY
    ptype, fn = entry
    if argsize and argsize < ctypes.sizeof(ptype): return -errno.EFAULT
    p = ptype.from_address(argp)
    # uvm_api.h __UVM_ROUTE_CMD_*(..., do_init_check): every ioctl but UVM_INITIALIZE/UVM_MM_INITIALIZE needs an fd
    # that UVM_INITIALIZE made a VA space (uvm_fd_va_space) -> NV_ERR_ILLEGAL_ACTION
    if request != nv.UVM_INITIALIZE and request != nv.UVM_MM_INITIALIZE and f["uvm_init"] is not True:
      p.rmStatus = nv.NV_ERR_ILLEGAL_ACTION
      return 0
    try:
      fn(self, f, p)
      p.rmStatus = nv.NV_OK
    except RMStatus as e:
      p.rmStatus = e.status
      self.log.append(f"nvidia-uvm: {e}")
    return 0

  def _uvm_initialize(self, f: dict, p: Any) -> None:
    # uvm.c uvm_api_initialize: an initialized VA-space fd may be initialized again with the same flags (NV_OK), not
    # with others; an MM fd cannot become a VA space -> NV_ERR_INVALID_ARGUMENT
    if f["uvm_init"] == "mm": raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, "UVM_INITIALIZE on a UVM_MM_INITIALIZE'd fd")
    if f["uvm_init"] is True:
      if p.flags != f["uvm_flags"]: raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, f"UVM_INITIALIZE again with flags {p.flags:#x}, first {f['uvm_flags']:#x}")
      return
    f["uvm_init"], f["uvm_flags"] = True, p.flags

  def _uvm_mm_initialize(self, f: dict, p: Any) -> None:
    # uvm.c uvm_api_mm_initialize: uvmFd must be a VA-space fd (NV_ERR_INVALID_ARGUMENT); this fd becomes its MM fd
    # (uvm_fd_type_init: an fd that is already something -> NV_ERR_INVALID_STATE); one MM per VA space (state ALIVE
    # -> NV_ERR_INVALID_STATE)
    other = self.files.get(p.uvmFd)
    if other is None or other["kind"] != "uvm" or other["uvm_init"] is not True:
      raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, f"uvmFd {p.uvmFd} is not an initialized /dev/nvidia-uvm fd")
    if f["uvm_init"]: raise RMStatus(nv.NV_ERR_INVALID_STATE, "UVM_MM_INITIALIZE on an fd already initialized")
    if other.get("mm"): raise RMStatus(nv.NV_ERR_INVALID_STATE, f"the VA space of fd {p.uvmFd} has its MM fd already")
    f["uvm_init"], other["mm"] = "mm", True

  def _uvm_register_gpu(self, f: dict, p: Any) -> None:
    # uvm_va_space.c uvm_va_space_register_gpu: an unknown GPU (uvm_gpu_retain_by_uuid) -> NV_ERR_GPU_UUID_NOT_FOUND;
    # a GPU registered in this VA space already -> NV_ERR_INVALID_DEVICE
    u = bytes(p.gpu_uuid.uuid)
    if u not in self.uuids: raise RMStatus(nv.NV_ERR_GPU_UUID_NOT_FOUND, f"no GPU with uuid {u.hex()}")
    if u in self.registered_gpus: raise RMStatus(nv.NV_ERR_INVALID_DEVICE, f"GPU {u.hex()} is registered already")
    self.registered_gpus.add(u)
    self.uvm_registered = True
    p.numaNodeId = -1   # no NUMA memory (the H100 trace returns -1)

  def _uvm_register_vaspace(self, f: dict, p: Any) -> None:
    """uvm_va_space.c uvm_va_space_register_gpu_va_space: create_gpu_va_space (RM dups the VA space) first, then
    check_gpu_va_space."""
    u = bytes(p.gpuUuid.uuid)
    # uvm_va_space_get_gpu_by_uuid: the GPU must be registered in this VA space -> NV_ERR_INVALID_DEVICE
    if u not in self.registered_gpus: raise RMStatus(nv.NV_ERR_INVALID_DEVICE, "GPU not registered with UVM_REGISTER_GPU")
    if self.files.get(p.rmCtrlFd, {}).get("kind") != "ctl": raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, f"rmCtrlFd {p.rmCtrlFd} is not /dev/nvidiactl")
    try: vas = self._get(p.hClient, p.hVaSpace, nv.FERMI_VASPACE_A)
    except RMStatus as e: raise RMStatus(nv.NV_ERR_OBJECT_NOT_FOUND, str(e)) from None
    # nv_gpu_ops.c nvGpuOpsDupAddressSpace: UVM manages only an externally owned VA space -> NV_ERR_INVALID_FLAGS
    if not vas.data["flags"] & nv.NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED:
      raise RMStatus(nv.NV_ERR_INVALID_FLAGS, f"VA space {p.hVaSpace:#x} was not allocated IS_EXTERNALLY_OWNED")
    # check_gpu_va_space: one GPU VA space per GPU -> NV_ERR_INVALID_DEVICE
    if u in self.registered_vaspaces: raise RMStatus(nv.NV_ERR_INVALID_DEVICE, f"GPU {u.hex()} has a GPU VA space registered already")
    self.registered_vaspaces[u] = vas.data

  def _uvm_create_range(self, f: dict, p: Any) -> None:
    # uvm_map_external.c uvm_create_external_range: 4K-aligned, nonzero base and length, no overflow
    # (uvm_api_range_invalid_4k) -> NV_ERR_INVALID_ADDRESS; a collision in the VA space's range tree -> NV_ERR_UVM_ADDRESS_IN_USE
    if p.base % PAGE or p.length % PAGE or p.length == 0 or p.base == 0 or p.base + p.length >= 1 << 64:
      raise RMStatus(nv.NV_ERR_INVALID_ADDRESS, f"range {p.base:#x}+{p.length:#x} not page aligned, empty or at 0")
    for b, l in self._uvm_spans():
      if p.base < b + l and b < p.base + p.length: raise RMStatus(nv.NV_ERR_UVM_ADDRESS_IN_USE, f"{p.base:#x}+{p.length:#x} overlaps {b:#x}+{l:#x}")
    self.uvm_ranges[p.base] = p.length

  def _uvm_map_external(self, f: dict, p: Any) -> None:
    # uvm_map_external.c uvm_map_external_allocation, in its order: the range (uvm_api_range_invalid_4k) ->
    # NV_ERR_INVALID_ADDRESS; 1..UVM_MAX_GPUS attribute entries -> NV_ERR_INVALID_ARGUMENT; inside one external range
    # -> NV_ERR_INVALID_ADDRESS; a valid mapping and caching type per GPU (uvm_api_mapping_type_invalid,
    # uvm_api_caching_type_invalid) -> NV_ERR_INVALID_ARGUMENT; a GPU with a GPU VA space -> NV_ERR_INVALID_DEVICE
    if p.base % PAGE or p.length % PAGE or p.length == 0 or p.base == 0:
      raise RMStatus(nv.NV_ERR_INVALID_ADDRESS, f"mapping {p.base:#x}+{p.length:#x} is not 4K aligned or empty")
    if not 1 <= p.gpuAttributesCount <= len(p.perGpuAttributes):
      raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, f"gpuAttributesCount={p.gpuAttributesCount}: 1 to {len(p.perGpuAttributes)}")
    if not any(b <= p.base and p.base + p.length <= b + l for b, l in self.uvm_ranges.items()):
      raise RMStatus(nv.NV_ERR_INVALID_ADDRESS, f"{p.base:#x}+{p.length:#x} is not inside an external range")
    a0 = p.perGpuAttributes[0]
    if a0.gpuMappingType > 3 or a0.gpuCachingType > 2:   # nv_uvm_user_types.h: mapping 0..3, caching 0..2
      raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, f"gpuMappingType={a0.gpuMappingType} gpuCachingType={a0.gpuCachingType}")
    if bytes(a0.gpuUuid.uuid) not in self.registered_vaspaces:
      raise RMStatus(nv.NV_ERR_INVALID_DEVICE, "mapping attributes name no GPU with a registered GPU VA space")
    # uvm_map_external_allocation_on_gpu: uvm_gpu_can_address (49-bit GPU VA, 48-bit CPU VA: the lower canonical half)
    if p.base + p.length > 1 << 47: raise RMStatus(nv.NV_ERR_OUT_OF_RANGE, f"{p.base:#x}+{p.length:#x} is beyond what the GPU can address")
    try: o = self._get(p.hClient, p.hMemory, (nv.NV01_MEMORY_SYSTEM, nv.NV01_MEMORY_LOCAL_USER))
    except RMStatus as e: raise RMStatus(nv.NV_ERR_OBJECT_NOT_FOUND, str(e)) from None
    u = bytes(p.perGpuAttributes[0].gpuUuid.uuid)
    if o.data.kind == "vid" and self.uuids[o.data.gpu] != u:
      raise RMStatus(nv.NV_ERR_INVALID_DEVICE, f"video memory of GPU {o.data.gpu} cannot be mapped for GPU {self.uuids.index(u)} (no peer access)")
    if p.offset + p.length > o.data.size: raise RMStatus(nv.NV_ERR_INVALID_LIMIT, f"{p.length:#x} bytes at {p.offset:#x} exceed the memory's {o.data.size:#x}")
    self._unmap_va(p.base, p.length)
    bisect.insort(self.va_map, (p.base, p.length, o.data, p.offset), key=lambda m: m[0])

  # what RM reports for a GR channel's buffers when UVM retains it (nv_gpu_ops.c nvGpuOpsRetainChannel ->
  # channelInstanceInfo.resourceCount/resourceInfo): the GR context and its global buffers; modelled as one 8 MiB,
  # 2 MiB-aligned resource, shared by the channels of one TSG (uvm_user_channel.c find_va_range)
  CHANNEL_RESOURCE_BYTES, CHANNEL_RESOURCE_ALIGN = 8 << 20, 2 << 20

  def _uvm_register_channel(self, f: dict, p: Any) -> None:
    """kernel-open/nvidia-uvm/uvm_user_channel.c uvm_register_channel and what it calls, check by check."""
    u = bytes(p.gpuUuid.uuid)
    # uvm_user_channel_create: the GPU must have a GPU VA space in this VA space (uvm_va_space_get_gpu_by_uuid_with_gpu_va_space)
    if u not in self.registered_vaspaces: raise RMStatus(nv.NV_ERR_INVALID_DEVICE, f"GPU {u.hex()} has no registered GPU VA space")
    # nvGpuOpsRetainChannel -> nvGpuOpsVerifyChannel (nv_gpu_ops.c): the handle must be a channel of the client...
    objs = self.clients.get(p.hClient)
    if objs is None: raise RMStatus(nv.NV_ERR_INVALID_CLIENT, f"no client {p.hClient:#x}")
    o = objs.get(p.hChannel)
    if o is None or not isinstance(o.data, Channel): raise RMStatus(nv.NV_ERR_INVALID_OBJECT_HANDLE, f"{p.hChannel:#x} is not a channel of client {p.hClient:#x}")
    ch: Channel = o.data
    # ...in the VA space UVM was given (pKernelChannel->pVAS != pVAS -> NV_ERR_INVALID_CHANNEL)
    if ch.vaspace is not self.registered_vaspaces[u]: raise RMStatus(nv.NV_ERR_INVALID_CHANNEL, f"channel {p.hChannel:#x} is not in the registered VA space")
    # uvm_user_channel_create: base/length page aligned, nonzero, no overflow (uvm_api_range_invalid) -> NV_ERR_INVALID_ADDRESS
    if p.base % PAGE or p.length % PAGE or p.base == 0 or p.length == 0 or p.base + p.length >= 1 << 64:
      raise RMStatus(nv.NV_ERR_INVALID_ADDRESS, f"channel VA range {p.base:#x}+{p.length:#x} is not page aligned, or empty")
    # uvm_register_channel_under_write: a (client, channel) pair registers once -> NV_ERR_INVALID_CHANNEL
    if (p.hClient, p.hChannel) in self.uvm_channels: raise RMStatus(nv.NV_ERR_INVALID_CHANNEL, f"channel {p.hChannel:#x} is registered already")
    # ... and the range must end below max_channel_va (uvm_ampere.c/uvm_ada.c: 1 << 40; uvm_hopper.c/uvm_blackwell.c: 1 << 57)
    max_va = 1 << (40 if self.arch_info.sm_version < 0x900 else 57)
    if p.base + p.length - 1 >= max_va:
      raise RMStatus(nv.NV_ERR_OUT_OF_RANGE, f"channel VA range {p.base:#x}+{p.length:#x} ends at or above max_channel_va {max_va:#x}")
    # create_va_range: the TSG's resource is placed at the first free aligned VA of [base, end] (find_va_in_range),
    # or shared with a channel of the same TSG that mapped it (find_va_range); no room -> NV_ERR_INVALID_ADDRESS
    shared = next((r for r in self.uvm_channels.values() if r["group"] == (p.hClient, ch.group)), None)
    if shared is not None: va = shared["va"]
    else:
      va = _rup(p.base, self.CHANNEL_RESOURCE_ALIGN)
      while va + self.CHANNEL_RESOURCE_BYTES <= p.base + p.length:
        hit = [(b, l) for b, l in self._uvm_spans() if va < b + l and b < va + self.CHANNEL_RESOURCE_BYTES]
        if not hit: break
        va = _rup(max(b + l for b, l in hit), self.CHANNEL_RESOURCE_ALIGN)
      else: raise RMStatus(nv.NV_ERR_INVALID_ADDRESS, f"no free {self.CHANNEL_RESOURCE_BYTES:#x}-byte range in {p.base:#x}+{p.length:#x} for the channel's buffers")
    self.uvm_channels[(p.hClient, p.hChannel)] = {"va": va, "group": (p.hClient, ch.group), "channel": ch}
    ch.bound = True   # bind_channel_resources -> RM marks the channel's context bound

  def _uvm_unregister_channel(self, f: dict, p: Any) -> None:
    # uvm_unregister_channel: find_user_channel by (client, channel) -> NV_ERR_INVALID_CHANNEL when not registered
    r = self.uvm_channels.pop((p.hClient, p.hChannel), None)
    if r is None: raise RMStatus(nv.NV_ERR_INVALID_CHANNEL, f"channel {p.hChannel:#x} of client {p.hClient:#x} is not registered with UVM")
    r["channel"].bound = False   # uvm_user_channel_stop: nvUvmInterfaceStopChannel

  def _uvm_spans(self) -> list[tuple[int, int]]:
    """Every VA range UVM has handed out: external ranges and channel resources."""
    return list(self.uvm_ranges.items()) + [(r["va"], self.CHANNEL_RESOURCE_BYTES) for r in self.uvm_channels.values()]

  def _uvm_free(self, f: dict, p: Any) -> None:
    # uvm_va_range.c uvm_api_free -> uvm_free: base must start a range created with UVM_CREATE_EXTERNAL_RANGE -> NV_ERR_INVALID_ADDRESS
    if p.base not in self.uvm_ranges: raise RMStatus(nv.NV_ERR_INVALID_ADDRESS, f"{p.base:#x} is not the start of an allocation")
    self._unmap_va(p.base, self.uvm_ranges.pop(p.base))

  def _unmap_va(self, base: int, length: int) -> None:
    self.va_map = [m for m in self.va_map if not (m[0] < base + length and base < m[0] + m[1])]

  _uvm_ioctls: dict[int, tuple[type, Any]] = {
    nv.UVM_INITIALIZE: (nv.UVM_INITIALIZE_PARAMS, _uvm_initialize),
    nv.UVM_MM_INITIALIZE: (nv.UVM_MM_INITIALIZE_PARAMS, _uvm_mm_initialize),
    nv.UVM_REGISTER_GPU: (nv.UVM_REGISTER_GPU_PARAMS, _uvm_register_gpu),
    nv.UVM_REGISTER_GPU_VASPACE: (nv.UVM_REGISTER_GPU_VASPACE_PARAMS, _uvm_register_vaspace),
    nv.UVM_CREATE_EXTERNAL_RANGE: (nv.UVM_CREATE_EXTERNAL_RANGE_PARAMS, _uvm_create_range),
    nv.UVM_MAP_EXTERNAL_ALLOCATION: (nv.UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, _uvm_map_external),
    nv.UVM_FREE: (nv.UVM_FREE_PARAMS, _uvm_free),
    nv.UVM_REGISTER_CHANNEL: (nv.UVM_REGISTER_CHANNEL_PARAMS, _uvm_register_channel),
    nv.UVM_UNREGISTER_CHANNEL: (nv.UVM_UNREGISTER_CHANNEL_PARAMS, _uvm_unregister_channel),
  }

  # ---------------------------------------------------------------- mmap
  def mmap(self, addr: int, length: int, prot: int, flags: int, fd: int, offset: int) -> int:
    with self._lock:
      if fd == -1:  # anonymous memory: the kernel's ordinary behaviour
        r = _mmap(addr, length, prot, flags, -1, offset)
        self.maps[r] = (length, None)
        return r
      f = self.files.get(fd)
      if f is None: raise OSError(errno.EBADF, f"mmap: bad fd {fd}")
      # kernel-open/nvidia/nv-mmap.c nvidia_mmap_helper: no valid mapping context -> EINVAL; vm_pgoff != 0 -> EINVAL;
      # the control node maps at most the pages of the allocation (-ERANGE); a BAR mapping exactly its range (-ENXIO)
      if f["kind"] not in ("ctl", "dev") or f["map"] is None:
        raise OSError(errno.EINVAL, f"mmap of {f['path']} (fd {fd}) without a preceding NV_ESC_RM_MAP_MEMORY on it")
      if offset != 0: raise OSError(errno.EINVAL, f"mmap of {f['path']} at offset {offset:#x}: the offset must be 0")
      mem, moff, mlen = f["map"]
      if f["kind"] == "ctl" and length > mlen: raise OSError(errno.ERANGE, f"mmap of {length:#x} bytes: the RM mapping is {mlen:#x} bytes")
      if f["kind"] == "dev" and length != mlen: raise OSError(errno.ENXIO, f"mmap of {length:#x} bytes of a {mlen:#x}-byte BAR mapping")
      r = _mmap(addr, length, prot, (flags & ~0x0F) | MAP_SHARED, mem.fd, moff + offset)
      self.maps[r] = (length, mem)
      return r

  def munmap(self, addr: int, length: int) -> None:
    with self._lock:
      if _libc.munmap(addr, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"munmap({addr:#x}, {length:#x}) failed: {os.strerror(e)}")
      self.maps.pop(addr, None)

  # ---------------------------------------------------------------- doorbell and the GPU
  def doorbell(self, addr: int, value: int) -> None:
    with self._lock:
      for a, (l, mem) in self.maps.items():
        if a <= addr < a + l:
          if isinstance(mem, Memory) and mem.kind == "usermode" and addr - a == hw.NVC361_NOTIFY_CHANNEL_PENDING:
            ch = self.channels.get(value)
            if ch is None: self.log.append(f"doorbell: no channel with work-submit token {value}")
            # The GPU does not finish work while the host returns from a doorbell: the mock works through what was
            # rung before, and the entries this doorbell announces run at the next doorbell or kick (the driver rings
            # again while it waits). So a host that rewrites memory a queued launch reads is caught (finding 6b).
            self._run_all()
            if ch is not None and ch.fault is None: self._announce(ch)
          else: ctypes.c_uint32.from_address(addr).value = value
          return
      raise OSError(errno.EFAULT, f"doorbell write to {addr:#x}: not a mapped usermode region")

  def _announce(self, ch: Channel) -> None:
    """GP_PUT as the doorbell found it becomes the channel's work; remember what each new launch's QMD and constant
    bank 0 held at submission, to report a host that rewrites them before the launch runs."""
    put = ctypes.c_uint32.from_address(ch.userd + hw.USERD_GP_PUT).value % ch.entries
    i = ch.visible_put
    while i != put:
      try:
        addr, n, _ = hw.decode_gp_entry(int.from_bytes(self.read_gpu(ch.ring_va + 8 * i, 8), "little"))
        regs: dict[tuple[int, int], int] = {}
        for m in hw.decode_pushbuffer(hw.words_of(self.read_gpu(addr, 4 * n))):
          regs[(m.subc, m.method)] = m.value
          if m.method == hw.SEND_PCAS_A and m.method >= 0x100: ch.snapshots[(i, m.value << 8)] = self._launch_bytes(m.value << 8)
      except (ValueError, hw.PushbufferError): pass   # faults are reported when the entry runs
      i = (i + 1) % ch.entries
    ch.visible_put = put

  def _launch_bytes(self, qmd: int) -> bytes | None:
    """The QMD at `qmd` and the constant bank 0 it names, as bytes (None where unreadable)."""
    try:
      ver = hw.QMD_VERSION[self.arch_info.compute]
      qb = self.read_gpu(qmd, hw.QMD_LAYOUTS[ver].nbytes)
      q = hw.read_qmd(hw.words_of(qb), ver)
      return qb + (self.read_gpu(q["cbank0"], q["cbank0_size"]) if q["cbank0"] is not None else b"")
    except (ValueError, KeyError): return None

  def _xlate(self, va: int, n: int) -> int:
    """Host address of GPU VA range [va, va+n) (one mapping); MMUFault when unmapped."""
    i = bisect.bisect_right(self.va_map, va, key=lambda m: m[0]) - 1
    if i >= 0:
      base, length, mem, off = self.va_map[i]
      if va + n <= base + length: return mem.view + off + (va - base)
      if va < base + length: raise MMUFault(base + length, f"MMU fault: GPU VA {va:#x}+{n:#x} runs past the mapping at {base:#x}+{length:#x}")
    raise MMUFault(va, f"MMU fault: GPU VA {va:#x}+{n:#x} is not mapped")

  def _mapping_of(self, va: int) -> tuple[int, int] | None:
    i = bisect.bisect_right(self.va_map, va, key=lambda m: m[0]) - 1
    if i >= 0 and va < self.va_map[i][0] + self.va_map[i][1]: return self.va_map[i][0], self.va_map[i][1]
    return None

  def read_gpu(self, va: int, n: int) -> bytes: return ctypes.string_at(self._xlate(va, n), n) if n else b""
  def write_gpu(self, va: int, data: bytes) -> None:
    if data: ctypes.memmove(self._xlate(va, len(data)), data, len(data))

  def _copy(self, dst: int, src: int, n: int) -> None:
    while n > 0:  # page by page across mappings
      k = min(n, PAGE - (src % PAGE), PAGE - (dst % PAGE)) if n > PAGE else n
      try: s, d = self._xlate(src, k), self._xlate(dst, k)
      except MMUFault:
        k = min(n, PAGE - (src % PAGE), PAGE - (dst % PAGE))
        try: s = self._xlate(src, k)
        except MMUFault as e: raise MMUFault(e.address, str(e), "ACCESS_TYPE_VIRT_READ") from None
        try: d = self._xlate(dst, k)
        except MMUFault as e: raise MMUFault(e.address, str(e), "ACCESS_TYPE_VIRT_WRITE") from None
      ctypes.memmove(d, s, k)
      src, dst, n = src + k, dst + k, n - k

  def _run_all(self) -> None:
    """Run every scheduled channel until none makes progress (a release on one may unblock an acquire on another)."""
    progress = True
    while progress:
      progress = False
      for ch in list(self.channels.values()):
        if ch.fault is None and self._is_scheduled(ch): progress |= self._run_channel(ch)

  def _is_scheduled(self, ch: Channel) -> bool:
    return any(key[1] == ch.group for key in self.scheduled_groups)

  # ---------------------------------------------------------------- channel errors, as RM reports them
  def _xid(self, ch: Channel, err: GPUError) -> None:
    """Robust-channel recovery as RM does it: the Xid line in the kernel log, status 0xffff and the Xid in the error
    notifier, and the whole channel group (the TSG is the unit RM recovers) stops."""
    gpu = 0
    try: gpu = self.clients[ch.client][self.clients[ch.client][ch.group].parent].data["gpu"]
    except (KeyError, TypeError): pass
    for detail in err.detail.split("\n"):   # one error can be several lines (SKEDCHECK: what failed, ESR, channel)
      self._klog(f"NVRM: Xid (PCI:0000:{gpu + 1:02x}:00): {err.xid}, name={self.process_name}, {detail}")
    self.log.append(f"mock GPU: {err.why}")
    for c in self.channels.values():
      if c.client != ch.client or c.group != ch.group: continue
      c.fault, c.inflight = f"Xid {err.xid} ({hw.XID_NAMES.get(err.xid, '?')}): {err.why}", []
      if c.error_notifier is not None:
        n = NVNotification.from_address(c.error_notifier)
        n.timeStamp, n.info32, n.info16, n.status = time.perf_counter_ns(), err.xid, 0, 0xFFFF

  @staticmethod
  def _mmu(ch: Channel, e: MMUFault, engine: str, client: str, why: str) -> GPUError:
    a = e.address
    return GPUError(31, f"channel 0x{ch.token:08x}, intr 00000000. MMU Fault: ENGINE {engine} {client} faulted @ 0x{a >> 32:x}_{a & 0xFFFFFFFF:08x}. "
                        f"Fault is of type FAULT_PTE {e.access}", why)

  def _run_channel(self, ch: Channel) -> bool:
    progress = False
    get_p = ctypes.c_uint32.from_address(ch.userd + hw.USERD_GP_GET)
    try:
      while ch.fault is None:
        if ch.cur is None:
          if ch.gp_get == ch.visible_put:
            self._drain(ch)   # nothing more to fetch: the grids and copies in flight finish
            break
          try:
            entry = int.from_bytes(self.read_gpu(ch.ring_va + 8 * ch.gp_get, 8), "little")
            addr, n, _ = hw.decode_gp_entry(entry)
            words = hw.words_of(self.read_gpu(addr, 4 * n))
            ch.cur, ch.pos = (ch.gp_get, addr, hw.decode_pushbuffer(words)), 0
          except MMUFault as e: raise self._mmu(ch, e, "HOST0", "HUBCLIENT_HOST", f"GPFIFO entry {ch.gp_get}: {e}") from None
          except (ValueError, hw.PushbufferError) as e:
            raise GPUError(32, f"channel 0x{ch.token:08x}, errorString PBDMA ERROR, Info 0x0", f"GPFIFO entry {ch.gp_get}: {e}") from None
        _, addr, methods = ch.cur
        while ch.pos < len(methods):
          m = methods[ch.pos]
          where = f"{hw.method_name(ch.subc_class.get(m.subc), m.method)} at {addr + 4 * m.pos:#x}"
          try: ok = self._method(ch, m)
          except MMUFault as e: raise self._mmu(ch, e, "HOST0", "HUBCLIENT_HOST", f"{where}: {e}") from None
          except ValueError as e: raise GPUError(32, f"channel 0x{ch.token:08x}, errorString PBDMA ERROR, Info 0x0", f"{where}: {e}") from None
          if not ok:  # blocked on an acquire: resume here on the next doorbell or release
            here = addr + 4 * m.pos  # the PBDMA's pushbuffer GET, as USERD shows it
            ctypes.c_uint32.from_address(ch.userd + hw.USERD_GET).value = here & 0xFFFFFFFF
            ctypes.c_uint32.from_address(ch.userd + hw.USERD_GET_HI).value = here >> 32
            return progress
          ch.pos += 1
          ch.methods_done += 1
          progress = True
        ch.cur, ch.blocked = None, None
        ch.snapshots = {k: v for k, v in ch.snapshots.items() if k[0] != ch.gp_get}
        ch.gp_get = (ch.gp_get + 1) % ch.entries
        get_p.value = ch.gp_get
        progress = True
    except GPUError as e:
      self._xid(ch, e)
      return True
    return progress

  def _method(self, ch: Channel, m: hw.Method) -> bool:
    """Execute one method write; False when it must wait (an unsatisfied acquire)."""
    if m.method < 0x100:
      ch.regs[(0, m.method)] = m.value
      if m.method == hw.SET_OBJECT:
        cls = m.value & 0xFFFF
        objs = self.clients[ch.client]
        if not any(objs[c].cls == cls for c in ch.obj.children):
          raise GPUError(32, f"channel 0x{ch.token:08x}, errorString PBDMA ERROR, Info 0x0",
                         f"SET_OBJECT subchannel {m.subc}: no {hw.class_name(cls)} object on this channel")
        ch.subc_class[m.subc] = cls
      elif m.method == hw.WFI: self._drain(ch)            # wait for idle: everything launched before finishes
      elif m.method == hw.SEM_EXECUTE: return self._semaphore(ch, m.value)
      return True
    cls = ch.subc_class.get(m.subc)
    if cls is None:
      raise GPUError(32, f"channel 0x{ch.token:08x}, errorString PBDMA ERROR, Info 0x0", f"method {m.method:#x} on subchannel {m.subc}, which has no object bound (SET_OBJECT)")
    ch.regs[(m.subc, m.method)] = m.value
    g = lambda meth: ch.regs.get((m.subc, meth), 0)
    if cls in hw.DMA_CLASSES and m.method == hw.LAUNCH_DMA:
      v = m.value
      src = (g(hw.OFFSET_IN_UPPER) << 32) | g(hw.OFFSET_IN_UPPER + 4)
      dst = (g(hw.OFFSET_IN_UPPER + 8) << 32) | g(hw.OFFSET_IN_UPPER + 12)
      n = g(hw.LINE_LENGTH_IN) * (g(hw.LINE_COUNT) if nv.NVC8B5_LAUNCH_DMA_MULTI_LINE_ENABLE.decode(v) else 1)
      sem = (((g(hw.SET_SEMAPHORE_A) << 32) | g(hw.SET_SEMAPHORE_A + 4)), g(hw.SET_SEMAPHORE_A + 8), nv.NVC8B5_LAUNCH_DMA_SEMAPHORE_TYPE.decode(v))
      copy = bool(nv.NVC8B5_LAUNCH_DMA_DATA_TRANSFER_TYPE.decode(v))
      # a copy runs alongside whatever the channel launched before it, until a wait-for-idle
      ch.inflight.append(Work("copy", f"copy {n} bytes {src:#x} -> {dst:#x}", copy=(dst, src, n) if copy else None, sem=sem if sem[2] else None))
    elif cls in hw.COMPUTE_CLASSES:
      if m.method in (hw.SEND_SIGNALING_PCAS2_B, hw.SEND_PCAS_A + 4): self._launch(ch, m.subc, g(hw.SEND_PCAS_A) << 8)
      elif m.method == nv.NVC6C0_WAIT_FOR_IDLE: self._drain(ch)
      elif m.method == nv.NVC6C0_SET_SHADER_SHARED_MEMORY_WINDOW_B: self._check_shared_window(ch, cls, (g(nv.NVC6C0_SET_SHADER_SHARED_MEMORY_WINDOW_A) << 32) | m.value, m)
    return True

  def _check_shared_window(self, ch: Channel, cls: int, window: int, m: hw.Method) -> None:
    # finding 3: HOPPER_COMPUTE_A refused a shared window of 0xFE000000 with Xid 69 GR class error at offset 0x2a4,
    # ErrorCode 4. The SASS of sm_90+ builds generic shared addresses from SR_SWINHI (the window's upper 32 bits), so
    # the window must be 4 GiB aligned; Mesa nvk (nvk_cmd_dispatch.c) applies the same alignment to every class from
    # HOPPER_COMPUTE_A on, Blackwell included (hw.SHARED_WINDOW_ALIGN, hw.SHADER_WINDOWS)
    if cls in (nv.HOPPER_COMPUTE_A, nv.BLACKWELL_COMPUTE_A, nv.BLACKWELL_COMPUTE_B) and window % (1 << 32):
      raise GPUError(69, f"Class Error: channel 0x{ch.token:08x}, Class {cls:08x}, Offset {m.method:08x}, Data {m.value:08x}, ErrorCode 00000004",
                     f"{hw.class_name(cls)} refused shared memory window {window:#x} (SET_SHADER_SHARED_MEMORY_WINDOW_B): not 4 GiB aligned")

  def _semaphore(self, ch: Channel, ex: int) -> bool:
    g = lambda meth: ch.regs.get((0, meth), 0)
    addr = g(hw.SEM_ADDR_LO) | (g(hw.SEM_ADDR_LO + 4) << 32)
    wide = hw.F_SEM_SIZE.decode(ex)
    payload = g(hw.SEM_ADDR_LO + 8) | ((g(hw.SEM_ADDR_LO + 12) << 32) if wide else 0)
    nb, mask = (8, (1 << 64) - 1) if wide else (4, 0xFFFFFFFF)
    if addr % nb: raise ValueError(f"semaphore address {addr:#x} not {nb}-byte aligned")
    op = hw.F_SEM_OP.decode(ex)
    if op in (0, 2, 3, 4, 5):  # acquires
      def test() -> tuple[bool, int]:
        cur = int.from_bytes(self.read_gpu(addr, nb), "little")
        return ({0: cur == payload, 2: cur >= payload, 3: ((cur - payload) & mask) < (1 << (8 * nb - 1)),
                 4: (cur & payload) != 0}[op] if op != 5 else (cur | payload) != 0), cur
      ok, cur = test()
      if not ok and ch.inflight:  # while the channel waits, what it launched runs to completion
        self._drain(ch)
        ok, cur = test()
      ch.blocked = None if ok else f"acquire {hw.SEM_OP_NAMES[op]} {addr:#x} >= {payload} (value {cur})"
      return ok
    if hw.F_SEM_WFI.decode(ex): self._drain(ch)   # RELEASE_WFI: the release waits until the engine is idle
    cur = int.from_bytes(self.read_gpu(addr, nb), "little")
    if op == 1: new = payload
    elif op == 6:
      red = hw.F_SEM_RED.decode(ex)
      new = {0: min(cur, payload), 1: max(cur, payload), 2: cur ^ payload, 3: cur & payload, 4: cur | payload, 5: cur + payload,
             6: 0 if cur >= payload else cur + 1, 7: payload if cur == 0 or cur > payload else cur - 1}[red] & mask
    else: raise ValueError(f"SEM_EXECUTE operation {op} is reserved")
    self.write_gpu(addr, new.to_bytes(nb, "little"))
    if hw.F_SEM_TS.decode(ex): self.write_gpu(addr + 8, time.perf_counter_ns().to_bytes(8, "little"))
    return True

  def _launch(self, ch: Channel, subc: int, qmd_addr: int) -> None:
    """Check and queue the grid a QMD describes; it runs when the channel next waits for idle (_drain). What the GPU
    takes from where: geometry, shared/local sizes and the program from the QMD; %ntid, %nctaid, the windows compiled
    code converts with, the stack pointer and %dynamic_smem_size from constant bank 0 at the offsets the SASS of this
    generation reads (hw.CBANK0, finding 5); the code from the program address (the PTX before it: this mock runs PTX)."""
    from baregrad.drivers.mock.ptx_interp import PTXModule, PTXError, Windows
    # finding 6a: one QMD launched again while its previous launch was still in flight (three times in one GPFIFO
    # entry) took the H100's channel down with Xid 109 CTX SWITCH TIMEOUT
    if any(w.qmd == qmd_addr for w in ch.inflight):
      raise GPUError(109, f"channel 0x{ch.token:08x}, errorString CTX SWITCH TIMEOUT, Info 0x0",
                     f"QMD {qmd_addr:#x} launched again while its previous launch is in flight (no wait-for-idle between)")
    # a launch whose QMD or constant bank changed between the doorbell and now ran with what the host wrote later
    snap = ch.snapshots.pop((ch.gp_get, qmd_addr), None)
    if snap is not None and snap != self._launch_bytes(qmd_addr):
      msg = f"QMD {qmd_addr:#x} or its constant bank 0 was rewritten after the launch was submitted, before it ran (patched under a queued launch)"
      self.violations.append(msg)
      self.log.append(f"mock GPU: {msg}")
    ver = hw.QMD_VERSION[self.arch_info.compute]  # the QMD layout this GPU's compute class reads
    q = hw.read_qmd(hw.words_of(self.read_gpu(qmd_addr, hw.QMD_LAYOUTS[ver].nbytes)), ver)
    self.launches.append({"qmd": qmd_addr, **q})
    bad = lambda why: GPUError(13, f"Graphics Exception: channel 0x{ch.token:08x}, Class {ch.subc_class[subc]:08x}: {why}", why)
    if q["type"] != hw.QMD_TYPE_GRID_CTA or q["major"] != ver:
      raise bad(f"QMD at {qmd_addr:#x}: type {q['type']} major version {q['major']} ({hw.class_name(self.arch_info.compute)} launches QMD v0{ver} grids)")
    if q["cbank0"] is None: raise bad(f"QMD at {qmd_addr:#x}: constant bank 0 not valid (no kernel parameters)")
    # the code: the PTX right before it, and its length (IMAGE_TRAILER)
    gcc = lambda e, why: self._mmu(ch, e, "GRAPHICS GPC0", "GPCCLIENT_GCC", why)
    try: tr = hw.read_image_trailer(self.read_gpu(q["program"] - hw.IMAGE_TRAILER, hw.IMAGE_TRAILER))
    except MMUFault as e: raise gcc(e, f"program at {q['program']:#x} is not mapped") from None
    if tr is None: raise bad(f"program at {q['program']:#x}: no PTX before the code; this mock runs PTX only, not SASS")
    tlen, nlen, code_len = tr
    # finding 4: the instruction/constant cache (GPCCLIENT_GCC) fetches past the code it runs; an image that ended at
    # its code faulted (Xid 31 FAULT_PTE ACCESS_TYPE_VIRT_READ at the next page). The mock faults whenever the fetch
    # (hw.INSTRUCTION_PREFETCH past the code) leaves the image's allocation; the GPU only where that page is unmapped.
    span = self._mapping_of(q["program"])
    reach = q["program"] + code_len + hw.INSTRUCTION_PREFETCH
    if span is not None and reach > span[0] + span[1]:
      raise gcc(MMUFault(span[0] + span[1], "", "ACCESS_TYPE_VIRT_READ"),
                f"instruction prefetch of the program at {q['program']:#x} ({code_len:#x} bytes of code) reaches {reach:#x}, past the end of its allocation {span[0]:#x}+{span[1]:#x}")
    start = q["program"] - hw.image_prefix_bytes(tlen, nlen)
    text = self.read_gpu(start, tlen).decode()
    name = self.read_gpu(start + tlen + 1, nlen).decode()
    mod = self._ptx_cache.get(text)
    try:
      if mod is None: mod = self._ptx_cache[text] = PTXModule(text)
      k = mod.kernel(name)
    except PTXError as e: raise bad(f"kernel {name}: {e}") from None
    # constant bank 0 as the SASS of this generation reads it (finding 5)
    L = hw.cbank0_layout(self.arch)
    try: cb = self.read_gpu(q["cbank0"], max(q["cbank0_size"], L.params + k.param_size))
    except MMUFault as e: raise gcc(e, f"constant bank 0 at {q['cbank0']:#x} is not mapped") from None
    u32 = lambda off: int.from_bytes(cb[off:off + 4], "little")
    u64 = lambda off: int.from_bytes(cb[off:off + 8], "little")
    sw = (g(ch, subc, nv.NVC6C0_SET_SHADER_SHARED_MEMORY_WINDOW_A) << 32) | g(ch, subc, nv.NVC6C0_SET_SHADER_SHARED_MEMORY_WINDOW_B)
    lw = (g(ch, subc, nv.NVC6C0_SET_SHADER_LOCAL_MEMORY_WINDOW_A) << 32) | g(ch, subc, nv.NVC6C0_SET_SHADER_LOCAL_MEMORY_WINDOW_B)
    # generic <-> shared: sm_80/89 SASS adds c[0x0][0x18]; sm_90+ takes the window's upper half from SR_SWINHI
    cvta_shared = u64(L.shared_window) if self.arch_info.sm_version < 0x900 else sw & ~0xFFFFFFFF
    win = Windows(shared=sw, local=lw, size=hw.SHADER_WINDOW_BYTES, cvta_shared=cvta_shared, cvta_local=u64(L.local_window))
    if q["shared"]: self._check_sm_config(ch, ch.subc_class[subc], qmd_addr, name, q)
    # shared memory: the kernel's data starts at L.shared_base in the CTA's allocation (0x400 on sm_90+)
    dyn = 0
    if k.static_shared or q["shared"]:
      dyn = q["shared"] - L.shared_base - k.static_shared
      if dyn < 0:
        raise bad(f"Out Of Range Address: kernel {name} uses {k.static_shared} bytes of shared memory from offset {L.shared_base:#x}, the launch "
                  f"allocates {q['shared']} (SHARED_MEMORY_SIZE)")
    # local memory: a frame needs the stack pointer at the top of the per-thread window and a local memory big enough
    if q["local"]:
      sp = u32(L.stack)
      if not hw.INITIAL_STACK <= sp <= hw.SHADER_WINDOW_BYTES:
        raise bad(f"Out Of Range Address: kernel {name} has {q['local']} bytes of local memory per thread, its stack pointer "
                  f"c[0x0][{L.stack:#x}] = {sp:#x} puts the frame outside the thread's local window")
      self._check_local_memory(ch, subc, q["local"], name)
    specials = {"ntid": struct.unpack_from("<III", cb, L.ntid), "nctaid": struct.unpack_from("<III", cb, L.nctaid),
                "dynamic_smem_size": u32(L.dyn_shared), "total_smem_size": q["shared"] - u32(L.reserved_shared)}
    params = cb[L.params:L.params + k.param_size]
    ch.inflight.append(Work("launch", f"kernel {name}", qmd=qmd_addr, release=q["release0"],
                            run=(k, params, q["grid"], q["block"], max(dyn, 0), specials, win)))

  def _check_sm_config(self, ch: Channel, cls: int, qmd: int, name: str, q: dict[str, Any]) -> None:
    """SHARED_MEMORY_SIZE and the SM_CONFIG fields of a launch with shared memory (docs/hw/h100-580.159.04-2026-11-28.md,
    finding 8): on the H100, a size of 0x6c0 bytes, and MIN/TARGET naming 4, 24 or 48 KiB, failed with Xid 13
    SKEDCHECK14_SHARED_MEMORY_SIZE; 0x680, and carveouts the SM has (8..64 KiB), ran. The carveouts per generation, and
    that a block's shared memory fits the carveout it runs in, are the CUDA C Programming Guide's (hw.sm_carveouts);
    MIN <= TARGET <= MAX is what the clcbc0qmd.h field names say."""
    mn, mx, tg = q["smcfg"]
    ok = {k // 4 + 1: k for k in hw.sm_carveouts(self.arch_info.max_shared)}
    why = None
    if q["shared"] % 128: why = f"SHARED_MEMORY_SIZE {q['shared']:#x} is not a multiple of 128 bytes"
    elif mn not in ok or tg not in ok: why = f"MIN/TARGET_SM_CONFIG_SHARED_MEM_SIZE {mn}/{tg} are not carveouts of this SM (KiB / 4 + 1 of {sorted(ok.values())})"
    elif ok[tg] << 10 < q["shared"]: why = f"SHARED_MEMORY_SIZE {q['shared']} does not fit the {ok[tg]} KiB carveout TARGET_SM_CONFIG_SHARED_MEM_SIZE {tg} names"
    elif not mn <= tg <= mx: why = f"SM_CONFIG_SHARED_MEM_SIZE MIN {mn} TARGET {tg} MAX {mx} out of order"
    if why is not None:   # the three lines the H100 prints for it; ESR 0x40702c holds the QMD's address >> 8
      raise GPUError(13, "Graphics Exception: SKEDCHECK14_SHARED_MEMORY_SIZE failed\n"
                     f"Graphics Exception: ESR 0x407020=0x200000 0x407028=0x3f 0x40702c={qmd >> 8:#x} 0x407030=0x0\n"
                     f"Graphics Exception: channel 0x{ch.token:08x}, Class {cls:08x}, Offset 00000000, Data 00000000", f"kernel {name}: {why}")

  def _check_local_memory(self, ch: Channel, subc: int, per_thread: int, name: str) -> None:
    """SET_SHADER_LOCAL_MEMORY_A/B (base) and _NON_THROTTLED_A/B (bytes per TPC) must cover every thread of every TPC."""
    base = (g(ch, subc, nv.NVC6C0_SET_SHADER_LOCAL_MEMORY_A) << 32) | g(ch, subc, nv.NVC6C0_SET_SHADER_LOCAL_MEMORY_B)
    per_tpc = (g(ch, subc, nv.NVC6C0_SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A) << 32) | g(ch, subc, nv.NVC6C0_SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_B)
    need = _rup(per_thread * 32, 0x200) * 64 * self.sm_per_tpc
    if per_tpc < need:
      raise GPUError(13, f"Graphics Exception: channel 0x{ch.token:08x}: local memory of {per_tpc:#x} bytes per TPC, kernel {name} needs {need:#x}",
                     f"kernel {name}: {per_thread} bytes of local memory per thread need {need:#x} bytes per TPC; the channel set {per_tpc:#x}")
    end = base + per_tpc * self.gpcs * self.tpc_per_gpc
    span = self._mapping_of(base) if base else None
    if span is None or end > span[0] + span[1]:
      raise self._mmu(ch, MMUFault(base if span is None else span[0] + span[1], "", "ACCESS_TYPE_VIRT_WRITE"), "GRAPHICS GPC0", "GPCCLIENT_T1_0",
                      f"kernel {name}: shader local memory [{base:#x}, {end:#x}) is not mapped")

  def _drain(self, ch: Channel) -> None:
    """Finish the work in flight on a channel: what was launched (or copied) since the last wait-for-idle runs
    concurrently, as on the GPU (finding 6b: a consumer launched right after its producer read 100% stale values).
    The grids are interleaved instruction by instruction, the most recently launched first; every work item records
    the allocations it reads and writes, and a read or write of what an earlier concurrent item writes (or a write
    of what it reads) is reported as a hazard."""
    if not ch.inflight: return
    from baregrad.drivers.mock.ptx_interp import PTXError, GPUFault
    work, ch.inflight = ch.inflight, []
    mem = self._ptx_memory()
    concurrent = len(work) > 1
    steps = []
    for w in reversed(work):
      if w.kind == "launch":
        k, params, grid, block, dyn, specials, win = w.run
        steps.append((w, k.launch_steps(mem, params, grid, block, dyn, specials, win, step=concurrent)))
      else: steps.append((w, self._copy_steps(w)))
    try:
      while steps:
        for item in list(steps):
          w, gen = item
          mem.recorder = w.access if concurrent else None
          try: next(gen)
          except StopIteration: steps.remove(item)
    except GPUFault as e:
      raise self._mmu(ch, MMUFault(int(e.address or 0), "", "ACCESS_TYPE_VIRT_WRITE" if "store" in str(e) or "atom" in str(e) or "red" in str(e)
                                   else "ACCESS_TYPE_VIRT_READ"), "GRAPHICS GPC0", "GPCCLIENT_T1_0", f"MMU fault in {w.what}: {e}") from None
    except MMUFault as e: raise self._mmu(ch, e, "GRAPHICS", "HUBCLIENT_CE0", f"{w.what}: {e}") from None
    except PTXError as e:
      raise GPUError(13, f"Graphics Exception: channel 0x{ch.token:08x}: {w.what}: {e}", f"{w.what}: {e} (the mock's PTX interpreter)") from None
    finally: mem.recorder = None
    if concurrent: self._report_hazards(work)
    for w in work:  # completions: QMD releases and copy semaphores
      if w.release is not None:
        addr, payload, wide = w.release
        self.write_gpu(addr, payload.to_bytes(8 if wide else 4, "little"))
      if w.sem is not None:
        sa, payload, st = w.sem
        self.write_gpu(sa, payload.to_bytes(4, "little"))
        if st == nv.NVC8B5_LAUNCH_DMA_SEMAPHORE_TYPE_RELEASE_SEMAPHORE_WITH_TIMESTAMP:
          self.write_gpu(sa + 8, time.perf_counter_ns().to_bytes(8, "little"))

  def _copy_steps(self, w: Work) -> Any:
    if w.copy is not None:
      dst, src, n = w.copy
      for va, kind in ((src, "r"), (dst, "w")):
        if (sp := self._mapping_of(va)) is not None: w.access.add((sp[0], kind))
      self._copy(dst, src, n)
    yield

  def _report_hazards(self, work: list[Work]) -> None:
    regions = {va: f"{m.kind} memory at {va:#x}+{n:#x}" for va, n, m, _ in self.va_map}
    for i, a in enumerate(work):
      for b in work[i + 1:]:
        ar, aw = {v for v, k in a.access if k == "r"}, {v for v, k in a.access if k == "w"}
        br, bw = {v for v, k in b.access if k == "r"}, {v for v, k in b.access if k == "w"}
        for kind, hit in (("read-after-write", aw & br), ("write-after-write", aw & bw), ("write-after-read", ar & bw)):
          for va in sorted(hit):
            msg = (f"{kind} hazard: {b.what} and {a.what} ran concurrently (no wait-for-idle between them) and both touch "
                   f"{regions.get(va, hex(va))}")
            self.hazards.append(msg)
            self.log.append(f"mock GPU: {msg}")

  def _ptx_memory(self) -> Any:
    """The interpreter's view of the GPU VA space: every mapping, backed by the same host pages (no copies)."""
    from baregrad.drivers.mock.ptx_interp import Memory as PTXMemory
    import numpy as np
    key = tuple((va, n, id(m), off) for va, n, m, off in self.va_map)
    if self._ptx_mem is None or self._ptx_mem[0] != key:
      pm = PTXMemory()
      for va, n, m, off in self.va_map:
        pm.map(va, n, data=np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(m.view + off)), name=m.kind)
      self._ptx_mem = (key, pm)
    return self._ptx_mem[1]

  # ---------------------------------------------------------------- for tests and tools (what a debugger would show)
  def channel_state(self) -> str:
    with self._lock:
      out = []
      for ch in self.channels.values():
        put = ctypes.c_uint32.from_address(ch.userd + hw.USERD_GP_PUT).value
        out.append(f"channel token {ch.token}: GP_GET {ch.gp_get} GP_PUT {put} methods executed {ch.methods_done}"
                   + (f" BLOCKED {ch.blocked}" if ch.blocked else "") + (f" FAULT {ch.fault}" if ch.fault else ""))
      return "\n".join(out)

  def dump_channel(self, token: int, last: int = 8) -> str:
    """A channel's GPFIFO and pushbuffers as the GPU sees them (read through its VA space), decoded."""
    with self._lock:
      ch = self.channels[token]
      ring = hw.words_of(self.read_gpu(ch.ring_va, 8 * ch.entries))
      entries = [ring[2 * i] | (ring[2 * i + 1] << 32) for i in range(ch.entries)]
      put = ctypes.c_uint32.from_address(ch.userd + hw.USERD_GP_PUT).value
      return f"channel token {ch.token}" + (f" BLOCKED {ch.blocked}" if ch.blocked else "") + (f" FAULT {ch.fault}" if ch.fault else "") + "\n" + \
        hw.format_gpfifo(entries, ch.gp_get, put, self.read_gpu, dict(ch.subc_class), last)
