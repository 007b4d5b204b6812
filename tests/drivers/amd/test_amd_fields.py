"""PM4 fields in words (hw.macro_fields, format_pm4_packet): ACQUIRE_MEM's cache-control bits and RELEASE_MEM's event,
checked against the PM4 header's own macros."""
from __future__ import annotations
import pytest
from baregrad.drivers.amd import hw

@pytest.mark.parametrize("family,prefix,names", [
  ("gfx11", "PACKET3_ACQUIRE_MEM_GCR_CNTL_", ["GL2_INV", "GL2_WB", "GLM_INV", "GLM_WB", "GL1_INV", "GLV_INV", "GLK_INV", "GLI_INV"]),
  ("gfx9", "PACKET3_ACQUIRE_MEM_CP_COHER_CNTL_", ["SH_ICACHE_ACTION_ENA", "SH_KCACHE_ACTION_ENA", "TC_ACTION_ENA",
                                                 "TCL1_ACTION_ENA", "TC_WB_ACTION_ENA"])])
def test_acquire_mem_cache_bits_match_the_header(family, prefix, names):
  p = hw.PM4[family]
  value = 0
  for n in names: value |= getattr(p, prefix + n)(1)
  assert dict(hw.macro_fields(family, prefix, value)) == {n: 1 for n in names}
  # a multi-bit field (gfx11 GL2_RANGE is 2 bits wide: GL2_RANGE(3)) decodes whole
  if family == "gfx11": assert dict(hw.macro_fields(family, prefix, p.PACKET3_ACQUIRE_MEM_GCR_CNTL_GL2_RANGE(3))) == {"GL2_RANGE": 3}
  text = hw.format_pm4(family, hw.pm4_acquire_mem(family))
  assert all(f"{n}=1" in text for n in names), text

@pytest.mark.parametrize("family", ["gfx11", "gfx9"])
def test_release_mem_event_named(family):
  text = hw.format_pm4(family, hw.pm4_release_mem(family, 0x1000, 5, 1))
  assert "event=CACHE_FLUSH_AND_INV_TS_EVENT" in text and hw.CACHE_FLUSH_AND_INV_TS_EVENT == 0x14, text

def _header_enum(header: str, tag: str) -> dict[int, str] | None:
  """`typedef enum TAG { NAME = value, ... }` read straight from the kernel header (the extracted linux-source the
  generator reads), or None where that source is not on this machine."""
  import os, re
  from tools.autogen.modules import linux_source
  path = os.path.join(linux_source(), "drivers/gpu/drm/amd/include", header)
  if not os.path.exists(path): return None
  body = re.search(rf"typedef enum {tag} \{{(.*?)\}}", open(path).read(), re.S).group(1)
  return {int(v, 0): n for n, v in re.findall(r"^\s*(\w+)\s*=\s*(0x[0-9a-fA-F]+|\d+)", body, re.M)}

@pytest.mark.parametrize("family,header", [("gfx11", "soc21_enum.h"), ("gfx9", "vega10_enum.h")])
def test_every_event_name_is_the_headers(family, header):
  """RELEASE_MEM and EVENT_WRITE name each of the 64 VGT_EVENT_TYPE values as the family's enum header does (the names
  differ between generations: 0x15 is WAIT_SYNC in soc21_enum.h, ZPASS_DONE in vega10_enum.h)."""
  p, t = hw.PM4[family], next(t for t in hw.GFX_TARGETS if t.family == family)
  want = _header_enum(header, "VGT_EVENT_TYPE")
  if want is None:  # the committed binding stands in for the header; the generator test checks it against the header
    want = {v: n for n, v in t.enums.ENUMS["VGT_EVENT_TYPE"].items()}
  assert len(want) == 64 and want == {getattr(t.enums, n): n for n in want.values()}
  for ev, name in want.items():
    rel = hw.pm4_release_mem(family, 0x1000, 5, 1)
    rel[1] = (rel[1] & ~0x3F) | ev
    assert f"RELEASE_MEM event={name} " in hw.format_pm4(family, rel)
    ew = [hw.pm4_hdr(p.PACKET3_EVENT_WRITE, 1), p.EVENT_TYPE(ev) | p.EVENT_INDEX(4)]
    assert f"EVENT_WRITE event={name} event_index=4" in hw.format_pm4(family, ew)
  assert (want[0x15] == "WAIT_SYNC") == (family == "gfx11")

def _kd_bytes(rsrc1: int, kcp: int) -> bytes:
  from baregrad.ctypes_autogen.amdgpu import hsa
  kd = hsa.amdhsa_kernel_descriptor_t(group_segment_fixed_size=256, compute_pgm_rsrc1=rsrc1, kernel_code_properties=kcp)
  return bytes(kd)

@pytest.mark.parametrize("family,w32", [("gfx11", 1), ("gfx11", 0), ("gfx9", 0)])
def test_dispatch_is_described_from_its_kernel_descriptor(family, w32):
  """describe_dispatch: grid in workgroups, block, shared; VGPRs and (gfx9) SGPRs from the descriptor's COMPUTE_PGM_RSRC1
  fields and the wave size from kernel_code_properties, each placed with the header's own BitField (hsa.py)."""
  from baregrad.ctypes_autogen.amdgpu import hsa
  rsrc1 = hsa.AMDHSA_RSRC1_GRANULATED_WORKITEM_VGPR_COUNT.encode(3) | hsa.AMDHSA_RSRC1_GRANULATED_WAVEFRONT_SGPR_COUNT.encode(2)
  kcp = hsa.AMDHSA_KCP_ENABLE_WAVEFRONT_SIZE32.encode(w32)
  kd_addr = 0x7000
  pkt = hw.aql_dispatch(kd_addr, 0x9000, (256, 4, 1), (64, 2, 1), 512, 16)
  read = lambda a, n: _kd_bytes(rsrc1, kcp)[a - kd_addr:a - kd_addr + n]
  s = hw.describe_dispatch(pkt, family, read, {kd_addr: "kern"})
  vgprs = 4 * (8 if w32 or family == "gfx9" else 4)       # (granulated + 1) granules
  assert s.startswith(f"launch 'kern' grid=(4, 2, 1) block=(64, 2, 1) shared=512 vgprs={vgprs}"), s
  assert (" sgprs=48" in s) == (family == "gfx9") and f" wave{32 if w32 else 64} private=16 kernarg=0x9000" in s, s
  assert "cannot read the kernel descriptor" in hw.describe_dispatch(pkt, family, lambda a, n: b"")
  assert hw.describe_dispatch(hw.aql_barrier_and(), family) == ""

def test_driver_queue_state_names_a_pending_dispatch():
  """A dispatch held behind a wait: the driver's queue state (HCQTimeout, HANG?) follows it to its kernel."""
  from baregrad.drivers.port import make_port
  from baregrad.drivers.mock.amd import MockAMDGPU
  from baregrad.drivers.amd import AMDDevice
  from baregrad.hcq import HCQSignal
  from tests.drivers.amd.test_amd_mock import amd_kernels
  dev = AMDDevice("AMD", port=make_port(MockAMDGPU()))
  try:
    prg = dev.runtime(dev, "fill", amd_kernels())
    out, gate = dev.allocator.alloc(64), HCQSignal(dev)
    q = dev.compute_queue_t().wait(gate, 1).exec(prg, prg.fill_kernargs([out], [3]), (4, 1, 1), (4, 1, 1))
    q.signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
    text = dev.queue_state()
    assert f"launch 'fill' grid=(4, 1, 1) block=(4, 1, 1) shared={prg.group_segment_size} vgprs=" in text and "wave32" in text, text
    gate.value = 1
    dev.synchronize()
  finally: dev.close()

@pytest.mark.parametrize("family,flags", [("gfx11", ["GCR_GLM_WB", "GCR_GLM_INV", "GCR_GL2_WB", "GCR_SEQ"]),
                                          ("gfx9", ["TC_WB_ACTION_EN", "TCL1_ACTION_EN", "TC_ACTION_EN", "TC_MD_ACTION_EN"])])
def test_release_mem_cache_actions_match_the_header(family, flags):
  """RELEASE_MEM's cache actions by the header's names: each named bit is the header constant's bit in dword 1."""
  p, (prefix, skip) = hw.PM4[family], hw.RELEASE_MEM_FLAGS[family]
  w = hw.pm4_release_mem(family, 0x1000, 5, 1)
  assert hw.bit_flags(family, prefix, w[1], skip) == flags
  for n in flags: assert w[1] & getattr(p, prefix + n)
  assert hw.bit_flags(family, prefix, getattr(p, prefix + flags[0]), skip) == [flags[0]]
  assert "cache=" + "|".join(flags) in hw.format_pm4(family, w) and "event_index=5" in hw.format_pm4(family, w)

@pytest.mark.parametrize("family", ["gfx11", "gfx9"])
def test_sdma_fields_match_the_header(family):
  """Every SDMA field the decoder reads is the header's (dword, mask, shift); fields the summary leaves out are listed."""
  mod = hw.SDMA[family]
  w = hw.sdma_poll(family, 0x4000, 9)
  for name, (dw, mask, shift) in hw.sdma_fields(family, "POLL_REGMEM").items():
    hdr = next(k for k in vars(mod) if k.startswith("SDMA_PKT_POLL_REGMEM_") and k.endswith(f"_{name}_offset"))
    base = hdr[:-len("_offset")]
    assert (dw, mask, shift) == (getattr(mod, base + "_offset"), getattr(mod, base + "_mask"), getattr(mod, base + "_shift"))
    assert hw.sdma_unpack(family, "POLL_REGMEM", w)[name] == (w[dw] >> shift) & mask
  assert hw.sdma_other_fields(family, w) == [("interval", 10)]
  assert "[interval=0xa]" in hw.format_sdma(family, w)
  # a copy with a cache policy set: the field the summary does not show appears by its header name
  c = hw.sdma_copy(family, 0x2000, 0x1000, 64)
  pol = [k for k in hw.sdma_fields(family, "COPY_LINEAR") if "cache_policy" in k or k == "tmz"]
  if pol:
    dw, mask, shift = hw.sdma_fields(family, "COPY_LINEAR")[pol[0]]
    c[dw] |= (1 & mask) << shift
    assert f"{pol[0]}=1" in hw.format_sdma(family, c), hw.format_sdma(family, c)

def test_trace_names_kfd_enums_and_flags_and_decodes_doorbells():
  """IOCTL_TRACE on AMD: KFD queue types, allocation flags and event types in the words of kfd_ioctl.h (each checked
  against the header constant), MAP_MEMORY_TO_GPU's device list followed, and each doorbell followed by the AQL packets
  (the dispatch with its launch) or SDMA packets it submitted."""
  import re
  from baregrad.ctypes_autogen import kfd
  from baregrad.drivers.port import TracingPort, MockPort
  from baregrad.drivers.mock.amd import MockAMDGPU
  from baregrad.drivers.amd import AMDDevice
  from tests.drivers.amd.test_amd_mock import amd_kernels
  lines: list[str] = []
  dev = AMDDevice("AMD", port=TracingPort(MockPort(MockAMDGPU()), out=lines.append))
  try:
    prg = dev.runtime(dev, "fill", amd_kernels())
    out, host = dev.allocator.alloc(64), bytearray(64)
    prg(out, global_size=(4, 1, 1), local_size=(4, 1, 1), vals=(1,))
    dev.allocator._copyout(memoryview(host), out)
    text = "\n".join(lines)
    assert f"queue_type={kfd.KFD_IOC_QUEUE_TYPE_COMPUTE_AQL} (COMPUTE_AQL)" in text and f"queue_type={kfd.KFD_IOC_QUEUE_TYPE_SDMA} (SDMA)" in text
    assert f"event_type={kfd.KFD_IOC_EVENT_SIGNAL} (SIGNAL)" in text and f"event_type={kfd.KFD_IOC_EVENT_HW_EXCEPTION} (HW_EXCEPTION)" in text
    m = re.search(r"flags=(0x[0-9a-f]+) \(([A-Z_|]+)\)", [l for l in lines if "ALLOC_MEMORY_OF_GPU(vram)" in l][0])
    assert m is not None
    words = m.group(2).split("|")
    assert "VRAM" in words and sum(getattr(kfd, "KFD_IOC_ALLOC_MEM_FLAGS_" + w) & 0xFFFFFFFF for w in words) == int(m.group(1), 16)
    assert re.search(rf"device_ids_array_ptr=0x[0-9a-f]+ -> c_uint\w*\[1\] \[{dev.gpu_id:#x}\]", text), text[:2000]
    aql = [l for l in lines if "doorbell" in l and "DISPATCH" in l]
    assert aql and "launch 'fill' grid=(4, 1, 1) block=(4, 1, 1)" in aql[0] and "WAIT_REG_MEM" in aql[0], aql
    assert any("doorbell64" in l and "COPY_LINEAR" in l for l in lines), [l for l in lines if "doorbell" in l]
  finally: dev.close()
