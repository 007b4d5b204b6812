"""Numerics at the edges, pinned against PyTorch (issue 9, part 2): gradients at kinks and far out, pow's special
cases, var/std over too few elements, half/bfloat16 accumulation, floor semantics of integer division, accuracy
near 0. Small shapes: this file also runs on the mock NV GPU."""
import numpy as np
import pytest
from baregrad import Tensor, dtypes
import baregrad.tensor.functional as F
from tests.torch_helpers import torch, check

TF = torch.nn.functional

def _same_bits(got: np.ndarray, want: np.ndarray, what: str) -> None:
  """Equal values, NaN where NaN, and the same sign on zeros."""
  got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
  ok = (got == want) | (np.isnan(got) & np.isnan(want))
  ok &= (np.signbit(got) == np.signbit(want)) | np.isnan(want)
  assert ok.all(), f"{what}: {[(i, got[i], want[i]) for i in np.nonzero(~ok)[0][:8]]}"

def _close(got: np.ndarray, want: np.ndarray, what: str, rtol: float = 1e-6) -> None:
  """Equal within rtol, NaN where NaN, inf where inf (zeros of either sign equal)."""
  got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
  with np.errstate(all="ignore"):
    ok = (got == want) | (np.isnan(got) & np.isnan(want)) | (np.isfinite(want) & (np.abs(got - want) <= rtol * np.abs(want)))
  assert ok.all(), f"{what}: {[(i, got[i], want[i]) for i in np.nonzero(~ok)[0][:8]]}"

def _grads(fn, *arrays, tfn=None):
  """(baregrad gradients, torch gradients) of sum(fn(inputs)) with respect to every input."""
  bt = [Tensor(a, requires_grad=True) for a in arrays]
  tt = [torch.tensor(a, requires_grad=True) for a in arrays]
  fn(*bt).sum().backward()
  (tfn or fn)(*tt).sum().backward()
  return [b.grad.numpy() for b in bt], [t.grad.numpy() for t in tt]

def test_relu_abs_gradient_zero_at_zero():
  x = np.array([-1.0, -0.0, 0.0, 2.0, np.nan], np.float32)
  for name in ("relu", "abs"):
    g, tg = _grads(lambda t: getattr(t, name)(), x)
    _close(g[0], tg[0], f"{name} grad")
    _same_bits(getattr(Tensor(x), name)().numpy(), getattr(torch.tensor(x), name)().numpy(), name)   # abs(-0.0) is +0.0, NaN stays
  g, tg = _grads(lambda t: t.clamp(min=0), x[:4])
  _close(g[0], tg[0], "clamp grad")

FAR = np.array([-400.0, -100.0, -88.0, -20.0, -1.0, -1e-3, 0.0, 1e-3, 1.0, 20.0, 88.0, 100.0, 400.0], np.float32)
ACTS = {
  "sigmoid": (lambda t: t.sigmoid(), torch.sigmoid), "tanh": (lambda t: t.tanh(), torch.tanh),
  "gelu": (lambda t: t.gelu(), TF.gelu), "gelu_tanh": (lambda t: t.gelu(approximate="tanh"), lambda t: TF.gelu(t, approximate="tanh")),
  "softplus": (lambda t: t.softplus(), TF.softplus),
  "softplus_b": (lambda t: t.softplus(beta=3.0, threshold=5.0), lambda t: TF.softplus(t, beta=3.0, threshold=5.0)),
  "logsigmoid": (lambda t: t.logsigmoid(), TF.logsigmoid), "silu": (lambda t: t.silu(), TF.silu), "erf": (lambda t: t.erf(), torch.erf),
  "mish": (lambda t: t.mish(), TF.mish), "elu": (lambda t: t.elu(0.7), lambda t: TF.elu(t, 0.7)), "selu": (lambda t: t.selu(), TF.selu),
  "celu": (lambda t: t.celu(1.5), lambda t: TF.celu(t, 1.5)),
}

@pytest.mark.parametrize("name", list(ACTS))
def test_activation_gradients_finite_far_out(name):
  bfn, tfn = ACTS[name]
  ob = bfn(Tensor(FAR)).numpy()
  np.testing.assert_allclose(ob, tfn(torch.tensor(FAR)).numpy(), rtol=2e-6, atol=2e-7, err_msg=name)
  g, tg = _grads(bfn, FAR, tfn=tfn)
  assert np.isfinite(g[0]).all(), f"{name}: non-finite gradient {g[0]}"
  np.testing.assert_allclose(g[0], tg[0], rtol=1e-5, atol=2e-7, err_msg=f"{name} grad")

INF, NAN = np.inf, np.nan
BASES = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, INF, -INF, NAN, 0.5, -0.5]
EXPS = [0.0, -0.0, 1.0, -1.0, 2.0, 3.0, -3.0, 0.5, -0.5, INF, -INF, NAN, 2.5]

def test_pow_special_values_and_gradients():
  b = np.repeat(np.array(BASES, np.float32), len(EXPS))
  e = np.tile(np.array(EXPS, np.float32), len(BASES))
  _same_bits((Tensor(b) ** Tensor(e)).numpy(), (torch.tensor(b) ** torch.tensor(e)).numpy(), "pow")
  g, tg = _grads(lambda x, y: x ** y, b, e)
  fin = np.isfinite(b) & np.isfinite(e)
  for k, what in ((0, "d/dbase"), (1, "d/dexp")):
    _close(g[k][fin], tg[k][fin], f"pow {what} (finite inputs)")
    assert not (np.isnan(g[k]) & ~np.isnan(tg[k])).any(), f"pow {what}: NaN where PyTorch has none"
  # scalar exponents take their own paths
  x = np.array([0.0, -0.0, -2.0, 3.0, -INF, INF, NAN], np.float32)
  for y in (0, 0.0, 1, 2, 3, -1, -2, 0.5, -0.5, 2.5):
    _same_bits((Tensor(x) ** y).numpy(), (torch.tensor(x) ** y).numpy(), f"x ** {y!r}")
    _same_bits((y ** Tensor(x)).numpy(), (y ** torch.tensor(x)).numpy(), f"{y!r} ** x")
  g, tg = _grads(lambda t: t ** 2.5, np.array([0.0, 1.0, 4.0], np.float32))
  _close(g[0], tg[0], "grad of x ** 2.5")
  g, tg = _grads(lambda t: t ** 3, np.array([0.0, -1.0, 2.0], np.float32))
  _close(g[0], tg[0], "grad of x ** 3")

def test_pow_half_and_int():
  x = np.array([0.5, 2.0, -3.0, 0.0], np.float16)
  for y in (2.5, -1.5, 3.0):
    np.testing.assert_allclose((Tensor(x) ** y).numpy().astype(np.float32), (torch.tensor(x) ** y).numpy().astype(np.float32), rtol=1e-3, equal_nan=True)
  i = np.array([-3, -1, 0, 2, 5], np.int64)
  for y in (np.array([3, 0, 2, 5, 1], np.int64), np.array([2, 3, 0, 1, 2], np.int32)):
    np.testing.assert_array_equal((Tensor(i) ** Tensor(y)).numpy(), (torch.tensor(i) ** torch.tensor(y)).numpy())

@pytest.mark.parametrize("fn", ["var", "std"])
def test_var_std_too_few_elements(fn):
  cases = [(np.array([1.5], np.float32), {}), (np.array([[1.0, 2.0]], np.float32), {"dim": 0}), (np.array([1.0, 2.0], np.float32), {"correction": 2}),
           (np.array([1.0, 2.0], np.float32), {"correction": 3}), (np.array([1.0, 1.0], np.float32), {}), (np.zeros(0, np.float32), {}),
           (np.array([[3.0, 4.0, 8.0]], np.float32), {"dim": 1, "keepdim": True})]
  for x, kw in cases:
    with np.errstate(all="ignore"):
      _same_bits(getattr(Tensor(x), fn)(**kw).numpy(), getattr(torch.tensor(x), fn)(**kw).numpy(), f"{fn}({kw}) of {x.shape}")
      if x.size and kw.get("correction", 1) < 2:   # past n - 1 PyTorch's own gradient signs are not its formula's
        g, tg = _grads(lambda t: getattr(t, fn)(**kw), x)
        _close(g[0], tg[0], f"grad of {fn}({kw})", rtol=1e-5)

def _half_inputs(dt, seed):
  rng = np.random.default_rng(seed)
  # values spread over magnitudes, so a half-precision accumulator would lose the small ones
  a = (rng.standard_normal((4, 64)) * rng.choice([1.0, 64.0], (4, 64))).astype(np.float32)
  b = (rng.standard_normal((64, 3)) * rng.choice([1.0, 0.01], (64, 3))).astype(np.float32)
  t = torch.tensor(a).to(dt), torch.tensor(b).to(dt)
  return t, [x.float().numpy() for x in t]

@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_half_matmul_accumulates_in_float32(dt):
  (ta, tb), (a, b) = _half_inputs(getattr(torch, dt), 31)
  ba, bb = Tensor(a).cast(dt), Tensor(b).cast(dt)
  out = (ba @ bb)
  assert out.dtype == getattr(dtypes, dt)
  exact = (a.astype(np.float64) @ b.astype(np.float64))
  want = torch.tensor(exact, dtype=torch.float32).to(getattr(torch, dt)).float().numpy()   # the exact result rounded once
  np.testing.assert_array_equal(out.float().numpy(), want)
  np.testing.assert_allclose(out.float().numpy(), (ta @ tb).float().numpy(), rtol=1e-2)
  # gradients within PyTorch's own tolerance for the dtype
  check(lambda x, y: x.cast(dt) @ y.cast(dt), a, b, tfn=lambda x, y: x.to(getattr(torch, dt)) @ y.to(getattr(torch, dt)), rtol=1e-2, atol=1e-2,
        check_dtype=True)

@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_half_conv_accumulates_in_float32(dt):
  rng = np.random.default_rng(32)
  x = (rng.standard_normal((1, 8, 5, 5)) * rng.choice([1.0, 32.0], (1, 8, 5, 5))).astype(np.float32)
  w = rng.standard_normal((2, 8, 3, 3)).astype(np.float32)
  tdt = getattr(torch, dt)
  xr, wr = torch.tensor(x).to(tdt).float(), torch.tensor(w).to(tdt).float()
  exact = TF.conv2d(xr.double(), wr.double()).float().to(tdt).float().numpy()
  out = F.conv2d(Tensor(xr.numpy()).cast(dt), Tensor(wr.numpy()).cast(dt))
  assert out.dtype == getattr(dtypes, dt)
  np.testing.assert_array_equal(out.float().numpy(), exact)
  check(lambda a, b: F.conv2d(a.cast(dt), b.cast(dt)), xr.numpy(), wr.numpy(), tfn=lambda a, b: TF.conv2d(a.to(tdt), b.to(tdt)), rtol=1e-2, atol=5e-2)

@pytest.mark.parametrize("dt", ["int8", "int32", "int64"])
def test_int_floor_division_and_remainder(dt):
  a = np.array([7, -7, 7, -7, 0, 5, -5, 1, -1, 100, -100], dt)
  b = np.array([2, 2, -2, -2, 3, -3, 3, -7, 7, 9, -9], dt)
  for op in (lambda x, y: x // y, lambda x, y: x % y, lambda x, y: x.div(y, rounding_mode="floor"), lambda x, y: x.div(y, rounding_mode="trunc"),
             lambda x, y: x.remainder(y), lambda x, y: x.fmod(y)):
    check(op, a, b, grad=False)
  for s in (3, -3):
    check(lambda x: x // s, a, grad=False)
    check(lambda x: x % s, a, grad=False)
    check(lambda x: s // x, a[a != 0], grad=False)
    check(lambda x: s % x, a[a != 0], grad=False)

def test_float_floor_division_and_remainder_signs():
  a = np.array([7.5, -7.5, 7.5, -7.5, 0.0, -0.0, 1.0], np.float32)
  b = np.array([2.0, 2.0, -2.0, -2.0, 3.0, 3.0, -0.5], np.float32)
  for op in (lambda x, y: x // y, lambda x, y: x % y, lambda x, y: x.fmod(y)):
    ob, ot = check(op, a, b, grad=False)
    _same_bits(ob.numpy(), ot.numpy(), "float floor ops")
  check(lambda x, y: x % y, a, b, rtol=1e-6)
  check(lambda x, y: x.fmod(y), a, b, rtol=1e-6)

def test_accuracy_near_zero():
  x = np.array([1e-7, -1e-7, 3e-5, -3e-5, 1e-3, -2e-3, 0.05], np.float32)
  for name in ("tanh", "sinh", "expm1", "log1p", "asinh", "atanh", "asin", "atan"):
    got, want = getattr(Tensor(x), name)().numpy(), getattr(torch, name)(torch.tensor(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0, err_msg=name)

@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_remainder_fmod_infinite_divisor(dt):
  # PyTorch: fmod(x, +-inf) = x for finite x; remainder = fmod + y where fmod is nonzero with the other sign than y
  # (so x % inf is x for x >= 0, inf for x < 0; -0.0 stays -0.0); an infinite or NaN x gives NaN
  inf = np.inf
  x = np.array([3.0, -3.0, 0.0, -0.0, inf, -inf, np.nan, 5.5, -5.5, 1e30, -1e-30, 7.0], dt)
  for yv in (inf, -inf):
    y = np.full_like(x, yv)
    for name in ("remainder", "fmod"):
      got, want = getattr(Tensor(x), name)(Tensor(y)).numpy(), getattr(torch, name)(torch.tensor(x), torch.tensor(y)).numpy()
      _same_bits(got, want, f"{name}(x, {yv}) {dt}")
      got = getattr(Tensor(x), name)(float(yv)).numpy()  # a Python float divisor
      _same_bits(got, want, f"{name}(x, {yv} scalar) {dt}")
    _same_bits((Tensor(x) % yv).numpy(), torch.remainder(torch.tensor(x), yv).numpy(), f"% {yv}")
  # a finite x divided by an infinite y keeps its gradient 1 (and a finite one for y), as PyTorch's
  xs, ys = np.array([3.0, -3.0, 0.5], np.float32), np.array([inf, inf, -inf], np.float32)
  for name in ("remainder", "fmod"):
    bx, tx = Tensor(xs, requires_grad=True), torch.tensor(xs, requires_grad=True)
    getattr(bx, name)(Tensor(ys)).sum().backward(); getattr(tx, name)(torch.tensor(ys)).sum().backward()
    np.testing.assert_array_equal(bx.grad.numpy(), tx.grad.numpy(), err_msg=name)
