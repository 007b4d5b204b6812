"""The live tensors, indexed by what they read (docs/value_semantics.md): before a buffer is overwritten in place, the
tensors still alive that read it are computed. A tensor that names a whole buffer is filed under that buffer's
storage, so finding the readers of a storage costs its readers, not every tensor alive; the others (graphs, views of
part of a buffer) are few at any time, and are walked.

Entries are id -> weakref.ref(tensor) in plain dicts (filing a tensor is on the path of every op: a plain weak ref is
the cheapest kind); dead entries are dropped when met, and swept when a table has doubled since its last sweep."""
from __future__ import annotations
import weakref
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
  def sweep(self) -> None:
    self.refs = {k: r for k, r in self.refs.items() if r() is not None}
    self.swept = max(64, len(self.refs))
  def members(self) -> list:
    out = []
    for k, r in list(self.refs.items()):
      if (t := r()) is None or id(t) != k: self.refs.pop(k, None)
      else: out.append(t)
    return out

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
    if (s := st.viewers) is None:
      st.viewers = s = _Table()
      _storages.add(st)
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
