#!/usr/bin/env python3
"""Python cost per kernel: eager (build graph + schedule + launch one elementwise op) and jit replay (one
recorded queue, patched and submitted once), on the default device. Target: replay under 10 us per kernel."""
import os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from baregrad import Tensor, jit, Device

def main(n_kernels: int = 20, reps: int = 300) -> None:
  dev = Device.DEFAULT
  x = Tensor.rand(16).realize()
  # eager: one op, realized, per iteration
  for _ in range(5): (x + 1).realize()
  Device[dev].synchronize()
  st = time.perf_counter()
  for _ in range(reps): (x + 1).realize()
  Device[dev].synchronize()
  eager = (time.perf_counter() - st) / reps
  @jit
  def f(t):
    for _ in range(n_kernels): t = (t + 1).contiguous()
    return t
  for _ in range(3): f(x)
  Device[dev].synchronize()
  st = time.perf_counter()
  for _ in range(reps): f(x)
  Device[dev].synchronize()
  per_call = (time.perf_counter() - st) / reps
  k = len(next(iter(f.captured.values())).launches)
  print(f"device {dev}")
  print(f"eager: {eager * 1e6:8.1f} us per op (graph, schedule, launch, one tiny kernel)")
  print(f"jit replay: {per_call * 1e6:8.1f} us per call of {k} kernels = {per_call / k * 1e6:6.2f} us per kernel (target < 10)")
  print(f"ratio eager/jit per kernel: {eager / (per_call / k):.1f}x")

if __name__ == "__main__":
  main()
