"""C front end: the system preprocessor, then pycparser, into a small declaration model.

pycparser rather than libclang: it adds no dependency (cffi, which the project already
needs, pulls it in) and it is pure Python, so the generator runs wherever the tests run.

pycparser reads standard C only, so GCC extensions are removed from the preprocessed text
before parsing. That is safe for layout because the layout is never taken from the
stripped text: every struct is laid out by the C compiler itself from the *original*
header (see probe.py), which reads `__attribute__((packed))`, `aligned(n)`, `#pragma
pack` and the rest exactly; the ctypes classes are then fitted to the compiler's offsets
(emit.py) and a mismatch is an error. So `__attribute__((packed))`, `aligned(n)` and
`#pragma pack` are honoured exactly, while pycparser only ever sees plain C.
"""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import tempfile
from typing import Optional

from pycparser import c_ast, c_generator, c_parser
from pycparser.c_parser import ParseError


class AutogenError(Exception):
  """Any failure the user must act on: bad header, unhandled construct, missing source."""


# ---------------------------------------------------------------- preprocessing

@dataclasses.dataclass
class Macro:
  name: str
  params: Optional[list[str]]  # None for object-like macros
  body: str
  file: str
  line: int


def preprocess(headers: list[str], includes: list[str], defines: list[str], prelude: str = "",
               cc: str = "gcc") -> tuple[str, list[Macro]]:
  """Run `cc -E -dD` over a file including `headers`; returns (C text with line markers, macros)."""
  with tempfile.TemporaryDirectory() as td:
    path = os.path.join(td, "autogen_input.c")
    with open(path, "w") as f:
      f.write(prelude)
      for h in headers: f.write((f"#include {h}\n" if h.startswith("<") else f'#include "{os.path.abspath(h)}"\n'))
    cmd = [cc, "-E", "-dD", "-std=gnu11"] + [f"-I{i}" for i in includes] + [f"-D{d}" for d in defines] + [path]
    r = subprocess.run(cmd, capture_output=True, text=True)
  if r.returncode != 0:
    raise AutogenError(f"preprocessing failed ({' '.join(cmd)}):\n{r.stderr.strip()}")
  return split_directives(r.stdout)


_LINEMARK = re.compile(r'^#\s*(\d+)\s+"((?:[^"\\]|\\.)*)"')
_DEFINE = re.compile(r'^#define\s+([A-Za-z_]\w*)(\(([^)]*)\))?\s*(.*)$')


def split_directives(text: str) -> tuple[str, list[Macro]]:
  """Separate `#define`s (kept with their file and line) from the C text for pycparser."""
  out, macros = [], []
  cur_file, cur_line = "", 0
  for raw in text.split("\n"):
    m = _LINEMARK.match(raw)
    if m:
      cur_file, cur_line = m.group(2), int(m.group(1))
      out.append(raw)
      continue
    if raw.startswith("#define"):
      d = _DEFINE.match(raw)
      if d and not cur_file.startswith("<"):
        params = None if d.group(2) is None else [p.strip() for p in d.group(3).split(",") if p.strip()]
        macros.append(Macro(d.group(1), params, d.group(4).strip(), cur_file, cur_line))
      out.append("")
    elif raw.startswith("#undef"):
      name = raw.split()[1]
      macros = [m for m in macros if m.name != name]
      out.append("")
    elif raw.startswith("#pragma") or raw.startswith("#ident"):
      out.append("")
    else:
      out.append(raw)
    cur_line += 1
  return "\n".join(out), macros


# ------------------------------------------------------- GCC extensions -> plain C

_DROP_CALLS = ("__attribute__", "__attribute", "__asm__", "__asm", "asm", "__declspec")
_WORD_SUBST = {"__extension__": "", "__restrict": "", "__restrict__": "", "restrict": "",
               "__inline": "inline", "__inline__": "inline", "__const": "const", "__const__": "const",
               "__volatile__": "volatile", "__volatile": "volatile", "__signed__": "signed",
               "__signed": "signed", "__builtin_offsetof": "offsetof", "__int128": "long long",
               "_Noreturn": "", "__thread": "", "_Thread_local": "", "_Float128": "long double",
               "_Float64": "double", "_Float32": "float", "_Float64x": "long double", "_Float32x": "double"}
_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|[A-Za-z_]\w*|\s+|.', re.S)


def strip_extensions(text: str) -> str:
  """Remove GCC extensions pycparser cannot read (the compiler, not this text, decides layouts)."""
  res: list[str] = []
  toks = _TOKEN.findall(text)
  i = 0
  while i < len(toks):
    t = toks[i]
    if t in _DROP_CALLS:
      j = i + 1
      while j < len(toks) and toks[j].isspace(): j += 1
      if j < len(toks) and toks[j] == "(":
        depth, k = 0, j
        while k < len(toks):
          if toks[k] == "(": depth += 1
          elif toks[k] == ")":
            depth -= 1
            if depth == 0: break
          k += 1
        inner = "".join(toks[j:k + 1])
        # keep newlines so pycparser's line numbers stay right
        res.append("\n" * inner.count("\n"))
        i = k + 1
        continue
    if t in ("typeof", "__typeof__", "__typeof"):
      raise AutogenError("typeof in a header is not handled")
    res.append(_WORD_SUBST.get(t, t))
    i += 1
  return "".join(res)


# ---------------------------------------------------------------------- the model

@dataclasses.dataclass
class CType:
  """kind: 'base' (name), 'ptr' (sub), 'array' (sub, dim), 'func' (sub=ret, params, variadic),
  'record' (name = record key), 'enum' (name = enum key or None), 'typedef' (name)."""
  kind: str
  name: str = ""
  sub: Optional["CType"] = None
  dim: Optional[str] = None  # C expression text; None for a flexible array
  params: Optional[list["CType"]] = None
  variadic: bool = False
  const: bool = False


@dataclasses.dataclass
class Member:
  name: Optional[str]  # None: anonymous struct/union member, or unnamed bitfield
  type: CType
  bits: Optional[str] = None  # bitfield width, C expression text


@dataclasses.dataclass
class Record:
  key: str          # Python class name
  kind: str         # 'struct' | 'union'
  tag: Optional[str]
  members: Optional[list[Member]]  # None: declared, never defined (opaque)
  file: str
  line: int
  cexpr: Optional[str] = None  # how C names this type (None for anonymous members)
  parent: Optional[str] = None  # enclosing record key, for nested records
  anon_member: bool = False  # an unnamed struct/union member: C cannot name its type


@dataclasses.dataclass
class Enum:
  key: Optional[str]
  tag: Optional[str]
  values: list[tuple[str, str]]  # (name, C expression text)
  file: str
  line: int
  cexpr: Optional[str] = None


@dataclasses.dataclass
class Typedef:
  name: str
  type: CType
  file: str
  line: int


@dataclasses.dataclass
class Func:
  name: str
  type: CType
  file: str
  line: int


@dataclasses.dataclass
class Model:
  records: dict[str, Record] = dataclasses.field(default_factory=dict)
  enums: dict[str, Enum] = dataclasses.field(default_factory=dict)
  enum_consts: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)  # name -> (expr, file)
  typedefs: dict[str, Typedef] = dataclasses.field(default_factory=dict)
  funcs: dict[str, Func] = dataclasses.field(default_factory=dict)
  macros: dict[str, Macro] = dataclasses.field(default_factory=dict)
  order: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (kind, key) in source order
  other: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)  # (name, why not bound, file)


_BASE_WORDS = {"void", "char", "short", "int", "long", "signed", "unsigned", "float", "double", "_Bool"}


def normalize_base(names: list[str]) -> str:
  """['unsigned'] -> 'unsigned int', ['long', 'unsigned', 'int'] -> 'unsigned long' ..."""
  n = list(names)
  uns = "unsigned" in n
  sig = "signed" in n
  n = [x for x in n if x not in ("signed", "unsigned")]
  longs = n.count("long")
  rest = [x for x in n if x not in ("long", "int")]
  if rest == ["char"]: return "unsigned char" if uns else ("signed char" if sig else "char")
  if rest == ["short"]: return "unsigned short" if uns else "short"
  if rest == ["double"]: return "long double" if longs else "double"
  if rest in (["float"], ["void"], ["_Bool"]): return rest[0]
  if rest: raise AutogenError(f"unknown base type {' '.join(names)}")
  base = {0: "int", 1: "long", 2: "long long"}[longs]
  return ("unsigned " + base) if uns else base


class _Builder:
  def __init__(self, model: Model):
    self.m = model
    self.gen = c_generator.CGenerator()
    self.anon = 0
    self.untagged: dict = {}

  def expr(self, node: c_ast.Node) -> str:
    return self.gen.visit(node)

  def coord(self, node: c_ast.Node) -> tuple[str, int]:
    c = node.coord
    return (c.file or "", c.line or 0) if c is not None else ("", 0)

  def record(self, node: c_ast.Node, hint: str, parent: Optional[str], cexpr: Optional[str]) -> str:
    kind = "struct" if isinstance(node, c_ast.Struct) else "union"
    if node.name is not None:
      key = f"{kind}_{node.name}"
      rec = self.m.records.get(key)
      if rec is None:
        file, line = self.coord(node)
        rec = self.m.records[key] = Record(key, kind, node.name, None, file, line, cexpr=f"{kind} {node.name}")
      if node.decls is not None and rec.members is None:
        rec.members = []
        rec.file, rec.line = self.coord(node)
        self.m.order.append(("record", key))
        rec.members = self.members(node.decls, key, rec.cexpr)
      return key
    # `typedef struct {...} A, *PA;` gives the same untagged struct twice: one record
    at = (node.coord.file, node.coord.line, node.coord.column) if node.coord else id(node)
    if at in self.untagged: return self.untagged[at]
    key = hint
    while key in self.m.records: key += "_"
    self.untagged[at] = key
    file, line = self.coord(node)
    rec = self.m.records[key] = Record(key, kind, None, None, file, line, cexpr=cexpr, parent=parent)
    self.m.order.append(("record", key))
    rec.members = self.members(node.decls or [], key, cexpr)
    return key

  def members(self, decls: list[c_ast.Decl], key: str, cexpr: Optional[str]) -> list[Member]:
    out = []
    for d in decls:
      if d.name is None and isinstance(d.type, (c_ast.Struct, c_ast.Union)) and d.bitsize is None:
        self.anon += 1
        sub = self.record(d.type, f"{key}_anon{self.anon}", key, None) if d.type.name is None else self.record(d.type, "", key, None)
        if d.type.name is None: self.m.records[sub].anon_member = True
        out.append(Member(None, CType("record", sub)))
        continue
      # an lvalue of the member, so that nested unnamed types can be named with __typeof__ in probes
      access = f"(({cexpr}*)0)->{d.name}" if (cexpr and d.name) else None
      t = self.ctype(d.type, f"{key}_{d.name}", key, access)
      out.append(Member(d.name, t, self.expr(d.bitsize) if d.bitsize is not None else None))
    return out

  def ctype(self, node: c_ast.Node, hint: str, parent: Optional[str] = None, access: Optional[str] = None) -> CType:
    cexpr = f"__typeof__({access})" if access else None
    if isinstance(node, c_ast.TypeDecl):
      t = self.ctype(node.type, hint, parent, access)
      if "const" in node.quals: t = dataclasses.replace(t, const=True)
      return t
    if isinstance(node, c_ast.Typename):
      return self.ctype(node.type, hint, parent, access)
    if isinstance(node, c_ast.IdentifierType):
      if all(n in _BASE_WORDS for n in node.names): return CType("base", normalize_base(node.names))
      if len(node.names) == 1: return CType("typedef", node.names[0])
      raise AutogenError(f"{':'.join(map(str, self.coord(node)))}: type {' '.join(node.names)} not handled")
    if isinstance(node, c_ast.PtrDecl):
      return CType("ptr", sub=self.ctype(node.type, hint + "_p", parent, None))
    if isinstance(node, c_ast.ArrayDecl):
      return CType("array", sub=self.ctype(node.type, hint, parent, f"({access})[0]" if access else None),
                   dim=self.expr(node.dim) if node.dim is not None else None)
    if isinstance(node, (c_ast.Struct, c_ast.Union)):
      return CType("record", self.record(node, hint, parent, cexpr))
    if isinstance(node, c_ast.Enum):
      return CType("enum", self.enum(node, cexpr))
    if isinstance(node, c_ast.FuncDecl):
      params, variadic = [], False
      for p in (node.args.params if node.args else []):
        if isinstance(p, c_ast.EllipsisParam): variadic = True
        else: params.append(self.ctype(p.type, hint + "_arg"))
      if len(params) == 1 and params[0].kind == "base" and params[0].name == "void": params = []
      return CType("func", sub=self.ctype(node.type, hint + "_ret"), params=params, variadic=variadic)
    raise AutogenError(f"{':'.join(map(str, self.coord(node)))}: declarator {type(node).__name__} not handled")

  def enum(self, node: c_ast.Enum, cexpr: Optional[str]) -> Optional[str]:
    key = f"enum_{node.name}" if node.name else None
    if node.values is not None:
      file, line = self.coord(node)
      vals = []
      for e in node.values.enumerators:
        # enumerators are constants in C: the probe evaluates each by its own name
        vals.append((e.name, e.name))
        self.m.enum_consts[e.name] = (e.name, file)
      en = Enum(key, node.name, vals, file, line, cexpr=(f"enum {node.name}" if node.name else cexpr))
      k = key or f"_anon_enum_{len(self.m.enums)}"
      self.m.enums[k] = en
      self.m.order.append(("enum", k))
      return key or k
    if key and key not in self.m.enums:
      self.m.enums[key] = Enum(key, node.name, [], "", 0, cexpr=f"enum {node.name}")
    return key

  def top(self, node: c_ast.Node) -> None:
    file, line = self.coord(node)
    if isinstance(node, c_ast.Typedef):
      hint = node.name
      inner = node.type.type if isinstance(node.type, c_ast.TypeDecl) else None
      if isinstance(inner, (c_ast.Struct, c_ast.Union)) and inner.name is None and inner.decls is not None:
        # `typedef struct { ... } T;`: C names the struct T, and its nested types through T
        t = CType("record", self.record(inner, node.name, None, node.name))
      else:
        t = self.ctype(node.type, hint, None, None)
      if t.kind == "enum" and t.name in self.m.enums and self.m.enums[t.name].cexpr is None:
        self.m.enums[t.name].cexpr = node.name
      self.m.typedefs[node.name] = Typedef(node.name, t, file, line)
      self.m.order.append(("typedef", node.name))
      # an untagged struct named only by this typedef: its C name is the typedef
      if t.kind == "record" and self.m.records[t.name].cexpr is None: self.m.records[t.name].cexpr = node.name
      return
    if isinstance(node, c_ast.Decl):
      if isinstance(node.type, c_ast.FuncDecl):
        self.m.funcs[node.name] = Func(node.name, self.ctype(node.type, node.name), file, line)
        self.m.order.append(("func", node.name))
        return
      if node.name is None:
        self.ctype(node.type, f"anon_{line}")
        return
      self.m.other.append((node.name, "variable declaration (no storage to bind)", file))
      return
    if isinstance(node, c_ast.FuncDef):
      self.m.other.append((node.decl.name, "inline function with a body (C code, not a binding)", file))
      return
    if isinstance(node, (c_ast.StaticAssert, c_ast.Pragma)):
      return  # assertions carry no bindable layout
    raise AutogenError(f"{file}:{line}: top-level {type(node).__name__} not handled")


def parse(text: str, macros: list[Macro], filename: str = "<input>") -> Model:
  """Parse preprocessed text (line markers kept) into a Model; errors give file:line."""
  clean = strip_extensions(text)
  clean = "typedef int __builtin_va_list;\n" + clean
  try:
    ast = c_parser.CParser().parse(clean, filename)
  except ParseError as e:
    raise AutogenError(f"parse error: {e}") from None
  m = Model()
  b = _Builder(m)
  for node in ast.ext: b.top(node)
  for mac in macros: m.macros[mac.name] = mac
  return m
