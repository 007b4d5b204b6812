"""What both mock GPUs share: host memory through libc (mmap/munmap of memfds), the memfd-backed memory object (its
pages are the object's "physical" memory, mapped by the driver and seen by the mock alike), round-up, and the fault
types their GPU engines raise on an unmapped virtual address (each with the fields its vendor's fault report names)."""
from __future__ import annotations
import ctypes, os, time, weakref
from typing import Any

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype, libc.mmap.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                                          ctypes.c_int, ctypes.c_long]
libc.munmap.restype, libc.munmap.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value
# the Linux constants and round-up are the drivers' own (drivers/vmem.py): the mock sees the same numbers
from baregrad.drivers.vmem import PROT_RW, MAP_SHARED, MAP_FIXED, PAGE, round_up as rup  # noqa: F401  (re-exported)

def host_mmap(addr: int, size: int, prot: int, flags: int, fd: int, off: int) -> int:
  """libc mmap; OSError naming the call when it fails."""
  r = libc.mmap(addr or None, size, prot, flags, fd, off)
  if r in (None, _MAP_FAILED):
    e = ctypes.get_errno()
    raise OSError(e, f"mmap({addr:#x}, {size:#x}, fd={fd}) failed: {os.strerror(e)}")
  return r

def host_munmap(addr: int, length: int) -> None:
  """libc munmap; OSError naming the call when it fails."""
  if libc.munmap(addr, length) != 0:
    e = ctypes.get_errno()
    raise OSError(e, f"munmap({addr:#x}, {length:#x}) failed: {os.strerror(e)}")

class MemFD:
  """A memory object: a memfd (its pages are the object's "physical" memory) and the mock's own mapping of it."""
  def __init__(self, size: int, kind: str) -> None:
    self.size, self.kind, self.gpu = size, kind, 0
    self.fd = os.memfd_create(f"mockgpu-{kind}", os.MFD_CLOEXEC)
    os.ftruncate(self.fd, max(size, PAGE))
    self.view = host_mmap(0, max(size, PAGE), PROT_RW, MAP_SHARED, self.fd, 0)
  def release(self) -> None:
    """Unmap the mock's view and close the memfd (the driver's own mappings keep the pages until unmapped)."""
    if self.fd >= 0:
      libc.munmap(self.view, max(self.size, PAGE))
      os.close(self.fd)
      self.fd = -1

def user_range_mapped(addr: int, size: int) -> bool:
  """Whether [addr, addr+size) lies in this process's mappings (/proc/self/maps), as the kernel's get_user_pages (what
  pins user memory for a GPU) needs."""
  try:
    with open("/proc/self/maps") as f: spans = [tuple(int(x, 16) for x in line.split()[0].split("-")) for line in f]
  except OSError: return True
  spans.sort()
  cur = addr
  for lo, hi in spans:
    if lo <= cur < hi: cur = hi
    if cur >= addr + size: return True
  return cur >= addr + size

class UserPages:
  """A memory object over the process's own pages (what the kernel pins for an OS-descriptor allocation): the mock's
  view is the user's address itself; `kind` "sys" like RM-allocated system memory."""
  def __init__(self, addr: int, size: int) -> None:
    self.view, self.size, self.kind, self.gpu, self.fd = addr, size, "sys", 0, -1
  def release(self) -> None:
    """Nothing to unmap: the pages are the process's."""

class MMUFault(ValueError):
  """NV: a GPU access to an unmapped virtual address (`address`: the first one; `access`: the MMU's access type)."""
  def __init__(self, address: int, msg: str, access: str = "ACCESS_TYPE_VIRT_READ") -> None:
    super().__init__(msg or f"MMU fault at {address:#x}")
    self.address, self.access = address, access

class GPUFaultErr(Exception):
  """AMD: a GPU access to an address the page tables do not map (becomes a VM fault naming the client and direction)."""
  def __init__(self, va: int, write: bool, client: str, why: str = "") -> None:
    super().__init__(why or f"{client} {'write' if write else 'read'} of unmapped VA {va:#x}")
    self.va, self.write, self.client = va, write, client

# The GPUs of one machine: every mock GPU made in this process (the driver opens each GPU through a mock of its own).
# Real GPUs run on their own while the host waits on one of them; a mock runs only when its doorbell is rung. So a
# doorbell runs the queues of every mock of the machine until none makes progress: a queue of one GPU may wait on a
# signal a queue of another GPU writes (a peer copy's staging handshake, the other device's timeline).
MACHINE: "weakref.WeakSet[Any]" = weakref.WeakSet()

MACHINE_SLICE_S = 0.5   # how long one doorbell runs the machine at most (the rest runs at the next doorbell or kick)

def run_machine(me: Any) -> None:
  """Run `me`'s queues (its lock held by the caller) and every other mock GPU's (`_run_all() -> bool` each, under its
  own lock) until none makes progress or MACHINE_SLICE_S passed (a long kernel returns the host its thread, as a
  mock's own time slice does). A mock whose lock another thread holds is skipped: that thread is running it."""
  progress, end = True, time.perf_counter() + MACHINE_SLICE_S
  while progress and time.perf_counter() < end:
    progress = bool(me._run_all())
    for m in list(MACHINE):
      if m is me or not m._lock.acquire(blocking=False): continue
      try: progress |= bool(m._run_all())
      finally: m._lock.release()
