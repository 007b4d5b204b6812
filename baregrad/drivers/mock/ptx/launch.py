"""Launching a PTXKernel (`Launcher`): the parameter buffer, the launch geometry and special registers, and the
scheduler that runs batches of blocks as one vector with per-thread PCs (minimum-PC-first, livelock turns, barriers;
see the package docstring)."""
from __future__ import annotations
from typing import Iterator
import numpy as np
from baregrad.drivers.mock.ptx.dtypes import _DT, _UINT, _is_float
from baregrad.drivers.mock.ptx.errors import PTXError
from baregrad.drivers.mock.ptx.memory import Memory, Windows, _DEFAULT_WINDOWS, _Local, _Shared

class _Ctx:
  __slots__ = ("regs", "n", "mem", "shared", "local", "params", "gaddr", "special", "lanes", "ins",
               "clock", "nthreads", "nblocks", "tlin", "bidx", "warp_gid", "nwarp_groups", "warp_size", "win", "step",
               "cp_async", "wgmma", "mbar", "tmaps", "regs_launch", "maxnreg")


def _mixed_blocks(c: _Ctx, act, g):
  """Whether some block has active threads on both sides of the guard g."""
  yes = np.bincount(c.bidx, weights=act & g, minlength=c.nblocks)
  no = np.bincount(c.bidx, weights=act & ~g, minlength=c.nblocks)
  return bool(((yes > 0) & (no > 0)).any())


def _special_fn(c: _Ctx, tid, block, ctaid, grid, shared_size, dyn, over):
  n = c.n
  cache = {}
  axis = {"x": 0, "y": 1, "z": 2}

  def get(name):
    v = cache.get(name)
    if v is not None:
      if name.startswith("clock"):
        c.clock += 1
      return v
    base, _, ax = name.partition(".")
    i = axis.get(ax, 0)
    u32 = np.uint32
    if base == "tid":
      v = tid[i]
    elif base == "ntid":
      v = np.full(n, (over["ntid"] if "ntid" in over else block)[i], u32)
    elif base == "ctaid":
      v = ctaid[i]
    elif base == "nctaid":
      v = np.full(n, (over["nctaid"] if "nctaid" in over else grid)[i], u32)
    elif base == "laneid":
      v = (c.tlin % 32).astype(u32)
    elif base == "warpid":
      v = (c.tlin // 32).astype(u32)
    elif base == "nwarpid":
      v = np.full(n, (c.nthreads + 31) // 32, u32)
    elif base in ("smid", "gridid"):
      v = np.zeros(n, u32)
    elif base in ("nsmid",):
      v = np.ones(n, u32)
    elif base in ("warpsize", "WARP_SZ"):
      v = np.full(n, 32, u32)
    elif base == "dynamic_smem_size":
      v = np.full(n, over.get("dynamic_smem_size", dyn), u32)
    elif base == "total_smem_size":
      v = np.full(n, over.get("total_smem_size", shared_size), u32)
    elif base.startswith("lanemask_"):
      lane = (c.tlin % 32).astype(np.uint64)
      one = np.uint64(1)
      kind = base[9:]
      if kind == "eq":
        r = one << lane
      elif kind == "lt":
        r = (one << lane) - one
      elif kind == "le":
        r = (one << (lane + one)) - one
      elif kind == "gt":
        r = ~((one << (lane + one)) - one)
      else:
        r = ~((one << lane) - one)
      v = r.astype(np.uint32)
    elif base in ("clock", "clock64"):
      c.clock += 1
      return np.full(n, c.clock * 4, np.uint64 if base == "clock64" else u32)
    else:
      raise PTXError(f"special register %{name} is not supported")
    v.flags.writeable = False
    cache[name] = v
    return v
  return get


class Launcher:
  """pack_params, launch and launch_steps (the scheduler) of PTXKernel."""

  def pack_params(self, params: list[int | float | bytes]) -> bytes:
    """Lay out a list of values (ints, floats, or bytes per param) as the param buffer."""
    if len(params) != len(self._pvars):
      raise PTXError(f"kernel {self.name} takes {len(self._pvars)} params, got {len(params)}")
    buf = bytearray(self.param_size)
    for p, v in zip(self._pvars, params):
      dt = _DT[p.tname]
      if isinstance(v, (bytes, bytearray)):
        b = bytes(v)
        if len(b) != p.size:
          raise PTXError(f"param {p.name}: expected {p.size} bytes, got {len(b)}")
      elif p.size != dt.itemsize:
        raise PTXError(f"param {p.name} is an aggregate of {p.size} bytes: pass bytes")
      elif _is_float(dt):
        b = np.array(v, dt).tobytes()
      else:
        b = np.array(int(v) & ((1 << (8 * dt.itemsize)) - 1), _UINT[dt.itemsize]).tobytes()
      buf[p.offset:p.offset + p.size] = b
    return bytes(buf)

  def launch(self, memory: Memory, params: list[int | float | bytes] | bytes, grid: tuple[int, ...],
             block: tuple[int, ...], shared_bytes: int = 0, specials: dict[str, int] | None = None,
             windows: Windows | None = None) -> None:
    """Run the grid to completion (launch_steps without stepping)."""
    for _ in self.launch_steps(memory, params, grid, block, shared_bytes, specials, windows, step=False):
      pass

  def launch_steps(self, memory: Memory, params: list[int | float | bytes] | bytes, grid: tuple[int, ...],
                   block: tuple[int, ...], shared_bytes: int = 0, specials: dict[str, int] | None = None,
                   windows: Windows | None = None, step: bool = True) -> Iterator[None]:
    """launch() as a generator: yields before each instruction issue (`step`) and between batches of blocks."""
    grid = tuple(int(x) for x in (tuple(grid) + (1, 1, 1))[:3])
    block = tuple(int(x) for x in (tuple(block) + (1, 1, 1))[:3])
    if min(grid) < 1 or min(block) < 1:
      raise PTXError(f"launch of {self.name}: empty grid {grid} or block {block}")
    n = block[0] * block[1] * block[2]
    if n > 1024:
      raise PTXError(f"launch of {self.name}: {n} threads per block > 1024")
    if isinstance(params, (bytes, bytearray, memoryview)):
      pbuf = bytes(params)
      if len(pbuf) < self.param_size:
        raise PTXError(f"launch of {self.name}: param buffer has {len(pbuf)} bytes, "
                       f"kernel needs {self.param_size}")
    else:
      pbuf = self.pack_params(list(params))
    gaddr = self.module.load_globals(memory)
    shared_size = self.static_shared + (15 if shared_bytes else 0) + int(shared_bytes)
    nblocks = grid[0] * grid[1] * grid[2]
    per = max(1, min(nblocks, self.max_batch_lanes // n))
    if shared_size * per > (64 << 20):
      per = max(1, (64 << 20) // max(shared_size, 1))
    t1 = np.arange(n, dtype=np.int64)
    tid1 = [t1 % block[0], (t1 // block[0]) % block[1], t1 // (block[0] * block[1])]
    nw1 = (n + 31) // 32
    with np.errstate(all="ignore"):
      for start in range(0, nblocks, per):
        nb = min(per, nblocks - start)
        N = nb * n
        c = _Ctx()
        c.n, c.nthreads, c.nblocks = N, n, nb
        c.mem, c.params, c.gaddr = memory, pbuf, gaddr
        c.lanes = np.arange(N, dtype=np.int64)
        c.tlin = np.tile(t1, nb)
        c.bidx = c.lanes // n
        c.warp_gid = c.bidx * nw1 + c.tlin // 32
        c.nwarp_groups = nb * nw1
        ws = np.minimum(32, n - np.arange(nw1) * 32)
        c.warp_size = np.tile(ws, nb)
        bl = np.arange(start, start + nb, dtype=np.int64)
        cta = [bl % grid[0], (bl // grid[0]) % grid[1], bl // (grid[0] * grid[1])]
        tid = [np.tile(a, nb).astype(np.uint32) for a in tid1]
        ctaid = [np.repeat(a, n).astype(np.uint32) for a in cta]
        c.regs = {}
        zero = {}
        for r, dt in self.reg_types.items():
          z = zero.get(dt)
          if z is None:
            z = zero[dt] = np.zeros(N, dt)
            z.flags.writeable = False
          c.regs[r] = z
        c.shared = _Shared(nb, shared_size, n)
        c.local = _Local(N, self.local_size, "local")
        c.clock = 0
        c.cp_async = None
        c.wgmma = None
        c.mbar = None
        c.tmaps = None
        # registers a thread has at launch (the QMD's REGISTER_COUNT, where the launch ran compiled code: the NV mock's
        # "regs" special), and each warpgroup's count after setmaxnreg (wgmma.py): a block's budget at its end
        c.regs_launch = (specials or {}).get("regs")
        c.maxnreg = {}
        c.special = _special_fn(c, tid, block, ctaid, grid, shared_size, shared_bytes, specials or {})
        c.win = windows or _DEFAULT_WINDOWS
        c.step = step
        first = (int(cta[0][0]), int(cta[1][0]), int(cta[2][0]))
        yield from self._run_block(c, first)
        if c.maxnreg and c.regs_launch: self._register_budget(c, start)   # wgmma.py
        yield

  def _run_block(self, c: _Ctx, ctaid):
    code = self.code
    ncode = len(code)
    n = c.n
    live = np.ones(n, bool)
    conv = True  # all runnable threads at one pc
    pc = 0
    pcs = None
    waiting = None  # bool array of threads blocked at a barrier
    waitpc = None
    exited_any = False
    steps = 0
    div_steps = 0
    trace = self.trace
    budget = self.max_steps
    step = c.step
    while True:
      if step:
        yield
      steps += 1
      if steps > budget:
        raise PTXError(f"kernel {self.name}: more than {budget} instruction issues in one batch of "
                       f"blocks (an infinite loop?); raise PTXKernel.max_steps if intended")
      if conv:
        if pc >= ncode:
          raise PTXError(f"kernel {self.name}: fell off the end of the code without ret/exit")
        ins = code[pc]
        if trace is not None:
          trace(ins.line, ins.text, int(live.sum()) if exited_any else n, n)
        act = None if not exited_any else live
        # guard
        if ins.pred is not None:
          pv = c.regs[ins.pred]
          g = ~pv if ins.pneg else pv
          if act is not None:
            g = g & act
          gall = bool(g.all()) if act is None else bool((g == act).all())
          gnone = not g.any()
        else:
          g = act
          gall, gnone = True, False
        k = ins.kind
        try:
          if k == "op":
            if not gnone:
              ins.fn(c, None if (gall and act is None) else g)
            pc += 1
          elif k == "bra":
            if gall:
              pc = ins.target
            elif gnone:
              pc += 1
            else:
              conv = False
              pcs = np.full(n, pc + 1, np.int64)
              pcs[g] = ins.target
              waiting = np.zeros(n, bool)
              waitpc = np.zeros(n, np.int64)
          elif k == "exit":
            if gall:
              return
            if not gnone:
              live = live & ~g
              exited_any = True
            pc += 1
          elif k == "bar":
            if gnone:
              pc += 1
            elif not gall:
              # a guard may differ between blocks of the batch, never inside a block
              a0 = live if act is None else act
              if _mixed_blocks(c, a0, g):
                raise PTXError("divergent barrier: bar.sync under a guard that is "
                               "false for some threads of a block")
              conv = False
              pcs = np.full(n, pc + 1, np.int64)
              waiting = g.copy()
              waitpc = np.full(n, pc, np.int64)
            else:
              if ins.barcount:
                _check_count(c, live, ins)
              elif exited_any and self.strict_barriers:
                wb = np.zeros(c.nblocks, bool)
                wb[c.bidx[live]] = True
                if (~live & wb[c.bidx]).any():
                  raise PTXError("barrier reached after some threads of the block exited")
              pc += 1
          elif k == "trap":
            if not gnone:
              raise PTXError("trap executed")
            pc += 1
        except PTXError as e:
          raise e.locate(ins.line, ins.text) from None
        continue

      # divergent: minimum pc first
      runnable = live & ~waiting
      if not runnable.any():
        if not (waiting & live).any():
          return
        wl = waiting & live
        bp = waitpc[wl]
        if (bp != bp[0]).any():
          bb = c.bidx[wl]
          mn = np.full(c.nblocks, ncode + 1, np.int64)
          mx = np.full(c.nblocks, -1, np.int64)
          np.minimum.at(mn, bb, bp)
          np.maximum.at(mx, bb, bp)
          bad = (mx >= 0) & (mn != mx)
          if bad.any():
            b0 = int(np.argmax(bad))
            lines = sorted({code[int(p)].line for p in np.unique(bp[bb == b0])})
            raise PTXError(f"divergent barrier: threads of one block wait at different "
                           f"barriers (lines {lines})")
        if code[int(bp[0])].barcount:
          _check_count(c, wl, code[int(bp[0])])
        elif self.strict_barriers and exited_any:
          wb = np.zeros(c.nblocks, bool)
          wb[c.bidx[wl]] = True
          if (~live & wb[c.bidx]).any():
            i0 = code[int(bp[0])]
            raise PTXError("barrier reached after some threads of the block exited",
                           i0.line, i0.text)
        waiting[:] = False
        runnable = live.copy()
      div_steps += 1
      if div_steps > self.livelock_steps and div_steps & 1:
        # long without reconverging (a spin loop waiting on a thread that is further
        # ahead, e.g. a lock): let the leading threads run too, as sm_70+ scheduling does
        cur = int(np.where(runnable, pcs, -1).max())
        act = runnable & (pcs == cur)
      else:
        rp = np.where(runnable, pcs, ncode + 1)
        cur = int(rp.min())
        act = rp == cur
      if cur >= ncode:
        raise PTXError(f"kernel {self.name}: fell off the end of the code without ret/exit")
      ins = code[cur]
      if trace is not None:
        trace(ins.line, ins.text, int(act.sum()), n)
      if ins.pred is not None:
        pv = c.regs[ins.pred]
        g = act & (~pv if ins.pneg else pv)
      else:
        g = act
      k = ins.kind
      try:
        if k == "op":
          if g.any():
            ins.fn(c, g)
          pcs[act] = cur + 1
        elif k == "bra":
          pcs[act] = cur + 1
          pcs[g] = ins.target
        elif k == "exit":
          live &= ~g
          exited_any = exited_any or bool(g.any())
          pcs[act & ~g] = cur + 1
        elif k == "bar":
          if (act & ~g).any() and g.any() and _mixed_blocks(c, act, g):
            raise PTXError("divergent barrier: bar.sync under a guard that is false for "
                           "some threads of a block")
          pcs[act] = cur + 1
          if g.any():
            waiting |= g
            waitpc[g] = cur
        elif k == "trap":
          if g.any():
            raise PTXError("trap executed")
          pcs[act] = cur + 1
      except PTXError as e:
        raise e.locate(ins.line, ins.text) from None
      # reconverged?
      if not waiting.any():
        lp = pcs[live]
        if lp.size == 0:
          return
        if (lp == lp[0]).all():
          conv = True
          pc = int(lp[0])
          if div_steps <= self.livelock_steps:  # once a spin loop was seen, stay fair
            div_steps = 0


def _check_count(c: _Ctx, arrived: np.ndarray, ins) -> None:
  """A barrier with a thread count (bar.sync a, b) completes when b threads of the block arrived (PTX ISA 9.7.13.1):
  a block whose threads at it are not b (more, or fewer with no other thread left to come) is an error here."""
  got = np.bincount(c.bidx[arrived], minlength=c.nblocks)
  bad = (got > 0) & (got != ins.barcount)
  if bad.any():
    b0 = int(np.argmax(bad))
    raise PTXError(f"bar.sync {ins.barid}, {ins.barcount}: {int(got[b0])} threads of block {b0} arrived, the barrier "
                   f"counts {ins.barcount} (PTX ISA 9.7.13.1)", ins.line, ins.text)
