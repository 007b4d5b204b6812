"""Data-parallel training in one process (tensor/nn/data_parallel.py): replicas stay bit-identical, and training on
two CPU devices matches one device on the whole batch."""
import numpy as np
import pytest
import baregrad.nn as nn
from baregrad import Tensor
from baregrad.nn import optim
from baregrad.tensor.nn.data_parallel import DataParallel

class MLP(nn.Module):
  def __init__(self): self.l1, self.l2 = nn.Linear(8, 16), nn.Linear(16, 3)
  def forward(self, x): return self.l2(self.l1(x).relu())

def loss_fn(m, x, y): return nn.cross_entropy(m(x), y)

@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_data_parallel_matches_one_device(opt):
  Tensor.manual_seed(0)
  model = MLP()
  mk = (lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9)) if opt == "sgd" else (lambda ps: optim.Adam(ps, lr=1e-2))
  one, two = DataParallel(model, ["CPU:0"], mk), DataParallel(model, ["CPU:0", "CPU:1"], mk)
  assert [p.device for p in two.params[1]] == ["CPU:1"] * 4
  r = np.random.default_rng(0)
  for _ in range(4):
    x, y = r.standard_normal((7, 8)).astype(np.float32), r.integers(0, 3, 7).astype(np.int32)   # 7: uneven parts
    l1, l2 = one.step(loss_fn, Tensor(x), Tensor(y)), two.step(loss_fn, Tensor(x), Tensor(y))
    np.testing.assert_allclose(l2.item(), l1.item(), rtol=1e-5)
    for a, b, c in zip(*two.params, one.params[0]):
      np.testing.assert_array_equal(a.numpy(), b.numpy())   # identical weights on every device after each step
      np.testing.assert_allclose(a.numpy(), c.numpy(), rtol=1e-4, atol=1e-5)

def test_data_parallel_bad_input():
  dp = DataParallel(MLP(), ["CPU:0", "CPU:1"], lambda ps: optim.SGD(ps, lr=0.1))
  with pytest.raises(ValueError, match=r"x has 4 samples .* y has 3"):
    dp.step(loss_fn, Tensor(np.zeros((4, 8), np.float32)), Tensor(np.zeros(3, np.int32)))
  with pytest.raises(ValueError, match="mixes kinds"): DataParallel(MLP(), ["CPU:0", "NV:0"], lambda ps: optim.SGD(ps, lr=0.1))

def test_jitted_step_matches_eager_and_runs_each_forward_once():
  """A jitted data-parallel step (a batch given as one array per device) replays what the eager step computes, with
  bit-identical replicas after every step; its recording computes each replica's forward pass once (a replica's live
  loss once made the optimizer's schedule run that replica's forward again), on the listed devices only, and submits
  each device's run of kernels between copies as one recorded queue (tensor/jit.py _segments)."""
  from baregrad import knobs
  from baregrad.tensor.jit import jit, _CopyRunner
  devs = ["CPU:0", "CPU:1"]
  Tensor.manual_seed(0)
  model = MLP()
  mk = lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9)
  eager, jitted = DataParallel(model, devs, mk), DataParallel(model, devs, mk)
  step = jit(lambda xs, ys: jitted.step(loss_fn, xs, ys))
  r = np.random.default_rng(1)
  for _ in range(5):
    x, y = r.standard_normal((8, 8)).astype(np.float32), r.integers(0, 3, 8).astype(np.int32)
    xs, ys = [x[:3], x[3:]], [y[:3], y[3:]]   # uneven parts: the gradients are weighted by each part's share
    le, lj = eager.step(loss_fn, xs, ys), step(xs, ys)
    np.testing.assert_allclose(lj.item(), le.item(), rtol=1e-6)
    for a, b, c in zip(*jitted.params, eager.params[0]):
      np.testing.assert_array_equal(a.numpy(), b.numpy())
      np.testing.assert_allclose(a.numpy(), c.numpy(), rtol=1e-6, atol=1e-7)
  if not knobs.get("JIT"): return   # (CI's JIT=0 stage: the same values, eagerly)
  assert len(step.captured) == 1 and not step.eager_only
  cap = next(iter(step.captured.values()))
  kernels = [l for l in cap.launches if not isinstance(l.runner, _CopyRunner)]
  assert {l.runner.device for l in kernels} == set(devs)
  per = {d: [l.runner.prg.name for l in kernels if l.runner.device == d] for d in devs}
  assert len(per["CPU:0"]) == len(per["CPU:1"]), per   # the same work on each replica, none of it twice
  if not knobs.get("JIT_NOGRAPH"):
    assert cap.segments is not None and any(g is not None for _, _, g in cap.segments)
    assert len(cap.segments) < len(cap.launches) // 2

def test_parts_per_device_checked():
  dp = DataParallel(MLP(), ["CPU:0", "CPU:1"], lambda ps: optim.SGD(ps, lr=0.1))
  x, y = np.zeros((4, 8), np.float32), np.zeros(4, np.int32)
  with pytest.raises(ValueError, match=r"x has 1 parts for the 2 devices"): dp.step(loss_fn, [x], [y[:2], y[2:]])
  with pytest.raises(ValueError, match=r"part 1 \(CPU:1\) of x has 2 samples .* of y 1"): dp.step(loss_fn, [x[:2], x[2:]], [y[:2], y[2:3]])

MOCK_SCRIPT = '''
import sys, numpy as np
import baregrad.nn as nn
from baregrad import Tensor, knobs
from baregrad.nn import optim
from baregrad.tensor.jit import jit
from baregrad.tensor.nn.data_parallel import DataParallel
D = sys.argv[1].split(",")
Tensor.manual_seed(0)
model = nn.Linear(6, 3)
mk = lambda ps: optim.SGD(ps, lr=0.1)
loss_fn = lambda m, x, y: nn.cross_entropy(m(x), y)
one, two = DataParallel(model, D[:1], mk), DataParallel(model, D, mk)
step = jit(lambda xs, ys: two.step(loss_fn, xs, ys))
r = np.random.default_rng(0)
for _ in range(4):
  x, y = r.standard_normal((6, 6)).astype(np.float32), r.integers(0, 3, 6).astype(np.int32)
  l1, l2 = one.step(loss_fn, [x], [y]), step([x[:2], x[2:]], [y[:2], y[2:]])
  np.testing.assert_allclose(l2.item(), l1.item(), rtol=1e-5)
  for a, b, c in zip(*two.params, one.params[0]):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_allclose(a.numpy(), c.numpy(), rtol=1e-5, atol=1e-6)
if knobs.get("JIT"): assert len(step.captured) == 1 and not step.eager_only
print("ok")
'''

@pytest.mark.parametrize("kind", ["NV", "AMD"])
def test_jitted_data_parallel_on_two_mock_gpus(kind):
  """The jitted data-parallel step on two mock GPUs (peer copies through the GPUs' own queues) matches one GPU on the
  whole batch, replicas bit-identical after every step."""
  import os, subprocess, sys
  from tests.paths import REPO
  env = dict(os.environ, PYTHONPATH=str(REPO), MOCKGPU="1", MOCKGPU_COUNT="2", DEV=kind)
  p = subprocess.run([sys.executable, "-c", MOCK_SCRIPT, f"{kind}:0,{kind}:1"], env=env, capture_output=True, text=True, timeout=600)
  assert p.returncode == 0 and p.stdout.strip().endswith("ok"), p.stdout + p.stderr
