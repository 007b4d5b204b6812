"""CUDA C renderer (the CUDA fallback device, nvcc -cubin now and NVRTC later): the C renderer's code with a kernel
signature, blockIdx/threadIdx for the GPU indices and CUDA's type names.

  extern "C" __global__ void NAME(float* __restrict__ data0, ..., const int n)

Parameters: one pointer per buffer slot 0..max DEFINE_GLOBAL arg, then the DEFINE_VARs sorted by name, the same
order and layout as the PTX renderer (codegen/renderer/ptx.py param_layout). Semantics are the C renderer's
helpers (guarded division, masked shifts, saturating float->int casts, NaN-propagating max) compiled for the device;
builds use -fmad=false so no mul+add is contracted (the explicit fma of ASSIGN is the only fused op).
Precision: CUDA's exp2f/log2f/sinf (what __builtin_exp2f etc. become) are libdevice's full-precision functions, closer
to the CPU than the PTX renderer's .approx instructions. float16 is CUDA's __half (cuda_fp16.h); its arithmetic is
promoted to float32 before rendering, as on the CPU."""
from __future__ import annotations
from baregrad.ir.dtype import DType, dtypes
from baregrad.ir.ops import UOp, Ops
from baregrad.codegen.renderer.cstyle import CRenderer, CTYPE, PRELUDE

CUDA_TYPES = {**CTYPE, dtypes.bool: "bool", dtypes.float16: "__half"}
CUDA_PRELUDE = "#include <cuda_fp16.h>\n" + PRELUDE.replace("static inline", "static __device__ inline")
PRELUDE_END = "// ---- end of prelude\n"

class CUDARenderer(CRenderer):
  name = "CUDA"
  own_math = False   # (exp2f, log2f, sinf: the device's own)
  has_threads = False
  has_local = True
  global_max = (2 ** 31 - 1, 65535, 65535)
  local_max = 1024
  types = CUDA_TYPES
  gpu_index = {"gidx": "blockIdx.{xyz}", "lidx": "threadIdx.{xyz}"}

  def _define(self, u: UOp, nbufs: int, varnames: list[str], emit) -> str:
    if u.op is Ops.DEFINE_GLOBAL: return f"data{u.arg}"
    if u.op is Ops.DEFINE_VAR: return u.arg[0]
    if u.op is Ops.DEFINE_LOCAL:  # workgroup memory; bools are bytes there as in global memory
      # (type: ignore: a buffer's dtype is a PtrDType)
      emit(f"__shared__ __align__(16) {self.types[u.dtype.base.scalar]} {u.arg[0]}[{max(1, u.arg[1])}];"); return u.arg[0]  # type: ignore[attr-defined]
    return super()._define(u, nbufs, varnames, emit)

  def _barrier(self) -> str: return "__syncthreads();"

  def _wrap(self, name: str, body: list[str], sats: str, uops: list[UOp]) -> str:
    bufs = {u.arg: u for u in uops if u.op is Ops.DEFINE_GLOBAL}
    params = [f"{self._ct(bufs[i].dtype)} __restrict__ data{i}" if i in bufs else f"void* data{i}" for i in range(max(bufs, default=-1) + 1)]
    vs = {u.arg[0]: u for u in uops if u.op is Ops.DEFINE_VAR}
    params += [f"const {self._ct(vs[n].dtype)} {n}" for n in sorted(vs)]
    return (CUDA_PRELUDE + PRELUDE_END + sats +
            f"\nextern \"C\" __global__ void {name}({', '.join(params)}) {{\n" + "\n".join(body) + "\n}\n")

  def _cast(self, fr: DType, to: DType, v: str, need_sat: set) -> str:
    f, t = fr.scalar, to.scalar
    if t == dtypes.float16 and f != t:  # through float/double: __half's integer constructors differ by width
      return f"((__half)(double)({v}))" if f in (dtypes.float64,) or f.itemsize >= 4 and dtypes.is_int(f) else f"((__half)(float)({v}))"
    if f == dtypes.float16 and t != f and dtypes.is_float(t): return f"(({self._ct(to)})(float)({v}))"
    if f == dtypes.float16 and t == dtypes.bool: return f"((float)({v}) != 0.0f)"
    return super()._cast(fr, to, v, need_sat)
