"""MockAMDGPU: the kernel interface of amdkfd and amdgpu as Linux 6.12 offers them (/dev/kfd ioctls and mmaps, the
render node's BO mmaps, the sysfs topology), and AMD GPUs behind it: page tables, doorbells, a command processor that
reads the AQL rings (and the PM4 indirect buffers they point at) and an SDMA engine, both decoding every packet.

A conformance model, not a friend: each check below cites the kernel function that makes it (amdkfd/ and amdgpu/ of
Linux 6.12, `linux-source-6.12`) and answers with the errno that function returns; tests/test_amd_mock.py breaks each
rule once. What the hardware does with a mistake is modelled with what the kernel reports for it: a GPU access to an
unmapped address is a VM fault (the amdgpu "page fault" dmesg lines, the process's queues evicted, KFD memory events
signalled with the faulting page, kfd_debug.c: kfd_set_dbg_ev_from_interrupt); a WAIT that is never satisfied leaves
its queue stuck (a hang, which only the host's timeout ends); an opcode the CP does not know stops the queue
(CP_BAD_OPCODE, kfd_int_process_v11.c).

After a fault, what the kernel leaves usable (Linux 6.12): a VM fault evicts every queue of the process on that GPU for
good (kfd_device_queue_manager.c: evict_process_queues_cpsch counts qpd->evicted up and nothing counts it down again for a
VM fault; create_queue_cpsch creates every later queue with is_evicted = !!qpd->evicted, and QUEUE_IS_ACTIVE (kfd_priv.h)
keeps an evicted queue off the hardware): so queues created after it never run. A queue reset for a hang or a bad packet
takes that queue only (reset_queues_on_hws_hang -> set_queue_as_reset; kfd_dqm_suspend_bad_queue_mes): queues created
after it run. A kernel that never ends is not a fault to the kernel: its queue stays busy until the process destroys it,
and AMDKFD_IOC_DESTROY_QUEUE preempts its waves (destroy_queue_cpsch -> execute_queues_cpsch -> unmap_queues_cpsch, the
waves saved by CWSR and dropped with the queue).

Time slices: the engines run inside the doorbell write (and every later one) for at most `slice_s` seconds of
interpreter time; a dispatch still running then goes on at the next doorbell, so a kernel that loops forever keeps its
queue busy (read_dispatch_id stops before the next packet with the barrier bit) without holding the host.

The mock knows only what the kernel and the GPU would: ioctl arguments read from the addresses passed (copied in and
out with the kernel's own struct sizes, kfd_chardev.c: kfd_ioctl), GPU virtual addresses resolved through the page
tables MAP_MEMORY_TO_GPU built, rings and queue pointers read from GPU memory when a doorbell is written. Memory
objects are memfds (or, for userptr, the process's own pages), so the driver's CPU mappings and the mock's view share
pages as host and GPU would.

Concurrency: AQL packets without the barrier bit are not ordered against the dispatches before them (HSA PSA 1.2,
2.9.1). The mock keeps such dispatches "in flight" and runs them together at the next ordering point (a packet with the
barrier bit, an end-of-pipe RELEASE_MEM, the queue going idle or blocking), interleaved instruction step by instruction
step (each step a batch of waves at one PC), the most recently launched first, as the NV mock interleaves launches; their
memory accesses are recorded: a read or write of bytes another dispatch of the group wrote (or a write of bytes it
read) is a hazard, logged in `hazards` and the dmesg-like `log` (the H100 showed what an unordered consumer reads:
stale data, hw/h100-580.159.04/FINDINGS.md finding 6b). Scratch is left out: every wave has its own slot, and
concurrent dispatches get disjoint shares of the queue's slots.

Scratch: a dispatch whose kernel descriptor enables the private segment gets the backing memory, slot size and slot
count the CP derives from the queue's amd_queue_t (_dispatch_scratch: sources there and in drivers/amd/scratch.py);
too little makes the CP request more through queue_inactive_signal and wait, as ROCr expects. A wave's scratch accesses
outside its slot are reported as VM faults (rdna3/machine.py _scratch_addrs: stricter than the hardware, which would
reach a neighbouring slot).

Multi-XCC (gfx942, 8 XCCs): a PM4 IB in an AQL queue runs on every XCC, in lockstep, honouring PRED_EXEC; a memory write
several XCCs make is logged in `xcc_writes` (drivers/amd/queues.py has the sources). AQL packets, barriers and
completion signals are modelled agent-wide (one CP): that the firmware synchronizes the XCCs at a barrier bit is the
unverified assumption queues.py states.

Kernels run on the RDNA3 interpreter (baregrad/drivers/mock/rdna3) for gfx1100; a gfx942 (CDNA3, wave64) dispatch is
decoded and validated, then the mock stops that queue with a plain statement that it cannot execute wave64 CDNA
code (MockAMDGPU(skip_unexecutable=True) lets it complete without running the kernel, to test the queue plumbing).

MOCKGPU_AMD_ARCH=gfx1100|gfx942 picks the GPU (default gfx1100); MOCKGPU_COUNT=n makes n GPUs."""
from __future__ import annotations
import bisect, ctypes, errno, os, threading, time
from dataclasses import dataclass, field
from typing import Any, Callable
from baregrad.ctypes_autogen import kfd, _support
from baregrad.ctypes_autogen.amdgpu import hsa
from baregrad.drivers.amd import hw
from baregrad.drivers.amd.topology import TARGETS, TOPOLOGY, Target, queue_sizes

from baregrad.drivers.mock.nvgpu import _libc, _mmap, Memory as _MemFD, PROT_RW, MAP_SHARED  # memfd pages, libc mmap
PAGE = 4096
TASK_SIZE_MAX = (1 << 47) - PAGE                 # x86-64 user address limit: access_ok() refuses anything above
AMDGPU_VA_RESERVED_BOTTOM = 1 << 16              # amdgpu_vm.h
GPUVM_SIZE = 1 << 47                             # amdgpu_amdkfd.c: min(max_pfn << 12, AMDGPU_GMC_HOLE_START)
KFD_SIGNAL_EVENT_LIMIT = kfd.KFD_SIGNAL_EVENT_LIMIT
UNSIGNALED_EVENT_SLOT = (1 << 64) - 1            # kfd_events.h
KFD_FIRST_NONSIGNAL_EVENT_ID = (0x7FFFFFFF >> 1) + 1
KFD_MAX_NUM_OF_QUEUES_PER_PROCESS = 1024          # kfd_priv.h
KFD_QUEUE_DOORBELL_MIRROR_OFFSET = 512
DOORBELL_SLICE = 8 * KFD_MAX_NUM_OF_QUEUES_PER_PROCESS  # 8-byte doorbells x 1024 (kfd_doorbell_process_slice; MES: same)
SDMA_DOORBELL_BASE, SDMA_DOORBELL_STRIDE = 0x100, 10  # AMDGPU_NAVI10_DOORBELL_sDMA_ENGINE0 / LAYOUT1_sDMA_ENGINE_START, range 20 >> 1
KFD_MMAP_TYPE_SHIFT, KFD_MMAP_GPU_ID_SHIFT = 62, 46
KFD_MMAP_TYPE_DOORBELL, KFD_MMAP_TYPE_EVENTS, KFD_MMAP_TYPE_RESERVED_MEM, KFD_MMAP_TYPE_MMIO = 3 << 62, 2 << 62, 1 << 62, 0
DRM_FILE_PAGE_OFFSET_START = 0x100000000        # drm_gem.c: (0xFFFFFFFFUL >> PAGE_SHIFT) + 1 pages
F = kfd  # flag names
GPU_TIMESTAMP_HZ = 100_000_000                   # the GPU's global timestamp counter runs at 100 MHz

def _align(x: int, a: int) -> int: return (x + a - 1) // a * a
def _ts() -> int: return time.perf_counter_ns() // (1_000_000_000 // GPU_TIMESTAMP_HZ)

class KFDErr(Exception):
  """An ioctl's failure: the errno and the kernel function that returns it."""
  def __init__(self, err: int, where: str, why: str = "") -> None:
    super().__init__(f"{where}: {why}")
    self.err = err

class GPUFaultErr(Exception):
  """A GPU access to an address the page tables do not map (becomes a VM fault)."""
  def __init__(self, va: int, write: bool, client: str, why: str = "") -> None:
    super().__init__(why or f"{client} {'write' if write else 'read'} of unmapped VA {va:#x}")
    self.va, self.write, self.client = va, write, client

class QueueStop(Exception):
  """The command processor or the SDMA engine stops this queue (bad opcode, illegal packet, the mock's own limit)."""

# ---------------------------------------------------------------- topology (modelled on real cards' sysfs files)
def _gpu_props(t: Target, minor: int, index: int) -> dict[str, int]:
  if t.name == "gfx1100":   # Radeon RX 7900 XTX (Navi 31): 96 CUs in 6 SEs x 2 SAs x 8 CUs, dual-issue wave32
    p = dict(cpu_cores_count=0, simd_count=192, mem_banks_count=1, caches_count=206, io_links_count=1, p2p_links_count=0,
             cpu_core_id_base=0, simd_id_base=0x80001000 + 0x10 * index, max_waves_per_simd=16, lds_size_in_kb=64, gds_size_in_kb=0,
             num_gws=64, wave_front_size=32, array_count=12, simd_arrays_per_engine=2, cu_per_simd_array=8, simd_per_cu=2,
             max_slots_scratch_cu=32, gfx_target_version=110000, vendor_id=0x1002, device_id=0x744c, location_id=0x300 + 0x100 * index,
             domain=0, drm_render_minor=minor, hive_id=0, num_sdma_engines=2, num_sdma_xgmi_engines=0, num_sdma_queues_per_engine=6,
             num_cp_queues=8, max_engine_clk_fcompute=2482, local_mem_size=0, fw_version=2200, capability=0x28032280, debug_prop=0x5d7,
             sdma_fw_version=21, unique_id=0x1234abcd0000 + index, num_xcc=1, max_engine_clk_ccompute=3600)
  else:                     # Instinct MI300X (Aqua Vanjaram): 8 XCCs x 38 CUs, wave64
    p = dict(cpu_cores_count=0, simd_count=1216, mem_banks_count=1, caches_count=470, io_links_count=1, p2p_links_count=0,
             cpu_core_id_base=0, simd_id_base=0x80001000 + 0x10 * index, max_waves_per_simd=8, lds_size_in_kb=64, gds_size_in_kb=0,
             num_gws=0, wave_front_size=64, array_count=32, simd_arrays_per_engine=1, cu_per_simd_array=10, simd_per_cu=4,
             max_slots_scratch_cu=32, gfx_target_version=90402, vendor_id=0x1002, device_id=0x74a1, location_id=0x1100 + 0x100 * index,
             domain=0, drm_render_minor=minor, hive_id=0, num_sdma_engines=2, num_sdma_xgmi_engines=14, num_sdma_queues_per_engine=8,
             num_cp_queues=24, max_engine_clk_fcompute=2100, local_mem_size=0, fw_version=177, capability=0x2bb2a680, debug_prop=0x527,
             sdma_fw_version=19, unique_id=0x5678ef000000 + index, num_xcc=8, max_engine_clk_ccompute=3700)
  qs = queue_sizes(p)  # what a 6.12 kernel prints (kfd_topology.c: node_show; kfd_queue.c: kfd_queue_ctx_save_restore_size)
  p["cwsr_size"], p["ctl_stack_size"] = qs.cwsr_size, qs.ctl_stack_size
  return p

_CPU_PROPS = dict(cpu_cores_count=16, simd_count=0, mem_banks_count=1, caches_count=3, io_links_count=1, p2p_links_count=0,
                  cpu_core_id_base=0, simd_id_base=0, max_waves_per_simd=0, lds_size_in_kb=0, gds_size_in_kb=0, num_gws=0,
                  wave_front_size=0, array_count=0, simd_arrays_per_engine=0, cu_per_simd_array=0, simd_per_cu=0, max_slots_scratch_cu=0,
                  gfx_target_version=0, vendor_id=0, device_id=0, location_id=0, domain=0, drm_render_minor=0, hive_id=0,
                  num_sdma_engines=0, num_sdma_xgmi_engines=0, num_sdma_queues_per_engine=0, num_cp_queues=0, cwsr_size=0,
                  ctl_stack_size=0, max_engine_clk_ccompute=3700)

def _props_text(p: dict[str, int]) -> bytes: return "".join(f"{k} {v}\n" for k, v in p.items()).encode()

# ---------------------------------------------------------------- state
class Backing:
  """Pages behind a BO: a memfd and the mock's own mapping of it (the NV mock's memory object), or, for a userptr, the
  process's own pages."""
  def __init__(self, size: int, kind: str, user_addr: int = 0) -> None:
    self.size, self.kind = size, kind
    self._m = None if kind == "userptr" else _MemFD(size, kind)
    self.fd, self.view = (-1, user_addr) if self._m is None else (self._m.fd, self._m.view)
  def release(self) -> None:
    if self._m is not None: self._m.release()
    self.fd = -1

@dataclass
class BO:
  handle: int
  gpu: "GPU"
  domain: str          # vram, gtt, userptr, doorbell, mmio
  flags: int
  size: int
  va: int
  backing: Backing | None
  mmap_offset: int = 0
  mapped_on: set = field(default_factory=set)   # gpu ids whose page tables map it
  queue_refs: int = 0
  def gpu_id_mapped(self, g: "GPU") -> bool: return g.gpu_id in self.mapped_on

@dataclass
class Event:
  id: int
  type: int
  auto_reset: bool
  signaled: bool = False
  age: int = 1
  waiters: int = 0
  pulses: int = 0      # how many times it was set: a waiter that saw it set counts as woken (waiter->activated)
  data: bytes = b""

@dataclass
class Dispatch:
  """A kernel dispatch as the CP decoded it from the AQL packet."""
  queue: int
  index: int
  kernel_object: int
  kernarg: int
  grid: tuple
  workgroup: tuple
  group_segment: int
  private_segment: int
  completion_signal: int
  packet_va: int = 0     # where the packet sits in the ring (the dispatch ptr the CP gives the kernel)
  queue_va: int = 0      # the amd_queue_t the CP finds from the read pointer (the queue ptr)
  executed: bool = False
  note: str = ""
  scratch: Any = None    # the rdna3 Scratch (wave slots) the CP set up from the amd_queue_t, when the kernel needs one
  waves_per_group: int = 1

@dataclass
class Queue:
  qid: int
  gpu: "GPU"
  kind: str            # "aql", "pm4", "sdma"
  ring: int            # GPU VA of the ring as the MQD holds it (address >> 8 << 8)
  ring_size: int
  rptr: int
  wptr: int
  doorbell: int        # byte offset in the process doorbell slice
  active: bool
  refs: list = field(default_factory=list)
  rd: int = 0          # AQL: packet index; SDMA: byte offset; PM4: dword offset (monotonic)
  evicted: bool = False
  fault: str | None = None
  blocked: str | None = None
  ib_resume: tuple | None = None    # (packet index, dword offset) inside a PM4 IB the CP is stopped in
  inflight: list = field(default_factory=list)
  running: Any = None  # _Running: dispatches started and not finished when the last time slice ran out
  scratch_request: str = ""       # why the CP asked the runtime for more scratch (queue_inactive_signal) and waits
  sdma_engine: int = 0
  done_packets: int = 0
  db: int | None = None  # the last value written to its doorbell (None: never rung)

@dataclass
class _Running:
  """Dispatches a queue started and has not finished: their step generators, resumed at the next time slice."""
  group: list
  runs: list
  records: dict | None
  mem: Any
  tracking: bool
  ignore: list

class GPU:
  def __init__(self, index: int, target: Target, vram: int) -> None:
    self.index, self.target, self.family = index, target, target.family
    self.node = index + 1                    # node 0 is the CPU
    self.gpu_id = 0xB7D3 + 0x111 * index     # kfd_generate_gpu_id: a 16-bit hash of the device (KFD_GPU_ID_HASH_WIDTH)
    self.minor = 128 + index
    self.props = _gpu_props(target, self.minor, index)
    self.sizes = queue_sizes(self.props)
    self.vram_size, self.vram_used = vram, 0
    self.vm: list[tuple[int, int, BO]] = []  # sorted (va, size, bo): this process's page tables on this GPU
    self.mmio = Backing(PAGE, "mmio")
    self.hdp_flushes = 0
    self.interp_mem: Any = None              # the interpreter's Memory over this VM (built on the first dispatch)
    self.last_hit: tuple | None = None       # the mapping the last translation found (va, size, bo, host address)

# ---------------------------------------------------------------- the kernel's ioctl table
def _struct(base: type, extra: list[tuple[str, Any]]) -> type:
  return type(base.__name__ + "_6_12", (base,), {"_fields_": extra}) if extra else base

# 6.12 struct layouts where they grew since the bindings' 6.1 header
create_queue_args = _struct(kfd.struct_kfd_ioctl_create_queue_args, [("sdma_engine_id", ctypes.c_uint32), ("pad", ctypes.c_uint32)])

class MockAMDGPU:
  """AMD GPUs behind a mock amdkfd/amdgpu. `arch` (MOCKGPU_AMD_ARCH: gfx1100 or gfx942, default gfx1100) and `count`
  (MOCKGPU_COUNT) pick the GPUs; `vram` their memory; `large_bar` whether all VRAM is CPU-visible; `deny` paths whose
  open fails with EACCES; `sysmem_limit` KFD's system-memory limit (userptr and GTT)."""
  def __init__(self, arch: str | None = None, count: int | None = None, vram: int = 24 << 30, large_bar: bool = True,
               deny: tuple[str, ...] = (), sysmem_limit: int = 48 << 30, skip_unexecutable: bool = False,
               ioctl_version: tuple[int, int] = (1, 17), slice_s: float = 0.5) -> None:
    name = (arch or os.environ.get("MOCKGPU_AMD_ARCH", "") or "gfx1100").strip().lower()
    t = next((t for t in TARGETS.values() if t.name == name), None)
    if t is None: raise ValueError(f"MOCKGPU_AMD_ARCH={name!r}: the mock AMD GPU emulates {', '.join(t.name for t in TARGETS.values())}")
    if count is None:
      env = os.environ.get("MOCKGPU_COUNT", "") or "1"
      if not env.isdigit() or not 1 <= int(env) <= 16: raise ValueError(f"MOCKGPU_COUNT={env!r}: 1 to 16 GPUs")
      count = int(env)
    self.gpus = [GPU(i, t, vram) for i in range(count)]
    self.large_bar, self.deny, self.sysmem_limit, self.sysmem_used = large_bar, deny, sysmem_limit, 0
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

  def gpu_by_id(self, gpu_id: int) -> GPU | None: return next((g for g in self.gpus if g.gpu_id == gpu_id), None)

  # ---------------------------------------------------------------- files
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
    if len(parts) != 3 or parts[0] != "nodes" or not parts[1].isdigit(): return None
    n = int(parts[1])
    if n == 0: props, gpu_id, name = _CPU_PROPS, 0, ""
    elif n - 1 < len(self.gpus): g = self.gpus[n - 1]; props, gpu_id, name = g.props, g.gpu_id, g.target.name
    else: return None
    return {"properties": _props_text(props), "gpu_id": f"{gpu_id}\n".encode(), "name": f"{name}\n".encode()}.get(parts[2])

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

  # ---------------------------------------------------------------- ioctl entry (kfd_chardev.c: kfd_ioctl)
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

  def _pdd(self, gpu_id: int, where: str) -> tuple[GPU, dict]:
    g = self.gpu_by_id(gpu_id)
    if g is None or gpu_id not in self.pdd: raise KFDErr(errno.EINVAL, where, f"no GPU with gpu_id {gpu_id:#x} (kfd_process_device_data_by_id)")
    return g, self.pdd[gpu_id]

  def _bind(self, pdd: dict, where: str, err: int = errno.ENODEV) -> None:
    # kfd_process.c: kfd_bind_process_to_device: no VM acquired for this GPU yet -> -ENODEV
    if pdd["drm"] is None: raise KFDErr(err, where, "the process has no VM on this GPU: AMDKFD_IOC_ACQUIRE_VM first (kfd_bind_process_to_device)")

  def _get_version(self, a: Any) -> int:
    a.major_version, a.minor_version = self.ioctl_version
    return 0

  def _apertures_new(self, a: Any) -> int:
    # kfd_chardev.c: kfd_ioctl_get_process_apertures_new
    if a.num_of_nodes == 0:
      a.num_of_nodes = len(self.pdd)
      return 0
    if a.num_of_nodes > len(self.gpus): raise KFDErr(errno.EINVAL, "kfd_ioctl_get_process_apertures_new", f"num_of_nodes {a.num_of_nodes} > {len(self.gpus)} GPUs")
    n = min(len(self.gpus), a.num_of_nodes)
    arr = (kfd.struct_kfd_process_device_apertures * n).from_address(a.kfd_process_device_apertures_ptr)
    for i, g in enumerate(self.gpus[:n]):  # kfd_flat_memory.c: kfd_init_apertures_v9
      arr[i].gpu_id, arr[i].gpuvm_base, arr[i].gpuvm_limit = g.gpu_id, AMDGPU_VA_RESERVED_BOTTOM, GPUVM_SIZE - 1
      arr[i].lds_base, arr[i].lds_limit = 1 << 48, (1 << 48) | 0xFFFFFFFF
      arr[i].scratch_base, arr[i].scratch_limit = 2 << 48, (2 << 48) | 0xFFFFFFFF
    a.num_of_nodes = n
    return 0

  def _acquire_vm(self, a: Any) -> int:
    w = "kfd_ioctl_acquire_vm"
    f = self.files.get(a.drm_fd)
    if f is None: raise KFDErr(errno.EINVAL, w, f"drm_fd {a.drm_fd} is not an open file (fget)")
    g, pdd = self._pdd(a.gpu_id, w)
    if pdd["drm"] is not None:  # the same file again is fine, another is -EBUSY
      if pdd["drm"] == a.drm_fd: return 0
      raise KFDErr(errno.EBUSY, w, f"GPU {a.gpu_id:#x} already uses the VM of drm fd {pdd['drm']}")
    if f["kind"] != "render": raise KFDErr(errno.EINVAL, "kfd_process_device_init_vm", f"fd {a.drm_fd} ({f['path']}) is not an amdgpu DRM file (amdgpu_file_to_fpriv)")
    if any(p["drm"] == a.drm_fd for p in self.pdd.values()):  # amdgpu_amdkfd_gpuvm_acquire_process_vm: already a compute VM
      raise KFDErr(errno.EINVAL, "amdgpu_amdkfd_gpuvm_acquire_process_vm", f"the VM of drm fd {a.drm_fd} is already a compute VM")
    pdd["drm"] = a.drm_fd
    return 0

  def _alloc(self, a: Any) -> int:
    w = "kfd_ioctl_alloc_memory_of_gpu"
    if a.size == 0: raise KFDErr(errno.EINVAL, w, "size 0")
    g, pdd = self._pdd(a.gpu_id, w)
    flags = a.flags & 0xFFFFFFFF
    if flags & F.KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC and flags & F.KFD_IOC_ALLOC_MEM_FLAGS_VRAM and not self.large_bar:
      raise KFDErr(errno.EINVAL, w, "host-visible VRAM on a small-BAR GPU (kfd_dev_is_large_bar)")
    self._bind(pdd, w)
    offset = a.mmap_offset
    if flags & F.KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL:
      if a.size != DOORBELL_SLICE: raise KFDErr(errno.EINVAL, w, f"a doorbell BO is the process doorbell slice, {DOORBELL_SLICE:#x} bytes, not {a.size:#x} (kfd_doorbell_process_slice)")
      self._doorbells(pdd)
    elif flags & F.KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP:
      if a.size != PAGE: raise KFDErr(errno.EINVAL, w, f"an MMIO remap BO is one page, not {a.size:#x}")
    # amdgpu_amdkfd_gpuvm.c: amdgpu_amdkfd_gpuvm_alloc_memory_of_gpu picks the domain
    w2 = "amdgpu_amdkfd_gpuvm_alloc_memory_of_gpu"
    if flags & F.KFD_IOC_ALLOC_MEM_FLAGS_VRAM: domain = "vram"
    elif flags & F.KFD_IOC_ALLOC_MEM_FLAGS_GTT: domain = "gtt"
    elif flags & F.KFD_IOC_ALLOC_MEM_FLAGS_USERPTR:
      if not offset: raise KFDErr(errno.EINVAL, w2, "a userptr BO needs the user address in mmap_offset")
      domain = "userptr"
    elif flags & F.KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL: domain = "doorbell"
    elif flags & F.KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP: domain = "mmio"
    else: raise KFDErr(errno.EINVAL, w2, f"flags {flags:#x} name no domain (VRAM, GTT, USERPTR, DOORBELL, MMIO_REMAP)")
    size = a.size >> 1 if flags & F.KFD_IOC_ALLOC_MEM_FLAGS_AQL_QUEUE_MEM else a.size
    size = _align(size, PAGE)
    if size == 0: raise KFDErr(errno.EINVAL, w2, "AQL queue memory of less than 2 bytes")
    # amdgpu_amdkfd_reserve_mem_limit: VRAM against the GPU's VRAM, GTT/userptr against the system limit -> -ENOMEM
    if domain == "vram" and g.vram_used + size > g.vram_size:
      raise KFDErr(errno.ENOMEM, "amdgpu_amdkfd_reserve_mem_limit", f"VRAM: {size:#x} bytes requested, {g.vram_size - g.vram_used:#x} free")
    if domain in ("gtt", "userptr") and self.sysmem_used + size > self.sysmem_limit:
      raise KFDErr(errno.ENOMEM, "amdgpu_amdkfd_reserve_mem_limit", f"system memory: {size:#x} bytes requested, {self.sysmem_limit - self.sysmem_used:#x} free")
    if domain == "userptr":
      # amdgpu_ttm.c: amdgpu_ttm_tt_get_user_pages: the pages must belong to mappings of this process -> -EFAULT
      if not _user_range_mapped(offset, size): raise KFDErr(errno.EFAULT, "amdgpu_ttm_tt_get_user_pages", f"user range {offset:#x}+{size:#x} is not mapped memory")
      backing = Backing(size, "userptr", offset)
    elif domain == "doorbell": backing = pdd["doorbells"]
    elif domain == "mmio": backing = g.mmio
    else: backing = Backing(size, domain)
    idr, self._next_idr = self._next_idr, self._next_idr + 1
    handle = (a.gpu_id << 32) | idr     # kfd_priv.h: MAKE_HANDLE
    bo = BO(handle, g, domain, flags, size, a.va_addr, backing)
    if domain == "vram": g.vram_used += size
    if domain in ("gtt", "userptr"): self.sysmem_used += size
    if domain == "mmio": bo.mmap_offset = KFD_MMAP_TYPE_MMIO | (a.gpu_id << KFD_MMAP_GPU_ID_SHIFT)
    else:
      bo.mmap_offset, self._next_offset = self._next_offset, self._next_offset + size  # drm_vma_offset_add
    self.bos[handle] = bo
    a.handle, a.mmap_offset = handle, bo.mmap_offset
    return 0

  def _bo(self, handle: int, where: str, err: int = errno.EINVAL) -> tuple[BO, dict]:
    g, pdd = self._pdd(handle >> 32, where)  # GET_GPU_ID(handle)
    bo = self.bos.get(handle)
    if bo is None: raise KFDErr(err, where, f"no memory with handle {handle:#x} (kfd_process_device_translate_handle)")
    return bo, pdd

  def _free(self, a: Any) -> int:
    w = "kfd_ioctl_free_memory_of_gpu"
    if self.signal_page is not None and self.signal_page[2] == a.handle:
      raise KFDErr(errno.EPERM, w, "the event page BO is freed with the process, not by the user")
    bo, _ = self._bo(a.handle, w)
    if bo.mapped_on: raise KFDErr(errno.EBUSY, "amdgpu_amdkfd_gpuvm_free_memory_of_gpu", f"BO at VA {bo.va:#x} is still mapped on {len(bo.mapped_on)} GPU(s)")
    del self.bos[a.handle]
    if bo.domain == "vram": bo.gpu.vram_used -= bo.size
    if bo.domain in ("gtt", "userptr"): self.sysmem_used -= bo.size
    if bo.domain in ("vram", "gtt") and bo.backing is not None: bo.backing.release()
    return 0

  def _map(self, a: Any) -> int:
    w = "kfd_ioctl_map_memory_to_gpu"
    if a.n_devices == 0: raise KFDErr(errno.EINVAL, w, "n_devices is 0")
    if a.n_success > a.n_devices: raise KFDErr(errno.EINVAL, w, f"n_success {a.n_success} > n_devices {a.n_devices}")
    ids = list((ctypes.c_uint32 * a.n_devices).from_address(a.device_ids_array_ptr))
    g, pdd = self._pdd(a.handle >> 32, w)
    self._bind(pdd, w)
    bo = self.bos.get(a.handle)
    if bo is None: raise KFDErr(errno.ENOMEM, w, f"no memory with handle {a.handle:#x}")  # sic: -ENOMEM in 6.12
    for i in range(a.n_success, a.n_devices):
      peer = self.gpu_by_id(ids[i])
      if peer is None: raise KFDErr(errno.EINVAL, w, f"device {i}: no GPU with gpu_id {ids[i]:#x}")
      self._bind(self.pdd[peer.gpu_id], w)
      if peer.gpu_id not in bo.mapped_on: self._vm_map(peer, bo)
      a.n_success = i + 1
    return 0

  def _vm_map(self, g: GPU, bo: BO) -> None:
    # amdgpu_amdkfd_gpuvm.c: kfd_mem_attach: no VA -> -EINVAL; amdgpu_vm.c: amdgpu_vm_verify_parameters, amdgpu_vm_bo_map
    if not bo.va: raise KFDErr(errno.EINVAL, "kfd_mem_attach", "the BO was allocated without a VA (va_addr 0)")
    if bo.domain == "mmio" and g is not bo.gpu: raise KFDErr(errno.EINVAL, "kfd_mem_attach", "another GPU's MMIO page cannot be mapped here")
    w = "amdgpu_vm_bo_map"
    if bo.va % PAGE: raise KFDErr(errno.EINVAL, "amdgpu_vm_verify_parameters", f"VA {bo.va:#x} is not 4 KiB aligned")
    if ((bo.va + bo.size - 1) >> 12) >= (GPUVM_SIZE << 1) >> 12:  # lpfn >= max_pfn (48-bit VM)
      raise KFDErr(errno.EINVAL, "amdgpu_vm_verify_parameters", f"{bo.va:#x}+{bo.size:#x} ends beyond the VM")
    i = bisect.bisect_right(g.vm, bo.va, key=lambda m: m[0])
    for va, size, other in g.vm[max(0, i - 1):i + 1]:
      if va < bo.va + bo.size and bo.va < va + size:
        raise KFDErr(errno.EINVAL, w, f"VA {bo.va:#x}-{bo.va + bo.size:#x} conflicts with the mapping at {va:#x}-{va + size:#x}")
    bisect.insort(g.vm, (bo.va, bo.size, bo), key=lambda m: m[0])
    bo.mapped_on.add(g.gpu_id)
    if g.interp_mem is not None and bo.backing is not None and bo.domain not in ("doorbell", "mmio"): _interp_map(g.interp_mem, bo)

  def _unmap(self, a: Any) -> int:
    w = "kfd_ioctl_unmap_memory_from_gpu"
    if a.n_devices == 0: raise KFDErr(errno.EINVAL, w, "n_devices is 0")
    if a.n_success > a.n_devices: raise KFDErr(errno.EINVAL, w, f"n_success {a.n_success} > n_devices {a.n_devices}")
    ids = list((ctypes.c_uint32 * a.n_devices).from_address(a.device_ids_array_ptr))
    self._pdd(a.handle >> 32, w)
    bo = self.bos.get(a.handle)
    if bo is None: raise KFDErr(errno.ENOMEM, w, f"no memory with handle {a.handle:#x}")
    for i in range(a.n_success, a.n_devices):
      peer = self.gpu_by_id(ids[i])
      if peer is None: raise KFDErr(errno.EINVAL, w, f"device {i}: no GPU with gpu_id {ids[i]:#x}")
      if peer.gpu_id in bo.mapped_on:
        # amdgpu_amdkfd_gpuvm.c: unmap_bo_from_gpuvm: a BO a queue uses (ring, pointers, EOP, CWSR) -> -EBUSY
        if bo.queue_refs: raise KFDErr(errno.EBUSY, "unmap_bo_from_gpuvm", f"BO at VA {bo.va:#x} is used by {bo.queue_refs} queue(s)")
        peer.vm = [m for m in peer.vm if m[2] is not bo]
        bo.mapped_on.discard(peer.gpu_id)
        if peer.interp_mem is not None and bo.domain not in ("doorbell", "mmio"): peer.interp_mem.unmap(bo.va)
      a.n_success = i + 1
    return 0

  def _available(self, a: Any) -> int:
    g, _ = self._pdd(a.gpu_id, "kfd_ioctl_get_available_memory")
    a.available = g.vram_size - g.vram_used
    return 0

  def _clock_counters(self, a: Any) -> int:
    if self.gpu_by_id(a.gpu_id) is not None: a.gpu_clock_counter = _ts()
    a.cpu_clock_counter = a.system_clock_counter = time.clock_gettime_ns(time.CLOCK_MONOTONIC_RAW)
    a.system_clock_freq = 1_000_000_000
    return 0

  # ---------------------------------------------------------------- doorbells
  def _doorbells(self, pdd: dict) -> Backing:
    """kfd_doorbell.c: kfd_alloc_process_doorbells: one slice per process and GPU, allocated on first use."""
    if pdd["doorbells"] is None: pdd["doorbells"] = Backing(DOORBELL_SLICE, "doorbell")
    return pdd["doorbells"]

  # ---------------------------------------------------------------- queues (kfd_chardev.c: kfd_ioctl_create_queue)
  def _create_queue(self, a: Any) -> int:
    w = "kfd_ioctl_create_queue -> set_queue_properties_from_user"
    if (a.queue_percentage & 0xFF) > kfd.KFD_MAX_QUEUE_PERCENTAGE: raise KFDErr(errno.EINVAL, w, f"queue_percentage {a.queue_percentage & 0xFF} > 100")
    if a.queue_priority > kfd.KFD_MAX_QUEUE_PRIORITY: raise KFDErr(errno.EINVAL, w, f"queue_priority {a.queue_priority} > {kfd.KFD_MAX_QUEUE_PRIORITY}")
    if a.ring_base_address and not _access_ok(a.ring_base_address, 8): raise KFDErr(errno.EFAULT, w, f"ring {a.ring_base_address:#x} is not a user address (access_ok)")
    if a.ring_size and a.ring_size & (a.ring_size - 1): raise KFDErr(errno.EINVAL, w, f"ring_size {a.ring_size:#x} is not a power of 2")
    ring_size = max(a.ring_size, kfd.KFD_MIN_QUEUE_RING_SIZE)   # clamped, not refused
    a.ring_size = ring_size
    if not _access_ok(a.read_pointer_address, 4): raise KFDErr(errno.EFAULT, w, f"read pointer {a.read_pointer_address:#x} is not a user address (access_ok)")
    if not _access_ok(a.write_pointer_address, 4): raise KFDErr(errno.EFAULT, w, f"write pointer {a.write_pointer_address:#x} is not a user address (access_ok)")
    if a.eop_buffer_address and not _access_ok(a.eop_buffer_address, 4): raise KFDErr(errno.EFAULT, w, f"EOP buffer {a.eop_buffer_address:#x} is not a user address")
    if a.ctx_save_restore_address and not _access_ok(a.ctx_save_restore_address, 4): raise KFDErr(errno.EFAULT, w, f"ctx save area {a.ctx_save_restore_address:#x} is not a user address")
    kinds = {kfd.KFD_IOC_QUEUE_TYPE_COMPUTE: "pm4", kfd.KFD_IOC_QUEUE_TYPE_COMPUTE_AQL: "aql", kfd.KFD_IOC_QUEUE_TYPE_SDMA: "sdma"}
    if a.queue_type not in kinds:
      if a.queue_type in (kfd.KFD_IOC_QUEUE_TYPE_SDMA_XGMI, 4): raise KFDErr(errno.EINVAL, w, f"queue_type {a.queue_type}: XGMI/by-engine SDMA queues are not modelled")
      raise KFDErr(524, w, f"queue_type {a.queue_type} is not a queue type (-ENOTSUPP)")
    kind = kinds[a.queue_type]
    g, pdd = self._pdd(a.gpu_id, "kfd_ioctl_create_queue")
    self._bind(pdd, "kfd_ioctl_create_queue", errno.ESRCH)  # kfd_ioctl_create_queue turns a failed bind into -ESRCH
    self._doorbells(pdd)
    refs = self._acquire_buffers(g, kind, a, ring_size)
    try:
      # kfd_process_queue_manager.c: pqm_create_queue: at most 127 queues (255 on GFX 9.4.3) per process and GPU
      maxq = 255 if g.target.version // 100 == 904 else 127
      if pdd["queues"] >= maxq: raise KFDErr(errno.ENOSPC, "pqm_create_queue", f"{pdd['queues']} queues already (limit {maxq})")
      if kind == "sdma":  # kfd_device_queue_manager.c: allocate_sdma_queue, allocate_doorbell (static SDMA doorbells)
        n_eng, per = g.props["num_sdma_engines"], g.props["num_sdma_queues_per_engine"]
        free = [i for i in range(n_eng * per) if i not in pdd["sdma"]]
        if not free: raise KFDErr(errno.ENOMEM, "allocate_sdma_queue", f"all {n_eng * per} SDMA queues are in use")
        sid = free[0]
        pdd["sdma"].add(sid)
        engine, qn = sid % n_eng, sid // n_eng
        base = SDMA_DOORBELL_BASE + SDMA_DOORBELL_STRIDE * engine
        if g.target.version // 100 == 904: base = _align(base, 4)  # KFD_SDMA_SHADER_DOORBELL_GRANULARITY on 9.4.3
        db_id = base + (qn & 1) * KFD_QUEUE_DOORBELL_MIRROR_OFFSET + (qn >> 1)
      else:  # CP queues: the first free id outside the SDMA/IH/VCN range (init_doorbell_bitmap)
        db_id = next((i for i in range(KFD_MAX_NUM_OF_QUEUES_PER_PROCESS) if i not in pdd["db_ids"] and
                      not SDMA_DOORBELL_BASE <= i % KFD_QUEUE_DOORBELL_MIRROR_OFFSET < 0x180), None)
        if db_id is None: raise KFDErr(errno.EBUSY, "allocate_doorbell", "no doorbells available")
        pdd["db_ids"].add(db_id)
        sid, engine = -1, 0
    except KFDErr:
      for bo in refs: bo.queue_refs -= 1
      raise
    pdd["queues"] += 1
    qid = next(i for i in range(1024) if i not in self.queues)
    active = ring_size > 0 and a.ring_base_address != 0 and (a.queue_percentage & 0xFF) > 0  # kfd_priv.h: QUEUE_IS_ACTIVE
    q = Queue(qid, g, kind, a.ring_base_address >> 8 << 8, ring_size, a.read_pointer_address, a.write_pointer_address, db_id * 8, active,
              refs, sdma_engine=engine)
    q.sdma_id = sid  # type: ignore[attr-defined]
    # kfd_device_queue_manager.c: create_queue_cpsch: q->properties.is_evicted = !!qpd->evicted: a process whose queues
    # were evicted for a VM fault gets new queues that never reach the hardware (QUEUE_IS_ACTIVE, kfd_priv.h)
    if pdd.get("evicted", 0):
      q.evicted = True
      self.log.append(f"mockamd: queue {qid} created evicted: this process's queues on gpu_id {g.gpu_id:#x} are evicted (qpd->evicted {pdd['evicted']})")
    self.queues[qid] = q
    a.queue_id = qid
    # KFD_MMAP_TYPE_DOORBELL | KFD_MMAP_GPU_ID, and on SOC15 the queue's byte offset in the process doorbell slice
    a.doorbell_offset = KFD_MMAP_TYPE_DOORBELL | (a.gpu_id << KFD_MMAP_GPU_ID_SHIFT) | q.doorbell
    return 0

  def _acquire_buffers(self, g: GPU, kind: str, a: Any, ring_size: int) -> list[BO]:
    """kfd_queue.c: kfd_queue_acquire_buffers: each queue buffer must be exactly one GPU mapping of the expected size."""
    w = "kfd_queue_acquire_buffers"
    refs: list[BO] = []
    def get(addr: int, expected: int, what: str) -> None:
      # kfd_queue_buffer_get: the address's page must start a mapping; a nonzero page count must end it
      bo = self._mapping_at(g, addr)
      pages = expected >> 12
      if bo is None or (addr >> 12) != (bo.va >> 12) or (pages and (addr >> 12) + pages - 1 != (bo.va + bo.size - 1) >> 12):
        for b in refs: b.queue_refs -= 1
        have = f"the mapping there is {bo.va:#x}+{bo.size:#x}" if bo else "nothing is mapped there"
        raise KFDErr(errno.EINVAL, f"{w} -> kfd_queue_buffer_get", f"{what} at {addr:#x} must be the start of a GPU mapping of exactly {expected:#x} bytes; {have}")
      bo.queue_refs += 1
      refs.append(bo)
    get(a.write_pointer_address, PAGE, "write pointer")
    get(a.read_pointer_address, PAGE, "read pointer")
    get(a.ring_base_address, ring_size, "ring")
    if kind == "sdma": return refs
    sz = g.sizes
    def fail(why: str) -> None:
      for b in refs: b.queue_refs -= 1
      raise KFDErr(errno.EINVAL, w, why)
    if a.eop_buffer_address:
      if a.eop_buffer_size < sz.eop_buffer_size: fail(f"EOP buffer of {a.eop_buffer_size:#x} bytes is less than the node's {sz.eop_buffer_size:#x}")
      get(a.eop_buffer_address, _align(a.eop_buffer_size, PAGE), "EOP buffer")
    if a.ctl_stack_size != sz.ctl_stack_size: fail(f"ctl_stack_size {a.ctl_stack_size:#x} is not the node's {sz.ctl_stack_size:#x}")
    if a.ctx_save_restore_size < sz.cwsr_size: fail(f"ctx_save_restore_size {a.ctx_save_restore_size:#x} is less than the node's cwsr_size {sz.cwsr_size:#x}")
    total = _align((a.ctx_save_restore_size + sz.debug_memory_size) * sz.num_xcc, PAGE)
    get(a.ctx_save_restore_address, total, "context save area ((ctx_save_restore_size + debug memory) x XCCs)")
    return refs

  def _mapping_at(self, g: GPU, va: int) -> BO | None:
    i = bisect.bisect_right(g.vm, va, key=lambda m: m[0]) - 1
    if i >= 0 and g.vm[i][0] <= va < g.vm[i][0] + g.vm[i][1]: return g.vm[i][2]
    return None

  def _destroy_queue(self, a: Any) -> int:
    q = self.queues.pop(a.queue_id, None)
    if q is None: raise KFDErr(errno.EINVAL, "pqm_destroy_queue", f"no queue {a.queue_id}")
    # destroy_queue_cpsch -> execute_queues_cpsch -> unmap_queues_cpsch: the queue is preempted; waves still running are
    # saved to its context-save area (CWSR) and dropped with it
    busy = ([d for d in q.running.group] if q.running is not None else []) + q.inflight
    if q.running is not None:
      for _, gen in q.running.runs: gen.close()
      q.running = None
    q.inflight = []
    if busy:
      self.log.append(f"mockamd: queue {q.qid} destroyed with {len(busy)} dispatch(es) running (packets {', '.join(str(d.index) for d in busy)}): "
                      f"preempted, its waves saved (CWSR) and dropped")
    for bo in q.refs: bo.queue_refs -= 1   # kfd_queue_release_buffers
    pdd = self.pdd[q.gpu.gpu_id]
    pdd["queues"] -= 1
    if q.kind == "sdma": pdd["sdma"].discard(getattr(q, "sdma_id", -1))
    else: pdd["db_ids"].discard(q.doorbell // 8)
    return 0

  # ---------------------------------------------------------------- events (kfd_events.c)
  def _create_event(self, a: Any) -> int:
    if a.event_page_offset:  # kfd_kmap_event_page
      w = "kfd_kmap_event_page"
      if self.signal_page is not None: raise KFDErr(errno.EINVAL, w, "the event page is already set")
      bo, pdd = self._bo(a.event_page_offset, w)
      self._bind(pdd, w)
      if bo.domain == "userptr": raise KFDErr(errno.EINVAL, "amdgpu_amdkfd_gpuvm_map_gtt_bo_to_kernel", "a userptr BO cannot be the event page")
      if bo.domain != "gtt": raise KFDErr(errno.EINVAL, "amdgpu_amdkfd_gpuvm_map_gtt_bo_to_kernel", f"the event page must be a GTT BO, not {bo.domain}")
      if bo.size < KFD_SIGNAL_EVENT_LIMIT * 8: raise KFDErr(errno.EINVAL, "kfd_event_page_set", f"event page of {bo.size:#x} bytes; at least {KFD_SIGNAL_EVENT_LIMIT * 8:#x}")
      assert bo.backing is not None
      ctypes.memset(bo.backing.view, 0xFF, KFD_SIGNAL_EVENT_LIMIT * 8)
      self.signal_page = (bo.backing.view, bo.size, a.event_page_offset)
    a.event_page_offset = 0
    t = a.event_type
    if t in (kfd.KFD_IOC_EVENT_SIGNAL, kfd.KFD_IOC_EVENT_DEBUG_EVENT):
      if self.signal_page is None:  # allocate_signal_page: the kernel's own page, 256 slots mapped by default
        b = Backing(KFD_SIGNAL_EVENT_LIMIT * 8, "events")
        ctypes.memset(b.view, 0xFF, KFD_SIGNAL_EVENT_LIMIT * 8)
        self.signal_page = (b.view, 256 * 8, 0)
        self._kernel_event_page = b
      limit = self.signal_page[1] // 8
      if self.signal_event_count >= limit: raise KFDErr(errno.ENOSPC, "create_signal_event", f"all {limit} signal event slots are in use")
      eid = next((i for i in range(1, limit) if i not in self.events), None)
      if eid is None: raise KFDErr(errno.ENOSPC, "allocate_event_notification_slot", "no free slot")
      self.signal_event_count += 1
      ctypes.c_uint64.from_address(self.signal_page[0] + 8 * eid).value = UNSIGNALED_EVENT_SLOT
      a.event_page_offset, a.event_slot_index = KFD_MMAP_TYPE_EVENTS, eid
    else: eid = next(i for i in range(KFD_FIRST_NONSIGNAL_EVENT_ID, KFD_FIRST_NONSIGNAL_EVENT_ID + (1 << 20)) if i not in self.events)
    self.events[eid] = Event(eid, t, bool(a.auto_reset))
    a.event_id = a.event_trigger_data = eid
    return 0

  def _destroy_event(self, a: Any) -> int:
    ev = self.events.get(a.event_id)
    if ev is None or a.event_id == 0: raise KFDErr(errno.EINVAL, "kfd_event_destroy", f"no event {a.event_id}")
    del self.events[a.event_id]
    if ev.type in (kfd.KFD_IOC_EVENT_SIGNAL, kfd.KFD_IOC_EVENT_DEBUG_EVENT): self.signal_event_count -= 1
    self._cond.notify_all()
    return 0

  def _set_event(self, a: Any) -> int:
    ev = self.events.get(a.event_id)
    if ev is None or ev.type != kfd.KFD_IOC_EVENT_SIGNAL: raise KFDErr(errno.EINVAL, "kfd_set_event", f"no CPU-signalable event {a.event_id}")
    self._signal(ev)
    return 0

  def _reset_event(self, a: Any) -> int:
    ev = self.events.get(a.event_id)
    if ev is None or ev.type != kfd.KFD_IOC_EVENT_SIGNAL: raise KFDErr(errno.EINVAL, "kfd_reset_event", f"no CPU-signalable event {a.event_id}")
    ev.signaled = False
    return 0

  def _signal(self, ev: Event, data: bytes = b"") -> None:
    """kfd_events.c: set_event: an auto-reset event that wakes a waiter does not stay signalled."""
    with self._cond:
      ev.signaled = not ev.auto_reset or ev.waiters == 0
      ev.age += 1
      ev.pulses += 1
      if data: ev.data = data
      self._cond.notify_all()

  def _wait_events(self, a: Any) -> int:
    """kfd_events.c: kfd_wait_on_events (timeout in ms; 0 immediate, 0xffffffff infinite)."""
    n = a.num_events
    evdata = (kfd.struct_kfd_event_data * n).from_address(a.events_ptr) if n else []
    deadline = None if a.timeout == 0xFFFFFFFF else time.monotonic() + min(a.timeout, 0x7FFFFFFF) / 1000
    with self._cond:
      evs, activated, start = [], [], []
      for d in evdata:
        ev = self.events.get(d.event_id)
        if ev is None or d.event_id == 0:
          a.wait_result = kfd.KFD_IOC_WAIT_RESULT_FAIL
          raise KFDErr(errno.EINVAL, "init_event_waiter", f"no event {d.event_id}")
        evs.append(ev)
        act = ev.signaled
        ev.signaled = ev.signaled and not ev.auto_reset
        age = ctypes.c_uint64.from_buffer(d, 0).value if ev.type == kfd.KFD_IOC_EVENT_SIGNAL else 0  # signal_event_data.last_event_age
        if age and ev.age != age: act = True
        activated.append(act)
        start.append(ev.pulses)
      for ev in evs: ev.waiters += 1
      try:
        while True:
          for i, ev in enumerate(evs):
            if ev.pulses != start[i]: activated[i] = True
          if any(ev.id not in self.events for ev in evs):
            a.wait_result = kfd.KFD_IOC_WAIT_RESULT_FAIL
            raise KFDErr(errno.EIO, "kfd_wait_on_events", "an event was destroyed while waiting")
          done = all(activated) if a.wait_for_all else any(activated)
          if done: break
          left = None if deadline is None else deadline - time.monotonic()
          if left is not None and left <= 0: break
          self._cond.wait(left)
      finally:
        for ev in evs: ev.waiters -= 1
      a.wait_result = kfd.KFD_IOC_WAIT_RESULT_COMPLETE if done else kfd.KFD_IOC_WAIT_RESULT_TIMEOUT
      if done:  # copy_signaled_event_data: memory exceptions carry the fault
        for i, ev in enumerate(evs):
          if activated[i] and ev.type in (kfd.KFD_IOC_EVENT_MEMORY, kfd.KFD_IOC_EVENT_HW_EXCEPTION) and ev.data:
            ctypes.memmove(ctypes.addressof(evdata[i]), ev.data, len(ev.data))
      return 0

  def _interrupt(self, ctx: int, bits: int) -> None:
    """kfd_events.c: kfd_signal_event_interrupt: the event whose id the interrupt carries is set only if its slot in the
    event page was written (is not UNSIGNALED_EVENT_SLOT); a bad id falls back to scanning every slot."""
    if self.signal_page is None: return
    slots = self.signal_page[0]
    def slot(i: int) -> int: return ctypes.c_uint64.from_address(slots + 8 * i).value
    def fire(ev: Event) -> None:
      if ev.type in (kfd.KFD_IOC_EVENT_SIGNAL, kfd.KFD_IOC_EVENT_DEBUG_EVENT):
        ctypes.c_uint64.from_address(slots + 8 * ev.id).value = UNSIGNALED_EVENT_SLOT  # acknowledge_signal
        self._signal(ev)
    ev = None
    if bits and ctx < KFD_SIGNAL_EVENT_LIMIT and (bits > 31 or (1 << bits) >= KFD_SIGNAL_EVENT_LIMIT):
      if slot(ctx) != UNSIGNALED_EVENT_SLOT: ev = self.events.get(ctx)
    if ev is not None and ev.id: fire(ev)
    else:
      for e in list(self.events.values()):
        if 0 < e.id < KFD_SIGNAL_EVENT_LIMIT and slot(e.id) != UNSIGNALED_EVENT_SLOT: fire(e)

  _ioctls: dict[int, tuple[str, type, int, Callable]] = {}

  # ---------------------------------------------------------------- mmap
  def mmap(self, addr: int, length: int, prot: int, flags: int, fd: int, offset: int) -> int:
    with self._lock:
      if fd == -1:  # anonymous memory: the kernel's ordinary behaviour
        r = _mmap(addr, length, prot, flags, -1, offset)
        self.maps[r] = (length, None)
        return r
      f = self.files.get(fd)
      if f is None: raise OSError(errno.EBADF, f"mmap: bad fd {fd}")
      if f["kind"] == "render": return self._mmap_bo(f, fd, addr, length, prot, flags, offset)
      if f["kind"] != "kfd": raise OSError(errno.ENODEV, f"mmap of {f['path']}: not mappable")
      # kfd_chardev.c: kfd_mmap: the type is in the offset's top bits, the GPU in bits 46..61
      gpu_id = (offset >> KFD_MMAP_GPU_ID_SHIFT) & 0xFFFF
      g = self.gpu_by_id(gpu_id) if gpu_id else None
      typ = offset & (3 << KFD_MMAP_TYPE_SHIFT)
      if typ == KFD_MMAP_TYPE_DOORBELL:
        if g is None: raise OSError(errno.ENODEV, f"mmap of doorbells: no GPU with gpu_id {gpu_id:#x} (kfd_mmap)")
        if length != DOORBELL_SLICE: raise OSError(errno.EINVAL, f"mmap of {length:#x} bytes of doorbells: the process slice is {DOORBELL_SLICE:#x} (kfd_doorbell_mmap)")
        b, what = self._doorbells(self.pdd[gpu_id]), ("doorbell", g)
      elif typ == KFD_MMAP_TYPE_EVENTS:
        if self.signal_page is None or self.signal_page[2]: raise OSError(errno.EINVAL, "mmap of the event page: none allocated by the kernel (kfd_event_mmap)")
        if length > KFD_SIGNAL_EVENT_LIMIT * 8: raise OSError(errno.EINVAL, f"event page mmap of {length:#x} bytes (kfd_event_mmap)")
        b, what = self._kernel_event_page, ("events", None)
        self.signal_page = (self.signal_page[0], length, 0)
      elif typ == KFD_MMAP_TYPE_MMIO:
        if g is None: raise OSError(errno.ENODEV, f"mmap of MMIO: no GPU with gpu_id {gpu_id:#x} (kfd_mmap)")
        if length != PAGE: raise OSError(errno.EINVAL, f"mmap of {length:#x} bytes of MMIO remap: one page only (kfd_mmio_mmap)")
        b, what = g.mmio, ("mmio", g)
      else: raise OSError(errno.EINVAL, f"mmap of /dev/kfd at offset {offset:#x}: reserved memory is not modelled")
      r = _mmap(addr, length, prot, (flags & ~0x0F) | MAP_SHARED, b.fd, 0)
      self.maps[r] = (length, what)
      return r

  def _mmap_bo(self, f: dict, fd: int, addr: int, length: int, prot: int, flags: int, offset: int) -> int:
    # drm_gem.c: drm_gem_mmap: the offset must start a BO's range and the length fit in it -> -EINVAL
    bo = next((b for b in self.bos.values() if b.mmap_offset == offset and b.domain != "mmio"), None)
    if bo is None or _align(length, PAGE) > _align(bo.size, PAGE) or bo.gpu is not f["gpu"]:
      raise OSError(errno.EINVAL, f"mmap of {f['path']} at offset {offset:#x}+{length:#x}: no BO there (drm_gem_mmap)")
    # drm_vma_node_is_allowed: only the DRM file the KFD VM was acquired from may map the BO -> -EACCES
    if self.pdd[bo.gpu.gpu_id]["drm"] != fd: raise OSError(errno.EACCES, f"mmap of a KFD BO through fd {fd}, not the DRM file the VM was acquired from (drm_gem_mmap)")
    if bo.domain == "userptr": raise OSError(errno.EPERM, "mmap of a userptr BO (amdgpu_gem_object_mmap)")
    assert bo.backing is not None
    r = _mmap(addr, length, prot, (flags & ~0x0F) | MAP_SHARED, bo.backing.fd, 0)
    self.maps[r] = (length, ("bo", bo))
    return r

  def munmap(self, addr: int, length: int) -> None:
    with self._lock:
      if _libc.munmap(addr, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"munmap({addr:#x}, {length:#x}) failed: {os.strerror(e)}")
      self.maps.pop(addr, None)

  # ---------------------------------------------------------------- doorbells and MMIO writes
  def doorbell(self, addr: int, value: int, nbytes: int = 4) -> None:
    with self._lock:
      for a, (l, what) in self.maps.items():
        if a <= addr < a + l and isinstance(what, tuple):
          kind, g = what
          (ctypes.c_uint64 if nbytes == 8 else ctypes.c_uint32).from_address(addr).value = value
          if kind == "mmio":
            if addr - a == kfd.KFD_MMIO_REMAP_HDP_MEM_FLUSH_CNTL: g.hdp_flushes += 1
          elif kind == "doorbell":
            q = next((q for q in self.queues.values() if q.gpu is g and q.doorbell == (addr - a) & ~7), None)
            if q is None: self.log.append(f"mockamd: doorbell write at slice offset {addr - a:#x}: no queue uses it")
            else: q.db = ctypes.c_uint64.from_address(a + q.doorbell).value   # the doorbell register the engine latches
            self._run_all()
          return
      raise OSError(errno.EFAULT, f"doorbell write to {addr:#x}: not a mapped doorbell or MMIO page")

  # ---------------------------------------------------------------- GPU memory
  def _xlate(self, g: GPU, va: int, n: int, client: str = "CP", write: bool = False) -> int:
    """Host address of GPU VA range [va, va+n) within one mapping; GPUFaultErr when unmapped."""
    last = g.last_hit
    if last is not None and last[0] <= va and va + n <= last[0] + last[1] and last[2].gpu_id_mapped(g): return last[3] + (va - last[0])
    i = bisect.bisect_right(g.vm, va, key=lambda m: m[0]) - 1
    if i >= 0:
      base, size, bo = g.vm[i]
      if base <= va and va + n <= base + size and bo.backing is not None:
        g.last_hit = (base, size, bo, bo.backing.view)
        return bo.backing.view + (va - base)
    raise GPUFaultErr(va, write, client)

  def gpu_read(self, g: GPU, va: int, n: int, client: str = "CP") -> bytes:
    out, off = bytearray(), 0
    while off < n:  # page by page across mappings
      k = min(n - off, PAGE - ((va + off) % PAGE)) if n - off > PAGE else n - off
      try: out += ctypes.string_at(self._xlate(g, va + off, k, client), k)
      except GPUFaultErr:
        k = min(n - off, PAGE - ((va + off) % PAGE))
        out += ctypes.string_at(self._xlate(g, va + off, k, client), k)
      off += k
    return bytes(out)

  def gpu_write(self, g: GPU, va: int, data: bytes, client: str = "CP") -> None:
    off = 0
    while off < len(data):
      k = min(len(data) - off, PAGE - ((va + off) % PAGE))
      ctypes.memmove(self._xlate(g, va + off, k, client, True), data[off:off + k], k)
      off += k

  def u32(self, g: GPU, va: int) -> int: return int.from_bytes(self.gpu_read(g, va, 4), "little")
  def u64(self, g: GPU, va: int) -> int: return int.from_bytes(self.gpu_read(g, va, 8), "little")

  def _copy(self, g: GPU, dst: int, src: int, n: int, client: str) -> None:
    while n > 0:
      k = min(n, 1 << 20)
      self.gpu_write(g, dst, self.gpu_read(g, src, k, client), client)
      src, dst, n = src + k, dst + k, n - k

  def _vm_fault(self, g: GPU, e: GPUFaultErr) -> None:
    """What a GPU page fault becomes (gmc_v11_0.c / gmc_v9_0.c: the dmesg lines; kfd_debug.c:
    kfd_set_dbg_ev_from_interrupt -> kfd_dqm_evict_pasid + kfd_signal_vm_fault_event)."""
    page = e.va >> 12 << 12
    self.log.append(f"amdgpu 0000:{3 + g.index:02x}:00.0: amdgpu: [gfxhub] page fault (src_id:0 ring:{0x18 if e.client == 'SDMA' else 0} vmid:8 pasid:32770)")
    self.log.append(f"amdgpu 0000:{3 + g.index:02x}:00.0: amdgpu:   in page starting at address {page:#018x} from client {e.client} ({'write' if e.write else 'read'}: {e})")
    for q in self.queues.values():
      if q.gpu is g: q.evicted = True
    # evict_process_queues_cpsch: qpd->evicted++; no restore follows a VM fault (module docstring)
    if g.gpu_id in self.pdd: self.pdd[g.gpu_id]["evicted"] = self.pdd[g.gpu_id].get("evicted", 0) + 1
    data = kfd.struct_kfd_hsa_memory_exception_data()
    data.va, data.gpu_id, data.failure.NotPresent, data.failure.imprecise = page, g.gpu_id, 1, 0
    for ev in self.events.values():
      if ev.type == kfd.KFD_IOC_EVENT_MEMORY: self._signal(ev, bytes(data))

  def _bad_queue(self, q: Queue) -> None:
    """A queue the engine cannot go on with: that queue alone is taken off the hardware and reset, and the reset is
    reported to the process (kfd_device_queue_manager.c: kfd_dqm_suspend_bad_queue_mes evicts the bad queue and resumes
    the good ones; reset_queues_on_hws_hang -> set_queue_as_reset, which logs the line below and leaves the process's
    other and later queues running; kfd_events.c: kfd_signal_reset_event sets the hardware-exception events with
    memory_lost 1 and reset_cause GPU_HANG, reset_type left 0, which reads as WHOLE_GPU_RESET)."""
    q.evicted = True
    self.log.append(f"amdgpu 0000:{3 + q.gpu.index:02x}:00.0: amdgpu: queue id {q.qid:#x} at pasid 0x8002 is reset")
    data = kfd.struct_kfd_hsa_hw_exception_data(reset_type=kfd.KFD_HW_EXCEPTION_WHOLE_GPU_RESET,
                                                reset_cause=kfd.KFD_HW_EXCEPTION_GPU_HANG, memory_lost=1, gpu_id=q.gpu.gpu_id)
    for ev in self.events.values():
      if ev.type == kfd.KFD_IOC_EVENT_HW_EXCEPTION: self._signal(ev, bytes(data))

  # ---------------------------------------------------------------- the engines
  def _run_all(self) -> None:
    """Run every queue until none makes progress (a signal one writes may unblock another), for at most one time slice
    of dispatch execution (module docstring)."""
    self._slice_end = time.perf_counter() + self.slice_s
    progress = True
    while progress:
      progress = False
      for q in list(self.queues.values()):
        if not q.active or q.evicted or q.fault is not None: continue
        try:
          if q.kind == "aql": progress |= self._run_aql(q)
          elif q.kind == "sdma": progress |= self._run_sdma(q)
          else: progress |= self._run_pm4_ring(q)
        except GPUFaultErr as e:
          q.fault = f"VM fault: {e}"
          self._vm_fault(q.gpu, e)
        except QueueStop as e:
          q.fault = str(e)
          self.log.append(f"amdgpu: queue {q.qid} ({q.kind}) stopped: {e}")
          self._bad_queue(q)

  # --- AQL (the CP's packet processor)
  def _run_aql(self, q: Queue) -> bool:
    g, nslots, progress = q.gpu, q.ring_size // 64, False
    # the CP runs what both the write_dispatch_id in memory and the doorbell (the id of the last packet written, HSA's
    # rule, which ROCr follows) announce
    wr = 0 if q.db is None else min(self.u64(g, q.wptr), q.db + 1)
    try:
      while q.rd < wr:
        slot_va = q.ring + (q.rd % nslots) * 64
        w = hw.words_of(self.gpu_read(g, slot_va, 64))
        d = hw.decode_aql(w)
        if d["type"] == hw.AQL_INVALID:
          q.blocked = f"packet {q.rd}: header INVALID (not yet written)"
          break
        if d["barrier"] and not self._drain(q):
          q.blocked = f"packet {q.rd}: barrier bit: waits for the dispatches still running ({self._running_names(q)})"
          break
        if d["type"] == hw.AQL_DISPATCH:
          if not self._aql_dispatch(q, d): break
        elif d["type"] in (hw.AQL_BARRIER_AND, hw.AQL_BARRIER_OR):
          vals = [self.u64(g, s + 8) for s in d["deps"] if s]  # amd_signal_t: the value is at +8
          ok = all(v == 0 for v in vals) if d["type"] == hw.AQL_BARRIER_AND else (not vals or any(v == 0 for v in vals))
          if not ok:
            q.blocked = f"packet {q.rd}: {hw.AQL_TYPE_NAMES[d['type']]} on signals {[hex(s) for s in d['deps'] if s]} (values {vals})"
            break
          self._complete_signal(g, d["completion_signal"])
        elif d["type"] == hw.AQL_VENDOR:
          if d["format"] != hw.AMD_AQL_FORMAT_PM4_IB or d["dw_count_remain"] != hw.AMD_AQL_PM4_IB_DW_COUNT_REMAIN:
            raise QueueStop(f"packet {q.rd}: vendor-specific format {d['format']} dw_count_remain {d['dw_count_remain']} "
                            f"(the CP runs format {hw.AMD_AQL_FORMAT_PM4_IB} with {hw.AMD_AQL_PM4_IB_DW_COUNT_REMAIN})")
          if not self._aql_pm4_ib(q, d): break
          self._complete_signal(g, d["completion_signal"])
        else: raise QueueStop(f"packet {q.rd}: AQL packet type {d['type']} ({hw.AQL_TYPE_NAMES.get(d['type'], '?')}) is not processed by a compute queue")
        q.blocked = None
        q.rd += 1
        q.done_packets += 1
        self.gpu_write(g, q.rptr, q.rd.to_bytes(8, "little"))   # read_dispatch_id
        progress = True
    finally:
      had = q.running is not None
      if self._drain(q) and had: progress = True  # blocked or idle: the dispatches in flight go on (and finish, in time)
    return progress

  def _aql_pm4_ib(self, q: Queue, d: dict) -> bool:
    cmd = d["ib_cmd"]
    if (cmd[0] >> 30) != 3 or (cmd[0] >> 8) & 0xFF != hw.PM4[q.gpu.family].PACKET3_INDIRECT_BUFFER:
      raise QueueStop(f"packet {q.rd}: vendor PM4_IB packet without an INDIRECT_BUFFER command ({cmd[0]:#010x})")
    if not (cmd[3] >> 23) & 1: raise QueueStop(f"packet {q.rd}: INDIRECT_BUFFER without the VALID bit")
    ib, ndw = (cmd[1] & ~3) | (cmd[2] << 32), cmd[3] & 0xFFFFF
    start = q.ib_resume[1] if q.ib_resume and q.ib_resume[0] == q.rd else 0
    words = hw.words_of(self.gpu_read(q.gpu, ib, 4 * ndw))
    stop = self._pm4(q, words, start, ib, max(q.gpu.props.get("num_xcc", 1), 1))
    q.ib_resume = None if stop is None else (q.rd, stop)
    return stop is None

  def _aql_dispatch(self, q: Queue, d: dict) -> bool:
    g = q.gpu
    # the queue ptr: the CP finds the amd_queue_t from the read pointer KFD gave it, through the byte offset of
    # read_dispatch_id stored right after it (read_dispatch_id_field_base_byte_offset)
    base_off = self.u32(g, q.rptr + 8)
    disp = Dispatch(q.qid, q.rd, d["kernel_object"], d["kernarg"], d["grid"], d["workgroup"], d["group_segment"], d["private_segment"],
                    d["completion_signal"], q.ring + (q.rd % (q.ring_size // 64)) * 64, q.rptr - base_off if base_off <= q.rptr else 0)
    kd = self.gpu_read(g, disp.kernel_object, 64)   # the CP reads the kernel descriptor (VM fault if unmapped)
    if d["dims"] not in (1, 2, 3): raise QueueStop(f"packet {q.rd}: dispatch with {d['dims']} dimensions")
    wg = disp.workgroup[0] * disp.workgroup[1] * disp.workgroup[2]
    if wg == 0 or any(x == 0 for x in disp.grid): raise QueueStop(f"packet {q.rd}: empty dispatch grid {disp.grid} workgroup {disp.workgroup}")
    disp.waves_per_group = -(-wg // g.target.wave_size)
    desc = hsa.amdhsa_kernel_descriptor_t.from_buffer_copy(kd)
    if hsa.AMDHSA_RSRC2_ENABLE_PRIVATE_SEGMENT.decode(desc.compute_pgm_rsrc2) or d["private_segment"]:
      disp.scratch = self._dispatch_scratch(q, d, disp)
      if disp.scratch is None: return False
    self.dispatches.append(disp)
    q.inflight.append(disp)
    return True

  def _dispatch_scratch(self, q: Queue, d: dict, disp: Dispatch) -> Any:
    """The scratch the CP gives a dispatch that enables a private segment, from the queue's amd_queue_t (ROCr
    amd_hsa_queue.h; the CP finds it from the read pointer): the backing memory, the slot size and count
    (COMPUTE_TMPRING_SIZE: WAVES per shader engine on gfx11, per XCC on gfx9; WAVESIZE in 256 / 1024-byte units, ROCdbgapi
    architecture.cpp scratch_memory_region). A private segment larger than the queue's (scratch_wave64_lane_byte_size
    scaled to the wave size), or none at all, makes the CP ask the runtime for more and wait (AMDGPUUsage "Flat Scratch":
    the CP "requests the runtime to increase the queue's scratch size"; ROCr DynamicQueueEventsHandler: error code
    0x401 for wave32, 0x1 for wave64, in queue_inactive_signal; the runtime stores 0 there to restart): None then, and
    the queue is blocked on it."""
    from baregrad.drivers.mock.rdna3.machine import Scratch
    g = q.gpu
    if not disp.queue_va: raise QueueStop(f"packet {q.rd}: a dispatch with a private segment, but no amd_queue_t behind the read pointer")
    f = self.gpu_read(g, disp.queue_va, 0xC8)
    u32 = lambda o: int.from_bytes(f[o:o + 4], "little")   # noqa: E731
    u64 = lambda o: int.from_bytes(f[o:o + 8], "little")   # noqa: E731
    tmpring, base, size, lane64, inactive = u32(0x8C), u64(0xA0), u64(0xA8), u32(0xB0), u64(0xC0)
    lanes, fam = g.target.wave_size, g.family
    unit, wbits = (256, 15) if fam == "gfx11" else (1024, 13)
    waves, wavesize = tmpring & 0xFFF, (tmpring >> 12) & ((1 << wbits) - 1)
    need = (d["private_segment"] + 3) & ~3                 # the CP rounds the packet's size up to a DWORD (AMDGPUUsage)
    have = lane64 * 64 // lanes
    ses = max(g.props["array_count"] // max(g.props["simd_arrays_per_engine"], 1), 1)
    slots = waves * (ses if fam == "gfx11" else max(g.props.get("num_xcc", 1), 1))
    if q.scratch_request and inactive and self.u64(g, inactive + 8) != 0:
      q.blocked = f"{q.scratch_request}; still waiting for the runtime to store 0 in queue_inactive_signal {inactive:#x}"
      return None
    short = [why for bad, why in ((not base, "scratch_backing_memory_location is 0"), (not waves, "COMPUTE_TMPRING_SIZE.WAVES is 0"),
                                  (need > have, f"{need} bytes per work-item needed, scratch_wave64_lane_byte_size {lane64} gives {have}"),
                                  (need * lanes > wavesize * unit, f"a wave needs {need * lanes} bytes, COMPUTE_TMPRING_SIZE.WAVESIZE {wavesize} gives {wavesize * unit}"))
             if bad]
    if short:
      code = 0x401 if lanes == 32 else 0x1
      q.blocked = (f"packet {q.rd}: dispatch of kernel object {disp.kernel_object:#x} needs scratch the queue does not have ({'; '.join(short)}): "
                   f"the CP requested more (queue_inactive_signal {inactive:#x} <- {code:#x}) and waits")
      if not q.scratch_request:
        if inactive: self.gpu_write(g, inactive + 8, code.to_bytes(8, "little"))
        self.log.append(f"mockamd: queue {q.qid}: {q.blocked}")
      q.scratch_request = q.blocked
      return None
    q.scratch_request = ""
    return Scratch(base, wavesize * unit, slots)

  def _complete_signal(self, g: GPU, handle: int) -> None:
    if handle: self.gpu_write(g, handle + 8, ((self.u64(g, handle + 8) - 1) & ((1 << 64) - 1)).to_bytes(8, "little"))

  def _drain(self, q: Queue) -> bool:
    """Complete the dispatches in flight; False when the time slice ran out first (they go on at the next doorbell).
    Several (AQL packets without the barrier bit between them) run concurrently: interleaved instruction step by
    instruction step, the most recently launched first, as the NV mock does; each records the memory it reads and writes
    (its scratch excepted: every wave has its own slot), and a read or write of bytes another of them writes (or a write
    of bytes another reads) is a hazard."""
    while q.running is not None or q.inflight:
      if not self._advance(q): return False
    return True

  def _advance(self, q: Queue) -> bool:
    """Start the dispatches in flight (unless some are running already) and run them until they end (True) or the time
    slice runs out (False)."""
    if q.running is None:
      group, q.inflight = q.inflight, []
      if len(group) == 1:
        mem, records = self._interp_memory(q.gpu, False), None
        runs = [(group[0], self._dispatch_steps(q, group[0], mem, group[0].scratch, step=True))]
      else:
        mem = self._interp_memory(q.gpu, True)
        records = {id(d): ([], []) for d in group}
        runs = self._concurrent(q, group, mem, records)
      q.running = _Running(group, runs, records, mem, mem.tracking, mem.ignore)
    r = q.running
    mem = r.mem
    mem.tracking, mem.ignore = r.tracking, r.ignore
    n = 0
    try:
      while r.runs:
        for item in list(r.runs):
          d, gen = item
          if r.records is not None: mem.reads, mem.writes = r.records[id(d)]
          try: next(gen)
          except StopIteration: r.runs.remove(item)
        n += 1
        if n % 256 == 0 and r.runs and time.perf_counter() > self._slice_end: return False
    except BaseException:
      q.running = None
      for _, gen in r.runs: gen.close()
      raise
    finally:
      mem.reads, mem.writes, mem.tracking, mem.ignore = [], [], False, []
    q.running = None
    for d in reversed(r.group): self._complete_signal(q.gpu, d.completion_signal)
    if r.records is not None: self._hazards(q, [(d, *r.records[id(d)]) for d in r.group])
    return True

  def _running_names(self, q: Queue) -> str:
    ds = q.running.group if q.running is not None else []
    return ", ".join(f"packet {d.index}: kernel object {d.kernel_object:#x} grid {d.grid}" for d in ds) or "none"

  def _concurrent(self, q: Queue, group: list, mem: Any, records: dict) -> list:
    """(dispatch, step generator) for dispatches that run at once, latest first. Their waves share the queue's scratch
    slots (the SPI launches a wave only into a free slot): each gets an equal share when that holds a workgroup of each;
    otherwise the ones with scratch run one after another (the later waits for slots), interleaved with the rest."""
    scr = [d for d in group if d.scratch is not None]
    mem.ignore = [(d.scratch.base, d.scratch.base + d.scratch.slots * d.scratch.wave_bytes) for d in scr]
    share = scr[0].scratch.slots // len(scr) if scr else 0
    split = len(scr) <= 1 or share >= max(d.waves_per_group for d in scr)
    out, serial = [], []
    for d in reversed(group):
      sc = d.scratch
      if sc is not None and len(scr) > 1:
        if split: sc = type(sc)(sc.base, sc.wave_bytes, share, scr.index(d) * share)
        else: serial.append(d); continue
      out.append((d, self._dispatch_steps(q, d, mem, sc, step=True)))
    if serial:
      def one_after_another() -> Any:
        for d in serial:
          mem.reads, mem.writes = records[id(d)]
          for _ in self._dispatch_steps(q, d, mem, d.scratch, step=True):
            yield
            mem.reads, mem.writes = records[id(d)]
      out.append((serial[0], one_after_another()))
    return out

  def _hazards(self, q: Queue, records: list) -> None:
    import numpy as np
    def bytes_of(acc: list) -> Any:
      if not acc: return np.zeros(0, np.uint64)
      return np.unique(np.concatenate([(a[:, None] + np.arange(n, dtype=np.uint64)).reshape(-1) for a, n in acc]))
    sets = [(d, bytes_of(r), bytes_of(w)) for d, r, w in records]
    for i, (di, ri, wi) in enumerate(sets):
      for dj, rj, wj in sets[i + 1:]:
        for kind, a, b in (("read-after-write", wi, rj), ("write-after-read", ri, wj), ("write-after-write", wi, wj)):
          both = np.intersect1d(a, b)
          if both.size:
            msg = (f"mockamd: queue {q.qid}: {kind} hazard: dispatch {dj.index} (kernel object {dj.kernel_object:#x}) and dispatch "
                   f"{di.index} (kernel object {di.kernel_object:#x}) touch {both.size} common bytes from {int(both[0]):#x} with no "
                   f"barrier between them (AQL packets without the barrier bit may run concurrently)")
            self.hazards.append(msg)
            self.log.append(msg)

  def _interp_memory(self, g: GPU, tracking: bool) -> Any:
    """The interpreter's view of the GPU VA space: every mapping, backed by the same pages (no copies); kept in step
    with the page tables as BOs are mapped and unmapped."""
    if g.interp_mem is None:
      g.interp_mem = _tracking_memory()
      for va, n, bo in g.vm:
        if bo.backing is not None and bo.domain not in ("doorbell", "mmio"): _interp_map(g.interp_mem, bo)
    mem = g.interp_mem
    mem.tracking, mem.reads, mem.writes, mem.ignore = tracking, [], [], []
    return mem

  def _execute(self, q: Queue, disp: Dispatch, mem: Any, scratch: Any = None) -> None:
    for _ in self._dispatch_steps(q, disp, mem, scratch, step=False): pass

  def _dispatch_steps(self, q: Queue, disp: Dispatch, mem: Any, scratch: Any, step: bool) -> Any:
    """Run a dispatch on the RDNA3 interpreter (a generator: with `step` it yields after every instruction step). A fault
    becomes GPUFaultErr (a VM fault), anything the interpreter refuses a QueueStop."""
    g = q.gpu
    if not g.target.executes:
      disp.note = (f"not executed: {g.target.name} is CDNA3 (wave64) machine code and this mock executes RDNA3 (gfx1100, wave32) "
                   f"code only")
      self.log.append(f"mockamd: dispatch {disp.index} on queue {q.qid}: {disp.note}")
      if self.skip_unexecutable: return
      raise QueueStop(f"mock limitation: cannot execute wave64 CDNA code: the {g.target.name} dispatch of kernel object "
                      f"{disp.kernel_object:#x} (grid {disp.grid}, workgroup {disp.workgroup}) was decoded and validated, but this mock "
                      f"executes RDNA3 (gfx1100, wave32) machine code only")
    try: from baregrad.drivers.mock.rdna3.machine import RDNA3Machine  # type: ignore[import-not-found]
    except ImportError as e:
      raise QueueStop(f"mock limitation: this build has no RDNA3 interpreter (baregrad/drivers/mock/rdna3): {e}") from None
    from baregrad.drivers.mock.ptx_interp import GPUFault
    try:
      yield from RDNA3Machine(mem).dispatch_steps(disp.kernel_object, disp.grid, disp.workgroup, disp.kernarg, disp.group_segment,
                                                  disp.private_segment, dispatch_packet_va=disp.packet_va, queue_va=disp.queue_va,
                                                  dispatch_id=disp.index, scratch=scratch, step=step)
    except GPUFault as e: raise GPUFaultErr(int(e.address or 0), "store" in str(e), "TCP (shader)", str(e)) from None
    except Exception as e:   # an instruction the interpreter refuses: the wave would trap; the queue hangs
      raise QueueStop(f"the kernel at {disp.kernel_object:#x} cannot run: {type(e).__name__}: {e}") from None
    disp.executed = True

  # --- PM4 (the CP's packet engine, for IBs and PM4 rings)
  def _pm4(self, q: Queue, words: list[int], start: int, base: int, xccs: int = 1) -> int | None:
    """Execute PM4 from dword `start`; the dword offset where it blocks, or None when done. `xccs`: how many XCCs run
    this stream (a PM4 IB in an AQL queue on a multi-XCC partition: each XCC's CP processes the queue, kfd_mqd_manager_v9.c
    init_mqd_v9_4_3 gives an AQL queue one MQD per XCC; ROCr restricts the PM4 it runs through an AQL queue to XCC 0 with
    PRED_EXEC VIRTUALXCCID_SELECT on NumXcc > 1, amd_gpu_agent.cpp). They run the packets in lockstep here (they see the
    same memory, so a wait passes or blocks for all); PRED_EXEC (DW1: XCC mask 31:24, EXEC_COUNT 13:0 dwords, ROCr
    amd_gpu_pm4.h) limits the next EXEC_COUNT dwords to the XCCs in its mask. A memory write that several XCCs execute is
    done once by each, each after only its own end of pipe: it is logged in `xcc_writes`."""
    g, fam = q.gpu, q.gpu.family
    p = hw.PM4[fam]
    try: pkts = hw.split_pm4(words)
    except ValueError as e: raise QueueStop(f"PM4 at {base:#x}: {e}") from None
    pred: tuple[int, int] | None = None   # (XCC mask, first dword after the predicated ones)
    for off, op, b in pkts:
      on = xccs if pred is None or off >= pred[1] else bin(pred[0] & ((1 << xccs) - 1)).count("1")
      if op == p.PACKET3_PRED_EXEC:
        if len(b) != 1: raise QueueStop(f"PM4 at {base + 4 * off:#x}: PRED_EXEC with {len(b)} dwords (1 expected)")
        pred = ((b[0] >> 24) & 0xFF, off + 2 + (b[0] & 0x3FFF))
        continue
      if off < start or on == 0: continue
      if op in (-2, p.PACKET3_NOP): continue
      if on > 1 and op in (p.PACKET3_RELEASE_MEM, p.PACKET3_DMA_DATA) and not (op == p.PACKET3_RELEASE_MEM and not (b[1] >> 29) & 7):
        msg = (f"mockamd: queue {q.qid}: PM4 {hw.pm4_names(fam).get(op, hex(op))} at {base + 4 * off:#x} ran on {on} XCCs (no PRED_EXEC): "
               f"its write is done {on} times, each after only that XCC's own work")
        self.xcc_writes.append(msg)
        self.log.append(msg)
      if op == p.PACKET3_WAIT_REG_MEM:
        if len(b) != 6: raise QueueStop(f"PM4 at {base + 4 * off:#x}: WAIT_REG_MEM with {len(b)} dwords (6 expected)")
        func, space = b[0] & 7, (b[0] >> 4) & 3
        if space != 1: raise QueueStop(f"PM4 at {base + 4 * off:#x}: WAIT_REG_MEM on a register (this mock models memory waits only)")
        addr = (b[1] & ~3) | (b[2] << 32)   # mem_poll_addr_lo holds bits 31:2
        cur = self.u32(g, addr) & b[4]
        ok = {0: True, 1: cur < b[3], 2: cur <= b[3], 3: cur == b[3], 4: cur != b[3], 5: cur >= b[3], 6: cur > b[3]}.get(func)
        if ok is None: raise QueueStop(f"PM4 at {base + 4 * off:#x}: WAIT_REG_MEM function {func} is reserved")
        if not ok:
          q.blocked = f"WAIT_REG_MEM mem[{addr:#x}] & {b[4]:#x} {hw.WAIT_FUNCS[func]} value={b[3]} (now {cur})"
          return off
      elif op == p.PACKET3_RELEASE_MEM:
        if len(b) != 7: raise QueueStop(f"PM4 at {base + 4 * off:#x}: RELEASE_MEM with {len(b)} dwords (7 expected)")
        if not self._drain(q):  # an end-of-pipe event: everything before it has finished
          q.blocked = f"RELEASE_MEM (end of pipe) at {base + 4 * off:#x} waits for the dispatches still running ({self._running_names(q)})"
          return off
        ds, ints = (b[1] >> 29) & 7, (b[1] >> 24) & 7
        addr = b[2] | (b[3] << 32)
        for _ in range(on):
          if ds == 1: self.gpu_write(g, addr & ~3, (b[4]).to_bytes(4, "little"))        # address_lo_32b: bits 31:2
          elif ds in (2, 3, 4):                                                           # address_lo_64b: bits 31:3
            v = b[4] | (b[5] << 32) if ds == 2 else _ts() if ds == 3 else time.clock_gettime_ns(time.CLOCK_MONOTONIC_RAW)
            self.gpu_write(g, addr & ~7, v.to_bytes(8, "little"))
          elif ds != 0: raise QueueStop(f"PM4 at {base + 4 * off:#x}: RELEASE_MEM data_sel {ds} is reserved")
          # kfd_int_process_v11.c/v9.c: CP END_OF_PIPE carries 32 id bits; event_interrupt_isr_v9 drops a context id of 0
          if ints in (1, 2, 3) and not (fam == "gfx9" and b[6] == 0): self._interrupt(b[6], 32)
      elif op == p.PACKET3_ACQUIRE_MEM:
        if len(b) != (7 if fam == "gfx11" else 6): raise QueueStop(f"PM4 at {base + 4 * off:#x}: ACQUIRE_MEM with {len(b)} dwords")
      elif op == p.PACKET3_EVENT_WRITE:
        if not self._drain(q):
          q.blocked = f"EVENT_WRITE at {base + 4 * off:#x} waits for the dispatches still running ({self._running_names(q)})"
          return off
      elif op == p.PACKET3_DMA_DATA:
        if len(b) != 6: raise QueueStop(f"PM4 at {base + 4 * off:#x}: DMA_DATA with {len(b)} dwords (6 expected)")
        if (b[0] >> 29) & 3 or (b[0] >> 20) & 3: raise QueueStop(f"PM4 at {base + 4 * off:#x}: DMA_DATA from/to GDS or data is not modelled")
        n = b[5] & ((1 << 26) - 1 if fam == "gfx11" else (1 << 21) - 1)
        if not self._drain(q):
          q.blocked = f"DMA_DATA at {base + 4 * off:#x} waits for the dispatches still running ({self._running_names(q)})"
          return off
        for _ in range(on): self._copy(g, b[3] | (b[4] << 32), b[1] | (b[2] << 32), n, "CPC")
      else:
        # kfd_int_process_v11.c: CP_BAD_OPCODE -> the queue is suspended (kfd_dqm_suspend_bad_queue_mes)
        raise QueueStop(f"CP bad opcode: PM4 {hw.pm4_names(fam).get(op, hex(op))} at {base + 4 * off:#x} is not one the compute "
                        f"queue's packet engine takes here")
    return None

  def _run_pm4_ring(self, q: Queue) -> bool:
    # PM4 ring queues: rptr/wptr in dwords (KFD_IOC_QUEUE_TYPE_COMPUTE); the whole pending range runs as one stream
    g, ndw = q.gpu, q.ring_size // 4
    wr = 0 if q.db is None else min(self.u64(g, q.wptr), q.db)
    if q.rd >= wr: return False
    words = [self.u32(g, q.ring + 4 * ((q.rd + i) % ndw)) for i in range(wr - q.rd)]
    stop = self._pm4(q, words, 0, q.ring)
    q.rd = wr if stop is None else q.rd + stop
    self.gpu_write(g, q.rptr, (q.rd & 0xFFFFFFFF).to_bytes(4, "little"))
    self._drain(q)
    return True

  # --- SDMA
  def _run_sdma(self, q: Queue) -> bool:
    g, fam, progress = q.gpu, q.gpu.family, False
    mod = hw.SDMA[fam]
    wr = 0 if q.db is None else min(self.u64(g, q.wptr), q.db)  # bytes: the doorbell carries the write pointer
    def dword(i: int) -> int: return self.u32(g, q.ring + (q.rd + 4 * i) % q.ring_size)
    while q.rd < wr:
      head = dword(0)
      try: n = hw.sdma_packet_len(fam, [head], 0)
      except ValueError as e: raise QueueStop(f"SDMA illegal packet at ring offset {q.rd % q.ring_size:#x}: {e}") from None
      if q.rd + 4 * n > wr: raise QueueStop(f"SDMA packet at ring offset {q.rd % q.ring_size:#x} runs past the write pointer")
      w = [dword(i) for i in range(n)]
      op = head & 0xFF
      if op == mod.SDMA_OP_COPY:
        f = hw.sdma_unpack(fam, "COPY_LINEAR", w)
        self._copy(g, f["dst_addr_31_0"] | (f["dst_addr_63_32"] << 32), f["src_addr_31_0"] | (f["src_addr_63_32"] << 32), f["count"] + 1, "SDMA")
      elif op == mod.SDMA_OP_FENCE:
        f = hw.sdma_unpack(fam, "FENCE", w)
        self.gpu_write(g, (f["addr_31_0"] & ~3) | (f["addr_63_32"] << 32), f["data"].to_bytes(4, "little"), "SDMA")
      elif op == mod.SDMA_OP_TRAP: self._interrupt(hw.sdma_unpack(fam, "TRAP", w)["int_context"] & 0xFFFFFFF, 28)  # SDMA_TRAP: 28 id bits
      elif op == mod.SDMA_OP_POLL_REGMEM:
        f = hw.sdma_unpack(fam, "POLL_REGMEM", w)
        if not f["mem_poll"]: raise QueueStop("SDMA POLL_REGMEM on a register is not modelled")
        addr = (f["addr_31_0"] & ~3) | (f["addr_63_32"] << 32)
        cur = self.u32(g, addr) & f["mask"]
        ok = {0: True, 1: cur < f["value"], 2: cur <= f["value"], 3: cur == f["value"], 4: cur != f["value"], 5: cur >= f["value"], 6: cur > f["value"]}.get(f["func"])
        if ok is None: raise QueueStop(f"SDMA POLL_REGMEM function {f['func']} is reserved")
        if not ok:
          q.blocked = f"POLL_REGMEM mem[{addr:#x}] & {f['mask']:#x} {hw.WAIT_FUNCS[f['func']]} value={f['value']} (now {cur})"
          break
      elif op == mod.SDMA_OP_TIMESTAMP:
        f = hw.sdma_unpack(fam, "TIMESTAMP_GET_GLOBAL", w)
        self.gpu_write(g, (f["write_addr_31_3"] << 3) | (f["write_addr_63_32"] << 32), _ts().to_bytes(8, "little"), "SDMA")
      q.blocked = None
      q.rd += 4 * n
      q.done_packets += 1
      self.gpu_write(g, q.rptr, q.rd.to_bytes(8, "little"), "SDMA")
      progress = True
    return progress

  # ---------------------------------------------------------------- for tests and tools (what a debugger would show)
  def queue_state(self) -> str:
    with self._lock:
      out = []
      for q in self.queues.values():
        out.append(f"queue {q.qid} ({q.kind}) ring {q.ring:#x}: read {q.rd} packets done {q.done_packets}"
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
  kfd.AMDKFD_IOC_GET_PROCESS_APERTURES_NEW & 0xFF: ("AMDKFD_IOC_GET_PROCESS_APERTURES_NEW", kfd.struct_kfd_ioctl_get_process_apertures_new_args, 3, MockAMDGPU._apertures_new),
  kfd.AMDKFD_IOC_ACQUIRE_VM & 0xFF: ("AMDKFD_IOC_ACQUIRE_VM", kfd.struct_kfd_ioctl_acquire_vm_args, _support.IOC_WRITE, MockAMDGPU._acquire_vm),
  kfd.AMDKFD_IOC_ALLOC_MEMORY_OF_GPU & 0xFF: ("AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", kfd.struct_kfd_ioctl_alloc_memory_of_gpu_args, 3, MockAMDGPU._alloc),
  kfd.AMDKFD_IOC_FREE_MEMORY_OF_GPU & 0xFF: ("AMDKFD_IOC_FREE_MEMORY_OF_GPU", kfd.struct_kfd_ioctl_free_memory_of_gpu_args, _support.IOC_WRITE, MockAMDGPU._free),
  kfd.AMDKFD_IOC_MAP_MEMORY_TO_GPU & 0xFF: ("AMDKFD_IOC_MAP_MEMORY_TO_GPU", kfd.struct_kfd_ioctl_map_memory_to_gpu_args, 3, MockAMDGPU._map),
  kfd.AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU & 0xFF: ("AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU", kfd.struct_kfd_ioctl_unmap_memory_from_gpu_args, 3, MockAMDGPU._unmap),
  kfd.AMDKFD_IOC_AVAILABLE_MEMORY & 0xFF: ("AMDKFD_IOC_AVAILABLE_MEMORY", kfd.struct_kfd_ioctl_get_available_memory_args, 3, MockAMDGPU._available),
}

_TRACKING: type | None = None

def _tracking_memory() -> Any:
  """A fresh TrackingMemory (the class is built on first use: ptx_interp is imported lazily)."""
  global _TRACKING
  if _TRACKING is None: _TRACKING = _make_tracking()
  return _TRACKING()

def _make_tracking() -> type:
  import numpy as np
  from baregrad.drivers.mock.ptx_interp import Memory
  class TrackingMemory(Memory):
    """The interpreter's memory, recording the addresses each access touches while `tracking` is set (except inside the
    `ignore` ranges: the scratch backing memory, private to each wave)."""
    tracking = False
    def __init__(self) -> None:
      super().__init__()
      self.reads: list = []
      self.writes: list = []
      self.ignore: list = []
    def _record(self, to: list, addrs: Any, dtype: Any) -> None:
      a = np.asarray(addrs, np.uint64).reshape(-1)
      if a.size and any(lo <= int(a.min()) and int(a.max()) < hi for lo, hi in self.ignore): return
      to.append((a.copy(), np.dtype(dtype).itemsize))
    def load(self, addrs: Any, dtype: Any, what: str = "load") -> Any:
      if self.tracking: self._record(self.reads, addrs, dtype)
      return super().load(addrs, dtype, what)
    def store(self, addrs: Any, values: Any, dtype: Any, what: str = "store") -> None:
      if self.tracking: self._record(self.writes, addrs, dtype)
      super().store(addrs, values, dtype, what)
    def _find(self, va: int, size: int) -> Any:  # the region holding [va, va+size): a binary search (many BOs are mapped)
      i = int(np.searchsorted(self._starts, np.uint64(va), side="right")) - 1
      if i >= 0:
        r = self._regions[i]
        if va + size <= r.va + r.size: return r
      return super()._find(va, size)   # its GPUFault
    def read_bytes(self, va: int, size: int) -> bytes:
      if self.tracking: self.reads.append((np.array([va], np.uint64), size))
      return super().read_bytes(va, size)
    def write_bytes(self, va: int, data: Any) -> None:
      if self.tracking: self.writes.append((np.array([va], np.uint64), len(bytes(data))))
      super().write_bytes(va, data)
  return TrackingMemory

def _interp_map(mem: Any, bo: BO) -> None:
  import numpy as np
  assert bo.backing is not None
  mem.map(bo.va, bo.size, data=np.ctypeslib.as_array((ctypes.c_uint8 * bo.size).from_address(bo.backing.view)), name=bo.domain)

def _access_ok(addr: int, size: int) -> bool: return 0 <= addr and addr + size <= TASK_SIZE_MAX

def _user_range_mapped(addr: int, size: int) -> bool:
  """Whether [addr, addr+size) lies in this process's mappings (/proc/self/maps), as get_user_pages needs."""
  try:
    with open("/proc/self/maps") as f: spans = [tuple(int(x, 16) for x in line.split()[0].split("-")) for line in f]
  except OSError: return True
  spans.sort()
  cur = addr
  for lo, hi in spans:
    if lo <= cur < hi: cur = hi
    if cur >= addr + size: return True
  return cur >= addr + size
