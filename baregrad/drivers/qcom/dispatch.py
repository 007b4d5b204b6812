"""One compute dispatch on a6xx/a7xx as PM4: the SP_CS_* / HLSQ_CS_* state of an ir3 program, its code and constants loaded
with CP_LOAD_STATE6, and CP_EXEC_CS.

Register fields from Mesa's a6xx.xml (generated into ctypes_autogen/adreno.py); which values go where follows Mesa's
turnip (tu_pipeline.c tu6_emit_cs_config, tu_cmd_buffer.c tu_dispatch) and freedreno's computerator (a6xx.cc
cs_program_emit / emit_grid), the references for a6xx compute state:
- SP_CS_CTRL_REG0: FULLREGFOOTPRINT = max_reg + 1, HALFREGFOOTPRINT = max_half_reg + 1, BRANCHSTACK, MERGEDREGS
  (a6xx's merged register file), THREADSIZE 64 (one wave = 64 fibers);
- SP_CS_UNKNOWN_A9B1.SHARED_SIZE: workgroup memory in 1 KiB units minus one, at least 1;
- SP_CS_CONFIG.ENABLED / HLSQ_CS_CNTL (CONSTLEN in vec4s, ENABLED); SP_CS_INSTRLEN and SP_CS_OBJ_START (the code);
- SP_CS_CNTL_0 / HLSQ_CS_CNTL_0: the registers the workgroup id and local id arrive in (regid 0xfc: none);
- HLSQ_CS_NDRANGE_0..6: dimensions, workgroup size minus one per axis, global sizes and offsets;
- CP_LOAD_STATE6_FRAG to SB6_CS_SHADER: ST6_SHADER from memory (instrlen units of 128 bytes), ST6_CONSTANTS inline
  (the kernel parameters at c0 and ir3's immediates where the compiler put them, constlen vec4s);
- images (drivers/qcom/texture.py): CP_LOAD_STATE6_FRAG to SB6_CS_TEX, ST6_SHADER the samplers and ST6_CONSTANTS the
  texture descriptors (from memory, one unit each), SP_CS_TEX_SAMP / SP_CS_TEX_CONST their addresses and
  SP_CS_TEX_COUNT the slots, as freedreno's fd6_emit_textures and turnip's compute descriptor state do;
- a7xx (the stream's generation, registers at the a7xx offsets: the HLSQ_CS_* state moved into the SP block): no
  HLSQ_CS_CNTL_0; SP_CS_CNTL_1 and HLSQ_CS_CNTL_1 (wave size, no linear local id), HLSQ_CS_LOCAL_SIZE (the workgroup
  shape again) and SP_CS_UNKNOWN_A9BE, as turnip's tu6_emit_cs_config writes them for A7XX.
"""
from __future__ import annotations

import struct

from baregrad.ctypes_autogen import adreno
from baregrad.drivers.qcom.pm4 import CommandStream
from baregrad.drivers.qcom.ir3_compile import Ir3Program

FIELDS = {6: adreno.FIELDS_A6XX, 7: adreno.FIELDS_A7XX}
THREAD64 = adreno.ENUMS["a6xx_threadsize"]["THREAD64"]
INSTR_UNIT = 128   # bytes per SP_CS_INSTRLEN unit / ST6_SHADER NUM_UNIT (a6xx: 32 dwords)


def _f(reg: str, gen: int = 6, **fields: int) -> int:
  v = 0
  for k, x in fields.items(): v |= FIELDS[gen][reg][k].encode(x)
  return v


def const_block(prg: Ir3Program, params: bytes) -> list[int]:
  """The const file a dispatch loads: `params` at c0 (at most prg.param_vec4 vec4s), ir3's immediates at
  prg.imm_base_vec4, zero elsewhere; constlen vec4s (at least one)."""
  if len(params) > 16 * prg.param_vec4:
    raise ValueError(f"{len(params)} bytes of parameters; the program reserved {prg.param_vec4} vec4s ({16 * prg.param_vec4} bytes)")
  n = 4 * max(prg.constlen, prg.imm_base_vec4 + (len(prg.imms) + 3) // 4, prg.param_vec4, 1)
  n = (n + 15) // 16 * 16   # whole vec4 x4 (CONSTLEN is a multiple of 4 vec4s on a6xx)
  words = [0] * n
  pw = struct.unpack(f"<{(len(params) + 3) // 4}I", params + b"\0" * (-len(params) % 4))
  words[:len(pw)] = pw
  words[4 * prg.imm_base_vec4:4 * prg.imm_base_vec4 + len(prg.imms)] = prg.imms
  return words


def emit_textures(cs: CommandStream, ntex: int, tex_va: int, samp_va: int) -> CommandStream:
  """The texture state of a compute dispatch: `ntex` descriptors (A6XX_TEX_CONST, 16 dwords each) at `tex_va` and as
  many samplers (A6XX_TEX_SAMP, 4 dwords each) at `samp_va`, loaded into SB6_CS_TEX."""
  if tex_va % 64 or samp_va % 16: raise ValueError(f"texture descriptors at {tex_va:#x} / samplers at {samp_va:#x}: need 64 / 16-byte alignment")
  cs.reg("SP_CS_TEX_COUNT", ntex)
  cs.load_state6("SB6_CS_TEX", "ST6_SHADER", 0, ntex, ext_addr=samp_va)
  cs.reg("SP_CS_TEX_SAMP", samp_va & 0xFFFFFFFF, samp_va >> 32)
  cs.load_state6("SB6_CS_TEX", "ST6_CONSTANTS", 0, ntex, ext_addr=tex_va)
  cs.reg("SP_CS_TEX_CONST", tex_va & 0xFFFFFFFF, tex_va >> 32)
  return cs


def emit_dispatch(cs: CommandStream, prg: Ir3Program, code_va: int, params: bytes | None, global_size: tuple[int, ...],
                  consts_va: int | None = None, tex_va: int | None = None) -> CommandStream:
  """Append to `cs` the state and the launch of `prg` (its code already at GPU address `code_va`, 128-byte aligned)
  over `global_size` workgroups of prg.local_size, with kernel parameters `params` loaded inline, or (params None) the
  const block already written at `consts_va` (const_block's words: patched in place by a replay). A program that reads
  images needs `tex_va`: its descriptors there, then its samplers (texture_block's layout)."""
  if code_va % INSTR_UNIT: raise ValueError(f"shader code at {code_va:#x} is not {INSTR_UNIT}-byte aligned (SP_CS_OBJ_START)")
  gx, gy, gz = tuple(global_size) + (1,) * (3 - len(global_size))
  lx, ly, lz = prg.local_size
  consts = const_block(prg, params if params is not None else b"")
  g = cs.gen
  cs.reg("SP_CS_CTRL_REG0", _f("SP_CS_CTRL_REG0", g, THREADSIZE=THREAD64, FULLREGFOOTPRINT=prg.max_reg + 1, HALFREGFOOTPRINT=prg.max_half_reg + 1,
                               BRANCHSTACK=prg.branchstack, MERGEDREGS=1))
  cs.reg("SP_CS_UNKNOWN_A9B1", _f("SP_CS_UNKNOWN_A9B1", g, SHARED_SIZE=max((prg.shared_size - 1) // 1024, 1)))
  cs.reg("SP_CS_CONFIG", _f("SP_CS_CONFIG", g, ENABLED=1))
  cs.reg("HLSQ_CS_CNTL", _f("HLSQ_CS_CNTL", g, CONSTLEN=len(consts) // 4, ENABLED=1))
  cs.reg("SP_CS_INSTRLEN", prg.instrlen)
  cs.reg("SP_CS_OBJ_START", code_va & 0xFFFFFFFF, code_va >> 32)
  ids = dict(WGIDCONSTID=prg.wgid_regid, WGSIZECONSTID=0xFC, WGOFFSETCONSTID=0xFC, LOCALIDREGID=prg.lid_regid)
  cs.reg("SP_CS_CNTL_0", _f("SP_CS_CNTL_0", g, **ids))
  if g == 6: cs.reg("HLSQ_CS_CNTL_0", _f("HLSQ_CS_CNTL_0", g, **ids))
  else:   # a7xx (turnip tu6_emit_cs_config A7XX): no HLSQ copy of the ids; the wave size and local size in the SP block too
    cs.reg("SP_CS_CNTL_1", _f("SP_CS_CNTL_1", g, LINEARLOCALIDREGID=0xFC, THREADSIZE=THREAD64))
    cs.reg("HLSQ_CS_CNTL_1", _f("HLSQ_CS_CNTL_1", g, LINEARLOCALIDREGID=0xFC, THREADSIZE=THREAD64))
    cs.reg("HLSQ_CS_LOCAL_SIZE", _f("HLSQ_CS_LOCAL_SIZE", g, LOCALSIZEX=lx - 1, LOCALSIZEY=ly - 1, LOCALSIZEZ=lz - 1))
    cs.reg("SP_CS_UNKNOWN_A9BE", 0)
  cs.reg("HLSQ_CS_NDRANGE_0", _f("HLSQ_CS_NDRANGE_0", g, KERNELDIM=3, LOCALSIZEX=lx - 1, LOCALSIZEY=ly - 1, LOCALSIZEZ=lz - 1),
         lx * gx, 0, ly * gy, 0, lz * gz, 0)
  cs.reg("HLSQ_CS_KERNEL_GROUP_X", 1, 1, 1)
  cs.load_state6("SB6_CS_SHADER", "ST6_SHADER", 0, prg.instrlen, ext_addr=code_va)
  if params is not None: cs.load_state6("SB6_CS_SHADER", "ST6_CONSTANTS", 0, len(consts) // 4, data=consts)
  else:
    if consts_va is None or consts_va & 3: raise ValueError(f"constants at {consts_va}: need a dword-aligned GPU address")
    cs.load_state6("SB6_CS_SHADER", "ST6_CONSTANTS", 0, len(consts) // 4, ext_addr=consts_va)
  if prg.images:
    if tex_va is None: raise ValueError(f"the program reads {len(prg.images)} images: its dispatch needs their descriptors (tex_va)")
    emit_textures(cs, prg.tex_count, tex_va, tex_va + 64 * prg.tex_count)
  return cs.exec_cs(gx, gy, gz)


def texture_block(prg: Ir3Program, bufs: list[tuple[int, int]]) -> list[int]:
  """The descriptors (tex_count x 16 dwords) then the samplers (tex_count x 4) of a dispatch of `prg`, from the
  (GPU address, bytes) of each of its buffer parameters."""
  from baregrad.drivers.qcom.texture import tex_const, tex_samp
  n = prg.tex_count
  words = [0] * (20 * n)
  for param, slot, fmt in prg.images:
    if bufs[param][1]: words[16 * slot:16 * slot + 16] = tex_const(bufs[param][0], bufs[param][1], fmt)   # (0 bytes: left zero)
  for slot in range(n): words[16 * n + 4 * slot:16 * n + 4 * slot + 4] = tex_samp()
  return words


def shader_bytes(prg: Ir3Program) -> bytes:
  """The code as it is placed in GPU memory: padded to whole SP_CS_INSTRLEN units."""
  return prg.code + b"\0" * (prg.instrlen * INSTR_UNIT - len(prg.code)) if len(prg.code) <= prg.instrlen * INSTR_UNIT else prg.code
