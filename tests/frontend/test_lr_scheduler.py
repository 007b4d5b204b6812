"""optim.lr_scheduler and param_groups against torch.optim: the same learning rates step by step (PyTorch's formulas),
per-group hyperparameters, state_dict round trips, a changed lr that needs no new update graph, and errors naming the
field a scheduler needs."""
import math
import numpy as np
import pytest
from baregrad import Tensor
from baregrad.nn import optim
from baregrad.nn.optim import lr_scheduler
try: import torch
except ImportError: torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed: no reference to compare with")

SCHEDULES = [
  ("StepLR", dict(step_size=3, gamma=0.5)),
  ("MultiStepLR", dict(milestones=[2, 5, 5], gamma=0.3)),
  ("ExponentialLR", dict(gamma=0.9)),
  ("CosineAnnealingLR", dict(T_max=4, eta_min=0.01)),   # 12 steps: past T_max, where the cosine goes back up
  ("LinearLR", dict(start_factor=0.25, end_factor=1.0, total_iters=4)),
  ("LambdaLR", dict(lr_lambda=lambda e: 1.0 / (1 + e))),
  ("OneCycleLR", dict(max_lr=0.5, total_steps=12)),
  ("OneCycleLR", dict(max_lr=[0.5, 0.2], total_steps=12, three_phase=True, anneal_strategy="linear")),
]

def _lrs(mod, opt_cls, name, kw, n=12):
  """Each step's get_last_lr() (and the groups' momentum) for two parameter groups."""
  if mod is torch:
    a, b = torch.zeros(2, requires_grad=True), torch.zeros(3, requires_grad=True)
    opt = getattr(torch.optim, opt_cls)([{"params": [a]}, {"params": [b], "lr": 0.05}], lr=0.1, **({"momentum": 0.9} if opt_cls == "SGD" else {}))
    sched = getattr(torch.optim.lr_scheduler, name)(opt, **kw)
  else:
    a, b = Tensor.zeros(2, requires_grad=True), Tensor.zeros(3, requires_grad=True)
    opt = getattr(optim, opt_cls)([{"params": [a]}, {"params": [b], "lr": 0.05}], lr=0.1, **({"momentum": 0.9} if opt_cls == "SGD" else {}))
    sched = getattr(lr_scheduler, name)(opt, **kw)
  out = []
  for _ in range(n):
    out.append(sched.get_last_lr() + [g.get("momentum", g.get("betas", (0,))[0]) for g in opt.param_groups])
    opt.step()
    sched.step()
  return np.array(out, np.float64)

@needs_torch
@pytest.mark.parametrize("name,kw", SCHEDULES)
@pytest.mark.parametrize("opt_cls", ["SGD", "Adam"])
def test_schedule_matches_torch(name, kw, opt_cls):
  np.testing.assert_allclose(_lrs(None, opt_cls, name, kw), _lrs(torch, opt_cls, name, kw), rtol=1e-12, atol=1e-15)

@needs_torch
def test_param_groups_train_as_torch():
  """Two groups with their own lr and weight decay, under a StepLR: the parameters match torch's after each step."""
  rng = np.random.default_rng(0)
  w0, b0, x = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(3).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
  def run(lib):
    T = torch.tensor if lib is torch else Tensor
    w, b = T(w0.copy()), T(b0.copy())
    w.requires_grad_(True); b.requires_grad_(True)
    O = torch.optim if lib is torch else optim
    opt = O.SGD([{"params": [w], "weight_decay": 0.1}, {"params": [b], "lr": 0.5}], lr=0.1, momentum=0.9)
    sched = (torch.optim.lr_scheduler if lib is torch else lr_scheduler).StepLR(opt, step_size=2, gamma=0.5)
    out = []
    for _ in range(5):
      opt.zero_grad()
      loss = ((T(x) @ w.T + b).tanh() ** 2).mean()
      loss.backward()
      opt.step()
      sched.step()
      out.append(np.concatenate([w.detach().numpy().ravel(), b.detach().numpy().ravel()]))
    return np.array(out)
  np.testing.assert_allclose(run(None), run(torch), rtol=1e-5, atol=1e-6)

def test_lr_change_reuses_the_update_graph():
  """A scheduler changing lr every step: the update graph is built once (the rate is a device value the kernel
  reads), and the parameter moves by the scheduled rate."""
  w = Tensor.zeros(4, requires_grad=True)
  opt = optim.SGD([w], lr=1.0)
  calls = []
  orig = opt._updates
  opt._updates = lambda ps: (calls.append(1), orig(ps))[1]
  sched = lr_scheduler.LambdaLR(opt, lambda e: 1.0 / (e + 1))
  total = 0.0
  for e in range(5):
    opt.zero_grad()
    w.sum().backward()   # gradient 1 everywhere
    opt.step()
    total += 1.0 / (e + 1)
    sched.step()
  assert len(calls) == 1
  np.testing.assert_allclose(w.numpy(), -total, rtol=1e-6)

def test_group_lr_written_to_device_at_once():
  a, b = Tensor.zeros(2, requires_grad=True), Tensor.zeros(2, requires_grad=True)
  opt = optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1)
  assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5]
  opt.param_groups[1]["lr"] = 2.0
  assert opt.param_groups[1]._lr_t.item() == 2.0 and opt.param_groups[0]._lr_t.item() == pytest.approx(0.1)
  opt.lr = 0.25   # an attribute sets every group, as before param groups
  assert [g["lr"] for g in opt.param_groups] == [0.25, 0.25] and opt.lr == 0.25
  with pytest.raises(ValueError, match="invalid learning rate"): opt.param_groups[0]["lr"] = "0.1"
  with pytest.raises(ValueError, match="invalid learning rate"): optim.SGD([a], lr=-1.0)

def test_scheduler_state_dict_round_trip():
  w = Tensor.zeros(2, requires_grad=True)
  opt = optim.SGD([w], lr=1.0)
  s = lr_scheduler.StepLR(opt, step_size=2, gamma=0.1)
  for _ in range(3): opt.step(); s.step()
  sd = s.state_dict()
  assert "optimizer" not in sd and sd["last_epoch"] == 3
  w2 = Tensor.zeros(2, requires_grad=True)
  opt2 = optim.SGD([w2], lr=1.0)
  s2 = lr_scheduler.StepLR(opt2, step_size=2, gamma=0.1)
  s2.load_state_dict(sd)
  opt2.param_groups[0]["lr"] = s2.get_last_lr()[0]
  s.step(); s2.step()
  assert s.get_last_lr() == s2.get_last_lr() == [pytest.approx(0.01)]

# ---- bad input: a scheduler given an optimizer without the field it needs says which
def test_scheduler_without_param_groups_names_it():
  class Plain:
    lr = 0.1
  with pytest.raises(TypeError, match="param_groups"): lr_scheduler.StepLR(Plain(), step_size=1)

def test_onecycle_cycle_momentum_needs_momentum_or_betas():
  class NoMomentum(optim.SGD):
    pass
  w = Tensor.zeros(2, requires_grad=True)
  opt = NoMomentum([w], lr=0.1)
  del opt.defaults["momentum"]   # an optimizer without SGD's momentum or Adam's betas
  with pytest.raises(ValueError, match="'momentum' or 'betas'"): lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=4)
  lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=4, cycle_momentum=False)   # fine without the cycle

def test_resume_without_initial_lr_names_it():
  w = Tensor.zeros(2, requires_grad=True)
  with pytest.raises(KeyError, match="initial_lr"): lr_scheduler.StepLR(optim.SGD([w], lr=0.1), step_size=1, last_epoch=3)

def test_onecycle_past_total_steps_raises():
  w = Tensor.zeros(2, requires_grad=True)
  s = lr_scheduler.OneCycleLR(optim.SGD([w], lr=0.1, momentum=0.9), max_lr=1.0, total_steps=2)
  s.step(); s.step()
  with pytest.raises(ValueError, match="total steps is 2"): s.step()

def test_bad_param_groups():
  a = Tensor.zeros(2, requires_grad=True)
  with pytest.raises(ValueError, match="more than one parameter group"): optim.SGD([{"params": [a]}, {"params": [a]}], lr=0.1)
  with pytest.raises(TypeError, match="unknown options"): optim.SGD([{"params": [a], "betas": (0.9, 0.99)}], lr=0.1)

def test_optimizer_state_dict_round_trip():
  """Adam's moments and step count, and SGD's momentum buffers, saved and loaded into a new optimizer continue the
  same trajectory as the original."""
  for make in (lambda p: optim.Adam(p, lr=0.1), lambda p: optim.SGD(p, lr=0.1, momentum=0.9)):
    def fresh():
      w = Tensor(np.arange(4, dtype=np.float32)).requires_grad_()
      return w, make([w])
    def step(w, o):
      o.zero_grad(); (w * w).sum().backward(); o.step()
    w1, o1 = fresh()
    for _ in range(3): step(w1, o1)
    w2, o2 = fresh()
    w2.assign(w1.detach())
    o2.load_state_dict(o1.state_dict())
    step(w1, o1); step(w2, o2)
    np.testing.assert_array_equal(w1.numpy(), w2.numpy())
    assert math.isfinite(float(w1.numpy().sum()))

def test_schedule_seen_by_jit_replays():
  """A jitted training step replays its recorded kernels: the scheduled lr (a device value) still changes each step,
  with the same parameters as the eager loop."""
  from baregrad import jit
  def run(use_jit):
    w = Tensor(np.ones(3, np.float32)).requires_grad_()
    opt = optim.SGD([w], lr=0.5, momentum=0.5)
    sched = lr_scheduler.ExponentialLR(opt, gamma=0.5)
    def step(x):
      opt.zero_grad()
      loss = (w * x).square().sum()
      loss.backward()
      opt.step(loss)
      return loss
    if use_jit: step = jit(step)
    out = []
    for i in range(6):
      step(Tensor(np.full(3, 1.0 + i, np.float32)))
      sched.step()
      out.append(w.numpy().copy())
    return np.array(out)
  np.testing.assert_allclose(run(True), run(False), rtol=1e-6)

def test_onecycle_momentum_keeps_few_update_templates():
  """OneCycleLR moves SGD's momentum (a constant of the update graph) every step: the optimizer keeps a bounded number
  of update templates, not one per value forever."""
  from baregrad.tensor.nn.optim import _MAX_TEMPLATES
  w = Tensor.zeros(2, requires_grad=True)
  opt = optim.SGD([w], lr=0.1, momentum=0.9)
  s = lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=_MAX_TEMPLATES + 8)
  for _ in range(_MAX_TEMPLATES + 6):
    opt.zero_grad(); w.sum().backward(); opt.step(); s.step()
  assert len(opt._templates) <= _MAX_TEMPLATES
