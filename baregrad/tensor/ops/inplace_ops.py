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

class InplaceOps:
  """PyTorch's in-place operators (x += y is x.add_(y)'s update through x.__add__) and methods: name_(...) computes
  self.name(...) and makes it self's value (inplace_update); zero_, fill_, copy_, uniform_, normal_ fill in place."""
  __slots__ = ()   # (Tensor has slots: a base without them would give every tensor a __dict__)
  # ---- the operators: x op= y is x.op_(y), as in PyTorch. `@=` is left out as PyTorch leaves it out (torch.Tensor has
  # no __imatmul__): `a @= b` rebinds the name a to a @ b there and here
  def __iadd__(self, y: Any) -> Tensor: check_leaf(self, "__iadd__"); return inplace_update(self, self.__add__(y), "__iadd__")
  def __isub__(self, y: Any) -> Tensor: check_leaf(self, "__isub__"); return inplace_update(self, self.__sub__(y), "__isub__")
  def __imul__(self, y: Any) -> Tensor: check_leaf(self, "__imul__"); return inplace_update(self, self.__mul__(y), "__imul__")
  def __itruediv__(self, y: Any) -> Tensor: check_leaf(self, "__itruediv__"); return inplace_update(self, self.__truediv__(y), "__itruediv__")
  def __ifloordiv__(self, y: Any) -> Tensor: check_leaf(self, "__ifloordiv__"); return inplace_update(self, self.__floordiv__(y), "__ifloordiv__")
  def __imod__(self, y: Any) -> Tensor: check_leaf(self, "__imod__"); return inplace_update(self, self.__mod__(y), "__imod__")
  def __ipow__(self, y: Any) -> Tensor: check_leaf(self, "__ipow__"); return inplace_update(self, self.__pow__(y), "__ipow__")
  def __iand__(self, y: Any) -> Tensor: check_leaf(self, "__iand__"); return inplace_update(self, self.__and__(y), "__iand__")
  def __ior__(self, y: Any) -> Tensor: check_leaf(self, "__ior__"); return inplace_update(self, self.__or__(y), "__ior__")
  def __ixor__(self, y: Any) -> Tensor: check_leaf(self, "__ixor__"); return inplace_update(self, self.__xor__(y), "__ixor__")
  def __ilshift__(self, y: Any) -> Tensor: check_leaf(self, "__ilshift__"); return inplace_update(self, self.__lshift__(y), "__ilshift__")
  def __irshift__(self, y: Any) -> Tensor: check_leaf(self, "__irshift__"); return inplace_update(self, self.__rshift__(y), "__irshift__")
  # ---- the methods: name_ computes name(...) and writes it into the tensor (checked first: PyTorch's message for a leaf)
  def add_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.add(...); returns self."; check_leaf(self, "add_"); return inplace_update(self, self.add(*args, **kwargs), "add_")
  def sub_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.sub(...); returns self."; check_leaf(self, "sub_"); return inplace_update(self, self.sub(*args, **kwargs), "sub_")
  def mul_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.mul(...); returns self."; check_leaf(self, "mul_"); return inplace_update(self, self.mul(*args, **kwargs), "mul_")
  def div_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.div(...); returns self."; check_leaf(self, "div_"); return inplace_update(self, self.div(*args, **kwargs), "div_")
  def floor_divide_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.floor_divide(...); returns self."; check_leaf(self, "floor_divide_"); return inplace_update(self, self.floor_divide(*args, **kwargs), "floor_divide_")
  def remainder_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.remainder(...); returns self."; check_leaf(self, "remainder_"); return inplace_update(self, self.remainder(*args, **kwargs), "remainder_")
  def fmod_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.fmod(...); returns self."; check_leaf(self, "fmod_"); return inplace_update(self, self.fmod(*args, **kwargs), "fmod_")
  def pow_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.pow(...); returns self."; check_leaf(self, "pow_"); return inplace_update(self, self.pow(*args, **kwargs), "pow_")
  def neg_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.neg(...); returns self."; check_leaf(self, "neg_"); return inplace_update(self, self.neg(*args, **kwargs), "neg_")
  def abs_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.abs(...); returns self."; check_leaf(self, "abs_"); return inplace_update(self, self.abs(*args, **kwargs), "abs_")
  def sqrt_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.sqrt(...); returns self."; check_leaf(self, "sqrt_"); return inplace_update(self, self.sqrt(*args, **kwargs), "sqrt_")
  def rsqrt_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.rsqrt(...); returns self."; check_leaf(self, "rsqrt_"); return inplace_update(self, self.rsqrt(*args, **kwargs), "rsqrt_")
  def exp_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.exp(...); returns self."; check_leaf(self, "exp_"); return inplace_update(self, self.exp(*args, **kwargs), "exp_")
  def exp2_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.exp2(...); returns self."; check_leaf(self, "exp2_"); return inplace_update(self, self.exp2(*args, **kwargs), "exp2_")
  def log_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.log(...); returns self."; check_leaf(self, "log_"); return inplace_update(self, self.log(*args, **kwargs), "log_")
  def log2_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.log2(...); returns self."; check_leaf(self, "log2_"); return inplace_update(self, self.log2(*args, **kwargs), "log2_")
  def sin_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.sin(...); returns self."; check_leaf(self, "sin_"); return inplace_update(self, self.sin(*args, **kwargs), "sin_")
  def cos_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.cos(...); returns self."; check_leaf(self, "cos_"); return inplace_update(self, self.cos(*args, **kwargs), "cos_")
  def tan_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.tan(...); returns self."; check_leaf(self, "tan_"); return inplace_update(self, self.tan(*args, **kwargs), "tan_")
  def tanh_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.tanh(...); returns self."; check_leaf(self, "tanh_"); return inplace_update(self, self.tanh(*args, **kwargs), "tanh_")
  def sigmoid_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.sigmoid(...); returns self."; check_leaf(self, "sigmoid_"); return inplace_update(self, self.sigmoid(*args, **kwargs), "sigmoid_")
  def relu_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.relu(...); returns self."; check_leaf(self, "relu_"); return inplace_update(self, self.relu(*args, **kwargs), "relu_")
  def leaky_relu_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.leaky_relu(...); returns self."; check_leaf(self, "leaky_relu_"); return inplace_update(self, self.leaky_relu(*args, **kwargs), "leaky_relu_")
  def clamp_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.clamp(...); returns self."; check_leaf(self, "clamp_"); return inplace_update(self, self.clamp(*args, **kwargs), "clamp_")
  def clip_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.clip(...); returns self."; check_leaf(self, "clip_"); return inplace_update(self, self.clip(*args, **kwargs), "clip_")
  def floor_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.floor(...); returns self."; check_leaf(self, "floor_"); return inplace_update(self, self.floor(*args, **kwargs), "floor_")
  def ceil_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.ceil(...); returns self."; check_leaf(self, "ceil_"); return inplace_update(self, self.ceil(*args, **kwargs), "ceil_")
  def round_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.round(...); returns self."; check_leaf(self, "round_"); return inplace_update(self, self.round(*args, **kwargs), "round_")
  def trunc_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.trunc(...); returns self."; check_leaf(self, "trunc_"); return inplace_update(self, self.trunc(*args, **kwargs), "trunc_")
  def frac_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.frac(...); returns self."; check_leaf(self, "frac_"); return inplace_update(self, self.frac(*args, **kwargs), "frac_")
  def sign_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.sign(...); returns self."; check_leaf(self, "sign_"); return inplace_update(self, self.sign(*args, **kwargs), "sign_")
  def reciprocal_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.reciprocal(...); returns self."; check_leaf(self, "reciprocal_"); return inplace_update(self, self.reciprocal(*args, **kwargs), "reciprocal_")
  def square_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.square(...); returns self."; check_leaf(self, "square_"); return inplace_update(self, self.square(*args, **kwargs), "square_")
  def lerp_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.lerp(...); returns self."; check_leaf(self, "lerp_"); return inplace_update(self, self.lerp(*args, **kwargs), "lerp_")
  def masked_fill_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.masked_fill(...); returns self."; check_leaf(self, "masked_fill_"); return inplace_update(self, self.masked_fill(*args, **kwargs), "masked_fill_")
  def nan_to_num_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.nan_to_num(...); returns self."; check_leaf(self, "nan_to_num_"); return inplace_update(self, self.nan_to_num(*args, **kwargs), "nan_to_num_")
  def maximum_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.maximum(...); returns self."; check_leaf(self, "maximum_"); return inplace_update(self, self.maximum(*args, **kwargs), "maximum_")
  def minimum_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.minimum(...); returns self."; check_leaf(self, "minimum_"); return inplace_update(self, self.minimum(*args, **kwargs), "minimum_")
  def logical_not_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.logical_not(...); returns self."; check_leaf(self, "logical_not_"); return inplace_update(self, self.logical_not(*args, **kwargs), "logical_not_")
  def bitwise_not_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.bitwise_not(...); returns self."; check_leaf(self, "bitwise_not_"); return inplace_update(self, self.bitwise_not(*args, **kwargs), "bitwise_not_")
  def bitwise_and_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.bitwise_and(...); returns self."; check_leaf(self, "bitwise_and_"); return inplace_update(self, self.bitwise_and(*args, **kwargs), "bitwise_and_")
  def bitwise_or_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.bitwise_or(...); returns self."; check_leaf(self, "bitwise_or_"); return inplace_update(self, self.bitwise_or(*args, **kwargs), "bitwise_or_")
  def bitwise_xor_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.bitwise_xor(...); returns self."; check_leaf(self, "bitwise_xor_"); return inplace_update(self, self.bitwise_xor(*args, **kwargs), "bitwise_xor_")
  def index_add_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.index_add(...); returns self."; check_leaf(self, "index_add_"); return inplace_update(self, self.index_add(*args, **kwargs), "index_add_")
  def scatter_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.scatter(...); returns self."; check_leaf(self, "scatter_"); return inplace_update(self, self.scatter(*args, **kwargs), "scatter_")
  def scatter_add_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.scatter_add(...); returns self."; check_leaf(self, "scatter_add_"); return inplace_update(self, self.scatter_add(*args, **kwargs), "scatter_add_")
  def erf_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.erf(...); returns self."; check_leaf(self, "erf_"); return inplace_update(self, self.erf(*args, **kwargs), "erf_")
  def sinh_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.sinh(...); returns self."; check_leaf(self, "sinh_"); return inplace_update(self, self.sinh(*args, **kwargs), "sinh_")
  def cosh_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.cosh(...); returns self."; check_leaf(self, "cosh_"); return inplace_update(self, self.cosh(*args, **kwargs), "cosh_")
  def atan_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.atan(...); returns self."; check_leaf(self, "atan_"); return inplace_update(self, self.atan(*args, **kwargs), "atan_")
  def asin_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.asin(...); returns self."; check_leaf(self, "asin_"); return inplace_update(self, self.asin(*args, **kwargs), "asin_")
  def acos_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.acos(...); returns self."; check_leaf(self, "acos_"); return inplace_update(self, self.acos(*args, **kwargs), "acos_")
  def hardtanh_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.hardtanh(...); returns self."; check_leaf(self, "hardtanh_"); return inplace_update(self, self.hardtanh(*args, **kwargs), "hardtanh_")
  def elu_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.elu(...); returns self."; check_leaf(self, "elu_"); return inplace_update(self, self.elu(*args, **kwargs), "elu_")
  def silu_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.silu(...); returns self."; check_leaf(self, "silu_"); return inplace_update(self, self.silu(*args, **kwargs), "silu_")
  def gelu_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.gelu(...); returns self."; check_leaf(self, "gelu_"); return inplace_update(self, self.gelu(*args, **kwargs), "gelu_")
  def tril_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.tril(...); returns self."; check_leaf(self, "tril_"); return inplace_update(self, self.tril(*args, **kwargs), "tril_")
  def triu_(self, *args: Any, **kwargs: Any) -> Tensor: "In place self.triu(...); returns self."; check_leaf(self, "triu_"); return inplace_update(self, self.triu(*args, **kwargs), "triu_")
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
