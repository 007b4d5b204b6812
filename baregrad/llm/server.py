"""An OpenAI-compatible HTTP server for a loaded model, on aiohttp (a maintained asyncio HTTP server with streaming
responses, what server-sent events need): /v1/models, /v1/completions and /v1/chat/completions, streamed with
`"stream": true`. Requests are queued and run one at a time on one worker thread (the model holds one KV cache);
none is dropped. Bad requests get HTTP 400 with a JSON error body naming what was wrong; the server keeps serving."""
from __future__ import annotations
import asyncio, json, threading, time, uuid
from typing import Any, Iterator

class BadRequest(ValueError): pass

def _num(body: dict, key: str, default: Any, kind: type, lo: float | None = None, hi: float | None = None) -> Any:
  v = body.get(key, default)
  if v is None: return default
  if kind is int and (isinstance(v, bool) or not isinstance(v, int)): raise BadRequest(f"{key} must be an integer, got {v!r}")
  if kind is float and (isinstance(v, bool) or not isinstance(v, (int, float))): raise BadRequest(f"{key} must be a number, got {v!r}")
  if (lo is not None and v < lo) or (hi is not None and v > hi): raise BadRequest(f"{key} must be in [{lo}, {hi}], got {v!r}")
  return kind(v)

class LLMServer:
  """Serve `model` (with its tokenizer) on host:port; `start()` runs it on a thread, `stop()` ends it."""
  def __init__(self, model: Any, name: str = "baregrad", host: str = "127.0.0.1", port: int = 8000):
    if getattr(model, "tokenizer", None) is None: raise ValueError("the model has no tokenizer (tokenizer.json or GGUF tokenizer metadata)")
    self.model, self.name, self.host, self.port = model, name, host, port
    self.lock = threading.Lock()        # one generation at a time: requests wait their turn
    self.loop: asyncio.AbstractEventLoop | None = None
    self.thread: threading.Thread | None = None
    self.ready = threading.Event()
    self.runner: Any = None

  # ---------------------------------------------------------------- requests
  def _params(self, body: Any, chat: bool) -> tuple[list[int], dict[str, Any], bool]:
    if not isinstance(body, dict): raise BadRequest("the request body must be a JSON object")
    tok = self.model.tokenizer
    if chat:
      msgs = body.get("messages")
      if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                                                        for m in msgs):
        raise BadRequest("messages must be a non-empty list of {role, content} objects with string values")
      prompt = tok.apply_chat_template(msgs)
    else:
      prompt = body.get("prompt")
      if not isinstance(prompt, str): raise BadRequest(f"prompt must be a string, got {type(prompt).__name__}")
    ids = tok.encode(prompt)
    kw = dict(max_new_tokens=_num(body, "max_tokens", 16, int, 0, 1 << 20), temperature=_num(body, "temperature", 1.0, float, 0.0, 100.0),
              top_p=_num(body, "top_p", None, float, 0.0, 1.0), top_k=_num(body, "top_k", None, int, 0, None), seed=_num(body, "seed", None, int, 0, None))
    ctx = self.model.max_context
    if len(ids) + max(kw["max_new_tokens"] - 1, 0) > ctx:
      raise BadRequest(f"the prompt of {len(ids)} tokens and max_tokens {kw['max_new_tokens']} do not fit the context of {ctx} tokens")
    stream = body.get("stream", False)
    if not isinstance(stream, bool): raise BadRequest(f"stream must be true or false, got {stream!r}")
    return ids, kw, stream

  def _tokens(self, ids: list[int], kw: dict[str, Any]) -> Iterator[int]:
    with self.lock: yield from self.model.stream(ids, **kw)

  def _choice(self, chat: bool, text: str, finish: str | None, delta: bool) -> dict[str, Any]:
    if not chat: return {"index": 0, "text": text, "finish_reason": finish}
    return {"index": 0, ("delta" if delta else "message"): {"role": "assistant", "content": text}, "finish_reason": finish}

  def _chunk(self, rid: str, obj: str, created: int, chat: bool, text: str, finish: str | None) -> bytes:
    """One server-sent event of a streamed answer."""
    c = {"id": rid, "object": obj + (".chunk" if chat else ""), "created": created, "model": self.name, "choices": [self._choice(chat, text, finish, True)]}
    return f"data: {json.dumps(c)}\n\n".encode()

  async def _handle(self, request: Any, chat: bool) -> Any:
    from aiohttp import web
    try: body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as e:
      return web.json_response({"error": {"message": f"malformed JSON: {e}", "type": "invalid_request_error"}}, status=400)
    try: ids, kw, stream = self._params(body, chat)
    except BadRequest as e: return web.json_response({"error": {"message": str(e), "type": "invalid_request_error"}}, status=400)
    rid, created = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}", int(time.time())
    obj = "chat.completion" if chat else "text_completion"
    tok, eos = self.model.tokenizer, set(self.model.cfg.eos_ids)
    loop = asyncio.get_running_loop()
    q: asyncio.Queue = asyncio.Queue()
    def work() -> None:
      try:
        for t in self._tokens(ids, kw): loop.call_soon_threadsafe(q.put_nowait, ("tok", t))
        loop.call_soon_threadsafe(q.put_nowait, ("end", None))
      except Exception as e: loop.call_soon_threadsafe(q.put_nowait, ("err", e))
    threading.Thread(target=work, daemon=True).start()
    out: list[int] = []
    if not stream:
      while True:
        kind, v = await q.get()
        if kind == "err": return web.json_response({"error": {"message": f"{type(v).__name__}: {v}", "type": "server_error"}}, status=500)
        if kind == "end": break
        out.append(v)
      finish = "stop" if out and out[-1] in eos else "length"
      text = tok.decode([t for t in out if t not in eos])
      return web.json_response({"id": rid, "object": obj, "created": created, "model": self.name, "choices": [self._choice(chat, text, finish, False)],
                                "usage": {"prompt_tokens": len(ids), "completion_tokens": len(out), "total_tokens": len(ids) + len(out)}})
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    sent = ""
    while True:
      kind, v = await q.get()
      if kind == "err":
        await resp.write(f"data: {json.dumps({'error': {'message': f'{type(v).__name__}: {v}'}})}\n\n".encode()); break
      if kind == "end":
        finish = "stop" if out and out[-1] in eos else "length"
        if (rest := tok.decode([t for t in out if t not in eos])[len(sent):]):   # (a character held back to the end)
          await resp.write(self._chunk(rid, obj, created, chat, rest, None))
        await resp.write(self._chunk(rid, obj, created, chat, "", finish))
        break
      out.append(v)
      text = tok.decode([t for t in out if t not in eos])
      # the text so far decoded whole, sent up to a character still incomplete (its UTF-8 bytes split over tokens)
      if text.endswith("\ufffd") or not text.startswith(sent): continue
      piece, sent = text[len(sent):], text
      if piece: await resp.write(self._chunk(rid, obj, created, chat, piece, None))
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp

  # ---------------------------------------------------------------- the server
  def app(self) -> Any:
    from aiohttp import web
    async def models(_: Any) -> Any: return web.json_response({"object": "list", "data": [{"id": self.name, "object": "model", "owned_by": "baregrad"}]})
    async def completions(r: Any) -> Any: return await self._handle(r, False)
    async def chat(r: Any) -> Any: return await self._handle(r, True)
    a = web.Application(client_max_size=1 << 20)
    a.router.add_get("/v1/models", models)
    a.router.add_post("/v1/completions", completions)
    a.router.add_post("/v1/chat/completions", chat)
    return a

  def start(self) -> "LLMServer":
    """Serve on a background thread; returns once the socket listens (self.port is the bound port: 0 picks a free one)."""
    from aiohttp import web
    def main() -> None:
      self.loop = loop = asyncio.new_event_loop()
      asyncio.set_event_loop(loop)
      self.runner = web.AppRunner(self.app(), access_log=None)
      loop.run_until_complete(self.runner.setup())
      site = web.TCPSite(self.runner, self.host, self.port)
      loop.run_until_complete(site.start())
      self.port = site._server.sockets[0].getsockname()[1]   # type: ignore[union-attr]
      self.ready.set()
      loop.run_forever()
      loop.run_until_complete(self.runner.cleanup())
    self.thread = threading.Thread(target=main, daemon=True, name="llm-server")
    self.thread.start()
    if not self.ready.wait(30): raise TimeoutError(f"the server did not start listening on {self.host}:{self.port} within 30 s")
    return self

  def stop(self) -> None:
    if self.loop is not None: self.loop.call_soon_threadsafe(self.loop.stop)
    if self.thread is not None: self.thread.join(10)
