"""Vector ALU semantics of RDNA3, by LLVM mnemonic (without _e32/_e64), after the ISA guide's pseudocode.

Each entry takes the source operands as raw-bit arrays (uint16/32/64, one row per wave and one column per lane,
already read with their modifiers) and a context (`ctx.mask` the lane-mask operand of v_cndmask / carry-in as bools,
`ctx.ieee` the wave's IEEE mode) and returns the destination's raw bits, or (bits, carry-out bools) for the
instructions that also write a lane mask (VOP3SD)."""
from __future__ import annotations
import numpy as np
from baregrad.drivers.mock.rdna3 import fp
from baregrad.drivers.mock.rdna3.fp import f, u, FT

U16, U32, U64 = np.uint16, np.uint32, np.uint64
I16, I32, I64 = np.int16, np.int32, np.int64

def _i(x: np.ndarray, bits: int) -> np.ndarray: return x.view({16: I16, 32: I32, 64: I64}[bits])
def _bin(fn, bits: int):
  """A float binary op in its own width (NumPy rounds float16/32/64 results correctly)."""
  def op(a, b, c, ctx):
    with np.errstate(all="ignore"): return u(fn(f(a, bits), f(b, bits)).astype(FT[bits]), bits)
  return op
def _un(fn, bits: int, via64: bool = False):
  def op(a, b, c, ctx):
    with np.errstate(all="ignore"):
      x = f(a, bits).astype(np.float64) if via64 else f(a, bits)
      return u(fn(x).astype(FT[bits]), bits)
  return op
def _f16(fn):
  """A float16 op computed in float64 (exact for add/sub/mul of float16 values) and rounded once."""
  def op(a, b, c, ctx):
    with np.errstate(all="ignore"): return u(fn(f(a, 16).astype(np.float64), f(b, 16).astype(np.float64)).astype(np.float16), 16)
  return op

def _cmp(pred: str, kind: str, bits: int):
  def op(a, b, c, ctx):
    if kind == "f":
      x, y = f(a, bits), f(b, bits)
      with np.errstate(invalid="ignore"):
        r = {"f": np.zeros(x.shape, bool), "lt": x < y, "eq": x == y, "le": x <= y, "gt": x > y, "lg": (x < y) | (x > y),
             "ge": x >= y, "o": ~(np.isnan(x) | np.isnan(y)), "u": np.isnan(x) | np.isnan(y), "nge": ~(x >= y), "nlg": ~((x < y) | (x > y)),
             "ngt": ~(x > y), "nle": ~(x <= y), "neq": ~(x == y), "nlt": ~(x < y), "t": np.ones(x.shape, bool)}[pred]
      return r
    x, y = (_i(a, bits), _i(b, bits)) if kind == "i" else (a, b)
    return {"f": np.zeros(x.shape, bool), "lt": x < y, "eq": x == y, "le": x <= y, "gt": x > y, "ne": x != y, "ge": x >= y,
            "t": np.ones(x.shape, bool)}[pred]
  return op

def _sx(x: np.ndarray, frm: int) -> np.ndarray:
  """Sign-extend the low `frm` bits of uint32 values to int64."""
  v = (x.astype(np.int64) & ((1 << frm) - 1))
  return np.where(v >> (frm - 1) & 1, v - (1 << frm), v)

def _bfe(x: np.ndarray, off: np.ndarray, width: np.ndarray, signed: bool) -> np.ndarray:
  off, width = (off & U32(31)).astype(np.int64), (width & U32(31)).astype(np.int64)
  v = (x.astype(np.int64) >> off) & ((np.int64(1) << width) - 1)
  if signed: v = np.where((width > 0) & ((v >> np.maximum(width - 1, 0)) & 1 == 1), v - (np.int64(1) << width), v)
  return v.astype(np.uint32) if not signed else v.astype(np.int64).astype(np.uint32)

def _shl(bits: int): return lambda a, b, c, ctx: (b << (a & {16: U16, 32: U32, 64: U64}[bits](bits - 1))).astype({16: U16, 32: U32, 64: U64}[bits])
def _lshr(bits: int): return lambda a, b, c, ctx: (b >> (a & {16: U16, 32: U32, 64: U64}[bits](bits - 1))).astype({16: U16, 32: U32, 64: U64}[bits])
def _ashr(bits: int):
  T = {16: U16, 32: U32, 64: U64}[bits]
  return lambda a, b, c, ctx: (_i(b, bits) >> (a & T(bits - 1)).astype(_i(b, bits).dtype)).view(T)
def _shift64(kind: str):
  def op(a, b, c, ctx):
    s = (a & U32(63)).astype(U64)
    if kind == "l": return b << s
    if kind == "r": return b >> s
    return (b.view(I64) >> s.astype(I64)).view(U64)
  return op

def _imin(bits: int, signed: bool, mx: bool):
  def op(a, b, c, ctx):
    x, y = (_i(a, bits), _i(b, bits)) if signed else (a, b)
    r = np.maximum(x, y) if mx else np.minimum(x, y)
    return r.view(a.dtype) if signed else r
  return op
def _i3(bits: int, signed: bool, kind: str):
  def op(a, b, c, ctx):
    x, y, z = (_i(a, bits), _i(b, bits), _i(c, bits)) if signed else (a, b, c)
    if kind == "min": r = np.minimum(np.minimum(x, y), z)
    elif kind == "max": r = np.maximum(np.maximum(x, y), z)
    else: r = np.maximum(np.minimum(x, y), np.minimum(np.maximum(x, y), z))
    return r.view(a.dtype) if signed else r
  return op
def _fminmax(bits: int, is_min: bool): return lambda a, b, c, ctx: fp.vmax(a, b, bits, ctx.ieee, is_min)
def _f3(bits: int, kind: str):
  def op(a, b, c, ctx):
    if kind == "med": return fp.vmed3(a, b, c, bits, ctx.ieee)
    m = kind == "min"
    return fp.vmax(fp.vmax(a, b, bits, ctx.ieee, m), c, bits, ctx.ieee, m)
  return op

def _cvt(src_bits: int, dst: str):
  """Float -> float conversions (round to nearest even)."""
  def op(a, b, c, ctx):
    with np.errstate(all="ignore"): return u(f(a, src_bits).astype(FT[int(dst[1:])]), int(dst[1:]))
  return op

def _rndne(bits: int): return _un(np.rint, bits)
def _fract(bits: int):
  def op(a, b, c, ctx):
    x = f(a, bits)
    with np.errstate(all="ignore"):
      r = x - np.floor(x)
      # the result stays below 1.0 (the ISA's V_FRACT clamps to the largest value under 1); inf gives NaN
      r = np.minimum(r, np.nextafter(FT[bits](1), FT[bits](0)))
      r = np.where(np.isinf(x), FT[bits](np.nan), r)
    return u(r.astype(FT[bits]), bits)
  return op

def _mad64(signed: bool):
  def op(a, b, c, ctx):
    if signed:
      x, y = a.view(I32).astype(np.int64), b.view(I32).astype(np.int64)
      prod = x * y                                 # fits in int64
      s = prod.astype(np.int64).view(U64) + c
      # carry out: signed overflow of the 65-bit signed sum (the ISA's D1 for V_MAD_I64_I32)
      pc = c.view(I64)
      ovf = ((prod >= 0) == (pc >= 0)) & ((s.view(I64) >= 0) != (prod >= 0))
      return s, ovf
    prod = a.astype(U64) * b.astype(U64)
    s = prod + c
    return s, s < prod
  return op

def _add_co(kind: str):
  def op(a, b, c, ctx):
    x, y = a.astype(U64), b.astype(U64)
    if kind == "add": r = x + y; return r.astype(U32), r > 0xFFFFFFFF
    if kind == "sub": return (a - b).astype(U32), b > a
    if kind == "subrev": return (b - a).astype(U32), a > b
    cin = ctx.mask.astype(U64)
    if kind == "addc": r = x + y + cin; return r.astype(U32), r > 0xFFFFFFFF
    if kind == "subb": r = x - y - cin; return r.astype(U32), (y + cin) > x
    r = y - x - cin; return r.astype(U32), (x + cin) > y                     # subrevb
  return op

def _mul24(signed: bool, hi: bool):
  def op(a, b, c, ctx):
    x, y = (_sx(a, 24), _sx(b, 24)) if signed else ((a & U32(0xFFFFFF)).astype(np.int64), (b & U32(0xFFFFFF)).astype(np.int64))
    p = x * y
    return ((p >> 32) if hi else p).astype(np.int64).astype(U32)
  return op

def _perm(a, b, c, ctx):
  """V_PERM_B32: each selector byte of S2 picks a byte of {S0, S1} (0-7), 8-11 sign-replicate, 12 0x00, >= 13 0xFF."""
  data = (a.astype(U64) << U64(32)) | b.astype(U64)
  out = np.zeros(a.shape, U32)
  for k in range(4):
    sel = (c >> U32(8 * k)) & U32(0xFF)
    byte = ((data >> (sel.astype(U64) & U64(7)) * U64(8)) & U64(0xFF)).astype(U32)
    sgn = {8: 15, 9: 31, 10: 47, 11: 63}
    for sv, bit in sgn.items(): byte = np.where(sel == sv, np.where((data >> U64(bit)) & U64(1) == 1, U32(0xFF), U32(0)), byte)
    byte = np.where(sel == 12, U32(0), byte)
    byte = np.where(sel >= 13, U32(0xFF), byte)
    out |= byte << U32(8 * k)
  return out

def _cls(a, b, c, ctx):
  x = a.view(I32).astype(np.int64)
  y = np.where(x < 0, ~x, x)
  nbits = np.where(y == 0, 0, np.floor(np.log2(np.maximum(y, 1))).astype(np.int64) + 1)
  return np.where((x == 0) | (x == -1), U32(0xFFFFFFFF), (31 - nbits).astype(U32))

def _clz(a, b, c, ctx):
  x = a.astype(np.int64)
  nb = np.where(x == 0, 0, np.floor(np.log2(np.maximum(x, 1))).astype(np.int64) + 1)
  return np.where(x == 0, U32(0xFFFFFFFF), (32 - nb).astype(U32))

def _ctz(a, b, c, ctx):
  x = a.astype(np.int64)
  low = x & -x
  return np.where(x == 0, U32(0xFFFFFFFF), np.floor(np.log2(np.maximum(low, 1))).astype(U32))

def _bfrev(a, b, c, ctx):
  x = a.copy()
  x = ((x >> U32(1)) & U32(0x55555555)) | ((x & U32(0x55555555)) << U32(1))
  x = ((x >> U32(2)) & U32(0x33333333)) | ((x & U32(0x33333333)) << U32(2))
  x = ((x >> U32(4)) & U32(0x0F0F0F0F)) | ((x & U32(0x0F0F0F0F)) << U32(4))
  x = ((x >> U32(8)) & U32(0x00FF00FF)) | ((x & U32(0x00FF00FF)) << U32(8))
  return (x >> U32(16)) | (x << U32(16))

def _bcnt(a, b, c, ctx):
  x = a.copy()
  x = x - ((x >> U32(1)) & U32(0x55555555))
  x = (x & U32(0x33333333)) + ((x >> U32(2)) & U32(0x33333333))
  x = (x + (x >> U32(4))) & U32(0x0F0F0F0F)
  return ((x * U32(0x01010101)) >> U32(24)) + b

def _fma_mix(kind: str):
  """V_FMA_MIX*: each source is float32, or the low/high float16 half (OP_SEL_HI says f16, OP_SEL says which half);
  the sources' modifiers (neg, abs) apply after that conversion. mixlo/mixhi write float16 into one half."""
  def op(srcs, ctx):
    ins = []
    for k, raw in enumerate(srcs):
      if ctx.op_sel_hi >> k & 1:
        h = ((raw >> U32(16)) if ctx.op_sel >> k & 1 else raw) & U32(0xFFFF)
        x = h.astype(U16).view(np.float16).astype(np.float32)
      else: x = raw.view(np.float32)
      if ctx.mix_abs >> k & 1: x = np.abs(x)
      if ctx.mix_neg >> k & 1: x = -x
      ins.append(x)
    r = fp.fma32(*ins)
    if kind == "f32": return r.view(U32)
    with np.errstate(all="ignore"): return r.astype(np.float16).view(U16).astype(U32)
  return op

def _ldexp(bits: int): return lambda a, b, c, ctx: fp.ldexp(a, _i(b, 32) if bits != 16 else b.view(I16), bits)

OPS: dict = {}
for _b, _s in ((16, "f16"), (32, "f32"), (64, "f64")):
  if _b == 16:
    OPS.update({f"v_add_{_s}": _f16(np.add), f"v_sub_{_s}": _f16(np.subtract), f"v_subrev_{_s}": _f16(lambda x, y: y - x),
                f"v_mul_{_s}": _f16(np.multiply)})
  else:
    OPS.update({f"v_add_{_s}": _bin(np.add, _b), f"v_sub_{_s}": _bin(np.subtract, _b), f"v_subrev_{_s}": _bin(lambda x, y: y - x, _b),
                f"v_mul_{_s}": _bin(np.multiply, _b)})
  OPS.update({f"v_max_{_s}": _fminmax(_b, False), f"v_min_{_s}": _fminmax(_b, True), f"v_fma_{_s}": (lambda bb: lambda a, b, c, ctx: fp.fma(a, b, c, bb))(_b),
              f"v_trunc_{_s}": _un(np.trunc, _b), f"v_floor_{_s}": _un(np.floor, _b), f"v_ceil_{_s}": _un(np.ceil, _b),
              f"v_rndne_{_s}": _rndne(_b), f"v_fract_{_s}": _fract(_b), f"v_sqrt_{_s}": _un(np.sqrt, _b, True),
              f"v_rcp_{_s}": _un(lambda x: 1.0 / x, _b, _b != 64), f"v_rsq_{_s}": _un(lambda x: 1.0 / np.sqrt(x), _b, True),
              f"v_ldexp_{_s}": _ldexp(_b), f"v_div_fixup_{_s}": (lambda bb: lambda a, b, c, ctx: fp.div_fixup(a, b, c, bb))(_b),
              f"v_min3_{_s}": _f3(_b, "min"), f"v_max3_{_s}": _f3(_b, "max"), f"v_med3_{_s}": _f3(_b, "med"),
              f"v_cmp_class_{_s}": (lambda bb: lambda a, b, c, ctx: fp.cmp_class(a, b, bb))(_b)})
  for _p in ("f", "lt", "eq", "le", "gt", "lg", "ge", "o", "u", "nge", "nlg", "ngt", "nle", "neq", "nlt", "t"):
    OPS[f"v_cmp_{_p}_{_s}"] = _cmp(_p, "f", _b)
for _b in (16, 32, 64):
  for _k, _t in (("i", "i"), ("u", "u")):
    for _p in ("f", "lt", "eq", "le", "gt", "ne", "ge", "t"): OPS[f"v_cmp_{_p}_{_k}{_b}"] = _cmp(_p, _t, _b)
OPS.update({
  "v_fmac_f32": lambda a, b, c, ctx: fp.fma(a, b, c, 32), "v_fmamk_f32": lambda a, b, c, ctx: fp.fma(a, b, c, 32),
  "v_fmaak_f32": lambda a, b, c, ctx: fp.fma(a, b, c, 32), "v_fmac_f16": lambda a, b, c, ctx: fp.fma(a, b, c, 16),
  "v_exp_f32": _un(np.exp2, 32, True), "v_log_f32": _un(np.log2, 32, True), "v_sin_f32": _un(lambda x: np.sin(x * 2 * np.pi), 32, True),
  "v_cos_f32": _un(lambda x: np.cos(x * 2 * np.pi), 32, True), "v_rcp_iflag_f32": _un(lambda x: 1.0 / x, 32, True),
  "v_exp_f16": _un(np.exp2, 16, True), "v_log_f16": _un(np.log2, 16, True),
  "v_div_fmas_f32": lambda a, b, c, ctx: fp.div_fmas(a, b, c, ctx.mask, 32),
  "v_div_fmas_f64": lambda a, b, c, ctx: fp.div_fmas(a, b, c, ctx.mask, 64),
  "v_div_scale_f32": lambda a, b, c, ctx: fp.div_scale(a, b, c, 32), "v_div_scale_f64": lambda a, b, c, ctx: fp.div_scale(a, b, c, 64),
  "v_cvt_f16_f32": _cvt(32, "f16"), "v_cvt_f32_f16": _cvt(16, "f32"), "v_cvt_f32_f64": _cvt(64, "f32"), "v_cvt_f64_f32": _cvt(32, "f64"),
  "v_cvt_i32_f32": lambda a, b, c, ctx: fp.to_int(a, 32, True), "v_cvt_u32_f32": lambda a, b, c, ctx: fp.to_int(a, 32, False),
  "v_cvt_i32_f64": lambda a, b, c, ctx: fp.to_int(a, 64, True), "v_cvt_u32_f64": lambda a, b, c, ctx: fp.to_int(a, 64, False),
  "v_cvt_i16_f16": lambda a, b, c, ctx: fp.to_int(a, 16, True, 16), "v_cvt_u16_f16": lambda a, b, c, ctx: fp.to_int(a, 16, False, 16),
  "v_cvt_f32_i32": lambda a, b, c, ctx: a.view(I32).astype(np.float32).view(U32),
  "v_cvt_f32_u32": lambda a, b, c, ctx: a.astype(np.float32).view(U32),
  "v_cvt_f64_i32": lambda a, b, c, ctx: a.view(I32).astype(np.float64).view(U64),
  "v_cvt_f64_u32": lambda a, b, c, ctx: a.astype(np.float64).view(U64),
  "v_cvt_f16_i16": lambda a, b, c, ctx: a.view(I16).astype(np.float16).view(U16), "v_cvt_f16_u16": lambda a, b, c, ctx: a.astype(np.float16).view(U16),
  "v_cvt_i32_i16": lambda a, b, c, ctx: a.view(I16).astype(I32).view(U32), "v_cvt_u32_u16": lambda a, b, c, ctx: a.astype(U32),
  **{f"v_cvt_f32_ubyte{k}": (lambda kk: lambda a, b, c, ctx: ((a >> U32(8 * kk)) & U32(0xFF)).astype(np.float32).view(U32))(k) for k in range(4)},
  "v_cvt_pk_rtz_f16_f32": lambda a, b, c, ctx: _rtz16(a) | (_rtz16(b) << U32(16)),
  "v_mov_b32": lambda a, b, c, ctx: a, "v_mov_b16": lambda a, b, c, ctx: a, "v_not_b32": lambda a, b, c, ctx: ~a,
  "v_not_b16": lambda a, b, c, ctx: ~a, "v_bfrev_b32": _bfrev, "v_cls_i32": _cls, "v_clz_i32_u32": _clz, "v_ctz_i32_b32": _ctz,
  "v_bcnt_u32_b32": _bcnt,
  "v_cndmask_b32": lambda a, b, c, ctx: np.where(ctx.mask, b, a), "v_cndmask_b16": lambda a, b, c, ctx: np.where(ctx.mask, b, a),
  "v_add_nc_u32": lambda a, b, c, ctx: a + b, "v_sub_nc_u32": lambda a, b, c, ctx: a - b, "v_subrev_nc_u32": lambda a, b, c, ctx: b - a,
  "v_add_nc_i32": lambda a, b, c, ctx: a + b, "v_sub_nc_i32": lambda a, b, c, ctx: a - b,
  "v_add_nc_u16": lambda a, b, c, ctx: a + b, "v_sub_nc_u16": lambda a, b, c, ctx: a - b, "v_add_nc_i16": lambda a, b, c, ctx: a + b,
  "v_sub_nc_i16": lambda a, b, c, ctx: a - b, "v_mul_lo_u16": lambda a, b, c, ctx: a * b, "v_mad_u16": lambda a, b, c, ctx: a * b + c,
  "v_mad_i16": lambda a, b, c, ctx: a * b + c,
  "v_add_co_u32": _add_co("add"), "v_sub_co_u32": _add_co("sub"), "v_subrev_co_u32": _add_co("subrev"),
  "v_add_co_ci_u32": _add_co("addc"), "v_sub_co_ci_u32": _add_co("subb"), "v_subrev_co_ci_u32": _add_co("subrevb"),
  "v_mad_u64_u32": _mad64(False), "v_mad_i64_i32": _mad64(True),
  "v_mul_lo_u32": lambda a, b, c, ctx: a * b,
  "v_mul_hi_u32": lambda a, b, c, ctx: ((a.astype(U64) * b.astype(U64)) >> U64(32)).astype(U32),
  "v_mul_hi_i32": lambda a, b, c, ctx: ((a.view(I32).astype(I64) * b.view(I32).astype(I64)) >> 32).astype(I64).astype(U32),
  "v_mul_i32_i24": _mul24(True, False), "v_mul_hi_i32_i24": _mul24(True, True), "v_mul_u32_u24": _mul24(False, False),
  "v_mul_hi_u32_u24": _mul24(False, True),
  "v_mad_i32_i24": lambda a, b, c, ctx: _mul24(True, False)(a, b, c, ctx) + c, "v_mad_u32_u24": lambda a, b, c, ctx: _mul24(False, False)(a, b, c, ctx) + c,
  "v_mad_u32_u16": lambda a, b, c, ctx: a.astype(U32) * b.astype(U32) + c,
  "v_mad_i32_i16": lambda a, b, c, ctx: (a.view(I16).astype(I32) * b.view(I16).astype(I32)).view(U32) + c,
  "v_and_b32": lambda a, b, c, ctx: a & b, "v_or_b32": lambda a, b, c, ctx: a | b, "v_xor_b32": lambda a, b, c, ctx: a ^ b,
  "v_xnor_b32": lambda a, b, c, ctx: ~(a ^ b), "v_and_b16": lambda a, b, c, ctx: a & b, "v_or_b16": lambda a, b, c, ctx: a | b,
  "v_xor_b16": lambda a, b, c, ctx: a ^ b, "v_or3_b32": lambda a, b, c, ctx: a | b | c, "v_xor3_b32": lambda a, b, c, ctx: a ^ b ^ c,
  "v_and_or_b32": lambda a, b, c, ctx: (a & b) | c, "v_add3_u32": lambda a, b, c, ctx: a + b + c,
  "v_lshl_or_b32": lambda a, b, c, ctx: (a << (b & U32(31))) | c, "v_lshl_add_u32": lambda a, b, c, ctx: (a << (b & U32(31))) + c,
  "v_add_lshl_u32": lambda a, b, c, ctx: (a + b) << (c & U32(31)), "v_xad_u32": lambda a, b, c, ctx: (a ^ b) + c,
  "v_bfe_u32": lambda a, b, c, ctx: _bfe(a, b, c, False), "v_bfe_i32": lambda a, b, c, ctx: _bfe(a, b, c, True),
  "v_bfi_b32": lambda a, b, c, ctx: (a & b) | (~a & c), "v_bfm_b32": lambda a, b, c, ctx: ((U32(1) << (a & U32(31))) - U32(1)) << (b & U32(31)),
  "v_alignbit_b32": lambda a, b, c, ctx: ((((a.astype(U64) << U64(32)) | b.astype(U64)) >> (c & U32(31)).astype(U64)) & U64(0xFFFFFFFF)).astype(U32),
  "v_alignbyte_b32": lambda a, b, c, ctx: ((((a.astype(U64) << U64(32)) | b.astype(U64)) >> ((c & U32(3)) * U32(8)).astype(U64)) & U64(0xFFFFFFFF)).astype(U32),
  "v_perm_b32": _perm,
  "v_lshlrev_b32": _shl(32), "v_lshrrev_b32": _lshr(32), "v_ashrrev_i32": _ashr(32),
  "v_lshlrev_b16": _shl(16), "v_lshrrev_b16": _lshr(16), "v_ashrrev_i16": _ashr(16),
  "v_lshlrev_b64": _shift64("l"), "v_lshrrev_b64": _shift64("r"), "v_ashrrev_i64": _shift64("a"),
  "v_min_i32": _imin(32, True, False), "v_max_i32": _imin(32, True, True), "v_min_u32": _imin(32, False, False), "v_max_u32": _imin(32, False, True),
  "v_min_i16": _imin(16, True, False), "v_max_i16": _imin(16, True, True), "v_min_u16": _imin(16, False, False), "v_max_u16": _imin(16, False, True),
  "v_min3_i32": _i3(32, True, "min"), "v_max3_i32": _i3(32, True, "max"), "v_med3_i32": _i3(32, True, "med"),
  "v_min3_u32": _i3(32, False, "min"), "v_max3_u32": _i3(32, False, "max"), "v_med3_u32": _i3(32, False, "med"),
  "v_min3_i16": _i3(16, True, "min"), "v_max3_i16": _i3(16, True, "max"), "v_med3_i16": _i3(16, True, "med"),
  "v_min3_u16": _i3(16, False, "min"), "v_max3_u16": _i3(16, False, "max"), "v_med3_u16": _i3(16, False, "med"),
  "v_maxmin_f32": lambda a, b, c, ctx: fp.vmax(fp.vmax(a, b, 32, ctx.ieee), c, 32, ctx.ieee, True),
  "v_minmax_f32": lambda a, b, c, ctx: fp.vmax(fp.vmax(a, b, 32, ctx.ieee, True), c, 32, ctx.ieee),
  "v_maxmin_i32": lambda a, b, c, ctx: np.minimum(np.maximum(a.view(I32), b.view(I32)), c.view(I32)).view(U32),
  "v_minmax_i32": lambda a, b, c, ctx: np.maximum(np.minimum(a.view(I32), b.view(I32)), c.view(I32)).view(U32),
  "v_maxmin_u32": lambda a, b, c, ctx: np.minimum(np.maximum(a, b), c), "v_minmax_u32": lambda a, b, c, ctx: np.maximum(np.minimum(a, b), c),
  "v_pack_b32_f16": lambda a, b, c, ctx: a.astype(U32) | (b.astype(U32) << U32(16)),
  "v_mbcnt_lo_u32_b32": lambda a, b, c, ctx: _mbcnt(a, ctx) + b, "v_mbcnt_hi_u32_b32": lambda a, b, c, ctx: b.copy(),
})
FMA_MIX = {"v_fma_mix_f32": _fma_mix("f32"), "v_fma_mixlo_f16": _fma_mix("lo"), "v_fma_mixhi_f16": _fma_mix("hi")}

def _rtz16(x: np.ndarray) -> np.ndarray:
  """float32 -> float16 rounding toward zero (v_cvt_pk_rtz_f16_f32)."""
  v = x.view(np.float32)
  h = v.astype(np.float16)
  over = np.abs(h.astype(np.float32)) > np.abs(v)
  h = np.where(over & np.isfinite(v), np.nextafter(h, np.float16(0)), h)
  return h.view(U16).astype(U32)

def _mbcnt(mask: np.ndarray, ctx) -> np.ndarray:
  """Count of the mask's bits below each lane (wave32: v_mbcnt_lo counts lanes 0..lane-1)."""
  lanes = np.arange(32, dtype=U32)
  below = (U64(1) << lanes.astype(U64)) - U64(1)
  m = mask.astype(U64) & below
  out = np.zeros(mask.shape, U32)
  for k in range(32): out += ((m >> U64(k)) & U64(1)).astype(U32)
  return out
