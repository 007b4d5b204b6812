"""Merge adjacent axes of a kernel AST that every view walks as one: fewer, longer loops.

The scheduler hands a kernel the shape of its tensors: a 1x1 convolution of a (C, 56, 56) image reduces over C with
output axes (Cout, 56, 56), though every buffer it reads and writes is contiguous over 56 x 56. Split, the CPU's
register tile takes vector lanes along one 56-wide row (3.5 registers of 16: a padded or partial tile per row) and the
index arithmetic restarts every row; merged, the lanes run along 3136 positions in whole registers (MobileNetV2's 1x1
convolutions 2.7x faster). Axes i and i+1 merge when they are of one kind (both output loops or both reduced) and, in
every VIEW of the AST, either both have their full sizes and the view's last View reshapes them into one axis
(`View.reshape`: stride[i] == stride[i+1] * size[i+1], no mask split, and through earlier Views still a constant
stride), or both are 1 where both are reduced (the stored values, after the reduction); reduced axes merge where every
reduction of the AST takes both or neither. A gather LOAD (an axis named in its arg) keeps the AST as it is."""
from __future__ import annotations
from baregrad.ir.ops import UOp, Ops
from baregrad.ir.view import ShapeTracker
from baregrad.ir.sint import ints

def _merged_view(st: ShapeTracker, i: int) -> ShapeTracker | None:
  """st with axes i and i+1 as one (the last View reshaped), or None where one View cannot express it or where the
  merged axis reaches memory through an earlier View by a division (its stride not constant: the split axes' were)."""
  sh = ints(st.shape)
  v = st.views[-1].reshape(sh[:i] + (sh[i] * sh[i + 1],) + sh[i + 2:])
  if v is None: return None
  # (an earlier View that is contiguous maps a flat offset to itself: dropped, the merged axis keeps a constant stride)
  m = ShapeTracker(tuple(e for e in st.views[:-1] if not e.is_contiguous) + (v,))
  if len(st.views) > 1 and m.real_strides()[i] is None and None not in st.real_strides()[i:i + 2]: return None
  return m

def merge_axes(ast: UOp, full_shape: tuple[int, ...]) -> UOp:
  """The AST with every mergeable pair of adjacent axes merged (see the module docstring); `full_shape` is its
  verified full shape (codegen.kernel.verify_ast). Returns ast itself when nothing merges."""
  nodes = list(ast.toposort())
  if any(u.op is Ops.LOAD and len(u.src) == 3 for u in nodes): return ast
  red: set[int] = set()
  reduces = [set(u.arg[1]) for u in nodes if u.op is Ops.REDUCE_AXIS]
  for r in reduces: red |= r
  sts = {u: u.arg for u in nodes if u.op is Ops.VIEW}
  shape = list(full_shape)
  groups = [[k] for k in range(len(shape))]   # the old axes each current axis holds
  kind = ["r" if k in red else "l" for k in range(len(shape))]
  for i in range(len(shape) - 2, -1, -1):
    a, b = shape[i], shape[i + 1]
    # (reduced axes merge only where every reduction takes both or neither: nested reductions keep their steps)
    if a <= 1 or b <= 1 or kind[i] != kind[i + 1]: continue
    if kind[i] == "r" and any((i in r) != (i + 1 in r) for r in reduces): continue
    new: dict[UOp, ShapeTracker] = {}
    for u, st in sts.items():
      s = st.shape[i:i + 2]
      m = _merged_view(st, i) if s == (a, b) or (s == (1, 1) and kind[i] == "r") else None
      if m is None: break
      new[u] = m
    else:
      sts.update(new)
      shape[i:i + 2] = [a * b]
      groups[i:i + 2] = [groups[i] + groups[i + 1]]
      del kind[i + 1]
      reduces = [{k if k <= i else k - 1 for k in r} for r in reduces]
  if len(shape) == len(full_shape): return ast
  amap = {o: n for n, g in enumerate(groups) for o in g}
  done: dict[UOp, UOp] = {}
  for u in nodes:   # (children first) rebuilt with the new views and reduce axes
    src = tuple(done[s] for s in u.src)
    arg = sts[u] if u.op is Ops.VIEW else (u.arg[0], tuple(sorted({amap[a] for a in u.arg[1]}))) if u.op is Ops.REDUCE_AXIS else u.arg
    done[u] = u if src == u.src and arg is u.arg else u.replace(src=src, arg=arg)
  return done[ast]
