"""OnnxRunner: an ONNX model built as one lazy Tensor graph per call, realized at the end (so the scheduler fuses
across ONNX nodes), or captured once by baregrad.jit and replayed.

Where values live while the graph is built:
- model inputs are Tensors on the runner's device;
- initializers and Constant values stay host NumPy arrays until an operator needs them as Tensors (ctx.t(): uploaded
  once per runner; one-element constants become inline constants, no buffer);
- shapes are host arrays (Shape, Size), and operators whose inputs are all small host constants (shape arithmetic:
  Gather/Concat/Slice/Unsqueeze/Cast/Add/... of shapes) are evaluated on the host by FOLD, never as kernels.
Host syncs (the only places a Tensor is read back while building): an operator argument that must be known on the
host to build the graph (Reshape's shape, Slice's starts, TopK's k, Resize's sizes, Pad's pads, If's condition, Loop's
trip count and condition, ...) when the model computes it from its inputs at run time. Values derived only from
constants are not data-dependent; a sync of one that depends on the inputs marks the runner data-dependent, and the
jitted path is then refused for it (a replay would not redo the host decision)."""
from __future__ import annotations
from collections import ChainMap
from typing import Any, Sequence
import numpy as np
from baregrad import dtypes, Device, jit
from baregrad.tensor import Tensor
from baregrad.tensor.jit import JitError
from baregrad.onnx import lowp, proto
from baregrad.onnx.lowp import LowP
from baregrad.onnx.errors import OnnxError, OnnxInputError, UnsupportedOperator
from baregrad.onnx.proto import Graph, Node, Function, _AttrRef
from baregrad.onnx.registry import FOLD, lookup

FOLD_MAX = 4096  # host-folded results larger than this go back to the Tensor path

class Ctx:
  """What an operator function sees while one graph is being built."""
  def __init__(self, runner: OnnxRunner):
    self.runner, self.device, self.half = runner, runner.device, runner.half
    self.node: Node | None = None
    self.scope: Any = None               # the values the current node's subgraphs can read
    self.const_ids: set[int] = set()   # ids of Tensors computed from constants only
    self.keep: list[Any] = []          # keeps those Tensors alive so their ids stay unique during the build

  # ---- conversions
  def t(self, v: Any, dtype: Any = None) -> Any:
    """v as a Tensor on the runner's device (None stays None); host arrays are uploaded (initializers once per runner)."""
    if v is None or isinstance(v, Tensor): return v if dtype is None or v is None or v.dtype == dtype else v.cast(dtype)
    if isinstance(v, list): raise OnnxError("a sequence was given where a tensor is expected")
    if isinstance(v, LowP) or lowp.onnx_type_of_np(v) is not None:
      name = v.name if isinstance(v, LowP) else v.dtype.name
      raise UnsupportedOperator(f"an input of type {name} (a low-precision type held as its encodings): only Cast, CastLike, "
                                "QuantizeLinear and DequantizeLinear compute with it")
    t = self.runner._const_tensor(v)
    self.mark_const(t)
    return t if dtype is None or t.dtype == dtype else t.cast(dtype)
  def value(self, v: Any) -> Any:
    """v as a Tensor, or as a LowP where its type is a low-precision one (for the operators that convert them)."""
    if isinstance(v, LowP): return v
    if isinstance(v, np.ndarray) and lowp.onnx_type_of_np(v) is not None: return self.mark_const(lowp.from_numpy(v, self.device))
    return self.t(v)
  def mark_const(self, t: Any) -> Any:
    if isinstance(t, (Tensor, LowP)): self.const_ids.add(id(t)); self.keep.append(t)
    return t
  def is_const(self, v: Any) -> bool:
    return v is None or isinstance(v, np.ndarray) or (isinstance(v, (Tensor, LowP)) and id(v) in self.const_ids) or \
      (isinstance(v, list) and all(self.is_const(x) for x in v))
  def host(self, v: Any, what: str) -> np.ndarray:
    """The value of v on the host. A Tensor is realized and read back (a sync); one that depends on the model's
    inputs makes the model data-dependent (no jitted replay)."""
    if isinstance(v, np.ndarray): return v
    if isinstance(v, Tensor):
      if id(v) not in self.const_ids:
        self.runner.data_dependent = self.runner.data_dependent or f"{self.node.label() if self.node else 'graph'} reads {what} on the host"
      a = v.numpy()
      return a.astype(proto.bf16_np()) if v.dtype == dtypes.bfloat16 else a
    raise OnnxError(f"{what}: expected a tensor, got {type(v).__name__}")
  def ints(self, v: Any, what: str) -> list[int]:
    a = self.host(v, what)
    if a.dtype.kind not in "iub": raise OnnxError(f"{what} must be integers, got {a.dtype}")
    return [int(x) for x in a.reshape(-1)]
  def scalar(self, v: Any, what: str) -> Any:
    a = self.host(v, what)
    if a.size != 1: raise OnnxError(f"{what} must have one element, got shape {a.shape}")
    return a.reshape(-1)[0].item()
  def dtype(self, onnx_type: int, what: str = "") -> Any:
    """The baregrad dtype computations use for an ONNX type (float32 -> float16 in a half-precision runner)."""
    d = proto.to_dtype(onnx_type, what or (self.node.label() if self.node else ""))
    return dtypes.float16 if self.half and d == dtypes.float32 else d
  @property
  def opset(self) -> int: return self.node.opset if self.node else 0

  # ---- subgraphs (If, Loop, Scan bodies)
  def run_graph(self, g: Graph, scope: Any, bindings: dict[str, Any]) -> list[Any]:
    inner = scope.new_child({**{k: v for k, v in g.initializers.items()}, **bindings})
    self.runner._exec(self, g.nodes, inner)
    outs = []
    for o in g.outputs:
      if o.name not in inner: raise OnnxError(f"subgraph {g.name!r} never computes its output {o.name!r}")
      outs.append(inner[o.name])
    return outs

class OnnxRunner:
  """A loaded ONNX model. Call it with the model's inputs (NumPy arrays or Tensors, by position or by name); it
  returns {output name: Tensor}, realized; an output of a low-precision type (float8, float4, int4, ...) is a LowP
  (its encodings, one per byte; .numpy() gives the ml_dtypes array). `jit=True` captures the kernels on the second
  call and replays them after (outputs then live in the captured buffers: a later call overwrites them, copy what you keep)."""
  def __init__(self, model: Any, device: str | None = None, jit: bool = False, half: bool = False):
    onnx = proto.require_onnx()
    m = proto.read_model(model)
    self.device = Device.canonicalize(device or Device.DEFAULT)
    self.half = half
    self.opsets = proto.model_opsets(m)
    for dom, v in self.opsets.items():
      if dom == "ai.onnx" and v > onnx.defs.onnx_opset_version():
        raise UnsupportedOperator(f"the model imports opset {v} of the default domain; "
                                  f"the installed onnx {onnx.__version__} knows up to {onnx.defs.onnx_opset_version()}")
    self.ir_version, self.producer = m.ir_version, f"{m.producer_name} {m.producer_version}".strip()
    self.functions = proto.parse_functions(m, self.opsets)
    self.graph = proto.parse_graph(m.graph, self.opsets)
    if self.graph.outer: raise OnnxError(f"the graph reads values nothing defines: {sorted(self.graph.outer)}")
    if half: self._to_half(self.graph)
    self._check_ops(self.graph.nodes, set())
    inits = self.graph.initializers
    self.inputs = [v for v in self.graph.inputs if v.name not in inits]
    self.optional_inputs = [v for v in self.graph.inputs if v.name in inits]
    self.input_names = [v.name for v in self.inputs]
    self.output_names = [v.name for v in self.graph.outputs]
    self._consts: dict[int, Tensor] = {}
    self._persistent = {id(a) for a in _arrays(self.graph)} | \
      {id(a) for f in self.functions.values() for n in f.nodes for a in n.attrs.values() if isinstance(a, np.ndarray)}
    self.data_dependent: str | bool = False
    self.use_jit = jit
    self._jitted: Any = None
    self._lowp_outs: dict[int, int] = {}   # jitted outputs of a low-precision type: position -> ONNX type

  def __repr__(self) -> str:
    return f"<OnnxRunner inputs={self.input_names} outputs={self.output_names} device={self.device}{' half' if self.half else ''}>"

  # ---- load-time checks and rewrites
  def _check_ops(self, nodes: list[Node], seen_fn: set) -> None:
    missing = []
    for n in nodes:
      if (n.domain, n.op) in self.functions:
        if (n.domain, n.op) not in seen_fn:
          seen_fn.add((n.domain, n.op)); self._check_ops(self.functions[(n.domain, n.op)].nodes, seen_fn)
      elif lookup(n.domain, n.op) is None: missing.append(n)
      for a in n.attrs.values():
        for g in (a if isinstance(a, list) else [a]):
          if isinstance(g, Graph): self._check_ops(g.nodes, seen_fn)
    if missing:
      what = "; ".join(f"{n.op} (domain {n.domain or 'ai.onnx'}, opset {n.opset}) at {'node ' + repr(n.name) if n.name else f'node #{n.index}'}"
                       for n in missing[:8])
      raise UnsupportedOperator(f"unsupported operator{'s' if len(missing) > 1 else ''}: {what}{f' and {len(missing) - 8} more' if len(missing) > 8 else ''}")

  def _to_half(self, g: Graph) -> None:
    """float32 constants become float16 (clipped to its range, so a -1e9 mask stays finite)."""
    def h(a: Any) -> Any:
      if isinstance(a, np.ndarray) and a.dtype == np.float32: return np.clip(a, -65504, 65504).astype(np.float16)
      return a
    for k in list(g.initializers): g.initializers[k] = h(g.initializers[k])
    for n in g.nodes:
      for k, a in list(n.attrs.items()):
        if isinstance(a, Graph): self._to_half(a)
        elif isinstance(a, list) and a and isinstance(a[0], Graph):
          for sub in a: self._to_half(sub)
        else: n.attrs[k] = h(a)
    for f in self.functions.values():
      for n in f.nodes:
        for k, a in list(n.attrs.items()): n.attrs[k] = h(a)

  def _const_tensor(self, a: np.ndarray) -> Tensor:
    d = proto.dtype_of_np(a)
    if a.size == 1:  # an inline constant: no buffer, fuses into the kernels that read it
      v = a.reshape(-1)[0]
      v = float(v) if d in (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64) else bool(v) if d == dtypes.bool else int(v)
      return Tensor.full(a.shape, v, dtype=d, device=self.device)
    t = self._consts.get(id(a))
    if t is not None: return t
    t = Tensor(a.astype(np.float32) if d == dtypes.bfloat16 else a, device=self.device, dtype=d)
    if id(a) in self._persistent: self._consts[id(a)] = t  # initializers and Constant values: uploaded once
    return t

  # ---- inputs
  def _feeds(self, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    if len(args) > len(self.inputs):
      raise OnnxInputError(f"{len(args)} positional inputs given; the model takes {len(self.inputs)}: {self.input_names}")
    given = {v.name: a for v, a in zip(self.inputs, args)}
    known = {v.name for v in self.graph.inputs}
    for k, a in kwargs.items():
      if k not in known: raise OnnxInputError(f"the model has no input {k!r}; its inputs are {self.input_names}")
      if k in given: raise OnnxInputError(f"input {k!r} given both by position and by name")
      given[k] = a
    feeds = {}
    for v in self.graph.inputs:
      if v.name not in given:
        if v.name in self.graph.initializers: continue
        raise OnnxInputError(f"missing input {v.name!r} ({self._describe(v)}); the model's inputs are {self.input_names}")
      feeds[v.name] = self._feed(v, given[v.name])
    return feeds

  def _describe(self, v: proto.ValueInfo) -> str:
    if v.kind != "tensor": return v.kind
    t = proto.onnx_type_name(v.elem_type) if v.elem_type else "any type"
    return f"{t}, shape {tuple(v.shape) if v.shape is not None else 'any'}"

  def _feed(self, v: proto.ValueInfo, a: Any) -> Any:
    if v.kind == "sequence_type":
      if not isinstance(a, (list, tuple)): raise OnnxInputError(f"input {v.name!r} is a sequence: give a list of arrays, got {type(a).__name__}")
      return [self._feed(proto.ValueInfo(v.name, None, None), x) for x in a]
    if v.kind == "optional_type" or (v.kind != "tensor" and isinstance(a, (list, tuple))):
      if a is None: return None
      if isinstance(a, (list, tuple)): return [self._feed(proto.ValueInfo(v.name, None, None), x) for x in a]
      return self._feed(proto.ValueInfo(v.name, None, None), a)
    if a is None: raise OnnxInputError(f"input {v.name!r} ({self._describe(v)}) is None")
    if (v.elem_type and lowp.is_lowp(v.elem_type)) or isinstance(a, LowP): return self._feed_lowp(v, a)
    if not v.elem_type and isinstance(a, np.ndarray) and lowp.onnx_type_of_np(a) is not None: return lowp.from_numpy(a, self.device)
    if isinstance(a, Tensor): got_dt, shape = a.dtype, a.shape
    else:
      if not isinstance(a, np.ndarray):
        try: a = np.asarray(a)
        except Exception as e: raise OnnxInputError(f"input {v.name!r}: cannot make an array of {type(a).__name__}") from e
      if a.dtype.kind in "OSU": raise OnnxInputError(f"input {v.name!r}: {a.dtype} arrays (strings, objects) are not supported")
      try: got_dt = proto.dtype_of_np(a)
      except OnnxError: raise OnnxInputError(f"input {v.name!r} ({self._describe(v)}): NumPy dtype {a.dtype} is not supported") from None
      shape = a.shape
    if v.elem_type:
      want = proto.to_dtype(v.elem_type, f"input {v.name!r}")
      ok = got_dt == want or (self.half and want == dtypes.float32 and got_dt == dtypes.float16)
      if not ok: raise OnnxInputError(f"input {v.name!r} expects {proto.onnx_type_name(v.elem_type)} ({self._describe(v)}), got {got_dt.name} "
                                      f"{'tensor' if isinstance(a, Tensor) else 'array'} of shape {tuple(shape)}")
    if v.shape is not None:
      bad = len(shape) != len(v.shape) or any(isinstance(d, int) and d > 0 and d != s for d, s in zip(v.shape, shape))
      if bad: raise OnnxInputError(f"input {v.name!r} expects shape {tuple(v.shape)} ({self._describe(v)}), got shape {tuple(shape)}")
    if isinstance(a, Tensor): t = a if a.device == self.device else a.to(self.device)
    else: t = Tensor(a.astype(np.float32) if got_dt == dtypes.bfloat16 else a, device=self.device, dtype=got_dt)
    if self.half and t.dtype == dtypes.float32: t = t.cast(dtypes.float16)
    return t

  def _feed_lowp(self, v: proto.ValueInfo, a: Any) -> LowP:
    """An input of a low-precision type: an ml_dtypes array of that type (or a LowP)."""
    if not (v.elem_type and lowp.is_lowp(v.elem_type)):
      raise OnnxInputError(f"input {v.name!r} expects {self._describe(v)}, got a {a.name} value of shape {tuple(a.shape)}")
    want = lowp.type_name(v.elem_type)
    if isinstance(a, LowP): got, shape = a.name, a.shape
    elif isinstance(a, np.ndarray): got, shape = a.dtype.name, a.shape
    else: raise OnnxInputError(f"input {v.name!r} expects {want} ({self._describe(v)}): give an ml_dtypes.{want} array, got {type(a).__name__}")
    if got != want: raise OnnxInputError(f"input {v.name!r} expects {want} ({self._describe(v)}), got {got} of shape {tuple(shape)}")
    if v.shape is not None and (len(shape) != len(v.shape) or any(isinstance(d, int) and d > 0 and d != s for d, s in zip(v.shape, shape))):
      raise OnnxInputError(f"input {v.name!r} expects shape {tuple(v.shape)} ({self._describe(v)}), got shape {tuple(shape)}")
    if isinstance(a, LowP): return a if a.device == self.device else LowP(a.bits.to(self.device), a.onnx_type)
    return lowp.from_numpy(a, self.device)

  # ---- building the graph
  def _exec(self, ctx: Ctx, nodes: list[Node], scope: Any) -> None:
    for n in nodes:
      ins = []
      for name in n.inputs:
        if name == "": ins.append(None)
        elif name in scope: ins.append(scope[name])
        else: raise OnnxError(f"{n.label()}: input {name!r} is not computed by any earlier node, initializer or graph input")
      prev, prev_scope, ctx.node, ctx.scope = ctx.node, ctx.scope, n, scope
      try: outs = self._node(ctx, n, ins, scope)
      except OnnxError as e:
        if n.label() in str(e) or isinstance(e, OnnxInputError): raise
        raise type(e)(f"{n.label()}: {e}") from e
      except JitError: raise  # the jitted path handles it
      except Exception as e: raise OnnxError(f"{n.label()}: {type(e).__name__}: {e}") from e
      finally: ctx.node, ctx.scope = prev, prev_scope
      outs = outs if isinstance(outs, tuple) else (outs,)
      const = all(ctx.is_const(v) for v in ins)
      for i, name in enumerate(n.outputs):
        if name == "": continue
        if i >= len(outs): raise OnnxError(f"{n.label()}: output {i} ({name!r}) is not produced by this operator's implementation")
        if const: ctx.mark_const(outs[i])
        scope[name] = outs[i]

  def _node(self, ctx: Ctx, n: Node, ins: list[Any], scope: Any) -> Any:
    key = (n.domain, n.op)
    if key in self.functions: return self._call_function(ctx, n, self.functions[key], ins, scope)
    if n.op in FOLD and n.domain in ("", "ai.onnx") and ins and \
       all(v is None or (isinstance(v, np.ndarray) and lowp.onnx_type_of_np(v) is None) for v in ins) and \
       sum(v.size for v in ins if v is not None) <= FOLD_MAX:
      r = FOLD[n.op](ctx, n, *ins)
      if r is not NotImplemented:
        rs = r if isinstance(r, tuple) else (r,)
        if all(isinstance(x, np.ndarray) and x.size <= FOLD_MAX for x in rs): return r
    fn = lookup(n.domain, n.op)
    if fn is None: raise UnsupportedOperator(f"operator {n.op} is not supported")
    return fn(ctx, n, *ins)

  def _call_function(self, ctx: Ctx, n: Node, f: Function, ins: list[Any], scope: Any) -> Any:
    attrs = {**f.attr_defaults, **{k: v for k, v in n.attrs.items()}}
    body = []
    for b in f.nodes:
      a2 = {}
      for k, v in b.attrs.items():
        if isinstance(v, _AttrRef):
          if v.name in attrs: a2[k] = attrs[v.name]
        else: a2[k] = v
      body.append(Node(b.op, b.domain, b.name, b.inputs, b.outputs, a2, b.opset, b.index))
    inner = ChainMap({k: v for k, v in zip(f.inputs, ins) if v is not None})
    self._exec(ctx, body, inner)
    return tuple(inner.get(o) for o in f.outputs)

  def build(self, feeds: dict[str, Any]) -> dict[str, Any]:
    """The model's outputs as lazy Tensors (or host arrays / lists), nothing realized."""
    ctx = Ctx(self)
    scope = ChainMap({**self.graph.initializers, **feeds})
    self._exec(ctx, self.graph.nodes, scope)
    out = {}
    for o in self.graph.outputs:
      if o.name not in scope: raise OnnxError(f"the graph never computes its output {o.name!r}")
      out[o.name] = scope[o.name]
    return out

  # ---- running
  def __call__(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
    feeds = self._feeds(args, kwargs)
    if self.use_jit and not self.data_dependent: return self._run_jit(feeds)
    return self._realize(self.build(feeds))

  def _realize(self, outs: dict[str, Any]) -> dict[str, Any]:
    res = {k: self._as_tensor(v) for k, v in outs.items()}
    ts = [t.bits if isinstance(t, LowP) else t for v in res.values() for t in (v if isinstance(v, list) else [v]) if isinstance(t, (Tensor, LowP))]
    if ts: ts[0].realize(*ts[1:])
    return res

  def _as_tensor(self, v: Any) -> Any:
    if isinstance(v, np.ndarray) and lowp.onnx_type_of_np(v) is not None: return lowp.from_numpy(v, self.device)
    if isinstance(v, np.ndarray): return Tensor(v.astype(np.float32) if v.dtype.name == "bfloat16" else v, device=self.device, dtype=proto.dtype_of_np(v))
    if isinstance(v, list): return [self._as_tensor(x) for x in v]
    return v

  def _run_jit(self, feeds: dict[str, Any]) -> dict[str, Any]:
    names = list(feeds)
    flat = [feeds[k] for k in names]
    if any(not isinstance(v, Tensor) for v in flat):  # sequences / optionals: not jittable
      return self._realize(self.build(feeds))
    if self._jitted is None:
      def fn(*ts: Tensor) -> tuple:
        outs = self._realize(self.build(dict(zip(names, ts))))
        if any(not isinstance(v, (Tensor, LowP)) for v in outs.values()): raise OnnxError("jit: the model's outputs must be tensors")
        self._lowp_outs = {i: v.onnx_type for i, v in enumerate(outs.values()) if isinstance(v, LowP)}
        return tuple(v.bits if isinstance(v, LowP) else v for v in outs.values())
      self._jitted = jit(fn)
    try: out = self._jitted(*flat)
    except JitError as e:  # the build read a value on the host while being captured: build it every call instead
      self.data_dependent, self._jitted = f"the graph reads a value on the host ({e})", None
      return self._realize(self.build(feeds))
    if self.data_dependent: self._jitted = None  # found on the first (eager) call: never replay this model
    out = [LowP(t, self._lowp_outs[i]) if i in self._lowp_outs else t for i, t in enumerate(out)]
    return dict(zip(self.output_names, out))

  def run_numpy(self, *args: Any, **kwargs: Any) -> list[Any]:
    """The outputs in the model's order as NumPy arrays (bfloat16 as ml_dtypes.bfloat16, sequences as lists)."""
    outs = self(*args, **kwargs)
    return [to_numpy(outs[k]) for k in self.output_names]

def _arrays(g: Graph) -> list[np.ndarray]:
  """Every array a graph holds for its lifetime (initializers, attribute tensors), its subgraphs' too."""
  out = list(g.initializers.values())
  for n in g.nodes:
    for a in n.attrs.values():
      for x in (a if isinstance(a, list) else [a]):
        if isinstance(x, np.ndarray): out.append(x)
        elif isinstance(x, Graph): out += _arrays(x)
  return out

def to_numpy(v: Any) -> Any:
  if v is None: return None
  if isinstance(v, list): return [to_numpy(x) for x in v]
  if isinstance(v, np.ndarray): return v
  if isinstance(v, LowP): return v.numpy()
  a = v.numpy()
  return a.astype(proto.bf16_np()) if v.dtype == dtypes.bfloat16 else a
