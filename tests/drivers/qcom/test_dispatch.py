"""A kernel through the whole a6xx path: NIR -> ir3 -> PM4 dispatch state (drivers/qcom/dispatch.py) -> the mock CP
and shader processor (drivers/mock/adreno/sp.py) -> the ir3 executor; and the state rules the mock SP enforces."""
from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pytest

pytest.importorskip("tinymesa")
from baregrad.ir.dtype import dtypes  # noqa: E402
from baregrad.ir.ops import Ops  # noqa: E402
from baregrad.codegen.astbuild import load, store, reduce, sink  # noqa: E402
from baregrad.codegen.kernel import Opt, OptOps  # noqa: E402
from baregrad.codegen.program import get_program  # noqa: E402
from baregrad.codegen.renderer.nir import NIRRenderer  # noqa: E402
from baregrad.drivers.qcom.ir3_compile import IR3Compiler, Ir3Program  # noqa: E402
from baregrad.drivers.qcom.dispatch import emit_dispatch, shader_bytes  # noqa: E402
from baregrad.drivers.qcom.pm4 import CommandStream  # noqa: E402
from baregrad.drivers.mock.adreno.cp import CP, CPError, GpuMemory  # noqa: E402
from baregrad.drivers.mock.adreno.ir3_exec import Executor  # noqa: E402
from baregrad.drivers.mock.adreno.sp import ShaderProcessor, R  # noqa: E402

f32 = dtypes.float32
CODE_VA, SIG_VA, BUF_VA = 0x10000, 0x20000, 0x100000


def setup(ast, arrays, opts=None, mutate=None):
  p = get_program(ast, NIRRenderer(630), opts=opts)
  prg = Ir3Program.unpack(IR3Compiler(630).compile(p.src))
  if mutate: prg = mutate(prg)
  mem = GpuMemory()
  mem.map(CODE_VA, bytearray(shader_bytes(prg)))
  mem.map(SIG_VA, bytearray(64))
  bufs, va = [], BUF_VA
  for a in arrays:
    data = bytearray(a.tobytes()) + bytearray(16)
    mem.map(va, data)
    bufs.append((va, data))
    va += (len(data) + 0xFFFF) & ~0xFFFF
  params = b"".join(struct.pack("<Q", b[0]) for b in bufs)
  cs = emit_dispatch(CommandStream(), prg, CODE_VA, params, p.global_size).event_write_ts(SIG_VA, 7)
  sp = ShaderProcessor(Executor(mem))
  cp = CP(mem, dispatch=sp)
  return cp, cs, bufs, mem, sp


def out(bufs, i, like):
  return np.frombuffer(bytes(bufs[i][1][:like.nbytes]), like.dtype)


def test_elementwise_through_the_cp_then_signal():
  n = 300
  a, b = np.random.rand(n).astype(np.float32), np.random.rand(n).astype(np.float32)
  cp, cs, bufs, mem, sp = setup(sink(store(0, (n,), load(1, f32, (n,)) * load(2, f32, (n,)) - 1.0)), [np.zeros(n, np.float32), a, b])
  cp.submit(cs.words)
  assert cp.run()
  np.testing.assert_array_equal(out(bufs, 0, a), a * b - np.float32(1))
  assert mem.read32(SIG_VA) == 7 and sp.launches == 1   # the signal comes after the kernel's stores


def test_workgroup_reduce_through_the_cp():
  x = np.random.rand(1024).astype(np.float32)
  cp, cs, bufs, _, _ = setup(sink(store(0, (1,), reduce(load(1, f32, (1024,)), Ops.ADD, (0,)))), [np.zeros(1, np.float32), x],
                             opts=[Opt(OptOps.GROUP, 0, 128)])
  cp.submit(cs.words)
  assert cp.run()
  np.testing.assert_allclose(out(bufs, 0, np.zeros(1, np.float32))[0], x.sum(dtype=np.float64), rtol=1e-5)


def _bad(mutate, match):
  n = 64
  cp, cs, _, _, _ = setup(sink(store(0, (n,), load(1, f32, (n,)) + 2.0)), [np.zeros(n, np.float32), np.ones(n, np.float32)], mutate=mutate)
  cp.submit(cs.words)
  with pytest.raises(CPError, match=match): cp.run()


def test_register_footprint_too_small_refused():
  _bad(lambda p: dataclasses.replace(p, max_reg=0), r"full registers \(pc \d+ `[^`]*`\), SP_CS_CTRL_REG0.FULLREGFOOTPRINT grants 1")


def _patch_reg(words, reg, value):
  """The stream with the value written to register `reg` replaced (the driver encoder never emits such a stream)."""
  words, i = list(words), 0
  while i < len(words):
    h = words[i]
    if h >> 28 == 4:
      first, cnt = (h >> 8) & 0x7FFFF, h & 0x7F
      if first <= reg < first + cnt: words[i + 1 + reg - first] = value
      i += 1 + cnt
    else: i += 1 + (h & 0x3FFF)
  return words


def _run_patched(reg, value, match):
  n = 64
  cp, cs, _, _, _ = setup(sink(store(0, (n,), load(1, f32, (n,)) + 2.0)), [np.zeros(n, np.float32), np.ones(n, np.float32)])
  cp.submit(_patch_reg(cs.words, R[reg], value))
  with pytest.raises(CPError, match=match): cp.run()


def test_constlen_too_small_refused():
  _run_patched("HLSQ_CS_CNTL", 1 << 8, r"reads c0, HLSQ_CS_CNTL.CONSTLEN is 0 vec4s")   # (both addresses are in c0)


def test_obj_start_must_name_the_loaded_code():
  _run_patched("SP_CS_OBJ_START", CODE_VA + 0x80, r"SP_CS_OBJ_START is 0x10080")


def test_instrlen_must_match_the_loaded_code():
  _run_patched("SP_CS_INSTRLEN", 99, r"ST6_SHADER load of \d+ units but SP_CS_INSTRLEN is 99")


def test_local_and_workgroup_id_registers_must_agree():
  _run_patched("HLSQ_CS_CNTL_0", 0xFCFCFCFC, r"name different workgroup-id / local-id registers")


def test_disabled_stage_and_missing_shader_refused():
  cp = CP(GpuMemory(), dispatch=ShaderProcessor(Executor(GpuMemory())))
  cp.submit(CommandStream().exec_cs(1).words)
  with pytest.raises(CPError, match="CS stage disabled"): cp.run()
  cp = CP(GpuMemory(), dispatch=ShaderProcessor(Executor(GpuMemory())))
  cs = CommandStream().reg("SP_CS_CONFIG", 1 << 8).reg("HLSQ_CS_CNTL", 1 << 8).exec_cs(1)
  cp.submit(cs.words)
  with pytest.raises(CPError, match="no shader loaded"): cp.run()


def test_global_size_must_match_grid():
  n = 64
  cp, cs, _, _, _ = setup(sink(store(0, (n,), load(1, f32, (n,)) + 2.0)), [np.zeros(n, np.float32), np.ones(n, np.float32)])
  words = list(cs.words)
  # patch the launch to twice the grid the NDRANGE registers describe
  exec_at = max(i for i, w in enumerate(words) if (w >> 28) == 7 and (w >> 16) & 0x7F == 0x33)
  words[exec_at + 2] *= 2
  cp.submit(words)
  with pytest.raises(CPError, match="GLOBALSIZE_X"): cp.run()
