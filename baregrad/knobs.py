"""Every environment knob baregrad reads, declared once: name, type, default, one-line meaning.

All reads go through here (tests/unit/test_knobs.py checks the tree for stray `os.environ` reads):
- `get(name)`: the typed value, cached from its first read until `reset()` or a `Context` block: for knobs read on
  hot paths (the eager path reads BOUNDS, JIT, DEBUG per op).
- `read(name)`: the typed value parsed from the environment now: for knobs read once when a device, compiler or
  process starts (DEV, CPU_THREADS, MOCKGPU_ARCH...), which tests change between devices with `monkeypatch.setenv`.
- `Context(JIT=0, ...)`: override knobs for a block (checked on entry), restored on exit; both caches see it.

Values: an unset or empty variable means the default. `bool` takes an integer (0 off, anything else on), `int` and
`float` a number within the knob's range, `choice` one of its words, `list` comma-separated words, `str`/`path` any
text. Anything else raises `KnobError` (a ValueError) naming the knob, the value and what was expected, where the
knob is read (so the reader's own handling applies: a mock GPU's bad setting makes its device unavailable);
`check()` and `python3 -m baregrad --knobs` check every knob at once.

Unknown names: the environment holds many variables that are not ours, so only the prefixes that are ours alone are
checked: a set variable starting with BAREGRAD_ or MOCKGPU_ that no knob declares is an error at the first get() (a
misspelt BAREGRAD_NOCAHCE would otherwise be ignored silently). Other misspellings (JTI=0) cannot be told from
foreign variables and are not caught. `python3 -m baregrad --knobs` lists every knob with its current value.

Imports nothing from baregrad (rank 1, beside helpers): every layer may read knobs."""
from __future__ import annotations
import difflib, fnmatch, math, os
from dataclasses import dataclass
from typing import Any

KINDS = ("bool", "int", "float", "str", "path", "choice", "list")
OURS = ("BAREGRAD_", "MOCKGPU_")   # prefixes no other software uses: an undeclared name under them is a typo

class KnobError(ValueError):
  """A knob set to a value of the wrong type or range, or an undeclared name under one of our prefixes."""

@dataclass(frozen=True)
class Knob:
  """One environment variable: `kind` one of KINDS; `default` the value when unset (None: decided by the reader, as
  `default_text` says); `lo`/`hi` the range of an int or float; `choices` a choice's words; `unit` what a number
  counts; `group` where --knobs and docs/knobs.md list it; a name ending in `*` declares a family of names."""
  name: str
  kind: str
  default: Any
  meaning: str
  group: str = "general"
  lo: float | None = None
  hi: float | None = None
  choices: tuple[str, ...] = ()
  unit: str = ""
  default_text: str = ""

  def expected(self) -> str:
    """What a value must look like, in words (error messages and --knobs)."""
    if self.kind == "bool": return "0 or 1"
    if self.kind == "choice": return "one of " + ", ".join(self.choices)
    if self.kind == "list": return "comma-separated words"
    if self.kind in ("int", "float"):
      what = ("an integer" if self.kind == "int" else "a number") + (f" of {self.unit}" if self.unit else "")
      return what + (f" ({self.range()})" if self.range() else "")
    return "text"

  def range(self) -> str:
    """An int's or float's range in words ("" when unbounded)."""
    if self.lo is not None and self.hi is not None: return f"from {_num(self.lo)} to {_num(self.hi)}"
    if self.lo is not None: return f"at least {_num(self.lo)}"
    if self.hi is not None: return f"at most {_num(self.hi)}"
    return ""

  def show_default(self) -> str:
    if self.default_text: return self.default_text
    if self.default is None: return "unset"
    if self.kind == "bool": return "1" if self.default else "0"
    if self.kind == "list": return ",".join(self.default) or "empty"
    return _num(self.default) if isinstance(self.default, (int, float)) else str(self.default)

  def parse(self, text: str) -> Any:
    """The typed value of `text` (as set in the environment); KnobError when it is not one."""
    s = text.strip()
    if s == "": return self.default
    def bad(what: str, also: str = "") -> KnobError:
      return KnobError(f"{self.name} must be {what}, got {text!r} ({also}{self.name}: {self.meaning}; "
                       "python3 -m baregrad --knobs lists every knob)")
    if self.kind in ("int", "float"):
      number = ("an integer" if self.kind == "int" else "a number") + (f" of {self.unit}" if self.unit else "")
      also = f"{self.range()}; " if self.range() else ""
      try: v: Any = int(s, 10) if self.kind == "int" else float(s)
      except ValueError: raise bad(number, also) from None
      if not math.isfinite(v): raise bad("a finite number", also)
      if (self.lo is not None and v < self.lo) or (self.hi is not None and v > self.hi): raise bad(self.range())
      return v
    if self.kind == "bool":
      try: return int(s, 10) != 0
      except ValueError: raise bad(self.expected()) from None
    if self.kind == "choice":
      if s not in self.choices: raise bad(self.expected())
      return s
    if self.kind == "list": return tuple(w.strip() for w in s.split(",") if w.strip())
    return text

def _num(x: float) -> str: return str(int(x)) if float(x).is_integer() else str(x)

_G, _C, _D, _CPU = "general", "compiler", "debugging", "CPU device"
_GPU, _T = "GPU devices and mocks", "tests and tools"
_DECLARED = [
  # general
  Knob("DEV", "str", "CPU",
       "the default device: CPU, CPU:C, NV, NV:1, AMD, CL:n, CUDA:n (unavailable: falls back to the CPU)", _G),
  Knob("JIT", "bool", True, "@jit functions capture their kernels once and replay them; 0 runs them eagerly", _G),
  Knob("JIT_NOGRAPH", "bool", False,
       "a jit replay launches its kernels one by one instead of resubmitting a recorded HCQ graph", _G),
  Knob("JIT_HOIST", "bool", True,
       "a jit replay runs the kernels that read only unchanged weights (packing, layout changes) once, not every call", _G),
  Knob("BOUNDS", "bool", True, "index bounds checks on the device (gather, scatter, indexing); 0 turns them off", _G),
  Knob("BAREGRAD_CACHE", "path", None,
       "directory of the compile and BEAM caches", _G, default_text="$XDG_CACHE_HOME/baregrad"),
  Knob("XDG_CACHE_HOME", "path", None,
       "the user's cache directory (XDG standard), under which the compile cache lives", _G, default_text="~/.cache"),
  Knob("BAREGRAD_NOCACHE", "bool", False, "compile every kernel again instead of reading the compile cache", _G),
  Knob("PROGRESS", "choice", None,
       "progress bars: 1 forces them on, 0 off", _G, choices=("0", "1"), default_text="on a terminal only"),
  # compiler
  Knob("NOOPT", "bool", False, "no kernel optimizations (no upcast, unroll, local or thread split)", _C),
  Knob("BEAM", "int", 0,
       "search this many candidate opts per kernel (0: the heuristic's); results cached on disk", _C, lo=0),
  Knob("BEAM_WORKERS", "int", None, "processes that build BEAM candidates", _C, lo=1, default_text="one per core"),
  Knob("BEAM_BUILD_S", "float", 20.0,
       "build budget of one BEAM candidate; one over it is dropped", _C, lo=0, unit="seconds"),
  Knob("CPU_CONV", "choice", "gemm",
       "CPU 2-d convolutions: gemm (implicit GEMM over the flattened padded width, tensor/ops/conv.py) or generic "
       "(the window reduction every device runs)", _C, choices=("gemm", "generic")),
  Knob("PACK", "bool", True, "CPU matmuls pack an operand into a contiguous panel first; 0 reads it in place", _C),
  Knob("FUSE_NORMS", "bool", True,
       "a reduction broadcast back over the rows it reduced (softmax, layer/rms norm) fuses with its elementwise tail "
       "into one kernel per row group; 0 gives each reduction its own kernel", _C),
  Knob("FUSE_NORMS_MAX_ROW", "int", 65536,
       "the longest reduced row FUSE_NORMS fuses; longer rows keep a kernel per reduction", _C, lo=1, unit="elements"),
  Knob("FUSE_ATTENTION", "bool", True,
       "softmax(q k^T * scale + mask) v with at least FUSE_ATTENTION_MIN_SCORES scores is one kernel (engine/attention_fusion.py: "
       "the scores are computed again per pass over the keys, no seq x seq buffer); 0 gives the scores, the softmax and the "
       "product their own kernels", _C),
  Knob("FUSE_ATTENTION_MIN_SCORES", "int", 1 << 24,
       "the fewest scores (batch x heads x queries x keys) of an attention FUSE_ATTENTION makes one kernel: below it the "
       "kernels of the unfused path are faster (3-10x on a CPU, bench/attention.py), above it their score buffers are large",
       _C, lo=0, unit="elements"),
  Knob("ROWSTREAM", "bool", True, "CPU vector-matrix products and column sums stream rows; 0 keeps column strips", _C),
  Knob("NO_MEMPLAN", "bool", False, "every intermediate buffer of a schedule gets its own memory (no reuse)", _C),
  Knob("ALLOW_TF32", "bool", False,
       "float32 matmuls may use tf32 tensor cores (PyTorch's allow_tf32; codegen.tc.set_allow_tf32)", _C),
  Knob("CC", "path", None, "the C compiler of DEV=CPU:C", _C, default_text="clang, gcc or cc on PATH"),
  Knob("CC_MARCH", "str", "native",
       "the CPU DEV=CPU:C's C compiler builds for (-march=...; native: this one, -mcpu=native where -march is refused)", _C),
  Knob("CC_HALF", "choice", "auto",
       "how DEV=CPU:C holds float16: as _Float16 (native), as 16-bit integers with exact conversions (bits), "
       "or native where the compiler's probe found _Float16 (auto)", _C, choices=("auto", "native", "bits")),
  Knob("PTXAS", "path", None,
       "the ptxas that assembles NV kernels", _C, default_text="PATH, /usr/local/cuda*/bin, the pip wheel"),
  Knob("NVCC", "path", None,
       "nvcc (tools and tests only)", _C, default_text="PATH, /usr/local/cuda*/bin, the pip wheel"),
  Knob("NV_SM90A", "bool", False,
       "NV on Hopper (sm_90) compiles for sm_90a: matmuls may use wgmma tensor cores (mock-checked, not yet confirmed on a GPU)", _C),
  Knob("NV_TMA", "bool", True,
       "sm_90a wgmma kernels load their staged tiles with TMA (cp.async.bulk.tensor through tensor maps built on the device) "
       "where the shapes allow; 0: the cp.async pipeline (read when a kernel is lowered)", _C),
  Knob("NV_WARPSPEC", "bool", True,
       "a TMA-fed sm_90a wgmma kernel gets one producer warpgroup issuing the copies while its warpgroups compute "
       "(setmaxnreg moves registers to them); 0: every warpgroup computes and one thread issues (read when a kernel is lowered)", _C),
  Knob("NV_WGMMA_N256", "bool", True,
       "sm_90a wgmma matmuls with two warpgroups take 128 x 256 block tiles where N allows; 0: 128 x N (N of one "
       "instruction, 64 or 128)", _C),
  Knob("PTX_CHECK_ARCHS", "list", (), "also assemble every PTX kernel for these sm_ targets (validation only)", _C),
  Knob("AMD_CHECK_ARCHS", "list", (), "also compile every AMD kernel for these gfx targets (validation only)", _C),
  # debugging
  Knob("DEBUG", "int", 0,
       "1 kernel times, 2 names/shapes/opts, 3 source, 4 UOp graph, 5 linear program, 6 a GPU kernel's resources (NV ptxas -v: registers, spills, "
       "stack, shared; AMD VGPRs, SGPRs, spills, LDS, scratch), 7 disassembly (CPU; NV SASS by nvdisasm/cuobjdump; AMD RDNA3 by our decoder)", _D, lo=0),
  Knob("PROFILE", "bool", False,
       "write a Perfetto trace of every kernel, copy and compile (the path is printed at exit)", _D),
  Knob("PROFILE_PATH", "path", None, "the PROFILE trace file", _D, default_text="$TMPDIR/baregrad-trace-<pid>.json"),
  Knob("_BAREGRAD_PROFILE_OWNER", "str", None,
       "internal: pid of the process that owns PROFILE_PATH (children write beside it)", _D),
  Knob("VIZ", "bool", False, "record each realize's tensor graph, each kernel's graph through its rewrite passes, its source and binary, "
       "the timeline and the HCQ command streams, and serve a page that shows them (docs/viz.md)", _D),
  Knob("VIZ_PATH", "path", None, "the VIZ recording file", _D, default_text="$TMPDIR/baregrad-viz-<pid>.json"),
  Knob("VIZ_SERVE", "bool", True, "with VIZ=1, serve the recording on 127.0.0.1 at exit (0: only write it)", _D),
  Knob("VIZ_TIMELINE", "bool", True, "with VIZ=1, turn PROFILE on for the timeline (0: no timeline; CPU kernels keep their direct launch)", _D),
  Knob("IOCTL_TRACE", "bool", False, "print every NV/AMD ioctl, mmap and doorbell decoded", _D),
  Knob("HANG_WARN_MS", "int", 5000, "a host wait without progress this long prints what blocks it (0: never)", _D, lo=0),
  Knob("IOCTL_TRACE_FILE", "path", None, "append the IOCTL_TRACE lines to this file instead of stderr", _D),
  Knob("AMD_CAPTURE", "path", None, "directory where the AMD driver writes each submission (AQL packets, IBs, kernargs, SDMA) and each "
       "launch's code object and buffers, with meta.json (tools/amd_decode.py capture|replay DIR)", _D),
  Knob("NV_CAPTURE", "path", None, "directory where the NV driver writes each submission (pushbuffer, GPFIFO entry, QMDs, constant banks) "
       "and each launch's code image and buffers, with meta.json (tools/nv_decode.py capture|replay DIR)", _D),
  # CPU device
  Knob("CPU_THREADS", "int", 0, "threads a CPU kernel is split over (0: one per core)", _CPU, lo=0),
  Knob("CPU_NATIVE_POOL", "bool", True, "split kernels over the native thread pool; 0 uses Python threads", _CPU),
  Knob("CPU_SPIN_US", "float", 10000.0,
       "how long a pool worker spins for the next kernel before it sleeps", _CPU, lo=0, unit="microseconds"),
  Knob("CPU_SPLIT_US", "float", 50.0,
       "the least work a CPU kernel gives each thread: it is split over at most (its time / this) threads",
       _CPU, lo=0, unit="microseconds"),
  Knob("CPU_INLINE", "bool", True,
       "an idle queue runs known-cheap work on the submitting thread; 0 always hands it to the worker", _CPU),
  Knob("CPU_CHAIN", "bool", True, "chains of tiny kernels run in one native call (drivers/cpu_chain.py)", _CPU),
  # GPU devices and mocks
  Knob("MOCKGPU", "bool", False, "NV and AMD talk to the mock GPUs instead of the kernel drivers", _GPU),
  Knob("MOCKGPU_ARCH", "str", "sm_90",
       "the mock NVIDIA GPU's generation: sm_80, sm_86, sm_89, sm_90, sm_100, sm_120", _GPU),
  Knob("MOCKGPU_AMD_ARCH", "str", "gfx1100", "the mock AMD GPU's target: gfx1100, gfx942", _GPU),
  Knob("MOCKGPU_QCOM_CHIP", "str", "a630",
       "the mock Adreno's part: a630, a640, a650, a660 (a6xx), a730, a740, a750 (a7xx)", _GPU),
  Knob("MOCKGPU_COUNT", "int", 1, "how many mock GPUs the mock driver lists (up to 32 NV, 16 AMD)", _GPU, lo=1),
  Knob("HCQ_TIMEOUT_MS", "int", None,
       "how long an HCQ device waits for a signal before it raises", _GPU, lo=1, unit="milliseconds",
       default_text="the device's own"),
  Knob("CL_TIMEOUT_MS", "int", 30000,
       "how long DEV=CL waits for an event before it raises", _GPU, lo=1, unit="milliseconds"),
  Knob("CL_SHARE_DEVICE", "bool", False, "CL:i at or past the number of OpenCL devices opens its own context and queue on "
       "device i mod that number (several handles of one device, e.g. multi-device code on one PoCL device); off: such a CL:i "
       "is unavailable, naming the devices there are", _GPU),
  Knob("CUDA_TIMEOUT_MS", "int", 30000,
       "how long DEV=CUDA waits for work before it raises", _GPU, lo=1, unit="milliseconds"),
  Knob("RING_MIN_BYTES", "int", 4 << 20, "in-process allreduce: tensors of at least this many bytes over 3+ devices take the ring, "
       "smaller ones the direct exchange", _GPU, lo=0, unit="bytes"),
  Knob("NO_PEER_COPY", "bool", False, "copies between two GPUs of one driver go through the host (the source waited for, copied "
       "out, copied in) instead of being queued on both devices' queues", _GPU),
  Knob("NO_PEER_MAP", "bool", False, "queued copies between two GPUs go through pinned host staging even where the destination "
       "could read the source's memory through a peer mapping (to compare the two: bench/allreduce.py)", _GPU),
  Knob("DIST_TIMEOUT_S", "float", 60.0, "baregrad.distributed: how long an MPI exchange waits for the other ranks before it raises", _GPU,
       lo=0.001, unit="seconds"),
  # tests and tools (read outside baregrad/, declared here so --knobs and the docs list them)
  Knob("ONNX_NODE_TESTS", "choice", "all",
       "tests: core skips the _expanded onnx node tests (about a third of their time)", _T,
       choices=("all", "core")),
  Knob("HCQ_TEST_DEVICES", "list", ("CPU",), "tests: the devices tests/device/test_hcq.py runs on", _T),
  Knob("BAREGRAD_FUZZ", "int", 0, "tests: examples per fuzz test, drawn anew each run (0: the fixed quick set)", _T, lo=0),
  Knob("RDNA3_XCHECK_ALL", "bool", False, "tests: cross-check every RDNA3 encoding instead of every sixth", _T),
  Knob("DOCTOR_TRACEBACK", "bool", False, "tools/amd_doctor.py prints the traceback of a failing step", _T),
  Knob("BAREGRAD_AUTOGEN_CACHE", "path", "/tmp/baregrad-autogen-src",
       "tools/autogen: where downloaded sources are kept", _T),
  Knob("BAREGRAD_SRC_*", "path", None,
       "tools/autogen: a local checkout of the named source (e.g. BAREGRAD_SRC_NVRTC)", _T),
]
KNOBS: dict[str, Knob] = {k.name: k for k in _DECLARED}
_FAMILIES = [k.name for k in _DECLARED if k.name.endswith("*")]
assert len(KNOBS) == len(_DECLARED) and all(k.kind in KINDS for k in _DECLARED), "a knob twice or a bad kind"

def _knob(name: str) -> Knob:
  k = KNOBS.get(name)
  if k is None or name.endswith("*"):
    near = difflib.get_close_matches(name, list(KNOBS), n=1)
    raise KnobError(f"{name} is not a declared knob" + (f" (did you mean {near[0]}?)" if near else "") +
                    ": declare it in baregrad/knobs.py")
  return k

def read(name: str) -> Any:
  """The typed value of knob `name` as the environment holds it now (not cached)."""
  k = _knob(name)
  text = os.environ.get(name)
  return k.default if text is None else k.parse(text)

def raw(name: str) -> str | None:
  """The text knob `name` is set to, or None (for messages that echo the user's setting)."""
  _knob(name)
  return os.environ.get(name)

_values: dict[str, Any] = {}
_checked = False   # whether the names under our prefixes were checked since the last reset()

def get(name: str) -> Any:
  """The typed value of knob `name`, cached from its first get() until reset() (a dict lookup: hot paths read knobs
  per op). The first get() after a reset also checks the names under our prefixes (unknown())."""
  try: return _values[name]
  except KeyError: pass
  global _checked
  if not _checked:   # (not every set knob: an ill-typed one raises where it is read, as the code there expects)
    _knob(name)
    if (bad := unknown()): raise KnobError(bad[0])
    _checked = True
  v = _values[name] = read(name)
  return v

def check() -> None:
  """Raise KnobError for the first ill-typed setting of a declared knob, or undeclared name under our prefixes (the
  whole environment at once, as --knobs does; get() and read() check only the knob they read)."""
  for name in KNOBS:
    if not name.endswith("*"): read(name)
  if (bad := unknown()): raise KnobError(bad[0])

def unknown() -> list[str]:
  """Why each set variable under our prefixes (OURS) that no knob declares is an error (a misspelt knob)."""
  out = []
  for var in sorted(os.environ):
    if var.startswith(OURS) and var not in KNOBS and not any(fnmatch.fnmatchcase(var, p) for p in _FAMILIES):
      near = difflib.get_close_matches(var, list(KNOBS), n=1)
      out.append(f"{var} is set but is not a baregrad knob" + (f" (did you mean {near[0]}?)" if near else "") +
                 f": the prefixes {', '.join(OURS)} are baregrad's; python3 -m baregrad --knobs lists every knob")
  return out

def reset() -> None:
  """Forget the cached values: the next get() of each knob reads the environment again (and checks it)."""
  global _checked
  _values.clear()
  _checked = False

def _text(v: Any) -> str:
  if isinstance(v, bool): return "1" if v else "0"
  if isinstance(v, (tuple, list)): return ",".join(map(str, v))
  return str(v)

class Context:
  """Override knobs for a block: `with Context(DEBUG=4, JIT=0): ...` (tests use it). Each name must be declared and
  each value valid for its knob; None unsets the variable. The previous environment is restored on exit."""
  def __init__(self, **kw: Any) -> None:
    for k, v in kw.items():
      if v is not None: _knob(k).parse(_text(v))
      else: _knob(k)
    self.kw, self.old = kw, dict[str, str | None]()
  def __enter__(self) -> Context:
    for k, v in self.kw.items():
      self.old[k] = os.environ.get(k)
      if v is None: os.environ.pop(k, None)
      else: os.environ[k] = _text(v)
    reset()
    return self
  def __exit__(self, *exc: object) -> None:
    for k, v in self.old.items():
      if v is None: os.environ.pop(k, None)
      else: os.environ[k] = v
    reset()

def set_env(name: str, value: Any) -> None:
  """Set knob `name` for this process and the processes it starts (not undone; Context is for a block)."""
  text = _text(value)
  _knob(name).parse(text)
  os.environ[name] = text
  reset()

def child_env(prepend: dict[str, str] | None = None, **set_: str) -> dict[str, str]:
  """This process's environment for a child process: `set_` set, and each `prepend` entry put first on that
  os.pathsep-separated list (e.g. PYTHONPATH)."""
  env = dict(os.environ)
  env.update(set_)
  for var, first in (prepend or {}).items():
    env[var] = os.pathsep.join([first] + ([env[var]] if env.get(var) else []))
  return env

def DEBUG() -> int:
  """The DEBUG level (cached like every get())."""
  return get("DEBUG")  # type: ignore[no-any-return]

class _GetenvShim:
  """The old `helpers.getenv(key, default)`, for code not yet converted to get(): the declared knob's typed value
  (the declaration's default applies, not `default`); cache_clear() is reset()."""
  def __call__(self, key: str, default: Any = 0) -> Any: return get(key)
  def cache_clear(self) -> None: reset()
getenv = _GetenvShim()

# ---------------------------------------------------------------- listing (python3 -m baregrad --knobs, docs/knobs.md)
def rows() -> list[tuple[Knob, str | None, str]]:
  """(knob, the text it is set to or None, "" or why that text is invalid) for every declared knob, in order."""
  out: list[tuple[Knob, str | None, str]] = []
  for k in _DECLARED:
    if k.name.endswith("*"):
      for var in sorted(v for v in os.environ if fnmatch.fnmatchcase(v, k.name)):
        out.append((k, f"{var}={os.environ[var]}", ""))
      if not any(fnmatch.fnmatchcase(v, k.name) for v in os.environ): out.append((k, None, ""))
      continue
    text, why = os.environ.get(k.name), ""
    if text is not None:
      try: k.parse(text)
      except KnobError as e: why = str(e)
    out.append((k, text, why))
  return out

def _kind(k: Knob) -> str:
  """The type column: kind, choices, unit and range."""
  out = k.kind + (f" ({', '.join(k.choices)})" if k.choices else "") + (f" of {k.unit}" if k.unit else "")
  return out + (f" from {_num(k.lo)}" if k.lo is not None else "") + (f" to {_num(k.hi)}" if k.hi is not None else "")

def listing() -> str:
  """Every knob: name, type, default, the value set here (if any) and its meaning, grouped; invalid settings flagged."""
  lines: list[str] = []
  group: str | None = None
  w = max(len(k.name) for k in _DECLARED)
  for k, text, why in rows():
    if k.group != group:
      group = k.group
      lines.append(("" if not lines else "\n") + f"{group}:")
    lines.append(f"  {k.name:<{w}}  {_kind(k)}, default {k.show_default()}")
    if text is not None:
      lines.append(f"  {'':<{w}}  set to {text!r}" + (f": INVALID, {k.name} must be {k.expected()}" if why else ""))
    lines.append(f"  {'':<{w}}  {k.meaning}")
  return "\n".join(lines)

def markdown() -> str:
  """docs/knobs.md: the declared knobs as tables, one per group (tests/unit/test_knobs.py checks the file is current)."""
  out = ["# Environment knobs", "",
         "Generated from `baregrad/knobs.py` by `python3 -m baregrad --knobs --markdown` (tests/unit/test_knobs.py checks",
         "it is current); `python3 -m baregrad --knobs` lists the same with the values set in your environment.", "",
         "An unset or empty variable means the default. `bool` takes an integer (0 off, anything else on); `int` and",
         "`float` a number within the range shown; `choice` one of its words; `list` comma-separated words; `str` and",
         "`path` any text. Any other value is an error naming the knob, the value and what was expected. A set",
         f"variable starting with {' or '.join(OURS)} that no knob declares is an error too (a misspelt knob); other",
         "misspellings cannot be told from the environment's foreign variables and are not caught.", ""]
  group = None
  for k in _DECLARED:
    if k.group != group:
      group = k.group
      out += ([""] if out[-1] != "" else []) + [f"## {group[0].upper() + group[1:]}", ""]
      out += ["| name | type | default | meaning |", "|---|---|---|---|"]
    out.append(f"| `{k.name}` | {_kind(k)} | {k.show_default().replace('|', '/')} | {k.meaning.replace('|', '/')} |")
  return "\n".join(out) + "\n"
