"""A padded value computed in the kernel that reads it (engine/schedule.py, _zero_at_pad): where the value is 0 when
everything it reads is 0 (relu(x + b)), the padding moves to its loads and constants and no buffer of its own is
written (constants read 0 there too); where it is not (exp, sigmoid, a reciprocal), it is computed into a buffer first and the padding
reads zeros from there. The values in and around the padding are what NumPy gives either way."""
import numpy as np
import pytest
from baregrad import Tensor, dtypes

rng = np.random.default_rng(11)
PAD = ((0, 0), (1, 2), (2, 1))

def _padded(f, *arrays) -> tuple[int, np.ndarray]:
  """(kernels, values) of f(*tensors) padded by PAD and made contiguous."""
  out = f(*(Tensor(a) for a in arrays)).pad(tuple(p for ax in reversed(PAD) for p in ax)).contiguous()
  return len([s for s in out.schedule() if s.ast.op.name == "SINK"]), out.numpy()

X = rng.standard_normal((2, 5, 6), dtype=np.float32)
B = rng.standard_normal((2, 1, 1), dtype=np.float32)

@pytest.mark.parametrize("name,f,ref", [
  ("relu(x + b)", lambda x, b: (x + b).relu(), lambda x, b: np.maximum(x + b, 0)),
  ("x * b", lambda x, b: x * b, lambda x, b: x * b),
  ("sqrt(x*x) - x", lambda x, b: (x * x).sqrt() - x, lambda x, b: np.sqrt(x * x) - x),
  ("(x > b) as float", lambda x, b: (x > b).float(), lambda x, b: (x > b).astype(np.float32)),
  # constants read 0 in the padding too (a masked constant): x + 1 and where(x > 0, x, 2) are 0 there
  ("x + 1", lambda x, b: x + 1, lambda x, b: x + 1),
  ("where(x > b, x, 2)", lambda x, b: (x > b).where(x, 2.0), lambda x, b: np.where(x > b, x, np.float32(2))),
])
def test_zero_preserving_value_is_computed_in_the_padding_kernel(name, f, ref):
  n, got = _padded(f, X, B)
  assert n == 1, f"{name}: {n} kernels, expected the padded copy alone"
  np.testing.assert_allclose(got, np.pad(ref(X, B), PAD), rtol=1e-6, atol=1e-6)

@pytest.mark.parametrize("name,f,ref", [
  ("exp(x)", lambda x, b: x.exp(), np.exp),
  ("log(|x|)", lambda x, b: x.abs().log(), lambda x: np.log(np.abs(x))),
  ("sigmoid(x)", lambda x, b: x.sigmoid(), lambda x: 1 / (1 + np.exp(-x))),
  ("1 / x", lambda x, b: 1 / x, lambda x: 1 / x),
])
def test_value_nonzero_at_zero_gets_its_own_buffer(name, f, ref):
  # f(0) != 0: computed in the padding it would fill the pad with f(0) (exp: ones); it gets a buffer first
  n, got = _padded(f, X, B)
  assert n == 2, f"{name}: {n} kernels"
  np.testing.assert_allclose(got, np.pad(ref(X), PAD), rtol=1e-5, atol=1e-6)

def test_integer_division_by_zero_is_not_folded():
  # 0 // 0 has no value to fold: the quotient gets its own buffer, and the padding is zeros
  a, b = rng.integers(-9, 9, (2, 5, 6)).astype(np.int32), rng.integers(1, 5, (2, 5, 6)).astype(np.int32)
  out = (Tensor(a) // Tensor(b)).pad((2, 1, 1, 2)).contiguous()
  assert out.dtype == dtypes.int32
  np.testing.assert_array_equal(out.numpy(), np.pad(np.floor_divide(a, b), PAD))

def test_padded_value_over_a_cropped_read_is_one_view():
  # relu(y + b) over a cropped buffer (a CPU convolution's output read without its extra columns), padded for the
  # next convolution: the padding composes with the crop into one View (schedule._as_box); stacked, the two Views
  # took a division and a remainder per element (the padded copy 5x slower than the two kernels it replaced)
  from baregrad.ir.ops import Ops
  yn = rng.standard_normal((1, 4, 6 * 9 + 5), dtype=np.float32)
  y = Tensor(yn)[:, :, :6 * 9].reshape(1, 4, 6, 9)[:, :, :, :7]
  out = (y + Tensor(B[:1, :1].reshape(1, 1, 1, 1))).relu().pad((1, 1, 1, 2)).contiguous()
  (item,) = [s for s in out.schedule() if s.ast.op is Ops.SINK]
  views = [u.src[1].arg for u in item.ast.toposort() if u.op is Ops.LOAD]
  assert views and all(len(st.views) == 1 for st in views), views
  ref = np.pad(np.maximum(yn[:, :, :54].reshape(1, 4, 6, 9)[..., :7] + B[0, 0, 0], 0), ((0, 0), (0, 0), (1, 2), (1, 1)))
  np.testing.assert_allclose(out.numpy(), ref, rtol=1e-6, atol=1e-6)

def test_value_padded_inside_or_long_gets_its_own_buffer():
  # only a short epilogue is computed in the padding's kernel: a value padded again inside (a cat, a sort's stages)
  # would nest masks kernel after kernel, each recomputing it (test_sort: 11 s -> 5 min); a long chain likewise
  n, got = _padded(lambda x, b: (x.pad((1, 1)) * b).relu()[..., 1:-1], X, B)
  assert n == 2, n
  np.testing.assert_allclose(got, np.pad(np.maximum(X * B, 0), PAD), rtol=1e-6, atol=1e-6)
  def chain(x, b):
    for _ in range(20): x = (x * b).relu()
    return x
  n, got = _padded(chain, X, B)
  ref = X
  for _ in range(20): ref = np.maximum(ref * B, 0)
  assert n == 2, n
  np.testing.assert_allclose(got, np.pad(ref, PAD), rtol=1e-5, atol=1e-6)
