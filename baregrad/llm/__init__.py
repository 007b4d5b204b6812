"""Language models: the Llama family from GGUF (quantized weights stay quantized) or a Hugging Face folder, with a
KV cache the jit replays, tokenizers, a CLI and an OpenAI-compatible server (`python3 -m baregrad.llm`).

    m = baregrad.llm.load("model.gguf")
    ids = m.tokenizer.encode("Once upon a time")
    print(m.tokenizer.decode(m.generate(ids, max_new_tokens=32)))"""
from baregrad.llm.config import LlamaConfig, UnsupportedModel
from baregrad.llm.gguf_file import GGUFError, read_gguf
from baregrad.llm.quant import QuantizedWeight, dequantize, linear
from baregrad.llm.model import LlamaModel
from baregrad.llm.load import load
from baregrad.llm.tokenizer import Tokenizer

__all__ = ["load", "LlamaModel", "LlamaConfig", "UnsupportedModel", "GGUFError", "read_gguf", "QuantizedWeight", "dequantize", "linear", "Tokenizer"]
