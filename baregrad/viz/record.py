"""The VIZ recorder: core code calls helpers.viz_sink(kind, **fields) at a schedule and at each compiled program; this
turns those into plain data (the UOp graphs as node lists) and writes the recording at exit."""
from __future__ import annotations
import atexit, os, re, sys, tempfile, time
from typing import Any
from baregrad import helpers, knobs
from baregrad.ir.ops import UOp
from baregrad.viz import fileformat

_ANSI = re.compile(r"\x1b\[[0-9;]*m")

def graph(sink: UOp) -> list[dict[str, Any]]:
  """A UOp graph as a node list in topological order; each node's src are indices into the list."""
  order = sink.toposort()
  idx = {u: i for i, u in enumerate(order)}
  return [{"op": u.op.name, "dtype": str(u.dtype), "arg": repr(u.arg)[:200], "src": [idx[s] for s in u.src]} for u in order]

class Recorder:
  """Collects what one process compiled and scheduled; as_dict() is the recording (docs/viz.md)."""
  def __init__(self) -> None:
    self.kernels: list[dict[str, Any]] = []
    self.schedules: list[dict[str, Any]] = []
    self.t0 = time.perf_counter()

  def __call__(self, kind: str, **f: Any) -> None:
    if kind == "program":
      self.kernels.append({
        "name": f["name"], "renderer": f["renderer"], "shape": _ANSI.sub("", str(f["shape"])), "opts": [str(o) for o in f["opts"]],
        "global_size": list(f["global_size"]), "local_size": list(f["local_size"]), "src": f["src"],
        "stages": [{"name": n, "nodes": graph(s)} for n, s in f["stages"]],
        "linear": [f"{u.op.name} {u.dtype} {repr(u.arg)[:80]}" for u in f["uops"]],
        "t_ms": round((time.perf_counter() - self.t0) * 1e3, 3)})
    elif kind == "schedule":
      self.schedules.append({"t_ms": round((time.perf_counter() - self.t0) * 1e3, 3),
                             "items": [{"kind": it.kind, "bufs": len(it.bufs),
                                        "ast_nodes": len(it.ast.toposort()) if it.ast is not None else 0} for it in f["items"]]})

  def as_dict(self) -> dict[str, Any]:
    return {"pid": os.getpid(), "argv": sys.argv, "kernels": self.kernels, "schedules": self.schedules}

_rec: Recorder | None = None

def start() -> Recorder:
  """Start recording in this process (VIZ=1 does this when baregrad is imported)."""
  global _rec
  if _rec is None:
    _rec = Recorder()
    helpers.viz_sink = _rec
    atexit.register(_at_exit)
  return _rec

def stop(path: str | None = None) -> str:
  """Stop recording and write the recording; returns its path (VIZ_PATH, else $TMPDIR/baregrad-viz-<pid>.json)."""
  global _rec
  assert _rec is not None, "VIZ recording was not started"
  path = path or knobs.get("VIZ_PATH") or os.path.join(tempfile.gettempdir(), f"baregrad-viz-{os.getpid()}.json")
  fileformat.save(path, _rec.as_dict())
  helpers.viz_sink, _rec = None, None
  return path

def _at_exit() -> None:
  if _rec is None: return
  path = stop()
  print(f"baregrad: VIZ recording written to {path}", file=sys.stderr)
  if knobs.get("VIZ_SERVE"):
    from baregrad.viz import server
    server.serve(path)
