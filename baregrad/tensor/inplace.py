"""In-place writes that keep value semantics (docs/value_semantics.md): before buffers are overwritten, the tensors
still alive that read them are computed, in the same schedule; the written tensors move to the buffers' next
versions. assign, setitem, optimizer steps, load_state_dict and the jit all write through here."""
from __future__ import annotations
import weakref
from typing import Any, Iterable, Sequence, TYPE_CHECKING
from baregrad.ir.ops import UOp, Ops
from baregrad.engine.graph import BufRef, Storage, buffer_uop, base_of, shape_of
from baregrad.engine import lazy
from baregrad.hal import Device
from baregrad.tensor import live
if TYPE_CHECKING: from baregrad.tensor.tensor import Tensor

def is_buffer(u: UOp) -> bool:
  """u is a whole buffer (or a reshape of one), not a graph or a view into part of it."""
  return u.op is Ops.BUFFER or (u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER)

def bind(t: Tensor, view: UOp, own: bool = False) -> None:
  """t's value is the buffer `view` reads; t becomes the storage's owner when asked, or when it has none alive."""
  old = live.whole_buffer(t.uop)
  t.uop = view
  st = base_of(view).arg.storage
  if old is None or old.storage is not st: live.track(t)
  if own or st.owner is None or st.owner() is None: st.owner = weakref.ref(t)

def buffer_ref(t: Tensor) -> BufRef:
  """The buffer version t is; a t that is still a graph (Tensor.ones(..., requires_grad=True) is one) is realized
  into a buffer of its own first, keeping its requires_grad."""
  if not is_buffer(t.uop):
    rg = t.requires_grad
    t.requires_grad = None
    t.uop = t.contiguous().realize().uop
    live.track(t)
    t.requires_grad = rg
    if not is_buffer(t.uop): raise ValueError(f"assign target {t!r} could not be made a buffer")
  return base_of(t.uop).arg

# ---- finding the live tensors that read buffers
READS, STALE = 1, 2

def _flags(u: UOp, written: set[Storage] | None, memo: dict[UOp, int]) -> int:
  """READS if u's graph reads the current version of a storage in `written` (any buffer at all when None), STALE if
  it reads an overwritten version (it cannot be computed any more). Results that are realized count as their buffer."""
  stack: list[tuple[UOp, bool]] = [(u, False)]
  while stack:
    n, done = stack.pop()
    if n in memo: continue
    if done:
      f = 0
      for s in n.src: f |= memo[s]
      memo[n] = f
      continue
    if n.op is Ops.BUFFER:
      r = n.arg
      memo[n] = STALE if r.stale else READS if written is None or r.storage in written else 0
      continue
    if n._realized is not None and (v := lazy.realized(n)) is not None:
      r = base_of(v).arg
      memo[n] = READS if written is not None and r.storage in written else 0
      continue
    stack.append((n, True))
    stack.extend((s, False) for s in n.src if s not in memo)
  return memo[u]

def readers(written: set[Storage] | None, exclude: set[int]) -> list[Tensor]:
  """Live tensors (not in `exclude`, by id) whose value is read from the current version of a storage in `written`;
  with written=None, every live tensor that is still an unrealized graph."""
  memo: dict[UOp, int] = {}
  out = []
  for t in live.lazy():  # graphs, and views of part of a buffer: walked
    if id(t) in exclude: continue
    if written is None:
      if t.uop.op is Ops.CONST or (t.uop._realized is not None and lazy.realized(t.uop) is not None): continue
      out.append(t)
    elif _flags(t.uop, written, memo) == READS: out.append(t)
  for st in written or ():  # tensors naming a written buffer whole: filed under it
    out += [t for t in live.viewers(st) if id(t) not in exclude and not base_of(t.uop).arg.stale]
  return out

def _target(t: Tensor) -> UOp:
  # a reader that is (a view of) a buffer, or was computed into one, must be copied: realizing it alone would only
  # name the same memory
  u = lazy.substitute_realized(t.uop)
  return UOp(Ops.CONTIGUOUS, t.dtype, (u,)) if base_of(u).op is Ops.BUFFER else t.uop

def realize_tensors(ts: Sequence[Tensor], extra: Sequence[UOp] = (), device: str | None = None, copies: Sequence[Tensor] = ()) -> list[UOp]:
  """Realize tensors, then `copies` (readers of buffers about to be overwritten: those that only name a buffer get a
  copy), then the extra UOps, in one schedule; tensors without gradients are bound to their buffers, the others keep
  their graph (read through lazy.set_realized's record). Returns the buffer views of `extra`."""
  if not ts and not copies and not extra: return []
  ts = [*ts, *copies]
  targets = [t.uop for t in ts[:len(ts) - len(copies)]] + [_target(t) for t in copies]
  outs = lazy.realize(targets + list(extra), device or (ts[0].device if ts else Device.DEFAULT))
  for t, o in zip(ts, outs):
    if t.uop is not o: lazy.set_realized(t.uop, o)
    if not t.requires_grad and live.whole_buffer(o) is not None: bind(t, o)
  return outs[len(ts):]

def prepare_write(written: set[Storage], exclude: Iterable[Tensor] = ()) -> None:
  """Compute the live tensors that read the current versions of `written` before those are overwritten by something
  outside a schedule (a jit replay)."""
  if not written: return   # (a replay that updates no state: no live tensor to walk)
  rs = readers(written, {id(t) for t in exclude})
  by_dev: dict[str, list[Tensor]] = {}
  for t in rs: by_dev.setdefault(t.device, []).append(t)
  for dev, ts in by_dev.items(): realize_tensors((), device=dev, copies=ts)

def realize_all_lazy() -> None:
  """Realize every live tensor that is still a graph (the jit does this before capturing)."""
  memo: dict[UOp, int] = {}
  by_dev: dict[str, list[Tensor]] = {}
  for t in readers(None, set()):
    if _flags(t.uop, None, memo) & STALE: continue  # cannot be computed any more; reading it raises
    by_dev.setdefault(t.device, []).append(t)
  for dev, ts in by_dev.items(): realize_tensors(ts, device=dev)

def write(pairs: Sequence[tuple[Tensor, Any]], also: Sequence[Tensor] = (), before: Iterable[UOp] = (),
          prepared: tuple[list[UOp], list[BufRef]] | None = None) -> None:
  """Write each value into its target's buffer in place, all in one schedule. Tensors in `also` and the live tensors
  that read a target's current value are computed in the same schedule before any write. A target must be a whole
  buffer (a parameter, a state tensor; a graph is made one); each value may read its own target only elementwise.
  `before`: nodes built before every value (an optimizer's gradients), so none of them reads one: the search for
  values read by later values does not walk their graphs. `prepared`: the ASSIGNs and the versions they write, as
  assign_nodes made them for these targets (an optimizer rebuilds them from a recipe); the values are then unused."""
  if not pairs and not also: return
  devices = {t.device for t, _ in pairs} | {t.device for t in also}
  if len(devices) != 1: raise RuntimeError(f"in-place write of tensors on several devices {sorted(devices)}")
  device = devices.pop()
  values: list[Tensor] | None = None
  if prepared is None: assigns, news, values = assign_nodes(pairs, before)
  else: assigns, news = prepared
  written = {r.storage for r in news}
  exclude = {id(t) for t, _ in pairs} | {id(a) for a in also} | ({id(v) for v in values} if values else set())
  rs = readers(written, exclude)
  realize_tensors(also, assigns, device, copies=rs)
  for (t, _), new in zip(pairs, news): bind(t, lazy.buffer_view(new, t.shape), own=True)
  # a value still held elsewhere (`new = p - 1; p.assign(new)`) is read from the written buffer from now on
  for (t, _), v, new in zip(pairs, values or (), news):
    if v is not t and not is_buffer(v.uop) and v.uop.op is not Ops.CONST: lazy.set_realized(v.uop, lazy.buffer_view(new, v.shape))

def assign_nodes(pairs: Sequence[tuple[Tensor, Any]], before: Iterable[UOp] = ()) -> tuple[list[UOp], list[BufRef], list[Tensor]]:
  """For write: the ASSIGN of each value into its target's next version, those versions, and the values as tensors
  of the targets' dtypes. Checks shapes, devices and that no buffer is written twice."""
  from baregrad.tensor.tensor import Tensor
  assigns, news, values = [], [], []
  # a value that later values read (Adam's new moments, read by the parameter's update) is read from its ASSIGN,
  # not recomputed from the target's memory, which the ASSIGN may already have overwritten
  done: dict[UOp, UOp] = {}
  known = {u: u for u in before}
  memo: dict[UOp, UOp] = dict(known)   # node -> node with `done` substituted, shared by all values (one walk of the graph)
  seen: set[int] = set()
  for t, v in pairs:
    if not isinstance(v, Tensor): v = Tensor.full(t.shape, v, dtype=t.dtype, device=t.device)
    if v.shape != t.shape: raise RuntimeError(f"assign of shape {v.shape} to a tensor of shape {t.shape}")
    if v.device != t.device: raise RuntimeError(f"assign of a tensor on {v.device} to a tensor on {t.device}")
    if v.dtype != t.dtype: v = v.cast(t.dtype)
    ref = buffer_ref(t)
    if id(ref.storage) in seen: raise RuntimeError(f"one write assigns the same buffer twice ({t!r})")
    seen.add(id(ref.storage))
    new = ref.storage.next_ref()
    walked = v.uop in memo   # an earlier value's walk went through this one
    src = v.uop.substitute(done, memo, same_shapes=True)   # (an ASSIGN or its reshape has the shape of the value it writes)
    if shape_of(src) != (ref.size,): src = UOp(Ops.RESHAPE, src.dtype, (src,), (ref.size,))
    a = UOp(Ops.ASSIGN, t.dtype, (buffer_uop(new), src))
    done[v.uop] = a if shape_of(v.uop) == (ref.size,) else UOp(Ops.RESHAPE, a.dtype, (a,), v.shape)
    # nodes walked for earlier values were substituted without this one: where they went through it, walk again
    if walked: memo = {**known, **done}
    else: memo[v.uop] = done[v.uop]
    assigns.append(a); news.append(new); values.append(v)
  return assigns, news, values

def write_region(t: Tensor, region: tuple[tuple[Any, Any], ...], v: Tensor) -> None:
  """Write v (of the region's shape, t's dtype) into the part `region` ((lo, hi) per axis of t; bounds may be
  symbolic, ir/sint.py) of t's buffer in place: one kernel over the region alone, the rest of the buffer keeps its
  bytes (a KV cache's new rows). Live tensors reading t's current value are computed first, as for write()."""
  from baregrad.ir.view import ShapeTracker
  ref = buffer_ref(t)
  st = ShapeTracker.from_shape((ref.size,)).reshape(tuple(t.shape)).shrink(region)
  if tuple(v.shape) != tuple(st.shape): raise RuntimeError(f"write of shape {v.shape} into a region of shape {st.shape} of a tensor of shape {t.shape}")
  if v.device != t.device: raise RuntimeError(f"write of a tensor on {v.device} into a tensor on {t.device}")
  new = ref.storage.next_ref()
  a = UOp(Ops.ASSIGN, t.dtype, (buffer_uop(new), v.cast(t.dtype).uop), st)
  write([(t, v)], prepared=([a], [new]))
