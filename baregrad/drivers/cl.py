"""OpenCL fallback device (DEV=CL, CL:n for the n-th device over all platforms) through the system's libOpenCL
(an ICD loader) and the generated bindings (ctypes_autogen/opencl.py). Kernels are OpenCL C from
codegen/renderer/opencl.py; the compiler builds them for the device and keeps the device binary in the compile cache.
Each CL:n is its own context and queue; with CL_SHARE_DEVICE=1 a CL:n past the listed devices is another context on
device n mod their number (two handles of one PoCL device: multi-device tensors where OpenCL lists one device). Copies
between CL devices go through the host (a buffer belongs to one context).

One in-order command queue with profiling: commands run in the order they were enqueued, so a buffer freed into the
allocator's cache and handed out again is only written after every kernel queued before has read it. Every wait polls
the last command's event with a timeout (CL_TIMEOUT_MS, default 30000): clFinish and clWaitForEvents cannot time out.
Kernel ABI: the present DEFINE_GLOBALs as `__global T*` in buffer order, then each variable as a `long`."""
from __future__ import annotations
import ctypes, threading, time
from baregrad import knobs
from dataclasses import dataclass
from typing import Any, Hashable
from baregrad.ir.dtype import ALL, dtypes
from baregrad.hal import Compiled, LRUAllocator, Compiler, Program, CompileError, DeviceUnavailable, OutOfMemory
from baregrad.ctypes_autogen import opencl as cl
from baregrad.ctypes_autogen._support import LibraryMissing

# cl_khr_icd (Khronos CL/cl_ext.h, not in cl.h): the ICD loader's answer when no vendor driver is installed
CL_PLATFORM_NOT_FOUND_KHR = -1001

def _error_names() -> dict[int, str]:
  # the error codes come first in cl.h; later constants reuse small negative values (CL_BUILD_ERROR = -2)
  out: dict[int, str] = {CL_PLATFORM_NOT_FOUND_KHR: "CL_PLATFORM_NOT_FOUND_KHR"}
  for k, v in vars(cl).items():
    if k.startswith("CL_") and isinstance(v, int) and v <= 0 and v not in out: out[v] = k
  return out
ERROR_NAMES = _error_names()

class CLError(RuntimeError):
  """An OpenCL call failed: names the call, the error code's name and what was being done."""
  def __init__(self, call: str, status: int, what: str = "") -> None:
    self.call, self.status = call, status
    super().__init__(f"{call} failed with {ERROR_NAMES.get(status, 'unknown error')} ({status})" + (f": {what}" if what else ""))

def check(status: int, call: str, what: str = "") -> None:
  if status != cl.CL_SUCCESS: raise CLError(call, status, what)

def checked(fn: Any, *args: Any, what: str = "") -> Any:
  """Call a cl* creator whose last parameter is `cl_int *errcode_ret`; raise on failure."""
  err = cl.cl_int(0)
  ret = fn(*args, ctypes.byref(err))
  check(err.value, fn.name, what)
  return ret

# ---------------------------------------------------------------- queries
def _info(fn: Any, obj: Any, param: int) -> bytes:
  size = cl.size_t(0)
  check(fn(obj, param, 0, None, ctypes.byref(size)), fn.name, f"size of info {param:#x}")
  buf = ctypes.create_string_buffer(size.value)
  check(fn(obj, param, size.value, buf, None), fn.name, f"info {param:#x}")
  return buf.raw

def info_str(fn: Any, obj: Any, param: int) -> str: return _info(fn, obj, param).rstrip(b"\0").decode(errors="replace").strip()
def info_int(fn: Any, obj: Any, param: int) -> int: return int.from_bytes(_info(fn, obj, param), "little")
def info_sizes(fn: Any, obj: Any, param: int) -> tuple[int, ...]:
  raw = _info(fn, obj, param)
  n = ctypes.sizeof(cl.size_t)
  return tuple(int.from_bytes(raw[i:i + n], "little") for i in range(0, len(raw), n))

def list_devices() -> list[tuple[Any, Any]]:
  """(platform, device) for every device of every platform, in the loader's order. Raises DeviceUnavailable when
  there is no libOpenCL or no platform."""
  try:
    n = cl.cl_uint(0)
    st = cl.clGetPlatformIDs(0, None, ctypes.byref(n))
  except LibraryMissing as e: raise DeviceUnavailable(str(e)) from None
  if st == CL_PLATFORM_NOT_FOUND_KHR or (st == cl.CL_SUCCESS and n.value == 0):
    raise DeviceUnavailable("libOpenCL found no OpenCL platform (no driver registered under /etc/OpenCL/vendors): "
                            "install one, e.g. apt-get install pocl-opencl-icd")
  check(st, "clGetPlatformIDs")
  plats = (cl.cl_platform_id * n.value)()
  check(cl.clGetPlatformIDs(n.value, plats, None), "clGetPlatformIDs")
  out = []
  for p in plats:
    nd = cl.cl_uint(0)
    st = cl.clGetDeviceIDs(p, cl.CL_DEVICE_TYPE_ALL, 0, None, ctypes.byref(nd))
    if st == cl.CL_DEVICE_NOT_FOUND or nd.value == 0: continue
    check(st, "clGetDeviceIDs")
    devs = (cl.cl_device_id * nd.value)()
    check(cl.clGetDeviceIDs(p, cl.CL_DEVICE_TYPE_ALL, nd.value, devs, None), "clGetDeviceIDs")
    out += [(p, d) for d in devs]
  if not out: raise DeviceUnavailable("the OpenCL platforms here have no devices")
  return out

@dataclass(frozen=True)
class CLCaps:
  """What an OpenCL device supports; the renderer and the device limits are built from it."""
  name: str
  version: str
  driver: str
  extensions: frozenset[str]
  max_work_group: int
  max_work_items: tuple[int, ...]
  local_mem: int
  max_alloc: int
  global_mem: int
  base_align: int          # bytes: sub-buffer origins must be multiples of it
  fp64: bool               # cl_khr_fp64 (or a double FP config in OpenCL 1.2+)
  correct_div_sqrt: bool   # -cl-fp32-correctly-rounded-divide-sqrt is allowed
  image: bool

def query_caps(dev: Any) -> CLCaps:
  gi = lambda p: info_int(cl.clGetDeviceInfo, dev, p)  # noqa: E731
  ext = frozenset(info_str(cl.clGetDeviceInfo, dev, cl.CL_DEVICE_EXTENSIONS).split())
  return CLCaps(name=info_str(cl.clGetDeviceInfo, dev, cl.CL_DEVICE_NAME), version=info_str(cl.clGetDeviceInfo, dev, cl.CL_DEVICE_VERSION),
                driver=info_str(cl.clGetDeviceInfo, dev, cl.CL_DRIVER_VERSION), extensions=ext,
                max_work_group=gi(cl.CL_DEVICE_MAX_WORK_GROUP_SIZE), max_work_items=info_sizes(cl.clGetDeviceInfo, dev, cl.CL_DEVICE_MAX_WORK_ITEM_SIZES),
                local_mem=gi(cl.CL_DEVICE_LOCAL_MEM_SIZE), max_alloc=gi(cl.CL_DEVICE_MAX_MEM_ALLOC_SIZE),
                global_mem=gi(cl.CL_DEVICE_GLOBAL_MEM_SIZE), base_align=gi(cl.CL_DEVICE_MEM_BASE_ADDR_ALIGN) // 8,
                fp64="cl_khr_fp64" in ext or gi(cl.CL_DEVICE_DOUBLE_FP_CONFIG) != 0,
                correct_div_sqrt=bool(gi(cl.CL_DEVICE_SINGLE_FP_CONFIG) & cl.CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT),
                image=gi(cl.CL_DEVICE_IMAGE_SUPPORT) != 0)

# ---------------------------------------------------------------- events: every wait has a timeout
def timeout_s() -> float: return knobs.read("CL_TIMEOUT_MS") / 1000

def event_status(ev: Any) -> int:
  st = cl.cl_int(0)
  check(cl.clGetEventInfo(ev, cl.CL_EVENT_COMMAND_EXECUTION_STATUS, ctypes.sizeof(st), ctypes.byref(st), None), "clGetEventInfo")
  return st.value

def wait_event(queue: Any, ev: Any, what: str, timeout: float | None = None) -> None:
  """Wait until ev completes; raise CLError if its command failed, TimeoutError after `timeout` seconds."""
  check(cl.clFlush(queue), "clFlush", what)  # a command may sit in the queue until flushed: polling alone never submits it
  deadline = time.monotonic() + (timeout_s() if timeout is None else timeout)
  spins, nap = 0, 1e-5
  while (st := event_status(ev)) > cl.CL_COMPLETE:
    if time.monotonic() > deadline:
      state = {cl.CL_RUNNING: "CL_RUNNING", cl.CL_SUBMITTED: "CL_SUBMITTED", cl.CL_QUEUED: "CL_QUEUED"}.get(st, str(st))
      raise TimeoutError(f"OpenCL: {what} did not finish within {timeout if timeout is not None else timeout_s():.1f} s "
                         f"(its command is {state}; set CL_TIMEOUT_MS to wait longer)")
    spins += 1
    if spins > 200: time.sleep(nap); nap = min(nap * 2, 1e-3)  # short kernels finish in microseconds: spin first
  if st < 0: raise CLError("command", st, f"{what} failed on the device")

def profile_s(ev: Any) -> float:
  t = [cl.cl_ulong(0), cl.cl_ulong(0)]
  for v, p in zip(t, (cl.CL_PROFILING_COMMAND_START, cl.CL_PROFILING_COMMAND_END)):
    check(cl.clGetEventProfilingInfo(ev, p, ctypes.sizeof(v), ctypes.byref(v), None), "clGetEventProfilingInfo")
  return (t[1].value - t[0].value) * 1e-9

# ---------------------------------------------------------------- memory
@dataclass
class CLBuffer:
  mem: Any          # cl_mem
  size: int
  parent: CLBuffer | None = None   # a sub-buffer keeps its parent alive

class CLAllocator(LRUAllocator):
  def __init__(self, dev: CLDevice) -> None:
    super().__init__(dev.device)
    self.dev = dev
  def _alloc(self, size: int, options: Hashable | None) -> CLBuffer:
    caps = self.dev.caps
    if size > caps.max_alloc:
      raise OutOfMemory(self.device, size, self.mem_used, f"{caps.name} allocates at most {caps.max_alloc} bytes in one buffer (CL_DEVICE_MAX_MEM_ALLOC_SIZE)")
    err = cl.cl_int(0)
    mem = cl.clCreateBuffer(self.dev.ctx, cl.CL_MEM_READ_WRITE, max(size, 1), None, ctypes.byref(err))  # 0 bytes is CL_INVALID_BUFFER_SIZE
    if err.value in (cl.CL_MEM_OBJECT_ALLOCATION_FAILURE, cl.CL_OUT_OF_RESOURCES, cl.CL_OUT_OF_HOST_MEMORY):
      raise OutOfMemory(self.device, size, self.mem_used, f"clCreateBuffer: {ERROR_NAMES[err.value]} ({self.dev.caps.global_mem} bytes of device memory)")
    check(err.value, "clCreateBuffer", f"{size} bytes")
    return CLBuffer(mem, size)
  def _free(self, opaque: CLBuffer, size: int, options: Hashable | None) -> None:
    # the runtime deletes the memory only once the commands queued on it have finished (clReleaseMemObject)
    if not self.dev.closed: check(cl.clReleaseMemObject(opaque.mem), "clReleaseMemObject")
  def _copyin(self, dest: CLBuffer, src: memoryview) -> None:
    host = (ctypes.c_char * len(src)).from_buffer_copy(src) if src.readonly else (ctypes.c_char * len(src)).from_buffer(src)
    self.dev._enqueue_wait(cl.clEnqueueWriteBuffer, dest.mem, cl.CL_FALSE, 0, len(src), host, what=f"copy of {len(src)} bytes to the device")
  def _copyout(self, dest: memoryview, src: CLBuffer) -> None:
    host = (ctypes.c_char * len(dest)).from_buffer(dest)
    self.dev._enqueue_wait(cl.clEnqueueReadBuffer, src.mem, cl.CL_FALSE, 0, len(dest), host, what=f"copy of {len(dest)} bytes from the device")
  def _offset(self, opaque: CLBuffer, offset: int, size: int) -> CLBuffer:
    align = self.dev.caps.base_align
    if offset % align:
      raise ValueError(f"{self.device}: a view at byte offset {offset} is not possible: OpenCL sub-buffers must start at a "
                       f"multiple of CL_DEVICE_MEM_BASE_ADDR_ALIGN ({align} bytes on {self.dev.caps.name})")
    region = cl.cl_buffer_region(origin=offset, size=max(size, 1))
    mem = checked(cl.clCreateSubBuffer, opaque.mem, cl.CL_MEM_READ_WRITE, cl.CL_BUFFER_CREATE_TYPE_REGION, ctypes.byref(region),
                  what=f"view of {size} bytes at offset {offset}")
    return CLBuffer(mem, size, opaque)

# ---------------------------------------------------------------- compiler and programs
class CLCompiler(Compiler):
  """OpenCL C -> the device's program binary (CL_PROGRAM_BINARIES), cached on disk per device and driver version.
  Build options: IEEE division and sqrt where the device offers them; no fast math (OpenCL's default);
  contraction is turned off by the renderer's FP_CONTRACT pragma."""
  def __init__(self, dev: CLDevice) -> None:
    self.dev = dev
    self.options = "-cl-fp32-correctly-rounded-divide-sqrt" if dev.caps.correct_div_sqrt else ""
    super().__init__(f"cl_{dev.caps.name}_{self.options}")
  def version(self) -> str: return f"{self.dev.platform_version} | {self.dev.caps.version} | driver {self.dev.caps.driver}"
  def compile(self, src: str) -> bytes:
    data = src.encode()
    s, n = ctypes.c_char_p(data), cl.size_t(len(data))
    prg = checked(cl.clCreateProgramWithSource, self.dev.ctx, 1, ctypes.byref(s), ctypes.byref(n), what="program from source")
    try:
      self.dev._build(prg, self.options, src)
      (size,) = info_sizes(cl.clGetProgramInfo, prg, cl.CL_PROGRAM_BINARY_SIZES)
      binary = ctypes.create_string_buffer(size)
      ptrs = (ctypes.c_char_p * 1)(ctypes.cast(binary, ctypes.c_char_p))
      check(cl.clGetProgramInfo(prg, cl.CL_PROGRAM_BINARIES, ctypes.sizeof(ptrs), ptrs, None), "clGetProgramInfo", "CL_PROGRAM_BINARIES")
      return binary.raw
    finally: cl.clReleaseProgram(prg)

class CLProgram(Program):
  """A device binary loaded as a program; calling it sets the arguments (buffers, then each variable as a `long`)
  and enqueues it over global_size work-groups of local_size work-items."""
  def __init__(self, dev: CLDevice, name: str, lib: bytes) -> None:
    super().__init__(dev, name, lib)
    n, status = cl.size_t(len(lib)), cl.cl_int(0)
    ptr = ctypes.cast(ctypes.c_char_p(lib), ctypes.POINTER(ctypes.c_uint8))
    self.prg = checked(cl.clCreateProgramWithBinary, dev.ctx, 1, ctypes.byref(dev.device_id), ctypes.byref(n), ctypes.byref(ptr),
                       ctypes.byref(status), what=f"program {name} from its {len(lib)}-byte binary")
    check(status.value, "clCreateProgramWithBinary", f"the binary of {name} does not load on {dev.caps.name}")
    self.kernel = None
    dev._build(self.prg, "", f"(binary of {name})")
    self.kernel = checked(cl.clCreateKernel, self.prg, name.encode(), what=f"kernel {name}")
    wg = cl.size_t(0)
    check(cl.clGetKernelWorkGroupInfo(self.kernel, dev.device_id, cl.CL_KERNEL_WORK_GROUP_SIZE, ctypes.sizeof(wg), ctypes.byref(wg), None),
          "clGetKernelWorkGroupInfo")
    self.max_work_group = wg.value

  def __call__(self, *bufs: CLBuffer, global_size: tuple[int, int, int] = (1, 1, 1), local_size: tuple[int, int, int] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    dev: CLDevice = self.device
    nloc = local_size[0] * local_size[1] * local_size[2]
    if nloc > self.max_work_group:
      raise ValueError(f"kernel {self.name}: a work-group of {local_size} ({nloc} work-items) exceeds what {dev.caps.name} runs "
                       f"for this kernel (CL_KERNEL_WORK_GROUP_SIZE {self.max_work_group})")
    gws = (cl.size_t * 3)(*(g * l for g, l in zip(global_size, local_size)))
    lws = (cl.size_t * 3)(*local_size)
    with dev.lock:  # arguments are kernel state (clSetKernelArg is not thread-safe per kernel); the event is the device's
      for i, b in enumerate(bufs):
        check(cl.clSetKernelArg(self.kernel, i, ctypes.sizeof(cl.cl_mem), ctypes.byref(b.mem)), "clSetKernelArg", f"{self.name} buffer {i}")
      for j, v in enumerate(vals):
        check(cl.clSetKernelArg(self.kernel, len(bufs) + j, 8, ctypes.byref(ctypes.c_int64(v))), "clSetKernelArg", f"{self.name} variable {j}")
      ev = dev._enqueue(cl.clEnqueueNDRangeKernel, self.kernel, 3, None, gws, lws, what=f"kernel {self.name}")
      if not wait: return None
      wait_event(dev.queue, ev, f"kernel {self.name} over {tuple(global_size)} work-groups of {tuple(local_size)}")
      return profile_s(ev)

  def __del__(self) -> None:
    try:
      if self.device.closed: return
      if getattr(self, "kernel", None): cl.clReleaseKernel(self.kernel)
      if getattr(self, "prg", None): cl.clReleaseProgram(self.prg)
    except Exception: pass  # at interpreter exit the library may be gone

# ---------------------------------------------------------------- device
class CLDevice(Compiled):
  has_local = True

  def __init__(self, device: str) -> None:
    self.closed, self.device = False, device
    idx = int(device.split(":")[-1]) if device.split(":")[-1].isdigit() else 0
    devs = list_devices()
    # OpenCL lets one device be in several contexts (clCreateContext takes any listed device): with CL_SHARE_DEVICE each
    # handle past the list is its own context and queue on one of them
    if idx >= len(devs) and knobs.get("CL_SHARE_DEVICE"): idx %= len(devs)
    if idx >= len(devs):
      raise DeviceUnavailable(f"{device}: there are {len(devs)} OpenCL device(s) here: " +
                              ", ".join(f"CL:{i} {info_str(cl.clGetDeviceInfo, d, cl.CL_DEVICE_NAME)}" for i, (_, d) in enumerate(devs)))
    self.platform, self.device_id = devs[idx]
    self.platform_version = info_str(cl.clGetPlatformInfo, self.platform, cl.CL_PLATFORM_VERSION)
    self.caps = caps = query_caps(self.device_id)
    self.supported_dtypes = ALL if caps.fp64 else tuple(d for d in ALL if d != dtypes.float64)
    self.max_local_size = tuple((caps.max_work_items + (1, 1, 1))[:3])  # type: ignore[assignment]
    self.max_shared_mem, self.has_image = caps.local_mem, caps.image
    self.ctx = checked(cl.clCreateContext, None, 1, ctypes.byref(self.device_id), None, None, what=f"context on {caps.name}")
    self.queue = self._make_queue()
    self._last: Any = None  # the event of the newest command (the queue is in order: its completion means all are done)
    self.lock = threading.RLock()  # one thread at a time enqueues and waits: _last is released when replaced
    from baregrad.codegen.renderer.opencl import OpenCLRenderer
    renderer = OpenCLRenderer(fp64=caps.fp64, local_max=caps.max_work_group)
    super().__init__(device, CLAllocator(self), renderer, CLCompiler(self), CLProgram)

  def _make_queue(self) -> Any:
    try:
      props = (cl.cl_queue_properties * 3)(cl.CL_QUEUE_PROPERTIES, cl.CL_QUEUE_PROFILING_ENABLE, 0)
      return checked(cl.clCreateCommandQueueWithProperties, self.ctx, self.device_id, props, what="command queue")
    except (LibraryMissing, CLError):  # an OpenCL 1.x loader or driver
      return checked(cl.clCreateCommandQueue, self.ctx, self.device_id, cl.CL_QUEUE_PROFILING_ENABLE, what="command queue")

  def _build(self, prg: Any, options: str, src: str) -> None:
    st = cl.clBuildProgram(prg, 1, ctypes.byref(self.device_id), options.encode(), None, None)
    if st == cl.CL_SUCCESS: return
    try: log = self._build_log(prg)
    except CLError as e: log = f"(no build log: {e})"
    raise CompileError(src, f"clBuildProgram for {self.caps.name} failed with {ERROR_NAMES.get(st, st)} ({st}):\n{log}")

  def _build_log(self, prg: Any) -> str:
    size = cl.size_t(0)
    check(cl.clGetProgramBuildInfo(prg, self.device_id, cl.CL_PROGRAM_BUILD_LOG, 0, None, ctypes.byref(size)), "clGetProgramBuildInfo")
    buf = ctypes.create_string_buffer(size.value)
    check(cl.clGetProgramBuildInfo(prg, self.device_id, cl.CL_PROGRAM_BUILD_LOG, size.value, buf, None), "clGetProgramBuildInfo")
    return buf.value.decode(errors="replace").strip()

  def _enqueue(self, fn: Any, *args: Any, what: str) -> Any:
    """Enqueue one command; returns its event (kept as the newest until the next command)."""
    if self.closed: raise RuntimeError(f"{self.device} is closed")
    ev = cl.cl_event()
    check(fn(self.queue, *args, 0, None, ctypes.byref(ev)), fn.name, what)
    if self._last is not None: cl.clReleaseEvent(self._last)
    self._last = ev
    return ev

  def _enqueue_wait(self, fn: Any, *args: Any, what: str) -> None:
    with self.lock: wait_event(self.queue, self._enqueue(fn, *args, what=what), what)

  def synchronize(self, timeout_ms: int | None = None) -> None:
    with self.lock:
      if self._last is not None and not self.closed:
        wait_event(self.queue, self._last, f"{self.device} synchronize", None if timeout_ms is None else timeout_ms / 1000)

  def close(self) -> None:
    if self.closed: return
    try: self.synchronize()
    finally:
      self.allocator.free_cache()
      if self._last is not None: cl.clReleaseEvent(self._last)
      self.closed, self._last = True, None
      cl.clReleaseCommandQueue(self.queue)
      cl.clReleaseContext(self.ctx)
      super().close()

  def __repr__(self) -> str: return f"<CLDevice {self.device}: {self.caps.name}, {self.caps.version}>"
