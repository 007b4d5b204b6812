"""Bad input to the Tensor frontend: each case raises an error whose message names what was wrong (shapes, axes,
dtypes), and the tensors involved stay usable afterwards (no half-built state, later ops still compute)."""
import re
import numpy as np
import pytest
from baregrad import Tensor, dtypes, Device

A = np.arange(6, dtype=np.float32).reshape(2, 3)

@pytest.fixture
def a():
  t = Tensor(A, requires_grad=True)
  yield t
  # after the error, the tensor still computes, forward and backward
  np.testing.assert_allclose((t * 2 + 1).numpy(), A * 2 + 1)
  t.grad = None
  (t * t).sum().backward()
  np.testing.assert_allclose(t.grad.numpy(), 2 * A)

B4 = np.ones(4, np.float32)

# (what, fn of a, exception type, regex the message must match)
CASES = [
  ("broadcast", lambda a: a + Tensor(B4), ValueError, r"\(2, 3\).*\(4,\)"),
  ("broadcast_where", lambda a: Tensor([True, False]).where(a, 0.0), ValueError, r"\(2,\).*\(2, 3\)"),
  ("broadcast_inplace_setitem", lambda a: a.__setitem__(0, Tensor(B4)), ValueError, r"\(4,\).*\(3,\)"),
  ("matmul_inner", lambda a: a @ a, ValueError, r"\(2, 3\).*\(2, 3\).*3 vs 2"),
  ("matmul_vec", lambda a: a @ Tensor(B4), ValueError, r"\(2, 3\).*\(4,\)"),
  ("matmul_0d", lambda a: a @ Tensor(2.0), ValueError, r"0-d.*\(2, 3\).*\(\)"),
  ("linear", lambda a: a.linear(Tensor(np.ones((4, 4), np.float32))), ValueError, r"\(2, 3\).*\(4, 4\)"),
  ("sum_axis", lambda a: a.sum(2), IndexError, r"dimension 2.*2 dimensions"),
  ("sum_axis_neg", lambda a: a.mean(axis=-3), IndexError, r"dimension -3.*2 dimensions"),
  ("dup_axis", lambda a: a.sum((1, -1)), ValueError, r"\(1, -1\).*\(2, 3\)"),
  ("softmax_axis", lambda a: a.softmax(3), IndexError, r"dimension 3"),
  ("argmax_axis", lambda a: a.argmax(5), IndexError, r"dimension 5"),
  ("cumsum_axis", lambda a: a.cumsum(2), IndexError, r"dimension 2"),
  ("transpose_axis", lambda a: a.transpose(0, 2), IndexError, r"dimension 2"),
  ("squeeze_axis", lambda a: a.squeeze(3), IndexError, r"dimension 3"),
  ("unsqueeze_axis", lambda a: a.unsqueeze(4), IndexError, r"dimension 4.*3 dimensions"),
  ("flip_axis", lambda a: a.flip(2), IndexError, r"dimension 2"),
  ("permute", lambda a: a.permute(0, 0), ValueError, r"\(0, 0\).*\(2, 3\)"),
  ("reshape", lambda a: a.reshape(4, 2), ValueError, r"\(2, 3\).*6.*\(4, 2\).*8"),
  ("reshape_-1", lambda a: a.reshape(-1, 4), ValueError, r"\(2, 3\).*\(-1, 4\)"),
  ("reshape_two_-1", lambda a: a.reshape(-1, -1), ValueError, r"-1"),
  ("view", lambda a: a.view(7), ValueError, r"\(2, 3\).*\(7,\)"),
  ("expand", lambda a: a.expand(4, 3), ValueError, r"\(2, 3\).*\(4, 3\)"),
  ("expand_rank", lambda a: a.expand(3), ValueError, r"\(3,\).*\(2, 3\)"),
  ("pad_len", lambda a: a.pad((1, 1, 1, 1, 1, 1)), ValueError, r"\(1, 1, 1, 1, 1, 1\)"),
  ("pad_odd", lambda a: a.pad((1,)), ValueError, r"\(1,\)"),
  ("pad_mode", lambda a: a.pad((1, 1), mode="wrap"), ValueError, r"wrap"),
  ("index", lambda a: a[2], IndexError, r"index 2.*dimension 0 of size 2"),
  ("index_dim1", lambda a: a[0, 5], IndexError, r"index 5.*dimension 1 of size 3.*\(2, 3\)"),
  ("index_neg", lambda a: a[:, -4], IndexError, r"index -4.*dimension 1 of size 3"),
  ("too_many_indices", lambda a: a[0, 0, 0], IndexError, r"dimension 2.*3"),
  ("two_ellipsis", lambda a: a[..., ..., 0], IndexError, r"ellipsis"),
  ("index_type", lambda a: a[1.5], IndexError, r"float"),
  ("slice_step_0", lambda a: a[::0], ValueError, r"step"),
  ("index_tensors_broadcast", lambda a: a[Tensor([0, 1]), Tensor([0, 1, 2])], IndexError, r"\(2,\).*\(3,\)"),
  ("bitcast", lambda a: a.bitcast(dtypes.int16), TypeError, r"float.*short|float32.*int16"),
  ("bitwise_float", lambda a: a & a, TypeError, r"float"),
  ("unknown_dtype", lambda a: a.cast("complex64"), ValueError, r"complex64"),
  ("operand_type", lambda a: a + "x", TypeError, r"str"),
  ("item", lambda a: a.item(), ValueError, r"\(2, 3\)"),
  ("bool", lambda a: bool(a), RuntimeError, r"6 elements"),
  ("clip_nothing", lambda a: a.clip(), ValueError, r"min or max"),
  ("max_empty", lambda a: Tensor(np.zeros((0, 2), np.float32)).max(0), RuntimeError, r"\(0, 2\)"),
  ("backward_non_scalar", lambda a: (a * 2).backward(), RuntimeError, r"\(2, 3\)"),
  ("backward_bad_gradient", lambda a: (a * 2).backward(Tensor(B4)), ValueError, r"\(4,\).*\(2, 3\)"),
  ("backward_no_grad", lambda a: (a.detach() * 2).sum().backward(), RuntimeError, r"does not require grad"),
  ("int_requires_grad", lambda a: Tensor([1, 2], requires_grad=True), RuntimeError, r"float.*int64|long"),
  ("int_requires_grad_", lambda a: a.int().requires_grad_(), RuntimeError, r"float.*int"),
  ("unknown_device", lambda a: a.to("NOPE"), ValueError, r"NOPE"),
]

@pytest.mark.parametrize("what,fn,exc,msg", CASES, ids=[c[0] for c in CASES])
def test_bad_input(a, what, fn, exc, msg):
  with pytest.raises(exc) as e:
    fn(a)
  assert re.search(msg, str(e.value)), f"{what}: message {str(e.value)!r} does not name {msg!r}"

def test_bad_construction():
  with pytest.raises(TypeError, match="ragged"): Tensor([[1, 2], [3]])
  with pytest.raises(TypeError, match="str"): Tensor("x")
  with pytest.raises(TypeError, match="object|NumPy"): Tensor(np.array([object()]))
  with pytest.raises(ValueError, match="float8"): Tensor.zeros(2, dtype="float8")
  with pytest.raises(TypeError, match="bool"): -Tensor([True])
  with pytest.raises(TypeError, match="bool"): Tensor([True]) - Tensor([False])

def test_unsupported_dtype_on_device(monkeypatch):
  # the CPU takes every dtype; a device that lacks one must refuse it by name, before any copy
  dev = Device["CPU"]
  orig = dev.supports_dtype
  monkeypatch.setattr(type(dev), "supports_dtype", lambda self, d: d != dtypes.float16 and orig(d))
  with pytest.raises(TypeError, match=r"float16|half.*CPU|CPU.*half"):
    Tensor(np.ones(3, np.float16))
  monkeypatch.undo()
  np.testing.assert_array_equal(Tensor(np.ones(3, np.float16)).numpy(), np.ones(3, np.float16))

def test_errors_leave_graph_intact():
  # a failed op in the middle of building a graph does not poison the tensors it touched
  x = Tensor(A, requires_grad=True)
  y = (x * 3).exp()
  for bad in (lambda: y @ y, lambda: y.reshape(5), lambda: y + Tensor(B4), lambda: y.sum(4), lambda: y[9]):
    with pytest.raises((ValueError, IndexError)): bad()
  s = y.sum()
  s.backward()
  np.testing.assert_allclose(s.numpy(), np.exp(A * 3).sum(), rtol=1e-5)
  np.testing.assert_allclose(x.grad.numpy(), 3 * np.exp(A * 3), rtol=1e-5)
  with pytest.raises(RuntimeError): y.backward()
  np.testing.assert_allclose(y.numpy(), np.exp(A * 3), rtol=1e-5)
