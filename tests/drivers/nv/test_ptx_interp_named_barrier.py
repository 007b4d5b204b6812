"""Named barriers with a thread count (bar.sync a, b: PTX ISA 9.7.13.1) in the PTX interpreter, as a warp-specialized
kernel uses them once its producer warpgroup has left (codegen/renderer/ptx_tma.py): the barrier completes for b
threads of the block; a block that brings another number, or a count that is not a multiple of the warp size, is
refused by name."""
from __future__ import annotations
import numpy as np
import pytest
from baregrad.drivers.mock.ptx import PTXModule, Memory, PTXError
from baregrad.drivers.nv_compile import find_ptxas

HDR = ".version 8.0\n.target sm_90\n.address_size 64\n"


def kernel(count: int, leave: bool = True) -> str:
  """64 threads: warp 1 exits (when `leave`); the others store tid into shared memory, `bar.sync 1, count`, and each
  writes its neighbour's (tid ^ 1) word to out."""
  return HDR + f""".visible .entry nb(.param .u64 out) {{
  .shared .align 4 .b32 s[64];
  .reg .b32 %r<10>; .reg .b64 %rd<6>; .reg .pred %p<2>;
  ld.param.u64 %rd1, [out]; cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r1, %tid.x;
  setp.ge.u32 %p1, %r1, 32;
  {"@%p1 ret;" if leave else ""}
  mov.u32 %r2, s; shl.b32 %r3, %r1, 2; add.u32 %r4, %r2, %r3;
  st.shared.u32 [%r4], %r1;
  bar.sync 1, {count};
  xor.b32 %r5, %r1, 1; shl.b32 %r6, %r5, 2; add.u32 %r7, %r2, %r6; ld.shared.u32 %r8, [%r7];
  mul.wide.u32 %rd2, %r1, 4; add.s64 %rd3, %rd1, %rd2; st.global.u32 [%rd3], %r8;
  ret;
}}
"""


def run(src: str) -> np.ndarray:
  mem = Memory()
  o = mem.alloc(64 * 4)
  mem.write(o, np.zeros(64, np.uint32))
  PTXModule(src).kernel("nb").launch(mem, [o], (2, 1, 1), (64, 1, 1))
  return mem.read(o, np.uint32, 64)


def test_a_named_barrier_for_the_threads_left():
  got = run(kernel(32))
  np.testing.assert_array_equal(got[:32], np.arange(32) ^ 1)
  if find_ptxas() is not None:
    from baregrad.drivers.nv_compile import PTXCompiler
    PTXCompiler("sm_90").compile(kernel(32))


def test_a_named_barrier_with_the_wrong_count_is_refused():
  with pytest.raises(PTXError, match=r"bar.sync 1, 64: 32 threads of block 0 arrived, the barrier counts 64"):
    run(kernel(64))
  with pytest.raises(PTXError, match=r"bar.sync 1, 32: 64 threads of block 0 arrived"):
    run(kernel(32, leave=False))
  with pytest.raises(PTXError, match=r"thread count `48`: an immediate multiple of 32"):
    run(kernel(48))
