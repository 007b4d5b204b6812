"""The PTX interpreter's warp-level matrix and asynchronous-copy instructions against NumPy, on hand-written PTX.

Fragments are packed here from the PTX ISA's own formulas (9.7.14.5.7 mma.m16n8k8, 9.7.14.5.8 mma.m16n8k16 with
floating point type; groupID = laneid >> 2, threadID_in_group = laneid % 4), written out independently of the
interpreter (drivers/mock/ptx/matrix.py) and of the code generator (codegen/tc.py), so a layout wrong in either fails
here. Every kernel also assembles with ptxas for sm_80, sm_89 and sm_90 where ptxas is installed."""
from __future__ import annotations
import numpy as np
import pytest
from baregrad.drivers.mock.ptx import PTXModule, Memory, PTXError, GPUFault
from baregrad.drivers.nv_compile import find_ptxas

HDR = ".version 8.0\n.target sm_80\n.address_size 64\n"

def _ptxas(src: str) -> None:
  if find_ptxas() is None: return
  from baregrad.drivers.nv_compile import PTXCompiler
  for arch in ("sm_80", "sm_89", "sm_90"): PTXCompiler(arch).compile(src)

def mma_kernel(shape: str, types: str, na: int, nb: int, nc: int, nd: int) -> str:
  """Each lane loads its A, B, C registers from in[lane][...] (32-bit words), runs one mma, stores D to out[lane][...]."""
  nin = na + nb + nc
  loads = "\n".join(f"  ld.global.b32 %r{10 + j}, [%rd5+{4 * j}];" for j in range(nin))
  a = ", ".join(f"%r{10 + j}" for j in range(na))
  b = ", ".join(f"%r{10 + na + j}" for j in range(nb))
  c = ", ".join(f"%r{10 + na + nb + j}" for j in range(nc))
  d = ", ".join(f"%r{50 + j}" for j in range(nd))
  stores = "\n".join(f"  st.global.b32 [%rd7+{4 * j}], %r{50 + j};" for j in range(nd))
  return HDR + f""".visible .entry mma_test(.param .u64 inp, .param .u64 out) {{
  .reg .b32 %r<64>; .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [inp]; ld.param.u64 %rd2, [out];
  cvta.to.global.u64 %rd1, %rd1; cvta.to.global.u64 %rd2, %rd2;
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd4, %r1, {4 * nin}; add.s64 %rd5, %rd1, %rd4;
  mul.wide.u32 %rd6, %r1, {4 * nd}; add.s64 %rd7, %rd2, %rd6;
{loads}
  mma.sync.aligned.{shape}.row.col.{types} {{{d}}}, {{{a}}}, {{{b}}}, {{{c}}};
{stores}
  ret;
}}
"""

def run(src: str, name: str, inp: np.ndarray, nout_bytes: int, block=(32, 1, 1)) -> np.ndarray:
  mem = Memory()
  a = mem.alloc(max(inp.nbytes, 4)); mem.write(a, inp)
  o = mem.alloc(nout_bytes)
  PTXModule(src).kernel(name).launch(mem, [a, o], (1, 1, 1), block)
  return mem.read(o, np.uint8, nout_bytes)

# (row, col) of fragment element i for lane (g, t), per the PTX ISA
def a16(i, g, t): return (g + 8 * (i in (2, 3, 6, 7)), t * 2 + (i & 1) + 8 * (i >= 4))
def b16(i, g, t): return (t * 2 + (i & 1) + 8 * (i >= 2), g)
def c16(i, g, t): return (g + 8 * (i >= 2), t * 2 + (i & 1))
def a8_tf32(i, g, t): return (g + 8 * (i in (1, 3)), t + 4 * (i >= 2))
def b8_tf32(i, g, t): return (t + 4 * i, g)
def a8_16(i, g, t): return (g + 8 * (i >= 2), t * 2 + (i & 1))
def b8_16(i, g, t): return (t * 2 + (i & 1), g)

def bf16_bits(x: np.ndarray) -> np.ndarray: return (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16)  # values chosen exact
def bits16(x: np.ndarray, kind: str) -> np.ndarray: return bf16_bits(x) if kind == "bf16" else np.asarray(x, np.float16).view(np.uint16)

def pack(mat: np.ndarray, frag, n: int, kind: str) -> np.ndarray:
  """Per lane, the fragment's 32-bit registers: pairs of 16-bit elements (lower index in the low half) or one 32-bit."""
  out = np.zeros((32, n // (2 if kind in ("f16", "bf16") else 1)), np.uint32)
  for lane in range(32):
    g, t = lane >> 2, lane & 3
    vals = [mat[frag(i, g, t)] for i in range(n)]
    if kind in ("f16", "bf16"):
      h = bits16(np.array(vals, np.float32), kind).astype(np.uint32)
      out[lane] = h[0::2] | (h[1::2] << 16)
    else: out[lane] = np.array(vals, np.float32).view(np.uint32)
  return out

def unpack(words: np.ndarray, frag, n: int, shape: tuple[int, int], f16: bool = False) -> np.ndarray:
  mat = np.full(shape, np.nan, np.float32)
  for lane in range(32):
    g, t = lane >> 2, lane & 3
    vals = words[lane].view(np.float16).astype(np.float32) if f16 else words[lane].view(np.float32)
    for i in range(n): mat[frag(i, g, t)] = vals[i]
  return mat

@pytest.mark.parametrize("kind", ["f16", "bf16"])
def test_mma_m16n8k16(kind):
  rng = np.random.default_rng(0)
  # small integers and halves: exact in 16 bits, the products and sums exact in float32
  A = rng.integers(-8, 8, (16, 16)).astype(np.float32) / 2
  B = rng.integers(-8, 8, (16, 8)).astype(np.float32) / 4
  C = rng.integers(-50, 50, (16, 8)).astype(np.float32)
  words = np.concatenate([pack(A, a16, 8, kind), pack(B, b16, 4, kind), pack(C, c16, 4, "f32")], 1)
  src = mma_kernel("m16n8k16", f"f32.{kind}.{kind}.f32", 4, 2, 4, 4)
  out = run(src, "mma_test", words, 32 * 16).view(np.uint32).reshape(32, 4)
  np.testing.assert_array_equal(unpack(out, c16, 4, (16, 8)), A @ B + C)
  _ptxas(src)

def test_mma_m16n8k16_f16_accumulator():
  rng = np.random.default_rng(1)
  A = rng.integers(-4, 4, (16, 16)).astype(np.float32)
  B = rng.integers(-4, 4, (16, 8)).astype(np.float32)
  C = rng.integers(-9, 9, (16, 8)).astype(np.float32)
  words = np.concatenate([pack(A, a16, 8, "f16"), pack(B, b16, 4, "f16"), pack(C, c16, 4, "f16")], 1)
  src = mma_kernel("m16n8k16", "f16.f16.f16.f16", 4, 2, 2, 2)
  out = run(src, "mma_test", words, 32 * 8).view(np.uint32).reshape(32, 2)
  np.testing.assert_array_equal(unpack(out, c16, 4, (16, 8), f16=True), A @ B + C)
  _ptxas(src)

def test_mma_m16n8k8_tf32_and_f16():
  rng = np.random.default_rng(2)
  A = rng.standard_normal((16, 8)).astype(np.float32)
  B = rng.standard_normal((8, 8)).astype(np.float32)
  C = rng.standard_normal((16, 8)).astype(np.float32)
  words = np.concatenate([pack(A, a8_tf32, 4, "f32"), pack(B, b8_tf32, 2, "f32"), pack(C, c16, 4, "f32")], 1)
  src = mma_kernel("m16n8k8", "f32.tf32.tf32.f32", 4, 2, 4, 4)
  got = unpack(run(src, "mma_test", words, 32 * 16).view(np.uint32).reshape(32, 4), c16, 4, (16, 8))
  tf = lambda x: (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)   # the hardware reads 19 bits
  np.testing.assert_allclose(got, tf(A) @ tf(B) + C, rtol=1e-6, atol=1e-6)
  assert np.abs(got - (A.astype(np.float64) @ B + C)).max() > 1e-6   # tf32 inputs are not float32
  _ptxas(src)
  A2, B2 = A.round(), B.round()
  words = np.concatenate([pack(A2, a8_16, 4, "f16"), pack(B2, b8_16, 2, "f16"), pack(C, c16, 4, "f32")], 1)
  src = mma_kernel("m16n8k8", "f32.f16.f16.f32", 2, 1, 4, 4)
  got = unpack(run(src, "mma_test", words, 32 * 16).view(np.uint32).reshape(32, 4), c16, 4, (16, 8))
  np.testing.assert_allclose(got, A2 @ B2 + C, rtol=1e-6)
  _ptxas(src)

def test_mma_needs_whole_warps():
  src = mma_kernel("m16n8k16", "f32.f16.f16.f32", 4, 2, 4, 4)
  with pytest.raises(PTXError, match="not whole warps"):
    run(src, "mma_test", np.zeros((48, 10), np.uint32), 48 * 16, block=(48, 1, 1))
  with pytest.raises(PTXError, match="mma.m16n8k16 with .tf32"):
    PTXModule(mma_kernel("m16n8k16", "f32.tf32.tf32.f32", 4, 2, 4, 4))

LDM = HDR + """.visible .entry ldm(.param .u64 inp, .param .u64 out) {
  .shared .align 16 .b8 sm[512];
  .reg .b32 %r<20>; .reg .b64 %rd<10>;
  ld.param.u64 %rd1, [inp]; ld.param.u64 %rd2, [out];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd3, %r1, 16; add.s64 %rd4, %rd1, %rd3;
  ld.global.v4.b32 {%r2, %r3, %r4, %r5}, [%rd4];
  mov.u32 %r6, sm; mul.lo.u32 %r7, %r1, 16; add.u32 %r8, %r6, %r7;
  st.shared.v4.b32 [%r8], {%r2, %r3, %r4, %r5};
  bar.sync 0;
  ldmatrix.sync.aligned.m8n8.XN.shared.b16 {REGS}, [%r8];
  mul.wide.u32 %rd5, %r1, 16; add.s64 %rd6, %rd2, %rd5;
  st.global.v4.b32 [%rd6], {%r10, %r11, %r12, %r13};
  ret;
}
"""

@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix(num, trans):
  # 32 rows of 8 halves in shared memory; lane l gives the address of row l (only lanes < 8*num are used)
  src = LDM.replace("XN", f"x{num}" + (".trans" if trans else "")).replace("REGS", ", ".join(f"%r{10 + j}" for j in range(num)))
  x = np.arange(256, dtype=np.uint16) * 3
  got = run(src, "ldm", x, 512).view(np.uint32).reshape(32, 4)
  M = x.reshape(4, 8, 8)
  for lane in range(32):
    for j in range(num):
      r, c = (2 * (lane % 4), lane // 4) if trans else (lane // 4, 2 * (lane % 4))
      lo, hi = (M[j, r, c], M[j, r + 1, c]) if trans else (M[j, r, c], M[j, r, c + 1])
      assert got[lane, j] == int(lo) | int(hi) << 16, (lane, j)
  _ptxas(src)

def test_ldmatrix_misaligned_row_faults():
  src = LDM.replace("XN", "x1").replace("REGS", "%r10").replace("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r10}, [%r8];",
                                                                "add.u32 %r9, %r8, 2; ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r10}, [%r9];")
  with pytest.raises(GPUFault, match="16-byte aligned"): run(src, "ldm", np.zeros(256, np.uint16), 512)

CPA = HDR + """.visible .entry cpa(.param .u64 inp, .param .u64 out) {
  .shared .align 16 .b8 sm[1024];
  .reg .b32 %r<20>; .reg .b64 %rd<12>; .reg .pred %p<3>;
  ld.param.u64 %rd1, [inp]; ld.param.u64 %rd2, [out];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd3, %r1, 16; add.s64 %rd4, %rd1, %rd3;
  mov.u32 %r6, sm; mul.lo.u32 %r7, %r1, 16; add.u32 %r8, %r6, %r7;
  setp.lt.u32 %p1, %r1, 24;
  selp.b32 %r9, 16, 0, %p1;           // threads 24..31 copy nothing: their 16 bytes are zero-filled
  cp.async.cg.shared.global [%r8], [%rd4], 16, %r9;
  cp.async.commit_group;
  add.u32 %r10, %r8, 512; add.s64 %rd5, %rd4, 512;
  cp.async.ca.shared.global [%r10], [%rd5], 8;
  cp.async.commit_group;
  ld.shared.v4.b32 {%r11, %r12, %r13, %r14}, [%r8];    // before any wait: the copy may not have landed
  mul.wide.u32 %rd6, %r1, 48; add.s64 %rd7, %rd2, %rd6;
  st.global.v4.b32 [%rd7], {%r11, %r12, %r13, %r14};
  cp.async.wait_group 1;                              // the first group is complete, the second may not be
  bar.sync 0;
  ld.shared.v4.b32 {%r11, %r12, %r13, %r14}, [%r8];
  st.global.v4.b32 [%rd7+16], {%r11, %r12, %r13, %r14};
  WAIT
  bar.sync 0;
  ld.shared.v4.b32 {%r11, %r12, %r13, %r14}, [%r10];
  st.global.v4.b32 [%rd7+32], {%r11, %r12, %r13, %r14};
  ret;
}
"""

@pytest.mark.parametrize("wait", ["cp.async.wait_group 0;", "cp.async.wait_all;"])
def test_cp_async_groups_and_zero_fill(wait):
  src = CPA.replace("WAIT", wait)
  x = (np.arange(1024, dtype=np.uint32) + 1).view(np.uint8)[:1024].copy()
  out = run(src, "cpa", np.frombuffer(x, np.uint32).copy(), 32 * 48).view(np.uint32).reshape(32, 12)
  words = np.frombuffer(x, np.uint32).reshape(-1, 4)
  assert (out[:, 0:4] == 0).all()                                    # read before waiting: the copies landed later
  np.testing.assert_array_equal(out[:24, 4:8], words[:24])          # after wait_group 1: the first group
  assert (out[24:, 4:8] == 0).all()                                  # src-size 0: zero-filled
  second = words[32:64][:, :2]                                       # 8 bytes from 512 bytes further on
  np.testing.assert_array_equal(out[:, 8:10], second)
  assert (out[:, 10:12] == 0).all()
  _ptxas(src)

def test_cp_async_misaligned_and_sizes():
  bad = CPA.replace("WAIT", "").replace("cp.async.ca.shared.global [%r10], [%rd5], 8;", "cp.async.ca.shared.global [%r10], [%rd5], 12;")
  with pytest.raises(PTXError, match="4, 8 or 16 bytes"): PTXModule(bad)
  mis = CPA.replace("WAIT", "").replace("add.s64 %rd5, %rd4, 512;", "add.s64 %rd5, %rd4, 516;")
  with pytest.raises(GPUFault, match="misaligned cp.async global source"): run(mis, "cpa", np.zeros(1024, np.uint32), 32 * 48)

def test_cvt_rna_tf32():
  src = HDR + """.visible .entry tf(.param .u64 inp, .param .u64 out) {
  .reg .b32 %r<4>; .reg .f32 %f<2>; .reg .b64 %rd<6>;
  ld.param.u64 %rd1, [inp]; ld.param.u64 %rd2, [out];
  mov.u32 %r1, %tid.x; mul.wide.u32 %rd3, %r1, 4; add.s64 %rd4, %rd1, %rd3; add.s64 %rd5, %rd2, %rd3;
  ld.global.f32 %f1, [%rd4];
  cvt.rna.tf32.f32 %r2, %f1;
  st.global.b32 [%rd5], %r2;
  ret;
}
"""
  # 1 + 2^-11 lies halfway between tf32 neighbours: ties go away from zero; 1 + 2^-12 rounds down; inf and NaN stay
  x = np.array([1 + 2 ** -11, -(1 + 2 ** -11), 1 + 2 ** -12, 1 + 3 * 2 ** -11, np.inf, np.nan, 3.0, -0.0], np.float32)
  got = run(src, "tf", x, x.nbytes, block=(x.size, 1, 1)).view(np.float32)
  want = np.array([1 + 2 ** -10, -(1 + 2 ** -10), 1.0, 1 + 2 * 2 ** -10, np.inf, np.nan, 3.0, -0.0], np.float32)
  np.testing.assert_array_equal(got, want)
  assert (got.view(np.uint32)[:4] & 0x1FFF == 0).all()
  _ptxas(src)

CP3 = HDR + """.visible .entry cp3(.param .u64 inp, .param .u64 out) {
  .shared .align 16 .b8 sm[1536];
  .reg .b32 %r<24>; .reg .b64 %rd<12>;
  ld.param.u64 %rd1, [inp]; ld.param.u64 %rd2, [out];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd3, %r1, 16; add.s64 %rd4, %rd1, %rd3;
  mov.u32 %r6, sm; mul.lo.u32 %r7, %r1, 16; add.u32 %r8, %r6, %r7;
  mul.wide.u32 %rd6, %r1, 48; add.s64 %rd7, %rd2, %rd6;
  cp.async.cg.shared.global [%r8], [%rd4], 16;            // a 3-stage pipeline's prologue: three groups in flight
  cp.async.commit_group;
  cp.async.cg.shared.global [%r8+512], [%rd4+512], 16;
  cp.async.commit_group;
  cp.async.cg.shared.global [%r8+1024], [%rd4+1024], 16;
  cp.async.commit_group;
  cp.async.wait_group 2;                                  // the oldest group is complete, the two newer may not be
  bar.sync 0;
  ld.shared.v4.b32 {%r11, %r12, %r13, %r14}, [%r8];
  ld.shared.b32 %r15, [%r8+512];
  st.global.v4.b32 [%rd7], {%r11, %r12, %r13, %r14};
  st.global.b32 [%rd7+16], %r15;
  cp.async.wait_group 1;
  bar.sync 0;
  ld.shared.v4.b32 {%r11, %r12, %r13, %r14}, [%r8+512];
  ld.shared.b32 %r15, [%r8+1024];
  st.global.v4.b32 [%rd7+20], {%r11, %r12, %r13, %r14};
  st.global.b32 [%rd7+36], %r15;
  ret;
}
"""

def test_cp_async_wait_group_counts_the_newest_groups():
  """cp.async.wait_group N (PTX ISA 9.7.9.25.3.3): waits until at most the N most recent committed groups are pending,
  so with three groups in flight wait_group 2 completes the first only, wait_group 1 the second."""
  x = np.arange(1, 32 * 12 + 1, dtype=np.uint32)
  out = run(CP3, "cp3", x, 32 * 48).view(np.uint32).reshape(32, 12)
  words = x.reshape(-1, 4)
  np.testing.assert_array_equal(out[:, 0:4], words[:32])           # group 0 after wait_group 2
  assert (out[:, 4] == 0).all()                                     # group 1 not yet
  np.testing.assert_array_equal(out[:, 5:9], words[32:64])         # group 1 after wait_group 1
  assert (out[:, 9] == 0).all()                                     # group 2 not yet
  _ptxas(CP3)

LDB = HDR + """.visible .entry ldb(.param .u64 inp, .param .u64 out) {
  .shared .align 16 .b8 sm[2048];
  .reg .b32 %r<20>; .reg .b64 %rd<8>;
  ld.param.u64 %rd2, [out];
  mov.u32 %r1, %tid.x; and.b32 %r2, %r1, 7;
  mov.u32 %r6, sm; mul.lo.u32 %r7, %r2, 256; add.u32 %r8, %r6, %r7;   // row r at r * 256 bytes
  SWZ
  ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r10}, [%r8];
  mul.wide.u32 %rd3, %r1, 4; add.s64 %rd4, %rd2, %rd3;
  st.global.b32 [%rd4], %r10;
  ret;
}
"""

@pytest.mark.parametrize("swz,want", [("", 8), ("mul.lo.u32 %r9, %r2, 16; add.u32 %r8, %r8, %r9;", 1)], ids=["rows-256B-apart", "xor-swizzled"])
def test_bank_wavefronts_of_ldmatrix(swz, want):
  """The bank model (matrix.py, CUDA C++ Programming Guide "Shared Memory": 32 banks of 4-byte words): 8 rows 256 bytes
  apart all start in bank 0 (8 wavefronts); each row moved to its own 16-byte chunk (the swizzle) needs one."""
  from baregrad.drivers.mock.ptx.kernel import PTXKernel
  seen: list[tuple[int, int]] = []
  k = PTXModule(LDB.replace("SWZ", swz)).kernel("ldb")
  k.bank_conflicts = lambda line, text, wf, ideal: seen.append((wf, ideal))
  mem = Memory()
  a, o = mem.alloc(4), mem.alloc(128)
  k.launch(mem, [a, o], (1, 1, 1), (32, 1, 1))
  assert seen == [(want, 1)] and PTXKernel.bank_conflicts is None


STM = """.version 8.0\n.target sm_90\n.address_size 64\n.visible .entry stm(.param .u64 inp, .param .u64 out) {
  .shared .align 16 .b8 sm[512];
  .reg .b32 %r<20>; .reg .b64 %rd<10>;
  ld.param.u64 %rd1, [inp]; ld.param.u64 %rd2, [out];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd3, %r1, 16; add.s64 %rd4, %rd1, %rd3;
  ld.global.v4.b32 {%r10, %r11, %r12, %r13}, [%rd4];
  mov.u32 %r6, sm; mul.lo.u32 %r7, %r1, 16; add.u32 %r8, %r6, %r7;
  stmatrix.sync.aligned.m8n8.XN.shared.b16 [%r8], {REGS};
  bar.sync 0;
  ld.shared.v4.b32 {%r2, %r3, %r4, %r5}, [%r8];
  mul.wide.u32 %rd5, %r1, 16; add.s64 %rd6, %rd2, %rd5;
  st.global.v4.b32 [%rd6], {%r2, %r3, %r4, %r5};
  ret;
}
"""

@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_stmatrix(num, trans):
  """Thread 8j + r gives the address of row r of matrix j (16 bytes at sm + 16 (8j + r)); lane l's register j holds
  (row l/4, columns 2(l%4), +1) of matrix j (.trans: rows 2(l%4), +1 of column l/4), lower column in the low half."""
  rng = np.random.default_rng(num + 3 * trans)
  regs = rng.integers(0, 1 << 32, (32, 4), dtype=np.uint64).astype(np.uint32)
  src = STM.replace("XN", f"x{num}{'.trans' if trans else ''}").replace("REGS", ", ".join(f"%r{10 + j}" for j in range(num)))
  got = run(src, "stm", regs, 32 * 16).view(np.uint16).reshape(32, 8)
  want = np.zeros((32, 8), np.uint16)
  for j in range(num):
    for lane in range(32):
      lo, hi = regs[lane, j] & 0xFFFF, regs[lane, j] >> 16
      if trans: (r0, c0), (r1, c1) = (2 * (lane % 4), lane // 4), (2 * (lane % 4) + 1, lane // 4)
      else: (r0, c0), (r1, c1) = (lane // 4, 2 * (lane % 4)), (lane // 4, 2 * (lane % 4) + 1)
      want[8 * j + r0, c0], want[8 * j + r1, c1] = lo, hi
  np.testing.assert_array_equal(got[:8 * num], want[:8 * num])
  if find_ptxas() is not None:
    from baregrad.drivers.nv_compile import PTXCompiler
    PTXCompiler("sm_90").compile(src)
