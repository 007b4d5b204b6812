"""The Llama family (Llama 2/3, Mistral, Qwen2, Qwen3) as Tensor code: RMSNorm, RoPE, grouped-query attention with a
KV cache, SwiGLU.

Weights are plain tensors or QuantizedWeight (quant.py: GGUF blocks dequantized inside each matmul). Every step, the
prompt's and each new token's, attends over the whole preallocated cache with a mask from the positions (a tensor, not
a shape), and writes its keys and values into the cache in place at those positions (kv_cache.py): a decode step has
the same shapes at every position, so it is captured by the jit once and replayed for each new token."""
from __future__ import annotations
import math
from typing import Any, Iterator
import numpy as np
from baregrad.tensor.tensor import Tensor
from baregrad.tensor.jit import jit
from baregrad.llm.config import LlamaConfig
from baregrad.llm.quant import QuantizedWeight, dequantize, linear
from baregrad.llm.kv_cache import KVCache

Weight = Tensor | QuantizedWeight

def _rms(x: Tensor, w: Tensor, eps: float) -> Tensor:
  return x * ((x * x).mean(-1, keepdim=True) + eps).rsqrt() * w

class LlamaModel:
  """A loaded model: `logits(ids)`, `generate(ids, ...)`, `stream(ids, ...)`. Weights by Hugging Face name."""
  def __init__(self, cfg: LlamaConfig, weights: dict[str, Weight], device: str | None = None, max_context: int | None = None):
    self.cfg, self.w, self.device = cfg, weights, device
    missing = [n for n in self._needed() if n not in weights]
    if missing: raise KeyError(f"model weights missing: {missing[:8]}{' ...' if len(missing) > 8 else ''} ({len(missing)} of {len(self._needed())})")
    self.max_context = min(max_context or cfg.max_context, cfg.max_context)
    self.inv_freq = Tensor(np.array(cfg.inv_freq(), np.float32), device=device)
    self.cache = KVCache(cfg.n_layers, cfg.n_kv_heads, self.max_context, cfg.head_dim, device)
    self._step = jit(self._decode)
    self.tokenizer: Any = None   # (load() sets it from the model's files)

  def _t(self, name: str) -> Tensor:
    """A weight that is a plain tensor (norms, biases)."""
    w = self.w[name]
    if not isinstance(w, Tensor): raise TypeError(f"{name}: expected a plain tensor, the file holds it quantized ({w.kind})")
    return w

  def _bias(self, name: str) -> Tensor | None: return self._t(name) if name in self.w else None

  def _needed(self) -> list[str]:
    c, out = self.cfg, ["model.embed_tokens.weight", "model.norm.weight"]
    if not c.tie_embeddings: out.append("lm_head.weight")
    for i in range(c.n_layers):
      p = f"model.layers.{i}."
      out += [p + n for n in ("input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                              "self_attn.v_proj.weight", "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")]
      if c.qkv_bias: out += [p + f"self_attn.{n}_proj.bias" for n in "qkv"]
      if c.qk_norm: out += [p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight"]
    return out

  # ---------------------------------------------------------------- the network
  def _embed(self, ids: Tensor) -> Tensor:
    e = self.w["model.embed_tokens.weight"]
    if isinstance(e, QuantizedWeight): return dequantize(e)[ids]   # (gathers rows of the dequantized expression: only the rows read are computed)
    return e[ids].float()

  def _rope(self, x: Tensor, pos: Tensor) -> Tensor:
    """x (heads, T, head_dim) rotated by the angles of positions pos (T,): the halves convention (rotate_half)."""
    ang = pos.float().unsqueeze(1) * self.inv_freq.unsqueeze(0)            # (T, hd / 2)
    f = self.cfg.attention_factor()
    cos, sin = ang.cos() * f, ang.sin() * f
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return (x1 * cos - x2 * sin).cat(x2 * cos + x1 * sin, dim=-1)

  def _forward(self, ids: Tensor, pos: Tensor, last_only: bool = False) -> Tensor:
    """Logits (T, vocab) of tokens ids (T,) at positions pos (T,), reading and writing the KV cache; last_only: of the
    last token only (1, vocab) (a prompt's prefill needs no more: the output matmul over the vocabulary once, not T times)."""
    c, w = self.cfg, self.w
    T = ids.shape[0]
    h = self._embed(ids)                                                    # (T, dim)
    S, rep = self.max_context, c.n_heads // c.n_kv_heads
    keys = Tensor.arange(S, device=self.device)
    mask = keys.unsqueeze(0) <= pos.unsqueeze(1)                            # (T, S): causal, and only written slots
    onehot = (keys.unsqueeze(0) == pos.unsqueeze(1)).float()                # (T, S): where each token's k and v go
    written = onehot.sum(0).reshape(1, -1, 1) > 0                          # (1, S, 1): the slots this step writes
    for i in range(c.n_layers):
      p = f"model.layers.{i}."
      x = _rms(h, self._t(p + "input_layernorm.weight"), c.norm_eps)
      q = linear(x, w[p + "self_attn.q_proj.weight"], self._bias(p + "self_attn.q_proj.bias"))
      k = linear(x, w[p + "self_attn.k_proj.weight"], self._bias(p + "self_attn.k_proj.bias"))
      v = linear(x, w[p + "self_attn.v_proj.weight"], self._bias(p + "self_attn.v_proj.bias"))
      q = q.reshape(T, c.n_heads, c.head_dim).permute(1, 0, 2)               # (H, T, hd)
      k = k.reshape(T, c.n_kv_heads, c.head_dim).permute(1, 0, 2)            # (KV, T, hd)
      v = v.reshape(T, c.n_kv_heads, c.head_dim).permute(1, 0, 2)
      if c.qk_norm:
        q, k = _rms(q, self._t(p + "self_attn.q_norm.weight"), c.norm_eps), _rms(k, self._t(p + "self_attn.k_norm.weight"), c.norm_eps)
      q, k = self._rope(q, pos), self._rope(k, pos)
      ck, cv = self.cache.write(i, k, v, onehot, written)                   # (KV, S, hd) each, this step's included
      # grouped-query attention without copying k and v per query head: the rep query heads of a kv head as rows
      qg = q.reshape(c.n_kv_heads, rep * T, c.head_dim)
      s = qg.matmul(ck.transpose(-2, -1)) * (1.0 / math.sqrt(c.head_dim))   # (KV, rep * T, S)
      s = s.reshape(c.n_kv_heads, rep, T, S)
      s = mask.reshape(1, 1, T, S).where(s, -math.inf)
      a = s.softmax(-1).reshape(c.n_kv_heads, rep * T, S).matmul(cv)        # (KV, rep * T, hd)
      a = a.reshape(c.n_heads, T, c.head_dim).permute(1, 0, 2).reshape(T, c.n_heads * c.head_dim)
      h = h + linear(a, w[p + "self_attn.o_proj.weight"])
      x = _rms(h, self._t(p + "post_attention_layernorm.weight"), c.norm_eps)
      g = linear(x, w[p + "mlp.gate_proj.weight"])
      h = h + linear(g.silu() * linear(x, w[p + "mlp.up_proj.weight"]), w[p + "mlp.down_proj.weight"])
    if last_only: h = h[T - 1:]
    h = _rms(h, self._t("model.norm.weight"), c.norm_eps)
    return linear(h, w["model.embed_tokens.weight" if c.tie_embeddings else "lm_head.weight"])

  def _decode(self, tok: Tensor, pos: Tensor) -> Tensor:
    """One new token (1,) at position pos (1,): its logits (vocab,), realized; captured once, replayed per token."""
    return self._forward(tok, pos)[0].realize()

  # ---------------------------------------------------------------- the API
  def _check_len(self, n: int, what: str) -> None:
    if n > self.max_context: raise ValueError(f"{what} of {n} tokens is longer than the context of {self.max_context} tokens")

  def logits(self, token_ids: Any) -> Tensor:
    """Logits (len, vocab) of a sequence, from an empty cache."""
    ids = list(token_ids)
    if not ids: raise ValueError("logits: no token ids")
    self._check_len(len(ids), "the sequence")
    self.cache.reset()
    return self._forward(Tensor(np.array(ids, np.int32), device=self.device), Tensor.arange(len(ids), device=self.device)).realize()

  def stream(self, token_ids: Any, max_new_tokens: int = 32, temperature: float = 0.0, top_k: int | None = None,
             top_p: float | None = None, seed: int | None = None, stop: Any = None) -> Iterator[int]:
    """Yield new token ids one by one (greedy at temperature 0); stops at max_new_tokens or a stop id (default: the
    model's end-of-sequence ids)."""
    ids = [int(t) for t in token_ids]
    if not ids: raise ValueError("generate: no prompt token ids")
    if max_new_tokens < 0: raise ValueError(f"generate: max_new_tokens must be >= 0, got {max_new_tokens}")
    self._check_len(len(ids) + max_new_tokens - 1 if max_new_tokens else len(ids), "the prompt and the new tokens")
    stops = set(self.cfg.eos_ids if stop is None else stop)
    rng = np.random.default_rng(seed)
    self.cache.reset()
    if max_new_tokens == 0: return
    last = self._forward(Tensor(np.array(ids, np.int32), device=self.device), Tensor.arange(len(ids), device=self.device), last_only=True)[0]
    for n in range(max_new_tokens):
      t = _sample(last, temperature, top_k, top_p, rng)
      yield t
      if t in stops or n == max_new_tokens - 1: return
      p = len(ids) + n
      last = self._step(Tensor(np.array([t], np.int32), device=self.device), Tensor(np.array([p], np.int32), device=self.device))

  def generate(self, token_ids: Any, max_new_tokens: int = 32, temperature: float = 0.0, top_k: int | None = None,
               top_p: float | None = None, seed: int | None = None, stop: Any = None) -> list[int]:
    """The new token ids (greedy at temperature 0; else sampled with top_k / top_p from a seeded generator)."""
    return list(self.stream(token_ids, max_new_tokens, temperature, top_k, top_p, seed, stop))

def _sample(logits: Tensor, temperature: float, top_k: int | None, top_p: float | None, rng: np.random.Generator) -> int:
  """The next token from a logits vector: argmax at temperature 0 (on the device), else a draw from the softmax of
  logits / temperature cut to the top_k most likely and the smallest set of probability >= top_p."""
  if temperature <= 0: return int(logits.argmax().item())
  probs = (logits.float() / temperature).softmax(-1)
  if top_k is not None and top_k > 0:
    vals, idx = probs.topk(min(top_k, probs.shape[0]))
    p, ix = vals.numpy().astype(np.float64), idx.numpy()
  else:
    p = probs.numpy().astype(np.float64)
    ix = np.arange(p.shape[0])
    order = np.argsort(-p, kind="stable")
    p, ix = p[order], ix[order]
  if top_p is not None and 0 < top_p < 1:
    keep = int(np.searchsorted(np.cumsum(p), top_p) + 1)
    p, ix = p[:keep], ix[:keep]
  p = p / p.sum()
  return int(ix[rng.choice(len(p), p=p)])
