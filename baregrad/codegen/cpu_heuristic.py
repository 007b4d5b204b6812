"""The default opts for CPUs (renderers without workgroups): register tiles in vector lanes, one axis over the cores.

Shapes, by the strides of the kernel's loads along its axes:
  matmul, outer-product form: an output axis j along which a load is contiguous gets vector lanes (2 registers),
      another output axis i along which that load does not move gets scalar rows: per step of the reduce loop, two
      vector loads and a broadcast per row feed the FMAs of the tile. The tile fits the host's register file
      (Renderer.simd_lanes, vector_registers): 6 rows x 2 registers (12 accumulators) on AVX2's 16, 8 rows on 32.
  matmul, dot form: when only the reduce axis is contiguous (x @ W.T), it is unrolled into one register of lanes and
      two output axes take 4x2 (16 registers) or 4x4 (32) outputs, reduced across lanes once after the loop; an
      output axis of at most 12 (24) is taken whole, so the other operand is loaded (and computed) once.
  plain reductions unroll a contiguous reduce axis into several accumulators; a strided one (column sums) takes lanes
      along a contiguous output axis instead. Elementwise kernels take lanes along the axis the stores walk, and where a
      load walks another axis contiguously (a transpose), a square tile of one register's lanes along both.
Awkward sizes take a divisor of the lanes or are padded (PADTO) to the tile (_tile): the edges are masked, the inner loop
stays vectorized. The outermost output loop with enough iterations runs over the cores; kernels of fewer than
PARALLEL_MIN_WORK iterations stay on one core."""
from __future__ import annotations
import os
from baregrad import knobs
from baregrad.helpers import prod
from baregrad.ir.ops import Ops
from baregrad.codegen.kernel import Kernel, Opt, OptOps, OptError, VECTOR_LANES, MAX_LANES, nested_reduce_axes
from baregrad.codegen.renderer import Renderer

PARALLEL_MIN_WORK = 1 << 15   # iterations (outputs x reduce length) below which a kernel runs on one core

def _loop_index(k: Kernel, orig: int) -> int | None:
  """The optimizer's axis number of the innermost loop part of full-shape axis `orig`."""
  cands = [n for n, i in enumerate(k.loop_axes()) if k.axes[i].orig == orig]
  return cands[-1] if cands else None

def _try(k: Kernel, opt: Opt) -> bool:
  try: k.apply_opt(opt); return True
  except OptError: return False

def _tile(k: Kernel, orig: int, amt: int, op: OptOps, reg: int = 0) -> int:
  """Split full-shape axis `orig` into lanes of `amt` where it divides; else into a divisor at least half as wide
  (26 -> 13 for 16 lanes) unless padding wastes under an eighth, else padded up to a multiple when that wastes under a
  third (19 -> 24 for 8 lanes); returns the lanes taken (1: none)."""
  n = k.pads.get(orig) and next(a.size for a in k.axes if a.orig == orig) or k.full_shape[orig]   # padded already: its new size
  if n <= 1 or amt <= 1: return 1
  if n <= amt or (n < 2 * amt and (-n) % amt * 4 > n): amt = n   # the whole axis (a short one that padding would bloat)
  elif n % amt:
    waste = (-n) % amt
    # the largest divisor that is a multiple of 4 (or any divisor) up to amt: the tiling without padding
    div = max((d for d in range(amt, 1, -1) if n % d == 0 and d % 4 == 0), default=0) or max(d for d in range(amt, 0, -1) if n % d == 0)
    # padding masks every access of the padded tiles (a conv's 26-wide rows in 16 lanes: 2 of 2 tiles masked, 4x slower
    # than 13 lanes): a divisor at least half as wide wins unless the padding is a sliver
    # (reg: the lanes of one vector register; a divisor that is not a multiple of it leaves a part-filled register in
    # every step of the loop: 196 positions of a 14x14 image in 28 lanes of AVX-512 ran 10% slower than padded to 32)
    if waste * 8 > n and 2 * div >= amt and (not reg or div % reg == 0 or waste * 6 > n): amt = div
    elif waste * 3 > n or (m := _loop_index(k, orig)) is None or not _try(k, Opt(OptOps.PADTO, m, amt)):
      amt = div
      if amt == 1: return 1
  m = _loop_index(k, orig)
  return amt if m is not None and _try(k, Opt(op, m, amt)) else 1

def cpu_opts(k: Kernel, ren: Renderer) -> list[Opt]:
  """Apply and return the opts for a CPU kernel (see the module docstring)."""
  acc = [(u, u.src[1].arg.real_strides(), u.src[1].arg.shape) for u in k.ast.toposort() if u.op in (Ops.LOAD, Ops.STORE)]
  loads = [(st, sh) for u, st, sh in acc if u.op is Ops.LOAD]
  stores = [(st, sh) for u, st, sh in acc if u.op is Ops.STORE]
  vec = VECTOR_LANES if ren.vectorized else 4   # output lanes; scalar code: lanes become separate variables
  # reduce lanes decide the order of a reduction's additions: the same for every renderer, so they agree bit for bit
  rvec = VECTOR_LANES
  outs = [a.orig for a in k.axes if a.kind == "loop"]
  reds = [a.orig for a in k.axes if a.kind == "reduce"]
  def moves(x: tuple, o: int) -> bool: return x[1][o] != 1 and x[0][o] != 0
  def contig(x: tuple, o: int) -> bool: return x[1][o] != 1 and x[0][o] in (1, -1)
  par_first: int | None = None   # the output axis whose tiles run over the cores
  if k.acc_axes: return _accumulating(k, ren, stores)
  if (inner := nested_reduce_axes(k)): return _attention(k, ren, stores, inner)
  if reds and outs:
    # a load contiguous along an output axis that also moves along a reduce axis: a matmul operand
    vj = [o for o in outs if any(contig(x, o) and any(moves(x, r) for r in reds) for x in loads)]
    if vj:
      # outer-product form: j with a contiguous load (prefer where the store is contiguous too), i reusing that load
      j = max(vj, key=lambda o: (any(contig(x, o) for x in stores), o))
      b = [x for x in loads if contig(x, j) and any(moves(x, r) for r in reds)]
      iis = [o for o in outs if o != j and all(not moves(x, o) for x in b) and any(moves(x, o) for x in loads)]
      nj = k.full_shape[j]
      # the tile: 2 registers of lanes along j times `rows` rows of i, fitting the register file with the two loads and
      # a broadcast beside it (AVX2, 16 registers: 6x16 floats in 12; AVX-512/NEON, 32 registers: 8 rows)
      lanes = ren.simd_lanes if ren.vectorized else vec
      rows = (6 if ren.vector_registers <= 16 else 8) if ren.vectorized else 4
      if iis and ren.vectorized and nj < 2 * lanes and nj & (nj - 1) and (m := _loop_index(k, j)) is not None:
        # a short row under other rows of the tile: padded to a power of two, so registers hold whole rows (11 lanes
        # per row would make every register straddle two rows: shuffles around every FMA; mnist_cnn's conv2, 11-wide
        # rows: 16 padded lanes x 4 rows 2.3x faster on one core than 11 lanes x 8 rows)
        if _try(k, Opt(OptOps.PADTO, m, 1 << nj.bit_length())): nj = 1 << nj.bit_length()
      # no row to reuse the vector across (a vector-matrix product): more lanes instead, for independent accumulators
      # and longer runs of each row of the matrix per step (8 registers: 1x1024x4096 0.54 -> 0.37 ms, 4 registers'
      # runs of 128 bytes at a 16 KiB stride left the prefetcher behind)
      amt = 2 * lanes if nj >= 2 * lanes else lanes
      if not iis and nj >= 8 * lanes: amt = 8 * lanes
      # no rows to share a padded tile's masked loads (a depthwise convolution's 28-wide rows: 16 lanes padded to 32
      # read every input lane by lane, 4 GFLOPS): a row of up to two tiles is taken whole, its tail a short register
      if not iis and amt < nj < 2 * amt and nj % amt: amt = nj
      # (whole registers only where rows share the padded loads: a depthwise convolution's 112-wide rows padded to 128
      # read every input lane by lane, 10x slower than 4 x 28)
      jl = _tile(k, j, amt, OptOps.UPCAST, lanes if ren.vectorized and iis else 0)
      if iis:
        i, ni = iis[-1], k.full_shape[iis[-1]]
        # padded rows cost masked loads: of an operand read along them (g.T @ x) one per step of the reduce loop, and
        # of every value fused after the reduction (a scalar load per lane). 4 rows that divide the axis beat 6 padded
        # ones unless a long reduction (>= 128) of a row-strided operand amortizes the edge
        nred = prod(k.full_shape[r] for r in reds)
        if ni % rows and ni % 4 == 0 and (nred < 128 or any(contig(x, i) for x in loads)): rows = 4
        # a row of awkward width (13 lanes of a conv's 26 outputs: its registers partly filled) leaves the loads and
        # index arithmetic of each step to fewer FMAs; more rows share them where the reduction is long enough to
        # matter (measured when mnist_cnn's conv2 took 11-lane rows, 72 terms: 8 rows 1.4x faster than 4; its conv1,
        # 9 terms, no better)
        if ren.vectorized and jl % lanes and nred >= 64 and ni % 8 == 0: rows = 8
        # fewer rows where the full tile is over the unrolled body's budget (49 lanes whole, a 7x7 image's 1x1
        # convolution: 4 rows 89 GFLOPS where one row of 49 ran at 67)
        while rows > 1 and _tile(k, i, rows, OptOps.UPCAST) == 1: rows //= 2
      # the tiles of j outermost when there are enough (one panel of the contiguous operand stays in cache per core);
      # where j is one tile (a packed operand's 16 lanes, codegen/pack), the panels are the operand's other output axis
      panels = [o for o in outs if o not in (j, *iis) and any(moves(x, o) for x in b)]
      par_first = panels[0] if jl == nj and panels else j
    elif ren.vectorized and len(loads) == 1 and (sw := _strided_window(k, loads, stores, outs, reds)) is not None:
      # a pool sliding with a stride of 2-4: lanes along the output axis the store walks, the window's taps unrolled.
      # Together the lanes' loads cover one contiguous block (taps 0..2 of 8 outputs at stride 2: elements 0..16), read
      # as whole vectors and shuffled into the lanes (codegen/lanes); with lanes along the taps instead, every output
      # took its own short loads and a scalar reduction (ResNet's 3x3 stride-2 max pool 520 -> 121 us). (Not for a
      # strided depthwise convolution, whose weights take a broadcast per tap: MobileNetV2's 555 -> 767 us)
      o, r = sw
      _tile(k, r, k.full_shape[r], OptOps.UNROLL)
      _tile(k, o, ren.simd_lanes, OptOps.UPCAST)
    elif any(contig(x, r) for x in loads for r in reds) or not any(moves(x, r) for x in loads for r in reds):
      # (a reduction that reads nothing along its axis, sum(arange(n)), takes lanes along that axis as a contiguous one)
      r = max([r for r in reds if any(contig(x, r) for x in loads)] or reds, key=lambda r: k.full_shape[r])
      reuse = [o for o in outs if any(not moves(x, o) for x in loads) and any(moves(x, o) for x in loads)]
      if reuse:
        # dot form: lanes along the reduce axis, a small tile of outputs (one accumulator register each: 4x4 where there
        # are 32 registers, 4x2 in one register of lanes where there are 16; 4x4 of 16 lanes spilled there, at half speed).
        # The reduce lanes fix the order of the additions: the C renderer takes the same as LLVM on this host
        small = ren.vector_registers <= 16
        _tile(k, r, ren.simd_lanes, OptOps.UNROLL)   # one register of lanes per accumulator (NEON: 4, not 16)
        # an output axis short enough to be the whole tile (h @ W.T with 10 classes) is taken whole: the other operand,
        # often computed in the kernel (relu(h + b)), is then loaded and computed once instead of once per tile
        whole = [o for o in reuse if 1 < k.full_shape[o] <= (12 if small else 24)] if ren.vectorized else []
        if whole: _tile(k, whole[-1], k.full_shape[whole[-1]], OptOps.UPCAST)
        else:
          for o, amt in zip(reuse[-2:], (4, 2 if small else 4)) if len(reuse) >= 2 else ((reuse[0], 8),):
            _tile(k, o, amt // (1 if ren.vectorized else 2), OptOps.UPCAST)
      else:
        # a reduction per output (row sums, softmax): several accumulators along the contiguous reduce axis
        n = k.full_shape[r]
        _tile(k, r, 4 * rvec if n >= 8 * rvec else 2 * rvec if n >= 2 * rvec else rvec, OptOps.UNROLL)
    else:
      # strided reductions (column sums): lanes along an output axis the stores walk
      cont = [o for o in outs if any(contig(x, o) for x in stores)] or outs[-1:]
      _tile(k, cont[-1], vec, OptOps.UPCAST)
  elif reds:
    r = max((r for r in reds if any(contig(x, r) for x in loads)), default=reds[-1], key=lambda r: k.full_shape[r])
    n = k.full_shape[r]
    _tile(k, r, 4 * rvec if n >= 8 * rvec else 2 * rvec if n >= 2 * rvec else rvec, OptOps.UNROLL)
  elif outs:
    # elementwise: lanes along the innermost axis the stores walk contiguously
    # one register per value (LLVM unrolls the loop where the body is short; threefry's long bodies stay compact)
    cont = [o for o in outs if any(contig(x, o) for x in stores)] or outs[-1:]
    s = cont[-1]
    # a transpose: a load contiguous along another output axis t, strided along s. Lanes along s alone read each of
    # them from another cache line and page (x.T.contiguous() of 2048x1024: 16 ms); a square tile of one register's
    # lanes along both reads whole vectors along t and writes them along s (0.8 ms; 16x16 tiles spill: 3.6 ms)
    ts = [o for o in outs if o != s and any(contig(x, o) and moves(x, s) and not contig(x, s) for x in loads)]
    if ts and ren.vectorized:
      lanes = ren.simd_lanes
      _tile(k, s, lanes, OptOps.UPCAST)
      _tile(k, ts[-1], lanes, OptOps.UPCAST)
    else: _tile(k, s, vec, OptOps.UPCAST)
  # a kernel of a few thousand operations takes a µs or two on one core; handing part of it to a pool thread costs a
  # wake-up and GIL handoffs (tens to hundreds of µs on a busy machine), so small kernels stay on one core
  if ren.has_threads and prod(k.full_shape) >= PARALLEL_MIN_WORK: _parallel(k, par_first)
  return list(k.applied)

def _strided_window(k: Kernel, loads: list, stores: list, outs: list[int], reds: list[int]) -> tuple[int, int] | None:
  """(output axis, reduce axis) of a window that slides with a stride of 2-4 along an output axis the stores walk
  contiguously while a reduce axis of at least that many taps (and at most 8) walks the same load contiguously, so
  the taps of consecutive outputs meet; None otherwise."""
  for o in reversed(outs):
    if not any(x[1][o] != 1 and x[0][o] == 1 for x in stores): continue
    for st, sh in loads:
      if sh[o] == 1 or st[o] not in (2, 3, 4): continue
      for r in reds:
        if sh[r] != 1 and st[r] == 1 and st[o] <= k.full_shape[r] <= 8: return o, r
  return None

def _attention(k: Kernel, ren: Renderer, stores: list, inner: set[int]) -> list[Opt]:
  """Attention in one kernel (engine/attention_fusion.py): per query row, each pass over the keys computes a dot product
  per key (the inner reduction, over the head dim) and, in the last pass, adds its weight times the key's value row to
  the output row. The output row (the axis the store walks) takes lanes whole where it fits (up to 128: each dot product
  is then computed once per pass, not once per tile of it), the dot products one register of lanes along the head dim
  (reduced across lanes per key), and the outermost output loop the cores."""
  cont = [a.orig for a in k.axes if a.kind == "loop" and any(x[1][a.orig] != 1 and x[0][a.orig] == 1 for x in stores)]
  if cont:
    n = k.full_shape[cont[-1]]
    _tile(k, cont[-1], n if n <= 128 else (ren.simd_lanes if ren.vectorized else 4) * 4, OptOps.UPCAST)
  # (as many independent accumulators as the lanes' budget leaves: a dot product of one accumulator is a chain of
  # dependent FMAs, 4 cycles each)
  for r in sorted(inner): _tile(k, r, max(1, min(ren.simd_lanes if ren.vectorized else 4, MAX_LANES // max(k.lanes, 1))), OptOps.UNROLL)
  if ren.has_threads and prod(k.full_shape) >= PARALLEL_MIN_WORK: _parallel(k, None)
  return list(k.applied)

def _accumulating(k: Kernel, ren: Renderer, stores: list) -> list[Opt]:
  """A kernel adding to its stored values pass by pass (codegen/rowstream): vector lanes along the axis the store
  walks contiguously, the outermost other loop over the cores. The (short) reduction stays a loop of vector FMAs into one
  accumulator (unrolled into lanes it would interleave the rows' lanes), and the passes a serial loop inside the cores'
  loop (Kernel.acc_axes), so the chunk a core adds to stays in its cache."""
  cont = [a.orig for a in k.axes if a.kind == "loop" and a.orig not in k.acc_axes and any(x[1][a.orig] != 1 and x[0][a.orig] == 1 for x in stores)]
  if cont: _tile(k, cont[-1], ren.simd_lanes if ren.vectorized else 4, OptOps.UPCAST)
  # (the outermost loop that takes the cores: Kernel.apply_opt refuses the accumulating axes)
  if ren.has_threads and prod(k.full_shape) >= PARALLEL_MIN_WORK: _parallel(k, None)
  return list(k.applied)

def _parallel(k: Kernel, first: int | None) -> None:
  """One output loop over the cores: `first`'s tiles when there are several per core, else the outermost loop with
  at least two iterations."""
  loops = k.loop_axes()
  cands = [n for n, i in enumerate(loops) if k.axes[i].kind == "loop" and k.axes[i].size >= 2]
  # the share of the threads' time spent working when a loop's tiles are dealt out whole: 7 tiles over 2 threads
  # leave one idle for a seventh of the launch (a stride-2 convolution's 7 position tiles: 4 on one core, 3 on the
  # other), where its 32 tiles of output channels split evenly
  t = _threads()
  def busy(n: int) -> float: return (sz := k.axes[loops[n]].size) / (-(-sz // t) * t)
  best = max((busy(n) for n in cands), default=1.0)
  if first is not None:
    pref = [n for n in cands if k.axes[loops[n]].orig == first and k.axes[loops[n]].size >= 4 and busy(n) >= best - 0.05]
    if pref and _try(k, Opt(OptOps.PARALLEL, pref[0])): return
  for n in sorted(cands, key=lambda n: busy(n) < best - 0.05):
    if _try(k, Opt(OptOps.PARALLEL, n)): return

def _threads() -> int:
  """The threads a CPU kernel is split over (CPU_THREADS, else one per core: as drivers/cpu.py splits them)."""
  return knobs.read("CPU_THREADS") or os.cpu_count() or 1
