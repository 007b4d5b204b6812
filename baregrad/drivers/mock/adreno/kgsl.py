"""A virtual /dev/kgsl-3d0: the KGSL ioctls the compute path uses, with the checks the kernel driver makes, in front of
the CP model (cp.py). Memory objects are memfds (their pages are the object's memory, seen by driver and mock alike).

Sources cited beside each check: Qualcomm's KGSL (github.com/qualcomm-linux/kgsl; kgsl.c, adreno.c, kgsl_drawobj.c).
"""
from __future__ import annotations

import ctypes
import errno
import struct
from dataclasses import dataclass

from baregrad.ctypes_autogen import kgsl
from baregrad.drivers.mock.adreno.cp import CP, CPError, GpuMemory
from baregrad.drivers.mock.common import MAP_SHARED, PAGE, MemFD, host_mmap, host_munmap, rup

DEVICE_PATH = "/dev/kgsl-3d0"
VA_BASE = 0x1_0000_0000
MAX_NUMIBS = 100000  # kgsl.h KGSL_MAX_NUMIBS: the most command objects one GPU_COMMAND may carry
MEMSTORE_SLOT = ctypes.sizeof(kgsl.struct_kgsl_devmemstore)
EOP_OFF = kgsl.struct_kgsl_devmemstore.eoptimestamp.offset


@dataclass
class _Ctx:
  id: int
  flags: int
  fd: int                     # the open file (dev_priv) that created it: the only one that may use it
  issued: int = 0
  fault: str | None = None


class MockKGSL:
  """One Adreno behind KGSL. `chip_id` is what DEVICE_INFO reports (default an a630, patch 1); `sysmem` the system
  memory its objects' pages come from (an Adreno has no memory of its own).

  Several opens of /dev/kgsl-3d0 by one process (several QCOM device handles) are several files of the one GPU, as
  kgsl.c has them: each open is its own dev_priv, owning the contexts it creates (kgsl_context_get_owner refuses a
  context of another file with -EINVAL), while memory objects, their ids and the GPU page table belong to the process
  (kgsl_process_private_new finds the process's private by tgid for every open), so an object allocated through one
  file is at the same GPU address for the contexts of all. One ringbuffer runs the submissions of every context in
  order (the model is synchronous)."""

  def __init__(self, chip_id: int | None = None, gmem_bytes: int | None = None, sysmem: int = 8 << 30) -> None:
    from baregrad import knobs
    from baregrad.drivers.qcom.chips import CHIPS, UnknownChip, by_name
    if chip_id is None:   # MOCKGPU_QCOM_CHIP names the part (an a6xx id with patch 1, an a7xx id as Mesa lists it)
      try: c = by_name(knobs.get("MOCKGPU_QCOM_CHIP"))
      except UnknownChip as e: raise ValueError(f"MOCKGPU_QCOM_CHIP: {e}") from None
      chip_id = c.chip_id | (1 if c.gen == 6 else 0)
    known = next((c for c in CHIPS if c.matches(chip_id)), None)
    self.gen = known.gen if known is not None else chip_id >> 24 & 0xFF
    gpu_id = known.gpu_id if known is not None else (chip_id >> 24 & 0xFF) * 100 + (chip_id >> 16 & 0xFF) * 10 + (chip_id >> 8 & 0xFF)
    self.chip_id, self.gmem_bytes = chip_id, gmem_bytes if gmem_bytes is not None else (known.gmem_bytes if known else 1 << 20)
    self.sysmem, self.sysmem_used = sysmem, 0
    self.fds: set[int] = set()
    self.objs: dict[int, MemFD] = {}
    self.ctxs: dict[int, _Ctx] = {}
    self.mem = GpuMemory()
    from baregrad.drivers.mock.adreno.ir3_exec import Executor
    from baregrad.drivers.mock.adreno.sp import ShaderProcessor
    self.cp = CP(self.mem, dispatch=ShaderProcessor(Executor(self.mem, gpu_id), gen=self.gen), gen=self.gen)   # CP_EXEC_CS runs ir3 code (sp.py)
    self.next_va, self.next_id, self.next_fd = VA_BASE, 1, 1000
    self.memstore = MemFD(PAGE, "memstore")  # per-context sop/eop timestamps, KGSL_MEMSTORE_OFFSET(ctx, field)
    self.memstore.gpu = self._map(self.memstore)
    self.pending: list[list[int]] = []
    self.last: dict[int, str] = {}

  def _map(self, obj: MemFD) -> int:
    va = self.next_va
    self.next_va += rup(max(obj.size, PAGE), PAGE) + PAGE  # a guard page between objects: overruns fault
    self.mem.map(va, (ctypes.c_char * obj.size).from_address(obj.view))
    return va

  def open(self, path: str, flags: int) -> int:
    # model's own: the one device node this mock provides (the kernel creates /dev/kgsl-3d0 for the 3D core)
    if path != DEVICE_PATH: raise FileNotFoundError(errno.ENOENT, f"mock KGSL has only {DEVICE_PATH}", path)
    self.next_fd += 1
    self.fds.add(self.next_fd)
    return self.next_fd

  def close(self, fd: int) -> None:
    self.fds.discard(fd)
    # kgsl.c kgsl_release: the contexts the file created are detached with it (their ids no longer name a context)
    for c in self.ctxs.values():
      if c.fd == fd: c.fd = -1

  def _owned(self, cid: int, fd: int) -> _Ctx | None:
    # kgsl.c kgsl_context_get_owner: a context id names a context only for the file (dev_priv) that created it
    ctx = self.ctxs.get(cid)
    return ctx if ctx is not None and ctx.fd == fd else None

  def ioctl(self, fd: int, request: int, argp: int, argsize: int) -> int:
    if fd not in self.fds: return -errno.EBADF  # fs/ioctl.c ioctl syscall: fdget of a closed fd -> -EBADF, before KGSL runs
    h = {kgsl.IOCTL_KGSL_DEVICE_GETPROPERTY: self._getproperty, kgsl.IOCTL_KGSL_DRAWCTXT_CREATE: self._ctx_create,
         kgsl.IOCTL_KGSL_GPUOBJ_ALLOC: self._alloc, kgsl.IOCTL_KGSL_GPUOBJ_INFO: self._info,
         kgsl.IOCTL_KGSL_GPUOBJ_FREE: self._free, kgsl.IOCTL_KGSL_GPU_COMMAND: self._command,
         kgsl.IOCTL_KGSL_DEVICE_WAITTIMESTAMP_CTXTID: self._wait}.get(request)
    # not modelled here: answered as KGSL answers a command outside its table (kgsl.c kgsl_ioctl_helper, -ENOTTY to the user)
    if h is None: return -errno.ENOTTY
    return h(fd, argp) if h in (self._ctx_create, self._command, self._wait) else h(argp)

  def _getproperty(self, argp: int) -> int:
    p = kgsl.struct_kgsl_device_getproperty.from_address(argp)
    if p.type != kgsl.KGSL_PROP_DEVICE_INFO: return -errno.EINVAL  # adreno.c adreno_getproperty: unknown type -EINVAL
    info = kgsl.struct_kgsl_devinfo(device_id=1, chip_id=self.chip_id, mmu_enabled=1, gmem_gpubaseaddr=0,
                                    gmem_sizebytes=self.gmem_bytes)
    # adreno.c adreno_prop_device_info -> copy_prop: copies min(sizeof(devinfo), sizebytes) bytes to value
    if not p.value: return -errno.EFAULT  # adreno.c copy_prop: copy_to_user to a NULL value fails -> -EFAULT
    ctypes.memmove(p.value, ctypes.addressof(info), min(ctypes.sizeof(info), p.sizebytes))
    return 0

  def _ctx_create(self, fd: int, argp: int) -> int:
    p = kgsl.struct_kgsl_drawctxt_create.from_address(argp)
    cid = len(self.ctxs) + 1
    if (cid + 1) * MEMSTORE_SLOT > self.memstore.size: return -errno.ENOSPC  # kgsl.c kgsl_context_init: ids are bounded by the memstore
    self.ctxs[cid] = _Ctx(cid, p.flags, fd)
    p.drawctxt_id = cid
    return 0

  def _alloc(self, argp: int) -> int:
    p = kgsl.struct_kgsl_gpuobj_alloc.from_address(argp)
    if p.size == 0: return -errno.EINVAL  # kgsl.c gpumem_alloc_vm_entry/kgsl_allocate_user: a zero size is -EINVAL
    # kgsl_sharedmem.c kgsl_sharedmem_page_alloc_user: an object's pages are allocated from system memory when it is
    # made; pages that cannot be had are -ENOMEM
    size = rup(p.size, PAGE)
    if self.sysmem_used + size > self.sysmem: return -errno.ENOMEM
    obj = MemFD(size, "gpuobj")
    self.sysmem_used += size
    obj.gpu = self._map(obj)
    oid, self.next_id = self.next_id, self.next_id + 1
    self.objs[oid] = obj
    p.id, p.mmapsize = oid, obj.size
    return 0

  def _info(self, argp: int) -> int:
    p = kgsl.struct_kgsl_gpuobj_info.from_address(argp)
    obj = self.objs.get(p.id)
    if obj is None: return -errno.EINVAL  # kgsl.c kgsl_ioctl_gpuobj_info: kgsl_sharedmem_find_id failed -> -EINVAL
    p.gpuaddr, p.size = obj.gpu, obj.size
    return 0

  def _free(self, argp: int) -> int:
    p = kgsl.struct_kgsl_gpuobj_free.from_address(argp)
    obj = self.objs.pop(p.id, None)
    if obj is None: return -errno.EINVAL  # kgsl.c kgsl_ioctl_gpuobj_free: no entry with that id -> -EINVAL
    self.mem.unmap(obj.gpu)
    self.sysmem_used -= obj.size
    obj.release()
    return 0

  def mmap(self, addr: int, length: int, prot: int, flags: int, fd: int, offset: int) -> int:
    # kgsl.c kgsl_mmap/get_mmap_entry: the page offset names the object id; unknown id or a too-long map is -EINVAL.
    obj = self.objs.get(offset // PAGE)
    if fd not in self.fds or obj is None or length > obj.size:
      raise OSError(errno.EINVAL, f"mmap of KGSL object id {offset // PAGE} ({length:#x} bytes): no such object or too long")
    return host_mmap(addr, length, prot, MAP_SHARED | (flags & ~0x3), obj.fd, 0)

  def munmap(self, addr: int, length: int) -> None:
    host_munmap(addr, length)

  def doorbell(self, addr: int, value: int) -> None:
    # model's own: KGSL maps no doorbell page to userspace (kgsl.c kgsl_mmap maps only memory objects)
    raise OSError(errno.EINVAL, "KGSL has no userspace doorbell: work is submitted with IOCTL_KGSL_GPU_COMMAND")

  def eop(self, cid: int) -> int:
    return struct.unpack("<I", self.mem.read(self.memstore.gpu + cid * MEMSTORE_SLOT + EOP_OFF, 4))[0]

  def _command(self, fd: int, argp: int) -> int:
    p = kgsl.struct_kgsl_gpu_command.from_address(argp)
    # kgsl.c kgsl_ioctl_gpu_command/_process_command_input: more than KGSL_MAX_NUMIBS objects is -EINVAL. numcmds 0 is
    # model's own: _process_command_input takes it as a MARKEROBJ (a submission with no IBs), which our driver never sends
    if p.numcmds > MAX_NUMIBS or p.numcmds == 0: return -errno.EINVAL
    ctx = self._owned(p.context_id, fd)
    if ctx is None: return -errno.EINVAL  # kgsl.c kgsl_ioctl_gpu_command: kgsl_context_get_owner NULL -> -EINVAL
    if ctx.fault: return -errno.EPROTO  # kgsl.c kgsl_ioctl_gpu_command: -EPROTO tells the user the context faulted
    # model's own: kgsl_drawobj.c kgsl_drawobj_cmd_add_cmdlist reads each record with kgsl_copy_from_user, which copies
    # min(sizeof, cmdsize) bytes (-EINVAL only for 0); the model refuses a record shorter than struct kgsl_command_object
    if p.cmdsize < ctypes.sizeof(kgsl.struct_kgsl_command_object): return -errno.EINVAL
    ring: list[int] = []
    for i in range(p.numcmds):
      c = kgsl.struct_kgsl_command_object.from_address(p.cmdlist + i * p.cmdsize)
      # adreno_dispatch.c _verify_ib (adreno_verify_cmdobj -> -EINVAL): ib->size == 0 is refused; a size not a whole
      # number of dwords is model's own (the kernel rounds it down, size >> 2)
      if c.size == 0 or c.size % 4: return -errno.EINVAL
      # kgsl_drawobj.c kgsl_drawobj_cmd_add_cmdlist: "Sanity check the flags": an object with none of the CMDLIST_FLAGS
      # (KGSL_CMDLIST_IB, _CTXTSWITCH_PREAMBLE, _IB_PREAMBLE) is -EINVAL
      if not c.flags & (kgsl.KGSL_CMDLIST_IB | kgsl.KGSL_CMDLIST_CTXTSWITCH_PREAMBLE | kgsl.KGSL_CMDLIST_IB_PREAMBLE): return -errno.EINVAL
      ring += _ib_packet(c.gpuaddr, c.size // 4)
    ctx.issued += 1
    ts_addr = self.memstore.gpu + ctx.id * MEMSTORE_SLOT + EOP_OFF
    # the kernel's ringbuffer ends each submission with an event writing the context's eoptimestamp: a6xx CACHE_FLUSH_TS
    # with TIMESTAMP (adreno_a6xx_ringbuffer.c); a7xx CP_EVENT_WRITE7 CACHE_CLEAN with WRITE_ENABLED, bit 27, of a user
    # 32-bit value to RAM (adreno_gen7_ringbuffer.c gen7_ringbuffer_addcmds)
    ev = 4 | 1 << 30 if self.gen == 6 else 49 | 1 << 27
    ring += [_pkt7(0x46, 4), ev, ts_addr & 0xFFFFFFFF, ts_addr >> 32, ctx.issued]
    p.timestamp = ctx.issued
    self.pending.append([ctx.id, ctx.issued, *ring])
    self._progress()
    return 0

  def _progress(self) -> None:
    """Run queued submissions in order until one blocks on a CP_WAIT_REG_MEM; a CP error faults its context."""
    while self.pending or self.cp.stack:
      if not self.cp.stack:
        cid, ts, *ring = self.pending[0]
        self.cp.submit(ring)
      cid, ts = self.pending[0][0], self.pending[0][1]
      try:
        if not self.cp.run(): return
      except CPError as e:
        self.cp.stack = []
        self.ctxs[cid].fault = f"context {cid} faulted at timestamp {ts}: {e}"
      self.pending.pop(0)

  def _wait(self, fd: int, argp: int) -> int:
    p = kgsl.struct_kgsl_device_waittimestamp_ctxtid.from_address(argp)
    ctx = self._owned(p.context_id, fd)
    # kgsl.c kgsl_ioctl_device_waittimestamp_ctxtid: kgsl_context_get_owner NULL (unknown, or another file's) -> -EINVAL
    if ctx is None: return -errno.EINVAL
    self._progress()
    if ctx.fault: return -errno.EPROTO  # adreno.c adreno_waittimestamp: ADRENO_CONTEXT_FAULT set -> -EPROTO
    if self.eop(ctx.id) >= p.timestamp: return 0
    # adreno.c adreno_waittimestamp -> kgsl_wait_timestamp: not retired within the timeout -> -ETIMEDOUT; the model is
    # synchronous, so what has not retired now is blocked for good
    return -errno.ETIMEDOUT


def _pkt7(op: int, cnt: int) -> int:
  par = lambda v: 1 - (bin(v).count("1") & 1)  # noqa: E731  (adreno_pm4types.h pm4_calc_odd_parity_bit)
  return (7 << 28) | (par(op) << 23) | (op << 16) | (par(cnt) << 15) | cnt


def _ib_packet(addr: int, ndwords: int) -> list[int]:
  return [_pkt7(0x3F, 3), addr & 0xFFFFFFFF, addr >> 32, ndwords]
