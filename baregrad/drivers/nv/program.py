"""Programs of the NV driver: a kernel's image in GPU memory, its parameters and storage read from the cubin or the PTX,
and the per-launch args memory (QMD and constant bank 0) its launches are written into."""
from __future__ import annotations
import ctypes, re, struct, sys
from array import array
from typing import TYPE_CHECKING, Any, Sequence
from baregrad.knobs import DEBUG
from baregrad.hal import profile
from baregrad.hcq import HCQArgsState, HCQProgram
from baregrad.hcq.queue import _dims, args_struct_format
from baregrad.drivers.vmem import round_up
from baregrad.drivers.nv import hw
from baregrad.drivers.nv_compile import unpack_lib
from baregrad.codegen.renderer.ptx import dynamic_shared_bytes, tmap_scratch_bytes
from baregrad.drivers.nv import scratch
if TYPE_CHECKING: from baregrad.drivers.nv.device import NVDevice

_PTX_SIZES = {"u8": 1, "s8": 1, "b8": 1, "u16": 2, "s16": 2, "b16": 2, "f16": 2, "bf16": 2, "u32": 4, "s32": 4, "b32": 4, "f32": 4,
              "u64": 8, "s64": 8, "b64": 8, "f64": 8}

def ptx_params(ptx: str, name: str) -> list[tuple[int, int]]:
  """(offset, size) of each .param of entry `name`, naturally aligned, from the PTX declaration."""
  m = re.search(r"\.entry\s+" + re.escape(name) + r"\s*\(([^)]*)\)", ptx)
  if m is None: raise ValueError(f"no .entry {name} in the PTX")
  out, off = [], 0
  for t in re.findall(r"\.param\s+(?:\.align\s+\d+\s+)?\.(\w+)", m.group(1)):
    sz = _PTX_SIZES.get(t, 8)
    off = round_up(off, sz)
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
      size[d.group(1)] = round_up(size[d.group(1)], int(d.group(2) or 1)) + sz
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
    self.dedicated = False    # args memory of its own (a recorded launch): so is its scratch (NVProgram.fill_kernargs)
    self.scratch: tuple[int, int] | None = None   # (blocks, GPU address) of the launch's tensor-map scratch
    if len(self.bufs) + len(self.vals) != prg.nargs:
      raise ValueError(f"{prg.name} takes {prg.nargs} parameters, got {len(self.bufs)} buffers and {len(self.vals)} values")
    # the header's bytes zeroed (write_qmd writes it) and the parameters in one pack and one copy (prg.param_pack:
    # each parameter at its offset, masked to its size, little-endian, the alignment gaps zeroed)
    if prg.param_pack is None:   # (parameters out of order: one at a time)
      ctypes.memset(self.cb_cpu, 0, prg.param_off)
      for i, x in enumerate([b.va_addr for b in self.bufs] + list(self.vals) + [0] * prg.scratch_params): self._put(i, x)
      return
    args = [b.va_addr for b in self.bufs] + list(self.vals) + [0] * prg.scratch_params   # (write_qmd sets the scratch)
    data = prg.param_pack(*[x & m for x, m in zip(args, prg.param_masks)])
    ctypes.memmove(self.cb_cpu, data, len(data))
  def _put(self, i: int, v: int) -> None:
    off, sz = self.prg.params[i]
    ctypes.memmove(self.cb_cpu + self.prg.param_off + off, (v & ((1 << (8 * sz)) - 1)).to_bytes(sz, "little"), sz)
  def write_qmd(self, gs: tuple[int, int, int], ls: tuple[int, int, int]) -> None:
    prg, dev = self.prg, self.prg.dev
    self.grid, self.block = gs, ls
    if prg.scratch_per_block and (self.scratch is None or self.scratch[0] < prod3(gs)):
      size = prod3(gs) * prg.scratch_per_block
      self.scratch = (prod3(gs), scratch.dedicated(dev, size) if self.dedicated else dev.launch_scratch.alloc(size))
      self._put(len(prg.params) - 1, self.scratch[1])
    hdr, qmd, at, hi_keep, hi_mask, shift, _ = prg.launch_template(gs, ls)
    ctypes.memmove(self.cb_cpu, hdr, len(hdr))
    c = self.cb_va >> shift
    if self.cb_va % 64 or c >> 32 > hi_mask: hw.qmd_cbank0_words(dev.qmd_version, self.cb_va)   # (raises, naming the rule)
    q = bytearray(qmd)
    _U64.pack_into(q, at, hi_keep | c)
    ctypes.memmove(self.qmd_cpu, bytes(q), len(q))
    dev.qmd_kernels[self.qmd_va] = prg.name   # for a fault that names the QMD (the SKED's ESR)

_U64 = struct.Struct("<Q")

def param_packer(param_off: int, params: Sequence[tuple[int, int]]) -> Any:
  """pack(*values) -> bytes of constant bank 0 from its start through the last parameter: the `param_off` header bytes
  and the gaps between parameters zero, each parameter (offset, size) at param_off + offset, little-endian (values
  already masked to their sizes); None where the parameters are not in offset order or of a size other than 1-8 bytes."""
  fmt = args_struct_format(params)
  return None if fmt is None else struct.Struct("<" + "x" * param_off + fmt).pack

def launch_pushbuffer(compute_class: int, timeline: int) -> tuple[array, tuple[int, int, int]]:
  """The pushbuffer of a launch on the timeline at `timeline` (hw.sem_words acquire >= value, hw.launch_words of the
  QMD, hw.sem_words release of the next value) with zero for its values, and where a launch writes them: (the acquired
  value's low word, the QMD address >> 8, the released value's low word); each value's high word follows its low one."""
  acq, rel = hw.sem_words(timeline, 0, hw.SEM_EXEC_ACQUIRE_GEQ), hw.sem_words(timeline, 0, hw.SEM_EXEC_RELEASE)
  a, b = hw.launch_words(compute_class, 0), hw.launch_words(compute_class, 1 << 8)
  diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
  assert len(diff) == 1 and acq[3:5] == [0, 0] and rel[3:5] == [0, 0], "the launch words changed their layout"
  return array("I", acq + a + rel), (3, len(acq) + diff[0], len(acq) + len(a) + 3)

def _put_u32(b: bytes, off: int, v: int) -> bytes: return b[:off] + v.to_bytes(4, "little") + b[off + 4:]

def prod3(t: Sequence[int]) -> int: return t[0] * t[1] * t[2]

class NVProgram(HCQProgram):
  """A kernel: its code uploaded to GPU memory in an image that also holds the PTX (the mock GPU runs that), followed by
  hw.PROGRAM_GUARD bytes for the instruction prefetch (docs/hw/h100-580.159.04-findings.md#finding-4)."""
  args_state_t = NVArgsState
  def __init__(self, dev: NVDevice, name: str, lib: bytes) -> None:
    super().__init__(dev, name, lib)
    ptx, cubin = unpack_lib(lib)
    if not cubin and dev.compiler_ok:  # plain PTX: assemble it for the real GPU's sake when ptxas is here
      try: cubin = unpack_lib(dev.compiler.compile(ptx))[1]
      except Exception: cubin = b""
    if not cubin and not dev.is_mock:
      raise RuntimeError(f"NV program {name}: no cubin (ptxas not available) and a real GPU cannot run PTX text")
    if (level := DEBUG()) >= 6:   # resources (ptxas -v), and at 7 the SASS: drivers/nv/disasm.py
      from baregrad.drivers.nv.disasm import debug_text
      print(debug_text(level, ptx, cubin, name, dev.arch), file=sys.stderr)
    self.ptx, self.param_off, self.regs, self.local_bytes = ptx, dev.param_off, 32, 0
    self.launch_templates: dict[tuple, tuple] = {}   # geometry, sizes -> (cbank0 header, QMD, where its bank goes): write_qmd
    self._pushbuf: tuple | None = None   # (timeline, class, launch_pushbuffer's words and places) of __call__
    code = b""
    self.params = ptx_params(ptx, name)
    # per-launch tensor-map scratch (drivers/nv/scratch.py): the PTX's last parameter, which the driver fills
    self.scratch_per_block = tmap_scratch_bytes(ptx)
    self.scratch_params = 1 if self.scratch_per_block else 0
    # without a cubin (the mock, no ptxas) the sizes come from the PTX's declarations
    static, frame = ptx_storage(ptx, name)
    # dynamic shared memory (the renderer's .extern .shared array above 48 KB): its size comes with the PTX
    self.dyn_shared = dynamic_shared_bytes(ptx)
    shared = dev.cb_layout.shared_base + static if static or self.dyn_shared else 0
    if frame: self.local_bytes = round_up(frame + hw.STACK_TOP_RESERVE, 16)
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
      self.local_bytes = round_up(frame + hw.STACK_TOP_RESERVE, 16) if frame else 0
    # the launch's shared memory is the cubin's .nv.shared size, which on sm_90+ counts the 1 KiB before the kernel's
    # own data (hw.CBank0Layout.shared_base)
    # (the dynamic part after the static one: on sm_90+ a cubin's .nv.shared counts the reserved 1 KiB even without
    # static data, hw.CBank0Layout.shared_base)
    self.shared_total = max(shared, dev.cb_layout.shared_base if self.dyn_shared else 0) + self.dyn_shared
    # the block's limit (GPUArch.max_shared: CUDA's opt-in maximum per block) is on the kernel's own data, not the
    # reserved bytes before it
    if (own := self.shared_total - (dev.cb_layout.shared_base if self.shared_total else 0)) > dev.max_shared_mem:
      raise ValueError(f"NV program {name}: {own} bytes of shared memory ({self.dyn_shared} of them dynamic) exceed the "
                       f"{dev.max_shared_mem} a block may use on {dev.arch} (GPUArch.max_shared)")
    self.nargs = len(self.params) - self.scratch_params   # the buffers and values a launch passes
    self.param_size = max((o + s for o, s in self.params), default=0)
    self.param_pack = param_packer(self.param_off, self.params)   # (NVArgsState writes a launch's parameters with it)
    self.param_masks = [(1 << (8 * sz)) - 1 for _, sz in self.params]
    # __call__'s launch: the parameters packed straight into the args memory (None: out of order, NVArgsState's way)
    fmt = args_struct_format(self.params)
    self._param_into = None if fmt is None else struct.Struct("<" + fmt).pack_into
    self._all8 = all(sz == 8 for _, sz in self.params)   # (no parameter narrower than an address: nothing to mask)
    image, code_off = hw.pack_image(ptx, name, code or b"\0" * 16)
    if self.local_bytes: dev._ensure_local_memory(self.local_bytes)
    # host-visible, written by the CPU: a copy-queue upload would not be ordered before a raw compute-queue launch
    self.image = dev._gpu_alloc(len(image) + hw.PROGRAM_GUARD, host=True, what=f"program image {name}")
    assert self.image.cpu is not None
    ctypes.memmove(self.image.cpu, image, len(image))
    self.code_va = self.image.va + code_off
  def kernargs_size(self, nbufs: int, nvals: int) -> int: return 256 + 0x200 + self.param_off + self.param_size
  def fill_kernargs(self, bufs: Sequence[Any], vals: Sequence[int] = (), kernargs: tuple[int, int] | None = None) -> NVArgsState:
    """HCQProgram's, the args state told whether its memory is its own (a recorded launch: its scratch is too)."""
    st = super().fill_kernargs(bufs, vals, kernargs)
    assert isinstance(st, NVArgsState)
    st.dedicated = kernargs is not None
    return st
  def launch_template(self, gs: tuple[int, int, int], ls: tuple[int, int, int]) -> tuple:
    """(constant bank 0 header, QMD bytes with the bank address zero, the byte offset of the 64-bit word that holds it,
    that word's bits the template keeps, the mask of the address's high part, the address shift, the whole args block)
    of a launch of this geometry. A kernel's launches of one geometry share their QMD and constant bank header but for the bank's address:
    both are made once per geometry (build_qmd is ~30 us of Python), copied, and the address patched."""
    dev = self.dev
    key = (gs, ls, self.code_va, self.shared_total, self.local_bytes, self.regs)   # (everything the QMD is made of)
    if (t := self.launch_templates.get(key)) is not None: return t
    if prod3(ls) > 1024 or prod3(ls) == 0: raise ValueError(f"local_size {ls}: 1..1024 threads per block")
    if prod3(gs) == 0: raise ValueError(f"global_size {gs} is empty")
    hdr = hw.cbank0_header(dev.arch, gs, ls, dev.windows, self.dyn_shared)
    if self.shared_total == 0: hdr = _put_u32(hdr, dev.cb_layout.reserved_shared, 0)  # nothing reserved when no shared memory
    w = hw.build_qmd(self.code_va, 0, self.param_off + self.param_size, gs, ls, self.shared_total, self.regs,
                     version=dev.qmd_version, local=self.local_bytes, max_shared=dev.max_shared_mem)
    w += [0] * (hw.QMD_BYTES // 4 - len(w))
    if len(self.launch_templates) >= 64: self.launch_templates.clear()
    # where the bank's address goes (hw.qmd_cbank0_words: a low word, then the high part in the low bits of the next
    # word, whose other bits the template keeps), so a launch patches it as one 64-bit little-endian store
    lo, _, hi, _, hi_mask = hw.qmd_cbank0_words(dev.qmd_version, 0)
    assert hi == lo + 1
    qmd = bytes(array("I", w))
    # and __call__'s args memory of such a launch as one block: [QMD, zero to 0x200][bank header][zero parameters] (what
    # NVArgsState and write_qmd write in three copies)
    assert len(qmd) <= 0x200 and len(hdr) == self.param_off, "args block layout: QMD within 0x200, header up to the parameters"
    block = qmd + bytes(0x200 - len(qmd)) + hdr + bytes(self.param_size)
    t = self.launch_templates[key] = (hdr, qmd, 4 * lo, (w[hi] & ~hi_mask) << 32, hi_mask, hw.QMD_LAYOUTS[dev.qmd_version].cb0_shift, block)
    return t
  def install_captured(self, q: Any, args: NVArgsState, files: dict[str, bytes], reloc: dict[int, int]) -> list[str]:
    """Replay (hcq/replay.py): put a captured QMD and constant bank 0 in place of those `q.exec` wrote for `args`, with
    the program, constant bank and buffer addresses relocated to this device's; returns where the captured ones differ
    from what this driver writes for the same launch."""
    qmd, cb = hw.words_of(files["qmd"]), bytearray(files["cbank0"])
    if len(qmd) != hw.QMD_BYTES // 4: raise ValueError(f"captured QMD of {len(files['qmd'])} bytes, expected {hw.QMD_BYTES}")
    notes = []
    for i in range(len(args.bufs)):
      off, sz = self.params[i]
      o = self.param_off + off
      old = int.from_bytes(cb[o:o + sz], "little")
      if old in reloc: cb[o:o + sz] = reloc[old].to_bytes(sz, "little")
      else: notes.append(f"constant bank 0 parameter {i} at {o:#x} holds {old:#x}, the address of no captured buffer")
    if self.scratch_per_block and args.scratch is not None:   # the launch's own tensor-map scratch, not the capture's
      off, sz = self.params[-1]
      cb[self.param_off + off:self.param_off + off + sz] = args.scratch[1].to_bytes(sz, "little")
    hw.relocate_qmd(qmd, self.dev.qmd_version, self.code_va, args.cb_va)
    mine_qmd = hw.words_of(ctypes.string_at(args.qmd_cpu, hw.QMD_BYTES))
    if qmd != mine_qmd:
      a, b = hw.decode_qmd(qmd, self.dev.qmd_version), hw.decode_qmd(mine_qmd, self.dev.qmd_version)
      notes += [f"QMD {k}: captured {a.get(k, 0):#x}, this driver writes {b.get(k, 0):#x}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    mine_cb = ctypes.string_at(args.cb_cpu, len(cb))
    if (d := next((i for i in range(len(cb)) if cb[i] != mine_cb[i]), None)) is not None:
      notes.append(f"constant bank 0 byte {d:#x}: captured {cb[d]:#04x}, this driver writes {mine_cb[d]:#04x}")
    ctypes.memmove(args.qmd_cpu, bytes(array("I", qmd)), hw.QMD_BYTES)
    ctypes.memmove(args.cb_cpu, bytes(cb), len(cb))
    return notes

  def capture_descriptor(self, args: Any) -> dict[str, bytes]:
    """NV_CAPTURE: the launch's QMD and constant bank 0 (header and parameters) as the driver wrote them."""
    return {"qmd": ctypes.string_at(args.qmd_cpu, hw.QMD_BYTES), "cbank0": ctypes.string_at(args.cb_cpu, self.param_off + self.param_size)}
  def __call__(self, *bufs: Any, global_size: tuple[int, int, int] = (1, 1, 1), local_size: tuple[int, int, int] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    """A launch as HCQProgram makes it (wait for the timeline, exec, signal the next value), its pushbuffer written
    straight into one array instead of recorded in a queue object first; a timed launch (wait=True, PROFILE=1) takes
    the queue path with its timestamps."""
    dev = self.dev
    if wait or profile.ON or dev.capture is not None:
      return super().__call__(*bufs, global_size=global_size, local_size=local_size, vals=vals, wait=wait)
    gs, ls = _dims(global_size, "global_size"), _dims(local_size, "local_size")
    if self._param_into is None:   # (parameters out of order: NVArgsState writes them one at a time)
      args = self.fill_kernargs(bufs, vals)
      qmd_va = args.qmd_va
      with dev.submit_lock: args.write_qmd(gs, ls)
    else: qmd_va = self._write_args(bufs, vals, gs, ls)
    tl = dev.timeline_signal.va_addr
    if (pb := self._pushbuf) is None or pb[0] != tl or pb[1] != dev.compute_class:
      pb = self._pushbuf = (tl, dev.compute_class, *launch_pushbuffer(dev.compute_class, tl))
    words, (w_lo, qi, s_lo) = pb[2][:], pb[3]
    words[qi] = qmd_va >> 8
    with dev.submit_lock:
      v = dev.timeline_value - 1
      words[w_lo], words[w_lo + 1] = v & 0xFFFFFFFF, v >> 32
      v = dev.next_timeline()
      words[s_lo], words[s_lo + 1] = v & 0xFFFFFFFF, v >> 32
      dev.channels["compute"].submit(words)
    return None
  def _write_args(self, bufs: Sequence[Any], vals: Sequence[int], gs: tuple[int, int, int], ls: tuple[int, int, int]) -> int:
    """What fill_kernargs + write_qmd write for a launch (NVArgsState's layout), written into the kernel-args ring as
    one copy of the geometry's block template with the bank address and the parameters packed into it; returns the
    QMD's address. The same checks: the parameter count, the bank address's alignment and width."""
    dev = self.dev
    if len(bufs) + len(vals) != self.nargs:
      raise ValueError(f"{self.name} takes {self.nargs} parameters, got {len(bufs)} buffers and {len(vals)} values")
    if (t := self.launch_templates.get((gs, ls, self.code_va, self.shared_total, self.local_bytes, self.regs))) is None:
      t = self.launch_template(gs, ls)
    _, _, at, hi_keep, hi_mask, shift, tmpl = t
    cpu, va = dev.alloc_kernargs(256 + len(tmpl))
    pad = -va % 256
    qmd_va = va + pad
    cb_va = qmd_va + 0x200
    c = cb_va >> shift
    if cb_va % 64 or c >> 32 > hi_mask: hw.qmd_cbank0_words(dev.qmd_version, cb_va)   # (raises, naming the rule)
    mv, off = dev.kernargs_mv, cpu - dev.kernargs_cpu + pad
    mv[off:off + len(tmpl)] = tmpl
    _U64.pack_into(mv, off + at, hi_keep | c)
    addrs = [(b._buf if hasattr(b, "_buf") else b).va_addr for b in bufs]
    if self.scratch_per_block:   # the launch's own tensor-map scratch, the last parameter (drivers/nv/scratch.py)
      vals = tuple(vals) + (dev.launch_scratch.alloc(prod3(gs) * self.scratch_per_block),)
    self._param_into(mv, off + 0x200 + self.param_off,
                     *([x & m for x, m in zip(addrs + list(vals), self.param_masks)] if vals or not self._all8 else addrs))
    dev.qmd_kernels[qmd_va] = self.name   # for a fault that names the QMD (the SKED's ESR)
    return qmd_va
  def __del__(self) -> None:
    try:
      if not self.dev.closed:
        self.dev.synchronize()
        self.dev._gpu_free(self.image)
    except Exception: pass
