"""GPU memory of the NV driver: RM memory objects (video memory NV01_MEMORY_LOCAL_USER, host-visible
NV01_MEMORY_SYSTEM mapped for the CPU through /dev/nvidiactl) mapped into the GPU VA space through UVM external ranges,
the two VA windows they live in, shader local memory, and the HCQ allocator over them. Why the control node, and why
RM-allocated rather than OS-described pages: device.py's module docstring."""
from __future__ import annotations
import ctypes
from array import array
from typing import Hashable
from baregrad.hal import OutOfMemory
from baregrad.hcq import HCQAllocator, HCQBuffer
from baregrad.drivers.vmem import PAGE, VAAllocator, release_to_window, round_up
from baregrad.drivers.nv.rm import RMError
from baregrad.drivers.nv.hw import NV01_MEMORY_SYSTEM_OS_DESCRIPTOR, nv_ioctl_nvos02_parameters_with_fd

CPU_WINDOW = (0x20_0000_0000, 0x10_0000_0000)   # (base, size): host-visible GPU memory, below 2**40 (GPFIFO entries)
GPU_WINDOW = (0x1000_0000_0000, 0x100_0000_0000)  # device-only memory

class NVMemory:
  """What the driver keeps per RM memory object; `what` names it in fault reports."""
  def __init__(self, handle: int, size: int, va: int, cpu: int | None, host: bool, what: str = "buffer") -> None:
    self.handle, self.size, self.va, self.cpu, self.host, self.what = handle, size, va, cpu, host, what
  def __repr__(self) -> str: return f"<NVMemory {self.what} {self.handle:#x} va={self.va:#x} size={self.size:#x}{' host' if self.host else ''}>"

class DeviceMemory:
  """NVDevice's memory: allocation and release of RM memory objects at VAs of cpu_va (host-visible, below 2**40) or
  gpu_va (device-only), and the shader local memory programs with a stack need."""
  cpu_va: VAAllocator
  gpu_va: VAAllocator
  memories: list[NVMemory]
  def _gpu_alloc(self, size: int, host: bool = False, what: str = "buffer") -> NVMemory:
    nv = self.nv
    size = round_up(max(size, 1), PAGE if host or size < (2 << 20) else (2 << 20))
    align = PAGE if size < (2 << 20) else (2 << 20)
    attr = (nv.NVOS32_ATTR_LOCATION_PCI << 25) if host else (nv.NVOS32_ATTR_PHYSICALITY_ALLOW_NONCONTIGUOUS << 27)
    params = nv.NV_MEMORY_ALLOCATION_PARAMS(owner=self.root, type=nv.NVOS32_TYPE_NOTIFIER if host else nv.NVOS32_TYPE_IMAGE,
                                            attr=attr, size=size, alignment=align, limit=size - 1, format=6)
    try: handle = self.rm_alloc(self.nvdevice, nv.NV01_MEMORY_SYSTEM if host else nv.NV01_MEMORY_LOCAL_USER, params)
    except RMError as e:
      if e.status == nv.NV_ERR_NO_MEMORY:
        raise OutOfMemory(self.device, size, self.allocator.mem_used if getattr(self, "allocator", None) else 0,
                          f"RM {'system' if host else 'video'} memory allocation returned NV_ERR_NO_MEMORY") from None
      raise
    va_pool = self.cpu_va if host else self.gpu_va
    va = va_pool.alloc(size, align)
    cpu = None
    try:
      if host: cpu = self._map_to_cpu(handle, size, target=va)
      self.uvm(nv.UVM_CREATE_EXTERNAL_RANGE, nv.UVM_CREATE_EXTERNAL_RANGE_PARAMS(base=va, length=size), "UVM_CREATE_EXTERNAL_RANGE")
      mp = nv.UVM_MAP_EXTERNAL_ALLOCATION_PARAMS(base=va, length=size, rmCtrlFd=self.fd_ctl, hClient=self.root, hMemory=handle, gpuAttributesCount=1)
      ctypes.memmove(mp.perGpuAttributes[0].gpuUuid.uuid, self.uuid, 16)
      mp.perGpuAttributes[0].gpuMappingType = 1  # UvmGpuMappingTypeReadWriteAtomic
      self.uvm(nv.UVM_MAP_EXTERNAL_ALLOCATION, mp, "UVM_MAP_EXTERNAL_ALLOCATION")
    except BaseException:
      try: self.uvm(nv.UVM_FREE, nv.UVM_FREE_PARAMS(base=va, length=size), "UVM_FREE")
      except Exception: pass
      self.rm_free(handle)
      if cpu is not None: self._unmap_cpu(cpu, size)
      va_pool.release(va, size)
      raise
    m = NVMemory(handle, size, va, cpu, host, what)
    self.memories.append(m)
    return m

  def _import_host(self, buf: HCQBuffer) -> NVMemory:
    """Host pages of the process (a peer link's anonymous pages; or another device's host-visible memory) mapped for
    this GPU at their own address: an OS-descriptor memory object over them (NV_ESC_RM_ALLOC_MEMORY of
    NV01_MEMORY_SYSTEM_OS_DESCRIPTOR on this GPU's /dev/nvidiaN: escape.c RmIoctl takes it only on a GPU's node,
    RmAllocOsDescriptor wants LOCATION_PCI and MAPPING_NO_MAP, RmCreateOsDescriptor a page-aligned address and pins
    the pages), then a UVM external range and mapping as for the device's own memory. The H100 took this route for
    anonymous pages (docs/hw/h100-580.159.04-findings.md#finding-1); for pages of an RM mapping (another device's
    memory mapped through /dev/nvidiactl) os_lock_user_pages fails and RmCreateOsDescriptor tries
    os_lookup_user_io_memory: not seen on hardware (the mock accepts any mapped pages)."""
    assert buf.cpu_addr is not None and buf.cpu_addr == buf.va_addr, "(HCQDevice.import_host checks this)"
    nv = self.nv
    size = round_up(buf.size, PAGE)
    self._os_desc_handles = getattr(self, "_os_desc_handles", 0) + 1
    handle = 0xd1500000 + self._os_desc_handles   # (RM takes the handle from the caller: NVOS32_ALLOC_FLAGS_MEMORY_HANDLE_PROVIDED)
    flags = (nv.NVOS02_FLAGS_PHYSICALITY.encode(nv.NVOS02_FLAGS_PHYSICALITY_NONCONTIGUOUS) |
             nv.NVOS02_FLAGS_LOCATION.encode(nv.NVOS02_FLAGS_LOCATION_PCI) |
             nv.NVOS02_FLAGS_COHERENCY.encode(nv.NVOS02_FLAGS_COHERENCY_CACHED) | nv.NVOS02_FLAGS_MAPPING.encode(nv.NVOS02_FLAGS_MAPPING_NO_MAP))
    w = nv_ioctl_nvos02_parameters_with_fd(params=nv.NVOS02_PARAMETERS(
      hRoot=self.root, hObjectParent=self.nvdevice, hObjectNew=handle, hClass=NV01_MEMORY_SYSTEM_OS_DESCRIPTOR, flags=flags,
      pMemory=buf.cpu_addr, limit=size - 1), fd=-1)
    self._esc(self.fd_dev, nv.NV_ESC_RM_ALLOC_MEMORY, w, "NV_ESC_RM_ALLOC_MEMORY(NV01_MEMORY_SYSTEM_OS_DESCRIPTOR)")
    if w.params.status != 0:
      raise RMError("NV_ESC_RM_ALLOC_MEMORY(NV01_MEMORY_SYSTEM_OS_DESCRIPTOR)", w.params.status,
                    f"{buf.cpu_addr:#x}+{size:#x}", "describing host pages to this GPU")
    try:
      self.uvm(nv.UVM_CREATE_EXTERNAL_RANGE, nv.UVM_CREATE_EXTERNAL_RANGE_PARAMS(base=buf.va_addr, length=size), "UVM_CREATE_EXTERNAL_RANGE")
      mp = nv.UVM_MAP_EXTERNAL_ALLOCATION_PARAMS(base=buf.va_addr, length=size, rmCtrlFd=self.fd_ctl, hClient=self.root, hMemory=handle, gpuAttributesCount=1)
      ctypes.memmove(mp.perGpuAttributes[0].gpuUuid.uuid, self.uuid, 16)
      mp.perGpuAttributes[0].gpuMappingType = 1  # UvmGpuMappingTypeReadWriteAtomic
      self.uvm(nv.UVM_MAP_EXTERNAL_ALLOCATION, mp, "UVM_MAP_EXTERNAL_ALLOCATION")
    except BaseException:
      try: self.uvm(nv.UVM_FREE, nv.UVM_FREE_PARAMS(base=buf.va_addr, length=size), "UVM_FREE")
      except Exception: pass
      self.rm_free(handle)
      raise
    m = NVMemory(handle, size, buf.va_addr, None, True, "imported host pages")
    self.memories.append(m)
    return m

  def _unimport(self, m: NVMemory) -> None:
    self.synchronize()   # (a queued copy may still read it)
    self.uvm(self.nv.UVM_FREE, self.nv.UVM_FREE_PARAMS(base=m.va, length=m.size), "UVM_FREE")
    self.rm_free(m.handle, self.nvdevice)
    self.memories.remove(m)

  def _unmap_cpu(self, cpu: int, size: int) -> None: release_to_window(self.port, cpu, size)

  def _gpu_free(self, m: NVMemory) -> None:
    nv = self.nv
    if getattr(m, "peers", None): self._unmap_from_peers(m)   # peer.py: peers unmap it first
    self.uvm(nv.UVM_FREE, nv.UVM_FREE_PARAMS(base=m.va, length=m.size), "UVM_FREE")
    self.rm_free(m.handle, self.nvdevice)
    if m.cpu is not None: self._unmap_cpu(m.cpu, m.size)
    (self.cpu_va if m.host else self.gpu_va).release(m.va, m.size)
    self.memories.remove(m)

  def _alloc_shared(self, size: int) -> HCQBuffer:
    m = self._gpu_alloc(size, host=True, what="host-visible memory")
    return HCQBuffer(m.va, size, m.cpu, meta=m)

  def _local_bytes_per_tpc(self, per_thread: int) -> int:
    """SET_SHADER_LOCAL_MEMORY_NON_THROTTLED takes the local memory of one TPC (nvk and nouveau size it per TPC):
    every thread an SM can hold, times the SMs of a TPC, each warp's slice 512-byte aligned."""
    per_warp = round_up(per_thread * 32, 0x200)
    return round_up(per_warp * self.max_warps_per_sm * self.sm_per_tpc, 0x8000)

  def _ensure_local_memory(self, per_thread: int) -> None:
    """Shader local memory for `per_thread` bytes of stack per thread on every TPC; grown (never shrunk) on demand."""
    per_thread = round_up(per_thread, 0x100)
    if per_thread <= self.local_per_thread: return
    size = round_up(self._local_bytes_per_tpc(per_thread) * self.tpc_count, 2 << 20)
    new = self._gpu_alloc(size, what="shader local memory")
    old, self.local_mem, self.local_per_thread = self.local_mem, new, per_thread
    if self.channels:
      with self.submit_lock:
        self.channels["compute"].submit(array("I", self._compute_state_words()))
      self._drain_channels()
    if old is not None: self._gpu_free(old)

class NVAllocator(HCQAllocator):
  """HCQ buffers as RM memory objects: video memory, or host-visible memory for options "host"."""
  def _alloc(self, size: int, options: Hashable | None) -> HCQBuffer:
    host = bool(getattr(options, "host", False)) or options == "host"
    m = self.dev._gpu_alloc(size, host=host)
    return HCQBuffer(m.va, size, m.cpu, meta=m)
  def _free(self, opaque: HCQBuffer, size: int, options: Hashable | None) -> None:
    self.dev.synchronize()
    self.dev._gpu_free(opaque.meta)
