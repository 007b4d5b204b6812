"""The GPU's host interface: the usermode doorbell, GPFIFO channels and their pushbuffers (methods decoded per
subchannel class), host semaphores, scheduling across channels, and channel errors (the Xid in the error notifier and
the kernel log)."""
from __future__ import annotations
import ctypes, errno, time
from baregrad.ctypes_autogen.nv import nv_580 as nv
from baregrad.drivers.mock.common import MemFD, MMUFault, run_machine
from baregrad.drivers.mock.nv.state import Channel, GPUError, Work
from baregrad.drivers.nv import hw
from baregrad.drivers.nv.hw import NVNotification

class HostChannels:
  """Doorbell, GPFIFO entries, pushbuffer methods and semaphores of the scheduled channels."""

  def doorbell(self, addr: int, value: int) -> None:
    with self._lock:
      for a, (l, mem) in self.maps.items():
        if a <= addr < a + l:
          if isinstance(mem, MemFD) and mem.kind == "usermode" and addr - a == hw.NVC361_NOTIFY_CHANNEL_PENDING:
            ch = self.channels.get(value)
            if ch is None: self.log.append(f"doorbell: no channel with work-submit token {value}")
            # The GPU does not finish work while the host returns from a doorbell: the mock works through what was
            # rung before, and the entries this doorbell announces run at the next doorbell or kick (the driver rings
            # again while it waits). So a host that rewrites memory a queued launch reads is caught
            # (docs/hw/h100-580.159.04-findings.md finding 6b, launches in one submission overlap).
            run_machine(self)   # (every mock GPU of the machine: one may wait on another's signal)
            if ch is not None and ch.fault is None: self._announce(ch)
          else: ctypes.c_uint32.from_address(addr).value = value
          return
      raise OSError(errno.EFAULT, f"doorbell write to {addr:#x}: not a mapped usermode region")

  def _announce(self, ch: Channel) -> None:
    with self.in_vaspace(ch.vaspace): self._announce_in(ch)

  def _announce_in(self, ch: Channel) -> None:
    """GP_PUT as the doorbell found it becomes the channel's work; remember what each new launch's QMD and constant
    bank 0 held at submission, to report a host that rewrites them before the launch runs."""
    put = ctypes.c_uint32.from_address(ch.userd + hw.USERD_GP_PUT).value % ch.entries
    i = ch.visible_put
    while i != put:
      try:
        addr, n, _ = hw.decode_gp_entry(int.from_bytes(self.read_gpu(ch.ring_va + 8 * i, 8), "little"))
        regs: dict[tuple[int, int], int] = {}
        for m in hw.decode_pushbuffer(hw.words_of(self.read_gpu(addr, 4 * n))):
          regs[(m.subc, m.method)] = m.value
          if m.method == hw.SEND_PCAS_A and m.method >= 0x100: ch.snapshots[(i, m.value << 8)] = self._launch_bytes(m.value << 8)
      except (ValueError, hw.PushbufferError): pass   # faults are reported when the entry runs
      i = (i + 1) % ch.entries
    ch.visible_put = put

  def _launch_bytes(self, qmd: int) -> bytes | None:
    """The QMD at `qmd` and the constant bank 0 it names, as bytes (None where unreadable)."""
    try:
      ver = hw.QMD_VERSION[self.arch_info.compute]
      qb = self.read_gpu(qmd, hw.QMD_LAYOUTS[ver].nbytes)
      q = hw.read_qmd(hw.words_of(qb), ver)
      return qb + (self.read_gpu(q["cbank0"], q["cbank0_size"]) if q["cbank0"] is not None else b"")
    except (ValueError, KeyError): return None

  def _run_all(self) -> bool:
    """Run every scheduled channel until none makes progress (a release on one may unblock an acquire on another);
    whether any did."""
    progress, any_progress = True, False
    while progress:
      progress = False
      for ch in list(self.channels.values()):
        if ch.fault is None and self._is_scheduled(ch): progress |= self._run_channel(ch)
      any_progress |= progress
    return any_progress

  def _is_scheduled(self, ch: Channel) -> bool:
    return any(key[1] == ch.group for key in self.scheduled_groups)

  def _xid(self, ch: Channel, err: GPUError) -> None:
    """Robust-channel recovery as RM does it: the Xid line in the kernel log, status 0xffff and the Xid in the error
    notifier, and the whole channel group (the TSG is the unit RM recovers) stops."""
    gpu = 0
    try: gpu = self.clients[ch.client][self.clients[ch.client][ch.group].parent].data["gpu"]
    except (KeyError, TypeError): pass
    for detail in err.detail.split("\n"):   # one error can be several lines (SKEDCHECK: what failed, ESR, channel)
      self._klog(f"NVRM: Xid (PCI:0000:{gpu + 1:02x}:00): {err.xid}, name={self.process_name}, {detail}")
    self.log.append(f"mock GPU: {err.why}")
    for c in self.channels.values():
      if c.client != ch.client or c.group != ch.group: continue
      c.fault, c.inflight = f"Xid {err.xid} ({hw.XID_NAMES.get(err.xid, '?')}): {err.why}", []
      if c.error_notifier is not None:
        n = NVNotification.from_address(c.error_notifier)
        n.timeStamp, n.info32, n.info16, n.status = time.perf_counter_ns(), err.xid, 0, 0xFFFF

  @staticmethod
  def _mmu(ch: Channel, e: MMUFault, engine: str, client: str, why: str) -> GPUError:
    a = e.address
    return GPUError(31, f"channel 0x{ch.token:08x}, intr 00000000. MMU Fault: ENGINE {engine} {client} faulted @ 0x{a >> 32:x}_{a & 0xFFFFFFFF:08x}. "
                        f"Fault is of type FAULT_PTE {e.access}", why)

  def _run_channel(self, ch: Channel) -> bool:
    """Run what the channel may run, translating through its GPU VA space's page tables (mmu.py)."""
    with self.in_vaspace(ch.vaspace): return self._run_channel_in(ch)

  def _run_channel_in(self, ch: Channel) -> bool:
    progress = False
    get_p = ctypes.c_uint32.from_address(ch.userd + hw.USERD_GP_GET)
    try:
      while ch.fault is None:
        if ch.cur is None:
          if ch.gp_get == ch.visible_put:
            self._drain(ch)   # nothing more to fetch: the grids and copies in flight finish
            break
          try:
            entry = int.from_bytes(self.read_gpu(ch.ring_va + 8 * ch.gp_get, 8), "little")
            addr, n, _ = hw.decode_gp_entry(entry)
            words = hw.words_of(self.read_gpu(addr, 4 * n))
            ch.cur, ch.pos = (ch.gp_get, addr, hw.decode_pushbuffer(words)), 0
          except MMUFault as e: raise self._mmu(ch, e, "HOST0", "HUBCLIENT_HOST", f"GPFIFO entry {ch.gp_get}: {e}") from None
          except (ValueError, hw.PushbufferError) as e:
            raise GPUError(32, f"channel 0x{ch.token:08x}, errorString PBDMA ERROR, Info 0x0", f"GPFIFO entry {ch.gp_get}: {e}") from None
        _, addr, methods = ch.cur
        while ch.pos < len(methods):
          m = methods[ch.pos]
          where = f"{hw.method_name(ch.subc_class.get(m.subc), m.method)} at {addr + 4 * m.pos:#x}"
          try: ok = self._method(ch, m)
          except MMUFault as e: raise self._mmu(ch, e, "HOST0", "HUBCLIENT_HOST", f"{where}: {e}") from None
          except ValueError as e: raise GPUError(32, f"channel 0x{ch.token:08x}, errorString PBDMA ERROR, Info 0x0", f"{where}: {e}") from None
          if not ok:  # blocked on an acquire: resume here on the next doorbell or release
            here = addr + 4 * m.pos  # the PBDMA's pushbuffer GET, as USERD shows it
            ctypes.c_uint32.from_address(ch.userd + hw.USERD_GET).value = here & 0xFFFFFFFF
            ctypes.c_uint32.from_address(ch.userd + hw.USERD_GET_HI).value = here >> 32
            return progress
          ch.pos += 1
          ch.methods_done += 1
          progress = True
        ch.cur, ch.blocked = None, None
        ch.snapshots = {k: v for k, v in ch.snapshots.items() if k[0] != ch.gp_get}
        ch.gp_get = (ch.gp_get + 1) % ch.entries
        get_p.value = ch.gp_get
        progress = True
    except GPUError as e:
      self._xid(ch, e)
      return True
    return progress

  def _method(self, ch: Channel, m: hw.Method) -> bool:
    """Execute one method write; False when it must wait (an unsatisfied acquire)."""
    if m.method < 0x100:
      ch.regs[(0, m.method)] = m.value
      if m.method == hw.SET_OBJECT:
        cls = m.value & 0xFFFF
        objs = self.clients[ch.client]
        if not any(objs[c].cls == cls for c in ch.obj.children):
          raise GPUError(32, f"channel 0x{ch.token:08x}, errorString PBDMA ERROR, Info 0x0",
                         f"SET_OBJECT subchannel {m.subc}: no {hw.class_name(cls)} object on this channel")
        ch.subc_class[m.subc] = cls
      elif m.method == hw.WFI: self._drain(ch)            # wait for idle: everything launched before finishes
      elif m.method == hw.SEM_EXECUTE: return self._semaphore(ch, m.value)
      return True
    cls = ch.subc_class.get(m.subc)
    if cls is None:
      raise GPUError(32, f"channel 0x{ch.token:08x}, errorString PBDMA ERROR, Info 0x0",
                     f"method {m.method:#x} on subchannel {m.subc}, which has no object bound (SET_OBJECT)")
    ch.regs[(m.subc, m.method)] = m.value
    g = lambda meth: ch.regs.get((m.subc, meth), 0)
    if cls in hw.DMA_CLASSES and m.method == hw.LAUNCH_DMA:
      v = m.value
      src = (g(hw.OFFSET_IN_UPPER) << 32) | g(hw.OFFSET_IN_UPPER + 4)
      dst = (g(hw.OFFSET_IN_UPPER + 8) << 32) | g(hw.OFFSET_IN_UPPER + 12)
      n = g(hw.LINE_LENGTH_IN) * (g(hw.LINE_COUNT) if nv.NVC8B5_LAUNCH_DMA_MULTI_LINE_ENABLE.decode(v) else 1)
      sem = (((g(hw.SET_SEMAPHORE_A) << 32) | g(hw.SET_SEMAPHORE_A + 4)), g(hw.SET_SEMAPHORE_A + 8), nv.NVC8B5_LAUNCH_DMA_SEMAPHORE_TYPE.decode(v))
      copy = bool(nv.NVC8B5_LAUNCH_DMA_DATA_TRANSFER_TYPE.decode(v))
      # a copy runs alongside whatever the channel launched before it, until a wait-for-idle
      ch.inflight.append(Work("copy", f"copy {n} bytes {src:#x} -> {dst:#x}", copy=(dst, src, n) if copy else None, sem=sem if sem[2] else None))
    elif cls in hw.COMPUTE_CLASSES:
      # An offset the class defines no method at is refused by the GR front end as an illegal method (nouveau
      # gf100.c gf100_gr_intr: NV_PGRAPH_INTR bit 0x10 "ILLEGAL_MTHD" with subchannel, class, method and data), which RM
      # reports as a GR exception: ROBUST_CHANNEL_GR_EXCEPTION, Xid 13 (nverror.h). The legal offsets come from the
      # class header (hw.COMPUTE_LEGAL_METHODS). The line has the shape of the H100's Xid 13 "Graphics Exception: channel"
      # line (docs/hw/h100-580.159.04-2026-11-28.md); an illegal method itself was not yet tried on the H100.
      if m.method not in hw.COMPUTE_LEGAL_METHODS:
        raise GPUError(13, f"Graphics Exception: channel 0x{ch.token:08x}, Class {cls:08x}, Offset {m.method:08x}, Data {m.value:08x}",
                       f"illegal method {m.method:#x} on subchannel {m.subc} ({hw.class_name(cls)} defines no method there), data {m.value:#x}")
      if m.method in (hw.SEND_SIGNALING_PCAS2_B, hw.SEND_PCAS_A + 4): self._launch(ch, m.subc, g(hw.SEND_PCAS_A) << 8)
      elif m.method == nv.NVC6C0_WAIT_FOR_IDLE: self._drain(ch)
      elif m.method == nv.NVC6C0_SET_SHADER_SHARED_MEMORY_WINDOW_B:
        self._check_shared_window(ch, cls, (g(nv.NVC6C0_SET_SHADER_SHARED_MEMORY_WINDOW_A) << 32) | m.value, m)
    return True

  def _semaphore(self, ch: Channel, ex: int) -> bool:
    g = lambda meth: ch.regs.get((0, meth), 0)
    addr = g(hw.SEM_ADDR_LO) | (g(hw.SEM_ADDR_LO + 4) << 32)
    wide = hw.F_SEM_SIZE.decode(ex)
    payload = g(hw.SEM_ADDR_LO + 8) | ((g(hw.SEM_ADDR_LO + 12) << 32) if wide else 0)
    nb, mask = (8, (1 << 64) - 1) if wide else (4, 0xFFFFFFFF)
    if addr % nb: raise ValueError(f"semaphore address {addr:#x} not {nb}-byte aligned")
    op = hw.F_SEM_OP.decode(ex)
    if op in (0, 2, 3, 4, 5):  # acquires
      def test() -> tuple[bool, int]:
        cur = int.from_bytes(self.read_gpu(addr, nb), "little")
        return ({0: cur == payload, 2: cur >= payload, 3: ((cur - payload) & mask) < (1 << (8 * nb - 1)),
                 4: (cur & payload) != 0}[op] if op != 5 else (cur | payload) != 0), cur
      ok, cur = test()
      if not ok and ch.inflight:  # while the channel waits, what it launched runs to completion
        self._drain(ch)
        ok, cur = test()
      ch.blocked = None if ok else f"acquire {hw.SEM_OP_NAMES[op]} {addr:#x} >= {payload} (value {cur})"
      return ok
    if hw.F_SEM_WFI.decode(ex): self._drain(ch)   # RELEASE_WFI: the release waits until the engine is idle
    cur = int.from_bytes(self.read_gpu(addr, nb), "little")
    if op == 1: new = payload
    elif op == 6:
      red = hw.F_SEM_RED.decode(ex)
      new = {0: min(cur, payload), 1: max(cur, payload), 2: cur ^ payload, 3: cur & payload, 4: cur | payload, 5: cur + payload,
             6: 0 if cur >= payload else cur + 1, 7: payload if cur == 0 or cur > payload else cur - 1}[red] & mask
    else: raise ValueError(f"SEM_EXECUTE operation {op} is reserved")
    self.write_gpu(addr, new.to_bytes(nb, "little"))
    if hw.F_SEM_TS.decode(ex): self.write_gpu(addr + 8, time.perf_counter_ns().to_bytes(8, "little"))
    return True

  def channel_state(self) -> str:
    with self._lock:
      out = []
      for ch in self.channels.values():
        put = ctypes.c_uint32.from_address(ch.userd + hw.USERD_GP_PUT).value
        out.append(f"channel token {ch.token}: GP_GET {ch.gp_get} GP_PUT {put} methods executed {ch.methods_done}"
                   + (f" BLOCKED {ch.blocked}" if ch.blocked else "") + (f" FAULT {ch.fault}" if ch.fault else ""))
      return "\n".join(out)

  def dump_channel(self, token: int, last: int = 8) -> str:
    """A channel's GPFIFO and pushbuffers as the GPU sees them (read through its VA space), decoded."""
    with self._lock, self.in_vaspace(self.channels[token].vaspace):
      ch = self.channels[token]
      ring = hw.words_of(self.read_gpu(ch.ring_va, 8 * ch.entries))
      entries = [ring[2 * i] | (ring[2 * i + 1] << 32) for i in range(ch.entries)]
      put = ctypes.c_uint32.from_address(ch.userd + hw.USERD_GP_PUT).value
      return f"channel token {ch.token}" + (f" BLOCKED {ch.blocked}" if ch.blocked else "") + (f" FAULT {ch.fault}" if ch.fault else "") + "\n" + \
        hw.format_gpfifo(entries, ch.gp_get, put, self.read_gpu, dict(ch.subc_class), last)
