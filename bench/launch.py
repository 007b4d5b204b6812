#!/usr/bin/env python3
"""Host cost of the launch path on the default device (any device; a mock included: MOCKGPU=1 DEV=NV or DEV=AMD).

Four workloads, each timed in `--rounds` rounds, the median round reported (the machine is shared):
  launch+wait   one launch of a minimal kernel (the compiled `x + 1` over 16 floats) then dev.synchronize()
  back-to-back  `--n` launches of that kernel then one synchronize, per kernel
  jit replay    a @jit function of `--k` dependent kernels replayed on a fresh input, per kernel
  eager op      `(x + 1).realize()` on a 16-element tensor (graph, schedule-cache hit, launch), per op

A mock GPU executes kernels in Python, inside the driver's doorbell (and the wait loop's kick) through the mock's
port. The bench wraps MockPort.doorbell and MockPort.ioctl with a clock and reports that time apart as "device
(mock)"; the host figure is wall time minus it. On a real GPU the doorbell is one store to mapped memory and nothing
is subtracted: the host figure there includes the GPU's execution and the wait for it. On a mock each workload is
timed twice: "host" as above, and "host, mock deferred" with the submissions' doorbells passed on only when the host
waits (DeferredDoorbells): the mock's ~450 us of Python per kernel then runs in the waits, not between two launches,
where it leaves the host's caches cold (what a real GPU, running beside the host, does not do). Read the deferred
figure for back-to-back launches and eager ops; launch+wait and jit replay wait for each call, so both figures have
the mock's run right before the next call.

`--phases` runs each workload again with every function of the launch path wrapped in an exclusive-time clock (time in
a wrapped function minus time in wrapped functions it calls) and splits the host time by phase: kernarg fill, command
encode (QMD/AQL packet, pushbuffer/PM4 words), submit (ring, GP_PUT/write pointer, doorbell store), wait (signal poll),
runner (argument checks), schedule (lazy realize, schedule cache), jit front end, graph patch, other (the workload's
own Python: graph building, tensor objects). The wrappers cost ~0.3-0.5 us per call, so the phase table's total is
above the headline figure; read it for shares, the headline for totals.

Results (host side only, measured on the mocks, no GPU: the 2-core VM shared with other jobs; thread CPU time, median
of 5 rounds of 20 calls; before = main at 6bb97e6, after = branch s3-launch, each with this script, the two sides run
back to back in the same minutes; us per kernel):

  | run (load average)        | launch+wait        | back-to-back       | jit replay       | eager op             |
  |---------------------------|--------------------|--------------------|------------------|----------------------|
  | NV, load ~5.5 (two pairs) | 37.0, 37.5 -> 33.8, 33.4 | 30.1, 31.8 -> 26.7, 26.9 | 5.9, 7.0 -> 6.0, 6.0 | 74.8, 78.1 -> 72.5, 69.8 |
  | NV, load ~3.8 (final)     | 37.0 -> 31.7       | 31.0 -> 26.1       | 5.7 -> 6.0       | 77.1 -> 71.3         |
  | AMD, load ~3 (two pairs)  | 75.3, 75.9 -> 48.5, 46.7 | 70.7, 71.5 -> 46.8, 46.5 | 12.7, 12.0 -> 12.6, 12.5 | 126, 125 -> 100, 101 |

(the jit replay does not take the launch path changed here: its recorded queue is patched and submitted whole.)
- NV: a launch's pushbuffer is a per-program template (acquire, launch, release) with its five values patched, not
  three encoder calls and three arrays; the parameters are one struct pack and one copy; the QMD's constant-bank address
  is one 64-bit patch of the template's bytes; a GPFIFO entry's high word is cached and the channel reads no clock
  unless its ring is full. The GPU sees the same words (tests/drivers/nv/test_nv_launch_words.py compares them with
  hw.sem_words/launch_words/gp_entry and the per-parameter writes).
- AMD: a launch's packets are made straight from the encoders (AQLRing.launch_packets) instead of recording a queue
  object (one Cmd per command, a refs dict) and converting it (packets()): the NV launch already did this; the
  argument-independent words of RELEASE_MEM, WAIT_REG_MEM, ACQUIRE_MEM and the AQL header are made once per family
  and selector; the IB area's free space is two comparisons, not a walk over every IB in flight. Same packets and IB
  contents (tests/drivers/amd/test_amd_packet_cache.py, gfx1100 and gfx942).
- The mock inflates the host figures: the same NV pieces timed warm in a loop (no kernel run between calls) cost
  fill_kernargs 2.6 us, write_qmd 1.3 us, the channel's submit without its doorbell 2.6 us, an idle synchronize 0.6 us
  (~7 us a launch), against ~27 us per launch here, where the mock's interpreter (~450 us of Python per kernel) runs
  between launches and leaves the host's caches cold. The H100 figures of issue 34 (27-33 us back to back) are real
  hardware, where that does not apply: run `DEV=NV python3 bench/launch.py --phases` on the GPU machine to see where
  its time goes.
Not reached: every goal (launch+wait <= 10, back-to-back <= 5, replay <= 1, eager <= 20 us). Largest shares left
(--phases, NV): kernarg fill and submit ~10 us each and encode ~5 in the bench's cold-cache setting; an eager op's
schedule-cache hit ~25-30 us and its runner checks ~10 us; the jit replay's front end (tensor/jit.py) ~3.5 of its 6.

Launch templates (main at c74a503 -> branch s4-launch; this script on both sides, run in separate processes alternated,
before/after in the same minutes, load average 4.7-6.7; thread CPU time, each run the median of 5 rounds of 20 calls
(CPU: 40); the table gives the median over the runs and their range; us per kernel):

  | workload (runs per side)     | NV host (6)        | NV deferred (6)    | AMD host (4)       | AMD deferred (4)   | CPU (8)          |
  |------------------------------|--------------------|--------------------|--------------------|--------------------|------------------|
  | launch+wait                  | 38.8 -> 28.4       | 43.6 -> 34.5       | 54.6 -> 39.5       | 64.6 -> 45.1       | 3.34 -> 3.29     |
  |   (range)                    | 33.7-42.7 / 27-29  | 40-46 / 34-36      | 53-56 / 37-41      | 61-68 / 44-47      |                  |
  | back-to-back                 | 29.4 -> 19.8       | 15.0 -> 9.9        | 49.5 -> 30.6       | 29.0 -> 15.2       | 2.60 -> 2.61     |
  |   (range)                    | 25.5-30.1 / 18-22  | 14.1-16.1 / 9.3-10 | 48-50 / 30-32      | 28-29 / 14.5-15.4  |                  |
  | jit replay                   | 7.7 -> 7.5         | 8.3 -> 8.1         | 16.6 -> 16.3       | 17.2 -> 16.9       | 1.92 -> 1.84     |
  | eager op                     | 76.3 -> 65.3       | 57.2 -> 48.7       | 107 -> 87          | 81.5 -> 61.0       | 29.1 -> 27.5     |
  |   (range)                    | 70-84 / 60-68      | 55-65 / 46-51      | 103-108 / 85-89    | 77-84 / 60-65      | 28-30.5 / 27-28  |

One launch warm (a loop of 50 launches with the doorbell deferred, wall time, min (median) of 15 rounds, two runs per
side): NV 10.6-11.7 (12.1-15.4) -> 6.5-7.2 (7.8-9.4) us, AMD 21.1-22.4 (24.1) -> 9.7-9.9 (10.3-11.3) us. By stage (min):
NV fill_kernargs 2.9 + write_qmd 1.4 -> one args block 1.7, channel submit 2.0-2.1 -> 1.4-1.7, an idle synchronize
0.7-0.8 -> 0.5; AMD fill_kernargs 3.0 + write_launch -> one kernarg segment 1.1, the three packets 2.7 without the ring.
- NV (drivers/nv/program.py): the QMD, the constant bank's header and the parameters are one block per geometry in
  launch_template; a launch copies it into the args ring with one slice store and packs the bank address and the
  parameters into it (was: NVArgsState, a memset and three ctypes copies); the channel stores the pushbuffer with a
  slice assignment into the command ring and retires fetched entries against one read of GP_GET.
- AMD (drivers/amd/program.py, queues.py): the kernarg segment per geometry with its hidden arguments (write_launch's
  string tests per hidden argument ran on every launch), the explicit ones packed in; the wait and signal IBs, the
  dispatch and the vendor packets copied from word templates and patched; ring slots and IBs written through
  memoryviews and struct packs, the header by one store (114 -> 47 Python calls a launch).
- Eager op (engine/lazy.py): the single-kernel result of a graph that reads buffers is recorded without
  set_realized's walk (~1.5 us).
- The same bytes reach the GPU: tests/drivers/nv/test_nv_launch_words.py test_fast_launch_args_block_equals_args_state,
  tests/drivers/amd/test_amd_packet_cache.py test_direct_launch_kernargs_equal_the_args_state and the packet tests.
Not reached: the goals. A warm NV launch is ~6.5 us (the args block 1.7, the channel 1.5, the rest the call's glue:
dims, the pushbuffer template's copy and five patches, three locks); AMD ~10. The mock figures stay ~2-3x the warm
ones (the host's caches cold after the mock's interpreter). An eager op is ~27 us on the CPU (graph ~3-5, schedule
key and cache hit ~4-6, launch ~7-10 with its output buffer, the result's nodes and tensor ~6); a jit replay's host
cost is its front end (tensor/jit.py), unchanged here.

Graph replay and overlap (main at d00e0dd -> branch s5-launch; this script under `chrt -f 10`, the two sides back to back
in the same minutes, load average 5-7 on the shared 2-core VM; thread CPU time, median of 5 rounds of 20 calls (warm:
100); "warm" is the "driver alone" table's setting, each workload in a loop of its own after a warm-up, the mock not
run (InstantGPU); us per kernel):

  | workload       | NV host     | NV deferred | NV warm     | AMD host      | AMD deferred  | AMD warm    |
  |----------------|-------------|-------------|-------------|---------------|---------------|-------------|
  | launch+wait    | 25.4 / 28.7 | 30.8 / 34.6 | 5.6 / 5.8   | 34.1 / 36.0   | 43.8 / 42.0   | 8.8 / 8.7   |
  | back-to-back   | 18.4 / 20.3 | 9.2 / 9.6   | 4.3 / 4.6   | 29.3 / 29.2   | 14.3 / 13.9   | 7.9 / 7.7   |
  | jit replay     | 6.1 / 6.8   | 6.2 / 7.4   | 1.12 / 1.23 | 14.2 -> 9.7   | 15.0 -> 10.4  | 3.5 -> 1.4  |
  | eager op       | 62 / 68     | 47 / 51     | 30.5 / 31.4 | 85 / 83       | 57 / 56       | 36.6 / 35.6 |

(NV: a / b = main / branch, unchanged paths: the branch ran second in each pair and every NV row moved alike.) After
the AMD direct-launch changes below, warm, two pairs, load average 17-20: launch+wait 11.0, 11.2 -> 9.8, 9.95;
back-to-back 9.3, 9.3 -> 8.5, 8.7; jit replay 4.4, 4.3 -> 1.8, 1.8 (NV 1.6-1.8 both sides).
- AMD graph replay (drivers/amd/queues.py): the recording's AQL packets and PM4 IBs are made once (prepare_replay,
  AQLRing.prebuild; the IBs in memory of their own) and patched in place; a replay copies the block into the ring with
  one or two slice stores, the first header last (was: packets() rebuilt from the queue and two IBs taken from the IB
  area per replay). HCQGraph.replay alone, 20 kernels, warm: 2.4 -> 0.39 us per kernel (NV 0.27-0.30); the rest of a
  jit replay's 1.2-1.4 us per kernel is tensor/jit.py's front end (~17 us a call) and the wait.
- AMD direct launch (AQLRing.launch_packets, submit_packets): the wait and signal IBs in one allocation where two in a
  row would lie adjacent (the same addresses), and a packet that is an array of words stored with one slice of the
  ring's words instead of a 15-argument struct pack (47 -> 39 Python calls a launch).
- Overlap: the jit gives HCQGraph each launch's write set, so launches that do not depend on each other have no barrier
  (WFI+MEMBAR on NV, an AQL barrier-AND on AMD) between them; the bench's chain depends kernel to kernel and keeps its
  19 barriers. Eager launches stay one submission each, ordered by the timeline.
- Eager op (warm, NV, wall): ~30 us = graph building (y + 1) ~5.6, realize ~24.6 (the schedule key's walk _abstract and
  cache hit ~8-10, the runner's checks and the launch ~9: args block, pushbuffer, channel; the output's BufRef,
  allocation and result node ~5). Nothing cut here.
"""
from __future__ import annotations
import argparse, contextlib, os, statistics, sys, time
from typing import Any, Callable
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from baregrad import Tensor, jit, Device   # noqa: E402

# --- clocks --------------------------------------------------------------------------------------------------------

class PhaseClock:
  """Exclusive time per phase of wrapped functions: entering a wrapped function starts its phase's clock and pauses
  the caller's; `acc` maps phase -> ns."""
  def __init__(self, now: Callable[[], int] = time.perf_counter_ns) -> None:
    self.now = now
    self.acc: dict[str, int] = {}
    self.stack: list[list[Any]] = []   # [phase, start ns, ns spent in wrapped callees]
    self.undo: list[tuple[Any, str, Any]] = []

  def wrap(self, owner: Any, name: str, phase: str) -> bool:
    """Wrap owner.name (a class's own method or a module's function) into `phase`; False where it has none."""
    d = owner.__dict__ if isinstance(owner, type) else vars(owner)
    if name not in d: return False
    orig = d[name]
    fn = orig.__func__ if isinstance(orig, staticmethod) else orig
    if not callable(fn): return False
    clock, acc, stack, now = self, self.acc, self.stack, self.now
    def timed(*a: Any, **k: Any) -> Any:
      frame = [phase, now(), 0]
      stack.append(frame)
      try: return fn(*a, **k)
      finally:
        stack.pop()
        el = now() - frame[1]
        acc[phase] = acc.get(phase, 0) + el - frame[2]
        if stack: stack[-1][2] += el
    timed.__wrapped__ = fn   # type: ignore[attr-defined]
    setattr(owner, name, staticmethod(timed) if isinstance(orig, staticmethod) else timed)
    clock.undo.append((owner, name, orig))
    return True

  def reset(self) -> None: self.acc.clear()
  def restore(self) -> None:
    for owner, name, orig in reversed(self.undo): setattr(owner, name, orig)
    self.undo.clear()

def _launch_path_targets(dev: Any) -> list[tuple[Any, str, str]]:
  """(owner, function name, phase) of the launch path's functions this device's driver has."""
  import importlib
  from baregrad.hcq import device as hdev, queue as hq, signal as hsig, graph as hgraph
  from baregrad.engine import lazy, runner
  from baregrad.tensor import jit as tjit
  t: list[tuple[Any, str, str]] = [
    (hdev.HCQProgram, "fill_kernargs", "kernarg fill"), (hq.HWQueue, "_add", "command encode"),
    (hq.HWQueue, "submit", "submit"), (hsig.HCQSignal, "wait", "wait"), (hdev.HCQDevice, "synchronize", "wait"),
    (hdev.HCQDevice, "_wait_signal", "wait"), (type(dev), "synchronize", "wait"), (type(dev), "_wait_signal", "wait"),
    (runner.CompiledRunner, "__call__", "runner"), (lazy, "realize", "schedule"), (lazy, "_run_single", "schedule"),
    (tjit.jit, "__call__", "jit front end"), (tjit._Captured, "run", "jit front end"), (hgraph.HCQGraph, "replay", "graph patch"),
  ]
  drivers = {"NV": ("baregrad.drivers.nv", [
    ("program", "NVArgsState", "__init__", "kernarg fill"), ("program", "NVArgsState", "write_qmd", "command encode"),
    ("program", "NVProgram", "_write_args", "kernarg fill"),   # (the fast launch's args: QMD, bank and parameters in one block)
                                           ("hw", None, "sem_words", "command encode"), ("hw", None, "launch_words", "command encode"),
                                           ("queues", "NVChannel", "submit", "submit"), ("queues", "NVComputeQueue", "_enc_exec", "command encode")]),
             "AMD": ("baregrad.drivers.amd", [
    ("program", "AMDArgsState", "__init__", "kernarg fill"), ("program", "AMDArgsState", "write_launch", "command encode"),
    ("program", "AMDProgram", "_write_args", "kernarg fill"), ("queues", "AQLRing", "launch_packets", "command encode"),
    ("queues", "AQLRing", "_ib_words_packet", "command encode"),
                                             ("queues", "AMDComputeQueue", "_enc_exec", "command encode"), ("queues", "AQLRing", "packets", "command encode"),
                                             ("queues", "AQLRing", "submit", "submit"), ("queues", "AQLRing", "submit_prebuilt", "submit")])}
  pkg, items = drivers.get(dev.device.split(":")[0], ("", []))
  for mod, cls, fn, phase in items:
    m = importlib.import_module(f"{pkg}.{mod}")
    t.append((getattr(m, cls) if cls else m, fn, phase))
  return t

def mock_clock(clock: PhaseClock) -> bool:
  """Put the mock GPU's entry points (doorbell, ioctl) under the "device (mock)" phase; False on a real device."""
  from baregrad.drivers.port import MockPort
  dev = Device[Device.DEFAULT]
  if not isinstance(getattr(dev, "port", None), MockPort): return False
  clock.wrap(MockPort, "doorbell", "device (mock)")
  clock.wrap(MockPort, "ioctl", "device (mock)")
  return True

class DeferredDoorbells:
  """A mock GPU runs the work a submission rings for inside that doorbell call: ~450 us of Python interpreting the kernel
  between two launches, which leaves the host's caches cold for the next one (the "host" figure counts that). A real
  GPU's doorbell is one store and the GPU runs beside the host. While entered, a doorbell rung by a submission (the
  functions named in SUBMITTERS) is kept, not passed on; when the host starts a wait (the device's _wait_signal) or
  anything else rings a doorbell (a full ring's kick), the last one kept per doorbell address is passed on first (what
  a doorbell announces is everything submitted up to the value written). So the mock runs the work when the host
  waits for it, as if the GPU had run it meanwhile; the driver does the same work either way, the mock's time is apart
  as before, and no wait spins on work the mock was not yet told about."""
  # NVChannel.submit; AMD's AQLRing.submit_packets, submit_prebuilt (a graph's replay), SDMARing.submit
  SUBMITTERS = frozenset({"submit", "submit_packets", "submit_prebuilt"})
  def __enter__(self) -> DeferredDoorbells:
    from baregrad.drivers.port import MockPort
    self.kept: dict[int, tuple[Any, tuple]] = {}   # doorbell address -> (port, the rest of the last call kept)
    self.undo = [(MockPort, "doorbell", MockPort.__dict__["doorbell"])]
    dcls = type(Device[Device.DEFAULT])
    wcls = next(c for c in dcls.__mro__ if "_wait_signal" in c.__dict__)
    self.undo.append((dcls, "_wait_signal", dcls.__dict__.get("_wait_signal", wcls.__dict__["_wait_signal"])))
    orig, orig_wait, submitters, caller, kept = self.undo[0][2], self.undo[1][2], self.SUBMITTERS, sys._getframe, self.kept
    def flush() -> None:
      if kept:
        for k, (p, ka) in list(kept.items()): orig(p, k, *ka)
        kept.clear()
    def doorbell(port: Any, addr: int, *a: Any) -> None:
      if caller(1).f_code.co_name in submitters:
        kept[addr] = (port, a)
        return None
      flush()
      return orig(port, addr, *a)
    def wait_signal(dev: Any, *a: Any, **k: Any) -> Any:
      flush()
      return orig_wait(dev, *a, **k)
    self.flush = flush
    MockPort.doorbell = doorbell   # type: ignore[method-assign]
    dcls._wait_signal = wait_signal   # type: ignore[method-assign]
    return self
  def __exit__(self, *exc: Any) -> None:
    for owner, name, fn in reversed(self.undo): setattr(owner, name, fn)
    self.flush()   # (nothing rung is left unannounced)

class InstantGPU:
  """The driver's host cost alone: while entered, a doorbell runs nothing on the mock and instead marks all work
  submitted so far done, as a GPU infinitely fast would (the timeline signal at the last value reserved, each ring's
  read pointer at its write pointer). What the host does is the same (the launch, the ring, the wait's look at the
  signal), without the mock's interpretation before it or its cold caches after it. Kernels do not run: no workload
  here reads a result."""
  def __enter__(self) -> InstantGPU:
    from baregrad.drivers.port import MockPort
    self.undo = (MockPort, MockPort.__dict__["doorbell"])
    dev = Device[Device.DEFAULT]
    rings = [r for r in (getattr(dev, "aql", None), getattr(dev, "sdma", None)) if r is not None]
    chans = list(getattr(dev, "channels", {}).values())
    dev.synchronize()
    import ctypes
    timeline = ctypes.c_uint64.from_address(dev.timeline_signal.cpu_addr)   # (the memory, as the GPU writes it: the
    def doorbell(port: Any, *a: Any) -> None:                                # signal's setter would wake the device)
      for ch in chans: ch.gp_get_p.value = ch.put
      for r in rings: r.rptr_p.value = r.put
      timeline.value = dev.timeline_value - 1
    MockPort.doorbell = doorbell   # type: ignore[method-assign]
    return self
  def __exit__(self, *exc: Any) -> None: setattr(self.undo[0], "doorbell", self.undo[1])

# --- workloads -----------------------------------------------------------------------------------------------------

def _minimal_kernel() -> tuple[Any, list[Any], Any]:
  """The compiled program of `x + 1` over 16 floats (compiled here, in a fresh process: the entry this realize adds to
  the runner cache), two device buffers for it, and the CompiledRunner."""
  from baregrad.engine import runner as rn
  before = set(rn._cache)
  x = Tensor.rand(16).realize()
  y = (x + 1).realize()
  new = [r for k, r in rn._cache.items() if k not in before and r.device == Device.canonicalize(Device.DEFAULT)]
  if not new: raise RuntimeError("bench: x + 1 compiled no new kernel (was it compiled before in this process?)")
  r = new[-1]
  bufs = [y._realized()._buf, x._realized()._buf]
  return r.prg, bufs, (x, y)

def workloads(n: int, k: int) -> tuple[dict[str, tuple[Callable[[], Any], int]], list[Any]]:
  """name -> (one timed call, kernels in it); and what must stay alive."""
  dev = Device[Device.DEFAULT]
  prg, bufs, keep = _minimal_kernel()
  gs, ls = (1, 1, 1), (16, 1, 1)
  raw = [b._buf if hasattr(b, "_buf") else b for b in bufs]
  def launch_wait() -> None:
    prg(*raw, global_size=gs, local_size=ls)
    dev.synchronize()
  def back_to_back() -> None:
    for _ in range(n): prg(*raw, global_size=gs, local_size=ls)
    dev.synchronize()
  @jit
  def f(t: Tensor) -> Tensor:
    for _ in range(k): t = (t.flip(0) + 1).contiguous()
    return t
  xs = [Tensor.rand(16).realize() for _ in range(8)]
  for x in xs[:3]: f(x)
  it = iter(range(1 << 62))
  def replay() -> None:
    f(xs[next(it) % len(xs)])
    dev.synchronize()
  ys = [Tensor.rand(16).realize() for _ in range(8)]
  def eager() -> None:
    for y in ys: (y + 1).realize()
    dev.synchronize()
  launch_wait(); back_to_back(); eager()
  return {"launch+wait": (launch_wait, 1), "back-to-back": (back_to_back, n), "jit replay": (replay, k), "eager op": (eager, len(ys))}, [keep, f, xs, ys]

def measure(fn: Callable[[], Any], per: int, reps: int, clock: PhaseClock) -> tuple[float, float, dict[str, int]]:
  """(total us, device-in-mock us, phase ns) per kernel of `reps` calls of fn, on the clock's time (wall or CPU)."""
  clock.reset()
  t = clock.now()
  for _ in range(reps): fn()
  wall = clock.now() - t
  div = reps * per
  return wall / div / 1e3, clock.acc.get("device (mock)", 0) / div / 1e3, {p: v // div for p, v in clock.acc.items()}

GOALS = {"launch+wait": 10, "back-to-back": 5, "jit replay": 1, "eager op": 20}   # us, issue 34 item 4 (H100 goals)

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--rounds", type=int, default=7)
  ap.add_argument("--reps", type=int, default=40, help="calls per round")
  ap.add_argument("--n", type=int, default=20, help="launches per back-to-back call")
  ap.add_argument("--k", type=int, default=20, help="kernels in the jitted function")
  ap.add_argument("--phases", action="store_true", help="also split the host time by phase (wrappers add their own cost)")
  ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                  help="cpu: the calling thread's CPU time (what a loaded, shared machine does not inflate; a sleep in a wait "
                       "does not count); wall: elapsed time")
  a = ap.parse_args()
  clock = PhaseClock(time.thread_time_ns if a.clock == "cpu" else time.perf_counter_ns)
  is_mock = mock_clock(clock)
  wl, keep = workloads(a.n, a.k)
  # on a mock, each workload is also timed with the mock's work deferred to the host's waits (DeferredDoorbells)
  modes = [("host", None)] + ([("host, mock deferred", DeferredDoorbells)] if is_mock else [])
  rows: dict[tuple[str, str], list[tuple[float, float]]] = {(name, m): [] for name in wl for m, _ in modes}
  for _ in range(a.rounds):
    for m, ctx in modes:
      with ctx() if ctx is not None else contextlib.nullcontext():
        for name, (fn, per) in wl.items():
          w, d, _ = measure(fn, per, a.reps, clock)
          rows[(name, m)].append((w - d, d))
  load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
  print(f"device {Device.DEFAULT}{' (mock: device time apart)' if is_mock else ''}, {a.clock} time, median of {a.rounds} rounds "
        f"of {a.reps} calls, load average {load:.2f}")
  for name in wl:
    for m, _ in modes:
      rs = rows[(name, m)]
      host = statistics.median(r[0] for r in rs)
      dev = statistics.median(r[1] for r in rs)
      lo, hi = min(r[0] for r in rs), max(r[0] for r in rs)
      extra = f"   device (mock) {dev:8.1f} us" if is_mock else ""
      print(f"  {name:13s} {m + ' ':20s} {host:8.2f} us per kernel (rounds {lo:.1f}-{hi:.1f}; goal <= {GOALS[name]}){extra}")
  if a.phases:
    clock.restore()   # (the phase clock wraps the mock's entry points itself)
    phases(wl, a.rounds, a.reps)
  if is_mock: driver_alone(wl, a.rounds, a.reps, clock)
  del keep

def driver_alone(wl: dict[str, tuple[Callable[[], Any], int]], rounds: int, reps: int, clock: PhaseClock) -> None:
  """Each workload on a mock with the mock not run at all (InstantGPU): the driver's host cost alone. Last: the mock's
  own state is out of step with the rings after it."""
  print("driver alone (InstantGPU: the mock runs nothing, a doorbell marks the work done), us per kernel:")
  with InstantGPU():
    for name, (fn, per) in wl.items():
      for _ in range(reps): fn()   # (warm: each workload in a loop of its own)
      rs = [measure(fn, per, reps, clock)[0] for _ in range(rounds)]
      print(f"  {name:13s} {statistics.median(rs):8.2f} (rounds {min(rs):.1f}-{max(rs):.1f}; goal <= {GOALS[name]})")

def phases(wl: dict[str, tuple[Callable[[], Any], int]], rounds: int, reps: int) -> None:
  """The host time of each workload split by phase of the launch path (wrapped functions, exclusive time)."""
  # phases on the wall clock: reading a thread's CPU time is a system call, which per wrapped call would swamp what
  # it measures; a perf_counter read is ~50 ns
  clock = PhaseClock(time.perf_counter_ns)
  mock_clock(clock)
  for owner, fn, phase in _launch_path_targets(Device[Device.DEFAULT]): clock.wrap(owner, fn, phase)
  print("phases, exclusive us per kernel, wall time (median of rounds; wrapped, so above the headline):")
  order = ["kernarg fill", "command encode", "submit", "wait", "runner", "schedule", "jit front end", "graph patch", "other", "device (mock)"]
  print(f"  {'':13s} " + " ".join(f"{p[:12]:>12s}" for p in order))
  for name, (fn, per) in wl.items():
    got: dict[str, list[float]] = {p: [] for p in order}
    for _ in range(rounds):
      w, _, ph = measure(fn, per, reps, clock)
      for p in order: got[p].append(ph.get(p, 0) / 1e3)
      got["other"][-1] = w - sum(ph.values()) / 1e3
    print(f"  {name:13s} " + " ".join(f"{statistics.median(got[p]):12.2f}" for p in order))
  clock.restore()

if __name__ == "__main__":
  main()
