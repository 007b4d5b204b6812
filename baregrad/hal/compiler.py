"""Compiler base: source text -> binary bytes, with an on-disk cache."""
from __future__ import annotations
import hashlib, os, tempfile
from baregrad import knobs
from baregrad.helpers import cache_dir

class Compiler:
  """Subclasses implement compile(); callers use compile_cached().

  The cache key covers `cachekey` (the target/flags), `version()` (so a toolchain upgrade
  misses) and the source. cachekey=None disables caching for this compiler."""
  def __init__(self, cachekey: str | None = None) -> None:
    self.cachekey = cachekey
    self.cache_hits = self.cache_misses = 0

  def compile(self, src: str) -> bytes: raise NotImplementedError(f"{type(self).__name__}.compile")
  def version(self) -> str:
    """The toolchain's version string; part of the cache key."""
    return ""

  def cache_path(self, src: str) -> str:
    h = hashlib.sha256()
    for part in (self.cachekey or "", self.version(), src): h.update(part.encode()); h.update(b"\0")
    return os.path.join(cache_dir(), "compile", h.hexdigest())

  def compile_cached(self, src: str) -> bytes:
    if self.cachekey is None or knobs.read("BAREGRAD_NOCACHE"): return self.compile(src)
    path = self.cache_path(src)
    try:
      with open(path, "rb") as f: lib = f.read()
      self.cache_hits += 1
      return lib
    except FileNotFoundError: pass
    self.cache_misses += 1
    lib = self.compile(src)
    if not isinstance(lib, (bytes, bytearray)): raise TypeError(f"{type(self).__name__}.compile returned {type(lib).__name__}, expected bytes")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    # atomic: concurrent processes compiling the same source never see a half-written file
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
      with os.fdopen(fd, "wb") as f: f.write(lib)
      os.replace(tmp, path)
    except BaseException:
      if os.path.exists(tmp): os.unlink(tmp)
      raise
    return bytes(lib)
