"""The copy engine (the generation's DMA class): copies page by page through the MMU (a fault names its read or write
side), run as a step of the work in flight when copies and launches overlap."""
from __future__ import annotations
import ctypes
from typing import Any
from baregrad.drivers.mock.common import MMUFault, PAGE
from baregrad.drivers.mock.nv.state import Work

class CopyEngine:
  """Copies through the MMU."""

  def _copy(self, dst: int, src: int, n: int) -> None:
    while n > 0:  # page by page across mappings
      k = min(n, PAGE - (src % PAGE), PAGE - (dst % PAGE)) if n > PAGE else n
      try: s, d = self._xlate(src, k), self._xlate(dst, k)
      except MMUFault:
        k = min(n, PAGE - (src % PAGE), PAGE - (dst % PAGE))
        try: s = self._xlate(src, k)
        except MMUFault as e: raise MMUFault(e.address, str(e), "ACCESS_TYPE_VIRT_READ") from None
        try: d = self._xlate(dst, k)
        except MMUFault as e: raise MMUFault(e.address, str(e), "ACCESS_TYPE_VIRT_WRITE") from None
      ctypes.memmove(d, s, k)
      src, dst, n = src + k, dst + k, n - k

  def _copy_steps(self, w: Work) -> Any:
    if w.copy is not None:
      dst, src, n = w.copy
      for va, kind in ((src, "r"), (dst, "w")):
        if (sp := self._mapping_of(va)) is not None: w.access.add((sp[0], kind))
      self._copy(dst, src, n)
    yield
