"""OpenCL C renderer (the CL fallback device, drivers/cl.py): the C renderer's code and semantics (cstyle.py: guarded
division, masked shifts, saturating float->int casts, NaN-propagating max, explicit fma only) in OpenCL C 1.2.

  __kernel void NAME(__global float* restrict data0, ..., const long n_arg)

Parameters: the DEFINE_GLOBALs present, in buffer order, then every DEFINE_VAR (sorted by name) as a 64-bit `long`
that the body narrows to the variable's type (one argument size for the runtime to set). GPU indices: gidxN is
get_group_id(N), lidxN get_local_id(N); the launch is global_size work-groups of local_size work-items.
`#pragma OPENCL FP_CONTRACT OFF`: OpenCL C contracts a*b+c by default, the other renderers never do.

Types: bool is a byte in memory (`__global uchar*`: OpenCL forbids bool in kernel arguments and leaves its size to
the implementation), `bool` in registers. float16 is a storage format here: buffers are `__global half*`, read with
vload_half and written with vstore_half_rte (both core OpenCL, no cl_khr_fp16 needed), and a half value lives in a
`float` register holding a value half can represent. That is the compiler's half model on every device: arithmetic is
promoted to float32 and rounded after each op (rewrites.cpu_float_matcher), accumulators round after each step, so
results are those of the CPU renderers. bfloat16 is its bits (`ushort`), as in the C renderer. float64 needs
cl_khr_fp64: a device without it is given a renderer whose supported_dtypes leave float64 out (a clear error, not a
build failure). Precision: OpenCL's exp2/log2/sin are within 3-4 ulp (OpenCL C 1.2, 7.4); division and sqrt are
correctly rounded where the device allows -cl-fp32-correctly-rounded-divide-sqrt (the CL compiler passes it)."""
from __future__ import annotations
import math
from baregrad.ir.dtype import DType, PtrDType, dtypes, ALL
from baregrad.ir.ops import UOp, Ops
from baregrad.codegen.renderer.cstyle import CRenderer, CTYPE, c_prelude, cconst, _IT

CL_TYPES = {**CTYPE, dtypes.bool: "bool", dtypes.int8: "char", dtypes.uint8: "uchar", dtypes.uint16: "ushort", dtypes.uint32: "uint",
            dtypes.int64: "long", dtypes.uint64: "ulong", dtypes.float16: "float", dtypes.bfloat16: "ushort"}
CL_MEM_TYPES = {**CL_TYPES, dtypes.bool: "uchar", dtypes.float16: "half"}   # element types of __global buffers
CL_LIMITS = {**_IT, dtypes.int64: ("llong", "(-9223372036854775807L-1)", "9223372036854775807L"),
             dtypes.uint64: ("ullong", "0", "18446744073709551615UL")}
# half values are floats; these move them through half's bits (vstore_half_rte rounds to nearest even)
HALF_HELPERS = """static inline float h_rnd(float x) { ushort b; vstore_half_rte(x, 0, (__private half*)&b); return vload_half(0, (__private half*)&b); }
static inline ushort h_bits(float x) { ushort b; vstore_half_rte(x, 0, (__private half*)&b); return b; }
static inline float h_of_bits(ushort b) { return vload_half(0, (__private half*)&b); }
"""
HALF_HELPERS_FP64 = ("static inline float h_rnd_d(double x) { ushort b; vstore_half_rte(x, 0, (__private half*)&b); "
                     "return vload_half(0, (__private half*)&b); }\n")

def cl_prelude(fp64: bool) -> str:
  return ("#pragma OPENCL FP_CONTRACT OFF\n" + ("#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" if fp64 else "") +
          c_prelude(head="", typedefs="typedef char char_; typedef long llong; typedef ulong ullong;", signbit="signbit",
                    bf2f="return as_float((uint)b << 16);", f2bf_bits="uint u = as_uint(f);", fp64=fp64) +
          HALF_HELPERS + (HALF_HELPERS_FP64 if fp64 else ""))

class OpenCLRenderer(CRenderer):
  name = "OpenCL"
  own_math = False   # (exp2, log2, sin: the device's own)
  has_threads = False
  has_local = True
  global_max = (2 ** 31 - 1, 2 ** 31 - 1, 2 ** 31 - 1)
  local_max = 256
  types = CL_TYPES
  int_limits = CL_LIMITS
  acc_round = {**CRenderer.acc_round, dtypes.float16: ("", "h_rnd")}
  gpu_index = {"gidx": "(int)get_group_id({n})", "lidx": "(int)get_local_id({n})"}

  def __init__(self, fp64: bool = True, local_max: int = 256) -> None:
    """fp64: the device has cl_khr_fp64; local_max: its largest work-group (CL_DEVICE_MAX_WORK_GROUP_SIZE)."""
    self.fp64, self.local_max = fp64, local_max
    self.supported_dtypes = ALL if fp64 else tuple(d for d in ALL if d != dtypes.float64)

  def _cc(self, d: DType, v: int | float) -> str:
    s = d.scalar
    if s == dtypes.int64:
      return "(-9223372036854775807L-1)" if int(v) == -(2 ** 63) else f"((long){int(v)}L)"
    if s == dtypes.uint64: return f"((ulong){int(v)}UL)"
    if s not in (dtypes.float16, dtypes.float32, dtypes.float64): return cconst(d, v, self.types)
    x = float(v)
    t = "double" if s == dtypes.float64 else "float"
    if math.isnan(x): return f"(({t})NAN)"
    if math.isinf(x): return f"(({t})({'-' if x < 0 else ''}INFINITY))"
    return f"(({t}){x.hex()}{'' if s == dtypes.float64 else 'f'})"  # a float literal: no double on a device without fp64

  def _load(self, d: DType, ptr: str) -> str: return f"vload_half(0, {ptr})" if d.scalar == dtypes.float16 else f"*{ptr}"
  def _store(self, d: DType, ptr: str, v: str) -> str:
    return f"vstore_half_rte({v}, 0, {ptr});" if d.scalar == dtypes.float16 else f"*{ptr} = {v};"
  def _math(self, fn: str, d: DType, *args: str) -> str: return f"{fn}({', '.join(args)})"   # overloaded by argument type
  def _bitcast(self, fr: DType, to: DType, v: str, nm: str) -> str:
    if fr.scalar == dtypes.float16: return f"const {self._ct(to)} {nm} = as_{self._ct(to)}(h_bits({v}));"
    if to.scalar == dtypes.float16: return f"const float {nm} = h_of_bits(as_ushort({v}));"
    return f"const {self._ct(to)} {nm} = as_{self._ct(to)}({v});"

  def _cast(self, fr: DType, to: DType, v: str, need_sat: set) -> str:
    f, t = fr.scalar, to.scalar
    if f == t: return v
    if t == dtypes.float16:  # through float (double for doubles): ints beyond float's exact range overflow half anyway
      return f"h_rnd_d((double){v})" if f == dtypes.float64 else f"h_rnd((float){v})"
    return super()._cast(dtypes.float32 if f == dtypes.float16 else fr, to, v, need_sat)  # a half value is a float

  def _define(self, u: UOp, nbufs: int, varnames: list[str], emit) -> str:
    if u.op is Ops.DEFINE_GLOBAL: return f"data{u.arg}"
    if u.op is Ops.DEFINE_VAR:
      emit(f"const {self._ct(u.dtype)} {u.arg[0]} = ({self._ct(u.dtype)}){u.arg[0]}_arg;"); return u.arg[0]
    return super()._define(u, nbufs, varnames, emit)

  def _wrap(self, name: str, body: list[str], sats: str, uops: list[UOp]) -> str:
    bufs = sorted((u for u in uops if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg)
    params = [f"__global {CL_MEM_TYPES[b.dtype.base.scalar]}* restrict data{b.arg}" for b in bufs if isinstance(b.dtype, PtrDType)]
    params += [f"const long {n}_arg" for n in sorted({u.arg[0] for u in uops if u.op is Ops.DEFINE_VAR})]
    return cl_prelude(self.fp64) + sats + f"\n__kernel void {name}({', '.join(params)}) {{\n" + "\n".join(body) + "\n}\n"
