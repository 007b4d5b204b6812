"""Split vectors wider than a register into register-width chunks (for renderers that keep vectors).

Lane expansion makes one vector per value of a register tile (an 8x32 matmul tile is a 256-lane accumulator). Handed to
LLVM whole, such vectors cost seconds of type legalization and shuffle lowering, and the code LLVM makes of the shuffles
is poor. Here every op on a vector of more than `width` lanes becomes one op per chunk of `width` lanes (the last may be
shorter), so the renderer sees exactly the register-level work: a broadcast becomes one splat per chunk, a contiguous
load one vector load per chunk, a reduction one accumulator per chunk. Lane moves (GEP, VECTORIZE) pick from the
chunks that hold their lanes: nothing at all where a chunk is reused whole."""
from __future__ import annotations
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import UOp, Ops, GroupOp

def _chunks(n: int, width: int) -> list[tuple[int, int]]: return [(a, min(a + width, n)) for a in range(0, n, width)]

def _gather(lanes: list[tuple[UOp, int]]) -> UOp:
  """A value made of the given lanes of chunk values (each a scalar or a vector of at most one register)."""
  groups: list[tuple[UOp, list[int]]] = []
  for p, j in lanes:
    if groups and groups[-1][0] is p and p.dtype.count > 1: groups[-1][1].append(j)
    else: groups.append((p, [j]))
  if all(p.dtype.count == 1 for p, _ in groups):
    return groups[0][0] if len(lanes) == 1 else UOp(Ops.VECTORIZE, lanes[0][0].dtype.scalar.vec(len(lanes)), tuple(p for p, _ in groups))
  parts = [p if p.dtype.count == 1 or js == list(range(p.dtype.count)) else p.gep(tuple(js)) for p, js in groups]
  return parts[0] if len(parts) == 1 else UOp(Ops.VECTORIZE, lanes[0][0].dtype.scalar.vec(len(lanes)), tuple(parts))

def split_wide(sink: UOp, width: int) -> UOp:
  """Every vector op of more than `width` lanes becomes ops on chunks of at most `width` lanes."""
  parts: dict[UOp, list[UOp]] = {}
  def lane(s: UOp, i: int) -> tuple[UOp, int]:
    if s.dtype.count == 1: return parts[s][0], 0
    return parts[s][i // width], i % width
  def chunk_of(s: UOp, k: int) -> UOp: return parts[s][k] if s.dtype.count > 1 else parts[s][0]
  for u in sink.toposort():
    wide = u.dtype.count > width or any(s.dtype.count > width for s in u.src)
    if not wide:
      src = tuple(parts[s][0] for s in u.src) if u.op not in (Ops.SINK, Ops.NOOP) else tuple(x for s in u.src for x in parts[s])
      parts[u] = [u if src == u.src else u.replace(src=src)]
      continue
    n = u.dtype.count
    if u.op in (Ops.SINK, Ops.NOOP): parts[u] = [u.replace(src=tuple(x for s in u.src for x in parts[s]))]
    elif u.op is Ops.VECTORIZE:
      flat = [lane(s, j) for s in u.src for j in range(s.dtype.count)]
      parts[u] = [_gather(flat[a:b]) for a, b in _chunks(n, width)]
    elif u.op is Ops.GEP:
      picked = [lane(u.src[0], i) for i in u.arg]
      parts[u] = [_gather(picked[a:b]) for a, b in _chunks(n, width)]
    elif u.op in (Ops.LOAD, Ops.STORE):
      idx = u.src[0]
      vn = u.dtype.count if u.op is Ops.LOAD else u.src[1].dtype.count
      base = parts[idx.src[1]][0]
      valid = idx.src[2] if len(idx.src) > 2 else None
      out = []
      for k, (a, b) in enumerate(_chunks(vn, width)):
        v = None if valid is None else chunk_of(valid, k)
        ix = idx.src[0].index((base + a).simplify() if a else base, v)
        if u.op is Ops.LOAD: out.append(UOp(Ops.LOAD, u.dtype.scalar.vec(b - a) if b - a > 1 else u.dtype.scalar, (ix,)))
        else: out.append(UOp(Ops.STORE, dtypes.void, (ix, parts[u.src[1]][k])))
      parts[u] = out if u.op is Ops.LOAD else [UOp(Ops.NOOP, dtypes.void, tuple(out))]
    elif u.op is Ops.INDEX: parts[u] = [u]  # a wide mask: the LOAD or STORE above makes one INDEX per chunk
    elif u.op is Ops.REDUCE:
      parts[u] = [UOp(Ops.REDUCE, u.dtype.scalar.vec(b - a) if b - a > 1 else u.dtype.scalar, (p,) + u.src[1:], u.arg)
                  for (a, b), p in zip(_chunks(n, width), parts[u.src[0]])]
    elif u.op in GroupOp.ALU or u.op in (Ops.CAST, Ops.BITCAST):
      if u.op is Ops.BITCAST and u.src[0].dtype.count != n:
        raise ValueError(f"BITCAST from {u.src[0].dtype} to {u.dtype} changes the lane count: cannot split it into registers")
      parts[u] = [UOp(u.op, u.dtype.scalar.vec(b - a) if b - a > 1 else u.dtype.scalar, tuple(chunk_of(s, k) for s in u.src), u.arg)
                  for k, (a, b) in enumerate(_chunks(n, width))]
    else: raise ValueError(f"cannot split a {u.op.name} of {u.dtype} into registers of {width} lanes")
  return parts[sink][0]
