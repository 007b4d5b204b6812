"""Small builders for kernel ASTs (tests, benchmarks, and the scheduler use these)."""
from __future__ import annotations
from baregrad.ir.dtype import DType
from baregrad.ir.ops import UOp, Ops
from baregrad.ir.view import ShapeTracker

def as_st(x: ShapeTracker | tuple[int, ...]) -> ShapeTracker:
  return x if isinstance(x, ShapeTracker) else ShapeTracker.from_shape(tuple(x))

def gbuf(i: int, dtype: DType) -> UOp: return UOp(Ops.DEFINE_GLOBAL, dtype.ptr(), (), i)
def view(st: ShapeTracker | tuple[int, ...]) -> UOp: return UOp(Ops.VIEW, src=(), arg=as_st(st))
def load(i: int, dtype: DType, st: ShapeTracker | tuple[int, ...]) -> UOp:
  return UOp(Ops.LOAD, dtype, (gbuf(i, dtype), view(st)))
def const(dtype: DType, v: object, st: ShapeTracker | tuple[int, ...] | None = None) -> UOp:
  return UOp.const(dtype, v) if st is None else UOp(Ops.CONST, dtype, (view(st),), UOp.const(dtype, v).arg)
def store(i: int, st: ShapeTracker | tuple[int, ...], value: UOp) -> UOp:
  return UOp(Ops.STORE, src=(gbuf(i, value.dtype), view(st), value))
def reduce(value: UOp, op: Ops, axes: tuple[int, ...]) -> UOp: return UOp(Ops.REDUCE_AXIS, value.dtype, (value,), (op, tuple(axes)))
def sink(*stores: UOp) -> UOp: return UOp(Ops.SINK, src=tuple(stores))
