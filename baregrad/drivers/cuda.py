"""CUDA fallback device (DEV=CUDA, CUDA:n) through the CUDA driver API (libcuda) and the generated bindings
(ctypes_autogen/cuda.py), for machines where our own NV driver cannot use the RM ioctls (a container without
/dev/nvidiactl access, an unsupported driver branch). The code is the NV device's: the PTX renderer and ptxas
(drivers/nv_compile.py) make a cubin for the GPU's architecture, and cuModuleLoadData loads it, so NV and CUDA run the
very same machine code (tests/drivers/nv/test_cuda.py cross-checks them where both are at hand).

One context (the device's primary context) and one stream; every host wait polls an event or the stream with a
timeout (CUDA_TIMEOUT_MS, default 30000): cuStreamSynchronize and cuEventSynchronize cannot time out. Kernel
arguments are packed into one parameter buffer at the offsets the cubin declares (EIATTR_KPARAM_INFO) and passed with
CU_LAUNCH_PARAM_BUFFER_POINTER. Errors name the call and the CUresult (cuGetErrorName, cuGetErrorString)."""
from __future__ import annotations
import ctypes, threading, time
from baregrad import knobs
from dataclasses import dataclass
from typing import Any, Hashable, Sequence
from baregrad.hal import Compiled, LRUAllocator, Program, CompileError, DeviceUnavailable, OutOfMemory
from baregrad.ctypes_autogen import cuda as cu
from baregrad.ctypes_autogen._support import LibraryMissing

# ---------------------------------------------------------------- error translation
def _header_names() -> dict[int, str]:
  out: dict[int, str] = {}
  for k, v in vars(cu).items():
    if (k == "CUDA_SUCCESS" or k.startswith("CUDA_ERROR_")) and isinstance(v, int): out.setdefault(v, k)
  return out
HEADER_NAMES = _header_names()   # cuda.h's names: what we can say when libcuda itself cannot be asked

def error_text(status: int, api: Any = cu) -> str:
  """'CUDA_ERROR_OUT_OF_MEMORY (2): out of memory': libcuda's name and description of a CUresult (the header's name
  when libcuda does not know the code or is not loaded)."""
  name, desc = ctypes.c_char_p(), ctypes.c_char_p()
  try:
    ok_name = api.cuGetErrorName(status, ctypes.byref(name)) == cu.CUDA_SUCCESS and name.value
    ok_desc = api.cuGetErrorString(status, ctypes.byref(desc)) == cu.CUDA_SUCCESS and desc.value
  except LibraryMissing: ok_name = ok_desc = False
  nm = name.value.decode() if ok_name and name.value else HEADER_NAMES.get(status, "unknown CUresult")
  return f"{nm} ({status})" + (f": {desc.value.decode()}" if ok_desc and desc.value else "")

class CUDAError(RuntimeError):
  """A CUDA driver API call failed: the call, the CUresult's name and description, and what was being done."""
  def __init__(self, call: str, status: int, what: str = "", api: Any = cu) -> None:
    self.call, self.status = call, status
    self.name = HEADER_NAMES.get(status, "unknown CUresult")
    super().__init__(f"{call} failed with {error_text(status, api)}" + (f" ({what})" if what else ""))

def check(status: int, call: str, what: str = "", api: Any = cu) -> None:
  if status != cu.CUDA_SUCCESS: raise CUDAError(call, status, what, api)

def timeout_s() -> float: return knobs.read("CUDA_TIMEOUT_MS") / 1000

def poll(query: Any, obj: Any, what: str, timeout: float | None = None, api: Any = cu) -> None:
  """Wait for an event or stream (cuEventQuery / cuStreamQuery) with a timeout; a failed kernel before it raises."""
  deadline = time.monotonic() + (timeout_s() if timeout is None else timeout)
  spins, nap = 0, 1e-5
  while (st := query(obj)) == cu.CUDA_ERROR_NOT_READY:
    if time.monotonic() > deadline:
      raise TimeoutError(f"CUDA: {what} did not finish within {timeout if timeout is not None else timeout_s():.1f} s "
                         "(set CUDA_TIMEOUT_MS to wait longer)")
    spins += 1
    if spins > 200: time.sleep(nap); nap = min(nap * 2, 1e-3)
  check(st, query.name if hasattr(query, "name") else "query", what, api)

# ---------------------------------------------------------------- the module image and its arguments
def image_params(lib: bytes, name: str) -> list[tuple[int, int]]:
  """(offset, size) of each parameter of kernel `name` in a cubin, from its EIATTR_KPARAM_INFO; raises ValueError when
  lib is not a cubin or lacks the kernel."""
  from baregrad.drivers.nv_compile import parse_cubin, CubinError
  try: info = parse_cubin(lib)
  except CubinError as e: raise ValueError(f"CUDA program {name}: the module image is not a cubin: {e}") from None
  k = info["kernels"].get(name)
  if k is None: raise ValueError(f"CUDA program {name}: the cubin ({info['arch']}) has no kernel {name}; it has {sorted(info['kernels'])}")
  return [(off, size) for _, off, size in k["params"]]

def pack_args(params: Sequence[tuple[int, int]], ptrs: Sequence[int], vals: Sequence[int]) -> bytes:
  """The kernel's parameter buffer: buffer addresses then variable values, each little-endian at its offset and size
  (two's complement for negative values)."""
  if len(ptrs) + len(vals) != len(params):
    raise ValueError(f"the kernel takes {len(params)} parameters, got {len(ptrs)} buffers and {len(vals)} values")
  out = bytearray(max((o + s for o, s in params), default=0))
  for (off, size), v in zip(params, list(ptrs) + list(vals)):
    if not -(1 << (8 * size - 1)) <= v < (1 << (8 * size)):
      raise ValueError(f"parameter at offset {off}: {v} does not fit in {size} bytes")
    out[off:off + size] = (v & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
  return bytes(out)

# ---------------------------------------------------------------- memory
@dataclass
class CUDABuffer:
  ptr: int            # CUdeviceptr
  size: int
  parent: CUDABuffer | None = None

class CUDAAllocator(LRUAllocator):
  def __init__(self, dev: CUDADevice) -> None:
    super().__init__(dev.device)
    self.dev = dev
  def _alloc(self, size: int, options: Hashable | None) -> CUDABuffer:
    self.dev._current()
    p = cu.CUdeviceptr(0)
    st = cu.cuMemAlloc(ctypes.byref(p), max(size, 1))
    if st == cu.CUDA_ERROR_OUT_OF_MEMORY: raise OutOfMemory(self.device, size, self.mem_used, f"cuMemAlloc: {error_text(st)}")
    check(st, "cuMemAlloc", f"{size} bytes")
    return CUDABuffer(p.value, size)
  def _free(self, opaque: CUDABuffer, size: int, options: Hashable | None) -> None:
    if self.dev.closed: return
    self.dev.synchronize()  # a queued kernel may still use it
    check(cu.cuMemFree(opaque.ptr), "cuMemFree")
  def _copyin(self, dest: CUDABuffer, src: memoryview) -> None:
    host = (ctypes.c_char * len(src)).from_buffer_copy(src)
    self.dev._current()
    check(cu.cuMemcpyHtoDAsync(dest.ptr, host, len(src), self.dev.stream), "cuMemcpyHtoDAsync", f"{len(src)} bytes")
    self.dev.synchronize()
  def _copyout(self, dest: memoryview, src: CUDABuffer) -> None:
    self.dev.synchronize()  # from pageable memory the copy blocks without a timeout: wait for the kernels first, with one
    host = (ctypes.c_char * len(dest)).from_buffer(dest)
    check(cu.cuMemcpyDtoHAsync(host, src.ptr, len(dest), self.dev.stream), "cuMemcpyDtoHAsync", f"{len(dest)} bytes")
    self.dev.synchronize()
  def _offset(self, opaque: CUDABuffer, offset: int, size: int) -> CUDABuffer: return CUDABuffer(opaque.ptr + offset, size, opaque)

# ---------------------------------------------------------------- programs
class CUDAProgram(Program):
  """A cubin loaded as a module; calling it launches kernel `name` over global_size blocks of local_size threads."""
  def __init__(self, dev: CUDADevice, name: str, lib: bytes) -> None:
    super().__init__(dev, name, lib)
    self.params = image_params(lib, name)
    dev._current()
    self.module, self.fn = cu.CUmodule(), cu.CUfunction()
    check(cu.cuModuleLoadData(ctypes.byref(self.module), lib), "cuModuleLoadData", f"cubin of {name} for {dev.arch}")
    check(cu.cuModuleGetFunction(ctypes.byref(self.fn), self.module, name.encode()), "cuModuleGetFunction", name)
    mt = ctypes.c_int32(0)
    check(cu.cuFuncGetAttribute(ctypes.byref(mt), cu.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, self.fn), "cuFuncGetAttribute", name)
    self.max_threads = mt.value

  def __call__(self, *bufs: CUDABuffer, global_size: tuple[int, int, int] = (1, 1, 1), local_size: tuple[int, int, int] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    dev: CUDADevice = self.device
    nthr = local_size[0] * local_size[1] * local_size[2]
    if not 0 < nthr <= self.max_threads: raise ValueError(f"kernel {self.name}: a block of {local_size} threads; {dev.arch} runs 1..{self.max_threads} for it")
    if any(not 0 < g <= m for g, m in zip(global_size, dev.max_grid)): raise ValueError(f"kernel {self.name}: grid {global_size} outside 1..{dev.max_grid}")
    packed = ctypes.create_string_buffer(pack_args(self.params, [b.ptr for b in bufs], vals))
    size = ctypes.c_size_t(len(packed.raw))
    extra = (ctypes.c_void_p * 5)(cu.CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT, ctypes.addressof(packed),
                                  cu.CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT, ctypes.addressof(size), cu.CU_LAUNCH_PARAM_END_AS_INT)
    with dev.lock:  # the timing events are the device's
      dev._current()
      if wait: check(cu.cuEventRecord(dev.ev_start, dev.stream), "cuEventRecord")
      check(cu.cuLaunchKernel(self.fn, *global_size, *local_size, 0, dev.stream, None, extra), "cuLaunchKernel",
            f"{self.name} over {tuple(global_size)} blocks of {tuple(local_size)}")
      if not wait: return None
      check(cu.cuEventRecord(dev.ev_end, dev.stream), "cuEventRecord")
      poll(cu.cuEventQuery, dev.ev_end, f"kernel {self.name}")
      ms = ctypes.c_float(0)
      check(cu.cuEventElapsedTime(ctypes.byref(ms), dev.ev_start, dev.ev_end), "cuEventElapsedTime")
      return ms.value * 1e-3

  def __del__(self) -> None:
    try:
      if not self.device.closed and getattr(self, "module", None):
        self.device.synchronize()
        cu.cuModuleUnload(self.module)
    except Exception: pass

# ---------------------------------------------------------------- device
def _attr(dev: int, attr: int) -> int:
  v = ctypes.c_int32(0)
  check(cu.cuDeviceGetAttribute(ctypes.byref(v), attr, dev), "cuDeviceGetAttribute", f"attribute {attr}")
  return v.value

class CUDADevice(Compiled):
  has_local = True

  def __init__(self, device: str) -> None:
    self.closed, self.device = False, device
    try: st = cu.cuInit(0)
    except LibraryMissing as e: raise DeviceUnavailable(str(e)) from None
    if st != cu.CUDA_SUCCESS: raise DeviceUnavailable(f"cuInit failed with {error_text(st)}")
    n = ctypes.c_int32(0)
    check(cu.cuDeviceGetCount(ctypes.byref(n)), "cuDeviceGetCount")
    idx = int(device.split(":")[-1]) if device.split(":")[-1].isdigit() else 0
    if idx >= n.value: raise DeviceUnavailable(f"{device}: libcuda sees {n.value} GPU(s)")
    self.dev = cu.CUdevice(0)
    check(cu.cuDeviceGet(ctypes.byref(self.dev), idx), "cuDeviceGet")
    nm = ctypes.create_string_buffer(256)
    check(cu.cuDeviceGetName(nm, 256, self.dev), "cuDeviceGetName")
    self.gpu_name = nm.value.decode(errors="replace")
    major, minor = _attr(self.dev, cu.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), _attr(self.dev, cu.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
    self.arch = f"sm_{major}{minor}"
    if major < 8: raise DeviceUnavailable(f"{device}: {self.gpu_name} is {self.arch}; the PTX renderer needs sm_80 or newer")
    from baregrad.codegen.renderer.ptx import PTXRenderer
    from baregrad.drivers.nv_compile import PTXCompiler
    try: compiler = PTXCompiler(self.arch)
    except CompileError as e: raise DeviceUnavailable(f"{device}: our cubins are made by ptxas: {e}") from None
    self.max_local_size = tuple(_attr(self.dev, a) for a in (cu.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, cu.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
                                                             cu.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z))  # type: ignore[assignment]
    self.max_grid = tuple(_attr(self.dev, a) for a in (cu.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, cu.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
                                                       cu.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z))
    self.max_shared_mem = _attr(self.dev, cu.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)
    self.ctx, self.lock = cu.CUcontext(), threading.Lock()
    check(cu.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), self.dev), "cuDevicePrimaryCtxRetain")
    self._current()
    self.stream, self.ev_start, self.ev_end = cu.CUstream(), cu.CUevent(), cu.CUevent()
    check(cu.cuStreamCreate(ctypes.byref(self.stream), cu.CU_STREAM_NON_BLOCKING), "cuStreamCreate")
    for ev in (self.ev_start, self.ev_end): check(cu.cuEventCreate(ctypes.byref(ev), cu.CU_EVENT_DEFAULT), "cuEventCreate")
    super().__init__(device, CUDAAllocator(self), PTXRenderer(self.arch), compiler, CUDAProgram)

  def _current(self) -> None:
    # a context is current per host thread; buffers may be freed from another thread (the garbage collector's)
    if self.closed: raise RuntimeError(f"{self.device} is closed")
    check(cu.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

  def synchronize(self, timeout_ms: int | None = None) -> None:
    if self.closed: return
    self._current()
    poll(cu.cuStreamQuery, self.stream, f"{self.device} synchronize", None if timeout_ms is None else timeout_ms / 1000)

  def close(self) -> None:
    if self.closed: return
    try: self.synchronize()
    finally:
      self.allocator.free_cache()
      self._current()
      for ev in (self.ev_start, self.ev_end): cu.cuEventDestroy(ev)
      cu.cuStreamDestroy(self.stream)
      cu.cuDevicePrimaryCtxRelease(self.dev)
      self.closed = True
      super().close()

  def __repr__(self) -> str: return f"<CUDADevice {self.device}: {self.gpu_name}, {self.arch}>"
