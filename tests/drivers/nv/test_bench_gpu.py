"""bench/gpu.py runs end to end on the mock NVIDIA GPU with --quick (small sizes, one rep): every section builds,
compiles, runs on fresh inputs and checks its result against NumPy/PyTorch-CPU, so a change that breaks the benchmark
fails here even where no GPU runs it. (The numbers it prints on the mock mean nothing.)"""
from tests.paths import REPO
import importlib.util, os, sys
from tests.helpers import mock_nv_device

def test_bench_gpu_quick_on_the_mock(monkeypatch, capsys):
  with mock_nv_device():
    spec = importlib.util.spec_from_file_location("bench_gpu", os.path.join(str(REPO), "bench", "gpu.py"))
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    monkeypatch.setattr(sys, "argv", ["gpu.py", "--quick", "--reps", "1", "--tf32", "--only", "matmul,ew,sum,conv,latency"])   # (models: below)
    mod.main()
  out = capsys.readouterr().out
  for name in ("matmul 64^3 half", "matmul 64^3 bfloat16", "matmul 64^3 float", "relu(x*y+z) 64K f32", "sum 65539 f32",
               "conv2d 1x16x8x8 3x3 half", "tiny op, eager", "launch + wait", "back-to-back launches", "jit replay"):
    assert name in out, f"{name!r} missing from:\n{out}"
  assert out.count("TC ") >= 3   # f16, bf16 and (with --tf32) float32 on tensor cores
  assert "2 kernels" in out       # the sum spreads over the device in two stages

def test_bench_gpu_gemm_table_quick_on_the_mock(monkeypatch, capsys):
  """The issue 32 GEMM table: square, awkward and skinny stand-ins, each dtype, results checked against NumPy."""
  with mock_nv_device():
    spec = importlib.util.spec_from_file_location("bench_gpu", os.path.join(str(REPO), "bench", "gpu.py"))
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    monkeypatch.setattr(sys, "argv", ["gpu.py", "--quick", "--reps", "1", "--only", "gemm"])
    mod.main()
  out = capsys.readouterr().out
  for name in ("matmul 32x32x32 half", "matmul 31x33x35 bfloat16", "matmul 1x64x32 float"):
    assert name in out, f"{name!r} missing from:\n{out}"

def test_bench_gpu_models_small_on_the_mock(monkeypatch, capsys):
  """Issue 34 item 5 at tiny sizes: ResNet-50 inference (half, two batch sizes), GPT-2 forward (half) and a ResNet-18
  CIFAR training step run on the mock, each compared with the same architecture in PyTorch on the CPU, weights copied
  (err: the largest difference relative to the largest output; for training, the first step's loss and the stem's weight
  updates after the step)."""
  import re
  with mock_nv_device():
    spec = importlib.util.spec_from_file_location("bench_gpu", os.path.join(str(REPO), "bench", "gpu.py"))
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    monkeypatch.setattr(sys, "argv", ["gpu.py", "--small", "--reps", "1", "--only", "models"])
    mod.main()
  out = capsys.readouterr().out
  rows = {m.group(1).strip(): float(m.group(2)) for m in re.finditer(r"^(\S.*?)\s+[\d.]+ ms/step.*err (\S+)$", out, re.M)}
  for name, tol in (("resnet50 batch 1 half", 5e-3), ("resnet50 batch 2 half", 5e-3), ("gpt2 1L32 fwd 2x16 half", 5e-3),
                    ("resnet18 cifar train step b2 f32", 1e-4)):
    got = [v for k, v in rows.items() if k.startswith(name)]
    assert got and got[0] < tol, f"{name!r}: err {got} (tolerance {tol}) in:\n{out}"
