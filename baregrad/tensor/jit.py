"""jit: capture the kernels a function runs, then replay them; a replay gives what the function gives eagerly.

Call 1 runs the function normally (kernels compile); call 2 runs it again while recording every kernel; later calls
only replay the recording. On an HCQ device the whole capture is one recorded queue (HCQGraph) with patched
arguments, submitted once. Captures are keyed by the tensor arguments' shapes, dtypes, devices and requires_grad, by
the values of the other arguments, by Tensor.training and by the nn modules' training modes (Tensor._modes); nothing
is replayed on inputs it was not captured for.
NumPy arrays are keyed by shape and dtype (byte order included) and are inputs like tensors: each replay copies the
new array's contents in (the function must make its tensors with Tensor(arr) or Tensor.from_numpy; if its kernels read
other host data made in the call, which could be derived from an array, the function runs eagerly instead). Floats
are keyed by their bits (0.0 and -0.0 make different graphs); an argument that is neither a tensor, an array, a
container of them nor hashable has no key, and such a call runs eagerly (never a replay of another object's capture).

What makes a replay equal to the eager call (docs/value_semantics.md):
- inputs are bound by buffer: every kernel argument that reads or writes an input is patched to the new input;
- outputs made inside the function get fresh memory on every call, so earlier outputs stay valid; an output that
  is an argument or a tensor made before the call is returned as that same object;
- state the function updates in place (parameters, optimizer moments, the RNG state, p.grad) is written in place:
  live tensors that read it are computed first, and its owners move to the new buffer versions after the replay;
- randomness advances on each replay (the RNG state is a device buffer the recorded kernels advance);
- a replay is refused, and the function captured again, when a buffer it reads belonged to a tensor that has been
  dropped or rebound since (state replaced from outside); reading a value to the host while capturing raises JitError.
Copies between devices are recorded too and replayed as launches (their two buffers bound as a kernel's are): queued on
both devices' queues where they link (hcq/peer.py), else through the host; a capture with a copy runs its launches one
by one instead of as one recorded queue.
What it cannot see: Python values read from outside the arguments (globals, plain-number attributes) are baked into
the recording; pass them as arguments, or call reset()."""
from __future__ import annotations
import functools, struct, sys, threading, weakref
import numpy as np
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable
from baregrad import knobs
from baregrad.helpers import DEBUG
from baregrad.hal import Device, Buffer
from baregrad.engine import realize as _realize, lazy, checks
from baregrad.engine.graph import BufRef, Storage, base_of, shape_of
from baregrad.ir.ops import Ops, UOp
from baregrad.ir.sint import unbind_ast
from baregrad.tensor import tensor as _tensor_mod
from baregrad.tensor.tensor import Tensor, _tensor_of
from baregrad.tensor.common import _all_grad_tensors
from baregrad.tensor import live
from baregrad.tensor.inplace import realize_all_lazy, prepare_write

class JitError(RuntimeError): pass

MAX_CAPTURES = 16   # distinct keys kept per function (least recently used dropped)

@dataclass
class _Launch:
  runner: Any                      # CompiledRunner
  refs: list[BufRef]               # by the kernel's buffer numbers
  outs: list[int] = field(default_factory=lambda: [0])   # the buffer numbers it writes
  vals: dict[str, int] = field(default_factory=dict)      # its variables' values when it was recorded (by name)

@dataclass
class _Capture:
  launches: list[_Launch] = field(default_factory=list)
  checks: list[tuple[BufRef, str]] = field(default_factory=list)   # bounds flags the recording computes
  forbid_host_reads: bool = True   # Tensor.numpy() while capturing raises (in the capturing thread)
  thread: int = field(default_factory=threading.get_ident)   # the thread whose launches are recorded
  interleaved: bool = False   # another thread launched work meanwhile (engine/realize.py): record again later
  def add_kernel(self, runner: Any, item: Any) -> None:
    self.launches.append(_Launch(runner, list(item.bufs), [i for _, i in item.outputs()], unbind_ast(item.ast)[1]))
    if item.check is not None: self.checks.append((item.bufs[0], item.check[1]))
  def add_copy(self, item: Any) -> None: self.launches.append(_Launch(_CopyRunner(item.bufs[0].device), list(item.bufs[:2]), [0]))

@dataclass(frozen=True)
class _Arg:
  arg: int

@dataclass(frozen=True)
class _CopySpec:
  bufs: tuple = (_Arg(0), _Arg(1))   # argument 0 the destination, 1 the source (as a kernel's buffer numbers)
  vars: tuple = ()

class _CopyRunner:
  """A recorded copy between devices, replayed as a launch: `(dst, src)` through realize.copy_buffer (queued on both
  devices' queues where they link, else through the host), its buffers patched as a kernel's are."""
  spec = _CopySpec()
  def __init__(self, device: str) -> None: self.device = device
  def __call__(self, bufs: list[Buffer], vals: Any = None) -> None: _realize.copy_buffer(bufs[0], bufs[1])

def _leaves(x: Any) -> list:
  """The tensors in x (nested tuples, lists and dicts), in order."""
  if isinstance(x, Tensor): return [x]
  if isinstance(x, (tuple, list)): return [t for v in x for t in _leaves(v)]
  if isinstance(x, dict): return [t for _, v in sorted(x.items(), key=lambda kv: repr(kv[0])) for t in _leaves(v)]
  return []

def _arrays(x: Any) -> list:
  """The NumPy arrays in x (nested tuples, lists and dicts), in order."""
  if isinstance(x, np.ndarray): return [x]
  if isinstance(x, (tuple, list)): return [a for v in x for a in _arrays(v)]
  if isinstance(x, dict): return [a for _, v in sorted(x.items(), key=lambda kv: repr(kv[0])) for a in _arrays(v)]
  return []

class _NoKey(Exception):
  """An argument that cannot be part of a capture's key (unhashable, not a container): the call runs eagerly."""

def _rebuild(x: Any, it: Any) -> Any:
  """x with each tensor replaced by next(it), in _leaves order."""
  if isinstance(x, Tensor): return next(it)
  if isinstance(x, (tuple, list)): return type(x)(_rebuild(v, it) for v in x)
  if isinstance(x, dict):
    new = {k: _rebuild(v, it) for k, v in sorted(x.items(), key=lambda kv: repr(kv[0]))}
    return {k: new[k] for k in x}
  return x

def _binds(x: Any) -> dict[str, int]:
  """The values of the bound variables among the arguments, by variable name."""
  out: dict[str, int] = {}
  def walk(a: Any) -> None:
    if isinstance(a, UOp) and a.op is Ops.BIND: out[a.src[0].arg[0]] = a.src[1].arg
    elif isinstance(a, (tuple, list)):
      for v in a: walk(v)
    elif isinstance(a, dict):
      for v in a.values(): walk(v)
  walk(x)
  return out

def _tensor_sig(t: Any) -> tuple: return ("T", t.shape, t.dtype, t.device, bool(t.requires_grad))

def _signature(args: tuple, kwargs: dict) -> tuple:
  def sig(a: Any) -> Any:
    if isinstance(a, Tensor): return _tensor_sig(a)
    # a bound variable (Variable(...).bind(n)): keyed by the variable, its value is an input of the replay
    if isinstance(a, UOp) and a.op is Ops.BIND: return ("B", a.src[0])
    if isinstance(a, (tuple, list)): return (type(a).__name__, tuple(sig(v) for v in a))
    if isinstance(a, dict): return ("dict", tuple((repr(k), sig(v)) for k, v in sorted(a.items(), key=lambda kv: repr(kv[0]))))
    if isinstance(a, np.ndarray): return ("A", a.shape, a.dtype.str)   # (its contents are an input of the replay)
    # floats by their bits: 0.0 == -0.0, and both would find one capture
    if isinstance(a, float): return ("F", type(a).__name__, struct.pack("<d", a))
    if isinstance(a, np.generic): return ("N", a.dtype.str, a.tobytes())
    try: hash(a); return ("V", type(a).__name__, a)  # True and 1 are equal, but make different graphs
    except TypeError: raise _NoKey(type(a).__name__) from None   # (an id() would be reused by a later object)
  return (tuple(sig(a) for a in args), tuple((k, sig(v)) for k, v in sorted(kwargs.items())), Tensor.training, Tensor._modes)

def _storage(t: Any) -> Storage:
  u = t.uop
  if u.op is Ops.BUFFER: return u.arg.storage
  if u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER: return u.src[0].arg.storage
  return base_of(lazy.substitute_realized(u)).arg.storage

def _owner(st: Storage) -> Any:
  return st.owner() if st.owner is not None else None

def _constant_launches(launches: list[_Launch], first_storage: int, outside: set[Storage], written: set[Storage],
                       rehomed: set[Storage]) -> list[int]:
  """The launches a replay need not run again while the buffers they read keep their versions: those reading only
  state from before the call that nothing in the recording writes (a model's weights), or what such launches made, and
  writing intermediates no other launch writes, in memory no other buffer of the recording shares (packing a matmul's
  weights into panels, a weight's layout change: once per model instead of once per call). `outside`: storages the
  replay binds anew or that must be fresh each call (inputs, arrays, outputs, bounds flags, state). An output whose
  bytes the memory plan shared with another buffer is moved to memory of its own (added to `rehomed`: its value from
  the recording is not there, so the first replay makes them all)."""
  def rng(r: BufRef) -> tuple[int, int, int]:
    b = r.ensure()
    return (id(b.base), b.offset, b.offset + b.nbytes)
  writers: dict[Storage, int] = {}
  for l in launches:
    for i in l.outs: writers[l.refs[i].storage] = writers.get(l.refs[i].storage, 0) + 1
  # every storage's bytes (the eager schedule's memory plan lets intermediates take each other's memory: a hoisted
  # kernel's output must own its bytes, or a kernel between two uses of the same memory would read the wrong one)
  spans: dict[Storage, tuple[int, int, int]] = {}
  for l in launches:
    for r in l.refs: spans.setdefault(r.storage, rng(r))
  by_base: dict[int, list[tuple[int, int, Storage]]] = {}
  for st, (base, lo, hi) in spans.items(): by_base.setdefault(base, []).append((lo, hi, st))
  def shared(st: Storage) -> bool:
    base, lo, hi = spans[st]
    return any(o is not st and a < hi and lo < b for a, b, o in by_base[base])
  made: set[Storage] = set()
  const: list[int] = []
  for k, l in enumerate(launches):
    outs = {l.refs[i].storage for i in l.outs}
    reads = [r for i, r in enumerate(l.refs) if i not in l.outs]
    if l.runner.spec.vars: continue   # (its variables may take other values on the next call)
    if all((r.storage in made or (r.storage.id < first_storage and r.storage not in written)) and r.storage not in outside and not r.stale
           for r in reads) and all(st.id >= first_storage and st not in outside and writers[st] == 1 for st in outs):
      const.append(k); made |= outs
  # an output that shares its bytes gets memory of its own (the replay makes it again before its first use)
  for k in const:
    for i in launches[k].outs:
      if shared(st := launches[k].refs[i].storage):
        st.buf = Buffer(st.device, st.size, st.dtype).allocate()
        rehomed.add(st)
  return const

class _Captured:
  def __init__(self, launches: list[_Launch], inputs: list[Storage], out_kinds: list[tuple], out_template: Any,
               state: list[Storage], guarded: list[tuple[Storage, Any]], grads: list[tuple[Any, Any]], written_inputs: list[int],
               checks_: list[tuple[BufRef, str]], array_ins: list[tuple[int, Any, str, Storage]], const: list[int] | None = None):
    # the constant launches (_constant_launches) run apart, again only when a buffer they read has a new version
    cs = set(const or ())
    self.const = [launches[k] for k in sorted(cs)]
    self.const_reads = [(r.storage, r.storage.version) for l in self.const for i, r in enumerate(l.refs) if i not in l.outs]
    launches = [l for k, l in enumerate(launches) if k not in cs]
    self.launches, self.out_kinds, self.out_template, self.checks = launches, out_kinds, out_template, checks_
    self.state, self.guarded, self.grads, self.written_inputs = state, guarded, grads, written_inputs
    # every kernel argument bound to a storage: (launch index, argument index in spec.bufs)
    slots: dict[Storage, list[tuple[int, int]]] = {}
    for k, l in enumerate(launches):
      for j, g in enumerate(l.runner.spec.bufs): slots.setdefault(l.refs[g.arg].storage, []).append((k, j))
    self.input_slots = [slots.get(s, []) for s in inputs]
    # (array argument number, the dtype asked of Tensor(), device, the slots of the tensor made from it)
    self.array_slots = [(i, dt, dev, slots.get(st, [])) for i, dt, dev, st in array_ins]
    self.check_slots = [(slots.get(r.storage, []), r.device, msg) for r, msg in checks_]  # a new flag on every call
    # each fresh output storage once, with its slots (an output returned twice is one buffer)
    fresh: dict[Storage, tuple] = {}
    for kind in out_kinds:
      if kind[0] == "fresh" and kind[1] not in fresh: fresh[kind[1]] = (kind, slots.get(kind[1], []))
    self.fresh_outs = list(fresh.values())
    self.has_vars = any(l.runner.spec.vars for l in launches)
    self.graph, self.const_graph = _graph(launches), _graph(self.const)
    self.segments = _segments(launches) if self.graph is None else None

  def valid(self) -> bool:
    """The state the recording reads still belongs to the tensors it belonged to when it was made."""
    for st, ref in self.guarded:
      o = ref()
      if o is None or _storage(o) is not st: return False
    return True

  def var_values(self, binds: dict[str, int]) -> list[tuple[int, int, int]]:
    """(launch, variable index, value) of every variable a launch takes, for this call's bound variables (a variable
    the call does not pass keeps its recorded value, as a Python value read from outside the arguments would)."""
    return [(k, j, val) for k, l in enumerate(self.launches) for j, val in enumerate(_launch_vals(l, binds).values())]

  def run(self, bind: list[tuple[list[tuple[int, int]], Buffer]], binds: dict[str, int] | None = None) -> None:
    if self.const and any(st.version != v for st, v in self.const_reads):
      # a weight was written in place since: its derived buffers are made again before the rest reads them
      if self.const_graph is not None: self.const_graph.replay()
      else:
        for l in self.const: l.runner([r.ensure() for r in l.refs], l.vals or None)
      self.const_reads = [(st, st.version) for st, _ in self.const_reads]
    if not self.launches: return
    if self.graph is not None:  # (the graph keeps arguments a replay in flight reads apart from the ones it patches)
      patches = []
      for slots, b in bind:
        a = b._buf.va_addr
        patches += [(k, j, a) for k, j in slots]
      try:
        self.graph.replay(patches, self.var_values(binds or {}) if self.has_vars else ())
        return
      except ValueError as e:   # arguments sharing memory order launches the graph runs together: one by one
        from baregrad.hcq.graph import GraphPatchConflict   # (a graph exists: the device is an HCQ device)
        if not isinstance(e, GraphPatchConflict): raise
    patch: dict[tuple[int, int], Buffer] = {kj: b for slots, b in bind for kj in slots}
    if self.segments is not None:
      # each run of kernels on one device is one submission; the copies between the runs are launched as they come
      by_seg: dict[int, list[tuple[int, int, int]]] = {}
      for (k, j), b in patch.items():
        if (seg := self.segments[self.seg_of[k]])[2] is not None: by_seg.setdefault(self.seg_of[k], []).append((k - seg[0], j, b._buf.va_addr))
      vals = self.var_values(binds or {}) if self.has_vars else ()
      for i, (lo, hi, g) in enumerate(self.segments):
        if g is not None: g.replay(by_seg.get(i, ()), [(k - lo, j, v) for k, j, v in vals if lo <= k < hi])
        else:
          for k in range(lo, hi): self._launch(k, patch, binds)
      return
    for k in range(len(self.launches)): self._launch(k, patch, binds)

  def _launch(self, k: int, patch: dict[tuple[int, int], Buffer], binds: dict[str, int] | None) -> None:
    """Launch recorded launch k on its own, with this call's buffers where `patch` binds them."""
    l = self.launches[k]
    bufs = [r.ensure() for r in l.refs]
    for j, g in enumerate(l.runner.spec.bufs):
      if (b := patch.get((k, j))) is not None: bufs[g.arg] = b
    l.runner(bufs, _launch_vals(l, binds or {}) or None)

  @property
  def seg_of(self) -> list[int]:
    """The segment of each launch (for a recording in segments)."""
    if (so := self.__dict__.get("_seg_of")) is None:
      so = self.__dict__["_seg_of"] = [i for i, (lo, hi, _) in enumerate(self.segments or ()) for _ in range(lo, hi)]
    return so

def _launch_vals(l: _Launch, binds: dict[str, int]) -> dict[str, int]:
  """A launch's variables (in its argument order) at this call's values; one the call does not bind keeps its recorded
  value (as a Python value read from outside the arguments would)."""
  return {v.arg[0]: binds.get(v.arg[0], l.vals.get(v.arg[0], 0)) for v in l.runner.spec.vars}

def _graph(launches: list[_Launch]) -> Any:
  """The launches as one recorded HCQ queue where they are all on one HCQ device (else None: run one by one)."""
  devs = {l.runner.device for l in launches}
  # (a copy between devices is queued on two devices: the launches then run one by one)
  if len(devs) != 1 or knobs.get("JIT_NOGRAPH") or any(isinstance(l.runner, _CopyRunner) for l in launches): return None
  dev = Device[devs.pop()]
  if not (hasattr(dev, "compute_queue_t") and hasattr(dev, "alloc_args_memory")): return None
  from baregrad.hcq.graph import HCQGraph  # the device is an HCQ device: it offers the graph
  return HCQGraph(dev, [(l.runner.prg, [l.refs[g.arg].ensure()._buf for g in l.runner.spec.bufs], tuple(l.vals.get(v.arg[0], 0) for v in l.runner.spec.vars),
                         l.runner.spec.global_size, l.runner.spec.local_size) for l in launches], writes=_writes(launches))

def _writes(launches: list[_Launch]) -> list[list[int]] | None:
  """For each launch, the indices (in its program's argument order) of the buffers it writes: what the schedule says it
  outputs and what its kernel's AST stores into, together. The graph then puts a barrier only between launches whose
  memory overlaps where one of them writes, and launches that do not depend on each other run concurrently. None (a
  barrier between every two launches) where a kernel's AST is not at hand."""
  out = []
  for l in launches:
    spec = l.runner.spec
    if spec.ast is None: return None
    w = set(l.outs) | set(spec.outs)
    out.append([j for j, g in enumerate(spec.bufs) if g.arg in w])
  return out

def _segments(launches: list[_Launch]) -> list[tuple[int, int, Any]] | None:
  """A recording over several devices with copies between them (a data-parallel step): each maximal run of two or more
  kernels on one HCQ device as one recorded queue, submitted at once (lo, hi, HCQGraph), the other launches one by one
  (lo, hi, None); None where no run becomes a graph. The copies order the runs as in the eager call: each queues a wait on
  both devices' timelines (hcq/peer.py), so a run on one device computes while the host submits the next device's."""
  if knobs.get("JIT_NOGRAPH") or not any(isinstance(l.runner, _CopyRunner) for l in launches): return None
  segs: list[tuple[int, int, Any]] = []
  k, n = 0, len(launches)
  while k < n:
    e = k + 1
    if not isinstance(launches[k].runner, _CopyRunner):
      while e < n and not isinstance(launches[e].runner, _CopyRunner) and launches[e].runner.device == launches[k].runner.device: e += 1
    segs.append((k, e, _graph(launches[k:e]) if e - k > 1 else None))
    k = e
  return segs if any(g is not None for _, _, g in segs) else None

class jit:
  """Decorator: `@jit def step(x, y): ...`; returns what the function returns (tensors realized). JIT=0 turns it off."""
  def __init__(self, fn: Callable):
    self.fn = fn
    self.calls: dict[tuple, int] = {}
    self.captured: OrderedDict[tuple, _Captured] = OrderedDict()
    self.eager_only: set[tuple] = set()   # keys whose captures could not be replayed
    functools.update_wrapper(self, fn)

  def reset(self) -> None: self.calls.clear(); self.captured.clear(); self.eager_only.clear()

  def __call__(self, *args: Any, **kwargs: Any) -> Any:
    if not knobs.get("JIT"): return self.fn(*args, **kwargs)
    if not kwargs and all(type(a) is Tensor for a in args):
      # the common call, f(x, y): the same key and inputs _signature and _leaves make, without their recursion
      key = (tuple(map(_tensor_sig, args)), (), Tensor.training, Tensor._modes)
      ins = list(args)
      arrays: list = []
    else:
      try: key = _signature(args, kwargs)
      except _NoKey as e:
        if DEBUG() >= 1: print(f"jit {self._name()}: an argument of type {e} has no key: runs eagerly", file=sys.stderr)
        return self.fn(*args, **kwargs)
      ins = _leaves((args, kwargs))
      arrays = _arrays((args, kwargs))
    if (cap := self.captured.get(key)) is not None:
      if cap.valid():
        self.captured.move_to_end(key)
        return self._replay(cap, ins, arrays, _binds((args, kwargs)) if cap.has_vars else None)
      if DEBUG() >= 1: print(f"jit {self._name()}: the state a capture reads was replaced: capturing again", file=sys.stderr)
      del self.captured[key]
      self.calls[key] = 1
    n = self.calls.get(key, 0)
    self.calls[key] = n + 1
    if n == 0 or key in self.eager_only:
      out = self.fn(*args, **kwargs)
      for t in _leaves(out): t._realized()
      return out
    return self._capture(key, args, kwargs, ins, arrays)

  def _name(self) -> str: return getattr(self.fn, "__name__", "fn")

  def _capture(self, key: tuple, args: tuple, kwargs: dict, ins: list, arrays: list) -> Any:
    # the recording must start from buffers: an outside value it reads is never recomputed from state it changes
    realize_all_lazy()
    for t in ins: t._realized()
    before = live.all_tensors()  # id -> tensor (a WeakSet would compare tensors with ==)
    first_storage = _next_id()
    rec = _Capture()
    _realize.capturing.append(rec)
    lazy.reuse_from_id = first_storage
    _tensor_mod.host_watch = hosts = []
    try:
      out = self.fn(*args, **kwargs)
      out_ts = _leaves(out)
      for t in out_ts: t._realized()
    finally:
      _realize.capturing.remove(rec)
      lazy.reuse_from_id = 0
      _tensor_mod.host_watch = None
    if rec.interleaved:
      # another thread's kernels ran during the recording (and may have shared its schedule): not replayable as it is,
      # so the next call records again
      if DEBUG() >= 1: print(f"jit {self._name()}: another thread launched kernels while it was captured: capturing again", file=sys.stderr)
      self.calls[key] = 1
      return out
    if not rec.launches: return self._give_up(key, out, "it launched no kernels")
    in_storages = [_storage(t) for t in ins]
    in_pos = {id(t): i for i, t in enumerate(ins)}
    out_kinds: list[tuple] = []
    fresh: set[Storage] = set()
    for t in out_ts:
      if id(t) in in_pos: out_kinds.append(("input", in_pos[id(t)]))
      elif before.get(id(t)) is t: out_kinds.append(("same", t))
      else:
        st = _storage(t)
        if st.id < first_storage or st in in_storages:
          # made in the call but a name for older memory (Tensor(w)): not a value a replay can give fresh
          return self._give_up(key, out, "an output made inside the function aliases a buffer from outside it")
        fresh.add(st)
        out_kinds.append(("fresh", st, t.shape, t.dtype, t.device))
    written = {l.refs[i].storage for l in rec.launches for i in l.outs}
    if fresh - written: return self._give_up(key, out, "an output is host data made inside the function, not computed by a kernel")
    referenced = {r.storage for l in rec.launches for r in l.refs}
    # the tensors made from the array arguments: inputs of the replay, filled from the new arrays on every call
    array_ins: list[tuple[int, Any, str, Storage]] = []
    apos = {id(a): i for i, a in enumerate(arrays)}
    for src, dt, dev, u in hosts:
      st = base_of(u).arg.storage
      if src is not None and (i := apos.get(id(src))) is not None and arrays[i] is src:
        if st in written: return self._give_up(key, out, "it writes into a tensor made from an array argument")
        array_ins.append((i, dt, dev, st))
      elif arrays and st in referenced:
        return self._give_up(key, out, "its kernels read host data made in the call that may come from an array argument")
    state, guarded = [], []
    _adopt_owners({st for st in referenced if _owner(st) is None})
    for st in referenced - fresh - set(in_storages):
      o = _owner(st)
      if st.id < first_storage:
        # state from before the call: it must still belong to a live tensor, or the function read a value nobody holds
        if o is None: return self._give_up(key, out, "it reads or writes a buffer from before the call that no tensor holds any more")
        guarded.append((st, st.owner))
        if st in written: state.append(st)
      elif st in written and o is not None: state.append(st)  # made in the call and kept (p.grad): updated in place
    grads = [(weakref.ref(p), p.grad) for p in list(_all_grad_tensors.values()) if p.grad is not None and before.get(id(p.grad)) is not p.grad]
    written_inputs = [i for i, s in enumerate(in_storages) if s in written]
    outside = set(in_storages) | fresh | set(state) | {st for *_, st in array_ins} | {r.storage for r, _ in rec.checks}
    rehomed: set[Storage] = set()
    const = _constant_launches(rec.launches, first_storage, outside, written, rehomed) if knobs.get("JIT_HOIST") else []
    cap = _Captured(rec.launches, in_storages, out_kinds, out, state, guarded, grads, written_inputs, rec.checks, array_ins, const)
    if rehomed: cap.const_reads = [(st, -1) for st, _ in cap.const_reads]   # (the first replay makes the moved outputs)
    self.captured[key] = cap
    while len(self.captured) > MAX_CAPTURES: self.captured.popitem(last=False)
    return out

  def _give_up(self, key: tuple, out: Any, why: str) -> Any:
    if DEBUG() >= 1: print(f"jit {self._name()}: not replayable ({why}): runs eagerly", file=sys.stderr)
    self.eager_only.add(key)
    return out

  def _replay(self, cap: _Captured, ins: list, arrays: list, binds: dict[str, int] | None = None) -> Any:
    in_bufs = [t._realized() for t in ins]
    # each array argument copied in as the capture's Tensor(arr) did (kept until the replay is submitted)
    from_arrays = [(slots, Tensor(arrays[i], device=dev, dtype=dt)) for i, dt, dev, slots in cap.array_slots]
    written_in = [_storage(ins[i]) for i in cap.written_inputs]
    if cap.state or written_in:   # (a replay that updates nothing in place has no reader to compute first)
      owners = [o for st in cap.state if (o := _owner(st)) is not None] + [ins[i] for i in cap.written_inputs]
      prepare_write(set(cap.state) | set(written_in), exclude=owners)
    bindings = list(zip(cap.input_slots, in_bufs)) + [(slots, t._realized()) for slots, t in from_arrays]
    fresh: dict[Storage, BufRef] = {}  # outputs made in the function: new memory on every call
    for k, slots in cap.fresh_outs:
      fresh[k[1]] = r = BufRef(k[4], k[1].size, k[1].dtype)
      bindings.append((slots, r.ensure()))
    if cap.check_slots:
      flags = [(slots, checks.new_flag(dev), msg) for slots, dev, msg in cap.check_slots]
      cap.run(bindings + [(slots, flag) for slots, flag, _ in flags], binds)
      for _, flag, msg in flags: checks.submitted(flag, msg)
    else: cap.run(bindings, binds)
    # the state moves to its next version; its owners read that now
    for st in cap.state + written_in:
      new = st.next_ref()
      st.version = new.version
      if (o := _owner(st)) is not None and _storage(o) is st: o.uop = lazy.buffer_view(new, shape_of(o.uop))
    for pref, g in cap.grads:
      if (p := pref()) is not None: p.grad = g
    outs, made = [], {}
    for k in cap.out_kinds:
      if k[0] == "input": outs.append(ins[k[1]])
      elif k[0] == "same": outs.append(k[1])
      else:
        if (t := made.get(k[1])) is None:
          r = fresh[k[1]]
          made[k[1]] = t = _tensor_of(lazy.buffer_view(r, k[2]), k[4])
          r.storage.owner = weakref.ref(t)
        outs.append(t)
    return outs[0] if type(cap.out_template) is Tensor else _rebuild(cap.out_template, iter(outs))

def _adopt_owners(orphans: set[Storage]) -> None:
  """A storage whose owner is gone but that a live tensor still names whole (`Tensor.ones(1).reshape(())` keeps the
  reshape, not the tensor realized into it) belongs to that tensor now."""
  for st in orphans:
    if (ts := [t for t in live.viewers(st) if not base_of(t.uop).arg.stale]): st.owner = weakref.ref(ts[0])

def _next_id() -> int:
  """The id the next Storage or BufRef will get: everything made from now on has an id at least this."""
  from baregrad.engine import graph
  n = next(graph._ids)
  return n
