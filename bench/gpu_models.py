"""Models end to end on a GPU (issue 34 item 5), each against PyTorch eager on the same GPU in the same run:

  ResNet-50 inference, batch 1 and 64, half, 224x224           ms per step (forward, realized)
  GPT-2-small (124M) forward, 8 x 1024 tokens, half            ms per step (the logits, realized)
  ResNet-18 CIFAR training step, batch 256, float32, 32x32     ms per step (forward, backward, SGD with momentum;
                                                               err: the first loss, and the stem's weight updates)

The architectures are written here once, against a namespace `T` that is either `torch` or `baregrad` (the same
module classes, functional calls and tensor methods exist in both), so both frameworks run the very same model; the
weights are baregrad's random initialization, copied into the PyTorch model (state_dict), so the outputs are compared
too. Every timed step gets a fresh input already on the device; the time is host wall time from the call to the
device being idle (baregrad: the result realized and Device.synchronize(); PyTorch: torch.cuda.synchronize()).

small=True runs the same code at tiny sizes (fewer blocks, narrow layers, small images, a short sequence): the NV mock
runs it in CI (tests/drivers/nv/test_bench_gpu.py), and there PyTorch runs on the CPU for the comparison of results
only (no ratio: the mock's times mean nothing)."""
from __future__ import annotations
import time
from types import ModuleType
from typing import Any, Callable
import numpy as np

# ---------------------------------------------------------------- the architectures, for T = torch or baregrad
def resnet(T: ModuleType, counts: tuple[int, ...], bottleneck: bool, width: int, classes: int, cifar: bool) -> Any:
  """ResNet with basic blocks (ResNet-18: counts 2,2,2,2) or bottlenecks (ResNet-50: 3,4,6,3), stage widths width * 2^i;
  the ImageNet stem (7x7 stride 2, max pool) or the CIFAR one (3x3 stride 1, no pool)."""
  nn = T.nn
  class Basic(nn.Module):
    expansion = 1
    def __init__(self, cin: int, c: int, stride: int):
      super().__init__()
      self.c1, self.b1 = nn.Conv2d(cin, c, 3, stride, 1, bias=False), nn.BatchNorm2d(c)
      self.c2, self.b2 = nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c)
      self.down = None if stride == 1 and cin == c else nn.Sequential(nn.Conv2d(cin, c, 1, stride, bias=False), nn.BatchNorm2d(c))
    def forward(self, x):
      y = self.b2(self.c2(self.b1(self.c1(x)).relu()))
      return (y + (x if self.down is None else self.down(x))).relu()
  class Bottleneck(nn.Module):
    expansion = 4
    def __init__(self, cin: int, c: int, stride: int):
      super().__init__()
      self.c1, self.b1 = nn.Conv2d(cin, c, 1, bias=False), nn.BatchNorm2d(c)
      self.c2, self.b2 = nn.Conv2d(c, c, 3, stride, 1, bias=False), nn.BatchNorm2d(c)
      self.c3, self.b3 = nn.Conv2d(c, 4 * c, 1, bias=False), nn.BatchNorm2d(4 * c)
      self.down = None if stride == 1 and cin == 4 * c else nn.Sequential(nn.Conv2d(cin, 4 * c, 1, stride, bias=False), nn.BatchNorm2d(4 * c))
    def forward(self, x):
      y = self.b1(self.c1(x)).relu()
      y = self.b3(self.c3(self.b2(self.c2(y)).relu()))
      return (y + (x if self.down is None else self.down(x))).relu()
  block = Bottleneck if bottleneck else Basic
  class ResNet(nn.Module):
    def __init__(self):
      super().__init__()
      if cifar: self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
      else: self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
      layers, cin = [], width
      for i, n in enumerate(counts):
        for j in range(n):
          layers.append(block(cin, width << i, 2 if j == 0 and i > 0 else 1))
          cin = (width << i) * block.expansion
      self.layers, self.fc = nn.Sequential(*layers), nn.Linear(cin, classes)
    def forward(self, x): return self.fc(self.layers(self.stem(x)).mean((2, 3)))
  return ResNet()

def gpt2(T: ModuleType, layers: int, dim: int, heads: int, vocab: int, ctx: int) -> Any:
  """GPT-2: token and position embeddings, pre-norm blocks (causal attention, MLP 4x with tanh GELU), a final norm, and
  the output projection tied to the token embedding."""
  nn, F = T.nn, T.nn.functional
  class Block(nn.Module):
    def __init__(self):
      super().__init__()
      self.ln1, self.attn, self.proj = nn.LayerNorm(dim), nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
      self.ln2, self.fc, self.out = nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
    def forward(self, x):
      B, L, _ = x.shape
      q, k, v = self.attn(self.ln1(x)).reshape(B, L, 3, heads, dim // heads).permute(2, 0, 3, 1, 4)
      a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
      x = x + self.proj(a.transpose(1, 2).reshape(B, L, dim))
      return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))
  class GPT2(nn.Module):
    def __init__(self):
      super().__init__()
      self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(ctx, dim)
      self.blocks, self.ln_f = nn.Sequential(*[Block() for _ in range(layers)]), nn.LayerNorm(dim)
    def forward(self, ids):
      pos = T.arange(ids.shape[1], device=ids.device)
      x = self.ln_f(self.blocks(self.wte(ids) + self.wpe(pos)))
      return x @ self.wte.weight.transpose(0, 1)
  return GPT2()

# ---------------------------------------------------------------- sizes
def sizes(small: bool) -> dict[str, dict[str, Any]]:
  """The models' shapes: the issue's, or tiny ones with the same structure (small)."""
  if small:
    # (two stages: a block of each kind, strided and downsampling, with as few kernels as that takes on the mock)
    return {"resnet50": dict(counts=(1, 1), width=4, classes=10, hw=16, batches=(1, 2)),
            "gpt2": dict(layers=1, dim=32, heads=2, vocab=64, ctx=16, batch=2, seq=16),
            "resnet18": dict(counts=(1, 1), width=4, classes=10, hw=8, batch=2)}
  return {"resnet50": dict(counts=(3, 4, 6, 3), width=64, classes=1000, hw=224, batches=(1, 64)),
          "gpt2": dict(layers=12, dim=768, heads=12, vocab=50257, ctx=1024, batch=8, seq=1024),
          "resnet18": dict(counts=(2, 2, 2, 2), width=64, classes=10, hw=32, batch=256)}

# ---------------------------------------------------------------- running
def copy_weights(src: Any, dst: Any) -> None:
  """baregrad module src's parameters and buffers into the PyTorch module dst (the same architecture, so the same
  names); PyTorch's own bookkeeping buffers (num_batches_tracked) are left as they are."""
  import torch
  theirs = dst.state_dict()
  # (numpy() copies each tensor out as it is; a cast on the device first would be a kernel per tensor)
  state = {k: torch.from_numpy(np.ascontiguousarray(v.numpy()).astype(np.float32)) for k, v in src.state_dict().items() if k in theirs}
  if missing := [k for k in theirs if k not in state and not k.endswith("num_batches_tracked")]:
    raise KeyError(f"baregrad's model has no {missing[:4]} (PyTorch's state_dict names)")
  dst.load_state_dict({k: v.to(theirs[k].dtype) for k, v in state.items()}, strict=False)

def _sync_bg(dev: str) -> None:
  from baregrad.hal import Device
  Device[dev].synchronize()

def _best(step: Callable[[int], Any], sync: Callable[[], None], reps: int, warm: bool = True) -> float:
  """Best wall time of step(i) to an idle device over reps calls (after one untimed call: compiling, first launches;
  warm=False: none, the first call timed too, for a check of the code at small sizes where time means nothing)."""
  if warm: step(0); sync()
  best = float("inf")
  for i in range(1 if warm else 0, reps + 1 if warm else max(1, reps)):
    t0 = time.perf_counter()
    step(i); sync()
    best = min(best, time.perf_counter() - t0)
  return best

class Row:
  """One model row: our time, PyTorch's (None where it has no GPU here), the largest relative difference of results."""
  def __init__(self, name: str, ours: float, theirs: float | None, err: float | None):
    self.name, self.ours, self.theirs, self.err = name, ours, theirs, err

def _torch_dev():
  """(torch, its device: 'cuda' where a GPU is, else 'cpu' for the comparison of results only), or (None, None)."""
  try: import torch
  except ImportError: return None, None
  return torch, "cuda" if torch.cuda.is_available() else "cpu"

def _rel(a: np.ndarray, b: np.ndarray) -> float:
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return float(np.abs(a - b).max() / max(1e-6, np.abs(b).max()))

def bench_resnet50(dev: str, small: bool, reps: int, rng: np.random.Generator) -> list[Row]:
  """ResNet-50 inference in half at each batch size."""
  import baregrad as bg
  s = sizes(small)["resnet50"]
  torch, tdev = _torch_dev()
  bg.manual_seed(0)
  model = resnet(bg, s["counts"], True, s["width"], s["classes"], cifar=False).to(dev).half().eval()
  tm = None
  if torch is not None:
    tm = resnet(torch, s["counts"], True, s["width"], s["classes"], cifar=False)
    copy_weights(model, tm)
    tm = tm.to(tdev).eval()
    if tdev == "cuda": tm = tm.half()
  rows = []
  for b in s["batches"]:
    xs = [rng.standard_normal((b, 3, s["hw"], s["hw"])).astype(np.float16) for _ in range(reps + 1)]
    ins = [bg.Tensor(x, device=dev).realize() for x in xs]
    outs: list = [None, 0]   # the last step's result and input
    def step(i: int) -> None:
      with bg.inference_mode(): outs[0], outs[1] = model(ins[i]).realize(), i
    ours = _best(step, lambda: _sync_bg(dev), reps, warm=not small)
    theirs = err = None
    if tm is not None:
      got = outs[0].float().numpy()
      with torch.inference_mode():
        if tdev == "cuda":
          tins = [torch.from_numpy(x).to(tdev) for x in xs]
          theirs = _best(lambda i: tm(tins[i]), torch.cuda.synchronize, reps)
          ref = tm(tins[outs[1]]).float().cpu().numpy()
        else: ref = tm(torch.from_numpy(xs[outs[1]]).float()).numpy()
      err = _rel(got, ref)
    rows.append(Row(f"resnet50 batch {b} half {s['hw']}px", ours, theirs, err))
  return rows

def bench_gpt2(dev: str, small: bool, reps: int, rng: np.random.Generator) -> list[Row]:
  """GPT-2 forward over batch x seq tokens in half: the logits."""
  import baregrad as bg
  s = sizes(small)["gpt2"]
  torch, tdev = _torch_dev()
  bg.manual_seed(0)
  model = gpt2(bg, s["layers"], s["dim"], s["heads"], s["vocab"], s["ctx"]).to(dev).half().eval()
  ids = [rng.integers(0, s["vocab"], (s["batch"], s["seq"])).astype(np.int32) for _ in range(reps + 1)]
  ins = [bg.Tensor(x, device=dev).realize() for x in ids]
  outs: list = [None, 0]   # the last step's result and input
  def step(i: int) -> None:
    with bg.inference_mode(): outs[0], outs[1] = model(ins[i]).realize(), i
  ours = _best(step, lambda: _sync_bg(dev), reps, warm=not small)
  theirs = err = None
  if torch is not None:
    tm = gpt2(torch, s["layers"], s["dim"], s["heads"], s["vocab"], s["ctx"])
    copy_weights(model, tm)
    tm = tm.to(tdev).eval()
    if tdev == "cuda": tm = tm.half()
    got = outs[0].float().numpy()
    with torch.inference_mode():
      tins = [torch.from_numpy(x).long().to(tdev) for x in ids]
      if tdev == "cuda": theirs = _best(lambda i: tm(tins[i]), torch.cuda.synchronize, reps)
      ref = tm(tins[outs[1]]).float().cpu().numpy()
    err = _rel(got, ref)
  return [Row(f"gpt2 {s['layers']}L{s['dim']} fwd {s['batch']}x{s['seq']} half", ours, theirs, err)]

def bench_resnet18_train(dev: str, small: bool, reps: int, rng: np.random.Generator) -> list[Row]:
  """A ResNet-18 (CIFAR stem) training step in float32: forward, cross-entropy, backward, SGD (momentum 0.9)."""
  import baregrad as bg
  s = sizes(small)["resnet18"]
  torch, tdev = _torch_dev()
  bg.manual_seed(0)
  model = resnet(bg, s["counts"], False, s["width"], s["classes"], cifar=True).to(dev).train()
  tm = None
  if torch is not None:
    tm = resnet(torch, s["counts"], False, s["width"], s["classes"], cifar=True)
    copy_weights(model, tm)
    tm = tm.to(tdev).train()
  opt = bg.nn.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
  w0 = model.stem[0].weight.numpy()
  xs = [rng.standard_normal((s["batch"], 3, s["hw"], s["hw"])).astype(np.float32) for _ in range(reps + 1)]
  ys = [rng.integers(0, s["classes"], s["batch"]).astype(np.int32) for _ in range(reps + 1)]
  ins = [(bg.Tensor(x, device=dev).realize(), bg.Tensor(y, device=dev).realize()) for x, y in zip(xs, ys)]
  first: list = []
  done: list[int] = []   # the batches each side stepped on, in order
  def step(i: int) -> None:
    x, y = ins[i]
    opt.zero_grad()
    loss = bg.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    loss.realize()
    done.append(i)
    if not first: first.append(float(loss.item()))
  ours = _best(step, lambda: _sync_bg(dev), reps, warm=not small)
  theirs = err = None
  if tm is not None:
    topt = torch.optim.SGD(tm.parameters(), lr=0.01, momentum=0.9)
    tins = [(torch.from_numpy(x).to(tdev), torch.from_numpy(y).long().to(tdev)) for x, y in zip(xs, ys)]
    tfirst: list = []
    tdone: list[int] = []
    def tstep(i: int) -> None:
      x, y = tins[i]
      topt.zero_grad()
      loss = torch.nn.functional.cross_entropy(tm(x), y)
      loss.backward()
      topt.step()
      tdone.append(i)
      if not tfirst: tfirst.append(float(loss.item()))
    if tdev == "cuda": theirs = _best(tstep, torch.cuda.synchronize, reps)
    else:
      for i in done: tstep(i)
    err = abs(first[0] - tfirst[0]) / max(1e-6, abs(tfirst[0]))   # the first step's loss: the same weights and batch
    if done == tdone:   # and the stem's weights after the same steps: every layer's data gradient passed through them
      ws, tws = model.stem[0].weight.numpy(), tm.stem[0].weight.detach().cpu().numpy()
      err = max(err, _rel(ws - w0, tws - w0))
  return [Row(f"resnet18 cifar train step b{s['batch']} f32", ours, theirs, err)]

BENCHES = (bench_resnet50, bench_gpt2, bench_resnet18_train)
