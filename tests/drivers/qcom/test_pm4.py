"""The driver's PM4 encoder (drivers/qcom/pm4.py) against the header rules, and the chip table."""
import pytest

from baregrad.ctypes_autogen import adreno
from baregrad.drivers.qcom import chips, pm4


def _popcount(v: int) -> int:
  return bin(v).count("1")


@pytest.mark.parametrize("v", [0, 1, 2, 3, 0x7F, 0x80, 0x3FFF, 0x7FFFF, 0xA5A5])
def test_odd_parity_bit_makes_total_odd(v):
  assert (_popcount(v) + pm4.odd_parity_bit(v)) % 2 == 1


def test_pkt4_header_fields():
  h = pm4.pkt4_header(0xA9B0, 3)
  assert h >> 28 == 4 and (h >> 8) & 0x7FFFF == 0xA9B0 and h & 0x7F == 3
  assert (_popcount(0xA9B0) + (h >> 27 & 1)) % 2 == 1 and (_popcount(3) + (h >> 7 & 1)) % 2 == 1


def test_pkt7_header_known_value():
  # CP_NOP (0x10, one bit set: parity 0) with 0 payload dwords (parity 1).
  assert pm4.pkt7_header(0x10, 0) == 0x70108000
  h = pm4.pkt7_header(adreno.PM4_A6XX["CP_EXEC_CS"], 4)
  assert (h >> 16) & 0x7F == 0x33 and h & 0x3FFF == 4 and h & 0x0F000000 == 0


def test_header_ranges_refused():
  with pytest.raises(ValueError, match="1..127"): pm4.pkt4_header(0x100, 0)
  with pytest.raises(ValueError, match="1..127"): pm4.pkt4_header(0x100, 128)
  with pytest.raises(ValueError, match="19 bits"): pm4.pkt4_header(1 << 19, 1)
  with pytest.raises(ValueError, match="0..16383"): pm4.pkt7_header(0x10, 1 << 14)
  with pytest.raises(ValueError, match="7 bits"): pm4.pkt7_header(0x80, 0)


def test_stream_round_trips_through_decode():
  cs = pm4.CommandStream().reg("CP_ALWAYS_ON_COUNTER", 1, 2).mem_write(0x1000, 7, 8).event_write_ts(0x2000, 5)
  cs.wait_reg_mem(0x2000, 5).indirect_buffer(0x3000, 10).exec_cs(4, 2, 1).timestamp(0x4000)
  pk = pm4.decode(cs.words)
  assert [p.name for p in pk] == ["pkt4 reg 0x0980", "CP_MEM_WRITE", "CP_EVENT_WRITE", "CP_WAIT_REG_MEM",
                                  "CP_INDIRECT_BUFFER", "CP_EXEC_CS", "CP_REG_TO_MEM"]
  assert pk[0].payload == (1, 2) and pk[1].payload == (0x1000, 0, 7, 8) and pk[5].payload == (0, 4, 2, 1)
  assert pk[2].payload == (adreno.ENUMS["vgt_event_type"]["CACHE_FLUSH_TS"] | 1 << 30, 0x2000, 0, 5)


@pytest.mark.parametrize("bit", [7, 15, 23, 25])
def test_decode_refuses_flipped_header_bits(bit):
  words = pm4.CommandStream().exec_cs(1).words if bit != 7 else pm4.CommandStream().pkt4(0x10, 1).words
  words[0] ^= 1 << bit
  with pytest.raises(pm4.MalformedPacket, match="dword 0"): pm4.decode(words)


def test_decode_refuses_truncated_and_other_types():
  with pytest.raises(pm4.MalformedPacket, match="needs 4 payload dwords"): pm4.decode(pm4.CommandStream().exec_cs(1).words[:3])
  with pytest.raises(pm4.MalformedPacket, match="top nibble 0xc"): pm4.decode([0xC0001000])


def test_bad_arguments_refused():
  with pytest.raises(ValueError, match="aligned"): pm4.CommandStream().mem_write(0x1002, 1)
  with pytest.raises(ValueError, match="empty axis"): pm4.CommandStream().exec_cs(0)
  with pytest.raises(KeyError, match="CP_BOGUS"): pm4.CommandStream().pkt7("CP_BOGUS")
  with pytest.raises(KeyError, match="NOT_A_REG"): pm4.CommandStream().reg("NOT_A_REG", 1)


def test_chip_lookup():
  assert chips.lookup(0x06030001).name == "a630" and chips.lookup(0x06060000).gmem_bytes == 3 << 19
  with pytest.raises(chips.UnknownChip, match=r"0x05040001 \(a540\).*a630"): chips.lookup(0x05040001)
