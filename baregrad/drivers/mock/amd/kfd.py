"""amdkfd's process and device ioctls (kfd_chardev.c: version, apertures, ACQUIRE_VM, clock counters) and its mmaps:
/dev/kfd (doorbells, the event page, MMIO remap by offset type) and the render node's BO mmaps (drm_gem.c)."""
from __future__ import annotations
import errno, time
from typing import Any
from baregrad.ctypes_autogen import kfd
from baregrad.drivers.mock.amd.state import (_ts, AMDGPU_VA_RESERVED_BOTTOM, DOORBELL_SLICE, GPU, GPUVM_SIZE,
  KFD_MMAP_GPU_ID_SHIFT, KFD_MMAP_TYPE_DOORBELL, KFD_MMAP_TYPE_EVENTS, KFD_MMAP_TYPE_MMIO, KFD_MMAP_TYPE_SHIFT,
  KFD_SIGNAL_EVENT_LIMIT, KFDErr)
from baregrad.drivers.mock.common import host_mmap, host_munmap, MAP_SHARED, PAGE, rup

class KFD:
  """Process/device ioctls and the mmaps of /dev/kfd and the render node, each check beside its kernel function."""

  def _pdd(self, gpu_id: int, where: str) -> tuple[GPU, dict]:
    g = self.gpu_by_id(gpu_id)
    if g is None or gpu_id not in self.pdd: raise KFDErr(errno.EINVAL, where, f"no GPU with gpu_id {gpu_id:#x} (kfd_process_device_data_by_id)")
    return g, self.pdd[gpu_id]

  def _bind(self, pdd: dict, where: str, err: int = errno.ENODEV) -> None:
    # kfd_process.c: kfd_bind_process_to_device: no VM acquired for this GPU yet -> -ENODEV
    if pdd["drm"] is None: raise KFDErr(err, where, "the process has no VM on this GPU: AMDKFD_IOC_ACQUIRE_VM first (kfd_bind_process_to_device)")

  def _get_version(self, a: Any) -> int:
    a.major_version, a.minor_version = self.ioctl_version
    return 0

  def _apertures_new(self, a: Any) -> int:
    # kfd_chardev.c: kfd_ioctl_get_process_apertures_new
    if a.num_of_nodes == 0:
      a.num_of_nodes = len(self.pdd)
      return 0
    if a.num_of_nodes > len(self.gpus):
      raise KFDErr(errno.EINVAL, "kfd_ioctl_get_process_apertures_new", f"num_of_nodes {a.num_of_nodes} > {len(self.gpus)} GPUs")
    n = min(len(self.gpus), a.num_of_nodes)
    arr = (kfd.struct_kfd_process_device_apertures * n).from_address(a.kfd_process_device_apertures_ptr)
    for i, g in enumerate(self.gpus[:n]):  # kfd_flat_memory.c: kfd_init_apertures_v9
      arr[i].gpu_id, arr[i].gpuvm_base, arr[i].gpuvm_limit = g.gpu_id, AMDGPU_VA_RESERVED_BOTTOM, GPUVM_SIZE - 1
      arr[i].lds_base, arr[i].lds_limit = 1 << 48, (1 << 48) | 0xFFFFFFFF
      arr[i].scratch_base, arr[i].scratch_limit = 2 << 48, (2 << 48) | 0xFFFFFFFF
    a.num_of_nodes = n
    return 0

  def _acquire_vm(self, a: Any) -> int:
    w = "kfd_ioctl_acquire_vm"
    f = self.files.get(a.drm_fd)
    if f is None: raise KFDErr(errno.EINVAL, w, f"drm_fd {a.drm_fd} is not an open file (fget)")
    g, pdd = self._pdd(a.gpu_id, w)
    if pdd["drm"] is not None:  # the same file again is fine, another is -EBUSY
      if pdd["drm"] == a.drm_fd: return 0
      raise KFDErr(errno.EBUSY, w, f"GPU {a.gpu_id:#x} already uses the VM of drm fd {pdd['drm']}")
    if f["kind"] != "render":
      raise KFDErr(errno.EINVAL, "kfd_process_device_init_vm", f"fd {a.drm_fd} ({f['path']}) is not an amdgpu DRM file (amdgpu_file_to_fpriv)")
    if any(p["drm"] == a.drm_fd for p in self.pdd.values()):  # amdgpu_amdkfd_gpuvm_acquire_process_vm: already a compute VM
      raise KFDErr(errno.EINVAL, "amdgpu_amdkfd_gpuvm_acquire_process_vm", f"the VM of drm fd {a.drm_fd} is already a compute VM")
    pdd["drm"] = a.drm_fd
    return 0

  def _clock_counters(self, a: Any) -> int:
    if self.gpu_by_id(a.gpu_id) is not None: a.gpu_clock_counter = _ts()
    a.cpu_clock_counter = a.system_clock_counter = time.clock_gettime_ns(time.CLOCK_MONOTONIC_RAW)
    a.system_clock_freq = 1_000_000_000
    return 0

  def mmap(self, addr: int, length: int, prot: int, flags: int, fd: int, offset: int) -> int:
    with self._lock:
      if fd == -1:  # anonymous memory: the kernel's ordinary behaviour
        r = host_mmap(addr, length, prot, flags, -1, offset)
        self.maps[r] = (length, None)
        return r
      f = self.files.get(fd)
      if f is None: raise OSError(errno.EBADF, f"mmap: bad fd {fd}")
      if f["kind"] == "render": return self._mmap_bo(f, fd, addr, length, prot, flags, offset)
      if f["kind"] != "kfd": raise OSError(errno.ENODEV, f"mmap of {f['path']}: not mappable")
      # kfd_chardev.c: kfd_mmap: the type is in the offset's top bits, the GPU in bits 46..61
      gpu_id = (offset >> KFD_MMAP_GPU_ID_SHIFT) & 0xFFFF
      g = self.gpu_by_id(gpu_id) if gpu_id else None
      typ = offset & (3 << KFD_MMAP_TYPE_SHIFT)
      if typ == KFD_MMAP_TYPE_DOORBELL:
        if g is None: raise OSError(errno.ENODEV, f"mmap of doorbells: no GPU with gpu_id {gpu_id:#x} (kfd_mmap)")
        if length != DOORBELL_SLICE:
          raise OSError(errno.EINVAL, f"mmap of {length:#x} bytes of doorbells: the process slice is {DOORBELL_SLICE:#x} (kfd_doorbell_mmap)")
        b, what = self._doorbells(self.pdd[gpu_id]), ("doorbell", g)
      elif typ == KFD_MMAP_TYPE_EVENTS:
        if self.signal_page is None or self.signal_page[2]: raise OSError(errno.EINVAL, "mmap of the event page: none allocated by the kernel (kfd_event_mmap)")
        if length > KFD_SIGNAL_EVENT_LIMIT * 8: raise OSError(errno.EINVAL, f"event page mmap of {length:#x} bytes (kfd_event_mmap)")
        b, what = self._kernel_event_page, ("events", None)
        self.signal_page = (self.signal_page[0], length, 0)
      elif typ == KFD_MMAP_TYPE_MMIO:
        if g is None: raise OSError(errno.ENODEV, f"mmap of MMIO: no GPU with gpu_id {gpu_id:#x} (kfd_mmap)")
        if length != PAGE: raise OSError(errno.EINVAL, f"mmap of {length:#x} bytes of MMIO remap: one page only (kfd_mmio_mmap)")
        b, what = g.mmio, ("mmio", g)
      else: raise OSError(errno.EINVAL, f"mmap of /dev/kfd at offset {offset:#x}: reserved memory is not modelled")
      r = host_mmap(addr, length, prot, (flags & ~0x0F) | MAP_SHARED, b.fd, 0)
      self.maps[r] = (length, what)
      return r

  def _mmap_bo(self, f: dict, fd: int, addr: int, length: int, prot: int, flags: int, offset: int) -> int:
    # drm_gem.c: drm_gem_mmap: the offset must start a BO's range and the length fit in it -> -EINVAL
    bo = next((b for b in self.bos.values() if b.mmap_offset == offset and b.domain != "mmio"), None)
    if bo is None or rup(length, PAGE) > rup(bo.size, PAGE) or bo.gpu is not f["gpu"]:
      raise OSError(errno.EINVAL, f"mmap of {f['path']} at offset {offset:#x}+{length:#x}: no BO there (drm_gem_mmap)")
    # drm_vma_node_is_allowed: only the DRM file the KFD VM was acquired from may map the BO -> -EACCES
    if self.pdd[bo.gpu.gpu_id]["drm"] != fd:
      raise OSError(errno.EACCES, f"mmap of a KFD BO through fd {fd}, not the DRM file the VM was acquired from (drm_gem_mmap)")
    if bo.domain == "userptr": raise OSError(errno.EPERM, "mmap of a userptr BO (amdgpu_gem_object_mmap)")
    assert bo.backing is not None
    r = host_mmap(addr, length, prot, (flags & ~0x0F) | MAP_SHARED, bo.backing.fd, 0)
    self.maps[r] = (length, ("bo", bo))
    return r

  def munmap(self, addr: int, length: int) -> None:
    with self._lock:
      host_munmap(addr, length)
      self.maps.pop(addr, None)
