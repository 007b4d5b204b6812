"""Copies between two mock GPUs (or CPU devices) of one driver queued on both devices' queues (hcq/peer.py): values, no host wait
during a collective's schedule (host waits counted), and the kernel-driver checks the mocks make on the way (NV:
host pages as an OS-descriptor object, escape.c; AMD: as a userptr BO, amdgpu_ttm.c)."""
import ctypes, errno, os, subprocess, sys, textwrap
import pytest
from tests.paths import REPO
from baregrad.drivers.port import IoctlError, make_port
from baregrad.hcq import HCQBuffer

SCRIPT = textwrap.dedent('''
  import sys, numpy as np
  from baregrad import Tensor, knobs
  from baregrad.hal.device import Device
  from baregrad.hcq.peer import PeerLink
  from baregrad.hcq.signal import HCQSignal
  from baregrad.tensor import collectives as C
  kind, n = sys.argv[1], int(sys.argv[2])
  D = [f"{kind}:{i}" for i in range(n)]
  r = np.random.default_rng(0)
  waits = []
  wait = HCQSignal.wait
  HCQSignal.wait = lambda self, v, t=None: (waits.append((self.dev.device, v)), wait(self, v, t))[1]
  # a copy of several staging chunks (2 MiB each, two slots taking turns) and an odd size
  x = r.integers(0, 256, (5 << 20) + 3, dtype=np.uint8)
  a = Tensor(x, device=D[0]).realize()
  waits.clear()
  b = a.to(D[-1]).realize()
  assert waits == [], waits
  link = Device[D[-1]].peer_links[D[0]]
  # CPU devices: direct; AMD GPUs of one KFD process and NV GPUs of one kernel: through a peer mapping of the source's memory
  assert isinstance(link, PeerLink) and (link.direct, link.mapped) == (kind == "CPU", kind != "CPU"), (link.direct, link.mapped)
  assert link.copies == (1 if link.direct or link.mapped else 3)
  np.testing.assert_array_equal(b.numpy(), x)
  ts = [Tensor(r.standard_normal(3000).astype(np.float32), device=d).realize() for d in D]
  want = sum(t.numpy() for t in ts)
  for peer in (True, False):
    for ring in (0, 1 << 40):
      with knobs.Context(RING_MIN_BYTES=ring, NO_PEER_COPY=0 if peer else 1):
        waits.clear()
        out = C.realize(C.allreduce(ts))
        # queued copies: not one host wait between the steps; the host copy waits for the source at every copy
        assert (waits == []) if peer else len(waits) >= n * (n - 1), (peer, ring, waits)
        res = [o.numpy() for o in out]
      np.testing.assert_allclose(res[0], want, rtol=1e-5, atol=1e-5)
      assert all((o == res[0]).all() for o in res)
  print("ok")
''')

@pytest.mark.parametrize("kind,n", [("NV", 2), ("NV", 4), ("AMD", 2), ("AMD", 3), ("CPU", 3)])
def test_peer_copies_without_host_waits(kind, n):
  env = dict(os.environ, PYTHONPATH=str(REPO), **({} if kind == "CPU" else {"MOCKGPU": "1", "MOCKGPU_COUNT": str(n), "DEV": kind}))
  p = subprocess.run([sys.executable, "-c", SCRIPT, kind, str(n)], env=env, capture_output=True, text=True, timeout=600)
  assert p.returncode == 0 and p.stdout.strip().endswith("ok"), p.stdout + p.stderr

# ---------------------------------------------------------------- NV: the OS-descriptor checks (escape.c)
@pytest.fixture
def nv_pair(monkeypatch):
  monkeypatch.delenv("MOCKGPU_ARCH", raising=False)
  monkeypatch.delenv("MOCKGPU_COUNT", raising=False)
  from baregrad.drivers.mock.nv import MockNVGPU
  from baregrad.drivers.nv import NVDevice
  a, b = NVDevice("NV", port=make_port(MockNVGPU())), NVDevice("NV", port=make_port(MockNVGPU()))
  yield a, b
  a.close(); b.close()

def _os_desc(dev, fd, addr, size, handle=0xd15f0001, **flags):
  from baregrad.drivers.nv.hw import NV01_MEMORY_SYSTEM_OS_DESCRIPTOR, nv_ioctl_nvos02_parameters_with_fd
  nv = dev.nv
  f = {"LOCATION": nv.NVOS02_FLAGS_LOCATION_PCI, "MAPPING": nv.NVOS02_FLAGS_MAPPING_NO_MAP, "COHERENCY": nv.NVOS02_FLAGS_COHERENCY_CACHED, **flags}
  word = 0
  for k, v in f.items(): word |= getattr(nv, f"NVOS02_FLAGS_{k}").encode(v)
  w = nv_ioctl_nvos02_parameters_with_fd(params=nv.NVOS02_PARAMETERS(hRoot=dev.root, hObjectParent=dev.nvdevice, hObjectNew=handle,
                                         hClass=NV01_MEMORY_SYSTEM_OS_DESCRIPTOR, flags=word, pMemory=addr, limit=size - 1), fd=-1)
  dev._esc(fd, nv.NV_ESC_RM_ALLOC_MEMORY, w, "NV_ESC_RM_ALLOC_MEMORY")
  from baregrad.drivers.nv.hw import status_name
  return status_name(w.params.status)

def test_nv_import_host_maps_the_other_gpus_pages(nv_pair):
  a, b = nv_pair
  a.import_host(b.signal_pool_mem, b)
  a.import_host(b.signal_pool_mem, b)   # once per address and owner
  def imports(): return [m for m in a.memories if m.what == "imported host pages"]
  assert len(imports()) == 1
  ctypes.c_uint64.from_address(b.signal_pool_mem.cpu_addr + 8).value = 0x1234   # B's page, read through A's MMU
  assert int.from_bytes(a.port.mock.read_gpu(b.signal_pool_mem.va_addr + 8, 8), "little") == 0x1234
  # the address now of another owner (the first one closed, its pages gone): the old import is released (its UVM range
  # freed: else creating the range again fails with NV_ERR_UVM_ADDRESS_IN_USE) and made again
  first = imports()[0]
  a.import_host(b.signal_pool_mem, a)
  assert len(imports()) == 1 and imports()[0] is not first and first.handle not in a.port.mock.clients[a.root]

def test_nv_link_pages_mapped_on_both_and_released(nv_pair):
  from baregrad.hcq.peer import PeerLink
  a, b = nv_pair
  link = PeerLink(a, b)
  for dev in (a, b):   # the link's pages (counters and slots) mapped for both GPUs at their host address
    assert dev.imported[link.buf.cpu_addr][0] is link
    ctypes.c_uint64.from_address(link.buf.cpu_addr + 8).value = 0x77
    assert int.from_bytes(dev.port.mock.read_gpu(link.buf.va_addr + 8, 8), "little") == 0x77
  link.close()
  assert link.buf.cpu_addr not in a.imported and link.buf.cpu_addr not in b.imported
  with pytest.raises(ValueError, match="mapped for the CPU at 0x2000; expected the same address"): a.import_host(HCQBuffer(0x1000, 4096, 0x2000), b)

def test_nv_os_descriptor_rules(nv_pair):
  a, b = nv_pair
  addr, size = b.signal_pool_mem.cpu_addr, 4096
  # escape.c RmIoctl NV_ACTUAL_DEVICE_ONLY: not on the control node
  with pytest.raises(IoctlError) as e: _os_desc(a, a.fd_ctl, addr, size)
  assert e.value.err == errno.EINVAL
  # RmAllocOsDescriptor: LOCATION_PCI and MAPPING_NO_MAP, else NV_ERR_INVALID_FLAGS
  assert _os_desc(a, a.fd_dev, addr, size, MAPPING=0) == "NV_ERR_INVALID_FLAGS"
  # RmCreateOsDescriptor: a page-aligned address (NV_ERR_NOT_SUPPORTED); pages the process maps (NV_ERR_INVALID_ADDRESS)
  assert _os_desc(a, a.fd_dev, addr + 8, size) == "NV_ERR_NOT_SUPPORTED"
  assert _os_desc(a, a.fd_dev, 0x7000_0000_0000, size) == "NV_ERR_INVALID_ADDRESS"
  # the handle is the caller's (HANDLE_PROVIDED): 0 is refused
  assert _os_desc(a, a.fd_dev, addr, size, handle=0) == "NV_ERR_INSERT_DUPLICATE_NAME"
  assert _os_desc(a, a.fd_dev, addr, size) == "NV_OK"

# ---------------------------------------------------------------- AMD: userptr over pages the process maps (amdgpu_ttm.c)
def test_amd_import_host_rules(monkeypatch):
  monkeypatch.delenv("MOCKGPU_AMD_ARCH", raising=False)
  monkeypatch.delenv("MOCKGPU_COUNT", raising=False)
  from baregrad.drivers.mock.amd import MockAMDGPU
  from baregrad.drivers.amd import AMDDevice
  a, b = AMDDevice("AMD", port=make_port(MockAMDGPU())), AMDDevice("AMD", port=make_port(MockAMDGPU()))
  try:
    a.import_host(b.signal_pool_mem, b)
    a.import_host(b.signal_pool_mem, b)
    assert len(a.imported) == 1
    m = a.imported[b.signal_pool_mem.cpu_addr][1]
    a.import_host(b.signal_pool_mem, a)   # another owner: the old BO is released (else KFD refuses the VA as in use)
    assert m.handle not in a.port.mock.bos and len(a.imported) == 1
    # amdgpu_ttm_tt_get_user_pages: the pages must belong to the process's mappings -> -EFAULT
    with pytest.raises(IoctlError) as e: a.import_host(HCQBuffer(0x7000_0000_0000, 4096, 0x7000_0000_0000), b)
    assert e.value.err == errno.EFAULT
  finally:
    a.close(); b.close()

# ---------------------------------------------------------------- a stuck peer is named
def test_timeout_names_the_peer_device_a_queue_waits_on():
  import numpy as np
  from baregrad.hal import Buffer, Device
  from baregrad.hcq import HCQSignal, HCQTimeout
  from baregrad.ir.dtype import dtypes
  src, dst = Device["CPU:0"], Device["CPU:1"]
  a = Buffer("CPU:0", 64, dtypes.float32).copyin(memoryview(np.arange(64, dtype=np.float32)))
  b = Buffer("CPU:1", 64, dtypes.float32).allocate()
  gate = HCQSignal(src, value=0)
  with src.submit_lock:   # CPU:0's queue stuck behind a signal nothing writes yet
    tv = src.next_timeline()
    src.copy_queue_t().wait(src.timeline_signal, tv - 1).wait(gate, 1).signal(src.timeline_signal, tv).submit(src)
  assert dst.copy_from(b, a)
  stuck = r"wait on other devices' work \(peer copies\); unfinished: (.*; )?CPU:0's timeline 0x[0-9a-f]+ is \d+ \(last submitted \d+\)"
  with pytest.raises(HCQTimeout, match=stuck):
    dst.synchronize(timeout_ms=300)
  gate.value = 1   # released: both drain, the copy lands
  dst.synchronize()
  assert np.frombuffer(b.as_memoryview(), np.float32).tolist() == list(range(64))

# ---------------------------------------------------------------- AMD: peer mappings in one KFD process (kfd_mem_attach)
@pytest.fixture
def amd_peers(monkeypatch, request):
  """Two AMD devices on one port (one KFD process), the mock's P2P access as the test asks (default on)."""
  monkeypatch.delenv("MOCKGPU_AMD_ARCH", raising=False)
  from baregrad.drivers.mock.amd import MockAMDGPU
  from baregrad.drivers.amd import AMDDevice
  from tests.helpers import registered
  mock = MockAMDGPU(count=2, **getattr(request, "param", {}))
  port = make_port(mock)
  with registered("AMD:0", AMDDevice("AMD:0", port=port)) as a, registered("AMD:1", AMDDevice("AMD:1", port=port)) as b:
    yield a, b, mock

def test_amd_one_process_for_the_gpus_of_a_port(amd_peers):
  from baregrad.ctypes_autogen import kfd
  a, b, mock = amd_peers
  assert a.proc is b.proc and a.fd_kfd == b.fd_kfd
  # one event page per process (kfd_kmap_event_page: a second is -EINVAL): both devices' events have slots in it,
  # and it is mapped into both GPUs' VMs (each GPU writes its own events' slots)
  page = a.proc.event_page
  assert page[0] <= a.event_mailbox < page[0] + page[1] and page[0] <= b.event_mailbox < page[0] + page[1] and a.event_mailbox != b.event_mailbox
  assert mock.bos[page[2]].mapped_on == {a.gpu_id, b.gpu_id}
  with pytest.raises(IoctlError) as e: b._create_event(kfd.KFD_IOC_EVENT_SIGNAL, page=page[2])
  assert e.value.err == errno.EINVAL

def test_amd_peer_copy_reads_the_other_gpus_vram(amd_peers):
  import numpy as np
  from baregrad.hal import Buffer
  from baregrad.hcq.peer import PeerLink
  from baregrad.ir.dtype import dtypes
  a, b, mock = amd_peers
  x = np.arange(3 << 18, dtype=np.uint32)
  src = Buffer(a.device, x.size, dtypes.uint32).allocate()
  src.copyin(memoryview(x))
  dst = Buffer(b.device, x.size, dtypes.uint32).allocate()
  link = PeerLink(a, b)
  assert link.mapped and not link.direct and not link.imports   # no staging pages
  link.copy(dst._buf, src._buf, src.nbytes)
  b.synchronize(); a.synchronize()
  np.testing.assert_array_equal(np.frombuffer(dst.copyout(memoryview(bytearray(dst.nbytes))), np.uint32), x)
  # the source's VRAM BO is mapped in B's VM (kfd_ioctl_map_memory_to_gpu with B's gpu_id), and so are both signal pages
  sm = src._buf.meta
  assert mock.bos[sm.handle].mapped_on == {a.gpu_id, b.gpu_id} and sm.peers == {b.gpu_id}
  assert b.gpu_id in mock.bos[a.signal_pool_mem.meta.handle].mapped_on and a.gpu_id in mock.bos[b.signal_pool_mem.meta.handle].mapped_on
  # freeing the source unmaps it from the peer first (amdgpu_amdkfd_gpuvm_free_memory_of_gpu: still mapped -> -EBUSY)
  src.deallocate()
  a.allocator.free_cache()
  assert sm.handle not in mock.bos and not any("still mapped" in line for line in mock.log)

def test_amd_free_of_a_bo_a_peer_still_maps_is_refused(amd_peers):
  a, b, mock = amd_peers
  m = a._gpu_alloc(1 << 16, "vram")
  b.map_peer(a, HCQBuffer(m.va, m.size, None, meta=m))
  # the driver's release without the peer: unmapped from A only, the free refused (still mapped on B)
  with pytest.raises(IoctlError) as e: a._release_bo(m.handle, mapped=True)
  assert e.value.err == errno.EBUSY and "still mapped on 1 GPU" in mock.dmesg()
  a.memories.remove(m)
  a._release_bo(m.handle, mapped=True, peers={b.gpu_id})   # ids in one UNMAP: B then A (A's unmap again: not mapped, skipped)
  assert m.handle not in mock.bos

def test_amd_sdma_reading_unmapped_peer_vram_faults(amd_peers):
  """Without the peer mapping (the rule map_peer keeps), B's SDMA reading A's VRAM is a VM fault on B (its page
  tables do not map the address), not a silent copy."""
  from baregrad.drivers.amd.faults import AMDFault
  a, b, mock = amd_peers
  m = a._gpu_alloc(1 << 16, "vram")
  dst = b._gpu_alloc(1 << 16, "vram")
  with b.submit_lock:
    tv = b.next_timeline()
    b.copy_queue_t().wait(b.timeline_signal, tv - 1).copy(dst.va, m.va, 4096).signal(b.timeline_signal, tv).submit(b)
  with pytest.raises(AMDFault, match="SDMA read|SDMA"): b.synchronize(timeout_ms=2000)
  assert any("page fault" in line for line in mock.log)
  a._fault_checked = 0.0
  a._check_fault()   # A's memory event fired too (every one of the process does), but its data names B's gpu_id: no fault of A's

@pytest.mark.parametrize("amd_peers", [{"p2p": False}, {"large_bar": False}], indirect=True, ids=["no-p2p", "small-bar"])
def test_amd_no_peer_access_falls_back_to_staging(amd_peers):
  """Where the kernel finds no P2P access (amdgpu_device_is_peer_accessible: P2P off, or a small BAR) the topology
  lists no p2p link, the driver does not map, the copy is staged through host pages, and a mapping the driver tried
  anyway is refused (kfd_mem_attach: -EINVAL)."""
  import numpy as np
  from baregrad.hal import Buffer
  from baregrad.hcq.peer import PeerLink
  from baregrad.ir.dtype import dtypes
  a, b, mock = amd_peers
  assert b.node.props["p2p_links_count"] == 0 and not b.peer_map(a)
  x = np.arange(1 << 12, dtype=np.float32)
  src = Buffer(a.device, x.size, dtypes.float32).allocate()
  src.copyin(memoryview(x))
  dst = Buffer(b.device, x.size, dtypes.float32).allocate()
  link = PeerLink(a, b)
  assert not link.mapped and link.imports
  link.copy(dst._buf, src._buf, src.nbytes)
  b.synchronize()
  np.testing.assert_array_equal(np.frombuffer(dst.copyout(memoryview(bytearray(dst.nbytes))), np.float32), x)
  link.close()
  with pytest.raises(IoctlError) as e: b.map_peer(a, src._buf)
  assert e.value.err == errno.EINVAL and "no PCIe P2P access" in mock.dmesg()

def test_amd_peer_map_refused_by_the_kernel_falls_back_to_staging(amd_peers):
  """The topology listed a p2p link, but the kernel refuses the mapping (kfd_mem_attach -EINVAL: peer access went away,
  a BO the check covers): the link says so once and stages from then on; the copy still lands."""
  import numpy as np
  from baregrad.hal import Buffer
  from baregrad.hcq.peer import PeerLink
  from baregrad.ir.dtype import dtypes
  a, b, mock = amd_peers
  link = PeerLink(a, b)
  assert link.mapped
  mock.p2p = False   # amdgpu_device_is_peer_accessible now false: MAP_MEMORY_TO_GPU of A's VRAM for B is -EINVAL
  x = np.arange(1 << 12, dtype=np.float32)
  src = Buffer(a.device, x.size, dtypes.float32).allocate()
  src.copyin(memoryview(x))
  dst = Buffer(b.device, x.size, dtypes.float32).allocate()
  with pytest.warns(UserWarning, match="refused a peer mapping"): link.copy(dst._buf, src._buf, src.nbytes)
  assert link.path == "staged" and link.imports
  b.synchronize()
  np.testing.assert_array_equal(np.frombuffer(dst.copyout(memoryview(bytearray(dst.nbytes))), np.float32), x)
  link.close()

def test_amd_map_for_a_gpu_without_a_vm_is_refused(monkeypatch):
  """MAP_MEMORY_TO_GPU naming a GPU the process has not acquired a VM on (kfd_bind_process_to_device: no drm_priv ->
  -ENODEV), or no GPU at all (kfd_process_device_data_by_id -> -EINVAL): the peer must be an open device."""
  import ctypes
  from baregrad.ctypes_autogen import kfd
  from baregrad.drivers.mock.amd import MockAMDGPU
  from baregrad.drivers.amd import AMDDevice
  monkeypatch.delenv("MOCKGPU_AMD_ARCH", raising=False)
  mock = MockAMDGPU(count=3)
  a = AMDDevice("AMD:0", port=make_port(mock))
  try:
    m = a._gpu_alloc(1 << 16, "vram")
    for gpu_id, err in ((mock.gpus[2].gpu_id, errno.ENODEV), (0x1234, errno.EINVAL)):
      ids = (ctypes.c_uint32 * 1)(gpu_id)
      with pytest.raises(IoctlError) as e:
        a.kfd_ioctl(kfd.AMDKFD_IOC_MAP_MEMORY_TO_GPU, kfd.struct_kfd_ioctl_map_memory_to_gpu_args(
          handle=m.handle, device_ids_array_ptr=ctypes.addressof(ids), n_devices=1), "AMDKFD_IOC_MAP_MEMORY_TO_GPU")
      assert e.value.err == err
    assert mock.bos[m.handle].mapped_on == {a.gpu_id}
  finally: a.close()

def test_direct_copies_in_a_row_wait_for_the_destinations_work_not_the_links_own_waits(monkeypatch):
  """A direct (CPU) copy's source queue waits for the destination's work so far (a kernel may still use the memory the
  copy writes); where the destination's last entry is the same link's wait for its previous copy, it waits for the
  work before that entry instead (the entry touches no memory): a run of copies costs no handoff per copy. Work queued
  on the destination between two copies is still waited for."""
  import numpy as np
  from baregrad import Tensor
  from baregrad.hal import Device
  from baregrad.hcq import peer
  s, d = Device["CPU:0"], Device["CPU:1"]
  waits: list[int] = []
  orig = peer._copy_queue
  def recording(dev):
    q = orig(dev)
    if dev is s:
      w = q.wait
      def wait(sig, value):
        if sig is d.timeline_signal: waits.append(value)
        return w(sig, value)
      q.wait = wait
    return q
  monkeypatch.setattr(peer, "_copy_queue", recording)
  a, b = Tensor(np.arange(64, dtype=np.float32), device="CPU:0").realize(), Tensor(np.ones(64, np.float32), device="CPU:0").realize()
  y = (Tensor(np.ones(64, np.float32), device="CPU:1") * 3).realize()   # work on the destination
  work = d.timeline_value - 1
  ca, cb = a.to("CPU:1"), b.to("CPU:1")
  ca.realize(cb)   # two copies in a row
  assert waits == [work, work], (waits, work)
  z = (y + 1).realize()   # more work on the destination, then a copy: waited for
  work2 = d.timeline_value - 1
  cc = (a + 0).realize().to("CPU:1").realize()
  assert waits[2:] == [work2], (waits, work2)
  np.testing.assert_array_equal(ca.numpy(), np.arange(64)); np.testing.assert_array_equal(cb.numpy(), 1)
  np.testing.assert_array_equal(cc.numpy(), np.arange(64)); np.testing.assert_array_equal(z.numpy(), 4)
