"""Generate baregrad/ctypes_autogen/* from the real C headers (and the Adreno register XML).

  python tools/autogen.py MODULE [--src PATH] [--allow-skip NAME ...]   regenerate one module
  python tools/autogen.py --all                                          every module whose sources are here
  python tools/autogen.py --check                                        regenerate into a temp folder and diff
  python tools/autogen.py --list                                         modules, sources and default paths

Without --src a module is made from the path recorded in its Command line, else the default.
"""
from __future__ import annotations

import argparse
import difflib
import os
import sys
import tempfile

from .cparse import AutogenError
from .gen import generate
from .modules import LINUX_SRC, MODULES, linux_source
from .rnn import XmlModule, generate_xml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "baregrad", "ctypes_autogen")


def out_path(name: str, base: str = OUT) -> str:
  return os.path.join(base, *name.split(".")) + ".py"


def default_src(spec) -> str | None:
  if spec.source is LINUX_SRC: return linux_source()
  return spec.source.default


def command_for(name: str, src: str | None, allow: list[str]) -> str:
  cmd = f"python tools/autogen.py {name}"
  if src is not None and os.path.abspath(src) != os.path.abspath(default_src(MODULES[name]) or "/nonexistent"):
    cmd += f" --src {src}"
  for a in allow: cmd += f" --allow-skip {a}"
  return cmd


def make(name: str, src: str | None, allow: list[str]) -> tuple[str, dict]:
  spec = MODULES[name]
  if src is None: src = default_src(spec)
  if src is None: raise AutogenError(f"{name}: no source path: {spec.source.how}")
  if isinstance(spec, XmlModule): return generate_xml(spec, src, command_for(name, src, allow))
  return generate(spec, src, command_for(name, src, allow), allow)


def write(name: str, text: str, base: str = OUT) -> str:
  p = out_path(name, base)
  os.makedirs(os.path.dirname(p), exist_ok=True)
  d = os.path.dirname(p)
  while os.path.abspath(d) != os.path.abspath(base):
    init = os.path.join(d, "__init__.py")
    if not os.path.exists(init) and base != OUT: open(init, "w").close()
    d = os.path.dirname(d)
  with open(p, "w") as f: f.write(text)
  return p


def recorded_src(name: str) -> str | None:
  """The --src a committed module was made with, read back from its Command line."""
  try:
    for line in open(out_path(name)):
      if line.startswith("# Command: "):
        parts = line.split()
        return parts[parts.index("--src") + 1] if "--src" in parts else None
  except (OSError, ValueError, IndexError):
    return None
  return None


def source_for(name: str) -> tuple[str | None, str]:
  """Where the sources of `name` are on this machine (the path it was generated from, else the default),
  or (None, why not)."""
  spec = MODULES[name]
  src = None if spec.source is LINUX_SRC else recorded_src(name)
  if src is not None and not os.path.isabs(src): src = os.path.join(ROOT, src)
  if src is None or not os.path.isdir(src): src = default_src(spec)
  if src is None or not os.path.isdir(src): return None, f"sources not here: {spec.source.how}"
  for h in spec.headers:
    if not h.startswith("<") and not os.path.exists(os.path.join(src, h)):
      return None, f"{os.path.join(src, h)} not here: {spec.source.how}"
  try:
    spec.source.version(src)
  except AutogenError as e:
    return None, str(e)
  return src, ""


def check() -> int:
  diffs, skipped = 0, []
  with tempfile.TemporaryDirectory() as td:
    for name in MODULES:
      src, why = source_for(name)
      if src is None:
        skipped.append(f"{name}: {why}")
        continue
      try:
        text, _ = make(name, src, [])
      except AutogenError as e:
        if "not found" in str(e):
          skipped.append(f"{name}: {e}")
          continue
        raise
      # written out and read back, so that what is compared is exactly what a regeneration would commit
      with open(write(name, text, td)) as f: text = f.read()
      have = open(out_path(name)).read() if os.path.exists(out_path(name)) else ""
      if have != text:
        diffs += 1
        sys.stdout.writelines(list(difflib.unified_diff(have.splitlines(True), text.splitlines(True),
                                                        f"committed/{name}", f"regenerated/{name}"))[:200])
      else:
        print(f"{name}: up to date")
  for s in skipped: print(f"skipped {s}")
  print(f"{diffs} module(s) differ" if diffs else "all checked modules are up to date")
  return 1 if diffs else 0


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("module", nargs="?", help="module to regenerate (see --list)")
  ap.add_argument("--src", help="root of the module's sources (default: where Debian installs them)")
  ap.add_argument("--allow-skip", action="append", default=[], metavar="NAME",
                  help="skip this declaration (glob) instead of failing when it cannot be bound")
  ap.add_argument("--check", action="store_true", help="regenerate into a temp folder and diff with the committed files")
  ap.add_argument("--all", action="store_true", help="regenerate every module whose sources are present")
  ap.add_argument("--list", action="store_true")
  a = ap.parse_args(argv)
  try:
    if a.list:
      for n, m in MODULES.items(): print(f"{n:20s} {m.source.what}  (default src: {m.source.default})")
      return 0
    if a.check: return check()
    names = list(MODULES) if a.all else [a.module] if a.module else []
    if not names: ap.error("name a module, or pass --all / --check / --list")
    for n in names:
      if n not in MODULES: raise AutogenError(f"unknown module {n}; known: {', '.join(MODULES)}")
      src = a.src if a.src else recorded_src(n)
      try:
        text, rep = make(n, src, a.allow_skip)
      except AutogenError as e:
        if a.all and "not found" in str(e):
          print(f"skipped {n}: {e}")
          continue
        raise
      p = write(n, text)
      print(f"{n}: wrote {os.path.relpath(p, ROOT)} " + ", ".join(f"{v} {k}" for k, v in rep.items())
            + (" (the skipped names and why are in its SKIPPED dict)" if rep.get("skipped") else ""))
    return 0
  except AutogenError as e:
    print(f"autogen: error: {e}", file=sys.stderr)
    return 2


