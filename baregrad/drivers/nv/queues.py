"""Queues and channels of the NV driver: the compute and copy HWQueues (their commands as pushbuffer methods, hw.py),
the GPFIFO channels their submissions go through (command ring, GPFIFO entry, GP_PUT, doorbell), and the channel group
with its two channels, registered with UVM before RM schedules them (docs/hw/h100-580.159.04-findings.md#finding-2)."""
from __future__ import annotations
import ctypes, threading, time
from array import array
from collections import deque
from typing import TYPE_CHECKING, Any, Sequence
from baregrad.helpers import c_array
from baregrad.hcq import HCQArgsState, HWQueue, mapped_reader
from baregrad.hcq.queue import _dims
from baregrad.drivers.vmem import PAGE, round_up
from baregrad.drivers.nv import hw
from baregrad.drivers.nv.memory import NVMemory
from baregrad.drivers.nv.program import NVArgsState
if TYPE_CHECKING: from baregrad.drivers.nv.device import NVDevice

# VA UVM_REGISTER_CHANNEL may place one channel's RM buffers (GR context, patch, page pool, ...) in: 64 MiB as in the
# H100 run; taken from the window below 2**40 because UVM refuses ranges ending at or above max_channel_va, which is
# 2**40 on Ampere/Ada (kernel-open/nvidia-uvm/uvm_ampere.c, uvm_ada.c) and 2**57 on Hopper/Blackwell
CHANNEL_VA_BYTES = 64 << 20

class NVComputeQueue(HWQueue):
  """Launches of one queue run concurrently on the GPU unless a wait-for-idle separates them (finding 6b): signals and
  timestamps release after WFI, memory_barrier() is WFI + MEMBAR; put one between launches that depend on each other.
  A QMD launched again while its previous launch may still run took the H100's channel down (finding 6a, Xid 109), so
  exec() of args already launched since the last WFI in this queue puts a WFI before it. (Finding N: section
  #finding-N of docs/hw/h100-580.159.04-findings.md.)"""
  engine = "compute"
  def __init__(self) -> None:
    super().__init__()
    self._launched: set[int] = set()  # QMD addresses launched since the last wait-for-idle in this queue
  def _enc_wait(self, addr: int, value: int) -> Any: return hw.sem_words(addr, value, hw.SEM_EXEC_ACQUIRE_GEQ), _SEM_FIELDS
  def _enc_signal(self, addr: int, value: int) -> Any:
    self._launched.clear()  # the release waits for idle
    return hw.sem_words(addr, value, hw.SEM_EXEC_RELEASE), _SEM_FIELDS
  def _enc_timestamp(self, addr: int) -> Any:
    self._launched.clear()
    return hw.sem_words(addr - 8, 0, hw.SEM_EXEC_TIMESTAMP), _TS_FIELDS
  def _enc_memory_barrier(self) -> Any:
    self._launched.clear()
    return hw.membar_words(), {}
  def _enc_copy(self, dest: int, src: int, nbytes: int) -> Any:
    if not 0 <= nbytes < (1 << 32): raise ValueError(f"copy of {nbytes} bytes: LINE_LENGTH_IN holds 32 bits; split the copy")
    return hw.copy_words(dest, src, nbytes), _COPY_FIELDS
  def _enc_exec(self, prg: Any, args_state: HCQArgsState, gs: tuple[int, int, int], ls: tuple[int, int, int]) -> Any:
    """The QMD lives in the args memory (written here; update_exec rewrites it); the pushbuffer points the compute
    engine at it. Fields: qmd (the QMD address, shifted 8, as SEND_PCAS_A carries it)."""
    assert isinstance(args_state, NVArgsState), "NV exec needs args from NVProgram.fill_kernargs"
    pre = []
    if args_state.qmd_va in self._launched:
      pre = hw.wfi_words()
      self._launched.clear()
    self._launched.add(args_state.qmd_va)
    args_state.write_qmd(gs, ls)
    return pre + hw.launch_words(prg.dev.compute_class, args_state.qmd_va), {"qmd": (len(pre) + 3, 1)}
  def update_exec(self, i: int, global_size: Sequence[int] | None = None, local_size: Sequence[int] | None = None) -> HWQueue:
    self._check(i, "exec")
    args: NVArgsState = self._refs[(i % len(self.cmds), "args")]
    gs = args.grid if global_size is None else _dims(global_size, "global_size")
    ls = args.block if local_size is None else _dims(local_size, "local_size")
    args.write_qmd(gs, ls)
    return self
  def _submit(self, dev: Any) -> None: dev.channels[self.engine].submit(self.words)

class NVCopyQueue(NVComputeQueue):
  engine = "copy"
  def _enc_exec(self, *a: Any) -> Any: raise NotImplementedError("the NV copy queue cannot execute kernels; use the compute queue")

_SEM_FIELDS = {"addr": (1, 2), "value": (3, 2)}
_TS_FIELDS = {"addr": (1, 2)}
_COPY_FIELDS = {"src": (1, 2, True), "dest": (3, 2, True), "nbytes": (6, 1)}

class NVChannel:
  """One GPFIFO channel: its ring of GPFIFO entries, USERD, a command ring the pushbuffers are copied into, doorbell."""
  def __init__(self, dev: NVDevice, name: str, handle: int, gpfifo: NVMemory, ring_off: int, entries: int, userd_off: int,
               cmd: NVMemory, token: int, uvm_va: int) -> None:
    self.dev, self.name, self.handle, self.entries, self.token, self.cmd = dev, name, handle, entries, token, cmd
    self.uvm_va = uvm_va  # the VA range UVM_REGISTER_CHANNEL was given (0 while not registered)
    assert gpfifo.cpu is not None and cmd.cpu is not None
    self.ring = (ctypes.c_uint64 * entries).from_address(gpfifo.cpu + ring_off)
    self.gpfifo_va = gpfifo.va + ring_off
    self.gp_put_p = ctypes.c_uint32.from_address(gpfifo.cpu + userd_off + hw.USERD_GP_PUT)
    self.gp_get_p = ctypes.c_uint32.from_address(gpfifo.cpu + userd_off + hw.USERD_GP_GET)
    self.put = 0
    self.traced = 0   # GP_PUT up to which IOCTL_TRACE has shown the entries (submitted)
    self.cmd_off = 0
    self.inflight: deque[tuple[int, int, int]] = deque()  # (GPFIFO index, command ring offset, words) submitted
    self.lock = threading.Lock()
    self._gp_hi: dict[tuple[int, int], int] = {}   # (address >> 32, words) -> a GPFIFO entry's high word: _gp_entry
    # the command ring as 32-bit words: submit stores a pushbuffer with one slice assignment (pushbuffers are whole words)
    assert cmd.size % 4 == 0
    self.cmd_words = memoryview(c_array(ctypes.c_char, cmd.size).from_address(cmd.cpu)).cast("B").cast("I")

  def _gp_entry(self, addr: int, n: int) -> int:
    """hw.gp_entry(addr, n): its high word depends only on addr >> 32 and n, its low word is addr's low word (GET holds
    bits 31:2, and hw.gp_entry refuses an address with bits 1:0 set), so the high word is made once per (addr >> 32, n)
    and each entry checked against hw.gp_entry when its high word is made."""
    key = (addr >> 32, n)
    if (hi := self._gp_hi.get(key)) is None or addr & 3:
      e = hw.gp_entry(addr, n)   # (raises on a misaligned or too long segment)
      if len(self._gp_hi) >= 4096: self._gp_hi.clear()
      hi = self._gp_hi[key] = e & ~0xFFFFFFFF
      assert e == hi | (addr & 0xFFFFFFFF), "GPFIFO entry layout: the low word is not the address's low word"
    return hi | (addr & 0xFFFFFFFF)

  def _done(self, idx: int) -> bool:
    """Has the GPU fetched past GPFIFO entry idx? (GP_GET is the next entry it will read)"""
    get = self.gp_get_p.value
    return (idx - get) % self.entries >= (self.put - get) % self.entries

  def _place(self, nbytes: int) -> int | None:
    """Command ring offset for nbytes, or None while unfinished pushbuffers occupy it. They were placed in order, so
    they lie between the oldest one's offset (head) and cmd_off (tail), possibly wrapped: one comparison, not one per
    pushbuffer in flight (a long queue behind a slow kernel made every submission walk all of them)."""
    tail, size = self.cmd_off, self.cmd.size
    if not self.inflight: return tail if tail + nbytes <= size else 0
    head = self.inflight[0][1]
    if tail > head: return tail if tail + nbytes <= size else (0 if nbytes <= head else None)
    return tail if tail + nbytes <= head else None

  def submit(self, words: Any) -> None:
    """Copy the pushbuffer `words` (32-bit words) into the command ring, point the next GPFIFO entry at it, write
    GP_PUT and ring the doorbell; waits (with the device's timeout) while the ring or the GPFIFO is full."""
    if type(words) is not array or words.typecode != "I": words = array("I", words)
    n = len(words)
    nbytes = 4 * n
    if nbytes > self.cmd.size: raise ValueError(f"pushbuffer of {nbytes} bytes exceeds the {self.name} command ring ({self.cmd.size} bytes)")
    with self.lock:
      deadline = None   # (set when the ring is full: the common submission reads no clock)
      inflight, entries = self.inflight, self.entries
      while True:
        get = self.gp_get_p.value
        busy = (self.put - get) % entries
        # entries the GPU has fetched (GET is past them: _done) no longer hold their command ring bytes
        while inflight and (inflight[0][0] - get) % entries >= busy: inflight.popleft()
        if busy != entries - 1 and (off := self._place(nbytes)) is not None: break
        self.dev._check_fault()
        if deadline is None: deadline = time.perf_counter() + self.dev.default_timeout_ms / 1000
        elif time.perf_counter() > deadline:
          raise RuntimeError(f"{self.dev.device} {self.name} channel: no room in the command ring or GPFIFO\n{self.dev.queue_state()}")
        self.dev._kick()
        time.sleep(1e-4)
      self.cmd_words[off >> 2:(off >> 2) + n] = words
      self.ring[self.put] = self._gp_entry(self.cmd.va + off, n)
      inflight.append((self.put, off, n))
      self.cmd_off = off + nbytes
      idx, self.put = self.put, (self.put + 1) % entries
      self.gp_put_p.value = self.put
      if self.dev.capture is not None: self._capture(words, idx, off)
      self.dev.port.doorbell(self.dev.doorbell_addr, self.token)

  def _capture(self, words: Any, idx: int, off: int) -> None:
    """NV_CAPTURE=DIR: the pushbuffer, its GPFIFO entry, and the QMD and constant bank 0 of each launch in it, with the
    ring's addresses, GP_PUT, the doorbell value (the work-submit token) and the kernels (hcq/capture.py)."""
    import struct
    dev = self.dev
    files = {f"{self.name}-pushbuf": bytes(words), f"{self.name}-gpfifo": struct.pack("<Q", self.ring[idx])}
    launches = []
    for m in hw.decode_pushbuffer(words):
      if m.subc != hw.SUBC_COMPUTE or m.method != hw.SEND_PCAS_A: continue
      qmd_va = m.value << 8
      launch: dict[str, Any] = {"kernel": dev.qmd_kernels.get(qmd_va, "?"), "qmd": qmd_va}
      if (cpu := dev.cpu_address(qmd_va, hw.QMD_BYTES)) is not None:
        files[f"qmd-{qmd_va:x}"] = qmd = ctypes.string_at(cpu, hw.QMD_BYTES)
        q = hw.read_qmd(hw.words_of(qmd), dev.qmd_version)
        if q["cbank0"] is not None and (cb := dev.cpu_address(q["cbank0"], q["cbank0_size"])) is not None:
          files[f"cbank0-{q['cbank0']:x}"] = ctypes.string_at(cb, q["cbank0_size"])
          launch["cbank0"] = q["cbank0"]
      launches.append(launch)
    dev.capture.submission(self.name, files, channel=self.name, gpfifo=self.ring_va(idx), gp_entry=self.ring[idx],
                           pushbuf=self.cmd.va + off, gp_put=self.put, doorbell=self.token, timeline=dev.timeline_value - 1,
                           launches=launches)

  def ring_va(self, idx: int) -> int:
    """The GPU address of GPFIFO entry idx."""
    return self.gpfifo_va + 8 * idx

  def submitted(self, upto: int) -> str:
    """The GPFIFO entries written since the last call, up to GP_PUT `upto`, decoded (IOCTL_TRACE's doorbell lines)."""
    first, self.traced = self.traced, upto
    if first == upto: return f"    {self.name} channel: no new GPFIFO entries (GP_PUT {upto}): a re-check of semaphore acquires"
    classes = {hw.SUBC_COMPUTE: self.dev.compute_class, hw.SUBC_COPY: self.dev.dma_class}
    read, out = mapped_reader(self.dev.memories), []
    i = first
    while i != upto:
      addr, n, _ = hw.decode_gp_entry(self.ring[i])
      out.append(f"    {self.name} channel GPFIFO entry {i}: {n} words at {addr:#x}")
      try: out.append(hw.format_commands(hw.words_of(read(addr, 4 * n)), classes, read=read, names=self.dev.qmd_kernels))
      except KeyError as e: out.append(f"      (cannot read it: {e})")
      i = (i + 1) % self.entries
    return "\n".join(out)

  def state(self) -> str:
    get, put = self.gp_get_p.value, self.gp_put_p.value
    s = (f"  {self.name} channel (token {self.token}): GP_GET {get} GP_PUT {put}" +
         (" (idle)" if get == put else f" ({(put - get) % self.entries} entries pending)"))
    classes = {hw.SUBC_COMPUTE: self.dev.compute_class, hw.SUBC_COPY: self.dev.dma_class}
    shown = [e for e in self.inflight if not self._done(e[0])][:2] or list(self.inflight)[-1:]
    userd = ctypes.addressof(self.gp_get_p) - hw.USERD_GP_GET
    pb_get = ctypes.c_uint32.from_address(userd + hw.USERD_GET).value | (ctypes.c_uint32.from_address(userd + hw.USERD_GET_HI).value << 32)
    for idx, off, n in shown:
      words = (ctypes.c_uint32 * n).from_address(self.cmd.cpu + off)[:]
      cur = "pending" if not self._done(idx) else "last completed"
      seg = self.cmd.va + off
      mark = (pb_get - seg) // 4 if not self._done(idx) and idx == get and seg <= pb_get < seg + 4 * n else None
      s += f"\n  GPFIFO entry {idx} ({cur}): {n} words at {seg:#x}" + (f", the GPU is at {pb_get:#x}" if mark is not None else "")
      s += "\n" + hw.format_commands(words, classes, mark, mapped_reader(self.dev.memories), self.dev.qmd_kernels)
      if not self._done(idx) and idx == get: s += "\n" + hw.format_methods(words, classes, mark, base=seg)
    return s

class ChannelSet:
  """NVDevice's channel group: its two channels (compute, copy) made, registered with UVM, scheduled and bound to the
  compute and copy classes, the compute state they start with, their teardown, and ringing and draining them."""
  channels: dict[str, NVChannel]
  def _init_channels(self) -> None:
    """The channel group with its two GPFIFO channels, each registered with UVM, scheduled, bound to the compute and
    copy classes; then the compute state (shader windows, local memory). Also what recovery runs again."""
    nv = self.nv
    self.channel_group = self.rm_alloc(self.nvdevice, nv.KEPLER_CHANNEL_GROUP_A,
                                       nv.NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS(engineType=hw.NV2080_ENGINE_TYPE_GRAPHICS))
    self.ctxshare = self.rm_alloc(self.channel_group, hw.FERMI_CONTEXT_SHARE_A, nv.NV_CTXSHARE_ALLOCATION_PARAMETERS(
      hVASpace=self.vaspace, flags=nv.NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_ASYNC))
    ring_bytes = round_up(self.gpfifo_entries * 8, 0x200)  # USERD follows the ring, 512-byte aligned
    per = round_up(ring_bytes + 0x200, PAGE)
    self.gpfifo_mem = self._gpu_alloc(2 * per, host=True, what="GPFIFO rings and USERD")
    self.notifier_mem = self._gpu_alloc(PAGE, host=True, what="error notifier")
    for i, name in enumerate(("compute", "copy")):
      off = i * per
      params = nv.NV_CHANNEL_ALLOC_PARAMS(hObjectError=self.notifier_mem.handle, gpFifoOffset=self.gpfifo_mem.va + off,
                                          gpFifoEntries=self.gpfifo_entries, hContextShare=self.ctxshare)
      params.hUserdMemory[0], params.userdOffset[0] = self.gpfifo_mem.handle, off + ring_bytes
      ch = self.rm_alloc(self.channel_group, self.gpfifo_class, params)
      self.rm_alloc(ch, self.compute_class)
      self.rm_alloc(ch, self.dma_class)
      tok = self.rm_control(ch, nv.NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN, nv.NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS(
        workSubmitToken=0xFFFFFFFF), "GPFIFO_GET_WORK_SUBMIT_TOKEN").workSubmitToken
      cmd = self._gpu_alloc(self.cmd_ring_bytes, host=True, what=f"{name} command ring")
      self.channels[name] = c = NVChannel(self, name, ch, self.gpfifo_mem, off, self.gpfifo_entries, off + ring_bytes, cmd, tok, 0)
      # finding 2: RM schedules a GR channel of an externally owned VA space only once UVM bound its buffers
      # (kernel_channel.c kchannelIsSchedulable_IMPL, checked by kchangrpapiCtrlCmdGpFifoSchedule_IMPL)
      va = self.cpu_va.alloc(CHANNEL_VA_BYTES, 2 << 20)
      rc = nv.UVM_REGISTER_CHANNEL_PARAMS(rmCtrlFd=self.fd_ctl, hClient=self.root, hChannel=ch, base=va, length=CHANNEL_VA_BYTES)
      ctypes.memmove(rc.gpuUuid.uuid, self.uuid, 16)
      try: self.uvm(nv.UVM_REGISTER_CHANNEL, rc, "UVM_REGISTER_CHANNEL")
      except BaseException:
        self.cpu_va.release(va, CHANNEL_VA_BYTES)
        raise
      c.uvm_va = va
    self.rm_control(self.channel_group, nv.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE, nv.NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS(bEnable=1), "GPFIFO_SCHEDULE")
    for c in self.channels.values():
      c.submit(array("I", [hw.mthd(hw.SUBC_COMPUTE, hw.SET_OBJECT, 1), self.compute_class, hw.mthd(hw.SUBC_COPY, hw.SET_OBJECT, 1), self.dma_class]))
    self.channels["compute"].submit(array("I", self._compute_state_words()))
    self._drain_channels()

  def _compute_state_words(self) -> list[int]:
    """The shader windows of this generation (hw.SHADER_WINDOWS: 32-bit on Ampere/Ada, 64-bit on Hopper+, finding 3),
    then the local memory, when a program needed some."""
    c, M, nv, win = hw.SUBC_COMPUTE, hw.M32, self.nv, self.windows
    w = [hw.mthd(c, nv.NVC6C0_SET_SHADER_SHARED_MEMORY_WINDOW_A, 2), win.shared >> 32, win.shared & M,
         hw.mthd(c, nv.NVC6C0_SET_SHADER_LOCAL_MEMORY_WINDOW_A, 2), win.local >> 32, win.local & M]
    if self.local_mem is not None:
      per_tpc = self._local_bytes_per_tpc(self.local_per_thread)
      w += [hw.mthd(c, nv.NVC6C0_SET_SHADER_LOCAL_MEMORY_A, 2), self.local_mem.va >> 32, self.local_mem.va & M,
            hw.mthd(c, nv.NVC6C0_SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A, 3), per_tpc >> 32, per_tpc & M, 0xFF]
    return w

  def _teardown_channels(self) -> None:
    """Unregister every channel from UVM (before RM frees it: uvm_user_channel.c uvm_unregister_channel stops and
    detaches it), free the channel group (its channels and their objects with it) and the rings."""
    nv = self.nv
    for c in self.channels.values():
      if c.uvm_va:
        p = nv.UVM_UNREGISTER_CHANNEL_PARAMS(hClient=self.root, hChannel=c.handle)
        ctypes.memmove(p.gpuUuid.uuid, self.uuid, 16)
        try: self.uvm(nv.UVM_UNREGISTER_CHANNEL, p, "UVM_UNREGISTER_CHANNEL")
        finally:
          self.cpu_va.release(c.uvm_va, CHANNEL_VA_BYTES)
          c.uvm_va = 0
    if getattr(self, "channel_group", None):
      try: self.rm_free(self.channel_group, self.nvdevice)
      finally: self.channel_group = 0
    for c in self.channels.values(): self._gpu_free(c.cmd)
    self.channels.clear()
    for attr in ("gpfifo_mem", "notifier_mem"):
      if (m := getattr(self, attr, None)) is not None:
        setattr(self, attr, None)
        self._gpu_free(m)

  def _kick(self) -> None:
    """Ring the doorbell of channels with pending work: the GPU re-checks semaphore acquires (host-written signals)."""
    for ch in self.channels.values():
      if ch.gp_get_p.value != ch.put: self.port.doorbell(self.doorbell_addr, ch.token)

  def queue_state(self) -> str:
    return (f"{self.device}: timeline {self.timeline_signal.va_addr:#x} value {self.timeline_signal.value}, last submitted "
            f"{self.timeline_value - 1}\n" + "\n".join(ch.state() for ch in self.channels.values()))

  def _drain_channels(self, timeout_ms: int | None = None) -> None:
    """Wait until the GPU fetched every GPFIFO entry submitted (raw submits carry no timeline value)."""
    for ch in list(self.channels.values()):
      if ch.gp_get_p.value == ch.put: continue   # (drained: the common case after a timeline wait reads no clock)
      deadline = time.perf_counter() + (timeout_ms or self.default_timeout_ms) / 1000
      while ch.gp_get_p.value != ch.put:
        self._check_fault()
        if time.perf_counter() > deadline:
          from baregrad.hcq import HCQTimeout   # (the hcq package imports HCQTimeout late too)
          raise HCQTimeout(f"{self.device}: timed out waiting for the {ch.name} channel to drain\n{self.queue_state()}")
        self._kick()
        time.sleep(1e-4)

