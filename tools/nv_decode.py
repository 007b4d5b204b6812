#!/usr/bin/env python3
"""Print NVIDIA command streams in words: pushbuffer segments (method by method, then the commands they form), GPFIFO
rings, and compute QMDs. Input is raw little-endian bytes (e.g. memory captured from a real run) or text of hex words.

  python tools/nv_decode.py pb SEGMENT.bin [--base 0x...]    a pushbuffer segment
  python tools/nv_decode.py gpfifo RING.bin --get N --put M [--seg ADDR=FILE ...]
  python tools/nv_decode.py qmd QMD.bin                       a Hopper (v04) QMD; --version 3|4|5 or --arch sm_XX
  python tools/nv_decode.py capture DIR                       every submission the driver kept with NV_CAPTURE=DIR, in order
  python tools/nv_decode.py replay DIR [--on mock|gpu]        run each captured launch again (default on the mock GPU of the
                                                              capture's arch) and report the first difference in outputs
  python tools/nv_decode.py demo                              run a few commands on the mock GPU and print its channels

--arch sm_80|sm_86|sm_89|sm_90|sm_100|sm_120 (default sm_90) names the generation: the classes bound on the compute
and copy subchannels, and for `qmd` the QMD version its compute class uses (v03 Ampere/Ada, v04 Hopper, v05 Blackwell).

The decoder is the one the mock GPU executes with (baregrad.drivers.nv.hw)."""
from __future__ import annotations
import argparse, os, re, sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from baregrad.drivers.nv import hw

def load(path: str) -> bytes:
  data = sys.stdin.buffer.read() if path == "-" else open(path, "rb").read()
  try: text = data.decode("ascii")
  except UnicodeDecodeError: return data
  toks = re.findall(r"(?:0x)?[0-9a-fA-F_]+", text)
  if toks and all(re.fullmatch(r"(?:0x)?[0-9a-fA-F_]+", t) for t in text.split()):
    return b"".join(int(t.replace("_", ""), 16).to_bytes(4, "little") for t in toks)
  return data

def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  sub = ap.add_subparsers(dest="cmd", required=True)
  p = sub.add_parser("pb"); p.add_argument("file"); p.add_argument("--base", type=lambda s: int(s, 0))
  g = sub.add_parser("gpfifo"); g.add_argument("file"); g.add_argument("--get", type=int, required=True); g.add_argument("--put", type=int, required=True)
  g.add_argument("--seg", action="append", default=[], help="ADDR=FILE: the bytes of the pushbuffer at ADDR")
  q = sub.add_parser("qmd"); q.add_argument("file"); q.add_argument("--version", type=int, default=4)
  q.add_argument("--arch", choices=list(hw.ARCHS))
  c = sub.add_parser("capture"); c.add_argument("dir")
  r = sub.add_parser("replay"); r.add_argument("dir"); r.add_argument("--on", choices=["mock", "gpu"], default="mock")
  sub.add_parser("demo")
  for sp in (p, g, sub.choices["demo"]): sp.add_argument("--arch", choices=list(hw.ARCHS), default="sm_90")
  a = ap.parse_args(argv)
  arch = hw.ARCHS[getattr(a, "arch", None) or "sm_90"]
  classes = {hw.SUBC_COMPUTE: arch.compute, hw.SUBC_COPY: arch.dma}
  if a.cmd == "pb":
    w = hw.words_of(load(a.file))
    print(f"pushbuffer: {len(w)} words\nmethods:\n{hw.format_methods(w, classes, base=a.base)}\ncommands:\n{hw.format_commands(w, classes)}")
  elif a.cmd == "gpfifo":
    w = hw.words_of(load(a.file))
    entries = [w[2 * i] | (w[2 * i + 1] << 32) for i in range(len(w) // 2)]
    segs = {int(k, 0): load(v) for k, v in (s.split("=", 1) for s in a.seg)}
    def read(addr: int, n: int) -> bytes:
      for base, data in segs.items():
        if base <= addr and addr + n <= base + len(data): return data[addr - base:addr - base + n]
      raise KeyError(f"no --seg covers {addr:#x}+{n:#x}")
    print(hw.format_gpfifo(entries, a.get, a.put, read if segs else None, classes, last=len(entries)))
  elif a.cmd == "qmd":
    w = hw.words_of(load(a.file))
    ver = hw.QMD_VERSION[arch.compute] if a.arch else a.version
    print(f"QMD v0{ver}" + (f" ({hw.class_name(arch.compute)})" if a.arch else "") + f":\n{hw.format_qmd(w, ver)}")
    if ver in hw.QMD_LAYOUTS: print("launch: " + ", ".join(f"{k}={v if not isinstance(v, int) else hex(v)}" for k, v in hw.read_qmd(w, ver).items()))
  elif a.cmd == "capture": print(format_capture(a.dir))
  elif a.cmd == "replay": return replay_capture(a.dir, a.on)
  else:
    from baregrad.drivers.port import make_port
    from baregrad.drivers.mock.nv import MockNVGPU
    from baregrad.drivers.nv import NVDevice
    from baregrad.hcq import HCQSignal
    mock = MockNVGPU(arch=a.arch)
    dev = NVDevice("NV", port=make_port(mock))
    a_, b_ = dev.allocator.alloc(256), dev.allocator.alloc(256)
    s = HCQSignal(dev)
    dev.copy_queue_t().wait(dev.timeline_signal, dev.timeline_value - 1).copy(b_.va_addr, a_.va_addr, 256).memory_barrier().signal(s, 1).submit(dev)
    dev.compute_queue_t().wait(s, 1).timestamp(s).signal(s, 2).submit(dev)
    s.wait(2)
    for tok in mock.channels: print(mock.dump_channel(tok), "\n")
    w = (hw.ctypes.c_uint32 * 4).from_address(dev.channels["copy"].cmd.cpu)[:]
    print("first copy-channel segment, raw:", " ".join(f"{x:#010x}" for x in w))
    dev.close()
  return 0

def format_capture(d: str) -> str:
  """The submissions NV_CAPTURE=DIR kept, in order: channel, GPFIFO entry, doorbell, timeline, the pushbuffer's methods
  and commands, and each launch's QMD (kernel, grid, block, shared, registers) with its constant bank's size."""
  from baregrad.hcq.replay import load_meta
  meta = load_meta(d)
  arch = hw.ARCHS[meta["arch"]]
  classes, ver = {hw.SUBC_COMPUTE: arch.compute, hw.SUBC_COPY: arch.dma}, hw.QMD_VERSION[arch.compute]
  out = [f"NV capture of {meta['device']} ({meta['arch']}): {len(meta['submissions'])} submissions, {len(meta['launches'])} launches"]
  for sub in meta["submissions"]:
    rd = lambda what: open(os.path.join(d, f"{sub['n']:06d}-{what}.bin"), "rb").read()  # noqa: E731
    w = hw.words_of(rd(f"{sub['channel']}-pushbuf"))
    out.append(f"submission {sub['n']}: {sub['channel']} channel, GPFIFO entry at {sub['gpfifo']:#x} = {sub['gp_entry']:#018x} "
               f"(pushbuffer {sub['pushbuf']:#x}, {len(w)} words), GP_PUT {sub['gp_put']}, doorbell token {sub['doorbell']}, "
               f"timeline {sub['timeline']}")
    out.append(hw.format_commands(w, classes))
    for L in sub["launches"]:
      q = hw.read_qmd(hw.words_of(rd(f"qmd-{L['qmd']:x}")), ver)
      out.append(f"  EXEC {L['kernel']}: QMD {L['qmd']:#x} grid {q['grid']} block {q['block']} shared {q['shared']} regs {q['regs']} "
                 f"program {q['program']:#x} constant bank 0 {q['cbank0'] or 0:#x} ({q['cbank0_size']} bytes)")
  return "\n".join(out)

def replay_capture(d: str, on: str) -> int:
  """Replay NV_CAPTURE=DIR on the mock GPU of its arch, or on this machine's GPU; 0 when the outputs are identical."""
  from baregrad.hcq.replay import load_meta, replay_and_report
  from baregrad.drivers.nv import NVDevice
  meta = load_meta(d)
  if on == "mock":
    from baregrad.drivers.port import make_port
    from baregrad.drivers.mock.nv import MockNVGPU
    dev = NVDevice("NV", port=make_port(MockNVGPU(arch=meta["arch"])))
  else: dev = NVDevice("NV")
  return replay_and_report(d, dev, dev.arch)

if __name__ == "__main__": sys.exit(main())
