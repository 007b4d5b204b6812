"""`python3 -m baregrad.queues` and baregrad.queues.report(): live queue, timeline and signal state of the HCQ devices,
on the NV and AMD mocks."""
from tests.paths import REPO
import os, subprocess, sys
import pytest
from baregrad import queues
from baregrad.drivers.port import make_port
from baregrad.hcq import HCQSignal

def _open(driver: str):
  if driver == "NV":
    from baregrad.drivers.mock.nv import MockNVGPU
    from baregrad.drivers.nv import NVDevice
    return NVDevice("NV", port=make_port(MockNVGPU()))
  from baregrad.drivers.mock.amd import MockAMDGPU
  from baregrad.drivers.amd import AMDDevice
  return AMDDevice("AMD", port=make_port(MockAMDGPU()))

@pytest.mark.parametrize("driver", ["NV", "AMD"])
def test_report_shows_a_blocked_queue_and_the_live_signals(driver):
  dev = _open(driver)
  try:
    gate, done = HCQSignal(dev, 3), HCQSignal(dev)
    dev.compute_queue_t().wait(gate, 7).signal(done, 1).submit(dev)
    text = queues.report([dev])
    blocked = ("(pending)" if driver == "NV" else "the CP is here", f"WAIT      addr={gate.va_addr:#x} value=7" if driver == "NV"
               else f"WAIT_REG_MEM mem[{gate.va_addr:#x}] & 0xffffffff >= value=7")
    assert f"timeline {dev.timeline_signal.va_addr:#x} value" in text and all(b in text for b in blocked), text
    assert f"{gate.va_addr:#x} value 3 timestamp 0" in text and f"{dev.timeline_signal.va_addr:#x} value 0 timestamp 0  (timeline)" in text
    assert "signals: 3 live of" in text
    gate.value = 7
    done.wait(1, timeout_ms=10000)
    assert f"{done.va_addr:#x} value 1" in queues.report([dev])
  finally: dev.close()

def test_command_line_on_the_mocks():
  env = {k: v for k, v in os.environ.items() if k not in ("DEV", "IOCTL_TRACE", "PROFILE")}
  env.update(PYTHONPATH=str(REPO), MOCKGPU="1")
  r = subprocess.run([sys.executable, "-m", "baregrad.queues", "NV", "AMD"], capture_output=True, text=True, env=env, timeout=120)
  assert r.returncode == 0, r.stderr
  assert "NV: timeline" in r.stdout and "compute channel (token 1)" in r.stdout and "AMD (gfx1100" in r.stdout, r.stdout
  assert r.stdout.count("(timeline)") == 2
  r = subprocess.run([sys.executable, "-m", "baregrad.queues", "NV:9"], capture_output=True, text=True, env=env, timeout=120)
  assert r.returncode == 1 and "not open: NV:9" in r.stderr, (r.stdout, r.stderr)
