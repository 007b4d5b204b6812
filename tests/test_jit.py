"""jit: capture on the second call, replay on later calls with new inputs; one submit on HCQ devices."""
import numpy as np
import pytest
from baregrad import Tensor, jit, Device

def test_jit_replays_with_new_inputs():
  w = Tensor.rand(16, 8).realize()
  @jit
  def f(x): return (x @ w).relu().sum(1) * 2 + 1
  for _ in range(5):
    x = Tensor.rand(4, 16)
    np.testing.assert_allclose(f(x).numpy(), np.maximum(x.numpy() @ w.numpy(), 0).sum(1) * 2 + 1, rtol=1e-5)
  cap = next(iter(f.captured.values()))
  assert cap.launches and cap.graph is not None  # the CPU device is an HCQ device: one recorded queue

def test_jit_different_shapes_recapture_not_wrong():
  @jit
  def f(x): return x * 2 + 1
  for n in (3, 5, 3, 5, 7, 3):
    x = Tensor.rand(n)
    np.testing.assert_allclose(f(x).numpy(), x.numpy() * 2 + 1, rtol=1e-6)
  assert len(f.captured) >= 2

def test_jit_training_step_updates_parameters():
  w = Tensor.rand(8, 1, requires_grad=True)
  @jit
  def step(x, y):
    loss = ((x @ w - y) ** 2).mean()
    loss.backward()
    w.assign(w.detach() - 0.1 * w.grad)
    w.grad = None
    return loss
  rng = np.random.default_rng(0)
  xs = rng.random((32, 8), dtype=np.float32); ys = xs @ rng.random((8, 1), dtype=np.float32)
  losses = [step(Tensor(xs), Tensor(ys)).item() for _ in range(20)]
  assert losses[-1] < losses[0] * 0.5

def test_jit_off_runs_plainly(monkeypatch):
  from baregrad.helpers import Context
  with Context(JIT=0):
    @jit
    def f(x): return x + 1
    for _ in range(3): f(Tensor.rand(3))
    assert not f.captured
