#!/usr/bin/env python3
"""Compiler-core benchmarks on the CPU device, against NumPy measured in the same run.

  matmul 1024x1024x1024 float32        GFLOPS, ratio to NumPy's BLAS
  relu(x*y+z) fused, 16M float32        GB/s moved, ratio to NumPy's copy bandwidth (np.copyto)
  sum of 16M float32 (two kernels)      GB/s, ratio to np.sum
Kernels are built directly as ASTs (the Tensor frontend is not needed). Usage: python bench/compiler_core.py [--dev CPU|CPU:C]
"""
from __future__ import annotations
import argparse, os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import numpy as np
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import Ops
from baregrad.ir.view import ShapeTracker
from baregrad.codegen.astbuild import load, store, const, reduce, sink
from baregrad.hal import Device, Buffer
from baregrad.engine.runner import compile_ast

def best(fn, reps: int) -> float:
  fn()  # warm up (compiles, page faults)
  ts = []
  for _ in range(reps):
    st = time.perf_counter(); fn(); ts.append(time.perf_counter() - st)
  return min(ts)

def to_dev(a: np.ndarray, dev: str) -> Buffer:
  b = Buffer(dev, a.size, dtypes.from_name(str(a.dtype))).allocate()
  b.copyin(memoryview(np.ascontiguousarray(a)).cast("B"))
  return b

def from_dev(b: Buffer, shape: tuple, dt) -> np.ndarray:
  out = np.empty(shape, dt); b.copyout(memoryview(out).cast("B")); return out

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--dev", default="CPU")
  ap.add_argument("--reps", type=int, default=5)
  args = ap.parse_args()
  dev, f32 = args.dev, dtypes.float32
  rng = np.random.default_rng(0)
  print(f"device {dev} ({Device[dev].renderer.name} renderer), {os.cpu_count()} cores, NumPy {np.__version__}")
  rows = []

  # ---- matmul
  M = K = N = 1024
  a, b = rng.random((M, K), dtype=np.float32), rng.random((K, N), dtype=np.float32)
  sa = ShapeTracker.from_shape((M, K)).reshape((M, 1, K)).expand((M, N, K))
  sb = ShapeTracker.from_shape((K, N)).permute((1, 0)).reshape((1, N, K)).expand((M, N, K))
  mm = compile_ast(sink(store(0, (M, N, 1), reduce(load(1, f32, sa) * load(2, f32, sb), Ops.ADD, (2,)))), dev)
  bc, ba, bb = Buffer(dev, M * N, f32).allocate(), to_dev(a, dev), to_dev(b, dev)
  t_bg = best(lambda: mm([bc, ba, bb], wait=True), args.reps)
  np.testing.assert_allclose(from_dev(bc, (M, N), np.float32), a @ b, rtol=1e-3)
  t_np = best(lambda: a @ b, args.reps)
  fl = 2 * M * N * K
  rows.append(("matmul 1024^3 f32", f"{fl / t_bg / 1e9:8.1f} GFLOPS", f"{fl / t_np / 1e9:8.1f} GFLOPS", t_np / t_bg, f"opts {mm.spec.opts}"))

  # ---- fused elementwise relu(x*y+z)
  n = 16 * 1024 * 1024
  x, y, z = (rng.random(n, dtype=np.float32) - 0.5 for _ in range(3))
  ew = compile_ast(sink(store(0, (n,), (load(1, f32, (n,)) * load(2, f32, (n,)) + load(3, f32, (n,))).maximum(const(f32, 0.0)))), dev)
  bo, bx, by, bz = Buffer(dev, n, f32).allocate(), to_dev(x, dev), to_dev(y, dev), to_dev(z, dev)
  t_bg = best(lambda: ew([bo, bx, by, bz], wait=True), args.reps)
  np.testing.assert_allclose(from_dev(bo, (n,), np.float32), np.maximum(x * y + z, 0), rtol=1e-6)
  dst = np.empty_like(x)
  t_cp = best(lambda: np.copyto(dst, x), args.reps)
  t_npew = best(lambda: np.maximum(x * y + z, 0, out=dst), args.reps)
  moved, cp_moved = 4 * 4 * n, 2 * 4 * n
  rows.append(("relu(x*y+z) 16M f32", f"{moved / t_bg / 1e9:8.1f} GB/s", f"{cp_moved / t_cp / 1e9:8.1f} GB/s (copy)",
               (moved / t_bg) / (cp_moved / t_cp), f"NumPy's own relu(x*y+z) takes {t_npew / t_bg:.1f}x as long"))

  # ---- sum of 16M: partial sums per row of a (256, 65536) view, then one kernel over the 256 partials
  parts = 256
  k1 = compile_ast(sink(store(0, (parts, 1), reduce(load(1, f32, (parts, n // parts)), Ops.ADD, (1,)))), dev)
  k2 = compile_ast(sink(store(0, (1,), reduce(load(1, f32, (parts,)), Ops.ADD, (0,)))), dev)
  bp, bs = Buffer(dev, parts, f32).allocate(), Buffer(dev, 1, f32).allocate()
  def run_sum() -> None: k1([bp, bx], wait=False); k2([bs, bp], wait=True)
  t_bg = best(run_sum, args.reps)
  np.testing.assert_allclose(from_dev(bs, (1,), np.float32)[0], x.astype(np.float64).sum(), rtol=1e-3, atol=1e-1)
  t_np = best(lambda: x.sum(), args.reps)
  rows.append(("sum 16M f32", f"{4 * n / t_bg / 1e9:8.1f} GB/s", f"{4 * n / t_np / 1e9:8.1f} GB/s", t_np / t_bg, "2 kernels"))

  print(f"{'benchmark':22s} {'baregrad':>16s} {'NumPy':>24s} {'ratio':>7s}")
  for name, ours, theirs, ratio, note in rows: print(f"{name:22s} {ours:>16s} {theirs:>24s} {ratio:6.2f}x  {note}")

if __name__ == "__main__":
  main()
