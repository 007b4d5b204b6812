#!/usr/bin/env python3
"""Data-parallel MLP training samples per second on several devices (nn DataParallel) vs the same global batch on
one device, measured in the same run with a fresh random batch every step.

  python3 bench/train_dp.py --devices CPU:0,CPU:1 --bs 256 --steps 20"""
from __future__ import annotations
import argparse, pathlib, sys, time
import numpy as np
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import baregrad.nn as nn
from baregrad import Tensor
from baregrad.nn import optim
from baregrad.tensor.nn.data_parallel import DataParallel

class MLP(nn.Module):
  def __init__(self, hidden: int): self.l1, self.l2, self.l3 = nn.Linear(784, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, 10)
  def forward(self, x: Tensor) -> Tensor: return self.l3(self.l2(self.l1(x).relu()).relu())

def rate(devices: list[str], bs: int, steps: int, hidden: int) -> float:
  Tensor.manual_seed(0)
  dp = DataParallel(MLP(hidden), devices, lambda ps: optim.SGD(ps, lr=0.01))
  r = np.random.default_rng(0)
  def one() -> None:
    x, y = r.standard_normal((bs, 784)).astype(np.float32), r.integers(0, 10, bs).astype(np.int32)
    dp.step(lambda m, a, b: nn.cross_entropy(m(a), b), Tensor(x), Tensor(y)).item()
  for _ in range(2): one()   # compiles
  t0 = time.perf_counter()
  for _ in range(steps): one()
  return steps * bs / (time.perf_counter() - t0)

if __name__ == "__main__":
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--devices", default="CPU:0,CPU:1")
  ap.add_argument("--bs", type=int, default=256)
  ap.add_argument("--steps", type=int, default=20)
  ap.add_argument("--hidden", type=int, default=512)
  a = ap.parse_args()
  devs = a.devices.split(",")
  one_dev, many = rate(devs[:1], a.bs, a.steps, a.hidden), rate(devs, a.bs, a.steps, a.hidden)
  print(f"1 device ({devs[0]}): {one_dev:.0f} samples/s; {len(devs)} devices ({a.devices}): {many:.0f} samples/s; ratio {many / one_dev:.2f}x")
