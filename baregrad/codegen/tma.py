"""TMA loads of staged tensor-core tiles (sm_90a wgmma kernels), a step of staging (codegen/stage.py): instead of every
thread copying 16-byte chunks with cp.async, one thread copies each tile of a step with one cp.async.bulk.tensor
through a tensor map, and the pipeline's steps complete on mbarriers instead of cp.async groups.

Where it applies (`plan`; anything else keeps the cp.async pipeline): a wgmma kernel (TensorCore.desc) with the
pipelined pool of tiles, no output loop around the stage loop, and every staged tile a dense [R][64] array of a 16-bit
type (R <= 256 rows of 64 values, 128 bytes, each R and the 64 one contiguous run of coordinates of one full-shape
axis) whose load is one unmasked 2-d strided view: the 64 along the axis contiguous in global memory, the rows a
positive pitch that is a multiple of 16 bytes. That is exactly the box a 2-d tensor map with box (64, R) and the
128-byte swizzle writes (PTX ISA 9.7.9.25.5.2 cp.async.bulk.tensor; the swizzle is the one wgmma reads, codegen/tc_lower.py
wgmma_desc). Elements past the tensor's ends (padded edge tiles, k past the reduction) are filled with zeros by the copy.

The maps are built on the device, per block, in the launch's tensor-map scratch (the kernel's `tmap_scratch`
parameter, drivers/nv/scratch.py): at the kernel's start one thread writes each map's fields with tensormap.replace
(9.7.9.28), releases them to the tensormap proxy and acquires them there (fence.proxy.tensormap, 9.7.12.4), and
initializes one "full" mbarrier per pipeline buffer (arrival count 1: the issuing thread's arrive.expect_tx of the
step's bytes, which the copies then complete).

With two consumer warpgroups (a 128-row block of wgmma m64 tiles; NV_WARPSPEC, default on) a producer warpgroup is
added to the block (`producer_threads`): it gives registers up (setmaxnreg.dec), and its first thread loops over every
step t, waits until the consumers are done with the step t - S its buffer held (an "empty" mbarrier per buffer, one
arrival per consumer warp, phase t // S - 1), then issues step t; the consumers take the registers (setmaxnreg.inc),
and per step wait for their buffer's full phase (s // S) % 2, run the step's wgmmas, wait for them and arrive on its
empty mbarrier; no block-wide barrier per step. The producer's step expressions are built here on a placeholder counter
(`ws` in the setup's arg) for the renderer to compute in its own loop (codegen/renderer/ptx_tma.py).

Otherwise (NV_WARPSPEC=0, or other blocks), pipeline of S buffers: before the loop, steps 0 .. S-2 are issued by the
block's first thread; in step s every thread waits for phase parity (s // S) % 2 of mbarrier s % S (try_wait.parity,
9.7.13.15.16), a barrier (everyone is done with step s - 1, whose wgmmas the renderer waits for before a barrier), then
the thread issues step s + S - 1 into the buffer step s - 1 read (none past the last step)."""
from __future__ import annotations
from dataclasses import dataclass
from typing import TYPE_CHECKING
from baregrad import knobs
from baregrad.helpers import prod
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import UOp, Ops
if TYPE_CHECKING:
  from baregrad.codegen.stage import StagedTile, _Stager

# PTX's tensor-map elemtype codes (PTX ISA 9.7.9.28 tensormap.replace, the .elemtype field's table)
ELEMTYPE = {dtypes.float16: 6, dtypes.bfloat16: 10}
SWIZZLE_128B = 3   # tensormap.replace swizzle_mode: 0 none, 1 32B, 2 64B, 3 128B
MAP_BYTES = 128    # one tensor map, a .b1024 object


@dataclass(frozen=True)
class TmaMap:
  """A staged tile's 2-d tensor map: the global tensor (the axis contiguous in memory `fast` and the rows' axis `slow`
  of the kernel's full shape, their sizes, the rows' pitch in bytes), the box (64 x rows), and the element index the
  tensor starts at for this block (`base`: the view's offset and any batch position). A tile of several 64-wide chunks
  of its contiguous axis (an operand wgmma reads MN-major, several instructions along it: stage.py's layout) takes one
  box a chunk: `boxes` holds each one's (x offset, offset in the tile in elements)."""
  tile: StagedTile
  fast: int
  slow: int
  dims: tuple[int, int]
  pitch: int
  box: tuple[int, int]
  base: UOp
  boxes: tuple[tuple[int, int], ...] = ((0, 0),)

  def spec(self) -> tuple[int, int, int, int, int, int, int]:
    """(elemtype, element bytes, global dim 0, global dim 1, pitch bytes, box dim 0, box dim 1): what the renderer's
    setup writes with tensormap.replace."""
    dt = self.tile.ld.dtype
    return (ELEMTYPE[dt], dt.itemsize, self.dims[0], self.dims[1], self.pitch, self.box[0], self.box[1])


def _cstride(axes: list, i: int) -> int:
  """The step in its full-shape axis's coordinate of one unit of axis part i (the parts after it, inner, multiply)."""
  return prod(b.size for k, b in enumerate(axes) if b.orig == axes[i].orig and k > i)


def _run(axes: list, parts: list[int], sstride: dict[int, int], scale: int) -> int | None:
  """The extent of the parts (all of one full-shape axis) when they are one contiguous run of its coordinates stored
  at `scale` elements per coordinate step (shared offset = scale * coordinate), else None."""
  ext = 1
  for i in sorted(parts, key=lambda i: _cstride(axes, i)):
    if _cstride(axes, i) != ext or sstride[i] != scale * ext: return None
    ext *= axes[i].size
  return ext


def _plan_tile(s: _Stager, t: StagedTile, vals0: dict[int, UOp]) -> TmaMap | None:
  axes, lw = s.axes, s.lw
  if t.ld.dtype not in ELEMTYPE or t.rowlen != 64: return None
  st = t.st
  if len(st.views) != 1 or st.views[0].mask is not None: return None
  strides = st.real_strides()
  origs = sorted({axes[i].orig for i in t.parts})
  if len(origs) != 2: return None
  fast = next((o for o in origs if strides[o] == 1), None)
  if fast is None: return None
  slow = next(o for o in origs if o != fast)
  pitch = strides[slow]
  esz = t.ld.dtype.itemsize
  if not isinstance(pitch, int) or pitch <= 0 or pitch * esz % 16 or pitch * esz >= 1 << 40: return None
  if any(not isinstance(x, int) or (x and x * esz % 16) for o, x in enumerate(strides) if o not in (fast, slow)): return None
  if not isinstance(st.views[0].offset, int) or st.views[0].offset * esz % 16: return None
  fparts = sorted((i for i in t.parts if axes[i].orig == fast), key=lambda i: _cstride(axes, i))
  cut = next((j for j in range(len(fparts) + 1) if prod(axes[i].size for i in fparts[:j]) >= 64), len(fparts))
  inner = _run(axes, fparts[:cut], t.sstride, 1)
  rows = _run(axes, [i for i in t.parts if axes[i].orig == slow], t.sstride, 64)
  if inner != 64 or rows is None or not 1 <= rows <= 256: return None
  # the chunks: the fast axis's other parts, its coordinates on from 64, each chunk a [rows][64] block 1024-aligned
  boxes, ext = [(0, 0)], 64
  for i in fparts[cut:]:
    if _cstride(axes, i) != ext or t.sstride[i] * esz % 1024: return None
    boxes = [(x + v * ext, o + v * t.sstride[i]) for v in range(axes[i].size) for x, o in boxes]
    ext *= axes[i].size
  if len(boxes) * rows * 64 != t.size or len({o for _, o in boxes}) != len(boxes): return None
  dims = (st.shape[fast], st.shape[slow])
  if not all(isinstance(d, int) and 0 < d < 1 << 32 for d in dims): return None
  # every buffer of the tile starts on a 1024-byte boundary of the pool (the 128-byte swizzle's pattern)
  if t.base * esz % 1024 or t.size * esz % 1024: return None
  v = {**vals0, **{i: UOp.const(lw.it, 0) for i, a in enumerate(axes) if a.orig in (fast, slow)}}
  base, _ = lw.access(st, None, v)
  if any(x.op is Ops.RANGE for x in base.toposort()): return None   # (the same map for the whole block)
  return TmaMap(t, fast, slow, dims, pitch * esz, (64, rows), base, tuple(sorted(boxes, key=lambda b: b[1])))  # type: ignore[arg-type]


def producer_threads(s: _Stager) -> int:
  """128 (one producer warpgroup added to the block) where the pipeline is warp-specialized (NV_WARPSPEC, default on):
  the block's threads are two consumer warpgroups along one dimension (the register split of 168 a thread into 40 for
  the producer and 232 for each consumer: ptx_tma.register_split); else 0."""
  n, ls = s.nthr, s.k.local_size()
  return 128 if knobs.read("NV_WARPSPEC") and ls[1:] == (1, 1) and ls[0] == n == 256 else 0


def plan(s: _Stager, tiles: list[StagedTile]) -> list[TmaMap] | None:
  """The tensor maps of the kernel's staged tiles, where TMA can fill every one of them (see the module docstring);
  None: keep the cp.async pipeline."""
  k = s.k
  if k.tc is None or not k.tc[0].desc or not s.dbl or s.pre is not None or s.lw.pool is None: return None
  if not k.has_tma or not knobs.read("NV_TMA"): return None
  vals0 = {**s.lw.rng, s.si: UOp.const(s.it, 0)}
  maps = [_plan_tile(s, t, vals0) for t in tiles]
  return None if any(m is None for m in maps) else maps  # type: ignore[return-value]


def _coords(s: _Stager, m: TmaMap, step: UOp) -> tuple[UOp, UOp]:
  """The box's origin (x along the contiguous axis, y the row) at stage step `step`: the tile's own parts at 0."""
  v = {**s.lw.rng, s.si: step, **{i: UOp.const(s.it, 0) for i in m.tile.parts}}
  idx = s.lw.index_of(v)
  return idx[m.fast], idx[m.slow]


def mod(x: UOp, n: int) -> UOp:
  """x % n for x >= 0: an AND where n is a power of two (the renderer's % by a register would be a division)."""
  return (x & (n - 1) if n & (n - 1) == 0 else x % n).simplify()


def div(x: UOp, n: int) -> UOp:
  """x // n for x >= 0: a shift where n is a power of two."""
  return (x >> (n.bit_length() - 1) if n & (n - 1) == 0 else x // n).simplify()


def pipeline(s: _Stager, maps: list[TmaMap]) -> UOp:
  """The TMA pipeline's setup, prologue and per-step wait and refill (see the module docstring) as BARRIERs the PTX
  renderer emits: ("tma_setup", buffers, specs), ("tma_issue", bytes), ("tma_wait",). Returns the one step s's reads
  come after."""
  it, nb, nstage = s.it, s.nbuf, s.nstage
  pool = maps[0].tile.smem
  prod_threads = producer_threads(s)
  # mbarriers: "full" 0 .. nb-1 (a buffer's copies landed), and with a producer warpgroup "empty" nb .. 2nb-1 (its
  # consumers are done reading it)
  bars = UOp(Ops.DEFINE_LOCAL, dtypes.uint64.ptr(local=True), (), ("tmabar", 2 * nb if prod_threads else nb))
  srcs: tuple[UOp, ...] = (bars,)
  for m in maps: srcs += (m.tile.ld.src[0], m.base)
  nbytes = sum(m.tile.size * m.tile.ld.dtype.itemsize for m in maps)
  copies = tuple(j for j, m in enumerate(maps) for _ in m.boxes)   # the map of each box copied a step
  ws = None
  if prod_threads:   # the producer's own loop over every step t: its slot and boxes as expressions of a counter
    pv = UOp.range(nstage, 400_000, "loop", it)
    per: tuple[UOp, ...] = ()
    for m in maps:
      x, y = _coords(s, m, pv)
      for bx, bo in m.boxes: per += ((mod(pv, nb) * m.tile.size + m.tile.base + bo).simplify(), (x + bx).simplify(), y)
    ws = (s.nthr, pv, mod(pv, nb), per, nstage, nb, copies)
    srcs += (pool,)
  dep = UOp(Ops.BARRIER, dtypes.void, srcs, ("tma_setup", nb, tuple(m.spec() for m in maps), ws))

  def issue(step: UOp, ok: UOp, dep: UOp) -> UOp:
    slot = mod(step, nb)
    src: tuple[UOp, ...] = (pool, bars, slot, ok)
    for m in maps:
      x, y = _coords(s, m, step)
      for bx, bo in m.boxes: src += ((slot * m.tile.size + m.tile.base + bo).simplify(), (x + bx).simplify(), y)
    return UOp(Ops.BARRIER, dtypes.void, src + (dep,), ("tma_issue", nbytes, copies))

  r = s.stage_r
  if ws:   # the producer warpgroup issues every step (ptx_tma._producer): the consumers only wait
    return UOp(Ops.BARRIER, dtypes.void, (bars, mod(r, nb), mod(div(r, nb), 2), r, dep), ("tma_wait",))
  true = UOp.const(dtypes.bool, True)
  for p in range(min(nb - 1, nstage)): dep = issue(UOp.const(it, p), true, dep)
  wait = UOp(Ops.BARRIER, dtypes.void, (bars, mod(r, nb), mod(div(r, nb), 2), r, dep), ("tma_wait",))
  nxt = (r + (nb - 1)).simplify()
  return issue(nxt, (nxt < nstage).simplify(), wait)
