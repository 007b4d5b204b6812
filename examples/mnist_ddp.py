#!/usr/bin/env python3
"""Data-parallel MLP training across processes on MPI: `mpirun -np 2 python3 examples/mnist_ddp.py`.

Every rank starts from the same weights (broadcast from rank 0), takes its slice of each global batch, and a
DistributedOptimizer averages the gradients, so the ranks train to the weights one process gets on the whole batch.
With --check, rank 0 also trains that one-process reference and compares (to float tolerance)."""
from __future__ import annotations
import argparse, pathlib, sys
import numpy as np
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import baregrad.nn as nn
from baregrad import Tensor, distributed as dist
from baregrad.nn import optim

class MLP(nn.Module):
  def __init__(self, hidden: int):
    self.l1, self.l2 = nn.Linear(784, hidden), nn.Linear(hidden, 10)
  def forward(self, x: Tensor) -> Tensor: return self.l2(self.l1(x).relu())

def batches(steps: int, bs: int, seed: int):
  r = np.random.default_rng(seed)   # the same global batches on every rank
  for _ in range(steps): yield r.standard_normal((bs, 784)).astype(np.float32), r.integers(0, 10, bs).astype(np.int32)

def train(model: MLP, steps: int, bs: int, lr: float, seed: int, lo: int, hi: int, opt_wrap=lambda o: o) -> list[np.ndarray]:
  opt = opt_wrap(optim.SGD(nn.get_parameters(model), lr=lr, momentum=0.9))
  for x, y in batches(steps, bs, seed):
    loss = nn.cross_entropy(model(Tensor(x[lo:hi])), Tensor(y[lo:hi]))
    opt.zero_grad(); loss.backward(); opt.step(loss)
  return [p.numpy() for p in nn.get_parameters(model)]

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--steps", type=int, default=5)
  ap.add_argument("--bs", type=int, default=32, help="global batch size (split over the ranks)")
  ap.add_argument("--lr", type=float, default=0.05)
  ap.add_argument("--hidden", type=int, default=32)
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--check", action="store_true", help="rank 0 compares with one process on the global batch")
  ap.add_argument("--bucket-kib", type=float, default=4096, help="gradient bucket size (each bucket's exchange starts during backward)")
  a = ap.parse_args()
  dist.init()
  r, n = dist.rank(), dist.world_size()
  if a.bs % n: raise SystemExit(f"--bs {a.bs} must divide among {n} ranks")
  Tensor.manual_seed(a.seed + r)   # different draws per rank: the broadcast below makes the weights agree
  model = MLP(a.hidden)
  init = [dist.broadcast(p, 0) for p in nn.get_parameters(model)]
  for p, v in zip(nn.get_parameters(model), init): p.assign(v).realize()
  start = [p.numpy() for p in nn.get_parameters(model)]
  part = a.bs // n
  def wrap(o): return dist.DistributedOptimizer(o, bucket_bytes=int(a.bucket_kib * 1024))
  got = train(model, a.steps, a.bs, a.lr, a.seed, r * part, (r + 1) * part, wrap)
  dist.barrier()
  print(f"rank {r}/{n}: trained {a.steps} steps on {part} of each {a.bs}-sample batch")
  if a.check and r == 0:
    ref = MLP(a.hidden)
    for p, v in zip(nn.get_parameters(ref), start): p.assign(Tensor(v)).realize()
    want = train(ref, a.steps, a.bs, a.lr, a.seed, 0, a.bs)
    err = max(float(np.abs(g - w).max()) for g, w in zip(got, want))
    print(f"max |weight difference| vs one process on the global batch: {err:.3g}")
    if err > 1e-4: raise SystemExit("the ranks' weights differ from one process's")

if __name__ == "__main__": main()
