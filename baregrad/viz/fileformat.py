"""The VIZ recording file: one JSON object, documented in docs/viz.md. load() refuses a corrupt or foreign file."""
from __future__ import annotations
import json
from typing import Any

FORMAT = "baregrad-viz"
VERSION = 2   # 2: a kernel's passes share one node table (stages hold node ids); timeline, disassembly, submissions

class RecordingError(ValueError):
  """A file that is not a baregrad VIZ recording (or is damaged); the message names the path and what is wrong."""

def save(path: str, rec: dict[str, Any]) -> None:
  """Write a recording (as record.Recorder.as_dict() builds it) to path."""
  with open(path, "w") as f: json.dump({"format": FORMAT, "version": VERSION, **rec}, f, separators=(",", ":"))

def load(path: str) -> dict[str, Any]:
  """The recording in path, checked: the format tag, the version and the shape of every kernel entry."""
  try:
    with open(path, "rb") as f: raw = f.read()
  except OSError as e: raise RecordingError(f"{path}: cannot read the VIZ recording: {e.strerror}") from None
  try: rec = json.loads(raw)
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise RecordingError(f"{path}: not a VIZ recording: not valid JSON ({e})") from None
  if not isinstance(rec, dict) or rec.get("format") != FORMAT:
    got = rec.get("format") if isinstance(rec, dict) else type(rec).__name__
    raise RecordingError(f"{path}: not a VIZ recording: expected format {FORMAT!r}, got {got!r}")
  if rec.get("version") != VERSION:
    raise RecordingError(f"{path}: VIZ recording version {rec.get('version')!r} is not supported (expected {VERSION})")
  kernels = rec.get("kernels")
  if not isinstance(kernels, list): raise RecordingError(f"{path}: VIZ recording has no 'kernels' list")
  for i, k in enumerate(kernels):
    for key, typ in (("name", str), ("src", str), ("stages", list), ("nodes", list), ("linear", list)):
      if not isinstance(k, dict) or not isinstance(k.get(key), typ):
        raise RecordingError(f"{path}: kernels[{i}] is damaged: expected field {key!r} of type {typ.__name__}")
    nodes = k["nodes"]
    n = len(nodes)
    for j, node in enumerate(nodes):
      # a row is [op, dtype, arg, src ids]; a node's sources come before it (the table is built in topological order)
      if not isinstance(node, list) or len(node) != 4 or not isinstance(node[3], list) or \
         any(not isinstance(s, int) or not 0 <= s < j for s in node[3]):
        raise RecordingError(f"{path}: kernels[{i}].nodes[{j}] is damaged: expected [op, dtype, arg, [ids of earlier nodes]]")
    for j, st in enumerate(k["stages"]):
      if not isinstance(st, dict) or not isinstance(st.get("ids"), list):
        raise RecordingError(f"{path}: kernels[{i}].stages[{j}] is damaged: expected an 'ids' list")
      if any(not isinstance(x, int) or not 0 <= x < n for x in st["ids"]):
        raise RecordingError(f"{path}: kernels[{i}].stages[{j}] names a node that is not in the kernel's node table")
  for key in ("schedules", "timeline", "submissions"):
    if not isinstance(rec.get(key, []), list): raise RecordingError(f"{path}: {key!r} is not a list")
  for i, sub in enumerate(rec.get("submissions", [])):
    if not isinstance(sub, dict) or not isinstance(sub.get("packets"), list):
      raise RecordingError(f"{path}: submissions[{i}] is damaged: expected a 'packets' list")
  return rec
