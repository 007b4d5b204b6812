"""Scaled dot-product attention."""
from __future__ import annotations
import math
from typing import TYPE_CHECKING
from baregrad import knobs
from baregrad.ir.dtype import dtypes
from baregrad.tensor.ops.norm import _dropout
from baregrad.tensor.ops.shape import _tri_mask
if TYPE_CHECKING: from baregrad.tensor.tensor import Tensor

class AttentionOps:
  """Attention: the Tensor method q.scaled_dot_product_attention(k, v)."""
  __slots__ = ()   # (Tensor has slots: a base without them would give every tensor a __dict__)
  def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                                   is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False) -> Tensor:
    """softmax(q k^T * scale + mask) v. A bool mask keeps where True; a float mask is added. Dropout on the weights
    applies whenever dropout_p > 0, as in PyTorch."""
    from baregrad.tensor.tensor import Tensor
    q, k, v = query, key, value
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2: raise RuntimeError(f"scaled_dot_product_attention: q, k, v need at least 2 dimensions, got {q.shape}, "
        f"{k.shape}, {v.shape}")
    if q.shape[-1] != k.shape[-1]: raise RuntimeError(f"scaled_dot_product_attention: query {q.shape} and key {k.shape} differ in the embedding dimension")
    if k.shape[-2] != v.shape[-2]: raise RuntimeError(f"scaled_dot_product_attention: key {k.shape} and value {v.shape} differ in the sequence dimension")
    if enable_gqa and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
      hq, hk = q.shape[-3], k.shape[-3]
      if hq % hk: raise RuntimeError(f"scaled_dot_product_attention: {hq} query heads are not a multiple of {hk} key/value heads")
      def _rep(t: Tensor) -> Tensor:
        s = t.shape
        return t.unsqueeze(-3).expand(s[:-2] + (hq // hk,) + s[-2:]).reshape(s[:-3] + (hq,) + s[-2:])
      k, v = _rep(k), _rep(v)
    L, S = q.shape[-2], k.shape[-2]
    sc = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    if attn_mask is not None: _check_mask(attn_mask, _bshape(q.shape[:-2], k.shape[:-2]) + (L, S))
    if is_causal:
      if attn_mask is not None: raise RuntimeError("scaled_dot_product_attention: give attn_mask or is_causal, not both")
      attn_mask = _tri_mask(Tensor.full((L, S), True, device=q.device), 0, True)
    batch = math.prod(_bshape(q.shape[:-2], k.shape[:-2]))
    # the scheduler makes softmax(q k^T) v one kernel with no L x S buffer (FUSE_ATTENTION, engine/attention_fusion.py);
    # without it (or with dropout, whose weights are a buffer) blocks of rows bound the scores' memory
    fused = knobs.get("FUSE_ATTENTION") and dropout_p == 0.0 and batch * L * S >= knobs.get("FUSE_ATTENTION_MIN_SCORES")
    if fused or batch * L * S <= BLOCK_SCORES or L == 1: return _attend(q, k, v, attn_mask, sc, dropout_p)
    # a long sequence: blocks of query rows, each with its own scores (rows x S), so no L x S matrix is ever held; the
    # blocks' buffers are dead after their block and the memory plan reuses them. A causal block reads only the keys
    # its rows may see
    rows = max(1, BLOCK_SCORES // (batch * S))
    outs = []
    for i in range(0, L, rows):
      j = min(L, i + rows)
      m = attn_mask
      if m is not None and m.ndim >= 2 and m.shape[-2] == L: m = m[..., i:j, :]
      kk, vv = k, v
      if is_causal and j < S:   # (PyTorch's causal mask is aligned at the top left: row r sees keys 0..r)
        kk, vv = k[..., :j, :], v[..., :j, :]
        if m is not None: m = m[..., :j]
      outs.append(_attend(q[..., i:j, :], kk, vv, m, sc, dropout_p))
    return outs[0].cat(*outs[1:], dim=-2)

# the most attention scores (batch x heads x query rows x keys) one block computes: 4M floats, 16 MiB
BLOCK_SCORES = 1 << 22

def _bshape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
  n = max(len(a), len(b))
  a, b = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
  return tuple(max(x, y) for x, y in zip(a, b))

def _check_mask(mask: Tensor, scores: tuple[int, ...]) -> None:
  """An attention mask is bool (True: attend) or float (added to the scores) and broadcasts to the scores' shape."""
  if mask.dtype != dtypes.bool and not dtypes.is_float(mask.dtype):
    raise RuntimeError(f"scaled_dot_product_attention: attn_mask of shape {mask.shape} has dtype {mask.dtype.name}: expected bool "
                       f"or a float dtype, for scores of shape {scores}")
  ms = mask.shape
  if len(ms) > len(scores) or any(m not in (1, s) for m, s in zip(reversed(ms), reversed(scores))):
    raise RuntimeError(f"scaled_dot_product_attention: attn_mask of shape {ms} does not broadcast to the scores' shape {scores} "
                       "(batch..., query length, key length)")

def _attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, sc: float, dropout_p: float) -> Tensor:
  """softmax(q k^T * sc + mask) v over whole rows."""
  attn = q.matmul(k.transpose(-2, -1)) * sc
  if mask is not None:
    if mask.dtype == dtypes.bool: attn = mask.where(attn, -math.inf)
    else: attn = attn + mask
  w = attn.softmax(-1)
  if dropout_p > 0.0: w = _dropout(w, dropout_p)
  return w.matmul(v)
