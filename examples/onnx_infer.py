"""Run an ONNX model on baregrad: python3 examples/onnx_infer.py MODEL.onnx [NAME=input.npy ...] [--half] [--runs N]

Inputs the command line does not give are random (floats normal, integers in [0, --int-high), bools fair coins), with
symbolic dimensions set by --dim NAME=SIZE (default 1). Prints each output's name, shape and dtype, the latency of a
run after warm-up (inputs uploaded, the jitted graph replayed, outputs read back; fresh inputs every run), and the
largest difference from onnxruntime when that is importable. --half runs the model in float16 (reductions, matmul
and conv accumulate in float32) and also prints the largest difference from baregrad's own float32 run.
Needs `pip install 'baregrad[onnx]'` (onnxruntime optional)."""
from __future__ import annotations
import argparse, os, statistics, sys, time
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def _random_input(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype, int_high: int) -> np.ndarray:
  if dtype.kind == "f": return rng.standard_normal(shape).astype(dtype)
  if dtype.kind == "b": return rng.random(shape) < 0.5
  return rng.integers(0, int_high, shape).astype(dtype)

def _spec(runner, dims: dict[str, int]) -> list[tuple[str, tuple[int, ...], np.dtype]]:
  from baregrad.onnx import proto
  out = []
  for v in runner.inputs:
    if v.kind != "tensor" or not v.elem_type: raise SystemExit(f"input {v.name!r} is a {v.kind}: give it as a .npy file")
    shape = tuple(d if isinstance(d, int) and d > 0 else dims.get(str(d), 1) for d in (v.shape or ()))
    out.append((v.name, shape, proto.np_dtype(proto.to_dtype(v.elem_type, v.name))))
  return out

def _diff(a: np.ndarray, b: np.ndarray) -> float:
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  if a.shape != b.shape: return float("inf")
  return float(np.max(np.abs(a - b))) if a.size else 0.0

def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("model", help="the .onnx file")
  ap.add_argument("inputs", nargs="*", help="NAME=file.npy (or file.npy, in the model's input order)")
  ap.add_argument("--half", action="store_true", help="run in float16")
  ap.add_argument("--runs", type=int, default=20, help="timed runs after warm-up (default 20)")
  ap.add_argument("--warmup", type=int, default=3, help="untimed runs first (compile, capture; default 3)")
  ap.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE", help="size of a symbolic dimension (default 1)")
  ap.add_argument("--device", default=None, help="baregrad device (default: DEV or the CPU)")
  ap.add_argument("--no-jit", action="store_true", help="rebuild the graph every run instead of replaying it")
  ap.add_argument("--int-high", type=int, default=2, help="random integer inputs are drawn from [0, this) (default 2)")
  ap.add_argument("--seed", type=int, default=0)
  args = ap.parse_args(argv)
  from baregrad.onnx import load, to_numpy, OnnxError
  try:
    runner = load(args.model, device=args.device, jit=not args.no_jit, half=args.half)
    dims = {k: int(v) for k, v in (d.split("=", 1) for d in args.dim)}
    spec = _spec(runner, dims)
    given: dict[str, np.ndarray] = {}
    for i, a in enumerate(args.inputs):
      name, path = a.split("=", 1) if "=" in a else (spec[i][0], a)
      given[name] = np.load(path)
    rng = np.random.default_rng(args.seed)
    def make() -> dict[str, np.ndarray]:
      return {n: given[n] if n in given else _random_input(rng, s, d, args.int_high) for n, s, d in spec}
    feeds = make()
    outs = {k: to_numpy(v) for k, v in runner(**feeds).items()}
    print(f"{os.path.basename(args.model)} on {runner.device}{' in float16' if args.half else ''}: {len(spec)} input(s), {len(outs)} output(s)")
    for n, s, d in spec: print(f"  input  {n}: {tuple(feeds[n].shape)} {feeds[n].dtype}{' (given)' if n in given else ' (random)'}")
    for k, v in outs.items(): print(f"  output {k}: {tuple(np.shape(v))} {getattr(v, 'dtype', type(v).__name__)}")
    for _ in range(max(0, args.warmup - 1)): [to_numpy(v) for v in runner(**make()).values()]
    times = []
    for _ in range(args.runs):
      f = make()
      t = time.perf_counter()
      [to_numpy(v) for v in runner(**f).values()]
      times.append(time.perf_counter() - t)
    if times:
      print(f"latency: median {statistics.median(times) * 1e3:.3f} ms, min {min(times) * 1e3:.3f} ms over {len(times)} runs "
            f"({'jit replay' if runner.use_jit and not runner.data_dependent else 'graph rebuilt each run'}"
            f"{'; data-dependent: ' + runner.data_dependent if runner.data_dependent else ''})")
    if args.half:
      ref32 = {k: to_numpy(v) for k, v in load(args.model, device=args.device)(**feeds).items()}
      for k in outs: print(f"  max |float16 - float32| {k}: {_diff(outs[k], ref32[k]):.3g}")
    try: import onnxruntime as ort
    except ImportError: print("onnxruntime is not installed: no comparison")
    else:
      sess = ort.InferenceSession(args.model, providers=["CPUExecutionProvider"])
      ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
      for k in outs: print(f"  max |baregrad - onnxruntime| {k}: {_diff(outs[k], ref[k]):.3g}")
  except (OnnxError, OSError, ValueError) as e:
    print(f"onnx_infer: {e}", file=sys.stderr)
    return 2
  return 0

if __name__ == "__main__": sys.exit(main())
