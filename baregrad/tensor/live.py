"""The live tensors, indexed by what they read (docs/value_semantics.md): before a buffer is overwritten in place, the
tensors still alive that read it are computed. A tensor that names a whole buffer is filed under that buffer's
storage, so finding the readers of a storage costs its readers, not every tensor alive; the others (graphs, views of
part of a buffer) are few at any time, and are walked.

Entries are id -> weakref.ref(tensor) in plain dicts (filing a tensor is on the path of every op: a plain weak ref is
the cheapest kind); dead entries are dropped when met, and swept when a table has doubled since its last sweep.

Threads: filing and dropping an entry are one dict store or pop each (atomic under the GIL, no lock on the path of
every op); walks and sweeps hold _lock, go over a copy (dict.copy is one C call) and change the table in place, putting
back an entry a concurrent add stored between their look and their pop: a tensor filed while another thread sweeps is
never lost (an in-place write would then not compute it first)."""
from __future__ import annotations
import threading, weakref
from typing import Any
from baregrad.ir.ops import UOp, Ops

class _Table:
  """A weak set of tensors by identity (a WeakSet would compare tensors with ==, which is elementwise)."""
  __slots__ = ("refs", "swept")
  def __init__(self) -> None: self.refs, self.swept = {}, 64
  def add(self, t: Any) -> None:
    self.refs[id(t)] = weakref.ref(t)
    if len(self.refs) > 2 * self.swept: self.sweep()
  def discard(self, t: Any) -> None: self.refs.pop(id(t), None)
  def _drop(self, k: int, r: weakref.ref) -> None:
    # remove k's entry if it is still r (dead): an add between the look and the pop stored a live one, put back
    if self.refs.get(k) is r and (v := self.refs.pop(k, None)) is not None and v is not r: self.refs.setdefault(k, v)
  def sweep(self) -> None:
    with _lock:
      for k, r in self.refs.copy().items():
        if r() is None: self._drop(k, r)
      self.swept = max(64, len(self.refs))
  def members(self) -> list:
    out = []
    with _lock:
      for k, r in self.refs.copy().items():
        if (t := r()) is None or id(t) != k: self._drop(k, r)
        else: out.append(t)
    return out

_lock = threading.RLock()

graphs = _Table()     # tensors whose value may still be a graph
_storages = _Table()  # storages with a table of tensors naming them whole (Storage.viewers), for all_tensors()

def whole_buffer(u: UOp) -> Any:
  """The BufRef u names whole (a BUFFER or a reshape of one), else None."""
  if u.op is Ops.BUFFER: return u.arg
  if u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER: return u.src[0].arg
  return None

def track(t: Any) -> None:
  """File t by what its uop reads (at creation, and after its uop names another storage)."""
  if (ref := whole_buffer(t.uop)) is None: graphs.add(t)
  else:
    st = ref.storage
    if (s := st.viewers) is None:   # (every new result's storage: acquire/release, half of a `with`'s cost)
      new, filed = _Table(), False   # (made outside the lock)
      _lock.acquire()
      try:   # two threads filing the first tensors of one storage make one table
        if (s := st.viewers) is None: st.viewers = s = new; filed = True
      finally: _lock.release()
      if filed: _storages.add(st)
    s.add(t)

def viewers(storage: Any) -> list:
  """The live tensors naming `storage` whole (any version)."""
  s = storage.viewers
  if s is None: return []
  out = []
  for t in s.members():
    ref = whole_buffer(t.uop)
    if ref is not None and ref.storage is storage: out.append(t)
    else:  # it names something else now: file it again
      s.discard(t)
      track(t)
  return out

def lazy() -> list:
  """The live tensors that are graphs, or views of part of a buffer. Those that became whole buffers move out."""
  out = []
  for t in graphs.members():
    if whole_buffer(t.uop) is None: out.append(t)
    else:
      graphs.discard(t)
      track(t)
  return out

def all_tensors() -> weakref.WeakValueDictionary:
  """Every live tensor, by id."""
  out = weakref.WeakValueDictionary({id(t): t for t in graphs.members()})
  for st in _storages.members(): out.update({id(t): t for t in st.viewers.members()})
  return out
