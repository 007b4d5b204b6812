"""a7xx (a730/a740/a750): the chip records, CP_EVENT_WRITE7 signals and timestamps, the a7xx compute state, and the
mock's model of them (mock/adreno/cp.py, sp.py, kgsl.py)."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from baregrad.drivers.mock.adreno.cp import CP, CPError, GpuMemory
from baregrad.drivers.qcom import chips
from baregrad.drivers.qcom.pm4 import CommandStream, REGS

BASE = 0x10000


def test_chip_records():
  for name, cid, gpu in (("a730", 0x07030001, 730), ("a740", 0x43050A01, 740), ("a750", 0x43051401, 750)):
    c = chips.lookup(cid)
    assert (c.name, c.gen, c.gpu_id, c.wave_size, c.reg_size_vec4) == (name, 7, gpu, 64, 96) and dict(c.magic_regs)["SP_DBG_ECO_CNTL"] == 0x10000000
    assert chips.by_name(name) is c
  # a7xx ids are whole: 0x07030002 is an a725 and 0x43050a00 another part, not a stepping of a730 / a740
  for cid in (0x07030002, 0x43050A00):
    with pytest.raises(chips.UnknownChip, match="not supported"): chips.lookup(cid)
  assert chips.lookup(0x06030002).name == "a630"   # a6xx: the patch byte is a stepping
  with pytest.raises(chips.UnknownChip, match="a999"): chips.by_name("a999")


def _cp7(size=0x1000):
  mem = GpuMemory()
  buf = bytearray(size)
  mem.map(BASE, buf)
  return CP(mem, gen=7), buf


def test_event_write7_signal_and_timestamp():
  cp, buf = _cp7()
  cs = CommandStream(7).event_write_ts(BASE + 8, 77).timestamp(BASE + 16).timestamp(BASE + 24)
  assert (cs.words[0] >> 16) & 0x7F == 0x46   # CP_EVENT_WRITE7 has CP_EVENT_WRITE's opcode (adreno_pm4.xml)
  cp.submit(cs.words)
  assert cp.run()
  assert struct.unpack_from("<I", buf, 8)[0] == 77
  t0, t1 = struct.unpack_from("<QQ", buf, 16)
  assert t1 > t0 > 0
  # the a6xx form of the same packet is not what an a7xx CP reads: refused, not misread
  cp, _ = _cp7()
  cp.submit(CommandStream(6).event_write_ts(BASE + 8, 77).words)
  with pytest.raises(CPError, match="without WRITE_ENABLED takes 1 payload dwords, got 4"): cp.run()


@pytest.mark.parametrize("w0, payload, match", [
  (50 | 1 << 27 | 1 << 24, [BASE, 0, 1], "WRITE_DST 1 \\(on-chip\\) is not modelled"),
  (50 | 1 << 27 | 4 << 20, [BASE, 0, 1], "WRITE_SRC 4 is not modelled"),
  (50 | 1 << 27 | 3 << 20, [BASE + 4, 0], "not 8-byte aligned"),
  (50 | 1 << 27, [BASE, 0], "takes 4 payload dwords, got 3"),
], ids=["onchip", "regs_content", "misaligned_64", "short"])
def test_event_write7_malformed_refused(w0, payload, match):
  cp, _ = _cp7()
  cp.submit(CommandStream(7).pkt7("CP_EVENT_WRITE7", w0, *payload).words)
  with pytest.raises(CPError, match=match): cp.run()


def test_a7xx_registers_are_at_their_own_offsets():
  # the HLSQ_CS_* state moved into the SP block on a7xx; HLSQ_CS_CNTL_0 is gone
  assert REGS[7]["HLSQ_CS_NDRANGE_0"] != REGS[6]["HLSQ_CS_NDRANGE_0"] and "HLSQ_CS_CNTL_0" not in REGS[7]
  with pytest.raises(KeyError, match="no a7xx register named 'HLSQ_CS_CNTL_0'"): CommandStream(7).reg("HLSQ_CS_CNTL_0", 0)


tinymesa = pytest.importorskip("tinymesa")


def _dispatch(gpu_id, patch=None):
  from baregrad.ir.dtype import dtypes
  from baregrad.codegen.astbuild import load, store, sink
  from baregrad.codegen.program import get_program
  from baregrad.codegen.renderer.nir import NIRRenderer
  from baregrad.drivers.qcom.ir3_compile import IR3Compiler, Ir3Program
  from baregrad.drivers.qcom.dispatch import emit_dispatch, shader_bytes
  from baregrad.drivers.mock.adreno.ir3_exec import Executor
  from baregrad.drivers.mock.adreno.sp import ShaderProcessor
  n = 300
  p = get_program(sink(store(0, (n,), load(1, dtypes.float32, (n,)) * 3.0 + 1.0)), NIRRenderer(gpu_id))
  prg = Ir3Program.unpack(IR3Compiler(gpu_id).compile(p.src))
  mem = GpuMemory()
  mem.map(0x10000, bytearray(shader_bytes(prg)))
  x = np.arange(n, dtype=np.float32)
  out, inp = bytearray(4 * n + 16), bytearray(x.tobytes() + bytes(16))
  mem.map(0x100000, out)
  mem.map(0x200000, inp)
  mem.map(0x300000, bytearray(64))
  words = emit_dispatch(CommandStream(7), prg, 0x10000, struct.pack("<QQ", 0x100000, 0x200000), p.global_size).event_write_ts(0x300000, 9).words
  if patch: words = patch(words)
  cp = CP(mem, dispatch=ShaderProcessor(Executor(mem, gpu_id), gen=7), gen=7)
  cp.submit(words)
  assert cp.run()
  return np.frombuffer(bytes(out[:4 * n]), np.float32), x, mem


@pytest.mark.parametrize("gpu_id", [730, 740])
def test_a7xx_dispatch_runs_on_the_mock(gpu_id):
  got, x, mem = _dispatch(gpu_id)
  np.testing.assert_array_equal(got, x * 3 + 1)
  assert mem.read32(0x300000) == 9


def test_a750_preamble_is_refused_by_name():
  # a750 (Mesa a7xx_gen3: load_shader_consts_via_preamble) gets a shader preamble (shps/getone/stc into the const
  # file) even without ir3's preamble pass; the mock does not model it and says which instruction
  with pytest.raises(Exception, match="stc.u32 c\\[4\\]"): _dispatch(750)


def _set(name, field, value):
  from baregrad.ctypes_autogen import adreno
  f = adreno.FIELDS_A7XX[name][field]
  def patch(words):
    words = list(words)
    for i, h in enumerate(words):
      if h >> 28 == 4 and (h >> 8) & 0x7FFFF == REGS[7][name]:
        words[i + 1] = (words[i + 1] & ~f.encode(f.decode(0xFFFFFFFF))) | f.encode(value)
        return words
    raise AssertionError(f"{name} not written")
  return patch


def test_a7xx_state_checked():
  # turnip tu6_emit_cs_config (A7XX): the workgroup shape in HLSQ_CS_LOCAL_SIZE too, one wave size in the CS registers
  with pytest.raises(CPError, match="HLSQ_CS_LOCAL_SIZE says a workgroup of"): _dispatch(740, _set("HLSQ_CS_LOCAL_SIZE", "LOCALSIZEX", 3))
  with pytest.raises(CPError, match="SP_CS_CNTL_1.THREADSIZE is 1"): _dispatch(740, _set("SP_CS_CNTL_1", "THREADSIZE", 1))
  with pytest.raises(CPError, match="HLSQ_CS_CNTL_1.THREADSIZE is 1"): _dispatch(740, _set("HLSQ_CS_CNTL_1", "THREADSIZE", 1))


@pytest.fixture
def chip_knob(monkeypatch):
  """Set MOCKGPU_QCOM_CHIP for the test (knobs are cached: reset on the way in and out)."""
  from baregrad import knobs
  def set_chip(name: str) -> None:
    monkeypatch.setenv("MOCKGPU_QCOM_CHIP", name); knobs.reset()
  yield set_chip
  monkeypatch.delenv("MOCKGPU_QCOM_CHIP", raising=False); knobs.reset()


def test_a7xx_device_on_the_mock(chip_knob):
  # QCOMDevice over a mock a740 (MOCKGPU_QCOM_CHIP): KGSL ends each submission with a gen7 CP_EVENT_WRITE7 of the
  # context's timestamp, signals and timestamps are CP_EVENT_WRITE7, kernels run with the a7xx state
  from baregrad.drivers.mock.adreno.kgsl import MockKGSL
  from baregrad.drivers.port import make_port
  from baregrad.drivers.qcom.device import QCOMDevice, QCOM7ComputeQueue
  chip_knob("a740")
  mock = MockKGSL()
  assert mock.chip_id == 0x43050A01 and mock.gen == 7 and mock.gmem_bytes == 3 << 20
  dev = QCOMDevice("QCOM", port=make_port(mock))
  assert (dev.chip.name, dev.gpu_id, dev.compute_queue_t) == ("a740", 740, QCOM7ComputeQueue)
  from baregrad.ir.dtype import dtypes
  from baregrad.codegen.astbuild import load, store, sink
  from baregrad.codegen.program import get_program
  n = 256
  p = get_program(sink(store(0, (n,), load(1, dtypes.float32, (n,)) + 2.0)), dev.renderer)
  prg = dev.runtime(dev, p.name, dev.compiler.compile_cached(p.src))
  src, dst = dev.allocator.alloc(4 * n), dev.allocator.alloc(4 * n)
  dev.allocator._copyin(src, memoryview(np.arange(n, dtype=np.float32).tobytes()))
  t = prg(dst, src, global_size=p.global_size, local_size=p.local_size, wait=True)
  out = bytearray(4 * n)
  dev.allocator._copyout(memoryview(out), dst)
  np.testing.assert_array_equal(np.frombuffer(bytes(out), np.float32), np.arange(n, dtype=np.float32) + 2)
  assert t is not None and t >= 0   # the launch was timed by two CP_EVENT_WRITE7 always-on writes
  chip_knob("a999")
  with pytest.raises(ValueError, match="MOCKGPU_QCOM_CHIP: no Adreno part named 'a999'"): MockKGSL()
