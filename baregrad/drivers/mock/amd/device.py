"""MockAMDGPU: the files (/dev/kfd, the render nodes, the sysfs topology) and the ioctl entry (kfd_chardev.c:
kfd_ioctl and its table), joining amdkfd's model (kfd, kfd_memory, kfd_queues, kfd_events) and the GPU engines (vm, cp,
sdma)."""
from __future__ import annotations
from baregrad.drivers.mock.common import MACHINE
import ctypes, errno, threading
from baregrad import knobs
from typing import Any
from baregrad.ctypes_autogen import _support, kfd
from baregrad.drivers.amd.topology import TARGETS, TOPOLOGY
from baregrad.drivers.mock.amd.cp import CommandProcessor
from baregrad.drivers.mock.amd.kfd import KFD
from baregrad.drivers.mock.amd.kfd_events import KFDEvents
from baregrad.drivers.mock.amd.kfd_memory import KFDMemory
from baregrad.drivers.mock.amd.kfd_queues import KFDQueues
from baregrad.drivers.mock.amd.sdma import SDMAEngine
from baregrad.drivers.mock.amd.state import BO, Dispatch, DRM_FILE_PAGE_OFFSET_START, Event, GPU, KFDErr, Queue
from baregrad.drivers.mock.amd.topology import _CPU_PROPS, _props_text
from baregrad.drivers.mock.amd.vm import GPUVM

def _struct(base: type, extra: list[tuple[str, Any]]) -> type:
  return type(base.__name__ + "_6_12", (base,), {"_fields_": extra}) if extra else base

# 6.12 struct layouts where they grew since the bindings' 6.1 header
create_queue_args = _struct(kfd.struct_kfd_ioctl_create_queue_args, [("sdma_engine_id", ctypes.c_uint32), ("pad", ctypes.c_uint32)])



class MockAMDGPU(KFD, KFDMemory, KFDQueues, KFDEvents, GPUVM, CommandProcessor, SDMAEngine):
  """AMD GPUs behind a mock amdkfd/amdgpu. `arch` (MOCKGPU_AMD_ARCH: gfx1100 or gfx942, default gfx1100) and `count`
  (MOCKGPU_COUNT) pick the GPUs; `vram` their memory; `large_bar` whether all VRAM is CPU-visible; `p2p` whether the
  GPUs reach each other's VRAM over PCIe (amdgpu's pcie_p2p parameter, CONFIG_HSA_AMD_P2P and pci_p2pdma_distance
  together; with large_bar what amdgpu_device_is_peer_accessible asks); `deny` paths whose open fails with EACCES;
  `sysmem_limit` KFD's system-memory limit (userptr and GTT)."""

  def __init__(self, arch: str | None = None, count: int | None = None, vram: int = 24 << 30, large_bar: bool = True,
               deny: tuple[str, ...] = (), sysmem_limit: int = 48 << 30, skip_unexecutable: bool = False,
               ioctl_version: tuple[int, int] = (1, 17), slice_s: float = 0.5, p2p: bool = True) -> None:
    name = (arch or knobs.read("MOCKGPU_AMD_ARCH")).strip().lower()
    t = next((t for t in TARGETS.values() if t.name == name), None)
    if t is None: raise ValueError(f"MOCKGPU_AMD_ARCH={name!r}: the mock AMD GPU emulates {', '.join(t.name for t in TARGETS.values())}")
    if count is None:
      env = knobs.raw("MOCKGPU_COUNT") or "1"
      if not env.isdigit() or not 1 <= int(env) <= 16: raise ValueError(f"MOCKGPU_COUNT={env!r}: 1 to 16 GPUs")
      count = int(env)
    self.gpus = [GPU(i, t, vram) for i in range(count)]
    self.large_bar, self.deny, self.sysmem_limit, self.sysmem_used = large_bar, deny, sysmem_limit, 0
    self.p2p = p2p
    for g in self.gpus: g.props["p2p_links_count"] = sum(self.peer_accessible(o, g) for o in self.gpus if o is not g)
    self.skip_unexecutable, self.ioctl_version = skip_unexecutable, ioctl_version
    self.slice_s, self._slice_end = slice_s, 0.0   # interpreter time per doorbell (module docstring: Time slices)
    self.files: dict[int, dict[str, Any]] = {}
    self._next_fd, self._next_idr, self._next_offset = 2000, 1, DRM_FILE_PAGE_OFFSET_START
    self.pdd: dict[int, dict[str, Any]] = {}      # gpu_id -> {"drm": fd or None, "doorbells": Backing or None, ...}
    self.bos: dict[int, BO] = {}                  # handle -> BO
    self.queues: dict[int, Queue] = {}
    self.events: dict[int, Event] = {0: Event(0, -1, False)}   # id 0 is reserved (kfd_event_init_process)
    self.signal_page: tuple[int, int, int] | None = None        # (host address, size, handle or 0)
    self.signal_event_count = 1
    self.maps: dict[int, tuple[int, Any]] = {}    # host mmaps the mock made: addr -> (length, what)
    self.log: list[str] = []                      # what dmesg would say
    self.hazards: list[str] = []
    self.dispatches: list[Dispatch] = []
    self.xcc_writes: list[str] = []               # PM4 memory writes that more than one XCC executed (no PRED_EXEC)
    self._lock = threading.RLock()
    self._cond = threading.Condition(self._lock)
    MACHINE.add(self)   # doorbells run every mock GPU of the process (common.py run_machine)

  def gpu_by_id(self, gpu_id: int) -> GPU | None: return next((g for g in self.gpus if g.gpu_id == gpu_id), None)

  def peer_accessible(self, owner: GPU, accessor: GPU) -> bool:
    """amdgpu_device.c: amdgpu_device_is_peer_accessible(owner, accessor): `accessor` may DMA `owner`'s VRAM through
    the PCIe BAR: P2P allowed (pcie_p2p, CONFIG_HSA_AMD_P2P, pci_p2pdma_distance >= 0) and `owner` large-BAR."""
    return self.p2p and self.large_bar and owner is not accessor

  def open(self, path: str, flags: int) -> int:
    with self._lock:
      if path in self.deny: raise PermissionError(errno.EACCES, f"open {path} failed: EACCES (Permission denied)", path)
      f: dict[str, Any] | None = None
      if path == "/dev/kfd":
        if not self.pdd: self.pdd = {g.gpu_id: {"drm": None, "doorbells": None, "queues": 0, "db_ids": set(), "sdma": set(), "evicted": 0} for g in self.gpus}
        f = {"kind": "kfd"}
      elif path.startswith("/dev/dri/renderD") and path[16:].isdigit() and any(g.minor == int(path[16:]) for g in self.gpus):
        f = {"kind": "render", "gpu": next(g for g in self.gpus if g.minor == int(path[16:]))}
      elif path.startswith(TOPOLOGY + "/"):
        data = self._sysfs(path[len(TOPOLOGY) + 1:])
        if data is not None: f = {"kind": "sysfs", "data": data, "pos": 0}
      if f is None: raise FileNotFoundError(errno.ENOENT, f"open {path} failed: ENOENT (No such file or directory)", path)
      fd, self._next_fd = self._next_fd, self._next_fd + 1
      f["path"] = path
      self.files[fd] = f
      return fd

  def _sysfs(self, rel: str) -> bytes | None:
    parts = rel.split("/")
    if rel == "generation_id": return b"1\n"
    if rel == "system_properties": return b"platform_oem 0\nplatform_id 0\nplatform_rev 0\n"
    if len(parts) == 5 and parts[0] == "nodes" and parts[1].isdigit() and parts[2] == "p2p_links" and parts[3].isdigit() and parts[4] == "properties":
      return self._p2p_link(int(parts[1]), int(parts[3]))
    if len(parts) != 3 or parts[0] != "nodes" or not parts[1].isdigit(): return None
    n = int(parts[1])
    if n == 0: props, gpu_id, name = _CPU_PROPS, 0, ""
    elif n - 1 < len(self.gpus): g = self.gpus[n - 1]; props, gpu_id, name = g.props, g.gpu_id, g.target.name
    else: return None
    return {"properties": _props_text(props), "gpu_id": f"{gpu_id}\n".encode(), "name": f"{name}\n".encode()}.get(parts[2])

  def _p2p_link(self, n: int, i: int) -> bytes | None:
    """nodes/<n>/p2p_links/<i>/properties: kfd_topology.c: kfd_add_peer_prop puts a link from the accessor to the owner
    in the accessor's list where amdgpu_device_is_peer_accessible(owner, accessor) (kfd_dev_create_p2p_links: every
    pair of GPUs, both directions); iolink_show prints it (type 2: CRAT_IOLINK_TYPE_PCIEXPRESS; flags 1: ENABLED)."""
    if not 1 <= n <= len(self.gpus): return None
    me = self.gpus[n - 1]
    links = [o for o in self.gpus if o is not me and self.peer_accessible(o, me)]
    if i >= len(links): return None
    return _props_text(dict(type=2, version_major=0, version_minor=0, node_from=me.node, node_to=links[i].node, weight=40,
                            min_latency=0, max_latency=0, min_bandwidth=0, max_bandwidth=0, recommended_transfer_size=0,
                            recommended_sdma_engine_id_mask=0, flags=1))

  def close(self, fd: int) -> None:
    with self._lock: self.files.pop(fd, None)

  def read(self, fd: int, n: int) -> bytes:
    with self._lock:
      f = self.files.get(fd)
      if f is None: raise OSError(errno.EBADF, f"read: bad fd {fd}")
      if f["kind"] != "sysfs": raise OSError(errno.EINVAL, f"read of {f['path']}: not a sysfs file")
      out = f["data"][f["pos"]:f["pos"] + n]
      f["pos"] += len(out)
      return out

  def ioctl(self, fd: int, request: int, argp: int, argsize: int) -> int:
    wait = False
    with self._lock:
      f = self.files.get(fd)
      if f is None: return -errno.EBADF
      if f["kind"] != "kfd": return -errno.ENOTTY  # this mock models no DRM ioctls on the render node
      nr, typ, usize = request & 0xFF, (request >> 8) & 0xFF, (request >> 16) & 0x3FFF
      # kfd_ioctl: a number outside [AMDKFD_COMMAND_START, AMDKFD_COMMAND_END) is -ENOTTY
      if typ != kfd.AMDKFD_IOCTL_BASE or not kfd.AMDKFD_COMMAND_START <= nr < kfd.AMDKFD_COMMAND_END: return -errno.ENOTTY
      entry = self._ioctls.get(nr)
      if entry is None:
        self.log.append(f"mockamd: AMDKFD ioctl nr {nr:#x} is not modelled by this mock")
        return -errno.EINVAL
      name, ktype, kdir, fn = entry
      # kfd_ioctl: the kernel uses its own size and direction; the user's size only bounds the copies
      buf = (ctypes.c_char * max(ctypes.sizeof(ktype), usize))()
      if kdir & _support.IOC_WRITE: ctypes.memmove(buf, argp, usize)
      args = ktype.from_buffer(buf)
      wait = nr == (kfd.AMDKFD_IOC_WAIT_EVENTS & 0xFF)
      if not wait:
        try: ret = fn(self, args)
        except KFDErr as e:
          self.log.append(f"amdkfd: {name}: {e} (-{errno.errorcode.get(e.err, e.err)})")
          ret = -e.err
        if kdir & _support.IOC_READ: ctypes.memmove(argp, buf, usize)
        return ret
    # WAIT_EVENTS sleeps without the lock held (kfd_wait_on_events drops p->event_mutex while it sleeps)
    try: ret = self._wait_events(args)
    except KFDErr as e: ret = -e.err
    ctypes.memmove(argp, buf, usize)
    return ret

  def queue_state(self) -> str:
    with self._lock:
      out = []
      for q in self.queues.values():
        # the read pointer counts what the queue's rptr counts: AQL packets, SDMA bytes, PM4 dwords (state.Queue.rd)
        unit = {"aql": "packets", "sdma": "bytes", "pm4": "dwords"}.get(q.kind, "units")
        out.append(f"queue {q.qid} ({q.kind}) ring {q.ring:#x}: read pointer {q.rd} {unit}, packets done {q.done_packets}"
                   + (" INACTIVE" if not q.active else "") + (" EVICTED" if q.evicted else "")
                   + (f" BLOCKED {q.blocked}" if q.blocked else "") + (f" FAULT {q.fault}" if q.fault else "")
                   + (f" RUNNING {self._running_names(q)}" if q.running is not None else ""))
      return "\n".join(out)

  def dmesg(self) -> str: return "\n".join(self.log)

MockAMDGPU._ioctls = {
  kfd.AMDKFD_IOC_GET_VERSION & 0xFF: ("AMDKFD_IOC_GET_VERSION", kfd.struct_kfd_ioctl_get_version_args, _support.IOC_READ, MockAMDGPU._get_version),
  kfd.AMDKFD_IOC_CREATE_QUEUE & 0xFF: ("AMDKFD_IOC_CREATE_QUEUE", create_queue_args, 3, MockAMDGPU._create_queue),
  kfd.AMDKFD_IOC_DESTROY_QUEUE & 0xFF: ("AMDKFD_IOC_DESTROY_QUEUE", kfd.struct_kfd_ioctl_destroy_queue_args, 3, MockAMDGPU._destroy_queue),
  kfd.AMDKFD_IOC_GET_CLOCK_COUNTERS & 0xFF: ("AMDKFD_IOC_GET_CLOCK_COUNTERS", kfd.struct_kfd_ioctl_get_clock_counters_args, 3, MockAMDGPU._clock_counters),
  kfd.AMDKFD_IOC_CREATE_EVENT & 0xFF: ("AMDKFD_IOC_CREATE_EVENT", kfd.struct_kfd_ioctl_create_event_args, 3, MockAMDGPU._create_event),
  kfd.AMDKFD_IOC_DESTROY_EVENT & 0xFF: ("AMDKFD_IOC_DESTROY_EVENT", kfd.struct_kfd_ioctl_destroy_event_args, _support.IOC_WRITE, MockAMDGPU._destroy_event),
  kfd.AMDKFD_IOC_SET_EVENT & 0xFF: ("AMDKFD_IOC_SET_EVENT", kfd.struct_kfd_ioctl_set_event_args, _support.IOC_WRITE, MockAMDGPU._set_event),
  kfd.AMDKFD_IOC_RESET_EVENT & 0xFF: ("AMDKFD_IOC_RESET_EVENT", kfd.struct_kfd_ioctl_reset_event_args, _support.IOC_WRITE, MockAMDGPU._reset_event),
  kfd.AMDKFD_IOC_WAIT_EVENTS & 0xFF: ("AMDKFD_IOC_WAIT_EVENTS", kfd.struct_kfd_ioctl_wait_events_args, 3, None),
  kfd.AMDKFD_IOC_GET_PROCESS_APERTURES_NEW & 0xFF: ("AMDKFD_IOC_GET_PROCESS_APERTURES_NEW", kfd.struct_kfd_ioctl_get_process_apertures_new_args, 3,
                                                    MockAMDGPU._apertures_new),
  kfd.AMDKFD_IOC_ACQUIRE_VM & 0xFF: ("AMDKFD_IOC_ACQUIRE_VM", kfd.struct_kfd_ioctl_acquire_vm_args, _support.IOC_WRITE, MockAMDGPU._acquire_vm),
  kfd.AMDKFD_IOC_ALLOC_MEMORY_OF_GPU & 0xFF: ("AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", kfd.struct_kfd_ioctl_alloc_memory_of_gpu_args, 3, MockAMDGPU._alloc),
  kfd.AMDKFD_IOC_FREE_MEMORY_OF_GPU & 0xFF: ("AMDKFD_IOC_FREE_MEMORY_OF_GPU", kfd.struct_kfd_ioctl_free_memory_of_gpu_args, _support.IOC_WRITE,
                                             MockAMDGPU._free),
  kfd.AMDKFD_IOC_MAP_MEMORY_TO_GPU & 0xFF: ("AMDKFD_IOC_MAP_MEMORY_TO_GPU", kfd.struct_kfd_ioctl_map_memory_to_gpu_args, 3, MockAMDGPU._map),
  kfd.AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU & 0xFF: ("AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU", kfd.struct_kfd_ioctl_unmap_memory_from_gpu_args, 3, MockAMDGPU._unmap),
  kfd.AMDKFD_IOC_AVAILABLE_MEMORY & 0xFF: ("AMDKFD_IOC_AVAILABLE_MEMORY", kfd.struct_kfd_ioctl_get_available_memory_args, 3, MockAMDGPU._available),
}
