#!/usr/bin/env python3
"""Training-step time of a small ResNet-style CNN (the PyTorch script of docs/porting_from_pytorch.md, ported) in
baregrad, eager and jitted, vs PyTorch eager on the CPU, measured in one run on the same data and initial weights.

  python bench/train_cnn.py [--rounds 5] [--steps 3] [--bs 64] [--size 32] [--width 16] [--threads N]

The network: conv3x3(3->w)-BN-ReLU, two residual blocks at width w, a strided residual block to 2w (1x1 conv
shortcut), global average pooling, a linear head to 10 classes; cross-entropy loss, SGD with momentum 0.9 and weight
decay 5e-4. The model code is one function over the `nn`/`F` modules of either library (the port is the import).
Every step builds its input tensors from host data. Workloads run in interleaved rounds; each round gives a ratio
against the faster PyTorch setting (1 thread or all), and the median is reported with every round's. Targets of
issue 40: eager <= 3x PyTorch, jitted <= 1.5x. Not a timed test: numbers depend on the machine and its load."""
from __future__ import annotations
import argparse, pathlib, statistics, sys, time
from typing import Any, Callable
import numpy as np
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

def build(nn: Any, F: Any, width: int) -> Any:
  """The CNN over a library's nn and nn.functional (torch's or baregrad's: the same code)."""
  class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1):
      super().__init__()
      self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout)
      self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout)
      self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout)) if stride != 1 or cin != cout else None
    def forward(self, x: Any) -> Any:
      out = F.relu(self.bn1(self.conv1(x)))
      out = self.bn2(self.conv2(out))
      return F.relu(out + (self.short(x) if self.short is not None else x))
  class Net(nn.Module):
    def __init__(self):
      super().__init__()
      self.stem, self.bn = nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width)
      self.layer1 = nn.Sequential(Block(width, width), Block(width, width))
      self.layer2 = Block(width, 2 * width, stride=2)
      self.fc = nn.Linear(2 * width, 10)
    def forward(self, x: Any) -> Any:
      x = F.relu(self.bn(self.stem(x)))
      x = self.layer2(self.layer1(x))
      return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))
  return Net()

def torch_stepper(a: Any, data: tuple, init: dict, threads: int) -> tuple[Callable[[], float], list[float]]:
  """A function running the next PyTorch training step (fresh input tensors) and returning its seconds, and its losses."""
  import torch
  xs, ys = data
  model = build(torch.nn, torch.nn.functional, a.width)
  model.load_state_dict({k: torch.tensor(v) for k, v in init.items()})
  model.train()
  opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
  losses: list[float] = []
  def run() -> float:
    torch.set_num_threads(threads)
    i = len(losses)
    t0 = time.perf_counter()
    x, y = torch.tensor(xs[i % len(xs)]), torch.tensor(ys[i % len(ys)])
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
    losses.append(loss.item())
    return time.perf_counter() - t0
  return run, losses

def baregrad_stepper(a: Any, data: tuple, init: dict, use_jit: bool = False) -> tuple[Callable[[], float], list[float]]:
  """The same for baregrad, eager or with the step jitted."""
  import baregrad
  import baregrad.nn as nn
  import baregrad.nn.functional as F
  xs, ys = data
  model = build(nn, F, a.width)
  model.load_state_dict(init)
  model.train()
  opt = baregrad.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
  def step(x: Any, y: Any) -> Any:
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step(loss)
    return loss
  if use_jit: step = baregrad.jit(step)
  losses: list[float] = []
  def run() -> float:
    i = len(losses)
    t0 = time.perf_counter()
    loss = step(baregrad.tensor(xs[i % len(xs)]), baregrad.tensor(ys[i % len(ys)]))
    losses.append(loss.item())
    return time.perf_counter() - t0
  return run, losses

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--steps", type=int, default=3, help="steps per round")
  ap.add_argument("--rounds", type=int, default=5)
  ap.add_argument("--bs", type=int, default=64)
  ap.add_argument("--size", type=int, default=32, help="image height and width")
  ap.add_argument("--width", type=int, default=16, help="channels of the first stage")
  ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: 1 and torch's default, the faster per round)")
  ap.add_argument("--no-jit", action="store_true")
  a = ap.parse_args()
  import torch
  rng = np.random.default_rng(0)
  data = ([rng.standard_normal((a.bs, 3, a.size, a.size)).astype(np.float32) for _ in range(4)],
          [rng.integers(0, 10, a.bs).astype(np.int64) for _ in range(4)])
  torch.manual_seed(0)
  init = {k: v.detach().numpy().copy() for k, v in build(torch.nn, torch.nn.functional, a.width).state_dict().items()}
  print(f"ResNet-style CNN, width {a.width}, batch {a.bs}, {a.size}x{a.size} images, SGD momentum; {a.rounds} rounds of {a.steps} steps")
  runs: dict[str, tuple[Callable[[], float], list[float]]] = {"baregrad eager": baregrad_stepper(a, data, init)}
  if not a.no_jit: runs["baregrad jit"] = baregrad_stepper(a, data, init, use_jit=True)
  for n in ([a.threads] if a.threads else sorted({1, torch.get_num_threads()})): runs[f"pytorch {n}t"] = torch_stepper(a, data, init, n)
  t0 = time.perf_counter()
  runs["baregrad eager"][0]()   # compiles
  first = time.perf_counter() - t0
  for name, (run, _) in runs.items():
    for _ in range(2 if name != "baregrad eager" else 1): run()   # (the jit captures on its second call)
  med: dict[str, list[float]] = {k: [] for k in runs}
  for _ in range(a.rounds):
    for name, (run, _) in runs.items(): med[name].append(statistics.median([run() for _ in range(a.steps)]))
  torch_names = [k for k in runs if k.startswith("pytorch")]
  for name in runs:
    print(f"{name:15s} {statistics.median(med[name]) * 1e3:9.2f} ms/step" + (f"; first step {first:.2f} s" if name == "baregrad eager" else ""))
  ref = [min(med[k][r] for k in torch_names) for r in range(a.rounds)]
  targets = {"baregrad eager": 3.0, "baregrad jit": 1.5}
  for name in (k for k in runs if not k.startswith("pytorch")):
    rs = sorted(m / t for m, t in zip(med[name], ref))
    print(f"ratio {name}/pytorch: {statistics.median(rs):.2f}x (target <= {targets[name]}x; rounds: {', '.join(f'{r:.2f}' for r in rs)})")
  # the same steps on the same data from the same weights: the losses agree (a check that the port is the same program)
  lb, lt = runs["baregrad eager"][1], runs[torch_names[0]][1]
  n = min(len(lb), len(lt))
  print(f"max |loss difference| eager vs pytorch over {n} steps: {max(abs(x - y) for x, y in zip(lb[:n], lt[:n])):.2e}")

if __name__ == "__main__": main()
