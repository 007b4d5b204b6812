"""Turn upcast/unroll ranges into vector lanes.

After lowering, an UPCAST or UNROLL range is not a loop: each of its values is a lane of a vector. A node that
depends on lane ranges L1..Lk becomes a vector of prod(sizes) lanes, row-major over the ranges in id order.
Loads and stores whose index is `base + sum(c_i * L_i)` become contiguous vector accesses (or one scalar access
per distinct address, shuffled); anything else is evaluated lane by lane. A REDUCE over unroll lanes keeps one
accumulator per lane and adds the lanes up after its loop."""
from __future__ import annotations
import itertools
from baregrad.helpers import prod
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import UOp, Ops, GroupOp
from baregrad.ir.symbolic import linear, simplify
from baregrad.codegen.kernel import LANE_KINDS

Lanes = tuple[UOp, ...]  # lane RANGEs, sorted by range id

def is_lane(u: UOp) -> bool: return u.op is Ops.RANGE and u.arg[1] in LANE_KINDS

def _lane_values(lanes: Lanes) -> list[tuple[int, ...]]:
  return list(itertools.product(*[range(r.src[0].arg) for r in lanes]))

def _union(*ls: Lanes) -> Lanes: return tuple(sorted({r for l in ls for r in l}, key=lambda r: r.arg[0]))

def broadcast(u: UOp, have: Lanes, want: Lanes) -> UOp:
  """Re-lay u's lanes (over `have`) out over `want` (a superset)."""
  if have == want: return u
  n = prod(r.src[0].arg for r in want)
  if not have: return u.broadcast(n)
  pos = [want.index(r) for r in have]
  sizes = [r.src[0].arg for r in have]
  idx = []
  for vals in _lane_values(want):
    i = 0
    for p, s in zip(pos, sizes): i = i * s + vals[p]
    idx.append(i)
  return u.gep(tuple(idx)) if idx != list(range(len(idx))) else u

def _lane_linear(idx: UOp, lanes: Lanes) -> tuple[UOp, dict[UOp, int]] | None:
  """idx = base + sum(c * lane) with base free of lanes, or None."""
  if not dtypes.is_int(idx.dtype): return None
  terms, k = linear(idx)
  coef: dict[UOp, int] = {}
  base: dict[UOp, int] = {}
  for t, c in terms.items():
    if is_lane(t): coef[t] = c
    elif any(is_lane(x) for x in t.toposort()): return None
    else: base[t] = c
  from baregrad.ir.symbolic import build_linear
  return build_linear(base, k, idx.dtype), coef

class Expander:
  def __init__(self) -> None: self.memo: dict[UOp, tuple[UOp, Lanes]] = {}

  def lanes_of(self, u: UOp) -> Lanes:
    return tuple(sorted({x for x in u.toposort() if is_lane(x)}, key=lambda r: r.arg[0]))

  def per_lane(self, u: UOp, lanes: Lanes, vals: tuple[int, ...]) -> UOp:
    return simplify(u.substitute({r: UOp.const(r.dtype, v) for r, v in zip(lanes, vals)}))

  def expand(self, u: UOp) -> tuple[UOp, Lanes]:
    # iterative post-order so deep graphs don't hit the recursion limit
    for n in u.toposort():
      if n not in self.memo: self.memo[n] = self._expand(n)
    return self.memo[u]

  def _expand(self, u: UOp) -> tuple[UOp, Lanes]:
    if is_lane(u):
      n = u.src[0].arg
      return UOp(Ops.VECTORIZE, u.dtype.vec(n), tuple(UOp.const(u.dtype, i) for i in range(n))), (u,)
    if u.op in (Ops.RANGE, Ops.CONST, Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.SPECIAL, Ops.INDEX): return u, ()
    if u.op is Ops.LOAD: return self._load(u)
    if u.op is Ops.STORE: return self._store(u), ()
    if u.op is Ops.REDUCE: return self._reduce(u)
    if u.op in (Ops.SINK, Ops.NOOP):
      srcs: list[UOp] = []
      for s in u.src:
        e, _ = self.memo[s]
        srcs.extend(e.src if e.op is Ops.NOOP else (e,))
      return u.replace(src=tuple(srcs)), ()
    if u.op in GroupOp.ALU or u.op in (Ops.CAST, Ops.BITCAST):
      ex = [self.memo[s] for s in u.src]
      want = _union(*[l for _, l in ex])
      if not want: return u.replace(src=tuple(e for e, _ in ex)), ()
      n = prod(r.src[0].arg for r in want)
      src = tuple(broadcast(e, l, want) for e, l in ex)
      return UOp(u.op, u.dtype.scalar.vec(n), src, u.arg), want
    raise NotImplementedError(f"lane expansion of {u.op}")

  def _access(self, index: UOp) -> tuple[UOp, UOp | None, Lanes]:
    idx = index.src[1]
    valid = index.src[2] if len(index.src) > 2 else None
    lanes = _union(self.lanes_of(idx), self.lanes_of(valid) if valid is not None else ())
    return idx, valid, lanes

  def _runs(self, buf: UOp, base: UOp, offs: list[int], mask: UOp | None, valid: UOp | None, make) -> list[tuple[list[int], UOp]]:
    """Accesses for lanes at element offsets `offs` from base (all different): one per run of consecutive addresses,
    in address order, as (lane positions, access made by make(index, count)). A lane-dependent mask (a bool vector
    over the same lanes) gives each access its lanes' part of it: a masked vector access."""
    order = sorted(range(len(offs)), key=offs.__getitem__)
    runs: list[list[int]] = []
    for p in order:
      if runs and offs[p] == offs[runs[-1][-1]] + 1: runs[-1].append(p)
      else: runs.append([p])
    out = []
    for run in runs:
      m = valid if mask is None else mask.gep(tuple(run)) if len(run) > 1 else mask.gep(run[0])
      out.append((run, make(buf.index(simplify(base + offs[run[0]]), m), len(run))))
    return out

  def _affine(self, idx: UOp, valid: UOp | None, lanes: Lanes) -> tuple[UOp, Lanes, list[int], UOp | None] | None:
    """For an index affine in the lanes: (base, lanes it moves with, offset per value of those lanes, the validity as
    a bool vector over them or None when it does not depend on lanes); None where lanes would share an address or
    the validity depends on a lane the address does not move with (then every lane is accessed on its own)."""
    lin = _lane_linear(idx, lanes)
    if lin is None: return None
    base, coef = lin
    mov = tuple(r for r in lanes if coef.get(r, 0))
    vl = self.lanes_of(valid) if valid is not None else ()
    if not set(vl) <= set(mov): return None
    offs = [sum(coef[r] * v for r, v in zip(mov, vals)) for vals in _lane_values(mov)]
    if len(set(offs)) != len(offs): return None
    mask = None
    if vl:
      mv, ml = self.memo[valid]
      mask = broadcast(mv, ml, mov)
    return base, mov, offs, mask

  def _load(self, u: UOp) -> tuple[UOp, Lanes]:
    index = u.src[0]
    buf = index.src[0]
    idx, valid, lanes = self._access(index)
    if not lanes: return u, ()
    n = prod(r.src[0].arg for r in lanes)
    if (aff := self._affine(idx, valid, lanes)) is not None:
      base, mov, offs, mask = aff
      parts = self._runs(buf, base, offs, mask, valid, lambda ix, c: UOp(Ops.LOAD, u.dtype.vec(c) if c > 1 else u.dtype, (ix,)))
      # in address order, the runs concatenated; then back in lane order, then over all the lanes
      vec = parts[0][1] if len(parts) == 1 else UOp(Ops.VECTORIZE, u.dtype.vec(len(offs)), tuple(a for _, a in parts))
      pos = {p: k for k, p in enumerate(p for run, _ in parts for p in run)}
      if len(offs) > 1 and [pos[p] for p in range(len(offs))] != list(range(len(offs))): vec = vec.gep(tuple(pos[p] for p in range(len(offs))))
      return broadcast(vec, mov, lanes), lanes
    # general case: every lane on its own
    loads = []
    for vals in _lane_values(lanes):
      li = self.per_lane(idx, lanes, vals)
      lv = self.per_lane(valid, lanes, vals) if valid is not None else None
      if lv is not None and lv.op is Ops.CONST:
        if not lv.arg: loads.append(UOp.const(u.dtype, 0)); continue
        lv = None
      loads.append(UOp(Ops.LOAD, u.dtype, (buf.index(li, lv),)))
    return UOp(Ops.VECTORIZE, u.dtype.vec(n), tuple(loads)), lanes

  def _store(self, u: UOp) -> UOp:
    index, value = u.src[0], u.src[1]
    buf = index.src[0]
    idx, valid, ilanes = self._access(index)
    v, vlanes = self.memo[value]
    lanes = _union(ilanes, vlanes)
    if not lanes: return u.replace(src=(index, v))
    if (aff := self._affine(idx, valid, ilanes)) is not None:
      base, mov, offs, mask = aff
      # lanes the address does not move with write the same place: the last one wins, as a loop would
      last = {r: r.src[0].arg - 1 for r in lanes if r not in mov}
      vals_all = _lane_values(lanes)
      at = {tuple(x for r, x in zip(lanes, vals) if r in mov): i for i, vals in enumerate(vals_all)
            if all(x == last[r] for r, x in zip(lanes, vals) if r not in mov)}
      pick = [at[vals] for vals in _lane_values(mov)]
      v = broadcast(v, vlanes, lanes)
      parts = self._runs(buf, base, offs, mask, valid, lambda ix, c: ix)
      stores = tuple(UOp(Ops.STORE, dtypes.void, (ix, v.gep(tuple(pick[p] for p in run)) if len(run) > 1 else v.gep(pick[run[0]])))
                     for run, ix in parts)
      return stores[0] if len(stores) == 1 else UOp(Ops.NOOP, dtypes.void, stores)
    v = broadcast(v, vlanes, lanes)
    stores_l = []
    for i, vals in enumerate(_lane_values(lanes)):
      li = self.per_lane(idx, lanes, vals)
      lv = self.per_lane(valid, lanes, vals) if valid is not None else None
      if lv is not None and lv.op is Ops.CONST:
        if not lv.arg: continue
        lv = None
      stores_l.append(UOp(Ops.STORE, dtypes.void, (buf.index(li, lv), v.gep(i))))
    return UOp(Ops.NOOP, dtypes.void, tuple(stores_l))

  def _reduce(self, u: UOp) -> tuple[UOp, Lanes]:
    v, vl = self.memo[u.src[0]]
    loops = tuple(r for r in u.src[1:] if not is_lane(r))
    red_lanes = tuple(r for r in u.src[1:] if is_lane(r))
    full = _union(vl, red_lanes)
    v = broadcast(v, vl, full)
    n = prod(r.src[0].arg for r in full)
    acc = UOp(Ops.REDUCE, u.dtype.scalar.vec(n), (v,) + loops, u.arg) if loops else v
    if not red_lanes: return acc, full
    out = tuple(r for r in full if r not in red_lanes)
    # reduced lanes innermost, then halve the vector until one lane per output is left: log2 steps of whole-register
    # operations (lanes of a register tile stay in registers; an odd count peels its last lane)
    acc = broadcast(acc, full, out + red_lanes)
    n_out, m = prod(r.src[0].arg for r in out), prod(r.src[0].arg for r in red_lanes)
    def op(a: UOp, b: UOp) -> UOp: return UOp(u.arg, a.dtype, (a, b))
    def pick(lo: int, hi: int) -> UOp: return acc.gep(tuple(o * m + r for o in range(n_out) for r in range(lo, hi)))
    peeled: list[UOp] = []
    while m > 1:
      if m % 2:
        peeled.append(pick(m - 1, m))
        acc, m = pick(0, m - 1), m - 1
        if m == 1: break
      acc, m = op(pick(0, m // 2), pick(m // 2, m)), m // 2
    for p in peeled: acc = op(acc, p)
    return acc, out

def expand_lanes(sink: UOp) -> UOp:
  e = Expander()
  out, _ = e.expand(sink)
  return out
