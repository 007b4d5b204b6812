"""A kernel AST and its iteration space; optimization actions as data; lowering to index arithmetic over ranges
(Kernel.lower; the steps are codegen/lower.py's, with codegen/stage.py for shared-memory tiles and codegen/tc_lower.py
for tensor-core fragments).

Kernel AST (what the scheduler hands the codegen):
  SINK(STORE(DEFINE_GLOBAL, VIEW(ShapeTracker), value), ...)
  value := LOAD(DEFINE_GLOBAL, VIEW) | CONST [VIEW] | ALU(value...) | CAST/BITCAST(value) | REDUCE_AXIS(value, arg=(op, axes))
Every VIEW has the same number of dimensions; the iteration space (full shape) is their per-axis maximum; an
axis where the stores have size 1 and the inputs more is reduced by a REDUCE_AXIS over it.
"""
from __future__ import annotations
import functools
from dataclasses import dataclass
from enum import Enum, auto
from baregrad.helpers import prod
from baregrad.ir.dtype import DType, dtypes, PtrDType
from baregrad.ir.ops import UOp, Ops, GroupOp
from baregrad.ir.view import ShapeTracker
from baregrad.ir.sint import sint, is_sym, sym_eq, smax, st_vars
from baregrad.codegen.merge_axes import merge_axes

class KernelError(ValueError): pass
class OptError(ValueError): pass

class OptOps(Enum):
  UPCAST = auto()    # split an output axis; the inner part becomes vector lanes (registers), vectorized loads/stores
  UNROLL = auto()    # split a reduce axis; the inner part becomes lanes: several accumulators, horizontal reduce after
  SPLIT = auto()     # split any axis into two nested loops (outer, inner of `amt`): tiling, split of a reduce loop
  PARALLEL = auto()  # run an output axis over the device's threads (CPU cores); one per kernel
  LOCAL = auto()     # split an output axis; the inner part runs over a workgroup's threads (GPUs)
  GROUP = auto()     # split a reduce axis; the inner part runs over a workgroup's threads, each reduces its share and the
                     # partial results are combined through shared memory (every thread of the group gets the result)
  SHARE = auto()     # split an output axis that no reduction reads (the elementwise tail of a row-fused kernel, which
                     # writes the rows its reductions read); the inner part of amt (the GROUP's size) runs over the GROUP's
                     # own threads, the outer part stays a loop after the reductions: one workgroup per row, no thread
                     # computes the reductions of another's elements again
  SMEM = auto()      # stage a reduction input's tile in shared memory (axis: which, see Kernel.stage_candidates): per step
                     # of the outermost reduce loop the workgroup loads it cooperatively (coalesced), then every thread
                     # reads its operands from there, between barriers; amt: the pipeline's stages (shared buffers
                     # the asynchronous copies run ahead into, 2..4; 0: two where the target has them, else one)
  TC = auto()        # tensor cores (axis: index into the renderer's tensor_cores): a matmul-shaped reduction runs as
                     # warp-wide matrix instructions; its output axes take the accumulator fragment's lane/element layout
  IMAGE = auto()     # read a float32/float16 input buffer through the texture unit (axis: which, see Kernel.image_candidates;
                     # amt 0): targets with images (Adreno) load it as RGBA texels with isam, from the texture cache
  PADTO = auto()     # pad an unsplit axis up to a multiple of amt: loads and stores past its end are masked off, and a
                     # reduction sees its identity there (so awkward sizes take the same tiles as round ones)
  def __repr__(self) -> str: return f"OptOps.{self.name}"

@dataclass(frozen=True)
class Opt:
  op: OptOps
  axis: int
  amt: int = 0   # 0: the whole axis
  def __repr__(self) -> str: return f"Opt({self.op.name}, axis={self.axis}, amt={self.amt})"

# what one opt may make the kernel's code: lanes of one value (256 float32 = 16 AVX-512 registers), their bytes, and the
# estimated register-width operations of one iteration's unrolled body (Kernel.code_estimate); beyond these LLVM and the
# C compiler spend seconds on straight-line code and the registers spill anyway
MAX_LANES, MAX_LANE_BYTES, CODE_BUDGET = 256, 1024, 1024
MAX_STAGES = 4      # SMEM: most shared buffers a pipeline of asynchronous copies cycles through
VECTOR_LANES = 16   # lanes a renderer keeps in one register (the LLVM renderer splits wider values into chunks of this)

LOOP_KINDS = ("global", "local", "group", "loop", "reduce")
LANE_KINDS = ("upcast", "unroll")
THREAD_KINDS = ("local", "group")   # axes that are thread indices inside a workgroup
# "share": an output axis part whose index is the GROUP part's thread index (OptOps.SHARE): no threads of its own

@dataclass
class Axis:
  orig: int       # which axis of the full shape it is part of
  size: int
  kind: str       # global, local, group, loop, reduce, upcast, unroll; tc (the reduction a tensor core takes whole)
  # tensor-core part: (source, first coordinate bit, first source bit): its value is coordinate bits from fragment
  # element-index bits ("elem", upcast) or lane-id bits ("lane", local); the tc-kind part of the reduce axis is ("k", 0, 0)
  tc: tuple | None = None

def verify_ast(ast: UOp) -> tuple[sint, ...]:
  """Check the AST's structure and return the full shape; errors name what is wrong."""
  if ast.op is not Ops.SINK or not ast.src: raise KernelError(f"kernel AST must be a SINK of STOREs, got {ast.op.name}")
  shapes: list[tuple[sint, ...]] = []
  for st in ast.src:
    if st.op is not Ops.STORE or len(st.src) != 3 or st.src[0].op is not Ops.DEFINE_GLOBAL or st.src[1].op is not Ops.VIEW:
      raise KernelError(f"kernel AST: each SINK source must be STORE(DEFINE_GLOBAL, VIEW, value), got {st.op.name} with "
                        f"{[s.op.name for s in st.src]}")
    if isinstance(st.src[0].dtype, PtrDType) and st.src[2].dtype.scalar != st.src[0].dtype.base.scalar:
      raise KernelError(f"STORE of a {st.src[2].dtype} value into buffer {st.src[0].arg} of {st.src[0].dtype.base}: cast first")
  for u in ast.toposort():
    if u.op is Ops.VIEW:
      if not isinstance(u.arg, ShapeTracker): raise KernelError(f"VIEW arg must be a ShapeTracker, got {type(u.arg).__name__}")
      shapes.append(u.arg.shape)
    if u.op is Ops.LOAD and (len(u.src) not in (2, 3) or u.src[0].op is not Ops.DEFINE_GLOBAL or u.src[1].op is not Ops.VIEW):
      raise KernelError(f"LOAD must be LOAD(DEFINE_GLOBAL, VIEW) or LOAD(DEFINE_GLOBAL, VIEW, index), got sources {[s.op.name for s in u.src]}")
    if u.op is Ops.LOAD and len(u.src) == 3:   # a gather (engine/schedule.py _gather)
      if not (dtypes.is_int(u.src[2].dtype) and u.src[2].dtype.count == 1):
        raise KernelError(f"a gather LOAD's index must be an integer scalar, got {u.src[2].dtype}")
      if not (isinstance(u.arg, tuple) and len(u.arg) == 2 and 0 <= u.arg[0] < len(u.src[1].arg.shape) and u.arg[1] >= 1):
        raise KernelError(f"a gather LOAD's arg must be (axis, extent >= 1) of its view of shape {u.src[1].arg.shape}, got {u.arg!r}")
    if u.op is Ops.LOAD and isinstance(u.src[0].dtype, PtrDType) and u.dtype.scalar != u.src[0].dtype.base.scalar:
      raise KernelError(f"LOAD of {u.dtype} from buffer {u.src[0].arg} of {u.src[0].dtype.base}: load the buffer's dtype and cast")
    if u.op is Ops.DEFINE_GLOBAL and not isinstance(u.dtype, PtrDType): raise KernelError(f"DEFINE_GLOBAL {u.arg} must have a pointer dtype, got {u.dtype}")
    if u.op in GroupOp.ALU:
      ds = {s.dtype for s in u.src[(1 if u.op is Ops.WHERE else 0):]}
      if len(ds) > 1 and u.op not in (Ops.SHL, Ops.SHR): raise KernelError(f"{u.op.name} sources have different dtypes {sorted(map(str, ds))}: cast first")
      if u.op is Ops.WHERE and u.src[0].dtype.scalar != dtypes.bool: raise KernelError(f"WHERE condition must be bool, got {u.src[0].dtype}")
      if u.op in (Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR) and dtypes.is_float(u.dtype):
        raise KernelError(f"{u.op.name} needs an integer or bool dtype, got {u.dtype}")
      if u.op in GroupOp.Transcendental | {Ops.FDIV, Ops.RECIP} and not dtypes.is_float(u.dtype):
        raise KernelError(f"{u.op.name} needs a float dtype, got {u.dtype}")
    if u.op is Ops.BITCAST and (u.dtype.scalar == dtypes.bool or u.src[0].dtype.scalar == dtypes.bool):
      raise KernelError(f"BITCAST from {u.src[0].dtype} to {u.dtype}: bools have no defined bit pattern, use CAST")
    if u.op is Ops.REDUCE_AXIS and (not isinstance(u.arg, tuple) or u.arg[0] not in GroupOp.Reduce):
      raise KernelError(f"REDUCE_AXIS arg must be (op, axes) with op in ADD/MUL/MAX, got {u.arg!r}")
  if not shapes: raise KernelError("kernel AST has no VIEW: nothing says the iteration space")
  ndims = {len(s) for s in shapes}
  if len(ndims) != 1: raise KernelError(f"every VIEW in a kernel must have the same number of axes, got shapes {shapes}")
  # an axis of size 0 anywhere makes the iteration space empty there (a reduction over it gives the identity); a
  # symbolic size (ir/sint.py) is the axis' size wherever a view has it
  def extent(i: int) -> sint:
    if any(s[i] == 0 for s in shapes): return 0
    sym = [s[i] for s in shapes if is_sym(s[i])]
    if sym:
      if any(not sym_eq(x, sym[0]) for x in sym) or any(not is_sym(s[i]) and s[i] != 1 for s in shapes):
        raise KernelError(f"axis {i} has different sizes in the kernel's views: {[s[i] for s in shapes]}")
      return sym[0]
    return max(smax(s[i]) for s in shapes)   # (ints here: no view has a symbolic size on this axis)
  full = tuple(extent(i) for i in range(ndims.pop()))
  for u in ast.toposort():
    if u.op is Ops.REDUCE_AXIS and not all(isinstance(a, int) and 0 <= a < len(full) for a in u.arg[1]):
      raise KernelError(f"REDUCE_AXIS over axes {u.arg[1]}: the kernel has {len(full)} axes (shape {full})")
  for s in shapes:
    if any(not sym_eq(a, b) and a != 1 for a, b in zip(s, full)): raise KernelError(f"VIEW shape {s} does not fit the iteration space {full}")
  return full

def nested_reduce_axes(k: "Kernel") -> set[int]:
  """The axes only reductions nested in another reduction's input reduce, where that input reads the inner
  reduction per step of its own loop (an attention kernel's dot products per key, engine/attention_fusion.py); empty
  for other kernels (softmax's max inside its sum reads it once per row: not per step)."""
  return set(_nested_reduce_axes(k.ast))

@functools.lru_cache(maxsize=256)
def _nested_reduce_axes(ast: UOp) -> frozenset[int]:
  # (asked by the heuristic and again by the lowering of the same AST)
  reds = [u for u in ast.toposort() if u.op is Ops.REDUCE_AXIS]
  inner: set[int] = set()
  for u in reds:
    for x in u.src[0].toposort():
      if x.op is Ops.REDUCE_AXIS and set(x.arg[1]) != set(u.arg[1]) and any(
          y.op is Ops.VIEW and any(y.arg.shape[a] != 1 for a in u.arg[1]) for y in x.toposort()):
        inner |= set(x.arg[1])
  for u in reds:   # (axes a top-level reduction reduces are not inner ones)
    if not any(u in r.src[0].toposort() for r in reds if r is not u): inner -= set(u.arg[1])
  return frozenset(inner)

INT32_MAX = 2 ** 31 - 1

def index_dtype(ast: UOp) -> DType:
  """int32 index arithmetic, unless a view of the kernel can reach an index past it (a buffer or an iteration space of
  more than 2^31 elements): then int64 everywhere in the kernel's index math."""
  for u in ast.toposort():
    if u.op is Ops.LOAD and len(u.src) == 3:   # a gather reaches its source's extent along its axis
      dim, extent = u.arg
      v = u.src[1].arg.views[0]
      if abs(v.offset) + sum(abs(st) * max((extent if i == dim else s) - 1, 0) for i, (s, st) in enumerate(zip(v.shape, v.strides))) > INT32_MAX:
        return dtypes.int64
    if u.op is not Ops.VIEW: continue
    for v in u.arg.views:
      shape = [smax(s) for s in v.shape]   # (a symbolic size at its largest value)
      off = max(abs(v.offset.vmin), abs(v.offset.vmax)) if is_sym(v.offset) else abs(v.offset)
      # a view's index is its reach: in a stack, each view below unravels the index the one above reaches (its parts
      # within that) and reaches its own (an expanded view's size is no bound: a convolution's im2col operand is
      # 32x64x3136x576 > 2^31 positions over a 58M-element reach). An index the lowering's simplification widens
      # past int32 is caught there (_may_wrap) and lowered again in int64.
      if off + sum(abs(st) * max(s - 1, 0) for s, st in zip(shape, v.strides)) > INT32_MAX:
        return dtypes.int64
  return dtypes.int32

def _may_wrap(e: UOp) -> bool:
  """Some int32 node of the index expression e may leave int32: its interval bounds are the whole range, which is what
  the bounds of a sum or product that can overflow are (ir/ops.py _clip); an index computed from RANGEs, SPECIALs and
  constants has narrower bounds wherever it cannot."""
  for u in e.toposort():
    if u.dtype == dtypes.int32 and u.op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG) and u.vmin == -INT32_MAX - 1 and u.vmax == INT32_MAX:
      return True
  return False

class Kernel:
  """The AST plus how its iteration space is split into loops and lanes; `apply_opt` changes only the latter.

  `ren` (a Renderer) tells what the target declares: threads per workgroup (local_max), shared memory (shared_max)."""
  def __init__(self, ast: UOp, name: str | None = None, max_parallel: int = 1, gpu: bool = False, ren: object = None):
    full = verify_ast(ast)
    # symbolic axes (ir/sint.py): their loop runs to the variable's value (a kernel argument); for the optimizer they
    # have their largest size, and no opt splits, pads or parallelizes them (Kernel.apply_opt)
    self.sym: dict[int, UOp] = {i: s for i, s in enumerate(full) if isinstance(s, UOp)}
    self.full_shape: tuple[int, ...] = tuple(smax(s) for s in full)
    # CPU: axes every view walks as one merge into one (codegen/merge_axes: longer vector loops). GPU kernels keep the
    # tensors' axes: their grid and workgroup shapes (and the static checks of their machine code) are planned on them
    if not gpu and not self.sym and (m := merge_axes(ast, self.full_shape)) is not ast: ast, self.full_shape = m, tuple(smax(s) for s in verify_ast(m))
    self.ast = ast
    # CPU: one axis split over threads; GPU: up to three grid axes, and workgroup (local) axes become thread ids
    self.max_parallel, self.gpu = max_parallel, gpu
    self.local_max: int = int(getattr(ren, "local_max", 0) or 1024)
    self.shared_max: int = int(getattr(ren, "shared_max", 0) or 48 << 10)
    self.target: str = str(getattr(ren, "arch", "") or getattr(ren, "name", "") or "the device")   # (names it in errors)
    red: set[int] = set()
    for u in ast.toposort():
      if u.op is Ops.REDUCE_AXIS: red |= set(u.arg[1])
    for st in ast.src:
      for a in red:
        if st.src[1].arg.shape[a] != 1: raise KernelError(f"reduced axis {a} must have size 1 in the stored VIEW, got shape {st.src[1].arg.shape}")
    self.reduce_axes = red
    # accumulating axes: output loops the store does not move along (codegen/rowstream: a pass over rows adds to what
    # the passes before it stored). Their iterations must run in order on one thread: no threads, lanes or padding
    self.acc_axes: set[int] = {o for st in ast.src for o, (n, s) in enumerate(zip(st.src[1].arg.shape, st.src[1].arg.real_strides()))
                               if o not in red and self.full_shape[o] > 1 and (n == 1 or s == 0)}
    self.axes: list[Axis] = [Axis(i, s, "reduce" if i in red else "loop") for i, s in enumerate(self.full_shape) if s != 1 or i in self.sym]
    self.applied: list[Opt] = []
    self.tail_axes: set[int] = set()   # SHARE: output axes split over the GROUP's threads (their outer part stays a loop)
    self.pads: dict[int, int] = {}   # padded full-shape axis -> its real size
    self.staged: list[int] = []      # SMEM: indices into stage_candidates()
    self.stages = 0                  # SMEM: the pipeline's stages an opt asked for (0: the default, stage_buffers)
    self.images: set[int] = set()    # IMAGE: buffer slots read through the texture unit
    self.has_images: bool = bool(getattr(ren, "has_images", False))
    self.tc: tuple | None = None     # TC: (TensorCore, m axis, n axis, k axis, A load, B load)
    self.tensor_cores: tuple = tuple(getattr(ren, "tensor_cores", ()) or ())
    self.async_copy: bool = bool(getattr(ren, "has_async_copy", False))
    self.has_ldmatrix: bool = bool(getattr(ren, "has_ldmatrix", False))
    self.has_tma: bool = bool(getattr(ren, "has_tma", False))   # TMA loads of staged tiles (codegen/tma.py)
    self.name = name

  # ---- the optimizer's view: loop axes are numbered in order; lanes are not addressable by opts
  def loop_axes(self) -> list[int]: return [i for i, a in enumerate(self.axes) if a.kind in LOOP_KINDS]
  @property
  def lanes(self) -> int: return prod(a.size for a in self.axes if a.kind in LANE_KINDS)
  @property
  def threads(self) -> int: return prod(a.size for a in self.axes if a.kind in THREAD_KINDS)
  def n_reduces(self) -> int: return sum(1 for u in self.ast.toposort() if u.op is Ops.REDUCE_AXIS)
  def group_smem_bytes(self, threads: int | None = None) -> int:
    """Shared memory the GROUP combine needs: one slot per thread and output lane, for every reduction."""
    if not any(a.kind == "group" for a in self.axes): return 0
    up = prod(a.size for a in self.axes if a.kind == "upcast")
    isz = max((u.dtype.itemsize for u in self.ast.toposort() if u.op is Ops.REDUCE_AXIS), default=4)
    return (self.threads if threads is None else threads) * up * isz * self.n_reduces()

  def image_candidates(self) -> list[int]:
    """Buffer slots the kernel only reads, of float32 or float16 (an image's RGBA texels), in slot order."""
    stored = {u.src[0].arg for u in self.ast.toposort() if u.op is Ops.STORE}
    out = set()
    for u in self.ast.toposort():
      if u.op is Ops.LOAD and u.src[0].op is Ops.DEFINE_GLOBAL and u.src[0].arg not in stored and u.dtype.scalar in (dtypes.float32, dtypes.float16):
        out.add(u.src[0].arg)
    return sorted(out)

  def stage_candidates(self) -> list[UOp]:
    """Loads a reduction reads that move with a reduced axis (the operands of a matmul or a convolution), in order."""
    out = []
    for u in self.ast.toposort():
      if u.op is Ops.LOAD:
        st = u.src[1].arg
        strides = st.real_strides()
        if any(st.shape[a] != 1 and strides[a] != 0 for a in self.reduce_axes): out.append(u)
    return out

  def tc_operands(self) -> tuple[int, int, int, UOp, UOp] | None:
    """(m, n, k, A load, B load) when the kernel's one reduction is a sum of products of two loads (each maybe cast)
    that move along k, A along m but not n and B along n but not m (a matmul, a convolution's channel reduction)."""
    red = [u for u in self.ast.toposort() if u.op is Ops.REDUCE_AXIS]
    if len(red) != 1 or red[0].arg[0] is not Ops.ADD: return None
    # the product may be taken in the inputs' dtype and widened after (a half matmul accumulating in float): the
    # tensor core's products are exact, which only makes that more accurate
    mul = red[0].src[0].src[0] if red[0].src[0].op is Ops.CAST and dtypes.is_float(red[0].src[0].src[0].dtype) else red[0].src[0]
    if mul.op is not Ops.MUL: return None
    ops = [x.src[0] if x.op is Ops.CAST else x for x in mul.src]
    if any(x.op is not Ops.LOAD for x in ops): return None
    st = [x.src[1].arg.real_strides() for x in ops]
    moves = lambda j, o: ops[j].src[1].arg.shape[o] != 1 and st[j][o] != 0
    ks = [o for o in red[0].arg[1] if moves(0, o) and moves(1, o)]
    outs = [a.orig for a in self.axes if a.kind == "loop"]
    for a_, b_ in ((0, 1), (1, 0)):
      ms = [o for o in outs if moves(a_, o) and not moves(b_, o)]
      ns = [o for o in outs if moves(b_, o) and not moves(a_, o)]
      if ms and ns and ks: return ms[-1], ns[-1], max(ks, key=lambda o: self.full_shape[o]), ops[a_], ops[b_]
    return None

  def _apply_tc(self, opt: Opt) -> None:
    from baregrad.codegen.tc import usable
    if not self.gpu or not 0 <= opt.axis < len(self.tensor_cores): raise OptError(f"{opt}: the target has {len(self.tensor_cores)} tensor cores")
    tc = self.tensor_cores[opt.axis]
    if not usable(tc): raise OptError(f"{opt}: {tc.name} takes tf32 inputs and tf32 is not allowed (ALLOW_TF32=1 or codegen.tc.set_allow_tf32)")
    if self.tc is not None or self.staged or any(a.kind == "group" for a in self.axes): raise OptError(f"{opt}: apply TC first, once")
    ops = self.tc_operands()
    if ops is None: raise OptError(f"{opt}: the kernel is not a sum of products of two loads")
    m, n, k, la, lb = ops
    if la.dtype != tc.dtype_in or lb.dtype != tc.dtype_in: raise OptError(f"{opt}: {tc.name} takes {tc.dtype_in}, the loads are {la.dtype} and {lb.dtype}")
    red = next(u for u in self.ast.toposort() if u.op is Ops.REDUCE_AXIS)
    if not (dtypes.is_float(red.dtype) and red.dtype.itemsize >= tc.dtype_in.itemsize):
      raise OptError(f"{opt}: the reduction is {red.dtype}, {tc.name} accumulates {tc.dtype_acc}")
    for o, d in ((m, tc.dims[0]), (n, tc.dims[1]), (k, tc.dims[2])):
      parts = [a for a in self.axes if a.orig == o]
      if len(parts) != 1 or parts[0].kind not in ("loop", "reduce"): raise OptError(f"{opt}: apply TC before splitting axis {o}")
      if parts[0].size % d: raise OptError(f"{opt}: axis {o} of size {parts[0].size} is not a multiple of {d} (PADTO first)")
    if self.threads * tc.threads > self.local_max: raise OptError(f"{opt}: too many threads")
    for o, coord in ((m, "m"), (n, "n")):
      i = next(j for j, a in enumerate(self.axes) if a.orig == o)
      runs: list[list] = []   # [source, first source bit, first coordinate bit, length], low bits first
      for b, (src, j) in enumerate(tc.coord_bits("c", coord)):
        # (lane bits in runs; element bits one part each: the fragment's element ranges are single bits)
        if runs and runs[-1][0] == src == "lane" and runs[-1][1] + runs[-1][3] == j: runs[-1][3] += 1
        else: runs.append([src, j, b, 1])
      self.axes[i].size //= tc.dims[0 if coord == "m" else 1]
      for src, j, b, ln in runs:   # inserted right after the outer part: the lowest bits end up innermost
        self.axes.insert(i + 1, Axis(o, 1 << ln, "upcast" if src == "elem" else "local", (src, b, j)))
    i = next(j for j, a in enumerate(self.axes) if a.orig == k)
    self.axes[i].size //= tc.dims[2]
    self.axes.insert(i + 1, Axis(k, tc.dims[2], "tc", ("k", 0, 0)))
    self.tc = (tc, m, n, k, la, lb)
    self.applied.append(opt)

  def apply_opt(self, opt: Opt) -> None:
    if self.sym and opt.op in (OptOps.TC, OptOps.SMEM): raise OptError(f"{opt}: the kernel has symbolic sizes (axes {sorted(self.sym)})")
    if opt.op is OptOps.TC: return self._apply_tc(opt)
    if opt.op is OptOps.IMAGE:
      if not self.has_images: raise OptError(f"{opt}: the target reads no images (its renderer has no texture path)")
      cands = self.image_candidates()
      if not 0 <= opt.axis < len(cands) or opt.amt: raise OptError(f"{opt}: the kernel has {len(cands)} buffers it can read as images (amt must be 0)")
      if cands[opt.axis] in self.images: raise OptError(f"{opt}: buffer {cands[opt.axis]} is already read as an image")
      self.images.add(cands[opt.axis])
      self.applied.append(opt)
      return
    if opt.op is OptOps.SMEM:
      if not self.gpu: raise OptError(f"{opt}: SMEM needs a device with workgroups and shared memory")
      if self.n_reduces() != 1: raise OptError(f"{opt}: SMEM stages the inputs of a kernel with exactly one reduction")
      if not 0 <= opt.axis < len(self.stage_candidates()): raise OptError(f"{opt}: the kernel has {len(self.stage_candidates())} stageable loads")
      if opt.axis in self.staged: raise OptError(f"{opt}: load {opt.axis} is already staged")
      if opt.amt:
        if not 2 <= opt.amt <= MAX_STAGES: raise OptError(f"{opt}: a pipeline has 2 to {MAX_STAGES} stages, asked {opt.amt}")
        if not self.async_copy: raise OptError(f"{opt}: a {opt.amt}-stage pipeline needs asynchronous copies (cp.async, sm_80+); the target has none")
        if self.stages and self.stages != opt.amt: raise OptError(f"{opt}: the staged loads share one pipeline of {self.stages} stages")
        self.stages = opt.amt
      self.staged.append(opt.axis)
      self.applied.append(opt)
      return
    loops = self.loop_axes()
    if not 0 <= opt.axis < len(loops): raise OptError(f"{opt}: axis out of range, kernel has {len(loops)} loop axes")
    i = loops[opt.axis]
    ax = self.axes[i]
    amt = opt.amt or ax.size
    if ax.tc is not None: raise OptError(f"{opt}: axis {opt.axis} is part of a tensor-core tile")
    if ax.orig in self.sym: raise OptError(f"{opt}: axis {opt.axis} has a symbolic size ({self.sym[ax.orig].render()}): it stays one loop")
    if ax.orig in self.acc_axes and opt.op is not OptOps.SPLIT:
      raise OptError(f"{opt}: axis {opt.axis} accumulates into the stored values (the store does not move along it): it stays a serial loop")
    if ax.orig in self.tail_axes and opt.op is not OptOps.SPLIT:
      raise OptError(f"{opt}: axis {opt.axis} is shared with the GROUP's threads: its outer part stays a loop after the reductions")
    if opt.op is OptOps.SHARE: return self._apply_share(opt, ax, i)
    if opt.op is OptOps.PARALLEL:
      if ax.kind != "loop": raise OptError(f"{opt}: only an output loop axis can run over threads, axis is {ax.kind}")
      if sum(a.kind == "global" for a in self.axes) >= self.max_parallel:
        raise OptError(f"{opt}: the kernel already has {self.max_parallel} parallel axis(es)")
      ax.kind = "global"
    elif opt.op is OptOps.PADTO:
      if ax.kind not in ("loop", "reduce", "global"): raise OptError(f"{opt}: only a loop, reduce or grid axis can be padded, axis is {ax.kind}")
      if sum(a.orig == ax.orig for a in self.axes) != 1 or ax.orig in self.pads: raise OptError(f"{opt}: pad an axis before splitting it")
      if amt < 2 or ax.size % amt == 0: raise OptError(f"{opt}: the axis size {ax.size} is already a multiple of {amt}")
      new = -(-ax.size // amt) * amt
      if new > 2 * ax.size and ax.size >= amt // 2: raise OptError(f"{opt}: padding {ax.size} to {new} more than doubles the work")
      self.pads[ax.orig], ax.size = ax.size, new
    else:
      if amt < 1 or ax.size % amt != 0: raise OptError(f"{opt}: {amt} does not divide the axis size {ax.size}")
      kind = {OptOps.UPCAST: "upcast", OptOps.UNROLL: "unroll", OptOps.SPLIT: ax.kind, OptOps.LOCAL: "local", OptOps.GROUP: "group"}[opt.op]
      if opt.op is OptOps.UPCAST and ax.kind not in ("loop", "global"): raise OptError(f"{opt}: UPCAST needs an output axis, axis is {ax.kind}")
      if opt.op is OptOps.UNROLL and ax.kind != "reduce": raise OptError(f"{opt}: UNROLL needs a reduce axis, axis is {ax.kind}")
      if opt.op is OptOps.LOCAL and ax.kind not in ("loop", "global"): raise OptError(f"{opt}: LOCAL needs an output axis")
      if opt.op is OptOps.GROUP:
        if self.staged: raise OptError(f"{opt}: GROUP and SMEM do not combine")
        if not self.gpu: raise OptError(f"{opt}: GROUP needs a device with workgroups and shared memory")
        if ax.kind != "reduce": raise OptError(f"{opt}: GROUP needs a reduce axis, axis is {ax.kind}")
        if any(u.op is Ops.REDUCE_AXIS and ax.orig not in u.arg[1] for u in self.ast.toposort()):
          raise OptError(f"{opt}: every reduction of the kernel must reduce axis {ax.orig} to share its threads")
      if opt.op in (OptOps.LOCAL, OptOps.GROUP) and self.gpu:
        if self.threads * amt > self.local_max: raise OptError(f"{opt}: {self.threads * amt} threads per workgroup, the device allows {self.local_max}")
      if opt.op in (OptOps.UPCAST, OptOps.UNROLL):
        if self.lanes * amt > MAX_LANES: raise OptError(f"{opt}: {self.lanes * amt} lanes, more than {MAX_LANES} lanes")
        if not self.gpu and self.lanes * amt * self._itemsize() > MAX_LANE_BYTES:
          raise OptError(f"{opt}: {self.lanes * amt} lanes of {self._itemsize()} bytes, the most is {MAX_LANE_BYTES} bytes")
      saved = [Axis(a.orig, a.size, a.kind, a.tc) for a in self.axes]
      if amt == ax.size and opt.op is not OptOps.SPLIT: ax.kind = kind
      else:
        ax.size //= amt
        self.axes.insert(i + 1, Axis(ax.orig, amt, kind))
      if (need := self.group_smem_bytes()) > self.shared_max:
        raise OptError(f"{opt}: the workgroup reduction needs {need} bytes of shared memory, the device allows {self.shared_max}")
      if not self.gpu and opt.op in (OptOps.UPCAST, OptOps.UNROLL) and (est := self.code_estimate()) > CODE_BUDGET:
        self.axes = saved
        raise OptError(f"{opt}: the unrolled body would be about {est} register operations, the budget is {CODE_BUDGET}")
    self.applied.append(opt)

  def _apply_share(self, opt: Opt, ax: Axis, i: int) -> None:
    groups = [a for a in self.axes if a.kind == "group"]
    if len(groups) != 1: raise OptError(f"{opt}: SHARE needs exactly one GROUP part to share the threads of, the kernel has {len(groups)}")
    if ax.kind != "loop": raise OptError(f"{opt}: SHARE needs an output loop axis, axis is {ax.kind}")
    if opt.amt != groups[0].size or ax.size % opt.amt:
      raise OptError(f"{opt}: the amount must be the GROUP's {groups[0].size} threads and divide the axis size {ax.size}")
    if any(x.op is Ops.LOAD and x.src[1].arg.shape[ax.orig] != 1 for r in self.ast.toposort() if r.op is Ops.REDUCE_AXIS for x in r.toposort()):
      raise OptError(f"{opt}: a reduction reads along axis {opt.axis}: threads sharing it would each need their own result")
    if ax.size == opt.amt: ax.kind = "share"
    else:
      ax.size //= opt.amt
      self.axes.insert(i + 1, Axis(ax.orig, opt.amt, "share"))
    self.tail_axes.add(ax.orig)
    self.applied.append(opt)

  def _itemsize(self) -> int:
    return max((u.dtype.itemsize for u in self.ast.toposort() if u.dtype != dtypes.void and not isinstance(u.dtype, PtrDType)), default=4)

  def code_estimate(self) -> int:
    """Register-width operations one iteration of the innermost loop expands to, with the lanes as they are (CPUs): an
    ALU op costs one per VECTOR_LANES lanes it varies over; a memory access one per contiguous run of VECTOR_LANES (lanes
    along which it does not move cost nothing), and four per lane where its index is not affine (a gather)."""
    lane_axes = [(i, a) for i, a in enumerate(self.axes) if a.kind in LANE_KINDS]
    if not lane_axes: return 0
    inner = {i: prod(b.size for j, b in enumerate(self.axes) if b.orig == a.orig and j > i) for i, a in lane_axes}
    moves: dict[UOp, frozenset[int]] = {}
    total = 0
    for u in self.ast.toposort():
      if u.op in (Ops.LOAD, Ops.STORE):
        st = u.src[1].arg
        rs = st.real_strides()
        mv = frozenset(o for o, n in enumerate(st.shape) if n != 1 and rs[o] != 0)
        cost = 1
        for i, a in lane_axes:
          if a.orig not in mv: continue
          if rs[a.orig] is None: cost *= 4 * a.size
          elif rs[a.orig] * inner[i] in (1, -1): cost *= -(-a.size // VECTOR_LANES)
          else: cost *= a.size
        total += cost
        moves[u] = mv if u.op is Ops.LOAD else frozenset()
        continue
      mv = frozenset().union(*(moves.get(x, frozenset()) for x in u.src))
      if u.op in GroupOp.ALU or u.op in (Ops.CAST, Ops.BITCAST, Ops.REDUCE_AXIS):
        total += -(-prod(a.size for _, a in lane_axes if a.orig in mv) // VECTOR_LANES)
      moves[u] = mv - frozenset(u.arg[1]) if u.op is Ops.REDUCE_AXIS else mv
    return total

  # ---- thread indices
  def thread_axes(self) -> list[int]:
    """Workgroup axes, outermost first; the last one varies fastest between neighbouring threads."""
    th = [i for i, a in enumerate(self.axes) if a.kind in THREAD_KINDS]
    # the lanes of a tensor-core tile must be a warp's lane id: innermost, the high lane bits outermost
    return sorted(th, key=lambda i: (self.axes[i].tc is not None, -tc[2] if (tc := self.axes[i].tc) else 0))
  def threads_flat(self) -> bool:
    """More than three workgroup axes (or a tensor-core tile and two more): one flat thread index (x) is split into
    them by division."""
    return len(self.thread_axes()) > 3

  # ---- lowering: AST -> graph of INDEX/LOAD/STORE/ALU/REDUCE over RANGE uops
  def lower(self) -> UOp:
    """The AST over RANGE/SPECIAL indices, its index math in int32 where every index expression provably stays in
    int32 (index_dtype, then the interval bounds of each address computed: a padded axis or a stack of views can reach
    past what the AST's views say), else in int64."""
    from baregrad.codegen.lower import Lowering   # (here: lower.py imports this module)
    if index_dtype(self.ast) == dtypes.int32:
      lw = Lowering(self, dtypes.int32)
      out = lw.run()
      if not lw.wraps: return out
    return Lowering(self, dtypes.int64).run()

  def stage_axis(self) -> int | None:
    """SMEM: the outermost reduce loop (the first reduce part in range order); the tiles are filled once per step."""
    red = [i for i, a in enumerate(self.axes) if a.kind == "reduce" and a.size > 1]
    return red[0] if red else None
  def stage_tile(self, ld: UOp, si: int | None) -> list[int]:
    """SMEM: the axis parts a staged load's tile spans (workgroup, lane and inner reduce parts it moves with)."""
    st: ShapeTracker = ld.src[1].arg
    strides, masked = st.real_strides(), st.valid_axes()
    # (an axis only the validity reads moves the load too: a padded 1x1 image's 3x3 windows read the one pixel at the
    # centre tap and 0 elsewhere; left out of the tile, every tap read the centre's staged value)
    return [i for i, a in enumerate(self.axes) if a.size > 1 and st.shape[a.orig] != 1 and (strides[a.orig] != 0 or a.orig in masked) and
            (a.kind in THREAD_KINDS + LANE_KINDS + ("tc",) or (a.kind == "reduce" and i != si))]
  def stage_buffers(self, stages: int | None = None) -> int:
    """SMEM: shared buffers per staged tile: 1 without asynchronous copies; with them the pipeline's stages (`stages`,
    else the SMEM opts', default 2), no more than the stage loop's steps + 1 (the copies run at most that far ahead)."""
    if not self.async_copy: return 1
    si = self.stage_axis()
    want = stages or self.stages or 2
    return max(2, min(want, self.axes[si].size + 1)) if si is not None else want
  def stage_bytes(self, j: int, stages: int | None = None) -> int:
    """Shared memory the tile of stage candidate j needs with the current axes (0: it has no tile), times the buffers of
    its pipeline (stage_buffers)."""
    ld = self.stage_candidates()[j]
    tile = self.stage_tile(ld, self.stage_axis())
    return prod(self.axes[i].size for i in tile) * ld.dtype.itemsize * self.stage_buffers(stages) if tile else 0
  def stage_reuse(self, j: int) -> bool:
    """Whether threads of a workgroup share elements of candidate j's tile (some workgroup axis it does not move with)."""
    tile = set(self.stage_tile(self.stage_candidates()[j], self.stage_axis()))
    return any(i not in tile and self.axes[i].size > 1 for i in self.thread_axes())

  def _dims(self, kind: str) -> tuple[int, int, int]:
    if kind == "local":
      g = [self.axes[i].size for i in self.thread_axes()]
      if self.gpu and len(g) > 3: return (prod(g), 1, 1)
    else: g = [a.size for a in self.axes if a.kind == kind]
    if not self.gpu: return (prod(g) if g else 1, 1, 1)
    g = list(reversed(g)) + [1, 1, 1]  # x is the innermost axis
    return (g[0], g[1], g[2])
  def global_size(self) -> tuple[int, int, int]:
    """CPU: the parallel axis' extent; GPU: workgroups per grid dimension."""
    return self._dims("global")
  def local_size(self) -> tuple[int, int, int]:
    """GPU: threads per workgroup per dimension."""
    return self._dims("local")
  def buffers(self) -> list[UOp]:
    return sorted((u for u in self.ast.toposort() if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg)
  def vars(self) -> list[UOp]:
    """The kernel's variables: in its values and in its views' symbolic sizes and offsets, sorted by name."""
    vs = {u for u in self.ast.toposort() if u.op is Ops.DEFINE_VAR}
    for u in self.ast.toposort():
      if u.op is Ops.VIEW: vs |= st_vars(u.arg)
    return sorted(vs, key=lambda u: u.arg[0])
  def colored_shape(self) -> str:
    return " ".join(f"{a.size}{'G' if a.kind == 'group' else a.kind[0]}" for a in self.axes)
  def function_name(self) -> str:
    if self.name: return self.name
    kind = "r" if self.reduce_axes else "E"
    return f"{kind}_" + "_".join(str(a.size) for a in self.axes if a.kind in LOOP_KINDS) or kind
