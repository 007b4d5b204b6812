"""Compilers for NVIDIA GPUs and the cubin reader the NV driver uses.

- PTXCompiler: PTX text (codegen/renderer/ptx.py) -> cubin with `ptxas`.
  Why ptxas rather than nvJitLink/the driver's JIT: there is no shared library to bind (nvJitLink and libcuda's
  cuModuleLoadData are C libraries we would have to dlopen, and libcuda is exactly what baregrad avoids); ptxas is
  the same standalone assembler NVIDIA's driver-less flows (nvcc -cubin, offline AOT builds) run; and it is on this
  image (/usr/local/cuda/bin/ptxas), or comes with the `nvidia-cuda-nvcc` pip wheel.
- CUDACompiler: CUDA C (codegen/renderer/cuda.py) -> cubin with `nvcc -cubin` when nvcc is installed (NVRTC later).
- parse_cubin(bytes) -> dict: what a QMD needs from a cubin (code, registers, shared memory, parameter bank).
"""
from __future__ import annotations
import functools, glob, os, re, shutil, struct, subprocess, tempfile
from typing import Any
from baregrad import knobs
from baregrad.hal import Compiler, CompileError

def _wheel_tool(tool: str) -> str | None:
  """The tool from NVIDIA's pip wheels: nvidia/cuda_nvcc/bin (nvidia-cuda-nvcc-cu12), or another nvidia/*/bin."""
  try:
    import nvidia  # type: ignore[import-not-found]  # namespace package of NVIDIA's wheels
  except ImportError: return None
  for base in list(getattr(nvidia, "__path__", [])):
    for p in [os.path.join(base, "cuda_nvcc", "bin", tool)] + sorted(glob.glob(os.path.join(base, "*", "bin", tool))):
      if os.path.isfile(p) and os.access(p, os.X_OK): return p
  return None

@functools.cache
def find_tool(tool: str) -> str | None:
  """$PTXAS/$NVCC, then PATH, then /usr/local/cuda*/bin, then the nvidia-cuda-nvcc wheel."""
  env = knobs.read(tool.upper())
  if env: return env
  if (p := shutil.which(tool)) is not None: return p
  for d in sorted(glob.glob("/usr/local/cuda*/bin"), reverse=True):
    if os.access(p := os.path.join(d, tool), os.X_OK): return p
  return _wheel_tool(tool)

def find_ptxas() -> str | None: return find_tool("ptxas")
def find_nvcc() -> str | None: return find_tool("nvcc")

@functools.cache
def _tool_version(path: str) -> str:
  out = subprocess.run([path, "--version"], capture_output=True, text=True)
  lines = [l for l in out.stdout.splitlines() if l.strip()]
  return lines[-1] if lines else "unknown"

def _run(cmd: list[str], src: str, what: str) -> None:
  p = subprocess.run(cmd, capture_output=True, text=True)
  if p.returncode != 0: raise CompileError(src, f"{what} failed ({' '.join(cmd)}):\n{(p.stderr or p.stdout).strip()}")

class PTXCompiler(Compiler):
  """PTX -> cubin (ELF) with ptxas for one architecture (`sm_90` by default). -O3 is ptxas's default."""
  def __init__(self, arch: str = "sm_90") -> None:
    self.arch, self.ptxas = arch, find_ptxas()
    if self.ptxas is None:
      raise CompileError("", "ptxas not found (looked at $PTXAS, PATH, /usr/local/cuda*/bin, the nvidia-cuda-nvcc wheel): "
                             "install the CUDA toolkit or `pip install nvidia-cuda-nvcc-cu12`")
    # PTX_CHECK_ARCHS=sm_80,sm_89: also assemble every kernel for these targets (validation only; part of the cache key)
    # (not for an arch-specific target such as sm_90a: its kernels may use instructions only that target has, wgmma)
    self.check_archs = [] if arch.endswith("a") else [a for a in knobs.read("PTX_CHECK_ARCHS") if a != arch]
    super().__init__(f"ptxas_{arch}" + "".join(f"+{a}" for a in self.check_archs))
  def version(self) -> str: return _tool_version(self.ptxas or "")
  def compile(self, src: str) -> bytes:
    for a in self.check_archs: self._assemble(src, a)
    return self._assemble(src, self.arch)
  def _assemble(self, src: str, arch: str) -> bytes:
    # the PTX's own .target must agree with -arch, or ptxas refuses it; rewrite it so one renderer serves any arch
    src = re.sub(r"^\.target\s+\S+", f".target {arch}", src, count=1, flags=re.M)
    from baregrad.codegen.renderer.ptx import ptx_version
    if (m := re.search(r"^\.version\s+(\d+)\.(\d+)", src, re.M)) is not None:   # and a newer target may need a newer ISA
      need = tuple(map(int, ptx_version(arch).split(".")))
      if (int(m.group(1)), int(m.group(2))) < need: src = src[:m.start()] + f".version {need[0]}.{need[1]}" + src[m.end():]
    with tempfile.TemporaryDirectory(prefix="baregrad_ptxas_") as d:
      inp, out = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
      with open(inp, "w") as f: f.write(src)
      _run([self.ptxas or "ptxas", f"-arch={arch}", "-o", out, inp], src, f"ptxas -arch={arch}")
      with open(out, "rb") as f: return f.read()

class CUDACompiler(Compiler):
  """CUDA C -> cubin with `nvcc -cubin` (IEEE floats: no fast math, no fma contraction, as the other renderers)."""
  def __init__(self, arch: str = "sm_80") -> None:
    self.arch, self.nvcc = arch, find_nvcc()
    if self.nvcc is None: raise CompileError("", "nvcc not found (looked at $NVCC, PATH, /usr/local/cuda*/bin): install the CUDA toolkit")
    super().__init__(f"nvcc_{arch}")
  def version(self) -> str: return _tool_version(self.nvcc or "")
  def compile(self, src: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="baregrad_nvcc_") as d:
      inp, out = os.path.join(d, "k.cu"), os.path.join(d, "k.cubin")
      with open(inp, "w") as f: f.write(src)
      _run([self.nvcc or "nvcc", "-cubin", f"-arch={self.arch}", "-fmad=false", "-O3", "-o", out, inp], src, "nvcc")
      with open(out, "rb") as f: return f.read()

# ---- cubin reading
# .nv.info attribute numbers (EIATTR_*). NVIDIA does not publish them; these are the values cuobjdump prints and that
# public tools agree on: CuAssembler (cloudcores/CuAssembler, CuAsm/CuNVInfo.py, EIATTR table keyed attr<<8|format),
# ZLUDA's cubin dumper, and tinygrad's ops_nv.py (0x1204 = EIATTR_MIN_STACK_SIZE). Each entry is
# u8 format, u8 attribute, then: NVAL (1) u16 padding; BVAL (2) / HVAL (3) a u16 value; SVAL (4) u16 size + payload.
EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL, EIFMT_SVAL = 1, 2, 3, 4
EIATTR = {0x01: "CTAIDZ_USED", 0x05: "MAX_THREADS", 0x0a: "PARAM_CBANK", 0x0f: "EXTERNS", 0x10: "REQNTID",
          0x11: "FRAME_SIZE", 0x12: "MIN_STACK_SIZE", 0x17: "KPARAM_INFO", 0x19: "CBANK_PARAM_SIZE", 0x1b: "MAXREG_COUNT",
          0x1c: "EXIT_INSTR_OFFSETS", 0x1d: "S2RCTAID_INSTR_OFFSETS", 0x1e: "CRS_STACK_SIZE", 0x23: "MAX_STACK_SIZE",
          0x2f: "REGCOUNT", 0x36: "SW_WAR", 0x37: "CUDA_API_VERSION"}

class CubinError(ValueError): pass

def parse_nv_info(data: bytes) -> list[tuple[int, int, bytes | int | None]]:
  """(format, attribute, value) per entry; SVAL values are the raw payload bytes, HVAL/BVAL the u16."""
  out, off = [], 0
  while off + 4 <= len(data):
    fmt, attr, h = struct.unpack_from("<BBH", data, off); off += 4
    if fmt == EIFMT_SVAL:
      if off + h > len(data): raise CubinError(f".nv.info: attribute 0x{attr:02x} says {h} bytes, only {len(data) - off} left")
      out.append((fmt, attr, bytes(data[off:off + h]))); off += h
    elif fmt in (EIFMT_BVAL, EIFMT_HVAL): out.append((fmt, attr, h))
    elif fmt == EIFMT_NVAL: out.append((fmt, attr, None))
    else: raise CubinError(f".nv.info: unknown format {fmt} at offset {off - 4}")
  return out

def parse_cubin(lib: bytes) -> dict:
  """The facts a launch needs from a cubin, per kernel:
    {name: {"code": bytes of .text.<name>, "code_offset": its file offset, "regs": EIATTR_REGCOUNT (without it, the
     count in .text's sh_info >> 24, kept as "text_regs": ptxas 13 fills that for sm_80/89 and leaves 0 for sm_90),
     "shared": static shared memory (.nv.shared.<name> size), "frame": EIATTR_FRAME_SIZE,
     "min_stack": EIATTR_MIN_STACK_SIZE, "param_cbank": (offset, size) of the parameters in constant bank 0,
     "params": [(ordinal, offset, size)], "max_threads": (x, y, z) or None, "reqntid": ..., "cbank0_size": size of
     .nv.constant0.<name>, "attrs": raw attribute list}} plus "arch": "sm_XX" from e_flags."""
  import io
  try:
    from elftools.elf.elffile import ELFFile
    from elftools.common.exceptions import ELFError
  except ImportError as e: raise CubinError("pyelftools is required to read cubins (pip install pyelftools)") from e
  try:
    elf = ELFFile(io.BytesIO(lib))
    secs = list(elf.iter_sections())
    symtab = elf.get_section_by_name(".symtab")
    syms = list(symtab.iter_symbols()) if symtab is not None else []
  except (ELFError, struct.error, ValueError) as e: raise CubinError(f"not a cubin: {e}") from None
  if elf["e_machine"] not in ("EM_CUDA", 190): raise CubinError(f"not a CUDA ELF: e_machine {elf['e_machine']}")
  flags = elf["e_flags"]
  # e_flags: the SM version sits in bits 8..15 for ELF ABI v7 (CUDA 12+ with sm_90+ uses bits 8..15 too); older 0..7
  sm = (flags >> 8) & 0xff or flags & 0xff
  res: dict = {"arch": f"sm_{sm}", "kernels": {}}
  kernels = res["kernels"]
  for s in secs:
    if s.name.startswith(".text."):
      nm = s.name[len(".text."):]
      kernels[nm] = {"code": s.data(), "code_offset": s["sh_offset"], "regs": s["sh_info"] >> 24, "text_regs": s["sh_info"] >> 24, "shared": 0, "frame": 0,
                     "min_stack": 0, "param_cbank": None, "params": [], "max_threads": None, "reqntid": None,
                     "cbank0_size": 0, "attrs": []}
  def by_sym(idx: int) -> str | None:
    if 0 <= idx < len(syms):
      n = syms[idx].name
      return n if n in kernels else None
    return None
  for s in secs:
    if s.name.startswith(".nv.shared.") and (k := kernels.get(s.name[len(".nv.shared."):])) is not None: k["shared"] = s["sh_size"]
    if s.name.startswith(".nv.constant0.") and (k := kernels.get(s.name[len(".nv.constant0."):])) is not None: k["cbank0_size"] = s["sh_size"]
  for s in secs:
    if s.name == ".nv.info":  # attributes of every function, keyed by symbol index
      for fmt, attr, val in parse_nv_info(s.data()):
        if fmt != EIFMT_SVAL or not isinstance(val, bytes) or len(val) < 8: continue
        sym, v = struct.unpack_from("<II", val)
        if (nm := by_sym(sym)) is None: continue
        key = {0x2f: "regs", 0x11: "frame", 0x12: "min_stack", 0x23: "max_stack"}.get(attr)
        if key is not None: kernels[nm][key] = v
    elif s.name.startswith(".nv.info.") and (k := kernels.get(s.name[len(".nv.info."):])) is not None:
      for fmt, attr, val in parse_nv_info(s.data()):
        k["attrs"].append((EIATTR.get(attr, f"0x{attr:02x}"), val))
        if attr == 0x0a and isinstance(val, bytes):    # PARAM_CBANK: symbol, u16 offset, u16 size
          _, off, sz = struct.unpack_from("<IHH", val); k["param_cbank"] = (off, sz)
        elif attr == 0x17 and isinstance(val, bytes):  # KPARAM_INFO: index, u16 ordinal, u16 offset, u32 flags
          _, ordinal, off, fl = struct.unpack_from("<IHHI", val)
          k["params"].append((ordinal, off, (fl >> 18) & 0x3fff))
        elif attr == 0x19: k["cbank_param_size"] = val
        elif attr == 0x1b: k["maxreg"] = val
        elif attr in (0x05, 0x10) and isinstance(val, bytes) and len(val) >= 12:
          k["max_threads" if attr == 0x05 else "reqntid"] = struct.unpack_from("<III", val)
        elif attr == 0x1c and isinstance(val, bytes): k["exit_offsets"] = list(struct.unpack(f"<{len(val) // 4}I", val))
  for k in kernels.values(): k["params"].sort()
  return res

# ---------------------------------------------------------------- what the NV driver loads
LIB_MAGIC = b"BGNVLIB1"

def pack_lib(ptx: str, cubin: bytes) -> bytes:
  """What NVCompiler produces: the cubin (the GPU's code) and the PTX it came from (what the mock GPU runs)."""
  t = ptx.encode()
  return LIB_MAGIC + struct.pack("<II", len(cubin), len(t)) + cubin + t

def unpack_lib(lib: bytes) -> tuple[str, bytes]:
  """(PTX text, cubin or b"") from NVCompiler output, or from plain PTX text."""
  if lib.startswith(LIB_MAGIC):
    nc, nt = struct.unpack_from("<II", lib, len(LIB_MAGIC))
    o = len(LIB_MAGIC) + 8
    return lib[o + nc:o + nc + nt].decode(), lib[o:o + nc]
  text = lib.decode(errors="replace")
  if ".entry" not in text: raise ValueError("NV program: expected NVCompiler output or PTX text (no .entry found)")
  return text, b""

class NVCompiler(Compiler):
  """PTX -> NVCompiler output (cubin from ptxas + the PTX); PTX alone when ptxas is missing (the mock runs it)."""
  def __init__(self, arch: str) -> None:
    try: self.ptxas: Any = PTXCompiler(arch)
    except CompileError as e: self.ptxas, self.reason = None, str(e)
    self.arch = arch
    super().__init__(f"nv_{arch}_{'ptxas' if self.ptxas is not None else 'ptxonly'}")
  def version(self) -> str: return self.ptxas.version() if self.ptxas is not None else "ptx-only"
  def compile(self, src: str) -> bytes: return pack_lib(src, self.ptxas.compile(src) if self.ptxas is not None else b"")
