"""Schedules are cached by graph structure (engine/lazy.py): the same graph over new buffers reuses the cut into kernels,
with its own buffers, and gives its own values; what the cache must not change: results of graphs that differ only in a
constant's bits, fresh buffers for each realized result, errors on stale reads, in-place writes."""
from __future__ import annotations
import numpy as np
import pytest
from baregrad import Tensor
from baregrad.engine import lazy

@pytest.fixture
def schedules(monkeypatch):
  """Counts the schedules cut from scratch (not served by the cache)."""
  calls = []
  real = lazy.create_schedule
  monkeypatch.setattr(lazy, "create_schedule", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
  return calls

def test_same_structure_new_buffers_hits(schedules):
  rng = np.random.default_rng(0)
  xs = [rng.standard_normal((3, 5)).astype(np.float32) for _ in range(4)]
  outs = [((Tensor(x) * 2 + 1).relu().sum(1)).numpy() for x in xs]
  assert len(schedules) == 1   # cut once, reused for the three others
  for x, o in zip(xs, outs): np.testing.assert_allclose(o, np.maximum(x * 2 + 1, 0).sum(1), rtol=1e-6)

def test_each_result_gets_its_own_buffer():
  # a graph that reads no buffer is the same graph every time: each realize still gives a new buffer
  a, b = Tensor.zeros(3), Tensor.zeros(3)
  assert a.uop is not b.uop
  a.assign(Tensor([1.0, 2.0, 3.0]))
  assert b.numpy().tolist() == [0.0, 0.0, 0.0] and a.numpy().tolist() == [1.0, 2.0, 3.0]

def test_constants_differing_only_in_bits_are_different_graphs():
  x = Tensor(np.ones(2, np.float32))
  assert (1 / (x * 0.0)).numpy().tolist() == [np.inf, np.inf]
  assert (1 / (x * -0.0)).numpy().tolist() == [-np.inf, -np.inf]

def test_in_place_writes_repeat_from_the_cache(schedules):
  w = Tensor(np.ones(4, np.float32)).realize()
  w.assign(w + 1)
  n = len(schedules)
  for _ in range(3): w.assign(w + 1)    # the same write over the next versions: served by the cache
  assert len(schedules) == n
  y = w * 2                             # a reader of the current version keeps its value through a write
  w.assign(w + 1)
  np.testing.assert_allclose(y.numpy(), [10, 10, 10, 10])
  np.testing.assert_allclose(w.numpy(), [6, 6, 6, 6])

def test_stale_reads_still_raise():
  from baregrad.ir.ops import UOp
  (Tensor(np.ones(4, np.float32)).realize() * 2).realize()   # the structure is cached
  w = Tensor(np.ones(4, np.float32)).realize()
  old: UOp = (w * 2).uop                                      # a graph over w's version, held by no tensor
  w.assign(w + 1)
  with pytest.raises(RuntimeError, match="modified by an in-place operation"): Tensor(old).numpy()

def test_bounds_checks_run_from_the_cache(schedules):
  from baregrad import one_hot
  for _ in range(2): one_hot(Tensor([0, 1, 2]), 3).numpy()
  n = len(schedules)
  with pytest.raises(IndexError, match="class value 7"): one_hot(Tensor([0, 7, 2]), 3).numpy()
  assert len(schedules) == n   # the same structure, its check included: served by the cache, and the check still ran

def test_a_cached_single_kernel_runs_without_schedule_items(schedules, monkeypatch):
  # most eager ops are one kernel computing one result: from the cache it is launched directly (lazy._run_single), each
  # call on its own fresh output; in-place writes and jit captures keep the item path (they need its commit and its
  # recording), as do bounds checks (their flag: test_bounds_checks_run_from_the_cache)
  from baregrad.engine import realize as engine_realize
  items: list[int] = []
  real = lazy.run_schedule
  monkeypatch.setattr(lazy, "run_schedule", lambda its, *a: (items.append(len(its)), real(its, *a))[1])
  rng = np.random.default_rng(1)
  xs = [rng.standard_normal(7).astype(np.float32) for _ in range(3)]
  ts = [Tensor(x) for x in xs]
  outs = [(t * 3 - 1).realize() for t in ts]
  assert len(schedules) == 1 and items == [1]   # the first call cut and ran it; the others went direct
  bufs = {lazy.base_of(o.uop).arg.storage.id for o in outs}
  assert len(bufs) == 3
  for x, o in zip(xs, outs): np.testing.assert_array_equal(o.numpy(), x * 3 - 1)
  w = Tensor(np.zeros(7, np.float32)).realize()
  for k in range(3): w.assign(w + 1).realize()
  assert w.numpy().tolist() == [3.0] * 7 and len(items) >= 4   # each in-place write took the item path
  n = len(items)
  rec = []
  engine_realize.capturing.append(type("Rec", (), {"add_kernel": lambda self, r, it: rec.append(it), "add_copy": lambda self, it: None})())
  try: (ts[0] * 3 - 1).realize()
  finally: engine_realize.capturing.pop()
  assert len(items) == n + 1 and len(rec) == 1   # a capture sees the item

def _cyclic_garbage(run) -> list:
  """What run() left that only the cycle collector can free."""
  import gc
  gc.collect()
  gc.set_debug(gc.DEBUG_SAVEALL)
  try:
    run()
    gc.collect()
    return list(gc.garbage)
  finally:
    gc.set_debug(0)
    gc.garbage.clear()

def test_eager_ops_leave_no_reference_cycles():
  """An eager op frees what it made by reference counting. A cycle keeps graphs and the buffers they read alive until
  the next collection, and makes the collections themselves: a ctypes array type made per launch for its arguments
  (ctypes keeps those only weakly) was one, ~13 us of an eager op, whenever a collection had run since the last."""
  rng = np.random.default_rng(0)
  xs = [Tensor(rng.standard_normal(16).astype(np.float32)).realize() for _ in range(12)]
  ms = [Tensor(rng.standard_normal((8, 8)).astype(np.float32)).realize() for _ in range(12)]
  def ops(i: int) -> None:
    (xs[i] + 1).realize(); (ms[i] @ ms[i - 1]).realize(); (ms[i].sum(1) * 2 + 1).realize()
  for i in range(2): ops(i)   # compiled, schedules cut
  garbage = _cyclic_garbage(lambda: [ops(i) for i in range(2, 12)])
  assert not garbage, f"{len(garbage)} objects in reference cycles, e.g. {[type(o).__name__ for o in garbage[:8]]}"

def test_scheduling_leaves_no_reference_cycles():
  """Cutting a schedule (the cache cleared, the kernels compiled) makes no cycle either: a recursive closure is one,
  and it held every graph the scheduler walked."""
  rng = np.random.default_rng(1)
  ms = [Tensor(rng.standard_normal((8, 8)).astype(np.float32)).realize() for _ in range(6)]
  (ms[0].sum(1) * 2 + 1).realize()
  def cut() -> None:
    for m in ms[1:]:
      lazy._sched_cache.clear()
      (m.sum(1) * 2 + 1).realize()
  garbage = _cyclic_garbage(cut)
  fns = sorted({o.__qualname__ for o in garbage if callable(o) and getattr(o, "__module__", "").startswith("baregrad")})
  assert not fns, f"baregrad functions in reference cycles: {fns}"

def test_float32_constants_met_again_keep_their_bits():
  # truncate() remembers float32 roundings; a zero is never remembered (-0.0 == 0.0), nor a nan
  from baregrad.ir.dtype import truncate, dtypes
  import math
  for v in (0.0, -0.0, 0.0, -0.0):
    assert math.copysign(1, truncate(dtypes.float32, v)) == math.copysign(1, v)
  assert truncate(dtypes.float32, 0.1) == truncate(dtypes.float32, 0.1) == float(np.float32(0.1))
  assert truncate(dtypes.float32, 1) == 1.0 and truncate(dtypes.float32, True) == 1.0 and truncate(dtypes.float32, 2 ** 60 + 1) == float(np.float32(2 ** 60))
  assert math.isnan(truncate(dtypes.float32, math.nan)) and truncate(dtypes.float32, 1e39) == math.inf
  x = Tensor(np.ones(2, np.float32))
  for _ in range(2): assert (1 / (x * 0.0)).numpy().tolist() == [np.inf, np.inf] and (1 / (x * -0.0)).numpy().tolist() == [-np.inf, -np.inf]

def test_a_realized_value_lives_as_long_as_its_graph_node():
  """The realized value is kept on the node (its _realized slot): an equal graph built while the node lives reads its buffer; once the
  node and the tensors reading the buffer are gone, so is the buffer."""
  import gc, weakref
  from baregrad.engine.graph import base_of
  x = Tensor(np.arange(4, dtype=np.float32)).realize()
  y = x + 1
  u = y.uop
  y.realize()
  v = lazy.realized(u)
  assert v is not None and u._realized is v and base_of(y.uop) is base_of(v)
  z = x + 1                     # the same node (hash-consed): computed already
  assert z.uop is u and base_of(lazy.substitute_realized(z.uop)) is base_of(v)
  assert z.numpy().tolist() == [1.0, 2.0, 3.0, 4.0]
  storage = weakref.ref(base_of(v).arg.storage)
  del y, z, u, v
  gc.collect()
  assert storage() is None, "the buffer of a dead graph's value is still held"

def test_eviction_keeps_a_schedule_in_use(monkeypatch):
  """The cache evicts by the clock algorithm: an entry hit since the hand last passed it survives a sweep of new
  graphs, one never hit again leaves first, and the cache stays at its size."""
  monkeypatch.setattr(lazy, "SCHEDULE_CACHE_SIZE", 4)
  monkeypatch.setattr(lazy, "_sched_cache", {})
  x = Tensor(np.arange(8, dtype=np.float32)).realize()
  def key_of(t: Tensor) -> tuple: return lazy.cache_key(lazy._abstract([t.uop])[0], t.device)
  hot, cold = x + 1, x * 3
  hot_key, cold_key = key_of(hot), key_of(cold)
  hot.realize(); cold.realize()
  for c in range(2, 8):
    (x + 1).realize()   # a hit: the hot entry is marked used
    (x - c).realize()   # a new graph each time: something must go
    assert len(lazy._sched_cache) <= 4
    assert hot_key in lazy._sched_cache, f"the entry in use was evicted after {c - 1} new graphs"
  assert cold_key not in lazy._sched_cache
  assert (x + 1).numpy().tolist() == list(range(1, 9))

def test_a_computed_subgraph_is_read_not_recomputed(schedules):
  """A graph holding a node computed since it was built reads that node's buffer: the walk that makes the schedule
  key finds the computed node, the graph is substituted, and the key is the substituted graph's (one kernel, no
  multiply in it). The same structure over new buffers is then served by the cache."""
  from baregrad.ir.ops import Ops
  rng = np.random.default_rng(3)
  for i in range(3):
    xv = rng.standard_normal(8).astype(np.float32)
    x = Tensor(xv).realize()
    y = x * 2
    z = y + 1
    mul = y.uop
    y.realize()
    assert lazy.realized(mul) is not None and lazy._abstract([z.uop], True) is lazy._SUBSTITUTE
    items = z.schedule()
    assert len(items) == 1 and not any(u.op is Ops.MUL for u in items[0].ast.toposort())
    np.testing.assert_allclose(z.numpy(), xv * 2 + 1, rtol=1e-6)
    if i == 0: first = len(schedules)
  assert len(schedules) == first, "the later rounds' graphs (the same structures) were cut again"

def test_a_cached_single_kernel_result_is_recorded_on_its_node():
  """A cached single-kernel eager op records its buffer on the node it computed (lazy.realize's fast path, which skips
  set_realized's walk when the graph reads buffers), and a graph that reads no buffer is not recorded (its node names
  no device: set_realized)."""
  for _ in range(2): (Tensor(np.arange(4, dtype=np.float32)).realize() + 1).realize()   # (the structure cached)
  x = Tensor(np.arange(4, dtype=np.float32)).realize()
  y = x + 1
  u = y.uop
  y.realize()
  assert u._realized is not None and lazy.realized(u) is u._realized and y.numpy().tolist() == [1.0, 2.0, 3.0, 4.0]
  for _ in range(3):
    z = Tensor.full((4,), 2.0) * 3
    w = z.uop
    z.realize()
    assert w._realized is None and z.numpy().tolist() == [6.0] * 4

def test_graphs_with_copies_between_devices_hit(schedules):
  # a step moving values between devices (a data-parallel step's gradients, a sharded result gathered) is cached like
  # any other graph: each copy keeps its own source and target buffers, and a source written in place in between is
  # copied with its new value (the cached copy reads the buffer, not what it held when the schedule was cut)
  rng = np.random.default_rng(3)
  xs = [rng.standard_normal((4, 6)).astype(np.float32) for _ in range(3)]
  outs, cut = [], []
  for x in xs:
    a = Tensor(x, device="CPU:0").realize()
    outs.append(((a * 3).to("CPU:1") + 1).numpy())
    cut.append(len(schedules))
  assert cut[0] == cut[1] == cut[2], cut   # cut in the first round only
  for x, o in zip(xs, outs): np.testing.assert_allclose(o, x * 3 + 1, rtol=1e-6)
  a = Tensor(xs[0], device="CPU:0").realize()
  first = ((a * 3).to("CPU:1") + 1).numpy()
  a.assign(Tensor(xs[1], device="CPU:0")).realize()
  np.testing.assert_allclose(((a * 3).to("CPU:1") + 1).numpy(), xs[1] * 3 + 1, rtol=1e-6)
  np.testing.assert_allclose(first, xs[0] * 3 + 1, rtol=1e-6)
