"""The UVM driver's ioctls on /dev/nvidia-uvm: VA space and MM initialisation, GPU and GPU VA space registration,
peer access between GPUs, external ranges and mappings, channel registration.

Each /dev/nvidia-uvm fd that UVM_INITIALIZE made is its own VA space (uvm_va_space.c: uvm_va_space_create, one per
file), with its own registered GPUs, GPU VA spaces, ranges, channels and enabled peer pairs (`UVMVASpace`). The GPU
page tables are per GPU VA space: the RM VA space object's `pt` (sorted (va, length, memory, offset)); a mapping names
the GPUs it is made for, so one GPU may fault on an address another maps (mmu.py)."""
from __future__ import annotations
import bisect, ctypes, errno
from typing import Any
from baregrad.ctypes_autogen.nv import nv_580 as nv
from baregrad.drivers.mock.common import rup, PAGE
from baregrad.drivers.nv import hw
from baregrad.drivers.mock.nv.state import Channel, RMStatus

class UVMVASpace:
  """One UVM VA space (a UVM_INITIALIZE'd fd): registered GPU uuids, GPU uuid -> its registered RM VA space's data
  (whose `pt` are that GPU's page tables), external ranges (base -> length), registered channels, enabled peer pairs."""
  def __init__(self) -> None:
    self.gpus: set[bytes] = set()
    self.gpu_vas: dict[bytes, dict] = {}
    self.ranges: dict[int, int] = {}
    self.channels: dict[tuple[int, int], dict] = {}
    self.peers: set[frozenset[bytes]] = set()

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
    f["uvm_init"], f["uvm_flags"], f["vas"] = True, p.flags, UVMVASpace()

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
    u, vs = bytes(p.gpu_uuid.uuid), f["vas"]
    if u not in self.uuids: raise RMStatus(nv.NV_ERR_GPU_UUID_NOT_FOUND, f"no GPU with uuid {u.hex()}")
    if u in vs.gpus: raise RMStatus(nv.NV_ERR_INVALID_DEVICE, f"GPU {u.hex()} is registered in this VA space already")
    vs.gpus.add(u)
    self.uvm_registered = True
    p.numaNodeId = -1   # no NUMA memory (the H100 trace returns -1)

  def _uvm_register_vaspace(self, f: dict, p: Any) -> None:
    """uvm_va_space.c uvm_va_space_register_gpu_va_space: create_gpu_va_space (RM dups the VA space) first, then
    check_gpu_va_space."""
    u, vs = bytes(p.gpuUuid.uuid), f["vas"]
    # uvm_va_space_get_gpu_by_uuid: the GPU must be registered in this VA space -> NV_ERR_INVALID_DEVICE
    if u not in vs.gpus: raise RMStatus(nv.NV_ERR_INVALID_DEVICE, "GPU not registered with UVM_REGISTER_GPU")
    if self.files.get(p.rmCtrlFd, {}).get("kind") != "ctl": raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, f"rmCtrlFd {p.rmCtrlFd} is not /dev/nvidiactl")
    try: vas = self._get(p.hClient, p.hVaSpace, nv.FERMI_VASPACE_A)
    except RMStatus as e: raise RMStatus(nv.NV_ERR_OBJECT_NOT_FOUND, str(e)) from None
    # nv_gpu_ops.c nvGpuOpsDupAddressSpace: UVM manages only an externally owned VA space -> NV_ERR_INVALID_FLAGS
    if not vas.data["flags"] & nv.NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED:
      raise RMStatus(nv.NV_ERR_INVALID_FLAGS, f"VA space {p.hVaSpace:#x} was not allocated IS_EXTERNALLY_OWNED")
    # check_gpu_va_space: one GPU VA space per GPU -> NV_ERR_INVALID_DEVICE
    if u in vs.gpu_vas: raise RMStatus(nv.NV_ERR_INVALID_DEVICE, f"GPU {u.hex()} has a GPU VA space registered already")
    vs.gpu_vas[u] = vas.data

  def _uvm_create_range(self, f: dict, p: Any) -> None:
    # uvm_map_external.c uvm_create_external_range: 4K-aligned, nonzero base and length, no overflow
    # (uvm_api_range_invalid_4k) -> NV_ERR_INVALID_ADDRESS; a collision in the VA space's range tree -> NV_ERR_UVM_ADDRESS_IN_USE
    if p.base % PAGE or p.length % PAGE or p.length == 0 or p.base == 0 or p.base + p.length >= 1 << 64:
      raise RMStatus(nv.NV_ERR_INVALID_ADDRESS, f"range {p.base:#x}+{p.length:#x} not page aligned, empty or at 0")
    for b, l in self._uvm_spans(f["vas"]):
      if p.base < b + l and b < p.base + p.length: raise RMStatus(nv.NV_ERR_UVM_ADDRESS_IN_USE, f"{p.base:#x}+{p.length:#x} overlaps {b:#x}+{l:#x}")
    f["vas"].ranges[p.base] = p.length

  def _uvm_map_external(self, f: dict, p: Any) -> None:
    # uvm_map_external.c uvm_map_external_allocation, in its order: the range (uvm_api_range_invalid_4k) ->
    # NV_ERR_INVALID_ADDRESS; 1..UVM_MAX_GPUS attribute entries -> NV_ERR_INVALID_ARGUMENT; inside one external range
    # -> NV_ERR_INVALID_ADDRESS; a valid mapping and caching type per GPU (uvm_api_mapping_type_invalid,
    # uvm_api_caching_type_invalid) -> NV_ERR_INVALID_ARGUMENT; a GPU with a GPU VA space -> NV_ERR_INVALID_DEVICE
    if p.base % PAGE or p.length % PAGE or p.length == 0 or p.base == 0:
      raise RMStatus(nv.NV_ERR_INVALID_ADDRESS, f"mapping {p.base:#x}+{p.length:#x} is not 4K aligned or empty")
    if not 1 <= p.gpuAttributesCount <= len(p.perGpuAttributes):
      raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, f"gpuAttributesCount={p.gpuAttributesCount}: 1 to {len(p.perGpuAttributes)}")
    vs = f["vas"]
    if not any(b <= p.base and p.base + p.length <= b + l for b, l in vs.ranges.items()):
      raise RMStatus(nv.NV_ERR_INVALID_ADDRESS, f"{p.base:#x}+{p.length:#x} is not inside an external range")
    attrs = list(p.perGpuAttributes[:p.gpuAttributesCount])
    for a in attrs:
      if a.gpuMappingType > 3 or a.gpuCachingType > 2:   # nv_uvm_user_types.h: mapping 0..3, caching 0..2
        raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, f"gpuMappingType={a.gpuMappingType} gpuCachingType={a.gpuCachingType}")
      if bytes(a.gpuUuid.uuid) not in vs.gpu_vas:
        raise RMStatus(nv.NV_ERR_INVALID_DEVICE, "mapping attributes name no GPU with a registered GPU VA space")
    # uvm_map_external_allocation_on_gpu: uvm_gpu_can_address (49-bit GPU VA, 48-bit CPU VA: the lower canonical half)
    if p.base + p.length > 1 << 47: raise RMStatus(nv.NV_ERR_OUT_OF_RANGE, f"{p.base:#x}+{p.length:#x} is beyond what the GPU can address")
    try: o = self._get(p.hClient, p.hMemory, (nv.NV01_MEMORY_SYSTEM, nv.NV01_MEMORY_LOCAL_USER, hw.NV01_MEMORY_SYSTEM_OS_DESCRIPTOR))
    except RMStatus as e: raise RMStatus(nv.NV_ERR_OBJECT_NOT_FOUND, str(e)) from None
    owner = self.uuids[o.data.gpu]
    for a in attrs:
      u = bytes(a.gpuUuid.uuid)
      # uvm_map_external.c set_ext_gpu_map_location: the GPU that owns the memory (video or system) must be registered
      # in this VA space (uvm_va_space_get_gpu_by_mem_info) -> NV_ERR_INVALID_DEVICE; another GPU's video memory only
      # where this VA space enabled peer access between the two (uvm_va_space_peer_enabled) -> NV_ERR_INVALID_DEVICE
      if owner not in vs.gpus:
        raise RMStatus(nv.NV_ERR_INVALID_DEVICE, f"the memory's GPU {o.data.gpu} is not registered in this VA space (UVM_REGISTER_GPU)")
      if o.data.kind == "vid" and owner != u and frozenset((owner, u)) not in vs.peers:
        raise RMStatus(nv.NV_ERR_INVALID_DEVICE, f"video memory of GPU {o.data.gpu} cannot be mapped for GPU {self.uuids.index(u)}: "
                       "peer access between them is not enabled in this VA space (UVM_ENABLE_PEER_ACCESS)")
    if p.offset + p.length > o.data.size: raise RMStatus(nv.NV_ERR_INVALID_LIMIT, f"{p.length:#x} bytes at {p.offset:#x} exceed the memory's {o.data.size:#x}")
    for a in attrs:   # each named GPU's page tables map it (uvm_map_external_allocation_on_gpu); the others' do not
      pt = vs.gpu_vas[bytes(a.gpuUuid.uuid)]["pt"]
      pt[:] = [m for m in pt if not (m[0] < p.base + p.length and p.base < m[0] + m[1])]
      bisect.insort(pt, (p.base, p.length, o.data, p.offset), key=lambda m: m[0])

  def _uvm_enable_peer_access(self, f: dict, p: Any) -> None:
    """uvm_va_space.c uvm_api_enable_peer_access: PCIe peer access between two GPUs of this VA space."""
    vs, a, b = f["vas"], bytes(p.gpuUuidA.uuid), bytes(p.gpuUuidB.uuid)
    # retain_pcie_peers_from_uuids: both GPUs registered in this VA space (uvm_va_space_get_gpu_by_uuid) and not the
    # same GPU -> NV_ERR_INVALID_DEVICE
    if a not in vs.gpus or b not in vs.gpus: raise RMStatus(nv.NV_ERR_INVALID_DEVICE, "both GPUs must be registered in this VA space (UVM_REGISTER_GPU)")
    if a == b: raise RMStatus(nv.NV_ERR_INVALID_DEVICE, "peer access of a GPU with itself")
    # uvm_gpu.c parent_peers_init: RM's P2P capabilities (get_parent_p2p_caps) list no PCIe or NVLink link between the
    # two -> NV_ERR_NOT_SUPPORTED (the mock's `p2p`: False models GPUs behind no common P2P-capable root or switch)
    if not self.p2p: raise RMStatus(nv.NV_ERR_NOT_SUPPORTED, f"RM reports no P2P link between GPU {self.uuids.index(a)} and GPU {self.uuids.index(b)}")
    # uvm_api_enable_peer_access: a pair enabled already (test_bit(enabled_peers)) -> NV_ERR_INVALID_DEVICE
    if frozenset((a, b)) in vs.peers: raise RMStatus(nv.NV_ERR_INVALID_DEVICE, "peer access between these GPUs is enabled already in this VA space")
    vs.peers.add(frozenset((a, b)))   # enable_peers: can_access / accessible_from both ways

  # what RM reports for a GR channel's buffers when UVM retains it (nv_gpu_ops.c nvGpuOpsRetainChannel ->
  # channelInstanceInfo.resourceCount/resourceInfo): the GR context and its global buffers; modelled as one 8 MiB,
  # 2 MiB-aligned resource, shared by the channels of one TSG (uvm_user_channel.c find_va_range)
  CHANNEL_RESOURCE_BYTES, CHANNEL_RESOURCE_ALIGN = 8 << 20, 2 << 20

  def _uvm_register_channel(self, f: dict, p: Any) -> None:
    """kernel-open/nvidia-uvm/uvm_user_channel.c uvm_register_channel and what it calls, check by check."""
    u = bytes(p.gpuUuid.uuid)
    # uvm_user_channel_create: the GPU must have a GPU VA space in this VA space (uvm_va_space_get_gpu_by_uuid_with_gpu_va_space)
    vs = f["vas"]
    if u not in vs.gpu_vas: raise RMStatus(nv.NV_ERR_INVALID_DEVICE, f"GPU {u.hex()} has no registered GPU VA space")
    # nvGpuOpsRetainChannel -> nvGpuOpsVerifyChannel (nv_gpu_ops.c): the handle must be a channel of the client...
    objs = self.clients.get(p.hClient)
    if objs is None: raise RMStatus(nv.NV_ERR_INVALID_CLIENT, f"no client {p.hClient:#x}")
    o = objs.get(p.hChannel)
    if o is None or not isinstance(o.data, Channel):
      raise RMStatus(nv.NV_ERR_INVALID_OBJECT_HANDLE, f"{p.hChannel:#x} is not a channel of client {p.hClient:#x}")
    ch: Channel = o.data
    # ...in the VA space UVM was given (pKernelChannel->pVAS != pVAS -> NV_ERR_INVALID_CHANNEL)
    if ch.vaspace is not vs.gpu_vas[u]: raise RMStatus(nv.NV_ERR_INVALID_CHANNEL, f"channel {p.hChannel:#x} is not in the registered VA space")
    # uvm_user_channel_create: base/length page aligned, nonzero, no overflow (uvm_api_range_invalid) -> NV_ERR_INVALID_ADDRESS
    if p.base % PAGE or p.length % PAGE or p.base == 0 or p.length == 0 or p.base + p.length >= 1 << 64:
      raise RMStatus(nv.NV_ERR_INVALID_ADDRESS, f"channel VA range {p.base:#x}+{p.length:#x} is not page aligned, or empty")
    # uvm_register_channel_under_write: a (client, channel) pair registers once -> NV_ERR_INVALID_CHANNEL
    if (p.hClient, p.hChannel) in vs.channels: raise RMStatus(nv.NV_ERR_INVALID_CHANNEL, f"channel {p.hChannel:#x} is registered already")
    # ... and the range must end below max_channel_va (uvm_ampere.c/uvm_ada.c: 1 << 40; uvm_hopper.c/uvm_blackwell.c: 1 << 57)
    max_va = 1 << (40 if self.arch_info.sm_version < 0x900 else 57)
    if p.base + p.length - 1 >= max_va:
      raise RMStatus(nv.NV_ERR_OUT_OF_RANGE, f"channel VA range {p.base:#x}+{p.length:#x} ends at or above max_channel_va {max_va:#x}")
    # create_va_range: the TSG's resource is placed at the first free aligned VA of [base, end] (find_va_in_range),
    # or shared with a channel of the same TSG that mapped it (find_va_range); no room -> NV_ERR_INVALID_ADDRESS
    shared = next((r for r in vs.channels.values() if r["group"] == (p.hClient, ch.group)), None)
    if shared is not None: va = shared["va"]
    else:
      va = rup(p.base, self.CHANNEL_RESOURCE_ALIGN)
      while va + self.CHANNEL_RESOURCE_BYTES <= p.base + p.length:
        hit = [(b, l) for b, l in self._uvm_spans(vs) if va < b + l and b < va + self.CHANNEL_RESOURCE_BYTES]
        if not hit: break
        va = rup(max(b + l for b, l in hit), self.CHANNEL_RESOURCE_ALIGN)
      else:
        raise RMStatus(nv.NV_ERR_INVALID_ADDRESS, f"no free {self.CHANNEL_RESOURCE_BYTES:#x}-byte range in {p.base:#x}+{p.length:#x} for the channel's buffers")
    vs.channels[(p.hClient, p.hChannel)] = {"va": va, "group": (p.hClient, ch.group), "channel": ch}
    ch.bound = True   # bind_channel_resources -> RM marks the channel's context bound

  def _uvm_unregister_channel(self, f: dict, p: Any) -> None:
    # uvm_unregister_channel: find_user_channel by (client, channel) -> NV_ERR_INVALID_CHANNEL when not registered
    r = f["vas"].channels.pop((p.hClient, p.hChannel), None)
    if r is None: raise RMStatus(nv.NV_ERR_INVALID_CHANNEL, f"channel {p.hChannel:#x} of client {p.hClient:#x} is not registered with UVM")
    r["channel"].bound = False   # uvm_user_channel_stop: nvUvmInterfaceStopChannel

  def _uvm_spans(self, vs: UVMVASpace) -> list[tuple[int, int]]:
    """Every VA range the VA space has handed out: external ranges and channel resources."""
    return list(vs.ranges.items()) + [(r["va"], self.CHANNEL_RESOURCE_BYTES) for r in vs.channels.values()]

  @property
  def uvm_channels(self) -> dict[tuple[int, int], dict]:
    """The channels registered in every VA space: (client, channel) -> their resource."""
    return {k: v for f in self.files.values() if f.get("vas") is not None for k, v in f["vas"].channels.items()}

  def _uvm_free(self, f: dict, p: Any) -> None:
    # uvm_va_range.c uvm_api_free -> uvm_free: base must start a range created with UVM_CREATE_EXTERNAL_RANGE -> NV_ERR_INVALID_ADDRESS
    vs = f["vas"]
    if p.base not in vs.ranges: raise RMStatus(nv.NV_ERR_INVALID_ADDRESS, f"{p.base:#x} is not the start of an allocation")
    base, length = p.base, vs.ranges.pop(p.base)
    for d in vs.gpu_vas.values():   # destroying the range unmaps it from every GPU of the VA space
      d["pt"][:] = [m for m in d["pt"] if not (m[0] < base + length and base < m[0] + m[1])]

  def uvm_close(self, f: dict) -> None:
    """The VA space's fd closed (uvm_va_space_destroy): its channels unbound, its GPU VA spaces unregistered and
    what it mapped in their page tables gone."""
    vs = f.get("vas")
    if vs is None: return
    for r in vs.channels.values(): r["channel"].bound = False
    for d in vs.gpu_vas.values(): d["pt"].clear()
    f["vas"] = None

  _uvm_ioctls: dict[int, tuple[type, Any]] = {
    nv.UVM_INITIALIZE: (nv.UVM_INITIALIZE_PARAMS, _uvm_initialize),
    nv.UVM_MM_INITIALIZE: (nv.UVM_MM_INITIALIZE_PARAMS, _uvm_mm_initialize),
    nv.UVM_REGISTER_GPU: (nv.UVM_REGISTER_GPU_PARAMS, _uvm_register_gpu),
    nv.UVM_REGISTER_GPU_VASPACE: (nv.UVM_REGISTER_GPU_VASPACE_PARAMS, _uvm_register_vaspace),
    nv.UVM_CREATE_EXTERNAL_RANGE: (nv.UVM_CREATE_EXTERNAL_RANGE_PARAMS, _uvm_create_range),
    nv.UVM_MAP_EXTERNAL_ALLOCATION: (nv.UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, _uvm_map_external),
    nv.UVM_FREE: (nv.UVM_FREE_PARAMS, _uvm_free),
    nv.UVM_ENABLE_PEER_ACCESS: (nv.UVM_ENABLE_PEER_ACCESS_PARAMS, _uvm_enable_peer_access),
    nv.UVM_REGISTER_CHANNEL: (nv.UVM_REGISTER_CHANNEL_PARAMS, _uvm_register_channel),
    nv.UVM_UNREGISTER_CHANNEL: (nv.UVM_UNREGISTER_CHANNEL_PARAMS, _uvm_unregister_channel),
  }
