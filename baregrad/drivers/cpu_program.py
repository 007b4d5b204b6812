"""The CPU device's programs: a kernel's ELF object loaded into executable memory, its argument block, and the launch
paths (encoded once and patched, or run at once on an idle queue: run_direct)."""
from __future__ import annotations
import atexit, ctypes, threading
from typing import TYPE_CHECKING, Any, Sequence
from baregrad.helpers import DEBUG, c_array
from baregrad.hal import profile
from baregrad.hcq import HCQArgsState, HCQProgram
from baregrad.drivers.cpu_encoding import _M32, CPUComputeQueue
if TYPE_CHECKING: from baregrad.drivers.cpu import CPUDevice

_EXITING = False  # at interpreter exit nothing is drained: a stuck queue must not stall exit in __del__

@atexit.register
def _at_exit() -> None:
  global _EXITING
  _EXITING = True

class CPUArgsState(HCQArgsState):
  def __init__(self, cpu_addr: int, va_addr: int, prg: Any, bufs: Sequence[Any], vals: Sequence[int]) -> None:
    super().__init__(cpu_addr, va_addr, prg, bufs, vals)
    self.slots = c_array(ctypes.c_uint64, len(self.bufs) + len(self.vals)).from_address(cpu_addr)
    for i, b in enumerate(self.bufs): self.slots[i] = b.va_addr
    for i, v in enumerate(self.vals): self.slots[len(self.bufs) + i] = v & 0xFFFFFFFFFFFFFFFF  # int64, two's complement
  def _put(self, i: int, v: int) -> None: self.slots[i] = v & 0xFFFFFFFFFFFFFFFF   # (int64 slots, two's complement)

class CPUProgram(HCQProgram):
  args_state_t = CPUArgsState
  direct = True   # run a tiny launch on an idle queue without writing its words (see run_direct); tests compare both paths
  def __init__(self, dev: CPUDevice, name: str, lib: bytes, min_chunk: int = 0) -> None:
    super().__init__(dev, name, lib)
    from baregrad.drivers.elf_loader import load_elf, disassemble
    if DEBUG() >= 7: print(disassemble(lib, name, name=f"kernel {name}"))
    self.image = load_elf(lib, name=f"kernel {name}")
    # min_chunk: cost hint, at least this many items per thread; 0 lets the pool learn the kernel's cost
    self.fxn_addr, self.min_chunk = self.image.symbol(name), min_chunk
    self._launch_words = None  # the commands of a plain launch, encoded once (see __call__)
    self._direct_args: Any = None   # the arguments of a direct launch (see run_direct)

  def __call__(self, *bufs: Any, global_size: tuple[int, int, int] = (1, 1, 1), local_size: tuple[int, int, int] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    """A launch that is neither timed nor profiled writes the same commands HCQProgram's does (wait for the timeline,
    exec, signal it) straight into words encoded once, patched here: building a queue object per launch costs more
    than a tiny kernel."""
    if wait or profile.ON or type(global_size) is not tuple or len(global_size) != 3 or type(local_size) is not tuple or len(local_size) != 3:
      return super().__call__(*bufs, global_size=global_size, local_size=local_size, vals=vals, wait=wait)
    dev = self.dev
    if global_size[1] != 1 or global_size[2] != 1:
      raise ValueError(f"the CPU runs one parallel axis: global_size must be (n, 1, 1), got {global_size}")
    if global_size[0] and self.run_direct(bufs, global_size[0], vals): return None
    n = len(bufs) + len(vals)
    cpu, va = dev.alloc_kernargs(8 * n)
    slots = c_array(ctypes.c_uint64, n).from_address(cpu)
    for i, b in enumerate(bufs): slots[i] = (b._buf if hasattr(b, "_buf") else b).va_addr
    for i, v in enumerate(vals): slots[len(bufs) + i] = v & 0xFFFFFFFFFFFFFFFF
    if (ws := self._launch_words) is None:
      q = CPUComputeQueue()
      q.wait(dev.timeline_signal, 0).exec(self, CPUArgsState(cpu, va, self, [], []), global_size, local_size).signal(dev.timeline_signal, 0)
      self._launch_words = ws = q.words
      self._at = (q.cmds[0].start + q.cmds[0].fields["value"][0], q.cmds[1].start + q.cmds[1].fields["args"][0],
                  q.cmds[1].start + q.cmds[1].fields["gx"][0], q.cmds[1].start + q.cmds[1].fields["lx"][0],
                  q.cmds[2].start + q.cmds[2].fields["value"][0])
    wv, ar, gx, lx, sv = self._at
    with dev.submit_lock:
      ws[ar], ws[ar + 1] = va & _M32, va >> 32
      ws[gx], ws[lx], ws[lx + 1], ws[lx + 2] = global_size[0], local_size[0], local_size[1], local_size[2]
      w = dev.timeline_value - 1
      ws[wv], ws[wv + 1] = w & _M32, w >> 32
      tv = dev.next_timeline()
      ws[sv], ws[sv + 1] = tv & _M32, tv >> 32
      dev.engines["compute"].submit(ws)  # (the ring takes a copy of the words)
    return None
  def run_direct(self, bufs: Sequence[Any], n_items: int, vals: Sequence[int] = ()) -> bool:
    """Run a launch of n_items (> 0) on this thread now, if the queue is idle, its wait met and the kernel's cost known
    and small (what submitting its words would do: QueueEngine._submit runs them on this thread, the wait passes, the
    kernel runs, whole or over the native pool, the signal is written), without writing the words into the ring and
    reading them back: half of an eager op's launch. False where it cannot (nothing ran: submit the words). The
    arguments go in this program's own block, not the kernel-args ring: the run is over before the lock is released,
    so nothing reads them later. CompiledRunner calls this first, then __call__."""
    if not self.direct or profile.ON: return False
    dev = self.dev
    eng = dev.engines["compute"]
    with dev.submit_lock:  # (the direct arguments are shared by this program's launches from every host thread)
      if not (eng.rptr == eng.wptr and eng.inline and not eng.stopped and not eng.fault
              and (est := eng.pool.cost.get(fa := self.fxn_addr)) is not None
              and (est * n_items <= eng.INLINE_NS or (est * n_items <= eng.INLINE_POOL_NS and eng.pool.native is not None))
              and dev.timeline_signal._v.value >= dev.timeline_value - 1): return False
      n = len(bufs) + len(vals)
      if (da := self._direct_args) is None or len(da) != n: self._direct_args = da = c_array(ctypes.c_uint64, n)()
      for i, b in enumerate(bufs): da[i] = (b._buf if hasattr(b, "_buf") else b).va_addr
      for i, v in enumerate(vals): da[len(bufs) + i] = v & 0xFFFFFFFFFFFFFFFF
      with eng._host_lock:
        eng.state = ("exec", fa, n_items)
        try: eng.run_known(fa, ctypes.addressof(da), n_items, self.min_chunk, est)
        except Exception as ex:   # as a fault while running the words: the queue takes nothing more
          eng._fault(ex)
          raise
        eng.state = "idle"
        tv = dev.timeline_value   # (next_timeline and _signal_written inline)
        dev.timeline_value = tv + 1
        dev.timeline_signal._v.value = tv
        if dev.sig_sleepers: dev._signal_written()
        eng.inlined += 1
    return True

  def __del__(self) -> None:
    # unmapping code a queued exec may still run would crash the process: drain first. The GC may run
    # this on a queue or pool thread, which must not wait for itself: then the host closes it later.
    if _EXITING: return  # the process is going away: leave the image mapped
    try:
      for e in self.dev.engines.values():  # the address may host another kernel later: forget what we learned
        e._fxns.pop(self.fxn_addr, None)
        e._chain_plans.clear()   # a kept chain verdict may name this address
        e._pool_plans.clear()
        if e.pool: e.pool.cost.pop(self.fxn_addr, None)
      if self.dev.closed: self.image.close()
      elif threading.current_thread().name.startswith("baregrad-cpu"): self.dev._zombies.append(self.image)
      else:
        self.dev.synchronize()
        self.image.close()
    except Exception: pass

