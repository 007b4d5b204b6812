"""Kernel AST -> ProgramSpec: optimize, lower, expand lanes, simplify, linearize, render."""
from __future__ import annotations
from dataclasses import dataclass, field
import math, sys
from baregrad import knobs, helpers
from baregrad.helpers import DEBUG
from baregrad.ir.dtype import DType, dtypes, PtrDType
from baregrad.ir.ops import UOp, Ops, GroupOp, pretty
from baregrad.ir.pattern import UPat, PatternMatcher, graph_rewrite
from baregrad.ir.symbolic import symbolic
from baregrad.codegen.kernel import Kernel, Opt, KernelError, VECTOR_LANES
from baregrad.codegen.heuristic import heuristic_opts
from baregrad.codegen.lanes import expand_lanes, is_fragment
from baregrad.codegen.registers import split_wide
from baregrad.codegen.linearize import linearize
from baregrad.codegen.renderer import Renderer

@dataclass
class ProgramSpec:
  name: str
  src: str
  global_size: tuple[int, int, int]
  local_size: tuple[int, int, int]
  bufs: list[UOp]            # DEFINE_GLOBALs in argument order
  vars: list[UOp]            # DEFINE_VARs in argument order (after the buffers)
  opts: list[Opt]
  uops: list[UOp] = field(repr=False, default_factory=list)
  ast: UOp | None = field(repr=False, default=None)
  # buffer number -> byte alignment its vector accesses assume of the buffer's address (checked before a launch:
  # a buffer view at an odd offset runs a build without vector accesses instead)
  align: dict[int, int] = field(default_factory=dict)
  # bytes of dynamic shared memory the kernel is launched with (0: none; the PTX renderer above 48 KB)
  dyn_shared: int = 0
  # buffer numbers read through the texture unit (OptOps.IMAGE); a launch with one larger than the renderer's
  # image_max_bytes runs the build without images (as a misaligned view runs the one without vector accesses)
  images: tuple[int, ...] = ()
  @property
  def outs(self) -> list[int]:
    return sorted({u.src[0].arg for u in self.ast.src}) if self.ast is not None else []

def vec_lanes(v: UOp) -> list[tuple[UOp, int]]:
  """(source, lane of it) for each lane of a VECTORIZE: its sources are scalars or vectors, concatenated."""
  return [(s, j) for s in v.src for j in range(s.dtype.count)]

def _gep_vectorize(g: UOp, v: UOp) -> UOp | None:
  picked = [vec_lanes(v)[i] for i in g.arg] if any(s.dtype.count > 1 for s in v.src) else [(v.src[i], 0) for i in g.arg]
  if all(s.dtype.count == 1 for s, _ in picked):
    return picked[0][0] if len(picked) == 1 else UOp(Ops.VECTORIZE, g.dtype, tuple(s for s, _ in picked))
  srcs = {s for s, _ in picked}
  if len(srcs) == 1: return next(iter(srcs)).gep(tuple(j for _, j in picked))
  return None  # lanes of several vectors: the renderer shuffles

def _alu_of_vectorize(x: UOp) -> UOp | None:
  # lane-wise ALU over vectors built from scalars: compute per lane (folds constant index vectors)
  if x.dtype.count == 1 or not all(s.op is Ops.VECTORIZE for s in x.src): return None
  if not all(all(e.op is Ops.CONST for e in s.src) for s in x.src): return None
  lanes = [UOp(x.op, x.dtype.scalar, tuple(s.src[i] for s in x.src), x.arg) for i in range(x.dtype.count)]
  return UOp(Ops.VECTORIZE, x.dtype, tuple(lanes))

vector_simplify = PatternMatcher([
  (UPat(Ops.GEP, name="g", src=(UPat(Ops.VECTORIZE, name="v"),)), _gep_vectorize),
  (UPat(Ops.GEP, name="g", src=(UPat(Ops.GEP, name="h"),)), lambda g, h: h.src[0].gep(tuple(h.arg[i] for i in g.arg))),
  (UPat(Ops.GEP, name="g"), lambda g: g.src[0] if g.arg == tuple(range(g.src[0].dtype.count)) else None),
  (UPat(GroupOp.ALU | {Ops.CAST}, name="x"), _alu_of_vectorize),
  (UPat(Ops.VECTORIZE, name="v"), lambda v: v.src[0] if len(v.src) == 1 and v.src[0].dtype == v.dtype else None),
])

def _aligned_chunk(idx: UOp, n: int, itemsize: int, mem_bytes: int) -> int:
  """The most lanes (a power of two <= 4, or 8 of a 16-bit type, dividing n, at most mem_bytes) one memory access may move when the element
  index is provably a multiple of it: every term of its linear form and its constant are (the base is checked at
  launch, see ProgramSpec.align)."""
  from baregrad.ir.symbolic import linear
  terms, k = linear(idx)
  g = math.gcd(k, *terms.values()) if terms else k
  c = 8 if itemsize <= 2 else 4   # 8 lanes only of 16-bit types (a renderer moves them as 4 32-bit words)
  while c > 1 and (n % c or c * itemsize > mem_bytes or (g % c if g else False)): c //= 2
  return c

def devectorize(sink: UOp, mem_bytes: int = 0) -> UOp:
  """Every vector op becomes one scalar op per lane (for renderers without vector types). With mem_bytes, loads and
  stores of contiguous lanes stay vectors of up to that many bytes where the index proves the alignment (128-bit
  ld/st.v4 on GPUs); their lanes are then read with GEP."""
  lanes: dict[UOp, list[UOp]] = {}
  def chunk(u: UOp, d: DType, idx: UOp) -> int:
    if not mem_bytes or d.scalar == dtypes.bool or d.scalar.itemsize < 2: return 1
    return _aligned_chunk(idx, d.count, d.scalar.itemsize, mem_bytes)
  for u in sink.toposort():
    n = u.dtype.count
    if u.op is Ops.VECTORIZE: lanes[u] = [x for s in u.src for x in lanes[s]]; continue  # sources concatenated
    if is_fragment(u): lanes[u] = [u.replace(src=tuple(lanes[s][0] for s in u.src))]; continue
    if u.op is Ops.WMMA:  # stays one vector instruction on fragment vectors; its lanes are read with GEP
      w = UOp(Ops.WMMA, u.dtype, tuple(lanes[s][0] if is_fragment(s) else UOp(Ops.VECTORIZE, s.dtype, tuple(lanes[s])) for s in u.src), u.arg)
      lanes[u] = [UOp(Ops.GEP, u.dtype.scalar, (w,), (i,)) for i in range(n)]
      continue
    if u.op is Ops.GEP: lanes[u] = [lanes[u.src[0]][i] for i in u.arg]; continue
    # a vector access: lane i at index + i, with its own lane of a vector mask (then no vector memory access here)
    def rest_of(idx: UOp, i: int) -> tuple[UOp, ...]: return tuple(lanes[s][i if s.dtype.count > 1 else 0] for s in idx.src[2:])
    def lane_masks(idx: UOp) -> bool: return any(s.dtype.count > 1 for s in idx.src[2:])
    if u.op is Ops.LOAD and n > 1:
      idx, dep = u.src[0], tuple(lanes[s][0] for s in u.src[1:])
      base, rest = lanes[idx.src[1]][0], tuple(lanes[s][0] for s in idx.src[2:])
      c = 1 if lane_masks(idx) else chunk(u, u.dtype, base)
      if c > 1:
        vl = [UOp(Ops.LOAD, u.dtype.scalar.vec(c), (idx.src[0].index((base + i).simplify(), *rest),) + dep) for i in range(0, n, c)]
        lanes[u] = [UOp(Ops.GEP, u.dtype.scalar, (vl[i // c],), (i % c,)) for i in range(n)]
        continue
      lanes[u] = [UOp(Ops.LOAD, u.dtype.scalar, (idx.src[0].index(base + i, *rest_of(idx, i)),) + dep) for i in range(n)]
      continue
    if u.op is Ops.STORE and u.src[1].dtype.count > 1:
      idx, dep = u.src[0], tuple(lanes[s][0] for s in u.src[2:])
      vs = lanes[u.src[1]]
      base, rest = lanes[idx.src[1]][0], tuple(lanes[s][0] for s in idx.src[2:])
      c = 1 if lane_masks(idx) else chunk(u, u.src[1].dtype, base)
      if c > 1:
        sts = tuple(UOp(Ops.STORE, dtypes.void, (idx.src[0].index((base + i).simplify(), *rest),
                                                 UOp(Ops.VECTORIZE, vs[0].dtype.vec(c), tuple(vs[i:i + c]))) + dep, u.arg) for i in range(0, len(vs), c))
      else: sts = tuple(UOp(Ops.STORE, dtypes.void, (idx.src[0].index(base + i, *rest_of(idx, i)), v) + dep, u.arg) for i, v in enumerate(vs))
      lanes[u] = [UOp(Ops.NOOP, dtypes.void, sts)]
      continue
    if n > 1:
      if u.op is Ops.REDUCE:
        lanes[u] = [UOp(Ops.REDUCE, u.dtype.scalar, (lanes[u.src[0]][i],) + u.src[1:], u.arg) for i in range(n)]
      else:
        lanes[u] = [UOp(u.op, u.dtype.scalar, tuple(lanes[s][i] if s.dtype.count > 1 else lanes[s][0] for s in u.src), u.arg) for i in range(n)]
      continue
    src = tuple(lanes[s][0] if s.dtype.count == 1 or u.op in (Ops.SINK, Ops.NOOP) else lanes[s][0] for s in u.src)
    if u.op in (Ops.SINK, Ops.NOOP):
      src = tuple(x for s in u.src for x in lanes[s])
    lanes[u] = [u if src == u.src else u.replace(src=src)]
  return lanes[sink][0]

def get_program(ast: UOp, ren: Renderer, opts: list[Opt] | None = None, name: str | None = None, vector_mem: bool = True) -> ProgramSpec:
  """Compile one kernel AST to source for `ren`. opts=None: the default heuristic (none with NOOPT=1).
  vector_mem=False: no vector loads/stores wider than a lane (for buffers whose address is not aligned)."""
  for u in ast.toposort():
    d = u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype.scalar
    if d != dtypes.void and not ren.supports_dtype(d):
      raise KernelError(f"dtype {d} is not supported by the {ren.name} renderer (used by {u.op.name})")
  k = Kernel(ast, name, max_parallel=len(ren.global_max) or 1, gpu=ren.has_local, ren=ren)
  if opts is None: opts = [] if knobs.get("NOOPT") else heuristic_opts(k, ren)
  else:
    for o in opts: k.apply_opt(o)
  fname = k.function_name()
  if DEBUG() >= 2: print(f"kernel {fname}: shape {k.colored_shape()} opts {k.applied}", file=sys.stderr)
  viz = helpers.viz_sink
  stages: list[tuple[str, UOp]] | None = [("ast", ast)] if viz is not None else None
  sink = k.lower()
  if stages is not None: stages.append(("lower", sink))
  sink = expand_lanes(sink, runs=ren.has_local)
  if stages is not None: stages.append(("expand_lanes", sink))
  pm = symbolic + vector_simplify + (ren.extra_matcher or PatternMatcher([]))
  sink = graph_rewrite(sink, pm)
  if stages is not None: stages.append(("symbolic", sink))
  if not ren.vectorized: sink = graph_rewrite(devectorize(sink, ren.mem_vector_bytes if vector_mem else 0), symbolic)
  else: sink = graph_rewrite(split_wide(sink, VECTOR_LANES), vector_simplify)
  if stages is not None: stages.append(("devectorize" if not ren.vectorized else "split_wide", sink))
  # every buffer of the AST stays a kernel parameter, even one whose loads simplified away (the ABI is by position)
  have = {u for u in sink.toposort() if u.op is Ops.DEFINE_GLOBAL}
  if missing := tuple(b for b in k.buffers() if b not in have): sink = sink.replace(src=sink.src + missing)
  if DEBUG() >= 4: print(pretty(sink, limit=10_000), file=sys.stderr)
  uops = linearize(sink)
  if DEBUG() >= 5:
    for i, u in enumerate(uops):
      print(f"{i:4d} {u.op.name:12s} {u.dtype!r:24s} {[uops.index(s) if s in uops else '-' for s in u.src]} {u.arg!r}", file=sys.stderr)
  # IMAGE: the buffers read through textures (a build without vector accesses, for views at an offset, reads plainly)
  images = frozenset(k.images) if vector_mem else frozenset()
  src = ren.render(fname, uops, images=images) if images else ren.render(fname, uops)  # type: ignore[call-arg]  # (images: the NIR renderer's)
  if DEBUG() >= 3: print(src, file=sys.stderr)
  align: dict[int, int] = {}
  if not ren.vectorized:
    for u in uops:
      if u.op in (Ops.LOAD, Ops.STORE) and (d := u.dtype if u.op is Ops.LOAD else u.src[1].dtype).count > 1 and u.src[0].src[0].op is Ops.DEFINE_GLOBAL:
        align[u.src[0].src[0].arg] = max(align.get(u.src[0].src[0].arg, 1), d.nbytes)
  for slot in images: align[slot] = max(align.get(slot, 1), 64)   # an image's base address: 64-byte aligned (drivers/qcom/texture.py)
  if viz is not None: viz("program", name=fname, renderer=ren.name, shape=k.colored_shape(), opts=list(k.applied), stages=stages,
                          uops=uops, src=src, global_size=k.global_size(), local_size=k.local_size())
  dyn = ren.dynamic_shared_bytes(src) if hasattr(ren, "dynamic_shared_bytes") else 0
  ls = k.local_size()
  if (extra := ren.producer_threads(src) if hasattr(ren, "producer_threads") else 0): ls = (ls[0] + extra, ls[1], ls[2])
  return ProgramSpec(fname, src, k.global_size(), ls, k.buffers(), k.vars(), list(k.applied), uops, ast, align, dyn, tuple(sorted(images)))
