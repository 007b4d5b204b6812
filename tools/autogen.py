#!/usr/bin/env python3
"""Generate baregrad/ctypes_autogen/* from the real C headers (and the Adreno register XML).

  python tools/autogen.py MODULE [--src PATH] [--allow-skip NAME ...]   regenerate one module
  python tools/autogen.py --all                                          regenerate every module whose sources are here
  python tools/autogen.py --check                                        regenerate into a temp folder and diff
  python tools/autogen.py --list                                         modules, sources and default paths
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from autogen.cli import main  # noqa: E402

if __name__ == "__main__":
  sys.exit(main())
