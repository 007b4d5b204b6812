"""The tensor-level graph: UOps with shapes, over device buffers.

  BUFFER(arg=BufRef)            a flat device buffer, shape (size,)
  RESHAPE/PERMUTE/EXPAND/PAD/SHRINK/FLIP(x, arg)   movements (kept apart for autograd; the scheduler folds them)
  CONST(arg=value)              a scalar, shape (); broadcast with VIEW
  ALU / CAST / BITCAST          elementwise, the shape of their sources
  REDUCE_AXIS(x, arg=(op, axes)) keepdim reduction
  COPY(x, arg=device), CONTIGUOUS(x), ASSIGN(target, value), DETACH(x)
"""
from __future__ import annotations
import itertools, weakref
from baregrad.helpers import prod
from baregrad.ir.dtype import DType
from baregrad.ir.ops import UOp, Ops, GroupOp
from baregrad.ir.view import ShapeTracker
from baregrad.hal import Buffer, Device

_ids = itertools.count()

class BufRef:
  """A device buffer the graph refers to; allocated when a kernel first writes it. Hashed by identity."""
  __slots__ = ("device", "size", "dtype", "buf", "id", "__weakref__")
  def __init__(self, device: str, size: int, dtype: DType, buf: Buffer | None = None):
    self.device, self.size, self.dtype, self.buf, self.id = Device.canonicalize(device), size, dtype, buf, next(_ids)
  def ensure(self) -> Buffer:
    if self.buf is None: self.buf = Buffer(self.device, self.size, self.dtype)
    if not self.buf.is_allocated(): self.buf.allocate()
    return self.buf
  def __repr__(self) -> str: return f"BufRef({self.id}, {self.device}, {self.size}, {self.dtype})"

def buffer_uop(ref: BufRef) -> UOp: return UOp(Ops.BUFFER, ref.dtype, (), ref)

_shapes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

class ShapeError(ValueError): pass

def shape_of(u: UOp) -> tuple[int, ...]:
  if (s := _shapes.get(u)) is not None: return s
  # post-order over the nodes whose shape is not known yet (stop at known ones: building a chain stays O(n))
  stack: list[tuple[UOp, bool]] = [(u, False)]
  while stack:
    n, ready = stack.pop()
    if n in _shapes: continue
    if ready: _shapes[n] = _shape(n); continue
    stack.append((n, True))
    stack.extend((s, False) for s in n.src if s not in _shapes)
  return _shapes[u]

def _shape(u: UOp) -> tuple[int, ...]:
  if u.op is Ops.BUFFER: return (u.arg.size,)
  if u.op in GroupOp.Movement: return movement_st(ShapeTracker.from_shape(_shapes[u.src[0]]), u).shape
  if u.op is Ops.CONST or u.op is Ops.DEFINE_VAR: return ()
  if u.op is Ops.REDUCE_AXIS:
    s = _shapes[u.src[0]]
    return tuple(1 if i in u.arg[1] else x for i, x in enumerate(s))
  if u.op is Ops.ASSIGN: return _shapes[u.src[0]]
  if u.op in GroupOp.ALU or u.op in (Ops.CAST, Ops.BITCAST, Ops.COPY, Ops.CONTIGUOUS, Ops.DETACH):
    shapes = {_shapes[s] for s in u.src}
    if len(shapes) != 1: raise ShapeError(f"{u.op.name} of sources with different shapes {sorted(shapes)}")
    return shapes.pop()
  raise ShapeError(f"no shape for {u.op}")

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

def numel(u: UOp) -> int: return prod(shape_of(u))
