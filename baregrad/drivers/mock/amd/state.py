"""The state amdkfd's model and the GPU engines share: the kernel's constants (address limits, doorbell slice, mmap
offset types, event ids), buffer objects and their backing, events, queues, dispatches, per-GPU state, and the errors
(KFDErr: an ioctl's errno and the kernel function that returns it; QueueStop: an engine stops a queue)."""
from __future__ import annotations
import time
from dataclasses import dataclass, field
from typing import Any
from baregrad.ctypes_autogen import kfd
from baregrad.drivers.amd.topology import queue_sizes, Target
from baregrad.drivers.mock.amd.topology import _gpu_props
from baregrad.drivers.mock.common import MemFD, PAGE

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

def _ts() -> int: return time.perf_counter_ns() // (1_000_000_000 // GPU_TIMESTAMP_HZ)

class KFDErr(Exception):
  """An ioctl's failure: the errno and the kernel function that returns it."""
  def __init__(self, err: int, where: str, why: str = "") -> None:
    super().__init__(f"{where}: {why}")
    self.err = err

class QueueStop(Exception):
  """The command processor or the SDMA engine stops this queue (bad opcode, illegal packet, the mock's own limit)."""

class Backing:
  """Pages behind a BO: a memfd and the mock's own mapping of it (the NV mock's memory object), or, for a userptr, the
  process's own pages."""
  def __init__(self, size: int, kind: str, user_addr: int = 0) -> None:
    self.size, self.kind = size, kind
    self._m = None if kind == "userptr" else MemFD(size, kind)
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
