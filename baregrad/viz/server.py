"""Serve a VIZ recording on 127.0.0.1. The page loads lazily: /index.json first (the kernel list, the timeline and the
submissions' one-line packets), then one kernel (/kernel/N.json: graphs, source, disassembly made from its binary now) or one submission's
decoded packets (/submission/N.json) when it is opened. The paths are a fixed table plus those two numbered families;
anything else is 404, so nothing outside the bundle (the page, the vendored layout library, the recording) is served.
A kernel whose body is damaged is answered 500 with what is wrong (fileformat.kernel_body), also printed on stderr."""
from __future__ import annotations
import base64, http.server, json, os, re, sys, threading
from typing import Any
from baregrad.viz import disasm, fileformat

HERE = os.path.dirname(os.path.abspath(__file__))
PAGE = os.path.join(HERE, "index.html")
VENDOR = {"/vendor/dagre.min.js": os.path.join(HERE, "vendor", "dagre.min.js")}
_NUMBERED = re.compile(r"^/(kernel|submission|realize)/(\d{1,9})\.json$")

def _dumps(x: Any) -> bytes: return json.dumps(x, separators=(",", ":")).encode()

def kernel_times(rec: dict[str, Any]) -> dict[str, float]:
  """Device time in microseconds per kernel name, summed over the timeline's kernel spans."""
  out: dict[str, float] = {}
  for e in rec.get("timeline", []):
    if e.get("cat") == "kernel": out[e["name"]] = out.get(e["name"], 0.0) + float(e.get("dur", 0))
  return out

def index(rec: dict[str, Any]) -> dict[str, Any]:
  """What the page shows first: everything but the kernels' graphs and sources and the packets' details."""
  times = kernel_times(rec)
  kernels = [{"name": k["name"], "renderer": k.get("renderer", ""), "shape": k.get("shape", ""), "opts": k.get("opts", []),
              "global_size": k.get("global_size"), "local_size": k.get("local_size"), "t_ms": k.get("t_ms"),
              "time_us": times.get(k["name"])} for k in rec["kernels"]]
  subs = [{"t_ms": s.get("t_ms"), "device": s.get("device"), "queue": s.get("queue"), "engine": s.get("engine"),
           "packets": [{"kind": p.get("kind"), "text": p.get("text"), **{f: p[f] for f in ("kernel", "kernel_index") if f in p}}
                       for p in s["packets"]], "ring": [{"text": x.get("text")} for x in s.get("ring", [])]} for s in rec.get("submissions", [])]
  realizes = [{f: r.get(f) for f in ("t_ms", "device", "outputs", "n_nodes")} for r in rec.get("realizes", [])]
  return {"argv": rec.get("argv"), "pid": rec.get("pid"), "kernels": kernels, "realizes": realizes,
          "realizes_dropped": rec.get("realizes_dropped", 0), "schedules": rec.get("schedules", []),
          "timeline": rec.get("timeline", []), "submissions": subs, "submissions_dropped": rec.get("submissions_dropped", 0)}

def make_server(path: str, port: int = 0) -> http.server.ThreadingHTTPServer:
  """A server for the recording in path (checked first) on 127.0.0.1:port; a port in use falls back to a free one."""
  rec = fileformat.load(path, bodies=False)   # the kernels' bodies are checked when first asked for
  with open(PAGE, "rb") as f: page = f.read()
  files: dict[str, tuple[bytes, str]] = {"/": (page, "text/html; charset=utf-8"), "/index.html": (page, "text/html; charset=utf-8"),
                                         "/index.json": (_dumps(index(rec)), "application/json")}
  for url, fp in VENDOR.items():
    with open(fp, "rb") as f: files[url] = (f.read(), "text/javascript; charset=utf-8")
  subs = rec.get("submissions", [])
  def kernel(i: int) -> bytes:
    listing = {f: v for f, v in rec["kernels"][i].items() if f != "body"}
    body = fileformat.kernel_body(path, rec, i)
    if (b := body.pop("binary", None)) is not None:
      try: lib = base64.b64decode(b, validate=True)
      except ValueError: raise fileformat.RecordingError(f"{path}: kernels[{i}].body is damaged: 'binary' is not base64") from None
      if (d := disasm.disassemble(lib, listing["name"])) is not None: body["disasm"] = d
    return _dumps({**listing, **body})
  # /kind/N.json: what makes entry N's answer (a body is parsed and checked when first asked for)
  lazy: dict[str, list[Any]] = {"kernel": [lambda i=i: kernel(i) for i in range(len(rec["kernels"]))],
                                "submission": [lambda s=s: _dumps(s) for s in subs],
                                "realize": [lambda i=i: _dumps(fileformat.realize_body(path, rec, i)) for i in range(len(rec.get("realizes", [])))]}
  class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
      p = self.path.split("?", 1)[0]
      body = files.get(p)
      if body is None and (m := _NUMBERED.match(p)) is not None and int(m.group(2)) < len(lazy[m.group(1)]):
        try: body = (lazy[m.group(1)][int(m.group(2))](), "application/json")
        except fileformat.RecordingError as e:
          print(f"baregrad.viz: {e}", file=sys.stderr)
          self.send_error(500, f"the recording's entry for this {m.group(1)} is damaged", str(e))
          return
      if body is None and p == "/recording.json":
        with open(path, "rb") as f: body = (f.read(), "application/json")
      if body is None:
        self.send_error(404, f"no such path: {self.path}")
        return
      self.send_response(200)
      self.send_header("Content-Type", body[1])
      self.send_header("Content-Length", str(len(body[0])))
      self.end_headers()
      self.wfile.write(body[0])
    def log_message(self, *a: Any) -> None: pass
  try: return http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
  except OSError:
    if port == 0: raise
    print(f"baregrad: port {port} is in use; picking a free one", file=sys.stderr)
    return http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)

def serve(path: str, port: int = 0, background: bool = False) -> http.server.ThreadingHTTPServer:
  """Serve path and print the URL; blocks until Ctrl-C unless background."""
  srv = make_server(path, port)
  print(f"baregrad: VIZ at http://127.0.0.1:{srv.server_address[1]}/ (Ctrl-C stops)", file=sys.stderr)
  if background: threading.Thread(target=srv.serve_forever, daemon=True).start()
  else:
    try: srv.serve_forever()
    except KeyboardInterrupt: pass
  return srv
