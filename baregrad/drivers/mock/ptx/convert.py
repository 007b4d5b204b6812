"""Conversions of PTXKernel (`ConvertOps`: cvt, cvt.pack) and the rounding helpers arithmetic shares: f32 rounding in
a directed mode, float -> int with saturation, bf16 and f16 with rounding modes, subnormal flushing (.ftz)."""
from __future__ import annotations
import numpy as np
from baregrad.drivers.mock.ptx.dtypes import _DT, _ROUND, _bits, _kind
from baregrad.drivers.mock.ptx.parser import _Ins

def _bf16_to_f32(u16):
  return (np.asarray(u16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def _f32_to_bf16(f, mode: str = "rn"):
  f = np.asarray(f, np.float32)
  u = f.view(np.uint32).astype(np.uint64)
  nan = np.isnan(f)
  if mode == "rz":
    r = u >> 16
  else:
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
  r = np.where(nan, 0x7FFF, r)
  return r.astype(np.uint16)


def _round_f32(x64, mode: str):
  """Round float64 values to float32 with a PTX rounding mode."""
  r = x64.astype(np.float32)
  if mode in ("rn", None, "rni"):
    return r
  r64 = r.astype(np.float64)
  fin = np.isfinite(x64)
  if mode == "rz":
    fix = fin & (np.abs(r64) > np.abs(x64))
    return np.where(fix, np.nextafter(r, np.float32(0)), r).astype(np.float32)
  if mode == "rm":
    fix = fin & (r64 > x64)
    return np.where(fix, np.nextafter(r, np.float32(-np.inf)), r).astype(np.float32)
  if mode == "rp":
    fix = fin & (r64 < x64)
    return np.where(fix, np.nextafter(r, np.float32(np.inf)), r).astype(np.float32)
  return r


def _round_int(x, mode: str):
  if mode in ("rni", "rn"):
    return np.rint(x)
  if mode in ("rzi", "rz"):
    return np.trunc(x)
  if mode in ("rmi", "rm"):
    return np.floor(x)
  if mode in ("rpi", "rp"):
    return np.ceil(x)
  return x


def _ftz(x):
  if x.dtype != np.float32:
    return x
  tiny = np.float32(1.1754944e-38)
  return np.where(np.abs(x) < tiny, np.copysign(np.float32(0), x), x).astype(np.float32)


def _float_to_int(x, dt: np.dtype, mode: str):
  """cvt float -> int: round (default rzi), saturate to the destination range, NaN -> 0."""
  x = _round_int(np.asarray(x, np.float64) if x.dtype != np.float64 else x, mode or "rzi")
  info = np.iinfo(dt)
  nan = np.isnan(x)
  x = np.where(nan, 0.0, x)
  if dt.itemsize == 8:
    hi = float(info.max)  # 2**63 or 2**64 (not representable max): compare >=
    over = x >= hi
    under = x < float(info.min)
    safe = np.where(over | under, 0.0, x)
    r = safe.astype(dt)
    r = np.where(over, info.max, r)
    r = np.where(under, info.min, r)
    return r.astype(dt)
  return np.clip(x, info.min, info.max).astype(dt)


def _to_f16(x, mode: str):
  x = np.asarray(x)
  if mode in ("rz", "rm", "rp"):
    x64 = x.astype(np.float64)
    r = x64.astype(np.float16)
    r64 = r.astype(np.float64)
    fin = np.isfinite(x64)
    if mode == "rz":
      fix = fin & (np.abs(r64) > np.abs(x64))
      return np.where(fix, np.nextafter(r, np.float16(0)), r).astype(np.float16)
    if mode == "rm":
      fix = fin & (r64 > x64)
      return np.where(fix, np.nextafter(r, np.float16(-np.inf)), r).astype(np.float16)
    fix = fin & (r64 < x64)
    return np.where(fix, np.nextafter(r, np.float16(np.inf)), r).astype(np.float16)
  if x.dtype == np.float64:
    # avoid double rounding f64 -> f32 -> f16: NumPy converts f64 -> f16 directly
    return x.astype(np.float16)
  return x.astype(np.float16)


class ConvertOps:
  """Instruction compilers for cvt (every type pair, rounding, .sat, .ftz) and cvt.pack."""

  # conversions
  def _c_cvt(self, ins: _Ins):
    if "tf32" in ins.mods:
      return self._cvt_tf32(ins)
    ts = self._types(ins)
    if len(ts) != 2:
      raise self._err(ins, "cvt needs a destination and a source type")
    dn, sn = ts
    if "f16x2" in ts or "bf16x2" in ts:
      return self._cvt_pack(ins, dn, sn)
    self._need(ins, 2)
    ddt, sdt = _DT[dn], _DT[sn]
    mode = next((m for m in ins.mods if m in _ROUND), None)
    sat = "sat" in ins.mods
    ftz = "ftz" in ins.mods
    src = self._src(ins, ins.ops[1], sdt, tname=sn)
    wd = self._dst(ins, ins.ops[0], tname=dn)
    dk, sk = _kind(dn), _kind(sn)
    sg = dk == "s"
    if sk == "p" or dk == "p":
      raise self._err(ins, "cvt does not convert predicates (use selp / setp)")

    def as_float(v):  # source value as a float array (f32 or f64)
      v = np.asarray(v)
      if sn == "bf16":
        return _bf16_to_f32(v)
      if sn == "f16":
        return v.astype(np.float32)
      return v

    if sk == "f" and dk == "f":
      if mode in ("rni", "rzi", "rmi", "rpi") and dn != sn and not (dn in ("f32", "f64") and sn != "f64"):
        pass

      def f(v):
        x = as_float(v)
        if ftz:
          x = _ftz(x)
        if mode in ("rni", "rzi", "rmi", "rpi"):
          x = _round_int(x, mode)
        if dn == "f64":
          r = x.astype(np.float64)
        elif dn == "f32":
          r = _round_f32(x.astype(np.float64), mode) if (sn == "f64" and mode in ("rz", "rm", "rp")) \
              else x.astype(np.float32)
        elif dn == "f16":
          r = _to_f16(x, mode)
        else:  # bf16
          r = x.astype(np.float32)
        if sat:
          r = np.where(np.isnan(r), 0, np.clip(r, 0, 1)).astype(r.dtype)
        if ftz and dn == "f32":
          r = _ftz(r)
        if dn == "bf16":
          return _f32_to_bf16(r, "rz" if mode == "rz" else "rn")
        return r
    elif sk == "f":  # float -> int: rounding, saturation to the range, NaN -> 0
      def f(v):
        x = as_float(v)
        if ftz:
          x = _ftz(x)
        return _float_to_int(x.astype(np.float64), ddt, mode or "rzi")
    elif dk == "f":  # int -> float
      def f(v):
        v = np.asarray(v)
        if dn == "f64":
          r = v.astype(np.float64)
        elif dn == "f32":
          if v.dtype.itemsize == 8 or mode in ("rz", "rm", "rp"):
            r = _round_f32(v.astype(np.float64), mode) if v.dtype.itemsize < 8 else v.astype(np.float32)
          else:
            r = v.astype(np.float32)
        elif dn == "f16":
          r = _to_f16(v.astype(np.float64), mode)
        else:
          r = v.astype(np.float32)
        if sat:
          r = np.where(np.isnan(r), 0, np.clip(r, 0, 1)).astype(r.dtype)
        if dn == "bf16":
          return _f32_to_bf16(r)
        return r
    else:  # int -> int
      dinfo = np.iinfo(ddt)

      def f(v):
        v = np.asarray(v)
        if sat:
          if v.dtype == np.uint64 or ddt == np.uint64:
            lo = np.where(v < 0, 0, v) if v.dtype.kind == "i" else v
            if ddt == np.uint64:
              return np.asarray(lo).astype(np.uint64)
            return np.minimum(np.asarray(lo).astype(np.uint64), np.uint64(dinfo.max)).astype(ddt)
          return np.clip(v.astype(np.int64), dinfo.min, dinfo.max).astype(ddt)
        # sign/zero extend from the source type, then truncate to the destination
        if ddt.itemsize >= v.dtype.itemsize:
          return v.astype(ddt)
        return _bits(v, ddt)

    ins.fn = lambda c, m: wd(c, f(src(c)), sg, m)

  def _cvt_pack(self, ins, dn, sn):
    # cvt.rn.f16x2.f32 d, a, b: d = {cvt(a) in the high half, cvt(b) in the low half}
    if dn not in ("f16x2", "bf16x2") or sn != "f32" or len(ins.ops) != 3:
      raise self._err(ins, "only cvt.rn.f16x2.f32 / cvt.rn.bf16x2.f32 d, a, b are supported")
    f32 = np.dtype(np.float32)
    a, b = self._src(ins, ins.ops[1], f32), self._src(ins, ins.ops[2], f32)
    wd = self._dst(ins, ins.ops[0])
    bf = dn == "bf16x2"
    relu = "relu" in ins.mods

    def h(v):
      v = np.asarray(v, np.float32)
      if relu:
        v = np.where(np.isnan(v), v, np.maximum(v, 0))
      return (_f32_to_bf16(v) if bf else v.astype(np.float16).view(np.uint16)).astype(np.uint32)

    ins.fn = lambda c, m: wd(c, (h(a(c)) << np.uint32(16)) | h(b(c)), False, m)

  def _c_cvt_pack(self, ins: _Ins) -> None:
    raise self._err(ins, "cvt.pack is not supported")
