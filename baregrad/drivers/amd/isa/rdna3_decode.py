"""Decoder of RDNA3 (gfx1100) machine code: bytes -> Inst (encoding, opcode, operands, size), and Inst.text() in
LLVM's assembly syntax (what `llc`/llvm-objdump print for gfx1100, checked instruction by instruction against LLVM's
own output for every kernel of a corpus in tests/drivers/amd/test_rdna3_decode.py).

Encodings (AMD "RDNA3 Instruction Set Architecture", chapter "Microcode Formats"), told apart by the top bits of the
first dword:
  SOP2 10xxxxxx (op 7b), SOPK 1011 (op 5b), SOP1 1011_1110_1, SOPC 1011_1111_0, SOPP 1011_1111_1,
  SMEM 111101 (64b), VOP2 0 (op 6b), VOP1 0111111, VOPC 0111110, VOP3/VOP3SD 110101 (64b), VOP3P 11001100 (64b),
  VOPD 110010 (64b), DS 110110 (64b), FLAT/GLOBAL/SCRATCH 110111 (64b, SEG picks which), MUBUF 111000 (64b).
A source operand of 255 is a 32-bit literal dword after the instruction (one per instruction, VOP3 and VOPD included);
v_fmamk/v_fmaak and their VOPD forms always carry one.

Operand codes (9-bit VALU sources, 8-bit SALU ones): 0-105 s0-s105, 106/107 vcc_lo/hi, 108-123 ttmp0-15, 124 null,
125 m0, 126/127 exec_lo/hi, 128-192 the integers 0..64, 193-208 -1..-16, 235-238 src_shared_base/limit and
src_private_base/limit, 240-247 +-0.5 +-1.0 +-2.0 +-4.0, 248 1/(2*pi), 251 src_vccz, 252 src_execz, 253 src_scc,
255 literal, 256-511 v0-v255.

True 16-bit instructions (gfx11): a 16-bit VGPR operand of a VOP1/VOP2/VOPC encoding names the low or high half
with bit 7 of its register number (v0.l, v0.h; only v0-v127 reach 16-bit halves there); in VOP3 the OP_SEL bits say it
(bit 3 for the destination). LLVM prints such operands as vN.l / vN.h.
"""
from __future__ import annotations
import re, struct
from dataclasses import dataclass, field
from baregrad.drivers.amd.isa import rdna3_opcodes as T

class DecodeError(ValueError):
  """Bytes that are not an instruction this decoder knows: names the offset and the dword(s)."""

# ---- operand types of VALU instructions, from their names (overrides where the name does not say it all)
_TY = re.compile(r"_([fiub])(8|16|24|32|64|128)$")

def _w(t: str) -> int:
  """Register bits of an operand type ('f32' -> 32; 24- and 8-bit integer forms live in 32-bit registers)."""
  if t == "mask": return 32
  n = int(t[1:])
  return 32 if n in (8, 24) else n

_SIG: dict[str, tuple[str | None, tuple[str, ...]]] = {
  "v_lshlrev_b64": ("b64", ("u32", "b64")), "v_lshrrev_b64": ("b64", ("u32", "b64")), "v_ashrrev_i64": ("i64", ("u32", "i64")),
  "v_ldexp_f32": ("f32", ("f32", "i32")), "v_ldexp_f64": ("f64", ("f64", "i32")), "v_ldexp_f16": ("f16", ("f16", "i16")),
  "v_trig_preop_f64": ("f64", ("f64", "u32")),
  "v_mad_u64_u32": ("u64", ("u32", "u32", "u64")), "v_mad_i64_i32": ("i64", ("i32", "i32", "i64")),
  "v_frexp_exp_i32_f64": ("i32", ("f64",)), "v_frexp_exp_i32_f32": ("i32", ("f32",)), "v_frexp_exp_i16_f16": ("i16", ("f16",)),
  "v_mad_u32_u16": ("u32", ("u16", "u16", "u32")), "v_mad_i32_i16": ("i32", ("i16", "i16", "i32")),
  "v_cndmask_b32": ("b32", ("b32", "b32", "mask")), "v_cndmask_b16": ("b16", ("b16", "b16", "mask")),
  "v_add_co_ci_u32": ("u32", ("u32", "u32", "mask")), "v_sub_co_ci_u32": ("u32", ("u32", "u32", "mask")),
  "v_subrev_co_ci_u32": ("u32", ("u32", "u32", "mask")),
  "v_pack_b32_f16": ("b32", ("f16", "f16")), "v_dot2_f16_f16": ("f16", ("b32", "b32", "f16")),
  "v_dot2_bf16_bf16": ("b16", ("b32", "b32", "b16")), "v_sat_pk_u8_i16": ("b16", ("b32",)),
  "v_qsad_pk_u16_u8": ("b64", ("b64", "b32", "b64")), "v_mqsad_pk_u16_u8": ("b64", ("b64", "b32", "b64")),
  "v_mqsad_u32_u8": ("b128", ("b64", "b32", "b128")), "v_cvt_pk_u8_f32": ("b32", ("f32", "u32", "u32")),
  "v_readlane_b32": ("b32", ("b32", "u32")), "v_writelane_b32": ("b32", ("b32", "u32")),
  "v_fma_mix_f32": ("b32", ("b32", "b32", "b32")), "v_fma_mixlo_f16": ("b32", ("b32", "b32", "b32")),
  "v_fma_mixhi_f16": ("b32", ("b32", "b32", "b32")), "v_msad_u8": ("u32", ("u32", "u32", "u32")),
  "v_sad_u16": ("u32", ("u32", "u32", "u32")), "v_sad_u8": ("u32", ("u32", "u32", "u32")), "v_sad_hi_u8": ("u32", ("u32", "u32", "u32")),
  "v_lerp_u8": ("u32", ("u32", "u32", "u32")), "v_dot2acc_f32_f16": ("f32", ("b32", "b32")),
  "v_cvt_pk_rtz_f16_f32": ("b32", ("f32", "f32")), "v_mbcnt_lo_u32_b32": ("u32", ("u32", "u32")), "v_mbcnt_hi_u32_b32": ("u32", ("u32", "u32")),
}

def vop_sig(name: str) -> tuple[str | None, tuple[str, ...]]:
  """(destination type or None, source types) of a VALU instruction by its base name (no _e32/_e64); 'mask' is a
  lane mask in an SGPR (vcc_lo in wave32)."""
  n = re.sub(r"_e(32|64)$", "", name)
  if n in _SIG: return _SIG[n]
  if n.startswith(("v_cmp_", "v_cmpx_")):
    t = _TY.search(n).group(0)[1:]  # type: ignore[union-attr]
    return ("mask" if n.startswith("v_cmp_") else None), ((t, "u16" if t == "f16" else "u32") if "_class_" in n else (t, t))
  if n.startswith("v_cvt_"):
    rest = re.sub(r"^(nearest_|floor_|norm_|off_)", "", n[len("v_cvt_"):])
    if rest.startswith("pk_"):
      src = rest.split("_")[-1]
      return "b32", (src, src)
    if rest.startswith("f32_ubyte"): return "f32", ("u32",)
    if rest == "f32_i4": return "f32", ("u32",)
    a, b = rest.split("_")[-2:]
    return a, (b,)
  if n.startswith("v_pk_") or n.startswith(("v_dot4", "v_dot8", "v_dot2_f32")): return "b32", ("b32", "b32", "b32")
  m = _TY.search(n)
  t = m.group(0)[1:] if m else "b32"
  return t, (t, t, t)

def is_t16(t: str | None) -> bool: return t is not None and t != "mask" and _w(t) == 16

# ---- operands
@dataclass
class Operand:
  """kind: 'v' VGPR, 's' scalar register or special source (by its code), 'c' inline constant (by its code),
  'l' literal, 'k' an immediate field. bits: the operand's width. hi: the high half of a 16-bit VGPR."""
  kind: str
  val: int
  bits: int = 32
  hi: bool = False
  t16: bool = False
  neg: bool = False
  abs: bool = False

  def text(self) -> str:
    s = self._base()
    if self.abs: s = f"|{s}|"
    return ("-" + s) if self.neg else s
  def _base(self) -> str:
    if self.kind == "v":
      if self.bits == 16 and self.t16: return f"v{self.val}.{'h' if self.hi else 'l'}"
      n = max(1, self.bits // 32)
      return f"v{self.val}" if n == 1 else f"v[{self.val}:{self.val + n - 1}]"
    if self.kind == "s": return sreg_name(self.val, max(1, self.bits // 32))
    if self.kind == "c": return inline_text(self.val, self.bits)
    if self.kind == "l": return f"0x{self.val & 0xFFFF:x}" if self.bits == 16 else f"0x{self.val:x}"
    return f"0x{self.val:x}"

_SPECIAL = {106: "vcc_lo", 107: "vcc_hi", 124: "null", 125: "m0", 126: "exec_lo", 127: "exec_hi", 235: "src_shared_base",
            236: "src_shared_limit", 237: "src_private_base", 238: "src_private_limit", 251: "src_vccz", 252: "src_execz",
            253: "src_scc", 254: "src_lds_direct"}

def sreg_name(code: int, n: int = 1) -> str:
  if code <= 105: return f"s{code}" if n == 1 else f"s[{code}:{code + n - 1}]"
  if 108 <= code <= 123: return f"ttmp{code - 108}" if n == 1 else f"ttmp[{code - 108}:{code - 108 + n - 1}]"
  if n == 2 and code in (106, 126): return {106: "vcc", 126: "exec"}[code]
  if code in _SPECIAL: return _SPECIAL[code]
  raise DecodeError(f"scalar operand code {code} is not a register")

_FLOATS = {240: 0.5, 241: -0.5, 242: 1.0, 243: -1.0, 244: 2.0, 245: -2.0, 246: 4.0, 247: -4.0}

def inline_text(code: int, bits: int = 32) -> str:
  if 128 <= code <= 192: return str(code - 128)
  if 193 <= code <= 208: return str(192 - code)
  if code in _FLOATS: return repr(_FLOATS[code])
  if code == 248: return "0.15915494309189532" if bits == 64 else "0.15915494"
  raise DecodeError(f"operand code {code} is not an inline constant")

# inline constant values as bit patterns of each width (float ones are the constant in that format)
_F16 = {240: 0x3800, 241: 0xB800, 242: 0x3C00, 243: 0xBC00, 244: 0x4000, 245: 0xC000, 246: 0x4400, 247: 0xC400, 248: 0x3118}
_F32 = {240: 0x3F000000, 241: 0xBF000000, 242: 0x3F800000, 243: 0xBF800000, 244: 0x40000000, 245: 0xC0000000,
        246: 0x40800000, 247: 0xC0800000, 248: 0x3E22F983}
_F64 = {240: 0x3FE0000000000000, 241: 0xBFE0000000000000, 242: 0x3FF0000000000000, 243: 0xBFF0000000000000,
        244: 0x4000000000000000, 245: 0xC000000000000000, 246: 0x4010000000000000, 247: 0xC010000000000000,
        248: 0x3FC45F306DC9C882}

def inline_value(code: int, bits: int) -> int:
  """The bits an inline constant stands for in an operand of `bits` (integers sign-extended to the width)."""
  mask = (1 << bits) - 1
  if 128 <= code <= 192: return code - 128
  if 193 <= code <= 208: return (192 - code) & mask
  tab = {16: _F16, 32: _F32, 64: _F64}.get(bits, _F32)
  if code in tab: return tab[code]
  raise DecodeError(f"operand code {code} is not an inline constant")

# ---- instructions
@dataclass
class Inst:
  offset: int
  size: int
  enc: str                      # SOP1 SOP2 SOPC SOPK SOPP SMEM VOP1 VOP2 VOPC VOP3 VOP3SD VOP3P VOPD DS FLAT GLOBAL SCRATCH MUBUF
  op: int
  name: str                     # LLVM's mnemonic (with _e32/_e64 where LLVM prints one)
  words: tuple[int, ...]
  dst: list[Operand] = field(default_factory=list)     # destinations (VOP3SD: [vdst, sdst])
  src: list[Operand] = field(default_factory=list)
  mods: dict = field(default_factory=dict)             # clamp, omod, op_sel, op_sel_hi, offset, glc, ... per encoding
  y: Inst | None = None                                # VOPD: the Y half (self is the X half)

  @property
  def base(self) -> str:
    """The mnemonic without LLVM's _e32/_e64 suffix."""
    return re.sub(r"_e(32|64)$", "", self.name)
  @property
  def encoding_hex(self) -> str: return " ".join(f"{w:08x}" for w in self.words)

  def text(self, labels: dict[int, str] | None = None) -> str:
    """The instruction as LLVM prints it; branch targets by `labels` (byte offset -> name), else as simm16."""
    ops = _operands_text(self, labels)
    s = self.name + (" " + ops if ops else "")
    if self.y is not None: s += " :: " + self.y.text(labels)
    return s

  def __str__(self) -> str: return f"{self.offset:#06x}: {self.text():60s} // {self.encoding_hex}"

def _dw(code: bytes, off: int, k: int = 0) -> int:
  """Dword k bytes into the instruction at `off`."""
  if off + k + 4 > len(code): raise DecodeError(f"offset {off:#x}: instruction runs past the end of the code ({len(code)} bytes)")
  return struct.unpack_from("<I", code, off + k)[0]

def _sign(v: int, bits: int) -> int: return v - (1 << bits) if v >> (bits - 1) & 1 else v

def decode(code: bytes, off: int = 0) -> Inst:
  """The instruction at byte offset `off` of `code`."""
  w0 = _dw(code, off)
  top = w0 >> 23
  if top == 0x17D: return _sop1(code, off, w0)
  if top == 0x17E: return _sopc(code, off, w0)
  if top == 0x17F: return _sopp(code, off, w0)
  if w0 >> 28 == 0xB: return _sopk(code, off, w0)
  if w0 >> 30 == 0b10: return _sop2(code, off, w0)
  if w0 >> 25 == 0x3F: return _vop1(code, off, w0)
  if w0 >> 25 == 0x3E: return _vopc(code, off, w0)
  if w0 >> 31 == 0: return _vop2(code, off, w0)
  e6 = w0 >> 26
  if e6 == 0b111101: return _smem(code, off, w0)
  if e6 == 0b110101: return _vop3(code, off, w0)
  if w0 >> 24 == 0b11001100: return _vop3p(code, off, w0)
  if e6 == 0b110010: return _vopd(code, off, w0)
  if e6 == 0b110110: return _ds(code, off, w0)
  if e6 == 0b110111: return _flat(code, off, w0)
  if e6 == 0b111000: return _mubuf(code, off, w0)
  raise DecodeError(f"offset {off:#x}: dword {w0:08x} is no RDNA3 encoding this decoder knows")

def disassemble(code: bytes, start: int = 0, end: int | None = None) -> list[Inst]:
  """Every instruction of code[start:end], in order."""
  out, off, end = [], start, len(code) if end is None else end
  while off < end:
    i = decode(code, off)
    out.append(i); off += i.size
  return out

def _name(table: dict, op: int, enc: str, off: int, w: int) -> str:
  n = table.get(op)
  if n is None: raise DecodeError(f"offset {off:#x}: {enc} opcode {op} (dword {w:08x}) is not an RDNA3 instruction")
  return n

# -- scalar
_S64 = re.compile(r"_[biu]64$")
def _salu_bits(name: str) -> tuple[int, int, int]:
  """(dst bits, src0 bits, src1 bits) of a SOP1/SOP2/SOPC instruction."""
  two = re.search(r"_([biu])(32|64)_([biu])(8|16|32|64)$", name)
  if two and name not in ("s_bitreplicate_b64_b32",):
    return int(two.group(2)), (32 if int(two.group(4)) < 32 else int(two.group(4))), 32
  if name == "s_bitreplicate_b64_b32" or name == "s_bfm_b64": return 64, 32, 32
  if name in ("s_lshl_b64", "s_lshr_b64", "s_ashr_i64", "s_bfe_u64", "s_bfe_i64", "s_bitcmp0_b64", "s_bitcmp1_b64"): return 64, 64, 32
  if name in ("s_bitset0_b64", "s_bitset1_b64"): return 64, 32, 32
  if name == "s_cls_i32_i64": return 32, 64, 32
  b = 64 if _S64.search(name) else 32
  return b, b, b

def _ssrc(code_: bytes, off: int, v: int, bits: int, lit: list) -> Operand:
  if v == 255:
    if not lit: lit.append(_dw(code_, off, 4))
    return Operand("l", lit[0], bits)
  if 128 <= v <= 208 or 240 <= v <= 248: return Operand("c", v, bits)
  return Operand("s", v, bits)

def _sop1(code: bytes, off: int, w: int) -> Inst:
  op = (w >> 8) & 0xFF
  n = _name(T.SOP1, op, "SOP1", off, w)
  db, sb, _ = _salu_bits(n)
  lit: list = []
  i = Inst(off, 4, "SOP1", op, n, (w,))
  if n not in ("s_setpc_b64", "s_rfe_b64"): i.dst = [Operand("s", (w >> 16) & 0x7F, db)]
  if n != "s_getpc_b64": i.src = [_ssrc(code, off, w & 0xFF, sb, lit)]
  return _lit(i, code, lit)

def _lit(i: Inst, code: bytes, lit: list) -> Inst:
  if lit: i.size += 4; i.words = i.words + (lit[0],)
  return i

def _sop2(code: bytes, off: int, w: int) -> Inst:
  op = (w >> 23) & 0x7F
  n = _name(T.SOP2, op, "SOP2", off, w)
  db, s0, s1 = _salu_bits(n)
  if n in ("s_lshl_b64", "s_lshr_b64", "s_ashr_i64", "s_bfe_u64", "s_bfe_i64"): s1 = 32
  if n == "s_bfm_b64": s0 = 32
  lit: list = []
  i = Inst(off, 4, "SOP2", op, n, (w,), [Operand("s", (w >> 16) & 0x7F, db)],
           [_ssrc(code, off, w & 0xFF, s0, lit), _ssrc(code, off, (w >> 8) & 0xFF, s1, lit)])
  return _lit(i, code, lit)

def _sopc(code: bytes, off: int, w: int) -> Inst:
  op = (w >> 16) & 0x7F
  n = _name(T.SOPC, op, "SOPC", off, w)
  _, s0, s1 = _salu_bits(n)
  if n in ("s_bitcmp0_b64", "s_bitcmp1_b64"): s1 = 32
  lit: list = []
  i = Inst(off, 4, "SOPC", op, n, (w,), [], [_ssrc(code, off, w & 0xFF, s0, lit), _ssrc(code, off, (w >> 8) & 0xFF, s1, lit)])
  return _lit(i, code, lit)

def _sopk(code: bytes, off: int, w: int) -> Inst:
  op = (w >> 23) & 0x1F
  n = _name(T.SOPK, op, "SOPK", off, w)
  i = Inst(off, 4, "SOPK", op, n, (w,), [Operand("s", (w >> 16) & 0x7F, 32)], [Operand("k", w & 0xFFFF, 16)])
  if n in ("s_setreg_imm32_b32",): i.size = 8
  return i

_BRANCH = {"s_branch", "s_cbranch_scc0", "s_cbranch_scc1", "s_cbranch_vccz", "s_cbranch_vccnz", "s_cbranch_execz",
           "s_cbranch_execnz", "s_cbranch_cdbgsys", "s_cbranch_cdbguser", "s_cbranch_cdbgsys_or_user", "s_cbranch_cdbgsys_and_user"}

def _sopp(code: bytes, off: int, w: int) -> Inst:
  op = (w >> 16) & 0x7F
  n = _name(T.SOPP, op, "SOPP", off, w)
  i = Inst(off, 4, "SOPP", op, n, (w,), [], [Operand("k", w & 0xFFFF, 16)])
  if n in _BRANCH: i.mods["target"] = off + 4 + 4 * _sign(w & 0xFFFF, 16)
  return i

def _smem(code: bytes, off: int, w: int) -> Inst:
  w1 = _dw(code, off, 4)
  op = (w >> 18) & 0xFF
  n = _name(T.SMEM, op, "SMEM", off, w)
  sdata, sbase = (w >> 6) & 0x7F, (w & 0x3F) * 2
  nd = {"b32": 1, "b64": 2, "b128": 4, "b256": 8, "b512": 16}.get(n.rsplit("_", 1)[-1], 1)
  i = Inst(off, 8, "SMEM", op, n, (w, w1))
  if n.startswith(("s_load", "s_buffer_load")):
    i.dst = [Operand("s", sdata, 32 * nd)]
    i.src = [Operand("s", sbase, 128 if n.startswith("s_buffer") else 64)]
  i.mods.update(offset=_sign(w1 & 0x1FFFFF, 21), soffset=(w1 >> 25) & 0x7F, glc=(w >> 14) & 1, dlc=(w >> 13) & 1)
  return i

# -- vector
def _vsrc(code: bytes, off: int, v: int, t: str, lit: list, lit_off: int) -> Operand:
  """A 9-bit VALU source of type t (16-bit VGPRs of VOP1/2/C encodings: bit 7 picks the half, see the docstring)."""
  bits = _w(t)
  if v >= 256: return Operand("v", v - 256, bits, t16=is_t16(t))
  if v == 255:
    if not lit: lit.append(_dw(code, off, lit_off))
    return Operand("l", lit[0], bits)
  if 128 <= v <= 208 or 240 <= v <= 248: return Operand("c", v, bits)
  return Operand("s", v, bits)

def _half(o: Operand, enc_field: int | None = None, hi: bool | None = None) -> Operand:
  """A 16-bit VGPR operand: the half from bit 7 of its register field (VOP1/2/C) or from op_sel (VOP3)."""
  if o.kind == "v" and o.t16:
    if hi is not None: o.hi = hi
    else: o.hi, o.val = bool(o.val & 0x80), o.val & 0x7F
  return o

def _vop1(code: bytes, off: int, w: int) -> Inst:
  op = (w >> 9) & 0xFF
  n = _name(T.VOP1, op, "VOP1", off, w)
  i = Inst(off, 4, "VOP1", op, n, (w,))
  if n in ("v_nop", "v_pipeflush"): return i
  dt, st = vop_sig(n)
  lit: list = []
  vd = (w >> 17) & 0xFF
  if n == "v_readfirstlane_b32": i.dst = [Operand("s", vd, 32)]
  else: i.dst = [_half(Operand("v", vd, _w(dt or "b32"), t16=is_t16(dt)))]
  i.src = [_half(_vsrc(code, off, w & 0x1FF, st[0], lit, 4))]
  return _lit(i, code, lit)

_FMAK = {"v_fmamk_f32", "v_fmaak_f32", "v_fmamk_f16", "v_fmaak_f16"}

def _vop2(code: bytes, off: int, w: int) -> Inst:
  op = (w >> 25) & 0x3F
  n = _name(T.VOP2, op, "VOP2", off, w)
  dt, st = vop_sig(n)
  lit: list = []
  i = Inst(off, 4, "VOP2", op, n, (w,))
  i.dst = [_half(Operand("v", (w >> 17) & 0xFF, _w(dt or "b32"), t16=is_t16(dt)))]
  s0 = _half(_vsrc(code, off, w & 0x1FF, st[0], lit, 4))
  s1 = _half(Operand("v", (w >> 9) & 0xFF, _w(st[1]), t16=is_t16(st[1])))
  i.src = [s0, s1]
  if n in _FMAK:
    if not lit: lit.append(_dw(code, off, 4))
    k = Operand("l", lit[0], _w(dt or "b32"))
    i.src = [s0, k, s1] if "fmamk" in n else [s0, s1, k]
  elif n in ("v_cndmask_b32_e32", "v_add_co_ci_u32_e32", "v_sub_co_ci_u32_e32", "v_subrev_co_ci_u32_e32"):
    i.src.append(Operand("s", 106, 32))           # vcc_lo
    if "_co_ci_" in n: i.dst.append(Operand("s", 106, 32))
  return _lit(i, code, lit)

def _vopc(code: bytes, off: int, w: int) -> Inst:
  op = (w >> 17) & 0xFF
  n = _name(T.VOPC, op, "VOPC", off, w)
  _, st = vop_sig(n)
  lit: list = []
  i = Inst(off, 4, "VOPC", op, n, (w,))
  i.src = [_half(_vsrc(code, off, w & 0x1FF, st[0], lit, 4)), _half(Operand("v", (w >> 9) & 0xFF, _w(st[1]), t16=is_t16(st[1])))]
  i.dst = [Operand("s", 106, 32)] if n.startswith("v_cmp_") else []   # v_cmpx writes EXEC
  return _lit(i, code, lit)

_VOP3SD = {"v_div_scale_f32", "v_div_scale_f64", "v_mad_u64_u32", "v_mad_i64_i32", "v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32",
           "v_add_co_ci_u32_e64", "v_sub_co_ci_u32_e64", "v_subrev_co_ci_u32_e64"}

def _vop3_name(op: int) -> str | None:
  if op < 256: n = T.VOPC.get(op)
  elif op < 384: n = T.VOP2.get(op - 256)
  elif op < 512: n = T.VOP1.get(op - 384)
  else: return T.VOP3.get(op)
  return n.replace("_e32", "_e64") if n is not None and n.endswith("_e32") else None

def _vop3(code: bytes, off: int, w: int) -> Inst:
  w1 = _dw(code, off, 4)
  op = (w >> 16) & 0x3FF
  n = _vop3_name(op)
  if n is None: raise DecodeError(f"offset {off:#x}: VOP3 opcode {op} (dword {w:08x}) is not an RDNA3 instruction")
  sd = n in _VOP3SD
  dt, st = vop_sig(n)
  base = re.sub(r"_e64$", "", n)
  if op < 256: nsrc = 2
  elif op < 384: nsrc = 3 if base in ("v_cndmask_b32", "v_add_co_ci_u32", "v_sub_co_ci_u32", "v_subrev_co_ci_u32") else 2
  elif op < 512: nsrc = 1
  else: nsrc = 3 if op < 768 else 2
  i = Inst(off, 8, "VOP3SD" if sd else "VOP3", op, n, (w, w1))
  opsel = 0 if sd else (w >> 11) & 0xF
  absm = 0 if sd else (w >> 8) & 0x7
  neg = (w1 >> 29) & 0x7
  lit: list = []
  srcs = []
  for k in range(nsrc):
    o = _vsrc(code, off, (w1 >> (9 * k)) & 0x1FF, st[k] if k < len(st) else "b32", lit, 8)
    if o.kind == "v" and o.t16: o.hi = bool(opsel >> k & 1)
    o.neg, o.abs = bool(neg >> k & 1), bool(absm >> k & 1)
    srcs.append(o)
  i.src = srcs
  vd = w & 0xFF
  if base.startswith("v_cmpx_"): i.dst = []
  elif base.startswith("v_cmp_") or base == "v_readlane_b32": i.dst = [Operand("s", vd, 32)]
  else:
    d = Operand("v", vd, _w(dt or "b32"), t16=is_t16(dt))
    if d.t16: d.hi = bool(opsel >> 3 & 1)
    i.dst = [d]
  if sd: i.dst.append(Operand("s", (w >> 8) & 0x7F, 32))
  i.mods.update(clamp=(w >> 15) & 1, omod=(w1 >> 27) & 3, op_sel=opsel)
  return _lit(i, code, lit)

def _vop3p(code: bytes, off: int, w: int) -> Inst:
  w1 = _dw(code, off, 4)
  op = (w >> 16) & 0x7F
  n = _name(T.VOP3P, op, "VOP3P", off, w)
  _, st = vop_sig(n)
  nsrc = 3 if any(x in n for x in ("mad", "fma", "dot")) else 2
  lit: list = []
  i = Inst(off, 8, "VOP3P", op, n, (w, w1), [Operand("v", w & 0xFF, 32)])
  i.src = [_vsrc(code, off, (w1 >> (9 * k)) & 0x1FF, "b32", lit, 8) for k in range(nsrc)]
  i.mods.update(op_sel=(w >> 11) & 7, op_sel_hi=((w1 >> 27) & 3) | (((w >> 14) & 1) << 2), neg=(w1 >> 29) & 7,
                neg_hi=(w >> 8) & 7, clamp=(w >> 15) & 1, nsrc=nsrc)
  return _lit(i, code, lit)

_VOPD_Y_ONLY = {16, 17, 18}

def _vopd(code: bytes, off: int, w: int) -> Inst:
  w1 = _dw(code, off, 4)
  opx, opy = (w >> 22) & 0xF, (w >> 17) & 0x1F
  nx = _name(T.VOPDX, opx, "VOPD X", off, w)
  ny = _name(T.VOPDY, opy, "VOPD Y", off, w)
  lit: list = []
  vdx = (w1 >> 24) & 0xFF
  vdy = (((w1 >> 17) & 0x7F) << 1) | ((vdx & 1) ^ 1)     # VDSTY holds bits 7:1; bit 0 is the opposite of VDSTX's
  def half(nm: str, opc: int, s0: int, vs1: int, vd: int) -> Inst:
    h = Inst(off, 8, "VOPD", opc, nm, (w, w1), [Operand("v", vd, 32)])
    a = _vsrc(code, off, s0, "b32", lit, 8)
    b = Operand("v", vs1, 32)
    if nm == "v_dual_mov_b32": h.src = [a]
    elif nm == "v_dual_fmamk_f32" or nm == "v_dual_fmaak_f32":
      if not lit: lit.append(_dw(code, off, 8))
      k = Operand("l", lit[0], 32)
      h.src = [a, k, b] if "fmamk" in nm else [a, b, k]
    else: h.src = [a, b]
    return h
  x = half(nx, opx, w & 0x1FF, (w >> 9) & 0xFF, vdx)
  y = half(ny, opy, w1 & 0x1FF, (w1 >> 9) & 0xFF, vdy)
  x.y = y
  if lit: x.size = y.size = 12; x.words = y.words = (w, w1, lit[0])
  return x

# -- memory
def _ds(code: bytes, off: int, w: int) -> Inst:
  w1 = _dw(code, off, 4)
  op = (w >> 18) & 0xFF
  n = _name(T.DS, op, "DS", off, w)
  addr, d0, d1, vd = w1 & 0xFF, (w1 >> 8) & 0xFF, (w1 >> 16) & 0xFF, (w1 >> 24) & 0xFF
  width = {"b64": 64, "b96": 96, "b128": 128, "u64": 64, "i64": 64, "f64": 64}.get(n.split("_")[-1], 32)
  i = Inst(off, 8, "DS", op, n, (w, w1))
  i.mods.update(offset0=w & 0xFF, offset1=(w >> 8) & 0xFF, gds=(w >> 17) & 1)
  is_load = n.startswith("ds_load") or "_rtn_" in n or n in ("ds_swizzle_b32", "ds_permute_b32", "ds_bpermute_b32")
  two = "2addr" in n
  if is_load:
    dw = width * (2 if two and "storexchg" not in n else 1)
    if "storexchg_2addr" in n: dw = width * 2
    i.dst = [Operand("v", vd, dw)]
  srcs = [Operand("v", addr, 32)]
  if not n.startswith("ds_load") and n not in ("ds_swizzle_b32", "ds_nop", "ds_consume", "ds_append"):
    srcs.append(Operand("v", d0, width))
    if two or any(x in n for x in ("cmpstore", "mskor", "wrap")): srcs.append(Operand("v", d1, width))
  if n in ("ds_permute_b32", "ds_bpermute_b32"): srcs = [Operand("v", addr, 32), Operand("v", d0, 32)]
  i.src = srcs
  return i

_FLAT_W = {"u8": 32, "i8": 32, "u16": 32, "i16": 32, "b8": 32, "b16": 32, "b32": 32, "b64": 64, "b96": 96, "b128": 128,
           "u32": 32, "i32": 32, "f32": 32, "u64": 64, "i64": 64}

def _flat(code: bytes, off: int, w: int) -> Inst:
  w1 = _dw(code, off, 4)
  seg = (w >> 16) & 3
  op = (w >> 18) & 0x7F
  enc = {0: "FLAT", 1: "SCRATCH", 2: "GLOBAL"}.get(seg)
  if enc is None: raise DecodeError(f"offset {off:#x}: FLAT segment 3 (dword {w:08x}) is reserved")
  n = _name(getattr(T, enc), op, enc, off, w)
  addr, data, saddr, sve, vd = w1 & 0xFF, (w1 >> 8) & 0xFF, (w1 >> 16) & 0x7F, (w1 >> 23) & 1, (w1 >> 24) & 0xFF
  i = Inst(off, 8, enc, op, n, (w, w1))
  offset = (w & 0xFFF) if seg == 0 else _sign(w & 0x1FFF, 13)
  i.mods.update(offset=offset, glc=(w >> 14) & 1, slc=(w >> 15) & 1, dlc=(w >> 13) & 1, saddr=saddr, sve=sve)
  width = _FLAT_W.get(n.split("_")[-1], 32)
  if "cmpswap" in n: width *= 2
  is_store = "_store_" in n
  is_atomic = "_atomic_" in n
  off_saddr = saddr in (0x7C, 0x7D)             # null / off: a 64-bit VGPR address
  if enc == "SCRATCH": va = Operand("v", addr, 32) if sve else None
  else: va = Operand("v", addr, 64 if (enc == "FLAT" or off_saddr) else 32)
  i.mods["vaddr"] = va
  i.mods["sbase"] = None if (enc == "FLAT" or off_saddr) else Operand("s", saddr, 64 if enc == "GLOBAL" else 32)
  if is_store: i.src = [Operand("v", data, width)]
  elif is_atomic:
    i.src = [Operand("v", data, width)]
    if i.mods["glc"]: i.dst = [Operand("v", vd, width // (2 if "cmpswap" in n else 1))]
  else: i.dst = [Operand("v", vd, width)]
  return i

def _mubuf(code: bytes, off: int, w: int) -> Inst:
  w1 = _dw(code, off, 4)
  op = (w >> 18) & 0x7F
  n = _name(T.MUBUF, op, "MUBUF", off, w)
  return Inst(off, 8, "MUBUF", op, n, (w, w1))

# ---- printing
_DELAY_ID = ["NO_DEP", "VALU_DEP_1", "VALU_DEP_2", "VALU_DEP_3", "VALU_DEP_4", "TRANS32_DEP_1", "TRANS32_DEP_2", "TRANS32_DEP_3",
             "FMA_ACCUM_CYCLE_1", "SALU_CYCLE_1", "SALU_CYCLE_2", "SALU_CYCLE_3"]
_DELAY_SKIP = ["SAME", "NEXT", "SKIP_1", "SKIP_2", "SKIP_3", "SKIP_4"]
# s_waitcnt_depctr fields (LLVM's gfx11 DepCtr table): name, low bit, width; a field equal to all ones is not printed
_DEPCTR = [("depctr_hold_cnt", 7, 1), ("depctr_sa_sdst", 0, 1), ("depctr_va_vdst", 12, 4), ("depctr_va_sdst", 9, 3),
           ("depctr_va_ssrc", 8, 1), ("depctr_va_vcc", 1, 1), ("depctr_vm_vsrc", 2, 3)]

def waitcnt_fields(simm: int) -> dict[str, int]:
  """s_waitcnt on gfx11: vmcnt [15:10], lgkmcnt [9:4], expcnt [2:0]."""
  return {"vmcnt": (simm >> 10) & 0x3F, "expcnt": simm & 7, "lgkmcnt": (simm >> 4) & 0x3F}

def _sopp_text(i: Inst, labels: dict[int, str] | None) -> str:
  k = i.src[0].val
  n = i.name
  if n in _BRANCH:
    t = i.mods["target"]
    return labels[t] if labels and t in labels else str(_sign(k, 16))
  if n == "s_waitcnt":
    f = waitcnt_fields(k)
    parts = [f"{nm}({f[nm]})" for nm, mx in (("vmcnt", 0x3F), ("expcnt", 7), ("lgkmcnt", 0x3F)) if f[nm] != mx]
    return " ".join(parts) if parts else "0xffff"
  if n == "s_delay_alu":
    parts = []
    if k & 0xF: parts.append(f"instid0({_DELAY_ID[k & 0xF]})")
    if (k >> 4) & 7: parts.append(f"instskip({_DELAY_SKIP[(k >> 4) & 7]})")
    if (k >> 7) & 0xF: parts.append(f"instid1({_DELAY_ID[(k >> 7) & 0xF]})")
    return " | ".join(parts) if parts else "0"
  if n == "s_waitcnt_depctr":
    parts = [f"{nm}({(k >> lo) & ((1 << wd) - 1)})" for nm, lo, wd in _DEPCTR if (k >> lo) & ((1 << wd) - 1) != (1 << wd) - 1]
    return " ".join(parts) if parts else f"0x{k:x}"
  if n in ("s_endpgm", "s_barrier", "s_code_end", "s_icache_inv", "s_wakeup", "s_endpgm_saved", "s_ttracedata", "s_wait_idle"):
    return "" if k == 0 else str(k)
  if n in ("s_sendmsg", "s_sendmsghalt"):   # gfx11 message ids (LLVM's SendMsg table): 3 frees the wave's VGPRs before s_endpgm
    return {3: "sendmsg(MSG_DEALLOC_VGPRS)", 1: "sendmsg(MSG_INTERRUPT)"}.get(k, f"sendmsg({k & 0xFF}, {(k >> 8) & 7}, {(k >> 11) & 3})")
  if n in ("s_nop", "s_sleep", "s_setprio", "s_trap", "s_incperflevel", "s_decperflevel"): return str(k)
  return f"0x{k:x}"

def _flags(i: Inst, *names: str) -> str:
  return "".join(f" {nm}" for nm in names if i.mods.get(nm))

def _operands_text(i: Inst, labels: dict[int, str] | None) -> str:
  e = i.enc
  if e == "SOPP": return _sopp_text(i, labels)
  if e == "SOPK":
    if i.name == "s_version": return f"0x{i.src[0].val:x}"
    return f"{i.dst[0].text()}, 0x{i.src[0].val:x}"
  if e in ("SOP1", "SOP2", "SOPC"): return ", ".join(o.text() for o in i.dst + i.src)
  if e == "SMEM":
    if not i.dst: return ""
    so = i.mods["soffset"]
    offs = f"0x{i.mods['offset'] & 0x1FFFFF:x}" if i.mods["offset"] >= 0 else str(i.mods["offset"])
    tail = f"{sreg_name(so)} offset:{offs}" if so != 124 else offs
    return f"{i.dst[0].text()}, {i.src[0].text()}, {tail}" + _flags(i, "glc", "dlc")
  if e in ("VOP1", "VOP2", "VOPC", "VOP3", "VOP3SD", "VOPD"):
    ops = [o.text() for o in i.dst + i.src]
    if e in ("VOP3", "VOP3SD"):
      if e == "VOP3SD" and i.dst[-1].val == 124: ops[len(i.dst) - 1] = "null"
      if i.mods.get("clamp"): ops[-1] += " clamp"
      if i.mods.get("omod"): ops[-1] += {1: " mul:2", 2: " mul:4", 3: " div:2"}[i.mods["omod"]]
      if i.mods.get("op_sel") and not any(o.t16 for o in i.dst + i.src):
        n = len(i.src)
        bits = [(i.mods["op_sel"] >> k) & 1 for k in range(n)] + [(i.mods["op_sel"] >> 3) & 1]
        ops[-1] += f" op_sel:[{','.join(map(str, bits))}]"
    return ", ".join(ops)
  if e == "VOP3P":
    n = i.mods["nsrc"]
    mix = i.name.startswith("v_fma_mix")
    def src(k: int) -> str:
      o = i.src[k]
      s = o.text()
      if mix and i.mods["neg_hi"] >> k & 1: s = f"|{s}|"     # fma_mix: NEG_HI is the abs modifier
      return ("-" + s) if i.mods["neg"] >> k & 1 else s
    s = ", ".join([i.dst[0].text()] + [src(k) for k in range(n)])
    osel = [(i.mods["op_sel"] >> k) & 1 for k in range(n)]
    ohi = [(i.mods["op_sel_hi"] >> k) & 1 for k in range(n)]
    if any(osel): s += f" op_sel:[{','.join(map(str, osel))}]"
    if mix:
      if any(ohi): s += f" op_sel_hi:[{','.join(map(str, ohi))}]"
    else:
      if not all(ohi): s += f" op_sel_hi:[{','.join(map(str, ohi))}]"
      if i.mods["neg"]: s += f" neg_lo:[{','.join(str((i.mods['neg'] >> k) & 1) for k in range(n))}]"
      if i.mods["neg_hi"]: s += f" neg_hi:[{','.join(str((i.mods['neg_hi'] >> k) & 1) for k in range(n))}]"
    if i.mods["clamp"]: s += " clamp"
    return s
  if e == "DS":
    ops = [o.text() for o in i.dst + i.src]
    s = ", ".join(ops)
    if "2addr" in i.name:
      if i.mods["offset0"]: s += f" offset0:{i.mods['offset0']}"
      if i.mods["offset1"]: s += f" offset1:{i.mods['offset1']}"
    else:
      o = i.mods["offset0"] | (i.mods["offset1"] << 8)
      if o: s += f" offset:{o}"
    return s + _flags(i, "gds")
  if e in ("FLAT", "GLOBAL", "SCRATCH"):
    va = i.mods["vaddr"].text() if i.mods["vaddr"] is not None else "off"
    ops = [o.text() for o in i.dst] + [va] + [o.text() for o in i.src]
    if e != "FLAT": ops.append(i.mods["sbase"].text() if i.mods["sbase"] is not None else "off")
    s = ", ".join(ops)
    if i.mods["offset"]: s += f" offset:{i.mods['offset']}"
    return s + _flags(i, "glc", "slc", "dlc")
  if e == "MUBUF": return ""
  return ""
