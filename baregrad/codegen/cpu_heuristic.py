"""The default opts for CPUs (renderers without workgroups): register tiles in vector lanes, one axis over the cores.

Shapes, by the strides of the kernel's loads along its axes:
  matmul, outer-product form: an output axis j along which a load is contiguous gets vector lanes (2 registers),
      another output axis i along which that load does not move gets scalar rows (8): per step of the reduce loop, two
      vector loads and eight broadcasts feed 16 FMAs into a tile of 16 registers.
  matmul, dot form: when only the reduce axis is contiguous (x @ W.T), it is unrolled into vector lanes and two output
      axes take 4x4 outputs (16 accumulator registers), reduced across lanes once after the loop.
  plain reductions unroll a contiguous reduce axis into several accumulators; a strided one (column sums) takes lanes
      along a contiguous output axis instead. Elementwise kernels take lanes along the axis the stores walk.
Awkward sizes are padded (PADTO) to the tile: the edges are masked, the inner loop stays vectorized. The outermost
output loop with enough iterations runs over the cores."""
from __future__ import annotations
from baregrad.ir.ops import Ops
from baregrad.codegen.kernel import Kernel, Opt, OptOps, OptError, VECTOR_LANES
from baregrad.codegen.renderer import Renderer

def _loop_index(k: Kernel, orig: int) -> int | None:
  """The optimizer's axis number of the innermost loop part of full-shape axis `orig`."""
  cands = [n for n, i in enumerate(k.loop_axes()) if k.axes[i].orig == orig]
  return cands[-1] if cands else None

def _try(k: Kernel, opt: Opt) -> bool:
  try: k.apply_opt(opt); return True
  except OptError: return False

def _tile(k: Kernel, orig: int, amt: int, op: OptOps) -> int:
  """Split full-shape axis `orig` into lanes of `amt` (padding it up to a multiple where it does not divide, when the
  padding wastes under a quarter); returns the lanes taken (1: none)."""
  n = k.pads.get(orig) and next(a.size for a in k.axes if a.orig == orig) or k.full_shape[orig]   # padded already: its new size
  if n <= 1 or amt <= 1: return 1
  if n <= amt or (n < 2 * amt and (-n) % amt * 4 > n): amt = n   # the whole axis (a short one that padding would bloat)
  elif n % amt:
    waste = (-n) % amt
    if waste * 4 > n or (m := _loop_index(k, orig)) is None or not _try(k, Opt(OptOps.PADTO, m, amt)):
      # no padding: the largest divisor that is a multiple of 4 (or any divisor) up to amt
      amt = max((d for d in range(amt, 1, -1) if n % d == 0 and d % 4 == 0), default=0) or max(d for d in range(amt, 0, -1) if n % d == 0)
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
  if reds and outs:
    # a load contiguous along an output axis that also moves along a reduce axis: a matmul operand
    vj = [o for o in outs if any(contig(x, o) and any(moves(x, r) for r in reds) for x in loads)]
    if vj:
      # outer-product form: j with a contiguous load (prefer where the store is contiguous too), i reusing that load
      j = max(vj, key=lambda o: (any(contig(x, o) for x in stores), o))
      b = [x for x in loads if contig(x, j) and any(moves(x, r) for r in reds)]
      iis = [o for o in outs if o != j and all(not moves(x, o) for x in b) and any(moves(x, o) for x in loads)]
      nj = k.full_shape[j]
      # no row to reuse the vector across (a vector-matrix product): more lanes instead, for independent accumulators
      amt = 2 * vec if nj >= 2 * vec else vec
      if not iis and nj >= 8 * vec: amt = 4 * vec
      if iis and ren.vectorized and nj < vec and nj & (nj - 1) and (m := _loop_index(k, j)) is not None:
        # a short row under other rows of the tile: padded to a power of two, so registers hold whole rows (11 lanes
        # per row would make every register straddle two rows: shuffles around every FMA)
        _try(k, Opt(OptOps.PADTO, m, 1 << nj.bit_length()))
      _tile(k, j, amt, OptOps.UPCAST)
      if iis: _tile(k, iis[-1], 8 if ren.vectorized else 4, OptOps.UPCAST)
      # the tiles of j outermost when there are enough (one panel of the contiguous operand stays in cache per core)
      par_first = j
    elif any(contig(x, r) for x in loads for r in reds):
      r = max((r for r in reds if any(contig(x, r) for x in loads)), key=lambda r: k.full_shape[r])
      reuse = [o for o in outs if any(not moves(x, o) for x in loads) and any(moves(x, o) for x in loads)]
      if reuse:
        # dot form: lanes along the reduce axis, a small tile of outputs
        _tile(k, r, rvec, OptOps.UNROLL)
        for o in reuse[-2:] if len(reuse) >= 2 else reuse:
          _tile(k, o, (4 if len(reuse) >= 2 else 8) // (1 if ren.vectorized else 2), OptOps.UPCAST)
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
    _tile(k, cont[-1], vec, OptOps.UPCAST)
  if ren.has_threads: _parallel(k, par_first)
  return list(k.applied)

def _parallel(k: Kernel, first: int | None) -> None:
  """One output loop over the cores: `first`'s tiles when there are several per core, else the outermost loop with
  at least two iterations."""
  loops = k.loop_axes()
  cands = [n for n, i in enumerate(loops) if k.axes[i].kind == "loop" and k.axes[i].size >= 2]
  if first is not None:
    pref = [n for n in cands if k.axes[loops[n]].orig == first and k.axes[loops[n]].size >= 4]
    if pref and _try(k, Opt(OptOps.PARALLEL, pref[0])): return
  for n in cands:
    if _try(k, Opt(OptOps.PARALLEL, n)): return
