"""Row fusion (engine/schedule.py _row_fusion, FUSE_NORMS): a reduction broadcast back over the short, contiguous rows
it reduced is computed per row in its consumer's kernel. Softmax, log_softmax, layer_norm and rms_norm run as one
kernel each, with the numbers of the kernel-per-reduction path (FUSE_NORMS=0) and of PyTorch; long rows, reductions
over other axes and gradients keep working."""
import numpy as np
import pytest
from tests.torch_helpers import torch, check, rnd
from baregrad import Tensor, knobs
import baregrad.nn.functional as F
from baregrad.ir.ops import Ops

def _w(n: int) -> np.ndarray: return rnd((n,), seed=5)

NORMS = {   # name: (ours, torch's), over the last axis of x
  "softmax": (lambda x, w, b: x.softmax(-1), lambda x, w, b: torch.softmax(x, -1)),
  "log_softmax": (lambda x, w, b: x.log_softmax(-1), lambda x, w, b: torch.log_softmax(x, -1)),
  "layer_norm": (lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b), lambda x, w, b: torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b)),
  "rms_norm": (lambda x, w, b: F.rms_norm(x, (x.shape[-1],), w), lambda x, w, b: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps=2 ** -23)),
}

def _inputs(shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  return rnd(shape, low=-4, high=4, seed=3), _w(shape[-1]), rnd((shape[-1],), seed=7)

def _reductions(items) -> int: return sum(1 for it in items for u in it.ast.toposort() if u.op is Ops.REDUCE_AXIS)

@pytest.mark.parametrize("name", list(NORMS))
@pytest.mark.parametrize("shape", [(16, 256), (2, 3, 40)])
def test_norm_forward_is_one_kernel_with_the_unfused_numbers(name, shape):
  ours, theirs = NORMS[name]
  x, w, b = _inputs(shape)
  def run() -> tuple[int, np.ndarray]:
    t = ours(Tensor(x), Tensor(w), Tensor(b))
    return len(t.schedule()), t.numpy()
  n_fused, fused = run()
  with knobs.Context(FUSE_NORMS=0): n_split, split = run()
  assert n_fused == 1, f"{name} {shape}: {n_fused} kernels with row fusion, expected 1"
  assert n_split >= 2, f"{name} {shape}: FUSE_NORMS=0 gave {n_split} kernel(s): the knob does not turn fusion off"
  np.testing.assert_allclose(fused, split, rtol=1e-5, atol=1e-6, err_msg=f"{name} {shape}: fused vs unfused")
  want = theirs(torch.tensor(x), torch.tensor(w), torch.tensor(b)).numpy()
  np.testing.assert_allclose(fused, want, rtol=1e-5, atol=2e-6, err_msg=f"{name} {shape}: fused vs torch")

@pytest.mark.parametrize("name", list(NORMS))
def test_norm_gradients_with_row_fusion(name):
  ours, theirs = NORMS[name]
  x, w, b = _inputs((6, 48))
  if name in ("softmax", "log_softmax"): check(lambda x: ours(x, None, None), x, tfn=lambda x: theirs(x, None, None), rtol=1e-5, atol=1e-5)
  elif name == "rms_norm": check(lambda x, w: ours(x, w, None), x, w, tfn=lambda x, w: theirs(x, w, None), rtol=1e-5, atol=1e-5)
  else: check(ours, x, w, b, tfn=theirs, rtol=1e-5, atol=1e-5)

def test_a_row_past_the_limit_keeps_a_kernel_per_reduction():
  x = rnd((1, 1_000_000), low=-4, high=4, seed=2)
  t = Tensor(x).softmax(-1)
  assert _reductions(t.schedule()) >= 2 and len(t.schedule()) >= 3, "a 1e6-element row was fused into one pass"
  e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
  np.testing.assert_allclose(t.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-4, atol=1e-12)
  # the limit is the knob's: a row just past it splits, one at it fuses
  y = rnd((4, 64), seed=4)
  with knobs.Context(FUSE_NORMS_MAX_ROW=63): assert len(Tensor(y).softmax(-1).schedule()) == 3
  with knobs.Context(FUSE_NORMS_MAX_ROW=64): assert len(Tensor(y).softmax(-1).schedule()) == 1

def test_reduction_over_a_leading_axis_is_not_fused_and_stays_right():
  # the rows of softmax(0) are strided (axis 0 of a 16x24 matrix): each reduction keeps its kernel
  x = rnd((16, 24), low=-3, high=3, seed=8)
  t = Tensor(x).softmax(0)
  assert len(t.schedule()) == 3
  np.testing.assert_allclose(t.numpy(), torch.softmax(torch.tensor(x), 0).numpy(), rtol=1e-5, atol=1e-6)
  # several trailing axes are one contiguous row: fused
  y = rnd((3, 4, 5), seed=9)
  t = F.layer_norm(Tensor(y), (4, 5))
  assert len(t.schedule()) == 1
  np.testing.assert_allclose(t.numpy(), torch.nn.functional.layer_norm(torch.tensor(y), (4, 5)).numpy(), rtol=1e-5, atol=1e-6)

def test_fused_rows_with_infinities_and_rows_of_one():
  x = np.array([[1000.0, 1001.0, 999.0, -np.inf], [-np.inf, 0.0, 1.0, 2.0]], np.float32)
  t = Tensor(x).softmax(-1)
  assert len(t.schedule()) == 1
  np.testing.assert_allclose(t.numpy(), torch.softmax(torch.tensor(x), -1).numpy(), rtol=1e-6)
  one = Tensor(rnd((5, 1), seed=1)).softmax(-1)
  np.testing.assert_array_equal(one.numpy(), np.ones((5, 1), np.float32))

def test_a_matmul_after_a_norm_does_not_recompute_the_row_statistics():
  # the normalized rows broadcast into a matmul: the matmul's kernel reads them from memory (one reduction in it), the
  # norm's kernels compute their statistics per row (fewer kernels than with a kernel per reduction)
  x, w = rnd((8, 32), seed=1), rnd((32, 16), seed=2)
  def build() -> Tensor: return F.layer_norm(Tensor(x), (32,)) @ Tensor(w)
  items = build().schedule()
  assert _reductions(items[-1:]) == 1, "the matmul kernel computes the norm's statistics again"
  with knobs.Context(FUSE_NORMS=0): assert len(items) < len(build().schedule())
  want = torch.nn.functional.layer_norm(torch.tensor(x), (32,)) @ torch.tensor(w)
  np.testing.assert_allclose(build().numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
