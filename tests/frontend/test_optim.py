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

# ---- the update graph is built by tensor ops once per structure and substituted into on later steps
def _run_changing(make, change, steps=5, torch_side=False):
  """Train `steps` steps, calling change(opt, step) before each; returns (params, losses)."""
  if torch_side:
    l1, l2 = _torch_net()
    params = [l1.weight, l1.bias, l2.weight]
    opt = make(params)
    fwd = lambda: (l2(torch.tanh(l1(torch.tensor(X)))) ** 2).mean()
  else:
    net = Net()
    params = nn.get_parameters(net)
    opt = make(params)
    fwd = lambda: (net(Tensor(X)) ** 2).mean()
  losses = []
  for i in range(steps):
    change(opt, i)
    opt.zero_grad()
    loss = fwd()
    loss.backward()
    opt.step(*(() if torch_side else (loss,)))
    losses.append(loss.item())
  return [(p.detach() if torch_side else p).numpy() for p in params], losses

def _set(opt, name, value):
  # torch keeps hyperparameters per parameter group
  if hasattr(opt, "param_groups"):
    for g in opt.param_groups: g[name] = value
  else: setattr(opt, name, value)

@needs_torch
@pytest.mark.parametrize("cls,kw,change", [
  ("SGD", dict(lr=0.1, momentum=0.9), lambda o, i: i == 2 and _set(o, "momentum", 0.5)),
  ("SGD", dict(lr=0.1), lambda o, i: i == 3 and _set(o, "weight_decay", 0.2)),
  ("Adam", dict(lr=0.01), lambda o, i: i == 2 and _set(o, "weight_decay", 0.1)),
  ("Adam", dict(lr=0.01), lambda o, i: i == 2 and _set(o, "lr", 0.05)),
  ("AdamW", dict(lr=0.02, weight_decay=0.3), lambda o, i: i == 3 and _set(o, "eps", 1e-3)),
])
def test_hyperparameters_changed_between_steps_match_torch(cls, kw, change):
  """A step after a change of a hyperparameter (one that is a constant in the update graph, or the learning rate,
  a device value) computes the new update: a template built before the change is not reused for it."""
  pb, lb = _run_changing(lambda p: getattr(optim, cls)(p, **kw), change)
  pt, lt = _run_changing(lambda p: getattr(torch.optim, cls)(p, **kw), change, torch_side=True)
  np.testing.assert_allclose(lb, lt, rtol=1e-5, atol=1e-6)
  for a, b in zip(pb, pt): np.testing.assert_allclose(a, b, rtol=1e-5, atol=2e-6)

@pytest.mark.parametrize("make,builds", [(lambda p: optim.SGD(p, lr=0.1, momentum=0.9), 2), (lambda p: optim.Adam(p, lr=0.01), 1),
                                         (lambda p: optim.LAMB(p, lr=0.01, weight_decay=0.01), 1)])
def test_update_graph_built_once_and_substituted(make, builds):
  """The tensor-op update (_updates) runs once per structure (SGD's first momentum step is another one); later steps
  substitute the current parameters, gradients and state into its graph and give the same values as building it."""
  def train(cached: bool) -> list:
    net = Net()
    opt = make(nn.get_parameters(net))
    calls = []
    orig = opt._updates
    opt._updates = lambda ps: (calls.append(1), orig(ps))[1]
    if not cached: opt._leaves = lambda ps: None   # the uncached path: tensor ops every step
    for _ in range(4):
      opt.zero_grad()
      loss = (net(Tensor(X)) ** 2).mean()
      loss.backward()
      opt.step(loss)
    assert len(calls) == (builds if cached else 4)
    return [p.numpy() for p in nn.get_parameters(net)]
  for a, b in zip(train(True), train(False)): np.testing.assert_array_equal(a, b)

def test_update_template_follows_which_params_have_gradients():
  """Two parameters of one shape, each the only one with a gradient in turn: the template (same structure) reads
  whichever has it, and the other is left alone."""
  a, b = Tensor.ones(3).requires_grad_(), Tensor.ones(3).requires_grad_()
  opt = optim.SGD([a, b], lr=0.5, momentum=0.5)
  (a * 2).sum().backward(); opt.step()           # a: 1 - 0.5 * 2
  opt.zero_grad()
  (b * 4).sum().backward(); opt.step()           # b: 1 - 0.5 * 4 (its momentum buffer starts at its gradient)
  opt.zero_grad()
  (a * 2).sum().backward(); opt.step()           # a: 0 - 0.5 * (0.5 * 2 + 2)
  np.testing.assert_allclose(a.numpy(), -1.5)
  np.testing.assert_allclose(b.numpy(), -1.0)

def test_shared_gradient_tensor_is_not_templated():
  """Two parameters given the same gradient tensor: each leaf must get its own placeholder, so the step is built by
  tensor ops (and is still right)."""
  a, b = Tensor.ones(3).requires_grad_(), Tensor.ones(3).requires_grad_()
  opt = optim.Adam([a, b], lr=0.1)
  for _ in range(2):
    g = Tensor([1.0, -1.0, 2.0])
    a.grad = b.grad = g
    opt.step()
  np.testing.assert_allclose(a.numpy(), b.numpy())
  np.testing.assert_allclose(a.numpy(), [0.8, 1.2, 0.8], rtol=1e-5)
  assert not opt._templates

def test_subclass_with_its_own_update_is_built_every_step():
  """A user's optimizer that overrides _updates (reading its own attributes) gets no template: a change of its
  attributes between steps takes effect."""
  class Scaled(optim.SGD):
    def _updates(self, params):
      return [(p, p.detach() - p.grad.detach() * self.scale) for p in params]
  a = Tensor.ones(2).requires_grad_()
  opt = Scaled([a], lr=0.1)
  for scale in (1.0, 2.0):
    opt.scale = scale
    opt.zero_grad(); (a * 1).sum().backward(); opt.step()
  np.testing.assert_allclose(a.numpy(), -2.0)
  assert not opt._templates

@pytest.mark.parametrize("make", [lambda p: optim.Adam(p, lr=0.01), lambda p: optim.SGD(p, lr=0.1, momentum=0.9), lambda p: optim.LAMB(p, lr=0.01)])
def test_templated_step_writes_what_assign_nodes_builds(make, monkeypatch):
  """A templated step hands write() the ASSIGNs rebuilt from its recipe: they must be the nodes inplace.assign_nodes
  makes of the pairs _updates builds for the same step (with the same versions written)."""
  import baregrad.tensor.nn.optim as O
  from baregrad.tensor.inplace import assign_nodes
  from baregrad.engine.graph import buffer_uop
  net = Net()
  params = nn.get_parameters(net)
  opt = make(params)
  checked, calls = [], []
  orig = O.write
  def spy(pairs, also=(), before=(), prepared=None):
    calls.append(1)
    # (from the third step: _updates has host state that its first call changes, SGD's started momentum)
    if prepared is not None and len(calls) > 2:
      steps = getattr(opt, "steps", None)
      ref_assigns, ref_news, _ = assign_nodes(opt._updates([p for p in params if p.grad is not None]), before)
      if steps is not None: opt.steps = steps
      sub = {buffer_uop(a): buffer_uop(b) for a, b in zip(ref_news, prepared[1])}
      assert [a.substitute(sub) for a in ref_assigns] == prepared[0]
      checked.append(1)
    return orig(pairs, also, before, prepared)
  monkeypatch.setattr(O, "write", spy)
  for _ in range(4):
    opt.zero_grad()
    loss = (net(Tensor(X)) ** 2).mean()
    loss.backward()
    opt.step(loss)
  assert checked
