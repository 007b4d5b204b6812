"""Index bounds checks without a sync per op. An op that indexes with a tensor (gather, embedding, fancy indexing,
scatter, one_hot, class targets) registers a check on a node of its graph: a scalar `payload` that is the largest
offending index, or NO_ERROR when every index is in range. Whenever a schedule computes that node, it computes the
payload too (one small reduction kernel) into a flag: a slot of a per-device flag page, in memory the host reads
directly where the device has such memory (HCQ devices: the memory signals live in). The runtime reads the flags of
a device at its next synchronization point (a host read: numpy/item/tolist) and raises there. BOUNDS=0 turns the
checks off (tensor/bounds.py)."""
from __future__ import annotations
import ctypes, weakref
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import UOp
from baregrad.hal import Device, Buffer

NO_ERROR = -2 ** 63
SLOTS = 4096  # flags per device between two reads

class IndexOutOfBounds(IndexError, RuntimeError):
  """An index tensor had an element out of range. An IndexError, and a RuntimeError where PyTorch raises that
  (gather, scatter, one_hot)."""

# id(checked node) -> (weak ref to it, [(payload, message with an {index} field)]); looked up for every node a schedule
# walks, so a plain dict by id (the weak ref's callback drops the entry with the node)
registry: dict[int, tuple[weakref.ref, list[tuple[UOp, str]]]] = {}
# device -> flags written (or to be written) by submitted kernels and not read yet: (flag, message)
pending: dict[str, list[tuple[Buffer, str]]] = {}

class _FlagPage:
  """SLOTS int64 flags of one device; a slot is free again once the host has read it."""
  def __init__(self, device: str):
    self.dev = dev = Device[device]
    self.device, self.free = device, list(range(SLOTS - 1, -1, -1))
    # memory both sides see (an HCQ device's signal memory): read without a copy through the queues
    self.mem = dev._alloc_shared(8 * SLOTS) if hasattr(dev, "_alloc_shared") else None
    self.slot_of: dict[int, int] = {}
  def take(self) -> Buffer:
    if not self.free: check(self.device)  # every slot holds an unread flag: read them now
    k = self.free.pop()
    if self.mem is not None and self.mem.cpu_addr is not None:
      b = Buffer(self.device, 1, dtypes.int64).allocate(opaque=self.mem.offset(8 * k, 8))
    else: b = Buffer(self.device, 1, dtypes.int64).allocate()
    self.slot_of[id(b)] = k
    return b
  def read(self, b: Buffer) -> int:
    self.free.append(self.slot_of.pop(id(b)))
    addr = getattr(b._buf, "cpu_addr", None)
    if addr is not None and self.mem is not None: return ctypes.c_int64.from_address(addr).value
    return int.from_bytes(b.as_memoryview(), "little", signed=True)

_pages: dict[str, _FlagPage] = {}

def new_flag(device: str) -> Buffer:
  """A flag buffer for a check kernel about to be submitted (read, and recycled, by the next check())."""
  d = Device.canonicalize(device)
  if (p := _pages.get(d)) is None or p.dev is not Device[d]: _pages[d] = p = _FlagPage(d)  # (a reopened device: a new page)
  return p.take()

def add(node: UOp, payload: UOp, message: str) -> None:
  if (e := registry.get(id(node))) is None or e[0]() is not node:
    registry[id(node)] = e = (weakref.ref(node, lambda _, k=id(node): registry.pop(k, None)), [])  # type: ignore[misc]  # (k binds the key)
  e[1].append((payload, message))

def found(nodes: list[UOp]) -> list[tuple[UOp, UOp, str]]:
  """(checked node, payload, message) for every check registered on one of nodes."""
  return [(n, p, m) for n in nodes if (e := registry.get(id(n))) is not None and e[0]() is n for p, m in e[1]]

def submitted(flag: Buffer, message: str, node: UOp | None = None) -> None:
  """A kernel computing a check into `flag` was submitted: read it at the next sync. `node` is checked now."""
  if node is not None: registry.pop(id(node), None)
  pending.setdefault(flag.device, []).append((flag, message))

def check(device: str) -> None:
  """Raise IndexOutOfBounds if a check submitted on `device` since the last call found an index out of range. Waits
  for the device (callers are at a synchronization point already)."""
  flags = pending.pop(Device.canonicalize(device), None)
  if not flags: return
  Device[device].synchronize()
  page = _pages[Device.canonicalize(device)]
  bad = [(v, msg) for flag, msg in flags if (v := page.read(flag)) != NO_ERROR]
  if bad: raise IndexOutOfBounds(bad[0][1].format(index=bad[0][0]))
