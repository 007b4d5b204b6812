"""AMDGPU renderer: a linear program -> LLVM IR for the amdgcn target (compiled by drivers/amd_compile.py for gfx1100,
RDNA3 wave32, and gfx942, CDNA3 wave64). It is the CPU LLVM renderer (llvmir.py) with the GPU's pieces put in through
its hooks, so both agree op for op (the documented semantics of ir/alu.py, fused ASSIGN of ADD with MUL, bool bytes):

  define amdgpu_kernel void @NAME(ptr addrspace(1) %data0, ..., ptr addrspace(1) %dataN, i32 %var_a, ...) #0

- Kernel arguments come through the kernarg segment (AMDGPUUsage "Kernel Argument"; the hardware passes its address in
  an SGPR pair, the descriptor's ENABLE_SGPR_KERNARG_SEGMENT_PTR): one 8-byte global pointer per buffer slot
  0..max (a slot no uop uses is still declared, as in PTX), then the DEFINE_VARs sorted by name, each naturally
  aligned: the same layout as the PTX parameters, `param_layout` (kernarg_layout here says it in bytes).
- Address spaces: global 1 (buffers), LDS 3 (DEFINE_LOCAL), constant 4 (unused: kernel arguments are loaded by LLVM
  from the kernarg segment, which it addresses in space 4 itself), private 5 (allocas of loop counters and
  accumulators; SROA turns them into registers, and the tests check the op corpus has no scratch, for speed). A kernel
  that does spill (or keeps a private array) runs: gfx1100 and gfx942 have architected flat scratch, the descriptor
  enables only the private segment, and the driver gives the queue scratch (drivers/amd/scratch.py).
- SPECIAL gidxN/lidxN: llvm.amdgcn.workgroup.id.{x,y,z} / llvm.amdgcn.workitem.id.{x,y,z}.
- DEFINE_LOCAL (dtype base.ptr(local=True), arg (name, element count)): an internal addrspace(3) array; BARRIER: a
  workgroup release fence, s_barrier, an acquire fence (so LDS stores before it are seen by every wave after it);
  IF/ENDIF: a branch around the block.
- Attributes: amdgpu-flat-work-group-size=L,L where L is the product of the lidx sizes (the workgroup is exactly that:
  LLVM sizes registers and waves from it, and may drop barriers within one wave); uniform-work-group-size (the grid
  is a whole number of workgroups); and the amdgpu-no-* attributes for every implicit input the kernel does not use
  (dispatch/queue pointers, implicit arguments, unused workgroup and work-item ids), so the kernel descriptor asks
  the hardware for the kernarg pointer, the workgroup ids and work-item ids it uses and nothing else, and the
  kernarg segment is the explicit arguments only.

Precision (the CPU renderer calls libm; AMDGPU has float32 approximations only, as PTX):
- FDIV, SQRT, RECIP are IEEE correctly rounded (LLVM's default fdiv/sqrt expansions on AMDGPU);
- EXP2/LOG2 float32: v_exp_f32/v_log_f32 with LLVM's denormal range scaling (about 1 ulp);
- SIN float32: reduced by 2*pi first (Cody-Waite, three fused steps, like the PTX renderer) and then llvm.sin.f32
  (v_sin_f32 takes revolutions), so large arguments keep accuracy up to |x| ~ 1e5;
- float64 EXP2/LOG2/SIN: the range is handled in float64 (exponent bits, subnormal scaling, reduction by 2*pi; a
  negative LOG2 argument gives NaN even where it would round to -0 in float32) and the core is the float32
  instruction: float32 precision (the PTX renderer's known gap, the same here).
"""
from __future__ import annotations
import re
from baregrad.ir.dtype import DType, PtrDType, dtypes
from baregrad.ir.ops import UOp, Ops
from baregrad.codegen.renderer import RenderError
from baregrad.codegen.renderer.llvmir import LLVMRenderer, ltype, lconst
from baregrad.codegen.renderer.ptx import param_layout

AMDGPU_ARCHS = ("gfx1100", "gfx942")
WAVE_SIZE = {"gfx1100": 32, "gfx942": 64}
ADDRSPACE_GLOBAL, ADDRSPACE_LDS, ADDRSPACE_CONSTANT, ADDRSPACE_PRIVATE = 1, 3, 4, 5

def kernarg_layout(bufs: list[UOp], vars: list[UOp]) -> list[tuple[str, int, int]]:
  """(name, byte offset, size) of each explicit kernel argument in the kernarg segment (the PTX parameter layout)."""
  return param_layout(bufs, vars)

def _var_param(u: UOp) -> str: return "%var_" + re.sub(r"[^A-Za-z0-9_]", "_", u.arg[0])

# float64 transcendentals through the float32 instruction (see the module docstring); defined once per module
_F64_HELPERS = {
  "exp2": """define internal double @bg_exp2_f64(double %a) alwaysinline {
  %c0 = call double @llvm.maxnum.f64(double %a, double -1.100000e+03)
  %c = call double @llvm.minnum.f64(double %c0, double 1.100000e+03)
  %n = call double @llvm.floor.f64(double %c)
  %f = fsub double %c, %n
  %f32 = fptrunc double %f to float
  %p32 = call float @llvm.exp2.f32(float %f32)
  %pf = fpext float %p32 to double
  %ni = fptosi double %n to i32
  %n1 = ashr i32 %ni, 1
  %n2 = sub i32 %ni, %n1
  %b1 = add i32 %n1, 1023
  %b2 = add i32 %n2, 1023
  %e1 = zext i32 %b1 to i64
  %e2 = zext i32 %b2 to i64
  %s1 = shl i64 %e1, 52
  %s2 = shl i64 %e2, 52
  %w1 = bitcast i64 %s1 to double
  %w2 = bitcast i64 %s2 to double
  %p1 = fmul double %pf, %w1
  %p2 = fmul double %p1, %w2
  %nan = fcmp uno double %a, 0.000000e+00
  %r = select i1 %nan, double %a, double %p2
  ret double %r
}""",
  "log2": """define internal double @bg_log2_f64(double %a) alwaysinline {
  %sub = fcmp olt double %a, 0x0010000000000000
  %sc = fmul double %a, 0x4350000000000000
  %x = select i1 %sub, double %sc, double %a
  %bias = select i1 %sub, double 5.400000e+01, double 0.000000e+00
  %bits = bitcast double %x to i64
  %eb = lshr i64 %bits, 52
  %e = and i64 %eb, 2047
  %mm = and i64 %bits, 4503599627370495
  %mb = or i64 %mm, 4607182418800017408
  %m = bitcast i64 %mb to double
  %m32 = fptrunc double %m to float
  %l32 = call float @llvm.log2.f32(float %m32)
  %ef0 = uitofp i64 %e to double
  %ef1 = fsub double %ef0, 1.023000e+03
  %ef = fsub double %ef1, %bias
  %lf = fpext float %l32 to double
  %lg = fadd double %lf, %ef
  %a32 = fptrunc double %a to float
  %s32 = call float @llvm.log2.f32(float %a32)
  %se = fpext float %s32 to double
  %neg = fcmp olt double %a, 0.000000e+00
  %sp = select i1 %neg, double 0x7FF8000000000000, double %se
  %pos = fcmp ogt double %a, 0.000000e+00
  %fin = fcmp olt double %a, 0x7FF0000000000000
  %ok = and i1 %pos, %fin
  %r = select i1 %ok, double %lg, double %sp
  ret double %r
}""",
  "sin": """define internal double @bg_sin_f64(double %a) alwaysinline {
  %q = fmul double %a, 0x3FC45F306DC9C883
  %k = call double @llvm.roundeven.f64(double %q)
  %nk = fneg double %k
  %r0 = call double @llvm.fma.f64(double %nk, double 0x401921FB54442D18, double %a)
  %r1 = call double @llvm.fma.f64(double %nk, double 0x3CB1A62633145C07, double %r0)
  %t = fptrunc double %r1 to float
  %s = call float @llvm.sin.f32(float %t)
  %r = fpext float %s to double
  ret double %r
}""",
}
_F64_DECLS = {"exp2": ["declare double @llvm.maxnum.f64(double, double)", "declare double @llvm.minnum.f64(double, double)",
                       "declare double @llvm.floor.f64(double)", "declare float @llvm.exp2.f32(float)"],
              "log2": ["declare float @llvm.log2.f32(float)"],
              "sin": ["declare double @llvm.roundeven.f64(double)", "declare double @llvm.fma.f64(double, double, double)",
                      "declare float @llvm.sin.f32(float)"]}

class AMDGPURenderer(LLVMRenderer):
  name = "AMDGPU"
  has_local = True
  has_threads = False
  # workgroups per grid dimension: AQL's grid size counts work-items in 32 bits, and a workgroup has up to 1024
  global_max = (2 ** 22 - 1, 65535, 65535)
  local_max = 1024
  vectorized = False     # scalar IR, as PTX: LLVM's load/store vectorizer still merges neighbouring accesses
  own_math = False    # (the GPU has instructions for them: v_exp_f32, v_log_f32, v_sin_f32)
  alloca_suffix = f", addrspace({ADDRSPACE_PRIVATE})"

  def __init__(self, arch: str = "gfx1100") -> None:
    if arch not in AMDGPU_ARCHS: raise ValueError(f"AMDGPU renderer: gfx target {arch!r} is not supported (supported: {', '.join(AMDGPU_ARCHS)})")
    self.arch = arch

  def _ptr(self, d: DType | None) -> str:
    if d is None: return f"ptr addrspace({ADDRSPACE_PRIVATE})"
    return f"ptr addrspace({ADDRSPACE_LDS if isinstance(d, PtrDType) and d.local else ADDRSPACE_GLOBAL})"

  def render(self, name: str, uops: list[UOp]) -> str:
    self._locals: list[str] = []
    self._helpers: set[str] = set()
    self._nif = 0
    return super().render(name, uops)

  def _param(self, u: UOp, nm: str, uops: list[UOp], nbufs: int, lines: list[str]) -> str:
    return f"%data{u.arg}" if u.op is Ops.DEFINE_GLOBAL else _var_param(u)

  def _render_other(self, u: UOp, nm: str, r: dict[UOp, str], lines: list[str], decls: set[str]) -> bool:
    if u.op is Ops.SPECIAL:
      kind, dim = u.arg[0][:4], u.arg[0][4:]
      fn = {"gidx": "workgroup", "lidx": "workitem"}.get(kind)
      if fn is None or dim not in ("0", "1", "2"): raise RenderError(f"AMDGPU: unknown SPECIAL {u.arg[0]}")
      intr = f"llvm.amdgcn.{fn}.id.{'xyz'[int(dim)]}"
      decls.add(f"declare i32 @{intr}()")
      if u.dtype.scalar == dtypes.int32: lines.append(f"  {nm} = call i32 @{intr}()")
      else: lines += [f"  {nm}.i = call i32 @{intr}()", f"  {nm} = {self._cast(dtypes.int32, u.dtype, f'{nm}.i', decls.add)}"]
      r[u] = nm
    elif u.op is Ops.DEFINE_LOCAL:
      if not (isinstance(u.dtype, PtrDType) and u.dtype.local and isinstance(u.arg, tuple) and len(u.arg) == 2):
        raise RenderError(f"AMDGPU: DEFINE_LOCAL needs dtype base.ptr(local=True) and arg (name, size), got {u.dtype}, {u.arg!r}")
      g = "@" + re.sub(r"[^A-Za-z0-9_]", "_", str(u.arg[0]))
      elem = "i8" if u.dtype.base.scalar == dtypes.bool else ltype(u.dtype.base)
      self._locals.append(f"{g} = internal unnamed_addr addrspace({ADDRSPACE_LDS}) global [{int(u.arg[1])} x {elem}] undef, align 16")
      r[u] = g
    elif u.op is Ops.BARRIER:
      decls.add("declare void @llvm.amdgcn.s.barrier()")
      lines += ['  fence syncscope("workgroup") release', "  call void @llvm.amdgcn.s.barrier()", '  fence syncscope("workgroup") acquire']
    elif u.op is Ops.IF:
      self._nif += 1
      lines += [f"  br i1 {r[u.src[0]]}, label %{nm[1:]}.then, label %{nm[1:]}.end", f"{nm[1:]}.then:"]
      r[u] = nm
    elif u.op is Ops.ENDIF:
      lbl = r[u.src[0]][1:]
      lines += [f"  br label %{lbl}.end", f"{lbl}.end:"]
    else: return False
    return True

  def _alu(self, u: UOp, s: list[str], intr, tmp, lines: list[str], c) -> str:
    d = u.dtype
    if u.op in (Ops.EXP2, Ops.LOG2, Ops.SIN) and d.count == 1 and d.scalar == dtypes.float64:
      fn = u.op.name.lower()
      self._helpers.add(fn)
      return f"call double @bg_{fn}_f64(double {s[0]})"
    if u.op is Ops.SIN and d.count == 1 and d.scalar == dtypes.float32:
      # reduce by 2*pi in three fused steps (2*pi = 6.28125 + 1.9353072e-3 + 1.0253e-11, each part exact in float32)
      k, nk, r0, r1, r2 = tmp(), tmp(), tmp(), tmp(), tmp()
      rnd, fma = intr("roundeven", d, 1), intr("fma", d, 3)
      lines.append(f"  {k}.q = fmul float {s[0]}, {lconst(d, 0.15915494)}")
      lines.append(f"  {k} = call float {rnd}(float {k}.q)")
      lines.append(f"  {nk} = fneg float {k}")
      lines.append(f"  {r0} = call float {fma}(float {nk}, float {lconst(d, 6.28125)}, float {s[0]})")
      lines.append(f"  {r1} = call float {fma}(float {nk}, float {lconst(d, 1.9353071795864769e-03)}, float {r0})")
      lines.append(f"  {r2} = call float {fma}(float {nk}, float {lconst(d, 1.0253262e-11)}, float {r1})")
      return f"call float {intr('sin', d, 1)}(float {r2})"
    return super()._alu(u, s, intr, tmp, lines, c)

  def _module(self, name: str, body: str, decls: set[str], uops: list[UOp]) -> str:
    bufs = [u for u in uops if u.op is Ops.DEFINE_GLOBAL]
    vars_ = sorted({u.arg[0]: u for u in uops if u.op is Ops.DEFINE_VAR}.values(), key=lambda v: v.arg[0])
    params = [f"ptr addrspace({ADDRSPACE_GLOBAL}) %data{i}" for i in range(max((u.arg for u in bufs), default=-1) + 1)]
    params += [f"{ltype(v.dtype)} {_var_param(v)}" for v in vars_]
    lsize = [1, 1, 1]
    used = {u.arg[0] for u in uops if u.op is Ops.SPECIAL}
    for u in uops:
      if u.op is Ops.SPECIAL and u.arg[0].startswith("lidx"): lsize[int(u.arg[0][4:])] = int(u.arg[1])
    wg = lsize[0] * lsize[1] * lsize[2]
    if wg > self.local_max: raise RenderError(f"AMDGPU: workgroup of {lsize} = {wg} work-items, the most is {self.local_max}")
    # every implicit input not used is declared absent, so the descriptor enables none of it (see the docstring)
    no = ["dispatch-ptr", "queue-ptr", "implicitarg-ptr", "dispatch-id", "heap-ptr", "hostcall-ptr", "multigrid-sync-arg",
          "default-queue", "completion-action", "lds-kernel-id", "flat-scratch-init"]
    no += [f"workgroup-id-{a}" for i, a in enumerate("xyz") if f"gidx{i}" not in used]
    no += [f"workitem-id-{a}" for i, a in enumerate("xyz") if f"lidx{i}" not in used]
    attrs = " ".join([f'"amdgpu-flat-work-group-size"="{wg},{wg}"', '"uniform-work-group-size"="true"', '"no-trapping-math"="true"'] +
                     [f'"amdgpu-no-{x}"' for x in no])
    helpers = "".join(f"\n{_F64_HELPERS[h]}" for h in sorted(self._helpers))
    decls = decls | {x for h in self._helpers for x in _F64_DECLS[h]}
    return ("\n".join(sorted(decls)) + ("\n" + "\n".join(self._locals) if self._locals else "") + helpers +
            f"\n\ndefine amdgpu_kernel void @{name}({', '.join(params)}) #0 {{\nentry:\n{body}\n}}\n"
            f"attributes #0 = {{ nounwind {attrs} }}\n")
