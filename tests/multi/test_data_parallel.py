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
