#!/usr/bin/env python3
"""The compiler core end to end on the default device (CPU): build a matmul kernel AST, optimize, render,
compile, run on the HCQ CPU device, check against NumPy. DEBUG=3 shows the source, DEBUG=7 the disassembly."""
import os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import numpy as np
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import Ops
from baregrad.ir.view import ShapeTracker
from baregrad.codegen.astbuild import load, store, reduce, sink
from baregrad.hal import Device, Buffer
from baregrad.engine.runner import compile_ast

def main(n: int = 512) -> None:
  dev, f32 = Device.DEFAULT, dtypes.float32
  a, b = np.random.rand(n, n).astype(np.float32), np.random.rand(n, n).astype(np.float32)
  sa = ShapeTracker.from_shape((n, n)).reshape((n, 1, n)).expand((n, n, n))
  sb = ShapeTracker.from_shape((n, n)).permute((1, 0)).reshape((1, n, n)).expand((n, n, n))
  ast = sink(store(0, (n, n, 1), reduce(load(1, f32, sa) * load(2, f32, sb), Ops.ADD, (2,))))
  st = time.perf_counter()
  k = compile_ast(ast, dev)
  print(f"device {dev}: kernel {k.spec.name} with opts {k.spec.opts}, built in {time.perf_counter() - st:.2f}s")
  bufs = [Buffer(dev, n * n, f32).allocate() for _ in range(3)]
  bufs[1].copyin(memoryview(a).cast("B")); bufs[2].copyin(memoryview(b).cast("B"))
  t = min(k(bufs, wait=True) for _ in range(5))
  out = np.empty((n, n), np.float32); bufs[0].copyout(memoryview(out).cast("B"))
  err = float(np.abs(out - a @ b).max())
  print(f"matmul {n}x{n}x{n}: {t * 1e3:.2f} ms, {2 * n ** 3 / t / 1e9:.1f} GFLOPS, max abs error vs NumPy {err:.2e}")
  if err > 1e-2: raise SystemExit("result does not match NumPy")

if __name__ == "__main__":
  main(int(sys.argv[1]) if len(sys.argv) > 1 else 512)
