#!/usr/bin/env python3
"""Training-step time of an MLP (784-256-10, batch 128, Adam by default) in baregrad vs PyTorch on the CPU, measured
in one run on the same data and weights; then the eager per-op cost (build + realize one tiny elementwise op).

  python bench/train_mlp.py [--rounds 15] [--steps 10] [--bs 128] [--hidden 256] [--opt adam|sgd] [--threads N]

Prints ms/step for each and the ratio baregrad/PyTorch: the workloads run in interleaved rounds (eager, jit, PyTorch
with 1 and all threads), each round gives a ratio against the faster PyTorch setting, and the median is reported
with every round's. Every step builds its input tensors from host data. The first baregrad step (compiles) is
reported apart.
Not a timed test: numbers depend on the machine and its load."""
from __future__ import annotations
import argparse, pathlib, statistics, sys, time
from typing import Callable
import numpy as np
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import baregrad.nn as nn
from baregrad import Tensor
from baregrad.nn import optim
try: from baregrad import jit
except ImportError: jit = None

def flops_per_step(bs: int, h: int) -> float: return 3 * 2 * bs * (784 * h + h * 10)  # forward + 2x backward

def baregrad_stepper(a, data, use_jit: bool = False) -> tuple[Callable[[], float], list[float]]:
  """A function running the next training step (fresh input tensors from host data) and returning its seconds, and
  the list it appends each step's loss to."""
  x_np, y_np, w1, b1, w2, b2 = data
  l1, l2 = nn.Linear(784, a.hidden), nn.Linear(a.hidden, 10)
  nn.load_state_dict(l1, {"weight": w1, "bias": b1}); nn.load_state_dict(l2, {"weight": w2, "bias": b2})
  params = nn.get_parameters([l1, l2])
  opt = optim.Adam(params, lr=1e-3) if a.opt == "adam" else optim.SGD(params, lr=0.01, momentum=0.9)
  def step(x: Tensor, y: Tensor) -> Tensor:
    loss = nn.cross_entropy(l2(l1(x).relu()), y)
    opt.zero_grad(); loss.backward(); opt.step(loss)
    return loss
  if use_jit: step = jit(step)
  losses: list[float] = []
  def run() -> float:
    i = len(losses)
    t0 = time.perf_counter()
    loss = step(Tensor(x_np[i % len(x_np)]), Tensor(y_np[i % len(y_np)]))
    losses.append(loss.item())
    return time.perf_counter() - t0
  return run, losses

def torch_stepper(a, data, threads: int) -> tuple[Callable[[], float], list[float]]:
  """The same for PyTorch, run with `threads` intra-op threads."""
  import torch
  x_np, y_np, w1, b1, w2, b2 = data
  l1, l2 = torch.nn.Linear(784, a.hidden), torch.nn.Linear(a.hidden, 10)
  with torch.no_grad():
    for p, v in zip([l1.weight, l1.bias, l2.weight, l2.bias], [w1, b1, w2, b2]): p.copy_(torch.tensor(v))
  params = [l1.weight, l1.bias, l2.weight, l2.bias]
  opt = torch.optim.Adam(params, lr=1e-3) if a.opt == "adam" else torch.optim.SGD(params, lr=0.01, momentum=0.9)
  losses: list[float] = []
  def run() -> float:
    torch.set_num_threads(threads)
    i = len(losses)
    t0 = time.perf_counter()
    x, y = torch.tensor(x_np[i % len(x_np)]), torch.tensor(y_np[i % len(y_np)]).long()
    loss = torch.nn.functional.cross_entropy(l2(torch.relu(l1(x))), y)
    opt.zero_grad(); loss.backward(); opt.step()
    losses.append(loss.item())
    return time.perf_counter() - t0
  return run, losses

def bench_eager_op(n: int = 200) -> tuple[float, float]:
  """(seconds per build+realize of one tiny elementwise op, seconds per lazy op build only). Each op reads a fresh
  input (made before the clock starts): no realized result of an identical graph can be reused."""
  from baregrad import Device
  rng = np.random.default_rng(1)
  xs = [Tensor(rng.standard_normal(16).astype(np.float32)).realize() for _ in range(n + 1)]
  (xs[-1] + 1.0).realize()  # compile once
  Device[xs[0].device].synchronize()
  t0 = time.perf_counter()
  for x in xs[:n]: (x + 1.0).realize()
  Device[xs[0].device].synchronize()
  t_real = (time.perf_counter() - t0) / n
  a = xs[0]
  t0 = time.perf_counter()
  x = a
  for _ in range(n): x = x + 1.0
  t_build = (time.perf_counter() - t0) / n
  return t_real, t_build

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--steps", type=int, default=10, help="steps per round")
  ap.add_argument("--rounds", type=int, default=15)
  ap.add_argument("--bs", type=int, default=128)
  ap.add_argument("--hidden", type=int, default=256)
  ap.add_argument("--opt", choices=("adam", "sgd"), default="adam")
  ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
  a = ap.parse_args()
  rng = np.random.default_rng(0)
  k1, k2 = 1 / np.sqrt(784), 1 / np.sqrt(a.hidden)
  data = ([rng.standard_normal((a.bs, 784)).astype(np.float32) for _ in range(4)], [rng.integers(0, 10, a.bs).astype(np.int32) for _ in range(4)],
          rng.uniform(-k1, k1, (a.hidden, 784)).astype(np.float32), rng.uniform(-k1, k1, a.hidden).astype(np.float32),
          rng.uniform(-k2, k2, (10, a.hidden)).astype(np.float32), rng.uniform(-k2, k2, 10).astype(np.float32))
  print(f"MLP 784-{a.hidden}-10, batch {a.bs}, {a.opt}, {a.rounds} rounds of {a.steps} steps, {flops_per_step(a.bs, a.hidden) / 1e6:.0f} MFLOP/step")
  runs: dict[str, tuple[Callable[[], float], list[float]]] = {"baregrad": baregrad_stepper(a, data)}
  if jit is not None: runs["baregrad jit"] = baregrad_stepper(a, data, use_jit=True)
  try:
    import torch
    # on a loaded machine PyTorch's thread pool can be far slower than one thread: both run, the faster is the reference
    for n in ([a.threads] if a.threads else sorted({1, torch.get_num_threads()})): runs[f"pytorch {n}t"] = torch_stepper(a, data, n)
  except ImportError: pass
  first = runs["baregrad"][0]()   # compiles
  for run, _ in runs.values():
    for _ in range(2): run()        # (the jit captures on its second call)
  # rounds interleave the workloads, so a machine that speeds up or slows down during the run (a shared VM does, up to
  # 2x between minutes) moves them together; each round's medians give one ratio, and the median ratio is reported
  med: dict[str, list[float]] = {k: [] for k in runs}
  for _ in range(a.rounds):
    for name, (run, _) in runs.items(): med[name].append(statistics.median([run() for _ in range(a.steps)]))
  fl = flops_per_step(a.bs, a.hidden)
  torch_names = [k for k in runs if k.startswith("pytorch")]
  for name in runs:
    t = statistics.median(med[name])
    print(f"{name:14s} {t * 1e3:8.2f} ms/step  ({fl / t / 1e9:6.2f} GFLOP/s)" + (f"; first step {first:.2f} s" if name == "baregrad" else ""))
  if torch_names:
    ref = [min(med[k][r] for k in torch_names) for r in range(a.rounds)]   # the faster PyTorch setting, per round
    for name in (k for k in runs if not k.startswith("pytorch")):
      rs = sorted(m / t for m, t in zip(med[name], ref))
      print(f"ratio {name}/pytorch: {statistics.median(rs):.2f}x (rounds: {', '.join(f'{r:.2f}' for r in rs)})")
    lb, lt = runs["baregrad"][1], runs[torch_names[0]][1]
    print(f"max |loss difference| over the run: {max(abs(x - y) for x, y in zip(lb, lt)):.2e}")
  else: print("pytorch: not installed")
  t_real, t_build = bench_eager_op()
  print(f"eager op overhead: {t_real * 1e6:.0f} us per tiny op built and realized; {t_build * 1e6:.1f} us per lazy op built")

if __name__ == "__main__": main()
