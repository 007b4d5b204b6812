"""Shared-memory staging (OptOps.SMEM), a step of lowering (codegen/lower.py): each staged load gets a shared tile
filled once per step of the outermost reduce loop (the stage loop), and its reads come from there.

Tile dims: the workgroup, lane and inner reduce parts of the axes the load moves with (Kernel.stage_tile). Layout in
shared memory: lane dims fastest (a thread reads runs of its own register tile as vectors); a tensor-core operand keeps
rows of its k tile contiguous instead. Fill: element e of the tile, in an order whose fastest dim is the one contiguous
in global memory, goes to thread e // V % threads (V neighbours each, one vector access), so neighbouring threads read
neighbouring addresses.

Without asynchronous copies: a barrier before the fill (the previous step's readers are done) and one after it.
With them (Renderer.has_async_copy): a pipeline of S buffers (Kernel.stage_buffers: 2 by default, the SMEM opts' amount,
up to 4); step s reads buffer s % S while the copies of the next S - 1 steps are in flight. Before the loop the copies
of steps 0 .. S-2 are issued, each step's committed as its own group (cp.async.commit_group). In step s: wait until at
most S - 2 groups are pending (cp.async.wait_group S-2: step s's group is complete) and barrier (every thread's copies
of step s landed, and every thread is done reading step s - 1); then the copies of step s + S - 1 into buffer
(s + S - 1) % S, the one step s - 1 read (masked off past the last step), committed; then step s's reads. One barrier a
step (PTX ISA 9.7.9.25.3.2 cp.async.commit_group, 9.7.9.25.3.3 cp.async.wait_group)."""
from __future__ import annotations
import itertools
from dataclasses import dataclass
from typing import Callable, TYPE_CHECKING
from baregrad.helpers import prod
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import UOp, Ops
from baregrad.ir.view import ShapeTracker
from baregrad.codegen.kernel import OptError, LANE_KINDS
from baregrad.codegen.tc_lower import ldmatrix, wgmma_desc
from baregrad.codegen import tma
if TYPE_CHECKING: from baregrad.codegen.lower import Lowering

def _swizzler(rowlen: int) -> Callable[[UOp], UOp]:
  """idx -> idx with its 16-byte chunk (8 16-bit values) XORed by its row's position within 8 rows' worth of 128-byte
  bank lines (rows of `rowlen` values); the identity for rowlen 0. Written as (chunk ^ f(row)) * 8 + (idx % 8) so the
  result is still provably a multiple of 8 where idx is (vector accesses keep their width)."""
  if not rowlen: return lambda idx: idx
  per_line = max(1, 64 // rowlen)          # rows in one 128-byte line of banks
  nchunk = min(8, rowlen // 8)
  def f(idx: UOp) -> UOp:
    chunk = (idx // 8).simplify()
    key = ((idx // rowlen) // per_line % nchunk).simplify()
    rest = (idx % 8).simplify()
    out = UOp(Ops.XOR, idx.dtype, (chunk, key)) * 8
    return out if rest.op is Ops.CONST and rest.arg == 0 else out + rest
  return f

def swizzle_rc(rowlen: int) -> Callable[[UOp, UOp], UOp]:
  """(row, col) -> the swizzled offset _swizzler(rowlen) gives row * rowlen + col, computed from the row and column
  themselves (their constant parts stay constant offsets: one base register for many accesses)."""
  if not rowlen: return lambda row, col: (row * rowlen + col).simplify()
  per_line, nchunk = max(1, 64 // rowlen), min(8, rowlen // 8)
  def f(row: UOp, col: UOp) -> UOp:
    key = (row // per_line % nchunk).simplify()
    chunk = UOp(Ops.XOR, col.dtype, ((col // 8).simplify(), key)) * 8
    rest = (col % 8).simplify()
    out = row * rowlen + chunk
    return (out if rest.op is Ops.CONST and rest.arg == 0 else out + rest).simplify()
  return f

@dataclass
class StagedTile:
  """One staged load's shared tile: the axis parts it spans (`parts`), its elements (`size`), each part's stride in
  shared memory (`sstride`), the swizzle of its addresses (`swz`; `rowlen` the row length it keys on, 0: none), the
  fill order (`order`, the part contiguous in global memory last), the elements a thread copies at once (`v`, along
  `lane`, over the last `run` parts of `order`), and the DEFINE_LOCAL holding it (`smem`, `size` times the pipeline's
  buffers from `base` on)."""
  def at(self, idx: UOp, valid: UOp | None = None) -> UOp:
    """The shared-memory INDEX of tile offset idx (swizzled already)."""
    return self.smem.index((idx + self.base).simplify() if self.base else idx, valid)
  ld: UOp
  st: ShapeTracker
  parts: list[int]
  size: int
  sstride: dict[int, int]
  rowlen: int
  swz: Callable[[UOp], UOp]
  order: list[int]
  v: int
  run: int
  smem: UOp
  lane: UOp
  base: int = 0   # where the tile starts in `smem` (elements): the tiles of a tensor-core kernel share one pool

class _Stager:
  """The state of staging one kernel's loads: the lowering, the stage loop (axis part `si`, its range and steps),
  double buffering (`dbl`), the workgroup's threads and linear thread id, and the barriers around the fills."""
  def __init__(self, lw: Lowering):
    k = lw.k
    si = k.stage_axis()
    if si is None: raise OptError("SMEM needs a reduce loop around the tile (split the reduce axis)")
    self.lw, self.k, self.axes, self.it, self.si = lw, k, k.axes, lw.it, si
    self.stage_r, self.nstage = lw.rng[si], k.axes[si].size
    self.dbl = k.async_copy
    self.nbuf = k.stage_buffers()
    self.nthr = prod(k.axes[i].size for i in lw.th)
    tid = UOp.const(lw.it, 0)
    for i in lw.th: tid = tid + lw.rng[i] * lw.th_stride[i]
    self.tid = tid.simplify()
    # a loop of outputs around the stage loop: the next iteration's first fill must wait for this one's readers
    outer = tuple(r for i, r in lw.rng.items() if k.axes[i].kind == "loop" and r.op is Ops.RANGE)
    self.pre = UOp(Ops.BARRIER, dtypes.void, outer) if self.dbl and outer else None
    self.before = UOp(Ops.BARRIER, dtypes.void, (self.stage_r,))

  def layout(self, ld: UOp, parts: list[int], strides: tuple) -> list[int]:
    """The tile's parts in shared-memory order, the fastest last: lane parts for a plain load; for a tensor-core operand
    the fragment coordinate contiguous in global memory stays contiguous."""
    axes = self.axes
    if ld not in self.lw.opvals: return sorted(parts, key=lambda i: (axes[i].kind in LANE_KINDS, i))
    tc, m_, n_, k_, la, _ = self.k.tc  # type: ignore[misc]
    row = m_ if ld is la else n_
    fastc = row if strides[row] == 1 and strides[k_] != 1 else k_
    # every part of that coordinate (the warps', the fragments' and the lanes' parts): a whole tile row contiguous, so
    # neighbouring threads fill neighbouring 16-byte chunks of one row (one wavefront per 8 of them once swizzled).
    # wgmma reading an operand MN-major (its row coordinate contiguous) takes rows of one 64-value chunk: the upcast
    # parts of that coordinate (several instructions along N or M) go outermost, one [k][64] block per chunk
    outer = lambda i: tc.desc and fastc != k_ and axes[i].orig == fastc and axes[i].tc is None   # noqa: E731
    return sorted(parts, key=lambda i: (axes[i].orig == fastc and not outer(i), i))

  def swizzle_rowlen(self, ld: UOp, lay: list[int]) -> int:
    """A tensor-core operand of 16-bit values is read by ldmatrix, 8 rows of 16 bytes at once: rows of k (without
    .trans) or rows of its m/n coordinate (with .trans, each row one k). The 16-byte chunks of a row are XOR-swizzled by
    the row (_swizzler), so those 8 rows lie in different banks (unswizzled, rows 128 bytes or more apart share banks);
    the fill and every read go through the same function. The row length (a power of two of at least 16 values), 0:
    no swizzle."""
    axes = self.axes
    if not (ld in self.lw.opvals and ld.dtype.itemsize == 2 and axes[lay[-1]].tc is not None): return 0
    fast = axes[lay[-1]].orig
    rparts = list(itertools.takewhile(lambda i: axes[i].orig == fast, reversed(lay)))
    rowlen = prod(axes[i].size for i in rparts)
    return rowlen if rowlen >= 16 and rowlen & (rowlen - 1) == 0 else 0

  def fill_order(self, ld: UOp, parts: list[int], strides: tuple, size: int, sstride: dict[int, int]) -> tuple[list[int], int, int]:
    """The parts in fill order (by stride in global memory, the contiguous one fastest), the elements a thread copies at
    once, and how many of the fastest parts those span. A thread copies up to 16 bytes (one cp.async.cg or 128-bit
    access) along the run of fastest parts that is contiguous both in global and in shared memory (a tensor-core
    operand's coordinate is split into lane, fragment and tile parts: together they are one run), where the threads
    cover the tile in whole vectors."""
    axes = self.axes
    def gstride(i: int) -> float:
      a = axes[i]
      inner = prod(b.size for k, b in enumerate(axes) if b.orig == a.orig and k > i)
      s = strides[a.orig]
      return float("inf") if s is None else abs(s) * inner
    fo = sorted(parts, key=lambda i: (-gstride(i), i))
    nthr, run, rsize = self.nthr, 1, axes[fo[-1]].size
    while run < len(fo):   # extend the run outwards while the next part continues it in both memories
      i, j = fo[-run - 1], fo[-run]
      if gstride(i) != gstride(j) * axes[j].size or sstride[i] != sstride[j] * axes[j].size: break
      run, rsize = run + 1, rsize * axes[i].size
    for cand in (8, 4, 2):
      if cand * ld.dtype.itemsize <= 16 and gstride(fo[-1]) == 1 and sstride[fo[-1]] == 1 and rsize % cand == 0 \
         and size % (nthr * cand) == 0 and (nthr % (rsize // cand) == 0 or (rsize // cand) % nthr == 0): return fo, cand, run
    return fo, 1, 1

  def block_strides(self, st: ShapeTracker, parts: list[int]) -> tuple:
    """The load's strides (real_strides), and where an axis has none (its index is not affine: an im2col operand's
    reduction over (kh, kw, c), unravelled by divisions) but is affine within the blocks the tile spans along it (the
    tile's parts of the axis are its innermost, T elements, so every stage step starts a block): its stride within
    them, so the fill copies runs of it as vectors (16 bytes of channels a copy instead of one element)."""
    strides = list(st.real_strides())
    for o, s in enumerate(strides):
      if s is not None or any(v.mask is not None for v in st.views) or not isinstance(st.shape[o], int): continue
      mine = [i for i, a in enumerate(self.axes) if a.orig == o]
      tile = [i for i in mine if i in parts]
      if not tile or tile != mine[len(mine) - len(tile):]: continue
      T = prod(self.axes[i].size for i in tile)
      if st.shape[o] % T: continue
      strides[o] = st.reshape(tuple(st.shape[:o]) + (st.shape[o] // T, T) + tuple(st.shape[o + 1:])).real_strides()[o + 1]  # type: ignore[arg-type]
    return tuple(strides)

  def tile(self, n: int, ld: UOp, parts: list[int], size: int) -> StagedTile:
    """Plan the tile of staged load number n: layout, swizzle, fill order, vector width, its shared buffer."""
    st: ShapeTracker = ld.src[1].arg
    strides = self.block_strides(st, parts)
    lay = self.layout(ld, parts, strides)
    sstride, acc = {}, 1
    for i in reversed(lay): sstride[i], acc = acc, acc * self.axes[i].size
    rowlen = self.swizzle_rowlen(ld, lay)
    fo, v, run = self.fill_order(ld, parts, strides, size, sstride)
    smem = UOp(Ops.DEFINE_LOCAL, ld.dtype.ptr(local=True), (), (f"tile{n}", size * self.nbuf))
    lane = UOp.range(v, 200_000 + n, "upcast", self.it) if v > 1 else UOp.const(self.it, 0)
    return StagedTile(ld, st, parts, size, sstride, rowlen, _swizzler(rowlen), fo, v, run, smem, lane)

  def fill(self, t: StagedTile, step: UOp, buf: UOp, ok: UOp | None, dep: tuple[UOp, ...]) -> list[UOp]:
    """The stores that copy step `step`'s tile from global memory into shared memory at offset `buf` (masked by `ok`),
    after `dep`: each thread a chunk of v elements per round, the rounds past the tile's end masked off."""
    it, nthr, v, lane = self.it, self.nthr, t.v, t.lane
    out = []
    for jj in range(-(-t.size // (nthr * v))):
      q = UOp.const(it, jj * nthr) + self.tid    # which chunk of v elements
      vals = {**self.lw.rng, self.si: step}
      rest = q
      rorder = list(reversed(t.order))
      if v > 1:   # the run of fastest parts as one coordinate e, v elements a thread: its first element split into
        # the parts, the lane added to the innermost part's value (the run is contiguous in both memories, so the
        # addresses stay affine in the lane and the v elements one vector access)
        rsize = prod(self.axes[i].size for i in rorder[:t.run])
        e, rest = ((rest % (rsize // v)) * v).simplify(), (rest // (rsize // v)).simplify()
        for i in rorder[:t.run]: vals[i], e = (e % self.axes[i].size).simplify(), (e // self.axes[i].size).simplify()
        vals[rorder[0]] = (vals[rorder[0]] + lane).simplify()
        rorder = rorder[t.run:]
      for k, i in enumerate(rorder):
        size = self.axes[i].size
        vals[i], rest = (rest % size).simplify() if k < len(rorder) - 1 else rest, (rest // size).simplify()
      in_tile = None if t.size % (nthr * v) == 0 else (q < t.size // v).simplify()
      # past the last step (ok false) the copy is not issued at all: no zero-fill left in flight after the loop
      smask = in_tile if ok is None else ok if in_tile is None else (in_tile & ok)
      gidx, gvalid = self.lw.access(t.st, smask, vals)
      val = UOp(Ops.LOAD, t.ld.dtype, (t.ld.src[0].index(gidx, gvalid),))
      sidx: UOp = buf
      for i in t.parts: sidx = sidx + vals[i] * t.sstride[i]
      if t.rowlen:   # swizzle the chunk start (the vector lanes stay inside one 16-byte chunk: v <= 8)
        sidx = t.swz(sidx.substitute({lane: UOp.const(it, 0)}).simplify()) + lane if v > 1 else t.swz(sidx.simplify())
      out.append(UOp(Ops.STORE, dtypes.void, (t.at(sidx.simplify(), smask), val) + dep,
                     "async" if self.dbl else None))
    return out

  def fills(self, t: StagedTile) -> tuple[list[list[UOp]], list[UOp], UOp]:
    """The tile's fills before the stage loop (pipelined: steps 0 .. S-2's, one list a step; else none) and in each step
    (pipelined: step s + S - 1's into the buffer step s - 1 read, masked off past the last step; else step s's), and the
    offset step s reads at. The fills' dependencies are placeholders that `complete` replaces."""
    zero, nb = UOp.const(self.it, 0), self.nbuf
    if not self.dbl: return [], self.fill(t, self.stage_r, zero, None, (self.before,)), zero
    first = [self.fill(t, UOp.const(self.it, p), UOp.const(self.it, p * t.size), None, (self.before,)) for p in range(nb - 1)]
    nxt = (self.stage_r + (nb - 1)).simplify()
    fills = self.fill(t, nxt, ((nxt % nb) * t.size).simplify(), (nxt < self.nstage).simplify(), (self.before,))
    return first, fills, ((self.stage_r % nb) * t.size).simplify()

  def complete(self, first: list[list[UOp]], fills: list[UOp]) -> UOp:
    """The barrier (or commit) after which step s's tiles are complete and may be read. Pipelined: the prologue's
    groups committed one by one in step order (after the barrier that ends an enclosing loop's previous iteration),
    then per step: wait for step s's group and barrier, issue and commit step s + S - 1's copies."""
    if not self.dbl: return UOp(Ops.BARRIER, dtypes.void, tuple(fills))
    dep = self.pre
    for p, fs in enumerate(first):
      fs = [f.substitute({f.src[2]: dep}) if dep is not None else f.replace(src=f.src[:2]) for f in fs]
      dep = UOp(Ops.BARRIER, dtypes.void, tuple(fs) + ((dep,) if dep is not None else ()), "commit")
    assert dep is not None
    wait = UOp(Ops.BARRIER, dtypes.void, (self.stage_r, dep), ("wait", self.nbuf - 2))
    fills = [f.substitute({f.src[2]: wait}) for f in fills]
    return UOp(Ops.BARRIER, dtypes.void, tuple(fills) + (wait,), "commit")

  def read(self, t: StagedTile, rbuf: UOp, after: UOp) -> UOp:
    """The load's value read from its tile at buffer offset rbuf after barrier `after`: a tensor-core operand's whole
    fragment in one ldmatrix where that fits, else element by element at the operand's (or the ranges') values."""
    ld, opvals = t.ld, self.lw.opvals
    if self.k.tc is not None and self.k.tc[0].desc and ld in opvals: return wgmma_desc(self.lw, t, rbuf, after)
    rv = opvals.get(ld, self.lw.rng)
    if ld in opvals and (frag := ldmatrix(self.lw, t, rv, rbuf, after)) is not None: return frag
    ridx: UOp = rbuf
    for i in t.parts: ridx = ridx + rv[i] * t.sstride[i]
    return UOp(Ops.LOAD, ld.dtype, (t.at(t.swz(ridx.simplify())), after))

def stage(lw: Lowering) -> dict[UOp, UOp]:
  """SMEM: each staged load of the kernel -> its read from a shared tile, filled once per step of the stage loop
  (see the module docstring for the layout, the fill and the barriers)."""
  k = lw.k
  s = _Stager(lw)
  cands = k.stage_candidates()
  first: list[list[UOp]] = []
  fills: list[UOp] = []
  reads: list[tuple[StagedTile, UOp]] = []
  total = 0
  tiles: list[StagedTile] = []
  for n, j in enumerate(k.staged):
    ld = cands[j]
    parts = k.stage_tile(ld, s.si)
    if not parts: raise OptError(f"SMEM: load {j} has no tile (it moves with no workgroup, lane or inner reduce axis)")
    size = prod(k.axes[i].size for i in parts)
    total += size * ld.dtype.itemsize * s.nbuf
    if total > k.shared_max:
      raise OptError(f"SMEM: the staged tiles need {total} bytes of shared memory, {k.target} allows {k.shared_max} a block")
    tiles.append(s.tile(n, ld, parts, size))
  # a tensor-core kernel's tiles (one dtype) are slices of one pool, which its epilogue reuses once the loop is done
  if k.tc is not None and s.dbl and len({t.ld.dtype for t in tiles}) == 1:
    off = 0
    for t in tiles: t.base, off = off, off + -(-t.size * s.nbuf // 8) * 8
    pool = UOp(Ops.DEFINE_LOCAL, tiles[0].ld.dtype.ptr(local=True), (), ("stage", off))
    for t in tiles: t.smem = pool
    lw.pool = (pool, off)
  if (maps := tma.plan(s, tiles)) is not None:   # one thread's TMA copies on mbarriers instead (codegen/tma.py)
    after = tma.pipeline(s, maps)
    return {t.ld: s.read(t, (tma.mod(s.stage_r, s.nbuf) * t.size).simplify(), after) for t in tiles}
  for t in tiles:
    f0, f, rbuf = s.fills(t)
    first, fills = [a + b for a, b in zip(first, f0)] if first else f0, fills + f
    reads.append((t, rbuf))
  after = s.complete(first, fills)
  return {t.ld: s.read(t, rbuf, after) for t, rbuf in reads}
