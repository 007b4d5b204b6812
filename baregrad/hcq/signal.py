"""HCQ signals: a 64-bit value and a 64-bit timestamp in memory both the host and the device see."""
from __future__ import annotations
import ctypes, sys, threading
from typing import Any
from baregrad import knobs
from baregrad.hal import profile

class HCQTimeout(TimeoutError):
  """A host wait ran out of time; the message carries the device's queue state in words."""

def hang_report(sig: "HCQSignal", value: int, waited_ms: int, left_ms: int) -> str:
  """What a host wait that makes no progress is blocked on: the signal's address, the value waited for, its current
  value, and the device's queue state (each queue's blocked packet, decoded, and what it waits for)."""
  return (f"HANG? {sig.dev.device}: no progress for {waited_ms} ms waiting for signal {sig.va_addr:#x} >= {value} "
          f"(it is {sig.value}; a queue must write >= {value} there to release the wait); still waiting up to "
          f"{left_ms - waited_ms} ms more\n{sig.dev.queue_state()}")

class SignalPool:
  """Fixed-size slots carved from one shared allocation; signals are created and dropped often."""
  SLOT = 16  # value u64 at +0, timestamp u64 at +8

  def __init__(self, cpu_addr: int, va_addr: int, size: int) -> None:
    self.cpu_addr, self.va_addr, self.size = cpu_addr, va_addr, size
    self._free = list(range(size // self.SLOT - 1, -1, -1))
    self._lock = threading.Lock()

  def take(self) -> int:
    with self._lock:
      if not self._free: raise RuntimeError(f"signal pool exhausted ({self.size // self.SLOT} signals in use); drop unused signals")
      return self._free.pop()

  def give(self, slot: int) -> None:
    with self._lock: self._free.append(slot)

  @property
  def in_use(self) -> int: return self.size // self.SLOT - len(self._free)

  def used(self) -> list[tuple[int, int, int]]:
    """(device address, value, timestamp) of every slot a live signal holds, lowest address first: what
    `python -m baregrad.queues` shows as a device's signals."""
    with self._lock: free = set(self._free)
    out = []
    for slot in range(self.size // self.SLOT):
      if slot in free: continue
      cpu = self.cpu_addr + slot * self.SLOT
      out.append((self.va_addr + slot * self.SLOT, ctypes.c_uint64.from_address(cpu).value, ctypes.c_uint64.from_address(cpu + 8).value))
    return out

class HCQSignal:
  """`HCQSignal(dev, value=0)` takes a slot from dev.signal_pool. `va_addr` is what commands reference,
  `cpu_addr` what the host reads (the same on the CPU device)."""
  def __init__(self, dev: Any, value: int = 0) -> None:
    self.dev, self._slot = dev, dev.signal_pool.take()
    pool: SignalPool = dev.signal_pool
    self.cpu_addr = pool.cpu_addr + self._slot * SignalPool.SLOT
    self.va_addr = pool.va_addr + self._slot * SignalPool.SLOT
    self.timestamp_va_addr = self.va_addr + 8
    self._v, self._ts = ctypes.c_uint64.from_address(self.cpu_addr), ctypes.c_uint64.from_address(self.cpu_addr + 8)
    self._ts.value = 0
    self.value = value

  @property
  def value(self) -> int: return self._v.value
  @value.setter
  def value(self, v: int) -> None:
    self._v.value = v
    self.dev._signal_written()  # the device side may sleep on signal memory: wake it

  @property
  def timestamp(self) -> int:
    """The last timestamp a queue wrote here, in device ticks."""
    return self._ts.value
  def timestamp_us(self) -> float: return self._ts.value / self.dev.ticks_per_us

  def wait(self, value: int, timeout_ms: int | None = None) -> None:
    """Block until value >= `value`; HCQTimeout after timeout_ms (default: the device's)."""
    t = self.dev.default_timeout_ms if timeout_ms is None else timeout_ms
    if self._v.value >= value: return
    if profile.ON: profile.instant("host wait", "hcq", device=self.dev.device, signal=hex(self.va_addr), value=value, now=self._v.value)
    # the hang watchdog: after HANG_WARN_MS without the value, say what blocks while still waiting out the timeout
    warn = knobs.get("HANG_WARN_MS")
    if 0 < warn < t:
      if self.dev._wait_signal(self, value, warn / 1000.0, final=False): return
      sys.stderr.write(hang_report(self, value, warn, t) + "\n")
      t -= warn
    if not self.dev._wait_signal(self, value, t / 1000.0):
      peers = self.dev.peer_state() if hasattr(self.dev, "peer_state") else ""
      raise HCQTimeout(f"{self.dev.device}: timed out after {t} ms waiting for signal {self.va_addr:#x} >= {value} "
                       f"(it is {self.value})\n{self.dev.queue_state()}" + (f"\n{peers}" if peers else ""))

  def __del__(self) -> None:
    try: self.dev.signal_pool.give(self._slot)
    except Exception: pass

  def __repr__(self) -> str: return f"<HCQSignal {self.va_addr:#x} value={self.value}>"
