"""AMD: AMD GPUs driven through amdkfd (/dev/kfd) and the GPU's DRM render node, with no ROCr/libhsa.

Opening: /dev/kfd (opened once per port: the devices of one process share the KFD process, its event page and the
render nodes' files, process.py); AMDKFD_IOC_GET_VERSION (interface major 1; anything else is refused by name); the topology from
/sys/devices/virtual/kfd/kfd/topology/nodes/*/{gpu_id,properties} (read through the port); the n-th GPU node for AMD:n,
its gfx target (gfx1100 and gfx942; any other is refused by name); its render node /dev/dri/renderD<drm_render_minor>;
AMDKFD_IOC_ACQUIRE_VM with that fd (KFD takes over the render node's GPU VM); the process apertures; a host address
window (PROT_NONE, reserved) inside which every GPU virtual address is allocated, so a BO's CPU mapping and its GPU
address are one and the same number.

Peer copies (hcq/peer.py): where the topology lists a p2p link to another GPU of the process, this GPU maps that GPU's
VRAM BOs into its VM (MAP_MEMORY_TO_GPU with its own gpu_id) and its SDMA engine reads them; a BO is unmapped from every
GPU that maps it before it is freed.

Memory (AMDKFD_IOC_ALLOC_MEMORY_OF_GPU + MAP_MEMORY_TO_GPU): device buffers in VRAM (GPU only); code in VRAM the CPU
writes through the render node mmap (the large BAR), followed by an HDP flush through the MMIO remap page; host memory
the GPU sees (signals, kernel arguments, rings, staging) as userptr BOs over anonymous pages at their own address; the
KFD event page in GTT (mapped through the render node); the process doorbell slice (mapped from /dev/kfd at the offset
CREATE_QUEUE returns, and as a BO the GPU can write); the MMIO remap page. GPU memory exhausted raises OutOfMemory with
nothing left allocated.

Queues: an AQL compute queue (ring, read/write dispatch ids in an amd_queue_t-shaped page, EOP buffer, a context-save
area sized from the topology as the kernel computes it) and an SDMA copy queue; their commands are in queues.py (which
explains why the compute queue mixes AQL and PM4, and what is known and unverified about gfx942's 8 XCCs). Scratch
(the private segment) is VRAM described to the CP in the amd_queue_t, sized from the code objects' private segment
sizes and the topology, grown (with the queue idle) when a program needs more: scratch.py has the rules and sources.
Host waits spin briefly, then sleep in AMDKFD_IOC_WAIT_EVENTS on the KFD signal event every GPU signal raises, always
with a timeout; a VM fault (KFD memory event) or a GPU hang/reset (KFD hardware-exception event) raises AMDFault at once,
with the event's data and the queues decoded.

Recovery (faults.py has what KFD reports and leaves usable): after a fault, and after a wait on the device's timeline
(or for its queues to drain) that timed out (AMDQueueTimeout, naming the queue and the packet or dispatch it was at), the
device destroys its queues (AMDKFD_IOC_DESTROY_QUEUE: KFD preempts what still runs), creates them again on the same
rings, advances the timeline to what was submitted (the work in flight is lost; buffers are kept) and checks with a
probe signal on each engine that the new queues run. Where they do not (KFD keeps a process's queues evicted after a
VM fault or a whole-GPU reset), the device is lost for this process: AMDDeviceLost from then on, naming the cause. A
timeout on a signal of the caller's own (not the timeline) only raises: the caller may still release what the queue
waits for.

MOCKGPU=1 runs against baregrad.drivers.mock.amd.MockAMDGPU through the port (MOCKGPU_AMD_ARCH=gfx1100|gfx942,
MOCKGPU_COUNT=n); IOCTL_TRACE=1 prints every call; AMD_CAPTURE=DIR keeps every submission's command bytes (the AQL
packets, their PM4 IBs and kernargs, the SDMA packets) for tools/amd_decode.py, and each launch's code object and
buffers for its replay (hcq/capture.py, hcq/replay.py)."""
from __future__ import annotations
import ctypes, errno, threading, time
from typing import Any, Hashable
from baregrad import knobs
from baregrad.hal import OutOfMemory, DeviceUnavailable
from baregrad.hcq import HCQAllocator, HCQBuffer, HCQDevice, HCQSignal, where_is
from baregrad.hcq.capture import CaptureWriter
from baregrad.drivers.port import (IoctlError, driver_port, register_ioctl, header_names, enum_words, flag_words, register_field_words,
                                   register_pointer)
from baregrad.drivers.vmem import (PROT_RW, MAP_SHARED, MAP_PRIVATE, MAP_FIXED, MAP_ANON, PAGE,
                                   VAAllocator, release_to_window, reserve_window, round_up)
from baregrad.ctypes_autogen import kfd
from baregrad.drivers.amd import hw
from baregrad.drivers.amd.topology import TARGETS, Node, QueueSizes, queue_sizes, target_name
from baregrad.drivers.amd.process import process_for, shared_port
from baregrad.drivers.amd.queues import QUEUES, AQLRing, SDMARing
from baregrad.drivers.amd import scratch
from baregrad.drivers.amd.program import AMDProgram
from baregrad.drivers.amd.faults import AMDFault, AMDDeviceLost, AMDQueueTimeout, describe_hw_exception, describe_memory_exception

WINDOW = (0x400_0000_0000, 0x80_0000_0000)     # (first base tried, size): 512 GiB of GPU/CPU addresses per device
DOORBELL_SLICE = 8 * 1024                      # 8-byte doorbells x KFD_MAX_NUM_OF_QUEUES_PER_PROCESS (kfd_doorbell_process_slice)
KFD_MAJOR = 1
AQL_RING, SDMA_RING, IB_AREA = 1 << 20, 1 << 20, 1 << 20
# amd_queue_t (ROCr amd_hsa_queue.h): where the CP finds the dispatch ids of an AQL queue
AMD_QUEUE_WRITE_DISPATCH_ID, AMD_QUEUE_READ_DISPATCH_ID, AMD_QUEUE_READ_ID_BASE = 0x38, 0x80, 0x88
EV = {"signal": kfd.KFD_IOC_EVENT_SIGNAL, "memory": kfd.KFD_IOC_EVENT_MEMORY, "hw_exception": kfd.KFD_IOC_EVENT_HW_EXCEPTION}
F = kfd

class AMDMemory:
  """What the driver keeps per KFD BO."""
  def __init__(self, handle: int, size: int, va: int, cpu: int | None, domain: str) -> None:
    self.handle, self.size, self.va, self.cpu, self.domain = handle, size, va, cpu, domain
    self.peers: set[int] = set()   # gpu ids of other GPUs whose VM maps it too (peer copies)
  @property
  def what(self) -> str: return f"a {self.domain} buffer"
  def __repr__(self) -> str: return f"<AMDMemory {self.domain} va={self.va:#x} size={self.size:#x}>"

class AMDAllocator(HCQAllocator):
  def _alloc(self, size: int, options: Hashable | None) -> HCQBuffer:
    host = bool(getattr(options, "host", False)) or options == "host"
    m = self.dev._gpu_alloc(size, "userptr" if host else "vram")
    return HCQBuffer(m.va, size, m.cpu, meta=m)
  def _free(self, opaque: HCQBuffer, size: int, options: Hashable | None) -> None:
    if self.dev._lost is None: self.dev.synchronize()   # a lost device runs nothing that could still use it
    self.dev._gpu_free(opaque.meta)

class AMDDevice(HCQDevice):
  has_local, has_threads = True, True
  max_local_size = (1024, 1024, 1024)
  probe_ms = 2000         # how long recreated queues get to run a probe signal (microseconds on hardware; evicted ones never do)
  ticks_per_us = 100.0    # the GPU's global timestamp counter: 100 MHz (RELEASE_MEM GPU clock, SDMA TIMESTAMP_GET_GLOBAL)

  def __init__(self, device: str, port: Any = None) -> None:
    if port is None:   # one port (one kernel, one KFD process) for every device opened without one (process.py)
      try: port = shared_port(lambda: driver_port("AMD"))   # MOCKGPU=1: the mock GPUs (MOCKGPU_AMD_ARCH, MOCKGPU_COUNT)
      except ValueError as e: raise DeviceUnavailable(f"{device}: mock GPU: {e}") from None
    self.port, self.closed = port, False
    self.index = int(device.split(":")[-1]) if device.split(":")[-1].isdigit() else 0
    self.memories: list[AMDMemory] = []
    self.window: tuple[int, int] | None = None
    self.aql: AQLRing | None = None
    self.sdma: SDMARing | None = None
    self.scratch: tuple[scratch.ScratchLayout, AMDMemory] | None = None
    self._scratch_lock = threading.Lock()
    self._fault_checked, self._kicked = 0.0, 0.0
    self._lost: str | None = None        # why the device cannot run work any more (AMDDeviceLost)
    self._recovering = False
    self.kernel_names: dict[int, str] = {}   # kernel descriptor address -> kernel name (AMDProgram registers), for messages
    self.kernarg_sizes: dict[int, int] = {}  # kernel descriptor address -> its kernarg segment bytes (for AMD_CAPTURE)
    self.capture: CaptureWriter | None = None   # AMD_CAPTURE=DIR, made once the target is known (hcq/capture.py)
    try:
      self.proc = process_for(port)
      self.fd_kfd = self.proc.fd_kfd
    except FileNotFoundError:
      raise DeviceUnavailable(f"{device}: /dev/kfd not found (no amdgpu/amdkfd kernel driver here); set MOCKGPU=1 for the mock GPU") from None
    except PermissionError as e:
      raise DeviceUnavailable(f"{device}: cannot open /dev/kfd: {e} (the user needs the 'render' group, or access to /dev/kfd)") from None
    try: self._init_kfd(device)
    except BaseException:
      self._abandon()
      raise
    self.is_mock = hasattr(getattr(port, "inner", port), "mock")
    renderer, compiler = _toolchain(self.target.name)
    # the optimizer spreads long reductions over every CU (KFD's node properties count SIMDs over all XCCs)
    if renderer is not None: renderer.compute_units = self.node.props["simd_count"] // self.node.props["simd_per_cu"]
    self.max_shared_mem = self.node.props.get("lds_size_in_kb", 64) * 1024
    try:
      super().__init__(device, None, renderer, compiler, AMDProgram, *QUEUES[self.family], kernargs_size=1 << 20, signal_pool_size=64 << 10)
      self.allocator = AMDAllocator(self)
      self._init_queues()
      if (d := knobs.read("AMD_CAPTURE")): self.capture = CaptureWriter(d, "AMD", self.target.name, device)
    except BaseException:
      self._abandon()
      raise

  # ---------------------------------------------------------------- syscalls
  def kfd_ioctl(self, request: int, args: Any, name: str) -> Any:
    """One AMDKFD ioctl; failures raise IoctlError naming it, the errno and the parameters."""
    self.port.ioctl(self.fd_kfd, request, args, name)
    return args

  # ---------------------------------------------------------------- opening
  def _init_kfd(self, device: str) -> None:
    _register_ioctls()
    v = self.kfd_ioctl(kfd.AMDKFD_IOC_GET_VERSION, kfd.struct_kfd_ioctl_get_version_args(), "AMDKFD_IOC_GET_VERSION")
    self.kfd_version = (v.major_version, v.minor_version)
    if v.major_version != KFD_MAJOR:
      raise DeviceUnavailable(f"{device}: KFD ioctl interface {v.major_version}.{v.minor_version}; this driver speaks major version {KFD_MAJOR} "
                              f"(kfd_ioctl.h KFD_IOCTL_MAJOR_VERSION)")
    nodes = self.proc.nodes
    gpus = [n for n in nodes if n.is_gpu]
    if self.index >= len(gpus):
      raise DeviceUnavailable(f"{device}: the KFD topology lists {len(gpus)} GPU(s) ({len(nodes)} nodes)")
    self.node: Node = gpus[self.index]
    self.gpu_id = self.node.gpu_id
    ver = self.node.props.get("gfx_target_version", 0)
    t = TARGETS.get(ver)
    if t is None:
      raise DeviceUnavailable(f"{device}: GPU node {self.node.index} is a {target_name(ver)} (gfx_target_version {ver}); this driver supports "
                              f"{', '.join(t.name for t in TARGETS.values())}")
    self.target, self.family, self.arch = t, t.family, t.name
    if self.node.props.get("wave_front_size") not in (None, t.wave_size):
      raise DeviceUnavailable(f"{device}: {t.name} reports wave size {self.node.props['wave_front_size']}, expected {t.wave_size}")
    self.sizes: QueueSizes = queue_sizes(self.node.props)
    minor = self.node.props["drm_render_minor"]
    self.render_path = f"/dev/dri/renderD{minor}"
    try: self.fd_drm = self.proc.render_fd(self.render_path)
    except FileNotFoundError: raise DeviceUnavailable(f"{device}: {self.render_path} (the render node of GPU node {self.node.index}) does not exist") from None
    except PermissionError as e: raise DeviceUnavailable(f"{device}: cannot open {self.render_path}: {e} (the user needs the 'render' group)") from None
    self.kfd_ioctl(kfd.AMDKFD_IOC_ACQUIRE_VM, kfd.struct_kfd_ioctl_acquire_vm_args(drm_fd=self.fd_drm, gpu_id=self.gpu_id), "AMDKFD_IOC_ACQUIRE_VM")
    self.apertures = self._apertures()
    # a host window for every GPU VA: inside the GPUVM aperture, fails cleanly where something already lives
    size = WINDOW[1]
    base = reserve_window(self.port, WINDOW[0], size, self.apertures["gpuvm_limit"] + 1)
    if base is None:
      raise DeviceUnavailable(f"{device}: no free {size:#x}-byte address window inside the GPUVM aperture (up to {self.apertures['gpuvm_limit']:#x})")
    self.window = (base, size)
    self.va = VAAllocator(base, size)
    # the process's special pages
    self.mmio = self._gpu_alloc(PAGE, "mmio")
    self.doorbell_bo = self._gpu_alloc(DOORBELL_SLICE, "doorbell")
    # the process's event page (process.py: one per process, mapped for every GPU); this device's own events
    page, first = self.proc.map_event_page(self)
    ev = self._create_event(EV["signal"], page=page if first else 0)
    self.event_id, self.event_mailbox = ev.event_id, self.proc.event_page[0] + 8 * ev.event_slot_index
    self.memory_event = self._create_event(EV["memory"]).event_id
    self.hw_event = self._create_event(EV["hw_exception"]).event_id

  def _apertures(self) -> dict[str, int]:
    n = self.kfd_ioctl(kfd.AMDKFD_IOC_GET_PROCESS_APERTURES_NEW, kfd.struct_kfd_ioctl_get_process_apertures_new_args(),
                       "AMDKFD_IOC_GET_PROCESS_APERTURES_NEW").num_of_nodes
    arr = (kfd.struct_kfd_process_device_apertures * max(n, 1))()
    a = self.kfd_ioctl(kfd.AMDKFD_IOC_GET_PROCESS_APERTURES_NEW, kfd.struct_kfd_ioctl_get_process_apertures_new_args(
      kfd_process_device_apertures_ptr=ctypes.addressof(arr), num_of_nodes=n), "AMDKFD_IOC_GET_PROCESS_APERTURES_NEW")
    for ap in arr[:a.num_of_nodes]:
      if ap.gpu_id == self.gpu_id: return {k: getattr(ap, k) for k in ("lds_base", "lds_limit", "scratch_base", "scratch_limit", "gpuvm_base", "gpuvm_limit")}
    raise DeviceUnavailable(f"{self.node.index}: KFD reports no apertures for gpu_id {self.gpu_id:#x}")

  def _create_event(self, etype: int, page: int = 0) -> Any:
    a = kfd.struct_kfd_ioctl_create_event_args(event_page_offset=page, event_type=etype, auto_reset=1, node_id=self.node.index)
    return self.kfd_ioctl(kfd.AMDKFD_IOC_CREATE_EVENT, a, "AMDKFD_IOC_CREATE_EVENT")

  def _init_queues(self) -> None:
    # the AQL compute queue
    ring = self._gpu_alloc(AQL_RING, "userptr")
    ptrs = self._gpu_alloc(PAGE, "userptr")
    ctypes.memset(ptrs.cpu, 0, PAGE)
    # an amd_queue_t: hsa_queue_t (type 0 multi-producer, features 1 kernel dispatch, base_address, size in packets), then
    # where read_dispatch_id lives (the CP finds the structure from the read pointer KFD gives it)
    ctypes.c_uint32.from_address(ptrs.cpu + 4).value = 1
    ctypes.c_uint64.from_address(ptrs.cpu + 8).value = ring.va
    ctypes.c_uint32.from_address(ptrs.cpu + 24).value = ring.size // 64
    ctypes.c_uint32.from_address(ptrs.cpu + AMD_QUEUE_READ_ID_BASE).value = AMD_QUEUE_READ_DISPATCH_ID
    # what ROCr fills besides (amd_aql_queue.cpp AqlQueue::AqlQueue): CU and wave limits, 64-bit pointers, the apertures
    p = self.node.props
    for off, v in ((scratch.Q_MAX_CU_ID, p["simd_count"] // p["simd_per_cu"] - 1),
                   (scratch.Q_MAX_WAVE_ID, p.get("max_waves_per_simd", 16) * p["simd_per_cu"] - 1),
                   (scratch.Q_PROPERTIES, scratch.AMD_QUEUE_PROPERTIES_IS_PTR64), (scratch.Q_GROUP_APERTURE_HI, self.apertures["lds_base"] >> 32),
                   (scratch.Q_PRIVATE_APERTURE_HI, self.apertures["scratch_base"] >> 32)):
      ctypes.c_uint32.from_address(ptrs.cpu + off).value = v
    self.amd_queue_va, self.amd_queue_cpu = ptrs.va, ptrs.cpu
    eop = self._gpu_alloc(self.sizes.eop_buffer_size, "vram")
    ctx = self._gpu_alloc(self.sizes.cwsr_total, "vram")
    ib = self._gpu_alloc(IB_AREA, "userptr")
    sring = self._gpu_alloc(SDMA_RING, "userptr")
    sptrs = self._gpu_alloc(PAGE, "userptr")
    ctypes.memset(sptrs.cpu, 0, PAGE)
    self._queue_mem = (ring, ptrs, eop, ctx, ib, sring, sptrs)
    self._create_queues()

  def _create_queues(self) -> None:
    """AMDKFD_IOC_CREATE_QUEUE for the compute and copy queues on the memory _init_queues allocated (also what recovery
    runs again, with the rings emptied and the read/write pointers back at 0)."""
    ring, ptrs, eop, ctx, ib, sring, sptrs = self._queue_mem
    self.queue_ids = []
    q = self.kfd_ioctl(kfd.AMDKFD_IOC_CREATE_QUEUE, kfd.struct_kfd_ioctl_create_queue_args(
      ring_base_address=ring.va, ring_size=ring.size, gpu_id=self.gpu_id, queue_type=kfd.KFD_IOC_QUEUE_TYPE_COMPUTE_AQL,
      queue_percentage=kfd.KFD_MAX_QUEUE_PERCENTAGE, queue_priority=7, write_pointer_address=ptrs.va + AMD_QUEUE_WRITE_DISPATCH_ID,
      read_pointer_address=ptrs.va + AMD_QUEUE_READ_DISPATCH_ID, eop_buffer_address=eop.va, eop_buffer_size=eop.size,
      ctx_save_restore_address=ctx.va, ctx_save_restore_size=self.sizes.cwsr_size, ctl_stack_size=self.sizes.ctl_stack_size),
      "AMDKFD_IOC_CREATE_QUEUE")
    self.queue_ids.append(q.queue_id)
    if getattr(self, "doorbells", None) is None: self.doorbells = self._map_doorbells(q.doorbell_offset)
    elif (q.doorbell_offset & ~(DOORBELL_SLICE - 1)) != self.doorbell_mmap_offset:
      raise RuntimeError(f"{self.device}: the new compute queue's doorbell offset {q.doorbell_offset:#x} "
                         f"is outside the process doorbell slice {self.doorbell_mmap_offset:#x}")
    self.aql = AQLRing(self, ring, ptrs, AMD_QUEUE_WRITE_DISPATCH_ID, AMD_QUEUE_READ_DISPATCH_ID,
                       self.doorbells + (q.doorbell_offset & (DOORBELL_SLICE - 1)), ib)
    # the SDMA copy queue
    s = self.kfd_ioctl(kfd.AMDKFD_IOC_CREATE_QUEUE, kfd.struct_kfd_ioctl_create_queue_args(
      ring_base_address=sring.va, ring_size=sring.size, gpu_id=self.gpu_id, queue_type=kfd.KFD_IOC_QUEUE_TYPE_SDMA,
      queue_percentage=kfd.KFD_MAX_QUEUE_PERCENTAGE, queue_priority=7, write_pointer_address=sptrs.va, read_pointer_address=sptrs.va + 8),
      "AMDKFD_IOC_CREATE_QUEUE")
    self.queue_ids.append(s.queue_id)
    if (s.doorbell_offset & ~(DOORBELL_SLICE - 1)) != self.doorbell_mmap_offset:
      raise RuntimeError(f"{self.device}: the SDMA queue's doorbell offset {s.doorbell_offset:#x} "
                         f"is outside the process doorbell slice {self.doorbell_mmap_offset:#x}")
    self.sdma = SDMARing(self, sring, sptrs, 0, 8, self.doorbells + (s.doorbell_offset & (DOORBELL_SLICE - 1)))
    if (watch := getattr(self.port, "watch_doorbell", None)) is not None:   # IOCTL_TRACE: each ring followed by what it submitted
      watch(self.aql.doorbell, self.aql.submitted)
      watch(self.sdma.doorbell, self.sdma.submitted)

  def _map_doorbells(self, doorbell_offset: int) -> int:
    """The process doorbell slice: an mmap of /dev/kfd at the (page-aligned) doorbell offset CREATE_QUEUE returned."""
    self.doorbell_mmap_offset = doorbell_offset & ~(DOORBELL_SLICE - 1)
    va = self.va.alloc(DOORBELL_SLICE)
    return self.port.mmap(va, DOORBELL_SLICE, PROT_RW, MAP_SHARED | MAP_FIXED, self.fd_kfd, self.doorbell_mmap_offset)

  def _abandon(self) -> None:
    """A failed open (or a close) gives back what it took: its BOs and events (the KFD process and its files stay for
    the other devices and a later open: process.py), then its address window."""
    for m in list(self.memories):
      try: self._gpu_free(m)
      except Exception: pass
    for eid in (getattr(self, k, None) for k in ("event_id", "memory_event", "hw_event")):
      if eid is None: continue
      try: self.kfd_ioctl(kfd.AMDKFD_IOC_DESTROY_EVENT, kfd.struct_kfd_ioctl_destroy_event_args(event_id=eid), "AMDKFD_IOC_DESTROY_EVENT")
      except Exception: pass
    self.event_id = self.memory_event = self.hw_event = None
    if self.window is not None:
      try: self.port.munmap(*self.window)
      except OSError: pass
      self.window = None

  # ---------------------------------------------------------------- memory
  def _gpu_alloc(self, size: int, domain: str, cpu_access: bool = False) -> AMDMemory:
    """A BO of `domain` (vram, gtt, userptr, doorbell, mmio) mapped for this GPU at a VA of the window (and for the CPU at
    the same address where it has a CPU side). OutOfMemory when KFD says -ENOMEM."""
    size = round_up(max(size, 1), PAGE)
    # big VRAM buffers start on 2 MiB (huge-page) boundaries; sizes stay page-rounded: KFD wants queue buffers to be
    # mappings of exactly the size it expects (kfd_queue.c: kfd_queue_buffer_get)
    align = (2 << 20) if domain == "vram" and size >= (2 << 20) else PAGE
    va = self.va.alloc(size, align)
    cpu: int | None = None
    handle = 0
    try:
      flags = F.KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE & 0xFFFFFFFF
      if domain == "userptr":
        cpu = self.port.mmap(va, size, PROT_RW, MAP_PRIVATE | MAP_ANON | MAP_FIXED, -1, 0)
        flags |= (F.KFD_IOC_ALLOC_MEM_FLAGS_USERPTR | F.KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE |
                  F.KFD_IOC_ALLOC_MEM_FLAGS_COHERENT | F.KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED)
        off = va
      elif domain == "gtt": flags |= F.KFD_IOC_ALLOC_MEM_FLAGS_GTT | F.KFD_IOC_ALLOC_MEM_FLAGS_COHERENT | F.KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED; off = 0
      elif domain == "vram":
        flags |= F.KFD_IOC_ALLOC_MEM_FLAGS_VRAM | F.KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE | (F.KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC if cpu_access else 0)
        off = 0
      elif domain == "doorbell": flags |= F.KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL | F.KFD_IOC_ALLOC_MEM_FLAGS_COHERENT | F.KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED; off = 0
      elif domain == "mmio": flags |= F.KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP | F.KFD_IOC_ALLOC_MEM_FLAGS_COHERENT | F.KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED; off = 0
      else: raise ValueError(f"unknown memory domain {domain!r}")
      a = kfd.struct_kfd_ioctl_alloc_memory_of_gpu_args(va_addr=va, size=size, gpu_id=self.gpu_id, flags=flags, mmap_offset=off)
      try: self.kfd_ioctl(kfd.AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, a, f"AMDKFD_IOC_ALLOC_MEMORY_OF_GPU({domain})")
      except IoctlError as e:
        if e.err != errno.ENOMEM: raise
        used = self.allocator.mem_used if getattr(self, "allocator", None) else 0
        raise OutOfMemory(self.device, size, used, f"KFD returned ENOMEM for a {domain} allocation") from None
      handle = a.handle
      ids = (ctypes.c_uint32 * 1)(self.gpu_id)
      self.kfd_ioctl(kfd.AMDKFD_IOC_MAP_MEMORY_TO_GPU, kfd.struct_kfd_ioctl_map_memory_to_gpu_args(
        handle=handle, device_ids_array_ptr=ctypes.addressof(ids), n_devices=1), f"AMDKFD_IOC_MAP_MEMORY_TO_GPU({domain})")
      if domain == "mmio": cpu = self.port.mmap(va, PAGE, PROT_RW, MAP_SHARED | MAP_FIXED, self.fd_kfd, a.mmap_offset)
      elif cpu_access and domain in ("gtt", "vram"): cpu = self.port.mmap(va, size, PROT_RW, MAP_SHARED | MAP_FIXED, self.fd_drm, a.mmap_offset)
    except BaseException:
      if handle:
        try: self._release_bo(handle, mapped=True)
        except Exception: pass
      if cpu is not None: self._unmap_cpu(va, size)
      self.va.release(va, size)
      raise
    m = AMDMemory(handle, size, va, cpu, domain)
    self.memories.append(m)
    return m

  def _release_bo(self, handle: int, mapped: bool, peers: set[int] | frozenset[int] = frozenset()) -> None:
    # a BO still mapped on any GPU is not freed (amdgpu_amdkfd_gpuvm_free_memory_of_gpu: -EBUSY): unmapped from the
    # peers that map it first, then from its own GPU
    if mapped:
      ids = (ctypes.c_uint32 * (1 + len(peers)))(*sorted(peers), self.gpu_id)
      try:
        self.kfd_ioctl(kfd.AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU, kfd.struct_kfd_ioctl_unmap_memory_from_gpu_args(
          handle=handle, device_ids_array_ptr=ctypes.addressof(ids), n_devices=len(ids)), "AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU")
      except IoctlError as e:
        if e.err != errno.ENOMEM: raise   # not mapped yet (a failed map): nothing to undo
    self.kfd_ioctl(kfd.AMDKFD_IOC_FREE_MEMORY_OF_GPU, kfd.struct_kfd_ioctl_free_memory_of_gpu_args(handle=handle), "AMDKFD_IOC_FREE_MEMORY_OF_GPU")

  def _unmap_cpu(self, va: int, size: int) -> None:
    release_to_window(self.port, va, size)

  def _gpu_free(self, m: AMDMemory) -> None:
    self._release_bo(m.handle, mapped=True, peers=m.peers)
    if m.cpu is not None: self._unmap_cpu(m.va, m.size)
    self.va.release(m.va, m.size)
    self.memories.remove(m)

  def _alloc_shared(self, size: int) -> HCQBuffer:
    m = self._gpu_alloc(size, "userptr")
    return HCQBuffer(m.va, size, m.cpu, meta=m)

  def _import_host(self, buf: HCQBuffer) -> AMDMemory:
    """Host pages of the process (a peer link's anonymous pages; or another device's host memory) mapped for this GPU
    at their own address: a userptr BO of this GPU over them (KFD pins them for each BO: amdgpu_amdkfd_gpuvm.c
    init_user_pages), so several GPUs' queues read and write the one copy (a peer link's slots and counters)."""
    assert buf.cpu_addr is not None and buf.cpu_addr == buf.va_addr, "(HCQDevice.import_host checks this)"
    size = round_up(buf.size, PAGE)
    flags = (F.KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE | F.KFD_IOC_ALLOC_MEM_FLAGS_USERPTR | F.KFD_IOC_ALLOC_MEM_FLAGS_COHERENT |
             F.KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED) & 0xFFFFFFFF
    a = kfd.struct_kfd_ioctl_alloc_memory_of_gpu_args(va_addr=buf.va_addr, size=size, gpu_id=self.gpu_id, flags=flags, mmap_offset=buf.cpu_addr)
    self.kfd_ioctl(kfd.AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, a, "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU(userptr, imported host pages)")
    ids = (ctypes.c_uint32 * 1)(self.gpu_id)
    try:
      self.kfd_ioctl(kfd.AMDKFD_IOC_MAP_MEMORY_TO_GPU, kfd.struct_kfd_ioctl_map_memory_to_gpu_args(
        handle=a.handle, device_ids_array_ptr=ctypes.addressof(ids), n_devices=1), "AMDKFD_IOC_MAP_MEMORY_TO_GPU(imported host pages)")
    except BaseException:
      self._release_bo(a.handle, mapped=False)
      raise
    m = AMDMemory(a.handle, size, buf.va_addr, None, "userptr")
    self.memories.append(m)
    return m

  def _unimport(self, m: AMDMemory) -> None:
    self.synchronize()   # (a queued copy may still read it)
    self._release_bo(m.handle, mapped=True)
    self.memories.remove(m)

  # ---------------------------------------------------------------- peer mappings (process.py, hcq/peer.py)
  def peer_map(self, src: Any) -> bool:
    """Whether this GPU may map src's VRAM (both in this KFD process, a p2p link from this GPU's node to src's in the
    topology); if so each GPU's VM maps the other's signal page, so each queue can wait on the other's timeline."""
    if type(src) is not type(self) or src is self or getattr(src, "proc", None) is not self.proc: return False
    if not self.proc.peer_accessible(self.node, src.node): return False
    self.map_peer(src, src.signal_pool_mem)
    src.map_peer(self, self.signal_pool_mem)
    return True

  def map_peer(self, src: Any, buf: HCQBuffer) -> None:
    """AMDKFD_IOC_MAP_MEMORY_TO_GPU of src's BO with this GPU's id: src's memory at its own address in this GPU's VM
    (once; src unmaps it from every GPU before freeing it)."""
    m = buf.meta
    if not isinstance(m, AMDMemory): raise ValueError(f"{self.device}: {buf} is not a KFD buffer of {src.device}")
    with self.proc.lock:
      if self.gpu_id in m.peers: return
      ids = (ctypes.c_uint32 * 1)(self.gpu_id)
      self.kfd_ioctl(kfd.AMDKFD_IOC_MAP_MEMORY_TO_GPU, kfd.struct_kfd_ioctl_map_memory_to_gpu_args(
        handle=m.handle, device_ids_array_ptr=ctypes.addressof(ids), n_devices=1), f"AMDKFD_IOC_MAP_MEMORY_TO_GPU({m.domain} of {src.device}, peer)")
      m.peers.add(self.gpu_id)

  def hdp_flush(self) -> None:
    """Flush the host data path so the GPU sees what the CPU wrote into VRAM through the BAR (the MMIO remap page's
    HDP_MEM_FLUSH_CNTL, kfd_ioctl.h KFD_MMIO_REMAP_HDP_MEM_FLUSH_CNTL)."""
    assert self.mmio.cpu is not None
    self.port.doorbell(self.mmio.cpu + kfd.KFD_MMIO_REMAP_HDP_MEM_FLUSH_CNTL, 1)

  def ensure_scratch(self, private_segment_size: int) -> None:
    """Make the compute queue's scratch hold `private_segment_size` bytes per work-item for every wave slot (grown, never
    shrunk). The CP reads the amd_queue_t's scratch fields at each dispatch, so they change only with no dispatch in
    flight: the device is synchronized first, under the submit lock. Less memory than every slot needs is tried
    next (fewer waves run at once, as ROCr reduces occupancy); OutOfMemory when not even that fits."""
    if private_segment_size <= 0: return
    with self._scratch_lock:
      cur = self.scratch
      if cur is not None and cur[0].per_lane >= private_segment_size: return
      topo = scratch.Topology.from_props(self.node.props)
      want = max(private_segment_size, cur[0].per_lane if cur is not None else 0)
      lays = [scratch.layout(self.family, self.target.wave_size, topo, want, occ) for occ in (1.0, 0.25, 1 / 32)]
      with self.submit_lock:
        self.synchronize()
        if cur is not None:
          scratch.write_queue_fields(self.amd_queue_cpu, None, 0)
          self.scratch = None
          self._gpu_free(cur[1])
        err: OutOfMemory | None = None
        for lay in lays:
          try: mem = self._gpu_alloc(lay.size, "vram")
          except OutOfMemory as e: err = e; continue
          scratch.write_queue_fields(self.amd_queue_cpu, lay, mem.va)
          self.scratch = (lay, mem)
          return
      assert err is not None
      raise OutOfMemory(self.device, lays[-1].size, self.allocator.mem_used,
                        f"scratch for {want} bytes per work-item: even {lays[-1].slots} wave slots need {lays[-1].size:#x} bytes of VRAM") from None

  # ---------------------------------------------------------------- HCQ hooks
  def _kick(self) -> None:
    """Ring the doorbells of queues with pending work again (the CP re-reads its write pointer: harmless on hardware;
    the mock GPU re-checks its waits)."""
    for r, v in ((self.aql, lambda r: r.put - 1), (self.sdma, lambda r: r.put)):
      if r is not None and r.rptr_p.value != r.put: self.port.doorbell(r.doorbell, v(r), 8)

  def _signal_written(self) -> None:
    if not self.closed and self.aql is not None: self._kick()

  def _event_fired(self, eid: int, timeout_ms: int) -> Any:
    d = (kfd.struct_kfd_event_data * 1)()
    d[0].event_id = eid
    a = self.kfd_ioctl(kfd.AMDKFD_IOC_WAIT_EVENTS, kfd.struct_kfd_ioctl_wait_events_args(
      events_ptr=ctypes.addressof(d), num_events=1, wait_for_all=1, timeout=timeout_ms), "AMDKFD_IOC_WAIT_EVENTS")
    return d[0] if a.wait_result == kfd.KFD_IOC_WAIT_RESULT_COMPLETE else None

  def _check_fault(self) -> None:
    """Raise if KFD reported a VM fault (memory event) or a queue/GPU reset (hardware-exception event), polled at most
    every 5 ms: the device recovers first (module docstring), and the AMDFault says whether it did. A lost device raises
    AMDDeviceLost at once."""
    if self._lost is not None: raise AMDDeviceLost(self._lost)
    now = time.perf_counter()
    if self.closed or self._recovering or now - self._fault_checked < 5e-3 or not getattr(self, "memory_event", None): return
    self._fault_checked = now
    what = ""
    # every GPU's fault signals every memory and hardware-exception event of the process (kfd_events.c:
    # kfd_signal_vm_fault_event, kfd_signal_reset_event); the event data names the GPU: another device's is its own
    if (d := self._event_fired(self.memory_event, 0)) is not None and d.memory_exception_data.gpu_id in (0, self.gpu_id):
      m = d.memory_exception_data
      what = (f"{describe_memory_exception(m)} ({where_is(m.va, self.memories)}): KFD evicted this process's queues on the GPU "
              f"(kfd_set_dbg_ev_from_interrupt -> kfd_dqm_evict_pasid)")
    elif (d := self._event_fired(self.hw_event, 0)) is not None and d.hw_exception_data.gpu_id in (0, self.gpu_id):
      what = f"KFD reports a {describe_hw_exception(d.hw_exception_data)}: what it reset no longer runs"
    if not what: return
    stuck, state, log = self._stuck(), self.queue_state(), self._dmesg_hint()   # as the fault left them
    ok, outcome = self._recover(what)
    raise AMDFault(f"{self.device}: {what}\n{stuck}{outcome}\n{state}{log}", recovered=ok)

  def _dmesg_hint(self) -> str:
    mock = getattr(getattr(self.port, "inner", self.port), "mock", None)
    if mock is None: return "\n(see dmesg for the kernel's report)"
    return "\nmock GPU dmesg:\n" + "\n".join("  " + l for l in mock.log[-6:])

  # ---------------------------------------------------------------- recovery
  def _stuck(self) -> str:
    """Where each queue with pending work is, in one line or two: the packet its engine is at and, on the compute
    queue, the dispatches that may still run before it (those since the last packet with the barrier bit)."""
    out = []
    names = dict(zip(("compute", "copy"), self.queue_ids))
    if (r := self.aql) is not None and (rd := r.rptr_p.value) != (wr := r.wptr_p.value):
      def pkt(i: int) -> list[int]: return list((ctypes.c_uint32 * 16).from_address(r.ring.cpu + 64 * (i % r.nslots)))
      at = f"AQL packet {rd}: {hw.format_aql(pkt(rd))}" if rd < wr else f"read_dispatch_id {rd}"
      out.append(f"  the compute queue (KFD queue {names.get('compute')}) did not get past {at}")
      for i in range(rd - 1, max(wr - r.nslots, rd - 64, -1), -1):
        d = hw.decode_aql(pkt(i))
        if d["type"] == hw.AQL_DISPATCH:
          name = self.kernel_names.get(d["kernel_object"], "unknown kernel")
          out.append(f"    not finished before it: AQL packet {i}, dispatch of {name!r} (kernel object {d['kernel_object']:#x}, grid "
                     f"{d['grid']}, workgroup {d['workgroup']})")
        if d["barrier"]: break
    if (s := self.sdma) is not None and (rd := s.rptr_p.value) != (wr := s.wptr_p.value):
      words = [ctypes.c_uint32.from_address(s.ring.cpu + (rd + 4 * i) % s.ring.size).value for i in range(min(wr - rd, 4096) // 4)]
      try: first = hw.format_sdma(self.family, words, s.ring.va + rd % s.ring.size).split("\n")[0].strip()
      except (KeyError, ValueError, IndexError) as e: first = f"(undecodable: {e})"
      out.append(f"  the copy queue (KFD queue {names.get('copy')}) did not get past byte {rd}: {first}")
    return "".join(l + "\n" for l in out)

  def _recover(self, why: str) -> tuple[bool, str]:
    """Destroy the queues, create them again on the same (emptied) rings, advance the timeline to what was submitted, and
    check that the new queues run: (True, what was done), or (False, why the device is lost) with the device lost."""
    old = list(self.queue_ids)
    self._recovering = True
    try:
      # not under submit_lock: a fault can be seen inside a submission that holds it (a ring with no room)
      errs = []
      for qid in old:
        try: self.kfd_ioctl(kfd.AMDKFD_IOC_DESTROY_QUEUE, kfd.struct_kfd_ioctl_destroy_queue_args(queue_id=qid), "AMDKFD_IOC_DESTROY_QUEUE")
        except IoctlError as e: errs.append(str(e))
      self.queue_ids, self.aql, self.sdma = [], None, None
      # events the fault set, or a reset that came with it, must not be taken for a new fault
      for eid in (self.memory_event, self.hw_event):
        while self._event_fired(eid, 0) is not None: pass
      ring, ptrs, eop, ctx, ib, sring, sptrs = self._queue_mem
      for off in (AMD_QUEUE_WRITE_DISPATCH_ID, AMD_QUEUE_READ_DISPATCH_ID): ctypes.c_uint64.from_address(ptrs.cpu + off).value = 0
      ctypes.memset(sptrs.cpu, 0, 16)
      try: self._create_queues()
      except (IoctlError, RuntimeError) as e:
        return self._lose(why, f"creating the queues again failed: {e}")
      self.timeline_signal.value = self.timeline_value - 1
      with self._lock: self._kernargs_off = 0
      ok, probe = self._probe()
    finally: self._recovering = False
    if not ok: return self._lose(why, probe)
    extra = f" (destroying them said: {'; '.join(errs)})" if errs else ""
    return True, (f"  {self.device} recovered: queues {old} destroyed (AMDKFD_IOC_DESTROY_QUEUE) and created again as {self.queue_ids}"
                  f"{extra}, both ran a probe signal; timeline at {self.timeline_value - 1}; buffers kept, the work in flight was lost")

  def _probe(self) -> tuple[bool, str]:
    """A signal through each new queue: (True, "") once both wrote it, else (False, which did not) after PROBE_MS."""
    sc, ss = HCQSignal(self, 0), HCQSignal(self, 0)
    self.compute_queue_t().signal(sc, 1).submit(self)
    self.copy_queue_t().signal(ss, 1).submit(self)
    deadline = time.perf_counter() + self.probe_ms / 1000
    while sc.value < 1 or ss.value < 1:
      if time.perf_counter() > deadline:
        dead = [n for n, sg in (("compute", sc), ("copy", ss)) if sg.value < 1]
        return False, (f"the new {' and '.join(dead)} queue(s) {[q for n, q in zip(('compute', 'copy'), self.queue_ids) if n in dead]} did not "
                       f"run a probe signal in {self.probe_ms} ms")
      self._kick()
      time.sleep(1e-4)
    return True, ""

  def _lose(self, why: str, detail: str) -> tuple[bool, str]:
    """Mark the device lost (AMDDeviceLost from now on, naming `why`); (False, the line for the error at hand)."""
    lost = (f"{self.device} is lost for this process: {detail}. KFD keeps a process's queues on a GPU evicted after a VM "
            f"fault (kfd_device_queue_manager.c: create_queue_cpsch creates new queues evicted while qpd->evicted) and after a "
            f"whole-GPU reset (kfd_device.c: kgd2kfd_post_reset); only a new process gets working queues")
    self._lost = f"{lost}. Cause: {why}"
    return False, f"  {lost}"

  def _timed_out(self, what: str, timeout_ms: float) -> AMDQueueTimeout:
    """The error for the device's own work not finishing in time, after recovering (module docstring)."""
    stuck, state = self._stuck(), self.queue_state()
    if self._recovering:   # closing, or inside a recovery: no recovery from here
      return AMDQueueTimeout(f"{self.device}: timed out after {timeout_ms:g} ms {what}\n{stuck}{state}")
    ok, outcome = self._recover(f"the device's work did not finish within {timeout_ms:g} ms")
    return AMDQueueTimeout(f"{self.device}: timed out after {timeout_ms:g} ms {what}\n{stuck}{outcome}\n{state}", recovered=ok)

  def _wait_signal(self, sig: HCQSignal, value: int, timeout_s: float, final: bool = True) -> bool:
    deadline = time.perf_counter() + timeout_s
    for _ in range(2000):   # spin briefly: most waits end within microseconds
      if sig._v.value >= value: return True
    while sig._v.value < value:
      self._check_fault()
      left = deadline - time.perf_counter()
      if left <= 0:
        # the device's own timeline: its work is stuck, recover (a signal of the caller's may still be released by it);
        # not at the end of the hang watchdog's window (HANG_WARN_MS): the wait goes on to its timeout after the report
        if final and sig is self.timeline_signal and not self._recovering:
          raise self._timed_out(f"waiting for the timeline {sig.va_addr:#x} >= {value} (it is {sig.value})", timeout_s * 1000)
        return False
      self._kick()
      if sig._v.value >= value: return True
      self._event_fired(self.event_id, max(1, min(int(left * 1000), 10)))   # sleep until a GPU signal's interrupt (or 10 ms)
    return True

  def queue_state(self) -> str:
    s = (f"{self.device} ({self.target.name}, gpu_id {self.gpu_id:#x}): timeline {self.timeline_signal.va_addr:#x} value "
         f"{self.timeline_signal.value}, last submitted {self.timeline_value - 1}")
    sc = getattr(self, "scratch", None)
    s += "\n  " + (scratch.describe(sc[0], sc[1].va) if sc is not None else "no scratch")
    for r in (self.aql, self.sdma):
      if r is not None: s += "\n" + r.state()
    return s

  def synchronize(self, timeout_ms: int | None = None) -> None:
    if self.closed: return
    if self._lost is not None: raise AMDDeviceLost(self._lost)
    if self.aql is not None and self.timeline_value > 1: super().synchronize(timeout_ms)
    ms = timeout_ms or self.default_timeout_ms
    for r in (self.aql, self.sdma):  # and every raw submit (no timeline) has been consumed
      if r is None: continue
      deadline = time.perf_counter() + ms / 1000
      while r.rptr_p.value != r.put:
        self._check_fault()
        if time.perf_counter() > deadline: raise self._timed_out("waiting for the queues to drain", ms)
        self._kick()
        time.sleep(1e-4)

  def close(self) -> None:
    if self.closed: return
    self._recovering = True   # a stuck queue is destroyed below anyway: no recovery on the way out
    try: self.synchronize(timeout_ms=1000)
    except Exception: pass
    self.closed = True
    for qid in getattr(self, "queue_ids", []):
      try: self.kfd_ioctl(kfd.AMDKFD_IOC_DESTROY_QUEUE, kfd.struct_kfd_ioctl_destroy_queue_args(queue_id=qid), "AMDKFD_IOC_DESTROY_QUEUE")
      except Exception: pass
    self.aql = self.sdma = None
    self.scratch = None
    self._abandon()
    from baregrad.hal import Device
    Device.forget(self.device, self)

def _toolchain(target: str) -> tuple[Any, Any]:
  """The renderer and compiler for `target` (the LLVM AMDGPU backend); (None, None) in a build without them."""
  try:
    from baregrad.codegen.renderer.amdgpu import AMDGPURenderer  # type: ignore[import-not-found]
    from baregrad.drivers.amd_compile import AMDCompiler  # type: ignore[import-not-found]
  except ImportError: return None, None
  return AMDGPURenderer(target), AMDCompiler(target)

_registered = False
def _register_ioctls() -> None:
  global _registered
  if _registered: return
  _registered = True
  for n, t in (("GET_VERSION", kfd.struct_kfd_ioctl_get_version_args), ("CREATE_QUEUE", kfd.struct_kfd_ioctl_create_queue_args),
               ("DESTROY_QUEUE", kfd.struct_kfd_ioctl_destroy_queue_args), ("CREATE_EVENT", kfd.struct_kfd_ioctl_create_event_args),
               ("DESTROY_EVENT", kfd.struct_kfd_ioctl_destroy_event_args), ("SET_EVENT", kfd.struct_kfd_ioctl_set_event_args),
               ("RESET_EVENT", kfd.struct_kfd_ioctl_reset_event_args), ("WAIT_EVENTS", kfd.struct_kfd_ioctl_wait_events_args),
               ("GET_PROCESS_APERTURES_NEW", kfd.struct_kfd_ioctl_get_process_apertures_new_args), ("ACQUIRE_VM", kfd.struct_kfd_ioctl_acquire_vm_args),
               ("ALLOC_MEMORY_OF_GPU", kfd.struct_kfd_ioctl_alloc_memory_of_gpu_args), ("FREE_MEMORY_OF_GPU", kfd.struct_kfd_ioctl_free_memory_of_gpu_args),
               ("MAP_MEMORY_TO_GPU", kfd.struct_kfd_ioctl_map_memory_to_gpu_args), ("UNMAP_MEMORY_FROM_GPU", kfd.struct_kfd_ioctl_unmap_memory_from_gpu_args),
               ("GET_CLOCK_COUNTERS", kfd.struct_kfd_ioctl_get_clock_counters_args), ("AVAILABLE_MEMORY", kfd.struct_kfd_ioctl_get_available_memory_args)):
    register_ioctl(getattr(kfd, f"AMDKFD_IOC_{n}"), f"AMDKFD_IOC_{n}", t)
  # KFD's enums and flags in words in traces, from kfd_ioctl.h (the bindings); wait_events followed into its event list
  names = lambda prefix: header_names(kfd, prefix)
  register_field_words(kfd.struct_kfd_ioctl_create_queue_args, "queue_type", enum_words(names("KFD_IOC_QUEUE_TYPE_")))
  register_field_words(kfd.struct_kfd_ioctl_alloc_memory_of_gpu_args, "flags", flag_words(names("KFD_IOC_ALLOC_MEM_FLAGS_")))
  register_field_words(kfd.struct_kfd_ioctl_create_event_args, "event_type", enum_words(names("KFD_IOC_EVENT_")))
  register_field_words(kfd.struct_kfd_ioctl_wait_events_args, "wait_result", enum_words(names("KFD_IOC_WAIT_RESULT_")))
  register_pointer(kfd.struct_kfd_ioctl_wait_events_args, "events_ptr", lambda o: kfd.struct_kfd_event_data * min(o.num_events, 64))
  for t in (kfd.struct_kfd_ioctl_map_memory_to_gpu_args, kfd.struct_kfd_ioctl_unmap_memory_from_gpu_args):
    register_pointer(t, "device_ids_array_ptr", lambda o: ctypes.c_uint32 * min(o.n_devices, 64))
