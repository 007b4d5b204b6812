"""An ir3 (Adreno a6xx shader ISA) executor for the mock Adreno: runs the compute programs Mesa's ir3 compiler emits.

Decoding: the program's words go through Mesa's own disassembler (drivers/qcom/ir3_disasm.py, tinymesa's
disasm_a3xx), and each line is parsed here into an instruction: sync flags, repeat, opcode with its types, and
operands. Only forms listed in EXEC are accepted; anything else is refused by name (an unmodelled instruction is an
error, never a silent no-op).

Execution model: one workgroup at a time, all its threads as NumPy lanes, each lane with its own program counter. The
lanes at the lowest PC run the instruction there together (min-PC reconvergence: a divergent branch runs one side,
then the other, and the lanes meet again where the paths join), so branches and divergence need no stack. `bar` is
where every live lane of the workgroup must meet (checked). Registers: the full file r0.x-r63.w as uint32 per lane;
with a6xx's merged register file a half register hrN.c is 16 bits of the full file (hr index h = bits 16*(h%2) of full
component h//2: Mesa ir3_ra.c, "merged" registers), the predicate registers p0.x-w, the const file cN.c (uint32).

Hazards (the sync flags a6xx leaves to the compiler, ir3_legalize.c): a result of a (sy)-class instruction (global
memory loads) or of an (ss)-class one (SFU functions, local memory loads) is not there until an instruction carrying
(sy) / (ss) waits for it. Reading such a register before that wait is reported as an Ir3Hazard (run(strict=True) raises
it), with the instruction, its PC and the register.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from baregrad.drivers.mock.adreno.cp import GpuMemory

NREGS = 64   # full registers r0-r63 (vec4 each); a6xx has 48 usable GPRs plus sysval/special ones above (r48.x: wgid)


class Ir3Error(Exception):
  """The executor met an instruction form it does not model, or the program broke a rule (fault, barrier)."""


@dataclass(frozen=True)
class Ir3Hazard:
  """A register read before the sync flag that guards it: pc, the instruction's text, the register, the flag needed."""
  pc: int
  text: str
  reg: str
  needs: str

  def __str__(self) -> str: return f"ir3 hazard at pc {self.pc} `{self.text}`: reads {self.reg} before a ({self.needs}) wait"


@dataclass(frozen=True)
class Opnd:
  """One operand: kind 'r' (full register), 'h' (half), 'c' (const), 'p' (predicate), 'i' (immediate bits), 'f'
  (float immediate), 'g' (global address register pair + offset), 'l' (local address register/imm + offset),
  'label' (branch target). idx: component index (4*reg + comp); rel: advances with (rpt)."""
  kind: str
  idx: int = 0
  imm: int | float = 0
  off: int = 0
  neg: bool = False
  absv: bool = False
  rel: bool = False
  not_: bool = False
  base: Opnd | None = None


@dataclass
class Instr:
  """One decoded instruction."""
  pc: int
  text: str
  op: str
  types: list[str]
  dst: Opnd | None
  srcs: list[Opnd]
  sy: bool = False
  ss: bool = False
  rpt: int = 0
  extra: list[str] = field(default_factory=list)


_COMP = {"x": 0, "y": 1, "z": 2, "w": 3}
# float immediates disasm_a3xx prints by name (the strings in libtinymesa's disassembler)
_NAMED_FLOAT = {"(pi)": 3.141592653589793, "(1/pi)": 0.3183098861837907, "(log2(e))": 1.4426950408889634, "(1/log2(e))": 0.6931471805599453}
_FLAG = re.compile(r"^\((sy|ss|jp|ul|ei|eq|sat|rpt\d|nop\d)\)")


def _reg(tok: str) -> Opnd | None:
  m = re.fullmatch(r"(h?r|h?c|p)(\d+)\.([xyzw])", tok)
  if not m: return None
  kind = {"r": "r", "hr": "h", "c": "c", "hc": "hc", "p": "p"}[m.group(1)]
  return Opnd(kind, 4 * int(m.group(2)) + _COMP[m.group(3)])


def parse_operand(tok: str) -> Opnd:
  """One operand of disasm_a3xx's text."""
  tok = tok.strip()
  mods = {"neg": False, "abs": False, "rel": False, "not": False}
  while True:
    m = re.match(r"^\((neg|abs|r|even)\)", tok)
    if m:   # (even): cov's round-to-nearest-even, what NumPy's conversions do
      if m.group(1) != "even": mods["rel" if m.group(1) == "r" else m.group(1)] = True
      tok = tok[m.end():]; continue
    if tok.startswith("!"): mods["not"] = True; tok = tok[1:]; continue
    if tok.startswith("-") and not re.fullmatch(r"-[\d.]+(e[-+]?\d+)?|-inf|-nan|-0x[0-9a-f]+", tok): mods["neg"] = True; tok = tok[1:]; continue
    if tok.startswith("|") and tok.endswith("|"): mods["abs"] = True; tok = tok[1:-1]; continue
    break
  kw = dict(neg=mods["neg"], absv=mods["abs"], rel=mods["rel"], not_=mods["not"])
  if (r := _reg(tok)) is not None: return Opnd(r.kind, r.idx, **kw)
  if tok.startswith("#"): return Opnd("label", imm=int(tok.lstrip("#l")))
  m = re.fullmatch(r"([gl])\[(.+?)(?:\s*\+\s*(-?\d+))?\]", tok)
  if m:
    inner = m.group(2).strip()
    base = _reg(inner)
    if base is None:
      if re.fullmatch(r"-?\d+", inner): return Opnd(m.group(1), imm=int(inner), off=int(m.group(3) or 0))
      raise Ir3Error(f"unsupported address operand {tok!r}")
    return Opnd(m.group(1), off=int(m.group(3) or 0), base=base)
  if re.fullmatch(r"-?0x[0-9a-f]+|-?\d+", tok): return Opnd("i", imm=int(tok, 0), **kw)
  if (m := re.fullmatch(r"h\((-?0x[0-9a-f]+|-?\d+)\)", tok)): return Opnd("i", imm=int(m.group(1), 0), **kw)   # a half integer immediate
  if (c := _NAMED_FLOAT.get(tok.lstrip("h"))) is not None: return Opnd("f", imm=c, **kw)
  m = re.fullmatch(r"h?\(?(-?(?:[\d.]+(?:e[-+]?\d+)?|inf|nan))\)?", tok)
  if m: return Opnd("f", imm=float(m.group(1)), **kw)
  raise Ir3Error(f"unsupported operand {tok!r}")


def parse(text: str) -> list[Instr]:
  """disasm_a3xx's text -> instructions, indexed by their PC (labels `lN:` name PC N)."""
  out: list[Instr] = []
  for raw in text.splitlines():
    try: _parse_line(raw, out)
    except Ir3Error as e: raise Ir3Error(f"instruction {len(out)} `{raw.strip()}`: {e}") from None
  return out


def _parse_line(raw: str, out: list[Instr]) -> None:
  if True:
    line = raw.strip()
    if not line or re.fullmatch(r"l\d+:", line): return
    ins = Instr(len(out), line, "", [], None, [])
    while (m := _FLAG.match(line)):
      f = m.group(1)
      if f == "sy": ins.sy = True
      elif f == "ss": ins.ss = True
      elif f.startswith("rpt"): ins.rpt = int(f[3:])
      line = line[m.end():].lstrip()
    head, _, rest = line.partition(" ")
    parts = head.split(".")
    ins.op, ins.types = parts[0], parts[1:]
    toks = [t for t in _split_operands(rest)] if rest.strip() else []
    if ins.op in ("br", "jump", "brao", "braa"):   # branches have no destination
      ins.srcs = [parse_operand(t) for t in toks]
    elif ins.op == "stg" or ins.op == "stl":
      ins.srcs = [parse_operand(t) for t in toks]
    elif toks:
      ins.dst = parse_operand(toks[0])
      ins.srcs = [parse_operand(t) for t in toks[1:]]
    if ins.op in ("stl", "ldl") and ins.types and ins.types[0][1:] in ("16", "8"):
      # 16/8-bit local memory moves use half registers; disasm_a3xx prints them without the h (ir3 reports such a
      # shader's footprint with them as half registers: ir3_info.max_reg)
      half = lambda o: Opnd("h", o.idx, o.imm, o.off, o.neg, o.absv, o.rel, o.not_, o.base) if o.kind == "r" else o  # noqa: E731
      if ins.dst is not None: ins.dst = half(ins.dst)
      ins.srcs = [half(o) for o in ins.srcs]
    out.append(ins)


def _split_operands(s: str) -> list[str]:
  out, depth, cur = [], 0, ""
  for ch in s:
    if ch in "[(": depth += 1
    if ch in "])": depth -= 1
    if ch == "," and depth == 0: out.append(cur.strip()); cur = ""
    else: cur += ch
  if cur.strip(): out.append(cur.strip())
  return out


# ---- the sync classes (ir3_legalize.c: is_sfu/is_local_mem_load set (ss); is_load of global memory sets (sy))
SY_CLASS = {"ldg", "ldib", "ldc", "sam", "isam", "resinfo"}
SS_CLASS = {"rcp", "rsq", "log2", "exp2", "sin", "cos", "sqrt", "ldl", "ldlw", "ldlv"}

_NP = {"f32": np.float32, "f16": np.float16, "u32": np.uint32, "s32": np.int32, "u16": np.uint16, "s16": np.int16,
       "u8": np.uint8, "s8": np.int8, "b32": np.uint32, "b16": np.uint16}


class Wave:
  """The register state of one workgroup's lanes."""
  def __init__(self, lanes: int, consts: np.ndarray) -> None:
    self.n = lanes
    self.r = np.zeros((lanes, 4 * NREGS), np.uint32)
    self.p = np.zeros((lanes, 4), bool)
    self.c = consts
    self.pending: dict[tuple[str, int], str] = {}   # (kind, idx) -> "sy"/"ss" of a result not yet waited for

  def h(self) -> np.ndarray: return self.r.view(np.uint16)


class Executor:
  """Runs Ir3Program-shaped programs (drivers/qcom/ir3_compile.Ir3Program) over a GpuMemory."""
  def __init__(self, mem: GpuMemory, gpu_id: int = 630) -> None:
    self.mem, self.gpu_id = mem, gpu_id
    self.hazards: list[Ir3Hazard] = []
    self.executed: set[str] = set()   # the instruction forms run (op.types), for tests that every form is covered

  def run(self, prg: Any, global_size: tuple[int, ...], params: bytes, strict: bool = True, max_steps: int = 10_000_000,
          program: list[Instr] | None = None) -> None:
    """Run an Ir3Program over the grid: `global_size` workgroups of prg.local_size lanes; `params` fills the const
    file at c0 and prg.imms go where ir3 put them. program: already decoded instructions to run instead of prg's code
    (tests that alter a flag)."""
    nconst = max(prg.constlen, prg.imm_base_vec4 + (len(prg.imms) + 3) // 4, (len(params) + 15) // 16) * 4
    consts = np.zeros(nconst, np.uint32)
    pw = np.frombuffer(params + b"\0" * (-len(params) % 4), np.uint32)
    consts[:len(pw)] = pw
    consts[4 * prg.imm_base_vec4:4 * prg.imm_base_vec4 + len(prg.imms)] = np.array(prg.imms, np.uint32)
    if program is None: program = self.decode(prg.words())
    self.run_state(program, consts, tuple(prg.local_size), global_size, prg.wgid_regid, prg.lid_regid, prg.shared_size, strict, max_steps)

  def decode(self, words: list[int]) -> list[Instr]:
    """The program in `words` decoded through Mesa's disassembler for this chip."""
    from baregrad.drivers.qcom.ir3_disasm import disassemble
    return parse(disassemble(words, self.gpu_id))

  def run_state(self, prog: list[Instr], consts: np.ndarray, local_size: tuple[int, ...], global_size: tuple[int, ...], wgid_regid: int,
                lid_regid: int, shared_bytes: int, strict: bool = True, max_steps: int = 10_000_000) -> None:
    """Run decoded instructions as the hardware state says: const file `consts` (dwords), workgroup shape, the
    registers the workgroup id and local id arrive in (0xfc: none), the workgroup's local memory bytes."""
    lx, ly, lz = tuple(local_size) + (1,) * (3 - len(local_size))
    lanes = lx * ly * lz
    gs = tuple(global_size) + (1,) * (3 - len(global_size))
    lid = np.stack(np.meshgrid(np.arange(lx), np.arange(ly), np.arange(lz), indexing="ij"), -1).transpose(2, 1, 0, 3).reshape(-1, 3)
    for gz in range(gs[2]):
      for gy in range(gs[1]):
        for gx in range(gs[0]):
          w = Wave(lanes, consts)
          if lid_regid != 0xFC: w.r[:, lid_regid:lid_regid + 3] = lid.astype(np.uint32)
          if wgid_regid != 0xFC: w.r[:, wgid_regid:wgid_regid + 3] = np.array([gx, gy, gz], np.uint32)
          self._run_group(prog, w, strict, max_steps, shared_bytes)

  def _run_group(self, prog: list[Instr], w: Wave, strict: bool, max_steps: int, shared_size: int) -> None:
    pc = np.zeros(w.n, np.int64)
    live = np.ones(w.n, bool)
    pred_block = np.zeros(w.n, bool)   # inside predt/predf .. prede: lanes whose predicate failed skip
    pred_ok = np.ones(w.n, bool)
    self.local = np.zeros(max(shared_size, 16), np.uint8)
    steps = 0
    while live.any():
      steps += 1
      if steps > max_steps: raise Ir3Error(f"program did not end after {max_steps} instructions (pc {int(pc[live].min())})")
      at = int(pc[live].min())
      if at >= len(prog): raise Ir3Error(f"lanes ran past the end of the program (pc {at}, {len(prog)} instructions) without `end`")
      active = live & (pc == at)
      ins = prog[at]
      self.executed.add(".".join([ins.op, *ins.types]))
      if ins.sy: w.pending = {k: v for k, v in w.pending.items() if v != "sy"}
      if ins.ss: w.pending = {k: v for k, v in w.pending.items() if v != "ss"}
      op = ins.op
      if op == "end":
        live &= ~active; continue
      if op in ("br", "jump", "brao", "braa"):
        tgt = next(s for s in ins.srcs if s.kind == "label").imm
        conds = [s for s in ins.srcs if s.kind == "p"]
        take = active.copy()
        if conds:   # br: one predicate; brao / braa: the OR / AND of two (each may be negated)
          vs = []
          for c in conds:
            self._check(w, ins, c)
            v = w.p[:, c.idx % 4]
            vs.append(~v if c.not_ else v)
          cv = vs[0] | vs[1] if op == "brao" else vs[0] & vs[1] if op == "braa" else vs[0]
          take = active & cv
        pc[take] = tgt
        pc[active & ~take] = at + 1
        continue
      if op == "bar":
        if (live & ~active).any(): raise Ir3Error(f"pc {at} `{ins.text}`: barrier reached by {int(active.sum())} of {int(live.sum())} live lanes")
        pc[active] = at + 1; continue
      if op in ("predt", "predf"):
        pred_block[active] = True
        pred_ok[active] = w.p[active, 0] if op == "predt" else ~w.p[active, 0]
        pc[active] = at + 1; continue
      if op == "prede":
        pred_block[active] = False; pred_ok[active] = True
        pc[active] = at + 1; continue
      en = active & (~pred_block | pred_ok)
      if en.any() and op not in ("nop", "fence"):
        for o in ins.srcs:   # a const read past the const file the state loaded is a fault, not a zero
          if o.kind == "c" and o.idx + (ins.rpt if o.rel else 0) >= len(w.c):
            raise Ir3Error(f"pc {at} `{ins.text}`: reads c{o.idx // 4}.{'xyzw'[o.idx % 4]} past the {len(w.c) // 4} vec4s of constants loaded")
        for k in range(ins.rpt + 1): self._exec(ins, w, en, k, strict)
      pc[active] = at + 1
    if strict and self.hazards: raise Ir3Error("; ".join(str(h) for h in self.hazards[:5]))

  # ---- operands
  def _check(self, w: Wave, ins: Instr, o: Opnd, k: int = 0) -> None:
    if o.kind in ("r", "h", "p"):
      idx = o.idx + (k if o.rel else 0)
      key = ("r", idx) if o.kind == "r" else ("h", idx) if o.kind == "h" else ("p", idx)
      if (need := w.pending.get(key)) is not None:
        self.hazards.append(Ir3Hazard(ins.pc, ins.text, _name(o.kind, idx), need))
      if o.kind == "h" and (need := w.pending.get(("r", idx // 2))) is not None:
        self.hazards.append(Ir3Hazard(ins.pc, ins.text, _name(o.kind, idx), need))
      if o.kind == "r":
        for hk in (("h", 2 * idx), ("h", 2 * idx + 1)):
          if (need := w.pending.get(hk)) is not None: self.hazards.append(Ir3Hazard(ins.pc, ins.text, _name("r", idx), need))

  def _src_bits(self, w: Wave, ins: Instr, o: Opnd, k: int, half: bool) -> np.ndarray:
    """An operand's raw bits per lane: uint32 (full) or uint16 (half)."""
    self._check(w, ins, o, k)
    idx = o.idx + (k if o.rel else 0)
    if o.kind == "r": return w.r[:, idx].copy()
    if o.kind == "h": return w.h()[:, idx].copy()
    if o.kind == "c":
      v = np.full(w.n, w.c[idx], np.uint32)
      return (v & 0xFFFF).astype(np.uint16) if half else v
    if o.kind == "hc":   # a half const: 16 bits of the const file, as hrN is of the full registers (merged)
      v16 = np.full(w.n, w.c.view(np.uint16)[idx], np.uint16)
      return v16 if half else v16.astype(np.uint32)
    if o.kind == "p": return w.p[:, idx % 4].astype(np.uint16 if half else np.uint32)
    if o.kind == "i":
      return np.full(w.n, o.imm & (0xFFFF if half else 0xFFFFFFFF), np.uint16 if half else np.uint32)
    if o.kind == "f":
      if half: return np.full(w.n, np.float16(o.imm).view(np.uint16), np.uint16)
      return np.full(w.n, np.float32(o.imm).view(np.uint32), np.uint32)
    raise Ir3Error(f"pc {ins.pc} `{ins.text}`: operand kind {o.kind} cannot be a source here")

  def _src(self, w: Wave, ins: Instr, o: Opnd, k: int, t: str) -> np.ndarray:
    """An operand's value as NumPy type `t` (f32/f16/u32/s32/u16/s16/b32/b16), with its neg/abs modifiers."""
    half = t in ("f16", "u16", "s16", "b16") or o.kind in ("h", "hc")
    bits = self._src_bits(w, ins, o, k, half)
    if o.kind in ("h", "hc") and t in ("f32", "u32", "s32", "b32"):   # a half source read by a full op: its 16 bits widened
      bits = bits.astype(np.uint32)
    v = bits.view(_NP[t]) if bits.dtype.itemsize == np.dtype(_NP[t]).itemsize else bits.astype(np.uint32).view(np.uint32).astype(_NP[t])
    if o.absv: v = np.abs(v)
    if o.neg: v = -v
    return v

  def _write(self, w: Wave, ins: Instr, en: np.ndarray, k: int, v: np.ndarray, sync: str | None = None) -> None:
    o = ins.dst
    assert o is not None
    idx = o.idx + k
    if o.kind == "r":
      w.r[en, idx] = _bits32(v)[en]
      w.pending.pop(("r", idx), None); w.pending.pop(("h", 2 * idx), None); w.pending.pop(("h", 2 * idx + 1), None)
    elif o.kind == "h":
      w.h()[en, idx] = _bits16(v)[en]
      w.pending.pop(("h", idx), None)
    elif o.kind == "p":
      w.p[en, idx % 4] = (np.asarray(v) != 0)[en]
      w.pending.pop(("p", idx), None)
    else: raise Ir3Error(f"pc {ins.pc} `{ins.text}`: cannot write a {o.kind} operand")
    if sync is not None: w.pending[("r" if o.kind == "r" else o.kind, idx)] = sync

  def _exec(self, ins: Instr, w: Wave, en: np.ndarray, k: int, strict: bool) -> None:
    fn = EXEC.get(ins.op)
    if fn is None: raise Ir3Error(f"pc {ins.pc} `{ins.text}`: instruction {ins.op!r} is not modelled by the mock ir3 executor")
    fn(self, ins, w, en, k)

  # memory
  def _addr(self, w: Wave, ins: Instr, o: Opnd, k: int) -> np.ndarray:
    assert o.base is not None
    lo = self._src_bits(w, ins, o.base, k, False).astype(np.uint64)
    hi = self._src_bits(w, ins, Opnd(o.base.kind, o.base.idx + 1), k, False).astype(np.uint64)
    return (lo | (hi << np.uint64(32))) + np.uint64(o.off & 0xFFFFFFFFFFFFFFFF)


def _name(kind: str, idx: int) -> str: return f"{ {'r': 'r', 'h': 'hr', 'p': 'p'}[kind]}{idx // 4}.{'xyzw'[idx % 4]}"


def _bits32(v: np.ndarray) -> np.ndarray:
  v = np.asarray(v)
  if v.dtype == np.bool_: return v.astype(np.uint32)
  if v.dtype.itemsize == 4: return v.view(np.uint32)
  if v.dtype.itemsize == 2: return v.view(np.uint16).astype(np.uint32)
  return v.astype(np.uint32)


def _bits16(v: np.ndarray) -> np.ndarray:
  v = np.asarray(v)
  if v.dtype == np.bool_: return v.astype(np.uint16)
  if v.dtype.itemsize == 2: return v.view(np.uint16)
  if v.dtype.itemsize == 4: return (v.view(np.uint32) & 0xFFFF).astype(np.uint16)
  return v.astype(np.uint16)


def _dst_half(ins: Instr) -> bool: return ins.dst is not None and ins.dst.kind == "h"


# ---- instruction semantics. Sources: Mesa src/freedreno/isa/ir3-cat*.xml (encodings and names) and the NIR -> ir3
# lowering in ir3_compiler_nir.c / ir3_nir_imul.py (what each is emitted for); operand order as disasm_a3xx prints it.
def _alu2(fn, t_of=None):
  def run(ex: Executor, ins: Instr, w: Wave, en: np.ndarray, k: int) -> None:
    t = t_of(ins) if t_of else ins.types[0]
    a, b = (ex._src(w, ins, x, k, t) for x in ins.srcs[:2])
    with np.errstate(all="ignore"): ex._write(w, ins, en, k, fn(a, b))
  return run


def _ty(ins: Instr) -> str:
  t = ins.types[0] if ins.types else "u32"
  base = {"f": "f", "u": "u", "s": "s", "b": "u"}[t[0]]
  return base + ("16" if _dst_half(ins) or any(s.kind == "h" for s in ins.srcs) else "32") if len(t) == 1 else t


def _fmax(a, b): return np.where(np.isnan(a), b, np.where(np.isnan(b), a, np.maximum(a, b)))   # IEEE maxNum
def _fmin(a, b): return np.where(np.isnan(a), b, np.where(np.isnan(b), a, np.minimum(a, b)))


def _shift(kind):
  def f(a, b):
    bits = a.dtype.itemsize * 8
    amt = (b.astype(np.uint32) & np.uint32(bits - 1)).astype(a.dtype)
    if kind == "shl": return (a << amt).astype(a.dtype)
    if kind == "shr": return (a.view(np.uint32 if bits == 32 else np.uint16) >> amt.astype(np.uint32 if bits == 32 else np.uint16))
    return (a.view(np.int32 if bits == 32 else np.int16) >> amt.astype(np.int32 if bits == 32 else np.int16))
  return f


def _cmps(ex: Executor, ins: Instr, w: Wave, en: np.ndarray, k: int) -> None:
  t, cond = ins.types[0], ins.types[1]
  t = {"f": "f", "u": "u", "s": "s"}[t] + ("16" if any(s.kind == "h" for s in ins.srcs) else "32")
  a, b = (ex._src(w, ins, x, k, t) for x in ins.srcs[:2])
  with np.errstate(invalid="ignore"):
    r = {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b, "ne": a != b}[cond]
  ex._write(w, ins, en, k, r.astype(np.uint32))


def _cov(ex: Executor, ins: Instr, w: Wave, en: np.ndarray, k: int) -> None:
  m = re.fullmatch(r"([fsu]\d+)([fsu]\d+)", ins.types[0])
  if not m: raise Ir3Error(f"pc {ins.pc} `{ins.text}`: cov types {ins.types[0]!r}")
  fr, to = m.groups()
  src = ins.srcs[0]
  v = ex._src(w, ins, src, k, fr if fr not in ("u8", "s8") else ("u16" if src.kind == "h" else "u32"))
  # an 8-bit cov source is sign-extended: a6xx has no s8 type, and ir3 emits cov.u8* for i2i (sign extension) of 8-bit
  # values and an explicit `and 0xff` for u2u (zero extension; ir3_compiler_nir.c create_cov and its 8-bit cases)
  if fr in ("u8", "s8"): v = (v.astype(np.uint32) & 0xFF).astype(np.uint8).view(np.int8)
  if to[0] in "su" and fr[0] == "f":   # float -> int: round toward zero, saturate, NaN -> 0 (Adreno cov)
    info = np.iinfo(_NP[to] if to not in ("u8", "s8") else (np.uint8 if to == "u8" else np.int8))
    with np.errstate(invalid="ignore"):
      vf = np.trunc(v.astype(np.float64))
      r = np.where(np.isnan(vf), 0, np.clip(vf, info.min, info.max))
    out = r.astype(np.int64)
  elif to[0] == "f":
    with np.errstate(over="ignore"): out = v.astype(_NP[to])
  else: out = v.astype(np.int64)
  if to[0] in "su":
    bits = 16 if _dst_half(ins) else 32
    out = (np.asarray(out).astype(np.int64) & ((1 << int(to[1:])) - 1))
    if to[0] == "s" and int(to[1:]) < bits:   # sign-extend into the register
      sb = 1 << (int(to[1:]) - 1)
      out = (out ^ sb) - sb
    out = (out & ((1 << bits) - 1)).astype(np.uint32 if bits == 32 else np.uint16)
  ex._write(w, ins, en, k, out)


def _mov(ex: Executor, ins: Instr, w: Wave, en: np.ndarray, k: int) -> None:
  if ins.types and re.fullmatch(r"[fsu]\d+[fsu]\d+", ins.types[0]) and ins.types[0][:3] != ins.types[0][3:]: return _cov(ex, ins, w, en, k)
  t = ins.types[0][:3] if ins.types else "u32"
  if _dst_half(ins) and t[1:] == "32": t = t[0] + "16"
  ex._write(w, ins, en, k, ex._src(w, ins, ins.srcs[0], k, t))


def _swz(ex: Executor, ins: Instr, w: Wave, en: np.ndarray, k: int) -> None:
  """swz/gat/sct (cat1 multi-register moves from ir3's parallel-copy lowering), all sources read before any write:
  `swz d0, d1, s0, s1` is d0 = s0, d1 = s1; `gat d, s0..sN` fills d, d+1, ...; `sct d0..dN, s` spreads s, s+1, ..."""
  half = ins.dst is not None and ins.dst.kind == "h"
  ops = [ins.dst] + ins.srcs
  if ins.op == "swz": dsts, srcs = ops[:2], ops[2:]
  elif ins.op == "gat": dsts, srcs = [Opnd(ops[0].kind, ops[0].idx + i) for i in range(len(ops) - 1)], ops[1:]
  else: dsts, srcs = ops[:-1], [Opnd(ops[-1].kind, ops[-1].idx + i) for i in range(len(ops) - 1)]
  vals = [ex._src_bits(w, ins, o, 0, half or o.kind == "h") for o in srcs]
  for d, v in zip(dsts, vals): ex._write(w, Instr(ins.pc, ins.text, ins.op, ins.types, d, []), en, 0, v)


def _sel(ex: Executor, ins: Instr, w: Wave, en: np.ndarray, k: int) -> None:
  t = {"b32": "u32", "b16": "u16", "f32": "f32", "f16": "f16", "s32": "s32", "s16": "s16", "u32": "u32", "u16": "u16"}[ins.types[0]]
  a = ex._src(w, ins, ins.srcs[0], k, t)
  c = ex._src_bits(w, ins, ins.srcs[1], k, ins.srcs[1].kind == "h")
  b = ex._src(w, ins, ins.srcs[2], k, t)
  ex._write(w, ins, en, k, np.where(c != 0, a, b))


def _mad(ex: Executor, ins: Instr, w: Wave, en: np.ndarray, k: int) -> None:
  t = ins.types[0]
  a, b, c = (ex._src(w, ins, x, k, {"f32": "f32", "f16": "f16"}.get(t, "u32")) for x in ins.srcs[:3])
  with np.errstate(all="ignore"):
    if t in ("f32", "f16"): r = (a * b + c).astype(a.dtype)   # mad.f32: the product rounded, then the sum (unfused)
    elif ins.op == "madsh":   # madsh.m16: ((src0 & 0xffff) * (src1 >> 16)) << 16 + src2 (the high partial products of imul)
      r = (((a & np.uint32(0xFFFF)) * (b >> np.uint32(16))) << np.uint32(16)) + c
    elif t in ("s24", "u24"):   # mad.s24 / mad.u24: 24-bit multiply (as mul.s24), 32-bit add
      r = ((_low24(a, t == "s24") * _low24(b, t == "s24") + c.astype(np.int64)) & 0xFFFFFFFF).astype(np.uint32)
    else: r = (a & np.uint32(0xFFFF)) * (b & np.uint32(0xFFFF)) + c   # mad.u16: 16x16 multiply, 32-bit add
  ex._write(w, ins, en, k, r)


def _low24(v: np.ndarray, signed: bool) -> np.ndarray:
  v = v.view(np.uint32).astype(np.int64) & 0xFFFFFF
  return (v ^ 0x800000) - 0x800000 if signed else v


def _mul(ex: Executor, ins: Instr, w: Wave, en: np.ndarray, k: int) -> None:
  t = ins.types[0] if ins.types else "f"
  if t in ("s24", "u24"):   # mul.s24 / mul.u24: the low 24 bits of each source (sign-extended for s24), low 32 bits of the product
    a, b = (_low24(ex._src(w, ins, x, k, "u32"), t == "s24") for x in ins.srcs[:2])
    ex._write(w, ins, en, k, ((a * b) & 0xFFFFFFFF).astype(np.uint32))
  else: _alu2(lambda a, b: a * b, _ty)(ex, ins, w, en, k)


def _clz(v: np.ndarray) -> np.ndarray:
  """Leading zero bits of each 32-bit value; 0 gives -1 (0xffffffff): ir3 builds ufind_msb as
  sel(x, 31 - clz(x), clz(x)), which is NIR's -1 for 0 only if clz(0) is -1 (ir3_compiler_nir.c, nir_op_ufind_msb)."""
  out = np.full(v.shape, 0xFFFFFFFF, np.uint32)
  nz = v != 0
  out[nz] = 31 - np.floor(np.log2(v[nz].astype(np.float64))).astype(np.uint32)
  return out


def _triop(kind):
  def run(ex: Executor, ins: Instr, w: Wave, en: np.ndarray, k: int) -> None:
    # shrg/shlg/andg (cat3 bitwise triops, a6xx with has_bitwise_triops): printed `op dst, b, a, c` for the NIR
    # shrg_ir3(a, b, c) = (a >> b) | c (ir3_nir_opt_triops_bitwise.py); the shift amount is the first printed source
    b, a, c = (ex._src(w, ins, x, k, "u32") for x in ins.srcs[:3])
    amt = b & np.uint32(31)
    r = {"shrg": (a >> amt) | c, "shlg": (a << amt) | c, "shrm": (a >> amt) & c, "shlm": (a << amt) & c, "andg": (a & b) | c}[kind]
    ex._write(w, ins, en, k, r)
  return run


def _sfu(fn):
  def run(ex: Executor, ins: Instr, w: Wave, en: np.ndarray, k: int) -> None:
    t = "f16" if _dst_half(ins) else "f32"
    a = ex._src(w, ins, ins.srcs[0], k, t)
    with np.errstate(all="ignore"): ex._write(w, ins, en, k, fn(a).astype(a.dtype), sync="ss")
  return run


def _absneg(ex: Executor, ins: Instr, w: Wave, en: np.ndarray, k: int) -> None:
  t = {"f": "f32", "s": "s32"}[ins.types[0]]
  if _dst_half(ins): t = t[0] + "16"
  ex._write(w, ins, en, k, ex._src(w, ins, ins.srcs[0], k, t))


def _unary_f(fn):
  def run(ex: Executor, ins: Instr, w: Wave, en: np.ndarray, k: int) -> None:
    t = "f16" if _dst_half(ins) else "f32"
    with np.errstate(all="ignore"): ex._write(w, ins, en, k, fn(ex._src(w, ins, ins.srcs[0], k, t)))
  return run


def _ldg(ex: Executor, ins: Instr, w: Wave, en: np.ndarray, k: int) -> None:
  t = ins.types[0]
  size = int(t[1:]) // 8
  n = ins.srcs[1].imm if len(ins.srcs) > 1 else 1
  addr = ex._addr(w, ins, ins.srcs[0], k)
  for c in range(int(n)):
    vals = np.zeros(w.n, np.uint32)
    lanes = np.nonzero(en)[0]
    if (view := _one_mapping(ex.mem, addr[lanes] + np.uint64(c * size), size)) is not None:   # all lanes in one object: gather
      buf, off = view
      raw = buf[off[:, None] + np.arange(size)].astype(np.uint32)
      v = sum(raw[:, j] << np.uint32(8 * j) for j in range(size))
      if t[0] == "s" and size < 4: v = ((v.astype(np.int64) ^ (1 << (8 * size - 1))) - (1 << (8 * size - 1))).astype(np.uint32)
      vals[lanes] = v
    else:
      for lane in lanes:
        raw_b = ex.mem.read(int(addr[lane]) + c * size, size)
        vals[lane] = int.from_bytes(raw_b, "little", signed=t[0] == "s") & 0xFFFFFFFF
    sub = Instr(ins.pc, ins.text, ins.op, ins.types, Opnd(ins.dst.kind, ins.dst.idx + c), [])
    ex._write(w, sub, en, k, vals if ins.dst.kind == "r" else (vals & 0xFFFF).astype(np.uint16), sync="sy")


def _stg(ex: Executor, ins: Instr, w: Wave, en: np.ndarray, k: int) -> None:
  t = ins.types[0]
  size = int(t[1:]) // 8
  dst, val = ins.srcs[0], ins.srcs[1]
  n = ins.srcs[2].imm if len(ins.srcs) > 2 else 1
  addr = ex._addr(w, ins, dst, k)
  for c in range(int(n)):
    v = ex._src_bits(w, ins, Opnd(val.kind, val.idx + c), k, val.kind == "h").astype(np.uint64)
    lanes = np.nonzero(en)[0]
    if (view := _one_mapping(ex.mem, addr[lanes] + np.uint64(c * size), size)) is not None:   # scatter, lanes in order (last wins)
      buf, off = view
      for j in range(size): buf[off + j] = ((v[lanes] >> np.uint64(8 * j)) & np.uint64(0xFF)).astype(np.uint8)
    else:
      for lane in lanes:
        ex.mem.write(int(addr[lane]) + c * size, int(v[lane] & ((1 << (8 * size)) - 1)).to_bytes(size, "little"))


def _one_mapping(mem: GpuMemory, addrs: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray] | None:
  """(the mapping's bytes as a NumPy view, each address's offset in it) when every access lies in one mapping."""
  if len(addrs) == 0: return None
  lo, hi = int(addrs.min()), int(addrs.max()) + size
  for base, buf in mem.ranges:
    if base <= lo and hi <= base + len(buf):
      return np.frombuffer(buf, np.uint8), (addrs - np.uint64(base)).astype(np.int64)
  return None   # spans mappings or faults: lane by lane (a fault names the lane's address)


def _laddr(ex: Executor, w: Wave, ins: Instr, o: Opnd, k: int) -> np.ndarray:
  base = ex._src_bits(w, ins, o.base, k, False).astype(np.int64) if o.base is not None else np.full(w.n, int(o.imm), np.int64)
  return base + o.off


def _ldl(ex: Executor, ins: Instr, w: Wave, en: np.ndarray, k: int) -> None:
  size = int(ins.types[0][1:]) // 8
  n = int(ins.srcs[1].imm) if len(ins.srcs) > 1 else 1
  addr = _laddr(ex, w, ins, ins.srcs[0], k)
  for c in range(n):
    a = addr + c * size
    if ((a < 0) | (a + size > len(ex.local)))[en].any(): raise Ir3Error(f"pc {ins.pc} `{ins.text}`: local memory access outside the {len(ex.local)} bytes")
    vals = np.zeros(w.n, np.uint32)
    for lane in np.nonzero(en)[0]: vals[lane] = int.from_bytes(ex.local[a[lane]:a[lane] + size].tobytes(), "little")
    sub = Instr(ins.pc, ins.text, ins.op, ins.types, Opnd(ins.dst.kind, ins.dst.idx + c), [])
    ex._write(w, sub, en, k, vals, sync="ss")


def _stl(ex: Executor, ins: Instr, w: Wave, en: np.ndarray, k: int) -> None:
  size = int(ins.types[0][1:]) // 8
  dst, val = ins.srcs[0], ins.srcs[1]
  n = int(ins.srcs[2].imm) if len(ins.srcs) > 2 else 1
  addr = _laddr(ex, w, ins, dst, k)
  for c in range(n):
    a = addr + c * size
    if ((a < 0) | (a + size > len(ex.local)))[en].any(): raise Ir3Error(f"pc {ins.pc} `{ins.text}`: local memory access outside the {len(ex.local)} bytes")
    v = ex._src_bits(w, ins, Opnd(val.kind, val.idx + c), k, val.kind == "h")
    for lane in np.nonzero(en)[0]: ex.local[a[lane]:a[lane] + size] = np.frombuffer(int(v[lane]).to_bytes(4, "little")[:size], np.uint8)


EXEC: dict[str, Any] = {
  "add": _alu2(lambda a, b: a + b, _ty), "sub": _alu2(lambda a, b: a - b, _ty), "mul": _mul,
  "max": _alu2(lambda a, b: _fmax(a, b) if a.dtype.kind == "f" else np.maximum(a, b), _ty),
  "min": _alu2(lambda a, b: _fmin(a, b) if a.dtype.kind == "f" else np.minimum(a, b), _ty),
  "and": _alu2(lambda a, b: a & b, _ty), "or": _alu2(lambda a, b: a | b, _ty), "xor": _alu2(lambda a, b: a ^ b, _ty),
  "shl": _alu2(_shift("shl"), _ty), "shr": _alu2(_shift("shr"), _ty), "ashr": _alu2(_shift("ashr"), _ty),
  "mull": _alu2(lambda a, b: (a & np.uint32(0xFFFF)) * (b & np.uint32(0xFFFF)), lambda ins: "u32"),
  "swz": _swz, "gat": _swz, "sct": _swz,
  "cmps": _cmps, "cmpv": _cmps, "cov": _cov, "mov": _mov, "sel": _sel, "mad": _mad, "madsh": _mad,
  "shrg": _triop("shrg"), "shlg": _triop("shlg"), "shrm": _triop("shrm"), "shlm": _triop("shlm"), "andg": _triop("andg"),
  "rcp": _sfu(lambda a: 1 / a), "sqrt": _sfu(np.sqrt), "rsq": _sfu(lambda a: 1 / np.sqrt(a)), "exp2": _sfu(np.exp2),
  "log2": _sfu(np.log2), "sin": _sfu(np.sin), "cos": _sfu(np.cos),
  "not": lambda ex, ins, w, en, k: ex._write(w, ins, en, k, ~ex._src(w, ins, ins.srcs[0], k, _ty(ins))),
  "absneg": _absneg, "sign": _unary_f(np.sign),
  "clz": lambda ex, ins, w, en, k: ex._write(w, ins, en, k, _clz(ex._src(w, ins, ins.srcs[0], k, "u32"))),
  "floor": _unary_f(np.floor), "ceil": _unary_f(np.ceil), "trunc": _unary_f(np.trunc), "rndne": _unary_f(np.rint),
  "ldg": _ldg, "stg": _stg, "ldl": _ldl, "stl": _stl,
}
