"""Realizing tensor graphs: which nodes already have buffers, and turning targets into buffers."""
from __future__ import annotations
import weakref
from baregrad.ir.ops import UOp, Ops
from baregrad.engine.graph import BufRef, buffer_uop, shape_of, base_of, _shapes
from baregrad.engine.schedule import create_schedule, ScheduleItem
from baregrad.engine.realize import run_schedule
from baregrad.engine import checks
from baregrad.hal import profile

# computed node -> the node that reads its buffer (RESHAPE(BUFFER)); weak so dead graphs free their buffers. Keys are
# graphs over buffer versions, so a hit is the same expression over the same versions; an entry whose buffer was
# overwritten since is ignored (docs/value_semantics.md)
realized_map: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

def buffer_view(ref: BufRef, shape: tuple[int, ...]) -> UOp:
  b = buffer_uop(ref)
  if shape == (ref.size,): return b
  u = UOp(Ops.RESHAPE, ref.dtype, (b,), tuple(shape))
  _shapes[u] = tuple(shape)  # known: no need to walk the view machinery for it
  return u

# results in storages older than this are not reused (the jit sets it while capturing: a recording must compute what
# its replays will need, not name a buffer an earlier call happened to leave)
reuse_from_id = 0

def realized(u: UOp) -> UOp | None:
  """The buffer view holding u's value, if it was computed and that buffer still holds it."""
  v = realized_map.get(u)
  if v is None: return None
  ref = base_of(v).arg
  if ref.stale:
    del realized_map[u]
    return None
  return v if ref.storage.id >= reuse_from_id else None

def substitute_realized(u: UOp) -> UOp:
  """u with every already-computed subgraph replaced by a read of its buffer."""
  if not realized_map: return u
  if (v := realized(u)) is not None: return v
  hits = {n: v for n in u.toposort() if n in realized_map and (v := realized(n)) is not None}
  return u.substitute(hits) if hits else u

def _substitute_all(uops: list[UOp]) -> list[UOp]:
  """substitute_realized of each, with one walk over the graphs they share."""
  if not realized_map: return list(uops)
  hits: dict[UOp, UOp] = {}
  seen: set[UOp] = set()
  for u in uops:
    stack = [u]
    while stack:  # stop at computed nodes: nothing below them is read
      n = stack.pop()
      if n in seen: continue
      seen.add(n)
      if n in realized_map and (v := realized(n)) is not None: hits[n] = v
      else: stack.extend(n.src)
  return [u.substitute(hits) for u in uops] if hits else list(uops)

def schedule_for(uops: list[UOp], device: str) -> tuple[list[ScheduleItem], list[UOp], dict]:
  srcs = _substitute_all(uops)
  with profile.span("schedule", device=device): items, realized_ = create_schedule(srcs, device)
  return items, srcs, realized_

def realize(uops: list[UOp], device: str) -> list[UOp]:
  """Compute uops (on `device` where a graph reads no buffer); returns, for each, a node reading its buffer."""
  items, srcs, realized_ = schedule_for(uops, device)
  keep = {realized_[s].id for s in srcs if s in realized_}
  for it in items:  # a bounds check writes a flag the host reads at the next sync (engine/checks.py)
    if it.check is not None: it.bufs[0].buf = checks.new_flag(it.bufs[0].device)
  try: run_schedule(items, keep)
  finally:
    # what ran has written its versions: they are current now
    for it in items:
      if it.srcnode is not None and it.srcnode.op is Ops.ASSIGN: it.bufs[0].commit()
  for it in items:
    if it.check is not None: checks.submitted(it.bufs[0].buf, it.check[1], it.check[0])
  out = []
  for u, s in zip(uops, srcs):
    if s in realized_:
      v = buffer_view(realized_[s], shape_of(u))
      realized_map[u] = v
      if s is not u: realized_map[s] = v
      out.append(v)
    else: out.append(s)
  return out
