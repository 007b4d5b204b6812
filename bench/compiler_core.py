#!/usr/bin/env python3
"""Compiler-core workloads on a CPU device against NumPy and PyTorch, measured in one run on the same fresh data: one
line per workload, comparable with the table of issue 10.

  matmul MxKxN          A(M,K) @ B(K,N) float32 (bmm: batched); reference NumPy's BLAS (the faster of 1 thread and all)
  sum N                 full sum of N float32 (N = 16M+3 by default); reference np.sum; and column sums x.sum(0)
  relu(x*y+z) N         fused elementwise; bandwidth (4 arrays) against NumPy's copy bandwidth (np.copyto, 2 arrays)
  transpose             x.T.contiguous() of 2048x1024 and 256x4096 float32 (with ew); reference PyTorch's same call
  conv2d mnist_cnn      the two convolutions of examples/mnist_cnn.py (forward); reference torch conv2d (faster of 1/all threads)
  math N                exp, log, sin, sigmoid, tanh and GELU of 4M float32 (transcendental functions), exp and log of
                        float64, float32 pow; reference PyTorch's same function (faster of 1/all threads), NumPy's
                        (libm, one thread) on the line
  gather                an embedding lookup (4096 rows of a 50000x256 table, w[i]), torch.gather along each axis of a
                        256x512x64 tensor and topk(8) of 2048x1024 rows; reference PyTorch's same call (faster of 1/all threads)
  README job            python3 examples/mnist_mlp.py on an empty compile cache: first step and whole job, with the CPU
                        time the job's process spent compiling (codegen + LLVM)

Every timed run gets new random inputs, made and copied to the device before the clock starts (no realized result is
ever reused); reported: the median of --reps runs. "wall" is what a user sees through the Tensor API (build, schedule,
launch, wait); "kernel" sums the device time of the kernels the same operation launched (measured in a second pass, each
launch waiting for its timestamps), so codegen quality and Python overhead can be told apart. Ratios: reference time /
ours (> 1: we are faster). Usage:

  python bench/compiler_core.py [--dev CPU|CPU:C] [--reps 5] [--only matmul,sum,ew,conv,math,gather,job] [--shapes 512x512x512,...]
Not a timed test: numbers depend on the machine and its load (the load average is printed at the start and the end).

Packed operands, chunk ranges, whole-register rows (main at f2a08a0 -> 78dcb8e, DEV=CPU, the 2-core Zen 2 VM; two rounds
each, before and after alternated, this script on both sides; ratios: reference time / ours, kernel time in brackets):

  | workload              | before                     | after                      |
  |-----------------------|----------------------------|----------------------------|
  | matmul 1024^3         | 0.61, 1.00 (0.65, 1.04)    | 0.67, 1.08 (0.90, 1.04)    |
  | matmul 1000^3         | 0.68, 0.68 (0.67, 0.77)    | 0.97, 1.19 (0.95, 1.29)    |
  | matmul 511^3          | 0.57, 0.61 (0.65, 0.65)    | 0.69, 0.59 (0.86, 0.98)    |
  | matmul 1023x1025x1027 | 0.64, 0.54 (0.68, 0.54)    | 0.69, 0.85 (0.85, 0.88)    |
  | matmul 1x4096x4096    | 0.47, 0.62 (0.54, 0.64)    | 0.78, 0.67 (0.86, 0.81)    |
  | conv2d mnist conv2    | 0.33, 0.37 (0.62, 0.81)    | 0.76, 0.36 (1.82, 1.06)    |

Non-temporal stores for outputs past the last-level cache (main at 9363596 -> this round, same VM; before and after
alternated, this script on both sides, `--only ew,sum`; an in-process A/B of the kernel alone, 12 alternated rounds of
fresh inputs each side: plain stores min 8.4 ms, median 13.2; non-temporal min 6.9, median 8.9):

  | workload              | before (wall, kernel in brackets)        | after                                    |
  |-----------------------|------------------------------------------|------------------------------------------|
  | relu(x*y+z) 16M+3     | 0.92, 0.95, 1.07 (1.40, 1.12, 1.18)      | 1.97, 1.33, 1.73 (2.02, 2.06, 1.91)      |
  | same, 40 min later    | 1.10, 1.48, 1.24 (1.47, 2.18, 1.26)      | 1.20, 2.02, 1.59 (1.34, 2.17, 2.60)      |
  | sum 16M+3 (unchanged) | 1.04, 0.90, 1.02; 0.95, 0.85, 0.99       | 0.74, 0.97, 0.97; 0.95, 0.94, 1.03       |

Long reductions split over the threads (main at b2895d8 -> this round, same VM; `--only sum`, this script on both
sides, before and after alternated; codegen/gridreduce.py now splits a CPU reduction of >= 2M elements with few
outputs into partials over aligned chunks, the tail reduced with them in stage 2):

  | workload              | before (wall, kernel in brackets)        | after                                    |
  |-----------------------|------------------------------------------|------------------------------------------|
  | sum 16M+3             | 0.94x (1.20x), 15.0 GB/s in kernels      | 1.66x, 1.86x, 1.65x (1.96x-2.10x), 26-27 GB/s |
  | sum 4M+3 (--n)        | 0.99x (1.28x), 13.7 GB/s                 | 1.44x (2.40x), 23.4 GB/s                 |
  | sum 16M+3, at 52e1b2e | 0.98x, 1.11x (1.18x, 1.12x), err 6.9e-2  | 1.49x, 1.58x (1.68x, 2.18x), err 1.5e-3  |

(52e1b2e: the split after the review's fixes, several reduced axes and broadcast views; |err| against a float64 sum:
the one-thread kernel's 64 accumulators each add 262K values, a partial's 32K.)

The VM's timings swing 2-4x between minutes and between processes (a 2-thread kernel's worker thread is sometimes late
by most of a kernel: mnist_cnn's conv1 kernel ran 0.17 or 0.7-0.8 ms in phases of several launches, in both columns);
compare within a row and repeat a run before trusting one number.
float32 exp2, log2 and sin as vector code (codegen/renderer/cpumath.py) instead of a libm call per element (main at
5dcd773 -> this round, DEV=CPU, same VM; `--only math`, this script on both sides, before and after alternated twice;
ratios: PyTorch's time / ours, wall and kernel in brackets; PyTorch's time is measured in the same run):

  | workload (4M float32) | before                      | after                       | speedup of the wall |
  |-----------------------|-----------------------------|-----------------------------|---------------------|
  | exp                   | 0.43, 0.27 (0.41, 0.31)     | 3.11, 1.98 (3.29, 2.28)     | 6.0x, 6.3x          |
  | log                   | 0.33, 0.34 (0.28, 0.47)     | 1.44, 1.42 (1.56, 1.86)     | 4.2x, 2.9x          |
  | sin                   | 0.14, 0.16 (0.19, 0.20)     | 2.03, 2.49 (2.58, 3.37)     | 13.7x, 11.4x        |
  | sigmoid               | 0.22, 0.39 (0.25, 0.35)     | 0.81, 0.91 (1.11, 1.23)     | 3.4x, 2.9x          |
  | tanh                  | 0.43, 0.64 (0.47, 0.65)     | 1.69, 1.62 (1.86, 1.94)     | 3.8x, 3.2x          |
  | gelu (erf form)       | 0.46, 0.19 (0.33, 0.24)     | 0.65, 0.81 (0.80, 0.99)     | 2.4x, 4.4x          |

Gathers as loads at each index (a GATHER node: a LOAD whose index along one axis is a value) instead of a one-hot
compare and a sum over the source's whole extent (main at bdba7a8 -> this round, DEV=CPU, same VM; `--only gather
--reps 2`, this script on both sides, before once between two afters; ratios: PyTorch's time / ours, wall):

  | workload                             | before: wall ms (ratio) | after: wall ms (ratio)             |
  |--------------------------------------|-------------------------|------------------------------------|
  | embedding 4096 rows of 50000x256     | 2018 (0.001x)           | 1.87, 1.68 (2.24x, 2.00x)          |
  | gather dim 0 of 256x512x64 (8M)      | 191 (1.02x)             | 121, 119 (1.41x, 1.58x)            |
  | gather dim 1                         | 170 (0.30x)             | 29.5, 31.3 (1.64x, 2.70x)          |
  | gather dim 2                         | 30.4 (0.85x)            | 20.3, 33.2 (1.84x, 0.72x)          |
  | topk 8 of 2048x1024 (selection passes; a later round, before = 5dcd773) | 269 (0.02x) | 19.8, 33.4 (0.21x, 0.19x) |

A transpose takes a square tile of one register's lanes along both axes (codegen/cpu_heuristic.py; main at 5dcd773 ->
this round, DEV=CPU, same VM; `--only ew --n 4194304`, this script on both sides, alternated twice; ratios: PyTorch's
time / ours, kernel in brackets):

  | workload               | before                        | after                         |
  |------------------------|-------------------------------|-------------------------------|
  | transpose 2048x1024    | 11.9, 9.5 ms (0.38x, 0.33x)   | 1.78, 2.29 ms (1.57x, 1.86x)  |
  | transpose 256x4096     | 2.7, 4.9 ms (0.80x, 0.31x)    | 1.10, 1.09 ms (1.73x, 2.17x)  |

Row-streamed reductions: a vector-matrix product with a row-major matrix and a column sum add 4 rows per pass into a
chunk of columns per core (codegen/rowstream.py) instead of walking every row for each 128-column strip (main at 3279fd3
-> this round, DEV=CPU, a 2-core Zen 4 VM (AVX-512, a different machine from the rounds above); `--only matmul,sum
--shapes ...`, this script on both sides, before and after alternated twice; ratios: reference time / ours, wall and
kernel in brackets; the VM swings up to 2x between minutes, compare within a row):

  | workload              | before                                | after                                 |
  |-----------------------|---------------------------------------|---------------------------------------|
  | matmul 1x4096x4096    | 0.55, 0.52 (0.61, 0.61)               | 0.80, 0.84 (0.91, 0.93)               |
  | matmul 2x2048x4096    | 1.40, 1.62 (1.62, 1.59)               | 1.84, 2.02 (2.10, 2.44)               |
  | matmul 1x2048x2048    | 0.72, 0.73 (1.01, 0.69)               | 0.85, 0.61 (1.11, 0.87)               |
  | sum(0) 4096x4096      | 0.93, 0.40 (1.10, 0.72) 22, 12 GB/s   | 1.64, 1.41 (1.79, 1.53) 32, 27 GB/s   |
  | sum(0) 16384x1024     | 1.06, 0.54 (1.14, 0.58)               | 1.33, 1.09 (1.45, 1.30)               |
  | sum(0) 65536x64       | 1.36, 0.98 (1.64, 1.20)               | 1.21, 1.26 (1.79, 1.55)               |

(A 4 MiB matrix, 1x1024x1024, was no faster streamed, and its split into row partials added a launch: matrices under
8 MiB keep the strips.)

float64 EXP2 and LOG2 as vector code too (codegen/renderer/cpumath.py; float32 pow computes exp2(y log2|x|) in float64)
instead of a libm call per lane (main at 3279fd3 -> this round, same Zen 4 VM; `--only math`, this script on both
sides, alternated twice; ms, wall; PyTorch's time in the same run swung 3.6-13 ms between runs, so the ratio column is
ours before/after in the same minutes):

  | workload (4M)         | before          | after           | speedup of the wall |
  |-----------------------|-----------------|-----------------|---------------------|
  | exp float64           | 7.7, 10.1       | 2.3, 2.6        | 3.4x, 3.9x          |
  | log float64           | 12.0, 8.1       | 3.9, 3.9        | 3.1x, 2.1x          |
  | pow float32 (x ** y)  | 19.9, 20.3      | 10.3, 10.0      | 1.9x, 2.0x          |

Pool workers spin ~10 ms after a launch (drivers/cpu_pool.py SPIN_US) instead of 20000 pauses (~0.5 ms here): each
timed run here follows an idle gap (new inputs made and copied), after which a sleeping worker woke 0.1-0.5 ms late in
this VM (main at f6cfac9 with the old spin -> the new one, same VM, `--only matmul,conv --shapes 128x128x128,257x257x257,
16x128x128x128 --reps 7`, alternated; ratios: reference time / ours, wall, kernel in brackets):

  | workload              | before                               | after                                |
  |-----------------------|--------------------------------------|--------------------------------------|
  | matmul 128x128x128    | 0.20, 0.26 (0.64, 0.63)              | 0.23, 0.35 (1.05, 1.04)              |
  | matmul 257x257x257    | 0.16, 0.38 (0.70, 0.24)              | 0.61, 1.06 (0.91, 1.36)              |
  | bmm 16x128x128x128    | 0.80, 0.43 (1.13, 0.92)              | 1.35, 0.87 (1.56, 1.42)              |
  | conv2d mnist conv1    | 0.22, 2.03 (0.35, 9.79)              | 1.73, 0.92 (7.17, 5.27)              |
  | conv2d mnist conv2    | 0.20, 0.26 (0.25, 0.31)              | 0.96, 0.71 (2.13, 1.92)              |

(128^3 stays short of 0.5x: its ~30 us kernel is NumPy's time, the ~90 us of Python around one eager matmul is not.)
"""
from __future__ import annotations
import argparse, os, re, statistics, subprocess, sys, tempfile, time
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
import numpy as np
from baregrad import Tensor, Device, functional as F
from baregrad.helpers import prod

MATMULS = [(1024, 1024, 1024), (512, 512, 512), (1000, 1000, 1000), (64, 4096, 64), (511, 511, 511), (257, 257, 257),
           (1023, 1025, 1027), (1, 4096, 4096), (4096, 4096, 1), (128, 128, 128)]
BATCHED = [(16, 128, 128, 128)]

def sync(dev: str) -> None: Device[dev].synchronize()

class KernelClock:
  """Within the block, every kernel launch waits for its device timestamps and their time is summed in `t`."""
  def __enter__(self) -> KernelClock:
    from baregrad.engine import runner
    self.cls, self.orig, self.t = runner.CompiledRunner, runner.CompiledRunner.__call__, 0.0
    clock = self
    def call(r, bufs, vals=None, wait=False):
      t = clock.orig(r, bufs, vals, wait=True)
      clock.t += t or 0.0
      return t
    self.cls.__call__ = call
    return self
  def __exit__(self, *exc: object) -> None: self.cls.__call__ = self.orig

def measure(dev: str, make, op, reps: int) -> tuple[float, float]:
  """(median wall seconds, median kernel seconds) of op(*tensors) on fresh inputs from make() (numpy arrays)."""
  walls, kerns = [], []
  settle()
  for i in range(2 * reps + 1):
    ts = [Tensor(a, device=dev).realize() for a in make()]
    sync(dev)
    if i <= reps:
      st = time.perf_counter(); op(*ts).realize(); sync(dev); t = time.perf_counter() - st
      if i: walls.append(t)
    else:
      with KernelClock() as kc: op(*ts).realize(); sync(dev)
      kerns.append(kc.t)
  return statistics.median(walls), statistics.median(kerns)

def median_time(make, run, reps: int) -> float:
  ts = []
  for i in range(reps + 1):
    inp = make()
    st = time.perf_counter(); run(inp); dt = time.perf_counter() - st
    if i: ts.append(dt)
  return statistics.median(ts)

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

def settle() -> None:
  """Let thread pools that spin after their last call (OpenBLAS's, PyTorch's OpenMP threads, ours) go to sleep before
  the next timed run: a 2-core box has no core to spare for them (a 512^3 matmul timed right after NumPy's took 4.7 ms
  instead of 2.6)."""
  time.sleep(0.25)

def best_threads(setter, make, run, reps: int, name: str) -> tuple[float, str]:
  """The reference with every core and with one thread: on a loaded machine a library's spinning threads can be far
  slower than one, so the faster of the two is the reference. One thread runs last and stays set: the library's other
  threads are idle by the time the next workload is timed."""
  settle()
  if setter is None: return median_time(make, run, reps), name
  res = []
  for n in sorted({1, os.cpu_count() or 1}, reverse=True):
    setter(n)
    res.append((median_time(make, run, reps), n))
  t, n = min(res)
  settle()
  return t, f"{name}({n}t)"

def line(name: str, wall: float, kern: float, ref: float | None, refname: str, note: str = "") -> None:
  r = f"{ref / wall:6.2f}x  {ref / kern:6.2f}x" if ref else "   n/a      n/a"
  print(f"{name:26s} {wall * 1e3:9.3f} {kern * 1e3:9.3f} {(ref or float('nan')) * 1e3:9.3f}  {r}  {refname:12s} {note}", flush=True)

def bench_matmul(dev: str, rng, reps: int, shapes) -> None:
  setter = _blas_threads()
  for shp in shapes:
    b_, (M, K, N) = (shp[0], shp[1:]) if len(shp) == 4 else (None, shp)
    sa, sb = ((b_, M, K), (b_, K, N)) if b_ else ((M, K), (K, N))
    def make(): return rng.standard_normal(sa, dtype=np.float32), rng.standard_normal(sb, dtype=np.float32)
    wall, kern = measure(dev, make, lambda x, y: x @ y, reps)
    t_np, ref = best_threads(setter, make, lambda ab: ab[0] @ ab[1], reps, "NumPy")
    a, b = make()
    err = float(np.abs((Tensor(a, device=dev) @ Tensor(b, device=dev)).numpy() - a @ b).max() / max(1.0, np.abs(a @ b).max()))
    fl = 2 * M * K * N * (b_ or 1)
    line((f"bmm {b_}x" if b_ else "matmul ") + f"{M}x{K}x{N}", wall, kern, t_np, ref,
         f"{fl / kern / 1e9:6.1f} GFLOPS in kernels (ref {fl / t_np / 1e9:.1f}){'  REL ERR %.1e' % err if err > 1e-4 else ''}")

def bench_sum(dev: str, rng, reps: int, n: int) -> None:
  def make(): return (rng.standard_normal(n, dtype=np.float32),)
  wall, kern = measure(dev, make, lambda x: x.sum(), reps)
  t_np = median_time(make, lambda a: a[0].sum(), reps)
  a = make()[0]
  got, want = float(Tensor(a, device=dev).sum().numpy()), float(a.astype(np.float64).sum())
  line(f"sum {n}", wall, kern, t_np, "np.sum", f"{4 * n / kern / 1e9:5.1f} GB/s in kernels  |err| {abs(got - want):.1e}")
  # column sums (a bias gradient's sum over the batch): a reduction down the rows into contiguous outputs
  for shape in ((4096, 4096), (16384, 1024), (65536, 64)):
    def makec(shape=shape): return (rng.standard_normal(shape, dtype=np.float32),)
    wall, kern = measure(dev, makec, lambda x: x.sum(0), reps)
    t_np = median_time(makec, lambda a: a[0].sum(0), reps)
    line(f"sum(0) {shape[0]}x{shape[1]}", wall, kern, t_np, "np.sum", f"{4 * shape[0] * shape[1] / kern / 1e9:5.1f} GB/s in kernels")

def bench_ew(dev: str, rng, reps: int, n: int) -> None:
  def make(): return tuple(rng.standard_normal(n, dtype=np.float32) for _ in range(3))
  wall, kern = measure(dev, make, lambda x, y, z: (x * y + z).relu(), reps)
  dst = np.empty(n, np.float32)
  t_cp = median_time(lambda: rng.standard_normal(n, dtype=np.float32), lambda a: np.copyto(dst, a), reps)
  t_npew = median_time(make, lambda a: np.maximum(a[0] * a[1] + a[2], 0, out=dst), reps)
  # bandwidth ratio: ours moves 4 arrays, the copy 2; as a time ratio: (copy time * 2) / our time
  line(f"relu(x*y+z) {n}", wall, kern, 2 * t_cp, "copy bw", f"{16 * n / kern / 1e9:5.1f} GB/s in kernels, copy {8 * n / t_cp / 1e9:.1f} GB/s; "
       f"NumPy's own relu(x*y+z) {t_npew * 1e3:.1f} ms")
  try: import torch
  except ImportError: torch = None
  for shape in ((2048, 1024), (256, 4096)):
    def maket(shape=shape): return (rng.standard_normal(shape, dtype=np.float32),)
    wall, kern = measure(dev, maket, lambda x: x.T.contiguous(), reps)
    t_ref, refname = None, "PyTorch"
    if torch is not None:
      t_ref, refname = best_threads(torch.set_num_threads, lambda: torch.from_numpy(maket()[0]), lambda a: a.T.contiguous(), reps, "PyTorch")
    line(f"transpose {shape[0]}x{shape[1]}", wall, kern, t_ref, refname, f"{8 * prod(shape) / kern / 1e9:5.1f} GB/s in kernels")

def bench_conv(dev: str, rng, reps: int, bs: int) -> None:
  try: import torch
  except ImportError: torch = None
  for name, (cin, cout, hw) in (("conv2d mnist_cnn conv1", (1, 8, 28)), ("conv2d mnist_cnn conv2", (8, 16, 13))):
    def make(): return rng.standard_normal((bs, cin, hw, hw), dtype=np.float32), rng.standard_normal((cout, cin, 3, 3), dtype=np.float32)
    wall, kern = measure(dev, make, F.conv2d, reps)
    t_ref, refname = None, "PyTorch"
    if torch is not None:
      t_ref, refname = best_threads(torch.set_num_threads, lambda: tuple(torch.from_numpy(a) for a in make()),
                                    lambda a: torch.nn.functional.conv2d(*a), reps, "PyTorch")
    line(f"{name}", wall, kern, t_ref, refname, f"{bs}x{cin}x{hw}x{hw} * {cout}x{cin}x3x3")

MATH = [("exp", lambda t: t.exp(), "exp", np.exp), ("log", lambda t: t.log(), "log", np.log), ("sin", lambda t: t.sin(), "sin", np.sin),
        ("sigmoid", lambda t: t.sigmoid(), "sigmoid", lambda a: 1 / (1 + np.exp(-a))), ("tanh", lambda t: t.tanh(), "tanh", np.tanh),
        ("gelu", lambda t: t.gelu(), None, None)]

def bench_math(dev: str, rng, reps: int, n: int = 1 << 22) -> None:
  """Transcendental functions: inputs in (0.5, 4.5) (log's domain; sin's and tanh's curved part)."""
  try: import torch
  except ImportError: torch = None
  for name, ours, tname, npf in MATH:
    def make(): return (rng.uniform(0.5, 4.5, n).astype(np.float32),)
    wall, kern = measure(dev, make, ours, reps)
    t_ref, refname = None, "PyTorch"
    if torch is not None:
      tf = getattr(torch, tname) if tname is not None else torch.nn.functional.gelu
      t_ref, refname = best_threads(torch.set_num_threads, lambda: torch.from_numpy(make()[0]), tf, reps, "PyTorch")
    note = f"NumPy {median_time(make, lambda a: npf(a[0]), reps) * 1e3:.1f} ms" if npf is not None else ""
    line(f"{name} {n}", wall, kern, t_ref, refname, note)
  # float64 exp and log (vector code, cpumath's float64 helpers) and float32 pow (exp2(y log2|x|) computed in float64)
  for name, ours, tf, npf, dt in (("exp float64", lambda t: t.exp(), "exp", np.exp, np.float64),
                                  ("log float64", lambda t: t.log(), "log", np.log, np.float64),
                                  ("pow float32", lambda t: t ** (t * 0.5), None, lambda a: a ** (a * np.float32(0.5)), np.float32)):
    def make(dt=dt): return (rng.uniform(0.5, 4.5, n).astype(dt),)
    wall, kern = measure(dev, make, ours, reps)
    t_ref, refname = None, "PyTorch"
    if torch is not None:
      f = getattr(torch, tf) if tf is not None else (lambda a: a ** (a * 0.5))
      t_ref, refname = best_threads(torch.set_num_threads, lambda dt=dt: torch.from_numpy(make(dt)[0]), f, reps, "PyTorch")
    line(f"{name} {n}", wall, kern, t_ref, refname, f"NumPy {median_time(make, lambda a: npf(a[0]), reps) * 1e3:.1f} ms")

def bench_gather(dev: str, rng, reps: int) -> None:
  """Gathers: an embedding lookup and torch.gather along each axis (fresh indices and tables every run)."""
  try: import torch
  except ImportError: torch = None
  V, D, N = 50000, 256, 4096
  def make_emb(): return rng.standard_normal((V, D), dtype=np.float32), rng.integers(0, V, N)
  cases = [(f"embedding {N} of {V}x{D}", make_emb, lambda w, i: w[i], lambda a: a[0][a[1]])]
  shape = (256, 512, 64)
  for d in range(3):
    def make(d=d): return rng.standard_normal(shape, dtype=np.float32), rng.integers(0, shape[d], shape)
    cases.append((f"gather dim {d} {'x'.join(map(str, shape))}", make, lambda x, i, d=d: x.gather(d, i), lambda a, d=d: torch.gather(a[0], d, a[1])))
  cases.append(("topk 8 of 2048x1024", lambda: (rng.standard_normal((2048, 1024), dtype=np.float32),), lambda x: x.topk(8, 1).values,
                lambda a: torch.topk(a[0], 8, 1).values))
  for name, make, ours, ref in cases:
    wall, kern = measure(dev, make, ours, reps)
    t_ref, refname = None, "PyTorch"
    if torch is not None:
      t_ref, refname = best_threads(torch.set_num_threads, lambda: tuple(torch.from_numpy(a) for a in make()), ref, reps, "PyTorch")
    line(name, wall, kern, t_ref, refname)

def bench_job(dev: str) -> None:
  """The README job on an empty compile cache, in a fresh process."""
  with tempfile.TemporaryDirectory(prefix="baregrad_bench_cache_") as cache:
    env = {**os.environ, "BAREGRAD_CACHE": cache, "DEV": dev, "PROGRESS": "0", "PYTHONPATH": ROOT}
    st = time.perf_counter()
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "mnist_mlp.py")], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - st
  m = re.search(r"first step, with compiles: ([0-9.]+) s", p.stdout)
  if p.returncode != 0 or m is None:
    print(f"{'README job (empty cache)':26s} failed: {p.stderr.strip().splitlines()[-1:]}", flush=True)
    return
  print(f"{'README job (empty cache)':26s} first step {float(m.group(1)):.2f} s, whole job {wall:.1f} s  (goal: <= 2 s, <= 15 s)", flush=True)

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--dev", default="CPU")
  ap.add_argument("--reps", type=int, default=5)
  ap.add_argument("--only", default="matmul,sum,ew,conv,math,gather,job")
  ap.add_argument("--n", type=int, default=16 * 1024 * 1024 + 3, help="elements for sum and relu(x*y+z)")
  ap.add_argument("--shapes", default="", help="matmul shapes MxKxN (or BxMxKxN), comma separated")
  a = ap.parse_args()
  rng, dev, only = np.random.default_rng(0), a.dev, set(a.only.split(","))
  try: import torch; tv = f", PyTorch {torch.__version__}"
  except ImportError: tv = ", PyTorch not installed"
  print(f"device {dev} ({Device[dev].renderer.name} renderer), {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}, "
        f"NumPy {np.__version__}{tv}")
  print(f"{'workload':26s} {'wall ms':>9s} {'kern ms':>9s} {'ref ms':>9s}  {'wall':>6s}x {'kern':>6s}x  reference")
  shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",")] if a.shapes else MATMULS + BATCHED
  if "matmul" in only: bench_matmul(dev, rng, a.reps, shapes)
  if "sum" in only: bench_sum(dev, rng, a.reps, a.n)
  if "ew" in only: bench_ew(dev, rng, a.reps, a.n)
  if "conv" in only: bench_conv(dev, rng, a.reps, 32)
  if "math" in only: bench_math(dev, rng, a.reps)
  if "gather" in only: bench_gather(dev, rng, a.reps)
  if "job" in only: bench_job(dev)
  print(f"load average at the end {os.getloadavg()[0]:.2f}")

if __name__ == "__main__": main()
