"""baregrad.onnx: run ONNX models on baregrad.

    runner = baregrad.onnx.load("model.onnx")          # a path, bytes or an onnx.ModelProto
    outs = runner(x)                                    # or runner(input_name=x); NumPy arrays or Tensors
    outs["output"].numpy()

The model becomes one lazy Tensor graph per call (the scheduler fuses across ONNX nodes); `load(..., jit=True)`
captures the kernels and replays them; `load(..., half=True)` runs float32 models in float16 (reductions, matmul
and conv accumulate in float32). `baregrad.onnx.backend` is an `onnx.backend.base.Backend` for onnx's BackendTest.
Needs the `onnx` package: pip install 'baregrad[onnx]'."""
from __future__ import annotations
from typing import Any
from baregrad.onnx.errors import OnnxError, OnnxLoadError, OnnxInputError, UnsupportedOperator
from baregrad.onnx import ops_math, ops_shape, ops_nn, ops_resize, ops_rnn, ops_control, ops_quant, ops_attention, ops_misc, ops_detect, ops_train  # noqa: F401  (they fill the operator table)
from baregrad.onnx.runner import OnnxRunner, to_numpy
from baregrad.onnx.registry import OPS

__all__ = ["load", "OnnxRunner", "OnnxError", "OnnxLoadError", "OnnxInputError", "UnsupportedOperator", "supported_ops", "to_numpy"]

def load(model: Any, device: str | None = None, jit: bool = False, half: bool = False) -> OnnxRunner:
  """An OnnxRunner for a model given as a path, bytes or onnx.ModelProto, on `device` (default: Device.DEFAULT).
  Unsupported operators, malformed files and unsupported types are refused here, by name."""
  return OnnxRunner(model, device=device, jit=jit, half=half)

def supported_ops() -> list[str]:
  """The operators this build implements, as 'domain:op' ('' is the default ai.onnx domain)."""
  return sorted(f"{d}:{o}" if d else o for d, o in OPS)
