"""The HCQ conformance suite's kernels (tests/device/test_hcq.py: fill, inc) for QCOM: linear programs rendered to NIR
and compiled by ir3, one program each (an ir3 program holds one kernel), one thread per element, workgroups of one."""
from __future__ import annotations

import functools

from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import Ops, UOp


def _program(name: str, with_val: bool, body) -> list[UOp]:
  i32 = dtypes.int32
  buf = UOp(Ops.DEFINE_GLOBAL, i32.ptr(), (), 0)
  gid = UOp(Ops.SPECIAL, i32, (), ("gidx0", 1))
  idx = UOp(Ops.INDEX, i32.ptr(), (buf, gid))
  pre = [buf, gid, idx]
  if with_val: pre.append(val := UOp.variable("val", -2 ** 31, 2 ** 31 - 1, i32))
  else: val = None
  ops = body(idx, gid, val)
  store = UOp(Ops.STORE, dtypes.void, (idx, ops[-1]))
  return pre + ops + [store, UOp(Ops.SINK, dtypes.void, (store,))]


@functools.cache
def qcom_hcq_kernels(gpu_id: int = 630) -> dict[str, bytes]:
  """name -> Ir3Program bytes: fill(out, val) out[i] = val + i; inc(a) a[i] += 1."""
  from baregrad.codegen.renderer.nir import NIRRenderer
  from baregrad.drivers.qcom.ir3_compile import IR3Compiler
  i32 = dtypes.int32
  def fill(idx, gid, val): return [UOp(Ops.ADD, i32, (val, gid))]
  def inc(idx, gid, val):
    ld = UOp(Ops.LOAD, i32, (idx,))
    return [c := UOp.const(i32, 1), ld, UOp(Ops.ADD, i32, (ld, c))]
  progs = {"fill": _program("fill", True, fill), "inc": _program("inc", False, inc)}
  return {n: IR3Compiler(gpu_id).compile(NIRRenderer(gpu_id).render(n, uops)) for n, uops in progs.items()}
