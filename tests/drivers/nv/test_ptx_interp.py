"""The mock NVIDIA GPU's PTX interpreter, against NumPy.

Hand-written PTX covers the instruction semantics; PTX from `nvcc -ptx -arch=sm_80` covers
what a compiler really emits (skipped with a reason where nvcc is absent)."""
import os
import shutil
import subprocess
import time

import numpy as np
import pytest

from baregrad.drivers.mock.ptx import GPUFault, Memory, PTXError, PTXModule

HDR = """
.version 8.0
.target sm_80
.address_size 64
"""


@pytest.fixture(autouse=True)
def _quiet_numpy():  # references overflow to inf on purpose
    with np.errstate(over="ignore", invalid="ignore"):
        yield


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
    seen = []
    k.trace = lambda line, text, active, n: seen.append((text, active))
    k.launch(mem, [po], (1, 1, 1), (96, 1, 1))
    del k.trace
    # the loop body runs for fewer threads each trip; the store after the loop runs once for all 96
    assert [a for t, a in seen if t.startswith("add.s32 %r2")][:3] == [95, 94, 93]
    assert [a for t, a in seen if t.startswith("@%p3 st.global")] == [96]
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
    assert ei.value.thread == (0, 0, 0) and ei.value.block == (0, 0, 0) and "thread (0, 0, 0)" in msg
    # just past the end of a mapping faults too (65 threads, 64 floats): thread 64, in block 2
    with pytest.raises(GPUFault, match=hex(pa + 256)) as ei:
        k.launch(mem, [pa, pa, pc, 65], (3, 1, 1), (32, 1, 1))
    assert ei.value.thread == (0, 0, 0) and ei.value.block == (2, 0, 0)
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


PTXAS = shutil.which("ptxas") or ("/usr/local/bin/ptxas" if os.path.exists("/usr/local/bin/ptxas") else None)
TYPE_CASES = [  # (instruction, valid PTX?)
    ("add.s32 %u1, %u2, %u3;", True), ("add.f32 %f1, %b1, %b2;", True), ("mov.u32 %u1, %f1;", False),
    ("add.s32 %r1, %f1, %r2;", False), ("add.s64 %rd1, %rd2, %u1;", False), ("st.global.u32 [%rd1], %rd2;", True),
    ("ld.global.u8 %u1, [%rd1];", True), ("cvt.u32.u64 %u1, %rd1;", True), ("add.f32 %f1, %f2, %h1;", False),
    ("setp.lt.s32 %p1, %u1, %u2;", True), ("mov.b32 %f1, %u1;", True), ("selp.f32 %f1, %f2, %r1, %p1;", False),
]


def _type_case_ptx(body):
    return HDR + f"""
.visible .entry t(.param .u64 a)
{{
    .reg .u32 %u<4>; .reg .s32 %r<4>; .reg .b32 %b<4>; .reg .f32 %f<4>; .reg .b64 %rd<4>; .reg .f16 %h<3>; .reg .pred %p<2>;
    {body}
    ret;
}}
"""


@pytest.mark.parametrize("body,valid", TYPE_CASES)
def test_operand_type_rules(body, valid, tmp_path):
    src = _type_case_ptx(body)
    if valid:
        PTXModule(src)
    else:
        with pytest.raises(PTXError, match="wrong operand type"):
            PTXModule(src)
    if PTXAS is not None:  # the rules are ptxas's
        (tmp_path / "t.ptx").write_text(src)
        r = subprocess.run([PTXAS, "-arch=sm_80", str(tmp_path / "t.ptx"), "-o", os.devnull], capture_output=True)
        assert (r.returncode == 0) == valid, r.stderr


def test_shared_out_of_bounds_and_hang_detection():
    src = HDR + """
.visible .entry oob(.param .u32 off)
{
    .reg .b32 %r<4>;
    .reg .pred %p1;
    .shared .align 4 .b8 sh[128];
    ld.param.u32 %r1, [off];
    mov.u32 %r2, %tid.x;
    shl.b32 %r2, %r2, 2;
    add.s32 %r3, %r1, %r2;
    st.shared.u32 [%r3], %r2;
    setp.eq.s32 %p1, %r1, 0;
$SPIN:
    @%p1 bra $SPIN;
    ret;
}
"""
    k = PTXModule(src).kernel("oob")
    with pytest.raises(GPUFault, match=r"shared offset 0x80 is outside the 128-byte shared window") as ei:
        k.launch(Memory(), [4], (1, 1, 1), (32, 1, 1))
    assert ei.value.thread == (31, 0, 0)
    k.max_steps = 10_000
    try:
        with pytest.raises(PTXError, match="infinite loop"):
            k.launch(Memory(), [0], (1, 1, 1), (32, 1, 1))
    finally:
        del k.max_steps


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
    # a predicated barrier: fine when the guard is uniform in each block (blocks differ), an error otherwise
    src2 = HDR + """
.visible .entry pbar(.param .u64 out, .param .u32 cbit, .param .u32 tbit)
{
    .reg .pred %p1;
    .reg .b32 %r<5>;
    .reg .b64 %rd<3>;
    .shared .align 4 .u32 sh[64];
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r4, [cbit];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    st.shared.u32 [sh], %r2;
    and.b32 %r3, %r2, %r4;
    ld.param.u32 %r4, [tbit];
    and.b32 %r2, %r1, %r4;
    or.b32 %r3, %r3, %r2;
    setp.eq.s32 %p1, %r3, 0;
    @%p1 bar.sync 0;
    ld.shared.u32 %r3, [sh];
    mov.u32 %r2, %ctaid.x;
    mad.lo.s32 %r2, %r2, 64, %r1;
    mul.wide.u32 %rd2, %r2, 4;
    add.s64 %rd2, %rd1, %rd2;
    st.global.u32 [%rd2], %r3;
    ret;
}
"""
    k2 = PTXModule(src2).kernel("pbar")
    mem = Memory()
    po = buf(mem, np.zeros(4 * 64, np.uint32))
    k2.launch(mem, [po, 0, 0], (4, 1, 1), (64, 1, 1))  # guard true everywhere
    np.testing.assert_array_equal(rd(mem, po, np.uint32, 256), np.repeat(np.arange(4), 64))
    k2.launch(mem, [po, 1, 0], (4, 1, 1), (64, 1, 1))  # odd blocks skip the barrier as a whole
    np.testing.assert_array_equal(rd(mem, po, np.uint32, 256), np.repeat(np.arange(4), 64))
    with pytest.raises(PTXError, match="divergent barrier"):
        k2.launch(mem, [po, 0, 2], (4, 1, 1), (64, 1, 1))  # guard depends on tid: diverges inside blocks



def test_generic_shared_and_local_addressing():
    src = HDR + """
.visible .entry gen(.param .u64 out)
{
    .reg .b32 %r<6>;
    .reg .b64 %rd<10>;
    .shared .align 4 .b8 sh[512];
    .local .align 8 .b8 depot[64];
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mov.u64 %rd2, sh;
    cvta.shared.u64 %rd3, %rd2;           // generic address of sh
    mul.wide.u32 %rd4, %r1, 4;
    add.s64 %rd5, %rd3, %rd4;
    mul.lo.s32 %r2, %r1, 3;
    st.u32 [%rd5], %r2;                   // generic store lands in shared memory
    bar.sync 0;
    xor.b32 %r3, %r1, 1;
    mul.wide.u32 %rd6, %r3, 4;
    add.s64 %rd7, %rd2, %rd6;
    ld.shared.u32 %r4, [%rd7];            // neighbour's value through the shared window
    mov.u64 %rd8, depot;
    cvta.local.u64 %rd9, %rd8;
    st.u32 [%rd9+8], %r4;                 // generic store lands in this thread's local memory
    st.local.u32 [depot+12], %r1;
    ld.local.u32 %r5, [%rd8+8];
    ld.u32 %r2, [%rd9+12];
    add.s32 %r5, %r5, %r2;
    add.s64 %rd5, %rd1, %rd4;
    st.global.u32 [%rd5], %r5;
    ret;
}
"""
    k = PTXModule(src).kernel("gen")
    mem = Memory()
    po = buf(mem, np.zeros(128, np.uint32))
    k.launch(mem, [po], (1, 1, 1), (128, 1, 1))
    t = np.arange(128)
    np.testing.assert_array_equal(rd(mem, po, np.uint32, 128), (t ^ 1) * 3 + t)


def test_blocks_in_a_batch_are_independent():
    """Blocks run together as one vector; a result must not depend on how many share a batch,
    and blocks may take different (per-block uniform) paths through different barriers."""
    src = HDR + """
.visible .entry paths(.param .u64 out)
{
    .reg .pred %p<3>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    .shared .align 4 .u32 sh[64];
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    shl.b32 %r3, %r1, 2;
    mov.u32 %r4, sh;
    add.s32 %r4, %r4, %r3;
    and.b32 %r5, %r2, 1;
    setp.eq.s32 %p1, %r5, 0;
    @%p1 bra $EVEN;
    mul.lo.s32 %r6, %r1, %r2;
    st.shared.u32 [%r4], %r6;
    bar.sync 0;
    bra.uni $JOIN;
$EVEN:
    add.s32 %r6, %r1, %r2;
    st.shared.u32 [%r4], %r6;
    bar.sync 0;
$JOIN:
    xor.b32 %r7, %r1, 63;
    shl.b32 %r7, %r7, 2;
    mov.u32 %r3, sh;
    add.s32 %r7, %r3, %r7;
    ld.shared.u32 %r6, [%r7];
    mad.lo.s32 %r5, %r2, 64, %r1;
    mul.wide.u32 %rd2, %r5, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r6;
    ret;
}
"""
    k = PTXModule(src).kernel("paths")
    outs = []
    for batch in (1, 3 * 64, 8192):
        k.max_batch_lanes = batch
        mem = Memory()
        po = buf(mem, np.zeros(7 * 64, np.uint32))
        k.launch(mem, [po], (7, 1, 1), (64, 1, 1))
        outs.append(rd(mem, po, np.uint32, 7 * 64))
    del k.max_batch_lanes
    b = np.arange(7)[:, None]
    t = 63 - np.arange(64)[None, :]
    ref = np.where(b % 2 == 0, t + b, t * b).reshape(-1)
    for o in outs:
        np.testing.assert_array_equal(o, ref)


def test_barrier_after_early_exit():
    src = HDR + """
.visible .entry early(.param .u64 out)
{
    .reg .pred %p1;
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    .shared .align 4 .u32 sh[64];
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    setp.ge.u32 %p1, %r1, 40;
    @%p1 ret;
    shl.b32 %r2, %r1, 2;
    st.shared.u32 [sh+0], 0;
    bar.sync 0;
    atom.shared.add.u32 %r3, [sh], 1;
    bar.sync 0;
    ld.shared.u32 %r3, [sh];
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r3;
    ret;
}
"""
    k = PTXModule(src).kernel("early")
    mem = Memory()
    po = buf(mem, np.zeros(64, np.uint32))
    k.launch(mem, [po], (1, 1, 1), (64, 1, 1))  # exited threads count as arrived (sm_70+)
    np.testing.assert_array_equal(rd(mem, po, np.uint32, 64), [40] * 40 + [0] * 24)
    k.strict_barriers = True
    try:
        with pytest.raises(PTXError, match="exited"):
            k.launch(mem, [po], (1, 1, 1), (64, 1, 1))
    finally:
        del k.strict_barriers


def test_module_globals_with_initializers():
    src = HDR + """
.global .align 4 .b8 table[16] = {1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0};
.const .align 4 .f32 scale[2] = {0f40000000, 0f3F000000};
.global .align 4 .u32 counter;
.visible .entry g(.param .u64 out)
{
    .reg .b32 %r<5>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    and.b32 %r2, %r1, 3;
    mul.wide.u32 %rd2, %r2, 4;
    mov.u64 %rd3, table;
    add.s64 %rd3, %rd3, %rd2;
    ld.global.u32 %r3, [%rd3];
    cvt.rn.f32.u32 %f1, %r3;
    ld.const.f32 %f2, [scale];
    ld.const.f32 %f3, [scale+4];
    fma.rn.f32 %f1, %f1, %f2, %f3;
    mul.wide.u32 %rd4, %r1, 4;
    add.s64 %rd5, %rd1, %rd4;
    st.global.f32 [%rd5], %f1;
    atom.global.inc.u32 %r4, [counter], 1000;
    ret;
}
"""
    mod = PTXModule(src)
    mem = Memory()
    po = buf(mem, np.zeros(8, np.float32))
    mod.kernel("g").launch(mem, [po], (1, 1, 1), (8, 1, 1))
    np.testing.assert_array_equal(rd(mem, po, np.float32, 8), np.tile([2.5, 4.5, 6.5, 8.5], 2))
    addrs = mod.load_globals(mem)
    assert rd(mem, addrs["counter"], np.uint32, 1)[0] == 8
    assert rd(mem, addrs["table"], np.uint32, 4).tolist() == [1, 2, 3, 4]



def test_bit_manipulation_and_misc_integer_ops():
    x = I32
    u = x.view(np.uint32)
    np.testing.assert_array_equal(run_unary("bfe.u32 %b, %a, 28, 8;", u, np.uint32, "u32", "u32"), u >> 28)
    np.testing.assert_array_equal(run_unary("brev.b32 %b, %a;", u, np.uint32, "u32", "u32", "b32", "b32"),
                                  [int(f"{v:032b}"[::-1], 2) for v in u.tolist()])
    np.testing.assert_array_equal(run_unary("bfind.u32 %b, %a;", u, np.uint32, "u32", "u32"),
                                  [v.bit_length() - 1 if v else 0xFFFFFFFF for v in u.tolist()])
    np.testing.assert_array_equal(run_unary("bfind.s32 %b, %a;", x, np.uint32, "s32", "u32", "s32", "u32"),
                                  [(v if v >= 0 else ~v).bit_length() - 1 if v not in (0, -1) else 0xFFFFFFFF
                                   for v in x.tolist()])
    # prmt: select bytes of {b, a}; 0x3210 is identity, 0x0123 byte-reverses, 0x8880 sign-replicates byte 0
    np.testing.assert_array_equal(run_unary("prmt.b32 %b, %a, 0, 0x0123;", u, np.uint32, "u32", "u32", "b32", "b32"),
                                  u.byteswap())
    ref = [((v & 0xFF) | ((0xFFFFFF00) if v & 0x80 else 0)) for v in u.tolist()]
    np.testing.assert_array_equal(run_unary("prmt.b32 %b, %a, 0, 0x8880;", u, np.uint32, "u32", "u32", "b32", "b32"), ref)
    # lop3 with LUT 0x96 is a ^ b ^ c; 0xE8 is majority
    np.testing.assert_array_equal(run_unary("lop3.b32 %b, %a, 0x0F0F0F0F, 0x00FF00FF, 0x96;", u, np.uint32, "u32", "u32", "b32", "b32"),
                                  u ^ 0x0F0F0F0F ^ 0x00FF00FF)
    np.testing.assert_array_equal(run_unary("lop3.b32 %b, %a, 0x0F0F0F0F, 0x00FF00FF, 0xE8;", u, np.uint32, "u32", "u32", "b32", "b32"),
                                  (u & 0x0F0F0F0F) | (u & 0x00FF00FF) | (0x0F0F0F0F & 0x00FF00FF))
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(run_unary("mad.hi.s32 %b, %a, 1431655766, 7;", x, np.int32, "s32", "s32"),
                                      (((x.astype(np.int64) * 1431655766) >> 32) + 7).astype(np.int32))
        np.testing.assert_array_equal(run_unary("mad.wide.s32 %b, %a, -5, 0x100000000;", x, np.int64, "s32", "s64",
                                                reg_out="s64"), x.astype(np.int64) * -5 + 2**32)
        np.testing.assert_array_equal(run_unary("mul24.lo.s32 %b, %a, 3;", x, np.int32, "s32", "s32"),
                                      ((x.astype(np.int64) << 40 >> 40) * 3).astype(np.int32))
    np.testing.assert_array_equal(run_unary("sad.s32 %b, %a, 5, 100;", x[:7], np.int32, "s32", "s32"),
                                  np.abs(x[:7].astype(np.int64) - 5) + 100)
    np.testing.assert_array_equal(run_unary("cnot.b32 %b, %a;", u, np.uint32, "u32", "u32", "b32", "b32"), (u == 0) * 1)
    np.testing.assert_array_equal(run_unary("slct.s32.s32 %b, 10, 20, %a;", x, np.int32, "s32", "s32"),
                                  np.where(x >= 0, 10, 20))
    np.testing.assert_array_equal(run_unary("set.lt.u32.s32 %b, %a, 7;", x, np.uint32, "s32", "u32", "s32", "u32"),
                                  np.where(x < 7, 0xFFFFFFFF, 0))
    np.testing.assert_array_equal(run_unary("set.gt.f32.s32 %b, %a, 7;", x, np.float32, "s32", "f32", "s32", "f32"),
                                  np.where(x > 7, 1.0, 0.0))
    t = np.array([1.0, 0.0, 1e-40, -1e-40, np.inf, np.nan, -3.0], np.float32)
    for kind, ref in [("normal", [1, 0, 0, 0, 0, 0, 1]), ("subnormal", [0, 0, 1, 1, 0, 0, 0]),
                      ("infinite", [0, 0, 0, 0, 1, 0, 0]), ("notanumber", [0, 0, 0, 0, 0, 1, 0]),
                      ("number", [1, 1, 1, 1, 1, 0, 1])]:
        np.testing.assert_array_equal(run_unary(f"testp.{kind}.f32 %p1, %a; selp.s32 %b, 1, 0, %p1;", t, np.int32,
                                                "f32", "s32"), ref, err_msg=kind)
    # .ftz flushes subnormal inputs and results
    np.testing.assert_array_equal(run_unary("add.ftz.f32 %b, %a, 0f00000000;", t[:4], np.float32, "f32", "f32"),
                                  [1.0, 0.0, 0.0, -0.0])


def test_f16x2_bf16_and_packing():
    a = np.array([1.5, -2.25, 1000.0, 0.1], np.float32)
    b = np.array([0.5, 4.0, -3.0, 1e5], np.float32)
    src = HDR + """
.visible .entry h(.param .u64 pa, .param .u64 pb, .param .u64 out)
{
    .reg .b32 %r<8>;
    .reg .b16 %rs<4>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<10>;
    ld.param.u64 %rd1, [pa];
    ld.param.u64 %rd2, [pb];
    ld.param.u64 %rd3, [out];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd4, %r1, 4;
    add.s64 %rd5, %rd1, %rd4;
    add.s64 %rd6, %rd2, %rd4;
    ld.global.f32 %f1, [%rd5];
    ld.global.f32 %f2, [%rd6];
    cvt.rn.f16x2.f32 %r2, %f1, %f2;          // {hi = a, lo = b}
    add.f16x2 %r3, %r2, %r2;
    mul.f16x2 %r4, %r3, %r2;
    fma.rn.f16x2 %r5, %r4, %r2, %r3;
    mov.b32 {%rs1, %rs2}, %r5;               // rs1 = low half (from b), rs2 = high half (from a)
    cvt.rn.bf16.f32 %rs3, %f1;
    cvt.f32.bf16 %f3, %rs3;
    mul.wide.u32 %rd7, %r1, 16;
    add.s64 %rd8, %rd3, %rd7;
    st.global.v2.b32 [%rd8], {%r2, %r5};
    st.global.b16 [%rd8+8], %rs3;
    st.global.f32 [%rd8+12], %f3;
    ret;
}
"""
    k = PTXModule(src).kernel("h")
    mem = Memory()
    pa, pb, po = buf(mem, a), buf(mem, b), buf(mem, np.zeros(16, np.uint32))
    k.launch(mem, [pa, pb, po], (1, 1, 1), (4, 1, 1))
    raw = mem.read_bytes(po, 64)
    rows = [raw[16 * i:16 * i + 16] for i in range(4)]
    h = lambda v: np.float16(v)
    for i, r in enumerate(rows):
        packed = np.frombuffer(r[:4], np.float16)
        assert packed[1] == h(a[i]) and packed[0] == h(b[i])
        res = np.frombuffer(r[4:8], np.float16)
        for half, x in ((1, h(a[i])), (0, h(b[i]))):
            s2 = np.float16(x + x)
            m = np.float16(s2 * x)
            ref = np.float16(np.float64(m) * np.float64(x) + np.float64(s2))
            assert res[half] == ref or (np.isinf(res[half]) and np.isinf(ref))
        bf = np.frombuffer(r[8:10], np.uint16)[0]
        f32 = np.frombuffer(r[12:16], np.float32)[0]
        assert f32 == np.frombuffer((np.uint32(bf) << 16).tobytes(), np.float32)[0]
        assert abs(f32 - a[i]) <= abs(a[i]) * 2**-8


SHFL = HDR + """
.visible .entry sh(.param .u64 out, .param .u32 delta)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r6, [delta];
    mov.u32 %r1, %tid.x;
    mul.lo.s32 %r2, %r1, 10;
    shfl.sync.MODE.b32 %r3|%p1, %r2, %r6, CVAL, -1;
    selp.u32 %r4, 1, 0, %p1;
    mul.wide.u32 %rd2, %r1, 8;
    add.s64 %rd3, %rd1, %rd2;
    st.global.v2.u32 [%rd3], {%r3, %r4};
    ret;
}
"""


@pytest.mark.parametrize("mode,cval", [("bfly", 31), ("down", 31), ("up", 0), ("idx", 31)])
def test_shfl_sync_modes(mode, cval):
    k = PTXModule(SHFL.replace("MODE", mode).replace("CVAL", str(cval))).kernel("sh")
    mem = Memory()
    po = buf(mem, np.zeros(2 * 64, np.uint32))
    d = 3
    k.launch(mem, [po, d], (1, 1, 1), (64, 1, 1))
    out = rd(mem, po, np.uint32, 128).reshape(64, 2)
    t = np.arange(64)
    lane, base = t % 32, t - t % 32
    if mode == "bfly":
        j, ok = lane ^ d, np.ones(64, bool)
    elif mode == "down":
        j = lane + d
        ok = j <= 31
    elif mode == "up":
        j = lane - d
        ok = j >= 0
    else:
        j, ok = np.full(64, d), np.ones(64, bool)
    src = np.where(ok, base + j, t)
    np.testing.assert_array_equal(out[:, 0], src * 10)
    np.testing.assert_array_equal(out[:, 1], ok)


def test_shared_atomics_and_red():
    src = HDR + """
.visible .entry sa(.param .u64 out)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    .shared .align 4 .u32 cnt[4];
    mov.u32 %r1, %tid.x;
    st.shared.u32 [cnt], 0;
    st.shared.u32 [cnt+4], 0;
    st.shared.u32 [cnt+8], 0xFFFFFFFF;
    st.shared.u32 [cnt+12], 0;
    bar.sync 0;
    and.b32 %r2, %r1, 7;
    red.shared.add.u32 [cnt], %r2;
    atom.shared.or.b32 %r3, [cnt+4], %r1;
    atom.shared.and.b32 %r3, [cnt+8], %r1;
    atom.shared.inc.u32 %r3, [cnt+12], 9;
    bar.sync 0;
    ld.param.u64 %rd1, [out];
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    and.b32 %r4, %r1, 3;
    shl.b32 %r4, %r4, 2;
    mov.u32 %r5, cnt;
    add.s32 %r5, %r5, %r4;
    ld.shared.u32 %r6, [%r5];
    st.global.u32 [%rd3], %r6;
    ret;
}
"""
    k = PTXModule(src).kernel("sa")
    mem = Memory()
    po = buf(mem, np.zeros(2 * 100, np.uint32))
    k.launch(mem, [po], (2, 1, 1), (100, 1, 1))
    t = np.arange(100)
    ref = [int((t & 7).sum()), int(np.bitwise_or.reduce(t)), 0, 100 % 10]
    out = rd(mem, po, np.uint32, 100)
    np.testing.assert_array_equal(out, np.array(ref, np.uint32)[t & 3])

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
__constant__ float coef[4] = {0.5f, -1.0f, 2.0f, 0.25f};
__device__ unsigned int hits;
extern "C" __global__ void votes(const int* in, unsigned* out, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = in[i];
  unsigned b = __ballot_sync(0xffffffff, v > 0);
  int all = __all_sync(0xffffffff, v > -1000), any = __any_sync(0xffffffff, v > 900);
  out[i] = b ^ (all << 1) ^ any;
  y[i] = coef[i & 3] * v;
  if (v > 0) atomicAdd(&hits, 1u);
}
__device__ int lock;
extern "C" __global__ void spinlock(float* acc, int* order) {
  // a naive intra-warp spin lock: needs sm_70+ forward progress (the mock lets leading threads run)
  while (atomicCAS(&lock, 0, 1) != 0) {}
  float v = *acc;
  *acc = v + 1.0f;
  order[threadIdx.x] = (int)v;
  __threadfence();
  atomicExch(&lock, 0);
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


@pytest.fixture(scope="module", params=["-O3", "-G"])
def nvcc_module(request, tmp_path_factory):
    """The CUDA kernels compiled optimized, and as debug builds (-G: calls to device functions)."""
    if NVCC is None:
        pytest.skip("nvcc not found (set PATH or install CUDA): nvcc-generated PTX tests skipped")
    d = tmp_path_factory.mktemp("nvcc")
    (d / "k.cu").write_text(CUDA_SRC)
    r = subprocess.run([NVCC, "-ptx", "-arch=sm_80", request.param, "-o", str(d / "k.ptx"), str(d / "k.cu")],
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


def test_nvcc_warp_vote_and_constants(nvcc_module):
    k = nvcc_module.kernel("votes")
    mem = Memory()
    v = np.random.default_rng(9).integers(-999, 999, 128).astype(np.int32)
    pi, po, py = buf(mem, v), buf(mem, np.zeros(128, np.uint32)), buf(mem, np.zeros(128, np.float32))
    k.launch(mem, [pi, po, py], (2, 1, 1), (64, 1, 1))
    w = (v > 0).reshape(4, 32)
    ballot = (w.astype(np.uint64) << np.arange(32, dtype=np.uint64)).sum(1).astype(np.uint32)
    anyw = (v > 900).reshape(4, 32).any(1).astype(np.uint32)
    ref = np.repeat(ballot ^ (1 << 1) ^ anyw, 32)
    np.testing.assert_array_equal(rd(mem, po, np.uint32, 128), ref)
    coef = np.array([0.5, -1.0, 2.0, 0.25], np.float32)
    np.testing.assert_array_equal(rd(mem, py, np.float32, 128), coef[np.arange(128) & 3] * v.astype(np.float32))
    hits = nvcc_module.load_globals(mem)["hits"]
    assert rd(mem, hits, np.uint32, 1)[0] == (v > 0).sum()


def test_nvcc_lineinfo_and_external_calls(tmp_path):
    if NVCC is None:
        pytest.skip("nvcc not found: nvcc-generated PTX tests skipped")
    src = tmp_path / "d.cu"
    src.write_text('#include <cstdio>\n'
                   'extern "C" __global__ void sq(float* x) { int i = threadIdx.x; x[i] = expf(x[i]) * x[i]; }\n'
                   'extern "C" __global__ void say(int v) { printf("%d\\n", v); }\n')
    out = tmp_path / "d.ptx"
    r = subprocess.run([NVCC, "-ptx", "-arch=sm_80", "-lineinfo", "-o", str(out), str(src)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"nvcc -lineinfo failed: {r.stderr[-300:]}")
    text = out.read_text()
    assert ".loc" in text
    # printf calls the external vprintf: a clear error naming it (when the module is built)
    with pytest.raises(PTXError, match="external function vprintf"):
        PTXModule(text)
    text = text[:text.index(".visible .entry say")] if ".visible .entry say" in text else text
    k = PTXModule(text).kernel("sq")
    mem = Memory()
    x = np.linspace(-2, 2, 32).astype(np.float32)
    px = buf(mem, x)
    k.launch(mem, [px], (1, 1, 1), (32, 1, 1))
    np.testing.assert_allclose(rd(mem, px, np.float32, 32), np.exp(x.astype(np.float64)) * x, rtol=1e-6, atol=1e-7)


FUNCS = HDR + """
.func (.param .b32 r) addmul(.param .b32 a, .param .b32 b)
{
    .reg .b32 %r<4>;
    .reg .pred %p1;
    ld.param.b32 %r1, [a];
    ld.param.b32 %r2, [b];
    setp.lt.s32 %p1, %r1, 0;
    @%p1 bra $NEG;
    mul.lo.s32 %r3, %r1, %r2;
    st.param.b32 [r], %r3;
    ret;
$NEG:
    add.s32 %r3, %r1, %r2;
    st.param.b32 [r], %r3;
    ret;
}
.func (.param .b32 r) twice(.param .b32 a)
{
    .reg .b32 %r<3>;
    ld.param.b32 %r1, [a];
    {
    .param .b32 p0;
    .param .b32 p1;
    .param .b32 q;
    st.param.b32 [p0], %r1;
    st.param.b32 [p1], 2;
    call.uni (q), addmul, (p0, p1);
    ld.param.b32 %r2, [q];
    }
    st.param.b32 [r], %r2;
    ret;
}
.func loop(.param .b32 a)
{
    .param .b32 p;
    st.param.b32 [p], 1;
    call loop, (p);
    ret;
}
.visible .entry calls(.param .u64 out)
{
    .reg .b32 %r<5>;
    .reg .pred %p1;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    sub.s32 %r2, %r1, 4;
    mov.u32 %r4, 1000;
    setp.ne.s32 %p1, %r1, 5;
    {
    .param .b32 x;
    .param .b32 y;
    st.param.b32 [x], %r2;
    @%p1 call.uni (y), twice, (x);
    @%p1 ld.param.b32 %r4, [y];
    }
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r4;
    ret;
}
"""


def test_device_function_calls_are_inlined():
    rec = FUNCS.split(".visible")[0] + """
.visible .entry rec(.param .u64 o)
{
    .param .b32 p;
    st.param.b32 [p], 0;
    call loop, (p);
    ret;
}
"""
    with pytest.raises(PTXError, match="recursion"):
        PTXModule(rec)
    k = PTXModule(FUNCS).kernel("calls")
    mem = Memory()
    po = buf(mem, np.zeros(16, np.int32))
    k.launch(mem, [po], (1, 1, 1), (16, 1, 1))
    v = np.arange(16) - 4
    ref = np.where(v < 0, v + 2, v * 2)
    ref[5] = 1000  # its call was predicated off
    np.testing.assert_array_equal(rd(mem, po, np.int32, 16), ref)


# ----------------------------------------------------------------------------- what the mock GPU feeds a launch
SPECIALS = HDR + r"""
.visible .entry dims(.param .u64 out) {
    .reg .b32 %r<8>; .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %ntid.x; mov.u32 %r2, %nctaid.x; mov.u32 %r3, %dynamic_smem_size; mov.u32 %r4, %total_smem_size;
    st.global.v4.u32 [%rd1], {%r1, %r2, %r3, %r4};
    ret;
}
.visible .entry gen(.param .u64 out) {
    .shared .align 4 .b32 sm[32];
    .local .align 4 .b32 lc[4];
    .reg .b32 %r<8>; .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [out];
    mov.u64 %rd2, sm; cvta.shared.u64 %rd3, %rd2; mov.u64 %rd4, lc; cvta.local.u64 %rd5, %rd4;
    mov.u32 %r1, 7; st.u32 [%rd3], %r1; mov.u32 %r2, 9; st.u32 [%rd5], %r2;
    ld.shared.u32 %r3, [sm]; ld.local.u32 %r4, [lc];
    st.global.v2.u32 [%rd1], {%r3, %r4}; st.global.v2.u64 [%rd1+8], {%rd3, %rd5};
    ret;
}
"""


def test_specials_come_from_the_caller():
    """%ntid/%nctaid/%dynamic_smem_size/%total_smem_size as the mock GPU read them from constant bank 0."""
    mod = PTXModule(SPECIALS)
    mem = Memory()
    out = mem.alloc(16)
    mod.kernel("dims").launch(mem, [out], (3, 1, 1), (32, 1, 1))
    assert rd(mem, out, np.uint32, 2).tolist() == [32, 3]
    mod.kernel("dims").launch(mem, [out], (3, 1, 1), (32, 1, 1), specials={"ntid": (0, 0, 0), "nctaid": (0, 0, 0),
                                                                          "dynamic_smem_size": 5, "total_smem_size": 6})
    assert rd(mem, out, np.uint32, 4).tolist() == [0, 0, 5, 6]


def test_windows_place_generic_shared_and_local():
    """Generic addresses reach shared/local memory through the apertures; cvta converts with its own bases, and a
    pointer converted with a base outside the aperture goes to global memory (a fault when nothing is mapped there)."""
    from baregrad.drivers.mock.ptx import Windows
    mod = PTXModule(SPECIALS)
    mem = Memory()
    out = mem.alloc(32)
    w = Windows(shared=0x7294_0000_0000, local=0x7293_0000_0000, size=1 << 24)
    mod.kernel("gen").launch(mem, [out], (1, 1, 1), (1, 1, 1), windows=w)
    assert rd(mem, out, np.uint32, 2).tolist() == [7, 9]
    assert rd(mem, out + 8, np.uint64, 2).tolist() == [0x7294_0000_0000, 0x7293_0000_0000]
    bad = Windows(shared=0x7294_0000_0000, local=0x7293_0000_0000, size=1 << 24, cvta_local=0)   # a zeroed cbank slot
    with pytest.raises(GPUFault, match="not mapped"):
        mod.kernel("gen").launch(mem, [out], (1, 1, 1), (1, 1, 1), windows=bad)


def test_launch_steps_interleave_and_record():
    """launch_steps yields before every instruction, so two grids can run interleaved; Memory.recorder collects the
    regions each one reads and writes."""
    src = HDR + r"""
.visible .entry inc(.param .u64 a) {
    .reg .b32 %r<4>; .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [a]; ld.global.u32 %r1, [%rd1]; add.u32 %r1, %r1, 1; st.global.u32 [%rd1], %r1;
    ret;
}
"""
    k = PTXModule(src).kernel("inc")
    mem = Memory()
    a = buf(mem, np.zeros(1, np.uint32))
    g1, g2 = k.launch_steps(mem, [a], (1, 1, 1), (1, 1, 1)), k.launch_steps(mem, [a], (1, 1, 1), (1, 1, 1))
    r1, r2 = set(), set()
    live = [(g1, r1), (g2, r2)]
    while live:
        for item in list(live):
            mem.recorder = item[1]
            try: next(item[0])
            except StopIteration: live.remove(item)
    mem.recorder = None
    assert rd(mem, a, np.uint32, 1)[0] == 1          # both read 0 before either stored: one update lost
    assert r1 == r2 == {(a, "r"), (a, "w")}
