"""PyTorch's in-place operators and methods (`x += y`, `x.add_(y)`, `x.zero_()`, ...): the tensor object itself takes
the new value, so a caller holding it sees the change (`p -= lr * p.grad` trains; a function's `t += 1` is seen by
its caller).

How a tensor takes its new value (value semantics, docs/value_semantics.md):
- a tensor that is a whole buffer (realized data, a parameter) is written in place through tensor/inplace.py, as
  assign does: tensors built from its old value keep the old value;
- a tensor that is still a graph (an op's result, or a view such as x[0]) is rebound to the new graph. Autograd
  through it is exact: its graph now goes through the old value, as PyTorch's version of the op records it. A view
  is not an alias: `v = x[0]; v += 1` changes v, not x (write `x[0] += 1`, which is setitem).

Checks, as PyTorch's: a leaf that requires grad raises outside no_grad ("a leaf Variable that requires grad is being
used in an in-place operation"); a result of another shape, or of a dtype kind that cannot be cast back (a float
result into an int tensor, an int result into a bool tensor) raises naming both."""
from __future__ import annotations
from typing import Any, Callable
from baregrad.ir.dtype import DType, dtypes
from baregrad.tensor.tensor import Tensor, _all_grad_tensors, broadcast_shape, _is_whole_buffer
from baregrad.tensor.grad_mode import _state as _grad_state
from baregrad.tensor import live

def _kind(d: DType) -> int:
  """0 bool, 1 integer, 2 floating point: a result may be written into a tensor of its kind or a higher one."""
  return 0 if d == dtypes.bool else 2 if dtypes.is_float(d) else 1

def _torch_dtype_name(d: DType) -> str:
  return {dtypes.float32: "Float", dtypes.float64: "Double", dtypes.float16: "Half", dtypes.bfloat16: "BFloat16", dtypes.int64: "Long",
          dtypes.int32: "Int", dtypes.int16: "Short", dtypes.int8: "Char", dtypes.uint8: "Byte", dtypes.bool: "Bool"}.get(d, str(d))

def is_grad_leaf(t: Tensor) -> bool:
  """t was made with requires_grad=True (or requires_grad_()) and still requires grad: autograd's targets."""
  return bool(t.requires_grad) and _all_grad_tensors.get(id(t)) is t

def check_leaf(t: Tensor, what: str) -> None:
  """PyTorch's refusal of an in-place write into a leaf that requires grad while gradients are recorded."""
  if _grad_state.enabled and is_grad_leaf(t):
    raise RuntimeError(f"{what}: a leaf Variable that requires grad is being used in an in-place operation (tensor of shape {t.shape}, "
                       f"{t.dtype}); update parameters inside `with baregrad.no_grad():`")

def inplace_update(t: Tensor, value: Any, what: str, cast: bool = False) -> Tensor:
  """Make `value` t's value in place and return t. cast=False (the operators, add_, mul_, ...): value must already
  have t's shape, and a dtype of t's kind or a lower one (cast to t's dtype). cast=True (copy_, fill_): value is
  broadcast to t's shape and cast to t's dtype whatever it is, and may come from another device."""
  check_leaf(t, what)
  if not isinstance(value, Tensor): value = Tensor.full(t.shape, value, dtype=t.dtype, device=t.device)
  if value.shape != t.shape:
    try: ok = cast and broadcast_shape(value.shape, t.shape) == t.shape
    except (ValueError, RuntimeError): ok = False
    if not ok:
      raise RuntimeError(f"{what}: output with shape {list(t.shape)} doesn't match the broadcast shape {list(value.shape)} "
                         f"(an in-place op keeps the tensor's shape {t.shape}; the result has shape {value.shape})")
    value = value.expand(*t.shape)
  if value.dtype != t.dtype:
    if not cast and _kind(value.dtype) > _kind(t.dtype):
      raise RuntimeError(f"{what}: result type {_torch_dtype_name(value.dtype)} can't be cast to the desired output type "
                         f"{_torch_dtype_name(t.dtype)} (the result is {value.dtype}, the tensor is {t.dtype}; an in-place op keeps the tensor's dtype)")
    value = value.cast(t.dtype)
  if value.device != t.device:
    if not cast: raise RuntimeError(f"{what}: the result is on {value.device}, the tensor on {t.device}")
    value = value.to(t.device)
  if is_grad_leaf(t) or _is_whole_buffer(t.uop):
    # memory the tensor owns: written as assign writes it. The value is computed into a buffer of its own first
    # when it is not elementwise in t (x.copy_(x @ w), x += x.flip(0)), since the write may only read its target elementwise
    from baregrad.tensor.inplace import write
    write([(t, value if _elementwise_in(value, t) else value.contiguous())])
    return t
  # a graph: rebound to the new graph (its old value stays what other tensors built from it read)
  t.uop = value.uop
  t.requires_grad = value.requires_grad
  live.track(t)
  return t

def _elementwise_in(value: Tensor, t: Tensor) -> bool:
  """Whether value's graph reads t's buffer only as t itself under elementwise ops (element i of the value reads
  element i of t), or not at all: then an ASSIGN of value into t's memory may be computed in the same kernel."""
  from baregrad.ir.ops import Ops, GroupOp
  from baregrad.engine.graph import base_of
  tu = t.uop
  tb = base_of(tu)
  stack, seen = [(value.uop, True)], set()
  while stack:
    u, elementwise = stack.pop()
    if (u, elementwise) in seen: continue
    seen.add((u, elementwise))
    if u is tu:
      if not elementwise: return False
      continue
    if u is tb: return False   # t's buffer through a view other than t itself
    if u.op is Ops.BUFFER: continue
    ew = elementwise and (u.op in GroupOp.ALU or u.op in (Ops.CAST, Ops.CONTIGUOUS, Ops.DETACH))
    stack.extend((s, ew) for s in u.src)
  return True

# ---- the operators: x op= y is x.op_(y), as in PyTorch. `@=` is left out as PyTorch leaves it out (torch.Tensor has
# no __imatmul__): `a @= b` rebinds the name a to a @ b there and here
def _binary(method: str, what: str) -> Callable[[Tensor, Any], Tensor]:
  def f(self: Tensor, y: Any) -> Tensor:
    check_leaf(self, what)   # (before building the value: PyTorch's message, not a promotion error)
    return inplace_update(self, getattr(self, method)(y), what)
  f.__name__ = what
  return f

_OPERATORS = {"__iadd__": "__add__", "__isub__": "__sub__", "__imul__": "__mul__", "__itruediv__": "__truediv__",
              "__ifloordiv__": "__floordiv__", "__imod__": "__mod__", "__ipow__": "__pow__",
              "__iand__": "__and__", "__ior__": "__or__", "__ixor__": "__xor__", "__ilshift__": "__lshift__", "__irshift__": "__rshift__"}
for _n, _m in _OPERATORS.items(): setattr(Tensor, _n, _binary(_m, _n))

# ---- the methods: name_ computes name(...) and writes it into the tensor
def _method(name: str) -> Callable[..., Tensor]:
  def f(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    check_leaf(self, f"{name}_")
    return inplace_update(self, getattr(self, name)(*args, **kwargs), f"{name}_")
  f.__name__ = f"{name}_"
  f.__doc__ = f"In place: self takes the value of self.{name}(...) (same shape, a dtype castable to self's); returns self."
  return f

_METHODS = ("add", "sub", "mul", "div", "true_divide", "floor_divide", "remainder", "fmod", "pow", "neg", "abs", "sqrt", "rsqrt", "exp", "exp2",
            "log", "log2", "sin", "cos", "tan", "tanh", "sigmoid", "relu", "leaky_relu", "clamp", "clip", "floor", "ceil", "round", "trunc",
            "frac", "sign", "reciprocal", "square", "lerp", "masked_fill", "nan_to_num", "maximum", "minimum", "logical_not", "bitwise_not",
            "bitwise_and", "bitwise_or", "bitwise_xor", "index_add", "scatter", "scatter_add", "erf", "sinh", "cosh", "atan", "asin", "acos",
            "hardtanh", "elu", "silu", "gelu", "tril", "triu")
for _n in _METHODS:
  if not hasattr(Tensor, f"{_n}_") and hasattr(Tensor, _n):
    setattr(Tensor, f"{_n}_", _method(_n))
def clamp_min_(self: Tensor, min: Any) -> Tensor:  # noqa: A002
  """Values below min raised to min, in place; returns self."""
  return Tensor.clamp_(self, min=min)  # type: ignore[attr-defined]
def clamp_max_(self: Tensor, max: Any) -> Tensor:  # noqa: A002
  """Values above max lowered to max, in place; returns self."""
  return Tensor.clamp_(self, max=max)  # type: ignore[attr-defined]
Tensor.clamp_min_, Tensor.clamp_max_ = clamp_min_, clamp_max_  # type: ignore[attr-defined]

def index_add(self: Tensor, dim: int, index: Tensor, source: Tensor, *, alpha: Any = 1) -> Tensor:
  """Out-of-place torch.index_add: self with source's slices along dim added at the positions index (1-D) names
  (repeated indices accumulate), each scaled by alpha."""
  d = dim + self.ndim if dim < 0 else dim
  if not 0 <= d < max(self.ndim, 1): raise IndexError(f"index_add: dim {dim} out of range for a tensor of {self.ndim} dimensions")
  if index.ndim > 1: raise IndexError(f"index_add: index must be 1-D, got shape {index.shape}")
  want = self.shape[:d] + (index.numel(),) + self.shape[d + 1:]
  if source.shape != want:
    raise RuntimeError(f"index_add: source of shape {source.shape}, expected {want} (self {self.shape} with dim {dim} of size {index.numel()} from index)")
  idx = index.reshape(*((1,) * d), index.numel(), *((1,) * (self.ndim - d - 1))).expand(*want)
  return self.scatter_add(d, idx, source * alpha if alpha != 1 else source)
Tensor.index_add = index_add  # type: ignore[attr-defined]
Tensor.index_add_ = _method("index_add")  # type: ignore[attr-defined]

def zero_(self: Tensor) -> Tensor:
  """Fill with zeros in place; returns self."""
  return fill_(self, 0)

def fill_(self: Tensor, value: Any) -> Tensor:
  """Fill with value (a number, or a 0-d tensor) in place; returns self."""
  check_leaf(self, "fill_")
  if isinstance(value, Tensor) and value.numel() != 1:
    raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor with {value.ndim} dimensions (shape {value.shape})")
  v = value.reshape(()) if isinstance(value, Tensor) else Tensor.full((), value, dtype=self.dtype, device=self.device)
  return inplace_update(self, v, "fill_", cast=True)

def copy_(self: Tensor, src: Any, non_blocking: bool = False) -> Tensor:
  """Copy src's values (broadcast to self's shape, cast to self's dtype, from any device) into self in place;
  returns self."""
  check_leaf(self, "copy_")
  if not isinstance(src, Tensor): src = Tensor(src, device=self.device)
  return inplace_update(self, src, "copy_", cast=True)

def uniform_(self: Tensor, a: float = 0.0, b: float = 1.0) -> Tensor:
  """Fill with values drawn uniformly from [a, b) in place; returns self."""
  check_leaf(self, "uniform_")
  return inplace_update(self, Tensor.uniform(*self.shape, low=a, high=b, dtype=self.dtype, device=self.device), "uniform_")

def normal_(self: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
  """Fill with values drawn from N(mean, std^2) in place; returns self."""
  check_leaf(self, "normal_")
  return inplace_update(self, Tensor.normal(*self.shape, mean=mean, std=std, dtype=self.dtype, device=self.device), "normal_")

for _f in (zero_, fill_, copy_, uniform_, normal_): setattr(Tensor, _f.__name__, _f)
del _n, _m, _f
