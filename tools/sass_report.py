#!/usr/bin/env python3
"""One line per kernel, key=value, for a matmul rendered and assembled without a GPU (issue 32, static checks).

  python3 tools/sass_report.py --arch sm_90 --matmul 4096x4096x4096 --dtype half

Fields: name, arch, opts, regs, spills (bytes of spill stores + loads, from ptxas -v), smem, then PTX counts of the
innermost (main) loop: loop_mma (mma.sync), loop_wgmma (wgmma.mma_async: sm_90a), loop_ldsm (ldmatrix), loop_cp_async (not the bulk ones),
loop_tma (cp.async.bulk.tensor), loop_ldg (ld.global), loop_bar,
loop_cvt_float (float conversions; the innermost loop is the k-step's, cp.async prefetch sits in the loop around it); and, when cuobjdump or
nvdisasm is found (NVIDIA's pip wheels nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm), SASS counts over the whole
kernel: HMMA, HGMMA, LDSM, LDGSTS, LDG, STSM, UTMALDG, SYNCS, BAR, and over the main loop (the innermost SASS loop with
HMMA/HGMMA; ptxas may unroll the PTX k-step loop into it): main_HMMA, main_HGMMA, main_LDSM, main_LDGSTS, main_LDG,
main_UTMALDG (TMA loads: sm_90a kernels whose tiles codegen/tma.py fills), main_BAR; and of the innermost loop with
UTMALDG (a producer warpgroup's, where the kernel has one): tma_loop_UTMALDG, tma_loop_HGMMA. Also `producer` (the
threads the kernel adds for a producer warpgroup) and `advisories` (ptxas's warnings: wgmma serialization, setmaxnreg
ignored; `none` when it printed none). Without the tools the SASS fields read `sass=unavailable` (not zeros).
Not done yet (issue 32): ptxas advisories (wgmma serialization)."""
from __future__ import annotations
import argparse, glob, os, re, shutil, subprocess, sys, tempfile
from collections import Counter
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from baregrad.ir.dtype import dtypes, DType  # noqa: E402
from baregrad.ir.ops import Ops  # noqa: E402
from baregrad.ir.view import ShapeTracker, View  # noqa: E402
from baregrad.codegen.astbuild import load, store, reduce, sink  # noqa: E402
from baregrad.codegen.kernel import Kernel  # noqa: E402
from baregrad.codegen.heuristic import heuristic_opts  # noqa: E402
from baregrad.codegen.program import get_program  # noqa: E402
from baregrad.codegen.renderer.ptx import PTXRenderer  # noqa: E402
from baregrad.drivers.nv_compile import find_ptxas, _wheel_tool  # noqa: E402

DTYPES = {"half": dtypes.float16, "bf16": dtypes.bfloat16, "float": dtypes.float32}
SASS_OPS = ("HGMMA", "HMMA", "UTMALDG", "LDGSTS", "LDG", "LDSM", "STSM", "SYNCS", "BAR")

def matmul_ast(m: int, n: int, k: int, dt: DType):
  """C[m,n] = sum_k A[m,k] B[k,n] as the Tensor frontend schedules `a @ b` (checked against Tensor.schedule() in
  tests/drivers/nv/test_gemm_mix.py): each load one View, cast to float32, product summed in float32,
  the sum cast back to dt."""
  sa = ShapeTracker((View((m, n, k), (k, 0, 1), 0, None),))
  sb = ShapeTracker((View((m, n, k), (0, 1, n), 0, None),))
  la, lb = load(1, dt, sa), load(2, dt, sb)
  if dt != dtypes.float32: la, lb = la.cast(dtypes.float32), lb.cast(dtypes.float32)
  acc = reduce(la * lb, Ops.ADD, (2,))
  return sink(store(0, (m, n, 1), acc.cast(dt) if dt != dtypes.float32 else acc))

def innermost_loop(src: str) -> Counter:
  """Opcode counts of the innermost loop of rendered PTX (a `$L.._head:` whose back edge encloses no other head)."""
  lines = [ln.strip() for ln in src.splitlines()]
  best: Counter | None = None
  for i, ln in enumerate(lines):
    if not (m := re.fullmatch(r"(\$L\d+_head):", ln)): continue
    end = next(j for j in range(i + 1, len(lines)) if lines[j].endswith(f"bra {m.group(1)};"))
    body = lines[i + 1:end]
    if any(re.fullmatch(r"\$L\d+_head:", b) for b in body): continue
    best = Counter(re.sub(r"^@!?%p\d+\s+", "", b).split()[0] for b in body
                   if b and not b.startswith(("$", "//", "{", "}", ".reg")))
  if best is None: raise ValueError("the kernel has no loop (a $L.._head label with a back edge)")
  return best

def assemble(src: str, arch: str) -> tuple[bytes, str]:
  """(cubin, ptxas -v report) for src assembled for arch (its .target rewritten to arch)."""
  ptxas = find_ptxas()
  if ptxas is None: raise FileNotFoundError("ptxas not found (PATH, /usr/local/cuda*/bin, or pip nvidia-cuda-nvcc-cu12)")
  with tempfile.TemporaryDirectory() as d:
    p, o = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
    with open(p, "w") as f: f.write(re.sub(r"^\.target\s+\S+", f".target {arch}", src, count=1, flags=re.M))
    r = subprocess.run([ptxas, f"-arch={arch}", "-v", "-o", o, p], capture_output=True, text=True, timeout=300)
    if r.returncode != 0: raise RuntimeError(f"ptxas -arch={arch} failed ({r.returncode}): {r.stderr[-2000:]}")
    with open(o, "rb") as f: return f.read(), r.stderr

def _sass_tools() -> tuple[str, str | None] | None:
  """(cuobjdump, nvdisasm or None): PATH, /usr/local/cuda*/bin, NVIDIA's pip wheels (nvidia-cuda-cuobjdump,
  nvidia-cuda-nvdisasm); None without cuobjdump."""
  def find(t: str) -> str | None:
    return shutil.which(t) or next(iter(sorted(glob.glob(f"/usr/local/cuda*/bin/{t}"))), None) or _wheel_tool(t)
  tool = find("cuobjdump")
  return None if tool is None else (tool, find("nvdisasm"))

def disassemble(cubin: bytes) -> str | None:
  """cuobjdump -sass of the cubin (it runs nvdisasm, found as for cuobjdump), or None when the tools are missing."""
  tools = _sass_tools()
  if tools is None: return None
  env = dict(os.environ)
  if tools[1] is not None: env["NVDISASM_PATH"] = os.path.dirname(tools[1])
  with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
    f.write(cubin); f.flush()
    r = subprocess.run([tools[0], "-sass", f.name], capture_output=True, text=True, timeout=120, env=env)
  if r.returncode != 0: raise RuntimeError(f"cuobjdump -sass failed ({r.returncode}): {r.stderr[-2000:]}")
  return r.stdout

_SASS_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)([^;]*);")

def sass_ops(sass: str) -> list[tuple[int, str, str]]:
  """(address, opcode, operands) of each instruction in cuobjdump -sass text."""
  return [(int(a, 16), op, rest.strip()) for a, op, rest in _SASS_LINE.findall(sass)]

def sass_counts(cubin: bytes) -> Counter | None:
  """SASS opcode counts (whole kernel) by cuobjdump -sass, or None when it is not installed."""
  sass = disassemble(cubin)
  return None if sass is None else Counter(op for _, op, _ in sass_ops(sass))

def sass_main_loop(ops: list[tuple[int, str, str]], holds: tuple[str, ...] = ("HMMA", "HGMMA")) -> Counter:
  """Opcode counts of the main loop: of the loops (a BRA back to an earlier address: the body from its target to it)
  that hold one of `holds` (default HMMA or HGMMA; UTMALDG: a producer warpgroup's loop) and no EXIT, the innermost
  (shortest); empty when none does."""
  loops = []
  for addr, op, rest in ops:
    if op == "BRA" and (m := re.match(r"(?:`\()?(0x[0-9a-f]+)", rest)) and int(m.group(1), 16) < addr:
      body = [o for a, o, _ in ops if int(m.group(1), 16) <= a <= addr]
      # (a branch back from code past an EXIT is an out-of-line retry, e.g. of an mbarrier wait, not a loop's end)
      if any(o in holds for o in body) and "EXIT" not in body: loops.append(body)
  return Counter(min(loops, key=len)) if loops else Counter()

def _fam(c: Counter, op: str) -> int: return sum(n for o, n in c.items() if o == op or o.startswith(op + "_"))

def renderer_for(arch: str) -> PTXRenderer:
  """The PTX renderer the NV driver gives a GPU of `arch` (sm_90a: a Hopper with NV_SM90A=1: wgmma): its shared memory limit per block from
  the driver's generation record (hw.GPUArch.max_shared), so kernels may use dynamic shared memory above 48 KB."""
  from baregrad.drivers.nv import hw
  base = arch.rstrip("a") if arch.endswith("a") and arch[:-1] in hw.ARCHS else arch
  if base not in hw.ARCHS: raise ValueError(f"{arch}: no NV generation record (known: {', '.join(hw.ARCHS)})")
  return PTXRenderer(arch, shared_max=hw.ARCHS[base].max_shared)

def report(m: int, n: int, k: int, dt: DType, arch: str) -> dict[str, str]:
  """The key=value fields of one matmul kernel (opts from the heuristic) for a GPU of `arch`."""
  ren = renderer_for(arch)
  ast = matmul_ast(m, n, k, dt)
  opts = heuristic_opts(Kernel(ast, max_parallel=len(ren.global_max) or 1, gpu=True, ren=ren), ren)
  spec = get_program(ast, ren, opts)
  cubin, v = assemble(spec.src, arch)
  regs = re.search(r"Used (\d+) registers", v)
  sp = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", v)
  smem = re.search(r"(\d+) bytes smem", v)
  loop = innermost_loop(spec.src)
  pick = lambda pre: sum(c for op, c in loop.items() if op.startswith(pre))   # noqa: E731
  f = {"name": spec.name, "arch": arch, "dtype": dt.name, "opts": ",".join(f"{o.op.name}{o.axis}:{o.amt}" for o in opts),
       "regs": regs.group(1) if regs else "?", "spills": str(int(sp.group(1)) + int(sp.group(2))) if sp else "?",
       "smem": smem.group(1) if smem else "0", "dyn_smem": str(spec.dyn_shared),
       "producer": str(ren.producer_threads(spec.src)),
       "advisories": ";".join(ln.split(":", 1)[-1].strip().replace(" ", "_") for ln in v.splitlines() if "warning" in ln.lower()) or "none",
       "loop_mma": str(pick("mma.sync")),
       "loop_wgmma": str(pick("wgmma.mma_async")), "loop_ldsm": str(pick("ldmatrix")),
       "loop_cp_async": str(pick("cp.async") - pick("cp.async.bulk")), "loop_tma": str(pick("cp.async.bulk.tensor")),
       "loop_ldg": str(pick("ld.global")), "loop_bar": str(pick("bar.")),
       "loop_cvt_float": str(pick("cvt.rn") + pick("cvt.f"))}
  text = disassemble(cubin)
  if text is None: f["sass"] = "unavailable"
  else:
    ops = sass_ops(text)
    whole, loop = Counter(op for _, op, _ in ops), sass_main_loop(ops)
    f.update({op: str(_fam(whole, op)) for op in SASS_OPS})
    f.update({f"main_{op}": str(_fam(loop, op)) for op in ("HMMA", "HGMMA", "LDSM", "LDGSTS", "LDG", "UTMALDG", "BAR")})
    tl = sass_main_loop(ops, ("UTMALDG",))   # the loop issuing the tensor copies: the main loop, or a producer's own
    f.update({"tma_loop_UTMALDG": str(_fam(tl, "UTMALDG")), "tma_loop_HGMMA": str(_fam(tl, "HGMMA"))})
  return f

def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--arch", action="append", help="sm_80, sm_89, sm_90 ... (repeatable; default sm_80 and sm_90)")
  ap.add_argument("--matmul", action="append", help="MxNxK (repeatable; default 4096x4096x4096)")
  ap.add_argument("--dtype", action="append", choices=sorted(DTYPES), help="repeatable; default half and bf16")
  a = ap.parse_args(argv)
  for shape in a.matmul or ["4096x4096x4096"]:
    try: m, n, k = (int(x) for x in shape.lower().split("x"))
    except ValueError: ap.error(f"--matmul wants MxNxK (three integers), got {shape!r}")
    for dn in a.dtype or ["half", "bf16"]:
      for arch in a.arch or ["sm_80", "sm_90"]:
        print(" ".join(f"{key}={val}" for key, val in report(m, n, k, DTYPES[dn], arch).items()), flush=True)
  return 0

if __name__ == "__main__": sys.exit(main())
