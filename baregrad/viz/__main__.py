"""python3 -m baregrad.viz FILE [--port N]: serve a saved VIZ recording."""
import argparse, sys
from baregrad.viz import fileformat, server

def main() -> int:
  ap = argparse.ArgumentParser(prog="python3 -m baregrad.viz", description="serve a VIZ recording on 127.0.0.1")
  ap.add_argument("file")
  ap.add_argument("--port", type=int, default=0, help="port (default: a free one; one in use picks another)")
  ap.add_argument("--check", action="store_true", help="check every kernel's body before serving (else each is checked when shown)")
  a = ap.parse_args()
  try:
    if a.check: fileformat.load(a.file)
    server.serve(a.file, a.port)
  except fileformat.RecordingError as e:
    print(f"baregrad.viz: {e}", file=sys.stderr)
    return 2
  return 0

sys.exit(main())
