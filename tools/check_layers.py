#!/usr/bin/env python3
"""Check baregrad's import rule, as docs/ARCHITECTURE.md states it ("The import rule").

Usage: python3 tools/check_layers.py [REPO]   (default: the repository this file is in)

The ranks are read from the table in docs/ARCHITECTURE.md, so the map and the check cannot drift apart. A module
may import a package of its own rank or a lower one, at top level or lazily inside a function. Also flagged:
NumPy imported in the compute path (every Tensor op runs as a generated kernel), and a device name compared
outside drivers/ and the renderers (devices declare what they support; generic code asks). Prints one line per
finding and exits 1 if there is any.
"""
from __future__ import annotations
import ast, pathlib, re, sys

# where NumPy may be imported inside baregrad/: tensor interop, the mock GPUs, and the layers above the compute path
NUMPY_OK = ("baregrad/tensor", "baregrad/drivers/mock", "baregrad/nn", "baregrad/onnx", "baregrad/datasets",
            "baregrad/data", "baregrad/llm", "baregrad/distributed")  # llm: files, token ids, sampling; distributed: MPI exchanges host arrays
# packages that must not compare device names (the engine and the frontend ask the device instead)
NO_DEVICE_NAMES = ("engine", "tensor", "codegen", "ir", "hal")
DEVICE_NAME = re.compile(r"""(==|!=|\bin\b)\s*[(\[{]?\s*["'](NV|AMD|QCOM|CUDA|CL|METAL|CPU)["']""")
ROW = re.compile(r"^\|\s*(\d+)\s*\|([^|]*)\|")

def ranks(architecture_md: str) -> dict[str, int]:
  """The rank of each top-level part of baregrad/, from the import-rule table's rows `| rank | `pkg`, ... | ... |`."""
  out: dict[str, int] = {}
  section = architecture_md.split("## The import rule", 1)[-1].split("\n## ", 1)[0]
  for line in section.splitlines():
    if m := ROW.match(line):
      for name in re.findall(r"`([a-z_]+)`", m.group(2)): out[name] = int(m.group(1))
  return out

def part_of(rel: pathlib.Path) -> str | None:
  """The top-level part of baregrad/ a file belongs to (`ir`, `drivers`, `helpers`, ...), None outside it."""
  if len(rel.parts) < 2 or rel.parts[0] != "baregrad": return None
  return rel.parts[1][:-3] if rel.parts[1].endswith(".py") else rel.parts[1]

def imported(node: ast.AST, rel: pathlib.Path) -> list[str]:
  """Dotted names an import statement brings in, relative imports resolved against the file's package."""
  if isinstance(node, ast.Import): return [a.name for a in node.names]
  if not isinstance(node, ast.ImportFrom): return []
  if node.level:
    pkg = list(rel.with_suffix("").parts[:-1])
    base = pkg[:len(pkg) - (node.level - 1)]
    mod = ".".join(base + ([node.module] if node.module else []))
    return [mod] if node.module else [f"{mod}.{a.name}" for a in node.names]
  if node.module is None: return []
  # `from baregrad import tensor` names the part in the imported name, not the module
  return [node.module] + ([f"{node.module}.{a.name}" for a in node.names] if node.module == "baregrad" else [])

def check(root: pathlib.Path) -> list[str]:
  """Every finding in the tree under root, one line each (`file:line: what`)."""
  rank = ranks((root / "docs" / "ARCHITECTURE.md").read_text())
  if not rank: return ["docs/ARCHITECTURE.md: no rank table under '## The import rule'"]
  found: list[str] = []
  for path in sorted((root / "baregrad").rglob("*.py")):
    rel = path.relative_to(root)
    me = part_of(rel)
    if me is None or me in ("__init__", "__main__"): continue  # the public API and CLI assemble every layer
    if me not in rank:
      found.append(f"{rel}: part '{me}' has no rank in docs/ARCHITECTURE.md's import-rule table"); continue
    try: tree = ast.parse(path.read_text(), str(rel))
    except SyntaxError as e:
      found.append(f"{rel}: does not parse: {e}"); continue
    for node in ast.walk(tree):
      for name in imported(node, rel):
        bits = name.split(".")
        if bits[0] == "numpy" and not str(rel).startswith(NUMPY_OK):
          found.append(f"{rel}:{node.lineno}: numpy imported in the compute path")
        if bits[0] != "baregrad" or len(bits) < 2: continue
        them = bits[1]
        if them in rank and rank[them] > rank[me]:
          found.append(f"{rel}:{node.lineno}: {me} (rank {rank[me]}) imports {name} (rank {rank[them]})")
    if me in NO_DEVICE_NAMES and not str(rel).startswith("baregrad/codegen/renderer"):
      for i, line in enumerate(path.read_text().splitlines(), 1):
        if DEVICE_NAME.search(line): found.append(f"{rel}:{i}: device name compared outside drivers/: {line.strip()[:90]}")
  return found

def main() -> int:
  root = pathlib.Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[1]
  found = check(root)
  for line in found: print(line)
  print(f"layer check: {len(found)} finding(s)")
  return 1 if found else 0

if __name__ == "__main__":
  sys.exit(main())
