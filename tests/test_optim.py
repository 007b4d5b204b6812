"""Optimizers against torch.optim (3 steps from identical weights) and LAMB against a NumPy reference."""
import numpy as np
import pytest
import baregrad.nn as nn
from baregrad import Tensor
from baregrad.nn import optim

try: import torch
except ImportError: torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (pip install -e '.[torch]'): no reference to compare with")

R = np.random.default_rng(0)
W1, B1 = R.standard_normal((6, 4)).astype(np.float32), R.standard_normal(6).astype(np.float32)
W2 = R.standard_normal((3, 6)).astype(np.float32)
X = R.standard_normal((5, 4)).astype(np.float32)

class Net:
  def __init__(self):
    self.l1, self.l2 = nn.Linear(4, 6), nn.Linear(6, 3, bias=False)
    nn.load_state_dict(self, {"l1.weight": W1, "l1.bias": B1, "l2.weight": W2})
  def __call__(self, x): return self.l2(self.l1(x).tanh())

def _torch_net():
  l1, l2 = torch.nn.Linear(4, 6), torch.nn.Linear(6, 3, bias=False)
  with torch.no_grad(): l1.weight.copy_(torch.tensor(W1)); l1.bias.copy_(torch.tensor(B1)); l2.weight.copy_(torch.tensor(W2))
  return l1, l2

def run_baregrad(make, steps=3):
  net = Net()
  opt = make(nn.get_parameters(net))
  losses = []
  for _ in range(steps):
    opt.zero_grad()
    loss = (net(Tensor(X)) ** 2).mean()
    loss.backward()
    opt.step(loss)
    losses.append(loss.item())
  return [p.numpy() for p in nn.get_parameters(net)], losses

def run_torch(make, steps=3):
  l1, l2 = _torch_net()
  params = [l1.weight, l1.bias, l2.weight]
  opt = make(params)
  losses = []
  for _ in range(steps):
    opt.zero_grad()
    loss = (l2(torch.tanh(l1(torch.tensor(X)))) ** 2).mean()
    loss.backward()
    opt.step()
    losses.append(loss.item())
  return [p.detach().numpy() for p in params], losses

CASES = {
  "sgd": dict(lr=0.1),
  "sgd_momentum_dampening_weight_decay": dict(lr=0.1, momentum=0.9, dampening=0.3, weight_decay=0.1),
  "sgd_nesterov": dict(lr=0.1, momentum=0.9, nesterov=True),
}

@needs_torch
@pytest.mark.parametrize("name", list(CASES))
def test_sgd_matches_torch(name):
  kw = CASES[name]
  pb, lb = run_baregrad(lambda p: optim.SGD(p, **kw))
  pt, lt = run_torch(lambda p: torch.optim.SGD(p, **kw))
  np.testing.assert_allclose(lb, lt, rtol=1e-5, atol=1e-6)
  for a, b in zip(pb, pt): np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)

@needs_torch
@pytest.mark.parametrize("cls,kw", [("Adam", dict(lr=0.01)), ("Adam", dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
                                    ("AdamW", dict(lr=0.02, weight_decay=0.3))])
def test_adam_matches_torch(cls, kw):
  pb, lb = run_baregrad(lambda p: getattr(optim, cls)(p, **kw))
  pt, lt = run_torch(lambda p: getattr(torch.optim, cls)(p, **kw))
  np.testing.assert_allclose(lb, lt, rtol=1e-5, atol=1e-6)
  for a, b in zip(pb, pt): np.testing.assert_allclose(a, b, rtol=1e-5, atol=2e-6)

def lamb_reference(params, grads_fn, steps, lr, b1, b2, eps, wd):
  """NumPy LAMB (You et al., 2019, Algorithm 2), in float64."""
  ps = [p.astype(np.float64) for p in params]
  m = [np.zeros_like(p) for p in ps]; v = [np.zeros_like(p) for p in ps]
  for t in range(1, steps + 1):
    gs = grads_fn([p.astype(np.float32) for p in ps])
    for i, (p, g) in enumerate(zip(ps, gs)):
      m[i] = b1 * m[i] + (1 - b1) * g
      v[i] = b2 * v[i] + (1 - b2) * g * g
      r = (m[i] / (1 - b1 ** t)) / (np.sqrt(v[i] / (1 - b2 ** t)) + eps) + wd * p
      n1, n2 = np.linalg.norm(p), np.linalg.norm(r)
      trust = n1 / n2 if n1 > 0 and n2 > 0 else 1.0
      ps[i] = p - lr * trust * r
  return ps

@needs_torch
@pytest.mark.parametrize("wd", [0.0, 0.05])
def test_lamb_matches_reference(wd):
  def torch_grads(ps):
    l1, l2 = _torch_net()
    with torch.no_grad(): l1.weight.copy_(torch.tensor(ps[0])); l1.bias.copy_(torch.tensor(ps[1])); l2.weight.copy_(torch.tensor(ps[2]))
    loss = (l2(torch.tanh(l1(torch.tensor(X)))) ** 2).mean()
    loss.backward()
    return [l1.weight.grad.double().numpy(), l1.bias.grad.double().numpy(), l2.weight.grad.double().numpy()]
  pb, _ = run_baregrad(lambda p: optim.LAMB(p, lr=0.05, weight_decay=wd))
  ref = lamb_reference([W1, B1, W2], torch_grads, 3, 0.05, 0.9, 0.999, 1e-6, wd)
  for a, b in zip(pb, ref): np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)

def test_step_is_in_place_and_batched():
  net = Net()
  params = nn.get_parameters(net)
  bufs = [p.uop.src[0].arg.ensure() if p.uop.op.name == "RESHAPE" else p.uop.arg.ensure() for p in params]
  opt = optim.Adam(params, lr=0.1)
  from baregrad.engine import lazy
  calls = []
  orig = lazy.realize
  lazy.realize = lambda uops, dev: (calls.append(len(uops)), orig(uops, dev))[1]
  try:
    loss = (net(Tensor(X)) ** 2).mean()
    loss.backward()
    opt.step(loss)
  finally: lazy.realize = orig
  assert len(calls) == 1, f"step ran {len(calls)} schedules"
  # same memory, new values
  for p, b in zip(params, bufs):
    base = p.uop.src[0].arg if p.uop.op.name == "RESHAPE" else p.uop.arg
    assert base.buf.base is b.base and base.buf.offset == b.offset
  assert not np.allclose(params[0].numpy(), W1)

@needs_torch
def test_loss_passed_to_step_sees_old_weights():
  net = Net()
  opt = optim.SGD(nn.get_parameters(net), lr=1.0)
  loss = (net(Tensor(X)) ** 2).mean()
  loss.backward()
  opt.step(loss)
  l1, l2 = _torch_net()
  ref = (l2(torch.tanh(l1(torch.tensor(X)))) ** 2).mean().item()
  assert abs(loss.item() - ref) < 1e-5

def test_zero_grad_and_params_without_grad():
  a, b = Tensor.ones(3, requires_grad=True), Tensor.ones(2).requires_grad_()  # a is a graph, not a buffer, until the optimizer makes it one
  opt = optim.SGD([a, b, a], lr=0.5)
  assert len(opt.params) == 2
  (a * 2).sum().backward()
  opt.step()
  np.testing.assert_allclose(a.numpy(), 0.0)
  np.testing.assert_allclose(b.numpy(), 1.0)  # no gradient: untouched
  opt.zero_grad()
  assert a.grad is None and b.grad is None

def test_bad_arguments():
  with pytest.raises(ValueError, match="empty"): optim.SGD([], lr=0.1)
  with pytest.raises(ValueError, match="Nesterov"): optim.SGD([Tensor.ones(2).requires_grad_()], lr=0.1, nesterov=True)
  with pytest.raises(ValueError, match="learning rate"): optim.Adam([Tensor.ones(2).requires_grad_()], lr=-1)
