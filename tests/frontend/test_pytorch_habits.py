"""PyTorch habits that used to give wrong results without a word (issue 40): training mode, the functional
`training=` argument, in-place operators and methods, NumPy interop, optimizer parameters. Each is compared against
PyTorch where it applies (skipped without torch)."""
import numpy as np
import pytest
from baregrad import Tensor, no_grad
import baregrad.nn as nn
from baregrad.nn import optim
from baregrad.ir.dtype import dtypes
import baregrad.tensor.functional as F

try: import torch
except ImportError: torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")

def rnd(*shape, seed=0): return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

# ---------------------------------------------------------------- 1. training mode

@needs_torch
def test_modules_start_in_train_mode_as_pytorch():
  bg, tm = nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3)
  assert bg.training is True and tm.training is True
  x = rnd(4, 3, 2, 2) * 3 + 1
  # no train() call anywhere: batch statistics, running statistics updated (Tensor.training stays False)
  assert Tensor.training is False
  np.testing.assert_allclose(bg(Tensor(x)).numpy(), tm(torch.tensor(x)).detach().numpy(), atol=1e-5, rtol=1e-4)
  np.testing.assert_allclose(bg.running_mean.numpy(), tm.running_mean.numpy(), atol=1e-6, rtol=1e-5)
  np.testing.assert_allclose(bg.running_var.numpy(), tm.running_var.numpy(), atol=1e-6, rtol=1e-5)
  # eval(): running statistics, nothing updated
  assert bg.eval() is bg and tm.eval() is tm
  x2 = rnd(2, 3, 2, 2, seed=1)
  np.testing.assert_allclose(bg(Tensor(x2)).numpy(), tm(torch.tensor(x2)).detach().numpy(), atol=1e-5, rtol=1e-4)
  np.testing.assert_allclose(bg.running_mean.numpy(), tm.running_mean.numpy(), atol=1e-6, rtol=1e-5)

def test_train_eval_set_the_whole_tree_and_return_the_module():
  class Net(nn.Module):
    def __init__(self):
      self.blocks = [nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)), nn.BatchNorm1d(4)]
      self.head = nn.Linear(4, 2)
    def forward(self, x): return self.head(self.blocks[1](self.blocks[0](x)))
  n = Net()
  mods = list(n.modules())
  assert len(mods) == 6 and all(m.training is True for m in mods)
  assert n.eval() is n and all(m.training is False for m in mods)
  assert n.train() is n and all(m.training is True for m in mods)

def test_dropout_module_drops_from_construction_and_not_in_eval():
  x = Tensor.ones(64, 64)
  d = nn.Dropout(0.5)
  y = d(x).numpy()
  assert 0.3 < (y == 0).mean() < 0.7 and np.allclose(y[y != 0], 2.0)
  assert (d.eval()(x).numpy() == 1).all()
  with Tensor.train(): assert (d(x).numpy() == 1).all()   # a module's own mode wins over the global switch

def test_jit_follows_module_modes():
  from baregrad import jit
  d = nn.Dropout(0.5)
  f = jit(lambda x: d(x) * 1)
  x = Tensor.ones(32, 32)
  for _ in range(3): assert (f(x).numpy() == 0).any()          # eager, capture, replay: training mode
  d.eval()
  for _ in range(3): assert (f(x).numpy() == 1).all()          # not the training capture replayed
  d.train()
  assert (f(x).numpy() == 0).any()
  d.training = None                                             # follows Tensor.training (False)
  assert (f(x).numpy() == 1).all()
  with pytest.raises(ValueError, match="bool or None"): d.training = "yes"

def test_functional_dropout_honours_training_argument():
  x = Tensor.ones(64, 64)
  assert Tensor.training is False
  y = F.dropout(x, 0.5, training=True).numpy()          # the argument, not the global switch
  assert (y == 0).any() and np.allclose(y[y != 0], 2.0)
  assert (F.dropout(x, 0.5).numpy() == 0).any()          # PyTorch's default is training=True
  assert F.dropout(x, 0.5, training=False) is x
  with Tensor.train(): assert F.dropout(x, 0.5, training=False) is x
  assert x.dropout(0.5) is x                             # the tinygrad-style method follows Tensor.training
  with Tensor.train(): assert (x.dropout(0.5).numpy() == 0).any()

@needs_torch
def test_functional_batch_norm_training_argument_matches_torch():
  x = rnd(5, 3) * 2
  rm, rv = Tensor.zeros(3), Tensor.ones(3)
  trm, trv = torch.zeros(3), torch.ones(3)
  out = F.batch_norm(Tensor(x), rm, rv, training=True).numpy()
  ref = torch.nn.functional.batch_norm(torch.tensor(x), trm, trv, training=True).numpy()
  np.testing.assert_allclose(out, ref, atol=1e-5, rtol=1e-4)
  np.testing.assert_allclose(rv.numpy(), trv.numpy(), atol=1e-6, rtol=1e-5)

# ---------------------------------------------------------------- 2. in-place operators and methods

def test_iadd_in_a_function_is_seen_by_the_caller():
  def bump(t): t += 1
  a = Tensor([1.0, 2.0, 3.0])
  b = a * 2                        # built from the old value: keeps it (value semantics)
  bump(a)
  np.testing.assert_array_equal(a.numpy(), [2, 3, 4])
  np.testing.assert_array_equal(b.numpy(), [2, 4, 6])
  c = Tensor.ones(3) * 5           # a graph, not yet a buffer: the same object takes the value too
  bump(c)
  np.testing.assert_array_equal(c.numpy(), [6, 6, 6])

@needs_torch
def test_manual_sgd_loop_trains_as_pytorch():
  w0, x0, y0 = rnd(3, 2), rnd(8, 3, seed=1), rnd(8, 2, seed=2)
  w, tw = Tensor(w0, requires_grad=True), torch.tensor(w0, requires_grad=True)
  x, tx, y, ty = Tensor(x0), torch.tensor(x0), Tensor(y0), torch.tensor(y0)
  for _ in range(3):
    loss, tloss = ((x @ w - y) ** 2).mean(), ((tx @ tw - ty) ** 2).mean()
    loss.backward(); tloss.backward()
    for p, tp in ((w, tw),):
      with no_grad(): p -= 0.1 * p.grad
      with torch.no_grad(): tp -= 0.1 * tp.grad
      p.grad = None; tp.grad = None
    np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-5)
  assert w.requires_grad and w.is_leaf
  np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), atol=1e-6, rtol=1e-5)
  assert not np.allclose(w.numpy(), w0)

@needs_torch
def test_inplace_on_a_leaf_that_requires_grad_raises_as_pytorch():
  w, tw = Tensor.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
  with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place operation"): tw += 1
  for f in (lambda t: t.__iadd__(1), lambda t: t.mul_(2), lambda t: t.zero_(), lambda t: t.copy_(Tensor.zeros(3)), lambda t: t.uniform_()):
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place operation"): f(w)
  with no_grad(): w.mul_(3)       # allowed where gradients are not recorded
  np.testing.assert_array_equal(w.numpy(), [3, 3, 3])

@needs_torch
def test_inplace_dtype_and_shape_errors_name_both():
  i, ti = Tensor([1, 2, 3]), torch.tensor([1, 2, 3])
  with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"): ti += torch.tensor([0.5, 0.5, 0.5])
  with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"): i += Tensor([0.5, 0.5, 0.5])
  with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"): ti /= 2
  with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"): i /= 2
  with pytest.raises(RuntimeError, match="output type Bool"): Tensor([True, False]).add_(Tensor([1, 2]))
  x, tx = Tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.0, 3.0])
  with pytest.raises(RuntimeError, match=r"doesn't match the broadcast shape \[2, 3\]"): tx += torch.ones(2, 3)
  with pytest.raises(RuntimeError, match=r"output with shape \[3\] doesn't match the broadcast shape \[2, 3\]"): x += Tensor.ones(2, 3)
  np.testing.assert_array_equal(x.numpy(), [1, 2, 3])   # unchanged by the refused ops
  # casts within a kind are allowed, as in PyTorch
  h = Tensor([1.0, 2.0], dtype=dtypes.float16); h += Tensor([0.5, 0.5])
  assert h.dtype == dtypes.float16 and h.numpy().tolist() == [1.5, 2.5]
  i += 2; i *= Tensor([1, 2, 3], dtype=dtypes.int32)
  assert i.dtype == dtypes.int64 and i.numpy().tolist() == [3, 8, 15]

@needs_torch
@pytest.mark.parametrize("op", ["iadd", "isub", "imul", "itruediv", "ifloordiv", "imod", "ipow", "imatmul", "iand", "ior", "ixor", "ilshift", "irshift"])
def test_inplace_operators_match_torch(op):
  import operator
  f = getattr(operator, op)
  if op in ("iand", "ior", "ixor", "ilshift", "irshift"): a0, b0 = np.array([[5, 3], [12, 7]], np.int64), np.array([[1, 2], [3, 1]], np.int64)
  else: a0, b0 = rnd(2, 2) + 3, rnd(2, 2, seed=1) + 2
  a, ta = Tensor(a0), torch.tensor(a0)
  alias, talias = a, ta
  a, ta = f(a, Tensor(b0)), f(ta, torch.tensor(b0))
  np.testing.assert_allclose(a.numpy(), ta.numpy(), atol=1e-5, rtol=1e-5)
  np.testing.assert_allclose(alias.numpy(), talias.numpy(), atol=1e-5, rtol=1e-5)   # in place, except @= (a rebinding in PyTorch)
  assert (a is alias) == (ta is talias) == (op != "imatmul")

@needs_torch
def test_inplace_methods_match_torch():
  a0, b0 = rnd(3, 4) + 3, rnd(3, 4, seed=1) + 1
  cases = [("add_", (b0,), {"alpha": 2}), ("sub_", (b0,), {"alpha": 0.5}), ("mul_", (b0,), {}), ("div_", (b0,), {}), ("neg_", (), {}),
           ("abs_", (), {}), ("sqrt_", (), {}), ("exp_", (), {}), ("relu_", (), {}), ("clamp_", (), {"min": 2.5, "max": 3.5}),
           ("zero_", (), {}), ("fill_", (1.5,), {}), ("copy_", (b0,), {}), ("copy_", (b0[0],), {}), ("sigmoid_", (), {}), ("tanh_", (), {}),
           ("pow_", (2,), {}), ("floor_", (), {}), ("reciprocal_", (), {}), ("clamp_min_", (3.0,), {})]
  for name, args, kw in cases:
    a, ta = Tensor(a0.copy()), torch.tensor(a0.copy())
    r = getattr(a, name)(*[Tensor(v) if isinstance(v, np.ndarray) else v for v in args], **kw)
    getattr(ta, name)(*[torch.tensor(v) if isinstance(v, np.ndarray) else v for v in args], **kw)
    assert r is a, name
    np.testing.assert_allclose(a.numpy(), ta.numpy(), atol=1e-5, rtol=1e-5, err_msg=name)
  # masked_fill_ and index_add_
  a, ta = Tensor(a0.copy()), torch.tensor(a0.copy())
  m = a0 > 3
  a.masked_fill_(Tensor(m), -1.0); ta.masked_fill_(torch.tensor(m), -1.0)
  np.testing.assert_array_equal(a.numpy(), ta.numpy())
  idx, src = np.array([0, 2, 0]), rnd(3, 3, seed=2)
  a.index_add_(1, Tensor(idx), Tensor(src), alpha=2); ta.index_add_(1, torch.tensor(idx), torch.tensor(src), alpha=2)
  np.testing.assert_allclose(a.numpy(), ta.numpy(), atol=1e-5, rtol=1e-5)
  # int copy_ into float, float fill into int (copy_ and fill_ cast, as PyTorch's)
  c = Tensor.zeros(3, dtype=dtypes.int32); c.copy_(Tensor([1.7, -2.2, 3.9]))
  assert c.numpy().tolist() == torch.zeros(3, dtype=torch.int32).copy_(torch.tensor([1.7, -2.2, 3.9])).tolist()

def test_inplace_reads_of_itself_are_not_racy():
  a = Tensor(np.arange(6, dtype=np.float32))
  a += a.flip(0)
  np.testing.assert_array_equal(a.numpy(), [5] * 6)
  m = Tensor(np.arange(4, dtype=np.float32).reshape(2, 2))
  m.copy_(m @ Tensor(np.array([[0, 1], [1, 0]], np.float32)))
  np.testing.assert_array_equal(m.numpy(), [[1, 0], [3, 2]])
  s = Tensor(np.arange(4, dtype=np.float32))
  s -= s.sum()
  np.testing.assert_array_equal(s.numpy(), [-6, -5, -4, -3])

@needs_torch
def test_autograd_through_inplace_on_non_leaf_matches_torch():
  w0 = rnd(3)
  w, tw = Tensor(w0, requires_grad=True), torch.tensor(w0, requires_grad=True)
  def f(w, relu):
    y = w * 2
    y += w
    y *= w
    y.sub_(w, alpha=0.5)
    relu(y)
    return (y * y).sum()
  f(w, lambda t: t.relu_()).backward(); f(tw, lambda t: t.relu_()).backward()
  np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), atol=1e-6, rtol=1e-5)

# ---------------------------------------------------------------- 3. NumPy: a copy, said so

def test_from_numpy_and_numpy_are_copies_and_say_so():
  a = np.arange(3, dtype=np.float32)
  t = Tensor.from_numpy(a)
  a[0] = 100
  assert t.numpy().tolist() == [0, 1, 2]
  t += 1
  assert a.tolist() == [100, 1, 2]
  n = t.numpy(); n[1] = -5
  assert t.numpy().tolist() == [1, 2, 3]
  assert "COPY" in Tensor.from_numpy.__doc__ and "COPY" in Tensor.numpy.__doc__

# ---------------------------------------------------------------- 5. optimizer parameters checked at the cause

@needs_torch
def test_optimizer_refuses_non_leaf_and_non_float_parameters():
  tw = torch.ones(3, requires_grad=True)
  with pytest.raises(ValueError, match="can't optimize a non-leaf Tensor"): torch.optim.SGD([tw * 2], lr=0.1)
  w = Tensor.ones(3, requires_grad=True)
  for cls in (optim.SGD, optim.Adam):
    with pytest.raises(ValueError, match=r"can't optimize a non-leaf Tensor: optimizer parameter 1 \(shape \(2, 3\)"):
      cls([w, (w * 2).reshape(1, 3).expand(2, 3)], lr=0.1)
    with pytest.raises(ValueError, match=r"optimizer parameter 0 \(shape \(3,\)\) has dtype dtypes.long"): cls([Tensor([1, 2, 3])], lr=0.1)
  assert w.requires_grad and w.is_leaf   # nothing was made a leaf on the way
  optim.SGD([w, Tensor.zeros(2)], lr=0.1)   # leaves, with or without requires_grad, are fine
