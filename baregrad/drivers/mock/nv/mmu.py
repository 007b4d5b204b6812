"""The GPU's MMU: GPU virtual addresses translated through the page tables UVM set up (`va_map`); an access outside
them is an MMUFault."""
from __future__ import annotations
import bisect, ctypes
from baregrad.drivers.mock.common import MMUFault

class GPUMMU:
  """Translation of GPU virtual addresses and reads/writes of GPU memory through it."""

  def _xlate(self, va: int, n: int) -> int:
    """Host address of GPU VA range [va, va+n) (one mapping); MMUFault when unmapped."""
    i = bisect.bisect_right(self.va_map, va, key=lambda m: m[0]) - 1
    if i >= 0:
      base, length, mem, off = self.va_map[i]
      if va + n <= base + length: return mem.view + off + (va - base)
      if va < base + length: raise MMUFault(base + length, f"MMU fault: GPU VA {va:#x}+{n:#x} runs past the mapping at {base:#x}+{length:#x}")
    raise MMUFault(va, f"MMU fault: GPU VA {va:#x}+{n:#x} is not mapped")

  def _mapping_of(self, va: int) -> tuple[int, int] | None:
    i = bisect.bisect_right(self.va_map, va, key=lambda m: m[0]) - 1
    if i >= 0 and va < self.va_map[i][0] + self.va_map[i][1]: return self.va_map[i][0], self.va_map[i][1]
    return None

  def read_gpu(self, va: int, n: int) -> bytes: return ctypes.string_at(self._xlate(va, n), n) if n else b""

  def write_gpu(self, va: int, data: bytes) -> None:
    if data: ctypes.memmove(self._xlate(va, len(data)), data, len(data))
