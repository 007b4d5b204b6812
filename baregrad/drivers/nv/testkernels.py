"""PTX kernels that exercise what a launch must set up right: many blocks (%ntid/%nctaid read from constant bank 0),
shared memory (barriers, generic pointers through the shared window), local memory (a large private array, register
spills, generic pointers through the local window), and a small step kernel for dependent graphs. Used by
tools/nv_doctor.py on a GPU and by tests/drivers/nv/test_nv_kernels.py (on a GPU with DEV=NV, else on the mock); ptxas assembles
them for the GPU, the mock runs the PTX.

  idx(out, n)                      out[i] = i over a 2D grid of 2D blocks (i from %ctaid, %ntid, %nctaid, %tid)
  blocksum(out, inp)               out[block] = sum of the block's 128 inputs, a tree reduction in .shared
  generic_shared(out)              each block's thread ids reversed through a generic pointer into .shared
  local_array(out, k)              a 1 KiB .local array per thread, read back directly and through cvta.local
  step(dst, src, mul, add)         dst[i] = src[i] * mul + add
  spill_ptx()                      spill(out, inp): 40 live values under .maxnreg 24 (ptxas spills to local memory)
  dynamic_shared_ptx(nbytes)       dynsmem(out): `nbytes` of dynamic shared memory filled and read back (> 48 KB)"""
from __future__ import annotations
from baregrad.codegen.renderer.ptx import DYN_SHARED_NOTE

KERNELS = r"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry idx(.param .u64 out, .param .u32 n) {
  .reg .b32 %r<12>; .reg .b64 %rd<8>; .reg .pred %p<2>;
  ld.param.u64 %rd1, [out]; cvta.to.global.u64 %rd1, %rd1; ld.param.u32 %r9, [n];
  mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x; mad.lo.s32 %r4, %r1, %r2, %r3;
  mov.u32 %r5, %ctaid.y; mov.u32 %r6, %nctaid.x; mov.u32 %r7, %ntid.y; mov.u32 %r8, %tid.y;
  mad.lo.s32 %r5, %r5, %r7, %r8; mul.lo.s32 %r6, %r6, %r2; mad.lo.s32 %r4, %r5, %r6, %r4;
  setp.ge.u32 %p1, %r4, %r9; @%p1 bra DONE;
  mul.wide.u32 %rd2, %r4, 4; add.s64 %rd3, %rd1, %rd2; st.global.u32 [%rd3], %r4;
DONE:
  ret;
}
.visible .entry blocksum(.param .u64 out, .param .u64 inp) {
  .shared .align 4 .b32 red[128];
  .reg .b32 %r<16>; .reg .b64 %rd<12>; .reg .pred %p<4>;
  ld.param.u64 %rd1, [out]; cvta.to.global.u64 %rd1, %rd1; ld.param.u64 %rd2, [inp]; cvta.to.global.u64 %rd2, %rd2;
  mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x; mad.lo.s32 %r4, %r1, %r2, %r3;
  mul.wide.u32 %rd3, %r4, 4; add.s64 %rd4, %rd2, %rd3; ld.global.u32 %r5, [%rd4];
  mov.u32 %r6, red; shl.b32 %r7, %r3, 2; add.u32 %r8, %r6, %r7; st.shared.u32 [%r8], %r5;
  bar.sync 0;
  shr.u32 %r9, %r2, 1;
LOOP:
  setp.lt.u32 %p1, %r3, %r9;
  @!%p1 bra SKIP;
  shl.b32 %r10, %r9, 2; add.u32 %r11, %r8, %r10; ld.shared.u32 %r12, [%r11]; ld.shared.u32 %r13, [%r8];
  add.u32 %r13, %r13, %r12; st.shared.u32 [%r8], %r13;
SKIP:
  bar.sync 0;
  shr.u32 %r9, %r9, 1; setp.ne.u32 %p2, %r9, 0; @%p2 bra LOOP;
  setp.ne.u32 %p3, %r3, 0; @%p3 bra DONE;
  ld.shared.u32 %r14, [%r6]; mul.wide.u32 %rd5, %r1, 4; add.s64 %rd6, %rd1, %rd5; st.global.u32 [%rd6], %r14;
DONE:
  ret;
}
.visible .entry generic_shared(.param .u64 out) {
  .shared .align 4 .b32 sm[64];
  .reg .b32 %r<16>; .reg .b64 %rd<12>;
  ld.param.u64 %rd1, [out]; cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x; mad.lo.s32 %r4, %r1, %r2, %r3;
  mov.u64 %rd2, sm; cvta.shared.u64 %rd3, %rd2;
  mul.wide.u32 %rd4, %r3, 4; add.s64 %rd5, %rd3, %rd4; st.u32 [%rd5], %r4;
  bar.sync 0;
  sub.u32 %r5, %r2, 1; sub.u32 %r5, %r5, %r3; mul.wide.u32 %rd6, %r5, 4; add.s64 %rd7, %rd3, %rd6; ld.u32 %r6, [%rd7];
  mul.wide.u32 %rd8, %r4, 4; add.s64 %rd9, %rd1, %rd8; st.global.u32 [%rd9], %r6;
  ret;
}
.visible .entry local_array(.param .u64 out, .param .u32 k) {
  .local .align 4 .b8 arr[1024];
  .reg .b32 %r<16>; .reg .b64 %rd<12>; .reg .pred %p<2>;
  ld.param.u64 %rd1, [out]; cvta.to.global.u64 %rd1, %rd1; ld.param.u32 %r9, [k];
  mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x; mad.lo.s32 %r4, %r1, %r2, %r3;
  mov.u64 %rd2, arr; mov.u32 %r5, 0;
FILL:
  mul.wide.u32 %rd3, %r5, 4; add.s64 %rd4, %rd2, %rd3; mul.lo.u32 %r6, %r5, %r4; st.local.u32 [%rd4], %r6;
  add.u32 %r5, %r5, 1; setp.lt.u32 %p1, %r5, 256; @%p1 bra FILL;
  add.u32 %r7, %r9, %r3; and.b32 %r7, %r7, 255; mul.wide.u32 %rd5, %r7, 4; add.s64 %rd6, %rd2, %rd5; ld.local.u32 %r8, [%rd6];
  cvta.local.u64 %rd7, %rd2; add.s64 %rd8, %rd7, %rd5; ld.u32 %r10, [%rd8]; add.u32 %r8, %r8, %r10;
  mul.wide.u32 %rd9, %r4, 4; add.s64 %rd10, %rd1, %rd9; st.global.u32 [%rd10], %r8;
  ret;
}
.visible .entry step(.param .u64 dst, .param .u64 src, .param .u32 mul, .param .u32 add) {
  .reg .b32 %r<10>; .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [dst]; cvta.to.global.u64 %rd1, %rd1; ld.param.u64 %rd2, [src]; cvta.to.global.u64 %rd2, %rd2;
  ld.param.u32 %r8, [mul]; ld.param.u32 %r9, [add];
  mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x; mad.lo.s32 %r4, %r1, %r2, %r3;
  mul.wide.u32 %rd3, %r4, 4; add.s64 %rd4, %rd2, %rd3; ld.global.u32 %r5, [%rd4];
  mad.lo.u32 %r5, %r5, %r8, %r9; add.s64 %rd5, %rd1, %rd3; st.global.u32 [%rd5], %r5;
  ret;
}
"""

def spill_ptx(n: int = 40) -> str:
  """40 values loaded with ld.volatile and combined in reverse order: all live at once, more than .maxnreg 24 holds,
  so ptxas spills them to local memory (sm_90: 88 bytes stack frame, 84 bytes spill stores)."""
  body = [f"  ld.volatile.global.u32 %v{i}, [%rd4+{4 * i}]; add.u32 %v{i}, %v{i}, %r4;" for i in range(n)]
  body += [f"  mul.lo.u32 %r5, %r5, 31; xor.b32 %r5, %r5, %v{i};" for i in reversed(range(n))]
  return "\n".join([".version 8.0", ".target sm_90", ".address_size 64",
                    ".visible .entry spill(.param .u64 out, .param .u64 inp) .maxnreg 24 {",
                    f"  .reg .b32 %v<{n}>; .reg .b32 %r<8>; .reg .b64 %rd<8>;",
                    "  ld.param.u64 %rd1, [out]; cvta.to.global.u64 %rd1, %rd1; ld.param.u64 %rd2, [inp]; cvta.to.global.u64 %rd2, %rd2;",
                    "  mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x; mad.lo.s32 %r4, %r1, %r2, %r3;",
                    "  mul.wide.u32 %rd3, %r4, 4; add.s64 %rd4, %rd2, %rd3;", "  mov.u32 %r5, 0;", *body,
                    "  add.s64 %rd5, %rd1, %rd3; st.global.u32 [%rd5], %r5;", "  ret;", "}"])

def dynamic_shared_ptx(nbytes: int) -> str:
  """dynsmem(out): a block's threads fill all `nbytes` of dynamic shared memory (the renderer's .extern region, its size
  stated as the PTX renderer states it) with word i = i, then thread t of block b reads word nwords - 1 - t back and
  adds %dynamic_smem_size: out[b * ntid + t] = nwords - 1 - t + nbytes. The launch must provide the whole region."""
  if nbytes % 4 or nbytes < 4096: raise ValueError(f"dynamic_shared_ptx: {nbytes} bytes: a multiple of 4, at least 4096")
  nw = nbytes // 4
  return "\n".join([".version 8.0", ".target sm_90", ".address_size 64", f"{DYN_SHARED_NOTE}{nbytes}",
                    ".extern .shared .align 128 .b8 smem[];", ".visible .entry dynsmem(.param .u64 out) {",
                    "  .reg .b32 %r<16>; .reg .b64 %rd<8>; .reg .pred %p<2>;",
                    "  ld.param.u64 %rd1, [out]; cvta.to.global.u64 %rd1, %rd1;",
                    "  mov.u32 %r1, smem; mov.u32 %r2, %tid.x; mov.u32 %r3, %ntid.x; mov.u32 %r4, %r2;",
                    "FILL:", "  shl.b32 %r5, %r4, 2; add.u32 %r6, %r1, %r5; st.shared.u32 [%r6], %r4;",
                    f"  add.u32 %r4, %r4, %r3; setp.lt.u32 %p1, %r4, {nw}; @%p1 bra FILL;", "  bar.sync 0;",
                    f"  mov.u32 %r7, {nw - 1}; sub.u32 %r7, %r7, %r2; shl.b32 %r8, %r7, 2; add.u32 %r9, %r1, %r8;",
                    "  ld.shared.u32 %r10, [%r9]; mov.u32 %r11, %dynamic_smem_size; add.u32 %r10, %r10, %r11;",
                    "  mov.u32 %r12, %ctaid.x; mad.lo.s32 %r13, %r12, %r3, %r2;",
                    "  mul.wide.u32 %rd2, %r13, 4; add.s64 %rd3, %rd1, %rd2; st.global.u32 [%rd3], %r10;", "  ret;", "}"])
