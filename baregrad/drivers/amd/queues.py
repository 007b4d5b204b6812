"""The AMD hardware queues: what each HCQ command becomes, and the rings submissions are written into.

Compute queue (an AQL queue, KFD_IOC_QUEUE_TYPE_COMPUTE_AQL): kernel dispatches are AQL kernel-dispatch packets and
memory barriers AQL barrier-AND packets with the barrier bit; waits, signals, timestamps and copies are PM4
(WAIT_REG_MEM + ACQUIRE_MEM, RELEASE_MEM, RELEASE_MEM of the GPU clock, DMA_DATA) in indirect buffers that AMD's
vendor-specific AQL packet (format PM4_IB) runs. Why AQL with PM4 inside rather than either alone: the dispatch packet
is the interface the CP, the kernel descriptor and LLVM's code objects are built around (the CP sets up the user SGPRs,
workgroup ids and work-item ids from it; a PM4 dispatch would have to program COMPUTE_PGM_RSRC*/USER_DATA registers
per generation), while pure AQL has no "wait until a 64-bit value >= N", no "write this value" (completion signals
only decrement) and no free-standing timestamp, which are exactly HCQ's wait/signal/timestamp: PM4 says them directly
(ROCr runs PM4 on AQL queues the same way). A packet with the barrier bit starts only after every packet before it has
completed; dispatches without it may overlap (HSA PSA 1.2, 2.9.1), so memory_barrier() must sit between dependent
launches, and signal/timestamp/copy packets carry the barrier bit so they follow the work recorded before them. An
exec() of an args state already dispatched since the last ordering point of the queue (the same kernel on the same
buffers: taken as dependent) carries the barrier bit too, as the NV queue puts a wait-for-idle before a QMD launched
again: recorded graphs mean the same thing on every HCQ device.

gfx942 (MI300) partitions have several XCCs, each with its own CP. What the kernel shows (kfd_mqd_manager_v9.c,
init_mqd_v9_4_3 / update_mqd_v9_4_3, Linux 6.12): an AQL queue gets one MQD per XCC, all on the same ring, with
compute_tg_chunk_size 1 (workgroups dealt out across the XCCs) and only XCC 0 writing the read pointer; a PM4 queue
instead runs on one XCC (pm4_target_xcc, from bits 15:8 of queue_percentage, kfd_chardev.c). So every XCC's CP
processes every AQL packet, and a PM4 IB in a vendor packet is executed by each XCC. ROCr confirms it: the PM4 it runs
through an AQL queue is wrapped in PRED_EXEC with VIRTUALXCCID_SELECT = XCC 0 when NumXcc > 1
(amd_gpu_agent.cpp, PC-sampling ExecutePM4). This driver does the same: on more than one XCC the data-writing PM4
(signal and its interrupt, timestamp, DMA_DATA copy) is predicated to XCC 0; waits (WAIT_REG_MEM) and cache
invalidations (ACQUIRE_MEM) run on every XCC, since each XCC's CP must stall and each has its own L2.
Unverified, and relied on: that the barrier bit orders a packet after the previous packets of *every* XCC (the
firmware's synchronization is not public; HSA requires it of the agent and ROCclr/HIP streams depend on it), so that
XCC 0's end-of-pipe RELEASE_MEM in a barrier-bit packet comes after all XCCs' dispatches; and that the dispatch
packets' system-scope release fence writes back each XCC's own L2. The mock models exactly this: IBs run once per XCC
(in lockstep) honouring PRED_EXEC, a write several XCCs perform is reported, barriers are agent-wide.

Copy queue (an SDMA queue): COPY_LINEAR (split at 4 MiB), FENCE (low word, then high word, as amdgpu's 64-bit fences),
POLL_REGMEM for waits, TIMESTAMP_GET_GLOBAL. SDMA executes in order, so memory_barrier() encodes nothing there.

Every signal also writes the device's event mailbox slot and raises an interrupt carrying its KFD event id (RELEASE_MEM
INT_SEL on the CP, FENCE + TRAP on SDMA): that is what wakes a host thread blocked in AMDKFD_IOC_WAIT_EVENTS."""
from __future__ import annotations
import ctypes, struct, threading, time
from array import array
from collections import deque
from typing import Any, Sequence
from baregrad.helpers import c_array
from baregrad.hcq import HCQArgsState, HWQueue, mapped_reader
from baregrad.hcq.queue import _dims
from baregrad.drivers.amd import hw

class AMDQueue(HWQueue):
  """Shared by both engines: fields stored in several places (an SDMA fence pair) and nbytes stored minus one."""
  family = "gfx11"
  _split: dict[str, dict[str, tuple[str, int]]] = {}   # kind -> {field: (second field, value offset)}
  _hidden = ("addr_hi", "value_hi")

  def _put(self, i: int, name: str, value: int) -> None:
    c = self.cmds[i]
    if name == "nbytes" and c.kind == "copy":
      if "nbytes" not in c.fields: raise ValueError(f"command {i} is a copy split into several packets: record it again instead of patching")
      if not 0 < value <= self._copy_max: raise ValueError(f"nbytes={value}: one copy packet moves 1..{self._copy_max} bytes")
      value -= self._nbytes_bias
    if name in ("src", "dest") and c.kind == "copy" and name not in c.fields:
      raise ValueError(f"command {i} is a copy split into several packets: record it again instead of patching")
    extra = self._split.get(c.kind, {}).get(name)
    if name == "value" and extra is not None:
      super()._put(i, "value", value & hw.M32)
      super()._put(i, extra[0], value >> 32)
      return
    super()._put(i, name, value)
    if extra is not None: super()._put(i, extra[0], value + extra[1])

  def field(self, i: int, name: str) -> int:
    c = self.cmds[i]
    v = super().field(i, name)
    if name == "nbytes" and c.kind == "copy": v += self._nbytes_bias
    extra = self._split.get(c.kind, {}).get(name)
    if name == "value" and extra is not None: v |= super().field(i, extra[0]) << 32
    return v

  def decode(self) -> str:
    out = []
    for i, c in enumerate(self.cmds):
      fs = " ".join(f"{k}={self.field(i, k):#x}" if k in ("addr", "dest", "src", "args", "kernel_object") else f"{k}={self.field(i, k)}"
                    for k in c.fields if k not in self._hidden)
      out.append(f"[{i:3d}] @{c.start:5d} {c.kind:<9s} {fs}")
    return "\n".join(out)

  _copy_max, _nbytes_bias = hw.PM4_COPY_MAX, 0

class AMDComputeQueue(AMDQueue):
  """The AQL compute queue's commands (see the module docstring). Subclassed per family (GFX11ComputeQueue, GFX9ComputeQueue)."""
  pm4_kinds = ("wait", "signal", "timestamp", "copy")
  def __init__(self) -> None:
    super().__init__()
    self._launched: set[int] = set()   # args states dispatched since the last packet with the barrier bit
    self._prebuilt: PrebuiltAQL | None = None   # prepare_replay's packets and IBs, patched along with the words

  def prepare_replay(self, dev: Any) -> None:
    """This queue is submitted again and again (a graph's recording): its AQL packets and PM4 IBs are made once, the IBs
    in memory of their own (AQLRing.prebuild); from now on update_* patch them too and a submission copies the packets
    into the ring (AQLRing.submit_prebuilt) instead of making them again. Commands recorded after this are refused."""
    self._prebuilt = dev.aql.prebuild(self)

  def _add(self, kind: str, words: Sequence[int], fields: dict[str, tuple[int, int]]) -> HWQueue:
    if self._prebuilt is not None: raise RuntimeError(f"{kind}: the queue's packets were made already (prepare_replay); record a new queue")
    return super()._add(kind, words, fields)

  def _put(self, i: int, name: str, value: int) -> None:
    super()._put(i, name, value)
    if self._prebuilt is not None: self._prebuilt.mirror(self, i)

  def _enc_wait(self, addr: int, value: int) -> Any:
    return hw.pm4_wait_reg_mem(self.family, addr, value) + hw.pm4_acquire_mem(self.family), {"addr": (2, 2), "value": (4, 1)}
  def _enc_signal(self, addr: int, value: int) -> Any:
    self._launched.clear()   # its packet carries the barrier bit
    return hw.pm4_release_mem(self.family, addr, value, data_sel=2), {"addr": (3, 2), "value": (5, 2)}
  def _enc_timestamp(self, addr: int) -> Any:
    self._launched.clear()
    return hw.pm4_release_mem(self.family, addr, 0, data_sel=3), {"addr": (3, 2)}
  def _enc_memory_barrier(self) -> Any:
    self._launched.clear()
    return hw.aql_barrier_and(), {}
  def _enc_copy(self, dest: int, src: int, nbytes: int) -> Any:
    if nbytes <= 0: raise ValueError(f"copy of {nbytes} bytes")
    self._launched.clear()
    w: list[int] = []
    for off in range(0, nbytes, hw.PM4_COPY_MAX): w += hw.pm4_dma_data(self.family, dest + off, src + off, min(hw.PM4_COPY_MAX, nbytes - off))
    return w, ({"src": (2, 2), "dest": (4, 2), "nbytes": (6, 1)} if nbytes <= hw.PM4_COPY_MAX else {})
  def _enc_exec(self, prg: Any, args_state: HCQArgsState, gs: tuple[int, int, int], ls: tuple[int, int, int]) -> Any:
    from baregrad.drivers.amd.program import AMDArgsState
    assert isinstance(args_state, AMDArgsState), "AMD exec needs args from AMDProgram.fill_kernargs"
    args_state.write_launch(gs, ls)
    grid = tuple(g * l for g, l in zip(gs, ls))
    barrier = args_state.va_addr in self._launched   # the same args dispatched again: ordered after the first (module docstring)
    if barrier: self._launched.clear()
    self._launched.add(args_state.va_addr)
    self._refs[(len(self.cmds), "barrier")] = barrier
    return hw.aql_dispatch(prg.kd_va, args_state.va_addr, grid, ls, prg.group_segment_size, prg.private_segment_size, barrier=barrier), \
      {"kernel_object": (8, 2), "args": (10, 2)}
  def update_exec(self, i: int, global_size: Sequence[int] | None = None, local_size: Sequence[int] | None = None) -> HWQueue:
    """Rewrite the dispatch packet's sizes (and the kernel's hidden launch arguments) for new global/local sizes."""
    self._check(i, "exec")
    args = self._refs[(i % len(self.cmds), "args")]
    gs = args.grid if global_size is None else _dims(global_size, "global_size")
    ls = args.block if local_size is None else _dims(local_size, "local_size")
    prg = self._refs[(i % len(self.cmds), "prg")]
    args.write_launch(gs, ls)
    c = self.cmds[i]
    w = hw.aql_dispatch(prg.kd_va, args.va_addr, tuple(g * l for g, l in zip(gs, ls)), ls, prg.group_segment_size, prg.private_segment_size,
                        barrier=self._refs.get((i % len(self.cmds), "barrier"), False))
    self.words[c.start:c.start + hw.AQL_WORDS] = type(self.words)("I", w)
    if self._prebuilt is not None: self._prebuilt.mirror(self, i)
    return self
  def _submit(self, dev: Any) -> None:
    if (pb := self._prebuilt) is not None and pb.ring is dev.aql and pb.key == dev.aql.layout_key(): dev.aql.submit_prebuilt(pb)
    else: dev.aql.submit(self)   # (recorded for another ring: one made again by recovery, or the event changed)

class GFX11ComputeQueue(AMDComputeQueue): family = "gfx11"
class GFX9ComputeQueue(AMDComputeQueue): family = "gfx9"

class AMDCopyQueue(AMDQueue):
  """The SDMA queue's commands. Subclassed per family (GFX11CopyQueue, GFX9CopyQueue)."""
  _split = {"signal": {"addr": ("addr_hi", 4), "value": ("value_hi", 0)}}
  _copy_max, _nbytes_bias = hw.SDMA_COPY_MAX, 1

  def _enc_wait(self, addr: int, value: int) -> Any: return hw.sdma_poll(self.family, addr, value), {"addr": (1, 2), "value": (3, 1)}
  def _enc_signal(self, addr: int, value: int) -> Any:
    w = hw.sdma_fence(self.family, addr, value & hw.M32) + hw.sdma_fence(self.family, addr + 4, value >> 32)
    return w, {"addr": (1, 2), "value": (3, 1), "addr_hi": (5, 2), "value_hi": (7, 1)}
  def _enc_timestamp(self, addr: int) -> Any: return hw.sdma_timestamp(self.family, addr), {"addr": (1, 2)}  # bits 2:0 are zero
  def _enc_copy(self, dest: int, src: int, nbytes: int) -> Any:
    if nbytes <= 0: raise ValueError(f"copy of {nbytes} bytes")
    w: list[int] = []
    for off in range(0, nbytes, hw.SDMA_COPY_MAX): w += hw.sdma_copy(self.family, dest + off, src + off, min(hw.SDMA_COPY_MAX, nbytes - off))
    return w, ({"nbytes": (1, 1), "src": (3, 2), "dest": (5, 2)} if nbytes <= hw.SDMA_COPY_MAX else {})
  def _enc_exec(self, *a: Any) -> Any: raise NotImplementedError("the AMD copy queue (SDMA) cannot execute kernels; use the compute queue")
  def _submit(self, dev: Any) -> None: dev.sdma.submit(self)

class GFX11CopyQueue(AMDCopyQueue): family = "gfx11"
class GFX9CopyQueue(AMDCopyQueue): family = "gfx9"

QUEUES = {"gfx11": (GFX11ComputeQueue, GFX11CopyQueue), "gfx9": (GFX9ComputeQueue, GFX9CopyQueue)}

# ---------------------------------------------------------------- rings
class RingTimeout(TimeoutError):
  """No room in a ring (or an IB area) within the timeout: the queue is stuck."""

_PACKET_BODY = struct.Struct("<15I")   # an AQL packet's words after its header
_PACKET = struct.Struct("<16I")

class PrebuiltAQL:
  """A recorded compute queue made into its AQL packets once (AQLRing.prebuild): `blob` the packets' bytes (`words` the
  same as 32-bit words), `ib` the IB memory its PM4 runs live in, `where` each command's place (in the IB memory or the
  block, as a word offset). A patch of the queue's words is mirrored here (mirror), so a replay changes only the words
  it patches and submits the block."""
  def __init__(self, ring: AQLRing, key: tuple, blob: bytearray, words: memoryview, ib: memoryview, where: dict[int, tuple[bool, int]], n: int) -> None:
    self.ring, self.key, self.blob, self.words, self.ib, self.where, self.n = ring, key, blob, words, ib, where, n
    self.bytes = memoryview(blob)   # (slices of it copy nothing)
  def mirror(self, q: HWQueue, i: int) -> None:
    """Copy command i's words (just patched in q.words) to where the prebuilt packets hold them."""
    c = q.cmds[i]
    in_ib, o = self.where[i % len(q.cmds)]
    (self.ib if in_ib else self.words)[o:o + c.nwords] = q.words[c.start:c.start + c.nwords]

class AQLRing:
  """The AQL ring of the compute queue, its amd_queue_t-style pointer page (write_dispatch_id, read_dispatch_id), its
  doorbell, and an area for the PM4 indirect buffers its vendor packets point at."""
  def __init__(self, dev: Any, ring: Any, ptrs: Any, wptr_off: int, rptr_off: int, doorbell: int, ib: Any) -> None:
    self.dev, self.ring, self.ib = dev, ring, ib
    self.nslots = ring.size // 64
    self.wptr_p = ctypes.c_uint64.from_address(ptrs.cpu + wptr_off)
    self.rptr_p = ctypes.c_uint64.from_address(ptrs.cpu + rptr_off)
    self.doorbell, self.put = doorbell, 0
    self.traced = 0   # the packet id up to which IOCTL_TRACE has shown the packets (submitted)
    self.ib_off = 0
    self.ib_inflight: deque[tuple[int, int, int]] = deque()   # (packet index, IB offset, bytes)
    self.lock = threading.Lock()
    for s in range(self.nslots): ctypes.c_uint32.from_address(ring.cpu + 64 * s).value = hw.AQL_INVALID  # every slot INVALID
    # the ring and the IB area as bytes and words (slice stores and struct packs: no ctypes object per write), and each
    # slot's header word (a packet becomes valid with one 32-bit store of its header, written last)
    self.ring_mv = memoryview(c_array(ctypes.c_char, ring.size).from_address(ring.cpu)).cast("B")
    self.ring_words = self.ring_mv.cast("I")
    self.slot_headers = [ctypes.c_uint32.from_address(ring.cpu + 64 * s) for s in range(self.nslots)]
    self.ib_words = memoryview(c_array(ctypes.c_char, ib.size).from_address(ib.cpu)).cast("B").cast("I")
    # launch_packets' word templates: (key, wait IB words, signal IB words, where the signal value goes); the dispatch
    # packet per kernel and geometry; the vendor packet per IB length and barrier bit
    self._launch_tmpl: tuple | None = None
    self._dispatch: dict[tuple, array] = {}
    self._ib_pk: dict[tuple, array] = {}

  def _wait(self, ok: Any, what: str) -> None:
    deadline = time.perf_counter() + self.dev.default_timeout_ms / 1000
    while not ok():
      self.dev._check_fault()
      if time.perf_counter() > deadline: raise RingTimeout(f"{self.dev.device} compute queue: no room for {what}\n{self.dev.queue_state()}")
      self.dev._kick()
      time.sleep(1e-4)

  def _ib_alloc(self, nbytes: int) -> tuple[int, int]:
    nbytes = (nbytes + 63) & ~63
    if nbytes > self.ib.size: raise ValueError(f"{nbytes} bytes of PM4 exceed the {self.ib.size}-byte indirect-buffer area")
    off = self.ib_off if self.ib_off + nbytes <= self.ib.size else 0
    rd, inflight = self.rptr_p.value, self.ib_inflight
    while inflight and inflight[0][0] < rd: inflight.popleft()   # (IBs of packets the CP has read are free again)
    if not self._ib_free(off, nbytes):
      def free() -> bool:
        rd = self.rptr_p.value
        while inflight and inflight[0][0] < rd: inflight.popleft()
        return self._ib_free(off, nbytes)
      self._wait(free, f"{nbytes} bytes of indirect buffer")
    self.ib_off = off + nbytes
    return self.ib.cpu + off, self.ib.va + off

  def _ib_free(self, off: int, nbytes: int) -> bool:
    """Whether [off, off + nbytes) of the IB area overlaps no IB still in flight. They were placed in order, so they lie
    between the oldest one's offset (head) and ib_off (tail), wrapped when tail <= head: two comparisons, not one per IB
    in flight (a long run of launches behind a slow kernel made every submission walk all of them)."""
    if not self.ib_inflight: return True
    head, tail, end = self.ib_inflight[0][1], self.ib_off, off + nbytes
    if head < tail: return end <= head or off >= tail
    return off >= tail and end <= head   # (occupied: [head, size) and [0, tail))

  def _layout(self, q: AMDComputeQueue) -> list[tuple[list[int], bool | None, list[tuple[int, int]]]]:
    """What a recorded queue becomes, in order, before its PM4 runs are placed: (words, None, [(command, 0)]) for a
    command that is an AQL packet as recorded (a dispatch, a barrier-AND); (PM4 words, barrier bit, [(command, word
    offset in the run)]) for a run of PM4 commands that one vendor packet will run from an IB. A signal is followed by
    the release of the device's event (its interrupt); on several XCCs what writes memory is under PRED_EXEC (XCC 0 only),
    waits and invalidations run on all (module docstring)."""
    fam, out, xccs = q.family, [], self.dev.sizes.num_xcc
    run: list[int] = []
    where: list[tuple[int, int]] = []
    barrier = False
    pm4 = AMDComputeQueue.pm4_kinds
    for i, c in enumerate(q.cmds):
      w = q.words[c.start:c.start + c.nwords].tolist()
      if c.kind in pm4:
        if c.kind == "signal": w += hw.pm4_release_mem(fam, self.dev.event_mailbox, self.dev.event_id, data_sel=1, int_sel=2, ctxid=self.dev.event_id)
        pre = hw.pm4_pred_exec(fam, 1, len(w)) if xccs > 1 and c.kind != "wait" else []
        where.append((i, len(run) + len(pre)))   # (the command's own words start after the PRED_EXEC)
        run += pre + w
        barrier |= c.kind != "wait"
      else:
        if run: out.append((run, barrier, where))
        run, where, barrier = [], [], False
        out.append((w, None, [(i, 0)]))
    if run: out.append((run, barrier, where))
    return out

  def packets(self, q: AMDComputeQueue, start_index: int) -> list[list[int]]:
    """The AQL packets a recorded queue becomes (PM4 runs written to the IB area, one vendor packet per run)."""
    fam, out = q.family, []
    for words, barrier, _ in self._layout(q):
      out.append(words if barrier is None else self._ib_packet(fam, words, barrier, start_index + len(out)))
    return out

  def layout_key(self) -> tuple:
    """What _layout's words depend on besides the queue: the device's event mailbox and event id, its XCC count."""
    return (self.dev.event_mailbox, self.dev.event_id, self.dev.sizes.num_xcc)

  def prebuild(self, q: AMDComputeQueue) -> PrebuiltAQL:
    """The packets packets() makes of q, made once: its PM4 runs placed in IB memory of their own (not the IB area, whose
    space each submission takes in turn), each at a 64-byte boundary as _ib_alloc places them, and the packets as one
    block of bytes ready to copy into the ring. The IB memory and the arguments stay valid for as long as the queue
    lives: its owner (HCQGraph) patches a recording only after its previous submission finished."""
    lay = self._layout(q)
    offs, total = [], 0
    for words, barrier, _ in lay:
      offs.append(total)
      if barrier is not None: total += (4 * len(words) + 63) & ~63
    cpu, va = self.dev.alloc_args_memory(max(total, 64))
    ib = memoryview(c_array(ctypes.c_char, max(total, 64)).from_address(cpu)).cast("B").cast("I")
    blob = bytearray(64 * len(lay))
    where: dict[int, tuple[bool, int]] = {}   # command -> (in an IB, word offset in the IB memory or the block)
    for k, ((words, barrier, at), off) in enumerate(zip(lay, offs)):
      if barrier is None:
        pk = words
        where[at[0][0]] = (False, 16 * k)
      else:
        ib[off >> 2:(off >> 2) + len(words)] = array("I", words)
        pk = hw.aql_pm4_ib(q.family, va + off, len(words), barrier)
        for i, o in at: where[i] = (True, (off >> 2) + o)
      _PACKET.pack_into(blob, 64 * k, *pk)
    return PrebuiltAQL(self, self.layout_key(), blob, memoryview(blob).cast("I"), ib, where, len(lay))

  def submit_prebuilt(self, pb: PrebuiltAQL) -> None:
    """Copy a prebuilt queue's packets into the ring (one or two slice stores: all but the first packet's first word,
    which is stored last, so the CP, which runs packets in order, sees none of them before all are written) and ring
    the doorbell: what submit_packets does for the same packets."""
    if self.dev._lost is not None:
      from baregrad.drivers.amd.faults import AMDDeviceLost
      raise AMDDeviceLost(self.dev._lost)
    n = pb.n
    with self.lock:
      if n > self.nslots: raise ValueError(f"{n} AQL packets exceed the {self.nslots}-slot ring: split the submission")
      if self.put + n - self.rptr_p.value > self.nslots: self._wait(lambda: self.put + n - self.rptr_p.value <= self.nslots, f"{n} AQL packets")
      slot, mv, blob = self.put % self.nslots, self.ring_mv, pb.bytes
      first = min(n, self.nslots - slot)   # packets up to the ring's end; the rest wrap to slot 0
      mv[64 * slot + 4:64 * (slot + first)] = blob[4:64 * first]
      if first < n: mv[0:64 * (n - first)] = blob[64 * first:]
      self.slot_headers[slot].value = pb.words[0]   # the first packet's header last: it makes the submission valid
      self.put += n
      self.wptr_p.value = self.put
      if self.dev.capture is not None: self._capture([pb.words[16 * k:16 * k + 16].tolist() for k in range(n)], self.put - n)
      self.dev.port.doorbell(self.doorbell, self.put - 1, 8)   # the packet id of the last packet written

  def _ib_packet(self, fam: str, run: list[int], barrier: bool, index: int) -> list[int]:
    """A run of PM4 words written to the IB area, and the vendor packet (at ring index `index`) that runs it."""
    cpu, va = self._ib_alloc(4 * len(run))
    c_array(ctypes.c_uint32, len(run)).from_address(cpu)[:] = run
    self.ib_inflight.append((index, va - self.ib.va, (4 * len(run) + 63) & ~63))
    return hw.aql_pm4_ib(fam, va, len(run), barrier)

  def launch_packets(self, fam: str, prg: Any, kernarg: int, gs: tuple[int, int, int], ls: tuple[int, int, int], timeline: int,
                     wait: int, signal: int, start_index: int) -> list[Any]:
    """The packets packets() makes of a queue recorded as wait(timeline, wait), exec(prg, args, gs, ls),
    signal(timeline, signal) (what HCQProgram.__call__ records), made without recording the queue: the wait's PM4 in
    an IB without the barrier bit, the dispatch (a fresh queue's first: no barrier bit), the signal's release and the
    event's in an IB with it, under PRED_EXEC on several XCCs. The kernarg segment at `kernarg` is written already (the
    args' write_launch, or AMDProgram._write_args). The queue's encoders (hw.py) make every word once, as templates
    per timeline, kernel and geometry, IB length; a launch copies them and patches its values and addresses."""
    dev = self.dev
    key = (fam, timeline, dev.event_mailbox, dev.event_id, dev.sizes.num_xcc)
    if (t := self._launch_tmpl) is None or t[0] != key:
      w = hw.pm4_release_mem(fam, timeline, 0, data_sel=2)
      w += hw.pm4_release_mem(fam, dev.event_mailbox, dev.event_id, data_sel=1, int_sel=2, ctxid=dev.event_id)
      pre = hw.pm4_pred_exec(fam, 1, len(w)) if dev.sizes.num_xcc > 1 else []
      t = self._launch_tmpl = (key, array("I", hw.pm4_wait_reg_mem(fam, timeline, 0) + hw.pm4_acquire_mem(fam)), array("I", pre + w), len(pre) + 5)
    _, w1, w2, at = t
    w1, w2 = w1[:], w2[:]
    w1[4] = wait   # (WAIT_REG_MEM's reference value: 32 bits, the array refuses more)
    w2[at], w2[at + 1] = signal & 0xFFFFFFFF, signal >> 32
    dk = (prg.kd_va, prg.group_segment_size, prg.private_segment_size, gs, ls)
    if (d := self._dispatch.get(dk)) is None:
      if len(self._dispatch) >= 256: self._dispatch.clear()
      d = self._dispatch[dk] = array("I", hw.aql_dispatch(prg.kd_va, 0, (gs[0] * ls[0], gs[1] * ls[1], gs[2] * ls[2]), ls,
                                                          prg.group_segment_size, prg.private_segment_size))
    d = d[:]
    d[10], d[11] = kernarg & 0xFFFFFFFF, kernarg >> 32
    n1, n2 = len(w1), len(w2)
    b1, b2 = (4 * n1 + 63) & ~63, (4 * n2 + 63) & ~63
    if self.ib_off + b1 + b2 > self.ib.size:   # (the two would not be adjacent: placed one at a time, as packets() does)
      return [self._ib_words_packet(fam, w1, False, start_index), d, self._ib_words_packet(fam, w2, True, start_index + 2)]
    # both IBs in one allocation, where two allocations in a row put them, each retired with the packet that runs it
    _, va = self._ib_alloc(b1 + b2)
    off = va - self.ib.va
    o, ibw = off >> 2, self.ib_words
    ibw[o:o + n1] = w1
    ibw[o + (b1 >> 2):o + (b1 >> 2) + n2] = w2
    self.ib_inflight.append((start_index, off, b1))
    self.ib_inflight.append((start_index + 2, off + b1, b2))
    return [self._ib_vendor(fam, n1, False, va), d, self._ib_vendor(fam, n2, True, va + b1)]

  def _ib_vendor(self, fam: str, n: int, barrier: bool, va: int) -> array:
    """The vendor packet that runs the n-word IB at va: a template per (family, length, barrier), its address patched."""
    if (p := self._ib_pk.get((fam, n, barrier))) is None:
      if len(self._ib_pk) >= 64: self._ib_pk.clear()
      p = self._ib_pk[(fam, n, barrier)] = array("I", hw.aql_pm4_ib(fam, 0, n, barrier))
      assert hw.aql_pm4_ib(fam, 1 << 34 | 4, n, barrier)[2:4] == [4, 4], "the vendor packet's IB address moved"
    p = p[:]
    p[2], p[3] = va & 0xFFFFFFFF, va >> 32
    return p

  def _ib_words_packet(self, fam: str, words: array, barrier: bool, index: int) -> array:
    """_ib_packet of PM4 words already in an array: stored with one slice assignment, the vendor packet from a template
    per (family, length, barrier) with the IB's address patched."""
    n = len(words)
    cpu, va = self._ib_alloc(4 * n)
    o = (va - self.ib.va) >> 2
    self.ib_words[o:o + n] = words
    self.ib_inflight.append((index, va - self.ib.va, (4 * n + 63) & ~63))
    return self._ib_vendor(fam, n, barrier, va)

  def submit(self, q: AMDComputeQueue) -> None:
    self.submit_packets(lambda start: self.packets(q, start))

  def submit_packets(self, make: Any) -> None:
    """Write the packets `make(first ring index)` returns (made under the ring's lock) and ring the doorbell."""
    if self.dev._lost is not None:
      from baregrad.drivers.amd.faults import AMDDeviceLost
      raise AMDDeviceLost(self.dev._lost)
    with self.lock:
      pk = make(self.put)
      n = len(pk)
      if n > self.nslots: raise ValueError(f"{n} AQL packets exceed the {self.nslots}-slot ring: split the submission")
      if self.put + n - self.rptr_p.value > self.nslots: self._wait(lambda: self.put + n - self.rptr_p.value <= self.nslots, f"{n} AQL packets")
      mv, rw, headers, nslots = self.ring_mv, self.ring_words, self.slot_headers, self.nslots
      for p in pk:
        slot = self.put % nslots
        # (an array of 32-bit words, what launch_packets makes: one slice store, a quarter of a 15-argument pack's cost)
        if type(p) is array and p.typecode == "I": rw[16 * slot + 1:16 * slot + 16] = p[1:]
        else: _PACKET_BODY.pack_into(mv, 64 * slot + 4, *p[1:])
        headers[slot].value = p[0]   # the header last: the packet becomes valid in one store
        self.put += 1
      self.wptr_p.value = self.put
      if self.dev.capture is not None: self._capture(pk, self.put - n)
      self.dev.port.doorbell(self.doorbell, self.put - 1, 8)   # the packet id of the last packet written

  def _capture(self, pk: list[list[int]], first: int) -> None:
    """AMD_CAPTURE=DIR: the submission's AQL packets, the PM4 IBs and kernargs they point at (raw bytes for
    tools/amd_decode.py), the ring slots, the doorbell value and the kernels (hcq/capture.py)."""
    import struct
    dev = self.dev
    files, kernels = {"aql": b"".join(struct.pack("<16I", *p) for p in pk)}, []
    for p in pk:
      d = hw.decode_aql(p)
      if d["type"] == hw.AQL_VENDOR and d["format"] == hw.AMD_AQL_FORMAT_PM4_IB:
        va, ndw = d["ib_cmd"][1] | (d["ib_cmd"][2] << 32), d["ib_cmd"][3] & 0xFFFFF
        files[f"ib-{va:x}"] = ctypes.string_at(self.ib.cpu + va - self.ib.va, 4 * ndw)
      elif d["type"] == hw.AQL_DISPATCH:
        ka, size = d["kernarg"], dev.kernarg_sizes.get(d["kernel_object"], 0)
        kernels.append({"kernel": dev.kernel_names.get(d["kernel_object"], "?"), "kernel_object": d["kernel_object"], "kernarg": ka})
        if (cpu := dev.cpu_address(ka, size)) is not None: files[f"kernargs-{ka:x}"] = ctypes.string_at(cpu, size)
        dev.capture.dispatches[ka] = struct.pack("<16I", *p)
    dev.capture.submission("compute", files, ring=self.ring.va, slots=[first, first + len(pk)], doorbell=first + len(pk) - 1,
                           timeline=dev.timeline_value - 1, launches=kernels)

  def state(self) -> str:
    rd, wr = self.rptr_p.value, self.wptr_p.value
    s = (f"  compute queue (AQL, {self.nslots} slots): read_dispatch_id {rd} write_dispatch_id {wr}" +
         (" (idle)" if rd == wr else f" ({wr - rd} packets pending)"))
    for idx in range(max(rd - 1, wr - 8, 0), wr): s += "\n" + self.packet_text(idx, " <== the CP is here" if idx == rd else "", idx >= rd)
    return s

  def packet_text(self, idx: int, mark: str = "", follow_ib: bool = True) -> str:
    """AQL packet `idx` decoded: a dispatch followed by its launch (hw.describe_dispatch), a PM4-IB packet by its IB."""
    w = list((ctypes.c_uint32 * 16).from_address(self.ring.cpu + 64 * (idx % self.nslots)))
    s = f"  [{idx}] {hw.format_aql(w)}{mark}"
    d = hw.decode_aql(w)
    if d["type"] == hw.AQL_DISPATCH: s += "\n       " + hw.describe_dispatch(w, self.dev.family, mapped_reader(self.dev.memories), self.dev.kernel_names)
    if d["type"] == hw.AQL_VENDOR and d["format"] == hw.AMD_AQL_FORMAT_PM4_IB and follow_ib:
      va, ndw = d["ib_cmd"][1] | (d["ib_cmd"][2] << 32), d["ib_cmd"][3] & 0xFFFFF
      # (the IB area, or a graph's prebuilt IBs in memory of their own: any CPU-mapped allocation of the device)
      cpu = self.ib.cpu + va - self.ib.va if self.ib.va <= va and va + 4 * ndw <= self.ib.va + self.ib.size else self.dev.cpu_address(va, 4 * ndw)
      if cpu is not None:
        ib = list((ctypes.c_uint32 * ndw).from_address(cpu))
        s += "\n" + hw.format_pm4(self.dev.family, ib, va)
    return s

  def submitted(self, last: int) -> str:
    """The AQL packets written since the last call, up to packet id `last` (the doorbell's value), decoded (IOCTL_TRACE)."""
    first, self.traced = self.traced, last + 1
    if first > last: return f"    compute queue: no new AQL packets (write_dispatch_id {last + 1})"
    return "\n".join(self.packet_text(i) for i in range(max(first, last + 1 - self.nslots), last + 1))

class SDMARing:
  """The SDMA queue's byte ring, its read/write pointers (64-bit byte offsets) and its doorbell."""
  def __init__(self, dev: Any, ring: Any, ptrs: Any, wptr_off: int, rptr_off: int, doorbell: int) -> None:
    self.dev, self.ring = dev, ring
    self.wptr_p = ctypes.c_uint64.from_address(ptrs.cpu + wptr_off)
    self.rptr_p = ctypes.c_uint64.from_address(ptrs.cpu + rptr_off)
    self.doorbell, self.put = doorbell, 0
    self.traced = 0   # the byte offset up to which IOCTL_TRACE has shown the packets (submitted)
    self.lock = threading.Lock()

  def submit(self, q: AMDCopyQueue) -> None:
    if self.dev._lost is not None:
      from baregrad.drivers.amd.faults import AMDDeviceLost
      raise AMDDeviceLost(self.dev._lost)
    fam, words = q.family, []
    for c in q.cmds:
      words += list(q.words[c.start:c.start + c.nwords])
      if c.kind == "signal": words += hw.sdma_fence(fam, self.dev.event_mailbox, self.dev.event_id) + hw.sdma_trap(fam, self.dev.event_id)
    n = 4 * len(words)
    with self.lock:
      if n > self.ring.size: raise ValueError(f"{n} bytes of SDMA packets exceed the {self.ring.size}-byte ring: split the submission")
      deadline = time.perf_counter() + self.dev.default_timeout_ms / 1000
      while self.put + n - self.rptr_p.value > self.ring.size:
        self.dev._check_fault()
        if time.perf_counter() > deadline: raise RingTimeout(f"{self.dev.device} copy queue: no room for {n} bytes\n{self.dev.queue_state()}")
        self.dev._kick()
        time.sleep(1e-4)
      arr = (ctypes.c_uint32 * len(words))(*words)
      off = self.put % self.ring.size
      first = min(n, self.ring.size - off)
      ctypes.memmove(self.ring.cpu + off, arr, first)
      if first < n: ctypes.memmove(self.ring.cpu, ctypes.addressof(arr) + first, n - first)
      self.put += n
      self.wptr_p.value = self.put
      if self.dev.capture is not None:   # AMD_CAPTURE=DIR (hcq/capture.py)
        self.dev.capture.submission("copy", {"sdma": bytes(arr)}, ring=self.ring.va, offset=off, doorbell=self.put,
                                    timeline=self.dev.timeline_value - 1, launches=[])
      self.dev.port.doorbell(self.doorbell, self.put, 8)

  def submitted(self, wptr: int) -> str:
    """The SDMA packets written since the last call, up to byte `wptr` (the doorbell's value), decoded (IOCTL_TRACE)."""
    first, self.traced = self.traced, wptr
    if first >= wptr: return f"    copy queue: no new SDMA packets (wptr {wptr})"
    first = max(first, wptr - self.ring.size)
    words = [ctypes.c_uint32.from_address(self.ring.cpu + (first + 4 * i) % self.ring.size).value for i in range((wptr - first) // 4)]
    return hw.format_sdma(self.dev.family, words, self.ring.va + first % self.ring.size)

  def state(self) -> str:
    rd, wr = self.rptr_p.value, self.wptr_p.value
    s = f"  copy queue (SDMA, {self.ring.size} bytes): rptr {rd} wptr {wr}" + (" (idle)" if rd == wr else f" ({wr - rd} bytes pending)")
    if rd != wr:
      n = min(wr - rd, 4096)
      words = [ctypes.c_uint32.from_address(self.ring.cpu + (rd + 4 * i) % self.ring.size).value for i in range(n // 4)]
      s += "\n" + hw.format_sdma(self.dev.family, words, self.ring.va + rd % self.ring.size, mark=0)
    return s
