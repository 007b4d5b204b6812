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
    monkeypatch.setattr(sys, "argv", ["gpu.py", "--quick", "--reps", "1", "--tf32"])
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
