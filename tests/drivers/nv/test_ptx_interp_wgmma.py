"""The PTX interpreter's sm_90a wgmma (drivers/mock/ptx/wgmma.py) against NumPy, on hand-written PTX.

Shared-memory images are laid out here from the PTX ISA's canonical layouts (9.7.15.5.1.2: core matrices of 8 rows of
16 bytes; K-major without swizzle, LBO between the two 8-element halves of K and SBO between 8-row groups; with a W-byte
swizzle rows W bytes apart and bits [4, 7) of the address XORed with bits [7, 10) (128B; fewer for 64B/32B); MN-major
the transpose), element by element in plain Python, and the D fragments read back by the ISA's formula (9.7.15.5.1.1),
independently of the interpreter. Every kernel also assembles with ptxas for sm_90a where ptxas is installed."""
from __future__ import annotations
import re
import numpy as np
import pytest
from baregrad.drivers.mock.ptx import PTXModule, Memory, PTXError, GPUFault
from baregrad.drivers.nv_compile import find_ptxas

HDR = ".version 8.0\n.target sm_90a\n.address_size 64\n"
SWZ = {0: 0, 128: 1, 64: 2, 32: 3}   # swizzle width -> descriptor bits 62-63


def _ptxas(src: str) -> None:
  if find_ptxas() is None: return
  from baregrad.drivers.nv_compile import PTXCompiler
  PTXCompiler("sm_90a").compile(src)


def desc_bits(lbo: int, sbo: int, swz: int) -> int:
  """The descriptor without its start address (added in the kernel): LBO, SBO >> 4 and the swizzle code."""
  return ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (SWZ[swz] << 62)


def place(img: np.ndarray, base: int, mat: np.ndarray, swz: int, trans: bool, lbo: int, sbo: int) -> None:
  """Write a (rows, 16) matrix of 16-bit words into the byte image at `base` in the canonical layout."""
  rows = mat.shape[0]
  for r in range(rows):
    for k in range(16):
      if not trans and swz == 0: off = (r // 8) * sbo + (r % 8) * 16 + (k // 8) * lbo + (k % 8) * 2
      elif not trans: off = (r // 8) * sbo + (r % 8) * swz + k * 2
      elif swz == 0: off = (k // 8) * lbo + (k % 8) * 16 + (r // 8) * sbo + (r % 8) * 2
      else:
        per = swz // 2   # 16-bit elements along MN in one swizzle row
        off = (r // per) * lbo + (r % per) * 2 + (k % 8) * swz + (k // 8) * sbo
      a = base + off
      if swz: a ^= ((a >> 7) & (swz // 16 - 1)) << 4
      img[a:a + 2] = np.frombuffer(np.uint16(mat[r, k]).tobytes(), np.uint8)


def bits(x: np.ndarray, kind: str) -> np.ndarray:
  x = np.asarray(x, np.float32)
  return (x.view(np.uint32) >> 16).astype(np.uint16) if kind == "bf16" else x.astype(np.float16).view(np.uint16)


def d_unpack(words: np.ndarray, n: int, f16: bool = False) -> np.ndarray:
  """(128, registers) of D words -> the 64 x N matrix, per the ISA's D fragment (9.7.15.5.1.1)."""
  out = np.full((64, n), np.nan, np.float32)
  for q in range(128):
    w, lane = divmod(q, 32)
    g, t = lane >> 2, lane & 3
    vals = words[q].view(np.float16).astype(np.float32) if f16 else words[q].view(np.float32)
    for i, v in enumerate(vals):
      j, e = divmod(i, 4)
      out[16 * w + g + 8 * (e >> 1), 8 * j + 2 * t + (e & 1)] = v
  return out


def kernel(n: int, kind: str, nbytes: int, descs: list[tuple[int, int]], dt: str = "f32", trans=(0, 0), a_regs=False,
           fence=True, proxy_fence=True, block=128, extra="") -> str:
  """Copy `nbytes` from inp into shared memory, then one wgmma.mma_async per (A offset, B offset) pair of `descs` (the
  first with scale-d 0), commit, wait, and store D (thread q's registers at out[q])."""
  nd = n // 2 if dt == "f32" else n // 4
  words = nbytes // 4
  per = -(-words // block)
  guards = "\n".join(f"  setp.lt.u32 %p2, %r5, {words - block * i};\n  @%p2 ld.global.b32 %r10, [%rd5+{4 * block * i}];\n"
                     f"  @%p2 st.shared.b32 [%r6+{4 * block * i}], %r10;" for i in range(per))
  dregs = ", ".join(f"%f{j}" for j in range(nd)) if dt == "f32" else ", ".join(f"%r{100 + j}" for j in range(nd))
  mmas = []
  for s, (ao, bo) in enumerate(descs):
    a = "{%r20, %r21, %r22, %r23}" if a_regs else f"%rd{20 + 2 * s}"
    imms = f"1, 1, {trans[1]}" if a_regs else f"1, 1, {trans[0]}, {trans[1]}"
    mmas.append(f"  wgmma.mma_async.sync.aligned.m64n{n}k16.{dt}.{kind}.{kind} {{{dregs}}}, {a}, %rd{21 + 2 * s}, "
                f"{'0' if s == 0 else '%p1'}, {imms};")
  mk = "\n".join(f"  add.u64 %rd{20 + 2 * s}, %rd9, {(ao >> 4) | 0};\n  or.b64 %rd{20 + 2 * s}, %rd{20 + 2 * s}, %rd18;\n"
                 f"  add.u64 %rd{21 + 2 * s}, %rd9, {(bo >> 4) | 0};\n  or.b64 %rd{21 + 2 * s}, %rd{21 + 2 * s}, %rd19;"
                 for s, (ao, bo) in enumerate(descs))
  store = "\n".join(f"  st.global.b32 [%rd7+{4 * j}], {'%f' if dt == 'f32' else '%r'}{j if dt == 'f32' else 100 + j};"
                    for j in range(nd))
  areg = ""
  if a_regs:   # A fragment words after the shared image: 4 per thread
    areg = "\n".join(f"  ld.global.b32 %r{20 + j}, [%rd15+{4 * j}];" for j in range(4))
  return HDR + f""".visible .entry wg(.param .u64 inp, .param .u64 out, .param .u64 ad, .param .u64 bd, .param .u64 af) {{
  .shared .align 1024 .b8 sm[{nbytes}];
  .reg .b32 %r<200>; .reg .b64 %rd<64>; .reg .f32 %f<130>; .reg .pred %p<4>;
  ld.param.u64 %rd1, [inp]; ld.param.u64 %rd2, [out]; ld.param.u64 %rd18, [ad]; ld.param.u64 %rd19, [bd];
  ld.param.u64 %rd14, [af];
  cvta.to.global.u64 %rd1, %rd1; cvta.to.global.u64 %rd2, %rd2; cvta.to.global.u64 %rd14, %rd14;
  mov.u32 %r5, %tid.x;
  mul.wide.u32 %rd4, %r5, 4; add.s64 %rd5, %rd1, %rd4;
  mov.u32 %r1, sm; shl.b32 %r2, %r5, 2; add.u32 %r6, %r1, %r2;
{guards}
  mul.wide.u32 %rd16, %r5, 16; add.s64 %rd15, %rd14, %rd16;
{areg}
  setp.ne.u32 %p1, %r1, 0xFFFFFFFF;
  bar.sync 0;
{"  fence.proxy.async.shared::cta;" if proxy_fence else ""}
  cvt.u64.u32 %rd8, %r1; shr.u64 %rd9, %rd8, 4;
{mk}
{extra}
{"  wgmma.fence.sync.aligned;" if fence else ""}
{chr(10).join(mmas)}
  wgmma.commit_group.sync.aligned;
  wgmma.wait_group.sync.aligned 0;
  mul.wide.u32 %rd6, %r5, {4 * nd}; add.s64 %rd7, %rd2, %rd6;
{store}
  ret;
}}
"""


def run(src: str, img: np.ndarray, nout: int, ad: int, bd: int, afrag: np.ndarray | None = None, block=128) -> np.ndarray:
  mem = Memory()
  i = mem.alloc(img.nbytes); mem.write(i, img)
  o = mem.alloc(nout * 4 * block)
  af = mem.alloc(128 * 16)
  if afrag is not None: mem.write(af, afrag)
  PTXModule(src).kernel("wg").launch(mem, [i, o, ad, bd, af], (1, 1, 1), (block, 1, 1))
  return mem.read(o, np.uint32, nout * block).reshape(block, nout)


def operands(rng, n: int, ksteps: int = 1):
  A = rng.integers(-8, 8, (64, 16 * ksteps)).astype(np.float32) / 2   # exact in 16 bits and in float32 sums
  B = rng.integers(-8, 8, (16 * ksteps, n)).astype(np.float32) / 4
  return A, B


@pytest.mark.parametrize("kind", ["f16", "bf16"])
@pytest.mark.parametrize("swz", [0, 32, 64, 128])
@pytest.mark.parametrize("trans", [False, True])
def test_wgmma_descriptors(kind, swz, trans):
  """m64n32k16 twice (K = 32, the second k-step through advanced start addresses) from both operands in shared memory,
  every swizzle, K-major and MN-major, against A @ B."""
  n, rng = 32, np.random.default_rng(swz + trans)
  A, B = operands(rng, n, 2)
  if not trans:   # K-major: LBO (no swizzle) between K halves; SBO between 8-row groups
    lbo, sbo = (128, 256) if swz == 0 else (16, 8 * swz)
  else:           # MN-major: no swizzle: LBO between K halves, SBO between 8-row groups; swizzled: LBO between swizzle
    lbo, sbo = (1024 if swz == 0 else 8 * swz * 2, 128 if swz == 0 else 8 * swz)   # rows along MN, SBO between K halves
  abytes = 8192   # A under a 128B swizzle, K-major: 8 groups of 8 rows x 128 bytes
  img = np.zeros(abytes * 2 + 8192 * 2, np.uint8)
  steps = []
  for s in range(2):
    ao, bo = s * abytes, 2 * abytes + s * 8192
    place(img, ao, bits(A[:, 16 * s:16 * s + 16], kind), swz, trans, lbo, sbo)
    place(img, bo, bits(B[16 * s:16 * s + 16].T, kind), swz, trans, lbo, sbo)
    steps.append((ao, bo))
  src = kernel(n, kind, img.nbytes, steps, trans=(int(trans), int(trans)))
  d = desc_bits(lbo, sbo, swz)
  got = d_unpack(run(src, img, n // 2, d, d), n)
  np.testing.assert_array_equal(got, A @ B)
  _ptxas(src)


def test_wgmma_f16_accumulator_and_large_n():
  """.f16 D (pairs packed per register) with N = 256, 128B swizzle."""
  n, rng = 256, np.random.default_rng(7)
  A = rng.integers(-3, 4, (64, 16)).astype(np.float32)
  B = rng.integers(-3, 4, (16, n)).astype(np.float32)
  img = np.zeros(1024 * 8 + 256 * 128, np.uint8)
  place(img, 0, bits(A, "f16"), 128, False, 16, 1024)
  place(img, 8192, bits(B.T, "f16"), 128, False, 16, 1024)
  src = kernel(n, "f16", img.nbytes, [(0, 8192)], dt="f16")
  d = desc_bits(16, 1024, 128)
  words = run(src, img, n // 4, d, d)
  out = np.full((64, n), np.nan, np.float32)
  for q in range(128):   # register 2j + h: (row g + 8h, columns 8j + 2t, +1)
    w, lane = divmod(q, 32)
    g, t = lane >> 2, lane & 3
    v = words[q].view(np.float16)
    for i in range(n // 4):
      j, h = divmod(i, 2)
      out[16 * w + g + 8 * h, 8 * j + 2 * t:8 * j + 2 * t + 2] = v[2 * i:2 * i + 2]
  np.testing.assert_array_equal(out, A @ B)
  _ptxas(src)


def test_wgmma_a_from_registers():
  """A as the m16n8k16 A fragment of each warp's 16 rows, in 4 registers; B from a 64B-swizzled descriptor."""
  n, rng = 64, np.random.default_rng(3)
  A, B = operands(rng, n)
  img = np.zeros(8192, np.uint8)
  place(img, 0, bits(B.T, "bf16"), 64, False, 16, 512)
  frag = np.zeros((128, 4), np.uint32)
  for q in range(128):
    w, lane = divmod(q, 32)
    g, t = lane >> 2, lane & 3
    for i in range(8):   # element i: row g + 8*((i >> 1) & 1), column 2t + (i & 1) + 8*(i >> 2)
      h = int(bits(A[16 * w + g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2)], "bf16"))
      frag[q, i // 2] |= h << (16 * (i & 1))
  d = desc_bits(16, 512, 64)
  src = kernel(n, "bf16", img.nbytes, [(0, 0)], a_regs=True)
  np.testing.assert_array_equal(d_unpack(run(src, img, n // 2, 0, d, frag), n), A @ B)
  _ptxas(src)


def _small():
  n = 8
  img = np.zeros(4096, np.uint8)
  return n, img, desc_bits(128, 256, 0)


def test_wgmma_missing_fence_is_reported():
  n, img, d = _small()
  with pytest.raises(PTXError, match=r"without a wgmma.fence.*9.7.15.6"):
    run(kernel(n, "f16", img.nbytes, [(0, 2048)], fence=False), img, n // 2, d, d)
  # a write of an accumulator between the fence and the wgmma needs another fence
  with pytest.raises(PTXError, match=r"without a wgmma.fence"):
    run(kernel(n, "f16", img.nbytes, [(0, 2048)], extra="  wgmma.fence.sync.aligned;\n  mov.f32 %f0, 0f00000000;",
               fence=False), img, n // 2, d, d)


def test_wgmma_missing_proxy_fence_is_reported():
  n, img, d = _small()
  with pytest.raises(PTXError, match=r"generic proxy.*fence.proxy.async"):
    run(kernel(n, "f16", img.nbytes, [(0, 2048)], proxy_fence=False), img, n // 2, d, d)


def test_wgmma_not_warpgroup_aligned_is_reported():
  n, img, d = _small()
  with pytest.raises(PTXError, match=r"incomplete warpgroup"):
    run(kernel(n, "f16", img.nbytes, [(0, 2048)], block=96), img, n // 2, d, d, block=96)
  # threads 0..63 of the warpgroup skip the wgmma: 64 of 128 execute it
  src = kernel(n, "f16", img.nbytes, [(0, 2048)]).replace("  wgmma.mma_async", "  @%p0 wgmma.mma_async").replace(
    "  bar.sync 0;", "  bar.sync 0;\n  setp.ge.u32 %p0, %r5, 64;")
  with pytest.raises(PTXError, match=r"64 of the 128 threads of a warpgroup"):
    run(src, img, n // 2, d, d)


def test_wgmma_wrong_descriptor_is_reported():
  n, img, d = _small()
  src = kernel(n, "f16", img.nbytes, [(0, 2048)])
  with pytest.raises(PTXError, match=r"reserved bits"):
    run(src, img, n // 2, d | (1 << 14), d)
  with pytest.raises(GPUFault, match=r"outside the \d+-byte shared window"):   # B starts past the shared allocation
    run(src, img, n // 2, d, d + (8192 >> 4))
  with pytest.raises(PTXError, match=r"differs between threads"):   # a per-thread start address
    run(src.replace("or.b64 %rd21, %rd21, %rd19;", "or.b64 %rd21, %rd21, %rd19;\n  add.u64 %rd21, %rd21, %rd16;"),
        img, n // 2, d, d)


def test_wgmma_read_before_wait_is_reported():
  n, img, d = _small()
  src = kernel(n, "f16", img.nbytes, [(0, 2048)]).replace("  wgmma.wait_group.sync.aligned 0;",
                                                          "  add.f32 %f100, %f1, %f1;\n  wgmma.wait_group.sync.aligned 0;")
  with pytest.raises(PTXError, match=r"reads %f1 while a wgmma.mma_async that writes it is pending"):
    run(src, img, n // 2, d, d)
  # wait_group 1 leaves the only group pending: the store after it reads a pending accumulator
  src = kernel(n, "f16", img.nbytes, [(0, 2048)]).replace("wait_group.sync.aligned 0", "wait_group.sync.aligned 1")
  with pytest.raises(PTXError, match=r"pending"):
    run(src, img, n // 2, d, d)


@pytest.mark.parametrize("swz", [64, 128])
def test_wgmma_k_steps_inside_swizzled_rows(swz):
  """K = 32 K-major in one W-byte swizzled tile (rows of 32 elements): the second k-step's descriptor starts 32 bytes
  further (the swizzle works on the address, so the XOR pattern follows), as a matmul main loop advances it."""
  n, rng = 48, np.random.default_rng(11)
  A, B = operands(rng, n, 2)
  img = np.zeros(8 * 8 * swz + 6 * 8 * swz, np.uint8)
  bo = 8 * 8 * swz
  for base, mat in ((0, bits(A, "f16")), (bo, bits(B.T, "f16"))):
    for r in range(mat.shape[0]):
      for k in range(32):
        a = base + (r // 8) * 8 * swz + (r % 8) * swz + 2 * k
        a ^= ((a >> 7) & (swz // 16 - 1)) << 4
        img[a:a + 2] = np.frombuffer(np.uint16(mat[r, k]).tobytes(), np.uint8)
  d = desc_bits(16, 8 * swz, swz)
  src = kernel(n, "f16", img.nbytes, [(0, bo), (32, bo + 32)])
  np.testing.assert_array_equal(d_unpack(run(src, img, n // 2, d, d), n), A @ B)
  _ptxas(src)


def test_wgmma_reads_shared_memory_when_it_completes():
  """Shared memory overwritten between the wgmma and its wait_group is what the wgmma reads here (the latest point the
  ISA allows): a kernel that refills a buffer a pending wgmma reads gets a wrong result, as it may on hardware."""
  n, rng = 8, np.random.default_rng(5)
  A, B = operands(rng, n)
  img = np.zeros(4096, np.uint8)
  place(img, 0, bits(A, "f16"), 0, False, 128, 256)
  place(img, 2048, bits(B.T, "f16"), 0, False, 128, 256)
  d = desc_bits(128, 256, 0)
  ok = kernel(n, "f16", img.nbytes, [(0, 2048)])
  np.testing.assert_array_equal(d_unpack(run(ok, img, n // 2, d, d), n), A @ B)
  clobber = ok.replace("  wgmma.wait_group.sync.aligned 0;", "  st.shared.b32 [%r6], %r1;\n  wgmma.wait_group.sync.aligned 0;")
  assert not (d_unpack(run(clobber, img, n // 2, d, d), n) == A @ B).all()


SETMAXNREG = HDR + """.visible .entry smr() {
  setmaxnreg.NN.sync.aligned.u32 CNT;
  ret;
}
"""


def test_setmaxnreg_checks_its_count_and_the_warpgroup():
  src = SETMAXNREG.replace("NN", "dec").replace("CNT", "40")
  PTXModule(src).kernel("smr").launch(Memory(), [], (1, 1, 1), (256, 1, 1))
  _ptxas(src)
  with pytest.raises(PTXError, match=r"multiple of 8 in \[24, 256\]"):
    PTXModule(SETMAXNREG.replace("NN", "inc").replace("CNT", "260"))
  with pytest.raises(PTXError, match=r"incomplete warpgroup"):
    PTXModule(src).kernel("smr").launch(Memory(), [], (1, 1, 1), (96, 1, 1))


SPLIT = HDR + """.visible .entry split() {
  .reg .b32 %r<2>; .reg .pred %p<2>;
  mov.u32 %r1, %tid.x;
  setp.ge.u32 %p1, %r1, 256;
  @!%p1 bra CWG;
  setmaxnreg.dec.sync.aligned.u32 PROD;
  ret;
CWG:
  setmaxnreg.inc.sync.aligned.u32 CONS;
  ret;
}
"""


@pytest.mark.parametrize("regs,prod,cons,why", [(168, 40, 232, None), (168, 40, 240, "hang: block 0's warpgroups hold"),
                                                (64, 40, 232, "hang: block 0's"), (168, 176, 232, "dec 176: warpgroup 2"),
                                                (168, 40, 160, "inc 160: warpgroup 0")])
def test_setmaxnreg_moves_registers_within_the_launchs(regs, prod, cons, why):
  """With the launch's register count known (the NV mock passes REGISTER_COUNT), a producer warpgroup's dec and two
  consumers' inc must balance within regs x 384 (PTX ISA 9.7.17.1: .inc waits for released registers), .dec may not
  raise a count and .inc not lower it."""
  src = SPLIT.replace("PROD", str(prod)).replace("CONS", str(cons))
  launch = lambda: PTXModule(src).kernel("split").launch(Memory(), [], (2, 1, 1), (384, 1, 1), specials={"regs": regs})  # noqa: E731
  if why is None: launch()
  else:
    with pytest.raises(PTXError, match=re.escape(why)): launch()


def test_wgmma_needs_an_sm_90a_module():
  n, img, d = _small()
  with pytest.raises(PTXError, match=r"needs .target sm_90a, the module targets sm_90"):
    PTXModule(kernel(n, "f16", img.nbytes, [(0, 2048)]).replace(".target sm_90a", ".target sm_90"))
