"""The import rule of docs/ARCHITECTURE.md holds over the tree (tools/check_layers.py), and the checker catches a break."""
from tests.paths import REPO
import sys
import pytest

ROOT = REPO
sys.path.insert(0, str(ROOT / "tools"))
import check_layers  # noqa: E402

def test_tree_keeps_the_import_rule():
  assert check_layers.check(ROOT) == []

def test_ranks_come_from_the_architecture_table():
  rank = check_layers.ranks((ROOT / "docs" / "ARCHITECTURE.md").read_text())
  assert rank["ctypes_autogen"] == 0 and rank["ir"] == 1 and rank["drivers"] < rank["engine"] < rank["tensor"]
  # every part of the package has a rank (a new top-level module must be placed in the table)
  parts = {p.stem for p in (ROOT / "baregrad").iterdir() if (p.suffix == ".py" or p.is_dir()) and not p.name.startswith("_")}
  assert parts - {"__pycache__"} <= set(rank)

TABLE = "## The import rule\n\n| rank | package | may import |\n|---|---|---|\n| 1 | `ir` | x |\n| 2 | `codegen` | `ir` |\n" \
        "| 7 | `tensor` | `ir` |\n\n## Next\n"

@pytest.mark.parametrize("src,what", [
  ("from baregrad.tensor import Tensor\n", "imports baregrad.tensor"),
  ("def f():\n  from ..tensor import t\n", "imports baregrad.tensor"),
  ("import numpy as np\n", "numpy imported in the compute path"),
  ("def f(d):\n  return d == 'NV'\n", "device name compared"),
])
def test_checker_flags_a_break(tmp_path, src, what):
  (tmp_path / "docs").mkdir()
  (tmp_path / "docs" / "ARCHITECTURE.md").write_text(TABLE)
  (tmp_path / "baregrad" / "codegen").mkdir(parents=True)
  (tmp_path / "baregrad" / "codegen" / "x.py").write_text(src)
  found = check_layers.check(tmp_path)
  assert len(found) == 1 and what in found[0] and found[0].startswith("baregrad/codegen/x.py")

def test_checker_flags_an_unranked_part(tmp_path):
  (tmp_path / "docs").mkdir()
  (tmp_path / "docs" / "ARCHITECTURE.md").write_text(TABLE)
  (tmp_path / "baregrad" / "viz").mkdir(parents=True)
  (tmp_path / "baregrad" / "viz" / "x.py").write_text("")
  assert "has no rank" in check_layers.check(tmp_path)[0]
