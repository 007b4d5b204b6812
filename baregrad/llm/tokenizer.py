"""Tokenizers: a Hugging Face tokenizer.json through the `tokenizers` library, or the vocabulary in a GGUF file's
metadata (byte-level BPE of GPT-2 / Llama 3 / Qwen through `tokenizers` built from the vocabulary and merges;
SentencePiece's score-ordered merges with byte fallback for Llama 1/2 and Mistral, done here)."""
from __future__ import annotations
import heapq, json, os
from typing import Any

class Tokenizer:
  """encode(text) -> ids, decode(ids) -> text, special token ids, and the chat template when the model has one."""
  def __init__(self, encode_fn: Any, decode_fn: Any, bos_id: int | None, eos_id: int | None, chat_template: str | None, add_bos: bool):
    self._enc, self._dec = encode_fn, decode_fn
    self.bos_id, self.eos_id, self.chat_template, self.add_bos = bos_id, eos_id, chat_template, add_bos

  def encode(self, text: str, bos: bool | None = None) -> list[int]:
    ids = self._enc(text)
    if (self.add_bos if bos is None else bos) and self.bos_id is not None and (not ids or ids[0] != self.bos_id): ids = [self.bos_id] + ids
    return ids

  def decode(self, ids: Any) -> str: return self._dec([int(i) for i in ids])

  def apply_chat_template(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
    """The prompt text of a chat (jinja2 renders the model's own template; without one, 'role: content' lines)."""
    if self.chat_template:
      try:
        import jinja2
        env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
        def raise_exception(msg: str) -> None: raise ValueError(f"chat template: {msg}")
        return env.from_string(self.chat_template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                                           bos_token="", eos_token="", raise_exception=raise_exception)
      except ImportError: pass
    return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + ("assistant: " if add_generation_prompt else "")

  @staticmethod
  def from_path(path: str) -> "Tokenizer":
    if os.path.isdir(path):
      tj = os.path.join(path, "tokenizer.json")
      if not os.path.exists(tj): raise FileNotFoundError(f"{path}: no tokenizer.json")
      return Tokenizer.from_hf(tj)
    from baregrad.llm.gguf_file import read_gguf
    return Tokenizer.from_gguf(read_gguf(path)[0])

  @staticmethod
  def from_hf(tokenizer_json: str) -> "Tokenizer":
    from tokenizers import Tokenizer as HFT
    t = HFT.from_file(tokenizer_json)
    cfg: dict[str, Any] = {}
    tc = os.path.join(os.path.dirname(tokenizer_json), "tokenizer_config.json")
    if os.path.exists(tc):
      with open(tc) as f: cfg = json.load(f)
    def tid(k: str) -> int | None:
      v = cfg.get(k)
      if isinstance(v, dict): v = v.get("content")
      return t.token_to_id(v) if isinstance(v, str) else None
    return Tokenizer(lambda s: t.encode(s, add_special_tokens=False).ids, lambda ids: t.decode(ids, skip_special_tokens=True),
                     tid("bos_token"), tid("eos_token"), cfg.get("chat_template") if isinstance(cfg.get("chat_template"), str) else None,
                     bool(cfg.get("add_bos_token", False)))

  @staticmethod
  def from_gguf(meta: dict[str, Any]) -> "Tokenizer":
    model = meta.get("tokenizer.ggml.model")
    tokens = meta.get("tokenizer.ggml.tokens")
    if not tokens: raise FileNotFoundError("GGUF metadata has no tokenizer.ggml.tokens")
    bos, eos = meta.get("tokenizer.ggml.bos_token_id"), meta.get("tokenizer.ggml.eos_token_id")
    tmpl = meta.get("tokenizer.chat_template")
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", model == "llama"))
    if model == "gpt2":
      from tokenizers import Tokenizer as HFT, models, pre_tokenizers, decoders
      merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges") or []]
      t = HFT(models.BPE({s: i for i, s in enumerate(tokens)}, merges))
      t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
      t.decoder = decoders.ByteLevel()
      return Tokenizer(lambda s: t.encode(s).ids, lambda ids: t.decode(ids), bos, eos, tmpl, add_bos)
    if model == "llama":
      spm = _SentencePiece(tokens, meta.get("tokenizer.ggml.scores") or [0.0] * len(tokens), meta.get("tokenizer.ggml.token_type") or [1] * len(tokens),
                           bool(meta.get("tokenizer.ggml.add_space_prefix", True)))
      return Tokenizer(spm.encode, spm.decode, bos, eos, tmpl, add_bos)
    raise ValueError(f"GGUF tokenizer.ggml.model {model!r} is not supported (gpt2, llama)")

class _SentencePiece:
  """SentencePiece BPE as GGUF stores it: pieces with scores; the adjacent pair whose joined piece has the highest
  score merges first; characters without a piece fall back to their UTF-8 bytes as <0xXX> pieces."""
  SPACE = "\u2581"
  def __init__(self, tokens: list[str], scores: list[float], types: list[int], space_prefix: bool):
    self.tokens, self.scores, self.space_prefix = tokens, [float(s) for s in scores], space_prefix
    self.ids = {t: i for i, t in enumerate(tokens)}
    self.byte_ids = {i: self.ids.get(f"<0x{i:02X}>") for i in range(256)}
    self.control = {i for i, ty in enumerate(types) if int(ty) == 3}   # CONTROL pieces (<s>, </s>) are not rendered

  def encode(self, text: str) -> list[int]:
    if not text: return []
    s = (self.SPACE if self.space_prefix and not text.startswith(" ") else "") + text.replace(" ", self.SPACE)
    syms = list(s)
    prev, nxt = list(range(-1, len(syms) - 1)), list(range(1, len(syms) + 1))
    alive = [True] * len(syms)
    heap: list[tuple[float, int, int, str]] = []
    def push(i: int) -> None:
      j = nxt[i]
      if j < len(syms) and (tid := self.ids.get(syms[i] + syms[j])) is not None: heapq.heappush(heap, (-self.scores[tid], i, j, syms[i] + syms[j]))
    for i in range(len(syms) - 1): push(i)
    while heap:
      _, i, j, joined = heapq.heappop(heap)
      if not (alive[i] and alive[j]) or nxt[i] != j or syms[i] + syms[j] != joined: continue
      syms[i], alive[j] = joined, False
      nxt[i] = nxt[j]
      if nxt[j] < len(syms): prev[nxt[j]] = i
      if prev[i] >= 0: push(prev[i])
      push(i)
    out: list[int] = []
    for i, sym in enumerate(syms):
      if not alive[i]: continue
      if (tid := self.ids.get(sym)) is not None: out.append(tid)
      else:
        for b in sym.encode("utf-8"):
          if (bid := self.byte_ids.get(b)) is None: raise ValueError(f"tokenizer: no piece for {sym!r} and no byte piece <0x{b:02X}>")
          out.append(bid)
    return out

  def decode(self, ids: list[int]) -> str:
    buf = bytearray()
    for i in ids:
      if i in self.control or not 0 <= i < len(self.tokens): continue
      t = self.tokens[i]
      if len(t) == 6 and t.startswith("<0x") and t.endswith(">"): buf.append(int(t[3:5], 16))
      else: buf += t.replace(self.SPACE, " ").encode("utf-8")
    text = buf.decode("utf-8", errors="replace")
    return text[1:] if self.space_prefix and text.startswith(" ") else text
