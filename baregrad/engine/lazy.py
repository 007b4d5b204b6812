"""Realizing tensor graphs: which nodes already have buffers, and turning targets into buffers."""
from __future__ import annotations
import weakref
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import UOp, Ops, GroupOp
from baregrad.engine.graph import BufRef, buffer_uop, shape_of, base_of
from baregrad.engine.schedule import create_schedule, ScheduleItem
from baregrad.engine.realize import run_schedule
from baregrad.hal import profile

# computed node -> the node that reads its buffer (RESHAPE(BUFFER)); weak so dead graphs free their buffers
realized_map: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

def buffer_view(ref: BufRef, shape: tuple[int, ...]) -> UOp:
  b = buffer_uop(ref)
  return b if shape == (ref.size,) else UOp(Ops.RESHAPE, ref.dtype, (b,), tuple(shape))

def substitute_realized(u: UOp) -> UOp:
  """u with every already-computed subgraph replaced by a read of its buffer."""
  if not realized_map: return u
  hits = {n: realized_map[n] for n in u.toposort() if n in realized_map}
  return u.substitute(hits) if hits else u

def schedule_for(uops: list[UOp], device: str) -> tuple[list[ScheduleItem], list[UOp], dict]:
  srcs = [substitute_realized(u) for u in uops]
  with profile.span("schedule", device=device): items, realized = create_schedule(srcs, device)
  return items, srcs, realized

def realize(uops: list[UOp], device: str) -> list[UOp]:
  """Compute uops (on `device` where a graph reads no buffer); returns, for each, a node reading its buffer."""
  items, srcs, realized = schedule_for(uops, device)
  keep = {realized[s].id for s in srcs if s in realized}
  run_schedule(items, keep)
  out = []
  for u, s in zip(uops, srcs):
    if s in realized:
      v = buffer_view(realized[s], shape_of(u))
      realized_map[u] = v
      if s is not u: realized_map[s] = v
      out.append(v)
    else: out.append(s)
  return out
