#!/usr/bin/env python3
"""GPU benchmarks (issue 14), each on fresh inputs, with PyTorch (CUDA) measured in the same run where it is importable.

  matmul 4096^3 f16, bf16, f32 (and tf32 when --tf32)   TFLOPS; kernel time from the device's own timestamps
  relu(x*y+z) over 64M f32 (fused, 16 B/element)         GB/s
  sum of 64M f32 (a grid-wide two-stage reduction)       GB/s
  ResNet conv2d 3x3, 64->64 channels, 56x56, batch 32    TFLOPS (f16 and f32)
  tiny op, eager: (x + 1) of 16 elements, realized       us per op (graph, schedule, launch, wait)
  one 32-thread kernel: launch + host wait round trip    us
  back-to-back launches of that kernel, one wait         us per kernel
  jit replay of 20 tiny kernels                          us per kernel
  models (bench/gpu_models.py): ResNet-50 inference batch 1 and 64 half, GPT-2-small forward 8x1024 half, ResNet-18
  CIFAR training step batch 256                          ms per step (--small: the same code at tiny sizes)
  (--profile: where the Python time of a launch and of a host wait goes, by function)

Fresh inputs: every timed kernel run gets new random data copied into its input buffers first (the copy is not
timed); nothing is timed twice on the same data, and no realized graph is realized again (a kernel runs again on new
inputs, as a training step would). Kernel times are the device's (timestamps written by the queue around the launch);
latency rows are host wall time. PyTorch rows time CUDA events around the same work on the same data.

Usage: python bench/gpu.py [--dev NV] [--quick] [--reps 5] [--tf32] [--profile] [--only gemm] [--warm 2]
The GEMM table of issue 32 (one command, aimed at under 5 minutes on an H100): python bench/gpu.py --only gemm --tf32
--quick: small sizes (runs on the mock GPU too: MOCKGPU=1 python bench/gpu.py --quick; tests/drivers/nv/test_bench_gpu.py).

First figures on hardware (an H100 80GB HBM3, driver 580.159.04, 2026-11-28; docs/hw/h100-580.159.04-2026-11-28.md):
the full run at 96d1aa4 is in that file. The launch host path (c47131c: QMD made once per geometry, pushbuffer
written straight, a host wait polling before it sleeps), `--only latency --reps 300`, before (0c8d868) and after
alternated twice on the same machine, PyTorch's time in brackets (same run):

  | row                               | before            | after            |
  |-----------------------------------|-------------------|------------------|
  | tiny op, eager                    | 209, 251 us (127, 97) | 133, 150 us (68, 77) |
  | launch + wait, 32 threads         | 210, 251 us (26, 29)  | 71, 84 us (25, 26)   |
  | back-to-back launches, per kernel | 102, 117 us (14, 15)  | 27, 33 us (13, 14)   |
  | jit replay, 20 kernels, per kernel| 4.03, 4.12 us (1.09)  | 3.81, 3.77 us (1.09) |
  | nv_doctor graph replay (3 launches)| 53-58 us         | 37 us            |"""
from __future__ import annotations
import argparse, os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import numpy as np
from baregrad.ir.dtype import dtypes, DType
from baregrad.hal import Device
from baregrad.engine.runner import compile_ast

def _torch():
  try:
    import torch
    return torch if torch.cuda.is_available() else None
  except Exception: return None

NP = {dtypes.float16: np.float16, dtypes.float32: np.float32, dtypes.bfloat16: np.float32}

def storage(x: np.ndarray, dt: DType) -> np.ndarray:
  """Host array -> the bytes a Buffer of dt holds (bfloat16: its upper 16 bits, rounded to nearest even)."""
  if dt == dtypes.bfloat16:
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF).astype(np.uint16)
  return np.ascontiguousarray(x, NP[dt])

class Kernels:
  """The kernels of a Tensor expression, compiled once, run on buffers refilled with fresh data before every run."""
  def __init__(self, build, inputs: list[tuple[tuple[int, ...], DType]], dev: str, replan: bool = False):
    from baregrad.tensor import Tensor
    self.dev, self.inputs = dev, inputs
    self.leaves = [Tensor(np.zeros(shape, np.float32), device=dev, dtype=dt) for shape, dt in inputs]
    self.in_bufs = [t._buffer() for t in self.leaves]
    self.items = build(*self.leaves).schedule()
    # replan: choose opts now (compiled kernels are cached by AST: a switch like allow-tf32 applies to new ones only)
    self.runners = [compile_ast(it.ast, dev, _heuristic(it.ast, dev) if replan else None) for it in self.items]
    for it in self.items:
      for b in it.bufs: b.ensure()
    self.out = self.items[-1].bufs[0].buf
  def refill(self, rng: np.random.Generator, arrays: list[np.ndarray] | None = None) -> list[np.ndarray]:
    """New random inputs (or the given ones) into the input buffers; returns them."""
    xs = arrays or [rng.standard_normal(shape, np.float32) for shape, _ in self.inputs]
    for b, x, (_, dt) in zip(self.in_bufs, xs, self.inputs): b.copyin(memoryview(storage(x, dt)).cast("B"))
    return xs
  def run(self) -> float:
    """Device time of all kernels (each bracketed by the queue's timestamps)."""
    return sum(r([b.buf for b in it.bufs], wait=True) or 0.0 for r, it in zip(self.runners, self.items))
  def result(self, shape: tuple[int, ...], dt: DType) -> np.ndarray:
    out = np.empty(int(np.prod(shape)), np.uint16 if dt == dtypes.bfloat16 else NP[dt])
    self.out.copyout(memoryview(out).cast("B"))
    if dt == dtypes.bfloat16: out = (out.astype(np.uint32) << 16).view(np.float32)
    return out.reshape(shape).astype(np.float32)

def _heuristic(ast, dev: str) -> list:
  from baregrad.codegen.kernel import Kernel
  from baregrad.codegen.heuristic import heuristic_opts
  ren = Device[dev].renderer
  return heuristic_opts(Kernel(ast, max_parallel=len(ren.global_max) or 1, gpu=ren.has_local, ren=ren), ren)

_warmed = False
WARM_S = 2.0   # main() sets it from --warm

def warm_clocks(k: Kernels, seconds: float) -> None:
  """Run k back to back until `seconds` of wall time have passed and its last three device times agree within 3%.
  A GPU idles at low clocks and ramps up under load over a second or so: without this the first timed row (half
  matmul, issue 32) measured the ramp, about 5x slower than the identical bf16 kernel timed after it."""
  global _warmed
  if _warmed or seconds <= 0: return
  k.refill(np.random.default_rng(1))
  end, ts = time.perf_counter() + seconds, []
  while time.perf_counter() < end or (len(ts) >= 3 and max(ts[-3:]) > 1.03 * min(ts[-3:])):
    ts.append(k.run())
    if time.perf_counter() > end + 4 * seconds: break   # bounded: never spins forever on a noisy clock
  _warmed = True

def timed(k: Kernels, reps: int, rng: np.random.Generator) -> tuple[float, list[np.ndarray]]:
  """Best device time over `reps` runs, each on fresh inputs; returns it and the last run's inputs."""
  warm_clocks(k, WARM_S)   # once per process, before the first timed row
  k.refill(rng); k.run()   # warm up: first launch, page mappings
  best, xs = float("inf"), []
  for _ in range(reps):
    xs = k.refill(rng)
    best = min(best, k.run())
  return best, xs

def torch_time(fn, reps: int, fresh) -> float:
  """Best CUDA-event time of fn() over reps runs, fresh() called (untimed) before each."""
  torch = _torch()
  fresh(); fn(); torch.cuda.synchronize()
  best = float("inf")
  for _ in range(reps):
    fresh(); torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); fn(); e.record(); torch.cuda.synchronize()
    best = min(best, s.elapsed_time(e) / 1e3)
  return best

def rate(x: float, unit: str) -> str:
  """x per second with a prefix that keeps a few digits (quick runs on the mock are slow)."""
  for p, s in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
    if x >= s: return f"{x / s:8.2f} {p}{unit}"
  return f"{x:8.2f} {unit}"

def count(n: int) -> str: return f"{n >> 20}M" if n % (1 << 20) == 0 else f"{n >> 10}K" if n % 1024 == 0 else str(n)

def row(name: str, ours: str, theirs: str, ratio: float | None, note: str = "") -> None:
  r = f"{ratio:6.2f}x" if ratio is not None else "     -"
  print(f"{name:34s} {ours:>18s} {theirs:>22s} {r}  {note}")

def bench_matmul(dev: str, n: int | tuple[int, int, int], dt: DType, reps: int, rng: np.random.Generator, check: bool,
                 tag: str = "") -> None:
  """(m, k) @ (k, n) in dt (n alone: a square n^3), timed on fresh inputs, beside torch's a @ b on the same shapes."""
  m, kk, nn = (n, n, n) if isinstance(n, int) else n
  k = Kernels(lambda a, b: a @ b, [((m, kk), dt), ((kk, nn), dt)], dev, replan=bool(tag))
  t, (a, b) = timed(k, reps, rng)
  fl = 2 * m * kk * nn
  if check:
    got = k.result((m, nn), dt)
    ra, rb = (storage(x, dt) for x in (a, b))
    if dt == dtypes.bfloat16: ra, rb = ((x.astype(np.uint32) << 16).view(np.float32) for x in (ra, rb))
    ref = ra.astype(np.float64) @ rb.astype(np.float64)
    err = float(np.abs(got - ref).max() / max(1e-6, np.abs(ref).max()))
    assert err < (2e-2 if dt != dtypes.float32 else 1e-4), f"matmul {dt} {m}x{kk}x{nn}: relative error {err}"
  torch, theirs, ratio = _torch(), "-", None
  if torch is not None:
    tdt = {dtypes.float16: torch.float16, dtypes.bfloat16: torch.bfloat16, dtypes.float32: torch.float32}[dt]
    ta, tb = torch.empty((m, kk), dtype=tdt, device="cuda"), torch.empty((kk, nn), dtype=tdt, device="cuda")
    def fresh(): ta.normal_(); tb.normal_()
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = bool(tag)   # the same precision on both sides
    try: tt = torch_time(lambda: ta @ tb, reps, fresh)
    finally: torch.backends.cuda.matmul.allow_tf32 = prev
    theirs, ratio = rate(fl / tt, "FLOPS"), tt / t
  opts = [f"{o.op.name}{o.amt or ''}" for o in k.runners[0].spec.opts]
  name = f"{n}^3" if isinstance(n, int) else f"{m}x{kk}x{nn}"
  row(f"matmul {name} {dt.name}{tag}", rate(fl / t, "FLOPS"), theirs, ratio, " ".join(opts))

# The GEMM table of issue 32 (--only gemm): (m, k, n) square, transformer (8x2048 tokens by 4096x4096 and 4096x11008),
# awkward (edge tiles), skinny (matrix-vector); quick: small stand-ins of each kind that the mock runs in seconds.
GEMM_SHAPES = [(2048,) * 3, (4096,) * 3, (8192,) * 3, (16384, 4096, 4096), (16384, 4096, 11008),
               (4095,) * 3, (1000,) * 3, (1023, 1025, 1027), (1, 4096, 4096), (16, 4096, 4096)]
GEMM_QUICK = [(32,) * 3, (31, 33, 35), (1, 64, 32)]

def bench_gemm_table(dev: str, quick: bool, reps: int, rng: np.random.Generator, tf32: bool) -> None:
  """Every GEMM shape in half, bf16, float32 (and tf32 when asked); results checked where NumPy does it in ~a second."""
  from baregrad.codegen.tc import set_allow_tf32
  for shape in GEMM_QUICK if quick else GEMM_SHAPES:
    m, k, n = shape
    check = m * k * n <= 1 << 36
    for dt in (dtypes.float16, dtypes.bfloat16, dtypes.float32):
      bench_matmul(dev, shape, dt, reps, rng, check)
    if tf32:
      set_allow_tf32(True)
      try: bench_matmul(dev, shape, dtypes.float32, reps, rng, False, " tf32")
      finally: set_allow_tf32(None)

def bench_elementwise(dev: str, n: int, reps: int, rng: np.random.Generator, check: bool) -> None:
  k = Kernels(lambda x, y, z: (x * y + z).relu(), [((n,), dtypes.float32)] * 3, dev)
  t, (x, y, z) = timed(k, reps, rng)
  if check: np.testing.assert_allclose(k.result((n,), dtypes.float32), np.maximum(x * y + z, 0), rtol=1e-6, atol=1e-6)
  moved = 16 * n
  torch, theirs, ratio = _torch(), "-", None
  if torch is not None:
    tx, ty, tz = (torch.empty(n, device="cuda") for _ in range(3))
    def fresh(): tx.normal_(); ty.normal_(); tz.normal_()
    tt = torch_time(lambda: torch.relu(tx * ty + tz), reps, fresh)
    theirs, ratio = rate(moved / tt, "B/s"), tt / t
  row(f"relu(x*y+z) {count(n)} f32", rate(moved / t, "B/s"), theirs, ratio, f"{len(k.items)} kernel(s)")

def bench_sum(dev: str, n: int, reps: int, rng: np.random.Generator, check: bool) -> None:
  k = Kernels(lambda x: x.sum(), [((n,), dtypes.float32)], dev)
  t, (x,) = timed(k, reps, rng)
  if check: np.testing.assert_allclose(k.result((1,), dtypes.float32)[0], x.astype(np.float64).sum(), rtol=1e-3, atol=1e-2 * np.sqrt(n))
  moved = 4 * n
  torch, theirs, ratio = _torch(), "-", None
  if torch is not None:
    tx = torch.empty(n, device="cuda")
    tt = torch_time(lambda: tx.sum(), reps, lambda: tx.normal_())
    theirs, ratio = rate(moved / tt, "B/s"), tt / t
  shapes = " + ".join(r.spec.name for r in k.runners)
  row(f"sum {count(n)} f32", rate(moved / t, "B/s"), theirs, ratio, f"{len(k.items)} kernels: {shapes}")

def bench_conv(dev: str, b: int, c: int, hw: int, dt: DType, reps: int, rng: np.random.Generator, check: bool) -> None:
  import baregrad.tensor.functional as F
  k = Kernels(lambda x, w: F.conv2d(x, w, padding=1), [((b, c, hw, hw), dt), ((c, c, 3, 3), dt)], dev)
  t, (x, w) = timed(k, reps, rng)
  fl = 2 * b * c * c * hw * hw * 9
  if check:
    try:
      import torch
      ref = torch.nn.functional.conv2d(torch.tensor(storage(x, dt).astype(np.float32)), torch.tensor(storage(w, dt).astype(np.float32)), padding=1).numpy()
      got = k.result(ref.shape, dt)
      err = float(np.abs(got - ref).max() / max(1e-6, np.abs(ref).max()))
      assert err < (2e-2 if dt != dtypes.float32 else 1e-4), f"conv2d {dt}: relative error {err}"
    except ImportError: pass
  torch, theirs, ratio = _torch(), "-", None
  if torch is not None:
    tdt = {dtypes.float16: torch.float16, dtypes.float32: torch.float32}[dt]
    tx, tw = torch.empty((b, c, hw, hw), dtype=tdt, device="cuda"), torch.empty((c, c, 3, 3), dtype=tdt, device="cuda")
    def fresh(): tx.normal_(); tw.normal_()
    tt = torch_time(lambda: torch.nn.functional.conv2d(tx, tw, padding=1), reps, fresh)
    theirs, ratio = rate(fl / tt, "FLOPS"), tt / t
  opts = [f"{o.op.name}{o.amt or ''}" for o in k.runners[-1].spec.opts]
  row(f"conv2d {b}x{c}x{hw}x{hw} 3x3 {dt.name}", rate(fl / t, "FLOPS"), theirs, ratio, f"{len(k.items)} kernel(s): " + " ".join(opts))

def bench_latency(dev: str, reps: int, rng: np.random.Generator, profile: bool) -> None:
  from baregrad.tensor import Tensor
  from baregrad import jit
  torch = _torch()
  # tiny op, eager: a fresh 16-element tensor each time, (x + 1) realized
  xs = [Tensor(rng.standard_normal(16).astype(np.float32), device=dev).realize() for _ in range(reps + 3)]
  for x in xs[:3]: (x + 1).realize()
  Device[dev].synchronize()
  st = time.perf_counter()
  for x in xs[3:]: (x + 1).realize()
  Device[dev].synchronize()
  eager = (time.perf_counter() - st) / reps
  theirs = None
  if torch is not None:
    tx = [torch.randn(16, device="cuda") for _ in range(reps)]
    torch.cuda.synchronize(); st = time.perf_counter()
    for x in tx: x + 1
    torch.cuda.synchronize(); theirs = (time.perf_counter() - st) / reps
  row("tiny op, eager (x + 1, 16 elems)", f"{eager * 1e6:8.1f} us/op", f"{theirs * 1e6:8.1f} us/op" if theirs else "-",
      theirs / eager if theirs else None, "target <= 20 us")
  # one 32-thread kernel: launch + host wait
  k = Kernels(lambda x: x + 1, [((32,), dtypes.float32)], dev)
  k.refill(rng)
  r, bufs = k.runners[0], [b.buf for b in k.items[0].bufs]
  for _ in range(3): r(bufs, wait=True)
  st = time.perf_counter()
  for _ in range(reps): r(bufs, wait=True)
  rt = (time.perf_counter() - st) / reps
  if torch is not None:
    t32 = torch.randn(32, device="cuda"); torch.cuda.synchronize(); st = time.perf_counter()
    for _ in range(reps): t32 + 1; torch.cuda.synchronize()
    theirs = (time.perf_counter() - st) / reps
  row("launch + wait, 32 threads", f"{rt * 1e6:8.1f} us", f"{theirs * 1e6:8.1f} us" if theirs else "-", theirs / rt if theirs else None, "target <= 10 us")
  # back-to-back launches, one wait at the end
  for _ in range(3): r(bufs)
  Device[dev].synchronize(); st = time.perf_counter()
  for _ in range(reps): r(bufs)
  Device[dev].synchronize(); b2b = (time.perf_counter() - st) / reps
  if torch is not None:
    torch.cuda.synchronize(); st = time.perf_counter()
    for _ in range(reps): t32 + 1
    torch.cuda.synchronize(); theirs = (time.perf_counter() - st) / reps
  row("back-to-back launches", f"{b2b * 1e6:8.1f} us/kernel", f"{theirs * 1e6:8.1f} us/kernel" if theirs else "-",
      theirs / b2b if theirs else None, "target <= 5 us")
  # jit replay of 20 tiny kernels, each call on a fresh input
  nk = 20
  @jit
  def f(t):
    for _ in range(nk): t = (t + 1).contiguous()
    return t
  ins = [Tensor(rng.standard_normal(16).astype(np.float32), device=dev).realize() for _ in range(reps + 3)]
  for x in ins[:3]: f(x)
  Device[dev].synchronize(); st = time.perf_counter()
  for x in ins[3:]: f(x)
  Device[dev].synchronize(); per = (time.perf_counter() - st) / reps / nk
  theirs = None
  if torch is not None:
    g, sx = torch.cuda.CUDAGraph(), torch.randn(16, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
      y = sx
      for _ in range(3): y = sx + 1
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
      y = sx
      for _ in range(nk): y = y + 1
    torch.cuda.synchronize(); st = time.perf_counter()
    for _ in range(reps): g.replay()
    torch.cuda.synchronize(); theirs = (time.perf_counter() - st) / reps / nk
  row(f"jit replay ({nk} kernels a call)", f"{per * 1e6:8.2f} us/kernel", f"{theirs * 1e6:8.2f} us/kernel" if theirs else "-",
      theirs / per if theirs else None, "target <= 1 us; PyTorch: CUDA graph")
  if profile:
    import cProfile, pstats
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(reps): r(bufs, wait=True)
    pr.disable()
    print(f"\nprofile of {reps} launch + wait round trips (Python time by function, top 15 by own time):")
    pstats.Stats(pr).sort_stats("tottime").print_stats(15)

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--dev", default="NV")
  ap.add_argument("--quick", action="store_true", help="small sizes (the mock GPU runs them)")
  ap.add_argument("--reps", type=int, default=0)
  ap.add_argument("--warm", type=float, default=None, help="seconds to run the first kernel before timing (clock ramp; default 2, 0 with --quick)")
  ap.add_argument("--tf32", action="store_true", help="also time float32 matmul on tf32 tensor cores (ALLOW_TF32)")
  ap.add_argument("--profile", action="store_true", help="where the Python time of a launch goes")
  ap.add_argument("--only", default="", help="comma-separated sections: matmul,ew,sum,conv,latency,models; gemm (issue 32's shape table, "
                  "not in the default run)")
  ap.add_argument("--small", action="store_true", help="the models section at tiny sizes, every other at --quick's (the mock GPU runs them)")
  args = ap.parse_args()
  dev = Device.canonicalize(args.dev)
  global WARM_S
  args.quick = args.quick or args.small
  WARM_S = args.warm if args.warm is not None else (0.0 if args.quick else 2.0)
  reps = args.reps or (2 if args.quick else 5)
  rng = np.random.default_rng(0)
  ren = Device[dev].renderer
  torch = _torch()
  print(f"device {dev}: {ren.name} renderer {getattr(ren, 'arch', '')}, {ren.compute_units or '?'} compute units; "
        f"PyTorch CUDA: {'yes (' + torch.cuda.get_device_name() + ')' if torch is not None else 'not importable here, no ratios'}")
  print(f"{'':34s} {'baregrad':>18s} {'PyTorch':>22s}  ratio (PyTorch time / ours: >1 means faster)")
  only = set(args.only.split(",")) if args.only else {"matmul", "ew", "sum", "conv", "latency", "models"}
  q = args.quick
  check = True
  if "matmul" in only:
    for dt in (dtypes.float16, dtypes.bfloat16, dtypes.float32):
      bench_matmul(dev, 64 if q else 4096, dt, reps, rng, check)
    if args.tf32:
      from baregrad.codegen.tc import set_allow_tf32
      set_allow_tf32(True)
      try: bench_matmul(dev, 64 if q else 4096, dtypes.float32, reps, rng, False, " tf32")
      finally: set_allow_tf32(None)
  if "gemm" in only: bench_gemm_table(dev, q, reps, rng, args.tf32)
  if "ew" in only: bench_elementwise(dev, (1 << 16) if q else (64 << 20), reps, rng, check)
  if "sum" in only: bench_sum(dev, (1 << 16) + 3 if q else (64 << 20), reps, rng, check)
  if "conv" in only:
    for dt in (dtypes.float16, dtypes.float32):
      bench_conv(dev, *((1, 16, 8) if q else (32, 64, 56)), dt, reps, rng, check)
  if "latency" in only: bench_latency(dev, args.reps or (10 if q else 300), rng, args.profile)
  if "models" in only: bench_models(dev, args.small or args.quick, reps, rng)

def bench_models(dev: str, small: bool, reps: int, rng: np.random.Generator) -> None:
  """The models of bench/gpu_models.py (ResNet-50 inference, GPT-2-small forward, ResNet-18 CIFAR training step), time
  per step beside PyTorch eager's; `err` compares the results (PyTorch on the CPU where it has no GPU here)."""
  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
  import gpu_models
  for bench in gpu_models.BENCHES:
    for r in bench(dev, small, reps, rng):
      note = f"err {r.err:.1e}" if r.err is not None else ""
      row(r.name, f"{r.ours * 1e3:8.2f} ms/step", f"{r.theirs * 1e3:8.2f} ms/step" if r.theirs else "-",
          r.theirs / r.ours if r.theirs else None, note)

if __name__ == "__main__":
  main()
