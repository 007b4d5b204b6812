"""What DEBUG=6 and DEBUG=7 print for an NV kernel: its resources and its SASS.

- resources(ptx, cubin, name, arch): registers, spill stores/loads, stack frame (local memory), static shared memory,
  barriers and constant bank 0 size as `ptxas -v` reports them (ptxas prints these itself: "N bytes stack frame,
  N bytes spill stores, N bytes spill loads" and "Used N registers, used N barriers, N bytes smem, N bytes cmem[0]");
  without ptxas, what the cubin's attributes or the PTX declarations say, naming what is unknown.
- sass(cubin): the SASS listing by NVIDIA's nvdisasm (`nvdisasm -c`) or cuobjdump (`cuobjdump -sass`), found on PATH,
  in /usr/local/cuda*/bin or in NVIDIA's pip wheels (nvidia-cuda-nvdisasm-cu12, nvidia-cuda-cuobjdump-cu12); None
  when neither is there. NVIDIA publishes no SASS encoding, so there is no decoder of our own to fall back on: DEBUG=7
  then prints the ptxas resources with a line saying which tools were looked for.
"""
from __future__ import annotations
import glob, os, re, shutil, subprocess, tempfile
from baregrad.drivers.nv_compile import _wheel_tool, find_ptxas

SASS_TOOLS = ("nvdisasm", "cuobjdump")

def find_sass_tool() -> str | None:
  """nvdisasm, else cuobjdump: PATH, then /usr/local/cuda*/bin, then NVIDIA's pip wheels (not cached: a test may put
  one on PATH)."""
  for tool in SASS_TOOLS:
    if (p := shutil.which(tool)) is not None: return p
    for d in sorted(glob.glob("/usr/local/cuda*/bin"), reverse=True):
      if os.access(p := os.path.join(d, tool), os.X_OK): return p
    if (p := _wheel_tool(tool)) is not None: return p
  return None

_PTXAS_V = {"regs": r"Used (\d+) registers", "barriers": r"used (\d+) barriers", "stack": r"(\d+) bytes stack frame",
            "spill_stores": r"(\d+) bytes spill stores", "spill_loads": r"(\d+) bytes spill loads", "shared": r"(\d+) bytes smem",
            "local": r"(\d+) bytes lmem", "cmem0": r"(\d+) bytes cmem\[0\]"}

def parse_ptxas_v(report: str) -> dict[str, int]:
  """The numbers of a `ptxas -v` report (its "info" lines), by key: regs, barriers, stack, spill_stores, spill_loads,
  shared, local, cmem0; a key ptxas did not print is absent (it leaves out zero smem/lmem)."""
  return {k: int(m.group(1)) for k, rx in _PTXAS_V.items() if (m := re.search(rx, report)) is not None}

def ptxas_report(ptx: str, arch: str) -> str | None:
  """`ptxas -v`'s report for ptx assembled for arch (its .target rewritten to arch), or None without ptxas."""
  if (ptxas := find_ptxas()) is None: return None
  src = re.sub(r"^\.target\s+\S+", f".target {arch}", ptx, count=1, flags=re.M)
  with tempfile.TemporaryDirectory(prefix="baregrad_ptxas_v_") as d:
    inp = os.path.join(d, "k.ptx")
    with open(inp, "w") as f: f.write(src)
    r = subprocess.run([ptxas, f"-arch={arch}", "-v", "-o", os.path.join(d, "k.cubin"), inp], capture_output=True, text=True, timeout=300)
  if r.returncode != 0: return f"ptxas -v failed ({r.returncode}): {(r.stderr or r.stdout).strip()[-2000:]}"
  return r.stderr + r.stdout

def resources(ptx: str, cubin: bytes, name: str, arch: str) -> str:
  """One line: the kernel's registers, spills, stack (local), shared memory, barriers, constant bank 0 bytes."""
  rep = ptxas_report(ptx, arch)
  if rep is not None and (v := parse_ptxas_v(rep)).get("regs") is not None:
    return (f"NV kernel {name} ({arch}, ptxas -v): {v['regs']} registers, {v.get('spill_stores', 0)} bytes spill stores, "
            f"{v.get('spill_loads', 0)} bytes spill loads, {v.get('stack', 0)} bytes stack frame (local), {v.get('local', 0)} bytes lmem, "
            f"{v.get('shared', 0)} bytes shared, {v.get('barriers', 0)} barriers, {v.get('cmem0', 0)} bytes cmem[0]")
  if cubin:
    from baregrad.drivers.nv_compile import parse_cubin
    k = parse_cubin(cubin)["kernels"].get(name, {})
    return (f"NV kernel {name} ({arch}, from the cubin; spills unknown without ptxas -v): {k.get('regs', '?')} registers, "
            f"{max(k.get('frame', 0), k.get('min_stack', 0))} bytes stack frame (local), {k.get('shared', 0)} bytes shared")
  from baregrad.drivers.nv.program import ptx_storage
  shared, local = ptx_storage(ptx, name)
  why = rep if rep is not None else "ptxas not found"
  return (f"NV kernel {name} ({arch}, from the PTX declarations; registers and spills unknown: {why}): "
          f"{local} bytes local, {shared} bytes shared")

def sass(cubin: bytes) -> str | None:
  """The cubin's SASS by nvdisasm or cuobjdump, or None when neither is installed (or there is no cubin)."""
  if not cubin or (tool := find_sass_tool()) is None: return None
  with tempfile.TemporaryDirectory(prefix="baregrad_sass_") as d:
    path = os.path.join(d, "k.cubin")
    with open(path, "wb") as f: f.write(cubin)
    cmd = [tool, "-c", path] if os.path.basename(tool).startswith("nvdisasm") else [tool, "-sass", path]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
  if r.returncode != 0: return f"{' '.join(cmd[:-1])} failed ({r.returncode}): {(r.stderr or r.stdout).strip()[-2000:]}"
  return r.stdout

def debug_text(level: int, ptx: str, cubin: bytes, name: str, arch: str) -> str:
  """What DEBUG=`level` prints for a kernel when it is loaded: at 6 and above its resources, at 7 its SASS (or why not)."""
  out = []
  if level >= 6: out.append(resources(ptx, cubin, name, arch))
  if level >= 7:
    if (listing := sass(cubin)) is not None: out.append(f"SASS of {name}:\n{listing.rstrip()}")
    elif not cubin: out.append(f"SASS of {name}: none (no cubin: ptxas not found, the mock runs the PTX)")
    else: out.append(f"SASS of {name}: unavailable (no {' or '.join(SASS_TOOLS)} on PATH, in /usr/local/cuda*/bin or NVIDIA's pip "
                     f"wheels: pip install nvidia-cuda-nvdisasm-cu12); the resources above are ptxas's")
  return "\n".join(out)
