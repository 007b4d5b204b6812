"""PROFILE=1: a Chrome trace-event file with every kernel and copy (device timestamps from HCQ signals, one track
per queue), the host's schedule/codegen/compile spans, jit graph replays; closed at exit, readable after a crash;
profiling never makes a launch wait for the device."""
from tests.paths import REPO
import json, os, subprocess, sys, time
import numpy as np
import pytest
from baregrad import Tensor
from baregrad.hal import Device, profile
from baregrad.engine.runner import compile_ast

ROOT = str(REPO)

WORKLOAD = """
import os, sys, numpy as np
from baregrad import Tensor, jit
c = float(sys.argv[1])                     # a fresh constant: fresh kernels, so each one is compiled in this run
x = Tensor(np.arange(64, dtype=np.float32).reshape(8, 8) / 64)
y = ((x * c).exp() + 1).sum(0)
assert np.allclose(y.numpy(), (np.exp(np.arange(64, dtype=np.float32).reshape(8, 8) / 64 * c) + 1).sum(0), rtol=1e-5)
@jit
def f(a): return (a * c + 1).relu().sum()
for i in range(4): f(Tensor(np.full((16,), i, np.float32))).numpy()
(y + 1).realize()
if os.environ.get("CRASH"): os._exit(3)   # no atexit: the trace is left unclosed
"""

def run_workload(tmp_path, **env):
  path = str(tmp_path / "trace.json")
  e = {k: v for k, v in os.environ.items() if k not in ("DEV", "MOCKGPU", "DEBUG", "BEAM", "PROFILE", "JIT", "_BAREGRAD_PROFILE_OWNER")}
  e.update(PYTHONPATH=ROOT, PROFILE="1", PROFILE_PATH=path, **env)
  r = subprocess.run([sys.executable, "-c", WORKLOAD, str(1 + time.time_ns() % 997 / 1000)], capture_output=True, text=True,
                     env=e, timeout=300)
  return r, path

def tracks(events):
  procs = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
  threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
  return procs, threads

def check_trace(events, device):
  procs, threads = tracks(events)
  dev_pid = next(p for p, n in procs.items() if n == device)
  queues = {threads[(p, t)] for (p, t) in threads if p == dev_pid}
  assert {"compute", "copy"} <= queues, queues
  xs = [e for e in events if e.get("ph") == "X"]
  for e in xs: assert e["dur"] >= 0 and isinstance(e["ts"], (int, float)), e
  dev = sorted((e for e in xs if e["pid"] == dev_pid), key=lambda e: e["args"]["timeline"])
  host = [e for e in xs if e["pid"] == 0]
  kinds = {e["cat"] for e in dev}
  assert {"kernel", "copy", "graph"} <= kinds, kinds
  # every submission waits for the one before it on the timeline: device events never overlap and keep that order
  for a, b in zip(dev, dev[1:]): assert b["ts"] >= a["ts"] + a["dur"] - 1e-3, (a, b)
  assert dev[0]["name"] == "copyin" and dev[-1]["cat"] in ("copy", "kernel")
  assert any(e["name"] == "copyout" for e in dev)
  assert any(e["cat"] == "graph" and e["name"].startswith("graph of ") for e in dev)
  # host spans: a schedule before the first compile; each kernel compiled (on this clock) before it first ran
  names = [e["name"] for e in host]
  assert "schedule" in names and "codegen" in names and "compile" in names
  first = lambda n: min(e["ts"] for e in host if e["name"] == n)
  assert first("schedule") < first("compile")
  compiled = {}
  for e in host:
    if e["name"] == "compile": compiled.setdefault(e["args"]["kernel"], e["ts"] + e["dur"])
  kernels = [e for e in dev if e["cat"] == "kernel"]
  assert kernels
  for k in kernels:
    assert k["name"] in compiled, (k["name"], sorted(compiled))
    assert k["ts"] >= compiled[k["name"]] - 1e-3, (k, compiled[k["name"]])

def test_trace_on_the_cpu(tmp_path):
  r, path = run_workload(tmp_path)
  assert r.returncode == 0, r.stderr
  assert f"PROFILE trace written to {path}" in r.stderr
  with open(path) as f: events = json.load(f)  # closed at exit: plain JSON
  check_trace(events, "CPU")

def test_trace_on_the_mock_gpu(tmp_path):
  r, path = run_workload(tmp_path, MOCKGPU="1", DEV="NV")
  assert r.returncode == 0, r.stderr
  with open(path) as f: events = json.load(f)
  check_trace(events, "NV")

def test_a_crashed_process_leaves_a_readable_trace(tmp_path):
  r, path = run_workload(tmp_path, CRASH="1")
  assert r.returncode == 3, r.stderr
  with open(path) as f: text = f.read()
  with pytest.raises(json.JSONDecodeError): json.loads(text)  # never closed...
  events = profile.load(path)                                  # ...but every event written so far reads back
  xs = [e for e in events if e.get("ph") == "X"]
  assert any(e["cat"] == "kernel" for e in xs) and any(e["name"] == "schedule" for e in xs)

def test_profiling_never_waits_for_the_device(tmp_path):
  dev = Device["CPU"]
  t = Tensor(np.arange(16, dtype=np.float32)) * 3 + 1
  it = t.schedule()[-1]
  runner = compile_ast(it.ast, "CPU")
  bufs = [b.ensure() for b in it.bufs]
  prof = profile.start(str(tmp_path / "t.json"))
  gate = dev.signal_t(dev, value=0)
  try:
    with dev.submit_lock:  # the compute queue now waits for the host to open the gate
      tv = dev.next_timeline()
      dev.compute_queue_t().wait(dev.timeline_signal, tv - 1).wait(gate, 1).signal(dev.timeline_signal, tv).submit(dev)
    st = time.perf_counter()
    runner(bufs)  # queued behind the gate: the launch returns, its event waits in the profiler
    assert time.perf_counter() - st < 5
    assert sum(len(q) for q in prof._pending.values()) == 1
    assert runner.spec.name not in open(prof.path).read()
  finally:
    gate.value = 1
  dev.synchronize()
  path = profile.stop()
  with open(path) as f: events = json.load(f)
  ran = [e for e in events if e.get("cat") == "kernel" and e["name"] == runner.spec.name]
  assert len(ran) == 1 and ran[0]["args"]["timeline"] > tv
  assert not profile.ON

def test_a_span_names_its_work():
  assert profile.span("x") is not None  # off: a no-op context
  with profile.span("x") as args: args["n"] = 1

@pytest.mark.parametrize("driver", ["NV", "AMD"])
def test_submits_doorbells_and_host_waits_are_instant_events(tmp_path, driver):
  """PROFILE on a mock GPU: each HCQ submission, each doorbell write and each host wait on a signal not reached yet is
  an instant event ("ph": "i") on the host thread's track, with what it was (queue and commands, address and value,
  signal and value)."""
  import threading
  from baregrad.drivers.port import make_port
  from baregrad.hcq import HCQSignal
  if driver == "NV":
    from baregrad.drivers.mock.nv import MockNVGPU as Mock
    from baregrad.drivers.nv import NVDevice as Dev
  else:
    from baregrad.drivers.mock.amd import MockAMDGPU as Mock
    from baregrad.drivers.amd import AMDDevice as Dev
  path = str(tmp_path / "trace.json")
  was_on = profile.ON
  saved = profile._prof
  profile._prof = None
  dev = Dev(driver, port=make_port(Mock()))
  try:
    profile.start(path)
    gate, done = HCQSignal(dev), HCQSignal(dev)
    dev.compute_queue_t().wait(gate, 1).signal(done, 1).submit(dev)
    t = threading.Timer(0.2, lambda: setattr(gate, "value", 1))
    t.start()
    done.wait(1, timeout_ms=10000)
    t.join()
  finally:
    profile.stop()
    profile._prof, profile.ON = saved, was_on
    dev.close()
  inst = [e for e in profile.load(path) if e.get("ph") == "i"]
  sub = [e for e in inst if e["name"] == "submit"]
  assert sub and sub[0]["args"]["device"] == driver and sub[0]["args"]["commands"] == "wait signal", sub
  assert any(e["name"] == "doorbell" and e["args"]["addr"].startswith("0x") for e in inst), inst
  w = [e for e in inst if e["name"] == "host wait"]
  assert w and w[0]["args"]["signal"] == hex(done.va_addr) and w[0]["args"]["value"] == 1 and w[0]["args"]["now"] == 0, w
  assert sub[0]["ts"] <= w[0]["ts"] and all(e["pid"] == 0 and e["s"] == "t" for e in inst)
