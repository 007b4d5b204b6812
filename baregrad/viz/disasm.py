"""Disassembly of a recorded kernel binary, done by the VIZ server when the kernel is shown (not while the script runs)."""
from __future__ import annotations

MAX_CHARS = 200_000   # a listing beyond this is cut (one that long is read in a file, not a page)
EM_X86_64, EM_AARCH64 = 62, 183   # ELF e_machine (System V ABI, elf.h)

def disassemble(lib: bytes, name: str) -> str | None:
  """A listing of a compiled kernel where this machine has a disassembler for it: CPU objects (ELF x86-64 or AArch64,
  through capstone, as DEBUG=7 prints them). None for other binaries (an NV cubin needs NVIDIA's cuobjdump; the mock
  NV GPU runs PTX, which is the source)."""
  if lib[:4] != b"\x7fELF" or int.from_bytes(lib[18:20], "little") not in (EM_X86_64, EM_AARCH64): return None
  try:
    from baregrad.drivers.elf_loader import disassemble as dis
    text = dis(lib, name, name=f"kernel {name}")
  except Exception as e:  # noqa: BLE001  (capstone missing, or an object it cannot read: the page says so)
    return f"(not disassembled: {type(e).__name__}: {e})"
  return text if len(text) <= MAX_CHARS else text[:MAX_CHARS] + "\n... (cut)"
