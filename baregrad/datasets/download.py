"""Download a file once into the cache folder: retried once when broken, never left half-written."""
from __future__ import annotations
import gzip, hashlib, os, tarfile, tempfile, urllib.error, urllib.request, zlib
from baregrad.helpers import cache_dir, Progress

class DownloadError(OSError):
  """A download failed; the message names the URL and what went wrong on each try."""

def is_url(s: object) -> bool: return isinstance(s, str) and s.split("://", 1)[0].lower() in ("http", "https")

def cache_path(url: str, cache: str | None = None) -> str:
  """Where `url` is kept: <cache>/datasets/<hash of the URL>-<file name> (two mirrors of one file never collide)."""
  name = os.path.basename(url.split("?", 1)[0].rstrip("/")) or "download"
  return os.path.join(cache or cache_dir(), "datasets", hashlib.sha256(url.encode()).hexdigest()[:16] + "-" + name)

def fetch(url: str, cache: str | None = None, timeout: float = 60.0, retries: int = 1) -> str:
  """The local path of `url`'s content, downloading it into the cache the first time (BAREGRAD_CACHE moves the cache).

  A broken download (connection lost, fewer bytes than Content-Length, a server error, a corrupt .gz/.tar.gz) is
  retried `retries` times, then raises DownloadError naming each failure; a missing file (HTTP 404) raises
  FileNotFoundError at once. Either way nothing partial is left in the cache: the data goes to a temporary file
  that is renamed into place only once it is complete and checked."""
  path = cache_path(url, cache)
  if os.path.exists(path): return path
  os.makedirs(os.path.dirname(path), exist_ok=True)
  errors: list[str] = []
  for _ in range(retries + 1):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".part-")
    try:
      with os.fdopen(fd, "wb") as f: _download(url, f, timeout)
      _check_archive(tmp, path)
      os.replace(tmp, path)
      return path
    except urllib.error.HTTPError as e:
      if e.code == 404: raise FileNotFoundError(f"{url}: not found on the server (HTTP 404)") from None
      errors.append(f"HTTP {e.code} {e.reason}")
    except (OSError, EOFError, ValueError, zlib.error, tarfile.TarError) as e:
      errors.append(f"{type(e).__name__}: {e}")
    finally:
      if os.path.exists(tmp): os.unlink(tmp)
  raise DownloadError(f"{url}: download failed {len(errors)} times ({'; then '.join(errors)}); nothing was kept in {os.path.dirname(path)}")

def _download(url: str, f, timeout: float) -> None:
  with urllib.request.urlopen(url, timeout=timeout) as r:
    length = r.headers.get("Content-Length")
    total = int(length) if length and length.isdigit() else None
    got = 0
    with Progress(total=total, desc=f"download {os.path.basename(url.rstrip('/'))}", unit="B", delay=0.5) as bar:
      while chunk := r.read(1 << 16):
        f.write(chunk)
        got += len(chunk)
        bar.update(len(chunk))
  if total is not None and got != total: raise EOFError(f"got {got} of {total} bytes (the connection ended early)")

def _check_archive(tmp: str, name: str) -> None:
  """A compressed file must decompress to its end (a truncated or corrupt one raises)."""
  if name.endswith((".tar.gz", ".tgz")):
    with tarfile.open(tmp, "r:gz") as t:
      for m in t:
        if m.isfile() and (src := t.extractfile(m)) is not None:
          while src.read(1 << 20): pass
  elif name.endswith(".gz"):
    with gzip.open(tmp, "rb") as g:
      while g.read(1 << 20): pass
