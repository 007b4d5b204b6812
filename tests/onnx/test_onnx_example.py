"""examples/onnx_infer.py on the small CNN and transformer of tests/onnx/onnx_models.py: shapes, latency, agreement with
onnxruntime (when installed) and --half within 1e-2 of the float32 run."""
from __future__ import annotations
from tests.paths import REPO
import importlib.util, os, re
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from tests.onnx.onnx_models import write_all  # noqa: E402

_spec = importlib.util.spec_from_file_location("onnx_infer", os.path.join(str(REPO), "examples", "onnx_infer.py"))
onnx_infer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(onnx_infer)

@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
  return {os.path.basename(p)[:-5]: p for p in write_all(str(tmp_path_factory.mktemp("onnx_models")))}

def _diffs(out: str, what: str) -> list[float]: return [float(v) for v in re.findall(rf"max \|{re.escape(what)}\| \S+: (\S+)", out)]

@pytest.mark.parametrize("name,extra", [("small_cnn", []), ("small_transformer", ["--dim", "B=2", "--dim", "S=16"])])
def test_example_float32_and_half(models, name, extra, capsys):
  assert onnx_infer.main([models[name], "--runs", "3", *extra]) == 0
  out = capsys.readouterr().out
  assert re.search(r"output \w+: \(\d+(, \d+)*\) float32", out) and "latency: median" in out and "jit replay" in out
  ort_d = _diffs(out, "baregrad - onnxruntime")
  if ort_d: assert max(ort_d) < 1e-4, out
  assert onnx_infer.main([models[name], "--runs", "2", "--half", *extra]) == 0
  out = capsys.readouterr().out
  assert "float16" in out
  d = _diffs(out, "float16 - float32")
  assert d and max(d) < 1e-2, out

def test_example_given_inputs_and_bad_model(models, tmp_path, capsys):
  x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
  np.save(tmp_path / "x.npy", x)
  assert onnx_infer.main([models["small_cnn"], f"x={tmp_path / 'x.npy'}", "--runs", "1"]) == 0
  assert "(given)" in capsys.readouterr().out
  bad = tmp_path / "bad.onnx"
  bad.write_bytes(b"\x0a\x05hello")
  assert onnx_infer.main([str(bad)]) == 2
  assert "onnx_infer:" in capsys.readouterr().err
