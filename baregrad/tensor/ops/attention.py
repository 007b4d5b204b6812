"""Scaled dot-product attention."""
from __future__ import annotations
import math
from typing import TYPE_CHECKING
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
    attn = q.matmul(k.transpose(-2, -1)) * sc
    if is_causal:
      if attn_mask is not None: raise RuntimeError("scaled_dot_product_attention: give attn_mask or is_causal, not both")
      attn_mask = _tri_mask(Tensor.full((L, S), True, device=q.device), 0, True)
    if attn_mask is not None:
      if attn_mask.dtype == dtypes.bool: attn = attn_mask.where(attn, -math.inf)
      else: attn = attn + attn_mask
    w = attn.softmax(-1)
    if dropout_p > 0.0: w = _dropout(w, dropout_p)
    return w.matmul(v)
