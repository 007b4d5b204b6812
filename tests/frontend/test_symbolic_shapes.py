"""Symbolic sizes (ir/sint.py): a bound variable stands in shapes, slices and views; its kernels compile once for the
whole range (the value is a kernel argument) and a jitted function taking it is captured once."""
import numpy as np
import pytest
from baregrad import Tensor, jit, Variable, knobs
from baregrad.engine import runner
from baregrad.ir.view import ViewError

def _attn(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
  s = q @ k.transpose(0, 2, 1) / 2
  p = np.exp(s - s.max(-1, keepdims=True))
  return (p / p.sum(-1, keepdims=True)) @ v

def test_bind_checks_range_and_type():
  v = Variable("n", 1, 10)
  assert v.bind(10).unbind() == (v, 10)
  with pytest.raises(ValueError, match=r"n=11 is outside its range \[1, 10\]"): v.bind(11)
  with pytest.raises(TypeError, match="takes an int"): v.bind(2.0)
  with pytest.raises(ValueError, match="identifier"): Variable("not a name", 0, 1)
  with pytest.raises(ValueError, match="0 <= lo <= hi"): Variable("n", 5, 4)

def test_shape_prints_as_the_expression():
  x = Tensor.zeros(8, 3).contiguous().realize()
  y = x[:Variable("i", 0, 7).bind(2) + 1]
  assert repr(y.shape) == "((i=2+1), 3)"

def test_reductions_matmul_softmax_over_a_prefix_compile_once():
  rng = np.random.default_rng(0)
  q, cache = rng.random((2, 1, 4), dtype=np.float32), rng.random((2, 16, 4), dtype=np.float32)
  tq, tc = Tensor(q).realize(), Tensor(cache).realize()
  var = Variable("sp", 0, 15)
  kernels = []
  for n in range(16):
    b = var.bind(n)
    k = tc[:, :b + 1]
    np.testing.assert_allclose(k.sum(1).numpy(), cache[:, :n + 1].sum(1), rtol=1e-5)
    np.testing.assert_allclose((k * 2).amax(1).numpy(), 2 * cache[:, :n + 1].max(1), rtol=1e-6)
    out = ((tq @ k.transpose(1, 2)) / 2).softmax(-1) @ k
    np.testing.assert_allclose(out.numpy(), _attn(q, cache[:, :n + 1], cache[:, :n + 1]), rtol=1e-5, atol=1e-6)
    kernels.append(len(runner._cache))
  assert kernels[1:] == kernels[:-1], f"kernels compiled per value: {kernels}"

def test_region_write_at_a_symbolic_offset():
  a = np.zeros((2, 8, 3), np.float32)
  t = Tensor(a.copy()).realize()
  old = t[:, :4] * 1        # a graph over the value before the writes keeps that value
  t[:, 2:4] = Tensor(np.ones((2, 2, 3), np.float32)); a[:, 2:4] = 1
  t[1, 5] = 7.0; a[1, 5] = 7
  t[..., 0] = 3.0; a[..., 0] = 3
  np.testing.assert_array_equal(t.numpy(), a)
  np.testing.assert_array_equal(old.numpy(), np.zeros((2, 4, 3), np.float32))
  var, kernels = Variable("p", 0, 7), []
  for n in range(8):
    b = var.bind(n)
    t[:, b:b + 1] = Tensor(np.full((2, 1, 3), n, np.float32)); a[:, n:n + 1] = n
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_allclose(t[:, :b + 1].sum(1).numpy(), a[:, :n + 1].sum(1))
    t[:, b] += 1.0; a[:, n] += 1          # reading the region it writes, elementwise
    np.testing.assert_array_equal(t.numpy(), a)
    kernels.append(len(runner._cache))
  assert kernels[1:] == kernels[:-1], f"kernels compiled per position: {kernels}"

def test_jit_captures_a_kv_cache_step_once_over_100_positions():
  S, H, D = 128, 2, 4
  ck, cv = Tensor.zeros(H, S, D).contiguous().realize(), Tensor.zeros(H, S, D).contiguous().realize()
  ran = [0]
  @jit
  def step(q, k, v, pos):
    ran[0] += 1
    ck[:, pos:pos + 1] = k
    cv[:, pos:pos + 1] = v
    return ((q @ ck[:, :pos + 1].transpose(1, 2)) / 2).softmax(-1) @ cv[:, :pos + 1]
  var = Variable("pos", 0, S - 1)
  K, V = np.zeros((H, S, D), np.float32), np.zeros((H, S, D), np.float32)
  rng = np.random.default_rng(1)
  kernels = []
  for n in range(100):
    q, k, v = (rng.random((H, 1, D), dtype=np.float32) for _ in range(3))
    out = step(Tensor(q), Tensor(k), Tensor(v), var.bind(n)).numpy()
    K[:, n:n + 1], V[:, n:n + 1] = k, v
    np.testing.assert_allclose(out, _attn(q, K[:, :n + 1], V[:, :n + 1]), rtol=1e-5, atol=1e-6)
    kernels.append(len(runner._cache))
  if knobs.get("JIT"): assert ran[0] == 2 and len(step.captured) == 1, (ran, len(step.captured))   # run eagerly once, captured once, then replays
  assert kernels[2:] == kernels[1:-1], f"kernels compiled after the capture: {kernels}"

def test_unsupported_symbolic_views_name_the_problem():
  x = Tensor.zeros(8, 4).contiguous().realize()
  y = x[:Variable("m", 1, 8).bind(3)]
  with pytest.raises((ViewError, RuntimeError), match="symbolic sizes"): y.pad(((1, 1), None)).realize()
  with pytest.raises(RuntimeError, match="symbolic size stays|keeps each symbolic size"): y.reshape(-1).realize()
  with pytest.raises(IndexError, match="not inside dimension 0 of size 8"): x[Variable("w", 0, 9).bind(1)]
  with pytest.raises(IndexError, match="step 1"): x[:Variable("s", 1, 8).bind(2):2]

def test_a_symbolic_value_reads_back_at_its_values():
  a = np.arange(2 * 8 * 3, dtype=np.float32).reshape(2, 8, 3)
  t = Tensor(a).realize()
  var = Variable("i", 0, 7)
  for n in (0, 3, 7):
    y = t[:, :var.bind(n) + 1] * 2
    np.testing.assert_array_equal(y.numpy(), a[:, :n + 1] * 2)
    np.testing.assert_array_equal(y.numpy(), a[:, :n + 1] * 2)   # (realized now: read from its buffer)
    np.testing.assert_array_equal(t[:, var.bind(n)].numpy(), a[:, n])
