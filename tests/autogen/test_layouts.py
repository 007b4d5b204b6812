"""Every generated record against the C compiler.

[cffi]: the module's headers are on this machine; a cffi extension built from them asks
        the compiler for sizeof, _Alignof, every offsetof and every bitfield's bits.
[recorded]: the headers are not here (NVIDIA's and Qualcomm's come from GitHub); ctypes is
        compared with the layout the compiler gave when the module was generated (_LAYOUT).
"""
from __future__ import annotations

import ctypes
import functools
import importlib
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # autogen_testlib, also under --import-mode=importlib

from autogen_testlib import records_of, sources_matching, cffi_layouts, ctypes_layout, include_lines
from autogen.gen import CModule
from autogen.modules import MODULES


def _params() -> list:
  out = []
  for name, spec in MODULES.items():
    if not isinstance(spec, CModule): continue
    mod = importlib.import_module(f"baregrad.ctypes_autogen.{name}")
    if not mod._LAYOUT: continue
    src, _ = sources_matching(name, mod)
    mode = "cffi" if src is not None else "recorded"
    for key in mod._LAYOUT: out.append(pytest.param(name, key, mode, id=f"{name}:{key}[{mode}]"))
  return out


@functools.lru_cache(maxsize=None)
def _compiler_layouts(name: str) -> dict:
  spec = MODULES[name]
  mod = importlib.import_module(f"baregrad.ctypes_autogen.{name}")
  src, why = sources_matching(name, mod)
  assert src is not None, why
  records = records_of(mod)
  inc = [spec.path(src, i) for i in spec.includes]
  return cffi_layouts(records, spec.prelude + include_lines(spec.headers, src), inc, spec.defines)


@pytest.mark.parametrize("name,key,mode", _params())
def test_layout(name: str, key: str, mode: str) -> None:
  mod = importlib.import_module(f"baregrad.ctypes_autogen.{name}")
  cls = getattr(mod, key)
  size, align, offs, bits, sizes = ctypes_layout(cls)
  want = _compiler_layouts(name)[key] if mode == "cffi" else mod._LAYOUT[key]
  wsize, walign, woffs, wbits, wsizes = want
  assert size == wsize, f"{key}: sizeof ctypes {size} != C {wsize}"
  assert offs == woffs, f"{key}: offsets differ: ctypes {offs} C {woffs}"
  assert bits == wbits, f"{key}: bitfields differ: ctypes {bits} C {wbits}"
  assert sizes == wsizes, f"{key}: member sizes differ: ctypes {sizes} C {wsizes}"
  # ctypes cannot raise a record's alignment above its members' (no _align_ before Python 3.13);
  # the generator makes offsets and sizes exact with padding instead, so only check it never exceeds C's
  assert align <= walign or ctypes.sizeof(cls) == 0, f"{key}: ctypes alignment {align} > C {walign}"
  if mode == "cffi":
    assert mod._LAYOUT[key] == want, f"{key}: the committed module was made from different headers; regenerate"


def test_every_c_module_is_covered() -> None:
  """A module with records but no test would hide a layout; list what each mode covered."""
  params = _params()
  modes = {p.values[0]: p.values[2] for p in params}
  for name, spec in MODULES.items():
    if isinstance(spec, CModule) and importlib.import_module(f"baregrad.ctypes_autogen.{name}")._LAYOUT:
      assert name in modes
  print("layout checks:", ", ".join(f"{n}[{m}]" for n, m in sorted(modes.items())))
