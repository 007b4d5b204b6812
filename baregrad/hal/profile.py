"""PROFILE=1: a trace of what ran, as a Chrome trace-event JSON file (open it in https://ui.perfetto.dev or
chrome://tracing).

- Device events: every kernel and every copy, with the start and end timestamps its queue wrote into two HCQ
  signals (`timestamp` commands recorded around the exec or copy). The host never waits for them per launch: an
  event is written once the device's timeline has passed it, which is checked whenever the host records something
  new, and at exit. One process per device, one track (thread) per hardware queue.
- Host spans: schedule, codegen, compile and BEAM, on the track of the Python thread that ran them; instant events on
  the same tracks for each HCQ submission ("submit", hcq/queue.py), each doorbell write ("doorbell", drivers/port.py)
  and each host wait on a signal not yet reached ("host wait", hcq/signal.py).
- Clocks: device timestamps are put on the host's clock (time.perf_counter_ns) with one extra timestamp submitted
  right after a device's first event: a device whose stamp reads between the host time before its submission and
  the time it is read (the CPU device, the mock GPUs) already counts on the host's clock and is not shifted; another
  is shifted so the stamp lands at its submission time. Nothing waits for the stamp either.
- The file is a JSON array written incrementally and flushed after each batch of events, and closed with `]` at
  exit. A process that dies first leaves the array unclosed, which the trace-event format allows and the viewers
  read; `load()` reads it too. Events still in flight when a process is killed are lost.

PROFILE=1 writes $TMPDIR/baregrad-trace-<pid>.json, PROFILE_PATH=file chooses the file (a child process that
inherits it writes file-<pid>.json; a forked child writes nothing); the path is printed at exit.
Hooks in hcq/ and engine/ test the one attribute `ON` first, so a run without PROFILE pays nothing else."""
from __future__ import annotations
import atexit, contextlib, json, os, sys, tempfile, threading, time
from baregrad import knobs
from collections import deque
from typing import Any, Iterator

ON: bool = bool(knobs.read("PROFILE"))
MAX_PENDING = 256  # per device; beyond it the oldest event is waited for (each holds two signals from the device's pool)

def _now_us() -> float: return time.perf_counter_ns() / 1e3

class _Pending:
  __slots__ = ("dev", "queue", "name", "cat", "st", "en", "tv", "args")
  def __init__(self, dev: Any, queue: str, name: str, cat: str, st: Any, en: Any, tv: int, args: dict) -> None:
    self.dev, self.queue, self.name, self.cat, self.st, self.en, self.tv, self.args = dev, queue, name, cat, st, en, tv, args

class Profiler:
  """Writes one trace file. Usually made by `start()` (PROFILE=1 calls it at import)."""
  def __init__(self, path: str) -> None:
    self.path = path
    self._f = open(path, "w")
    self._f.write("[")
    self._first = True
    self._lock = threading.RLock()
    self._pending: dict[Any, deque[_Pending]] = {}   # device -> its events not yet resolved, in submission order
    self._pids: dict[str, int] = {}
    self._tids: dict[tuple[int, str], int] = {}
    self._clock: dict[Any, Any] = {}                   # device -> offset to the host clock (us), or its pending stamp
    self.lost = 0                                      # events dropped because their device closed first
    self.closed = False
    self._write([{"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "host (Python)"}},
                 {"name": "process_sort_index", "ph": "M", "pid": 0, "tid": 0, "args": {"sort_index": -1}}])

  # ---- writing
  def _write(self, events: list[dict]) -> None:
    with self._lock:
      if self.closed: return
      for e in events:
        self._f.write(("\n" if self._first else ",\n") + json.dumps(e, separators=(",", ":")))
        self._first = False
      self._f.flush()

  def _track(self, process: str, thread: str, sort: int = 0) -> tuple[int, int]:
    """(pid, tid) of a track, announcing the names the first time."""
    with self._lock:
      meta = []
      if (pid := self._pids.get(process)) is None:
        pid = self._pids[process] = len(self._pids) + 1
        meta.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": process}})
      if (tid := self._tids.get((pid, thread))) is None:
        tid = self._tids[(pid, thread)] = len(self._tids) + 1
        meta += [{"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": thread}},
                 {"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": sort}}]
      if meta: self._write(meta)
      return pid, tid

  # ---- host spans
  def _host_tid(self) -> int:
    """The track of the calling Python thread (hold self._lock)."""
    th = threading.current_thread()
    tid = self._tids.get((0, th.name))
    if tid is None:
      tid = self._tids[(0, th.name)] = len(self._tids) + 1
      self._write([{"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": {"name": th.name}}])
    return tid

  @contextlib.contextmanager
  def span(self, name: str, cat: str = "host", **args: Any) -> Iterator[dict]:
    """Time a block of host work; the yielded dict's entries become the event's args."""
    st = _now_us()
    try: yield args
    finally:
      en = _now_us()
      with self._lock:
        self._write([{"name": name, "cat": cat, "ph": "X", "ts": st, "dur": en - st, "pid": 0, "tid": self._host_tid(),
                      **({"args": _jsonable(args)} if args else {})}])
      self.drain()

  def instant(self, name: str, cat: str = "host", **args: Any) -> None:
    """A moment on the calling thread's track: a submission, a doorbell, the start of a host wait."""
    ts = _now_us()
    with self._lock:
      self._write([{"name": name, "cat": cat, "ph": "i", "s": "t", "ts": ts, "pid": 0, "tid": self._host_tid(),
                    **({"args": _jsonable(args)} if args else {})}])

  # ---- device events
  def device_op(self, dev: Any, queue: Any, name: str, cat: str, st: Any, en: Any, tv: int, **args: Any) -> None:
    """A command submitted between timestamp commands into signals st and en, finished once dev's timeline
    reaches tv. Called after the submission, without the device's submit lock held."""
    qname = queue if isinstance(queue, str) else (getattr(queue, "engine", None) or type(queue).__name__)
    with self._lock:
      if dev not in self._clock:  # first event on this device: a timestamp right behind it dates the device's clock
        h0 = _now_us()
        with dev.submit_lock: sig, ctv = self.stamp(dev)
        self._clock[dev] = (sig, ctv, h0)
      q = self._pending.setdefault(dev, deque())
      q.append(_Pending(dev, qname, name, cat, st, en, tv, args))
      if len(q) > MAX_PENDING: self._resolve(dev, q, block=True, limit=len(q) - MAX_PENDING)
    self.drain()

  def drain(self, block: bool = False, timeout_ms: int | None = None) -> None:
    """Write every event whose device has finished it (with block, wait for all of them first)."""
    with self._lock:
      for dev, q in list(self._pending.items()): self._resolve(dev, q, block, timeout_ms=timeout_ms)

  def _resolve(self, dev: Any, q: deque[_Pending], block: bool, limit: int | None = None, timeout_ms: int | None = None) -> None:
    out: list[dict] = []
    try:
      while q and (limit is None or len(out) < limit):
        if getattr(dev, "closed", False):  # its signal memory may be gone: never read it
          self.lost += len(q); q.clear(); break
        p = q[0]
        if (off := self._clock_offset(dev, block, timeout_ms)) is None: break
        if dev.timeline_signal.value < p.tv:
          if not block: break
          dev.timeline_signal.wait(p.tv, timeout_ms)
        q.popleft()
        pid, tid = self._track(dev.device, p.queue, 0 if p.queue == "compute" else 1)
        t0, t1 = p.st.timestamp / dev.ticks_per_us + off, p.en.timestamp / dev.ticks_per_us + off
        out.append({"name": p.name, "cat": p.cat, "ph": "X", "ts": t0, "dur": max(t1 - t0, 0.0), "pid": pid, "tid": tid,
                    "args": {**_jsonable(p.args), "timeline": p.tv}})
    except Exception:  # a stuck or faulted device (its own error is raised to whoever waits on it): keep what we have
      self.lost += len(q); q.clear()
    if out: self._write(out)

  def _clock_offset(self, dev: Any, block: bool, timeout_ms: int | None) -> float | None:
    """Microseconds to add to dev's timestamps to put them on the host clock (None while the stamp taken after the
    device's first event has not run). 0 when the device already counts on the host's clock: its stamp reads
    between the host time before it was submitted and now; otherwise the stamp is dated at its submission (an
    estimate within the submission latency)."""
    c = self._clock[dev]
    if isinstance(c, float): return c
    sig, tv, h0 = c
    if dev.timeline_signal.value < tv:
      if not block: return None
      dev.timeline_signal.wait(tv, timeout_ms)
    d = sig.timestamp / dev.ticks_per_us
    self._clock[dev] = off = 0.0 if h0 <= d <= _now_us() else h0 - d
    return off

  def stamp(self, dev: Any) -> tuple[Any, int]:
    """Submit a lone timestamp on dev's compute queue (hold dev.submit_lock): (its signal, its timeline value)."""
    sig, tv = dev.signal_t(dev), dev.next_timeline()
    dev.compute_queue_t().wait(dev.timeline_signal, tv - 1).timestamp(sig).signal(dev.timeline_signal, tv).submit(dev)
    return sig, tv

  def close(self, timeout_ms: int = 5000) -> None:
    """Wait (bounded) for the events in flight, write them and close the array."""
    if self.closed: return
    try: self.drain(block=True, timeout_ms=timeout_ms)
    finally:
      with self._lock:
        if self.lost: self._write([{"name": f"{self.lost} device events lost (device closed or stuck first)", "ph": "i",
                                    "s": "g", "ts": _now_us(), "pid": 0, "tid": 0}])
        self._f.write("\n]\n")
        self._f.close()
        self.closed = True

def _jsonable(args: dict) -> dict:
  return {k: v if isinstance(v, (int, float, str, bool, type(None))) else str(v) for k, v in args.items()}

# ---- the process's profiler: what the hooks call
_prof: Profiler | None = None

def start(path: str | None = None) -> Profiler:
  """Begin writing a trace (PROFILE=1 does this at import); closes the previous one. Returns the profiler."""
  global _prof, ON
  if _prof is not None: _prof.close()
  if path is None and (path := knobs.read("PROFILE_PATH")):
    # a child process inherits PROFILE_PATH: it writes beside its parent's file (name-<pid>.json), never over it
    if (knobs.read("_BAREGRAD_PROFILE_OWNER") or str(os.getpid())) != str(os.getpid()):
      stem, ext = os.path.splitext(path)  # type: ignore[call-overload]  # (the knob's str: mypy keeps path None)
      path = f"{stem}-{os.getpid()}{ext or '.json'}"
    knobs.set_env("_BAREGRAD_PROFILE_OWNER", os.getpid())
  _prof = Profiler(path or os.path.join(tempfile.gettempdir(), f"baregrad-trace-{os.getpid()}.json"))
  ON = True
  return _prof

def _forked_child() -> None:
  # a forked child shares the parent's open trace file: it must not write into it (nor close it at exit)
  global _prof, ON
  _prof, ON = None, False
os.register_at_fork(after_in_child=_forked_child)

def stop() -> str | None:
  """Finish the trace: the events in flight are waited for (bounded), the file is closed. Returns its path."""
  global _prof, ON
  ON = False
  if _prof is None: return None
  p, _prof = _prof, None
  p.close()
  return p.path

class _NoSpan:
  def __enter__(self) -> dict: return {}
  def __exit__(self, *exc: object) -> None: pass
_NO_SPAN = _NoSpan()

def span(name: str, cat: str = "host", **args: Any) -> Any:
  """`with profile.span("compile", kernel=name) as args:` times host work (a no-op unless profiling)."""
  return _prof.span(name, cat, **args) if ON and _prof is not None else _NO_SPAN

def instant(name: str, cat: str = "host", **args: Any) -> None:
  """An instant event on the calling thread's host track (callers test `ON` first: a no-op unless profiling)."""
  if ON and _prof is not None: _prof.instant(name, cat, **args)

def device_op(dev: Any, queue: Any, name: str, cat: str, sigs: tuple[Any, Any] | None, tv: int, **args: Any) -> None:
  """Record a submitted command bracketed by timestamp signals sigs=(start, end); a no-op for sigs None."""
  if ON and _prof is not None and sigs is not None: _prof.device_op(dev, queue, name, cat, sigs[0], sigs[1], tv, **args)

def begin(q: Any, dev: Any) -> tuple[Any, Any] | None:
  """While profiling, record a start timestamp into q and return (start, end) signals for end() and device_op()."""
  if not ON: return None
  sigs = dev.signal_t(dev), dev.signal_t(dev)
  q.timestamp(sigs[0])
  return sigs

def end(q: Any, sigs: tuple[Any, Any] | None) -> None:
  if sigs is not None: q.timestamp(sigs[1])

def stamp(dev: Any) -> tuple[Any, int] | None:
  """A lone timestamp submission on dev (caller holds dev.submit_lock), for bracketing a replayed graph."""
  return _prof.stamp(dev) if ON and _prof is not None else None

def load(path: str) -> list[dict]:
  """The events of a trace file, also of one a crashed process left without its closing bracket."""
  with open(path) as f: text = f.read().rstrip()
  if not text.endswith("]"): text = text.rstrip(",") + "]"
  return json.loads(text)

@atexit.register
def _at_exit() -> None:
  if _prof is None: return
  path = stop()
  print(f"baregrad: PROFILE trace written to {path} (open it in https://ui.perfetto.dev)", file=sys.stderr)

if ON: start()
