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

def test_ib_free_matches_a_walk_over_every_ib_in_flight():
  """AQLRing._ib_free decides from the oldest IB in flight and the tail alone; over random runs of allocations and
  retirements (wrapping the area many times) it must answer as a check against every IB in flight does."""
  import random
  from collections import deque
  from types import SimpleNamespace
  from baregrad.drivers.amd.queues import AQLRing
  rng = random.Random(5)
  ring = object.__new__(AQLRing)
  ring.ib, ring.ib_off, ring.ib_inflight = SimpleNamespace(size=4096), 0, deque()
  idx, checked, blocked = 0, 0, 0
  for _ in range(5000):
    if ring.ib_inflight and rng.random() < 0.3: ring.ib_inflight.popleft(); continue
    n = 64 * rng.randint(1, 12)
    off = ring.ib_off if ring.ib_off + n <= ring.ib.size else 0
    walk = not any(o < off + n and off < o + m for _, o, m in ring.ib_inflight)
    assert ring._ib_free(off, n) == walk, (off, n, list(ring.ib_inflight), ring.ib_off)
    checked += 1
    blocked += not walk
    if walk:
      ring.ib_inflight.append((idx, off, n)); idx += 1
      ring.ib_off = off + n
  assert checked > 2000 and blocked > 100   # (both answers exercised)

@pytest.mark.parametrize("arch", ["gfx1100", "gfx942"])   # (gfx942: 8 XCCs, the signal's PM4 under PRED_EXEC)
def test_direct_launch_packets_equal_the_recorded_queues(arch):
  """AMDProgram.__call__ makes its packets with AQLRing.launch_packets instead of recording a queue: for the same
  launch, timeline values and ring index they must be the packets, and the IB contents, that packets() makes of the
  queue HCQProgram.__call__ records (the IB area's state is put back between the two, so the IB addresses match too)."""
  import ctypes
  from collections import deque
  from baregrad.drivers.port import make_port
  from baregrad.drivers.mock.amd import MockAMDGPU
  from baregrad.drivers.amd import AMDDevice
  from tests.drivers.amd.test_amd_mock import amd_kernels
  dev = AMDDevice("AMD", port=make_port(MockAMDGPU(arch=arch)))
  try:
    prg = dev.runtime(dev, "inc", amd_kernels(arch))
    buf = dev.allocator.alloc(4 * 64)
    aql, fam, tl = dev.aql, dev.compute_queue_t.family, dev.timeline_signal
    def made(make):
      state = aql.ib_off, deque(aql.ib_inflight)
      pk = [list(p) for p in make()]   # (launch_packets makes arrays of words, packets() lists)
      ibs = [ctypes.string_at(aql.ib.cpu + o, n) for _, o, n in list(aql.ib_inflight)[len(state[1]):]]
      aql.ib_off, aql.ib_inflight = state
      return pk, ibs
    for gs, ls in [((1, 1, 1), (32, 1, 1)), ((2, 3, 1), (8, 4, 2))]:
      args = prg.fill_kernargs([buf], ())
      args.write_launch(gs, ls)
      direct = made(lambda: aql.launch_packets(fam, prg, args.va_addr, gs, ls, tl.va_addr, 7, (1 << 33) + 8, aql.put))
      q = dev.compute_queue_t().wait(tl, 7).exec(prg, args, gs, ls).signal(tl, (1 << 33) + 8)
      assert direct == made(lambda: aql.packets(q, aql.put))
      assert len(direct[0]) == 3 and len(direct[1]) == 2
    if arch == "gfx1100":   # and the direct path runs on the mock (which executes RDNA3 code only)
      prg(buf, global_size=(2, 1, 1), local_size=(32, 1, 1))
      dev.synchronize()
      out = bytearray(4 * 64)
      dev.allocator._copyout(memoryview(out), buf)
      assert list(memoryview(out).cast("i")) == [1] * 64
    dev.allocator.free(buf, 4 * 64)
  finally: dev.close()

@pytest.mark.parametrize("arch", ["gfx1100", "gfx942"])
def test_direct_launch_kernargs_equal_the_args_state(arch):
  """AMDProgram.__call__ writes a launch's kernarg segment as one copy of the geometry's segment (its hidden arguments
  made once) with the explicit arguments packed in: the bytes AMDArgsState + write_launch write for the same launch,
  for each geometry and for arguments of each size (negative values masked); a wrong count or size still raises."""
  import ctypes
  from baregrad.drivers.port import make_port
  from baregrad.drivers.mock.amd import MockAMDGPU
  from baregrad.drivers.amd import AMDDevice
  from tests.drivers.amd.test_amd_mock import amd_kernels
  dev = AMDDevice("AMD", port=make_port(MockAMDGPU(arch=arch)))
  try:
    prg = dev.runtime(dev, "inc", amd_kernels(arch))
    assert prg._explicit_into is not None and prg.hidden_args
    buf = dev.allocator.alloc(4 * 64)
    for gs, ls in [((1, 1, 1), (32, 1, 1)), ((2, 3, 1), (8, 4, 2)), ((1, 1, 1), (32, 1, 1))]:
      va = prg._write_args([buf], (), gs, ls)
      args = prg.fill_kernargs([buf], ())
      args.write_launch(gs, ls)
      assert ctypes.string_at(dev.cpu_address(va, prg.kernarg_size), prg.kernarg_size) == ctypes.string_at(args.cpu_addr, prg.kernarg_size)
    with pytest.raises(ValueError, match="takes 1 explicit arguments, got 1 buffers and 1 values"): prg._write_args([buf], (3,), (1, 1, 1), (32, 1, 1))
    with pytest.raises(ValueError, match="1..1024 work-items"): prg._write_args([buf], (), (1, 1, 1), (2048, 1, 1))
    # arguments of 1, 2, 4 and 8 bytes at their offsets (a program's layout as the metadata would give it), the hidden
    # ones after them
    prg.explicit_args = [(0, 1), (8, 8), (16, 2), (20, 4), (24, 8)]
    prg.hidden_args = [(k, o + 32, sz) for k, o, sz in prg.hidden_args]
    prg.kernarg_size += 32
    from baregrad.hcq.queue import args_struct_format
    import struct
    prg._explicit_into = struct.Struct("<" + args_struct_format(prg.explicit_args)).pack_into
    prg._explicit_masks = [(1 << (8 * sz)) - 1 for _, sz in prg.explicit_args]
    prg._all8, prg._segments = False, {}
    vals = (-1, 0x7f00_0000_1000, -2, 0x1_0000_0005, -3)
    va = prg._write_args([], vals, (1, 1, 1), (32, 1, 1))
    args = prg.fill_kernargs([], vals)
    args.write_launch((1, 1, 1), (32, 1, 1))
    assert ctypes.string_at(dev.cpu_address(va, prg.kernarg_size), prg.kernarg_size) == ctypes.string_at(args.cpu_addr, prg.kernarg_size)
    dev.allocator.free(buf, 4 * 64)
  finally: dev.close()

def _resolved(dev, packets):
  """Packets with each vendor packet's IB address (words 2-3) replaced by the IB's contents: packets equal up to where
  their IBs were placed."""
  import ctypes
  out = []
  for p in packets:
    p = list(p)
    d = hw.decode_aql(p)
    if d["type"] == hw.AQL_VENDOR:
      va, ndw = d["ib_cmd"][1] | (d["ib_cmd"][2] << 32), d["ib_cmd"][3] & 0xFFFFF
      p[2:4] = [ctypes.string_at(dev.cpu_address(va, 4 * ndw), 4 * ndw)]
    out.append(p)
  return out

@pytest.mark.parametrize("arch", ["gfx1100", "gfx942"])   # (gfx942: 8 XCCs, PRED_EXEC before what writes memory)
def test_prebuilt_packets_equal_the_recorded_queue(arch):
  """A graph's recording is made into its packets once (prepare_replay: AQLRing.prebuild) and a replay patches those: the
  prebuilt packets and IB contents must be what packets() makes of the same queue, before and after patching the wait,
  the signal, a dispatch's geometry and a kernarg (every kind of command in the queue, PM4 runs of several commands)."""
  from baregrad.drivers.port import make_port
  from baregrad.drivers.mock.amd import MockAMDGPU
  from baregrad.drivers.amd import AMDDevice
  from baregrad.hcq import HCQSignal
  from tests.drivers.amd.test_amd_mock import amd_kernels
  dev = AMDDevice("AMD", port=make_port(MockAMDGPU(arch=arch)))
  try:
    prg = dev.runtime(dev, "inc", amd_kernels(arch))
    a, b = dev.allocator.alloc(4 * 64), dev.allocator.alloc(4 * 64)
    aql, tl, ts = dev.aql, dev.timeline_signal, HCQSignal(dev)
    args = [prg.fill_kernargs([x], ()) for x in (a, b, a)]
    q = dev.compute_queue_t().wait(tl, 7).exec(prg, args[0], (1, 1, 1), (32, 1, 1)).exec(prg, args[1], (2, 1, 1), (32, 1, 1))
    q.memory_barrier().exec(prg, args[2], (1, 1, 1), (32, 1, 1)).timestamp(ts).copy(b.va_addr, a.va_addr, 64).signal(tl, (1 << 33) + 8)
    q.prepare_replay(dev)
    pb = q._prebuilt
    def prebuilt(): return [pb.words[16 * k:16 * k + 16].tolist() for k in range(pb.n)]
    assert pb.n == 6 and _resolved(dev, prebuilt()) == _resolved(dev, aql.packets(q, aql.put))
    q.update_wait(0, value=9).update_signal(q.last, value=(1 << 34) + 1).update_exec(2, (3, 1, 1), (16, 1, 1))
    q.update_copy(6, dest=a.va_addr, src=b.va_addr, nbytes=32)
    args[1].update_buffer(0, a.va_addr)
    assert _resolved(dev, prebuilt()) == _resolved(dev, aql.packets(q, aql.put))
    assert hw.decode_aql(prebuilt()[2])["grid"] == (48, 1, 1)   # (the patch reached the prebuilt dispatch)
    with pytest.raises(RuntimeError, match="record a new queue"): q.memory_barrier()
  finally: dev.close()
