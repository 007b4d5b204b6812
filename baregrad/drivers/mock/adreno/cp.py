"""The a6xx command processor as a conformance model: decodes every packet of a stream, refuses malformed ones.

Every check cites where the rule comes from. Sources: KGSL (Qualcomm's kernel driver, drivers/gpu/msm/), Mesa's
register database src/freedreno/registers/adreno/adreno_pm4.xml (packet payloads, as generated into
ctypes_autogen/adreno.py). The model is independent of the driver's encoder (drivers/qcom/pm4.py) on purpose: a
driver bug in the header or payload must fail here, not be mirrored.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, Callable

from baregrad.ctypes_autogen import adreno

OPS = adreno.PM4_A6XX
OPNAME = {v: k for k, v in reversed(list(OPS.items()))}
EV = adreno.ENUMS["vgt_event_type"]
COND = adreno.ENUMS["cp_cond_function"]
REG_ALWAYS_ON = adreno.REGS_A6XX["CP_ALWAYS_ON_COUNTER"]
EV_SRC, EV_DST = adreno.ENUMS["event_write_src"], adreno.ENUMS["event_write_dst"]
EW7 = adreno.PACKET_FIELDS_A7XX["CP_EVENT_WRITE7"]["0"]
# Events that write a timestamp dword to the address in the payload (adreno_pm4.xml: CP_EVENT_WRITE, vgt_event_type).
TS_EVENTS = {EV["CACHE_FLUSH_TS"], EV["RB_DONE_TS"], EV["CACHE_FLUSH_AND_INV_TS_EVENT"]}
MAX_IB_DEPTH = 2  # ringbuffer -> IB1 -> IB2; a6xx CP has two IB levels (adreno_pm4.xml: CP_INDIRECT_BUFFER, IB1/IB2 regs)


class CPError(Exception):
  """The CP met a malformed packet or faulted; KGSL would report a hang/fault for the context."""


def _odd_parity_bit(v: int) -> int:
  # KGSL drivers/gpu/msm/adreno_pm4types.h, pm4_calc_odd_parity_bit: the bit making the popcount odd.
  return 1 - (bin(v).count("1") & 1)


class GpuMemory:
  """GPU virtual memory: mapped ranges backed by bytearrays; an access outside them is a page fault."""

  def __init__(self) -> None:
    self.ranges: list[tuple[int, Any]] = []  # (va, a bytearray or a ctypes char array over host memory)

  def map(self, va: int, data: Any) -> None:
    for base, buf in self.ranges:
      if va < base + len(buf) and base < va + len(data):   # model's own invariant (kgsl_mmu gives each object its own range)
        raise CPError(f"mapping {va:#x}+{len(data):#x} overlaps {base:#x}+{len(buf):#x}")
    self.ranges.append((va, data))

  def unmap(self, va: int) -> None:
    self.ranges = [(b, d) for b, d in self.ranges if b != va]

  def _find(self, va: int, size: int) -> tuple[Any, int]:
    for base, buf in self.ranges:
      if base <= va and va + size <= base + len(buf): return buf, va - base
    # kgsl_iommu.c kgsl_iommu_fault_handler: an access to an unmapped GPU address is an SMMU page fault
    raise CPError(f"GPU page fault: {size} bytes at {va:#x} are not mapped")

  def read(self, va: int, size: int) -> bytes:
    buf, off = self._find(va, size)
    return bytes(buf[off:off + size])

  def write(self, va: int, data: bytes) -> None:
    buf, off = self._find(va, len(data))
    buf[off:off + len(data)] = data

  def read32(self, va: int) -> int:
    return struct.unpack("<I", self.read(va, 4))[0]

  def write32(self, va: int, v: int) -> None:
    self.write(va, struct.pack("<I", v & 0xFFFFFFFF))


@dataclass
class _Frame:
  words: list[int]
  pos: int = 0


@dataclass
class CP:
  """One CP: registers, the loaded shader/constant state, and the stream it is working through. `gen`: the Adreno
  generation (6: a6xx, 7: a7xx, where opcode 0x46 is CP_EVENT_WRITE7)."""
  mem: GpuMemory
  regs: dict[int, int] = field(default_factory=dict)
  state: dict[tuple[int, int, int], list[int]] = field(default_factory=dict)  # (block, type, dst_off) -> dwords
  markers: list[int] = field(default_factory=list)
  dispatch: Callable[[CP, tuple[int, int, int]], None] | None = None
  always_on: int = 0
  stack: list[_Frame] = field(default_factory=list)
  blocked_on: str | None = None
  gen: int = 6

  def submit(self, words: list[int]) -> None:
    """Queue a ringbuffer-level stream; run() works through it."""
    # model's own: one stream at a time (kgsl.py queues submissions and runs them in order)
    if self.stack: raise CPError("CP is still working through an earlier stream (blocked on: %s)" % self.blocked_on)
    self.stack = [_Frame([int(w) & 0xFFFFFFFF for w in words])]

  def run(self) -> bool:
    """Execute until the stream ends (True) or a CP_WAIT_REG_MEM is unsatisfied (False; call run() again later)."""
    while self.stack:
      fr = self.stack[-1]
      if fr.pos >= len(fr.words):
        self.stack.pop()
        continue
      start = fr.pos
      h = fr.words[start]
      kind = h >> 28
      if kind == 4:
        # KGSL adreno_pm4types.h pkt_is_type4: bit 27 is the odd parity of the offset (26:8), bit 7 of the count (6:0).
        reg, cnt = (h >> 8) & 0x7FFFF, h & 0x7F
        if (h >> 27) & 1 != _odd_parity_bit(reg) or (h >> 7) & 1 != _odd_parity_bit(cnt):
          raise self._err(start, f"type-4 header {h:#010x} has a wrong parity bit (offset {reg:#x}, count {cnt})")
        payload = self._payload(fr, cnt)
        for k, v in enumerate(payload): self.regs[reg + k] = v
        continue
      if kind != 7:
        # KGSL adreno_pm4types.h: a5xx+ streams carry only CP_TYPE4_PKT and CP_TYPE7_PKT headers.
        raise self._err(start, f"dword {h:#010x} is not a type-4 or type-7 header")
      # KGSL adreno_pm4types.h pkt_is_type7: bits 27:24 zero, bit 23 parity of the opcode (22:16), bit 15 of the count (13:0).
      op, cnt = (h >> 16) & 0x7F, h & 0x3FFF
      if h & 0x0F000000 or (h >> 23) & 1 != _odd_parity_bit(op) or (h >> 15) & 1 != _odd_parity_bit(cnt):
        raise self._err(start, f"type-7 header {h:#010x} is malformed (reserved bits or parity; opcode {op:#x}, count {cnt})")
      payload = self._payload(fr, cnt)
      if not self._packet(op, payload, start):
        fr.pos = start  # not consumed: the wait re-evaluates on the next run()
        return False
    self.blocked_on = None
    return True

  def _err(self, pos: int, msg: str) -> CPError:
    return CPError(f"IB level {len(self.stack) - 1}, dword {pos}: {msg}")

  def _payload(self, fr: _Frame, cnt: int) -> list[int]:
    start = fr.pos
    # adreno_pm4types.h type-4/type-7 count: that many payload dwords follow the header; model's own: a packet running
    # past the end of its buffer (IB sizedwords) is refused rather than read from whatever follows
    if start + 1 + cnt > len(fr.words):
      raise self._err(start, f"packet needs {cnt} payload dwords, its buffer has {len(fr.words) - start - 1} left")
    fr.pos = start + 1 + cnt
    return fr.words[start + 1:fr.pos]

  def _need(self, name: str, payload: list[int], pos: int, *sizes: int) -> None:
    # Payload sizes from adreno_pm4.xml's <domain> for each packet.
    if len(payload) not in sizes:
      raise self._err(pos, f"{name} takes {' or '.join(map(str, sizes))} payload dwords, got {len(payload)}")

  def read_reg(self, reg: int) -> int:
    if reg in (REG_ALWAYS_ON, REG_ALWAYS_ON + 1):
      # CP_ALWAYS_ON_COUNTER (a6xx.xml) is a free-running 64-bit counter; the model advances it on every read.
      self.always_on += 1 if reg == REG_ALWAYS_ON else 0
      return (self.always_on >> (32 * (reg - REG_ALWAYS_ON))) & 0xFFFFFFFF
    return self.regs.get(reg, 0)

  def _event_write7(self, p: list[int], pos: int) -> bool:
    # adreno_pm4.xml CP_EVENT_WRITE7 (a7xx, opcode 0x46): EVENT, WRITE_SRC, WRITE_DST, WRITE_ENABLED in dword 0; with a
    # write to RAM, ADDR_0_LO/HI then the payload (EV_WRITE_USER_32B: PAYLOAD_0, EV_WRITE_USER_64B: PAYLOAD_0/1)
    if not p: raise self._err(pos, "CP_EVENT_WRITE7 without its dword 0")   # adreno_pm4.xml CP_EVENT_WRITE7_0
    if not EW7["WRITE_ENABLED"].decode(p[0]):
      self._need("CP_EVENT_WRITE7 without WRITE_ENABLED", p, pos, 1)   # adreno_pm4.xml CP_EVENT_WRITE7: no ADDR/PAYLOAD without a write
      return True
    src, dst = EW7["WRITE_SRC"].decode(p[0]), EW7["WRITE_DST"].decode(p[0])
    # adreno_pm4.xml event_write_dst; model's own limit: only EV_DST_RAM is modelled
    if dst != EV_DST["EV_DST_RAM"]: raise self._err(pos, f"CP_EVENT_WRITE7 WRITE_DST {dst} (on-chip) is not modelled; EV_DST_RAM (0) is")
    sizes = {EV_SRC["EV_WRITE_USER_32B"]: (4, 4), EV_SRC["EV_WRITE_USER_64B"]: (5, 8), EV_SRC["EV_WRITE_ALWAYSON"]: (3, 8)}
    # adreno_pm4.xml event_write_src; model's own limit: USER_32B, USER_64B, ALWAYSON are modelled
    if src not in sizes: raise self._err(pos, f"CP_EVENT_WRITE7 WRITE_SRC {src} is not modelled (USER_32B, USER_64B, ALWAYSON are)")
    n, size = sizes[src]
    self._need(f"CP_EVENT_WRITE7 of WRITE_SRC {src}", p, pos, n)   # adreno_pm4.xml CP_EVENT_WRITE7: ADDR_0_LO/HI + PAYLOAD_0[/1]
    addr = p[1] | p[2] << 32
    # the model refuses a write not aligned to its size (turnip places its 64-bit timestamps and fences 8-byte aligned)
    if addr % size: raise self._err(pos, f"CP_EVENT_WRITE7 address {addr:#x} is not {size}-byte aligned for its {8 * size}-bit write")
    if src == EV_SRC["EV_WRITE_ALWAYSON"]:
      self.always_on += 1   # the free-running always-on counter, advanced per read as CP_ALWAYS_ON_COUNTER is
      self.mem.write(addr, struct.pack("<Q", self.always_on))
    else: self.mem.write(addr, struct.pack(f"<{n - 3}I", *p[3:]))   # everything before it has finished (packets run in order)
    return True

  def _packet(self, op: int, p: list[int], pos: int) -> bool:
    name = OPNAME.get(op, f"opcode {op:#x}")
    if op == OPS["CP_NOP"]: return True
    if op == OPS["CP_WAIT_FOR_IDLE"]:
      self._need(name, p, pos, 0)   # adreno_pm4.xml CP_WAIT_FOR_IDLE: no payload
      return True
    if op == OPS["CP_SET_MARKER"]:
      self._need(name, p, pos, 1)   # adreno_pm4.xml CP_SET_MARKER: one dword (CP_SET_MARKER_0)
      self.markers.append(p[0])
      return True
    if op == OPS["CP_MEM_WRITE"]:
      # adreno_pm4.xml CP_MEM_WRITE: ADDR_LO, ADDR_HI, then one or more data dwords.
      if len(p) < 3: raise self._err(pos, f"CP_MEM_WRITE needs an address and at least one dword, got {len(p)} dwords")
      addr = p[0] | p[1] << 32
      # model's own: the CP writes whole dwords, so the address must be dword aligned
      if addr & 3: raise self._err(pos, f"CP_MEM_WRITE address {addr:#x} is not dword aligned")
      self.mem.write(addr, struct.pack(f"<{len(p) - 2}I", *p[2:]))
      return True
    if op == OPS["CP_EVENT_WRITE"] and self.gen >= 7: return self._event_write7(p, pos)
    if op == OPS["CP_EVENT_WRITE"]:
      ev = p[0] & 0xFF if p else -1
      if ev in TS_EVENTS:
        # adreno_pm4.xml CP_EVENT_WRITE: a timestamp event carries ADDR_0_LO, ADDR_0_HI and the value (4 dwords).
        self._need(f"CP_EVENT_WRITE of timestamp event {ev}", p, pos, 4)
        addr = p[1] | p[2] << 32
        # model's own: a dword timestamp at a dword-aligned address
        if addr & 3: raise self._err(pos, f"CP_EVENT_WRITE timestamp address {addr:#x} is not dword aligned")
        self.mem.write32(addr, p[3])  # everything before it has finished: the model runs packets in order
      else:
        self._need(f"CP_EVENT_WRITE of event {ev}", p, pos, 1)   # adreno_pm4.xml CP_EVENT_WRITE: a non-timestamp event is CP_EVENT_WRITE_0 alone
      return True
    if op == OPS["CP_WAIT_REG_MEM"]:
      self._need(name, p, pos, 6)   # adreno_pm4.xml CP_WAIT_REG_MEM_0..5
      fn, poll = p[0] & 7, (p[0] >> 4) & 3
      # adreno_pm4.xml CP_WAIT_REG_MEM_0.FUNCTION (cp_cond_function): WRITE_ALWAYS (0) is no comparison to wait on
      if fn not in COND.values() or fn == COND["WRITE_ALWAYS"]:
        raise self._err(pos, f"CP_WAIT_REG_MEM function {fn} is not a comparison (cp_cond_function WRITE_LT..WRITE_GT)")
      if poll == 0: cur = self.read_reg(p[1] & 0x3FFFF)
      elif poll == 1:
        addr = p[1] | p[2] << 32
        # adreno_pm4.xml CP_WAIT_REG_MEM_1.POLL_ADDR_LO is bits 31:2 (a dword address)
        if addr & 3: raise self._err(pos, f"CP_WAIT_REG_MEM poll address {addr:#x} is not dword aligned")
        cur = self.mem.read32(addr)
      else: raise self._err(pos, f"CP_WAIT_REG_MEM poll type {poll} (scratch/on-chip) is not modelled")
      v, ref = cur & p[4], p[3]
      ok = {1: v < ref, 2: v <= ref, 3: v == ref, 4: v != ref, 5: v >= ref, 6: v > ref}[fn]
      if not ok: self.blocked_on = f"CP_WAIT_REG_MEM: value {cur:#x} & mask {p[4]:#x} vs ref {ref:#x} (function {fn})"
      return ok
    if op == OPS["CP_REG_TO_MEM"]:
      # adreno_pm4.xml CP_REG_TO_MEM_0 (REG, CNT, 64B, ACCUMULATE), _1 DEST, _2 DEST_HI; ACCUMULATE is model's own limit
      self._need(name, p, pos, 3)
      reg, cnt, is64 = p[0] & 0x3FFFF, (p[0] >> 18) & 0xFFF, (p[0] >> 30) & 1
      if p[0] >> 31: raise self._err(pos, "CP_REG_TO_MEM ACCUMULATE is not modelled")
      if cnt == 0: raise self._err(pos, "CP_REG_TO_MEM with CNT 0 copies nothing")   # model's own: an empty copy is a driver bug
      # adreno_pm4.xml CP_REG_TO_MEM_0.64B: CNT counts dwords of 64-bit register pairs (model's own: so it is even)
      if is64 and cnt & 1: raise self._err(pos, f"CP_REG_TO_MEM 64B copies register pairs; CNT {cnt} is odd")
      addr = p[1] | p[2] << 32
      vals = [self.read_reg(reg + k) for k in range(cnt)]
      self.mem.write(addr, struct.pack(f"<{cnt}I", *vals))
      return True
    if op == OPS["CP_MEMCPY"]:
      # adreno_pm4.xml CP_MEMCPY: DWORDS, SRC_LO/HI, DST_LO/HI (5 dwords); dword-aligned addresses
      self._need(name, p, pos, 5)
      n, src, dst = p[0], p[1] | p[2] << 32, p[3] | p[4] << 32
      # model's own: an empty copy is refused; alignment: adreno_pm4.xml CP_MEMCPY copies dwords
      if n == 0 or (src | dst) & 3: raise self._err(pos, f"CP_MEMCPY of {n} dwords {src:#x} -> {dst:#x} (needs n > 0, dword alignment)")
      self.mem.write(dst, self.mem.read(src, 4 * n))
      return True
    if op == OPS["CP_INDIRECT_BUFFER"]:
      self._need(name, p, pos, 3)   # adreno_pm4.xml CP_INDIRECT_BUFFER: IB_BASE_LO/HI, CONTROL (IB_SIZE 19:0)
      addr, size = p[0] | p[1] << 32, p[2] & 0xFFFFF
      if len(self.stack) > MAX_IB_DEPTH: raise self._err(pos, f"CP_INDIRECT_BUFFER nested deeper than IB{MAX_IB_DEPTH}")
      # adreno_dispatch.c _verify_ib: an IB of size 0, or not IS_ALIGNED(gpuaddr, 4), is refused (IB2s: the same rule here)
      if addr & 3 or size == 0: raise self._err(pos, f"CP_INDIRECT_BUFFER at {addr:#x} of {size} dwords (needs dword alignment, size > 0)")
      self.stack.append(_Frame(list(struct.unpack(f"<{size}I", self.mem.read(addr, size * 4)))))
      return True
    if op == OPS["CP_LOAD_STATE6_FRAG"] or op == OPS["CP_LOAD_STATE6_GEOM"] or op == OPS["CP_LOAD_STATE6"]:
      # adreno_pm4.xml CP_LOAD_STATE6_0/_1/_2: the header (dword 0, EXT_SRC_ADDR, EXT_SRC_ADDR_HI) precedes any data
      if len(p) < 3: raise self._err(pos, f"{name} needs 3 header dwords, got {len(p)}")
      # adreno_pm4.xml CP_LOAD_STATE6_0: DST_OFF 13:0, STATE_TYPE 15:14, STATE_SRC 17:16, STATE_BLOCK 21:18, NUM_UNIT 31:22.
      dst, stype, src, block, nunit = p[0] & 0x3FFF, (p[0] >> 14) & 3, (p[0] >> 16) & 3, (p[0] >> 18) & 0xF, p[0] >> 22
      if src == 0: data = p[3:]  # SS6_DIRECT: the data follows in the packet
      elif src == 2:  # SS6_INDIRECT: EXT_SRC_ADDR (dword aligned, bits 31:2) and EXT_SRC_ADDR_HI
        self._need(f"{name} (indirect)", p, pos, 3)
        # adreno_pm4.xml CP_LOAD_STATE6_1.EXT_SRC_ADDR is bits 31:2
        if p[1] & 3: raise self._err(pos, f"{name} EXT_SRC_ADDR {p[1]:#x} has bits 1:0 set")
        self.state[(block, stype, dst)] = [p[1] | p[2] << 32, nunit]  # address and units, read at dispatch
        return True
      else: raise self._err(pos, f"{name} STATE_SRC {src} (bindless/ubo) is not modelled")   # a6xx_state_src; model's own limit
      # adreno_pm4.xml CP_LOAD_STATE6 SS6_DIRECT: the NUM_UNIT units follow the header (model's own: none at all is refused)
      if not data: raise self._err(pos, f"{name} direct load of {nunit} units carries no data")
      self.state[(block, stype, dst)] = data
      return True
    if op == OPS["CP_EXEC_CS"]:
      self._need(name, p, pos, 4)   # adreno_pm4.xml CP_EXEC_CS_0..3 (NGROUPS_X/Y/Z in 1..3)
      grid = (p[1], p[2], p[3])
      # model's own: a dispatch with an empty axis is refused (the driver has no reason to emit one)
      if min(grid) == 0: raise self._err(pos, f"CP_EXEC_CS grid {grid} has an empty axis")
      if self.dispatch is None: raise self._err(pos, "CP_EXEC_CS: this mock has no shader executor attached")
      self.dispatch(self, grid)
      return True
    raise self._err(pos, f"{name} is not a packet this CP model decodes")   # model's own: unmodelled packets are refused by name
