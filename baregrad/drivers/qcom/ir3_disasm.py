"""ir3 (Adreno shader ISA) disassembly through Mesa's disassembler in the tinymesa wheel (the optional extra `qcom`).

tinymesa exports `int disasm_a3xx(uint32_t *dwords, int sizedwords, int level, FILE *out, unsigned gpu_id)`; it
writes text to a stdio stream, so we hand it one from open_memstream and read the text back.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any


class Ir3Unavailable(RuntimeError):
  """tinymesa (pip install baregrad[qcom]) is not installed or lacks the symbol needed."""


@functools.cache
def _libs() -> tuple[Any, Any]:
  try:
    import tinymesa  # type: ignore[import-untyped]
  except ImportError as e:
    raise Ir3Unavailable("ir3 disassembly needs the tinymesa wheel: pip install 'baregrad[qcom]'") from e
  lib = ctypes.CDLL(str(tinymesa.libtinymesa))
  libc = ctypes.CDLL(ctypes.util.find_library("c"))
  if not hasattr(lib, "disasm_a3xx"): raise Ir3Unavailable(f"{tinymesa.libtinymesa} does not export disasm_a3xx")
  lib.disasm_a3xx.argtypes = [ctypes.POINTER(ctypes.c_uint32), ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_uint]
  lib.disasm_a3xx.restype = ctypes.c_int
  libc.open_memstream.restype = ctypes.c_void_p
  libc.open_memstream.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
  libc.fclose.argtypes = [ctypes.c_void_p]
  libc.free.argtypes = [ctypes.c_void_p]
  return lib, libc


def disassemble(words: list[int], gpu_id: int = 630) -> str:
  """Text of the ir3 program in `words` (two dwords per instruction) for chip aNNN `gpu_id`."""
  if len(words) % 2: raise ValueError(f"ir3 instructions are 64-bit: {len(words)} dwords is not a whole number of them")
  lib, libc = _libs()
  arr = (ctypes.c_uint32 * max(len(words), 1))(*words)
  ptr, size = ctypes.c_void_p(), ctypes.c_size_t()
  f = libc.open_memstream(ctypes.byref(ptr), ctypes.byref(size))
  if not f: raise OSError(ctypes.get_errno(), "open_memstream failed")
  rc = lib.disasm_a3xx(arr, len(words), 0, f, gpu_id)
  libc.fclose(f)
  text = ctypes.string_at(ptr.value, size.value).decode(errors="replace") if ptr.value else ""
  libc.free(ptr)
  if rc != 0: raise ValueError(f"disasm_a3xx refused the program ({len(words)} dwords, gpu {gpu_id}): rc {rc}; got so far:\n{text}")
  return text
