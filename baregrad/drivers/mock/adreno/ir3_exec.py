"""An ir3 (Adreno a6xx shader ISA) executor for the mock Adreno: runs the compute programs Mesa's ir3 compiler emits.

Decoding: the program's words go through Mesa's own disassembler (drivers/qcom/ir3_disasm.py, tinymesa's
disasm_a3xx), and each line is parsed here into an instruction: sync flags, repeat, opcode with its types, and
operands. Only forms listed in EXEC are accepted; anything else is refused by name (an unmodelled instruction is an
error, never a silent no-op).

Execution model: the workgroups of a dispatch run in batches (up to LANES_PER_BATCH lanes), every lane of a batch a
NumPy lane with its own program counter, so each instruction is one set of NumPy operations over all of them. The
lanes at the lowest PC run the instruction there together (min-PC reconvergence: a divergent branch runs one side,
then the other, and the lanes meet again where the paths join), so branches and divergence need no stack. `bar` is
where every live lane of a workgroup must meet (checked per workgroup). Each workgroup has its own local memory.
Registers: the full file r0.x-r63.w as uint32 rows (one per component, across lanes); with a6xx's merged register
file a half register hrN.c is 16 bits of the full file (hr index h = bits 16*(h%2) of full component h//2: Mesa
ir3_ra.c, "merged" registers), the predicate registers p0.x-w, the const file cN.c (uint32). Programs are decoded
once per distinct code (a cache keyed by the words and the chip).

Hazards (the sync flags a6xx leaves to the compiler, ir3_legalize.c): a result of a (sy)-class instruction (global
memory loads) or of an (ss)-class one (SFU functions, local memory loads) is not there until an instruction carrying
(sy) / (ss) waits for it. Reading such a register before that wait is reported as an Ir3Hazard (run(strict=True) raises
it), with the instruction, its PC and the register. The scoreboard is kept per workgroup, as if each ran alone.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from baregrad.drivers.mock.adreno.cp import GpuMemory
from baregrad.drivers.mock.adreno.tex import Sampler, Texture, fetch

NREGS = 64   # full registers r0-r63 (vec4 each); a6xx has 48 usable GPRs plus sysval/special ones above (r48.x: wgid)
SHARED_HALF = 4 * 48   # hr48.x onwards: the shared half registers (Mesa ir3.h), not halves of the merged full file


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
  form: str = ""                      # op.types, as the coverage tests name it
  fn: Any = None                      # its semantics (EXEC[op]); None: not modelled
  label: int = 0                      # a branch's target PC
  conds: list[Opnd] = field(default_factory=list)   # a branch's predicate operands
  wrmask: int = 0                     # cat5 (isam): the components written, each at dst + its index
  tex: tuple[int, int] = (-1, -1)     # cat5 (isam): (sampler, texture) slots, s#N t#N


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
    m = re.match(r"^\((neg|abs|r|even|last)\)", tok)
    if m:   # (even): cov's round-to-nearest-even, what NumPy's conversions do; (last): a7xx's last-use hint on a source
      # register (Mesa ir3.h IR3_REG_LAST_USE, for the register cache), no change to the value read
      if m.group(1) not in ("even", "last"): mods["rel" if m.group(1) == "r" else m.group(1)] = True
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
      raise Ir3Error(f"unsupported address operand {tok!r}")   # model's own: operand forms outside the parser are refused
    return Opnd(m.group(1), off=int(m.group(3) or 0), base=base)
  if re.fullmatch(r"-?0x[0-9a-f]+|-?\d+", tok): return Opnd("i", imm=int(tok, 0), **kw)
  if (m := re.fullmatch(r"h\((-?0x[0-9a-f]+|-?\d+)\)", tok)): return Opnd("i", imm=int(m.group(1), 0), **kw)   # a half integer immediate
  if (c := _NAMED_FLOAT.get(tok.lstrip("h"))) is not None: return Opnd("f", imm=c, **kw)
  m = re.fullmatch(r"h?\(?(-?(?:[\d.]+(?:e[-+]?\d+)?|inf|nan))\)?", tok)
  if m: return Opnd("f", imm=float(m.group(1)), **kw)
  raise Ir3Error(f"unsupported operand {tok!r}")   # model's own: operand forms outside the parser are refused


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
    if ins.op == "isam":   # cat5: `isam.1d (f32)(xyzw)r0.w, r0.y, s#0, t#0`; ir3-cat5.xml: type, wrmask, dst, coords, samp, tex
      m = re.fullmatch(r"\((f32|f16|u32|s32|u16|s16)\)\(([xyzw]+)\)(.+)", toks[0]) if toks else None
      st = [re.fullmatch(r"([st])#(\d+)", t) for t in toks[2:]]
      if m is None or len(toks) != 4 or not all(st) or [x.group(1) for x in st] != ["s", "t"]:   # type: ignore[union-attr]
        raise Ir3Error("an isam form other than `(type)(mask)dst, coords, s#N, t#N` (bindless / s2en / offsets are not modelled)")
      ins.extra = [m.group(1)]
      ins.wrmask = sum(1 << _COMP[c] for c in m.group(2))
      ins.dst, ins.srcs = parse_operand(m.group(3)), [parse_operand(toks[1])]
      ins.tex = (int(st[0].group(2)), int(st[1].group(2)))  # type: ignore[union-attr]
    elif ins.op in ("br", "jump", "brao", "braa"):   # branches have no destination
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
    ins.form, ins.fn = ".".join([ins.op, *ins.types]), EXEC.get(ins.op)
    if ins.op in ("br", "jump", "brao", "braa"):
      labels = [o for o in ins.srcs if o.kind == "label"]
      if not labels: raise Ir3Error("a branch without a target")   # ir3-cat0.xml br/jump: a branch names its target
      ins.label, ins.conds = int(labels[0].imm), [o for o in ins.srcs if o.kind == "p"]
    out.append(ins)


@functools.lru_cache(maxsize=1024)
def _decode(code: bytes, gpu_id: int) -> list[Instr]:
  from baregrad.drivers.qcom.ir3_disasm import disassemble
  return parse(disassemble(list(np.frombuffer(code, np.uint32).tolist()), gpu_id))


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
  """The register state of a batch of workgroups run together: `n` lanes, lane i in workgroup grp[i] of `groups`.
  Registers are stored one row per register component (r[idx] is that component across all lanes), so an instruction
  reads and writes whole rows."""
  def __init__(self, lanes: int, consts: np.ndarray, groups: int = 1, grp: np.ndarray | None = None) -> None:
    self.n, self.groups = lanes, groups
    self.grp = grp if grp is not None else np.zeros(lanes, np.int64)
    # the full file r0.x-r63.w, then 16 rows holding the shared half registers hr48.x-hr55.w (not part of the merged file)
    self.r = np.zeros((4 * NREGS + 16, lanes), np.uint32)
    self.p = np.zeros((4, lanes), bool)
    self.c = consts
    # (kind, idx) -> (the sync flag "sy"/"ss", the workgroups whose result is not yet waited for). Hazards are tracked
    # per workgroup (a wave's scoreboard), as when each workgroup ran alone.
    self.pending: dict[tuple[str, int], tuple[str, np.ndarray]] = {}

  def half(self, idx: int) -> np.ndarray:
    """hrN.c (idx = 4N + c) across lanes: a view of 16 bits of full component idx // 2 (merged register file)."""
    if idx >= SHARED_HALF: return self.r[4 * NREGS + ((idx - SHARED_HALF) >> 1)].view(np.uint16)[idx & 1::2]   # hr48.x+
    return self.r[idx >> 1].view(np.uint16)[idx & 1::2]


LANES_PER_BATCH = 8192   # workgroups run together up to this many lanes: one NumPy op per instruction for all of them


class Executor:
  """Runs Ir3Program-shaped programs (drivers/qcom/ir3_compile.Ir3Program) over a GpuMemory."""
  def __init__(self, mem: GpuMemory, gpu_id: int = 630) -> None:
    self.mem, self.gpu_id = mem, gpu_id
    self.hazards: list[Ir3Hazard] = []
    self.executed: set[str] = set()   # the instruction forms run (op.types), for tests that every form is covered
    self._en = np.ones(1, bool)       # the lanes the current instruction runs for
    self._gen: np.ndarray | None = None   # their workgroups (computed when a hazard check needs them)
    self.textures: dict[int, Texture] = {}   # the dispatch's texture state (sp.py decodes it from SB6_CS_TEX)
    self.samplers: dict[int, Sampler] = {}

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

  def decode(self, words: list[int] | np.ndarray) -> list[Instr]:
    """The program in `words` decoded through Mesa's disassembler for this chip (decoded once per distinct program;
    the list returned is shared: do not alter it)."""
    return _decode(np.asarray(words, np.uint32).tobytes(), self.gpu_id)

  def run_state(self, prog: list[Instr], consts: np.ndarray, local_size: tuple[int, ...], global_size: tuple[int, ...], wgid_regid: int,
                lid_regid: int, shared_bytes: int, strict: bool = True, max_steps: int = 10_000_000) -> None:
    """Run decoded instructions as the hardware state says: const file `consts` (dwords), workgroup shape, the
    registers the workgroup id and local id arrive in (0xfc: none), the workgroup's local memory bytes. Workgroups
    are independent (their own local memory, barriers and sync scoreboard), so they run in batches of lanes."""
    lx, ly, lz = tuple(local_size) + (1,) * (3 - len(local_size))
    lanes = lx * ly * lz
    gs = tuple(global_size) + (1,) * (3 - len(global_size))
    lid = np.stack(np.meshgrid(np.arange(lx), np.arange(ly), np.arange(lz), indexing="ij"), -1).transpose(2, 1, 0, 3).reshape(-1, 3).astype(np.uint32)
    wgids = np.stack(np.meshgrid(np.arange(gs[0]), np.arange(gs[1]), np.arange(gs[2]), indexing="ij"), -1).transpose(2, 1, 0, 3).reshape(-1, 3)
    per = max(1, LANES_PER_BATCH // max(lanes, 1))
    for b in range(0, len(wgids), per):
      ids = wgids[b:b + per].astype(np.uint32)
      g = len(ids)
      w = Wave(lanes * g, consts, g, np.repeat(np.arange(g), lanes))
      if lid_regid != 0xFC: w.r[lid_regid:lid_regid + 3] = np.tile(lid, (g, 1)).T
      if wgid_regid != 0xFC: w.r[wgid_regid:wgid_regid + 3] = np.repeat(ids, lanes, axis=0).T
      self._run_group(prog, w, strict, max_steps, shared_bytes)

  def _run_group(self, prog: list[Instr], w: Wave, strict: bool, max_steps: int, shared_size: int) -> None:
    n = w.n
    pc = np.zeros(n, np.int64)
    live = np.ones(n, bool)
    pred_block = np.zeros(n, bool)   # inside predt/predf .. prede: lanes whose predicate failed skip
    pred_ok = np.ones(n, bool)
    in_pred = False
    self.local = np.zeros((w.groups, max(shared_size, 16)), np.uint8)   # each workgroup's local memory
    uniform, cur = True, 0   # uniform: every live lane is at pc `cur` (pc[] is not kept up to date meanwhile)
    steps, nprog = 0, len(prog)
    executed = self.executed
    while True:
      steps += 1
      if uniform:
        at, active = cur, live
      else:
        at = int(np.where(live, pc, np.iinfo(np.int64).max).min())
        active = live & (pc == at)
        if np.count_nonzero(active) == np.count_nonzero(live): uniform, cur = True, at   # the lanes met again
      # model's own limit: a program still running after max_steps instructions is taken as a hang
      if steps > max_steps: raise Ir3Error(f"program did not end after {max_steps} instructions (pc {at})")
      # ir3-cat0.xml `end`: every path of a shader ends with it (ir3 emits it last); running past the code is a fault
      if at >= nprog: raise Ir3Error(f"lanes ran past the end of the program (pc {at}, {nprog} instructions) without `end`")
      ins = prog[at]
      executed.add(ins.form)
      self._en, self._gen = active, None
      if w.pending and (ins.sy or ins.ss): self._sync(w, ins, active)
      op = ins.op
      nxt = at + 1
      if op == "end":
        if uniform: break
        live = live & ~active
        if not live.any(): break
        continue
      if op in ("br", "jump", "brao", "braa"):
        tgt = ins.label
        take = active
        if ins.conds:   # br: one predicate; brao / braa: the OR / AND of two (each may be negated)
          vs = []
          for c in ins.conds:
            self._check(w, ins, c)
            v = w.p[c.idx % 4]
            vs.append(~v if c.not_ else v)
          cv = vs[0] | vs[1] if op == "brao" else vs[0] & vs[1] if op == "braa" else vs[0]
          take = active & cv
        ntake, nact = np.count_nonzero(take), np.count_nonzero(active)
        if uniform and ntake in (0, nact): cur = tgt if ntake else nxt   # all live lanes go the same way
        else:
          if uniform: pc[live] = cur; uniform = False
          pc[take] = tgt
          pc[active & ~take] = nxt
        continue
      if op == "bar":
        # every live lane of a workgroup that reached the barrier must be here (lanes of other workgroups may not be)
        waiting = np.zeros(w.groups, bool)
        waiting[w.grp[active]] = True
        missing = live & ~active & waiting[w.grp]
        # ir3-cat7.xml `bar` (workgroup barrier): every live invocation of the workgroup must reach it (SPIR-V/Vulkan
        # OpControlBarrier in uniform control flow); one reached by part of a workgroup hangs the real GPU
        if missing.any():
          g = int(w.grp[np.argmax(missing)])
          raise Ir3Error(f"pc {at} `{ins.text}`: barrier reached by {int((active & (w.grp == g)).sum())} of {int((live & (w.grp == g)).sum())} live lanes")
      elif op in ("predt", "predf"):
        pred_block = pred_block | active
        pred_ok = np.where(active, w.p[0] if op == "predt" else ~w.p[0], pred_ok)
        in_pred = True
      elif op == "prede":
        pred_block = pred_block & ~active; pred_ok = pred_ok | active
        in_pred = bool(pred_block.any())
      else:
        en = active & (~pred_block | pred_ok) if in_pred else active
        self._en = en
        # lock / unlock (cat0, a7xx: ir3 emits `lock` ahead of the shader's end; Mesa ir3-cat0.xml): no register or
        # memory effect to model, their sync flags are taken above
        if op not in ("nop", "fence", "lock", "unlock") and (not in_pred or en.any()):
          # a6xx.xml HLSQ_CS_CNTL.CONSTLEN (sp.py checks the code against it): a const read past the const file the state
          # loaded is a fault, not a zero (model's own: the hardware returns undefined values)
          for o in ins.srcs:
            if o.kind in ("c", "hc") and o.idx + (ins.rpt if o.rel else 0) >= len(w.c):
              raise Ir3Error(f"pc {at} `{ins.text}`: reads c{o.idx // 4}.{'xyzw'[o.idx % 4]} past the {len(w.c) // 4} vec4s of constants loaded")
          fn = ins.fn
          # model's own: an instruction without modelled semantics is refused by name, never a silent no-op
          if fn is None: raise Ir3Error(f"pc {ins.pc} `{ins.text}`: instruction {ins.op!r} is not modelled by the mock ir3 executor")
          for k in range(ins.rpt + 1): fn(self, ins, w, en, k)
      if uniform: cur = nxt
      else: pc[active] = nxt
    # ir3_legalize.c: a missing (ss)/(sy) wait reads a stale register; strict runs make each such hazard an error
    if strict and self.hazards: raise Ir3Error("; ".join(str(h) for h in self.hazards[:5]))

  # ---- the sync scoreboard (per workgroup)
  def _groups(self, w: Wave) -> np.ndarray:
    """The workgroups of the lanes the current instruction runs for."""
    if self._gen is None:
      g = np.zeros(w.groups, bool)
      g[w.grp[self._en]] = True
      self._gen = g
    return self._gen

  def _sync(self, w: Wave, ins: Instr, active: np.ndarray) -> None:
    """(sy) / (ss) on `ins`: the wave waits for its outstanding results of that class (all of them: the flag is
    the wave's, so lanes of those workgroups not at this instruction get theirs too)."""
    waiting = np.zeros(w.groups, bool)
    waiting[w.grp[active]] = True
    for key, (need, gm) in list(w.pending.items()):
      if (need == "sy" and ins.sy) or (need == "ss" and ins.ss):
        left = gm & ~waiting
        if left.any(): w.pending[key] = (need, left)
        else: del w.pending[key]

  def _check(self, w: Wave, ins: Instr, o: Opnd, k: int = 0) -> None:
    if not w.pending or o.kind not in ("r", "h", "p"): return
    idx = o.idx + (k if o.rel else 0)
    keys = [(o.kind, idx)]
    if o.kind == "h" and idx < SHARED_HALF: keys.append(("r", idx // 2))
    if o.kind == "r" and 2 * idx < SHARED_HALF: keys += [("h", 2 * idx), ("h", 2 * idx + 1)]
    for key in keys:
      if (e := w.pending.get(key)) is not None and (e[1] & self._groups(w)).any():
        # ir3_legalize.c legalize_block: a read of an (ss)/(sy)-class result needs the flag on an instruction in between
        self.hazards.append(Ir3Hazard(ins.pc, ins.text, _name(o.kind, idx), e[0]))

  def _src_bits(self, w: Wave, ins: Instr, o: Opnd, k: int, half: bool) -> np.ndarray:
    """An operand's raw bits per lane: uint32 (full) or uint16 (half)."""
    self._check(w, ins, o, k)
    idx = o.idx + (k if o.rel else 0)
    if o.kind == "r": return w.r[idx].copy()
    if o.kind == "h": return w.half(idx).copy()
    if o.kind == "c":
      v = np.full(w.n, w.c[idx], np.uint32)
      return (v & 0xFFFF).astype(np.uint16) if half else v
    if o.kind == "hc":
      # a half const hcN.c is the low 16 bits of the 32-bit slot cN.c: the const file is not merged as the registers
      # are (Mesa ir3_cp.c lower_immed puts a half source's immediate in a 32-bit slot of its own and names it with the
      # same register number; e.g. a clamp of int8 to -1 reads hc1.y where ir3 put 0xffff in c1.y)
      v16 = np.full(w.n, w.c[idx] & 0xFFFF, np.uint16)
      return v16 if half else v16.astype(np.uint32)
    if o.kind == "p": return w.p[idx % 4].astype(np.uint16 if half else np.uint32)
    if o.kind == "i":
      return np.full(w.n, o.imm & (0xFFFF if half else 0xFFFFFFFF), np.uint16 if half else np.uint32)
    if o.kind == "f":
      if half: return np.full(w.n, np.float16(o.imm).view(np.uint16), np.uint16)
      return np.full(w.n, np.float32(o.imm).view(np.uint32), np.uint32)
    raise Ir3Error(f"pc {ins.pc} `{ins.text}`: operand kind {o.kind} cannot be a source here")   # model's own: unmodelled operand

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
      np.copyto(w.r[idx], _bits32(v), where=en)
      keys: tuple[tuple[str, int], ...] = (("r", idx), ("h", 2 * idx), ("h", 2 * idx + 1))
    elif o.kind == "h":
      np.copyto(w.half(idx), _bits16(v), where=en)
      keys = (("h", idx),)
    elif o.kind == "p":
      np.copyto(w.p[idx % 4], np.asarray(v) != 0, where=en)
      keys = (("p", idx),)
    else: raise Ir3Error(f"pc {ins.pc} `{ins.text}`: cannot write a {o.kind} operand")   # model's own: unmodelled destination
    if w.pending:   # a result written again is no longer outstanding (for the workgroups written)
      for key in keys:
        if (e := w.pending.get(key)) is not None:
          left = e[1] & ~self._groups(w)
          if left.any(): w.pending[key] = (e[0], left)
          else: del w.pending[key]
    if sync is not None:
      key = ("r" if o.kind == "r" else o.kind, idx)
      prev = w.pending.get(key)
      w.pending[key] = (sync, self._groups(w) | prev[1] if prev is not None else self._groups(w).copy())

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
  """The width an untyped-size ALU op (add.u, shr.b, ...) computes at: 16 bits when its registers are half, but 32
  when a source is a full register even if the destination is half: ir3_cf.c folds a following 32->16 bit move into
  the op (is_safe_conv: full->half without type conversion), so `shr.b hr, r, 16` is the 32-bit shift's low half
  (a byte of a 32-bit word, as ir3 extracts them after a vector ldl)."""
  t = ins.types[0] if ins.types else "u32"
  base = {"f": "f", "u": "u", "s": "s", "b": "u"}[t[0]]
  if len(t) != 1: return t
  if any(s.kind == "r" for s in ins.srcs): return base + "32"
  return base + ("16" if _dst_half(ins) or any(s.kind == "h" for s in ins.srcs) else "32")


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
  if not m: raise Ir3Error(f"pc {ins.pc} `{ins.text}`: cov types {ins.types[0]!r}")   # ir3-cat1.xml cov SRC_TYPE/DST_TYPE; model's own limit
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


def _fsign(a: np.ndarray) -> np.ndarray:
  """sign.f: what ir3 emits for NIR's fsign, whose contract (nir_opcodes.py fsign) is 1/-1 by the sign, a zero kept as
  it is, and for NaN not NaN (0.0 preferred, as OpenCL requires; NIR rewrites b2f(0 < a) - b2f(a < 0) to fsign, which
  is only right with 0)."""
  return np.where(np.isnan(a), a.dtype.type(0), np.where(a == 0, a, np.sign(a)))


def _triop(kind):
  def run(ex: Executor, ins: Instr, w: Wave, en: np.ndarray, k: int) -> None:
    # shrg/shlg/andg (cat3 bitwise triops, a6xx with has_bitwise_triops): printed `op dst, b, a, c` for the NIR
    # shrg_ir3(a, b, c) = (a >> b) | c (ir3_nir_opt_triops_bitwise.py); the shift amount is the first printed source
    b, a, c = (ex._src(w, ins, x, k, "u32") for x in ins.srcs[:3])
    amt = b & np.uint32(31)
    r = {"shrg": (a >> amt) | c, "shlg": (a << amt) | c, "shrm": (a >> amt) & c, "shlm": (a << amt) & c, "andg": (a & b) | c}[kind]
    ex._write(w, ins, en, k, r)
  return run


def _sad(ex: Executor, ins: Instr, w: Wave, en: np.ndarray, k: int) -> None:
  """sad.s32 (cat3; a660 and a7xx, Mesa has_sad): the sum of its three sources, wrapping. ir3 emits it as a three-way
  add (the high half of a 64-bit address: the base's, the offset's and the carry of the low halves), and the values
  of those addresses are what the tests check (tests/drivers/qcom/test_a7xx.py); tinygrad's Adreno emulator models it
  the same way."""
  # model's own limit: sad.s32 only (ir3-cat3.xml sad)
  if ins.types != ["s32"]: raise Ir3Error(f"pc {ins.pc} `{ins.text}`: sad.{'.'.join(ins.types)} is not modelled (sad.s32 only)")
  a, b, c = (ex._src(w, ins, x, k, "u32").astype(np.uint64) for x in ins.srcs[:3])
  ex._write(w, ins, en, k, ((a + b + c) & np.uint64(0xFFFFFFFF)).astype(np.uint32))


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
  lanes = np.flatnonzero(en)
  for c in range(int(n)):
    vals = np.zeros(w.n, np.uint32)
    at = addr[lanes] + np.uint64(c * size)
    if (view := _one_mapping(ex.mem, at, size)) is not None:   # all lanes in one object: gather
      vals[lanes] = _gather(*view, size, t[0] == "s")
    else:
      for lane in lanes:
        raw_b = ex.mem.read(int(addr[lane]) + c * size, size)
        vals[lane] = int.from_bytes(raw_b, "little", signed=t[0] == "s") & 0xFFFFFFFF
    sub = Instr(ins.pc, ins.text, ins.op, ins.types, Opnd(ins.dst.kind, ins.dst.idx + c), [])
    ex._write(w, sub, en, k, vals if ins.dst.kind == "r" else (vals & 0xFFFF).astype(np.uint16), sync="sy")


def _gather(buf: np.ndarray, off: np.ndarray, size: int, signed: bool) -> np.ndarray:
  """`size`-byte little-endian values at byte offsets `off` of `buf`, as uint32 (sign-extended when `signed`)."""
  if size in (1, 2, 4) and not (off % size).any():   # aligned: one typed gather
    v = buf[:len(buf) // size * size].view(np.dtype(f"<{'i' if signed else 'u'}{size}"))[off // size]
    return v.astype(np.int32).view(np.uint32) if signed else v.astype(np.uint32)
  raw = buf[off[:, None] + np.arange(size)].astype(np.uint32)
  v = sum(raw[:, j] << np.uint32(8 * j) for j in range(size))
  if signed and size < 4: v = ((v.astype(np.int64) ^ (1 << (8 * size - 1))) - (1 << (8 * size - 1))).astype(np.uint32)
  return v


def _stg(ex: Executor, ins: Instr, w: Wave, en: np.ndarray, k: int) -> None:
  t = ins.types[0]
  size = int(t[1:]) // 8
  dst, val = ins.srcs[0], ins.srcs[1]
  n = ins.srcs[2].imm if len(ins.srcs) > 2 else 1
  addr = ex._addr(w, ins, dst, k)
  lanes = np.flatnonzero(en)
  for c in range(int(n)):
    v = ex._src_bits(w, ins, Opnd(val.kind, val.idx + c), k, val.kind == "h").astype(np.uint64)
    if (view := _one_mapping(ex.mem, addr[lanes] + np.uint64(c * size), size)) is not None:   # scatter, lanes in order (last wins)
      buf, off = view
      vl = v[lanes]
      if size in (1, 2, 4) and not (off % size).any():
        buf[:len(buf) // size * size].view(np.dtype(f"<u{size}"))[off // size] = (vl & np.uint64((1 << (8 * size)) - 1)).astype(f"<u{size}")
      else:
        for j in range(size): buf[off + j] = ((vl >> np.uint64(8 * j)) & np.uint64(0xFF)).astype(np.uint8)
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


def _local_lanes(ex: Executor, ins: Instr, w: Wave, en: np.ndarray, a: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """The running lanes, their workgroups and their byte offsets in local memory; an access past the workgroup's local
  memory (SP_CS_UNKNOWN_A9B1.SHARED_SIZE, sp.py) faults."""
  lanes = np.flatnonzero(en)
  al = a[lanes]
  # a6xx.xml SP_CS_UNKNOWN_A9B1.SHARED_SIZE (tu6_emit_cs_config): the workgroup's local memory; past it is a fault
  if ((al < 0) | (al + size > ex.local.shape[1])).any():
    raise Ir3Error(f"pc {ins.pc} `{ins.text}`: local memory access outside the {ex.local.shape[1]} bytes")
  return lanes, w.grp[lanes], al


def _ldl(ex: Executor, ins: Instr, w: Wave, en: np.ndarray, k: int) -> None:
  size = int(ins.types[0][1:]) // 8
  n = int(ins.srcs[1].imm) if len(ins.srcs) > 1 else 1
  addr = _laddr(ex, w, ins, ins.srcs[0], k)
  for c in range(n):
    lanes, g, a = _local_lanes(ex, ins, w, en, addr + c * size, size)
    raw = ex.local[g[:, None], a[:, None] + np.arange(size)].astype(np.uint32)
    vals = np.zeros(w.n, np.uint32)
    vals[lanes] = sum(raw[:, j] << np.uint32(8 * j) for j in range(size))
    sub = Instr(ins.pc, ins.text, ins.op, ins.types, Opnd(ins.dst.kind, ins.dst.idx + c), [])
    ex._write(w, sub, en, k, vals, sync="ss")


def _stl(ex: Executor, ins: Instr, w: Wave, en: np.ndarray, k: int) -> None:
  size = int(ins.types[0][1:]) // 8
  dst, val = ins.srcs[0], ins.srcs[1]
  n = int(ins.srcs[2].imm) if len(ins.srcs) > 2 else 1
  addr = _laddr(ex, w, ins, dst, k)
  for c in range(n):
    lanes, g, a = _local_lanes(ex, ins, w, en, addr + c * size, size)
    v = ex._src_bits(w, ins, Opnd(val.kind, val.idx + c), k, val.kind == "h").astype(np.uint32)[lanes]
    for j in range(size): ex.local[g, a + j] = ((v >> np.uint32(8 * j)) & np.uint32(0xFF)).astype(np.uint8)   # lanes in order (last wins)


def _isam(ex: Executor, ins: Instr, w: Wave, en: np.ndarray, k: int) -> None:
  """isam (cat5, ir3_compiler_nir.c emit for a readable image_load): the texel at integer (x, y) of texture t#N through
  sampler s#N (mock/adreno/tex.py), each component of the write mask to dst + its index, a (sy)-class result. The
  coordinates are two consecutive registers from the source (ir3 collects them so: x in the source, y after it)."""
  if ins.types != ["1d"]: raise Ir3Error(f"pc {ins.pc} `{ins.text}`: isam.{'.'.join(ins.types)} is not modelled (isam.1d only)")
  samp_i, tex_i = ins.tex
  tex, samp = ex.textures.get(tex_i), ex.samplers.get(samp_i)
  # a6xx.xml SP_CS_TEX_COUNT / CP_LOAD_STATE6 SB6_CS_TEX: sp.py decodes the slots the isam instructions name; a slot
  # missing here is the executor run without that state (model's own)
  if tex is None or samp is None:
    raise Ir3Error(f"pc {ins.pc} `{ins.text}`: texture {tex_i} / sampler {samp_i} not in the dispatch's texture state "
                   f"(loaded: textures {sorted(ex.textures)}, samplers {sorted(ex.samplers)})")
  c = ins.srcs[0]
  t = "s16" if c.kind == "h" else "s32"
  x = ex._src(w, ins, c, k, t).astype(np.int64)
  y = ex._src(w, ins, Opnd(c.kind, c.idx + 1), k, t).astype(np.int64)
  lanes = np.flatnonzero(en)
  vals = np.zeros((4, w.n), np.float32)
  vals[:, lanes] = fetch(ex.mem, tex, samp, x[lanes], y[lanes])
  ty = ins.extra[0]
  # model's own limit: float results from float textures (ir3-cat5.xml isam TYPE)
  if ty not in ("f32", "f16"): raise Ir3Error(f"pc {ins.pc} `{ins.text}`: isam returning {ty} from a float texture is not modelled")
  for comp in range(4):
    if ins.wrmask >> comp & 1:
      sub = Instr(ins.pc, ins.text, ins.op, ins.types, Opnd(ins.dst.kind, ins.dst.idx + comp), [])
      ex._write(w, sub, en, k, vals[comp] if ty == "f32" else vals[comp].astype(np.float16), sync="sy")


EXEC: dict[str, Any] = {
  "add": _alu2(lambda a, b: a + b, _ty), "sub": _alu2(lambda a, b: a - b, _ty), "mul": _mul,
  "max": _alu2(lambda a, b: _fmax(a, b) if a.dtype.kind == "f" else np.maximum(a, b), _ty),
  "min": _alu2(lambda a, b: _fmin(a, b) if a.dtype.kind == "f" else np.minimum(a, b), _ty),
  "and": _alu2(lambda a, b: a & b, _ty), "or": _alu2(lambda a, b: a | b, _ty), "xor": _alu2(lambda a, b: a ^ b, _ty),
  "shl": _alu2(_shift("shl"), _ty), "shr": _alu2(_shift("shr"), _ty), "ashr": _alu2(_shift("ashr"), _ty),
  "mull": _alu2(lambda a, b: (a & np.uint32(0xFFFF)) * (b & np.uint32(0xFFFF)), lambda ins: "u32"),
  "swz": _swz, "gat": _swz, "sct": _swz,
  "cmps": _cmps, "cmpv": _cmps, "cov": _cov, "mov": _mov, "sel": _sel, "mad": _mad, "madsh": _mad,
  "sad": _sad, "shrg": _triop("shrg"), "shlg": _triop("shlg"), "shrm": _triop("shrm"), "shlm": _triop("shlm"), "andg": _triop("andg"),
  "rcp": _sfu(lambda a: 1 / a), "sqrt": _sfu(np.sqrt), "rsq": _sfu(lambda a: 1 / np.sqrt(a)), "exp2": _sfu(np.exp2),
  "log2": _sfu(np.log2), "sin": _sfu(np.sin), "cos": _sfu(np.cos),
  "not": lambda ex, ins, w, en, k: ex._write(w, ins, en, k, ~ex._src(w, ins, ins.srcs[0], k, _ty(ins))),
  "absneg": _absneg, "sign": _unary_f(_fsign),
  "clz": lambda ex, ins, w, en, k: ex._write(w, ins, en, k, _clz(ex._src(w, ins, ins.srcs[0], k, "u32"))),
  "floor": _unary_f(np.floor), "ceil": _unary_f(np.ceil), "trunc": _unary_f(np.trunc), "rndne": _unary_f(np.rint),
  "ldg": _ldg, "stg": _stg, "ldl": _ldl, "stl": _stl, "isam": _isam,
}
