"""Scratch (the private segment) of the AQL compute queue: how much backing memory to allocate and what the command
processor is told about it. KFD takes no part: its MQD managers never program scratch for a user queue
(kfd_mqd_manager_v11.c / kfd_mqd_manager_v9.c: init_mqd and update_mqd leave compute_tmpring_size and
compute_dispatch_scratch_base_* at 0 and only point cp_hqd_pq_rptr_report_addr at the read pointer), and
kfd_queue.c: kfd_queue_acquire_buffers checks the ring, pointers, EOP and context-save buffers, not scratch. The CP
firmware finds the queue's amd_queue_t from that read pointer (read_dispatch_id_field_base_byte_offset) and reads the
scratch fields there at each dispatch that enables a private segment.

The facts, with their sources (ROCR-Runtime as of Oct 2024; ROCdbgapi as of Oct 2024; LLVM AMDGPUUsage):
- amd_queue_t layout (ROCr inc/amd_hsa_queue.h): compute_tmpring_size at 0x8C, scratch_resource_descriptor[4] at
  0x90, scratch_backing_memory_location 0xA0, scratch_backing_memory_byte_size 0xA8, scratch_wave64_lane_byte_size
  0xB0, queue_properties 0xB4, queue_inactive_signal 0xC0; group/private_segment_aperture_base_hi 0x40/0x44,
  max_cu_id/max_wave_id 0x48/0x4C.
- gfx1100 and gfx942 have *architected flat scratch* (AMDGPUUsage processor table): the kernel descriptor enables no
  private segment buffer or flat scratch init SGPRs; ENABLE_PRIVATE_SEGMENT makes the hardware initialize
  FLAT_SCRATCH to "the 64-bit address of the base of scratch backing memory ... for the queue ... plus the value of
  the wave's Scratch Wavefront Offset" (AMDGPUUsage "Flat Scratch", compute_pgm_rsrc2 bit 0), and SCRATCH_* / flat
  private-aperture accesses interleave lanes by dword: wave base + (addr / 4) * wave_size * 4 + lane * 4 + addr % 4
  (AMDGPUUsage "Address Spaces", Private).
- scratch_backing_memory_location is the absolute GPU VA on gfx9+ (ROCr amd_gpu_agent.cpp AcquireQueueMainScratch:
  need_queue_scratch_base = major > 8), so AMDKFD_IOC_SET_SCRATCH_BACKING_VA (SH_HIDDEN_PRIVATE_BASE, gfx8's offset
  base) is not needed.
- Sizes (ROCr amd_aql_queue.cpp DynamicScratchHandler and InitScratchSRD / FillComputeTmpRingSize[_Gfx11]): the
  per-work-item size is the dispatch's private segment size rounded up to (unit / wave size), unit = 256 bytes on
  gfx11 and 1024 on gfx9 (the COMPUTE_TMPRING_SIZE.WAVESIZE granule; its width 15 bits on gfx11, 13 on gfx9:
  ROCr inc/registers.h); the queue backs every scratch slot of the device: CUs x max_slots_scratch_cu waves;
  WAVESIZE = ceil(wave size x per-work-item / unit); WAVES counts slots per shader engine on gfx11 and per XCC on gfx9,
  capped by CUs x max_slots_scratch_cu; scratch_backing_memory_byte_size and the descriptor's NUM_RECORDS are the
  size of one XCC's share; scratch_wave64_lane_byte_size is the per-work-item size scaled to a 64-lane wave.
- Where a wave's slot is (ROCdbgapi architecture.cpp scratch_memory_region): gfx11 offset (WAVES x SE + slot) x
  WAVESIZE x 256; gfx9 ((WAVES / SEs) x SE + slot) x WAVESIZE x 1024, from scratch_backing_memory_location.
- A dispatch whose private segment is larger than the queue's makes the CP ask the runtime for more (AMDGPUUsage
  "Flat Scratch": "CP checks that the value in the kernel dispatch packet Private Segment Byte Size is not larger and
  requests the runtime to increase the queue's scratch size"; ROCr DynamicQueueEventsHandler: error code 0x401 /
  0x400 | 1 in queue_inactive_signal, the queue waits). This driver never lets that happen: it grows the queue's
  scratch before a program that needs more is used (AMDDevice.ensure_scratch), with the queue idle.

Unverified (no hardware here): how a gfx942 CP splits the backing memory over its 8 XCCs. ROCr gives it one base and
a per-XCC byte size ("report size per XCC"); this driver allocates all XCCs' shares contiguously from that base, as
ROCr does, and relies on the firmware to offset each XCC by its share."""
from __future__ import annotations
import ctypes
from dataclasses import dataclass
from typing import Any
from baregrad.drivers.vmem import round_up
from baregrad.drivers.amd.hw import GFX_TARGETS

# amd_queue_t field offsets (ROCr inc/amd_hsa_queue.h)
Q_GROUP_APERTURE_HI, Q_PRIVATE_APERTURE_HI, Q_MAX_CU_ID, Q_MAX_WAVE_ID = 0x40, 0x44, 0x48, 0x4C
Q_TMPRING, Q_SRD, Q_SCRATCH_BASE, Q_SCRATCH_SIZE, Q_LANE64_SIZE, Q_PROPERTIES, Q_INACTIVE_SIGNAL = 0x8C, 0x90, 0xA0, 0xA8, 0xB0, 0xB4, 0xC0
AMD_QUEUE_PROPERTIES_IS_PTR64 = 1 << 1
# COMPUTE_TMPRING_SIZE (ROCr inc/registers.h; the bindings' gfx11.py/gfx9_4_3.py masks agree): WAVES 11:0, WAVESIZE 12+
TMPRING_WAVES_MASK = 0xFFF
UNIT = {t.family: t.scratch_unit for t in GFX_TARGETS}                    # bytes per WAVESIZE unit, per family
WAVESIZE_BITS = {t.family: t.scratch_wavesize_bits for t in GFX_TARGETS}  # (the target records, hw.py)
MAX_PRIVATE_SEGMENT = 262128                  # ROCr amd_gpu_agent.cpp: the largest per-work-item private segment


@dataclass(frozen=True)
class Topology:
  """What scratch sizing needs from the KFD node properties."""
  cus: int               # compute units of the whole device (all XCCs)
  shader_engines: int    # of the whole device (array_count / simd_arrays_per_engine; sysfs counts every XCC's)
  xccs: int
  slots_per_cu: int      # max_slots_scratch_cu
  waves_per_cu: int      # max_waves_per_simd x simd_per_cu

  @staticmethod
  def from_props(p: dict[str, int]) -> "Topology":
    xccs = max(p.get("num_xcc", 1), 1)
    return Topology(p["simd_count"] // p["simd_per_cu"], max(p["array_count"] // max(p.get("simd_arrays_per_engine", 1), 1), 1), xccs,
                    p.get("max_slots_scratch_cu", 32) or 32, p.get("max_waves_per_simd", 16) * p["simd_per_cu"])

@dataclass(frozen=True)
class ScratchLayout:
  """One scratch configuration of the queue: what is allocated and what the CP is told."""
  family: str
  lanes: int             # wave size
  per_lane: int          # bytes of private segment per work-item (rounded as the CP needs)
  wavesize: int          # COMPUTE_TMPRING_SIZE.WAVESIZE (units of UNIT[family] bytes)
  waves: int             # COMPUTE_TMPRING_SIZE.WAVES (per shader engine on gfx11, per XCC on gfx9)
  slots: int             # wave slots the memory backs, whole device
  size: int              # bytes of backing memory, whole device (page aligned)
  xccs: int
  @property
  def wave_bytes(self) -> int: return self.wavesize * UNIT[self.family]
  @property
  def tmpring(self) -> int: return (self.waves & TMPRING_WAVES_MASK) | (self.wavesize << 12)
  @property
  def size_per_xcc(self) -> int: return self.size // self.xccs
  @property
  def lane64_bytes(self) -> int: return self.per_lane * self.lanes // 64

def layout(family: str, lanes: int, topo: Topology, private_segment_size: int, occupancy: float = 1.0) -> ScratchLayout:
  """The scratch a queue needs so that every wave slot of the device (or `occupancy` of them) can run a kernel with
  `private_segment_size` bytes per work-item (ROCr's sizing; see the module docstring)."""
  if not 0 < private_segment_size <= MAX_PRIVATE_SEGMENT:
    raise ValueError(f"private segment of {private_segment_size} bytes per work-item: 1..{MAX_PRIVATE_SEGMENT} (ROCr's limit)")
  unit = UNIT[family]
  per_lane = round_up(private_segment_size, unit // lanes)
  wavesize = -(-lanes * per_lane // unit)
  if wavesize >= 1 << WAVESIZE_BITS[family]:
    raise ValueError(f"private segment of {private_segment_size} bytes per work-item needs {wavesize * unit} bytes per wave: more than "
                     f"COMPUTE_TMPRING_SIZE.WAVESIZE holds ({WAVESIZE_BITS[family]} bits of {unit}-byte units)")
  # WAVES must divide evenly over the shader engines (ROCr's assertion; ROCdbgapi disables scratch otherwise)
  per = topo.shader_engines if family == "gfx11" else topo.xccs
  se_per_group = topo.shader_engines // per
  cap = topo.cus // topo.xccs * topo.slots_per_cu if family == "gfx11" else topo.cus * topo.slots_per_cu
  waves = min(int(topo.cus * topo.slots_per_cu * occupancy) // per, cap)
  waves = max(waves // se_per_group * se_per_group, se_per_group)
  slots = waves * per
  return ScratchLayout(family, lanes, per_lane, wavesize, waves, slots, round_up(slots * wavesize * unit, 4096), topo.xccs)

def resource_descriptor(family: str, base: int, size_per_xcc: int) -> list[int]:
  """The scratch buffer descriptor ROCr puts in amd_queue_t (InitScratchSRD: swizzled, ADD_TID, 32-bit uint format).
  Architected flat scratch kernels do not read it; it is filled for firmware or tools that might."""
  w1 = ((base >> 32) & 0xFFFF) | (1 << 30)                       # BASE_ADDRESS_HI, SWIZZLE_ENABLE (bit 30 on gfx11, 31:30 field)
  if family == "gfx11":
    # DST_SEL_XYZW 4,5,6,7; FORMAT BUF_FORMAT_32_UINT (0x14) at 12; ADD_TID_ENABLE 23; OOB_SELECT 2 at 28; TYPE 0
    w3 = 4 | (5 << 3) | (6 << 6) | (7 << 9) | (0x14 << 12) | (1 << 23) | (2 << 28)
  else:
    w1 = ((base >> 32) & 0xFFFF) | (1 << 31)                     # gfx9: SWIZZLE_ENABLE is bit 31
    # DST_SEL_XYZW; NUM_FORMAT UINT (4) at 12; DATA_FORMAT 32 (4) at 15; ELEMENT_SIZE 1 (4 B) at 19; INDEX_STRIDE 3 (64) at 21;
    # ADD_TID_ENABLE 23
    w3 = 4 | (5 << 3) | (6 << 6) | (7 << 9) | (4 << 12) | (4 << 15) | (1 << 19) | (3 << 21) | (1 << 23)
  return [base & 0xFFFFFFFF, w1, size_per_xcc & 0xFFFFFFFF, w3]

def write_queue_fields(amd_queue: int, lay: ScratchLayout | None, base: int) -> None:
  """Point the amd_queue_t at `cpu` address amd_queue to the scratch (or to none: all zero)."""
  u32 = lambda off, v: setattr(ctypes.c_uint32.from_address(amd_queue + off), "value", v & 0xFFFFFFFF)   # noqa: E731
  u64 = lambda off, v: setattr(ctypes.c_uint64.from_address(amd_queue + off), "value", v)               # noqa: E731
  if lay is None:
    for off in (Q_TMPRING, Q_LANE64_SIZE): u32(off, 0)
    for off in (Q_SCRATCH_BASE, Q_SCRATCH_SIZE): u64(off, 0)
    for i in range(4): u32(Q_SRD + 4 * i, 0)
    return
  for i, w in enumerate(resource_descriptor(lay.family, base, lay.size_per_xcc)): u32(Q_SRD + 4 * i, w)
  u64(Q_SCRATCH_BASE, base)
  u64(Q_SCRATCH_SIZE, lay.size_per_xcc)
  u32(Q_LANE64_SIZE, lay.lane64_bytes)
  u32(Q_TMPRING, lay.tmpring)   # last: the CP reads a consistent set once the queue runs again

def describe(lay: ScratchLayout | None, base: int = 0) -> str:
  if lay is None: return "no scratch"
  return (f"scratch {lay.size:#x} bytes at {base:#x}: {lay.per_lane} bytes per work-item, {lay.slots} wave slots of {lay.wave_bytes} bytes "
          f"(COMPUTE_TMPRING_SIZE {lay.tmpring:#x}: WAVES {lay.waves}, WAVESIZE {lay.wavesize})")

def read_queue_fields(mem: Any) -> dict[str, int]:
  """The scratch fields of an amd_queue_t given as bytes (for decoders and tests)."""
  import struct
  return {"compute_tmpring_size": struct.unpack_from("<I", mem, Q_TMPRING)[0], "srd": list(struct.unpack_from("<4I", mem, Q_SRD)),
          "scratch_backing_memory_location": struct.unpack_from("<Q", mem, Q_SCRATCH_BASE)[0],
          "scratch_backing_memory_byte_size": struct.unpack_from("<Q", mem, Q_SCRATCH_SIZE)[0],
          "scratch_wave64_lane_byte_size": struct.unpack_from("<I", mem, Q_LANE64_SIZE)[0]}
