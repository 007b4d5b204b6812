"""Parsing PTX text: comments and line directives, operands and literals, state-space variable declarations, and the
kernel body (`BodyParser`, mixed into PTXKernel: statements into instructions, .reg/.shared/.local declarations,
device-function calls inlined with renamed registers and labels, shared/local layout)."""
from __future__ import annotations
import re
import struct
import numpy as np
from baregrad.drivers.mock.ptx.dtypes import _DT, _SPACES, _SPECIAL, _TYPES, _UINT, _is_float
from baregrad.drivers.mock.ptx.errors import PTXError

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


_LABEL = re.compile(r"^\s*([A-Za-z_$%][\w$]*)\s*:(?!:)")


_REG_DECL = re.compile(r"^%?[\w$]+<(\d+)>$")


_INT = re.compile(r"^[-+]?(0[xX][0-9a-fA-F]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)[uU]?$")


_LINE_DIRECTIVE = re.compile(r"^[ \t]*\.(?:loc|file|version|target|address_size)\b[^\n;]*;?", re.M)


class _Renamer:
  """Renames a device function's registers, labels and names when it is inlined."""

  _IDENT = re.compile(r"(?<![\w$%.])([A-Za-z_$][\w$]*)")
  _REG = re.compile(r"%([A-Za-z_$][\w$]*)")

  def __init__(self, reg_prefix=None, names=None, ret_label=None) -> None:
    self.reg_prefix, self.names, self.ret_label = reg_prefix, names or {}, ret_label

  def label(self, name):
    return self.names.get(name, name)

  def __call__(self, st: str):
    if self.reg_prefix is None:
      return st
    pre = self.reg_prefix

    def reg(m):
      base = m.group(1)
      return m.group(0) if base in _SPECIAL else pre + base
    st = self._REG.sub(reg, st)
    names = self.names
    return self._IDENT.sub(lambda m: names.get(m.group(1), m.group(1)), st)


def _strip_comments(text):
  # keep newlines so line numbers stay right
  return _COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def _line_directives(src):
  """Line-terminated directives (.version/.target/.address_size/.loc/.file): collect and blank."""
  found = []

  def sub(m):
    found.append((m.group(0).strip().rstrip(";"), src.count("\n", 0, m.start()) + 1))
    return " " * len(m.group(0))
  return _LINE_DIRECTIVE.sub(sub, src), found


def _split_operands(s):
  out, depth, cur = [], 0, []
  for ch in s:
    if ch in "[{(":
      depth += 1
    elif ch in "]})":
      depth -= 1
    if ch == "," and depth == 0:
      out.append("".join(cur).strip())
      cur = []
    else:
      cur.append(ch)
  last = "".join(cur).strip()
  if last:
    out.append(last)
  return out


def _parse_int(s):
  s = s.strip()
  neg = s.startswith("-")
  if s[0] in "+-":
    s = s[1:]
  s = s.rstrip("uU")
  if s[:2] in ("0x", "0X"):
    v = int(s[2:], 16)
  elif s[:2] in ("0b", "0B"):
    v = int(s[2:], 2)
  elif len(s) > 1 and s[0] == "0":
    v = int(s, 8)
  else:
    v = int(s)
  return -v if neg else v


def _literal(s):
  """('i', int) | ('f32', bits) | ('f64', bits) | ('f', float) | None."""
  s = s.strip()
  m = re.fullmatch(r"([-+]?)0([fFdD])([0-9a-fA-F]+)", s)
  if m:
    sign, kind, hexd = m.groups()
    bits = int(hexd, 16)
    if kind in "fF":
      if len(hexd) != 8:
        return None
      return ("f32", bits ^ (0x80000000 if sign == "-" else 0))
    if len(hexd) != 16:
      return None
    return ("f64", bits ^ (0x8000000000000000 if sign == "-" else 0))
  if _INT.match(s):
    return ("i", _parse_int(s))
  if re.fullmatch(r"[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?", s):
    return ("f", float(s))
  return None


def _lit_value(lit, dt: np.dtype):
  kind, v = lit
  if dt == np.bool_:
    return np.bool_(bool(v))
  if _is_float(dt):
    if kind == "i" or kind == "f":
      return dt.type(v)
    if kind == "f32":
      return np.array(v, np.uint32).view(np.float32)[()].astype(dt) if dt.itemsize != 4 \
          else np.array(v, np.uint32).view(np.float32)[()]
    return np.array(v, np.uint64).view(np.float64)[()].astype(dt)
  if kind == "f":
    raise PTXError(f"floating-point literal {v} used with integer type {dt}")
  w = dt.itemsize * 8
  if kind == "f32" and w == 64:
    v = struct.unpack("<Q", struct.pack("<d", struct.unpack("<f", struct.pack("<I", v))[0]))[0]
  return np.array(v & ((1 << w) - 1), _UINT[dt.itemsize]).view(dt)[()]


class _Var:
  """A variable declared with a state space (.global/.const/.shared/.local) or a param."""

  def __init__(self, space: str, tname, name, size, align, init=None, extern=False) -> None:
    self.space, self.tname, self.name, self.size, self.align = space, tname, name, size, align
    self.init, self.extern, self.offset = init, extern, 0


def _parse_var(decl: str, line, text):
  """`.shared .align 4 .b8 name[1024] = {...}` (without the trailing ';')."""
  init = None
  if "=" in decl:
    decl, init_s = decl.split("=", 1)
    init = init_s.strip()
  toks = decl.split()
  space, align, tname, extern, vec = None, None, None, False, 1
  name = None
  ptr = False
  i = 0
  while i < len(toks):
    t = toks[i]
    if ptr and (t == ".align" or t[1:] in _SPACES):  # `.ptr .global .align 1`: the pointee's
      i += 2 if t == ".align" else 1
      continue
    if t == ".ptr":
      ptr = True
    elif t in (".extern",):
      extern = True
    elif t in (".visible", ".weak", ".common"):
      pass
    elif t == ".align":
      align = int(toks[i + 1])
      i += 1
    elif t.startswith(".v") and t[2:].isdigit():
      vec = int(t[2:])
    elif t.startswith(".") and t[1:] in _SPACES | {"tex", "surf", "sampler"}:
      space = t[1:]
    elif t.startswith(".") and t[1:] in _TYPES:
      tname = t[1:]
    elif t.startswith(".ptr") or t.startswith("."):
      pass
    else:
      name = "".join(toks[i:])
      break
    i += 1
  if name is None or tname is None:
    raise PTXError("cannot parse declaration", line, text)
  dims = [d for d in re.findall(r"\[(\d*)\]", name)]
  base = re.sub(r"\[.*$", "", name)
  elt = _DT[tname].itemsize * vec
  count = 1
  unsized = False
  for d in dims:
    if d == "":
      unsized = True
    else:
      count *= int(d)
  if unsized and init is not None:
    count = max(1, len(_split_operands(init.strip().strip("{}").replace("{", "").replace("}", ""))))
    unsized = False
  v = _Var(space, tname, base, 0 if unsized else elt * count, align or elt, init, extern or unsized)
  return v


def _init_bytes(var, line, text):
  data = np.zeros(var.size, np.uint8)
  if var.init is None:
    return data
  items = [x for x in _split_operands(var.init.replace("{", "").replace("}", "")) if x]
  dt = _DT[var.tname]
  vals = []
  for it in items:
    lit = _literal(it)
    if lit is None:
      raise PTXError(f"unsupported initializer `{it}` (only literals)", line, text)
    vals.append(_lit_value(lit, dt))
  b = np.array(vals, dt).tobytes()
  data[:len(b)] = np.frombuffer(b, np.uint8)[:var.size]
  return data


class _Ins:
  __slots__ = ("line", "text", "pred", "pneg", "op", "mods", "ops", "fn", "kind", "target", "barid", "barcount")

  def __repr__(self):
    return f"<{self.line}: {self.text}>"


class BodyParser:
  """Kernel-body parsing of PTXKernel: statements -> `_Ins` records, declarations, inlined calls, layout."""

  # -- parsing the body
  def _parse_body(self, body: str, body_off: int, rename=None, depth: int = 0) -> None:
    mod = self.module
    lines_at = mod._lines_at
    pos = 0
    if rename is None:
      rename = _Renamer()
    for chunk in body.split(";"):
      start = pos
      pos += len(chunk) + 1
      s = chunk
      # scope braces and labels in front of the statement
      while True:
        st = s.lstrip()
        if st.startswith("{") or st.startswith("}"):
          s = st[1:]
          continue
        m = _LABEL.match(s)
        if m:
          self.labels[rename.label(m.group(1))] = len(self.code)
          s = s[m.end():]
          continue
        break
      st = s.strip()
      while st.endswith("}") and st.count("}") > st.count("{"):  # a closing scope brace
        st = st[:-1].rstrip()
      if not st:
        continue
      lead = len(chunk) - len(chunk.lstrip()) if chunk.strip() else 0
      idx = body_off + start + (chunk.find(st[:8]) if st[:8] in chunk else lead)
      line = int(lines_at[min(idx, len(lines_at) - 1)]) + 1
      st = rename(st)
      text = " ".join(st.split())
      if st.startswith("."):
        self._body_directive(st, line, text)
        continue
      ins = self._parse_ins(st, line, text)
      if ins.op == "call":
        self._inline_call(ins, depth)
        continue
      if ins.op in ("ret", "exit") and rename.ret_label is not None:
        if ins.op == "exit":
          raise PTXError("`exit` inside a device function is not supported", line, text)
        ins.op, ins.mods, ins.ops = "bra", ["uni"], [rename.ret_label]
      self.code.append(ins)

  def _inline_call(self, ins: _Ins, depth: int) -> None:
    """`call (ret), f, (args)`: inline f's body here, its registers, labels and local
    names prefixed, its formal params bound to the call site's .param variables."""
    ops = ins.ops
    if ops and ops[0].startswith("("):
      rets, ops = [x.strip() for x in ops[0][1:-1].split(",") if x.strip()], ops[1:]
    else:
      rets = []
    if not ops:
      raise PTXError("call without a function", ins.line, ins.text)
    fname = ops[0].strip()
    args = [x.strip() for x in ops[1][1:-1].split(",") if x.strip()] if len(ops) > 1 and ops[1].startswith("(") else []
    if len(ops) > 2 or fname.startswith("%"):
      raise PTXError("indirect calls (through a register / prototype) are not supported", ins.line, ins.text)
    fd = self.module.func_defs.get(fname)
    if fd is None:
      raise PTXError(f"call to external function {fname} (no body in this module) is not supported",
                     ins.line, ins.text)
    if depth >= 16:
      raise PTXError(f"call depth > 16 (recursion through {fname}?) is not supported", ins.line, ins.text)
    frets, fparams, body, body_off, _ = fd
    if len(frets) != len(rets) or len(fparams) != len(args):
      raise PTXError(f"call of {fname}: {len(rets)} returns / {len(args)} arguments, the function "
                     f"takes {len(frets)} / {len(fparams)}", ins.line, ins.text)
    self._ncalls += 1
    k = self._ncalls
    done = f"$__ret{k}_{fname}"
    if ins.pred is not None:  # @p call f  ->  @!p bra done
      skip = _Ins()
      skip.line, skip.text = ins.line, ins.text
      skip.pred, skip.pneg = ins.pred, not ins.pneg
      skip.op, skip.mods, skip.ops = "bra", [], [done]
      skip.fn, skip.kind, skip.target, skip.barid, skip.barcount = None, "op", None, 0, 0
      self.code.append(skip)
    names = dict(zip(frets, rets))
    names.update(zip(fparams, args))
    for lab in re.findall(r"([A-Za-z_$][\w$]*)\s*:(?!:)", body):
      names.setdefault(lab, f"$__f{k}_{lab.lstrip('$')}")
    for decl in re.findall(r"(?:^|[;{}])\s*\.(?:param|local|shared)\b[^;]*?([A-Za-z_$][\w$]*)\s*"
                           r"(?:\[[^\]]*\]\s*)*(?:;|=)", body):
      names.setdefault(decl, f"__f{k}_{decl}")
    self._parse_body(body, body_off, _Renamer(f"%__f{k}_", names, done), depth + 1)
    self.labels[done] = len(self.code)

  def _body_directive(self, st: str, line, text) -> None:
    toks = st.split()
    head = toks[0]
    if head == ".reg":
      tname = None
      vec = None
      rest = []
      for i, t in enumerate(toks[1:], 1):
        if t.startswith(".v") and t[2:].isdigit():
          vec = t
        elif t.startswith(".") and t[1:] in _TYPES:
          tname = t[1:]
        elif t == ".align" or (t.isdigit() and toks[i - 1] == ".align"):
          pass
        else:
          rest = toks[i:]
          break
      if tname is None:
        raise PTXError("cannot parse .reg declaration", line, text)
      if vec:
        raise PTXError("vector registers (.reg .v2/.v4) are not supported", line, text)
      dt = _DT[tname]
      for name in _split_operands(" ".join(rest)):
        m = _REG_DECL.match(name)
        if m:
          base = name[:name.index("<")]
          for k in range(int(m.group(1))):
            self.reg_types[f"{base}{k}"] = dt
            self.reg_tnames[f"{base}{k}"] = tname
        else:
          self.reg_types[name] = dt
          self.reg_tnames[name] = tname
    elif head in (".shared", ".local") or (head == ".align" and len(toks) > 2):
      v = _parse_var(st, line, text)
      if v.space == "shared":
        self.shared_vars[v.name] = v
      elif v.space == "local":
        self.local_vars[v.name] = v
      else:
        raise PTXError("unsupported declaration in kernel body", line, text)
    elif head in (".pragma", ".loc", ".file", ".maxntid", ".reqntid", ".minnctapersm",
                  ".maxnreg", ".maxnctapersm", ".noreturn", ".explicitcluster", ".reqnctapercluster",
                  ".maxclusterrank"):
      pass
    elif head == ".param":  # call-site parameter: per-thread storage (local memory)
      v = _parse_var(st, line, text)
      old = self.local_vars.get(v.name)
      if old is None or old.size < v.size or old.align < v.align:
        v.space = "local"
        self.local_vars[v.name] = v
      self.call_params.add(v.name)
    elif head in (".global", ".const"):
      v = _parse_var(st, line, text)
      v.init_data = _init_bytes(v, line, text)
      self.module.globals[v.name] = v
    else:
      raise PTXError(f"unsupported directive `{head}` in kernel body", line, text)

  def _parse_ins(self, st: str, line, text):
    ins = _Ins()
    ins.line, ins.text = line, text
    ins.pred, ins.pneg = None, False
    s = st.strip()
    if s.startswith("@"):
      m = re.match(r"@(!?)\s*(%?[\w$]+)\s+", s)
      if not m:
        raise PTXError("bad predicate guard", line, text)
      ins.pneg = m.group(1) == "!"
      ins.pred = m.group(2)
      s = s[m.end():]
    parts = s.split(None, 1)
    opfull = parts[0]
    pieces = opfull.split(".")
    ins.op = pieces[0]
    ins.mods = pieces[1:]
    ins.ops = _split_operands(parts[1]) if len(parts) > 1 else []
    ins.fn, ins.kind, ins.target, ins.barid, ins.barcount = None, "op", None, 0, 0
    return ins

  def _layout(self) -> None:
    off = 0
    self.shared_offsets = {}
    allshared = list(self.module.shared.values()) + list(self.shared_vars.values())
    for v in allshared:
      if v.extern:
        continue
      off = (off + v.align - 1) // v.align * v.align
      self.shared_offsets[v.name] = off
      off += v.size
    self.static_shared = off
    dyn = (off + 15) // 16 * 16
    for v in allshared:
      if v.extern:
        self.shared_offsets[v.name] = (dyn + v.align - 1) // v.align * v.align
    off = 0
    self.local_offsets = {}
    for v in self.local_vars.values():
      off = (off + v.align - 1) // v.align * v.align
      self.local_offsets[v.name] = off
      off += v.size
    self.local_size = off
