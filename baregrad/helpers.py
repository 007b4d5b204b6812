"""Small shared utilities: math helpers, the cache directory, the progress bar. Imports only baregrad.knobs (rank 1)."""
from __future__ import annotations
import contextlib, functools, os, shutil, sys, time
from typing import Any, Iterable, Iterator, TypeVar
from baregrad import knobs
from baregrad.knobs import Context, DEBUG, getenv  # noqa: F401  (re-exported: the knobs live in baregrad/knobs.py)

T = TypeVar("T")

# VIZ=1: baregrad.viz sets this to its recorder; core code calls it only when set, so with VIZ off a hook costs one
# attribute read (no recording objects are built)
viz_sink: Any = None

def prod(xs: Iterable[T], start: int = 1) -> int:
  out = start
  for x in xs: out = out * x  # type: ignore[operator]
  return out

def ceildiv(a: int, b: int) -> int: return -(-a // b)
def flatten(xss: Iterable[Iterable[T]]) -> list[T]: return [x for xs in xss for x in xs]
def argsort(xs: list) -> list[int]: return sorted(range(len(xs)), key=xs.__getitem__)

@functools.lru_cache(maxsize=1024)
def c_array(ctype: Any, n: int) -> Any:
  """`ctype * n`, kept alive. ctypes holds array types only weakly: once the collector has freed the last one of a
  size, `ctype * n` makes a new class (~13 us, and cyclic garbage for the next collection), which a launch or copy
  that wrote its arguments through it paid on most calls."""
  return ctype * n

def cache_dir() -> str:
  """Where compiled binaries are cached on disk (BAREGRAD_CACHE overrides)."""
  return knobs.read("BAREGRAD_CACHE") or os.path.join(knobs.read("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "baregrad")

class Timer:
  def __init__(self) -> None: self.st = time.perf_counter()
  def elapsed(self) -> float: return time.perf_counter() - self.st

_TTY: dict[int, tuple[Any, bool]] = {}

def _isatty(stream: Any) -> bool:
  """stream.isatty(), asked once per stream: every realize makes a (mostly silent) bar, and on some terminals and pipes
  the ioctl behind isatty costs milliseconds."""
  hit = _TTY.get(id(stream))
  if hit is not None and hit[0] is stream: return hit[1]
  try: tty = bool(stream.isatty())
  except (AttributeError, ValueError): tty = False
  _TTY[id(stream)] = (stream, tty)
  return tty

class Progress:
  """A progress bar on stderr when it is a terminal, and nothing at all on a pipe or a file (PROGRESS=1 forces it
  on, PROGRESS=0 off). It first draws once `delay` seconds of work have passed, so short work prints nothing; work
  is the time since the bar was made, or, once step() is used, only the time spent inside step() blocks.

    for x in Progress(xs, desc="train"): ...                   # counts the items
    with Progress(total=n, desc="download", unit="B") as bar: bar.update(len(chunk))
    bar = Progress(total=k, desc="compile", delay=1.0)         # shows only when the compiles take over a second
    with bar.step(): compile_one()                             # counts 1 and times the block
  """
  def __init__(self, iterable: Iterable[T] | None = None, total: int | None = None, desc: str = "", unit: str = "it",
               delay: float = 0.0, stream: Any = None) -> None:
    self.iterable, self.desc, self.unit, self.delay = iterable, desc, unit, delay
    if total is None and iterable is not None and hasattr(iterable, "__len__"): total = len(iterable)  # type: ignore[arg-type]
    self.total, self.n, self.note = total, 0, ""
    self.stream = stream if stream is not None else sys.stderr
    force = knobs.read("PROGRESS") or ""
    self.enabled = force == "1" or (force != "0" and _isatty(self.stream))
    self.t0 = self._last = time.perf_counter()
    self.busy, self._stepped, self.drawn = 0.0, False, False

  def __iter__(self) -> Iterator[T]:
    assert self.iterable is not None, "Progress(iterable) to iterate"
    try:
      for x in self.iterable:
        yield x
        self.update(1)
    finally: self.close()
  def __enter__(self) -> Progress: return self
  def __exit__(self, *exc: object) -> None: self.close()

  def step(self, note: str | None = None) -> contextlib.AbstractContextManager:
    """Time one piece of work and count it (costs nothing when the bar cannot show)."""
    return self._step(note) if self.enabled else _NOSTEP

  @contextlib.contextmanager
  def _step(self, note: str | None) -> Iterator[None]:
    st = time.perf_counter()
    try: yield
    finally:
      self._stepped, self.busy = True, self.busy + time.perf_counter() - st
      self.update(1, note)

  def update(self, n: int = 1, note: str | None = None) -> None:
    self.n += n
    if note is not None: self.note = note
    if not self.enabled: return
    now = time.perf_counter()
    if (self.busy if self._stepped else now - self.t0) < self.delay: return
    if self.drawn and now - self._last < 0.1 and self.n != self.total: return  # at most ten redraws a second
    self._draw(now)

  def _draw(self, now: float) -> None:
    el = now - self.t0
    rate = self.n / el if el > 0 else 0.0
    fmt = _bytes if self.unit == "B" else str
    cols = shutil.get_terminal_size((100, 20)).columns
    tail = f" {fmt(self.n)}" + (f"/{fmt(self.total)}" if self.total else "") + f" [{_hms(el)}"
    if self.total and rate > 0: tail += f"<{_hms((self.total - self.n) / rate)}"
    tail += (f", {_bytes(rate)}/s]" if self.unit == "B" else f", {rate:.1f} {self.unit}/s]") + (f" {self.note}" if self.note else "")
    head = f"{self.desc}:" if self.desc else ""
    if self.total:
      frac = min(1.0, self.n / self.total)
      w = max(10, min(30, cols - len(head) - len(tail) - 8))
      head += f" {100 * frac:3.0f}%|{'#' * int(w * frac)}{'.' * (w - int(w * frac))}|"
    self.stream.write(("\r" + (head + tail).lstrip())[:cols] + "\x1b[K")
    self.stream.flush()
    self.drawn, self._last = True, now

  def close(self) -> None:
    """Draw the final state and end the line (nothing if the bar never showed)."""
    if self.drawn:
      self._draw(time.perf_counter())
      self.stream.write("\n")
      self.stream.flush()
      self.drawn = False

_NOSTEP = contextlib.nullcontext()

def _hms(s: float) -> str:
  s = int(s)
  return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"

def _bytes(n: float) -> str:
  for unit in ("B", "KiB", "MiB", "GiB"):
    if n < 1024 or unit == "GiB": return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
    n /= 1024
  return f"{n:.1f} GiB"
