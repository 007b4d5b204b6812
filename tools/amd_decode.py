#!/usr/bin/env python3
"""Print AMD command streams in words: AQL rings (dispatch, barrier and vendor PM4-IB packets, with the indirect buffers
they point at), PM4 streams and SDMA streams. Input is raw little-endian bytes (e.g. memory captured from a real run:
a ring, an indirect buffer) or text of hex words.

  python tools/amd_decode.py aql RING.bin [--base 0x...] [--read N --write M] [--ib ADDR=FILE ...] [--seg ADDR=FILE ...]
                                   [--code ADDR=CODE_OBJECT ...] [--kernel ADDR=NAME ...]
  python tools/amd_decode.py pm4 IB.bin [--base 0x...]
  python tools/amd_decode.py sdma RING.bin [--base 0x...] [--rptr BYTES]
  python tools/amd_decode.py capture DIR              every submission the driver kept with AMD_CAPTURE=DIR, in order
  python tools/amd_decode.py replay DIR [--on mock|gpu]  run each captured launch again (default on the mock GPU of the
                                                       capture's arch) and report the first difference in outputs
  python tools/amd_decode.py demo                     run a few commands on the mock GPU and print its queues

--family gfx11 (RDNA3: amdgpu/nvd.h, SDMA v6, the default) or gfx9 (CDNA3 gfx9.4.3: soc15d.h, SDMA v4.4.2), or
--arch gfx1100|gfx942 for the same. For `aql`, --read/--write are the read and write dispatch ids (packets between them
are pending; the ring is indexed modulo its size); each DISPATCH is followed by its launch line: the kernel's name (from a
--code object loaded at ADDR, or --kernel), grid, block, LDS, and from its kernel descriptor (in --code or --seg memory)
VGPRs, SGPRs (gfx9), wave size and private bytes. The decoders are the ones the mock GPU executes with
(baregrad.drivers.amd.hw)."""
from __future__ import annotations
import argparse, os, sys
from typing import Any, Callable
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from baregrad.drivers.amd import hw
from nv_decode import load  # raw bytes or text of hex words, the same for both vendors

FAMILY = {"gfx1100": "gfx11", "gfx942": "gfx9"}

def segment_reader(segs: dict[int, bytes]) -> Callable[[int, int], bytes]:
  """read(addr, nbytes) over GPU memory given as {address: bytes}; KeyError names an address no segment covers."""
  def read(addr: int, n: int) -> bytes:
    for base, data in segs.items():
      if base <= addr and addr + n <= base + len(data): return data[addr - base:addr - base + n]
    raise KeyError(f"no segment covers {addr:#x}+{n:#x}")
  return read

def place_code(lib: bytes, base: int) -> tuple[bytes, dict[int, str]]:
  """A code object (an HSA ELF, e.g. a capture's code-<kernel>-<hash>.bin) laid out at GPU address `base` as the driver
  loads it (AMDProgram: amd_compile.load_code_object, relocate), and its kernels by descriptor address (base +
  the <name>.kd symbol's offset): what a DISPATCH's kernel_object points at."""
  from baregrad.drivers.amd_compile import load_code_object
  co = load_code_object(lib)
  return co.relocate(base), {base + k.kd_offset: k.name for k in co.kernels.values()}

def format_aql_ring(w: list[int], family: str, base: int = 0, read: int | None = None, write: int | None = None,
                    ibs: dict[int, bytes] | None = None, mem: Callable[[int, int], bytes] | None = None,
                    names: dict[int, str] | None = None) -> str:
  """An AQL ring (16 dwords a packet): every packet, or those from `read` to `write` (dispatch ids); PM4 IBs decoded
  where `ibs` ({address: bytes}) holds them; each DISPATCH followed by its launch line (hw.describe_dispatch: kernel
  name from `names` {kernel object: name}, grid, block, LDS, and VGPRs/SGPRs, wave size and private bytes from the kernel
  descriptor read through `mem(addr, nbytes)`), as the NV GPFIFO view follows an EXEC to its QMD."""
  n = len(w) // 16
  ids = range(n) if read is None or write is None else range(max(read - 1, 0), write)
  out = []
  for i in ids:
    p = w[16 * (i % n):16 * (i % n) + 16]
    if read is None and (p[0] & 0xFF) == hw.AQL_INVALID: continue
    mark = " <== read_dispatch_id" if read is not None and i == read else ""
    out.append(f"[{i}] @{base + 64 * (i % n):#x} {hw.format_aql(p)}{mark}")
    d = hw.decode_aql(p)
    if d["type"] == hw.AQL_DISPATCH: out.append("     " + hw.describe_dispatch(p, family, mem, names))
    if d["type"] == hw.AQL_VENDOR and d["format"] == hw.AMD_AQL_FORMAT_PM4_IB and ibs:
      va, ndw = d["ib_cmd"][1] | (d["ib_cmd"][2] << 32), d["ib_cmd"][3] & 0xFFFFF
      for a, data in ibs.items():
        if a <= va and va + 4 * ndw <= a + len(data):
          out.append(hw.format_pm4(family, hw.words_of(data[va - a:va - a + 4 * ndw]), va))
          break
      else: out.append(f"  (no --ib covers {va:#x}+{4 * ndw:#x})")
  return "\n".join(out) if out else "(no valid packets)"

def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  sub = ap.add_subparsers(dest="cmd", required=True)
  q = sub.add_parser("aql"); q.add_argument("file"); q.add_argument("--read", type=int); q.add_argument("--write", type=int)
  q.add_argument("--ib", action="append", default=[], help="ADDR=FILE: the bytes of a PM4 indirect buffer at ADDR")
  q.add_argument("--seg", action="append", default=[], help="ADDR=FILE: GPU memory at ADDR (kernel descriptors, IBs)")
  q.add_argument("--code", action="append", default=[], help="ADDR=FILE: a code object (ELF) the driver loaded at ADDR: "
                 "its kernel descriptors and kernel names")
  q.add_argument("--kernel", action="append", default=[], help="ADDR=NAME: the kernel whose descriptor is at ADDR")
  p = sub.add_parser("pm4"); p.add_argument("file")
  s = sub.add_parser("sdma"); s.add_argument("file"); s.add_argument("--rptr", type=lambda x: int(x, 0))
  c = sub.add_parser("capture"); c.add_argument("dir")
  r = sub.add_parser("replay"); r.add_argument("dir"); r.add_argument("--on", choices=["mock", "gpu"], default="mock")
  d = sub.add_parser("demo")
  for sp in (q, p, s, d, c):
    sp.add_argument("--family", choices=["gfx11", "gfx9"])
    sp.add_argument("--arch", choices=list(FAMILY))
    if sp is not d: sp.add_argument("--base", type=lambda x: int(x, 0), default=0)
  a = ap.parse_args(argv)
  fam = getattr(a, "family", None) or FAMILY.get(getattr(a, "arch", None) or "gfx1100", "gfx11")
  if a.cmd == "aql":
    ibs = {int(k, 0): load(v) for k, v in (x.split("=", 1) for x in a.ib)}
    segs, names = {**ibs, **{int(k, 0): load(v) for k, v in (x.split("=", 1) for x in a.seg)}}, {}
    ibs.update(segs)
    for k, v in (x.split("=", 1) for x in a.code):
      img, ns = place_code(open(v, "rb").read(), int(k, 0))
      segs[int(k, 0)] = img
      names.update(ns)
    names.update({int(k, 0): v for k, v in (x.split("=", 1) for x in a.kernel)})
    print(format_aql_ring(hw.words_of(load(a.file)), fam, a.base, a.read, a.write, ibs, segment_reader(segs) if segs else None, names))
  elif a.cmd == "pm4": print(hw.format_pm4(fam, hw.words_of(load(a.file)), a.base))
  elif a.cmd == "sdma":
    data = load(a.file)
    if a.rptr is not None: data = data[a.rptr % len(data):] + data[:a.rptr % len(data)]
    print(hw.format_sdma(fam, hw.words_of(data), a.base + (a.rptr or 0) % max(len(data), 1)))
  elif a.cmd == "capture": print(format_capture(a.dir, fam))
  elif a.cmd == "replay": return replay_capture(a.dir, a.on)
  else: demo(a.arch or {"gfx11": "gfx1100", "gfx9": "gfx942"}[fam])
  return 0

def format_capture(d: str, family: str) -> str:
  """The submissions AMD_CAPTURE=DIR kept (NNNNNN-aql.bin with its NNNNNN-ib-<addr>.bin, NNNNNN-sdma.bin), in order."""
  groups: dict[str, dict[str, bytes]] = {}
  for f in sorted(os.listdir(d)):
    if f.endswith(".bin") and "-" in f:
      n, what = f[:-4].split("-", 1)
      groups.setdefault(n, {})[what] = open(os.path.join(d, f), "rb").read()
  out, subs = [], {}
  if os.path.exists(os.path.join(d, "meta.json")):   # ring slots, doorbell values, timeline, kernels (hcq/capture.py)
    import json
    subs = {s["n"]: s for s in json.load(open(os.path.join(d, "meta.json")))["submissions"]}
  for n, files in sorted(groups.items()):
    s = subs.get(int(n)) if n.isdigit() else None
    info = f", ring {s['ring']:#x}, doorbell {s['doorbell']}, timeline {s['timeline']}" if s else ""
    if "aql" in files:
      ibs = {int(k[3:], 16): v for k, v in files.items() if k.startswith("ib-")}
      kern = "".join(f"\n  DISPATCH {k['kernel']}: kernel object {k['kernel_object']:#x}, kernargs {k['kernarg']:#x}" for k in s["launches"]) if s else ""
      mem, names = capture_code(d, s["launches"] if s else [])
      out.append(f"submission {int(n)}: compute queue (AQL){info}\n"
                 + format_aql_ring(hw.words_of(files["aql"]), family, ibs=ibs, mem=mem, names=names) + kern)
    if "sdma" in files: out.append(f"submission {int(n)}: copy queue (SDMA){info}\n" + hw.format_sdma(family, hw.words_of(files["sdma"])))
  return "\n".join(out) if out else f"(no captures in {d})"

_CODE_CACHE: dict[str, Any] = {}

def capture_code(d: str, launches: list[dict]) -> tuple[Callable[[int, int], bytes] | None, dict[int, str]]:
  """For a capture's submission: its kernels by kernel object (meta.json), and a reader of their descriptors from the
  captured code objects (code-<kernel>-*.bin) laid out where the kernel object puts them."""
  names = {k["kernel_object"]: k["kernel"] for k in launches}
  segs: dict[int, bytes] = {}
  for ko, name in names.items():
    for f in sorted(os.listdir(d)):
      if not (f.startswith(f"code-{name}-") and f.endswith(".bin")): continue
      try:
        from baregrad.drivers.amd_compile import load_code_object
        p = os.path.join(d, f)
        co = _CODE_CACHE.get(p) or _CODE_CACHE.setdefault(p, load_code_object(open(p, "rb").read()))
        k = co.kernels.get(name)
        if k is not None and (ko - k.kd_offset) % 256 == 0: segs[ko - k.kd_offset] = co.relocate(ko - k.kd_offset); break
      except Exception: continue
  return (segment_reader(segs) if segs else None), names

def replay_capture(d: str, on: str) -> int:
  """Replay AMD_CAPTURE=DIR on the mock GPU of its arch, or on this machine's GPU; 0 when the outputs are identical."""
  from baregrad.hcq.replay import load_meta, replay_and_report
  from baregrad.drivers.amd.device import AMDDevice
  meta = load_meta(d)
  if on == "mock":
    from baregrad.drivers.port import make_port
    from baregrad.drivers.mock.amd import MockAMDGPU
    dev = AMDDevice("AMD", port=make_port(MockAMDGPU(arch=meta["arch"])))
  else: dev = AMDDevice("AMD")
  return replay_and_report(d, dev, dev.target.name)

def demo(arch: str) -> None:
  import ctypes
  from baregrad.drivers.port import make_port
  from baregrad.drivers.mock.amd import MockAMDGPU
  from baregrad.drivers.amd import AMDDevice
  from baregrad.hcq import HCQSignal
  mock = MockAMDGPU(arch=arch)
  dev = AMDDevice("AMD", port=make_port(mock))
  a_, b_ = dev.allocator.alloc(256), dev.allocator.alloc(256)
  s = HCQSignal(dev)
  dev.copy_queue_t().wait(dev.timeline_signal, dev.timeline_value - 1).copy(b_.va_addr, a_.va_addr, 256).signal(s, 1).submit(dev)
  dev.compute_queue_t().wait(s, 1).timestamp(s).memory_barrier().signal(s, 2).submit(dev)
  s.wait(2)
  r = dev.aql
  ring = ctypes.string_at(r.ring.cpu, 64 * r.put)
  print(f"AQL ring of the compute queue ({arch}), {r.put} packets:")
  print(format_aql_ring(hw.words_of(ring), dev.family, r.ring.va, ibs={r.ib.va: ctypes.string_at(r.ib.cpu, r.ib_off)}))
  sr = dev.sdma
  print(f"\nSDMA ring of the copy queue, {sr.put} bytes:")
  print(hw.format_sdma(dev.family, hw.words_of(ctypes.string_at(sr.ring.cpu, sr.put)), sr.ring.va))
  print("\nmock queues:\n" + mock.queue_state())
  dev.close()

if __name__ == "__main__": sys.exit(main())
