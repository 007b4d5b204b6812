"""Arithmetic and logic instructions of PTXKernel (`ArithOps`): mov, integer and float arithmetic (add..fma, div/rem,
min/max, packed f16x2/bf16x2), the math functions (sqrt, rcp, ex2, sin...), logic and shifts, bit operations (popc,
clz, brev, bfind, bfe, bfi, prmt), comparisons and selects (setp, set, selp, slct);
with the integer helpers they use."""
from __future__ import annotations
import numpy as np
from baregrad.drivers.mock.ptx.convert import _bf16_to_f32, _f32_to_bf16, _ftz, _round_f32
from baregrad.drivers.mock.ptx.dtypes import _DT, _UINT, _bits, _is_float
from baregrad.drivers.mock.ptx.parser import _literal, _split_operands, _Ins

def _int_wide(a):
  """An integer array widened to int64 (or uint64 for u64) exactly."""
  if a.dtype.itemsize == 8:
    return a
  return a.astype(np.int64)


def _mulhi_u64(a, b):
  a = a.astype(np.uint64)
  b = b.astype(np.uint64)
  m = np.uint64(0xFFFFFFFF)
  s = np.uint64(32)
  al, ah, bl, bh = a & m, a >> s, b & m, b >> s
  t = al * bl
  m1 = ah * bl + (t >> s)
  m2 = al * bh + (m1 & m)
  return ah * bh + (m1 >> s) + (m2 >> s)


def _mulhi(a, b, dt: np.dtype):
  if dt.itemsize == 8:
    if dt.kind == "u":
      return _mulhi_u64(a, b)
    hu = _mulhi_u64(a.view(np.uint64) if a.ndim else np.uint64(a.view(np.uint64)),
                    b.view(np.uint64) if b.ndim else np.uint64(b.view(np.uint64)))
    bu = b.astype(np.int64).view(np.uint64) if b.ndim else np.uint64(np.int64(b).view(np.uint64))
    au = a.astype(np.int64).view(np.uint64) if a.ndim else np.uint64(np.int64(a).view(np.uint64))
    hu = hu - np.where(a < 0, bu, np.uint64(0)) - np.where(b < 0, au, np.uint64(0))
    return hu.astype(np.uint64).view(np.int64)
  w = np.int64 if dt.kind == "i" else np.uint64
  p = np.asarray(a).astype(w) * np.asarray(b).astype(w)
  return (p >> (8 * dt.itemsize)).astype(dt)


def _divmod_trunc(a, b, dt: np.dtype):
  """C-style (truncating) integer division and remainder; x/0 gives all-ones / x."""
  a = np.asarray(a)
  b = np.asarray(b)
  if dt.kind == "u":
    bz = b == 0
    bb = np.where(bz, 1, b).astype(dt)
    q = np.where(bz, np.iinfo(dt).max, a // bb).astype(dt)
    r = np.where(bz, a, a % bb).astype(dt)
    return q, r
  U = _UINT[dt.itemsize]
  ua = np.where(a < 0, -a, a).astype(dt).view(U)
  ub = np.where(b < 0, -b, b).astype(dt).view(U)
  bz = ub == 0
  ubb = np.where(bz, 1, ub).astype(U)
  uq = (ua // ubb).astype(U)
  ur = (ua % ubb).astype(U)
  neg = (a < 0) ^ (b < 0)
  q = np.where(neg, (-(uq.view(dt))), uq.view(dt)).astype(dt)
  r = np.where(a < 0, -(ur.view(dt)), ur.view(dt)).astype(dt)
  q = np.where(bz, np.array(-1, dt), q).astype(dt)
  r = np.where(bz, a, r).astype(dt)
  return q, r


def _clz(a, width: int):
  u = np.asarray(a).view(_UINT[width // 8]).astype(np.uint64)
  n = np.zeros(u.shape, np.uint32)
  s = width // 2
  while s:
    top = (u >> np.uint64(width - s)) == 0
    hi_mask = np.uint64((1 << width) - 1) if width < 64 else np.uint64(0xFFFFFFFFFFFFFFFF)
    n = n + np.where(top, s, 0).astype(np.uint32)
    u = np.where(top, (u << np.uint64(s)) & hi_mask, u)
    s //= 2
  n = n + np.where((u >> np.uint64(width - 1)) == 0, 1, 0).astype(np.uint32)
  return n


def _brev(a, width: int):
  u = np.asarray(a).view(_UINT[width // 8]).astype(np.uint64)
  r = np.zeros(u.shape, np.uint64)
  for i in range(width):
    r |= ((u >> np.uint64(i)) & np.uint64(1)) << np.uint64(width - 1 - i)
  return r.astype(_UINT[width // 8])


class ArithOps:
  """Instruction compilers for moves, arithmetic, math functions, logic, bit operations, comparisons and selects."""

  # moves
  def _c_mov(self, ins: _Ins) -> None:
    self._need(ins, 2)
    t = self._one_type(ins)
    dt = _DT[t]
    d, a = ins.ops
    if a.startswith("{"):  # pack
      parts = _split_operands(a[1:-1])
      srcs = []
      pw = dt.itemsize // len(parts)
      for p in parts:
        if p.startswith("%"): self._reg_dtype(ins, p)  # an undeclared register is an error
        srcs.append(self._src(ins, p, _UINT[pw]))
      W = _UINT[dt.itemsize]
      wd = self._dst(ins, d)

      def fn(c, m):
        acc = np.zeros(c.n, W)
        for k, f in enumerate(srcs):
          acc |= np.asarray(f(c)).astype(W) << W.type(8 * pw * k)
        wd(c, acc.view(dt), False, m)
      ins.fn = fn
      return
    if d.startswith("{"):  # unpack
      parts = _split_operands(d[1:-1])
      pw = dt.itemsize // len(parts)
      src = self._src(ins, a, _UINT[dt.itemsize])
      dsts = [self._dst(ins, p) for p in parts]
      W = _UINT[dt.itemsize]

      def fn(c, m):
        v = np.asarray(src(c)).astype(W)
        for k, wd in enumerate(dsts):
          wd(c, ((v >> W.type(8 * pw * k)) & W.type((1 << (8 * pw)) - 1)).astype(_UINT[pw]), False, m)
      ins.fn = fn
      return
    src = self._src(ins, a, dt, tname=t)
    wd = self._dst(ins, d, tname=t)
    sg = dt.kind == "i"
    ins.fn = lambda c, m: wd(c, src(c), sg, m)

  # arithmetic
  def _arith(self, ins: _Ins, nsrc: int, f, res_t=None, src_t=None):
    t = self._one_type(ins) if src_t is None else src_t
    dt = _DT[t]
    self._need(ins, nsrc + 1)
    srcs = [self._src(ins, o, dt, tname=t) for o in ins.ops[1:]]
    wd = self._dst(ins, ins.ops[0], tname=res_t or t)
    rdt = _DT[res_t] if res_t else dt
    sg = rdt.kind == "i"
    ftz = "ftz" in ins.mods and dt == np.float32
    sat = "sat" in ins.mods and _is_float(dt)
    if len(srcs) == 1:
      s0 = srcs[0]
      if ftz:
        g = lambda c: _ftz(f(_ftz(np.asarray(s0(c)))))
      else:
        g = lambda c: f(s0(c))
    elif len(srcs) == 2:
      s0, s1 = srcs
      if ftz:
        g = lambda c: _ftz(f(_ftz(np.asarray(s0(c))), _ftz(np.asarray(s1(c)))))
      else:
        g = lambda c: f(s0(c), s1(c))
    else:
      if ftz:
        g = lambda c: _ftz(f(*[_ftz(np.asarray(s(c))) for s in srcs]))
      else:
        g = lambda c: f(*[s(c) for s in srcs])
    if sat:
      g0 = g
      one = dt.type(1)
      zero = dt.type(0)
      g = lambda c: np.where(np.isnan(v := np.asarray(g0(c))), zero, np.clip(v, zero, one)).astype(dt)

    def fn(c, m):
      v = g(c)
      if getattr(v, "dtype", None) != rdt:
        v = np.asarray(v).astype(rdt) if _is_float(rdt) or np.asarray(v).dtype.kind == "f" \
            else _bits(np.asarray(v), rdt, sg)
      wd(c, v, sg, m)
    ins.fn = fn
    return dt

  def _float_round_op(self, ins: _Ins, t, op2):
    """f32 add/sub/mul/div with a directed rounding mode: compute in f64, round."""
    mode = next((m for m in ins.mods if m in ("rz", "rm", "rp")), None)
    if t == "f32" and mode:
      return lambda a, b: _round_f32(op2(np.float64(a) if np.ndim(a) == 0 else a.astype(np.float64),
                                         np.float64(b) if np.ndim(b) == 0 else b.astype(np.float64)), mode)
    return None

  def _c_add(self, ins: _Ins):
    t = self._one_type(ins)
    if t == "pred" or "cc" in ins.mods:
      raise self._err(ins, "add.cc / addc carry chains are not supported")
    dt = _DT[t]
    if t in ("f16x2", "bf16x2"):
      return self._packed(ins, t, lambda a, b: a + b)
    if t == "bf16":
      return self._bf16(ins, lambda a, b: a + b)
    if "sat" in ins.mods and dt.kind == "i":
      info = np.iinfo(dt)
      return self._arith(ins, 2,
                         lambda a, b: np.clip(np.asarray(a).astype(np.int64) + b, info.min, info.max).astype(dt))
    f = self._float_round_op(ins, t, np.add) or (lambda a, b: a + b)
    self._arith(ins, 2, f)

  def _c_sub(self, ins: _Ins):
    t = self._one_type(ins)
    dt = _DT[t]
    if "cc" in ins.mods:
      raise self._err(ins, "sub.cc / subc carry chains are not supported")
    if t in ("f16x2", "bf16x2"):
      return self._packed(ins, t, lambda a, b: a - b)
    if t == "bf16":
      return self._bf16(ins, lambda a, b: a - b)
    if "sat" in ins.mods and dt.kind == "i":
      info = np.iinfo(dt)
      return self._arith(ins, 2,
                         lambda a, b: np.clip(np.asarray(a).astype(np.int64) - b, info.min, info.max).astype(dt))
    f = self._float_round_op(ins, t, np.subtract) or (lambda a, b: a - b)
    self._arith(ins, 2, f)

  def _c_mul(self, ins: _Ins):
    t = self._one_type(ins)
    dt = _DT[t]
    if t in ("f16x2", "bf16x2"):
      return self._packed(ins, t, lambda a, b: a * b)
    if t == "bf16":
      return self._bf16(ins, lambda a, b: a * b)
    if _is_float(dt):
      f = self._float_round_op(ins, t, np.multiply) or (lambda a, b: a * b)
      return self._arith(ins, 2, f)
    if "wide" in ins.mods:
      if dt.itemsize == 8:
        raise self._err(ins, "mul.wide is only defined for 16- and 32-bit types")
      w = ("s" if dt.kind == "i" else "u") + str(dt.itemsize * 16)
      wdt = _DT[w]
      return self._arith(ins, 2, lambda a, b: np.asarray(a).astype(wdt) * np.asarray(b).astype(wdt), res_t=w)
    if "hi" in ins.mods:
      return self._arith(ins, 2, lambda a, b: _mulhi(np.asarray(a), np.asarray(b), dt))
    if "lo" not in ins.mods:
      raise self._err(ins, "integer mul needs .lo, .hi or .wide")
    self._arith(ins, 2, lambda a, b: a * b)

  def _c_mul24(self, ins: _Ins) -> None:
    t = self._one_type(ins)
    dt = _DT[t]
    def f(a, b):
      a = np.asarray(a).astype(np.int64)
      b = np.asarray(b).astype(np.int64)
      if dt.kind == "i":
        a = (a << 40) >> 40
        b = (b << 40) >> 40
      else:
        a &= 0xFFFFFF
        b &= 0xFFFFFF
      p = a * b
      return (p >> 16) if "hi" in ins.mods else p
    self._arith(ins, 2, lambda a, b: _bits(f(a, b), dt))

  def _c_mad(self, ins: _Ins):
    t = self._one_type(ins)
    dt = _DT[t]
    if _is_float(dt) or t in ("f16x2", "bf16x2"):
      return self._c_fma(ins)
    if "cc" in ins.mods:
      raise self._err(ins, "mad.cc / madc carry chains are not supported")
    self._need(ins, 4)
    if "wide" in ins.mods:
      w = ("s" if dt.kind == "i" else "u") + str(dt.itemsize * 16)
      wdt = _DT[w]
      sa, sb = self._src(ins, ins.ops[1], dt), self._src(ins, ins.ops[2], dt)
      sc = self._src(ins, ins.ops[3], wdt)
      wd = self._dst(ins, ins.ops[0])
      sg = wdt.kind == "i"
      ins.fn = lambda c, m: wd(c, (np.asarray(sa(c)).astype(wdt) * np.asarray(sb(c)).astype(wdt) + sc(c)).astype(wdt),
                               sg, m)
      return
    if "hi" in ins.mods:
      return self._arith(ins, 3, lambda a, b, cc: (_mulhi(np.asarray(a), np.asarray(b), dt) + cc).astype(dt))
    if "lo" not in ins.mods:
      raise self._err(ins, "integer mad needs .lo, .hi or .wide")
    self._arith(ins, 3, lambda a, b, cc: a * b + cc)

  def _c_fma(self, ins: _Ins):
    t = self._one_type(ins)
    dt = _DT[t]
    mode = next((m for m in ins.mods if m in ("rn", "rz", "rm", "rp")), "rn")
    if t in ("f16x2", "bf16x2"):
      return self._packed(ins, t, lambda a, b, c: (a.astype(np.float64) * b + c), nargs=3)
    if t == "bf16":
      return self._bf16(ins, lambda a, b, c: a.astype(np.float64) * b + c, nargs=3)
    if dt == np.float32:
      def f(a, b, c):
        return _round_f32(np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64), mode)
    elif dt == np.float16:
      def f(a, b, c):
        return (np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)).astype(np.float16)
    elif dt == np.float64:
      def f(a, b, c):
        return a * b + c
    else:
      raise self._err(ins, f"fma needs a float type, got .{t}")
    self._arith(ins, 3, f)

  def _c_div(self, ins: _Ins):
    t = self._one_type(ins)
    dt = _DT[t]
    if _is_float(dt):
      f = self._float_round_op(ins, t, np.divide) or (lambda a, b: a / b)
      return self._arith(ins, 2, f)
    self._arith(ins, 2, lambda a, b: _divmod_trunc(a, b, dt)[0])

  def _c_rem(self, ins: _Ins) -> None:
    t = self._one_type(ins)
    dt = _DT[t]
    if _is_float(dt):
      raise self._err(ins, "rem is integer-only")
    self._arith(ins, 2, lambda a, b: _divmod_trunc(a, b, dt)[1])

  def _c_min(self, ins: _Ins):
    t = self._one_type(ins)
    dt = _DT[t]
    if t in ("f16x2", "bf16x2"):
      return self._packed(ins, t, np.minimum if "NaN" in ins.mods else np.fmin)
    if _is_float(dt):
      return self._arith(ins, 2, np.minimum if "NaN" in ins.mods else np.fmin)
    self._arith(ins, 2, np.minimum)

  def _c_max(self, ins: _Ins):
    t = self._one_type(ins)
    dt = _DT[t]
    if t in ("f16x2", "bf16x2"):
      return self._packed(ins, t, np.maximum if "NaN" in ins.mods else np.fmax)
    if _is_float(dt):
      return self._arith(ins, 2, np.maximum if "NaN" in ins.mods else np.fmax)
    self._arith(ins, 2, np.maximum)

  def _c_neg(self, ins: _Ins):
    t = self._one_type(ins)
    if t in ("f16x2", "bf16x2"):
      return self._packed(ins, t, lambda a: -a, nargs=1)
    self._arith(ins, 1, lambda a: -a)

  def _c_abs(self, ins: _Ins):
    t = self._one_type(ins)
    if t in ("f16x2", "bf16x2"):
      return self._packed(ins, t, np.abs, nargs=1)
    self._arith(ins, 1, np.abs)

  def _c_sad(self, ins: _Ins) -> None:
    t = self._one_type(ins)
    dt = _DT[t]
    self._arith(ins, 3, lambda a, b, c: (np.where(a > b, a - b, b - a) + c).astype(dt))

  def _packed(self, ins: _Ins, t, f, nargs=2) -> None:
    """f16x2 / bf16x2 ops: two halves of a 32-bit register, computed in f32 and rounded."""
    self._need(ins, nargs + 1)
    u32 = np.dtype(np.uint32)
    srcs = [self._src(ins, o, u32) for o in ins.ops[1:]]
    wd = self._dst(ins, ins.ops[0])
    bf = t == "bf16x2"

    def unpack(v):
      v = np.atleast_1d(np.asarray(v, np.uint32))
      h = v.view(np.uint16)
      return _bf16_to_f32(h) if bf else h.view(np.float16).astype(np.float32)

    def fn(c, m):
      args = [unpack(s(c)) for s in srcs]
      n = max(a.size for a in args)
      args = [np.broadcast_to(a, (n,)) if a.size == n else np.tile(a, n // a.size) for a in args]
      r = np.asarray(f(*args))
      if "sat" in ins.mods:
        r = np.where(np.isnan(r), 0, np.clip(r, 0, 1))
      h = _f32_to_bf16(r.astype(np.float32)) if bf else r.astype(np.float16).view(np.uint16)
      wd(c, np.ascontiguousarray(h).view(np.uint32), False, m)
    ins.fn = fn

  def _bf16(self, ins: _Ins, f, nargs=2) -> None:
    self._need(ins, nargs + 1)
    u16 = np.dtype(np.uint16)
    srcs = [self._src(ins, o, u16) for o in ins.ops[1:]]
    wd = self._dst(ins, ins.ops[0])
    ins.fn = lambda c, m: wd(c, _f32_to_bf16(np.asarray(f(*[_bf16_to_f32(s(c)) for s in srcs])).astype(np.float32)),
                             False, m)

  # float math
  def _math(self, ins: _Ins, f):
    t = self._one_type(ins)
    if t in ("f16x2", "bf16x2"):
      return self._packed(ins, t, lambda a: f(a.astype(np.float32)), nargs=1)
    dt = _DT[t]
    if not _is_float(dt):
      raise self._err(ins, f"{ins.op} needs a float type, got .{t}")
    self._arith(ins, 1, lambda a: np.asarray(f(a)).astype(dt))

  def _c_sqrt(self, ins: _Ins) -> None:
    self._math(ins, np.sqrt)

  def _c_rsqrt(self, ins: _Ins) -> None:
    self._math(ins, lambda a: 1 / np.sqrt(a))

  def _c_rcp(self, ins: _Ins):
    t = self._one_type(ins)
    mode = next((m for m in ins.mods if m in ("rz", "rm", "rp")), None)
    if mode and t == "f32":
      return self._math(ins, lambda a: _round_f32(1.0 / np.asarray(a, np.float64), mode))
    self._math(ins, lambda a: np.asarray(1, a.dtype) / a)

  def _c_ex2(self, ins: _Ins) -> None:
    self._math(ins, np.exp2)

  def _c_lg2(self, ins: _Ins) -> None:
    self._math(ins, np.log2)

  def _c_sin(self, ins: _Ins) -> None:
    self._math(ins, np.sin)

  def _c_cos(self, ins: _Ins) -> None:
    self._math(ins, np.cos)

  def _c_tanh(self, ins: _Ins) -> None:
    self._math(ins, np.tanh)

  def _c_copysign(self, ins):
    # copysign.f32 d, a, b: d = |b| with the sign of a
    self._arith(ins, 2, lambda a, b: np.copysign(b, a))

  def _c_testp(self, ins: _Ins) -> None:
    self._need(ins, 2)
    t = self._one_type(ins)
    dt = _DT[t]
    tests = {"finite": np.isfinite, "infinite": np.isinf, "number": lambda x: ~np.isnan(x),
             "notanumber": np.isnan,
             "normal": lambda x: np.isfinite(x) & (np.abs(x) >= np.finfo(dt).tiny),
             "subnormal": lambda x: (x != 0) & (np.abs(x) < np.finfo(dt).tiny)}
    which = next((m for m in ins.mods if m in tests), None)
    if which is None:
      raise self._err(ins, "testp needs .finite/.infinite/.number/.notanumber/.normal/.subnormal")
    src = self._src(ins, ins.ops[1], dt)
    wd = self._dst(ins, ins.ops[0])
    f = tests[which]
    ins.fn = lambda c, m: wd(c, np.asarray(f(np.asarray(src(c)))), False, m)

  # logic
  def _logic(self, ins: _Ins, f) -> None:
    t = self._one_type(ins)
    dt = _DT[t]
    if _is_float(dt) and t not in ("f16x2", "bf16x2"):
      raise self._err(ins, f"{ins.op} needs a bit type, got .{t}")
    if t in ("f16x2", "bf16x2"):
      ins.mods = [m if m != t else "b32" for m in ins.mods]
    self._arith(ins, len(ins.ops) - 1, f)

  def _c_and(self, ins: _Ins) -> None:
    self._logic(ins, lambda a, b: a & b)

  def _c_or(self, ins: _Ins) -> None:
    self._logic(ins, lambda a, b: a | b)

  def _c_xor(self, ins: _Ins) -> None:
    self._logic(ins, lambda a, b: a ^ b)

  def _c_not(self, ins: _Ins) -> None:
    self._logic(ins, lambda a: ~a)

  def _c_cnot(self, ins: _Ins) -> None:
    t = self._one_type(ins)
    dt = _DT[t]
    self._logic(ins, lambda a: (np.asarray(a) == 0).astype(dt))

  def _c_lop3(self, ins: _Ins) -> None:
    self._need(ins, 5)
    u32 = np.dtype(np.uint32)
    srcs = [self._src(ins, o, u32) for o in ins.ops[1:4]]
    lut = _literal(ins.ops[4])
    if lut is None or lut[0] != "i":
      raise self._err(ins, "lop3 LUT must be an immediate")
    lut = lut[1] & 0xFF
    wd = self._dst(ins, ins.ops[0])

    def fn(c, m):
      a, b, cc = (np.asarray(s(c), np.uint32) for s in srcs)
      r = np.zeros(np.broadcast(a, b, cc).shape, np.uint32)
      for k in range(8):
        if lut >> k & 1:
          ta = a if k & 4 else ~a
          tb = b if k & 2 else ~b
          tc = cc if k & 1 else ~cc
          r |= ta & tb & tc
      wd(c, r, False, m)
    ins.fn = fn

  def _shift(self, ins: _Ins, left: bool) -> None:
    self._need(ins, 3)
    t = self._one_type(ins)
    dt = _DT[t]
    if _is_float(dt) or dt == np.bool_:
      raise self._err(ins, f"{ins.op} needs an integer type, got .{t}")
    width = dt.itemsize * 8
    a = self._src(ins, ins.ops[1], dt)
    b = self._src(ins, ins.ops[2], np.dtype(np.uint32))
    wd = self._dst(ins, ins.ops[0])
    sg = dt.kind == "i"

    def fn(c, m):
      x = np.asarray(a(c))
      s = np.minimum(np.asarray(b(c)), width)
      big = s >= width
      sd = np.minimum(s, width - 1).astype(dt)
      if left:
        r = np.where(big, dt.type(0), x << sd)
      else:
        r = x >> sd
        if not sg:
          r = np.where(big, dt.type(0), r)
      wd(c, np.asarray(r).astype(dt), sg, m)
    ins.fn = fn

  def _c_shl(self, ins: _Ins) -> None:
    self._shift(ins, True)

  def _c_shr(self, ins: _Ins) -> None:
    self._shift(ins, False)

  def _c_popc(self, ins: _Ins) -> None:
    self._one_type(ins)  # exactly one type modifier
    self._arith(ins, 1, lambda a: np.bitwise_count(np.asarray(a)).astype(np.uint32), res_t="u32")

  def _c_clz(self, ins: _Ins) -> None:
    t = self._one_type(ins)
    w = _DT[t].itemsize * 8
    self._arith(ins, 1, lambda a: _clz(a, w), res_t="u32")

  def _c_brev(self, ins: _Ins) -> None:
    t = self._one_type(ins)
    w = _DT[t].itemsize * 8
    self._arith(ins, 1, lambda a: _brev(a, w))

  def _c_bfind(self, ins: _Ins) -> None:
    t = self._one_type(ins)
    dt = _DT[t]
    w = dt.itemsize * 8
    shamt = "shiftamt" in ins.mods

    def f(a):
      a = np.asarray(a)
      x = np.where(a < 0, ~a, a) if dt.kind == "i" else a
      z = _clz(x.astype(dt), w).astype(np.int64)
      pos = (w - 1 - z)
      if shamt:
        pos = w - 1 - pos
      return np.where(z == w, 0xFFFFFFFF, pos).astype(np.uint32)
    self._arith(ins, 1, f, res_t="u32")

  def _c_bfe(self, ins: _Ins) -> None:
    self._need(ins, 4)
    t = self._one_type(ins)
    dt = _DT[t]
    w = dt.itemsize * 8
    a = self._src(ins, ins.ops[1], dt)
    b = self._src(ins, ins.ops[2], np.dtype(np.uint32))
    cc = self._src(ins, ins.ops[3], np.dtype(np.uint32))
    wd = self._dst(ins, ins.ops[0])
    sg = dt.kind == "i"

    def fn(c, m):
      x = np.asarray(a(c)).view(_UINT[dt.itemsize]).astype(np.uint64)
      pos = np.asarray(b(c)).astype(np.uint64) & np.uint64(0xFF)
      ln = np.asarray(cc(c)).astype(np.uint64) & np.uint64(0xFF)
      pos_c = np.minimum(pos, np.uint64(w - 1))
      ln_c = np.minimum(ln, np.uint64(w))
      field = x >> pos_c
      field = np.where(pos >= w, np.uint64(0), field)
      mask = np.where(ln_c >= 64, np.uint64(0xFFFFFFFFFFFFFFFF),
                      (np.uint64(1) << np.minimum(ln_c, np.uint64(63))) - np.uint64(1))
      r = field & mask
      if sg:
        msb = np.minimum(pos + ln_c, np.uint64(w)) - np.uint64(1)
        sbit = np.where(ln_c == 0, np.uint64(0), (x >> np.minimum(msb, np.uint64(w - 1))) & np.uint64(1))
        ext = np.where(sbit == 1, ~mask, np.uint64(0))
        r = r | ext
      r = r.astype(_UINT[dt.itemsize]).view(dt)
      wd(c, r, sg, m)
    ins.fn = fn

  def _c_bfi(self, ins: _Ins) -> None:
    self._need(ins, 5)
    t = self._one_type(ins)
    dt = _DT[t]
    w = dt.itemsize * 8
    a = self._src(ins, ins.ops[1], dt)
    b = self._src(ins, ins.ops[2], dt)
    pc = self._src(ins, ins.ops[3], np.dtype(np.uint32))
    lc = self._src(ins, ins.ops[4], np.dtype(np.uint32))
    wd = self._dst(ins, ins.ops[0])

    def fn(c, m):
      x = np.asarray(a(c)).view(_UINT[dt.itemsize]).astype(np.uint64)
      y = np.asarray(b(c)).view(_UINT[dt.itemsize]).astype(np.uint64)
      pos = np.asarray(pc(c)).astype(np.uint64) & np.uint64(0xFF)
      ln = np.asarray(lc(c)).astype(np.uint64) & np.uint64(0xFF)
      ln = np.minimum(ln, np.uint64(w))
      fmask = np.where(ln >= 64, np.uint64(0xFFFFFFFFFFFFFFFF),
                       (np.uint64(1) << np.minimum(ln, np.uint64(63))) - np.uint64(1))
      ok = pos < w
      ps = np.minimum(pos, np.uint64(w - 1))
      mask = np.where(ok, fmask << ps, np.uint64(0))
      r = (y & ~mask) | ((x << ps) & mask)
      wd(c, r.astype(_UINT[dt.itemsize]).view(dt), False, m)
    ins.fn = fn

  def _c_prmt(self, ins: _Ins) -> None:
    self._need(ins, 4)
    if any(m in ins.mods for m in ("f4e", "b4e", "rc8", "ecl", "ecr", "rc16")):
      raise self._err(ins, "prmt modes other than the default are not supported")
    u32 = np.dtype(np.uint32)
    a, b, s = (self._src(ins, o, u32) for o in ins.ops[1:4])
    wd = self._dst(ins, ins.ops[0])

    def fn(c, m):
      x = np.asarray(a(c)).astype(np.uint64) | (np.asarray(b(c)).astype(np.uint64) << np.uint64(32))
      sel = np.asarray(s(c)).astype(np.uint64)
      r = np.zeros(np.broadcast(x, sel).shape, np.uint64)
      for i in range(4):
        nib = (sel >> np.uint64(4 * i)) & np.uint64(0xF)
        byte = (x >> (np.uint64(8) * (nib & np.uint64(7)))) & np.uint64(0xFF)
        rep = (nib & np.uint64(8)) != 0
        byte = np.where(rep, np.where(byte & np.uint64(0x80), np.uint64(0xFF), np.uint64(0)), byte)
        r |= byte << np.uint64(8 * i)
      wd(c, r.astype(np.uint32), False, m)
    ins.fn = fn

  # comparisons
  _CMP = {"eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs",
          "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan"}

  def _cmp_fn(self, ins: _Ins, cmp, dt: np.dtype):
    fl = _is_float(dt)
    base = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
            "gt": np.greater, "ge": np.greater_equal, "lo": np.less, "ls": np.less_equal,
            "hi": np.greater, "hs": np.greater_equal}
    if cmp in ("lo", "ls", "hi", "hs") and dt.kind == "i":
      raise self._err(ins, f"unsigned comparison .{cmp} with signed type")
    if cmp in base:
      f = base[cmp]
      if fl and cmp == "ne":  # ordered: false if either is NaN
        return lambda a, b: (a != b) & ~np.isnan(a) & ~np.isnan(b)
      return f
    if not fl:
      raise self._err(ins, f"comparison .{cmp} needs a float type")
    if cmp == "num":
      return lambda a, b: ~np.isnan(a) & ~np.isnan(b)
    if cmp == "nan":
      return lambda a, b: np.isnan(a) | np.isnan(b)
    f = base[cmp[:-1]]
    return lambda a, b: f(a, b) | np.isnan(a) | np.isnan(b)

  def _c_setp(self, ins: _Ins) -> None:
    mods = ins.mods
    cmp = next((m for m in mods if m in self._CMP), None)
    if cmp is None:
      raise self._err(ins, "setp needs a comparison operator")
    t = self._one_type(ins)
    dt = _DT[t]
    if t in ("f16x2", "bf16x2", "bf16"):
      raise self._err(ins, f"setp .{t} is not supported")
    boolop = next((m for m in mods if m in ("and", "or", "xor")), None)
    ftz = "ftz" in mods and dt == np.float32
    f = self._cmp_fn(ins, cmp, dt)
    need = 4 if boolop else 3
    self._need(ins, need)
    dsts = ins.ops[0].split("|")
    wp = self._dst(ins, dsts[0])
    wq = self._dst(ins, dsts[1]) if len(dsts) > 1 else None
    sa = self._src(ins, ins.ops[1], dt, tname=t)
    sb = self._src(ins, ins.ops[2], dt, tname=t)
    sc = self._src(ins, ins.ops[3], np.dtype(np.bool_)) if boolop else None
    bop = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}.get(boolop)

    def fn(c, m):
      a, b = np.asarray(sa(c)), np.asarray(sb(c))
      if ftz:
        a, b = _ftz(a), _ftz(b)
      r = np.asarray(f(a, b))
      if bop is not None:
        cv = sc(c)
        p, q = bop(r, cv), bop(~r, cv)
      else:
        p, q = r, ~r
      wp(c, np.asarray(p), False, m)
      if wq is not None:
        wq(c, np.asarray(q), False, m)
    ins.fn = fn

  def _c_set(self, ins: _Ins) -> None:
    mods = ins.mods
    cmp = next((m for m in mods if m in self._CMP), None)
    ts = self._types(ins)
    if cmp is None or len(ts) != 2:
      raise self._err(ins, "set needs a comparison and two types (set.CmpOp.dtype.stype)")
    ddt, sdt = _DT[ts[0]], _DT[ts[1]]
    boolop = next((m for m in mods if m in ("and", "or", "xor")), None)
    f = self._cmp_fn(ins, cmp, sdt)
    sa, sb = self._src(ins, ins.ops[1], sdt), self._src(ins, ins.ops[2], sdt)
    sc = self._src(ins, ins.ops[3], np.dtype(np.bool_)) if boolop else None
    bop = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}.get(boolop)
    wd = self._dst(ins, ins.ops[0])
    true = ddt.type(1.0) if _is_float(ddt) else np.array(-1).astype(ddt)[()]

    def fn(c, m):
      r = np.asarray(f(np.asarray(sa(c)), np.asarray(sb(c))))
      if bop is not None:
        r = bop(r, sc(c))
      wd(c, np.where(r, true, ddt.type(0)).astype(ddt), False, m)
    ins.fn = fn

  def _c_selp(self, ins: _Ins) -> None:
    self._need(ins, 4)
    t = self._one_type(ins)
    dt = _DT[t]
    a, b = self._src(ins, ins.ops[1], dt, tname=t), self._src(ins, ins.ops[2], dt, tname=t)
    p = self._src(ins, ins.ops[3], np.dtype(np.bool_))
    wd = self._dst(ins, ins.ops[0], tname=t)
    sg = dt.kind == "i"
    ins.fn = lambda c, m: wd(c, np.where(p(c), a(c), b(c)).astype(dt), sg, m)

  def _c_slct(self, ins: _Ins) -> None:
    self._need(ins, 4)
    ts = self._types(ins)
    dt, ct = _DT[ts[0]], _DT[ts[1]]
    a, b = self._src(ins, ins.ops[1], dt), self._src(ins, ins.ops[2], dt)
    cc = self._src(ins, ins.ops[3], ct)
    wd = self._dst(ins, ins.ops[0])
    ins.fn = lambda c, m: wd(c, np.where(np.asarray(cc(c)) >= 0, a(c), b(c)).astype(dt), dt.kind == "i", m)
