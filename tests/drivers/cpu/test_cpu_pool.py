"""The native thread pool (drivers/cpu_pool.py): every chunk of every launch runs exactly once, chunks are the same
contiguous ranges as the Python pool's, back-to-back launches (a late worker must not run a chunk of a newer launch
with an older launch's fields) stay exact, sleeping workers wake, and the CPU device runs its parallel kernels on it."""
from __future__ import annotations
import ctypes, threading, time
import numpy as np
import pytest
from baregrad.drivers.cpu_pool import native_pool, pool_unavailable

# mark(args, s, e): out[i] += s + 1 for i in [s, e), out = args[0]: a chunk run twice, or with another launch's range,
# shows in the totals
MARK_IR = """
define void @mark(ptr %args, i64 %s, i64 %e) {
entry:
  %out = load ptr, ptr %args, align 8
  br label %loop
loop:
  %i = phi i64 [ %s, %entry ], [ %i1, %body ]
  %c = icmp slt i64 %i, %e
  br i1 %c, label %body, label %done
body:
  %p = getelementptr inbounds i64, ptr %out, i64 %i
  %v = load i64, ptr %p
  %v1 = add i64 %v, %s
  %v2 = add i64 %v1, 1
  store i64 %v2, ptr %p
  %i1 = add i64 %i, 1
  br label %loop
done:
  ret void
}"""

@pytest.fixture(scope="module")
def mark():
  from baregrad.drivers.cpu_compile import LLVMCompiler
  from baregrad.drivers.elf_loader import load_elf
  img = load_elf(LLVMCompiler().compile(MARK_IR))
  yield img.symbol("mark")

@pytest.fixture
def pool():
  p = native_pool(3)
  if p is None: pytest.skip(f"no native pool here: {pool_unavailable()}")
  yield p
  p.stop()

def _expected(total: int, chunks: int) -> np.ndarray:
  """What one launch of mark adds: its chunk's start + 1 at every element (chunk c is [total*c//chunks, ...))."""
  starts = [total * c // chunks for c in range(chunks)]
  return np.array([max(s for s in starts if s <= i) + 1 for i in range(total)], np.int64)

def _launch(pool, fn: int, n: int, chunks: int) -> np.ndarray:
  out = (ctypes.c_int64 * n)()
  args = (ctypes.c_uint64 * 1)(ctypes.addressof(out))
  pool.run(fn, ctypes.addressof(args), n, chunks)
  return np.frombuffer(out, np.int64).copy()

def test_chunks_are_contiguous_ranges_run_once(pool, mark):
  for n, chunks in ((1001, 8), (7, 7), (64, 1), (100, 12)):
    np.testing.assert_array_equal(_launch(pool, mark, n, chunks), _expected(n, chunks))

def test_back_to_back_launches_stay_exact(pool, mark):
  # thousands of launches with alternating sizes over one buffer: every element gets exactly its chunk's start + 1 per
  # launch that covers it (a chunk run twice or run with another launch's bounds would add a different amount)
  n = 997
  out = (ctypes.c_int64 * n)()
  args = (ctypes.c_uint64 * 1)(ctypes.addressof(out))
  for k in range(3000):
    total, chunks = (n, 8) if k % 2 == 0 else (n // 2, 5)
    pool.run(mark, ctypes.addressof(args), total, chunks)
  want = 1500 * _expected(n, 8)
  want[:n // 2] += 1500 * _expected(n // 2, 5)
  np.testing.assert_array_equal(np.frombuffer(out, np.int64), want)

def test_sleeping_workers_wake(pool, mark):
  time.sleep(0.2)   # past the spin: the workers sleep on the futex
  for _ in range(5):
    np.testing.assert_array_equal(_launch(pool, mark, 64, 4), _expected(64, 4))
    time.sleep(0.02)

def test_launches_from_several_threads_are_serialized_by_the_caller(pool, mark):
  # the pool has one launch slot: the CPU queue runs one kernel at a time; two callers must take turns (a lock)
  lock, errors = threading.Lock(), []
  def go() -> None:
    for _ in range(200):
      with lock:
        got = _launch(pool, mark, 100, 4)
      if not np.array_equal(got, _expected(100, 4)): errors.append(got)
  ts = [threading.Thread(target=go) for _ in range(2)]
  for t in ts: t.start()
  for t in ts: t.join(timeout=60)
  assert not errors

def test_cpu_device_runs_parallel_kernels_on_the_native_pool():
  from baregrad import Tensor, Device
  eng = Device["CPU"].engines["compute"]
  if eng.pool.native is None: pytest.skip(f"no native pool here: {pool_unavailable()} (or CPU_THREADS=1)")
  x = Tensor(np.arange(1 << 20, dtype=np.float32))
  np.testing.assert_array_equal((x * 2 + 1).numpy(), np.arange(1 << 20, dtype=np.float32) * 2 + 1)
  assert not eng.pool.threads   # no Python pool threads beside it

def test_jit_replay_runs_big_kernels_as_one_pooled_chain():
  # a replay of kernels of known cost runs on the queue's worker as one trampoline call, big kernels split over the
  # native pool; every replay's result is right
  from baregrad import Tensor, Device, jit
  eng = Device["CPU"].engines["compute"]
  if eng.pool.native is None or eng.chain is None: pytest.skip("no native pool or no chain trampoline here")
  @jit
  def f(x: Tensor) -> Tensor:
    a = (x * 2).contiguous()
    b = (a + 1).contiguous()
    return (b * 3).contiguous()
  n = 1 << 21
  before, split = eng.pooled_chains, []
  for k in range(10):
    x = np.full(n, k, np.float32)
    np.testing.assert_array_equal(f(Tensor(x)).numpy(), (x * 2 + 1) * 3)
    if eng.last_pooled is not None: split.append(max(eng.last_pooled))
  assert eng.pooled_chains > before and max(split) > 1, "no replay ran as a pooled chain with a kernel split over the pool"

def test_caller_sleeps_while_a_worker_finishes_the_last_chunk():
  """A caller whose chunks are done waits for a worker's by sleeping, not spinning: with more runnable threads than
  cores (the host building the next graph), a spinning caller takes the core the worker needs. Chunk 1 runs on a
  worker for 60 ms; the caller, having run chunk 0, may spin only briefly before it sleeps."""
  pool = native_pool(2)
  if pool is None: pytest.skip(f"no native pool here: {pool_unavailable()}")
  caller = threading.get_ident()
  started = threading.Event()
  @ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
  def chunk(args, s, e):
    if threading.get_ident() == caller: started.wait(2.0)   # let the worker take the other chunk
    else:
      started.set()
      time.sleep(0.06)
  try:
    for _ in range(3):
      started.clear()
      cpu0, wall0 = time.thread_time(), time.perf_counter()
      pool.run(ctypes.cast(chunk, ctypes.c_void_p).value, 0, 2, 2)
      cpu, wall = time.thread_time() - cpu0, time.perf_counter() - wall0
      if started.is_set(): break
    assert started.is_set(), "the worker never took a chunk"
    assert wall >= 0.055, f"returned after {wall * 1e3:.1f} ms, before the worker's chunk ended"
    assert cpu < 0.03, f"the caller used {cpu * 1e3:.1f} ms of CPU over a {wall * 1e3:.1f} ms wait: it spun instead of sleeping"
  finally: pool.stop()

def _sleepers(p) -> int:
  from baregrad.drivers.cpu_pool import SLEEPERS
  return ctypes.c_int32.from_address(p.ctx + SLEEPERS).value

def _until_asleep(p, n: int, limit: float) -> float:
  st = time.perf_counter()
  while _sleepers(p) < n:
    if time.perf_counter() - st > limit: break
    time.sleep(0.0005)
  return time.perf_counter() - st

def test_workers_spin_for_a_time_then_sleep(mark, monkeypatch):
  """A worker spins about CPU_SPIN_US after its last launch (the pauses it takes are measured per machine: a pause is
  ~1 ns on some cores, ~40 on others), then sleeps on the futex; CPU_SPIN_US=0 sleeps at once."""
  from baregrad.drivers.cpu_pool import NativePool
  # (the upper bounds are loose: a spinning worker yields its core every 1024 pauses, and on a loaded 2-core CI machine
  # each yield may hand a whole time slice to the other test process, so the wall time of a spin stretches)
  for us, lo, hi in ((20_000, 0.01, 8.0), (0, 0.0, 0.5)):
    monkeypatch.setenv("CPU_SPIN_US", str(us))
    p = native_pool(2)
    if p is None: pytest.skip(f"no native pool here: {pool_unavailable()}")
    try:
      _launch(p, mark, 64, 4)
      took = _until_asleep(p, 1, 10.0)
      assert _sleepers(p) == 1 and lo <= took <= hi, (us, took)
      np.testing.assert_array_equal(_launch(p, mark, 64, 4), _expected(64, 4))   # (and it wakes for the next)
    finally: p.stop()
  a, b = NativePool.spin_pauses(p.image, 2000), NativePool.spin_pauses(p.image, 8000)
  assert NativePool.spin_pauses(p.image, 0) == 1 and 2 <= b / a <= 8, (a, b)

def test_a_bad_spin_setting_is_named(monkeypatch):
  monkeypatch.setenv("CPU_SPIN_US", "abc")
  if pool_unavailable() is not None: pytest.skip(f"no native pool here: {pool_unavailable()}")
  with pytest.raises(ValueError, match="CPU_SPIN_US must be a number of microseconds, got 'abc'"): native_pool(2)
