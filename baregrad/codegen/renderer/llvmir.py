"""LLVM IR renderer for the CPU: `void name(ptr args, i64 start, i64 end)` (see drivers/cpu.py for the ABI).

Loop counters and accumulators live in allocas; LLVM's mem2reg turns them into registers. Integer division
and shifts are guarded so no input is undefined behaviour (semantics in ir/alu.py)."""
from __future__ import annotations
import functools, math, struct
from baregrad.ir.dtype import DType, PtrDType, dtypes, float_to_bf16
from baregrad.ir.ops import UOp, Ops, GroupOp
from baregrad.codegen.renderer import Renderer, RenderError, cpumath
from baregrad.codegen.rewrites import cpu_float_matcher

_LBASE = {dtypes.bool: "i1", dtypes.int8: "i8", dtypes.uint8: "i8", dtypes.int16: "i16", dtypes.uint16: "i16",
          dtypes.int32: "i32", dtypes.uint32: "i32", dtypes.int64: "i64", dtypes.uint64: "i64", dtypes.float16: "half",
          # bfloat16 lives as its bits (i16): its arithmetic is promoted to float32 by cpu_float_matcher, and LLVM 20
          # (llvmlite 0.50) legalizes even selects and moves of <N x bfloat> on x86 without AVX512-BF16 through float
          # and __truncsfbf2, a compiler-rt routine that no library we load provides
          dtypes.bfloat16: "i16", dtypes.float32: "float", dtypes.float64: "double", dtypes.void: "void"}

@functools.cache
def ltype(d: DType) -> str:
  if isinstance(d, PtrDType): return "ptr"
  base = _LBASE[d.scalar]
  return f"<{d.count} x {base}>" if d.count > 1 else base

def _mem_type(d: DType) -> str:
  """How a value of d is laid out in memory (bools are one byte each)."""
  if d.scalar == dtypes.bool: return f"<{d.count} x i8>" if d.count > 1 else "i8"
  return ltype(d)

def _ivec(d: DType, bits: int) -> str: return f"<{d.count} x i{bits}>" if d.count > 1 else f"i{bits}"

def _isplat(d: DType, bits: int, v: int) -> str:
  return f"<{', '.join([f'i{bits} {v}'] * d.count)}>" if d.count > 1 else str(v)

def _bf16_to_f32(v: str, d: DType, lines: list[str], tmp) -> str:
  """A bfloat value (scalar or vector d) widened to float32 by moving its bits up (exact)."""
  a, b, c, e = tmp(), tmp(), tmp(), tmp()
  lines += [f"  {a} = bitcast {ltype(d)} {v} to {_ivec(d, 16)}", f"  {b} = zext {_ivec(d, 16)} {a} to {_ivec(d, 32)}",
            f"  {c} = shl {_ivec(d, 32)} {b}, {_isplat(d, 32, 16)}",
            f"  {e} = bitcast {_ivec(d, 32)} {c} to {ltype(dtypes.float32.vec(d.count))}"]
  return e

def _f32_to_bf16(v: str, d: DType, lines: list[str], tmp) -> str:
  """A float32 value rounded to bfloat (d) to nearest even, NaN kept quiet with its sign: an instruction the
  caller appends (rewrites._to_bf16 does the same on UOps)."""
  ft = ltype(dtypes.float32.vec(d.count))
  i32, k = _ivec(d, 32), lambda x: _isplat(d, 32, x)
  u, hi, lsb, r1, r2, rnd, nan, nb, sel, t16 = (tmp() for _ in range(10))
  lines += [f"  {u} = bitcast {ft} {v} to {i32}", f"  {hi} = lshr {i32} {u}, {k(16)}",
            f"  {lsb} = and {i32} {hi}, {k(1)}", f"  {r1} = add {i32} {u}, {k(0x7fff)}", f"  {r2} = add {i32} {r1}, {lsb}",
            f"  {rnd} = lshr {i32} {r2}, {k(16)}", f"  {nan} = fcmp uno {ft} {v}, {v}", f"  {nb} = or {i32} {hi}, {k(0x40)}",
            f"  {sel} = select {_ivec(d, 1)} {nan}, {i32} {nb}, {i32} {rnd}", f"  {t16} = trunc {i32} {sel} to {_ivec(d, 16)}"]
  return f"bitcast {_ivec(d, 16)} {t16} to {ltype(d)}"

def lconst(d: DType, v: int | float) -> str:
  s = d.scalar
  if s == dtypes.bool: return "1" if v else "0"
  if dtypes.is_int(s): return str(int(v))  # two's complement literal works for unsigned too
  x = float(v)
  if s == dtypes.float16: return f"0xH{struct.unpack('<H', struct.pack('<e', x))[0]:04X}"
  if s == dtypes.bfloat16: return str(float_to_bf16(x))  # its bits, as an i16 (see _LBASE)
  if s == dtypes.float32 and not math.isnan(x):
    x = struct.unpack("<f", struct.pack("<f", x))[0] if not math.isinf(x) else x
  return f"0x{struct.unpack('<Q', struct.pack('<d', x))[0]:016X}"

def _suffix(d: DType) -> str:
  s = {dtypes.float16: "f16", dtypes.bfloat16: "bf16", dtypes.float32: "f32", dtypes.float64: "f64"}.get(d.scalar)
  if s is None: s = f"i{8 * d.scalar.itemsize}" if d.scalar != dtypes.bool else "i1"
  return f"v{d.count}{s}" if d.count > 1 else s

class LLVMRenderer(Renderer):
  name = "LLVM"
  has_threads = True
  extra_matcher = cpu_float_matcher
  # float32 EXP2/LOG2/SIN by the CPU's own vector code (cpumath.py) instead of llvm.exp2 etc., which LLVM lowers to a
  # libm call per lane
  own_math = True

  def render(self, name: str, uops: list[UOp]) -> str:
    r: dict[UOp, str] = {}
    lines: list[str] = []
    allocas: list[str] = []
    decls: set[str] = set()
    nbufs = sum(1 for u in uops if u.op is Ops.DEFINE_GLOBAL)
    # non-temporal stores in streaming kernels only (see _nt)
    stream = 0 if any(u.op is Ops.RANGE and u.arg[1] == "reduce" for u in uops) else self.stream_bytes
    cnt = [0]
    def tmp() -> str:
      cnt[0] += 1
      return f"%t{cnt[0]}"
    def intr(nm: str, d: DType, nargs: int) -> str:
      if nm.startswith("bg."):   # one of cpumath's helpers (exp2, log2, float32 sin): its definition goes in the module
        name, defs = cpumath.helper(nm[3:], d.count, d.scalar == dtypes.float64)
        decls.update(defs)
        return name
      t = ltype(d)
      full = f"llvm.{nm}.{_suffix(d)}"
      decls.add(f"declare {t} @{full}({', '.join([t] * nargs)})")
      return f"@{full}"
    def splat(d: DType, val: str) -> str:
      # a vector whose every lane is the scalar val
      t0, t1 = tmp(), tmp()
      lines.append(f"  {t0} = insertelement {ltype(d)} poison, {ltype(d.scalar)} {val}, i32 0")
      lines.append(f"  {t1} = shufflevector {ltype(d)} {t0}, {ltype(d)} poison, <{d.count} x i32> zeroinitializer")
      return t1
    def c(d: DType, v: int | float) -> str:
      return lconst(d, v) if d.count == 1 else splat(d, lconst(d.scalar, v))
    pp = self._ptr(None)
    for i, u in enumerate(uops):
      d = u.dtype
      nm = f"%v{i}"
      if u.op is Ops.CONST: r[u] = lconst(d, u.arg); continue
      if u.op in (Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR): r[u] = self._param(u, nm, uops, nbufs, lines)
      elif u.op is Ops.RANGE:
        t = ltype(d)
        allocas.append(f"  {nm}.a = alloca {t}, align 8{self.alloca_suffix}")
        if u.arg[1] == "global" and t == "i64": start, end = "%start", "%end"  # 64-bit index math
        elif u.arg[1] == "global":
          lines.append(f"  {nm}.s = trunc i64 %start to {t}")
          lines.append(f"  {nm}.e = trunc i64 %end to {t}")
          start, end = f"{nm}.s", f"{nm}.e"
        else: start, end = "0", r[u.src[0]]
        lines += [f"  store {t} {start}, {pp} {nm}.a", f"  br label %{nm[1:]}.head", f"{nm[1:]}.head:",
                  f"  {nm} = load {t}, {pp} {nm}.a", f"  {nm}.c = icmp slt {t} {nm}, {end}",
                  f"  br i1 {nm}.c, label %{nm[1:]}.body, label %{nm[1:]}.exit", f"{nm[1:]}.body:"]
        r[u] = nm
      elif u.op is Ops.ENDRANGE:
        rg = r[u.src[0]]
        t = ltype(u.src[0].dtype)
        lines += [f"  {rg}.n = add {t} {rg}, 1", f"  store {t} {rg}.n, {pp} {rg}.a", f"  br label %{rg[1:]}.head", f"{rg[1:]}.exit:"]
      elif u.op is Ops.DEFINE_ACC:
        allocas.append(f"  {nm}.a = alloca {ltype(d)}, align 64{self.alloca_suffix}")
        lines.append(f"  store {ltype(d)} {r[u.src[0]]}, {pp} {nm}.a")
        r[u] = f"{nm}.a"
      elif u.op is Ops.ASSIGN:
        acc = r[u.src[0]]
        lines.append(f"  {nm}.o = load {ltype(d)}, {pp} {acc}")
        val = u.src[1]
        if u.arg[0] is Ops.ADD and val.op is Ops.MUL and d.scalar in (dtypes.float32, dtypes.float64):
          # acc + a*b as one fused op, the same in every renderer so they agree bit for bit
          t = ltype(d)
          lines.append(f"  {nm} = call {t} {intr('fma', d, 3)}({t} {r[val.src[0]]}, {t} {r[val.src[1]]}, {t} {nm}.o)")
        elif d.scalar == dtypes.bfloat16:
          # accumulate in float32 and round after each step (as the C renderer): LLVM 20 lowers bfloat arithmetic
          # on x86 without AVX512-BF16 to a call to __truncsfbf2, which no library we load provides
          f = dtypes.float32.vec(d.count)
          fa, fb = _bf16_to_f32(f"{nm}.o", d, lines, tmp), _bf16_to_f32(r[val], d, lines, tmp)
          lines.append(f"  {nm}.f = {self._binop(u.arg[0], f, fa, fb, intr, tmp, lines)}")
          lines.append(f"  {nm} = {_f32_to_bf16(f'{nm}.f', d, lines, tmp)}")
        else: lines.append(f"  {nm} = {self._binop(u.arg[0], d, f'{nm}.o', r[val], intr, tmp, lines)}")
        lines.append(f"  store {ltype(d)} {nm}, {pp} {acc}")
        r[u] = nm
      elif u.op is Ops.REDUCE:
        lines.append(f"  {nm} = load {ltype(d)}, {pp} {r[u.src[0]]}")
        r[u] = nm
      elif u.op is Ops.INDEX: r[u] = self._index(u, r, lines, nm)
      elif u.op is Ops.LOAD and d.count > 1 and len(u.src[0].src) > 2:
        r[u] = self._masked(u, nm, r, lines, decls, splat, stream)
      elif u.op is Ops.LOAD:
        idx = u.src[0]
        ptr, valid = r[idx], (r[idx.src[2]] if len(idx.src) > 2 else None)
        mt = _mem_type(d)
        lines.append(f"  {nm}.m = load {mt}, {self._ptr(idx.src[0].dtype)} {ptr}, align {d.scalar.itemsize}")
        if d.scalar == dtypes.bool:  # bools are bytes in memory (an <N x i1> in memory would be packed bits)
          lines.append(f"  {nm}.l = icmp ne {mt} {nm}.m, {'0' if d.count == 1 else 'zeroinitializer'}")
        else: lines[-1] = lines[-1].replace(f"{nm}.m =", f"{nm}.l =")
        if valid is None: r[u] = f"{nm}.l"
        else:
          lines.append(f"  {nm} = select i1 {valid}, {ltype(d)} {nm}.l, {ltype(d)} {c(d, 0)}")
          r[u] = nm
      elif u.op is Ops.STORE and len(u.src[0].src) > 2 and u.src[0].src[2].dtype.count > 1: self._masked(u, nm, r, lines, decls, splat, stream)
      elif u.op is Ops.STORE:
        idx = u.src[0]
        ptr, valid = r[idx], (r[idx.src[2]] if len(idx.src) > 2 else None)
        vd, sv = u.src[1].dtype, r[u.src[1]]
        if vd.scalar == dtypes.bool:
          lines.append(f"  {nm}.z = zext {ltype(vd)} {sv} to {_mem_type(vd)}")
          sv = f"{nm}.z"
        st = f"  store {_mem_type(vd)} {sv}, {self._ptr(idx.src[0].dtype)} {ptr}, align {vd.scalar.itemsize}{self._nt(u, vd, stream)}"
        if valid is None: lines.append(st)
        else: lines += [f"  br i1 {valid}, label %{nm[1:]}.st, label %{nm[1:]}.sk", f"{nm[1:]}.st:", st,
                        f"  br label %{nm[1:]}.sk", f"{nm[1:]}.sk:"]
      elif u.op is Ops.VECTORIZE and any(s.dtype.count > 1 for s in u.src): r[u] = self._concat(u, r, lines, tmp)
      elif u.op is Ops.VECTORIZE:
        if all(s is u.src[0] for s in u.src): r[u] = splat(d, r[u.src[0]]); continue
        if all(s.op is Ops.CONST for s in u.src):
          r[u] = "<" + ", ".join(f"{ltype(d.scalar)} {lconst(d.scalar, s.arg)}" for s in u.src) + ">"; continue
        cur = "poison"
        for j, s in enumerate(u.src):
          t = tmp()
          lines.append(f"  {t} = insertelement {ltype(d)} {cur}, {ltype(d.scalar)} {r[s]}, i32 {j}")
          cur = t
        r[u] = cur
      elif u.op is Ops.GEP:
        s = u.src[0]
        if len(u.arg) == 1: lines.append(f"  {nm} = extractelement {ltype(s.dtype)} {r[s]}, i32 {u.arg[0]}")
        else:
          mask = ", ".join(f"i32 {j}" for j in u.arg)
          lines.append(f"  {nm} = shufflevector {ltype(s.dtype)} {r[s]}, {ltype(s.dtype)} poison, <{len(u.arg)} x i32> <{mask}>")
        r[u] = nm
      elif u.op is Ops.CAST:
        fr, v = u.src[0].dtype, r[u.src[0]]
        if dtypes.is_float(fr) and fr.itemsize == 2 and not dtypes.is_float(d) and d.scalar != dtypes.bool:
          # 16-bit float -> int through float32 (exact). On CPUs with native fp16 conversions (AVX512-FP16,
          # -mcpu=sapphirerapids) LLVM lowers fptosi.sat.i16.f16 to vcvttsh2si and two clamping compares with no
          # NaN test, so NaN became -32768 instead of 0 (docs/hw/h100-580.159.04-findings.md#finding-7)
          f32 = dtypes.float32.vec(fr.count)
          lines.append(f"  {nm}.f = {self._cast(fr, f32, v, decls.add)}")
          fr, v = f32, f"{nm}.f"
        lines.append(f"  {nm} = {self._cast(fr, d, v, decls.add)}"); r[u] = nm
      elif u.op is Ops.BITCAST:
        if u.src[0].dtype.nbytes != d.nbytes: raise RenderError(f"BITCAST from {u.src[0].dtype} to {d}: sizes differ")
        lines.append(f"  {nm} = bitcast {ltype(u.src[0].dtype)} {r[u.src[0]]} to {ltype(d)}"); r[u] = nm
      elif u.op in GroupOp.ALU:
        lines.append(f"  {nm} = {self._alu(u, [r[s] for s in u.src], intr, tmp, lines, c)}"); r[u] = nm
      elif u.op in (Ops.SINK, Ops.NOOP): pass
      elif not self._render_other(u, nm, r, lines, decls): raise RenderError(f"{self.name} renderer: cannot render {u.op}")
    # non-temporal stores are weakly ordered: they must be visible before the caller signals the kernel done
    fence = [f"  {self.stream_fence}"] if stream and any("!nontemporal" in ln for ln in lines) else []
    if fence and self.stream_fence.startswith("call"): decls.add("declare " + self.stream_fence.split("call ", 1)[1])
    body = "\n".join(allocas + ["  br label %start0", "start0:"] + lines + fence + ["  ret void"])
    return self._module(name, body, decls, uops)

  # ---- hooks for LLVM targets other than the CPU (renderer/amdgpu.py)
  alloca_suffix = ""   # the address space of allocas, where the target's is not 0

  def _ptr(self, d: DType | None) -> str:
    """The IR type of a pointer into a buffer of dtype d (None: an alloca)."""
    return "ptr"

  def _param(self, u: UOp, nm: str, uops: list[UOp], nbufs: int, lines: list[str]) -> str:
    """A kernel argument: buffer pointers (in buffer-number order: a buffer's slot is its position, not its number),
    then variables by name, as i64 slots of the `args` array."""
    d = u.dtype
    if u.op is Ops.DEFINE_GLOBAL:
      slot = sorted({x.arg for x in uops if x.op is Ops.DEFINE_GLOBAL}).index(u.arg)
      lines.append(f"  {nm}.p = getelementptr i64, ptr %args, i32 {slot}")
      lines.append(f"  {nm} = load ptr, ptr {nm}.p, align 8")
      return nm
    k = nbufs + sorted(x.arg[0] for x in uops if x.op is Ops.DEFINE_VAR).index(u.arg[0])
    lines.append(f"  {nm}.p = getelementptr i64, ptr %args, i32 {k}")
    lines.append(f"  {nm}.w = load i64, ptr {nm}.p, align 8")
    lines.append(f"  {nm} = trunc i64 {nm}.w to {ltype(d)}" if d.itemsize < 8 else f"  {nm} = add i64 {nm}.w, 0")
    return nm

  def _render_other(self, u: UOp, nm: str, r: dict[UOp, str], lines: list[str], decls: set[str]) -> bool:
    """Ops the CPU has no use for (GPU indices, shared memory, barriers): True where rendered."""
    return False

  def _module(self, name: str, body: str, decls: set[str], uops: list[UOp]) -> str:
    # a chunk [start, end) of the parallel axis lies within it: said as the arguments' ranges, LLVM knows the loop
    # counters' ranges, so 32-bit index math cannot overflow and addresses step as 64-bit pointers (without it, a
    # sign extension and recomputed address per access: a convolution ran 2.5x slower split over threads than whole)
    n = next((u.src[0].arg for u in uops if u.op is Ops.RANGE and u.arg[1] == "global" and u.src[0].op is Ops.CONST), None)
    rng = f"range(i64 0, {n + 1}) " if n is not None else ""
    return "\n".join(sorted(decls)) + (f"\n\ndefine void @{name}(ptr noalias nocapture readonly %args, i64 {rng}%start, i64 {rng}%end) "
                                       f"#0 {{\nentry:\n{body}\n}}\nattributes #0 = {{ nounwind \"no-trapping-math\"=\"true\" }}\n"
                                       + ("!1 = !{i32 1}\n" if "!nontemporal" in body else ""))

  def _nt(self, u: UOp, vd: DType, stream: int) -> str:
    """The non-temporal hint for a vector store whose indices span at least `stream` bytes (more than the last-level
    cache holds: what it writes is evicted before anyone reads it). A plain store first reads each line it writes
    into the cache (read for ownership): relu(x*y+z) over 16M floats moved 5 arrays' worth of memory for 4 (kernel
    11.4-13.3 -> 7.7-9.7 ms on a 32 MiB L3). Streaming (elementwise) kernels only: a kernel with a reduction loop
    writes rarely (a matmul's tiles after their K loop), and a tile row that does not fill whole lines would leave
    partial lines in the write-combining buffers for the length of the loop."""
    if not stream or vd.count < 4: return ""
    ix = u.src[0].src[1]
    return ", !nontemporal !1" if (ix.vmax - ix.vmin + vd.count) * vd.scalar.itemsize >= stream else ""

  def _masked(self, u: UOp, nm: str, r: dict[UOp, str], lines: list[str], decls: set[str], splat, stream: int = 0) -> str:
    """A vector load or store under a mask (one bool per lane, or one for all): lanes masked off touch no memory and
    load 0. In memory bools are bytes."""
    idx = u.src[0]
    vd = u.dtype if u.op is Ops.LOAD else u.src[1].dtype
    mt, n = _mem_type(vd), vd.count
    sfx = f"v{n}i8" if vd.scalar == dtypes.bool else _suffix(vd)
    # 16-bit floats move as their bits: LLVM 20 (llvmlite 0.50) legalizes a masked bfloat store on x86 without
    # AVX512-BF16 through float and a call to __truncsfbf2, which is in no library we load; a move needs no rounding
    bits16 = vd.scalar in (dtypes.bfloat16, dtypes.float16)
    if bits16: mt, sfx = f"<{n} x i16>", f"v{n}i16"
    m = r[idx.src[2]] if idx.src[2].dtype.count > 1 else splat(dtypes.bool.vec(n), r[idx.src[2]])
    # where every lane is valid (all of a loop but its edge) the plain access: a masked one costs more on every CPU
    # (on AMD's Zen a masked store is microcoded, several times the cost of a plain one: relu(x*y+z) over 16M+3 floats
    # ran at half NumPy's copy bandwidth with masked accesses on every iteration). The branch is always predicted.
    b, al = nm[1:], vd.scalar.itemsize
    if u.op is Ops.STORE and vd.scalar == dtypes.bool:  # (before the branch: both ways store it)
      lines.append(f"  {nm}.z = zext {ltype(vd)} {r[u.src[1]]} to {mt}")
    if u.op is Ops.STORE and bits16: lines.append(f"  {nm}.z = bitcast {ltype(vd)} {r[u.src[1]]} to {mt}")
    if u.op is Ops.LOAD:
      decls.add(f"declare {mt} @llvm.masked.load.{sfx}.p0(ptr, i32 immarg, <{n} x i1>, {mt})")
      masked = f"call {mt} @llvm.masked.load.{sfx}.p0(ptr {r[idx]}, i32 {al}, <{n} x i1> {m}, {mt} zeroinitializer)"
      if self.simd_lanes >= 16:
        # AVX-512: a masked load is one instruction, as cheap as a plain one; no branch around it, so the loads and
        # broadcasts of a tile stay in one basic block (instruction selection folds a scalar load into its broadcast
        # only there: split by the branch, each of a padded GEMM's 8 row broadcasts took a shuffle on an FMA port)
        lines.append(f"  {nm}.m = {masked}")
      else:
        decls.add(f"declare i1 @llvm.vector.reduce.and.v{n}i1(<{n} x i1>)")
        lines += [f"  {nm}.all = call i1 @llvm.vector.reduce.and.v{n}i1(<{n} x i1> {m})", f"  br i1 {nm}.all, label %{b}.full, label %{b}.part",
                  f"{b}.full:", f"  {nm}.f = load {mt}, ptr {r[idx]}, align {al}", f"  br label %{b}.join", f"{b}.part:",
                  f"  {nm}.p = {masked}", f"  br label %{b}.join", f"{b}.join:", f"  {nm}.m = phi {mt} [{nm}.f, %{b}.full], [{nm}.p, %{b}.part]"]
      if bits16:
        lines.append(f"  {nm} = bitcast {mt} {nm}.m to {ltype(vd)}")
        return nm
      if vd.scalar != dtypes.bool: return f"{nm}.m"
      lines.append(f"  {nm} = icmp ne {mt} {nm}.m, zeroinitializer")
      return nm
    decls.add(f"declare i1 @llvm.vector.reduce.and.v{n}i1(<{n} x i1>)")
    lines += [f"  {nm}.all = call i1 @llvm.vector.reduce.and.v{n}i1(<{n} x i1> {m})", f"  br i1 {nm}.all, label %{b}.full, label %{b}.part",
              f"{b}.full:"]
    val = f"{nm}.z" if vd.scalar == dtypes.bool or bits16 else r[u.src[1]]
    decls.add(f"declare void @llvm.masked.store.{sfx}.p0({mt}, ptr, i32 immarg, <{n} x i1>)")
    lines += [f"  store {mt} {val}, ptr {r[idx]}, align {al}{self._nt(u, vd, stream)}", f"  br label %{b}.join", f"{b}.part:",
              f"  call void @llvm.masked.store.{sfx}.p0({mt} {val}, ptr {r[idx]}, i32 {al}, <{n} x i1> {m})",
              f"  br label %{b}.join", f"{b}.join:"]
    return ""

  def _concat(self, u: UOp, r: dict[UOp, str], lines: list[str], tmp) -> str:
    """A VECTORIZE of vectors (and scalars): their lanes concatenated, by shuffles."""
    d, n = u.dtype, u.dtype.count
    t, cur, pos = ltype(u.dtype), "poison", 0
    for s in u.src:
      k = s.dtype.count
      if k == 1:
        nxt = tmp()
        lines.append(f"  {nxt} = insertelement {t} {cur}, {ltype(d.scalar)} {r[s]}, i32 {pos}")
      elif pos == 0 and len(u.src) == 2 and u.src[1].dtype == s.dtype:  # two halves: one shuffle
        nxt = tmp()
        mask = ", ".join(f"i32 {j}" for j in range(n))
        lines.append(f"  {nxt} = shufflevector {ltype(s.dtype)} {r[s]}, {ltype(s.dtype)} {r[u.src[1]]}, <{n} x i32> <{mask}>")
        return nxt
      else:
        wide, nxt = tmp(), tmp()
        wmask = ", ".join(f"i32 {j}" if j < k else "i32 poison" for j in range(n))
        lines.append(f"  {wide} = shufflevector {ltype(s.dtype)} {r[s]}, {ltype(s.dtype)} poison, <{n} x i32> <{wmask}>")
        if cur == "poison": nxt = wide
        else:
          mask = ", ".join(f"i32 {n + j - pos}" if pos <= j < pos + k else f"i32 {j}" for j in range(n))
          lines.append(f"  {nxt} = shufflevector {t} {cur}, {t} {wide}, <{n} x i32> <{mask}>")
      cur, pos = nxt, pos + k
    return cur

  def _index(self, u: UOp, r: dict[UOp, str], lines: list[str], nm: str) -> str:
    buf, idx = u.src[0], u.src[1]
    assert isinstance(bd := buf.dtype, PtrDType), f"INDEX into a non-pointer {bd}"
    it = ltype(idx.dtype)
    iv = r[idx]
    if len(u.src) > 2 and u.src[2].dtype.count > 1:  # a mask per lane: the masked access touches no lane past the end
      lines.append(f"  {nm} = getelementptr {ltype(bd.base)}, ptr {r[buf]}, {it} {iv}")
      return nm
    if len(u.src) > 2:  # masked: never form an address from an index that may be out of range
      lines.append(f"  {nm}.i = select i1 {r[u.src[2]]}, {it} {iv}, {it} 0")
      iv = f"{nm}.i"
    lines.append(f"  {nm} = getelementptr inbounds {ltype(bd.base)}, {self._ptr(bd)} {r[buf]}, {it} {iv}")
    return nm

  def _binop(self, op: Ops, d: DType, a: str, b: str, intr, tmp, lines: list[str]) -> str:
    t = ltype(d)
    isf = dtypes.is_float(d)
    if op is Ops.ADD: return f"{'fadd' if isf else ('or' if d.scalar == dtypes.bool else 'add')} {t} {a}, {b}"
    if op is Ops.MUL: return f"{'fmul' if isf else ('and' if d.scalar == dtypes.bool else 'mul')} {t} {a}, {b}"
    if op is Ops.MAX:
      if isf: return f"call {t} {intr('maximum', d, 2)}({t} {a}, {t} {b})"
      if d.scalar == dtypes.bool: return f"or {t} {a}, {b}"
      return f"call {t} {intr('umax' if dtypes.is_unsigned(d) else 'smax', d, 2)}({t} {a}, {t} {b})"
    raise RenderError(f"LLVM renderer: no reduction {op}")

  def _alu(self, u: UOp, s: list[str], intr, tmp, lines: list[str], c) -> str:
    op, d = u.op, u.dtype
    sd = u.src[-1].dtype if op is Ops.WHERE else u.src[0].dtype
    t, st = ltype(d), ltype(sd)
    isf, uns = dtypes.is_float(sd), dtypes.is_unsigned(sd)
    if op in (Ops.ADD, Ops.MUL, Ops.MAX): return self._binop(op, d, s[0], s[1], intr, tmp, lines)
    if op is Ops.SUB: return f"{'fsub' if isf else 'sub'} {t} {s[0]}, {s[1]}"
    if op is Ops.NEG:
      if isf: return f"fneg {t} {s[0]}"
      return f"xor {t} {s[0]}, {c(d, True)}" if d.scalar == dtypes.bool else f"sub {t} {c(d, 0)}, {s[0]}"
    if op is Ops.FDIV: return f"fdiv {t} {s[0]}, {s[1]}"
    if op is Ops.RECIP: return f"fdiv {t} {c(d, 1.0)}, {s[0]}"
    if op in (Ops.IDIV, Ops.MOD):
      # b == 0 -> 0; b == -1 -> -a (or 0 for MOD): both are UB/traps in LLVM otherwise
      zero, one, m1 = c(d, 0), c(d, 1), c(d, -1)
      bz, safe, res = tmp(), tmp(), tmp()
      cmp = "i1" if d.count == 1 else f"<{d.count} x i1>"
      lines.append(f"  {bz} = icmp eq {t} {s[1]}, {zero}")
      if uns:
        lines.append(f"  {safe} = select {cmp} {bz}, {t} {one}, {t} {s[1]}")
        lines.append(f"  {res} = {'udiv' if op is Ops.IDIV else 'urem'} {t} {s[0]}, {safe}")
        return f"select {cmp} {bz}, {t} {zero}, {t} {res}"
      bm, bad, neg = tmp(), tmp(), tmp()
      lines.append(f"  {bm} = icmp eq {t} {s[1]}, {m1}")
      lines.append(f"  {bad} = or {cmp} {bz}, {bm}")
      lines.append(f"  {safe} = select {cmp} {bad}, {t} {one}, {t} {s[1]}")
      lines.append(f"  {res} = {'sdiv' if op is Ops.IDIV else 'srem'} {t} {s[0]}, {safe}")
      lines.append(f"  {neg} = sub {t} {zero}, {s[0]}")
      alt = tmp()
      lines.append(f"  {alt} = select {cmp} {bm}, {t} {neg if op is Ops.IDIV else zero}, {t} {zero}")
      return f"select {cmp} {bad}, {t} {alt}, {t} {res}"
    if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ):
      if isf: pred = {Ops.CMPLT: "olt", Ops.CMPNE: "une", Ops.CMPEQ: "oeq"}[op]
      elif sd.scalar == dtypes.bool: pred = {Ops.CMPLT: "ult", Ops.CMPNE: "ne", Ops.CMPEQ: "eq"}[op]
      else: pred = {Ops.CMPLT: "ult" if uns else "slt", Ops.CMPNE: "ne", Ops.CMPEQ: "eq"}[op]
      return f"{'fcmp' if isf else 'icmp'} {pred} {st} {s[0]}, {s[1]}"
    if op in (Ops.AND, Ops.OR, Ops.XOR): return f"{op.name.lower()} {t} {s[0]}, {s[1]}"
    if op in (Ops.SHL, Ops.SHR):
      amt, sa = tmp(), s[1]
      if u.src[1].dtype.scalar != d.scalar:  # the amount may be of another int dtype: bring it to the value's width
        sa = tmp()
        lines.append(f"  {sa} = {self._cast(u.src[1].dtype, d, s[1], None)}")
      lines.append(f"  {amt} = and {t} {sa}, {c(d, 8 * d.scalar.itemsize - 1)}")
      return f"{'shl' if op is Ops.SHL else ('lshr' if uns else 'ashr')} {t} {s[0]}, {amt}"
    if op is Ops.WHERE: return f"select {ltype(u.src[0].dtype)} {s[0]}, {t} {s[1]}, {t} {s[2]}"
    if op is Ops.MULACC:
      if isf: return f"call {t} {intr('fma', d, 3)}({t} {s[0]}, {t} {s[1]}, {t} {s[2]})"
      m = tmp(); lines.append(f"  {m} = mul {t} {s[0]}, {s[1]}")
      return f"add {t} {m}, {s[2]}"
    if op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.TRUNC):
      if not isf: raise RenderError(f"{op.name} needs a float dtype, got {d}")
      if self.own_math and (op is Ops.EXP2 or op is Ops.LOG2 or op is Ops.SIN) and \
         (d.scalar == dtypes.float32 or (d.scalar == dtypes.float64 and op is not Ops.SIN)):
        return f"call {t} {intr('bg.' + op.name.lower(), d, 1)}({t} {s[0]})"
      return f"call {t} {intr(op.name.lower(), d, 1)}({t} {s[0]})"
    raise RenderError(f"LLVM renderer: cannot render {op} for {d}")

  def _cast(self, fr: DType, to: DType, v: str, declare) -> str:
    ft, tt = ltype(fr), ltype(to)
    if to.scalar == dtypes.bool:
      if dtypes.is_float(fr): return f"fcmp une {ft} {v}, {lconst(fr, 0.0) if fr.count == 1 else 'zeroinitializer'}"
      return f"icmp ne {ft} {v}, {'0' if fr.count == 1 else 'zeroinitializer'}"
    if fr.scalar == dtypes.bool:
      return f"uitofp {ft} {v} to {tt}" if dtypes.is_float(to) else f"zext {ft} {v} to {tt}"
    if dtypes.is_float(fr) and dtypes.is_float(to):
      if fr.itemsize == to.itemsize: return f"fadd {tt} {v}, {lconst(to, -0.0)}" if fr.scalar == to.scalar else f"bitcast {ft} {v} to {tt}"
      return f"{'fpext' if to.itemsize > fr.itemsize else 'fptrunc'} {ft} {v} to {tt}"
    if dtypes.is_float(fr):
      # saturating conversion: NaN -> 0, out of range -> the nearest representable integer
      sat = "fptoui.sat" if dtypes.is_unsigned(to) else "fptosi.sat"
      fn = f"llvm.{sat}.{_suffix(to)}.{_suffix(fr)}"
      declare(f"declare {tt} @{fn}({ft})")
      return f"call {tt} @{fn}({ft} {v})"
    if dtypes.is_float(to): return f"{'uitofp' if dtypes.is_unsigned(fr) else 'sitofp'} {ft} {v} to {tt}"
    if to.itemsize == fr.itemsize: return f"add {tt} {v}, 0" if fr.count == 1 else f"bitcast {ft} {v} to {tt}"
    if to.itemsize < fr.itemsize: return f"trunc {ft} {v} to {tt}"
    return f"{'zext' if dtypes.is_unsigned(fr) else 'sext'} {ft} {v} to {tt}"
