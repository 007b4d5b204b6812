"""baregrad.onnx.lowp: the low-precision ONNX types (float8, float6, float4, int4/int2) held as their encodings and
converted by Tensor ops, against ml_dtypes (the encodings onnx's own reference produces): every encoding decoded,
float32 values of every kind encoded (ties, subnormals, overflow, inf, NaN, -0), saturating or not; and the runner's
boundary (inputs, initializers, outputs, the jitted path, bad input)."""
from __future__ import annotations
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ml_dtypes = pytest.importorskip("ml_dtypes")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.numpy_helper import saturate_cast, to_float8e8m0  # noqa: E402
import baregrad.onnx as bo  # noqa: E402
from baregrad import Tensor  # noqa: E402
from baregrad.onnx import lowp  # noqa: E402
from baregrad.onnx.errors import OnnxInputError, UnsupportedOperator  # noqa: E402

FLOATS = {t: f for t, f in lowp.FORMATS.items() if isinstance(f, lowp.MiniFloat)}
INTS = {t: f for t, f in lowp.FORMATS.items() if isinstance(f, lowp.SmallInt)}

def _values() -> np.ndarray:
  """float32 values of every kind: specials, every float8/float4 grid point and the midpoints between them (ties),
  values just beside those, subnormals, huge values, and random ones over many binades."""
  grid = np.concatenate([np.arange(256, dtype=np.uint8).view(np.dtype(getattr(ml_dtypes, f.name))).astype(np.float32) for f in FLOATS.values()])
  grid = np.unique(grid[np.isfinite(grid)])
  mids = (grid[:-1] + grid[1:]) / 2
  near = np.concatenate([np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf))])
  rnd = np.random.default_rng(0)
  wide = (rnd.standard_normal(2000) * np.exp2(rnd.integers(-30, 30, 2000))).astype(np.float32)
  special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 1e-39, 3e38, -3e38,
                      61440.0, 57344.0, 448.0, 464.0, 240.0, 6.0, 7.0], np.float32)
  return np.concatenate([special, grid, mids, near, wide, -mids]).astype(np.float32)

def _same(got: np.ndarray, want: np.ndarray, what: str) -> None:
  g, w = got.astype(np.float32), want.astype(np.float32)
  bad = ~((g == w) | (np.isnan(g) & np.isnan(w)))
  assert not bad.any(), f"{what}: {bad.sum()} values differ, e.g. at {np.flatnonzero(bad)[:5]}: got {g[bad][:5]}, want {w[bad][:5]}"

@pytest.mark.parametrize("t", list(FLOATS) + [24], ids=lambda t: lowp.type_name(t))
def test_decode_every_encoding(t):
  b = np.arange(256, dtype=np.uint8)
  if t in FLOATS and FLOATS[t].E + FLOATS[t].M < 7: b = b & ((1 << (FLOATS[t].E + FLOATS[t].M + 1)) - 1)
  got = lowp.decode(lowp.LowP(Tensor(b), t)).numpy()
  _same(got, b.view(lowp.np_type(t)).astype(np.float32), lowp.type_name(t))

@pytest.mark.parametrize("t", list(FLOATS), ids=lambda t: lowp.type_name(t))
@pytest.mark.parametrize("saturate", [True, False])
def test_encode_floats(t, saturate):
  x = _values()
  got = lowp.encode(Tensor(x), t, saturate).numpy()
  dt = lowp.np_type(t)
  want = saturate_cast(x, dt) if saturate and FLOATS[t].nan != "none" else x.astype(dt)
  if FLOATS[t].nan == "none": want = np.where(np.isnan(x), 0, want).astype(dt)  # no NaN in float4/float6: 0 (ml_dtypes gives a +-0)
  _same(got, want, f"{lowp.type_name(t)} saturate={saturate}")
  if FLOATS[t].nan == "uz": assert not (got.view(np.uint8) == 0x80)[~np.isnan(want.astype(np.float32))].any(), "fnuz: -0 encoded"

@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [True, False])
def test_encode_e8m0(mode, saturate):
  x = np.concatenate([_values(), np.array([2.0 ** 127 * 1.5, 2.0 ** 127 * 1.75, 3.0, 1.5, 1.25, 0.75], np.float32)])
  got = lowp.encode(Tensor(x), 24, saturate, mode).numpy()
  _same(got.view(np.uint8), to_float8e8m0(x, saturate, mode).view(np.uint8), f"e8m0 {mode} saturate={saturate}")

@pytest.mark.parametrize("t", list(INTS), ids=lambda t: lowp.type_name(t))
def test_small_ints(t):
  x = np.array([-9.7, -8.5, -8, -2.5, -0.5, 0, 0.7, 2.5, 3.5, 7.9, 8, 100, np.nan, np.inf, -np.inf], np.float32)
  dt = lowp.np_type(t)
  _same(lowp.encode(Tensor(x), t).numpy(), x.astype(dt), "from float32")
  i = np.arange(-20, 20, dtype=np.int8)
  _same(lowp.encode(Tensor(i), t).numpy(), i.astype(dt), "from int8")
  every = np.arange(1 << INTS[t].bits, dtype=np.uint8)
  assert lowp.decode(lowp.LowP(Tensor(every), t)).numpy().tolist() == every.view(dt).astype(np.int32).tolist()

def _cast_model(src: int, dst: int, shape=(2, 3), inits=()):
  return helper.make_model(helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=dst)], "g",
                           [helper.make_tensor_value_info("x", src, shape)], [helper.make_tensor_value_info("y", dst, shape)], list(inits)),
                           opset_imports=[helper.make_opsetid("", 21)])

def test_runner_boundary_and_jit():
  x = np.array([[0.3, -2.5, 448.0], [1e-3, -0.0, 17.0]], np.float32)
  r = bo.load(_cast_model(TensorProto.FLOAT, TensorProto.FLOAT8E4M3FN))
  out = r(x)["y"]
  assert isinstance(out, lowp.LowP) and out.shape == (2, 3) and out.name == "float8_e4m3fn"
  _same(out.numpy(), saturate_cast(x, ml_dtypes.float8_e4m3fn), "runner output")
  back = bo.load(_cast_model(TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT16))
  _same(back.run_numpy(out.numpy())[0], out.numpy().astype(np.float16), "ml_dtypes input")
  _same(back.run_numpy(x=out)[0], out.numpy().astype(np.float16), "LowP input")
  rj = bo.load(_cast_model(TensorProto.FLOAT, TensorProto.INT4), jit=True)
  for k in range(3):
    xi = x * (k + 1)
    _same(rj.run_numpy(xi)[0], xi.astype(ml_dtypes.int4), f"jitted call {k}")
  # a low-precision initializer, dequantized
  zp = numpy_helper.from_array(np.array([1, -2, 3], ml_dtypes.int4), "zp")
  m = helper.make_model(helper.make_graph([helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], axis=1)], "g",
                        [helper.make_tensor_value_info("q", TensorProto.INT4, [2, 3]), helper.make_tensor_value_info("s", TensorProto.FLOAT, [3])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [zp]), opset_imports=[helper.make_opsetid("", 21)])
  q = np.array([[7, -8, 0], [1, 2, -3]], ml_dtypes.int4)
  s = np.array([0.5, 2.0, 4.0], np.float32)
  np.testing.assert_array_equal(bo.load(m).run_numpy(q, s)[0], (q.astype(np.float32) - np.array([1, -2, 3], np.float32)) * s)

def test_bad_input():
  r = bo.load(_cast_model(TensorProto.FLOAT8E5M2, TensorProto.FLOAT))
  with pytest.raises(OnnxInputError, match=r"input 'x' expects float8_e5m2 .* got float8_e4m3fn of shape \(2, 3\)"):
    r(np.zeros((2, 3), ml_dtypes.float8_e4m3fn))
  with pytest.raises(OnnxInputError, match=r"give an ml_dtypes.float8_e5m2 array, got list"): r([[0.0] * 3] * 2)
  with pytest.raises(OnnxInputError, match=r"expects shape \(2, 3\)"): r(np.zeros((3, 2), ml_dtypes.float8_e5m2))
  m = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT8E4M3FN, [2])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT8E4M3FN, [2])]), opset_imports=[helper.make_opsetid("", 21)])
  with pytest.raises(UnsupportedOperator, match=r"Relu.*float8_e4m3fn .*only Cast, CastLike, QuantizeLinear and DequantizeLinear"):
    bo.load(m)(np.zeros(2, ml_dtypes.float8_e4m3fn))
