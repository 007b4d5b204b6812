#!/usr/bin/env python3
"""One-pass normalizations on a CPU device: softmax and layer_norm with row fusion (FUSE_NORMS=1, one kernel per call)
and without (FUSE_NORMS=0, a kernel per reduction plus the elementwise tail), against NumPy and PyTorch in the same run.

Every timed call gets new random inputs, made and copied to the device before the clock starts; reported: the minimum
over --reps calls (the machine is shared: the minimum is the least disturbed run), in microseconds, and the ratios
reference time / ours (> 1: we are faster). NumPy: the same formula in float32 (max, exp, sum, divide; mean, var);
PyTorch: torch.softmax and torch.nn.functional.layer_norm (the faster of one thread and its default). Usage:

  python bench/norms.py [--dev CPU] [--reps 50] [--shapes 8192x1024,128x768]
Not a timed test: numbers depend on the machine and its load.

Row fusion (branch s4-norms, DEV=CPU, the shared 2-core VM at load average 5-8: noisy; min of 60 runs, us; ratios
reference / ours; in brackets the kernels' device time at DEBUG=2, min of 6-12 launches):

  | workload             | fused           | unfused (FUSE_NORMS=0)     | NumPy   | PyTorch | np/fused | pt/fused | pt/unfused |
  |----------------------|-----------------|----------------------------|---------|---------|----------|----------|------------|
  | softmax 8192x1024    | 4476 (2700)     | 10705 (1215+1215+5092)     | 36346   | 18312   | 8.1      | 4.1      | 1.7        |
  | layer_norm 8192x1024 | 2932 (2700)     | 5944                       | 45937   | 17007   | 15.7     | 5.8      | 2.9        |
  | softmax 128x768      | 129 (107)       | 179 (27+33+42)             | 135     | 34      | 1.04     | 0.26     | 0.18       |
  | layer_norm 128x768   | 122             | 159                        | 144     | 22      | 1.19     | 0.17     | 0.13       |

(PyTorch's column: its best of two runs of this script; at 128x768 our time is mostly the eager path's host work, the
fused kernel alone ~3x PyTorch's whole call.)
"""
from __future__ import annotations
import argparse, time
import numpy as np
from baregrad import Tensor, knobs
from baregrad.hal import Device
import baregrad.nn.functional as F

def np_softmax(x: np.ndarray) -> np.ndarray:
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)

def np_layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
  m = x.mean(-1, keepdims=True)
  xc = x - m
  return xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + 1e-5) * w + b

def min_time(make, run, reps: int) -> float:
  """The least wall time of `run` over reps calls, each on new inputs from `make` (made before the clock starts)."""
  best = float("inf")
  for _ in range(reps):
    inp = make()
    st = time.perf_counter(); run(*inp); best = min(best, time.perf_counter() - st)
  return best

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--dev", default="CPU")
  ap.add_argument("--reps", type=int, default=50)
  ap.add_argument("--shapes", default="8192x1024,128x768")
  a = ap.parse_args()
  try: import torch
  except ImportError: torch = None
  rng = np.random.default_rng(0)
  dev = a.dev
  def sync() -> None: Device[dev].synchronize()
  print(f"# norms on {dev}, min of {a.reps} runs, us; ratios reference / ours (> 1: faster); fused = FUSE_NORMS=1")
  print(f"{'workload':28s} {'fused':>9s} {'unfused':>9s} {'numpy':>9s} {'torch':>9s}  {'np/fused':>8s} {'np/unf':>7s} {'pt/fused':>8s} {'pt/unf':>7s}")
  for shp in a.shapes.split(","):
    r, c = (int(v) for v in shp.split("x"))
    def make_np(): return (rng.standard_normal((r, c), dtype=np.float32), rng.standard_normal(c, dtype=np.float32),
                           rng.standard_normal(c, dtype=np.float32))
    def make_t():
      x, w, b = make_np()
      ts = (Tensor(x, device=dev).realize(), Tensor(w, device=dev).realize(), Tensor(b, device=dev).realize())
      sync()
      return ts
    work = {"softmax": (lambda x, w, b: x.softmax(-1), lambda x, w, b: np_softmax(x), lambda x, w, b: torch.softmax(x, -1)),
            "layer_norm": (lambda x, w, b: F.layer_norm(x, (c,), w, b), np_layer_norm,
                           lambda x, w, b: torch.nn.functional.layer_norm(x, (c,), w, b))}
    for name, (ours, ref_np, ref_pt) in work.items():
      res = {}
      for fuse in (1, 0):
        with knobs.Context(FUSE_NORMS=fuse):
          def run(x, w, b): ours(x, w, b).realize(); sync()
          run(*make_t())   # (compiled outside the clock)
          res[fuse] = min_time(make_t, run, a.reps)
      tn = min_time(make_np, ref_np, a.reps)
      tp = float("nan")
      if torch is not None:   # (the faster of one thread and its default: on a loaded machine its pool can lose)
        def make_pt(): return tuple(torch.from_numpy(v) for v in make_np())
        nt = torch.get_num_threads()
        for n in sorted({1, nt}):
          torch.set_num_threads(n)
          tp = min(tp, min_time(make_pt, ref_pt, a.reps)) if tp == tp else min_time(make_pt, ref_pt, a.reps)
        torch.set_num_threads(nt)
      f, u = res[1], res[0]
      print(f"{name + ' ' + shp:28s} {f*1e6:9.1f} {u*1e6:9.1f} {tn*1e6:9.1f} {tp*1e6:9.1f}  {tn/f:8.2f} {tn/u:7.2f} {tp/f:8.2f} {tp/u:7.2f}")

if __name__ == "__main__": main()
