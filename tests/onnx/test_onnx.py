"""baregrad.onnx: loading, calling, fusion across nodes, the jitted path, half precision, host shape arithmetic, and bad
input (malformed files, unsupported operators, wrong inputs), checked against onnx's reference evaluator and, where
installed, onnxruntime."""
from __future__ import annotations
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
import baregrad.onnx as bo  # noqa: E402
from baregrad import Tensor, dtypes  # noqa: E402
from tests.onnx.onnx_models import small_cnn, small_transformer  # noqa: E402

def _model(nodes, inputs, outputs, inits=(), opset=17):
  g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs], list(inits))
  return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])

def _ref(m, feeds): return ReferenceEvaluator(m).run(None, feeds)

FUSE = _model([helper.make_node("Add", ["x", "y"], ["a"], name="add"), helper.make_node("Relu", ["a"], ["r"], name="relu"),
               helper.make_node("Mul", ["r", "two"], ["z"], name="mul")],
              [("x", TensorProto.FLOAT, [3, 4]), ("y", TensorProto.FLOAT, [4])], [("z", TensorProto.FLOAT, [3, 4])],
              [numpy_helper.from_array(np.array(2.0, np.float32), "two")])

def test_load_path_bytes_proto_and_call_forms(tmp_path):
  x, y = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32), np.arange(4, dtype=np.float32) - 2
  want = _ref(FUSE, {"x": x, "y": y})[0]
  p = tmp_path / "m.onnx"
  onnx.save(FUSE, str(p))
  for src in (str(p), p, FUSE.SerializeToString(), FUSE):
    r = bo.load(src)
    assert r.input_names == ["x", "y"] and r.output_names == ["z"]
    for out in (r(x, y), r(x=x, y=y), r(x, y=Tensor(y))):
      assert set(out) == {"z"} and isinstance(out["z"], Tensor)
      np.testing.assert_allclose(out["z"].numpy(), want, rtol=1e-6)

def test_one_kernel_across_nodes():
  # Add -> Relu -> Mul become one fused kernel: the graph is built lazily and realized once
  r = bo.load(FUSE)
  outs = r.build(r._feeds((np.ones((3, 4), np.float32), np.ones(4, np.float32)), {}))
  assert len(outs["z"].schedule()) == 1

@pytest.mark.parametrize("build,shape", [(small_cnn, (1, 3, 32, 32)), (small_transformer, (2, 16, 32))])
def test_small_models_match_reference(build, shape):
  m = build()
  x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
  want = _ref(m, {"x": x})[0]
  got = bo.load(m)(x)
  np.testing.assert_allclose(list(got.values())[0].numpy(), want, rtol=1e-4, atol=1e-5)

def test_transformer_shape_arithmetic_stays_on_host():
  # Shape/Gather/Concat/Range/... of the causal block are folded on the host: no data-dependent sync, so jittable,
  # and a new sequence length gives a new, correct graph
  r = bo.load(small_transformer())
  rng = np.random.default_rng(2)
  for S in (5, 9):
    x = rng.standard_normal((1, S, 32)).astype(np.float32)
    np.testing.assert_allclose(r(x)["y"].numpy(), _ref(small_transformer(), {"x": x})[0], rtol=1e-4, atol=1e-5)
  assert r.data_dependent is False

@pytest.mark.parametrize("build,shape", [(small_cnn, (1, 3, 32, 32)), (small_transformer, (2, 16, 32))])
def test_jit_replays_and_matches_eager(build, shape):
  m = build()
  eager, jitted = bo.load(m), bo.load(m, jit=True)
  rng = np.random.default_rng(3)
  for i in range(4):  # call 1 runs eagerly, call 2 captures, calls 3+ replay with new inputs
    x = rng.standard_normal(shape).astype(np.float32)
    a = list(jitted(x).values())[0].numpy()
    np.testing.assert_array_equal(a, list(eager(x).values())[0].numpy())
  cap = list(jitted._jitted.captured.values())
  assert len(cap) == 1 and len(cap[0].launches) >= 5

def test_jit_refused_for_data_dependent_models():
  # If on a runtime condition with branches of different shapes: the condition is read on the host, so the graph
  # depends on the data; the jitted runner then rebuilds each call and stays right for both branches
  then_g = helper.make_graph([helper.make_node("Identity", ["x"], ["o"])], "t", [], [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)])
  else_g = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["o"], axis=0)], "e", [], [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)])
  m = _model([helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), helper.make_node("Greater", ["s", "zero"], ["c"]),
              helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
             [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, None)], [numpy_helper.from_array(np.array(0, np.float32), "zero")])
  r = bo.load(m, jit=True)
  for v in ([1, 2], [-1, -2], [3, 4], [-5, 1]):
    x = np.array(v, np.float32)
    np.testing.assert_array_equal(r(x)["y"].numpy(), _ref(m, {"x": x})[0])
  assert r.data_dependent and "If" in r.data_dependent

def test_if_with_same_shaped_branches_needs_no_sync():
  then_g = helper.make_graph([helper.make_node("Neg", ["x"], ["o"])], "t", [], [helper.make_tensor_value_info("o", TensorProto.FLOAT, [2])])
  else_g = helper.make_graph([helper.make_node("Abs", ["x"], ["o"])], "e", [], [helper.make_tensor_value_info("o", TensorProto.FLOAT, [2])])
  m = _model([helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), helper.make_node("Greater", ["s", "zero"], ["c"]),
              helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
             [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])], [numpy_helper.from_array(np.array(0, np.float32), "zero")])
  r = bo.load(m, jit=True)
  for v in ([1, 2], [-1, -2], [3, -4]):
    x = np.array(v, np.float32)
    np.testing.assert_array_equal(r(x)["y"].numpy(), _ref(m, {"x": x})[0])
  assert r.data_dependent is False

@pytest.mark.parametrize("build,shape", [(small_cnn, (1, 3, 32, 32)), (small_transformer, (2, 16, 32))])
def test_half_within_1e2_of_float32(build, shape):
  m = build()
  x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
  f32 = list(bo.load(m)(x).values())[0].numpy()
  h = bo.load(m, half=True)
  out = list(h(x).values())[0]
  assert out.dtype == dtypes.float16
  assert np.max(np.abs(out.numpy().astype(np.float32) - f32)) < 1e-2
  # float16 inputs are taken as they are
  out2 = list(h(x.astype(np.float16)).values())[0]
  assert np.max(np.abs(out2.numpy().astype(np.float32) - f32)) < 1e-2

def test_half_reductions_accumulate_in_float32():
  # 4096 ones summed in float16 steps would stop at 2048; float32 accumulation gives 4096 exactly
  m = _model([helper.make_node("ReduceSum", ["x", "ax"], ["s"], keepdims=0), helper.make_node("MatMul", ["x2", "w"], ["mm"])],
             [("x", TensorProto.FLOAT, [4096]), ("x2", TensorProto.FLOAT, [1, 4096]), ("w", TensorProto.FLOAT, [4096, 1])],
             [("s", TensorProto.FLOAT, []), ("mm", TensorProto.FLOAT, [1, 1])], [numpy_helper.from_array(np.array([0], np.int64), "ax")])
  one = np.ones(4096, np.float32)
  out = bo.load(m, half=True)(one, one.reshape(1, -1), one.reshape(-1, 1))
  assert out["s"].dtype == dtypes.float16 and out["s"].numpy().item() == 4096.0
  assert out["mm"].numpy().item() == 4096.0

def test_cast_every_dtype():
  types = [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.INT8, TensorProto.UINT8,
           TensorProto.INT16, TensorProto.UINT16, TensorProto.INT32, TensorProto.UINT32, TensorProto.INT64, TensorProto.UINT64, TensorProto.BOOL]
  x = np.array([0.0, 1.5, -2.0, 3.25, 100.0], np.float32)
  for t in types:
    m = _model([helper.make_node("Cast", ["x"], ["y"], to=t), helper.make_node("Cast", ["y"], ["z"], to=TensorProto.FLOAT)],
               [("x", TensorProto.FLOAT, [5])], [("y", t, [5]), ("z", TensorProto.FLOAT, [5])])
    xs = np.abs(x) if t in (TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64) else x
    got = bo.load(m).run_numpy(xs)
    want = _ref(m, {"x": xs})
    assert got[0].dtype == want[0].dtype, t
    np.testing.assert_array_equal(got[0].astype(np.float64), want[0].astype(np.float64))
    np.testing.assert_array_equal(got[1], want[1])

def test_initializers_upload_once():
  r = bo.load(small_cnn())
  x = np.zeros((1, 3, 32, 32), np.float32)
  r(x)
  n = len(r._consts)
  r(x); r(x)
  assert n > 0 and len(r._consts) == n

def test_backend_api():
  from baregrad.onnx.backend import BaregradBackend, prepare, run_model, run_node, supports_device
  x = np.arange(6, dtype=np.float32).reshape(2, 3) - 3
  assert supports_device("CPU")
  (y,) = run_node(helper.make_node("Relu", ["x"], ["y"]), [x])
  np.testing.assert_array_equal(y, np.maximum(x, 0))
  ys = run_model(FUSE, [np.ones((3, 4), np.float32), np.ones(4, np.float32)])
  np.testing.assert_array_equal(ys[0], np.full((3, 4), 4.0, np.float32))
  rep = prepare(FUSE)
  assert rep.run({"x": np.zeros((3, 4), np.float32), "y": np.ones(4, np.float32)})[0].sum() == 24
  assert BaregradBackend.supports_device("CPU")

def test_onnxruntime_agrees_on_examples():
  ort = pytest.importorskip("onnxruntime")
  for build, shape in ((small_cnn, (1, 3, 32, 32)), (small_transformer, (2, 16, 32))):
    m = build()
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(list(bo.load(m)(x).values())[0].numpy(), want, rtol=1e-4, atol=1e-5)

def test_torch_exported_models():
  # what torch.onnx.export (TorchScript exporter, offline) writes for a conv net and a transformer encoder layer
  torch = pytest.importorskip("torch")
  import io
  torch.manual_seed(0)
  class Block(torch.nn.Module):  # a pre-norm attention block (the exporter cannot trace nn.TransformerEncoderLayer in 2.13)
    def __init__(self, d: int = 16, h: int = 2):
      super().__init__()
      self.h, self.ln, self.qkv, self.o = h, torch.nn.LayerNorm(d), torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
      self.mlp = torch.nn.Sequential(torch.nn.LayerNorm(d), torch.nn.Linear(d, 2 * d), torch.nn.GELU(), torch.nn.Linear(2 * d, d))
    def forward(self, x):
      B, S, D = x.shape
      q, k, v = self.qkv(self.ln(x)).reshape(B, S, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
      a = torch.softmax(q @ k.transpose(-1, -2) / (D // self.h) ** 0.5, -1) @ v
      x = x + self.o(a.transpose(1, 2).reshape(B, S, D))
      return x + self.mlp(x)
  cases = [(torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                torch.nn.Conv2d(8, 8, 3, stride=2), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 5)), (2, 3, 16, 16)),
           (Block(), (2, 7, 16)),
           (torch.nn.LSTM(8, 12, num_layers=1, batch_first=True), (3, 5, 8)),
           (torch.nn.GRU(8, 6, bidirectional=True), (4, 2, 8))]
  for mod, shape in cases:
    mod.eval()
    x = torch.randn(*shape)
    f = io.BytesIO()
    with torch.no_grad():
      torch.onnx.export(mod, (x,), f, dynamo=False, opset_version=17)
      want = mod(x)
    want = (want[0] if isinstance(want, tuple) else want).numpy()
    got = bo.load(f.getvalue()).run_numpy(x.numpy())[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

# ---------------------------------------------------------------- bad input

def _still_works():
  np.testing.assert_allclose(bo.load(FUSE)(np.ones((3, 4), np.float32), np.ones(4, np.float32))["z"].numpy(), 4.0)

def test_malformed_and_truncated_files(tmp_path):
  data = small_cnn().SerializeToString()
  bad = tmp_path / "trunc.onnx"
  bad.write_bytes(data[:len(data) // 3])
  for src, what in ((str(bad), "truncated"), (b"\x08\x07garbage\xff\xff\xff", "not a valid ONNX"), (b"", "empty"),
                    (str(tmp_path / "missing.onnx"), "cannot read")):
    with pytest.raises(bo.OnnxLoadError) as e: bo.load(src)
    assert what in str(e.value) or "malformed" in str(e.value) or "no graph" in str(e.value), str(e.value)
  _still_works()

def test_unsupported_operator_named_with_opset_and_node():
  m = _model([helper.make_node("Relu", ["x"], ["r"], name="ok"), helper.make_node("NotAnOnnxOp", ["r"], ["y"], name="mystery_node")],
             [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])], opset=15)
  with pytest.raises(bo.UnsupportedOperator) as e: bo.load(m)
  msg = str(e.value)
  assert "NotAnOnnxOp" in msg and "opset 15" in msg and "mystery_node" in msg
  _still_works()

def test_wrong_inputs_name_the_model_input():
  r = bo.load(FUSE)
  x, y = np.ones((3, 4), np.float32), np.ones(4, np.float32)
  cases = [((x.astype(np.int64), y), {}, "'x'", "FLOAT"), ((np.ones((3, 5), np.float32), y), {}, "'x'", "shape"),
           ((x,), {}, "missing input 'y'", ""), ((x, y), {"w": y}, "no input 'w'", ""), ((x, y, y), {}, "positional", ""),
           ((x, np.ones((2,), np.float32)), {}, "'y'", "(4,)")]
  for args, kw, a, b in cases:
    with pytest.raises(bo.OnnxInputError) as e: r(*args, **kw)
    assert a in str(e.value) and b in str(e.value), str(e.value)
  np.testing.assert_allclose(r(x, y)["z"].numpy(), 4.0)  # the runner keeps working

def test_node_errors_name_the_node():
  # a Reshape to an impossible shape fails while building, naming the node
  m = _model([helper.make_node("Reshape", ["x", "s"], ["y"], name="bad_reshape")], [("x", TensorProto.FLOAT, [6])],
             [("y", TensorProto.FLOAT, None)], [numpy_helper.from_array(np.array([4, 4], np.int64), "s")])
  with pytest.raises(bo.OnnxError) as e: bo.load(m)(np.ones(6, np.float32))
  assert "bad_reshape" in str(e.value) and "Reshape" in str(e.value)
  _still_works()

def test_unsupported_type_is_refused():
  m = _model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.COMPLEX64)], [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.COMPLEX64, [2])])
  with pytest.raises(bo.OnnxError) as e: bo.load(m)(np.ones(2, np.float32))
  assert "COMPLEX64" in str(e.value)
  _still_works()

def test_scan_opset8_batch_sequence_lens_directions():
  # body: s' = s + x, y = s' * 2; batch element 0 runs 2 of 3 steps (its output padded with zeros), input 1 reversed
  body = helper.make_graph([helper.make_node("Add", ["s", "x1"], ["s2"]), helper.make_node("Add", ["s2", "x2"], ["s3"]),
                            helper.make_node("Mul", ["s3", "two"], ["y"])], "body",
                           [helper.make_tensor_value_info(k, TensorProto.FLOAT, [2]) for k in ("s", "x1", "x2")],
                           [helper.make_tensor_value_info(k, TensorProto.FLOAT, [2]) for k in ("s3", "y")],
                           [numpy_helper.from_array(np.array(2.0, np.float32), "two")])
  m = _model([helper.make_node("Scan", ["lens", "s0", "a", "b"], ["sf", "ys"], body=body, num_scan_inputs=2, directions=[0, 1])],
             [("lens", TensorProto.INT32, [2]), ("s0", TensorProto.FLOAT, [2, 2]), ("a", TensorProto.FLOAT, [2, 3, 2]), ("b", TensorProto.FLOAT, [2, 3, 2])],
             [("sf", TensorProto.FLOAT, [2, 2]), ("ys", TensorProto.FLOAT, [2, 3, 2])], opset=8)
  rng = np.random.default_rng(5)
  s0, a, b = (rng.standard_normal(sh).astype(np.float32) for sh in ((2, 2), (2, 3, 2), (2, 3, 2)))
  lens = np.array([2, 3], np.int32)
  want_s, want_y = s0.copy(), np.zeros((2, 3, 2), np.float32)
  for i in range(2):
    for t in range(lens[i]):
      want_s[i] = want_s[i] + a[i, t] + b[i, lens[i] - 1 - t]
      want_y[i, t] = want_s[i] * 2
  sf, ys = bo.load(m).run_numpy(lens, s0, a, b)
  np.testing.assert_allclose(sf, want_s, rtol=1e-6)
  np.testing.assert_allclose(ys, want_y, rtol=1e-6)

def test_jit_falls_back_when_the_build_reads_the_host():
  # a Reshape target computed by kernels from the input's shape (Exp/Log are not host-folded): reading it back while
  # the jit captures is refused, so the runner builds the graph on every call instead, and stays right
  m = _model([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
              helper.make_node("Log", ["sf"], ["l"]), helper.make_node("Exp", ["l"], ["e"]), helper.make_node("Round", ["e"], ["rd"]),
              helper.make_node("Cast", ["rd"], ["si"], to=TensorProto.INT64), helper.make_node("ReduceProd", ["si"], ["n"], keepdims=1),
              helper.make_node("Reshape", ["x", "n"], ["y"])],
             [("x", TensorProto.FLOAT, [2, 3])], [("y", TensorProto.FLOAT, [6])])
  r = bo.load(m, jit=True)
  for k in range(4):
    x = np.arange(6, dtype=np.float32).reshape(2, 3) + k
    np.testing.assert_array_equal(r(x)["y"].numpy(), x.reshape(-1))
  assert r.data_dependent and "host" in r.data_dependent

def test_without_onnx_load_says_how_to_install(monkeypatch):
  import sys
  monkeypatch.setitem(sys.modules, "onnx", None)  # as if the extra were not installed
  with pytest.raises(ImportError, match=r"pip install 'baregrad\[onnx\]'"): bo.load(b"\x08\x07")
