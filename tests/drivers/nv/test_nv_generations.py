"""The NV driver on mock GPUs of every generation it knows (MOCKGPU_ARCH) and on several mock GPUs (MOCKGPU_COUNT):
classes and QMD version picked from what the kernel reports, kernels end to end through the Tensor API, cubins
assembled by ptxas for the arch, copies between GPUs, wrong classes refused."""
from __future__ import annotations
from tests.paths import REPO
import ctypes, dataclasses
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from baregrad import Tensor
from baregrad.hal import Device, DeviceUnavailable
from baregrad.helpers import getenv
from baregrad.drivers.port import make_port
from baregrad.drivers.mock.nv import MockNVGPU
from baregrad.drivers.nv import NVDevice, RMError, hw
from baregrad.ctypes_autogen.nv import nv_580 as nv

# arch -> (GPFIFO class, compute class, copy class, QMD version, parameter offset in constant bank 0)
EXPECT = {
  "sm_80": (nv.AMPERE_CHANNEL_GPFIFO_A, nv.AMPERE_COMPUTE_A, nv.AMPERE_DMA_COPY_A, 3, 0x160),
  "sm_86": (nv.AMPERE_CHANNEL_GPFIFO_A, nv.AMPERE_COMPUTE_B, nv.AMPERE_DMA_COPY_B, 3, 0x160),
  "sm_89": (nv.AMPERE_CHANNEL_GPFIFO_A, nv.ADA_COMPUTE_A, nv.AMPERE_DMA_COPY_B, 3, 0x160),
  "sm_90": (nv.HOPPER_CHANNEL_GPFIFO_A, nv.HOPPER_COMPUTE_A, nv.HOPPER_DMA_COPY_A, 4, 0x210),
  "sm_100": (nv.BLACKWELL_CHANNEL_GPFIFO_A, nv.BLACKWELL_COMPUTE_A, nv.BLACKWELL_DMA_COPY_A, 5, 0x380),
  "sm_120": (nv.BLACKWELL_CHANNEL_GPFIFO_B, nv.BLACKWELL_COMPUTE_B, nv.BLACKWELL_DMA_COPY_B, 5, 0x380),
}

@pytest.fixture
def mockenv(monkeypatch):
  """MOCKGPU=1 for the registry, a private kernel cache and device registry: Device[...] opens fresh mock GPUs,
  whatever other tests opened stays as it was."""
  import baregrad.engine.runner as runner
  monkeypatch.setenv("MOCKGPU", "1")
  getenv.cache_clear()
  monkeypatch.setattr(runner, "_cache", {})
  saved = dict(Device._open)
  Device._open.clear()
  yield monkeypatch
  for d in list(Device._open.values()):
    if isinstance(d, NVDevice): d.close()
  Device._open.clear()
  Device._open.update(saved)
  monkeypatch.undo()
  getenv.cache_clear()

def open_arch(mp, arch: str, name: str = "NV") -> NVDevice:
  mp.setenv("MOCKGPU_ARCH", arch)
  dev = Device[name]
  assert isinstance(dev, NVDevice)
  return dev

# ---------------------------------------------------------------- one generation at a time
@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_90", "sm_100", "sm_120"])
def test_generation_end_to_end(mockenv, arch):
  import baregrad.engine.runner as runner
  dev = open_arch(mockenv, arch)
  mock: MockNVGPU = dev.port.mock
  gpfifo, compute, dma, qmd_v, poff = EXPECT[arch]
  # what the kernel reported, and what the driver made of it
  assert mock.arch == arch and dev.arch == arch and dev.family == hw.ARCH_FAMILIES[mock.arch_info.architecture]
  assert (dev.gpfifo_class, dev.compute_class, dev.dma_class, dev.qmd_version, dev.param_off) == (gpfifo, compute, dma, qmd_v, poff)
  assert dev.renderer.arch == arch and dev.compiler.arch == arch
  assert dev.max_shared_mem == hw.ARCHS[arch].max_shared
  assert mock.clients[dev.root][dev.usermode].cls in hw.ARCHS[arch].usermode
  for ch in mock.channels.values(): assert ch.subc_class == {hw.SUBC_COMPUTE: compute, hw.SUBC_COPY: dma}
  # an elementwise kernel and a reduction through the Tensor API
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((7, 33)).astype(np.float32), rng.standard_normal((7, 33)).astype(np.float32)
  np.testing.assert_allclose((Tensor(a, device="NV") * Tensor(b, device="NV") + 1).numpy(), a * b + 1, rtol=1e-6)
  np.testing.assert_allclose(Tensor(a, device="NV").sum(axis=1).numpy(), a.sum(axis=1), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(Tensor(a, device="NV").max().numpy(), a.max())
  # the mock decoded every launch as its compute class's QMD version
  assert mock.launches and all(l["version"] == qmd_v and l["major"] == qmd_v for l in mock.launches)
  assert all(l["cbank0"] is not None and l["grid"][0] >= 1 for l in mock.launches)
  # and the kernels were assembled by ptxas for this arch, reading their parameters where the driver put them
  runners = [r for r in runner._cache.values() if r.device == "NV"]
  assert runners
  from baregrad.codegen.renderer.ptx import ptx_version
  for r in runners: assert r.prg.param_off == poff and f".target {arch}\n" in r.spec.src and f".version {ptx_version(arch)}\n" in r.spec.src
  if not dev.compiler_ok: pytest.skip("ptxas not installed: the mock ran the PTX, nothing was assembled")
  from baregrad.drivers.nv_compile import unpack_lib
  from baregrad.drivers.nv_compile import parse_cubin
  for r in runners:
    ptx, cubin = unpack_lib(r.lib)
    if not cubin: pytest.skip(f"ptxas here cannot assemble {arch}")
    info = parse_cubin(cubin)
    assert info["arch"] == arch, info["arch"]
    assert info["kernels"][r.spec.name]["param_cbank"][0] == poff

def test_sm86_classes(mockenv):
  dev = open_arch(mockenv, "sm_86")
  assert (dev.gpfifo_class, dev.compute_class, dev.dma_class, dev.qmd_version, dev.param_off) == EXPECT["sm_86"]
  np.testing.assert_allclose((Tensor(np.arange(5, dtype=np.float32), device="NV") + 2).numpy(), np.arange(5) + 2)

@pytest.mark.parametrize("arch,wrong", [("sm_80", nv.HOPPER_COMPUTE_A), ("sm_90", nv.AMPERE_COMPUTE_A), ("sm_90", nv.BLACKWELL_DMA_COPY_A),
                                        ("sm_100", nv.BLACKWELL_COMPUTE_B), ("sm_120", nv.HOPPER_COMPUTE_A)])
def test_wrong_class_for_arch_refused(mockenv, arch, wrong):
  dev = open_arch(mockenv, arch)
  with pytest.raises(RMError, match="NV_ERR_INVALID_CLASS") as e: dev.rm_alloc(dev.channels["compute"].handle, wrong)
  assert e.value.status == nv.NV_ERR_INVALID_CLASS and hw.class_name(wrong) in str(e.value) and arch in dev.port.mock.log[-1]
  bad_fifo = nv.AMPERE_CHANNEL_GPFIFO_A if arch not in ("sm_80", "sm_89") else nv.HOPPER_CHANNEL_GPFIFO_A
  with pytest.raises(RMError, match="NV_ERR_INVALID_CLASS"): dev.rm_alloc(dev.channel_group, bad_fifo, nv.NV_CHANNEL_ALLOC_PARAMS())
  # the classlist offers exactly this generation's engine classes
  mock = dev.port.mock
  for cls in hw.COMPUTE_CLASSES + hw.DMA_CLASSES + hw.GPFIFO_CLASSES:
    assert (cls in mock.classlist) == (cls in (EXPECT[arch][:3]))

def test_unknown_arch_refused_by_name(mockenv):
  mockenv.setenv("MOCKGPU_ARCH", "sm_75")
  with pytest.raises(DeviceUnavailable, match=r"sm_75.*sm_80, sm_86, sm_89, sm_90, sm_100, sm_120"): Device["NV"]
  with pytest.raises(ValueError, match="sm_70"): MockNVGPU(arch="sm_70")
  # the driver refuses a GPU whose MC architecture it does not know (a Turing TU100, 0x160), by name
  mock = MockNVGPU(arch="sm_80")
  mock.arch_info = dataclasses.replace(mock.arch_info, architecture=0x160, sm_version=0x705)
  with pytest.raises(DeviceUnavailable, match=r"architecture 0x160.*sm_75.*not supported"): NVDevice("NV", port=make_port(mock))
  # a known family with an SM version the driver has no target for
  mock = MockNVGPU(arch="sm_100")
  mock.arch_info = dataclasses.replace(mock.arch_info, sm_version=0xa03)
  with pytest.raises(DeviceUnavailable, match=r"Blackwell GPU reports SM version 0xa03 \(sm_103\)"): NVDevice("NV", port=make_port(mock))

def test_driver_picks_from_classlist():
  """The driver takes the newest class the GPU lists, so an Ada classlist that also listed AMPERE_COMPUTE_B still
  gets ADA_COMPUTE_A, and the QMD version follows the compute class."""
  mock = MockNVGPU(arch="sm_89")
  mock.classlist = sorted(set(mock.classlist) | {nv.AMPERE_COMPUTE_B})
  dev = NVDevice("NV", port=make_port(mock))
  try: assert dev.compute_class == nv.ADA_COMPUTE_A and dev.qmd_version == 3
  finally: dev.close()

# ---------------------------------------------------------------- QMD layouts
@settings(max_examples=30, deadline=None)
@given(st.sampled_from([3, 4, 5]), st.tuples(st.integers(1, 2**16 - 1), st.integers(1, 65535), st.integers(1, 65535)),
       st.tuples(st.integers(1, 1024), st.integers(1, 64), st.integers(1, 64)), st.integers(0, 200 << 10).map(lambda x: x // 128 * 128),
       st.integers(16, 255), st.integers(0, 2**36).map(lambda x: x * 256), st.integers(0, 2**36).map(lambda x: x * 64),
       st.none() | st.tuples(st.integers(0, 2**37 - 1).map(lambda x: x * 8), st.integers(0, 2**64 - 1)))
def test_qmd_roundtrip_all_versions(ver, grid, block, shared, regs, prog, cb, release):
  w = hw.build_qmd(prog, cb, 0x380 + 64, grid, block, shared, regs, release, version=ver, max_shared=227 << 10)
  assert len(w) * 4 == hw.QMD_LAYOUTS[ver].nbytes
  q = hw.read_qmd(w, ver)
  assert (q["grid"], q["block"], q["shared"], q["regs"], q["program"], q["cbank0"], q["major"]) == (grid, block, shared, regs, prog, cb, ver)
  assert q["release0"] == (None if release is None else (release[0], release[1], 1))
  assert hw.decode_qmd(w, ver)["QMD_MAJOR_VERSION"] == ver

@settings(max_examples=40, deadline=None)
@given(st.sampled_from([3, 4, 5]), st.integers(0, 2**36).map(lambda x: x * 64), st.integers(0, 200 << 10))
def test_qmd_template_patched_with_the_bank_address_is_the_built_qmd(ver, cb, shared):
  """The driver makes a kernel's QMD once per geometry and patches only constant bank 0's address per launch
  (NVArgsState.write_qmd): the patched words must be exactly what build_qmd makes for that address."""
  args = (0x2000001100, (2**42 - 64) ^ cb, 0x300, (5, 2, 1), (32, 4, 1), shared, 24)   # another bank: every bit patched
  t = hw.build_qmd(*args, version=ver, max_shared=227 << 10)
  lo, lo_v, hi, hi_v, hi_mask = hw.qmd_cbank0_words(ver, cb)
  t[lo], t[hi] = lo_v, (t[hi] & ~hi_mask) | hi_v
  want = hw.build_qmd(args[0], cb, *args[2:], version=ver, max_shared=227 << 10)
  assert t == want and hw.read_qmd(t, ver)["cbank0"] == cb
  with pytest.raises(ValueError, match="does not fit"): hw.qmd_cbank0_words(ver, 1 << 60)

def test_qmd_field_overflow_is_an_error():
  """QMD v03 holds 40-bit release addresses (RELEASE0_ADDRESS_UPPER is 8 bits): a wider one is refused, not truncated."""
  with pytest.raises(ValueError, match="does not fit QMD bits 807:800"): hw.build_qmd(0, 0, 0x200, (1, 1, 1), (1, 1, 1), 0, 16, (1 << 40, 0), version=3)
  with pytest.raises(ValueError, match="QMD version 6"): hw.build_qmd(0, 0, 0x200, (1, 1, 1), (1, 1, 1), 0, 16, version=6)

def test_nv_decode_tool_per_arch(tmp_path, capsys):
  import importlib.util, os
  spec = importlib.util.spec_from_file_location("nv_decode", os.path.join(str(REPO), "tools", "nv_decode.py"))
  tool = importlib.util.module_from_spec(spec); spec.loader.exec_module(tool)  # type: ignore[union-attr]
  for arch, ver in (("sm_89", 3), ("sm_120", 5)):
    w = hw.build_qmd(0x2000001100, 0x2000002040, 0x300, (5, 2, 1), (32, 4, 1), 1024, 24, version=ver, max_shared=hw.ARCHS[arch].max_shared)
    p = tmp_path / f"q{ver}.bin"
    p.write_bytes(b"".join(x.to_bytes(4, "little") for x in w))
    assert tool.main(["qmd", str(p), "--arch", arch]) == 0
    out = capsys.readouterr().out
    assert f"QMD v0{ver} ({hw.class_name(hw.ARCHS[arch].compute)})" in out and "grid=(5, 2, 1)" in out and f"major={ver:#x}" in out

# ---------------------------------------------------------------- several GPUs
def test_two_gpus(mockenv):
  mockenv.setenv("MOCKGPU_COUNT", "2")
  mockenv.setenv("MOCKGPU_ARCH", "sm_89")
  d0, d1 = Device["NV:0"], Device["NV:1"]
  assert isinstance(d0, NVDevice) and isinstance(d1, NVDevice) and d0 is not d1
  # NV_ESC_CARD_INFO lists both, with distinct ids; each device opened its own
  cards = (nv.nv_ioctl_card_info_t * 32)()
  d0._esc(d0.fd_ctl, nv.NV_ESC_CARD_INFO, cards, "NV_ESC_CARD_INFO")
  valid = [c for c in cards if c.valid]
  assert len(valid) == 2 and len({c.gpu_id for c in valid}) == 2 and [c.minor_number for c in valid] == [0, 1]
  assert (d0.dev_path, d1.dev_path) == ("/dev/nvidia0", "/dev/nvidia1") and d0.uuid != d1.uuid
  assert d0.port.mock.uuids == d1.port.mock.uuids and d1.uuid == d1.port.mock.uuids[1]
  assert d0.arch == d1.arch == "sm_89"
  # one kernel (one mock) for both; each its own RM client with its device objects, VA space and channels
  assert d0.port is d1.port and d0.root != d1.root and d0.fd_uvm != d1.fd_uvm
  for d, i in ((d0, 0), (d1, 1)):
    objs = d.port.mock.clients[d.root]
    assert objs[d.nvdevice].data == {"gpu": i} and objs[d.subdevice].data == {"gpu": i}
    assert objs[d.vaspace].cls == nv.FERMI_VASPACE_A and sum(c.client == d.root for c in d.port.mock.channels.values()) == 2
  assert d0.gpu_va.free[0][0] != d1.gpu_va.free[-1][0]
  # a tensor goes NV:0 -> NV:1 -> NV:0 (through peer mappings), computing on each side
  x = np.arange(300, dtype=np.float32).reshape(3, 100)
  a = Tensor(x, device="NV:0") + 1
  b = a.to("NV:1")
  assert b.device == "NV:1"
  np.testing.assert_allclose((b * 2).numpy(), (x + 1) * 2)
  c = (b.sum(axis=1)).to("NV:0")
  assert c.device == "NV:0"
  np.testing.assert_allclose((c - 1).numpy(), (x + 1).sum(axis=1) - 1)
  # each GPU's memory is its own: a buffer on NV:1 is in NV:1's video memory and page tables only
  m = d0.port.mock
  buf = d1.allocator.alloc(1 << 16)
  assert m.clients[d1.root][buf.meta.handle].data.gpu == 1
  with m.gpu_view(d1.uuid):
    m.write_gpu(buf.va_addr, b"\x5a" * 16)
    assert m.read_gpu(buf.va_addr, 16) == b"\x5a" * 16
  with m.gpu_view(d0.uuid), pytest.raises(ValueError, match="MMU fault"): m.read_gpu(buf.va_addr, 16)
  d1.allocator.free(buf, 1 << 16)
  assert Device["NV:0"] is d0 and Device["NV:1"] is d1
  with pytest.raises(DeviceUnavailable, match="reports 2 GPU"): Device["NV:2"]

def test_video_memory_not_mapped_for_another_gpu():
  """Within one kernel driver: GPU 0's video memory cannot be mapped into GPU 1's page tables (no peer access)."""
  mock = MockNVGPU(count=2)
  dev = NVDevice("NV:0", port=make_port(mock))
  try:
    reg = nv.UVM_REGISTER_GPU_PARAMS(rmCtrlFd=-1)
    ctypes.memmove(reg.gpu_uuid.uuid, mock.uuids[1], 16)
    dev.uvm(nv.UVM_REGISTER_GPU, reg, "UVM_REGISTER_GPU")
    d1 = dev.rm_alloc(dev.root, nv.NV01_DEVICE_0, nv.NV0080_ALLOC_PARAMETERS(deviceId=1, hClientShare=dev.root))
    vas = dev.rm_alloc(d1, nv.FERMI_VASPACE_A, nv.NV_VASPACE_ALLOCATION_PARAMETERS(flags=nv.NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED))
    rv = nv.UVM_REGISTER_GPU_VASPACE_PARAMS(rmCtrlFd=dev.fd_ctl, hClient=dev.root, hVaSpace=vas)
    ctypes.memmove(rv.gpuUuid.uuid, mock.uuids[1], 16)
    dev.uvm(nv.UVM_REGISTER_GPU_VASPACE, rv, "UVM_REGISTER_GPU_VASPACE")
    m = dev._gpu_alloc(1 << 16)
    mp = nv.UVM_MAP_EXTERNAL_ALLOCATION_PARAMS(base=m.va, length=m.size, rmCtrlFd=dev.fd_ctl, hClient=dev.root, hMemory=m.handle, gpuAttributesCount=1)
    ctypes.memmove(mp.perGpuAttributes[0].gpuUuid.uuid, mock.uuids[1], 16)
    with pytest.raises(RMError, match="NV_ERR_INVALID_DEVICE"): dev.uvm(nv.UVM_MAP_EXTERNAL_ALLOCATION, mp, "UVM_MAP_EXTERNAL_ALLOCATION")
    assert "GPU 0 cannot be mapped for GPU 1" in mock.log[-1]
    dev._gpu_free(m)
  finally: dev.close()

def test_bad_count_refused(mockenv):
  mockenv.setenv("MOCKGPU_COUNT", "zero")
  with pytest.raises(DeviceUnavailable, match="MOCKGPU_COUNT='zero'"): Device["NV"]

def test_tables_are_derived_from_the_generation_records():
  """One record per generation: every per-class and per-arch table agrees with it, the class tuples list each record's
  classes newest generation first, and a record's QMD layout, parameter offset and carveouts are its own."""
  gens = hw.GENERATIONS
  assert list(hw.ARCHS) == [g.sm for g in gens] and set(EXPECT) == set(hw.ARCHS)
  for g in gens:
    assert (g.gpfifo, g.compute, g.dma, g.qmd_version, g.param_off) == EXPECT[g.sm]
    assert hw.QMD_VERSION[g.compute] == g.qmd_version and g.qmd is hw.QMD_LAYOUTS[g.qmd_version]
    assert hw.SHADER_WINDOWS[g.compute] is g.windows and hw.CBANK0[g.sm] is g.cbank0
    assert hw.ARCH_FAMILIES[g.architecture] == g.family
    assert g.carveouts == hw.sm_carveouts(g.max_shared) and g.carveouts[-1] << 10 > g.max_shared
  for tup, field in ((hw.GPFIFO_CLASSES, "gpfifo"), (hw.COMPUTE_CLASSES, "compute"), (hw.DMA_CLASSES, "dma")):
    assert set(tup) == {getattr(g, field) for g in gens} and len(tup) == len(set(tup))
    newest = [max(i for i, g in enumerate(gens) if getattr(g, field) == c) for c in tup]
    assert newest == sorted(newest, reverse=True), field
  assert hw.COMPUTE_CLASSES[0] == nv.BLACKWELL_COMPUTE_B and hw.GPFIFO_CLASSES[-1] == nv.AMPERE_CHANNEL_GPFIFO_A
  assert {3: 0x100, 4: 0x180, 5: 0x180} == {v: L.nbytes for v, L in hw.QMD_LAYOUTS.items()}
  assert hw.XID_NAMES[109] == "CTX SWITCH TIMEOUT" and hw.XID_NAMES[13] == "ROBUST_CHANNEL_GR_EXCEPTION"
