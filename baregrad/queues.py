"""Live queue, timeline and signal state of the HCQ devices open in this process, in words.

`python3 -m baregrad.queues [DEVICE ...]` opens the named devices (default: those that open here; with MOCKGPU=1 the mock
GPUs) and prints for each its timeline (value now, last submitted), every hardware queue with its read and write
pointers and the packets around them decoded (the driver's own `queue_state()`: the packet an engine is blocked on is
marked, each launch followed to its kernel), and every live signal (address, value, last timestamp). Inside a program,
`report()` prints the same for the devices it has open: call it from a debugger, a signal handler or a test while work
is queued."""
from __future__ import annotations
import argparse, sys
from typing import Any, Sequence
from baregrad.hal import Device, DeviceUnavailable
from baregrad.hal.device import KNOWN_DEVICES

def signal_state(dev: Any, limit: int = 32) -> str:
  """The device's live signals (its signal pool's used slots): address, value and last timestamp, the timeline marked."""
  pool = getattr(dev, "signal_pool", None)
  if pool is None: return "  (no signal pool)"
  used = pool.used()
  tl = getattr(getattr(dev, "timeline_signal", None), "va_addr", None)
  lines = [f"  signals: {len(used)} live of {pool.size // pool.SLOT}"]
  for va, value, ts in used[:limit]:
    lines.append(f"    {va:#x} value {value} timestamp {ts}" + ("  (timeline)" if va == tl else ""))
  if len(used) > limit: lines.append(f"    ... {len(used) - limit} more")
  return "\n".join(lines)

def device_state(dev: Any) -> str:
  """One HCQ device: its queue state (timeline and queues, decoded) and its live signals."""
  if not hasattr(dev, "queue_state"): return f"{dev.device}: not a hardware-command-queue device (no queues to show)"
  try: qs = dev.queue_state()
  except Exception as e: qs = f"{dev.device}: cannot read its queue state: {type(e).__name__}: {e}"
  return qs + "\n" + signal_state(dev)

def report(devices: Sequence[Any] | None = None) -> str:
  """The state of `devices` (default: every device open in this process), one block each."""
  devs = list(devices) if devices is not None else [Device[n] for n in Device.opened()]
  return "\n\n".join(device_state(d) for d in devs) if devs else "(no device is open in this process)"

def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(prog="python3 -m baregrad.queues", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("devices", nargs="*", help="device names (NV, AMD:1, ...); default: every known GPU device that opens here")
  a = ap.parse_args(argv)
  names = a.devices or [n for n in KNOWN_DEVICES if n != "CPU"]
  devs, missing = [], []
  for n in names:
    try: devs.append(Device[n])
    except (DeviceUnavailable, ValueError) as e: missing.append(f"{n}: {e}")
  if devs: print(report(devs))
  for m in missing: print(f"not open: {m}", file=sys.stderr)
  return 0 if devs or not a.devices else 1

if __name__ == "__main__": sys.exit(main())
