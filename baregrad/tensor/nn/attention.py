"""nn.MultiheadAttention with PyTorch's constructor, parameter names (state-dict keys), initialization and forward.
The heads' attention is Tensor.scaled_dot_product_attention, which the scheduler makes one kernel with no seq x seq
buffer (FUSE_ATTENTION); need_weights=True (PyTorch's default) also computes the weights it returns, as PyTorch does."""
from __future__ import annotations
import math
from baregrad.ir.dtype import dtypes
from baregrad.tensor.tensor import Tensor
from baregrad.tensor.nn.module import Module

def _xavier(shape: tuple[int, int]) -> Tensor:
  bound = math.sqrt(6.0 / (shape[0] + shape[1]))
  return Tensor.uniform(*shape, low=-bound, high=bound, requires_grad=True)

def _additive(mask: Tensor, dtype: object) -> Tensor:
  """A mask as a float bias: a bool mask's True means "do not attend" here (PyTorch's MultiheadAttention, the
  opposite of scaled_dot_product_attention's)."""
  return mask.where(-math.inf, 0.0).cast(dtype) if mask.dtype == dtypes.bool else mask.cast(dtype)

class MultiheadAttention(Module):
  """Attention over num_heads heads of embed_dim // num_heads: (L, N, E) inputs (batch_first: (N, L, E); unbatched:
  (L, E)) -> (output, weights or None)."""
  def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True, add_bias_kv: bool = False,
               add_zero_attn: bool = False, kdim: int | None = None, vdim: int | None = None, batch_first: bool = False):
    if embed_dim <= 0 or num_heads <= 0:
      raise ValueError(f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} and num_heads={num_heads}")
    if embed_dim % num_heads: raise AssertionError(f"embed_dim must be divisible by num_heads (got {embed_dim} and {num_heads})")
    if add_bias_kv or add_zero_attn: raise NotImplementedError("MultiheadAttention: add_bias_kv and add_zero_attn are not supported")
    from baregrad.tensor.nn import Linear
    self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, dropout, batch_first
    self.kdim, self.vdim = kdim or embed_dim, vdim or embed_dim
    self.head_dim = embed_dim // num_heads
    self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
    if self._qkv_same_embed_dim:
      self.in_proj_weight: Tensor | None = _xavier((3 * embed_dim, embed_dim))
      self.q_proj_weight = self.k_proj_weight = self.v_proj_weight = None
    else:
      self.in_proj_weight = None
      self.q_proj_weight, self.k_proj_weight, self.v_proj_weight = (_xavier((embed_dim, d)) for d in (embed_dim, self.kdim, self.vdim))
    self.in_proj_bias = Tensor.zeros(3 * embed_dim).requires_grad_() if bias else None
    self.out_proj = Linear(embed_dim, embed_dim, bias=bias)
    if bias: self.out_proj.bias = Tensor.zeros(embed_dim).requires_grad_()

  def extra_repr(self) -> str: return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, batch_first={self.batch_first}"

  def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None, need_weights: bool = True,
              attn_mask: Tensor | None = None, average_attn_weights: bool = True, is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
    batched = query.ndim == 3
    if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
      raise RuntimeError(f"MultiheadAttention: query, key and value must all be 2-D (unbatched) or 3-D, got {query.shape}, {key.shape}, {value.shape}")
    if not batched:
      query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
      if key_padding_mask is not None: key_padding_mask = key_padding_mask.unsqueeze(0)
    elif self.batch_first: query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
    L, N, E = query.shape
    S, H, hd = key.shape[0], self.num_heads, self.head_dim
    if E != self.embed_dim: raise RuntimeError(f"MultiheadAttention: query's embedding dimension {E} is not embed_dim {self.embed_dim}")
    if key.shape[:2] != value.shape[:2]: raise RuntimeError(f"MultiheadAttention: key {key.shape} and value {value.shape} differ in length or batch")
    if self.in_proj_weight is not None: wq, wk, wv = self.in_proj_weight.chunk(3, 0)
    else: wq, wk, wv = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
    bq, bk, bv = self.in_proj_bias.chunk(3, 0) if self.in_proj_bias is not None else (None, None, None)
    def heads(x: Tensor, w: Tensor, b: Tensor | None, n: int) -> Tensor:   # (n, N, e) -> (N, H, n, hd)
      return x.linear(w, b).reshape(n, N, H, hd).permute(1, 2, 0, 3)
    q, k, v = heads(query, wq, bq, L), heads(key, wk, bk, S), heads(value, wv, bv, S)
    mask: Tensor | None = None
    if attn_mask is not None:
      if attn_mask.shape not in ((L, S), (N * H, L, S)):
        raise RuntimeError(f"MultiheadAttention: attn_mask of shape {attn_mask.shape}: expected {(L, S)} or {(N * H, L, S)}")
      mask = _additive(attn_mask, q.dtype)
      if mask.ndim == 3: mask = mask.reshape(N, H, L, S)
    if key_padding_mask is not None:
      if key_padding_mask.shape != (N, S): raise RuntimeError(f"MultiheadAttention: key_padding_mask of shape {key_padding_mask.shape}: expected {(N, S)}")
      kp = _additive(key_padding_mask, q.dtype).reshape(N, 1, 1, S)
      mask = kp if mask is None else mask + kp
    if is_causal and attn_mask is None: raise RuntimeError("MultiheadAttention: is_causal is a hint that attn_mask is the causal mask: give attn_mask too")
    p = self.dropout if self.training else 0.0
    weights = None
    if need_weights:
      # the weights are asked for: computed (as PyTorch does), and the output from them where dropout must agree
      s = q.matmul(k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
      w = (s + mask if mask is not None else s).softmax(-1)
      if p > 0.0:
        from baregrad.tensor.ops.norm import dropout
        w = dropout(w, p, training=True)
        out = w.matmul(v)
      else: out = q.scaled_dot_product_attention(k, v, attn_mask=mask)
      weights = w.mean(1) if average_attn_weights else w
      if not batched: weights = weights.squeeze(0)
    else: out = q.scaled_dot_product_attention(k, v, attn_mask=mask, dropout_p=p)
    out = self.out_proj(out.permute(2, 0, 1, 3).reshape(L, N, E))
    if not batched: out = out.squeeze(1)
    elif self.batch_first: out = out.transpose(0, 1)
    return out, weights
