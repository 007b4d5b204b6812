"""Order a kernel graph into a linear program: open and close loops, place every node in the loops it needs.

A node runs inside exactly the loops (RANGEs) it depends on, so loop-invariant work is hoisted for free. A REDUCE
becomes DEFINE_ACC (before its loops), ASSIGN (inside them: acc = acc op value) and a read of the accumulator
after them."""
from __future__ import annotations
import itertools
from dataclasses import dataclass
from baregrad.ir.ops import UOp, Ops, identity_element

class LinearizeError(RuntimeError): pass

@dataclass
class Program:
  uops: list[UOp]   # linear order; RANGE opens a loop, ENDRANGE closes it

def _acc_init(u: UOp) -> UOp: return UOp.const(u.dtype, identity_element(u.arg, u.dtype.scalar))

def linearize(sink: UOp) -> list[UOp]:
  counter = itertools.count()
  topo = list(sink.toposort())
  reduces: list[UOp] = [u for u in topo if u.op is Ops.REDUCE]
  # which loops enclose each loop: output loops nest in id order; a reduce's loops sit inside its outer loops
  encl: dict[UOp, frozenset[UOp]] = {}
  outs = sorted({r for u in topo if u.op is Ops.RANGE and u.arg[1] not in ("reduce",) for r in [u]}, key=lambda r: r.arg[0])
  for i, r in enumerate(outs): encl[r] = frozenset(outs[:i])
  def close(s: frozenset[UOp]) -> frozenset[UOp]:
    out = set(s)
    for r in s: out |= encl.get(r, frozenset())
    return frozenset(out)
  # raw loop sets: the ranges a node depends on (a REDUCE hides its own). Reductions that share a loop (the lanes of a
  # devectorized reduce) must sit in the same outer loops, else the shared loop would need two nestings: each gets the
  # union of the outer loops of those it shares a loop with (`extra`), and what uses it runs in those loops too
  extra: dict[UOp, frozenset[UOp]] = {}
  while True:
    raw: dict[UOp, frozenset[UOp]] = {}
    for u in topo:
      if u.op is Ops.RANGE: raw[u] = frozenset([u])
      elif u.op is Ops.REDUCE: raw[u] = (raw[u.src[0]] - frozenset(u.src[1:])) | extra.get(u, frozenset())
      else: raw[u] = frozenset().union(*(raw[s] for s in u.src)) if u.src else frozenset()
    outer_of = {u: close(raw[u]) for u in reduces}
    sharing: dict[UOp, list[UOp]] = {}
    for u in reduces:
      for r in u.src[1:]: sharing.setdefault(r, []).append(u)
    for r, us in sharing.items():
      un = frozenset().union(*(outer_of[x] for x in us)) - frozenset(r for x in us for r in x.src[1:])
      for x in us: outer_of[x] = outer_of[x] | un
    grow = {u: outer_of[u] for u in reduces if not outer_of[u] <= raw[u]}
    if not grow: break
    for u, o in grow.items(): extra[u] = extra.get(u, frozenset()) | o
  for u in reduces:  # toposort order: inner reductions were seen first, but their outer sets only need outputs
    outer = outer_of[u]
    prev: frozenset[UOp] = outer
    for r in u.src[1:]:
      encl[r] = close(prev)
      prev = encl[r] | {r}
  # a reduction inside another's loop that reads that loop's index (an attention score, a dot product per key, inside
  # each pass over the keys) sits in that loop's enclosing loops too: known only now, outer reductions first
  red_ranges = {r for u in reduces for r in u.src[1:]}
  for u in reversed(reduces):
    if not (outer_of[u] & red_ranges) or (o := close(outer_of[u])) == outer_of[u]: continue
    outer_of[u] = prev = o
    for r in u.src[1:]:
      encl[r] = close(prev)
      prev = encl[r] | {r}
  # replace REDUCEs by accumulator nodes, and give every node the loops it runs in
  ctx: dict[UOp, frozenset[UOp]] = {}
  replace: dict[UOp, UOp] = {}
  for u in sink.toposort():
    src = tuple(replace.get(s, s) for s in u.src)
    if u.op is Ops.REDUCE:
      val, rs = src[0], src[1:]
      outer = outer_of[u]
      init = _acc_init(u)
      acc = UOp(Ops.DEFINE_ACC, u.dtype, (init,), next(counter))
      # the ranges are sources too, so they (and their ends) are placed even when the value does not use them
      asg = UOp(Ops.ASSIGN, u.dtype, (acc, val) + tuple(rs), (u.arg, rs))
      new = UOp(Ops.REDUCE, u.dtype, (acc, asg), u.arg)
      ctx[acc], ctx[asg], ctx[new] = outer, close(raw[u.src[0]] | frozenset(rs) | outer), outer
    else:
      new = u if src == u.src else u.replace(src=src)
      ctx[new] = close(raw[u])
    replace[u] = new
  root = replace[sink]
  for u in root.toposort():  # nodes made here (accumulator initial values) have no loops yet
    if u not in ctx: ctx[u] = frozenset().union(*(ctx[s] for s in u.src)) if u.src else frozenset()
  # 2. dependency lists (RANGE nodes are scheduled by opening them)
  # a reduce range the value does not read (a reduction over a broadcast axis) is only in the ASSIGN's arg: keep it
  # and its bound in the graph
  lost = [x for u in sink.toposort() if u.op is Ops.RANGE for x in u.toposort()]
  everything = list(dict.fromkeys(lost + list(root.toposort())))
  nodes = [u for u in everything if u.op is not Ops.RANGE]
  order = {u: i for i, u in enumerate(everything)}
  deps = {u: [s for s in u.src if s.op is not Ops.RANGE] for u in nodes}
  rng_deps = {u: list(u.src) for u in everything if u.op is Ops.RANGE}
  # an accumulator must exist before the loops it accumulates over open
  for u in nodes:
    if u.op is Ops.ASSIGN:
      for r in u.arg[1]: rng_deps[r].append(u.src[0])
  emitted: set[UOp] = set()
  pending = set(nodes)
  stack: list[UOp] = []
  out: list[UOp] = []
  by_ctx: dict[frozenset, list[UOp]] = {}
  for u in sorted(nodes, key=order.__getitem__): by_ctx.setdefault(ctx[u], []).append(u)

  def ready(u: UOp) -> bool: return all(d in emitted for d in deps[u])
  def block(s: frozenset) -> list[UOp]: return [u for c, us in by_ctx.items() if c >= s for u in us if u in pending]
  guard = 0
  while pending:
    guard += 1
    if guard > 50 * (len(nodes) + 10): raise LinearizeError("linearize made no progress")
    S = frozenset(stack)
    lvl = [u for u in by_ctx.get(S, []) if u in pending and ready(u)]
    if lvl:
      for u in lvl:
        if u in pending and ready(u):
          out.append(u); emitted.add(u); pending.discard(u)
      continue
    # open the outermost missing loop of some waiting node whose block has everything it needs from outside
    cands: list[UOp] = []
    for c in by_ctx:
      if c > S and any(u in pending for u in by_ctx[c]):
        cands.append(min(c - S, key=lambda r: r.arg[0]))
    opened = False
    for r in sorted(set(cands), key=lambda r: r.arg[0]):
      inner = S | {r}
      blk = block(inner)
      blkset = set(blk)
      if not all(d in emitted for d in rng_deps[r] if d.op is not Ops.RANGE): continue
      if all(d in emitted or d in blkset for u in blk for d in deps[u]):
        stack.append(r); out.append(r); opened = True
        break
    if opened: continue
    if stack and not block(S):
      r = stack.pop()
      out.append(UOp(Ops.ENDRANGE, src=(r,)))
      continue
    waiting = sorted(pending, key=order.__getitem__)[:5]
    raise LinearizeError(f"cannot place {len(pending)} nodes with loops {[f'r{r.arg[0]}' for r in stack]} open; "
                         f"waiting: {[(u.op.name, sorted(f'r{r.arg[0]}' for r in ctx[u])) for u in waiting]}")
  while stack: out.append(UOp(Ops.ENDRANGE, src=(stack.pop(),)))
  return out
