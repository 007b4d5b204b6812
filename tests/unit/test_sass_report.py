"""tools/sass_report.py (issue 32): one key=value line per kernel from PTX rendered and assembled without a GPU."""
import pytest
from baregrad.drivers.nv_compile import find_ptxas
from tools.sass_report import innermost_loop, main, sass_ops, sass_main_loop

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

SASS = """
        /*0100*/                   LDGSTS.E.BYPASS.128 [R1], [R2.64] ;                      /* 0x0 */
        /*0110*/                   LDSM.16.M88.4 R4, [R3] ;                                  /* 0x0 */
        /*0120*/                   HMMA.16816.F32 R8, R4, R6, R8 ;                           /* 0x0 */
        /*0130*/                   LDSM.16.MT88.4 R4, [R3+0x80] ;                            /* 0x0 */
        /*0140*/                   HMMA.16816.F32 R8, R4, R6, R8 ;                           /* 0x0 */
        /*0150*/              @!P0 BRA 0x110 ;                                               /* 0x0 */
        /*0160*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;                             /* 0x0 */
        /*0170*/              @P1 BRA 0x100 ;                                                /* 0x0 */
        /*0180*/                   EXIT ;                                                    /* 0x0 */
        /*0190*/                   BRA 0x190;                                                /* 0x0 */
"""

def test_sass_main_loop_is_the_innermost_loop_with_mma():
  ops = sass_ops(SASS)
  assert [op for _, op, _ in ops][:3] == ["LDGSTS", "LDSM", "HMMA"] and ops[-1] == (0x190, "BRA", "0x190")
  assert sass_main_loop(ops) == {"LDSM": 2, "HMMA": 2, "BRA": 1}   # not the outer loop from 0x100; not the trap at 0x190
  assert sass_main_loop([op for op in ops if op[1] != "HMMA"]) == {}
