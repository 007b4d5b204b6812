"""AMD command formats: AQL packets (HSA), PM4 type-3 packets (the command processor) and SDMA packets (the copy engine),
encoded and decoded for both families this driver knows: "gfx11" (RDNA3: amdgpu/nvd.h, SDMA v6) and "gfx9" (CDNA3
gfx9.4.3: amdgpu/soc15d.h, SDMA v4.4.2). Field layouts come from the generated bindings of those kernel headers; the
decoders print a stream in words and are what tools/amd_decode.py and the mock GPU use.

The sources of each format:
- AQL kernel dispatch and barrier-AND packets: HSA Platform System Architecture 1.2, 2.9 (the bindings in
  ctypes_autogen/amdgpu/hsa.py).
- AQL vendor-specific packet carrying a PM4 indirect buffer (format AMD_AQL_FORMAT_PM4_IB = 1, dw_count_remain = 10):
  ROCR-Runtime, hsa-ext-aql-profile amd_aql_pm4_ib_packet.h.
- PM4 WAIT_REG_MEM / RELEASE_MEM / ACQUIRE_MEM / INDIRECT_BUFFER / DMA_DATA: amdgpu/nvd.h and soc15d.h; the dword order
  as gfx_v11_0.c and gfx_v9_4_3.c emit them (wait_reg_mem, ring_emit_fence, emit_mem_sync, ring_emit_ib_compute),
  RELEASE_MEM's 8th dword int_ctxid as amdkfd/kfd_pm4_headers_ai.h (pm4_mec_release_mem) lays it out.
- SDMA COPY_LINEAR / FENCE / TRAP / POLL_REGMEM / TIMESTAMP_GET_GLOBAL / NOP: sdma_v6_0_0_pkt_open.h and
  vega10_sdma_pkt_open.h (the bindings), used as sdma_v6_0.c / sdma_v4_4_2.c use them (fence: low word, then high word,
  then TRAP; copies of at most copy_max_bytes = 0x400000)."""
from __future__ import annotations
import ctypes, functools, struct
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Sequence
from baregrad.ctypes_autogen.amdgpu import enum_gfx11, enum_gfx9_4_3, hsa, pm4_gfx11, pm4_gfx9_4_3, sdma_gfx11, sdma_gfx9_4_3

# ---------------------------------------------------------------- gfx targets: one record each
@dataclass(frozen=True)
class Target:
  """A GPU target this driver knows: its gfx name, the gfx_target_version KFD reports for it, its command-format family
  (PM4 and SDMA packet headers, register layouts), its wave size, the scratch (private segment) granule of its
  COMPUTE_TMPRING_SIZE register, and whether the mock GPU can run its machine code."""
  name: str
  version: int      # KFD node property gfx_target_version: major*10000 + minor*100 + stepping
  family: str       # "gfx11" (RDNA3, PM4 per amdgpu/nvd.h, SDMA v6) or "gfx9" (CDNA3 gfx9.4.3, soc15d.h, SDMA v4.4.2)
  wave_size: int
  pm4: ModuleType   # the PM4 bindings of its family
  sdma: ModuleType  # the SDMA packet bindings of its family
  enums: ModuleType  # the register enums of its family that the decoders name (VGT_EVENT_TYPE: soc21_enum.h, vega10_enum.h)
  scratch_unit: int           # bytes per COMPUTE_TMPRING_SIZE.WAVESIZE unit (ROCr mem_alignment_size)
  scratch_wavesize_bits: int  # width of that field (ROCr inc/registers.h; the bindings' gfx11.py/gfx9_4_3.py masks)
  executes: bool    # whether the mock GPU can run its machine code (only RDNA3 wave32 for now)

GFX_TARGETS: tuple[Target, ...] = (
  Target(name="gfx1100", version=110000, family="gfx11", wave_size=32, pm4=pm4_gfx11, sdma=sdma_gfx11, enums=enum_gfx11, scratch_unit=256,
         scratch_wavesize_bits=15, executes=True),     # Navi 31 (Radeon RX 7900 XT/XTX, PRO W7900)
  Target(name="gfx942", version=90402, family="gfx9", wave_size=64, pm4=pm4_gfx9_4_3, sdma=sdma_gfx9_4_3, enums=enum_gfx9_4_3,
         scratch_unit=1024, scratch_wavesize_bits=13, executes=False),    # Aqua Vanjaram (Instinct MI300X/MI300A/MI325X)
)
TARGETS: dict[int, Target] = {t.version: t for t in GFX_TARGETS}   # gfx_target_version -> target

M32 = 0xFFFFFFFF
def lo32(x: int) -> int: return x & M32
def hi32(x: int) -> int: return (x >> 32) & M32

# ---------------------------------------------------------------- AQL
AQL_VENDOR, AQL_INVALID, AQL_DISPATCH, AQL_BARRIER_AND, AQL_AGENT, AQL_BARRIER_OR = (
  hsa.HSA_PACKET_TYPE_VENDOR_SPECIFIC, hsa.HSA_PACKET_TYPE_INVALID, hsa.HSA_PACKET_TYPE_KERNEL_DISPATCH,
  hsa.HSA_PACKET_TYPE_BARRIER_AND, hsa.HSA_PACKET_TYPE_AGENT_DISPATCH, hsa.HSA_PACKET_TYPE_BARRIER_OR)
AQL_TYPE_NAMES = {AQL_VENDOR: "VENDOR", AQL_INVALID: "INVALID", AQL_DISPATCH: "DISPATCH", AQL_BARRIER_AND: "BARRIER_AND",
                  AQL_AGENT: "AGENT_DISPATCH", AQL_BARRIER_OR: "BARRIER_OR"}
SCOPE_NONE, SCOPE_AGENT, SCOPE_SYSTEM = hsa.HSA_FENCE_SCOPE_NONE, hsa.HSA_FENCE_SCOPE_AGENT, hsa.HSA_FENCE_SCOPE_SYSTEM
SCOPE_NAMES = {0: "none", 1: "agent", 2: "system", 3: "reserved(3)"}
AQL_WORDS = hsa.AQL_PACKET_SIZE // 4
AMD_AQL_FORMAT_PM4_IB, AMD_AQL_PM4_IB_DW_COUNT_REMAIN = 1, 10

@functools.lru_cache(maxsize=256)   # (a launch asks for the same few headers: computed once each)
def aql_header(ptype: int, barrier: bool, acquire: int, release: int) -> int:
  return (ptype | (int(barrier) << hsa.HSA_PACKET_HEADER_BARRIER.lo) | (acquire << hsa.HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE.lo)
          | (release << hsa.HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE.lo))

def aql_dispatch(kernel_object: int, kernarg: int, grid: Sequence[int], workgroup: Sequence[int], group_segment: int,
                 private_segment: int, barrier: bool = False, acquire: int = SCOPE_SYSTEM, release: int = SCOPE_SYSTEM,
                 completion_signal: int = 0) -> list[int]:
  """A kernel dispatch packet: grid in work-items (HSA counts work-items, not workgroups)."""
  dims = 3 if grid[2] > 1 or workgroup[2] > 1 else 2 if grid[1] > 1 or workgroup[1] > 1 else 1
  for n, v, bits in (("workgroup", workgroup, 16), ("grid", grid, 32)):
    if any(not 0 < x < (1 << bits) for x in v): raise ValueError(f"{n} size {tuple(v)}: each dimension must be 1..{(1 << bits) - 1}")
  w = [aql_header(AQL_DISPATCH, barrier, acquire, release) | (dims << 16), workgroup[0] | (workgroup[1] << 16),
       workgroup[2], grid[0], grid[1], grid[2], private_segment, group_segment, lo32(kernel_object), hi32(kernel_object),
       lo32(kernarg), hi32(kernarg), 0, 0, lo32(completion_signal), hi32(completion_signal)]
  return w

def aql_barrier_and(deps: Sequence[int] = (), barrier: bool = True, acquire: int = SCOPE_SYSTEM, release: int = SCOPE_SYSTEM,
                    completion_signal: int = 0) -> list[int]:
  if len(deps) > 5: raise ValueError(f"a barrier-AND packet holds 5 dependent signals, got {len(deps)}")
  d = list(deps) + [0] * (5 - len(deps))
  return [aql_header(AQL_BARRIER_AND, barrier, acquire, release), 0, *[f(x) for x in d for f in (lo32, hi32)], 0, 0,
          lo32(completion_signal), hi32(completion_signal)]

def aql_pm4_ib(family: str, ib_va: int, ib_dwords: int, barrier: bool, acquire: int = SCOPE_SYSTEM,
               release: int = SCOPE_SYSTEM) -> list[int]:
  """The AMD vendor-specific AQL packet that makes the packet processor run a PM4 indirect buffer."""
  return [aql_header(AQL_VENDOR, barrier, acquire, release) | (AMD_AQL_FORMAT_PM4_IB << 16),
          *pm4_indirect_buffer(family, ib_va, ib_dwords), AMD_AQL_PM4_IB_DW_COUNT_REMAIN] + [0] * 10

def decode_aql(w: Sequence[int]) -> dict[str, Any]:
  """One 16-dword AQL packet as a dict (type, barrier, fences and the type's fields)."""
  h = w[0] & 0xFFFF
  d: dict[str, Any] = {"type": h & 0xFF, "barrier": (h >> 8) & 1, "acquire": (h >> 9) & 3, "release": (h >> 11) & 3}
  t = d["type"]
  if t == AQL_DISPATCH:
    d.update(dims=(w[0] >> 16) & 3, workgroup=(w[1] & 0xFFFF, w[1] >> 16, w[2] & 0xFFFF), grid=(w[3], w[4], w[5]),
             private_segment=w[6], group_segment=w[7], kernel_object=w[8] | (w[9] << 32), kernarg=w[10] | (w[11] << 32),
             completion_signal=w[14] | (w[15] << 32))
  elif t in (AQL_BARRIER_AND, AQL_BARRIER_OR):
    d.update(deps=[w[2 + 2 * i] | (w[3 + 2 * i] << 32) for i in range(5)], completion_signal=w[14] | (w[15] << 32))
  elif t == AQL_VENDOR:
    d.update(format=w[0] >> 16, ib_cmd=list(w[1:5]), dw_count_remain=w[5], completion_signal=w[14] | (w[15] << 32))
  return d

def format_aql(w: Sequence[int]) -> str:
  d = decode_aql(w)
  t = d["type"]
  head = f"{AQL_TYPE_NAMES.get(t, f'type{t}')}{' barrier' if d['barrier'] else ''} acquire={SCOPE_NAMES[d['acquire']]} release={SCOPE_NAMES[d['release']]}"
  if t == AQL_DISPATCH:
    return (f"{head} kernel_object={d['kernel_object']:#x} kernarg={d['kernarg']:#x} grid={d['grid']} workgroup={d['workgroup']} "
            f"dims={d['dims']} group_segment={d['group_segment']} private_segment={d['private_segment']}"
            + (f" completion_signal={d['completion_signal']:#x}" if d["completion_signal"] else ""))
  if t in (AQL_BARRIER_AND, AQL_BARRIER_OR):
    deps = [f"{x:#x}" for x in d["deps"] if x]
    return f"{head} deps=[{', '.join(deps)}]" + (f" completion_signal={d['completion_signal']:#x}" if d["completion_signal"] else "")
  if t == AQL_VENDOR:
    if d["format"] == AMD_AQL_FORMAT_PM4_IB:
      ib = d["ib_cmd"]
      return f"{head} PM4_IB ib={ib[1] | (ib[2] << 32):#x} dwords={ib[3] & 0xFFFFF} dw_count_remain={d['dw_count_remain']}"
    return f"{head} format={d['format']} (unknown vendor format)"
  return head

def describe_dispatch(w: Sequence[int], family: str, read: Any = None, names: dict[int, str] | None = None) -> str:
  """The launch a DISPATCH packet describes, in one line: the kernel's name (`names`: kernel descriptor address -> name),
  grid in workgroups, block (the workgroup), shared bytes (group segment), and what its kernel descriptor (AMDGPUUsage
  "Kernel Descriptor", hsa.amdhsa_kernel_descriptor_t, read at kernel_object through `read(addr, nbytes) -> bytes`)
  reserves: VGPRs per work-item from COMPUTE_PGM_RSRC1 GRANULATED_WORKITEM_VGPR_COUNT (granules of 8 in wave32 and
  on gfx9, 4 in wave64 on gfx10+), SGPRs on gfx9 (GRANULATED_WAVEFRONT_SGPR_COUNT, granules of 16; gfx10+ reserve a
  fixed set), the wave size and the private (scratch) bytes per work-item."""
  d = decode_aql(w)
  if d["type"] != AQL_DISPATCH: return ""
  name = (names or {}).get(d["kernel_object"])
  wg = d["workgroup"]
  groups = tuple(-(-g // max(b, 1)) for g, b in zip(d["grid"], wg))
  s = (f"launch {name!r}" if name else "launch (kernel name unknown)") + f" grid={groups} block={wg} shared={d['group_segment']}"
  if read is None: return s
  try: kd = hsa.amdhsa_kernel_descriptor_t.from_buffer_copy(read(d["kernel_object"], ctypes.sizeof(hsa.amdhsa_kernel_descriptor_t)))
  except Exception as e: return s + f" (cannot read the kernel descriptor at {d['kernel_object']:#x}: {e})"
  w32 = hsa.AMDHSA_KCP_ENABLE_WAVEFRONT_SIZE32.decode(kd.kernel_code_properties)
  vg = (hsa.AMDHSA_RSRC1_GRANULATED_WORKITEM_VGPR_COUNT.decode(kd.compute_pgm_rsrc1) + 1) * (8 if w32 or family == "gfx9" else 4)
  s += f" vgprs={vg}"
  if family == "gfx9": s += f" sgprs={(hsa.AMDHSA_RSRC1_GRANULATED_WAVEFRONT_SGPR_COUNT.decode(kd.compute_pgm_rsrc1) + 1) * 16}"
  return s + f" wave{32 if w32 else 64} private={d['private_segment']} kernarg={d['kernarg']:#x}"

# ---------------------------------------------------------------- PM4
PM4: dict[str, ModuleType] = {t.family: t.pm4 for t in GFX_TARGETS}   # family -> PM4 bindings
# VGT event types the drivers emit, from the generated enums (soc21_enum.h and vega10_enum.h agree on these values)
CS_PARTIAL_FLUSH, CACHE_FLUSH_AND_INV_TS_EVENT, BOTTOM_OF_PIPE_TS = enum_gfx11.CS_PARTIAL_FLUSH, enum_gfx11.CACHE_FLUSH_AND_INV_TS_EVENT, \
  enum_gfx11.BOTTOM_OF_PIPE_TS
WAIT_FUNCS = {0: "always", 1: "<", 2: "<=", 3: "==", 4: "!=", 5: ">=", 6: ">"}
WAIT_GEQ = 5
DATA_SEL_NAMES = {0: "none", 1: "data32", 2: "data64", 3: "gpu_clock64", 4: "sys_clock64"}
PM4_COPY_MAX = 1 << 20  # bytes per DMA_DATA (byte count is 21 bits on gfx9, 26 on gfx11)

def pm4_hdr(op: int, ndw: int) -> int:
  """Type-3 header for a packet of `ndw` dwords after the header."""
  return (3 << 30) | (((ndw - 1) & 0x3FFF) << 16) | ((op & 0xFF) << 8)

def pm4_indirect_buffer(family: str, va: int, ndw: int) -> list[int]:
  p = PM4[family]
  if va & 3: raise ValueError(f"indirect buffer address {va:#x} must be 4-byte aligned")
  if not 0 < ndw < (1 << 20): raise ValueError(f"indirect buffer of {ndw} dwords: 1..{(1 << 20) - 1}")
  return [pm4_hdr(p.PACKET3_INDIRECT_BUFFER, 3), lo32(va), hi32(va), ndw | p.INDIRECT_BUFFER_VALID]

def pm4_wait_reg_mem(family: str, addr: int, value: int, mask: int = M32, func: int = WAIT_GEQ) -> list[int]:
  """Stall the command processor until (mem[addr] & mask) <func> value (32-bit). Fields: addr (2, 2), value (4, 1)."""
  hdr, ctl = _wait_reg_mem_head(family, func)
  return [hdr, ctl, lo32(addr), hi32(addr), value, mask, 4]

@functools.lru_cache(maxsize=64)   # (the header and control words of a family and function: made once, every launch waits)
def _wait_reg_mem_head(family: str, func: int) -> tuple[int, int]:
  p = PM4[family]
  return pm4_hdr(p.PACKET3_WAIT_REG_MEM, 6), (p.WAIT_REG_MEM_FUNCTION(func) | p.WAIT_REG_MEM_MEM_SPACE(1) | p.WAIT_REG_MEM_OPERATION(0)
                                              | p.WAIT_REG_MEM_ENGINE(0))

def pm4_release_mem(family: str, addr: int, value: int, data_sel: int, int_sel: int = 0, ctxid: int = 0) -> list[int]:
  """End-of-pipe event (after all prior work), caches written back, then the data write (and an interrupt whose context id
  is `ctxid`). Fields: addr (3, 2), value (5, 2)."""
  hdr, d1, d2 = _release_mem_head(family, data_sel, int_sel)
  return [hdr, d1, d2, lo32(addr), hi32(addr), lo32(value), hi32(value), ctxid]

@functools.lru_cache(maxsize=64)   # (RELEASE_MEM's header and event/data words per family and selectors: made once)
def _release_mem_head(family: str, data_sel: int, int_sel: int) -> tuple[int, int, int]:
  p = PM4[family]
  if family == "gfx11":
    d1 = (p.PACKET3_RELEASE_MEM_GCR_SEQ | p.PACKET3_RELEASE_MEM_GCR_GL2_WB | p.PACKET3_RELEASE_MEM_GCR_GLM_INV
          | p.PACKET3_RELEASE_MEM_GCR_GLM_WB | p.PACKET3_RELEASE_MEM_CACHE_POLICY(3)
          | p.PACKET3_RELEASE_MEM_EVENT_TYPE(CACHE_FLUSH_AND_INV_TS_EVENT) | p.PACKET3_RELEASE_MEM_EVENT_INDEX(5))
    d2 = p.PACKET3_RELEASE_MEM_DATA_SEL(data_sel) | p.PACKET3_RELEASE_MEM_INT_SEL(int_sel)
  else:
    d1 = (p.EOP_TCL1_ACTION_EN | p.EOP_TC_ACTION_EN | p.EOP_TC_WB_ACTION_EN | p.EOP_TC_MD_ACTION_EN
          | p.EVENT_TYPE(CACHE_FLUSH_AND_INV_TS_EVENT) | p.EVENT_INDEX(5))
    d2 = p.DATA_SEL(data_sel) | p.INT_SEL(int_sel)
  return pm4_hdr(p.PACKET3_RELEASE_MEM, 7), d1, d2

def pm4_pred_exec(family: str, xcc_mask: int, ndw: int) -> list[int]:
  """PRED_EXEC: the next `ndw` dwords run only on the XCCs of `xcc_mask` (bit n: virtual XCC n of the partition); DW1
  is EXEC_COUNT in 13:0 and VIRTUALXCCID_SELECT in 31:24 (ROCr amd_gpu_pm4.h, used by amd_gpu_agent.cpp on NumXcc > 1)."""
  p = PM4[family]
  if not 0 < ndw < (1 << 14): raise ValueError(f"PRED_EXEC over {ndw} dwords: 1..{(1 << 14) - 1}")
  if not 0 < xcc_mask < 256: raise ValueError(f"PRED_EXEC XCC mask {xcc_mask:#x}: 8 bits, at least one set")
  return [pm4_hdr(p.PACKET3_PRED_EXEC, 1), ndw | (xcc_mask << 24)]

def pm4_acquire_mem(family: str) -> list[int]:
  """Invalidate (and write back) the shader caches for the whole address range, as amdgpu's emit_mem_sync does."""
  return list(_acquire_mem_words(family))

@functools.lru_cache(maxsize=8)   # (the same words for every launch of a family: made once)
def _acquire_mem_words(family: str) -> tuple[int, ...]:
  p = PM4[family]
  if family == "gfx11":
    gcr = (p.PACKET3_ACQUIRE_MEM_GCR_CNTL_GL2_INV(1) | p.PACKET3_ACQUIRE_MEM_GCR_CNTL_GL2_WB(1) | p.PACKET3_ACQUIRE_MEM_GCR_CNTL_GLM_INV(1)
           | p.PACKET3_ACQUIRE_MEM_GCR_CNTL_GLM_WB(1) | p.PACKET3_ACQUIRE_MEM_GCR_CNTL_GL1_INV(1) | p.PACKET3_ACQUIRE_MEM_GCR_CNTL_GLV_INV(1)
           | p.PACKET3_ACQUIRE_MEM_GCR_CNTL_GLK_INV(1) | p.PACKET3_ACQUIRE_MEM_GCR_CNTL_GLI_INV(1))
    return (pm4_hdr(p.PACKET3_ACQUIRE_MEM, 7), 0, M32, 0xFFFFFF, 0, 0, 0xA, gcr)
  coher = (p.PACKET3_ACQUIRE_MEM_CP_COHER_CNTL_SH_ICACHE_ACTION_ENA(1) | p.PACKET3_ACQUIRE_MEM_CP_COHER_CNTL_SH_KCACHE_ACTION_ENA(1)
           | p.PACKET3_ACQUIRE_MEM_CP_COHER_CNTL_TC_ACTION_ENA(1) | p.PACKET3_ACQUIRE_MEM_CP_COHER_CNTL_TCL1_ACTION_ENA(1)
           | p.PACKET3_ACQUIRE_MEM_CP_COHER_CNTL_TC_WB_ACTION_ENA(1))
  return (pm4_hdr(p.PACKET3_ACQUIRE_MEM, 6), coher, M32, 0xFFFFFF, 0, 0, 0xA)

def pm4_dma_data(family: str, dest: int, src: int, nbytes: int) -> list[int]:
  """CP DMA copy of `nbytes` (CP_SYNC: the next packet waits for it). Fields: src (2, 2), dest (4, 2), nbytes (6, 1)."""
  p = PM4[family]
  if not 0 < nbytes <= PM4_COPY_MAX: raise ValueError(f"DMA_DATA of {nbytes} bytes: 1..{PM4_COPY_MAX} per packet")
  ctl = (1 << 31) | p.PACKET3_DMA_DATA_ENGINE(0) | p.PACKET3_DMA_DATA_SRC_SEL(0) | p.PACKET3_DMA_DATA_DST_SEL(0)
  return [pm4_hdr(p.PACKET3_DMA_DATA, 6), ctl, lo32(src), hi32(src), lo32(dest), hi32(dest), nbytes]

def pm4_names(family: str) -> dict[int, str]:
  p = PM4[family]
  return {v: k[len("PACKET3_"):] for k, v in vars(p).items() if k.startswith("PACKET3_") and isinstance(v, int) and k.count("_") >= 1
          and k.isupper() and 0 <= v < 256 and not k.endswith(("_START", "_END")) and "(" not in k}

def split_pm4(words: Sequence[int]) -> list[tuple[int, int, list[int]]]:
  """A PM4 stream as (offset, opcode, body) per packet; type-2 filler and type-3 NOP included. Raises ValueError on a
  type-0/1 header or a packet running past the end."""
  out, i = [], 0
  while i < len(words):
    h = words[i]
    t = h >> 30
    if t == 2: out.append((i, -2, [])); i += 1; continue
    if t != 3: raise ValueError(f"dword {i}: {h:#010x} is a type-{t} packet header (compute queues take type-3 packets only)")
    if (h >> 8) & 0xFF == pm4_gfx11.PACKET3_NOP and (h >> 16) & 0x3FFF == 0x3FFF: out.append((i, pm4_gfx11.PACKET3_NOP, [])); i += 1; continue
    n = ((h >> 16) & 0x3FFF) + 1
    if i + 1 + n > len(words): raise ValueError(f"dword {i}: packet of {n} dwords runs past the end of the buffer ({len(words)} dwords)")
    out.append((i, (h >> 8) & 0xFF, list(words[i + 1:i + 1 + n])))
    i += 1 + n
  return out

# VGT_EVENT_TYPE by value, per family, for decoding: the generated enum (soc21_enum.h for gfx11, vega10_enum.h for gfx9;
# the two differ at some values, e.g. 0x15 is WAIT_SYNC on gfx11 and ZPASS_DONE on gfx9)
EVENT_NAMES: dict[str, dict[int, str]] = {t.family: {v: k for k, v in t.enums.ENUMS["VGT_EVENT_TYPE"].items()} for t in GFX_TARGETS}

def macro_fields(family: str, prefix: str, value: int) -> list[tuple[str, int]]:
  """`value` split into the fields the PM4 header defines as PREFIX_FIELD(x) ((x) << shift) macros, low bit first,
  nonzero fields only: e.g. ACQUIRE_MEM's GCR_CNTL (gfx11) or CP_COHER_CNTL (gfx9). The macros do not mask, so a
  field reaches up to the next field's shift (the last one to bit 31)."""
  p, shifts = PM4[family], []
  for k, f in vars(p).items():
    if not k.startswith(prefix) or not callable(f): continue
    try: one = f(1)
    except Exception: continue
    if isinstance(one, int) and one > 0 and one & (one - 1) == 0: shifts.append((one.bit_length() - 1, k[len(prefix):]))
  shifts.sort()
  out = []
  for i, (sh, name) in enumerate(shifts):
    end = shifts[i + 1][0] if i + 1 < len(shifts) else 32
    if (v := (value >> sh) & ((1 << (end - sh)) - 1)): out.append((name, v))
  return out

def bit_flags(family: str, prefix: str, value: int, skip: tuple[str, ...] = ()) -> list[str]:
  """The one-bit flags the PM4 header defines as plain PREFIX_NAME (1 << n) constants that are set in `value`, low bit
  first, without the prefix: e.g. RELEASE_MEM's cache actions (gfx11 PACKET3_RELEASE_MEM_GCR_*, gfx9 EOP_*_ACTION_EN)."""
  bits = sorted((v.bit_length(), k[len(prefix):]) for k, v in vars(PM4[family]).items()
                if k.startswith(prefix) and type(v) is int and v > 0 and v & (v - 1) == 0 and not k[len(prefix):].startswith(skip))
  return [n for b, n in bits if value & (1 << (b - 1))]

# RELEASE_MEM's dword 1 cache actions: gfx11 nvd.h PACKET3_RELEASE_MEM_GCR_* and EXECUTE; gfx9 soc15d.h EOP_* (the
# other one-bit-looking names of that prefix are multi-bit fields' units: EVENT_TYPE(1), EVENT_INDEX(1), ...)
RELEASE_MEM_FLAGS = {"gfx11": ("PACKET3_RELEASE_MEM_", ("EVENT_", "CACHE_POLICY", "DATA_SEL", "INT_SEL", "DST_SEL")), "gfx9": ("EOP_", ())}

def format_pm4_packet(family: str, op: int, b: Sequence[int]) -> str:
  p = PM4[family]
  name = "TYPE2_FILLER" if op == -2 else pm4_names(family).get(op, f"OPCODE_{op:#x}")
  if op == p.PACKET3_WAIT_REG_MEM and len(b) >= 6:
    return (f"WAIT_REG_MEM mem[{b[1] | (b[2] << 32):#x}] & {b[4]:#x} {WAIT_FUNCS.get(b[0] & 7, '?')} value={b[3]} "
            f"({'memory' if (b[0] >> 4) & 3 == 1 else 'register'}, poll {b[5]})")
  if op == p.PACKET3_RELEASE_MEM and len(b) >= 7:
    ev = b[0] & 0x3F
    ds, ints = (b[1] >> 29) & 7, (b[1] >> 24) & 7
    s = f"RELEASE_MEM event={EVENT_NAMES[family].get(ev, hex(ev))} data_sel={DATA_SEL_NAMES.get(ds, ds)} addr={b[2] | (b[3] << 32):#x}"
    if ds in (1, 2): s += f" value={b[4] | ((b[5] << 32) if ds == 2 else 0)}"
    if ints: s += f" int_sel={ints} int_ctxid={b[6] if len(b) > 6 else 0}"
    prefix, skip = RELEASE_MEM_FLAGS[family]
    s += f" event_index={(b[0] >> 8) & 0xF}"
    if (cache := bit_flags(family, prefix, b[0], skip)): s += " cache=" + "|".join(cache)
    return s
  if op == p.PACKET3_EVENT_WRITE and b:
    # nvd.h / soc15d.h: EVENT_TYPE(x) at bit 0, EVENT_INDEX(x) at bit 8 of the first body dword
    ev = b[0] & 0x3F
    return f"EVENT_WRITE event={EVENT_NAMES[family].get(ev, hex(ev))} event_index={(b[0] >> 8) & 0xF}" + "".join(f" {x:#x}" for x in b[1:])
  if op == p.PACKET3_ACQUIRE_MEM:
    # gfx11: GCR_CNTL is the packet's last dword; gfx9: CP_COHER_CNTL its first (pm4_acquire_mem builds both)
    cntl, prefix = (b[-1], "PACKET3_ACQUIRE_MEM_GCR_CNTL_") if family == "gfx11" and len(b) >= 7 else \
                   (b[0], "PACKET3_ACQUIRE_MEM_CP_COHER_CNTL_") if b else (0, "")
    fs = macro_fields(family, prefix, cntl) if prefix else []
    return "ACQUIRE_MEM " + " ".join(f"{x:#x}" for x in b) + (f" ({prefix[len('PACKET3_ACQUIRE_MEM_'):-1]}: "
                                                              + " ".join(f"{n}={v}" for n, v in fs) + ")" if fs else "")
  if op == p.PACKET3_INDIRECT_BUFFER and len(b) >= 3: return f"INDIRECT_BUFFER ib={b[0] | (b[1] << 32):#x} dwords={b[2] & 0xFFFFF} valid={(b[2] >> 23) & 1}"
  if op == p.PACKET3_DMA_DATA and len(b) >= 6:
    return f"DMA_DATA src={b[1] | (b[2] << 32):#x} dest={b[3] | (b[4] << 32):#x} nbytes={b[5] & ((1 << 26) - 1)}"
  if op == p.PACKET3_NOP: return f"NOP ({len(b)} dwords)"
  if op == p.PACKET3_PRED_EXEC and len(b) == 1: return f"PRED_EXEC xcc_mask={(b[0] >> 24) & 0xFF:#x} exec_count={b[0] & 0x3FFF} dwords"
  return f"{name} " + " ".join(f"{x:#x}" for x in b)

def format_pm4(family: str, words: Sequence[int], base: int = 0, mark: int | None = None) -> str:
  """A PM4 stream in words, one packet a line; `mark` (a dword offset) is flagged as where the processor is."""
  lines = []
  try: pkts = split_pm4(words)
  except ValueError as e: return f"  (undecodable PM4: {e})"
  for off, op, b in pkts:
    here = " <== here" if mark is not None and off <= mark < off + 1 + len(b) else ""
    lines.append(f"  {base + 4 * off:#x}: {format_pm4_packet(family, op, b)}{here}")
  return "\n".join(lines)

# ---------------------------------------------------------------- SDMA
SDMA: dict[str, ModuleType] = {t.family: t.sdma for t in GFX_TARGETS}   # family -> SDMA bindings
SDMA_COPY_MAX = 0x400000  # bytes per COPY_LINEAR: amdgpu's copy_max_bytes (sdma_v6_0.c, sdma_v4_4_2.c)
_SDMA_DWORDS = {"COPY_LINEAR": ("HEADER", "COUNT", "PARAMETER", "SRC_ADDR_LO", "SRC_ADDR_HI", "DST_ADDR_LO", "DST_ADDR_HI"),
                "FENCE": ("HEADER", "ADDR_LO", "ADDR_HI", "DATA"), "TRAP": ("HEADER", "INT_CONTEXT"),
                "POLL_REGMEM": ("HEADER", "ADDR_LO", "ADDR_HI", "VALUE", "MASK", "DW5"),
                "TIMESTAMP_GET_GLOBAL": ("HEADER", "WRITE_ADDR_LO", "WRITE_ADDR_HI"), "NOP": ("HEADER", "DATA0")}
_sdma_cache: dict[tuple[str, str], dict[str, tuple[int, int, int]]] = {}

def sdma_fields(family: str, pkt: str) -> dict[str, tuple[int, int, int]]:
  """field name -> (dword, mask, shift) of an SDMA packet, read off the bindings (SDMA_PKT_<pkt>_<DWORD>_<field>_offset)."""
  key = (family, pkt)
  if key not in _sdma_cache:
    mod, out = SDMA[family], {}
    for dw in _SDMA_DWORDS[pkt]:
      pre = f"SDMA_PKT_{pkt}_{dw}_"
      for k, v in vars(mod).items():
        if k.startswith(pre) and k.endswith("_offset") and k[len(pre):-7].islower():
          f = k[len(pre):-7]
          out[f] = (v, getattr(mod, pre + f + "_mask"), getattr(mod, pre + f + "_shift"))
    _sdma_cache[key] = out
  return _sdma_cache[key]

def sdma_pack(family: str, pkt: str, **fields: int) -> list[int]:
  fs = sdma_fields(family, pkt)
  w = [0] * len(_SDMA_DWORDS[pkt])
  for k, v in fields.items():
    off, mask, shift = fs[k]
    if v & ~mask: raise ValueError(f"SDMA {pkt}.{k}={v:#x} does not fit its field (mask {mask:#x})")
    w[off] |= (v & mask) << shift
  return [x & M32 for x in w]

def sdma_unpack(family: str, pkt: str, w: Sequence[int]) -> dict[str, int]:
  return {k: (w[off] >> shift) & mask for k, (off, mask, shift) in sdma_fields(family, pkt).items() if off < len(w)}

def _sdma_op(family: str, name: str) -> int: return getattr(SDMA[family], f"SDMA_OP_{name}")

def sdma_copy(family: str, dest: int, src: int, nbytes: int) -> list[int]:
  """COPY_LINEAR of 1..SDMA_COPY_MAX bytes. Fields: nbytes (1, 1) stored minus one, src (3, 2), dest (5, 2)."""
  if not 0 < nbytes <= SDMA_COPY_MAX: raise ValueError(f"SDMA copy of {nbytes} bytes: 1..{SDMA_COPY_MAX:#x} per COPY_LINEAR")
  return sdma_pack(family, "COPY_LINEAR", op=_sdma_op(family, "COPY"), sub_op=SDMA[family].SDMA_SUBOP_COPY_LINEAR, count=nbytes - 1,
                   src_addr_31_0=lo32(src), src_addr_63_32=hi32(src), dst_addr_31_0=lo32(dest), dst_addr_63_32=hi32(dest))

def sdma_fence(family: str, addr: int, value: int) -> list[int]:
  """Write 32 bits once everything before has completed. Fields: addr (1, 2), value (3, 1)."""
  if addr & 3: raise ValueError(f"SDMA fence address {addr:#x} must be 4-byte aligned")
  return sdma_pack(family, "FENCE", op=_sdma_op(family, "FENCE"), addr_31_0=lo32(addr), addr_63_32=hi32(addr), data=value & M32)

def sdma_trap(family: str, ctx: int) -> list[int]: return sdma_pack(family, "TRAP", op=_sdma_op(family, "TRAP"), int_context=ctx)

def sdma_poll(family: str, addr: int, value: int, mask: int = M32, func: int = WAIT_GEQ) -> list[int]:
  """Poll memory until (mem & mask) <func> value, forever (retry_count 0xfff). Fields: addr (1, 2), value (3, 1)."""
  if addr & 3: raise ValueError(f"SDMA poll address {addr:#x} must be 4-byte aligned")
  return sdma_pack(family, "POLL_REGMEM", op=_sdma_op(family, "POLL_REGMEM"), func=func, mem_poll=1, addr_31_0=lo32(addr),
                   addr_63_32=hi32(addr), value=value & M32, mask=mask, interval=10, retry_count=0xFFF)

def sdma_timestamp(family: str, addr: int) -> list[int]:
  """Write the 64-bit global GPU timestamp. Fields: addr (1, 2)."""
  if addr & 7: raise ValueError(f"SDMA timestamp address {addr:#x} must be 8-byte aligned")
  mod = SDMA[family]
  return sdma_pack(family, "TIMESTAMP_GET_GLOBAL", op=mod.SDMA_OP_TIMESTAMP, sub_op=mod.SDMA_SUBOP_TIMESTAMP_GET_GLOBAL,
                   write_addr_31_3=lo32(addr) >> 3, write_addr_63_32=hi32(addr))


def sdma_packet_len(family: str, w: Sequence[int], i: int) -> int:
  """Dwords of the SDMA packet at w[i]; ValueError for an opcode this decoder does not know."""
  mod, op, sub = SDMA[family], w[i] & 0xFF, (w[i] >> 8) & 0xFF
  if op == mod.SDMA_OP_NOP: return 1 + ((w[i] >> 16) & 0x3FFF)
  if op == mod.SDMA_OP_COPY and sub == mod.SDMA_SUBOP_COPY_LINEAR: return 7
  if op == mod.SDMA_OP_FENCE: return 4
  if op == mod.SDMA_OP_TRAP: return 2
  if op == mod.SDMA_OP_POLL_REGMEM: return 6
  if op == mod.SDMA_OP_TIMESTAMP and sub == mod.SDMA_SUBOP_TIMESTAMP_GET_GLOBAL: return 3
  raise ValueError(f"SDMA opcode {op} sub-opcode {sub} ({w[i]:#010x}) is not one this driver emits or decodes")

_SDMA_SHOWN = {"op", "sub_op", "count", "data", "int_context", "value", "mask", "func", "mem_poll", "retry_count"}

def sdma_packet_name(family: str, w: Sequence[int]) -> str | None:
  """The _SDMA_DWORDS packet an SDMA header starts (by its op and sub-op, from the bindings), or None."""
  mod, op, sub = SDMA[family], w[0] & 0xFF, (w[0] >> 8) & 0xFF
  if op == mod.SDMA_OP_COPY and sub == mod.SDMA_SUBOP_COPY_LINEAR: return "COPY_LINEAR"
  if op == mod.SDMA_OP_TIMESTAMP and sub == mod.SDMA_SUBOP_TIMESTAMP_GET_GLOBAL: return "TIMESTAMP_GET_GLOBAL"
  return next((n for n in ("FENCE", "TRAP", "POLL_REGMEM", "NOP") if op == _sdma_op(family, n)), None)

def sdma_other_fields(family: str, w: Sequence[int]) -> list[tuple[str, int]]:
  """The packet's nonzero fields (sdma_fields, from the SDMA packet header's _offset/_mask/_shift) that the one-line
  summary does not already show: cache policies, swaps, TMZ, the poll interval, HDP flush, ..."""
  pkt = sdma_packet_name(family, w)
  if pkt is None: return []
  return [(k, v) for k, v in sdma_unpack(family, pkt, w).items() if v and k not in _SDMA_SHOWN and "addr" not in k]

def format_sdma_packet(family: str, w: Sequence[int]) -> str:
  line = _format_sdma_packet(family, w)
  extra = sdma_other_fields(family, w)
  return line + ("  [" + " ".join(f"{k}={v:#x}" if v > 9 else f"{k}={v}" for k, v in extra) + "]" if extra else "")

def _format_sdma_packet(family: str, w: Sequence[int]) -> str:
  mod, op = SDMA[family], w[0] & 0xFF
  if op == mod.SDMA_OP_NOP: return f"NOP ({len(w)} dwords)"
  if op == mod.SDMA_OP_COPY:
    f = sdma_unpack(family, "COPY_LINEAR", w)
    return (f"COPY_LINEAR src={f['src_addr_31_0'] | (f['src_addr_63_32'] << 32):#x} dest={f['dst_addr_31_0'] | (f['dst_addr_63_32'] << 32):#x} "
            f"nbytes={f['count'] + 1}")
  if op == mod.SDMA_OP_FENCE:
    f = sdma_unpack(family, "FENCE", w)
    return f"FENCE addr={f['addr_31_0'] | (f['addr_63_32'] << 32):#x} value={f['data']}"
  if op == mod.SDMA_OP_TRAP: return f"TRAP int_context={sdma_unpack(family, 'TRAP', w)['int_context']}"
  if op == mod.SDMA_OP_POLL_REGMEM:
    f = sdma_unpack(family, "POLL_REGMEM", w)
    return (f"POLL_REGMEM (WAIT) mem[{f['addr_31_0'] | (f['addr_63_32'] << 32):#x}] & {f['mask']:#x} {WAIT_FUNCS.get(f['func'], '?')} "
            f"value={f['value']} ({'memory' if f['mem_poll'] else 'register'}, retry {f['retry_count']:#x})")
  if op == mod.SDMA_OP_TIMESTAMP:
    f = sdma_unpack(family, "TIMESTAMP_GET_GLOBAL", w)
    return f"TIMESTAMP_GET_GLOBAL addr={(f['write_addr_31_3'] << 3) | (f['write_addr_63_32'] << 32):#x}"
  return f"SDMA op {op} " + " ".join(f"{x:#x}" for x in w)

def format_sdma(family: str, words: Sequence[int], base: int = 0, mark: int | None = None) -> str:
  lines, i = [], 0
  while i < len(words):
    try: n = sdma_packet_len(family, words, i)
    except ValueError as e:
      lines.append(f"  {base + 4 * i:#x}: {e}")
      break
    here = " <== here" if mark is not None and i <= mark < i + n else ""
    lines.append(f"  {base + 4 * i:#x}: {format_sdma_packet(family, words[i:i + n])}{here}")
    i += n
  return "\n".join(lines)

def words_of(b: bytes) -> list[int]: return list(struct.unpack(f"<{len(b) // 4}I", b[:len(b) // 4 * 4]))
