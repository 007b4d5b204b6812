"""NIR renderer + ir3 compiler (tinymesa): what a kernel compiles to and the dispatch state that comes with it."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

pytest.importorskip("tinymesa")
from baregrad.ir.dtype import dtypes  # noqa: E402
from baregrad.ir.ops import Ops  # noqa: E402
from baregrad.ir.view import ShapeTracker  # noqa: E402
from baregrad.codegen.astbuild import load, store, reduce, sink  # noqa: E402
from baregrad.codegen.kernel import Opt, OptOps  # noqa: E402
from baregrad.codegen.program import get_program  # noqa: E402
from baregrad.codegen.renderer import mesa as M  # noqa: E402
from baregrad.codegen.renderer.nir import NIRRenderer, NirBuild  # noqa: E402
from baregrad.drivers.qcom.ir3_compile import IR3Compiler, Ir3Program, compile_nir, REGID_NONE  # noqa: E402
from baregrad.drivers.qcom.ir3_disasm import disassemble  # noqa: E402
from baregrad.hal.errors import CompileError  # noqa: E402

f32 = dtypes.float32


def build(ast, opts=None, gpu_id=630) -> tuple[object, Ir3Program, str]:
  p = get_program(ast, NIRRenderer(gpu_id), opts=opts)
  prg = Ir3Program.unpack(IR3Compiler(gpu_id).compile(p.src))
  return p, prg, disassemble(prg.words(), gpu_id)


def test_elementwise_program_and_state():
  n = 100
  p, prg, text = build(sink(store(0, (n,), load(1, f32, (n,)) * load(2, f32, (n,)) + load(1, f32, (n,)))))
  assert p.src.startswith("nir-ir3 630 6 0:8,8:8,16:8\n")          # 3 buffer addresses = 6 dwords of parameters
  assert prg.param_vec4 == 2 and prg.imm_base_vec4 >= prg.param_vec4   # ir3's immediates never overlap the parameters
  assert prg.constlen >= prg.param_vec4
  assert prg.local_size == tuple(p.local_size)
  assert prg.wgid_regid != REGID_NONE and prg.lid_regid != REGID_NONE
  assert prg.max_reg >= 0 and prg.instrlen * 128 >= len(prg.code) // 2 and len(prg.code) % 8 == 0
  ops = re.findall(r"\b(ldg|stg|mul\.f|add\.f|mad\.f32)\b", text)
  assert ops.count("ldg") == 2 and ops.count("stg") == 1
  # exact NIR: the multiply and the add stay two instructions (no contraction), as on the CPU
  assert "mul.f" in ops and "add.f" in ops and "mad.f32" not in ops
  assert re.search(r"\bc0\.[xyzw]\b", text) and re.search(r"\bc1\.[xy]\b", text)   # the buffer addresses are read from c0/c1


def test_reduction_loop_compiles_with_a_branch():
  M_, K, N = 4, 33, 5
  sa = ShapeTracker.from_shape((M_, K)).reshape((M_, 1, K)).expand((M_, N, K))
  sb = ShapeTracker.from_shape((K, N)).permute((1, 0)).reshape((1, N, K)).expand((M_, N, K))
  ast = sink(store(0, (M_, N, 1), reduce(load(1, f32, sa) * load(2, f32, sb), Ops.ADD, (2,))))
  _, prg, text = build(ast, opts=[])
  assert re.search(r"\b(br|jump|brao|braa)\b", text), text   # the K loop is a real loop
  assert "getone" not in text and prg.code


def test_shared_memory_and_barrier():
  # 128 threads: two waves of 64, so the barrier stays (ir3 drops it for a workgroup that is a single wave)
  n = 1024
  ast = sink(store(0, (1,), reduce(load(1, f32, (n,)), Ops.ADD, (0,)), ))
  p, prg, text = build(ast, opts=[Opt(OptOps.GROUP, 0, 128)])
  if not any(u.op is Ops.DEFINE_LOCAL for u in p.uops): pytest.skip("GROUP did not stage through shared memory here")
  assert prg.shared_size > 0 and prg.has_barrier and "bar" in text
  assert re.search(r"\b(stl|stlw|ldl|ldlw)\b", text)


@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.uint8, dtypes.float16, dtypes.int64, dtypes.bool], ids=lambda d: d.name)
def test_dtypes_compile(dt):
  n = 37
  x, y = load(1, dt, (n,)), load(2, dt, (n,))
  e = (x < y).where(x, y) if dt != dtypes.bool else (x ^ y)
  _, prg, text = build(sink(store(0, (n,), e), store(3, (n,), x.cast(f32))))
  assert prg.code and "stg" in text


def test_integer_division_by_zero_guard_is_in_the_code():
  n = 10
  _, prg, text = build(sink(store(0, (n,), load(1, dtypes.int32, (n,)) // load(2, dtypes.int32, (n,)))))
  assert text.count("sel") >= 2   # divisor replaced where 0 or -1, result selected afterwards


def test_bad_source_refused():
  with pytest.raises(CompileError, match="not NIR renderer output"): compile_nir("ptx 1 2 -\nAAAA\n")


def test_mesa_abort_becomes_compile_error():
  # ir3 (25.2) has no load_kernel_input for compute shaders and aborts in ir3_context_error; the fork keeps us alive
  nb = NirBuild(630, "bad")
  v = nb.intrinsic("load_kernel_input", [nb.const(32, 0)], 1, 32, base=0, range=4)
  nb.intrinsic("store_global", [v, nb.const(64, 0x1000)], 1, write_mask=1, access=0, align_mul=4, align_offset=0)
  import base64
  src = "nir-ir3 630 0 -\n" + base64.b64encode(nb.serialize()).decode() + "\n"
  with pytest.raises(CompileError, match="load_kernel_input"): compile_nir(src)


def test_compile_child_stderr_larger_than_a_pipe(monkeypatch):
  # the child writes 1 MiB to stderr before its program: a parent reading stdout to the end first waits forever
  import os
  import baregrad.drivers.qcom.ir3_compile as ic
  def noisy(*args):
    os.write(2, b"x" * (1 << 20))
    return b"program"
  monkeypatch.setattr(ic, "_compile_here", noisy)
  monkeypatch.setattr(ic, "COMPILE_TIMEOUT_S", 20.0)
  assert ic.compile_nir("nir-ir3 630 0 -\nAAAA\n") == b"program"


def test_compile_child_that_hangs_times_out(monkeypatch):
  import time
  import baregrad.drivers.qcom.ir3_compile as ic
  monkeypatch.setattr(ic, "_compile_here", lambda *a: time.sleep(60) or b"late")
  monkeypatch.setattr(ic, "COMPILE_TIMEOUT_S", 0.5)
  t = time.monotonic()
  with pytest.raises(CompileError, match="did not finish its output within 0.5 s"): ic.compile_nir("nir-ir3 630 0 -\nAAAA\n")
  assert time.monotonic() - t < 10


def test_a660_target():
  _, prg, _ = build(sink(store(0, (8,), load(1, f32, (8,)) + 1.0)), gpu_id=660)
  assert prg.gpu_id == 660 and prg.code


@pytest.mark.skipif(shutil.which("gdb") is None, reason="needs gdb to read the library's DWARF")
def test_layout_matches_dwarf():
  import tinymesa
  checks = {
    "&((nir_alu_instr*)0)->def": M.ALU_DEF, "&((nir_alu_instr*)0)->src": M.ALU_SRC, "&((nir_alu_src*)0)->swizzle": M.ALU_SRC_SWIZZLE,
    "&((nir_intrinsic_instr*)0)->def": M.INTR_DEF, "&((nir_intrinsic_instr*)0)->num_components": M.INTR_NUM_COMPONENTS,
    "&((nir_intrinsic_instr*)0)->const_index": M.INTR_CONST_INDEX, "&((nir_intrinsic_instr*)0)->src": M.INTR_SRC,
    "sizeof(nir_src)": M.NIR_SRC_SIZE, "&((nir_src*)0)->ssa": M.NIR_SRC_SSA, "&((nir_load_const_instr*)0)->def": M.LOAD_CONST_DEF,
    "&((nir_load_const_instr*)0)->value": M.LOAD_CONST_VALUE, "&((nir_def*)0)->bit_size": M.DEF_BIT_SIZE,
    "sizeof(nir_op_info)": M.OP_INFO_SIZE, "sizeof(nir_intrinsic_info)": M.INTR_INFO_SIZE,
    "&((nir_intrinsic_info*)0)->index_map": M.INTR_INFO_INDEX_MAP, "&((nir_intrinsic_info*)0)->has_dest": M.INTR_INFO_HAS_DEST,
    "&((nir_intrinsic_info*)0)->src_components": M.INTR_INFO_SRC_COMPONENTS, "&((nir_intrinsic_info*)0)->dest_components": M.INTR_INFO_DEST_COMPONENTS,
    "&((nir_intrinsic_info*)0)->num_srcs": M.INTR_INFO_NUM_SRCS, "nir_num_opcodes": M.NUM_OPCODES, "nir_num_intrinsics": M.NUM_INTRINSICS,
    "&((nir_shader*)0)->info": M.SHADER_INFO, "&((shader_info*)0)->shared_size": M.INFO_SHARED_SIZE,
    "&((shader_info*)0)->workgroup_size": M.INFO_WORKGROUP_SIZE,
    "&((struct ir3_shader_variant*)0)->bin": M.V_BIN, "&((struct ir3_shader_variant*)0)->const_state": M.V_CONST_STATE,
    "&((struct ir3_shader_variant*)0)->info": M.V_INFO, "&((struct ir3_shader_variant*)0)->branchstack": M.V_BRANCHSTACK,
    "&((struct ir3_shader_variant*)0)->instrlen": M.V_INSTRLEN, "&((struct ir3_shader_variant*)0)->constlen": M.V_CONSTLEN,
    "&((struct ir3_shader_variant*)0)->shared_size": M.V_SHARED_SIZE, "&((struct ir3_shader_variant*)0)->local_size": M.V_LOCAL_SIZE,
    "&((struct ir3_shader_variant*)0)->has_barrier": M.V_HAS_BARRIER, "&((struct ir3_shader_variant*)0)->imm_state": M.V_IMM_STATE,
    "&((struct ir3_shader_variant*)0)->pvtmem_size": M.V_PVTMEM_SIZE, "&((struct ir3_shader_variant*)0)->inputs_count": M.V_INPUTS_COUNT,
    "&((struct ir3_shader_variant*)0)->inputs": M.V_INPUTS, "&((struct ir3_info*)0)->max_reg": M.INFO_MAX_REG,
    "&((struct ir3_info*)0)->max_half_reg": M.INFO_MAX_HALF_REG, "&((struct ir3_info*)0)->size": M.INFO_SIZE,
    "sizeof(struct ir3_shader_options)": M.SHADER_OPTIONS_SIZE, "sizeof(struct ir3_shader_key)": M.SHADER_KEY_SIZE,
    "&((struct ir3_shader_options*)0)->const_allocs": M.SO_CONST_ALLOCS,
    "&((struct ir3_shader_options*)0)->const_allocs.reserved_vec4": M.SO_RESERVED_VEC4,
    "&((struct ir3_const_state*)0)->allocs.max_const_offset_vec4": M.CS_MAX_CONST_OFFSET_VEC4,
    "sizeof(struct ir3_compiler_options)": 32, "sizeof(nir_builder)": 40, "&((nir_builder*)0)->shader": 24,
    "MESA_SHADER_COMPUTE": M.MESA_SHADER_COMPUTE, "NIR_INTRINSIC_BASE": M.IDX_BASE, "NIR_INTRINSIC_WRITE_MASK": M.IDX_WRITE_MASK,
    "NIR_INTRINSIC_RANGE": M.IDX_RANGE, "NIR_INTRINSIC_ACCESS": M.IDX_ACCESS, "NIR_INTRINSIC_ALIGN_MUL": M.IDX_ALIGN_MUL,
    "NIR_INTRINSIC_ALIGN_OFFSET": M.IDX_ALIGN_OFFSET, "NIR_INTRINSIC_NUM_COMPONENTS": M.IDX_NUM_COMPONENTS,
    "NIR_INTRINSIC_BIT_SIZE": M.IDX_BIT_SIZE, "NIR_INTRINSIC_NUM_ARRAY_ELEMS": M.IDX_NUM_ARRAY_ELEMS,
    "NIR_INTRINSIC_EXECUTION_SCOPE": M.IDX_EXECUTION_SCOPE, "NIR_INTRINSIC_MEMORY_SCOPE": M.IDX_MEMORY_SCOPE,
    "NIR_INTRINSIC_MEMORY_SEMANTICS": M.IDX_MEMORY_SEMANTICS, "NIR_INTRINSIC_MEMORY_MODES": M.IDX_MEMORY_MODES,
    "nir_jump_break": M.NIR_JUMP_BREAK, "SCOPE_WORKGROUP": M.SCOPE_WORKGROUP, "NIR_MEMORY_ACQ_REL": M.NIR_MEMORY_ACQ_REL,
    "nir_var_mem_shared": M.NIR_VAR_MEM_SHARED, "nir_var_mem_global": M.NIR_VAR_MEM_GLOBAL,
  }
  exprs = list(checks)
  args = [a for e in exprs for a in ("-ex", f"print/d (long)({e})")]
  out = subprocess.run(["gdb", "-batch", *args, str(tinymesa.libtinymesa)], capture_output=True, text=True, timeout=120).stdout
  got = [int(x) for x in re.findall(r"^\$\d+ = (-?\d+)$", out, re.M)]
  assert len(got) == len(exprs), out[-2000:]
  wrong = {e: (g, checks[e]) for e, g in zip(exprs, got) if g != checks[e]}
  assert not wrong, f"offsets differ from the library's DWARF (got, expected): {wrong}"
