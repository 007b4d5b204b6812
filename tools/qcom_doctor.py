#!/usr/bin/env python3
"""Adreno bring-up over KGSL, stage by stage: /dev/kgsl-3d0 and the chip it reports (refused by name if not in the
table), a compute context, GPU objects mapped by id, an IB writing memory, a CACHE_FLUSH_TS signal, a CP_WAIT_REG_MEM
released by the host, GPU timestamps (CP_ALWAYS_ON_COUNTER), and a faulting submission reported by context and
timestamp with a fresh context working after it. Each stage says what it saw; a failing stage prints its error and the
later stages still run.

Runs on a Qualcomm device with KGSL (the user able to open /dev/kgsl-3d0), or with --mock on the mock Adreno
(baregrad.drivers.mock.adreno). No kernel dispatch stage yet: the driver has no ir3 compile path.

  python tools/qcom_doctor.py [--mock]"""
from __future__ import annotations

import argparse
import ctypes
import os
import struct
import sys
import traceback
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from baregrad.drivers.qcom.kgsl import KGSL, GPUFault  # noqa: E402
from baregrad.drivers.qcom.pm4 import CommandStream  # noqa: E402


def _ib(obj: Any, words: list[int]) -> tuple[int, int]:
  ctypes.memmove(obj.cpu, struct.pack(f"<{len(words)}I", *words), 4 * len(words))
  return (obj.gpuaddr, len(words))


def _u32(obj: Any, off: int) -> int:
  return struct.unpack_from("<I", bytes(obj.view()[off:off + 4]))[0]


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--mock", action="store_true", help="run on the mock Adreno instead of /dev/kgsl-3d0")
  a = ap.parse_args(argv)
  st: dict[str, Any] = {}
  failed = 0

  def stage(name: str, fn: Callable[[], str]) -> None:
    nonlocal failed
    try: print(f"[ ok ] {name}: {fn()}")
    except Exception as e:  # a doctor reports every stage, whatever failed before
      failed += 1
      print(f"[FAIL] {name}: {type(e).__name__}: {e}")
      if os.environ.get("DOCTOR_TRACE"): traceback.print_exc()

  def open_dev() -> str:
    port = None
    if a.mock:
      from baregrad.drivers.mock.adreno.kgsl import MockKGSL
      from baregrad.drivers.port import MockPort
      port = MockPort(MockKGSL())
    d = st["dev"] = KGSL(port)
    return f"chip id {d.chip_id:#010x}: {d.chip.name}, gen {d.chip.gen}, GMEM {d.chip.gmem_bytes >> 10} KiB"

  def context() -> str:
    st["ctx"] = st["dev"].create_context()
    return f"context {st['ctx']}"

  def memory() -> str:
    d = st["dev"]
    st["data"], st["ib"] = d.alloc(1 << 16), d.alloc(1 << 16)
    return f"objects {st['data'].id} at {st['data'].gpuaddr:#x} and {st['ib'].id} at {st['ib'].gpuaddr:#x}, mapped"

  def write() -> str:
    d, data = st["dev"], st["data"]
    ts = d.submit(st["ctx"], [_ib(st["ib"], CommandStream(d.chip.gen).mem_write(data.gpuaddr, 0x1234).event_write_ts(data.gpuaddr + 4, 7).words)])
    d.wait(st["ctx"], ts, 2000)
    got = (_u32(data, 0), _u32(data, 4))
    if got != (0x1234, 7): raise RuntimeError(f"memory holds {got}, expected (0x1234, 7)")
    return f"timestamp {ts} retired; CP_MEM_WRITE and CACHE_FLUSH_TS wrote {got}"

  def host_signal() -> str:
    d, data = st["dev"], st["data"]
    ts = d.submit(st["ctx"], [_ib(st["ib"], CommandStream(d.chip.gen).wait_reg_mem(data.gpuaddr + 8, 1).mem_write(data.gpuaddr + 12, 1).words)])
    try:
      d.wait(st["ctx"], ts, 50)
      raise RuntimeError("the wait returned before the host signalled")
    except TimeoutError: pass
    ctypes.memmove(data.cpu + 8, struct.pack("<I", 1), 4)
    d.wait(st["ctx"], ts, 2000)
    return "CP_WAIT_REG_MEM held the queue until the host wrote the signal"

  def timestamps() -> str:
    d, data = st["dev"], st["data"]
    d.wait(st["ctx"], d.submit(st["ctx"], [_ib(st["ib"], CommandStream(d.chip.gen).timestamp(data.gpuaddr + 16).timestamp(data.gpuaddr + 24).words)]), 2000)
    t0, t1 = struct.unpack_from("<QQ", bytes(data.view()[16:32]))
    if not t1 >= t0 > 0: raise RuntimeError(f"always-on counter went {t0} -> {t1}")
    return f"CP_ALWAYS_ON_COUNTER {t0} -> {t1}"

  def fault() -> str:
    d = st["dev"]
    ctx = d.create_context()
    ts = d.submit(ctx, [_ib(st["ib"], CommandStream(d.chip.gen).mem_write(0x10, 1).words)])
    try:
      d.wait(ctx, ts, 2000)
      return "a write to GPU address 0x10 did not fault (no GPU MMU enforcement?)"
    except GPUFault as e: msg = str(e)
    ctx2 = d.create_context()
    d.wait(ctx2, d.submit(ctx2, [_ib(st["ib"], CommandStream(d.chip.gen).nop().words)]), 2000)
    return f"{msg}; context {ctx2} runs after it"

  for name, fn in [("open", open_dev), ("context", context), ("memory", memory), ("IB write + signal", write),
                   ("host signal", host_signal), ("timestamps", timestamps), ("fault recovery", fault)]:
    stage(name, fn)
  print(f"{failed} stage(s) failed")
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
