"""The PM4/AQL encoders keep the argument-independent words of a packet (headers, event and cache-control words) made
once per family and selector (functools.lru_cache, for the launch path's host cost: bench/launch.py): each cached part
must equal what the encoder computes afresh, for every family and selector, and a packet's variable words (addresses,
values) must still follow each call's arguments."""
from __future__ import annotations
from tests.paths import REPO  # noqa: F401
import pytest
from baregrad.drivers.amd import hw

@pytest.mark.parametrize("family", ["gfx11", "gfx9"])
def test_cached_heads_equal_fresh_words(family):
  for ds in (1, 2, 3):
    for isel in (0, 2):
      assert hw._release_mem_head(family, ds, isel) == hw._release_mem_head.__wrapped__(family, ds, isel)
  assert hw._release_mem_head(family, 2, 0) != hw._release_mem_head(family, 3, 0)   # (the selector is part of the key)
  assert hw._wait_reg_mem_head(family, hw.WAIT_GEQ) == hw._wait_reg_mem_head.__wrapped__(family, hw.WAIT_GEQ)
  assert hw._acquire_mem_words(family) == hw._acquire_mem_words.__wrapped__(family)
  for b in (False, True):
    assert hw.aql_header(hw.AQL_DISPATCH, b, hw.SCOPE_SYSTEM, hw.SCOPE_AGENT) == \
      hw.aql_header.__wrapped__(hw.AQL_DISPATCH, b, hw.SCOPE_SYSTEM, hw.SCOPE_AGENT)

@pytest.mark.parametrize("family", ["gfx11", "gfx9"])
def test_variable_words_follow_each_call(family):
  a = hw.pm4_release_mem(family, 0x1234_5678_9abc, 7, data_sel=2)
  b = hw.pm4_release_mem(family, 0x10, (1 << 40) + 1, data_sel=2, ctxid=5)
  assert a[:3] == b[:3] and a[3:] == [0x5678_9abc, 0x1234, 7, 0, 0] and b[3:] == [0x10, 0, 1, 1 << 8, 5]
  w = hw.pm4_wait_reg_mem(family, 0x2_0000_0040, 9)
  assert w[2:] == [0x40, 2, 9, 0xFFFFFFFF, 4]
  m = hw.pm4_acquire_mem(family)
  m[1] ^= 1   # (callers get their own list: changing one does not change the next)
  assert hw.pm4_acquire_mem(family) != m
