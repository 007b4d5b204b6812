"""Tensors over several devices: one part per device, split along one axis (`Tensor.shard(devices, dim)`) or
replicated (`Tensor.to([devices])`). A layer above the scheduler: every op runs as the ordinary per-device graph on
each part; a reduction over the split axis, or a matmul contracting it, ends in an allreduce (tensor/collectives.py).
`.to(one_device)` gathers the parts there."""
from __future__ import annotations
from typing import Any, Sequence
from baregrad.hal.device import Device
from baregrad.tensor import collectives
from baregrad.tensor.tensor import Tensor

def _split(n: int, k: int) -> list[tuple[int, int]]:
  return [(n * i // k, n * (i + 1) // k) for i in range(k)]

def _slice(t: Tensor, ax: int, lo: int, hi: int) -> Tensor:
  return t._shrink(tuple((lo, hi) if i == ax else (0, d) for i, d in enumerate(t.shape)))

class MultiTensor:
  """Parts of one logical tensor on several devices. `axis` is the split axis, None when every device holds all of it."""
  __slots__ = ("parts", "axis")
  def __init__(self, parts: Sequence[Tensor], axis: int | None):
    parts = list(parts)
    collectives.check_devices([p.device for p in parts])
    p0 = parts[0]
    for i, p in enumerate(parts):
      if p.dtype != p0.dtype: raise TypeError(f"multi-device tensor: dtypes disagree: {p0.device} has {p0.dtype}, {p.device} has {p.dtype}")
      if p.ndim != p0.ndim or any(a != b for k, (a, b) in enumerate(zip(p.shape, p0.shape)) if k != axis):
        raise ValueError(f"multi-device tensor: shapes disagree: {p0.device} has {p0.shape}, {p.device} has {p.shape}"
                         + (f" (they may differ only along axis {axis})" if axis is not None else " (replicated parts must be equal)"))
    self.parts, self.axis = parts, axis

  @staticmethod
  def shard(t: Tensor, devices: Sequence[str], dim: int = 0) -> MultiTensor:
    """t split along dim into near-equal parts, one per device (in list order)."""
    names = collectives.check_devices(devices)
    ax = dim + t.ndim if dim < 0 else dim
    if not 0 <= ax < t.ndim: raise IndexError(f"shard: dim {dim} out of range for shape {t.shape}")
    if t.shape[ax] < len(names): raise ValueError(f"shard: dim {dim} of shape {t.shape} has fewer elements than the {len(names)} devices {list(names)}")
    return MultiTensor([_slice(t, ax, lo, hi).to(d) for d, (lo, hi) in zip(names, _split(t.shape[ax], len(names)))], ax)

  @staticmethod
  def replicate(t: Tensor, devices: Sequence[str]) -> MultiTensor:
    """A copy of t on every device."""
    return MultiTensor(collectives.broadcast(t, devices), None)

  # ---- properties
  @property
  def devices(self) -> tuple[str, ...]: return tuple(p.device for p in self.parts)
  @property
  def device(self) -> tuple[str, ...]: return self.devices
  @property
  def dtype(self) -> Any: return self.parts[0].dtype
  @property
  def shape(self) -> tuple[int, ...]:
    s = list(self.parts[0].shape)
    if self.axis is not None: s[self.axis] = sum(p.shape[self.axis] for p in self.parts)
    return tuple(s)
  @property
  def ndim(self) -> int: return len(self.parts[0].shape)
  def numel(self) -> int:
    n = 1
    for d in self.shape: n *= d
    return n
  def __repr__(self) -> str: return f"<MultiTensor {self.shape} {self.dtype} on {list(self.devices)} axis={self.axis}>"

  # ---- realization and gathering
  def realize(self) -> MultiTensor:
    """Compute every part (one schedule over all devices); returns self."""
    collectives.realize(self.parts)
    return self
  def to(self, device: Any) -> Any:
    """One device name: the whole tensor gathered there (a Tensor). A list: the tensor on those devices."""
    if isinstance(device, (list, tuple)):
      return self if tuple(collectives.check_devices(device)) == self.devices else MultiTensor.replicate(self.to(device[0]), device)
    if self.axis is None:
      want = Device.canonicalize(device)   # the part already there, else a copy of the first
      here = [p for p in self.parts if p.device == want]
      return here[0] if here else self.parts[0].to(want)
    return Tensor.cat(*[p.to(device) for p in self.parts], dim=self.axis)
  def numpy(self) -> Any:
    """The whole tensor's values on the host."""
    return self.to(self.devices[0]).numpy()

  # ---- elementwise
  def _map(self, fn: Any, axis: int | None = -1) -> MultiTensor:
    return MultiTensor([fn(p) for p in self.parts], self.axis if axis == -1 else axis)
  def _align(self, other: Any) -> tuple[list[Any], list[Any], int | None]:
    """Per-device operands for a binary op, and the result's split axis. Scalars pass; plain Tensors are refused."""
    if isinstance(other, Tensor):
      raise TypeError(f"an op mixes a multi-device tensor on {list(self.devices)} with a tensor on {other.device} only: "
                      "replicate it with .to(devices) or split it with .shard(devices, dim)")
    if not isinstance(other, MultiTensor): return self.parts, [other] * len(self.parts), self.axis
    if other.devices != self.devices:
      raise ValueError(f"an op mixes multi-device tensors on different devices: {list(self.devices)} and {list(other.devices)}")
    nd = max(self.ndim, other.ndim)
    sa = None if self.axis is None else self.axis + nd - self.ndim
    oa = None if other.axis is None else other.axis + nd - other.ndim
    if sa is not None and oa is not None and sa != oa:
      raise ValueError(f"an op mixes tensors split along different axes: {self.shape} along {self.axis}, {other.shape} along {other.axis}")
    ax = sa if sa is not None else oa
    def fit(m: MultiTensor, split: int | None, ref: MultiTensor) -> list[Any]:
      if split is not None or ax is None: return m.parts
      a = ax - (nd - m.ndim)   # a replicated operand: each device takes its slice where it is not broadcast
      if a < 0 or m.shape[a] == 1: return m.parts
      return [_slice(p, a, lo, hi) for p, (lo, hi) in zip(m.parts, _bounds(ref))]
    return fit(self, sa, other if sa is None else self), fit(other, oa, self if oa is None else other), ax
  def _binary(self, other: Any, fn: Any, reverse: bool = False) -> MultiTensor:
    a, b, ax = self._align(other)
    return MultiTensor([fn(y, x) if reverse else fn(x, y) for x, y in zip(a, b)], ax)
  def __add__(self, o: Any) -> MultiTensor: return self._binary(o, lambda x, y: x + y)
  def __radd__(self, o: Any) -> MultiTensor: return self._binary(o, lambda x, y: x + y, True)
  def __sub__(self, o: Any) -> MultiTensor: return self._binary(o, lambda x, y: x - y)
  def __rsub__(self, o: Any) -> MultiTensor: return self._binary(o, lambda x, y: x - y, True)
  def __mul__(self, o: Any) -> MultiTensor: return self._binary(o, lambda x, y: x * y)
  def __rmul__(self, o: Any) -> MultiTensor: return self._binary(o, lambda x, y: x * y, True)
  def __truediv__(self, o: Any) -> MultiTensor: return self._binary(o, lambda x, y: x / y)
  def __rtruediv__(self, o: Any) -> MultiTensor: return self._binary(o, lambda x, y: x / y, True)
  def __pow__(self, o: Any) -> MultiTensor: return self._binary(o, lambda x, y: x ** y)
  def __neg__(self) -> MultiTensor: return self._map(lambda p: -p)
  def maximum(self, o: Any) -> MultiTensor: return self._binary(o, lambda x, y: x.maximum(y))
  def minimum(self, o: Any) -> MultiTensor: return self._binary(o, lambda x, y: x.minimum(y))
  def __getattr__(self, name: str) -> Any:
    if name in _UNARY: return lambda *a, **k: self._map(lambda p: getattr(p, name)(*a, **k))
    raise AttributeError(f"MultiTensor has no attribute {name!r} (elementwise methods it runs per device: {sorted(_UNARY)})")

  # ---- movement
  def permute(self, *order: int) -> MultiTensor:
    order = tuple(order[0]) if len(order) == 1 and isinstance(order[0], (tuple, list)) else order
    ax = None if self.axis is None else [o % self.ndim for o in order].index(self.axis)
    return self._map(lambda p: p.permute(*order), ax)
  @property
  def T(self) -> MultiTensor: return self.permute(*range(self.ndim - 1, -1, -1))
  def reshape(self, *shape: Any) -> MultiTensor:
    """A reshape that keeps the axes up to and including the split axis (the parts reshape alone)."""
    shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    if self.axis is None: return self._map(lambda p: p.reshape(*shape))
    if tuple(shape[:self.axis + 1]) != self.shape[:self.axis + 1]:
      raise ValueError(f"reshape {self.shape} -> {shape} of a tensor split along axis {self.axis} must keep axes 0..{self.axis}; gather it first")
    return self._map(lambda p: p.reshape(*p.shape[:self.axis + 1], *shape[self.axis + 1:]))

  # ---- reductions
  def _reduce(self, method: str, op: str, axis: Any = None, keepdim: bool = False) -> MultiTensor:
    axes = tuple(range(self.ndim)) if axis is None else tuple(a % self.ndim for a in ((axis,) if isinstance(axis, int) else axis))
    if self.axis is None or self.axis not in axes:
      new_ax = None if self.axis is None else self.axis - (0 if keepdim else sum(a < self.axis for a in axes))
      return self._map(lambda p: getattr(p, method)(axis=axes, keepdim=keepdim), new_ax)
    # over the split axis: each device reduces its part, then the partials are combined on every device
    parts = [getattr(p, "sum" if method == "mean" else method)(axis=axes, keepdim=keepdim) for p in self.parts]
    out = collectives.allreduce(parts, op)
    if method == "mean":
      n = 1
      for a in axes: n *= self.shape[a]
      out = [o / n for o in out]
    return MultiTensor(out, None)
  def sum(self, axis: Any = None, keepdim: bool = False) -> MultiTensor: return self._reduce("sum", "sum", axis, keepdim)
  def max(self, axis: Any = None, keepdim: bool = False) -> MultiTensor: return self._reduce("max", "max", axis, keepdim)
  def min(self, axis: Any = None, keepdim: bool = False) -> MultiTensor: return self._reduce("min", "min", axis, keepdim)
  def mean(self, axis: Any = None, keepdim: bool = False) -> MultiTensor: return self._reduce("mean", "sum", axis, keepdim)

  # ---- matmul and convolution
  def matmul(self, w: MultiTensor) -> MultiTensor:
    """self (..., M, K) @ w (K, N) or (..., K, N). Contracting a split K ends in an allreduce."""
    if not isinstance(w, MultiTensor): self._align(w)   # (refuses a plain tensor by name)
    if w.devices != self.devices: raise ValueError(f"matmul of multi-device tensors on different devices: {list(self.devices)} and {list(w.devices)}")
    if self.shape[-1] != w.shape[-2 if w.ndim > 1 else 0]:
      raise ValueError(f"matmul: shapes {self.shape} and {w.shape} disagree on the contracted axis ({self.shape[-1]} vs {w.shape[-2 if w.ndim > 1 else 0]})")
    ka, kw = self.ndim - 1, w.ndim - 2 if w.ndim > 1 else 0
    a_k, w_k = self.axis == ka, w.axis == kw
    if a_k or w_k:
      a = self.parts if a_k else [_slice(p, ka, lo, hi) for p, (lo, hi) in zip(self.parts, _bounds(w))] if self.axis is None else None
      b = w.parts if w_k else [_slice(p, kw, lo, hi) for p, (lo, hi) in zip(w.parts, _bounds(self))] if w.axis is None else None
      if a is None or b is None:
        raise ValueError(f"matmul: {self.shape} split along {self.axis} with {w.shape} split along {w.axis} is not supported; gather one first")
      return MultiTensor(collectives.allreduce([x @ y for x, y in zip(a, b)], "sum"), None)
    if self.axis is not None and w.axis is not None:
      raise ValueError(f"matmul: both operands split off the contracted axis ({self.shape} along {self.axis}, {w.shape} along {w.axis}); replicate one")
    if w.axis is not None:   # w split along N (its last axis) or a batch axis
      nd = max(self.ndim, w.ndim)
      return MultiTensor([x @ y for x, y in zip(self.parts, w.parts)], w.axis + nd - w.ndim)
    nd = max(self.ndim, w.ndim)
    return MultiTensor([x @ y for x, y in zip(self.parts, w.parts)], None if self.axis is None else self.axis + nd - self.ndim)
  def __matmul__(self, w: MultiTensor) -> MultiTensor: return self.matmul(w)
  def conv2d(self, weight: MultiTensor, bias: MultiTensor | None = None, **kw: Any) -> MultiTensor:
    """A batch-split (or replicated) input convolved with a replicated weight: each device convolves its part."""
    for name, w in (("weight", weight), ("bias", bias)):
      if w is None: continue
      if not isinstance(w, MultiTensor) or w.axis is not None or w.devices != self.devices:
        raise ValueError(f"conv2d: the {name} must be replicated on {list(self.devices)} (.to(devices)), got {w!r}")
    if self.axis not in (None, 0): raise ValueError(f"conv2d: the input must be split along the batch axis 0, got axis {self.axis}")
    bparts = bias.parts if bias is not None else [None] * len(self.parts)
    return MultiTensor([x.conv2d(w, b, **kw) for x, w, b in zip(self.parts, weight.parts, bparts)], self.axis)

def _bounds(m: MultiTensor) -> list[tuple[int, int]]:
  """The (lo, hi) each part of a split tensor covers along its split axis."""
  assert m.axis is not None
  out, lo = [], 0
  for p in m.parts:
    out.append((lo, lo + p.shape[m.axis])); lo += p.shape[m.axis]
  return out

_UNARY = frozenset({"relu", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "abs", "sigmoid", "tanh", "gelu", "silu", "sin", "cos",
                    "square", "reciprocal", "cast", "float", "half", "contiguous", "detach", "clip", "clamp", "sign"})
