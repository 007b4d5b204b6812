"""AMD programs: HSA code objects (AMDGPU ELF) read with pyelftools, laid out and relocated for a GPU address, their
kernel descriptors and kernel-argument layouts (the NT_AMDGPU_METADATA note, MessagePack), and the kernel arguments
(explicit, then the hidden ones code object v5+ kernels read: block counts, group sizes, grid dims, apertures).

Sources: LLVM AMDGPUUsage (code object v4-v6 metadata, kernel descriptor, relocation types), the ELF gABI."""
from __future__ import annotations
import ctypes, io, struct
from dataclasses import dataclass, field
from typing import Any, Sequence
from baregrad.hcq import HCQArgsState, HCQProgram
from baregrad.ctypes_autogen.amdgpu import hsa

EM_AMDGPU = 224
NT_AMDGPU_METADATA = 32
# LLVM's ELFRelocs/AMDGPU.def
R_AMDGPU_NONE, R_AMDGPU_ABS32_LO, R_AMDGPU_ABS32_HI, R_AMDGPU_ABS64, R_AMDGPU_REL32, R_AMDGPU_REL64 = 0, 1, 2, 3, 4, 5
R_AMDGPU_ABS32, R_AMDGPU_REL32_LO, R_AMDGPU_REL32_HI, R_AMDGPU_RELATIVE64 = 6, 10, 11, 13
# EF_AMDGPU_MACH (bits 7:0 of e_flags), the targets this driver knows
EF_AMDGPU_MACH = {0x041: "gfx1100", 0x04c: "gfx942"}

class CodeObjectError(ValueError):
  """The code object cannot be used: names what is wrong with it."""

def msgpack_unpack(data: bytes) -> Any:
  """A MessagePack document (the subset AMDGPU metadata uses: maps, arrays, strings, ints, bools, nil, floats, bins)."""
  buf = io.BytesIO(data)
  def rd(n: int) -> bytes:
    b = buf.read(n)
    if len(b) != n: raise CodeObjectError("truncated MessagePack metadata")
    return b
  def obj() -> Any:
    t = rd(1)[0]
    if t <= 0x7f: return t
    if t >= 0xe0: return t - 0x100
    if 0x80 <= t <= 0x8f: return {obj(): obj() for _ in range(t & 0xf)}
    if 0x90 <= t <= 0x9f: return [obj() for _ in range(t & 0xf)]
    if 0xa0 <= t <= 0xbf: return rd(t & 0x1f).decode()
    fixed = {0xc0: None, 0xc2: False, 0xc3: True}
    if t in fixed: return fixed[t]
    ints = {0xcc: ">B", 0xcd: ">H", 0xce: ">I", 0xcf: ">Q", 0xd0: ">b", 0xd1: ">h", 0xd2: ">i", 0xd3: ">q", 0xca: ">f", 0xcb: ">d"}
    if t in ints: return struct.unpack(ints[t], rd(struct.calcsize(ints[t])))[0]
    if t in (0xd9, 0xda, 0xdb): return rd(struct.unpack({0xd9: ">B", 0xda: ">H", 0xdb: ">I"}[t], rd({0xd9: 1, 0xda: 2, 0xdb: 4}[t]))[0]).decode()
    if t in (0xc4, 0xc5, 0xc6): return rd(struct.unpack({0xc4: ">B", 0xc5: ">H", 0xc6: ">I"}[t], rd({0xc4: 1, 0xc5: 2, 0xc6: 4}[t]))[0])
    if t in (0xdc, 0xdd): return [obj() for _ in range(struct.unpack(">H" if t == 0xdc else ">I", rd(2 if t == 0xdc else 4))[0])]
    if t in (0xde, 0xdf):
      n = struct.unpack(">H" if t == 0xde else ">I", rd(2 if t == 0xde else 4))[0]
      return {obj(): obj() for _ in range(n)}
    raise CodeObjectError(f"MessagePack type byte {t:#x} is not used by AMDGPU metadata")
  return obj()

@dataclass
class KernelInfo:
  """One kernel of a code object: where its descriptor is in the image, the descriptor's fields, its arguments."""
  name: str
  kd_offset: int
  group_segment_size: int
  private_segment_size: int
  kernarg_size: int
  kernarg_align: int
  wavefront_size: int
  args: list[dict] = field(default_factory=list)   # metadata .args: .offset, .size, .value_kind, ...
  rsrc: tuple[int, int, int, int] = (0, 0, 0, 0)    # compute_pgm_rsrc1, rsrc2, rsrc3, kernel_code_properties

@dataclass
class CodeObject:
  """A loaded-image view of an AMDGPU ELF: `image(base)` gives the bytes to put at GPU address `base`."""
  target: str
  size: int
  kernels: dict[str, KernelInfo]
  _segments: list[tuple[int, bytes]]
  _relocs: list[tuple[int, int, int, int]]   # (image offset, type, symbol image offset or 0, addend)
  metadata: dict

  def image(self, base: int) -> bytes:
    img = bytearray(self.size)
    for off, data in self._segments: img[off:off + len(data)] = data
    for off, typ, sym, add in self._relocs:
      s, p = base + sym, base + off
      if typ == R_AMDGPU_RELATIVE64: struct.pack_into("<Q", img, off, (base + add) & (2**64 - 1))
      elif typ == R_AMDGPU_ABS64: struct.pack_into("<Q", img, off, (s + add) & (2**64 - 1))
      elif typ == R_AMDGPU_REL64: struct.pack_into("<Q", img, off, (s + add - p) & (2**64 - 1))
      elif typ in (R_AMDGPU_ABS32, R_AMDGPU_ABS32_LO): struct.pack_into("<I", img, off, (s + add) & 0xFFFFFFFF)
      elif typ == R_AMDGPU_ABS32_HI: struct.pack_into("<I", img, off, ((s + add) >> 32) & 0xFFFFFFFF)
      elif typ in (R_AMDGPU_REL32, R_AMDGPU_REL32_LO): struct.pack_into("<I", img, off, (s + add - p) & 0xFFFFFFFF)
      elif typ == R_AMDGPU_REL32_HI: struct.pack_into("<I", img, off, ((s + add - p) >> 32) & 0xFFFFFFFF)
    return bytes(img)

  def kernel(self, name: str) -> KernelInfo:
    k = self.kernels.get(name)
    if k is None: raise CodeObjectError(f"the code object has no kernel {name!r}; it has {', '.join(sorted(self.kernels)) or 'none'}")
    return k

def parse_code_object(lib: bytes) -> CodeObject:
  """Read an AMDGPU ELF (a linked HSA code object, ET_DYN, or a relocatable object, ET_REL) into a CodeObject."""
  from elftools.elf.elffile import ELFFile
  from elftools.common.exceptions import ELFError
  try: elf = ELFFile(io.BytesIO(lib))
  except ELFError as e: raise CodeObjectError(f"not an ELF file: {e}") from None
  if elf["e_machine"] != "EM_AMDGPU" and elf.header["e_machine"] != EM_AMDGPU:
    raise CodeObjectError(f"ELF machine {elf['e_machine']} is not AMDGPU (EM_AMDGPU = {EM_AMDGPU})")
  meta: dict = {}
  for sec in elf.iter_sections():
    if sec["sh_type"] != "SHT_NOTE": continue
    for n in sec.iter_notes():
      if n["n_name"] == "AMDGPU" and n["n_type"] in (NT_AMDGPU_METADATA, "NT_AMDGPU_METADATA"):
        desc = n["n_descdata"]
        meta = msgpack_unpack(desc if isinstance(desc, bytes) else desc.encode("latin-1"))
  target = ""
  if meta.get("amdhsa.target"): target = meta["amdhsa.target"].split("--")[-1].split(":")[0]
  if not target: target = EF_AMDGPU_MACH.get(elf.header["e_flags"] & 0xFF, f"mach {elf.header['e_flags'] & 0xFF:#x}")
  segments: list[tuple[int, bytes]] = []
  relocs: list[tuple[int, int, int, int]] = []
  symaddr: dict[int, int] = {}   # (for ET_REL) section index -> image offset
  symtab = elf.get_section_by_name(".symtab") or elf.get_section_by_name(".dynsym")
  if elf["e_type"] == "ET_DYN":
    size = 0
    for seg in elf.iter_segments():
      if seg["p_type"] == "PT_LOAD":
        segments.append((seg["p_vaddr"], seg.data()))
        size = max(size, seg["p_vaddr"] + seg["p_memsz"])
    def sym_off(s: Any) -> int: return s["st_value"]
  elif elf["e_type"] == "ET_REL":
    off = 0
    for i, sec in enumerate(elf.iter_sections()):
      if sec["sh_flags"] & 2 and sec["sh_size"]:  # SHF_ALLOC
        a = max(sec["sh_addralign"], 1)
        off = (off + a - 1) // a * a
        symaddr[i] = off
        if sec["sh_type"] != "SHT_NOBITS": segments.append((off, sec.data()))
        off += sec["sh_size"]
    size = off
    def sym_off(s: Any) -> int:
      shn = s["st_shndx"]
      if not isinstance(shn, int) or shn not in symaddr: raise CodeObjectError(f"symbol {s.name!r} is undefined or not in a loaded section")
      return symaddr[shn] + s["st_value"]
  else: raise CodeObjectError(f"ELF type {elf['e_type']}: expected a shared object (ET_DYN) or a relocatable object (ET_REL)")
  # relocations
  for sec in elf.iter_sections():
    if sec["sh_type"] == "SHT_REL": raise CodeObjectError(f"section {sec.name}: SHT_REL relocations are not used by AMDGPU code objects")
    if sec["sh_type"] != "SHT_RELA": continue
    target_off = 0
    if elf["e_type"] == "ET_REL":
      tgt = sec["sh_info"]
      if tgt not in symaddr: continue   # relocations of a section that is not loaded (debug info)
      target_off = symaddr[tgt]
    st = elf.get_section(sec["sh_link"]) if sec["sh_link"] else None
    for r in sec.iter_relocations():
      typ, si = r["r_info_type"], r["r_info_sym"]
      if typ == R_AMDGPU_NONE: continue
      if typ not in (R_AMDGPU_RELATIVE64, R_AMDGPU_ABS64, R_AMDGPU_REL64, R_AMDGPU_ABS32, R_AMDGPU_ABS32_LO, R_AMDGPU_ABS32_HI,
                     R_AMDGPU_REL32, R_AMDGPU_REL32_LO, R_AMDGPU_REL32_HI):
        raise CodeObjectError(f"relocation type {typ} in {sec.name} is not supported (GOT and other dynamic relocations)")
      s = 0
      if si and st is not None:
        sym = st.get_symbol(si)
        if sym["st_shndx"] == "SHN_UNDEF": raise CodeObjectError(f"{sec.name}: undefined symbol {sym.name!r} (code objects must be self-contained)")
        s = sym_off(sym)
      relocs.append((target_off + r["r_offset"], typ, s, r["r_addend"]))
  # kernels: metadata first, descriptors from the symbol table
  syms = {s.name: s for s in symtab.iter_symbols()} if symtab is not None else {}
  kernels: dict[str, KernelInfo] = {}
  mk = {k.get(".name"): k for k in meta.get("amdhsa.kernels", [])}
  for name, sym in syms.items():
    if not name.endswith(".kd") or sym["st_info"]["type"] != "STT_OBJECT": continue
    kname = name[:-3]
    off = sym_off(sym)
    kd_bytes = bytearray(64)
    for soff, data in segments:
      lo, hi = max(off, soff), min(off + 64, soff + len(data))
      if lo < hi: kd_bytes[lo - off:hi - off] = data[lo - soff:hi - soff]
    kd = hsa.amdhsa_kernel_descriptor_t.from_buffer_copy(bytes(kd_bytes))
    m = mk.get(kname, {})
    kernels[kname] = KernelInfo(kname, off, kd.group_segment_fixed_size, kd.private_segment_fixed_size, kd.kernarg_size,
                                m.get(".kernarg_segment_align", 16), m.get(".wavefront_size", 64 if target.startswith("gfx9") else 32),
                                list(m.get(".args", [])), (kd.compute_pgm_rsrc1, kd.compute_pgm_rsrc2, kd.compute_pgm_rsrc3, kd.kernel_code_properties))
  return CodeObject(target, max(size, 1), kernels, segments, relocs, meta)

# hidden argument kinds (code object v5) -> what fills them; sizes come from the metadata
def _hidden_value(kind: str, gs: tuple[int, int, int], ls: tuple[int, int, int], dev: Any) -> int | None:
  ax = {"x": 0, "y": 1, "z": 2}
  if kind.startswith("hidden_block_count_"): return gs[ax[kind[-1]]]
  if kind.startswith("hidden_group_size_"): return ls[ax[kind[-1]]]
  if kind.startswith("hidden_remainder_"): return 0        # grids are whole workgroups
  if kind.startswith("hidden_global_offset_"): return 0
  if kind == "hidden_grid_dims": return 3 if gs[2] * ls[2] > 1 else 2 if gs[1] * ls[1] > 1 else 1
  if kind == "hidden_shared_base": return dev.apertures["lds_base"] >> 32
  if kind == "hidden_private_base": return dev.apertures["scratch_base"] >> 32
  if kind == "hidden_dynamic_lds_size": return 0
  if kind == "hidden_queue_ptr": return dev.amd_queue_va   # the amd_queue_t of the compute queue (as ROCr passes it)
  return None

class AMDArgsState(HCQArgsState):
  """The kernarg segment: explicit arguments at the offsets the metadata gives, hidden ones filled per launch."""
  def __init__(self, cpu_addr: int, va_addr: int, prg: "AMDProgram", bufs: Sequence[Any], vals: Sequence[int]) -> None:
    super().__init__(cpu_addr, va_addr, prg, bufs, vals)
    self.grid, self.block = (1, 1, 1), (1, 1, 1)
    explicit = prg.explicit_args
    if len(self.bufs) + len(self.vals) != len(explicit):
      raise ValueError(f"{prg.name} takes {len(explicit)} explicit arguments, got {len(self.bufs)} buffers and {len(self.vals)} values")
    ctypes.memset(cpu_addr, 0, prg.kernarg_size)
    for i, b in enumerate(self.bufs): self._put(i, b.va_addr)
    for i, v in enumerate(self.vals): self._put(len(self.bufs) + i, v)
  def _put(self, i: int, v: int) -> None:
    off, sz = self.prg.explicit_args[i]
    ctypes.memmove(self.cpu_addr + off, (v & ((1 << (8 * sz)) - 1)).to_bytes(sz, "little"), sz)
  def update_buffer(self, i: int, addr: int) -> None:
    if not 0 <= i < len(self.bufs): raise IndexError(f"buffer {i} out of range: kernel has {len(self.bufs)} buffers")
    self._put(i, addr)
  def update_var(self, i: int, value: int) -> None:
    if not 0 <= i < len(self.vals): raise IndexError(f"var {i} out of range: kernel has {len(self.vals)} vars")
    self._put(len(self.bufs) + i, value)
  def write_launch(self, gs: tuple[int, int, int], ls: tuple[int, int, int]) -> None:
    """The hidden arguments that depend on the launch size (and a check of the sizes the dispatch packet can carry)."""
    n = ls[0] * ls[1] * ls[2]
    if not 0 < n <= 1024: raise ValueError(f"local_size {ls}: 1..1024 work-items per workgroup")
    if any(g == 0 for g in gs): raise ValueError(f"global_size {gs} is empty")
    if any(g * l >= 1 << 32 for g, l in zip(gs, ls)): raise ValueError(f"grid {gs} x {ls} exceeds 2**32 work-items in a dimension")
    self.grid, self.block = gs, ls
    for kind, off, sz in self.prg.hidden_args:
      v = _hidden_value(kind, gs, ls, self.prg.dev)
      if v is not None: ctypes.memmove(self.cpu_addr + off, (v & ((1 << (8 * sz)) - 1)).to_bytes(sz, "little"), sz)

class AMDProgram(HCQProgram):
  """A kernel of an HSA code object, loaded into GPU memory; calling it dispatches an AQL packet."""
  args_state_t = AMDArgsState
  def __init__(self, dev: Any, name: str, lib: bytes) -> None:
    super().__init__(dev, name, lib)
    co = parse_code_object(lib)
    if co.target != dev.target.name:
      raise CodeObjectError(f"AMD program {name}: the code object is for {co.target}, this GPU is {dev.target.name}")
    k = co.kernel(name)
    self.info = k
    if k.private_segment_size:
      raise NotImplementedError(f"AMD program {name} needs {k.private_segment_size} bytes of scratch per work-item; this driver does not "
                                f"set up queue scratch memory yet (compile without stack/spills)")
    if k.wavefront_size != dev.target.wave_size:
      raise CodeObjectError(f"AMD program {name} is compiled for wave{k.wavefront_size}; {dev.target.name} runs wave{dev.target.wave_size}")
    self.group_segment_size, self.private_segment_size = k.group_segment_size, k.private_segment_size
    if self.group_segment_size > dev.max_shared_mem:
      raise ValueError(f"AMD program {name} uses {self.group_segment_size} bytes of LDS; {dev.target.name} has {dev.max_shared_mem} per workgroup")
    exp, hid = [], []
    for a in sorted(k.args, key=lambda a: a.get(".offset", 0)):
      kind = a.get(".value_kind", "by_value")
      if kind.startswith("hidden_"): hid.append((kind, a[".offset"], a[".size"]))
      else: exp.append((a[".offset"], a[".size"]))
    if not k.args and k.kernarg_size:  # no metadata: 8-byte arguments from offset 0
      exp = [(8 * i, 8) for i in range(k.kernarg_size // 8)]
    self.explicit_args, self.hidden_args = exp, hid
    self.kernarg_size = max(k.kernarg_size, max((o + s for o, s in exp), default=0), max((o + s for _, o, s in hid), default=0), 1)
    # the image in VRAM the CPU can write (large BAR), a page of slack after it (instruction prefetch)
    self.image = dev._gpu_alloc(co.size + 4096, "vram", cpu_access=True)
    img = co.image(self.image.va)
    ctypes.memmove(self.image.cpu, img, len(img))
    dev.hdp_flush()
    self.kd_va = self.image.va + k.kd_offset
  def kernargs_size(self, nbufs: int, nvals: int) -> int: return (self.kernarg_size + 63) & ~63
  def __del__(self) -> None:
    try:
      if not self.dev.closed:
        self.dev.synchronize()
        self.dev._gpu_free(self.image)
    except Exception: pass
