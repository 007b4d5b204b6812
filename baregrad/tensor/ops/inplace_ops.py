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
from typing import Any, TYPE_CHECKING
from baregrad.ir.dtype import DType, dtypes
from baregrad.tensor.common import _all_grad_tensors, broadcast_shape, _is_whole_buffer
from baregrad.tensor.grad_mode import _state as _grad_state
from baregrad.tensor import live
if TYPE_CHECKING: from baregrad.tensor.tensor import Tensor

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
  from baregrad.tensor.tensor import Tensor
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

def _in_place(t: Any, op: str, name: str, args: tuple, kwargs: dict) -> Any:
  """t.name(...): the leaf check first (PyTorch's message names the in-place op), then t.op(*args, **kwargs) written
  into t (inplace_update's shape and dtype rules)."""
  check_leaf(t, name)
  return inplace_update(t, getattr(t, op)(*args, **kwargs), name)

class InplaceOps:
  """PyTorch's in-place operators (x += y is x.add_(y)'s update through x.__add__) and methods: name_(...) computes
  self.name(...) and makes it self's value (inplace_update); zero_, fill_, copy_, uniform_, normal_ fill in place."""
  __slots__ = ()   # (Tensor has slots: a base without them would give every tensor a __dict__)
  # ---- the operators: x op= y is x.op_(y), as in PyTorch. `@=` is left out as PyTorch leaves it out (torch.Tensor has
  # no __imatmul__): `a @= b` rebinds the name a to a @ b there and here
  def __iadd__(self, y: Any) -> Tensor: return _in_place(self, "__add__", "__iadd__", (y,), {})
  def __isub__(self, y: Any) -> Tensor: return _in_place(self, "__sub__", "__isub__", (y,), {})
  def __imul__(self, y: Any) -> Tensor: return _in_place(self, "__mul__", "__imul__", (y,), {})
  def __itruediv__(self, y: Any) -> Tensor: return _in_place(self, "__truediv__", "__itruediv__", (y,), {})
  def __ifloordiv__(self, y: Any) -> Tensor: return _in_place(self, "__floordiv__", "__ifloordiv__", (y,), {})
  def __imod__(self, y: Any) -> Tensor: return _in_place(self, "__mod__", "__imod__", (y,), {})
  def __ipow__(self, y: Any) -> Tensor: return _in_place(self, "__pow__", "__ipow__", (y,), {})
  def __iand__(self, y: Any) -> Tensor: return _in_place(self, "__and__", "__iand__", (y,), {})
  def __ior__(self, y: Any) -> Tensor: return _in_place(self, "__or__", "__ior__", (y,), {})
  def __ixor__(self, y: Any) -> Tensor: return _in_place(self, "__xor__", "__ixor__", (y,), {})
  def __ilshift__(self, y: Any) -> Tensor: return _in_place(self, "__lshift__", "__ilshift__", (y,), {})
  def __irshift__(self, y: Any) -> Tensor: return _in_place(self, "__rshift__", "__irshift__", (y,), {})
  # ---- the methods: name_ computes name(...) and writes it into the tensor (checked first: PyTorch's message for a leaf)
  def add_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.add(...); returns self."
    return _in_place(self, "add", "add_", args, kwargs)
  def sub_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.sub(...); returns self."
    return _in_place(self, "sub", "sub_", args, kwargs)
  def mul_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.mul(...); returns self."
    return _in_place(self, "mul", "mul_", args, kwargs)
  def div_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.div(...); returns self."
    return _in_place(self, "div", "div_", args, kwargs)
  def floor_divide_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.floor_divide(...); returns self."
    return _in_place(self, "floor_divide", "floor_divide_", args, kwargs)
  def remainder_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.remainder(...); returns self."
    return _in_place(self, "remainder", "remainder_", args, kwargs)
  def fmod_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.fmod(...); returns self."
    return _in_place(self, "fmod", "fmod_", args, kwargs)
  def pow_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.pow(...); returns self."
    return _in_place(self, "pow", "pow_", args, kwargs)
  def neg_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.neg(...); returns self."
    return _in_place(self, "neg", "neg_", args, kwargs)
  def abs_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.abs(...); returns self."
    return _in_place(self, "abs", "abs_", args, kwargs)
  def sqrt_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.sqrt(...); returns self."
    return _in_place(self, "sqrt", "sqrt_", args, kwargs)
  def rsqrt_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.rsqrt(...); returns self."
    return _in_place(self, "rsqrt", "rsqrt_", args, kwargs)
  def exp_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.exp(...); returns self."
    return _in_place(self, "exp", "exp_", args, kwargs)
  def exp2_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.exp2(...); returns self."
    return _in_place(self, "exp2", "exp2_", args, kwargs)
  def log_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.log(...); returns self."
    return _in_place(self, "log", "log_", args, kwargs)
  def log2_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.log2(...); returns self."
    return _in_place(self, "log2", "log2_", args, kwargs)
  def sin_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.sin(...); returns self."
    return _in_place(self, "sin", "sin_", args, kwargs)
  def cos_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.cos(...); returns self."
    return _in_place(self, "cos", "cos_", args, kwargs)
  def tan_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.tan(...); returns self."
    return _in_place(self, "tan", "tan_", args, kwargs)
  def tanh_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.tanh(...); returns self."
    return _in_place(self, "tanh", "tanh_", args, kwargs)
  def sigmoid_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.sigmoid(...); returns self."
    return _in_place(self, "sigmoid", "sigmoid_", args, kwargs)
  def relu_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.relu(...); returns self."
    return _in_place(self, "relu", "relu_", args, kwargs)
  def leaky_relu_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.leaky_relu(...); returns self."
    return _in_place(self, "leaky_relu", "leaky_relu_", args, kwargs)
  def clamp_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.clamp(...); returns self."
    return _in_place(self, "clamp", "clamp_", args, kwargs)
  def clip_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.clip(...); returns self."
    return _in_place(self, "clip", "clip_", args, kwargs)
  def floor_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.floor(...); returns self."
    return _in_place(self, "floor", "floor_", args, kwargs)
  def ceil_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.ceil(...); returns self."
    return _in_place(self, "ceil", "ceil_", args, kwargs)
  def round_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.round(...); returns self."
    return _in_place(self, "round", "round_", args, kwargs)
  def trunc_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.trunc(...); returns self."
    return _in_place(self, "trunc", "trunc_", args, kwargs)
  def frac_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.frac(...); returns self."
    return _in_place(self, "frac", "frac_", args, kwargs)
  def sign_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.sign(...); returns self."
    return _in_place(self, "sign", "sign_", args, kwargs)
  def reciprocal_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.reciprocal(...); returns self."
    return _in_place(self, "reciprocal", "reciprocal_", args, kwargs)
  def square_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.square(...); returns self."
    return _in_place(self, "square", "square_", args, kwargs)
  def lerp_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.lerp(...); returns self."
    return _in_place(self, "lerp", "lerp_", args, kwargs)
  def masked_fill_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.masked_fill(...); returns self."
    return _in_place(self, "masked_fill", "masked_fill_", args, kwargs)
  def nan_to_num_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.nan_to_num(...); returns self."
    return _in_place(self, "nan_to_num", "nan_to_num_", args, kwargs)
  def maximum_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.maximum(...); returns self."
    return _in_place(self, "maximum", "maximum_", args, kwargs)
  def minimum_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.minimum(...); returns self."
    return _in_place(self, "minimum", "minimum_", args, kwargs)
  def logical_not_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.logical_not(...); returns self."
    return _in_place(self, "logical_not", "logical_not_", args, kwargs)
  def bitwise_not_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.bitwise_not(...); returns self."
    return _in_place(self, "bitwise_not", "bitwise_not_", args, kwargs)
  def bitwise_and_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.bitwise_and(...); returns self."
    return _in_place(self, "bitwise_and", "bitwise_and_", args, kwargs)
  def bitwise_or_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.bitwise_or(...); returns self."
    return _in_place(self, "bitwise_or", "bitwise_or_", args, kwargs)
  def bitwise_xor_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.bitwise_xor(...); returns self."
    return _in_place(self, "bitwise_xor", "bitwise_xor_", args, kwargs)
  def index_add_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.index_add(...); returns self."
    return _in_place(self, "index_add", "index_add_", args, kwargs)
  def scatter_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.scatter(...); returns self."
    return _in_place(self, "scatter", "scatter_", args, kwargs)
  def scatter_add_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.scatter_add(...); returns self."
    return _in_place(self, "scatter_add", "scatter_add_", args, kwargs)
  def erf_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.erf(...); returns self."
    return _in_place(self, "erf", "erf_", args, kwargs)
  def sinh_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.sinh(...); returns self."
    return _in_place(self, "sinh", "sinh_", args, kwargs)
  def cosh_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.cosh(...); returns self."
    return _in_place(self, "cosh", "cosh_", args, kwargs)
  def atan_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.atan(...); returns self."
    return _in_place(self, "atan", "atan_", args, kwargs)
  def asin_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.asin(...); returns self."
    return _in_place(self, "asin", "asin_", args, kwargs)
  def acos_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.acos(...); returns self."
    return _in_place(self, "acos", "acos_", args, kwargs)
  def hardtanh_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.hardtanh(...); returns self."
    return _in_place(self, "hardtanh", "hardtanh_", args, kwargs)
  def elu_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.elu(...); returns self."
    return _in_place(self, "elu", "elu_", args, kwargs)
  def silu_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.silu(...); returns self."
    return _in_place(self, "silu", "silu_", args, kwargs)
  def gelu_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.gelu(...); returns self."
    return _in_place(self, "gelu", "gelu_", args, kwargs)
  def tril_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.tril(...); returns self."
    return _in_place(self, "tril", "tril_", args, kwargs)
  def triu_(self, *args: Any, **kwargs: Any) -> Tensor:
    "In place self.triu(...); returns self."
    return _in_place(self, "triu", "triu_", args, kwargs)
  def clamp_min_(self: Tensor, min: Any) -> Tensor:  # noqa: A002
    """Values below min raised to min, in place; returns self."""
    return self.clamp_(min=min)
  def clamp_max_(self: Tensor, max: Any) -> Tensor:  # noqa: A002
    """Values above max lowered to max, in place; returns self."""
    return self.clamp_(max=max)
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
  def zero_(self: Tensor) -> Tensor:
    """Fill with zeros in place; returns self."""
    return self.fill_(0)
  def fill_(self: Tensor, value: Any) -> Tensor:
    """Fill with value (a number, or a 0-d tensor) in place; returns self."""
    from baregrad.tensor.tensor import Tensor
    check_leaf(self, "fill_")
    if isinstance(value, Tensor) and value.numel() != 1:
      raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor with {value.ndim} dimensions (shape {value.shape})")
    v = value.reshape(()) if isinstance(value, Tensor) else Tensor.full((), value, dtype=self.dtype, device=self.device)
    return inplace_update(self, v, "fill_", cast=True)
  def copy_(self: Tensor, src: Any, non_blocking: bool = False) -> Tensor:
    """Copy src's values (broadcast to self's shape, cast to self's dtype, from any device) into self in place;
    returns self."""
    from baregrad.tensor.tensor import Tensor
    check_leaf(self, "copy_")
    if not isinstance(src, Tensor): src = Tensor(src, device=self.device)
    return inplace_update(self, src, "copy_", cast=True)
  def uniform_(self: Tensor, a: float = 0.0, b: float = 1.0) -> Tensor:
    """Fill with values drawn uniformly from [a, b) in place; returns self."""
    check_leaf(self, "uniform_")
    return inplace_update(self, type(self).uniform(*self.shape, low=a, high=b, dtype=self.dtype, device=self.device), "uniform_")
  def normal_(self: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    """Fill with values drawn from N(mean, std^2) in place; returns self."""
    check_leaf(self, "normal_")
    return inplace_update(self, type(self).normal(*self.shape, mean=mean, std=std, dtype=self.dtype, device=self.device), "normal_")
