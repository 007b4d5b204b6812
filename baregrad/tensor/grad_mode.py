"""Gradient recording switches: no_grad, enable_grad, inference_mode, set_grad_enabled (PyTorch's names).

Each is a context manager and a decorator (`@no_grad` and `@no_grad()` both work). While recording is off, ops on
tensors that require grad return tensors that do not (so realize() frees their graphs); leaves made with
requires_grad=True still require it, as in PyTorch. The switch is per thread, as PyTorch's is.
Unlike PyTorch, inference_mode is the same as no_grad (there are no version counters to skip)."""
from __future__ import annotations
import functools, threading
from typing import Any, Callable

class _State(threading.local):
  enabled: bool = True
_state = _State()   # (read directly by Tensor._new, on the path of every op's result)

def is_grad_enabled() -> bool:
  """Whether ops record what backward() needs (False inside no_grad / inference_mode)."""
  return _state.enabled

class _GradSwitch:
  """Base: sets the switch for a block or a decorated function (`_target` says to what), then puts the old value back."""
  _mode: bool = True
  def __new__(cls, *args: Any, **kw: Any) -> Any:
    # `@no_grad` without parentheses: the class is called with the function itself
    if cls in (no_grad, enable_grad, inference_mode) and len(args) == 1 and not kw and callable(args[0]):
      return cls()(args[0])
    return super().__new__(cls)
  def _target(self, prev: bool) -> bool: return self._mode
  def __enter__(self) -> None:
    self._prev = _state.enabled
    _state.enabled = self._target(self._prev)
  def __exit__(self, *exc: object) -> None: _state.enabled = self._prev
  def __call__(self, fn: Callable) -> Callable:
    if not callable(fn): raise TypeError(f"{type(self).__name__}() decorates a function, got {type(fn).__name__}")
    @functools.wraps(fn)
    def wrapper(*a: Any, **k: Any) -> Any:
      prev = _state.enabled
      _state.enabled = self._target(prev)
      try: return fn(*a, **k)
      finally: _state.enabled = prev
    return wrapper

class no_grad(_GradSwitch):
  """Turn gradient recording off: `with no_grad(): ...` or `@no_grad()` / `@no_grad` on a function."""
  _mode = False

class enable_grad(_GradSwitch):
  """Turn gradient recording back on inside a no_grad block (context manager or decorator)."""
  _mode = True

class inference_mode(_GradSwitch):
  """PyTorch's inference_mode(mode=True): here the same as no_grad; mode=False leaves recording as it is."""
  def __init__(self, mode: bool = True) -> None:
    if not isinstance(mode, bool): raise TypeError(f"inference_mode: mode must be a bool, got {type(mode).__name__} {mode!r}")
    self._on = mode
  def _target(self, prev: bool) -> bool: return False if self._on else prev

class set_grad_enabled(_GradSwitch):
  """Set recording on or off: at once (a plain call, as in PyTorch) and for a `with` block or decorated function."""
  def __init__(self, mode: bool) -> None:
    if not isinstance(mode, bool): raise TypeError(f"set_grad_enabled: mode must be a bool, got {type(mode).__name__} {mode!r}")
    self._mode, self._before = mode, _state.enabled
    _state.enabled = mode
  def __enter__(self) -> None: self._prev = self._before

__all__ = ["no_grad", "enable_grad", "inference_mode", "set_grad_enabled", "is_grad_enabled"]
