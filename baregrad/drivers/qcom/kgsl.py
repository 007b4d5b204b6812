"""The KGSL kernel interface (/dev/kgsl-3d0) for compute: device info, contexts, GPU objects, submission, waits.

The layer QCOMDevice (device.py) sits on: allocations, IB submission, timestamp waits.
"""
from __future__ import annotations

import ctypes
import errno
import os
from dataclasses import dataclass
from typing import Any

from baregrad.ctypes_autogen import kgsl
from baregrad.drivers.port import IoctlError, driver_port
from baregrad.drivers.qcom.chips import AdrenoChip, lookup
from baregrad.drivers.vmem import MAP_SHARED, PROT_RW

DEVICE_PATH = "/dev/kgsl-3d0"
# compute contexts: a preamble, no GMEM (no binning/tiles), the CL context type (KGSL uapi msm_kgsl.h flags)
COMPUTE_CTX_FLAGS = (kgsl.KGSL_CONTEXT_PREAMBLE | kgsl.KGSL_CONTEXT_NO_GMEM_ALLOC
                     | kgsl.KGSL_CONTEXT_TYPE_CL << kgsl.KGSL_CONTEXT_TYPE_SHIFT)


class GPUFault(RuntimeError):
  """KGSL reported the context faulted or hung (-EPROTO): names the context and the timestamp that did not retire."""


@dataclass
class GpuObject:
  """A KGSL GPU object: its id, GPU address, size, and the CPU mapping of it."""
  id: int
  gpuaddr: int
  size: int
  cpu: int

  def view(self) -> Any:
    return (ctypes.c_char * self.size).from_address(self.cpu)


class KGSL:
  """An open /dev/kgsl-3d0 and the chip behind it (unknown chips refused by name)."""

  def __init__(self, port: Any | None = None) -> None:
    self.port = port if port is not None else driver_port("QCOM")
    self.fd = self.port.open(DEVICE_PATH, os.O_RDWR | os.O_CLOEXEC)
    info = kgsl.struct_kgsl_devinfo()
    prop = kgsl.struct_kgsl_device_getproperty(type=kgsl.KGSL_PROP_DEVICE_INFO, value=ctypes.addressof(info),
                                               sizebytes=ctypes.sizeof(info))
    self.port.ioctl(self.fd, kgsl.IOCTL_KGSL_DEVICE_GETPROPERTY, prop)
    self.chip: AdrenoChip = lookup(info.chip_id)
    self.chip_id = info.chip_id

  def create_context(self, flags: int = COMPUTE_CTX_FLAGS) -> int:
    """A new draw context id (per-context timestamps start at 0)."""
    a = kgsl.struct_kgsl_drawctxt_create(flags=flags)
    self.port.ioctl(self.fd, kgsl.IOCTL_KGSL_DRAWCTXT_CREATE, a)
    return int(a.drawctxt_id)

  def alloc(self, size: int, flags: int = 0) -> GpuObject:
    """A GPU object of at least `size` bytes, mapped into this process by its id."""
    a = kgsl.struct_kgsl_gpuobj_alloc(size=size, flags=flags)
    self.port.ioctl(self.fd, kgsl.IOCTL_KGSL_GPUOBJ_ALLOC, a)
    info = kgsl.struct_kgsl_gpuobj_info(id=a.id)
    self.port.ioctl(self.fd, kgsl.IOCTL_KGSL_GPUOBJ_INFO, info)
    cpu = self.port.mmap(0, int(a.mmapsize), PROT_RW, MAP_SHARED, self.fd, int(a.id) * 0x1000)
    return GpuObject(int(a.id), int(info.gpuaddr), int(a.mmapsize), cpu)

  def free(self, obj: GpuObject) -> None:
    self.port.munmap(obj.cpu, obj.size)
    self.port.ioctl(self.fd, kgsl.IOCTL_KGSL_GPUOBJ_FREE, kgsl.struct_kgsl_gpuobj_free(id=obj.id))

  def submit(self, ctx: int, ibs: list[tuple[int, int]]) -> int:
    """Queue the IBs [(gpuaddr, ndwords)] on context `ctx`; returns the timestamp that retires with them."""
    objs = (kgsl.struct_kgsl_command_object * len(ibs))(
      *(kgsl.struct_kgsl_command_object(gpuaddr=a, size=n * 4, flags=kgsl.KGSL_CMDLIST_IB) for a, n in ibs))
    c = kgsl.struct_kgsl_gpu_command(cmdlist=ctypes.addressof(objs), cmdsize=ctypes.sizeof(kgsl.struct_kgsl_command_object),
                                     numcmds=len(ibs), context_id=ctx)
    try: self.port.ioctl(self.fd, kgsl.IOCTL_KGSL_GPU_COMMAND, c)
    except IoctlError as e:
      if e.errno == errno.EPROTO: raise GPUFault(f"KGSL context {ctx} has faulted (GPU_COMMAND -EPROTO); create a new context") from e
      raise
    return int(c.timestamp)

  def wait(self, ctx: int, timestamp: int, timeout_ms: int = 10_000) -> None:
    """Block until `timestamp` on `ctx` retires; TimeoutError or GPUFault naming both otherwise."""
    a = kgsl.struct_kgsl_device_waittimestamp_ctxtid(context_id=ctx, timestamp=timestamp, timeout=timeout_ms)
    try: self.port.ioctl(self.fd, kgsl.IOCTL_KGSL_DEVICE_WAITTIMESTAMP_CTXTID, a)
    except IoctlError as e:
      if e.errno == errno.ETIMEDOUT:
        raise TimeoutError(f"KGSL context {ctx}: timestamp {timestamp} did not retire within {timeout_ms} ms") from e
      if e.errno == errno.EPROTO:
        raise GPUFault(f"KGSL context {ctx} faulted (hang or page fault) before timestamp {timestamp} retired") from e
      raise

  def close(self) -> None:
    self.port.close(self.fd)
