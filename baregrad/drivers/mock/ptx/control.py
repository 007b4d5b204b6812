"""Control flow and warp-level instructions of PTXKernel (`ControlOps`): bra/ret/exit/trap, barriers, no-op hints
(membar, fence, prefetch...), and shfl.sync, vote.sync, activemask (which need every thread of the warp active).
The scheduling of these (divergence, reconvergence, barrier release) is launch.py's."""
from __future__ import annotations
import numpy as np
from baregrad.drivers.mock.ptx.launch import _Ctx
from baregrad.drivers.mock.ptx.parser import _literal, _Ins

class ControlOps:
  """Instruction compilers for branches, exits, barriers, hints and warp-wide instructions."""

  # control flow
  def _c_bra(self, ins: _Ins) -> None:
    self._need(ins, 1)
    tgt = ins.ops[0]
    if tgt not in self.labels:
      raise self._err(ins, f"unknown branch target {tgt}")
    ins.kind, ins.target = "bra", self.labels[tgt]

  def _c_ret(self, ins: _Ins) -> None:
    ins.kind = "exit"

  _c_exit = _c_ret

  def _c_trap(self, ins: _Ins) -> None:
    ins.kind = "trap"

  def _c_brkpt(self, ins: _Ins) -> None:
    ins.kind = "trap"

  def _c_call(self, ins: _Ins) -> None:
    raise self._err(ins, "`call` is not supported (call-free code only)")

  def _c_bar(self, ins: _Ins) -> None:
    mods = ins.mods
    if "warp" in mods:  # bar.warp.sync: all threads of the warp converge -> no-op here
      ins.fn = lambda c, m: None
      return
    if "arrive" in mods or "red" in mods:
      raise self._err(ins, f"bar.{'.'.join(mods)} is not supported")
    if len(ins.ops) > 2:
      raise self._err(ins, "bar.sync a{, b}: a barrier and an optional thread count (PTX ISA 9.7.13.1)")
    lit = _literal(ins.ops[0]) if ins.ops else ("i", 0)
    if lit is None or lit[0] != "i" or not 0 <= lit[1] < 16:
      raise self._err(ins, "barrier id must be an immediate 0..15 (PTX ISA 9.7.13.1: 16 barriers a CTA)")
    ins.kind, ins.barid = "bar", lit[1]
    if len(ins.ops) == 2:   # a named barrier for b threads: b an immediate multiple of the warp size (9.7.13.1)
      cnt = _literal(ins.ops[1])
      if cnt is None or cnt[0] != "i" or cnt[1] <= 0 or cnt[1] % 32:
        raise self._err(ins, f"bar.sync thread count `{ins.ops[1].strip()}`: an immediate multiple of 32 (PTX ISA 9.7.13.1)")
      ins.barcount = cnt[1]

  _c_barrier = _c_bar

  def _nop(self, ins: _Ins) -> None:
    ins.fn = lambda c, m: None

  _c_membar = _nop

  def _c_fence(self, ins: _Ins) -> None:
    """fence.proxy.async orders the block's generic-proxy shared writes before async-proxy reads (wgmma: PTX ISA
    9.7.12.4 membar/fence, 9.7.15.3); fence.proxy.tensormap::generic.acquire makes a tensor map's replaced fields
    visible to tensor copies (tma.py); other fences need nothing here (one instruction runs at a time)."""
    if ins.mods[:2] == ["proxy", "tensormap::generic"] and "acquire" in ins.mods:
      self._need(ins, 2)
      addr = self._addr(ins, ins.ops[0], "generic")
      ins.fn = lambda c, m: self._tmap_acquire(c, m, addr)   # tma.py
      return
    if ins.mods[:2] != ["proxy", "async"]:
      ins.fn = lambda c, m: None
      return

    def fn(c, m):
      c.shared.generic_dirty[c.bidx if m is None else c.bidx[m]] = False
    ins.fn = fn

  _c_nanosleep = _nop

  _c_pmevent = _nop

  _c_prefetch = _nop

  _c_prefetchu = _nop

  _c_discard = _nop

  _c_griddepcontrol = _nop

  # warp-level
  def _c_shfl(self, ins: _Ins) -> None:
    if "sync" not in ins.mods:
      raise self._err(ins, "shfl without .sync is not supported")
    mode = next((m for m in ins.mods if m in ("up", "down", "bfly", "idx")), None)
    if mode is None:
      raise self._err(ins, "shfl.sync needs .up/.down/.bfly/.idx")
    self._need(ins, 5)
    u32 = np.dtype(np.uint32)
    dsts = ins.ops[0].split("|")
    wd = self._dst(ins, dsts[0])
    wp = self._dst(ins, dsts[1]) if len(dsts) > 1 else None
    a, b, cc = (self._src(ins, o, u32) for o in ins.ops[1:4])

    def fn(c, m):
      self._check_full_warps(c, m, ins)
      v = np.broadcast_to(np.asarray(a(c)), (c.n,))
      lane = c.tlin % 32
      wbase = c.lanes - lane
      wstart = c.tlin - lane
      bb = np.broadcast_to(np.asarray(b(c)), (c.n,)).astype(np.int64) & 31
      cv = np.broadcast_to(np.asarray(cc(c)), (c.n,)).astype(np.int64)
      clamp = cv & 31
      segmask = (cv >> 8) & 31
      maxl = (lane & segmask) | (clamp & ~segmask)
      minl = lane & segmask
      if mode == "up":
        j = lane - bb
        ok = j >= maxl
      elif mode == "down":
        j = lane + bb
        ok = j <= maxl
      elif mode == "bfly":
        j = lane ^ bb
        ok = j <= maxl
      else:
        j = minl | (bb & ~segmask)
        ok = j <= maxl
      j = np.where(ok, j, lane)
      src = np.where(wstart + j < c.nthreads, wbase + j, c.lanes)
      wd(c, v[src], False, m)
      if wp is not None:
        wp(c, ok, False, m)
    ins.fn = fn

  def _c_vote(self, ins: _Ins) -> None:
    if "sync" not in ins.mods:
      raise self._err(ins, "vote without .sync is not supported")
    mode = next((m for m in ins.mods if m in ("all", "any", "uni", "ballot")), None)
    self._need(ins, 3)
    p = self._src(ins, ins.ops[1], np.dtype(np.bool_))
    wd = self._dst(ins, ins.ops[0])

    def fn(c, m):
      self._check_full_warps(c, m, ins)
      v = np.broadcast_to(np.asarray(p(c)), (c.n,))
      act = np.ones(c.n, bool) if m is None else m
      gid, ng = c.warp_gid, c.nwarp_groups
      pv = v & act
      npos = np.bincount(gid, weights=pv, minlength=ng)
      nact = np.bincount(gid, weights=act, minlength=ng)
      if mode == "ballot":
        w = (pv.astype(np.float64) * np.exp2((c.tlin % 32).astype(np.float64)))
        r = np.bincount(gid, weights=w, minlength=ng).astype(np.uint64).astype(np.uint32)[gid]
      elif mode == "all":
        r = (npos == nact)[gid]
      elif mode == "any":
        r = (npos > 0)[gid]
      else:
        r = ((npos == nact) | (npos == 0))[gid]
      wd(c, r, False, m)
    ins.fn = fn

  def _check_full_warps(self, c: _Ctx, m: np.ndarray | None, ins: _Ins) -> None:
    if m is None:
      return
    nact = np.bincount(c.warp_gid, weights=m, minlength=c.nwarp_groups)
    if ((nact > 0) & (nact < c.warp_size)).any():
      raise self._err(ins, "warp-level instruction executed by a partial warp (divergent lanes) "
                           "is not supported by the mock")

  def _c_elect(self, ins: _Ins) -> None:
    """elect.sync d|p, membermask (PTX ISA 9.7.12.10): of the active threads in membermask (which all execute it,
    .sync) one leader per warp gets p true, every one of them its lane id in d (`_`: none). The ISA does not say which
    lane leads; here the lowest."""
    if ins.mods != ["sync"]:
      raise self._err(ins, "only elect.sync is supported")
    self._need(ins, 2)
    d, _, p = ins.ops[0].partition("|")
    if not p:
      raise self._err(ins, "elect.sync d|p, membermask: the destination is a register (or _) | a predicate")
    wd = None if d.strip() == "_" else self._dst(ins, d)
    wp = self._dst(ins, p)
    mask = self._src(ins, ins.ops[1], np.dtype(np.uint32))

    def fn(c, m):
      act = np.ones(c.n, bool) if m is None else m
      lane = (c.tlin % 32).astype(np.int64)
      mm = np.broadcast_to(np.asarray(mask(c)), (c.n,)).astype(np.uint64)
      inmask = ((mm >> lane.astype(np.uint64)) & np.uint64(1)).astype(bool)
      if (act & ~inmask).any():
        raise self._err(ins, "elect.sync executed by a thread outside its membermask (PTX ISA 9.7.12.10)")
      # every thread named in a warp's membermask executes the same elect.sync (.sync)
      want = np.bincount(c.warp_gid, weights=act & inmask, minlength=c.nwarp_groups)
      named = np.bincount(c.warp_gid, weights=inmask & (c.tlin < c.nthreads), minlength=c.nwarp_groups)
      if ((want > 0) & (want < named)).any():
        raise self._err(ins, "elect.sync: a thread named in membermask did not execute it (PTX ISA 9.7.12.10, .sync)")
      lead = np.full(c.nwarp_groups, 32, np.int64)
      np.minimum.at(lead, c.warp_gid[act], lane[act])
      ld = lead[c.warp_gid]
      if wd is not None:
        wd(c, ld.astype(np.uint32), False, m)
      wp(c, lane == ld, False, m)
    ins.fn = fn

  def _c_activemask(self, ins: _Ins) -> None:
    self._need(ins, 1)
    wd = self._dst(ins, ins.ops[0])

    def fn(c, m):
      act = np.ones(c.n, bool) if m is None else m
      w = act.astype(np.float64) * np.exp2((c.tlin % 32).astype(np.float64))
      bits = np.bincount(c.warp_gid, weights=w, minlength=c.nwarp_groups).astype(np.uint64).astype(np.uint32)
      wd(c, bits[c.warp_gid], False, m)
    ins.fn = fn
