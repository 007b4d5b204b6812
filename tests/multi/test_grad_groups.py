"""Gradients realized group by group (DistributedOptimizer's buckets): autograd.shared_values finds what a later
group's graph reads of an earlier one's, so realizing it with the earlier group spares computing it twice."""
import numpy as np
import baregrad.nn as nn
from baregrad import Tensor
from baregrad.engine import lazy, runner
from baregrad.tensor.autograd import shared_values

def test_shared_values_are_computed_once(monkeypatch):
  Tensor.manual_seed(0)
  ls = [nn.Linear(16, 16) for _ in range(3)]
  x = Tensor(np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32))
  def grads():
    for l in ls: l.weight.grad = l.bias.grad = None
    h = x
    for l in ls: h = l(h).relu()
    h.sum().backward()
    return [[l.weight.grad, l.bias.grad] for l in reversed(ls)]   # last layer first, as backward produces them
  want = [[g.numpy() for g in grp] for grp in grads()]
  launches = []
  call = runner.CompiledRunner.__call__
  monkeypatch.setattr(runner.CompiledRunner, "__call__", lambda self, *a, **k: (launches.append(self), call(self, *a, **k))[1])
  def by_groups(share):
    groups, counts = grads(), []
    for k, grp in enumerate(groups):
      later = [g.uop for rest in groups[k + 1:] for g in rest]
      also = shared_values([g.uop for g in grp], later) if share else []
      if share and k < len(groups) - 1: assert also, "the activation gradient the next layer's gradients read"
      launches.clear()
      grp[0].realize(*grp[1:], *[Tensor(u) for u in also])
      counts.append(len(launches))
      assert all(lazy.realized(u) is not None for u in also)
      for g, w in zip(grp, want[k]): np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-6)
    return counts
  plain, shared = by_groups(False), by_groups(True)
  assert sum(shared) < sum(plain), (plain, shared)   # the later groups no longer compute the earlier ones' values
