"""The jit's arguments are keyed by what they are (issue 31, item 4): a NumPy array by its shape and dtype, its contents
copied in on every call (never by its id(), which Python reuses for the next array); a float by its bits; an argument
with no key (unhashable) runs the function eagerly. A replay never gives the values or shape of an earlier call."""
import numpy as np
from baregrad import Tensor, jit
from baregrad.helpers import getenv

JIT_ON = getenv("JIT", 1) != 0

def test_arrays_are_inputs_not_ids():
  # before: the capture read the buffer made from the second call's array, and every replay returned its values
  @jit
  def f(a): return (Tensor(a) * 2).sum(0)
  for i in range(6):
    a = np.full((3, 2), i, np.float32)   # (dropped each iteration: the next array often gets the same id)
    np.testing.assert_array_equal(f(a).numpy(), [6 * i, 6 * i])
  if JIT_ON:
    cap = next(iter(f.captured.values()))
    assert cap.array_slots and f.calls   # replayed, with the array bound as an input

def test_array_shapes_and_dtypes_recapture():
  @jit
  def f(a): return Tensor.from_numpy(a) + 1
  for n in (2, 3, 2, 3, 4, 2):
    for dt in (np.float32, np.int32, ">i4"):
      a = np.arange(n, dtype=dt)
      out = f(a).numpy()
      assert out.shape == (n,)
      np.testing.assert_array_equal(out, np.arange(n) + 1)

def test_array_in_a_container_and_with_a_dtype():
  @jit
  def f(d): return Tensor(d["x"], dtype="float16").cast("float32") * Tensor(d["y"])
  for i in range(5):
    x, y = np.full(4, i, np.float64), np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(f({"x": x, "y": y}).numpy(), i * np.arange(4))

def test_host_data_derived_from_an_array_runs_eagerly():
  # np.sin(a) makes host data the recording cannot refill from the next array: never replayed stale
  @jit
  def f(a): return Tensor(np.sin(a)) + Tensor(a)
  for i in range(5):
    a = np.full(3, float(i), np.float32)
    np.testing.assert_allclose(f(a).numpy(), np.sin(a) + a, rtol=1e-6)

def test_float_sign_of_zero_is_part_of_the_key():
  # before: 0.0 == -0.0, so the -0.0 call replayed the 0.0 capture (1/x gave +inf instead of -inf)
  @jit
  def f(x, s): return x * s
  x = Tensor([1.0, 2.0])
  for s in (0.0, 0.0, 0.0, -0.0, -0.0, -0.0):
    assert np.all(np.signbit(f(x, s).numpy()) == np.signbit(s))

class _Scale:
  __hash__ = None   # unhashable: no key but its identity, which Python reuses
  def __init__(self, v: float) -> None: self.v = v

def test_unhashable_argument_runs_eagerly():
  # before: keyed by id(); a new object at a dead one's address replayed the old object's value
  @jit
  def f(x, sc): return x * sc.v
  x = Tensor([1.0, 2.0])
  for i in range(6): np.testing.assert_array_equal(f(x, _Scale(float(i))).numpy(), [i, 2 * i])
  assert not f.captured
