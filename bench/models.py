#!/usr/bin/env python3
"""CPU inference of real architectures through ONNX: baregrad against onnxruntime and PyTorch, in one run.

  python bench/models.py [--models resnet18,resnet50,mobilenetv2,vit_tiny,bert_base] [--batch 1,8] [--rounds 7]
                         [--threads N] [--no-jit] [--quick]

The architectures are written here in PyTorch with random weights (no model hub), exported to ONNX with the
exporter users run (torch.onnx.export, opset 17), and loaded by `baregrad.onnx.load(..., jit=True)` and by
onnxruntime; PyTorch runs the same module in eval mode under `torch.inference_mode()`. Every timed call gets a fresh
input (a new array each call). The frameworks run in interleaved rounds; each row reports the median latency of
each and the ratios reference/baregrad (> 1: baregrad is faster). baregrad's first call (it compiles) is reported
apart, as is its peak device memory (the allocator's high-water mark over a call, weights included) beside the
weights' size. Outputs are checked against onnxruntime's.
Not a timed test: numbers depend on the machine and its load."""
from __future__ import annotations
import argparse, io, os, pathlib, statistics, sys, time, warnings
from typing import Callable
import numpy as np
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

def _torch():
  import torch
  return torch

# ---------------------------------------------------------------- the architectures (standard shapes)
def resnet(depth: int):
  """ResNet-18 (basic blocks) or ResNet-50 (bottlenecks) for 224x224 ImageNet inputs."""
  torch = _torch(); nn = torch.nn
  class Basic(nn.Module):
    expansion = 1
    def __init__(self, cin: int, c: int, stride: int):
      super().__init__()
      self.c1, self.b1 = nn.Conv2d(cin, c, 3, stride, 1, bias=False), nn.BatchNorm2d(c)
      self.c2, self.b2 = nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c)
      self.down = None if stride == 1 and cin == c else nn.Sequential(nn.Conv2d(cin, c, 1, stride, bias=False), nn.BatchNorm2d(c))
    def forward(self, x):
      y = self.b2(self.c2(torch.relu(self.b1(self.c1(x)))))
      return torch.relu(y + (x if self.down is None else self.down(x)))
  class Bottleneck(nn.Module):
    expansion = 4
    def __init__(self, cin: int, c: int, stride: int):
      super().__init__()
      self.c1, self.b1 = nn.Conv2d(cin, c, 1, bias=False), nn.BatchNorm2d(c)
      self.c2, self.b2 = nn.Conv2d(c, c, 3, stride, 1, bias=False), nn.BatchNorm2d(c)
      self.c3, self.b3 = nn.Conv2d(c, 4 * c, 1, bias=False), nn.BatchNorm2d(4 * c)
      self.down = None if stride == 1 and cin == 4 * c else nn.Sequential(nn.Conv2d(cin, 4 * c, 1, stride, bias=False), nn.BatchNorm2d(4 * c))
    def forward(self, x):
      y = torch.relu(self.b1(self.c1(x)))
      y = self.b3(self.c3(torch.relu(self.b2(self.c2(y)))))
      return torch.relu(y + (x if self.down is None else self.down(x)))
  block, counts = {18: (Basic, (2, 2, 2, 2)), 50: (Bottleneck, (3, 4, 6, 3))}[depth]
  class ResNet(nn.Module):
    def __init__(self):
      super().__init__()
      self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
      layers, cin = [], 64
      for i, n in enumerate(counts):
        for j in range(n):
          layers.append(block(cin, 64 << i, 2 if j == 0 and i > 0 else 1))
          cin = (64 << i) * block.expansion
      self.layers, self.fc = nn.Sequential(*layers), nn.Linear(cin, 1000)
    def forward(self, x): return self.fc(self.layers(self.stem(x)).mean((2, 3)))
  return ResNet(), (3, 224, 224)

def mobilenetv2():
  """MobileNetV2 (width 1.0): inverted residuals with depthwise 3x3 convolutions and ReLU6."""
  torch = _torch(); nn = torch.nn
  def cbr(cin, cout, k, s, groups=1, act=True):
    mods = [nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*mods, nn.ReLU6()) if act else nn.Sequential(*mods)
  class Inverted(nn.Module):
    def __init__(self, cin, cout, s, t):
      super().__init__()
      h = cin * t
      self.res = s == 1 and cin == cout
      self.body = nn.Sequential(*([cbr(cin, h, 1, 1)] if t != 1 else []), cbr(h, h, 3, s, groups=h), cbr(h, cout, 1, 1, act=False))
    def forward(self, x): return x + self.body(x) if self.res else self.body(x)
  class MobileNetV2(nn.Module):
    def __init__(self):
      super().__init__()
      layers, cin = [cbr(3, 32, 3, 2)], 32
      for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
          layers.append(Inverted(cin, c, s if i == 0 else 1, t)); cin = c
      layers.append(cbr(cin, 1280, 1, 1))
      self.features, self.fc = nn.Sequential(*layers), nn.Linear(1280, 1000)
    def forward(self, x): return self.fc(self.features(x).mean((2, 3)))
  return MobileNetV2(), (3, 224, 224)

def _encoder(dim: int, heads: int, mlp: int, depth: int, gelu_approx: str):
  """Pre-norm (ViT) transformer encoder layers with attention written out (as exporters see most models)."""
  torch = _torch(); nn = torch.nn
  class Layer(nn.Module):
    def __init__(self):
      super().__init__()
      self.n1, self.qkv, self.proj = nn.LayerNorm(dim), nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
      self.n2, self.fc1, self.fc2 = nn.LayerNorm(dim), nn.Linear(dim, mlp), nn.Linear(mlp, dim)
    def forward(self, x):
      B, T, _ = x.shape
      q, k, v = self.qkv(self.n1(x)).reshape(B, T, 3, heads, dim // heads).permute(2, 0, 3, 1, 4)
      a = torch.softmax(q @ k.transpose(-2, -1) * (dim // heads) ** -0.5, -1) @ v
      x = x + self.proj(a.transpose(1, 2).reshape(B, T, dim))
      return x + self.fc2(nn.functional.gelu(self.fc1(self.n2(x)), approximate=gelu_approx))
  return nn.Sequential(*[Layer() for _ in range(depth)])

def vit_tiny():
  """ViT/DeiT-tiny: 16x16 patches, 12 layers of dim 192, 3 heads, MLP 768, a class token."""
  torch = _torch(); nn = torch.nn
  class ViT(nn.Module):
    def __init__(self):
      super().__init__()
      self.patch = nn.Conv2d(3, 192, 16, 16)
      self.cls, self.pos = nn.Parameter(torch.randn(1, 1, 192) * .02), nn.Parameter(torch.randn(1, 197, 192) * .02)
      self.blocks, self.norm, self.head = _encoder(192, 3, 768, 12, "none"), nn.LayerNorm(192), nn.Linear(192, 1000)
    def forward(self, x):
      x = self.patch(x).flatten(2).transpose(1, 2)
      x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
      return self.head(self.norm(self.blocks(x))[:, 0])
  return ViT(), (3, 224, 224)

def bert_base():
  """BERT-base at sequence 128: token + position embeddings, 12 post-norm layers of dim 768, 12 heads, MLP 3072."""
  torch = _torch(); nn = torch.nn
  class Layer(nn.Module):
    def __init__(self):
      super().__init__()
      self.qkv, self.proj, self.n1 = nn.Linear(768, 3 * 768), nn.Linear(768, 768), nn.LayerNorm(768)
      self.fc1, self.fc2, self.n2 = nn.Linear(768, 3072), nn.Linear(3072, 768), nn.LayerNorm(768)
    def forward(self, x):
      B, T, _ = x.shape
      q, k, v = self.qkv(x).reshape(B, T, 3, 12, 64).permute(2, 0, 3, 1, 4)
      a = torch.softmax(q @ k.transpose(-2, -1) * 0.125, -1) @ v
      x = self.n1(x + self.proj(a.transpose(1, 2).reshape(B, T, 768)))
      return self.n2(x + self.fc2(nn.functional.gelu(self.fc1(x))))
  class Bert(nn.Module):
    def __init__(self):
      super().__init__()
      self.tok, self.pos, self.norm = nn.Embedding(30522, 768), nn.Parameter(torch.randn(1, 128, 768) * .02), nn.LayerNorm(768)
      self.layers = nn.Sequential(*[Layer() for _ in range(12)])
    def forward(self, ids): return self.layers(self.norm(self.tok(ids) + self.pos))
  return Bert(), (128,)

MODELS: dict[str, Callable] = {"resnet18": lambda: resnet(18), "resnet50": lambda: resnet(50), "mobilenetv2": mobilenetv2,
                               "vit_tiny": vit_tiny, "bert_base": bert_base}

# ---------------------------------------------------------------- running
def export(model, shape: tuple[int, ...], batch: int, int_input: bool) -> bytes:
  """The model as ONNX bytes (TorchScript exporter, opset 17) for a fixed batch."""
  torch = _torch()
  x = torch.randint(0, 30522, (batch,) + shape) if int_input else torch.randn((batch,) + shape)
  f = io.BytesIO()
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")   # the TorchScript exporter's deprecation notice
    torch.onnx.export(model, (x,), f, dynamo=False, opset_version=17, input_names=["x"], output_names=["y"])
  return f.getvalue()

def inputs(shape: tuple[int, ...], batch: int, int_input: bool, n: int, seed: int) -> list[np.ndarray]:
  """n fresh inputs (one per timed call)."""
  rng = np.random.default_rng(seed)
  if int_input: return [rng.integers(0, 30522, (batch,) + shape, dtype=np.int64) for _ in range(n)]
  return [rng.standard_normal((batch,) + shape, dtype=np.float32) for _ in range(n)]

def time_calls(fn: Callable[[np.ndarray], np.ndarray], xs: list[np.ndarray]) -> list[float]:
  out = []
  for x in xs:
    t0 = time.perf_counter(); fn(x); out.append(time.perf_counter() - t0)
  return out

def bench_model(name: str, batch: int, a) -> dict:
  import onnxruntime as ort
  import baregrad.onnx
  from baregrad import Device
  torch = _torch()
  torch.manual_seed(0)
  model, shape = MODELS[name]()
  model.eval()
  int_input = name == "bert_base"
  blob = export(model, shape, batch, int_input)
  weights = sum(p.numel() * 4 for p in model.parameters())
  so = ort.SessionOptions()
  so.intra_op_num_threads = a.threads
  sess = ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"])
  run_ort = lambda x: sess.run(None, {"x": x})[0]
  def run_torch(x):
    with torch.inference_mode(): return model(torch.from_numpy(x)).numpy()
  alloc = Device[Device.DEFAULT].allocator
  t0 = time.perf_counter()
  runner = baregrad.onnx.load(blob, jit=not a.no_jit)
  t_load = time.perf_counter() - t0
  run_bg = lambda x: runner(x)["y"].numpy()
  first_x = inputs(shape, batch, int_input, 1, 1)[0]
  t0 = time.perf_counter(); got = run_bg(first_x); t_first = time.perf_counter() - t0
  ref = run_ort(first_x)
  err = float(np.max(np.abs(got - ref)) / (np.max(np.abs(ref)) + 1e-30))
  for _ in range(2): run_bg(first_x); run_ort(first_x); run_torch(first_x)   # warm (the jit captures on call 2)
  alloc.peak_used = alloc.mem_used
  run_bg(first_x)
  peak = alloc.peak_used
  times: dict[str, list[float]] = {"baregrad": [], "onnxruntime": [], "pytorch": []}
  n = a.calls
  for r in range(a.rounds):
    xs = inputs(shape, batch, int_input, 3 * n, 100 + r)
    times["baregrad"] += time_calls(run_bg, xs[:n])
    times["onnxruntime"] += time_calls(run_ort, xs[n:2 * n])
    times["pytorch"] += time_calls(run_torch, xs[2 * n:])
  med = {k: statistics.median(v) for k, v in times.items()}
  return {"model": name, "batch": batch, "load": t_load, "first": t_first, "err": err, "peak": peak, "weights": weights, **med}

def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--models", default=",".join(MODELS))
  p.add_argument("--batch", default="1,8")
  p.add_argument("--rounds", type=int, default=5)
  p.add_argument("--calls", type=int, default=3, help="timed calls per framework per round")
  p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
  p.add_argument("--no-jit", action="store_true")
  p.add_argument("--quick", action="store_true", help="batch 1 only, 3 rounds")
  a = p.parse_args()
  if a.quick: a.batch, a.rounds = "1", 3
  _torch().set_num_threads(a.threads)
  print(f"threads {a.threads}; ms per call (median); ratio = reference / baregrad (> 1: baregrad faster)")
  print(f"{'model':12} {'batch':>5} {'baregrad':>9} {'ort':>8} {'torch':>8} {'x ort':>6} {'x torch':>7} {'first s':>8} {'peak MB':>8} "
        f"{'wts MB':>7} {'rel err':>8}")
  for name in a.models.split(","):
    for b in (int(v) for v in a.batch.split(",")):
      r = bench_model(name, b, a)
      print(f"{name:12} {b:5d} {r['baregrad'] * 1e3:9.2f} {r['onnxruntime'] * 1e3:8.2f} {r['pytorch'] * 1e3:8.2f} "
            f"{r['onnxruntime'] / r['baregrad']:6.2f} {r['pytorch'] / r['baregrad']:7.2f} {r['first']:8.2f} {r['peak'] / 2**20:8.1f} "
            f"{r['weights'] / 2**20:7.1f} {r['err']:8.1e}", flush=True)

if __name__ == "__main__": main()
