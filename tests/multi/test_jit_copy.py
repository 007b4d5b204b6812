"""Copies between devices inside a jit capture: the jitted function replays them (queued on both devices where they link,
else through the host) and gives what the eager function gives, call after call (value semantics: earlier outputs keep
their values, inputs are bound anew on every call)."""
import os, subprocess, sys, textwrap
import numpy as np
import pytest
from tests.paths import REPO

SCRIPT = textwrap.dedent('''
  import sys, numpy as np
  from baregrad import Tensor, knobs
  from baregrad.tensor.jit import jit
  from baregrad.tensor import collectives as C
  D = sys.argv[1].split(",")
  r = np.random.default_rng(0)
  calls = []
  @jit
  def step(x, y):
    calls.append(1)
    there = (x.to(D[1]) * 2 + 1).realize()   # a copy out, a kernel on the other device
    return there, (there.to(D[0]) + y).realize()   # and a copy back, read by a kernel on the first
  outs, wants = [], []
  for i in range(5):
    x, y = r.standard_normal(1000).astype(np.float32), r.standard_normal(1000).astype(np.float32)
    a, b = step(Tensor(x, device=D[0]), Tensor(y, device=D[0]))
    assert (a.device, b.device) == (D[1], D[0])
    outs.append((a, b)); wants.append((x * 2 + 1, x * 2 + 1 + y))
  if knobs.get("JIT"): assert len(calls) == 2 and len(step.captured) == 1 and not step.eager_only, (calls, step.eager_only)   # 3-5: replays
  for (a, b), (wa, wb) in zip(outs, wants):   # every call's outputs kept their own values
    np.testing.assert_allclose(a.numpy(), wa, rtol=1e-6); np.testing.assert_allclose(b.numpy(), wb, rtol=1e-6)
  # a jitted allreduce: the collective's copies are recorded and replayed
  @jit
  def allreduce(*ts): return C.realize(C.allreduce(list(ts)))
  for i in range(4):
    xs = [r.standard_normal(257).astype(np.float32) for _ in D]
    out = allreduce(*[Tensor(v, device=d) for v, d in zip(xs, D)])
    for o in out: np.testing.assert_allclose(o.numpy(), sum(xs), rtol=1e-5, atol=1e-5)
  if knobs.get("JIT"): assert len(allreduce.captured) == 1 and not allreduce.eager_only
  # runs of several kernels on one device between copies: each run is one recorded queue (tensor/jit.py _segments)
  @jit
  def runs(x, w):
    h = ((x @ w).relu() * 2).realize()          # kernels on D[0]
    there = h.to(D[1]).contiguous()
    g = ((there.exp() + 1).sum(1) * 3).realize()   # kernels on D[1]
    return g, (g.to(D[0]) - h.sum(1)).realize()
  w = Tensor(r.standard_normal((16, 16)).astype(np.float32), device=D[0]).realize()
  for i in range(5):
    x = r.standard_normal((8, 16)).astype(np.float32)
    g, d = runs(Tensor(x, device=D[0]), w)
    h = np.maximum(x @ w.numpy(), 0) * 2
    want = ((np.exp(h) + 1).sum(1) * 3)
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-4); np.testing.assert_allclose(d.numpy(), want - h.sum(1), rtol=1e-4)
  if knobs.get("JIT") and not knobs.get("JIT_NOGRAPH"):
    cap = next(iter(runs.captured.values()))
    graphs = [(lo, hi) for lo, hi, g in cap.segments if g is not None]
    assert graphs and all(hi - lo >= 2 for lo, hi in graphs), cap.segments
  print("ok")
''')

@pytest.mark.parametrize("kind,n", [("CPU", 2), ("AMD", 2), ("NV", 2)])
def test_jit_replays_copies_between_devices(kind, n):
  env = dict(os.environ, PYTHONPATH=str(REPO), **({} if kind == "CPU" else {"MOCKGPU": "1", "MOCKGPU_COUNT": str(n), "DEV": kind}))
  p = subprocess.run([sys.executable, "-c", SCRIPT, ",".join(f"{kind}:{i}" for i in range(n))], env=env, capture_output=True, text=True, timeout=600)
  assert p.returncode == 0 and p.stdout.strip().endswith("ok"), p.stdout + p.stderr

def test_jit_copy_follows_an_input_written_in_place():
  """A recorded copy reads its source anew on every replay: an input changed in place between calls is copied as it is
  now (the copy's source is bound like a kernel's argument)."""
  from baregrad import Tensor, knobs
  from baregrad.tensor.jit import jit
  @jit
  def f(x): return (x.to("CPU:1") + 0).realize()
  x = Tensor(np.zeros(8, np.float32), device="CPU:0").realize()
  for i in range(4):
    x.assign(Tensor(np.full(8, i, np.float32), device="CPU:0")).realize()
    assert f(x).numpy().tolist() == [float(i)] * 8
  if knobs.get("JIT"): assert len(f.captured) == 1   # (CI's JIT=0 stage: the same values, eagerly)
