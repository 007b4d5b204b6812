"""HCQ conformance: the same tests for every HCQ device (today the CPU; the mock NV joins HCQ_DEVICES later).

Kernels follow the CPU ABI: void NAME(const uint64_t *args, int64_t start, int64_t end)."""
from __future__ import annotations
from tests.paths import REPO
import importlib, os, shutil, subprocess, time
import numpy as np
import pytest
from baregrad.hal import Device, Buffer
from baregrad.hcq import HCQDevice, HCQSignal, HCQTimeout, HWQueue
from baregrad.ir.dtype import dtypes

HCQ_DEVICES = os.environ.get("HCQ_TEST_DEVICES", "CPU").split(",")

KERNELS_C = r"""
#include <stdint.h>
/* out[i] = val for i in [start, end): args = (out, val) */
void fill(const uint64_t *args, int64_t start, int64_t end) {
  int32_t *out = (int32_t *)args[0]; int64_t val = (int64_t)args[1];
  for (int64_t i = start; i < end; i++) out[i] = (int32_t)val + (int32_t)i;
}
/* a[i] += 1 */
void inc(const uint64_t *args, int64_t start, int64_t end) {
  int32_t *a = (int32_t *)args[0];
  for (int64_t i = start; i < end; i++) a[i] += 1;
}
/* out[i] = index of the thread chunk start: records how the range was split */
void chunk(const uint64_t *args, int64_t start, int64_t end) {
  int64_t *out = (int64_t *)args[0];
  for (int64_t i = start; i < end; i++) out[i] = start;
}
/* slow writer: busy work before writing, so a racing reader would see zeros */
void slow_fill(const uint64_t *args, int64_t start, int64_t end) {
  int32_t *out = (int32_t *)args[0]; volatile int64_t spin = 0;
  for (int64_t k = 0; k < 3000000; k++) spin += k;
  for (int64_t i = start; i < end; i++) out[i] = 7;
}
"""

try:
  from baregrad.drivers.elf_loader import load_elf  # noqa: F401
  HAVE_LOADER = True
except ImportError:
  HAVE_LOADER = False

@pytest.fixture(scope="session")
def cpu_object(tmp_path_factory) -> bytes:
  if not HAVE_LOADER: pytest.skip("baregrad.drivers.elf_loader has not landed on this branch: CPU kernels cannot be loaded")
  if shutil.which("gcc") is None: pytest.skip("gcc not found: the CPU test kernels are compiled with gcc -c")
  d = tmp_path_factory.mktemp("kernels")
  (d / "k.c").write_text(KERNELS_C)
  subprocess.run(["gcc", "-c", "-O2", "-fPIC", str(d / "k.c"), "-o", str(d / "k.o")], check=True)
  return (d / "k.o").read_bytes()

@pytest.fixture(params=HCQ_DEVICES)
def hcq_device(request) -> HCQDevice:
  dev = Device[request.param]
  assert isinstance(dev, HCQDevice)
  yield dev
  dev.synchronize(timeout_ms=5000)  # a test must leave its device idle

def _cpu_lib(request) -> bytes: return request.getfixturevalue("cpu_object")

# device base name -> function(request) returning the binary with the kernels fill, inc, slow_fill (or a dict of them)
# (same names and argument order on every device: buffers, then int64 values). The mock NV adds its own.
KERNEL_PROVIDERS = {"CPU": _cpu_lib}
def _nv_lib(request) -> bytes:   # PTX, run by the mock GPU (MOCKGPU=1)
  return importlib.import_module("tests.drivers.nv.test_nv_mock").NV_KERNELS_PTX.encode()
def _amd_lib(request) -> bytes:  # LLVM IR -> code object
  return importlib.import_module("tests.drivers.amd.test_amd_mock").amd_kernels(request.getfixturevalue("hcq_device").target.name)
def _qcom_lib(request) -> dict[str, bytes]:   # NIR -> ir3, one program per kernel, run by the mock Adreno
  return importlib.import_module("tests.drivers.qcom.hcq_kernels").qcom_hcq_kernels(request.getfixturevalue("hcq_device").gpu_id)
KERNEL_PROVIDERS["NV"], KERNEL_PROVIDERS["AMD"], KERNEL_PROVIDERS["QCOM"] = _nv_lib, _amd_lib, _qcom_lib

@pytest.fixture
def kernel(hcq_device, request):
  """kernel(name) -> a Program for the device under test."""
  provider = KERNEL_PROVIDERS.get(hcq_device.device.split(":")[0])
  if provider is None: pytest.skip(f"no test kernels for {hcq_device.device} yet (add one to KERNEL_PROVIDERS)")
  lib = provider(request)   # one binary with every kernel, or name -> binary where a binary holds one (ir3)
  return lambda name: hcq_device.runtime(hcq_device, name, lib[name] if isinstance(lib, dict) else lib)

def i32(buf: Buffer) -> list[int]: return np.frombuffer(buf.as_memoryview(), np.int32).tolist()

# ---------------------------------------------------------------- basics
def test_program_call_and_vals(hcq_device, kernel):
  out = Buffer(hcq_device.device, 10, dtypes.int32).allocate()
  kernel("fill")(out._buf, global_size=(10, 1, 1), vals=(-5,))
  hcq_device.synchronize()
  assert i32(out) == [-5 + i for i in range(10)]

def test_wait_returns_kernel_time(hcq_device, kernel):
  out = Buffer(hcq_device.device, 4, dtypes.int32).allocate()
  t = kernel("fill")(out._buf, global_size=(4, 1, 1), vals=(1,), wait=True)
  assert isinstance(t, float) and 0 < t < 5

def test_timeline(hcq_device, kernel):
  a = Buffer(hcq_device.device, 8, dtypes.int32).copyin(memoryview(np.zeros(8, np.int32)))
  inc = kernel("inc")
  before = hcq_device.timeline_value
  for _ in range(20): inc(a._buf, global_size=(8, 1, 1))
  assert hcq_device.timeline_value == before + 20
  hcq_device.synchronize()
  assert hcq_device.timeline_signal.value == hcq_device.timeline_value - 1
  assert i32(a) == [20] * 8

# ---------------------------------------------------------------- ordering, timeouts
def test_cross_queue_ordering(hcq_device, kernel):
  if hcq_device.copy_queue_t is None: pytest.skip(f"{hcq_device.device} has no copy queue")
  dev, n = hcq_device, 64
  src = Buffer(dev.device, n, dtypes.int32).copyin(memoryview(np.zeros(n, np.int32)))
  dst = Buffer(dev.device, n, dtypes.int32).copyin(memoryview(np.zeros(n, np.int32)))
  dev.synchronize()
  ready, done = HCQSignal(dev, 0), HCQSignal(dev, 0)
  # the copy queue is submitted FIRST and must wait for the compute queue's signal
  dev.copy_queue_t().wait(ready, 1).copy(dst._buf.va_addr, src._buf.va_addr, 4 * n).signal(done, 1).submit(dev)
  prg = kernel("slow_fill")
  dev.compute_queue_t().exec(prg, prg.fill_kernargs([src._buf]), (n, 1, 1)).signal(ready, 1).submit(dev)
  done.wait(1, timeout_ms=10000)
  assert ready.value == 1 and i32(dst) == [7] * n

def test_timeout_reports_queue_state(hcq_device):
  if hcq_device.copy_queue_t is None: pytest.skip(f"{hcq_device.device} has no copy queue")
  dev = hcq_device
  never, done = HCQSignal(dev, 0), HCQSignal(dev, 0)
  dev.copy_queue_t().wait(never, 42).signal(done, 1).submit(dev)
  t0 = time.perf_counter()
  with pytest.raises(HCQTimeout) as e: done.wait(1, timeout_ms=100)
  assert 0.09 < time.perf_counter() - t0 < 3
  msg = str(e.value)
  assert f"{done.va_addr:#x} >= 1" in msg and "timed out after 100 ms" in msg
  assert "WAIT" in msg and f"{never.va_addr:#x}" in msg and "value=42" in msg  # the stuck command, decoded
  never.value = 42  # release it: the queue finishes and the device is idle again
  done.wait(1, timeout_ms=5000)

# ---------------------------------------------------------------- recorded queues: patch and replay
def test_patch_and_resubmit(hcq_device, kernel):
  dev = hcq_device
  a = Buffer(dev.device, 16, dtypes.int32).allocate()
  b = Buffer(dev.device, 16, dtypes.int32).copyin(memoryview(np.zeros(16, np.int32)))
  c = Buffer(dev.device, 16, dtypes.int32).copyin(memoryview(np.zeros(16, np.int32)))
  dev.synchronize()
  prg, sig = kernel("fill"), HCQSignal(dev, 0)
  args = prg.fill_kernargs([a._buf], [100], kernargs=dev.alloc_args_memory(64))
  q = dev.compute_queue_t().exec(prg, args, (16, 1, 1))
  i_exec = q.last
  q.memory_barrier()  # the copy reads what the kernel wrote: on a GPU the two would otherwise run concurrently
  q.copy(b._buf.va_addr, a._buf.va_addr, 4 * 16)
  i_copy = q.last
  q.signal(sig, 1)
  i_sig = q.last
  q.submit(dev)
  sig.wait(1, timeout_ms=5000)
  assert i32(b) == [100 + i for i in range(16)]
  # patch: kernel arg, copy destination and size, signal value; exec range shrinks to 8
  args.update_var(0, 200)
  q.update_exec(i_exec, global_size=(8, 1, 1)).update_copy(i_copy, dest=c._buf.va_addr, nbytes=4 * 8).update_signal(i_sig, value=2)
  assert q.field(i_copy, "dest") == c._buf.va_addr
  q.submit(dev)
  sig.wait(2, timeout_ms=5000)
  assert i32(c) == [200 + i for i in range(8)] + [0] * 8
  assert i32(b) == [100 + i for i in range(16)]  # untouched by the replay
  # patch a buffer address: the kernel now writes b directly
  args.update_buffer(0, b._buf.va_addr)
  args.update_var(0, -1)
  q.update_signal(i_sig, value=3).submit(dev)
  sig.wait(3, timeout_ms=5000)
  assert i32(b)[:8] == [-1 + i for i in range(8)]

def test_graph_replay(hcq_device, kernel):
  dev, N = hcq_device, 50
  a = Buffer(dev.device, 32, dtypes.int32).copyin(memoryview(np.zeros(32, np.int32)))
  dev.synchronize()
  prg = kernel("inc")
  args = prg.fill_kernargs([a._buf], kernargs=dev.alloc_args_memory(64))
  q = dev.compute_queue_t().wait(dev.timeline_signal, 0)
  for _ in range(3): q.exec(prg, args, (32, 1, 1))
  q.signal(dev.timeline_signal, 0)
  for _ in range(N):  # one submit per replay; only the timeline values are patched
    q.update_wait(0, value=dev.timeline_value - 1).update_signal(q.last, value=dev.next_timeline()).submit(dev)
  dev.synchronize()
  assert i32(a) == [3 * N] * 32

def test_graph_barriers_and_argument_ring(hcq_device, kernel):
  """HCQGraph: fill(a) then inc(a) depend on each other, so a barrier separates them; ten replays are submitted back to
  back, each writing a different buffer (patched), none waiting for the one before: every buffer gets its own result,
  so no replay patched arguments a queued one still read (hw/h100-580.159.04 findings 6a, 6b)."""
  from baregrad.hcq.graph import HCQGraph
  dev = hcq_device
  bufs = [Buffer(dev.device, 16, dtypes.int32).copyin(memoryview(np.zeros(16, np.int32))) for _ in range(10)]
  dev.synchronize()
  fill, inc = kernel("fill"), kernel("inc")
  g = HCQGraph(dev, [(fill, [bufs[0]._buf], (5,), (16, 1, 1), (1, 1, 1)), (inc, [bufs[0]._buf], (), (16, 1, 1), (1, 1, 1))])
  assert g.barriers == {1} and "BARRIER" in g.slots[0].q.decode().upper()
  for b in bufs: g.replay([(0, 0, b._buf.va_addr), (1, 0, b._buf.va_addr)])
  dev.synchronize()
  for b in bufs: assert i32(b) == [6 + i for i in range(16)]
  # with write sets, kernels on different buffers need no barrier; ones sharing a written buffer do
  g2 = HCQGraph(dev, [(fill, [bufs[0]._buf], (1,), (16, 1, 1), (1, 1, 1)), (fill, [bufs[1]._buf], (2,), (16, 1, 1), (1, 1, 1)),
                      (inc, [bufs[1]._buf], (), (16, 1, 1), (1, 1, 1))], writes=[[0], [0], [0]])
  assert g2.barriers == {2}
  g2.replay()
  dev.synchronize()
  assert i32(bufs[0]) == [1 + i for i in range(16)] and i32(bufs[1]) == [3 + i for i in range(16)]
  with pytest.raises(ValueError, match="no barrier"): g2.replay([(0, 0, bufs[1]._buf.va_addr)])  # now kernel 0 and 1 collide

def test_graph_runs_independent_kernels_together_and_a_missing_barrier_is_reported(hcq_device, kernel):
  """With write sets, kernels on separate buffers get no barrier between them (they may overlap on the device), and the
  mock GPU, which runs such kernels interleaved, finds no hazard. Write sets that leave a real dependency out (fill
  writes a, inc then reads it, declared as writing nothing) leave the two unordered: the mock must report the
  read-after-write (NV: no wait-for-idle between the launches, finding 6b; AMD: no barrier bit, HSA PSA 2.9.1)."""
  from baregrad.hcq.graph import HCQGraph
  dev = hcq_device
  mock = getattr(getattr(dev, "port", None), "mock", None)
  if mock is None or not hasattr(mock, "hazards"): pytest.skip(f"{dev.device}: no mock GPU that reports hazards")
  a, b = (Buffer(dev.device, 16, dtypes.int32).copyin(memoryview(np.zeros(16, np.int32))) for _ in range(2))
  dev.synchronize()
  fill, inc = kernel("fill"), kernel("inc")
  n = len(mock.hazards)
  g = HCQGraph(dev, [(fill, [a._buf], (1,), (16, 1, 1), (1, 1, 1)), (fill, [b._buf], (2,), (16, 1, 1), (1, 1, 1))], writes=[[0], [0]])
  assert g.barriers == set() and "BARRIER" not in g.slots[0].q.decode().upper()
  g.replay()
  dev.synchronize()
  assert i32(a) == [1 + i for i in range(16)] and i32(b) == [2 + i for i in range(16)] and mock.hazards[n:] == []
  bad = HCQGraph(dev, [(fill, [a._buf], (5,), (16, 1, 1), (1, 1, 1)), (inc, [a._buf], (), (16, 1, 1), (1, 1, 1))], writes=[[], []])
  assert bad.barriers == set()
  bad.replay()
  dev.synchronize()
  assert any("read-after-write hazard" in h for h in mock.hazards[n:]), mock.hazards[n:]

def test_timestamps_monotonic(hcq_device, kernel):
  dev = hcq_device
  out = Buffer(dev.device, 64, dtypes.int32).allocate()
  prg = kernel("fill")
  sigs = [HCQSignal(dev) for _ in range(4)]
  q = dev.compute_queue_t().wait(dev.timeline_signal, dev.timeline_value - 1)
  for s in sigs: q.timestamp(s).exec(prg, prg.fill_kernargs([out._buf], [0]), (64, 1, 1))
  q.signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
  dev.synchronize()
  ts = [s.timestamp for s in sigs]
  assert ts[0] > 0 and ts == sorted(ts)
  assert sigs[1].timestamp_us() >= sigs[0].timestamp_us()

def test_decode_names_fields(hcq_device, kernel):
  dev = hcq_device
  s = HCQSignal(dev)
  q = dev.compute_queue_t().wait(s, 5).timestamp(s).memory_barrier().copy(0x1000, 0x2000, 64).signal(s, 6)
  text = q.decode()
  lines = text.splitlines()
  assert len(lines) == 5, text
  for word in ("WAIT", "TIMESTAMP", "BARRIER", "COPY", "SIGNAL"): assert word in text.upper()
  assert "value=5" in lines[0] and "nbytes=64" in lines[3] and "value=6" in lines[4]
  with pytest.raises(ValueError, match="is a wait, not a signal"): q.update_signal(0, value=1)
  with pytest.raises(ValueError): HWQueue.wait(dev.compute_queue_t(), s, -1)

# ---------------------------------------------------------------- CPU device specifics
import sys, textwrap, threading
from baregrad.helpers import Context

def test_cpu_range_split_over_threads(cpu_object):
  dev, n = Device["CPU"], 1001
  if dev.threads == 1: pytest.skip("CPU_THREADS=1: one thread, no split to check")
  out = Buffer("CPU", n, dtypes.int64).allocate()
  dev.runtime(dev, "chunk", cpu_object, min_chunk=1)(out._buf, global_size=(n, 1, 1))  # force a split
  dev.synchronize()
  starts = np.frombuffer(out.as_memoryview(), np.int64)
  from baregrad.drivers.cpu_engine import ThreadPool
  m = ThreadPool.CHUNKS_PER_THREAD * dev.threads  # contiguous chunks, a few per thread, taken by whichever thread is free
  assert sorted(set(starts.tolist())) == [n * i // m for i in range(m)]
  dev.runtime(dev, "chunk", cpu_object, min_chunk=600)(out._buf, global_size=(n, 1, 1))  # hint: >= 600 items per thread
  dev.synchronize()
  assert set(np.frombuffer(out.as_memoryview(), np.int64).tolist()) == {0}
  out2 = Buffer("CPU", 1, dtypes.int64).allocate()
  dev.runtime(dev, "chunk", cpu_object)(out2._buf, global_size=(1, 1, 1))  # tiny: one call (0, 1)
  dev.synchronize()
  assert np.frombuffer(out2.as_memoryview(), np.int64).tolist() == [0]

def test_cpu_pool_learns_cost():
  from baregrad.drivers.cpu_engine import ThreadPool
  p = ThreadPool(4, split_ns=50_000)
  try:
    assert p.chunks(1, 1000, 0) == 4            # unknown cost: split
    p.cost[1] = 1.0                             # 1 ns/item: 1000 items are not worth a handoff
    assert p.chunks(1, 1000, 0) == 1
    p.cost[1] = 200.0                           # 200 µs of work: 4 chunks of 50 µs
    assert p.chunks(1, 1000, 0) == 4 and p.chunks(1, 1000, 500) == 2 and p.chunks(1, 1, 0) == 1
  finally: p.stop()

def test_cpu_pool_late_thread_does_not_hold_up_a_launch():
  # chunks are taken by whichever thread is free: with a helper the OS never wakes, the caller runs them all and returns
  from baregrad.drivers.cpu_engine import ThreadPool
  p = ThreadPool(2)
  class Asleep:
    def release(self) -> None: pass
  try:
    p.threads[0].go = Asleep()
    ran: list[tuple[int, int]] = []
    p.run(7, lambda args, s, e: ran.append((s, e)), 0, 1000, min_chunk=1)
    assert sorted(ran) == [(1000 * i // 8, 1000 * (i + 1) // 8) for i in range(8)]
  finally: p.stop()

def test_cpu_idle_queue_runs_short_buffers_inline(cpu_object):
  # a kernel of known small cost on an idle queue runs on the submitting thread; one behind an unsatisfied wait goes to
  # the worker (the host must not block on it), and runs once the host signals
  dev = Device["CPU"]
  eng = dev.engines["compute"]
  a = Buffer("CPU", 4, dtypes.int32).copyin(memoryview(np.zeros(4, np.int32)))   # (recycled memory is not zeroed)
  inc = dev.runtime(dev, "inc", cpu_object)
  inc(a._buf, global_size=(4, 1, 1), wait=True)   # first launch: unknown cost, the worker runs it and measures it
  eng.pool.cost[inc.fxn_addr] = 1.0                # what a few more launches would settle to: ns per item
  before = eng.inlined
  for _ in range(5): inc(a._buf, global_size=(4, 1, 1))
  dev.synchronize()
  assert eng.inlined - before == 5
  gate = dev.signal_t(dev, 0)
  q = dev.compute_queue_t()
  q.wait(gate, 1).exec(inc, inc.fill_kernargs([a._buf]), (4, 1, 1), (1, 1, 1)).signal(dev.timeline_signal, tv := dev.next_timeline())
  q.submit(dev)   # returns: the wait is not satisfied, the buffer is the worker's
  assert eng.inlined - before == 5 and dev.timeline_signal.value < tv
  gate.value = 1
  dev._signal_written()
  dev.synchronize()
  assert np.frombuffer(a.as_memoryview(), np.int32).tolist() == [7] * 4
  # on an idle queue a buffer runs inline up to a wait that is not satisfied; the worker takes the rest
  pre, gate2 = dev.signal_t(dev, 0), dev.signal_t(dev, 0)
  dev.compute_queue_t().signal(pre, 5).wait(gate2, 1).signal(dev.timeline_signal, tv2 := dev.next_timeline()).submit(dev)
  try: assert pre.value == 5 and dev.timeline_signal.value < tv2
  finally:
    gate2.value = 1
    dev._signal_written()
  dev.synchronize()
  assert dev.timeline_signal.value >= tv2

def test_cpu_replay_of_a_chain_is_one_native_call(cpu_object, monkeypatch):
  # a graph replay of tiny kernels of known cost (fill, barrier, inc, barrier, inc, ...) runs on the submitting thread
  # through the native trampoline: one call for the whole chain, in order (each inc sees the one before), the timeline
  # written after it; a kernel of unknown cost ends the chain and the worker runs the rest; PROFILE keeps the per-kernel path
  from baregrad.hcq.graph import HCQGraph
  from baregrad.hal import profile
  dev = Device["CPU"]
  eng = dev.engines["compute"]
  if eng.chain is None: pytest.skip("CPU_CHAIN=0 or CPU_INLINE=0: no trampoline")
  a = Buffer("CPU", 16, dtypes.int32).copyin(memoryview(np.zeros(16, np.int32)))
  dev.synchronize()
  fill, inc = dev.runtime(dev, "fill", cpu_object), dev.runtime(dev, "inc", cpu_object)
  g = HCQGraph(dev, [(fill, [a._buf], (5,), (16, 1, 1), (1, 1, 1))] + [(inc, [a._buf], (), (16, 1, 1), (1, 1, 1))] * 4)
  eng.pool.cost[fill.fxn_addr] = eng.pool.cost[inc.fxn_addr] = 1.0   # known, tiny (what a few launches settle to)
  g.replay(); dev.synchronize()                                     # builds the trampoline (once per process)
  if eng.chain in (None, True): pytest.skip("the trampoline cannot be built here")
  native, calls = eng.chain, []
  monkeypatch.setattr(eng, "chain", lambda *a: calls.append(a) or native(*a))
  monkeypatch.setattr(eng, "_fxns", {})   # a per-kernel launch would make its ctypes function here
  chains, inlined, tv = eng.chains, eng.inlined, dev.timeline_value
  g.replay()
  assert dev.timeline_signal.value == tv and len(calls) == 1 and eng.chains == chains + 1 and eng.inlined == inlined + 1
  assert eng._fxns == {} and i32(a) == [9 + i for i in range(16)]
  g.replay(); dev.synchronize()           # the other recording (depth 2)
  assert len(calls) == 2 and i32(a) == [9 + i for i in range(16)]
  eng.pool.cost.pop(inc.fxn_addr)         # inc's cost unknown (as after its program is freed): fill runs alone (no
  eng._chain_plans.clear()                # chain), the worker runs the rest: the first inc through the pool (which
  g.replay(); dev.synchronize()           # learns its cost), the others as one pooled chain where the native pool is
  assert len(calls) == 2 + (eng.pool.native is not None) and i32(a) == [9 + i for i in range(16)]
  assert all(c[3] is not None for c in calls[2:])   # (a pooled chain passes its chunk counts)
  eng.pool.cost[inc.fxn_addr] = 1.0
  n = len(calls)
  monkeypatch.setattr(profile, "ON", True)
  g.replay(); dev.synchronize()
  assert len(calls) == n and i32(a) == [9 + i for i in range(16)]

def test_cpu_chain_trampoline_stops_at_other_commands(cpu_object):
  # the trampoline runs EXECs (gx=0 calls nothing) and skips BARRIERs; it stops at any other command or at `end`
  from array import array
  from baregrad.drivers.cpu_encoding import CPUComputeQueue, _chain_runner, _EXEC_WORDS
  from baregrad.drivers.cpu_chain import chain_unavailable
  dev = Device["CPU"]
  if (run := _chain_runner()) is None: pytest.skip(f"the trampoline cannot be built here: {chain_unavailable()}")
  a = Buffer("CPU", 4, dtypes.int32).copyin(memoryview(np.zeros(4, np.int32)))
  dev.synchronize()
  inc = dev.runtime(dev, "inc", cpu_object)
  st = inc.fill_kernargs([a._buf], kernargs=dev.alloc_args_memory(64))
  q = CPUComputeQueue().exec(inc, st, (4, 1, 1)).memory_barrier().exec(inc, st, (0, 1, 1)).exec(inc, st, (4, 1, 1))
  n = len(q.words)
  q.signal(dev.signal_t(dev, 0), 1).exec(inc, st, (4, 1, 1))
  ws = array("I", q.words)
  assert run(ws.buffer_info()[0], 0, len(ws), None, None, None) == n and i32(a) == [2] * 4          # stopped at the signal
  assert run(ws.buffer_info()[0], 0, n - 1, None, None, None) == n - _EXEC_WORDS and i32(a) == [3] * 4      # the last exec does not fit

def test_cpu_copy_queue_cannot_exec(cpu_object):
  dev = Device["CPU"]
  prg = dev.runtime(dev, "inc", cpu_object)
  with pytest.raises(NotImplementedError, match="copy queue"): dev.copy_queue_t().exec(prg, prg.fill_kernargs([]), (1, 1, 1))

def test_cpu_ring_wraps(cpu_object):
  from baregrad.drivers.cpu import CPUDevice
  class SmallRing(CPUDevice): ring_bytes = 512
  dev = SmallRing("CPU")
  try:
    a = Buffer("CPU", 4, dtypes.int32)  # allocated on the registry's device; only its address matters here
    a.copyin(memoryview(np.zeros(4, np.int32)))
    Device["CPU"].synchronize()  # the copy ran on the other device's queues: nothing orders it with dev's
    prg = dev.runtime(dev, "inc", cpu_object)
    args = prg.fill_kernargs([a._buf], kernargs=dev.alloc_args_memory(64))
    for _ in range(200):  # ~80 bytes each: wraps the 512-byte ring many times
      dev.compute_queue_t().wait(dev.timeline_signal, dev.timeline_value - 1).exec(prg, args, (4, 1, 1)) \
         .signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
    dev.synchronize(timeout_ms=10000)
    assert i32(a) == [200] * 4
    big = dev.compute_queue_t()
    for _ in range(20): big.copy(0, 0, 0)  # 20 x 28 bytes > 512
    with pytest.raises(ValueError, match="exceeds"): big.submit(dev)
  finally: dev.close()
  assert Device["CPU"] is not dev

def test_cpu_queue_fault_raises_fast():
  from array import array
  from baregrad.drivers.cpu import CPUDevice
  dev = CPUDevice("CPU")
  try:
    dev.engines["compute"].submit(array("I", [(99 << 16) | 1]))
    t0 = time.perf_counter()
    with pytest.raises(RuntimeError, match="bad command header"): dev.timeline_signal.wait(1, timeout_ms=5000)
    assert time.perf_counter() - t0 < 2
  finally: dev.close()

def test_cpu_debug7_disassembles(cpu_object, capsys):
  dev = Device["CPU"]
  with Context(DEBUG=7): dev.runtime(dev, "inc", cpu_object)
  out = capsys.readouterr().out
  assert "inc" in out and len(out.splitlines()) > 3

def test_cpu_exit_with_stuck_queue_does_not_hang(cpu_object, tmp_path):
  (tmp_path / "k.o").write_bytes(cpu_object)
  code = textwrap.dedent(f"""
    from baregrad.hal import Device, Buffer
    from baregrad.hcq import HCQSignal
    from baregrad.ir.dtype import dtypes
    dev = Device["CPU"]
    prg = dev.runtime(dev, "inc", open({str(tmp_path / "k.o")!r}, "rb").read())
    buf = Buffer("CPU", 4, dtypes.int32).allocate()
    never = HCQSignal(dev)
    dev.compute_queue_t().wait(never, 1).signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
    prg(buf._buf, global_size=(4, 1, 1))  # queued behind the stuck wait; its program is freed at exit
    print("submitted")
  """)
  t0 = time.perf_counter()
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                     cwd=str(REPO))
  assert r.returncode == 0 and "submitted" in r.stdout, r.stderr
  assert time.perf_counter() - t0 < 10

def test_cpu_concurrent_host_threads(cpu_object):
  import threading
  dev = Device["CPU"]
  prg = dev.runtime(dev, "inc", cpu_object)
  bufs = [Buffer("CPU", 16, dtypes.int32).copyin(memoryview(np.zeros(16, np.int32))) for _ in range(3)]
  def work(b: Buffer) -> None:
    for _ in range(40): prg(b._buf, global_size=(16, 1, 1))
  ts = [threading.Thread(target=work, args=(b,)) for b in bufs]
  for t in ts: t.start()
  for t in ts: t.join(timeout=20)
  dev.synchronize(timeout_ms=10000)
  assert all(i32(b) == [40] * 16 for b in bufs)

def test_cpu_close_and_reopen(cpu_object):
  from baregrad.drivers.cpu import CPUDevice
  dev = CPUDevice("CPU")
  prg = dev.runtime(dev, "inc", cpu_object)
  b = dev.allocator.alloc(64)
  dev.allocator._copyin(b, memoryview(bytearray(64)))
  prg(b, global_size=(16, 1, 1))
  dev.allocator.free(b, 64)
  del prg
  dev.close()
  assert dev.allocator.mem_cached == 0 and not any(e.thread.is_alive() for e in dev.engines.values())
  with pytest.raises(RuntimeError, match="closed"): dev.engines["compute"].submit(dev.compute_queue_t().memory_barrier().words)

from hypothesis import given, settings, strategies as st

_u64 = st.integers(0, 2**64 - 1)
_cmd = st.one_of(st.tuples(st.just("wait"), _u64, _u64), st.tuples(st.just("signal"), _u64, _u64),
                 st.tuples(st.just("timestamp"), _u64), st.tuples(st.just("copy"), _u64, _u64, _u64),
                 st.tuples(st.just("barrier")),
                 st.tuples(st.just("exec"), _u64, _u64, st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)))

class _Sig:
  def __init__(self, a: int) -> None: self.va_addr, self.timestamp_va_addr = a, a
class _Prg:
  def __init__(self, a: int) -> None: self.fxn_addr, self.min_chunk = a, 0
class _Args:
  def __init__(self, a: int) -> None: self.va_addr = a

@settings(max_examples=60, deadline=None)
@given(st.lists(_cmd, max_size=12), st.data())
def test_cpu_encode_decode_roundtrip(cmds, data):
  """Every command encodes to words that the device-side decoder reads back; patches land in the words."""
  from baregrad.drivers.cpu_encoding import CPUComputeQueue, decode_one, OP_NAMES
  q = CPUComputeQueue()
  for c in cmds:
    if c[0] == "wait": q.wait(_Sig(c[1]), c[2])
    elif c[0] == "signal": q.signal(_Sig(c[1]), c[2])
    elif c[0] == "timestamp": q.timestamp(_Sig(c[1]))
    elif c[0] == "copy": q.copy(c[1], c[2], c[3])
    elif c[0] == "barrier": q.memory_barrier()
    else: q.exec(_Prg(c[1]), _Args(c[2]), (c[3], 1, 1), (c[4], 1, 1))  # type: ignore[arg-type]
  for i, c in enumerate(cmds):  # patch a few commands, then check everything against the decoder
    if c[0] in ("wait", "signal") and data.draw(st.booleans()):
      c = cmds[i] = (c[0], c[1], data.draw(_u64))
      (q.update_wait if c[0] == "wait" else q.update_signal)(i, value=c[2])
    if c[0] == "copy" and data.draw(st.booleans()):
      c = cmds[i] = ("copy", data.draw(_u64), c[2], data.draw(_u64))
      q.update_copy(i, dest=c[1], nbytes=c[3])
  ws, p = list(q.words), 0
  for c in cmds:
    op, f, p = decode_one(ws, p)
    assert OP_NAMES[op].lower().startswith(c[0][:4])
    if c[0] in ("wait", "signal"): assert (f["addr"], f["value"]) == c[1:]
    elif c[0] == "timestamp": assert f["addr"] == c[1]
    elif c[0] == "copy": assert (f["dest"], f["src"], f["nbytes"]) == c[1:]
    elif c[0] == "exec": assert (f["fxn"], f["args"], f["gx"], f["lx"]) == c[1:]
  assert p == len(ws)
  assert len(q.decode().splitlines()) == len(cmds)

def test_hwqueue_high_word_first_fields():
  """Drivers whose hardware stores addresses high word first (NV semaphores) mark the field so."""
  class Q(HWQueue):
    def _enc_wait(self, addr, value):
      return [0xAA, addr >> 32, addr & 0xFFFFFFFF, value & 0xFFFFFFFF, value >> 32], {"addr": (1, 2, True), "value": (3, 2)}
  q = Q().wait(_Sig(0x1122334455667788), 5)
  assert list(q.words) == [0xAA, 0x11223344, 0x55667788, 5, 0] and q.field(0, "addr") == 0x1122334455667788
  q.update_wait(0, _Sig(0x99AABBCCDDEEFF00), 2**40)
  assert list(q.words) == [0xAA, 0x99AABBCC, 0xDDEEFF00, 0, 0x100]
  assert "addr=0x99aabbccddeeff00 value=1099511627776" in q.decode()
  with pytest.raises(ValueError, match="does not fit"): q.update_wait(0, value=2**64)

def test_cpu_concurrent_raw_submits():
  """Host threads submitting straight to one queue (no timeline) each see all their commands run."""
  import threading
  dev = Device["CPU"]
  sigs = [HCQSignal(dev) for _ in range(3)]
  def work(s: HCQSignal) -> None:
    for v in range(1, 101): dev.copy_queue_t().memory_barrier().signal(s, v).submit(dev)
  ts = [threading.Thread(target=work, args=(s,)) for s in sigs]
  for t in ts: t.start()
  for t in ts: t.join(timeout=20)
  for s in sigs: s.wait(100, timeout_ms=5000)

def test_cpu_direct_launch_keeps_the_queue_order(cpu_object):
  # a launch of known cost on an idle queue whose timeline is reached runs at once without writing its words
  # (CPUProgram.direct); any submission to an idle queue runs where its words are, not copied into the ring
  # (QueueEngine.direct); behind an unsatisfied timeline (a copy still pending) or a busy queue a launch goes through
  # the ring and runs after what it waits for, as the words would
  from baregrad.drivers.cpu_program import CPUProgram
  dev = Device["CPU"]
  eng = dev.engines["compute"]
  a = Buffer("CPU", 4, dtypes.int32).copyin(memoryview(np.zeros(4, np.int32)))
  inc = dev.runtime(dev, "inc", cpu_object)
  inc(a._buf, global_size=(4, 1, 1), wait=True)
  eng.pool.cost[inc.fxn_addr] = 1.0
  vals = lambda: np.frombuffer(a.as_memoryview(), np.int32).tolist()
  w, n = eng.wptr, eng.inlined
  for _ in range(3): inc(a._buf, global_size=(4, 1, 1))
  assert eng.wptr == w and eng.inlined == n + 3 and dev.timeline_signal.value == dev.timeline_value - 1 and vals() == [4] * 4
  CPUProgram.direct = False
  try:
    inc(a._buf, global_size=(4, 1, 1))   # the launch's words, run by the idle queue where they are (QueueEngine.direct)
    assert eng.wptr == w and eng.inlined == n + 4 and vals() == [5] * 4
    eng.direct = False
    inc(a._buf, global_size=(4, 1, 1))
    assert eng.wptr == w + 1 and eng.inlined == n + 5 and vals() == [6] * 4   # the same work through the ring
  finally: CPUProgram.direct = True; del eng.direct
  # the timeline held by a copy that waits for a gate: the launch must wait for it too
  gate = dev.signal_t(dev, 0)
  dev.copy_queue_t().wait(gate, 1).signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
  inc(a._buf, global_size=(4, 1, 1))
  assert eng.wptr == w + 2 and dev.timeline_signal.value < dev.timeline_value - 1   # (a read now would wait for the gate too)
  gate.value = 1
  dev._signal_written()
  dev.synchronize(timeout_ms=5000)
  assert vals() == [7] * 4
  # behind a kernel still running on the worker (unknown cost) the next launch is queued and runs after it
  slow = dev.runtime(dev, "slow_fill", cpu_object)
  slow(a._buf, global_size=(4, 1, 1))   # writes 7s after a busy loop
  inc(a._buf, global_size=(4, 1, 1))
  assert eng.wptr == w + 4
  dev.synchronize(timeout_ms=5000)
  assert vals() == [8] * 4

def test_cpu_copies_are_direct_when_idle_and_ordered_when_busy(cpu_object):
  # an idle device copies by memmove (no command on the copy queue); behind a running kernel that writes the buffer,
  # a copy in goes through the queue and lands after the kernel, and a read waits for it
  dev = Device["CPU"]
  eng = dev.engines["copy"]
  a = Buffer("CPU", 64, dtypes.int32).allocate()
  dev.synchronize()
  w = eng.wptr
  a.copyin(memoryview(np.arange(64, dtype=np.int32)))
  assert np.frombuffer(a.as_memoryview(), np.int32).tolist() == list(range(64)) and eng.wptr == w
  slow = dev.runtime(dev, "slow_fill", cpu_object)
  slow(a._buf, global_size=(64, 1, 1))           # writes 7s after a busy loop: the device is not idle
  a.copyin(memoryview(np.full(64, 3, np.int32)))  # queued behind it
  assert eng.wptr > w
  assert np.frombuffer(a.as_memoryview(), np.int32).tolist() == [3] * 64

def test_cpu_known_parallel_kernel_runs_on_the_submitting_thread():
  # an idle queue runs a kernel of known cost on the host thread, split over the native pool, instead of handing it
  # to the worker thread: with the pool on every core, a worker running it while the host goes on in Python puts more
  # threads than cores on the machine, and a pool thread preempted holding a chunk stalls the kernel (a 0.6 ms matmul
  # took 2.5-6 ms in an eager training step)
  from baregrad import Tensor
  dev = Device["CPU"]
  q = dev.engines["compute"]
  if dev.threads == 1 or q.pool.native is None: pytest.skip("one thread or no native pool: nothing is split")
  calls: list[tuple[str, int]] = []
  orig = q.pool.run
  def run(key, fxn, args, total, min_chunk=0, addr=None):
    calls.append((threading.current_thread().name, q.pool.chunks(key, total, min_chunk)))
    return orig(key, fxn, args, total, min_chunk, addr)
  q.pool.run = run
  try:
    for _ in range(4):   # fresh inputs each time: nothing realized is reused; the first runs learn the kernel's cost
      a, b = Tensor.rand(256, 256, device="CPU").realize(), Tensor.rand(256, 256, device="CPU").realize()
      dev.synchronize()
      calls.clear()
      inlined = q.inlined
      (a @ b).realize()
      dev.synchronize()
  finally: del q.pool.run
  assert calls and all(name == threading.main_thread().name for name, _ in calls), calls
  assert max(n for _, n in calls) > 1 and q.inlined == inlined + 1, (calls, q.inlined - inlined)

def test_cpu_inline_work_per_submission_is_bounded():
  # the submitting thread runs at most INLINE_POOL_NS of expected parallel work per submission (a jit replay's
  # chain included); the worker thread takes the rest, so a long replay does not hold the host for all of it
  from baregrad import Tensor, jit
  dev = Device["CPU"]
  q = dev.engines["compute"]
  if dev.threads == 1 or q.pool.native is None: pytest.skip("one thread or no native pool: nothing runs split inline")
  # 256-wide: each kernel's expected work (~0.3 ms on one thread) is far above INLINE_NS, so the chain of tiny kernels
  # (not held to this budget) never takes it. At 128 a warm pool ran one in ~15 us on two threads, whose learned cost
  # could dip under INLINE_NS
  w = Tensor.rand(256, 256, device="CPU").realize()
  @jit
  def f(x): return ((x @ w) @ w) @ w     # three launches of one kernel (same cost)
  def inlined_replay() -> bool:
    x = Tensor.rand(256, 256, device="CPU").realize()
    dev.synchronize()
    n = q.inlined
    y = f(x)
    dev.synchronize()
    wn = w.numpy()
    np.testing.assert_allclose(y.numpy(), x.numpy() @ wn @ wn @ wn, rtol=1e-4, atol=1e-3)
    return q.inlined > n
  for _ in range(4): inlined_replay()   # capture, learn the kernel's cost
  assert inlined_replay()
  cap = next(iter(f.captured.values()))
  assert len({l.runner.prg.fxn_addr for l in cap.launches}) == 1 and len(cap.launches) == 3
  prg, gx = cap.launches[0].runner.prg, cap.launches[0].runner.spec.global_size[0]
  # the budget counts each kernel's expected time on the pool: one thread's ns over the threads it is split across
  one = q.pool.cost[prg.fxn_addr] * gx / q.pool.chunks(prg.fxn_addr, gx, getattr(prg, "min_chunk", 0))
  # a budget above one kernel's work but under three's: each kernel alone would fit, the submission does not, and
  # the worker takes what is left (same numbers)
  q.INLINE_POOL_NS = 1.2 * one
  # the verdict from the estimates `one` was read from: a chain's kept verdict dates from older ones (a kernel timed
  # slower since then made `one` larger than what that verdict summed, and the whole chain fit the budget)
  q._pool_plans.clear()
  try: assert not inlined_replay()
  finally: del q.INLINE_POOL_NS
