#!/usr/bin/env python3
"""Print Adreno (a6xx) command streams in words, and ir3 shader disassembly. Input is raw little-endian bytes or text of
hex words ('-' reads stdin).

  python tools/qcom_decode.py pm4 STREAM.bin       type-4 register writes (named from the register database) and
                                                   type-7 packets with their payload fields
  python tools/qcom_decode.py ir3 SHADER.bin [--gpu 630]   ir3 disassembly (needs the tinymesa extra `qcom`)
  python tools/qcom_decode.py demo                 build a small stream with the driver's encoder, run it on the mock
                                                   CP, print it

Headers with a wrong parity bit or a packet running off the end are reported with their dword offset."""
from __future__ import annotations

import argparse
import os
import re
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from baregrad.ctypes_autogen import adreno  # noqa: E402
from baregrad.drivers.qcom import pm4  # noqa: E402

REGNAME = {v: k for k, v in reversed(list(adreno.REGS_A6XX.items()))}


def load_words(path: str) -> list[int]:
  data = sys.stdin.buffer.read() if path == "-" else open(path, "rb").read()
  try:
    text = data.decode("ascii")
    if text.split() and all(re.fullmatch(r"(?:0x)?[0-9a-fA-F_]+,?", t) for t in text.split()):
      return [int(t.rstrip(",").replace("_", ""), 16) for t in text.split()]
  except UnicodeDecodeError: pass
  if len(data) % 4: raise SystemExit(f"{path}: {len(data)} bytes is not a whole number of dwords")
  return list(struct.unpack(f"<{len(data) // 4}I", data))


def format_stream(words: list[int]) -> str:
  """One line per packet, then one indented line per payload dword with its named fields."""
  lines = []
  for p in pm4.decode(words):
    lines.append(f"{p.offset:6d}: {words[p.offset]:08x}  {p.name} ({len(p.payload)} dwords)")
    fields = pm4.FIELDS.get(p.name, {}) if p.kind == 7 else {}
    for k, w in enumerate(p.payload):
      if p.kind == 4: desc = REGNAME.get(p.reg + k, f"reg {p.reg + k:#06x}")
      else: desc = " ".join(f"{n}={f.decode(w):#x}" for n, f in fields.get(str(k), {}).items())
      lines.append(f"{p.offset + 1 + k:6d}:   {w:08x}  {desc}")
  return "\n".join(lines)


def demo() -> str:
  from baregrad.drivers.mock.adreno.cp import CP, GpuMemory
  mem, buf = GpuMemory(), bytearray(0x1000)
  mem.map(0x100000, buf)
  cs = pm4.CommandStream().mem_write(0x100010, 1, 2).timestamp(0x100020).event_write_ts(0x100000, 1).wait_reg_mem(0x100000, 1)
  cp = CP(mem)
  cp.submit(cs.words)
  done = cp.run()
  return format_stream(cs.words) + f"\nmock CP finished: {done}; signal word = {struct.unpack_from('<I', buf, 0)[0]}"


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  sub = ap.add_subparsers(dest="cmd", required=True)
  sub.add_parser("pm4").add_argument("path")
  p = sub.add_parser("ir3")
  p.add_argument("path")
  p.add_argument("--gpu", type=int, default=630)
  sub.add_parser("demo")
  a = ap.parse_args(argv)
  try:
    if a.cmd == "pm4": print(format_stream(load_words(a.path)))
    elif a.cmd == "ir3":
      from baregrad.drivers.qcom.ir3_disasm import disassemble
      print(disassemble(load_words(a.path), a.gpu), end="")
    else: print(demo())
  except pm4.MalformedPacket as e:
    print(f"malformed stream: {e}", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
