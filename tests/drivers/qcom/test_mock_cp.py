"""The mock Adreno CP (drivers/mock/adreno/cp.py) runs the driver's streams and refuses what the hardware would."""
import struct

import pytest

from baregrad.drivers.mock.adreno.cp import CP, CPError, GpuMemory
from baregrad.drivers.qcom.pm4 import CommandStream, pkt7_header

BASE = 0x10000


def _cp(size=0x4000):
  mem = GpuMemory()
  buf = bytearray(size)
  mem.map(BASE, buf)
  return CP(mem), buf


def _u32(buf, off):
  return struct.unpack_from("<I", buf, off)[0]


def test_mem_write_and_timestamp_signal():
  cp, buf = _cp()
  cp.submit(CommandStream().mem_write(BASE + 8, 11, 22).event_write_ts(BASE + 0x40, 7).set_marker(3).words)
  assert cp.run()
  assert (_u32(buf, 8), _u32(buf, 12), _u32(buf, 0x40), cp.markers) == (11, 22, 7, [3])


def test_wait_reg_mem_blocks_until_signal_then_resumes():
  cp, buf = _cp()
  cp.submit(CommandStream().wait_reg_mem(BASE, 5).mem_write(BASE + 4, 99).words)
  assert not cp.run() and _u32(buf, 4) == 0 and "ref 0x5" in cp.blocked_on
  struct.pack_into("<I", buf, 0, 4)
  assert not cp.run()
  struct.pack_into("<I", buf, 0, 5)
  assert cp.run() and _u32(buf, 4) == 99 and cp.blocked_on is None


def test_wait_reg_mem_functions_and_mask():
  for fn, cur, ref, mask, ok in [("WRITE_EQ", 3, 3, ~0, True), ("WRITE_NE", 3, 3, ~0, False), ("WRITE_LT", 2, 3, ~0, True),
                                 ("WRITE_GT", 2, 3, ~0, False), ("WRITE_EQ", 0x13, 3, 0xF, True)]:
    cp, buf = _cp()
    struct.pack_into("<I", buf, 0, cur)
    cp.submit(CommandStream().wait_reg_mem(BASE, ref, fn, mask & 0xFFFFFFFF).words)
    assert cp.run() is ok, fn


def test_indirect_buffer_runs_and_returns():
  cp, buf = _cp()
  ib = CommandStream().mem_write(BASE + 0x100, 1).words
  buf[0x800:0x800 + 4 * len(ib)] = struct.pack(f"<{len(ib)}I", *ib)
  cp.submit(CommandStream().indirect_buffer(BASE + 0x800, len(ib)).mem_write(BASE + 0x104, 2).words)
  assert cp.run() and (_u32(buf, 0x100), _u32(buf, 0x104)) == (1, 2)


def test_indirect_buffer_depth_limit():
  cp, buf = _cp()
  # each level calls the next: IB1 -> IB2 -> IB3, the last is refused
  for lvl in range(3):
    ib = CommandStream().indirect_buffer(BASE + 0x800 + 0x100 * (lvl + 1), 4).words if lvl < 2 else CommandStream().nop().words
    buf[0x800 + 0x100 * lvl:0x800 + 0x100 * lvl + 4 * len(ib)] = struct.pack(f"<{len(ib)}I", *ib)
  cp.submit(CommandStream().indirect_buffer(BASE + 0x800, 4).words)
  with pytest.raises(CPError, match="deeper than IB2"): cp.run()


def test_timestamps_increase():
  cp, buf = _cp()
  cp.submit(CommandStream().timestamp(BASE).timestamp(BASE + 8).words)
  assert cp.run()
  t0, t1 = struct.unpack_from("<QQ", buf, 0)
  assert t1 > t0 > 0


def test_page_fault_names_address():
  cp, _ = _cp()
  cp.submit(CommandStream().mem_write(0xDEAD000, 1).words)
  with pytest.raises(CPError, match="page fault.*0xdead000"): cp.run()


@pytest.mark.parametrize("bit", [7, 27])
def test_type4_parity_refused(bit):
  cp, _ = _cp()
  w = CommandStream().pkt4(0x980, 1).words
  w[0] ^= 1 << bit
  cp.submit(w)
  with pytest.raises(CPError, match="parity"): cp.run()


@pytest.mark.parametrize("bit", [15, 23, 24])
def test_type7_header_refused(bit):
  cp, _ = _cp()
  w = CommandStream().set_marker(1).words
  w[0] ^= 1 << bit
  cp.submit(w)
  with pytest.raises(CPError, match="malformed"): cp.run()


def test_malformed_payloads_refused():
  cases = [([pkt7_header(0x46, 2), 4, BASE], "timestamp event 4 takes 4"),  # CACHE_FLUSH_TS without its value
           ([pkt7_header(0x3c, 5), 0x13, BASE, 0, 1, 0], "CP_WAIT_REG_MEM takes 6"),
           ([pkt7_header(0x3c, 6), 0x10, BASE, 0, 1, ~0 & 0xFFFFFFFF, 0], "not a comparison"),
           ([pkt7_header(0x33, 4), 0, 1, 0, 1], "empty axis"),
           ([pkt7_header(0x33, 4), 0, 1, 1, 1], "no shader executor"),
           ([pkt7_header(0x3e, 3), (1 << 30) | (3 << 18) | 0x980, BASE, 0], "CNT 3 is odd"),
           ([pkt7_header(0x7f, 0)], "not a packet this CP model decodes"),
           ([pkt7_header(0x3d, 3), BASE], "needs 3 payload dwords"),
           ([0xC0001000], "not a type-4 or type-7 header")]
  for words, msg in cases:
    cp, _ = _cp()
    cp.submit(words)
    with pytest.raises(CPError, match=msg): cp.run()


def test_load_state_and_exec_cs_reach_the_dispatcher():
  cp, _ = _cp()
  seen = []
  cp.dispatch = lambda c, grid: seen.append((grid, dict(c.state), c.regs.get(0xA9B0)))
  # CP_LOAD_STATE6_FRAG direct: DST_OFF 0, STATE_TYPE 1 (ST6_CONSTANTS), SRC 0, BLOCK 13 (SB6_CS_SHADER), 1 unit
  w0 = (1 << 14) | (13 << 18) | (1 << 22)
  cp.submit(CommandStream().pkt4(0xA9B0, 0x42).pkt7("CP_LOAD_STATE6_FRAG", w0, 0, 0, 1, 2, 3, 4).exec_cs(8, 2).words)
  assert cp.run()
  assert seen == [((8, 2, 1), {(13, 1, 0): [1, 2, 3, 4]}, 0x42)]


@pytest.mark.parametrize("words,msg", [
  ([pkt7_header(0x3d, 3), BASE + 2, 0, 1], "not dword aligned"),                       # CP_MEM_WRITE address
  ([pkt7_header(0x46, 2), 6, 0], "event 6 takes 1"),                                   # CACHE_FLUSH without a timestamp
  ([pkt7_header(0x46, 4), 4, BASE + 1, 0, 1], "timestamp address .* not dword aligned"),
  ([pkt7_header(0x3c, 6), 0x13, BASE + 2, 0, 1, 0xFFFFFFFF, 0], "poll address .* not dword aligned"),
  ([pkt7_header(0x3c, 6), 0x23, BASE, 0, 1, 0xFFFFFFFF, 0], "poll type 2"),
  ([pkt7_header(0x3e, 3), (1 << 31) | (1 << 18) | 0x980, BASE, 0], "ACCUMULATE"),
  ([pkt7_header(0x3e, 3), 0x980, BASE, 0], "CNT 0"),
  ([pkt7_header(0x3f, 3), BASE + 2, 0, 4], "needs dword alignment"),
  ([pkt7_header(0x3f, 3), BASE, 0, 0], "size > 0"),
  ([pkt7_header(0x34, 3), (1 << 16), 0, 0], "STATE_SRC 1"),
  ([pkt7_header(0x34, 3), (2 << 16), BASE + 1, 0], "EXT_SRC_ADDR .* bits 1:0"),
  ([pkt7_header(0x34, 3), 0, 0, 0], "carries no data"),
  ([pkt7_header(0x26, 1), 0], "CP_WAIT_FOR_IDLE takes 0"),
  ([pkt7_header(0x65, 0)], "CP_SET_MARKER takes 1"),
])
def test_each_payload_rule_refused(words, msg):
  cp, _ = _cp()
  cp.submit(words)
  with pytest.raises(CPError, match=msg): cp.run()


def test_load_state6_indirect_records_address():
  cp, _ = _cp()
  cp.dispatch = lambda c, grid: None
  cp.submit([pkt7_header(0x34, 3), (2 << 16) | (13 << 18) | (3 << 22), BASE + 0x100, 0] + CommandStream().exec_cs(1).words)
  assert cp.run() and cp.state == {(13, 0, 0): [BASE + 0x100, 3]}


def test_overlapping_mapping_refused():
  mem = GpuMemory()
  mem.map(BASE, bytearray(0x2000))
  with pytest.raises(CPError, match="overlaps"): mem.map(BASE + 0x1000, bytearray(0x1000))


def test_submit_while_blocked_refused():
  cp, _ = _cp()
  cp.submit(CommandStream().wait_reg_mem(BASE, 1).words)
  assert not cp.run()
  with pytest.raises(CPError, match="still working"): cp.submit(CommandStream().nop().words)


def test_driver_load_state6_reaches_the_cp():
  cp, _ = _cp()
  cp.dispatch = lambda c, grid: None
  cs = CommandStream().load_state6("SB6_CS_SHADER", "ST6_CONSTANTS", 4, 1, data=[9, 8, 7, 6])
  cs.load_state6("SB6_CS_SHADER", "ST6_SHADER", 0, 2, ext_addr=BASE + 0x200).exec_cs(1)
  cp.submit(cs.words)
  assert cp.run() and cp.state == {(13, 1, 4): [9, 8, 7, 6], (13, 0, 0): [BASE + 0x200, 2]}
  with pytest.raises(ValueError, match="not both"): CommandStream().load_state6("SB6_CS_SHADER", "ST6_SHADER", 0, 1)
  with pytest.raises(ValueError, match="aligned"): CommandStream().load_state6("SB6_CS_SHADER", "ST6_SHADER", 0, 1, ext_addr=2)


def test_memcpy_copies_and_checks():
  cp, buf = _cp()
  buf[0:16] = bytes(range(16))
  cp.submit(CommandStream().memcpy(BASE + 0x100, BASE, 4).words)
  assert cp.run() and bytes(buf[0x100:0x110]) == bytes(range(16))
  for words, msg in [([pkt7_header(0x75, 5), 0, BASE, 0, BASE + 64, 0], "needs n > 0"),
                     ([pkt7_header(0x75, 5), 1, BASE + 2, 0, BASE + 64, 0], "dword alignment"),
                     ([pkt7_header(0x75, 4), 1, BASE, 0, BASE], "CP_MEMCPY takes 5")]:
    cp, _ = _cp()
    cp.submit(words)
    with pytest.raises(CPError, match=msg): cp.run()
  with pytest.raises(ValueError, match="aligned"): CommandStream().memcpy(1, 0, 1)
