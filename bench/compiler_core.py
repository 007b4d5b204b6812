#!/usr/bin/env python3
"""Compiler-core workloads on a CPU device against NumPy (and PyTorch where installed), measured in one run on the
same fresh data: one line per workload, comparable with the table of issue 10.

  matmul MxKxN          A(M,K) @ B(K,N), float32; ratio = NumPy's time / ours (>1: we are faster)
  sum N                 full sum of N float32 (N = 16M+3 by default); ratio to np.sum
  relu(x*y+z) N         fused elementwise; GB/s moved (4 arrays) against NumPy's copy bandwidth (np.copyto, 2 arrays)
  conv2d ...            the two convolutions of examples/mnist_cnn.py (forward), ratio to torch.nn.functional.conv2d

Every timed run gets new random inputs (made and copied to the device before the clock starts), so no realized
result is ever reused; the median of --reps runs is reported. Through the Tensor API: the time includes building,
scheduling and launching the graph, as a user sees it. Usage:

  python bench/compiler_core.py [--dev CPU|CPU:C] [--reps 5] [--only matmul,sum,ew,conv] [--quick]
Not a timed test: numbers depend on the machine and its load (the load average is printed)."""
from __future__ import annotations
import argparse, os, statistics, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import numpy as np
from baregrad import Tensor, Device
from baregrad import functional as F

MATMULS = [(1024, 1024, 1024), (512, 512, 512), (1000, 1000, 1000), (64, 4096, 64), (511, 511, 511), (257, 257, 257),
           (1023, 1025, 1027), (1, 4096, 4096), (4096, 4096, 1), (128, 128, 128)]
BATCHED = [(16, 128, 128, 128)]
QUICK = [(512, 512, 512), (511, 511, 511), (257, 257, 257), (64, 4096, 64)]

def median_time(make, run, reps: int) -> float:
  """make() builds fresh inputs (untimed); run(inputs) is timed; median over reps after one warm-up run."""
  ts = []
  for i in range(reps + 1):
    inp = make()
    st = time.perf_counter(); run(inp); dt = time.perf_counter() - st
    if i: ts.append(dt)
  return statistics.median(ts)

def sync(dev: str) -> None: Device[dev].synchronize()

def _blas_threads():
  """A setter for the number of threads of NumPy's OpenBLAS (None where NumPy uses another BLAS)."""
  import ctypes, glob
  for lib in glob.glob(os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs", "*openblas*")):
    for fn in ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_", "openblas_set_num_threads"):
      try: f = getattr(ctypes.CDLL(lib), fn)
      except (OSError, AttributeError): continue
      f.argtypes = [ctypes.c_int]
      return f
  return None

def numpy_best(make, run, reps: int) -> tuple[float, str]:
  """NumPy's BLAS with one thread and with every core: on a loaded machine its spinning threads can be far slower
  than one, so the faster of the two is the reference."""
  setter = _blas_threads()
  if setter is None: return median_time(make, run, reps), "NumPy"
  res = []
  for n in sorted({1, os.cpu_count() or 1}):
    setter(n)
    res.append((median_time(make, run, reps), n))
  setter(os.cpu_count() or 1)
  t, n = min(res)
  return t, f"NumPy({n}t)"

def ours(dev: str, fn, *arrays: np.ndarray) -> tuple:
  ts = tuple(Tensor(a, device=dev).realize() for a in arrays)
  sync(dev)
  return ts

def line(name: str, ours_s: float, ref_s: float | None, ref: str, note: str = "") -> None:
  r = f"{ref_s / ours_s:6.2f}x {ref}" if ref_s else "   n/a"
  print(f"{name:28s} {ours_s * 1e3:10.3f} ms {(ref_s or float('nan')) * 1e3:10.3f} ms   {r}  {note}", flush=True)

def bench_matmul(dev: str, rng, reps: int, shapes, batched) -> None:
  for shp in list(shapes) + list(batched):
    b_, (M, K, N) = (shp[0], shp[1:]) if len(shp) == 4 else (None, shp)
    sa, sb = ((b_, M, K), (b_, K, N)) if b_ else ((M, K), (K, N))
    def make(): return rng.standard_normal(sa, dtype=np.float32), rng.standard_normal(sb, dtype=np.float32)
    def run_ours(ab):
      x, y = ours(dev, None, *ab)
      st = time.perf_counter(); (x @ y).realize(); sync(dev); return time.perf_counter() - st
    # the Tensor copies are made outside the clock: time only the matmul
    tt = []
    for i in range(reps + 1):
      t = run_ours(make())
      if i: tt.append(t)
    t_ours = statistics.median(tt)
    t_np, ref = numpy_best(make, lambda ab: ab[0] @ ab[1], reps)
    a, b = make()
    x, y = ours(dev, None, a, b)
    err = float(np.abs((x @ y).numpy() - a @ b).max() / max(1.0, np.abs(a @ b).max()))
    fl = 2 * M * K * N * (b_ or 1)
    name = (f"bmm {b_}x" if b_ else "matmul ") + f"{M}x{K}x{N}"
    line(name, t_ours, t_np, ref, f"{fl / t_ours / 1e9:7.1f} GFLOPS (NumPy {fl / t_np / 1e9:.1f}){'  REL ERR %.1e' % err if err > 1e-4 else ''}")

def bench_sum(dev: str, rng, reps: int, n: int) -> None:
  def make(): return rng.standard_normal(n, dtype=np.float32)
  tt = []
  for i in range(reps + 1):
    (x,) = ours(dev, None, make())
    st = time.perf_counter(); x.sum().realize(); sync(dev); t = time.perf_counter() - st
    if i: tt.append(t)
  t_ours = statistics.median(tt)
  t_np = median_time(make, lambda a: a.sum(), reps)
  a = make()
  (x,) = ours(dev, None, a)
  got, want = float(x.sum().numpy()), float(a.astype(np.float64).sum())
  line(f"sum {n}", t_ours, t_np, "np.sum", f"{4 * n / t_ours / 1e9:6.1f} GB/s  |err| {abs(got - want):.1e}")

def bench_ew(dev: str, rng, reps: int, n: int) -> None:
  def make(): return tuple(rng.standard_normal(n, dtype=np.float32) for _ in range(3))
  tt = []
  for i in range(reps + 1):
    x, y, z = ours(dev, None, *make())
    st = time.perf_counter(); (x * y + z).relu().realize(); sync(dev); t = time.perf_counter() - st
    if i: tt.append(t)
  t_ours = statistics.median(tt)
  dst = np.empty(n, np.float32)
  t_cp = median_time(lambda: rng.standard_normal(n, dtype=np.float32), lambda a: np.copyto(dst, a), reps)
  t_npew = median_time(make, lambda a: np.maximum(a[0] * a[1] + a[2], 0, out=dst), reps)
  bw, cp_bw = 16 * n / t_ours, 8 * n / t_cp
  print(f"{'relu(x*y+z) ' + str(n):28s} {t_ours * 1e3:10.3f} ms {bw / 1e9:8.1f} GB/s {bw / cp_bw:6.2f}x NumPy copy bandwidth "
        f"({cp_bw / 1e9:.1f} GB/s); NumPy's own relu(x*y+z): {t_npew / t_ours:.2f}x our time", flush=True)

def bench_conv(dev: str, rng, reps: int, bs: int) -> None:
  try: import torch
  except ImportError: torch = None
  for name, (cin, cout, hw) in (("conv2d mnist_cnn conv1", (1, 8, 28)), ("conv2d mnist_cnn conv2", (8, 16, 13))):
    def make(): return rng.standard_normal((bs, cin, hw, hw), dtype=np.float32), rng.standard_normal((cout, cin, 3, 3), dtype=np.float32)
    tt = []
    for i in range(reps + 1):
      x, w = ours(dev, None, *make())
      st = time.perf_counter(); F.conv2d(x, w).realize(); sync(dev); t = time.perf_counter() - st
      if i: tt.append(t)
    t_ours = statistics.median(tt)
    t_ref = None
    if torch is not None:
      t_ref = median_time(lambda: tuple(torch.from_numpy(a) for a in make()), lambda a: torch.nn.functional.conv2d(*a), reps)
    line(f"{name} bs{bs}", t_ours, t_ref, "PyTorch", f"{bs}x{cin}x{hw}x{hw} * {cout}x{cin}x3x3")

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--dev", default="CPU")
  ap.add_argument("--reps", type=int, default=5)
  ap.add_argument("--only", default="matmul,sum,ew,conv")
  ap.add_argument("--n", type=int, default=16 * 1024 * 1024 + 3, help="elements for sum and relu(x*y+z)")
  ap.add_argument("--shapes", default="", help="matmul shapes, e.g. 512x512x512,64x4096x64 (MxKxN)")
  ap.add_argument("--quick", action="store_true", help="a few awkward matmuls only")
  a = ap.parse_args()
  rng, dev, only = np.random.default_rng(0), a.dev, set(a.only.split(","))
  load = os.getloadavg()
  try: import torch; tv = f", PyTorch {torch.__version__} ({torch.get_num_threads()} threads)"
  except ImportError: tv = ", PyTorch not installed"
  print(f"device {dev} ({Device[dev].renderer.name} renderer), {os.cpu_count()} cores, load average {load[0]:.2f}, NumPy {np.__version__}{tv}")
  print(f"{'workload':28s} {'baregrad':>13s} {'reference':>13s}   ratio (reference time / ours)")
  shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",")] if a.shapes else (QUICK if a.quick else MATMULS)
  if "matmul" in only: bench_matmul(dev, rng, a.reps, shapes, [] if (a.quick or a.shapes) else BATCHED)
  if "sum" in only: bench_sum(dev, rng, a.reps, a.n)
  if "ew" in only: bench_ew(dev, rng, a.reps, a.n)
  if "conv" in only: bench_conv(dev, rng, a.reps, 32)
  print(f"load average at the end {os.getloadavg()[0]:.2f}")

if __name__ == "__main__": main()
