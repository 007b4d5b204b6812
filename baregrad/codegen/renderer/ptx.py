"""PTX renderer: a linear program -> PTX text for NVIDIA GPUs (assembled to a cubin by ptxas, drivers/nv_compile.py).

Scalar code (vectorized=False: vectors are split into lanes before rendering). One kernel per module:

  .visible .entry NAME(.param .u64 data0, ..., .param .u64 dataN, .param .s32 var_a, ...)

Parameter layout (the driver fills constant bank 0 from it at its GPU generation's parameter offset, which the cubin
states too, in EIATTR_PARAM_CBANK; the PTX itself does not depend on it):
- one `.param .u64 data{i}` per buffer slot i = DEFINE_GLOBAL arg 0..max (a slot no uop uses is still declared, so
  the layout depends only on the arg numbers), each 8 bytes, 8-aligned;
- then one param per DEFINE_VAR, sorted by name (the same order the CPU ABI uses, see llvmir.py), named
  `var_<name>`, of the variable's dtype (`.s32` for int32 variables), naturally aligned.
`param_layout(bufs, vars)` computes the byte offsets; EIATTR_KPARAM_INFO in the cubin says the same (tests check it).

Semantics (ir/alu.py), and how each is reached in PTX:
- integer division and modulo by 0 give 0 and INT_MIN // -1 wraps: the divisor is replaced by 1 when it is 0 or -1
  and the result selected afterwards (PTX div/rem by zero gives an unspecified value, not a trap);
- shift amounts are taken modulo the bit width (`and` before shl/shr; PTX clamps shifts >= width instead);
- int8/uint8 live in 16-bit registers, sign/zero-extended; every 8-bit result is re-normalized (cvt.s16.s8 / and 0xff)
  so it wraps like an 8-bit value;
- float -> int casts saturate (cvt.rzi is clamped to the destination range by default) and NaN gives 0: the PTX ISA
  gives 0 for NaN only for some type pairs (f64 sources and 64-bit destinations give MININT), so NaN is selected
  to 0 explicitly;
- float add/sub/mul carry `.rn`: without a rounding modifier ptxas may contract mul+add into fma, and results would
  no longer match the CPU bit for bit. ASSIGN of ADD with a MUL value is an explicit fma.rn, as in every renderer;
- MAX on floats is `max.NaN.f32` (sm_80+, propagates NaN, as a canonical NaN where the CPU keeps the input's
  payload); f64 has no .NaN form, so `max.f64` (which drops a NaN) is followed by a select of a + b where either input
  is NaN. The renderer does not rely on how max orders signed zeros: equal inputs (+0 == -0 included) are combined
  with a bitwise AND of their bits, so max(+0, -0) is +0 as in ir/alu.py and equal non-zero values are unchanged;
- comparisons are IEEE: lt/eq ordered (false with NaN), ne unordered (true with NaN);
- bool is a predicate in registers and a byte (0/1) in memory.
Precision (differs from the CPU, whose libm is correctly rounded or close):
- FDIV div.rn, RECIP rcp.rn, SQRT sqrt.rn are IEEE correctly rounded (f32 and f64): identical to the CPU;
- EXP2 ex2.approx.f32 (max 2 ulp), LOG2 lg2.approx.f32 (about 2^-22 absolute error near 1), SIN sin.approx.f32 (2^-20.9
  absolute error in [-pi, pi]; the argument is first reduced by 2*pi in three fused steps, so large arguments keep
  that accuracy up to |x| ~ 1e5) are approximations; the non-ftz forms are used, so subnormals are kept;
- float64 EXP2/LOG2/SIN have no PTX instruction: the range is handled in float64 (exp2: 2^floor(x) built from exponent
  bits, so overflow and underflow happen where float64's do; log2: exponent split, subnormals scaled; sin: reduction
  by 2*pi in float64) and the core is the float32 instruction, so the result carries float32 precision (about 1e-7
  relative, 2^-22 absolute for log2): a known gap against the CPU's float64 libm;
- float16 and bfloat16 arithmetic is promoted to float32 by the shared cpu_float_matcher (as on the CPU); bfloat16
  accumulators are widened with a shift and rounded back with cvt.rn.bf16.f32 (RNE; a NaN becomes the canonical
  0x7fff where the CPU keeps the payload's top bits).
"""
from __future__ import annotations
import re, struct
from typing import Any
from baregrad.ir.dtype import DType, PtrDType, dtypes
from baregrad.ir.ops import UOp, Ops, GroupOp
from baregrad.codegen.renderer import Renderer, RenderError
from baregrad.codegen.rewrites import cpu_float_matcher
from baregrad.codegen.renderer import ptx_tma

def _sm(arch: str) -> int:
  m = re.fullmatch(r"sm_(\d+)[af]?", arch)
  if m is None: raise ValueError(f"PTX arch must look like sm_80, sm_90 or sm_90a, got {arch!r}")
  return int(m.group(1))

def ptx_version(arch: str) -> str:
  """The lowest PTX ISA version that knows the target (ptxas 12.x and 13.x accept it)."""
  sm = _sm(arch)
  if sm >= 110: return "9.0"
  if sm in (103, 121): return "8.8"
  if sm >= 120: return "8.7"
  if sm >= 100: return "8.6"
  return "8.0"   # sm_90 needs 7.8; 8.0 is CUDA 12.0's

# register class per scalar dtype: (declared type, name prefix)
_REG = {dtypes.bool: ("pred", "%p"), dtypes.int8: ("b16", "%rs"), dtypes.uint8: ("b16", "%rs"), dtypes.int16: ("b16", "%rs"),
        dtypes.uint16: ("b16", "%rs"), dtypes.float16: ("b16", "%h"), dtypes.bfloat16: ("b16", "%hb"),
        dtypes.int32: ("b32", "%r"), dtypes.uint32: ("b32", "%r"), dtypes.int64: ("b64", "%rd"), dtypes.uint64: ("b64", "%rd"),
        dtypes.float32: ("f32", "%f"), dtypes.float64: ("f64", "%fd")}
# arithmetic type suffix (8-bit integers compute in 16 bits)
_AT = {dtypes.int8: "s16", dtypes.uint8: "u16", dtypes.int16: "s16", dtypes.uint16: "u16", dtypes.int32: "s32",
       dtypes.uint32: "u32", dtypes.int64: "s64", dtypes.uint64: "u64", dtypes.float16: "f16", dtypes.bfloat16: "bf16",
       dtypes.float32: "f32", dtypes.float64: "f64", dtypes.bool: "pred"}
# memory type for ld/st
_MT = {dtypes.bool: "u8", dtypes.int8: "s8", dtypes.uint8: "u8", dtypes.int16: "s16", dtypes.uint16: "u16", dtypes.int32: "s32",
       dtypes.uint32: "u32", dtypes.int64: "s64", dtypes.uint64: "u64", dtypes.float16: "b16", dtypes.bfloat16: "b16",
       dtypes.float32: "f32", dtypes.float64: "f64"}
_BITS = {1: "b16", 2: "b16", 4: "b32", 8: "b64"}
_UT = {1: "u16", 2: "u16", 4: "u32", 8: "u64"}
_PARAM_T = {dtypes.int32: "s32", dtypes.uint32: "u32", dtypes.int64: "s64", dtypes.uint64: "u64", dtypes.int16: "s16",
            dtypes.uint16: "u16", dtypes.int8: "s8", dtypes.uint8: "u8", dtypes.float32: "f32", dtypes.float64: "f64"}

def ptx_imm(d: DType, v: int | float) -> str:
  """An immediate of dtype d as PTX writes it (floats as raw bits: 0f/0d)."""
  s = d.scalar
  if s == dtypes.bool: return "1" if v else "0"
  if dtypes.is_int(s):
    bits = 8 * (2 if s.itemsize == 1 else s.itemsize)  # 8-bit values live sign/zero-extended in 16 bits
    return f"0x{int(v) & ((1 << bits) - 1):0{bits // 4}X}"
  x = float(v)
  if s == dtypes.float32: return f"0f{struct.unpack('<I', struct.pack('<f', x))[0]:08X}"
  if s == dtypes.float64: return f"0d{struct.unpack('<Q', struct.pack('<d', x))[0]:016X}"
  if s == dtypes.float16: return f"0x{struct.unpack('<H', struct.pack('<e', x))[0]:04X}"
  if s == dtypes.bfloat16:
    from baregrad.ir.dtype import float_to_bf16
    return f"0x{float_to_bf16(x):04X}"
  raise RenderError(f"PTX: no immediate for {d}")

def _fused_mma(uops: list[UOp]) -> dict[UOp, list]:
  """WMMAs whose accumulator input is zero and whose every lane is added (only) into its own accumulator: the mma can
  take the accumulators as C and D. Maps each such WMMA to its accumulators (DEFINE_ACCs) in lane order, and each of
  those ASSIGNs to its WMMA."""
  uses: dict[UOp, int] = {}
  for u in uops:
    for x in u.src: uses[x] = uses.get(x, 0) + 1
  by: dict[UOp, dict[int, UOp]] = {}
  for u in uops:
    if u.op is Ops.ASSIGN and u.arg[0] is Ops.ADD and u.src[1].op is Ops.GEP and u.src[1].src[0].op is Ops.WMMA and uses.get(u.src[1]) == 1:
      by.setdefault(u.src[1].src[0], {})[u.src[1].arg[0]] = u
  out: dict[UOp, list] = {}
  for w, asg in by.items():
    zero = all(x.op is Ops.CONST and x.arg == 0 for x in w.src[2].src) if w.src[2].op is Ops.VECTORIZE else False
    if zero and sorted(asg) == list(range(w.dtype.count)) and uses.get(w) == w.dtype.count:
      out[w] = [asg[i].src[0] for i in range(w.dtype.count)]
      for a in asg.values(): out[a] = [w]
  return out

def _async_copies(uops: list[UOp]) -> set[UOp]:
  """STOREs marked "async" (codegen/stage.py) of a global LOAD used nowhere else, of 4, 8 or 16 bytes: they
  become one cp.async each (with the LOAD's mask as the copy's source size), and the LOAD itself is not emitted."""
  uses: dict[UOp, int] = {}
  for u in uops:
    for x in u.src: uses[x] = uses.get(x, 0) + 1
  out: set[UOp] = set()
  for u in uops:
    if u.op is not Ops.STORE or u.arg != "async": continue
    v, via = u.src[1], set()
    if v.op is Ops.VECTORIZE and all(x.op is Ops.GEP for x in v.src) and len({x.src[0] for x in v.src}) == 1 and \
       [x.arg for x in v.src] == [(i,) for i in range(len(v.src))] and all(uses.get(x) == 1 for x in v.src) and uses.get(v) == 1:
      via, v = {v, *v.src}, v.src[0].src[0]   # the lanes of one vector load, in order
      if v.dtype.count != len(via) - 1 or uses.get(v) != len(via) - 1: continue
    elif uses.get(v) != 1: continue
    if v.op is Ops.LOAD and v.dtype.nbytes in (4, 8, 16) and not _is_local(v.src[0].src[0]) and v.dtype.scalar != dtypes.bool:
      out |= {u, v, *via}
  return out

def _base_offset(idx: UOp) -> tuple[UOp, int] | None:
  """(x, c) for a 32-bit index x + c with a constant c > 0 (an address is then x's plus an immediate byte offset)."""
  if idx.op is not Ops.ADD or idx.dtype.scalar.itemsize != 4: return None
  for a, b in (idx.src, idx.src[::-1]):
    if b.op is Ops.CONST and isinstance(b.arg, int) and 0 < b.arg < 1 << 24: return a, b.arg
  return None

def _is_local(buf: UOp) -> bool: return isinstance(buf.dtype, PtrDType) and buf.dtype.local

def param_name(u: UOp) -> str:
  if u.op is Ops.DEFINE_GLOBAL: return f"data{u.arg}"
  return "var_" + re.sub(r"[^A-Za-z0-9_]", "_", u.arg[0])

def param_layout(bufs: list[UOp], vars: list[UOp]) -> list[tuple[str, int, int]]:
  """(name, byte offset, size) of each kernel parameter, relative to the start of the parameter block."""
  out = [(f"data{i}", 8 * i, 8) for i in range(max((u.arg for u in bufs), default=-1) + 1)]
  off = 8 * len(out)
  for u in dict.fromkeys(sorted(vars, key=lambda v: v.arg[0])):
    sz = u.dtype.itemsize
    off = (off + sz - 1) // sz * sz
    out.append((param_name(u), off, sz)); off += sz
  return out

# Static .shared is limited to 48 KB per kernel (CUDA C Programming Guide, "Shared Memory": allocations above 48 KB
# per block are architecture-specific and must use dynamic shared memory); above it the renderer declares one
# `.extern .shared` array (PTX ISA 5.1.x, "Variable declarations": an extern array of unspecified size is sized by the
# launch) and states its size in a DYN_SHARED_NOTE line, which the NV driver reads (drivers/nv/program.py) to size
# the launch (QMD SHARED_MEMORY_SIZE, constant bank 0's %dynamic_smem_size).
STATIC_SHARED_MAX = 48 << 10
DYN_SHARED_NOTE = "// baregrad: dynamic shared memory bytes "
_DYN_NOTE_RE = re.compile("^" + re.escape(DYN_SHARED_NOTE) + r"(\d+)$", re.M)

def dynamic_shared_bytes(ptx: str) -> int:
  """The dynamic shared memory (bytes) a kernel the PTX renderer wrote must be launched with (0: none)."""
  m = _DYN_NOTE_RE.search(ptx)
  return int(m.group(1)) if m else 0

# A kernel that builds tensor maps on the device (TMA loads, sm_90a) writes them into per-launch global scratch the
# driver gives it (drivers/nv/scratch.py): a last parameter `.param .u64 tmap_scratch` holds the address, and a
# TMAP_SCRATCH_NOTE line states the bytes each block uses (its maps, 128 bytes each, at block * bytes).
TMAP_SCRATCH_NOTE = "// baregrad: tensor map scratch bytes per block "
TMAP_SCRATCH_PARAM = "tmap_scratch"
_TMAP_NOTE_RE = re.compile("^" + re.escape(TMAP_SCRATCH_NOTE) + r"(\d+)$", re.M)

# A warp-specialized TMA pipeline adds a producer warpgroup to the block the kernel's index math describes: a
# PRODUCER_NOTE line states the threads to add to the launch's first block dimension (codegen/program.py reads it).
PRODUCER_NOTE = "// baregrad: producer threads "
_PRODUCER_RE = re.compile("^" + re.escape(PRODUCER_NOTE) + r"(\d+)$", re.M)

def producer_threads(ptx: str) -> int:
  """The threads a kernel the PTX renderer wrote needs in its block beyond those of its index math (0: none)."""
  m = _PRODUCER_RE.search(ptx)
  return int(m.group(1)) if m else 0

def tmap_scratch_bytes(ptx: str) -> int:
  """The per-block tensor-map scratch (bytes) a kernel the PTX renderer wrote needs at launch (0: none, and no
  tmap_scratch parameter)."""
  m = _TMAP_NOTE_RE.search(ptx)
  return int(m.group(1)) if m else 0

def _shared_layout(uops: list[UOp], align: int = 16) -> tuple[dict[UOp, int], int]:
  """DEFINE_LOCAL -> its byte offset in one shared region (`align`-byte aligned each), and the region's size."""
  offs, total = {}, 0
  for u in uops:
    if u.op is Ops.DEFINE_LOCAL and u not in offs:
      offs[u] = total
      total += -(-max(1, u.arg[1] * u.dtype.base.itemsize) // align) * align  # type: ignore[attr-defined]
  return offs, total

class PTXRenderer(Renderer):
  name = "PTX"
  has_local = True
  global_max = (2 ** 31 - 1, 65535, 65535)
  local_max = 1024
  vectorized = False
  mem_vector_bytes = 16     # ld/st.v2/.v4 up to 128 bits
  has_ldmatrix = True       # tensor-core fragments of 16-bit types from shared memory in one ldmatrix
  warp_size = 32
  shared_max = STATIC_SHARED_MAX   # shared memory per kernel: static only unless the device gives its opt-in limit
  regs_per_thread = 255
  extra_matcher = cpu_float_matcher

  def __init__(self, arch: str = "sm_90", compute_units: int = 0, shared_max: int = 0) -> None:
    """`shared_max`: the shared memory one block may use on the target GPU (the NV driver's GPUArch.max_shared); above
    STATIC_SHARED_MAX a kernel's workgroup memory is declared dynamic (see render). 0: static shared memory only."""
    if _sm(arch) < 80: raise ValueError(f"PTX renderer needs sm_80 or newer (max.NaN, cvt.bf16), got {arch}")
    self.arch, self.compute_units = arch, compute_units
    if shared_max: self.shared_max = shared_max
    self.has_async_copy = True   # cp.async: sm_80+
    from baregrad.codegen.tc import MMA_SM80, MMA_SM80_PAIRS, WGMMA_SM90A
    self.tensor_cores = MMA_SM80 + MMA_SM80_PAIRS  # mma.sync m16n8k16 f16/bf16 (alone and in pairs), m16n8k8 tf32: sm_80+
    if arch == "sm_90a": self.tensor_cores = WGMMA_SM90A + self.tensor_cores   # wgmma: sm_90a only (PTX ISA 9.7.15)
    # TMA from device-built tensor maps: tensormap.replace is sm_90a only (PTX ISA 9.7.9.28), cp.async.bulk.tensor sm_90
    self.has_tma = arch == "sm_90a"

  @staticmethod
  def producer_threads(src: str) -> int:
    """The threads the kernel `src` needs in its block's first dimension beyond its index math's (a producer warpgroup)."""
    return producer_threads(src)

  @staticmethod
  def dynamic_shared_bytes(src: str) -> int:
    """The dynamic shared memory (bytes) the kernel `src` (this renderer's output) needs at launch."""
    return dynamic_shared_bytes(src)

  def render(self, name: str, uops: list[UOp]) -> str:
    r: dict[UOp, Any] = {}   # a node's register, or a vector's or a WMMA's list of them
    cnt: dict[str, int] = {}
    gaddr: dict[tuple[UOp, UOp], str] = {}   # (global buffer, index) -> the register holding that element's address
    lines: list[str] = []
    shared: list[str] = []   # .shared declarations (workgroup memory)
    wg = any(x.op is Ops.WMMA and x.arg.desc for x in uops)
    salign = 1024 if wg else 16   # a wgmma tile's 128-byte swizzle is on the address: its pattern repeats every 1024 bytes
    soffs, stotal = _shared_layout(uops, salign)
    dyn = stotal if stotal > STATIC_SHARED_MAX else 0
    if stotal > self.shared_max:
      raise RenderError(f"PTX: kernel {name} needs {stotal} bytes of shared memory; {self.arch} allows {self.shared_max} a block")
    # (module scope: ptxas takes .extern only there)
    head = f"{DYN_SHARED_NOTE}{dyn}\n.extern .shared .align {max(128, salign)} .b8 smem[];\n\n" if dyn else ""
    def reg(d: DType) -> str:
      if isinstance(d, PtrDType): pre = "%rd"
      else:
        if d.count > 1: raise RenderError(f"PTX renderer got a vector {d}: vectors are split before rendering")
        pre = _REG[d.scalar][1]
      cnt[pre] = cnt.get(pre, 0) + 1
      return f"{pre}{cnt[pre]}"
    def emit(s: str) -> None: lines.append("  " + s)
    def cst(d: DType, v: int | float) -> str:
      x = reg(d)
      ty = "pred" if d.scalar == dtypes.bool else _BITS[d.scalar.itemsize] if not dtypes.is_float(d) or d.itemsize == 2 else _AT[d.scalar]
      emit(f"mov.{ty} {x}, {ptx_imm(d, v)};")
      return x
    def norm8(d: DType, x: str) -> None:
      if d.scalar == dtypes.int8: emit(f"cvt.s16.s8 {x}, {x};")
      elif d.scalar == dtypes.uint8: emit(f"and.b16 {x}, {x}, 0x00FF;")
    bufs = sorted((u for u in uops if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg)
    vars_ = sorted((u for u in uops if u.op is Ops.DEFINE_VAR), key=lambda u: u.arg[0])
    nbuf = max((u.arg for u in bufs), default=-1) + 1
    params = [f"  .param .u64 data{i}" for i in range(nbuf)]
    seen_vars: set[str] = set()
    for dv in vars_:
      if dv.arg[0] in seen_vars: continue
      seen_vars.add(dv.arg[0])
      if dv.dtype.scalar not in _PARAM_T: raise RenderError(f"PTX: DEFINE_VAR {dv.arg[0]} of dtype {dv.dtype} cannot be a parameter")
      params.append(f"  .param .{_PARAM_T[dv.dtype.scalar]} {param_name(dv)}")
    # a TMA pipeline (codegen/tma.py): its tensor maps live in the launch's scratch, the last parameter (ptx_tma.py)
    tma_setups = [u for u in uops if u.op is Ops.BARRIER and isinstance(u.arg, tuple) and u.arg[0] == "tma_setup"]
    if len(tma_setups) > 1: raise RenderError("PTX: more than one TMA setup in a kernel")
    if tma_setups:
      params.append(f"  .param .u64 {TMAP_SCRATCH_PARAM}")
      head = f"{TMAP_SCRATCH_NOTE}{len(tma_setups[0].arg[2]) * ptx_tma.MAP_BYTES}\n{head}"
    tma_st = ptx_tma.TmaState()
    def expr(e: UOp, memo: dict) -> str:
      """Registers for integer expression e where memo gives some of its nodes (the TMA producer's step counter): nodes
      that depend on them computed here, the others reused where already rendered (ptx_tma._producer)."""
      vary = set(memo)
      for x in e.toposort():
        if x in memo: continue
        if any(s in vary for s in x.src): vary.add(x)
        elif x in r and isinstance(r[x], str): memo[x] = r[x]; continue
        if x.op is Ops.CONST: memo[x] = cst(x.dtype, x.arg)
        elif x.op is Ops.SPECIAL:
          nm = x.arg[0]
          y = reg(dtypes.int32)
          emit(f"mov.u32 {y}, {'%ctaid' if nm.startswith('gidx') else '%tid'}.{'xyz'[int(nm[4:])]};")
          memo[x] = y if x.dtype.scalar == dtypes.int32 else self._cast(dtypes.int32, x.dtype, y, reg, emit, norm8)
        elif x.op in GroupOp.ALU: memo[x] = self._alu(x, [memo[s] for s in x.src], reg, emit, norm8)
        elif x.op is Ops.CAST: memo[x] = self._cast(x.src[0].dtype, x.dtype, memo[x.src[0]], reg, emit, norm8)
        else: raise RenderError(f"PTX: the TMA producer cannot compute a {x.op} in its box coordinates")
      return memo[e]
    pos = {u: i for i, u in enumerate(uops)}
    fused = _fused_mma(uops)   # WMMA -> accumulators it updates in place; ASSIGNs folded into it
    copies = _async_copies(uops)  # STOREs to shared memory done by cp.async, and the global LOADs they take over
    # wgmma in flight (sm_90a): the accumulators of the wgmmas issued and committed but not waited for. They are waited
    # for (wait_group 0) only before a barrier (the pipeline then refills a buffer they read), at the end of a loop with
    # a barrier in it (the next step's barrier), before anything reads those registers, and at the end
    pend: set[str] = set()
    bar_loops = {uops[j].src[0] for j in range(len(uops)) if uops[j].op is Ops.ENDRANGE and
                 any(x.op is Ops.BARRIER for x in uops[pos[uops[j].src[0]]:j])} if wg else set()
    def reads_pending(u: UOp) -> bool:
      if u.op in (Ops.GEP, Ops.VECTORIZE) or (u.op is Ops.ASSIGN and u in fused): return False   # aliases, no code
      for x in u.src:
        v = r.get(x)
        if (isinstance(v, str) and v in pend) or (isinstance(v, list) and any(y in pend for y in v if isinstance(y, str))):
          return True
      return False
    for i, u in enumerate(uops):
      d = u.dtype
      if pend and (u.op is Ops.BARRIER or (u.op is Ops.ENDRANGE and u.src[0] in bar_loops) or reads_pending(u)):
        emit("wgmma.wait_group.sync.aligned 0;")
        pend.clear()
      if u.op is Ops.CONST: r[u] = cst(d, u.arg)
      elif u.op is Ops.DEFINE_GLOBAL:
        x, y = reg(d), reg(d)
        emit(f"ld.param.u64 {x}, [data{u.arg}];")
        emit(f"cvta.to.global.u64 {y}, {x};"); r[u] = y
      elif u.op is Ops.DEFINE_VAR:
        x = reg(d)
        emit(f"ld.param.{_PARAM_T[d.scalar]} {x}, [{param_name(u)}];")   # 8-bit params are extended into 16 bits
        r[u] = x
      elif u.op is Ops.SPECIAL:
        nm, _ = u.arg
        sreg = {"gidx": "%ctaid", "lidx": "%tid"}.get(nm[:4])
        if sreg is None or nm[4:] not in ("0", "1", "2"): raise RenderError(f"PTX: unknown SPECIAL {nm}")
        x = reg(dtypes.int32)
        emit(f"mov.u32 {x}, {sreg}.{'xyz'[int(nm[4:])]};")
        r[u] = x if d.scalar == dtypes.int32 else self._cast(dtypes.int32, d, x, reg, emit, norm8)
      elif u.op is Ops.RANGE:
        x = reg(d)
        at = _AT[d.scalar]
        end = u.src[0]
        emit(f"mov.{_BITS[d.itemsize]} {x}, 0;")
        lines.append(f"$L{i}_head:")
        if not (end.op is Ops.CONST and int(end.arg) >= 1):  # a loop that may run zero times tests first
          p = reg(dtypes.bool)
          emit(f"setp.ge.{at} {p}, {x}, {r[end]};")
          emit(f"@{p} bra $L{i}_exit;")
        r[u] = x
      elif u.op is Ops.ENDRANGE:
        rg = u.src[0]
        ptx_tma.end_step(rg, reg, emit, tma_st)   # a warp-specialized TMA pipeline's consumers free the step's buffer
        i0 = pos[rg]
        x, at = r[rg], _AT[rg.dtype.scalar]
        emit(f"add.{at} {x}, {x}, 1;")
        end = rg.src[0]
        if end.op is Ops.CONST and int(end.arg) >= 1:
          p = reg(dtypes.bool)
          emit(f"setp.lt.{at} {p}, {x}, {r[end]};")
          emit(f"@{p} bra $L{i0}_head;")
        else: emit(f"bra $L{i0}_head;")
        lines.append(f"$L{i0}_exit:")
      elif u.op is Ops.DEFINE_ACC:
        x = reg(d)
        emit(f"mov.{self._movt(d)} {x}, {r[u.src[0]]};"); r[u] = x
      elif u.op is Ops.ASSIGN and u in fused: r[u] = r[u.src[0]]
      elif u.op is Ops.WMMA:   # (tiles TMA wrote are in the async proxy already: no proxy fence before the wgmma)
        r[u] = self._mma(u, [r[x] for x in fused[u]] if u in fused else None, r, reg, emit, pend, proxy_fence=not tma_setups)
      elif u.op is Ops.ASSIGN:
        acc, val = r[u.src[0]], u.src[1]
        s = d.scalar
        if u.arg[0] is Ops.ADD and val.op is Ops.MUL and s in (dtypes.float32, dtypes.float64):
          emit(f"fma.rn.{_AT[s]} {acc}, {r[val.src[0]]}, {r[val.src[1]]}, {acc};")  # the same fused op in every renderer
        elif s in (dtypes.float16, dtypes.bfloat16):
          a32, v32 = self._cast(d, dtypes.float32, acc, reg, emit, norm8), self._cast(d, dtypes.float32, r[val], reg, emit, norm8)
          o = reg(dtypes.float32)
          self._binop(u.arg[0], dtypes.float32, o, a32, v32, reg, emit)
          emit(f"cvt.rn.{_AT[s]}.f32 {acc}, {o};")
        else:
          self._binop(u.arg[0], d, acc, acc, r[val], reg, emit)
          norm8(d, acc)
        r[u] = acc
      elif u.op is Ops.REDUCE: r[u] = r[u.src[0]]
      elif u.op is Ops.DEFINE_LOCAL:
        x = reg(dtypes.uint32)
        if dyn:   # a slice of the dynamic region
          emit(f"mov.u32 {x}, smem;")
          if soffs[u]: emit(f"add.u32 {x}, {x}, {soffs[u]};")
        else:
          # (type: ignore: a buffer's dtype is a PtrDType)
          shared.append(f"  .shared .align {salign} .b8 {u.arg[0]}[{max(1, u.arg[1] * d.base.itemsize)}];")  # type: ignore[attr-defined]
          emit(f"mov.u32 {x}, {u.arg[0]};")
        r[u] = x   # a 32-bit address in the shared window
      elif u.op is Ops.BARRIER and isinstance(u.arg, tuple) and u.arg[0] == "tma_setup":
        ptx_tma.setup(u, r, reg, emit, lines.append, tma_st, TMAP_SCRATCH_PARAM, i, expr)
      elif u.op is Ops.BARRIER and isinstance(u.arg, tuple) and u.arg[0] == "tma_issue":
        ptx_tma.issue(u, r, reg, emit, lines.append, tma_st, i)
      elif u.op is Ops.BARRIER and isinstance(u.arg, tuple) and u.arg[0] == "tma_wait":
        ptx_tma.wait(u, r, reg, emit, lines.append, tma_st, i)
      elif u.op is Ops.BARRIER:
        # asynchronous copies (cp.async): "commit" closes the issued ones into a group (no barrier); ("wait", n) waits
        # until at most n groups are pending, then the barrier (the pipelined shared tiles of codegen/stage.py)
        if u.arg == "commit": emit("cp.async.commit_group;")
        if isinstance(u.arg, tuple) and u.arg[0] == "wait":
          emit(f"cp.async.wait_group {u.arg[1]};")
          # wgmma reads the tiles in the async proxy: each thread fences its landed copies (generic proxy) before the
          # barrier, as well as before each wgmma (PTX ISA 9.7.15.3)
          if wg: emit("fence.proxy.async.shared::cta;")
        if u.arg != "commit": emit(tma_st.barrier())
      elif u.op is Ops.INDEX and _is_local(u.src[0]):
        buf, idx = u.src[0], u.src[1]
        it = idx.dtype.scalar
        i32 = r[idx] if it.itemsize == 4 else self._cast(it, dtypes.int32, r[idx], reg, emit, norm8)
        off, x = reg(dtypes.uint32), reg(dtypes.uint32)
        # (type: ignore: a buffer's dtype is a PtrDType)
        emit(f"mul.lo.s32 {off}, {i32}, {buf.dtype.base.itemsize};"); emit(f"add.s32 {x}, {r[buf]}, {off};")  # type: ignore[attr-defined]
        r[u] = x
      elif u.op is Ops.INDEX and (bo := _base_offset(u.src[1])) is not None and (u.src[0], bo[0]) in gaddr:
        # idx = x + c where x's address is at hand: [address + c * itemsize] (the index provably does not wrap where it
        # is int32, Kernel.lower, so the byte offset may be added after widening). Keeps a tile's stores and loads on one
        # 64-bit base each instead of a 64-bit register per address
        sz = u.src[0].dtype.base.itemsize if isinstance(u.src[0].dtype, PtrDType) else u.src[0].dtype.itemsize
        r[u] = f"{gaddr[(u.src[0], bo[0])]}+{bo[1] * sz}"
      elif u.op is Ops.INDEX:
        buf, idx = u.src[0], u.src[1]
        sz = buf.dtype.base.itemsize if isinstance(buf.dtype, PtrDType) else buf.dtype.itemsize
        if (bo := _base_offset(idx)) is not None:   # the address of x first, then x + c as above
          bx, bw = reg(dtypes.int64), reg(d)
          emit(f"mul.wide.{_AT[idx.dtype.scalar]} {bw}, {r[bo[0]]}, {sz};"); emit(f"add.s64 {bx}, {r[buf]}, {bw};")
          gaddr[(buf, bo[0])] = bx
          r[u] = f"{bx}+{bo[1] * sz}"
          continue
        off, x = reg(dtypes.int64), reg(d)
        it = idx.dtype.scalar
        if it.itemsize == 4: emit(f"mul.wide.{_AT[it]} {off}, {r[idx]}, {sz};")
        elif it.itemsize == 8: emit(f"mul.lo.s64 {off}, {r[idx]}, {sz};")
        else:
          w = self._cast(it, dtypes.int64, r[idx], reg, emit, norm8)
          emit(f"mul.lo.s64 {off}, {w}, {sz};")
        emit(f"add.s64 {x}, {r[buf]}, {off};")
        r[u] = x
      elif u.op in (Ops.LOAD, Ops.GEP, Ops.VECTORIZE) and u in copies: pass   # the cp.async of its STORE reads it
      elif u.op is Ops.LOAD and isinstance(u.arg, tuple) and u.arg[0] == "wgdesc":
        # a wgmma matrix descriptor (PTX ISA 9.7.15.5.1.2): (shared address & 0x3FFFF) >> 4 in bits 0-13, LBO >> 4 in
        # 16-29, SBO >> 4 in 32-45, the swizzle in 62-63
        _, lbo, sbo, swz, _ = u.arg
        x, y = reg(dtypes.uint64), reg(dtypes.uint64)
        emit(f"cvt.u64.u32 {x}, {r[u.src[0]]};")
        emit(f"bfe.u64 {y}, {x}, 4, 14;")
        emit(f"or.b64 {y}, {y}, {(lbo >> 4) << 16 | (sbo >> 4) << 32 | swz << 62:#x};")
        r[u] = y
      elif u.op is Ops.LOAD and isinstance(u.arg, tuple) and u.arg[0] == "ldmatrix":
        xs = [reg(dtypes.uint32) for _ in range(u.arg[1])]
        emit(f"ldmatrix.sync.aligned.m8n8.x{u.arg[1]}{'.trans' if u.arg[2] else ''}.shared.b16 {{{', '.join(xs)}}}, [{r[u.src[0]]}];")
        r[u] = xs
      elif u.op is Ops.STORE and u in copies:
        idx, ld = u.src[0], u.src[1] if u.src[1].op is Ops.LOAD else u.src[1].src[0].src[0]
        nb, gidx = ld.dtype.nbytes, ld.src[0]
        pred = f"@{r[idx.src[2]]} " if len(idx.src) > 2 else ""
        if len(gidx.src) > 2:   # a masked element: copy nothing, zero-fill the destination
          n = reg(dtypes.uint32); emit(f"selp.b32 {n}, {nb}, 0, {r[gidx.src[2]]};")
        else: n = str(nb)
        emit(f"{pred}cp.async.{'cg' if nb == 16 else 'ca'}.shared.global [{r[idx]}], [{r[gidx]}], {nb}, {n};")
      elif u.op is Ops.LOAD:
        idx = u.src[0]
        pred = f"@{r[idx.src[2]]} " if len(idx.src) > 2 else ""
        sp = "shared" if _is_local(idx.src[0]) else "global"
        s = d.scalar
        if d.count > 1:   # one vector access (alignment proven by devectorize, the base checked at launch)
          xs = [reg(s) for _ in range(d.count)]
          if d.count > 4:   # 8 16-bit lanes: 4 32-bit words, split after
            ws = [reg(dtypes.uint32) for _ in range(d.count // 2)]
            if pred:
              for w in ws: emit(f"mov.b32 {w}, 0;")
            emit(f"{pred}ld.{sp}.v4.b32 {{{', '.join(ws)}}}, [{r[idx]}];")
            for j, w in enumerate(ws): emit(f"mov.b32 {{{xs[2 * j]}, {xs[2 * j + 1]}}}, {w};")
            r[u] = xs
            continue
          if pred:
            for x in xs: emit(f"mov.{self._movt(s)} {x}, {ptx_imm(s, 0)};")
          emit(f"{pred}ld.{sp}.v{d.count}.{_MT[s]} {{{', '.join(xs)}}}, [{r[idx]}];")
          r[u] = xs
          continue
        if s == dtypes.bool:
          t = reg(dtypes.uint16)
          if pred: emit(f"mov.b16 {t}, 0;")
          emit(f"{pred}ld.{sp}.u8 {t}, [{r[idx]}];")
          x = reg(d); emit(f"setp.ne.u16 {x}, {t}, 0;")
        else:
          x = reg(d)
          if pred: emit(f"mov.{self._movt(d)} {x}, {ptx_imm(d, 0)};")
          emit(f"{pred}ld.{sp}.{_MT[s]} {x}, [{r[idx]}];")
        r[u] = x
      elif u.op is Ops.STORE:
        idx, val = u.src[0], u.src[1]
        pred = f"@{r[idx.src[2]]} " if len(idx.src) > 2 else ""
        sp = "shared" if _is_local(idx.src[0]) else "global"
        v = r[val]
        if val.dtype.count > 4:   # 8 16-bit lanes: packed into 4 32-bit words
          ws = [reg(dtypes.uint32) for _ in range(val.dtype.count // 2)]
          for j, w in enumerate(ws): emit(f"mov.b32 {w}, {{{v[2 * j]}, {v[2 * j + 1]}}};")
          emit(f"{pred}st.{sp}.v4.b32 [{r[idx]}], {{{', '.join(ws)}}};"); continue
        if val.dtype.count > 1: emit(f"{pred}st.{sp}.v{val.dtype.count}.{_MT[val.dtype.scalar]} [{r[idx]}], {{{', '.join(v)}}};"); continue
        if val.dtype.scalar == dtypes.bool:
          t = reg(dtypes.uint16); emit(f"selp.u16 {t}, 1, 0, {v};"); v = t
        emit(f"{pred}st.{sp}.{_MT[val.dtype.scalar]} [{r[idx]}], {v};")
      elif u.op is Ops.GEP: r[u] = r[u.src[0]][u.arg[0]]
      elif u.op is Ops.VECTORIZE: r[u] = [r[x] for x in u.src]
      elif u.op is Ops.CAST: r[u] = self._cast(u.src[0].dtype, d, r[u.src[0]], reg, emit, norm8)
      elif u.op is Ops.BITCAST:
        fr = u.src[0].dtype
        if fr.itemsize != d.itemsize: raise RenderError(f"BITCAST from {fr} to {d}: sizes differ")
        if dtypes.is_bool(fr) or dtypes.is_bool(d): raise RenderError(f"PTX: BITCAST of bool ({fr} -> {d})")
        x = reg(d)
        emit(f"mov.{_BITS[d.itemsize]} {x}, {r[u.src[0]]};")
        norm8(d, x)
        r[u] = x
      elif u.op in GroupOp.ALU: r[u] = self._alu(u, [r[s] for s in u.src], reg, emit, norm8)
      elif u.op in (Ops.SINK, Ops.NOOP): pass
      else: raise RenderError(f"PTX renderer: cannot render {u.op}")
    if pend: emit("wgmma.wait_group.sync.aligned 0;")
    decl = []
    for (t, pre) in sorted(set(_REG.values()) | {("b64", "%rd")}):
      if pre in cnt: decl.append(f"  .reg .{t} {pre}<{cnt[pre] + 1}>;")
    # the workgroup size is known from the thread indices: .maxntid lets ptxas budget registers for it (and the cubin
    # then carries EIATTR_MAX_THREADS, which the driver can check a launch against)
    ntid = [1, 1, 1]
    for u in uops:
      if u.op is Ops.SPECIAL and u.arg[0].startswith("lidx"): ntid[int(u.arg[0][4:])] = int(u.arg[1])
    minncta = ""
    if tma_st.ws:   # the producer warpgroup after the consumers' threads (ptx_tma._producer)
      ntid[0] += ptx_tma.PRODUCER_THREADS
      head = f"{PRODUCER_NOTE}{ptx_tma.PRODUCER_THREADS}\n{head}"
      # one block an SM: ptxas gives every thread the registers 384 threads share (65536 / 384, down to a multiple of
      # 8: 168), which setmaxnreg then moves from the producer to the consumers (ptx_tma.register_split)
      minncta = ".minnctapersm 1\n"
    ver = ptx_version(self.arch)
    if tma_setups and float(ver) < float(ptx_tma.TMA_PTX_VERSION): ver = ptx_tma.TMA_PTX_VERSION
    return (f"//\n// Generated by baregrad's PTX renderer\n//\n.version {ver}\n.target {self.arch}\n.address_size 64\n\n"
            f"{head}.visible .entry {name}(\n" + ",\n".join(params) + f"\n)\n.maxntid {ntid[0]}, {ntid[1]}, {ntid[2]}\n{minncta}{{\n" +
            "\n".join(shared + decl) + "\n" + "\n".join(lines) + "\n  ret;\n}\n")

  def _mma(self, u: UOp, accs: list[str] | None, r: dict, reg, emit, pend: set[str] | None = None, proxy_fence: bool = True) -> list[str]:
    """One mma.sync (tc.split of them side by side along N, each its share of B's and C's registers, in order): 16-bit
    inputs packed in pairs into .b32 registers (the lower index in the low half), float32 inputs rounded to tf32
    (cvt.rna); with `accs`, D and C are the accumulators themselves (acc += A @ B)."""
    tc = u.arg
    if tc.desc: return self._wgmma(u, accs, r, reg, emit, pend if pend is not None else set(), proxy_fence)
    def pack(regs: list[str], dt: DType, src: UOp) -> list[str]:
      if src.op is Ops.LOAD: return regs   # ldmatrix: packed already
      out = []
      if dt.itemsize == 2:
        for i in range(0, len(regs), 2):
          x = reg(dtypes.uint32); emit(f"mov.b32 {x}, {{{regs[i]}, {regs[i + 1]}}};"); out.append(x)
      else:
        for v in regs:
          x = reg(dtypes.uint32); emit(f"cvt.rna.tf32.f32 {x}, {v};"); out.append(x)
      return out
    a, b = pack(r[u.src[0]], tc.dtype_in, u.src[0]), pack(r[u.src[1]], tc.dtype_in, u.src[1])
    if accs is not None: c = d = accs
    else: c, d = r[u.src[2]], [reg(tc.dtype_acc) for _ in range(u.dtype.count)]
    nb, nc = len(b) // tc.split, len(d) // tc.split
    for h in range(tc.split):
      dh, bh, ch = d[h * nc:(h + 1) * nc], b[h * nb:(h + 1) * nb], c[h * nc:(h + 1) * nc]
      emit(f"{tc.name} {{{', '.join(dh)}}}, {{{', '.join(a)}}}, {{{', '.join(bh)}}}, {{{', '.join(ch)}}};")
    return d

  def _wgmma(self, u: UOp, accs: list[str] | None, r: dict, reg, emit, pend: set[str], proxy_fence: bool = True) -> list[str]:
    """One wgmma.mma_async (sm_90a) on the operands' matrix descriptors, D the accumulators (or fresh registers holding
    C), committed as its own group; its D registers join `pend`, and render() waits for it where its D is read or its
    tiles may change (9.7.15.8).
    Unless wgmmas are in flight already (in program order: the k-steps of one stage, whose accumulators nothing else
    touches in between), first fence.proxy.async (the tiles were written by cp.async, the generic proxy; wgmma reads
    them in the async proxy: PTX ISA 9.7.15.3) and wgmma.fence (the accumulators were written by other instructions:
    9.7.15.6). Tiles written by TMA (`proxy_fence` False) are async-proxy writes already: no proxy fence."""
    tc = u.arg
    if accs is not None: d = accs
    else:
      d = [reg(tc.dtype_acc) for _ in range(u.dtype.count)]
      for x, c in zip(d, r[u.src[2]]): emit(f"mov.f32 {x}, {c};")
    ta, tb = u.src[0].arg[4], u.src[1].arg[4]
    if not pend or accs is None:
      if proxy_fence: emit("fence.proxy.async.shared::cta;")
      emit("wgmma.fence.sync.aligned;")
    emit(f"{tc.name} {{{', '.join(d)}}}, {r[u.src[0]]}, {r[u.src[1]]}, 1, 1, 1, {ta}, {tb};")
    emit("wgmma.commit_group.sync.aligned;")
    pend.update(d)
    return d

  @staticmethod
  def _movt(d: DType) -> str:
    s = d.scalar
    if s == dtypes.bool: return "pred"
    if s in (dtypes.float32, dtypes.float64): return _AT[s]
    return _BITS[s.itemsize]

  def _binop(self, op: Ops, d: DType, out: str, a: str, b: str, reg, emit) -> None:
    """out = a op b for the reduction ops (ADD, MUL, MAX); out may be a."""
    s = d.scalar
    if s == dtypes.bool:
      emit(f"{'and' if op is Ops.MUL else 'or'}.pred {out}, {a}, {b};"); return
    isf = dtypes.is_float(s)
    if op is Ops.ADD: emit(f"add{'.rn' if isf else ''}.{_AT[s]} {out}, {a}, {b};")
    elif op is Ops.MUL: emit(f"mul{'.rn' if isf else '.lo'}.{_AT[s]} {out}, {a}, {b};")
    elif op is Ops.MAX:
      if not isf: emit(f"max.{_AT[s]} {out}, {a}, {b};"); return
      if s not in (dtypes.float32, dtypes.float64): raise RenderError(f"PTX: MAX on {d} reaches the renderer unpromoted")
      bt, it = _BITS[s.itemsize], (dtypes.uint32 if s.itemsize == 4 else dtypes.uint64)
      m, p, ia, ib, z = reg(d), reg(dtypes.bool), reg(it), reg(it), reg(d)
      if s == dtypes.float32: emit(f"max.NaN.f32 {m}, {a}, {b};")
      else:  # max.NaN has no f64 form: max ignores a NaN, so put one back (a + b propagates an input NaN)
        pn, sm = reg(dtypes.bool), reg(d)
        emit(f"max.f64 {m}, {a}, {b};"); emit(f"setp.nan.f64 {pn}, {a}, {b};"); emit(f"add.rn.f64 {sm}, {a}, {b};")
        emit(f"selp.f64 {m}, {sm}, {m}, {pn};")
      emit(f"setp.eq.{_AT[s]} {p}, {a}, {b};")   # equal (incl. +0 == -0): AND of the bits, so +0 wins
      emit(f"mov.{bt} {ia}, {a};"); emit(f"mov.{bt} {ib}, {b};")
      emit(f"and.{bt} {ia}, {ia}, {ib};"); emit(f"mov.{bt} {z}, {ia};")
      emit(f"selp.{_AT[s]} {out}, {z}, {m}, {p};")
    else: raise RenderError(f"PTX renderer: no reduction {op}")

  def _alu(self, u: UOp, s: list[str], reg, emit, norm8) -> str:
    op, d = u.op, u.dtype
    sd = u.src[-1].dtype.scalar if op is Ops.WHERE else u.src[0].dtype.scalar
    ds = d.scalar
    isf = dtypes.is_float(sd)
    at = _AT.get(sd)
    if ds in (dtypes.float16, dtypes.bfloat16) and op is not Ops.WHERE:
      raise RenderError(f"PTX: {op.name} on {d} reaches the renderer (half arithmetic is promoted to float32 first)")
    x = reg(d)
    if op in (Ops.ADD, Ops.MUL, Ops.MAX): self._binop(op, d, x, s[0], s[1], reg, emit); norm8(d, x); return x
    if op is Ops.SUB:
      if sd == dtypes.bool: raise RenderError("PTX: SUB on bool")
      emit(f"sub{'.rn' if isf else ''}.{at} {x}, {s[0]}, {s[1]};"); norm8(d, x); return x
    if op is Ops.NEG:
      # (type: ignore below: `at` is set, every non-bool dtype is in _AT)
      if sd == dtypes.bool: emit(f"not.pred {x}, {s[0]};")
      else: emit(f"neg.{at if isf or not dtypes.is_unsigned(sd) else at.replace('u', 's')} {x}, {s[0]};"); norm8(d, x)  # type: ignore[union-attr]
      return x
    if op is Ops.FDIV: emit(f"div.rn.{at} {x}, {s[0]}, {s[1]};"); return x
    if op is Ops.RECIP:
      if isf: emit(f"rcp.rn.{at} {x}, {s[0]};")
      else: raise RenderError(f"PTX: RECIP on {d}")
      return x
    if op in (Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.TRUNC):
      if not isf: raise RenderError(f"{op.name} needs a float dtype, got {d}")
      if op is Ops.SQRT: emit(f"sqrt.rn.{at} {x}, {s[0]};"); return x
      if op is Ops.TRUNC: emit(f"cvt.rzi.{at}.{at} {x}, {s[0]};"); return x
      self._transcendental(op, sd, x, s[0], reg, emit)
      return x
    if op in (Ops.IDIV, Ops.MOD):
      ins = "div" if op is Ops.IDIV else "rem"
      c = u.src[1].arg if u.src[1].op is Ops.CONST else None
      if isinstance(c, int) and not isinstance(c, bool) and c > 0:
        # a positive constant divisor (index math: a view stack's unravel, an im2col operand's taps) needs neither guard
        # (0 and -1 are the only divisors they catch); a dividend known non-negative divides unsigned, which ptxas
        # turns into a multiply-high and a shift (signed: sign fix-ups around it; a guarded register divisor: a call)
        ut = at.replace("s", "u") if u.src[0].vmin >= 0 else at  # type: ignore[union-attr]
        emit(f"{ins}.{ut} {x}, {s[0]}, {c};")
        norm8(d, x)
        return x
      zero, one = reg(d), reg(d)
      emit(f"mov.{_BITS[ds.itemsize]} {zero}, 0;"); emit(f"mov.{_BITS[ds.itemsize]} {one}, 1;")
      pz, safe, q = reg(dtypes.bool), reg(d), reg(d)
      emit(f"setp.eq.{at} {pz}, {s[1]}, 0;")
      if dtypes.is_unsigned(sd):
        emit(f"selp.{at} {safe}, {one}, {s[1]}, {pz};")
        emit(f"{ins}.{at} {q}, {s[0]}, {safe};")
        emit(f"selp.{at} {x}, {zero}, {q}, {pz};")
        return x
      pm, bad, alt = reg(dtypes.bool), reg(dtypes.bool), reg(d)
      emit(f"setp.eq.{at} {pm}, {s[1]}, -1;")
      emit(f"or.pred {bad}, {pz}, {pm};")
      emit(f"selp.{at} {safe}, {one}, {s[1]}, {bad};")
      emit(f"{ins}.{at} {q}, {s[0]}, {safe};")
      if op is Ops.IDIV: emit(f"neg.{at} {alt}, {s[0]};")          # a // -1 == -a, wrapping for INT_MIN
      else: emit(f"mov.{_BITS[ds.itemsize]} {alt}, 0;")
      emit(f"selp.{at} {x}, {alt}, {q}, {pm};")
      emit(f"selp.{at} {x}, {zero}, {x}, {pz};")
      norm8(d, x)
      return x
    if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ):
      if sd == dtypes.bool:
        if op is Ops.CMPNE: emit(f"xor.pred {x}, {s[0]}, {s[1]};")
        elif op is Ops.CMPEQ: emit(f"xor.pred {x}, {s[0]}, {s[1]};"); emit(f"not.pred {x}, {x};")
        else: t = reg(d); emit(f"not.pred {t}, {s[0]};"); emit(f"and.pred {x}, {t}, {s[1]};")
        return x
      if sd in (dtypes.float16, dtypes.bfloat16): raise RenderError(f"PTX: comparison on {sd} reaches the renderer unpromoted")
      cmp = {Ops.CMPLT: "lt", Ops.CMPNE: "neu" if isf else "ne", Ops.CMPEQ: "eq"}[op]
      emit(f"setp.{cmp}.{at} {x}, {s[0]}, {s[1]};")
      return x
    if op in (Ops.AND, Ops.OR, Ops.XOR):
      t = "pred" if ds == dtypes.bool else _BITS[ds.itemsize]
      emit(f"{op.name.lower()}.{t} {x}, {s[0]}, {s[1]};")
      return x
    if op in (Ops.SHL, Ops.SHR):
      if ds == dtypes.bool or isf: raise RenderError(f"PTX: {op.name} on {d}")
      width = 8 * ds.itemsize
      bd = u.src[1].dtype.scalar
      amt = reg(dtypes.uint32)
      if bd.itemsize == 4: emit(f"and.b32 {amt}, {s[1]}, {width - 1};")
      else:
        emit(f"cvt.u32.{_UT[bd.itemsize] if bd != dtypes.bool else 'u16'} {amt}, {s[1]};")
        emit(f"and.b32 {amt}, {amt}, {width - 1};")
      if op is Ops.SHL: emit(f"shl.{_BITS[ds.itemsize]} {x}, {s[0]}, {amt};")
      else: emit(f"shr.{_AT[ds]} {x}, {s[0]}, {amt};")
      norm8(d, x)
      return x
    if op is Ops.WHERE:
      if ds == dtypes.bool:
        emit(f"@{s[0]} mov.pred {x}, {s[1]};"); emit(f"@!{s[0]} mov.pred {x}, {s[2]};")
      else: emit(f"selp.{_BITS[ds.itemsize] if ds.itemsize <= 2 else _AT[ds] if isf else _BITS[ds.itemsize]} {x}, {s[1]}, {s[2]}, {s[0]};")
      return x
    if op is Ops.MULACC:
      if isf: emit(f"fma.rn.{at} {x}, {s[0]}, {s[1]}, {s[2]};")
      else: emit(f"mad.lo.{at} {x}, {s[0]}, {s[1]}, {s[2]};"); norm8(d, x)
      return x
    raise RenderError(f"PTX renderer: cannot render {op} for {d}")

  def _transcendental(self, op: Ops, sd: DType, x: str, a: str, reg, emit) -> None:
    """EXP2/LOG2/SIN: PTX has float32 approximations only (see the module docstring for their precision)."""
    f32, f64, b = dtypes.float32, dtypes.float64, dtypes.bool
    if op is Ops.SIN:
      # sin.approx is accurate in [-pi, pi] only: reduce by 2*pi first (Cody-Waite, 2*pi split in three f32 or two f64
      # parts, fused so each step rounds once). Inf and NaN give NaN, as on the CPU; past |x| ~ 1e5 (f32) the
      # reduction itself loses digits
      k, r = reg(sd), reg(sd)
      if sd == f32:
        emit(f"mul.rn.f32 {k}, {a}, 0f3E22F983;"); emit(f"cvt.rni.f32.f32 {k}, {k};"); emit(f"neg.f32 {k}, {k};")
        emit(f"fma.rn.f32 {r}, {k}, 0f40C90000, {a};"); emit(f"fma.rn.f32 {r}, {k}, 0f3AFDAA22, {r};")
        emit(f"fma.rn.f32 {r}, {k}, 0f2D34611A, {r};")
        emit(f"sin.approx.f32 {x}, {r};")
      else:
        t, t2 = reg(f32), reg(f32)
        emit(f"mul.rn.f64 {k}, {a}, 0d3FC45F306DC9C883;"); emit(f"cvt.rni.f64.f64 {k}, {k};"); emit(f"neg.f64 {k}, {k};")
        emit(f"fma.rn.f64 {r}, {k}, 0d401921FB54442D18, {a};"); emit(f"fma.rn.f64 {r}, {k}, 0d3CB1A62633145C07, {r};")
        emit(f"cvt.rn.f32.f64 {t}, {r};"); emit(f"sin.approx.f32 {t2}, {t};"); emit(f"cvt.f64.f32 {x}, {t2};")
      return
    if sd == f32:
      emit(f"{'ex2' if op is Ops.EXP2 else 'lg2'}.approx.f32 {x}, {a};"); return
    u64, s32 = dtypes.uint64, dtypes.int32
    if op is Ops.EXP2:
      # exp2(x) = 2^n * 2^f with n = floor(x), f in [0, 1): 2^f from ex2.approx.f32 (about 1e-7 relative), 2^n built
      # as two float64 powers of two so overflow (inf) and gradual underflow come out as in float64
      xc, n, fr, t, t2, pf = reg(f64), reg(f64), reg(f64), reg(f32), reg(f32), reg(f64)
      emit(f"max.f64 {xc}, {a}, 0dC091300000000000;"); emit(f"min.f64 {xc}, {xc}, 0d4091300000000000;")   # [-1100, 1100]
      emit(f"cvt.rmi.f64.f64 {n}, {xc};"); emit(f"sub.rn.f64 {fr}, {xc}, {n};")
      emit(f"cvt.rn.f32.f64 {t}, {fr};"); emit(f"ex2.approx.f32 {t2}, {t};"); emit(f"cvt.f64.f32 {pf}, {t2};")
      ni, n1, n2, e1, e2, w1, w2, p1, p2, pn = reg(s32), reg(s32), reg(s32), reg(u64), reg(u64), reg(f64), reg(f64), reg(f64), reg(f64), reg(b)
      emit(f"cvt.rzi.s32.f64 {ni}, {n};"); emit(f"shr.s32 {n1}, {ni}, 1;"); emit(f"sub.s32 {n2}, {ni}, {n1};")
      for nn, e, w in ((n1, e1, w1), (n2, e2, w2)):
        emit(f"add.s32 {nn}, {nn}, 1023;"); emit(f"cvt.u64.s32 {e}, {nn};"); emit(f"shl.b64 {e}, {e}, 52;"); emit(f"mov.b64 {w}, {e};")
      emit(f"mul.rn.f64 {p1}, {pf}, {w1};"); emit(f"mul.rn.f64 {p2}, {p1}, {w2};")
      emit(f"setp.nan.f64 {pn}, {a}, {a};"); emit(f"selp.f64 {x}, {a}, {p2}, {pn};")
      return
    # LOG2: x = m * 2^e with m in [1, 2): e + lg2.approx.f32(m) (about 2^-22 absolute error); subnormals are scaled by
    # 2^54 first; x <= 0, inf and NaN take the float32 instruction's answer (NaN, -inf, inf)
    ps, xs, bits, ex, mb, m, t, t2, ef, lg, sp, ok, pinf, bias = (reg(b), reg(f64), reg(u64), reg(u64), reg(u64), reg(f64), reg(f32),
                                                                  reg(f32), reg(f64), reg(f64), reg(f64), reg(b), reg(b), reg(f64))
    emit(f"setp.lt.f64 {ps}, {a}, 0d0010000000000000;")
    emit(f"mul.rn.f64 {xs}, {a}, 0d4350000000000000;"); emit(f"selp.f64 {xs}, {xs}, {a}, {ps};")
    emit(f"selp.f64 {bias}, 0d404B000000000000, 0d0000000000000000, {ps};")    # 54 or 0
    emit(f"mov.b64 {bits}, {xs};"); emit(f"shr.u64 {ex}, {bits}, 52;"); emit(f"and.b64 {ex}, {ex}, 2047;")
    emit(f"and.b64 {mb}, {bits}, 0x000FFFFFFFFFFFFF;"); emit(f"or.b64 {mb}, {mb}, 0x3FF0000000000000;"); emit(f"mov.b64 {m}, {mb};")
    emit(f"cvt.rn.f32.f64 {t}, {m};"); emit(f"lg2.approx.f32 {t2}, {t};")
    emit(f"cvt.rn.f64.u64 {ef}, {ex};"); emit(f"sub.rn.f64 {ef}, {ef}, 0d408FF80000000000;"); emit(f"sub.rn.f64 {ef}, {ef}, {bias};")
    emit(f"cvt.f64.f32 {lg}, {t2};"); emit(f"add.rn.f64 {lg}, {lg}, {ef};")
    emit(f"cvt.rn.f32.f64 {t}, {a};"); emit(f"lg2.approx.f32 {t2}, {t};"); emit(f"cvt.f64.f32 {sp}, {t2};")
    emit(f"setp.gt.f64 {ok}, {a}, 0d0000000000000000;"); emit(f"setp.lt.f64 {pinf}, {a}, 0d7FF0000000000000;")
    emit(f"and.pred {ok}, {ok}, {pinf};"); emit(f"selp.f64 {x}, {lg}, {sp}, {ok};")

  def _cast(self, fr: DType, to: DType, v: str, reg, emit, norm8) -> str:
    f, t = fr.scalar, to.scalar
    if f == t: return v
    x = reg(to)
    if t == dtypes.bool:
      if dtypes.is_float(f):
        if f in (dtypes.float16, dtypes.bfloat16):
          w = self._cast(f, dtypes.float32, v, reg, emit, norm8)
          emit(f"setp.neu.f32 {x}, {w}, 0f00000000;")
        else: emit(f"setp.neu.{_AT[f]} {x}, {v}, {ptx_imm(fr, 0.0)};")
      else: emit(f"setp.ne.{_AT[f]} {x}, {v}, 0;")
      return x
    if f == dtypes.bool:
      if t == dtypes.bfloat16 or t == dtypes.float16: emit(f"selp.b16 {x}, {ptx_imm(to, 1.0)}, 0x0000, {v};")
      elif dtypes.is_float(t): emit(f"selp.{_AT[t]} {x}, {ptx_imm(to, 1.0)}, {ptx_imm(to, 0.0)}, {v};")
      else: emit(f"selp.{_BITS[t.itemsize]} {x}, 1, 0, {v};")
      return x
    if f == dtypes.bfloat16:  # widen by shifting the bits up (exact)
      if t == dtypes.float32: z = reg(dtypes.uint16); emit(f"mov.b16 {z}, 0;"); emit(f"mov.b32 {x}, {{{z}, {v}}};"); return x
      w = self._cast(f, dtypes.float32, v, reg, emit, norm8)
      return self._cast(dtypes.float32, to, w, reg, emit, norm8)
    if t == dtypes.bfloat16:
      w = v if f == dtypes.float32 else self._cast(f, dtypes.float32, v, reg, emit, norm8)
      emit(f"cvt.rn.bf16.f32 {x}, {w};")
      return x
    fi, ti = dtypes.is_float(f), dtypes.is_float(t)
    if fi and ti:
      rnd = ".rn" if t.itemsize < f.itemsize else ""
      emit(f"cvt{rnd}.{_AT[t]}.{_AT[f]} {x}, {v};")
      return x
    if fi:  # float -> int: cvt.rzi clamps to the destination range; NaN is selected to 0 (see the module docstring)
      src, sv = f, v
      c = reg(to)
      dt = {dtypes.int8: "s8", dtypes.uint8: "u8"}.get(t, _AT[t])
      emit(f"cvt.rzi.sat.{dt}.{_AT[src]} {c}, {sv};")
      norm8(to, c)
      p = reg(dtypes.bool)
      emit(f"setp.num.{_AT[src]} {p}, {sv}, {sv};")
      emit(f"selp.{_BITS[t.itemsize]} {x}, {c}, 0, {p};")
      return x
    if ti:  # int -> float
      emit(f"cvt.rn.{_AT[t]}.{_AT[f]} {x}, {v};")
      return x
    # int -> int
    fs, ts = 2 if f.itemsize == 1 else f.itemsize, 2 if t.itemsize == 1 else t.itemsize
    if fs == ts: emit(f"mov.{_BITS[ts]} {x}, {v};")
    elif ts > fs: emit(f"cvt.{_AT[t] if ts > 2 else _UT[ts]}.{_AT[f]} {x}, {v};")   # extend by the source's signedness
    else: emit(f"cvt.{_UT[ts]}.{_UT[fs]} {x}, {v};")     # narrow: truncate
    norm8(to, x)
    return x
