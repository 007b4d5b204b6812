"""The mock Adreno's shader processor for CP_EXEC_CS: reads the compute state the stream set (registers and
CP_LOAD_STATE6 state), checks it against the program it is asked to run, and runs it with the ir3 executor.

The checks are made against the decoded code itself, not against what the driver believes about it, so a driver
that reports a wrong footprint or const length fails here. Sources beside each check: Mesa's a6xx.xml register
descriptions, turnip (tu_pipeline.c tu6_emit_cs_config) and ir3 (ir3_shader.h: the footprint, constlen and branch
stack a variant needs are what the SP must be configured with; ir3.c ir3_collect_info computes them from the code).
"""
from __future__ import annotations

import numpy as np

from baregrad.ctypes_autogen import adreno
from baregrad.drivers.mock.adreno.cp import CP, CPError
from baregrad.drivers.mock.adreno.ir3_exec import Executor, Instr
from baregrad.drivers.mock.adreno.tex import Sampler, Texture, TextureError, decode_tex_const, decode_tex_samp

R, F = adreno.REGS_A6XX, adreno.FIELDS_A6XX
TABLES = {6: (adreno.REGS_A6XX, adreno.FIELDS_A6XX), 7: (adreno.REGS_A7XX, adreno.FIELDS_A7XX)}
SB_CS = adreno.ENUMS["a6xx_state_block"]["SB6_CS_SHADER"]
SB_CS_TEX = adreno.ENUMS["a6xx_state_block"]["SB6_CS_TEX"]
ST = adreno.ENUMS["a6xx_state_type"]
INSTR_UNIT = 128   # a6xx: SP_CS_INSTRLEN and ST6_SHADER units are 128 bytes


def _get(cp: CP, reg: str, field: str | None = None) -> int:
  """Register `reg` (or one field of it) at the offset of the CP's generation (the HLSQ_CS_* state sits in the SP
  block on a7xx: adreno.REGS_A7XX)."""
  regs, fields = TABLES[cp.gen]
  v = cp.regs.get(regs[reg], 0)
  return fields[reg][field].decode(v) if field else v


def _reg(cp: CP, reg: str, k: int = 0) -> int:
  """Dword k of register `reg` at the generation's offset."""
  return cp.regs.get(TABLES[cp.gen][0][reg] + k, 0)


def _highest(prog: list[Instr], kind: str) -> tuple[int, str]:
  """Highest register (vec4 index) of `kind` ('r' full, 'h' half, 'c' const) the code names (-1 if none), and where."""
  hi, where = -1, ""
  for ins in prog:
    for o in ([ins.dst] if ins.dst is not None else []) + ins.srcs:
      for x in (o, o.base):
        # r48+ are sysval/special regs, and r48-r55 / hr48-hr55 the shared (per-wave) registers ir3 uses with its
        # scalar ALU (Mesa ir3.h: shared registers; ir3_collect_info leaves them out of max_reg / max_half_reg); a half
        # const hcN.c is in the slot of cN.c (ir3_exec.py), so it counts as cN
        if x is not None and (x.kind == kind or (kind == "c" and x.kind == "hc")) and not (kind in ("r", "h") and x.idx >= 4 * 48):
          r = (x.idx + (ins.rpt if x.rel or x is ins.dst else 0)) // 4
          if ins.op == "isam":   # cat5 writes each wrmask component at dst + its index; the coordinates are two registers
            r = (x.idx + (ins.wrmask.bit_length() - 1 if x is ins.dst else 1)) // 4
          if r > hi: hi, where = r, f"pc {ins.pc} `{ins.text}`"
  return hi, where


def _tex_unit(cp: CP, stype: int, slot: int, dwords: int, what: str, reg: str, align: int) -> list[int]:
  """The `dwords` of unit `slot` of the SB6_CS_TEX state of type `stype` (samplers: ST6_SHADER, descriptors:
  ST6_CONSTANTS, as freedreno's fd6_emit_textures loads them), direct or from memory."""
  for (block, st, dst), data in cp.state.items():
    if block != SB_CS_TEX or st != stype: continue
    if len(data) == 2:   # indirect: [address, units]
      addr, units = data
      if not dst <= slot < dst + units: continue
      # a6xx.xml SP_CS_TEX_SAMP (align 16) / SP_CS_TEX_CONST (align 64): the address of the state the load brings in; turnip
      # and freedreno (fd6_emit_textures) write the same address to both, so they must agree
      r = _reg(cp, reg) | _reg(cp, reg, 1) << 32
      if r != addr: raise CPError(f"CP_EXEC_CS: {what}s loaded from {addr:#x} (CP_LOAD_STATE6 SB6_CS_TEX) but {reg} is {r:#x}")
      if addr % align: raise CPError(f"CP_EXEC_CS: {reg} {addr:#x} is not {align}-byte aligned (a6xx.xml align={align})")
      return list(np.frombuffer(cp.mem.read(addr + 4 * dwords * (slot - dst), 4 * dwords), np.uint32))
    if dst <= slot and len(data) >= dwords * (slot - dst + 1): return list(data[dwords * (slot - dst):dwords * (slot - dst + 1)])
  # freedreno fd6_emit_textures / turnip: the CS stage's samplers and descriptors are loaded with CP_LOAD_STATE6 SB6_CS_TEX;
  # a slot no load brought in holds nothing the driver set (model's own: refused rather than read as stale state)
  raise CPError(f"CP_EXEC_CS: the shader reads {what} {slot}, but no CP_LOAD_STATE6 SB6_CS_TEX load brought it in")


def _texture_state(cp: CP, prog: list[Instr]) -> tuple[dict[int, Texture], dict[int, Sampler]]:
  """The texture descriptors and samplers the program's isam instructions name, decoded (mock/adreno/tex.py)."""
  used = {ins.tex for ins in prog if ins.op == "isam"}
  if not used: return {}, {}
  count = _get(cp, "SP_CS_TEX_COUNT")
  texs, samps = {}, {}
  for s, t in sorted(used):
    # a6xx.xml SP_CS_TEX_COUNT: the texture slots of the CS stage; fd6_emit_textures sets it to the textures loaded
    if max(s, t) >= count: raise CPError(f"CP_EXEC_CS: the shader samples t#{t} s#{s}, SP_CS_TEX_COUNT is {count}")
    try:
      texs[t] = decode_tex_const(_tex_unit(cp, ST["ST6_CONSTANTS"], t, 16, "texture", "SP_CS_TEX_CONST", 64), t)
      samps[s] = decode_tex_samp(_tex_unit(cp, ST["ST6_SHADER"], s, 4, "sampler", "SP_CS_TEX_SAMP", 16), s)
    except TextureError as e: raise CPError(f"CP_EXEC_CS: {e}") from None
  return texs, samps


def _check_a7xx(cp: CP, local: tuple[int, ...]) -> None:
  """The a7xx compute state turnip's tu6_emit_cs_config (A7XX) writes beside the a6xx one: the workgroup shape again in
  HLSQ_CS_LOCAL_SIZE, the wave size in SP_CS_CNTL_1 and HLSQ_CS_CNTL_1 (both from the variant's, as SP_CS_CTRL_REG0's)."""
  again = tuple(_get(cp, "HLSQ_CS_LOCAL_SIZE", f"LOCALSIZE{a}") + 1 for a in "XYZ")
  # a7xx.xml HLSQ_CS_LOCAL_SIZE; tu6_emit_cs_config (A7XX) writes the same workgroup shape as HLSQ_CS_NDRANGE_0
  if again != local: raise CPError(f"CP_EXEC_CS (a7xx): HLSQ_CS_LOCAL_SIZE says a workgroup of {again}, HLSQ_CS_NDRANGE_0 {local}")
  ts = _get(cp, "SP_CS_CTRL_REG0", "THREADSIZE")
  for reg in ("SP_CS_CNTL_1", "HLSQ_CS_CNTL_1"):
    # a7xx.xml SP_CS_CNTL_1 / HLSQ_CS_CNTL_1 THREADSIZE; tu6_emit_cs_config (A7XX) writes the variant's wave size to all
    if (t := _get(cp, reg, "THREADSIZE")) != ts:
      raise CPError(f"CP_EXEC_CS (a7xx): {reg}.THREADSIZE is {t}, SP_CS_CTRL_REG0.THREADSIZE {ts} (one wave size for the CS stage)")


class ShaderProcessor:
  """CP.dispatch for compute: `ShaderProcessor(executor)(cp, grid)`."""
  def __init__(self, executor: Executor, gen: int = 6) -> None:
    self.ex, self.gen = executor, gen
    self.launches = 0
    self._programs: dict[bytes, tuple[list[Instr], tuple[int, str], tuple[int, str], tuple[int, str]]] = {}

  def _decoded(self, words: np.ndarray) -> tuple[list[Instr], tuple[int, str], tuple[int, str], tuple[int, str]]:
    """The program decoded and the highest full, half and const registers it names (worked out once per program)."""
    key = words.tobytes()
    if (got := self._programs.get(key)) is None:
      prog = self.ex.decode(words)
      if len(self._programs) >= 1024: self._programs.clear()
      got = self._programs[key] = (prog, _highest(prog, "r"), _highest(prog, "h"), _highest(prog, "c"))
    return got

  def __call__(self, cp: CP, grid: tuple[int, int, int]) -> None:
    # a6xx.xml SP_CS_CONFIG.ENABLED / HLSQ_CS_CNTL.ENABLED: a disabled CS stage runs nothing (turnip sets both)
    if not _get(cp, "SP_CS_CONFIG", "ENABLED") or not _get(cp, "HLSQ_CS_CNTL", "ENABLED"):
      raise CPError("CP_EXEC_CS with the CS stage disabled (SP_CS_CONFIG.ENABLED and HLSQ_CS_CNTL.ENABLED must be set)")
    code = cp.state.get((SB_CS, ST["ST6_SHADER"], 0))
    # tu6_emit_cs_config / tu6_emit_xs: the CS program is loaded with CP_LOAD_STATE6 SB6_CS_SHADER ST6_SHADER before a dispatch
    if code is None: raise CPError("CP_EXEC_CS: no shader loaded (CP_LOAD_STATE6 SB6_CS_SHADER/ST6_SHADER at offset 0)")
    instrlen = _get(cp, "SP_CS_INSTRLEN")
    obj = _reg(cp, "SP_CS_OBJ_START") | _reg(cp, "SP_CS_OBJ_START", 1) << 32
    if len(code) == 2:   # indirect: [address, units]
      addr, units = code
      # tu6_emit_cs_config: the state load and SP_CS_OBJ_START name the same code, SP_CS_INSTRLEN units of it
      if addr != obj: raise CPError(f"CP_EXEC_CS: shader loaded from {addr:#x} but SP_CS_OBJ_START is {obj:#x}")
      if units != instrlen: raise CPError(f"CP_EXEC_CS: ST6_SHADER load of {units} units but SP_CS_INSTRLEN is {instrlen}")
      words = np.frombuffer(cp.mem.read(addr, units * INSTR_UNIT), np.uint32)
    else: words = np.asarray(code, np.uint32)
    prog, (hf, wf), (hh, wh), (hc, _) = self._decoded(words)
    # ir3_shader.h: the variant's footprint must fit what SP_CS_CTRL_REG0 grants (registers past it are not there)
    full, half = _get(cp, "SP_CS_CTRL_REG0", "FULLREGFOOTPRINT"), _get(cp, "SP_CS_CTRL_REG0", "HALFREGFOOTPRINT")
    merged = _get(cp, "SP_CS_CTRL_REG0", "MERGEDREGS")
    need_full, need_half = hf + 1, hh + 1
    if merged and (need_half + 1) // 2 > need_full: need_full, wf = (need_half + 1) // 2, wh   # merged file: hrN lives in r(N/2)
    if need_full > full:
      raise CPError(f"CP_EXEC_CS: the shader uses {need_full} full registers ({wf}), SP_CS_CTRL_REG0.FULLREGFOOTPRINT grants {full}")
    # a6xx.xml SP_CS_CTRL_REG0.HALFREGFOOTPRINT (separate half file when MERGEDREGS is clear); ir3_shader.h max_half_reg
    if not merged and need_half > half: raise CPError(f"CP_EXEC_CS: the shader uses {need_half} half registers, HALFREGFOOTPRINT grants {half}")
    # HLSQ_CS_CNTL.CONSTLEN: const vec4s the shader may read; the loaded constants must cover them
    constlen = _get(cp, "HLSQ_CS_CNTL", "CONSTLEN")
    need_c = hc + 1
    if need_c > constlen: raise CPError(f"CP_EXEC_CS: the shader reads c{need_c - 1}, HLSQ_CS_CNTL.CONSTLEN is {constlen} vec4s")
    consts = np.zeros(4 * constlen, np.uint32)
    for (block, stype, dst), data in cp.state.items():
      if block == SB_CS and stype == ST["ST6_CONSTANTS"]:
        if len(data) == 2 and dst + data[1] <= constlen:   # indirect: [address, vec4 units]
          data = list(np.frombuffer(cp.mem.read(data[0], 16 * data[1]), np.uint32))
        n = min(len(data), len(consts) - 4 * dst)
        consts[4 * dst:4 * dst + n] = data[:n]
    local = tuple(_get(cp, "HLSQ_CS_NDRANGE_0", f"LOCALSIZE{a}") + 1 for a in "XYZ")
    # a6xx.xml HLSQ_CS_NDRANGE_1/3/5: GLOBALSIZE is workgroups x local size per axis (turnip tu_dispatch)
    for i, a in enumerate("XYZ"):
      gsz = _reg(cp, "HLSQ_CS_NDRANGE_1", 2 * i)
      if gsz != local[i] * grid[i]:
        raise CPError(f"CP_EXEC_CS grid {grid} x local {local}: HLSQ_CS_NDRANGE GLOBALSIZE_{a} is {gsz}, expected {local[i] * grid[i]}")
    # SP_CS_UNKNOWN_A9B1.SHARED_SIZE: local memory in KiB units minus one (tu6_emit_cs_config); accesses past it fault
    shared = (_get(cp, "SP_CS_UNKNOWN_A9B1", "SHARED_SIZE") + 1) * 1024
    wgid, lid = _get(cp, "SP_CS_CNTL_0", "WGIDCONSTID"), _get(cp, "SP_CS_CNTL_0", "LOCALIDREGID")
    # a6xx.xml SP_CS_CNTL_0 / HLSQ_CS_CNTL_0 WGIDCONSTID, LOCALIDREGID: tu6_emit_cs_config writes the same regids to both
    if cp.gen == 6 and (wgid, lid) != (_get(cp, "HLSQ_CS_CNTL_0", "WGIDCONSTID"), _get(cp, "HLSQ_CS_CNTL_0", "LOCALIDREGID")):
      raise CPError("CP_EXEC_CS: SP_CS_CNTL_0 and HLSQ_CS_CNTL_0 name different workgroup-id / local-id registers")
    if cp.gen >= 7: _check_a7xx(cp, local)
    self.ex.textures, self.ex.samplers = _texture_state(cp, prog)
    self.launches += 1
    self.ex.run_state(prog, consts, local, grid, wgid, lid, shared)
