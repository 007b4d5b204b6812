"""ir3 disassembly through tinymesa (skips without the optional extra `qcom`)."""
import pytest

pytest.importorskip("tinymesa")
from baregrad.drivers.qcom.ir3_disasm import disassemble  # noqa: E402


def test_nop_end():
  # cat0 nop is all zeros; 0x03000000_00000000 is cat0 end (checked against this disassembler, tinymesa 25.2.7.2).
  assert disassemble([0, 0, 0, 0x03000000]).split() == ["nop", "end"]


def test_odd_length_refused():
  with pytest.raises(ValueError, match="64-bit"): disassemble([0, 0, 0])
