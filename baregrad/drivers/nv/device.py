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
images follow what each generation's hardware and compiled code expect (hw.py: SHADER_WINDOWS, CBANK0, PROGRAM_GUARD).

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
(sm_80, sm_86, sm_89, sm_90, sm_100, sm_120) and so the constant-bank offset of kernel parameters (0x160 / 0x210 /
0x380), the classlist the GPFIFO, compute and copy classes (newest known first), and the compute class the QMD
version (v03 Ampere/Ada, v04 Hopper, v05 Blackwell: hw.QMD_VERSION).

Several GPUs: NV:<n> opens the n-th GPU NV_ESC_CARD_INFO lists (its /dev/nvidia<minor>, NV01_DEVICE_0 deviceId n),
with its own RM client, VA space, channels and a device-only VA window of its own.

MOCKGPU=1 runs against baregrad.drivers.mock.nv.MockNVGPU through the port (MOCKGPU_ARCH=sm_80..sm_120 picks the
generation, MOCKGPU_COUNT=n the number of GPUs); IOCTL_TRACE=1 prints every call."""
from __future__ import annotations
import ctypes, errno, os, re, threading, time
from array import array
from collections import deque
from typing import Any, Hashable, Sequence
from baregrad.helpers import c_array
from baregrad.hal import OutOfMemory, DeviceUnavailable, Compiler, profile
from baregrad.hcq import HCQArgsState, HCQBuffer, HCQDevice, HCQProgram, HCQAllocator, HWQueue, HCQSignal
from baregrad.hcq.queue import _dims
from baregrad.drivers.port import IoctlError, make_port, register_ioctl, describe
from baregrad.ctypes_autogen.nv import pick_nv_module, UnsupportedDriverVersion, nv_580
from baregrad.drivers.nv import hw
from baregrad.drivers.nv.faults import KernelLog, NVChannelError, attribute, decode as decode_xid

O_RDWR, O_CLOEXEC = os.O_RDWR, getattr(os, "O_CLOEXEC", 0o2000000)
PROT_NONE, PROT_RW = 0, 3
MAP_SHARED, MAP_PRIVATE, MAP_FIXED, MAP_ANON, MAP_NORESERVE, MAP_FIXED_NOREPLACE = 0x01, 0x02, 0x10, 0x20, 0x4000, 0x100000
PAGE = 4096
CPU_WINDOW = (0x20_0000_0000, 0x10_0000_0000)   # (base, size): host-visible GPU memory, below 2**40 (GPFIFO entries)
GPU_WINDOW = (0x1000_0000_0000, 0x100_0000_0000)  # device-only memory
# VA UVM_REGISTER_CHANNEL may place one channel's RM buffers (GR context, patch, page pool, ...) in: 64 MiB as in the
# H100 run; taken from the window below 2**40 because UVM refuses ranges ending at or above max_channel_va, which is
# 2**40 on Ampere/Ada (kernel-open/nvidia-uvm/uvm_ampere.c, uvm_ada.c) and 2**57 on Hopper/Blackwell
CHANNEL_VA_BYTES = 64 << 20

class RMError(IoctlError):
  """An RM or UVM call that the kernel accepted but that returned an error status: names the call, the status and
  the parameters."""
  def __init__(self, name: str, status: int, params: str, detail: str = "") -> None:
    self.name, self.err, self.status, self.status_name = name, errno.EIO, status, hw.status_name(status)
    msg = f"{name} failed: {self.status_name} ({status:#x})" + (f": {detail}" if detail else "") + f"\n  parameters: {params}"
    OSError.__init__(self, errno.EIO, msg)
  def __str__(self) -> str: return self.args[1]

def _rup(x: int, a: int) -> int: return (x + a - 1) // a * a

class VAAllocator:
  """First-fit allocator of virtual address ranges in [base, base + size)."""
  def __init__(self, base: int, size: int) -> None:
    self.free: list[tuple[int, int]] = [(base, size)]
    self.lock = threading.Lock()
  def alloc(self, size: int, align: int = PAGE) -> int:
    with self.lock:
      for i, (b, s) in enumerate(self.free):
        a = _rup(b, align)
        if a + size <= b + s:
          rest = [(b, a - b)] if a > b else []
          if a + size < b + s: rest.append((a + size, b + s - a - size))
          self.free[i:i + 1] = rest
          return a
    raise MemoryError(f"out of GPU virtual address space for {size:#x} bytes")
  def release(self, addr: int, size: int) -> None:
    with self.lock:
      self.free.append((addr, size))
      self.free.sort()
      merged: list[tuple[int, int]] = []
      for b, s in self.free:
        if merged and merged[-1][0] + merged[-1][1] == b: merged[-1] = (merged[-1][0], merged[-1][1] + s)
        else: merged.append((b, s))
      self.free = merged

class NVMemory:
  """What the driver keeps per RM memory object; `what` names it in fault reports."""
  def __init__(self, handle: int, size: int, va: int, cpu: int | None, host: bool, what: str = "buffer") -> None:
    self.handle, self.size, self.va, self.cpu, self.host, self.what = handle, size, va, cpu, host, what
  def __repr__(self) -> str: return f"<NVMemory {self.what} {self.handle:#x} va={self.va:#x} size={self.size:#x}{' host' if self.host else ''}>"

# ---------------------------------------------------------------- queues
class NVComputeQueue(HWQueue):
  """Launches of one queue run concurrently on the GPU unless a wait-for-idle separates them (finding 6b): signals and
  timestamps release after WFI, memory_barrier() is WFI + MEMBAR; put one between launches that depend on each other.
  A QMD launched again while its previous launch may still run took the H100's channel down (finding 6a, Xid 109), so
  exec() of args already launched since the last WFI in this queue puts a WFI before it."""
  engine = "compute"
  def __init__(self) -> None:
    super().__init__()
    self._launched: set[int] = set()  # QMD addresses launched since the last wait-for-idle in this queue
  def _enc_wait(self, addr: int, value: int) -> Any: return hw.sem_words(addr, value, hw.SEM_EXEC_ACQUIRE_GEQ), _SEM_FIELDS
  def _enc_signal(self, addr: int, value: int) -> Any:
    self._launched.clear()  # the release waits for idle
    return hw.sem_words(addr, value, hw.SEM_EXEC_RELEASE), _SEM_FIELDS
  def _enc_timestamp(self, addr: int) -> Any:
    self._launched.clear()
    return hw.sem_words(addr - 8, 0, hw.SEM_EXEC_TIMESTAMP), _TS_FIELDS
  def _enc_memory_barrier(self) -> Any:
    self._launched.clear()
    return hw.membar_words(), {}
  def _enc_copy(self, dest: int, src: int, nbytes: int) -> Any:
    if not 0 <= nbytes < (1 << 32): raise ValueError(f"copy of {nbytes} bytes: LINE_LENGTH_IN holds 32 bits; split the copy")
    return hw.copy_words(dest, src, nbytes), _COPY_FIELDS
  def _enc_exec(self, prg: Any, args_state: HCQArgsState, gs: tuple[int, int, int], ls: tuple[int, int, int]) -> Any:
    """The QMD lives in the args memory (written here; update_exec rewrites it); the pushbuffer points the compute
    engine at it. Fields: qmd (the QMD address, shifted 8, as SEND_PCAS_A carries it)."""
    assert isinstance(args_state, NVArgsState), "NV exec needs args from NVProgram.fill_kernargs"
    pre = []
    if args_state.qmd_va in self._launched:
      pre = hw.wfi_words()
      self._launched.clear()
    self._launched.add(args_state.qmd_va)
    args_state.write_qmd(gs, ls)
    return pre + hw.launch_words(prg.dev.compute_class, args_state.qmd_va), {"qmd": (len(pre) + 3, 1)}
  def update_exec(self, i: int, global_size: Sequence[int] | None = None, local_size: Sequence[int] | None = None) -> HWQueue:
    self._check(i, "exec")
    args: NVArgsState = self._refs[(i % len(self.cmds), "args")]
    gs = args.grid if global_size is None else _dims(global_size, "global_size")
    ls = args.block if local_size is None else _dims(local_size, "local_size")
    args.write_qmd(gs, ls)
    return self
  def _submit(self, dev: Any) -> None: dev.channels[self.engine].submit(self.words)

class NVCopyQueue(NVComputeQueue):
  engine = "copy"
  def _enc_exec(self, *a: Any) -> Any: raise NotImplementedError("the NV copy queue cannot execute kernels; use the compute queue")

_SEM_FIELDS = {"addr": (1, 2), "value": (3, 2)}
_TS_FIELDS = {"addr": (1, 2)}
_COPY_FIELDS = {"src": (1, 2, True), "dest": (3, 2, True), "nbytes": (6, 1)}

class NVChannel:
  """One GPFIFO channel: its ring of GPFIFO entries, USERD, a command ring the pushbuffers are copied into, doorbell."""
  def __init__(self, dev: NVDevice, name: str, handle: int, gpfifo: NVMemory, ring_off: int, entries: int, userd_off: int,
               cmd: NVMemory, token: int, uvm_va: int) -> None:
    self.dev, self.name, self.handle, self.entries, self.token, self.cmd = dev, name, handle, entries, token, cmd
    self.uvm_va = uvm_va  # the VA range UVM_REGISTER_CHANNEL was given (0 while not registered)
    assert gpfifo.cpu is not None and cmd.cpu is not None
    self.ring = (ctypes.c_uint64 * entries).from_address(gpfifo.cpu + ring_off)
    self.gp_put_p = ctypes.c_uint32.from_address(gpfifo.cpu + userd_off + hw.USERD_GP_PUT)
    self.gp_get_p = ctypes.c_uint32.from_address(gpfifo.cpu + userd_off + hw.USERD_GP_GET)
    self.put = 0
    self.cmd_off = 0
    self.inflight: deque[tuple[int, int, int]] = deque()  # (GPFIFO index, command ring offset, words) submitted
    self.lock = threading.Lock()

  def _done(self, idx: int) -> bool:
    """Has the GPU fetched past GPFIFO entry idx? (GP_GET is the next entry it will read)"""
    get = self.gp_get_p.value
    return (idx - get) % self.entries >= (self.put - get) % self.entries

  def _place(self, nbytes: int) -> int | None:
    """Command ring offset for nbytes, or None while unfinished pushbuffers occupy it. They were placed in order, so
    they lie between the oldest one's offset (head) and cmd_off (tail), possibly wrapped: one comparison, not one per
    pushbuffer in flight (a long queue behind a slow kernel made every submission walk all of them)."""
    tail, size = self.cmd_off, self.cmd.size
    if not self.inflight: return tail if tail + nbytes <= size else 0
    head = self.inflight[0][1]
    if tail > head: return tail if tail + nbytes <= size else (0 if nbytes <= head else None)
    return tail if tail + nbytes <= head else None

  def submit(self, words: Any) -> None:
    n = len(words)
    nbytes = 4 * n
    if nbytes > self.cmd.size: raise ValueError(f"pushbuffer of {nbytes} bytes exceeds the {self.name} command ring ({self.cmd.size} bytes)")
    with self.lock:
      deadline = time.perf_counter() + self.dev.default_timeout_ms / 1000
      while True:
        while self.inflight and self._done(self.inflight[0][0]): self.inflight.popleft()
        if (off := self._place(nbytes)) is not None and (self.put + 1 - self.gp_get_p.value) % self.entries != 0: break
        self.dev._check_fault()
        if time.perf_counter() > deadline:
          raise RuntimeError(f"{self.dev.device} {self.name} channel: no room in the command ring or GPFIFO\n{self.dev.queue_state()}")
        self.dev._kick()
        time.sleep(1e-4)
      ctypes.memmove(self.cmd.cpu + off, words.buffer_info()[0], nbytes)
      self.ring[self.put] = hw.gp_entry(self.cmd.va + off, n)
      self.inflight.append((self.put, off, n))
      self.cmd_off = off + nbytes
      self.put = (self.put + 1) % self.entries
      self.gp_put_p.value = self.put
      self.dev.port.doorbell(self.dev.doorbell_addr, self.token)

  def state(self) -> str:
    get, put = self.gp_get_p.value, self.gp_put_p.value
    s = f"  {self.name} channel (token {self.token}): GP_GET {get} GP_PUT {put}" + (" (idle)" if get == put else f" ({(put - get) % self.entries} entries pending)")
    classes = {hw.SUBC_COMPUTE: self.dev.compute_class, hw.SUBC_COPY: self.dev.dma_class}
    shown = [e for e in self.inflight if not self._done(e[0])][:2] or list(self.inflight)[-1:]
    userd = ctypes.addressof(self.gp_get_p) - hw.USERD_GP_GET
    pb_get = ctypes.c_uint32.from_address(userd + hw.USERD_GET).value | (ctypes.c_uint32.from_address(userd + hw.USERD_GET_HI).value << 32)
    for idx, off, n in shown:
      words = (ctypes.c_uint32 * n).from_address(self.cmd.cpu + off)[:]
      cur = "pending" if not self._done(idx) else "last completed"
      seg = self.cmd.va + off
      mark = (pb_get - seg) // 4 if not self._done(idx) and idx == get and seg <= pb_get < seg + 4 * n else None
      s += f"\n  GPFIFO entry {idx} ({cur}): {n} words at {seg:#x}" + (f", the GPU is at {pb_get:#x}" if mark is not None else "")
      s += "\n" + hw.format_commands(words, classes, mark)
      if not self._done(idx) and idx == get: s += "\n" + hw.format_methods(words, classes, mark, base=seg)
    return s

# ---------------------------------------------------------------- program, allocator
_PTX_SIZES = {"u8": 1, "s8": 1, "b8": 1, "u16": 2, "s16": 2, "b16": 2, "f16": 2, "bf16": 2, "u32": 4, "s32": 4, "b32": 4, "f32": 4,
              "u64": 8, "s64": 8, "b64": 8, "f64": 8}
LIB_MAGIC = b"BGNVLIB1"

def pack_lib(ptx: str, cubin: bytes) -> bytes:
  """What NVCompiler produces: the cubin (the GPU's code) and the PTX it came from (what the mock GPU runs)."""
  import struct
  t = ptx.encode()
  return LIB_MAGIC + struct.pack("<II", len(cubin), len(t)) + cubin + t

def unpack_lib(lib: bytes) -> tuple[str, bytes]:
  """(PTX text, cubin or b"") from NVCompiler output, or from plain PTX text."""
  import struct
  if lib.startswith(LIB_MAGIC):
    nc, nt = struct.unpack_from("<II", lib, len(LIB_MAGIC))
    o = len(LIB_MAGIC) + 8
    return lib[o + nc:o + nc + nt].decode(), lib[o:o + nc]
  text = lib.decode(errors="replace")
  if ".entry" not in text: raise ValueError("NV program: expected NVCompiler output or PTX text (no .entry found)")
  return text, b""

def ptx_params(ptx: str, name: str) -> list[tuple[int, int]]:
  """(offset, size) of each .param of entry `name`, naturally aligned, from the PTX declaration."""
  import re
  m = re.search(r"\.entry\s+" + re.escape(name) + r"\s*\(([^)]*)\)", ptx)
  if m is None: raise ValueError(f"no .entry {name} in the PTX")
  out, off = [], 0
  for t in re.findall(r"\.param\s+(?:\.align\s+\d+\s+)?\.(\w+)", m.group(1)):
    sz = _PTX_SIZES.get(t, 8)
    off = _rup(off, sz)
    out.append((off, sz))
    off += sz
  return out

_PTX_DECL = re.compile(r"\.(shared|local)\s+(?:\.align\s+(\d+)\s+)?\.(\w+)\s+[\w$]+\s*(?:\[(\d*)\])?")

def ptx_storage(ptx: str, name: str) -> tuple[int, int]:
  """(static .shared bytes, .local bytes) an entry of `ptx` declares (module-scope .shared counts for every entry):
  the sizes to launch with when there is no cubin to read them from."""
  m = re.search(r"\.entry\s+" + re.escape(name) + r"\b", ptx)
  if m is None: return 0, 0
  end = ptx.find(".entry", m.end())
  body, head = ptx[m.end():end if end >= 0 else len(ptx)], ptx[:ptx.find(".entry")]
  size = {"shared": 0, "local": 0}
  for scope, src in ((("shared",), head), (("shared", "local"), body)):
    for d in _PTX_DECL.finditer(src):
      if d.group(1) not in scope or d.group(4) == "": continue
      sz = _PTX_SIZES.get(d.group(3), 1) * (int(d.group(4)) if d.group(4) else 1)
      size[d.group(1)] = _rup(size[d.group(1)], int(d.group(2) or 1)) + sz
  return size["shared"], size["local"]

class NVArgsState(HCQArgsState):
  """Args memory of one launch: [pad to 256][QMD 0x180, pad to 0x200][constant bank 0: the launch header below the
  parameters (hw.cbank0_header: block and grid dimensions, windows, stack pointer, ...), then the parameters]. Each
  launch in flight owns its QMD and constant bank: never rewrite them while a launch that reads them may be queued."""
  def __init__(self, cpu_addr: int, va_addr: int, prg: NVProgram, bufs: Sequence[Any], vals: Sequence[int]) -> None:
    super().__init__(cpu_addr, va_addr, prg, bufs, vals)
    pad = -va_addr % 256
    self.qmd_va, self.qmd_cpu = va_addr + pad, cpu_addr + pad
    self.cb_va, self.cb_cpu = self.qmd_va + 0x200, self.qmd_cpu + 0x200
    self.grid, self.block = (1, 1, 1), (1, 1, 1)
    if len(self.bufs) + len(self.vals) != len(prg.params):
      raise ValueError(f"{prg.name} takes {len(prg.params)} parameters, got {len(self.bufs)} buffers and {len(self.vals)} values")
    ctypes.memset(self.cb_cpu, 0, prg.param_off)
    for i, b in enumerate(self.bufs): self._put(i, b.va_addr)
    for i, v in enumerate(self.vals): self._put(len(self.bufs) + i, v)
  def _put(self, i: int, v: int) -> None:
    off, sz = self.prg.params[i]
    ctypes.memmove(self.cb_cpu + self.prg.param_off + off, (v & ((1 << (8 * sz)) - 1)).to_bytes(sz, "little"), sz)
  def update_buffer(self, i: int, addr: int) -> None:
    if not 0 <= i < len(self.bufs): raise IndexError(f"buffer {i} out of range: kernel has {len(self.bufs)} buffers")
    self._put(i, addr)
  def update_var(self, i: int, value: int) -> None:
    if not 0 <= i < len(self.vals): raise IndexError(f"var {i} out of range: kernel has {len(self.vals)} vars")
    self._put(len(self.bufs) + i, value)
  def write_qmd(self, gs: tuple[int, int, int], ls: tuple[int, int, int]) -> None:
    prg, dev = self.prg, self.prg.dev
    self.grid, self.block = gs, ls
    # a kernel's launches of one geometry share their QMD and constant bank header but for the bank's address: both
    # are made once per geometry (build_qmd is ~30 us of Python), copied, and the address patched
    key = (gs, ls, prg.code_va, prg.shared_total, prg.local_bytes, prg.regs)   # (everything the QMD is made of)
    if (t := prg.launch_templates.get(key)) is None:
      if prod3(ls) > 1024 or prod3(ls) == 0: raise ValueError(f"local_size {ls}: 1..1024 threads per block")
      if prod3(gs) == 0: raise ValueError(f"global_size {gs} is empty")
      hdr = hw.cbank0_header(dev.arch, gs, ls, dev.windows, 0)
      if prg.shared_total == 0: hdr = _put_u32(hdr, dev.cb_layout.reserved_shared, 0)  # nothing reserved when no shared memory
      w = hw.build_qmd(prg.code_va, 0, prg.param_off + prg.param_size, gs, ls, prg.shared_total, prg.regs,
                       version=dev.qmd_version, local=prg.local_bytes, max_shared=dev.max_shared_mem)
      w += [0] * (hw.QMD_BYTES // 4 - len(w))
      if len(prg.launch_templates) >= 64: prg.launch_templates.clear()
      t = prg.launch_templates[key] = (hdr, bytes(array("I", w)))
    hdr, qmd = t
    ctypes.memmove(self.cb_cpu, hdr, len(hdr))
    ctypes.memmove(self.qmd_cpu, qmd, len(qmd))
    lo, lo_v, hi, hi_v, hi_mask = hw.qmd_cbank0_words(dev.qmd_version, self.cb_va)
    q = c_array(ctypes.c_uint32, hw.QMD_BYTES // 4).from_address(self.qmd_cpu)
    q[lo], q[hi] = lo_v, (q[hi] & ~hi_mask) | hi_v
    dev.qmd_kernels[self.qmd_va] = prg.name   # for a fault that names the QMD (the SKED's ESR)

def _put_u32(b: bytes, off: int, v: int) -> bytes: return b[:off] + v.to_bytes(4, "little") + b[off + 4:]

def prod3(t: Sequence[int]) -> int: return t[0] * t[1] * t[2]

class NVProgram(HCQProgram):
  """A kernel: its code uploaded to GPU memory in an image that also holds the PTX (the mock GPU runs that), followed by
  hw.PROGRAM_GUARD bytes for the instruction prefetch (finding 4)."""
  args_state_t = NVArgsState
  def __init__(self, dev: NVDevice, name: str, lib: bytes) -> None:
    super().__init__(dev, name, lib)
    ptx, cubin = unpack_lib(lib)
    if not cubin and dev.compiler_ok:  # plain PTX: assemble it for the real GPU's sake when ptxas is here
      try: cubin = unpack_lib(dev.compiler.compile(ptx))[1]
      except Exception: cubin = b""
    if not cubin and not dev.is_mock:
      raise RuntimeError(f"NV program {name}: no cubin (ptxas not available) and a real GPU cannot run PTX text")
    self.ptx, self.param_off, self.regs, self.local_bytes = ptx, dev.param_off, 32, 0
    self.launch_templates: dict[tuple, tuple[bytes, bytes]] = {}   # geometry, sizes -> (cbank0 header, QMD): write_qmd
    code = b""
    self.params = ptx_params(ptx, name)
    # without a cubin (the mock, no ptxas) the sizes come from the PTX's declarations
    static, frame = ptx_storage(ptx, name)
    shared = dev.cb_layout.shared_base + static if static else 0
    if frame: self.local_bytes = _rup(frame + hw.STACK_TOP_RESERVE, 16)
    if cubin:
      from baregrad.drivers.nv_compile import parse_cubin
      info = parse_cubin(cubin)["kernels"].get(name)
      if info is None: raise ValueError(f"NV program: the cubin has no kernel {name}")
      code, self.regs, shared = info["code"], max(info["regs"], 16), info["shared"]
      if info["param_cbank"] is not None and info["param_cbank"][0] != dev.param_off:
        raise ValueError(f"NV program {name}: the cubin reads its parameters at c[0x0][{info['param_cbank'][0]:#x}], the "
                         f"{dev.arch} constant bank layout puts them at {dev.param_off:#x} (compiled for another arch?)")
      if info["params"]: self.params = [(o, sz) for _, o, sz in info["params"]]
      # the stack frame (local arrays, spills) sits below the initial stack pointer, hw.STACK_TOP_RESERVE under the top
      frame = max(info["frame"], info["min_stack"])
      self.local_bytes = _rup(frame + hw.STACK_TOP_RESERVE, 16) if frame else 0
    # the launch's shared memory is the cubin's .nv.shared size, which on sm_90+ counts the 1 KiB before the kernel's
    # own data (hw.CBank0Layout.shared_base)
    self.shared_total = shared
    if self.shared_total > dev.max_shared_mem:
      raise ValueError(f"NV program {name}: {shared} bytes of shared memory exceed the {dev.max_shared_mem} a block may use on {dev.arch}")
    self.param_size = max((o + s for o, s in self.params), default=0)
    image, code_off = hw.pack_image(ptx, name, code or b"\0" * 16)
    if self.local_bytes: dev._ensure_local_memory(self.local_bytes)
    # host-visible, written by the CPU: a copy-queue upload would not be ordered before a raw compute-queue launch
    self.image = dev._gpu_alloc(len(image) + hw.PROGRAM_GUARD, host=True, what=f"program image {name}")
    assert self.image.cpu is not None
    ctypes.memmove(self.image.cpu, image, len(image))
    self.code_va = self.image.va + code_off
  def kernargs_size(self, nbufs: int, nvals: int) -> int: return 256 + 0x200 + self.param_off + self.param_size
  def __call__(self, *bufs: Any, global_size: tuple[int, int, int] = (1, 1, 1), local_size: tuple[int, int, int] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    """A launch as HCQProgram makes it (wait for the timeline, exec, signal the next value), its pushbuffer written
    straight into one array instead of recorded in a queue object first; a timed launch (wait=True, PROFILE=1) takes
    the queue path with its timestamps."""
    if wait or profile.ON: return super().__call__(*bufs, global_size=global_size, local_size=local_size, vals=vals, wait=wait)
    dev = self.dev
    gs, ls = _dims(global_size, "global_size"), _dims(local_size, "local_size")
    args = self.fill_kernargs(bufs, vals)
    tl = dev.timeline_signal.va_addr
    with dev.submit_lock:
      args.write_qmd(gs, ls)
      words = array("I", hw.sem_words(tl, dev.timeline_value - 1, hw.SEM_EXEC_ACQUIRE_GEQ))
      words += array("I", hw.launch_words(dev.compute_class, args.qmd_va))
      words += array("I", hw.sem_words(tl, dev.next_timeline(), hw.SEM_EXEC_RELEASE))
      dev.channels["compute"].submit(words)
    return None
  def __del__(self) -> None:
    try:
      if not self.dev.closed:
        self.dev.synchronize()
        self.dev._gpu_free(self.image)
    except Exception: pass

class NVCompiler(Compiler):
  """PTX -> NVCompiler output (cubin from ptxas + the PTX); PTX alone when ptxas is missing (the mock runs it)."""
  def __init__(self, arch: str) -> None:
    from baregrad.hal import CompileError
    from baregrad.drivers.nv_compile import PTXCompiler
    try: self.ptxas: Any = PTXCompiler(arch)
    except CompileError as e: self.ptxas, self.reason = None, str(e)
    self.arch = arch
    super().__init__(f"nv_{arch}_{'ptxas' if self.ptxas is not None else 'ptxonly'}")
  def version(self) -> str: return self.ptxas.version() if self.ptxas is not None else "ptx-only"
  def compile(self, src: str) -> bytes: return pack_lib(src, self.ptxas.compile(src) if self.ptxas is not None else b"")

class NVAllocator(HCQAllocator):
  def _alloc(self, size: int, options: Hashable | None) -> HCQBuffer:
    host = bool(getattr(options, "host", False)) or options == "host"
    m = self.dev._gpu_alloc(size, host=host)
    return HCQBuffer(m.va, size, m.cpu, meta=m)
  def _free(self, opaque: HCQBuffer, size: int, options: Hashable | None) -> None:
    self.dev.synchronize()
    self.dev._gpu_free(opaque.meta)

# ---------------------------------------------------------------- device
class NVDevice(HCQDevice):
  has_local, has_threads = True, True
  max_local_size, max_shared_mem = (1024, 1024, 64), 227 << 10
  ticks_per_us = 1000.0  # the GPU's global timer counts nanoseconds
  gpfifo_entries, cmd_ring_bytes = 1024, 1 << 20

  def __init__(self, device: str, port: Any = None) -> None:
    if port is None:
      from baregrad.helpers import getenv
      if getenv("MOCKGPU", 0):
        from baregrad.drivers.mock.nv import MockNVGPU
        try: port = make_port(MockNVGPU())   # MOCKGPU_ARCH, MOCKGPU_COUNT pick the generation and the number of GPUs
        except ValueError as e: raise DeviceUnavailable(f"{device}: mock GPU: {e}") from None
      else: port = make_port()
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
    try:
      super().__init__(device, None, renderer, compiler, NVProgram, NVComputeQueue, NVCopyQueue,
                       kernargs_size=1 << 20, signal_pool_size=64 << 10)
      for m in self.memories:  # name what HCQDevice allocated, for fault reports
        if m.va == self.signal_pool.va_addr: m.what = "signal pool"
        if m.va == self.kernargs.va_addr: m.what = "kernel args ring"
      self.allocator = NVAllocator(self)
      self._init_channels()
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

  # ---------------------------------------------------------------- syscalls
  def _open(self, path: str) -> int:
    fd = self.port.open(path, O_RDWR | O_CLOEXEC)
    self._fds.append(fd)
    return fd

  def _esc(self, fd: int, nr: int, arg: Any, name: str) -> Any:
    self.port.ioctl(fd, self._req(nr, type(arg)), arg, name)
    return arg

  @staticmethod
  def _req(nr: int, t: type) -> int:
    from baregrad.ctypes_autogen import _support
    return _support.IOWR(nv_580.NV_IOCTL_MAGIC, nr, ctypes.sizeof(t))

  def _rm_call(self, nr: int, p: Any, name: str, wrapper: Any = None, detail: str = "") -> Any:
    self._esc(self.fd_ctl, nr, wrapper if wrapper is not None else p, name)
    if p.status != 0: raise RMError(name, p.status, describe(p), detail)
    return p

  def rm_alloc(self, parent: int, cls: int, params: Any = None, root: int | None = None, handle: int = 0) -> int:
    nv = self.nv
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
    p = nv.NVOS54_PARAMETERS(hClient=self.root, hObject=obj, cmd=cmd, params=ctypes.addressof(params), paramsSize=ctypes.sizeof(params))
    self._rm_call(nv.NV_ESC_RM_CONTROL, p, f"NV_ESC_RM_CONTROL({name})", detail=f"control {cmd:#x} on {obj:#x}: {describe(params)}")
    return params

  def uvm(self, request: int, params: Any, name: str, fd: int | None = None) -> Any:
    self.port.ioctl(self.fd_uvm if fd is None else fd, request, params, name)
    if params.rmStatus != 0: raise RMError(name, params.rmStatus, describe(params))
    return params

  # ---------------------------------------------------------------- opening
  def _init_rm(self, device: str) -> None:
    base = nv_580  # the version query's layout is the same in every branch
    q = base.nv_ioctl_rm_api_version_t(cmd=base.NV_RM_API_VERSION_CMD_QUERY)
    self._esc(self.fd_ctl, base.NV_ESC_CHECK_VERSION_STR, q, "NV_ESC_CHECK_VERSION_STR")
    self.driver_version = bytes(q.versionString).split(b"\0")[0].decode()
    try: self.nv = nv = pick_nv_module(self.driver_version)
    except UnsupportedDriverVersion as e: raise DeviceUnavailable(f"{device}: {e}") from None
    _register_ioctls(nv)
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
    self.param_off = hw.param_offset(self.arch)                  # constant-bank offset of kernel parameters
    if self.param_off != self.cb_layout.params:
      _unavail(device, f"{self.arch}: the PTX renderer puts parameters at {self.param_off:#x}, the constant bank 0 layout at {self.cb_layout.params:#x}")
    self.max_shared_mem = hw.ARCHS[self.arch].max_shared
    self.max_warps_per_sm, self.sm_per_tpc, self.tpc_count = max(info[4].data, 1), max(info[3].data, 1), info[1].data * info[2].data
    self.usermode = self.rm_alloc(self.subdevice, hw.HOPPER_USERMODE_A if hw.HOPPER_USERMODE_A in classes else hw.TURING_USERMODE_A)
    self.usermode_cpu = self._map_to_cpu(self.usermode, hw.USERMODE_SIZE, aperture=True)
    self.doorbell_addr = self.usermode_cpu + hw.NVC361_NOTIFY_CHANNEL_PENDING
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
    for base in range(CPU_WINDOW[0], 1 << 40, size):
      try: r = self.port.mmap(base, size, PROT_NONE, MAP_PRIVATE | MAP_ANON | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0)
      except OSError as e:
        if e.errno == errno.EEXIST: continue
        raise
      if r == base: break
      self.port.munmap(r, size)  # an old kernel took the flag as a hint
    else: raise DeviceUnavailable(f"{device}: no free {size:#x}-byte host address window below 2**40 for GPU-visible memory")
    self.window = (base, size)
    # device-only VAs: a separate window per GPU index, so two GPUs' allocations never share an address in this process
    gbase = GPU_WINDOW[0] + self.index * GPU_WINDOW[1]
    self.cpu_va, self.gpu_va = VAAllocator(*self.window), VAAllocator(gbase, GPU_WINDOW[1])

  def _map_to_cpu(self, handle: int, size: int, target: int = 0, aperture: bool = False) -> int:
    """NV_ESC_RM_MAP_MEMORY naming a fresh fd, then mmap of that fd (at `target` when given). System memory goes through
    /dev/nvidiactl, a BAR aperture (`aperture`: the usermode page) through this GPU's /dev/nvidiaN: see the module doc
    (finding 1). A fresh fd each time: an fd holds one mapping context (nv-usermap.c: NV_ERR_STATE_IN_USE otherwise)."""
    nv = self.nv
    from baregrad.drivers.nv.hw import nv_ioctl_nvos33_parameters_with_fd
    fd = self._open(self.dev_path if aperture else "/dev/nvidiactl")
    try:
      w = nv_ioctl_nvos33_parameters_with_fd(params=nv.NVOS33_PARAMETERS(hClient=self.root, hDevice=self.nvdevice, hMemory=handle, length=size), fd=fd)
      self._rm_call(nv.NV_ESC_RM_MAP_MEMORY, w.params, "NV_ESC_RM_MAP_MEMORY", wrapper=w,
                    detail=f"mapping {size:#x} bytes of {handle:#x} through {'/dev/nvidiactl' if not aperture else self.dev_path}")
      return self.port.mmap(target, size, PROT_RW, MAP_SHARED | (MAP_FIXED if target else 0), fd, 0)
    finally:
      self.port.close(fd)
      self._fds.remove(fd)

  # ---------------------------------------------------------------- memory
  def _gpu_alloc(self, size: int, host: bool = False, what: str = "buffer") -> NVMemory:
    nv = self.nv
    size = _rup(max(size, 1), PAGE if host or size < (2 << 20) else (2 << 20))
    align = PAGE if size < (2 << 20) else (2 << 20)
    attr = (nv.NVOS32_ATTR_LOCATION_PCI << 25) if host else (nv.NVOS32_ATTR_PHYSICALITY_ALLOW_NONCONTIGUOUS << 27)
    params = nv.NV_MEMORY_ALLOCATION_PARAMS(owner=self.root, type=nv.NVOS32_TYPE_NOTIFIER if host else nv.NVOS32_TYPE_IMAGE,
                                            attr=attr, size=size, alignment=align, limit=size - 1, format=6)
    try: handle = self.rm_alloc(self.nvdevice, nv.NV01_MEMORY_SYSTEM if host else nv.NV01_MEMORY_LOCAL_USER, params)
    except RMError as e:
      if e.status == nv.NV_ERR_NO_MEMORY:
        raise OutOfMemory(self.device, size, self.allocator.mem_used if getattr(self, "allocator", None) else 0,
                          f"RM {'system' if host else 'video'} memory allocation returned NV_ERR_NO_MEMORY") from None
      raise
    va_pool = self.cpu_va if host else self.gpu_va
    va = va_pool.alloc(size, align)
    cpu = None
    try:
      if host: cpu = self._map_to_cpu(handle, size, target=va)
      self.uvm(nv.UVM_CREATE_EXTERNAL_RANGE, nv.UVM_CREATE_EXTERNAL_RANGE_PARAMS(base=va, length=size), "UVM_CREATE_EXTERNAL_RANGE")
      mp = nv.UVM_MAP_EXTERNAL_ALLOCATION_PARAMS(base=va, length=size, rmCtrlFd=self.fd_ctl, hClient=self.root, hMemory=handle, gpuAttributesCount=1)
      ctypes.memmove(mp.perGpuAttributes[0].gpuUuid.uuid, self.uuid, 16)
      mp.perGpuAttributes[0].gpuMappingType = 1  # UvmGpuMappingTypeReadWriteAtomic
      self.uvm(nv.UVM_MAP_EXTERNAL_ALLOCATION, mp, "UVM_MAP_EXTERNAL_ALLOCATION")
    except BaseException:
      try: self.uvm(nv.UVM_FREE, nv.UVM_FREE_PARAMS(base=va, length=size), "UVM_FREE")
      except Exception: pass
      self.rm_free(handle)
      if cpu is not None: self._unmap_cpu(cpu, size)
      va_pool.release(va, size)
      raise
    m = NVMemory(handle, size, va, cpu, host, what)
    self.memories.append(m)
    return m

  def _unmap_cpu(self, cpu: int, size: int) -> None:
    self.port.munmap(cpu, size)  # give the range back to the reservation
    self.port.mmap(cpu, size, PROT_NONE, MAP_PRIVATE | MAP_ANON | MAP_NORESERVE | MAP_FIXED, -1, 0)

  def _gpu_free(self, m: NVMemory) -> None:
    nv = self.nv
    self.uvm(nv.UVM_FREE, nv.UVM_FREE_PARAMS(base=m.va, length=m.size), "UVM_FREE")
    self.rm_free(m.handle, self.nvdevice)
    if m.cpu is not None: self._unmap_cpu(m.cpu, m.size)
    (self.cpu_va if m.host else self.gpu_va).release(m.va, m.size)
    self.memories.remove(m)

  def _alloc_shared(self, size: int) -> HCQBuffer:
    m = self._gpu_alloc(size, host=True, what="host-visible memory")
    return HCQBuffer(m.va, size, m.cpu, meta=m)

  # ---------------------------------------------------------------- channels
  def _init_channels(self) -> None:
    """The channel group with its two GPFIFO channels, each registered with UVM, scheduled, bound to the compute and
    copy classes; then the compute state (shader windows, local memory). Also what recovery runs again."""
    nv = self.nv
    self.channel_group = self.rm_alloc(self.nvdevice, nv.KEPLER_CHANNEL_GROUP_A,
                                       nv.NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS(engineType=hw.NV2080_ENGINE_TYPE_GRAPHICS))
    self.ctxshare = self.rm_alloc(self.channel_group, hw.FERMI_CONTEXT_SHARE_A, nv.NV_CTXSHARE_ALLOCATION_PARAMETERS(
      hVASpace=self.vaspace, flags=nv.NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_ASYNC))
    ring_bytes = _rup(self.gpfifo_entries * 8, 0x200)  # USERD follows the ring, 512-byte aligned
    per = _rup(ring_bytes + 0x200, PAGE)
    self.gpfifo_mem = self._gpu_alloc(2 * per, host=True, what="GPFIFO rings and USERD")
    self.notifier_mem = self._gpu_alloc(PAGE, host=True, what="error notifier")
    for i, name in enumerate(("compute", "copy")):
      off = i * per
      params = nv.NV_CHANNEL_ALLOC_PARAMS(hObjectError=self.notifier_mem.handle, gpFifoOffset=self.gpfifo_mem.va + off,
                                          gpFifoEntries=self.gpfifo_entries, hContextShare=self.ctxshare)
      params.hUserdMemory[0], params.userdOffset[0] = self.gpfifo_mem.handle, off + ring_bytes
      ch = self.rm_alloc(self.channel_group, self.gpfifo_class, params)
      self.rm_alloc(ch, self.compute_class)
      self.rm_alloc(ch, self.dma_class)
      tok = self.rm_control(ch, nv.NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN, nv.NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS(
        workSubmitToken=0xFFFFFFFF), "GPFIFO_GET_WORK_SUBMIT_TOKEN").workSubmitToken
      cmd = self._gpu_alloc(self.cmd_ring_bytes, host=True, what=f"{name} command ring")
      self.channels[name] = c = NVChannel(self, name, ch, self.gpfifo_mem, off, self.gpfifo_entries, off + ring_bytes, cmd, tok, 0)
      # finding 2: RM schedules a GR channel of an externally owned VA space only once UVM bound its buffers
      # (kernel_channel.c kchannelIsSchedulable_IMPL, checked by kchangrpapiCtrlCmdGpFifoSchedule_IMPL)
      va = self.cpu_va.alloc(CHANNEL_VA_BYTES, 2 << 20)
      rc = nv.UVM_REGISTER_CHANNEL_PARAMS(rmCtrlFd=self.fd_ctl, hClient=self.root, hChannel=ch, base=va, length=CHANNEL_VA_BYTES)
      ctypes.memmove(rc.gpuUuid.uuid, self.uuid, 16)
      try: self.uvm(nv.UVM_REGISTER_CHANNEL, rc, "UVM_REGISTER_CHANNEL")
      except BaseException:
        self.cpu_va.release(va, CHANNEL_VA_BYTES)
        raise
      c.uvm_va = va
    self.rm_control(self.channel_group, nv.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE, nv.NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS(bEnable=1), "GPFIFO_SCHEDULE")
    from array import array
    for c in self.channels.values():
      c.submit(array("I", [hw.mthd(hw.SUBC_COMPUTE, hw.SET_OBJECT, 1), self.compute_class, hw.mthd(hw.SUBC_COPY, hw.SET_OBJECT, 1), self.dma_class]))
    self.channels["compute"].submit(array("I", self._compute_state_words()))
    self._drain_channels()

  def _compute_state_words(self) -> list[int]:
    """The shader windows of this generation (hw.SHADER_WINDOWS: 32-bit on Ampere/Ada, 64-bit on Hopper+, finding 3),
    then the local memory, when a program needed some."""
    c, M, nv, win = hw.SUBC_COMPUTE, hw.M32, self.nv, self.windows
    w = [hw.mthd(c, nv.NVC6C0_SET_SHADER_SHARED_MEMORY_WINDOW_A, 2), win.shared >> 32, win.shared & M,
         hw.mthd(c, nv.NVC6C0_SET_SHADER_LOCAL_MEMORY_WINDOW_A, 2), win.local >> 32, win.local & M]
    if self.local_mem is not None:
      per_tpc = self._local_bytes_per_tpc(self.local_per_thread)
      w += [hw.mthd(c, nv.NVC6C0_SET_SHADER_LOCAL_MEMORY_A, 2), self.local_mem.va >> 32, self.local_mem.va & M,
            hw.mthd(c, nv.NVC6C0_SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A, 3), per_tpc >> 32, per_tpc & M, 0xFF]
    return w

  def _local_bytes_per_tpc(self, per_thread: int) -> int:
    """SET_SHADER_LOCAL_MEMORY_NON_THROTTLED takes the local memory of one TPC (nvk and nouveau size it per TPC):
    every thread an SM can hold, times the SMs of a TPC, each warp's slice 512-byte aligned."""
    per_warp = _rup(per_thread * 32, 0x200)
    return _rup(per_warp * self.max_warps_per_sm * self.sm_per_tpc, 0x8000)

  def _ensure_local_memory(self, per_thread: int) -> None:
    """Shader local memory for `per_thread` bytes of stack per thread on every TPC; grown (never shrunk) on demand."""
    per_thread = _rup(per_thread, 0x100)
    if per_thread <= self.local_per_thread: return
    size = _rup(self._local_bytes_per_tpc(per_thread) * self.tpc_count, 2 << 20)
    new = self._gpu_alloc(size, what="shader local memory")
    old, self.local_mem, self.local_per_thread = self.local_mem, new, per_thread
    from array import array
    if self.channels:
      with self.submit_lock:
        self.channels["compute"].submit(array("I", self._compute_state_words()))
      self._drain_channels()
    if old is not None: self._gpu_free(old)

  def _teardown_channels(self) -> None:
    """Unregister every channel from UVM (before RM frees it: uvm_user_channel.c uvm_unregister_channel stops and
    detaches it), free the channel group (its channels and their objects with it) and the rings."""
    nv = self.nv
    for c in self.channels.values():
      if c.uvm_va:
        p = nv.UVM_UNREGISTER_CHANNEL_PARAMS(hClient=self.root, hChannel=c.handle)
        ctypes.memmove(p.gpuUuid.uuid, self.uuid, 16)
        try: self.uvm(nv.UVM_UNREGISTER_CHANNEL, p, "UVM_UNREGISTER_CHANNEL")
        finally:
          self.cpu_va.release(c.uvm_va, CHANNEL_VA_BYTES)
          c.uvm_va = 0
    if getattr(self, "channel_group", None):
      try: self.rm_free(self.channel_group, self.nvdevice)
      finally: self.channel_group = 0
    for c in self.channels.values(): self._gpu_free(c.cmd)
    self.channels.clear()
    for attr in ("gpfifo_mem", "notifier_mem"):
      if (m := getattr(self, attr, None)) is not None:
        setattr(self, attr, None)
        self._gpu_free(m)

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

  # ---------------------------------------------------------------- HCQ hooks
  def _kick(self) -> None:
    """Ring the doorbell of channels with pending work: the GPU re-checks semaphore acquires (host-written signals)."""
    for ch in self.channels.values():
      if ch.gp_get_p.value != ch.put: self.port.doorbell(self.doorbell_addr, ch.token)

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
  def _wait_signal(self, sig: HCQSignal, value: int, timeout_s: float) -> bool:
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

  def queue_state(self) -> str:
    return (f"{self.device}: timeline {self.timeline_signal.va_addr:#x} value {self.timeline_signal.value}, last submitted "
            f"{self.timeline_value - 1}\n" + "\n".join(ch.state() for ch in self.channels.values()))

  def _drain_channels(self, timeout_ms: int | None = None) -> None:
    """Wait until the GPU fetched every GPFIFO entry submitted (raw submits carry no timeline value)."""
    for ch in list(self.channels.values()):
      deadline = time.perf_counter() + (timeout_ms or self.default_timeout_ms) / 1000
      while ch.gp_get_p.value != ch.put:
        self._check_fault()
        if time.perf_counter() > deadline:
          from baregrad.hcq import HCQTimeout
          raise HCQTimeout(f"{self.device}: timed out waiting for the {ch.name} channel to drain\n{self.queue_state()}")
        self._kick()
        time.sleep(1e-4)

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
  from baregrad.codegen.renderer.ptx import PTXRenderer
  return PTXRenderer(arch), NVCompiler(arch)

def _unavail(device: str, why: str) -> Any: raise DeviceUnavailable(f"{device}: {why}")

_registered = False
def _register_ioctls(nv: Any) -> None:
  global _registered
  if _registered: return
  _registered = True
  from baregrad.drivers.nv.hw import nv_ioctl_nvos33_parameters_with_fd
  for nr, t, name in ((nv.NV_ESC_RM_ALLOC, nv.NVOS21_PARAMETERS, "NV_ESC_RM_ALLOC"), (nv.NV_ESC_RM_FREE, nv.NVOS00_PARAMETERS, "NV_ESC_RM_FREE"),
                      (nv.NV_ESC_RM_CONTROL, nv.NVOS54_PARAMETERS, "NV_ESC_RM_CONTROL"),
                      (nv.NV_ESC_RM_MAP_MEMORY, nv_ioctl_nvos33_parameters_with_fd, "NV_ESC_RM_MAP_MEMORY"),
                      (nv.NV_ESC_CARD_INFO, nv.nv_ioctl_card_info_t * 32, "NV_ESC_CARD_INFO"),
                      (nv.NV_ESC_REGISTER_FD, nv.nv_ioctl_register_fd_t, "NV_ESC_REGISTER_FD"),
                      (nv.NV_ESC_CHECK_VERSION_STR, nv.nv_ioctl_rm_api_version_t, "NV_ESC_CHECK_VERSION_STR")):
    register_ioctl(NVDevice._req(nr, t), name, t)
  for req, t, name in ((nv.UVM_INITIALIZE, nv.UVM_INITIALIZE_PARAMS, "UVM_INITIALIZE"), (nv.UVM_MM_INITIALIZE, nv.UVM_MM_INITIALIZE_PARAMS, "UVM_MM_INITIALIZE"),
                       (nv.UVM_REGISTER_GPU, nv.UVM_REGISTER_GPU_PARAMS, "UVM_REGISTER_GPU"),
                       (nv.UVM_REGISTER_GPU_VASPACE, nv.UVM_REGISTER_GPU_VASPACE_PARAMS, "UVM_REGISTER_GPU_VASPACE"),
                       (nv.UVM_CREATE_EXTERNAL_RANGE, nv.UVM_CREATE_EXTERNAL_RANGE_PARAMS, "UVM_CREATE_EXTERNAL_RANGE"),
                       (nv.UVM_MAP_EXTERNAL_ALLOCATION, nv.UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, "UVM_MAP_EXTERNAL_ALLOCATION"),
                       (nv.UVM_FREE, nv.UVM_FREE_PARAMS, "UVM_FREE"),
                       (nv.UVM_REGISTER_CHANNEL, nv.UVM_REGISTER_CHANNEL_PARAMS, "UVM_REGISTER_CHANNEL"),
                       (nv.UVM_UNREGISTER_CHANNEL, nv.UVM_UNREGISTER_CHANNEL_PARAMS, "UVM_UNREGISTER_CHANNEL")):
    register_ioctl(req, name, t)
