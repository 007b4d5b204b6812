"""Attention fusion (engine/attention_fusion.py, FUSE_ATTENTION): softmax(q k^T * scale + mask) v is one kernel with no
buffer of seq x seq scores, with the numbers of the unfused path (FUSE_ATTENTION=0: scores, softmax and product in
kernels of their own) and of PyTorch; masks of the wrong shape or dtype are refused naming both shapes."""
import os
import numpy as np
import pytest
from tests.torch_helpers import torch, rnd, check
from baregrad import Tensor, knobs

MOCK = bool(os.environ.get("MOCKGPU"))   # (the mock GPUs interpret every instruction: short sequences there)

@pytest.fixture(autouse=True)
def _fuse_every_size():
  # (by default only attentions of FUSE_ATTENTION_MIN_SCORES scores or more are fused: far more than a test computes)
  with knobs.Context(FUSE_ATTENTION_MIN_SCORES=0): yield

def _qkv(b: int, h: int, L: int, S: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  return rnd((b, h, L, d), seed=seed), rnd((b, h, S, d), seed=seed + 1), rnd((b, h, S, d), seed=seed + 2)

def _mask(kind: str, L: int, S: int) -> np.ndarray | None:
  if kind == "float": return rnd((L, S), low=-3, high=1, seed=9)
  if kind == "bool":
    m = rnd((1, 1, L, S), "bool", seed=9)
    m[..., 0] = True   # (a row with nothing to attend to is NaN in PyTorch too: not what this compares)
    return m
  return None

def _written(items) -> list[int]: return [it.bufs[0].size for it in items]

def _sdpa(q, k, v, kind: str, mask) -> Tensor:
  m = Tensor(mask) if mask is not None else None
  return Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), attn_mask=m, is_causal=kind == "causal")

# (query length, key length, head dim): odd lengths, a single row and key, both head dims
SHAPES = [(1, 1, 64), (7, 7, 64), (5, 33, 64), (7, 7, 128)] + ([] if MOCK else [(33, 5, 128), (129, 129, 64)])

@pytest.mark.parametrize("kind", ["none", "causal", "float", "bool"])
@pytest.mark.parametrize("L,S,d", SHAPES)
def test_fused_attention_is_one_kernel_with_the_unfused_numbers(kind, L, S, d):
  q, k, v = _qkv(1, 2, L, S, d, seed=L + d)
  mask = _mask(kind, L, S)
  out = _sdpa(q, k, v, kind, mask)
  items = out.schedule()
  assert len(items) == 1, f"{kind} L={L} S={S} d={d}: {len(items)} kernels with FUSE_ATTENTION, expected 1"
  fused = out.numpy()
  with knobs.Context(FUSE_ATTENTION=0):
    ref = _sdpa(q, k, v, kind, mask)
    n_split = len(ref.schedule())
    split = ref.numpy()
  assert n_split >= 3 or L * S == 1, f"FUSE_ATTENTION=0 gave {n_split} kernel(s): the knob does not turn fusion off"
  np.testing.assert_allclose(fused, split, rtol=1e-4, atol=1e-5, err_msg=f"{kind} L={L} S={S} d={d}: fused vs unfused")
  tm = torch.tensor(mask) if mask is not None else None
  want = torch.nn.functional.scaled_dot_product_attention(torch.tensor(q), torch.tensor(k), torch.tensor(v), attn_mask=tm,
                                                          is_causal=kind == "causal").numpy()
  np.testing.assert_allclose(fused, want, rtol=1e-4, atol=1e-5, err_msg=f"{kind} L={L} S={S} d={d}: fused vs torch")

def test_fusion_starts_at_the_min_scores_knob():
  q, k, v = _qkv(1, 2, 6, 8, 16, seed=2)
  with knobs.Context(FUSE_ATTENTION_MIN_SCORES=2 * 6 * 8 + 1): assert len(_sdpa(q, k, v, "none", None).schedule()) >= 3
  with knobs.Context(FUSE_ATTENTION_MIN_SCORES=2 * 6 * 8): assert len(_sdpa(q, k, v, "none", None).schedule()) == 1

def test_no_seq_by_seq_buffer_is_written():
  # 24 keys, head dim 8: a written buffer of b*h*L*S elements would be the scores or the weights
  q, k, v = _qkv(2, 3, 24, 24, 8, seed=4)
  scores = 2 * 3 * 24 * 24
  out = _sdpa(q, k, v, "causal", None)
  assert scores not in _written(out.schedule()), f"the fused path writes a {scores}-element buffer (seq x seq scores)"
  with knobs.Context(FUSE_ATTENTION=0):
    assert scores in _written(_sdpa(q, k, v, "causal", None).schedule()), "the check cannot tell: the unfused path has no score buffer either"

def test_the_bert_pattern_of_plain_ops_is_fused():
  # MatMul -> Div -> Add(mask) -> Softmax -> MatMul, as an exported BERT writes it, over a padding mask per batch row
  q, k, v = _qkv(2, 2, 9, 9, 16, seed=7)
  pad = np.zeros((2, 1, 1, 9), np.float32)
  pad[1, ..., 6:] = -10000.0
  def ours() -> Tensor: return ((Tensor(q) @ Tensor(k).transpose(-1, -2)) / 4.0 + Tensor(pad)).softmax(-1) @ Tensor(v)
  out = ours()
  assert len(out.schedule()) == 1, f"the BERT attention pattern made {len(out.schedule())} kernels"
  tq, tk, tv = torch.tensor(q), torch.tensor(k), torch.tensor(v)
  want = ((tq @ tk.transpose(-1, -2)) / 4.0 + torch.tensor(pad)).softmax(-1) @ tv
  np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-4, atol=1e-5)

def test_projected_inputs_get_their_buffers_and_attention_stays_one_kernel():
  # q, k, v computed by matmuls (a layer's projections): those are kernels of their own, the attention one more
  x, w = rnd((6, 32), seed=1), rnd((32, 96), seed=2)
  def ours() -> Tensor:
    q, k, v = (Tensor(x) @ Tensor(w)).reshape(6, 2, 3, 16).permute(2, 1, 0, 3)
    return q.scaled_dot_product_attention(k, v)
  items = ours().schedule()
  assert 6 * 6 * 2 not in _written(items), "a seq x seq buffer was written"
  tq, tk, tv = (torch.tensor(x) @ torch.tensor(w)).reshape(6, 2, 3, 16).permute(2, 1, 0, 3)
  want = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv)
  np.testing.assert_allclose(ours().numpy(), want.numpy(), rtol=1e-4, atol=1e-5)

def test_gradients_through_the_fused_forward():
  q, k, v = _qkv(1, 2, 5, 7, 8, seed=3)
  m = rnd((5, 7), seed=8)
  sdpa = torch.nn.functional.scaled_dot_product_attention
  check(lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True), q, rnd((1, 2, 5, 8), seed=4), rnd((1, 2, 5, 8), seed=5),
        tfn=lambda q, k, v: sdpa(q, k, v, is_causal=True), rtol=1e-4, atol=1e-5)
  check(lambda q, k, v, m: q.scaled_dot_product_attention(k, v, attn_mask=m), q, k, v, m,
        tfn=lambda q, k, v, m: sdpa(q, k, v, attn_mask=m), rtol=1e-4, atol=1e-5)

@pytest.mark.parametrize("mask_shape", [(4, 5), (3, 2, 5, 6), (7,)])
def test_a_mask_of_the_wrong_shape_names_both_shapes(mask_shape):
  q, k, v = _qkv(2, 2, 5, 6, 8)
  with pytest.raises(RuntimeError) as e:
    Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), attn_mask=Tensor(rnd(mask_shape)))
  assert str(mask_shape) in str(e.value) and "(2, 2, 5, 6)" in str(e.value), str(e.value)
  with pytest.raises((RuntimeError, IndexError)):   # (PyTorch refuses it too)
    torch.nn.functional.scaled_dot_product_attention(*(torch.tensor(a) for a in (q, k, v)), attn_mask=torch.tensor(rnd(mask_shape)))

def test_a_mask_of_the_wrong_dtype_names_its_dtype_and_both_shapes():
  q, k, v = _qkv(1, 2, 5, 6, 8)
  with pytest.raises(RuntimeError, match=r"\(5, 6\) has dtype int: .*\(1, 2, 5, 6\)"):
    Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), attn_mask=Tensor(np.ones((5, 6), np.int32)))

def _mha_pair(E: int, H: int, **kw):
  from baregrad import nn
  torch.manual_seed(0)
  theirs = torch.nn.MultiheadAttention(E, H, **kw).eval()
  ours = nn.MultiheadAttention(E, H, **kw)
  ours.load_state_dict({k: Tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
  ours.eval()
  return ours, theirs

@pytest.mark.parametrize("masks", ["key_padding", "causal_float"] + ([] if MOCK else ["none", "attn_bool"]))
def test_multihead_attention_reaches_the_fused_kernel(masks):
  E, H, L, N = 32, 4, 6, 2
  ours, theirs = _mha_pair(E, H, batch_first=True)
  x = rnd((N, L, E), seed=3)
  kw_t: dict = {}
  if masks == "key_padding": kw_t["key_padding_mask"] = torch.tensor([[False] * L, [False] * 4 + [True] * (L - 4)])
  if masks == "attn_bool": kw_t["attn_mask"] = torch.tensor(rnd((L, L), "bool", seed=4) & ~np.eye(L, dtype=bool))
  if masks == "causal_float": kw_t["attn_mask"], kw_t["is_causal"] = torch.nn.Transformer.generate_square_subsequent_mask(L), True
  kw_o = {k: Tensor(v.numpy()) if isinstance(v, torch.Tensor) else v for k, v in kw_t.items()}
  out, w = ours(Tensor(x), Tensor(x), Tensor(x), need_weights=False, **kw_o)
  assert w is None
  assert N * H * L * L not in _written(out.schedule()), "MultiheadAttention wrote a seq x seq buffer"
  want, _ = theirs(torch.tensor(x), torch.tensor(x), torch.tensor(x), need_weights=False, **kw_t)
  np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-5, err_msg=masks)
  # need_weights (PyTorch's default): the weights averaged over the heads, and the same output
  out, w = ours(Tensor(x), Tensor(x), Tensor(x), **kw_o)
  want, tw = theirs(torch.tensor(x), torch.tensor(x), torch.tensor(x), **kw_t)
  np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-5, err_msg=masks)
  np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-4, atol=1e-6, err_msg=masks)

def test_multihead_attention_sequence_first_unbatched_and_other_kv_dims():
  ours, theirs = _mha_pair(16, 2, kdim=8, vdim=12)
  assert sorted(dict(ours.state_dict()) if isinstance(ours.state_dict(), dict) else ours.state_dict()) == sorted(theirs.state_dict())
  q, k, v = rnd((5, 3, 16), seed=1), rnd((7, 3, 8), seed=2), rnd((7, 3, 12), seed=3)
  out, w = ours(Tensor(q), Tensor(k), Tensor(v), average_attn_weights=False)
  want, tw = theirs(torch.tensor(q), torch.tensor(k), torch.tensor(v), average_attn_weights=False)
  np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-4, atol=1e-6)
  out, _ = ours(Tensor(q[:, 0]), Tensor(k[:, 0]), Tensor(v[:, 0]), need_weights=False)
  want, _ = theirs(torch.tensor(q[:, 0]), torch.tensor(k[:, 0]), torch.tensor(v[:, 0]), need_weights=False)
  np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-5)

@pytest.mark.parametrize("masked", [False, True])
def test_the_onnx_attention_operator_is_fused(masked):
  pytest.importorskip("onnx")
  from onnx import helper, TensorProto
  import baregrad.onnx as bonnx
  B, H, L, D = 2, 2, 9, 16
  names = ["q", "k", "v"] + (["m"] if masked else [])
  ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [B, H, L, D]) for n in "qkv"]
  if masked: ins.append(helper.make_tensor_value_info("m", TensorProto.FLOAT, [L, L]))
  g = helper.make_graph([helper.make_node("Attention", names, ["y"])], "g", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, H, L, D])])
  model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
  feeds = {n: rnd((B, H, L, D), seed=i) for i, n in enumerate("qkv")}
  if masked: feeds["m"] = rnd((L, L), low=-3, high=1, seed=5)
  y = bonnx.load(model).build({n: Tensor(a) for n, a in feeds.items()})["y"]
  assert B * H * L * L not in _written(y.schedule()), f"the ONNX Attention operator wrote a seq x seq buffer: {_written(y.schedule())}"
  tm = torch.tensor(feeds["m"]) if masked else None
  want = torch.nn.functional.scaled_dot_product_attention(*(torch.tensor(feeds[n]) for n in "qkv"), attn_mask=tm)
  np.testing.assert_allclose(y.numpy(), want.numpy(), rtol=1e-4, atol=1e-5)

def _attention_ast(L: int, S: int, d: int, dv: int):
  q, k, v = Tensor.empty(1, 2, L, d), Tensor.empty(1, 2, S, d), Tensor.empty(1, 2, S, dv)
  items = q.scaled_dot_product_attention(k, v).schedule()
  assert len(items) == 1
  return items[0].ast

def test_two_passes_over_the_keys_each_computing_the_dot_products_once():
  # the max, then the softmax's sum and the weighted sum of values in one loop (codegen/lower.py shares it): two loops
  # over the 24 keys, each with one loop over the head dim (the dot product), whatever the device
  from baregrad.hal import Device
  from baregrad.codegen.program import get_program
  from baregrad.ir.ops import Ops
  prg = get_program(_attention_ast(5, 24, 8, 4), Device[Device.DEFAULT].renderer, opts=[])
  loops = [u.src[0].arg for u in prg.uops if u.op is Ops.RANGE and u.src[0].op is Ops.CONST]
  assert loops.count(24) == 2 and loops.count(8) == 2, f"loop extents {loops}: expected 2 passes over 24 keys, a dot product of 8 in each"

def test_the_heuristics_see_the_dot_products_nested_in_the_passes():
  from baregrad.codegen.kernel import Kernel, nested_reduce_axes
  k = Kernel(_attention_ast(5, 24, 8, 4))
  assert {k.full_shape[a] for a in nested_reduce_axes(k)} == {8}, f"shape {k.full_shape}: the head dim (8) is the nested axis"
  sm = Tensor.empty(4, 24).softmax(-1).schedule()
  assert nested_reduce_axes(Kernel(sm[-1].ast)) == set(), "softmax's max inside its sum is read once per row, not per key"
