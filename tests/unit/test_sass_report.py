"""tools/sass_report.py (issue 32): one key=value line per kernel from PTX rendered and assembled without a GPU."""
import pytest
from baregrad.drivers.nv_compile import find_ptxas
from tools.sass_report import innermost_loop, main

def test_innermost_loop_counts_the_inner_body_only():
  src = "$L1_head:\nadd.s32 %r1, %r1, 1;\n$L2_head:\nmma.sync.aligned.x {};\n@%p1 bra $L2_head;\n@%p2 bra $L1_head;\n"
  assert innermost_loop(src) == {"mma.sync.aligned.x": 1}
  with pytest.raises(ValueError, match="no loop"): innermost_loop("ret;")

@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not found")
def test_report_line_for_a_small_half_matmul(capsys):
  assert main(["--arch", "sm_80", "--matmul", "256x256x256", "--dtype", "half"]) == 0
  f = dict(kv.split("=", 1) for kv in capsys.readouterr().out.split())
  assert f["arch"] == "sm_80" and f["dtype"] == "half" and f["spills"] == "0" and 0 < int(f["regs"]) <= 255
  assert int(f["loop_mma"]) > 0 and f["loop_cvt_float"] == "0"

def test_bad_shape_is_refused_by_name(capsys):
  with pytest.raises(SystemExit): main(["--matmul", "4096x4096"])
  assert "MxNxK" in capsys.readouterr().err
