"""QCOMDevice: Qualcomm Adreno (a6xx, a7xx) through KGSL as an HCQ device.

Memory: KGSL GPU objects (GPUOBJ_ALLOC, mapped into the process by id), so the host reads and writes device memory
directly; copies in and out are memmoves after the device is idle for that memory (no copy queue). One compute queue:
its commands are PM4 (drivers/qcom/pm4.py) written into an IB ring and submitted with GPU_COMMAND on the device's
KGSL context; KGSL appends the end-of-pipe timestamp of the context. Signals are 64-bit HCQ signals of which the CP
writes the low dword (CP_EVENT_WRITE CACHE_FLUSH_TS after all earlier work); waits are CP_WAIT_REG_MEM on it, so
signal values stay below 2^32 (the event writes used are 32-bit). Timestamps: CP_ALWAYS_ON_COUNTER (19.2 MHz). On a7xx
both are CP_EVENT_WRITE7 (a user 32-bit value; the always-on counter) and the registers are at their a7xx offsets.

Several QCOM devices (QCOM:0, QCOM:1, ...) are several handles of the one GPU behind /dev/kgsl-3d0 (a phone has one
Adreno): each opens the file itself, so each is its own KGSL file with its own context (kgsl.c: a context belongs to
the file that created it), and all share the process's GPU page table. Devices opened without a port share one port
(`shared_port`: with MOCKGPU=1 one mock KGSL, one GPU). Copies between them go through the host (no _import_host).

Host waits sleep in KGSL (WAITTIMESTAMP_CTXTID on the last submission) between looks at the signal, with the
device's timeout. A context KGSL reports faulted (-EPROTO: hang or page fault) raises QCOMFault naming the context,
the timestamp and the last kernel submitted; the device then creates a new context, so the next computation runs.
"""
from __future__ import annotations

import ctypes
import errno
import threading
import time
from typing import Any, Hashable, Sequence

from baregrad.hal import DeviceUnavailable, OutOfMemory
from baregrad.drivers.port import IoctlError
from baregrad.hcq.device import HCQAllocator, HCQBuffer, HCQDevice, HCQProgram
from baregrad.hcq.queue import HCQArgsState, HWQueue
from baregrad.drivers.qcom import pm4
from baregrad.drivers.qcom.chips import UnknownChip
from baregrad.drivers.qcom.dispatch import const_block, emit_dispatch, shader_bytes, texture_block, INSTR_UNIT
from baregrad.drivers.qcom.ir3_compile import IR3Compiler, Ir3Program
from baregrad.drivers.qcom.kgsl import KGSL, GPUFault, GpuObject

IB_RING = 4 << 20
ALWAYS_ON_MHZ = 19.2   # a6xx CP_ALWAYS_ON_COUNTER: the 19.2 MHz always-on clock (KGSL adreno_a6xx.c, a6xx_read_alwayson)


_SHARED: dict[tuple, Any] = {}
_SHARED_LOCK = threading.Lock()


def shared_port() -> Any:
  """The port every QCOMDevice opened without one uses: one per MOCKGPU setting, so with MOCKGPU=1 the devices of a
  process are files of one mock KGSL (one GPU), as they are files of the one /dev/kgsl-3d0 on a phone."""
  from baregrad import knobs
  from baregrad.drivers.port import driver_port
  key = (knobs.raw("MOCKGPU"),)
  with _SHARED_LOCK:
    if key not in _SHARED: _SHARED[key] = driver_port("QCOM")
    return _SHARED[key]


class QCOMFault(RuntimeError):
  """KGSL reported the device's context faulted (hang or page fault)."""


class QCOMArgsState(HCQArgsState):
  """The const block of one launch (dispatch.const_block: parameters at c0, ir3's immediates after), in args memory the
  CP loads with CP_LOAD_STATE6 (indirect): patching a buffer address or a variable rewrites its bytes in place. A program
  that reads images has their texture descriptors and samplers after it (64-byte aligned; dispatch.texture_block)."""
  def __init__(self, cpu_addr: int, va_addr: int, prg: QCOMProgram, bufs: Sequence[Any], vals: Sequence[int]) -> None:
    super().__init__(cpu_addr, va_addr, prg, bufs, vals)
    p = prg.ir3
    if len(self.bufs) + len(self.vals) != len(p.params):
      raise ValueError(f"{prg.name} takes {len(p.params)} parameters, got {len(self.bufs)} buffers and {len(self.vals)} values")
    words = const_block(p, b"")
    ctypes.memmove(cpu_addr, (ctypes.c_uint32 * len(words))(*words), 4 * len(words))
    self.tex_off = (-(va_addr + 4 * len(words)) % 64) + 4 * len(words)
    self._img_bytes = {pi: self.bufs[pi].size for pi, _, _ in p.images}
    if p.images:   # the samplers after the descriptors (the descriptors are written with their buffers' addresses)
      tw = texture_block(p, [(0, 0)] * len(p.params))
      ctypes.memmove(cpu_addr + self.tex_off, (ctypes.c_uint32 * len(tw))(*tw), 4 * len(tw))
    for i, b in enumerate(self.bufs): self._put(i, b.va_addr)
    for i, v in enumerate(self.vals): self._put(len(self.bufs) + i, v)

  @property
  def tex_va(self) -> int | None:
    """Where the texture descriptors are (None: the program reads no images)."""
    return self.va_addr + self.tex_off if self.prg.ir3.images else None

  def _put(self, i: int, v: int) -> None:
    if i in self._img_bytes:   # an image's address is in its descriptor (the same size of buffer on a replay)
      from baregrad.drivers.qcom.texture import tex_const
      for _, slot, fmt in (x for x in self.prg.ir3.images if x[0] == i):   # (its RGBA and its one-channel view)
        d = tex_const(v, self._img_bytes[i], fmt)
        ctypes.memmove(self.cpu_addr + self.tex_off + 64 * slot, (ctypes.c_uint32 * 16)(*d), 64)
    off, sz = self.prg.ir3.params[i]
    ctypes.memmove(self.cpu_addr + off, (v & ((1 << (8 * sz)) - 1)).to_bytes(sz, "little"), sz)


class QCOMProgram(HCQProgram):
  """An ir3 program (ir3_compile.Ir3Program bytes) with its code in a GPU object."""
  args_state_t = QCOMArgsState

  def __init__(self, device: QCOMDevice, name: str, lib: bytes) -> None:
    super().__init__(device, name, lib)
    self.ir3 = Ir3Program.unpack(lib)
    code = shader_bytes(self.ir3)
    self.code_obj = device.kgsl.alloc(len(code))
    ctypes.memmove(self.code_obj.cpu, code, len(code))
    if self.code_obj.gpuaddr % INSTR_UNIT: raise RuntimeError(f"KGSL gave code memory at {self.code_obj.gpuaddr:#x}, not {INSTR_UNIT}-byte aligned")

  def kernargs_size(self, nbufs: int, nvals: int) -> int:
    # the const block; with images, up to 63 bytes to align their descriptors, then the descriptors and samplers
    return 4 * len(const_block(self.ir3, b"")) + (64 + 80 * self.ir3.tex_count if self.ir3.images else 0)

  def __del__(self) -> None:
    try: self.dev.kgsl.free(self.code_obj)
    except Exception: pass


def _check32(what: str, value: int) -> None:
  # CP_WAIT_REG_MEM compares, and CACHE_FLUSH_TS writes, one 32-bit dword (adreno_pm4.xml)
  if not 0 <= value < 1 << 32: raise ValueError(f"{what} value {value}: the CP compares and writes 32-bit values (0 .. 2^32-1)")


class QCOMComputeQueue(HWQueue):
  """PM4 for the HCQ commands; submitted as one IB on the device's context. `gen`: the Adreno generation the stream is
  for (QCOM7ComputeQueue: a7xx)."""
  gen = 6
  def _enc_wait(self, addr: int, value: int) -> tuple[list[int], dict[str, tuple[int, int]]]:
    _check32("wait", value)
    w = pm4.CommandStream(self.gen).wait_reg_mem(addr, value, "WRITE_GE").words   # [hdr, cntl, addr lo, addr hi, ref, mask, delay]
    return w, {"addr": (2, 2), "value": (4, 1)}

  def _enc_signal(self, addr: int, value: int) -> tuple[list[int], dict[str, tuple[int, int]]]:
    _check32("signal", value)
    w = pm4.CommandStream(self.gen).event_write_ts(addr, value).words     # [hdr, event, addr lo, addr hi, value] (a7xx too)
    return w, {"addr": (2, 2), "value": (4, 1)}

  def _enc_timestamp(self, addr: int) -> tuple[list[int], dict[str, tuple[int, int]]]:
    w = pm4.CommandStream(self.gen).wait_for_idle().timestamp(addr).words  # [idle hdr, hdr, cntl|event, addr lo, addr hi]
    return w, {"addr": (3, 2)}

  def _enc_exec(self, prg: Any, args_state: HCQArgsState, gs: tuple[int, int, int], ls: tuple[int, int, int]) -> tuple[list[int], dict[str, tuple[int, int]]]:
    p: Ir3Program = prg.ir3
    if tuple(ls) != tuple(p.local_size):
      raise ValueError(f"{prg.name}: launched with local_size {tuple(ls)}, compiled for {p.local_size} (ir3 fixes the workgroup shape)")
    w = emit_dispatch(pm4.CommandStream(self.gen), p, prg.code_obj.gpuaddr, None, gs, consts_va=args_state.va_addr, tex_va=args_state.tex_va).words
    nd = next(i for i in range(len(w)) if w[i] >> 28 == 4 and (w[i] >> 8) & 0x7FFFF == pm4.REGS[self.gen]["HLSQ_CS_NDRANGE_0"])
    n = len(w)
    return w, {"gx": (n - 3, 1), "gy": (n - 2, 1), "gz": (n - 1, 1), "gsx": (nd + 2, 1), "gsy": (nd + 4, 1), "gsz": (nd + 6, 1)}

  def update_exec(self, i: int, global_size: Sequence[int] | None = None, local_size: Sequence[int] | None = None) -> HWQueue:
    if local_size is not None: raise ValueError("QCOM: a launch's local_size is fixed by its ir3 program")
    if global_size is not None:
      self._check(i, "exec")
      ls = self._refs[(i % len(self.cmds), "prg")].ir3.local_size
      g = tuple(int(x) for x in global_size) + (1,) * (3 - len(global_size))
      for n, v, l in zip("xyz", g, ls): self._put(i, "g" + n, v); self._put(i, "gs" + n, v * l)
    return self

  def _enc_copy(self, dest: int, src: int, nbytes: int) -> tuple[list[int], dict[str, tuple[int, int]]]:
    if (dest | src | nbytes) & 3: raise ValueError(f"QCOM queue copy {src:#x} -> {dest:#x} of {nbytes} bytes: CP_MEMCPY moves whole aligned dwords")
    w = pm4.CommandStream(self.gen).wait_for_idle().memcpy(dest, src, nbytes // 4).words   # [idle, hdr, n, src lo, hi, dst lo, hi]
    return w, {"src": (3, 2), "dest": (5, 2), "nbytes": (2, 1)}

  # a copy's nbytes is stored as CP_MEMCPY's dword count
  def _put(self, i: int, name: str, value: int) -> None:
    if name == "nbytes" and self.cmds[i].kind == "copy":
      if value <= 0 or value & 3: raise ValueError(f"nbytes={value}: CP_MEMCPY moves a positive number of whole dwords")
      value //= 4
    super()._put(i, name, value)

  def field(self, i: int, name: str) -> int:
    v = super().field(i, name)
    return 4 * v if name == "nbytes" and self.cmds[i].kind == "copy" else v

  def _enc_memory_barrier(self) -> tuple[list[int], dict[str, tuple[int, int]]]:
    return pm4.CommandStream(self.gen).wait_for_idle().words, {}

  def _submit(self, dev: Any) -> None: dev._submit_words(list(self.words), self._refs)


class QCOM7ComputeQueue(QCOMComputeQueue):
  """The compute queue of an a7xx: CP_EVENT_WRITE7 signals and timestamps, a7xx register offsets."""
  gen = 7


class QCOMAllocator(HCQAllocator):
  """KGSL GPU objects. Copies in of whole dwords are queued (staging buffer, CP_MEMCPY); others, and copies out, go
  through the objects' mappings after the device has finished with them."""
  def _alloc(self, size: int, options: Hashable | None) -> HCQBuffer:
    try: o = self.dev.kgsl.alloc(max(size, 1))
    except IoctlError as e:
      if e.err != errno.ENOMEM: raise
      raise OutOfMemory(self.dev.device, size, self.mem_used, "KGSL returned ENOMEM for GPUOBJ_ALLOC") from None
    return HCQBuffer(o.gpuaddr, size, o.cpu, meta=o)

  def _free(self, opaque: HCQBuffer, size: int, options: Hashable | None) -> None:
    self.dev.synchronize()
    self.dev.kgsl.free(opaque.meta)

  def _copyin(self, dest: HCQBuffer, src: memoryview) -> None:
    # whole dwords go through the staging buffers and a CP_MEMCPY queued behind the work already submitted (no wait,
    # as on NV and AMD: a copy per new tensor used to wait for the GPU to go idle)
    if not (dest.va_addr | src.nbytes) & 3: return super()._copyin(dest, src)
    self.dev.synchronize()   # other sizes: nothing in flight reads or writes dest while the host overwrites it
    assert dest.cpu_addr is not None
    ctypes.memmove(dest.cpu_addr, (ctypes.c_char * src.nbytes).from_buffer_copy(src), src.nbytes)

  def _copyout(self, dest: memoryview, src: HCQBuffer) -> None:
    self.dev.synchronize()
    assert src.cpu_addr is not None
    dest[:] = ctypes.string_at(src.cpu_addr, dest.nbytes)


class QCOMDevice(HCQDevice):
  """An Adreno GPU behind /dev/kgsl-3d0 (MOCKGPU=1: the mock Adreno)."""
  has_local = True
  max_local_size = (1024, 1024, 64)
  max_shared_mem = 32768
  ticks_per_us = ALWAYS_ON_MHZ

  def __init__(self, device: str, port: Any = None) -> None:
    if port is None:
      try: port = shared_port()
      except ValueError as e: raise DeviceUnavailable(f"{device}: mock GPU: {e}") from None
    try: self.kgsl = KGSL(port)
    except FileNotFoundError: raise DeviceUnavailable(f"{device}: /dev/kgsl-3d0 not found (no KGSL here); set MOCKGPU=1 for the mock Adreno") from None
    except UnknownChip as e: raise DeviceUnavailable(f"{device}: {e}") from None
    self.chip = self.kgsl.chip
    self.gpu_id, self.gen = self.chip.gpu_id, self.chip.gen
    self.ctx = self.kgsl.create_context()
    self.last_ts, self.last_kernel = 0, "(none)"
    self.ib = self.kgsl.alloc(IB_RING)
    self._ib_off, self._ib_busy_until = 0, 0
    try:
      from baregrad.codegen.renderer.nir import NIRRenderer
      renderer, compiler = NIRRenderer(self.gpu_id), IR3Compiler(self.gpu_id)
    except ImportError as e: raise DeviceUnavailable(f"{device}: {e}") from None
    self.supported_dtypes = renderer.supported_dtypes   # no float64 on Adreno (no double-precision ALU)
    queue = QCOMComputeQueue if self.gen == 6 else QCOM7ComputeQueue
    super().__init__(device, None, renderer, compiler, QCOMProgram, queue, None, kernargs_size=4 << 20, signal_pool_size=16 << 10)
    self.allocator = QCOMAllocator(self)

  def _alloc_shared(self, size: int) -> HCQBuffer:
    o: GpuObject = self.kgsl.alloc(size)
    return HCQBuffer(o.gpuaddr, size, o.cpu, meta=o)

  def _submit_words(self, words: list[int], refs: dict) -> None:
    n = len(words)
    if 4 * n > IB_RING: raise ValueError(f"a submission of {4 * n} bytes exceeds the IB ring of {IB_RING} bytes")
    if self._ib_off + 4 * n > IB_RING:   # wrap: everything submitted so far must have been read
      self._wait_ts(self.last_ts, self.default_timeout_ms)
      self._ib_off = 0
    va, cpu = self.ib.gpuaddr + self._ib_off, self.ib.cpu + self._ib_off
    ctypes.memmove(cpu, (ctypes.c_uint32 * n)(*words), 4 * n)
    self._ib_off += (4 * n + 63) & ~63
    names = [getattr(v, "name", None) for (_, role), v in refs.items() if role == "prg"]
    if names: self.last_kernel = names[-1]
    try: self.last_ts = self.kgsl.submit(self.ctx, [(va, n)])
    except GPUFault as e: self._fault(str(e))

  def _fault(self, why: str) -> None:
    msg = f"{self.device}: KGSL context {self.ctx} faulted (last timestamp {self.last_ts}, last kernel {self.last_kernel}): {why}"
    self.ctx = self.kgsl.create_context()   # recover: the next computation runs on a fresh context
    self.timeline_signal.value = self.timeline_value - 1   # nothing of the dead context will signal: release the timeline
    self._ib_off = 0
    raise QCOMFault(msg)

  def _wait_ts(self, ts: int, timeout_ms: int) -> None:
    try: self.kgsl.wait(self.ctx, ts, timeout_ms)
    except GPUFault as e: self._fault(str(e))

  def _wait_signal(self, sig: Any, value: int, timeout_s: float, final: bool = True) -> bool:
    deadline = time.perf_counter() + timeout_s
    while sig._v.value < value:
      left_ms = int((deadline - time.perf_counter()) * 1000)
      if left_ms <= 0: return False
      try: self._wait_ts(self.last_ts, min(left_ms, 50))
      except TimeoutError: pass
    return True

  def queue_state(self) -> str:
    return (f"{self.device} ({self.chip.name}): KGSL context {self.ctx}, last submitted timestamp {self.last_ts} "
            f"(last kernel {self.last_kernel}); timeline value {self.timeline_signal.value}, last submitted {self.timeline_value - 1}")
