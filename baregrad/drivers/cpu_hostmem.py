"""Host memory for the CPU device: page-aligned zeroed anonymous mappings (with transparent huge pages for large ones),
taken straight from libc so an address is a plain integer the queues and kernels can use."""
from __future__ import annotations
import ctypes, mmap, os
from baregrad.drivers.vmem import round_up

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype, _libc.mmap.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.restype, _libc.munmap.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t]
PAGE = mmap.PAGESIZE
_MAP_FAILED = ctypes.c_void_p(-1).value

def _phys_bytes() -> int:
  try: return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
  except (ValueError, OSError): return 1 << 62

def available_bytes() -> int | None:
  """Memory the kernel could still give this process (MemAvailable of /proc/meminfo), or None where it cannot tell."""
  try:
    with open("/proc/meminfo", "rb") as f:
      for line in f:
        if line.startswith(b"MemAvailable:"): return int(line.split()[1]) * 1024
  except (OSError, ValueError, IndexError): pass
  return None

def host_map(size: int) -> int:
  """Page-aligned zeroed anonymous memory; OSError(ENOMEM) if the kernel refuses."""
  addr = _libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
  if addr in (None, _MAP_FAILED):
    e = ctypes.get_errno()
    raise OSError(e, f"mmap of {size} bytes failed: {os.strerror(e)}")
  return addr

def host_unmap(addr: int, size: int) -> None:
  if _libc.munmap(addr, size) != 0: raise OSError(ctypes.get_errno(), f"munmap({addr:#x}, {size}) failed")

HUGE, MADV_HUGEPAGE = 2 << 20, 14   # x86-64 and arm64 transparent huge pages; madvise(2)
_libc.madvise.restype, _libc.madvise.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

def host_map_huge(size: int) -> int:
  """Like host_map, 2 MiB aligned and marked for transparent huge pages (where the kernel's THP mode is madvise, as
  NumPy does for its large arrays): a matmul walking rows of a large matrix then misses the TLB once per 2 MiB, not
  once per 4 KiB page. `size` must be a multiple of HUGE; free with host_unmap(addr, size)."""
  raw = host_map(size + HUGE)
  addr = round_up(raw, HUGE)
  if addr > raw: host_unmap(raw, addr - raw)
  if (tail := raw + size + HUGE - (addr + size)) > 0: host_unmap(addr + size, tail)
  _libc.madvise(addr, size, MADV_HUGEPAGE)  # advice only: an error (THP off) leaves ordinary pages
  return addr

def sig_addr(c: ctypes.c_uint64) -> int: return ctypes.addressof(c)

def _pages(size: int) -> int:
  if size >= HUGE: return round_up(size, HUGE)
  return max(PAGE, round_up(size, PAGE))

