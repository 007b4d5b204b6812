"""The Llama family (Llama 2/3, Mistral, Qwen2, Qwen3) as Tensor code: RMSNorm, RoPE, grouped-query attention with a
KV cache, SwiGLU.

Weights are plain tensors or QuantizedWeight (quant.py: GGUF blocks dequantized inside each matmul). A step of T
tokens starting at position `start` writes its keys and values into the preallocated cache rows [start, start + T) in
place and attends over rows [0, start + T) only (kv_cache.py). In a decode step `start` is a bound variable
(`Variable("start_pos", ...)`, ir/sint.py): the cache's valid prefix is a symbolic size, so the step's kernels
compile once for every position and the jit captures the step once and replays it for each new token with the
position as a kernel argument."""
from __future__ import annotations
import math
from typing import Any, Iterator
import numpy as np
from baregrad.tensor.tensor import Tensor
from baregrad.tensor.jit import jit
from baregrad.ir.ops import UOp
from baregrad.ir.sint import Variable, sint
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
    inv_freq = Tensor(np.array(cfg.inv_freq(), np.float32), device=device)
    # the rotary angles of every position, once: a step reads its rows (at a symbolic offset in a decode step)
    self.positions = Tensor.arange(self.max_context, device=device)
    ang = self.positions.float().unsqueeze(1) * inv_freq.unsqueeze(0)     # (S, hd / 2)
    f = cfg.attention_factor()
    self.rope_cos, self.rope_sin = (ang.cos() * f).contiguous().realize(), (ang.sin() * f).contiguous().realize()
    self.cache = KVCache(cfg.n_layers, cfg.n_kv_heads, self.max_context, cfg.head_dim, device)
    self.start_pos = Variable("start_pos", 0, self.max_context - 1)
    self._step = jit(self._decode)
    self._prefill = jit(self._prompt)
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

  def _rope(self, x: Tensor, start: sint, T: int) -> Tensor:
    """x (heads, T, head_dim) rotated by the angles of positions start..start+T-1: the halves convention (rotate_half)."""
    rows = ((start, start + T), None)
    cos, sin = self.rope_cos.shrink(rows), self.rope_sin.shrink(rows)     # (T, hd / 2)
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return (x1 * cos - x2 * sin).cat(x2 * cos + x1 * sin, dim=-1)

  def _forward(self, ids: Tensor, start: sint, last_only: bool = False, last: sint | None = None) -> Tensor:
    """Logits (T, vocab) of tokens ids (T,) at positions start.. (an int, or a bound variable: ir/sint.py), reading and
    writing the KV cache; last_only: of the last token only (1, vocab) (a prompt's prefill needs no more: the output
    matmul over the vocabulary once, not T times)."""
    c, w = self.cfg, self.w
    T = ids.shape[0]
    h = self._embed(ids)                                                    # (T, dim)
    rep = c.n_heads // c.n_kv_heads
    L = start + T                                                           # keys attended: the cache's valid prefix
    mask = None
    if T > 1:   # causal within the step: key j is visible to the query at position p where j <= p
      pos = self.positions.shrink(((start, start + T),))
      mask = self.positions.shrink(((0, L),)).unsqueeze(0) <= pos.unsqueeze(1)   # (T, L)
    for i in range(c.n_layers):
      p = f"model.layers.{i}."
      # the residual stream computed once per layer: the cache writes below realize k and v (in place, now), and a lazy
      # h would be computed again inside each of them and at the end (every layer ~n_layers times over)
      h = h.realize()
      x = _rms(h, self._t(p + "input_layernorm.weight"), c.norm_eps)
      q = linear(x, w[p + "self_attn.q_proj.weight"], self._bias(p + "self_attn.q_proj.bias"))
      k = linear(x, w[p + "self_attn.k_proj.weight"], self._bias(p + "self_attn.k_proj.bias"))
      v = linear(x, w[p + "self_attn.v_proj.weight"], self._bias(p + "self_attn.v_proj.bias"))
      q = q.reshape(T, c.n_heads, c.head_dim).permute(1, 0, 2)               # (H, T, hd)
      k = k.reshape(T, c.n_kv_heads, c.head_dim).permute(1, 0, 2)            # (KV, T, hd)
      v = v.reshape(T, c.n_kv_heads, c.head_dim).permute(1, 0, 2)
      if c.qk_norm:
        q, k = _rms(q, self._t(p + "self_attn.q_norm.weight"), c.norm_eps), _rms(k, self._t(p + "self_attn.k_norm.weight"), c.norm_eps)
      q, k = self._rope(q, start, T), self._rope(k, start, T)
      ck, cv = self.cache.write(i, k, v, start)                             # (KV, L, hd) each, this step's included
      # grouped-query attention without copying k and v per query head: the rep query heads of a kv head as rows
      qg = q.reshape(c.n_kv_heads, rep * T, c.head_dim)
      s = qg.matmul(ck.transpose(-2, -1)) * (1.0 / math.sqrt(c.head_dim))   # (KV, rep * T, L)
      if mask is not None: s = mask.reshape(1, 1, T, L).where(s.reshape(c.n_kv_heads, rep, T, L), -math.inf).reshape(c.n_kv_heads, rep * T, L)
      a = s.softmax(-1).matmul(cv)                                          # (KV, rep * T, hd)
      a = a.reshape(c.n_heads, T, c.head_dim).permute(1, 0, 2).reshape(T, c.n_heads * c.head_dim)
      h = h + linear(a, w[p + "self_attn.o_proj.weight"])
      x = _rms(h, self._t(p + "post_attention_layernorm.weight"), c.norm_eps)
      g = linear(x, w[p + "mlp.gate_proj.weight"])
      h = h + linear(g.silu() * linear(x, w[p + "mlp.up_proj.weight"]), w[p + "mlp.down_proj.weight"])
    if last_only: h = h[T - 1:]
    if last is not None: h = h.shrink(((last, last + 1), None))            # (the row of the prompt's last token)
    h = _rms(h, self._t("model.norm.weight"), c.norm_eps)
    return linear(h, w["model.embed_tokens.weight" if c.tie_embeddings else "lm_head.weight"])

  def _decode(self, tok: Tensor, start: UOp) -> Tensor:
    """One new token (1,) at position `start` (a bound variable): its logits (vocab,), realized; captured once,
    replayed per token."""
    return self._forward(tok, start)[0].realize()

  def _prompt(self, ids: Tensor, last: UOp) -> Tensor:
    """A prompt padded to a bucket's length (ids (B,)) from position 0: the logits (vocab,) of its last real token
    (`last`, a bound variable: one capture per bucket length, whatever the prompt's length in it), realized. The padding
    tokens' keys and values land in cache rows past the prompt, which every later step overwrites before reading."""
    return self._forward(ids, 0, last=last)[0].realize()

  def _bucket(self, n: int) -> int:
    """The padded length of an n-token prompt: the next power of two from 16, within the context."""
    return min(self.max_context, max(16, 1 << (n - 1).bit_length()))

  # ---------------------------------------------------------------- the API
  def _check_len(self, n: int, what: str) -> None:
    if n > self.max_context: raise ValueError(f"{what} of {n} tokens is longer than the context of {self.max_context} tokens")

  def logits(self, token_ids: Any) -> Tensor:
    """Logits (len, vocab) of a sequence, from an empty cache."""
    ids = list(token_ids)
    if not ids: raise ValueError("logits: no token ids")
    self._check_len(len(ids), "the sequence")
    self.cache.reset()
    return self._forward(Tensor(np.array(ids, np.int32), device=self.device), 0).realize()

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
    # the prompt padded to a bucket length and jitted: its kernels (a weight's packing included) are captured once per
    # bucket and replayed for every prompt of a length in it
    b = self._bucket(len(ids))
    last = self._prefill(Tensor(np.array(ids + [0] * (b - len(ids)), np.int32), device=self.device), Variable("last_pos", 0, b - 1).bind(len(ids) - 1))
    for n in range(max_new_tokens):
      t = _sample(last, temperature, top_k, top_p, rng)
      yield t
      if t in stops or n == max_new_tokens - 1: return
      p = len(ids) + n
      last = self._step(Tensor(np.array([t], np.int32), device=self.device), self.start_pos.bind(p))

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
