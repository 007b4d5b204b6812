#!/usr/bin/env python3
"""Data-parallel MLP training across MPI processes: samples per second of `mpirun -np N` (each rank a 1/N slice of
every global batch, gradients averaged over the ranks) vs one process on the same global batches, measured in this run
with fresh random batches every step (drawn before the timed loop).

By default each step is distributed.DistributedStep (two jit replays around one allreduce per gradient buffer);
--no-jit runs the eager DistributedOptimizer (the exchange overlapping the backward pass). As bench/train_dp.py: one
process on one thread against N processes on one thread each (CPU_THREADS=1: N processes of all cores each would
oversubscribe the machine N times), and one process on all cores for reference.

  python3 bench/train_ddp.py --np 2 --bs 256 --steps 20      # launches mpirun -np 1 and -np N itself"""
from __future__ import annotations
import argparse, os, pathlib, subprocess, sys, time
import numpy as np
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

def worker(bs: int, steps: int, hidden: int, use_jit: bool) -> None:
  import baregrad.nn as nn
  from baregrad import Tensor, distributed as dist
  from baregrad.nn import optim
  dist.init()
  r, n = dist.rank(), dist.world_size()
  Tensor.manual_seed(0)   # the same weights on every rank
  l1, l2, l3 = nn.Linear(784, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, 10)
  params = nn.get_parameters([l1, l2, l3])
  rng = np.random.default_rng(0)
  part = bs // n
  def batch() -> tuple[np.ndarray, np.ndarray]:
    x, y = rng.standard_normal((bs, 784)).astype(np.float32), rng.integers(0, 10, bs).astype(np.int32)
    return x[r * part:(r + 1) * part], y[r * part:(r + 1) * part]
  def loss_of(x: np.ndarray, y: np.ndarray) -> Tensor: return nn.cross_entropy(l3(l2(l1(Tensor(x)).relu()).relu()), Tensor(y))
  if use_jit:
    # the step in two jitted halves around the exchange (MPI reads host memory, which a capture cannot): the loss and
    # this rank's gradients, then (after DistributedStep's allreduce) the update with the averaged gradients
    step = dist.DistributedStep(optim.SGD(params, lr=0.01), loss_of)
    one = lambda x, y: step(x, y).item()
  else:
    opt = dist.DistributedOptimizer(optim.SGD(params, lr=0.01), bucket_bytes=1 << 20)
    def one(x: np.ndarray, y: np.ndarray) -> None:
      loss = loss_of(x, y)
      opt.zero_grad(); loss.backward(); opt.step(loss)
      loss.item()
  for _ in range(3): one(*batch())   # compiles, captures
  batches = [batch() for _ in range(steps)]
  dist.barrier()
  t0 = time.perf_counter()
  for x, y in batches: one(x, y)
  dist.barrier()
  if r == 0: print(f"RATE {steps * part * n / (time.perf_counter() - t0):.1f}", flush=True)

def launch(np_: int, a: argparse.Namespace, threads: int | None) -> float:
  """Samples per second of `mpirun -np np_`, each process's CPU device on `threads` threads (None: all cores each)."""
  env = dict(os.environ, PYTHONPATH=str(pathlib.Path(__file__).resolve().parents[1]), OMPI_ALLOW_RUN_AS_ROOT="1",
             OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
  if threads is not None: env["CPU_THREADS"] = str(threads)
  else: env.pop("CPU_THREADS", None)
  cmd = ["mpirun", "-np", str(np_), "--oversubscribe", "--bind-to", "none", sys.executable, __file__, "--worker",
         "--bs", str(a.bs), "--steps", str(a.steps), "--hidden", str(a.hidden)] + (["--no-jit"] if a.no_jit else [])
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
  ap.add_argument("--no-jit", action="store_true", help="eager steps with DistributedOptimizer (the exchange overlapping backward)")
  ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  a = ap.parse_args()
  if a.worker: worker(a.bs, a.steps, a.hidden, not a.no_jit)
  else:
    if a.bs % a.np: raise SystemExit(f"--bs {a.bs} must divide among {a.np} processes")
    load = os.getloadavg()[0]
    one, many, full = launch(1, a, 1), launch(a.np, a, 1), launch(1, a, None)
    print(f"global batch {a.bs}, hidden {a.hidden}, {'eager (DistributedOptimizer)' if a.no_jit else 'jit (DistributedStep)'}, "
          f"{os.cpu_count()} CPUs, load {load:.2f} at start\n"
          f"1 process, 1 thread: {one:.0f} samples/s\n1 process, all cores: {full:.0f} samples/s\n"
          f"{a.np} processes, 1 thread each: {many:.0f} samples/s\n"
          f"ratio {a.np} processes / 1 process on 1 thread: {many / one:.2f}x; vs 1 process on all cores: {many / full:.2f}x")
