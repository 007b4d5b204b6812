"""The UVM driver's ioctls on /dev/nvidia-uvm: VA space and MM initialisation, GPU and GPU VA space registration,
external ranges and mappings (the GPU page tables this mock keeps in `va_map`), channel registration."""
from __future__ import annotations
import bisect, ctypes, errno
from typing import Any
from baregrad.ctypes_autogen.nv import nv_580 as nv
from baregrad.drivers.mock.common import rup, PAGE
from baregrad.drivers.nv import hw
from baregrad.drivers.mock.nv.state import Channel, RMStatus

class UVM:
  """UVM ioctls, each check beside the uvm_*.c function that makes it."""

  def _uvm(self, f: dict, request: int, argp: int, argsize: int) -> int:
    entry = self._uvm_ioctls.get(request)
    if entry is None: return -errno.ENOTTY
    ptype, fn = entry
    if argsize and argsize < ctypes.sizeof(ptype): return -errno.EFAULT
    p = ptype.from_address(argp)
    # uvm_api.h __UVM_ROUTE_CMD_*(..., do_init_check): every ioctl but UVM_INITIALIZE/UVM_MM_INITIALIZE needs an fd
    # that UVM_INITIALIZE made a VA space (uvm_fd_va_space) -> NV_ERR_ILLEGAL_ACTION
    if request != nv.UVM_INITIALIZE and request != nv.UVM_MM_INITIALIZE and f["uvm_init"] is not True:
      p.rmStatus = nv.NV_ERR_ILLEGAL_ACTION
      return 0
    try:
      fn(self, f, p)
      p.rmStatus = nv.NV_OK
    except RMStatus as e:
      p.rmStatus = e.status
      self.log.append(f"nvidia-uvm: {e}")
    return 0

  def _uvm_initialize(self, f: dict, p: Any) -> None:
    # uvm.c uvm_api_initialize: an initialized VA-space fd may be initialized again with the same flags (NV_OK), not
    # with others; an MM fd cannot become a VA space -> NV_ERR_INVALID_ARGUMENT
    if f["uvm_init"] == "mm": raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, "UVM_INITIALIZE on a UVM_MM_INITIALIZE'd fd")
    if f["uvm_init"] is True:
      if p.flags != f["uvm_flags"]: raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, f"UVM_INITIALIZE again with flags {p.flags:#x}, first {f['uvm_flags']:#x}")
      return
    f["uvm_init"], f["uvm_flags"] = True, p.flags

  def _uvm_mm_initialize(self, f: dict, p: Any) -> None:
    # uvm.c uvm_api_mm_initialize: uvmFd must be a VA-space fd (NV_ERR_INVALID_ARGUMENT); this fd becomes its MM fd
    # (uvm_fd_type_init: an fd that is already something -> NV_ERR_INVALID_STATE); one MM per VA space (state ALIVE
    # -> NV_ERR_INVALID_STATE)
    other = self.files.get(p.uvmFd)
    if other is None or other["kind"] != "uvm" or other["uvm_init"] is not True:
      raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, f"uvmFd {p.uvmFd} is not an initialized /dev/nvidia-uvm fd")
    if f["uvm_init"]: raise RMStatus(nv.NV_ERR_INVALID_STATE, "UVM_MM_INITIALIZE on an fd already initialized")
    if other.get("mm"): raise RMStatus(nv.NV_ERR_INVALID_STATE, f"the VA space of fd {p.uvmFd} has its MM fd already")
    f["uvm_init"], other["mm"] = "mm", True

  def _uvm_register_gpu(self, f: dict, p: Any) -> None:
    # uvm_va_space.c uvm_va_space_register_gpu: an unknown GPU (uvm_gpu_retain_by_uuid) -> NV_ERR_GPU_UUID_NOT_FOUND;
    # a GPU registered in this VA space already -> NV_ERR_INVALID_DEVICE
    u = bytes(p.gpu_uuid.uuid)
    if u not in self.uuids: raise RMStatus(nv.NV_ERR_GPU_UUID_NOT_FOUND, f"no GPU with uuid {u.hex()}")
    if u in self.registered_gpus: raise RMStatus(nv.NV_ERR_INVALID_DEVICE, f"GPU {u.hex()} is registered already")
    self.registered_gpus.add(u)
    self.uvm_registered = True
    p.numaNodeId = -1   # no NUMA memory (the H100 trace returns -1)

  def _uvm_register_vaspace(self, f: dict, p: Any) -> None:
    """uvm_va_space.c uvm_va_space_register_gpu_va_space: create_gpu_va_space (RM dups the VA space) first, then
    check_gpu_va_space."""
    u = bytes(p.gpuUuid.uuid)
    # uvm_va_space_get_gpu_by_uuid: the GPU must be registered in this VA space -> NV_ERR_INVALID_DEVICE
    if u not in self.registered_gpus: raise RMStatus(nv.NV_ERR_INVALID_DEVICE, "GPU not registered with UVM_REGISTER_GPU")
    if self.files.get(p.rmCtrlFd, {}).get("kind") != "ctl": raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, f"rmCtrlFd {p.rmCtrlFd} is not /dev/nvidiactl")
    try: vas = self._get(p.hClient, p.hVaSpace, nv.FERMI_VASPACE_A)
    except RMStatus as e: raise RMStatus(nv.NV_ERR_OBJECT_NOT_FOUND, str(e)) from None
    # nv_gpu_ops.c nvGpuOpsDupAddressSpace: UVM manages only an externally owned VA space -> NV_ERR_INVALID_FLAGS
    if not vas.data["flags"] & nv.NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED:
      raise RMStatus(nv.NV_ERR_INVALID_FLAGS, f"VA space {p.hVaSpace:#x} was not allocated IS_EXTERNALLY_OWNED")
    # check_gpu_va_space: one GPU VA space per GPU -> NV_ERR_INVALID_DEVICE
    if u in self.registered_vaspaces: raise RMStatus(nv.NV_ERR_INVALID_DEVICE, f"GPU {u.hex()} has a GPU VA space registered already")
    self.registered_vaspaces[u] = vas.data

  def _uvm_create_range(self, f: dict, p: Any) -> None:
    # uvm_map_external.c uvm_create_external_range: 4K-aligned, nonzero base and length, no overflow
    # (uvm_api_range_invalid_4k) -> NV_ERR_INVALID_ADDRESS; a collision in the VA space's range tree -> NV_ERR_UVM_ADDRESS_IN_USE
    if p.base % PAGE or p.length % PAGE or p.length == 0 or p.base == 0 or p.base + p.length >= 1 << 64:
      raise RMStatus(nv.NV_ERR_INVALID_ADDRESS, f"range {p.base:#x}+{p.length:#x} not page aligned, empty or at 0")
    for b, l in self._uvm_spans():
      if p.base < b + l and b < p.base + p.length: raise RMStatus(nv.NV_ERR_UVM_ADDRESS_IN_USE, f"{p.base:#x}+{p.length:#x} overlaps {b:#x}+{l:#x}")
    self.uvm_ranges[p.base] = p.length

  def _uvm_map_external(self, f: dict, p: Any) -> None:
    # uvm_map_external.c uvm_map_external_allocation, in its order: the range (uvm_api_range_invalid_4k) ->
    # NV_ERR_INVALID_ADDRESS; 1..UVM_MAX_GPUS attribute entries -> NV_ERR_INVALID_ARGUMENT; inside one external range
    # -> NV_ERR_INVALID_ADDRESS; a valid mapping and caching type per GPU (uvm_api_mapping_type_invalid,
    # uvm_api_caching_type_invalid) -> NV_ERR_INVALID_ARGUMENT; a GPU with a GPU VA space -> NV_ERR_INVALID_DEVICE
    if p.base % PAGE or p.length % PAGE or p.length == 0 or p.base == 0:
      raise RMStatus(nv.NV_ERR_INVALID_ADDRESS, f"mapping {p.base:#x}+{p.length:#x} is not 4K aligned or empty")
    if not 1 <= p.gpuAttributesCount <= len(p.perGpuAttributes):
      raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, f"gpuAttributesCount={p.gpuAttributesCount}: 1 to {len(p.perGpuAttributes)}")
    if not any(b <= p.base and p.base + p.length <= b + l for b, l in self.uvm_ranges.items()):
      raise RMStatus(nv.NV_ERR_INVALID_ADDRESS, f"{p.base:#x}+{p.length:#x} is not inside an external range")
    a0 = p.perGpuAttributes[0]
    if a0.gpuMappingType > 3 or a0.gpuCachingType > 2:   # nv_uvm_user_types.h: mapping 0..3, caching 0..2
      raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, f"gpuMappingType={a0.gpuMappingType} gpuCachingType={a0.gpuCachingType}")
    if bytes(a0.gpuUuid.uuid) not in self.registered_vaspaces:
      raise RMStatus(nv.NV_ERR_INVALID_DEVICE, "mapping attributes name no GPU with a registered GPU VA space")
    # uvm_map_external_allocation_on_gpu: uvm_gpu_can_address (49-bit GPU VA, 48-bit CPU VA: the lower canonical half)
    if p.base + p.length > 1 << 47: raise RMStatus(nv.NV_ERR_OUT_OF_RANGE, f"{p.base:#x}+{p.length:#x} is beyond what the GPU can address")
    try: o = self._get(p.hClient, p.hMemory, (nv.NV01_MEMORY_SYSTEM, nv.NV01_MEMORY_LOCAL_USER, hw.NV01_MEMORY_SYSTEM_OS_DESCRIPTOR))
    except RMStatus as e: raise RMStatus(nv.NV_ERR_OBJECT_NOT_FOUND, str(e)) from None
    u = bytes(p.perGpuAttributes[0].gpuUuid.uuid)
    if o.data.kind == "vid" and self.uuids[o.data.gpu] != u:
      raise RMStatus(nv.NV_ERR_INVALID_DEVICE, f"video memory of GPU {o.data.gpu} cannot be mapped for GPU {self.uuids.index(u)} (no peer access)")
    if p.offset + p.length > o.data.size: raise RMStatus(nv.NV_ERR_INVALID_LIMIT, f"{p.length:#x} bytes at {p.offset:#x} exceed the memory's {o.data.size:#x}")
    self._unmap_va(p.base, p.length)
    bisect.insort(self.va_map, (p.base, p.length, o.data, p.offset), key=lambda m: m[0])

  # what RM reports for a GR channel's buffers when UVM retains it (nv_gpu_ops.c nvGpuOpsRetainChannel ->
  # channelInstanceInfo.resourceCount/resourceInfo): the GR context and its global buffers; modelled as one 8 MiB,
  # 2 MiB-aligned resource, shared by the channels of one TSG (uvm_user_channel.c find_va_range)
  CHANNEL_RESOURCE_BYTES, CHANNEL_RESOURCE_ALIGN = 8 << 20, 2 << 20

  def _uvm_register_channel(self, f: dict, p: Any) -> None:
    """kernel-open/nvidia-uvm/uvm_user_channel.c uvm_register_channel and what it calls, check by check."""
    u = bytes(p.gpuUuid.uuid)
    # uvm_user_channel_create: the GPU must have a GPU VA space in this VA space (uvm_va_space_get_gpu_by_uuid_with_gpu_va_space)
    if u not in self.registered_vaspaces: raise RMStatus(nv.NV_ERR_INVALID_DEVICE, f"GPU {u.hex()} has no registered GPU VA space")
    # nvGpuOpsRetainChannel -> nvGpuOpsVerifyChannel (nv_gpu_ops.c): the handle must be a channel of the client...
    objs = self.clients.get(p.hClient)
    if objs is None: raise RMStatus(nv.NV_ERR_INVALID_CLIENT, f"no client {p.hClient:#x}")
    o = objs.get(p.hChannel)
    if o is None or not isinstance(o.data, Channel):
      raise RMStatus(nv.NV_ERR_INVALID_OBJECT_HANDLE, f"{p.hChannel:#x} is not a channel of client {p.hClient:#x}")
    ch: Channel = o.data
    # ...in the VA space UVM was given (pKernelChannel->pVAS != pVAS -> NV_ERR_INVALID_CHANNEL)
    if ch.vaspace is not self.registered_vaspaces[u]: raise RMStatus(nv.NV_ERR_INVALID_CHANNEL, f"channel {p.hChannel:#x} is not in the registered VA space")
    # uvm_user_channel_create: base/length page aligned, nonzero, no overflow (uvm_api_range_invalid) -> NV_ERR_INVALID_ADDRESS
    if p.base % PAGE or p.length % PAGE or p.base == 0 or p.length == 0 or p.base + p.length >= 1 << 64:
      raise RMStatus(nv.NV_ERR_INVALID_ADDRESS, f"channel VA range {p.base:#x}+{p.length:#x} is not page aligned, or empty")
    # uvm_register_channel_under_write: a (client, channel) pair registers once -> NV_ERR_INVALID_CHANNEL
    if (p.hClient, p.hChannel) in self.uvm_channels: raise RMStatus(nv.NV_ERR_INVALID_CHANNEL, f"channel {p.hChannel:#x} is registered already")
    # ... and the range must end below max_channel_va (uvm_ampere.c/uvm_ada.c: 1 << 40; uvm_hopper.c/uvm_blackwell.c: 1 << 57)
    max_va = 1 << (40 if self.arch_info.sm_version < 0x900 else 57)
    if p.base + p.length - 1 >= max_va:
      raise RMStatus(nv.NV_ERR_OUT_OF_RANGE, f"channel VA range {p.base:#x}+{p.length:#x} ends at or above max_channel_va {max_va:#x}")
    # create_va_range: the TSG's resource is placed at the first free aligned VA of [base, end] (find_va_in_range),
    # or shared with a channel of the same TSG that mapped it (find_va_range); no room -> NV_ERR_INVALID_ADDRESS
    shared = next((r for r in self.uvm_channels.values() if r["group"] == (p.hClient, ch.group)), None)
    if shared is not None: va = shared["va"]
    else:
      va = rup(p.base, self.CHANNEL_RESOURCE_ALIGN)
      while va + self.CHANNEL_RESOURCE_BYTES <= p.base + p.length:
        hit = [(b, l) for b, l in self._uvm_spans() if va < b + l and b < va + self.CHANNEL_RESOURCE_BYTES]
        if not hit: break
        va = rup(max(b + l for b, l in hit), self.CHANNEL_RESOURCE_ALIGN)
      else:
        raise RMStatus(nv.NV_ERR_INVALID_ADDRESS, f"no free {self.CHANNEL_RESOURCE_BYTES:#x}-byte range in {p.base:#x}+{p.length:#x} for the channel's buffers")
    self.uvm_channels[(p.hClient, p.hChannel)] = {"va": va, "group": (p.hClient, ch.group), "channel": ch}
    ch.bound = True   # bind_channel_resources -> RM marks the channel's context bound

  def _uvm_unregister_channel(self, f: dict, p: Any) -> None:
    # uvm_unregister_channel: find_user_channel by (client, channel) -> NV_ERR_INVALID_CHANNEL when not registered
    r = self.uvm_channels.pop((p.hClient, p.hChannel), None)
    if r is None: raise RMStatus(nv.NV_ERR_INVALID_CHANNEL, f"channel {p.hChannel:#x} of client {p.hClient:#x} is not registered with UVM")
    r["channel"].bound = False   # uvm_user_channel_stop: nvUvmInterfaceStopChannel

  def _uvm_spans(self) -> list[tuple[int, int]]:
    """Every VA range UVM has handed out: external ranges and channel resources."""
    return list(self.uvm_ranges.items()) + [(r["va"], self.CHANNEL_RESOURCE_BYTES) for r in self.uvm_channels.values()]

  def _uvm_free(self, f: dict, p: Any) -> None:
    # uvm_va_range.c uvm_api_free -> uvm_free: base must start a range created with UVM_CREATE_EXTERNAL_RANGE -> NV_ERR_INVALID_ADDRESS
    if p.base not in self.uvm_ranges: raise RMStatus(nv.NV_ERR_INVALID_ADDRESS, f"{p.base:#x} is not the start of an allocation")
    self._unmap_va(p.base, self.uvm_ranges.pop(p.base))

  def _unmap_va(self, base: int, length: int) -> None:
    self.va_map = [m for m in self.va_map if not (m[0] < base + length and base < m[0] + m[1])]

  _uvm_ioctls: dict[int, tuple[type, Any]] = {
    nv.UVM_INITIALIZE: (nv.UVM_INITIALIZE_PARAMS, _uvm_initialize),
    nv.UVM_MM_INITIALIZE: (nv.UVM_MM_INITIALIZE_PARAMS, _uvm_mm_initialize),
    nv.UVM_REGISTER_GPU: (nv.UVM_REGISTER_GPU_PARAMS, _uvm_register_gpu),
    nv.UVM_REGISTER_GPU_VASPACE: (nv.UVM_REGISTER_GPU_VASPACE_PARAMS, _uvm_register_vaspace),
    nv.UVM_CREATE_EXTERNAL_RANGE: (nv.UVM_CREATE_EXTERNAL_RANGE_PARAMS, _uvm_create_range),
    nv.UVM_MAP_EXTERNAL_ALLOCATION: (nv.UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, _uvm_map_external),
    nv.UVM_FREE: (nv.UVM_FREE_PARAMS, _uvm_free),
    nv.UVM_REGISTER_CHANNEL: (nv.UVM_REGISTER_CHANNEL_PARAMS, _uvm_register_channel),
    nv.UVM_UNREGISTER_CHANNEL: (nv.UVM_UNREGISTER_CHANNEL_PARAMS, _uvm_unregister_channel),
  }
