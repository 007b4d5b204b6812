#!/usr/bin/env python3
"""Train a 784-H-10 MLP on MNIST (or, without --data, a deterministic synthetic MNIST-shaped set) with baregrad.

  python examples/mnist_mlp.py                      # synthetic data, defaults finish in well under a minute
  python examples/mnist_mlp.py --data ~/mnist --steps 2000 --bs 128 --lr 1e-3
  python examples/mnist_mlp.py --data download      # MNIST from a public mirror, downloaded once into the cache
  python examples/mnist_mlp.py --devices CPU:0,CPU:1  # data parallel: each batch split over the devices

--data DIR reads the standard idx files (train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte,
t10k-labels-idx1-ubyte, each optionally .gz) through baregrad.datasets; a URL downloads them from that mirror.
Shows a progress bar on a terminal, then held-out accuracy and steps per second."""
from __future__ import annotations
import argparse, pathlib, sys, time
import numpy as np
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import baregrad.nn as nn
from baregrad import Tensor, datasets, knobs
from baregrad.helpers import Progress
from baregrad.nn import optim
from baregrad import jit

# ---- data -------------------------------------------------------------------------------------------------------
def load_mnist(source: str) -> tuple:
  """((x_train, y_train), (x_test, y_test)) as NumPy arrays from a folder, a URL or "download" (the default mirror).

  The dataset comes as Tensors; training draws random minibatches on the host (NumPy fancy indexing, one copy of
  the batch to the device per step), which keeps the whole set out of the jitted step's arguments."""
  d = datasets.mnist(None if source == "download" else source)
  return (d.x_train.numpy(), d.y_train.numpy()), (d.x_test.numpy(), d.y_test.numpy())

def synthetic_mnist(n_train: int = 8192, n_test: int = 1024, seed: int = 0) -> tuple:
  """MNIST-shaped (uint8 28x28, labels 0..9): each class is a fixed set of random strokes; samples are that
  template shifted by up to 3 pixels, stroke intensity varied, plus noise and a few distractor pixels."""
  rng = np.random.default_rng(1234)  # the templates are the same for every seed
  templates = np.zeros((10, 28, 28), np.float32)
  yy, xx = np.mgrid[0:28, 0:28]
  for c in range(10):
    for _ in range(3):
      (x0, y0), (x1, y1) = rng.uniform(6, 22, 2), rng.uniform(6, 22, 2)
      for t in np.linspace(0, 1, 24):
        cx, cy = x0 + (x1 - x0) * t, y0 + (y1 - y0) * t
        templates[c] = np.maximum(templates[c], np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / 2.0))
  def make(n: int, r: np.random.Generator):
    y = r.integers(0, 10, n)
    x = np.zeros((n, 28, 28), np.float32)
    sh = r.integers(-3, 4, (n, 2))
    for i in range(n): x[i] = np.roll(templates[y[i]], tuple(sh[i]), axis=(0, 1))
    x *= r.uniform(0.6, 1.0, (n, 1, 1))
    x += r.normal(0, 0.15, x.shape) + (r.random(x.shape) < 0.02)
    return (np.clip(x, 0, 1) * 255).astype(np.uint8), y.astype(np.uint8)
  r = np.random.default_rng(seed)
  return make(n_train, r), make(n_test, r)

def normalize(x: np.ndarray) -> np.ndarray: return ((x.astype(np.float32) / 255.0) - 0.1307) / 0.3081

# ---- model ------------------------------------------------------------------------------------------------------
class MLP(nn.Module):
  def __init__(self, hidden: int = 128):
    self.l1, self.l2 = nn.Linear(784, hidden), nn.Linear(hidden, 10)
  def forward(self, x: Tensor) -> Tensor: return self.l2(self.l1(x.reshape(x.shape[0], 784)).relu())

def evaluate(model, x: np.ndarray, y: np.ndarray, bs: int = 512, device: str | None = None) -> float:
  correct = 0
  model.eval()   # batch norm on running statistics, dropout off (modules start in training mode, as in PyTorch)
  for i in range(0, len(x), bs):
    correct += int((model(Tensor(normalize(x[i:i + bs]), device=device)).argmax(-1).numpy() == y[i:i + bs]).sum())
  return correct / len(x)

def train(model, data: tuple, steps: int, bs: int, lr: float, seed: int = 0, opt_name: str = "adam", quiet: bool = False,
          use_jit: bool = True) -> dict:
  (xtr, ytr), (xte, yte) = data
  params = nn.get_parameters(model)
  opt = optim.Adam(params, lr=lr) if opt_name == "adam" else optim.SGD(params, lr=lr, momentum=0.9)
  rng = np.random.default_rng(seed)

  def step(x: Tensor, y: Tensor) -> Tensor:
    loss = nn.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step(loss)  # the loss is realized in the step's schedule, before the weights change
    return loss
  # with the jit (where baregrad has one), calls after the second replay the captured kernels
  if use_jit: step = jit(step)

  loss_v, t0, t_first = float("nan"), time.perf_counter(), None
  bar = Progress(total=steps, desc="train", unit="steps", delay=float("inf") if quiet else 0.0)  # on a terminal only
  model.train()
  with bar:
    for s in range(steps):
      idx = rng.integers(0, len(xtr), bs)
      loss = step(Tensor(normalize(xtr[idx])), Tensor(ytr[idx].astype(np.int32)))
      if s == 0: t_first, t0 = time.perf_counter() - t0, time.perf_counter()  # step 1 compiles the kernels
      if bar.enabled and (s % 10 == 0 or s == steps - 1): loss_v = loss.item()  # reading the loss waits for the step
      bar.update(1, f"loss {loss_v:.4f}")
  elapsed = time.perf_counter() - t0
  loss_v = loss.item()
  acc = evaluate(model, xte, yte)
  return {"loss": loss_v, "test_acc": acc, "steps_per_s": (steps - 1) / elapsed if steps > 1 else float("nan"), "first_step_s": t_first}

def train_data_parallel(model, data: tuple, devices: list[str], steps: int, bs: int, lr: float, seed: int = 0,
                        opt_name: str = "adam", use_jit: bool = True) -> dict:
  """train() with the model replicated on every device and each batch split over them (nn.DataParallel), each part
  made on its device from its slice of the batch; checks after every step that all replicas hold the same weights.
  With the jit, a step replays each device's kernels as one recorded queue with the copies between devices queued."""
  from baregrad.tensor.nn.data_parallel import DataParallel
  (xtr, ytr), (xte, yte) = data
  mk = (lambda ps: optim.Adam(ps, lr=lr)) if opt_name == "adam" else (lambda ps: optim.SGD(ps, lr=lr, momentum=0.9))
  dp = DataParallel(model, devices, mk)
  def step(xs: list, ys: list) -> Tensor: return dp.step(lambda m, x, y: nn.cross_entropy(m(x), y), xs, ys)
  if use_jit: step = jit(step)
  rng, k = np.random.default_rng(seed), len(devices)
  cut = [bs * i // k for i in range(k + 1)]
  t0 = t_first = time.perf_counter()
  for s in range(steps):
    idx = rng.integers(0, len(xtr), bs)
    x, y = normalize(xtr[idx]), ytr[idx].astype(np.int32)
    loss = step([x[a:b] for a, b in zip(cut, cut[1:])], [y[a:b] for a, b in zip(cut, cut[1:])])
    ws = [[p.numpy() for p in ps] for ps in dp.params]
    if any(not all((a == b).all() for a, b in zip(ws[0], w)) for w in ws[1:]):
      raise RuntimeError(f"step {s}: the replicas on {devices} hold different weights")
    if s == 0: t_first, t0 = time.perf_counter() - t0, time.perf_counter()
  elapsed = time.perf_counter() - t0
  acc = evaluate(dp.model, xte, yte, device=dp.devices[0])
  return {"loss": loss.item(), "test_acc": acc, "steps_per_s": (steps - 1) / elapsed if steps > 1 else float("nan"),
          "first_step_s": t_first}

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--data", help="folder with the MNIST idx files, a mirror's URL, or 'download' (default: synthetic data)")
  ap.add_argument("--steps", type=int, default=200)
  ap.add_argument("--bs", type=int, default=64, help="batch size")
  ap.add_argument("--lr", type=float, default=2e-3)
  ap.add_argument("--hidden", type=int, default=128)
  ap.add_argument("--opt", choices=("adam", "sgd"), default="adam")
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--save", help="write the trained weights to this .safetensors file")
  ap.add_argument("--devices", help="comma-separated devices of one kind (CPU:0,CPU:1 or NV:0,NV:1): data parallel")
  ap.add_argument("--no-jit", action="store_true", help="run every step eagerly even where baregrad has a jit")
  a = ap.parse_args()
  data = load_mnist(a.data) if a.data else synthetic_mnist(seed=a.seed)
  print(f"data: {'MNIST from ' + a.data if a.data else 'synthetic MNIST-shaped'}: {len(data[0][0])} train, {len(data[1][0])} test")
  Tensor.manual_seed(a.seed)
  model = MLP(a.hidden)
  if a.devices:
    devs = a.devices.split(",")
    r = train_data_parallel(model, data, devs, a.steps, a.bs, a.lr, a.seed, a.opt, use_jit=not a.no_jit)
    print(f"data parallel on {devs}: identical weights on every device after each step")
  else: r = train(model, data, a.steps, a.bs, a.lr, a.seed, a.opt, use_jit=not a.no_jit)
  # JIT=0 in the environment makes every jitted function run eagerly
  print("jit:", "off" if a.no_jit else "off (JIT=0)" if not knobs.get("JIT") else "on")
  print(f"final loss {r['loss']:.4f}  test accuracy {100 * r['test_acc']:.2f}%  {r['steps_per_s']:.1f} steps/s "
        f"(first step, with compiles: {r['first_step_s']:.2f} s)")
  if a.save:
    nn.state.safe_save(nn.get_state_dict(model), a.save)
    print(f"saved {a.save}")

if __name__ == "__main__": main()
