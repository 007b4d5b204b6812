"""The PTX interpreter's mbarrier objects and bulk asynchronous copies (drivers/mock/ptx/mbarrier.py) on hand-written
PTX: phases and parities, arrival and transaction counts, a bulk copy landing only for its waiters, and what the
hardware would hang on or refuse reported by name. Every kernel also assembles with ptxas for sm_90a where ptxas is
installed."""
from __future__ import annotations
import numpy as np
import pytest
from baregrad.drivers.mock.ptx import PTXModule, Memory, PTXError, GPUFault
from baregrad.drivers.nv_compile import find_ptxas

HDR = ".version 8.0\n.target sm_90a\n.address_size 64\n"


def _ptxas(src: str) -> None:
  if find_ptxas() is None: return
  from baregrad.drivers.nv_compile import PTXCompiler
  PTXCompiler("sm_90a").compile(src)


def kernel(body: str, nbytes: int = 256) -> str:
  """64 threads; %r1 = tid, %r2 = the mbarrier's shared address, %r3 = the tile's, %rd1/%rd2 = global in/out (the out
  address of thread tid's word in %rd4), %p1 = (tid == 0)."""
  return HDR + f""".visible .entry mb(.param .u64 inp, .param .u64 out) {{
  .shared .align 8 .b64 bar;
  .shared .align 128 .b8 tile[{nbytes}];
  .reg .b32 %r<40>; .reg .b64 %rd<20>; .reg .pred %p<8>;
  ld.param.u64 %rd1, [inp]; ld.param.u64 %rd2, [out];
  cvta.to.global.u64 %rd1, %rd1; cvta.to.global.u64 %rd2, %rd2;
  mov.u32 %r1, %tid.x; mov.u32 %r2, bar; mov.u32 %r3, tile;
  setp.eq.u32 %p1, %r1, 0;
  mul.wide.u32 %rd3, %r1, 4; add.s64 %rd4, %rd2, %rd3;
  shl.b32 %r4, %r1, 2; add.u32 %r5, %r3, %r4;
{body}
  ret;
}}
"""


def run(src: str, data: np.ndarray, block: int = 64) -> np.ndarray:
  mem = Memory()
  i = mem.alloc(data.nbytes); mem.write(i, data)
  o = mem.alloc(4 * block * 2)
  PTXModule(src).kernel("mb").launch(mem, [i, o], (1, 1, 1), (block, 1, 1))
  return mem.read(o, np.uint32, 2 * block)


INIT = "  @%p1 mbarrier.init.shared::cta.b64 [%r2], 1;\n  bar.sync 0;"


def copy_and_wait(nbytes: int, off: int, parity: int, expect: int | None = None, lab: str = "W") -> str:
  """Thread 0 arrives expecting `expect` bytes and bulk-copies `nbytes` from inp + off; everyone waits for the phase
  of `parity`."""
  return f"""  @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd10, [%r2], {nbytes if expect is None else expect};
  add.s64 %rd11, %rd1, {off};
  @%p1 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r3], [%rd11], {nbytes}, [%r2];
{lab}:
  mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r2], {parity};
  @!%p2 bra {lab};"""


def test_bulk_copy_lands_for_its_waiters_phase_by_phase():
  """Two phases of one mbarrier (parity 0 then 1), each a 256-byte bulk copy: each thread reads its word of each."""
  data = np.arange(128, dtype=np.uint32) * 3 + 1
  body = INIT + "\n" + copy_and_wait(256, 0, 0, lab="W0") + """
  ld.shared.b32 %r10, [%r5];
  st.global.b32 [%rd4], %r10;
  bar.sync 0;
""" + copy_and_wait(256, 256, 1, lab="W1") + """
  ld.shared.b32 %r11, [%r5];
  st.global.b32 [%rd4+256], %r11;"""
  src = kernel(body)
  np.testing.assert_array_equal(run(src, data), data)
  _ptxas(src)


def test_reading_before_the_wait_sees_stale_shared_memory():
  """The copy lands when a thread waits on its mbarrier, not before (the latest point the ISA allows)."""
  data = np.arange(64, dtype=np.uint32) + 100
  body = INIT + """
  @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd10, [%r2], 256;
  @%p1 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r3], [%rd1], 256, [%r2];
  ld.shared.b32 %r10, [%r5];
  st.global.b32 [%rd4], %r10;
W:
  mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r2], 0;
  @!%p2 bra W;
  ld.shared.b32 %r11, [%r5];
  st.global.b32 [%rd4+256], %r11;"""
  src = kernel(body)
  out = run(src, data)
  assert (out[:64] == 0).all()
  np.testing.assert_array_equal(out[64:], data)
  _ptxas(src)


def test_arrivals_complete_a_phase_and_the_state_token_names_it():
  """init 64: the phase completes when all 64 threads arrive; test_wait with each thread's state token is then true,
  and try_wait.parity of the next phase is false."""
  body = """  @%p1 mbarrier.init.shared::cta.b64 [%r2], 64;
  bar.sync 0;
  mbarrier.arrive.shared::cta.b64 %rd10, [%r2];
W:
  mbarrier.test_wait.shared::cta.b64 %p2, [%r2], %rd10;
  @!%p2 bra W;
  mbarrier.test_wait.parity.shared::cta.b64 %p3, [%r2], 1;
  selp.u32 %r10, 1, 0, %p2;
  selp.u32 %r11, 1, 0, %p3;
  st.global.b32 [%rd4], %r10;
  st.global.b32 [%rd4+256], %r11;"""
  src = kernel(body)
  out = run(src, np.zeros(64, np.uint32))
  assert (out[:64] == 1).all() and (out[64:] == 0).all()
  _ptxas(src)


def test_an_expect_tx_no_copy_delivers_is_reported_as_a_hang(monkeypatch):
  from baregrad.drivers.mock.ptx import PTXKernel
  monkeypatch.setattr(PTXKernel, "mbarrier_hang_polls", 500)
  body = INIT + "\n" + copy_and_wait(256, 0, 0, expect=512)
  with pytest.raises(PTXError, match=r"hang: mbarrier at shared offset 0x0 \(block 0\) never completes phase 0: "
                                     r"0 of 1 arrivals and 256 transaction bytes outstanding"):
    run(kernel(body), np.zeros(128, np.uint32))


def test_too_many_arrivals_and_an_uninitialized_barrier_are_reported():
  with pytest.raises(PTXError, match=r"64 arrivals, but phase 0 has 1 pending"):
    run(kernel(INIT + "\n  mbarrier.arrive.shared::cta.b64 %rd10, [%r2];"), np.zeros(64, np.uint32))
  with pytest.raises(PTXError, match=r"used before mbarrier.init"):
    run(kernel("  mbarrier.arrive.shared::cta.b64 %rd10, [%r2];"), np.zeros(64, np.uint32))


def test_misaligned_barrier_and_bulk_copy_fault():
  with pytest.raises(GPUFault, match=r"misaligned mbarrier"):
    run(kernel("  add.u32 %r6, %r2, 4;\n  @%p1 mbarrier.init.shared::cta.b64 [%r6], 1;"), np.zeros(64, np.uint32))
  with pytest.raises(GPUFault, match=r"cp.async.bulk size 0x18 is not a multiple of 16"):
    run(kernel(INIT + "\n" + copy_and_wait(24, 0, 0)), np.zeros(64, np.uint32))
  with pytest.raises(GPUFault, match=r"outside the \d+-byte shared window"):   # a copy past the block's shared memory
    run(kernel(INIT + "\n" + copy_and_wait(512, 0, 0)), np.zeros(256, np.uint32))


def test_elect_sync_picks_one_leader_per_warp():
  """elect.sync over the full mask: one leader per warp (p), and every thread gets the leader's lane id; over a mask
  of lanes 4..31 executed by exactly those lanes, the leader is one of them."""
  body = """  elect.sync %r10|%p3, 0xffffffff;
  selp.u32 %r11, 1, 0, %p3;
  st.global.b32 [%rd4], %r10;
  st.global.b32 [%rd4+256], %r11;"""
  src = kernel(body)
  out = run(src, np.zeros(64, np.uint32))
  lead = out[:64].reshape(2, 32)
  assert (lead == lead[:, :1]).all() and out[64:].reshape(2, 32).sum(1).tolist() == [1, 1]
  assert all(out[64 + 32 * w + lead[w, 0]] == 1 for w in range(2))
  _ptxas(src)
  part = """  and.b32 %r12, %r1, 31;
  setp.lt.u32 %p4, %r12, 4;
  mov.u32 %r10, 99; mov.u32 %r11, 0;
  @%p4 bra SKIP;
  elect.sync %r10|%p3, 0xfffffff0;
  selp.u32 %r11, 1, 0, %p3;
SKIP:
  st.global.b32 [%rd4], %r10;
  st.global.b32 [%rd4+256], %r11;"""
  out = run(kernel(part), np.zeros(64, np.uint32)).reshape(2, 2, 32)
  assert (out[0, :, :4] == 99).all() and (out[1, :, :4] == 0).all() and (out[1].sum(1) == 1).all()
  assert all(4 <= out[0, w, 4] < 32 and out[1, w, out[0, w, 4]] == 1 for w in range(2))
  with pytest.raises(PTXError, match=r"named in membermask did not execute it"):
    run(kernel(part.replace("0xfffffff0", "0xffffffff")), np.zeros(64, np.uint32))   # lanes 0..3 named, absent
