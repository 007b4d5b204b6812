"""NV_CAPTURE / AMD_CAPTURE and their replay on the mocks (hcq/capture.py, hcq/replay.py, tools/*_decode.py): a capture
replayed on a fresh mock, its buffers at other addresses, gives the captured outputs; a tampered input or launch
descriptor is reported as the first difference."""
from __future__ import annotations
import json, os, struct, sys
import pytest
from tests.paths import REPO
from baregrad.drivers.port import make_port
from baregrad.hcq.replay import ReplayError, replay

sys.path.insert(0, os.path.join(str(REPO), "tools"))

@pytest.fixture(autouse=True)
def default_mocks(monkeypatch):
  for k in ("MOCKGPU_ARCH", "MOCKGPU_AMD_ARCH", "MOCKGPU_COUNT", "NV_CAPTURE", "AMD_CAPTURE"): monkeypatch.delenv(k, raising=False)

def _nv():
  from baregrad.drivers.mock.nv import MockNVGPU
  from baregrad.drivers.nv import NVDevice
  dev = NVDevice("NV", port=make_port(MockNVGPU()))
  return dev, dev.arch

def _amd():
  from baregrad.drivers.mock.amd import MockAMDGPU
  from baregrad.drivers.amd.device import AMDDevice
  dev = AMDDevice("AMD", port=make_port(MockAMDGPU()))
  return dev, dev.target.name

def _u32(dev, buf, n: int) -> list[int]:
  out = bytearray(4 * n)
  dev.allocator._copyout(memoryview(out), buf)
  return list(struct.unpack(f"<{n}I", out))

def _workload(driver: str, dev) -> list[int]:
  """Two dependent launches (the second reads the first's output), one with scalar values; returns the final output."""
  alloc = dev.allocator.alloc
  if driver == "NV":
    from baregrad.drivers.nv.testkernels import KERNELS
    step = dev.runtime(dev, "step", dev.compiler.compile(KERNELS))
    a, b = alloc(256 * 4), alloc(256 * 4)
    dev.allocator._copyin(a, memoryview(struct.pack("<256I", *range(256))))
    step(b, a, global_size=(2, 1, 1), local_size=(128, 1, 1), vals=(3, 5))   # b = 3a + 5
    step(a, b, global_size=(2, 1, 1), local_size=(128, 1, 1), vals=(2, 1))   # a = 2b + 1
    dev.synchronize()
    out = _u32(dev, a, 256)
    assert out == [6 * i + 11 for i in range(256)]
    return out
  from baregrad.drivers.amd.testkernels import LOCAL_ARRAY, spill_ll, local_array_expected, spill_expected
  la = dev.runtime(dev, "local_array", dev.compiler.compile(LOCAL_ARRAY))
  sp = dev.runtime(dev, "spill", dev.compiler.compile(spill_ll()))
  a, b = alloc(64 * 4 + 40 * 4), alloc(64 * 4)
  dev.allocator._copyin(a, memoryview(bytes(64 * 4 + 40 * 4)))
  la(a, global_size=(1, 1, 1), local_size=(64, 1, 1), vals=(3,))
  sp(b, a, global_size=(1, 1, 1), local_size=(64, 1, 1))
  dev.synchronize()
  out = _u32(dev, b, 64)
  assert out == spill_expected(local_array_expected(3, 64) + [0] * 40, 64)
  return out

@pytest.fixture(scope="module", params=["NV", "AMD"])
def captured(request, tmp_path_factory):
  """(driver, capture directory) of the workload run once with *_CAPTURE set."""
  driver, d = request.param, tmp_path_factory.mktemp(f"cap-{request.param}")
  with pytest.MonkeyPatch.context() as mp:
    for k in ("MOCKGPU_ARCH", "MOCKGPU_AMD_ARCH", "MOCKGPU_COUNT"): mp.delenv(k, raising=False)
    mp.setenv(f"{driver}_CAPTURE", str(d))
    dev, _ = (_nv if driver == "NV" else _amd)()
    try: _workload(driver, dev)
    finally: dev.close()
  return driver, str(d)

def _fresh(driver: str):
  """A new mock device with 1 MiB allocated first, so the replay's buffers land at other addresses than the capture's."""
  dev, arch = (_nv if driver == "NV" else _amd)()
  dev.allocator.alloc(1 << 20)
  return dev, arch

def _copy(src: str, dst) -> str:
  import shutil
  shutil.copytree(src, dst)
  return str(dst)

def test_capture_meta_names_rings_doorbells_kernels_and_timeline(captured):
  driver, d = captured
  meta = json.load(open(os.path.join(d, "meta.json")))
  kernels = ["step", "step"] if driver == "NV" else ["local_array", "spill"]
  assert [L["kernel"] for L in meta["launches"]] == kernels
  subs = [s for s in meta["submissions"] if s["launches"]]
  assert [k["kernel"] for s in subs for k in s["launches"]] == kernels
  for s in meta["submissions"]:
    assert all(os.path.exists(os.path.join(d, f)) for f in s["files"]) and s["timeline"] >= 1 and s["doorbell"] >= 0
  tl = [s["timeline"] for s in meta["submissions"]]
  assert tl == sorted(tl)
  desc = {"NV": {"qmd", "cbank0"}, "AMD": {"kernargs", "aql"}}[driver]
  for L in meta["launches"]:
    assert set(L["descriptor"]) == desc and os.path.exists(os.path.join(d, L["code"]))
    for a in L["args"]: assert os.path.getsize(os.path.join(d, a["before"])) == os.path.getsize(os.path.join(d, a["after"])) == a["size"]
  if driver == "NV":
    s = subs[0]
    assert {"gpfifo", "gp_entry", "pushbuf", "gp_put"} <= set(s) and any(f.endswith(f"qmd-{s['launches'][0]['qmd']:x}.bin") for f in s["files"])
  else:
    s = subs[0]
    assert {"ring", "slots"} <= set(s) and any(f.endswith(f"kernargs-{s['launches'][0]['kernarg']:x}.bin") for f in s["files"])

def test_replay_on_a_fresh_mock_gives_the_captured_outputs(captured):
  driver, d = captured
  dev, arch = _fresh(driver)
  try: rep = replay(d, dev, arch)
  finally: dev.close()
  assert rep.first_difference is None and rep.launches == 2, rep.text()
  moved = [ln for ln in rep.lines if "relocated" in ln]
  assert len(moved) == 2 and any(p.split(" -> ")[0] != p.split(" -> ")[1] for ln in moved for p in ln.split("relocated ")[1].split(", "))
  assert rep.text().endswith("replayed 2 launches: outputs identical to the capture")

def test_a_tampered_input_is_the_first_difference(captured, tmp_path):
  driver, d = captured
  d = _copy(d, tmp_path / "t")
  meta = json.load(open(os.path.join(d, "meta.json")))
  arg = meta["launches"][1]["args"][1]   # the second launch's input
  p = os.path.join(d, arg["before"])
  data = bytearray(open(p, "rb").read())
  data[8] ^= 0x10                        # word 2 of the input
  open(p, "wb").write(bytes(data))
  dev, arch = _fresh(driver)
  try: rep = replay(d, dev, arch)
  finally: dev.close()
  kernel = meta["launches"][1]["kernel"]
  assert rep.first_difference is not None and rep.first_difference.startswith(f"launch 1 ({kernel}): output argument 0 (captured at "), rep.text()
  if driver == "NV": assert "byte 0x8 (32-bit word 2" in rep.first_difference   # elementwise: the same element differs
  assert "launch 0" not in rep.first_difference and rep.text().splitlines()[1] == "  outputs identical"

def test_a_tampered_launch_descriptor_is_reported(captured, tmp_path):
  """The grid in the captured descriptor cut to one block: the replay executes the captured descriptor (half the output
  is not written) and says where it differs from what the driver writes."""
  driver, d = captured
  d = _copy(d, tmp_path / "t")
  meta = json.load(open(os.path.join(d, "meta.json")))
  L = meta["launches"][0]
  if driver == "NV":
    from baregrad.drivers.nv import hw
    p, ver = os.path.join(d, L["descriptor"]["qmd"]), hw.QMD_VERSION[hw.ARCHS[meta["arch"]].compute]
    w = hw.words_of(open(p, "rb").read())
    hw.set_bits(w, *hw.QMD_LAYOUTS[ver].grid[0], 1)
    open(p, "wb").write(struct.pack(f"<{len(w)}I", *w))
    expect = "descriptor: QMD GRID_WIDTH: captured 0x1, this driver writes 0x2"
  else:
    p = os.path.join(d, L["descriptor"]["aql"])
    w = list(struct.unpack("<16I", open(p, "rb").read()))
    w[3] = 32                            # grid x in work-items: one wave of the 64
    open(p, "wb").write(struct.pack("<16I", *w))
    expect = "descriptor: AQL packet grid: captured (32, 1, 1), this driver writes (64, 1, 1)"
  dev, arch = _fresh(driver)
  try: rep = replay(d, dev, arch)
  finally: dev.close()
  assert rep.first_difference == f"launch 0 ({L['kernel']}): {expect}", rep.text()
  assert "output argument 0" in rep.text().split("launch 1")[0]   # and what it did: part of the output not written

def test_replay_refuses_another_arch(captured):
  driver, d = captured
  if driver == "NV":
    from baregrad.drivers.mock.nv import MockNVGPU
    from baregrad.drivers.nv import NVDevice
    dev = NVDevice("NV", port=make_port(MockNVGPU(arch="sm_80")))
    arch = dev.arch
  else:
    from baregrad.drivers.mock.amd import MockAMDGPU
    from baregrad.drivers.amd.device import AMDDevice
    dev = AMDDevice("AMD", port=make_port(MockAMDGPU(arch="gfx942")))
    arch = dev.target.name
  try:
    with pytest.raises(ReplayError, match=f"the capture was made on {driver} .*; this device is {arch}"): replay(d, dev, arch)
  finally: dev.close()

def test_decode_tools_print_and_replay_a_capture(captured, capsys):
  driver, d = captured
  import nv_decode, amd_decode
  tool = nv_decode if driver == "NV" else amd_decode
  assert tool.main(["capture", d]) == 0
  out = capsys.readouterr().out
  if driver == "NV": assert "EXEC step: QMD 0x" in out and "grid (2, 1, 1) block (128, 1, 1)" in out and "doorbell token" in out
  else: assert "DISPATCH spill: kernel object 0x" in out and "doorbell" in out and "timeline" in out
  assert tool.main(["replay", d]) == 0
  assert capsys.readouterr().out.strip().endswith("outputs identical to the capture")

JIT_PROGRAM = """
import sys, numpy as np
from baregrad import Tensor, jit
@jit
def f(a, b): return (a * 3 + b).relu()
outs = [f(Tensor(np.arange(64, dtype=np.float32) - 8 * i), Tensor(np.full((64,), float(i), np.float32))).numpy() for i in range(4)]
for i, o in enumerate(outs): assert np.array_equal(o, np.maximum((np.arange(64) - 8 * i) * 3 + i, 0)), (i, o[:4])
"""

@pytest.mark.parametrize("driver", ["NV", "AMD"])
def test_a_jits_graph_replays_are_captured_as_launches_and_replayed(driver, tmp_path):
  """A jitted function on the mock, called 4 times (call 3 and 4 replay its recorded HCQGraph): under *_CAPTURE each
  graph replay's launches are kept with the per-launch files of a direct launch (code, descriptor, buffers before and
  after, `graph` naming the replay and kernel), and `replay` runs them again on a fresh mock with the same outputs."""
  import subprocess
  d = tmp_path / "cap"
  env = {k: v for k, v in os.environ.items() if k not in ("DEV", "MOCKGPU_ARCH", "MOCKGPU_AMD_ARCH", "MOCKGPU_COUNT", "JIT", "DEBUG",
                                                          "NV_CAPTURE", "AMD_CAPTURE", "PROFILE")}
  env.update(PYTHONPATH=str(REPO), MOCKGPU="1", DEV=driver, **{f"{driver}_CAPTURE": str(d)})
  r = subprocess.run([sys.executable, "-c", JIT_PROGRAM], capture_output=True, text=True, env=env, timeout=300)
  assert r.returncode == 0, r.stderr[-3000:]
  meta = json.load(open(d / "meta.json"))
  graph = [L for L in meta["launches"] if L.get("graph")]
  assert graph and {L["graph"]["replay"] for L in graph} == {0, 1}, [L.get("graph") for L in meta["launches"]]
  for L in graph:
    assert (d / L["code"]).exists() and L["descriptor"] and all((d / f).exists() for f in L["descriptor"].values())
    assert all((d / a["before"]).exists() and (d / a["after"]).exists() for a in L["args"])
  dev, arch = _fresh(driver)
  try: rep = replay(str(d), dev, arch)
  finally: dev.close()
  assert rep.first_difference is None and rep.launches == len(meta["launches"]), rep.text()
