"""The VIZ recording file: one JSON object, documented in docs/viz.md. load() refuses a corrupt or foreign file.

A kernel's heavy part (graphs of every pass, source, disassembly, linear program) is stored as a JSON text inside the
kernel's entry (`body`), so opening a recording parses only the listing: 1000 kernels open in a fraction of a second,
and a kernel's body is parsed and checked when it is shown (kernel_body)."""
from __future__ import annotations
import json
from typing import Any

FORMAT = "baregrad-viz"
VERSION = 2   # 2: each kernel's body a JSON text; its passes share one node table; timeline, disassembly, submissions
BODY_FIELDS = ("src", "nodes", "stages", "linear")   # and, where the kernel was compiled, "binary" (base64)

class RecordingError(ValueError):
  """A file that is not a baregrad VIZ recording (or is damaged); the message names the path and what is wrong."""

def encode_body(k: dict[str, Any]) -> str:
  """A kernel's body (BODY_FIELDS and binary) as the JSON text a recording stores."""
  return json.dumps({f: k[f] for f in (*BODY_FIELDS, "binary") if f in k}, separators=(",", ":"))

def save(path: str, rec: dict[str, Any]) -> None:
  """Write a recording (as record.Recorder.as_dict() builds it: kernels and tensor graphs with their body fields
  inline) to path."""
  kernels = [{**{f: v for f, v in k.items() if f not in BODY_FIELDS and f != "binary"}, "body": encode_body(k)} for k in rec["kernels"]]
  realizes = [{**{f: v for f, v in r.items() if f not in ("nodes", "stages")},
               **({"body": json.dumps({"nodes": r["nodes"], "stages": r["stages"]}, separators=(",", ":"))} if "nodes" in r else {})}
              for r in rec.get("realizes", [])]
  with open(path, "w") as f:
    json.dump({"format": FORMAT, "version": VERSION, **rec, "kernels": kernels, "realizes": realizes}, f, separators=(",", ":"))

def load(path: str, bodies: bool = True) -> dict[str, Any]:
  """The recording in path, checked: the format tag, the version, the kernel list, the submissions and, with bodies
  (the default), every kernel's body too (kernel_body); the server checks a body when the page first asks for it."""
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
    for key, typ in (("name", str), ("body", str)):
      if not isinstance(k, dict) or not isinstance(k.get(key), typ):
        raise RecordingError(f"{path}: kernels[{i}] is damaged: expected field {key!r} of type {typ.__name__}")
  for i, r in enumerate(rec.get("realizes", [])):
    if not isinstance(r, dict) or not isinstance(r.get("body", ""), str):
      raise RecordingError(f"{path}: realizes[{i}] is damaged: expected an object with a 'body' text (or none)")
  for key in ("schedules", "timeline", "submissions", "realizes"):
    if not isinstance(rec.get(key, []), list): raise RecordingError(f"{path}: {key!r} is not a list")
  for i, sub in enumerate(rec.get("submissions", [])):
    if not isinstance(sub, dict) or not isinstance(sub.get("packets"), list):
      raise RecordingError(f"{path}: submissions[{i}] is damaged: expected a 'packets' list")
    if not isinstance(sub.get("ring", []), list) or any(not isinstance(x, dict) or not isinstance(x.get("text"), str) for x in sub.get("ring", [])):
      raise RecordingError(f"{path}: submissions[{i}].ring is damaged: expected a list of {{text, detail}}")
  if bodies:
    for i in range(len(kernels)): kernel_body(path, rec, i)
    for i in range(len(rec.get("realizes", []))): realize_body(path, rec, i)
  return rec

def kernel_body(path: str, rec: dict[str, Any], i: int) -> dict[str, Any]:
  """Kernel i's body, parsed and checked: src, linear, binary (base64, optional), the node table (rows [op, dtype, arg, [ids of earlier rows]])
  and the passes (each {name, ids} naming rows of the table)."""
  try: k = json.loads(rec["kernels"][i]["body"])
  except json.JSONDecodeError as e: raise RecordingError(f"{path}: kernels[{i}].body is damaged: not valid JSON ({e})") from None
  for key, typ in (("src", str), ("stages", list), ("nodes", list), ("linear", list)):
    if not isinstance(k, dict) or not isinstance(k.get(key), typ):
      raise RecordingError(f"{path}: kernels[{i}].body is damaged: expected field {key!r} of type {typ.__name__}")
  if not isinstance(k.get("binary", ""), str): raise RecordingError(f"{path}: kernels[{i}].body is damaged: 'binary' is not base64 text")
  _check_graph(path, f"kernels[{i}]", k)
  return k

def realize_body(path: str, rec: dict[str, Any], i: int) -> dict[str, Any]:
  """Tensor graph i (realizes[i]) parsed and checked: {nodes, stages} as a kernel's; a graph recorded by its size
  only (larger than record.MAX_GRAPH_NODES) has empty lists."""
  r = rec["realizes"][i]
  if "body" not in r: return {"nodes": [], "stages": []}
  try: g = json.loads(r["body"])
  except json.JSONDecodeError as e: raise RecordingError(f"{path}: realizes[{i}].body is damaged: not valid JSON ({e})") from None
  if not isinstance(g, dict) or not isinstance(g.get("nodes"), list) or not isinstance(g.get("stages"), list):
    raise RecordingError(f"{path}: realizes[{i}].body is damaged: expected 'nodes' and 'stages' lists")
  _check_graph(path, f"realizes[{i}]", g)
  return g

def _check_graph(path: str, where: str, g: dict[str, Any]) -> None:
  """A node table (rows [op, dtype, arg, [ids of earlier rows]]) and the passes naming its rows."""
  nodes = g["nodes"]
  for j, node in enumerate(nodes):
    # a node's sources come before it (the table is built in topological order)
    if type(node) is not list or len(node) != 4 or type(node[3]) is not list or any(type(s) is not int or not 0 <= s < j for s in node[3]):
      raise RecordingError(f"{path}: {where}.nodes[{j}] is damaged: expected [op, dtype, arg, [ids of earlier nodes]]")
  n = len(nodes)
  for j, st in enumerate(g["stages"]):
    if not isinstance(st, dict) or not isinstance(st.get("ids"), list):
      raise RecordingError(f"{path}: {where}.stages[{j}] is damaged: expected an 'ids' list")
    if any(type(x) is not int or not 0 <= x < n for x in st["ids"]):
      raise RecordingError(f"{path}: {where}.stages[{j}] names a node that is not in its node table")
