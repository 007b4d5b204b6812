"""Tensor: a lazy, PyTorch-like array. Every op builds UOps; realize() schedules them into generated kernels."""
from __future__ import annotations
import contextlib, functools, math, weakref
from typing import Any, Iterable, Sequence
import numpy as np
from baregrad.helpers import prod, getenv, argsort
from baregrad.ir.dtype import DType, dtypes, promote, promote_with_scalar, least_upper, ALL, torch_name
from baregrad.ir.ops import UOp, Ops, GroupOp, make_keyed
from baregrad.hal import Device, Buffer
from baregrad.engine.graph import BufRef, buffer_uop, shape_of, set_shape, device_of, base_of, stale_error, broadcast_const, permute_uop
from baregrad.engine import lazy, checks
from baregrad.tensor import live
from baregrad.tensor.inplace import bind as _bind
from baregrad.tensor.grad_mode import is_grad_enabled, _state as _grad_state
from baregrad.tensor.gradfn import with_grad
from baregrad.tensor.recipe import method_recipe, param_key
from baregrad.tensor.ops import mathfn as _mathfn
from baregrad.tensor.ops.mathfn import MathOps
from baregrad.tensor.ops.scan import ScanOps
from baregrad.tensor.ops.sorting import SortingOps
from baregrad.tensor.ops.linalg import LinalgOps
from baregrad.tensor.ops.shape import ShapeOps
from baregrad.tensor.ops.indexing import IndexingOps
from baregrad.tensor.ops.conv import ConvOps
from baregrad.tensor.ops.norm import NormOps
from baregrad.tensor.ops.attention import AttentionOps
from baregrad.tensor.ops.loss import LossOps
from baregrad.tensor.ops.inplace_ops import InplaceOps
from baregrad.tensor.common import _all_grad_tensors, _axis, broadcast_shape, ValuesIndices, _is_whole_buffer

ShapeLike = int | Sequence[int]
_rng_states: dict[str, tuple[Any, Tensor]] = {}  # device -> (the device instance, its RNG state [seed, counter] (uint32))

@functools.cache
def _np_dtype(d: DType) -> Any:
  if d == dtypes.bfloat16: return np.uint16
  return np.dtype(torch_name(d) if d != dtypes.bool else "bool")

_NP_DTYPES: dict[Any, DType] = {}   # NumPy dtype -> DType (a dtype's .name is computed in Python on every read)

def _from_np_dtype(d: np.dtype) -> DType:
  if (r := _NP_DTYPES.get(d)) is not None: return r
  try: r = dtypes.from_name(np.dtype(d).name)
  except ValueError: raise TypeError(f"NumPy dtype {d} has no baregrad dtype") from None
  if isinstance(d, np.dtype): _NP_DTYPES[d] = r
  return r

_PY_TYPES: dict[type, DType] = {bool: dtypes.bool, int: dtypes.int64, float: dtypes.float64}

def to_dtype(d: Any) -> DType:
  """A dtype argument as a baregrad DType: a DType, a name ("float16", "half", "torch.float16"), a NumPy dtype or
  scalar type (np.float16), a Python type (bool, int -> int64, float -> float64, as PyTorch maps them), or a torch dtype."""
  if isinstance(d, DType): return d
  if isinstance(d, type) and d in _PY_TYPES: return _PY_TYPES[d]
  name = d if isinstance(d, str) else str(d) if str(d).startswith("torch.") else None
  if name is not None:
    name = name.removeprefix("torch.")
    try: return dtypes.from_name(name)
    except ValueError:
      try: return dtypes.from_name(np.dtype(name).name)
      except (TypeError, ValueError): pass
    raise ValueError(f"unknown dtype {d!r}: expected one of {sorted(set(ALL_NAMES))}") from None
  try: npd = np.dtype(d)
  except TypeError: raise TypeError(f"dtype must be a baregrad dtype, a NumPy dtype, a Python type or a name like 'float16', got {type(d).__name__} {d!r}") from None
  return _from_np_dtype(npd)

ALL_NAMES = [torch_name(x) for x in ALL]

def _shape_arg(shape: tuple) -> tuple[int, ...]:
  if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
  for s in shape:
    if type(s) is not int:   # (plain ints, the common case, need no conversion)
      for v in shape:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)): raise TypeError(f"sizes must be ints, got {type(v).__name__} in {tuple(shape)}")
      return tuple(int(v) for v in shape)
  return shape if type(shape) is tuple else tuple(shape)

def _new_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
  """A shape to create a tensor of: PyTorch's error for a negative size."""
  if any(s < 0 for s in shape): raise RuntimeError(f"Trying to create tensor with negative dimension {min(shape)}: {list(shape)}")
  return shape

def _tensor_of(u: UOp, device: str) -> Tensor:
  """Tensor(u, device=device) for a node the caller built on that (canonical) device: without the argument checks."""
  t = _object_new(Tensor)
  t.uop, t.device, t.grad, t.requires_grad = u, device, None, None
  live.track(t)
  return t

# (dtype, shape, type, value) -> the scalar broadcast to the shape: eager code adds the same constants to tensors of the
# same shapes over and over (x + 1, a learning rate, an epsilon), and three hash-consed nodes cost ~3 us to build. A
# hit is the node building would give (equal nodes are one object), kept alive here. Float zeros and NaN are not
# looked up (-0.0 would find 0.0's node; NaN finds nothing)
_SCALARS: dict[tuple, UOp] = {}
_SCALAR_PROMOTION: dict[tuple, DType] = {}   # (tensor dtype, scalar type, default float) -> the op's dtype

def _scalar_node(d: DType, y: Any, shape: tuple[int, ...]) -> UOp:
  if type(y) is float and (y == 0 or y != y): return broadcast_const(UOp.const(d, y), shape)   # (-0.0 == 0.0)
  key = (d, shape, type(y), y)
  if (u := _SCALARS.get(key)) is not None: return u
  u = broadcast_const(UOp.const(d, y), shape)
  if len(_SCALARS) >= 4096: _SCALARS.clear()
  _SCALARS[key] = u
  return u

def _node(op: Ops, dtype: DType, srcs: tuple, arg: Any, shape: tuple[int, ...]) -> UOp:
  # (args here are shapes, axes and None, their own hash-consing keys: UOp() without its argument checks)
  u = make_keyed(op, dtype, srcs, arg, arg)
  if u._shape is None: object.__setattr__(u, "_shape", shape)
  return u

def _matmul_fast(x: Tensor, w: Tensor) -> Tensor | None:
  """x @ w for two float tensors of one dtype with at least 2 axes: the graph the general path builds (the same
  hash-consed nodes), made from UOps directly instead of through eight intermediate tensors and their checks (a
  matmul's graph cost ~125 us of Python that way). None where the general path must decide (1-D promotion, casts,
  an empty or length-1 reduction, a one-element result)."""
  xs, ws = x.shape, w.shape
  dt = x.uop.dtype
  if len(xs) < 2 or len(ws) < 2 or w.uop.dtype is not dt or (dt is not dtypes.float32 and dt is not dtypes.float64): return None
  n, k, m = xs[-2], xs[-1], ws[-1]
  if k < 2 or w.device != x.device: return None
  bx, bw = xs[:-2], ws[:-2]
  batch = bx if bx == bw else broadcast_shape(bx, bw)   # (raises for batch axes that do not broadcast, as the general path)
  full = batch + (n, m, k)
  if prod(full) // k <= 1: return None
  # x (..., n, k) -> (..., n, 1, k); w (..., k, m) -> its transpose (..., m, k) -> (..., 1, m, k); both to `full`
  xu = _node(Ops.RESHAPE, dt, (x.uop,), bx + (n, 1, k), bx + (n, 1, k))
  wt = permute_uop(w.uop, tuple(range(len(bw))) + (len(bw) + 1, len(bw)))
  if wt._shape is None: set_shape(wt, bw + (m, k))
  wu = _node(Ops.RESHAPE, dt, (wt,), bw + (1, m, k), bw + (1, m, k))
  def to_full(u: UOp) -> UOp:   # (what _bcast does: leading ones, then the expand)
    if len(s := u._shape) < len(full): u = _node(Ops.RESHAPE, dt, (u,), ones := (1,) * (len(full) - len(s)) + s, ones)
    return u if u._shape == full else _node(Ops.EXPAND, dt, (u,), full, full)
  prodn = _node(Ops.MUL, dt, (to_full(xu), to_full(wu)), None, full)
  red = _node(Ops.REDUCE_AXIS, dt, (prodn,), (Ops.ADD, (len(full) - 1,)), full[:-1] + (1,))
  out = _node(Ops.RESHAPE, dt, (red,), full[:-1], full[:-1])
  return x._new(out, requires_grad=True if (x.requires_grad or w.requires_grad) else None)

_object_new = object.__new__

class Tensor(MathOps, ScanOps, SortingOps, ShapeOps, IndexingOps, LinalgOps, ConvOps, NormOps, AttentionOps, LossOps, InplaceOps):
  """A lazy tensor on a device. Ops return new tensors; nothing runs until realize(), numpy(), item() or tolist()."""
  __slots__ = ("uop", "device", "requires_grad", "grad", "_ctx_name", "__weakref__")
  training: bool = False
  _modes: frozenset = frozenset()   # the nn modules' training flags that differ from True (nn/module.py): a jit key
  _seed: int = 0

  class train(contextlib.ContextDecorator):
    """Set Tensor.training (dropout, batch-norm statistics) for a block or a decorated function: `with Tensor.train():`,
    `@Tensor.train(False)`, as in tinygrad. Modules' own train()/eval() override it per module."""
    def __init__(self, mode: bool = True):
      if not isinstance(mode, bool): raise TypeError(f"train: mode must be a bool, got {type(mode).__name__} {mode!r}")
      self.mode = mode
    def __enter__(self) -> None: self.prev, Tensor.training = Tensor.training, self.mode
    def __exit__(self, *exc: object) -> None: Tensor.training = self.prev
  class eval(train):
    """Tensor.training off for a block or a decorated function (Tensor.train(False))."""
    def __init__(self) -> None: super().__init__(False)
  class test(contextlib.ContextDecorator):
    """tinygrad's spelling of no_grad: gradient recording off for a block or a decorated function."""
    def __enter__(self) -> None:
      from baregrad.tensor.grad_mode import no_grad
      self.ctx = no_grad(); self.ctx.__enter__()
    def __exit__(self, *exc: object) -> None: self.ctx.__exit__(*exc)

  def __init__(self, data: Any, device: str | None = None, dtype: DType | None = None, requires_grad: bool | None = None):
    if dtype is not None: dtype = to_dtype(dtype)
    self.device = Device.canonicalize(device or Device.DEFAULT)
    self.grad: Tensor | None = None
    self.requires_grad = requires_grad
    if isinstance(data, UOp): self.uop = data
    elif isinstance(data, Tensor): self.uop = data.uop if dtype is None else data.cast(dtype).uop
    elif isinstance(data, (bool, int, float)):
      d = dtype or (dtypes.bool if isinstance(data, bool) else dtypes.int64 if isinstance(data, int) else dtypes.default_float)
      self.uop = UOp.const(d, data)
    elif isinstance(data, (list, tuple)):
      try: arr = np.array(data)
      except ValueError: arr = np.empty(0, object)  # NumPy >= 1.24 raises on ragged input
      if arr.dtype == object: raise ValueError("ragged nested sequences cannot make a Tensor: every row needs the same length")
      if dtype is None:
        dtype = dtypes.bool if arr.dtype == np.bool_ else dtypes.default_float if arr.dtype.kind == "f" else dtypes.int64 if arr.dtype.kind in "iu" else None
        if dtype is None: raise TypeError(f"cannot make a Tensor from elements of NumPy kind {arr.dtype}")
      self.uop = self._from_numpy(arr.astype(_np_dtype(dtype)) if dtype != dtypes.bfloat16 else _f32_to_bf16_np(arr), dtype)
    elif isinstance(data, (np.ndarray, np.generic)):
      data = np.asarray(data)
      d = dtype or _from_np_dtype(data.dtype)
      self.uop = self._from_numpy(data if dtype is None else (data.astype(_np_dtype(d)) if d != dtypes.bfloat16 else _f32_to_bf16_np(data)), d)
    else: raise TypeError(f"cannot make a Tensor from {type(data).__name__}")
    live.track(self)  # an in-place write first computes the live tensors that read what it overwrites
    if requires_grad:
      if not dtypes.is_float(self.dtype): raise RuntimeError(f"only float tensors can require gradients, got {self.dtype} (shape {self.shape})")
      _all_grad_tensors[id(self)] = self

  def _from_numpy(self, arr: np.ndarray, dtype: DType) -> UOp:
    if not Device[self.device].supports_dtype(dtype): raise TypeError(f"dtype {dtype} is not supported on device {self.device}")
    arr = np.ascontiguousarray(arr).reshape(arr.shape)  # ascontiguousarray makes a 0-d array 1-d
    ref = BufRef(self.device, arr.size, dtype)
    if arr.size: ref.ensure().copyin(memoryview(arr.reshape(-1)).cast("B"))
    else: ref.ensure()
    ref.storage.owner = weakref.ref(self)
    return lazy.buffer_view(ref, arr.shape)

  # ---- properties
  @property
  def shape(self) -> tuple[int, ...]:
    """The size of each axis, a tuple of ints (torch.Size is a tuple too)."""
    return shape_of(self.uop)
  @property
  def dtype(self) -> DType:
    """The element type, a baregrad DType (dtypes.float32, ...)."""
    return self.uop.dtype
  @property
  def ndim(self) -> int:
    """The number of axes."""
    return len(self.shape)
  def numel(self) -> int:
    """The number of elements (the product of the shape; 1 for a 0-d tensor)."""
    return prod(self.shape)
  def size(self, dim: int | None = None) -> Any:
    """The shape, or the size of axis dim (negative counts from the end)."""
    return self.shape if dim is None else self.shape[_axis(dim, self.ndim)]
  def dim(self) -> int:
    """The number of axes (PyTorch's dim())."""
    return self.ndim
  def element_size(self) -> int:
    """Bytes per element."""
    return self.dtype.itemsize
  @property
  def T(self) -> Tensor:
    """The axes in reverse order (a view); for 2-D the transpose."""
    return self.permute(*range(self.ndim - 1, -1, -1))
  @property
  def is_leaf(self) -> bool:
    """Whether this tensor is a buffer or a constant rather than the result of an op."""
    return base_of(self.uop).op is Ops.BUFFER or self.uop.op is Ops.CONST
  def __len__(self) -> int:
    if not self.shape: raise TypeError("len() of a 0-d tensor")
    return self.shape[0]
  def __repr__(self) -> str:
    """The values, formatted as PyTorch prints them (this realizes the tensor; see tensor/printing.py)."""
    from baregrad.tensor.printing import tensor_repr
    return tensor_repr(self)
  def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
    """np.asarray(t): the values as a NumPy array (a copy off the device; bfloat16 comes back as float32)."""
    a = self.numpy()
    return a if dtype is None else a.astype(dtype, copy=False)
  @staticmethod
  def from_numpy(a: np.ndarray, device: str | None = None) -> Tensor:
    """A tensor with the array's shape, dtype and values, in memory of its own: a COPY, taken now, unlike
    torch.from_numpy, which shares the array's memory. A later write to `a` is not seen by the tensor, and a write to
    the tensor (assign, `t += 1`, an optimizer step) is not seen in `a`: read it back with t.numpy(), or write into
    the tensor with t.assign(Tensor(a)) / t.copy_(...). Sharing is refused because a tensor's value is fixed when it
    is built (docs/value_semantics.md): results computed from it are reused while its buffer version is unchanged, and
    NumPy writes would change the memory without a new version (docs/value_semantics.md, "NumPy arrays")."""
    if not isinstance(a, np.ndarray): raise TypeError(f"from_numpy: expected np.ndarray, got {type(a).__name__}")
    return Tensor(a, device=device).reshape(a.shape)
  def _one(self, what: str) -> Any:
    if self.numel() != 1: raise RuntimeError(f"{what}: only a tensor with one element can be converted to a Python scalar, got shape {self.shape}")
    return self.item()
  def __float__(self) -> float: return float(self._one("float()"))
  def __int__(self) -> int: return int(self._one("int()"))
  def __index__(self) -> int:
    if dtypes.is_float(self.dtype): raise TypeError(f"only integer tensors of a single element can be converted to an index, got {self.dtype}")
    return int(self._one("__index__"))
  def __hash__(self) -> int: return id(self)
  def __bool__(self) -> bool:
    if self.numel() != 1: raise RuntimeError(f"the truth value of a tensor with {self.numel()} elements is ambiguous")
    return bool(self.item())

  def _new(self, u: UOp, requires_grad: bool | None = None) -> Tensor:
    # what Tensor(u, device=self.device) makes, without its checks of arguments that are right by construction here
    # (the result of every op comes through this)
    t = _object_new(Tensor)
    t.uop, t.device, t.grad = u, self.device, None
    rg = requires_grad if requires_grad is not None else (True if self.requires_grad else None)
    t.requires_grad = rg if _grad_state.enabled else None
    live.track(t)
    return t

  # ---- realization
  def schedule(self) -> list:
    """The kernels realize() would run, without running them (each item has .ast and .bufs)."""
    items, _, _ = lazy.schedule_for([self.uop], self.device)
    return items
  def realize(self, *others: Tensor) -> Tensor:
    """Run the kernels that compute this tensor (and others given) now; returns self. Tensors in autograd keep their graph."""
    if not others:   # (the common call: no tuples and loops for several)
      self._computed(lazy.realize([self.uop], self.device)[0])
      return self
    ts = (self, *others)
    for t, u in zip(ts, lazy.realize([t.uop for t in ts], self.device)): t._computed(u)
    return self
  def _computed(self, u: UOp) -> None:
    # u reads this tensor's computed value. A tensor that takes part in autograd keeps its graph (the scheduler reads
    # the buffer in its place)
    if not self.requires_grad:
      if base_of(u).op is Ops.BUFFER: _bind(self, u)
      else: self.uop = u; live.track(self)
  def contiguous(self) -> Tensor:
    """A tensor whose value the scheduler materializes in its own buffer (forces a kernel boundary)."""
    return self._new(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)))
  def _realized(self) -> Buffer:
    """A contiguous buffer holding exactly this tensor's elements, computed now if it is not yet (no wait for it)."""
    if (ref := live.whole_buffer(self.uop)) is not None and not ref.stale:
      # the current version of a whole buffer (a jit's input, a realized tensor): nothing to substitute or compute. (A
      # stale one may have been copied before the write: lazy.realized knows, below.)
      return ref.ensure()
    u = lazy.substitute_realized(self.uop)
    if not (u.op is Ops.BUFFER or (u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER)):
      u = lazy.realize([UOp(Ops.CONTIGUOUS, u.dtype, (u,))], self.device)[0]
      if self.requires_grad: lazy.set_realized(self.uop, u)
      else: _bind(self, u)
    elif base_of(u).arg.stale: raise stale_error(base_of(u).arg)
    return base_of(u).arg.ensure()
  def _buffer(self) -> Buffer:
    """_realized(), waited for: the host may read it. Index checks computed since the last read raise here."""
    buf = self._realized()
    Device[self.device].synchronize()
    checks.check(self.device)
    return buf
  def numpy(self) -> np.ndarray:
    """The values as a new NumPy array, a COPY (synchronizes with the device; bfloat16 comes back as float32): unlike
    torch's Tensor.numpy() on the CPU it shares no memory with the tensor, so writing into the array does not change
    the tensor and a later in-place write to the tensor does not change the array."""
    from baregrad.engine.realize import capturing
    if any(getattr(c, "forbid_host_reads", False) for c in capturing):
      from baregrad.tensor.jit import JitError
      raise JitError(f"a jitted function reads a tensor's value on the host (item/numpy/tolist/bool, shape {self.shape}) while it is "
                     "captured: a replay could not reproduce it; return the tensor and read it after the call")
    if self.numel() == 0: return np.zeros(self.shape, _np_dtype(self.dtype))
    buf = self._buffer()
    out = np.empty(self.shape, _np_dtype(self.dtype))
    buf.copyout(memoryview(out.reshape(-1)).cast("B"))
    return out if self.dtype != dtypes.bfloat16 else _bf16_to_f32_np(out)
  def tolist(self) -> Any:
    """The values as nested Python lists (synchronizes with the device)."""
    return self.numpy().tolist()
  def item(self) -> Any:
    """The single value as a Python number (synchronizes with the device); RuntimeError unless there is one element."""
    if self.numel() != 1: raise RuntimeError(f"a Tensor with {self.numel()} elements cannot be converted to Scalar: item() needs one element, got shape {self.shape}")
    return self.numpy().reshape(-1)[0].item()
  def data(self) -> memoryview:
    """The values as a read-only memoryview of a host copy (unlike PyTorch's .data, not a tensor sharing storage)."""
    return memoryview(self.numpy())
  def to(self, device: Any = None, dtype: Any = None) -> Tensor:
    """This tensor on another device and/or as another dtype: t.to("NV"), t.to(dtypes.half), t.to("CPU", "float16"),
    t.to(other) (other's device and dtype). Returns self when nothing changes."""
    if isinstance(device, Tensor): device, dtype = device.device, device.dtype if dtype is None else dtype
    elif device is not None and _is_dtype_arg(device):
      if dtype is not None: raise TypeError(f"to(): got a dtype as the device ({device!r}) and dtype={dtype!r}")
      device, dtype = None, device
    t = self
    if dtype is not None: t = t.cast(dtype)
    if device is not None and Device.canonicalize(device) != self.device:
      d = Device.canonicalize(device)
      src = t if _is_whole_buffer(t.uop) else t.contiguous()
      u = UOp(Ops.COPY, t.dtype, (src.uop,), d)
      out = Tensor(u, device=d)
      out.requires_grad = t.requires_grad if is_grad_enabled() else None
      return out
    return t
  def cpu(self) -> Tensor:
    """This tensor on the CPU device (self when it is there already)."""
    return self.to("CPU")
  def clone(self) -> Tensor:
    """A copy with its own buffer (contiguous); gradients flow through it."""
    return self.contiguous()
  def detach(self) -> Tensor:
    """The same values cut from the autograd graph (gradients do not flow back through it)."""
    return Tensor(UOp(Ops.DETACH, self.dtype, (self.uop,)), device=self.device)
  def requires_grad_(self, flag: bool = True) -> Tensor:
    """Mark this (float) tensor as needing gradients (or not); returns self."""
    if flag and not dtypes.is_float(self.dtype): raise RuntimeError(f"only float tensors can require gradients, got {self.dtype} (shape {self.shape})")
    self.requires_grad = flag
    if flag: _all_grad_tensors[id(self)] = self
    return self

  def assign(self, x: Tensor | Any) -> Tensor:
    """Write x into this tensor's buffer in place; the tensor keeps its identity. Tensors built from the old value
    keep it (docs/value_semantics.md)."""
    if not isinstance(x, Tensor): x = Tensor.full(self.shape, x, dtype=self.dtype, device=self.device)
    if x.shape != self.shape: raise RuntimeError(f"assign of shape {x.shape} to a tensor of shape {self.shape}")
    if x.dtype != self.dtype: x = x.cast(self.dtype)
    if not _is_whole_buffer(self.uop):  # a view (x[0]) writes a new buffer of its own; its base is not changed
      self.uop = x.contiguous().uop
      live.track(self)
      return self
    from baregrad.tensor.inplace import write
    write([(self, x)])
    return self

  # ---- creation
  @staticmethod
  def empty(*shape: Any, dtype: DType | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """A tensor of the given shape; unlike PyTorch it is filled with zeros (nothing is left uninitialized)."""
    return Tensor.zeros(*shape, dtype=dtype, device=device, requires_grad=requires_grad)
  @staticmethod
  def full(shape: ShapeLike, fill_value: Any, dtype: DType | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """A tensor of the given shape filled with fill_value; dtype from the value (bool, int64, float32) unless given."""
    shape = _new_shape(_shape_arg((shape,) if isinstance(shape, int) else tuple(shape)))
    d = to_dtype(dtype) if dtype is not None else (dtypes.bool if isinstance(fill_value, bool) else dtypes.int64 if isinstance(fill_value, int) else dtypes.default_float)
    c = UOp.const(d, fill_value)
    u = UOp(Ops.EXPAND, d, (UOp(Ops.RESHAPE, d, (c,), (1,) * len(shape)),), shape) if shape else c
    t = Tensor(u, device=device)
    # a tensor that asks for gradients is a leaf: give it its own buffer, as torch.full does
    return t.contiguous().realize()._leaf(True) if requires_grad else t
  @staticmethod
  def zeros(*shape: Any, dtype: DType | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """A float32 (or dtype) tensor of zeros, in its own buffer."""
    return Tensor.full(_shape_arg(shape), 0.0 if dtype is None else 0, dtype=dtype or dtypes.default_float, device=device).contiguous().realize()._leaf(requires_grad)
  @staticmethod
  def ones(*shape: Any, dtype: DType | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """A float32 (or dtype) tensor of ones, in its own buffer."""
    return Tensor.full(_shape_arg(shape), 1, dtype=dtype or dtypes.default_float, device=device).contiguous().realize()._leaf(requires_grad)
  def _leaf(self, requires_grad: bool | None) -> Tensor:
    if requires_grad: return self.requires_grad_(True)
    self.requires_grad = requires_grad
    return self
  def full_like(self, v: Any, dtype: DType | None = None, device: str | None = None) -> Tensor:
    """A tensor of this one's shape (and dtype, device unless given) filled with v."""
    return Tensor.full(self.shape, v, dtype=dtype or self.dtype, device=device or self.device)
  def zeros_like(self, **kw: Any) -> Tensor:
    """Zeros of this tensor's shape, dtype and device."""
    return self.full_like(0, **kw)
  def ones_like(self, **kw: Any) -> Tensor:
    """Ones of this tensor's shape, dtype and device."""
    return self.full_like(1, **kw)
  def empty_like(self, **kw: Any) -> Tensor:
    """A tensor of this one's shape, dtype and device, filled with zeros."""
    return self.full_like(0, **kw)
  @staticmethod
  def arange(start: Any, stop: Any = None, step: Any = 1, dtype: DType | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """1-D tensor start, start+step, ... below stop; int64 unless a float argument or dtype says otherwise, computed on the device."""
    if stop is None: start, stop = 0, start
    if step == 0: raise RuntimeError("arange: step must be nonzero")
    if (stop - start) * step < 0: raise RuntimeError(f"arange: upper bound and lower bound inconsistent with step sign (start {start}, end {stop}, step {step})")
    n = max(0, math.ceil((stop - start) / step))
    d = to_dtype(dtype) if dtype is not None else (dtypes.default_float if any(isinstance(x, float) for x in (start, stop, step)) else dtypes.int64)
    if n == 0: return Tensor(np.zeros(0, _np_dtype(d)), device=device)
    idx = Tensor._index_range(n, device).cast(d)
    out = idx if step == 1 and start == 0 else (idx * step + start).cast(d)
    return out._leaf(requires_grad) if requires_grad else out
  @staticmethod
  def _index_range(n: int, device: str | None) -> Tensor:
    """0..n-1 as int32, computed where it is read (an IOTA node: each element is the index the kernel would load it
    from), no buffer and no memory traffic."""
    if n > dtypes.max(dtypes.int32) + 1: raise ValueError(f"arange of {n} elements: int32 indices reach {dtypes.max(dtypes.int32) + 1}")
    return Tensor(UOp(Ops.IOTA, dtypes.int32, (), n), device=device)
  @staticmethod
  def linspace(start: float, end: float, steps: int, dtype: DType | None = None, device: str | None = None) -> Tensor:
    """1-D float tensor of steps values from start to end inclusive, evenly spaced."""
    if not isinstance(steps, (int, np.integer)) or isinstance(steps, bool): raise TypeError(f"linspace: steps must be an int, got {type(steps).__name__}")
    if steps < 0: raise RuntimeError(f"linspace: number of steps must be non-negative, got {steps}")
    if steps == 1: return Tensor.full((1,), start, dtype=dtype or dtypes.default_float, device=device)
    return (Tensor.arange(steps, device=device).cast(dtypes.default_float) * ((end - start) / (steps - 1)) + start).cast(dtype or dtypes.default_float)
  @staticmethod
  def eye(n: int, m: int | None = None, dtype: DType | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """2-D (n, m) tensor with ones on the main diagonal, zeros elsewhere."""
    m = n if m is None else m
    if n < 0 or m < 0: raise RuntimeError(f"eye: n and m must be greater or equal to 0, got n={n}, m={m}")
    r = Tensor.arange(n, device=device).reshape(n, 1)
    c = Tensor.arange(m, device=device).reshape(1, m)
    return r.eq(c).cast(dtype or dtypes.default_float).contiguous().realize()._leaf(requires_grad)

  # ---- random numbers: Threefry-2x32 (20 rounds) over a counter, computed on the device. The key comes from a
  # per-device state buffer [seed, counter] that each draw advances with a kernel, so a jit replay draws new numbers
  @staticmethod
  def manual_seed(seed: int = 0) -> None:
    """Seed baregrad's random streams (Threefry-2x32 on the device: the numbers differ from PyTorch's for the same seed)."""
    Tensor._seed = int(seed)
    for dev, (inst, st) in list(_rng_states.items()):
      if dev in Device.opened and Device[dev] is inst: st.assign(Tensor(np.array([Tensor._seed & 0xffffffff, 0], np.uint32), device=dev))
      else: del _rng_states[dev]
  @staticmethod
  def _rng_state(device: str | None) -> Tensor:
    dev = Device.canonicalize(device or Device.DEFAULT)
    if (e := _rng_states.get(dev)) is None or e[0] is not Device[dev]:  # (a reopened device starts a new state)
      _rng_states[dev] = e = (Device[dev], Tensor(np.array([Tensor._seed & 0xffffffff, 0], np.uint32), device=dev))
    return e[1]
  @staticmethod
  def _random(n: int, device: str | None, finish: Any, key: tuple, extra: tuple = ()) -> Tensor:
    """finish(n random uint32 bits, *extra) realized, with the RNG state advanced in the same schedule. `key` names
    what finish computes (with n, the recipes' key: both graphs are built from recipes after the first draw of a kind,
    ~30 tensor ops that cost more than the kernel)."""
    from baregrad.tensor.inplace import write
    from baregrad.tensor.recipe import recorded
    st = Tensor._rng_state(device)
    def draw(s: Tensor, *ex: Tensor) -> Tensor:
      ctr = s._shrink(((1, 2),)).reshape(()) + 1
      bits = _threefry(Tensor.arange(n, device=s.device, dtype=dtypes.uint32), Tensor.full((n,), 0, dtype=dtypes.uint32, device=s.device),
                       s._shrink(((0, 1),)).reshape(()), ctr * 0x9E3779B9)
      return finish(bits, *ex)   # (bits and ctr go with this frame: not readers of the state to keep, only the result is)
    out = recorded("random", draw, [st, *extra], (n, key))
    step = recorded("rng_step", lambda s: s + Tensor.full((1,), 1, dtype=dtypes.uint32, device=s.device)._pad(((1, 0),)), [st], ())
    write([(st, step)], also=[out])
    return out
  @staticmethod
  def rand(*shape: Any, dtype: DType | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """Uniform [0, 1) float32 (or dtype) tensor of the given shape, generated on the device."""
    shape = _new_shape(_shape_arg(shape))
    n = prod(shape)
    if n == 0: return Tensor.zeros(*shape, dtype=dtype, device=device)
    return Tensor._random(n, device, lambda bits: _unit(bits, shape).cast(dtype or dtypes.default_float).contiguous(),
                          ("rand", shape, dtype))._leaf(requires_grad)
  @staticmethod
  def uniform(*shape: Any, low: float = 0.0, high: float = 1.0, dtype: DType | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """Uniform [low, high) tensor of the given shape, generated on the device."""
    shape = _new_shape(_shape_arg(shape))
    if prod(shape) == 0: return Tensor.zeros(*shape, dtype=dtype or dtypes.default_float, device=device)._leaf(requires_grad)
    # the scaling is computed in the draw's kernel (the values are those of (high - low) * rand() + low)
    def finish(bits: Tensor) -> Tensor:
      return ((high - low) * _unit(bits, shape).cast(dtypes.default_float) + low).cast(dtype or dtypes.default_float).contiguous()
    return Tensor._random(prod(shape), device, finish, ("uniform", shape, param_key(low), param_key(high), dtype))._leaf(requires_grad)
  @staticmethod
  def randn(*shape: Any, dtype: DType | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """Standard normal tensor of the given shape (Box-Muller on the device)."""
    shape = _new_shape(_shape_arg(shape))
    if prod(shape) == 0: return Tensor.zeros(*shape, dtype=dtype or dtypes.default_float, device=device)._leaf(requires_grad)
    # Box-Muller over two uniform streams; the second draw's kernel computes the normals
    u1 = Tensor.rand(*shape, device=device)
    def finish(bits: Tensor, u1: Tensor) -> Tensor:
      u2 = _unit(bits, shape).cast(dtypes.default_float)
      return ((-2.0 * (1.0 - u1).log()).sqrt() * (2 * math.pi * u2).cos()).cast(dtype or dtypes.default_float).contiguous()
    return Tensor._random(prod(shape), device, finish, ("randn", shape, dtype), (u1,))._leaf(requires_grad)
  @staticmethod
  def normal(*shape: Any, mean: float = 0.0, std: float = 1.0, dtype: DType | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """Normal(mean, std^2) tensor of the given shape, generated on the device."""
    return (Tensor.randn(*shape, device=device) * std + mean).cast(dtype or dtypes.default_float).contiguous().realize()._leaf(requires_grad)
  @staticmethod
  def randint(low: int, high: int | None = None, size: ShapeLike = (), dtype: DType = dtypes.int64, device: str | None = None) -> Tensor:
    """Integers uniform in [low, high) (int64 unless dtype), of shape size, generated on the device."""
    if high is None: low, high = 0, low
    shape = (size,) if isinstance(size, int) else tuple(size)
    r = (Tensor.rand(*shape, device=device, dtype=dtypes.float64) * (high - low)).floor().cast(dtypes.int64) + low
    return r.cast(dtype).contiguous().realize()
  def rand_like(self) -> Tensor:
    """Uniform [0, 1) values of this tensor's shape, dtype and device."""
    return Tensor.rand(*self.shape, dtype=self.dtype, device=self.device)
  def randn_like(self) -> Tensor:
    """Standard normal values of this tensor's shape, dtype and device."""
    return Tensor.randn(*self.shape, dtype=self.dtype, device=self.device)

  # ---- movement
  def reshape(self, *shape: Any) -> Tensor:
    """The same elements in a new shape (one -1 is inferred); a view, never a copy (PyTorch copies when it cannot view)."""
    shape = _shape_arg(shape)
    if shape.count(-1) > 1: raise RuntimeError(f"reshape {shape}: only one dimension can be inferred (-1)")
    if any(s < -1 for s in shape): raise RuntimeError(f"reshape {shape}: invalid shape dimension {min(shape)}")
    if -1 in shape:
      known = prod(s for s in shape if s != -1)
      if known == 0 or self.numel() % known: raise RuntimeError(f"cannot reshape {self.shape} ({self.numel()} elements) to {shape}")
      shape = tuple(self.numel() // known if s == -1 else s for s in shape)
    if prod(shape) != self.numel(): raise RuntimeError(f"cannot reshape tensor of shape {self.shape} ({self.numel()} elements) to {shape} ({prod(shape)} elements)")
    if shape == self.shape: return self
    return self._new(_node(Ops.RESHAPE, self.dtype, (self.uop,), shape, shape))   # (shape checked above: none inferred)
  view = reshape
  def permute(self, *order: Any) -> Tensor:
    """The axes reordered (a view): out.shape[i] == self.shape[order[i]]."""
    order = _shape_arg(order)
    nd = self.ndim
    o = tuple(_axis(a, nd) for a in order)
    if sorted(o) != list(range(nd)): raise RuntimeError(f"permute {order} is not a permutation of {nd} axes of shape {self.shape}")
    if o == tuple(range(nd)): return self
    return self._new(permute_uop(self.uop, o))
  def transpose(self, dim0: int = -2, dim1: int = -1) -> Tensor:
    """Axes dim0 and dim1 swapped (a view); defaults to the last two."""
    o = list(range(self.ndim))
    a, b = _axis(dim0, self.ndim), _axis(dim1, self.ndim)
    o[a], o[b] = o[b], o[a]
    return self.permute(*o)
  def expand(self, *shape: Any) -> Tensor:
    """Size-1 axes broadcast to the given sizes (-1 keeps a size; new axes go in front); a view."""
    shape = _shape_arg(shape)
    if len(shape) < self.ndim: raise RuntimeError(f"expand to {shape}: fewer axes than the tensor's shape {self.shape}")
    x = self.reshape((1,) * (len(shape) - self.ndim) + self.shape) if len(shape) > self.ndim else self
    new = tuple(x.shape[i] if s == -1 else s for i, s in enumerate(shape))
    for a, b in zip(x.shape, new):
      if a != b and a != 1: raise RuntimeError(f"cannot expand shape {self.shape} to {shape}: only size-1 axes expand")
    if new == x.shape: return x
    return x._new(_node(Ops.EXPAND, x.dtype, (x.uop,), new, new))   # (checked above)
  def expand_as(self, other: Tensor) -> Tensor:
    """expand() to other's shape."""
    return self.expand(other.shape)
  def _pad(self, arg: tuple[tuple[int, int], ...]) -> Tensor:
    if all(a == (0, 0) for a in arg): return self
    return self._new(UOp(Ops.PAD, self.dtype, (self.uop,), tuple(arg)))
  def _shrink(self, arg: tuple[tuple[int, int], ...]) -> Tensor:
    if all(a == (0, s) for a, s in zip(arg, self.shape)): return self
    return self._new(UOp(Ops.SHRINK, self.dtype, (self.uop,), tuple(arg)))
  def flip(self, *dims: Any) -> Tensor:
    """The elements in reverse order along the given axes (a view)."""
    dims = _shape_arg(dims)
    axl = [_axis(d, self.ndim) for d in dims]
    if len(set(axl)) != len(axl): raise RuntimeError(f"flip: a dim appears multiple times in the list of dims {dims}")
    ax = set(axl)
    if not ax: return self
    return self._new(UOp(Ops.FLIP, self.dtype, (self.uop,), tuple(i in ax for i in range(self.ndim))))
  def pad(self, pad: Sequence[Any], mode: str = "constant", value: float | None = None) -> Tensor:
    """Pad (negative amounts crop). PyTorch's flat form: (left, right) for the last axis, then (top, bottom) for the
    one before, ...; or tinygrad's form: one (before, after) pair or None per axis. mode 'constant' (value, default
    0), 'reflect', 'replicate' or 'circular' (see functional.pad)."""
    if len(pad) and all(p is None or isinstance(p, (tuple, list)) for p in pad):  # tinygrad: ((before, after) | None, ...) per axis
      if len(pad) != self.ndim: raise RuntimeError(f"pad: {len(pad)} (before, after) pairs for a tensor of {self.ndim} dimensions (shape {self.shape})")
      pad = [v for p in reversed(pad) for v in (tuple(p) if p is not None else (0, 0))]
    if len(pad) % 2: raise RuntimeError(f"pad {tuple(pad)}: padding length must be divisible by 2")
    if len(pad) // 2 > self.ndim: raise RuntimeError(f"pad {tuple(pad)}: padding length must be at most 2*{self.ndim} (two per dimension of shape {self.shape})")
    if any(isinstance(p, bool) or not isinstance(p, (int, np.integer)) for p in pad): raise TypeError(f"pad {tuple(pad)}: sizes must be ints")
    if mode != "constant":
      from baregrad.tensor.ops.shape import pad as fpad
      if value is not None: raise RuntimeError(f"pad: padding mode {mode!r} doesn't take in value argument (got value={value})")
      return fpad(self, pad, mode)
    value = 0.0 if value is None else value
    arg = [(0, 0)] * self.ndim
    for i in range(len(pad) // 2): arg[self.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    # negative padding crops
    crop = tuple((max(0, -b), s - max(0, -a)) for (b, a), s in zip(arg, self.shape))
    if any(lo > hi for lo, hi in crop): raise RuntimeError(f"pad {tuple(pad)}: negative padding crops more than the size of shape {self.shape}")
    x = self._shrink(crop)
    arg2 = tuple((max(0, b), max(0, a)) for b, a in arg)
    out = x._pad(arg2)
    if value != 0:
      ones = Tensor.full(x.shape, True, dtype=dtypes.bool, device=self.device)._pad(arg2)
      out = ones.where(out, value)
    return out
  def squeeze(self, dim: int | None = None) -> Tensor:
    """Remove axes of size 1 (all, or those named by dim, an int or a tuple)."""
    if dim is None: return self.reshape(tuple(s for s in self.shape if s != 1))
    ds = {_axis(d, self.ndim) for d in ((dim,) if isinstance(dim, int) else dim)}  # PyTorch >= 2.0 takes a tuple
    return self.reshape(tuple(s for i, s in enumerate(self.shape) if not (i in ds and s == 1)))
  def unsqueeze(self, dim: int) -> Tensor:
    """A new axis of size 1 inserted at dim."""
    d = _axis(dim, self.ndim + 1)
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])
  def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Axes start_dim..end_dim merged into one (a 0-d tensor becomes 1-D)."""
    if self.ndim == 0: return self.reshape(1)
    s, e = _axis(start_dim, self.ndim), _axis(end_dim, self.ndim)
    return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])
  def unflatten(self, dim: int, sizes: Sequence[int]) -> Tensor:
    """Axis dim split into the given sizes."""
    d = _axis(dim, self.ndim)
    return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d + 1:])

  # ---- elementwise
  def cast(self, dtype: Any) -> Tensor:
    """The values converted to dtype (a baregrad dtype, NumPy dtype, Python type or name); float->int truncates and saturates, NaN -> 0."""
    dtype = to_dtype(dtype)
    if dtype == self.dtype: return self
    return self._new(UOp(Ops.CAST, dtype, (self.uop,)), requires_grad=self.requires_grad if dtypes.is_float(dtype) else None)
  def bitcast(self, dtype: Any) -> Tensor:
    """The same bits read as another dtype of the same item size."""
    dtype = to_dtype(dtype)
    if dtype.itemsize != self.dtype.itemsize: raise TypeError(f"bitcast from {self.dtype} to {dtype}: item sizes differ")
    return self._new(UOp(Ops.BITCAST, dtype, (self.uop,)), requires_grad=False)
  def float(self) -> Tensor:
    """cast(float32)."""
    return self.cast(dtypes.float32)
  def half(self) -> Tensor:
    """cast(float16)."""
    return self.cast(dtypes.float16)
  def double(self) -> Tensor:
    """cast(float64)."""
    return self.cast(dtypes.float64)
  def int(self) -> Tensor:
    """cast(int32)."""
    return self.cast(dtypes.int32)
  def long(self) -> Tensor:
    """cast(int64)."""
    return self.cast(dtypes.int64)
  def bool(self) -> Tensor:
    """cast(bool): True where non-zero."""
    return self.cast(dtypes.bool)
  def bfloat16(self) -> Tensor:
    """cast(bfloat16)."""
    return self.cast(dtypes.bfloat16)

  def _operands(self, y: Any, reverse: bool = False, out_float: bool = False) -> tuple[Tensor, Tensor]:
    dt, ty = self.uop.dtype, type(y)
    if ty is float or ty is int or ty is bool:   # (the commonest operand of an eager op: its promotion looked up)
      if (d := _SCALAR_PROMOTION.get(pk := (dt, ty, dtypes.default_float))) is None: d = _SCALAR_PROMOTION[pk] = promote_with_scalar(dt, y)
    elif isinstance(y, Tensor):
      if y.device != self.device: raise RuntimeError(f"Expected all tensors to be on the same device, got {self.device} and {y.device}")
      d = promote(dt, y.dtype)
    elif isinstance(y, (bool, int, float)): d = promote_with_scalar(dt, y)
    else: raise TypeError(f"unsupported operand type {type(y).__name__}")
    if out_float and not dtypes.is_float(d): d = dtypes.default_float
    x = self if d is dt else self.cast(d)
    if not isinstance(y, Tensor):  # a Python scalar: the broadcast constant _bcast would build, cached, in one step
      c = _object_new(Tensor)
      # (not filed in live: it reads no buffer, so no in-place write ever needs it computed first)
      c.uop, c.device, c.grad, c.requires_grad = _scalar_node(d, y, shape_of(x.uop)), self.device, None, None
      return (c, x) if reverse else (x, c)
    y = y.cast(d)
    shape = broadcast_shape(x.shape, y.shape)
    x, y = x._bcast(shape), y._bcast(shape)
    return (y, x) if reverse else (x, y)
  def _bcast(self, shape: tuple[int, ...]) -> Tensor:
    if self.shape == shape: return self
    x = self.reshape((1,) * (len(shape) - self.ndim) + self.shape) if self.ndim < len(shape) else self
    return x.expand(shape)
  def _alu(self, op: Ops, *srcs: Tensor) -> Tensor:
    # (loops, no generators: this builds the node of every elementwise op)
    cmp = op in GroupOp.Comparison
    dt = dtypes.bool if cmp else (srcs[-1].uop.dtype if op is Ops.WHERE else self.uop.dtype)
    rg = self.requires_grad
    uops = [self.uop]
    for s in srcs:
      uops.append(s.uop)
      if s.requires_grad: rg = True
    u = make_keyed(op, dt, tuple(uops), None, None)   # (UOp(op, dt, srcs) without its argument checks)
    # the operands are broadcast already: where their shapes are known and equal, so is the result's (shape_of would
    # find the same, one inference per op later)
    if u._shape is None and (sh := uops[0]._shape) is not None:
      for x in uops:
        if x._shape != sh: break
      else: set_shape(u, sh)
    return self._new(u, requires_grad=True if rg and not cmp and dtypes.is_float(dt) else None)

  def add(self, y: Any, alpha: Any = 1) -> Tensor:
    """self + alpha * y, broadcast, with PyTorch's type promotion."""
    x, y = self._operands(y if alpha == 1 else y * alpha)
    return x._alu(Ops.ADD, y)
  def sub(self, y: Any, alpha: Any = 1) -> Tensor:
    """self - alpha * y, broadcast, with PyTorch's type promotion (bool tensors are refused)."""
    x, y = self._operands(y if alpha == 1 else y * alpha)
    if x.dtype == dtypes.bool: raise TypeError("subtraction of bool tensors is not supported; use logical_xor")
    return x._alu(Ops.SUB, y)
  def mul(self, y: Any) -> Tensor:
    """self * y, broadcast, with PyTorch's type promotion."""
    x, y = self._operands(y)
    return x._alu(Ops.MUL, y)
  def div(self, y: Any, rounding_mode: str | None = None) -> Tensor:
    """self / y: true division (ints give float); rounding_mode 'trunc' or 'floor' rounds the quotient."""
    if rounding_mode not in (None, "trunc", "floor"):
      raise RuntimeError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found {rounding_mode!r}")
    if rounding_mode == "floor": return self.floor_divide(y)
    if rounding_mode == "trunc":
      x, yy = self._operands(y)
      return x._alu(Ops.IDIV, yy) if not dtypes.is_float(x.dtype) else (x / yy).trunc()
    x, y = self._operands(y, out_float=True)
    return x._alu(Ops.FDIV, y)
  def floor_divide(self, y: Any) -> Tensor:
    """self // y rounded toward -inf, as Python and PyTorch (ints exactly; a zero int divisor gives 0, PyTorch raises)."""
    x, yy = self._operands(y)
    if dtypes.is_float(x.dtype): return (x / yy).floor()
    q = x._alu(Ops.IDIV, yy)
    r = x._alu(Ops.MOD, yy)
    # truncation -> floor: subtract one where the remainder is nonzero and the signs differ
    fix = (r.ne(0)) & ((r < 0).ne(yy < 0))
    return fix.where(q - 1, q)
  def remainder(self, y: Any) -> Tensor:
    """x - floor(x / y) * y: the sign of y, as Python's %. Computed as PyTorch does, from fmod: where fmod's result is
    nonzero and its sign differs from y's, y is added; so a zero keeps the sign of x, x % inf is x for x >= 0 and
    inf for x < 0 (-inf: the mirror image), and an infinite x gives NaN."""
    x, yy = self._operands(y)
    if dtypes.is_float(x.dtype):
      xd, yd = x.detach(), yy.detach()
      m = _fmod_value(xd, yd)
      fix = m.ne(0) & (m < 0).ne(yd < 0)
      return with_grad(fix.where(m + yd, m), (x, xd.ones_like()), (yy, -(xd / yd).floor()))
    r = x._alu(Ops.MOD, yy)
    fix = (r.ne(0)) & ((r < 0).ne(yy < 0))
    return fix.where(r + yy, r)
  def fmod(self, y: Any) -> Tensor:
    """x - trunc(x / y) * y: the sign of x, as C's fmod (zeros included); fmod(x, +-inf) is x for finite x, NaN for an
    infinite x or a zero y."""
    x, yy = self._operands(y)
    if not dtypes.is_float(x.dtype): return x._alu(Ops.MOD, yy)
    xd, yd = x.detach(), yy.detach()
    return with_grad(_fmod_value(xd, yd), (x, xd.ones_like()), (yy, -(xd / yd).trunc()))
  def pow(self, y: Any) -> Tensor:
    """self ** y with PyTorch's special cases (0**0 = 1, 0**-1 = inf, signs of negative bases, ints stay ints); gradients by PyTorch's formulas."""
    if isinstance(y, float) and not dtypes.is_float(self.dtype): return self.float().pow(y)  # int ** 2.0 is float
    if isinstance(y, (int, float)) and not isinstance(y, bool):
      if isinstance(y, int) and y < 0 and not dtypes.is_float(self.dtype):
        raise RuntimeError(f"Integers to negative integer powers are not allowed ({self.dtype} tensor ** {y}): use a float tensor")
      if y == 0 and isinstance(y, int) and self.dtype != dtypes.bool: return self.ones_like()
      if y == 2: return self * self
      if y == 1: return self * 1
      if y == 0.5: return self.float().sqrt() if not dtypes.is_float(self.dtype) else self.sqrt()
      if y == -1: return self.reciprocal()
      if y == -0.5: return self.float().rsqrt() if not dtypes.is_float(self.dtype) else self.rsqrt()  # PyTorch's rsqrt path: (-0.0) ** -0.5 is -inf
      if float(y).is_integer() and 3 <= abs(y) <= 8 and dtypes.is_float(self.dtype): return self._small_int_pow(int(y))
      if isinstance(y, int) and y > 0 and not dtypes.is_float(self.dtype):
        out, base, e = Tensor.ones_like(self), self, y
        while e:
          if e & 1: out = out * base
          base, e = base * base, e >> 1
        return out
    x, yy = self._operands(y)
    if not dtypes.is_float(x.dtype) and x.dtype != dtypes.bool: return x._int_pow(yy)  # int ** int tensor stays int
    x, yy = self._operands(y, out_float=True)
    out = x.dtype
    if out in (dtypes.float16, dtypes.bfloat16): x, yy = x.float(), yy.float()  # computed in float32, rounded once
    xd, yd = x.detach(), yy.detach()
    v = _pow_value(xd, yd)
    # PyTorch's formulas: y x^(y-1) (0 where y == 0) and x^y log(x) (0 where x == 0 and y >= 0)
    dx = yd.eq(0).where(0.0, yd * _pow_value(xd, yd - 1))
    dy = (xd.eq(0) & (yd >= 0)).where(0.0, v * xd.log())
    return with_grad(v, (x, dx), (yy, dy)).cast(out)
  def _small_int_pow(self, n: int) -> Tensor:
    """x ** n for a small integer n by multiplications (exact where PyTorch's pow is, unlike exp2(n log2 x)); gradient
    n x^(n-1) given directly, so 0 ** -3 has PyTorch's -inf gradient instead of inf * 0."""
    x = self.detach()
    def mul_pow(k: int) -> Tensor:
      out, b = None, x
      while k:
        if k & 1: out = b if out is None else out * b
        b, k = b * b, k >> 1
      return out if out is not None else x.ones_like()
    v = mul_pow(abs(n)) if n > 0 else mul_pow(-n).reciprocal()
    d = n * (mul_pow(n - 1) if n > 1 else mul_pow(1 - n).reciprocal())
    return with_grad(v, (self, d))
  def _int_pow(self, e: Tensor) -> Tensor:
    """self ** e for int tensors of one dtype and shape, exactly: square-and-multiply over the low 6 bits of e.
    Past them (e >= 64) and for e < 0 only bases 0, 1, -1 have an int result (others: 0, as PyTorch gives for e < 0)."""
    out, b = self.ones_like(), self
    for bit in range(6):
      out = ((e >> bit) & 1).ne(0).where(out * b, out)
      b = b * b
    odd = (e & 1).ne(0)
    unit = self.eq(1).where(1, self.eq(-1).where(odd.where(-1, 1), 0)).cast(self.dtype)
    edge = (e >= 64) | (e < 0) if not dtypes.is_unsigned(e.dtype) else e >= 64
    return edge.where(unit, out)
  def __add__(self, y: Any) -> Tensor:
    x, y2 = self._operands(y)
    return x._alu(Ops.ADD, y2)
  def __radd__(self, y: Any) -> Tensor: x, y2 = self._operands(y, reverse=True); return x._alu(Ops.ADD, y2)
  def __sub__(self, y: Any) -> Tensor: return self.sub(y)
  def __rsub__(self, y: Any) -> Tensor: x, y2 = self._operands(y, reverse=True); return x._alu(Ops.SUB, y2)
  def __mul__(self, y: Any) -> Tensor:
    x, y2 = self._operands(y)
    return x._alu(Ops.MUL, y2)
  def __rmul__(self, y: Any) -> Tensor: x, y2 = self._operands(y, reverse=True); return x._alu(Ops.MUL, y2)
  def __truediv__(self, y: Any) -> Tensor: return self.div(y)
  def __rtruediv__(self, y: Any) -> Tensor: x, y2 = self._operands(y, reverse=True, out_float=True); return x._alu(Ops.FDIV, y2)
  def __floordiv__(self, y: Any) -> Tensor: return self.floor_divide(y)
  def __rfloordiv__(self, y: Any) -> Tensor: x, y2 = self._operands(y, reverse=True); return x.floor_divide(y2)
  def __mod__(self, y: Any) -> Tensor: return self.remainder(y)
  def __rmod__(self, y: Any) -> Tensor: x, y2 = self._operands(y, reverse=True); return x.remainder(y2)
  def __pow__(self, y: Any) -> Tensor: return self.pow(y)
  def __rpow__(self, y: Any) -> Tensor: x, y2 = self._operands(y, reverse=True); return x.pow(y2)
  def __matmul__(self, y: Tensor) -> Tensor: return self.matmul(y)
  def __rmatmul__(self, y: Tensor) -> Tensor: return y.matmul(self)
  def __neg__(self) -> Tensor: return self.neg()
  def __abs__(self) -> Tensor: return self.abs()
  def __invert__(self) -> Tensor: return self.bitwise_not()
  def __lt__(self, y: Any) -> Tensor:
    """self < y elementwise (bool), broadcast."""
    x, y2 = self._operands(y); return x._alu(Ops.CMPLT, y2)
  def __gt__(self, y: Any) -> Tensor:
    """self > y elementwise (bool), broadcast."""
    x, y2 = self._operands(y); return y2._alu(Ops.CMPLT, x)
  def __le__(self, y: Any) -> Tensor: return (self > y).logical_not()._nan_guard(self, y)
  def __ge__(self, y: Any) -> Tensor: return (self < y).logical_not()._nan_guard(self, y)
  def _nan_guard(self, x: Tensor, y: Any) -> Tensor:
    # not(a > b) is true for NaN; a <= b must be false there
    if not dtypes.is_float(x.dtype) and not (isinstance(y, Tensor) and dtypes.is_float(y.dtype)) and not isinstance(y, float): return self
    a, b = x._operands(y)
    return self & a.eq(a) & b.eq(b)
  def eq(self, y: Any) -> Tensor:
    """self == y elementwise (bool), broadcast."""
    x, y2 = self._operands(y); return x._alu(Ops.CMPEQ, y2)
  def ne(self, y: Any) -> Tensor:
    """self != y elementwise (bool), broadcast."""
    x, y2 = self._operands(y); return x._alu(Ops.CMPNE, y2)
  __eq__ = eq  # type: ignore[assignment]
  __ne__ = ne  # type: ignore[assignment]
  lt, gt = __lt__, __gt__
  def le(self, y: Any) -> Tensor:
    """self <= y elementwise (bool), broadcast; False where either is NaN."""
    return self <= y
  def ge(self, y: Any) -> Tensor:
    """self >= y elementwise (bool), broadcast; False where either is NaN."""
    return self >= y
  def _bitwise(self, op: Ops, y: Any) -> Tensor:
    x, y2 = self._operands(y)
    if dtypes.is_float(x.dtype): raise TypeError(f"bitwise {op.name.lower()} needs integer or bool tensors, got {x.dtype}")
    return x._alu(op, y2)
  def __and__(self, y: Any) -> Tensor:
    """self & y for int and bool tensors."""
    return self._bitwise(Ops.AND, y)
  def __or__(self, y: Any) -> Tensor:
    """self | y for int and bool tensors."""
    return self._bitwise(Ops.OR, y)
  def __xor__(self, y: Any) -> Tensor:
    """self ^ y for int and bool tensors."""
    return self._bitwise(Ops.XOR, y)
  __rand__, __ror__, __rxor__ = __and__, __or__, __xor__
  bitwise_and, bitwise_or, bitwise_xor = __and__, __or__, __xor__
  def __lshift__(self, y: Any) -> Tensor: return self._bitwise(Ops.SHL, y)
  def __rshift__(self, y: Any) -> Tensor: return self._bitwise(Ops.SHR, y)
  def bitwise_not(self) -> Tensor:
    """~self: bits inverted (logical not for bool)."""
    if self.dtype == dtypes.bool: return self.logical_not()
    return self ^ -1 if not dtypes.is_unsigned(self.dtype) else self ^ int(dtypes.max(self.dtype))
  def logical_not(self) -> Tensor:
    """True where self is zero (bool result)."""
    return self.cast(dtypes.bool)._alu(Ops.CMPNE, Tensor(UOp.const(dtypes.bool, True), device=self.device)._bcast(self.shape))
  def logical_and(self, y: Any) -> Tensor:
    """self and y, elementwise, as bools."""
    return self.bool() & (y.bool() if isinstance(y, Tensor) else bool(y))
  def logical_or(self, y: Any) -> Tensor:
    """self or y, elementwise, as bools."""
    return self.bool() | (y.bool() if isinstance(y, Tensor) else bool(y))
  def logical_xor(self, y: Any) -> Tensor:
    """self xor y, elementwise, as bools."""
    return self.bool() ^ (y.bool() if isinstance(y, Tensor) else bool(y))
  def maximum(self, y: Any) -> Tensor:
    """The larger of self and y elementwise (NaN propagates; ties split the gradient evenly, as PyTorch)."""
    x, y2 = self._operands(y); return x._alu(Ops.MAX, y2)
  def minimum(self, y: Any) -> Tensor:
    """The smaller of self and y elementwise (NaN propagates)."""
    x, y2 = self._operands(y)
    if not dtypes.is_float(x.dtype): return (x < y2).where(x, y2)  # ints: -x overflows for the most negative value
    return -((-x)._alu(Ops.MAX, -y2))
  def where(self: Tensor, x: Any, y: Any) -> Tensor:
    """self (a condition) selects x where True, y elsewhere; all three broadcast; x and y promote."""
    cond = self.bool() if self.dtype != dtypes.bool else self
    if isinstance(x, Tensor): a, b = x._operands(y)
    elif isinstance(y, Tensor): b, a = y._operands(x)
    else:
      d = least_upper(promote_with_scalar(dtypes.bool, x), promote_with_scalar(dtypes.bool, y))
      a, b = Tensor(UOp.const(d, x), device=self.device), Tensor(UOp.const(d, y), device=self.device)
    shape = broadcast_shape(cond.shape, a.shape, b.shape)
    return cond._bcast(shape)._alu(Ops.WHERE, a._bcast(shape), b._bcast(shape))
  def clip(self, min_: Any = None, max_: Any = None, *, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
    """Values limited to [min, max] (either may be None); the gradient at a bound goes to the input, as PyTorch's clamp."""
    min_, max_ = (min if min_ is None else min_), (max if max_ is None else max_)
    if min_ is None and max_ is None: raise RuntimeError("clip needs at least one of min or max")
    # where, not maximum/minimum: at x == min the gradient goes to x whole (maximum splits ties), as in PyTorch
    out = self
    if min_ is not None: out = (out < min_).where(min_, out)
    if max_ is not None: out = (out > max_).where(max_, out)
    return out
  clamp = clip
  def neg(self) -> Tensor:
    """-self (bool tensors are refused, as in PyTorch)."""
    if self.dtype == dtypes.bool: raise TypeError("negation of a bool tensor: use logical_not")
    return self._alu(Ops.NEG)
  def _float(self) -> Tensor: return self if dtypes.is_float(self.dtype) else self.cast(dtypes.default_float)
  def exp2(self) -> Tensor:
    """2 ** x (ints compute in float32)."""
    return self._float()._alu(Ops.EXP2)
  def log2(self) -> Tensor:
    """Base-2 logarithm (ints compute in float32)."""
    return self._float()._alu(Ops.LOG2)
  def exp(self) -> Tensor:
    """e ** x (ints compute in float32)."""
    return (self._float() * (1 / math.log(2)))._alu(Ops.EXP2)
  def log(self) -> Tensor:
    """Natural logarithm (ints compute in float32)."""
    return self._float()._alu(Ops.LOG2) * math.log(2)
  def log10(self) -> Tensor:
    """Base-10 logarithm."""
    return self.log2() * (math.log(2) / math.log(10))
  def log1p(self) -> Tensor:
    """log(1 + x), accurate near 0 (a series there, see ops/mathfn.py)."""
    return _mathfn.log1p(self)
  def expm1(self) -> Tensor:
    """exp(x) - 1, accurate near 0 (a series there, see ops/mathfn.py)."""
    return _mathfn.expm1(self)
  def sqrt(self) -> Tensor:
    """Square root (NaN below 0)."""
    return self._float()._alu(Ops.SQRT)
  def rsqrt(self) -> Tensor:
    """1 / sqrt(x)."""
    return self.sqrt().reciprocal()
  def reciprocal(self) -> Tensor:
    """1 / x (ints compute in float32)."""
    return self._float()._alu(Ops.RECIP)
  def square(self) -> Tensor:
    """x * x."""
    return self * self
  def sin(self) -> Tensor:
    """Sine (radians)."""
    return self._float()._alu(Ops.SIN)
  def cos(self) -> Tensor:
    """Cosine (radians), computed as 1 - 2 sin^2(x/2) so large arguments keep their accuracy."""
    # 1 - 2 sin^2(x/2): x/2 is exact, where pi/2 - x rounds x away (cos(1e4) was off by 1.5e-4 in float32)
    s = (self._float() * 0.5).sin()
    return 1 - 2 * s * s
  def tan(self) -> Tensor:
    """Tangent: sin / cos."""
    return self.sin() / self.cos()
  @method_recipe("sigmoid")
  def sigmoid(self) -> Tensor:
    """1 / (1 + exp(-x)), from exp(-|x|) so nothing overflows; gradient s (1 - s), finite for any x."""
    x = self._float()
    xd = x.detach()
    e = (-xd.abs()).exp()
    r = (1 + e).reciprocal()
    s = (xd >= 0).where(r, e * r)
    return with_grad(s, (x, s * (1 - s)))
  @method_recipe("tanh")
  def tanh(self) -> Tensor:
    """Hyperbolic tangent, accurate near 0 (through expm1); gradient 1 - tanh^2, finite for any x."""
    return _mathfn.tanh(self)
  @method_recipe("relu")
  def relu(self) -> Tensor:
    """max(x, 0); as PyTorch: NaN and -0.0 stay, the gradient at 0 is 0."""
    if not dtypes.is_float(self.dtype): return (self > 0).where(self, self.zeros_like_uop())
    # self * 0: a zero with x's sign and no gradient; NaN passes with gradient 1, as PyTorch's threshold_backward gives
    return (self < 0).where(self.zeros_like_uop(), ((self > 0) | self.isnan()).where(self, self * 0))
  def zeros_like_uop(self) -> Tensor:
    """A zero constant broadcast to this tensor's shape (a view of one constant: no buffer)."""
    return Tensor(UOp.const(self.dtype, 0), device=self.device)._bcast(self.shape)
  @method_recipe("leaky_relu")
  def leaky_relu(self, neg_slope: float = 0.01) -> Tensor:
    """x for x > 0, neg_slope * x elsewhere (gradient neg_slope at 0, as PyTorch)."""
    return (self > 0).where(self, self * neg_slope)
  @method_recipe("elu")
  def elu(self, alpha: float = 1.0) -> Tensor:
    """x for x > 0, alpha (exp(x) - 1) elsewhere; the exponential sees only x <= 0, so no inf * 0 reaches the gradient."""
    pos = self > 0
    return pos.where(self, alpha * pos.where(0.0, self).expm1())
  def selu(self) -> Tensor:
    """scale * elu(x, alpha) with the self-normalizing constants."""
    return 1.0507009873554805 * self.elu(1.6732632423543772)
  def celu(self, alpha: float = 1.0) -> Tensor:
    """max(0, x) + min(0, alpha (exp(x / alpha) - 1))."""
    pos = self > 0
    return pos.where(self, alpha * (pos.where(0.0, self) / alpha).expm1())
  @method_recipe("erf")
  def erf(self) -> Tensor:
    """Error function (Abramowitz & Stegun 7.1.26, |error| < 1.5e-7); gradient 2/sqrt(pi) exp(-x^2)."""
    x = self._float()
    xd = x.detach()
    t = 1.0 / (1.0 + 0.3275911 * xd.abs())
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * (-(xd * xd)).exp()
    return with_grad(xd.sign() * y, (x, (2 / math.sqrt(math.pi)) * (-(xd * xd)).exp()))
  @method_recipe("gelu")
  def gelu(self, approximate: str = "none") -> Tensor:
    """x * Phi(x) with the erf form, or approximate='tanh' for the tanh formula."""
    if approximate not in ("none", "tanh"): raise RuntimeError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    if approximate == "tanh": return 0.5 * self * (1 + (math.sqrt(2 / math.pi) * (self + 0.044715 * self * self * self)).tanh())
    return 0.5 * self * (1 + (self * (1 / math.sqrt(2))).erf())
  def quick_gelu(self) -> Tensor:
    """x * sigmoid(1.702 x)."""
    return self * (self * 1.702).sigmoid()
  @method_recipe("silu")
  def silu(self) -> Tensor:
    """x * sigmoid(x)."""
    return self * self.sigmoid()
  swish = silu
  @method_recipe("mish")
  def mish(self) -> Tensor:
    """x * tanh(softplus(x))."""
    return self * self.softplus().tanh()
  @method_recipe("softplus")
  def softplus(self, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta x)) / beta, x itself where beta x > threshold; gradient sigmoid(beta x) (1 past the threshold)."""
    x = self._float()
    bx = x.detach() * beta
    soft = (-bx.abs()).exp().log1p() + bx.maximum(0)
    over = bx > threshold
    return with_grad(over.where(x.detach(), soft / beta), (x, over.where(1.0, bx.sigmoid())))
  def hardtanh(self, min_val: float = -1, max_val: float = 1) -> Tensor:
    """Values clipped to [min_val, max_val]."""
    return self.clip(min_val, max_val)
  def hardsigmoid(self) -> Tensor:
    """clip(x / 6 + 1/2, 0, 1)."""
    return (self / 6 + 0.5).clip(0, 1)
  def hardswish(self) -> Tensor:
    """x * clip(x + 3, 0, 6) / 6."""
    return self * (self + 3).clip(0, 6) / 6
  def relu6(self) -> Tensor:
    """clip(x, 0, 6)."""
    return self.clip(0, 6)
  def logsigmoid(self) -> Tensor:
    """log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)), finite for any x; gradient sigmoid(-x)."""
    x = self._float()
    xd = x.detach()
    return with_grad(xd.minimum(0) - (-xd.abs()).exp().log1p(), (x, (-xd).sigmoid()))
  def abs(self) -> Tensor:
    """|x|; abs(-0.0) is +0.0 and the gradient at 0 is 0 (sign(x)), as in PyTorch."""
    if dtypes.is_unsigned(self.dtype) or self.dtype == dtypes.bool: return self
    if dtypes.is_float(self.dtype): return self * self.sign() + 0.0  # sign carries no gradient; + 0.0 turns -0.0 into +0.0
    return (self < 0).where(-self, self)
  def sign(self) -> Tensor:
    """-1, 0 or 1 by the sign (0 for NaN; bools and unsigned ints as themselves)."""
    if self.dtype == dtypes.bool: return self
    return (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype) if not dtypes.is_unsigned(self.dtype) else (self > 0).cast(self.dtype)
  def trunc(self) -> Tensor:
    """Rounded toward zero (ints unchanged)."""
    return self._alu(Ops.TRUNC) if dtypes.is_float(self.dtype) else self
  def floor(self) -> Tensor:
    """Rounded toward -inf (ints unchanged)."""
    if not dtypes.is_float(self.dtype): return self
    t = self.trunc()
    return (t > self).where(t - 1, t)
  def ceil(self) -> Tensor:
    """Rounded toward +inf (ints unchanged)."""
    if not dtypes.is_float(self.dtype): return self
    t = self.trunc()
    return (t < self).where(t + 1, t)
  def round(self, decimals: int = 0) -> Tensor:
    """Rounded to the nearest integer, halves to even (or to `decimals` places), as PyTorch."""
    if not dtypes.is_float(self.dtype): return self
    if decimals: return (self * 10 ** decimals).round() / 10 ** decimals
    # half to even, as PyTorch does
    f = (self + 0.5).floor()
    half = (f - self).eq(0.5)
    odd = (f * 0.5).floor().ne(f * 0.5)
    return (half & odd).where(f - 1, f)
  def frac(self) -> Tensor:
    """x - trunc(x)."""
    return self - self.trunc()
  def lerp(self, end: Tensor, weight: Any) -> Tensor:
    """self + weight * (end - self)."""
    return self + (end - self) * weight
  def isnan(self) -> Tensor:
    """True where NaN."""
    return self.ne(self)
  def isinf(self) -> Tensor:
    """True where +inf or -inf."""
    return self.abs().eq(math.inf) if dtypes.is_float(self.dtype) else self.zeros_like_uop().bool()
  def isfinite(self) -> Tensor:
    """True where neither NaN nor infinite."""
    return (self.isnan() | self.isinf()).logical_not()
  def nan_to_num(self, nan: float = 0.0) -> Tensor:
    """NaNs replaced by nan (default 0); unlike PyTorch, infinities are kept."""
    return self.isnan().where(nan, self)

  # ---- reductions
  def _axes(self, dim: Any) -> tuple[int, ...]:
    if dim is None: return tuple(range(self.ndim))
    ds = (dim,) if isinstance(dim, int) else tuple(dim)
    axes = [_axis(d, self.ndim) for d in ds]
    if len(set(axes)) != len(axes): raise RuntimeError(f"dims {ds} name an axis more than once (tensor of shape {self.shape})")
    return tuple(sorted(axes)) if self.ndim else ()
  def _reduce(self, op: Ops, dim: Any = None, keepdim: bool = False) -> Tensor:
    axes = self._axes(dim)
    whole = dim is None
    sh = shape_of(self.uop)
    out_shape = tuple([1 if i in axes else s for i, s in enumerate(sh)])
    if 0 in sh and any(sh[a] == 0 for a in axes):
      from baregrad.ir.ops import identity_element
      if op is Ops.MAX and not (dtypes.is_unsigned(self.dtype) or self.dtype == dtypes.bool):
        # PyTorch: IndexError naming the empty dim, RuntimeError when no dim was given
        if whole: raise RuntimeError(f"max/min of an empty tensor (shape {self.shape}) has no identity: specify the reduction dim")
        raise IndexError(f"max/min: Expected reduction dim {next(a for a in axes if self.shape[a] == 0)} to have non-zero size "
                         f"(shape {self.shape}, axes {axes}): an empty axis has no identity")
      # pad each empty reduced axis to one identity element: the result stays connected to self (its gradient is empty)
      arg = tuple((0, 1) if i in axes and s == 0 else (0, 0) for i, s in enumerate(self.shape))
      ident = identity_element(op, self.dtype)
      x = self._pad(arg)
      if ident != 0: x = Tensor.full(self.shape, True, dtype=dtypes.bool, device=self.device)._pad(arg).where(x, ident)
      r = x._reduce(op, axes, keepdim=True)
    elif not axes or all(self.shape[a] == 1 for a in axes): r = self
    elif prod(out_shape) == 1 and self.numel() >= 1 << 16 and (k := _split_factor(self.numel())):
      # a big full reduction runs as partial results over k rows (in parallel), then a small one over those
      part = self.reshape(k, self.numel() // k)._new(UOp(Ops.REDUCE_AXIS, self.dtype, (self.reshape(k, self.numel() // k).uop,), (op, (1,))))
      r = part._new(UOp(Ops.REDUCE_AXIS, self.dtype, (part.uop,), (op, (0,)))).reshape(out_shape)
    else:   # (the node built with its shape: (op, axes) holds no float, so it is its own hash-consing key)
      r = self._new(_node(Ops.REDUCE_AXIS, self.uop.dtype, (self.uop,), (op, axes), out_shape))
    if keepdim: return r
    new = tuple([s for i, s in enumerate(sh) if i not in axes])
    if shape_of(r.uop) == new: return r
    return r._new(_node(Ops.RESHAPE, r.uop.dtype, (r.uop,), new, new))   # (the same elements: reshape's checks hold)
  def sum(self, dim: Any = None, keepdim: bool = False, dtype: DType | None = None, axis: Any = None) -> Tensor:
    """Sum over dim (all axes when None); ints and bools sum in int64, half/bfloat16 accumulate in float32, as PyTorch."""
    dim = axis if dim is None else dim
    x = self.cast(dtype) if dtype is not None else self.cast(dtypes.int64) if (dtypes.is_int(self.dtype) or self.dtype == dtypes.bool) else self
    if x.dtype in (dtypes.float16, dtypes.bfloat16):  # accumulate in float32, as PyTorch's CPU kernels do
      return x.float()._reduce(Ops.ADD, dim, keepdim).cast(x.dtype)
    return x._reduce(Ops.ADD, dim, keepdim)
  def prod(self, dim: Any = None, keepdim: bool = False, dtype: DType | None = None, axis: Any = None) -> Tensor:
    """Product over dim (all axes when None); ints and bools multiply in int64."""
    dim = axis if dim is None else dim
    x = self.cast(dtype) if dtype is not None else self.cast(dtypes.int64) if (dtypes.is_int(self.dtype) or self.dtype == dtypes.bool) else self
    return x._reduce(Ops.MUL, dim, keepdim)
  def amax(self, dim: Any = None, keepdim: bool = False, axis: Any = None) -> Tensor:
    """Maximum over dim (an int or a tuple; all axes when None), NaN propagating; the gradient is split evenly between
    tied maxima, as torch.amax's."""
    dim = axis if dim is None else dim
    if self.dtype == dtypes.bool: return self.cast(dtypes.uint8)._reduce(Ops.MAX, dim, keepdim).bool()
    return self._reduce(Ops.MAX, dim, keepdim)
  def amin(self, dim: Any = None, keepdim: bool = False, axis: Any = None) -> Tensor:
    """Minimum over dim (an int or a tuple; all axes when None), NaN propagating; ties split the gradient, as torch.amin's."""
    dim = axis if dim is None else dim
    if self.dtype == dtypes.bool: return self.logical_not().amax(dim, keepdim).logical_not()
    # ints: ~x reverses the order without overflow (-x of the most negative int is itself)
    if not dtypes.is_float(self.dtype): return self.bitwise_not().amax(dim, keepdim).bitwise_not()
    return -((-self).amax(dim, keepdim))
  def _max_min(self, dim: Any, keepdim: bool, axis: Any, largest: bool) -> Any:
    if dim is not None and axis is not None and dim is not axis and dim != axis: raise TypeError(f"got both dim={dim} and axis={axis}")
    dim = axis if dim is None else dim
    red = self.amax if largest else self.amin
    if dim is None:
      if keepdim: raise TypeError(f"{'max' if largest else 'min'}(): keepdim=True needs a dim")
      return red()
    if isinstance(dim, Tensor): return self.maximum(dim) if largest else self.minimum(dim)   # torch.max(input, other)
    # several axes (tinygrad's reduction over a tuple; PyTorch refuses it): the values alone
    if isinstance(dim, (tuple, list)): return red(tuple(dim), keepdim)
    d = _axis(dim, self.ndim)
    if self.ndim == 0: return ValuesIndices(red(), Tensor.zeros((), dtype=dtypes.int64, device=self.device))
    if self.shape[d] == 0:
      raise IndexError(f"{'max' if largest else 'min'}(): Expected reduction dim {dim} to have non-zero size (shape {self.shape})")
    idx = self.argmax(d, keepdim=True) if largest else self.argmin(d, keepdim=True)
    vals = red(d, keepdim=True)
    if self.requires_grad:
      # the gradient goes to the element the index names (PyTorch's rule), not split between ties as amax's
      pick = Tensor.arange(self.shape[d], device=self.device, dtype=dtypes.int64).reshape((self.shape[d],) + (1,) * (self.ndim - d - 1)).eq(idx)
      vals = with_grad(vals, (self, pick, (d,)))
    if not keepdim: vals, idx = vals.squeeze(d), idx.squeeze(d)
    return ValuesIndices(vals, idx)
  def max(self, dim: Any = None, keepdim: bool = False, axis: Any = None) -> Any:
    """max(): the maximum of all elements (a 0-d tensor). max(dim, keepdim): (values, indices) along dim as
    torch.return_types.max (the first maximum's index; NaN counts as the maximum; the gradient goes to that index);
    axis= is accepted for dim. max(other_tensor) is maximum(); a tuple of dims gives the values alone (amax)."""
    return self._max_min(dim, keepdim, axis, True)
  def min(self, dim: Any = None, keepdim: bool = False, axis: Any = None) -> Any:
    """min(): the minimum of all elements (a 0-d tensor). min(dim, keepdim): (values, indices) along dim as
    torch.return_types.min; axis= is accepted for dim; min(other_tensor) is minimum(); a tuple of dims gives amin."""
    return self._max_min(dim, keepdim, axis, False)
  def mean(self, dim: Any = None, keepdim: bool = False, axis: Any = None) -> Tensor:
    """Mean over dim (all axes when None), in float (ints compute in float32); NaN for an empty reduction."""
    dim = axis if dim is None else dim
    x = self._float()
    n = prod(x.shape[a] for a in x._axes(dim))
    s = x.sum(dim, keepdim=True)
    out = s * (1.0 / n) if n else s * math.nan
    return out if keepdim else out.reshape(tuple(sz for i, sz in enumerate(x.shape) if i not in x._axes(dim)))
  def var(self, dim: Any = None, keepdim: bool = False, correction: int = 1, axis: Any = None, unbiased: bool | None = None) -> Tensor:
    """Variance over dim with correction (1: unbiased); divides by max(0, n - correction), so too few elements give NaN or inf, as PyTorch."""
    dim = axis if dim is None else dim
    if unbiased is not None: correction = int(unbiased)
    x = self._float()
    n = prod(x.shape[a] for a in x._axes(dim))
    xc = x.detach() - x.detach().mean(dim, keepdim=True)
    # PyTorch divides by max(0, n - correction): 0/0 (one element) is NaN, a positive sum over 0 is inf; its gradient
    # 2 (x - mean) / max(0, n - correction) is given directly (a derived one would meet inf - inf there)
    den = max(0, n - correction)
    return with_grad(xc.square().sum(dim, keepdim=keepdim) / den, (x, 2.0 * xc / den, x._axes(dim)))
  def std(self, dim: Any = None, keepdim: bool = False, correction: int = 1, axis: Any = None, unbiased: bool | None = None) -> Tensor:
    """Standard deviation over dim (see var); its gradient is 0, not NaN, where the variance is 0."""
    v = self.var(dim, keepdim, correction, axis, unbiased)
    # where the variance is 0, sqrt's gradient is inf and 0 * inf made NaN; PyTorch's std gives 0 there
    zero = v.eq(0)
    return zero.where(0.0, zero.where(1.0, v).sqrt())
  def var_mean(self, dim: Any = None, keepdim: bool = False, correction: int = 1) -> tuple[Tensor, Tensor]:
    """(var, mean) over dim."""
    return self.var(dim, keepdim, correction), self.mean(dim, keepdim)
  def std_mean(self, dim: Any = None, keepdim: bool = False, correction: int = 1) -> tuple[Tensor, Tensor]:
    """(std, mean) over dim."""
    return self.std(dim, keepdim, correction), self.mean(dim, keepdim)
  def any(self, dim: Any = None, keepdim: bool = False) -> Tensor:
    """True where any element over dim is non-zero (bool)."""
    return self.bool().amax(dim, keepdim)
  def all(self, dim: Any = None, keepdim: bool = False) -> Tensor:
    """True where every element over dim is non-zero (bool)."""
    return self.logical_not().any(dim, keepdim).logical_not()
  @method_recipe("logsumexp")
  def logsumexp(self, dim: Any = None, keepdim: bool = False) -> Tensor:
    """log(sum(exp(x))) over dim, computed after subtracting the maximum (no overflow)."""
    x = self._float()
    m = x.amax(dim, keepdim=True).detach()
    m = m.isinf().where(0.0, m)
    out = (x - m).exp().sum(dim, keepdim=True).log() + m
    return out if keepdim else out.squeeze_axes(x._axes(dim))
  def squeeze_axes(self, axes: tuple[int, ...]) -> Tensor:
    """The given size-1 axes removed."""
    return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))
  @method_recipe("softmax")
  def softmax(self, dim: int = -1, dtype: Any = None, axis: int | None = None) -> Tensor:
    """exp(x) / sum(exp(x)) along dim (axis= accepted too); ints compute in the default float dtype."""
    dim = dim if axis is None else axis
    x = self.cast(dtype) if dtype else self._float()
    e = (x - x.amax(dim, keepdim=True).detach()).exp()
    return e / e.sum(dim, keepdim=True)
  @method_recipe("log_softmax")
  def log_softmax(self, dim: int = -1, dtype: Any = None, axis: int | None = None) -> Tensor:
    """x - logsumexp(x) along dim (axis= accepted too), computed after subtracting the maximum."""
    dim = dim if axis is None else axis
    x = self.cast(dtype) if dtype else self._float()
    m = x - x.amax(dim, keepdim=True).detach()
    return m - m.exp().sum(dim, keepdim=True).log()
  def argmax(self, dim: int | None = None, keepdim: bool = False, axis: int | None = None) -> Tensor:
    """int64 index of the first maximum along dim (axis= accepted too), of the flattened tensor when dim is None; NaN counts as the maximum."""
    dim = dim if axis is None else axis
    if dim is None: return self.reshape(-1).argmax(0)
    d = _axis(dim, self.ndim)
    n = self.shape[d]
    m = self.amax(d, keepdim=True)
    # the first index of the maximum: largest (n - i) where x == max
    idx = Tensor.arange(n, 0, -1, device=self.device, dtype=dtypes.int32).reshape((n,) + (1,) * (self.ndim - d - 1))
    hit = (self.eq(m) | self.isnan() if dtypes.is_float(self.dtype) else self.eq(m)).where(idx._bcast_to(self.shape), 0)
    return (n - hit.amax(d, keepdim=keepdim)).cast(dtypes.int64)
  def _bcast_to(self, shape: tuple[int, ...]) -> Tensor:
    return self.reshape((1,) * (len(shape) - self.ndim) + self.shape).expand(shape)
  def argmin(self, dim: int | None = None, keepdim: bool = False, axis: int | None = None) -> Tensor:
    """int64 index of the first minimum along dim (axis= accepted too), of the flattened tensor when dim is None."""
    dim = dim if axis is None else axis
    if dtypes.is_float(self.dtype): return (-self).argmax(dim, keepdim)
    return self.bitwise_not().argmax(dim, keepdim)  # ints: no overflow, unlike -x; bools: logical_not
  def cumsum(self, dim: int = 0, dtype: Any = None, axis: int | None = None) -> Tensor:
    """Running sum along dim (axis= accepted too); ints and bools sum in int64, as in PyTorch. Axes up to 256 long are
    one masked-sum kernel (n^2 work); longer ones a log-step scan (scan.py)."""
    dim = dim if axis is None else axis
    if dtype is not None: return self.cast(dtype).cumsum(dim)
    d = _axis(dim, self.ndim)
    if self.ndim == 0: return self.cast(dtypes.int64) if not dtypes.is_float(self.dtype) else self * 1
    n = self.shape[d]
    if n == 0: return self
    if n > 256:  # the masked sum costs n^2 per row: a log-step scan instead (scan.py)
      from baregrad.tensor.ops.scan import cumsum_scan
      x = self.cast(dtypes.int64) if not dtypes.is_float(self.dtype) else self.float() if self.dtype in (dtypes.float16, dtypes.bfloat16) else self
      return cumsum_scan(x, d).cast(self.dtype if dtypes.is_float(self.dtype) else dtypes.int64)
    x = self.transpose(d, -1) if d != self.ndim - 1 else self
    # each output i sums x[0..i]: a lower-triangular mask times the rows, reduced
    tri = Tensor.arange(n, device=self.device).reshape(n, 1) >= Tensor.arange(n, device=self.device).reshape(1, n)
    s = (x.unsqueeze(-2) * tri.cast(x.dtype if x.dtype != dtypes.bool else dtypes.int64)).sum(-1)
    return s.transpose(d, -1) if d != self.ndim - 1 else s
  def cumprod(self, dim: int = 0, dtype: Any = None, axis: int | None = None) -> Tensor:
    """Running product along dim (axis= accepted too); ints and bools multiply in int64, as in PyTorch."""
    dim = dim if axis is None else axis
    if dtype is not None: return self.cast(dtype).cumprod(dim)
    d = _axis(dim, self.ndim)
    if self.ndim == 0: return self.cast(dtypes.int64) if not dtypes.is_float(self.dtype) else self * 1
    n = self.shape[d]
    x = self.transpose(d, -1) if d != self.ndim - 1 else self
    tri = Tensor.arange(n, device=self.device).reshape(n, 1) >= Tensor.arange(n, device=self.device).reshape(1, n)
    s = tri.where(x.unsqueeze(-2), 1).prod(-1)
    return s.transpose(d, -1) if d != self.ndim - 1 else s

  # ---- matmul
  def dot(self, w: Tensor) -> Tensor:
    """matmul() (PyTorch's dot is 1-D only; this accepts any matmul shapes)."""
    return self.matmul(w)
  def matmul(self, w: Tensor) -> Tensor:
    """Matrix product with NumPy/PyTorch broadcasting of batch axes and 1-D promotion; half/bfloat16 multiply and accumulate in float32."""
    x = self
    if x.ndim == 0 or w.ndim == 0: raise RuntimeError(f"matmul of a 0-d tensor: shapes {x.shape} and {w.shape} (both arguments need at least 1 dimension)")
    if x.shape[-1] != w.shape[-2 if w.ndim > 1 else 0]:
      raise RuntimeError(f"matmul: inner dimensions differ: {x.shape} @ {w.shape} ({x.shape[-1]} vs {w.shape[-2 if w.ndim > 1 else 0]})")
    if (fast := _matmul_fast(x, w)) is not None: return fast
    xv = x.unsqueeze(0) if x.ndim == 1 else x
    wv = w.unsqueeze(-1) if w.ndim == 1 else w
    d = promote(x.dtype, w.dtype)
    xv, wv = xv.cast(d), wv.cast(d)
    # half/bfloat16: products and sums in float32, rounded once at the end, as PyTorch's matmuls accumulate
    if d in (dtypes.float16, dtypes.bfloat16): xv, wv = xv.float(), wv.float()
    # (..., n, 1, k) * (..., 1, m, k) summed over k
    out = (xv.unsqueeze(-2) * wv.transpose(-1, -2).unsqueeze(-3)).sum(-1, dtype=xv.dtype).cast(d)  # int32 @ int32 stays int32, as in PyTorch
    if x.ndim == 1: out = out.squeeze(-2)
    if w.ndim == 1: out = out.squeeze(-1)
    return out
  def linear(self, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """self @ weight.T + bias: (*, in) with weight (out, in) -> (*, out)."""
    out = self.matmul(weight.T if weight.ndim == 2 else weight)
    return out + bias if bias is not None else out

  # ---- autograd
  def backward(self, gradient: Tensor | None = None, retain_graph: bool = False) -> Tensor:
    """Accumulate d(self)/d(leaf) into .grad of every tensor that requires grad (a scalar self unless gradient is given)."""
    from baregrad.tensor.autograd import backward
    backward(self, gradient, retain_graph)
    return self

  # ---- misc
  def __getitem__(self, idx: Any) -> Tensor:
    from baregrad.tensor.indexing import getitem
    return getitem(self, idx)
  def __setitem__(self, idx: Any, v: Any) -> None:
    from baregrad.tensor.indexing import setitem
    setitem(self, idx, v)

def _is_dtype_arg(x: Any) -> bool:
  try: to_dtype(x); return True
  except (TypeError, ValueError): return False

def _zero_sign_of(r: Tensor, x: Tensor) -> Tensor:
  """r, with its zeros given the sign of x (x * 0 is a zero with x's sign where x is finite)."""
  return r.eq(0).where(x * 0.0, r)

def _fmod_value(x: Tensor, y: Tensor) -> Tensor:
  """C's fmod for float tensors of one dtype (no gradient): x - trunc(x / y) * y, zeros with the sign of x, and x
  itself for a finite x and an infinite y (where the formula would give 0 * inf = NaN)."""
  r = _zero_sign_of(x - (x / y).trunc() * y, x)
  return (y.isinf() & x.isfinite()).where(x, r)

def _pow_value(x: Tensor, y: Tensor) -> Tensor:
  """x ** y for float tensors of one shape, with C's pow (and PyTorch's) at the edges: exp2(y log2|x|) with the sign
  of a negative base for odd integer exponents; NaN for a finite negative base with a non-integer exponent; x ** 0,
  1 ** y and (-1) ** +-inf are 1 (NaNs included); (+-0) ** negative is inf (-inf for -0.0 and odd exponents);
  (-inf) ** y is inf, 0 or -inf by y's sign and parity."""
  ax = x.abs()
  # exp2(y log2 |x|) multiplies the rounding error of log2 by y: float32 (and half) compute it in float64 where the
  # device has it, so results are correctly rounded in practice (3.0 ** 3.0 is 27, not 27.000002)
  if x.dtype == dtypes.float32 and Device[x.device].supports_dtype(dtypes.float64):
    mag = (y.cast(dtypes.float64) * ax.cast(dtypes.float64).log2()).exp2().cast(x.dtype)
  else: mag = (y * ax.log2()).exp2()
  yint = y.trunc().eq(y)
  odd = yint & y.abs().fmod(2).eq(1)
  neg = x.signbit()
  res = (neg & odd).where(-mag, mag)
  res = (neg & yint.logical_not() & ax.isfinite() & ax.ne(0)).where(math.nan, res)
  return (y.eq(0) | x.eq(1) | (x.eq(-1) & y.isinf())).where(1.0, res)

def _split_factor(n: int) -> int:
  for k in (256, 128, 64, 32, 16):
    if n % k == 0 and n // k >= 256: return k
  return 0

def _unit(bits: Tensor, shape: tuple[int, ...]) -> Tensor:
  """float32 in [0, 1) of the given shape from random uint32 bits: their top 24 bits over 2^24."""
  return ((bits >> 8).cast(dtypes.float32) * (1.0 / (1 << 24))).reshape(shape)

def _threefry(x0: Tensor, x1: Tensor, k0: Tensor, k1: Tensor) -> Tensor:
  """Threefry-2x32 with 20 rounds of the counter (x0, x1) under the key (k0, k1), broadcast to x0's shape: the first
  output word. One THREEFRY node (ir/alu.py threefry2x32): its ~130 operations are expanded where the kernel is built,
  so a draw costs the graph a handful of nodes, not a tensor op per operation."""
  shape = x0.shape
  return x0._alu(Ops.THREEFRY, x1._bcast(shape), k0._bcast(shape), k1._bcast(shape))

def _f32_to_bf16_np(a: np.ndarray) -> np.ndarray:
  u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
  r = ((u + 0x7fff + ((u >> 16) & 1)) >> 16).astype(np.uint16)
  nan = np.isnan(np.asarray(a, np.float32))
  return np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), r)

def _bf16_to_f32_np(a: np.ndarray) -> np.ndarray:
  return (a.astype(np.uint32) << 16).view(np.float32)

