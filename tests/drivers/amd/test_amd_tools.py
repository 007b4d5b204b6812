"""AMD command formats (encode/decode round trips, hypothesis) and the tools: amd_decode (captures, raw streams, the demo)
and amd_doctor --mock."""
from __future__ import annotations
from tests.paths import REPO
import io, os, struct, sys, contextlib
import pytest
from hypothesis import given, settings, strategies as st
from baregrad.drivers.amd import hw

sys.path.insert(0, os.path.join(str(REPO), "tools"))
import amd_decode, amd_doctor  # noqa: E402

FAMILIES = st.sampled_from(["gfx11", "gfx9"])
ADDR = st.integers(0, (1 << 48) - 1).map(lambda a: a & ~7)

@settings(max_examples=150, deadline=None)
@given(ko=ADDR, ka=ADDR, grid=st.tuples(*[st.integers(1, (1 << 32) - 1)] * 3), wg=st.tuples(*[st.integers(1, 1024)] * 3),
       lds=st.integers(0, 65536), priv=st.integers(0, 1 << 20), barrier=st.booleans(), acq=st.integers(0, 2), rel=st.integers(0, 2))
def test_aql_dispatch_round_trip(ko, ka, grid, wg, lds, priv, barrier, acq, rel):
  w = hw.aql_dispatch(ko, ka, grid, wg, lds, priv, barrier, acq, rel)
  assert len(w) == 16 and all(0 <= x < 1 << 32 for x in w)
  d = hw.decode_aql(w)
  assert (d["type"], d["kernel_object"], d["kernarg"], d["grid"], d["workgroup"]) == (hw.AQL_DISPATCH, ko, ka, grid, wg)
  assert (d["group_segment"], d["private_segment"], d["barrier"], d["acquire"], d["release"]) == (lds, priv, int(barrier), acq, rel)
  assert d["dims"] == (3 if grid[2] > 1 or wg[2] > 1 else 2 if grid[1] > 1 or wg[1] > 1 else 1)

@settings(max_examples=100, deadline=None)
@given(fam=FAMILIES, ib=ADDR, ndw=st.integers(1, (1 << 20) - 1), barrier=st.booleans())
def test_aql_pm4_ib_round_trip(fam, ib, ndw, barrier):
  d = hw.decode_aql(hw.aql_pm4_ib(fam, ib, ndw, barrier))
  assert d["type"] == hw.AQL_VENDOR and d["format"] == hw.AMD_AQL_FORMAT_PM4_IB and d["dw_count_remain"] == 10 and d["barrier"] == barrier
  c = d["ib_cmd"]
  assert c[1] | (c[2] << 32) == ib and c[3] & 0xFFFFF == ndw and (c[3] >> 23) & 1

@settings(max_examples=100, deadline=None)
@given(fam=FAMILIES, addr=ADDR, value=st.integers(0, (1 << 32) - 1), v64=st.integers(0, (1 << 64) - 1), ctx=st.integers(0, (1 << 32) - 1),
       src=ADDR, dst=ADDR, n=st.integers(1, hw.PM4_COPY_MAX))
def test_pm4_round_trip(fam, addr, value, v64, ctx, src, dst, n):
  w = hw.pm4_wait_reg_mem(fam, addr, value) + hw.pm4_release_mem(fam, addr, v64, 2, 2, ctx) + hw.pm4_acquire_mem(fam) + hw.pm4_dma_data(fam, dst, src, n)
  p = hw.PM4[fam]
  pk = hw.split_pm4(w)
  assert [op for _, op, _ in pk] == [p.PACKET3_WAIT_REG_MEM, p.PACKET3_RELEASE_MEM, p.PACKET3_ACQUIRE_MEM, p.PACKET3_DMA_DATA]
  wait, rel, _, dma = (b for _, _, b in pk)
  assert wait[1] | (wait[2] << 32) == addr and wait[3] == value and wait[0] & 7 == hw.WAIT_GEQ
  assert rel[2] | (rel[3] << 32) == addr and rel[4] | (rel[5] << 32) == v64 and rel[6] == ctx and (rel[1] >> 29) & 7 == 2 and (rel[1] >> 24) & 7 == 2
  assert dma[1] | (dma[2] << 32) == src and dma[3] | (dma[4] << 32) == dst and dma[5] == n
  text = hw.format_pm4(fam, w)
  assert f"value={value}" in text and f"nbytes={n}" in text and f"int_ctxid={ctx}" in text

@settings(max_examples=100, deadline=None)
@given(fam=FAMILIES, addr=ADDR, value=st.integers(0, (1 << 32) - 1), src=ADDR, dst=ADDR, n=st.integers(1, hw.SDMA_COPY_MAX), ctx=st.integers(0, (1 << 28) - 1))
def test_sdma_round_trip(fam, addr, value, src, dst, n, ctx):
  w = hw.sdma_copy(fam, dst, src, n) + hw.sdma_fence(fam, addr, value) + hw.sdma_poll(fam, addr, value) + hw.sdma_timestamp(fam, addr) + hw.sdma_trap(fam, ctx)
  i, lens = 0, []
  while i < len(w):
    lens.append(hw.sdma_packet_len(fam, w, i))
    i += lens[-1]
  assert lens == [7, 4, 6, 3, 2]
  c = hw.sdma_unpack(fam, "COPY_LINEAR", w[:7])
  assert c["count"] + 1 == n and c["src_addr_31_0"] | (c["src_addr_63_32"] << 32) == src and c["dst_addr_31_0"] | (c["dst_addr_63_32"] << 32) == dst
  f = hw.sdma_unpack(fam, "FENCE", w[7:11])
  assert f["data"] == value and f["addr_31_0"] | (f["addr_63_32"] << 32) == addr
  p = hw.sdma_unpack(fam, "POLL_REGMEM", w[11:17])
  assert p["value"] == value and p["func"] == hw.WAIT_GEQ and p["mem_poll"] == 1 and p["retry_count"] == 0xFFF
  t = hw.sdma_unpack(fam, "TIMESTAMP_GET_GLOBAL", w[17:20])
  assert (t["write_addr_31_3"] << 3) | (t["write_addr_63_32"] << 32) == addr
  assert hw.sdma_unpack(fam, "TRAP", w[20:])["int_context"] == ctx

def test_encoders_refuse_what_does_not_fit():
  with pytest.raises(ValueError, match="1..0x400000 per COPY_LINEAR"): hw.sdma_copy("gfx11", 0, 0, hw.SDMA_COPY_MAX + 1)
  with pytest.raises(ValueError, match="4-byte aligned"): hw.sdma_fence("gfx9", 2, 0)
  with pytest.raises(ValueError, match="8-byte aligned"): hw.sdma_timestamp("gfx11", 4)
  with pytest.raises(ValueError, match="workgroup size"): hw.aql_dispatch(0, 0, (1, 1, 1), (0, 1, 1), 0, 0)
  with pytest.raises(ValueError, match="does not fit its field"): hw.sdma_pack("gfx9", "COPY_LINEAR", count=1 << 22)
  assert "not one this driver emits" in hw.format_sdma("gfx11", [0xFF])

def _run(fn, *args) -> str:
  out = io.StringIO()
  with contextlib.redirect_stdout(out): rc = fn(list(args))
  return f"rc={rc}\n" + out.getvalue()

def test_decode_capture_and_raw_streams(tmp_path, monkeypatch):
  monkeypatch.setenv("AMD_CAPTURE", str(tmp_path / "cap"))
  monkeypatch.delenv("MOCKGPU_AMD_ARCH", raising=False)
  demo = _run(amd_decode.main, "demo")
  assert "BARRIER_AND barrier" in demo and "PM4_IB" in demo and "COPY_LINEAR" in demo and "TRAP" in demo
  cap = _run(amd_decode.main, "capture", str(tmp_path / "cap"))
  assert "submission 0: copy queue (SDMA)" in cap and "WAIT_REG_MEM" in cap and "RELEASE_MEM" in cap
  # a raw SDMA stream as text of hex words, a PM4 IB as bytes
  (tmp_path / "s.txt").write_text(" ".join(f"{x:#010x}" for x in hw.sdma_fence("gfx11", 0x1000, 5)))
  assert "FENCE addr=0x1000 value=5" in _run(amd_decode.main, "sdma", str(tmp_path / "s.txt"))
  (tmp_path / "ib.bin").write_bytes(struct.pack("<7I", *hw.pm4_wait_reg_mem("gfx9", 0x40, 9)))
  assert "WAIT_REG_MEM mem[0x40]" in _run(amd_decode.main, "pm4", str(tmp_path / "ib.bin"), "--arch", "gfx942")

def test_doctor_on_the_mock(monkeypatch):
  out = _run(amd_doctor.main, "--mock", "--n", "1024")
  oks = out.count("-> ok")
  assert oks >= 7, out   # the stages before a kernel runs; with the RDNA3 interpreter all 10
  for s in ("KFD ioctl interface 1.17", "gfx1100 (supported)", "agree", "ticks/us measured", "woke"): assert s in out, out

def test_doctor_open_stage_is_told_apart_into_steps(monkeypatch):
  """Stage 3 (opening the device) reports its steps: each passes with its calls on the mock; on a KFD that refuses
  CREATE_EVENT the events step fails at that call with its errno, the steps before passed and the queues were not reached."""
  import errno
  from baregrad.ctypes_autogen import kfd
  import baregrad.drivers.mock.amd as mock_amd
  out = _run(amd_doctor.main, "--mock", "--n", "1024")
  for i, step in enumerate(("KFD", "VM and apertures", "memory", "events", "queues")):
    assert f"step {i + 1}/5 {step}: ok" in out, (step, out)
  assert "AMDKFD_IOC_CREATE_QUEUE x2" in out and "AMDKFD_IOC_ACQUIRE_VM" in out
  class NoEvents(mock_amd.MockAMDGPU):
    def ioctl(self, fd, request, argp, argsize):
      return -errno.EINVAL if request == kfd.AMDKFD_IOC_CREATE_EVENT else super().ioctl(fd, request, argp, argsize)
  monkeypatch.setattr(mock_amd, "MockAMDGPU", NoEvents)
  out = _run(amd_doctor.main, "--mock", "--n", "1024")
  assert "step 3/5 memory: ok" in out and "step 4/5 events: FAILED at AMDKFD_IOC_CREATE_EVENT: IoctlError:" in out and "EINVAL" in out, out
  assert "step 5/5 queues: not reached" in out

def test_aql_view_follows_each_dispatch_to_its_launch(tmp_path, monkeypatch):
  """`amd_decode.py aql` prints each DISPATCH's launch line like the NV GPFIFO view: kernel name from the code object
  given with --code at its load address, grid in workgroups, block, LDS, and from the kernel descriptor the VGPRs and
  wave size; the AMD_CAPTURE view does the same from the captured code object."""
  import ctypes
  from baregrad.drivers.port import make_port
  from baregrad.drivers.mock.amd import MockAMDGPU
  from baregrad.drivers.amd import AMDDevice
  from tests.drivers.amd.test_amd_mock import amd_kernels
  monkeypatch.setenv("AMD_CAPTURE", str(tmp_path / "cap"))
  dev = AMDDevice("AMD", port=make_port(MockAMDGPU()))
  try:
    lib = amd_kernels()
    prg = dev.runtime(dev, "fill", lib)
    out = dev.allocator.alloc(64)
    prg(out, vals=(3,), global_size=(16, 1, 1), local_size=(4, 1, 1), wait=True)
    r = dev.aql
    (tmp_path / "ring.bin").write_bytes(ctypes.string_at(r.ring.cpu, 64 * r.put))
    (tmp_path / "code.bin").write_bytes(lib)
    vg = (prg.descriptor.compute_pgm_rsrc1 & 0x3F) + 1   # GRANULATED_WORKITEM_VGPR_COUNT (bits 5:0), wave32 granule 8
    want = f"launch 'fill' grid=(16, 1, 1) block=(4, 1, 1) shared={prg.group_segment_size} vgprs={8 * vg} wave32"
    text = _run(amd_decode.main, "aql", str(tmp_path / "ring.bin"), "--base", hex(r.ring.va), "--code", f"{prg.image.va:#x}={tmp_path / 'code.bin'}")
    assert want in text, text
    # without the code object the dispatch still shows what the packet says, and why there is no more
    bare = _run(amd_decode.main, "aql", str(tmp_path / "ring.bin"), "--kernel", f"{prg.kd_va:#x}=fill")
    assert "launch 'fill' grid=(16, 1, 1) block=(4, 1, 1)" in bare and "vgprs" not in bare, bare
    cap = _run(amd_decode.main, "capture", str(tmp_path / "cap"))
    assert want in cap, cap
  finally: dev.close()
