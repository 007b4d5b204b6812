"""nn.Module and the habits of PyTorch users (issue 9, part 3): module walking and switches, state dicts, grad-mode
switches, repr, NumPy/Python interop, dtype arguments, axis= spellings, nn.init and the QR behind orthogonal_."""
import math, threading
import numpy as np
import pytest
import baregrad
import baregrad.nn as nn
from baregrad import Tensor, dtypes
from baregrad.ir.dtype import torch_name
from tests.torch_helpers import torch

tnn = torch.nn

def _model(lib):
  return lib.Sequential(lib.Linear(3, 4), lib.ReLU(), lib.Sequential(lib.Conv2d(2, 3, 3, padding=1, bias=False), lib.Dropout(0.25)),
                        lib.BatchNorm2d(4), lib.LayerNorm(4), lib.GELU(approximate="tanh"), lib.Flatten())

# ---------------------------------------------------------------- Module

def test_module_names_and_repr_match_torch():
  bm, tm = _model(nn), _model(tnn)
  assert repr(bm) == repr(tm)
  assert [n for n, _ in bm.named_parameters()] == [n for n, _ in tm.named_parameters()]
  assert [n for n, _ in bm.named_buffers()] == [n for n, _ in tm.named_buffers()]
  assert list(bm.state_dict()) == list(tm.state_dict())
  assert [n for n, _ in bm.named_modules()] == [n for n, _ in tm.named_modules()]
  assert [type(m).__name__ for m in bm.children()] == [type(m).__name__ for m in tm.children()]
  assert all(p.requires_grad for p in bm.parameters())

class Net(nn.Module):
  def __init__(self):  # no super().__init__(): nothing needs registering
    self.body = nn.Linear(4, 5)
    self.heads = [nn.Linear(5, 2), nn.Linear(5, 3)]
    self.scale = Tensor([2.0])
  def forward(self, x, k=0): return self.heads[k](self.body(x).relu()) * self.scale

def test_custom_module_call_and_walk():
  m = Net()
  x = Tensor(np.ones((2, 4), np.float32))
  assert m(x).shape == (2, 2) and m(x, k=1).shape == (2, 3)
  assert [n for n, _ in m.named_parameters()] == ["body.weight", "body.bias", "heads.0.weight", "heads.0.bias", "heads.1.weight", "heads.1.bias"]
  assert [n for n, _ in m.named_buffers()] == ["scale"]
  assert [n for n, _ in m.named_children()] == ["body", "heads.0", "heads.1"]
  assert [n for n, _ in m.named_parameters(recurse=False)] == []
  assert "(heads.1): Linear(in_features=5, out_features=3, bias=True)" in repr(m)
  with pytest.raises(NotImplementedError, match="forward"): nn.Module()(x)

def test_state_dict_round_trip_and_errors():
  a, b = Net(), Net()
  r = b.load_state_dict(a.state_dict())
  assert r.missing_keys == [] and r.unexpected_keys == []
  x = Tensor(np.arange(8, dtype=np.float32).reshape(2, 4))
  np.testing.assert_array_equal(a(x).numpy(), b(x).numpy())
  assert all(p.requires_grad for p in b.parameters())
  sd = {k: v.numpy() for k, v in a.state_dict().items()}
  del sd["body.bias"]
  sd["extra"] = np.zeros(1, np.float32)
  with pytest.raises(KeyError, match="body.bias"): b.load_state_dict(sd)
  r = b.load_state_dict(sd, strict=False)
  assert r.missing_keys == ["body.bias"] and r.unexpected_keys == ["extra"]
  # torch's weights load into the same names
  bm, tm = _model(nn), _model(tnn)
  bm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
  np.testing.assert_array_equal(bm[0].weight.numpy(), tm[0].weight.detach().numpy())

def test_safetensors_with_module(tmp_path):
  from baregrad.nn.state import safe_save, safe_load
  a, b = Net(), Net()
  safe_save(a.state_dict(), tmp_path / "m.safetensors")
  b.load_state_dict(safe_load(tmp_path / "m.safetensors"))
  for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
    assert ka == kb
    np.testing.assert_array_equal(va.numpy(), vb.numpy())
  assert nn.get_parameters(a) == list(a.parameters())

def test_train_eval_switches():
  m = nn.Sequential(nn.Dropout(0.5), nn.Linear(3, 3))
  x = Tensor(np.ones((64, 3), np.float32))
  assert m.training is True and m[0].training is True      # training mode from construction, as in PyTorch
  assert (m[0](x).numpy() == 0).any()                      # whatever Tensor.training is (off)
  assert m.eval() is m and m[0].training is False and m[1].training is False
  with Tensor.train(): assert (m[0](x).numpy() == 1).all()  # pinned off
  assert m.train() is m and m[0].training is True and m[1].training is True
  m[0].training = None                                      # None: follows the global switch (tinygrad's way)
  assert (m[0](x).numpy() == 1).all()
  with Tensor.train(): assert (m[0](x).numpy() == 0).any()
  with pytest.raises(ValueError, match="mode"): m.train("yes")

def test_zero_grad_apply_requires_grad():
  m = Net()
  (m(Tensor(np.ones((1, 4), np.float32))).sum()).backward()
  assert m.body.weight.grad is not None
  m.zero_grad()
  assert all(p.grad is None for p in m.parameters())
  seen = []
  m.apply(lambda mod: seen.append(type(mod).__name__))
  assert seen == ["Linear", "Linear", "Linear", "Net"]
  assert m.requires_grad_(False) is m
  # frozen parameters stay parameters (PyTorch), and are not buffers
  assert [n for n, _ in m.named_parameters()] == ["body.weight", "body.bias", "heads.0.weight", "heads.0.bias", "heads.1.weight", "heads.1.bias"]
  assert not any(p.requires_grad for p in m.parameters()) and [n for n, _ in m.named_buffers()] == ["scale"]
  m.body.requires_grad_(True)
  assert [p.requires_grad for p in m.parameters()] == [True, True, False, False, False, False]

def test_requires_grad_freezing_matches_torch():
  # fine-tuning: freeze the first layer, train the rest; the optimizer leaves frozen parameters alone
  from baregrad.nn import optim
  tm = tnn.Sequential(tnn.Linear(3, 4), tnn.ReLU(), tnn.Linear(4, 2))
  bm = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
  bm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
  tm[0].requires_grad_(False); bm[0].requires_grad_(False)
  assert [p.requires_grad for p in bm.parameters()] == [p.requires_grad for p in tm.parameters()]
  x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
  topt, bopt = torch.optim.SGD(tm.parameters(), lr=0.5), optim.SGD(list(bm.parameters()), lr=0.5)
  tm(torch.tensor(x)).square().sum().backward(); bm(Tensor(x)).square().sum().backward()
  topt.step(); bopt.step()
  assert bm[0].weight.grad is None and not bm[0].weight.requires_grad
  for (k, t), (k2, b) in zip(tm.state_dict().items(), bm.state_dict().items()):
    assert k == k2
    np.testing.assert_allclose(b.numpy(), t.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=k)

def test_module_to_half_float_replace_tensors():
  m = Net()
  m.body.requires_grad_(False)
  (m(Tensor(np.ones((1, 4), np.float32))).sum()).backward()
  w0, g0 = m.heads[0].weight, m.heads[0].weight.grad
  counter = Tensor([3], dtype=dtypes.int32)
  m.counter = counter
  assert m.half() is m
  w = m.heads[0].weight
  assert w is not w0 and w0.dtype == dtypes.float32  # value semantics: the old tensor is unchanged, the module holds a new one
  assert w.dtype == dtypes.float16 and w.requires_grad and w.grad is not None and w.grad.dtype == dtypes.float16
  np.testing.assert_allclose(w.numpy(), w0.numpy().astype(np.float16))
  np.testing.assert_allclose(w.grad.numpy(), g0.numpy().astype(np.float16), rtol=1e-3)
  assert m.scale.dtype == dtypes.float16 and m.counter is counter  # buffers too; integer tensors keep their dtype
  assert [n for n, _ in m.named_parameters()] == ["body.weight", "body.bias", "heads.0.weight", "heads.0.bias", "heads.1.weight", "heads.1.bias"]
  assert [p.requires_grad for p in m.parameters()] == [False, False, True, True, True, True]
  assert m(Tensor(np.ones((1, 4), np.float16))).dtype == dtypes.float16
  assert m.float() is m and all(p.dtype == dtypes.float32 for p in m.parameters())
  assert m.to(dtypes.float16) is m and m.body.weight.dtype == dtypes.float16
  assert m.to("float32").body.weight.dtype == dtypes.float32
  w = m.body.weight
  assert m.to("CPU") is m and m.body.weight is w  # nothing to change: the same tensors
  assert m.to(Tensor([1.0], dtype=dtypes.float16)).body.weight.dtype == dtypes.float16
  with pytest.raises(TypeError, match="floating point"): m.to(dtypes.int32)

def test_module_to_shared_weights_and_torch_parity():
  # tied weights stay tied; the same calls give PyTorch's dtypes
  class Tied(nn.Module):
    def __init__(self):
      self.emb = nn.Embedding(5, 3)
      self.out = nn.Linear(3, 5, bias=False)
      self.out.weight = self.emb.weight
  m = Tied().half()
  assert m.out.weight is m.emb.weight and m.emb.weight.dtype == dtypes.float16
  bm, tm = _model(nn), _model(tnn)
  for fn in (lambda m: m.half(), lambda m: m.float(), lambda m: m.to(dtype=torch.float16 if isinstance(m, tnn.Module) else "float16")):
    fn(bm); fn(tm)
    assert [torch_name(b.dtype) for b in bm.state_dict().values()] == [str(t.dtype).removeprefix("torch.") for t in tm.state_dict().values()]
    assert [b.requires_grad for b in bm.parameters()] == [t.requires_grad for t in tm.parameters()]

def test_module_list_dict():
  ml = nn.ModuleList([nn.Linear(2, 2), nn.ReLU()])
  md = nn.ModuleDict({"a": nn.Linear(2, 3)})
  assert [n for n, _ in ml.named_parameters()] == ["0.weight", "0.bias"]
  assert [n for n, _ in md.named_parameters()] == ["a.weight", "a.bias"]
  assert repr(ml) == repr(tnn.ModuleList([tnn.Linear(2, 2), tnn.ReLU()]))
  assert len({ml, md}) == 2  # hashable

def test_layer_modules_against_torch():
  x = np.random.default_rng(0).standard_normal((2, 3, 6, 6)).astype(np.float32)
  for bm, tm in [(nn.MaxPool2d(2), tnn.MaxPool2d(2)), (nn.AvgPool2d(3, 2, 1), tnn.AvgPool2d(3, 2, 1)), (nn.Softmax(1), tnn.Softmax(1)),
                 (nn.LogSoftmax(-1), tnn.LogSoftmax(-1)), (nn.SiLU(), tnn.SiLU()), (nn.Sigmoid(), tnn.Sigmoid()), (nn.Tanh(), tnn.Tanh()),
                 (nn.LeakyReLU(0.2), tnn.LeakyReLU(0.2)), (nn.Flatten(), tnn.Flatten()), (nn.Identity(), tnn.Identity()),
                 (nn.AdaptiveAvgPool2d(2), tnn.AdaptiveAvgPool2d(2))]:
    np.testing.assert_allclose(bm(Tensor(x)).numpy(), tm(torch.tensor(x)).numpy(), rtol=1e-5, atol=1e-6, err_msg=repr(tm))
    assert repr(bm) == repr(tm)

# ---------------------------------------------------------------- grad mode

def test_no_grad_context_and_decorators():
  x = Tensor([1.0, 2.0], requires_grad=True)
  with baregrad.no_grad():
    y = x * 2
    assert not y.requires_grad and not baregrad.is_grad_enabled()
    with baregrad.enable_grad():
      assert (x * 2).requires_grad
    leaf = Tensor([1.0], requires_grad=True)  # a leaf asked for grads still gets them, as in PyTorch
    assert leaf.requires_grad
  assert baregrad.is_grad_enabled() and (x * 2).requires_grad

  @baregrad.no_grad
  def f(t): return t * 3
  @baregrad.no_grad()
  def g(t): return t * 3
  @baregrad.inference_mode()
  def h(t): return t * 3
  assert not f(x).requires_grad and not g(x).requires_grad and not h(x).requires_grad
  assert f.__name__ == "f" and baregrad.is_grad_enabled()
  with baregrad.inference_mode(False): assert (x * 2).requires_grad
  with baregrad.set_grad_enabled(False): assert not (x * 2).requires_grad
  assert baregrad.is_grad_enabled()
  baregrad.set_grad_enabled(False)
  assert not baregrad.is_grad_enabled()
  baregrad.set_grad_enabled(True)
  with Tensor.test(): assert not (x * 2).requires_grad
  with pytest.raises(RuntimeError, match="does not require grad"):
    with baregrad.no_grad(): (x * 2).sum().backward()
  with pytest.raises(TypeError, match="mode"): baregrad.set_grad_enabled("no")

def test_no_grad_raises_inside_restores_and_is_per_thread():
  with pytest.raises(ZeroDivisionError):
    with baregrad.no_grad(): 1 / 0
  assert baregrad.is_grad_enabled()
  seen = []
  with baregrad.no_grad():
    t = threading.Thread(target=lambda: seen.append(baregrad.is_grad_enabled()))
    t.start(); t.join()
  assert seen == [True]

def test_tensor_train_eval_decorators():
  @Tensor.train()
  def f(): return Tensor.training
  @Tensor.eval()
  def g(): return Tensor.training
  assert f() is True and Tensor.training is False
  with Tensor.train():
    assert g() is False and Tensor.training is True
    with Tensor.eval(): assert Tensor.training is False
  assert nn.train is Tensor.train

# ---------------------------------------------------------------- interop, repr, dtypes

def test_numpy_python_interop():
  a = np.arange(6, dtype=np.int16).reshape(2, 3)
  t = Tensor.from_numpy(a)
  assert t.dtype == dtypes.int16 and t.shape == (2, 3)
  np.testing.assert_array_equal(np.asarray(t), a)
  assert np.asarray(t, dtype=np.float32).dtype == np.float32
  assert Tensor.from_numpy(np.array(2.5, np.float32)).shape == ()
  assert float(Tensor([2.5])) == 2.5 and int(Tensor([[7]])) == 7 and bool(Tensor([0.0])) is False
  assert int(Tensor(-3.7)) == -3 and [10, 20, 30][Tensor(2)] == 30 and math.isnan(float(Tensor(float("nan"))))
  with pytest.raises(RuntimeError, match=r"one element.*\(2,\)"): float(Tensor([1.0, 2.0]))
  with pytest.raises(TypeError, match="integer tensors"): [1, 2][Tensor(1.0)]
  with pytest.raises(TypeError, match="ndarray"): Tensor.from_numpy([1, 2])
  bf = Tensor([1.5, 2.0], dtype=dtypes.bfloat16)
  np.testing.assert_array_equal(np.asarray(bf), np.array([1.5, 2.0], np.float32))

REPR_CASES = [
  lambda lib: lib.tensor([1.0, 2.0, 3.0]),
  lambda lib: lib.tensor([1, 2]),
  lambda lib: lib.tensor(3.5),
  lambda lib: lib.tensor([[1.5, -2e-5], [3.0, 4.0]]),
  lambda lib: lib.tensor([1e10, 1.0]),
  lambda lib: lib.tensor([float("nan"), float("inf"), 1.0]),
  lambda lib: lib.tensor([True, False]),
  lambda lib: lib.tensor([1, 2], dtype=lib.int32),
  lambda lib: lib.tensor([1.25, 2.5], dtype=lib.float16),
  lambda lib: lib.tensor([-0.0, 0.0, 123456.789]),
  lambda lib: lib.tensor(np.arange(2000, dtype=np.float32)),
  lambda lib: lib.tensor(np.arange(2400, dtype=np.float32).reshape(30, 8, 10) / 7),
  lambda lib: lib.tensor(np.random.default_rng(0).standard_normal((3, 40)).astype(np.float32)),
  lambda lib: lib.tensor(np.zeros((0, 3), np.float32)),
  lambda lib: lib.tensor(np.zeros((0,), np.int32)),
  lambda lib: lib.tensor([[1.0, 2.0]], requires_grad=True),
  lambda lib: lib.tensor(np.full((2, 12), 1.2345678, np.float32), requires_grad=True),
]

class _lib:
  """torch-like constructors over baregrad, so one lambda builds both tensors."""
  int32, float16 = dtypes.int32, dtypes.float16
  @staticmethod
  def tensor(v, dtype=None, requires_grad=False): return Tensor(v, dtype=dtype, requires_grad=requires_grad or None)

@pytest.mark.parametrize("i", range(len(REPR_CASES)))
def test_repr_matches_torch(i):
  want = repr(REPR_CASES[i](torch)).replace("torch.", "dtypes.")
  assert repr(REPR_CASES[i](_lib)) == want

def test_repr_names_device_and_str():
  t = Tensor([1.0])
  assert str(t) == repr(t) == "tensor([1.])"
  assert f"{t!r}" == "tensor([1.])"

DTYPE_ARGS = [(dtypes.float16, dtypes.float16), ("float16", dtypes.float16), ("half", dtypes.float16), ("torch.bfloat16", dtypes.bfloat16),
              (np.float16, dtypes.float16), (np.dtype("int8"), dtypes.int8), ("f8", dtypes.float64), (float, dtypes.float64),
              (int, dtypes.int64), (bool, dtypes.bool), (torch.int16, dtypes.int16), ("long", dtypes.int64)]

@pytest.mark.parametrize("arg,want", DTYPE_ARGS, ids=[str(a) for a, _ in DTYPE_ARGS])
def test_dtype_arguments(arg, want):
  assert Tensor([1, 0], dtype=arg).dtype == want
  assert Tensor.zeros(2, dtype=arg).dtype == want and Tensor.ones(2, dtype=arg).dtype == want
  assert Tensor.full((2,), 1, dtype=arg).dtype == want and Tensor.arange(3, dtype=arg).dtype == want
  assert Tensor([1.0]).cast(arg).dtype == want and Tensor([1.0]).to(arg).dtype == want
  if dtypes.is_float(want): assert Tensor.rand(2, dtype=arg).dtype == want
  assert Tensor([1, 2]).sum(dtype=arg).dtype == want

def test_dtype_argument_errors():
  with pytest.raises(ValueError, match="unknown dtype 'complex64'"): Tensor([1.0]).cast("complex64")
  with pytest.raises(TypeError, match="dtype must be"): Tensor([1.0]).cast(3.5)
  with pytest.raises(TypeError, match="no baregrad dtype"): Tensor([1.0]).cast(np.complex64)
  with pytest.raises(TypeError, match="dtype as the device"): Tensor([1.0]).to("float16", dtypes.half)
  t = Tensor([1.0, 2.0], dtype="float16")
  assert Tensor([1]).to(t).dtype == dtypes.float16

def test_axis_spellings():
  a = np.random.default_rng(1).standard_normal((3, 4, 5)).astype(np.float32)
  t, tt = Tensor(a), torch.tensor(a)
  np.testing.assert_array_equal(t.argmax(axis=1).numpy(), tt.argmax(dim=1).numpy())
  np.testing.assert_array_equal(t.argmin(axis=-1, keepdim=True).numpy(), tt.argmin(dim=-1, keepdim=True).numpy())
  np.testing.assert_allclose(t.softmax(axis=0).numpy(), tt.softmax(dim=0).numpy(), rtol=1e-5)
  np.testing.assert_allclose(t.log_softmax(axis=1).numpy(), tt.log_softmax(dim=1).numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(t.cumsum(axis=2).numpy(), tt.cumsum(dim=2).numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(t.cumprod(axis=2).numpy(), tt.cumprod(dim=2).numpy(), rtol=1e-5, atol=1e-6)
  assert t.cumsum(1, dtype="float64").dtype == dtypes.float64

def test_cumsum_cumprod_zero_dim():
  for v, fn in [(3.0, "cumsum"), (3, "cumsum"), (True, "cumsum"), (2.5, "cumprod"), (4, "cumprod")]:
    b, t = getattr(Tensor(v), fn)(0), getattr(torch.tensor(v), fn)(0)
    assert b.shape == () and str(b.dtype) == f"dtypes.{ {'float32': 'float', 'int64': 'long'}[str(t.dtype)[6:]]}" and b.item() == t.item()
  x = Tensor(2.0, requires_grad=True)
  x.cumsum(-1).backward()
  assert x.grad.item() == 1.0
  with pytest.raises(IndexError, match="dimension 1 is out of range"): Tensor(1.0).cumsum(1)

# ---------------------------------------------------------------- init, qr

def test_qr_matches_torch_with_positive_diagonal():
  from baregrad.tensor.linalg import qr
  for shape in [(6, 4), (4, 4), (3, 5), (1, 1)]:
    a = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    q, r = qr(Tensor(a))
    tq, tr = torch.linalg.qr(torch.tensor(a))
    sgn = torch.sign(torch.diagonal(tr))
    np.testing.assert_allclose(q.numpy(), (tq * sgn).numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r.numpy(), (tr * sgn[:, None]).numpy(), rtol=1e-4, atol=1e-5)
  with pytest.raises(RuntimeError, match=r"2-D.*\(2, 3, 4\)"): qr(Tensor(np.zeros((2, 3, 4), np.float32)))

@pytest.mark.parametrize("shape", [(5, 3), (3, 8), (4, 2, 3)])
def test_orthogonal(shape):
  w = Tensor.zeros(*shape, requires_grad=True)
  nn.init.orthogonal_(w, gain=2.0)
  assert w.requires_grad and w.shape == shape
  m = w.numpy().reshape(shape[0], -1)
  g = m.T @ m if shape[0] >= m.shape[1] else m @ m.T
  np.testing.assert_allclose(g, 4 * np.eye(g.shape[0]), atol=1e-4)
  with pytest.raises(ValueError, match="2 or more dimensions"): nn.init.orthogonal_(Tensor.zeros(3))

def test_kaiming_xavier_statistics():
  Tensor.manual_seed(3)
  w = Tensor.zeros(256, 128, 3)
  fan_in, fan_out = 128 * 3, 256 * 3
  b = math.sqrt(2.0) * math.sqrt(3.0 / fan_in)
  v = nn.init.kaiming_uniform_(w, nonlinearity="relu").numpy()
  assert v.max() <= b and v.max() > 0.99 * b and abs(v.std() - b / math.sqrt(3)) < 0.01 * b
  v = nn.init.kaiming_normal_(w, mode="fan_out").numpy()
  assert abs(v.std() - math.sqrt(2.0 / (1 + 0.01 ** 2)) / math.sqrt(fan_out)) < 0.02 / math.sqrt(fan_out)
  v = nn.init.xavier_uniform_(w, gain=nn.init.calculate_gain("tanh")).numpy()
  b = 5 / 3 * math.sqrt(6.0 / (fan_in + fan_out))
  assert v.max() <= b and v.max() > 0.99 * b
  v = nn.init.xavier_normal_(w).numpy()
  assert abs(v.std() - math.sqrt(2.0 / (fan_in + fan_out))) < 0.001
  assert nn.init.constant_(w, 0.5).numpy().min() == 0.5 and nn.init.zeros_(w).numpy().max() == 0
  np.testing.assert_array_equal(nn.init.eye_(Tensor.zeros(2, 3)).numpy(), np.eye(2, 3))
  for name in ("linear", "sigmoid", "tanh", "relu", "leaky_relu", "selu"):
    assert nn.init.calculate_gain(name) == pytest.approx(tnn.init.calculate_gain(name))
  assert nn.init.calculate_gain("leaky_relu", 0.2) == pytest.approx(tnn.init.calculate_gain("leaky_relu", 0.2))

def test_init_errors():
  with pytest.raises(ValueError, match="unsupported nonlinearity 'swish'"): nn.init.calculate_gain("swish")
  with pytest.raises(ValueError, match=r"fewer than 2 dimensions \(shape \(3,\)\)"): nn.init.xavier_uniform_(Tensor.zeros(3))
  with pytest.raises(ValueError, match="mode 'fan_avg'"): nn.init.kaiming_normal_(Tensor.zeros(3, 3), mode="fan_avg")
  with pytest.raises(TypeError, match="must be a Tensor"): nn.init.ones_(np.zeros(3))

# ---------------------------------------------------------------- documentation

def test_public_api_has_docstrings():
  import inspect
  import baregrad.tensor.functional as F
  missing = []
  for k, v in vars(Tensor).items():
    if k.startswith("_"): continue
    f = v.fget if isinstance(v, property) else v.__func__ if isinstance(v, (staticmethod, classmethod)) else v
    if (callable(f) or isinstance(v, property)) and not (getattr(f, "__doc__", None) or "").strip(): missing.append(f"Tensor.{k}")
  missing += [f"F.{k}" for k in F.__all__ if not (getattr(F, k).__doc__ or "").strip()]
  missing += [f"nn.{k}" for k in nn.__all__
              if (inspect.isclass(getattr(nn, k)) or inspect.isfunction(getattr(nn, k))) and not (getattr(nn, k).__doc__ or "").strip()]
  missing += [f"nn.init.{k}" for k in nn.init.__all__ if not (getattr(nn.init, k).__doc__ or "").strip()]
  assert not missing, f"public API without a docstring: {missing}"
