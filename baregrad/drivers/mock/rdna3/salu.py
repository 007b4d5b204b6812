"""Scalar ALU semantics of RDNA3 (SOP1/SOP2/SOPC/SOPK), after the ISA guide's pseudocode. Values are uint64 arrays
(one element per wave) holding the operand's 32 or 64 bits; each entry returns (result or None, SCC or None), None
leaving the destination / SCC as they are."""
from __future__ import annotations
import re
import numpy as np

U64, I64 = np.uint64, np.int64
M32 = U64(0xFFFFFFFF)

def _s32(x: np.ndarray) -> np.ndarray: return (x & M32).astype(np.uint32).view(np.int32).astype(I64)
def _s64(x: np.ndarray) -> np.ndarray: return x.view(I64)
def _u(x: np.ndarray) -> np.ndarray: return x.astype(I64).view(U64) & M32 if x.dtype != U64 else x & M32

def _add_u32(a, b, scc): t = a + b; return t & M32, t > M32
def _addc_u32(a, b, scc): t = a + b + scc.astype(U64); return t & M32, t > M32
def _sub_u32(a, b, scc): return (a - b) & M32, b > a
def _subb_u32(a, b, scc): c = scc.astype(U64); return (a - b - c) & M32, b + c > a
def _add_i32(a, b, scc):
  t = (a + b) & M32
  return t, (((a >> U64(31)) & U64(1)) == ((b >> U64(31)) & U64(1))) & (((a >> U64(31)) & U64(1)) != ((t >> U64(31)) & U64(1)))
def _sub_i32(a, b, scc):
  t = (a - b) & M32
  return t, (((a >> U64(31)) & U64(1)) != ((b >> U64(31)) & U64(1))) & (((a >> U64(31)) & U64(1)) != ((t >> U64(31)) & U64(1)))
def _lsladd(k: int):
  def op(a, b, scc): t = (a << U64(k)) + b; return t & M32, t > M32
  return op
def _nz(x): return x != 0
def _logic(fn, mask):
  def op(a, b, scc): r = fn(a, b) & mask; return r, _nz(r)
  return op
M64 = U64(0xFFFFFFFFFFFFFFFF)
def _bfe(bits: int, signed: bool):
  mask = M32 if bits == 32 else M64
  def op(a, b, scc):
    off = (b & U64(bits - 1)).astype(I64)
    width = ((b >> U64(16)) & U64(0x7F)).astype(I64)
    v = (a >> off.astype(U64)) & np.where(width >= 64, M64, (U64(1) << np.minimum(width, 63).astype(U64)) - U64(1))
    if signed:
      sx = (width > 0) & (width < bits) & (((v >> np.maximum(width - 1, 0).astype(U64)) & U64(1)) == 1)
      v = np.where(sx, v | (mask & ~((U64(1) << np.minimum(width, 63).astype(U64)) - U64(1))), v)
    v = v & mask
    return v, _nz(v)
  return op
def _minmax(signed: bool, is_max: bool):
  def op(a, b, scc):
    x, y = (_s32(a), _s32(b)) if signed else (a, b)
    c = (x > y) if is_max else (x < y)
    return np.where(c, a, b), c
  return op
def _cmp(pred: str, kind: str):
  def op(a, b, scc):
    x, y = (_s32(a), _s32(b)) if kind == "i" else (a, b)
    return None, {"eq": x == y, "lg": x != y, "gt": x > y, "ge": x >= y, "lt": x < y, "le": x <= y}[pred]
  return op
def _saveexec(fn):
  """(new EXEC from S0 and EXEC, then D0 = old EXEC): returns a marker the machine knows."""
  return ("saveexec", fn)

def _popcount(x: np.ndarray) -> np.ndarray:
  out = np.zeros(x.shape, U64)
  for k in range(64): out += (x >> U64(k)) & U64(1)
  return out
def _ctz(bits: int):
  def op(a, b, scc):
    out = np.full(a.shape, M32)
    for k in range(bits - 1, -1, -1): out = np.where((a >> U64(k)) & U64(1) == 1, U64(k), out)
    return out, None
  return op
def _clz(bits: int):
  def op(a, b, scc):
    out = np.full(a.shape, M32)
    for k in range(bits): out = np.where((a >> U64(k)) & U64(1) == 1, U64(bits - 1 - k), out)
    return out, None
  return op
def _cls(a, b, scc):
  x = a & M32
  top = (x >> U64(31)) & U64(1)
  out = np.full(a.shape, M32)
  for i in range(31, 0, -1): out = np.where(((x >> U64(31 - i)) & U64(1)) != top, U64(i), out)
  return out, None
def _brev32(a, b, scc):
  out = np.zeros(a.shape, U64)
  for k in range(32): out |= ((a >> U64(k)) & U64(1)) << U64(31 - k)
  return out, None

SOP: dict = {
  "s_add_u32": _add_u32, "s_addc_u32": _addc_u32, "s_sub_u32": _sub_u32, "s_subb_u32": _subb_u32,
  "s_add_i32": _add_i32, "s_sub_i32": _sub_i32,
  "s_absdiff_i32": lambda a, b, scc: (lambda d: (d, _nz(d)))((np.abs(_s32(a) - _s32(b))).astype(U64) & M32),
  "s_lshl1_add_u32": _lsladd(1), "s_lshl2_add_u32": _lsladd(2), "s_lshl3_add_u32": _lsladd(3), "s_lshl4_add_u32": _lsladd(4),
  "s_lshl_b32": _logic(lambda a, b: a << (b & U64(31)), M32), "s_lshl_b64": _logic(lambda a, b: a << (b & U64(63)), M64),
  "s_lshr_b32": _logic(lambda a, b: a >> (b & U64(31)), M32), "s_lshr_b64": _logic(lambda a, b: a >> (b & U64(63)), M64),
  "s_ashr_i32": _logic(lambda a, b: (_s32(a) >> (b & U64(31)).astype(I64)).view(U64), M32),
  "s_ashr_i64": _logic(lambda a, b: (_s64(a) >> (b & U64(63)).astype(I64)).view(U64), M64),
  "s_min_i32": _minmax(True, False), "s_max_i32": _minmax(True, True), "s_min_u32": _minmax(False, False), "s_max_u32": _minmax(False, True),
  "s_mul_i32": lambda a, b, scc: ((a * b) & M32, None),
  "s_mul_hi_u32": lambda a, b, scc: ((a * b) >> U64(32), None),
  "s_mul_hi_i32": lambda a, b, scc: (((_s32(a) * _s32(b)) >> 32).view(U64) & M32, None),
  "s_bfe_u32": _bfe(32, False), "s_bfe_i32": _bfe(32, True), "s_bfe_u64": _bfe(64, False), "s_bfe_i64": _bfe(64, True),
  "s_bfm_b32": lambda a, b, scc: ((((U64(1) << (a & U64(31))) - U64(1)) << (b & U64(31))) & M32, None),
  "s_bfm_b64": lambda a, b, scc: ((((U64(1) << (a & U64(63))) - U64(1)) << (b & U64(63))), None),
  "s_cselect_b32": lambda a, b, scc: (np.where(scc, a, b), None), "s_cselect_b64": lambda a, b, scc: (np.where(scc, a, b), None),
  "s_pack_ll_b32_b16": lambda a, b, scc: ((a & U64(0xFFFF)) | ((b & U64(0xFFFF)) << U64(16)), None),
  "s_pack_lh_b32_b16": lambda a, b, scc: ((a & U64(0xFFFF)) | (b & U64(0xFFFF0000)), None),
  "s_pack_hh_b32_b16": lambda a, b, scc: ((a >> U64(16)) | (b & U64(0xFFFF0000)), None),
  "s_pack_hl_b32_b16": lambda a, b, scc: ((a >> U64(16)) | ((b & U64(0xFFFF)) << U64(16)), None),
  # SOP1 (b is unused)
  "s_mov_b32": lambda a, b, scc: (a, None), "s_mov_b64": lambda a, b, scc: (a, None),
  "s_cmov_b32": ("cmov",), "s_cmov_b64": ("cmov",),
  "s_not_b32": _logic(lambda a, b: ~a, M32), "s_not_b64": _logic(lambda a, b: ~a, M64),
  "s_abs_i32": lambda a, b, scc: (lambda d: (d, _nz(d)))(np.abs(_s32(a)).astype(U64) & M32),
  "s_sext_i32_i8": lambda a, b, scc: (((a & U64(0xFF)).astype(np.uint8).view(np.int8).astype(I64)).view(U64) & M32, None),
  "s_sext_i32_i16": lambda a, b, scc: (((a & U64(0xFFFF)).astype(np.uint16).view(np.int16).astype(I64)).view(U64) & M32, None),
  "s_brev_b32": _brev32, "s_ctz_i32_b32": _ctz(32), "s_ctz_i32_b64": _ctz(64), "s_clz_i32_u32": _clz(32), "s_clz_i32_u64": _clz(64),
  "s_cls_i32": _cls,
  "s_bcnt1_i32_b32": lambda a, b, scc: (lambda c: (c, _nz(c)))(_popcount(a & M32)),
  "s_bcnt1_i32_b64": lambda a, b, scc: (lambda c: (c, _nz(c)))(_popcount(a)),
  "s_bcnt0_i32_b32": lambda a, b, scc: (lambda c: (c, _nz(c)))(U64(32) - _popcount(a & M32)),
  "s_bitset0_b32": ("bitset", 0), "s_bitset1_b32": ("bitset", 1),
  "s_and_saveexec_b32": _saveexec(lambda s, e: s & e), "s_or_saveexec_b32": _saveexec(lambda s, e: s | e),
  "s_xor_saveexec_b32": _saveexec(lambda s, e: s ^ e), "s_nand_saveexec_b32": _saveexec(lambda s, e: ~(s & e)),
  "s_nor_saveexec_b32": _saveexec(lambda s, e: ~(s | e)), "s_xnor_saveexec_b32": _saveexec(lambda s, e: ~(s ^ e)),
  "s_and_not0_saveexec_b32": _saveexec(lambda s, e: ~s & e), "s_or_not0_saveexec_b32": _saveexec(lambda s, e: ~s | e),
  "s_and_not1_saveexec_b32": _saveexec(lambda s, e: s & ~e), "s_or_not1_saveexec_b32": _saveexec(lambda s, e: s | ~e),
  # SOPC
  "s_bitcmp0_b32": lambda a, b, scc: (None, ((a >> (b & U64(31))) & U64(1)) == 0),
  "s_bitcmp1_b32": lambda a, b, scc: (None, ((a >> (b & U64(31))) & U64(1)) == 1),
  "s_bitcmp0_b64": lambda a, b, scc: (None, ((a >> (b & U64(63))) & U64(1)) == 0),
  "s_bitcmp1_b64": lambda a, b, scc: (None, ((a >> (b & U64(63))) & U64(1)) == 1),
  "s_cmp_eq_u64": lambda a, b, scc: (None, a == b), "s_cmp_lg_u64": lambda a, b, scc: (None, a != b),
}
for _nm, _fn, _m in (("and", lambda a, b: a & b, 0), ("or", lambda a, b: a | b, 0), ("xor", lambda a, b: a ^ b, 0),
                     ("nand", lambda a, b: ~(a & b), 0), ("nor", lambda a, b: ~(a | b), 0), ("xnor", lambda a, b: ~(a ^ b), 0),
                     ("and_not1", lambda a, b: a & ~b, 0), ("or_not1", lambda a, b: a | ~b, 0)):
  SOP[f"s_{_nm}_b32"] = _logic(_fn, M32); SOP[f"s_{_nm}_b64"] = _logic(_fn, M64)
for _p in ("eq", "lg", "gt", "ge", "lt", "le"):
  SOP[f"s_cmp_{_p}_i32"] = _cmp(_p, "i"); SOP[f"s_cmp_{_p}_u32"] = _cmp(_p, "u")

def sext16(k: int) -> int: return k - 0x10000 if k & 0x8000 else k

def sopk(name: str, d: np.ndarray, k: int, scc: np.ndarray):
  """SOPK: (result or None, SCC or None); d is the destination's current value (the first source of most)."""
  ks, ku = sext16(k), k & 0xFFFF
  if name == "s_movk_i32": return np.full(d.shape, U64(ks & 0xFFFFFFFF)), None
  if name == "s_cmovk_i32": return np.where(scc, U64(ks & 0xFFFFFFFF), d), None
  if name == "s_addk_i32":
    r = (d + U64(ks & 0xFFFFFFFF)) & M32
    sd, sk = (d >> U64(31)) & U64(1), U64((ks >> 31) & 1)
    return r, (sd == sk) & (sd != ((r >> U64(31)) & U64(1)))
  if name == "s_mulk_i32": return (d * U64(ks & 0xFFFFFFFF)) & M32, None
  m = re.match(r"s_cmpk_(eq|lg|gt|ge|lt|le)_(i32|u32)$", name)
  if m:
    x = _s32(d) if m.group(2) == "i32" else d
    y = ks if m.group(2) == "i32" else ku
    return None, {"eq": x == y, "lg": x != y, "gt": x > y, "ge": x >= y, "lt": x < y, "le": x <= y}[m.group(1)]
  raise KeyError(name)

