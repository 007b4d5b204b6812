"""HCQDevice: the generic part of a hardware-command-queue device (timeline, kernel args, programs, copies)."""
from __future__ import annotations
import ctypes, threading, time, warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence
from baregrad import knobs
from baregrad.helpers import c_array
from baregrad.hal import Compiled, LRUAllocator, Program, profile
from baregrad.hcq.signal import HCQSignal, SignalPool
from baregrad.hcq.queue import HWQueue, HCQArgsState, _dims

def where_is(addr: int, memories: Sequence[Any], slack: int = 1 << 20) -> str:
  """The allocation `addr` falls in, or the one it lies just past (within `slack` bytes): `memories` have va, size, what."""
  for m in memories:
    if m.va <= addr < m.va + m.size: return f"{addr - m.va:#x} bytes into {m.what} [{m.va:#x}, +{m.size:#x})"
  before = [m for m in memories if m.va + m.size <= addr < m.va + m.size + slack]
  if before:
    m = max(before, key=lambda m: m.va + m.size)
    return f"{addr - (m.va + m.size):#x} bytes past the end of {m.what} [{m.va:#x}, +{m.size:#x}): no allocation there"
  return "in no allocation of this device"

def mapped_reader(memories: Sequence[Any]) -> Callable[[int, int], bytes]:
  """`read(addr, nbytes) -> bytes` of GPU addresses through the host mappings of `memories` (va, size, cpu): what the
  decoders use to follow a launch to its QMD or AQL packet's kernel. KeyError where no mapped allocation holds the range."""
  def read(addr: int, n: int) -> bytes:
    for m in list(memories):
      if m.cpu is not None and m.va <= addr and addr + n <= m.va + m.size: return ctypes.string_at(m.cpu + addr - m.va, n)
    raise KeyError(f"{addr:#x}+{n:#x} is in no host-mapped allocation ({where_is(addr, memories)})")
  return read

@dataclass
class HCQBuffer:
  """Device memory: `va_addr` is what commands use; `cpu_addr` is the host mapping (None if not mapped)."""
  va_addr: int
  size: int
  cpu_addr: int | None = None
  view_of: HCQBuffer | None = None
  meta: Any = None
  def offset(self, off: int, size: int) -> HCQBuffer:
    return HCQBuffer(self.va_addr + off, size, None if self.cpu_addr is None else self.cpu_addr + off, self.view_of or self)

class HCQDevice(Compiled):
  """Subclasses pass their queue types and implement `_alloc_shared(size) -> HCQBuffer` (memory the host
  and the device both see, for signals, kernel args and staging) and `queue_state() -> str`."""
  signal_t: type[HCQSignal] = HCQSignal
  ticks_per_us: float = 1.0
  default_timeout_ms: int = 30000
  capture: Any = None   # a hcq.capture.CaptureWriter when the driver's *_CAPTURE=DIR is set

  def __init__(self, device: str, allocator: Any, renderer: Any, compiler: Any, runtime: type | None,
               compute_queue_t: type[HWQueue], copy_queue_t: type[HWQueue] | None = None,
               kernargs_size: int = 16 << 20, signal_pool_size: int = 64 << 10) -> None:
    super().__init__(device, allocator, renderer, compiler, runtime)
    self.compute_queue_t, self.copy_queue_t = compute_queue_t, copy_queue_t
    self.default_timeout_ms = knobs.read("HCQ_TIMEOUT_MS") or self.default_timeout_ms
    self.signal_pool_mem = pool_mem = self._alloc_shared(signal_pool_size)
    assert pool_mem.cpu_addr is not None
    self.signal_pool = SignalPool(pool_mem.cpu_addr, pool_mem.va_addr, signal_pool_size)
    self.peer_links: dict[str, Any] = {}   # source device name -> PeerLink into this device, or the reason there is none
    self.imported: dict[int, Any] = {}     # host address -> (owner device, what _import_host made of its memory)
    self.peers: dict[str, HCQDevice] = {}  # devices whose work this device's queues wait on (peer copies)
    self.timeline_signal = self.signal_t(self, value=0)
    self.timeline_value = 1  # the value the next submission signals
    self.kernargs = self._alloc_shared(kernargs_size)
    assert self.kernargs.cpu_addr is not None
    # the ring's bytes, for drivers that pack a launch's args into it (struct.pack_into, slice stores: no ctypes call)
    self.kernargs_cpu = self.kernargs.cpu_addr
    self.kernargs_mv = memoryview(c_array(ctypes.c_char, self.kernargs.size).from_address(self.kernargs.cpu_addr)).cast("B")
    self._kernargs_off = 0
    self._lock = threading.Lock()
    # reserving a timeline value and submitting must be atomic: otherwise two host threads can queue
    # "wait N; signal N+1" ahead of "wait N-1; signal N" on one FIFO queue and deadlock it
    self.submit_lock = threading.Lock()

  def next_timeline(self) -> int:
    """Reserve the next timeline value (the one a submission will signal)."""
    v = self.timeline_value
    self.timeline_value += 1
    return v

  def synchronize(self, timeout_ms: int | None = None) -> None:
    self.timeline_signal.wait(self.timeline_value - 1, timeout_ms)

  def alloc_kernargs(self, size: int) -> tuple[int, int]:
    """(cpu_addr, va_addr) of `size` bytes in the kernel-args ring. On wrap the device is synchronized,
    so nothing still in flight reads memory that is handed out again."""
    size = (size + 63) & ~63
    if size > self.kernargs.size: raise ValueError(f"{size} bytes of kernel args exceed the ring of {self.kernargs.size} bytes")
    with self._lock:
      if self._kernargs_off + size > self.kernargs.size:
        self.synchronize()
        self._kernargs_off = 0
      off, self._kernargs_off = self._kernargs_off, self._kernargs_off + size
    assert self.kernargs.cpu_addr is not None
    return self.kernargs.cpu_addr + off, self.kernargs.va_addr + off

  def alloc_args_memory(self, size: int) -> tuple[int, int]:
    """(cpu_addr, va_addr) of dedicated kernel-args memory that is never reused: for recorded queues
    (graphs) whose args must outlive the ring (pass it as fill_kernargs(..., kernargs=...))."""
    m = self._alloc_shared(size)
    assert m.cpu_addr is not None
    return m.cpu_addr, m.va_addr

  def copy_from(self, dest: Any, src: Any) -> bool:
    """Queue the copy of hal Buffer src (on another device of this class) into hal Buffer dest (on this device) on
    both devices' queues, each waiting on the other's signals, with no host wait (hcq/peer.py); False where the pair
    cannot be linked (a driver without _import_host, a kernel driver refusing the pages: the first failure is
    remembered): the caller copies through the host."""
    from baregrad.hal.device import Device
    from baregrad.hcq.peer import PeerLink
    sdev = Device[src.device]
    if type(sdev) is not type(self) or sdev is self or type(self)._import_host is HCQDevice._import_host: return False
    link = self.peer_links.get(sdev.device)
    no_map = bool(knobs.get("NO_PEER_MAP"))
    # (none yet, the source was reopened, or NO_PEER_MAP changed since it was made)
    if link is None or (not isinstance(link, str) and (link.src is not sdev or link.no_map != no_map)):
      if link is not None and not isinstance(link, str): link.close()
      try: link = PeerLink(sdev, self, no_map=no_map)
      except (OSError, ValueError) as e:   # a kernel driver refused the pages: copies go through the host (said once)
        link = f"{sdev.device} -> {self.device}: no peer link ({e}); copies go through the host"
        warnings.warn(link, stacklevel=2)
      self.peer_links[sdev.device] = link
    if isinstance(link, str): return False
    if src.nbytes: link.copy(dest._buf, src._buf, src.nbytes)
    return True

  def peer_state(self) -> str:
    """The devices whose work this device's queues wait on (peer copies) that have work not yet finished, each
    with where it stands: what a timeout message adds, since a queue of this device may be blocked by another
    device's stuck work."""
    busy = [(n, d) for n, d in self.peers.items() if d.timeline_signal.value < d.timeline_value - 1]
    if not busy: return ""
    return "queues of this device wait on other devices' work (peer copies); unfinished: " + "; ".join(
      f"{n}'s timeline {d.timeline_signal.va_addr:#x} is {d.timeline_signal.value} (last submitted {d.timeline_value - 1})" for n, d in busy)

  def cpu_address(self, va: int, size: int) -> int | None:
    """The host address of GPU addresses [va, va+size) when one CPU-mapped allocation of the driver's `memories` (each
    with va, size, cpu) holds them all, else None."""
    for m in getattr(self, "memories", ()):
      if m.cpu is not None and m.va <= va and va + size <= m.va + m.size: return m.cpu + va - m.va
    return None

  # --- what a driver provides
  def peer_direct(self, src: HCQDevice) -> bool:
    """Whether src's copy queue can write this device's memory directly (no staging; hcq/peer.py)."""
    return False
  def peer_map(self, src: HCQDevice) -> bool:
    """Whether this device's copy queue can read src's device memory through its own page tables (a peer mapping:
    hcq/peer.py copies without staging) and each device's queues can wait on the other's timeline; a driver that says
    yes implements map_peer(src, buf)."""
    return False
  def map_peer(self, src: HCQDevice, buf: HCQBuffer) -> None:
    """Map src's device buffer `buf` into this device's GPU VA space at its own address (once; kept until src frees
    it). Only where peer_map(src) said yes."""
    raise NotImplementedError
  def import_host(self, buf: HCQBuffer, owner: Any) -> None:
    """Map host pages `owner` holds (buf.cpu_addr == buf.va_addr, page aligned) into this device's GPU VA space at
    that same address, once per (address, owner): an import of the address made for another owner (one since gone,
    whose pages were unmapped) is released first."""
    if buf.cpu_addr is None or buf.cpu_addr != buf.va_addr:
      raise ValueError(f"import_host: memory at VA {buf.va_addr:#x} is mapped for the CPU at "
                       f"{'no address' if buf.cpu_addr is None else hex(buf.cpu_addr)}; expected the same address")
    have = self.imported.get(buf.cpu_addr)
    if have is not None:
      if have[0] is owner: return
      self.unimport_host(buf.cpu_addr)
    self.imported[buf.cpu_addr] = (owner, self._import_host(buf))
  def unimport_host(self, addr: int) -> None:
    """Release what import_host made of the pages at addr (if anything)."""
    if (have := self.imported.pop(addr, None)) is not None: self._unimport(have[1])
  def _import_host(self, buf: HCQBuffer) -> Any:
    """The driver's part of import_host: map the pages, return what _unimport needs; drivers that can make
    copy_from work implement it."""
    raise NotImplementedError
  def _unimport(self, m: Any) -> None:
    """Release what _import_host returned."""
    raise NotImplementedError
  def _alloc_shared(self, size: int) -> HCQBuffer: raise NotImplementedError
  def queue_state(self) -> str:
    """The queues' state in words (what each is executing or waiting on); put into timeout messages."""
    return f"{self.device}: timeline value {self.timeline_signal.value}, last submitted {self.timeline_value - 1}"
  def _signal_written(self) -> None:
    """The host wrote a signal; devices whose queues sleep on signal memory wake them here."""
  def _check_fault(self) -> None:
    """Raise if a queue has faulted (a host wait must not sit out its timeout on a dead queue)."""
  def _wait_signal(self, sig: HCQSignal, value: int, timeout_s: float, final: bool = True) -> bool:
    """Poll the signal memory until value >= `value`; False on timeout. Spins briefly, then backs off. `final`: the
    wait's last window (False: the hang watchdog's first one, after which the wait goes on: nothing is given up)."""
    deadline, delay, spins = time.perf_counter() + timeout_s, 1e-5, 0
    while sig._v.value < value:
      self._check_fault()
      if time.perf_counter() > deadline: return False
      spins += 1
      if spins > 200:
        time.sleep(delay)
        delay = min(delay * 2, 1e-3)
    return True

class HCQProgram(Program):
  """Launches through the compute queue: wait(timeline) -> [timestamp] -> exec -> [timestamp] -> signal(timeline)."""
  args_state_t: type[HCQArgsState] = HCQArgsState
  _capturing = False   # inside a captured launch (hcq/capture.py)
  last_args: HCQArgsState | None = None   # while capturing: the args state of the last launch

  def __init__(self, device: HCQDevice, name: str, lib: bytes) -> None:
    super().__init__(device, name, lib)
    self.dev = device

  def kernargs_size(self, nbufs: int, nvals: int) -> int: return 8 * (nbufs + nvals)

  def fill_kernargs(self, bufs: Sequence[Any], vals: Sequence[int] = (), kernargs: tuple[int, int] | None = None) -> HCQArgsState:
    """Write the args (buffer addresses, then values) into `kernargs` (cpu_addr, va_addr), or into the ring,
    which is reused once it wraps: a queue recorded for replay should pass dev.alloc_args_memory(...)."""
    bufs = [b._buf if hasattr(b, "_buf") else b for b in bufs]  # accept hal Buffers as well as HCQBuffers
    cpu, va = kernargs if kernargs is not None else self.dev.alloc_kernargs(self.kernargs_size(len(bufs), len(vals)))
    st = self.args_state_t(cpu, va, self, bufs, vals)
    if self.dev.capture is not None: self.last_args = st
    return st

  def capture_descriptor(self, args: HCQArgsState) -> dict[str, bytes]:
    """The launch descriptor a launch with `args` was given, by name (drivers: QMD and constant bank, AQL packet and
    kernargs), for *_CAPTURE."""
    return {}

  def install_captured(self, q: HWQueue, args: HCQArgsState, files: dict[str, bytes], reloc: dict[int, int]) -> list[str]:
    """Replay (hcq/replay.py): put the captured launch descriptor `files` (addresses relocated by `reloc`) in place of
    the one `q.exec(self, args, ...)` recorded; returns where the two differ. Drivers with a capture implement it."""
    raise NotImplementedError(f"{type(self).__name__} cannot replay a captured launch")

  def _captured(self, bufs: Sequence[Any], global_size: tuple[int, int, int], local_size: tuple[int, int, int], vals: tuple[int, ...],
                wait: bool) -> float | None:
    from baregrad.hcq.capture import captured_launch
    def run() -> float | None:
      self._capturing = True
      try: return self(*bufs, global_size=global_size, local_size=local_size, vals=vals, wait=wait)
      finally: self._capturing = False
    return captured_launch(self, bufs, vals, _dims(global_size, "global_size"), _dims(local_size, "local_size"), run)

  def __call__(self, *bufs: Any, global_size: tuple[int, int, int] = (1, 1, 1), local_size: tuple[int, int, int] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    dev = self.dev
    if dev.capture is not None and not self._capturing: return self._captured(bufs, global_size, local_size, vals, wait)
    args = self.fill_kernargs(bufs, vals)
    q = dev.compute_queue_t()
    ts = wait or profile.ON  # PROFILE=1 takes the same timestamps, without waiting for them
    if ts: st, en = dev.signal_t(dev), dev.signal_t(dev)
    with dev.submit_lock:
      q.wait(dev.timeline_signal, dev.timeline_value - 1)
      if ts: q.timestamp(st)
      q.exec(self, args, global_size, local_size)
      if ts: q.timestamp(en)
      q.signal(dev.timeline_signal, tv := dev.next_timeline()).submit(dev)
    if profile.ON: profile.device_op(dev, q, self.name, "kernel", (st, en), tv, global_size=global_size, local_size=local_size)
    if not wait: return None
    dev.synchronize()
    return (en.timestamp - st.timestamp) / dev.ticks_per_us / 1e6

class HCQAllocator(LRUAllocator):
  """Copies between host and device go through the copy queue (or the compute queue) via two staging
  buffers in shared memory, so filling one overlaps the device copying the other."""
  def __init__(self, dev: HCQDevice, staging_size: int = 2 << 20) -> None:
    super().__init__(dev.device)
    self.dev, self.staging_size = dev, staging_size
    self._staging: list[HCQBuffer] = []
    self._staging_done = [0, 0]  # timeline value after which staging[i] is free again
    self._copy_lock = threading.Lock()  # the staging buffers are shared by all host threads

  def _stage(self, i: int) -> tuple[HCQBuffer, memoryview]:
    if not self._staging: self._staging = [self.dev._alloc_shared(self.staging_size) for _ in range(2)]
    s = self._staging[i]
    assert s.cpu_addr is not None
    return s, memoryview(c_array(ctypes.c_char, s.size).from_address(s.cpu_addr)).cast("B")

  def _queue(self) -> HWQueue: return (self.dev.copy_queue_t or self.dev.compute_queue_t)()

  def _copyin(self, dest: HCQBuffer, src: memoryview) -> None:
    with self._copy_lock: self._copyin_locked(dest, src)
  def _copyout(self, dest: memoryview, src: HCQBuffer) -> None:
    with self._copy_lock: self._copyout_locked(dest, src)

  def _copyin_locked(self, dest: HCQBuffer, src: memoryview) -> None:
    dev = self.dev
    for n, off in enumerate(range(0, src.nbytes, self.staging_size)):
      k, size = n % 2, min(self.staging_size, src.nbytes - off)
      dev.timeline_signal.wait(self._staging_done[k])
      s, mv = self._stage(k)
      mv[:size] = src[off:off + size]
      with dev.submit_lock:
        self._staging_done[k] = tv = dev.next_timeline()
        q = self._queue().wait(dev.timeline_signal, tv - 1)
        sigs = profile.begin(q, dev)  # timestamps around the copy when profiling
        q.copy(dest.va_addr + off, s.va_addr, size)
        profile.end(q, sigs)
        q.signal(dev.timeline_signal, tv).submit(dev)
      profile.device_op(dev, q, "copyin", "copy", sigs, tv, nbytes=size)

  def _copyout_locked(self, dest: memoryview, src: HCQBuffer) -> None:
    dev = self.dev
    for off in range(0, dest.nbytes, self.staging_size):
      size = min(self.staging_size, dest.nbytes - off)
      dev.timeline_signal.wait(self._staging_done[0])
      s, mv = self._stage(0)
      with dev.submit_lock:
        tv = dev.next_timeline()
        q = self._queue().wait(dev.timeline_signal, tv - 1)
        sigs = profile.begin(q, dev)
        q.copy(s.va_addr, src.va_addr + off, size)
        profile.end(q, sigs)
        q.signal(dev.timeline_signal, tv).submit(dev)
      profile.device_op(dev, q, "copyout", "copy", sigs, tv, nbytes=size)
      dev.timeline_signal.wait(tv)
      self._staging_done[0] = tv
      dest[off:off + size] = mv[:size]

  def _offset(self, opaque: HCQBuffer, offset: int, size: int) -> HCQBuffer: return opaque.offset(offset, size)

__all__ = ["HCQBuffer", "HCQDevice", "HCQProgram", "HCQAllocator"]
