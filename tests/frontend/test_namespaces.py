"""PyTorch's namespaces in baregrad: nn.functional as a module, the loss modules, the top-level factories,
manual_seed and randperm, where(cond), and save/load of state dicts (optimizer state included)."""
import os
import numpy as np
import pytest
import baregrad
import baregrad.nn as nn
import baregrad.nn.functional as F
from baregrad import Tensor, dtypes
from baregrad.nn import optim

try: import torch
except ImportError: torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed: no reference to compare with")
R = np.random.default_rng(0)

def test_functional_is_a_module():
  import importlib
  assert importlib.import_module("baregrad.nn.functional") is F is nn.functional
  from baregrad.nn.functional import relu, cross_entropy   # noqa: F401
  import baregrad.nn.optim.lr_scheduler as L
  assert L.StepLR is optim.lr_scheduler.StepLR

X = R.standard_normal((3, 5)).astype(np.float32)
FUNCS = [
  ("relu", (), {}), ("relu6", (), {}), ("gelu", (), {}), ("gelu", (), {"approximate": "tanh"}), ("silu", (), {}), ("sigmoid", (), {}),
  ("tanh", (), {}), ("leaky_relu", (), {"negative_slope": 0.2}), ("elu", (), {"alpha": 0.5}), ("selu", (), {}), ("celu", (), {}),
  ("softplus", (), {"beta": 2.0}), ("hardtanh", (), {"min_val": -0.5, "max_val": 0.5}), ("hardsigmoid", (), {}), ("hardswish", (), {}),
  ("mish", (), {}), ("softmax", (), {"dim": 1}), ("log_softmax", (), {"dim": 0}), ("softmax", (), {}), ("log_softmax", (), {}),
  ("softmin", (), {"dim": 1}), ("logsigmoid", (), {}), ("softsign", (), {}), ("normalize", (), {"dim": 1}),
  ("dropout", (), {"p": 0.3, "training": False}), ("pad", ((1, 2),), {"value": 3.0}),
]

@needs_torch
@pytest.mark.parametrize("name,args,kw", FUNCS)
def test_functional_matches_torch(name, args, kw):
  got = getattr(F, name)(Tensor(X), *args, **kw).numpy()
  want = getattr(torch.nn.functional, name)(torch.tensor(X), *args, **kw).numpy()
  np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)

@needs_torch
def test_functional_layers_match_torch():
  x = R.standard_normal((2, 3, 8, 8)).astype(np.float32)
  w, b = R.standard_normal((4, 3, 3, 3)).astype(np.float32), R.standard_normal(4).astype(np.float32)
  tf = torch.nn.functional
  cases = [
    (F.conv2d(Tensor(x), Tensor(w), Tensor(b), stride=2, padding=1), tf.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), stride=2, padding=1)),
    (F.max_pool2d(Tensor(x), 2), tf.max_pool2d(torch.tensor(x), 2)),
    (F.avg_pool2d(Tensor(x), 3, stride=2, padding=1), tf.avg_pool2d(torch.tensor(x), 3, stride=2, padding=1)),
    (F.adaptive_avg_pool2d(Tensor(x), 1), tf.adaptive_avg_pool2d(torch.tensor(x), 1)),
    (F.batch_norm(Tensor(x), None, None, training=True), tf.batch_norm(torch.tensor(x), None, None, training=True)),
    (F.layer_norm(Tensor(x), (8,)), tf.layer_norm(torch.tensor(x), (8,))),
    (F.linear(Tensor(X), Tensor(w.reshape(4, -1)[:, :5]), Tensor(b)), tf.linear(torch.tensor(X), torch.tensor(w.reshape(4, -1)[:, :5]), torch.tensor(b))),
  ]
  for got, want in cases: np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)

@needs_torch
def test_embedding_padding_row_gets_no_gradient():
  w0 = R.standard_normal((5, 3)).astype(np.float32)
  idx = np.array([[0, 2, 2], [4, 1, 2]])
  wb, wt = Tensor(w0).requires_grad_(), torch.tensor(w0, requires_grad=True)
  ob, ot = F.embedding(Tensor(idx), wb, padding_idx=2), torch.nn.functional.embedding(torch.tensor(idx), wt, padding_idx=2)
  np.testing.assert_array_equal(ob.numpy(), ot.detach().numpy())
  (ob * ob).sum().backward(); (ot * ot).sum().backward()
  np.testing.assert_allclose(wb.grad.numpy(), wt.grad.numpy(), rtol=1e-6)
  assert not wb.grad.numpy()[2].any()

LOSSES = [
  ("CrossEntropyLoss", {}, "cls"), ("CrossEntropyLoss", {"label_smoothing": 0.1, "reduction": "sum"}, "cls"),
  ("CrossEntropyLoss", {"ignore_index": 1}, "cls"), ("NLLLoss", {"reduction": "none"}, "logp"), ("MSELoss", {}, "same"),
  ("L1Loss", {"reduction": "sum"}, "same"), ("BCELoss", {}, "prob"), ("BCEWithLogitsLoss", {"reduction": "none"}, "prob"),
  ("SmoothL1Loss", {"beta": 0.5}, "same"), ("HuberLoss", {"delta": 0.7}, "same"), ("KLDivLoss", {"reduction": "batchmean"}, "kl"),
]

@needs_torch
@pytest.mark.parametrize("name,kw,kind", LOSSES)
def test_loss_modules_match_torch(name, kw, kind):
  x = R.standard_normal((6, 4)).astype(np.float32)
  if kind in ("cls", "logp"): t = R.integers(0, 4, 6)
  elif kind == "prob": t = R.random((6, 4)).astype(np.float32)
  elif kind == "kl": t = R.random((6, 4)).astype(np.float32); x = np.log(R.random((6, 4)).astype(np.float32) + 0.1)
  else: t = R.standard_normal((6, 4)).astype(np.float32)
  xin = 1 / (1 + np.exp(-x)) if name == "BCELoss" else x
  if kind == "logp": xin = x - np.log(np.exp(x).sum(1, keepdims=True))
  xb = Tensor(xin.astype(np.float32)).requires_grad_()
  xt = torch.tensor(xin.astype(np.float32), requires_grad=True)
  lb, lt = getattr(nn, name)(**kw)(xb, Tensor(t)), getattr(torch.nn, name)(**kw)(xt, torch.tensor(t))
  np.testing.assert_allclose(lb.numpy(), lt.detach().numpy(), rtol=1e-5, atol=1e-6)
  lb.sum().backward(); lt.sum().backward()
  np.testing.assert_allclose(xb.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-6)

def test_loss_module_bad_reduction():
  with pytest.raises(ValueError, match="reduction must be one of"): nn.MSELoss(reduction="avg")
  with pytest.raises(TypeError, match="deprecated"): nn.CrossEntropyLoss(size_average=True)

# ---- factories
@needs_torch
def test_factories_match_torch_dtypes_and_values():
  pairs = [
    (baregrad.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0])), (baregrad.tensor([[1, 2]]), torch.tensor([[1, 2]])),
    (baregrad.tensor(True), torch.tensor(True)), (baregrad.zeros(2, 3), torch.zeros(2, 3)),
    (baregrad.ones((2,), dtype=dtypes.int32), torch.ones((2,), dtype=torch.int32)),
    (baregrad.full((2, 2), 7), torch.full((2, 2), 7)), (baregrad.full((2,), 1.5), torch.full((2,), 1.5)), (baregrad.empty(3), torch.zeros(3)),
    (baregrad.arange(5), torch.arange(5)), (baregrad.arange(0, 1, 0.25), torch.arange(0, 1, 0.25)), (baregrad.linspace(0, 1, 5), torch.linspace(0, 1, 5)),
    (baregrad.eye(2, 3), torch.eye(2, 3)), (baregrad.zeros_like(baregrad.tensor([1, 2])), torch.zeros_like(torch.tensor([1, 2]))),
    (baregrad.ones_like(baregrad.zeros(2), dtype=dtypes.float64), torch.ones_like(torch.zeros(2), dtype=torch.float64)),
    (baregrad.full_like(baregrad.zeros(2), 3), torch.full_like(torch.zeros(2), 3)),
  ]
  for b, t in pairs:
    theirs = str(t.dtype).split(".")[-1]
    assert str(b.dtype).split(".")[-1] in (theirs, {"float32": "float", "int64": "long", "float64": "double", "int32": "int"}.get(theirs))
    np.testing.assert_array_equal(b.numpy(), t.numpy())
  assert baregrad.tensor([1.0], requires_grad=True).requires_grad and baregrad.zeros(2, requires_grad=True).requires_grad
  assert baregrad.rand(2, 3).shape == (2, 3) and baregrad.randn((4,)).shape == (4,)
  r = baregrad.randint(3, 7, (100,)).numpy()
  assert r.dtype == np.int64 and r.min() >= 3 and r.max() < 7
  assert baregrad.randint(5, (3,)).shape == (3,)

def test_tensor_is_a_copy_and_the_package_still_works():
  a = Tensor([1.0, 2.0])
  b = baregrad.tensor(a)
  assert b is not a and b.uop is not a.uop
  from baregrad.tensor import Tensor as T2
  assert T2 is Tensor and baregrad.tensor.functional.cat is baregrad.cat

def test_manual_seed_and_randperm():
  baregrad.manual_seed(7)
  a, x = baregrad.randperm(50).tolist(), baregrad.rand(3).tolist()
  baregrad.manual_seed(7)
  assert baregrad.randperm(50).tolist() == a and baregrad.rand(3).tolist() == x
  assert sorted(a) == list(range(50)) and a != list(range(50))
  baregrad.manual_seed(8)
  assert baregrad.randperm(50).tolist() != a
  p = baregrad.randperm(6, dtype=dtypes.int32)
  assert p.dtype == dtypes.int32 and sorted(p.tolist()) == list(range(6))
  assert baregrad.randperm(0).shape == (0,) and baregrad.randperm(1).tolist() == [0]
  with pytest.raises(RuntimeError, match="non-negative"): baregrad.randperm(-1)
  with pytest.raises(NotImplementedError, match="generator"): baregrad.randperm(3, generator=object())

def test_randperm_runs_no_numpy(monkeypatch):
  """The permutation is computed by kernels: NumPy's random module is never asked."""
  def boom(*a, **k): raise AssertionError("randperm used NumPy's random numbers")
  monkeypatch.setattr(np.random, "permutation", boom)
  monkeypatch.setattr(np.random, "default_rng", boom)
  monkeypatch.setattr(np.random, "shuffle", boom)
  assert sorted(baregrad.randperm(33).tolist()) == list(range(33))

def test_randperm_is_roughly_uniform():
  """Each of 4 values lands in each position about a quarter of the time over 400 draws."""
  counts = np.zeros((4, 4))
  for _ in range(400):
    for pos, v in enumerate(baregrad.randperm(4).tolist()): counts[v, pos] += 1
  assert counts.min() > 60 and counts.max() < 140

@needs_torch
def test_where_one_argument():
  c = np.array([[0, 1, 0], [2, 0, 3]])
  got = baregrad.where(Tensor(c))
  want = torch.where(torch.tensor(c))
  assert len(got) == 2 and all(g.dtype == dtypes.int64 for g in got)
  for g, w in zip(got, want): np.testing.assert_array_equal(g.numpy(), w.numpy())
  np.testing.assert_array_equal(baregrad.where(Tensor(c > 0), 1.0, 0.0).numpy(), (c > 0).astype(np.float32))
  with pytest.raises(TypeError, match="condition alone"): baregrad.where(Tensor(c), 1.0)

# ---- save / load
def test_save_load_state_dicts(tmp_path):
  m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
  opt = optim.Adam(m.parameters(), lr=0.01)
  for _ in range(2):
    opt.zero_grad(); m(Tensor(R.standard_normal((5, 3)).astype(np.float32))).square().mean().backward(); opt.step()
  path = tmp_path / "ck.safetensors"
  obj = {"model": m.state_dict(), "optim": opt.state_dict(), "epoch": 4, "best": float("inf"), "hist": [0.5, (1, "a")],
         "arr": np.arange(3, dtype=np.int16), "none": None}
  baregrad.save(obj, path)
  assert os.listdir(tmp_path) == ["ck.safetensors"]   # written through a temporary name, renamed
  d = baregrad.load(path)
  assert d["epoch"] == 4 and d["best"] == float("inf") and d["hist"] == [0.5, (1, "a")] and d["none"] is None
  assert d["arr"].dtype == np.int16 and d["arr"].tolist() == [0, 1, 2]
  assert set(d["optim"]["state"]) == {0, 1, 2, 3, 4, 5} and d["optim"]["param_groups"][0]["betas"] == (0.9, 0.999)
  for k, v in m.state_dict().items():
    assert d["model"][k].dtype == v.dtype
    np.testing.assert_array_equal(d["model"][k].numpy(), v.numpy())
  # into fresh objects: the same next step
  m2 = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
  m2.load_state_dict(d["model"])
  opt2 = optim.Adam(m2.parameters(), lr=0.5)
  opt2.load_state_dict(d["optim"])
  assert opt2.param_groups[0]["lr"] == 0.01 and opt2.steps == 2
  x = Tensor(R.standard_normal((5, 3)).astype(np.float32))
  for mm, oo in ((m, opt), (m2, opt2)):
    oo.zero_grad(); mm(x).square().mean().backward(); oo.step()
  for a, b in zip(m.parameters(), m2.parameters()): np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)

def test_save_refuses_what_it_cannot_store(tmp_path):
  with pytest.raises(TypeError, match=r"cannot save object at \['model'\]\['f'\]"): baregrad.save({"model": {"f": object()}}, tmp_path / "x")
  assert not os.listdir(tmp_path)

def test_load_plain_safetensors(tmp_path):
  nn.state.safe_save({"w": Tensor([1.0, 2.0])}, tmp_path / "w.safetensors")
  d = baregrad.load(tmp_path / "w.safetensors")
  assert list(d) == ["w"] and d["w"].tolist() == [1.0, 2.0]
