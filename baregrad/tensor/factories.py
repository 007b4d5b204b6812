"""PyTorch's top-level factories (torch.tensor, torch.zeros, torch.randn, torch.randperm, ...) over Tensor's own
constructors, with PyTorch's signatures: sizes as varargs or one sequence (`zeros(2, 3)`, `zeros((2, 3))`, `size=`),
dtype/device/requires_grad keywords. baregrad/__init__.py exposes them as `baregrad.zeros(...)` etc.

Random numbers come from baregrad's own streams (Threefry on the device, seeded by manual_seed): the same seed gives
the same numbers in baregrad, not PyTorch's numbers."""
from __future__ import annotations
from typing import Any, Sequence
from baregrad.ir.dtype import dtypes
from baregrad.hal import Device
from baregrad.tensor.tensor import Tensor, to_dtype

def _size(size: tuple, kw_size: Any, name: str) -> tuple[int, ...]:
  if kw_size is not None:
    if size: raise TypeError(f"{name}(): got the size both positionally {size} and as size={kw_size}")
    size = (kw_size,)
  if len(size) == 1 and isinstance(size[0], (tuple, list)): size = tuple(size[0])
  return tuple(size)

def _dt(dtype: Any) -> Any: return None if dtype is None else to_dtype(dtype)

def tensor(data: Any, dtype: Any = None, device: str | None = None, requires_grad: bool = False) -> Tensor:
  """A new tensor holding a copy of data (nested lists, numbers, a NumPy array or a Tensor), as torch.tensor: Python
  floats become float32 (the default float), ints int64, bools bool."""
  if isinstance(data, Tensor):
    t = data.detach().to(device) if device is not None else data.detach()
    t = (t.cast(to_dtype(dtype)) if dtype is not None else t).contiguous().realize()
    if t.uop is data.uop: t = t.clone()   # always a copy, as torch.tensor
  else: t = Tensor(data, dtype=_dt(dtype), device=device)
  return t.requires_grad_(True) if requires_grad else t

def as_tensor(data: Any, dtype: Any = None, device: str | None = None) -> Tensor:
  """data as a Tensor: a Tensor of that dtype and device is returned as it is, anything else is converted (tensor())."""
  if isinstance(data, Tensor) and (dtype is None or data.dtype == to_dtype(dtype)) and (device is None or data.device == Device.canonicalize(device)):
    return data
  return tensor(data, dtype, device)

def zeros(*size: Any, dtype: Any = None, device: str | None = None, requires_grad: bool = False, out: Any = None) -> Tensor:
  """Zeros of the given size (float32 unless dtype)."""
  return Tensor.zeros(*_size(size, None, "zeros"), dtype=_dt(dtype), device=device, requires_grad=requires_grad or None)
def ones(*size: Any, dtype: Any = None, device: str | None = None, requires_grad: bool = False) -> Tensor:
  """Ones of the given size (float32 unless dtype)."""
  return Tensor.ones(*_size(size, None, "ones"), dtype=_dt(dtype), device=device, requires_grad=requires_grad or None)
def empty(*size: Any, dtype: Any = None, device: str | None = None, requires_grad: bool = False) -> Tensor:
  """A tensor of the given size; filled with zeros (baregrad leaves nothing uninitialized)."""
  return Tensor.empty(*_size(size, None, "empty"), dtype=_dt(dtype), device=device, requires_grad=requires_grad or None)
def full(size: Sequence[int] | int, fill_value: Any, dtype: Any = None, device: str | None = None, requires_grad: bool = False) -> Tensor:
  """size filled with fill_value (dtype from the value: bool, int64 or float32, unless given), in its own buffer."""
  t = Tensor.full(size, fill_value, dtype=_dt(dtype), device=device).contiguous().realize()
  return t.requires_grad_(True) if requires_grad else t

def _like(t: Tensor, dtype: Any, device: str | None) -> tuple[Any, str]:
  if not isinstance(t, Tensor): raise TypeError(f"expected a Tensor, got {type(t).__name__}")
  return (_dt(dtype) or t.dtype), (device or t.device)
def zeros_like(input: Tensor, dtype: Any = None, device: str | None = None, requires_grad: bool = False) -> Tensor:
  """Zeros of input's shape (and dtype and device unless given)."""
  d, dev = _like(input, dtype, device)
  return Tensor.zeros(*input.shape, dtype=d, device=dev, requires_grad=requires_grad or None)
def ones_like(input: Tensor, dtype: Any = None, device: str | None = None, requires_grad: bool = False) -> Tensor:
  """Ones of input's shape (and dtype and device unless given)."""
  d, dev = _like(input, dtype, device)
  return Tensor.ones(*input.shape, dtype=d, device=dev, requires_grad=requires_grad or None)
def empty_like(input: Tensor, dtype: Any = None, device: str | None = None, requires_grad: bool = False) -> Tensor:
  """zeros_like (nothing is left uninitialized)."""
  return zeros_like(input, dtype, device, requires_grad)
def full_like(input: Tensor, fill_value: Any, dtype: Any = None, device: str | None = None, requires_grad: bool = False) -> Tensor:
  """fill_value in input's shape (and dtype and device unless given)."""
  d, dev = _like(input, dtype, device)
  return full(input.shape, fill_value, dtype=d, device=dev, requires_grad=requires_grad)
def rand_like(input: Tensor, dtype: Any = None, device: str | None = None, requires_grad: bool = False) -> Tensor:
  """Uniform [0, 1) values in input's shape."""
  d, dev = _like(input, dtype, device)
  return Tensor.rand(*input.shape, dtype=d, device=dev, requires_grad=requires_grad or None)
def randn_like(input: Tensor, dtype: Any = None, device: str | None = None, requires_grad: bool = False) -> Tensor:
  """Standard normal values in input's shape."""
  d, dev = _like(input, dtype, device)
  return Tensor.randn(*input.shape, dtype=d, device=dev, requires_grad=requires_grad or None)

def arange(start: Any, end: Any = None, step: Any = 1, dtype: Any = None, device: str | None = None, requires_grad: bool = False) -> Tensor:
  """start, start+step, ... below end (int64 unless a float argument or dtype)."""
  return Tensor.arange(start, end, step, dtype=_dt(dtype), device=device, requires_grad=requires_grad or None)
def linspace(start: float, end: float, steps: int, dtype: Any = None, device: str | None = None, requires_grad: bool = False) -> Tensor:
  """steps values evenly spaced from start to end inclusive."""
  t = Tensor.linspace(start, end, steps, dtype=_dt(dtype), device=device)
  return t.contiguous().realize().requires_grad_(True) if requires_grad else t
def eye(n: int, m: int | None = None, dtype: Any = None, device: str | None = None, requires_grad: bool = False) -> Tensor:
  """(n, m) with ones on the diagonal."""
  return Tensor.eye(n, m, dtype=_dt(dtype), device=device, requires_grad=requires_grad or None)

def rand(*size: Any, dtype: Any = None, device: str | None = None, requires_grad: bool = False, generator: Any = None) -> Tensor:
  """Uniform [0, 1) values of the given size, drawn on the device."""
  _no_generator(generator, "rand")
  return Tensor.rand(*_size(size, None, "rand"), dtype=_dt(dtype), device=device, requires_grad=requires_grad or None)
def randn(*size: Any, dtype: Any = None, device: str | None = None, requires_grad: bool = False, generator: Any = None) -> Tensor:
  """Standard normal values of the given size, drawn on the device."""
  _no_generator(generator, "randn")
  return Tensor.randn(*_size(size, None, "randn"), dtype=_dt(dtype), device=device, requires_grad=requires_grad or None)
def randint(low: int, high: int | None = None, size: Sequence[int] | None = None, dtype: Any = None, device: str | None = None,
            generator: Any = None) -> Tensor:
  """Integers uniform in [low, high) of shape size (torch.randint(high, size) or (low, high, size)); int64 unless dtype."""
  _no_generator(generator, "randint")
  if size is None and isinstance(high, (tuple, list)): low, high, size = 0, low, high   # randint(high, size)
  if size is None: raise TypeError("randint(): missing the size argument (a tuple)")
  if high is None: low, high = 0, low
  if high <= low: raise RuntimeError(f"randint(): random_ expects 'from' < 'to', got from={low} >= to={high}")
  return Tensor.randint(low, high, size=tuple(size), dtype=_dt(dtype) or dtypes.int64, device=device)

def randperm(n: int, dtype: Any = None, device: str | None = None, requires_grad: bool = False, generator: Any = None) -> Tensor:
  """A random permutation of 0..n-1 (int64 unless dtype), computed on the device: n random 32-bit keys drawn from
  baregrad's stream, then the indices that sort them (the stable bitonic argsort of tensor/ops/sorting.py). Ties among
  the keys (about n^2/2^33 of them) keep index order, a bias far below what a training shuffle can see."""
  _no_generator(generator, "randperm")
  if isinstance(n, bool) or not isinstance(n, int): raise TypeError(f"randperm(): n must be an int, got {type(n).__name__}")
  if n < 0: raise RuntimeError(f"randperm(): n must be non-negative, got {n}")
  d = _dt(dtype) or dtypes.int64
  if n <= 1: return Tensor.zeros(n, dtype=d, device=device)
  keys = Tensor._random(n, device, lambda bits: bits.cast(dtypes.int64).contiguous(), ("randperm_keys",))
  return keys.argsort().cast(d).contiguous().realize()

def _no_generator(generator: Any, name: str) -> None:
  if generator is not None:
    raise NotImplementedError(f"{name}(): generator= is not supported: baregrad has one random stream per device, seeded by baregrad.manual_seed")

def manual_seed(seed: int) -> None:
  """Seed baregrad's random streams on every device (Tensor.manual_seed); returns None (PyTorch returns a Generator)."""
  if isinstance(seed, bool) or not isinstance(seed, int): raise TypeError(f"manual_seed(): seed must be an int, got {type(seed).__name__}")
  Tensor.manual_seed(seed)

def initial_seed() -> int:
  """The seed the last manual_seed set (0 by default)."""
  return Tensor._seed

def where(condition: Tensor, input: Any = None, other: Any = None) -> Any:
  """torch.where: input where condition, other elsewhere; with the condition alone, the indices of its non-zero
  elements as a tuple of int64 tensors, one per axis (torch.nonzero(condition, as_tuple=True); the count is read
  back from the device)."""
  if input is None and other is None:
    if not isinstance(condition, Tensor): raise TypeError(f"where: condition must be a Tensor, got {type(condition).__name__}")
    return condition.nonzero(as_tuple=True)
  if input is None or other is None: raise TypeError("where() takes the condition alone, or the condition, input and other")
  from baregrad.tensor.functional import where as _where
  return _where(condition, input, other)

__all__ = ["tensor", "as_tensor", "zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like",
           "randn_like", "arange", "linspace", "eye", "rand", "randn", "randint", "randperm", "manual_seed", "initial_seed", "where"]
