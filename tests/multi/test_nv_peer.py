"""NV GPUs of one mock kernel (one MockNVGPU, MOCKGPU_COUNT GPUs): each GPU translates through its own page tables (a
GPU reading what only another maps faults, Xid 31), and peer copies where UVM enables PCIe peer access (drivers/nv/peer.py)."""
import numpy as np
import pytest
from baregrad.drivers.port import make_port

@pytest.fixture
def nv_gpus(request, monkeypatch):
  """Two NVDevices opened through one port: one mock kernel, each GPU with its own RM client and UVM VA space."""
  monkeypatch.delenv("MOCKGPU_ARCH", raising=False)
  monkeypatch.delenv("MOCKGPU_COUNT", raising=False)
  from baregrad.drivers.mock.nv import MockNVGPU
  from baregrad.drivers.nv import NVDevice
  from tests.helpers import registered
  mock = MockNVGPU(count=2, **getattr(request, "param", {}))
  port = make_port(mock)
  with registered("NV:0", NVDevice("NV:0", port=port)) as a, registered("NV:1", NVDevice("NV:1", port=port)) as b:
    yield a, b, mock

def _buf(dev, x):
  from baregrad.hal import Buffer
  from baregrad.ir.dtype import dtypes
  buf = Buffer(dev.device, x.size, dtypes.float32).allocate()
  buf.copyin(memoryview(x))
  return buf

def _read(buf) -> np.ndarray: return np.frombuffer(buf.copyout(memoryview(bytearray(buf.nbytes))), np.float32)

def test_nv_gpu_reading_what_it_has_not_mapped_faults(nv_gpus):
  """Page tables are per GPU VA space (uvm_map_external_allocation_on_gpu maps for the GPUs named): B's copy engine
  reading A's video memory, mapped for A only, is an MMU fault on B (Xid 31, FAULT_PTE, read side); A is untouched."""
  from baregrad.drivers.nv.faults import NVChannelError
  a, b, mock = nv_gpus
  x = np.arange(1024, dtype=np.float32)
  src, dst = _buf(a, x), _buf(b, np.zeros_like(x))
  q = b.copy_queue_t().wait(b.timeline_signal, b.timeline_value - 1).copy(dst._buf.va_addr, src._buf.va_addr, src.nbytes)
  q.signal(b.timeline_signal, b.next_timeline()).submit(b)
  with pytest.raises(NVChannelError) as e: b.synchronize(timeout_ms=5000)
  assert e.value.xid == 31 and e.value.device == b.device
  assert any("MMU Fault" in t and "VIRT_READ" in t and "PCI:0000:02:00" in t for _, t in mock.kmsg), mock.kmsg
  with mock.gpu_view(a.uuid): assert mock.read_gpu(src._buf.va_addr, 16) == x[:4].tobytes()
  with mock.gpu_view(b.uuid), pytest.raises(Exception, match="MMU fault"): mock.read_gpu(src._buf.va_addr, 16)
  # A's own copy engine reads it, and B works again after its recovery
  out = _buf(a, np.zeros_like(x))
  a.copy_queue_t().wait(a.timeline_signal, a.timeline_value - 1).copy(out._buf.va_addr, src._buf.va_addr, src.nbytes) \
   .signal(a.timeline_signal, a.next_timeline()).submit(a)
  a.synchronize()
  np.testing.assert_array_equal(_read(out), x)
  dst.copyin(memoryview(x + 1))
  np.testing.assert_array_equal(_read(dst), x + 1)

def test_nv_peer_copy_reads_the_source_through_a_peer_mapping(nv_gpus):
  """UVM enables PCIe peer access in B's VA space, B maps A's buffer and signal pool (and A B's): B's copy engine
  reads A's video memory directly, each queue waiting on the other's timeline; A's freeing the buffer unmaps it from
  B first (UVM_FREE in B's VA space), after which B faults on it again."""
  from baregrad.hcq.peer import PeerLink
  a, b, mock = nv_gpus
  x = np.arange(4096, dtype=np.float32)
  src, dst = _buf(a, x), _buf(b, np.zeros_like(x))
  link = PeerLink(a, b)
  assert link.path == "peer-mapped" and not link.imports
  link.copy(dst._buf, src._buf, src.nbytes)
  b.synchronize()
  np.testing.assert_array_equal(_read(dst), x)
  assert link.path == "peer-mapped" and src._buf.meta.peers == {b} and link.copies == 1
  with mock.gpu_view(b.uuid): assert mock.read_gpu(src._buf.va_addr, 16) == x[:4].tobytes()
  # B's queue waited on A's timeline and A's on B's: each GPU's page tables map the other's signal pool
  with mock.gpu_view(b.uuid): mock.read_gpu(a.signal_pool_mem.va_addr, 8)
  with mock.gpu_view(a.uuid): mock.read_gpu(b.signal_pool_mem.va_addr, 8)
  va, m = src._buf.va_addr, src._buf.meta
  src.deallocate()
  a.allocator.free_cache()   # (the freed buffer waits in the cache: give it back to RM)
  assert m not in a.memories and not m.peers
  with mock.gpu_view(b.uuid), pytest.raises(Exception, match="MMU fault"): mock.read_gpu(va, 16)

def _uvm(dev, name, **kw):
  """One UVM call of `dev`'s VA space: its status name."""
  from baregrad.drivers.nv.rm import RMError
  from baregrad.drivers.nv.hw import status_name
  p = getattr(dev.nv, name + "_PARAMS")(**{k: v for k, v in kw.items() if not isinstance(v, bytes)})
  for k, v in kw.items():
    if isinstance(v, bytes): ctypes_move(getattr(p, k).uuid, v)
  try: dev.uvm(getattr(dev.nv, name), p, name)
  except RMError as e: return status_name(e.status)
  return "NV_OK"

def ctypes_move(dst, b: bytes) -> None:
  import ctypes
  ctypes.memmove(dst, b, len(b))

def _map(dev, owner, m, gpu: bytes) -> str:
  """UVM_MAP_EXTERNAL_ALLOCATION in dev's VA space of owner's memory m for GPU `gpu`, in a range made for it."""
  import ctypes
  from baregrad.drivers.nv.rm import RMError
  from baregrad.drivers.nv.hw import status_name
  nv = dev.nv
  _uvm(dev, "UVM_CREATE_EXTERNAL_RANGE", base=m.va, length=m.size)
  mp = nv.UVM_MAP_EXTERNAL_ALLOCATION_PARAMS(base=m.va, length=m.size, rmCtrlFd=owner.fd_ctl, hClient=owner.root, hMemory=m.handle, gpuAttributesCount=1)
  ctypes.memmove(mp.perGpuAttributes[0].gpuUuid.uuid, gpu, 16)
  mp.perGpuAttributes[0].gpuMappingType = 1
  try: dev.uvm(nv.UVM_MAP_EXTERNAL_ALLOCATION, mp, "UVM_MAP_EXTERNAL_ALLOCATION")
  except RMError as e: return status_name(e.status)
  finally: _uvm(dev, "UVM_FREE", base=m.va, length=m.size)
  return "NV_OK"

def test_nv_uvm_peer_rules(nv_gpus):
  """The checks of UVM's peer path, each as the kernel makes it: mapping another GPU's video memory needs its GPU
  registered in the VA space (set_ext_gpu_map_location) and peer access enabled there (uvm_va_space_peer_enabled);
  UVM_ENABLE_PEER_ACCESS needs both GPUs registered and two different GPUs (retain_pcie_peers_from_uuids), once per
  pair (uvm_api_enable_peer_access): each NV_ERR_INVALID_DEVICE. System memory of another GPU needs no peer access."""
  a, b, mock = nv_gpus
  m, host = _buf(a, np.zeros(1024, np.float32))._buf.meta, a.signal_pool_mem.meta
  assert _map(b, a, m, b.uuid) == "NV_ERR_INVALID_DEVICE"      # A not registered in B's VA space
  assert _map(b, a, host, b.uuid) == "NV_ERR_INVALID_DEVICE"   # (system memory too: its owner must be registered)
  assert _uvm(b, "UVM_ENABLE_PEER_ACCESS", gpuUuidA=b.uuid, gpuUuidB=a.uuid) == "NV_ERR_INVALID_DEVICE"
  b._uvm_register_peer(a.uuid)
  assert _map(b, a, host, b.uuid) == "NV_OK"
  assert _map(b, a, m, b.uuid) == "NV_ERR_INVALID_DEVICE"      # registered, but peer access not enabled
  assert _uvm(b, "UVM_ENABLE_PEER_ACCESS", gpuUuidA=b.uuid, gpuUuidB=b.uuid) == "NV_ERR_INVALID_DEVICE"
  assert _uvm(b, "UVM_ENABLE_PEER_ACCESS", gpuUuidA=b.uuid, gpuUuidB=a.uuid) == "NV_OK"
  assert _uvm(b, "UVM_ENABLE_PEER_ACCESS", gpuUuidA=a.uuid, gpuUuidB=b.uuid) == "NV_ERR_INVALID_DEVICE"   # enabled already
  assert _map(b, a, m, b.uuid) == "NV_OK"
  # peer access is per VA space: A's own VA space did not enable it (and has not registered B)
  assert _uvm(a, "UVM_ENABLE_PEER_ACCESS", gpuUuidA=a.uuid, gpuUuidB=b.uuid) == "NV_ERR_INVALID_DEVICE"

@pytest.mark.parametrize("nv_gpus", [{"p2p": False}], indirect=True, ids=["no-p2p"])
def test_nv_no_p2p_falls_back_to_staging(nv_gpus):
  """RM lists no P2P link between the GPUs: UVM_ENABLE_PEER_ACCESS is NV_ERR_NOT_SUPPORTED (uvm_gpu.c
  parent_peers_init), the driver maps nothing and the copy is staged through host pages; the values land."""
  from baregrad.hcq.peer import PeerLink
  a, b, mock = nv_gpus
  b._uvm_register_peer(a.uuid)
  assert _uvm(b, "UVM_ENABLE_PEER_ACCESS", gpuUuidA=b.uuid, gpuUuidB=a.uuid) == "NV_ERR_NOT_SUPPORTED"
  assert not b.peer_map(a)
  x = np.arange(4096, dtype=np.float32)
  src, dst = _buf(a, x), _buf(b, np.zeros_like(x))
  link = PeerLink(a, b)
  assert link.path == "staged" and link.imports
  link.copy(dst._buf, src._buf, src.nbytes)
  b.synchronize()
  np.testing.assert_array_equal(_read(dst), x)
  link.close()

def test_nv_peer_map_refused_at_copy_time_falls_back_to_staging(nv_gpus):
  """Peer access was enabled, but UVM refuses the buffer's mapping (here: A is no longer registered in B's VA space,
  set_ext_gpu_map_location -> NV_ERR_INVALID_DEVICE): the link warns once and stages from then on; the copy lands."""
  from baregrad.hcq.peer import PeerLink
  a, b, mock = nv_gpus
  link = PeerLink(a, b)
  assert link.mapped
  vs = next(f["vas"] for f in mock.files.values() if f.get("vas") is not None and b.uuid in f["vas"].gpu_vas)
  vs.gpus.discard(a.uuid)
  x = np.arange(4096, dtype=np.float32)
  src, dst = _buf(a, x), _buf(b, np.zeros_like(x))
  with pytest.warns(UserWarning, match="refused a peer mapping"): link.copy(dst._buf, src._buf, src.nbytes)
  assert link.path == "staged"
  b.synchronize()
  np.testing.assert_array_equal(_read(dst), x)
  link.close()

def test_nv_no_peer_map_knob_stages(nv_gpus):
  """NO_PEER_MAP=1: copies between the GPUs are staged through pinned host pages though UVM would map; without it the
  same copy goes through the peer mapping. Both land the values."""
  from baregrad import Tensor, knobs
  a, b, mock = nv_gpus
  x = np.arange(3000, dtype=np.float32)
  for no_map, path in ((1, "staged"), (0, "peer-mapped")):
    with knobs.Context(NO_PEER_MAP=no_map):
      y = (Tensor(x, device="NV:0") + 1).to("NV:1").realize()
      assert b.peer_links["NV:0"].path == path
      np.testing.assert_array_equal(y.numpy(), x + 1)
