"""Tiny Llama-family models the tests make themselves: random weights from a transformers config (no download),
saved as safetensors with save_pretrained, and written to GGUF with the `gguf` package the way llama.cpp's converter
lays a llama model out (tensor names, q/k rows reordered for its rotary convention, metadata)."""
from __future__ import annotations
import numpy as np

VOCAB = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
PIECES = ["\u2581the", "\u2581th", "\u2581a", "\u2581cat", "\u2581sat", "th", "he", "at", "\u2581t", "\u2581c", "\u2581s", "ca", "sa", "on", "\u2581on",
          "\u2581mat", "ma", "\u2581", "t", "h", "e", "c", "a", "s", "o", "n", "m"]

def hf_model(kind: str = "llama", seed: int = 0, layers: int = 2, tie: bool = False, **extra):
  import torch
  from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM
  torch.manual_seed(seed)
  kw = dict(vocab_size=len(VOCAB) + len(PIECES), hidden_size=64, intermediate_size=128, num_hidden_layers=layers, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5, tie_word_embeddings=tie, bos_token_id=1, eos_token_id=2)
  cls = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM), "qwen3": (Qwen3Config, Qwen3ForCausalLM)}[kind]
  if kind == "qwen3": kw["head_dim"] = 16
  kw.update(extra)
  m = cls[1](cls[0](**kw)).eval()
  with torch.no_grad():   # (biases random too: transformers initializes them to zero)
    for n, p in m.named_parameters():
      if n.endswith("bias") or "norm" in n: p.copy_(torch.randn_like(p) * 0.1 + (1.0 if "norm" in n else 0.0))
  return m

def save_hf(m, folder: str) -> str:
  m.save_pretrained(folder)
  return folder

def _permute(w: np.ndarray, n_heads: int) -> np.ndarray:
  """llama.cpp's converter's order of q and k rows (each head's rotary pairs interleaved)."""
  return w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

def _rope(cfg) -> dict:
  """The config's rope parameters (transformers 5 keeps rope_theta among them, older ones apart)."""
  rs = dict(getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {})
  rs.setdefault("rope_theta", getattr(cfg, "rope_theta", 10000.0))
  return rs

def llama3_freq_factors(cfg) -> np.ndarray:
  """Llama 3.1's rope scaling as llama.cpp's converter writes it (rope_freqs.weight: one divisor per frequency)."""
  rs, d = _rope(cfg), cfg.hidden_size // cfg.num_attention_heads
  theta = rs.get("rope_theta", 10000.0)
  f, lo, hi, old = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], rs["original_max_position_embeddings"]
  out = []
  for i in range(0, d, 2):
    wavelen = 2 * np.pi * theta ** (i / d)
    if wavelen < old / hi: out.append(1.0)
    elif wavelen > old / lo: out.append(f)
    else:
      smooth = (old / wavelen - lo) / (hi - lo)
      out.append(1 / ((1 - smooth) / f + smooth))
  return np.array(out, np.float32)

def write_gguf(m, path: str, qtype: str = "F32") -> dict[str, np.ndarray]:
  """m (a transformers llama) as a GGUF file with its 2-d weights in qtype (F32, F16, Q8_0, Q4_0); returns the
  weights as the file holds them, dequantized (by HF name, HF row order), for the reference model."""
  import gguf
  cfg = m.config
  w = gguf.GGUFWriter(path, "llama")
  w.add_block_count(cfg.num_hidden_layers)
  w.add_context_length(cfg.max_position_embeddings)
  w.add_embedding_length(cfg.hidden_size)
  w.add_feed_forward_length(cfg.intermediate_size)
  w.add_head_count(cfg.num_attention_heads)
  w.add_head_count_kv(cfg.num_key_value_heads)
  w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
  w.add_rope_freq_base(float(_rope(cfg)["rope_theta"]))
  if _rope(cfg).get("rope_type") == "llama3": w.add_tensor("rope_freqs.weight", llama3_freq_factors(cfg))
  w.add_vocab_size(cfg.vocab_size)
  w.add_tokenizer_model("llama")
  # a model wider than the test vocabulary (bench/llm.py's 32000) gets filler tokens: llama.cpp wants one per row
  extra = max(0, cfg.vocab_size - len(VOCAB) - len(PIECES))
  toks = VOCAB + PIECES + [f"<filler{i}>" for i in range(extra)]
  w.add_token_list(toks)
  w.add_token_scores([0.0] * len(VOCAB) + [float(-i) for i in range(len(PIECES))] + [-1e4] * extra)
  w.add_token_types([2, 3, 3] + [6] * 256 + [1] * len(PIECES) + [4] * extra)
  w.add_bos_token_id(1)
  w.add_eos_token_id(2)
  names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}
  layer = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
           "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
           "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}
  held: dict[str, np.ndarray] = {}
  Q = gguf.GGMLQuantizationType
  for n, p in m.state_dict().items():
    a = p.detach().numpy().astype(np.float32)
    if n in names: gn = names[n]
    else:
      _, _, i, rest = n.split(".", 3)
      gn = f"blk.{i}.{layer[rest]}"
    stored = a
    if gn.endswith("attn_q.weight"): stored = _permute(a, cfg.num_attention_heads)
    if gn.endswith("attn_k.weight"): stored = _permute(a, cfg.num_key_value_heads)
    if a.ndim == 2 and qtype != "F32":
      if qtype == "F16":
        w.add_tensor(gn, stored.astype(np.float16))
        back = a.astype(np.float16).astype(np.float32)
      else:
        q = gguf.quantize(stored, getattr(Q, qtype))
        w.add_tensor(gn, q, raw_dtype=getattr(Q, qtype))
        back = gguf.dequantize(q, getattr(Q, qtype)).reshape(a.shape)
        if gn.endswith("attn_q.weight"): back = _permute_back(back, cfg.num_attention_heads)
        if gn.endswith("attn_k.weight"): back = _permute_back(back, cfg.num_key_value_heads)
    else:
      w.add_tensor(gn, stored)
      back = a
    held[n] = back
  w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
  return held

def _permute_back(w: np.ndarray, n_heads: int) -> np.ndarray:
  return w.reshape(n_heads, w.shape[0] // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

def with_weights(m, held: dict[str, np.ndarray]):
  """A copy of m whose weights are `held` (what a quantized file gives back)."""
  import copy, torch
  m2 = copy.deepcopy(m)
  with torch.no_grad():
    for n, p in m2.state_dict().items(): p.copy_(torch.from_numpy(held[n]))
  return m2
