"""Reading an ONNX model: bytes or file -> ModelProto, dtypes (ONNX <-> baregrad <-> NumPy), attributes, initializers,
and the model as plain Python objects (Graph, Node) that the runner walks. Needs the `onnx` package (an optional extra)."""
from __future__ import annotations
import os
from dataclasses import dataclass, field
from typing import Any, TYPE_CHECKING
import numpy as np
from baregrad import dtypes
from baregrad.onnx.errors import OnnxError, OnnxLoadError
if TYPE_CHECKING: from baregrad.ir.dtype import DType

def require_onnx() -> Any:
  try: import onnx
  except ImportError as e: raise ImportError("baregrad.onnx needs the onnx package: pip install 'baregrad[onnx]'") from e
  return onnx

# ONNX TensorProto.DataType -> baregrad dtype (the ones baregrad computes with)
_ONNX_TO_DT: dict[int, DType] = {1: dtypes.float32, 2: dtypes.uint8, 3: dtypes.int8, 4: dtypes.uint16, 5: dtypes.int16, 6: dtypes.int32,
                                 7: dtypes.int64, 9: dtypes.bool, 10: dtypes.float16, 11: dtypes.float64, 12: dtypes.uint32, 13: dtypes.uint64,
                                 16: dtypes.bfloat16}
_DT_TO_ONNX = {v: k for k, v in _ONNX_TO_DT.items()}

def onnx_type_name(t: int) -> str:
  try:
    from onnx.helper import tensor_dtype_to_string
    return tensor_dtype_to_string(t).removeprefix("TensorProto.")
  except Exception: return f"elem_type {t}"

def to_dtype(t: int, where: str = "") -> DType:
  """The baregrad dtype of an ONNX element type; a clear error for the ones baregrad has no kernels for."""
  if t in _ONNX_TO_DT: return _ONNX_TO_DT[t]
  raise OnnxError(f"{where + ': ' if where else ''}ONNX type {onnx_type_name(t)} is not supported (supported: "
                  f"{', '.join(onnx_type_name(k) for k in sorted(_ONNX_TO_DT))})")

def onnx_type(d: DType) -> int: return _DT_TO_ONNX[d]

def bf16_np() -> Any:
  import ml_dtypes  # onnx depends on it: NumPy's spelling of bfloat16
  return ml_dtypes.bfloat16

def np_dtype(d: DType) -> np.dtype:
  if d == dtypes.bfloat16: return np.dtype(bf16_np())
  return np.dtype({dtypes.bool: "bool", dtypes.float16: "float16", dtypes.float32: "float32", dtypes.float64: "float64", dtypes.int8: "int8",
                   dtypes.uint8: "uint8", dtypes.int16: "int16", dtypes.uint16: "uint16", dtypes.int32: "int32", dtypes.uint32: "uint32",
                   dtypes.int64: "int64", dtypes.uint64: "uint64"}[d])

def dtype_of_np(a: np.ndarray, where: str = "") -> DType:
  n = a.dtype.name
  if n == "bfloat16": return dtypes.bfloat16
  for d in _ONNX_TO_DT.values():
    if d != dtypes.bfloat16 and np_dtype(d) == a.dtype: return d
  raise OnnxError(f"{where + ': ' if where else ''}NumPy dtype {a.dtype} has no baregrad dtype")

# ---------------------------------------------------------------- the model as Python objects

@dataclass
class ValueInfo:
  name: str
  elem_type: int | None                  # None: not a tensor (sequence, optional, ...) or not given
  shape: tuple[int | str | None, ...] | None  # ints, dim_param names, None for unknown; None when no shape given
  kind: str = "tensor"

@dataclass
class Node:
  op: str
  domain: str
  name: str
  inputs: list[str]
  outputs: list[str]
  attrs: dict[str, Any]
  opset: int
  index: int = 0
  def label(self) -> str:
    return f"node {self.name!r} ({self.op}{'' if self.domain in ('', 'ai.onnx') else ' in ' + self.domain}, opset {self.opset})" if self.name else \
           f"node #{self.index} ({self.op}{'' if self.domain in ('', 'ai.onnx') else ' in ' + self.domain}, opset {self.opset}, outputs {self.outputs})"

@dataclass
class Graph:
  name: str
  nodes: list[Node]
  inputs: list[ValueInfo]
  outputs: list[ValueInfo]
  initializers: dict[str, np.ndarray]
  # the names a subgraph reads from the scopes around it
  outer: set[str] = field(default_factory=set)

@dataclass
class Function:
  """A model-local function (FunctionProto): inlined where a node calls it."""
  name: str
  domain: str
  inputs: list[str]
  outputs: list[str]
  attr_names: list[str]
  attr_defaults: dict[str, Any]
  nodes: list[Node]

def read_model(model: Any) -> Any:
  """A ModelProto from a path, bytes, or a ModelProto; a malformed or truncated file is an OnnxLoadError."""
  onnx = require_onnx()
  if isinstance(model, onnx.ModelProto): return model
  if isinstance(model, (str, os.PathLike)):
    path = os.fspath(model)
    try:
      with open(path, "rb") as f: data = f.read()
    except OSError as e: raise OnnxLoadError(f"cannot read ONNX model {path!r}: {e.strerror or e}") from e
    where = f"ONNX model {path!r}"
    base = os.path.dirname(os.path.abspath(path))
  elif isinstance(model, (bytes, bytearray, memoryview)):
    data, where, base = bytes(model), f"ONNX model ({len(model)} bytes)", None
  else: raise TypeError(f"load() takes a path, bytes or an onnx.ModelProto, got {type(model).__name__}")
  if not data: raise OnnxLoadError(f"{where} is empty")
  m = onnx.ModelProto()
  try: m.ParseFromString(data)
  except Exception as e: raise OnnxLoadError(f"{where} is not a valid ONNX protobuf (malformed or truncated): {e}") from e
  if not m.HasField("graph") or (len(m.graph.node) == 0 and len(m.graph.output) == 0):
    raise OnnxLoadError(f"{where} has no graph (not an ONNX model, or truncated: {len(data)} bytes parsed)")
  if base is not None and any(t.data_location == onnx.TensorProto.EXTERNAL for t in m.graph.initializer):
    try:
      from onnx.external_data_helper import load_external_data_for_model
      load_external_data_for_model(m, base)
    except Exception as e: raise OnnxLoadError(f"{where}: cannot load its external data from {base!r}: {e}") from e
  return m

def tensor_to_numpy(t: Any, where: str) -> np.ndarray:
  """An initializer or attribute TensorProto as a NumPy array (bfloat16 as ml_dtypes.bfloat16)."""
  from onnx import numpy_helper
  from baregrad.onnx import lowp
  if t.data_type not in _ONNX_TO_DT and not lowp.is_lowp(t.data_type): to_dtype(t.data_type, where)  # raises with the type's name
  if t.data_location == 1 and not t.raw_data:
    raise OnnxLoadError(f"{where}: tensor {t.name!r} keeps its data in an external file that was not loaded (load the model from its path)")
  try: a = numpy_helper.to_array(t)
  except Exception as e: raise OnnxLoadError(f"{where}: tensor {t.name!r} cannot be decoded (truncated data?): {e}") from e
  if lowp.is_lowp(t.data_type): return a  # an ml_dtypes array: the runner uploads its encodings (lowp.from_numpy)
  want = np_dtype(_ONNX_TO_DT[t.data_type])
  if a.dtype != want: a = a.astype(want)
  return a

def _value_info(v: Any) -> ValueInfo:
  tt = v.type
  which = tt.WhichOneof("value")
  if which != "tensor_type": return ValueInfo(v.name, None, None, which or "unknown")
  shape = None
  if tt.tensor_type.HasField("shape"):
    shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.tensor_type.shape.dim)
  return ValueInfo(v.name, tt.tensor_type.elem_type or None, shape)

def _attr(a: Any, where: str, opsets: dict[str, int]) -> Any:
  from onnx import AttributeProto as A
  t = a.type
  if t == A.FLOAT: return float(a.f)
  if t == A.INT: return int(a.i)
  if t == A.STRING: return a.s.decode("utf-8", "replace")
  if t == A.TENSOR: return tensor_to_numpy(a.t, f"{where}, attribute {a.name!r}")
  if t == A.GRAPH: return parse_graph(a.g, opsets, f"{where}, attribute {a.name!r}")
  if t == A.FLOATS: return [float(x) for x in a.floats]
  if t == A.INTS: return [int(x) for x in a.ints]
  if t == A.STRINGS: return [s.decode("utf-8", "replace") for s in a.strings]
  if t == A.TENSORS: return [tensor_to_numpy(x, f"{where}, attribute {a.name!r}") for x in a.tensors]
  if t == A.TYPE_PROTO: return a.tp
  if t == A.TYPE_PROTOS: return list(a.type_protos)
  if t == A.GRAPHS: return [parse_graph(g, opsets, f"{where}, attribute {a.name!r}") for g in a.graphs]
  raise OnnxError(f"{where}: attribute {a.name!r} of type {A.AttributeType.Name(t)} is not supported")

def parse_nodes(protos: Any, opsets: dict[str, int], where: str) -> list[Node]:
  nodes = []
  for i, n in enumerate(protos):
    dom = n.domain or ""
    label = f"{where}node {n.name!r} ({n.op_type})" if n.name else f"{where}node #{i} ({n.op_type})"
    attrs = {}
    for a in n.attribute:
      if a.ref_attr_name: attrs[a.name] = _AttrRef(a.ref_attr_name)
      else: attrs[a.name] = _attr(a, label, opsets)
    nodes.append(Node(n.op_type, dom, n.name, list(n.input), list(n.output), attrs, opsets.get("ai.onnx" if dom == "" else dom, opsets.get(dom, 0)), i))
  return nodes

@dataclass(frozen=True)
class _AttrRef:
  """An attribute of a function body node that takes the value of the calling node's attribute `name`."""
  name: str

def parse_graph(g: Any, opsets: dict[str, int], where: str = "") -> Graph:
  inits = {t.name: tensor_to_numpy(t, f"{where}initializer") for t in g.initializer}
  for st in g.sparse_initializer:
    raise OnnxError(f"{where}sparse initializer {st.values.name!r} is not supported")
  nodes = parse_nodes(g.node, opsets, f"{where}{', ' if where else ''}")
  gr = Graph(g.name, nodes, [_value_info(v) for v in g.input], [_value_info(v) for v in g.output], inits)
  defined = set(inits) | {v.name for v in gr.inputs} | {""}
  for n in nodes:
    for i in n.inputs:
      if i not in defined: gr.outer.add(i)
    for a in n.attrs.values():
      for sub in (a if isinstance(a, list) else [a]):
        if isinstance(sub, Graph): gr.outer |= {o for o in sub.outer if o not in defined}
    defined |= set(n.outputs)
  for o in gr.outputs:
    if o.name not in defined: gr.outer.add(o.name)
  return gr

def parse_functions(m: Any, opsets: dict[str, int]) -> dict[tuple[str, str], Function]:
  out = {}
  for f in m.functions:
    fops = dict(opsets)
    for o in f.opset_import: fops["ai.onnx" if o.domain in ("", "ai.onnx") else o.domain] = o.version
    defaults = {}
    for a in f.attribute_proto: defaults[a.name] = _attr(a, f"function {f.name!r}", fops)
    out[(f.domain, f.name)] = Function(f.name, f.domain, list(f.input), list(f.output), list(f.attribute) + list(defaults), defaults,
                                       parse_nodes(f.node, fops, f"function {f.name!r}, "))
  return out

def model_opsets(m: Any) -> dict[str, int]:
  ops = {}
  for o in m.opset_import: ops["ai.onnx" if o.domain in ("", "ai.onnx") else o.domain] = o.version
  if "ai.onnx" not in ops: ops["ai.onnx"] = 1
  return ops
