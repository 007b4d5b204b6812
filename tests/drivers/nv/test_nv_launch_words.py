"""The NV launch fast path writes the words the general encoders make: NVProgram.__call__'s pushbuffer (a template with
its values patched) against hw.sem_words + hw.launch_words, NVArgsState's packed parameters against one write per
parameter, and write_qmd's patched QMD template against hw.qmd_cbank0_words. The GPU must see the same words
whichever way the host made them (bench/launch.py measures the host side)."""
from __future__ import annotations
from tests.paths import REPO  # noqa: F401
import ctypes
from array import array
import pytest
from baregrad.drivers.port import make_port
from baregrad.drivers.mock.nv import MockNVGPU
from baregrad.drivers.nv import NVDevice, hw
from baregrad.drivers.nv.program import launch_pushbuffer, param_packer
from baregrad.drivers.nv.testkernels import KERNELS

STEP = r"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry mixed(.param .u8 a, .param .u64 p, .param .u16 b, .param .u32 c, .param .u64 q) { ret; }
"""

@pytest.fixture(scope="module")
def dev():
  with pytest.MonkeyPatch.context() as mp:
    mp.delenv("MOCKGPU_ARCH", raising=False)
    mp.delenv("MOCKGPU_COUNT", raising=False)
    d = NVDevice("NV", port=make_port(MockNVGPU()))
    yield d
    d.close()

@pytest.mark.parametrize("tl,wait,qmd,sig", [(0x1000, 0, 0x100, 1), (0x7f_1234_5600, (1 << 32) + 5, 0x12_3456_7800, (1 << 40) + 3)])
def test_launch_pushbuffer_template_patched_equals_the_encoders(tl, wait, qmd, sig):
  cc = next(iter(hw.QMD_VERSION))
  words, (w_lo, qi, s_lo) = launch_pushbuffer(cc, tl)
  words[w_lo], words[w_lo + 1], words[qi] = wait & 0xFFFFFFFF, wait >> 32, qmd >> 8
  words[s_lo], words[s_lo + 1] = sig & 0xFFFFFFFF, sig >> 32
  want = hw.sem_words(tl, wait, hw.SEM_EXEC_ACQUIRE_GEQ) + hw.launch_words(cc, qmd) + hw.sem_words(tl, sig, hw.SEM_EXEC_RELEASE)
  assert list(words) == want

def test_fast_launch_submits_the_encoders_words(dev, monkeypatch):
  """What NVProgram.__call__ hands the compute channel: the acquire of the last timeline value, the launch of this
  launch's QMD, the release of the next value (the general queue path's words for the same launch)."""
  prg = dev.runtime(dev, "idx", KERNELS.encode())
  out = dev.allocator.alloc(4 * 64)
  ch = dev.channels["compute"]
  seen: list[list[int]] = []
  orig = type(ch).submit
  monkeypatch.setattr(type(ch), "submit", lambda self, words: (seen.append(list(words)), orig(self, words))[1])
  for _ in range(3):   # (the second and third launch reuse the template: each gets its own values)
    before = dev.timeline_value
    prg(out, vals=(64,), global_size=(2, 1, 1), local_size=(32, 1, 1))
    pcas = [m.value for m in hw.decode_pushbuffer(seen[-1]) if m.subc == hw.SUBC_COMPUTE and m.method == hw.SEND_PCAS_A]
    assert len(pcas) == 1
    qmd = pcas[0] << 8
    tl = dev.timeline_signal.va_addr
    assert seen[-1] == (hw.sem_words(tl, before - 1, hw.SEM_EXEC_ACQUIRE_GEQ) + hw.launch_words(dev.compute_class, qmd)
                        + hw.sem_words(tl, before, hw.SEM_EXEC_RELEASE))
  dev.synchronize()
  got = bytearray(4 * 64)
  dev.allocator._copyout(memoryview(got), out)
  assert list(memoryview(got).cast("I")) == list(range(64))
  dev.allocator.free(out, 4 * 64)

def test_packed_parameters_equal_one_write_per_parameter(dev):
  """Parameters of sizes 1, 2, 4 and 8 at their aligned offsets, negative values masked to their size: the packed
  constant bank holds each at param_off + offset as the per-parameter writes put it, and the header bytes are zero."""
  prg = dev.runtime(dev, "mixed", STEP.encode())
  assert [s for _, s in prg.params] == [1, 8, 2, 4, 8] and prg.param_pack is not None
  cpu, va = dev.alloc_kernargs(prg.kernargs_size(0, 5))
  ctypes.memset(cpu, 0xAB, prg.kernargs_size(0, 5))
  # vals: a=-1 (u8), p (u64 buffer below), b=-2 (u16), c=0x1_0000_0005 (u32: masked), q=-3 (u64)
  args = prg.args_state_t(cpu, va, prg, [], [-1, 0x7f00_0000_1000, -2, 0x1_0000_0005, -3])
  cb = ctypes.string_at(args.cb_cpu, prg.param_off + prg.param_size)
  assert cb[:prg.param_off] == bytes(prg.param_off)
  want = [0xFF, 0x7f00_0000_1000, 0xFFFE, 5, (1 << 64) - 3]
  for (off, sz), v in zip(prg.params, want):
    assert int.from_bytes(cb[prg.param_off + off:prg.param_off + off + sz], "little") == v

def test_param_packer_refuses_what_it_cannot_lay_out():
  assert param_packer(8, [(8, 8), (0, 4)]) is None   # out of offset order: NVArgsState writes one at a time
  assert param_packer(8, [(0, 3)]) is None
  assert param_packer(2, [(0, 1), (4, 4)])(7, 9) == b"\0\0\x07\0\0\0\x09\0\0\0"

def test_written_qmd_is_the_template_with_the_bank_address(dev):
  """write_qmd copies the geometry's QMD and patches constant bank 0's address as one 64-bit store: every word but the
  bank's equals the template, and the QMD read back names this launch's bank."""
  prg = dev.runtime(dev, "idx", KERNELS.encode())
  for gs in [(2, 1, 1), (2, 1, 1), (3, 2, 1)]:
    out = dev.allocator.alloc(4 * 64)
    args = prg.fill_kernargs([out], (64,))
    args.write_qmd(gs, (32, 1, 1))
    q = hw.words_of(ctypes.string_at(args.qmd_cpu, hw.QMD_BYTES))
    assert hw.read_qmd(q, dev.qmd_version)["cbank0"] == args.cb_va
    t = next(v for k, v in prg.launch_templates.items() if k[0] == gs)
    tmpl = list(array("I", t[1]))
    lo, lo_v, hi, hi_v, mask = hw.qmd_cbank0_words(dev.qmd_version, args.cb_va)
    tmpl[lo], tmpl[hi] = lo_v, (tmpl[hi] & ~mask) | hi_v
    assert q == tmpl
    dev.allocator.free(out, 4 * 64)

def test_channel_gp_entry_equals_hw_gp_entry(dev):
  """The channel's GPFIFO entries (high word cached per address high part and length) are hw.gp_entry's, for a cache
  hit at another low address too, and a misaligned address is still refused."""
  ch = dev.channels["compute"]
  for addr, n in [(0x20_0000_1000, 6), (0x20_0000_2004, 6), (0x20_ffff_fffc, 6), (0x21_0000_0000, 6), (0x20_0000_1000, 19), (0x1000, 1)]:
    assert ch._gp_entry(addr, n) == hw.gp_entry(addr, n)
  with pytest.raises(ValueError, match="4-byte aligned"): ch._gp_entry(0x20_0000_1002, 6)

@pytest.mark.parametrize("kernel,src,nbufs,vals", [("mixed", STEP, 0, (-1, 0x7f00_0000_1000, -2, 0x1_0000_0005, -3)),
                                                   ("idx", KERNELS, 1, (64,))], ids=["mixed", "idx"])
def test_fast_launch_args_block_equals_args_state(dev, kernel, src, nbufs, vals):
  """NVProgram.__call__ writes a launch's QMD and constant bank 0 as one block (the geometry's template with the bank
  address and the parameters packed in): the bytes NVArgsState + write_qmd write for the same launch, but for the
  bank's own address in the QMD (each launch has its own bank). Parameters of each size, negative values masked."""
  prg = dev.runtime(dev, kernel, src.encode())
  bufs = [dev.allocator.alloc(4 * 64) for _ in range(nbufs)]
  gs, ls = (3, 2, 1), (32, 1, 1)
  qmd_va = prg._write_args(bufs, vals, gs, ls)
  args = prg.fill_kernargs(bufs, vals)
  args.write_qmd(gs, ls)
  n = prg.param_off + prg.param_size
  assert ctypes.string_at(dev.cpu_address(qmd_va + 0x200, n), n) == ctypes.string_at(args.cb_cpu, n)
  fast = hw.words_of(ctypes.string_at(dev.cpu_address(qmd_va, hw.QMD_BYTES), hw.QMD_BYTES))
  slow = hw.words_of(ctypes.string_at(args.qmd_cpu, hw.QMD_BYTES))
  assert hw.read_qmd(fast, dev.qmd_version)["cbank0"] == qmd_va + 0x200 and qmd_va % 256 == 0
  hw.relocate_qmd(slow, dev.qmd_version, prg.code_va, qmd_va + 0x200)
  assert fast == slow
  assert dev.qmd_kernels[qmd_va] == kernel
  with pytest.raises(ValueError, match=f"{kernel} takes {len(prg.params)} parameters"): prg._write_args(bufs, vals[1:], gs, ls)
  for b in bufs: dev.allocator.free(b, 4 * 64)
