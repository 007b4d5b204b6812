"""NV: NVIDIA GPUs driven through the RM and UVM ioctls of NVIDIA's open kernel modules, with no libcuda.

Opening: /dev/nvidiactl, the driver version (NV_ESC_CHECK_VERSION_STR, refused by name unless bindings exist for its
branch), the GPU list (NV_ESC_CARD_INFO), /dev/nvidia-uvm (UVM_INITIALIZE, UVM_MM_INITIALIZE), the RM object tree:
root client -> device -> subdevice (-> usermode doorbell page), VA space; UVM registers the GPU and the VA space.
Work goes through one channel group (TSG) with two GPFIFO channels, each binding the compute class (subchannel 1) and
the DMA copy class (subchannel 4): the compute queue uses one, the copy queue the other. A submit copies the queue's
pushbuffer words into a command ring, writes a GPFIFO entry, GP_PUT in USERD, and rings the usermode doorbell with
the channel's work-submit token.

Each channel is registered with UVM (UVM_REGISTER_CHANNEL, with a free VA range for RM's context buffers) before the
group is scheduled and unregistered before it is freed: in an externally owned VA space RM refuses to schedule a GR
channel whose buffers UVM has not bound (finding 2). Shader shared/local memory windows, constant bank 0 and program
images follow what each generation's hardware and compiled code expect (hw.py: the generation records, PROGRAM_GUARD).
"Finding N" is section #finding-N of docs/hw/h100-580.159.04-findings.md (what the H100 showed the driver).

Memory: device memory is NV01_MEMORY_LOCAL_USER mapped into the GPU VA space through UVM external ranges; host-visible
memory is NV01_MEMORY_SYSTEM mapped for the CPU (NV_ESC_RM_MAP_MEMORY naming a fresh /dev/nvidiactl fd, then mmap of
that fd, at an address the driver picks inside a window it reserved below 2**40 so pushbuffers can be addressed from
GPFIFO entries) and for the GPU at the same VA. Why the control node: RM validates a system-memory mapping against the
control device (src/nvidia/arch/nvalloc/unix/src/osapi.c, RmCreateMmapContextLocked: an address in no BAR of the GPU
takes pNv = nv_get_ctl_state()), and kernel-open/nvidia/nv-usermap.c nv_add_mapping_context_to_file then accepts only a
control-node fd for it (nv_get_file_private(fd, NV_IS_CTL_DEVICE(nv))): a /dev/nvidiaN fd gives
NV_ERR_INVALID_ARGUMENT (finding 1). BAR apertures (the usermode doorbell page) are mapped through the GPU's own node.
Rather than describing anonymous pages to RM (NV01_MEMORY_SYSTEM_OS_DESCRIPTOR, the other route finding 1 names),
memory stays RM-allocated: the trace that reached a launch on the H100 used this route, and RM keeps the pages pinned
and DMA-mapped for as long as the object lives, whatever the process does with its own address space.

Channel errors (an Xid in the error notifier) raise NVChannelError naming the Xid and the kernel log's lines decoded
(faults.py), after the device rebuilt its channels: buffers stay valid and the next launch works.

Generations: what the kernel reports decides everything arch-specific. MC_GET_ARCH_INFO names the family (Ampere,
Ada, Hopper, Blackwell; anything else is refused by name), GR_GET_INFO's SM version the PTX target and ptxas arch
(sm_80, sm_86, sm_89, sm_90, sm_100, sm_120) and so the generation's record (hw.GENERATIONS: constant bank 0 with the
parameter offset 0x160 / 0x210 / 0x380, shared-memory limits), the classlist the GPFIFO, compute and copy classes
(newest known first), and the compute class the QMD version (v03 Ampere/Ada, v04 Hopper, v05 Blackwell) and shader
windows (hw.QMD_VERSION, hw.SHADER_WINDOWS: tables derived from the records).

Several GPUs: NV:<n> opens the n-th GPU NV_ESC_CARD_INFO lists (its /dev/nvidia<minor>, NV01_DEVICE_0 deviceId n),
with its own RM client, UVM VA space, channels and a device-only VA window of its own, through the port every NV device
opened without one shares (one kernel); copies between them go through UVM peer mappings where the kernel enables
PCIe peer access (peer.py).

MOCKGPU=1 runs against baregrad.drivers.mock.nv.MockNVGPU through the port (MOCKGPU_ARCH=sm_80..sm_120 picks the
generation, MOCKGPU_COUNT=n the number of GPUs); IOCTL_TRACE=1 prints every call; NV_CAPTURE=DIR keeps every
submission (pushbuffer, GPFIFO entry, QMDs, constant banks) and each launch's code and buffers for tools/nv_decode.py
and its replay (hcq/capture.py, hcq/replay.py).

The device is assembled from the modules beside it: RM and UVM calls (rm.py), memory (memory.py), channels and queues
(queues.py), programs and launches (program.py), what each generation defines (hw.py), channel errors (faults.py)."""
from __future__ import annotations
import ctypes, time
from typing import Any
from baregrad.hal import DeviceUnavailable
from baregrad.hcq import HCQDevice, HCQSignal
from baregrad.hcq.capture import CaptureWriter
from baregrad import knobs
from baregrad.drivers.port import driver_port
from baregrad.drivers.vmem import VAAllocator, reserve_window
from baregrad.ctypes_autogen.nv import pick_nv_module, UnsupportedDriverVersion, nv_580
from baregrad.drivers.nv import hw
from baregrad.drivers.nv.faults import KernelLog, NVChannelError, attribute, decode as decode_xid
from baregrad.drivers.nv.rm import RMClient, RMError, register_ioctls
from baregrad.drivers.nv.memory import CPU_WINDOW, GPU_WINDOW, DeviceMemory, NVAllocator, NVMemory
from baregrad.drivers.nv.queues import ChannelSet, NVChannel, NVComputeQueue, NVCopyQueue
from baregrad.drivers.nv.program import NVProgram
from baregrad.drivers.nv.scratch import LaunchScratch
from baregrad.drivers.nv.peer import PeerMappings, shared_port
from baregrad.drivers.nv_compile import NVCompiler

__all__ = ["NVDevice", "RMError"]

class NVDevice(RMClient, DeviceMemory, ChannelSet, PeerMappings, HCQDevice):
  """One NVIDIA GPU (NV, NV:n) as an HCQ device: RM calls (RMClient), memory (DeviceMemory) and channels (ChannelSet)
  from the modules beside this one; opening, recovery after a channel error and host waits here."""
  has_local, has_threads = True, True
  max_local_size, max_shared_mem = (1024, 1024, 64), 227 << 10
  ticks_per_us = 1000.0  # the GPU's global timer counts nanoseconds
  gpfifo_entries, cmd_ring_bytes = 1024, 1 << 20

  def __init__(self, device: str, port: Any = None) -> None:
    if port is None:
      # one port (one kernel) for every device opened without one (peer.py); MOCKGPU=1: the mock GPUs (MOCKGPU_ARCH,
      # MOCKGPU_COUNT: generation, number of GPUs), one mock kernel for them all
      try: port = shared_port(lambda: driver_port("NV"))
      except ValueError as e: raise DeviceUnavailable(f"{device}: mock GPU: {e}") from None
    self.port, self.closed = port, False
    self.index = int(device.split(":")[-1]) if device.split(":")[-1].isdigit() else 0
    self.memories: list[NVMemory] = []
    self.qmd_kernels: dict[int, str] = {}   # QMD address -> the kernel last launched with it
    self.channels: dict[str, NVChannel] = {}
    self._fds: list[int] = []
    try: self.fd_ctl = self._open("/dev/nvidiactl")
    except FileNotFoundError:
      raise DeviceUnavailable(f"{device}: /dev/nvidiactl not found (no NVIDIA kernel driver loaded here); set MOCKGPU=1 for the mock GPU") from None
    except PermissionError as e: raise DeviceUnavailable(f"{device}: cannot open /dev/nvidiactl: {e}") from None
    try: self._init_rm(device)
    except BaseException:
      self._abandon()
      raise
    self.is_mock = hasattr(getattr(port, "inner", port), "mock")
    renderer, compiler = _toolchain(self.arch)
    renderer.compute_units = self.sm_count   # the optimizer spreads long reductions over every SM
    self.compiler_ok = getattr(compiler, "ptxas", None) is not None
    self.local_mem: NVMemory | None = None
    self.local_per_thread = 0
    self.notifier_mem: NVMemory | None = None
    self.klog: KernelLog | None = None
    self.launch_scratch = LaunchScratch(self)   # per-launch global scratch (device-built tensor maps)
    try:
      super().__init__(device, None, renderer, compiler, NVProgram, NVComputeQueue, NVCopyQueue,
                       kernargs_size=1 << 20, signal_pool_size=64 << 10)
      for m in self.memories:  # name what HCQDevice allocated, for fault reports
        if m.va == self.signal_pool.va_addr: m.what = "signal pool"
        if m.va == self.kernargs.va_addr: m.what = "kernel args ring"
      self.allocator = NVAllocator(self)
      self._init_channels()
      if (d := knobs.read("NV_CAPTURE")): self.capture = CaptureWriter(d, "NV", self.arch, device)
    except BaseException:
      self._abandon()
      raise
    self.klog = KernelLog(self.port)  # from here on: the kernel log's new lines are ours to decode after a channel error

  def _abandon(self) -> None:
    """A failed open gives back what it took: the RM client (and so every object under it), the fds, the window."""
    try: self._teardown_channels()
    except Exception: pass
    if getattr(self, "root", None):
      try: self.rm_free(self.root)
      except Exception: pass
    for fd in self._fds:
      try: self.port.close(fd)
      except Exception: pass
    self._fds.clear()
    if getattr(self, "window", None):
      try: self.port.munmap(*self.window)
      except OSError: pass

  # ---------------------------------------------------------------- opening
  def _init_rm(self, device: str) -> None:
    base = nv_580  # the version query's layout is the same in every branch
    q = base.nv_ioctl_rm_api_version_t(cmd=base.NV_RM_API_VERSION_CMD_QUERY)
    self._esc(self.fd_ctl, base.NV_ESC_CHECK_VERSION_STR, q, "NV_ESC_CHECK_VERSION_STR")
    self.driver_version = bytes(q.versionString).split(b"\0")[0].decode()
    try: self.nv = nv = pick_nv_module(self.driver_version)
    except UnsupportedDriverVersion as e: raise DeviceUnavailable(f"{device}: {e}") from None
    register_ioctls(nv)
    cards = (nv.nv_ioctl_card_info_t * 32)()
    self._esc(self.fd_ctl, nv.NV_ESC_CARD_INFO, cards, "NV_ESC_CARD_INFO")
    gpus = [c for c in cards if c.valid]
    if self.index >= len(gpus): raise DeviceUnavailable(f"{device}: the NVIDIA driver reports {len(gpus)} GPU(s)")
    card = gpus[self.index]
    self.fd_uvm = self._open("/dev/nvidia-uvm")
    self.fd_uvm2 = self._open("/dev/nvidia-uvm")
    self.uvm(nv.UVM_INITIALIZE, nv.UVM_INITIALIZE_PARAMS(), "UVM_INITIALIZE")
    self.uvm(nv.UVM_MM_INITIALIZE, nv.UVM_MM_INITIALIZE_PARAMS(uvmFd=self.fd_uvm), "UVM_MM_INITIALIZE", fd=self.fd_uvm2)
    self.dev_path = f"/dev/nvidia{card.minor_number}"
    self.fd_dev = self._open(self.dev_path)
    self._esc(self.fd_dev, nv.NV_ESC_REGISTER_FD, nv.nv_ioctl_register_fd_t(ctl_fd=self.fd_ctl), "NV_ESC_REGISTER_FD")

    self.root = self.rm_alloc(0, nv.NV01_ROOT_CLIENT, root=0)
    self.nvdevice = self.rm_alloc(self.root, nv.NV01_DEVICE_0, nv.NV0080_ALLOC_PARAMETERS(
      deviceId=self.index, hClientShare=self.root, vaMode=nv.NV_DEVICE_ALLOCATION_VAMODE_MULTIPLE_VASPACES))
    self.subdevice = self.rm_alloc(self.nvdevice, nv.NV20_SUBDEVICE_0, nv.NV2080_ALLOC_PARAMETERS())
    gid = self.rm_control(self.subdevice, nv.NV2080_CTRL_CMD_GPU_GET_GID_INFO,
                          nv.NV2080_CTRL_GPU_GET_GID_INFO_PARAMS(flags=nv.NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY, length=16), "GPU_GET_GID_INFO")
    self.uuid = bytes(gid.data[:16])
    arch = self.rm_control(self.subdevice, nv.NV2080_CTRL_CMD_MC_GET_ARCH_INFO, nv.NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS(), "MC_GET_ARCH_INFO")
    info = (nv.NVXXXX_CTRL_XXX_INFO * 5)(*[nv.NVXXXX_CTRL_XXX_INFO(index=i) for i in (
      nv.NV2080_CTRL_GR_INFO_INDEX_SM_VERSION, nv.NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_GPCS, nv.NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_TPC_PER_GPC,
      nv.NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_SM_PER_TPC, nv.NV2080_CTRL_GR_INFO_INDEX_MAX_WARPS_PER_SM)])
    self.rm_control(self.subdevice, nv.NV2080_CTRL_CMD_GR_GET_INFO,
                    nv.NV2080_CTRL_GR_GET_INFO_PARAMS(grInfoListSize=5, grInfoList=ctypes.addressof(info)), "GR_GET_INFO")
    smv = info[0].data
    self.arch = hw.sm_from_version(smv)
    self.arch_id, self.sm_count = arch.architecture, info[1].data * info[2].data * info[3].data
    self.family = hw.ARCH_FAMILIES.get(arch.architecture)
    if self.family is None:
      _unavail(device, f"GPU architecture {arch.architecture:#x} (implementation {arch.implementation:#x}, {self.arch}) is not supported; "
                       f"supported: Ampere, Ada, Hopper, Blackwell ({', '.join(hw.ARCHS)})")
    if self.arch not in hw.ARCHS:
      _unavail(device, f"{self.family} GPU reports SM version {smv:#x} ({self.arch}), which this driver does not know; known: {', '.join(hw.ARCHS)}")
    cl = self.rm_control(self.nvdevice, nv.NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2, nv.NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS(), "GPU_GET_CLASSLIST_V2")
    classes = set(cl.classList[:cl.numClasses])
    pick = lambda cands, what: next((c for c in cands if c in classes), None) or _unavail(device, f"the GPU offers no {what} class we know")
    self.gpfifo_class, self.compute_class, self.dma_class = (pick(hw.GPFIFO_CLASSES, "GPFIFO channel"), pick(hw.COMPUTE_CLASSES, "compute"),
                                                             pick(hw.DMA_CLASSES, "DMA copy"))
    self.qmd_version = hw.QMD_VERSION[self.compute_class]      # v03 Ampere/Ada, v04 Hopper, v05 Blackwell
    try:
      self.windows = hw.shader_windows(self.compute_class)       # 32-bit windows on Ampere/Ada, 64-bit on Hopper+
      self.cb_layout = hw.cbank0_layout(self.arch)               # what the SASS reads from constant bank 0
    except ValueError as e: _unavail(device, str(e))
    self.param_off = self.cb_layout.params                       # constant-bank offset of kernel parameters
    self.generation = hw.ARCHS[self.arch]
    self.max_shared_mem = self.generation.max_shared
    self.max_warps_per_sm, self.sm_per_tpc, self.tpc_count = max(info[4].data, 1), max(info[3].data, 1), info[1].data * info[2].data
    self.usermode = self.rm_alloc(self.subdevice, next((c for c in hw.USERMODE_CLASSES if c in classes), hw.TURING_USERMODE_A))
    self.usermode_cpu = self._map_to_cpu(self.usermode, hw.USERMODE_SIZE, aperture=True)
    self.doorbell_addr = self.usermode_cpu + hw.NVC361_NOTIFY_CHANNEL_PENDING
    if (watch := getattr(self.port, "watch_doorbell", None)) is not None: watch(self.doorbell_addr, self._doorbell_words)
    self.vaspace = self.rm_alloc(self.nvdevice, nv.FERMI_VASPACE_A, nv.NV_VASPACE_ALLOCATION_PARAMETERS(
      vaBase=0x1000, vaSize=0x1fffffb000000,
      flags=nv.NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING | nv.NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED))
    reg = nv.UVM_REGISTER_GPU_PARAMS(rmCtrlFd=-1)
    ctypes.memmove(reg.gpu_uuid.uuid, self.uuid, 16)
    self.uvm(nv.UVM_REGISTER_GPU, reg, "UVM_REGISTER_GPU")
    rv = nv.UVM_REGISTER_GPU_VASPACE_PARAMS(rmCtrlFd=self.fd_ctl, hClient=self.root, hVaSpace=self.vaspace)
    ctypes.memmove(rv.gpuUuid.uuid, self.uuid, 16)
    self.uvm(nv.UVM_REGISTER_GPU_VASPACE, rv, "UVM_REGISTER_GPU_VASPACE")
    # reserve a host-visible window below 2**40 (fails cleanly where anything, e.g. another device, already lives)
    size = CPU_WINDOW[1]
    base = reserve_window(self.port, CPU_WINDOW[0], size, 1 << 40)
    if base is None: raise DeviceUnavailable(f"{device}: no free {size:#x}-byte host address window below 2**40 for GPU-visible memory")
    self.window = (base, size)
    # device-only VAs: a separate window per GPU index, so two GPUs' allocations never share an address in this process
    gbase = GPU_WINDOW[0] + self.index * GPU_WINDOW[1]
    self.cpu_va, self.gpu_va = VAAllocator(*self.window), VAAllocator(gbase, GPU_WINDOW[1])

  def _doorbell_words(self, token: int) -> str:
    """What a ring of the doorbell with work-submit token `token` submitted (IOCTL_TRACE): that channel's new entries."""
    ch = next((c for c in self.channels.values() if c.token == token), None)
    return ch.submitted(ch.put) if ch is not None else f"    (token {token:#x} names no channel of {self.device})"

  def _recover(self) -> None:
    """After a channel error: new channels (RM does not run an errored channel again), the buffers as they were; the
    work that was in flight is lost, so the timeline is advanced to what was submitted."""
    self._recovering = True
    try:
      self._teardown_channels()
      self._init_channels()
    finally: self._recovering = False
    self.timeline_signal.value = self.timeline_value - 1
    with self._lock: self._kernargs_off = 0
    self.launch_scratch.reset()

  def _signal_written(self) -> None:
    if self.channels and not self.closed: self._kick()

  def _check_fault(self) -> None:
    """A channel error in the notifier: read and decode the kernel log, rebuild the channels, raise NVChannelError."""
    nm = self.notifier_mem
    if nm is None or getattr(self, "_recovering", False): return
    n = hw.NVNotification.from_address(nm.cpu)
    if n.status != 0xFFFF: return
    xid, state = n.info32, self.queue_state()
    tokens = {c.token for c in self.channels.values()}
    reports, others = [], []
    if self.klog is not None and self.klog.fd is not None:
      deadline = time.perf_counter() + 0.5  # RM prints the line as it posts the notifier; give the log a moment
      lines: list[str] = []
      while True:
        lines += self.klog.new_lines(lambda s: "NVRM" in s)
        mine, others = attribute(lines, tokens)
        if any(r.channel is not None for r in mine) or time.perf_counter() > deadline: break
        time.sleep(0.01)
      reports = [decode_xid(r, self.memories, self.qmd_kernels) for r in mine]
    note = (self.klog.unreadable if self.klog is not None and self.klog.unreadable else "no Xid line for this device's channels")
    self._recover()
    raise NVChannelError(self.device, xid, reports + others, f"unreadable: {note}" if self.klog is None or self.klog.unreadable else note, state)

  SPIN_S = 200e-6   # a host wait polls this long before it sleeps
  def _wait_signal(self, sig: HCQSignal, value: int, timeout_s: float, final: bool = True) -> bool:
    # a tiny kernel finishes within microseconds of its launch, and the shortest sleep lasts ~60 us (the kernel's timer
    # slack): poll first, sleep with growing pauses after (a fault is seen there, at most SPIN_S late)
    now, v = time.perf_counter, sig._v
    if v.value < value:
      self._kick()   # (the GPU re-reads what it waits on; a mock GPU runs what was rung)
      spin = now() + self.SPIN_S
      while v.value < value and now() < spin: pass
    deadline, delay = now() + timeout_s, 1e-5
    while v.value < value:
      self._check_fault()
      if now() > deadline: return False
      time.sleep(delay)
      delay = min(delay * 2, 2e-3)
      self._kick()
    return True

  def synchronize(self, timeout_ms: int | None = None) -> None:
    if self.closed: return
    if self.channels and self.timeline_value > 1: super().synchronize(timeout_ms)
    self._drain_channels(timeout_ms)

  def close(self) -> None:
    if self.closed: return
    try: self.synchronize(timeout_ms=1000)
    except Exception: pass
    self.closed = True
    try: self._teardown_channels()  # UVM_UNREGISTER_CHANNEL before the channels go
    except Exception: pass
    for m in self.memories:   # peers unmap this GPU's memory before RM frees it (peer.py)
      if getattr(m, "peers", None): self._unmap_from_peers(m)
    try: self.rm_free(self.root)  # freeing the client frees every object under it
    except Exception: pass
    if self.klog is not None: self.klog.close()
    for fd in self._fds: self.port.close(fd)
    self._fds.clear()
    self.channels.clear()
    try: self.port.munmap(*self.window)  # every host-visible mapping lived in the window
    except OSError: pass
    from baregrad.hal import Device
    Device.forget(self.device, self)


def _toolchain(arch: str) -> tuple[Any, Any]:
  """The renderer and compiler for a GPU of `arch`; NV_SM90A=1 makes a Hopper's target sm_90a (wgmma: PTX ISA 9.7.15;
  sm_90a code runs on compute capability 9.0 only, which that GPU is)."""
  from baregrad.codegen.renderer.ptx import PTXRenderer
  target = "sm_90a" if arch == "sm_90" and knobs.read("NV_SM90A") else arch
  return PTXRenderer(target, shared_max=hw.ARCHS[arch].max_shared if arch in hw.ARCHS else 0), NVCompiler(target)

def _unavail(device: str, why: str) -> Any: raise DeviceUnavailable(f"{device}: {why}")
