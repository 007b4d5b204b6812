"""The resource manager (RM) of NVIDIA's kernel driver: the escapes on /dev/nvidiactl and /dev/nvidiaN (card info,
version check, fd registration, RM alloc/free/control, memory mapping), the object tree and the classes one generation
offers, and mmap/munmap of the device files (nv-mmap.c)."""
from __future__ import annotations
import ctypes, errno
from baregrad import knobs
from typing import Any
from baregrad.ctypes_autogen.nv import nv_580 as nv
from baregrad.drivers.mock.common import host_mmap, host_munmap, MAP_SHARED, MemFD, PAGE, UserPages, user_range_mapped
from baregrad.drivers.mock.nv.state import Channel, RMObject, RMStatus
from baregrad.drivers.nv import hw
from baregrad.drivers.nv.hw import nv_ioctl_nvos02_parameters_with_fd, nv_ioctl_nvos33_parameters_with_fd

# class -> (parent classes allowed, parameter struct or None, parameters required): the classes one GPU generation offers
def _class_table(arch: hw.GPUArch) -> dict[int, tuple[tuple[int, ...], type | None, bool]]:
  dev, sub, grp, ch = (nv.NV01_DEVICE_0,), (nv.NV20_SUBDEVICE_0,), (nv.KEPLER_CHANNEL_GROUP_A,), (arch.gpfifo,)
  t: dict[int, tuple[tuple[int, ...], type | None, bool]] = {
    nv.NV01_DEVICE_0: ((nv.NV01_ROOT_CLIENT,), nv.NV0080_ALLOC_PARAMETERS, False),
    nv.NV20_SUBDEVICE_0: (dev, nv.NV2080_ALLOC_PARAMETERS, False),
    nv.FERMI_VASPACE_A: (dev + sub, nv.NV_VASPACE_ALLOCATION_PARAMETERS, False),
    nv.KEPLER_CHANNEL_GROUP_A: (dev + sub, nv.NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS, True),
    hw.FERMI_CONTEXT_SHARE_A: (grp, nv.NV_CTXSHARE_ALLOCATION_PARAMETERS, True),
    arch.gpfifo: (grp, nv.NV_CHANNEL_ALLOC_PARAMS, True),
    arch.compute: (ch, None, False),
    arch.dma: (ch, None, False),
    nv.NV01_MEMORY_SYSTEM: (dev + sub, nv.NV_MEMORY_ALLOCATION_PARAMS, True),
    nv.NV01_MEMORY_LOCAL_USER: (dev + sub, nv.NV_MEMORY_ALLOCATION_PARAMS, True),
  }
  for um in arch.usermode: t[um] = (sub, nv.NV_HOPPER_USERMODE_A_PARAMS if um == hw.HOPPER_USERMODE_A else None, False)
  return t

def arch_from_env(arch: str | None = None) -> hw.GPUArch:
  """The generation MOCKGPU_ARCH (or `arch`) names; sm_90 by default; anything else is refused by name."""
  name = arch if arch is not None else knobs.read("MOCKGPU_ARCH")
  a = hw.ARCHS.get(name.strip().lower())
  if a is None: raise ValueError(f"MOCKGPU_ARCH={name!r}: the mock NVIDIA GPU emulates {', '.join(hw.ARCHS)}, not {name!r}")
  return a


class ResourceManager:
  """RM escapes, objects and controls, and the mmaps of the device files, each check beside its source."""

  def _esc_card_info(self, f: dict, argp: int, size: int) -> int:
    n = size // ctypes.sizeof(nv.nv_ioctl_card_info_t)
    cards = (nv.nv_ioctl_card_info_t * n).from_address(argp)
    ctypes.memset(argp, 0, size)
    for i in range(min(n, self.count)):  # gpu_id is the PCI location (bus << 8), as RM builds it
      cards[i].valid, cards[i].gpu_id, cards[i].minor_number = 1, (i + 1) << 8, i
      cards[i].pci_info.vendor_id, cards[i].pci_info.device_id, cards[i].pci_info.bus = 0x10de, self.arch_info.device_id, i + 1
      cards[i].fb_size = self.vram_bytes
    return 0

  def _esc_version(self, f: dict, argp: int, size: int) -> int:
    p = nv.nv_ioctl_rm_api_version_t.from_address(argp)
    mine = self.driver_version.encode()
    if p.cmd == nv.NV_RM_API_VERSION_CMD_QUERY:
      ctypes.memmove(ctypes.addressof(p) + type(p).versionString.offset, mine + b"\0", len(mine) + 1)
      p.reply = nv.NV_RM_API_VERSION_REPLY_RECOGNIZED
      return 0
    theirs = bytes(p.versionString).split(b"\0")[0]
    if p.cmd == nv.NV_RM_API_VERSION_CMD_STRICT and theirs != mine:
      p.reply = nv.NV_RM_API_VERSION_REPLY_UNRECOGNIZED
      ctypes.memmove(ctypes.addressof(p) + type(p).versionString.offset, mine + b"\0", len(mine) + 1)
      return -errno.EINVAL
    p.reply = nv.NV_RM_API_VERSION_REPLY_RECOGNIZED
    return 0

  def _esc_register_fd(self, f: dict, argp: int, size: int) -> int:
    # escape.c RmIoctl NV_ESC_REGISTER_FD (a failed status returns -EINVAL from nvidia_ioctl): an fd registers one
    # control fd once (ctl_nvfp != NULL -> NV_ERR_INVALID_STATE); ctl_fd must be a /dev/nvidiactl fd
    # (nv_get_file_private(fd, NV_TRUE)), not the fd itself nor one that has a link of its own
    ctl = nv.nv_ioctl_register_fd_t.from_address(argp).ctl_fd
    target = self.files.get(ctl)
    if f["ctl"] is not None or target is None or target["kind"] != "ctl" or target is f or target["ctl"] is not None: return -errno.EINVAL
    f["ctl"] = ctl
    return 0

  def _rm(self, p: Any, fn: Any) -> int:
    """Run an RM call: errors land in the parameters' status field; the ioctl itself succeeds."""
    try:
      fn()
      p.status = nv.NV_OK
    except RMStatus as e:
      p.status = e.status
      self.log.append(f"NVRM: {e}")
    return 0

  def _esc_alloc(self, f: dict, argp: int, size: int) -> int:
    p = (nv.NVOS64_PARAMETERS if size == ctypes.sizeof(nv.NVOS64_PARAMETERS) else nv.NVOS21_PARAMETERS).from_address(argp)
    return self._rm(p, lambda: self._alloc(p))

  def _esc_free(self, f: dict, argp: int, size: int) -> int:
    p = nv.NVOS00_PARAMETERS.from_address(argp)
    return self._rm(p, lambda: self._free(p.hRoot, p.hObjectParent, p.hObjectOld))

  def _esc_control(self, f: dict, argp: int, size: int) -> int:
    p = nv.NVOS54_PARAMETERS.from_address(argp)
    return self._rm(p, lambda: self._control(p))

  def _esc_map_memory(self, f: dict, argp: int, size: int) -> int:
    w = nv_ioctl_nvos33_parameters_with_fd.from_address(argp)
    p = w.params
    def go() -> None:
      obj = self._get(p.hClient, p.hMemory)
      # RmCreateMmapContextLocked (osapi.c): hDevice is a device, else a subdevice (subdeviceGetByHandle)
      self._get(p.hClient, p.hDevice, (nv.NV01_DEVICE_0, nv.NV20_SUBDEVICE_0))
      if not isinstance(obj.data, MemFD): raise RMStatus(nv.NV_ERR_INVALID_OBJECT, f"object {p.hMemory:#x} ({hw.class_name(obj.cls)}) is not mappable memory")
      if p.offset + p.length > obj.data.size or p.length == 0:
        raise RMStatus(nv.NV_ERR_INVALID_LIMIT, f"map of {p.length:#x} bytes at {p.offset:#x} exceeds the object's {obj.data.size:#x} bytes")
      target = self.files.get(w.fd)
      # docs/hw/h100-580.159.04-findings.md finding 1 (system memory mapped only through /dev/nvidiactl); osapi.c
      # RmCreateMmapContextLocked: a mapping in none of the GPU's BARs (system memory) is validated
      # against the control device (pNv = nv_get_ctl_state()); nv-usermap.c nv_add_mapping_context_to_file then takes
      # the fd with nv_get_file_private(fd, NV_IS_CTL_DEVICE(nv)): system memory needs a /dev/nvidiactl fd, a BAR
      # aperture an fd of that GPU's /dev/nvidiaN (NV_STATE_PTR(nvlfp->nvptr) != nv); otherwise NV_ERR_INVALID_ARGUMENT
      want = "ctl" if obj.data.kind == "sys" else "dev"
      if target is None or target["kind"] != want or (want == "dev" and target["gpu"] != obj.data.gpu):
        what = "system memory is mapped through /dev/nvidiactl" if want == "ctl" else f"a BAR aperture of GPU {obj.data.gpu} through /dev/nvidia{obj.data.gpu}"
        raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, f"RM_MAP_MEMORY of {hw.class_name(obj.cls)} {p.hMemory:#x} names fd {w.fd} "
                       f"({target['path'] if target else 'not open'}): {what}")
      # nv_add_mapping_context_to_file: one mapping context per fd (nvamc->valid)
      if target["map"] is not None: raise RMStatus(nv.NV_ERR_STATE_IN_USE, f"fd {w.fd} already holds a mapping context")
      target["map"] = (obj.data, p.offset, p.length)
      p.pLinearAddress = p.offset
    return self._rm(p, go)

  def _esc_alloc_memory(self, f: dict, argp: int, size: int) -> int:
    """NV_ESC_RM_ALLOC_MEMORY for NV01_MEMORY_SYSTEM_OS_DESCRIPTOR: system memory over the process's own pages (what
    another device's host memory becomes for this GPU). The checks of escape.c RmIoctl, RmAllocOsDescriptor and
    RmCreateOsDescriptor, in their order."""
    # RmIoctl case NV_ESC_RM_ALLOC_MEMORY: NV_ACTUAL_DEVICE_ONLY, a GPU's /dev/nvidiaN, not the control node
    # (NV_ERR_INVALID_ARGUMENT, which nvidia_ioctl returns as -EINVAL)
    if f["kind"] != "dev":
      self.log.append(f"nvidia: NV_ESC_RM_ALLOC_MEMORY on {f['path']}: only on a GPU's /dev/nvidiaN (NV_ACTUAL_DEVICE_ONLY)")
      return -errno.EINVAL
    p = nv_ioctl_nvos02_parameters_with_fd.from_address(argp).params
    def go() -> None:
      if p.hClass != hw.NV01_MEMORY_SYSTEM_OS_DESCRIPTOR:
        raise RMStatus(nv.NV_ERR_INVALID_CLASS, f"NV_ESC_RM_ALLOC_MEMORY of {hw.class_name(p.hClass)}: the mock models only OS descriptors")
      # RmAllocOsDescriptor: LOCATION_PCI and MAPPING_NO_MAP, a coherency of CACHED, WRITE_BACK or UNCACHED -> else NV_ERR_INVALID_FLAGS
      fl = p.flags
      if nv.NVOS02_FLAGS_LOCATION.decode(fl) != nv.NVOS02_FLAGS_LOCATION_PCI or nv.NVOS02_FLAGS_MAPPING.decode(fl) != nv.NVOS02_FLAGS_MAPPING_NO_MAP:
        raise RMStatus(nv.NV_ERR_INVALID_FLAGS, f"OS descriptor flags {fl:#x}: LOCATION must be PCI and MAPPING NO_MAP")
      coherent = (nv.NVOS02_FLAGS_COHERENCY_CACHED, nv.NVOS02_FLAGS_COHERENCY_WRITE_BACK, nv.NVOS02_FLAGS_COHERENCY_UNCACHED)
      if nv.NVOS02_FLAGS_COHERENCY.decode(fl) not in coherent:
        raise RMStatus(nv.NV_ERR_INVALID_FLAGS, f"OS descriptor flags {fl:#x}: COHERENCY must be CACHED, WRITE_BACK or UNCACHED")
      # RmCreateOsDescriptor: the address page aligned (NV_ERR_NOT_SUPPORTED), limit + 1 not 0 (NV_ERR_INVALID_LIMIT),
      # os_lock_user_pages pins the pages: addresses the process has not mapped -> NV_ERR_INVALID_ADDRESS (anonymous
      # pages worked on the H100, docs/hw/h100-580.159.04-findings.md#finding-1; pages of an RM mapping take the
      # os_lookup_user_io_memory fallback, whose rules the mock does not model: it accepts any mapped pages)
      if p.pMemory % PAGE: raise RMStatus(nv.NV_ERR_NOT_SUPPORTED, f"OS descriptor at {p.pMemory:#x} is not page aligned")
      if p.limit + 1 >= 1 << 64: raise RMStatus(nv.NV_ERR_INVALID_LIMIT, f"limit {p.limit:#x} overflows")
      size = (p.limit + PAGE) // PAGE * PAGE
      if not user_range_mapped(p.pMemory, size):
        raise RMStatus(nv.NV_ERR_INVALID_ADDRESS, f"OS descriptor {p.pMemory:#x}+{size:#x}: pages the process has not mapped")
      # Nv04VidHeapControl (NVOS32_FUNCTION_ALLOC_OS_DESCRIPTOR, the handle provided): the parent is a device of the
      # client, the handle free
      parent = self._get(p.hRoot, p.hObjectParent, nv.NV01_DEVICE_0)
      objs = self.clients[p.hRoot]
      if p.hObjectNew == 0 or p.hObjectNew in objs: raise RMStatus(nv.NV_ERR_INSERT_DUPLICATE_NAME, f"handle {p.hObjectNew:#x} is zero or in use")
      o = RMObject(p.hObjectNew, hw.NV01_MEMORY_SYSTEM_OS_DESCRIPTOR, parent.handle)
      o.data = UserPages(p.pMemory, size)
      o.data.gpu = parent.data["gpu"] if isinstance(parent.data, dict) else 0
      objs[o.handle] = o
      parent.children.append(o.handle)
    return self._rm(p, go)

  def _esc_unmap_memory(self, f: dict, argp: int, size: int) -> int:
    p = nv.NVOS34_PARAMETERS.from_address(argp)
    return self._rm(p, lambda: self._get(p.hClient, p.hMemory))

  _escapes: dict[int, tuple[tuple[type, ...], bool, Any]] = {
    nv.NV_ESC_CARD_INFO: ((nv.nv_ioctl_card_info_t,), True, _esc_card_info),
    nv.NV_ESC_CHECK_VERSION_STR: ((nv.nv_ioctl_rm_api_version_t,), False, _esc_version),
    nv.NV_ESC_REGISTER_FD: ((nv.nv_ioctl_register_fd_t,), False, _esc_register_fd),
    nv.NV_ESC_RM_ALLOC: ((nv.NVOS21_PARAMETERS, nv.NVOS64_PARAMETERS), True, _esc_alloc),
    nv.NV_ESC_RM_FREE: ((nv.NVOS00_PARAMETERS,), True, _esc_free),
    nv.NV_ESC_RM_CONTROL: ((nv.NVOS54_PARAMETERS,), True, _esc_control),
    nv.NV_ESC_RM_MAP_MEMORY: ((nv_ioctl_nvos33_parameters_with_fd,), True, _esc_map_memory),
    nv.NV_ESC_RM_UNMAP_MEMORY: ((nv.NVOS34_PARAMETERS,), True, _esc_unmap_memory),
    nv.NV_ESC_RM_ALLOC_MEMORY: ((nv_ioctl_nvos02_parameters_with_fd,), False, _esc_alloc_memory),
  }

  def _get(self, hclient: int, h: int, cls: int | tuple[int, ...] | None = None) -> RMObject:
    # resserv rs_client.c / rs_server.c lookups: an unknown client NV_ERR_INVALID_CLIENT, an unknown handle
    # NV_ERR_INVALID_OBJECT_HANDLE, an object of another class NV_ERR_INVALID_OBJECT
    objs = self.clients.get(hclient)
    if objs is None: raise RMStatus(nv.NV_ERR_INVALID_CLIENT, f"no client {hclient:#x}")
    o = objs.get(h)
    if o is None: raise RMStatus(nv.NV_ERR_INVALID_OBJECT_HANDLE, f"client {hclient:#x} has no object {h:#x}")
    if cls is not None and o.cls not in ((cls,) if isinstance(cls, int) else cls):
      raise RMStatus(nv.NV_ERR_INVALID_OBJECT, f"object {h:#x} is a {hw.class_name(o.cls)}")
    return o

  def _alloc(self, p: Any) -> None:
    cls = p.hClass
    if cls == nv.NV01_ROOT_CLIENT or cls in (nv.NV01_ROOT, nv.NV01_ROOT_NON_PRIV):
      h = p.hObjectNew or self._next_client
      if h in self.clients: raise RMStatus(nv.NV_ERR_INSERT_DUPLICATE_NAME, f"client {h:#x} exists")
      if h == self._next_client: self._next_client += 1
      self.clients[h] = {h: RMObject(h, nv.NV01_ROOT_CLIENT, None)}
      p.hObjectNew = h
      return
    # rmapi/alloc_free.c: a class this GPU's engines do not register -> NV_ERR_INVALID_CLASS; resserv
    # rs_server.c serverAllocResourceUnderLock: the parent must exist and be a class the new one may live under
    # (NV_ERR_INVALID_OBJECT_PARENT), the handle must be free (NV_ERR_INSERT_DUPLICATE_NAME)
    if cls not in self.classes:
      raise RMStatus(nv.NV_ERR_INVALID_CLASS, f"class {hw.class_name(cls)} ({cls:#x}) is not supported by this GPU "
                     f"({self.arch_info.name}, {self.arch})")
    objs = self.clients.get(p.hRoot)
    if objs is None: raise RMStatus(nv.NV_ERR_INVALID_CLIENT, f"no client {p.hRoot:#x}")
    parent = objs.get(p.hObjectParent)
    allowed, ptype, required = self.classes[cls]
    if parent is None: raise RMStatus(nv.NV_ERR_INVALID_OBJECT_PARENT, f"parent {p.hObjectParent:#x} does not exist")
    if parent.cls not in allowed:
      raise RMStatus(nv.NV_ERR_INVALID_OBJECT_PARENT, f"a {hw.class_name(cls)} cannot be a child of a {hw.class_name(parent.cls)} "
                     f"(parent must be {' or '.join(hw.class_name(c) for c in allowed)})")
    params = None
    if p.pAllocParms:
      if ptype is not None and p.paramsSize not in (0, ctypes.sizeof(ptype)):
        raise RMStatus(nv.NV_ERR_INVALID_PARAM_STRUCT, f"{hw.class_name(cls)} parameters are {ctypes.sizeof(ptype)} bytes, got {p.paramsSize}")
      if ptype is not None: params = ptype.from_address(p.pAllocParms)
    elif required: raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, f"{hw.class_name(cls)} needs allocation parameters")
    h = p.hObjectNew
    if h == 0: h, self._next_handle = self._next_handle, self._next_handle + 1
    if h in objs: raise RMStatus(nv.NV_ERR_INSERT_DUPLICATE_NAME, f"handle {h:#x} is in use")
    o = RMObject(h, cls, parent.handle)
    o.data = self._construct(p.hRoot, o, parent, params)
    objs[h] = o
    parent.children.append(h)
    p.hObjectNew = h

  def _construct(self, hclient: int, o: RMObject, parent: RMObject, params: Any) -> Any:
    """The per-class constructors' checks. Where a check is the mock's own (RM would misbehave quietly rather than
    refuse), it says so."""
    cls = o.cls
    if cls in (nv.NV01_MEMORY_SYSTEM, nv.NV01_MEMORY_LOCAL_USER):
      size = params.size
      # mem_mgr/system_mem.c sysmemConstruct / video_mem.c vidmemConstruct (via heap alloc): size 0 -> NV_ERR_INVALID_ARGUMENT;
      # more than is free -> NV_ERR_NO_MEMORY
      if size == 0: raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, "memory of size 0")
      size = (size + PAGE - 1) // PAGE * PAGE
      vid = cls == nv.NV01_MEMORY_LOCAL_USER
      used, cap = (self.vram_used, self.vram_bytes) if vid else (self.sysmem_used, self.sysmem_bytes)
      if used + size > cap:
        raise RMStatus(nv.NV_ERR_NO_MEMORY, f"{'video' if vid else 'system'} memory: {size:#x} bytes requested, {cap - used:#x} free")
      m = MemFD(size, "vid" if vid else "sys")
      m.gpu = parent.data["gpu"] if isinstance(parent.data, dict) else 0   # the GPU whose device object owns it
      if vid: self.vram_used += size
      else: self.sysmem_used += size
      params.size, params.limit = size, size - 1
      return m
    if cls in self.arch_info.usermode:
      m = MemFD(hw.USERMODE_SIZE, "usermode")
      m.gpu = parent.data["gpu"]
      return m
    if cls == nv.FERMI_VASPACE_A: return {"flags": params.flags if params is not None else 0, "pt": [],
                                          "gpu": parent.data.get("gpu", 0) if isinstance(parent.data, dict) else 0}
    if cls == nv.NV01_DEVICE_0:
      if params is not None and params.deviceId >= self.count:
        raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, f"deviceId {params.deviceId}: this system has {self.count} GPU(s)")
      return {"gpu": params.deviceId if params is not None else 0}
    if cls == nv.NV20_SUBDEVICE_0: return {"gpu": parent.data["gpu"]}
    if cls == self.arch_info.gpfifo:
      # mock: the GPFIFO ring wraps with a power-of-two mask; RM passes gpFifoEntries on to the hardware unchecked
      if params.gpFifoEntries == 0 or params.gpFifoEntries & (params.gpFifoEntries - 1):
        raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, f"gpFifoEntries={params.gpFifoEntries} must be a power of two")
      if params.hContextShare:
        cs = self._get(hclient, params.hContextShare, hw.FERMI_CONTEXT_SHARE_A)
        if cs.parent != parent.handle: raise RMStatus(nv.NV_ERR_INVALID_OBJECT_PARENT, "context share belongs to another channel group")
      # arch/volta/kernel_channel_gv100.c kchannelCreateUserdMemDesc_GV100: hUserdMemory must be a memory object
      # (NV_ERR_OBJECT_NOT_FOUND); RM shifts the USERD address right by its alignment (512 bytes), so a misaligned
      # offset would put USERD elsewhere: the mock refuses it
      try: um = self._get(hclient, params.hUserdMemory[0], (nv.NV01_MEMORY_SYSTEM, nv.NV01_MEMORY_LOCAL_USER))
      except RMStatus as e: raise RMStatus(nv.NV_ERR_OBJECT_NOT_FOUND, str(e)) from None
      if params.userdOffset[0] + 0x200 > um.data.size or params.userdOffset[0] % 0x200:
        raise RMStatus(nv.NV_ERR_INVALID_OFFSET, f"USERD offset {params.userdOffset[0]:#x} (must be 512-byte aligned, inside the memory)")
      notifier = None
      if params.hObjectError:
        en = self._get(hclient, params.hObjectError, (nv.NV01_MEMORY_SYSTEM, nv.NV01_MEMORY_LOCAL_USER))
        notifier = en.data.view
      token, self._next_token = self._next_token, self._next_token + 1
      ch = Channel(o, parent.handle, token, params.gpFifoOffset, params.gpFifoEntries, um.data.view + params.userdOffset[0], notifier)
      ch.client = hclient
      if params.hContextShare: ch.vaspace = self.clients[hclient][params.hContextShare].data  # the context share's VA space
      ctypes.memset(ch.userd, 0, 0x200)
      self.channels[token] = ch
      return ch
    if cls == nv.KEPLER_CHANNEL_GROUP_A:
      # kernel_channel_group_api.c kchangrpapiConstruct_IMPL: an engine type without a runlist -> NV_ERR_INVALID_ARGUMENT
      if params.engineType not in (hw.NV2080_ENGINE_TYPE_GRAPHICS, hw.NV2080_ENGINE_TYPE_COPY0):
        raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, f"engineType {params.engineType} has no runlist on this GPU")
    if cls == hw.FERMI_CONTEXT_SHARE_A:
      return self._get(hclient, params.hVASpace, nv.FERMI_VASPACE_A).data if params.hVASpace else {"flags": 0}
    if cls in (self.arch_info.compute, self.arch_info.dma):
      # channel_descendant.c (engine objects on a channel): one object of a class per channel -> NV_ERR_INVALID_STATE
      if any(self.clients[hclient][c].cls == cls for c in parent.children):
        raise RMStatus(nv.NV_ERR_INVALID_STATE, f"channel {parent.handle:#x} already has a {hw.class_name(cls)} object")
    return None

  def _free(self, hclient: int, hparent: int, h: int) -> None:
    objs = self.clients.get(hclient)
    if objs is None: raise RMStatus(nv.NV_ERR_INVALID_CLIENT, f"no client {hclient:#x}")
    if h == hclient:
      for c in list(objs[h].children): self._free_tree(objs, c)
      del self.clients[hclient]
      return
    o = objs.get(h)
    if o is None: raise RMStatus(nv.NV_ERR_INVALID_OBJECT_HANDLE, f"client {hclient:#x} has no object {h:#x}")
    if hparent and o.parent != hparent: raise RMStatus(nv.NV_ERR_INVALID_OBJECT_PARENT, f"object {h:#x}'s parent is {o.parent:#x}, not {hparent:#x}")
    self._free_tree(objs, h)

  def _free_tree(self, objs: dict[int, RMObject], h: int) -> None:
    o = objs.pop(h)
    for c in list(o.children): self._free_tree(objs, c)
    if o.parent is not None and o.parent in objs: objs[o.parent].children.remove(h)
    if isinstance(o.data, (UserPages, MemFD)): self.unmap_memory(o.data)
    if isinstance(o.data, MemFD):
      if o.data.kind == "vid": self.vram_used -= o.data.size
      elif o.data.kind == "sys": self.sysmem_used -= o.data.size
      o.data.release()
    if isinstance(o.data, Channel):
      self.channels.pop(o.data.token, None)
      for f in self.files.values():
        if f.get("vas") is not None: f["vas"].channels = {k: v for k, v in f["vas"].channels.items() if v["channel"] is not o.data}
    if o.cls == nv.KEPLER_CHANNEL_GROUP_A: self.scheduled_groups.discard((id(objs), h))

  def _control(self, p: Any) -> None:
    # resserv rs_resource.c resControlLookup_IMPL: a command the object's class does not export -> NV_ERR_NOT_SUPPORTED;
    # paramsSize other than the command's parameter struct -> NV_ERR_INVALID_PARAM_STRUCT
    o = self._get(p.hClient, p.hObject)
    entry = self._controls.get(p.cmd)
    if entry is None: raise RMStatus(nv.NV_ERR_NOT_SUPPORTED, f"control {p.cmd:#x} is not supported")
    classes, ptype, fn = entry
    if o.cls not in classes:
      raise RMStatus(nv.NV_ERR_NOT_SUPPORTED, f"control {p.cmd:#x} is not supported on a {hw.class_name(o.cls)}")
    if p.paramsSize != ctypes.sizeof(ptype) or not p.params:
      raise RMStatus(nv.NV_ERR_INVALID_PARAM_STRUCT, f"control {p.cmd:#x} takes {ctypes.sizeof(ptype)} bytes of parameters, got {p.paramsSize}")
    fn(self, p.hClient, o, ptype.from_address(p.params))

  def _ctl_classlist(self, hc: int, o: RMObject, q: Any) -> None:
    q.numClasses = len(self.classlist)
    for i, c in enumerate(self.classlist): q.classList[i] = c

  def _ctl_arch(self, hc: int, o: RMObject, q: Any) -> None:
    q.architecture, q.implementation, q.revision = self.arch_info.architecture, self.arch_info.implementation, 0xa1

  def _ctl_gr_info(self, hc: int, o: RMObject, q: Any) -> None:
    vals = {nv.NV2080_CTRL_GR_INFO_INDEX_SM_VERSION: self.arch_info.sm_version,
            nv.NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_GPCS: self.gpcs, nv.NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_TPC_PER_GPC: self.tpc_per_gpc,
            nv.NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_SM_PER_TPC: self.sm_per_tpc, nv.NV2080_CTRL_GR_INFO_INDEX_MAX_WARPS_PER_SM: 64,
            nv.NV2080_CTRL_GR_INFO_INDEX_MAX_THREADS_PER_WARP: 32}
    if q.grInfoListSize == 0 or q.grInfoListSize > nv.NV2080_CTRL_GR_INFO_INDEX_MAX + 1 or not q.grInfoList:
      raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, f"grInfoListSize={q.grInfoListSize}")
    lst = (nv.NVXXXX_CTRL_XXX_INFO * q.grInfoListSize).from_address(q.grInfoList)
    for e in lst:
      if e.index > nv.NV2080_CTRL_GR_INFO_INDEX_MAX: raise RMStatus(nv.NV_ERR_INVALID_ARGUMENT, f"GR info index {e.index}")
      e.data = vals.get(e.index, 0)

  def _ctl_gid(self, hc: int, o: RMObject, q: Any) -> None:
    uuid = self.uuids[o.data["gpu"]]
    if nv.NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT.decode(q.flags) != nv.NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY:
      text = ("GPU-" + uuid.hex()).encode()
      q.length = len(text) + 1
      ctypes.memmove(ctypes.addressof(q.data), text, len(text))
      return
    q.length = 16
    ctypes.memmove(ctypes.addressof(q.data), uuid, 16)

  def _ctl_token(self, hc: int, o: RMObject, q: Any) -> None: q.workSubmitToken = o.data.token

  def _ctl_schedule(self, hc: int, o: RMObject, q: Any) -> None:
    # docs/hw/h100-580.159.04-findings.md finding 2 (GPFIFO_SCHEDULE refused before UVM_REGISTER_CHANNEL);
    # kernel_channel_group_api.c kchangrpapiCtrlCmdGpFifoSchedule_IMPL checks kchannelIsSchedulable_HAL for
    # every channel of the group: kernel_channel.c kchannelIsSchedulable_IMPL refuses a GR channel of an externally owned
    # VA space whose allocations UVM has not bound (UVM_REGISTER_CHANNEL) -> NV_ERR_INVALID_STATE
    if q.bEnable:
      for ch in self.channels.values():
        if ch.client == hc and ch.group == o.handle and not ch.bound and ch.vaspace is not None \
           and ch.vaspace["flags"] & nv.NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED:
          self._klog(f"NVRM: kchannelIsSchedulable_IMPL: Cannot schedule externally-owned channel 0x{ch.token:08x} with unbound allocations!")
          raise RMStatus(nv.NV_ERR_INVALID_STATE, f"GPFIFO_SCHEDULE: channel {ch.obj.handle:#x} (token {ch.token}) is in an externally owned "
                         "VA space and was not registered with UVM (UVM_REGISTER_CHANNEL)")
    key = (id(self.clients[hc]), o.handle)
    if q.bEnable: self.scheduled_groups.add(key)
    else: self.scheduled_groups.discard(key)
    self._run_all()

  _controls: dict[int, tuple[tuple[int, ...], type, Any]] = {
    nv.NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2: ((nv.NV01_DEVICE_0,), nv.NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS, _ctl_classlist),
    nv.NV2080_CTRL_CMD_MC_GET_ARCH_INFO: ((nv.NV20_SUBDEVICE_0,), nv.NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS, _ctl_arch),
    nv.NV2080_CTRL_CMD_GR_GET_INFO: ((nv.NV20_SUBDEVICE_0,), nv.NV2080_CTRL_GR_GET_INFO_PARAMS, _ctl_gr_info),
    nv.NV2080_CTRL_CMD_GPU_GET_GID_INFO: ((nv.NV20_SUBDEVICE_0,), nv.NV2080_CTRL_GPU_GET_GID_INFO_PARAMS, _ctl_gid),
    nv.NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN: (hw.GPFIFO_CLASSES,
                                                     nv.NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS, _ctl_token),
    nv.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE: ((nv.KEPLER_CHANNEL_GROUP_A,), nv.NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS, _ctl_schedule),
  }

  def mmap(self, addr: int, length: int, prot: int, flags: int, fd: int, offset: int) -> int:
    with self._lock:
      if fd == -1:  # anonymous memory: the kernel's ordinary behaviour
        r = host_mmap(addr, length, prot, flags, -1, offset)
        self.maps[r] = (length, None)
        return r
      f = self.files.get(fd)
      if f is None: raise OSError(errno.EBADF, f"mmap: bad fd {fd}")
      # kernel-open/nvidia/nv-mmap.c nvidia_mmap_helper: no valid mapping context -> EINVAL; vm_pgoff != 0 -> EINVAL;
      # the control node maps at most the pages of the allocation (-ERANGE); a BAR mapping exactly its range (-ENXIO)
      if f["kind"] not in ("ctl", "dev") or f["map"] is None:
        raise OSError(errno.EINVAL, f"mmap of {f['path']} (fd {fd}) without a preceding NV_ESC_RM_MAP_MEMORY on it")
      if offset != 0: raise OSError(errno.EINVAL, f"mmap of {f['path']} at offset {offset:#x}: the offset must be 0")
      mem, moff, mlen = f["map"]
      if f["kind"] == "ctl" and length > mlen: raise OSError(errno.ERANGE, f"mmap of {length:#x} bytes: the RM mapping is {mlen:#x} bytes")
      if f["kind"] == "dev" and length != mlen: raise OSError(errno.ENXIO, f"mmap of {length:#x} bytes of a {mlen:#x}-byte BAR mapping")
      r = host_mmap(addr, length, prot, (flags & ~0x0F) | MAP_SHARED, mem.fd, moff + offset)
      self.maps[r] = (length, mem)
      return r

  def munmap(self, addr: int, length: int) -> None:
    with self._lock:
      host_munmap(addr, length)
      self.maps.pop(addr, None)
