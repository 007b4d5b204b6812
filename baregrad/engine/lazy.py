"""Realizing tensor graphs: which nodes already have buffers, and turning targets into buffers."""
from __future__ import annotations
import threading
from typing import Any
from baregrad.ir.sint import has_sym, max_shape
from baregrad.ir.ops import UOp, Ops, GroupOp, make_keyed, fresh_node
from baregrad.engine.graph import BufRef, buffer_uop, shape_of, base_of, set_shape
from baregrad.engine.schedule import create_schedule, ScheduleItem
from baregrad.engine.realize import run_schedule, capturing
from baregrad.engine.runner import cached_runner
from baregrad.engine import checks
from baregrad.hal import Device, profile
from baregrad import helpers, knobs

# A computed node keeps the node that reads its buffer (RESHAPE(BUFFER)) in its `_realized` slot, for as long as the
# node lives: dead graphs free their buffers. Nodes are graphs over buffer versions, so a hit is the same expression
# over the same versions; an entry whose buffer was overwritten since is ignored (docs/value_semantics.md)
def set_realized(u: UOp, v: UOp) -> None:
  """Record that v (a buffer view) holds u's value. Not for a value computed from no buffer (ones(4), an arange): its
  hash-consed node names no device, so a later graph on another device (a data-parallel replica's) would read this
  device's buffer in its kernels."""
  if v is not u and _reads_buffer(u): object.__setattr__(u, "_realized", v)   # (a buffer is its own value: no self-reference)

def _reads_buffer(u: UOp) -> bool:
  """Whether u's graph reads a buffer (walks until the first one: at once for an eager op over tensors)."""
  stack, seen = [u], set()
  while stack:
    n = stack.pop()
    if n.op is Ops.BUFFER: return True
    if n in seen: continue
    seen.add(n)
    stack.extend(n.src)
  return False

def buffer_view(ref: BufRef, shape: tuple[int, ...], fresh: bool = False) -> UOp:
  """The node reading ref's buffer as `shape` (`fresh`: no node has named ref yet)."""
  b = buffer_uop(ref, fresh)
  if shape == b._shape: return b
  shape = tuple(shape)
  if has_sym(shape):   # the leading corner of the largest shape's layout (ir/sint.py)
    full = make_keyed(Ops.RESHAPE, b.dtype, (b,), max_shape(shape), max_shape(shape))
    if full._shape is None: set_shape(full, max_shape(shape))
    return UOp(Ops.SHRINK, b.dtype, (full,), tuple((0, s) for s in shape))
  # (a shape is its own hash-consing key; over a fresh BUFFER node the RESHAPE is new too: no lookup)
  u = fresh_node(Ops.RESHAPE, b.dtype, (b,), shape) if fresh else make_keyed(Ops.RESHAPE, b.dtype, (b,), shape, shape)
  if u._shape is None: set_shape(u, shape)  # known: no need to walk the view machinery for it
  return u

# results in storages older than this are not reused (the jit sets it while capturing: a recording must compute what
# its replays will need, not name a buffer an earlier call happened to leave)
reuse_from_id = 0

def realized(u: UOp) -> UOp | None:
  """The buffer view holding u's value, if it was computed and that buffer still holds it."""
  if (v := u._realized) is None: return None
  ref = base_of(v).arg
  if ref.stale:
    object.__setattr__(u, "_realized", None)
    return None
  return v if ref.storage.id >= reuse_from_id else None

def substitute_realized(u: UOp) -> UOp:
  """u with every already-computed subgraph replaced by a read of its buffer."""
  if (v := realized(u)) is not None: return v
  hits = {n: v for n in u.toposort() if n._realized is not None and (v := realized(n)) is not None}
  return u.substitute(hits, same_shapes=True) if hits else u   # (a buffer view has the shape of what it holds)

def _substitute_all(uops: list[UOp]) -> list[UOp]:
  """substitute_realized of each, with one walk over the graphs they share."""
  hits: dict[UOp, UOp] = {}
  seen: set[UOp] = set()
  for u in uops:
    stack = [u]
    while stack:  # stop at computed nodes: nothing below them is read
      n = stack.pop()
      if n in seen: continue
      seen.add(n)
      if n._realized is not None and (v := realized(n)) is not None: hits[n] = v
      else: stack.extend(n.src)
  return [u.substitute(hits, same_shapes=True) for u in uops] if hits else list(uops)

# ---- schedules cached by graph structure: eager code builds the same small graph over new buffers again and again
# (x + 1 on each new x, every op of a training step), and cutting it into kernels costs far more than running them.
# The key is the graph with each buffer replaced by a placeholder (its slot, device and size: what scheduling looks
# at); a hit rebuilds the cached items over this graph's buffers, with new buffers for what the schedule computes.
# A placeholder also names the first slot over the same storage (an ASSIGN writes the next version of a buffer its value
# reads: the schedule passes one argument per storage); the bounds checks registered on its nodes are part of the key.
# Not cached: COPY and stale reads (those take the full path, which also raises their errors).
_CACHEABLE = GroupOp.ALU | GroupOp.Movement | {Ops.BUFFER, Ops.CONST, Ops.IOTA, Ops.REDUCE_AXIS, Ops.CAST, Ops.BITCAST, Ops.CONTIGUOUS,
                                               Ops.DETACH, Ops.ASSIGN, Ops.GATHER, Ops.COPY}
SCHEDULE_CACHE_SIZE = 2048
# evicted by the clock algorithm (LRU's approximation): a hit sets the template's used flag, which is cheaper than
# moving its key to the end of an ordered dict (hashing the whole nested key once more on every eager op); eviction
# takes the oldest entry not used since it was last passed over, moving the used ones to the end with their flags reset
# Threads: a hit is one dict.get (atomic under the GIL); an insertion and its eviction hold _sched_lock (two evictions
# at once would pop the same oldest key, and one would raise KeyError)
_sched_cache: dict = {}
_sched_lock = threading.Lock()

def _cache_put(key: tuple, tmpl: tuple) -> None:
  with _sched_lock:
    _sched_cache[key] = tmpl
    while len(_sched_cache) > SCHEDULE_CACHE_SIZE:
      k = next(iter(_sched_cache))
      t = _sched_cache.pop(k)
      if t[4][0]:
        t[4][0] = False
        _sched_cache[k] = t

_SUBSTITUTE = ("substitute",)   # _abstract's answer where a node's value was computed already

def _abstract(srcs: list[UOp], realized_hits: bool = False) -> Any:
  """The graph as a key of plain tuples (each node as (op, dtype, arg, source positions; a lone source's position
  alone), each buffer as a placeholder: its slot, the first slot over its storage, device and size) with the bounds
  checks registered on its nodes (checked node, payload graph, message); the position of each node in that key; the
  nodes by position; the buffers by slot.
  None where the graph is not cacheable. Plain tuples, not placeholder UOps: building a UOp hash-conses it (a weak
  dictionary lookup and insert per node), which cost more than the rest of an eager op's scheduling. The key keeps no
  node alive (a graph reading no buffer, e.g. zeros(), would otherwise hash-cons to a cached node and find its old
  result (set_realized): two tensors, one buffer). With realized_hits, _SUBSTITUTE where a node's value was computed
  already (the graph is substituted first: _substitute_all; one walk, not two, for the graphs that have none)."""
  pos: dict[UOp, int] = {}
  nodes: list[UOp] = []
  key: list[tuple] = []
  slots: list[BufRef] = []
  slot_of: dict[int, int] = {}     # id(BufRef) -> slot
  storage_of: dict[int, int] = {}  # id(storage) -> its first slot
  found: list[tuple[UOp, UOp, str]] | None = None
  registry = checks.registry
  todo = list(srcs)
  for root in todo:   # (a bounds check's payload graph is appended to todo as its node is met)
    # children first: a node stays on the stack until its sources have positions (a DAG: each node gets one). This
    # loop runs for every node of every eager realize, so it is kept tight: no calls but the containers' own
    stack = [root]
    while stack:
      u = stack[-1]
      if realized_hits and u._realized is not None and realized(u) is not None: return _SUBSTITUTE   # (before its subgraph)
      src = u.src
      pending = False
      for s in src:
        if s not in pos: stack.append(s); pending = True
      if pending: continue
      stack.pop()
      if u in pos: continue   # (pushed twice, by two parents)
      op = u.op
      if op not in _CACHEABLE: return None
      if registry and (e := registry.get(id(u))) is not None and e[0]() is u:
        if found is None: found = []
        for p, m in e[1]: found.append((u, p, m)); todo.append(p)
      if op is Ops.BUFFER:
        ref = u.arg
        st = ref.storage
        if ref.version < st.version: return None   # (stale: the full path raises)
        if (k := slot_of.get(id(ref))) is None: k = slot_of[id(ref)] = len(slots); slots.append(ref)
        first = storage_of.setdefault(id(st), k)
        key.append((op, u.dtype, k, first, st.device, st.size))
      elif len(src) == 1: key.append((op, u.dtype, u.argkey, pos[src[0]]))
      else: key.append((op, u.dtype, u.argkey, tuple([pos[x] for x in src])))
      pos[u] = len(nodes)
      nodes.append(u)
  checked = tuple([(pos[n], pos[p], m) for n, p, m in found]) if found else ()
  return (tuple(key), tuple([pos[x] for x in srcs]), checked), pos, nodes, slots

def _template(items: list[ScheduleItem], realized_: dict, pos: dict[UOp, int], slots: list[BufRef]) -> tuple | None:
  ref_of: dict[int, tuple[str, int]] = {id(r): ("in", k) for k, r in enumerate(slots)}
  made: list[tuple] = []   # (device, size, dtype) of the buffers the schedule makes
  def tref(r: BufRef) -> tuple[str, int]:
    if (t := ref_of.get(id(r))) is None:
      ref_of[id(r)] = t = ("new", len(made))
      made.append((r.device, r.size, r.dtype))
    return t
  titems = []
  for it in items:
    if it.kind not in ("kernel", "copy") or (it.srcnode is not None and it.srcnode not in pos): return None
    if it.check is not None and it.check[0] not in pos: return None
    if any(n not in pos for n, _ in it.also): return None
    titems.append((it.ast, [tref(b) for b in it.bufs], it.kind, pos.get(it.srcnode) if it.srcnode is not None else None,
                   (pos[it.check[0]], it.check[1]) if it.check is not None else None, [(pos[n], i) for n, i in it.also]))
  if any(u not in pos for u in realized_): return None
  treal = [(pos[u], tref(r)) for u, r in realized_.items()]
  # one kernel computing the one result, nothing else to do around it (no bounds flag, no second output, no in-place
  # write to commit): what most eager ops are. realize() runs it without ScheduleItems (see _run_single)
  single = None
  if len(titems) == 1:
    ast, tb, kind, sn, ck, also = titems[0]
    # (type: ignore: sn is not None: the item has its node)
    if kind == "kernel" and ck is None and not also and sn is not None and items[0].srcnode.op is not Ops.ASSIGN and treal == [(sn, tb[0])]:  # type: ignore[union-attr]
      # (the last two: the compiled runner and the device instance it was compiled for, kept by the first launch)
      single = [ast, tb, sn, None, None]
  return titems, treal, made, single, [False]   # (the last: used since the clock hand last passed, see _cache_put)

def _instantiate(tmpl: tuple, nodes: list[UOp], slots: list[BufRef]) -> tuple[list[ScheduleItem], dict]:
  titems, treal, made = tmpl[0], tmpl[1], tmpl[2]
  new = [BufRef(d, n, dt) for d, n, dt in made]
  def get(t: tuple[str, int]) -> BufRef: return slots[t[1]] if t[0] == "in" else new[t[1]]
  items = [ScheduleItem(ast, [get(t) for t in tb], kind, nodes[sn] if sn is not None else None, (nodes[ck[0]], ck[1]) if ck else None,
                        [(nodes[n], i) for n, i in also]) for ast, tb, kind, sn, ck, also in titems]
  return items, {nodes[k]: get(t) for k, t in treal}

def _schedule(uops: list[UOp], device: str, single_ok: bool) -> tuple[list[ScheduleItem] | None, list[UOp], Any]:
  """(items, srcs, realized) as schedule_for; with single_ok, (None, srcs, (template, nodes, slots)) for a cached
  single-kernel schedule (see _run_single)."""
  if not profile.ON: return _schedule_srcs(uops, device, single_ok)   # (an idle span costs ~0.4 us of an eager op)
  with profile.span("schedule", device=device): return _schedule_srcs(uops, device, single_ok)

def cache_key(structure: Any, device: str) -> tuple:
  """The schedule cache's key of a graph's structure (_abstract) on a device: with the knobs that change how a graph
  is cut into kernels."""
  return (structure, device, knobs.get("FUSE_NORMS"), knobs.get("FUSE_NORMS_MAX_ROW"), knobs.get("FUSE_ATTENTION"),
          knobs.get("FUSE_ATTENTION_MIN_SCORES"), knobs.get("ROWSTREAM"), knobs.get("PACK"))

def _schedule_srcs(uops: list[UOp], device: str, single_ok: bool) -> tuple[list[ScheduleItem] | None, list[UOp], Any]:
  ab = _abstract(uops, True)
  if ab is _SUBSTITUTE:   # computed values in the graph: read their buffers instead
    srcs = _substitute_all(uops)
    ab = _abstract(srcs)
  elif ab is None: srcs = _substitute_all(uops)   # (not cacheable: the walk may have stopped before a computed node)
  else: srcs = uops
  key = cache_key(ab[0], device) if ab is not None else None
  if key is not None and (tmpl := _sched_cache.get(key)) is not None:
    tmpl[4][0] = True
    if single_ok and tmpl[3] is not None and not capturing: return None, srcs, (tmpl, ab[2], ab[3])   # (a jit capture records items)
    items, realized_ = _instantiate(tmpl, ab[2], ab[3])
    return items, srcs, realized_
  items, realized_ = create_schedule(srcs, device)
  if key is not None and (tmpl := _template(items, realized_, ab[1], ab[3])) is not None:
    _cache_put(key, tmpl)
  return items, srcs, realized_

def _run_single(tmpl: tuple, slots: list[BufRef]) -> BufRef | None:
  """Launch a cached single-kernel schedule over this graph's buffers (what _instantiate and run_schedule do for it,
  without building their items); returns its output, or None where its kernel is not compiled yet (the item path
  compiles it, with its progress bar)."""
  single = tmpl[3]
  new = [BufRef(d, n, dt) for d, n, dt in tmpl[2]]
  refs = [slots[i] if k == "in" else new[i] for k, i in single[1]]
  out = refs[0]
  if out.storage.size == 0: return out   # nothing to compute (run_schedule skips it too)
  # the runner this template launched last, while its device is the one open under that name (a closed and reopened
  # device compiles again: cached_runner is keyed by the instance)
  if (runner := single[3]) is None or Device.open_devices.get(out.device) is not single[4]:
    if (runner := cached_runner(single[0], out.device)) is None: return None
    single[3], single[4] = runner, Device.open_devices.get(out.device)
  runner([r.storage.ensure() for r in refs])
  return out

def schedule_for(uops: list[UOp], device: str) -> tuple[list[ScheduleItem], list[UOp], dict]:
  items, srcs, realized_ = _schedule(uops, device, False)
  assert items is not None
  return items, srcs, realized_

def realize(uops: list[UOp], device: str) -> list[UOp]:
  """Compute uops (on `device` where a graph reads no buffer); returns, for each, a node reading its buffer."""
  if helpers.viz_sink is not None: helpers.viz_sink("realize", uops=uops, device=device)   # VIZ=1: the tensor graph
  items, srcs, realized_ = _schedule(uops, device, True)
  if items is None:
    tmpl, nodes, slots = realized_
    if (r := _run_single(tmpl, slots)) is not None:
      sn = nodes[tmpl[3][2]]
      if len(uops) == 1 and srcs[0] is sn:
        # the one result (most eager ops): _outputs' work for it, its BUFFER node made without a lookup where the
        # template made its buffer
        u = uops[0]
        v = buffer_view(r, shape_of(u), tmpl[3][1][0][0] == "new")
        if slots:   # the graph reads buffers (its key has their slots): set_realized's walk to find one can be skipped
          object.__setattr__(u, "_realized", v)
          if sn is not u: object.__setattr__(sn, "_realized", v)
        else:
          set_realized(u, v)
          if sn is not u: set_realized(sn, v)
        return [v]
      return _outputs(uops, srcs, {sn: r})
    items, realized_ = _instantiate(tmpl, nodes, slots)
  keep = {realized_[s].id for s in srcs if s in realized_}
  for it in items:  # a bounds check writes a flag the host reads at the next sync (engine/checks.py)
    if it.check is not None: it.bufs[0].buf = checks.new_flag(it.bufs[0].device)
  try: run_schedule(items, keep)
  finally:
    # what ran has written its versions: they are current now
    for it in items:
      for n, i in it.outputs():
        if n is not None and n.op is Ops.ASSIGN: it.bufs[i].commit()
  for it in items:
    if it.check is not None: checks.submitted(it.bufs[0].buf, it.check[1], it.check[0])  # type: ignore[arg-type]  # (it ran)
  return _outputs(uops, srcs, realized_)

def _outputs(uops: list[UOp], srcs: list[UOp], realized_: dict) -> list[UOp]:
  out = []
  for u, s in zip(uops, srcs):
    if s in realized_:
      v = buffer_view(realized_[s], shape_of(u))
      set_realized(u, v)
      if s is not u: set_realized(s, v)
      out.append(v)
    else: out.append(s)
  return out
