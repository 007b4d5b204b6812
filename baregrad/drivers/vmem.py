"""Virtual memory shared by the drivers: rounding (every driver), and for the GPU drivers (NV, AMD) the open/mmap flag
values they pass through the port, a first-fit allocator of address ranges, and the reservation of a host address
window for GPU-visible memory.

The flag values are Linux's (x86-64 and arm64 share them: include/uapi/asm-generic/mman-common.h, mman.h, fcntl.h);
they are spelled out rather than read from `mmap`/`os` because a mock port receives them as numbers and Python's
modules lack MAP_FIXED_NOREPLACE."""
from __future__ import annotations
import errno, os, threading
from typing import Any

O_RDWR, O_CLOEXEC = os.O_RDWR, getattr(os, "O_CLOEXEC", 0o2000000)
PROT_NONE, PROT_RW = 0, 3
MAP_SHARED, MAP_PRIVATE, MAP_FIXED, MAP_ANON, MAP_NORESERVE, MAP_FIXED_NOREPLACE = 0x01, 0x02, 0x10, 0x20, 0x4000, 0x100000
PAGE = 4096
RESERVE_FLAGS = MAP_PRIVATE | MAP_ANON | MAP_NORESERVE   # address space held with no memory behind it (PROT_NONE)

def round_up(x: int, align: int) -> int:
  """The least multiple of `align` that is >= x (align > 0, not necessarily a power of two)."""
  return (x + align - 1) // align * align

class VAAllocator:
  """First-fit allocator of virtual address ranges in [base, base + size)."""
  def __init__(self, base: int, size: int) -> None:
    self.free: list[tuple[int, int]] = [(base, size)]
    self.lock = threading.Lock()
  def alloc(self, size: int, align: int = PAGE) -> int:
    with self.lock:
      for i, (b, s) in enumerate(self.free):
        a = round_up(b, align)
        if a + size <= b + s:
          rest = [(b, a - b)] if a > b else []
          if a + size < b + s: rest.append((a + size, b + s - a - size))
          self.free[i:i + 1] = rest
          return a
    raise MemoryError(f"out of GPU virtual address space for {size:#x} bytes")
  def release(self, addr: int, size: int) -> None:
    with self.lock:
      self.free.append((addr, size))
      self.free.sort()
      merged: list[tuple[int, int]] = []
      for b, s in self.free:
        if merged and merged[-1][0] + merged[-1][1] == b: merged[-1] = (merged[-1][0], merged[-1][1] + s)
        else: merged.append((b, s))
      self.free = merged

def reserve_window(port: Any, first: int, size: int, limit: int) -> int | None:
  """Reserve `size` bytes of host address space (PROT_NONE, no memory) at the first of first, first + size, ... whose
  window ends at or below `limit` and that nothing in the process occupies yet; the base, or None when none is free.
  MAP_FIXED_NOREPLACE fails with EEXIST where a mapping already lives (another device, the heap); a kernel older than
  4.17 takes the flag as a hint and maps elsewhere, which is undone and the next window tried."""
  base = first
  while base + size <= limit:
    try: r = port.mmap(base, size, PROT_NONE, RESERVE_FLAGS | MAP_FIXED_NOREPLACE, -1, 0)
    except OSError as e:
      if e.errno != errno.EEXIST: raise
      base += size
      continue
    if r == base: return base
    port.munmap(r, size)
    base += size
  return None

def release_to_window(port: Any, addr: int, size: int) -> None:
  """Give a mapping inside a reserved window back to the reservation (unmapped, then reserved again in place)."""
  port.munmap(addr, size)
  port.mmap(addr, size, PROT_NONE, RESERVE_FLAGS | MAP_FIXED, -1, 0)
