"""The VIZ recording file: one JSON object, documented in docs/viz.md. load() refuses a corrupt or foreign file."""
from __future__ import annotations
import json
from typing import Any

FORMAT = "baregrad-viz"
VERSION = 1

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
    for key, typ in (("name", str), ("src", str), ("stages", list), ("linear", list)):
      if not isinstance(k, dict) or not isinstance(k.get(key), typ):
        raise RecordingError(f"{path}: kernels[{i}] is damaged: expected field {key!r} of type {typ.__name__}")
    for j, st in enumerate(k["stages"]):
      if not isinstance(st, dict) or not isinstance(st.get("nodes"), list):
        raise RecordingError(f"{path}: kernels[{i}].stages[{j}] is damaged: expected a 'nodes' list")
      n = len(st["nodes"])
      for node in st["nodes"]:
        if not isinstance(node, dict) or any(not isinstance(s, int) or not 0 <= s < n for s in node.get("src", [])):
          raise RecordingError(f"{path}: kernels[{i}].stages[{j}] has a node whose src is not an index of its nodes")
  if not isinstance(rec.get("schedules", []), list): raise RecordingError(f"{path}: 'schedules' is not a list")
  return rec
