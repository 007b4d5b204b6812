"""The VIZ recorder: core code calls helpers.viz_sink(kind, **fields) at each realize (the tensor graph), schedule,
generated program, compiled binary and HCQ submission; this keeps what is cheap to keep while the script runs (graphs as node
tables, bytes copied) and does the slow part at exit: decoding the command streams, reading the PROFILE timeline.
Compiled binaries are kept as bytes; the server disassembles one when its kernel is shown (disasm.py). The recording it writes is documented in docs/viz.md."""
from __future__ import annotations
import atexit, base64, os, re, sys, tempfile, time
from typing import Any
from baregrad import helpers, knobs
from baregrad.ir.ops import UOp
from baregrad.viz import fileformat

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
MAX_SUBMISSIONS = 5000       # command streams kept; later ones are counted, not kept (a training loop submits forever)
MAX_REALIZES = 256           # tensor graphs kept (one per realize call; a training loop realizes the same graph each step)
MAX_GRAPH_NODES = 5000       # a larger tensor graph is recorded by its size only (no page lays out such a graph usefully)

def stage_tables(stages: list[tuple[str, UOp]]) -> tuple[list[list[Any]], list[dict[str, Any]]]:
  """The graphs of a kernel's passes as one node table and, per pass, the ids of its nodes in topological order.
  A node a pass left alone is the same hash-consed UOp in the next pass, so it is stored once: each row is
  [op, dtype, arg, [src ids]]."""
  ids: dict[UOp, int] = {}
  nodes: list[list[Any]] = []
  out = []
  for name, sink in stages:
    order = sink.toposort()
    for u in order:
      if u not in ids:
        ids[u] = len(nodes)
        a = u.arg
        nodes.append([u.op.name, _dtype_str(u.dtype), "None" if a is None else repr(a)[:200], [ids[s] for s in u.src]])
    out.append({"name": name, "ids": [ids[u] for u in order]})
  return nodes, out

_DTYPE_STR: dict[Any, str] = {}
def _dtype_str(d: Any) -> str:
  """str(dtype), kept per dtype (a graph names a few dtypes thousands of times)."""
  if (s := _DTYPE_STR.get(d)) is None: s = _DTYPE_STR[d] = str(d)
  return s

class Recorder:
  """Collects what one process compiled, scheduled and submitted; as_dict() is the recording (docs/viz.md)."""
  def __init__(self) -> None:
    self.kernels: list[dict[str, Any]] = []
    self.schedules: list[dict[str, Any]] = []
    self.binaries: dict[int, bytes] = {}         # kernel index -> its compiled binary
    self.program_kernel: dict[Any, int] = {}     # program object -> kernel index (keeps the programs alive while recording)
    self.submissions: list[dict[str, Any]] = []
    self.realizes: list[dict[str, Any]] = []
    self.dropped = 0
    self.realizes_dropped = 0
    self.t0 = time.perf_counter()
    self.profile_path: str | None = None   # the PROFILE trace this recorder started (deleted once read)
    self.profile_user = False              # PROFILE=1 was on already: its trace is the user's, left in place

  def __call__(self, kind: str, **f: Any) -> Any:
    if kind == "program":
      nodes, stages = stage_tables(f["stages"])
      self.kernels.append({
        "name": f["name"], "renderer": f["renderer"], "shape": _ANSI.sub("", str(f["shape"])), "opts": [str(o) for o in f["opts"]],
        "global_size": list(f["global_size"]), "local_size": list(f["local_size"]), "src": f["src"], "nodes": nodes, "stages": stages,
        "linear": [f"{u.op.name} {u.dtype} {repr(u.arg)[:80]}" for u in f["uops"]],
        "t_ms": round((time.perf_counter() - self.t0) * 1e3, 3)})
    elif kind == "binary":
      # get_program recorded this kernel just before (compile_ast holds its lock over both): its binary, and the
      # program object a queue's exec names, which links each launch packet to this very kernel (names repeat)
      if self.kernels and self.kernels[-1]["name"] == f["name"]:
        self.binaries[len(self.kernels) - 1] = f["lib"]
        self.program_kernel[f["prg"]] = len(self.kernels) - 1
    elif kind == "submit":   # before the queue is submitted: returns the token "submitted" gets after it
      if len(self.submissions) >= MAX_SUBMISSIONS:
        self.dropped += 1
        return None
      from baregrad.viz import streams
      cap = {"t_ms": round((time.perf_counter() - self.t0) * 1e3, 3), **streams.capture(f["queue"], f["dev"], self.program_kernel)}
      self.submissions.append(cap)
      return cap
    elif kind == "submitted" and f["token"] is not None:
      from baregrad.viz import streams
      streams.submitted(f["token"])
    elif kind == "realize":
      if len(self.realizes) >= MAX_REALIZES:
        self.realizes_dropped += 1
        return None
      sink = f["uops"][0].sink(*f["uops"][1:])
      order = sink.toposort()
      r: dict[str, Any] = {"t_ms": round((time.perf_counter() - self.t0) * 1e3, 3), "device": str(f["device"]), "outputs": len(f["uops"]),
                           "n_nodes": len(order)}
      if len(order) <= MAX_GRAPH_NODES: r["nodes"], r["stages"] = stage_tables([("tensor graph", sink)])
      self.realizes.append(r)
    elif kind == "schedule":
      self.schedules.append({"t_ms": round((time.perf_counter() - self.t0) * 1e3, 3),
                             "items": [{"kind": it.kind, "bufs": len(it.bufs),
                                        "ast_nodes": len(it.ast.toposort()) if it.ast is not None else 0} for it in f["items"]]})
    return None

  def timeline(self) -> list[dict[str, Any]]:
    """The PROFILE trace's spans (host work, device kernels and copies) and its track names, from the trace file."""
    from baregrad.hal import profile
    path = profile.stop() if profile.ON else self.profile_path
    if path is None or not os.path.exists(path): return []
    try: events = profile.load(path)
    except ValueError: return []
    if self.profile_user: print(f"baregrad: PROFILE trace written to {path} (open it in https://ui.perfetto.dev)", file=sys.stderr)
    elif path == self.profile_path: os.unlink(path)
    keep = []
    for e in events:
      if e.get("ph") == "X": keep.append({k: e[k] for k in ("name", "cat", "ts", "dur", "pid", "tid", "args") if k in e})
      elif e.get("ph") == "M" and e.get("name") in ("process_name", "thread_name"):
        keep.append({"name": e["name"], "ph": "M", "pid": e["pid"], "tid": e["tid"], "label": e["args"]["name"]})
    return keep

  def as_dict(self) -> dict[str, Any]:
    from baregrad.viz import streams
    for i, k in enumerate(self.kernels):
      if (lib := self.binaries.get(i)) is not None: k["binary"] = base64.b64encode(lib).decode()
    subs = [{"t_ms": s["t_ms"], **streams.decode(s)} for s in self.submissions]
    return {"pid": os.getpid(), "argv": sys.argv, "kernels": self.kernels, "schedules": self.schedules,
            "timeline": link_spans(self.timeline(), subs), "submissions": subs, "submissions_dropped": self.dropped,
            "realizes": self.realizes, "realizes_dropped": self.realizes_dropped}

def link_spans(timeline: list[dict[str, Any]], subs: list[dict[str, Any]]) -> list[dict[str, Any]]:
  """Give each kernel span of the timeline the index of the kernel it timed: PROFILE names a span by its kernel's name
  (names repeat) and the timeline value its submission signals (args.timeline); the submission that signals that value
  on that device and launches one kernel names it by kernel_index."""
  by_tv: dict[tuple[str, int], int] = {}
  for s in subs:
    ks = [p["kernel_index"] for p in s["packets"] if p["kind"] == "exec" and "kernel_index" in p]
    if len(ks) == 1:
      for v in s.get("signals", []): by_tv[(s["device"], v)] = ks[0]
  dev_of = {e["pid"]: e["label"] for e in timeline if e.get("ph") == "M" and e["name"] == "process_name"}
  for e in timeline:
    if e.get("cat") == "kernel" and (ki := by_tv.get((dev_of.get(e.get("pid"), ""), (e.get("args") or {}).get("timeline", -1)))) is not None:
      e["kernel_index"] = ki
  return timeline

_rec: Recorder | None = None

def start(profile_timeline: bool = True) -> Recorder:
  """Start recording in this process (VIZ=1 does this when baregrad is imported). profile_timeline: also turn PROFILE
  on (into a temporary trace file) for the timeline, unless it is on already."""
  global _rec
  if _rec is None:
    _rec = Recorder()
    if profile_timeline:
      from baregrad.hal import profile
      if profile.ON: _rec.profile_user = True
      else:
        fd, _rec.profile_path = tempfile.mkstemp(prefix=f"baregrad-viz-trace-{os.getpid()}-", suffix=".json")
        os.close(fd)
        profile.start(_rec.profile_path)
    helpers.viz_sink = _rec
    atexit.register(_at_exit)
  return _rec

def stop(path: str | None = None) -> str:
  """Stop recording and write the recording; returns its path (VIZ_PATH, else $TMPDIR/baregrad-viz-<pid>.json)."""
  global _rec
  assert _rec is not None, "VIZ recording was not started"
  path = path or knobs.get("VIZ_PATH") or os.path.join(tempfile.gettempdir(), f"baregrad-viz-{os.getpid()}.json")
  helpers.viz_sink, rec, _rec = None, _rec, None
  fileformat.save(path, rec.as_dict())
  return path

def _at_exit() -> None:
  if _rec is None: return
  path = stop()
  print(f"baregrad: VIZ recording written to {path}", file=sys.stderr)
  if knobs.get("VIZ_SERVE"):
    from baregrad.viz import server
    server.serve(path)
