"""Ask the C compiler: values of integer constant expressions and the layout of records.

The compiler is the reference for both: it reads the original headers, with every
attribute, pragma and macro, so what it prints is exactly what a C driver would see.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile

from .cparse import AutogenError


def _cc(cmd: list[str]) -> subprocess.CompletedProcess:
  return subprocess.run(cmd, capture_output=True, text=True)


def _head(headers: list[str], prelude: str) -> str:
  return prelude + "".join((f"#include {h}\n" if h.startswith("<") else f'#include "{os.path.abspath(h)}"\n') for h in headers)


def eval_int_exprs(exprs: dict[str, str], headers: list[str], includes: list[str], defines: list[str],
                   prelude: str = "", cc: str = "gcc") -> tuple[dict[str, int], dict[str, str]]:
  """Evaluate each C expression as an integer constant expression.

  Returns (values, rejected) where rejected maps a name to the compiler's reason (it is not
  an integer constant expression: a string, a float, a type, a partial expression...)."""
  names = list(exprs)
  flags = [f"-I{i}" for i in includes] + [f"-D{d}" for d in defines]
  rejected: dict[str, str] = {}
  with tempfile.TemporaryDirectory() as td:
    src = os.path.join(td, "probe.c")
    ok = list(names)
    for _ in range(4):  # errors in one pass can hide others; a few passes settle it
      head = _head(headers, prelude)
      lines = [head]
      base = head.count("\n") + 1
      for n in ok:
        # integer constant expressions only: `& 0` refuses pointers, strings and floats
        lines.append(f"_Static_assert((({exprs[n]}) & 0) == 0, \"\");\n")
      with open(src, "w") as f: f.write("".join(lines))
      r = _cc([cc, "-std=gnu11", "-fsyntax-only", "-fmax-errors=0", "-w"] + flags + [src])
      if r.returncode == 0: break
      bad = set()
      # an error inside a macro is reported at the header; the probe line shows up in the notes
      why = ""
      for ln in r.stderr.splitlines():
        e = re.search(r"error: (.*)$", ln)
        if e: why = e.group(1)
        m = re.match(rf"^{re.escape(src)}:(\d+):\d+: ", ln)
        if m:
          idx = int(m.group(1)) - base
          if 0 <= idx < len(ok):
            bad.add(ok[idx])
            rejected.setdefault(ok[idx], why)
      if not bad: raise AutogenError(f"probe failed to compile:\n{r.stderr[:4000]}")
      ok = [n for n in ok if n not in bad]
    else:
      raise AutogenError("probe did not settle")
    body = [_head(headers, prelude), "#include <stdio.h>\n",
            "static const struct { int neg; unsigned long long v; } V[] = {\n"]
    for n in ok: body.append(f"  {{ ({exprs[n]}) < 0, (unsigned long long)({exprs[n]}) }},\n")
    body.append("  {0, 0}};\nint main(void) { for (unsigned i = 0; i < sizeof V / sizeof V[0] - 1; i++)"
                " printf(\"%d %llu\\n\", V[i].neg, V[i].v); return 0; }\n")
    with open(src, "w") as f: f.write("".join(body))
    out = _run(src, flags, td, cc)
  vals = {}
  for n, line in zip(ok, out.splitlines()):
    neg, v = line.split()
    vals[n] = int(v) - (1 << 64) if neg == "1" else int(v)
  return vals, rejected


def _run(src: str, flags: list[str], td: str, cc: str) -> str:
  exe = os.path.join(td, "probe")
  r = _cc([cc, "-std=gnu11", "-w", "-O0"] + flags + [src, "-o", exe])
  if r.returncode != 0: raise AutogenError(f"probe failed to compile:\n{r.stderr[:4000]}")
  r = subprocess.run([exe], capture_output=True, text=True)
  if r.returncode != 0: raise AutogenError(f"probe failed to run: {r.stderr[:2000]}")
  return r.stdout


# (key, C type expression, [(leaf, is_bitfield)], {flexible array members: sizeof is not defined for them})
LayoutQuery = tuple[str, str, list[tuple[str, bool]], set[str]]
# one record's layout: (size, align, {leaf: offset}, {leaf: (bit offset, width)}, {leaf: sizeof})
Layout = tuple[int, int, dict[str, int], dict[str, tuple[int, int]], dict[str, int]]


def probe_layouts(queries: list[LayoutQuery], headers: list[str], includes: list[str], defines: list[str],
                  prelude: str = "", cc: str = "gcc") -> dict[str, Layout]:
  """sizeof, _Alignof, offsetof of every leaf and the bit range of every bitfield, from gcc."""
  flags = [f"-I{i}" for i in includes] + [f"-D{d}" for d in defines]
  tab: list[str] = []
  bfc: list[str] = []
  for qi, (key, cexpr, leaves, flex) in enumerate(queries):
    tab.append(f"sizeof({cexpr}), _Alignof({cexpr}),")
    for leaf, isbf in leaves:
      if isbf:
        bfc.append(f"  {{ {cexpr} s; memset(&s, 0, sizeof s); s.{leaf} = -1; bf(&s, sizeof s); }}\n")
      else:
        tab.append(f"offsetof({cexpr}, {leaf}), " + ("0," if leaf in flex else f"sizeof((({cexpr}*)0)->{leaf}),"))
  src_text = (_head(headers, prelude) + "#include <stdio.h>\n#include <stddef.h>\n#include <string.h>\n"
              "static const unsigned long long T[] = {\n" + "\n".join(tab) + "\n0};\n"
              "static void bf(const void *p, size_t n) { const unsigned char *b = p; long lo = -1, hi = -1;\n"
              "  for (size_t i = 0; i < n * 8; i++) if ((b[i / 8] >> (i % 8)) & 1) { if (lo < 0) lo = i; hi = i; }\n"
              "  printf(\"%ld %ld\\n\", lo, hi - lo + 1); }\n"
              "int main(void) {\n  for (unsigned i = 0; i < sizeof T / sizeof T[0] - 1; i++) printf(\"%llu\\n\", T[i]);\n"
              + "".join(bfc) + "  return 0; }\n")
  with tempfile.TemporaryDirectory() as td:
    src = os.path.join(td, "layout.c")
    with open(src, "w") as f: f.write(src_text)
    out = _run(src, flags, td, cc).split("\n")
  pos = 0
  res: dict[str, Layout] = {}
  ntab = sum(2 + sum(2 for _, b in lv if not b) for _, _, lv, _ in queries)
  bfpos = ntab
  for key, cexpr, leaves, _ in queries:
    size, align = int(out[pos]), int(out[pos + 1])
    pos += 2
    offs: dict[str, int] = {}
    bits: dict[str, tuple[int, int]] = {}
    sizes: dict[str, int] = {}
    for leaf, isbf in leaves:
      if isbf:
        lo, w = map(int, out[bfpos].split())
        bfpos += 1
        bits[leaf] = (lo, w)
      else:
        offs[leaf], sizes[leaf] = int(out[pos]), int(out[pos + 1])
        pos += 2
    res[key] = (size, align, offs, bits, sizes)
  return res
