"""The GPU's MMU: GPU virtual addresses translated through the page tables UVM set up for the GPU VA space the work
runs in (`va_map`: the running channel's; each GPU VA space has its own, uvm.py); an access outside them is an
MMUFault (on the GPU: a FAULT_PTE MMU fault, Xid 31)."""
from __future__ import annotations
import bisect, contextlib, ctypes
from typing import Any, Iterator
from baregrad.drivers.mock.common import MMUFault

class GPUMMU:
  """Translation of GPU virtual addresses and reads/writes of GPU memory through it."""
  _cur_vas: dict | None = None   # the GPU VA space (RM VA space data) of the channel running now

  @property
  def va_map(self) -> list[tuple[int, int, Any, int]]:
    """The page tables in use: the running channel's GPU VA space's, else (the host asking: tests, decoders) those of
    the first GPU VA space registered with UVM."""
    if self._cur_vas is not None and "pt" in self._cur_vas: return self._cur_vas["pt"]
    for f in self.files.values():
      if f.get("vas") is not None and f["vas"].gpu_vas: return next(iter(f["vas"].gpu_vas.values()))["pt"]
    return []

  @contextlib.contextmanager
  def in_vaspace(self, vas: dict | None) -> Iterator[None]:
    """Translate through GPU VA space `vas` (RM VA space data) inside the block: what a channel of it runs sees."""
    prev, self._cur_vas = self._cur_vas, vas
    try: yield
    finally: self._cur_vas = prev

  def gpu_view(self, uuid: bytes) -> Any:
    """in_vaspace for the GPU VA space UVM registered for GPU `uuid` (the first VA space that has one)."""
    for f in self.files.values():
      if f.get("vas") is not None and uuid in f["vas"].gpu_vas: return self.in_vaspace(f["vas"].gpu_vas[uuid])
    raise KeyError(f"no GPU VA space registered for GPU {uuid.hex()}")

  def unmap_memory(self, mem: Any) -> None:
    """Memory RM freed leaves every page table that maps it."""
    for f in self.files.values():
      if f.get("vas") is None: continue
      for d in f["vas"].gpu_vas.values(): d["pt"][:] = [m for m in d["pt"] if m[2] is not mem]

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
