"""C renderer for the CPU (same ABI and same semantics as the LLVM renderer; vectors are split into lanes first).

Compiled with -fwrapv so signed overflow wraps; division, shifts and float->int casts go through helpers that
define every input (see ir/alu.py).

float16: its arithmetic is promoted to float32 before rendering (rewrites.cpu_float_matcher), so a kernel only loads,
stores, selects and converts half values. They are `_Float16` where the compiler has it, else (CRenderer(half_native=
False), as drivers/cpu_compile.py's probe decides: clang 14 on a CPU without AVX512-FP16) their bits in an `unsigned
short`, converted in integer arithmetic exactly as the hardware does (HALF_BITS), as bfloat16 always is."""
from __future__ import annotations
import math
from baregrad.ir.dtype import DType, PtrDType, dtypes, float_to_bf16, float_to_f16
from baregrad.ir.ops import UOp, Ops, GroupOp
from baregrad.codegen.renderer import Renderer, RenderError, cpumath
from baregrad.codegen.rewrites import cpu_float_matcher

CTYPE = {dtypes.bool: "_Bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
         dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int", dtypes.int64: "long long",
         dtypes.uint64: "unsigned long long", dtypes.float16: "_Float16", dtypes.bfloat16: "unsigned short",
         dtypes.float32: "float", dtypes.float64: "double"}
INAME = {d: d.name for d in CTYPE}

def ctype(d: DType) -> str:
  if isinstance(d, PtrDType): return CTYPE[d.base.scalar] + "*"
  if d.count > 1: raise RenderError(f"C renderer got a vector {d}: vectors are split before rendering")
  return CTYPE[d.scalar]

def cconst(d: DType, v: int | float, types: dict[DType, str] = CTYPE) -> str:
  s = d.scalar
  CTYPE = types  # noqa: N806  (a renderer with other type names, e.g. CUDA's __half, passes its own table)
  if s == dtypes.bool: return "1" if v else "0"
  if dtypes.is_int(s):
    iv = int(v)
    if s == dtypes.int64 and iv == -(2 ** 63): return "(-9223372036854775807LL-1)"
    if s == dtypes.int32 and iv == -(2 ** 31): return "(-2147483647-1)"
    suf = {dtypes.int64: "LL", dtypes.uint64: "ULL", dtypes.uint32: "U"}.get(s, "")
    return f"(({CTYPE[s]}){iv}{suf})"
  x = float(v)
  if s == dtypes.bfloat16: return f"((unsigned short){float_to_bf16(x):#06x})"  # bfloat16 values are their bits here
  if math.isnan(x): return f"(({CTYPE[s]})__builtin_nan(\"\"))"
  if math.isinf(x): return f"(({CTYPE[s]})({'-' if x < 0 else ''}__builtin_inf()))"
  return f"(({CTYPE[s]}){x.hex()})"

def c_prelude(fn: str = "static inline", head: str = "typedef unsigned long long u64;\n",
              typedefs: str = "typedef signed char char_; typedef unsigned char uchar; typedef unsigned short ushort; typedef unsigned int uint;\n"
                              "typedef long long llong; typedef unsigned long long ullong;",
              signbit: str = "__builtin_signbit", bf2f: str = "unsigned int u = (unsigned int)b << 16; float f; __builtin_memcpy(&f, &u, 4); return f;",
              f2bf_bits: str = "unsigned int u; __builtin_memcpy(&u, &f, 4);", fp64: bool = True) -> str:
  """The helpers every C-family kernel starts with (ir/alu.py semantics); the arguments are what a dialect spells
  differently: the function qualifier, type names, signbit and the float<->bits moves."""
  fmax_d = f"{fn} double fmax_d(double a, double b) {{ return a > b ? a : b > a ? b : a != a ? a : b != b ? b : {signbit}(a) ? b : a; }}\n"
  return (f"\n{head}"
    f"#define BG_DIVS(T) {fn} T idiv_##T(T a, T b) {{ return b == 0 ? 0 : (b == -1 ? (T)(0 - a) : a / b); }} \\\n"
    f"  {fn} T imod_##T(T a, T b) {{ return (b == 0 || b == -1) ? 0 : a % b; }}\n"
    f"#define BG_DIVU(T) {fn} T idiv_##T(T a, T b) {{ return b == 0 ? 0 : a / b; }} \\\n"
    f"  {fn} T imod_##T(T a, T b) {{ return b == 0 ? 0 : a % b; }}\n"
    f"{typedefs}\n"
    "BG_DIVS(char_) BG_DIVU(uchar) BG_DIVS(short) BG_DIVU(ushort) BG_DIVS(int) BG_DIVU(uint) BG_DIVS(llong) BG_DIVU(ullong)\n"
    f"{fn} float fmax_f(float a, float b) {{ return a > b ? a : b > a ? b : a != a ? a : b != b ? b : {signbit}(a) ? b : a; }}\n"
    f"{fmax_d if fp64 else ''}"
    f"{fn} float bf2f(unsigned short b) {{ {bf2f} }}\n"
    f"{fn} unsigned short f2bf(float f) {{ {f2bf_bits}\n"
    "  return (u & 0x7fffffffU) > 0x7f800000U ? (unsigned short)((u >> 16) | 0x40) : (unsigned short)((u + 0x7fffU + ((u >> 16) & 1)) >> 16); }\n"
    f"#define BG_SAT(F, T, LO, HI) {fn} T sat_##F##_##T(F x) {{ return x != x ? 0 : x >= (F)HI ? (T)HI : x <= (F)LO ? (T)LO : (T)x; }}\n")

PRELUDE = c_prelude()
# float16 held as its bits (a compiler without _Float16): conversions in integer arithmetic that give what the
# hardware's do: round to nearest even (double straight to half: no double rounding through float), overflow to
# infinity, subnormals kept, a NaN stays NaN (quieted, its payload's top bits kept), the sign of zero kept
HALF_BITS = """static inline float h2f(unsigned short h) {
  unsigned int s = (unsigned int)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
  if (e == 0) { float z = (float)m * 0x1p-24f; return s ? -z : z; }   /* zero or subnormal: exact in float */
  u = e == 0x1fu ? (s | 0x7f800000u | m << 13 | (m ? 0x400000u : 0u)) : (s | (e + 112u) << 23 | m << 13);
  float f; __builtin_memcpy(&f, &u, 4); return f; }
static inline unsigned short f2h(float f) {
  unsigned int u; __builtin_memcpy(&u, &f, 4);
  unsigned int s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (unsigned short)(s | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return (unsigned short)(s | 0x7c00u);   /* from 65520 (halfway to 65536) up: infinity */
  if (a >= 0x38800000u) { a -= 0x38000000u; return (unsigned short)(s | ((a + 0xfffu + ((a >> 13) & 1u)) >> 13)); }
  if (a < 0x33000000u) return (unsigned short)s;                /* below half the least subnormal: zero */
  unsigned int sh = 126u - (a >> 23), m = (a & 0x7fffffu) | 0x800000u, r = m >> sh, rem = m & ((1u << sh) - 1u), hf = 1u << (sh - 1u);
  return (unsigned short)(s | (r + (rem > hf || (rem == hf && (r & 1u))))); }
static inline unsigned short d2h(double d) {
  unsigned long long u; __builtin_memcpy(&u, &d, 8);
  unsigned long long a = u & 0x7fffffffffffffffULL; unsigned int s = (unsigned int)(u >> 48) & 0x8000u;
  if (a > 0x7ff0000000000000ULL) return (unsigned short)(s | 0x7e00u | (unsigned int)((a >> 42) & 0x3ffu));
  if (a >= 0x40effe0000000000ULL) return (unsigned short)(s | 0x7c00u);
  if (a >= 0x3f10000000000000ULL) {
    a -= 0x3f00000000000000ULL; return (unsigned short)(s | (unsigned int)((a + 0x1ffffffffffULL + ((a >> 42) & 1u)) >> 42)); }
  if (a < 0x3e60000000000000ULL) return (unsigned short)s;
  unsigned int sh = 1051u - (unsigned int)(a >> 52);
  unsigned long long m = (a & 0xfffffffffffffULL) | 0x10000000000000ULL, r = m >> sh, rem = m & ((1ULL << sh) - 1u), hf = 1ULL << (sh - 1u);
  return (unsigned short)(s | (unsigned int)(r + (rem > hf || (rem == hf && (r & 1u))))); }
"""
_IT = {dtypes.int8: ("char_", "(-128)", "127"), dtypes.uint8: ("uchar", "0", "255"), dtypes.int16: ("short", "(-32768)", "32767"),
       dtypes.uint16: ("ushort", "0", "65535"), dtypes.int32: ("int", "(-2147483647-1)", "2147483647"), dtypes.uint32: ("uint", "0", "4294967295U"),
       dtypes.int64: ("llong", "(-9223372036854775807LL-1)", "9223372036854775807LL"), dtypes.uint64: ("ullong", "0", "18446744073709551615ULL")}
_FT = {dtypes.float32: "float", dtypes.float64: "double"}

class CRenderer(Renderer):
  name = "C"
  has_threads = True
  vectorized = False
  extra_matcher = cpu_float_matcher
  types: dict[DType, str] = CTYPE   # scalar dtype -> C type name (CUDA C overrides bool and half)
  int_limits = _IT                  # integer dtype -> (helper type name, min, max) for the division and saturation helpers
  acc_round: dict[DType, tuple[str, str]] = {dtypes.bfloat16: ("bf2f", "f2bf")}  # accumulate in float32, round each step
  gpu_index: dict[str, str] = {}    # GPU dialects: SPECIAL gidx/lidx -> how index {n} (axis {xyz}) is read
  # float32 EXP2/LOG2/SIN by the CPU's own functions (cpumath.py: the LLVM renderer's, so both agree bit for bit)
  # rather than libm; a GPU dialect has its own
  own_math = True
  half_native = True   # float16 values are _Float16 (False: their bits, converted by HALF_BITS)

  def __init__(self, half_native: bool = True) -> None:
    """half_native: the compiler has _Float16 (drivers/cpu_compile.probe_cc finds out); else float16 values are
    held as their bits in an unsigned short, as bfloat16 ones are."""
    if not half_native:
      self.half_native = False
      self.types = {**self.types, dtypes.float16: "unsigned short"}
      self.acc_round = {**self.acc_round, dtypes.float16: ("h2f", "f2h")}   # accumulate in float32, round each step

  def _ct(self, d: DType) -> str:
    if isinstance(d, PtrDType): return self.types[d.base.scalar] + "*"
    if d.count > 1: raise RenderError(f"{self.name} renderer got a vector {d}: vectors are split before rendering")
    return self.types[d.scalar]
  def _cc(self, d: DType, v: int | float) -> str:
    if d.scalar == dtypes.float16 and not self.half_native: return f"((unsigned short){float_to_f16(float(v)):#06x})"
    return cconst(d, v, self.types)
  def _load(self, d: DType, ptr: str) -> str: return f"*{ptr}"
  def _store(self, d: DType, ptr: str, v: str) -> str: return f"*{ptr} = {v};"
  def _bitcast(self, fr: DType, to: DType, v: str, nm: str) -> str:
    return f"{self._ct(to)} {nm}; {{ {self._ct(fr)} t_ = {v}; __builtin_memcpy(&{nm}, &t_, sizeof({nm})); }}"
  def _math(self, fn: str, d: DType, *args: str) -> str:
    """A libm function on float32 (f suffix) or float64."""
    return f"__builtin_{fn}{'f' if d.scalar == dtypes.float32 else ''}({', '.join(args)})"

  # ---- hooks a C dialect overrides (CUDA C: kernel parameters, blockIdx/threadIdx)
  def _define(self, u: UOp, nbufs: int, varnames: list[str], emit) -> str:
    d = u.dtype
    if u.op is Ops.DEFINE_GLOBAL:   # args holds the buffers in buffer-number order: slot = position, not number
      emit(f"{self._ct(d)} restrict data{u.arg} = ({self._ct(d)})args[{self._bufslots.index(u.arg)}];"); return f"data{u.arg}"
    if u.op is Ops.DEFINE_VAR:
      emit(f"const {self._ct(d)} {u.arg[0]} = ({self._ct(d)})args[{nbufs + varnames.index(u.arg[0])}];"); return u.arg[0]
    if u.op is Ops.SPECIAL and (fmt := self.gpu_index.get(u.arg[0][:4])) is not None and u.arg[0][4:] in ("0", "1", "2"):
      emit(f"const {self._ct(u.dtype)} {u.arg[0]} = {fmt.format(n=u.arg[0][4:], xyz='xyz'[int(u.arg[0][4:])])};"); return u.arg[0]
    if u.op is Ops.SPECIAL and self.gpu_index: raise RenderError(f"{self.name}: unknown SPECIAL {u.arg[0]}")
    raise RenderError(f"{self.name} renderer: cannot render {u.op} (no GPU indices on the CPU)")
  def _barrier(self) -> str: raise RenderError(f"{self.name} renderer: no workgroup barrier on the CPU")
  def _wrap(self, name: str, body: list[str], sats: str, uops: list[UOp]) -> str:
    return (PRELUDE + sats + f"\nvoid {name}(const u64 *restrict args, long long start, long long end) {{\n" +
            "\n".join(body) + "\n}\n")

  def render(self, name: str, uops: list[UOp]) -> str:
    r: dict[UOp, str] = {}
    body: list[str] = []
    need_sat: set[tuple[str, DType]] = set()
    depth = 1
    nbufs = sum(1 for u in uops if u.op is Ops.DEFINE_GLOBAL)
    self._bufslots = sorted({u.arg for u in uops if u.op is Ops.DEFINE_GLOBAL})
    self._need_math: set[str] = set()
    varnames = sorted(x.arg[0] for x in uops if x.op is Ops.DEFINE_VAR)
    def emit(s: str) -> None: body.append("  " * depth + s)
    for i, u in enumerate(uops):
      d, nm = u.dtype, f"v{i}"
      if u.op is Ops.CONST: r[u] = self._cc(d, u.arg); continue
      if u.op in (Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.SPECIAL, Ops.DEFINE_LOCAL): r[u] = self._define(u, nbufs, varnames, emit)
      elif u.op is Ops.BARRIER: emit(self._barrier())
      elif u.op is Ops.RANGE:
        lo, hi = (f"({self._ct(d)})start", f"({self._ct(d)})end") if u.arg[1] == "global" else ("0", r[u.src[0]])
        emit(f"for ({self._ct(d)} r{i} = {lo}; r{i} < {hi}; r{i}++) {{"); depth += 1; r[u] = f"r{i}"
      elif u.op is Ops.ENDRANGE: depth -= 1; emit("}")
      elif u.op is Ops.DEFINE_ACC: emit(f"{self._ct(d)} acc{i} = {r[u.src[0]]};"); r[u] = f"acc{i}"
      elif u.op is Ops.ASSIGN:
        acc, val = r[u.src[0]], u.src[1]
        if (rnd := self.acc_round.get(d.scalar)) is not None:  # e.g. bfloat16 as its bits: accumulate in float32, round after each step (as LLVM)
          emit(f"{acc} = {rnd[1]}({self._binop(u.arg[0], dtypes.float32, f'{rnd[0]}({acc})', f'{rnd[0]}({r[val]})')});")
          r[u] = acc
          continue
        if u.arg[0] is Ops.ADD and val.op is Ops.MUL and dtypes.is_float(d) and d.scalar in _FT:
          emit(f"{acc} = {self._math('fma', d, r[val.src[0]], r[val.src[1]], acc)};")
        else: emit(f"{acc} = {self._binop(u.arg[0], d, acc, r[val])};")
        r[u] = acc
      elif u.op is Ops.REDUCE: r[u] = r[u.src[0]]
      elif u.op is Ops.INDEX:
        ix = r[u.src[1]]
        if len(u.src) > 2: ix = f"({r[u.src[2]]} ? {ix} : 0)"  # never form an out-of-range address
        r[u] = f"({r[u.src[0]]} + {ix})"
      elif u.op is Ops.LOAD:
        idx = u.src[0]
        load = self._load(d, r[idx])
        if len(idx.src) > 2: load = f"({r[idx.src[2]]} ? {load} : {self._cc(d, 0)})"
        emit(f"const {self._ct(d)} {nm} = {load};"); r[u] = nm
      elif u.op is Ops.STORE:
        idx = u.src[0]
        st = self._store(u.src[1].dtype, r[idx], r[u.src[1]])
        emit(f"if ({r[idx.src[2]]}) {st}" if len(idx.src) > 2 else st)
      elif u.op is Ops.CAST:
        emit(f"const {self._ct(d)} {nm} = {self._cast(u.src[0].dtype, d, r[u.src[0]], need_sat)};"); r[u] = nm
      elif u.op is Ops.BITCAST:
        if u.src[0].dtype.itemsize != d.itemsize: raise RenderError(f"BITCAST from {u.src[0].dtype} to {d}: sizes differ")
        emit(self._bitcast(u.src[0].dtype, d, r[u.src[0]], nm)); r[u] = nm
      elif u.op in GroupOp.ALU: emit(f"const {self._ct(d)} {nm} = {self._alu(u, [r[s] for s in u.src])};"); r[u] = nm
      elif u.op in (Ops.SINK, Ops.NOOP): pass
      else: raise RenderError(f"{self.name} renderer: cannot render {u.op}")
    lim = self.int_limits
    sats = "\n".join(f"BG_SAT({f}, {lim[t][0]}, {lim[t][1]}, {lim[t][2]})" for f, t in sorted(need_sat, key=str))
    if self._need_math: sats += "\n" + cpumath.c_source(sorted(self._need_math))
    if not self.half_native and any((u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype).scalar == dtypes.float16 for u in uops):
      sats = HALF_BITS + sats
    return self._wrap(name, body, sats, uops)

  def _binop(self, op: Ops, d: DType, a: str, b: str) -> str:
    if d.scalar == dtypes.bool:
      return {Ops.ADD: f"({a} | {b})", Ops.MUL: f"({a} & {b})", Ops.MAX: f"({a} | {b})"}[op]
    if op is Ops.ADD: return f"({a} + {b})"
    if op is Ops.MUL: return f"({a} * {b})"
    if op is Ops.MAX:
      if d.scalar == dtypes.float32: return f"fmax_f({a}, {b})"
      if d.scalar == dtypes.float64: return f"fmax_d({a}, {b})"
      if d.scalar == dtypes.float16:  # NaN propagates, +0 > -0
        return f"((_Float16)fmax_f((float){a}, (float){b}))" if self.half_native else f"f2h(fmax_f(h2f({a}), h2f({b})))"
      return f"({a} > {b} ? {a} : {b})"
    raise RenderError(f"{self.name} renderer: no reduction {op}")

  def _alu(self, u: UOp, s: list[str]) -> str:
    op, d = u.op, u.dtype
    if not self.half_native and op is not Ops.WHERE and dtypes.float16 in (d.scalar, *(x.dtype.scalar for x in u.src)):
      # (the bits of a half are no number to C: its arithmetic must have been promoted to float32)
      raise RenderError(f"{self.name} renderer: {op.name} on float16 held as bits; expected it promoted to float32 (rewrites.cpu_float_matcher)")
    f = {dtypes.float32: "f", dtypes.float64: ""}.get(d.scalar)
    if op in (Ops.ADD, Ops.MUL, Ops.MAX): return self._binop(op, d, s[0], s[1])
    if op is Ops.SUB: return f"({s[0]} - {s[1]})"
    if op is Ops.NEG: return f"(!{s[0]})" if d.scalar == dtypes.bool else f"(-{s[0]})"
    if op is Ops.FDIV: return f"({s[0]} / {s[1]})"
    if op is Ops.RECIP: return f"({self._cc(d, 1.0)} / {s[0]})"
    if op in (Ops.IDIV, Ops.MOD):  # bools divide as unsigned bytes (0/1)
      return f"{'idiv' if op is Ops.IDIV else 'imod'}_{self.int_limits[dtypes.uint8 if d.scalar == dtypes.bool else d.scalar][0]}({s[0]}, {s[1]})"
    if op is Ops.CMPLT: return f"({s[0]} < {s[1]})"
    if op is Ops.CMPNE: return f"({s[0]} != {s[1]})"
    if op is Ops.CMPEQ: return f"({s[0]} == {s[1]})"
    if op is Ops.AND: return f"({s[0]} & {s[1]})"
    if op is Ops.OR: return f"({s[0]} | {s[1]})"
    if op is Ops.XOR: return f"({s[0]} ^ {s[1]})"
    if op in (Ops.SHL, Ops.SHR):
      bits = 8 * d.scalar.itemsize
      if op is Ops.SHL:  # shift in the unsigned type: left shifts of negative values are undefined in C
        ut = self.types[{1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}[d.itemsize]]
        return f"(({self._ct(d)})(({ut}){s[0]} << ({s[1]} & {bits - 1})))"
      return f"({s[0]} >> ({s[1]} & {bits - 1}))"
    if op is Ops.WHERE: return f"({s[0]} ? {s[1]} : {s[2]})"
    if op is Ops.MULACC: return self._math("fma", d, *s) if f is not None else f"({s[0]} * {s[1]} + {s[2]})"
    if op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.TRUNC):
      if f is None: raise RenderError(f"{op.name} on {d}: only float32/float64 reach the {self.name} renderer")
      if self.own_math and op in (Ops.EXP2, Ops.LOG2, Ops.SIN) and d.scalar == dtypes.float32:
        self._need_math.add(op.name.lower())
        return f"bg_{op.name.lower()}f({s[0]})"
      if self.own_math and op in (Ops.EXP2, Ops.LOG2) and d.scalar == dtypes.float64:
        self._need_math.add(op.name.lower() + "_64")
        return f"bg_{op.name.lower()}({s[0]})"
      return self._math(op.name.lower(), d, s[0])
    raise RenderError(f"{self.name} renderer: cannot render {op} for {d}")

  def _cast(self, fr: DType, to: DType, v: str, need_sat: set) -> str:
    if not self.half_native and dtypes.float16 in (fr.scalar, to.scalar): return self._half_cast(fr, to, v, need_sat)
    if to.scalar == dtypes.bool: return f"({v} != 0)"
    if dtypes.is_float(fr) and dtypes.is_int(to):
      src = fr.scalar if fr.scalar in _FT else dtypes.float32
      need_sat.add((_FT[src], to.scalar))
      return f"sat_{_FT[src]}_{self.int_limits[to.scalar][0]}(({_FT[src]}){v})"
    return f"(({self._ct(to)}){v})"

  def _half_cast(self, fr: DType, to: DType, v: str, need_sat: set) -> str:
    """A cast from or to float16 held as its bits: through float32 (exact from half), double straight to half."""
    f, t = fr.scalar, to.scalar
    if f == t: return v
    # (ints through float: exact below 2^24, and from there up infinity in half either way)
    if t == dtypes.float16: return f"d2h({v})" if f == dtypes.float64 else f"f2h((float){v})"
    x = f"h2f({v})"
    if t == dtypes.bool: return f"({x} != 0.0f)"   # (not the bits: -0 is 0x8000)
    if t == dtypes.float32: return x
    if t == dtypes.float64: return f"((double){x})"
    return self._cast(dtypes.float32, to, x, need_sat)   # ints saturate as from float32
