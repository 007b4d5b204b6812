"""Out-of-range indices raise IndexError naming the op, the index and the size, as PyTorch does on the CPU: computed on
the device in the schedule of the op (no sync per op), reported at the next host read. BOUNDS=0 turns it off. Also:
backward() twice through one graph raises unless retain_graph=True."""
import numpy as np
import pytest
import baregrad.nn as nn
from baregrad import Tensor, Device, jit, gather, scatter, scatter_add, one_hot, cross_entropy, nll_loss
from baregrad.helpers import Context

X = np.arange(6, dtype=np.float32).reshape(2, 3)

def _setitem():
  y = Tensor.zeros(2, 3)
  y[Tensor([1, 2])] = 1.0
  return y

BAD = {  # op -> (what to compute, text the error names)
  "gather": (lambda: gather(Tensor(X), 1, Tensor([[0, 5]])), "gather: index 5 is out of bounds for dimension 1 with size 3"),
  "gather_negative": (lambda: gather(Tensor(X), 1, Tensor([[-1, 0]])), "gather: index -1 is out of bounds for dimension 1 with size 3"),
  "embedding": (lambda: nn.Embedding(3, 2)(Tensor([1, 7])), "embedding: index 7 is out of range for 3 embeddings"),
  "fancy_indexing": (lambda: Tensor(X)[Tensor([0, 2])], "index 2 is out of bounds for dimension 0 with size 2"),
  "fancy_indexing_negative": (lambda: Tensor(X)[:, Tensor([-4])], "index -4 is out of bounds for dimension 1 with size 3"),
  "setitem": (_setitem, "index 2 is out of bounds for dimension 0 with size 2"),
  "scatter": (lambda: scatter(Tensor.zeros(2, 3), 1, Tensor([[4]]), Tensor.ones(1, 1)), "scatter: index 4 is out of bounds for dimension 1 with size 3"),
  "scatter_add": (lambda: scatter_add(Tensor.zeros(2, 3), 0, Tensor([[3]]), Tensor.ones(1, 1)),
                  "scatter_add: index 3 is out of bounds for dimension 0 with size 2"),
  "one_hot": (lambda: one_hot(Tensor([0, 5]), 3), "one_hot: class value 5 is out of range for num_classes=3"),
  "cross_entropy": (lambda: cross_entropy(Tensor(X), Tensor([0, 3])), "target 3 is out of bounds for 3 classes"),
  "nll_loss": (lambda: nll_loss(Tensor(X), Tensor([-2, 0])), "target -2 is out of bounds for 3 classes"),
}

@pytest.mark.parametrize("op", list(BAD))
def test_out_of_range_index_raises(op):
  make, text = BAD[op]
  t = make()
  with pytest.raises(IndexError, match=text.replace("(", r"\(").replace(")", r"\)")): t.numpy()
  assert Tensor([1., 2.]).tolist() == [1., 2.]  # reported once: the device goes on

def test_pytorch_exception_types():
  # PyTorch raises RuntimeError for gather, scatter and one_hot: the error is both
  with pytest.raises(RuntimeError): BAD["gather"][0]().numpy()

def test_in_range_indices_and_ignore_index_do_not_raise():
  np.testing.assert_allclose(gather(Tensor(X), 1, Tensor([[2, 0], [1, 1]])).numpy(), [[2., 0.], [4., 4.]])
  assert Tensor(X)[Tensor([-1])].tolist() == [[3., 4., 5.]]
  assert np.isfinite(cross_entropy(Tensor(X), Tensor([0, -100])).item())

def test_no_sync_per_op(monkeypatch):
  dev = Device[Device.DEFAULT]
  n = [0]
  orig = type(dev).synchronize
  monkeypatch.setattr(type(dev), "synchronize", lambda self, *a, **k: (n.__setitem__(0, n[0] + 1), orig(self, *a, **k))[1])
  idx = Tensor([[0, 5]])
  ts = [gather(Tensor(X), 1, idx).realize(), (Tensor(X)[Tensor([0, 1])] * 2).realize()]
  assert n[0] == 0, f"{n[0]} syncs before any host read"
  with pytest.raises(IndexError, match="index 5"): ts[1].numpy()  # the first read on the device reports it

def test_bounds_off():
  with Context(BOUNDS=0):
    np.testing.assert_allclose(gather(Tensor(X), 1, Tensor([[0, 5]])).numpy(), [[0., 0.]])  # no check: the one-hot matches nothing

def test_jit_replay_checks_every_call():
  @jit
  def f(x, i): return gather(x, 1, i) * 2
  x = Tensor(X)
  for _ in range(3): np.testing.assert_allclose(f(x, Tensor([[1], [2]])).numpy(), [[2.], [10.]])
  bad = f(x, Tensor([[1], [3]]))
  with pytest.raises(IndexError, match="index 3"): bad.numpy()
  np.testing.assert_allclose(f(x, Tensor([[0], [0]])).numpy(), [[0.], [6.]])

def test_backward_twice_raises_unless_retained():
  w = Tensor([1., 2.], requires_grad=True)
  loss = (w * w).sum()
  loss.backward(retain_graph=True)
  loss.backward()
  np.testing.assert_allclose(w.grad.numpy(), [4., 8.])
  with pytest.raises(RuntimeError, match="second time"): loss.backward()
  (w * w).sum().backward()  # a new forward is a new graph
