"""GGUF files read with the `gguf` package (llama.cpp's own reader: metadata and tensor data as NumPy memory maps),
checked before use: a truncated file, a tensor type without a layout here, or an architecture this runner does not
implement is refused naming the file, the tensor and the offset.

Why the package and not a reader of our own: it is maintained with the format by the people who define it (new
metadata types, alignment rules, endianness), and it already hands out the data as memory maps, which is what a
reader of our own would do."""
from __future__ import annotations
import os
from dataclasses import dataclass
from typing import Any
import numpy as np

class GGUFError(ValueError):
  """A GGUF file this runner cannot use, with the file and what is wrong."""

# tensor types with a layout here (quant.py), by the names of the gguf package's GGMLQuantizationType
PLAIN = {"F32": np.float32, "F16": np.float16, "BF16": None}
QUANT = ("Q8_0", "Q4_0", "Q4_K", "Q6_K")

@dataclass
class GGUFTensor:
  name: str
  kind: str                    # F32, F16, BF16, Q8_0, ...
  shape: tuple[int, ...]       # NumPy order (rows first): ggml's ne reversed
  data: np.ndarray             # F32/F16: the values; BF16 and the block formats: raw bytes (rows, bytes per row)
  offset: int                  # where its data starts in the file

def _value(f: Any) -> Any:
  try: return f.contents()
  except Exception:   # (an older package without contents(): the last part is the value)
    v = f.parts[f.data[0]] if f.data else None
    return bytes(v).decode() if v is not None and getattr(v, "dtype", None) == np.uint8 else (v.tolist()[0] if v is not None else None)

def read_gguf(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, GGUFTensor]]:
  """(metadata by key, tensors by name) of a GGUF file."""
  try: import gguf
  except ImportError as e: raise ImportError("reading GGUF files needs the gguf package: pip install 'baregrad[llm]'") from e
  path = os.fspath(path)
  size = os.path.getsize(path)
  try: r = gguf.GGUFReader(path)
  except (ValueError, IndexError, KeyError, OSError, EOFError) as e:
    raise GGUFError(f"{path}: not a readable GGUF file ({size} bytes): {type(e).__name__}: {e}") from None
  meta: dict[str, Any] = {}
  for k, f in r.fields.items():
    if k.startswith("GGUF."): continue
    try: meta[k] = _value(f)
    except Exception as e: raise GGUFError(f"{path}: metadata {k!r} at offset {f.offset} cannot be read: {e}") from None
  tensors: dict[str, GGUFTensor] = {}
  for t in r.tensors:
    kind = t.tensor_type.name
    end = int(t.data_offset) + int(t.n_bytes)
    if end > size:
      raise GGUFError(f"{path}: tensor {t.name!r} ({kind}, {int(t.n_bytes)} bytes at offset {int(t.data_offset)}) runs past the end of the file "
                      f"({size} bytes): the file is truncated")
    if kind not in PLAIN and kind not in QUANT:
      raise GGUFError(f"{path}: tensor {t.name!r} at offset {int(t.data_offset)} has type {kind}; supported: {', '.join(list(PLAIN) + list(QUANT))}")
    shape = tuple(int(x) for x in reversed(t.shape.tolist()))
    tensors[t.name] = GGUFTensor(t.name, kind, shape, t.data, int(t.data_offset))
  return meta, tensors

# GGUF tensor names of the llama family -> Hugging Face names
_LAYER = {"attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
          "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight", "attn_v.weight": "self_attn.v_proj.weight",
          "attn_output.weight": "self_attn.o_proj.weight", "attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias",
          "attn_v.bias": "self_attn.v_proj.bias", "attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight",
          "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight", "ffn_down.weight": "mlp.down_proj.weight"}
_TOP = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}

def hf_name(name: str) -> str | None:
  """The Hugging Face name of a llama-family GGUF tensor (None: not one the model uses, e.g. rope_freqs)."""
  if name in _TOP: return _TOP[name]
  if name.startswith("blk."):
    _, i, rest = name.split(".", 2)
    if rest in _LAYER: return f"model.layers.{i}.{_LAYER[rest]}"
  return None
