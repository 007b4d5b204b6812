"""`python -m baregrad` (the `baregrad` command): what baregrad finds on this machine.

Prints the version, Python and the dependencies' versions, every known device and whether it works here (each
driver's own answer: the registry opens it and reports its DeviceUnavailable reason), the compilers found and the
compile cache. `--check` runs a small computation on every device that works (with MOCKGPU=1 that includes the mock
GPUs) and reports each result and its time; the exit status is 1 if any check fails. `--knobs` lists every environment
knob (baregrad/knobs.py) with its type, default, the value set here and its meaning; the exit status is 1 if a set
value is invalid (`--knobs --markdown` prints docs/knobs.md)."""
from __future__ import annotations
import argparse, importlib, importlib.metadata, os, platform, re, sys, time
from baregrad import knobs
from typing import Any

def _metadata_requirements() -> list[tuple[str, str | None]]:
  """(distribution, extra or None) for every requirement baregrad declares (pyproject is the one source)."""
  try: reqs = importlib.metadata.requires("baregrad") or []
  except importlib.metadata.PackageNotFoundError: reqs = _pyproject_requirements()
  out = []
  for r in reqs:
    m = re.match(r"\s*([A-Za-z0-9_.\-]+)", r)
    e = re.search(r"""extra\s*==\s*["']([^"']+)["']""", r)
    if m: out.append((m.group(1), e.group(1) if e else None))
  return out

def _pyproject_requirements() -> list[str]:
  from baregrad import _pyproject
  proj = _pyproject().get("project", {})
  return list(proj.get("dependencies", [])) + [f'{r}; extra == "{x}"' for x, rs in proj.get("optional-dependencies", {}).items() for r in rs]

def _dist_version(name: str) -> str:
  try: return importlib.metadata.version(name)
  except importlib.metadata.PackageNotFoundError: return "not installed"

def _strip_prefix(msg: str, name: str) -> str:
  """The registry and the driver both prefix the device name ('NV is unavailable: NV: ...'): keep the reason."""
  for p in (f"{name} is unavailable: ", f"{name}: "):
    if msg.startswith(p): msg = msg[len(p):]
  return msg

def probe_devices(names: list[str]) -> list[tuple[str, Any, str]]:
  """[(name, device or None, details or the reason it does not work here)], asking the registry for each."""
  from baregrad.hal import Device, DeviceUnavailable
  out: list[tuple[str, Any, str]] = []
  for name in names:
    try: d = Device[name]
    except DeviceUnavailable as e: out.append((name, None, _strip_prefix(str(e), name))); continue
    except Exception as e: out.append((name, None, f"error while opening: {type(e).__name__}: {_strip_prefix(str(e), name)}")); continue
    out.append((name, d, _describe(d)))
  return out

def _describe(d: Any) -> str:
  bits = [f"{type(d).__name__}"]
  for attr in ("arch", "variant", "threads"):
    if (v := getattr(d, attr, None)) is not None: bits.append(f"{attr} {v}")
  if getattr(d, "is_mock", False): bits.append("MOCK GPU")
  r, c = getattr(d, "renderer", None), getattr(d, "compiler", None)
  if r is not None: bits.append(f"renderer {getattr(r, 'name', type(r).__name__)}")
  if c is not None:
    try: v = c.version()
    except Exception as e: v = f"version unknown ({type(e).__name__})"
    bits.append(f"compiler {type(c).__name__}" + (f" ({v})" if v else ""))
    if (why := getattr(c, "reason", None)): bits.append(f"cannot compile: {why}")
  return ", ".join(bits)

def compilers() -> list[tuple[str, str]]:
  """(tool, what was found) for the toolchains the renderers feed."""
  out: list[tuple[str, str]] = []
  try:
    import llvmlite, llvmlite.binding as llvm
    llvm.initialize_all_targets()
    found = []
    for triple in (llvm.get_process_triple(), "amdgcn-amd-amdhsa", "nvptx64-nvidia-cuda"):
      try: found.append(f"{llvm.Target.from_triple(triple).name} ({triple})")
      except RuntimeError: found.append(f"no {triple}")
    out.append(("LLVM", f"llvmlite {llvmlite.__version__}, LLVM {'.'.join(map(str, llvm.llvm_version_info))}; host CPU "
                        f"{llvm.get_host_cpu_name()}; targets: {', '.join(found)}"))
  except Exception as e: out.append(("LLVM", f"not usable: {type(e).__name__}: {e}"))
  try:
    from baregrad.drivers.nv_compile import find_ptxas, find_nvcc
    for tool, path in (("ptxas", find_ptxas()), ("nvcc", find_nvcc())):
      out.append((tool, f"{path} ({_tool_version(path)})" if path
                  else "not found ($" + tool.upper() + ", PATH, /usr/local/cuda*/bin, the nvidia-cuda-nvcc wheel)"))
  except Exception as e: out.append(("ptxas", f"cannot look: {type(e).__name__}: {e}"))
  try:
    from baregrad.drivers.cpu_compile import cc_report
    out.append(("C compiler", cc_report()))
  except Exception as e: out.append(("C compiler", f"cannot look: {type(e).__name__}: {e}"))
  return out

def _tool_version(path: str) -> str:
  """The line of `path --version` that names the release (NVIDIA's tools print it last but one), else its first line."""
  import subprocess
  try: lines = [l.strip() for l in subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20).stdout.splitlines() if l.strip()]
  except (OSError, subprocess.SubprocessError) as e: return f"does not run: {e}"
  return next((l for l in lines if "release" in l), lines[0] if lines else "version unknown")

def cache_summary() -> str:
  from baregrad.helpers import cache_dir
  root = cache_dir()
  if not os.path.isdir(root): return f"{root} (empty: not created yet)"
  parts, total_n, total_b = [], 0, 0
  for sub in sorted(os.listdir(root)):
    n = b = 0
    p = os.path.join(root, sub)
    for dp, _, fs in os.walk(p) if os.path.isdir(p) else [(root, [], [sub])]:
      for f in fs:
        try: b += os.path.getsize(os.path.join(dp, f)); n += 1
        except OSError: pass
    parts.append(f"{sub} {n} files {_size(b)}")
    total_n, total_b = total_n + n, total_b + b
  return f"{root} ({total_n} files, {_size(total_b)}" + (f": {', '.join(parts)}" if parts else "") + ")"

def _size(n: float) -> str:
  for unit in ("B", "KiB", "MiB", "GiB"):
    if n < 1024 or unit == "GiB": return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
    n /= 1024
  return f"{n} B"

def check(device: str) -> tuple[bool, str, float, float]:
  """A small computation (elementwise, matmul, reduction, copy out) on `device`, run twice: (ok, what happened,
  seconds of the first run (compiles included), seconds of the second (compiled kernels reused))."""
  from baregrad import Tensor, dtypes
  want = float(2 * sum(2 * i + 1 for i in range(12)))
  times: list[float] = []
  for _ in range(2):
    st = time.perf_counter()
    try:
      a = Tensor.arange(12, device=device, dtype=dtypes.float32).reshape(3, 4)
      got = ((a * 2 + 1) @ Tensor.ones(4, 2, device=device)).sum().item()
    except Exception as e:
      return False, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", time.perf_counter() - st, float("nan")
    times.append(time.perf_counter() - st)
    if got != want: return False, f"sum((2*arange(12)+1).reshape(3,4) @ ones(4,2)) = {got:g}, expected {want:g}", times[0], float("nan")
  return True, f"sum((2*arange(12)+1).reshape(3,4) @ ones(4,2)) = {got:g}", times[0], times[1]

def main(argv: list[str] | None = None) -> int:
  try: return _main(argv)
  except BrokenPipeError:  # `baregrad | head`: the reader left; say nothing more
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 1

def _knobs(markdown: bool) -> int:
  """--knobs: the declared knobs and this environment's settings; exit status 1 if one of them is invalid."""
  if markdown:
    print(knobs.markdown(), end="")
    return 0
  print(knobs.listing())
  bad = [why for _, _, why in knobs.rows() if why] + knobs.unknown()
  for why in bad: print(f"baregrad: {why}", file=sys.stderr)
  return 1 if bad else 0

def _main(argv: list[str] | None) -> int:
  ap = argparse.ArgumentParser(prog="baregrad", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--check", action="store_true", help="run a small computation on every device that works here")
  ap.add_argument("--knobs", action="store_true", help="list every environment knob: type, default, value set here, meaning")
  ap.add_argument("--markdown", action="store_true", help="with --knobs: print docs/knobs.md instead")
  ap.add_argument("devices", nargs="*", help="devices to report (default: every known device), e.g. CPU CPU:C NV:1")
  a = ap.parse_args(argv)
  if a.knobs: return _knobs(a.markdown)
  if a.markdown: ap.error("--markdown goes with --knobs")
  import baregrad
  from baregrad.hal import KNOWN_DEVICES
  print(f"baregrad {baregrad.__version__} ({os.path.dirname(os.path.abspath(baregrad.__file__))})")
  print(f"Python {platform.python_version()} ({platform.python_implementation()}, {platform.system()} {platform.machine()})")
  reqs = _metadata_requirements()
  print("dependencies: " + ", ".join(f"{n} {_dist_version(n)}" for n, x in reqs if x is None))
  if opt := [(n, x) for n, x in reqs if x is not None]:
    print("optional: " + ", ".join(f"{n} {_dist_version(n)} [{x}]" for n, x in opt))
  names = a.devices or list(KNOWN_DEVICES)
  env = {k: v for k in ("DEV", "MOCKGPU", "MOCKGPU_ARCH", "MOCKGPU_COUNT") if (v := knobs.raw(k)) is not None}
  print("devices" + (f" ({' '.join(f'{k}={v}' for k, v in env.items())})" if env else "") + ":")
  probed = probe_devices(names)
  w = max(len(n) for n, _, _ in probed)
  for name, d, info in probed: print(f"  {name:<{w}}  {'works' if d is not None else 'no   '}  {info}")
  print("compilers:")
  for tool, what in compilers(): print(f"  {tool}: {what}")
  print(f"compile cache: {cache_summary()}")
  if not a.check: return 0
  print("check:")
  failed = 0
  for name, d, _ in probed:
    if d is None: continue
    ok, what, first, again = check(name)
    failed += not ok
    print(f"  {name:<{w}}  {'ok  ' if ok else 'FAIL'}  {first * 1e3:8.1f} ms first (compiles), {again * 1e3:7.1f} ms again  {what}")
  if not any(d is not None for _, d, _ in probed): print("  no device works here"); return 1
  return 1 if failed else 0

if __name__ == "__main__": sys.exit(main())
