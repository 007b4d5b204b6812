"""What DEBUG=6 and DEBUG=7 print for an AMD kernel: its resources and its disassembly.

- resources(lib, name, arch): VGPRs (and AGPRs on gfx942), SGPRs, their spills, LDS, scratch per work-item, wave size,
  code bytes: from the kernel descriptor (AMDGPUUsage "Kernel Descriptor": compute_pgm_rsrc1's granulated VGPR count,
  group/private segment fixed sizes) and the NT_AMDGPU_METADATA note (.sgpr_count, .vgpr_count, .agpr_count,
  .sgpr_spill_count, .vgpr_spill_count, AMDGPUUsage "Code Object V3+ Metadata").
- disassemble(lib, name, arch): RDNA3 (gfx11) code through our own decoder (drivers/amd/isa/rdna3_decode.py, checked
  instruction by instruction against LLVM's assembly in tests/drivers/amd/test_rdna3_decode.py); other targets (gfx942)
  or code our decoder does not know through llvm-objdump when one that knows the target is installed; else None.
"""
from __future__ import annotations
import os, shutil, subprocess, tempfile
from baregrad.drivers.amd_compile import load_code_object

def resources(lib: bytes, name: str, arch: str) -> str:
  """One line: the kernel's registers, spills, LDS and scratch."""
  from baregrad.drivers.amd.program import code_object_metadata
  k = load_code_object(lib).kernels[name]
  kd = k.descriptor
  meta = next((m for m in code_object_metadata(lib).get("amdhsa.kernels", []) if m.get(".name") == name), {})
  def md(key: str) -> str: return str(meta[key]) if key in meta else "?"
  agpr = f", {md('.agpr_count')} AGPRs" if ".agpr_count" in meta else ""
  return (f"AMD kernel {name} ({arch}, wave{32 if kd.wavefront_size32 else 64}): {kd.vgpr_count(arch)} VGPRs reserved "
          f"({md('.vgpr_count')} used{agpr}), {md('.sgpr_count')} SGPRs, {md('.vgpr_spill_count')} VGPR spills, "
          f"{md('.sgpr_spill_count')} SGPR spills, {kd.group_segment_fixed_size} bytes LDS, "
          f"{kd.private_segment_fixed_size} bytes scratch per work-item, {k.code_size} bytes of code")

def objdumps() -> list[str]:
  """The llvm-objdumps on PATH, newest versioned first, then the plain one (LLVM 16 learned gfx11's true16 forms, 17
  gfx942: an older one says the processor is not recognized, and the next is tried)."""
  cands = [p for v in range(25, 13, -1) if (p := shutil.which(f"llvm-objdump-{v}")) is not None]
  if (p := shutil.which("llvm-objdump")) is not None: cands.append(p)
  return cands

def _objdump(lib: bytes, name: str, arch: str) -> str | None:
  with tempfile.TemporaryDirectory(prefix="baregrad_objdump_") as d:
    path = os.path.join(d, "k.o")
    with open(path, "wb") as f: f.write(lib)
    for tool in objdumps():
      r = subprocess.run([tool, "-d", f"--mcpu={arch}", f"--disassemble-symbols={name}", path], capture_output=True, text=True, timeout=60)
      if r.returncode == 0 and "not a recognized processor" not in r.stderr: return f"(by {tool})\n" + r.stdout.strip()
  return None

def disassemble(lib: bytes, name: str, arch: str) -> tuple[str | None, str]:
  """(the kernel's instructions one a line: offset, assembly, encoding; or None, why nothing here could decode them)."""
  why = f"no decoder of ours for {arch}"
  if arch.startswith("gfx11"):
    from baregrad.drivers.amd.isa.rdna3_decode import DecodeError, disassemble as rdna3
    co = load_code_object(lib)
    k = co.kernels[name]
    try: return "\n".join(str(i) for i in rdna3(co.image, k.code_offset, k.code_offset + k.code_size)), ""
    except DecodeError as e: why = f"our RDNA3 decoder stopped: {e}"
  if (out := _objdump(lib, name, arch)) is not None: return out, ""
  return None, f"{why}; no llvm-objdump that knows {arch} on PATH"

def debug_text(level: int, lib: bytes, name: str, arch: str) -> str:
  """What DEBUG=`level` prints for a kernel when it is loaded: at 6 and above its resources, at 7 its disassembly."""
  out = []
  if level >= 6: out.append(resources(lib, name, arch))
  if level >= 7:
    listing, why = disassemble(lib, name, arch)
    out.append(f"disassembly of {name}:\n{listing}" if listing is not None else f"disassembly of {name}: unavailable ({why})")
  return "\n".join(out)
