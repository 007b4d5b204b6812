"""`load(path)`: a Llama-family model from a GGUF file or a Hugging Face folder (config.json + safetensors)."""
from __future__ import annotations
import glob, json, os
import numpy as np
from baregrad.ir.dtype import dtypes
from baregrad.tensor.tensor import Tensor
from baregrad.llm.config import LlamaConfig
from baregrad.llm.model import LlamaModel, Weight
from baregrad.llm.quant import BLOCKS, QuantizedWeight
from baregrad.llm.gguf_file import GGUFError, hf_name, read_gguf

def load(path: str | os.PathLike, device: str | None = None, max_context: int | None = None) -> LlamaModel:
  """A model from `path`: a .gguf file (weights stay in their block formats) or a folder with config.json and
  *.safetensors. `max_context` caps the KV cache (default: the model's context length)."""
  path = os.fspath(path)
  if os.path.isdir(path): m = _load_hf(path, device, max_context)
  elif path.endswith(".gguf") or _is_gguf(path): m = _load_gguf(path, device, max_context)
  else: raise ValueError(f"{path}: expected a .gguf file or a folder with config.json and *.safetensors")
  from baregrad.llm.tokenizer import Tokenizer
  try: m.tokenizer = Tokenizer.from_path(path)
  except FileNotFoundError: m.tokenizer = None
  return m

def _is_gguf(path: str) -> bool:
  with open(path, "rb") as f: return f.read(4) == b"GGUF"

def _load_hf(folder: str, device: str | None, max_context: int | None) -> LlamaModel:
  from baregrad.tensor.nn.state import safe_load
  cfg_path = os.path.join(folder, "config.json")
  if not os.path.exists(cfg_path): raise FileNotFoundError(f"{folder}: no config.json")
  with open(cfg_path) as f: cfg = LlamaConfig.from_hf(json.load(f), cfg_path)
  files = sorted(glob.glob(os.path.join(folder, "*.safetensors")))
  if not files: raise FileNotFoundError(f"{folder}: no *.safetensors files")
  weights: dict[str, Weight] = {}
  for fn in files: weights.update(safe_load(fn, device=device))
  return LlamaModel(cfg, weights, device, max_context)

def _unpermute(rows: np.ndarray, n_heads: int) -> np.ndarray:
  """Undo llama.cpp's converter's reordering of q and k rows (it stores each head's rotary pairs interleaved; the
  model here rotates halves, as Hugging Face's does): rows (n_heads * head_dim, ...) back to HF order. The rows of a
  block-quantized weight move whole, so this works on raw blocks too."""
  hd = rows.shape[0] // n_heads
  return rows.reshape(n_heads, hd // 2, 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)

def _load_gguf(path: str, device: str | None, max_context: int | None) -> LlamaModel:
  meta, tensors = read_gguf(path)
  cfg = LlamaConfig.from_gguf(meta, path)
  weights: dict[str, Weight] = {}
  if (rf := tensors.get("rope_freqs.weight")) is not None:
    if rf.kind != "F32": raise GGUFError(f"{path}: tensor 'rope_freqs.weight' at offset {rf.offset} is {rf.kind}, expected F32")
    cfg.rope_freq_factors = tuple(float(x) for x in np.asarray(rf.data, np.float32).reshape(-1))
  for name, t in tensors.items():
    hn = hf_name(name)
    if hn is None: continue
    data = np.asarray(t.data)
    if cfg.arch in ("llama", "mistral") and name.endswith(("attn_q.weight", "attn_k.weight")):
      data = _unpermute(data, cfg.n_heads if "attn_q" in name else cfg.n_kv_heads)
    if t.kind == "F32": weights[hn] = Tensor(np.ascontiguousarray(data, np.float32).reshape(t.shape), device=device)
    elif t.kind == "F16": weights[hn] = Tensor(np.ascontiguousarray(data).view(np.float16).reshape(t.shape), device=device)
    elif t.kind == "BF16":
      weights[hn] = Tensor(np.ascontiguousarray(data).view(np.uint16).reshape(t.shape), device=device).bitcast(dtypes.bfloat16)
    else:
      n, bs = BLOCKS[t.kind]
      rows, cols = (t.shape[0], t.shape[1]) if len(t.shape) == 2 else (1, t.shape[0])
      if cols % n: raise GGUFError(f"{path}: tensor {name!r} at offset {t.offset}: {cols} columns are not whole {t.kind} blocks of {n}")
      raw = np.ascontiguousarray(data, np.uint8).reshape(rows, cols // n, bs)
      weights[hn] = QuantizedWeight(t.kind, Tensor(raw, device=device).realize(), (rows, cols))
  if cfg.tie_embeddings is False and "lm_head.weight" not in weights: cfg.tie_embeddings = True   # (GGUF omits output.weight when tied)
  return LlamaModel(cfg, weights, device, max_context)
