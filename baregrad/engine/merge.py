"""Multi-output kernels: an elementwise kernel whose output the next kernel reads element for element is merged into
that kernel, which then stores both values. An optimizer step's moments are the case: Adam's m and v updates were
kernels of their own whose outputs the parameter's update read back; merged, the gradient and the moments are read
once (7 passes over the parameter-sized arrays instead of 10) and two launches per parameter go.

A producer A is merged into a consumer C (a later kernel that loads A's output) when
  - both are elementwise kernels (no reduction) over one contiguous iteration shape, with no bounds check;
  - C reads A's output only at the element it stores (a contiguous load of the same shape);
  - no kernel between them reads or writes A's output, or writes what A reads (A's work moves to C's place);
and the merged kernel is refused where a load of an output's memory is not an input of that output's store, or is not
at the element it stores: within one iteration every such load then happens before the store that overwrites it."""
from __future__ import annotations
import dataclasses
from typing import TYPE_CHECKING
from baregrad.ir.ops import UOp, Ops
if TYPE_CHECKING: from baregrad.engine.schedule import ScheduleItem

def _shape(it: ScheduleItem) -> tuple[int, ...] | None:
  """The contiguous iteration shape of an elementwise kernel with one store, else None."""
  if it.kind != "kernel" or it.check is not None or it.ast is None: return None
  shapes = set()
  for st in it.ast.src:
    v = st.src[1].arg
    if len(v.views) != 1 or not v.contiguous: return None
    shapes.add(v.shape)
  if len(shapes) != 1 or any(u.op is Ops.REDUCE_AXIS for u in it.ast.toposort()): return None
  return shapes.pop()

def _outputs(it: ScheduleItem) -> list[int]: return [0] + [i for _, i in it.also]

def _in_order(load: UOp, shape: tuple[int, ...]) -> bool:
  """The load reads the element the kernel's index names (a contiguous view of the iteration shape). A gather's view
  (a third source: the index along one axis is a value) reads elsewhere, whatever its view looks like."""
  return len(load.src) == 2 and load.src[1].arg.shape == shape and load.src[1].arg.contiguous

def merge_producers(items: list[ScheduleItem]) -> list[ScheduleItem]:
  """items with producers merged into their consumers (see the module docstring); the order of the rest is kept."""
  if len(items) < 2: return items
  out: list[ScheduleItem | None] = list(items)
  shapes = [_shape(it) for it in items]
  writer: dict[int, int] = {}   # id(BufRef) -> the item that writes it
  for c, cit in enumerate(items):
    cur = cit   # item c, with what has been merged into it (only earlier items are merged away)
    if (shape := shapes[c]) is not None:
      # (a merged item's buffers start with cit's: k stays valid across merges into it)
      for k in range(1, len(cit.bufs)):
        ref = cit.bufs[k]
        if (a := writer.get(id(ref))) is None or (ait := out[a]) is None or shapes[a] != shapes[c] or ait.also or ait.bufs[0] is not ref: continue
        if (merged := _merge(ait, cur, k, shape, out[a + 1:c])) is not None:
          out[a], out[c] = None, merged; cur = merged
    for _, i in cur.outputs(): writer[id(cur.bufs[i])] = c
  return [it for it in out if it is not None]

def _merge(ait: ScheduleItem, cit: ScheduleItem, k: int, shape: tuple[int, ...], between: list) -> ScheduleItem | None:
  # (kernels, built with their node: _shape is None for a copy)
  assert ait.ast is not None and cit.ast is not None and ait.srcnode is not None
  a_out = ait.bufs[0].storage
  a_in = {b.storage for b in ait.bufs[1:]}
  for it in between:
    if it is None: continue
    if any(b.storage is a_out for b in it.bufs): return None
    if any(it.bufs[i].storage in a_in for i in _outputs(it)): return None
  store_a = ait.ast.src[0]
  # C reads A's output only where it stores (the loads to replace by A's value)
  loads = [u for u in cit.ast.toposort() if u.op is Ops.LOAD and u.src[0].arg == k]
  if not loads or any(u.dtype != store_a.src[2].dtype or not _in_order(u, shape) for u in loads): return None
  # A's buffers in C's numbering: one argument per storage, new ones appended
  bufs = list(cit.bufs)
  idx: dict[int, int] = {}
  for i, b in enumerate(ait.bufs):
    j = next((j for j, x in enumerate(bufs) if x.storage is b.storage), None)
    if j is None: bufs.append(b); j = len(bufs) - 1
    idx[i] = j
  renum = {g: UOp(Ops.DEFINE_GLOBAL, g.dtype, (), idx[g.arg]) for g in ait.ast.toposort() if g.op is Ops.DEFINE_GLOBAL}
  store_a = store_a.substitute(renum)
  val_a = store_a.src[2]
  stores = [st.substitute(dict.fromkeys(loads, val_a)) for st in cit.ast.src] + [store_a]
  ast = UOp(Ops.SINK, src=tuple(stores))
  outs = [(st.src[0].arg, st) for st in stores]
  if len({o for o, _ in outs}) != len(outs): return None
  # every load of an output's memory feeds that output's store, at the element it stores
  all_loads = [u for u in ast.toposort() if u.op is Ops.LOAD]
  for o, st in outs:
    mine = [u for u in all_loads if u.src[0].arg == o]
    if not mine: continue
    feeds = st.toposort()
    if any(u not in feeds or not _in_order(u, shape) for u in mine): return None
  return dataclasses.replace(cit, ast=ast, bufs=bufs, also=cit.also + [(ait.srcnode, idx[0])])
