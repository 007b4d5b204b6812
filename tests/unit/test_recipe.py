"""Graph recipes (tensor/recipe.py): a recorded function's replay builds the nodes the function builds."""
import numpy as np
import pytest
from baregrad import Tensor, no_grad
import baregrad.tensor.functional as F
from baregrad.tensor import recipe
from baregrad.engine import checks

def _direct(monkeypatch):
  """recorded() that always runs the function (the graph a call builds without recipes)."""
  monkeypatch.setattr(recipe, "recorded", lambda name, fn, tensors, params: fn(*tensors))

def _inputs(kind: str, shape: tuple, seed: int) -> Tensor:
  a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
  if kind == "buffer": return Tensor(a).realize()
  if kind == "permuted": return Tensor(np.ascontiguousarray(np.swapaxes(a, -1, -2))).realize().transpose(-1, -2)
  return Tensor(a) * 2 + 1   # a graph

@pytest.mark.parametrize("kind", ["buffer", "permuted", "graph"])
@pytest.mark.parametrize("stride,padding,groups", [(1, 0, 1), (2, 1, 1), (1, "same", 2)])
def test_conv_replay_builds_the_functions_nodes(kind, stride, padding, groups, monkeypatch):
  x, w, b = _inputs(kind, (2, 4, 9, 9), 1), _inputs("buffer", (6, 4 // groups, 3, 3), 2), _inputs("buffer", (6,), 3)
  outs = [F.conv2d(x, w, b, stride=stride, padding=padding, groups=groups) for _ in range(2)]  # (record, then replay)
  assert any(k[0] == "convnd" and k[1][0][0] == (2, 4, 9, 9) and v is not None for k, v in recipe._recipes.items())
  _direct(monkeypatch)
  ref = F.conv2d(x, w, b, stride=stride, padding=padding, groups=groups)
  assert outs[0].uop is ref.uop and outs[1].uop is ref.uop

def test_conv_replay_gradients_and_flags(monkeypatch):
  xs = [Tensor(np.random.default_rng(i).standard_normal((2, 3, 8, 8)).astype(np.float32), requires_grad=True) for i in range(3)]
  w = Tensor(np.random.default_rng(9).standard_normal((5, 3, 3, 3)).astype(np.float32), requires_grad=True)
  grads = []
  for x in xs:
    out = F.conv2d(x, w, padding=1)
    assert out.requires_grad
    out.square().sum().backward()
    grads.append((x.grad.numpy(), w.grad.numpy()))
    w.grad = None
  with no_grad(): assert not F.conv2d(xs[0], w).requires_grad
  _direct(monkeypatch)
  for x, (gx, gw) in zip(xs[1:], grads[1:]):
    x.grad = None
    F.conv2d(x, w, padding=1).square().sum().backward()
    np.testing.assert_array_equal(gx, x.grad.numpy())
    np.testing.assert_array_equal(gw, w.grad.numpy())
    w.grad = None

def test_permute_of_a_permuted_input_folds_as_the_function_would():
  y = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)).realize()
  fn = lambda a: a.permute(1, 0) * 2
  recipe.recorded("test-permute", fn, (y.T,), ())
  out = recipe.recorded("test-permute", fn, (y.T,), ())
  assert out.uop is fn(y.T).uop and out.uop.src[0].op is not recipe.Ops.PERMUTE   # the two permutes cancel
  np.testing.assert_array_equal(out.numpy(), np.arange(6, dtype=np.float32).reshape(2, 3) * 2)

def test_recipe_keyed_by_arguments_and_shapes():
  x, w = Tensor.ones(1, 1, 6, 6), Tensor.ones(1, 1, 3, 3)
  assert F.conv2d(x, w).shape == (1, 1, 4, 4) and F.conv2d(x, w, stride=2).shape == (1, 1, 2, 2)
  assert F.conv2d(x, w, padding=1).shape == (1, 1, 6, 6) and F.conv2d(Tensor.ones(1, 1, 8, 8), w).shape == (1, 1, 6, 6)
  np.testing.assert_array_equal(F.conv2d(x, w, stride=2).numpy(), np.full((1, 1, 2, 2), 9, np.float32))
  with pytest.raises(RuntimeError, match="channels"): F.conv2d(Tensor.ones(1, 2, 6, 6), w)   # errors still raised

def test_graph_reading_another_buffer_is_not_recorded():
  side = Tensor([1.0, 2.0]).realize()
  fn = lambda a: a + side
  key_name = "test-side-buffer"
  assert recipe.recorded(key_name, fn, (Tensor([1.0, 1.0]),), ()).tolist() == [2.0, 3.0]
  side = Tensor([10.0, 20.0]).realize()   # fn reads the new one: nothing recorded the old buffer
  assert recipe.recorded(key_name, fn, (Tensor([1.0, 1.0]),), ()).tolist() == [11.0, 21.0]
  assert [v for k, v in recipe._recipes.items() if k[0] == key_name] == [None]

def test_cross_entropy_replay_keeps_its_bounds_check(monkeypatch):
  logits = Tensor(np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32))
  ok = Tensor(np.array([0, 1, 4, 2]))
  a, b = F.cross_entropy(logits, ok), F.cross_entropy(logits, ok)   # record, replay
  assert a.uop is b.uop
  with pytest.raises(checks.IndexOutOfBounds, match="out of bounds"):
    F.cross_entropy(logits, Tensor(np.array([0, 7, 1, 2]))).item()   # replayed: the check is registered again
  _direct(monkeypatch)
  assert F.cross_entropy(logits, ok).uop is a.uop

def _mlp_loss(seed: int, w1: Tensor, w2: Tensor) -> Tensor:
  rng = np.random.default_rng(seed)
  x, y = Tensor(rng.standard_normal((8, 6)).astype(np.float32)), Tensor(rng.integers(0, 4, 8))
  return F.cross_entropy((x @ w1.T).relu().softmax(-1) @ w2.T * 2 - 1, y)

def test_backward_replays_the_gradient_graph_of_a_loss_structure(monkeypatch):
  """loss.backward() rebuilds the gradient graph recorded for the loss graph's structure (tensor/autograd.py
  _recipe_gradient): the nodes compute_gradient derives, for every step's new input buffers."""
  from baregrad.tensor import autograd
  w1, w2 = Tensor(np.ones((5, 6), np.float32) * 0.1, requires_grad=True), Tensor(np.ones((4, 5), np.float32) * 0.2, requires_grad=True)
  calls = []
  orig = autograd.compute_gradient
  monkeypatch.setattr(autograd, "compute_gradient", lambda *a: calls.append(1) or orig(*a))
  got = []
  for seed in range(3):
    w1.grad = w2.grad = None
    loss = _mlp_loss(seed, w1, w2)
    loss.backward()
    got.append((w1.grad.uop, w2.grad.uop, w1.grad.numpy(), w2.grad.numpy()))
    want = orig(loss.uop, Tensor.full((), 1.0).uop, {w1.uop, w2.uop})
    assert got[-1][0] is want[w1.uop] and got[-1][1] is want[w2.uop]
  assert len(calls) == 1   # derived once (the first step); the next two rebuilt
  assert not np.array_equal(got[0][2], got[1][2])   # (different data, different gradients)

def test_backward_with_a_gradient_or_another_structure_derives_it():
  w = Tensor(np.ones((3,), np.float32), requires_grad=True)
  (w * Tensor([1.0, 2.0, 3.0])).sum().backward()
  np.testing.assert_array_equal(w.grad.numpy(), [1, 2, 3])
  w.grad = None
  (w * Tensor([1.0, 2.0, 3.0])).backward(Tensor([1.0, 0.0, 2.0]))   # an explicit gradient: not from a recipe
  np.testing.assert_array_equal(w.grad.numpy(), [1, 0, 6])
  w.grad = None
  ((w * Tensor([1.0, 2.0, 3.0])).sum() * 3).backward()   # another structure: its own recipe
  np.testing.assert_array_equal(w.grad.numpy(), [3, 6, 9])

@pytest.mark.parametrize("call", [lambda t: t.relu(), lambda t: t.silu(), lambda t: t.sigmoid(), lambda t: t.gelu(approximate="tanh"),
                                  lambda t: t.softmax(0), lambda t: t.softmax(dim=1), lambda t: t.log_softmax(-1), lambda t: t.logsumexp(1, keepdim=True),
                                  lambda t: t.softplus(beta=2.0), lambda t: t.leaky_relu(0.2), lambda t: t.tanh()])
@pytest.mark.parametrize("rg", [False, True])
def test_method_recipes_build_the_methods_nodes(call, rg, monkeypatch):
  """Activations and softmaxes (method_recipe) rebuild the graph their code builds, gradient terms (with_grad) included."""
  x = Tensor(np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32) * 3, requires_grad=rg)
  outs = [call(x) for _ in range(2)]
  assert outs[0].uop is outs[1].uop and outs[1].requires_grad == (rg or None)
  if rg:
    outs[1].square().sum().backward()
    g, x.grad = x.grad.numpy(), None
  monkeypatch.setattr(recipe, "recorded", lambda name, fn, tensors, params: fn(*tensors))
  direct = call(x)
  assert direct.uop is outs[0].uop
  if rg:
    direct.square().sum().backward()
    np.testing.assert_array_equal(g, x.grad.numpy())

def test_method_recipe_keyed_by_arguments():
  x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
  a, b = x.softmax(0).numpy(), x.softmax(1).numpy()
  assert not np.allclose(a, b)
  np.testing.assert_allclose(a.sum(0), 1, rtol=1e-6)
  np.testing.assert_allclose(b.sum(1), 1, rtol=1e-6)
  np.testing.assert_allclose(x.leaky_relu(0.5).numpy(), x.leaky_relu(0.5).numpy())
  with pytest.raises(RuntimeError, match="approximate"): x.gelu(approximate="bad")
  with pytest.raises(IndexError): x.softmax(3)

def test_small_constant_subgraphs_are_kept_large_ones_rebuilt():
  """A node that reads no input is kept by the recipe (not rebuilt per call) when it is small: a kept node lives as
  long as the recipe, and a realize of an equal graph maps its buffer to it."""
  fn = lambda a: (a * Tensor.arange(4).float()).reshape(4, 1) + Tensor.arange(4 * 512).float().reshape(4, 512)
  leaf = Tensor(recipe.placeholder(Tensor.ones(4)))
  r = recipe.Recipe.record([fn(leaf).uop], [leaf.uop])
  kept = [e[1] for e in r.nodes if e[0] is None]
  assert kept and all(int(np.prod(recipe.shape_of(u))) <= recipe.Recipe.KEEP_ELEMENTS for u in kept)
  built = [e for e in r.nodes if e[0] is not None]
  assert any(int(np.prod(e[5])) > recipe.Recipe.KEEP_ELEMENTS for e in built)   # the 4x512 range: rebuilt each time
  y = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
  assert r.build([y.uop])[0] is fn(y).uop

def test_param_keys_tell_signed_zeros_and_nan_apart():
  x = Tensor([-2.0, 3.0])
  assert np.signbit(x.leaky_relu(0.0).numpy()[0]) and not np.signbit(x.leaky_relu(-0.0).numpy()[0])   # -2*0 = -0, -2*-0 = +0
  assert recipe.param_key(float("nan")) == recipe.param_key(float("nan")) and recipe.param_key(2) != recipe.param_key(2.0)

_TARGET = Tensor(np.zeros((2, 20), np.int64)).realize()
_FUNCS = [lambda x, w, t: F.max_pool2d(x, 2), lambda x, w, t: F.max_pool2d(x, (3, 2), stride=1, padding=1), lambda x, w, t: F.avg_pool2d(x, 3, 2),
          lambda x, w, t: F.layer_norm(x, (5,), weight=w, bias=w * 2), lambda x, w, t: F.rms_norm(x, [5], w), lambda x, w, t: F.mse_loss(x, t),
          lambda x, w, t: F.binary_cross_entropy_with_logits(x, t.sigmoid(), pos_weight=None),
          lambda x, w, t: F.nll_loss(x.reshape(2, 3, 20).log_softmax(1), _TARGET)]

@pytest.mark.parametrize("f", _FUNCS)
def test_function_recipes_build_the_functions_nodes(f, monkeypatch):
  """Pooling, norms and losses (function_recipe) rebuild the graph their code builds, tensors given by position or name."""
  rng = np.random.default_rng(3)
  x = Tensor(rng.standard_normal((2, 3, 4, 5)).astype(np.float32), requires_grad=True)
  w, t = Tensor(rng.standard_normal((5,)).astype(np.float32)), Tensor(rng.standard_normal((2, 3, 4, 5)).astype(np.float32))
  outs = [f(x, w, t) for _ in range(2)]
  assert outs[0].uop is outs[1].uop and outs[1].requires_grad
  monkeypatch.setattr(recipe, "recorded", lambda name, fn, tensors, params: fn(*tensors))
  assert f(x, w, t).uop is outs[0].uop

def test_function_recipe_keys_and_fallbacks():
  x = Tensor(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))
  assert F.max_pool2d(x, 2).tolist() == [[[[5.0, 7.0], [13.0, 15.0]]]]
  assert F.max_pool2d(x, 2, stride=1).shape == (1, 1, 3, 3)                       # another argument: another recipe
  vals, idx = F.max_pool2d(x, 2, return_indices=True)                             # a tuple result: run as it is
  assert idx.tolist() == [[[[5, 7], [13, 15]]]]
  with pytest.raises(RuntimeError, match="normalized_shape"): F.layer_norm(x, (3,))   # errors still raised
  with pytest.raises(TypeError): recipe.param_key(x)                             # a tensor is never a key

def test_random_draws_are_built_from_recipes_and_keep_their_streams():
  # a draw's ~30 tensor ops (the counter, Threefry, the finishing) and the state's step come from recipes after the
  # first draw of a kind; the numbers are the stream's next ones either way (a replayed graph reads the current state)
  from baregrad.tensor import recipe
  Tensor.manual_seed(3)
  first = [Tensor.rand(7).numpy(), Tensor.randn(2, 3).numpy(), Tensor.uniform(5, low=-2.0, high=3.0).numpy()]
  names = {k[0] for k in recipe._recipes}
  assert {"random", "rng_step"} <= names
  Tensor.manual_seed(3)
  again = [Tensor.rand(7).numpy(), Tensor.randn(2, 3).numpy(), Tensor.uniform(5, low=-2.0, high=3.0).numpy()]
  for a, b in zip(first, again): np.testing.assert_array_equal(a, b)
  assert not np.array_equal(Tensor.rand(7).numpy(), first[0])   # the state moved on
  u = Tensor.uniform(5, low=-2.0, high=3.0).numpy()
  assert u.min() >= -2.0 and u.max() < 3.0
