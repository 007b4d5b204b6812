"""Shared-memory staging (OptOps.SMEM), a step of lowering (codegen/lower.py): each staged load gets a shared tile
filled once per step of the outermost reduce loop (the stage loop), and its reads come from there.

Tile dims: the workgroup, lane and inner reduce parts of the axes the load moves with (Kernel.stage_tile). Layout in
shared memory: lane dims fastest (a thread reads runs of its own register tile as vectors); a tensor-core operand keeps
rows of its k tile contiguous instead. Fill: element e of the tile, in an order whose fastest dim is the one contiguous
in global memory, goes to thread e // V % threads (V neighbours each, one vector access), so neighbouring threads read
neighbouring addresses.

Without asynchronous copies: a barrier before the fill (the previous step's readers are done) and one after it.
With them (Renderer.has_async_copy): two buffers; step s reads buffer s % 2 while the copies for step s + 1 fill the
other one. Before the loop the copies of step 0 are issued and committed; in step s: barrier (everyone is done with
step s - 1, whose buffer is refilled now), the copies of step s + 1 (masked off past the last step), then commit,
wait for all but the newest group, barrier: step s's tile is complete."""
from __future__ import annotations
import itertools
from dataclasses import dataclass
from typing import Callable, TYPE_CHECKING
from baregrad.helpers import prod
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import UOp, Ops
from baregrad.ir.view import ShapeTracker
from baregrad.codegen.kernel import OptError, LANE_KINDS
from baregrad.codegen.tc_lower import ldmatrix
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

@dataclass
class StagedTile:
  """One staged load's shared tile: the axis parts it spans (`parts`), its elements (`size`), each part's stride in
  shared memory (`sstride`), the swizzle of its addresses (`swz`; `rowlen` the row length it keys on, 0: none), the
  fill order (`order`, the part contiguous in global memory last), the elements a thread copies at once (`v`, along
  `lane`), and the DEFINE_LOCAL holding it (`smem`, twice `size` where double-buffered)."""
  ld: UOp
  st: ShapeTracker
  parts: list[int]
  size: int
  sstride: dict[int, int]
  rowlen: int
  swz: Callable[[UOp], UOp]
  order: list[int]
  v: int
  smem: UOp
  lane: UOp

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
    its fragment coordinate contiguous in global memory stays contiguous."""
    axes = self.axes
    if ld not in self.lw.opvals: return sorted(parts, key=lambda i: (axes[i].kind in LANE_KINDS, i))
    _, m_, n_, k_, la, _ = self.k.tc  # type: ignore[misc]
    row = m_ if ld is la else n_
    fastc = row if strides[row] == 1 and strides[k_] != 1 else k_
    return sorted(parts, key=lambda i: (axes[i].tc is not None and axes[i].orig == fastc, i))

  def swizzle_rowlen(self, ld: UOp, lay: list[int]) -> int:
    """A tensor-core operand kept in rows of k (ldmatrix without .trans) of 16-bit values: the 16-byte chunks of a row
    are XOR-swizzled by the row, so the 8 rows one ldmatrix reads lie in different banks (unswizzled, rows 128 bytes
    apart collide); the fill and every read go through the same function. The row length, 0: no swizzle."""
    axes = self.axes
    if not (ld in self.lw.opvals and ld.dtype.itemsize == 2 and axes[lay[-1]].kind == "tc"): return 0
    kparts = list(itertools.takewhile(lambda i: axes[i].orig == self.k.tc[3], reversed(lay)))  # type: ignore[index]
    rowlen = prod(axes[i].size for i in kparts)
    return 0 if rowlen % 8 or rowlen < 16 else rowlen

  def fill_order(self, ld: UOp, parts: list[int], strides: tuple, size: int) -> tuple[list[int], int]:
    """The parts in fill order (by stride in global memory, the contiguous one fastest) and the elements a thread
    copies at once: up to 16 bytes (one cp.async or 128-bit access) where the fastest part is contiguous and the
    threads cover the tile in whole vectors."""
    axes = self.axes
    def gstride(i: int) -> float:
      a = axes[i]
      inner = prod(b.size for k, b in enumerate(axes) if b.orig == a.orig and k > i)
      s = strides[a.orig]
      return float("inf") if s is None else abs(s) * inner
    fo = sorted(parts, key=lambda i: (-gstride(i), i))
    fast, nthr = fo[-1], self.nthr
    for cand in (8, 4, 2):
      if cand * ld.dtype.itemsize <= 16 and gstride(fast) == 1 and axes[fast].size % cand == 0 \
         and size % (nthr * cand) == 0 and nthr % (axes[fast].size // cand) == 0: return fo, cand
    return fo, 1

  def tile(self, n: int, ld: UOp, parts: list[int], size: int) -> StagedTile:
    """Plan the tile of staged load number n: layout, swizzle, fill order, vector width, its shared buffer."""
    st: ShapeTracker = ld.src[1].arg
    strides = st.real_strides()
    lay = self.layout(ld, parts, strides)
    sstride, acc = {}, 1
    for i in reversed(lay): sstride[i], acc = acc, acc * self.axes[i].size
    rowlen = self.swizzle_rowlen(ld, lay)
    fo, v = self.fill_order(ld, parts, strides, size)
    smem = UOp(Ops.DEFINE_LOCAL, ld.dtype.ptr(local=True), (), (f"tile{n}", size * (2 if self.dbl else 1)))
    lane = UOp.range(v, 200_000 + n, "upcast", self.it) if v > 1 else UOp.const(self.it, 0)
    return StagedTile(ld, st, parts, size, sstride, rowlen, _swizzler(rowlen), fo, v, smem, lane)

  def fill(self, t: StagedTile, step: UOp, buf: UOp, ok: UOp | None, dep: tuple[UOp, ...]) -> list[UOp]:
    """The stores that copy step `step`'s tile from global memory into shared memory at offset `buf` (masked by `ok`),
    after `dep`: each thread a chunk of v elements per round, the rounds past the tile's end masked off."""
    it, nthr, v, lane = self.it, self.nthr, t.v, t.lane
    out = []
    for jj in range(-(-t.size // (nthr * v))):
      q = UOp.const(it, jj * nthr) + self.tid    # which chunk of v elements
      vals = {**self.lw.rng, self.si: step}
      rest = q
      for k, i in enumerate(reversed(t.order)):
        size = self.axes[i].size
        if k == 0 and v > 1:
          vals[i], rest = ((rest % (size // v)) * v + lane).simplify(), (rest // (size // v)).simplify()
        else: vals[i], rest = (rest % size).simplify() if k < len(t.order) - 1 else rest, (rest // size).simplify()
      in_tile = None if t.size % (nthr * v) == 0 else (q < t.size // v).simplify()
      gidx, gvalid = self.lw.access(t.st, in_tile if ok is None else ok if in_tile is None else (in_tile & ok), vals)
      val = UOp(Ops.LOAD, t.ld.dtype, (t.ld.src[0].index(gidx, gvalid),))
      sidx: UOp = buf
      for i in t.parts: sidx = sidx + vals[i] * t.sstride[i]
      if t.rowlen:   # swizzle the chunk start (the vector lanes stay inside one 16-byte chunk: v <= 8)
        sidx = t.swz(sidx.substitute({lane: UOp.const(it, 0)}).simplify()) + lane if v > 1 else t.swz(sidx.simplify())
      out.append(UOp(Ops.STORE, dtypes.void, (t.smem.index(sidx.simplify(), in_tile), val) + dep,
                     "async" if self.dbl else None))
    return out

  def fills(self, t: StagedTile) -> tuple[list[UOp], list[UOp], UOp]:
    """The tile's fills before the stage loop (double-buffered: step 0's) and in each step (step s + 1's into the other
    buffer, masked off past the last step; single-buffered: step s's), and the offset step s reads at."""
    zero = UOp.const(self.it, 0)
    if not self.dbl: return [], self.fill(t, self.stage_r, zero, None, (self.before,)), zero
    nxt = (self.stage_r + 1).simplify()
    first = self.fill(t, zero, zero, None, (self.pre,) if self.pre is not None else ())
    fills = self.fill(t, nxt, ((nxt % 2) * t.size).simplify(), (nxt < self.nstage).simplify(), (self.before,))
    return first, fills, ((self.stage_r % 2) * t.size).simplify()

  def complete(self, first: list[UOp], fills: list[UOp]) -> UOp:
    """The barrier after which step s's tiles are complete. Double-buffered: step 0's copies are committed before the
    loop, each step's barrier waits for that commit, and the barrier after the copies waits for all but the newest
    group."""
    if self.dbl:
      commit = UOp(Ops.BARRIER, dtypes.void, tuple(first), "commit")
      before = UOp(Ops.BARRIER, dtypes.void, (self.stage_r, commit))
      fills = [f.substitute({f.src[2]: before}) for f in fills]
    return UOp(Ops.BARRIER, dtypes.void, tuple(fills), "wait1" if self.dbl else None)

  def read(self, t: StagedTile, rbuf: UOp, after: UOp) -> UOp:
    """The load's value read from its tile at buffer offset rbuf after barrier `after`: a tensor-core operand's whole
    fragment in one ldmatrix where that fits, else element by element at the operand's (or the ranges') values."""
    ld, opvals = t.ld, self.lw.opvals
    rv = opvals.get(ld, self.lw.rng)
    if ld in opvals and (frag := ldmatrix(self.lw, t, rv, rbuf, after)) is not None: return frag
    ridx: UOp = rbuf
    for i in t.parts: ridx = ridx + rv[i] * t.sstride[i]
    return UOp(Ops.LOAD, ld.dtype, (t.smem.index(t.swz(ridx.simplify())), after))

def stage(lw: Lowering) -> dict[UOp, UOp]:
  """SMEM: each staged load of the kernel -> its read from a shared tile, filled once per step of the stage loop
  (see the module docstring for the layout, the fill and the barriers)."""
  k = lw.k
  s = _Stager(lw)
  cands = k.stage_candidates()
  first: list[UOp] = []
  fills: list[UOp] = []
  reads: list[tuple[StagedTile, UOp]] = []
  total = 0
  for n, j in enumerate(k.staged):
    ld = cands[j]
    parts = k.stage_tile(ld, s.si)
    if not parts: raise OptError(f"SMEM: load {j} has no tile (it moves with no workgroup, lane or inner reduce axis)")
    size = prod(k.axes[i].size for i in parts)
    total += size * ld.dtype.itemsize * (2 if s.dbl else 1)
    if total > k.shared_max:
      raise OptError(f"SMEM: the staged tiles need {total} bytes of shared memory, the device allows {k.shared_max}")
    t = s.tile(n, ld, parts, size)
    f0, f, rbuf = s.fills(t)
    first, fills = first + f0, fills + f
    reads.append((t, rbuf))
  after = s.complete(first, fills)
  return {t.ld: s.read(t, rbuf, after) for t, rbuf in reads}
