"""Capture of an HCQ device's work for decoding and replay (NV_CAPTURE=DIR, AMD_CAPTURE=DIR).

Two kinds of record go into DIR, both listed in DIR/meta.json (rewritten after each record, so a crashed run leaves a
readable capture):
- submissions: what a driver hands its hardware queue, written by the driver as it submits (`submission`): the files
  NNNNNN-<what>.bin (the pushbuffer and its GPFIFO entry, QMDs and constant banks on NV; AQL packets, the PM4 IBs and
  kernargs they point at, SDMA streams on AMD) and a record of the ring's address, the doorbell value, the timeline
  value reserved so far and the kernels launched;
- launches: each kernel launched through a Program call (`launch`): the code image (code-<name>-<hash>.bin, once per
  image), the grid, block and values, the launch descriptor the driver wrote (QMD + constant bank 0, AQL packet +
  kernargs) and every argument buffer's address, size and contents before and after the kernel ran
  (launch-NNNNNN-argK-before.bin / -after.bin). The device is synchronized before and after a captured launch, and the
  copies that read the buffers are not recorded as submissions.
hcq/replay.py runs the launches again on another device and compares the outputs. Launches a recorded HCQ graph
replays (a JIT's) are captured the same way (HCQGraph._replay_captured): while capturing, a graph's launches are
submitted one at a time with the recording's own argument memory, and each launch record says which graph kernel and
replay it was (`graph`).
"""
from __future__ import annotations
import hashlib, json, os, threading
from typing import Any, Callable, Sequence

META = "meta.json"
FORMAT = 1

class CaptureWriter:
  """The files and meta.json of one device's capture in `directory` (created; a meta.json already there is replaced)."""
  def __init__(self, directory: str, driver: str, arch: str, device: str) -> None:
    os.makedirs(directory, exist_ok=True)
    self.dir, self.lock = directory, threading.RLock()
    self.meta: dict[str, Any] = {"format": FORMAT, "driver": driver, "arch": arch, "device": device, "submissions": [], "launches": []}
    self.codes: dict[bytes, str] = {}
    self.internal = 0          # > 0 while the capture itself copies buffers out: those submissions are not recorded
    self.dispatches: dict[int, bytes] = {}   # launch descriptor address -> the packet that launched it (AMD: AQL)
    self._flush()

  def _write(self, name: str, data: bytes) -> str:
    with open(os.path.join(self.dir, name), "wb") as f: f.write(data)
    return name

  def _flush(self) -> None:
    tmp = os.path.join(self.dir, META + ".tmp")
    with open(tmp, "w") as f: json.dump(self.meta, f, indent=1)
    os.replace(tmp, os.path.join(self.dir, META))

  def submission(self, queue: str, files: dict[str, bytes], **info: Any) -> int | None:
    """Record one submission to `queue`: files written as NNNNNN-<what>.bin, `info` (JSON values) into meta.json.
    Returns its number, or None while the capture's own copies run."""
    with self.lock:
      if self.internal: return None
      n = len(self.meta["submissions"])
      names = [self._write(f"{n:06d}-{what}.bin", data) for what, data in files.items()]
      self.meta["submissions"].append({"n": n, "queue": queue, "files": names, **info})
      self._flush()
      return n

  def code(self, name: str, lib: bytes) -> str:
    """The file holding this code image (written the first time it is seen)."""
    with self.lock:
      if (f := self.codes.get(lib)) is None:
        f = self.codes[lib] = self._write(f"code-{name}-{hashlib.sha256(lib).hexdigest()[:12]}.bin", lib)
      return f

  def launch(self, kernel: str, lib: bytes, global_size: Sequence[int], local_size: Sequence[int], vals: Sequence[int],
             descriptor: dict[str, bytes], args: Sequence[tuple[int, int, bytes, bytes]], **info: Any) -> int:
    """Record one launch: args are (address, size, contents before, contents after) per buffer argument."""
    with self.lock:
      n = len(self.meta["launches"])
      rec: dict[str, Any] = {"n": n, "kernel": kernel, "code": self.code(kernel, lib), "global_size": list(global_size),
                             "local_size": list(local_size), "vals": list(vals),
                             "descriptor": {what: self._write(f"launch-{n:06d}-{what}.bin", data) for what, data in descriptor.items()},
                             "args": [], **info}
      for i, (va, size, before, after) in enumerate(args):
        rec["args"].append({"va": va, "size": size, "before": self._write(f"launch-{n:06d}-arg{i}-before.bin", before),
                            "after": self._write(f"launch-{n:06d}-arg{i}-after.bin", after)})
      self.meta["launches"].append(rec)
      self._flush()
      return n

def read_buffer(dev: Any, buf: Any) -> bytes:
  """The contents of an HCQBuffer, copied out through the device's allocator (not recorded as a submission)."""
  out = bytearray(buf.size)
  cap = dev.capture
  with cap.lock: cap.internal += 1
  try: dev.allocator._copyout(memoryview(out), buf)
  finally:
    with cap.lock: cap.internal -= 1
  return bytes(out)

def captured_launch(prg: Any, bufs: Sequence[Any], vals: Sequence[int], global_size: tuple[int, int, int],
                    local_size: tuple[int, int, int], run: Callable[[], Any]) -> Any:
  """Run `run` (the launch of prg on bufs) between two synchronizations, recording the launch and its buffers' contents
  before and after in prg.dev.capture; `prg.capture_descriptor(args)` gives the driver's launch descriptor."""
  dev = prg.dev
  hb = [b._buf if hasattr(b, "_buf") else b for b in bufs]
  dev.synchronize()
  before = [read_buffer(dev, b) for b in hb]
  prg.last_args = None
  result = run()
  dev.synchronize()
  after = [read_buffer(dev, b) for b in hb]
  desc = prg.capture_descriptor(prg.last_args) if prg.last_args is not None else {}
  dev.capture.launch(prg.name, prg.lib, global_size, local_size, vals, desc,
                     [(b.va_addr, b.size, x, y) for b, x, y in zip(hb, before, after)], timeline=dev.timeline_value - 1)
  return result
