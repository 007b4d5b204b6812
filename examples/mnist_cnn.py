#!/usr/bin/env python3
"""Train a small CNN (conv-relu-pool x2, linear) on MNIST or a deterministic synthetic MNIST-shaped set.

  python examples/mnist_cnn.py                       # synthetic data, small defaults (< 1 minute on 2 cores)
  python examples/mnist_cnn.py --data ~/mnist --steps 1000 --bs 64
  python examples/mnist_cnn.py --data download       # MNIST downloaded once into the cache (baregrad.datasets)

Same data options and output as mnist_mlp.py (progress bar on a terminal, held-out accuracy, steps/s)."""
from __future__ import annotations
import argparse, pathlib, sys
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from mnist_mlp import load_mnist, synthetic_mnist, train, nn, Tensor, jit  # noqa: E402

class CNN(nn.Module):
  def __init__(self, c1: int = 8, c2: int = 16):
    self.conv1, self.conv2 = nn.Conv2d(1, c1, 3), nn.Conv2d(c1, c2, 3)
    self.bn = nn.BatchNorm2d(c2)
    self.fc = nn.Linear(c2 * 5 * 5, 10)
  def forward(self, x: Tensor) -> Tensor:
    x = x.reshape(x.shape[0], 1, 28, 28)
    x = (self.conv1(x).relu()).max_pool2d(2)            # 8x13x13
    x = (self.bn(self.conv2(x)).relu()).max_pool2d(2)   # 16x5x5
    return self.fc(x.flatten(1))

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--data", help="folder with the MNIST idx files, a mirror's URL, or 'download' (default: synthetic data)")
  ap.add_argument("--steps", type=int, default=60)
  ap.add_argument("--bs", type=int, default=32, help="batch size")
  ap.add_argument("--lr", type=float, default=3e-3)
  ap.add_argument("--train-size", type=int, default=4096, help="synthetic training set size")
  ap.add_argument("--test-size", type=int, default=512, help="synthetic held-out set size")
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--no-jit", action="store_true", help="run every step eagerly even where baregrad has a jit")
  a = ap.parse_args()
  data = load_mnist(a.data) if a.data else synthetic_mnist(a.train_size, a.test_size, seed=a.seed)
  print(f"data: {'MNIST from ' + a.data if a.data else 'synthetic MNIST-shaped'}: {len(data[0][0])} train, {len(data[1][0])} test")
  Tensor.manual_seed(a.seed)
  model = CNN()
  r = train(model, data, a.steps, a.bs, a.lr, a.seed, use_jit=not a.no_jit)
  print(f"jit: {'on' if jit is not None and not a.no_jit else 'off (not available)' if jit is None else 'off'}")
  print(f"final loss {r['loss']:.4f}  test accuracy {100 * r['test_acc']:.2f}%  {r['steps_per_s']:.1f} steps/s "
        f"(first step, with compiles: {r['first_step_s']:.2f} s)")

if __name__ == "__main__": main()
