"""baregrad.tensor.functional against PyTorch on the CPU (forward and autograd), plus errors and kernel counts."""
import gc
import numpy as np
import pytest
import baregrad
from baregrad import Tensor, dtypes, knobs
import baregrad.tensor.functional as F

rng = np.random.default_rng(0)

@pytest.fixture(autouse=True, scope="module")
def _collect():
  # free the buffers of graphs left in reference cycles here, not in a later module that counts allocator bytes
  yield
  gc.collect()

def _t():
  return pytest.importorskip("torch")

def rnd(*shape, dtype=np.float32): return rng.standard_normal(shape).astype(dtype)

def check(fb, ft, *arrays, grad=True, nograd=(), atol=1e-4, rtol=1e-4):
  """fb(baregrad tensors) against ft(torch tensors): the forward, then the gradient of sum(out * g) for every float
  input (but those numbered in nograd)."""
  torch = _t()
  fl = [a.dtype.kind == "f" and grad and i not in nograd for i, a in enumerate(arrays)]
  tb = [Tensor(a, requires_grad=f or None) for a, f in zip(arrays, fl)]
  tt = [torch.tensor(a, requires_grad=f) for a, f in zip(arrays, fl)]
  ob, ot = fb(*tb), ft(*tt)
  assert ob.shape == tuple(ot.shape), (ob.shape, tuple(ot.shape))
  np.testing.assert_allclose(ob.numpy(), ot.detach().numpy(), atol=atol, rtol=rtol)
  if any(fl):
    g = rnd(*ot.shape)
    (ob * Tensor(g)).sum().backward()
    (ot * torch.tensor(g)).sum().backward()
    for i, (a, b) in enumerate(zip(tb, tt)):
      if not fl[i]: continue
      assert a.grad is not None, f"no gradient for input {i}"
      np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), atol=atol * 10, rtol=rtol * 10, err_msg=f"gradient of input {i}")
  return ob

# ---------------------------------------------------------------- joining and splitting

def test_cat_stack():
  torch = _t()
  a, b, c = rnd(2, 3, 4), rnd(2, 1, 4), rnd(2, 5, 4)
  check(lambda x, y, z: F.cat([x, y, z], 1), lambda x, y, z: torch.cat([x, y, z], 1), a, b, c)
  # non-contiguous pieces, negative dim, axis=
  check(lambda x, y: F.cat([x.permute(2, 1, 0), y.permute(2, 1, 0)], axis=-1), lambda x, y: torch.cat([x.permute(2, 1, 0), y.permute(2, 1, 0)], -1), a, a)
  check(lambda x, y: F.stack([x, y], dim=2), lambda x, y: torch.stack([x, y], 2), a, a)
  # dtype promotion, empty pieces, methods
  i = np.arange(6, dtype=np.int32).reshape(2, 3)
  out = Tensor.cat([Tensor(i), Tensor(np.ones((2, 3), np.float32)), Tensor(np.zeros((0,), np.float32))], 0)
  assert out.dtype == dtypes.float32 and out.shape == (4, 3)
  np.testing.assert_array_equal(Tensor(i).cat(Tensor(i), dim=1).numpy(), np.concatenate([i, i], 1))
  np.testing.assert_array_equal(baregrad.stack([Tensor(i), Tensor(i)], -1).numpy(), np.stack([i, i], -1))
  bo = np.array([True, False])
  np.testing.assert_array_equal(F.cat([Tensor(bo), Tensor(bo)]).numpy(), np.concatenate([bo, bo]))

def test_cat_one_kernel_from_buffers():
  a, b = Tensor(rnd(3, 4)), Tensor(rnd(2, 4))
  assert len(F.cat([a, b, a]).schedule()) == 1

def test_split_chunk_repeat_roll():
  torch = _t()
  x = rnd(7, 5)
  for got, want in zip(F.split(Tensor(x), 3), torch.split(torch.tensor(x), 3)): np.testing.assert_array_equal(got.numpy(), want.numpy())
  for got, want in zip(Tensor(x).split([1, 4], dim=1), torch.tensor(x).split([1, 4], 1)): np.testing.assert_array_equal(got.numpy(), want.numpy())
  for got, want in zip(Tensor(x).chunk(3, 0), torch.tensor(x).chunk(3, 0)): np.testing.assert_array_equal(got.numpy(), want.numpy())
  assert len(Tensor(x).chunk(4, 1)) == len(torch.tensor(x).chunk(4, 1))
  check(lambda t: t.repeat(2, 1, 3), lambda t: t.repeat(2, 1, 3), rnd(2, 3))
  check(lambda t: t.permute(1, 0).repeat(3, 2), lambda t: t.permute(1, 0).repeat(3, 2), rnd(2, 3))
  check(lambda t: t.roll(2, 1), lambda t: t.roll(2, 1), x)
  check(lambda t: t.roll((-3, 8), (0, 1)), lambda t: t.roll((-3, 8), (0, 1)), x)
  check(lambda t: F.roll(t, 4), lambda t: torch.roll(t, 4), x)

def test_tril_triu_diag():
  torch = _t()
  x = rnd(2, 4, 6)
  for d in (-2, 0, 3):
    check(lambda t: t.tril(d), lambda t: t.tril(d), x)
    check(lambda t: F.triu(t, diagonal=d), lambda t: t.triu(d), x)
    check(lambda t: F.diagonal(t, d, 1, 2), lambda t: torch.diagonal(t, d, 1, 2), x)
  check(lambda t: t.diagonal(-1, 2, 0), lambda t: t.diagonal(-1, 2, 0), x)
  check(lambda t: F.diag(t, 1), lambda t: torch.diag(t, 1), rnd(3))
  check(lambda t: F.diag(t, -1), lambda t: torch.diag(t, -1), rnd(3, 4))
  i = np.arange(9).reshape(3, 3)
  np.testing.assert_array_equal(F.tril(Tensor(i)).numpy(), np.tril(i))

def _gather_loads(t):
  """The gather LOADs (a third source: the index value) and the reductions of the kernels computing t."""
  from baregrad.ir.ops import Ops
  nodes = [u for it in t.schedule() for u in it.ast.toposort()]
  return [u for u in nodes if u.op is Ops.LOAD and len(u.src) == 3], [u for u in nodes if u.op is Ops.REDUCE_AXIS]

def test_gather_is_a_load_at_each_index_not_a_one_hot_reduction():
  """gather, embedding and single-tensor indexing read the source at each index (a LOAD whose index is a value), so
  their cost is the output's size, not output x source extent (a 50000-row embedding of 4096 tokens took 4.5 s as a
  one-hot matmul). Values, dtypes, duplicates, every axis, sources that are computed, permuted or padded, and the
  gradient (a scatter-add, duplicates adding up) against PyTorch."""
  torch = _t()
  x = rnd(4, 6, 5)
  for d in range(3):
    ishape = list(x.shape); ishape[d] = 7
    idx = rng.integers(0, x.shape[d], ishape)   # (more indices than the extent: duplicates)
    check(lambda t, i: t.gather(d, i), lambda t, i: t.gather(d, i), x, idx)
    loads, reds = _gather_loads(Tensor(x).gather(d, Tensor(idx)))
    assert len(loads) == 1 and not [r for r in reds if r.dtype != dtypes.int64], (d, loads, reds)   # (the bounds check's max)
  # sources that are not plain buffers: computed, permuted, padded; a consumer fused after it
  check(lambda t, i: (t * 2 + 1).gather(1, i), lambda t, i: (t * 2 + 1).gather(1, i), x, rng.integers(0, 6, (4, 3, 5)))
  # (a computed source of the index's own shape: its kernel must not be merged into the gather's as if read in order)
  check(lambda t, i: (t * 2 + 1).gather(1, i), lambda t, i: (t * 2 + 1).gather(1, i), x, rng.integers(0, 6, (4, 6, 5)))
  check(lambda t, i: t.permute(2, 0, 1).gather(2, i), lambda t, i: t.permute(2, 0, 1).gather(2, i), x, rng.integers(0, 6, (5, 4, 2)))
  check(lambda t, i: F.pad(t, (1, 1)).gather(2, i) * 3, lambda t, i: torch.nn.functional.pad(t, (1, 1)).gather(2, i) * 3, x, rng.integers(0, 7, (4, 6, 9)))
  check(lambda t, i: t.gather(0, i).sum(1), lambda t, i: t.gather(0, i).sum(1), x, rng.integers(0, 4, (3, 6, 5)))
  # integer and bool sources keep their dtype; int32 indices
  xi = rng.integers(-50, 50, (5, 8)).astype(np.int32)
  ii = rng.integers(0, 8, (5, 3)).astype(np.int32)
  got = Tensor(xi).gather(1, Tensor(ii))
  assert got.dtype == dtypes.int32
  np.testing.assert_array_equal(got.numpy(), np.take_along_axis(xi, ii, 1))
  np.testing.assert_array_equal(Tensor(xi > 0).gather(1, Tensor(ii)).numpy(), np.take_along_axis(xi > 0, ii, 1))
  # an index out of range: its bounds check raises at the read
  with pytest.raises(IndexError, match="out of bounds"): Tensor(x).gather(1, Tensor(np.full((4, 2, 5), 6))).numpy()
  # gathering into the tensor gathered from: computed before the write, as PyTorch's t.copy_(t.gather(...))
  t = Tensor(x[0]).realize()
  i2 = rng.integers(0, 6, (6, 5))
  t.assign(t.gather(0, Tensor(i2)))
  np.testing.assert_array_equal(t.numpy(), np.take_along_axis(x[0], i2, 0))

def test_embedding_and_single_tensor_indexing_gather_rows():
  torch = _t()
  from baregrad import nn
  emb = nn.Embedding(300, 12)
  ids = rng.integers(0, 300, (3, 5))
  out = emb(Tensor(ids))
  loads, reds = _gather_loads(out)
  assert len(loads) == 1 and all(r.dtype == dtypes.int64 for r in reds)   # (no one-hot matmul: only the bounds check)
  w = emb.weight.numpy()
  np.testing.assert_array_equal(out.numpy(), w[ids])
  (out * out).sum().backward()
  tw = torch.tensor(w, requires_grad=True)
  (torch.nn.functional.embedding(torch.tensor(ids), tw) ** 2).sum().backward()
  np.testing.assert_allclose(emb.weight.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-5)
  with pytest.raises(IndexError): emb(Tensor(np.array([[1, 300]]))).numpy()
  # inside a jit: each replay reads the rows its new indices name
  f = baregrad.jit(lambda i: (emb(i) * 2).sum(1))
  for _ in range(4):
    ids = rng.integers(0, 300, (2, 6))
    np.testing.assert_allclose(f(Tensor(ids)).numpy(), (w[ids] * 2).sum(1), rtol=1e-5, atol=1e-5)
  x = rnd(6, 5, 4)
  for ax in range(3):
    n = x.shape[ax]
    for idx in (np.array([0, n - 1, -1, 2, 0]), rng.integers(-n, n, (2, 3)), np.array(1)):
      check(lambda t: t[(slice(None),) * ax + (Tensor(idx),)], lambda t: t[(slice(None),) * ax + (torch.tensor(idx),)], x)
  with pytest.raises(IndexError, match="out of bounds"): Tensor(x)[Tensor(np.array([6]))].numpy()
  # several index tensors: one gather of the flattened indexed axes (adjacent ones keep B in place, others put it first)
  i0, i1, i2 = rng.integers(-6, 6, (2, 3)), rng.integers(-5, 5, (3,)), rng.integers(-4, 4, (2, 1))
  for key in ((i0, i1), (slice(None), i1, i2), (i0, slice(None), i2), (i0, i1, i2)):
    check(lambda t: t[tuple(Tensor(k) if isinstance(k, np.ndarray) else k for k in key)],
          lambda t: t[tuple(torch.tensor(k) if isinstance(k, np.ndarray) else k for k in key)], x)
    got = Tensor(x)[tuple(Tensor(k) if isinstance(k, np.ndarray) else k for k in key)]
    assert len(_gather_loads(got)[0]) == 1
  np.testing.assert_array_equal(Tensor(x > 0)[Tensor(i0), Tensor(i1)].numpy(), (x > 0)[i0, i1])
  with pytest.raises(IndexError, match="out of bounds"): Tensor(x)[Tensor(np.array([1])), Tensor(np.array([5]))].numpy()

def test_gather_scatter():
  torch = _t()
  x = rnd(3, 5, 4)
  idx = rng.integers(0, 5, (2, 6, 3))
  check(lambda t, i: t.gather(1, i), lambda t, i: t.gather(1, i), x, idx)
  idx0 = rng.integers(0, 3, (3, 2, 4))
  check(lambda t, i: F.gather(t.permute(0, 2, 1), 0, i.permute(0, 2, 1)), lambda t, i: torch.gather(t.permute(0, 2, 1), 0, i.permute(0, 2, 1)), x, idx0)
  xi = np.arange(12, dtype=np.int32).reshape(3, 4)
  ii = np.array([[3, 0], [1, 1], [2, 0]])
  got = Tensor(xi).gather(1, Tensor(ii))
  assert got.dtype == dtypes.int32
  np.testing.assert_array_equal(got.numpy(), np.take_along_axis(xi, ii, 1))
  # scatter with distinct indices (a permutation per row), scatter_add with repeats
  perm = np.stack([rng.permutation(5)[:3] for _ in range(4)])          # (4, 3), values < 5
  base, src = rnd(4, 5), rnd(4, 3)
  check(lambda b, i, s: b.scatter(1, i, s), lambda b, i, s: b.scatter(1, i, s), base, perm, src)
  rep = rng.integers(0, 4, (3, 5))
  check(lambda b, i, s: F.scatter_add(b, 0, i, s), lambda b, i, s: b.scatter_add(0, i, s), rnd(4, 6), rep, rnd(3, 5))
  check(lambda b, i, s: F.scatter_add(b, 0, i, s), lambda b, i, s: b.scatter_add(0, i, s), rnd(4, 6), rep, rnd(3, 7), nograd=(2,))  # src larger than index
  np.testing.assert_allclose(Tensor(base).scatter(1, Tensor(perm), value=2.5).numpy(), torch.tensor(base).scatter(1, torch.tensor(perm), 2.5).numpy())
  # repeated indices: the last value along dim wins, as PyTorch's CPU kernel leaves it
  ri, rs = np.array([[1, 1, 0], [2, 0, 2]]), rnd(2, 3)
  np.testing.assert_allclose(F.scatter(Tensor(base[:2]), 1, Tensor(ri), Tensor(rs)).numpy(),
                             torch.tensor(base[:2]).scatter(1, torch.tensor(ri), torch.tensor(rs)).numpy())
  np.testing.assert_allclose(F.scatter(Tensor(base[:2]), 1, Tensor(ri), Tensor(rs), reduce="add").numpy(),
                             torch.tensor(base[:2]).scatter(1, torch.tensor(ri), torch.tensor(rs), reduce="add").numpy())

def test_masked_fill_where_one_hot():
  torch = _t()
  x, m = rnd(3, 4), rng.random((1, 4)) > 0.5
  check(lambda t, mm: t.masked_fill(mm, -1.5), lambda t, mm: t.masked_fill(mm, -1.5), x, m)
  np.testing.assert_array_equal(baregrad.where(Tensor(m), Tensor(x), 0.0).numpy(), np.where(m, x, 0.0))
  lab = np.array([[0, 3], [2, 1]])
  np.testing.assert_array_equal(F.one_hot(Tensor(lab)).numpy(), torch.nn.functional.one_hot(torch.tensor(lab)).numpy())
  assert F.one_hot(Tensor(lab), 6).dtype == dtypes.int64 and F.one_hot(Tensor(lab), 6).shape == (2, 2, 6)

@pytest.mark.parametrize("eq,shapes", [
  ("ij,jk->ik", [(3, 4), (4, 5)]),
  ("bij,bjk->bik", [(2, 3, 4), (2, 4, 1)]),
  ("ii->i", [(4, 4)]),
  ("ii", [(3, 3)]),
  ("ij,kj", [(2, 3), (4, 3)]),
  ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
  ("i,j->ij", [(3,), (5,)]),
  ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
  ("iij->j", [(3, 3, 2)]),
  ("...->", [(2, 3)]),
  ("ab...,b->...a", [(3, 4, 2), (4,)]),
])
def test_einsum(eq, shapes):
  torch = _t()
  arrs = [rnd(*s) for s in shapes]
  check(lambda *ts: F.einsum(eq, *ts), lambda *ts: torch.einsum(eq, *ts), *arrs)

def test_einsum_list_and_noncontiguous():
  torch = _t()
  a, b = rnd(4, 3), rnd(5, 4)
  check(lambda x, y: Tensor.einsum("ij,jk->ik", [x.T, y.T]), lambda x, y: torch.einsum("ij,jk->ik", [x.T, y.T]), a, b)

# ---------------------------------------------------------------- convolution and pooling

@pytest.mark.parametrize("n,cin,cout,hw,k,stride,padding,dilation,groups,bias", [
  (1, 3, 4, (7, 6), (3, 2), 1, 0, 1, 1, True),
  (2, 4, 6, (9, 8), (3, 3), (2, 1), 1, (1, 2), 2, False),
  (1, 6, 3, (5, 7), (2, 3), 3, (2, 0), 1, 3, True),
  (2, 2, 2, (6, 5), (3, 3), 1, "same", 2, 1, True),
  (1, 3, 2, (4, 4), (1, 1), 2, "valid", 1, 1, False),
])
def test_conv2d(n, cin, cout, hw, k, stride, padding, dilation, groups, bias):
  torch = _t()
  x, w = rnd(n, cin, *hw), rnd(cout, cin // groups, *k)
  arrs = [x, w] + ([rnd(cout)] if bias else [])
  kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
  check(lambda *t: F.conv2d(*t, **kw), lambda *t: torch.nn.functional.conv2d(*t, **kw), *arrs, atol=2e-4)

def test_conv2d_noncontiguous_and_unbatched():
  torch = _t()
  x, w = rnd(5, 2, 3, 6), rnd(4, 3, 2, 2)  # input given as (H, N, C, W)
  check(lambda a, b: a.permute(1, 2, 0, 3).conv2d(b, padding=1), lambda a, b: torch.nn.functional.conv2d(a.permute(1, 2, 0, 3), b, padding=1), x, w)
  check(lambda a, b: F.conv2d(a, b), lambda a, b: torch.nn.functional.conv2d(a, b), rnd(3, 5, 5), w)

def test_conv2d_kernel_count(generic_conv):
  x, w, b = Tensor(rnd(2, 4, 9, 8)), Tensor(rnd(6, 2, 3, 3)), Tensor(rnd(6))
  assert len(F.conv2d(x, w, stride=2, padding=1, dilation=(1, 2), groups=2).schedule()) == 1
  assert len(F.conv2d(x, w, b, padding=1, groups=2).schedule()) == 1
  assert len(F.conv2d(x, w, b, padding=1, groups=2).relu().schedule()) == 1   # bias and activation fuse
  assert len(F.conv1d(x[:, :, 0], w[:, :, 0], b, groups=2).schedule()) == 1
  assert len(F.conv2d(x.permute(0, 1, 3, 2), w, groups=2).schedule()) == 1
  assert len(F.max_pool2d(x, 3, 2, 1).schedule()) == 1

def test_conv1d():
  torch = _t()
  kw = dict(stride=2, padding=2, dilation=2, groups=2)
  check(lambda *t: F.conv1d(*t, **kw), lambda *t: torch.nn.functional.conv1d(*t, **kw), rnd(2, 4, 11), rnd(6, 2, 3), rnd(6))
  check(lambda *t: F.conv1d(*t, padding="same"), lambda *t: torch.nn.functional.conv1d(*t, padding="same"), rnd(1, 3, 6), rnd(2, 3, 4))

@pytest.mark.parametrize("n,cin,cout,hw,k,stride,padding,output_padding,groups,dilation", [
  (1, 2, 3, (4, 5), (3, 3), 2, 1, 1, 1, 1),
  (2, 4, 2, (3, 3), (2, 3), (1, 3), (0, 2), (0, 1), 2, (2, 1)),
  (1, 3, 3, (5, 4), (1, 2), 1, 0, 0, 3, 1),
])
def test_conv_transpose2d(n, cin, cout, hw, k, stride, padding, output_padding, groups, dilation):
  torch = _t()
  arrs = [rnd(n, cin, *hw), rnd(cin, cout // groups, *k), rnd(cout)]
  kw = dict(stride=stride, padding=padding, output_padding=output_padding, groups=groups, dilation=dilation)
  check(lambda *t: F.conv_transpose2d(*t, **kw), lambda *t: torch.nn.functional.conv_transpose2d(*t, **kw), *arrs, atol=2e-4)

@pytest.mark.parametrize("k,stride,padding,dilation,ceil_mode", [
  (2, None, 0, 1, False), (3, 2, 1, 1, True), ((2, 3), (1, 2), (1, 0), (2, 1), False), (3, 2, 0, 1, True), (1, 3, 0, 1, False),
])
def test_max_pool2d(k, stride, padding, dilation, ceil_mode):
  torch = _t()
  x = rng.permutation(2 * 3 * 7 * 6).astype(np.float32).reshape(2, 3, 7, 6) / 10  # distinct values: no ties in the gradient
  kw = dict(kernel_size=k, stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode)
  check(lambda t: F.max_pool2d(t, **kw), lambda t: torch.nn.functional.max_pool2d(t, **kw), x)

@pytest.mark.parametrize("k,stride,padding,ceil_mode,cip", [
  (2, None, 0, False, True), (3, 2, 1, True, True), (3, 2, 1, False, False), ((2, 3), (2, 1), (1, 1), True, False), (3, 3, 0, True, True),
])
def test_avg_pool2d(k, stride, padding, ceil_mode, cip):
  torch = _t()
  kw = dict(kernel_size=k, stride=stride, padding=padding, ceil_mode=ceil_mode, count_include_pad=cip)
  check(lambda t: F.avg_pool2d(t, **kw), lambda t: torch.nn.functional.avg_pool2d(t, **kw), rnd(1, 2, 7, 8))

def test_max_pool2d_indices():
  torch = _t()
  x = rng.permutation(2 * 7 * 6).astype(np.float32).reshape(1, 2, 7, 6)
  x[0, 0, :2, :2] = 5.0  # a tie: the first position wins
  for kw in (dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True), dict(kernel_size=(2, 3), dilation=(2, 1))):
    o, i = F.max_pool2d(Tensor(x), return_indices=True, **kw)
    to, ti = torch.nn.functional.max_pool2d(torch.tensor(x), return_indices=True, **kw)
    np.testing.assert_array_equal(o.numpy(), to.numpy())
    np.testing.assert_array_equal(i.numpy(), ti.numpy())

def test_pool1d_and_noncontiguous():
  torch = _t()
  check(lambda t: F.max_pool1d(t.permute(0, 2, 1), 3, 2, 1), lambda t: torch.nn.functional.max_pool1d(t.permute(0, 2, 1), 3, 2, 1),
        rng.permutation(40).astype(np.float32).reshape(2, 10, 2))
  check(lambda t: F.avg_pool1d(t, 4, 3, ceil_mode=True), lambda t: torch.nn.functional.avg_pool1d(t, 4, 3, ceil_mode=True), rnd(1, 2, 11))

@pytest.mark.parametrize("kw", [
  dict(size=(5, 7), mode="nearest"), dict(scale_factor=2, mode="nearest"), dict(scale_factor=(0.5, 1.7), mode="nearest"),
  dict(size=(5, 9), mode="bilinear", align_corners=False), dict(size=(2, 9), mode="bilinear", align_corners=True),
  dict(scale_factor=1.5, mode="bilinear"), dict(size=(4, 3), mode="nearest-exact"),
])
def test_interpolate(kw):
  torch = _t()
  check(lambda t: F.interpolate(t, **kw), lambda t: torch.nn.functional.interpolate(t, **kw), rnd(2, 3, 4, 6))

def test_adaptive_avg_pool_and_area():
  torch = _t()
  tf = torch.nn.functional
  for size in ((3, 3), (2, 5), 1, (None, 4)):
    check(lambda t: F.adaptive_avg_pool2d(t, size), lambda t: tf.adaptive_avg_pool2d(t, size), rnd(1, 2, 7, 6))
  check(lambda t: F.adaptive_avg_pool1d(t.permute(0, 2, 1), 4), lambda t: tf.adaptive_avg_pool1d(t.permute(0, 2, 1), 4), rnd(2, 9, 3))
  check(lambda t: F.interpolate(t, size=(4, 3), mode="area"), lambda t: tf.interpolate(t, size=(4, 3), mode="area"), rnd(1, 2, 7, 6))

def test_interpolate_linear():
  torch = _t()
  check(lambda t: F.interpolate(t, size=9, mode="linear", align_corners=True),
        lambda t: torch.nn.functional.interpolate(t, size=9, mode="linear", align_corners=True), rnd(1, 2, 5))

# ---------------------------------------------------------------- dropout and normalization

def test_dropout():
  x = Tensor(np.ones((64, 64), np.float32))
  assert x.dropout(0.5) is x                                      # the method follows Tensor.training (False)
  assert F.dropout(x, 0.5, training=None) is x
  assert F.dropout(x, 0.5, training=False) is x
  assert (F.dropout(x, 0.5).numpy() == 0).any()                   # training=True by default, as PyTorch's
  Tensor.training = True
  try:
    assert F.dropout(x, 0.5, training=False) is x
    y = F.dropout(x, 0.25).numpy()
    assert set(np.unique(y).tolist()) <= {0.0, float(np.float32(1 / 0.75))}
    assert 0.15 < (y == 0).mean() < 0.35
    assert (F.dropout(x, 1.0).numpy() == 0).all()
  finally: Tensor.training = False

def test_layer_group_rms_norm():
  torch = _t()
  tf = torch.nn.functional
  x = rnd(2, 3, 5)
  check(lambda t, w, b: F.layer_norm(t, (3, 5), w, b, 1e-3), lambda t, w, b: tf.layer_norm(t, (3, 5), w, b, 1e-3), x, rnd(3, 5), rnd(3, 5))
  check(lambda t: F.layer_norm(t.permute(0, 2, 1), 3), lambda t: tf.layer_norm(t.permute(0, 2, 1), (3,)), x)
  check(lambda t, w, b: F.group_norm(t, 2, w, b), lambda t, w, b: tf.group_norm(t, 2, w, b), rnd(1, 4, 3, 3), rnd(4), rnd(4))
  check(lambda t, w: F.rms_norm(t, 5, w, 1e-6), lambda t, w: tf.rms_norm(t, (5,), w, 1e-6), x, rnd(5))

def test_batch_norm():
  torch = _t()
  tf = torch.nn.functional
  x, w, b = rnd(4, 3, 2, 5), rnd(3), rnd(3)
  rm, rv = rnd(3), np.abs(rnd(3)) + 0.5
  check(lambda t, ww, bb: F.batch_norm(t, Tensor(rm), Tensor(rv), ww, bb, training=False),
        lambda t, ww, bb: tf.batch_norm(t, torch.tensor(rm), torch.tensor(rv), ww, bb, training=False), x, w, b)
  brm, brv = Tensor(rm.copy()), Tensor(rv.copy())
  trm, trv = torch.tensor(rm.copy()), torch.tensor(rv.copy())
  check(lambda t, ww, bb: F.batch_norm(t, brm, brv, ww, bb, training=True, momentum=0.3),
        lambda t, ww, bb: tf.batch_norm(t, trm, trv, ww, bb, training=True, momentum=0.3), x, w, b)
  np.testing.assert_allclose(brm.numpy(), trm.numpy(), atol=1e-5)
  np.testing.assert_allclose(brv.numpy(), trv.numpy(), atol=1e-5)
  check(lambda t: F.batch_norm(t, None, None, training=True), lambda t: tf.batch_norm(t, None, None, training=True), rnd(5, 2))

# ---------------------------------------------------------------- attention

@pytest.mark.parametrize("mask,causal,scale", [(None, False, None), ("bool", False, 0.3), ("float", False, None), (None, True, None)])
def test_sdpa(mask, causal, scale):
  torch = _t()
  q, k, v = rnd(2, 3, 4, 5), rnd(2, 3, 6, 5), rnd(2, 3, 6, 2)
  arrs = [q, k, v]
  if mask == "bool":
    m = rng.random((4, 6)) > 0.3
    m[:, 0] = True
    arrs.append(m)
  elif mask == "float": arrs.append(rnd(1, 3, 4, 6))
  def fb(*t): return F.scaled_dot_product_attention(*t[:3], attn_mask=t[3] if len(t) > 3 else None, is_causal=causal, scale=scale)
  def ft(*t): return torch.nn.functional.scaled_dot_product_attention(*t[:3], attn_mask=t[3] if len(t) > 3 else None, is_causal=causal, scale=scale)
  check(fb, ft, *arrs)

@pytest.mark.parametrize("mask,causal,L,S", [(None, False, 9, 7), ("bool", False, 9, 7), ("float", False, 9, 7), (None, True, 9, 9),
                                             (None, True, 6, 9), ("bool", False, 1, 7)])
def test_sdpa_long_sequences_in_blocks_of_rows(monkeypatch, mask, causal, L, S):
  # (the row blocks are the path without attention fusion, FUSE_ATTENTION=0: with it, one kernel holds no scores)
  with knobs.Context(FUSE_ATTENTION=0): _sdpa_blocks(monkeypatch, mask, causal, L, S)

def _sdpa_blocks(monkeypatch, mask, causal, L, S) -> None:
  # past BLOCK_SCORES scores the query rows go in blocks (no L x S matrix at once); values and gradients as PyTorch's
  import baregrad.tensor.ops.attention as att
  monkeypatch.setattr(att, "BLOCK_SCORES", 2 * 3 * 2 * S)   # 2 rows per block
  torch = _t()
  q, k, v = rnd(2, 3, L, 5), rnd(2, 3, S, 5), rnd(2, 3, S, 4)
  arrs = [q, k, v]
  if mask == "bool":
    m = rng.random((L, S)) > 0.3
    m[:, 0] = True
    arrs.append(m)
  elif mask == "float": arrs.append(rnd(1, 3, L, S))
  def fb(*t): return F.scaled_dot_product_attention(*t[:3], attn_mask=t[3] if len(t) > 3 else None, is_causal=causal)
  def ft(*t): return torch.nn.functional.scaled_dot_product_attention(*t[:3], attn_mask=t[3] if len(t) > 3 else None, is_causal=causal)
  check(fb, ft, *arrs)
  if L > 2:   # the blocks' scores: no buffer of the schedule holds all L x S of them
    out = F.scaled_dot_product_attention(Tensor(q), Tensor(k), Tensor(v), is_causal=causal)
    assert max(b.size for it in out.schedule() for b in it.bufs[:1]) < 2 * 3 * L * S

def test_sdpa_gqa():
  torch = _t()
  check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
        lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True), rnd(1, 4, 3, 2), rnd(1, 2, 5, 2), rnd(1, 2, 5, 3))

# ---------------------------------------------------------------- losses

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted,smoothing", [(False, 0.0), (True, 0.0), (False, 0.2), (True, 0.1)])
def test_cross_entropy_indices(reduction, weighted, smoothing):
  torch = _t()
  x = rnd(5, 4, 3)                        # (N, C, d1)
  t = rng.integers(0, 4, (5, 3))
  t[0, 1] = t[3, 2] = -100                # ignored
  arrs = [x, t] + ([np.abs(rnd(4)) + 0.1] if weighted else [])
  kw = dict(reduction=reduction, label_smoothing=smoothing)
  check(lambda *a: F.cross_entropy(a[0], a[1], a[2] if weighted else None, **kw),
        lambda *a: torch.nn.functional.cross_entropy(a[0], a[1], a[2] if weighted else None, **kw), *arrs, nograd=(2,))

def test_cross_entropy_probs_and_1d():
  torch = _t()
  tf = torch.nn.functional
  x, p = rnd(3, 5), np.abs(rnd(3, 5))
  p = p / p.sum(1, keepdims=True)
  check(lambda a, b: F.cross_entropy(a, b), lambda a, b: tf.cross_entropy(a, b), x, p, nograd=(1,))
  check(lambda a, b, w: F.cross_entropy(a, b, w, reduction="none", label_smoothing=0.3),
        lambda a, b, w: tf.cross_entropy(a, b, w, reduction="none", label_smoothing=0.3), x, p, rnd(5), nograd=(1, 2))
  check(lambda a, b: a.cross_entropy(b), lambda a, b: tf.cross_entropy(a, b), rnd(4), np.array(2))

def test_nll_loss():
  torch = _t()
  x = rnd(4, 3)
  t = np.array([0, 2, 1, 2])
  check(lambda a, b, w: F.nll_loss(a.log_softmax(1), b, w, ignore_index=1),
        lambda a, b, w: torch.nn.functional.nll_loss(a.log_softmax(1), b, w, ignore_index=1), x, t, np.abs(rnd(3)), nograd=(2,))

def test_bce_and_regression_losses():
  torch = _t()
  tf = torch.nn.functional
  x, y = rnd(3, 4), (rng.random((3, 4)) > 0.5).astype(np.float32)
  p = 1 / (1 + np.exp(-x))
  check(lambda a, b, w: F.binary_cross_entropy(a, b, w), lambda a, b, w: tf.binary_cross_entropy(a, b, w),
        p, y, rng.random((3, 4)).astype(np.float32), nograd=(1, 2))
  check(lambda a, b: F.binary_cross_entropy_with_logits(a * 20, b, reduction="sum"),
        lambda a, b: tf.binary_cross_entropy_with_logits(a * 20, b, reduction="sum"), x, y, nograd=(1,))
  check(lambda a, b, pw: F.binary_cross_entropy_with_logits(a, b, pos_weight=pw),
        lambda a, b, pw: tf.binary_cross_entropy_with_logits(a, b, pos_weight=pw), x, y, np.abs(rnd(4)), nograd=(1, 2))
  for name in ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss"):
    for red in ("mean", "none"):
      check(lambda a, b: getattr(F, name)(a, b, reduction=red), lambda a, b: getattr(tf, name)(a, b, reduction=red), x, rnd(3, 4))

# ---------------------------------------------------------------- errors

def test_errors_name_shapes():
  # shape mismatches are RuntimeErrors, as in PyTorch (cross_entropy's batch size: ValueError, as in PyTorch)
  x = Tensor(rnd(1, 4, 5, 5))
  with pytest.raises(RuntimeError, match=r"4 channels.*\(6, 3, 3, 3\).*groups=1"): F.conv2d(x, Tensor(rnd(6, 3, 3, 3)))
  with pytest.raises(RuntimeError, match=r"groups=3"): F.conv2d(x, Tensor(rnd(6, 2, 3, 3)), groups=3)
  with pytest.raises(RuntimeError, match=r"not divisible by groups=2"): F.conv2d(x, Tensor(rnd(3, 2, 3, 3)), groups=2)
  with pytest.raises(RuntimeError, match=r"larger than the padded input"): F.conv2d(x, Tensor(rnd(2, 4, 7, 7)))
  with pytest.raises(RuntimeError, match=r"except in dimension 1.*\(2, 3\).*\(3, 3\)"): F.cat([Tensor(rnd(2, 3)), Tensor(rnd(3, 3))], 1)
  with pytest.raises(IndexError, match=r"dimension 3 is out of range"): F.cat([Tensor(rnd(2, 3))], 3)
  with pytest.raises(RuntimeError, match=r"same shape"): F.stack([Tensor(rnd(2, 3)), Tensor(rnd(3, 2))])
  with pytest.raises(RuntimeError, match=r"index shape \(2, 4\) is larger than the input shape \(3, 3\) in dimension 1"):
    F.gather(Tensor(rnd(3, 3)), 0, Tensor(np.zeros((2, 4), np.int64)))
  with pytest.raises(RuntimeError, match=r"index has 1 dimensions"): F.gather(Tensor(rnd(3, 3)), 0, Tensor(np.zeros(2, np.int64)))
  with pytest.raises(IndexError): F.gather(Tensor(rnd(3, 3)), 2, Tensor(np.zeros((3, 3), np.int64)))
  with pytest.raises(RuntimeError, match=r"subscript 'j' has size 3 in one operand and 4"): F.einsum("ij,jk", Tensor(rnd(2, 3)), Tensor(rnd(4, 2)))
  with pytest.raises(ValueError, match=r"target of shape \(3,\)"): F.cross_entropy(Tensor(rnd(2, 4)), Tensor(np.zeros(3, np.int64)))
  with pytest.raises(RuntimeError, match=r"normalized_shape \(4,\)"): F.layer_norm(Tensor(rnd(2, 3)), 4)
  with pytest.raises(RuntimeError, match=r"sum to the size 5"): F.split(Tensor(rnd(5)), [2, 2])
  with pytest.raises(RuntimeError, match=r"padding"): F.max_pool2d(x, 2, padding=2)

# ---------------------------------------------------------------- odds and ends

def test_cat_empty_piece_and_grad_through_pad():
  torch = _t()
  check(lambda a, e, b: F.cat([a, e, b], 1), lambda a, e, b: torch.cat([a, e, b], 1), rnd(2, 3, 4), rnd(2, 0, 4), rnd(2, 1, 4), nograd=(1,))
  check(lambda a, b: F.cat([a.relu(), b * 2], 0), lambda a, b: torch.cat([a.relu(), b * 2], 0), rnd(1, 3), rnd(2, 3))

def test_dropout_in_attention_and_grad():
  q = Tensor(rnd(1, 2, 8, 4))
  a = F.scaled_dot_product_attention(q, q, q).numpy()
  b = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5).numpy()
  assert a.shape == b.shape and not np.allclose(a, b)
  Tensor.training = True
  try:
    x = Tensor(np.ones((16, 16), np.float32), requires_grad=True)
    y = F.dropout(x, 0.5)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), y.numpy())   # d(sum)/dx is the mask scaled, as y is for x = 1
  finally: Tensor.training = False

def test_exports():
  assert baregrad.cat is F.cat and baregrad.conv2d is F.conv2d and baregrad.tensor.functional is F
  x = Tensor(rnd(2, 3))
  np.testing.assert_array_equal(baregrad.einsum("ij->ji", x).numpy(), x.numpy().T)
  assert Tensor.stack([x, x], 1).shape == (2, 2, 3) and x.stack(x, x).shape == (3, 2, 3)

# ---------------------------------------------------------------- regressions in the core found while building these ops

def test_core_bool_vector_store():
  x = rnd(3, 5)
  np.testing.assert_array_equal((Tensor(x) > 0).numpy(), x > 0)        # <N x i1> stores were bit-packed
  b = x > 0
  np.testing.assert_array_equal(Tensor(b)._pad(((0, 0), (2, 0))).numpy(), np.pad(b, ((0, 0), (2, 0))))

def test_core_memory_planner_keeps_leaves():
  a, b, g = rnd(3, 4), rnd(4, 5), rnd(3, 1)
  A, B = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
  m = A.matmul(B)
  ((m * m).sum(-1, keepdim=True) * Tensor(g)).sum().backward()
  A.grad.numpy()                                                      # reused B's buffer for an intermediate
  np.testing.assert_allclose(B.grad.numpy(), np.einsum("ik,ij->kj", a, 2 * (a @ b) * g), rtol=1e-4, atol=1e-4)

def test_core_reduce_over_broadcast_axis_and_realized_root():
  x = rnd(4, 5)
  np.testing.assert_allclose(Tensor(x).reshape(4, 1, 5).expand(4, 3, 5).sum(1).numpy(), 3 * x, rtol=1e-6)
  y = rnd(4, 3, 5)
  np.testing.assert_allclose(Tensor(y).sum(1).T.contiguous().numpy(), y.sum(1).T, rtol=1e-5)

def test_core_reshaped_reduction_fuses():
  x = rnd(3, 4)
  t = Tensor(x).sum(-1) * 2 + 1
  assert len(t.schedule()) == 1
  np.testing.assert_allclose(t.numpy(), x.sum(-1) * 2 + 1, rtol=1e-5)
  u = Tensor(x).sum(0).reshape(2, 2) * Tensor(x)[1:3, 0:2]
  np.testing.assert_allclose(u.numpy(), x.sum(0).reshape(2, 2) * x[1:3, 0:2], rtol=1e-5)

@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular", "constant"])
def test_pad_modes(mode):
  torch = _t()
  check(lambda t: F.pad(t, (2, 1, 0, 3), mode=mode), lambda t: torch.nn.functional.pad(t, (2, 1, 0, 3), mode=mode), rnd(1, 2, 5, 4))
  check(lambda t: F.pad(t.permute(0, 2, 1), (3, -1), mode=mode), lambda t: torch.nn.functional.pad(t.permute(0, 2, 1), (3, -1), mode=mode), rnd(2, 6, 2))

def test_3d_conv_pool_and_transpose1d():
  torch = _t()
  tf = torch.nn.functional
  kw = dict(stride=(1, 2, 1), padding=1, dilation=(2, 1, 1), groups=2)
  check(lambda *t: F.conv3d(*t, **kw), lambda *t: tf.conv3d(*t, **kw), rnd(1, 4, 5, 6, 4), rnd(2, 2, 2, 3, 2), rnd(2), atol=2e-4)
  x = rng.permutation(2 * 5 * 6 * 4).astype(np.float32).reshape(1, 2, 5, 6, 4)
  check(lambda t: F.max_pool3d(t, 2, (1, 2, 2), 1, ceil_mode=True), lambda t: tf.max_pool3d(t, 2, (1, 2, 2), 1, ceil_mode=True), x)
  check(lambda t: F.avg_pool3d(t, 3, 2, 1, count_include_pad=False), lambda t: tf.avg_pool3d(t, 3, 2, 1, count_include_pad=False), x)
  kw1 = dict(stride=3, padding=1, output_padding=2, dilation=2)
  check(lambda *t: F.conv_transpose1d(*t, **kw1), lambda *t: tf.conv_transpose1d(*t, **kw1), rnd(2, 3, 5), rnd(3, 2, 3), rnd(2))
