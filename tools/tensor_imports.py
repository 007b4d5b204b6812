"""Import check for the tensor package (baregrad/tensor): every module imports on its own in a fresh interpreter, and
the module-level imports among the package's modules form no cycle. Imports inside functions (the lazy ones a mixin
in tensor/ops/ uses to reach Tensor) and under `if TYPE_CHECKING:` do not count: they run after loading.

usage: python3 tools/tensor_imports.py   (prints each cycle, exit status 1 when there is one or an import fails)"""
from __future__ import annotations
import ast, pathlib, subprocess, sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PKG = ROOT / "baregrad" / "tensor"

def modules() -> dict[str, pathlib.Path]:
  """Dotted name -> file, for every module of the tensor package (packages by their __init__)."""
  out = {}
  for p in sorted(PKG.rglob("*.py")):
    parts = p.relative_to(ROOT).with_suffix("").parts
    out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
  return out

def _top_imports(body: list[ast.stmt]) -> list[ast.stmt]:
  """The import statements run when the module loads: the module body, and inside if/try blocks other than
  `if TYPE_CHECKING:`; not inside functions or classes."""
  out: list[ast.stmt] = []
  for s in body:
    if isinstance(s, (ast.Import, ast.ImportFrom)): out.append(s)
    elif isinstance(s, ast.If):
      if not (isinstance(s.test, ast.Name) and s.test.id == "TYPE_CHECKING"): out += _top_imports(s.body)
      out += _top_imports(s.orelse)
    elif isinstance(s, ast.Try): out += _top_imports(s.body + s.orelse + s.finalbody + [x for h in s.handlers for x in h.body])
  return out

def graph(mods: dict[str, pathlib.Path]) -> dict[str, set[str]]:
  """Module -> the package's modules it imports at load time (`from pkg import sub` names the submodule)."""
  g: dict[str, set[str]] = {m: set() for m in mods}
  for m, p in mods.items():
    is_pkg = p.name == "__init__.py"
    for s in _top_imports(ast.parse(p.read_text()).body):
      if isinstance(s, ast.Import): names = [a.name for a in s.names]
      else:
        base = s.module or ""
        if s.level:   # relative import
          anchor = m.split(".") if is_pkg else m.split(".")[:-1]
          base = ".".join(anchor[:len(anchor) - s.level + 1] + ([s.module] if s.module else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in s.names]
      g[m] |= {n for n in names if n in mods and n != m}
  return g

def cycles(g: dict[str, set[str]]) -> list[list[str]]:
  """The strongly connected components of more than one module (Tarjan's algorithm), each sorted."""
  index: dict[str, int] = {}
  low: dict[str, int] = {}
  stack: list[str] = []
  on: set[str] = set()
  out: list[list[str]] = []
  def visit(v: str) -> None:
    index[v] = low[v] = len(index)
    stack.append(v); on.add(v)
    for w in sorted(g[v]):
      if w not in index: visit(w); low[v] = min(low[v], low[w])
      elif w in on: low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      comp = []
      while True:
        w = stack.pop(); on.discard(w); comp.append(w)
        if w == v: break
      if len(comp) > 1: out.append(sorted(comp))
  for v in sorted(g):
    if v not in index: visit(v)
  return out

def import_failures(mods: dict[str, pathlib.Path], timeout_s: float = 120.0) -> list[str]:
  """Modules that fail to import, with the error's last line: all of them, in sorted order, in one fresh interpreter.
  (`import baregrad.tensor.x` runs baregrad/__init__.py first, which loads the tensor package in its own order, so an
  interpreter per module would repeat that same order 70 times; what differs per module is its own body, run here.)"""
  prog = ("import importlib, sys\nfor m in sys.argv[1:]:\n  try: importlib.import_module(m)\n"
          "  except BaseException as e: print(f'{m}: {type(e).__name__}: {e}'.splitlines()[0])\n")
  r = subprocess.run([sys.executable, "-c", prog, *sorted(mods)], cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
  bad = r.stdout.splitlines()
  if r.returncode: bad.append(f"interpreter exit {r.returncode}: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
  return bad

def main() -> int:
  mods = modules()
  cyc, bad = cycles(graph(mods)), import_failures(mods)
  for c in cyc: print("import cycle:", " <-> ".join(c))
  for b in bad: print("import fails alone:", b)
  print(f"{len(mods)} modules, {len(cyc)} cycle(s), {len(bad)} failing import(s)")
  return 1 if cyc or bad else 0

if __name__ == "__main__": sys.exit(main())
