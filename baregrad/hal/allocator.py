"""Allocators: the raw device allocation interface and a free-list cache on top."""
from __future__ import annotations
import threading
from collections import defaultdict
from typing import Any, Hashable
from baregrad.hal.errors import OutOfMemory

class Allocator:
  """Device memory. Subclasses implement _alloc/_free/_copyin/_copyout (and _offset for views).

  `alloc`/`free` keep `mem_used` (bytes handed out and not yet freed) so tests can check leaks."""
  def __init__(self, device: str = "?") -> None:
    self.device, self.mem_used, self.peak_used = device, 0, 0
    # threads: the counters and the free lists change under it (`+=` on an attribute is a read and a write another
    # thread can come between). Reentrant: the collector may free a Buffer on a thread that holds it
    self.lock = threading.RLock()

  def alloc(self, size: int, options: Hashable | None = None) -> Any:
    if not isinstance(size, int) or size < 0: raise ValueError(f"{self.device}: allocation size must be an int >= 0, got {size!r}")
    buf = self._alloc(size, options)
    with self.lock:
      self.mem_used += size
      self.peak_used = max(self.peak_used, self.mem_used)
    return buf

  def free(self, opaque: Any, size: int, options: Hashable | None = None) -> None:
    with self.lock: self.mem_used -= size
    self._free(opaque, size, options)

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
    self.cache: dict[tuple[int, Hashable | None], list[Any]] = defaultdict(list)
    self.mem_cached = 0

  def alloc(self, size: int, options: Hashable | None = None) -> Any:
    if self.cache.get((size, options)):
      with self.lock:
        if (c := self.cache.get((size, options))):   # (another thread may have taken the last one meanwhile)
          self.mem_cached -= size
          self.mem_used += size
          if self.mem_used > self.peak_used: self.peak_used = self.mem_used
          return c.pop()
    try: return super().alloc(size, options)
    except OutOfMemory:
      if self.mem_cached == 0: raise
      self.free_cache()  # the cache may hold the memory we need: give it back and try once more
      return super().alloc(size, options)

  def free(self, opaque: Any, size: int, options: Hashable | None = None) -> None:
    with self.lock:
      self.mem_used -= size
      self.cache[(size, options)].append(opaque)
      self.mem_cached += size

  def free_cache(self) -> None:
    with self.lock:
      cache, self.cache, self.mem_cached = self.cache, defaultdict(list), 0
    for (size, options), bufs in cache.items():
      for b in bufs: self._free(b, size, options)
