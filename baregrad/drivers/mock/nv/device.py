"""MockNVGPU: the device files (/dev/nvidiactl, /dev/nvidiaN, /dev/nvidia-uvm, /dev/kmsg: open, close, read, lseek)
and the ioctl entry, joining the kernel-driver model (rm, uvm) and the GPU engines (gpfifo, mmu, dma, compute)."""
from __future__ import annotations
import ctypes, errno, os, threading, time
from baregrad import knobs
from typing import Any
from baregrad.ctypes_autogen.nv import nv_580 as nv
from baregrad.drivers.mock.common import MACHINE
from baregrad.drivers.mock.nv.compute import ComputeEngine
from baregrad.drivers.mock.nv.dma import CopyEngine
from baregrad.drivers.mock.nv.gpfifo import HostChannels
from baregrad.drivers.mock.nv.mmu import GPUMMU
from baregrad.drivers.mock.nv.rm import _class_table, arch_from_env, ResourceManager
from baregrad.drivers.mock.nv.state import Channel, RMObject
from baregrad.drivers.mock.nv.uvm import UVM

def _comm() -> str:
  """The process name RM puts in Xid lines (name=...)."""
  try:
    with open("/proc/self/comm") as f: return f.read().strip()
  except OSError: return "python3"


class MockNVGPU(ResourceManager, UVM, HostChannels, GPUMMU, CopyEngine, ComputeEngine):
  """NVIDIA GPUs of one generation behind a mock NVIDIA kernel driver: `arch` (MOCKGPU_ARCH: sm_80, sm_86, sm_89,
  sm_90, sm_100, sm_120; default sm_90) picks what RM reports (MC architecture, SM version, classlist) and which
  classes it accepts; `count` (MOCKGPU_COUNT, default 1) how many GPUs NV_ESC_CARD_INFO lists; `p2p` whether RM
reports a PCIe P2P link between them (UVM_ENABLE_PEER_ACCESS). GPU i answers at
  /dev/nvidia<i> and to NV01_DEVICE_0 deviceId i, with its own UUID and PCI bus. The driver opens all GPUs of a
  process through one port (one mock: one kernel); each UVM VA space (an initialized /dev/nvidia-uvm fd) has its own
  GPUs, ranges and peer pairs, and each GPU VA space its own page tables (uvm.py, mmu.py)."""

  def __init__(self, driver_version: str = "580.95.05", vram_bytes: int = 80 << 30, sysmem_bytes: int = 64 << 30,
               gpcs: int = 8, tpc_per_gpc: int = 9, sm_per_tpc: int = 2, uuid: bytes = bytes(range(0x10, 0x20)),
               arch: str | None = None, count: int | None = None, p2p: bool = True) -> None:
    self.driver_version, self.vram_bytes, self.sysmem_bytes, self.uuid = driver_version, vram_bytes, sysmem_bytes, uuid
    self.gpcs, self.tpc_per_gpc, self.sm_per_tpc = gpcs, tpc_per_gpc, sm_per_tpc
    self.arch_info = arch_from_env(arch)
    self.arch = self.arch_info.sm
    if count is None:
      env = knobs.raw("MOCKGPU_COUNT") or "1"
      if not env.isdigit() or not 1 <= int(env) <= 32: raise ValueError(f"MOCKGPU_COUNT={env!r}: 1 to 32 GPUs")
      count = int(env)
    if not 1 <= count <= 32: raise ValueError(f"count={count}: 1 to 32 GPUs")
    self.count = count
    self.p2p = p2p   # RM's P2P capabilities list a PCIe link between every two GPUs (False: none, as behind no common switch)
    # GPU i: the same UUID with i added to its last byte, PCI bus i + 1, /dev/nvidia<i>
    self.uuids = [uuid[:-1] + bytes([(uuid[-1] + i) & 0xFF]) for i in range(count)]
    self.vram_used = self.sysmem_used = 0
    self.classes = _class_table(self.arch_info)
    self.classlist = [nv.NV01_ROOT_CLIENT] + sorted(self.classes)
    self.files: dict[int, dict[str, Any]] = {}
    self.clients: dict[int, dict[int, RMObject]] = {}
    self.channels: dict[int, Channel] = {}       # work-submit token -> channel
    self.scheduled_groups: set[tuple[int, int]] = set()
    self.maps: dict[int, tuple[int, Any]] = {}               # host mmaps the mock made: addr -> (length, memory or None)
    self.log: list[str] = []
    self.kmsg: list[tuple[int, str]] = []   # the kernel log (dmesg): (microseconds, line)
    self.kmsg_readable = True                # False: /dev/kmsg refuses us, as under kernel.dmesg_restrict=1
    self.process_name = _comm()
    self.launches: list[dict[str, int]] = []
    self.hazards: list[str] = []      # launches/copies that ran concurrently and touched the same memory
    self.violations: list[str] = []   # memory of a queued launch rewritten by the host
    self._next_fd, self._next_client, self._next_handle, self._next_token = 1000, 0xc1d00000, 0xcaf00000, 1
    self._lock = threading.RLock()
    self.uvm_registered = False
    self._ptx_cache: dict[str, Any] = {}
    self._ptx_mem: tuple[Any, Any] | None = None
    MACHINE.add(self)   # doorbells run every mock GPU of the process (common.py run_machine)

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
    with self._lock:
      f = self.files.pop(fd, None)
      if f is not None and f["kind"] == "uvm": self.uvm_close(f)

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
