"""Tensor: a lazy, PyTorch-like array. Every op builds UOps; realize() schedules them into generated kernels."""
from __future__ import annotations
import contextlib, functools, threading, weakref
from typing import Any
import numpy as np
from baregrad.helpers import prod
from baregrad.ir.dtype import DType, dtypes, ALL, torch_name
from baregrad.ir.ops import UOp, Ops
from baregrad.ir.sint import has_sym, max_shape, bound_shape
from baregrad.hal import Device, Buffer
from baregrad.engine.graph import BufRef, shape_of, base_of, stale_error
from baregrad.engine import lazy, checks
from baregrad.tensor import live, hostdata
from baregrad.tensor.inplace import bind as _bind
from baregrad.tensor.grad_mode import is_grad_enabled, _state as _grad_state
from baregrad.tensor.ops.elementwise import ElementwiseOps
from baregrad.tensor.ops.creation import CreationOps
from baregrad.tensor.ops.random import RandomOps
from baregrad.tensor.ops.movement import MovementOps
from baregrad.tensor.ops.activation import ActivationOps
from baregrad.tensor.ops.reduction import ReductionOps
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
from baregrad.tensor.common import _all_grad_tensors, _axis, _is_whole_buffer

# while a jit captures (tensor/jit.py): (the array or None for a list, the dtype asked for, device, uop) of every
# tensor made from host data, so arrays passed to the function become inputs of the replay, not baked-in values
host_watch: list | None = None

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
  except TypeError: raise TypeError(f"dtype must be a baregrad dtype, a NumPy dtype, a Python type or a name like 'float16', got {type(d).__name__} "
      f"{d!r}") from None
  return _from_np_dtype(npd)

ALL_NAMES = [torch_name(x) for x in ALL]

def _tensor_of(u: UOp, device: str) -> Tensor:
  """Tensor(u, device=device) for a node the caller built on that (canonical) device: without the argument checks."""
  t = _object_new(Tensor)
  t.uop, t.device, t.grad, t.requires_grad = u, device, None, None
  live.track(t)
  return t

_object_new = object.__new__

class Tensor(ElementwiseOps, CreationOps, RandomOps, MovementOps, ActivationOps, ReductionOps, MathOps, ScanOps, SortingOps, ShapeOps,
             IndexingOps, LinalgOps, ConvOps, NormOps, AttentionOps, LossOps, InplaceOps):
  """A lazy tensor on a device. Ops return new tensors; nothing runs until realize(), numpy(), item() or tolist().
  This class holds the core (construction, realization, conversion, autograd entry, indexing); the op families are
  the mixins above (tensor/ops/)."""
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
      # (checked against the dtype as torch.tensor checks it: tensor/hostdata.py)
      v, d = hostdata.scalar_value(data, dtype, dtypes.default_float)
      self.uop = UOp.const(d, v)
    elif isinstance(data, (list, tuple)):
      arr, dtype = hostdata.python_values(data, dtype, dtypes.default_float)
      self.uop = self._from_numpy(arr if dtype != dtypes.bfloat16 else _f32_to_bf16_np(arr), dtype)
      if host_watch is not None: host_watch.append((None, dtype, self.device, self.uop))
    elif isinstance(data, (np.ndarray, np.generic)):
      src = data
      data = np.asarray(data)
      d = dtype or _from_np_dtype(data.dtype)
      if dtype is not None: data = hostdata.array_values(data, d)   # (as .cast() converts)
      self.uop = self._from_numpy(data if d != dtypes.bfloat16 or dtype is None else _f32_to_bf16_np(data), d)
      if host_watch is not None: host_watch.append((src, dtype, self.device, self.uop))
    else: raise TypeError(f"cannot make a Tensor from {type(data).__name__}")
    live.track(self)  # an in-place write first computes the live tensors that read what it overwrites
    if requires_grad:
      if not dtypes.is_float(self.dtype): raise RuntimeError(f"only float tensors can require gradients, got {self.dtype} (shape {self.shape})")
      _all_grad_tensors[id(self)] = self

  def _from_numpy(self, arr: np.ndarray, dtype: DType) -> UOp:
    if not Device[self.device].supports_dtype(dtype): raise TypeError(f"dtype {dtype} is not supported on device {self.device}")
    # any strides (negative, zero, gaps) and byte order in: C-contiguous in the machine's byte order out
    arr = hostdata.native(np.ascontiguousarray(arr)).reshape(arr.shape)  # ascontiguousarray makes a 0-d array 1-d
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
    if u.op is Ops.SHRINK and u.src[0].op is Ops.RESHAPE and u.src[0].src[0].op is Ops.BUFFER and has_sym(self.shape):
      pass   # a symbolic-size value realized: the leading corner of its buffer (lazy.buffer_view)
    elif not (u.op is Ops.BUFFER or (u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER)):
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
    if capturing and any(getattr(c, "forbid_host_reads", False) and c.thread == threading.get_ident() for c in capturing):
      from baregrad.tensor.jit import JitError
      raise JitError(f"a jitted function reads a tensor's value on the host (item/numpy/tolist/bool, shape {self.shape}) while it is "
                     "captured: a replay could not reproduce it; return the tensor and read it after the call")
    if has_sym(self.shape):   # symbolic sizes (ir/sint.py): held in the largest shape's layout, read at this call's values
      full = np.empty(max_shape(self.shape), _np_dtype(self.dtype))
      self._buffer().copyout(memoryview(full.reshape(-1)).cast("B"))
      out = full[tuple(slice(0, v) for v in bound_shape(self.shape))].copy()
      return out if self.dtype != dtypes.bfloat16 else _bf16_to_f32_np(out)
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
    if self.numel() != 1: raise RuntimeError(f"a Tensor with {self.numel()} elements cannot be converted to Scalar: item() needs one element, got shape "
        f"{self.shape}")
    return self.numpy().reshape(-1)[0].item()
  def data(self) -> memoryview:
    """The values as a read-only memoryview of a host copy (unlike PyTorch's .data, not a tensor sharing storage)."""
    return memoryview(self.numpy())
  def to(self, device: Any = None, dtype: Any = None) -> Tensor:
    """This tensor on another device and/or as another dtype: t.to("NV"), t.to(dtypes.half), t.to("CPU", "float16"),
    t.to(other) (other's device and dtype). Returns self when nothing changes."""
    if isinstance(device, Tensor): device, dtype = device.device, device.dtype if dtype is None else dtype
    elif isinstance(device, (list, tuple)):   # several devices: a replicated multi-device tensor (tensor/multi.py)
      from baregrad.tensor.multi import MultiTensor
      return MultiTensor.replicate(self if dtype is None else self.cast(dtype), device)
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
  def shard(self, devices: Any, dim: int = 0) -> Any:
    """This tensor split along dim into near-equal parts, one per device: a MultiTensor (tensor/multi.py)."""
    from baregrad.tensor.multi import MultiTensor
    return MultiTensor.shard(self, devices, dim)
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

def _f32_to_bf16_np(a: np.ndarray) -> np.ndarray:
  u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
  r = ((u + 0x7fff + ((u >> 16) & 1)) >> 16).astype(np.uint16)
  nan = np.isnan(np.asarray(a, np.float32))
  return np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), r)

def _bf16_to_f32_np(a: np.ndarray) -> np.ndarray:
  return (a.astype(np.uint32) << 16).view(np.float32)

