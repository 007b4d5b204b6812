"""baregrad.nn layers against torch.nn with identical weights: forward values and gradients."""
from tests.paths import REPO
import numpy as np
import pytest
import baregrad.nn as nn
from baregrad import Tensor

try: import torch
except ImportError: torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (pip install -e '.[torch]'): no reference to compare with")

def _sd(m) -> dict: return {k: v.detach().numpy() for k, v in m.state_dict().items()}

def check(bg, tm, x: np.ndarray, atol=1e-5, rtol=1e-4, grad=True, int_input=False, train=None):
  """Load tm's weights into bg, run both on x, compare outputs and (for float inputs) grads of a random projection."""
  nn.load_state_dict(bg, _sd(tm))
  if train is not None: tm.train(train); bg.train(train)   # (both start in training mode)
  xt = torch.tensor(x, requires_grad=grad and not int_input)
  xb = Tensor(x, requires_grad=True if grad and not int_input else None)
  ob = bg(xb)
  ot = tm(xt)
  np.testing.assert_allclose(ob.numpy(), ot.detach().numpy(), atol=atol, rtol=rtol)
  if not grad: return
  proj = np.random.default_rng(1).standard_normal(ot.shape).astype(np.float32)
  (ot * torch.tensor(proj)).sum().backward()
  (ob * Tensor(proj)).sum().backward()
  for name, p in tm.named_parameters():
    pb = nn.get_state_dict(bg)[name]
    assert pb.grad is not None, f"no gradient for {name}"
    np.testing.assert_allclose(pb.grad.numpy(), p.grad.numpy(), atol=atol * 10, rtol=rtol * 10, err_msg=name)
  if not int_input: np.testing.assert_allclose(xb.grad.numpy(), xt.grad.numpy(), atol=atol * 10, rtol=rtol * 10, err_msg="input grad")
  return bg

R = np.random.default_rng(0)
def rnd(*s): return R.standard_normal(s).astype(np.float32)

@needs_torch
def test_linear():
  check(nn.Linear(5, 3), torch.nn.Linear(5, 3), rnd(4, 5))
  check(nn.Linear(5, 3, bias=False), torch.nn.Linear(5, 3, bias=False), rnd(2, 4, 5))

def test_linear_init_bounds():
  Tensor.manual_seed(0)
  l = nn.Linear(64, 32)
  w, b = l.weight.numpy(), l.bias.numpy()
  assert l.weight.requires_grad and l.bias.requires_grad
  assert w.shape == (32, 64) and np.abs(w).max() <= 1 / 8 and np.abs(w).max() > 0.9 / 8 and abs(w.mean()) < 0.01
  assert np.abs(b).max() <= 1 / 8

@needs_torch
def test_conv2d():
  check(nn.Conv2d(3, 4, 3), torch.nn.Conv2d(3, 4, 3), rnd(2, 3, 7, 6))
  check(nn.Conv2d(4, 6, (3, 2), stride=2, padding=1, groups=2), torch.nn.Conv2d(4, 6, (3, 2), stride=2, padding=1, groups=2), rnd(1, 4, 7, 8))

@needs_torch
def test_conv2d_dilation_same():
  check(nn.Conv2d(2, 2, 3, padding="same", dilation=2, bias=False), torch.nn.Conv2d(2, 2, 3, padding="same", dilation=2, bias=False), rnd(1, 2, 7, 7))

@needs_torch
def test_conv1d():
  check(nn.Conv1d(3, 4, 3, stride=2, padding=1), torch.nn.Conv1d(3, 4, 3, stride=2, padding=1), rnd(2, 3, 9))

@needs_torch
def test_conv_transpose2d():
  check(nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1), torch.nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1),
        rnd(1, 3, 4, 5))

def test_conv_init_shapes():
  c = nn.Conv2d(4, 6, 3, groups=2)
  assert c.weight.shape == (6, 2, 3, 3) and c.bias.shape == (6,)
  assert np.abs(c.weight.numpy()).max() <= 1 / np.sqrt(18)
  t = nn.ConvTranspose2d(4, 6, 3, groups=2)
  assert t.weight.shape == (4, 3, 3, 3)

@needs_torch
def test_batchnorm_train_and_eval():
  bg, tm = nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3)
  with torch.no_grad(): tm.weight.uniform_(0.5, 1.5); tm.bias.uniform_(-0.5, 0.5)
  x = rnd(4, 3, 3, 2) * 2 + 1
  check(bg, tm, x, train=True)
  # the running statistics moved exactly as PyTorch's did
  np.testing.assert_allclose(bg.running_mean.numpy(), tm.running_mean.numpy(), atol=1e-6, rtol=1e-5)
  np.testing.assert_allclose(bg.running_var.numpy(), tm.running_var.numpy(), atol=1e-6, rtol=1e-5)
  assert bg.num_batches_tracked.item() == 1
  tm.eval()
  assert bg.eval() is bg
  out = bg(Tensor(x)).numpy()
  np.testing.assert_allclose(out, tm(torch.tensor(x)).detach().numpy(), atol=1e-5, rtol=1e-4)

@needs_torch
def test_batchnorm1d_cumulative_average():
  bg, tm = nn.BatchNorm1d(4, momentum=None), torch.nn.BatchNorm1d(4, momentum=None)
  check(bg, tm, rnd(6, 4), train=True)
  x = rnd(5, 4) * 3
  bg(Tensor(x)).realize()   # (check left it in training mode)
  tm(torch.tensor(x))
  assert bg.num_batches_tracked.item() == 2
  np.testing.assert_allclose(bg.running_var.numpy(), tm.running_var.numpy(), rtol=1e-5)

@needs_torch
def test_layernorm():
  check(nn.LayerNorm(5), torch.nn.LayerNorm(5), rnd(3, 5) * 3 + 2)
  check(nn.LayerNorm((2, 5), elementwise_affine=False), torch.nn.LayerNorm((2, 5), elementwise_affine=False), rnd(3, 2, 5))

@needs_torch
def test_groupnorm():
  tm = torch.nn.GroupNorm(2, 4)
  with torch.no_grad(): tm.weight.uniform_(0.5, 1.5); tm.bias.uniform_(-0.5, 0.5)
  check(nn.GroupNorm(2, 4), tm, rnd(2, 4, 3, 3))

@needs_torch
def test_rmsnorm():
  tm = torch.nn.RMSNorm(6)
  with torch.no_grad(): tm.weight.uniform_(0.5, 1.5)
  check(nn.RMSNorm(6), tm, rnd(2, 3, 6))
  check(nn.RMSNorm(6, eps=1e-3), torch.nn.RMSNorm(6, eps=1e-3), rnd(2, 6) * 0.01)

@needs_torch
def test_embedding():
  idx = np.array([[1, 0, 5], [5, 2, 2]], dtype=np.int32)
  bg = check(nn.Embedding(7, 4), torch.nn.Embedding(7, 4), idx, int_input=True)
  with pytest.raises(TypeError, match="integer"): bg(Tensor(rnd(2)))

def test_embedding_padding_idx_init():
  e = nn.Embedding(5, 3, padding_idx=2)
  w = e.weight.numpy()
  assert (w[2] == 0).all() and (w[0] != 0).all() and e.weight.requires_grad

def test_dropout():
  d = nn.Dropout(0.5)
  x = Tensor.ones(64, 64)
  assert (d.eval()(x).numpy() == 1).all()
  y = d.train()(x).numpy()
  kept = y != 0
  assert 0.4 < kept.mean() < 0.6 and np.allclose(y[kept], 2.0)
  with pytest.raises(ValueError): nn.Dropout(1.5)

@needs_torch
def test_sequential_and_parameters():
  m = nn.Sequential(nn.Linear(4, 8), Tensor.relu, nn.Linear(8, 2))
  tm = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
  assert list(nn.get_state_dict(m)) == list(tm.state_dict())
  assert len(nn.get_parameters(m)) == 4
  check(m, tm, rnd(3, 4))

@needs_torch
def test_cross_entropy_matches_torch():
  logits, target = rnd(5, 4), np.array([0, 3, 1, 1, 2])
  ref = torch.nn.functional.cross_entropy(torch.tensor(logits), torch.tensor(target)).item()
  assert abs(nn.cross_entropy(Tensor(logits), Tensor(target)).item() - ref) < 1e-5

def test_bad_input_shapes_name_the_problem():
  with pytest.raises(RuntimeError, match=r"\(N, 3"): nn.BatchNorm2d(3)(Tensor(rnd(2, 4, 2, 2)))
  with pytest.raises(RuntimeError, match="does not end in"): nn.LayerNorm(5)(Tensor(rnd(2, 4)))
  with pytest.raises(ValueError, match="divisible"): nn.Conv2d(3, 4, 3, groups=2)

def test_short_training_run_reduces_loss():
  from baregrad.nn import optim
  import importlib.util
  spec = importlib.util.spec_from_file_location("mnist_mlp", REPO / "examples" / "mnist_mlp.py")
  ex = importlib.util.module_from_spec(spec); spec.loader.exec_module(ex)
  (xtr, ytr), _ = ex.synthetic_mnist(512, 64, seed=0)
  Tensor.manual_seed(0)
  model = ex.MLP(hidden=32)
  opt = optim.Adam(nn.get_parameters(model), lr=3e-3)
  losses = []
  rng = np.random.default_rng(0)
  for _ in range(30):
    i = rng.integers(0, len(xtr), 64)
    loss = nn.cross_entropy(model(Tensor(xtr[i])), Tensor(ytr[i]))
    opt.zero_grad(); loss.backward(); opt.step(loss)
    losses.append(loss.item())
  assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5]), losses

def test_mnist_idx_reader(tmp_path):
  import gzip, importlib.util, struct
  spec = importlib.util.spec_from_file_location("mnist_mlp", REPO / "examples" / "mnist_mlp.py")
  ex = importlib.util.module_from_spec(spec); spec.loader.exec_module(ex)
  imgs = np.arange(2 * 28 * 28, dtype=np.uint32).astype(np.uint8).reshape(2, 28, 28)
  labels = np.array([3, 7], np.uint8)
  for name, arr in [("train-images-idx3-ubyte", imgs), ("t10k-images-idx3-ubyte", imgs)]:
    with gzip.open(tmp_path / f"{name}.gz", "wb") as f: f.write(struct.pack(">HBB", 0, 8, 3) + struct.pack(">3I", *arr.shape) + arr.tobytes())
  for name in ("train-labels-idx1-ubyte", "t10k-labels-idx1-ubyte"):
    (tmp_path / name).write_bytes(struct.pack(">HBB", 0, 8, 1) + struct.pack(">I", 2) + labels.tobytes())
  (xtr, ytr), (xte, yte) = ex.load_mnist(str(tmp_path))
  assert np.array_equal(xtr, imgs) and np.array_equal(yte, labels)
  (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(struct.pack(">HBB", 0, 8, 1) + struct.pack(">I", 5) + labels.tobytes())
  with pytest.raises(ValueError, match="has 2 images but .* has 5 labels"): ex.load_mnist(str(tmp_path))

def test_synthetic_mnist_is_deterministic():
  import importlib.util
  spec = importlib.util.spec_from_file_location("mnist_mlp", REPO / "examples" / "mnist_mlp.py")
  ex = importlib.util.module_from_spec(spec); spec.loader.exec_module(ex)
  (a, la), _ = ex.synthetic_mnist(64, 8, seed=3)
  (b, lb), _ = ex.synthetic_mnist(64, 8, seed=3)
  assert a.dtype == np.uint8 and a.shape == (64, 28, 28) and np.array_equal(a, b) and np.array_equal(la, lb) and la.max() <= 9
