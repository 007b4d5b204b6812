"""Kernels whose buffer numbers are not 0..n-1 (here buffer 0 is unused): the runner passes the kernel's buffers in
buffer-number order, so a renderer must load each one from its position in that order, not from its number (the CPU
renderers used to read args[number] past the end of the array and crash the process). Runs on the CPU with both
renderers. (The PTX and AMDGPU renderers declare a parameter for every number up to the largest, so the NV and AMD
drivers refuse such a kernel by name: "takes 5 parameters, got 3 buffers and 1 values".)"""
from __future__ import annotations
import numpy as np
import pytest
from baregrad.hal import Buffer
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import UOp, Ops
from baregrad.codegen.astbuild import load, store, sink
from baregrad.engine.runner import run_ast

def _ast() -> UOp:
  """out (buffer 2) = a (buffer 3) * 2 + b (buffer 1) * var x; buffer 0 is not in the kernel."""
  sh = (37,)
  x = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("x", 0, 100))
  return sink(store(2, sh, load(3, dtypes.int32, sh) * UOp.const(dtypes.int32, 2) + load(1, dtypes.int32, sh) * x))

@pytest.mark.parametrize("device", ["CPU", "CPU:C"])
def test_kernel_without_buffer_zero(device):
  rng = np.random.default_rng(0)
  a, b = rng.integers(-1000, 1000, 37, dtype=np.int32), rng.integers(-1000, 1000, 37, dtype=np.int32)
  bufs = [Buffer(device, 1, dtypes.float32).allocate(), Buffer(device, 37, dtypes.int32).copyin(memoryview(b)),
          Buffer(device, 37, dtypes.int32).allocate(), Buffer(device, 37, dtypes.int32).copyin(memoryview(a))]
  run_ast(_ast(), bufs, device=device, vals={"x": 7})
  out = np.empty(37, np.int32)
  bufs[2].copyout(memoryview(out))
  assert (out == a * 2 + b * 7).all()
