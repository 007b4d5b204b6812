"""Make `tests.helpers` importable however pytest is started (`pytest`, `python -m pytest`, from any directory)."""
import pytest
import os, sys
_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _root not in sys.path: sys.path.insert(0, _root)


@pytest.fixture
def generic_conv(monkeypatch):
  """Convolutions as the window reduction every device runs (the CPU's implicit GEMM, tensor/ops/conv.py, off)."""
  from baregrad import knobs
  monkeypatch.setenv("CPU_CONV", "generic"); knobs.reset()
  yield
  monkeypatch.delenv("CPU_CONV"); knobs.reset()
