#!/usr/bin/env python3
"""Language-model speed on this machine: prefill and decode tokens/s of baregrad.llm against transformers (PyTorch,
float32, eager) and llama.cpp (llama-cpp-python, if installed) on the same model, in one run.

  python bench/llm.py [--dim 768] [--layers 12] [--vocab 32000] [--prompt 128] [--new 32] [--threads 2] [--quant Q8_0]

The model is a Llama made here with random weights from a transformers config (no download; ~110M parameters by
default), saved as safetensors and written to GGUF (F32 and --quant) with the `gguf` package. Every timed run starts
from a fresh prompt (new random token ids). Ratios are reference time / baregrad time (> 1: baregrad is faster).
Not a timed test: numbers depend on the machine and its load."""
from __future__ import annotations
import argparse, json, os, pathlib, subprocess, sys, tempfile, time
import numpy as np
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--dim", type=int, default=768); p.add_argument("--layers", type=int, default=12); p.add_argument("--vocab", type=int, default=32000)
  p.add_argument("--prompt", type=int, default=128); p.add_argument("--new", type=int, default=32); p.add_argument("--threads", type=int, default=2)
  p.add_argument("--quant", default="Q8_0"); p.add_argument("--rounds", type=int, default=2)
  a = p.parse_args()
  import torch
  from transformers import LlamaConfig, LlamaForCausalLM
  from tests.llm.models import write_gguf
  import baregrad.llm
  torch.manual_seed(0); torch.set_num_threads(a.threads)
  cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=a.dim, intermediate_size=a.dim * 8 // 3 // 64 * 64, num_hidden_layers=a.layers,
                    num_attention_heads=a.dim // 64, num_key_value_heads=a.dim // 64 // 4 or 1, max_position_embeddings=a.prompt + a.new + 8)
  m = LlamaForCausalLM(cfg).eval()
  nparam = sum(x.numel() for x in m.parameters())
  d = tempfile.mkdtemp()
  m.save_pretrained(d)
  files = {"F32": os.path.join(d, "m-f32.gguf"), a.quant: os.path.join(d, f"m-{a.quant}.gguf")}
  for q, f in files.items(): write_gguf(m, f, q)
  rng = np.random.default_rng(1)
  def prompt() -> list[int]: return [int(x) for x in rng.integers(3, a.vocab, a.prompt)]
  rows = []
  def timed(name: str, run) -> None:
    print(f"  timing {name} ...", file=sys.stderr, flush=True)
    run(prompt()); run(prompt())   # warm: compiles, captures (transformers: its first generate() calls are slow)
    pre, dec = [], []
    for _ in range(a.rounds):
      tp, td = run(prompt())
      pre.append(a.prompt / tp); dec.append((a.new - 1) / td)
    rows.append((name, float(np.median(pre)), float(np.median(dec))))
  def bg(path: str):
    bm = baregrad.llm.load(path, max_context=a.prompt + a.new + 8)
    def run(ids: list[int]) -> tuple[float, float]:
      t0 = time.perf_counter(); it = bm.stream(ids, max_new_tokens=a.new, stop=()); next(it); t1 = time.perf_counter()
      for _ in it: pass
      return t1 - t0, time.perf_counter() - t1
    return run
  def hf(ids: list[int]) -> tuple[float, float]:
    # prefill: one forward over the prompt; decode: generate()'s time (its own KV cache) less that prefill
    with torch.no_grad():
      x = torch.tensor([ids])
      t0 = time.perf_counter(); m(x); t1 = time.perf_counter()
      m.generate(x, max_new_tokens=a.new, min_new_tokens=a.new, do_sample=False, pad_token_id=0); t2 = time.perf_counter()
      return t1 - t0, max(t2 - t1 - (t1 - t0), 1e-9)
  timed("baregrad GGUF F32", bg(files["F32"]))
  timed(f"baregrad GGUF {a.quant}", bg(files[a.quant]))
  timed("transformers float32 eager", hf)
  # llama.cpp in a child process per file: a crash there (some builds fault on some CPUs) costs its row, not the run
  try:
    import llama_cpp  # noqa: F401
    for q in ("F32", a.quant):
      # (llama-cpp-python 0.3.36's CPU build faults on a batched Q8_0 prompt here; one token per batch still decodes
      # as it always does, so its decode figure stands, its prefill is then token by token and says so)
      for nb in (512, 1):
        r = subprocess.run([sys.executable, __file__, "--llamacpp-child", files[q], str(a.prompt), str(a.new), str(a.threads), str(a.rounds),
                            str(a.vocab), str(nb)], capture_output=True, text=True, timeout=1800)
        if r.returncode == 0: break
        print(f"(llama.cpp {q} with n_batch={nb}: the child process failed, exit status {r.returncode})")
      if r.returncode != 0: continue
      pf, dc = json.loads(r.stdout.strip().splitlines()[-1])
      rows.append((f"llama.cpp {q}" + ("" if nb > 1 else " (n_batch=1)"), pf, dc))
  except ImportError: print("(llama-cpp-python not installed: no llama.cpp rows)")
  print(f"Llama {nparam / 1e6:.0f}M parameters (dim {a.dim}, {a.layers} layers, vocab {a.vocab}), prompt {a.prompt}, {a.new} new tokens, "
        f"{a.threads} threads; tokens/s (median of {a.rounds})")
  base = {n: (pf, dc) for n, pf, dc in rows}
  b32, bq = base["baregrad GGUF F32"], base[f"baregrad GGUF {a.quant}"]
  print(f"{'':30s} {'prefill':>9s} {'decode':>9s}   decode ratio vs baregrad F32 / {a.quant}")
  for n, pf, dc in rows: print(f"{n:30s} {pf:9.1f} {dc:9.2f}   {b32[1] / dc:6.2f}x / {bq[1] / dc:6.2f}x")

def llamacpp_child(path: str, prompt: int, new: int, threads: int, rounds: int, vocab: int, n_batch: int) -> None:
  """Time llama.cpp on one file as the main run times the others; prints [prefill tok/s, decode tok/s] (medians)."""
  from llama_cpp import Llama
  ll = Llama(path, n_ctx=prompt + new + 8, n_threads=threads, n_batch=n_batch, verbose=False)
  rng = np.random.default_rng(1)
  pre, dec = [], []
  for r in range(rounds + 2):   # (the first two warm it, as the main run's)
    ids = [int(x) for x in rng.integers(3, vocab, prompt)]
    ll.reset(); t0 = time.perf_counter(); ll.eval(ids); t1 = time.perf_counter()
    for _ in range(new - 1):   # (the last token's logits: at its position, or in row 0 where scores hold one batch of one)
      ll.eval([int(np.argmax(ll.scores[ll.n_tokens - 1 if ll.scores.shape[0] > 1 else 0]))])
    t2 = time.perf_counter()
    if r >= 2: pre.append(prompt / (t1 - t0)); dec.append((new - 1) / (t2 - t1))
  print(json.dumps([float(np.median(pre)), float(np.median(dec))]))

if __name__ == "__main__":
  if len(sys.argv) > 1 and sys.argv[1] == "--llamacpp-child": llamacpp_child(sys.argv[2], *map(int, sys.argv[3:9]))
  else: main()
