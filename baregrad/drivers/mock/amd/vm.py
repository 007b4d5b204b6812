"""The GPU's VM: virtual addresses translated through the process's page tables on that GPU (a miss is a
GPUFaultErr, reported as amdgpu's page-fault lines with the queues evicted), GPU reads, writes and copies, and the
shader interpreter's view of the same memory (a TrackingMemory recording accesses for hazard reports)."""
from __future__ import annotations
import bisect, ctypes
from typing import Any
from baregrad.ctypes_autogen import kfd
from baregrad.drivers.mock.amd.state import BO, GPU
from baregrad.drivers.mock.common import GPUFaultErr, PAGE

_TRACKING: type | None = None

def _tracking_memory() -> Any:
  """A fresh TrackingMemory (the class is built on first use: the PTX interpreter is imported lazily)."""
  global _TRACKING
  if _TRACKING is None: _TRACKING = _make_tracking()
  return _TRACKING()

def _make_tracking() -> type:
  import numpy as np
  from baregrad.drivers.mock.ptx import Memory
  class TrackingMemory(Memory):
    """The interpreter's memory, recording the addresses each access touches while `tracking` is set (except inside the
    `ignore` ranges: the scratch backing memory, private to each wave)."""
    tracking = False
    def __init__(self) -> None:
      super().__init__()
      self.reads: list = []
      self.writes: list = []
      self.ignore: list = []
    def _record(self, to: list, addrs: Any, dtype: Any) -> None:
      a = np.asarray(addrs, np.uint64).reshape(-1)
      if a.size and any(lo <= int(a.min()) and int(a.max()) < hi for lo, hi in self.ignore): return
      to.append((a.copy(), np.dtype(dtype).itemsize))
    def load(self, addrs: Any, dtype: Any, what: str = "load") -> Any:
      if self.tracking: self._record(self.reads, addrs, dtype)
      return super().load(addrs, dtype, what)
    def store(self, addrs: Any, values: Any, dtype: Any, what: str = "store") -> None:
      if self.tracking: self._record(self.writes, addrs, dtype)
      super().store(addrs, values, dtype, what)
    def _find(self, va: int, size: int) -> Any:  # the region holding [va, va+size): a binary search (many BOs are mapped)
      i = int(np.searchsorted(self._starts, np.uint64(va), side="right")) - 1
      if i >= 0:
        r = self._regions[i]
        if va + size <= r.va + r.size: return r
      return super()._find(va, size)   # its GPUFault
    def read_bytes(self, va: int, size: int) -> bytes:
      if self.tracking: self.reads.append((np.array([va], np.uint64), size))
      return super().read_bytes(va, size)
    def write_bytes(self, va: int, data: Any) -> None:
      if self.tracking: self.writes.append((np.array([va], np.uint64), len(bytes(data))))
      super().write_bytes(va, data)
  return TrackingMemory

def _interp_map(mem: Any, bo: BO) -> None:
  import numpy as np
  assert bo.backing is not None
  mem.map(bo.va, bo.size, data=np.ctypeslib.as_array((ctypes.c_uint8 * bo.size).from_address(bo.backing.view)), name=bo.domain)


class GPUVM:
  """Translation, GPU memory access and VM faults."""

  def _xlate(self, g: GPU, va: int, n: int, client: str = "CP", write: bool = False) -> int:
    """Host address of GPU VA range [va, va+n) within one mapping; GPUFaultErr when unmapped."""
    last = g.last_hit
    if last is not None and last[0] <= va and va + n <= last[0] + last[1] and last[2].gpu_id_mapped(g): return last[3] + (va - last[0])
    i = bisect.bisect_right(g.vm, va, key=lambda m: m[0]) - 1
    if i >= 0:
      base, size, bo = g.vm[i]
      if base <= va and va + n <= base + size and bo.backing is not None:
        g.last_hit = (base, size, bo, bo.backing.view)
        return bo.backing.view + (va - base)
    raise GPUFaultErr(va, write, client)

  def gpu_read(self, g: GPU, va: int, n: int, client: str = "CP") -> bytes:
    out, off = bytearray(), 0
    while off < n:  # page by page across mappings
      k = min(n - off, PAGE - ((va + off) % PAGE)) if n - off > PAGE else n - off
      try: out += ctypes.string_at(self._xlate(g, va + off, k, client), k)
      except GPUFaultErr:
        k = min(n - off, PAGE - ((va + off) % PAGE))
        out += ctypes.string_at(self._xlate(g, va + off, k, client), k)
      off += k
    return bytes(out)

  def gpu_write(self, g: GPU, va: int, data: bytes, client: str = "CP") -> None:
    off = 0
    while off < len(data):
      k = min(len(data) - off, PAGE - ((va + off) % PAGE))
      ctypes.memmove(self._xlate(g, va + off, k, client, True), data[off:off + k], k)
      off += k

  def u32(self, g: GPU, va: int) -> int: return int.from_bytes(self.gpu_read(g, va, 4), "little")

  def u64(self, g: GPU, va: int) -> int: return int.from_bytes(self.gpu_read(g, va, 8), "little")

  def _copy(self, g: GPU, dst: int, src: int, n: int, client: str) -> None:
    while n > 0:
      k = min(n, 1 << 20)
      self.gpu_write(g, dst, self.gpu_read(g, src, k, client), client)
      src, dst, n = src + k, dst + k, n - k

  def _vm_fault(self, g: GPU, e: GPUFaultErr) -> None:
    """What a GPU page fault becomes (gmc_v11_0.c / gmc_v9_0.c: the dmesg lines; kfd_debug.c:
    kfd_set_dbg_ev_from_interrupt -> kfd_dqm_evict_pasid + kfd_signal_vm_fault_event)."""
    page = e.va >> 12 << 12
    self.log.append(f"amdgpu 0000:{3 + g.index:02x}:00.0: amdgpu: [gfxhub] page fault (src_id:0 ring:{0x18 if e.client == 'SDMA' else 0} vmid:8 pasid:32770)")
    self.log.append(f"amdgpu 0000:{3 + g.index:02x}:00.0: amdgpu:   in page starting at address {page:#018x} "
                    f"from client {e.client} ({'write' if e.write else 'read'}: {e})")
    for q in self.queues.values():
      if q.gpu is g: q.evicted = True
    # evict_process_queues_cpsch: qpd->evicted++; no restore follows a VM fault (module docstring)
    if g.gpu_id in self.pdd: self.pdd[g.gpu_id]["evicted"] = self.pdd[g.gpu_id].get("evicted", 0) + 1
    data = kfd.struct_kfd_hsa_memory_exception_data()
    data.va, data.gpu_id, data.failure.NotPresent, data.failure.imprecise = page, g.gpu_id, 1, 0
    for ev in self.events.values():
      if ev.type == kfd.KFD_IOC_EVENT_MEMORY: self._signal(ev, bytes(data))

  def _interp_memory(self, g: GPU, tracking: bool) -> Any:
    """The interpreter's view of the GPU VA space: every mapping, backed by the same pages (no copies); kept in step
    with the page tables as BOs are mapped and unmapped."""
    if g.interp_mem is None:
      g.interp_mem = _tracking_memory()
      for va, n, bo in g.vm:
        if bo.backing is not None and bo.domain not in ("doorbell", "mmio"): _interp_map(g.interp_mem, bo)
    mem = g.interp_mem
    mem.tracking, mem.reads, mem.writes, mem.ignore = tracking, [], [], []
    return mem
