"""Value semantics (docs/value_semantics.md): a tensor's value is fixed when it is built, whatever in-place update
(assign, setitem, optimizer step, jit replay) comes after; the jit gives what the eager function gives."""
import numpy as np
import pytest
import baregrad.nn as nn
from baregrad import Tensor, jit, dropout
from baregrad.nn import optim
from baregrad.helpers import Context
from baregrad.engine import realize as _realize
from baregrad.tensor.jit import JitError

try: import torch
except ImportError: torch = None

class KernelCount:
  """Counts kernels launched by schedules (not replays) while active."""
  def __init__(self): self.n = 0
  def add_kernel(self, runner, item): self.n += 1
  def add_copy(self, item): pass
  def __enter__(self): _realize.capturing.append(self); return self
  def __exit__(self, *a): _realize.capturing.remove(self)

# ---- eager in-place updates with live readers
def test_assign_keeps_readers_values():
  a = Tensor([1., 2.])
  b, v, c = a * 2, a.reshape(2, 1), Tensor(a)  # a graph, a view and a second name of the same buffer
  a.assign(Tensor([5., 6.]))
  assert b.tolist() == [2., 4.] and v.tolist() == [[1.], [2.]] and c.tolist() == [1., 2.]
  assert a.tolist() == [5., 6.] and (a * 2).tolist() == [10., 12.]

def test_setitem_keeps_readers_values():
  a = Tensor([1., 2., 3.])
  b = a + 1
  a[0] = 10
  a[1:] = Tensor([7., 8.])
  assert b.tolist() == [2., 3., 4.] and a.tolist() == [10., 7., 8.]

def test_value_assigned_is_read_back_after_more_writes():
  a = Tensor([1., 2.])
  new = a + 1
  a.assign(new)
  a.assign(a * 10)
  assert new.tolist() == [2., 3.] and a.tolist() == [20., 30.]

def test_realized_result_is_not_reused_after_its_inputs_change():
  x, y = Tensor([1., 2.]), Tensor([3., 4.])
  first = (x * y).realize()
  x.assign(Tensor([10., 20.]))
  assert (x * y).tolist() == [30., 80.] and first.tolist() == [3., 8.]

def test_realize_in_a_loop_runs_kernels_each_time():
  rng = np.random.default_rng(0)
  x, y, z = (Tensor(rng.standard_normal(16).astype(np.float32)) for _ in range(3))
  with KernelCount() as kc:
    for i in range(4):
      xn = rng.standard_normal(16).astype(np.float32)
      x.assign(Tensor(xn))
      before = kc.n
      out = (x * y + z).relu().realize()
      assert kc.n > before, f"iteration {i}: no kernel ran"
      np.testing.assert_allclose(out.numpy(), np.maximum(xn * y.numpy() + z.numpy(), 0), rtol=1e-6)

def test_backward_through_overwritten_weights_raises():
  w = Tensor([1., 2.], requires_grad=True)
  x = Tensor([3., 4.], requires_grad=True)
  loss = (w * x).sum()
  w.assign(w.detach() * 0)
  with pytest.raises(RuntimeError, match="modified by an in-place operation"): loss.backward(); x.grad.numpy()
  assert loss.item() == 11.0  # its value was computed before the write

# ---- PyTorch-style training loops
def test_loss_read_after_step_is_the_loss_before_it():
  w = Tensor([3.0], requires_grad=True)
  opt = optim.SGD([w], lr=0.1)
  losses = []
  for _ in range(3):
    loss = (w * w).sum()
    opt.zero_grad(); loss.backward(); opt.step()
    losses.append(loss.item())
  np.testing.assert_allclose(losses, [9.0, 5.76, 3.6864], rtol=1e-6)  # PyTorch: 9.0, 5.76, 3.6864

def _data(seed=0, n=32):
  rng = np.random.default_rng(seed)
  X = rng.standard_normal((n, 6)).astype(np.float32)
  y = (X[:, 0] + X[:, 1] > 0).astype(np.int32)
  return X, y

class MLP:
  def __init__(self, p_drop=0.0):
    rng = np.random.default_rng(1)
    self.l1, self.l2, self.p = nn.Linear(6, 8), nn.Linear(8, 2), p_drop
    nn.load_state_dict(self, {"l1.weight": rng.standard_normal((8, 6)).astype(np.float32) * 0.5, "l1.bias": np.zeros(8, np.float32),
                              "l2.weight": rng.standard_normal((2, 8)).astype(np.float32) * 0.5, "l2.bias": np.zeros(2, np.float32)})
  def __call__(self, x): return self.l2(dropout(self.l1(x).relu(), self.p))

def _np_accuracy(m, X, y):
  h = np.maximum(X @ m.l1.weight.numpy().T + m.l1.bias.numpy(), 0)
  return float(((h @ m.l2.weight.numpy().T + m.l2.bias.numpy()).argmax(1) == y).mean())

@pytest.mark.parametrize("use_jit", [False, True])
def test_eval_each_epoch_sees_the_current_weights(use_jit):
  X, y = _data()
  m = MLP()
  opt = optim.SGD(nn.get_parameters(m), lr=0.5)
  def step(x, t):
    loss = nn.cross_entropy(m(x), t)
    opt.zero_grad(); loss.backward(); opt.step()
    return loss
  if use_jit: step = jit(step)
  Xt, yt = Tensor(X), Tensor(y)
  accs = []
  for epoch in range(4):
    for i in range(0, 32, 16): step(Tensor(X[i:i + 16]), Tensor(y[i:i + 16]))
    acc = (m(Xt).argmax(1) == yt).float().mean().item()  # the same expression every epoch
    assert abs(acc - _np_accuracy(m, X, y)) < 1e-6, f"epoch {epoch}: {acc} vs NumPy on the current weights"
    accs.append(acc)

def _train(mode, steps=5, p_drop=0.25):
  """losses and final weights of an Adam + dropout loop run eagerly, jitted, or jitted with JIT=0."""
  Tensor.manual_seed(7)
  X, y = _data(2)
  m = MLP(p_drop)
  opt = optim.Adam(nn.get_parameters(m), lr=0.05)
  def step(x, t):
    loss = nn.cross_entropy(m(x), t)
    opt.zero_grad(); loss.backward(); opt.step()
    return loss
  f = jit(step) if mode != "eager" else step
  Tensor.training = True
  try:
    with Context(JIT=0 if mode == "jit0" else 1):
      losses = [f(Tensor(X[i % 2 * 16:][:16]), Tensor(y[i % 2 * 16:][:16])) for i in range(steps)]
  finally: Tensor.training = False
  return [l.item() for l in losses], [p.numpy() for p in nn.get_parameters(m)]

def test_eager_jit_and_jit_off_agree_over_steps():
  le, pe = _train("eager")
  lj, pj = _train("jit")
  l0, p0 = _train("jit0")
  assert len(set(np.round(le, 6))) == len(le), "the losses should change every step"
  np.testing.assert_array_equal(lj, le); np.testing.assert_array_equal(l0, le)
  for a, b, c in zip(pe, pj, p0): np.testing.assert_array_equal(b, a); np.testing.assert_array_equal(c, a)

@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
def test_training_loop_losses_match_pytorch():
  X, y = _data(3)
  m = MLP()
  tl1, tl2 = torch.nn.Linear(6, 8), torch.nn.Linear(8, 2)
  with torch.no_grad():
    for tp, p in zip([tl1.weight, tl1.bias, tl2.weight, tl2.bias], nn.get_parameters(m)): tp.copy_(torch.tensor(p.numpy()))
  opt, topt = optim.Adam(nn.get_parameters(m), lr=0.05), torch.optim.Adam([tl1.weight, tl1.bias, tl2.weight, tl2.bias], lr=0.05)
  @jit
  def step(x, t):
    loss = nn.cross_entropy(m(x), t)
    opt.zero_grad(); loss.backward(); opt.step()
    return loss
  for i in range(4):
    loss = step(Tensor(X), Tensor(y))
    tloss = torch.nn.functional.cross_entropy(tl2(torch.relu(tl1(torch.tensor(X)))), torch.tensor(y).long())
    topt.zero_grad(); tloss.backward(); topt.step()
    assert abs(loss.item() - tloss.item()) < 1e-5, f"step {i}"

# ---- the jit
def test_jit_outputs_stay_valid_across_calls():
  @jit
  def f(x): return x * 2
  outs = [f(Tensor([float(i)])) for i in range(5)]
  assert [o.item() for o in outs] == [0., 2., 4., 6., 8.]

def test_jit_without_tensor_arguments_returns_the_loss_before_the_step():
  w = Tensor([3.0], requires_grad=True)
  opt = optim.SGD([w], lr=0.1)
  @jit
  def step():
    loss = (w * w).sum()
    opt.zero_grad(); loss.backward(); opt.step()
    return loss
  losses = [step() for _ in range(5)]
  np.testing.assert_allclose([l.item() for l in losses], [9.0 * 0.64 ** i for i in range(5)], rtol=1e-5)
  np.testing.assert_allclose(w.item(), 3.0 * 0.8 ** 5, rtol=1e-5)

def test_jit_python_scalars_and_tensors_made_inside():
  @jit
  def f(x, k): return x * k + Tensor.arange(3).float()
  x = Tensor([1., 2., 3.])
  for k in (2.0, 3.0, 2.0, 3.0, 2.0, 5):
    np.testing.assert_allclose(f(x, k).numpy(), np.array([1., 2., 3.]) * k + np.arange(3))

def test_jit_dropout_advances_like_eager():
  def f(x): return dropout(x, 0.5)
  def masks(fn):
    Tensor.manual_seed(3)
    Tensor.training = True
    try: return [fn(Tensor.ones(64)).numpy() for _ in range(5)]
    finally: Tensor.training = False
  eager, jitted = masks(f), masks(jit(f))
  assert len({m.tobytes() for m in jitted}) == 5, "the same mask twice"
  for a, b in zip(eager, jitted): np.testing.assert_array_equal(a, b)

def test_jit_learning_rate_change_is_seen():
  w = Tensor([1.0], requires_grad=True)
  opt = optim.SGD([w], lr=0.1)
  @jit
  def step():
    loss = (w * 2).sum()
    opt.zero_grad(); loss.backward(); opt.step()
    return loss
  for _ in range(3): step()
  opt.lr = 1.0
  step()
  np.testing.assert_allclose(w.item(), 1.0 - 3 * 0.2 - 2.0, rtol=1e-6)

def test_jit_replaced_state_is_captured_again():
  class M:
    def __init__(self): self.w = Tensor([1., 2.])
  m = M()
  @jit
  def f(x): return x * m.w
  x = Tensor([1., 1.])
  for _ in range(3): f(x)
  m.w = Tensor([5., 7.])  # the old tensor is dropped: the recording reads memory nobody holds
  assert f(x).tolist() == [5., 7.]

def test_jit_keeps_live_readers_of_state():
  w = Tensor([1.0], requires_grad=True)
  opt = optim.SGD([w], lr=0.5)
  @jit
  def step():
    loss = (w * 2).sum()
    opt.zero_grad(); loss.backward(); opt.step()
  for _ in range(3): step()
  before = w * 1   # lazy, reads w's buffer
  step()
  assert before.item() == pytest.approx(1.0 - 3.0) and w.item() == pytest.approx(1.0 - 4.0)

def test_jit_host_read_inside_is_refused():
  @jit
  def f(x): return x * x.sum().item()
  x = Tensor([1., 2.])
  with Context(JIT=1):  # also under CI's JIT=0 stage
    f(x)
    with pytest.raises(JitError, match="host"): f(x)

def test_a_tensor_copied_before_an_in_place_write_reads_the_copy():
  """A tensor with gradients naming a buffer whole keeps its node when the buffer is overwritten (the copy made first
  is found through realized_map): reading it gives the old values, not a stale-buffer error."""
  a = Tensor([1.0, 2.0]).realize()
  b = Tensor(a, requires_grad=True)
  a.assign(Tensor([5.0, 6.0]))
  assert b.tolist() == [1.0, 2.0] and a.tolist() == [5.0, 6.0]
