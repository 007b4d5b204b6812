"""Replay of a capture (hcq/capture.py) on a device: each captured launch runs again and its outputs are compared.

For each launch in DIR/meta.json, in order: the code image is loaded (once per image), a buffer of each argument's
size is allocated on this device and filled with the contents captured before the kernel ran, the launch is recorded
as the driver records any (wait on the timeline, exec, signal), and then the captured launch descriptor (NV: QMD and
constant bank 0; AMD: AQL packet and kernargs) is put in place of the one the driver wrote, its addresses relocated:
captured buffer addresses to the new buffers', the program/kernel object, constant bank, kernarg and queue addresses to
this device's. What the GPU executes is the captured descriptor. After the launch each buffer is read back and compared
with the contents captured after the kernel ran; where the relocated captured descriptor differs from what this driver
writes for the same launch, that is reported too. The first difference is the report's headline.
Launches are independent: each starts from its own captured inputs, so a difference names the launch that made it.
"""
from __future__ import annotations
import json, os
from dataclasses import dataclass, field
from typing import Any
from baregrad.hcq.capture import FORMAT, META

class ReplayError(RuntimeError):
  """A capture this device cannot replay (another driver or architecture, a missing or truncated file)."""

@dataclass
class ReplayReport:
  """lines: one per launch (and its notes); first_difference: the first launch's first difference, None if none."""
  launches: int = 0
  lines: list[str] = field(default_factory=list)
  first_difference: str | None = None
  def text(self) -> str:
    head = (f"replayed {self.launches} launches: outputs identical to the capture" if self.first_difference is None
            else f"FIRST DIFFERENCE: {self.first_difference}")
    return "\n".join(self.lines + [head])

def load_meta(directory: str) -> dict[str, Any]:
  """DIR/meta.json, checked for its format."""
  path = os.path.join(directory, META)
  try:
    with open(path) as f: meta = json.load(f)
  except FileNotFoundError: raise ReplayError(f"{path}: not found (is {directory} a *_CAPTURE directory?)") from None
  if meta.get("format") != FORMAT: raise ReplayError(f"{path}: capture format {meta.get('format')!r}, this replay reads format {FORMAT}")
  return meta

def _read(directory: str, name: str, size: int | None = None) -> bytes:
  path = os.path.join(directory, name)
  try:
    with open(path, "rb") as f: data = f.read()
  except FileNotFoundError: raise ReplayError(f"{path}: missing from the capture") from None
  if size is not None and len(data) != size: raise ReplayError(f"{path}: {len(data)} bytes, meta.json says {size}")
  return data

def first_byte_difference(captured: bytes, replayed: bytes) -> str | None:
  """Where two buffers first differ: the byte, the aligned 32-bit word around it both ways, and how many bytes differ."""
  i = next((k for k in range(len(captured)) if captured[k] != replayed[k]), None)
  if i is None: return None
  w = i & ~3
  cw, rw = int.from_bytes(captured[w:w + 4], "little"), int.from_bytes(replayed[w:w + 4], "little")
  n = sum(a != b for a, b in zip(captured, replayed))
  return f"byte {i:#x} (32-bit word {w // 4}: captured {cw:#010x}, replayed {rw:#010x}); {n} of {len(captured)} bytes differ"

def replay(directory: str, dev: Any, arch: str) -> ReplayReport:
  """Replay every launch of the capture in `directory` on `dev` (an HCQ device of the capture's driver and `arch`)."""
  meta = load_meta(directory)
  if meta["arch"] != arch: raise ReplayError(f"the capture was made on {meta['driver']} {meta['arch']}; this device is {arch}")
  rep = ReplayReport()
  programs: dict[str, Any] = {}
  for L in meta["launches"]:
    n, name = L["n"], L["kernel"]
    if (prg := programs.get(L["code"])) is None: prg = programs[L["code"]] = dev.runtime(dev, name, _read(directory, L["code"]))
    bufs = [dev.allocator.alloc(a["size"]) for a in L["args"]]
    try:
      for b, a in zip(bufs, L["args"]): dev.allocator._copyin(b, memoryview(_read(directory, a["before"], a["size"])))
      reloc = {a["va"]: b.va_addr for b, a in zip(bufs, L["args"])}
      files = {what: _read(directory, f) for what, f in L["descriptor"].items()}
      gs, ls, vals = tuple(L["global_size"]), tuple(L["local_size"]), tuple(L["vals"])
      args = prg.fill_kernargs(bufs, vals)
      q = dev.compute_queue_t()
      with dev.submit_lock:
        q.wait(dev.timeline_signal, dev.timeline_value - 1)
        q.exec(prg, args, gs, ls)
        notes = prg.install_captured(q, args, files, reloc)
        q.signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
      dev.synchronize()
      where = ", ".join(f"{a['va']:#x} -> {b.va_addr:#x}" for a, b in zip(L["args"], bufs))
      rep.lines.append(f"launch {n} {name} grid {gs} block {ls}: buffers relocated {where}")
      diffs = [f"descriptor: {x}" for x in notes]
      for i, (b, a) in enumerate(zip(bufs, L["args"])):
        out = bytearray(a["size"])
        dev.allocator._copyout(memoryview(out), b)
        if (d := first_byte_difference(_read(directory, a["after"], a["size"]), bytes(out))) is not None:
          diffs.append(f"output argument {i} (captured at {a['va']:#x}): {d}")
      rep.lines += [f"  {x}" for x in diffs] or ["  outputs identical"]
      if diffs and rep.first_difference is None: rep.first_difference = f"launch {n} ({name}): {diffs[0]}"
      rep.launches += 1
    finally:
      for b, a in zip(bufs, L["args"]): dev.allocator.free(b, a["size"])
  return rep

def replay_and_report(directory: str, dev: Any, arch: str) -> int:
  """The tools' `replay` command: replay on dev (closed after), print the report; exit status 0 same outputs, 1 a
  difference, 2 a capture this device cannot replay."""
  try: rep = replay(directory, dev, arch)
  except ReplayError as e:
    print(f"replay: {e}")
    return 2
  finally: dev.close()
  print(rep.text())
  return 0 if rep.first_difference is None else 1
