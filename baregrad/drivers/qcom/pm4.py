"""PM4 command streams for Adreno a6xx/a7xx: type-4 register writes and type-7 packets with their parity bits.

Header layouts (KGSL's drivers/gpu/msm/adreno_pm4types.h, pkt_is_type4/pkt_is_type7; Mesa's adreno_pm4.xml):
  type 4: 0x4 in bits 31:28, odd parity of the register offset in bit 27, register offset in 26:8,
          odd parity of the count in bit 7, count (registers written) in 6:0.
  type 7: 0x7 in bits 31:28, bits 27:24 zero, odd parity of the opcode in bit 23, opcode in 22:16,
          odd parity of the count in bit 15, count (payload dwords) in 13:0.
Payload field layouts and opcodes come from the generated bindings (ctypes_autogen/adreno.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from baregrad.ctypes_autogen import adreno

OP: dict[str, int] = adreno.PM4_A6XX
FIELDS = adreno.PACKET_FIELDS_A6XX
EVENTS: dict[str, int] = adreno.ENUMS["vgt_event_type"]
COND: dict[str, int] = adreno.ENUMS["cp_cond_function"]
POLL: dict[str, int] = adreno.ENUMS["poll_memory_type"]
STATE_BLOCK: dict[str, int] = adreno.ENUMS["a6xx_state_block"]
STATE_TYPE: dict[str, int] = adreno.ENUMS["a6xx_state_type"]
STATE_SRC: dict[str, int] = adreno.ENUMS["a6xx_state_src"]
TYPE4_MAX_REGS = 0x7F
TYPE7_MAX_DWORDS = 0x3FFF
OPNAME: dict[int, str] = {}
for _name, _op in OP.items(): OPNAME.setdefault(_op, _name)


def odd_parity_bit(value: int) -> int:
  """The bit that makes the total number of set bits in (value, bit) odd."""
  return 1 - (bin(value & 0xFFFFFFFF).count("1") & 1)


def pkt4_header(reg: int, count: int) -> int:
  """Header of a type-4 packet writing `count` consecutive registers from dword offset `reg`."""
  if not 1 <= count <= TYPE4_MAX_REGS: raise ValueError(f"type-4 packet writes 1..{TYPE4_MAX_REGS} registers, got {count}")
  if not 0 <= reg <= 0x7FFFF: raise ValueError(f"type-4 register offset {reg:#x} does not fit in 19 bits")
  return (4 << 28) | (odd_parity_bit(reg) << 27) | (reg << 8) | (odd_parity_bit(count) << 7) | count


def pkt7_header(opcode: int, count: int) -> int:
  """Header of a type-7 packet `opcode` followed by `count` payload dwords."""
  if not 0 <= count <= TYPE7_MAX_DWORDS: raise ValueError(f"type-7 payload is 0..{TYPE7_MAX_DWORDS} dwords, got {count}")
  if not 0 <= opcode <= 0x7F: raise ValueError(f"type-7 opcode {opcode:#x} does not fit in 7 bits")
  return (7 << 28) | (odd_parity_bit(opcode) << 23) | (opcode << 16) | (odd_parity_bit(count) << 15) | count


@dataclass(frozen=True)
class Packet:
  """One decoded packet: kind 4 (register write: `reg` is the first register) or 7 (`opcode`), and its payload."""
  kind: int
  offset: int
  reg: int
  opcode: int
  payload: tuple[int, ...]

  @property
  def name(self) -> str:
    return f"pkt4 reg {self.reg:#06x}" if self.kind == 4 else OPNAME.get(self.opcode, f"CP_UNKNOWN_{self.opcode:#x}")


class MalformedPacket(ValueError):
  """A dword that is not a well-formed type-4/type-7 header, or a packet running past the end of its stream."""


def decode(words: list[int] | tuple[int, ...]) -> list[Packet]:
  """Split a stream of dwords into packets; raises MalformedPacket naming the dword offset and what was wrong."""
  out: list[Packet] = []
  i = 0
  while i < len(words):
    h = int(words[i]) & 0xFFFFFFFF
    kind = h >> 28
    if kind == 4:
      reg, cnt = (h >> 8) & 0x7FFFF, h & 0x7F
      if (h >> 27) & 1 != odd_parity_bit(reg):
        raise MalformedPacket(f"dword {i}: type-4 header {h:#010x}: register-offset parity bit 27 wrong for offset {reg:#x}")
      if (h >> 7) & 1 != odd_parity_bit(cnt):
        raise MalformedPacket(f"dword {i}: type-4 header {h:#010x}: count parity bit 7 wrong for count {cnt}")
      op = -1
    elif kind == 7:
      op, cnt, reg = (h >> 16) & 0x7F, h & 0x3FFF, -1
      if h & 0x0F000000: raise MalformedPacket(f"dword {i}: type-7 header {h:#010x}: bits 27:24 must be zero")
      if (h >> 23) & 1 != odd_parity_bit(op):
        raise MalformedPacket(f"dword {i}: type-7 header {h:#010x}: opcode parity bit 23 wrong for opcode {op:#x}")
      if (h >> 15) & 1 != odd_parity_bit(cnt):
        raise MalformedPacket(f"dword {i}: type-7 header {h:#010x}: count parity bit 15 wrong for count {cnt}")
    else:
      raise MalformedPacket(f"dword {i}: {h:#010x} is not a type-4 or type-7 header (top nibble {kind:#x}; a6xx+ streams carry only 0x4 and 0x7)")
    if i + 1 + cnt > len(words):
      raise MalformedPacket(f"dword {i}: packet needs {cnt} payload dwords, stream has {len(words) - i - 1} left")
    out.append(Packet(kind, i, reg, op, tuple(int(w) & 0xFFFFFFFF for w in words[i + 1:i + 1 + cnt])))
    i += 1 + cnt
  return out


def _lo_hi(addr: int) -> list[int]:
  if not 0 <= addr < 1 << 64: raise ValueError(f"GPU address {addr:#x} is not a 64-bit address")
  return [addr & 0xFFFFFFFF, addr >> 32]


REGS = {6: adreno.REGS_A6XX, 7: adreno.REGS_A7XX}
OPS = {6: adreno.PM4_A6XX, 7: adreno.PM4_A7XX}
PACKET_FIELDS = {6: adreno.PACKET_FIELDS_A6XX, 7: adreno.PACKET_FIELDS_A7XX}
EV_SRC: dict[str, int] = adreno.ENUMS["event_write_src"]
EV_DST: dict[str, int] = adreno.ENUMS["event_write_dst"]


class CommandStream:
  """A growing list of dwords with one method per packet the compute path needs, for Adreno generation `gen` (6: a6xx,
  7: a7xx; register offsets and packets from that generation's tables)."""

  def __init__(self, gen: int = 6) -> None:
    if gen not in REGS: raise ValueError(f"Adreno generation {gen}: the command streams know a6xx (6) and a7xx (7)")
    self.gen, self.words = gen, []
    self.regs, self.ops, self.fields = REGS[gen], OPS[gen], PACKET_FIELDS[gen]

  def pkt4(self, reg: int, *values: int) -> CommandStream:
    """Write consecutive registers starting at dword offset `reg`."""
    self.words += [pkt4_header(reg, len(values)), *(v & 0xFFFFFFFF for v in values)]
    return self

  def reg(self, name: str, *values: int) -> CommandStream:
    """Write registers by their name in this generation's register database."""
    if name not in self.regs: raise KeyError(f"no a{self.gen}xx register named {name!r}")
    return self.pkt4(self.regs[name], *values)

  def pkt7(self, opcode: str, *payload: int) -> CommandStream:
    """Emit the type-7 packet named `opcode` (e.g. 'CP_EXEC_CS') with its payload dwords."""
    if opcode not in self.ops: raise KeyError(f"no a{self.gen}xx PM4 opcode named {opcode!r}")
    self.words += [pkt7_header(self.ops[opcode], len(payload)), *(v & 0xFFFFFFFF for v in payload)]
    return self

  def nop(self, *payload: int) -> CommandStream:
    return self.pkt7("CP_NOP", *payload)

  def wait_for_idle(self) -> CommandStream:
    return self.pkt7("CP_WAIT_FOR_IDLE")

  def mem_write(self, addr: int, *values: int) -> CommandStream:
    """Write dwords to memory at `addr` when the CP reaches this packet."""
    if addr & 3: raise ValueError(f"CP_MEM_WRITE address {addr:#x} is not 4-byte aligned")
    return self.pkt7("CP_MEM_WRITE", *_lo_hi(addr), *values)

  def event_write_ts(self, addr: int, value: int, event: str = "CACHE_FLUSH_TS") -> CommandStream:
    """Signal: after prior work and a cache flush, write the 32-bit `value` to `addr` (a7xx: CP_EVENT_WRITE7)."""
    if self.gen >= 7: return self.event_write7(event, "EV_WRITE_USER_32B", addr, value)
    f = FIELDS["CP_EVENT_WRITE"]["0"]
    return self.pkt7("CP_EVENT_WRITE", f["EVENT"].encode(EVENTS[event]) | f["TIMESTAMP"].encode(1), *_lo_hi(addr), value)

  def event_write7(self, event: str, src: str, addr: int, *payload: int) -> CommandStream:
    """a7xx CP_EVENT_WRITE7 (adreno_pm4.xml): `event`, then a write of `src` (EV_WRITE_USER_32B: one payload dword,
    EV_WRITE_USER_64B: two, EV_WRITE_ALWAYSON: the 64-bit always-on counter, none) to memory at `addr`, as turnip
    writes its timestamps and fences on a7xx (WRITE_ENABLED, EV_DST_RAM)."""
    want = {"EV_WRITE_USER_32B": 1, "EV_WRITE_USER_64B": 2, "EV_WRITE_ALWAYSON": 0}
    if src not in want or len(payload) != want[src]: raise ValueError(f"CP_EVENT_WRITE7 {src} takes {want.get(src, '?')} payload dwords, got {len(payload)}")
    if addr & (7 if src != "EV_WRITE_USER_32B" else 3): raise ValueError(f"CP_EVENT_WRITE7 {src} address {addr:#x} is not aligned to its size")
    f = self.fields["CP_EVENT_WRITE7"]["0"]
    w0 = f["EVENT"].encode(EVENTS[event]) | f["WRITE_SRC"].encode(EV_SRC[src]) | f["WRITE_DST"].encode(EV_DST["EV_DST_RAM"]) | f["WRITE_ENABLED"].encode(1)
    return self.pkt7("CP_EVENT_WRITE7", w0, *_lo_hi(addr), *payload)

  def wait_reg_mem(self, addr: int, ref: int, function: str = "WRITE_GE", mask: int = 0xFFFFFFFF,
                   delay: int = 16) -> CommandStream:
    """Stall the CP until (mem[addr] & mask) `function` ref holds."""
    f = FIELDS["CP_WAIT_REG_MEM"]["0"]
    w0 = f["FUNCTION"].encode(COND[function]) | f["POLL"].encode(POLL["POLL_MEMORY"])
    return self.pkt7("CP_WAIT_REG_MEM", w0, *_lo_hi(addr), ref, mask, delay)

  def reg_to_mem(self, reg: int, addr: int, count: int = 1, is64: bool = False) -> CommandStream:
    """Copy `count` registers (pairs if is64) from `reg` to memory at `addr` (e.g. CP_ALWAYS_ON_COUNTER)."""
    f = FIELDS["CP_REG_TO_MEM"]["0"]
    return self.pkt7("CP_REG_TO_MEM", f["REG"].encode(reg) | f["CNT"].encode(count) | f["64B"].encode(int(is64)), *_lo_hi(addr))

  def timestamp(self, addr: int) -> CommandStream:
    """Write the 64-bit always-on counter (19.2 MHz) to `addr`: CP_REG_TO_MEM of CP_ALWAYS_ON_COUNTER on a6xx, a
    CP_EVENT_WRITE7 RB_DONE_TS of EV_WRITE_ALWAYSON on a7xx (turnip's timestamp write there)."""
    if self.gen >= 7: return self.event_write7("RB_DONE_TS", "EV_WRITE_ALWAYSON", addr)
    return self.reg_to_mem(adreno.REGS_A6XX["CP_ALWAYS_ON_COUNTER"], addr, 2, is64=True)

  def indirect_buffer(self, addr: int, ndwords: int) -> CommandStream:
    """Call the stream of `ndwords` dwords at `addr` (returns here when it ends)."""
    if not 0 < ndwords <= 0xFFFFF: raise ValueError(f"IB size {ndwords} is outside 1..{0xFFFFF} dwords")
    return self.pkt7("CP_INDIRECT_BUFFER", *_lo_hi(addr), FIELDS["CP_INDIRECT_BUFFER"]["2"]["IB_SIZE"].encode(ndwords))

  def exec_cs(self, x: int, y: int = 1, z: int = 1) -> CommandStream:
    """Launch x*y*z workgroups of the compute state loaded so far."""
    if min(x, y, z) < 1: raise ValueError(f"CP_EXEC_CS grid ({x}, {y}, {z}) has an empty axis")
    return self.pkt7("CP_EXEC_CS", 0, x, y, z)

  def load_state6(self, block: str, stype: str, dst_off: int, nunit: int, data: list[int] | None = None,
                  ext_addr: int | None = None) -> CommandStream:
    """CP_LOAD_STATE6_FRAG (the compute/fragment state path): `nunit` units into `block` (e.g. 'SB6_CS_SHADER') at
    `dst_off`, from `data` in the packet (SS6_DIRECT) or from memory at `ext_addr` (SS6_INDIRECT); exactly one."""
    if (data is None) == (ext_addr is None): raise ValueError("CP_LOAD_STATE6 takes either inline data or an address, not both or neither")
    f = FIELDS["CP_LOAD_STATE6"]["0"]
    src = "SS6_DIRECT" if data is not None else "SS6_INDIRECT"
    w0 = (f["DST_OFF"].encode(dst_off) | f["STATE_TYPE"].encode(STATE_TYPE[stype]) | f["STATE_SRC"].encode(STATE_SRC[src])
          | f["STATE_BLOCK"].encode(STATE_BLOCK[block]) | f["NUM_UNIT"].encode(nunit))
    if data is not None:
      if not data: raise ValueError(f"direct CP_LOAD_STATE6 of {nunit} units into {block} has no data")
      return self.pkt7("CP_LOAD_STATE6_FRAG", w0, 0, 0, *data)
    assert ext_addr is not None
    if ext_addr & 3: raise ValueError(f"CP_LOAD_STATE6 source address {ext_addr:#x} is not 4-byte aligned (EXT_SRC_ADDR is bits 31:2)")
    return self.pkt7("CP_LOAD_STATE6_FRAG", w0, *_lo_hi(ext_addr))

  def memcpy(self, dst: int, src: int, ndwords: int) -> CommandStream:
    """CP_MEMCPY: copy `ndwords` dwords from `src` to `dst` (the CP's own copy; small transfers)."""
    if (src | dst) & 3: raise ValueError(f"CP_MEMCPY addresses {src:#x} -> {dst:#x} must be 4-byte aligned")
    if ndwords < 1: raise ValueError(f"CP_MEMCPY of {ndwords} dwords copies nothing")
    return self.pkt7("CP_MEMCPY", ndwords, *_lo_hi(src), *_lo_hi(dst))

  def set_marker(self, value: int) -> CommandStream:
    return self.pkt7("CP_SET_MARKER", value)
