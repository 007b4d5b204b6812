"""The mock NVIDIA GPU's PTX interpreter, against NumPy.

Hand-written PTX covers the instruction semantics; PTX from `nvcc -ptx -arch=sm_80` covers
what a compiler really emits (skipped with a reason where nvcc is absent)."""
import os
import shutil
import subprocess
import time

import numpy as np
import pytest

from baregrad.drivers.mock.ptx_interp import GPUFault, Memory, PTXError, PTXModule

HDR = """
.version 8.0
.target sm_80
.address_size 64
"""


def buf(mem, arr):
    arr = np.ascontiguousarray(arr)
    va = mem.alloc(max(arr.nbytes, 1))
    mem.write(va, arr)
    return va


def rd(mem, va, dtype, n):
    return mem.read(va, dtype, n)


# ----------------------------------------------------------------------------- hand-written PTX

VADD = HDR + """
.visible .entry vadd(
    .param .u64 a, .param .u64 b, .param .u64 c, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<11>;
    ld.param.u64 %rd1, [a];
    ld.param.u64 %rd2, [b];
    ld.param.u64 %rd3, [c];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.s32 %p1, %r5, %r1;
    @%p1 bra $DONE;
    cvta.to.global.u64 %rd4, %rd1;
    mul.wide.s32 %rd5, %r5, 4;
    add.s64 %rd6, %rd4, %rd5;
    cvta.to.global.u64 %rd7, %rd2;
    add.s64 %rd8, %rd7, %rd5;
    ld.global.f32 %f1, [%rd6];
    ld.global.f32 %f2, [%rd8];
    add.f32 %f3, %f1, %f2;
    cvta.to.global.u64 %rd9, %rd3;
    add.s64 %rd10, %rd9, %rd5;
    st.global.f32 [%rd10], %f3;
$DONE:
    ret;
}
"""


def test_vector_add():
    mod = PTXModule(VADD)
    k = mod.kernel("vadd")
    assert k.params == [("a", "u64"), ("b", "u64"), ("c", "u64"), ("n", "u32")]
    mem = Memory()
    n = 1000
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    pa, pb, pc = buf(mem, a), buf(mem, b), buf(mem, np.zeros(n + 24, np.float32))
    k.launch(mem, [pa, pb, pc, n], (4, 1, 1), (256, 1, 1))
    out = rd(mem, pc, np.float32, n + 24)
    np.testing.assert_array_equal(out[:n], a + b)
    assert not out[n:].any()  # threads past n stored nothing


SAXPY = HDR + """
.visible .entry saxpy(.param .u64 x, .param .u64 y, .param .f32 alpha, .param .u32 n)
{
    .reg .pred %p1;
    .reg .b32 %r<5>;
    .reg .f32 %f<5>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [x];
    ld.param.u64 %rd2, [y];
    ld.param.f32 %f1, [alpha];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mad.lo.s32 %r2, %r3, %r4, %r2;
    setp.lt.u32 %p1, %r2, %r1;
    @!%p1 ret;
    mul.wide.u32 %rd3, %r2, 4;
    add.s64 %rd4, %rd1, %rd3;
    add.s64 %rd5, %rd2, %rd3;
    ld.global.f32 %f2, [%rd4];
    ld.global.f32 %f3, [%rd5];
    fma.rn.f32 %f4, %f1, %f2, %f3;
    st.global.f32 [%rd5], %f4;
    ret;
}
"""


def test_saxpy_scalar_param():
    k = PTXModule(SAXPY).kernel("saxpy")
    mem = Memory()
    n = 300
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    px, py = buf(mem, x), buf(mem, y)
    k.launch(mem, [px, py, 2.5, n], (3, 1, 1), (128, 1, 1))
    ref = (np.float64(np.float32(2.5)) * x + y).astype(np.float32)  # fused: one rounding
    np.testing.assert_array_equal(rd(mem, py, np.float32, n), ref)
    # the same launch from a raw param buffer (what the driver uploads)
    py2 = buf(mem, y)
    raw = np.array([px, py2], np.uint64).tobytes() + np.float32(2.5).tobytes() + np.uint32(n).tobytes()
    k.launch(mem, raw, (3, 1, 1), (128, 1, 1))
    np.testing.assert_array_equal(rd(mem, py2, np.float32, n), ref)


# sum of 256 floats per block: shared memory tree reduction with a divergent `if (tid < s)`
# inside a loop, bar.sync each round, and thread 0 writing the block's result.
REDUCE = HDR + """
.visible .entry reduce(.param .u64 inp, .param .u64 out)
{
    .reg .pred %p<3>;
    .reg .b32 %r<12>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<8>;
    .shared .align 4 .f32 sdata[256];
    ld.param.u64 %rd1, [inp];
    ld.param.u64 %rd2, [out];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mad.lo.s32 %r4, %r2, %r3, %r1;
    mul.wide.u32 %rd3, %r4, 4;
    add.s64 %rd4, %rd1, %rd3;
    ld.global.f32 %f1, [%rd4];
    mov.u32 %r5, sdata;
    shl.b32 %r6, %r1, 2;
    add.s32 %r7, %r5, %r6;
    st.shared.f32 [%r7], %f1;
    bar.sync 0;
    shr.u32 %r8, %r3, 1;
$LOOP:
    setp.ge.u32 %p1, %r1, %r8;
    @%p1 bra $SKIP;
    shl.b32 %r9, %r8, 2;
    add.s32 %r10, %r7, %r9;
    ld.shared.f32 %f2, [%r10];
    ld.shared.f32 %f3, [%r7];
    add.f32 %f3, %f3, %f2;
    st.shared.f32 [%r7], %f3;
$SKIP:
    bar.sync 0;
    shr.u32 %r8, %r8, 1;
    setp.ne.s32 %p2, %r8, 0;
    @%p2 bra $LOOP;
    setp.ne.s32 %p1, %r1, 0;
    @%p1 bra $END;
    ld.shared.f32 %f1, [sdata];
    mul.wide.u32 %rd5, %r2, 4;
    add.s64 %rd6, %rd2, %rd5;
    st.global.f32 [%rd6], %f1;
$END:
    ret;
}
"""


def test_shared_reduction_with_barriers():
    k = PTXModule(REDUCE).kernel("reduce")
    mem = Memory()
    x = np.random.default_rng(2).integers(-100, 100, 256 * 5).astype(np.float32)
    pi, po = buf(mem, x), buf(mem, np.zeros(5, np.float32))
    k.launch(mem, [pi, po], (5, 1, 1), (256, 1, 1))
    np.testing.assert_array_equal(rd(mem, po, np.float32, 5), x.reshape(5, 256).sum(1))


# per-thread loop with a data-dependent trip count (threads leave the loop at different
# times), an if/else diamond and masked stores.
DIVLOOP = HDR + """
.visible .entry divloop(.param .u64 out)
{
    .reg .pred %p<4>;
    .reg .b32 %r<10>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, 0;        // i
    mov.u32 %r3, 0;        // acc
$L:
    setp.ge.u32 %p1, %r2, %r1;
    @%p1 bra $X;
    and.b32 %r4, %r2, 1;
    setp.eq.s32 %p2, %r4, 0;
    @%p2 bra $EVEN;
    sub.s32 %r3, %r3, %r2;
    bra.uni $J;
$EVEN:
    add.s32 %r3, %r3, %r2;
    add.s32 %r3, %r3, %r2;
$J:
    add.s32 %r2, %r2, 1;
    bra.uni $L;
$X:
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    and.b32 %r5, %r1, 3;
    setp.ne.s32 %p3, %r5, 3;
    @%p3 st.global.u32 [%rd3], %r3;
    ret;
}
"""


def test_divergent_loop_and_masked_store():
    k = PTXModule(DIVLOOP).kernel("divloop")
    mem = Memory()
    po = buf(mem, np.full(96, -7, np.int32))
    k.launch(mem, [po], (1, 1, 1), (96, 1, 1))
    out = rd(mem, po, np.int32, 96)
    ref = np.array([sum(2 * i if i % 2 == 0 else -i for i in range(t)) for t in range(96)], np.int32)
    ref[3::4] = -7
    np.testing.assert_array_equal(out, ref)


def _unary_kernel(name, ins, tin, tout, reg_in, reg_out, sin, sout, extra=""):
    """A kernel out[i] = OP(in[i]) with `ins` using %a (input) and %b (output)."""
    return HDR + f"""
.visible .entry {name}(.param .u64 inp, .param .u64 out)
{{
    .reg .pred %p<4>;
    .reg .{reg_in} %a;
    .reg .{reg_out} %b;
    .reg .b32 %t<4>;
    .reg .b64 %rd<6>;
    {extra}
    ld.param.u64 %rd1, [inp];
    ld.param.u64 %rd2, [out];
    mov.u32 %t1, %tid.x;
    mul.wide.u32 %rd3, %t1, {sin};
    add.s64 %rd4, %rd1, %rd3;
    ld.global.{tin} %a, [%rd4];
    {ins}
    mul.wide.u32 %rd3, %t1, {sout};
    add.s64 %rd5, %rd2, %rd3;
    st.global.{tout} [%rd5], %b;
    ret;
}}
"""


def run_unary(ins, x, out_dtype, tin, tout, reg_in=None, reg_out=None, extra=""):
    x = np.asarray(x)
    src = _unary_kernel("k", ins, tin, tout, reg_in or tin, reg_out or tout, x.dtype.itemsize,
                        np.dtype(out_dtype).itemsize, extra)
    k = PTXModule(src).kernel("k")
    mem = Memory()
    pi, po = buf(mem, x), buf(mem, np.zeros(len(x), out_dtype))
    k.launch(mem, [pi, po], (1, 1, 1), (len(x), 1, 1))
    return rd(mem, po, out_dtype, len(x))


I32 = np.array([0, 1, -1, 7, -7, 100, -100, 2**31 - 1, -2**31, 12345678, -98765], np.int32)


def test_integer_ops():
    x = I32
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(run_unary("shr.s32 %b, %a, 3;", x, np.int32, "s32", "s32"), x >> 3)
        np.testing.assert_array_equal(run_unary("shr.u32 %b, %a, 3;", x, np.int32, "s32", "s32"),
                                      (x.view(np.uint32) >> 3).view(np.int32))
        np.testing.assert_array_equal(run_unary("shr.s32 %b, %a, 40;", x, np.int32, "s32", "s32"),
                                      np.where(x < 0, -1, 0))  # clamped shift: sign fill
        np.testing.assert_array_equal(run_unary("shl.b32 %b, %a, 33;", x, np.int32, "s32", "s32"), 0 * x)
        np.testing.assert_array_equal(run_unary("shl.b32 %b, %a, 5;", x, np.int32, "s32", "s32"), x << 5)
        # truncating division and C remainder (sign of the dividend)
        for d in (7, -7, 3):
            q = run_unary(f"div.s32 %b, %a, {d};", x, np.int32, "s32", "s32")
            r = run_unary(f"rem.s32 %b, %a, {d};", x, np.int32, "s32", "s32")
            np.testing.assert_array_equal(q, np.array([int(v / d) if abs(v) < 2**31 - 1 else int(np.fix(v / d))
                                                      for v in x.tolist()], np.int32))
            np.testing.assert_array_equal(r, np.fmod(x, d))
        u = x.view(np.uint32)
        np.testing.assert_array_equal(run_unary("div.u32 %b, %a, 10;", u, np.uint32, "u32", "u32"), u // 10)
        np.testing.assert_array_equal(run_unary("rem.u32 %b, %a, 10;", u, np.uint32, "u32", "u32"), u % 10)
        np.testing.assert_array_equal(run_unary("mul.hi.s32 %b, %a, -1840700269;", x, np.int32, "s32", "s32"),
                                      ((x.astype(np.int64) * -1840700269) >> 32).astype(np.int32))
        np.testing.assert_array_equal(run_unary("mul.hi.u32 %b, %a, 3000000000;", u, np.uint32, "u32", "u32"),
                                      ((u.astype(np.uint64) * 3000000000) >> 32).astype(np.uint32))
        np.testing.assert_array_equal(run_unary("mul.wide.s32 %b, %a, -3;", x, np.int64, "s32", "s64"),
                                      x.astype(np.int64) * -3)
        np.testing.assert_array_equal(run_unary("mul.lo.s32 %b, %a, 65537;", x, np.int32, "s32", "s32"),
                                      (x.astype(np.int64) * 65537).astype(np.int32))
        np.testing.assert_array_equal(run_unary("min.s32 %b, %a, 5;", x, np.int32, "s32", "s32"), np.minimum(x, 5))
        np.testing.assert_array_equal(run_unary("max.u32 %b, %a, 5;", u, np.uint32, "u32", "u32"), np.maximum(u, 5))
        np.testing.assert_array_equal(run_unary("abs.s32 %b, %a;", x, np.int32, "s32", "s32"), np.abs(x))
        np.testing.assert_array_equal(run_unary("neg.s32 %b, %a;", x, np.int32, "s32", "s32"), -x)
        np.testing.assert_array_equal(run_unary("not.b32 %b, %a;", x, np.int32, "s32", "s32"), ~x)
        np.testing.assert_array_equal(run_unary("xor.b32 %b, %a, 0x0f0f0f0f;", x, np.int32, "s32", "s32"), x ^ 0x0f0f0f0f)
        np.testing.assert_array_equal(run_unary("popc.b32 %b, %a;", x, np.uint32, "s32", "u32", "b32", "b32"),
                                      np.bitwise_count(x.view(np.uint32)))
        np.testing.assert_array_equal(run_unary("clz.b32 %b, %a;", x, np.uint32, "s32", "u32", "b32", "b32"),
                                      [32 - int(v).bit_length() for v in u.tolist()])
        np.testing.assert_array_equal(run_unary("bfe.s32 %b, %a, 4, 8;", x, np.int32, "s32", "s32"),
                                      ((x >> 4) << 24) >> 24)
        np.testing.assert_array_equal(run_unary("bfi.b32 %b, 5, %a, 8, 4;", x, np.int32, "s32", "s32", "b32", "b32"),
                                      (x & ~0xF00) | (5 << 8))
        np.testing.assert_array_equal(run_unary("add.sat.s32 %b, %a, 2147483000;", x, np.int32, "s32", "s32"),
                                      np.clip(x.astype(np.int64) + 2147483000, -2**31, 2**31 - 1))
    x64 = np.array([0, -1, 5, -5, 2**40 + 3, -(2**62), 2**63 - 1], np.int64)
    np.testing.assert_array_equal(run_unary("shr.s64 %b, %a, 1;", x64, np.int64, "s64", "s64"), x64 >> 1)
    np.testing.assert_array_equal(run_unary("div.s64 %b, %a, -3;", x64, np.int64, "s64", "s64"),
                                  [int(v / -3) if abs(v) < 2**50 else -(abs(v) // 3) * (1 if v > 0 else -1) for v in x64.tolist()])
    np.testing.assert_array_equal(run_unary("mul.hi.s64 %b, %a, -7;", x64, np.int64, "s64", "s64"),
                                  [(v * -7) >> 64 for v in x64.tolist()])
    np.testing.assert_array_equal(run_unary("mul.hi.u64 %b, %a, 0xFFFFFFFFFFFFFFFF;", x64.view(np.uint64), np.uint64, "u64", "u64"),
                                  [(v * (2**64 - 1)) >> 64 for v in x64.view(np.uint64).tolist()])


def test_cvt_saturation_rounding_and_nan():
    f = np.array([0.5, 1.5, 2.5, -0.5, -1.7, 3e9, -3e9, np.nan, np.inf, -np.inf, 255.9, 300.0], np.float32)
    # float -> int saturates to the range, NaN -> 0
    np.testing.assert_array_equal(run_unary("cvt.rzi.s32.f32 %b, %a;", f, np.int32, "f32", "s32"),
                                  [0, 1, 2, 0, -1, 2**31 - 1, -2**31, 0, 2**31 - 1, -2**31, 255, 300])
    np.testing.assert_array_equal(run_unary("cvt.rni.s32.f32 %b, %a;", f, np.int32, "f32", "s32"),
                                  [0, 2, 2, 0, -2, 2**31 - 1, -2**31, 0, 2**31 - 1, -2**31, 256, 300])
    np.testing.assert_array_equal(run_unary("cvt.rmi.s32.f32 %b, %a;", f, np.int32, "f32", "s32")[:5], [0, 1, 2, -1, -2])
    np.testing.assert_array_equal(run_unary("cvt.rpi.s32.f32 %b, %a;", f, np.int32, "f32", "s32")[:5], [1, 2, 3, 0, -1])
    np.testing.assert_array_equal(run_unary("cvt.rzi.u32.f32 %b, %a;", f, np.uint32, "f32", "u32"),
                                  [0, 1, 2, 0, 0, 3000000000, 0, 0, 2**32 - 1, 0, 255, 300])
    np.testing.assert_array_equal(run_unary("cvt.rzi.u8.f32 %b, %a;", f, np.uint8, "f32", "u8", reg_out="u16"),
                                  [0, 1, 2, 0, 0, 255, 0, 0, 255, 0, 255, 255])
    np.testing.assert_array_equal(run_unary("cvt.rzi.s64.f32 %b, %a;", f, np.int64, "f32", "s64")[5:10],
                                  [3000000000, -3000000000, 0, 2**63 - 1, -2**63])
    # .sat on float results clamps to [0, 1] and NaN -> 0
    np.testing.assert_array_equal(run_unary("cvt.sat.f32.f32 %b, %a;", f, np.float32, "f32", "f32"),
                                  [0.5, 1, 1, 0, 0, 1, 0, 0, 1, 0, 1, 1])
    np.testing.assert_array_equal(run_unary("add.sat.f32 %b, %a, 0f3F000000;", f, np.float32, "f32", "f32")[:5],
                                  [1, 1, 1, 0, 0])
    # int -> int with .sat, sign extension and truncation
    i = np.array([-300, -1, 0, 100, 200, 300, 70000, -70000], np.int32)
    np.testing.assert_array_equal(run_unary("cvt.sat.u8.s32 %b, %a;", i, np.uint8, "s32", "u8", reg_out="u16"),
                                  np.clip(i, 0, 255))
    np.testing.assert_array_equal(run_unary("cvt.sat.s8.s32 %b, %a;", i, np.int8, "s32", "s8", reg_out="s16"),
                                  np.clip(i, -128, 127))
    np.testing.assert_array_equal(run_unary("cvt.sat.s16.s32 %b, %a;", i, np.int16, "s32", "s16"), np.clip(i, -32768, 32767))
    np.testing.assert_array_equal(run_unary("cvt.u16.s32 %b, %a;", i, np.uint16, "s32", "u16"), i.astype(np.uint16))
    np.testing.assert_array_equal(run_unary("cvt.s64.s32 %b, %a;", i, np.int64, "s32", "s64"), i.astype(np.int64))
    np.testing.assert_array_equal(run_unary("cvt.u64.u32 %b, %a;", i.view(np.uint32), np.uint64, "u32", "u64"),
                                  i.view(np.uint32).astype(np.uint64))
    # int -> float, float <-> float
    big = np.array([16777217, -16777219, 2**31 - 1, 3, -5], np.int32)
    np.testing.assert_array_equal(run_unary("cvt.rn.f32.s32 %b, %a;", big, np.float32, "s32", "f32"), big.astype(np.float32))
    np.testing.assert_array_equal(run_unary("cvt.rz.f32.s32 %b, %a;", big, np.float32, "s32", "f32")[:2],
                                  [16777216, -16777218])
    np.testing.assert_array_equal(run_unary("cvt.rm.f32.s32 %b, %a;", big, np.float32, "s32", "f32")[:2],
                                  [16777216, -16777220])
    np.testing.assert_array_equal(run_unary("cvt.rp.f32.s32 %b, %a;", big, np.float32, "s32", "f32")[:2],
                                  [16777218, -16777218])
    d = np.array([1 / 3, -1 / 3, 1e300, np.nan, 65519.0, 1e-9], np.float64)
    np.seterr(over="ignore")
    np.testing.assert_array_equal(run_unary("cvt.rn.f32.f64 %b, %a;", d, np.float32, "f64", "f32"), d.astype(np.float32))
    rz = run_unary("cvt.rz.f32.f64 %b, %a;", d, np.float32, "f64", "f32")
    assert rz[0] < 1 / 3 and rz[1] > -1 / 3 and rz[2] == np.finfo(np.float32).max
    h = run_unary("cvt.rn.f16.f32 %b, %a;", d.astype(np.float32), np.float16, "f32", "f16", reg_out="b16")
    np.testing.assert_array_equal(h, d.astype(np.float32).astype(np.float16))
    back = run_unary("cvt.f32.f16 %b, %a;", h, np.float32, "f16", "f32", reg_in="b16")
    np.testing.assert_array_equal(back, h.astype(np.float32))


SETP_OPS = {
    "eq": lambda a, b: a == b, "ne": lambda a, b: (a != b) & ~np.isnan(a) & ~np.isnan(b),
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "equ": lambda a, b: (a == b) | np.isnan(a) | np.isnan(b), "neu": lambda a, b: ~(a == b),
    "ltu": lambda a, b: ~(a >= b), "leu": lambda a, b: ~(a > b),
    "gtu": lambda a, b: ~(a <= b), "geu": lambda a, b: ~(a < b),
    "num": lambda a, b: ~np.isnan(a) & ~np.isnan(b), "nan": lambda a, b: np.isnan(a) | np.isnan(b),
}


@pytest.mark.parametrize("op", sorted(SETP_OPS))
def test_setp_float_nan_forms(op):
    x = np.array([0.0, 1.0, 2.0, np.nan, -np.inf, np.inf, -0.0, 1.0], np.float32)
    # compare against 1.0; selp turns the predicate into 1/0
    out = run_unary(f"setp.{op}.f32 %p1, %a, 0f3F800000; selp.s32 %b, 1, 0, %p1;", x, np.int32, "f32", "s32")
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(out, SETP_OPS[op](x, np.float32(1.0)).astype(np.int32))
    y = np.array([1.0, np.nan, 3.0, np.nan, 0.0, 2.0, 1.0, np.nan], np.float32)
    # NaN against NaN too (both operands from registers: %a and its bit-rotated neighbour)
    out2 = run_unary(f"mov.f32 %f9, 0f7FC00000; setp.{op}.f32 %p1, %a, %f9; selp.s32 %b, 1, 0, %p1;", y, np.int32,
                     "f32", "s32", extra=".reg .f32 %f9;")
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(out2, SETP_OPS[op](y, np.float32(np.nan)).astype(np.int32))


def test_setp_integer_and_combined():
    x = I32
    for op, f in [("lt", np.less), ("le", np.less_equal), ("gt", np.greater), ("ge", np.greater_equal),
                  ("eq", np.equal), ("ne", np.not_equal)]:
        out = run_unary(f"setp.{op}.s32 %p1, %a, 7; selp.s32 %b, 1, 0, %p1;", x, np.int32, "s32", "s32")
        np.testing.assert_array_equal(out, f(x, 7).astype(np.int32))
    u = x.view(np.uint32)
    for op, f in [("lo", np.less), ("ls", np.less_equal), ("hi", np.greater), ("hs", np.greater_equal)]:
        out = run_unary(f"setp.{op}.u32 %p1, %a, 7; selp.s32 %b, 1, 0, %p1;", u, np.int32, "u32", "s32")
        np.testing.assert_array_equal(out, f(u, 7).astype(np.int32))
    # setp.lt.and with a negated predicate, and the two-destination form p|q
    out = run_unary("setp.gt.s32 %p2, %a, -10; setp.lt.and.s32 %p1|%p3, %a, 100, %p2; "
                    "selp.s32 %t2, 1, 0, %p1; selp.s32 %t3, 2, 0, %p3; add.s32 %b, %t2, %t3;",
                    x, np.int32, "s32", "s32")
    p2 = x > -10
    np.testing.assert_array_equal(out, ((x < 100) & p2) * 1 + ((x >= 100) & p2) * 2)
    out = run_unary("setp.gt.s32 %p2, %a, -10; setp.lt.or.s32 %p1, %a, 100, !%p2; selp.s32 %b, 1, 0, %p1;",
                    x, np.int32, "s32", "s32")
    np.testing.assert_array_equal(out, ((x < 100) | ~p2).astype(np.int32))


def test_float_math():
    x = np.array([0.25, 1.0, 2.0, 3.5, 100.0, 1e-3, 0.0, -1.0], np.float32)
    pos = np.abs(x) + np.float32(0.5)

    def un(ins, a):
        return run_unary(ins, a, np.float32, "f32", "f32")
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(un("ex2.approx.ftz.f32 %b, %a;", x), np.exp2(x), rtol=2e-7)
        np.testing.assert_allclose(un("lg2.approx.f32 %b, %a;", pos), np.log2(pos), rtol=2e-7)
        np.testing.assert_allclose(un("sin.approx.f32 %b, %a;", x), np.sin(x), rtol=2e-6, atol=1e-7)
        np.testing.assert_allclose(un("cos.approx.f32 %b, %a;", x), np.cos(x), rtol=2e-6, atol=1e-7)
        np.testing.assert_array_equal(un("sqrt.rn.f32 %b, %a;", pos), np.sqrt(pos))
        np.testing.assert_array_equal(un("rcp.rn.f32 %b, %a;", pos), np.float32(1) / pos)
        np.testing.assert_allclose(un("rsqrt.approx.f32 %b, %a;", pos), 1 / np.sqrt(pos), rtol=2e-7)
        np.testing.assert_array_equal(un("div.rn.f32 %b, %a, 0f40400000;", x), x / np.float32(3))
        np.testing.assert_array_equal(un("mul.rn.f32 %b, %a, %a;", x), x * x)
        np.testing.assert_array_equal(un("neg.f32 %b, %a;", x), -x)
        np.testing.assert_array_equal(un("abs.f32 %b, %a;", x), np.abs(x))
        np.testing.assert_array_equal(un("copysign.f32 %b, %a, 0f40000000;", x), np.copysign(np.float32(2), x))
        # f32 precision: 1 + 2^-30 rounds to 1 in f32
        np.testing.assert_array_equal(un("add.f32 %b, %a, 0f30800000;", x), x + np.float32(2**-30))
        # directed rounding: 1/3 rounded down and up differ by one ulp
        lo = un("div.rm.f32 %b, 0f3F800000, 0f40400000;", x)[0]
        hi = un("div.rp.f32 %b, 0f3F800000, 0f40400000;", x)[0]
        assert np.nextafter(lo, np.float32(1)) == hi and float(lo) < 1 / 3 < float(hi)
    n = np.array([1.0, np.nan, -2.0, np.nan], np.float32)
    np.testing.assert_array_equal(run_unary("min.f32 %b, %a, 0f00000000;", n, np.float32, "f32", "f32"),
                                  [0, 0, -2, 0])  # min ignores one NaN
    out = run_unary("min.NaN.f32 %b, %a, 0f00000000;", n, np.float32, "f32", "f32")
    assert out[0] == 0 and np.isnan(out[1]) and out[2] == -2 and np.isnan(out[3])
    out = run_unary("max.NaN.f32 %b, %a, 0f00000000;", n, np.float32, "f32", "f32")
    assert out[0] == 1 and np.isnan(out[1]) and out[2] == 0
    # f64 and f16
    d = np.array([1 / 3, 2.0, 1e-300], np.float64)
    np.testing.assert_array_equal(run_unary("mul.f64 %b, %a, 0d4008000000000000;", d, np.float64, "f64", "f64"), d * 3)
    np.testing.assert_array_equal(run_unary("sqrt.rn.f64 %b, %a;", d, np.float64, "f64", "f64"), np.sqrt(d))
    h = np.array([1.0, 0.1, 1000.0, 65000.0], np.float16)
    out = run_unary("add.f16 %b, %a, %a; mul.f16 %b, %b, %a;", h, np.float16, "b16", "b16", "f16", "f16")
    np.testing.assert_array_equal(out, (h + h) * h)
    # testp
    t = np.array([1.0, np.nan, np.inf, 1e-40], np.float32)
    np.testing.assert_array_equal(run_unary("testp.finite.f32 %p1, %a; selp.s32 %b, 1, 0, %p1;", t, np.int32, "f32", "s32"),
                                  [1, 0, 0, 1])


HIST = HDR + """
.visible .entry hist(.param .u64 data, .param .u64 bins, .param .u64 fsum, .param .u32 n)
{
    .reg .pred %p1;
    .reg .b32 %r<10>;
    .reg .f32 %f<3>;
    .reg .b64 %rd<10>;
    ld.param.u64 %rd1, [data];
    ld.param.u64 %rd2, [bins];
    ld.param.u64 %rd3, [fsum];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mad.lo.s32 %r5, %r3, %r4, %r2;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra $END;
    mul.wide.u32 %rd4, %r5, 4;
    add.s64 %rd5, %rd1, %rd4;
    ld.global.u32 %r6, [%rd5];
    and.b32 %r7, %r6, 15;
    mul.wide.u32 %rd6, %r7, 4;
    add.s64 %rd7, %rd2, %rd6;
    atom.global.add.u32 %r8, [%rd7], 1;
    cvt.rn.f32.u32 %f1, %r6;
    red.global.add.f32 [%rd3], %f1;
    atom.global.max.s32 %r9, [%rd3+4], %r6;
    atom.global.min.u32 %r9, [%rd3+8], %r6;
    atom.global.exch.b32 %r9, [%rd3+12], %r5;
    atom.global.cas.b32 %r9, [%rd3+16], %r5, 1000;
$END:
    ret;
}
"""


def test_atomics_histogram():
    k = PTXModule(HIST).kernel("hist")
    mem = Memory()
    n = 1000
    data = np.random.default_rng(3).integers(0, 64, n).astype(np.uint32)
    pd, pb = buf(mem, data), buf(mem, np.zeros(16, np.uint32))
    pf = buf(mem, np.array([0, 0, 0xFFFFFFFF, 7, 77], np.uint32))
    k.launch(mem, [pd, pb, pf, n], (4, 1, 1), (256, 1, 1))
    np.testing.assert_array_equal(rd(mem, pb, np.uint32, 16), np.bincount(data & 15, minlength=16))
    res = rd(mem, pf, np.uint32, 5)
    assert res[0].view(np.float32) == np.float32(data.sum())
    assert res[1] == data.max() and res[2] == data.min()
    assert res[3] < n  # exch: some thread's index
    assert res[4] == 1000  # cas compares with the thread index: thread 77 finds 77 and swaps in 1000
    # without thread 77 no compare succeeds
    pf2 = buf(mem, np.array([0, 0, 0xFFFFFFFF, 7, 77], np.uint32))
    k.launch(mem, [pd, pb, pf2, 77], (1, 1, 1), (128, 1, 1))
    assert rd(mem, pf2, np.uint32, 5)[4] == 77


def test_atomic_add_returns_distinct_old_values():
    src = HDR + """
.visible .entry ticket(.param .u64 ctr, .param .u64 out)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [ctr];
    ld.param.u64 %rd2, [out];
    atom.global.add.u32 %r1, [%rd1], 1;
    mov.u32 %r2, %tid.x;
    mul.wide.u32 %rd3, %r2, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r1;
    ret;
}
"""
    k = PTXModule(src).kernel("ticket")
    mem = Memory()
    pc, po = buf(mem, np.array([5], np.uint32)), buf(mem, np.zeros(200, np.uint32))
    k.launch(mem, [pc, po], (1, 1, 1), (200, 1, 1))
    assert sorted(rd(mem, po, np.uint32, 200).tolist()) == list(range(5, 205))
    assert rd(mem, pc, np.uint32, 1)[0] == 205


def test_vector_ld_st_and_mov_pack():
    src = HDR + """
.visible .entry vec(.param .u64 p)
{
    .reg .f32 %f<5>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [p];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd2, %r1, 16;
    add.s64 %rd3, %rd1, %rd2;
    ld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd3];
    st.global.v4.f32 [%rd3], {%f4, %f3, %f2, %f1};
    ld.global.v2.u32 {%r2, %r3}, [%rd3+16384];
    mov.b64 %rd4, {%r2, %r3};
    add.s64 %rd4, %rd4, 1;
    mov.b64 {%r3, %r2}, %rd4;
    st.global.v2.u32 [%rd3+16384], {%r2, %r3};
    ret;
}
"""
    k = PTXModule(src).kernel("vec")
    mem = Memory()
    x = np.arange(4 * 64, dtype=np.float32)
    y = np.arange(4 * 64, dtype=np.uint32) + 0xFFFFFFF0
    p = mem.alloc(32768)
    mem.write(p, x)
    mem.write(p + 16384, y)
    k.launch(mem, [p], (1, 1, 1), (64, 1, 1))
    np.testing.assert_array_equal(rd(mem, p, np.float32, 256), x.reshape(64, 4)[:, ::-1].reshape(-1))
    v = y.reshape(64, 4)[:, :2].copy().view(np.uint64).reshape(-1) + 1
    got = rd(mem, p + 16384, np.uint32, 256).reshape(64, 4)[:, :2]
    np.testing.assert_array_equal(got[:, ::-1].copy().view(np.uint64).reshape(-1), v)


def test_gpu_fault_names_address_and_instruction():
    k = PTXModule(VADD).kernel("vadd")
    mem = Memory()
    pa = buf(mem, np.zeros(64, np.float32))
    pc = buf(mem, np.zeros(64, np.float32))
    bad = 0xDEAD0000
    with pytest.raises(GPUFault) as ei:
        k.launch(mem, [pa, bad, pc, 64], (1, 1, 1), (64, 1, 1))
    msg = str(ei.value)
    line = next(i for i, t in enumerate(VADD.splitlines(), 1) if "ld.global.f32 %f2, [%rd8]" in t)
    assert "0xdead0000" in msg and "ld.global.f32 %f2, [%rd8]" in msg and f"line {line}:" in msg
    assert ei.value.address == bad
    # just past the end of a mapping faults too (65 threads, 64 floats)
    with pytest.raises(GPUFault, match=hex(pa + 256)):
        k.launch(mem, [pa, pa, pc, 65], (1, 1, 1), (65, 1, 1))
    # inactive (masked-off) threads never fault
    k.launch(mem, [pa, pa, pc, 64], (1, 1, 1), (128, 1, 1))


def test_errors_name_line_and_instruction():
    bad = VADD.replace("add.f32 %f3, %f1, %f2;", "frobnicate.f32 %f3, %f1, %f2;")
    line = next(i for i, t in enumerate(bad.splitlines(), 1) if "frobnicate" in t)
    with pytest.raises(PTXError, match=rf"line {line}: `frobnicate.f32 %f3, %f1, %f2`: unsupported instruction"):
        PTXModule(bad)
    with pytest.raises(PTXError, match=r"undeclared register %f9"):
        PTXModule(VADD.replace("add.f32 %f3, %f1, %f2;", "add.f32 %f3, %f1, %f9;"))
    with pytest.raises(PTXError, match=r"predicate register %p1 used as"):
        PTXModule(VADD.replace("add.f32 %f3, %f1, %f2;", "add.f32 %f3, %f1, %p1;"))
    with pytest.raises(PTXError, match=r"unknown branch target"):
        PTXModule(VADD.replace("@%p1 bra $DONE;", "@%p1 bra $NOWHERE;"))
    with pytest.raises(PTXError, match="no kernel named"):
        PTXModule(VADD).kernel("nope")


def test_divergent_barrier_raises():
    src = HDR + """
.visible .entry badbar(.param .u64 p)
{
    .reg .pred %p1;
    .reg .b32 %r1;
    mov.u32 %r1, %tid.x;
    setp.lt.u32 %p1, %r1, 16;
    @%p1 bra $A;
    bar.sync 0;
    bra.uni $E;
$A:
    bar.sync 0;
$E:
    ret;
}
"""
    k = PTXModule(src).kernel("badbar")
    with pytest.raises(PTXError, match="divergent barrier"):
        k.launch(Memory(), [0], (1, 1, 1), (64, 1, 1))


# ----------------------------------------------------------------------------- nvcc

NVCC = shutil.which("nvcc") or ("/usr/local/bin/nvcc" if os.path.exists("/usr/local/bin/nvcc") else None)

CUDA_SRC = r"""
#include <cuda_fp16.h>
extern "C" __global__ void elementwise(const float* a, const float* b, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float x = a[i], y = b[i];
    out[i] = expf(x) * 0.5f + logf(fabsf(y) + 1.0f) - sqrtf(fabsf(x)) / (1.0f + tanhf(y))
             + fmaxf(x, y) * rsqrtf(fabsf(y) + 2.0f) + floorf(x * 3.0f) + powf(fabsf(x), 1.5f);
  }
}
extern "C" __global__ void trig(const float* a, float* s, float* c) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[i] = sinf(a[i]); c[i] = cosf(a[i]);
}
#define T 16
extern "C" __global__ void matmul(const float* A, const float* B, float* C, int N) {
  __shared__ float As[T][T];
  __shared__ float Bs[T][T];
  int tx = threadIdx.x, ty = threadIdx.y;
  int row = blockIdx.y * T + ty, col = blockIdx.x * T + tx;
  float acc = 0.0f;
  for (int t = 0; t < N; t += T) {
    As[ty][tx] = A[row * N + t + tx];
    Bs[ty][tx] = B[(t + ty) * N + col];
    __syncthreads();
    for (int k = 0; k < T; k++) acc += As[ty][k] * Bs[k][tx];
    __syncthreads();
  }
  C[row * N + col] = acc;
}
extern "C" __global__ void gridstride(const double* x, double* y, long n, double alpha) {
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)blockDim.x * gridDim.x)
    y[i] = alpha * x[i] + (double)(i % 7);
}
extern "C" __global__ void divergent(const int* in, int* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = in[i], r;
  if (v % 3 == 0) {
    r = 0;
    for (int k = 0; k < (v & 31); k++) r += k * v;
  } else if (v % 3 == 1) {
    r = -v / 5;
    while (r > 10) r = (r >> 1) ^ 3;
  } else {
    r = (unsigned)v >> 3;
  }
  out[i] = r + (i & 1 ? v % 11 : v / 11);
}
extern "C" __global__ void blocksum(const float* x, float* out, int n) {
  extern __shared__ float sm[];
  int tid = threadIdx.x;
  float s = 0.0f;
  for (int i = blockIdx.x * blockDim.x + tid; i < n; i += blockDim.x * gridDim.x) s += x[i];
  sm[tid] = s;
  __syncthreads();
  for (int st = blockDim.x / 2; st > 32; st >>= 1) {
    if (tid < st) sm[tid] += sm[tid + st];
    __syncthreads();
  }
  if (tid < 32) {
    float v = sm[tid] + sm[tid + 32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
    if (tid == 0) atomicAdd(out, v);
  }
}
extern "C" __global__ void halfs(const __half* a, __half* out, unsigned char* u8, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float f = __half2float(a[i]);
  out[i] = __float2half(f * 3.0f + 1.0f);
  u8[i] = (unsigned char)min(max((int)(f * 10.0f), 0), 255);
}
extern "C" __global__ void ints(const long long* a, long long* out) {
  int i = threadIdx.x;
  long long v = a[i];
  unsigned long long u = (unsigned long long)v;
  out[4 * i + 0] = v / 13 + v % 13;
  out[4 * i + 1] = (long long)(u / 7u) ^ (long long)(u >> 61);
  out[4 * i + 2] = __popcll(u) + __clzll(u) * 100;
  out[4 * i + 3] = (v >> 5) * (long long)i;
}
"""


@pytest.fixture(scope="module")
def nvcc_module(tmp_path_factory):
    if NVCC is None:
        pytest.skip("nvcc not found (set PATH or install CUDA): nvcc-generated PTX tests skipped")
    d = tmp_path_factory.mktemp("nvcc")
    (d / "k.cu").write_text(CUDA_SRC)
    r = subprocess.run([NVCC, "-ptx", "-arch=sm_80", "-o", str(d / "k.ptx"), str(d / "k.cu")],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"nvcc failed: {r.stderr[-500:]}")
    return PTXModule((d / "k.ptx").read_text())


def test_nvcc_elementwise(nvcc_module):
    k = nvcc_module.kernel("elementwise")
    mem = Memory()
    n = 1000
    rng = np.random.default_rng(4)
    a = rng.uniform(-4, 4, n).astype(np.float32)
    b = rng.uniform(-2, 4, n).astype(np.float32)  # keep 1 + tanh(b) away from cancellation
    pa, pb, po = buf(mem, a), buf(mem, b), buf(mem, np.zeros(n, np.float32))
    k.launch(mem, [pa, pb, po, n], ((n + 127) // 128, 1, 1), (128, 1, 1))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = (np.exp(a64) * 0.5 + np.log(np.abs(b64) + 1) - np.sqrt(np.abs(a64)) / (1 + np.tanh(b64))
           + np.maximum(a64, b64) / np.sqrt(np.abs(b64) + 2) + np.floor(a.astype(np.float32) * np.float32(3))
           + np.abs(a64) ** 1.5)
    np.testing.assert_allclose(rd(mem, po, np.float32, n), ref, rtol=1e-5, atol=1e-5)


def test_nvcc_trig_large_arguments(nvcc_module):
    # large |x| takes the Payne-Hanek path: a .global table, .local arrays, 64-bit integer math
    k = nvcc_module.kernel("trig")
    mem = Memory()
    x = np.array([0.1, -2.0, 100.0, 12345.678, -1e5, 3e6, 1e20, -7e30] * 4, np.float32)
    pa, ps, pc = buf(mem, x), buf(mem, np.zeros(32, np.float32)), buf(mem, np.zeros(32, np.float32))
    k.launch(mem, [pa, ps, pc], (1, 1, 1), (32, 1, 1))
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(rd(mem, ps, np.float32, 32), np.sin(x64), atol=2e-6)
    np.testing.assert_allclose(rd(mem, pc, np.float32, 32), np.cos(x64), atol=2e-6)


def test_nvcc_tiled_matmul_shared_syncthreads(nvcc_module):
    k = nvcc_module.kernel("matmul")
    mem = Memory()
    N = 64
    rng = np.random.default_rng(5)
    A = rng.standard_normal((N, N)).astype(np.float32)
    B = rng.standard_normal((N, N)).astype(np.float32)
    pA, pB, pC = buf(mem, A), buf(mem, B), buf(mem, np.zeros((N, N), np.float32))
    t = time.perf_counter()
    k.launch(mem, [pA, pB, pC, N], (N // 16, N // 16, 1), (16, 16, 1))
    dt = time.perf_counter() - t
    np.testing.assert_allclose(rd(mem, pC, np.float32, N * N).reshape(N, N), A @ B, rtol=1e-4, atol=1e-4)
    assert dt < 1.0, f"64x64 matmul took {dt:.2f}s"


def test_nvcc_grid_stride_loop(nvcc_module):
    k = nvcc_module.kernel("gridstride")
    mem = Memory()
    n = 5000
    x = np.random.default_rng(6).standard_normal(n)
    px, py = buf(mem, x), buf(mem, np.zeros(n))
    k.launch(mem, [px, py, n, 1.25], (3, 1, 1), (128, 1, 1))
    np.testing.assert_array_equal(rd(mem, py, np.float64, n), 1.25 * x + np.arange(n) % 7)


def test_nvcc_warp_divergent(nvcc_module):
    k = nvcc_module.kernel("divergent")
    mem = Memory()
    v = np.random.default_rng(7).integers(-1000, 1000, 256).astype(np.int32)
    pi, po = buf(mem, v), buf(mem, np.zeros(256, np.int32))
    k.launch(mem, [pi, po], (2, 1, 1), (128, 1, 1))

    def ref(i, v):
        m3 = int(np.fmod(v, 3))
        if m3 == 0:
            r = sum(k * v for k in range(v & 31))
        elif m3 == 1:
            r = int(-v / 5)
            while r > 10:
                r = (r >> 1) ^ 3
        else:
            r = (v & 0xFFFFFFFF) >> 3
        r += int(np.fmod(v, 11)) if i & 1 else int(v / 11)
        return np.array(r & 0xFFFFFFFF, np.uint32).view(np.int32)
    np.testing.assert_array_equal(rd(mem, po, np.int32, 256), [ref(i, int(x)) for i, x in enumerate(v)])


def test_nvcc_dynamic_shared_shfl_atomic(nvcc_module):
    k = nvcc_module.kernel("blocksum")
    mem = Memory()
    n = 3000
    x = np.random.default_rng(8).integers(-50, 50, n).astype(np.float32)
    px, po = buf(mem, x), buf(mem, np.zeros(1, np.float32))
    k.launch(mem, [px, po, n], (4, 1, 1), (256, 1, 1), shared_bytes=256 * 4)
    assert rd(mem, po, np.float32, 1)[0] == x.sum()


def test_nvcc_half_and_u8(nvcc_module):
    k = nvcc_module.kernel("halfs")
    mem = Memory()
    n = 100
    a = np.linspace(-3, 30, n).astype(np.float16)
    pa, po, pu = buf(mem, a), buf(mem, np.zeros(n, np.float16)), buf(mem, np.zeros(n, np.uint8))
    k.launch(mem, [pa, po, pu, n], (1, 1, 1), (128, 1, 1))
    f = a.astype(np.float32)
    np.testing.assert_array_equal(rd(mem, po, np.float16, n), (f * np.float32(3) + np.float32(1)).astype(np.float16))
    np.testing.assert_array_equal(rd(mem, pu, np.uint8, n), np.clip((f * np.float32(10)).astype(np.int32), 0, 255))


def test_nvcc_int64(nvcc_module):
    k = nvcc_module.kernel("ints")
    mem = Memory()
    a = np.array([0, 1, -1, 123456789012345, -987654321098765, 2**62 + 5, -(2**63), 2**63 - 1] * 4, np.int64)
    pa, po = buf(mem, a), buf(mem, np.zeros(4 * 32, np.int64))
    k.launch(mem, [pa, po], (1, 1, 1), (32, 1, 1))
    out = rd(mem, po, np.int64, 128).reshape(32, 4)

    def tdiv(x, d):
        q = abs(x) // abs(d)
        return q if (x >= 0) == (d >= 0) else -q

    def wrap(x):
        return ((x + 2**63) % 2**64) - 2**63
    for i, v in enumerate(a.tolist()):
        u = v % 2**64
        assert out[i, 0] == wrap(tdiv(v, 13) + (v - 13 * tdiv(v, 13)))
        assert out[i, 1] == wrap((u // 7) ^ (u >> 61))
        assert out[i, 2] == bin(u).count("1") + (64 - u.bit_length()) * 100
        assert out[i, 3] == wrap((v >> 5) * i)
