"""Device-independent decompositions a renderer can ask for (Renderer.extra_matcher)."""
from __future__ import annotations
from baregrad.ir.dtype import DType, dtypes
from baregrad.ir.ops import UOp, Ops, GroupOp
from baregrad.ir.pattern import UPat, PatternMatcher

SMALL_FLOATS = (dtypes.float16, dtypes.bfloat16)

def _like(d: DType, base: DType) -> DType: return base.vec(d.count)

def _promote_alu(x: UOp) -> UOp | None:
  # half and bfloat16 arithmetic runs in float32 and rounds after each op, as PyTorch's CPU kernels do
  if x.op is Ops.WHERE: return None
  srcs = x.src
  if not any(s.dtype.scalar in SMALL_FLOATS for s in srcs): return None
  f = tuple(s.cast(_like(s.dtype, dtypes.float32)) if s.dtype.scalar in SMALL_FLOATS else s for s in srcs)
  if x.op in GroupOp.Comparison: return UOp(x.op, x.dtype, f, x.arg)
  return UOp(x.op, _like(x.dtype, dtypes.float32), f, x.arg).cast(x.dtype)

def _bf16_to_f32(x: UOp, y: UOp) -> UOp | None:
  u16 = y.bitcast(_like(y.dtype, dtypes.uint16)).cast(_like(y.dtype, dtypes.uint32))
  f = (u16 << UOp.const(u16.dtype, 16)).bitcast(_like(y.dtype, dtypes.float32))
  return f if x.dtype.scalar == dtypes.float32 else f.cast(x.dtype)

def _to_bf16(x: UOp, y: UOp) -> UOp | None:
  f = y if y.dtype.scalar == dtypes.float32 else y.cast(_like(y.dtype, dtypes.float32))
  u = f.bitcast(_like(f.dtype, dtypes.uint32))
  c = lambda v: UOp.const(u.dtype, v)
  rounded = (u + c(0x7fff) + ((u >> c(16)) & c(1))) >> c(16)
  isnan = f.ne(f)
  bits = isnan.where((u >> c(16)) | c(0x40), rounded)
  return bits.cast(_like(f.dtype, dtypes.uint16)).bitcast(x.dtype)

cpu_float_matcher = PatternMatcher([
  (UPat(Ops.CAST, dtype=dtypes.bfloat16, name="x", src=(UPat(dtype=dtypes.bfloat16),)), lambda x: x.src[0]),
  (UPat(Ops.CAST, name="x", src=(UPat.var("y", dtypes.bfloat16),)), _bf16_to_f32),
  (UPat(Ops.CAST, dtype=dtypes.bfloat16, name="x", src=(UPat.var("y"),)), _to_bf16),
  (UPat(GroupOp.ALU, name="x"), _promote_alu),
])
