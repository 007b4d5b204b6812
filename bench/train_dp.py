#!/usr/bin/env python3
"""Data-parallel MLP training samples per second on several devices (nn DataParallel) vs the same global batch on
one device, measured in the same run.

What is compared, and why: on a machine with C cores, one device given all C cores already uses the whole machine,
so k devices sharing those cores can only add the exchange. The fair question for data parallelism is whether k
devices on one core each train k/1 times as fast as one device on one core: the default compares one device with
CPU_THREADS=1 against the devices each with CPU_THREADS=1 (the threads knob is read per device when it opens, so each
configuration runs in its own process). The single device on all cores is printed beside them for reference.

Both sides run the same code: `DataParallel.step` under the jit (a replay per step; the multi-device recording
submits each device's run of kernels at once and queues the copies between devices, tensor/jit.py), with the batch
given as one NumPy array per device (made on its device directly). The batches are fresh random data, drawn before
the timed loop so NumPy's generator is not timed.

  python3 bench/train_dp.py --devices CPU:0,CPU:1 --bs 256 --steps 50
  chrt -f 10 python3 bench/train_dp.py          # on a shared machine: the bench's threads preempt the other load"""
from __future__ import annotations
import argparse, os, pathlib, subprocess, sys, time
import numpy as np
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

def rate(devices: list[str], bs: int, steps: int, hidden: int, use_jit: bool) -> float:
  import baregrad.nn as nn
  from baregrad import Tensor
  from baregrad.nn import optim
  from baregrad.tensor.jit import jit
  from baregrad.tensor.nn.data_parallel import DataParallel

  class MLP(nn.Module):
    def __init__(self, hidden: int): self.l1, self.l2, self.l3 = nn.Linear(784, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, 10)
    def forward(self, x: Tensor) -> Tensor: return self.l3(self.l2(self.l1(x).relu()).relu())

  Tensor.manual_seed(0)
  dp = DataParallel(MLP(hidden), devices, lambda ps: optim.SGD(ps, lr=0.01))
  def loss_fn(m: MLP, a: Tensor, b: Tensor) -> Tensor: return nn.cross_entropy(m(a), b)
  def train_step(xs: list[np.ndarray], ys: list[np.ndarray]) -> Tensor: return dp.step(loss_fn, xs, ys)
  step = jit(train_step) if use_jit else train_step
  r, k = np.random.default_rng(0), len(devices)
  def batch() -> tuple[list[np.ndarray], list[np.ndarray]]:
    x, y = r.standard_normal((bs, 784)).astype(np.float32), r.integers(0, 10, bs).astype(np.int32)
    cut = [bs * i // k for i in range(k + 1)]
    return [x[a:b] for a, b in zip(cut, cut[1:])], [y[a:b] for a, b in zip(cut, cut[1:])]
  for _ in range(3): step(*batch()).item()   # compiles, capture
  batches = [batch() for _ in range(steps)]
  t0 = time.perf_counter()
  for xs, ys in batches: loss = step(xs, ys)
  loss.item()
  return steps * bs / (time.perf_counter() - t0)

def measure(devices: str, threads: int | None, a: argparse.Namespace) -> float:
  """Samples per second of one configuration, in a process of its own (CPU_THREADS is read when a device opens)."""
  env = dict(os.environ, PYTHONPATH=str(pathlib.Path(__file__).resolve().parents[1]))
  if threads is not None: env["CPU_THREADS"] = str(threads)
  else: env.pop("CPU_THREADS", None)
  cmd = [sys.executable, __file__, "--worker", "--devices", devices, "--bs", str(a.bs), "--steps", str(a.steps), "--hidden", str(a.hidden)]
  if a.no_jit: cmd.append("--no-jit")
  p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
  out = [line.split()[1] for line in p.stdout.splitlines() if line.startswith("RATE ")]
  if p.returncode != 0 or not out: raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
  return float(out[0])

if __name__ == "__main__":
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--devices", default="CPU:0,CPU:1")
  ap.add_argument("--bs", type=int, default=256, help="global batch size")
  ap.add_argument("--steps", type=int, default=50)
  ap.add_argument("--hidden", type=int, default=512)
  ap.add_argument("--no-jit", action="store_true", help="eager steps (both sides)")
  ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  a = ap.parse_args()
  devs = a.devices.split(",")
  if a.worker:
    print(f"RATE {rate(devs, a.bs, a.steps, a.hidden, not a.no_jit):.1f}", flush=True)
    raise SystemExit(0)
  load = os.getloadavg()[0]
  one = measure(devs[0], 1, a)
  many = measure(a.devices, 1, a)
  full = measure(devs[0], None, a)
  print(f"global batch {a.bs}, hidden {a.hidden}, {'eager' if a.no_jit else 'jit'}, {os.cpu_count()} CPUs, load {load:.2f} at start\n"
        f"1 device ({devs[0]}), 1 thread:  {one:.0f} samples/s\n"
        f"1 device ({devs[0]}), all cores ({os.cpu_count()} threads): {full:.0f} samples/s\n"
        f"{len(devs)} devices ({a.devices}), 1 thread each: {many:.0f} samples/s\n"
        f"ratio {len(devs)} devices / 1 device on 1 thread: {many / one:.2f}x; vs 1 device on all cores: {many / full:.2f}x")
