"""python3 -m baregrad.llm MODEL --prompt "..." [--max-tokens N] [--temperature T]   (prints the text and tokens/s)
python3 -m baregrad.llm MODEL --serve [--host 127.0.0.1] [--port 8000]             (an OpenAI-compatible server)"""
from __future__ import annotations
import argparse, sys, time

def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(prog="python3 -m baregrad.llm", description="run a Llama-family model (GGUF file or Hugging Face folder)")
  p.add_argument("model")
  p.add_argument("--prompt")
  p.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
  p.add_argument("--max-tokens", type=int, default=64)
  p.add_argument("--temperature", type=float, default=0.0)
  p.add_argument("--top-k", type=int)
  p.add_argument("--top-p", type=float)
  p.add_argument("--seed", type=int)
  p.add_argument("--context", type=int, help="KV cache length (default: the model's context)")
  p.add_argument("--device")
  p.add_argument("--serve", action="store_true")
  p.add_argument("--host", default="127.0.0.1")
  p.add_argument("--port", type=int, default=8000)
  a = p.parse_args(argv)
  if not a.serve and a.prompt is None: p.error("give --prompt TEXT or --serve")
  from baregrad.llm import load
  m = load(a.model, device=a.device, max_context=a.context)
  if m.tokenizer is None:
    print(f"{a.model}: no tokenizer (tokenizer.json or GGUF tokenizer metadata)", file=sys.stderr); return 2
  if a.serve:
    from baregrad.llm.server import LLMServer
    s = LLMServer(m, name=a.model, host=a.host, port=a.port).start()
    print(f"serving {a.model} on http://{s.host}:{s.port}/v1 (Ctrl-C stops)", flush=True)
    try:
      while True: time.sleep(3600)
    except KeyboardInterrupt: s.stop()
    return 0
  text = m.tokenizer.apply_chat_template([{"role": "user", "content": a.prompt}]) if a.chat else a.prompt
  ids = m.tokenizer.encode(text)
  if len(ids) > m.max_context:
    print(f"the prompt of {len(ids)} tokens is longer than the context of {m.max_context} tokens", file=sys.stderr); return 2
  t0, first, out = time.perf_counter(), None, []
  for t in m.stream(ids, max_new_tokens=a.max_tokens, temperature=a.temperature, top_k=a.top_k, top_p=a.top_p, seed=a.seed):
    if first is None: first = time.perf_counter()
    out.append(t)
  t1 = time.perf_counter()
  print(a.prompt + m.tokenizer.decode(out))
  dec = (len(out) - 1) / (t1 - first) if first is not None and len(out) > 1 and t1 > first else 0.0
  print(f"\n{len(ids)} prompt tokens in {(first or t1) - t0:.2f} s ({len(ids) / max((first or t1) - t0, 1e-9):.1f} tok/s), "
        f"{len(out)} new tokens ({dec:.1f} tok/s decode)", file=sys.stderr)
  return 0

if __name__ == "__main__": sys.exit(main())
