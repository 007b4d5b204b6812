"""DEBUG=6 (a GPU kernel's resources) and DEBUG=7 (its disassembly) on the NV and AMD mocks: what the driver prints when
it loads a kernel (drivers/nv/disasm.py, drivers/amd/disasm.py)."""
from __future__ import annotations
import os, re, stat
import pytest
from baregrad.knobs import Context
from baregrad.drivers.port import make_port

PTX_SHARED = """.version 8.0
.target sm_90
.address_size 64
.visible .entry sh(.param .u64 out) {
  .reg .b32 %r<4>; .reg .b64 %rd<4>;
  .shared .align 4 .u32 buf[64];
  ld.param.u64 %rd1, [out]; cvta.to.global.u64 %rd1, %rd1; mov.u32 %r1, %tid.x; shl.b32 %r2, %r1, 2;
  mov.u32 %r3, buf; add.u32 %r3, %r3, %r2; st.shared.u32 [%r3], %r1; bar.sync 0; ld.shared.u32 %r1, [%r3];
  cvt.u64.u32 %rd2, %r2; add.s64 %rd1, %rd1, %rd2; st.global.u32 [%rd1], %r1; ret;
}"""

@pytest.fixture(autouse=True)
def default_mocks(monkeypatch):
  for k in ("MOCKGPU_ARCH", "MOCKGPU_AMD_ARCH", "MOCKGPU_COUNT"): monkeypatch.delenv(k, raising=False)

@pytest.fixture(scope="module")
def nv():
  from baregrad.drivers.mock.nv import MockNVGPU
  from baregrad.drivers.nv import NVDevice
  dev = NVDevice("NV", port=make_port(MockNVGPU()))
  yield dev
  dev.close()

def _nv_load(nv, src: str, name: str, level: int, capsys) -> tuple[str, bytes]:
  from baregrad.drivers.nv.program import NVProgram
  from baregrad.drivers.nv_compile import unpack_lib
  lib = nv.compiler.compile(src)
  with Context(DEBUG=level): NVProgram(nv, name, lib)
  return capsys.readouterr().err, unpack_lib(lib)[1]

def test_nv_debug6_prints_resources_not_below(nv, capsys):
  from baregrad.drivers.nv_compile import parse_cubin
  assert "NV kernel sh" not in _nv_load(nv, PTX_SHARED, "sh", 5, capsys)[0]
  err, cubin = _nv_load(nv, PTX_SHARED, "sh", 6, capsys)
  line = next(ln for ln in err.splitlines() if ln.startswith("NV kernel sh (sm_90"))
  assert "SASS" not in err
  if cubin:   # ptxas here: its count agrees with the cubin's EIATTR_REGCOUNT, 256 bytes of .shared declared
    regs = int(re.search(r"(\d+) registers", line).group(1))
    assert regs == parse_cubin(cubin)["kernels"]["sh"]["regs"] and "256 bytes shared" in line and "ptxas -v" in line
  else: assert "registers and spills unknown" in line and "256 bytes shared" in line

def test_nv_debug6_reports_spills(nv, capsys):
  from baregrad.drivers.nv.testkernels import spill_ptx
  err, cubin = _nv_load(nv, spill_ptx(), "spill", 6, capsys)
  if not cubin: pytest.skip("no ptxas: spills are ptxas's report")
  m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads, (\d+) bytes stack frame", err)
  assert m and int(m.group(1)) > 0 and int(m.group(2)) > 0 and int(m.group(3)) > 0, err

def test_parse_ptxas_v():
  from baregrad.drivers.nv.disasm import parse_ptxas_v
  rep = ("ptxas info    : Function properties for k\n    88 bytes stack frame, 84 bytes spill stores, 80 bytes spill loads\n"
         "ptxas info    : Used 24 registers, used 1 barriers, 1280 bytes smem, 368 bytes cmem[0]\n")
  assert parse_ptxas_v(rep) == {"regs": 24, "barriers": 1, "stack": 88, "spill_stores": 84, "spill_loads": 80, "shared": 1280, "cmem0": 368}

def _fake_tool(d, name: str) -> None:
  """A stand-in for NVIDIA's tool: prints its arguments and the size of the file it was given."""
  p = d / name
  p.write_text('#!/bin/sh\necho "FAKE $0 $@"\nfor a; do :; done\necho "bytes $(wc -c < "$a")"\n')
  p.chmod(p.stat().st_mode | stat.S_IEXEC)

def test_nv_debug7_sass_by_nvdisasm_or_why_not(nv, capsys, tmp_path, monkeypatch):
  from baregrad.drivers.nv import disasm
  if disasm.find_sass_tool() is None:
    err, cubin = _nv_load(nv, PTX_SHARED, "sh", 7, capsys)
    assert "SASS of sh: " + ("unavailable (no nvdisasm or cuobjdump" if cubin else "none (no cubin") in err
  err, cubin = _nv_load(nv, PTX_SHARED, "sh", 7, capsys)
  if not cubin: pytest.skip("no ptxas: no cubin to disassemble")
  _fake_tool(tmp_path, "nvdisasm")   # found first on PATH: the cubin goes to it as a file, code sections only (-c)
  monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
  err, _ = _nv_load(nv, PTX_SHARED, "sh", 7, capsys)
  assert f"SASS of sh:\nFAKE {tmp_path}/nvdisasm -c " in err and f"bytes {len(cubin)}" in err

@pytest.fixture(scope="module")
def amd():
  from baregrad.drivers.mock.amd import MockAMDGPU
  from baregrad.drivers.amd.device import AMDDevice
  dev = AMDDevice("AMD", port=make_port(MockAMDGPU()))
  yield dev
  dev.close()

def _amd_load(amd, src: str, name: str, level: int, capsys) -> tuple[str, bytes]:
  from baregrad.drivers.amd.program import AMDProgram
  lib = amd.compiler.compile(src)
  with Context(DEBUG=level): AMDProgram(amd, name, lib)
  return capsys.readouterr().err, lib

def test_amd_debug7_rdna3_listing_and_resources(amd, capsys):
  from baregrad.drivers.amd.testkernels import spill_ll
  from baregrad.drivers.amd_compile import load_code_object
  assert "AMD kernel" not in _amd_load(amd, spill_ll(), "spill", 5, capsys)[0]
  err, lib = _amd_load(amd, spill_ll(), "spill", 7, capsys)
  k = load_code_object(lib).kernels["spill"]
  res = next(ln for ln in err.splitlines() if ln.startswith("AMD kernel spill (gfx1100, wave32)"))
  assert f"{k.descriptor.vgpr_count('gfx1100')} VGPRs reserved" in res and f"{k.code_size} bytes of code" in res
  assert int(re.search(r"(\d+) VGPR spills", res).group(1)) > 0 and f"{k.descriptor.private_segment_fixed_size} bytes scratch" in res
  listing = err.split("disassembly of spill:\n", 1)[1].splitlines()
  offs = [int(ln.split(":")[0], 16) for ln in listing if re.match(r"0x[0-9a-f]{4,}: ", ln)]
  assert offs[0] == 0 and offs == sorted(offs) and "s_endpgm" in listing[len(offs) - 1]
  assert any("scratch_store" in ln for ln in listing)   # the spills, in the code

def test_amd_debug7_without_a_decoder_says_why(capsys, monkeypatch):
  from baregrad.drivers.amd import disasm
  from baregrad.drivers.amd.testkernels import spill_ll
  from baregrad.drivers.amd_compile import AMDCompiler
  lib = AMDCompiler("gfx942").compile(spill_ll(vgprs=32))
  monkeypatch.setattr(disasm, "objdumps", lambda: [])
  text = disasm.debug_text(7, lib, "spill", "gfx942")
  assert text.startswith("AMD kernel spill (gfx942, wave64):") and "AGPRs" in text
  assert text.endswith("disassembly of spill: unavailable (no decoder of ours for gfx942; no llvm-objdump that knows gfx942 on PATH)")
