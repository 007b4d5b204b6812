#!/usr/bin/env python3
"""Python cost per kernel: eager (build graph + schedule + launch one elementwise op) and jit replay (one
recorded queue, patched and submitted once), on the default device, each call on a fresh input. Targets (issue 10):
eager <= 20 us per op, replay <= 3 us per kernel."""
import os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from baregrad import Tensor, jit, Device

def main(n_kernels: int = 20, reps: int = 300) -> None:
  dev = Device.DEFAULT
  # every call reads a fresh input, made before the clock starts: nothing realized before can be reused
  fresh = lambda: [Tensor.rand(16).realize() for _ in range(reps)]
  xs = fresh()
  # eager: one op, realized, per iteration
  for x in xs[:5]: (x + 1).realize()
  xs = fresh()
  Device[dev].synchronize()
  st = time.perf_counter()
  for x in xs: (x + 1).realize()
  Device[dev].synchronize()
  eager = (time.perf_counter() - st) / reps
  @jit
  def f(t):
    for _ in range(n_kernels): t = (t + 1).contiguous()
    return t
  for x in xs[:3]: f(x)
  xs = fresh()
  Device[dev].synchronize()
  st = time.perf_counter()
  for x in xs: f(x)
  Device[dev].synchronize()
  per_call = (time.perf_counter() - st) / reps
  k = len(next(iter(f.captured.values())).launches)
  print(f"device {dev}")
  print(f"eager: {eager * 1e6:8.1f} us per op (graph, schedule, launch, one tiny kernel)")
  print(f"jit replay: {per_call * 1e6:8.1f} us per call of {k} kernels = {per_call / k * 1e6:6.2f} us per kernel (target <= 3)")
  print(f"ratio eager/jit per kernel: {eager / (per_call / k):.1f}x")

if __name__ == "__main__":
  main()
