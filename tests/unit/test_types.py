"""Type checks: mypy is clean on the packages pyproject.toml's [tool.mypy] names (ir, hal, hcq, engine, codegen), and
UOp's constructor, which a metaclass implements, has a signature mypy checks calls against. Skipped without mypy (the
`test` extra installs it). The first run analyses everything (7-15 s here); mypy's cache (.mypy_cache) makes reruns
fast (under 1 s)."""
from __future__ import annotations
from tests.paths import REPO
import pathlib
import pytest

api = pytest.importorskip("mypy.api")
ROOT = REPO
CONFIG = str(ROOT / "pyproject.toml")

def _mypy(monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[str, int]:
  monkeypatch.chdir(ROOT)   # the config's `files` are paths from the repository root
  out, err, rc = api.run(["--config-file", CONFIG, *args])
  return out + err, rc

def test_mypy_clean(monkeypatch: pytest.MonkeyPatch) -> None:
  out, rc = _mypy(monkeypatch)
  assert rc == 0, f"mypy reports errors in the typed packages (pyproject.toml [tool.mypy]):\n{out}"
  # the config really names the packages: a `files` entry that matched nothing would pass with nothing checked
  n = int(out.split("no issues found in ")[1].split()[0])
  assert n >= 40, f"mypy checked only {n} files:\n{out}"

_CALLS = """\
from baregrad.ir.ops import UOp, Ops
from baregrad.ir.dtype import dtypes
a = UOp(Ops.CONST, dtypes.int32, (), 1)
b: UOp = UOp(Ops.ADD, dtypes.int32, (a, a)).alu(Ops.MUL, a)
c: bool = b.op is Ops.ADD and Ops.ADD.name == "ADD" and Ops["MUL"] in {Ops.MUL}
UOp(Ops.ADD, dtypes.int32, (a,), None, 5)
UOp("ADD")
UOp(Ops.ADD, src=[a])
"""

def test_uop_constructor_checked(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
  (f := tmp_path / "calls.py").write_text(_CALLS)
  # (a file named here replaces the config's `files`; the shared cache is safe under pytest -n: mypy replaces its
  # cache files atomically)
  out, rc = _mypy(monkeypatch, str(f))
  lines = sorted({int(ln.split(":")[1]) for ln in out.splitlines() if ": error:" in ln})
  # the well-typed calls (lines 3-5) pass; too many arguments, a str for the op, a list for src are errors
  assert rc == 1 and lines == [6, 7, 8], out
