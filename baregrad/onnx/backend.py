"""baregrad as an ONNX backend (onnx.backend.base.Backend), so onnx's own BackendTest drives it:

    import onnx.backend.test
    from baregrad.onnx.backend import BaregradBackend
    globals().update(onnx.backend.test.BackendTest(BaregradBackend, __name__).test_cases)

ONNX device "CPU" runs on baregrad's CPU; "CUDA" on the NVIDIA device when it is the default one (DEV=NV or CUDA)."""
from __future__ import annotations
from typing import Any
import numpy as np
from baregrad.onnx.proto import require_onnx

onnx = require_onnx()
from onnx.backend.base import Backend, BackendRep  # noqa: E402
from baregrad import Device  # noqa: E402
from baregrad.onnx import load, OnnxRunner  # noqa: E402

def _device(device: str) -> str:
  kind = device.split(":")[0].upper()
  idx = device.split(":")[1] if ":" in device else None
  if kind == "CPU": return "CPU"
  if kind == "CUDA":
    d = Device.DEFAULT.split(":")[0]
    if d in ("NV", "CUDA"): return d + (f":{idx}" if idx else "")
  raise ValueError(f"baregrad's ONNX backend has no device {device!r} here (CPU, or CUDA when DEV is NV or CUDA)")

class BaregradRep(BackendRep):
  """A prepared model: run(inputs) takes a list (in the model's input order), a dict by name, or one array."""
  def __init__(self, runner: OnnxRunner): self.runner = runner
  def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
    if isinstance(inputs, dict): outs = self.runner.run_numpy(**inputs)
    elif isinstance(inputs, (list, tuple)): outs = self.runner.run_numpy(*inputs)
    else: outs = self.runner.run_numpy(inputs)
    return tuple(outs)

class BaregradBackend(Backend):
  @classmethod
  def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> BaregradRep:
    super().prepare(model, device, **kwargs)  # onnx's checker
    return BaregradRep(load(model, device=_device(device), jit=bool(kwargs.get("jit", False)), half=bool(kwargs.get("half", False))))

  @classmethod
  def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[Any, ...]:
    return cls.prepare(model, device, **kwargs).run(inputs)

  @classmethod
  def run_node(cls, node: Any, inputs: Any, device: str = "CPU", outputs_info: Any = None, **kwargs: Any) -> tuple[Any, ...]:
    super().run_node(node, inputs, device, outputs_info, **kwargs)
    from onnx import helper
    arrs = list(inputs.values()) if isinstance(inputs, dict) else list(inputs)
    names = [i for i in node.input if i]
    vis = [helper.make_tensor_value_info(nm, helper.np_dtype_to_tensor_dtype(np.asarray(a).dtype), np.asarray(a).shape) for nm, a in zip(names, arrs)]
    outs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
    opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
    model = helper.make_model(helper.make_graph([node], "run_node", vis, outs), opset_imports=[helper.make_opsetid("", opset)])
    runner = load(model, device=_device(device))
    return tuple(runner.run_numpy(*arrs))

  @classmethod
  def supports_device(cls, device: str) -> bool:
    try: _device(device)
    except ValueError: return False
    return True

prepare = BaregradBackend.prepare
run_model = BaregradBackend.run_model
run_node = BaregradBackend.run_node
supports_device = BaregradBackend.supports_device
