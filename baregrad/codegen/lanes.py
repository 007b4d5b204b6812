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

def is_fragment(u: UOp) -> bool:
  """A load that yields a whole tensor-core fragment (ldmatrix) or an operand's matrix descriptor (wgmma): a vector or a
  scalar already, one per warp(group)-wide instruction."""
  return u.op is Ops.LOAD and isinstance(u.arg, tuple) and u.arg[0] in ("ldmatrix", "wgdesc")

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

def _runs(uniq: list[int]) -> list[list[int]]:
  """Sorted offsets -> maximal runs of consecutive ones."""
  out: list[list[int]] = []
  for o in uniq:
    if out and o == out[-1][-1] + 1: out[-1].append(o)
    else: out.append([o])
  return out

class Expander:
  """runs=True (GPU targets): an access whose lanes are not one contiguous block becomes one vector access per
  contiguous run (rows of a register tile) instead of one scalar access per address."""
  def __init__(self, runs: bool = False) -> None: self.memo: dict[UOp, tuple[UOp, Lanes]] = {}; self.runs = runs

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
    if u.op in (Ops.RANGE, Ops.CONST, Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.DEFINE_LOCAL, Ops.SPECIAL, Ops.INDEX): return u, ()
    if u.op is Ops.BARRIER: return u.replace(src=tuple(self.memo[s][0] for s in u.src)), ()
    if u.op is Ops.LOAD and is_fragment(u): return u, self.lanes_of(u.src[0])   # taken whole by its WMMA
    if u.op is Ops.LOAD: return self._load(u)
    if u.op is Ops.STORE: return self._store(u), ()
    if u.op is Ops.REDUCE: return self._reduce(u)
    if u.op is Ops.WMMA: return self._wmma(u)
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
    if vl and valid is not None:   # (vl is empty without valid)
      mv, ml = self.memo[valid]
      mask = broadcast(mv, ml, mov)
    return base, mov, offs, mask

  def _load(self, u: UOp) -> tuple[UOp, Lanes]:
    index = u.src[0]
    buf = index.src[0]
    idx, valid, lanes = self._access(index)
    dep = tuple(self.memo[s][0] for s in u.src[1:])   # what the load must come after (a barrier)
    if not lanes: return u.replace(src=(index,) + dep) if dep else u, ()
    n = prod(r.src[0].arg for r in lanes)
    # CPUs (no runs flag): one access per contiguous run, masks per lane, concatenated; GPUs: below
    if not self.runs and not dep and (aff := self._affine(idx, valid, lanes)) is not None:
      base, mov, offs, mask = aff
      parts = self._runs(buf, base, offs, mask, valid, lambda ix, c: UOp(Ops.LOAD, u.dtype.vec(c) if c > 1 else u.dtype, (ix,), u.arg))
      # in address order, the runs concatenated; then back in lane order, then over all the lanes
      vec = parts[0][1] if len(parts) == 1 else UOp(Ops.VECTORIZE, u.dtype.vec(len(offs)), tuple(a for _, a in parts))
      pos = {p: k for k, p in enumerate(p for run, _ in parts for p in run)}
      if len(offs) > 1 and [pos[p] for p in range(len(offs))] != list(range(len(offs))): vec = vec.gep(tuple(pos[p] for p in range(len(offs))))
      return broadcast(vec, mov, lanes), lanes
    lin = _lane_linear(idx, lanes) if valid is None or not self.lanes_of(valid) else None
    if lin is not None:
      base, coef = lin
      offs = [sum(coef.get(r, 0) * v for r, v in zip(lanes, vals)) for vals in _lane_values(lanes)]
      uniq = sorted(set(offs))
      lo = uniq[0]
      if uniq == list(range(lo, lo + len(uniq))) and len(uniq) > 1:
        vec = UOp(Ops.LOAD, u.dtype.vec(len(uniq)), (buf.index(simplify(base + lo), valid),) + dep, u.arg)
        return vec.gep(tuple(o - lo for o in offs)), lanes
      if self.runs and any(len(r) > 1 for r in _runs(uniq)):
        elems: dict[int, UOp] = {}
        for run in _runs(uniq):
          ld = UOp(Ops.LOAD, u.dtype.vec(len(run)) if len(run) > 1 else u.dtype, (buf.index(simplify(base + run[0]), valid),) + dep, u.arg)
          for j, o in enumerate(run): elems[o] = ld.gep(j) if len(run) > 1 else ld
        vec = UOp(Ops.VECTORIZE, u.dtype.vec(len(uniq)), tuple(elems[o] for o in uniq))
        return vec.gep(tuple(uniq.index(o) for o in offs)), lanes
      scal = [UOp(Ops.LOAD, u.dtype, (buf.index(simplify(base + o), valid),) + dep) for o in uniq]
      vec = scal[0] if len(scal) == 1 else UOp(Ops.VECTORIZE, u.dtype.vec(len(scal)), tuple(scal))
      return (vec.broadcast(n) if len(scal) == 1 else vec.gep(tuple(uniq.index(o) for o in offs))), lanes
    # general case: every lane on its own
    loads = []
    for vals in _lane_values(lanes):
      li = self.per_lane(idx, lanes, vals)
      lv = self.per_lane(valid, lanes, vals) if valid is not None else None
      if lv is not None and lv.op is Ops.CONST:
        if not lv.arg: loads.append(UOp.const(u.dtype, 0)); continue
        lv = None
      loads.append(UOp(Ops.LOAD, u.dtype, (buf.index(li, lv),) + dep))
    return UOp(Ops.VECTORIZE, u.dtype.vec(n), tuple(loads)), lanes

  def _store(self, u: UOp) -> UOp:
    index, value = u.src[0], u.src[1]
    buf = index.src[0]
    idx, valid, ilanes = self._access(index)
    v, vlanes = self.memo[value]
    dep = tuple(self.memo[s][0] for s in u.src[2:])   # what the store must come after (a barrier)
    lanes = _union(ilanes, vlanes)
    if not lanes: return u.replace(src=(index, v) + dep)
    # CPUs (no runs flag): one access per contiguous run, masks per lane; GPUs: below
    if not self.runs and not dep and (aff := self._affine(idx, valid, ilanes)) is not None:
      base, mov, offs, mask = aff
      # lanes the address does not move with write the same place: the last one wins, as a loop would
      last_of = {r: r.src[0].arg - 1 for r in lanes if r not in mov}
      at = {tuple(x for r, x in zip(lanes, vals) if r in mov): i for i, vals in enumerate(_lane_values(lanes))
            if all(x == last_of[r] for r, x in zip(lanes, vals) if r not in mov)}
      pick = [at[vals] for vals in _lane_values(mov)]
      vb = broadcast(v, vlanes, lanes)
      parts = self._runs(buf, base, offs, mask, valid, lambda ix, c: ix)
      stores = tuple(UOp(Ops.STORE, dtypes.void, (ix, vb.gep(tuple(pick[p] for p in run)) if len(run) > 1 else vb.gep(pick[run[0]])), u.arg)
                     for run, ix in parts)
      return stores[0] if len(stores) == 1 else UOp(Ops.NOOP, dtypes.void, stores)
    v = broadcast(v, vlanes, lanes)
    vals_all = _lane_values(lanes)
    lin = _lane_linear(idx, lanes) if valid is None or not self.lanes_of(valid) else None
    if lin is not None:
      base, coef = lin
      offs = [sum(coef.get(r, 0) * x for r, x in zip(lanes, vals)) for vals in vals_all]
      last = {o: i for i, o in enumerate(offs)}  # the last lane writing an address wins, as a loop would
      uniq = sorted(last)
      lo = uniq[0]
      if uniq == list(range(lo, lo + len(uniq))) and len(uniq) > 1:
        return UOp(Ops.STORE, dtypes.void, (buf.index(simplify(base + lo), valid), v.gep(tuple(last[o] for o in uniq))) + dep, u.arg)
      if self.runs and any(len(r) > 1 for r in _runs(uniq)):
        stores = tuple(UOp(Ops.STORE, dtypes.void, (buf.index(simplify(base + run[0]), valid), v.gep(tuple(last[o] for o in run))) + dep, u.arg)
                       for run in _runs(uniq))
        return UOp(Ops.NOOP, dtypes.void, stores)
      stores = tuple(UOp(Ops.STORE, dtypes.void, (buf.index(simplify(base + o), valid), v.gep(last[o])) + dep, u.arg) for o in uniq)
      return stores[0] if len(stores) == 1 else UOp(Ops.NOOP, dtypes.void, stores)
    if self.runs and (valid is None or not self.lanes_of(valid)) and set(self.lanes_of(idx)) == set(lanes) and \
       (part := self._partly_linear(idx, lanes)) is not None:
      # GPUs: an address affine in some lanes (the lowest bits of a swizzled shared tile's column) and not in the others:
      # per value of the others, one vector access per run of consecutive addresses over the affine ones
      plin, coef = part
      other = tuple(r for r in lanes if r not in coef)
      base = simplify(idx.substitute({r: UOp.const(r.dtype, 0) for r in plin}))
      pos = {vals: i for i, vals in enumerate(vals_all)}
      stores_p = []
      for ov in _lane_values(other):
        b = self.per_lane(base, other, ov)
        at_off: dict[int, int] = {}
        for pv in _lane_values(plin):
          full = dict(zip(other, ov)) | dict(zip(plin, pv))
          at_off[sum(coef[r] * x for r, x in zip(plin, pv))] = pos[tuple(full[r] for r in lanes)]
        for run in _runs(sorted(at_off)):
          g = v.gep(tuple(at_off[o] for o in run)) if len(run) > 1 else v.gep(at_off[run[0]])
          stores_p.append(UOp(Ops.STORE, dtypes.void, (buf.index(simplify(b + run[0]), valid), g) + dep, u.arg))
      return UOp(Ops.NOOP, dtypes.void, tuple(stores_p))
    stores_l = []
    for i, vals in enumerate(vals_all):
      li = self.per_lane(idx, lanes, vals)
      lv = self.per_lane(valid, lanes, vals) if valid is not None else None
      if lv is not None and lv.op is Ops.CONST:
        if not lv.arg: continue
        lv = None
      stores_l.append(UOp(Ops.STORE, dtypes.void, (buf.index(li, lv), v.gep(i)) + dep, u.arg))
    return UOp(Ops.NOOP, dtypes.void, tuple(stores_l))

  @staticmethod
  def _partly_linear(idx: UOp, lanes: Lanes) -> tuple[Lanes, dict[UOp, int]] | None:
    """(lanes idx is affine in, their coefficients) where that is some but not all of `lanes` (a lane is affine where
    the only term of idx's linear form that holds it is the lane itself); None otherwise."""
    if not dtypes.is_int(idx.dtype): return None
    terms, _ = linear(idx)
    coef = {r: terms[r] for r in lanes if r in terms and not any(r in t.toposort() for t in terms if t is not r)}
    if not coef or len(coef) == len(lanes): return None
    return tuple(r for r in lanes if r in coef), coef

  def _wmma(self, u: UOp) -> tuple[UOp, Lanes]:
    """WMMA(a, b, c) with arg (tc, lanes of a's, b's and c's fragment elements, bit 0 first): one matrix instruction per
    value of the other lanes (more tiles a warp computes), each on fragment vectors in element order."""
    tc, *frags = u.arg
    srcs = [self.memo[s] for s in u.src]
    extra = _union(*[tuple(r for r in l if r not in f) for (_, l), f in zip(srcs, frags)])
    out = _union(frags[2], extra)
    def pos(lanes: Lanes, env: dict[UOp, int]) -> int:
      i = 0
      for r in lanes: i = i * r.src[0].arg + env[r]
      return i
    res: dict[tuple[int, ...], UOp] = {}
    for ev in _lane_values(extra):
      env = dict(zip(extra, ev))
      args = []
      for x, (v, l), f in zip(u.src, srcs, frags):
        if is_fragment(x):   # one fragment load per value of its lanes (the ordering sources are not lanes)
          idx = self.per_lane(x.src[0], l, tuple(env[r] for r in l))
          args.append(UOp(Ops.LOAD, x.dtype, (idx,) + tuple(self.memo[d][0] for d in x.src[1:]), x.arg)); continue
        gi = tuple(pos(l, {**env, **{r: (fi >> j) & 1 for j, r in enumerate(f)}}) for fi in range(1 << len(f)))
        args.append(v.gep(gi))
      res[ev] = UOp(Ops.WMMA, u.dtype.vec(1 << len(frags[2])), tuple(args), tc)
    elems = []
    for vals in _lane_values(out):
      env = dict(zip(out, vals))
      elems.append(res[tuple(env[r] for r in extra)].gep(sum(env[r] << j for j, r in enumerate(frags[2]))))
    return (elems[0] if len(elems) == 1 else UOp(Ops.VECTORIZE, u.dtype.vec(len(elems)), tuple(elems))), out

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

def expand_lanes(sink: UOp, runs: bool = False) -> UOp:
  e = Expander(runs)
  out, _ = e.expand(sink)
  return out
