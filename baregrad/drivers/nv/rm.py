"""RM and UVM calls of the NV driver: the escape ioctls on /dev/nvidiactl (NV_ESC_RM_ALLOC, _FREE, _CONTROL,
_MAP_MEMORY), UVM's ioctls on /dev/nvidia-uvm, and the errors they return (RMError: an ioctl the kernel accepted whose
RM status is not NV_OK). RMClient is the part of NVDevice that makes them; the device's object tree and what it asks
RM for are in device.py."""
from __future__ import annotations
import ctypes, errno
from typing import Any
from baregrad.drivers.port import (IoctlError, register_ioctl, describe, header_names, enum_words, register_field_words,
                                   register_pointer, register_array_count)
from baregrad.drivers.vmem import O_RDWR, O_CLOEXEC, PROT_RW, MAP_SHARED, MAP_FIXED
from baregrad.ctypes_autogen.nv import nv_580
from baregrad.drivers.nv import hw

class RMError(IoctlError):
  """An RM or UVM call that the kernel accepted but that returned an error status: names the call, the status and
  the parameters."""
  def __init__(self, name: str, status: int, params: str, detail: str = "") -> None:
    self.name, self.err, self.status, self.status_name = name, errno.EIO, status, hw.status_name(status)
    msg = f"{name} failed: {self.status_name} ({status:#x})" + (f": {detail}" if detail else "") + f"\n  parameters: {params}"
    OSError.__init__(self, errno.EIO, msg)
  def __str__(self) -> str: return self.args[1]

def ioctl_request(nr: int, t: type) -> int:
  """The request number of NV escape `nr` whose argument is a `t` (_IOWR('F', nr, sizeof t))."""
  from baregrad.ctypes_autogen import _support
  return _support.IOWR(nv_580.NV_IOCTL_MAGIC, nr, ctypes.sizeof(t))

class RMClient:
  """RM and UVM calls for NVDevice: it provides port, nv (the bindings of the driver's branch), fd_ctl, fd_uvm, root,
  nvdevice, dev_path and the _fds it closes."""
  port: Any
  nv: Any
  _fds: list[int]
  def _open(self, path: str) -> int:
    fd = self.port.open(path, O_RDWR | O_CLOEXEC)
    self._fds.append(fd)
    return fd

  def _esc(self, fd: int, nr: int, arg: Any, name: str) -> Any:
    self.port.ioctl(fd, self._req(nr, type(arg)), arg, name)
    return arg

  @staticmethod
  def _req(nr: int, t: type) -> int: return ioctl_request(nr, t)

  def _rm_call(self, nr: int, p: Any, name: str, wrapper: Any = None, detail: str = "") -> Any:
    self._esc(self.fd_ctl, nr, wrapper if wrapper is not None else p, name)
    if p.status != 0: raise RMError(name, p.status, describe(p), detail)
    return p

  def rm_alloc(self, parent: int, cls: int, params: Any = None, root: int | None = None, handle: int = 0) -> int:
    nv = self.nv
    if params is not None: ALLOC_PARAMS[cls] = type(params)
    p = nv.NVOS21_PARAMETERS(hRoot=self.root if root is None else root, hObjectParent=parent, hObjectNew=handle, hClass=cls,
                             pAllocParms=ctypes.addressof(params) if params is not None else 0,
                             paramsSize=ctypes.sizeof(params) if params is not None else 0)
    self._rm_call(nv.NV_ESC_RM_ALLOC, p, f"NV_ESC_RM_ALLOC({hw.class_name(cls)})",
                  detail=f"allocating a {hw.class_name(cls)} under {parent:#x}" + (f" with {describe(params)}" if params is not None else ""))
    return p.hObjectNew

  def rm_free(self, handle: int, parent: int = 0) -> None:
    nv = self.nv
    self._rm_call(nv.NV_ESC_RM_FREE, nv.NVOS00_PARAMETERS(hRoot=self.root, hObjectParent=parent, hObjectOld=handle), "NV_ESC_RM_FREE")

  def rm_control(self, obj: int, cmd: int, params: Any, name: str) -> Any:
    nv = self.nv
    CONTROL_PARAMS[cmd] = type(params)
    p = nv.NVOS54_PARAMETERS(hClient=self.root, hObject=obj, cmd=cmd, params=ctypes.addressof(params), paramsSize=ctypes.sizeof(params))
    self._rm_call(nv.NV_ESC_RM_CONTROL, p, f"NV_ESC_RM_CONTROL({name})", detail=f"control {cmd:#x} on {obj:#x}: {describe(params)}")
    return params

  def uvm(self, request: int, params: Any, name: str, fd: int | None = None) -> Any:
    self.port.ioctl(self.fd_uvm if fd is None else fd, request, params, name)
    if params.rmStatus != 0: raise RMError(name, params.rmStatus, describe(params))
    return params


  def _map_to_cpu(self, handle: int, size: int, target: int = 0, aperture: bool = False) -> int:
    """NV_ESC_RM_MAP_MEMORY naming a fresh fd, then mmap of that fd (at `target` when given). System memory goes through
    /dev/nvidiactl, a BAR aperture (`aperture`: the usermode page) through this GPU's /dev/nvidiaN: see the module doc
    (docs/hw/h100-580.159.04-findings.md#finding-1). A fresh fd each time: an fd holds one mapping context
    (nv-usermap.c: NV_ERR_STATE_IN_USE otherwise)."""
    nv = self.nv
    fd = self._open(self.dev_path if aperture else "/dev/nvidiactl")
    try:
      p = nv.NVOS33_PARAMETERS(hClient=self.root, hDevice=self.nvdevice, hMemory=handle, length=size)
      w = hw.nv_ioctl_nvos33_parameters_with_fd(params=p, fd=fd)
      self._rm_call(nv.NV_ESC_RM_MAP_MEMORY, w.params, "NV_ESC_RM_MAP_MEMORY", wrapper=w,
                    detail=f"mapping {size:#x} bytes of {handle:#x} through {'/dev/nvidiactl' if not aperture else self.dev_path}")
      return self.port.mmap(target, size, PROT_RW, MAP_SHARED | (MAP_FIXED if target else 0), fd, 0)
    finally:
      self.port.close(fd)
      self._fds.remove(fd)


# The parameter struct each RM class is allocated with and each control command takes, as the driver passes them
# (the headers pair them only in prose: cl*.h and ctrl*.h comments); traces follow pAllocParms and params into them.
ALLOC_PARAMS: dict[int, type] = {}
CONTROL_PARAMS: dict[int, type] = {}

def _sized(t: type | None, size: int) -> type | None:
  """`t` when a struct of that type is `size` bytes (what the call says it passed), else None: never read past it."""
  return t if t is not None and ctypes.sizeof(t) == size else None

_registered = False
def register_ioctls(nv: Any) -> None:
  """Name the RM and UVM ioctls of bindings `nv` for traces (IOCTL_TRACE=1) and errors; once per process. Traces then
  name classes and control commands, follow pAllocParms (by class) and control params (by command) into their
  structs, and show UVM_MAP_EXTERNAL_ALLOCATION's per-GPU attributes up to gpuAttributesCount."""
  global _registered
  if _registered: return
  _registered = True
  import re
  ctrl = {v & 0xFFFFFFFF: k for k, v in vars(nv).items() if type(v) is int and re.fullmatch(r"NV[0-9A-F]{4}_CTRL_CMD_\w+", k)
          and not k.endswith(("_PARAMS_MESSAGE_ID", "_CATEGORY", "_INTERFACE_ID"))}
  register_field_words(nv.NVOS21_PARAMETERS, "hClass", hw.class_name)
  register_pointer(nv.NVOS21_PARAMETERS, "pAllocParms", lambda o: _sized(ALLOC_PARAMS.get(o.hClass), o.paramsSize))
  register_field_words(nv.NVOS54_PARAMETERS, "cmd", enum_words(ctrl))
  register_pointer(nv.NVOS54_PARAMETERS, "params", lambda o: _sized(CONTROL_PARAMS.get(o.cmd), o.paramsSize))
  status = enum_words(header_names(nv, "NV_ERR_") | {0: "NV_OK"})
  for t in (nv.NVOS21_PARAMETERS, nv.NVOS54_PARAMETERS, nv.NVOS00_PARAMETERS, nv.NVOS33_PARAMETERS): register_field_words(t, "status", status)
  register_pointer(nv.NV2080_CTRL_GR_GET_INFO_PARAMS, "grInfoList", lambda o: nv.NV2080_CTRL_GR_INFO * o.grInfoListSize)
  register_array_count(nv.UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, "perGpuAttributes", "gpuAttributesCount")
  for nr, t, name in ((nv.NV_ESC_RM_ALLOC, nv.NVOS21_PARAMETERS, "NV_ESC_RM_ALLOC"), (nv.NV_ESC_RM_FREE, nv.NVOS00_PARAMETERS, "NV_ESC_RM_FREE"),
                      (nv.NV_ESC_RM_CONTROL, nv.NVOS54_PARAMETERS, "NV_ESC_RM_CONTROL"),
                      (nv.NV_ESC_RM_MAP_MEMORY, hw.nv_ioctl_nvos33_parameters_with_fd, "NV_ESC_RM_MAP_MEMORY"),
                      (nv.NV_ESC_RM_ALLOC_MEMORY, hw.nv_ioctl_nvos02_parameters_with_fd, "NV_ESC_RM_ALLOC_MEMORY"),
                      (nv.NV_ESC_CARD_INFO, nv.nv_ioctl_card_info_t * 32, "NV_ESC_CARD_INFO"),
                      (nv.NV_ESC_REGISTER_FD, nv.nv_ioctl_register_fd_t, "NV_ESC_REGISTER_FD"),
                      (nv.NV_ESC_CHECK_VERSION_STR, nv.nv_ioctl_rm_api_version_t, "NV_ESC_CHECK_VERSION_STR")):
    register_ioctl(ioctl_request(nr, t), name, t)
  for req, t, name in ((nv.UVM_INITIALIZE, nv.UVM_INITIALIZE_PARAMS, "UVM_INITIALIZE"),
                       (nv.UVM_MM_INITIALIZE, nv.UVM_MM_INITIALIZE_PARAMS, "UVM_MM_INITIALIZE"),
                       (nv.UVM_REGISTER_GPU, nv.UVM_REGISTER_GPU_PARAMS, "UVM_REGISTER_GPU"),
                       (nv.UVM_REGISTER_GPU_VASPACE, nv.UVM_REGISTER_GPU_VASPACE_PARAMS, "UVM_REGISTER_GPU_VASPACE"),
                       (nv.UVM_CREATE_EXTERNAL_RANGE, nv.UVM_CREATE_EXTERNAL_RANGE_PARAMS, "UVM_CREATE_EXTERNAL_RANGE"),
                       (nv.UVM_MAP_EXTERNAL_ALLOCATION, nv.UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, "UVM_MAP_EXTERNAL_ALLOCATION"),
                       (nv.UVM_FREE, nv.UVM_FREE_PARAMS, "UVM_FREE"),
                       (nv.UVM_REGISTER_CHANNEL, nv.UVM_REGISTER_CHANNEL_PARAMS, "UVM_REGISTER_CHANNEL"),
                       (nv.UVM_UNREGISTER_CHANNEL, nv.UVM_UNREGISTER_CHANNEL_PARAMS, "UVM_UNREGISTER_CHANNEL")):
    register_ioctl(req, name, t)
