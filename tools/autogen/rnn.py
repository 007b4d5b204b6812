"""The freedreno register database (rules-ng XML) -> register offsets, bitfields and PM4 opcodes.

Registers, bitfields and enum values may be limited to chip generations (`variants="A6XX"`,
`"A7XX-"`, `"A6XX-A7XX"`); every table is emitted per generation so that nothing is
silently merged.
"""
from __future__ import annotations

import dataclasses
import os
import xml.etree.ElementTree as ET
from typing import Optional

from .cparse import AutogenError
from .gen import GENERATED_LINE, Source

NS = "{http://nouveau.freedesktop.org/}"
GENS = ["A2XX", "A3XX", "A4XX", "A5XX", "A6XX", "A7XX", "A8XX"]


def variant_ok(spec: Optional[str], gen: str) -> bool:
  if not spec: return True
  g = GENS.index(gen)
  for item in spec.replace(",", " ").split():
    if "-" in item:
      lo, hi = item.split("-", 1)
      if GENS.index(lo) <= g and (not hi or g <= GENS.index(hi)): return True
    elif item == gen:
      return True
  return False


def num(s: str) -> int:
  return int(s, 0)


@dataclasses.dataclass
class XmlModule:
  name: str
  source: Source
  files: list[str]          # relative to the source root; imports are followed
  gens: list[str]
  domains: list[str]        # register domains to emit
  packet_enum: str          # the enum of PM4 type-7 opcodes
  descriptors: list[str] = dataclasses.field(default_factory=list)   # memory descriptor domains (dword -> fields)
  headers: list[str] = dataclasses.field(default_factory=list)
  doc: str = ""

  def __post_init__(self) -> None:
    self.headers = self.files


class _DB:
  def __init__(self, root_dir: str):
    self.root_dir = root_dir
    self.bitsets: dict[str, ET.Element] = {}
    self.enums: dict[str, list[ET.Element]] = {}
    self.domains: dict[str, list[ET.Element]] = {}
    self.loaded: set[str] = set()

  def load(self, rel: str) -> None:
    path = os.path.join(self.root_dir, rel)
    if path in self.loaded: return
    self.loaded.add(path)
    if not os.path.exists(path):
      if rel.endswith("freedreno_copyright.xml"): return  # text only
      raise AutogenError(f"{path}: imported register file not found")
    try:
      root = ET.parse(path).getroot()
    except ET.ParseError as e:
      raise AutogenError(f"{path}:{e.position[0]}: {e}") from None
    for el in root:
      tag = el.tag.replace(NS, "")
      if tag == "import": self.load(el.get("file"))
      elif tag == "bitset": self.bitsets[el.get("name")] = el
      elif tag == "enum": self.enums.setdefault(el.get("name"), []).append(el)
      elif tag == "domain":
        self.domains.setdefault(el.get("name"), []).append(el)
        for sub in el.iter():
          if sub.tag == NS + "bitset": self.bitsets[sub.get("name")] = sub
          if sub.tag == NS + "enum": self.enums.setdefault(sub.get("name"), []).append(sub)

  def fields(self, reg: ET.Element, gen: str, inherited: Optional[str]) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    srcs = [reg]
    t = reg.get("type")
    if t and t in self.bitsets: srcs.insert(0, self.bitsets[t])
    for s in srcs:
      for bf in s:
        if bf.tag != NS + "bitfield" or not variant_ok(bf.get("variants"), gen): continue
        if bf.get("pos") is not None: hi = lo = num(bf.get("pos"))
        else: lo, hi = num(bf.get("low")), num(bf.get("high"))
        out[bf.get("name")] = (hi, lo)
    return out


def generate_xml(spec: XmlModule, src: str, command: str) -> tuple[str, dict]:
  for f in spec.files:
    if not os.path.exists(os.path.join(src, f)):
      raise AutogenError(f"{spec.name}: {os.path.join(src, f)} not found: {spec.source.how}")
  db = _DB(os.path.join(src, os.path.dirname(os.path.dirname(spec.files[0]))))
  for f in spec.files: db.load(os.path.relpath(os.path.join(src, f), db.root_dir))
  regs: dict[str, dict[str, int]] = {g: {} for g in spec.gens}
  arrays: dict[str, dict[str, tuple[int, int, int]]] = {g: {} for g in spec.gens}
  fields: dict[str, dict[str, dict[str, tuple[int, int]]]] = {g: {} for g in spec.gens}

  def walk(el: ET.Element, gen: str, base: int, prefix: str, inherited: Optional[str]) -> None:
    for c in el:
      tag = c.tag.replace(NS, "")
      var = c.get("variants") or inherited
      if not variant_ok(var, gen): continue
      if tag in ("reg32", "reg64"):
        name = prefix + c.get("name")
        regs[gen][name] = base + num(c.get("offset", "0"))
        f = db.fields(c, gen, var)
        if f: fields[gen][name] = f
      elif tag == "array":
        name = c.get("name")
        off = base + num(c.get("offset", "0"))
        if c.get("stride"): arrays[gen][prefix + name] = (off, num(c.get("stride")), num(c.get("length", "1")))
        walk(c, gen, off, prefix + name + "_", var)
      elif tag == "stripe":  # a group of registers at an offset, possibly limited to some variants
        walk(c, gen, base + num(c.get("offset", "0")), prefix, var)

  for gen in spec.gens:
    for d in spec.domains:
      if d not in db.domains: raise AutogenError(f"{spec.name}: domain {d} not in {spec.files}")
      for el in db.domains[d]: walk(el, gen, 0, "", el.get("variants"))
  # PM4 opcodes and the packet payload domains (CP_* domains describe the dwords of a packet)
  pm4: dict[str, dict[str, int]] = {g: {} for g in spec.gens}
  for gen in spec.gens:
    for en in db.enums.get(spec.packet_enum, []):
      for v in en:
        if v.tag == NS + "value" and variant_ok(v.get("variants"), gen) and v.get("value") is not None:
          pm4[gen][v.get("name")] = num(v.get("value"))
  packets: dict[str, dict[str, dict[str, tuple[int, int]]]] = {g: {} for g in spec.gens}
  packet_regs: dict[str, dict[str, dict[str, int]]] = {g: {} for g in spec.gens}
  for gen in spec.gens:
    for dname, els in db.domains.items():
      if not dname.startswith("CP_"): continue
      for el in els:
        if not variant_ok(el.get("variants"), gen): continue
        for c in el.iter():
          if c.tag not in (NS + "reg32", NS + "reg64") or not variant_ok(c.get("variants"), gen): continue
          packet_regs[gen].setdefault(dname, {})[c.get("name")] = num(c.get("offset", "0"))
          f = db.fields(c, gen, None)
          if f: packets[gen].setdefault(dname, {})[c.get("name")] = f
  # descriptors the GPU reads from memory (texture constants, samplers): dword name -> fields, like a packet's payload
  descs: dict[str, dict[str, dict[str, tuple[int, int]]]] = {g: {} for g in spec.gens}
  for gen in spec.gens:
    for dname in spec.descriptors:
      if dname not in db.domains: raise AutogenError(f"{spec.name}: descriptor domain {dname} not in {spec.files}")
      for el in db.domains[dname]:
        for c in el.iter():
          if c.tag != NS + "reg32" or not variant_ok(c.get("variants"), gen): continue
          descs[gen].setdefault(dname, {})[c.get("name")] = db.fields(c, gen, None)
  enums: dict[str, dict[str, int]] = {}
  for en_name, els in db.enums.items():
    for el in els:
      for v in el:
        if v.tag == NS + "value" and v.get("value") is not None:
          enums.setdefault(en_name, {})[v.get("name")] = num(v.get("value"))

  version = spec.source.version(src)
  out = [GENERATED_LINE, f"# Module: baregrad.ctypes_autogen.{spec.name}", f"# Source: {spec.source.what} {version}",
         "# Files: " + ", ".join(spec.files) + " (and what they import)", f"# Command: {command}"]
  if spec.doc: out += ["#"] + [f"# {l}" for l in spec.doc.strip().splitlines()]
  out += ["# mypy: ignore-errors", "# ruff: noqa", "from baregrad.ctypes_autogen import _support", "",
          f"SOURCE = {(spec.source.what + ' ' + version)!r}", "_F = _support.BitField", ""]

  def fdict(d: dict[str, tuple[int, int]]) -> str:
    return "{" + ", ".join(f"{k!r}: _F({h}, {l})" for k, (h, l) in d.items()) + "}"

  for gen in spec.gens:
    out.append(f"# {gen}: register offsets (in dwords); for registers inside an array, the offset of element 0")
    out.append(f"REGS_{gen}: dict[str, int] = {{")
    for k, v in sorted(regs[gen].items(), key=lambda kv: (kv[1], kv[0])): out.append(f"  {k!r}: {v:#06x},")
    out.append("}")
    out.append(f"# {gen}: register arrays: name -> (offset of element 0, stride, length)")
    out.append(f"ARRAYS_{gen}: dict[str, tuple[int, int, int]] = {arrays[gen]!r}")
    out.append(f"# {gen}: register bitfields: register -> field -> (hi, lo)")
    out.append(f"FIELDS_{gen}: dict[str, dict[str, _support.BitField]] = {{")
    for k, v in fields[gen].items(): out.append(f"  {k!r}: {fdict(v)},")
    out.append("}")
    out.append(f"# {gen}: CP packet (type 7) opcodes")
    out.append(f"PM4_{gen}: dict[str, int] = {pm4[gen]!r}")
    out.append(f"# {gen}: packet payloads: packet -> dword name -> dword index, and -> dword -> field -> (hi, lo)")
    out.append(f"PACKET_DWORDS_{gen}: dict[str, dict[str, int]] = {packet_regs[gen]!r}")
    out.append(f"PACKET_FIELDS_{gen}: dict[str, dict[str, dict[str, _support.BitField]]] = {{")
    for k, v in packets[gen].items(): out.append(f"  {k!r}: {{" + ", ".join(f"{r!r}: {fdict(f)}" for r, f in v.items()) + "},")
    out.append("}")
    if spec.descriptors:
      out.append(f"# {gen}: descriptors in memory: domain -> dword (its index as a name) -> field -> (hi, lo)")
      out.append(f"DESCRIPTOR_FIELDS_{gen}: dict[str, dict[str, dict[str, _support.BitField]]] = {{")
      for k, v in descs[gen].items(): out.append(f"  {k!r}: {{" + ", ".join(f"{r!r}: {fdict(f)}" for r, f in v.items()) + "},")
      out.append("}")
    out.append("")
  common = [k for k in pm4[spec.gens[0]] if all(pm4[g].get(k) == pm4[spec.gens[0]][k] for g in spec.gens)]
  out.append("# opcodes that are the same on every generation above, as names")
  for k in common: out.append(f"{k} = {pm4[spec.gens[0]][k]:#x}")
  out.append("")
  out.append("# enums of the database (field values): enum -> name -> value")
  out.append("ENUMS: dict[str, dict[str, int]] = {")
  for k, v in enums.items(): out.append(f"  {k!r}: {v!r},")
  out.append("}")
  rep = {g: len(regs[g]) for g in spec.gens}
  rep["pm4"] = len(pm4[spec.gens[0]])
  return "\n".join(out) + "\n", rep
