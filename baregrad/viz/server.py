"""Serve a VIZ recording on 127.0.0.1: the page (index.html beside this file) and the recording as /recording.json.
Only those two paths exist; anything else is 404, so nothing outside the bundle is served."""
from __future__ import annotations
import http.server, os, sys, threading
from typing import Any
from baregrad.viz import fileformat

PAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "index.html")

def make_server(path: str, port: int = 0) -> http.server.ThreadingHTTPServer:
  """A server for the recording in path (checked first) on 127.0.0.1:port; a port in use falls back to a free one."""
  fileformat.load(path)
  with open(path, "rb") as f: data = f.read()
  with open(PAGE, "rb") as f: page = f.read()
  files = {"/": (page, "text/html; charset=utf-8"), "/index.html": (page, "text/html; charset=utf-8"),
           "/recording.json": (data, "application/json")}
  class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
      body = files.get(self.path.split("?", 1)[0])
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
