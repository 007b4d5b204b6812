"""baregrad.llm against transformers and the gguf package on models the tests make: quantized blocks, logits,
greedy generation, the decode step's single capture, tokenizers, the server, and refused inputs."""
from __future__ import annotations
import json, threading, urllib.error, urllib.request
import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
import baregrad.llm
from baregrad import Tensor
from baregrad.llm.quant import BLOCKS, QuantizedWeight, dequantize, linear
from tests.llm.models import VOCAB, PIECES, hf_model, save_hf, with_weights, write_gguf

Q = gguf.GGMLQuantizationType
IDS = [1, 30, 40, 50, 60, 70, 80, 90, 100, 110, 5]

def _raw(kind: str, r: int, k: int, rng: np.random.Generator) -> np.ndarray:
  """Blocks of `kind`: quantized by gguf where it can (Q8_0, Q4_0), else random bytes with sane half scales."""
  n, bs = BLOCKS[kind]
  if kind in ("Q8_0", "Q4_0"): return gguf.quantize(rng.standard_normal((r, k)).astype(np.float32), getattr(Q, kind))
  b = rng.integers(0, 256, (r, k // n, bs), dtype=np.uint8)
  def half() -> np.ndarray: return (rng.standard_normal((r, k // n)) * 0.05).astype(np.float16).view(np.uint8).reshape(r, k // n, 2)
  if kind == "Q4_K": b[..., 0:2], b[..., 2:4] = half(), half()
  else: b[..., 208:210] = half()
  return b.reshape(r, -1)

@pytest.mark.parametrize("kind", sorted(BLOCKS))
def test_dequantize_equals_gguf_and_stays_in_the_matmul(kind):
  rng = np.random.default_rng(1)
  r, k = 48, 512
  raw = _raw(kind, r, k, rng)
  ref = gguf.dequantize(raw, getattr(Q, kind))
  n, bs = BLOCKS[kind]
  w = QuantizedWeight(kind, Tensor(raw.reshape(r, k // n, bs)).realize(), (r, k))
  np.testing.assert_array_equal(dequantize(w).numpy(), ref)
  x = rng.standard_normal((3, k)).astype(np.float32)
  y = linear(Tensor(x), w)
  np.testing.assert_allclose(y.numpy(), x @ ref.T, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
  # no buffer of the schedule is a float copy of the whole weight: the blocks are read inside the matmul's kernel
  assert all(b.size < r * k for it in linear(Tensor(x), w).schedule() for b in it.bufs[:1]), [it.bufs[0].size for it in y.schedule()]

@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3"])
def test_hf_folder_logits_and_greedy_tokens_match_transformers(kind, tmp_path):
  m = hf_model(kind, tie=kind == "qwen2")
  bm = baregrad.llm.load(save_hf(m, str(tmp_path)))
  with torch.no_grad(): ref = m(torch.tensor([IDS])).logits[0].numpy()
  got = bm.logits(IDS).numpy()
  assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max()
  n = 32 if kind == "llama" else 12
  with torch.no_grad(): want = m.generate(torch.tensor([IDS]), max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0)[0, len(IDS):].tolist()
  assert bm.generate(IDS, max_new_tokens=n, stop=()) == want
  # the decode step has the same shapes at every position: captured once, replayed for every new token
  assert len(bm._step.captured) == 1

def test_decode_compiles_and_captures_once_over_100_positions(tmp_path):
  """The decode step's position is a bound variable (ir/sint.py): the cache's valid prefix is a symbolic size, so the
  step's kernels compile once and the jit captures it once, whatever the position."""
  from baregrad.engine import runner
  from baregrad import knobs
  if not knobs.get("JIT"): pytest.skip("counts the jit's captures (JIT=0)")
  m = hf_model("llama", layers=1)
  bm = baregrad.llm.load(save_hf(m, str(tmp_path)))
  compiled = []
  toks = []
  for t in bm.stream(IDS[:4], max_new_tokens=101, stop=()):
    toks.append(t)
    compiled.append(len(runner._cache))
  assert len(toks) == 101 and len(bm._step.captured) == 1
  assert list(bm._step.calls.values()) == [2]          # run eagerly once, captured once: 98 replays after
  assert compiled[3:] == compiled[2:-1], f"kernels compiled during decode: {compiled}"
  with torch.no_grad(): want = m.generate(torch.tensor([IDS[:4]]), max_new_tokens=101, do_sample=False, eos_token_id=None, pad_token_id=0)[0, 4:].tolist()
  assert toks == want

@pytest.mark.parametrize("qtype", ["F32", "F16", "Q8_0", "Q4_0"])
def test_gguf_logits_match_transformers_on_the_weights_the_file_holds(qtype, tmp_path):
  m = hf_model("llama")
  path = str(tmp_path / f"m-{qtype}.gguf")
  ref_m = with_weights(m, write_gguf(m, path, qtype))
  bm = baregrad.llm.load(path)
  if qtype.startswith("Q"): assert isinstance(bm.w["model.layers.0.mlp.up_proj.weight"], QuantizedWeight)
  with torch.no_grad(): ref = ref_m(torch.tensor([IDS])).logits[0].numpy()
  assert np.abs(bm.logits(IDS).numpy() - ref).max() <= 1e-4 * np.abs(ref).max()
  with torch.no_grad(): want = ref_m.generate(torch.tensor([IDS]), max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0)[0, len(IDS):].tolist()
  assert bm.generate(IDS, max_new_tokens=8, stop=()) == want

def test_gguf_rope_freqs_scales_as_llama3(tmp_path):
  """A Llama 3.1 GGUF carries its rope scaling as a rope_freqs tensor (llama.cpp's converter), not as metadata: the
  frequencies are divided by it (ignoring it would give silently wrong logits)."""
  m = hf_model("llama", rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 32})
  path = str(tmp_path / "m.gguf")
  ref_m = with_weights(m, write_gguf(m, path))
  bm = baregrad.llm.load(path)
  assert bm.cfg.rope_freq_factors is not None and max(bm.cfg.rope_freq_factors) == 8.0
  with torch.no_grad(): ref = ref_m(torch.tensor([IDS])).logits[0].numpy()
  assert np.abs(bm.logits(IDS).numpy() - ref).max() <= 1e-4 * np.abs(ref).max()

def test_sampling_is_seeded(tmp_path):
  bm = baregrad.llm.load(save_hf(hf_model("llama"), str(tmp_path)))
  a = bm.generate(IDS, max_new_tokens=6, temperature=0.8, top_k=20, top_p=0.9, seed=7, stop=())
  assert a == bm.generate(IDS, max_new_tokens=6, temperature=0.8, top_k=20, top_p=0.9, seed=7, stop=()) and len(a) == 6
  assert list(bm.stream(IDS, max_new_tokens=3, stop=())) == bm.generate(IDS, max_new_tokens=3, stop=())

def test_gguf_sentencepiece_tokenizer_round_trips(tmp_path):
  path = str(tmp_path / "m.gguf")
  write_gguf(hf_model("llama", layers=1), path, "F32")
  tok = baregrad.llm.Tokenizer.from_path(path)
  for text in ["the cat sat on the mat", "a cat", "th\u00e9 \u732b!"]:   # (unknown characters go as UTF-8 bytes)
    ids = tok.encode(text)
    assert ids[0] == 1 and tok.decode(ids) == text
  toks = VOCAB + PIECES
  assert [toks[i] for i in tok.encode("the cat", bos=False)] == ["\u2581the", "\u2581cat"]   # whole pieces where the vocabulary has them

def test_hf_tokenizer_json_round_trips(tmp_path):
  from tokenizers import Tokenizer as HFT, models, pre_tokenizers, decoders, trainers
  t = HFT(models.BPE())
  t.pre_tokenizer, t.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
  t.train_from_iterator(["the cat sat on the mat", "a dog ran"] * 20, trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
  t.save(str(tmp_path / "tokenizer.json"))
  tok = baregrad.llm.Tokenizer.from_hf(str(tmp_path / "tokenizer.json"))
  for text in ["the cat sat", "unseen words \u00e9 too"]: assert tok.decode(tok.encode(text)) == text

def test_bad_files_and_lengths_are_refused_by_name(tmp_path):
  m = hf_model("llama", layers=1)
  good = str(tmp_path / "m.gguf")
  write_gguf(m, good, "F32")
  data = open(good, "rb").read()
  cut = str(tmp_path / "cut.gguf")
  open(cut, "wb").write(data[:len(data) - 1000])
  with pytest.raises(baregrad.llm.GGUFError, match=r"cut.gguf.*(truncated|not a readable GGUF)"): baregrad.llm.load(cut)
  odd = str(tmp_path / "q5.gguf")
  w = gguf.GGUFWriter(odd, "llama")
  x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
  w.add_tensor("token_embd.weight", gguf.quantize(x, Q.Q5_0), raw_dtype=Q.Q5_0)
  w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
  with pytest.raises(baregrad.llm.GGUFError, match=r"token_embd.weight.*offset \d+.*type Q5_0"): baregrad.llm.read_gguf(odd)
  arch = str(tmp_path / "gpt2.gguf")
  w = gguf.GGUFWriter(arch, "gpt2")
  w.add_tensor("token_embd.weight", x)
  w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
  with pytest.raises(baregrad.llm.UnsupportedModel, match=r"gpt2.gguf.*'gpt2' is not supported"): baregrad.llm.load(arch)
  bm = baregrad.llm.load(good, max_context=16)
  with pytest.raises(ValueError, match=r"of 20 tokens is longer than the context of 16 tokens"): bm.logits(list(range(3, 23)))

def _post(url: str, body: bytes) -> tuple[int, dict]:
  req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
  try:
    with urllib.request.urlopen(req, timeout=60) as r: return r.status, json.loads(r.read())
  except urllib.error.HTTPError as e: return e.code, json.loads(e.read())

def test_openai_server_answers_streams_and_refuses_bad_requests(tmp_path):
  pytest.importorskip("aiohttp")
  from baregrad.llm.server import LLMServer
  path = str(tmp_path / "m.gguf")
  write_gguf(hf_model("llama", layers=1), path, "Q8_0")
  bm = baregrad.llm.load(path, max_context=64)
  s = LLMServer(bm, name="tiny", port=0).start()
  base = f"http://127.0.0.1:{s.port}/v1"
  try:
    assert s.host == "127.0.0.1"
    with urllib.request.urlopen(base + "/models", timeout=30) as r: assert json.loads(r.read())["data"][0]["id"] == "tiny"
    want = bm.tokenizer.decode(bm.generate(bm.tokenizer.encode("the cat"), max_new_tokens=5, stop=()))
    code, out = _post(base + "/completions", json.dumps({"prompt": "the cat", "max_tokens": 5, "temperature": 0}).encode())
    assert code == 200 and out["object"] == "text_completion" and out["usage"]["completion_tokens"] >= 1
    assert want.startswith(out["choices"][0]["text"])
    code, out = _post(base + "/chat/completions", json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}).encode())
    assert code == 200 and out["choices"][0]["message"]["role"] == "assistant"
    # streamed: server-sent events ending with [DONE]; the pieces add up to the text of the same request unstreamed
    req = urllib.request.Request(base + "/completions", data=json.dumps({"prompt": "the cat", "max_tokens": 5, "temperature": 0, "stream": True}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
      assert r.headers["Content-Type"].startswith("text/event-stream")
      events = [l[6:] for l in r.read().decode().split("\n") if l.startswith("data: ")]
    assert events[-1] == "[DONE]"
    plain = _post(base + "/completions", json.dumps({"prompt": "the cat", "max_tokens": 5, "temperature": 0}).encode())[1]["choices"][0]["text"]
    assert "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1]) == plain, (events, plain)
    # bad requests: 400 with a JSON error naming the problem; the server goes on serving
    assert _post(base + "/completions", b"{not json")[0] == 400
    code, out = _post(base + "/completions", json.dumps({"prompt": 5}).encode())
    assert code == 400 and "prompt must be a string" in out["error"]["message"]
    code, out = _post(base + "/completions", json.dumps({"prompt": "the cat " * 40, "max_tokens": 4}).encode())
    assert code == 400 and "do not fit the context of 64 tokens" in out["error"]["message"] and "tokens and max_tokens 4" in out["error"]["message"]
    # requests that arrive together are queued, none lost
    results: list[int] = []
    def one() -> None: results.append(_post(base + "/completions", json.dumps({"prompt": "a cat", "max_tokens": 3}).encode())[0])
    ts = [threading.Thread(target=one) for _ in range(4)]
    for t in ts: t.start()
    for t in ts: t.join(120)
    assert results == [200] * 4
    with pytest.raises(urllib.error.HTTPError) as e: urllib.request.urlopen(base + "/nothing", timeout=30)
    assert e.value.code == 404
  finally: s.stop()

def test_cli_prints_text_and_speed(tmp_path, capsys):
  from baregrad.llm.__main__ import main
  path = str(tmp_path / "m.gguf")
  write_gguf(hf_model("llama", layers=1), path, "F16")
  assert main([path, "--prompt", "the cat", "--max-tokens", "4"]) == 0
  cap = capsys.readouterr()
  assert cap.out.startswith("the cat") and "tok/s decode" in cap.err
  assert main([path, "--prompt", "the cat " * 80, "--context", "32"]) == 2
  assert "longer than the context of 32 tokens" in capsys.readouterr().err
