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

# (what, fn of a, exception type, regex the message must match): PyTorch's types (shape mismatches RuntimeError,
# indices IndexError, wrong Python types TypeError)
CASES = [
  ("broadcast", lambda a: a + Tensor(B4), RuntimeError, r"\(2, 3\).*\(4,\)"),
  ("broadcast_where", lambda a: Tensor([True, False]).where(a, 0.0), RuntimeError, r"\(2,\).*\(2, 3\)"),
  ("broadcast_inplace_setitem", lambda a: a.__setitem__(0, Tensor(B4)), RuntimeError, r"\(4,\).*\(3,\)"),
  ("matmul_inner", lambda a: a @ a, RuntimeError, r"\(2, 3\).*\(2, 3\).*3 vs 2"),
  ("matmul_vec", lambda a: a @ Tensor(B4), RuntimeError, r"\(2, 3\).*\(4,\)"),
  ("matmul_0d", lambda a: a @ Tensor(2.0), RuntimeError, r"0-d.*\(2, 3\).*\(\)"),
  ("linear", lambda a: a.linear(Tensor(np.ones((4, 4), np.float32))), RuntimeError, r"\(2, 3\).*\(4, 4\)"),
  ("sum_axis", lambda a: a.sum(2), IndexError, r"dimension 2.*2 dimensions"),
  ("sum_axis_neg", lambda a: a.mean(axis=-3), IndexError, r"dimension -3.*2 dimensions"),
  ("dup_axis", lambda a: a.sum((1, -1)), RuntimeError, r"\(1, -1\).*\(2, 3\)"),
  ("softmax_axis", lambda a: a.softmax(3), IndexError, r"dimension 3"),
  ("argmax_axis", lambda a: a.argmax(5), IndexError, r"dimension 5"),
  ("cumsum_axis", lambda a: a.cumsum(2), IndexError, r"dimension 2"),
  ("transpose_axis", lambda a: a.transpose(0, 2), IndexError, r"dimension 2"),
  ("squeeze_axis", lambda a: a.squeeze(3), IndexError, r"dimension 3"),
  ("unsqueeze_axis", lambda a: a.unsqueeze(4), IndexError, r"dimension 4.*3 dimensions"),
  ("flip_axis", lambda a: a.flip(2), IndexError, r"dimension 2"),
  ("permute", lambda a: a.permute(0, 0), RuntimeError, r"\(0, 0\).*\(2, 3\)"),
  ("reshape", lambda a: a.reshape(4, 2), RuntimeError, r"\(2, 3\).*6.*\(4, 2\).*8"),
  ("reshape_-1", lambda a: a.reshape(-1, 4), RuntimeError, r"\(2, 3\).*\(-1, 4\)"),
  ("reshape_two_-1", lambda a: a.reshape(-1, -1), RuntimeError, r"-1"),
  ("view", lambda a: a.view(7), RuntimeError, r"\(2, 3\).*\(7,\)"),
  ("expand", lambda a: a.expand(4, 3), RuntimeError, r"\(2, 3\).*\(4, 3\)"),
  ("expand_rank", lambda a: a.expand(3), RuntimeError, r"\(3,\).*\(2, 3\)"),
  ("pad_len", lambda a: a.pad((1, 1, 1, 1, 1, 1)), RuntimeError, r"\(1, 1, 1, 1, 1, 1\)"),
  ("pad_odd", lambda a: a.pad((1,)), RuntimeError, r"\(1,\)"),
  ("pad_mode", lambda a: a.pad((1, 1), mode="wrap"), NotImplementedError, r"wrap"),
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
  ("item", lambda a: a.item(), RuntimeError, r"\(2, 3\)"),
  ("bool", lambda a: bool(a), RuntimeError, r"6 elements"),
  ("clip_nothing", lambda a: a.clip(), RuntimeError, r"min or max"),
  ("max_empty", lambda a: Tensor(np.zeros((0, 2), np.float32)).max(0), IndexError, r"\(0, 2\)"),
  ("amax_empty", lambda a: Tensor(np.zeros((0, 2), np.float32)).amax(0), IndexError, r"\(0, 2\)"),
  ("max_empty_all", lambda a: Tensor(np.zeros((0, 2), np.float32)).max(), RuntimeError, r"\(0, 2\)"),
  ("backward_non_scalar", lambda a: (a * 2).backward(), RuntimeError, r"\(2, 3\)"),
  ("backward_bad_gradient", lambda a: (a * 2).backward(Tensor(B4)), RuntimeError, r"\(4,\).*\(2, 3\)"),
  ("backward_no_grad", lambda a: (a.detach() * 2).sum().backward(), RuntimeError, r"does not require grad"),
  ("int_requires_grad", lambda a: Tensor([1, 2], requires_grad=True), RuntimeError, r"float.*int64|long"),
  ("int_requires_grad_", lambda a: a.int().requires_grad_(), RuntimeError, r"float.*int"),
  ("unknown_device", lambda a: a.to("NOPE"), ValueError, r"NOPE"),
  # invalid input refused, as PyTorch refuses it
  ("reshape_negative", lambda a: a.reshape(-2, -3), RuntimeError, r"-3"),
  ("flip_repeated", lambda a: a.flip(0, -2), RuntimeError, r"multiple times"),
  ("flip_axis_neg", lambda a: a.flip(-3), IndexError, r"dimension -3"),
  ("permute_count", lambda a: a.permute(0), RuntimeError, r"\(0,\).*2 axes"),
  ("permute_axis", lambda a: a.permute(0, 2), IndexError, r"dimension 2"),
  ("transpose_axis_neg", lambda a: a.transpose(-3, 0), IndexError, r"dimension -3"),
  ("pad_crop_too_much", lambda a: a.pad((-2, -2)), RuntimeError, r"\(-2, -2\).*\(2, 3\)"),
  ("pad_float", lambda a: a.pad((1.5, 1)), TypeError, r"ints"),
  ("div_rounding_mode", lambda a: a.div(2, rounding_mode="round"), RuntimeError, r"'round'"),
  ("int_pow_negative", lambda a: a.int() ** -1, RuntimeError, r"negative integer powers"),
  ("int_pow_negative_2", lambda a: Tensor([2, 3]) ** -2, RuntimeError, r"negative integer powers"),
  ("other_device", lambda a: a + Tensor(A, device="CPU:C"), RuntimeError, r"same device.*CPU:C"),
]

NEGATIVE_SIZES = [
  ("zeros", lambda: Tensor.zeros(2, -1)), ("ones", lambda: Tensor.ones(-3)), ("empty", lambda: Tensor.empty(-1)),
  ("full", lambda: Tensor.full((-1, 2), 1.0)), ("rand", lambda: Tensor.rand(-2)), ("randn", lambda: Tensor.randn(3, -1)),
  ("eye", lambda: Tensor.eye(-1)), ("linspace", lambda: Tensor.linspace(0, 1, -1)),
]

@pytest.mark.parametrize("what,fn", NEGATIVE_SIZES, ids=[c[0] for c in NEGATIVE_SIZES])
def test_negative_sizes_are_refused(what, fn):
  with pytest.raises(RuntimeError, match="negative|must be greater or equal to 0|non-negative"): fn()

def test_arange_bad_steps():
  with pytest.raises(RuntimeError, match="nonzero"): Tensor.arange(0, 5, 0)
  with pytest.raises(RuntimeError, match="inconsistent"): Tensor.arange(0, 5, -1)
  assert Tensor.linspace(0, 1, 0).shape == (0,) and Tensor.arange(5, 0, -2).tolist() == [5, 3, 1]

@pytest.mark.parametrize("what,fn,exc,msg", CASES, ids=[c[0] for c in CASES])
def test_bad_input(a, what, fn, exc, msg):
  with pytest.raises(exc) as e:
    fn(a)
  assert re.search(msg, str(e.value)), f"{what}: message {str(e.value)!r} does not name {msg!r}"

def test_bad_construction():
  with pytest.raises(ValueError, match="ragged"): Tensor([[1, 2], [3]])  # PyTorch: ValueError
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
    with pytest.raises((RuntimeError, IndexError)): bad()
  s = y.sum()
  s.backward()
  np.testing.assert_allclose(s.numpy(), np.exp(A * 3).sum(), rtol=1e-5)
  np.testing.assert_allclose(x.grad.numpy(), 3 * np.exp(A * 3), rtol=1e-5)
  with pytest.raises(RuntimeError): y.backward()
  np.testing.assert_allclose(y.numpy(), np.exp(A * 3), rtol=1e-5)

def test_schedule_too_large_for_memory_fails_before_running(monkeypatch):
  # the buffers a schedule allocates are checked against what the device has left before any kernel runs: the error
  # names both sizes, and the same graph computes once memory is there
  import numpy as np
  from baregrad import Tensor, Device
  from baregrad.engine import realize
  from baregrad.hal.errors import OutOfMemory
  x = Tensor.rand(512, 512).realize()
  y = ((x @ x).relu() @ x).sum(0)
  alloc = Device[x.device].allocator
  monkeypatch.setattr(realize, "CHECK_BYTES", 0)
  monkeypatch.setattr(type(alloc), "available", lambda self: 1000)
  Device[x.device].synchronize()
  used = alloc.mem_used
  with pytest.raises(OutOfMemory, match=r"need \d+ bytes for their buffers and the device has 1000 bytes available: nothing was run"):
    y.realize()
  assert alloc.mem_used == used   # no buffer of the schedule was allocated (no kernel ran)
  monkeypatch.undo()
  xn = x.numpy()
  np.testing.assert_allclose(y.numpy(), (np.maximum(xn @ xn, 0) @ xn).sum(0), rtol=1e-4)
