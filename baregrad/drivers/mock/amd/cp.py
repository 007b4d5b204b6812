"""The command processor: the doorbell that wakes it, AQL rings (kernel dispatches with their scratch, barrier bits,
completion signals, PM4 indirect buffers), PM4 rings, dispatches in flight run together and their hazards, time
slices, and queue resets for bad packets; kernels run on the RDNA3 interpreter (drivers/mock/rdna3)."""
from __future__ import annotations
import ctypes, errno, time
from typing import Any
from baregrad.ctypes_autogen import kfd
from baregrad.ctypes_autogen.amdgpu import hsa
from baregrad.drivers.amd import hw
from baregrad.drivers.mock.amd.state import _Running, _ts, Dispatch, GPU, Queue, QueueStop
from baregrad.drivers.mock.common import GPUFaultErr, run_machine

class CommandProcessor:
  """AQL and PM4 packet processing and kernel dispatch."""

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
            run_machine(self)   # (every mock GPU of the machine: one may wait on another's signal)
          return
      raise OSError(errno.EFAULT, f"doorbell write to {addr:#x}: not a mapped doorbell or MMIO page")

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

  def _run_all(self) -> bool:
    """Run every queue until none makes progress (a signal one writes may unblock another), for at most one time slice
    of dispatch execution (module docstring); whether any did."""
    self._slice_end = time.perf_counter() + self.slice_s
    progress, any_progress = True, False
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
      any_progress |= progress
    return any_progress

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
    # amd_queue_t's scratch_backing_memory_size (0xA8) is not read: the limits come from TMPRING and the per-lane size
    tmpring, base, lane64, inactive = u32(0x8C), u64(0xA0), u32(0xB0), u64(0xC0)
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
                                  (need * lanes > wavesize * unit,
                                   f"a wave needs {need * lanes} bytes, COMPUTE_TMPRING_SIZE.WAVESIZE {wavesize} gives {wavesize * unit}"))
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
    from baregrad.drivers.mock.ptx import GPUFault
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
