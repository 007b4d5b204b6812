"""Index bounds checks without a sync per op. An op that indexes with a tensor (gather, embedding, fancy indexing,
scatter, one_hot, class targets) registers a check on a node of its graph: a scalar `payload` that is the largest
offending index, or INT64_MIN when every index is in range. Whenever a schedule computes that node, it computes the
payload too (one small reduction kernel) into a flag buffer; the runtime reads the flags of a device at its next
synchronization point (a host read: numpy/item/tolist) and raises there. BOUNDS=0 turns the checks off."""
from __future__ import annotations
import weakref
from baregrad.hal import Device
from baregrad.ir.ops import UOp
from baregrad.engine.graph import BufRef

NO_ERROR = -2 ** 63

class IndexOutOfBounds(IndexError, RuntimeError):
  """An index tensor had an element out of range. An IndexError, and a RuntimeError where PyTorch raises that
  (gather, scatter, one_hot)."""

# checked node -> [(payload, message with an {index} field)]
registry: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# device -> flags computed and not read yet: (flag buffer, message)
pending: dict[str, list[tuple[BufRef, str]]] = {}

def add(node: UOp, payload: UOp, message: str) -> None:
  registry.setdefault(node, []).append((payload, message))

def found(nodes: list[UOp]) -> list[tuple[UOp, UOp, str]]:
  """(checked node, payload, message) for every check registered on one of nodes."""
  return [(n, p, m) for n in nodes if n in registry for p, m in registry[n]]

def ran(node: UOp, flag: BufRef, message: str) -> None:
  """A schedule computed `node` and its check into `flag`: read it at the next sync."""
  registry.pop(node, None)
  pending.setdefault(flag.device, []).append((flag, message))

def check(device: str) -> None:
  """Raise IndexOutOfBounds if a check computed on `device` since the last call found an index out of range. Waits
  for the device (callers are at a synchronization point already)."""
  flags = pending.pop(device, None)
  if not flags: return
  Device[device].synchronize()
  for ref, msg in flags:
    v = int.from_bytes(ref.ensure().as_memoryview(), "little", signed=True)
    if v != NO_ERROR: raise IndexOutOfBounds(msg.format(index=v))
