"""Fuzzing the tensor constructor (issue 31, item 8): nested lists of mixed Python values, with and without a dtype,
and NumPy arrays of random dtypes, byte orders and strides. Never a crash and never an exception other than the
library's input errors; where it succeeds, the values are those PyTorch (for Python values) or NumPy (for arrays)
gives.

The library's input errors: ValueError (a malformed value: ragged rows), TypeError (an element or dtype of the wrong
kind), OverflowError (a number out of the dtype's range), each with a message. Anything else (IndexError, KeyError,
AttributeError, a NumPy error, RuntimeError from deep inside) is a bug this test finds."""
import math
import numpy as np
import torch
from hypothesis import given, settings, strategies as st, HealthCheck
from baregrad import Tensor, dtypes, knobs
from baregrad.tensor.hostdata import np_dtype

LIBRARY_ERRORS = (ValueError, TypeError, OverflowError)
DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64", "bool"]
# BAREGRAD_FUZZ=N: N fresh random examples per test (CI's fuzz stage); otherwise the quick fixed set of the suite
N = knobs.read("BAREGRAD_FUZZ")
FUZZ = settings(max_examples=N or 60, deadline=None, derandomize=not N, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

scalars = st.one_of(
  st.booleans(),
  st.integers(min_value=-300, max_value=300),
  st.integers(min_value=-(2**65), max_value=2**65),
  st.floats(allow_nan=True, allow_infinity=True, width=64),
  st.floats(min_value=-1e4, max_value=1e4),
)
odd = st.one_of(st.none(), st.text(max_size=2), st.just(object()), st.just(1 + 2j))   # (no complex dtypes: a TypeError)

@st.composite
def nested(draw):
  """A nested list of a random shape (rank 0-3), mostly numbers, sometimes an odd element, sometimes ragged."""
  shape = draw(st.lists(st.integers(0, 3), max_size=3))
  elem = st.one_of(scalars, odd) if draw(st.integers(0, 9)) == 0 else scalars
  def build(dims):
    if not dims: return draw(elem)
    return [build(dims[1:]) for _ in range(dims[0])]
  data = build(shape)
  if shape and shape[0] > 1 and len(shape) > 1 and draw(st.integers(0, 9)) == 0: data[0] = data[0][:-1] or [data[0]]   # ragged
  return data

def _check_error(e: BaseException) -> None:
  assert isinstance(e, LIBRARY_ERRORS), f"not a library error: {type(e).__name__}: {e}"
  assert str(e), f"{type(e).__name__} without a message"

def _values(t: Tensor) -> np.ndarray: return t.numpy()

def _fills_gap(data, dt) -> None:
  try: Tensor(data, dtype=dt).numpy()
  except Exception as e: _check_error(e)

def _has(data, kind) -> bool:
  if isinstance(data, kind): return True
  return isinstance(data, (list, tuple)) and any(_has(d, kind) for d in data)

@FUZZ
@given(data=nested(), dt=st.one_of(st.none(), st.sampled_from(DTYPES)))
def test_python_values(data, dt):
  kw = {} if dt is None else {"dtype": getattr(torch, dt)}
  try: want = torch.tensor(data, **kw)
  except Exception as e:
    # torch refuses it: baregrad must refuse too, with one of its errors; except where torch has a gap baregrad fills
    # (a float into uint64: "an integer is required"; .cast()'s rules apply): then baregrad may convert
    if dt == "uint64" and "integer is required" in str(e): return _fills_gap(data, dt)
    want = None
  try: got = Tensor(data, dtype=dt)
  except Exception as e:
    _check_error(e)
    # (complex numbers: no such dtype here, and no conversion from one: torch makes bool(1+2j) True, baregrad refuses;
    # a string is no element here, where torch takes '' as an empty row: [[['']], [False]] is its (2, 1, 1, 0))
    if want is not None and (want.is_complex() or _has(data, (complex, str))) and isinstance(e, TypeError): return
    if want is not None and want.numel() == 0 and isinstance(e, ValueError): return   # (torch takes [[[]], []] as (2, 1, 0))
    assert want is None, f"torch makes {want!r} of {data!r} (dtype {dt}), baregrad raised {type(e).__name__}: {e}"
    return
  assert want is not None, f"torch refuses {data!r} (dtype {dt}), baregrad made a tensor"
  assert got.shape == tuple(want.shape)
  assert np_dtype(got.dtype) == np.dtype(str(want.dtype).removeprefix("torch.")), (got.dtype, want.dtype)
  np.testing.assert_array_equal(_values(got), want.numpy())

@st.composite
def arrays(draw):
  """A NumPy array of a random dtype and byte order, seen through random strides (steps, reversal, transpose,
  broadcast)."""
  dt = np.dtype(draw(st.sampled_from([d for d in DTYPES])))
  if dt.itemsize > 1 and draw(st.booleans()): dt = dt.newbyteorder(">")
  shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
  n = math.prod(shape)
  if dt.kind == "f": vals = draw(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=16 if dt.itemsize == 2 else 32), min_size=n, max_size=n))
  elif dt.kind == "b": vals = draw(st.lists(st.booleans(), min_size=n, max_size=n))
  else:
    info = np.iinfo(dt)
    vals = draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=n, max_size=n))
  a = np.array(vals, dtype=dt).reshape(shape)
  view = draw(st.sampled_from(["none", "reverse", "step", "transpose", "broadcast"]))
  if view == "reverse": a = a[::-1]
  elif view == "step": a = a[..., ::2]
  elif view == "transpose": a = a.T
  elif view == "broadcast": a = np.broadcast_to(a[:1], (3,) + a.shape[1:])
  return a

@FUZZ
@given(a=arrays())
def test_numpy_arrays(a):
  got = Tensor(a)
  assert got.shape == a.shape
  np.testing.assert_array_equal(_values(got), a)
  np.testing.assert_array_equal(Tensor.from_numpy(a).numpy(), a)

@FUZZ
@given(a=arrays(), dt=st.sampled_from(DTYPES))
def test_numpy_arrays_with_dtype(a, dt):
  # converted as .cast() converts; where NumPy's astype is defined (finite, in range) that is NumPy's value too
  d = getattr(dtypes, dt) if dt != "bool" else dtypes.bool
  try: got = _values(Tensor(a, dtype=dt))
  except Exception as e: _check_error(e); return
  np.testing.assert_array_equal(got, _values(Tensor(a).cast(d)))
  with np.errstate(all="ignore"):
    want = a.astype(np.dtype(dt))
    if dt != "bool" and np.dtype(dt).kind in "iu" and a.dtype.kind == "f":
      info = np.iinfo(np.dtype(dt))
      ok = np.isfinite(a) & (a >= info.min) & (a <= info.max) & (np.abs(a) < 2**62)
      np.testing.assert_array_equal(got[ok], want[ok])
    elif not (dt in ("float16", "float32") and a.dtype.kind in "iu" and a.dtype.itemsize == 8):
      np.testing.assert_array_equal(got, want)
