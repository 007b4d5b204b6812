"""Dynamic shared memory above the 48 KB of static .shared (issue 32's 4-stage 128x128 and 3-stage 128x256 tensor-core
pipelines): the PTX renderer declares one `.extern .shared` region and states its size, the NV driver sizes the launch
(QMD SHARED_MEMORY_SIZE and SM_CONFIG carveout, constant bank 0's %dynamic_smem_size) from it and refuses more than the
generation allows a block (hw.GPUArch.max_shared), and the mock GPU faults a launch that provides less than the kernel
uses or more than the SM allows."""
from __future__ import annotations
import numpy as np
import pytest
from baregrad.drivers.port import make_port
from baregrad.drivers.mock.nv import MockNVGPU
from baregrad.drivers.nv import NVDevice, hw
from baregrad.drivers.nv.faults import NVChannelError
from baregrad.codegen.kernel import OptError
from baregrad.codegen.program import get_program
from baregrad.codegen.renderer.ptx import PTXRenderer, DYN_SHARED_NOTE, STATIC_SHARED_MAX, dynamic_shared_bytes
from tests.drivers.nv.test_tensor_cores import gemm_opts, f16
from tools.sass_report import matmul_ast, renderer_for

@pytest.fixture(autouse=True)
def _default_mock(monkeypatch):
  monkeypatch.delenv("MOCKGPU_ARCH", raising=False)
  monkeypatch.delenv("MOCKGPU_COUNT", raising=False)

def _open(arch: str = "sm_90") -> tuple[NVDevice, MockNVGPU]:
  mock = MockNVGPU(arch=arch)
  return NVDevice("NV", port=make_port(mock)), mock

def _u32(dev: NVDevice, buf, n: int) -> np.ndarray:
  out = np.zeros(n, np.uint32)
  dev.allocator._copyout(memoryview(out).cast("B"), buf)
  return out

TOP = 65536 - 256   # the 64 threads use the last 256 bytes of the 64 KB region
def dyn_ptx(nbytes: int, arch: str = "sm_90") -> str:
  """A kernel with only dynamic shared memory (`nbytes` stated): thread t stores t at TOP + 4t, reads its neighbour's
  word back and adds %dynamic_smem_size (what constant bank 0 says the launch has)."""
  return f"""
.version 8.0
.target {arch}
.address_size 64
{DYN_SHARED_NOTE}{nbytes}
.extern .shared .align 128 .b8 smem[];
.visible .entry dyn(.param .u64 out) {{
  .reg .b32 %r<10>; .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [out]; cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r3, %tid.x; mov.u32 %r1, smem; shl.b32 %r2, %r3, 2; add.u32 %r4, %r1, %r2; add.u32 %r4, %r4, {TOP};
  st.shared.u32 [%r4], %r3;
  bar.sync 0;
  xor.b32 %r6, %r3, 1; shl.b32 %r7, %r6, 2; add.u32 %r8, %r1, %r7; add.u32 %r8, %r8, {TOP}; ld.shared.u32 %r5, [%r8];
  mov.u32 %r9, %dynamic_smem_size; add.u32 %r5, %r5, %r9;
  mul.wide.u32 %rd2, %r3, 4; add.s64 %rd3, %rd1, %rd2; st.global.u32 [%rd3], %r5;
  ret;
}}
"""

@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_dynamic_shared_launch_is_sized_from_the_ptx(arch):
  """The driver launches the kernel with its dynamic bytes after the reserved ones (0x400 on sm_90+), names the
  smallest carveout that holds them (sm_80: 64 KiB; sm_90, 64 KiB + 1 KiB: 100 KiB) and puts the size in %dynamic_smem_size."""
  dev, _ = _open(arch)
  try:
    prg = dev.runtime(dev, "dyn", dyn_ptx(65536, arch).encode())
    base = dev.cb_layout.shared_base
    assert prg.dyn_shared == 65536 and prg.shared_total == base + 65536
    out = dev.allocator.alloc(4 * 64)
    prg(out, global_size=(1, 1, 1), local_size=(64, 1, 1))
    dev.synchronize()
    assert (_u32(dev, out, 64) == (np.arange(64) ^ 1) + 65536).all()
    q = dev.port.mock.launches[-1]
    assert q["shared"] == base + 65536 and q["smcfg"][2] == (100 if base else 64) // 4 + 1, q
  finally: dev.close()

def test_launch_smaller_than_the_kernel_uses_faults():
  """A launch that provides 32 KB where the kernel writes at 64 KB - 256: the access is past the block's shared memory
  and the SM raises a warp exception (Xid 13 Out Of Range Address) naming that shared offset."""
  dev, _ = _open()
  try:
    prg = dev.runtime(dev, "dyn", dyn_ptx(65536).encode())
    out = dev.allocator.alloc(4 * 64)
    prg.shared_total = dev.cb_layout.shared_base + 32768
    prg(out, global_size=(1, 1, 1), local_size=(64, 1, 1))
    with pytest.raises(NVChannelError, match="Xid 13") as e: dev.synchronize(timeout_ms=5000)
    assert "Out Of Range Address" in str(e.value) and f"shared offset {TOP:#x}" in dev.port.mock.log[-1], dev.port.mock.log[-1]
    prg.shared_total = dev.cb_layout.shared_base + 65536   # the size the PTX states: runs
    prg(out, global_size=(1, 1, 1), local_size=(64, 1, 1))
    dev.synchronize()
    assert (_u32(dev, out, 64) == (np.arange(64) ^ 1) + 65536).all()
  finally: dev.close()

@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_90"])
def test_driver_refuses_more_than_the_arch_allows(arch):
  """hw.GPUArch.max_shared per generation (CUDA's opt-in maximum per block): exactly that much loads, 128 bytes more is
  refused by name (sizes, arch) before any launch."""
  dev, _ = _open(arch)
  try:
    mx = hw.ARCHS[arch].max_shared
    assert dev.runtime(dev, "dyn", dyn_ptx(mx, arch).encode()).dyn_shared == mx
    with pytest.raises(ValueError, match=f"exceed the {mx} a block may use on {arch}"):
      dev.runtime(dev, "dyn", dyn_ptx(mx + 128, arch).encode())
  finally: dev.close()

@pytest.mark.parametrize("arch", sorted(hw.ARCHS))
def test_largest_launch_fits_the_qmd_fields(arch):
  """The most shared memory a block of `arch` may have (its own max_shared after the reserved bytes) fits the QMD's
  SHARED_MEMORY_SIZE and names the SM's largest carveout in MIN/TARGET and MAX (hw.build_qmd, read back)."""
  g = hw.ARCHS[arch]
  size = g.cbank0.shared_base + g.max_shared
  q = hw.read_qmd(hw.build_qmd(0x1000, 0x2000, 0x300, (1, 1, 1), (128, 1, 1), size, 32, version=g.qmd_version, max_shared=g.max_shared),
                  g.qmd_version)
  top = g.carveouts[-1] // 4 + 1
  assert q["shared"] == size and q["smcfg"] == (top, top, top), (arch, q["shared"], q["smcfg"])

def test_mock_refuses_a_qmd_above_the_block_limit():
  """The SM's largest carveout (164 KiB on sm_80) is 1 KiB above what a block may use (163 KB): a QMD asking for more
  than 163 KB still names a carveout the SM has, and the mock refuses it (SKEDCHECK14, the limit named)."""
  dev, mock = _open("sm_80")
  try:
    prg = dev.runtime(dev, "dyn", dyn_ptx(65536, "sm_80").encode())
    out = dev.allocator.alloc(4 * 64)
    prg.shared_total = hw.ARCHS["sm_80"].max_shared + 128
    prg(out, global_size=(1, 1, 1), local_size=(64, 1, 1))
    with pytest.raises(NVChannelError, match="Xid 13") as e: dev.synchronize(timeout_ms=5000)
    assert "SKEDCHECK14_SHARED_MEMORY_SIZE failed" in str(e.value) and "a block may use on sm_80" in mock.log[-1]
  finally: dev.close()

def test_renderer_declares_dynamic_shared_above_48kb():
  """Up to 48 KB the tiles stay static .shared; the 4-stage 128x128 pipeline (64 KB) is one .extern region whose
  size the program spec and the PTX carry; without the device's limit (PTXRenderer()) it is refused."""
  ast = matmul_ast(128, 128, 128, f16)
  three = get_program(ast, renderer_for("sm_80"), gemm_opts(128, 128, 128, f16, 3))
  assert three.dyn_shared == 0 and ".extern" not in three.src and ".shared .align 16 .b8" in three.src
  four = get_program(ast, renderer_for("sm_80"), gemm_opts(128, 128, 128, f16, 4))
  assert four.dyn_shared == dynamic_shared_bytes(four.src) == 65536 > STATIC_SHARED_MAX
  assert ".extern .shared .align 128 .b8 smem[];" in four.src and ".shared .align 16" not in four.src
  with pytest.raises(OptError, match="allows 49152"): get_program(ast, PTXRenderer(), gemm_opts(128, 128, 128, f16, 4))

def test_codegen_refuses_tiles_above_the_arch_limit():
  """A 256x256 block tile in 4 stages (128 KB) fits sm_80's 163 KB but not sm_86's 99 KB: refused there by name."""
  ast = matmul_ast(256, 256, 128, f16)
  opts = gemm_opts(256, 256, 128, f16, 4, warps=(4, 4))
  assert get_program(ast, renderer_for("sm_80"), opts).dyn_shared == 4 * 2 * 256 * 32 * 2
  with pytest.raises(OptError, match=f"sm_86 allows {99 << 10}"): get_program(ast, renderer_for("sm_86"), opts)

def test_renderer_lays_out_every_shared_buffer_in_the_region_and_refuses_past_the_limit():
  """Several workgroup buffers above 48 KB: one region, each buffer at a 16-byte aligned offset of it (the second after
  the first's 80 KB); a renderer whose GPU allows less refuses the kernel by name (a backstop behind the opts' check)."""
  from baregrad.ir.ops import UOp, Ops
  from baregrad.ir.dtype import dtypes
  from baregrad.codegen.renderer import RenderError
  a = UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(local=True), (), ("a", 20 << 10))
  b = UOp(Ops.DEFINE_LOCAL, dtypes.half.ptr(local=True), (), ("b", 3))
  src = renderer_for("sm_80").render("k", [a, b])
  assert dynamic_shared_bytes(src) == (80 << 10) + 16 and "add.u32 %r2, %r2, 81920;" in src and ".shared .align 16" not in src
  with pytest.raises(RenderError, match=f"needs {(100 << 10) + 16} bytes of shared memory; sm_86 allows {99 << 10}"):
    renderer_for("sm_86").render("k", [a, UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(local=True), (), ("c", 5 << 10)), b])
