"""The ops of issue 9 against PyTorch (CPU): forward values and dtypes, gradients, awkward shapes (0-size,
1-element, non-contiguous, broadcast) and bad input. Shapes are small: this file also runs on the mock NV GPU."""
import math
import numpy as np
import pytest
import baregrad
from baregrad import Tensor
import baregrad.tensor.functional as F
from tests.torch_helpers import torch, check, assert_same, rnd

TF = torch.nn.functional

# ---------------------------------------------------------------- unary math
# name -> (baregrad fn, torch fn or None (same), input range, rtol, atol)
UNARY = {
  "asin": (lambda x: x.asin(), None, (-0.99, 0.99), 1e-5, 1e-6),
  "acos": (lambda x: x.acos(), None, (-0.99, 0.99), 1e-5, 1e-6),
  "atan": (lambda x: x.atan(), None, (-8, 8), 1e-5, 1e-6),
  "sinh": (lambda x: x.sinh(), None, (-4, 4), 1e-5, 1e-6),
  "cosh": (lambda x: x.cosh(), None, (-4, 4), 1e-5, 1e-6),
  "asinh": (lambda x: x.asinh(), None, (-8, 8), 1e-5, 1e-6),
  "acosh": (lambda x: x.acosh(), None, (1.01, 8), 1e-5, 1e-6),
  "atanh": (lambda x: x.atanh(), None, (-0.95, 0.95), 1e-5, 1e-6),
  "log1p": (lambda x: x.log1p(), None, (-0.9, 4), 1e-5, 1e-6),
  "expm1": (lambda x: x.expm1(), None, (-3, 3), 1e-5, 1e-6),
  "tanh": (lambda x: x.tanh(), None, (-4, 4), 1e-5, 1e-6),
  "softsign": (lambda x: x.softsign(), lambda x: TF.softsign(x), (-4, 4), 1e-6, 1e-7),
  "arctan": (lambda x: x.arctan(), lambda x: torch.arctan(x), (-3, 3), 1e-5, 1e-6),
}
LAYOUTS = {
  "T_step": ((5, 6), lambda x: x.T[1:, ::2]),
  "expand": ((1, 4), lambda x: x.expand(3, 4)),
  "one": ((1,), lambda x: x),
  "empty": ((0, 3), lambda x: x),
}
UNARY_CASES = [(n, l) for n in UNARY for l in LAYOUTS if l == "T_step" or n in ("asin", "atan", "sinh", "log1p")]

@pytest.mark.parametrize("name,layout", UNARY_CASES)
def test_unary(name, layout):
  bfn, tfn, (lo, hi), rtol, atol = UNARY[name]
  shape, view = LAYOUTS[layout]
  check(lambda x: bfn(view(x)), rnd(shape, low=lo, high=hi), tfn=lambda x: (tfn or bfn)(view(x)), rtol=rtol, atol=atol)

def test_unary_special_values_and_tiny_arguments():
  x = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 1e-6, -1e-6, 2.0, -2.0, 50.0, -50.0, 88.5, -88.5, 1e20], np.float32)
  for name in UNARY:
    if name == "softsign": continue
    check(UNARY[name][0], x, tfn=UNARY[name][1], rtol=2e-6, atol=0, grad=False, what=name)

def _exp2_error_f64() -> float:
  """The device's relative error of float64 exp2 (NV renders it through a float32 approximation: about 1e-7)."""
  x = np.linspace(-3, 3, 7) + 0.37
  return float(np.max(np.abs(Tensor(x).exp2().numpy() / np.exp2(x) - 1)))

@pytest.mark.parametrize("dt", ["float64", "float16"])
def test_unary_other_float_dtypes(dt):
  x = rnd((7,), dt, -0.9, 0.9)
  # float64: as accurate as the device's own exp2/log2 allow (the compositions add a few ulps at most)
  tol = max(1e-12, 20 * _exp2_error_f64()) if dt == "float64" else 1e-3
  for name in ("asin", "acos", "atan", "sinh", "cosh", "asinh", "atanh", "log1p", "expm1", "tanh"):
    check(UNARY[name][0], x, rtol=tol, atol=tol, what=f"{name} {dt}", grad=dt == "float64")

def test_unary_int_input_promotes():
  x = np.array([0, 1, -1, 3], np.int32)
  for name in ("atan", "sinh", "asinh", "expm1", "log1p"):
    check(UNARY[name][0], x if name != "log1p" else np.abs(x), grad=False, rtol=1e-6, what=name)

def test_unary_edge_gradients_match_torch():
  # at the ends of the domains PyTorch's formulas give inf or NaN: so do ours
  check(lambda x: x.asin(), np.array([-1.0, 1.0, 0.5], np.float32), rtol=1e-6)
  check(lambda x: x.acos(), np.array([-1.0, 1.0, 0.5], np.float32), rtol=1e-6)
  check(lambda x: x.atanh(), np.array([-1.0, 1.0, 0.5], np.float32), rtol=1e-6)
  check(lambda x: x.acosh(), np.array([1.0, 2.0], np.float32), rtol=1e-6)

# ---------------------------------------------------------------- binary math
BSHAPES = {"same": ((3, 4), (3, 4)), "outer": ((3, 1), (1, 4)), "scalar0d": ((2, 3), ()), "empty": ((0, 3), (1, 3)), "T": ((4, 3), (4, 3))}

@pytest.mark.parametrize("shapes", list(BSHAPES))
@pytest.mark.parametrize("name", ["atan2", "copysign", "logaddexp"])
def test_binary(name, shapes):
  sa, sb = BSHAPES[shapes]
  a, b = rnd(sa, low=-3, high=3, seed=1), rnd(sb, low=-3, high=3, seed=2)
  tr = (lambda x: x.T) if shapes == "T" else (lambda x: x)
  check(lambda x, y: getattr(tr(x), name)(tr(y)), a, b, tfn=lambda x, y: getattr(torch, name)(tr(x), tr(y)), rtol=1e-5, atol=1e-6)

def test_binary_special_values():
  v = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 3.0], np.float32)
  a, b = np.repeat(v, len(v)), np.tile(v, len(v))
  for name in ("atan2", "copysign", "logaddexp"):
    ob, ot = check(lambda x, y: getattr(x, name)(y), a, b, tfn=lambda x, y: getattr(torch, name)(x, y), grad=False, rtol=1e-6, atol=0, what=name)
    num = ~np.isnan(ot.numpy())
    np.testing.assert_array_equal(np.signbit(ob.numpy())[num], np.signbit(ot.numpy())[num], err_msg=f"{name}: signs of zeros")
  check(lambda x: x.copysign(-1), np.array([1.0, -2.0, 0.0], np.float32), tfn=lambda x: torch.copysign(x, torch.tensor(-1.0)))
  check(lambda x, y: x.copysign(y), np.array([1, -2, 0], np.int32), np.array([-1.0, 1.0, -0.0], np.float32), tfn=lambda x, y: torch.copysign(x, y))
  check(lambda x: x.logaddexp(x), np.array([-30.0, 0.0, 100.0], np.float32), tfn=lambda x: torch.logaddexp(x, x), rtol=1e-6)

def test_isclose_allclose():
  a = np.array([1.0, 1.0, np.nan, np.inf, -np.inf, np.inf, 0.0, 1e-9], np.float32)
  b = np.array([1.0 + 1e-6, 1.1, np.nan, np.inf, np.inf, 1e30, 1e-9, 0.0], np.float32)
  for kw in ({}, {"equal_nan": True}, {"rtol": 0.2}, {"atol": 1e-8, "rtol": 0}):
    check(lambda x, y: x.isclose(y, **kw), a, b, tfn=lambda x, y: torch.isclose(x, y, **kw), grad=False, what=str(kw))
  i = np.array([1, 5, -3], np.int64)
  check(lambda x, y: x.isclose(y), i, i + np.array([0, 1, 0]), tfn=lambda x, y: torch.isclose(x, y), grad=False)
  assert baregrad.allclose(Tensor(a[:2]), Tensor(a[:2])) and not Tensor(a).allclose(Tensor(b))
  with pytest.raises(RuntimeError, match="rtol must be greater than or equal to zero, got rtol=-1"): Tensor(a).isclose(Tensor(b), rtol=-1)

def test_softmin_normalize_norm():
  x = rnd((3, 4, 5), seed=4)
  check(lambda t: t.softmin(1), x, tfn=lambda t: TF.softmin(t, 1), rtol=1e-5, atol=1e-7)
  check(lambda t: F.softmin(t, dim=-1), x, tfn=lambda t: TF.softmin(t, dim=-1), rtol=1e-5, atol=1e-7)
  for p in (2.0, 1.0, 3.0, math.inf):
    check(lambda t: F.normalize(t, p=p, dim=1), x, tfn=lambda t: TF.normalize(t, p=p, dim=1), rtol=1e-5, atol=1e-6, what=f"p={p}")
  z = np.zeros((2, 3), np.float32)
  z[1] = [3.0, 0.0, 4.0]
  check(lambda t: F.normalize(t, dim=1), z, tfn=lambda t: TF.normalize(t, dim=1))   # the all-zero row: gradient 0, no NaN
  check(lambda t: t.norm(), x, tfn=lambda t: t.norm(), rtol=1e-5)
  check(lambda t: t.norm(1, dim=(0, 2), keepdim=True), x, tfn=lambda t: t.norm(1, dim=(0, 2), keepdim=True), rtol=1e-5)
  with pytest.raises(TypeError, match="softmin: dim is required"): Tensor(x).softmin()

# ---------------------------------------------------------------- scans

@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cummax_cummin(dim):
  x = rnd((4, 6), seed=5)
  x[1, 2] = x[1, 0] = x[0, 3]  # ties
  for name in ("cummax", "cummin"):
    check(lambda t: getattr(t, name)(dim).values, x, tfn=lambda t: getattr(torch, name)(t, dim).values, rtol=0, atol=0)
    check(lambda t: getattr(t, name)(dim).indices, x, tfn=lambda t: getattr(torch, name)(t, dim).indices, grad=False)

def test_cummax_nan_bool_int_zero_dim_empty():
  x = np.array([1.0, 3.0, 3.0, 2.0, np.nan, 5.0, np.nan, 1.0], np.float32)
  for name in ("cummax", "cummin"):
    for k in (0, 1):
      check(lambda t: getattr(t, name)(0)[k], x, tfn=lambda t: getattr(torch, name)(t, 0)[k], grad=False, what=f"{name} {k}")
    check(lambda t: getattr(t, name)(0)[1], np.array([True, False, True, True]), tfn=lambda t: getattr(torch, name)(t, 0)[1], grad=False)
    check(lambda t: getattr(t, name)(0)[0], np.array([True, False, True, True]), tfn=lambda t: getattr(torch, name)(t, 0)[0], grad=False)
    check(lambda t: getattr(t, name)(1)[0], np.array([[3, -7, 5, -7, 9]], np.int64), tfn=lambda t: getattr(torch, name)(t, 1)[0], grad=False)
    check(lambda t: getattr(t, name)(0)[0], np.array(2.5, np.float32), tfn=lambda t: getattr(torch, name)(t, 0)[0])
    check(lambda t: getattr(t, name)(1)[1], np.zeros((2, 0), np.float32), tfn=lambda t: getattr(torch, name)(t, 1)[1], grad=False)

def test_logcumsumexp():
  check(lambda t: t.logcumsumexp(1), rnd((3, 7), low=-5, high=5), tfn=lambda t: t.logcumsumexp(1), rtol=1e-5, atol=1e-6)
  check(lambda t: t.T.logcumsumexp(0), rnd((3, 5)), tfn=lambda t: t.T.logcumsumexp(0), rtol=1e-5, atol=1e-6)
  x = np.array([-np.inf, -np.inf, 0.0, 1000.0, -1000.0, np.inf, 3.0], np.float32)
  check(lambda t: t.logcumsumexp(0), x, tfn=lambda t: t.logcumsumexp(0), grad=False, rtol=1e-6)
  check(lambda t: baregrad.logcumsumexp(t, 0), np.array(1.5, np.float32), tfn=lambda t: torch.logcumsumexp(t, 0))

def test_cumsum_long_axis_uses_scan():
  x = rnd((2, 300), seed=6)
  check(lambda t: t.cumsum(1), x, tfn=lambda t: t.cumsum(1), rtol=1e-4, atol=1e-4)
  check(lambda t: t.cumsum(1), np.arange(600).reshape(2, 300).astype(np.int32), tfn=lambda t: t.cumsum(1), grad=False)

# ---------------------------------------------------------------- sorting

@pytest.mark.parametrize("shape,dim", [((5,), 0), ((3, 6), 1), ((4, 3), 0), ((2, 1), 1), ((2, 0), 1), ((), 0)])
@pytest.mark.parametrize("descending", [False, True])
def test_sort(shape, dim, descending):
  x = rnd(shape, seed=7)
  check(lambda t: t.sort(dim, descending=descending).values, x, tfn=lambda t: t.sort(dim=dim, descending=descending, stable=True).values)
  check(lambda t: t.sort(dim, descending=descending)[1], x, tfn=lambda t: t.sort(dim=dim, descending=descending, stable=True)[1], grad=False)

def test_sort_ties_nan_zeros_ints_bools_noncontiguous():
  x = np.array([3.0, np.nan, 1.0, -0.0, 0.0, -np.inf, 2.0, 2.0, 5.0, np.inf, np.nan], np.float32)
  for desc in (False, True):
    for k in (0, 1):
      ob, ot = check(lambda t: t.sort(descending=desc)[k], x, tfn=lambda t: t.sort(descending=desc, stable=True)[k], grad=False)
    np.testing.assert_array_equal(np.signbit(ob.numpy()), np.signbit(ot.numpy()))
  for desc, arr in ((False, np.array([5, -3, 5, 0, -3, 2**40], np.int64)), (True, np.array([True, False, True, False])),
                    (True, np.array([2.5, -1.0, 2.5], np.float16))):
    check(lambda t: t.sort(descending=desc)[0], arr, tfn=lambda t: t.sort(descending=desc, stable=True)[0], grad=False)
    check(lambda t: t.argsort(descending=desc), arr, tfn=lambda t: t.argsort(descending=desc, stable=True), grad=False)
  a = rnd((4, 5), seed=8)
  check(lambda t: t.T[::-1].sort(0)[0], a, tfn=lambda t: t.T.flip(0).sort(dim=0, stable=True)[0])
  check(lambda t: t[:1].expand(3, 5).sort(1)[0], a, tfn=lambda t: t[:1].expand(3, 5).sort(1)[0])

def test_argsort_msort_kthvalue():
  x = rnd((3, 5), seed=9)
  check(lambda t: t.argsort(0, descending=True), x, tfn=lambda t: t.argsort(0, descending=True), grad=False)
  check(lambda t: baregrad.msort(t), x, tfn=lambda t: torch.msort(t))
  check(lambda t: t.kthvalue(2, 1).values, x, tfn=lambda t: t.kthvalue(2, 1).values)
  check(lambda t: t.kthvalue(5, 1, keepdim=True).indices, x, tfn=lambda t: t.kthvalue(5, 1, keepdim=True).indices, grad=False)

@pytest.mark.parametrize("k,dim,largest", [(2, 1, True), (3, 0, False), (0, 1, True)])
def test_topk(k, dim, largest):
  x = rnd((4, 6), seed=10)
  check(lambda t: t.topk(k, dim, largest).values, x, tfn=lambda t: t.topk(k, dim, largest).values)
  check(lambda t: t.topk(k, dim, largest)[1], x, tfn=lambda t: t.topk(k, dim, largest)[1], grad=False)

@pytest.mark.parametrize("largest", [True, False])
def test_small_topk_selects_what_the_sort_would(largest):
  """topk with a small k takes k selection passes instead of sorting the axis (topk(8) of 2048x1024: 228 -> ~60 ms):
  the same values and indices as the sort's first k, ties by index, NaN the largest, -0.0 and 0.0 equal, for floats,
  ints and bools on any axis, and the gradient to the elements taken."""
  from baregrad.tensor.ops.sorting import _select_wins
  assert _select_wins(8, 1024) and _select_wins(2, 6) and not _select_wins(200, 1024)
  r = np.random.default_rng(12)
  x = r.standard_normal((3, 37)).astype(np.float32)
  x[0, ::5], x[1, 3], x[1, 9], x[2, 4], x[2, 6], x[2, 7] = x[0, 1], np.nan, np.nan, -np.inf, 0.0, -0.0
  for t in (x, r.integers(-4, 4, (3, 37)).astype(np.int32), r.integers(0, 2, (3, 37)).astype(bool)):
    for dim, k in ((1, 6), (0, 2)):
      got = baregrad.Tensor(t).topk(k, dim, largest)
      want = baregrad.Tensor(t).sort(dim, descending=largest)
      keep = tuple(slice(0, k) if a == dim else slice(None) for a in range(2))
      np.testing.assert_array_equal(got.values.numpy(), want.values.numpy()[keep])
      np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy()[keep])
  check(lambda t: t.topk(5, 1, largest).values * 2, rnd((4, 50), seed=13), tfn=lambda t: t.topk(5, 1, largest).values * 2)

def test_sort_bitonic_longer_axis_with_gradient():
  # 19 elements pad to 32: 15 stages, padding must stay after NaNs and infinities either way
  x = rnd((2, 19), seed=11)
  x[0, 5], x[1, 7], x[1, 8] = np.nan, np.inf, -np.inf
  for desc in (False, True):
    check(lambda t: t.sort(1, descending=desc)[0], x, tfn=lambda t: t.sort(dim=1, descending=desc, stable=True)[0])
    check(lambda t: t.sort(1, descending=desc)[1], x, tfn=lambda t: t.sort(dim=1, descending=desc, stable=True)[1], grad=False)

# ---------------------------------------------------------------- data-dependent shapes

def test_nonzero_argwhere():
  x = np.array([[0.0, 1.5, 0.0], [2.0, 0.0, -0.0], [0.0, 0.0, 3.0]], np.float32)
  check(lambda t: t.nonzero(), x, tfn=lambda t: t.nonzero(), grad=False)
  check(lambda t: t.T.nonzero(), x, tfn=lambda t: t.T.nonzero(), grad=False)
  check(lambda t: baregrad.argwhere(t), x, tfn=lambda t: torch.argwhere(t), grad=False)
  for arr in (np.zeros((2, 3), np.int32), np.array(5, np.int64), np.array(0.0, np.float32), np.zeros((0, 4), np.float32), np.array([True, False, True])):
    check(lambda t: t.nonzero(), arr, tfn=lambda t: t.nonzero(), grad=False)
  for a, b in zip(Tensor(x).nonzero(as_tuple=True), torch.tensor(x).nonzero(as_tuple=True)): assert_same(a, b)

def _like(t, arr):
  """arr as a tensor of t's library (baregrad or torch)."""
  return Tensor(arr) if isinstance(t, Tensor) else torch.tensor(arr)

def test_masked_select_and_mask_indexing():
  x = rnd((3, 2), seed=12)
  check(lambda t: t.masked_select(t > 0), x, tfn=lambda t: t.masked_select(t > 0))
  m = np.array([True, False])
  check(lambda t: baregrad.masked_select(t, Tensor(m)), x, tfn=lambda t: torch.masked_select(t, torch.tensor(m)))   # broadcast mask
  check(lambda t: t[t > 0.5], x)
  check(lambda t: t.T[_like(t, m)], x)
  check(lambda t: t[:, t[0] > 0], x)
  check(lambda t: t[t[:, 0] > 0, 1:], x)
  check(lambda t: t[t < -10], x)                                           # nothing selected
  check(lambda t: t[_like(t, np.array([True, False, True])), _like(t, np.array([0, 1]))], x)   # a mask beside an int index
  with pytest.raises(IndexError, match=r"shape of the mask \(2,\)"): Tensor(x)[Tensor([True, False])]
  with pytest.raises(RuntimeError, match="mask must be a bool tensor"): Tensor(x).masked_select(Tensor(x))
  with pytest.raises(RuntimeError, match="does not broadcast"): Tensor(x).masked_select(Tensor([True, False, True]))

INDEX_CASES = {
  "ell_last": lambda t: t[..., 0], "ell_mid": lambda t: t[0, ..., 1], "none_ell_none": lambda t: t[None, ..., None],
  "tuple_seq": lambda t: t[(0, 1),], "tuple_inner": lambda t: t[:, (0, 2)], "true": lambda t: t[True], "false": lambda t: t[False],
  "bool_list": lambda t: t[[True, False]], "ell_list": lambda t: t[..., [0, 1], :], "lists_ell": lambda t: t[[0, 1], ..., [1, 2]],
  "ell_slices": lambda t: t[1:, ..., ::2], "mask_ell": lambda t: t[..., t[0, 0, 0] > 2],
}

@pytest.mark.parametrize("name", list(INDEX_CASES))
def test_indexing_tuples_ellipsis_bools(name):
  check(INDEX_CASES[name], rnd((2, 3, 4, 5), seed=13), rtol=0, atol=0)

def test_unique():
  x = np.array([3, 1, 2, 3, 1, 5, 5, 5], np.int64)
  for kw in ({}, {"return_inverse": True, "return_counts": True}):
    ob, ot = Tensor(x).unique(**kw), torch.tensor(x).unique(**kw)
    for a, b in zip(ob if isinstance(ob, tuple) else (ob,), ot if isinstance(ot, tuple) else (ot,)): assert_same(a, b, what=str(kw))
  f = np.array([[1.0, np.nan], [2.0, np.nan], [1.0, -0.0]], np.float32)
  for a, b in zip(Tensor(f).unique(return_inverse=True, return_counts=True), torch.tensor(f).unique(return_inverse=True, return_counts=True)):
    assert_same(a, b)
  assert_same(baregrad.unique(Tensor(np.array([True, False, True]))), torch.unique(torch.tensor([True, False, True])))
  for a, b in zip(Tensor(np.zeros(0, np.float32)).unique(return_counts=True), torch.zeros(0).unique(return_counts=True)): assert_same(a, b)

@pytest.mark.parametrize("shape,dim", [((5, 3), 0), ((4, 5, 3), 1), ((4, 2, 3), -1), ((0, 3), 0), ((1, 4), 0)])
def test_unique_dim(shape, dim):
  x = rnd(shape, "int64", 0, 2, seed=21)
  for kw in ({}, {"return_inverse": True, "return_counts": True}):
    ob, ot = Tensor(x).unique(dim=dim, **kw), torch.tensor(x).unique(dim=dim, **kw)
    for a, b in zip(ob if isinstance(ob, tuple) else (ob,), ot if isinstance(ot, tuple) else (ot,)): assert_same(a, b, what=f"{shape} {dim} {kw}")
  f = np.array([[1.0, -0.0, 2.0], [1.0, 0.0, 2.0], [0.5, 3.0, 1.0], [True, False, True]], np.float32)  # -0.0 == 0.0: one slice
  for a, b in zip(Tensor(f).unique(dim=0, return_inverse=True, return_counts=True), torch.tensor(f).unique(dim=0, return_inverse=True, return_counts=True)):
    assert_same(a, b)
  b6 = rnd((6, 2), "bool", seed=3)
  assert_same(Tensor(b6).unique(dim=0), torch.tensor(b6).unique(dim=0))
  with pytest.raises(RuntimeError, match="no slices to compare"): Tensor(np.zeros((3, 0), np.float32)).unique(dim=0)

@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (1, 1), (2, 0, 0), (0, 2, 2)])
def test_det(shape):
  check(lambda t: t.det(), rnd(shape, seed=22), tfn=torch.linalg.det, rtol=1e-5, atol=1e-5)

def test_det_pivots_singular_dtypes_errors():
  # a row swap is needed (zero in the corner), a singular matrix, float64, float16 (factored in float32), batched
  check(lambda t: t.det(), np.array([[0.0, 2.0, 1.0], [3.0, 4.0, 0.0], [1.0, 1.0, 1.0]], np.float32), tfn=torch.linalg.det)
  assert abs(Tensor(np.array([[1, 2, 3], [2, 4, 6], [1, 0, 1]], np.float32)).det().item()) == 0.0
  check(lambda t: t.det(), rnd((3, 5, 5), "float64", seed=23), tfn=torch.linalg.det, rtol=1e-10, atol=1e-10)
  assert_same(Tensor(rnd((2, 3, 3), "float16", seed=24)).det(), torch.tensor(rnd((2, 3, 3), "float16", seed=24)).float().det().half(), rtol=2e-3, atol=2e-3)
  with pytest.raises(RuntimeError, match=r"square matrices \(\.\.\., n, n\), got shape \(2, 3\)"): Tensor(rnd((2, 3))).det()
  with pytest.raises(RuntimeError, match="det: expected a float tensor, got long"): Tensor(np.eye(2, dtype=np.int64)).det()

def test_repeat_interleave():
  x = rnd((2, 3), seed=14)
  check(lambda t: t.repeat_interleave(2), x, tfn=lambda t: t.repeat_interleave(2))
  check(lambda t: t.repeat_interleave(3, dim=1), x, tfn=lambda t: t.repeat_interleave(3, dim=1))
  r = np.array([2, 0, 1], np.int64)
  check(lambda t: t.repeat_interleave(_like(t, r), dim=1), x)
  check(lambda t: t.T.repeat_interleave(_like(t, r), dim=0, output_size=3), x)
  check(lambda t: t.repeat_interleave(0, dim=0), x, tfn=lambda t: t.repeat_interleave(0, dim=0))
  check(lambda t: t.repeat_interleave(2), np.array(1.5, np.float32), tfn=lambda t: t.repeat_interleave(2))
  assert_same(baregrad.repeat_interleave(Tensor([1, 2, 3]), Tensor([1, 2, 0])), torch.repeat_interleave(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 0])))
  with pytest.raises(RuntimeError, match=r"repeats must be a 1-D integer tensor of size 3"): Tensor(x).repeat_interleave(Tensor([1, 2]), dim=1)
  with pytest.raises(RuntimeError, match="repeats must be non-negative, got -1"): Tensor(x).repeat_interleave(-1)

def test_meshgrid():
  a, b, c = np.arange(3, dtype=np.float32), np.arange(2, dtype=np.float32) + 5, np.array([7.0], np.float32)
  for ind in ("ij", "xy"):
    for k in range(3):
      check(lambda x, y, z: baregrad.meshgrid(x, y, z, indexing=ind)[k], a, b, c, tfn=lambda x, y, z: torch.meshgrid(x, y, z, indexing=ind)[k])
  with pytest.raises(RuntimeError, match=r"0-d or 1-D tensors, got tensor 0 of shape \(2, 2\)"): baregrad.meshgrid(Tensor.zeros(2, 2))
  with pytest.raises(RuntimeError, match="indexing must be 'ij' or 'xy', got 'ji'"): baregrad.meshgrid(Tensor(a), indexing="ji")

def test_unfold_fold():
  x = rnd((2, 3, 6, 5), seed=15)
  check(lambda t: t.unfold(2, 3, 2), x, tfn=lambda t: t.unfold(2, 3, 2))
  check(lambda t: t.T.unfold(0, 2, 1), rnd((3, 4)), tfn=lambda t: t.T.unfold(0, 2, 1))
  check(lambda t: t.unfold(0, 1, 1), np.array(2.0, np.float32), tfn=lambda t: t.unfold(0, 1, 1))
  check(lambda t: F.unfold(t, (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)), x,
        tfn=lambda t: TF.unfold(t, (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)))
  check(lambda t: F.unfold(t, 2), x[0], tfn=lambda t: TF.unfold(t, 2))
  cols = rnd((2, 3 * 2 * 3, 20), seed=16)
  check(lambda t: F.fold(t, (6, 5), (2, 3), padding=1, stride=(2, 1)), cols, tfn=lambda t: TF.fold(t, (6, 5), (2, 3), padding=1, stride=(2, 1)))
  with pytest.raises(RuntimeError, match="maximum size for tensor at dimension 2 is 6 but size is 7"): Tensor(x).unfold(2, 7, 1)
  with pytest.raises(RuntimeError, match="step is 0 but must be > 0"): Tensor(x).unfold(2, 2, 0)

@pytest.mark.parametrize("k,s,p", [(2, None, 0), (3, 2, 1), (3, 1, 1)])
def test_max_unpool(k, s, p):
  x = rnd((2, 2, 6, 6), seed=17)
  v, i = F.max_pool2d(Tensor(x), k, s, p, return_indices=True)
  tv, ti = TF.max_pool2d(torch.tensor(x), k, s, p, return_indices=True)
  check(lambda a: F.max_unpool2d(a, i, k, s, p, output_size=(6, 6)), tv.numpy(), tfn=lambda a: TF.max_unpool2d(a, ti, k, s, p, output_size=(6, 6)))
  if s is None: check(lambda a: F.max_unpool2d(a, i, k, s, p), tv.numpy(), tfn=lambda a: TF.max_unpool2d(a, ti, k, s, p))
  x1 = rnd((1, 2, 8), seed=18)
  v1, i1 = F.max_pool1d(Tensor(x1), k, s, p, return_indices=True)
  tv1, ti1 = TF.max_pool1d(torch.tensor(x1), k, s, p, return_indices=True)
  check(lambda a: F.max_unpool1d(a, i1, k, s, p, output_size=(8,)), tv1.numpy(), tfn=lambda a: TF.max_unpool1d(a, ti1, k, s, p, output_size=(8,)))

@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce, include_self):
  x, src = rnd((3, 5), seed=19), rnd((3, 4), seed=20)
  idx = np.array([[0, 1, 0, 4], [2, 2, 2, 2], [1, 3, 0, 1]])
  check(lambda a, b: a.scatter_reduce(1, Tensor(idx), b, reduce, include_self=include_self), x, src,
        tfn=lambda a, b: a.scatter_reduce(1, torch.tensor(idx), b, reduce, include_self=include_self), rtol=1e-5, atol=1e-6)
  xi, si = np.arange(15).reshape(3, 5), np.arange(12).reshape(3, 4) * 3 - 10
  check(lambda a, b: a.scatter_reduce(1, Tensor(idx), b, reduce, include_self=include_self), xi, si,
        tfn=lambda a, b: a.scatter_reduce(1, torch.tensor(idx), b, reduce, include_self=include_self))

def test_scatter_multiply_and_errors():
  x, src = rnd((3, 5), seed=21), rnd((2, 5), seed=22)
  idx = np.array([[0, 1, 2, 0, 0], [2, 0, 0, 1, 2]])
  # PyTorch has no gradient for scatter with reduce: forward only
  check(lambda a, b: a.scatter(0, Tensor(idx), b, reduce="multiply"), x, src,
        tfn=lambda a, b: a.scatter(0, torch.tensor(idx), b, reduce="multiply"), grad=False)
  check(lambda a: a.scatter(0, Tensor(idx), 2.0, reduce="multiply"), x, tfn=lambda a: a.scatter(0, torch.tensor(idx), 2.0, reduce="multiply"), grad=False)
  with pytest.raises(RuntimeError, match="reduce must be one of .* got 'max'"): Tensor(x).scatter_reduce(0, Tensor(idx), Tensor(src), "max")
  with pytest.raises(RuntimeError, match="reduce must be 'add' or 'multiply', got 'mul'"): Tensor(x).scatter(0, Tensor(idx), Tensor(src), reduce="mul")

def test_conv_transpose3d():
  x, w, b = rnd((1, 2, 3, 3, 2), seed=23), rnd((2, 2, 2, 2, 2), seed=24), rnd((2,), seed=25)
  check(lambda a, c, d: F.conv_transpose3d(a, c, d, stride=(2, 1, 1), padding=(0, 1, 0), output_padding=(1, 0, 0)), x, w, b,
        tfn=lambda a, c, d: TF.conv_transpose3d(a, c, d, stride=(2, 1, 1), padding=(0, 1, 0), output_padding=(1, 0, 0)), rtol=1e-5, atol=1e-5)
  check(lambda a, c: F.conv_transpose3d(a, c, groups=2, dilation=2), x, rnd((2, 1, 2, 2, 2), seed=26),
        tfn=lambda a, c: TF.conv_transpose3d(a, c, groups=2, dilation=2), rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("mode,shape,size", [("trilinear", (1, 2, 3, 2, 4), (4, 3, 3)), ("bicubic", (1, 2, 4, 5), (7, 3)), ("bicubic", (2, 1, 3, 3), (3, 6))])
@pytest.mark.parametrize("align_corners", [False, True])
def test_interpolate_trilinear_bicubic(mode, shape, size, align_corners):
  x = rnd(shape, seed=27)
  check(lambda t: F.interpolate(t, size=size, mode=mode, align_corners=align_corners), x,
        tfn=lambda t: TF.interpolate(t, size=size, mode=mode, align_corners=align_corners), rtol=1e-5, atol=1e-5)
  check(lambda t: F.interpolate(t, scale_factor=1.5, mode=mode, align_corners=align_corners), x,
        tfn=lambda t: TF.interpolate(t, scale_factor=1.5, mode=mode, align_corners=align_corners), rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_pad_modes_through_tensor_pad(mode):
  x = rnd((2, 3, 4, 5), seed=28)
  check(lambda t: t.pad((1, 2, 2, 1), mode=mode), x, tfn=lambda t: TF.pad(t, (1, 2, 2, 1), mode=mode))
  check(lambda t: t[0].permute(0, 2, 1).pad((2, 0), mode=mode), x, tfn=lambda t: TF.pad(t[0].permute(0, 2, 1), (2, 0), mode=mode))
  check(lambda t: F.pad(t[None], (1, 1, 1, 1, 1, 1), mode=mode), x, tfn=lambda t: TF.pad(t[None], (1, 1, 1, 1, 1, 1), mode=mode))
  with pytest.raises(RuntimeError, match="doesn't take in value argument"): Tensor(x).pad((1, 1), mode=mode, value=1.0)

def test_pad_tinygrad_pairs():
  x = rnd((2, 3), seed=29)
  check(lambda t: t.pad(((1, 0), None)) if isinstance(t, Tensor) else TF.pad(t, (0, 0, 1, 0)), x)
  check(lambda t: t.pad((None, (2, 1)), value=3.0) if isinstance(t, Tensor) else TF.pad(t, (2, 1), value=3.0), x)
  with pytest.raises(RuntimeError, match=r"1 \(before, after\) pairs for a tensor of 2 dimensions"): Tensor(x).pad(((1, 1),))

# ---------------------------------------------------------------- bad input: PyTorch's exception types

BAD = [
  ("sort_dim", lambda m, x: m.sort(x, 5), IndexError, r"dimension 5 is out of range"),
  ("sort_dim_type", lambda m, x: m.sort(x, 1.5), TypeError, r"dim must be an int, got float 1.5"),
  ("topk_k", lambda m, x: m.topk(x, 9), RuntimeError, r"k=9 is out of range for dimension 1 of size 5"),
  ("topk_neg", lambda m, x: m.topk(x, -1), RuntimeError, r"k=-1 is out of range"),
  ("kthvalue_k", lambda m, x: m.kthvalue(x, 0), RuntimeError, r"k=0 is out of range"),
  ("cummax_dim", lambda m, x: m.cummax(x, 2), IndexError, r"dimension 2 is out of range"),
  ("logcumsumexp_dim", lambda m, x: m.logcumsumexp(x, -3), IndexError, r"dimension -3 is out of range"),
  ("masked_select_mask", lambda m, x: m.masked_select(x, x), RuntimeError, r"mask must be a bool tensor"),
  ("unfold_size", lambda m, x: x.unfold(1, 6, 1), RuntimeError, r"size is 6"),
  ("unfold_step", lambda m, x: x.unfold(1, 2, -1), RuntimeError, r"step is -1 but must be > 0"),
  ("meshgrid_2d", lambda m, x: m.meshgrid(x), RuntimeError, r"0-d or 1-D tensors"),
  ("repeat_interleave_neg", lambda m, x: m.repeat_interleave(x, -2), RuntimeError, r"repeats must be non-negative, got -2"),
  ("isclose_atol", lambda m, x: m.isclose(x, x, atol=-1.0), RuntimeError, r"atol must be greater than or equal to zero, got atol=-1.0"),
  ("scatter_reduce_mode", lambda m, x: x.scatter_reduce(0, (x > 0).long(), x, "median"), RuntimeError, r"got 'median'"),
  ("index_bool_shape", lambda m, x: x[(x > 0)[0]], IndexError, r"shape of the mask \(5,\)"),
  ("index_float_tensor", lambda m, x: x[x[0, :2]], IndexError, r"must be long, int or bool"),
]

class _B:
  """baregrad's entry points under torch's names, for one lambda per case."""
  sort, topk, kthvalue, cummax, logcumsumexp = staticmethod(baregrad.sort), staticmethod(baregrad.topk), staticmethod(baregrad.kthvalue), \
      staticmethod(baregrad.cummax), staticmethod(baregrad.logcumsumexp)
  masked_select, meshgrid, repeat_interleave, isclose = staticmethod(baregrad.masked_select), staticmethod(baregrad.meshgrid), \
      staticmethod(baregrad.repeat_interleave), staticmethod(baregrad.isclose)

@pytest.mark.parametrize("name,fn,exc,msg", BAD, ids=[b[0] for b in BAD])
def test_bad_input(name, fn, exc, msg):
  x = rnd((3, 5), seed=30)
  with pytest.raises(Exception) as te: fn(torch, torch.tensor(x))
  with pytest.raises(exc, match=msg) as be: fn(_B, Tensor(x))
  # the same exception class PyTorch raises (or one of its bases)
  assert isinstance(be.value, type(te.value)) or isinstance(te.value, type(be.value)), \
    f"{name}: torch raises {type(te.value).__name__}, we raise {type(be.value).__name__}"

def test_mask_setitem_and_scatter_reduce_bounds():
  a, t = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3) - 2), torch.arange(6, dtype=torch.float32).reshape(2, 3) - 2
  a[a > 0] = 0.0
  t[t > 0] = 0.0
  assert_same(a, t)
  a[Tensor([True, False])] = Tensor([7.0, 8.0, 9.0])
  t[torch.tensor([True, False])] = torch.tensor([7.0, 8.0, 9.0])
  assert_same(a, t)
  with pytest.raises(IndexError, match="scatter_reduce: index 5 is out of bounds for dimension 0 with size 2"):
    Tensor([1.0, 2.0]).scatter_reduce(0, Tensor([0, 5]), Tensor([1.0, 1.0]), "sum").numpy()
