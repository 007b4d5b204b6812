"""The tensor-level graph: UOps with shapes, over device buffers.

  BUFFER(arg=BufRef)            a flat device buffer, shape (size,)
  RESHAPE/PERMUTE/EXPAND/PAD/SHRINK/FLIP(x, arg)   movements (kept apart for autograd; the scheduler folds them)
  CONST(arg=value)              a scalar, shape (); broadcast with VIEW
  IOTA(arg=n)                   0, 1, ..., n-1, shape (n,) (arange; computed from the index where it is read)
  GATHER(src, index, arg=(dim,)) src at index along dim (torch.gather), the shape of index: a load from src's memory
  ALU / CAST / BITCAST          elementwise, the shape of their sources (THREEFRY, random bits, is one ALU node here)
  REDUCE_AXIS(x, arg=(op, axes)) keepdim reduction
  COPY(x, arg=device), CONTIGUOUS(x), ASSIGN(target, value), DETACH(x)
  CONTIGUOUS(x, arg="grad")     also its gradient in a buffer of its own (autograd): a GEMM's operands then are plain
                                loads, the tensor-core tiles' (tensor/ops/conv_gemm.py)
  ASSIGN(target, value, arg=ShapeTracker)  a write into part of target: value stored through that view (x[a:b] = v)
  shapes may hold symbolic sizes: integer expressions of bound variables (ir/sint.py)
"""
from __future__ import annotations
import itertools
from baregrad.helpers import prod
from baregrad.ir.dtype import DType
from baregrad.ir.ops import UOp, Ops, GroupOp, fresh_node
from baregrad.ir.view import ShapeTracker, moved_shape
from baregrad.ir.sint import max_shape
from baregrad.hal import Buffer, Device

_ids = itertools.count()

class Storage:
  """Device memory that successive versions of one buffer live in (docs/value_semantics.md). `version` is the
  current one; `owner` (weak) is the tensor it belongs to, rebound to each new version; `viewers` is where the tensor
  layer files the live tensors naming it whole (tensor/live.py: a slot, not a weak dictionary keyed by storage, whose
  get, set and callback cost more than the rest of filing an eager op's result)."""
  __slots__ = ("device", "size", "dtype", "buf", "version", "owner", "id", "viewers", "__weakref__")
  def __init__(self, device: str, size: int, dtype: DType, buf: Buffer | None = None):
    # (a name met before is looked up inline: a Storage is made for every result)
    self.device = (type(device) is str and Device.canonical_names.get(device)) or Device.canonicalize(device)
    self.size, self.dtype, self.buf, self.id = size, dtype, buf, next(_ids)
    self.version, self.owner, self.viewers = 0, None, None
  def ensure(self) -> Buffer:
    if (b := self.buf) is None: self.buf = b = Buffer(self.device, self.size, self.dtype)
    if b._buf is None: b.allocate()
    return b
  def next_ref(self) -> BufRef:
    """The version an in-place write produces (current once the schedule writing it has run: commit())."""
    return BufRef(storage=self, version=self.version + 1)
  def __repr__(self) -> str: return f"Storage({self.id}, {self.device}, {self.size}, {self.dtype}, v{self.version})"

class BufRef:
  """One version of a Storage: what a BUFFER UOp reads, allocated when a kernel first writes it. Hashed by identity,
  so a graph over an older version is a different graph."""
  __slots__ = ("storage", "version", "id", "__weakref__")
  def __init__(self, device: str = "", size: int = 0, dtype: DType | None = None, buf: Buffer | None = None, *,
               storage: Storage | None = None, version: int = 0):
    self.storage = storage if storage is not None else Storage(device, size, dtype, buf)  # type: ignore[arg-type]
    self.version, self.id = version, next(_ids)
  @property
  def device(self) -> str: return self.storage.device
  @property
  def size(self) -> int: return self.storage.size
  @property
  def dtype(self) -> DType: return self.storage.dtype
  @property
  def buf(self) -> Buffer | None: return self.storage.buf
  @buf.setter
  def buf(self, b: Buffer | None) -> None: self.storage.buf = b
  def ensure(self) -> Buffer: return self.storage.ensure()
  @property
  def stale(self) -> bool:
    """An in-place write has replaced this version: its memory holds a newer value."""
    return self.version < self.storage.version
  def commit(self) -> None:
    """The write producing this version has run: it is the storage's current version now."""
    if self.version > self.storage.version: self.storage.version = self.version
  def __repr__(self) -> str: return f"BufRef({self.id}, {self.device}, {self.size}, {self.dtype}, v{self.version})"

def stale_error(ref: BufRef) -> RuntimeError:
  return RuntimeError(f"a buffer this graph reads ({ref.size} x {ref.dtype.name} on {ref.device}) was modified by an in-place operation "
                      f"(assign, setitem, an optimizer step or a jit replay) after the graph was built: it is at version {ref.storage.version}, "
                      f"the graph needs version {ref.version}. PyTorch raises here too (\"one of the variables needed for gradient computation "
                      f"has been modified by an inplace operation\"): compute what needs the old value before the update")

def buffer_uop(ref: BufRef, fresh: bool = False) -> UOp:
  """The BUFFER node reading ref; `fresh`: no node has named ref yet (a result's buffer just made)."""
  st = ref.storage
  u = fresh_node(Ops.BUFFER, st.dtype, (), ref) if fresh else UOp(Ops.BUFFER, st.dtype, (), ref)
  if u._shape is None: object.__setattr__(u, "_shape", (st.size,))   # (known: no inference when it is read)
  return u

def set_shape(u: UOp, shape: tuple[int, ...]) -> None:
  """Record u's shape where it is known without inference (a node just built from a known shape)."""
  object.__setattr__(u, "_shape", shape)

def broadcast_const(c: UOp, shape: tuple[int, ...]) -> UOp:
  """The scalar c (a CONST, shape ()) broadcast to `shape`: the RESHAPE to all ones and the EXPAND that the movement
  methods build, made here without a tensor and a view computation per step (a Python scalar operand of every op)."""
  if not shape: return c
  ones = (1,) * len(shape)
  u = UOp(Ops.RESHAPE, c.dtype, (c,), ones)
  set_shape(u, ones)
  if shape != ones:
    u = UOp(Ops.EXPAND, c.dtype, (u,), shape)
    set_shape(u, shape)
  return u

def permute_uop(u: UOp, order: tuple[int, ...]) -> UOp:
  """u with its axes reordered; a permute of a permute is one permute, and none where they cancel (the gradient of
  x @ W.T: W.T's backward permute over the forward's): a reduction under a permute must get a kernel of its own and
  a copy, while a reduction under a reshape is stored as it is."""
  order = tuple(order)
  if u.op is Ops.PERMUTE:
    order = tuple(u.arg[i] for i in order)
    u = u.src[0]
  if order == tuple(range(len(order))): return u
  return UOp(Ops.PERMUTE, u.dtype, (u,), order)

class ShapeError(RuntimeError): pass  # a shape mismatch: RuntimeError, as in PyTorch

def shape_of(u: UOp) -> tuple[int, ...]:
  """u's shape, inferred once per node and kept in its `_shape` slot (a UOp is immutable: so is its shape)."""
  if (s := u._shape) is not None: return s
  # post-order over the nodes whose shape is not known yet (stop at known ones: building a chain stays O(n)); the
  # graphs autograd and the scheduler build are inferred here node by node, so this loop is kept tight
  stack: list[UOp] = [u]
  while stack:
    n = stack[-1]
    if n._shape is not None: stack.pop(); continue
    if (pending := [x for x in n.src if x._shape is None]): stack += pending; continue
    stack.pop()
    object.__setattr__(n, "_shape", _shape(n))
  return u._shape  # type: ignore[return-value]  # (set by the loop)

_SAME_SHAPE = frozenset(GroupOp.ALU | {Ops.CAST, Ops.BITCAST, Ops.COPY, Ops.CONTIGUOUS, Ops.DETACH})
_MOVES = {Ops.RESHAPE: "reshape", Ops.PERMUTE: "permute", Ops.EXPAND: "expand", Ops.PAD: "pad", Ops.SHRINK: "shrink", Ops.FLIP: "flip"}

def _shape(u: UOp) -> tuple[int, ...]:
  # (type: ignore below: the sources' `_shape` slots are set, shape_of infers in post-order)
  op = u.op
  if op in _SAME_SHAPE:
    src = u.src
    s = src[0]._shape
    for x in src:
      if x._shape != s: raise ShapeError(f"{op.name} of sources with different shapes {sorted({x._shape for x in src})}")  # type: ignore[type-var]
    return s  # type: ignore[return-value]
  if (name := _MOVES.get(op)) is not None: return moved_shape(u.src[0]._shape, name, u.arg)  # type: ignore[arg-type, return-value]  # (no view built)
  if op is Ops.BUFFER: return (u.arg.size,)
  if op is Ops.CONST or op is Ops.DEFINE_VAR: return ()
  if op is Ops.IOTA: return (u.arg,)
  if op is Ops.GATHER: return u.src[1]._shape  # type: ignore[return-value]
  if op is Ops.REDUCE_AXIS:
    axes = u.arg[1]
    return tuple([1 if i in axes else x for i, x in enumerate(u.src[0]._shape)])  # type: ignore[arg-type]
  if op is Ops.ASSIGN: return u.src[0]._shape  # type: ignore[return-value]
  raise ShapeError(f"no shape for {op}")

def movement_st(st: ShapeTracker, u: UOp) -> ShapeTracker:
  """st with the movement u applied."""
  if u.op is Ops.RESHAPE: return st.reshape(u.arg)
  if u.op is Ops.PERMUTE: return st.permute(u.arg)
  if u.op is Ops.EXPAND: return st.expand(u.arg)
  if u.op is Ops.PAD: return st.pad(u.arg)
  if u.op is Ops.SHRINK: return st.shrink(u.arg)
  if u.op is Ops.FLIP: return st.flip(u.arg)
  raise ValueError(f"{u.op} is not a movement")

def fold_movements(u: UOp) -> tuple[UOp, ShapeTracker]:
  """(x, st): u is the chain of movements st applied to x, which is not a movement."""
  chain = []
  while u.op in GroupOp.Movement: chain.append(u); u = u.src[0]
  st = ShapeTracker.from_shape(shape_of(u))
  for m in reversed(chain): st = movement_st(st, m)
  return u, st

def base_of(u: UOp) -> UOp:
  """The node below a chain of movements."""
  while u.op in GroupOp.Movement: u = u.src[0]
  return u

def device_of(u: UOp) -> str | None:
  """The device a node computes on: where its buffers are, not looking past a COPY (which names its own)."""
  stack, seen = [u], set()
  while stack:
    n = stack.pop()
    if n in seen: continue
    seen.add(n)
    if n.op is Ops.BUFFER: return n.arg.device
    if n.op is Ops.COPY: return n.arg
    stack.extend(n.src)
  return None

def numel(u: UOp) -> int:
  """Elements of u's buffer: a symbolic size counts its largest value (ir/sint.py)."""
  return prod(max_shape(shape_of(u)))
