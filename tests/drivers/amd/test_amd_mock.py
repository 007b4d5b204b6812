"""The AMD driver on the mock AMD GPU (amdkfd's ioctls with amdkfd's checks): opening, topology, memory, the SDMA and AQL
queues, signals and KFD events, timeouts, faults. Each mock check is broken once here (the kernel function it models is
named in the test). The mock is handed to the driver through the port; nothing here sets MOCKGPU globally."""
from __future__ import annotations
import ctypes, errno, os, re, threading, time
import numpy as np
import pytest
from helpers import AMDGCN_FILL_LL, raw_aql, registered
from baregrad.hal import Device, Buffer, DeviceUnavailable, OutOfMemory
from baregrad.hcq import HCQSignal, HCQTimeout
from baregrad.ir.dtype import dtypes
from baregrad.drivers.port import IoctlError, MockPort, make_port
from baregrad.drivers.mock.amd import MockAMDGPU, DOORBELL_SLICE, KFD_MMAP_TYPE_DOORBELL, KFD_MMAP_GPU_ID_SHIFT
from baregrad.drivers.amd import AMDDevice, AMDFault, hw
from baregrad.drivers.amd.topology import queue_sizes, target_name, parse_properties
from baregrad.ctypes_autogen import kfd

@pytest.fixture(scope="module", autouse=True)
def default_mock_env():
  """These tests pick their mock explicitly; MOCKGPU_AMD_ARCH/MOCKGPU_COUNT set outside do not apply."""
  with pytest.MonkeyPatch.context() as mp:
    mp.delenv("MOCKGPU_AMD_ARCH", raising=False)
    mp.delenv("MOCKGPU_COUNT", raising=False)
    yield

def open_mock(**kw) -> tuple[AMDDevice, MockAMDGPU]:
  mock = MockAMDGPU(**kw)
  return AMDDevice("AMD", port=make_port(mock)), mock

@pytest.fixture(scope="module")
def amd():
  """One mock AMD device for the module, registered as Device["AMD"] so Buffers find it."""
  with registered("AMD", open_mock()[0]) as dev: yield dev

@pytest.fixture
def mock(amd) -> MockAMDGPU: return amd.port.mock

def i32(buf: Buffer) -> list[int]: return np.frombuffer(buf.as_memoryview(), np.int32).tolist()

# ---------------------------------------------------------------- the HCQ conformance suite's kernels, in LLVM IR for amdgcn
# fill, inc, slow_fill: buffers, then int64 values; element = workgroup id * workgroup size + work-item id (the size from the
# hidden argument hidden_group_size_x, 12 bytes into the implicit arguments)
AMD_KERNELS_LL = AMDGCN_FILL_LL + r"""
define amdgpu_kernel void @inc(ptr addrspace(1) %a) {
  %i = call i32 @gid()
  %p = getelementptr i32, ptr addrspace(1) %a, i32 %i
  %v = load i32, ptr addrspace(1) %p, align 4
  %v2 = add i32 %v, 1
  store i32 %v2, ptr addrspace(1) %p, align 4
  ret void
}
define amdgpu_kernel void @slow_fill(ptr addrspace(1) %out) {
entry:
  %i = call i32 @gid()
  %p = getelementptr i32, ptr addrspace(1) %out, i32 %i
  br label %loop
loop:                               ; volatile loads the compiler cannot drop: time passes before the store
  %k = phi i32 [ 0, %entry ], [ %k1, %loop ]
  %x = load volatile i32, ptr addrspace(1) %p, align 4
  %k1 = add i32 %k, 1
  %more = icmp ult i32 %k1, 64
  br i1 %more, label %loop, label %done
done:
  store i32 7, ptr addrspace(1) %p, align 4
  ret void
}
define amdgpu_kernel void @slow_copy(ptr addrspace(1) %out, ptr addrspace(1) %inp) {
entry:
  %i = call i32 @gid()
  %pi = getelementptr i32, ptr addrspace(1) %inp, i32 %i
  br label %loop
loop:                               ; reads its input 64 times: the last read comes late
  %k = phi i32 [ 0, %entry ], [ %k1, %loop ]
  %x = load volatile i32, ptr addrspace(1) %pi, align 4
  %k1 = add i32 %k, 1
  %more = icmp ult i32 %k1, 64
  br i1 %more, label %loop, label %done
done:
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %x, ptr addrspace(1) %po, align 4
  ret void
}
define amdgpu_kernel void @copy(ptr addrspace(1) %out, ptr addrspace(1) %inp) {
  %i = call i32 @gid()
  %pi = getelementptr i32, ptr addrspace(1) %inp, i32 %i
  %v = load i32, ptr addrspace(1) %pi, align 4
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %v, ptr addrspace(1) %po, align 4
  ret void
}
"""

def amd_kernels(arch: str = "gfx1100") -> bytes:
  """The suite's kernels compiled into one code object for `arch`."""
  from baregrad.drivers.amd_compile import AMDCompiler
  return AMDCompiler(arch).compile_cached(AMD_KERNELS_LL)

# ---------------------------------------------------------------- a raw KFD session (for breaking the rules one at a time)
class KFD:
  """A process talking to a fresh mock through the port: /dev/kfd, the first GPU's render node, its VM acquired."""
  def __init__(self, acquire: bool = True, **kw) -> None:
    self.mock = MockAMDGPU(**kw)
    self.port = MockPort(self.mock)
    self.fd = self.port.open("/dev/kfd", os.O_RDWR)
    self.gpu = self.mock.gpus[0]
    self.gpu_id = self.gpu.gpu_id
    self.drm = self.port.open(f"/dev/dri/renderD{self.gpu.minor}", os.O_RDWR)
    self.next_va = 0x500_0000_0000
    if acquire: self.ioctl(kfd.AMDKFD_IOC_ACQUIRE_VM, kfd.struct_kfd_ioctl_acquire_vm_args(drm_fd=self.drm, gpu_id=self.gpu_id))
  def ioctl(self, req: int, args, name: str = ""):
    self.port.ioctl(self.fd, req, args, name)
    return args
  def va(self, size: int) -> int:
    v, self.next_va = self.next_va, self.next_va + ((size + 0xFFFF) & ~0xFFFF) + 0x10000
    return v
  def alloc(self, size: int, flags: int = kfd.KFD_IOC_ALLOC_MEM_FLAGS_VRAM, va: int | None = None, offset: int = 0, map: bool = True):
    a = kfd.struct_kfd_ioctl_alloc_memory_of_gpu_args(va_addr=self.va(size) if va is None else va, size=size, gpu_id=self.gpu_id,
                                                      flags=flags & 0xFFFFFFFF, mmap_offset=offset)
    self.ioctl(kfd.AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, a)
    if map: self.map(a.handle)
    return a
  def map(self, handle: int, ids=None, n_success: int = 0):
    ids = [self.gpu_id] if ids is None else ids
    arr = (ctypes.c_uint32 * max(len(ids), 1))(*ids)
    return self.ioctl(kfd.AMDKFD_IOC_MAP_MEMORY_TO_GPU, kfd.struct_kfd_ioctl_map_memory_to_gpu_args(
      handle=handle, device_ids_array_ptr=ctypes.addressof(arr), n_devices=len(ids), n_success=n_success))
  def unmap(self, handle: int):
    arr = (ctypes.c_uint32 * 1)(self.gpu_id)
    return self.ioctl(kfd.AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU, kfd.struct_kfd_ioctl_unmap_memory_from_gpu_args(
      handle=handle, device_ids_array_ptr=ctypes.addressof(arr), n_devices=1))
  def host(self, size: int):
    """Anonymous pages registered as a userptr BO at their own address (what the driver does for host memory)."""
    va = self.va(size)
    cpu = self.port.mmap(va, size, 3, 0x02 | 0x20 | 0x10, -1, 0)
    return self.alloc(size, kfd.KFD_IOC_ALLOC_MEM_FLAGS_USERPTR, va=cpu, offset=cpu)
  def queue_args(self, **over):
    """CREATE_QUEUE arguments for a valid AQL queue (each test breaks one thing)."""
    s = self.gpu.sizes
    ring, ptrs = self.host(4096), self.host(4096)
    eop = self.alloc(s.eop_buffer_size)
    ctx = self.alloc(s.cwsr_total)
    a = dict(ring_base_address=ring.va_addr, ring_size=4096, gpu_id=self.gpu_id, queue_type=kfd.KFD_IOC_QUEUE_TYPE_COMPUTE_AQL,
             queue_percentage=100, queue_priority=7, write_pointer_address=ptrs.va_addr + 0x38, read_pointer_address=ptrs.va_addr + 0x80,
             eop_buffer_address=eop.va_addr, eop_buffer_size=s.eop_buffer_size, ctx_save_restore_address=ctx.va_addr,
             ctx_save_restore_size=s.cwsr_size, ctl_stack_size=s.ctl_stack_size)
    a.update(over)
    return a
  def create_queue(self, **a):
    return self.ioctl(kfd.AMDKFD_IOC_CREATE_QUEUE, kfd.struct_kfd_ioctl_create_queue_args(**a))

def errno_of(fn) -> int:
  with pytest.raises(IoctlError) as e: fn()
  return e.value.err

# ---------------------------------------------------------------- opening, topology
def test_open_reads_topology_and_acquires_vm(amd, mock):
  assert amd.target.name == "gfx1100" and amd.gpu_id == mock.gpus[0].gpu_id
  assert amd.render_path == f"/dev/dri/renderD{mock.gpus[0].minor}"
  assert mock.pdd[amd.gpu_id]["drm"] == amd.fd_drm  # AMDKFD_IOC_ACQUIRE_VM with the render node's fd
  assert amd.kfd_version == (1, 17)
  assert amd.max_shared_mem == 64 * 1024
  # the renderer knows the CUs (SIMDs over SIMDs per CU), so a long reduction is spread over them, not one workgroup
  assert amd.renderer.compute_units == 96   # the mock's gfx1100 is a 7900 XTX: 192 SIMDs, 2 per CU
  lo, hi = amd.window
  assert amd.apertures["gpuvm_base"] <= lo and lo + hi - 1 <= amd.apertures["gpuvm_limit"]

def test_topology_parsing_and_queue_sizes():
  assert target_name(110000) == "gfx1100" and target_name(90402) == "gfx942" and target_name(90010) == "gfx90a"
  p = parse_properties("simd_count 192\nsimd_per_cu 2\narray_count 12\nsimd_arrays_per_engine 2\ngfx_target_version 110000\nnum_xcc 1\n")
  s = queue_sizes(p)
  # kfd_queue_ctx_save_restore_size for 96 CUs of gfx1100: 96*32 waves, 12 bytes each + header; 0x75000 bytes per CU
  assert s.ctl_stack_size == 0xA000 and s.cwsr_size == 0xA000 + 96 * 0x75000 and s.debug_memory_size == 96 * 32 * 32
  # gfx942: sysfs prints array_count x XCCs; the kernel divides by the XCCs (38 CUs per XCC, min(40 * CUs, arrays * 512) waves)
  p = parse_properties("simd_count 1216\nsimd_per_cu 4\narray_count 32\nsimd_arrays_per_engine 1\ngfx_target_version 90402\nnum_xcc 8\n")
  s = queue_sizes(p)
  assert s.ctl_stack_size == 0x3000 and s.debug_memory_size == 1520 * 32 and s.num_xcc == 8
  assert s.cwsr_total == (s.cwsr_size + s.debug_memory_size) * 8

def test_no_kfd_is_unavailable_and_default_falls_back(monkeypatch, capsys):
  with pytest.raises(DeviceUnavailable, match="/dev/kfd not found"): AMDDevice("AMD", port=MockPort(_NoKFD()))
  with pytest.raises(DeviceUnavailable, match="cannot open /dev/kfd.*render"): open_mock(deny=("/dev/kfd",))
  if not os.path.exists("/dev/kfd"):  # this machine: the real port, no amdkfd
    from baregrad.helpers import getenv
    saved = Device._open.pop("AMD", None)
    try:
      with monkeypatch.context() as mp:
        mp.delenv("MOCKGPU", raising=False)
        mp.setenv("DEV", "AMD")
        getenv.cache_clear()   # knobs are cached per process: read MOCKGPU unset here, and set again after
        Device.reset_default()
        assert Device.DEFAULT == "CPU"
    finally:
      getenv.cache_clear()
      Device.reset_default()
      if saved is not None: Device._open["AMD"] = saved
    assert "DEV=AMD is unavailable" in capsys.readouterr().err

class _NoKFD:
  def open(self, path, flags): raise FileNotFoundError(errno.ENOENT, f"open {path} failed", path)

def test_tables_are_derived_from_the_target_records():
  """One record per gfx target (hw.GFX_TARGETS): the topology's TARGETS, the PM4/SDMA bindings per family and the
  scratch granules are that record's, and the record's name is the gfx name its KFD version spells."""
  from baregrad.drivers.amd import scratch, topology
  assert topology.TARGETS is hw.TARGETS and [t.name for t in hw.TARGETS.values()] == ["gfx1100", "gfx942"]
  for t in hw.GFX_TARGETS:
    assert hw.TARGETS[t.version] is t and target_name(t.version) == t.name
    assert hw.PM4[t.family] is t.pm4 and hw.SDMA[t.family] is t.sdma
    assert scratch.UNIT[t.family] == t.scratch_unit and scratch.WAVESIZE_BITS[t.family] == t.scratch_wavesize_bits
  assert (hw.TARGETS[110000].wave_size, hw.TARGETS[90402].wave_size) == (32, 64)

def test_unknown_kfd_major_refused_by_name():
  with pytest.raises(DeviceUnavailable, match=r"KFD ioctl interface 2\.0; this driver speaks major version 1"): open_mock(ioctl_version=(2, 0))

def test_unknown_gfx_target_refused_by_name():
  m = MockAMDGPU()
  m.gpus[0].props["gfx_target_version"] = 90010
  with pytest.raises(DeviceUnavailable, match="is a gfx90a .*supports gfx1100, gfx942"): AMDDevice("AMD", port=make_port(m))

def test_second_gpu_and_missing_gpu():
  m = MockAMDGPU(count=2)
  d = AMDDevice("AMD:1", port=make_port(m))
  try: assert d.gpu_id == m.gpus[1].gpu_id and d.render_path.endswith(str(m.gpus[1].minor))
  finally: d.close()
  with pytest.raises(DeviceUnavailable, match="lists 1 GPU"): AMDDevice("AMD:1", port=make_port(MockAMDGPU(count=1)))

def test_failing_ioctl_names_itself(amd):
  a = kfd.struct_kfd_ioctl_alloc_memory_of_gpu_args(va_addr=0, size=0, gpu_id=amd.gpu_id, flags=kfd.KFD_IOC_ALLOC_MEM_FLAGS_VRAM)
  with pytest.raises(IoctlError) as e: amd.kfd_ioctl(kfd.AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, a, "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU")
  s = str(e.value)
  assert "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU" in s and "EINVAL" in s and "size=0" in s and f"gpu_id={amd.gpu_id:#x}" in s

# ---------------------------------------------------------------- the mock's KFD checks, one broken rule each
def test_kfd_ioctl_number_range():
  k = KFD()
  # kfd_ioctl: nr >= AMDKFD_COMMAND_END -> -ENOTTY
  from baregrad.ctypes_autogen import _support
  assert errno_of(lambda: k.ioctl(_support.IOWR("K", 0x60, 8), kfd.struct_kfd_ioctl_get_version_args())) == errno.ENOTTY

def test_acquire_vm_checks():
  k = KFD(acquire=False)
  a = lambda fd, gid=None: k.ioctl(kfd.AMDKFD_IOC_ACQUIRE_VM, kfd.struct_kfd_ioctl_acquire_vm_args(drm_fd=fd, gpu_id=gid or k.gpu_id))
  assert errno_of(lambda: a(9999)) == errno.EINVAL            # kfd_ioctl_acquire_vm: fget fails
  assert errno_of(lambda: a(k.drm, 0x1234)) == errno.EINVAL   # kfd_process_device_data_by_id: no such GPU
  assert errno_of(lambda: a(k.fd)) == errno.EINVAL            # kfd_process_device_init_vm -> amdgpu_file_to_fpriv: not a DRM file
  # before ACQUIRE_VM: kfd_bind_process_to_device -> -ENODEV
  assert errno_of(lambda: k.alloc(4096)) == errno.ENODEV
  a(k.drm)
  a(k.drm)                                                    # the same file again is accepted
  other = k.port.open(f"/dev/dri/renderD{k.gpu.minor}", os.O_RDWR)
  assert errno_of(lambda: a(other)) == errno.EBUSY            # kfd_ioctl_acquire_vm: another drm file -> -EBUSY

def test_alloc_checks():
  k, F = KFD(), kfd
  assert errno_of(lambda: k.alloc(0)) == errno.EINVAL                                      # kfd_ioctl_alloc_memory_of_gpu: size 0
  assert errno_of(lambda: k.alloc(4096, F.KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE)) == errno.EINVAL  # amdgpu_amdkfd_gpuvm_alloc_memory_of_gpu: no domain
  assert errno_of(lambda: k.alloc(4096, F.KFD_IOC_ALLOC_MEM_FLAGS_USERPTR)) == errno.EINVAL   # userptr without its address
  assert errno_of(lambda: k.alloc(4096, F.KFD_IOC_ALLOC_MEM_FLAGS_USERPTR, offset=0x7000_0000_0000)) == errno.EFAULT  # amdgpu_ttm_tt_get_user_pages
  assert errno_of(lambda: k.alloc(4096, F.KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL)) == errno.EINVAL  # doorbell BO != kfd_doorbell_process_slice
  assert errno_of(lambda: k.alloc(8192, F.KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP)) == errno.EINVAL  # MMIO remap BO is one page
  small = KFD(large_bar=False)                                                            # kfd_dev_is_large_bar
  assert errno_of(lambda: small.alloc(4096, F.KFD_IOC_ALLOC_MEM_FLAGS_VRAM | F.KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC)) == errno.EINVAL
  tiny = KFD(vram=1 << 20)                                                                # amdgpu_amdkfd_reserve_mem_limit
  tiny.alloc(1 << 20, map=False)
  assert errno_of(lambda: tiny.alloc(4096, map=False)) == errno.ENOMEM

def test_map_checks():
  k = KFD()
  assert errno_of(lambda: k.alloc(4096, va=0)) == errno.EINVAL                 # kfd_mem_attach: no VA
  assert errno_of(lambda: k.alloc(4096, va=0x500_1000_0800)) == errno.EINVAL   # amdgpu_vm_verify_parameters: VA not 4K aligned
  a = k.alloc(8192, va=0x510_0000_0000)
  assert errno_of(lambda: k.alloc(4096, va=0x510_0000_1000)) == errno.EINVAL   # amdgpu_vm_bo_map: overlaps a mapping
  assert errno_of(lambda: k.alloc(4096, va=1 << 48)) == errno.EINVAL  # amdgpu_vm_verify_parameters: lpfn >= max_pfn
  assert errno_of(lambda: k.map(a.handle, ids=[])) == errno.EINVAL             # kfd_ioctl_map_memory_to_gpu: n_devices 0
  assert errno_of(lambda: k.map(a.handle, n_success=2)) == errno.EINVAL        # n_success > n_devices
  assert errno_of(lambda: k.map(a.handle, ids=[0x4321])) == errno.EINVAL       # unknown peer GPU
  assert errno_of(lambda: k.map((k.gpu_id << 32) | 999)) == errno.ENOMEM       # no such handle (sic, -ENOMEM)
  k.map(a.handle)                                                              # mapping again is a no-op

def test_free_checks():
  k = KFD()
  a = k.alloc(4096)
  free = lambda h: k.ioctl(kfd.AMDKFD_IOC_FREE_MEMORY_OF_GPU, kfd.struct_kfd_ioctl_free_memory_of_gpu_args(handle=h))
  assert errno_of(lambda: free(a.handle)) == errno.EBUSY          # amdgpu_amdkfd_gpuvm_free_memory_of_gpu: still mapped
  k.unmap(a.handle)
  free(a.handle)
  assert errno_of(lambda: free(a.handle)) == errno.EINVAL         # kfd_process_device_translate_handle: gone
  ev = k.alloc(kfd.KFD_SIGNAL_EVENT_LIMIT * 8, kfd.KFD_IOC_ALLOC_MEM_FLAGS_GTT)
  k.ioctl(kfd.AMDKFD_IOC_CREATE_EVENT, kfd.struct_kfd_ioctl_create_event_args(event_page_offset=ev.handle, auto_reset=1))
  k.unmap(ev.handle)
  assert errno_of(lambda: free(ev.handle)) == errno.EPERM         # kfd_ioctl_free_memory_of_gpu: the event page is the process's

def test_create_queue_accepts_valid_and_checks_each_field():
  k = KFD()
  q = k.create_queue(**k.queue_args())
  assert q.doorbell_offset >> 62 == 3 and (q.doorbell_offset >> KFD_MMAP_GPU_ID_SHIFT) & 0xFFFF == k.gpu_id
  # kfd_ioctl_create_queue -> set_queue_properties_from_user
  assert errno_of(lambda: k.create_queue(**k.queue_args(ring_size=3000))) == errno.EINVAL         # not a power of 2
  assert errno_of(lambda: k.create_queue(**k.queue_args(queue_percentage=101))) == errno.EINVAL   # > KFD_MAX_QUEUE_PERCENTAGE
  assert errno_of(lambda: k.create_queue(**k.queue_args(queue_priority=16))) == errno.EINVAL      # > KFD_MAX_QUEUE_PRIORITY
  assert errno_of(lambda: k.create_queue(**k.queue_args(ring_base_address=1 << 47))) == errno.EFAULT  # access_ok
  assert errno_of(lambda: k.create_queue(**k.queue_args(write_pointer_address=1 << 48))) == errno.EFAULT
  assert errno_of(lambda: k.create_queue(**k.queue_args(queue_type=9))) == 524                    # -ENOTSUPP
  # kfd_queue.c: kfd_queue_acquire_buffers -> kfd_queue_buffer_get: exact mappings
  assert errno_of(lambda: k.create_queue(**k.queue_args(ring_size=8192))) == errno.EINVAL        # ring mapping is 4096 bytes
  base = k.queue_args()
  assert errno_of(lambda: k.create_queue(**dict(base, write_pointer_address=base["ring_base_address"] + 4096 * 4))) == errno.EINVAL
  assert errno_of(lambda: k.create_queue(**k.queue_args(eop_buffer_size=2048))) == errno.EINVAL  # < the node's eop_buffer_size
  s = k.gpu.sizes
  assert errno_of(lambda: k.create_queue(**k.queue_args(ctl_stack_size=s.ctl_stack_size + 4096))) == errno.EINVAL  # != node's
  assert errno_of(lambda: k.create_queue(**k.queue_args(ctx_save_restore_size=s.cwsr_size - 4096))) == errno.EINVAL  # < cwsr_size
  # the context-save mapping must also hold the debugger memory: one of just cwsr_size bytes is refused
  ctx = k.alloc(s.cwsr_size)
  assert errno_of(lambda: k.create_queue(**k.queue_args(ctx_save_restore_address=ctx.va_addr))) == errno.EINVAL
  # the kernel clamps a small ring (KFD_MIN_QUEUE_RING_SIZE) rather than refusing it: then the 4 KiB mapping no longer matches
  # only when the clamp changes the page count, so a 512-byte request on a 4 KiB ring is accepted as 1024
  q2 = k.create_queue(**k.queue_args(ring_size=512))
  assert q2.ring_size == 1024

def test_create_queue_needs_vm_and_limits():
  k = KFD()
  args = k.queue_args()
  k2 = KFD(acquire=False)
  args2 = dict(args, gpu_id=k2.gpu_id)
  assert errno_of(lambda: k2.create_queue(**args2)) == errno.ESRCH       # kfd_ioctl_create_queue: bind failed -> -ESRCH
  # allocate_sdma_queue: 2 engines x 6 queues on gfx1100, then -ENOMEM
  for _ in range(12):
    r, p = k.host(4096), k.host(4096)
    k.create_queue(ring_base_address=r.va_addr, ring_size=4096, gpu_id=k.gpu_id, queue_type=kfd.KFD_IOC_QUEUE_TYPE_SDMA,
                   queue_percentage=100, write_pointer_address=p.va_addr, read_pointer_address=p.va_addr + 8)
  r, p = k.host(4096), k.host(4096)
  assert errno_of(lambda: k.create_queue(ring_base_address=r.va_addr, ring_size=4096, gpu_id=k.gpu_id, queue_type=kfd.KFD_IOC_QUEUE_TYPE_SDMA,
                                         queue_percentage=100, write_pointer_address=p.va_addr, read_pointer_address=p.va_addr + 8)) == errno.ENOMEM
  # pqm_create_queue: 127 queues per process and GPU, then -ENOSPC
  k.mock.pdd[k.gpu_id]["queues"] = 127
  assert errno_of(lambda: k.create_queue(**k.queue_args())) == errno.ENOSPC

def test_queue_buffers_cannot_be_unmapped_or_freed():
  k = KFD()
  a = k.queue_args()
  q = k.create_queue(**a)
  ring = next(b for b in k.mock.bos.values() if b.va == a["ring_base_address"])
  assert errno_of(lambda: k.unmap(ring.handle)) == errno.EBUSY         # unmap_bo_from_gpuvm: queue_refcount
  k.ioctl(kfd.AMDKFD_IOC_DESTROY_QUEUE, kfd.struct_kfd_ioctl_destroy_queue_args(queue_id=q.queue_id))
  k.unmap(ring.handle)
  assert errno_of(lambda: k.ioctl(kfd.AMDKFD_IOC_DESTROY_QUEUE, kfd.struct_kfd_ioctl_destroy_queue_args(queue_id=q.queue_id))) == errno.EINVAL

def test_mmap_checks():
  k = KFD()
  q = k.create_queue(**k.queue_args())
  off = q.doorbell_offset & ~(DOORBELL_SLICE - 1)
  with pytest.raises(OSError) as e: k.port.mmap(0, 4096, 3, 1, k.fd, off)
  assert e.value.errno == errno.EINVAL                                    # kfd_doorbell_mmap: size != process slice
  with pytest.raises(OSError) as e: k.port.mmap(0, DOORBELL_SLICE, 3, 1, k.fd, KFD_MMAP_TYPE_DOORBELL | (0x77 << KFD_MMAP_GPU_ID_SHIFT))
  assert e.value.errno == errno.ENODEV                                    # kfd_mmap: no such GPU
  mm = k.alloc(4096, kfd.KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP)
  with pytest.raises(OSError) as e: k.port.mmap(0, 8192, 3, 1, k.fd, mm.mmap_offset)
  assert e.value.errno == errno.EINVAL                                    # kfd_mmio_mmap: one page
  v = k.alloc(8192, kfd.KFD_IOC_ALLOC_MEM_FLAGS_VRAM | kfd.KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC)
  with pytest.raises(OSError) as e: k.port.mmap(0, 8192, 3, 1, k.drm, v.mmap_offset + 4096)
  assert e.value.errno == errno.EINVAL                                    # drm_gem_mmap: not the start of a BO
  with pytest.raises(OSError) as e: k.port.mmap(0, 3 * 4096, 3, 1, k.drm, v.mmap_offset)
  assert e.value.errno == errno.EINVAL                                    # drm_gem_mmap: longer than the BO
  other = k.port.open(f"/dev/dri/renderD{k.gpu.minor}", os.O_RDWR)
  with pytest.raises(OSError) as e: k.port.mmap(0, 8192, 3, 1, other, v.mmap_offset)
  assert e.value.errno == errno.EACCES                                    # drm_vma_node_is_allowed: not the acquired DRM file
  h = k.host(4096)
  with pytest.raises(OSError) as e: k.port.mmap(0, 4096, 3, 1, k.drm, h.mmap_offset)
  assert e.value.errno in (errno.EINVAL, errno.EPERM)                     # amdgpu_gem_object_mmap: userptr
  p = k.port.mmap(0, 8192, 3, 1, k.drm, v.mmap_offset)                    # the acquired file may
  ctypes.c_uint32.from_address(p).value = 7
  k.port.munmap(p, 8192)

def test_event_checks():
  k = KFD()
  ce = lambda **a: k.ioctl(kfd.AMDKFD_IOC_CREATE_EVENT, kfd.struct_kfd_ioctl_create_event_args(**a))
  h = k.host(kfd.KFD_SIGNAL_EVENT_LIMIT * 8)
  assert errno_of(lambda: ce(event_page_offset=h.handle, auto_reset=1)) == errno.EINVAL     # amdgpu_amdkfd_gpuvm_map_gtt_bo_to_kernel: userptr
  small = k.alloc(4096, kfd.KFD_IOC_ALLOC_MEM_FLAGS_GTT)
  assert errno_of(lambda: ce(event_page_offset=small.handle, auto_reset=1)) == errno.EINVAL  # kfd_event_page_set: < KFD_SIGNAL_EVENT_LIMIT * 8
  page = k.alloc(kfd.KFD_SIGNAL_EVENT_LIMIT * 8, kfd.KFD_IOC_ALLOC_MEM_FLAGS_GTT)
  e1 = ce(event_page_offset=page.handle, auto_reset=1)
  assert e1.event_id == 1 and e1.event_slot_index == 1                                       # id 0 is reserved
  assert errno_of(lambda: ce(event_page_offset=page.handle, auto_reset=1)) == errno.EINVAL   # kfd_kmap_event_page: already set
  de = lambda i: k.ioctl(kfd.AMDKFD_IOC_DESTROY_EVENT, kfd.struct_kfd_ioctl_destroy_event_args(event_id=i))
  assert errno_of(lambda: de(77)) == errno.EINVAL                                            # kfd_event_destroy: unknown id
  # kfd_signal_event_interrupt: an interrupt whose event slot was not written does not set the event ...
  def wait(eid, ms):
    d = (kfd.struct_kfd_event_data * 1)()
    d[0].event_id = eid
    return k.ioctl(kfd.AMDKFD_IOC_WAIT_EVENTS, kfd.struct_kfd_ioctl_wait_events_args(events_ptr=ctypes.addressof(d), num_events=1,
                                                                                     wait_for_all=1, timeout=ms)).wait_result
  k.mock._interrupt(e1.event_id, 32)
  assert wait(e1.event_id, 0) == kfd.KFD_IOC_WAIT_RESULT_TIMEOUT
  # ... one whose slot was written does, and the slot is acknowledged (UNSIGNALED again)
  slot = ctypes.c_uint64.from_address(k.mock.signal_page[0] + 8 * e1.event_id)
  slot.value = e1.event_id
  k.mock._interrupt(e1.event_id, 32)
  assert slot.value == (1 << 64) - 1
  assert wait(e1.event_id, 0) == kfd.KFD_IOC_WAIT_RESULT_COMPLETE
  assert wait(e1.event_id, 0) == kfd.KFD_IOC_WAIT_RESULT_TIMEOUT   # auto-reset
  t = time.perf_counter()
  assert wait(e1.event_id, 50) == kfd.KFD_IOC_WAIT_RESULT_TIMEOUT
  assert 0.04 < time.perf_counter() - t < 2

# ---------------------------------------------------------------- memory through the driver
def test_copy_round_trips(amd):
  for n in (1, 3, 1000, 65537, (5 << 20) // 4 + 3):   # past the 2 MiB staging buffers and the 4 MiB SDMA packet limit
    a = np.random.default_rng(n).integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    b = Buffer("AMD", n, dtypes.int32).copyin(memoryview(a))
    assert (np.frombuffer(b.as_memoryview(), np.int32) == a).all()

def test_big_sdma_copy_is_split(amd):
  n = 9 << 20
  src, dst = Buffer("AMD", n, dtypes.uint8).copyin(memoryview(np.arange(n, dtype=np.uint8))), Buffer("AMD", n, dtypes.uint8).allocate()
  q = amd.copy_queue_t().copy(dst._buf.va_addr, src._buf.va_addr, n)
  assert len(q.words) == 3 * 7   # three COPY_LINEAR packets of at most 4 MiB
  with pytest.raises(ValueError, match="split into several packets"): q.update_copy(0, nbytes=10)
  s = HCQSignal(amd)
  q.signal(s, 1).submit(amd)
  s.wait(1, timeout_ms=5000)
  assert (np.frombuffer(dst.as_memoryview(), np.uint8) == np.arange(n, dtype=np.uint8)).all()

def test_memory_kinds_and_free(amd, mock):
  g = mock.gpus[0]
  used = g.vram_used
  m = amd._gpu_alloc(3 << 20, "vram")
  assert m.va % (2 << 20) == 0 and g.vram_used == used + (3 << 20) and m.cpu is None
  amd._gpu_free(m)
  assert g.vram_used == used
  h = amd._gpu_alloc(8192, "userptr")
  ctypes.c_uint32.from_address(h.cpu).value = 0x1234   # host memory the GPU reads at the same address
  assert mock.u32(g, h.va) == 0x1234
  amd._gpu_free(h)
  c = amd._gpu_alloc(4096, "vram", cpu_access=True)    # through the render node mmap (large BAR)
  ctypes.c_uint32.from_address(c.cpu).value = 99
  flushes = g.hdp_flushes
  amd.hdp_flush()
  assert mock.u32(g, c.va) == 99 and g.hdp_flushes == flushes + 1
  amd._gpu_free(c)

def test_out_of_memory_leaves_device_usable():
  dev, mock = open_mock(vram=256 << 20)
  try:
    b1 = dev.allocator.alloc(128 << 20)
    with pytest.raises(OutOfMemory, match=r"AMD: out of memory allocating .*ENOMEM for a vram allocation"): dev.allocator.alloc(200 << 20)
    assert not any(bo.domain == "vram" and bo.size == 200 << 20 for bo in mock.bos.values())   # nothing left behind
    dev.allocator.free(b1, 128 << 20)
    dev.allocator.free_cache()
    b2 = dev.allocator.alloc(200 << 20)           # usable, and the memory came back
    dev.allocator.free(b2, 200 << 20)
  finally: dev.close()

# ---------------------------------------------------------------- queues, signals, events
def test_sdma_signal_wait_and_timestamp(amd):
  s, t = HCQSignal(amd), HCQSignal(amd)
  q = amd.copy_queue_t().timestamp(t).signal(s, (5 << 32) | 7)
  q.submit(amd)
  s.wait((5 << 32) | 7, timeout_ms=5000)
  assert s.value == (5 << 32) | 7 and t.timestamp > 0
  assert q.field(1, "value") == (5 << 32) | 7 and "value_hi" not in q.decode()
  q.update_signal(1, value=9).submit(amd)     # patched: both fence words
  s.wait(9, timeout_ms=5000)

def test_compute_queue_pm4_signal_wait_and_barrier(amd, mock):
  s1, s2, ts = HCQSignal(amd), HCQSignal(amd), HCQSignal(amd)
  q = amd.compute_queue_t().wait(s1, 3).timestamp(ts).memory_barrier().signal(s2, 11)
  q.submit(amd)
  time.sleep(0.01)
  assert s2.value == 0 and "WAIT_REG_MEM" in mock.queue_state()
  s1.value = 3                                   # the host's write; the driver re-rings the doorbell
  s2.wait(11, timeout_ms=5000)
  assert ts.timestamp > 0
  text = q.decode()
  assert "wait" in text and "barrier" in text and "value=11" in text

def test_cross_queue_signals(amd):
  a, b = HCQSignal(amd), HCQSignal(amd)
  # the copy queue waits for the compute queue, which waits for the host
  amd.copy_queue_t().wait(a, 1).signal(b, 2).submit(amd)
  amd.compute_queue_t().wait(b, 0).signal(a, 1).submit(amd)
  b.wait(2, timeout_ms=5000)

def test_blocking_wait_sleeps_in_kfd_and_wakes_on_the_interrupt(amd, mock):
  gate, done = HCQSignal(amd), HCQSignal(amd)
  amd.copy_queue_t().wait(gate, 1).signal(done, 1).submit(amd)
  calls = []
  orig = amd._event_fired
  def spy(eid, ms):
    calls.append((eid, ms))
    return orig(eid, ms)
  amd._event_fired = spy
  try:
    threading.Timer(0.05, lambda: setattr(gate, "value", 1)).start()
    t = time.perf_counter()
    done.wait(1, timeout_ms=5000)
    assert time.perf_counter() - t < 1
    assert any(eid == amd.event_id and ms > 0 for eid, ms in calls)   # it slept in AMDKFD_IOC_WAIT_EVENTS
  finally: amd._event_fired = orig

def test_timeout_decodes_the_stuck_queue(amd):
  never, done = HCQSignal(amd), HCQSignal(amd)
  amd.copy_queue_t().wait(never, 42).signal(done, 1).submit(amd)
  t = time.perf_counter()
  with pytest.raises(HCQTimeout) as e: done.wait(1, timeout_ms=100)
  assert 0.09 < time.perf_counter() - t < 3
  msg = str(e.value)
  assert "POLL_REGMEM (WAIT)" in msg and f"{never.va_addr:#x}" in msg and "value=42" in msg and "<== here" in msg
  never.value = 42
  done.wait(1, timeout_ms=5000)

def test_compute_timeout_decodes_aql_and_ib(amd):
  never, done = HCQSignal(amd), HCQSignal(amd)
  amd.compute_queue_t().wait(never, 5).signal(done, 1).submit(amd)
  with pytest.raises(HCQTimeout) as e: done.wait(1, timeout_ms=50)
  msg = str(e.value)
  assert "PM4_IB" in msg and "the CP is here" in msg and f"WAIT_REG_MEM mem[{never.va_addr:#x}]" in msg and "value=5" in msg
  never.value = 5
  done.wait(1, timeout_ms=5000)

def test_hang_watchdog_reports_the_blocked_packet(amd, monkeypatch, capfd):
  """HANG_WARN_MS on AMD: the warning names the signal, the value waited for and its current value, and shows the
  WAIT_REG_MEM the CP is blocked on; the wait goes on and completes when the value arrives."""
  from baregrad import knobs
  monkeypatch.setenv("HANG_WARN_MS", "100"); knobs.reset()
  never, done = HCQSignal(amd), HCQSignal(amd)
  amd.compute_queue_t().wait(never, 5).signal(done, 1).submit(amd)
  releaser = threading.Timer(1.0, lambda: setattr(never, "value", 5))
  releaser.start()
  try: done.wait(1, timeout_ms=10000)
  finally:
    releaser.join()
    monkeypatch.delenv("HANG_WARN_MS"); knobs.reset()
  err = capfd.readouterr().err
  assert f"waiting for signal {done.va_addr:#x} >= 1 (it is 0;" in err and "HANG?" in err, err
  assert f"WAIT_REG_MEM mem[{never.va_addr:#x}]" in err and "value=5" in err and "the CP is here" in err, err

def test_hang_watchdog_on_the_timeline_does_not_give_up_the_work(amd, monkeypatch, capfd):
  """Work on the device's own timeline that outlasts HANG_WARN_MS (a long kernel): the watchdog reports, the wait goes
  on to its timeout and the work completes; no recovery at the end of the watchdog's window (which destroyed the
  queues and lost the work after 5 s)."""
  from baregrad import knobs
  monkeypatch.setenv("HANG_WARN_MS", "100"); knobs.reset()
  never = HCQSignal(amd)
  amd.compute_queue_t().wait(never, 5).signal(amd.timeline_signal, amd.next_timeline()).submit(amd)
  releaser = threading.Timer(1.0, lambda: setattr(never, "value", 5))
  releaser.start()
  try: amd.synchronize(timeout_ms=10000)
  finally:
    releaser.join()
    monkeypatch.delenv("HANG_WARN_MS"); knobs.reset()
  err = capfd.readouterr().err
  assert "HANG?" in err and "recovered" not in err, err

def test_interrupt_needs_the_mailbox_write(amd, mock):
  """A signal whose interrupt packet forgot the event mailbox write would never wake a sleeping host (the check in
  kfd_signal_event_interrupt): the driver's signals write it; this drives a RELEASE_MEM interrupt without it."""
  fam = amd.family
  ib = amd._gpu_alloc(4096, "userptr")
  words = hw.pm4_release_mem(fam, ib.va + 2048, 1, data_sel=1, int_sel=2, ctxid=amd.event_id)
  (ctypes.c_uint32 * len(words)).from_address(ib.cpu)[:] = words
  pulses = mock.events[amd.event_id].pulses
  raw_aql(amd, hw.aql_pm4_ib(fam, ib.va, len(words), True))
  assert mock.events[amd.event_id].pulses == pulses   # no mailbox write: not set
  amd._gpu_free(ib)

# ---------------------------------------------------------------- the hardware's answer to mistakes
def test_vm_fault_stops_the_queues_and_raises():
  dev, mock = open_mock()
  try:
    done = HCQSignal(dev)
    dev.copy_queue_t().copy(0x7ff0_0000_0000, dev.timeline_signal.va_addr, 64).signal(done, 1).submit(dev)
    with pytest.raises(AMDFault) as e: done.wait(1, timeout_ms=5000)
    msg = str(e.value)
    assert "GPU VM fault at address 0x7ff000000000" in msg and "not present" in msg and "COPY_LINEAR" in msg
    assert any("page fault" in l for l in mock.log) and all(q.evicted for q in mock.queues.values())
  finally: dev.close()

def test_bad_vendor_packet_hangs_the_queue():
  dev, mock = open_mock()
  try:
    raw_aql(dev, [hw.aql_header(hw.AQL_VENDOR, True, 2, 2) | (7 << 16)] + [0] * 15)   # vendor format 7: not PM4_IB
    with pytest.raises(AMDFault, match="GPU hang/reset"): dev.synchronize(timeout_ms=2000)
    assert any("vendor-specific format 7" in l for l in mock.log)
  finally: dev.close()

def test_cp_bad_opcode_in_an_ib():
  dev, mock = open_mock()
  try:
    ib = dev._gpu_alloc(4096, "userptr")
    ctypes.c_uint32.from_address(ib.cpu).value = hw.pm4_hdr(0x15, 3)   # DISPATCH_DIRECT: not taken inside our IBs
    raw_aql(dev, hw.aql_pm4_ib(dev.family, ib.va, 4, True))
    with pytest.raises(AMDFault, match="GPU hang/reset"): dev.synchronize(timeout_ms=2000)
    assert any("CP bad opcode" in l for l in mock.log)
  finally: dev.close()

@pytest.mark.parametrize("family_arch", ["gfx1100", "gfx942"])
def test_cp_refuses_an_opcode_no_header_defines(family_arch):
  """A PM4 opcode neither nvd.h nor soc15d.h defines (0x0e) is a bad opcode for the CP (kfd_int_process_v11.c /
  kfd_int_process_v9.c: CP_BAD_OPCODE suspends the queue): the device reports a hang/reset naming the opcode and the
  IB address, and the queue does not run on past it."""
  dev, mock = open_mock(arch=family_arch, skip_unexecutable=True) if family_arch == "gfx942" else open_mock()
  try:
    assert 0x0E not in hw.pm4_names(dev.family)
    ib, m = dev._gpu_alloc(4096, "userptr"), dev._gpu_alloc(4096, "userptr")
    w = [hw.pm4_hdr(0x0E, 1), 0] + hw.pm4_release_mem(dev.family, m.va, 0x77, data_sel=1)
    (ctypes.c_uint32 * len(w)).from_address(ib.cpu)[:] = w
    raw_aql(dev, hw.aql_pm4_ib(dev.family, ib.va, len(w), True))
    with pytest.raises(AMDFault, match="GPU hang/reset"): dev.synchronize(timeout_ms=2000)
    assert any(f"CP bad opcode: PM4 0xe at {ib.va:#x}" in l for l in mock.log), mock.log[-3:]
    assert ctypes.c_uint32.from_address(m.cpu).value == 0     # the RELEASE_MEM after it never ran
  finally: dev.close()

def test_release_mem_64bit_address_drops_low_bits(amd, mock):
  """RELEASE_MEM's 64-bit data address holds bits 31:3 (kfd_pm4_headers_ai.h: address_lo_64b): a misaligned signal
  address writes the aligned quadword, as the hardware would."""
  m = amd._gpu_alloc(4096, "userptr")
  ib = amd._gpu_alloc(4096, "userptr")
  w = hw.pm4_release_mem(amd.family, m.va + 12, 0x55, data_sel=2)
  (ctypes.c_uint32 * len(w)).from_address(ib.cpu)[:] = w
  raw_aql(amd, hw.aql_pm4_ib(amd.family, ib.va, len(w), True))
  assert ctypes.c_uint64.from_address(m.cpu + 8).value == 0x55 and ctypes.c_uint32.from_address(m.cpu + 16).value == 0
  amd._gpu_free(m); amd._gpu_free(ib)

def test_inactive_queue_does_not_run():
  k = KFD()
  a = k.queue_args(queue_percentage=0)        # kfd_priv.h QUEUE_IS_ACTIVE: queue_percent > 0
  q = k.create_queue(**a)
  assert not k.mock.queues[q.queue_id].active

def test_gfx942_mock_runs_copies_and_sizes_queues_for_8_xccs():
  dev, mock = open_mock(arch="gfx942")
  try:
    assert dev.target.name == "gfx942" and dev.family == "gfx9" and dev.sizes.num_xcc == 8
    a = np.arange(1000, dtype=np.int32)
    buf = dev.allocator.alloc(4000)
    dev.allocator._copyin(buf, memoryview(a).cast("B"))
    out = memoryview(bytearray(4000))
    dev.allocator._copyout(out, buf)
    assert (np.frombuffer(out, np.int32) == a).all()
    s = HCQSignal(dev)
    dev.compute_queue_t().memory_barrier().signal(s, 3).submit(dev)   # gfx9 PM4 (soc15d.h RELEASE_MEM) through the CP
    s.wait(3, timeout_ms=5000)
  finally: dev.close()

# ---------------------------------------------------------------- kernels
def test_gfx942_dispatch_is_decoded_and_the_mock_says_it_cannot_execute():
  dev, mock = open_mock(arch="gfx942")
  try:
    prg = dev.runtime(dev, "fill", amd_kernels("gfx942"))
    assert prg.descriptor.wavefront_size32 is False           # wave64 code object for CDNA3
    out = dev.allocator.alloc(64)
    prg(out, global_size=(4, 1, 1), local_size=(4, 1, 1), vals=(1,))
    with pytest.raises(AMDFault, match="GPU hang/reset") as e: dev.synchronize(timeout_ms=5000)
    assert "cannot execute wave64 CDNA code" in str(e.value)  # the mock's statement, in the report the driver raises
    d = mock.dispatches[-1]
    assert d.grid == (16, 1, 1) and d.workgroup == (4, 1, 1) and d.kernel_object == prg.kd_va and not d.executed
    assert "CDNA3 (wave64)" in d.note
  finally: dev.close()

def test_gfx942_pm4_writes_run_on_one_xcc(monkeypatch):
  """On 8 XCCs every XCC's CP runs a PM4 IB of the AQL queue (kfd_mqd_manager_v9.c init_mqd_v9_4_3: one MQD per XCC;
  ROCr predicates such PM4 to XCC 0): the driver wraps signals, timestamps and copies in PRED_EXEC (XCC 0) and leaves
  waits on all XCCs, so each memory write happens once. Without PRED_EXEC the mock reports the write 8 XCCs made."""
  dev, mock = open_mock(arch="gfx942", skip_unexecutable=True)
  try:
    s, ts = HCQSignal(dev), HCQSignal(dev)
    src, dst = dev.allocator.alloc(64), dev.allocator.alloc(64)
    q = dev.compute_queue_t().wait(dev.timeline_signal, dev.timeline_value - 1).timestamp(ts).copy(dst.va_addr, src.va_addr, 64).signal(s, 3)
    q.signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
    s.wait(3, timeout_ms=5000)
    dev.synchronize()
    assert not mock.xcc_writes and ts.timestamp > 0
    ib = [p for p in dev.aql.packets(q, dev.aql.put) if hw.decode_aql(p)["type"] == hw.AQL_VENDOR]
    text = "\n".join(hw.format_pm4("gfx9", list((ctypes.c_uint32 * (p[4] & 0xFFFFF)).from_address(dev.aql.ib.cpu + (p[2] | (p[3] << 32)) - dev.aql.ib.va)), 0)
                     for p in ib)
    assert text.count("PRED_EXEC xcc_mask=0x1") == 4 and text.index("WAIT_REG_MEM") < text.index("PRED_EXEC")   # the wait is not predicated
    monkeypatch.setattr(hw, "pm4_pred_exec", lambda fam, mask, n: [])     # a driver that forgets it
    dev.compute_queue_t().signal(s, 4).submit(dev)
    s.wait(4, timeout_ms=5000)
    assert mock.xcc_writes and "ran on 8 XCCs (no PRED_EXEC)" in mock.xcc_writes[0]
  finally: dev.close()

def test_gfx942_plumbing_without_execution():
  """MockAMDGPU(skip_unexecutable=True): dispatches complete unexecuted, so the queue plumbing (signals after kernels,
  timeline, kernargs) is testable on gfx942."""
  dev, mock = open_mock(arch="gfx942", skip_unexecutable=True)
  try:
    prg = dev.runtime(dev, "inc", amd_kernels("gfx942"))
    out = dev.allocator.alloc(64)
    for _ in range(3): prg(out, global_size=(4, 1, 1), local_size=(4, 1, 1))
    dev.synchronize(timeout_ms=5000)
    assert len(mock.dispatches) == 3 and dev.timeline_signal.value == dev.timeline_value - 1
  finally: dev.close()

def test_code_object_checks(amd):
  with pytest.raises(ValueError, match="code object is for gfx942, this GPU is gfx1100"): amd.runtime(amd, "fill", amd_kernels("gfx942"))
  with pytest.raises(ValueError, match="no kernel 'nope'"): amd.runtime(amd, "nope", amd_kernels())
  prg = amd.runtime(amd, "fill", amd_kernels())
  assert prg.explicit_args == [(0, 8), (8, 8)] and any(k == "hidden_group_size_x" for k, _, _ in prg.hidden_args)
  st = prg.fill_kernargs([amd.allocator.alloc(64)], [5])
  st.write_launch((2, 1, 1), (8, 1, 1))
  off = next(o for k, o, _ in prg.hidden_args if k == "hidden_group_size_x")
  assert ctypes.c_uint16.from_address(st.cpu_addr + off).value == 8
  with pytest.raises(ValueError, match="1..1024 work-items"): st.write_launch((1, 1, 1), (2048, 1, 1))
  with pytest.raises(ValueError, match="takes 2 explicit arguments"): prg.fill_kernargs([], [])

def _have_rdna3() -> bool:
  try: from baregrad.drivers.mock.rdna3.machine import RDNA3Machine  # noqa: F401
  except ImportError: return False
  return True
needs_rdna3 = pytest.mark.skipif(not _have_rdna3(), reason="the RDNA3 interpreter (baregrad/drivers/mock/rdna3: RDNA3Machine) is not in this build")

@needs_rdna3
def test_kernel_runs_with_hidden_arguments(amd):
  out = Buffer("AMD", 32, dtypes.int32).allocate()
  amd.runtime(amd, "fill", amd_kernels())(out._buf, global_size=(8, 1, 1), local_size=(4, 1, 1), vals=(-3,))
  amd.synchronize()
  assert i32(out) == [-3 + i for i in range(32)]   # gid = workgroup id * hidden_group_size_x + work-item id

@needs_rdna3
def test_dependent_dispatches_need_a_barrier(amd, mock):
  """Two dispatches with no barrier between them run concurrently: the mock interleaves them instruction step by
  instruction step (the latest first) and reports the hazard; memory_barrier() orders them. A slow producer leaves
  its consumer reading stale data; a slow consumer (it reads its input 64 times) already sees the producer's stores:
  interleaved, not one after the other."""
  lib = amd_kernels()
  fill, copy, slow_fill, slow_copy = (amd.runtime(amd, k, lib) for k in ("fill", "copy", "slow_fill", "slow_copy"))
  for producer, consumer, barrier, want in ((fill, copy, True, [5 + i for i in range(16)]), (slow_fill, copy, False, [0] * 16),
                                            (fill, slow_copy, False, [5 + i for i in range(16)])):
    a = Buffer("AMD", 16, dtypes.int32).copyin(memoryview(np.zeros(16, np.int32)))
    b = Buffer("AMD", 16, dtypes.int32).copyin(memoryview(np.zeros(16, np.int32)))
    amd.synchronize()
    n = len(mock.hazards)
    pargs = producer.fill_kernargs([a._buf], [5]) if producer is fill else producer.fill_kernargs([a._buf])
    q = amd.compute_queue_t().wait(amd.timeline_signal, amd.timeline_value - 1).exec(producer, pargs, (16, 1, 1))
    if barrier: q.memory_barrier()
    q.exec(consumer, consumer.fill_kernargs([b._buf, a._buf]), (16, 1, 1)).signal(amd.timeline_signal, amd.next_timeline()).submit(amd)
    amd.synchronize()
    assert i32(b) == want, (producer.name, consumer.name)
    if barrier: assert len(mock.hazards) == n
    else: assert "read-after-write hazard" in mock.hazards[-1] and "dispatch" in mock.hazards[-1]

@needs_rdna3
def test_the_same_args_dispatched_again_are_ordered(amd, mock):
  """exec() of an args state already dispatched since the last ordering point carries the barrier bit (as NV's queue
  waits for idle before a QMD launched again): three increments of one buffer in one submission all count."""
  inc = amd.runtime(amd, "inc", amd_kernels())
  a = Buffer("AMD", 32, dtypes.int32).copyin(memoryview(np.zeros(32, np.int32)))
  amd.synchronize()
  n = len(mock.hazards)
  st = inc.fill_kernargs([a._buf])
  q = amd.compute_queue_t().wait(amd.timeline_signal, amd.timeline_value - 1)
  for _ in range(3): q.exec(inc, st, (32, 1, 1))
  q.signal(amd.timeline_signal, amd.next_timeline()).submit(amd)
  amd.synchronize()
  assert i32(a) == [3] * 32 and len(mock.hazards) == n
  assert [hw.decode_aql(q.words[c.start:c.start + 16])["barrier"] for c in q.cmds if c.kind == "exec"] == [0, 1, 1]
  q.update_exec(2, global_size=(16, 1, 1))   # patching keeps the bit
  c = [c for c in q.cmds if c.kind == "exec"][2]
  assert hw.decode_aql(q.words[c.start:c.start + 16])["barrier"] == 1

@needs_rdna3
def test_kernel_vm_fault_reports_the_address():
  dev, mock = open_mock()
  try:
    prg = dev.runtime(dev, "fill", amd_kernels())
    st = prg.fill_kernargs([dev.allocator.alloc(64)], [1])
    st.update_buffer(0, 0x7ee0_0000_0000)        # an address no BO maps
    dev.compute_queue_t().exec(prg, st, (4, 1, 1)).signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
    with pytest.raises(AMDFault, match="GPU VM fault at address 0x7ee000000000"): dev.synchronize(timeout_ms=5000)
  finally: dev.close()

@needs_rdna3
def test_graph_replay_single_submit(amd, mock):
  from baregrad.hcq.graph import HCQGraph
  inc = amd.runtime(amd, "inc", amd_kernels())
  a = Buffer("AMD", 32, dtypes.int32).copyin(memoryview(np.zeros(32, np.int32)))
  g = HCQGraph(amd, [(inc, [a._buf], (), (32, 1, 1), (1, 1, 1))])
  for _ in range(10): g.replay()
  amd.synchronize()
  assert i32(a) == [10] * 32

@needs_rdna3
def test_graph_replay_submits_its_prebuilt_packets(amd, mock, monkeypatch):
  """A replay copies the recording's prebuilt packets into the ring in one submission (AQLRing.submit_prebuilt): no
  packets made again (packets() is not called), no IB taken from the IB area, one doorbell; what runs follows each
  replay's patches (buffers, the timeline values in the prebuilt IBs)."""
  from baregrad.hcq.graph import HCQGraph
  fill, inc = amd.runtime(amd, "fill", amd_kernels()), amd.runtime(amd, "inc", amd_kernels())
  bufs = [Buffer("AMD", 32, dtypes.int32).copyin(memoryview(np.zeros(32, np.int32))) for _ in range(3)]
  g = HCQGraph(amd, [(fill, [bufs[0]._buf], (5,), (32, 1, 1), (1, 1, 1)), (inc, [bufs[0]._buf], (), (32, 1, 1), (1, 1, 1))])
  amd.synchronize()
  monkeypatch.setattr(type(amd.aql), "packets", lambda *a: pytest.fail("a replay made its packets again"))
  bells = []
  orig = type(amd.port).doorbell
  monkeypatch.setattr(type(amd.port), "doorbell", lambda port, *a: bells.append(a) or orig(port, *a))
  ib_off, put = amd.aql.ib_off, amd.aql.put
  for b in bufs: g.replay([(0, 0, b._buf.va_addr), (1, 0, b._buf.va_addr)])
  assert len(bells) == 3 and amd.aql.put == put + 3 * g.slots[0].q._prebuilt.n and amd.aql.ib_off == ib_off
  amd.synchronize()
  for b in bufs: assert i32(b) == [6 + i for i in range(32)]
  n = g.slots[0].q._prebuilt.n   # (IOCTL_TRACE and a timeout's queue state decode the prebuilt IBs too)
  assert "WAIT_REG_MEM" in amd.aql.packet_text(amd.aql.put - n) and "RELEASE_MEM" in amd.aql.packet_text(amd.aql.put - 1)

@needs_rdna3
def test_graph_replays_wrap_the_ring(monkeypatch):
  """A prebuilt replay of 9 packets on a 64-slot ring: submissions that reach the ring's end are split in two stores
  (AQLRing.submit_prebuilt) and wrap to slot 0; every replay runs in full (the increments all count)."""
  import baregrad.drivers.amd.device as amd_device
  from baregrad.hcq.graph import HCQGraph
  monkeypatch.setattr(amd_device, "AQL_RING", 4096)
  dev, mock = open_mock()
  try:
    fill, inc = dev.runtime(dev, "fill", amd_kernels()), dev.runtime(dev, "inc", amd_kernels())
    a = dev.allocator.alloc(4 * 32)
    g = HCQGraph(dev, [(fill, [a], (5,), (32, 1, 1), (1, 1, 1))] + [(inc, [a], (), (32, 1, 1), (1, 1, 1))] * 3)
    assert g.slots[0].q._prebuilt.n == 9 and dev.aql.nslots == 64
    for _ in range(10): g.replay()   # (the 8th starts at slot 63: split in two stores)
    dev.synchronize(timeout_ms=5000)
    out = bytearray(4 * 32)
    dev.allocator._copyout(memoryview(out), a)
    assert list(memoryview(out).cast("i")) == [8 + i for i in range(32)] and dev.aql.put == 90 and mock.queues[dev.queue_ids[0]].rd == 90
  finally: dev.close()

@needs_rdna3
def test_direct_launches_wrap_the_ib_area_and_the_ring(monkeypatch):
  """A direct launch puts its wait and signal IBs in one allocation (AQLRing.launch_packets) and, where the two would
  not be adjacent before the IB area's end, one at a time as packets() does; its packets (word arrays) go into the ring
  as slice stores. 70 launches wrap a 4 KiB IB area (32 launches a lap) through both ways and a 64-slot ring (210
  packets): every increment counts, no IB or packet is overwritten while in flight."""
  import baregrad.drivers.amd.device as amd_device
  monkeypatch.setattr(amd_device, "IB_AREA", 4096)
  monkeypatch.setattr(amd_device, "AQL_RING", 4096)
  dev, mock = open_mock()
  try:
    inc = dev.runtime(dev, "inc", amd_kernels())
    a = dev.allocator.alloc(4 * 32)
    dev.allocator._copyin(a, memoryview(bytearray(4 * 32)))
    one_at_a_time = []
    orig = type(dev.aql)._ib_words_packet
    monkeypatch.setattr(type(dev.aql), "_ib_words_packet", lambda ring, *a: one_at_a_time.append(1) or orig(ring, *a))
    for _ in range(70): inc(a, global_size=(1, 1, 1), local_size=(32, 1, 1))
    assert 0 < len(one_at_a_time) < 20   # (both ways taken: the lap's last launch places its IBs one at a time)
    dev.synchronize(timeout_ms=5000)
    out = bytearray(4 * 32)
    dev.allocator._copyout(memoryview(out), a)
    assert list(memoryview(out).cast("i")) == [70] * 32 and dev.aql.put == 210
  finally: dev.close()

def test_rings_wrap(monkeypatch):
  """Small rings (a 64-slot AQL ring, a 4 KiB IB area, a 4 KiB SDMA ring) wrap many times; nothing is overwritten early."""
  import baregrad.drivers.amd.device as amd_device
  monkeypatch.setattr(amd_device, "AQL_RING", 4096)
  monkeypatch.setattr(amd_device, "SDMA_RING", 4096)
  monkeypatch.setattr(amd_device, "IB_AREA", 4096)
  dev, mock = open_mock()
  try:
    s = HCQSignal(dev)
    src, dst = dev.allocator.alloc(64), dev.allocator.alloc(64)
    for i in range(1, 301):
      dev.compute_queue_t().wait(s, i - 1).memory_barrier().signal(s, i).submit(dev)
      dev.copy_queue_t().wait(s, i).copy(dst.va_addr, src.va_addr, 64).timestamp(s).submit(dev)
    s.wait(300, timeout_ms=5000)
    dev.synchronize(timeout_ms=5000)
    assert dev.aql.put == 900 and dev.sdma.put > 4096 * 4 and mock.queues[dev.queue_ids[0]].rd == 900   # 3 packets a submission
  finally: dev.close()

def test_engines_run_what_the_doorbell_and_the_write_pointer_announce():
  """A packet runs only once both the write pointer in memory and the queue's own doorbell say it is there."""
  dev, mock = open_mock()
  try:
    r, s = dev.aql, HCQSignal(dev)
    w = dev.compute_queue_t().signal(s, 1)
    pk = r.packets(w, r.put)
    slot = r.ring.cpu + 64 * r.put
    (ctypes.c_uint32 * 16).from_address(slot)[:] = pk[0]
    r.put += 1
    r.wptr_p.value = r.put
    other = dev.sdma.doorbell
    dev.port.doorbell(other, 0, 8)                    # the SDMA queue's doorbell, not this queue's
    assert s.value == 0 and mock.queues[dev.queue_ids[0]].rd == 0
    dev.port.doorbell(r.doorbell, r.put - 1, 8)      # its own: it runs
    assert s.value == 1
    # SDMA: a doorbell ahead of the write pointer in memory runs nothing past the memory's value
    sr = dev.sdma
    w2 = dev.copy_queue_t().signal(s, 2)
    words = list(w2.words) + hw.sdma_fence(dev.family, dev.event_mailbox, dev.event_id) + hw.sdma_trap(dev.family, dev.event_id)
    (ctypes.c_uint32 * len(words)).from_address(sr.ring.cpu + sr.put)[:] = words
    dev.port.doorbell(sr.doorbell, sr.put + 4 * len(words), 8)
    assert s.value == 1                               # the write pointer in memory was not updated
    sr.put += 4 * len(words)
    sr.wptr_p.value = sr.put
    dev.port.doorbell(sr.doorbell, sr.put, 8)
    assert s.value == 2
  finally: dev.close()

def test_ring_base_is_256_byte_granular():
  """The MQD holds the ring base >> 8 (kfd_mqd_manager_v11.c: update_mqd, cp_hqd_pq_base_lo): a ring address inside the
  mapping's first page passes KFD's checks, and the CP then reads from the 256-byte boundary below it."""
  k = KFD()
  a = k.queue_args()
  q = k.create_queue(**dict(a, ring_base_address=a["ring_base_address"] + 0x40))
  assert k.mock.queues[q.queue_id].ring == a["ring_base_address"]

def test_concurrent_host_threads(amd):
  """Several host threads copying and signalling at once: each gets its own data back, the timeline stays ordered."""
  errors: list[Exception] = []
  def work(seed: int) -> None:
    try:
      for n in (100, 5000, 77):
        a = np.random.default_rng(seed * 10 + n).integers(0, 1 << 30, n).astype(np.int32)
        b = Buffer("AMD", n, dtypes.int32).copyin(memoryview(a))
        assert (np.frombuffer(b.as_memoryview(), np.int32) == a).all()
        s = HCQSignal(amd)
        with amd.submit_lock:
          amd.compute_queue_t().wait(amd.timeline_signal, amd.timeline_value - 1).signal(s, seed) \
            .signal(amd.timeline_signal, amd.next_timeline()).submit(amd)
        s.wait(seed, timeout_ms=5000)
    except Exception as e: errors.append(e)
  ts = [threading.Thread(target=work, args=(i + 1,)) for i in range(4)]
  for t in ts: t.start()
  for t in ts: t.join(30)
  assert not errors, errors
  amd.synchronize()

def test_aql_packet_with_invalid_header_stalls_the_cp(amd, mock):
  """A slot whose header still says INVALID is not processed (the producer writes the header last): the CP waits."""
  r = amd.aql
  with r.lock:
    slot = r.ring.cpu + 64 * (r.put % r.nslots)
    ctypes.c_uint32.from_address(slot).value = hw.AQL_INVALID
    r.put += 1
    r.wptr_p.value = r.put
    amd.port.doorbell(r.doorbell, r.put - 1, 8)
  q = mock.queues[amd.queue_ids[0]]
  assert q.rd == r.put - 1 and "INVALID" in (q.blocked or "")
  with r.lock: ctypes.c_uint32.from_address(slot).value = hw.aql_barrier_and()[0]   # the header arrives: it runs
  amd._kick()
  assert q.rd == r.put

def test_sdma_illegal_packet_stops_the_queue():
  dev, mock = open_mock()
  try:
    sr = dev.sdma
    with sr.lock:
      ctypes.c_uint32.from_address(sr.ring.cpu).value = 0xEE   # no such SDMA opcode
      sr.put = 4
      sr.wptr_p.value = 4
      dev.port.doorbell(sr.doorbell, 4, 8)
    with pytest.raises(AMDFault, match="GPU hang/reset"): dev.synchronize(timeout_ms=2000)
    assert any("SDMA illegal packet" in l for l in mock.log)
  finally: dev.close()

def test_gfx9_drops_end_of_pipe_interrupts_without_a_context_id():
  """event_interrupt_isr_v9: an END_OF_PIPE interrupt with context id 0 is dropped on gfx9 (a firmware workaround), so
  even a written mailbox slot is not noticed; gfx11 would scan the slots and set the event."""
  for arch, fires in (("gfx942", False), ("gfx1100", True)):
    dev, mock = open_mock(arch=arch)
    try:
      ib = dev._gpu_alloc(4096, "userptr")
      w = hw.pm4_release_mem(dev.family, dev.event_mailbox, 1, data_sel=1, int_sel=2, ctxid=0)
      (ctypes.c_uint32 * len(w)).from_address(ib.cpu)[:] = w
      pulses = mock.events[dev.event_id].pulses
      raw_aql(dev, hw.aql_pm4_ib(dev.family, ib.va, len(w), True))
      assert (mock.events[dev.event_id].pulses > pulses) == fires, arch
    finally: dev.close()

def test_queue_state_names_the_read_pointer_unit():
  """The queue state says what each queue's read pointer counts: AQL packets, SDMA bytes, PM4 dwords."""
  dev, mock = open_mock()
  try:
    dev.synchronize()
    st = mock.queue_state()
    kinds = {q.kind for q in mock.queues.values()}
    assert kinds, st
    for k, unit in {"aql": "packets", "sdma": "bytes", "pm4": "dwords"}.items():
      if k in kinds: assert re.search(rf"\({k}\) ring 0x[0-9a-f]+: read pointer \d+ {unit}, packets done \d+", st), st
  finally: dev.close()
