"""Deep lazy graphs (issue 31): no walk recurses once per level of a graph, so a chain of 100,000 lazy ops realizes,
and so does its backward, in seconds; a fused chain is cut into kernels of bounded depth (engine/schedule.py
MAX_FUSE_DEPTH) so no kernel is too deep to compile quickly. Before: 500 lazy additions raised RecursionError in the
scheduler. The time bounds are generous (a loaded 2-core CI machine); here each takes a few seconds."""
import time
import numpy as np
from baregrad import Tensor, dtypes
from baregrad.ir.ops import UOp, Ops
from baregrad.engine import schedule as sched

N = 100_000

def test_100k_lazy_additions_forward_and_backward():
  x = Tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
  y = x
  for _ in range(N): y = y + 1
  t0 = time.perf_counter()
  assert y.tolist() == [N + 1.0, N + 2.0, N + 3.0, N + 4.0]
  t1 = time.perf_counter()
  (y * Tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
  assert x.grad.tolist() == [1.0, 2.0, 3.0, 4.0]
  t2 = time.perf_counter()
  assert t1 - t0 < 120, f"forward of {N} lazy additions took {t1 - t0:.1f} s"
  assert t2 - t1 < 120, f"backward of {N} lazy additions took {t2 - t1:.1f} s"

def test_deep_gradient_graph():
  # y = y * c + 1: the gradient is a chain of as many multiplications (the chain of additions' gradient is one node)
  n = 30_000
  x = Tensor([1.0, 2.0], requires_grad=True)
  c = Tensor([1.0, 1.0])
  y = x
  for _ in range(n): y = y * c + 1
  t0 = time.perf_counter()
  assert y.tolist() == [n + 1.0, n + 2.0]
  y.sum().backward()
  assert x.grad.tolist() == [1.0, 1.0]
  assert time.perf_counter() - t0 < 120

def test_deep_integer_and_movement_chains_match_numpy():
  n = 3000
  y = Tensor([1, 2, 3, 4], dtype=dtypes.int32)
  a = np.array([1, 2, 3, 4], dtype=np.int32)
  for _ in range(n): y, a = y * 3 - y, a * 3 - a   # wraps: int32 arithmetic, as NumPy's
  assert y.tolist() == a.tolist()
  z, b = Tensor([1.0, 2.0, 3.0, 4.0]), np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
  for _ in range(n): z, b = z.reshape(2, 2).permute(1, 0).reshape(4) + 1, b.reshape(2, 2).T.reshape(4) + 1
  assert z.tolist() == b.tolist()

def _ast_depth(ast: UOp) -> int:
  d: dict[UOp, int] = {}
  for u in ast.toposort(): d[u] = 1 + max((d[s] for s in u.src), default=0)
  return d[ast]

def test_fusion_is_cut_at_max_depth_only():
  x = Tensor.ones(4)
  y = x
  for _ in range(100): y = y + 1
  assert len(y.schedule()) == 1   # an ordinary chain still fuses into one kernel
  n = 4 * sched.MAX_FUSE_DEPTH + 10
  y = x
  for _ in range(n): y = y + 1
  items = y.schedule()
  outs = sum(len(it.outputs()) for it in items)   # (engine/merge.py may make two alike kernels one with two outputs)
  assert outs >= 4, f"a chain of {n} ops in {len(items)} kernels writing {outs} buffers"
  # (a merged producer may add one more chain to a kernel: engine/merge.py)
  assert max(_ast_depth(it.ast) for it in items) <= 2 * sched.MAX_FUSE_DEPTH + 16
  assert y.tolist() == [n + 1.0] * 4

def test_bounds_of_a_deep_expression():
  # interval bounds ask for the sources' bounds: iteratively, not once per level of recursion
  e = UOp.range(10, 0)
  for _ in range(5000): e = e + 1
  assert (e.vmin, e.vmax) == (5000, 5009)
  assert e.simplify().op in (Ops.ADD, Ops.RANGE)
