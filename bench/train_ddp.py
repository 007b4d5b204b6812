#!/usr/bin/env python3
"""Data-parallel MLP training across MPI processes: samples per second of `mpirun -np N` (each rank a 1/N slice of
every global batch, gradients averaged by DistributedOptimizer, the exchange overlapping the backward pass) vs one
process on the same global batches, both measured in this run with fresh random batches every step.

  python3 bench/train_ddp.py --np 2 --bs 256 --steps 20      # launches mpirun -np 1 and -np N itself"""
from __future__ import annotations
import argparse, os, pathlib, subprocess, sys, time
import numpy as np
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

def worker(bs: int, steps: int, hidden: int) -> None:
  import baregrad.nn as nn
  from baregrad import Tensor, distributed as dist
  from baregrad.nn import optim
  dist.init()
  r, n = dist.rank(), dist.world_size()
  Tensor.manual_seed(0)   # the same weights on every rank
  l1, l2, l3 = nn.Linear(784, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, 10)
  opt = dist.DistributedOptimizer(optim.SGD(nn.get_parameters([l1, l2, l3]), lr=0.01), bucket_bytes=1 << 20)
  rng = np.random.default_rng(0)
  part = bs // n
  def one() -> None:
    x, y = rng.standard_normal((bs, 784)).astype(np.float32), rng.integers(0, 10, bs).astype(np.int32)
    lo, hi = r * part, (r + 1) * part
    loss = nn.cross_entropy(l3(l2(l1(Tensor(x[lo:hi])).relu()).relu()), Tensor(y[lo:hi]))
    opt.zero_grad(); loss.backward(); opt.step(loss)
    loss.item()
  for _ in range(2): one()   # compiles
  dist.barrier()
  t0 = time.perf_counter()
  for _ in range(steps): one()
  dist.barrier()
  if r == 0: print(f"RATE {steps * part * n / (time.perf_counter() - t0):.1f}", flush=True)

def launch(np_: int, a: argparse.Namespace) -> float:
  env = dict(os.environ, PYTHONPATH=str(pathlib.Path(__file__).resolve().parents[1]), OMPI_ALLOW_RUN_AS_ROOT="1",
             OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
  cmd = ["mpirun", "-np", str(np_), "--oversubscribe", "--bind-to", "none", sys.executable, __file__, "--worker",
         "--bs", str(a.bs), "--steps", str(a.steps), "--hidden", str(a.hidden)]
  p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
  rate = [line.split()[1] for line in p.stdout.splitlines() if line.startswith("RATE ")]
  if p.returncode != 0 or not rate: raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
  return float(rate[0])

if __name__ == "__main__":
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--np", type=int, default=2, help="processes to compare with one")
  ap.add_argument("--bs", type=int, default=256, help="global batch size")
  ap.add_argument("--steps", type=int, default=20)
  ap.add_argument("--hidden", type=int, default=512)
  ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  a = ap.parse_args()
  if a.worker: worker(a.bs, a.steps, a.hidden)
  else:
    if a.bs % a.np: raise SystemExit(f"--bs {a.bs} must divide among {a.np} processes")
    one, many = launch(1, a), launch(a.np, a)
    print(f"1 process: {one:.0f} samples/s; {a.np} processes: {many:.0f} samples/s; ratio {many / one:.2f}x "
          f"(global batch {a.bs}, hidden {a.hidden}, {os.cpu_count()} CPUs)")
