"""The hyperparameters of a Llama-family model, from a Hugging Face config.json or GGUF metadata."""
from __future__ import annotations
import math
from dataclasses import dataclass, field
from typing import Any

ARCHS = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}   # family -> the variant we run
HF_ARCHS = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}

class UnsupportedModel(ValueError):
  """A model this runner does not implement (architecture, option), named with where it was read."""

@dataclass
class LlamaConfig:
  arch: str                     # llama, mistral, qwen2, qwen3
  vocab_size: int
  dim: int
  n_layers: int
  n_heads: int
  n_kv_heads: int
  hidden_dim: int               # the MLP's inner width
  head_dim: int
  norm_eps: float = 1e-5
  rope_theta: float = 10000.0
  rope_scaling: dict[str, Any] = field(default_factory=dict)
  max_context: int = 2048
  tie_embeddings: bool = False
  qkv_bias: bool = False        # Qwen2
  qk_norm: bool = False         # Qwen3: RMSNorm of each head's q and k
  bos_id: int | None = None
  eos_ids: tuple[int, ...] = ()
  # a GGUF's rope_freqs tensor (llama.cpp's converter writes Llama 3.1's scaling as one divisor per pair of dimensions
  # instead of metadata): each frequency is divided by its factor
  rope_freq_factors: tuple[float, ...] | None = None

  @staticmethod
  def from_hf(cfg: dict[str, Any], where: str = "config.json") -> "LlamaConfig":
    archs = cfg.get("architectures") or []
    mt = cfg.get("model_type")
    fam = next((HF_ARCHS[a] for a in archs if a in HF_ARCHS), None) or (mt if mt in ARCHS else None)
    if fam is None:
      raise UnsupportedModel(f"{where}: architecture {archs or cfg.get('model_type')!r} is not supported; supported: {sorted(HF_ARCHS)}")
    rs = dict(cfg.get("rope_scaling") or cfg.get("rope_parameters") or {})
    theta = cfg.get("rope_theta") or rs.get("rope_theta") or 10000.0
    n_heads = cfg["num_attention_heads"]
    eos = cfg.get("eos_token_id")
    return LlamaConfig(arch=fam, vocab_size=cfg["vocab_size"], dim=cfg["hidden_size"], n_layers=cfg["num_hidden_layers"], n_heads=n_heads,
                       n_kv_heads=cfg.get("num_key_value_heads") or n_heads, hidden_dim=cfg["intermediate_size"],
                       head_dim=cfg.get("head_dim") or cfg["hidden_size"] // n_heads, norm_eps=cfg.get("rms_norm_eps", 1e-6),
                       rope_theta=float(theta), rope_scaling=rs, max_context=cfg.get("max_position_embeddings", 2048),
                       tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
                       qkv_bias=fam == "qwen2" or bool(cfg.get("attention_bias", False)), qk_norm=fam == "qwen3",
                       bos_id=cfg.get("bos_token_id"), eos_ids=tuple(eos if isinstance(eos, list) else [] if eos is None else [eos]))

  @staticmethod
  def from_gguf(meta: dict[str, Any], where: str) -> "LlamaConfig":
    arch = meta.get("general.architecture")
    if arch not in ARCHS: raise UnsupportedModel(f"{where}: general.architecture {arch!r} is not supported; supported: {sorted(ARCHS)}")
    def g(k: str, default: Any = None) -> Any:
      v = meta.get(f"{arch}.{k}", default)
      if v is None: raise UnsupportedModel(f"{where}: metadata {arch}.{k} is missing")
      return v
    n_heads = int(g("attention.head_count"))
    dim = int(g("embedding_length"))
    rs: dict[str, Any] = {}
    if (t := meta.get(f"{arch}.rope.scaling.type")) and t != "none":
      rs = {"rope_type": t, "factor": float(meta.get(f"{arch}.rope.scaling.factor", 1.0)),
            "original_max_position_embeddings": int(meta.get(f"{arch}.rope.scaling.original_context_length", 0))}
    eos = meta.get("tokenizer.ggml.eos_token_id")
    return LlamaConfig(arch=arch, vocab_size=int(meta.get(f"{arch}.vocab_size") or len(meta.get("tokenizer.ggml.tokens") or [])),
                       dim=dim, n_layers=int(g("block_count")), n_heads=n_heads,
                       n_kv_heads=int(meta.get(f"{arch}.attention.head_count_kv") or n_heads), hidden_dim=int(g("feed_forward_length")),
                       head_dim=int(meta.get(f"{arch}.attention.key_length") or dim // n_heads),
                       norm_eps=float(g("attention.layer_norm_rms_epsilon", 1e-5)), rope_theta=float(meta.get(f"{arch}.rope.freq_base", 10000.0)),
                       rope_scaling=rs, max_context=int(meta.get(f"{arch}.context_length", 2048)), qkv_bias=arch == "qwen2",
                       qk_norm=arch == "qwen3", bos_id=meta.get("tokenizer.ggml.bos_token_id"), eos_ids=() if eos is None else (int(eos),))

  def inv_freq(self) -> list[float]:
    """RoPE's angular frequency per pair of dimensions, with the configured scaling (default, linear, llama3, yarn's
    frequency blend; dynamic NTK at its base length)."""
    d = self.head_dim
    base = [1.0 / (self.rope_theta ** (2 * i / d)) for i in range(d // 2)]
    if self.rope_freq_factors is not None:   # (the scaling itself, as llama.cpp's rope applies freq_factors)
      if len(self.rope_freq_factors) != d // 2:
        raise UnsupportedModel(f"rope_freqs has {len(self.rope_freq_factors)} factors, the head dimension {d} needs {d // 2}")
      return [x / ff for x, ff in zip(base, self.rope_freq_factors)]
    t = self.rope_scaling.get("rope_type") or self.rope_scaling.get("type") or "default"
    f = float(self.rope_scaling.get("factor", 1.0))
    if t in ("default", "dynamic"): return base
    if t == "linear": return [x / f for x in base]
    if t == "llama3":
      lo, hi = float(self.rope_scaling.get("low_freq_factor", 1.0)), float(self.rope_scaling.get("high_freq_factor", 4.0))
      old = float(self.rope_scaling.get("original_max_position_embeddings", 8192))
      out = []
      for x in base:
        wavelen = 2 * math.pi / x
        if wavelen < old / hi: out.append(x)
        elif wavelen > old / lo: out.append(x / f)
        else:
          s = (old / wavelen - lo) / (hi - lo)
          out.append((1 - s) * x / f + s * x)
      return out
    if t == "yarn":
      old = float(self.rope_scaling.get("original_max_position_embeddings", self.max_context))
      bf, bs = float(self.rope_scaling.get("beta_fast", 32.0)), float(self.rope_scaling.get("beta_slow", 1.0))
      def dim_of(rot: float) -> float: return d * math.log(old / (rot * 2 * math.pi)) / (2 * math.log(self.rope_theta))
      lo, hi = max(math.floor(dim_of(bf)), 0), min(math.ceil(dim_of(bs)), d - 1)
      out = []
      for i, x in enumerate(base):
        ramp = min(max((i - lo) / max(hi - lo, 1e-3), 0.0), 1.0)
        out.append(x / f * ramp + x * (1 - ramp))
      return out
    raise UnsupportedModel(f"rope scaling {t!r} is not supported (default, linear, dynamic, llama3, yarn)")

  def attention_factor(self) -> float:
    """yarn scales cos and sin by 0.1 ln(factor) + 1; the others by 1."""
    t = self.rope_scaling.get("rope_type") or self.rope_scaling.get("type")
    if t == "yarn":
      f = float(self.rope_scaling.get("factor", 1.0))
      return float(self.rope_scaling.get("attention_factor") or (0.1 * math.log(f) + 1.0 if f > 1 else 1.0))
    return 1.0
