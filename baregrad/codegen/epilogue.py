"""Tensor-core epilogue through shared memory, a step of lowering (codegen/lower.py): a tensor-core kernel's output
leaves the accumulator fragments in pairs (each lane holds 2 neighbouring columns of a row: 4-byte stores of a 16-bit
output, a quarter of a 32-byte sector per row and instruction). Where its operand tiles share a pool
(codegen/stage.py) the workgroup's output tile is written into that pool once the reduction loop is done, and then
every thread stores 16 contiguous bytes at a time (st.global.v4), neighbouring threads neighbouring chunks.

Order: barrier (every warp has read its last operands from the pool; the pipeline's copies past the last step were
never issued), each thread writes its fragments' values (whatever the kernel computes from the sums: casts, fused
elementwise ops) into the tile, barrier, each thread reads chunks of up to 8 values and stores them where the output
view puts them (masked past a padded edge). The tile keeps the output's contiguous axis as rows, their 16-byte
chunks XOR-swizzled by row like the operand tiles, so the 8 rows a fragment store touches lie in different banks."""
from __future__ import annotations
from typing import TYPE_CHECKING
from baregrad.helpers import prod
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import UOp, Ops
from baregrad.codegen.kernel import THREAD_KINDS
from baregrad.codegen.stage import swizzle_rc
if TYPE_CHECKING: from baregrad.codegen.lower import Lowering

def stage_store(lw: Lowering, u: UOp, src: tuple[UOp, ...]) -> UOp | None:
  """The AST STORE u (its sources lowered: `src`) through shared memory, as a NOOP of the stores it becomes; None where
  it does not apply (no pool, more than one store, an output not contiguous along a fragment axis, another dtype than
  the pool's, a tile larger than the pool, an output loop around the tile)."""
  k, axes, it = lw.k, lw.axes, lw.it
  if lw.pool is None or k.tc is None or len(k.ast.src) != 1: return None
  pool, cap = lw.pool
  st = u.src[1].arg
  strides = st.real_strides()
  _, m, n, _, _, _ = k.tc
  fast = n if strides[n] == 1 else m if strides[m] == 1 else None
  if fast is None or src[2].dtype != pool.dtype.base or src[2].dtype.itemsize != 2: return None  # type: ignore[attr-defined]
  if any(a.kind in ("loop", "unroll", "group") and a.size > 1 and a.orig not in k.reduce_axes for a in axes): return None
  parts = [i for i, a in enumerate(axes) if a.size > 1 and a.kind in THREAD_KINDS + ("upcast",) and st.shape[a.orig] != 1]
  size = prod(axes[i].size for i in parts)
  if size > cap: return None
  lay = sorted(parts, key=lambda i: (axes[i].orig == fast, i))   # rows of the contiguous axis
  cstride, acc = {}, 1
  for i in reversed(lay): cstride[i], acc = acc, acc * axes[i].size
  rowlen = prod(axes[i].size for i in lay if axes[i].orig == fast)
  swz = swizzle_rc(rowlen if rowlen >= 16 and rowlen & (rowlen - 1) == 0 else 0)
  def at(vals: dict[int, UOp]) -> UOp:
    """The tile offset of the parts' values: swizzled (row, column); a lane part that moves within one 16-byte chunk
    is added after the swizzle (the lanes of one chunk stay one vector access)."""
    row: UOp = UOp.const(it, 0)
    col: UOp = UOp.const(it, 0)
    inner: UOp = UOp.const(it, 0)
    for i in parts:
      if axes[i].orig != fast: row = row + vals[i] * (cstride[i] // rowlen)
      elif cstride[i] * axes[i].size <= 8 and vals[i].op is Ops.RANGE and axes[i].kind == "upcast": inner = inner + vals[i] * cstride[i]
      else: col = col + vals[i] * cstride[i]
    return (swz(row.simplify(), col.simplify()) + inner).simplify()
  nthr = prod(axes[i].size for i in lw.th)
  v = next((c for c in (8, 4, 2) if rowlen % c == 0 and size % (nthr * c) == 0), 1)
  # 1: the fragments into the tile, after every warp is done with the operand tiles
  done = UOp(Ops.BARRIER, dtypes.void, (src[2],))
  write = UOp(Ops.STORE, dtypes.void, (pool.index(at(lw.rng)), src[2], done))
  full = UOp(Ops.BARRIER, dtypes.void, (write,))
  # 2: chunks of v values along the rows, thread by thread, into the output
  tid: UOp = UOp.const(it, 0)
  for i in lw.th: tid = tid + lw.rng[i] * lw.th_stride[i]
  lane = UOp.range(v, 210_000, "upcast", it) if v > 1 else UOp.const(it, 0)
  rorder = list(reversed(lay))
  run = sum(axes[i].orig == fast for i in lay)
  stores = []
  for jj in range(-(-size // (nthr * v))):
    q = (UOp.const(it, jj * nthr) + tid).simplify()
    vals = dict(lw.rng)
    e, rest = ((q % (rowlen // v)) * v).simplify(), (q // (rowlen // v)).simplify()
    for i in rorder[:run]: vals[i], e = (e % axes[i].size).simplify(), (e // axes[i].size).simplify()
    for x, i in enumerate(rorder[run:]):
      last = x == len(rorder) - run - 1
      vals[i], rest = (rest % axes[i].size).simplify() if not last else rest, (rest // axes[i].size).simplify()
    in_tile = None if size % (nthr * v) == 0 else (q < size // v).simplify()
    val = UOp(Ops.LOAD, src[2].dtype, (pool.index((at(vals) + lane).simplify(), in_tile), full))
    vals[rorder[0]] = (vals[rorder[0]] + lane).simplify()
    guard = lw.store_guard if in_tile is None else in_tile if lw.store_guard is None else lw.store_guard & in_tile
    gidx, gvalid = lw.access(st, guard, vals, store=True)
    stores.append(UOp(Ops.STORE, dtypes.void, (src[0].index(gidx, gvalid), val)))
  return UOp(Ops.NOOP, dtypes.void, tuple(stores))
