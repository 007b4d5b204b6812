"""Per-launch global scratch of the NV driver (drivers/nv/scratch.py), which a kernel that builds its tensor maps on
the device asks for with a last `.param .u64 tmap_scratch` and a TMAP_SCRATCH_NOTE line: each launch (eager, or
recorded in a graph) gets blocks x bytes of it, 128-byte aligned (the .b1024 tensor-map object tensormap.replace
addresses: PTX ISA 9.7.9.28), and the caller passes only its own buffers and values."""
from __future__ import annotations
import numpy as np
from baregrad.drivers.port import make_port
from baregrad.drivers.mock.nv import MockNVGPU
from baregrad.drivers.nv import NVDevice
from baregrad.hcq.graph import HCQGraph
from baregrad.codegen.renderer.ptx import TMAP_SCRATCH_NOTE, tmap_scratch_bytes

PER_BLOCK = 256

def scratch_ptx() -> str:
  """Block b stores the address of its scratch slot (tmap_scratch + b * PER_BLOCK) as out[b], and writes its slot's
  first word (the slot is its own: no other block touches it)."""
  return f"""
.version 8.3
.target sm_90a
.address_size 64
{TMAP_SCRATCH_NOTE}{PER_BLOCK}
.visible .entry sc(.param .u64 out, .param .u64 tmap_scratch) {{
  .reg .b32 %r<4>; .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [out]; cvta.to.global.u64 %rd1, %rd1;
  ld.param.u64 %rd2, [tmap_scratch]; cvta.to.global.u64 %rd2, %rd2;
  mov.u32 %r1, %ctaid.x;
  mul.wide.u32 %rd3, %r1, {PER_BLOCK}; add.s64 %rd4, %rd2, %rd3;
  st.global.u32 [%rd4], %r1;
  mul.wide.u32 %rd5, %r1, 8; add.s64 %rd6, %rd1, %rd5; st.global.u64 [%rd6], %rd4;
  ret;
}}
"""

def _u64(dev: NVDevice, buf, n: int) -> np.ndarray:
  out = np.zeros(n, np.uint64)
  dev.allocator._copyout(memoryview(out).cast("B"), buf)
  return out

def test_each_launch_gets_its_own_aligned_scratch():
  assert tmap_scratch_bytes(scratch_ptx()) == PER_BLOCK and tmap_scratch_bytes(".entry x()") == 0
  dev = NVDevice("NV", port=make_port(MockNVGPU(arch="sm_90")))
  try:
    prg = dev.runtime(dev, "sc", scratch_ptx().encode())
    assert prg.nargs == 1 and len(prg.params) == 2
    outs = [dev.allocator.alloc(8 * 8) for _ in range(2)]
    for o in outs: prg(o, global_size=(8, 1, 1), local_size=(32, 1, 1))   # eager: the ring
    dev.synchronize()
    a, b = (_u64(dev, o, 8) for o in outs)
    for got in (a, b):
      assert got[0] % 128 == 0 and (np.diff(got.astype(np.int64)) == PER_BLOCK).all(), got
    assert abs(int(b[0]) - int(a[0])) >= 8 * PER_BLOCK, "two launches in flight share scratch"
    # a graph's launches keep scratch of their own (their constant banks hold the address for every replay)
    g_out = [dev.allocator.alloc(8 * 8) for _ in range(2)]
    g = HCQGraph(dev, [(prg, [g_out[0]], (), (8, 1, 1), (32, 1, 1)), (prg, [g_out[1]], (), (8, 1, 1), (32, 1, 1))])
    g.replay(); dev.synchronize()
    c, d = (_u64(dev, o, 8) for o in g_out)
    assert c[0] % 128 == 0 and d[0] % 128 == 0 and abs(int(c[0]) - int(d[0])) >= 8 * PER_BLOCK, (c, d)
    assert all(a[0] != x[0] for x in (c, d))
  finally: dev.close()


def test_a_replayed_capture_gets_scratch_of_its_own(tmp_path, monkeypatch):
  """NV_CAPTURE of a launch with scratch, replayed on a fresh mock (hcq/replay.py): the replay's constant bank names
  the replaying launch's scratch, not the captured address (unmapped there: the mock would fault), and the outputs are
  the captured ones."""
  from baregrad.hcq.replay import replay
  for k in ("MOCKGPU_ARCH", "MOCKGPU_COUNT", "NV_CAPTURE"): monkeypatch.delenv(k, raising=False)
  src = scratch_ptx().replace("  mul.wide.u32 %rd5, %r1, 8; add.s64 %rd6, %rd1, %rd5; st.global.u64 [%rd6], %rd4;",
                              "  ld.global.u32 %r2, [%rd4]; mul.wide.u32 %rd5, %r1, 4; add.s64 %rd6, %rd1, %rd5; "
                              "st.global.u32 [%rd6], %r2;")
  monkeypatch.setenv("NV_CAPTURE", str(tmp_path))
  dev = NVDevice("NV", port=make_port(MockNVGPU(arch="sm_90")))
  try:
    prg = dev.runtime(dev, "sc", src.encode())
    out = dev.allocator.alloc(8 * 4)
    prg(out, global_size=(8, 1, 1), local_size=(32, 1, 1))
    dev.synchronize()
  finally: dev.close()
  monkeypatch.delenv("NV_CAPTURE")
  from baregrad.drivers.nv.program import ptx_params
  dev = NVDevice("NV", port=make_port(MockNVGPU(arch="sm_90")))
  try:
    dev.allocator.alloc(8 << 20)   # (video memory first: the replay's scratch ring lands elsewhere than the capture's)
    rep = replay(str(tmp_path), dev, dev.arch)
    # the parameter the replayed launch ran with: an address in this device's scratch ring
    cb = dev.port.mock.launches[-1]["cbank0"]
    at = int.from_bytes(dev.port.mock.read_gpu(cb + dev.param_off + ptx_params(src, "sc")[-1][0], 8), "little")
    ring = dev.launch_scratch.mem
    assert ring is not None and ring.va <= at < ring.va + ring.size, (hex(at), ring)
  finally: dev.close()
  assert rep.first_difference is None and rep.launches == 1, rep.text()
