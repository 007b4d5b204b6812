"""Small real ONNX models built with onnx.helper (no downloads) for the baregrad.onnx tests and examples/onnx_infer.py:
a CNN (conv, batch norm, pools, gemm, softmax) and a pre-norm transformer block (layer norm, multi-head causal
attention written out as exporters do it, with Shape/Gather/Concat shape arithmetic, GELU MLP, residuals).
`python3 tests/onnx/onnx_models.py DIR` writes them as DIR/small_cnn.onnx and DIR/small_transformer.onnx."""
from __future__ import annotations
import os, sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper

OPSET = 17

def _init(rng: np.random.Generator, name: str, *shape: int, scale: float = 0.2) -> object:
  return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

def small_cnn(seed: int = 0, batch: int | str = 1) -> object:
  """(N, 3, 32, 32) float32 image -> (N, 10) class probabilities."""
  rng = np.random.default_rng(seed)
  inits = [_init(rng, "w1", 8, 3, 3, 3), _init(rng, "b1", 8),
           numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "bn_scale"), _init(rng, "bn_bias", 8),
           _init(rng, "bn_mean", 8, scale=0.1), numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "bn_var"),
           _init(rng, "w2", 16, 8, 3, 3, scale=0.15), _init(rng, "b2", 16), _init(rng, "w3", 16, 16, 3, 3, scale=0.1),
           _init(rng, "fc_w", 10, 16, scale=0.3), _init(rng, "fc_b", 10)]
  nodes = [
    helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
    helper.make_node("BatchNormalization", ["c1", "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["n1"], epsilon=1e-5, name="bn1"),
    helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
    helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="pool1"),
    helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2], name="conv2"),
    helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
    helper.make_node("Conv", ["r2", "w3"], ["c3"], auto_pad="SAME_UPPER", group=2, name="conv3_grouped"),
    helper.make_node("Add", ["c3", "r2"], ["res"], name="residual"),
    helper.make_node("AveragePool", ["res"], ["ap"], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], count_include_pad=0, name="avgpool"),
    helper.make_node("GlobalAveragePool", ["ap"], ["g"], name="gap"),
    helper.make_node("Flatten", ["g"], ["f"], axis=1, name="flatten"),
    helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"], transB=1, name="fc"),
    helper.make_node("Softmax", ["logits"], ["probs"], axis=-1, name="softmax"),
  ]
  for i in inits:  # conv3 is grouped: its weight takes half the channels
    if i.name == "w3": i.CopyFrom(numpy_helper.from_array((rng.standard_normal((16, 8, 3, 3)) * 0.1).astype(np.float32), "w3"))
  g = helper.make_graph(nodes, "small_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 32, 32])],
                        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, 10])], inits)
  return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="baregrad-tests")

def small_transformer(seed: int = 0, d: int = 32, heads: int = 4, ff: int = 64) -> object:
  """(B, S, d) float32 -> (B, S, d): one pre-norm causal transformer block; B and S are dynamic."""
  rng = np.random.default_rng(seed)
  hd = d // heads
  C = lambda name, v: numpy_helper.from_array(np.asarray(v), name)
  inits = [numpy_helper.from_array(np.ones(d, np.float32) + rng.standard_normal(d).astype(np.float32) * 0.1, "ln1_g"), _init(rng, "ln1_b", d, scale=0.1),
           _init(rng, "wq", d, d), _init(rng, "wk", d, d), _init(rng, "wv", d, d), _init(rng, "bq", d, scale=0.05),
           _init(rng, "bk", d, scale=0.05), _init(rng, "bv", d, scale=0.05), _init(rng, "wo", d, d), _init(rng, "bo", d, scale=0.05),
           numpy_helper.from_array(np.ones(d, np.float32), "ln2_g"), _init(rng, "ln2_b", d, scale=0.1),
           _init(rng, "w_up", d, ff), _init(rng, "b_up", ff, scale=0.05), _init(rng, "w_down", ff, d, scale=0.15), _init(rng, "b_down", d, scale=0.05),
           C("i0", np.array([0], np.int64)), C("i1", np.array([1], np.int64)), C("heads_hd", np.array([heads, hd], np.int64)),
           C("neg_d", np.array([d], np.int64)), C("scale", np.array(1.0 / np.sqrt(hd), np.float32)),
           C("neg_big", np.array(-1e9, np.float32)), C("zero_f", np.array(0.0, np.float32)), C("one_i", np.array(1, np.int64)),
           C("zero_i", np.array(0, np.int64)), C("half", np.array(0.5, np.float32)), C("one_f", np.array(1.0, np.float32)),
           C("rsqrt2", np.array(1 / np.sqrt(2), np.float32))]
  N = helper.make_node
  nodes = [
    N("LayerNormalization", ["x", "ln1_g", "ln1_b"], ["h"], axis=-1, epsilon=1e-5, name="ln1"),
    # the (B, S) of the input, as exporters compute it
    N("Shape", ["x"], ["xs"], name="shape"),
    N("Gather", ["xs", "i0"], ["B"], axis=0, name="batch_dim"),
    N("Gather", ["xs", "i1"], ["S"], axis=0, name="seq_dim"),
    N("Concat", ["B", "S", "heads_hd"], ["split_shape"], axis=0, name="split_shape"),
    N("Concat", ["B", "S", "neg_d"], ["merge_shape"], axis=0, name="merge_shape"),
  ]
  for p in ("q", "k", "v"):
    nodes += [N("MatMul", ["h", f"w{p}"], [f"{p}0"], name=f"{p}_proj"), N("Add", [f"{p}0", f"b{p}"], [f"{p}1"], name=f"{p}_bias"),
              N("Reshape", [f"{p}1", "split_shape"], [f"{p}2"], name=f"{p}_split"),
              N("Transpose", [f"{p}2"], [f"{p}h"], perm=[0, 2, 1, 3] if p != "k" else [0, 2, 3, 1], name=f"{p}_heads")]
  nodes += [
    N("MatMul", ["qh", "kh"], ["scores0"], name="qk"),
    N("Mul", ["scores0", "scale"], ["scores1"], name="qk_scale"),
    # causal mask from the sequence length: Range/Unsqueeze/LessOrEqual/Where
    N("Squeeze", ["S"], ["S0"], name="seq_scalar"),
    N("Range", ["zero_i", "S0", "one_i"], ["pos"], name="positions"),
    N("Unsqueeze", ["pos", "i1"], ["pos_col"], name="pos_col"),
    N("Unsqueeze", ["pos", "i0"], ["pos_row"], name="pos_row"),
    N("LessOrEqual", ["pos_row", "pos_col"], ["allowed"], name="causal"),
    N("Where", ["allowed", "zero_f", "neg_big"], ["mask"], name="mask"),
    N("Add", ["scores1", "mask"], ["scores2"], name="masked"),
    N("Softmax", ["scores2"], ["attn"], axis=-1, name="attn_softmax"),
    N("MatMul", ["attn", "vh"], ["ctx0"], name="attn_v"),
    N("Transpose", ["ctx0"], ["ctx1"], perm=[0, 2, 1, 3], name="ctx_merge_heads"),
    N("Reshape", ["ctx1", "merge_shape"], ["ctx2"], name="ctx_merge"),
    N("MatMul", ["ctx2", "wo"], ["o0"], name="out_proj"), N("Add", ["o0", "bo"], ["o1"], name="out_bias"),
    N("Add", ["x", "o1"], ["r1"], name="residual1"),
    N("LayerNormalization", ["r1", "ln2_g", "ln2_b"], ["h2"], axis=-1, epsilon=1e-5, name="ln2"),
    N("MatMul", ["h2", "w_up"], ["u0"], name="mlp_up"), N("Add", ["u0", "b_up"], ["u1"], name="mlp_up_bias"),
    # GELU as exporters write it: x * 0.5 * (1 + erf(x / sqrt 2))
    N("Mul", ["u1", "rsqrt2"], ["g0"], name="gelu_scale"), N("Erf", ["g0"], ["g1"], name="gelu_erf"),
    N("Add", ["g1", "one_f"], ["g2"], name="gelu_add"), N("Mul", ["u1", "g2"], ["g3"], name="gelu_mul"),
    N("Mul", ["g3", "half"], ["g4"], name="gelu_half"),
    N("MatMul", ["g4", "w_down"], ["m0"], name="mlp_down"), N("Add", ["m0", "b_down"], ["m1"], name="mlp_down_bias"),
    N("Add", ["r1", "m1"], ["y"], name="residual2"),
  ]
  g = helper.make_graph(nodes, "small_transformer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", d])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "S", d])], inits)
  return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="baregrad-tests")

MODELS = {"small_cnn": (small_cnn, {"x": (1, 3, 32, 32)}), "small_transformer": (small_transformer, {"x": (2, 16, 32)})}

def write_all(out_dir: str) -> list[str]:
  import onnx
  os.makedirs(out_dir, exist_ok=True)
  paths = []
  for name, (fn, _) in MODELS.items():
    m = fn()
    onnx.checker.check_model(m)
    p = os.path.join(out_dir, f"{name}.onnx")
    onnx.save(m, p)
    paths.append(p)
  return paths

if __name__ == "__main__":
  for p in write_all(sys.argv[1] if len(sys.argv) > 1 else "."): print(p)
