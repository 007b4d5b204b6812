"""Attention patterns: the Attention operator (opset 23+: 3-D or 4-D q/k/v, grouped heads, masks, causal, KV cache,
softcap), RotaryEmbedding, and the contrib-domain fusions exporters emit for transformers."""
from __future__ import annotations
import math
import numpy as np
from baregrad import dtypes
from baregrad.tensor import Tensor, functional as F
from baregrad.onnx.errors import OnnxError
from baregrad.onnx.registry import op

def _heads(x: Tensor, h: int) -> Tensor:
  """(B, S, h*D) -> (B, h, S, D)."""
  B, S, E = x.shape
  return x.reshape(B, S, h, E // h).transpose(1, 2)

def _repeat_heads(x: Tensor, rep: int) -> Tensor:
  """(B, H, S, D) -> (B, H*rep, S, D), each head repeated rep times in place ([h0, h0, h1, h1, ...])."""
  if rep == 1: return x
  B, H, S, D = x.shape
  return x.unsqueeze(2).expand(B, H, rep, S, D).reshape(B, H * rep, S, D)

def _masked_softmax(s: Tensor) -> Tensor:
  """softmax over the last axis where a row of -inf gives zeros (no NaN)."""
  m = s.amax(-1, keepdim=True)
  m = (m.isinf() & (m < 0)).where(0.0, m).cast(s.dtype)
  e = (s - m).exp()
  tot = e.sum(-1, keepdim=True)
  return e / tot.eq(0).where(1.0, tot).cast(e.dtype)

@op("Attention")
def attention(ctx, n, q, k, v, mask=None, past_k=None, past_v=None, nonpad=None):
  q, k, v, mask, past_k, past_v, nonpad = (ctx.t(x) for x in (q, k, v, mask, past_k, past_v, nonpad))
  a = n.attrs
  rank3 = q.ndim == 3
  if rank3:
    if "q_num_heads" not in a or "kv_num_heads" not in a: raise OnnxError("Attention with 3-D inputs needs q_num_heads and kv_num_heads")
    q, k, v = _heads(q, a["q_num_heads"]), _heads(k, a["kv_num_heads"]), _heads(v, a["kv_num_heads"])
  dt = q.dtype
  scale = a.get("scale", 1.0 / math.sqrt(q.shape[3]))
  sq = float(np.float32(math.sqrt(scale))) if dt == dtypes.float32 else math.sqrt(scale)
  pk = F.cat([past_k, k], 2) if past_k is not None else k
  pv = F.cat([past_v, v], 2) if past_v is not None else v
  L, S = q.shape[2], pk.shape[2]
  B = q.shape[0]
  bias = None
  if mask is not None and mask.shape[-1] < S:  # a short mask is padded: masked out (-inf / False)
    fill = False if mask.dtype == dtypes.bool else -math.inf
    mask = F.pad(mask, [0, S - mask.shape[-1]], "constant", fill)
  neg = lambda cond: cond.where(0.0, -math.inf).cast(dt)
  i_idx = Tensor.arange(L, device=q.device, dtype=dtypes.int64).reshape(L, 1)
  j_idx = Tensor.arange(S, device=q.device, dtype=dtypes.int64).reshape(1, S)
  if nonpad is not None: off = (nonpad.cast(dtypes.int64) - L).reshape(-1, 1, 1, 1)
  else: off = past_k.shape[2] if past_k is not None else 0
  if a.get("is_causal", 0):
    base = None if mask is None else (neg(mask) if mask.dtype == dtypes.bool else mask)
    causal = neg(j_idx <= (i_idx + off))
    bias = causal if base is None else base + causal
  elif mask is not None:
    bias = neg(mask) if mask.dtype == dtypes.bool else mask
  lw, rw = a.get("left_window_size", -1), a.get("right_window_size", -1)
  if lw >= 0 or rw >= 0:
    diff = (i_idx + off) - j_idx
    ok = None
    if lw >= 0: ok = diff <= lw
    if rw >= 0: ok = (-diff <= rw) if ok is None else ok & (-diff <= rw)
    bias = neg(ok) if bias is None else bias + neg(ok)
  if nonpad is not None:
    pad = neg(Tensor.arange(S, device=q.device, dtype=dtypes.int64).reshape(1, 1, 1, S) < nonpad.cast(dtypes.int64).reshape(B, 1, 1, 1))
    bias = pad if bias is None else bias + pad
  hq = q.shape[1]
  hk = pk.shape[1]
  kk, vv = pk, pv
  if hq != hk and hq % hk == 0: kk, vv = _repeat_heads(pk, hq // hk), _repeat_heads(pv, hq // hk)
  qk = (q * sq).matmul((kk * sq).transpose(-1, -2))
  cap = a.get("softcap")
  if cap: qk = (qk / cap).tanh() * cap
  mode = a.get("qk_matmul_output_mode", 0)
  withb = qk + bias if bias is not None else qk
  qk_out = withb if mode == 2 else qk
  sm_dt = ctx.dtype(a["softmax_precision"]) if "softmax_precision" in a else dt
  p = _masked_softmax(withb.cast(sm_dt))
  if bias is not None:  # a row whose bias is all -inf attends nothing: zeros
    dead = bias.amax(-1, keepdim=True)
    p = (dead.isinf() & (dead < 0)).where(0.0, p).cast(p.dtype)
  if mode == 3: qk_out = p
  y = p.cast(dt).matmul(vv)
  if rank3:
    y = y.transpose(1, 2)
    y = y.reshape(y.shape[0], y.shape[1], -1)
  return y, pk, pv, qk_out.cast(dt)

@op("RotaryEmbedding")
def rotary_embedding(ctx, n, x, cos, sin, pos=None):
  x, cos, sin = ctx.t(x), ctx.t(cos), ctx.t(sin)
  shp = x.shape
  if x.ndim == 4: y = x.transpose(1, 2)                          # (B, S, H, D)
  else:
    nh = n.attrs.get("num_heads", 0)
    if not nh: raise OnnxError("RotaryEmbedding with a 3-D input needs num_heads")
    y = x.reshape(shp[0], shp[1], nh, shp[2] // nh)
  D = y.shape[3]
  rd = n.attrs.get("rotary_embedding_dim", 0) or D
  if pos is not None:
    p = ctx.t(pos)
    cos, sin = cos[p], sin[p]
  cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
  xr, rest = y[..., :rd], y[..., rd:]
  if n.attrs.get("interleaved", 0): x1, x2 = xr[..., 0::2], xr[..., 1::2]
  else: x1, x2 = xr[..., :rd // 2], xr[..., rd // 2:]
  re, im = cos * x1 - sin * x2, sin * x1 + cos * x2
  if n.attrs.get("interleaved", 0): rot = F.stack([re, im], -1).reshape(xr.shape)
  else: rot = F.cat([re, im], -1)
  out = F.cat([rot, rest], -1) if rd < D else rot
  return out.reshape(shp) if x.ndim == 3 else out.transpose(1, 2)

# ---------------------------------------------------------------- losses

def _reduce_loss(loss: Tensor, w: Tensor | None, red: str) -> Tensor:
  if red == "none": return loss
  if red == "sum": return loss.sum()
  if red == "mean": return loss.sum() / w.sum() if w is not None else loss.mean()
  raise OnnxError(f"reduction {red!r}: expected none, sum or mean")

def _nll(ctx, n, logp: Tensor, target: Tensor, weight: Tensor | None) -> Tensor:
  """-logp[n, target[n, ...], ...] * weight[target], with ignore_index excluded (and out of the mean's weights)."""
  C = logp.shape[1]
  t = target.cast(dtypes.int64)
  ign = n.attrs.get("ignore_index")
  keep = None if ign is None else t.ne(ign)
  tt = t if keep is None else keep.where(t, 0)
  oh = tt.unsqueeze(1).eq(Tensor.arange(C, device=logp.device, dtype=dtypes.int64).reshape((1, C) + (1,) * (t.ndim - 1)))
  picked = oh.where(logp, 0).sum(1).cast(logp.dtype)
  w = None
  if weight is not None: w = oh.where(weight.reshape((1, C) + (1,) * (t.ndim - 1)), 0).sum(1).cast(logp.dtype)
  if keep is not None:
    w = keep.where(w if w is not None else 1.0, 0.0).cast(logp.dtype)
  loss = -picked * w if w is not None else -picked
  return _reduce_loss(loss, w, n.attrs.get("reduction", "mean")).cast(logp.dtype)

@op("NegativeLogLikelihoodLoss")
def nll_loss(ctx, n, x, target, weight=None):
  return _nll(ctx, n, ctx.t(x), ctx.t(target), ctx.t(weight))

@op("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy(ctx, n, x, target, weight=None):
  x = ctx.t(x)
  logp = x.float().log_softmax(1).cast(x.dtype) if x.dtype in (dtypes.float16, dtypes.bfloat16) else x.log_softmax(1)
  loss = _nll(ctx, n, logp, ctx.t(target), ctx.t(weight))
  return loss, logp
