"""mbarrier objects and bulk asynchronous copies of the PTX interpreter (mixed into kernel.PTXKernel).

Modelled from the PTX ISA (8.x, 9.7.13.15 "Parallel Synchronization and Communication Instructions: mbarrier" and
9.7.9.25.4 "cp.async.bulk"):

- An mbarrier is a 64-bit object in shared memory (8-byte aligned, inside the block's shared memory: else a GPUFault)
  with a phase, a pending arrival count, the expected arrival count and a transaction count (9.7.13.15.1). The mock
  keeps that state beside the shared memory, per block, keyed by the object's offset.
- mbarrier.init [a], count: phase 0, pending = expected = count (1 .. 2^20 - 1), tx-count 0 (9.7.13.15.9).
  mbarrier.inval [a]: the object is gone; using it before another init is an error here.
- mbarrier.expect_tx [a], n: tx-count += n (9.7.13.15.11); mbarrier.complete_tx [a], n: tx-count -= n (9.7.13.15.12).
- mbarrier.arrive{.expect_tx} state|_, [a]{, count|n}: (expect-tx n first, then) each executing thread arrives once (or
  `count` times); the phase completes when no arrivals are pending and the tx-count is 0: the phase advances and the
  pending count is the expected one again (9.7.13.15.13). More arrivals than the phase has pending is an error here.
  `state` is the phase the arrival belonged to (the ISA leaves the token opaque: here it is the phase number).
- mbarrier.test_wait / try_wait{.parity} p, [a], state|parity: true when the phase named by the state, or the phase of
  that parity (the current or the one just before it), has completed (9.7.13.15.16). A waiter that polls an unchanging
  incomplete phase `PTXKernel.mbarrier_hang_polls` times is reported as the hang it would be, naming the barrier, its
  phase, and the arrivals and transaction bytes still outstanding.
- cp.async.bulk.shared::cluster|shared::cta.global.mbarrier::complete_tx::bytes [dst], [src], size, [mbar] (9.7.9.25.4.1):
  size a multiple of 16, both addresses 16-byte aligned. The source is read when the copy issues; the bytes land in
  shared memory, and complete-tx of `size` bytes on the mbarrier, when a thread next waits on that mbarrier (the latest
  point the ISA allows), so reading the destination without waiting reads stale data here. The copy writes through the
  async proxy (no generic-proxy write for wgmma's proxy-fence check).
"""
from __future__ import annotations
import numpy as np
from baregrad.drivers.mock.ptx.errors import GPUFault, PTXError
from baregrad.drivers.mock.ptx.launch import _Ctx
from baregrad.drivers.mock.ptx.memory import _Local
from baregrad.drivers.mock.ptx.parser import _Ins


class _Bar:
  __slots__ = ("phase", "pending", "expected", "tx", "copies", "stall")

  def __init__(self, count: int) -> None:
    self.phase, self.pending, self.expected, self.tx = 0, count, count, 0
    self.copies: list[tuple[np.ndarray, int, np.ndarray]] = []   # (destination offsets, block, bytes) not landed yet
    self.stall = 0

  def settle(self) -> None:
    """Complete the phase when nothing is pending (9.7.13.15.1 phase completion)."""
    self.stall = 0
    if self.pending == 0 and self.tx == 0:
      self.phase, self.pending = self.phase + 1, self.expected


def _bars(c: _Ctx) -> dict[tuple[int, int], _Bar]:
  if c.mbar is None:
    c.mbar = {}
  return c.mbar


class MbarrierOps:
  """Instruction compilers for mbarrier.* and cp.async.bulk (see the module docstring)."""

  mbarrier_hang_polls = 10_000   # polls of an unchanging incomplete phase before the mock calls it a hang

  def _mbar_keys(self, c: _Ctx, m, addr, ins: _Ins) -> tuple[np.ndarray, list[tuple[int, int]], np.ndarray]:
    """Active lanes, the (block, offset) of the mbarrier each names (checked inside shared memory, 8-byte aligned),
    and each lane's index into that list."""
    sel = np.arange(c.n) if m is None else np.flatnonzero(m)
    a = np.broadcast_to(np.asarray(addr(c)), (c.n,)).astype(np.uint64)[sel]
    c.shared._flat(a, c.lanes[sel], 8, f"mbarrier ({ins.op}.{'.'.join(ins.mods)})")   # bounds, 8-byte alignment
    key = c.bidx[sel].astype(np.uint64) << np.uint64(32) | a
    uniq, inv = np.unique(key, return_inverse=True)
    return sel, [(int(k >> np.uint64(32)), int(k & np.uint64(0xFFFFFFFF))) for k in uniq], inv

  def _mbar(self, c: _Ctx, key: tuple[int, int], ins: _Ins) -> _Bar:
    b = _bars(c).get(key)
    if b is None:
      raise self._err(ins, f"mbarrier at shared offset {key[1]:#x} (block {key[0]}) used before mbarrier.init "
                           f"(PTX ISA 9.7.13.15.9)")
    return b

  def _c_mbarrier(self, ins: _Ins) -> None:
    mods = ins.mods
    if not mods or not any(x.split("::")[0] == "shared" for x in mods):
      raise self._err(ins, "only mbarrier objects in shared memory (.shared / .shared::cta) are supported")
    kind = mods[0]
    u32, u64 = np.dtype(np.uint32), np.dtype(np.uint64)
    if kind in ("init", "inval", "expect_tx", "complete_tx"):
      self._need(ins, 1 if kind == "inval" else 2)
      addr = self._addr(ins, ins.ops[0], "shared")
      val = self._src(ins, ins.ops[1], u32) if kind != "inval" else None

      def fn(c, m):
        sel, keys, inv = self._mbar_keys(c, m, addr, ins)
        v = None if val is None else np.broadcast_to(np.asarray(val(c)), (c.n,)).astype(np.int64)[sel]
        bars = _bars(c)
        for j, key in enumerate(keys):
          if kind == "inval":
            bars.pop(key, None)
            continue
          vs = v[inv == j]
          if kind == "init":
            cnt = int(vs[-1])
            if not 1 <= cnt < 1 << 20:
              raise self._err(ins, f"mbarrier.init count {cnt} outside [1, 2^20 - 1] (PTX ISA 9.7.13.15.9)")
            bars[key] = _Bar(cnt)
          else:
            b = self._mbar(c, key, ins)
            b.tx += int(vs.sum()) if kind == "expect_tx" else -int(vs.sum())
            b.settle()
      ins.fn = fn
      return
    if kind == "arrive":
      expect = "expect_tx" in mods
      if len(ins.ops) not in ((3,) if expect else (2, 3)):
        raise self._err(ins, f"mbarrier.arrive{'.expect_tx' if expect else ''}: state, [addr]"
                             f"{', txCount' if expect else '{, count}'} (PTX ISA 9.7.13.15.13)")
      st = ins.ops[0].strip()
      wd = None if st == "_" else self._dst(ins, st)
      addr = self._addr(ins, ins.ops[1], "shared")
      arg = self._src(ins, ins.ops[2], u32) if len(ins.ops) == 3 else None

      def arrive(c, m):
        sel, keys, inv = self._mbar_keys(c, m, addr, ins)
        v = None if arg is None else np.broadcast_to(np.asarray(arg(c)), (c.n,)).astype(np.int64)[sel]
        state = np.zeros(c.n, np.uint64)
        for j, key in enumerate(keys):
          b = self._mbar(c, key, ins)
          who = inv == j
          state[sel[who]] = b.phase
          if expect:
            b.tx += int(v[who].sum())
            n = int(who.sum())
          else:
            n = int(who.sum()) if v is None else int(v[who].sum())
          if n > b.pending:
            raise self._err(ins, f"mbarrier at shared offset {key[1]:#x} (block {key[0]}): {n} arrivals, but phase "
                                 f"{b.phase} has {b.pending} pending (of {b.expected}: PTX ISA 9.7.13.15.13)")
          b.pending -= n
          b.settle()
        if wd is not None:
          wd(c, state, False, m)
      ins.fn = arrive
      return
    if kind in ("try_wait", "test_wait"):
      parity = "parity" in mods
      if len(ins.ops) not in ((3,) if kind == "test_wait" else (3, 4)):
        raise self._err(ins, f"mbarrier.{kind}: waitComplete, [addr], state|phaseParity (PTX ISA 9.7.13.15.16)")
      wd = self._dst(ins, ins.ops[0])
      addr = self._addr(ins, ins.ops[1], "shared")
      ref = self._src(ins, ins.ops[2], u32 if parity else u64)

      def wait(c, m):
        sel, keys, inv = self._mbar_keys(c, m, addr, ins)
        r = np.broadcast_to(np.asarray(ref(c)), (c.n,)).astype(np.int64)[sel]
        out = np.zeros(c.n, bool)
        for j, key in enumerate(keys):
          b = self._mbar(c, key, ins)
          _land(c, b)
          who = inv == j
          done = (b.phase & 1) != (r[who] & 1) if parity else b.phase > r[who]
          out[sel[who]] = done
          if done.all():
            b.stall = 0
            continue
          b.stall += 1
          if b.stall > self.mbarrier_hang_polls:
            raise PTXError(f"hang: mbarrier at shared offset {key[1]:#x} (block {key[0]}) never completes phase "
                           f"{b.phase}: {b.pending} of {b.expected} arrivals and {b.tx} transaction bytes outstanding "
                           f"after {b.stall} polls with no change (a missing arrive, or an expect_tx no copy "
                           f"delivers: PTX ISA 9.7.13.15.1)", ins.line, ins.text)
        wd(c, out, False, m)
      ins.fn = wait
      return
    raise self._err(ins, f"mbarrier.{kind} is not supported (init, inval, arrive, arrive.expect_tx, expect_tx, "
                         f"complete_tx, test_wait, try_wait)")

  def _c_cp_bulk(self, ins: _Ins) -> None:
    """cp.async.bulk.shared::cluster|shared::cta.global.mbarrier::complete_tx::bytes [dst], [src], size, [mbar]."""
    mods = ins.mods
    if "tensor" in mods:
      return self._c_cp_bulk_tensor(ins)   # tma.py
    if "mbarrier::complete_tx::bytes" not in mods or "global" not in mods or \
       not any(x in ("shared::cluster", "shared::cta") for x in mods):
      raise self._err(ins, "only cp.async.bulk.shared::{cluster,cta}.global.mbarrier::complete_tx::bytes is supported")
    self._need(ins, 4)
    dst = self._addr(ins, ins.ops[0], "shared")
    src = self._addr(ins, ins.ops[1], "global")
    size = self._src(ins, ins.ops[2], np.dtype(np.uint32))
    bar = self._addr(ins, ins.ops[3], "shared")

    def fn(c, m):
      sel, keys, inv = self._mbar_keys(c, m, bar, ins)
      d = np.broadcast_to(np.asarray(dst(c)), (c.n,)).astype(np.uint64)[sel]
      s = np.broadcast_to(np.asarray(src(c)), (c.n,)).astype(np.uint64)[sel]
      n = np.broadcast_to(np.asarray(size(c)), (c.n,)).astype(np.int64)[sel]
      for what, x in (("shared destination", d), ("global source", s), ("size", n.astype(np.uint64))):
        bad = (x % np.uint64(16)) != 0
        if bad.any():
          v = int(x[np.argmax(bad)])
          raise GPUFault(f"GPU fault: cp.async.bulk {what} {v:#x} is not a multiple of 16 (PTX ISA 9.7.9.25.4.1)", v)
      for i in range(sel.size):
        b = self._mbar(c, keys[inv[i]], ins)
        data = c.mem.load(s[i] + np.arange(n[i], dtype=np.uint64), np.uint8, "cp.async.bulk global read")
        offs = d[i] + np.arange(n[i], dtype=np.uint64)
        c.shared._flat(offs, np.full(offs.size, c.lanes[sel[i]]), 1, "cp.async.bulk shared write")   # faults now
        b.copies.append((offs, int(c.lanes[sel[i]]), data))
    ins.fn = fn


def _land(c: _Ctx, b: _Bar) -> None:
  """The barrier's bulk copies land: their bytes in shared memory (async proxy), complete-tx of their sizes."""
  for offs, lane, data in b.copies:
    _Local.store(c.shared, offs, np.full(offs.size, lane), data, np.dtype(np.uint8), "cp.async.bulk")
    b.tx -= data.size
  if b.copies:
    b.copies = []
    b.settle()
