"""Values from outside (issue 31, item 5): NumPy arrays of any byte order and strides are read right; Python numbers are
checked against the dtype, raising where torch.tensor raises (the error names the value and the dtype) and converting
as torch does (and as .cast() does) where it converts; negative and overflowing sizes are refused where given.
Every expectation is PyTorch's answer for the same input (torch 2.13, run here side by side)."""
import numpy as np
import pytest
import torch
from baregrad import Tensor, dtypes
from baregrad.tensor.hostdata import np_dtype

BYTE_ORDERS = [">i2", ">i4", ">i8", ">u2", ">u4", ">f2", ">f4", ">f8", "<i4", "=f4", "|u1", "|i1"]

@pytest.mark.parametrize("dt", BYTE_ORDERS)
def test_any_byte_order(dt):
  # before: a big-endian array's bytes were copied as they are, and read as little-endian numbers
  a = np.arange(-3, 5).astype(dt) if dt[1] != "u" else np.arange(8).astype(dt)
  out = Tensor(a).numpy()
  assert out.dtype == a.dtype.newbyteorder("=")
  np.testing.assert_array_equal(out, a)
  np.testing.assert_array_equal(Tensor.from_numpy(a).numpy(), a)

@pytest.mark.parametrize("view", ["reversed", "step", "transposed", "zero_stride", "reversed_2d", "big_endian_view"])
def test_any_strides(view):
  base = np.arange(24, dtype=np.float32).reshape(4, 6)
  a = {"reversed": base[::-1], "step": base[:, ::3], "transposed": base.T, "zero_stride": np.broadcast_to(base[0], (3, 6)),
       "reversed_2d": base[::-2, ::-1], "big_endian_view": base.astype(">f4")[::-1, 1::2]}[view]
  np.testing.assert_array_equal(Tensor(a).numpy(), a)
  native = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("="))
  np.testing.assert_array_equal(Tensor(a, dtype=dtypes.int32).numpy(), torch.tensor(native).to(torch.int32).numpy())

def _torch_dtype(d): return getattr(torch, {"bool": "bool"}.get(d, d))

# (python data, dtype name or None): each is compared with torch.tensor(data, dtype=...)
CASES = [
  (2**70, None), ([2**70], None), ([300], "uint8"), (300, "uint8"), ([-1], "uint8"), ([-255], "uint8"), ([-256], "uint8"),
  ([-1.0], "uint8"), ([255.9], "uint8"), ([2**63], "uint64"), ([2**64], "uint64"), ([1e10], "int32"), ([1.7, -1.7, 2.5], "int32"),
  ([float("nan")], "int32"), ([float("inf")], "int64"), ([1e40], "float32"), ([2**70], "float32"), ([1e300], "float16"),
  ([True, 2], None), ([1, 2.5], None), ([300, 1.5], "uint8"), ([2**31], "int32"), ([2**31 - 1], "int32"), (2**63, None),
  (-2**63, None), ([-2**63, 2**63], None), ([1e20], "int64"), ([-129], "int8"), ([-128, 127], "int8"), ([1.5, 0.0], "bool"),
  (1.5, "int32"), (2**70, "float32"), (True, "int32"), (7, "bool"), ([], None), ([[]], None), ([[1, 2], [3, 4]], "int16"),
  ((1, 2, 3), "float64"), ([True, False], None),
]

@pytest.mark.parametrize("data,dt", CASES, ids=[f"{i}" for i in range(len(CASES))])
def test_python_values_follow_torch(data, dt):
  kw = {} if dt is None else {"dtype": _torch_dtype(dt)}
  try: want = torch.tensor(data, **kw)
  except (RuntimeError, ValueError, OverflowError, TypeError):
    with pytest.raises(OverflowError) as e: Tensor(data, **({} if dt is None else {"dtype": dt}))
    assert str(data if not isinstance(data, list) else data[-1] if len(data) == 1 else "")[:6] in str(e.value) or "value" in str(e.value)
    return
  got = Tensor(data, **({} if dt is None else {"dtype": dt}))
  assert got.shape == tuple(want.shape)
  assert str(want.dtype).removeprefix("torch.") == np_dtype(got.dtype).name or (want.dtype == torch.bool and got.dtype == dtypes.bool)
  np.testing.assert_array_equal(got.numpy(), want.numpy())

def test_error_names_value_and_dtype():
  with pytest.raises(OverflowError, match=r"300.*uint8"): Tensor([300], dtype="uint8")
  with pytest.raises(OverflowError, match=r"1180591620717411303424"): Tensor(2**70)
  with pytest.raises(OverflowError, match=r"1180591620717411303424.*\[1\]"): Tensor([1, 2**70])

def test_unclear_elements_get_clear_messages():
  # before: both said "ragged nested sequences"
  with pytest.raises(TypeError, match=r"NoneType None at \[0\]"): Tensor([None, 1.0])
  with pytest.raises(TypeError, match=r"str 'a' at \[1\]\[0\]"): Tensor([[1], ["a"]])
  with pytest.raises(ValueError, match="ragged"): Tensor([[1], [1, 2]])

def test_float_lists_to_int_agree_with_cast():
  vals = [1.7, -1.7, 2.5, -2.5, 0.9, 100.99, -100.99]
  for dt in ("int8", "int32", "int64", "uint8"):
    ok = [v for v in vals if dt != "uint8" or v >= 0]
    np.testing.assert_array_equal(Tensor(ok, dtype=dt).numpy(), Tensor(ok).cast(dt).numpy())

def test_array_with_dtype_converts_as_cast():
  a = np.array([1e10, -1e10, np.nan, 2.7, -2.7, 300.0], np.float64)
  for dt in ("int32", "uint8", "int64", "int8"):
    np.testing.assert_array_equal(Tensor(a, dtype=dt).numpy(), Tensor(a).cast(dt).numpy())

def test_int_operand_past_int64():
  with pytest.raises(OverflowError, match="1180591620717411303424"): Tensor([1, 2]) + 2**70
  with pytest.raises(OverflowError): Tensor([1.0, 2.0]) * 2**64
  # in range it wraps to the tensor's dtype, as torch does
  np.testing.assert_array_equal((Tensor([1, 2], dtype="uint8") + 300).numpy(), (torch.tensor([1, 2], dtype=torch.uint8) + 300).numpy())
  np.testing.assert_array_equal((Tensor([1, 2], dtype="int32") + 2**40).numpy(), (torch.tensor([1, 2], dtype=torch.int32) + 2**40).numpy())

@pytest.mark.parametrize("make", [
  lambda: Tensor([1, 2]).expand(-2, 2), lambda: Tensor([1, 2]).expand(-1, 2), lambda: Tensor([[1, 2]]).expand(-3, -1),
  lambda: Tensor([1, 2]).reshape(-2), lambda: Tensor.zeros(-1), lambda: Tensor.empty(2, -3), lambda: Tensor.full((-1,), 2),
  lambda: Tensor.rand(-2), lambda: Tensor.randn(3, -1), lambda: Tensor.ones(-3),
  lambda: Tensor.empty(2**40, 2**40), lambda: Tensor.zeros(2**31, 2**31, 2), lambda: Tensor([1]).expand(2**40, 2**40)])
def test_bad_sizes_refused(make):
  # before: expand(-2, 2) made a tensor of shape (-2, 2) that failed only later
  with pytest.raises(RuntimeError, match=r"-\d|overflow"): make()

def test_good_sizes_still_work():
  assert Tensor([[1, 2]]).expand(3, -1).shape == (3, 2)
  assert Tensor.zeros(0, 3).shape == (0, 3)
  assert Tensor([1, 2, 3, 4]).reshape(2, -1).shape == (2, 2)
