"""HCQGraph: a list of kernels recorded once into a queue; a replay patches buffer addresses and the timeline values
in the encoded commands and submits once.

Two rules make a replay correct on a GPU (docs/hw/h100-580.159.04-findings.md#finding-6a, #finding-6b):
- Launches of one submission run concurrently unless a barrier separates them. Kernels that may depend on each
  other get memory_barrier() between them: every pair of consecutive kernels by default (the graph does not know
  what a kernel reads or writes); with `writes` (per kernel, the indices of the buffers it writes) only where a
  kernel touches memory that a kernel since the last barrier writes, or writes memory one of them reads (the jit
  passes them: tensor/jit.py _writes). A replay whose patched buffers would make two kernels between the same two
  barriers collide raises GraphPatchConflict before patching anything.
- A launch reads its arguments (on NV: its QMD and constant bank) while it is queued or running, so a replay never
  patches arguments a submitted replay may still read. The graph keeps `depth` recordings, each with its own
  argument memory, used in turn; before patching one, the host waits on the timeline for its previous submission.
A recording's queue is prepared for replays once (HWQueue.prepare_replay: AMD makes its AQL packets and PM4 IBs then),
so a replay patches the words that change (buffer addresses where they changed, the timeline values) and submits once."""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Any, Sequence
from baregrad.hal import profile
from baregrad.hcq.device import HCQDevice

@dataclass
class _Slot:
  q: Any
  args: list[Any]
  wait_idx: int
  signal_idx: int
  done: int = 0                      # timeline value after which this recording's arguments are free again
  addrs: dict | None = None          # (kernel, buffer index) -> the address its arguments hold now
  vals: dict = field(default_factory=dict)   # (kernel, variable index) -> the value its arguments hold now

class GraphPatchConflict(ValueError):
  """A replay's patched buffers make two kernels the graph runs without a barrier between them touch the same memory,
  one writing it (raised before anything is patched or submitted: the caller may run the kernels another way)."""

def _span(b: Any) -> tuple[int, int]:
  b = b._buf if hasattr(b, "_buf") else b
  return b.va_addr, b.va_addr + max(int(getattr(b, "size", 1) or 1), 1)

class HCQGraph:
  def __init__(self, dev: HCQDevice, kernels: Sequence[tuple[Any, list[Any], tuple, tuple, tuple]],
               writes: Sequence[Sequence[int]] | None = None, depth: int = 2) -> None:
    """kernels: (HCQProgram, raw buffers, vals, global_size, local_size) in launch order. writes (optional): for each
    kernel, the indices of the buffers it writes; without it every kernel is ordered after the one before. depth:
    replays that may be in flight at once."""
    if depth < 1: raise ValueError(f"depth={depth}: at least one recording")
    self.dev, self.kernels, self.depth = dev, list(kernels), depth
    if writes is not None and len(writes) != len(self.kernels):
      raise ValueError(f"writes has {len(writes)} entries for {len(self.kernels)} kernels")
    self.writes = None if writes is None else [set(w) for w in writes]
    self.sizes = [[_span(b)[1] - _span(b)[0] for b in bufs] for _, bufs, _, _, _ in self.kernels]
    self.barriers = self._plan([[_span(b)[0] for b in bufs] for _, bufs, _, _, _ in self.kernels])
    # the kernels between two barriers (a segment), which run concurrently: where a patch must not make two collide
    self._segment: list[list[int]] = []
    for k in range(len(self.kernels)):
      if k == 0 or k in self.barriers: self._segment.append([])
      self._segment[-1].append(k)
    self._segment_of = [seg for seg in self._segment for _ in seg]
    self.slots = [self._record() for _ in range(depth)]
    self.replays = 0
    self.addrs = dict(self.slots[0].addrs or {})  # (kernel, buffer index) -> the address the next replay must use
    self._patched: list[set] = []  # the keys patched by each of the last `depth` replays (the recordings that may lag)

  def _plan(self, addrs: list[list[int]]) -> set[int]:
    """Indices i of the kernels that need a barrier before them."""
    n = len(self.kernels)
    if self.writes is None: return set(range(1, n))
    out: set[int] = set()
    since_w: list[tuple[int, int]] = []
    since_r: list[tuple[int, int]] = []
    hit = lambda spans, pool: any(a < d and c < b for a, b in spans for c, d in pool)
    for i in range(n):
      spans = [(a, a + s) for a, s in zip(addrs[i], self.sizes[i])]
      w = [sp for j, sp in enumerate(spans) if j in self.writes[i]]
      r = [sp for j, sp in enumerate(spans) if j not in self.writes[i]]
      if hit(w + r, since_w) or hit(w, since_r):
        out.add(i)
        since_w, since_r = [], []
      since_w += w
      since_r += r
    return out

  def _record(self) -> _Slot:
    dev = self.dev
    q = dev.compute_queue_t()
    q.wait(dev.timeline_signal, 0)
    wait_idx = q.last
    args = []
    for i, (prg, bufs, vals, gs, ls) in enumerate(self.kernels):
      if i in self.barriers: q.memory_barrier()
      mem = dev.alloc_args_memory(prg.kernargs_size(len(bufs), len(vals)))
      st = prg.fill_kernargs(bufs, vals, kernargs=mem)
      q.exec(prg, st, gs, ls)
      args.append(st)
    q.signal(dev.timeline_signal, 0)
    q.prepare_replay(dev)   # (a replay patches the prepared submission's words and submits it: no packets made again)
    return _Slot(q, args, wait_idx, q.last, 0, {(k, i): _span(b)[0] for k, (_, bufs, _, _, _) in enumerate(self.kernels) for i, b in enumerate(bufs)},
                 {(k, j): v for k, (_, _, vals, _, _) in enumerate(self.kernels) for j, v in enumerate(vals)})

  def _collision(self, changed: dict[tuple[int, int], int]) -> tuple[int, int] | None:
    """Two kernels of one segment (no barrier between them) that the addresses `changed` ((kernel, buffer) -> address,
    the others as they are) make touch the same memory, one of them writing it; None if none. Only the changed buffers
    can collide where none did: each is compared with the buffers of the other kernels of its segment (what _plan would
    find for the new addresses, without planning the whole graph again)."""
    cur, sizes, writes = self.addrs, self.sizes, self.writes
    assert writes is not None
    for (k, i), a in changed.items():
      b = a + sizes[k][i]
      w = i in writes[k]
      for m in self._segment_of[k]:
        if m == k: continue
        for j, size in enumerate(sizes[m]):
          c = changed.get((m, j))
          if c is None: c = cur[(m, j)]
          if (w or j in writes[m]) and c < b and a < c + size: return (min(k, m), max(k, m))
    return None

  @property
  def args(self) -> list[Any]:
    """The argument states of the recording the next replay uses."""
    return self.slots[self.replays % self.depth].args

  def replay(self, patches: Sequence[tuple[int, int, int]] = (), var_patches: Sequence[tuple[int, int, int]] = ()) -> None:
    """patches: (kernel index, buffer argument index, new device address); they stay in effect for later replays.
    var_patches: (kernel index, variable index, value) for this replay (a symbolic size's value, ir/sint.py)."""
    dev = self.dev
    cur = self.addrs
    keys = {(k, i) for k, i, _ in patches}
    if not keys <= cur.keys():
      k, i = next(ki for ki in keys if ki not in cur)
      raise IndexError(f"patch ({k}, {i}): the graph has no buffer {i} in kernel {k}")
    if self.writes is not None and patches:   # (a kernel alone between two barriers collides with nothing)
      seg_of = self._segment_of
      changed = {(k, i): addr for k, i, addr in patches if len(seg_of[k]) > 1 and cur[(k, i)] != addr}
      if changed and (hit := self._collision(changed)) is not None:
        raise GraphPatchConflict(f"replay: the patched buffers make kernels {hit[0]} and {hit[1]} depend on each other where the graph "
                         "has no barrier between them; record the graph for these buffers (or without `writes`)")
    for k, i, addr in patches: cur[(k, i)] = addr
    # a recording differs from what is wanted only where a replay since its own last one patched: compare those alone
    self._patched.append(keys)
    if len(self._patched) > self.depth: self._patched.pop(0)
    s = self.slots[self.replays % self.depth]
    dev.timeline_signal.wait(s.done)   # its last submission finished: nothing queued or running reads these arguments
    assert s.addrs is not None
    for ks in self._patched:
      for key in ks:
        if s.addrs[key] != (addr := cur[key]):
          s.args[key[0]].update_buffer(key[1], addr)
          s.addrs[key] = addr
    for k, j, v in var_patches:
      if (k, j) not in s.vals: raise IndexError(f"variable patch ({k}, {j}): kernel {k} has {len(self.kernels[k][2])} variables")
      if s.vals[(k, j)] != v:
        s.args[k].update_var(j, v)
        s.vals[(k, j)] = v
    if dev.capture is not None:   # NV_CAPTURE / AMD_CAPTURE: each launch on its own, recorded as a launch
      self._replay_captured(s)
      self.replays += 1
      return
    with dev.submit_lock:
      st = profile.stamp(dev)  # PROFILE=1: one timestamp before and one after the graph (None otherwise)
      s.q.update_wait(s.wait_idx, value=dev.timeline_value - 1)
      s.done = dev.next_timeline()
      s.q.update_signal(s.signal_idx, value=s.done)
      s.q.submit(dev)
      en = profile.stamp(dev)
    self.replays += 1
    if st and en: profile.device_op(dev, s.q, f"graph of {len(s.args)} kernels", "graph", (st[0], en[0]), en[1])

  def _replay_captured(self, s: _Slot) -> None:
    """A replay under *_CAPTURE=DIR (hcq/capture.py): the recording's launches are submitted one at a time, each with
    the argument memory (kernargs, NV: QMD and constant bank) the recording holds, patched as this replay asks, and
    recorded with the same per-launch files as a direct launch (code, descriptor, each buffer before and after), so a
    replay of the capture runs them. The device is synchronized around each launch to read its buffers: capture
    changes timing (and the graph's single submission becomes one per kernel), not results."""
    from types import SimpleNamespace
    from baregrad.hcq.capture import read_buffer
    dev, cap = self.dev, self.dev.capture
    assert s.addrs is not None
    for k, (prg, _, vals, gs, ls) in enumerate(self.kernels):
      if k == 0: dev.synchronize()   # then each launch is waited for before the next one's inputs are read
      bufs = [SimpleNamespace(va_addr=s.addrs[(k, i)], size=size) for i, size in enumerate(self.sizes[k])]
      before = [read_buffer(dev, b) for b in bufs]
      q = dev.compute_queue_t()
      with dev.submit_lock:
        q.wait(dev.timeline_signal, dev.timeline_value - 1)
        q.exec(prg, s.args[k], gs, ls)
        q.signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
      dev.synchronize()
      after = [read_buffer(dev, b) for b in bufs]
      cap.launch(prg.name, prg.lib, gs, ls, [s.vals[(k, j)] for j in range(len(vals))], prg.capture_descriptor(s.args[k]),
                 [(b.va_addr, b.size, x, y) for b, x, y in zip(bufs, before, after)], timeline=dev.timeline_value - 1,
                 graph={"replay": self.replays, "kernel": k, "kernels": len(self.kernels)})
    s.done = dev.timeline_value - 1
