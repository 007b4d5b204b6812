"""AMD programs: an HSA code object (laid out, relocated and its kernel descriptors read by drivers/amd_compile.py's
load_code_object), the kernel-argument layout from its NT_AMDGPU_METADATA note (MessagePack: .args with .offset, .size,
.value_kind), loaded into GPU memory; and the kernel arguments: explicit ones, then the hidden ones a code object v5+
kernel may read (block counts, group sizes, grid dims, apertures, the queue pointer).

Source: LLVM AMDGPUUsage (code object v5/v6 metadata and its hidden argument kinds)."""
from __future__ import annotations
import ctypes, io, struct, sys
from typing import Any, Sequence
from baregrad import helpers
from baregrad.knobs import DEBUG
from baregrad.hal import profile
from baregrad.hcq import HCQArgsState, HCQProgram
from baregrad.hcq.queue import _dims, args_struct_format
from baregrad.drivers.amd_compile import CodeObjectError, load_code_object

NT_AMDGPU_METADATA = 32

def msgpack_unpack(data: bytes) -> Any:
  """A MessagePack document (the subset AMDGPU metadata uses: maps, arrays, strings, ints, bools, nil, floats, bins)."""
  buf = io.BytesIO(data)
  def rd(n: int) -> bytes:
    b = buf.read(n)
    if len(b) != n: raise CodeObjectError("truncated MessagePack metadata")
    return b
  def sized(fmt: str) -> int: return struct.unpack(fmt, rd(struct.calcsize(fmt)))[0]
  def obj() -> Any:
    t = rd(1)[0]
    if t <= 0x7f: return t
    if t >= 0xe0: return t - 0x100
    if 0x80 <= t <= 0x8f: return {obj(): obj() for _ in range(t & 0xf)}
    if 0x90 <= t <= 0x9f: return [obj() for _ in range(t & 0xf)]
    if 0xa0 <= t <= 0xbf: return rd(t & 0x1f).decode()
    if t in (0xc0, 0xc2, 0xc3): return {0xc0: None, 0xc2: False, 0xc3: True}[t]
    ints = {0xcc: ">B", 0xcd: ">H", 0xce: ">I", 0xcf: ">Q", 0xd0: ">b", 0xd1: ">h", 0xd2: ">i", 0xd3: ">q", 0xca: ">f", 0xcb: ">d"}
    if t in ints: return sized(ints[t])
    lens = {0xd9: ">B", 0xda: ">H", 0xdb: ">I", 0xc4: ">B", 0xc5: ">H", 0xc6: ">I"}
    if t in lens:
      b = rd(sized(lens[t]))
      return b.decode() if t >= 0xd9 else b
    if t in (0xdc, 0xdd): return [obj() for _ in range(sized(">H" if t == 0xdc else ">I"))]
    if t in (0xde, 0xdf): return {obj(): obj() for _ in range(sized(">H" if t == 0xde else ">I"))}
    raise CodeObjectError(f"MessagePack type byte {t:#x} is not used by AMDGPU metadata")
  return obj()

def code_object_metadata(lib: bytes) -> dict:
  """The NT_AMDGPU_METADATA note (amdhsa.kernels with each kernel's .args, .kernarg_segment_size, ...); {} if absent."""
  from elftools.elf.elffile import ELFFile
  for sec in ELFFile(io.BytesIO(lib)).iter_sections():
    if sec["sh_type"] != "SHT_NOTE": continue
    for n in sec.iter_notes():
      if n["n_name"] == "AMDGPU" and n["n_type"] in (NT_AMDGPU_METADATA, "NT_AMDGPU_METADATA"):
        desc = n["n_descdata"]
        return msgpack_unpack(desc if isinstance(desc, bytes) else desc.encode("latin-1"))
  return {}

# hidden argument kinds (code object v5) -> what fills them; sizes come from the metadata
def _hidden_value(kind: str, gs: tuple[int, int, int], ls: tuple[int, int, int], dev: Any) -> int | None:
  ax = {"x": 0, "y": 1, "z": 2}
  if kind.startswith("hidden_block_count_"): return gs[ax[kind[-1]]]
  if kind.startswith("hidden_group_size_"): return ls[ax[kind[-1]]]
  if kind.startswith("hidden_remainder_"): return 0        # grids are whole workgroups
  if kind.startswith("hidden_global_offset_"): return 0
  if kind == "hidden_grid_dims": return 3 if gs[2] * ls[2] > 1 else 2 if gs[1] * ls[1] > 1 else 1
  if kind == "hidden_shared_base": return dev.apertures["lds_base"] >> 32
  if kind == "hidden_private_base": return dev.apertures["scratch_base"] >> 32
  if kind == "hidden_dynamic_lds_size": return 0
  if kind == "hidden_queue_ptr": return dev.amd_queue_va   # the amd_queue_t of the compute queue (as ROCr passes it)
  return None

class AMDArgsState(HCQArgsState):
  """The kernarg segment: explicit arguments at the offsets the metadata gives, hidden ones filled per launch."""
  def __init__(self, cpu_addr: int, va_addr: int, prg: "AMDProgram", bufs: Sequence[Any], vals: Sequence[int]) -> None:
    super().__init__(cpu_addr, va_addr, prg, bufs, vals)
    self.grid, self.block = (1, 1, 1), (1, 1, 1)
    explicit = prg.explicit_args
    if len(self.bufs) + len(self.vals) != len(explicit):
      raise ValueError(f"{prg.name} takes {len(explicit)} explicit arguments, got {len(self.bufs)} buffers and {len(self.vals)} values")
    ctypes.memset(cpu_addr, 0, prg.kernarg_size)
    for i, b in enumerate(self.bufs): self._put(i, b.va_addr)
    for i, v in enumerate(self.vals): self._put(len(self.bufs) + i, v)
  def _put(self, i: int, v: int) -> None:
    off, sz = self.prg.explicit_args[i]
    ctypes.memmove(self.cpu_addr + off, (v & ((1 << (8 * sz)) - 1)).to_bytes(sz, "little"), sz)
  def write_launch(self, gs: tuple[int, int, int], ls: tuple[int, int, int]) -> None:
    """The hidden arguments that depend on the launch size (and a check of the sizes the dispatch packet can carry)."""
    n = ls[0] * ls[1] * ls[2]
    if not 0 < n <= 1024: raise ValueError(f"local_size {ls}: 1..1024 work-items per workgroup")
    if any(g == 0 for g in gs): raise ValueError(f"global_size {gs} is empty")
    if any(g * l >= 1 << 32 for g, l in zip(gs, ls)): raise ValueError(f"grid {gs} x {ls} exceeds 2**32 work-items in a dimension")
    self.grid, self.block = gs, ls
    for kind, off, sz in self.prg.hidden_args:
      v = _hidden_value(kind, gs, ls, self.prg.dev)
      if v is not None: ctypes.memmove(self.cpu_addr + off, (v & ((1 << (8 * sz)) - 1)).to_bytes(sz, "little"), sz)

class AMDProgram(HCQProgram):
  """A kernel of an HSA code object, loaded into GPU memory; calling it dispatches an AQL packet."""
  args_state_t = AMDArgsState
  def __init__(self, dev: Any, name: str, lib: bytes) -> None:
    super().__init__(dev, name, lib)
    co = load_code_object(lib)
    if co.arch != dev.target.name:
      raise CodeObjectError(f"AMD program {name}: the code object is for {co.arch}, this GPU is {dev.target.name}")
    k = co.kernels.get(name)
    if k is None: raise CodeObjectError(f"AMD program {name}: the code object has no kernel {name!r}; it has {', '.join(sorted(co.kernels))}")
    if (level := DEBUG()) >= 6:   # resources, and at 7 the disassembly: drivers/amd/disasm.py
      from baregrad.drivers.amd.disasm import debug_text
      print(debug_text(level, lib, name, co.arch), file=sys.stderr)
    kd = k.descriptor
    if kd.uses_dynamic_stack:
      # the code object does not say how deep the stack grows (ROCr then guesses a per-thread size); our kernels make no calls
      raise NotImplementedError(f"AMD program {name} uses a dynamic stack (USES_DYNAMIC_STACK: calls or recursion): its scratch size is "
                                f"not known from the code object ({kd.private_segment_fixed_size} bytes fixed); this driver sizes scratch "
                                f"from private_segment_fixed_size only")
    wave = 32 if kd.wavefront_size32 else 64
    if wave != dev.target.wave_size:
      raise CodeObjectError(f"AMD program {name} is compiled for wave{wave}; {dev.target.name} runs wave{dev.target.wave_size}")
    self.descriptor = kd
    self.group_segment_size, self.private_segment_size = kd.group_segment_fixed_size, kd.private_segment_fixed_size
    # scratch: the queue's must cover this kernel's private segment before any dispatch of it (drivers/amd/scratch.py).
    # gfx1100 and gfx942 have architected flat scratch: the private segment buffer and flat scratch init SGPRs are "not
    # supported and must be 0" (AMDGPUUsage, kernel descriptor); the hardware sets FLAT_SCRATCH from the queue's scratch
    if bad := [u for u in kd.user_sgprs if u in ("private_segment_buffer", "flat_scratch_init")]:
      raise CodeObjectError(f"AMD program {name} asks for the {' and '.join(bad)} user SGPRs: {dev.target.name} has architected flat scratch, "
                            f"where they must be 0 (AMDGPUUsage kernel descriptor)")
    if kd.enable_private_segment or self.private_segment_size:
      self.private_segment_size = max(self.private_segment_size, 4)
      dev.ensure_scratch(self.private_segment_size)
    if self.group_segment_size > dev.max_shared_mem:
      raise ValueError(f"AMD program {name} uses {self.group_segment_size} bytes of LDS; {dev.target.name} has {dev.max_shared_mem} per workgroup")
    meta = next((m for m in code_object_metadata(lib).get("amdhsa.kernels", []) if m.get(".name") == name), {})
    exp, hid = [], []
    for a in sorted(meta.get(".args", []), key=lambda a: a.get(".offset", 0)):
      kind = a.get(".value_kind", "by_value")
      if kind.startswith("hidden_"): hid.append((kind, a[".offset"], a[".size"]))
      else: exp.append((a[".offset"], a[".size"]))
    if not meta and kd.kernarg_size: exp = [(8 * i, 8) for i in range(kd.kernarg_size // 8)]  # no metadata: 8-byte arguments
    self.explicit_args, self.hidden_args = exp, hid
    self.kernarg_size = max(kd.kernarg_size, max((o + s for o, s in exp), default=0), max((o + s for _, o, s in hid), default=0), 1)
    # __call__'s launch: the explicit arguments packed straight into a copy of the geometry's segment (_write_args); None
    # where they are out of order, of another size than 1, 2, 4 or 8 bytes, or a hidden one lies among them
    fmt, end = args_struct_format(exp), max((o + s for o, s in exp), default=0)
    self._explicit_into = struct.Struct("<" + fmt).pack_into if fmt is not None and all(o >= end for _, o, _ in hid) else None
    self._explicit_masks = [(1 << (8 * sz)) - 1 for _, sz in exp]
    self._all8 = all(sz == 8 for _, sz in exp)   # (no argument narrower than an address: buffer addresses need no mask)
    self._segments: dict[tuple, bytes] = {}   # (geometry, queue) -> the kernarg segment with its hidden arguments: _segment
    # in VRAM the CPU writes through the large BAR; the image carries LLVM's s_code_end padding (instruction prefetch)
    self.image = dev._gpu_alloc(co.size, "vram", cpu_access=True)
    img = co.relocate(self.image.va)
    ctypes.memmove(self.image.cpu, img, len(img))
    dev.hdp_flush()
    self.kd_va = self.image.va + k.kd_offset
    dev.kernel_names[self.kd_va] = name   # to name a dispatch in fault and timeout messages
    dev.kernarg_sizes[self.kd_va] = self.kernarg_size
  def kernargs_size(self, nbufs: int, nvals: int) -> int: return (self.kernarg_size + 63) & ~63
  def _segment(self, gs: tuple[int, int, int], ls: tuple[int, int, int]) -> bytes:
    """The kernarg segment of a launch of this geometry with its explicit arguments zero: what AMDArgsState and
    write_launch write but for them (the hidden arguments depend on the geometry and the device's queue alone), with
    write_launch's checks of the sizes; made once per geometry."""
    st = object.__new__(AMDArgsState)   # (write_launch over a host buffer: the same code makes the same bytes)
    seg = bytearray(self.kernarg_size)
    st.cpu_addr, st.prg = ctypes.addressof(ctypes.c_char.from_buffer(seg)), self
    st.write_launch(gs, ls)
    if len(self._segments) >= 64: self._segments.clear()
    b = self._segments[(gs, ls, self.dev.amd_queue_va)] = bytes(seg)
    return b
  def _write_args(self, bufs: Sequence[Any], vals: Sequence[int], gs: tuple[int, int, int], ls: tuple[int, int, int]) -> int:
    """What fill_kernargs + write_launch write for a launch, as one copy of the geometry's segment into the kernel-args
    ring with the explicit arguments packed into it; returns the segment's address. The same checks: the argument
    count here, the sizes once per geometry (_segment)."""
    dev = self.dev
    if len(bufs) + len(vals) != len(self.explicit_args):
      raise ValueError(f"{self.name} takes {len(self.explicit_args)} explicit arguments, got {len(bufs)} buffers and {len(vals)} values")
    if (seg := self._segments.get((gs, ls, dev.amd_queue_va))) is None: seg = self._segment(gs, ls)
    cpu, va = dev.alloc_kernargs(len(seg))
    mv, off = dev.kernargs_mv, cpu - dev.kernargs_cpu
    mv[off:off + len(seg)] = seg
    addrs = [(b._buf if hasattr(b, "_buf") else b).va_addr for b in bufs]
    self._explicit_into(mv, off, *([x & m for x, m in zip(addrs + list(vals), self._explicit_masks)] if vals or not self._all8 else addrs))
    return va
  def install_captured(self, q: Any, args: AMDArgsState, files: dict[str, bytes], reloc: dict[int, int]) -> list[str]:
    """Replay (hcq/replay.py): put a captured kernarg segment and AQL dispatch packet in place of those `q.exec` wrote
    for `args`, with the buffer, queue, kernel object and kernarg addresses relocated to this device's; returns where
    the captured ones differ from what this driver writes for the same launch."""
    from baregrad.drivers.amd import hw
    ka, notes = bytearray(files["kernargs"]), []
    if len(ka) != self.kernarg_size: raise ValueError(f"captured kernargs of {len(ka)} bytes, {self.name} takes {self.kernarg_size}")
    for i in range(len(args.bufs)):
      off, sz = self.explicit_args[i]
      old = int.from_bytes(ka[off:off + sz], "little")
      if old in reloc: ka[off:off + sz] = reloc[old].to_bytes(sz, "little")
      else: notes.append(f"kernarg {i} at {off:#x} holds {old:#x}, the address of no captured buffer")
    for kind, off, sz in self.hidden_args:   # the one hidden argument that is an address of the device's own
      if kind == "hidden_queue_ptr": ka[off:off + sz] = self.dev.amd_queue_va.to_bytes(sz, "little")
    mine = ctypes.string_at(args.cpu_addr, len(ka))
    if (d := next((i for i in range(len(ka)) if ka[i] != mine[i]), None)) is not None:
      notes.append(f"kernargs byte {d:#x}: captured {ka[d]:#04x}, this driver writes {mine[d]:#04x}")
    ctypes.memmove(args.cpu_addr, bytes(ka), len(ka))
    if "aql" in files:
      pk = list(struct.unpack("<16I", files["aql"]))
      pk[8:10] = [self.kd_va & hw.M32, self.kd_va >> 32]       # kernel_object
      pk[10:12] = [args.va_addr & hw.M32, args.va_addr >> 32]  # kernarg_address
      c = next(c for c in q.cmds if c.kind == "exec")
      mine_pk = list(q.words[c.start:c.start + hw.AQL_WORDS])
      if pk != mine_pk:
        a, b = hw.decode_aql(pk), hw.decode_aql(mine_pk)
        notes += [f"AQL packet {k}: captured {a[k]}, this driver writes {b.get(k)}" for k in a if a[k] != b.get(k)]
      q.words[c.start:c.start + hw.AQL_WORDS] = type(q.words)("I", pk)
    else: notes.append("no captured AQL packet: the driver's own was submitted")
    return notes

  def capture_descriptor(self, args: Any) -> dict[str, bytes]:
    """AMD_CAPTURE: the launch's kernarg segment and the AQL dispatch packet the ring was given for it."""
    out = {"kernargs": ctypes.string_at(args.cpu_addr, self.kernarg_size)}
    if (p := self.dev.capture.dispatches.pop(args.va_addr, None)) is not None: out["aql"] = p
    return out
  def __call__(self, *bufs: Any, global_size: tuple[int, int, int] = (1, 1, 1), local_size: tuple[int, int, int] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    """A launch as HCQProgram makes it (wait for the timeline, dispatch, signal the next value), its packets made by
    AQLRing.launch_packets straight from the encoders instead of recorded in a queue object first (the same packets:
    tests/drivers/amd/test_amd_packet_cache.py); a timed, profiled, captured or VIZ launch takes the queue path."""
    dev = self.dev
    if wait or profile.ON or dev.capture is not None or helpers.viz_sink is not None or dev.timeline_value >> 32:
      return super().__call__(*bufs, global_size=global_size, local_size=local_size, vals=vals, wait=wait)
    gs, ls = _dims(global_size, "global_size"), _dims(local_size, "local_size")
    if self._explicit_into is None:   # (arguments the segment template cannot take: AMDArgsState writes them one by one)
      args = self.fill_kernargs(bufs, vals)
      args.write_launch(gs, ls)
      ka = args.va_addr
    else: ka = self._write_args(bufs, vals, gs, ls)
    aql, fam, tl = dev.aql, dev.compute_queue_t.family, dev.timeline_signal.va_addr
    with dev.submit_lock:
      v = dev.timeline_value - 1
      aql.submit_packets(lambda start: aql.launch_packets(fam, self, ka, gs, ls, tl, v, dev.next_timeline(), start))
    return None
  def __del__(self) -> None:
    try:
      self.dev.kernel_names.pop(self.kd_va, None)
      self.dev.kernarg_sizes.pop(self.kd_va, None)
      if not self.dev.closed:
        if self.dev._lost is None: self.dev.synchronize()   # a lost device runs nothing that could still read the code
        self.dev._gpu_free(self.image)
    except Exception: pass
