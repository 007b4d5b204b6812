"""Compilers for the CPU: LLVM IR through llvmlite (in-process, no system compiler) and C through the system C
compiler. Both produce an ELF relocatable object that drivers/elf_loader.py maps in-process."""
from __future__ import annotations
import ctypes, functools, glob, hashlib, json, math, os, platform, re, shutil, subprocess, tempfile, threading
from dataclasses import dataclass
from typing import Any
from baregrad import knobs
from baregrad.hal import Compiler, CompileError
from baregrad.hal.compiler import cache_get, cache_put, entry_key

_llvm_lock = threading.Lock()

@functools.cache
def _llvm_target():
  import llvmlite.binding as llvm
  llvm.initialize_native_target(); llvm.initialize_native_asmprinter()
  target = llvm.Target.from_default_triple()
  tm = target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
                                    opt=3, reloc="pic", codemodel="small")
  return llvm, tm

@functools.cache
def host_simd() -> tuple[int, int]:
  """(float32 lanes per vector register, vector registers) of this CPU: what a register tile must fit in. An
  accumulator tile sized for 32 registers spills on a 16-register AVX2 core (the 8x32 matmul tile ran at a third of
  the speed of a 6x16 one there)."""
  try:
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    feats, triple = llvm.get_host_cpu_features(), llvm.get_default_triple()
  except Exception: return 8, 16   # no llvmlite: the common x86 of today
  if triple.startswith(("aarch64", "arm64")): return 4, 32   # NEON: 128-bit, 32 registers
  if feats.get("avx512f"): return 16, 32
  if feats.get("avx"): return 8, 16
  return 4, 16

def host_stream() -> tuple[int, str]:
  """(bytes, fence) for non-temporal stores on this CPU: outputs spanning at least the last-level cache (sysfs; 32 MiB
  where it does not say), and the LLVM IR that orders them before a kernel returns (x86: SFENCE, the fence Intel's and
  AMD's manuals name for streaming stores; elsewhere a full fence). (0, "") where llvmlite is missing."""
  try:
    import llvmlite.binding as llvm
    triple = llvm.get_default_triple()
  except Exception: return 0, ""
  llc = 0
  for d in sorted(glob.glob("/sys/devices/system/cpu/cpu0/cache/index*")):
    try:
      with open(os.path.join(d, "size")) as f: sz = f.read().strip()
      llc = max(llc, int(sz[:-1]) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[sz[-1]] if sz[-1].isalpha() else int(sz))
    except (OSError, ValueError, KeyError, IndexError): continue
  fence = "call void @llvm.x86.sse.sfence()" if triple.startswith(("x86_64", "i386", "i686")) else "fence seq_cst"
  return llc or 32 << 20, fence

class LLVMCompiler(Compiler):
  """LLVM IR -> optimized for the host CPU -> ELF object.

  The pipeline is LLVM's O2 without its loop and SLP vectorizers: the renderer's IR is vectorized already (register
  tiles in 16-lane chunks), and the SLP vectorizer's search over long straight-line code is what took seconds per
  kernel (a 784-wide matmul tile: 40 s). O2 keeps what our IR needs: SROA/mem2reg of the loop counters and
  accumulators, instcombine, GVN, LICM, loop unrolling of short bodies."""
  PIPELINE = "O2-novec"   # part of the cache key: a change of passes must not reuse objects built by others
  def __init__(self, opt_level: int = 2):
    llvm, self.tm = _llvm_target()
    self.opt_level = opt_level
    super().__init__(f"llvm_{llvm.get_host_cpu_name()}_O{opt_level}_{self.PIPELINE}")
  def __getstate__(self) -> dict:  # BEAM sends the compiler to worker processes: the target machine is made there
    return {k: v for k, v in self.__dict__.items() if k != "tm"}
  def __setstate__(self, state: dict) -> None:
    self.__dict__.update(state)
    self.tm = _llvm_target()[1]
  def version(self) -> str:
    import llvmlite, llvmlite.binding as llvm
    return f"llvmlite {llvmlite.__version__} LLVM {'.'.join(map(str, llvm.llvm_version_info))}"
  def compile(self, src: str) -> bytes:
    llvm, tm = _llvm_target()
    with _llvm_lock:  # LLVM's global state is not safe to drive from several threads at once
      try:
        mod = llvm.parse_assembly(src)
        mod.verify()
      except RuntimeError as e: raise CompileError(src, f"LLVM rejected the IR: {e}") from None
      mod.triple = tm.triple
      mod.data_layout = str(tm.target_data)
      pto = llvm.create_pipeline_tuning_options(speed_level=self.opt_level)
      pto.loop_vectorization = pto.slp_vectorization = False
      pb = llvm.create_pass_builder(tm, pto)
      pm = pb.getModulePassManager()
      pm.run(mod, pb)
      return tm.emit_object(mod)
  def assembly(self, src: str) -> str:
    """The optimized IR (DEBUG=4 shows the UOp graph; this is LLVM's own)."""
    llvm, tm = _llvm_target()
    with _llvm_lock:
      mod = llvm.parse_assembly(src)
      return str(mod)

# ---------------------------------------------------------------- the system C compiler (DEV=CPU:C)
# Every kernel is built with these: IEEE floats (no -ffast-math, no contraction: fused ops are explicit, as in the LLVM
# renderer) and wrapping ints. The target flags (probe_cc) come after them.
CC_FLAGS = ("-O2", "-fPIC", "-ffp-contract=off", "-fwrapv", "-fno-math-errno", "-fno-stack-protector",
            "-fno-asynchronous-unwind-tables", "-fno-exceptions", "-std=gnu11")
PROBE_REV = "1"   # part of the probe's cache key: a change of what is probed must not reuse earlier findings

def find_cc() -> str | None:
  """The C compiler of DEV=CPU:C: $CC, else clang, gcc or cc on PATH (None: none)."""
  return knobs.read("CC") or shutil.which("clang") or shutil.which("gcc") or shutil.which("cc")

def _cc_cmd(cc: str, target: tuple[str, ...], out: str) -> list[str]:
  return [cc, "-c", "-x", "c", *CC_FLAGS, *target, "-", "-o", out]

def _cc_run(cc: str, target: tuple[str, ...], src: str) -> tuple[bytes | None, str, list[str]]:
  """Compile `src` to an object: (its bytes or None, the compiler's diagnostics, the command)."""
  with tempfile.TemporaryDirectory(prefix="baregrad_cc_") as d:
    cmd = _cc_cmd(cc, target, os.path.join(d, "k.o"))
    p = subprocess.run(cmd, input=src, capture_output=True, text=True)
    if p.returncode != 0: return None, p.stderr.strip(), cmd
    with open(cmd[-1], "rb") as f: return f.read(), p.stderr.strip(), cmd

def _first_error(diag: str) -> str:
  """The line of a compiler's diagnostics that says what is wrong (the first error), for one-line reports."""
  lines = [re.sub(r"^<stdin>:[0-9:]* ", "", l.strip()) for l in diag.splitlines() if l.strip()]   # (where in the probe: no help)
  return next((l for l in lines if "error" in l), lines[0] if lines else "no message")

@functools.cache
def _host_cpu() -> str:
  """This CPU's feature flags (a digest of /proc/cpuinfo's line): what -march=native builds for, so what was found or
  built for one CPU is not taken for another that shares the cache folder."""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.split(":")[0].strip() in ("flags", "Features"): return hashlib.sha256(line.encode()).hexdigest()[:16]
  except OSError: pass
  return platform.machine()

# What the probe compiles. The target check is any C; the float16 one does what kernels do with _Float16 (conversions
# from float, double and ints, to float, one sum in half), with bits in and out so ctypes can call it.
_PROBE_TARGET = "int bg_probe(int x) { return x + 1; }\n"
_PROBE_HALF = """#define BITS(h) ({ unsigned short b_; _Float16 h_ = (h); __builtin_memcpy(&b_, &h_, 2); b_; })
static _Float16 of_bits(unsigned short b) { _Float16 h; __builtin_memcpy(&h, &b, 2); return h; }
unsigned short bg_f2h(float x) { return BITS((_Float16)x); }
unsigned short bg_d2h(double x) { return BITS((_Float16)x); }
unsigned short bg_l2h(long long x) { return BITS((_Float16)x); }
float bg_h2f(unsigned short b) { return (float)of_bits(b); }
unsigned short bg_hadd(unsigned short a, unsigned short b) { _Float16 x = of_bits(a); x = x + of_bits(b); return BITS(x); }
"""
_PROBE_BF16 = "__bf16 bg_bf16(__bf16 x) { return x; }\n"
_PROBE_VECTORS = ("typedef float bg_f4 __attribute__((vector_size(16)));\n"
                  "bg_f4 bg_vec(bg_f4 a, bg_f4 b) { return a * b + a; }\n")

def _half_wrong(obj: bytes) -> str:
  """What is wrong with the float16 probe's object ("": nothing): it must load (gcc calls libgcc helpers for the
  conversions) and convert exactly: round to nearest even, overflow to infinity, subnormals, no double rounding."""
  from baregrad.drivers.elf_loader import load_elf, ElfLoadError
  try: img = load_elf(obj, name="the _Float16 probe")
  except ElfLoadError as e: return f"its object does not load here ({e})"
  try:
    fn = lambda name, res, *args: ctypes.CFUNCTYPE(res, *args)(img.symbol(name))
    f2h, d2h, l2h = fn("bg_f2h", ctypes.c_ushort, ctypes.c_float), fn("bg_d2h", ctypes.c_ushort, ctypes.c_double), \
      fn("bg_l2h", ctypes.c_ushort, ctypes.c_longlong)
    h2f, hadd = fn("bg_h2f", ctypes.c_float, ctypes.c_ushort), fn("bg_hadd", ctypes.c_ushort, ctypes.c_ushort, ctypes.c_ushort)
    checks = [("(_Float16)65520.0f", f2h(65520.0), 0x7c00), ("(_Float16)65519.996f", f2h(65519.99609375), 0x7bff),
              ("(_Float16)(1+2^-11)", f2h(1 + 2 ** -11), 0x3c00), ("(_Float16)(1+3*2^-11)", f2h(1 + 3 * 2 ** -11), 0x3c02),
              ("(_Float16)2^-25", f2h(2 ** -25), 0), ("(_Float16)(1.5*2^-25)", f2h(1.5 * 2 ** -25), 1),
              ("(_Float16)-0.0f", f2h(-0.0), 0x8000), ("(_Float16)NAN", f2h(math.nan), 0x7e00),
              ("(_Float16)(double)(1+2^-11+2^-40)", d2h(1 + 2 ** -11 + 2 ** -40), 0x3c01), ("(_Float16)2049LL", l2h(2049), 0x6800),
              ("(float)(_Float16)0x0001", h2f(1), 2 ** -24), ("(float)(_Float16)0xfc00", h2f(0xfc00), -math.inf),
              ("65504 + 16 in _Float16", hadd(0x7bff, 0x4c00), 0x7c00), ("1 + 2^-11 in _Float16", hadd(0x3c00, 0x1000), 0x3c00)]
  finally: img.close()
  bad = [f"{what} gave {got!r}, expected {want!r}" for what, got, want in checks if got != want]
  return "it converts inexactly: " + "; ".join(bad) if bad else ""

@dataclass(frozen=True)
class CCProbe:
  """What a C compiler can do with the flags DEV=CPU:C builds kernels with (probe_cc)."""
  cc: str                  # the compiler as named ($CC, or the one found on PATH)
  version: str             # the first line of its --version
  target: tuple[str, ...]  # the target flags it takes: CC_MARCH's -march=..., else (native) -mcpu=native or none
  float16: bool            # _Float16 compiles, its runtime helpers load, and it converts exactly
  bfloat16: bool           # __bf16 compiles (reported only: bfloat16 is held as its bits everywhere)
  vectors: bool            # vector extensions (vector_size) compile (reported only: C kernels are scalar)
  why: tuple[tuple[str, str], ...] = ()   # (feature, why it is missing: the compiler's error or the wrong result)

  def missing(self, feature: str) -> str:
    """Why `feature` ("_Float16", "__bf16", "vector extensions") is missing ("" if it is there)."""
    return dict(self.why).get(feature, "")
  def summary(self) -> str:
    """The findings in one line (python3 -m baregrad)."""
    has = ", ".join(f"{f} {'yes' if ok else 'no'}" for f, ok in (("_Float16", self.float16), ("__bf16", self.bfloat16),
                                                                 ("vector extensions", self.vectors)))
    return f"{' '.join(self.target) or 'no target flag'}: {has}"

@functools.cache
def probe_cc(cc: str, march: str = "native") -> CCProbe:
  """Ask the C compiler `cc` what it can do when it builds for `march` with the flags kernels are built with: which
  target flags it takes, whether _Float16 works (compiles, loads, converts exactly), __bf16, vector extensions. Once
  per compiler: cached on disk (the compile cache) keyed by the compiler's path, its whole --version, the flags and,
  for native, this CPU; in-process by (cc, march). A compiler that does not run or takes no target flag is a
  CompileError naming it."""
  try: p = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=60)
  except (OSError, subprocess.SubprocessError) as e:
    raise CompileError("", f"the C compiler {cc} does not run ({type(e).__name__}: {e}): set CC to a clang or gcc, or apt-get install gcc") from None
  vout = (p.stdout or p.stderr).strip()
  version = vout.splitlines()[0].strip() if vout else "version unknown"
  where = shutil.which(cc)
  key = entry_key("ccprobe", PROBE_REV, os.path.realpath(where) if where else cc, vout, " ".join(CC_FLAGS), march,
                  _host_cpu() if march == "native" else "")
  if (hit := cache_get(key)) is not None:
    try:
      d = json.loads(hit)
      return CCProbe(cc, version, tuple(d["target"]), d["float16"], d["bfloat16"], d["vectors"], tuple(map(tuple, d["why"])))
    except (ValueError, KeyError, TypeError): pass   # (an entry of another shape: probed again and replaced)
  found = _probe(cc, version, march)
  cache_put(key, json.dumps({"target": found.target, "float16": found.float16, "bfloat16": found.bfloat16,
                             "vectors": found.vectors, "why": found.why}).encode())
  return found

def _probe(cc: str, version: str, march: str) -> CCProbe:
  tries = [(f"-march={march}",)] + ([("-mcpu=native",), ()] if march == "native" else [])
  refused = []
  for target in tries:
    obj, diag, _ = _cc_run(cc, target, _PROBE_TARGET)
    if obj is not None: break
    refused.append(f"{' '.join(target) or 'no target flag'}: {_first_error(diag)}")
  else:
    raise CompileError("", f"the C compiler {cc} ({version}) builds for no target it was offered ({'; '.join(refused)}): "
                           f"set CC_MARCH to a CPU it knows (now {march!r}) or CC to another compiler")
  why: dict[str, str] = {}
  obj, diag, _ = _cc_run(cc, target, _PROBE_HALF)
  if obj is None: why["_Float16"] = _first_error(diag)
  elif (wrong := _half_wrong(obj)): why["_Float16"] = wrong
  for feature, src in (("__bf16", _PROBE_BF16), ("vector extensions", _PROBE_VECTORS)):
    obj, diag, _ = _cc_run(cc, target, src)
    if obj is None: why[feature] = _first_error(diag)
  return CCProbe(cc, version, target, "_Float16" not in why, "__bf16" not in why, "vector extensions" not in why,
                 tuple(why.items()))

class ClangCompiler(Compiler):
  """C -> ELF object with the system C compiler ($CC, else clang, else gcc), for the host CPU (CC_MARCH).

  What the compiler can do is probed once (probe_cc), and the C renderer renders for it: float16 as _Float16 where
  the compiler has it (gcc 12, clang 15; clang 14 only for CPUs with AVX512-FP16), else as 16-bit integers with exact
  conversions (CC_HALF forces either). A kernel that needs what the compiler lacks is refused naming the compiler, its
  version and the missing feature."""
  def __init__(self, cc: str | None = None, march: str | None = None) -> None:
    found = cc or find_cc()
    if found is None: raise CompileError("", "no C compiler found (looked for $CC, clang, gcc, cc): apt-get install gcc")
    self.cc, self.march = found, march or knobs.read("CC_MARCH")
    self.probe = probe_cc(self.cc, self.march)
    mode = knobs.read("CC_HALF")
    self.half_native = self.probe.float16 if mode == "auto" else mode == "native"
    # the object code depends on the target flags, and for native on this CPU
    super().__init__(f"cc_{os.path.basename(self.cc)}_{'_'.join(self.probe.target)}" + (f"_{_host_cpu()}" if "native" in self.march else ""))
  def version(self) -> str: return self.probe.version
  def describe(self) -> str:
    return (f"{self.cc} ({self.version()}) {' '.join(self.probe.target)}, float16 as "
            f"{'_Float16' if self.half_native else '16-bit integers'}")
  def _lacks(self, feature: str, why: str) -> str:
    return (f"the C compiler {self.cc} ({self.version()}) with {' '.join(self.probe.target) or 'no target flag'} has no {feature}, "
            f"which this kernel needs ({why})")
  def compile(self, src: str) -> bytes:
    if "_Float16" in src and not self.probe.float16:  # (CC_HALF=native, or a source rendered for another compiler)
      raise CompileError(src, self._lacks("_Float16", self.probe.missing("_Float16")) +
                         ": unset CC_HALF (auto holds float16 as 16-bit integers here) or use gcc 12+ or clang 15+")
    obj, diag, cmd = _cc_run(self.cc, self.probe.target, src)
    if obj is not None: return obj
    head = f"the C compiler {self.cc} ({self.version()}) could not compile the kernel"
    if "_Float16" in diag and "not supported" in diag: head = self._lacks("_Float16", _first_error(diag))
    raise CompileError(src, f"{head}: {' '.join(cmd)} failed:\n{diag}")

def cc_report() -> str:
  """The C compiler of DEV=CPU:C in one line (python3 -m baregrad): which one and why, its version, what its probe
  found and how float16 kernels hold their values."""
  cc = find_cc()
  if cc is None: return "not found ($CC unset; no clang, gcc or cc on PATH): DEV=CPU:C cannot compile"
  how = "$CC" if knobs.read("CC") else "the first of clang, gcc, cc on PATH; $CC unset"
  try: comp = ClangCompiler(cc)
  except CompileError as e: return f"{cc} ({how}): unusable: {e}"
  p = comp.probe
  half = "_Float16" if comp.half_native else "16-bit integers with exact conversions"
  if knobs.read("CC_HALF") != "auto": half += f" (CC_HALF={knobs.read('CC_HALF')})"
  elif not p.float16: half += f" (no _Float16: {p.missing('_Float16')})"
  return f"{cc} ({how}), {p.version}; {p.summary()}; float16 kernels hold {half}"

# ---------------------------------------------------------------- the CPU device's toolchain per variant
class MissingCompiler(Compiler):
  """Stands in when a variant's toolchain cannot be set up here; the device still runs loaded objects."""
  def __init__(self, reason: str) -> None:
    super().__init__(None)
    self.reason = reason
  def compile(self, src: str) -> bytes: raise CompileError(src, f"no compiler for this CPU variant: {self.reason}")

def toolchain(variant: str) -> tuple[Any, Compiler]:
  """Renderer and compiler for a CPU variant (imported on first use: codegen is heavy)."""
  import importlib
  mods = {"LLVM": ("baregrad.codegen.renderer.llvmir", "LLVMRenderer", "LLVMCompiler"),
          "C": ("baregrad.codegen.renderer.cstyle", "CRenderer", "ClangCompiler")}
  if variant not in mods: raise ValueError(f"unknown CPU variant {variant!r}; expected one of {', '.join(mods)} (e.g. DEV=CPU:C)")
  rmod, rname, cname = mods[variant]
  try:
    r, c = importlib.import_module(rmod), importlib.import_module(__name__)
    comp = getattr(c, cname)()
    # the C renderer renders for what the probe found its compiler can do
    ren = getattr(r, rname)(half_native=comp.half_native) if variant == "C" else getattr(r, rname)()
    ren.simd_lanes, ren.vector_registers = c.host_simd()   # register tiles sized for this CPU
    if variant == "LLVM": ren.stream_bytes, ren.stream_fence = c.host_stream()
    return ren, comp
  except (ImportError, CompileError, OSError) as e:  # e.g. llvmlite or a C compiler missing on this machine
    hint = "install llvmlite (python3 -m pip install -e .) or use DEV=CPU:C" if variant == "LLVM" else "install gcc or clang, or use DEV=CPU"
    return None, MissingCompiler(f"CPU:{variant} toolchain unavailable ({type(e).__name__}: {e}); {hint}")

