"""Compilers for the CPU: LLVM IR through llvmlite (in-process, no system compiler) and C through the system C
compiler. Both produce an ELF relocatable object that drivers/elf_loader.py maps in-process."""
from __future__ import annotations
import functools, glob, os, shutil, subprocess, tempfile, threading
from typing import Any
from baregrad import knobs
from baregrad.hal import Compiler, CompileError

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

@functools.cache
def _cc() -> str | None:
  return knobs.read("CC") or shutil.which("clang") or shutil.which("gcc") or shutil.which("cc")

class ClangCompiler(Compiler):
  """C -> ELF object with the system C compiler (clang if present, else gcc), for the host CPU."""
  def __init__(self) -> None:
    if _cc() is None: raise CompileError("", "no C compiler found (looked for $CC, clang, gcc, cc): apt-get install gcc")
    super().__init__(f"cc_{os.path.basename(_cc() or '')}")
  @functools.cache
  def version(self) -> str:
    out = subprocess.run([_cc(), "--version"], capture_output=True, text=True)
    return out.stdout.splitlines()[0] if out.stdout else "unknown"
  def compile(self, src: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="baregrad_cc_") as d:
      out = os.path.join(d, "k.o")
      # IEEE floats (no -ffast-math, no contraction: fused ops are explicit, as in the LLVM renderer); wrapping ints
      cmd = [_cc(), "-c", "-x", "c", "-O2", "-march=native", "-fPIC", "-ffp-contract=off", "-fwrapv", "-fno-math-errno",
             "-fno-stack-protector", "-fno-asynchronous-unwind-tables", "-fno-exceptions", "-std=gnu11", "-", "-o", out]
      p = subprocess.run(cmd, input=src, capture_output=True, text=True)
      if p.returncode != 0: raise CompileError(src, f"{' '.join(cmd)} failed:\n{p.stderr.strip()}")
      with open(out, "rb") as f: return f.read()


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
    ren = getattr(r, rname)()
    ren.simd_lanes, ren.vector_registers = c.host_simd()   # register tiles sized for this CPU
    if variant == "LLVM": ren.stream_bytes, ren.stream_fence = c.host_stream()
    return ren, getattr(c, cname)()
  except (ImportError, CompileError, OSError) as e:  # e.g. llvmlite or a C compiler missing on this machine
    hint = "install llvmlite (python3 -m pip install -e .) or use DEV=CPU:C" if variant == "LLVM" else "install gcc or clang, or use DEV=CPU"
    return None, MissingCompiler(f"CPU:{variant} toolchain unavailable ({type(e).__name__}: {e}); {hint}")

