#!/usr/bin/env python3
"""Training-step time of an MLP (784-256-10, batch 128, Adam by default) in baregrad vs PyTorch on the CPU, measured
in one run on the same data and weights; then the eager per-op cost (build + realize one tiny elementwise op).

  python bench/train_mlp.py [--steps 30] [--bs 128] [--hidden 256] [--opt adam|sgd] [--threads N]

Prints ms/step for each and the ratio baregrad/PyTorch. The first baregrad step (compiles) is reported apart.
Not a timed test: numbers depend on the machine and its load."""
from __future__ import annotations
import argparse, pathlib, statistics, sys, time
import numpy as np
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import baregrad.nn as nn
from baregrad import Tensor
from baregrad.nn import optim
try: from baregrad import jit
except ImportError: jit = None

def flops_per_step(bs: int, h: int) -> float: return 3 * 2 * bs * (784 * h + h * 10)  # forward + 2x backward

def bench_baregrad(a, data, use_jit: bool = False) -> tuple[float, float, list[float]]:
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
  times, losses = [], []
  for i in range(a.steps + 2):
    t0 = time.perf_counter()
    loss = step(Tensor(x_np[i % len(x_np)]), Tensor(y_np[i % len(y_np)]))
    losses.append(loss.item())
    times.append(time.perf_counter() - t0)
  return times[0], statistics.median(times[2:]), losses[:a.steps + 1]

def bench_torch(a, data) -> tuple[float, list[float]]:
  import torch
  x_np, y_np, w1, b1, w2, b2 = data
  l1, l2 = torch.nn.Linear(784, a.hidden), torch.nn.Linear(a.hidden, 10)
  with torch.no_grad():
    for p, v in zip([l1.weight, l1.bias, l2.weight, l2.bias], [w1, b1, w2, b2]): p.copy_(torch.tensor(v))
  params = [l1.weight, l1.bias, l2.weight, l2.bias]
  opt = torch.optim.Adam(params, lr=1e-3) if a.opt == "adam" else torch.optim.SGD(params, lr=0.01, momentum=0.9)
  times, losses = [], []
  for i in range(a.steps + 1):
    t0 = time.perf_counter()
    x, y = torch.tensor(x_np[i % len(x_np)]), torch.tensor(y_np[i % len(y_np)]).long()
    loss = torch.nn.functional.cross_entropy(l2(torch.relu(l1(x))), y)
    opt.zero_grad(); loss.backward(); opt.step()
    losses.append(loss.item())
    times.append(time.perf_counter() - t0)
  return statistics.median(times[1:]), losses

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
  ap.add_argument("--steps", type=int, default=30)
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
  print(f"MLP 784-{a.hidden}-10, batch {a.bs}, {a.opt}, {a.steps} timed steps (median), {flops_per_step(a.bs, a.hidden) / 1e6:.0f} MFLOP/step")
  first, bg, lb = bench_baregrad(a, data)
  bj = bench_baregrad(a, data, use_jit=True)[1] if jit is not None else None
  try:
    import torch
    # on a loaded machine PyTorch's thread pool can be far slower than one thread: time both, keep the faster
    tries = [a.threads] if a.threads else sorted({1, torch.get_num_threads()})
    res = []
    for n in tries:
      torch.set_num_threads(n)
      res.append((*bench_torch(a, data), n))
    tt, lt, nthreads = min(res, key=lambda r: r[0])
    torch_all = ", ".join(f"{r[0] * 1e3:.2f} ms with {r[2]} thread{'s' if r[2] > 1 else ''}" for r in res)
  except ImportError: tt, lt = None, None
  print(f"baregrad: {bg * 1e3:8.2f} ms/step  ({flops_per_step(a.bs, a.hidden) / bg / 1e9:.2f} GFLOP/s; first step {first:.2f} s)")
  if bj is not None: print(f"baregrad jit: {bj * 1e3:8.2f} ms/step  ({flops_per_step(a.bs, a.hidden) / bj / 1e9:.2f} GFLOP/s; replayed kernels)")
  if tt is not None:
    import torch
    print(f"pytorch : {tt * 1e3:8.2f} ms/step  ({flops_per_step(a.bs, a.hidden) / tt / 1e9:.2f} GFLOP/s; best of: {torch_all})")
    print(f"ratio baregrad/pytorch: {bg / tt:.2f}x" + (f"   (jit: {bj / tt:.2f}x)" if bj is not None else ""))
    print(f"max |loss difference| over the run: {max(abs(x - y) for x, y in zip(lb, lt)):.2e}")
  else: print("pytorch: not installed")
  t_real, t_build = bench_eager_op()
  print(f"eager op overhead: {t_real * 1e6:.0f} us per tiny op built and realized; {t_build * 1e6:.1f} us per lazy op built")

if __name__ == "__main__": main()
