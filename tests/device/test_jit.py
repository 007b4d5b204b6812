"""jit: capture on the second call, replay on later calls with new inputs; one submit on HCQ devices."""
import numpy as np
from baregrad import Tensor, jit
from baregrad.helpers import getenv

JIT_ON = getenv("JIT", 1) != 0   # CI runs this file with JIT=0 too: then only the results are checked

def test_jit_replays_with_new_inputs():
  w = Tensor.rand(16, 8).realize()
  @jit
  def f(x): return (x @ w).relu().sum(1) * 2 + 1
  for _ in range(5):
    x = Tensor.rand(4, 16)
    np.testing.assert_allclose(f(x).numpy(), np.maximum(x.numpy() @ w.numpy(), 0).sum(1) * 2 + 1, rtol=1e-5)
  if JIT_ON:
    cap = next(iter(f.captured.values()))
    assert cap.launches and cap.graph is not None  # the CPU device (and NV) are HCQ devices: one recorded queue

def test_jit_different_shapes_recapture_not_wrong():
  @jit
  def f(x): return x * 2 + 1
  for n in (3, 5, 3, 5, 7, 3):
    x = Tensor.rand(n)
    np.testing.assert_allclose(f(x).numpy(), x.numpy() * 2 + 1, rtol=1e-6)
  assert len(f.captured) >= 2 or not JIT_ON

def test_jit_training_step_updates_parameters():
  # seeded: how far 20 steps get depends on the random start (another seed's loss only falls to 0.42 of the first)
  Tensor.manual_seed(0)
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

def test_jit_outputs_get_fresh_memory_and_inputs_are_patched():
  @jit
  def f(x, y): return (x + y).relu(), x * 2
  res = []
  for i in range(5):
    x, y = Tensor(np.full(4, i, np.float32)), Tensor(np.full(4, -1, np.float32))
    res.append((f(x, y), i))
  for (a, b), i in res:  # every call's outputs still hold that call's values
    np.testing.assert_allclose(a.numpy(), max(i - 1, 0)); np.testing.assert_allclose(b.numpy(), 2 * i)
  if JIT_ON: assert len(f.captured) == 1

def test_jit_nested_arguments_and_outputs():
  @jit
  def f(xs, scale=1.0): return {"sum": xs[0] + xs[1], "scaled": [xs[0] * scale]}
  for i in range(4):
    a, b = Tensor([float(i)]), Tensor([10.0])
    out = f([a, b], scale=3.0)
    assert out["sum"].item() == i + 10 and out["scaled"][0].item() == 3 * i

def test_jit_writes_into_an_argument():
  @jit
  def f(x): x.assign(x + 1); return x
  for i in range(4):
    x = Tensor([float(i)])
    y = x * 1   # built before the call: keeps the old value
    out = f(x)
    assert out is x and x.item() == i + 1 and y.item() == i

def test_jit_returns_state_objects_themselves():
  w = Tensor([1.0])
  @jit
  def f(): w.assign(w * 2); return w
  for i in range(4): assert f() is w and w.item() == 2.0 ** (i + 1)

def test_jit_adam_steps_match_eager_steps():
  # the update kernels write three buffers each (parameter and both moments, engine/merge.py): a replay must move all
  # of them to their next versions, or the next replay reads stale moments
  from baregrad import nn
  from baregrad.nn import optim
  rng = np.random.default_rng(0)
  xs = [rng.standard_normal((4, 6)).astype(np.float32) for _ in range(6)]
  def train(use_jit: bool) -> list:
    Tensor.manual_seed(1)
    lin = nn.Linear(6, 3)
    opt = optim.Adam(nn.get_parameters(lin), lr=0.05)
    def step(x):
      loss = lin(x).square().mean()
      opt.zero_grad(); loss.backward(); opt.step(loss)
      return loss
    f = jit(step) if use_jit else step
    losses, held = [], []
    for x in xs:
      held.append(opt.exp_avg[id(lin.weight)] * 1)   # a lazy reader of a moment: its value is the one before the step
      losses.append(f(Tensor(x)).item())
    return losses + [p.numpy() for p in nn.get_parameters(lin)] + [h.numpy() for h in held]
  for a, b in zip(train(True), train(False)): np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)

def _ref_weights(w: np.ndarray) -> np.ndarray: return np.ascontiguousarray((w * 2).T)

def test_weight_only_kernels_run_once_and_again_after_an_in_place_write():
  # (w * 2).T made contiguous reads only a weight: a replay runs that kernel apart, once, not on every call; an in-place
  # write to the weight (an optimizer step outside the function) makes the next replay run it again
  w = Tensor.rand(24, 16).realize()
  @jit
  def f(x): return x @ (w * 2).T.contiguous()
  rng = np.random.default_rng(1)
  for step in range(8):
    if step == 5: w.assign(Tensor(rng.random((24, 16), dtype=np.float32))).realize()
    xn = rng.random((3, 16), dtype=np.float32)
    np.testing.assert_allclose(f(Tensor(xn)).numpy(), xn @ _ref_weights(w.numpy()), rtol=1e-5, atol=1e-6)
  if JIT_ON:
    cap = next(iter(f.captured.values()))
    assert len(cap.const) == 1 and len(cap.launches) == 1, (cap.const, cap.launches)

def test_weight_kernels_the_function_writes_stay_in_every_replay():
  # the function itself updates w in place: what reads w is not constant, and each replay sees the new w
  w = Tensor.rand(8, 8).realize()
  @jit
  def f(x):
    y = x @ (w * 2).T.contiguous()
    w.assign(w + 1)
    return y
  rng = np.random.default_rng(2)
  for _ in range(5):
    wn = w.numpy()
    xn = rng.random((2, 8), dtype=np.float32)
    np.testing.assert_allclose(f(Tensor(xn)).numpy(), xn @ _ref_weights(wn), rtol=1e-5, atol=1e-6)
  if JIT_ON: assert not next(iter(f.captured.values())).const

def test_hoisting_off_replays_every_kernel(monkeypatch):
  from baregrad import knobs
  monkeypatch.setenv("JIT_HOIST", "0"); knobs.reset()
  try:
    w = Tensor.rand(24, 16).realize()
    @jit
    def f(x): return x @ (w * 2).T.contiguous()
    for _ in range(4):
      xn = np.random.default_rng(3).random((3, 16), dtype=np.float32)
      np.testing.assert_allclose(f(Tensor(xn)).numpy(), xn @ _ref_weights(w.numpy()), rtol=1e-5, atol=1e-6)
    if JIT_ON:
      cap = next(iter(f.captured.values()))
      assert not cap.const and len(cap.launches) == 2
  finally:
    monkeypatch.delenv("JIT_HOIST"); knobs.reset()

def test_weight_kernels_whose_memory_is_reused_get_their_own():
  # a and b are weight-only values of one size, each dead after one matmul: the memory plan gives b a's memory, and a
  # replay that made both up front (b over a) would feed b to the first matmul. Such outputs move to memory of their own
  # (the first replay makes them again)
  w1, w2 = Tensor.rand(16, 16).realize(), Tensor.rand(16, 16).realize()
  @jit
  def f(x):
    y = (x @ (w1 * 2).contiguous()).contiguous()
    return y @ (w2 * 3).contiguous()
  rng = np.random.default_rng(4)
  w1n, w2n = w1.numpy(), w2.numpy()
  for _ in range(5):
    xn = rng.random((4, 16), dtype=np.float32)
    np.testing.assert_allclose(f(Tensor(xn)).numpy(), xn @ (w1n * 2) @ (w2n * 3), rtol=1e-5, atol=1e-5)
  if JIT_ON: assert len(next(iter(f.captured.values())).const) == 2

def test_symbolic_position_replays_with_the_value_as_a_kernel_argument():
  # a KV-cache step at a bound position (ir/sint.py): one capture, each replay patches the variable in the recorded
  # queue's kernel arguments (hcq/graph.py var_patches)
  from baregrad import Variable
  S, H, D = 16, 2, 4
  ck = Tensor.zeros(H, S, D).contiguous().realize()
  @jit
  def step(k, pos):
    ck[:, pos:pos + 1] = k
    return ck[:, :pos + 1].sum(1)
  var, want = Variable("pos", 0, S - 1), np.zeros((H, S, D), np.float32)
  for n in range(8):
    k = np.full((H, 1, D), n + 1, np.float32)
    got = step(Tensor(k), var.bind(n)).numpy()
    want[:, n:n + 1] = k
    np.testing.assert_array_equal(got, want[:, :n + 1].sum(1))
  if JIT_ON: assert len(step.captured) == 1

def test_jit_graph_orders_only_launches_that_depend_on_each_other():
  """A jit's recorded graph gets each launch's write set (tensor/jit.py _writes): the launches of two independent
  results have no barrier between them (they may overlap on the device), a launch reading another's output is ordered
  after it; the results are right and a mock GPU (which runs unordered launches interleaved) reports no hazard."""
  from baregrad import Device
  mock = getattr(getattr(Device[Device.DEFAULT], "port", None), "mock", None)
  hazards = len(getattr(mock, "hazards", []))   # (what other tests left: the mock is the session's)
  @jit
  def f(x, y):
    a, b = (x + 1).contiguous(), (y * 2).contiguous()   # independent
    return a, b, (a * b).contiguous()                     # reads both
  for _ in range(4):
    x, y = Tensor.rand(16).realize(), Tensor.rand(16).realize()
    a, b, c = f(x, y)
    np.testing.assert_allclose(c.numpy(), (x.numpy() + 1) * (y.numpy() * 2), rtol=1e-6)
    np.testing.assert_allclose(a.numpy(), x.numpy() + 1, rtol=1e-6)
  if not JIT_ON: return
  cap = next(iter(f.captured.values()))
  if cap.graph is None: return   # (not an HCQ device: launches run one by one)
  # (the schedule decides how many kernels: some independent ones are not separated, the consumer is)
  n, barriers = len(cap.graph.kernels), cap.graph.barriers
  assert barriers and len(barriers) < n - 1, (n, barriers)
  assert getattr(mock, "hazards", [])[hazards:] == []

def test_jit_arguments_sharing_memory_run_the_launches_in_order():
  """A graph recorded with write sets runs independent launches without a barrier; a call whose arguments share memory
  (f(c, c): one launch writes x, another reads y) would make two of them collide: the replay refuses the patch
  (GraphPatchConflict) and the call runs its launches one by one, with the eager function's result."""
  def fn(x, y):
    x.assign(x + 1)
    return (y * 2).contiguous()
  f = jit(fn)
  for _ in range(3):
    a, b = Tensor.zeros(16).contiguous().realize(), Tensor.ones(16).contiguous().realize()
    np.testing.assert_allclose(f(a, b).numpy(), [2.0] * 16)
    np.testing.assert_allclose(a.numpy(), [1.0] * 16)
  c, e = Tensor.ones(16).contiguous().realize(), Tensor.ones(16).contiguous().realize()
  want = fn(e, e).numpy()
  np.testing.assert_allclose(f(c, c).numpy(), want)
  np.testing.assert_allclose(c.numpy(), e.numpy())
