"""Allocators: the raw device allocation interface and a free-list cache on top."""
from __future__ import annotations
import threading
from typing import Any, Hashable
from baregrad.hal.errors import OutOfMemory

class Allocator:
  """Device memory. Subclasses implement _alloc/_free/_copyin/_copyout (and _offset for views).

  `alloc`/`free` keep `mem_used` (bytes handed out and not yet freed) so tests can check leaks."""
  def __init__(self, device: str = "?") -> None:
    self.device, self.mem_used, self.peak_used = device, 0, 0
    # threads: the counters and the free lists change under it (`+=` on an attribute is a read and a write another
    # thread can come between). A plain lock taken by acquire/release (a third of `with RLock`'s cost, on the path of
    # every eager op): the regions it guards make no object the collector tracks, so no collection, and no Buffer
    # finalizer freeing into this allocator, can start on a thread that holds it
    self.lock = threading.Lock()

  def alloc(self, size: int, options: Hashable | None = None) -> Any:
    if not isinstance(size, int) or size < 0: raise ValueError(f"{self.device}: allocation size must be an int >= 0, got {size!r}")
    buf = self._alloc(size, options)
    self.lock.acquire()
    self.mem_used += size
    if self.mem_used > self.peak_used: self.peak_used = self.mem_used
    self.lock.release()
    return buf

  def free(self, opaque: Any, size: int, options: Hashable | None = None) -> None:
    self.lock.acquire()
    self.mem_used -= size
    self.lock.release()
    self._free(opaque, size, options)

  def available(self) -> int | None:
    """Bytes new allocations could still take, where the device can tell (None: unknown)."""
    return None

  # --- what a device implements
  def _alloc(self, size: int, options: Hashable | None) -> Any: raise NotImplementedError(f"{type(self).__name__} cannot allocate")
  def _free(self, opaque: Any, size: int, options: Hashable | None) -> None: pass
  def _copyin(self, dest: Any, src: memoryview) -> None: raise NotImplementedError(f"{type(self).__name__} cannot copy in")
  def _copyout(self, dest: memoryview, src: Any) -> None: raise NotImplementedError(f"{type(self).__name__} cannot copy out")
  def _offset(self, opaque: Any, offset: int, size: int) -> Any:
    raise NotImplementedError(f"{type(self).__name__} does not support views (sub-buffers)")

class LRUAllocator(Allocator):
  """Keeps freed allocations in a cache keyed by (size, options) and hands them out again.

  Device allocations are slow (syscalls, page faults); a model allocates the same sizes every step."""
  def __init__(self, device: str = "?") -> None:
    super().__init__(device)
    self.cache: dict[tuple[int, Hashable | None], list[Any]] = {}
    self.mem_cached = 0

  def alloc(self, size: int, options: Hashable | None = None) -> Any:
    if self.cache.get(key := (size, options)):
      lock = self.lock
      lock.acquire()
      # (looked up again under the lock: another thread may have taken the last one, or free_cache emptied the cache)
      if (c := self.cache.get(key)):
        buf = c.pop()
        self.mem_cached -= size
        self.mem_used += size
        if self.mem_used > self.peak_used: self.peak_used = self.mem_used
        lock.release()
        return buf
      lock.release()
    try: return super().alloc(size, options)
    except OutOfMemory:
      if self.mem_cached == 0: raise
      self.free_cache()  # the cache may hold the memory we need: give it back and try once more
      return super().alloc(size, options)

  def free(self, opaque: Any, size: int, options: Hashable | None = None) -> None:
    key, lock = (size, options), self.lock
    while True:
      lock.acquire()
      if (c := self.cache.get(key)) is not None:
        c.append(opaque)
        self.mem_used -= size
        self.mem_cached += size
        lock.release()
        return
      lock.release()
      self.cache.setdefault(key, [])   # (the new list made outside the lock; then filed under it)

  def free_cache(self) -> None:
    """Give every cached allocation back to the device."""
    new: dict = {}
    self.lock.acquire()
    cache, self.cache, self.mem_cached = self.cache, new, 0
    self.lock.release()
    for (size, options), bufs in cache.items():
      for b in bufs: self._free(b, size, options)
