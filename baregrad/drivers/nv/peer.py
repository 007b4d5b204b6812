"""Peer mappings between NV GPUs of one kernel (one port): GPU B's copy engine reads GPU A's video memory through B's
own page tables, with no host staging (hcq/peer.py).

Each NVDevice keeps its own RM client and its own UVM VA space (a /dev/nvidia-uvm fd). The route the open kernel
modules give userspace for peer memory is UVM's (kernel-open/nvidia-uvm):
- UVM_REGISTER_GPU of the peer GPU in B's VA space: an external allocation's owning GPU must be registered in the VA
  space that maps it, video or system memory alike (uvm_map_external.c: set_ext_gpu_map_location ->
  uvm_va_space_get_gpu_by_mem_info, else NV_ERR_INVALID_DEVICE);
- UVM_ENABLE_PEER_ACCESS(B, A) in B's VA space (uvm_va_space.c: uvm_api_enable_peer_access): both GPUs registered
  there, RM's P2P capabilities listing a PCIe link between them (uvm_gpu.c: parent_peers_init -> get_parent_p2p_caps:
  no link is NV_ERR_NOT_SUPPORTED; uvm_gpu_retain_pcie_peer_access: an NVLink pair is NV_ERR_INVALID_DEVICE, as
  NVLink peers are enabled by registration itself); without it another GPU's video memory is not mapped
  (set_ext_gpu_map_location: uvm_va_space_peer_enabled, else NV_ERR_INVALID_DEVICE);
- UVM_CREATE_EXTERNAL_RANGE and UVM_MAP_EXTERNAL_ALLOCATION in B's VA space of A's memory object (A's RM client and
  handle, which UVM dups), at A's own address, for GPU B only.
RM's NV50_P2P object is what UVM allocates itself on that path (uvm_gpu.c create_parent_p2p_object), not a userspace
call. Each queue waits on the other's timeline: each GPU's page tables also map the other's signal pool (system
memory: no peer access needed, only the owner registered). A GPU whose enable is refused (no P2P link) gets no
mapping: the link stages through host pages."""
from __future__ import annotations
import ctypes, threading
from typing import Any
from baregrad import knobs
from baregrad.hcq import HCQBuffer
from baregrad.drivers.nv.rm import RMError

_SHARED: dict[tuple, Any] = {}
_SHARED_LOCK = threading.Lock()

def shared_port(make: Any) -> Any:
  """The port every NVDevice opened without one uses (one kernel for the GPUs of the process): made by `make()` once
  per mock configuration (MOCKGPU, MOCKGPU_ARCH, MOCKGPU_COUNT), so the mock GPUs of one process are one mock kernel
  and may map each other's memory."""
  key = tuple(knobs.raw(k) for k in ("MOCKGPU", "MOCKGPU_ARCH", "MOCKGPU_COUNT"))
  with _SHARED_LOCK:
    if key not in _SHARED: _SHARED[key] = make()
    return _SHARED[key]

class PeerMappings:
  """NVDevice's peer mappings (module docstring): peer_map(src) says whether this GPU may map src's memory, map_peer
  maps one of src's buffers, and a buffer's owner unmaps it from its peers before freeing it."""
  nv: Any
  uuid: bytes
  port: Any

  def _uvm_register_peer(self, gpu_uuid: bytes) -> None:
    """UVM_REGISTER_GPU of another GPU of the machine in this device's VA space (once)."""
    reg = getattr(self, "_uvm_gpus", None)
    if reg is None: reg = self._uvm_gpus = {self.uuid}
    if gpu_uuid in reg: return
    p = self.nv.UVM_REGISTER_GPU_PARAMS(rmCtrlFd=-1)
    ctypes.memmove(p.gpu_uuid.uuid, gpu_uuid, 16)
    self.uvm(self.nv.UVM_REGISTER_GPU, p, "UVM_REGISTER_GPU(a peer GPU)")
    reg.add(gpu_uuid)

  def peer_map(self, src: Any) -> bool:
    """Whether this GPU may map src's video memory: both GPUs of one kernel (port) and UVM enabled PCIe peer access
    between them in this device's VA space (refused: False, the link stages). If so each GPU's page tables map the
    other's signal pool, so each queue can wait on the other's timeline."""
    if type(src) is not type(self) or src is self or src.port is not self.port or src.uuid == self.uuid: return False
    ok: dict[bytes, bool] = self.__dict__.setdefault("_peer_ok", {})
    if src.uuid not in ok:
      nv = self.nv
      try:
        self._uvm_register_peer(src.uuid)
        p = nv.UVM_ENABLE_PEER_ACCESS_PARAMS()
        ctypes.memmove(p.gpuUuidA.uuid, self.uuid, 16)
        ctypes.memmove(p.gpuUuidB.uuid, src.uuid, 16)
        self.uvm(nv.UVM_ENABLE_PEER_ACCESS, p, "UVM_ENABLE_PEER_ACCESS")
        ok[src.uuid] = True
      except RMError as e:
        if e.status not in (nv.NV_ERR_NOT_SUPPORTED, nv.NV_ERR_INVALID_DEVICE): raise
        ok[src.uuid] = False   # no PCIe P2P between them (or NVLink, which this driver does not use): staging
    if not ok[src.uuid]: return False
    src._uvm_register_peer(self.uuid)   # (src's VA space maps this GPU's signal pool: its owner registered there)
    self.map_peer(src, src.signal_pool_mem)
    src.map_peer(self, self.signal_pool_mem)
    return True

  def map_peer(self, src: Any, buf: HCQBuffer) -> None:
    """src's memory object behind `buf` mapped at its own address into this device's VA space, for this GPU only
    (UVM_CREATE_EXTERNAL_RANGE, UVM_MAP_EXTERNAL_ALLOCATION with src's client and handle); once, until src frees it."""
    nv, m = self.nv, buf.meta
    if m is None or not hasattr(m, "handle") or m not in src.memories: raise ValueError(f"{self.device}: {buf} is not an RM memory object of {src.device}")
    peers: set = m.__dict__.setdefault("peers", set())
    if self in peers: return
    self.uvm(nv.UVM_CREATE_EXTERNAL_RANGE, nv.UVM_CREATE_EXTERNAL_RANGE_PARAMS(base=m.va, length=m.size),
             f"UVM_CREATE_EXTERNAL_RANGE({m.what} of {src.device}, peer)")
    mp = nv.UVM_MAP_EXTERNAL_ALLOCATION_PARAMS(base=m.va, length=m.size, rmCtrlFd=src.fd_ctl, hClient=src.root, hMemory=m.handle, gpuAttributesCount=1)
    ctypes.memmove(mp.perGpuAttributes[0].gpuUuid.uuid, self.uuid, 16)
    mp.perGpuAttributes[0].gpuMappingType = 1  # UvmGpuMappingTypeReadWriteAtomic
    try: self.uvm(nv.UVM_MAP_EXTERNAL_ALLOCATION, mp, f"UVM_MAP_EXTERNAL_ALLOCATION({m.what} of {src.device}, peer)")
    except RMError as e:
      try: self.uvm(nv.UVM_FREE, nv.UVM_FREE_PARAMS(base=m.va, length=m.size), "UVM_FREE")
      except RMError: pass
      raise OSError(f"{self.device}: UVM refused to map {m.what} of {src.device}: {e}") from e
    peers.add(self)

  def _unmap_from_peers(self, m: Any) -> None:
    """Before m is freed: its range goes from the VA space of every open peer that maps it (UVM_FREE there)."""
    for peer in list(getattr(m, "peers", ())):
      if not peer.closed:
        try: peer.uvm(peer.nv.UVM_FREE, peer.nv.UVM_FREE_PARAMS(base=m.va, length=m.size), "UVM_FREE(a peer's memory)")
        except RMError: pass
      m.peers.discard(peer)
