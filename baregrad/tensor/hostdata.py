"""Values from outside (Python numbers, nested lists, NumPy arrays) checked and converted to a dtype for Tensor(...).

The rules follow PyTorch 2.x's torch.tensor (checked against torch 2.13, see tests/frontend/test_external_inputs.py):
- a dtype is inferred from Python values as torch does (any float -> the default float, else any int -> int64, else
  bool), not as NumPy does (NumPy turns [-2**63, 2**63] into float64 and [2**63] into uint64);
- a Python int must fit int64 (uint64 where that is the dtype asked for): OverflowError naming it;
- a Python value out of the range of an integer dtype asked for is an OverflowError naming the value and the dtype
  (torch raises "value cannot be converted to type uint8 without overflow"), with torch's one exception: a negative int
  down to -max of an unsigned dtype narrower than 64 bits wraps (torch.tensor([-1], dtype=torch.uint8) is 255);
- in range, a float becomes an int as .cast() makes it (truncated toward zero), and anything becomes a bool as != 0;
  floats too large for a float dtype become inf, as torch makes them;
- a NumPy array with a dtype asked for is converted as .cast() would convert it (ALU semantics: float -> int saturates,
  NaN -> 0; int -> int wraps), of any byte order and any strides;
- anything else in a list (None, strings, objects) is a TypeError naming the element and where it is."""
from __future__ import annotations
from typing import Any
import numpy as np
from baregrad.ir.dtype import DType, dtypes, torch_name

_I64 = (-(1 << 63), (1 << 63) - 1)

def int_range(d: DType) -> tuple[int, int]:
  """The smallest and largest value of integer dtype d."""
  bits = 8 * d.itemsize
  return (0, (1 << bits) - 1) if dtypes.is_unsigned(d) else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)

def _where(path: tuple) -> str: return "".join(f"[{i}]" for i in path) or "the value"

def scan(data: Any, any_int: bool = False) -> str:
  """Check every element of a nested list/tuple (iteratively: nesting can be deep) is a bool, int or float (or a NumPy
  number) and every int fits a 64-bit integer (any_int: any int, for a float dtype); returns the kind PyTorch infers: "f" if any is a float, else "i" if any
  is an int, else "b" if any is a bool, else "" (no elements)."""
  kinds: set[str] = set()
  big: tuple | None = None   # the first int past 64 bits
  stack: list[tuple[Any, tuple]] = [(data, ())]
  while stack:
    v, path = stack.pop()
    if isinstance(v, (list, tuple)):
      stack.extend((x, path + (i,)) for i, x in enumerate(v))
    elif isinstance(v, (bool, np.bool_)): kinds.add("b")
    elif isinstance(v, (int, np.integer)):
      if big is None and not _I64[0] <= int(v) < (1 << 64): big = (v, path)
      kinds.add("i")
    elif isinstance(v, (float, np.floating)): kinds.add("f")
    else: raise TypeError(f"Tensor: cannot make a tensor element from {type(v).__name__} {v!r} at {_where(path)}; expected bool, int or float")
  kind = "f" if "f" in kinds else "i" if "i" in kinds else "b" if kinds else ""
  # (beside a float, or for a float dtype, any int is a float's value, as in torch)
  if big is not None and kind != "f" and not any_int: raise OverflowError(f"Tensor: {big[0]} at {_where(big[1])} does not fit a 64-bit integer")
  return kind

def np_dtype(d: DType) -> Any:
  """The NumPy dtype holding d's values (bfloat16: float32, rounded to bfloat16 by the caller)."""
  return np.dtype(np.float32) if d == dtypes.bfloat16 else np.dtype(torch_name(d) if d != dtypes.bool else "bool")

def check_ints(vals: np.ndarray, d: DType, shown: Any = None) -> None:
  """Raise OverflowError if an int value in vals (an object or int array) is out of the range of dtype d as torch
  checks it (an unsigned dtype below 64 bits also takes negatives down to -max, which wrap)."""
  if dtypes.is_float(d) or d == dtypes.bool or vals.size == 0: return
  lo, hi = int_range(d)
  if dtypes.is_unsigned(d) and d.itemsize < 8: lo = -hi
  mn, mx = int(vals.min()), int(vals.max())
  if mn < lo or mx > hi:
    bad = mn if mn < lo else mx
    rng = f"[0, {hi}]; an int down to {lo} wraps, as in PyTorch" if lo < 0 and dtypes.is_unsigned(d) else f"[{lo}, {hi}]"
    raise OverflowError(f"Tensor: value {shown if shown is not None else bad} cannot be converted to {torch_name(d)} without overflow (its range is {rng})")

def check_floats(vals: np.ndarray, d: DType) -> None:
  """Raise OverflowError if a float value in vals cannot become integer dtype d (NaN, inf, out of range), as torch."""
  if dtypes.is_float(d) or d == dtypes.bool or vals.size == 0: return
  lo, hi = int_range(d)
  vals = np.atleast_1d(vals)
  bad = ~np.isfinite(vals) | (vals < lo) | (vals > hi)   # (hi as a float may round up: checked again below)
  if not bad.any():
    with np.errstate(invalid="ignore"): bad = np.asarray(np.trunc(vals).astype(object) > hi, dtype=bool)
  if bad.any():
    v = vals.reshape(-1)[np.argmax(bad.reshape(-1))]
    raise OverflowError(f"Tensor: value {float(v)!r} cannot be converted to {torch_name(d)} without overflow (its range is [{lo}, {hi}])")

def python_values(data: Any, dtype: DType | None, default_float: DType) -> tuple[np.ndarray, DType]:
  """A nested list/tuple (or a Python number) as a NumPy array of dtype's values (bfloat16: float32 values), and the
  dtype (inferred when None)."""
  kind = scan(data, dtype is not None and dtypes.is_float(dtype))
  try:
    try: arr = np.array(data, dtype={"f": np.float64, "i": np.int64, "b": np.bool_}.get(kind, np.float64))
    except OverflowError: arr = np.array(data, dtype=object)   # (ints past int64: for a uint64 tensor)
  except ValueError as e:   # NumPy >= 1.24 raises on ragged input
    raise ValueError(f"ragged nested sequences cannot make a Tensor: every row needs the same length ({e})") from None
  if arr.dtype == object and any(isinstance(x, (list, tuple)) for x in arr.reshape(-1)):
    raise ValueError("ragged nested sequences cannot make a Tensor: every row needs the same length")
  if dtype is None: dtype = dtypes.int64 if kind == "i" else dtypes.bool if kind == "b" else default_float   # ([]: float, as torch)
  if arr.dtype.kind in "iuO" or arr.dtype == np.bool_:
    if dtypes.is_float(dtype):   # (an int past a float's range: OverflowError from float(), naming nothing better)
      with np.errstate(over="ignore"): return arr.astype(np.float64).astype(np_dtype(dtype)), dtype
    if arr.dtype == object or arr.dtype.kind == "u":
      # ints past int64 (NumPy keeps them as uint64 or Python objects): only a uint64 tensor takes them
      arr = arr.astype(object)
      if dtype != dtypes.uint64 and arr.size and int(arr.max()) > _I64[1]:
        raise OverflowError(f"Tensor: value {int(arr.max())} does not fit int64 (a Python int becomes int64 unless the dtype is uint64)")
    check_ints(arr, dtype)
    if dtypes.is_float(dtype): return arr.astype(np_dtype(dtype)), dtype
    if dtype == dtypes.bool: return arr.astype(bool), dtype
    lo, hi = int_range(dtype)
    if arr.dtype == object or dtypes.is_unsigned(dtype):
      # (negatives that torch lets wrap into an unsigned dtype, done in Python ints: NumPy refuses them in an astype)
      wrapped = np.array([int(x) & hi for x in arr.reshape(-1)], dtype=object).reshape(arr.shape) if dtypes.is_unsigned(dtype) else arr
      return wrapped.astype(np_dtype(dtype)), dtype
    return arr.astype(np_dtype(dtype)), dtype
  # floats
  arr = arr.astype(np.float64)
  if dtypes.is_float(dtype):
    with np.errstate(over="ignore"): return arr.astype(np_dtype(dtype)), dtype   # (too large: inf, as torch)
  if dtype == dtypes.bool: return arr != 0, dtype
  # to an integer dtype: each element by its own type, as torch converts them ([-1, 0.0] to uint8 is [255, 0]; an int
  # past 2**53 beside a float keeps its exact value)
  lo, hi = int_range(dtype)
  out = []
  for v in np.array(data, dtype=object).reshape(-1):
    if isinstance(v, (float, np.floating)):
      check_floats(np.array(v, dtype=np.float64), dtype)
      out.append(int(v))
    else:
      check_ints(np.array([int(v)], dtype=object), dtype)
      out.append(int(v) & hi if dtypes.is_unsigned(dtype) else int(v))
  return np.array(out, dtype=object).reshape(arr.shape).astype(np_dtype(dtype)), dtype

def scalar_value(v: bool | int | float, dtype: DType | None, default_float: DType) -> tuple[Any, DType]:
  """A Python number as the value a constant of dtype holds (inferred when None), by python_values' rules."""
  if isinstance(v, bool): d = dtype or dtypes.bool
  elif isinstance(v, int):
    d = dtype or dtypes.int64
    if dtypes.is_float(d):
      try: return float(v), d
      except OverflowError: raise OverflowError(f"Tensor: value {v} is too large for {torch_name(d)}") from None
    if not _I64[0] <= v < (1 << 64) or (v > _I64[1] and d != dtypes.uint64 and not dtypes.is_float(d) and d != dtypes.bool):
      raise OverflowError(f"Tensor: value {v} does not fit {torch_name(d) if v >= 0 and d != dtypes.uint64 and dtypes.is_int(d) else 'a 64-bit integer'}")
    if dtypes.is_int(d):
      check_ints(np.array([v], dtype=object), d)
      return v & int_range(d)[1] if dtypes.is_unsigned(d) else v, d
    if dtypes.is_float(d): return float(v), d
    return bool(v), d
  else:
    d = dtype or default_float
    if dtypes.is_int(d):
      check_floats(np.array(v, dtype=np.float64), d)
      return int(v), d   # (in range: truncated toward zero, as .cast())
    if d == dtypes.bool: return v != 0, d
  return v, d

def check_operand(y: int, d: DType) -> None:
  """A Python int operand of an op (x + y): it must fit int64 (uint64 for a uint64 tensor), as in PyTorch
  (torch.tensor([1, 2]) + 2**70 raises OverflowError); inside that range it wraps to the op's dtype as torch does."""
  if not _I64[0] <= y <= _I64[1] and not (d == dtypes.uint64 and 0 <= y < (1 << 64)):
    raise OverflowError(f"the Python int {y} does not fit a 64-bit integer: it cannot be an operand of a {torch_name(d)} tensor")

def array_values(arr: np.ndarray, dtype: DType) -> np.ndarray:
  """A NumPy array (any byte order, any strides) as the values of dtype (bfloat16: float32 values), converted as
  .cast() converts: float -> int saturates with NaN -> 0 and truncates toward zero, int -> int wraps, -> bool is != 0."""
  src = arr
  if not arr.dtype.isnative: arr = arr.astype(arr.dtype.newbyteorder("="))
  if dtype == dtypes.bool: return arr != 0
  if dtypes.is_float(dtype):
    with np.errstate(over="ignore", invalid="ignore"): return arr.astype(np_dtype(dtype))
  nd = np_dtype(dtype)
  if arr.dtype.kind == "f" or arr.dtype.kind == "c":
    if arr.dtype.kind == "c": raise TypeError(f"Tensor: cannot convert a complex array ({src.dtype}) to {torch_name(dtype)}")
    lo, hi = int_range(dtype)
    with np.errstate(invalid="ignore"):
      a = np.nan_to_num(np.trunc(arr.astype(np.float64)), nan=0.0, posinf=float(hi), neginf=float(lo))
      out = np.clip(a, lo, hi).astype(object) if dtype.itemsize == 8 else np.clip(a, lo, hi)
    if dtype.itemsize == 8:   # (float64 cannot hold 2**63 - 1: saturate in Python ints)
      return np.array([min(max(int(x), lo), hi) for x in out.reshape(-1)], dtype=nd).reshape(arr.shape)
    return out.astype(nd)
  if arr.dtype == np.bool_ or arr.dtype.kind in "iu": return arr.astype(nd)   # (two's complement wrap)
  raise TypeError(f"Tensor: cannot make a {torch_name(dtype)} tensor from a NumPy array of dtype {src.dtype}")

def native(arr: np.ndarray) -> np.ndarray:
  """arr in the machine's byte order (a big-endian '>i4' array's bytes read as little-endian would be other numbers)."""
  return arr if arr.dtype.isnative else arr.astype(arr.dtype.newbyteorder("="))
