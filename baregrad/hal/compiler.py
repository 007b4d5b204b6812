"""Compiler base: source text -> binary bytes, with a self-checking on-disk cache.

A cache entry is one file, `<cache>/compile/<key>` where <key> is the SHA-256 of (target key, toolchain version,
source). Its bytes:

    magic "BGCC\\x01\\0\\0\\0" (8) | the entry's key, raw SHA-256 (32) | payload length, <Q (8) | SHA-256 of the payload (32) | payload

A file that fails any of these checks (damaged bytes, cut short, written for another key, not an entry) is reported
once with a CompileCacheWarning naming it, deleted and compiled again: nothing unchecked reaches a loader. The format
(MAGIC) is part of the key, so the bare entries of earlier versions are never read (nor warned about): they are left
for the user to delete.
Other findings as costly to make again are kept the same way under keys of their own (`entry_key`, `cache_get`,
`cache_put`: the C compiler's probe, drivers/cpu_compile.py).
Writes go to a uniquely named temporary file in the same folder, renamed over the entry (atomic), so concurrent
processes never see a half-written entry. A cache folder that cannot be written means compiling without caching
(one warning per folder and process); entries already there are still read."""
from __future__ import annotations
import hashlib, os, struct, tempfile, threading, warnings
from baregrad import knobs
from baregrad.helpers import cache_dir

MAGIC = b"BGCC\x01\0\0\0"
_HEAD = struct.Struct("<8s32sQ32s")   # magic, key digest, payload length, payload digest

class CompileCacheWarning(UserWarning):
  """A compile-cache entry was bad (and is rebuilt) or the cache cannot be written (compiling without it)."""

_unwritable: set[str] = set()   # cache folders found unwritable in this process: warned once, not tried again
_unreadable: set[str] = set()   # cache folders whose entries could not be opened: warned once
_lock = threading.Lock()

def pack_entry(key: str, lib: bytes) -> bytes:
  """The file contents of a cache entry holding `lib` for the hex key `key`."""
  return _HEAD.pack(MAGIC, bytes.fromhex(key), len(lib), hashlib.sha256(lib).digest()) + lib

def unpack_entry(data: bytes, key: str) -> tuple[bytes | None, str]:
  """(payload, "") for a sound entry for hex key `key`, else (None, what is wrong with it)."""
  if len(data) < _HEAD.size: return None, f"cut short ({len(data)} bytes, shorter than the {_HEAD.size}-byte header)"
  magic, kd, n, digest = _HEAD.unpack_from(data)
  if magic != MAGIC: return None, f"not a compile-cache entry of this format (magic {magic.hex()}, expected {MAGIC.hex()})"
  if kd != bytes.fromhex(key): return None, f"built for another key ({kd.hex()[:16]}..., expected {key[:16]}...)"
  if len(data) - _HEAD.size != n: return None, f"cut short or overlong ({len(data) - _HEAD.size} payload bytes, the header says {n})"
  lib = data[_HEAD.size:]
  if hashlib.sha256(lib).digest() != digest: return None, "damaged (its checksum does not match its bytes)"
  return lib, ""

def entry_key(*parts: str) -> str:
  """The hex SHA-256 naming a cache entry made from `parts` (the entry format is part of the key: entries of an
  earlier format are never looked at)."""
  h = hashlib.sha256(MAGIC)
  for part in parts: h.update(part.encode()); h.update(b"\0")
  return h.hexdigest()

def cache_get(key: str) -> bytes | None:
  """The payload cached under hex key `key`, or None (missing, bad, or BAREGRAD_NOCACHE=1). For results other than
  compiled kernels that are as costly to find again (drivers/cpu_compile.py's compiler probe)."""
  if knobs.read("BAREGRAD_NOCACHE"): return None
  return _read(os.path.join(cache_dir(), "compile", key), key)

def cache_put(key: str, payload: bytes) -> None:
  """Cache `payload` under hex key `key` (atomically; skipped where the cache cannot be written)."""
  if not knobs.read("BAREGRAD_NOCACHE"): _write(os.path.join(cache_dir(), "compile", key), pack_entry(key, payload))

def _warn(msg: str) -> None: warnings.warn(msg, CompileCacheWarning, stacklevel=4)

def _first(folders: set[str], d: str) -> bool:
  """Whether `d` is new to `folders` (and now in it): so a folder's trouble is reported once per process."""
  with _lock:
    if d in folders: return False
    folders.add(d)
    return True

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

  def describe(self) -> str:
    """The toolchain in a few words for DEBUG=2's line per compile ("" where there is nothing more to say than the
    device's name)."""
    return ""

  def cache_key(self, src: str) -> str:
    """The hex SHA-256 naming `src`'s entry: target key, toolchain version and source."""
    return entry_key(self.cachekey or "", self.version(), src)

  def cache_path(self, src: str) -> str:
    """The file holding `src`'s compiled entry."""
    return os.path.join(cache_dir(), "compile", self.cache_key(src))

  def compile_cached(self, src: str) -> bytes:
    """compile(src), through the on-disk cache (BAREGRAD_NOCACHE=1 or cachekey=None bypasses it)."""
    if self.cachekey is None or knobs.read("BAREGRAD_NOCACHE"): return self.compile(src)
    key = self.cache_key(src)
    path = os.path.join(cache_dir(), "compile", key)
    if (lib := _read(path, key)) is not None:
      self.cache_hits += 1
      return lib
    self.cache_misses += 1
    lib = self.compile(src)
    if not isinstance(lib, (bytes, bytearray)): raise TypeError(f"{type(self).__name__}.compile returned {type(lib).__name__}, expected bytes")
    lib = bytes(lib)
    _write(path, pack_entry(key, lib))
    return lib

def _read(path: str, key: str) -> bytes | None:
  """The payload of the entry at `path`, or None (missing; or bad: then reported and deleted)."""
  try:
    with open(path, "rb") as f:
      st = os.fstat(f.fileno())
      data = f.read()
  except (FileNotFoundError, NotADirectoryError): return None   # no entry (or no folder: a file stands in its way)
  except OSError as e:
    if _first(_unreadable, os.path.dirname(path)):
      _warn(f"compile cache entry {path} cannot be read ({type(e).__name__}: {e}); compiling without the cache's entries")
    return None
  lib, why = unpack_entry(data, key)
  if lib is not None: return lib
  # delete only the file that was read: another process may have renamed a sound entry over it since
  gone = "deleted it"
  try:
    now = os.stat(path)
    if (now.st_ino, now.st_dev, now.st_mtime_ns) == (st.st_ino, st.st_dev, st.st_mtime_ns): os.unlink(path)
  except FileNotFoundError: pass
  except OSError as e: gone = f"could not delete it ({type(e).__name__}: {e})"
  _warn(f"compile cache entry {path} is {why}: {gone}; compiling it again")
  return None

def _write(path: str, entry: bytes) -> None:
  """Put `entry` at `path` atomically; a folder that cannot be written is warned about once and skipped after."""
  d = os.path.dirname(path)
  if d in _unwritable: return
  tmp = None
  try:
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
    with os.fdopen(fd, "wb") as f: f.write(entry)
    os.replace(tmp, path)
    tmp = None
  except OSError as e:   # read-only, no permission, a full disk, a file where the folder should be
    if _first(_unwritable, d): _warn(f"compile cache {d} cannot be written ({type(e).__name__}: {e}); compiling without caching from now on")
  finally:
    if tmp is not None:
      try: os.unlink(tmp)
      except OSError: pass
