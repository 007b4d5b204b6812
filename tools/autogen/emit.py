"""Model + compiler facts -> a Python module of ctypes declarations.

Each record is fitted to the compiler's layout: ctypes' own placement is simulated (with
live ctypes classes where bitfields are involved); where it differs from the compiler's,
`_pack_`, explicit padding members, or a different bitfield storage type make it agree.
What cannot be made to agree is an error naming the record and member.
"""
from __future__ import annotations

import ctypes
import keyword
from typing import Any, Optional

from .cparse import AutogenError, CType, Model, Record
from .probe import Layout

BASE: dict[str, tuple[Any, str]] = {
  "char": (ctypes.c_char, "ctypes.c_char"), "signed char": (ctypes.c_byte, "ctypes.c_int8"),
  "unsigned char": (ctypes.c_ubyte, "ctypes.c_uint8"), "short": (ctypes.c_short, "ctypes.c_int16"),
  "unsigned short": (ctypes.c_ushort, "ctypes.c_uint16"), "int": (ctypes.c_int, "ctypes.c_int32"),
  "unsigned int": (ctypes.c_uint, "ctypes.c_uint32"), "long": (ctypes.c_long, "ctypes.c_long"),
  "unsigned long": (ctypes.c_ulong, "ctypes.c_ulong"), "long long": (ctypes.c_longlong, "ctypes.c_int64"),
  "unsigned long long": (ctypes.c_ulonglong, "ctypes.c_uint64"), "float": (ctypes.c_float, "ctypes.c_float"),
  "double": (ctypes.c_double, "ctypes.c_double"), "long double": (ctypes.c_longdouble, "ctypes.c_longdouble"),
  "_Bool": (ctypes.c_bool, "ctypes.c_bool"), "void": (None, "None"),
}
_INTS = {(1, False): (ctypes.c_uint8, "ctypes.c_uint8"), (2, False): (ctypes.c_uint16, "ctypes.c_uint16"),
         (4, False): (ctypes.c_uint32, "ctypes.c_uint32"), (8, False): (ctypes.c_uint64, "ctypes.c_uint64"),
         (1, True): (ctypes.c_int8, "ctypes.c_int8"), (2, True): (ctypes.c_int16, "ctypes.c_int16"),
         (4, True): (ctypes.c_int32, "ctypes.c_int32"), (8, True): (ctypes.c_int64, "ctypes.c_int64")}
_SIGNED = {ctypes.c_byte, ctypes.c_short, ctypes.c_int, ctypes.c_long, ctypes.c_longlong, ctypes.c_char}


def pyname(n: str) -> str:
  return n + "_" if keyword.iskeyword(n) else n


def _align_up(x: int, a: int) -> int:
  return (x + a - 1) // a * a


class Emitter:
  """Turns the selected part of a Model into live ctypes classes and their source text."""

  def __init__(self, model: Model, layouts: dict[str, Layout], ints: dict[str, int]):
    self.m, self.layouts, self.ints = model, layouts, ints
    self.classes: dict[str, Any] = {}  # record key -> live class
    self.built: dict[str, list[str]] = {}  # record key -> text lines setting its fields
    self.building: set[str] = set()
    self.events: list[tuple[str, str]] = []  # ('record'|'typedef', name) in the order they became complete
    self.typedefs_used: dict[str, str] = {}  # typedef name -> text of its target
    self.enum_types: dict[str, tuple[Any, str]] = {}
    self.failed: dict[str, str] = {}

  # ------------------------------------------------------------------ types
  def enum_ctype(self, key: Optional[str]) -> tuple[Any, str]:
    if key is None or f"enum_size:{key}" not in self.ints: return _INTS[(4, False)]
    return _INTS[(self.ints[f"enum_size:{key}"], bool(self.ints[f"enum_signed:{key}"]))]

  def ct(self, t: CType, by_value: bool = True, in_param: bool = False) -> tuple[Any, str]:
    if t.kind == "base": return BASE[t.name]
    if t.kind == "typedef":
      td = self.m.typedefs.get(t.name)
      if td is None: raise AutogenError(f"type {t.name} is used but never defined")
      obj, text = self.ct(td.type, by_value, in_param)
      if t.name not in self.typedefs_used:
        self.typedefs_used[t.name] = text
        self.events.append(("typedef", t.name))
      self.enum_types.setdefault(t.name, (obj, text))
      return obj, pyname(t.name)
    if t.kind == "enum": return self.enum_ctype(t.name)
    if t.kind == "record":
      cls = self.declare(t.name)
      if by_value: self.build(t.name)
      return cls, pyname(t.name)
    if t.kind == "ptr":
      sub = self.resolve(t.sub)
      if sub.kind == "base" and sub.name == "char": return ctypes.c_char_p, "ctypes.c_char_p"
      if (sub.kind == "base" and sub.name == "void") or sub.kind == "func":
        return ctypes.c_void_p, "ctypes.c_void_p"
      obj, text = self.ct(t.sub, by_value=False)
      if obj is None: return ctypes.c_void_p, "ctypes.c_void_p"
      return ctypes.POINTER(obj), f"ctypes.POINTER({text})"
    if t.kind == "array":
      if in_param: return self.ct(CType("ptr", sub=t.sub), in_param=True)
      obj, text = self.ct(t.sub, by_value)
      n = 0 if t.dim is None else self.ints.get(f"dim:{t.dim}")
      if n is None: raise AutogenError(f"array size {t.dim} is not a constant")
      return obj * n, f"({text} * {n})"
    if t.kind == "func": return ctypes.c_void_p, "ctypes.c_void_p"
    raise AutogenError(f"type kind {t.kind} not handled")

  def resolve(self, t: CType) -> CType:
    while t.kind == "typedef" and t.name in self.m.typedefs: t = self.m.typedefs[t.name].type
    return t

  # ---------------------------------------------------------------- records
  def declare(self, key: str) -> Any:
    if key not in self.classes:
      rec = self.m.records[key]
      base = ctypes.Structure if rec.kind == "struct" else ctypes.Union
      self.classes[key] = type(key, (base,), {})
    return self.classes[key]

  def leaves(self, key: str) -> list[tuple[str, bool]]:
    """Named members reachable from `key` in C (anonymous members are transparent)."""
    out = []
    for mem in self.m.records[key].members or []:
      if mem.name is None and mem.bits is None and mem.type.kind == "record": out += self.leaves(mem.type.name)
      elif mem.name is not None: out.append((mem.name, mem.bits is not None))
    return out

  def flexible(self, key: str) -> set[str]:
    """Leaves that are flexible array members (`T x[];`)."""
    out = set()
    for mem in self.m.records[key].members or []:
      if mem.name is None and mem.bits is None and mem.type.kind == "record": out |= self.flexible(mem.type.name)
      elif mem.name is not None and self.resolve(mem.type).kind == "array" and self.resolve(mem.type).dim is None:
        out.add(mem.name)
    return out

  def target(self, key: str) -> Optional[Layout]:
    """The compiler's layout of `key`; for an anonymous member, derived from its parent's."""
    if key in self.layouts: return self.layouts[key]
    rec = self.m.records[key]
    if not rec.anon_member or rec.parent is None: return None
    pt = self.target(rec.parent)
    if pt is None: return None
    names = self.leaves(key)
    starts = [pt[2][n] for n, b in names if not b] + [pt[3][n][0] // 8 for n, b in names if b]
    if not starts: return None
    s = min(starts)
    offs = {n: pt[2][n] - s for n, b in names if not b}
    bits = {n: (pt[3][n][0] - 8 * s, pt[3][n][1]) for n, b in names if b}
    return (-1, -1, offs, bits, {n: pt[4][n] for n in offs})  # size and alignment unknown: C cannot name this type

  def build(self, key: str) -> None:
    if key in self.built or key in self.building: return
    rec = self.m.records[key]
    cls = self.declare(key)
    if rec.members is None:
      self.built[key] = []  # opaque: declared, never defined in the headers read
      self.events.append(("record", key))
      return
    if key in self.failed: raise AutogenError(f"{key} could not be bound ({self.failed[key]})")
    self.building.add(key)
    try:
      self._build(key, rec, cls)
    except AutogenError as e:
      self.failed[key] = str(e)
      raise
    finally:
      self.building.discard(key)

  def _build(self, key: str, rec: Record, cls: Any) -> None:
    tgt = self.target(key)
    if tgt is None: raise AutogenError(f"{rec.file}:{rec.line}: no compiler layout for {key}")
    size, align, offs, bits, _ = tgt
    fields: list[tuple] = []
    texts: list[str] = []
    anon: list[str] = []
    members = []
    taken = {m.name for m in rec.members if m.name}
    if any(n.startswith(("_pad", "_bfpad", "_anon")) for n in taken):
      raise AutogenError(f"{rec.file}:{rec.line}: {key} has a member named like the generator's padding (_pad*, _bfpad*, _anon*)")
    for mem in rec.members:
      if mem.name is None and mem.bits is not None: continue  # unnamed bitfield: padding, positions come from gcc
      if mem.name is None:
        sub = mem.type.name
        self.build(sub)
        st = self.target(sub)
        names = self.leaves(sub)
        sub_starts = [offs[n] - st[2][n] for n, b in names if not b] + [(bits[n][0] - st[3][n][0]) // 8 for n, b in names if b]
        members.append((f"_anon{len(anon)}", mem.type, None, min(sub_starts) if sub_starts else None))
        anon.append(f"_anon{len(anon)}")
      elif mem.bits is not None:
        members.append((mem.name, mem.type, bits[mem.name], None))
      else:
        members.append((mem.name, mem.type, None, offs[mem.name]))
    live = [(n, self.ct(t), bf, off) for n, t, bf, off in members]
    natural = max([ctypes.alignment(o) for _, (o, _), _, _ in live] or [1])
    pack0 = None
    if align > 0 and align < natural: pack0 = align
    elif align < 0 and any(off is not None and off % ctypes.alignment(o) for _, (o, _), _, off in live):
      pack0 = 1
    base = ctypes.Structure if rec.kind == "struct" else ctypes.Union

    def fit(pack: Optional[int], small_first: bool) -> tuple[list[tuple], list[str]]:
      """ctypes fields (and their text) that reproduce the compiler's layout with this `_pack_`."""
      fields: list[tuple] = []
      texts: list[str] = []
      def trial(fs: list[tuple]) -> Any:
        ns: dict[str, Any] = {}
        if pack: ns["_pack_"] = pack
        if anon: ns["_anonymous_"] = [a for a in anon if any(f[0] == a for f in fs)]
        ns["_fields_"] = fs
        return type("trial", (base,), ns)

      cur = 0  # where ctypes' next non-bitfield member would start looking
      npad = 0
      for name, (obj, text), bf, off in live:
        if bf is None:
          if rec.kind == "struct":
            a = min(pack, ctypes.alignment(obj)) if pack else ctypes.alignment(obj)
            where = _align_up(cur, a)
            if off is not None and where != off:
              if where > off or off % a:
                raise AutogenError(f"{rec.file}:{rec.line}: {key}.{name}: ctypes cannot place it at offset {off} "
                                   f"(it would go to {where})")
              fields.append((f"_pad{npad}", ctypes.c_uint8 * (off - cur)))
              texts.append(f"('_pad{npad}', ctypes.c_uint8 * {off - cur})")
              npad += 1
              where = off
            cur = where + ctypes.sizeof(obj)
          fields.append((name, obj))
          texts.append(f"({name!r}, {text})")
          continue
        # bitfield: find a storage type (and maybe a padding bitfield) that puts it where gcc does
        want_bit, width = bf
        signed = obj in _SIGNED or obj in (ctypes.c_int8, ctypes.c_int16, ctypes.c_int32, ctypes.c_int64)
        same = [v for (sz, sg), v in sorted(_INTS.items()) if sg == signed and sz * 8 >= width]
        # the declared type first; with _pack_=1 the smallest unit that holds the field, so that the
        # unit does not run into the next member
        cands = same if small_first else [(obj, text)] + [v for v in same if v[0] is not obj]
        if obj is ctypes.c_bool: cands = [_INTS[(1, False)]] + [v for v in cands if v[0] is not obj]
        done = False
        for cobj, ctext in cands:
          for padbits in (None, "gap"):
            fs = list(fields)
            extra = []
            if padbits == "gap":
              if ctypes.sizeof(cobj) * 8 < width: continue
              try:
                probe = trial(fs + [(name, cobj, width)])
              except (TypeError, ValueError):
                continue
              f0 = getattr(probe, name)
              got = f0.offset * 8 + (f0.size & 0xFFFF)
              if got >= want_bit: continue
              gap = want_bit - got
              if gap >= ctypes.sizeof(cobj) * 8: continue
              extra = [(f"_bfpad{npad}", cobj, gap)]
            try:
              t = trial(fs + extra + [(name, cobj, width)])
            except (TypeError, ValueError):
              continue
            fd = getattr(t, name)
            if fd.offset * 8 + (fd.size & 0xFFFF) == want_bit and fd.size >> 16 == width:
              for e in extra:
                fields.append(e)
                texts.append(f"({e[0]!r}, {ctext}, {e[2]})")
                npad += 1
              fields.append((name, cobj, width))
              texts.append(f"({name!r}, {ctext}, {width})")
              cur = fd.offset + ctypes.sizeof(cobj)
              done = True
              break
          if done: break
        if not done:
          raise AutogenError(f"{rec.file}:{rec.line}: {key}.{name}: no ctypes bitfield gives gcc's bit offset "
                             f"{want_bit} width {width}")
      if size > 0:
        t = trial(fields)
        have = ctypes.sizeof(t)
        if have < size:
          if rec.kind == "union":
            fields.append(("_pad", ctypes.c_uint8 * size))
            texts.append(f"('_pad', ctypes.c_uint8 * {size})")
          else:
            # ctypes' own end (before its tail rounding) is where the padding goes
            end = max([getattr(t, f[0]).offset + ctypes.sizeof(f[1]) for f in fields] or [0])
            fields.append((f"_pad{npad}", ctypes.c_uint8 * (size - end)))
            texts.append(f"('_pad{npad}', ctypes.c_uint8 * {size - end})")
          if ctypes.sizeof(trial(fields)) != size:
            raise AutogenError(f"{rec.file}:{rec.line}: {key}: ctypes size {ctypes.sizeof(trial(fields))} != C size {size}")
        elif have > size:
          raise AutogenError(f"{rec.file}:{rec.line}: {key}: ctypes size {have} > C size {size}")
      return fields, texts

    attempts = [(pack0, False), (1, True)] if pack0 != 1 else [(1, False), (1, True)]
    err: Optional[AutogenError] = None
    for pack, small_first in attempts:
      try:
        fields, texts = fit(pack, small_first)
        break
      except AutogenError as e:
        err = err or e
    else:
      if not any(bf is not None for _, _, bf, _ in live) or size <= 0: raise err
      # a bitfield shares its storage unit with a plain member, or a packed bitfield straddles
      # units: ctypes cannot say that in one Structure, so overlay views of the same bytes. A union too: ctypes
      # (CPython 3.11) places a union's second bitfield of another type as if the first's unit went on (int16 m0 : 1;
      # int64 m1 : 33 put m1 at byte -2, bit 1), so each bitfield gets a view of its own
      fields, texts, pack, anon = self._overlay(key, live, size, union=rec.kind != "struct"), None, None, ["_anon0"]
    if texts is None:
      texts = [f"('_anon0', {key}_overlay)"]
    if pack: cls._pack_ = pack
    if anon: cls._anonymous_ = anon
    cls._fields_ = fields
    lines = []
    if pack: lines.append(f"{key}._pack_ = {pack}")
    if anon: lines.append(f"{key}._anonymous_ = {anon!r}")
    body = ",\n  ".join(texts)
    lines.append(f"{key}._fields_ = [\n  {body},\n]" if texts else f"{key}._fields_ = []")
    self.built[key] = lines
    self.events.append(("record", key))
    self.verify(key)

  def _helper(self, name: str, base: Any, fields: list[tuple], texts: list[str], anon: list[str]) -> Any:
    """A class the overlay needs; emitted like a record."""
    ns: dict[str, Any] = {"_pack_": 1}
    if anon: ns["_anonymous_"] = anon
    ns["_fields_"] = fields
    cls = type(name, (base,), ns)
    self.classes[name] = cls
    lines = [f"{name}._pack_ = 1"] + ([f"{name}._anonymous_ = {anon!r}"] if anon else [])
    lines.append(f"{name}._fields_ = [\n  " + ",\n  ".join(texts) + ",\n]" if texts else f"{name}._fields_ = []")
    self.built[name] = lines
    self.events.append(("record", name))
    return cls

  def _overlay(self, key: str, live: list, size: int, union: bool = False) -> list[tuple]:
    """`key` as a union of views, each at exact byte offsets: one struct with every plain member (a union's: one
    struct per plain member, all at 0), and one struct per bitfield holding only that field in a storage unit chosen
    to reach its bits."""
    pf, pt, panon, cur, npad = [], [], [], 0, 0
    uviews: list[tuple] = []
    for name, (obj, text), bf, off in live:
      if bf is not None: continue
      if union:
        uviews.append((self._helper(f"{key}_m{len(uviews)}", ctypes.Structure, [(name, obj)], [f"({name!r}, {text})"],
                                    [name] if name.startswith("_anon") else []), f"{key}_m{len(uviews)}"))
        continue
      if off > cur:
        pf.append((f"_pad{npad}", ctypes.c_uint8 * (off - cur)))
        pt.append(f"('_pad{npad}', ctypes.c_uint8 * {off - cur})")
        npad += 1
      elif off < cur:
        raise AutogenError(f"{key}.{name}: members overlap at offset {off}")
      pf.append((name, obj))
      pt.append(f"({name!r}, {text})")
      if name.startswith("_anon"): panon.append(name)
      cur = off + ctypes.sizeof(obj)
    views = [(self._helper(f"{key}_plain", ctypes.Structure, pf, pt, panon), f"{key}_plain")] if pf else uviews
    for i, (name, (obj, text), bf, off) in enumerate(x for x in live if x[2] is not None):
      want, width = bf
      signed = obj in _SIGNED or obj in (ctypes.c_int8, ctypes.c_int16, ctypes.c_int32, ctypes.c_int64)
      first, last = want // 8, (want + width - 1) // 8
      for sz in (1, 2, 4, 8):
        start = min(first, size - sz)
        if start >= 0 and start + sz > last and want - 8 * start + width <= 8 * sz: break
      else:
        raise AutogenError(f"{key}.{name}: no ctypes storage unit (1, 2, 4 or 8 bytes) holds bits {want}..{want + width - 1} "
                           f"inside the {size}-byte record")
      t, tt = _INTS[(sz, signed)]
      bfs, bts = [], []
      if start:
        bfs.append(("_pad0", ctypes.c_uint8 * start))
        bts.append(f"('_pad0', ctypes.c_uint8 * {start})")
      if want - 8 * start:
        bfs.append(("_bfpad0", t, want - 8 * start))
        bts.append(f"('_bfpad0', {tt}, {want - 8 * start})")
      bfs.append((name, t, width))
      bts.append(f"({name!r}, {tt}, {width})")
      views.append((self._helper(f"{key}_bf{i}", ctypes.Structure, bfs, bts, []), f"{key}_bf{i}"))
    names = [f"_anon{i}" for i in range(len(views))]
    uf = [(n, c) for n, (c, _) in zip(names, views)] + [("_pad", ctypes.c_uint8 * size)]
    ut = [f"({n!r}, {t})" for n, (_, t) in zip(names, views)] + [f"('_pad', ctypes.c_uint8 * {size})"]
    u = self._helper(f"{key}_overlay", ctypes.Union, uf, ut, names)
    return [("_anon0", u)]

  def verify(self, key: str) -> None:
    """Compare the live class with the compiler's layout, through anonymous members too."""
    tgt = self.layouts.get(key)
    if tgt is None: return
    cls = self.classes[key]
    size, _, offs, bits, sizes = tgt
    bad = []
    if ctypes.sizeof(cls) != size: bad.append(f"sizeof {ctypes.sizeof(cls)} != {size}")
    for n, o in offs.items():
      if getattr(cls, n).offset != o: bad.append(f"{n} at {getattr(cls, n).offset} != {o}")
      if getattr(cls, n).size != sizes[n]: bad.append(f"{n} has size {getattr(cls, n).size} != {sizes[n]}")
    for n, (b, w) in bits.items():
      f = getattr(cls, n)
      if (f.offset * 8 + (f.size & 0xFFFF), f.size >> 16) != (b, w): bad.append(f"bitfield {n} != ({b}, {w})")
    if bad: raise AutogenError(f"{key}: ctypes layout differs from the C compiler's: {'; '.join(bad)}")
