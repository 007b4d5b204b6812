"""amdkfd's queue ioctls (kfd_chardev.c: kfd_ioctl_create_queue, kfd_ioctl_destroy_queue): CREATE_QUEUE (AQL, PM4
and SDMA rings: the buffers it acquires, the doorbell it assigns) and DESTROY_QUEUE; each check beside the kernel
function that makes it."""
from __future__ import annotations
import bisect, errno
from typing import Any
from baregrad.ctypes_autogen import kfd
from baregrad.drivers.mock.amd.state import (Backing, BO, DOORBELL_SLICE, GPU, KFD_MAX_NUM_OF_QUEUES_PER_PROCESS,
  KFD_MMAP_GPU_ID_SHIFT, KFD_MMAP_TYPE_DOORBELL, KFD_QUEUE_DOORBELL_MIRROR_OFFSET, KFDErr, Queue, SDMA_DOORBELL_BASE,
  SDMA_DOORBELL_STRIDE, TASK_SIZE_MAX)
from baregrad.drivers.mock.common import PAGE, rup

def _access_ok(addr: int, size: int) -> bool: return 0 <= addr and addr + size <= TASK_SIZE_MAX


class KFDQueues:
  """Queue creation and destruction, and the process doorbell pages."""

  def _doorbells(self, pdd: dict) -> Backing:
    """kfd_doorbell.c: kfd_alloc_process_doorbells: one slice per process and GPU, allocated on first use."""
    if pdd["doorbells"] is None: pdd["doorbells"] = Backing(DOORBELL_SLICE, "doorbell")
    return pdd["doorbells"]

  def _create_queue(self, a: Any) -> int:
    w = "kfd_ioctl_create_queue -> set_queue_properties_from_user"
    if (a.queue_percentage & 0xFF) > kfd.KFD_MAX_QUEUE_PERCENTAGE: raise KFDErr(errno.EINVAL, w, f"queue_percentage {a.queue_percentage & 0xFF} > 100")
    if a.queue_priority > kfd.KFD_MAX_QUEUE_PRIORITY: raise KFDErr(errno.EINVAL, w, f"queue_priority {a.queue_priority} > {kfd.KFD_MAX_QUEUE_PRIORITY}")
    if a.ring_base_address and not _access_ok(a.ring_base_address, 8):
      raise KFDErr(errno.EFAULT, w, f"ring {a.ring_base_address:#x} is not a user address (access_ok)")
    if a.ring_size and a.ring_size & (a.ring_size - 1): raise KFDErr(errno.EINVAL, w, f"ring_size {a.ring_size:#x} is not a power of 2")
    ring_size = max(a.ring_size, kfd.KFD_MIN_QUEUE_RING_SIZE)   # clamped, not refused
    a.ring_size = ring_size
    if not _access_ok(a.read_pointer_address, 4): raise KFDErr(errno.EFAULT, w, f"read pointer {a.read_pointer_address:#x} is not a user address (access_ok)")
    if not _access_ok(a.write_pointer_address, 4):
      raise KFDErr(errno.EFAULT, w, f"write pointer {a.write_pointer_address:#x} is not a user address (access_ok)")
    if a.eop_buffer_address and not _access_ok(a.eop_buffer_address, 4):
      raise KFDErr(errno.EFAULT, w, f"EOP buffer {a.eop_buffer_address:#x} is not a user address")
    if a.ctx_save_restore_address and not _access_ok(a.ctx_save_restore_address, 4):
      raise KFDErr(errno.EFAULT, w, f"ctx save area {a.ctx_save_restore_address:#x} is not a user address")
    kinds = {kfd.KFD_IOC_QUEUE_TYPE_COMPUTE: "pm4", kfd.KFD_IOC_QUEUE_TYPE_COMPUTE_AQL: "aql", kfd.KFD_IOC_QUEUE_TYPE_SDMA: "sdma"}
    if a.queue_type not in kinds:
      if a.queue_type in (kfd.KFD_IOC_QUEUE_TYPE_SDMA_XGMI, 4):
        raise KFDErr(errno.EINVAL, w, f"queue_type {a.queue_type}: XGMI/by-engine SDMA queues are not modelled")
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
        if g.target.version // 100 == 904: base = rup(base, 4)  # KFD_SDMA_SHADER_DOORBELL_GRANULARITY on 9.4.3
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
        raise KFDErr(errno.EINVAL, f"{w} -> kfd_queue_buffer_get",
                     f"{what} at {addr:#x} must be the start of a GPU mapping of exactly {expected:#x} bytes; {have}")
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
      get(a.eop_buffer_address, rup(a.eop_buffer_size, PAGE), "EOP buffer")
    if a.ctl_stack_size != sz.ctl_stack_size: fail(f"ctl_stack_size {a.ctl_stack_size:#x} is not the node's {sz.ctl_stack_size:#x}")
    if a.ctx_save_restore_size < sz.cwsr_size: fail(f"ctx_save_restore_size {a.ctx_save_restore_size:#x} is less than the node's cwsr_size {sz.cwsr_size:#x}")
    total = rup((a.ctx_save_restore_size + sz.debug_memory_size) * sz.num_xcc, PAGE)
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
