"""PM4 fields in words (hw.macro_fields, format_pm4_packet): ACQUIRE_MEM's cache-control bits and RELEASE_MEM's event,
checked against the PM4 header's own macros."""
from __future__ import annotations
import pytest
from baregrad.drivers.amd import hw

@pytest.mark.parametrize("family,prefix,names", [
  ("gfx11", "PACKET3_ACQUIRE_MEM_GCR_CNTL_", ["GL2_INV", "GL2_WB", "GLM_INV", "GLM_WB", "GL1_INV", "GLV_INV", "GLK_INV", "GLI_INV"]),
  ("gfx9", "PACKET3_ACQUIRE_MEM_CP_COHER_CNTL_", ["SH_ICACHE_ACTION_ENA", "SH_KCACHE_ACTION_ENA", "TC_ACTION_ENA",
                                                 "TCL1_ACTION_ENA", "TC_WB_ACTION_ENA"])])
def test_acquire_mem_cache_bits_match_the_header(family, prefix, names):
  p = hw.PM4[family]
  value = 0
  for n in names: value |= getattr(p, prefix + n)(1)
  assert dict(hw.macro_fields(family, prefix, value)) == {n: 1 for n in names}
  # a multi-bit field (gfx11 GL2_RANGE is 2 bits wide: GL2_RANGE(3)) decodes whole
  if family == "gfx11": assert dict(hw.macro_fields(family, prefix, p.PACKET3_ACQUIRE_MEM_GCR_CNTL_GL2_RANGE(3))) == {"GL2_RANGE": 3}
  text = hw.format_pm4(family, hw.pm4_acquire_mem(family))
  assert all(f"{n}=1" in text for n in names), text

@pytest.mark.parametrize("family", ["gfx11", "gfx9"])
def test_release_mem_event_named(family):
  text = hw.format_pm4(family, hw.pm4_release_mem(family, 0x1000, 5, 1))
  assert "event=CACHE_FLUSH_AND_INV_TS_EVENT" in text and hw.CACHE_FLUSH_AND_INV_TS_EVENT == 0x14, text
