"""CPU device on the HCQ core: two hardware queues (compute, copy), each a worker thread that reads
encoded command buffers from memory, so ordering, signals, the timeline and patching run for real.

Kernel ABI: void NAME(const uint64_t *args, int64_t start, int64_t end); args = buffer addresses,
then int64 variable values; the kernel covers [start, end) of global_size[0].

The device is assembled from: host memory (cpu_hostmem.py), the command words and queues (cpu_encoding.py), the queue
engine and thread pool that run them (cpu_engine.py, native pool cpu_pool.py, native chains cpu_chain.py), programs
(cpu_program.py) and the toolchain per variant (cpu_compile.py)."""
from __future__ import annotations
import ctypes, errno, os, threading, time
from typing import Any, Hashable
from baregrad import knobs
from baregrad.helpers import c_array
from baregrad.hal import Device, OutOfMemory, profile
from baregrad.hcq import HCQBuffer, HCQDevice, HCQAllocator, HCQSignal
from baregrad.drivers.cpu_hostmem import HUGE, available_bytes, host_map, host_map_huge, host_unmap, _pages, _phys_bytes
from baregrad.drivers.cpu_encoding import CPUComputeQueue, CPUCopyQueue
from baregrad.drivers.cpu_engine import QueueEngine
from baregrad.drivers.cpu_program import CPUProgram
from baregrad.drivers.cpu_compile import toolchain

class CPUAllocator(HCQAllocator):
  def _alloc(self, size: int, options: Hashable | None) -> HCQBuffer:
    if size > _phys_bytes():
      raise OutOfMemory(self.device, size, self.mem_used, f"the machine has {_phys_bytes()} bytes of physical memory")
    try: addr = host_map_huge(_pages(size)) if size >= HUGE else host_map(_pages(size))
    except OSError as e:
      if e.errno != errno.ENOMEM: raise
      raise OutOfMemory(self.device, size, self.mem_used, f"mmap: {e.strerror}") from None
    return HCQBuffer(addr, size, addr)
  def available(self) -> int | None:
    """Bytes new allocations could still take: the machine's available memory and this allocator's cache."""
    a = available_bytes()
    return None if a is None else a + getattr(self, "mem_cached", 0)
  def _free(self, opaque: HCQBuffer, size: int, options: Hashable | None) -> None:
    self.dev.synchronize()  # a queued kernel or copy may still touch it (no-op once the device is closed)
    host_unmap(opaque.va_addr, _pages(size))
  # Device memory is host memory: while nothing is queued or running on the device (its timeline has reached the last
  # value submitted), a copy is a memmove here, not a copy command through a staging buffer and a wait on its signal
  # (a 400 KB batch took ~370 us that way, most of it thread handoffs). With work in flight the copy queue orders it.
  # PROFILE=1 keeps the copy commands (their timestamps are the trace's copy events).
  def _idle(self) -> bool:
    dev = self.dev
    return not profile.ON and dev.timeline_signal.value >= dev.timeline_value - 1
  def _copyin(self, dest: HCQBuffer, src: memoryview) -> None:
    with self._copy_lock:
      if self._idle():
        ctypes.memmove(dest.va_addr, c_array(ctypes.c_char, src.nbytes).from_buffer_copy(src) if src.readonly else
                       c_array(ctypes.c_char, src.nbytes).from_buffer(src), src.nbytes)
        return
      self._copyin_locked(dest, src)
  def _copyout(self, dest: memoryview, src: HCQBuffer) -> None:
    with self._copy_lock:
      if dest.nbytes <= self.DIRECT_READ and self._idle():
        if dest.nbytes: ctypes.memmove(c_array(ctypes.c_char, dest.nbytes).from_buffer(dest), src.va_addr, dest.nbytes)
        return
      self._copyout_locked(dest, src)
  DIRECT_READ = 1 << 20   # bytes; larger reads go through the copy queue (staged, overlapped)

class CPUDevice(HCQDevice):
  has_local, has_threads, max_local_size, max_shared_mem = False, True, (1, 1, 1), 0
  ticks_per_us = 1000.0  # timestamps are perf_counter_ns
  ring_bytes = 1 << 20   # command ring per queue
  live: list[CPUDevice] = []   # the open CPU devices (each one's signal writes wake the others' sleepers)

  def __init__(self, device: str) -> None:
    self.variant = Device.variant(device) or "LLVM"
    renderer, compiler = toolchain(self.variant)
    self.threads = knobs.read("CPU_THREADS") or os.cpu_count() or 1
    self.sig_cv = threading.Condition()
    self.sig_sleepers = 0  # threads waiting on sig_cv (see _signal_written)
    self.closed = False
    self.engines: dict[str, QueueEngine] = {}
    self._shared: list[tuple[int, int]] = []
    self._zombies: list[Any] = []  # images of programs freed on a device thread, closed at the next synchronize
    # (the threads a parallel axis is split over: long reductions with few outputs are split into that many partials
    # and more, codegen/gridreduce.py)
    if renderer is not None: renderer.compute_units = self.threads
    super().__init__(device, None, renderer, compiler, CPUProgram, CPUComputeQueue, CPUCopyQueue)
    self.allocator = CPUAllocator(self)
    self.engines = {n: QueueEngine(self, n, self.ring_bytes) for n in ("compute", "copy")}
    CPUDevice.live.append(self)

  def _alloc_shared(self, size: int) -> HCQBuffer:
    addr = host_map(_pages(size))
    self._shared.append((addr, _pages(size)))
    return HCQBuffer(addr, size, addr)

  def _signal_written(self) -> None:
    # nobody asleep on signal memory (the common case: an inline launch whose host waits spin first): no lock to take.
    # A sleeper counts itself under the lock before it reads the value; a writer stores the value before it reads the
    # count (both under the GIL, in order): either the writer sees the sleeper, or the sleeper sees the new value.
    # Every CPU device's sleepers: a queue of one may wait on another's signal (a peer copy, hcq/peer.py)
    for d in CPUDevice.live:
      if d.sig_sleepers:
        with d.sig_cv: d.sig_cv.notify_all()

  # CPU devices' memory is all host memory: another CPU device's queues write it directly, and its signals need no mapping
  def peer_direct(self, src: HCQDevice) -> bool: return True
  def _import_host(self, buf: HCQBuffer) -> Any: return None
  def _unimport(self, m: Any) -> None: pass

  def _check_fault(self) -> None:
    for e in self.engines.values():
      if e.fault: raise RuntimeError(f"{self.device}: {e.name} queue faulted: {e.fault}\n{self.queue_state()}")

  # native code that is running is not stuck: a host wait outlives the timeout while a queue is inside a kernel or a
  # chain (a 1B model's prompt on two cores is one chain of many seconds), up to this bound (a kernel that never ends)
  RUNNING_BOUND_S = 3600.0
  def _executing(self) -> bool:
    return any(isinstance(e.state, tuple) for e in self.engines.values())

  def _wait_signal(self, sig: HCQSignal, value: int, timeout_s: float, final: bool = True) -> bool:
    start = time.perf_counter()
    deadline = start + timeout_s
    for _ in range(50):  # short kernels finish within a few µs: spin before sleeping on the condition
      if sig._v.value >= value: return True
    with self.sig_cv:
      self.sig_sleepers += 1
      try:
        while sig._v.value < value:
          self._check_fault()
          now = time.perf_counter()
          left = deadline - now
          if left <= 0:
            # the timeout (and the hang watchdog's window) counts time the queues are blocked or idle, not running
            if self._executing() and now - start < self.RUNNING_BOUND_S: deadline = now + min(timeout_s, 0.05)
            else: return False
          self.sig_cv.wait(min(max(deadline - now, 1e-4), 0.05))
      finally: self.sig_sleepers -= 1
    return True

  def queue_state(self) -> str:
    return (f"{self.device}: timeline {self.timeline_signal.va_addr:#x} value {self.timeline_signal.value}, last submitted "
            f"{self.timeline_value - 1}\n" + "\n".join(e.describe() for e in self.engines.values()))

  def synchronize(self, timeout_ms: int | None = None) -> None:
    if self.closed: return  # nothing runs on a closed device
    super().synchronize(timeout_ms)
    while self._zombies: self._zombies.pop().close()

  def close(self) -> None:
    """Drain (briefly), stop the queue workers and give back their rings and the allocator's cache.
    Signal and kernel-args memory stays mapped: Python objects may still read it. Exiting without
    close never hangs: the workers are daemon threads."""
    if self.closed: return
    try: self.synchronize(timeout_ms=1000)
    except Exception: pass  # a stuck queue is not drained; close anyway
    self.closed = True
    if self in CPUDevice.live: CPUDevice.live.remove(self)
    for e in self.engines.values(): e.stop()
    for e in self.engines.values():
      e.thread.join(timeout=1.0)
      if not e.thread.is_alive(): e.unmap()
    self.allocator.free_cache()
    Device.forget(self.device, self)
