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
