"""Small shared utilities: environment knobs, math helpers. Imports nothing from baregrad."""
from __future__ import annotations
import functools, math, os, time
from typing import Iterable, TypeVar

T = TypeVar("T")

@functools.cache
def getenv(key: str, default: int | str = 0) -> int | str:
  """An environment knob, typed like its default. Cached: knobs are read once per process."""
  v = os.environ.get(key)
  if v is None: return default
  return type(default)(v) if not isinstance(default, str) else v

class Context:
  """Override knobs for a block: `with Context(DEBUG=4): ...` (tests use it)."""
  def __init__(self, **kw: int | str): self.kw, self.old = kw, {}
  def __enter__(self) -> Context:
    for k, v in self.kw.items(): self.old[k] = os.environ.get(k); os.environ[k] = str(v)
    getenv.cache_clear()
    return self
  def __exit__(self, *exc: object) -> None:
    for k, v in self.old.items():
      if v is None: os.environ.pop(k, None)
      else: os.environ[k] = v
    getenv.cache_clear()

def DEBUG() -> int: return int(getenv("DEBUG", 0))

def prod(xs: Iterable[T], start: int = 1) -> int:
  out = start
  for x in xs: out = out * x  # type: ignore[operator]
  return out

def ceildiv(a: int, b: int) -> int: return -(-a // b)
def round_up(a: int, b: int) -> int: return ceildiv(a, b) * b
def all_same(xs: list) -> bool: return all(x == xs[0] for x in xs)
def flatten(xss: Iterable[Iterable[T]]) -> list[T]: return [x for xs in xss for x in xs]
def dedup(xs: Iterable[T]) -> list[T]: return list(dict.fromkeys(xs))
def argsort(xs: list) -> list[int]: return sorted(range(len(xs)), key=xs.__getitem__)
def is_pow2(x: int) -> bool: return x > 0 and (x & (x - 1)) == 0

def cache_dir() -> str:
  """Where compiled binaries are cached on disk (BAREGRAD_CACHE overrides)."""
  return os.environ.get("BAREGRAD_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "baregrad")

class Timer:
  def __init__(self) -> None: self.st = time.perf_counter()
  def elapsed(self) -> float: return time.perf_counter() - self.st
