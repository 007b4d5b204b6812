"""QCOMDevice on the mock Adreno (MOCKGPU=1): tensors, a small ONNX CNN against the CPU, faults and recovery."""
from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("tinymesa")
from baregrad import Tensor  # noqa: E402
from baregrad.hal import Device  # noqa: E402
from baregrad.drivers.qcom.device import QCOMDevice, QCOMFault  # noqa: E402


@pytest.fixture(scope="module")
def dev():
  old = os.environ.get("MOCKGPU")
  os.environ["MOCKGPU"] = "1"   # the registry's QCOM is the mock Adreno for this module
  try:
    d = Device["QCOM"]
    assert isinstance(d, QCOMDevice)
    yield d
  finally:
    if old is None: os.environ.pop("MOCKGPU", None)
    else: os.environ["MOCKGPU"] = old


def test_device_identity(dev):
  from baregrad import knobs
  assert dev.chip.name == knobs.get("MOCKGPU_QCOM_CHIP") and dev.gpu_id == dev.chip.gpu_id   # (a630 unless the run picks another)
  assert dev.renderer.name == "NIR" and not dev.supports_dtype(__import__("baregrad").dtypes.float64)


def test_tensor_ops(dev):
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((16, 24)).astype(np.float32), rng.standard_normal((24, 8)).astype(np.float32)
  x, w = Tensor(a, device=dev.device), Tensor(b, device=dev.device)
  np.testing.assert_allclose((x @ w).relu().numpy(), np.maximum(a @ b, 0), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(x.sum(axis=1).numpy(), a.sum(axis=1), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(x.exp().max().numpy(), np.exp(a).max(), rtol=1e-5)
  iv = np.arange(-20, 20, dtype=np.int32)
  same = lambda d: ((Tensor(iv, device=d) // 3) * 7 % 5 + (Tensor(iv, device=d) << 3)).numpy()  # noqa: E731
  np.testing.assert_array_equal(same(dev.device), same("CPU"))   # the integer semantics are the CPU's


def test_kernel_timing_and_copies(dev):
  t = Tensor(np.arange(1000, dtype=np.float32), device=dev.device)
  assert (t * 2).numpy()[999] == 1998
  dev.synchronize()
  assert dev.timeline_signal.value == dev.timeline_value - 1


def test_fault_names_context_timestamp_kernel_then_recovers(dev):
  from baregrad.codegen.astbuild import load, store, sink
  from baregrad.codegen.program import get_program
  from baregrad.ir.dtype import dtypes
  from baregrad.hcq.device import HCQBuffer
  # a launch whose output address points at nothing: the SP's store page-faults, KGSL faults the context
  p = get_program(sink(store(0, (64,), load(1, dtypes.float32, (64,)) + 1.0)), dev.renderer)
  prg = dev.runtime(dev, p.name, dev.compiler.compile_cached(p.src))
  src = dev.allocator.alloc(256)
  ctx = dev.ctx
  with pytest.raises(QCOMFault, match=rf"KGSL context {ctx} faulted \(last timestamp \d+, last kernel {p.name}\)"):
    prg(HCQBuffer(0xDEAD0000, 256), src, global_size=tuple(p.global_size), local_size=tuple(p.local_size), wait=True)
  assert dev.ctx != ctx   # the next computation runs on a fresh context
  x = Tensor(np.ones(64, np.float32), device=dev.device)
  np.testing.assert_array_equal((x * 3).numpy(), np.full(64, 3, np.float32))


def test_small_onnx_cnn_matches_cpu(dev, tmp_path):
  pytest.importorskip("onnx")
  from tests.onnx.onnx_models import write_all
  from baregrad.onnx import load
  path = next(p for p in write_all(str(tmp_path)) if p.endswith("small_cnn.onnx"))
  x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
  ref = {k: v.numpy() for k, v in load(path, device="CPU")(x=Tensor(x, device="CPU")).items()}
  got = {k: v.numpy() for k, v in load(path, device=dev.device)(x=Tensor(x, device=dev.device)).items()}
  for k in ref: np.testing.assert_allclose(got[k], ref[k], rtol=1e-5, atol=1e-6)
