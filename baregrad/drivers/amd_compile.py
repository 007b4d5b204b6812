"""Compiler for AMD GPUs and the code object reader the AMD driver uses.

- AMDCompiler(arch): LLVM IR (codegen/renderer/amdgpu.py) -> HSA code object, in-process through llvmlite's AMDGPU
  target (O3, then the backend) for gfx1100 (RDNA3, wave32) or gfx942 (CDNA3, wave64).
- load_code_object(bytes) -> CodeObject: the image the driver copies into GPU memory, and per kernel the offset of
  its 64-byte kernel descriptor in that image (what an AQL packet's kernel_object points at) and the descriptor read
  back (kernarg size, segment sizes, register counts, the SGPR/VGPR setup bits, the code entry offset).
- read_kernel_descriptors(bytes): just the descriptors (`<name>.kd` symbols in .rodata), read with pyelftools.

Why no link step: LLVM's object for an amdhsa kernel is an ELF relocatable (ET_REL) code object whose only
relocation, for our kernels, is R_AMDGPU_REL64 in the kernel descriptor (its kernel_code_entry_byte_offset is
`kernel - kd`, PC-relative). Laying out the allocatable sections (.text at 256-byte alignment, the descriptors in
.rodata at 64) and applying that relocation is the whole of what ld.lld would do for the GPU's view of the object;
the rest of a linked shared object (program headers, .dynsym, .dynamic) serves ROCr's loader, which baregrad does
not use. So the code object stays the compiler's output (cached as is), lld stays uninstalled, and the relocations we
do not know (GOT, anything against an undefined symbol) are refused by name. The absolute forms (ABS32_LO/HI, ABS64)
are applied for the base address the image is placed at (`CodeObject.relocate(base)`); ours have none, so the image
is position independent (`CodeObject.position_independent`).

Instruction prefetch: LLVM pads .text with s_code_end past the last kernel (gfx10+ prefetch reads ahead of the PC),
and that padding is part of the image.
"""
from __future__ import annotations
import ctypes, functools, io, struct
from baregrad import knobs
from dataclasses import dataclass, field
from baregrad.hal import Compiler, CompileError
from baregrad.ctypes_autogen.amdgpu import hsa
from baregrad.codegen.renderer.amdgpu import AMDGPU_ARCHS
from baregrad.drivers.cpu_compile import _llvm_lock
from baregrad.drivers.vmem import round_up

TRIPLE = "amdgcn-amd-amdhsa"
# ELF e_flags EF_AMDGPU_MACH (LLVM's BinaryFormat/ELF.h; AMDGPUUsage "AMDGPU ELF Header"): the gfx target, bits 0..7
EF_AMDGPU_MACH = {0x041: "gfx1100", 0x04c: "gfx942"}
EF_AMDGPU_MACH_MASK = 0xff
EM_AMDGPU = 224
# relocation types (AMDGPUUsage "Relocation Records")
R_AMDGPU = {0: "NONE", 1: "ABS32_LO", 2: "ABS32_HI", 3: "ABS64", 4: "REL32", 5: "REL64", 6: "ABS32", 7: "GOTPCREL",
            8: "GOTPCREL32_LO", 9: "GOTPCREL32_HI", 10: "REL32_LO", 11: "REL32_HI", 13: "RELATIVE64", 14: "REL16"}
_ABSOLUTE = {1, 2, 3, 6}

class CodeObjectError(ValueError): pass

@functools.cache
def _target_machine(arch: str):
  import llvmlite.binding as llvm
  llvm.initialize_all_targets(); llvm.initialize_all_asmprinters()
  try: target = llvm.Target.from_triple(TRIPLE)
  except RuntimeError as e: raise CompileError("", f"this llvmlite has no AMDGPU target ({e})") from None
  return llvm, target.create_target_machine(cpu=arch, features="", opt=3, reloc="pic", codemodel="default")

class AMDCompiler(Compiler):
  """LLVM IR -> optimized (O3) -> HSA code object for one gfx target."""
  def __init__(self, arch: str = "gfx1100") -> None:
    if arch not in AMDGPU_ARCHS: raise CompileError("", f"AMD compiler: gfx target {arch!r} is not supported (supported: {', '.join(AMDGPU_ARCHS)})")
    self.arch = arch
    # AMD_CHECK_ARCHS=gfx942: also compile every kernel for these targets (validation only; part of the cache key)
    self.check_archs = [a for a in knobs.read("AMD_CHECK_ARCHS") if a != arch]
    for a in self.check_archs:
      if a not in AMDGPU_ARCHS: raise CompileError("", f"AMD_CHECK_ARCHS: gfx target {a!r} is not supported (supported: {', '.join(AMDGPU_ARCHS)})")
    super().__init__(f"amdgpu_{arch}" + "".join(f"+{a}" for a in self.check_archs))
  def version(self) -> str:
    import llvmlite, llvmlite.binding as llvm
    return f"llvmlite {llvmlite.__version__} LLVM {'.'.join(map(str, llvm.llvm_version_info))}"
  def _module(self, src: str, arch: str | None = None):
    llvm, tm = _target_machine(arch or self.arch)
    # the target's data layout goes in before parsing: allocas then land in its address space (5, private)
    head = f'target datalayout = "{tm.target_data}"\ntarget triple = "{TRIPLE}"\n'
    try:
      mod = llvm.parse_assembly(head + src)
      mod.verify()
    except RuntimeError as e: raise CompileError(src, f"LLVM rejected the IR: {e}") from None
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod, tm
  def compile(self, src: str) -> bytes:
    for a in self.check_archs: self._object(src, a)
    return self._object(src, self.arch)
  def _object(self, src: str, arch: str) -> bytes:
    with _llvm_lock:   # LLVM's global state is not safe to drive from several threads at once
      mod, tm = self._module(src, arch)
      try: return tm.emit_object(mod)
      except RuntimeError as e: raise CompileError(src, f"LLVM AMDGPU backend ({arch}) failed: {e}") from None
  def assembly(self, src: str) -> str:
    """LLVM's own assembly of the kernel (the instructions, the .amdhsa_kernel directives, the metadata)."""
    with _llvm_lock:
      mod, tm = self._module(src)
      return tm.emit_assembly(mod)

# ---- the kernel descriptor
_KD = hsa.amdhsa_kernel_descriptor_t
assert ctypes.sizeof(_KD) == hsa.AMDHSA_KERNEL_DESCRIPTOR_SIZE == 64

@dataclass(frozen=True)
class KernelDescriptor:
  """The 64-byte amdhsa_kernel_descriptor_t (AMDGPUUsage "Kernel Descriptor"), with its bit fields decoded."""
  group_segment_fixed_size: int
  private_segment_fixed_size: int
  kernarg_size: int
  kernel_code_entry_byte_offset: int    # from the descriptor's own address to the first instruction
  compute_pgm_rsrc1: int
  compute_pgm_rsrc2: int
  compute_pgm_rsrc3: int
  kernel_code_properties: int
  kernarg_preload: int
  raw: bytes = field(repr=False, default=b"")

  @staticmethod
  def from_bytes(b: bytes) -> KernelDescriptor:
    if len(b) != 64: raise CodeObjectError(f"a kernel descriptor is 64 bytes, got {len(b)}")
    kd = _KD.from_buffer_copy(b)
    return KernelDescriptor(kd.group_segment_fixed_size, kd.private_segment_fixed_size, kd.kernarg_size,
                            kd.kernel_code_entry_byte_offset, kd.compute_pgm_rsrc1, kd.compute_pgm_rsrc2, kd.compute_pgm_rsrc3,
                            kd.kernel_code_properties, kd.kernarg_preload, bytes(b))
  def _f(self, word: int, name: str) -> int: return getattr(hsa, name).decode(word)
  # compute_pgm_rsrc1
  @property
  def granulated_vgprs(self) -> int: return self._f(self.compute_pgm_rsrc1, "AMDHSA_RSRC1_GRANULATED_WORKITEM_VGPR_COUNT")
  @property
  def granulated_sgprs(self) -> int: return self._f(self.compute_pgm_rsrc1, "AMDHSA_RSRC1_GRANULATED_WAVEFRONT_SGPR_COUNT")
  def vgpr_count(self, arch: str) -> int:
    """VGPRs per work-item the descriptor reserves (AMDGPUUsage compute_pgm_rsrc1 GRANULATED_WORKITEM_VGPR_COUNT):
    granules of 8 on gfx942 (VGPRs and AGPRs together) and on gfx10+ in wave32, of 4 on gfx10+ in wave64."""
    return (self.granulated_vgprs + 1) * (8 if arch == "gfx942" or self.wavefront_size32 else 4)
  # compute_pgm_rsrc2
  @property
  def user_sgpr_count(self) -> int: return self._f(self.compute_pgm_rsrc2, "AMDHSA_RSRC2_USER_SGPR_COUNT")
  @property
  def enable_private_segment(self) -> bool: return bool(self._f(self.compute_pgm_rsrc2, "AMDHSA_RSRC2_ENABLE_PRIVATE_SEGMENT"))
  @property
  def enable_workgroup_id(self) -> tuple[bool, bool, bool]:
    return tuple(bool(self._f(self.compute_pgm_rsrc2, f"AMDHSA_RSRC2_ENABLE_SGPR_WORKGROUP_ID_{a}")) for a in "XYZ")  # type: ignore[return-value]
  @property
  def enable_workgroup_info(self) -> bool: return bool(self._f(self.compute_pgm_rsrc2, "AMDHSA_RSRC2_ENABLE_SGPR_WORKGROUP_INFO"))
  @property
  def enable_vgpr_workitem_id(self) -> int:
    """0: x only, 1: x and y, 2: x, y and z (in v0 packed 10:10:10 on gfx11, v0/v1/v2 before)."""
    return self._f(self.compute_pgm_rsrc2, "AMDHSA_RSRC2_ENABLE_VGPR_WORKITEM_ID")
  @property
  def granulated_lds_size(self) -> int: return self._f(self.compute_pgm_rsrc2, "AMDHSA_RSRC2_GRANULATED_LDS_SIZE")
  # kernel_code_properties
  def _kcp(self, name: str) -> bool: return bool(self._f(self.kernel_code_properties, f"AMDHSA_KCP_{name}"))
  @property
  def user_sgprs(self) -> list[str]:
    """The user SGPRs the descriptor enables, in the order the hardware loads them (AMDGPUUsage "Initial Kernel
    Execution State", SGPR register initial state: private segment buffer (4), dispatch ptr (2), queue ptr (2),
    kernarg segment ptr (2), dispatch id (2), flat scratch init (2), private segment size (1))."""
    order = [("ENABLE_SGPR_PRIVATE_SEGMENT_BUFFER", "private_segment_buffer"), ("ENABLE_SGPR_DISPATCH_PTR", "dispatch_ptr"),
             ("ENABLE_SGPR_QUEUE_PTR", "queue_ptr"), ("ENABLE_SGPR_KERNARG_SEGMENT_PTR", "kernarg_segment_ptr"),
             ("ENABLE_SGPR_DISPATCH_ID", "dispatch_id"), ("ENABLE_SGPR_FLAT_SCRATCH_INIT", "flat_scratch_init"),
             ("ENABLE_SGPR_PRIVATE_SEGMENT_SIZE", "private_segment_size")]
    return [nm for bit, nm in order if self._kcp(bit)]
  @property
  def wavefront_size32(self) -> bool: return self._kcp("ENABLE_WAVEFRONT_SIZE32")
  @property
  def uses_dynamic_stack(self) -> bool: return self._kcp("USES_DYNAMIC_STACK")

@dataclass(frozen=True)
class AMDKernel:
  name: str
  kd_offset: int        # of the descriptor in the image: kernel_object = image base + kd_offset
  code_offset: int      # of the first instruction in the image (= kd_offset + kernel_code_entry_byte_offset)
  code_size: int        # bytes of the kernel's function symbol
  descriptor: KernelDescriptor

@dataclass
class CodeObject:
  arch: str
  kernels: dict[str, AMDKernel]
  size: int                          # bytes the image needs in GPU memory (place it 256-byte aligned)
  position_independent: bool         # no absolute relocation: the image is the same at any base
  _sections: list = field(repr=False, default_factory=list)   # (name, image offset, data, is_nobits)
  _relocs: list = field(repr=False, default_factory=list)     # (image offset, type, S - base, addend, where)
  @property
  def image(self) -> bytes:
    """The image placed at address 0 (what to copy for a position-independent object)."""
    return self.relocate(0)
  def relocate(self, base: int) -> bytes:
    """The image for GPU address `base` (which must keep .text 256-byte aligned)."""
    if base % 256: raise CodeObjectError(f"code object base {base:#x} is not 256-byte aligned (.text needs 256)")
    img = bytearray(self.size)
    for _, off, data, nobits in self._sections:
      if not nobits: img[off:off + len(data)] = data
    for p, t, s, a, where in self._relocs:
      S, P = base + s, base + p
      v = {1: (S + a) & 0xffffffff, 2: ((S + a) >> 32) & 0xffffffff, 3: S + a, 6: S + a, 4: S + a - P, 5: S + a - P,
           10: (S + a - P) & 0xffffffff, 11: ((S + a - P) >> 32) & 0xffffffff}[t]
      width = 8 if t in (3, 5) else 4
      lo, hi = (-(1 << (8 * width - 1)), (1 << (8 * width)) - 1)
      if not lo <= v <= hi: raise CodeObjectError(f"relocation R_AMDGPU_{R_AMDGPU[t]} at {where}: value {v:#x} does not fit in {8 * width} bits")
      struct.pack_into("<Q" if width == 8 else "<I", img, p, v & ((1 << (8 * width)) - 1))
    return bytes(img)

def _elf(lib: bytes):
  try:
    from elftools.elf.elffile import ELFFile
    from elftools.common.exceptions import ELFError
  except ImportError as e: raise CodeObjectError("pyelftools is required to read AMD code objects (pip install pyelftools)") from e
  try:
    elf = ELFFile(io.BytesIO(lib))
    secs = list(elf.iter_sections())
  except (ELFError, struct.error, ValueError) as e: raise CodeObjectError(f"not an ELF code object: {e}") from None
  if elf["e_machine"] not in ("EM_AMDGPU", EM_AMDGPU): raise CodeObjectError(f"not an AMDGPU code object: e_machine {elf['e_machine']}")
  return elf, secs

def code_object_arch(lib: bytes) -> str:
  """The gfx target in the ELF header's e_flags (EF_AMDGPU_MACH)."""
  elf, _ = _elf(lib)
  mach = elf["e_flags"] & EF_AMDGPU_MACH_MASK
  if mach not in EF_AMDGPU_MACH:
    raise CodeObjectError(f"code object for EF_AMDGPU_MACH {mach:#x}: not a supported gfx target ({', '.join(EF_AMDGPU_MACH.values())})")
  return EF_AMDGPU_MACH[mach]

def read_kernel_descriptors(lib: bytes) -> dict[str, KernelDescriptor]:
  """{kernel name: its descriptor} from the `<name>.kd` symbols (64 bytes in .rodata), as LLVM wrote them (relocated)."""
  co = load_code_object(lib)
  return {k.name: k.descriptor for k in co.kernels.values()}

def load_code_object(lib: bytes) -> CodeObject:
  """Lay out the allocatable sections of an AMDGPU ELF code object, resolve its relocations, find its kernels."""
  from elftools.elf.relocation import RelocationSection
  from elftools.elf.sections import SymbolTableSection
  elf, secs = _elf(lib)
  arch = code_object_arch(lib)
  if elf["e_type"] not in ("ET_REL", "ET_DYN"): raise CodeObjectError(f"code object of type {elf['e_type']}: expected ET_REL or ET_DYN")
  # allocatable sections: executable first (.text needs 256-byte alignment for the code entry), then the rest
  place: dict[int, int] = {}
  sections, off = [], 0
  alloc = [(i, s) for i, s in enumerate(secs) if s["sh_flags"] & 0x2 and s["sh_type"] in ("SHT_PROGBITS", "SHT_NOBITS")]
  for i, s in sorted(alloc, key=lambda x: (not x[1]["sh_flags"] & 0x4, x[0])):
    a = max(1, s["sh_addralign"])
    if s["sh_flags"] & 0x4: a = max(a, 256)
    off = round_up(off, a)
    place[i] = off
    sections.append((s.name, off, b"" if s["sh_type"] == "SHT_NOBITS" else s.data(), s["sh_type"] == "SHT_NOBITS"))
    off += s["sh_size"]
  size = (off + 255) // 256 * 256
  symtab = next((s for s in secs if isinstance(s, SymbolTableSection) and s.name == ".symtab"), None)
  if symtab is None: raise CodeObjectError("code object has no .symtab (kernel descriptors are found by their <name>.kd symbols)")
  syms = list(symtab.iter_symbols())
  def sym_off(sym) -> tuple[int, bool]:   # (offset from the image base, or absolute value; absolute?)
    sh = sym["st_shndx"]
    if sh == "SHN_ABS": return sym["st_value"], True
    if sh == "SHN_UNDEF" or not isinstance(sh, int): raise CodeObjectError(f"symbol {sym.name!r} is undefined ({sh}): the code object needs a link step")
    if sh not in place: raise CodeObjectError(f"symbol {sym.name!r} lies in section {secs[sh].name}, which is not loaded")
    return place[sh] + sym["st_value"], False
  relocs = []
  for rs in secs:
    if not isinstance(rs, RelocationSection): continue
    tgt = rs["sh_info"]
    if tgt not in place: continue
    if not rs.is_RELA(): raise CodeObjectError(f"{rs.name}: SHT_REL relocations are not supported (LLVM writes SHT_RELA)")
    for r in rs.iter_relocations():
      t, where = r["r_info_type"], f"{secs[tgt].name}+{r['r_offset']:#x}"
      if t == 0: continue
      if t not in (1, 2, 3, 4, 5, 6, 10, 11):
        raise CodeObjectError(f"relocation R_AMDGPU_{R_AMDGPU.get(t, t)} at {where} is not supported (no GOT, no dynamic linking)")
      s, absolute = sym_off(syms[r["r_info_sym"]])
      if absolute and t not in _ABSOLUTE: raise CodeObjectError(f"PC-relative relocation at {where} against absolute symbol {syms[r['r_info_sym']].name!r}")
      relocs.append((place[tgt] + r["r_offset"], t, s, r["r_addend"], where))
  co = CodeObject(arch, {}, size, not any(t in _ABSOLUTE for _, t, *_ in relocs), sections, relocs)
  img = co.image
  funcs = {s.name: s for s in syms if s["st_info"]["type"] == "STT_FUNC"}
  for s in syms:
    if not s.name.endswith(".kd") or s["st_info"]["type"] != "STT_OBJECT": continue
    name = s.name[:-3]
    kd_off, _ = sym_off(s)
    if s["st_size"] != 64: raise CodeObjectError(f"kernel descriptor {s.name} is {s['st_size']} bytes, expected 64")
    kd = KernelDescriptor.from_bytes(img[kd_off:kd_off + 64])
    code = kd_off + kd.kernel_code_entry_byte_offset
    f = funcs.get(name)
    if f is not None and sym_off(f)[0] != code:
      raise CodeObjectError(f"{s.name}: kernel_code_entry_byte_offset points at image offset {code:#x}, the function {name} is at {sym_off(f)[0]:#x}")
    if not 0 <= code < size or code % 256: raise CodeObjectError(f"{s.name}: code entry at image offset {code:#x} is outside the image or not 256-byte aligned")
    co.kernels[name] = AMDKernel(name, kd_off, code, f["st_size"] if f is not None else 0, kd)
  if not co.kernels: raise CodeObjectError("code object has no kernel (no <name>.kd symbol)")
  return co
