"""Operand compilers of PTXKernel (`Operands`): a source, destination or address operand becomes a closure over the
execution context; operand types are checked by the PTX ISA's rules."""
from __future__ import annotations
import re
import numpy as np
from baregrad.drivers.mock.ptx.dtypes import _DT, _SPECIAL, _bits, _is_float, _kind
from baregrad.drivers.mock.ptx.errors import PTXError
from baregrad.drivers.mock.ptx.parser import _lit_value, _literal, _parse_int, _Ins

class Operands:
  """Compiles operands into closures fn(ctx): registers (bit-reinterpreted to the instruction type), literals,
  symbols, special registers, addresses."""

  def _reg_dtype(self, ins: _Ins, name):
    try:
      return self.reg_types[name]
    except KeyError:
      raise self._err(ins, f"undeclared register {name}") from None

  _RELAXED = {"ld", "ldu", "st", "cvt"}  # a register wider than the instruction type is allowed

  def _check_type(self, ins: _Ins, reg, tname) -> None:
    """PTX operand type rules: same type; or the same size where either is a bit type (.bNN)
    or both are integers; ld/st/cvt also take a register wider than the instruction type."""
    rt = self.reg_tnames.get(reg)
    if rt is None or tname is None or rt == tname or "pred" in (rt, tname):
      return
    rs, ts = _DT[rt].itemsize, _DT[tname].itemsize
    rk, tk = _kind(rt), _kind(tname)
    relaxed = ins.op in self._RELAXED
    size_ok = rs == ts or (relaxed and rs > ts and rt[0] in "bsu")
    if rt[0] == "b" or tname[0] == "b" and tname not in ("bf16", "bf16x2"):
      compatible = True
    elif rk in "su" and tk in "su":
      compatible = True
    elif rt in ("b16",) and tname in ("bf16",):
      compatible = True
    else:
      compatible = False
    if not (compatible and size_ok):
      raise self._err(ins, f"wrong operand type: register {reg} is .{rt}, the instruction "
                           f"type is .{tname}")

  def _src(self, ins: _Ins, s, dt: np.dtype, signed=None, tname=None):
    """Compile a source operand into fn(ctx) -> array or scalar of dtype dt."""
    s = s.strip()
    if s.startswith("%") and tname is not None:
      self._check_type(ins, s, tname)
    if signed is None:
      signed = dt.kind == "i"
    if s.startswith("!"):
      inner = self._src(ins, s[1:], np.dtype(np.bool_))
      return lambda c: ~inner(c)
    if s.startswith("{"):
      raise self._err(ins, f"vector operand {s} not allowed here")
    if s.startswith("%"):
      base = s.split(".")[0][1:]
      if s not in self.reg_types and base in _SPECIAL:
        return self._special(ins, s, dt)
      rdt = self._reg_dtype(ins, s)
      if rdt == dt:
        return lambda c: c.regs[s]
      if rdt == np.bool_ and dt != np.bool_:
        raise self._err(ins, f"predicate register {s} used as {dt}")
      if dt == np.bool_ and rdt != np.bool_:
        raise self._err(ins, f"register {s} ({rdt}) used as a predicate")
      return lambda c: _bits(c.regs[s], dt, signed)
    lit = _literal(s)
    if lit is not None:
      try:
        v = _lit_value(lit, dt)
      except PTXError as e:
        raise e.locate(ins.line, ins.text)
      return lambda c: v
    m = re.fullmatch(r"([\w$]+)(?:\s*\+\s*(\d+))?", s)
    if m and (m.group(1) in self.module.globals or m.group(1) in self.shared_offsets
              or m.group(1) in self.local_offsets or m.group(1) in self.param_offsets):
      return self._symbol(ins, m.group(1), int(m.group(2) or 0), dt)
    raise self._err(ins, f"cannot understand operand `{s}`")

  def _symbol(self, ins: _Ins, name, add, dt: np.dtype):
    if name in self.shared_offsets:
      v = dt.type(self.shared_offsets[name] + add)
      return lambda c: v
    if name in self.local_offsets:
      v = dt.type(self.local_offsets[name] + add)
      return lambda c: v
    if name in self.param_offsets:
      v = dt.type(self.param_offsets[name] + add)
      return lambda c: v
    return lambda c: dt.type(c.gaddr[name] + add)

  def _special(self, ins: _Ins, s, dt: np.dtype):
    name = s[1:]
    if name.split(".")[0] not in ("tid", "ntid", "ctaid", "nctaid", "laneid", "warpid", "nwarpid",
                                  "smid", "nsmid", "gridid", "clock", "clock64", "lanemask_eq",
                                  "lanemask_lt", "lanemask_le", "lanemask_gt", "lanemask_ge",
                                  "dynamic_smem_size", "total_smem_size", "warpsize", "WARP_SZ"):
      raise self._err(ins, f"special register {s} is not supported")
    return lambda c: _bits(c.special(name), dt, False)

  def _dst(self, ins: _Ins, s, tname=None):
    """Compile a destination register into fn(ctx, value, value_dtype_signed, mask)."""
    s = s.strip()
    if s == "_":
      return lambda c, v, sg, m: None
    if tname is not None and s.startswith("%"):
      self._check_type(ins, s, tname)
    if not s.startswith("%"):
      raise self._err(ins, f"destination `{s}` is not a register")
    rdt = self._reg_dtype(ins, s)

    def w(c, v, sg, m):
      v = _bits(v, rdt, sg) if getattr(v, "dtype", None) != rdt else v
      if np.ndim(v) == 0:
        v = np.full(c.n, v, rdt)
      if m is None:
        c.regs[s] = v
      else:
        c.regs[s] = np.where(m, v, c.regs[s])
    return w

  def _addr(self, ins: _Ins, s, space: str):
    """[reg+off] / [sym+off] / [imm] -> fn(ctx) -> uint64 address (in `space`)."""
    s = s.strip()
    if not (s.startswith("[") and s.endswith("]")):
      raise self._err(ins, f"expected an address operand [..], got `{s}`")
    inner = s[1:-1].strip()
    m = re.fullmatch(r"([^+\-]+?)\s*(?:([+\-])\s*([+\-]?\s*(?:0[xX][0-9a-fA-F]+|\d+)))?", inner)
    if not m:
      raise self._err(ins, f"cannot parse address `{s}`")
    base, sign, off = m.group(1).strip(), m.group(2), m.group(3)
    offv = 0
    if off:
      offv = _parse_int(off.replace(" ", ""))
      if sign == "-":
        offv = -offv
    u64 = np.dtype(np.uint64)
    if base.startswith("%"):
      rdt = self._reg_dtype(ins, base)
      if rdt == np.bool_ or _is_float(rdt):
        raise self._err(ins, f"address register {base} has type {rdt}")
      if rdt.itemsize == 8:
        if offv == 0:
          return lambda c: c.regs[base].view(np.uint64)
        o = np.uint64(offv & 0xFFFFFFFFFFFFFFFF)
        return lambda c: c.regs[base].view(np.uint64) + o
      # 32-bit register address (shared/local windows, or .address_size 32 style)
      o = np.uint64(offv & 0xFFFFFFFFFFFFFFFF)
      return lambda c: _bits(c.regs[base], np.dtype(np.uint32)).astype(np.uint64) + o
    lit = _literal(base)
    if lit is not None and lit[0] == "i":
      v = np.uint64((lit[1] + offv) & 0xFFFFFFFFFFFFFFFF)
      return lambda c: v
    f = self._symbol(ins, base, 0, u64) if (base in self.module.globals or base in self.shared_offsets
                                             or base in self.local_offsets or base in self.param_offsets) else None
    if f is None:
      raise self._err(ins, f"unknown symbol `{base}` in address")
    if space == "generic" or space is None:
      if base in self.shared_offsets:
        v = self.shared_offsets[base] + offv
        return lambda c: np.uint64(c.win.cvta_shared + v)
      if base in self.local_offsets:
        v = self.local_offsets[base] + offv
        return lambda c: np.uint64(c.win.cvta_local + v)
    o = np.uint64(offv & 0xFFFFFFFFFFFFFFFF)
    return lambda c: f(c) + o
