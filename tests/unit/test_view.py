"""Views never copy: checked by evaluating the index arithmetic against NumPy's own views."""
import itertools
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from baregrad.ir.ops import UOp
from baregrad.ir.symbolic import evaluate
from baregrad.ir.view import ShapeTracker, View, ViewError

def gather(stk: ShapeTracker, base: np.ndarray) -> np.ndarray:
  """Read base through the view, 0 where masked: what a kernel would load."""
  idxs = [UOp.range(s, i) for i, s in enumerate(stk.shape)]
  idx, valid = stk.to_index(idxs)
  out = np.zeros(stk.shape, dtype=base.dtype)
  for pos in itertools.product(*[range(s) for s in stk.shape]):
    env = {f"r{i}": p for i, p in enumerate(pos)}
    if evaluate(valid, env): out[pos] = base[evaluate(idx, env)]
  return out

@st.composite
def movements(draw):
  shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
  ops = []
  cur = shape
  for _ in range(draw(st.integers(1, 4))):
    k = draw(st.sampled_from(["permute", "reshape", "pad", "shrink", "flip", "expand"]))
    if k == "permute":
      order = tuple(draw(st.permutations(range(len(cur))))); ops.append((k, order)); cur = tuple(cur[i] for i in order)
    elif k == "reshape":
      n = int(np.prod(cur)); divs = [d for d in range(1, n + 1) if n % d == 0]
      a = draw(st.sampled_from(divs)); new = (a, n // a) if draw(st.booleans()) else (n,)
      if draw(st.booleans()): new = new + (1,)
      ops.append((k, new)); cur = new
    elif k == "pad":
      arg = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in cur); ops.append((k, arg))
      cur = tuple(s + a + b for s, (a, b) in zip(cur, arg))
    elif k == "shrink":
      arg = []
      for s in cur:
        lo = draw(st.integers(0, s - 1)); hi = draw(st.integers(lo + 1, s)); arg.append((lo, hi))
      ops.append((k, tuple(arg))); cur = tuple(hi - lo for lo, hi in arg)
    elif k == "flip":
      arg = tuple(draw(st.booleans()) for _ in cur); ops.append((k, arg))
    elif k == "expand":
      if 1 in cur:
        new = tuple(draw(st.integers(1, 3)) if s == 1 else s for s in cur); ops.append((k, new)); cur = new
  return shape, ops

def apply_np(x, k, arg):
  if k == "permute": return x.transpose(arg)
  if k == "reshape": return x.reshape(arg)
  if k == "pad": return np.pad(x, arg)
  if k == "shrink": return x[tuple(slice(lo, hi) for lo, hi in arg)]
  if k == "flip": return np.flip(x, [i for i, f in enumerate(arg) if f]) if any(arg) else x
  if k == "expand": return np.broadcast_to(x, arg)

@settings(max_examples=150, deadline=None)
@given(movements())
def test_view_chain_matches_numpy(case):
  shape, ops = case
  base = np.arange(1, int(np.prod(shape)) + 1, dtype=np.int64)
  ref = base.reshape(shape)
  stk = ShapeTracker.from_shape(shape)
  for k, arg in ops:
    ref = apply_np(ref, k, arg)
    stk = getattr(stk, k)(arg)
  assert stk.shape == ref.shape
  np.testing.assert_array_equal(gather(stk, base), ref)

def test_reshape_of_permuted_needs_no_copy_when_mergeable():
  v = View.contiguous((2, 3, 4)).permute((0, 2, 1))
  assert v.reshape((2, 12)) is None  # transposed inner axes cannot flatten in one view
  assert View.contiguous((2, 3, 4)).reshape((6, 4)).is_contiguous

def test_bad_movements_name_shapes():
  with pytest.raises(ViewError, match=r"\(2, 3\).*\(4, 2\)"): View.contiguous((2, 3)).reshape((4, 2))
  with pytest.raises(ViewError, match="permutation"): View.contiguous((2, 3)).permute((0, 0))
  with pytest.raises(ViewError, match="expand"): View.contiguous((2, 3)).expand((4, 3))
  with pytest.raises(ViewError, match="shrink"): View.contiguous((2, 3)).shrink(((0, 3), (0, 3)))

def _windows(st: ShapeTracker, k: int) -> ShapeTracker:
  """3x3 sliding windows (stride 1) over the last two axes of st, by expand-and-reshape (tensor/ops/shape.py _pool)."""
  *pre, h, w = st.shape
  e = -(-k * (h + 1) // h)
  st = st.reshape((*pre, 1, h, 1, w)).expand((*pre, e, h, e, w)).reshape((*pre, e * h, e * w))
  st = st.shrink(tuple((0, s) for s in pre) + ((0, k * (h + 1)), (0, k * (w + 1)))).reshape((*pre, k, h + 1, k, w + 1))
  st = st.shrink(tuple((0, s) for s in pre) + ((0, k), (0, h - k + 1), (0, k), (0, w - k + 1)))
  return st.permute((*range(len(pre)), len(pre) + 1, len(pre) + 3, len(pre), len(pre) + 2))

def test_an_affine_stack_merges_into_one_view():
  # channels-last windows reshaped into an im2col operand: (n, oh, ow, kh, kw, c) -> (n, oh, ow, kh * kw * c). The
  # window stack is affine in every axis, so it becomes one View before the reshape that cannot merge is stacked on it
  base = np.arange(2 * 5 * 6 * 4)
  img = ShapeTracker.from_shape((2, 5, 6, 4)).permute((0, 3, 1, 2))        # (n, c, h, w) over channels-last memory
  win = _windows(img, 3).permute((0, 2, 3, 4, 5, 1))                          # (n, oh, ow, kh, kw, c)
  col = win.reshape((2, 3, 4, 36))
  assert len(col.views) == 2 and col.views[0].mask is None
  assert col.views[0].strides == (120, 24, 4, 24, 4, 1), col.views[0]
  ref = np.lib.stride_tricks.sliding_window_view(base.reshape(2, 5, 6, 4), (3, 3), axis=(1, 2)).transpose(0, 1, 2, 4, 5, 3)
  np.testing.assert_array_equal(gather(col, base), ref.reshape(2, 3, 4, 36))
  # merged() itself: the same elements as the stack it replaces
  stack = ShapeTracker(win.views)
  assert len(stack.merged().views) == 1
  np.testing.assert_array_equal(gather(stack.merged(), base), gather(stack, base))

def test_a_stack_that_is_not_affine_or_is_masked_stays():
  st = ShapeTracker.from_shape((6, 7)).permute((1, 0)).reshape((42,)).reshape((2, 21))   # a transpose flattened
  assert st.merged() is st and len(st.views) == 2
  padded = _windows(ShapeTracker.from_shape((4, 4)).pad(((1, 1), (1, 1))), 3)          # masks: a padded image's windows
  assert len(padded.views) > 1 and padded.merged() is padded
