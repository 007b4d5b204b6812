"""amdkfd's memory ioctls: ALLOC/FREE_MEMORY_OF_GPU (VRAM, GTT, userptr, doorbell, MMIO BOs), MAP/UNMAP_MEMORY_TO_GPU
(the GPU page tables), AVAILABLE_MEMORY; each check beside the kernel function that makes it."""
from __future__ import annotations
import bisect, ctypes, errno
from typing import Any
from baregrad.drivers.mock.amd.state import (Backing, BO, DOORBELL_SLICE, F, GPU, GPUVM_SIZE, KFD_MMAP_GPU_ID_SHIFT,
  KFD_MMAP_TYPE_MMIO, KFDErr)
from baregrad.drivers.mock.amd.vm import _interp_map
from baregrad.drivers.mock.common import PAGE, rup, user_range_mapped as _user_range_mapped

class KFDMemory:
  """BO allocation and GPU mapping ioctls."""

  def _alloc(self, a: Any) -> int:
    w = "kfd_ioctl_alloc_memory_of_gpu"
    if a.size == 0: raise KFDErr(errno.EINVAL, w, "size 0")
    g, pdd = self._pdd(a.gpu_id, w)
    flags = a.flags & 0xFFFFFFFF
    if flags & F.KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC and flags & F.KFD_IOC_ALLOC_MEM_FLAGS_VRAM and not self.large_bar:
      raise KFDErr(errno.EINVAL, w, "host-visible VRAM on a small-BAR GPU (kfd_dev_is_large_bar)")
    self._bind(pdd, w)
    offset = a.mmap_offset
    if flags & F.KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL:
      if a.size != DOORBELL_SLICE:
        raise KFDErr(errno.EINVAL, w, f"a doorbell BO is the process doorbell slice, {DOORBELL_SLICE:#x} bytes, not {a.size:#x} (kfd_doorbell_process_slice)")
      self._doorbells(pdd)
    elif flags & F.KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP:
      if a.size != PAGE: raise KFDErr(errno.EINVAL, w, f"an MMIO remap BO is one page, not {a.size:#x}")
    # amdgpu_amdkfd_gpuvm.c: amdgpu_amdkfd_gpuvm_alloc_memory_of_gpu picks the domain
    w2 = "amdgpu_amdkfd_gpuvm_alloc_memory_of_gpu"
    if flags & F.KFD_IOC_ALLOC_MEM_FLAGS_VRAM: domain = "vram"
    elif flags & F.KFD_IOC_ALLOC_MEM_FLAGS_GTT: domain = "gtt"
    elif flags & F.KFD_IOC_ALLOC_MEM_FLAGS_USERPTR:
      if not offset: raise KFDErr(errno.EINVAL, w2, "a userptr BO needs the user address in mmap_offset")
      domain = "userptr"
    elif flags & F.KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL: domain = "doorbell"
    elif flags & F.KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP: domain = "mmio"
    else: raise KFDErr(errno.EINVAL, w2, f"flags {flags:#x} name no domain (VRAM, GTT, USERPTR, DOORBELL, MMIO_REMAP)")
    size = a.size >> 1 if flags & F.KFD_IOC_ALLOC_MEM_FLAGS_AQL_QUEUE_MEM else a.size
    size = rup(size, PAGE)
    if size == 0: raise KFDErr(errno.EINVAL, w2, "AQL queue memory of less than 2 bytes")
    # amdgpu_amdkfd_reserve_mem_limit: VRAM against the GPU's VRAM, GTT/userptr against the system limit -> -ENOMEM
    if domain == "vram" and g.vram_used + size > g.vram_size:
      raise KFDErr(errno.ENOMEM, "amdgpu_amdkfd_reserve_mem_limit", f"VRAM: {size:#x} bytes requested, {g.vram_size - g.vram_used:#x} free")
    if domain in ("gtt", "userptr") and self.sysmem_used + size > self.sysmem_limit:
      raise KFDErr(errno.ENOMEM, "amdgpu_amdkfd_reserve_mem_limit", f"system memory: {size:#x} bytes requested, {self.sysmem_limit - self.sysmem_used:#x} free")
    if domain == "userptr":
      # amdgpu_ttm.c: amdgpu_ttm_tt_get_user_pages: the pages must belong to mappings of this process -> -EFAULT
      if not _user_range_mapped(offset, size):
        raise KFDErr(errno.EFAULT, "amdgpu_ttm_tt_get_user_pages", f"user range {offset:#x}+{size:#x} is not mapped memory")
      backing = Backing(size, "userptr", offset)
    elif domain == "doorbell": backing = pdd["doorbells"]
    elif domain == "mmio": backing = g.mmio
    else: backing = Backing(size, domain)
    idr, self._next_idr = self._next_idr, self._next_idr + 1
    handle = (a.gpu_id << 32) | idr     # kfd_priv.h: MAKE_HANDLE
    bo = BO(handle, g, domain, flags, size, a.va_addr, backing)
    if domain == "vram": g.vram_used += size
    if domain in ("gtt", "userptr"): self.sysmem_used += size
    if domain == "mmio": bo.mmap_offset = KFD_MMAP_TYPE_MMIO | (a.gpu_id << KFD_MMAP_GPU_ID_SHIFT)
    else:
      bo.mmap_offset, self._next_offset = self._next_offset, self._next_offset + size  # drm_vma_offset_add
    self.bos[handle] = bo
    a.handle, a.mmap_offset = handle, bo.mmap_offset
    return 0

  def _bo(self, handle: int, where: str, err: int = errno.EINVAL) -> tuple[BO, dict]:
    g, pdd = self._pdd(handle >> 32, where)  # GET_GPU_ID(handle)
    bo = self.bos.get(handle)
    if bo is None: raise KFDErr(err, where, f"no memory with handle {handle:#x} (kfd_process_device_translate_handle)")
    return bo, pdd

  def _free(self, a: Any) -> int:
    w = "kfd_ioctl_free_memory_of_gpu"
    if self.signal_page is not None and self.signal_page[2] == a.handle:
      raise KFDErr(errno.EPERM, w, "the event page BO is freed with the process, not by the user")
    bo, _ = self._bo(a.handle, w)
    if bo.mapped_on: raise KFDErr(errno.EBUSY, "amdgpu_amdkfd_gpuvm_free_memory_of_gpu", f"BO at VA {bo.va:#x} is still mapped on {len(bo.mapped_on)} GPU(s)")
    del self.bos[a.handle]
    if bo.domain == "vram": bo.gpu.vram_used -= bo.size
    if bo.domain in ("gtt", "userptr"): self.sysmem_used -= bo.size
    if bo.domain in ("vram", "gtt") and bo.backing is not None: bo.backing.release()
    return 0

  def _map(self, a: Any) -> int:
    w = "kfd_ioctl_map_memory_to_gpu"
    if a.n_devices == 0: raise KFDErr(errno.EINVAL, w, "n_devices is 0")
    if a.n_success > a.n_devices: raise KFDErr(errno.EINVAL, w, f"n_success {a.n_success} > n_devices {a.n_devices}")
    ids = list((ctypes.c_uint32 * a.n_devices).from_address(a.device_ids_array_ptr))
    g, pdd = self._pdd(a.handle >> 32, w)
    self._bind(pdd, w)
    bo = self.bos.get(a.handle)
    if bo is None: raise KFDErr(errno.ENOMEM, w, f"no memory with handle {a.handle:#x}")  # sic: -ENOMEM in 6.12
    for i in range(a.n_success, a.n_devices):
      peer = self.gpu_by_id(ids[i])
      if peer is None: raise KFDErr(errno.EINVAL, w, f"device {i}: no GPU with gpu_id {ids[i]:#x}")
      self._bind(self.pdd[peer.gpu_id], w)
      if peer.gpu_id not in bo.mapped_on: self._vm_map(peer, bo)
      a.n_success = i + 1
    return 0

  def _vm_map(self, g: GPU, bo: BO) -> None:
    # amdgpu_amdkfd_gpuvm.c: kfd_mem_attach: no VA -> -EINVAL; amdgpu_vm.c: amdgpu_vm_verify_parameters, amdgpu_vm_bo_map
    if not bo.va: raise KFDErr(errno.EINVAL, "kfd_mem_attach", "the BO was allocated without a VA (va_addr 0)")
    # kfd_mem_attach: another GPU's VRAM, doorbell or MMIO BO only where the kernel found the peer accessible (the same
    # xGMI hive is not modelled: amdgpu_device_is_peer_accessible(bo's GPU, this GPU)) -> -EINVAL; host memory (GTT,
    # userptr) of another GPU always maps
    if g is not bo.gpu and bo.domain in ("vram", "doorbell", "mmio") and not self.peer_accessible(bo.gpu, g):
      raise KFDErr(errno.EINVAL, "kfd_mem_attach", f"GPU {g.gpu_id:#x} cannot reach the {bo.domain} of GPU {bo.gpu.gpu_id:#x}: no PCIe P2P "
                   "access (amdgpu_device_is_peer_accessible: large BAR, pcie_p2p, pci_p2pdma_distance)")
    w = "amdgpu_vm_bo_map"
    if bo.va % PAGE: raise KFDErr(errno.EINVAL, "amdgpu_vm_verify_parameters", f"VA {bo.va:#x} is not 4 KiB aligned")
    if ((bo.va + bo.size - 1) >> 12) >= (GPUVM_SIZE << 1) >> 12:  # lpfn >= max_pfn (48-bit VM)
      raise KFDErr(errno.EINVAL, "amdgpu_vm_verify_parameters", f"{bo.va:#x}+{bo.size:#x} ends beyond the VM")
    i = bisect.bisect_right(g.vm, bo.va, key=lambda m: m[0])
    for va, size, other in g.vm[max(0, i - 1):i + 1]:
      if va < bo.va + bo.size and bo.va < va + size:
        raise KFDErr(errno.EINVAL, w, f"VA {bo.va:#x}-{bo.va + bo.size:#x} conflicts with the mapping at {va:#x}-{va + size:#x}")
    bisect.insort(g.vm, (bo.va, bo.size, bo), key=lambda m: m[0])
    bo.mapped_on.add(g.gpu_id)
    if g.interp_mem is not None and bo.backing is not None and bo.domain not in ("doorbell", "mmio"): _interp_map(g.interp_mem, bo)

  def _unmap(self, a: Any) -> int:
    w = "kfd_ioctl_unmap_memory_from_gpu"
    if a.n_devices == 0: raise KFDErr(errno.EINVAL, w, "n_devices is 0")
    if a.n_success > a.n_devices: raise KFDErr(errno.EINVAL, w, f"n_success {a.n_success} > n_devices {a.n_devices}")
    ids = list((ctypes.c_uint32 * a.n_devices).from_address(a.device_ids_array_ptr))
    self._pdd(a.handle >> 32, w)
    bo = self.bos.get(a.handle)
    if bo is None: raise KFDErr(errno.ENOMEM, w, f"no memory with handle {a.handle:#x}")
    for i in range(a.n_success, a.n_devices):
      peer = self.gpu_by_id(ids[i])
      if peer is None: raise KFDErr(errno.EINVAL, w, f"device {i}: no GPU with gpu_id {ids[i]:#x}")
      if peer.gpu_id in bo.mapped_on:
        # amdgpu_amdkfd_gpuvm.c: unmap_bo_from_gpuvm: a BO a queue uses (ring, pointers, EOP, CWSR) -> -EBUSY
        if bo.queue_refs: raise KFDErr(errno.EBUSY, "unmap_bo_from_gpuvm", f"BO at VA {bo.va:#x} is used by {bo.queue_refs} queue(s)")
        peer.vm = [m for m in peer.vm if m[2] is not bo]
        bo.mapped_on.discard(peer.gpu_id)
        if peer.interp_mem is not None and bo.domain not in ("doorbell", "mmio"): peer.interp_mem.unmap(bo.va)
      a.n_success = i + 1
    return 0

  def _available(self, a: Any) -> int:
    g, _ = self._pdd(a.gpu_id, "kfd_ioctl_get_available_memory")
    a.available = g.vram_size - g.vram_used
    return 0
