"""PTXModule: a parsed PTX module (module directives, .global/.const/.shared variables, .func bodies), one PTXKernel per
.entry, and the placement of its global variables in a Memory."""
from __future__ import annotations
import re
import numpy as np
from baregrad.drivers.mock.ptx.errors import PTXError
from baregrad.drivers.mock.ptx.kernel import PTXKernel
from baregrad.drivers.mock.ptx.memory import Memory
from baregrad.drivers.mock.ptx.parser import _Var, _init_bytes, _line_directives, _parse_var, _split_operands
from baregrad.drivers.mock.ptx.parser import _strip_comments

class PTXModule:
  """A parsed PTX module: its kernels (.entry) and module-scope variables."""

  def __init__(self, ptx_text: str) -> None:
    self.text = ptx_text
    self.version = None
    self.target = None
    self.address_size = 64
    self.globals: dict[str, _Var] = {}  # .global / .const
    self.shared: dict[str, _Var] = {}  # module-scope .shared (incl. extern)
    self.kernels: dict[str, PTXKernel] = {}
    self.funcs: set[str] = set()
    self.func_defs: dict[str, tuple] = {}
    self._entries: list[tuple] = []
    src, lined = _line_directives(_strip_comments(ptx_text))
    for stmt, line in lined:
      self._directive(stmt, line)
    self._parse(src)
    for name, params, body, body_off, line in self._entries:
      self.kernels[name] = PTXKernel(self, name, params, body, body_off, line)

  def kernel(self, name: str) -> "PTXKernel":
    try:
      return self.kernels[name]
    except KeyError:
      raise PTXError(f"no kernel named {name!r} in module (have: {', '.join(self.kernels) or 'none'})") from None

  # -- parsing
  def _parse(self, src) -> None:
    lines_at = np.cumsum([0] + [1 if c == "\n" else 0 for c in src])  # char index -> line-1
    self._lines_at = lines_at
    self._src = src
    i, n = 0, len(src)
    while i < n:
      while i < n and src[i].isspace():
        i += 1
      if i >= n:
        break
      # find end of statement: ';' or a '{' opening a function body
      j = i
      depth = 0
      while j < n:
        c = src[j]
        if c == "(":
          depth += 1
        elif c == ")":
          depth -= 1
        elif c == ";" and depth == 0:
          break
        elif c == "{" and depth == 0:
          stmt = src[i:j]
          if re.search(r"\.(entry|func)\b", stmt):
            break
          if stmt.lstrip().startswith(".section"):  # debug sections: skipped whole
            j = self._match_brace(j)
            break
          # initializer braces: skip to matching '}'
          k = self._match_brace(j)
          j = k
        elif c == "}" and depth == 0:
          break
        j += 1
      stmt = src[i:j].strip()
      line = int(lines_at[i]) + 1
      if stmt.startswith(".section"):
        i = j + 1
        continue
      if j < n and src[j] == "{":
        end = self._match_brace(j)
        self._parse_function(stmt, src[j + 1:end], j + 1, line)
        i = end + 1
        continue
      if j < n and src[j] == "}" and not stmt:
        raise PTXError("unbalanced '}'", line, "}")
      i = j + 1
      if stmt:
        self._directive(stmt, line)

  def _match_brace(self, j):
    src, depth = self._src, 0
    for k in range(j, len(src)):
      if src[k] == "{":
        depth += 1
      elif src[k] == "}":
        depth -= 1
        if depth == 0:
          return k
    raise PTXError("unbalanced '{'", int(self._lines_at[j]) + 1, src[j:j + 40].strip())

  def _directive(self, stmt: str, line) -> None:
    text = " ".join(stmt.split())
    toks = stmt.split()
    head = toks[0]
    if head == ".version":
      self.version = toks[1]
    elif head == ".target":
      self.target = stmt.split(None, 1)[1].strip()
    elif head == ".address_size":
      self.address_size = int(toks[1])
      if self.address_size != 64:
        raise PTXError("only .address_size 64 is supported", line, text)
    elif head in (".file", ".loc", ".section", ".pragma"):
      pass
    elif re.search(r"\.(entry|func)\b", stmt):  # prototype without body
      m = re.search(r"\.(?:entry|func)\s+(?:\([^)]*\)\s*)?([\w$]+)", stmt)
      if m:
        self.funcs.add(m.group(1))
    elif any(t in (".global", ".const", ".shared", ".local") for t in toks):
      v = _parse_var(stmt, line, text)
      if v.space in ("global", "const"):
        v.init_data = _init_bytes(v, line, text)
        self.globals[v.name] = v
      elif v.space == "shared":
        self.shared[v.name] = v
      else:
        raise PTXError("module-scope .local variables are not supported", line, text)
    else:
      raise PTXError(f"unsupported module-level directive `{head}`", line, text)

  def _parse_function(self, head: str, body: str, body_off: int, line) -> None:
    text = " ".join(head.split())
    m = re.search(r"\.(entry|func)\s+(?:\(([^)]*)\)\s*)?([\w$]+)\s*(\(([^)]*)\))?", head, re.S)
    if not m:
      raise PTXError("cannot parse function header", line, text)
    kind, name = m.group(1), m.group(3)
    if kind == "func":  # device function: inlined at each call site
      self.funcs.add(name)
      rets = [_parse_var(p, line, text).name for p in _split_operands(m.group(2) or "")]
      fparams = [_parse_var(p, line, text).name for p in _split_operands(m.group(5) or "")]
      self.func_defs[name] = (rets, fparams, body, body_off, line)
      return
    params = []
    for p in _split_operands(m.group(5) or ""):
      pv = _parse_var(p, line, text)
      params.append(pv)
    self._entries.append((name, params, body, body_off, line))

  def load_globals(self, memory: "Memory", base: int | None = None) -> dict:
    """Place this module's .global/.const variables in `memory` (once per memory)."""
    key = id(self)
    if key in memory.module_globals:
      return memory.module_globals[key]
    addrs = {}
    vs = list(self.globals.values())
    if vs:
      off = 0
      layout = []
      for v in vs:
        off = (off + v.align - 1) // v.align * v.align
        layout.append((v, off))
        off += max(v.size, 1)
      va = memory.alloc(off, 256, name="ptx module globals") if base is None else base
      if base is not None:
        memory.map(base, off, name="ptx module globals")
      for v, o in layout:
        addrs[v.name] = va + o
        if v.size:
          memory.write_bytes(va + o, v.init_data.tobytes())
    memory.module_globals[key] = addrs
    return addrs
