"""The KFD process every AMDDevice of this Python process shares, one per kernel interface (port).

amdkfd keeps one kfd_process per address space (kfd_process.c: kfd_create_process finds the process of current->mm),
so each open of /dev/kfd is the same process, and what it holds is shared by every GPU the process drives:
- one event page (kfd_events.c: kfd_kmap_event_page refuses a second with -EINVAL), whose slots every GPU's signal
  events use; each GPU writes its events' slots, so the page (a GTT BO of the first GPU) is mapped into each GPU's VM;
- per GPU, the VM of the first DRM file that acquired it, for the process's life (kfd_chardev.c: kfd_ioctl_acquire_vm:
  the same file again is 0, another is -EBUSY), so the render node's file is opened once and kept;
- BOs of one GPU that another GPU's VM may map (kfd_ioctl_map_memory_to_gpu with the other gpu_id): host memory
  always; VRAM only where the kernel found the peer accessible (amdgpu_amdkfd_gpuvm.c: kfd_mem_attach ->
  amdgpu_device_is_peer_accessible), which the topology publishes as p2p links (kfd_topology.c: kfd_add_peer_prop).
Peer copies (hcq/peer.py) use the last: GPU B's SDMA engine reads GPU A's VRAM through B's page tables."""
from __future__ import annotations
import ctypes, threading
from typing import Any
from baregrad import knobs
from baregrad.ctypes_autogen import kfd
from baregrad.drivers.amd.topology import Node, TOPOLOGY, parse_properties, read_topology, _read
from baregrad.drivers.vmem import O_RDWR, O_CLOEXEC, PROT_RW, MAP_SHARED, MAP_FIXED, reserve_window

EVENT_PAGE = kfd.KFD_SIGNAL_EVENT_LIMIT * 8     # the event page: one 8-byte slot per signal event
EVENT_WINDOW = 0x3FF_0000_0000                  # where the process's own page (the event page) is placed: below the devices' windows

class KFDProcess:
  """What the AMDDevices on one port share (module docstring): the /dev/kfd fd, the topology, the render nodes' files,
  the event page, and which GPUs may map which GPUs' VRAM (the topology's p2p links)."""

  def __init__(self, port: Any) -> None:
    self.port = port
    self.fd_kfd = port.open("/dev/kfd", O_RDWR | O_CLOEXEC)
    self.nodes: list[Node] = read_topology(port)
    self.render: dict[str, int] = {}
    self.event_page: Any = None          # (va, size, handle, owner gpu_id), allocated by the first device
    self.event_mapped: set[int] = set()  # gpu ids whose VM maps the event page
    self._p2p: dict[int, set[int]] = {}
    self.lock = threading.RLock()

  def render_fd(self, path: str) -> int:
    """The render node's file, opened once: KFD keeps the VM of the file that acquired it (module docstring)."""
    with self.lock:
      if path not in self.render: self.render[path] = self.port.open(path, O_RDWR | O_CLOEXEC)
      return self.render[path]

  def peer_accessible(self, accessor: Node, owner: Node) -> bool:
    """Whether `accessor`'s GPU may map `owner`'s VRAM: a p2p link in the accessor's node from it to the owner
    (nodes/<accessor>/p2p_links/<n>/properties, node_from/node_to; kfd_topology.c: kfd_add_peer_prop adds the link to
    the peer's list only where amdgpu_device_is_peer_accessible(owner, peer))."""
    with self.lock:
      if accessor.index not in self._p2p:
        to: set[int] = set()
        for i in range(accessor.props.get("p2p_links_count", 0)):
          try: p = parse_properties(_read(self.port, f"{TOPOLOGY}/nodes/{accessor.index}/p2p_links/{i}/properties"))
          except OSError: break
          if p.get("node_from") == accessor.index and p.get("flags", 1): to.add(p.get("node_to", -1))
        self._p2p[accessor.index] = to
      return owner.index in self._p2p[accessor.index]

  def map_event_page(self, dev: Any) -> tuple[int, bool]:
    """The event page's handle for `dev`'s signal event, allocated by the first device (then True: it names the page in
    its CREATE_EVENT) and mapped into every device's VM (the GPU writes its events' slots)."""
    with self.lock:
      first = self.event_page is None
      if first:
        va = reserve_window(self.port, EVENT_WINDOW, EVENT_PAGE, dev.apertures["gpuvm_limit"] + 1)
        if va is None: raise RuntimeError(f"no free {EVENT_PAGE:#x}-byte address range for the KFD event page")
        flags = (kfd.KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE | kfd.KFD_IOC_ALLOC_MEM_FLAGS_GTT | kfd.KFD_IOC_ALLOC_MEM_FLAGS_COHERENT |
                 kfd.KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED) & 0xFFFFFFFF
        a = dev.kfd_ioctl(kfd.AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, kfd.struct_kfd_ioctl_alloc_memory_of_gpu_args(
          va_addr=va, size=EVENT_PAGE, gpu_id=dev.gpu_id, flags=flags), "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU(gtt, the event page)")
        self.port.mmap(va, EVENT_PAGE, PROT_RW, MAP_SHARED | MAP_FIXED, dev.fd_drm, a.mmap_offset)
        self.event_page = (va, EVENT_PAGE, a.handle, dev.gpu_id)
      if dev.gpu_id not in self.event_mapped:
        ids = (ctypes.c_uint32 * 1)(dev.gpu_id)
        dev.kfd_ioctl(kfd.AMDKFD_IOC_MAP_MEMORY_TO_GPU, kfd.struct_kfd_ioctl_map_memory_to_gpu_args(
          handle=self.event_page[2], device_ids_array_ptr=ctypes.addressof(ids), n_devices=1), "AMDKFD_IOC_MAP_MEMORY_TO_GPU(the event page)")
        self.event_mapped.add(dev.gpu_id)
      return self.event_page[2], first

_SHARED: dict[tuple, Any] = {}
_SHARED_LOCK = threading.Lock()

def shared_port(make: Any) -> Any:
  """The port every AMDDevice opened without one uses (one kernel, one KFD process): made by `make()` once per mock
  configuration (MOCKGPU, MOCKGPU_AMD_ARCH, MOCKGPU_COUNT), so the mock GPUs of one process are one mock amdkfd."""
  key = tuple(knobs.raw(k) for k in ("MOCKGPU", "MOCKGPU_AMD_ARCH", "MOCKGPU_COUNT"))
  with _SHARED_LOCK:
    if key not in _SHARED: _SHARED[key] = make()
    return _SHARED[key]

def process_for(port: Any) -> KFDProcess:
  """The KFD process of `port` (made with the first device opened through it, kept as long as the port)."""
  with _SHARED_LOCK:
    p = getattr(port, "_kfd_process", None)
    if p is None:
      p = KFDProcess(port)
      port._kfd_process = p
    return p
