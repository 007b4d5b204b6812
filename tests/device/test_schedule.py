"""The scheduler fuses: kernel counts for representative graphs, movement ops make no kernels, intermediates
share memory, and the fused results are right."""
import numpy as np
import pytest
from baregrad import Tensor, dtypes
from baregrad.engine.realize import plan_memory
from baregrad.ir.ops import Ops
from baregrad.codegen.kernel import OptOps

def kernels(t: Tensor) -> int: return len(t.schedule())

@pytest.fixture
def ab():
  return Tensor.rand(8, 16).realize(), Tensor.rand(8, 16).realize()

def test_elementwise_chain_is_one_kernel(ab):
  a, b = ab
  t = ((a * b + 1).exp() - a).sqrt().relu() * 3
  assert kernels(t) == 1
  np.testing.assert_allclose(t.numpy(), np.maximum(np.sqrt(np.exp(a.numpy() * b.numpy() + 1) - a.numpy()), 0) * 3, rtol=1e-5)

def test_elementwise_into_reduce_is_one_kernel(ab):
  a, b = ab
  t = (a * b + 1).relu().sum(1)
  assert kernels(t) == 1
  np.testing.assert_allclose(t.numpy(), np.maximum(a.numpy() * b.numpy() + 1, 0).sum(1), rtol=1e-5)

def test_reduce_then_elementwise_is_one_kernel(ab):
  a, _ = ab
  assert kernels(a.mean(1)) == 1
  assert kernels(a.sum(0) * 2 + 1) == 1

def test_softmax_at_most_three_kernels(ab):
  a, _ = ab
  s = a.softmax(-1)
  assert kernels(s) <= 3
  e = np.exp(a.numpy() - a.numpy().max(-1, keepdims=True))
  np.testing.assert_allclose(s.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5)

def test_movement_ops_make_no_kernel(ab):
  a, _ = ab
  assert kernels(a.reshape(16, 8)) == 0
  assert kernels(a.T) == 0
  assert kernels(a[::2, 1:5]) == 0
  assert kernels(a.T.reshape(-1).flip(0) + 1) == 1  # moved views fuse into the consumer

def test_matmul_is_one_kernel():
  x, w = Tensor.rand(5, 7), Tensor.rand(7, 3)
  Tensor.realize(x, w)
  assert kernels(x @ w) == 1
  np.testing.assert_allclose((x @ w).numpy(), x.numpy() @ w.numpy(), rtol=1e-5)

def test_schedule_items_carry_their_ast(ab):
  a, b = ab
  items = (a + b).schedule()
  assert len(items) == 1 and items[0].ast.op is Ops.SINK and items[0].ast.src[0].op is Ops.STORE
  assert len(items[0].bufs) == 3  # output, a, b

def test_padded_computed_value_is_realized_first(ab):
  a, _ = ab
  t = a.exp().pad((1, 1))  # the padding must be 0, not exp(0)
  got = t.numpy()
  assert got[:, 0].max() == 0 and got[:, -1].max() == 0
  np.testing.assert_allclose(got[:, 1:-1], np.exp(a.numpy()), rtol=1e-6)

def test_memory_planning_reuses_dead_intermediates():
  x = Tensor.rand(64, 64).realize()
  y = x
  for _ in range(4): y = ((y * 0.1).exp().sum(1, keepdim=True) * 0.01 + y).contiguous()  # realized intermediates
  items = y.schedule()
  keep = {items[-1].bufs[0].id}
  assign = plan_memory(items, keep)
  assert assign, "intermediates should be placed in an arena"
  # the arena holds less than the intermediates together: those whose lifetimes do not overlap share bytes
  sizes = {b.storage.id: b.size * b.dtype.itemsize for it in items for b in it.bufs if b.id in assign}
  arenas = {id(a): a for a, _ in assign.values()}
  assert sum(a.size for a in arenas.values()) < sum(sizes.values()), (sizes, [a.size for a in arenas.values()])
  # no two buffers live at once overlap
  from baregrad.engine.realize import ARENA_ALIGN
  span = {}
  for i, it in enumerate(items):
    for b in it.bufs:
      if b.id in assign: span.setdefault(b.storage.id, [i, i, assign[b.id][1], b.size * b.dtype.itemsize])[1] = i
  for s1, (a1, z1, o1, n1) in span.items():
    assert o1 % ARENA_ALIGN == 0
    for s2, (a2, z2, o2, n2) in span.items():
      if s1 < s2 and a1 <= z2 and a2 <= z1: assert o1 + n1 <= o2 or o2 + n2 <= o1, (s1, s2)
  ref = x.numpy()
  for _ in range(4): ref = np.exp(ref * 0.1).sum(1, keepdims=True) * 0.01 + ref
  np.testing.assert_allclose(y.numpy(), ref, rtol=1e-4)

def test_realized_graph_is_not_recomputed():
  x = Tensor.rand(16).realize()
  y = (x * 2).exp()
  y.realize()
  assert kernels(y + 1) == 1  # reads y's buffer, doesn't recompute exp

def test_expensive_value_broadcast_into_a_reduction_is_computed_once(ab):
  # softmax's probabilities into the next matmul: recomputed (exp and a division) for every output column if fused
  a, _ = ab
  w = Tensor.rand(16, 32).realize()
  p = a.exp() / 3.0
  items = (p @ w).schedule()
  assert len(items) == 2
  assert not any(u.op is Ops.EXP2 for u in items[-1].ast.toposort())   # the matmul kernel only loads p
  np.testing.assert_allclose((p @ w).numpy(), (np.exp(a.numpy()) / 3.0) @ w.numpy(), rtol=1e-5)
  # a cheap value (relu of a sum) still fuses into the matmul, and an expensive one that is not broadcast too
  assert kernels((a + 1).relu() @ w) == 1
  assert kernels(a.exp().sum(1)) == 1

def test_weight_gradient_of_a_linear_layer_needs_no_copy():
  # W.T in the forward and its backward permute cancel: the weight's gradient is the reduction's own buffer, not a
  # reduction realized and then copied through two permutes
  from baregrad import nn
  lin = nn.Linear(16, 8)
  x = Tensor.rand(4, 16).realize()
  lin(x).relu().sum().backward()
  g = lin.weight.grad
  assert g.uop.op is not Ops.PERMUTE and kernels(g) == 2   # the relu mask's gradient, then the reduction
  xn, wn, bn = x.numpy(), lin.weight.numpy(), lin.bias.numpy()
  mask = ((xn @ wn.T + bn) > 0).astype(np.float32)
  np.testing.assert_allclose(g.numpy(), mask.T @ xn, rtol=1e-5, atol=1e-6)
  t = Tensor.rand(3, 5).realize()
  assert t.T.T.uop is t.uop and t.permute(1, 0).permute(1, 0).uop is t.uop

# ---- multi-output kernels (engine/merge.py)
def _step_items(opt, params, loss):
  """The schedule an optimizer step runs (captured, then run)."""
  from baregrad.engine import lazy
  got = []
  orig = lazy.run_schedule
  lazy.run_schedule = lambda items, keep=None: (got.append(list(items)), orig(items, keep))[1]
  try: opt.step(loss)
  finally: lazy.run_schedule = orig
  return got[-1]

def test_adam_moments_are_extra_outputs_of_the_parameter_update():
  # m and v were kernels of their own whose outputs the parameter's update read back: one kernel per parameter now
  # stores all three, reading the gradient and the moments once
  from baregrad import nn
  from baregrad.nn import optim
  lin = nn.Linear(8, 4)
  params = nn.get_parameters(lin)
  opt = optim.Adam(params, lr=0.1)
  for _ in range(2):
    loss = lin(Tensor.rand(3, 8)).square().sum()
    opt.zero_grad(); loss.backward()
    items = _step_items(opt, params, loss)
  updates = [it for it in items if len(it.ast.src) == 3]
  assert len(updates) == len(params), [len(it.ast.src) for it in items]
  for it in updates:
    assert {n.op for n, _ in it.outputs()} == {Ops.ASSIGN}
    assert len({it.bufs[i].storage for _, i in it.outputs()}) == 3

def test_producer_is_merged_only_where_read_element_for_element():
  a = Tensor.rand(4, 8).realize()
  b = (a * 2).contiguous()
  same = b + 1                       # reads b at the element it stores: b becomes a second output
  items = same.schedule()
  assert len(items) == 1 and len(items[0].ast.src) == 2
  np.testing.assert_allclose(same.numpy(), a.numpy() * 2 + 1, rtol=1e-6)
  np.testing.assert_allclose(b.numpy(), a.numpy() * 2, rtol=1e-6)
  c = (a * 3).contiguous()
  flipped = c.flip(1) + 1            # reads c at another element: two kernels
  assert len(flipped.schedule()) == 2
  np.testing.assert_allclose(flipped.numpy(), a.numpy()[:, ::-1] * 3 + 1, rtol=1e-6)
  d = (a * 4).contiguous()
  summed = d.sum(1) + d.sum()         # a reduction reads it: not merged
  assert all(len(it.ast.src) == 1 for it in summed.schedule())

def test_producer_is_not_moved_past_a_kernel_that_reads_its_output():
  # x = f(a) realized; y = reduce(x) reads it; z = x + y[...] reads x element for element: x must be computed before
  # the reduction, so it stays a kernel of its own (and the numbers are right)
  a = Tensor.rand(4, 8).realize()
  x = (a * 2).contiguous()
  z = x + x.sum(1, keepdim=True)
  items = z.schedule()
  assert all(len(it.ast.src) == 1 for it in items), [len(it.ast.src) for it in items]
  np.testing.assert_allclose(z.numpy(), a.numpy() * 2 + (a.numpy() * 2).sum(1, keepdims=True), rtol=1e-5)

# ---- a long reduction with few outputs on a CPU of several threads: partials over a prefix, the tail in stage 2
def _cpu_threads() -> int:
  from baregrad import Device
  return Device["CPU"].threads

@pytest.mark.parametrize("shape,axis", [(((1 << 22) + 3,), None), ((1 << 22,), None), ((2, (1 << 21) + 1001), 1),
                                        (((1 << 21) + 5, 3), 0), ((1, (1 << 21) + 7, 2), 1),
                                        # several reduced axes: the tail keeps their extent, the partials are read once
                                        ((4, (1 << 21) + 5), None), ((3, (1 << 21) + 5, 2), (1, 2))])
def test_long_cpu_reductions_split_over_the_threads(shape, axis):
  rng = np.random.default_rng(3)
  x = rng.standard_normal(shape).astype(np.float32)
  t = Tensor(x, device="CPU")
  items = t.sum(axis).schedule()
  if _cpu_threads() > 1:
    assert len(items) == 2
    # stage 1 reads whole aligned chunks (no view of it is masked: a padded stage 1 masked every element, ~10x slower)
    views = [u.arg for u in items[0].ast.toposort() if u.op is Ops.VIEW]
    assert all(v.mask is None for st in views for v in st.views), "stage 1 reads through a masked (padded) view"
  x64 = x.astype(np.float64)
  tol = 1e-6 * np.abs(x64).sum(axis) + 1e-5
  np.testing.assert_array_less(np.abs(t.sum(axis).numpy() - x64.sum(axis)), tol)
  # (squares all add up: float32 partials along a strided axis drift by ~1e-4 of the total, as the unsplit kernel's
  # one accumulator does by more)
  np.testing.assert_allclose((t * t).sum(axis).add(1).numpy(), (x64 * x64).sum(axis) + 1, rtol=1e-3)
  np.testing.assert_array_equal(t.amax(axis).numpy() if axis is not None else t.max().numpy(), x.max(axis))
  np.testing.assert_array_equal(t.amin(axis).numpy() if axis is not None else t.min().numpy(), x.min(axis))
  np.testing.assert_allclose(t.mean(axis).numpy(), x64.mean(axis), rtol=1e-4, atol=1e-6)
  neg = Tensor(-np.abs(x) - 1, device="CPU")   # every value below the zeros a masked load reads: the identity must fill
  np.testing.assert_array_equal(neg.amax(axis).numpy() if axis is not None else neg.max().numpy(), (-np.abs(x) - 1).max(axis))

def test_a_cpu_reduction_that_loads_nothing_is_threaded_and_unrolled_like_one_that_does():
  # sum(arange(n) * c) reads no buffer: its lanes go along the reduce axis (several accumulators) and its partials over
  # the threads. Taken for a column sum, its partials were lanes of one serial loop: 4x slower at 16M, 0.6% off
  from baregrad.engine.runner import compile_ast
  n = 16_000_003
  t = Tensor.arange(n, dtype=dtypes.float32, device="CPU") * 1e-6
  items = t.sum().schedule()
  opts = compile_ast(items[0].ast, "CPU").spec.opts
  assert any(o.op is OptOps.UNROLL for o in opts), opts
  if _cpu_threads() > 1: assert any(o.op is OptOps.PARALLEL for o in opts), opts
  want = float(np.arange(n, dtype=np.float32).astype(np.float64) @ np.full(n, np.float32(1e-6), np.float64))
  assert abs(t.sum().item() - want) < 1e-5 * want

def test_long_cpu_integer_sum_is_exact_and_short_ones_stay_one_kernel():
  xi = np.random.default_rng(4).integers(-7, 8, (1 << 21) + 11).astype(np.int32)
  assert Tensor(xi, device="CPU").sum().numpy() == xi.astype(np.int64).sum()
  assert Tensor(np.ones((1 << 21) + 3, np.float32), device="CPU").prod().numpy() == 1.0
  assert kernels(Tensor(np.ones((1 << 21) - 1, np.float32), device="CPU").sum()) == 1   # under the CPU's threshold
  assert kernels(Tensor(np.ones((8, 1 << 20), np.float32), device="CPU").sum(1)) == 1     # outputs enough for the threads
