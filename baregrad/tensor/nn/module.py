"""nn.Module: the base of every layer, with PyTorch's walking and switching methods over plain attributes.

Unlike torch.nn.Module nothing is registered: a module's tensors and submodules are whatever its attributes (and the
lists, tuples and dicts in them) hold, found the way baregrad.tensor.nn.state walks objects, so a subclass need not
call super().__init__() and plain Python classes keep working with get_parameters/get_state_dict. A parameter is a
tensor with requires_grad=True; any other tensor (running statistics, counters) is a buffer.

`training` is True from construction, as in PyTorch (a class attribute, so subclasses that skip super().__init__()
get it too); train()/eval() set it on the whole module tree. Setting a module's `training` to None makes it follow
the global Tensor.training switch instead (tinygrad's way, `with Tensor.train(): ...`); the global switch is
otherwise only the default of the tinygrad-style Tensor methods (x.dropout(p)).

requires_grad_(False) freezes parameters: they stay parameters (parameters(), state_dict, optimizers leave them
alone) until requires_grad_(True), as in PyTorch. to()/half()/float() replace each tensor attribute by a converted
copy (value semantics: tensors never change device or dtype in place) and return the module."""
from __future__ import annotations
import itertools, weakref
from typing import Any, Callable, Iterator, NamedTuple
from baregrad.ir.dtype import dtypes
from baregrad.tensor.tensor import Tensor, _is_dtype_arg, to_dtype
from baregrad.tensor.nn.state import children, is_leaf

# parameters frozen by Module.requires_grad_(False): still parameters, no longer requiring grad (id -> tensor; an
# entry goes when its tensor does)
_FROZEN: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()

def is_frozen(t: Tensor) -> bool:
  """Whether t is a parameter that Module.requires_grad_(False) froze."""
  return _FROZEN.get(id(t)) is t

def _is_param(t: Tensor) -> bool: return bool(t.requires_grad) or is_frozen(t)

def _map_tensors(root: Any, fn: Callable[[Tensor], Tensor]) -> None:
  """Replace every tensor reachable from root (the walk of state.get_state_dict) by fn(tensor), in the attributes,
  lists and dicts that hold it (tuples are rebuilt); a tensor held in several places maps to one new tensor."""
  memo: dict[int, Tensor] = {}
  seen: set[int] = set()
  def conv(v: Any) -> Any:
    if isinstance(v, Tensor):
      if id(v) not in memo: memo[id(v)] = fn(v)
      return memo[id(v)]
    if type(v) is tuple:
      new = tuple(conv(x) for x in v)
      return v if all(a is b for a, b in zip(new, v)) else new
    walk(v)
    return v
  def walk(o: Any) -> None:
    if is_leaf(o) or isinstance(o, tuple) or id(o) in seen: return   # (conv rebuilds tuples)
    seen.add(id(o))
    for k, v in children(o):
      if (n := conv(v)) is not v:
        if isinstance(o, (list, dict)): o[k] = n
        else: setattr(o, k, n)
  walk(root)

class IncompatibleKeys(NamedTuple):
  missing_keys: list[str]
  unexpected_keys: list[str]

def _items(o: Any) -> list[tuple[str, Any]]:
  if isinstance(o, (list, tuple)): return [(str(i), v) for i, v in enumerate(o)]
  if isinstance(o, dict): return [(str(k), v) for k, v in o.items() if isinstance(k, str) and not k.startswith("_")]
  return []

# modules whose training flag is not the default True (id -> module). Their flags are published as Tensor._modes, a
# hashable value the jit keys its captures on (with Tensor.training): a captured step does not replay its training
# graph after model.eval(). Modules are named by a serial number too, not only id(): an id is reused after its
# module dies, and a new module at that id must not match a key published for the old one
_NONDEFAULT_MODE: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
_serials = itertools.count()

def _publish_modes() -> None:
  # (id and serial: a copy of a module, which has its serial, is told apart by its id)
  Tensor._modes = frozenset((i, m.__dict__["_mode_serial"], m.__dict__.get("_training")) for i,
      m in list(_NONDEFAULT_MODE.items()))  # type: ignore[attr-defined]

class Module:
  """Base class of layers: subclass it, set tensors and submodules as attributes, define forward()."""
  @property
  def training(self) -> bool | None:
    """True (from construction, as PyTorch's) in training mode, False in evaluation mode; None follows the global
    Tensor.training switch (tinygrad's way). Set by train()/eval() for the module tree, or directly for one module."""
    return self.__dict__.get("_training", True)
  @training.setter
  def training(self, mode: bool | None) -> None:
    self._set_training(mode)
    _publish_modes()
  def _set_training(self, mode: bool | None) -> None:
    if mode is not None and not isinstance(mode, bool): raise ValueError(f"training must be a bool or None, got {type(mode).__name__} {mode!r}")
    if mode is True:
      self.__dict__.pop("_training", None)
      _NONDEFAULT_MODE.pop(id(self), None)
    else:
      self.__dict__["_training"] = mode
      if "_mode_serial" not in self.__dict__: self.__dict__["_mode_serial"] = next(_serials)
      _NONDEFAULT_MODE[id(self)] = self

  def forward(self, *args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError(f"{type(self).__name__} has no forward(): define forward(self, ...) in the subclass")
  def __call__(self, *args: Any, **kwargs: Any) -> Any: return self.forward(*args, **kwargs)

  # ---- walking
  def named_children(self) -> Iterator[tuple[str, Module]]:
    """Direct submodules: attributes that are Modules, and Modules inside list/tuple/dict attributes ("layers.0")."""
    seen: set[int] = set()
    pairs = _items(self) + [(k, v) for k, v in vars(self).items() if not k.startswith("_")]
    for k, v in pairs:
      if isinstance(v, Module): cands = [(k, v)]
      else: cands = [(f"{k}.{k2}", v2) for k2, v2 in _items(v) if isinstance(v2, Module)]
      for name, m in cands:
        if id(m) not in seen:
          seen.add(id(m))
          yield name, m
  def children(self) -> Iterator[Module]:
    """Direct submodules (see named_children)."""
    for _, m in self.named_children(): yield m
  def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
    """This module ("" or prefix) and every submodule below it, each once, with dotted names."""
    seen: set[int] = set()
    def walk(m: Module, pre: str) -> Iterator[tuple[str, Module]]:
      if id(m) in seen: return
      seen.add(id(m))
      yield pre, m
      for name, c in m.named_children(): yield from walk(c, f"{pre}.{name}" if pre else name)
    yield from walk(self, prefix)
  def modules(self) -> Iterator[Module]:
    """This module and every submodule below it."""
    for _, m in self.named_modules(): yield m
  def named_parameters(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Tensor]]:
    """(name, tensor) for each parameter (requires_grad=True, or frozen by requires_grad_(False)), once each, in
    state-dict order."""
    yield from self._named_tensors(prefix, recurse, True)
  def parameters(self, recurse: bool = True) -> Iterator[Tensor]:
    """The parameters (requires_grad=True, or frozen by requires_grad_(False)), once each, in state-dict order."""
    for _, t in self.named_parameters(recurse=recurse): yield t
  def named_buffers(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Tensor]]:
    """(name, tensor) for each tensor that is not a parameter (running statistics, counters)."""
    yield from self._named_tensors(prefix, recurse, False)
  def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
    """The tensors that are not parameters (running statistics, counters)."""
    for _, t in self.named_buffers(recurse=recurse): yield t
  def _named_tensors(self, prefix: str, recurse: bool, params: bool) -> Iterator[tuple[str, Tensor]]:
    from baregrad.tensor.nn.state import get_state_dict
    sd = get_state_dict(self, prefix)
    if not recurse:
      subs = {n for n, _ in self.named_children()}
      sd = {k: v for k, v in sd.items() if not any(k[len(prefix):].lstrip(".").startswith(s + ".") for s in subs)}
    seen: set[int] = set()
    for k, t in sd.items():
      if _is_param(t) == params and id(t) not in seen:
        seen.add(id(t))
        yield k, t

  # ---- state
  def state_dict(self, prefix: str = "") -> dict[str, Tensor]:
    """{dotted name: tensor} of every parameter and buffer (the tensors themselves, not copies)."""
    from baregrad.tensor.nn.state import get_state_dict
    return get_state_dict(self, prefix)
  def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True) -> IncompatibleKeys:
    """Copy values (Tensors or NumPy arrays) into this module's tensors in place; strict: missing or unexpected keys
    raise (KeyError naming them); a shape mismatch always raises ValueError. Both are RuntimeErrors too, as PyTorch's.
    Returns (missing_keys, unexpected_keys)."""
    from baregrad.tensor.nn.state import load_state_dict
    r = load_state_dict(self, state_dict, strict=strict)
    return IncompatibleKeys(r["missing_keys"], r["unexpected_keys"])

  # ---- switches
  def train(self, mode: bool = True) -> Module:
    """Set training mode on this module and every submodule (dropout active, batch statistics used and running
    statistics updated; mode=False: dropout off, running statistics used); returns self."""
    if not isinstance(mode, bool): raise ValueError(f"train(): mode must be a bool, got {type(mode).__name__} {mode!r}")
    for m in self.modules(): m._set_training(mode)
    _publish_modes()
    return self
  def eval(self) -> Module:
    """train(False): evaluation mode for this module and every submodule; returns self."""
    return self.train(False)
  def requires_grad_(self, requires_grad: bool = True) -> Module:
    """Set requires_grad on every parameter of this module and its submodules; returns self. Frozen parameters
    (False) stay parameters, and True unfreezes them, as in PyTorch."""
    if not isinstance(requires_grad,
        bool): raise TypeError(f"requires_grad_(): requires_grad must be a bool, got {type(requires_grad).__name__} {requires_grad!r}")
    for t in list(self.parameters()):
      t.requires_grad_(requires_grad)
      if requires_grad: _FROZEN.pop(id(t), None)
      else: _FROZEN[id(t)] = t
    return self
  def zero_grad(self, set_to_none: bool = True) -> None:
    """Drop the gradients of every parameter (set_to_none=False sets them to zeros instead)."""
    for t in self.parameters(): t.grad = None if set_to_none or t.grad is None else t.grad.zeros_like()
  # ---- device and dtype
  def to(self, *args: Any, **kwargs: Any) -> Module:
    """Move and/or cast every parameter and buffer: to(device), to(dtype), to(device, dtype), to(tensor) (its device
    and dtype). A dtype applies to floating-point tensors only, as PyTorch's. Each tensor attribute is replaced by
    the converted tensor (a new leaf keeping requires_grad, frozen state and a converted grad); returns self."""
    if len(args) > 2: raise TypeError(f"to() takes at most 2 positional arguments (device, dtype), got {len(args)}")
    unknown = set(kwargs) - {"device", "dtype", "non_blocking", "memory_format", "copy"}
    if unknown: raise TypeError(f"to() got unexpected keyword arguments {sorted(unknown)}")
    device, dtype = kwargs.get("device"), kwargs.get("dtype")
    for a in args:
      if isinstance(a, Tensor): device, dtype = a.device, a.dtype
      elif _is_dtype_arg(a): dtype = a
      else: device = a
    if dtype is not None:
      dtype = to_dtype(dtype)
      if not dtypes.is_float(dtype): raise TypeError(f"nn.Module.to only accepts floating point dtypes, but got desired dtype={dtype}")
    return self._convert(device, dtype)
  def half(self) -> Module:
    """Floating-point parameters and buffers cast to float16; returns self."""
    return self._convert(None, dtypes.float16)
  def float(self) -> Module:
    """Floating-point parameters and buffers cast to float32; returns self."""
    return self._convert(None, dtypes.float32)
  def double(self) -> Module:
    """Floating-point parameters and buffers cast to float64; returns self."""
    return self._convert(None, dtypes.float64)
  def bfloat16(self) -> Module:
    """Floating-point parameters and buffers cast to bfloat16; returns self."""
    return self._convert(None, dtypes.bfloat16)
  def cpu(self) -> Module:
    """Every parameter and buffer on the CPU device; returns self."""
    return self._convert("CPU", None)
  def _convert(self, device: Any, dtype: Any) -> Module:
    def fn(t: Tensor) -> Tensor:
      dt = dtype if dtype is not None and dtypes.is_float(t.dtype) else None
      moved = t.to(device, dt)
      if moved is t or (moved.device == t.device and moved.dtype == t.dtype): return t
      new = moved.detach().contiguous().realize()
      if t.requires_grad: new.requires_grad_(True)
      elif t.requires_grad is False: new.requires_grad = False
      if is_frozen(t): _FROZEN[id(new)] = new
      if t.grad is not None: new.grad = t.grad.to(device, new.dtype if dt is not None else None).contiguous().realize()
      return new
    _map_tensors(self, fn)
    return self

  def apply(self, fn: Callable[[Module], Any]) -> Module:
    """Call fn on every submodule (children first) and then on self, as PyTorch does; returns self."""
    for c in self.children(): c.apply(fn)
    fn(self)
    return self

  # ---- printing
  def extra_repr(self) -> str:
    """The constructor arguments shown in repr(); layers override it."""
    return ""
  def __repr__(self) -> str:
    kids = [f"({name}): " + repr(m).replace("\n", "\n  ") for name, m in self.named_children()]
    extra = self.extra_repr()
    if not kids: return f"{type(self).__name__}({extra})"
    return f"{type(self).__name__}(\n  " + "\n  ".join(([extra.replace(chr(10), chr(10) + '  ')] if extra else []) + kids) + "\n)"

class ModuleList(Module, list):
  """A list of modules: indexable and iterable; state-dict keys are "0.weight", "1.bias", ..."""
  def __init__(self, modules: Any = ()) -> None: list.__init__(self, modules)
  def forward(self, *args: Any, **kwargs: Any) -> Any: raise NotImplementedError("ModuleList has no forward(): iterate over it")
  __hash__ = object.__hash__  # type: ignore[assignment]
  def __repr__(self) -> str: return Module.__repr__(self)

class ModuleDict(Module, dict):
  """A dict of modules by name; state-dict keys are "name.weight", ..."""
  def __init__(self, modules: Any = None) -> None: dict.__init__(self, modules or {})
  def forward(self, *args: Any, **kwargs: Any) -> Any: raise NotImplementedError("ModuleDict has no forward(): index it by name")
  __hash__ = object.__hash__  # type: ignore[assignment]
  def __repr__(self) -> str: return Module.__repr__(self)
