"""jit: capture the kernels a function runs, then replay them with new inputs of the same shapes and dtypes.

Call 1 runs the function normally (kernels compile); call 2 runs it again while recording every kernel and
copy; later calls only swap the input buffers into the recorded launches. On an HCQ device the whole capture
is one recorded queue (Device.graph) with patched arguments, submitted once. A call whose tensor inputs differ
in shape, dtype or device (or whose other arguments differ) is captured anew; nothing is ever replayed on
inputs it was not captured for.

Returned tensors are views of the captured output buffers: a replay overwrites them (copy what you keep).
Randomness inside a captured function (Tensor.rand, dropout) is captured with its key: replays repeat it."""
from __future__ import annotations
import functools
from dataclasses import dataclass, field
from typing import Any, Callable
from baregrad.helpers import getenv
from baregrad.hal import Device
from baregrad.engine import realize as _realize
from baregrad.engine.graph import BufRef

class JitError(RuntimeError): pass

@dataclass
class _Launch:
  runner: Any                      # CompiledRunner
  refs: list[BufRef]

@dataclass
class _Capture:
  launches: list[_Launch] = field(default_factory=list)
  copies: list[Any] = field(default_factory=list)
  def add_kernel(self, runner: Any, item: Any) -> None: self.launches.append(_Launch(runner, list(item.bufs)))
  def add_copy(self, item: Any) -> None: raise JitError("a copy between devices inside a jitted function is not supported yet")

class _Captured:
  def __init__(self, cap: _Capture, inputs: list[BufRef], outputs: Any, out_refs: list):
    self.launches, self.inputs, self.outputs, self.out_refs = cap.launches, inputs, outputs, out_refs
    # where each input buffer appears: (launch index, buffer argument index)
    self.input_slots: list[list[tuple[int, int]]] = [[] for _ in inputs]
    ids = {r.id: i for i, r in enumerate(inputs)}
    for k, l in enumerate(self.launches):
      for j, g in enumerate(l.runner.spec.bufs):
        ref = l.refs[g.arg]
        if ref.id in ids: self.input_slots[ids[ref.id]].append((k, j))
    self.graph = None
    devs = {l.runner.device for l in self.launches}
    if len(devs) == 1 and not getenv("JIT_NOGRAPH", 0):
      dev = Device[devs.pop()]
      if hasattr(dev, "compute_queue_t") and hasattr(dev, "alloc_args_memory"):
        from baregrad.hcq.graph import HCQGraph  # the device is an HCQ device: it offers the graph
        self.graph = HCQGraph(dev, [(l.runner.prg, [l.refs[g.arg].ensure()._buf for g in l.runner.spec.bufs], (),
                                     l.runner.spec.global_size, l.runner.spec.local_size) for l in self.launches])

  def replay(self, new_inputs: list[Any]) -> None:
    if self.graph is not None:
      patches = [(k, j, b._buf.va_addr) for slots, b in zip(self.input_slots, new_inputs) for k, j in slots]
      self.graph.replay(patches)
      return
    for k, l in enumerate(self.launches):
      bufs = [r.ensure() for r in l.refs]
      for i, slots in enumerate(self.input_slots):
        for kk, j in slots:
          if kk == k: bufs[l.runner.spec.bufs[j].arg] = new_inputs[i]
      l.runner(bufs)

def _tensors_in(args: tuple, kwargs: dict) -> list:
  from baregrad.tensor.tensor import Tensor
  out = [a for a in args if isinstance(a, Tensor)]
  out += [v for _, v in sorted(kwargs.items()) if isinstance(v, Tensor)]
  return out

def _signature(args: tuple, kwargs: dict) -> tuple:
  from baregrad.tensor.tensor import Tensor
  def sig(a: Any) -> Any:
    if isinstance(a, Tensor): return ("T", a.shape, a.dtype, a.device)
    try: hash(a); return ("V", a)
    except TypeError: return ("O", id(a))
  return tuple(sig(a) for a in args) + tuple((k, sig(v)) for k, v in sorted(kwargs.items()))

class jit:
  """Decorator: `@jit def step(x, y): ...`; returns what the function returns (tensors realized)."""
  def __init__(self, fn: Callable):
    self.fn = fn
    self.calls: dict[tuple, int] = {}
    self.captured: dict[tuple, _Captured] = {}
    functools.update_wrapper(self, fn)

  def reset(self) -> None: self.calls.clear(); self.captured.clear()

  def __call__(self, *args: Any, **kwargs: Any) -> Any:
    from baregrad.tensor.tensor import Tensor
    if getenv("JIT", 1) == 0: return self.fn(*args, **kwargs)
    key = _signature(args, kwargs)
    ins = _tensors_in(args, kwargs)
    in_bufs = [t._buffer() for t in ins]
    n = self.calls.get(key, 0)
    self.calls[key] = n + 1
    if key in self.captured:
      cap = self.captured[key]
      cap.replay(in_bufs)
      return cap.outputs
    if n == 0:
      out = self.fn(*args, **kwargs)
      _realize_outputs(out)
      return out
    # capture: record everything the function launches
    rec = _Capture()
    in_refs = [_ref_of(t) for t in ins]
    _realize.capturing.append(rec)
    try:
      out = self.fn(*args, **kwargs)
      out_ts = _realize_outputs(out)
    finally: _realize.capturing.remove(rec)
    if not rec.launches: raise JitError(f"jit of {getattr(self.fn, '__name__', 'fn')}: the function launched no kernels")
    self.captured[key] = _Captured(rec, in_refs, out, [_ref_of(t) for t in out_ts])
    return out

def _ref_of(t: Any) -> BufRef:
  from baregrad.engine import lazy
  from baregrad.engine.graph import base_of
  return base_of(lazy.substitute_realized(t.uop)).arg

def _realize_outputs(out: Any) -> list:
  from baregrad.tensor.tensor import Tensor
  ts = [out] if isinstance(out, Tensor) else [o for o in out if isinstance(o, Tensor)] if isinstance(out, (tuple, list)) else \
       [v for v in out.values() if isinstance(v, Tensor)] if isinstance(out, dict) else []
  for t in ts: t._buffer()
  return ts
