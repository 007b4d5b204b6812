"""Disassembly of a recorded kernel binary, done by the VIZ server when the kernel is shown (not while the script runs)."""
from __future__ import annotations
import struct

MAX_CHARS = 200_000   # a listing beyond this is cut (one that long is read in a file, not a page)
EM_X86_64, EM_AARCH64, EM_AMDGPU = 62, 183, 224   # ELF e_machine (System V ABI, elf.h)
EF_AMDGPU_MACH_GFX1100 = 0x041   # e_flags & 0xff of a gfx1100 code object (LLVM BinaryFormat/ELF.h EF_AMDGPU_MACH_AMDGCN_GFX1100)
STT_FUNC = 2

def disassemble(lib: bytes, name: str) -> str | None:
  """A listing of a compiled kernel where this machine has a disassembler for it: CPU objects (ELF x86-64 or AArch64,
  through capstone, as DEBUG=7 prints them). None for other binaries (an NV cubin needs NVIDIA's cuobjdump; the mock
  NV GPU runs PTX, which is the source); RDNA3 (gfx1100) code objects through the decoder the mock AMD GPU executes
  with (drivers/amd/isa/rdna3_decode.py, checked against LLVM's own listings)."""
  if lib[:4] != b"\x7fELF": return None
  machine = int.from_bytes(lib[18:20], "little")
  if machine == EM_AMDGPU: return _amdgpu(lib, name)
  if machine not in (EM_X86_64, EM_AARCH64): return None
  try:
    from baregrad.drivers.elf_loader import disassemble as dis
    text = dis(lib, name, name=f"kernel {name}")
  except Exception as e:  # noqa: BLE001  (capstone missing, or an object it cannot read: the page says so)
    return f"(not disassembled: {type(e).__name__}: {e})"
  return text if len(text) <= MAX_CHARS else text[:MAX_CHARS] + "\n... (cut)"

def _sections(lib: bytes) -> dict[str, tuple[int, int, int, int, int]]:
  """ELF64 little-endian section headers by name: (type, offset, size, link, entsize)."""
  shoff, = struct.unpack_from("<Q", lib, 0x28)
  shentsize, shnum, shstrndx = struct.unpack_from("<HHH", lib, 0x3A)
  hdr = [struct.unpack_from("<IIQQQQIIQQ", lib, shoff + i * shentsize) for i in range(shnum)]
  names = hdr[shstrndx]
  def cstr(off: int) -> str: return lib[off:lib.index(b"\0", off)].decode()
  return {cstr(names[4] + h[0]): (h[1], h[4], h[5], h[6], h[9]) for h in hdr}

def _amdgpu(lib: bytes, name: str) -> str | None:
  """The kernel's instructions of a gfx1100 code object (its FUNC symbol's bytes in .text), as LLVM prints them."""
  if len(lib) < 0x40 or lib[0x30] != EF_AMDGPU_MACH_GFX1100: return None   # e_flags' low byte: gfx942 (CDNA3) has no decoder here
  try:
    from baregrad.drivers.amd.isa.rdna3_decode import disassemble as dis
    secs = _sections(lib)
    _, text_off, text_size, _, _ = secs[".text"]
    _, sym_off, sym_size, _, _ = secs[".symtab"]
    _, str_off, _, _, _ = secs[".strtab"]
    start, size = 0, text_size
    for o in range(sym_off, sym_off + sym_size, 24):   # Elf64_Sym: name, info, other, shndx, value, size
      st_name, info, _, _, value, sz = struct.unpack_from("<IBBHQQ", lib, o)
      if info & 0xF == STT_FUNC and lib[str_off + st_name:lib.index(b"\0", str_off + st_name)].decode() == name: start, size = value, sz
    code = lib[text_off:text_off + text_size]
    return f".text:{name}:\n" + "\n".join(f"  {i.offset:6x}:  {i.encoding_hex:<20s} {i.text()}" for i in dis(code, start, start + size))
  except Exception as e:  # noqa: BLE001  (an object this decoder cannot read: the page says why)
    return f"(not disassembled: {type(e).__name__}: {e})"
