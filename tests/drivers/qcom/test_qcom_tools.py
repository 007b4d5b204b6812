"""tools/qcom_decode.py prints streams with named registers and fields, reports malformed ones; tools/qcom_doctor.py --mock."""
import importlib.util
import os

from tests.paths import REPO


def _tool():
  spec = importlib.util.spec_from_file_location("qcom_decode", os.path.join(str(REPO), "tools", "qcom_decode.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def test_pm4_words(tmp_path, capsys):
  from baregrad.drivers.qcom.pm4 import CommandStream
  words = CommandStream().reg("CP_ALWAYS_ON_COUNTER", 5).exec_cs(3, 1, 1).words
  (tmp_path / "s.txt").write_text(" ".join(f"{w:08x}" for w in words))
  assert _tool().main(["pm4", str(tmp_path / "s.txt")]) == 0
  out = capsys.readouterr().out
  assert "CP_ALWAYS_ON_COUNTER" in out and "CP_EXEC_CS (4 dwords)" in out and "NGROUPS_X=0x3" in out


def test_malformed_reported(tmp_path, capsys):
  (tmp_path / "s.bin").write_bytes((0x70088001).to_bytes(4, "little") + (1).to_bytes(4, "little"))
  assert _tool().main(["pm4", str(tmp_path / "s.bin")]) == 1
  assert "count parity bit 15" in capsys.readouterr().err


def test_demo_runs_on_mock(capsys):
  assert _tool().main(["demo"]) == 0
  assert "mock CP finished: True; signal word = 1" in capsys.readouterr().out


def test_doctor_mock_all_stages_pass(capsys):
  spec = importlib.util.spec_from_file_location("qcom_doctor", os.path.join(str(REPO), "tools", "qcom_doctor.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  assert mod.main(["--mock"]) == 0
  out = capsys.readouterr().out
  assert "0 stage(s) failed" in out and "a630" in out and "context 3 runs after it" in out
