"""Shared by the autogen tests: the C compiler's view of a set of records, through cffi."""
from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "tools") not in sys.path: sys.path.insert(0, str(ROOT / "tools"))
if str(ROOT) not in sys.path: sys.path.insert(0, str(ROOT))

PAD_PREFIXES = ("_pad", "_bfpad")

# (size, align, {member: offset}, {bitfield: (bit offset, width)}, {member: sizeof})
Layout = tuple[int, int, dict[str, int], dict[str, tuple[int, int]], dict[str, int]]


def ctypes_leaves(cls: Any) -> Iterator[tuple[str, bool]]:
  """Named members of a ctypes record, through `_anonymous_` members, without the generator's padding."""
  anon = set(getattr(cls, "_anonymous_", ()))
  for f in cls._fields_:
    name, typ = f[0], f[1]
    if name in anon: yield from ctypes_leaves(typ)
    elif not name.startswith(PAD_PREFIXES): yield name, len(f) == 3


def ctypes_layout(cls: Any) -> Layout:
  offs, bits, sizes = {}, {}, {}
  for name, isbf in ctypes_leaves(cls):
    d = getattr(cls, name)
    if isbf: bits[name] = (d.offset * 8 + (d.size & 0xFFFF), d.size >> 16)
    else: offs[name], sizes[name] = d.offset, d.size
  return ctypes.sizeof(cls), ctypes.alignment(cls), offs, bits, sizes


def flexible(cls: Any) -> set[str]:
  """Members that are flexible arrays (zero-length ctypes arrays at the end): C has no sizeof for them."""
  return {n for n, b in ctypes_leaves(cls) if not b and getattr(cls, n).size == 0 and getattr(cls, n).offset == ctypes.sizeof(cls)}


def records_of(mod: Any) -> dict[str, tuple[str, list[tuple[str, bool]], set[str]]]:
  return {k: (mod._CTYPES[k], list(ctypes_leaves(getattr(mod, k))), flexible(getattr(mod, k))) for k in mod._LAYOUT}


def cffi_layouts(records: dict[str, tuple[str, list[tuple[str, bool]], set[str]]], prelude: str, includes: list[str],
                 defines: list[str], cflags: tuple[str, ...] = ()) -> dict[str, Layout]:
  """Compile a cffi extension (API mode) that asks the C compiler for sizeof/_Alignof/offsetof of every
  member and the bit range of every bitfield; `records` maps key -> (C type, [(member, is_bitfield)])."""
  import cffi
  tab, bfc, nbf = [], [], 0
  for key, (ctype, leaves, flex) in records.items():
    tab.append(f"sizeof({ctype}), _Alignof({ctype}),")
    for leaf, isbf in leaves:
      if isbf:
        bfc.append(f"  {{ {ctype} s; memset(&s, 0, sizeof s); s.{leaf} = -1; bfscan(&s, sizeof s, &bf_values[{2 * nbf}]); }}\n")
        nbf += 1
      else:
        tab.append(f"offsetof({ctype}, {leaf}), " + ("0," if leaf in flex else f"sizeof((({ctype}*)0)->{leaf}),"))
  ntab = len("".join(tab).split(",")) - 1
  src = (prelude + "#include <stddef.h>\n#include <string.h>\n"
         f"long long layout_values[{ntab + 1}] = {{\n" + "\n".join(tab) + "\n0};\n"
         f"long long bf_values[{2 * nbf + 1}];\n"
         "static void bfscan(const void *p, size_t n, long long *out) { const unsigned char *b = p; long long lo = -1, hi = -1;\n"
         "  for (size_t i = 0; i < n * 8; i++) if ((b[i / 8] >> (i % 8)) & 1) { if (lo < 0) lo = i; hi = i; }\n"
         "  out[0] = lo; out[1] = hi - lo + 1; }\n"
         "void fill_bitfields(void) {\n" + "".join(bfc) + "}\n")
  ffi = cffi.FFI()
  ffi.cdef(f"extern long long layout_values[{ntab + 1}]; extern long long bf_values[{2 * nbf + 1}]; void fill_bitfields(void);")
  with tempfile.TemporaryDirectory() as td:
    name = f"_autogen_probe_{abs(hash(src)) % 10**12}"
    ffi.set_source(name, src, include_dirs=includes,
                   define_macros=[tuple(d.split("=", 1)) if "=" in d else (d, None) for d in defines],
                   extra_compile_args=["-std=gnu11", "-w", "-O0", *cflags])
    so = ffi.compile(tmpdir=td)
    spec = importlib.util.spec_from_file_location(name, os.path.join(td, so) if not os.path.isabs(so) else so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    lib = mod.lib
    lib.fill_bitfields()
    vals = list(lib.layout_values)
    bfv = list(lib.bf_values)
  out: dict[str, Layout] = {}
  pos, bpos = 0, 0
  for key, (ctype, leaves, _) in records.items():
    size, align = vals[pos], vals[pos + 1]
    pos += 2
    offs, bits, sizes = {}, {}, {}
    for leaf, isbf in leaves:
      if isbf:
        bits[leaf] = (bfv[bpos], bfv[bpos + 1])
        bpos += 2
      else:
        offs[leaf], sizes[leaf] = vals[pos], vals[pos + 1]
        pos += 2
    out[key] = (size, align, offs, bits, sizes)
  return out


def include_lines(headers: list[str], src: str) -> str:
  return "".join(f"#include {h}\n" if h.startswith("<") else f'#include "{os.path.join(src, h)}"\n' for h in headers)


def sources_matching(name: str, mod: Any) -> tuple[Any, str]:
  """The module's sources on this machine if they are the version the module was generated from;
  else (None, why). A different version (a newer Debian package, say) is not what the committed
  module describes, so it is not the reference for it."""
  from autogen.cli import source_for
  from autogen.modules import MODULES
  src, why = source_for(name)
  if src is None: return None, why
  spec = MODULES[name]
  here = f"{spec.source.what} {spec.source.version(src)}"
  if here != mod.SOURCE: return None, f"sources here are {here!r}, the module was generated from {mod.SOURCE!r}"
  return src, ""
