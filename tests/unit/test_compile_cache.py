"""The on-disk compile cache heals itself (issue 31, item 6): an entry whose bytes were damaged, cut short, written for
another key or in an older format is reported once by name, deleted and rebuilt, never handed to a loader; a cache that
cannot be written means compiling without caching, with one warning; concurrent writers never leave a half-written entry."""
from __future__ import annotations
from tests.paths import REPO
import errno, os, re, subprocess, sys, textwrap, time, warnings
import pytest
from baregrad.hal import compiler as hc
from baregrad.hal.compiler import Compiler, CompileCacheWarning, pack_entry, unpack_entry

ROOT = str(REPO)

class Toy(Compiler):
  """Reverses the source: results are easy to check, and `n` counts real compiles."""
  def __init__(self, key: str = "toy") -> None: super().__init__(key); self.n = 0
  def compile(self, src: str) -> bytes:
    self.n += 1
    return src.encode()[::-1] * 50

@pytest.fixture
def cache(tmp_path, monkeypatch):
  monkeypatch.setenv("BAREGRAD_CACHE", str(tmp_path))
  monkeypatch.delenv("BAREGRAD_NOCACHE", raising=False)
  monkeypatch.setattr(hc, "_unwritable", set()); monkeypatch.setattr(hc, "_unreadable", set())
  return tmp_path

def compiled_twice(src: str, mangle) -> tuple[Toy, list[warnings.WarningMessage], str]:
  """Compile `src` (a miss), mangle its entry file, compile it again in a fresh compiler: (that compiler, warnings, path)."""
  Toy().compile_cached(src)
  path = Toy().cache_path(src)
  mangle(path)
  c = Toy()
  with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    assert c.compile_cached(src) == src.encode()[::-1] * 50
  return c, [x for x in w if issubclass(x.category, CompileCacheWarning)], path

def rewrite(path: str, f) -> None:
  with open(path, "rb") as fh: data = fh.read()
  with open(path, "wb") as fh: fh.write(f(data))

@pytest.mark.parametrize("what,mangle,says", [
  ("damaged", lambda d: d[:-10] + bytes([d[-10] ^ 0x40]) + d[-9:], "damaged"),
  ("truncated", lambda d: d[:len(d) // 2], "cut short"),
  ("header only", lambda d: d[:20], "cut short"),
  ("empty", lambda d: b"", "cut short"),
  ("overlong", lambda d: d + b"\0", "overlong"),
  ("not an entry (a bare payload)", lambda d: d[hc._HEAD.size:], "format"),
])
def test_bad_entry_is_reported_deleted_and_rebuilt(cache, what, mangle, says):
  c, w, path = compiled_twice("int f(void);", lambda p: rewrite(p, mangle))
  assert c.n == 1 and c.cache_misses == 1, f"{what}: the entry was not rebuilt"
  assert len(w) == 1 and path in str(w[0].message) and says in str(w[0].message), [str(x.message) for x in w]
  # the rebuilt entry is sound: the next compiler hits it without a word
  c2 = Toy()
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert c2.compile_cached("int f(void);") == b";)diov(f tni" * 50 and c2.n == 0

def test_entry_of_another_key_is_foreign(cache):
  """A sound entry copied to another key's name (a hand-copied cache, a bug) is not used for that key."""
  Toy().compile_cached("source A")
  def copy_a(path_b: str) -> None:
    with open(Toy().cache_path("source A"), "rb") as f: data = f.read()
    with open(path_b, "wb") as f: f.write(data)
  c, w, path = compiled_twice("source B", copy_a)
  assert c.n == 1 and len(w) == 1 and "another key" in str(w[0].message) and path in str(w[0].message)

def test_unpack_checks_every_field():
  key, other = "ab" * 32, "cd" * 32
  e = pack_entry(key, b"payload")
  assert unpack_entry(e, key) == (b"payload", "")
  assert unpack_entry(e, other)[0] is None
  for i in range(len(e)):   # every single-byte change is caught
    assert unpack_entry(e[:i] + bytes([e[i] ^ 1]) + e[i + 1:], key)[0] is None, i
  for n in range(len(e)): assert unpack_entry(e[:n], key)[0] is None, n

def test_unwritable_cache_compiles_without_caching_with_one_warning(tmp_path, monkeypatch):
  """A file where the cache folder should be: every mkdir fails with a real OS error (this works as root, where a
  chmod'ed folder would not stop writes)."""
  (tmp_path / "blocker").write_bytes(b"")
  monkeypatch.setenv("BAREGRAD_CACHE", str(tmp_path / "blocker" / "cache"))
  monkeypatch.delenv("BAREGRAD_NOCACHE", raising=False)
  monkeypatch.setattr(hc, "_unwritable", set()); monkeypatch.setattr(hc, "_unreadable", set())
  c = Toy()
  with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    for s in ("a", "b", "c", "a"): assert c.compile_cached(s) == s.encode()[::-1] * 50
  w = [x for x in w if issubclass(x.category, CompileCacheWarning)]
  assert c.n == 4 and len(w) == 1 and "cannot be written" in str(w[0].message) and "blocker" in str(w[0].message)

def test_read_only_cache_still_serves_its_entries(cache, monkeypatch):
  """A read-only file system (EROFS on create): entries already there are used, new kernels compile uncached."""
  Toy().compile_cached("old")
  def erofs(*a, **k): raise OSError(errno.EROFS, "Read-only file system")
  monkeypatch.setattr(hc.tempfile, "mkstemp", erofs)
  c = Toy()
  with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    assert c.compile_cached("old") == b"dlo" * 50 and c.n == 0
    assert c.compile_cached("new") == b"wen" * 50 and c.compile_cached("new2") == b"2wen" * 50 and c.n == 2
  assert len([x for x in w if issubclass(x.category, CompileCacheWarning)]) == 1

@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a mode-555 folder")
def test_chmod_read_only_cache(cache):
  os.makedirs(cache / "compile")
  os.chmod(cache / "compile", 0o555)
  try:
    with pytest.warns(CompileCacheWarning, match="cannot be written"): assert Toy().compile_cached("x") == b"x" * 50
  finally: os.chmod(cache / "compile", 0o755)

def test_full_disk_leaves_no_temporary_file(cache, monkeypatch):
  real = os.fdopen
  class Full:
    def __init__(self, f): self.f = f
    def __enter__(self): return self
    def __exit__(self, *a): self.f.close()
    def write(self, b): raise OSError(errno.ENOSPC, "No space left on device")
  monkeypatch.setattr(hc.os, "fdopen", lambda fd, *a, **k: Full(real(fd, *a, **k)))
  with pytest.warns(CompileCacheWarning, match="No space left"): assert Toy().compile_cached("x") == b"x" * 50
  assert os.listdir(cache / "compile") == []

def test_interrupted_write_leaves_no_temporary_file(cache, monkeypatch):
  monkeypatch.setattr(hc.os, "replace", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
  with pytest.raises(KeyboardInterrupt): Toy().compile_cached("x")
  assert os.listdir(cache / "compile") == []

WRITER = textwrap.dedent("""
  import os, sys, time, hashlib
  sys.path.insert(0, {root!r})
  from baregrad.hal import compiler as hc
  class Slow(hc.Compiler):
    def compile(self, src):
      time.sleep(0.05)
      return hashlib.sha256(src.encode()).digest() * 40000   # 1.28 MB: a write takes long enough to overlap
  c, want = Slow("slow"), hashlib.sha256(b"same source").digest() * 40000
  key = c.cache_key("same source")
  path = os.path.join(hc.cache_dir(), "compile", key)
  while time.time() < {start}: time.sleep(0.001)
  for i in range(15):   # every round writes the same entry while the others read it
    assert c.compile_cached("same source") == want
    hc._write(path, hc.pack_entry(key, want))
    try:
      with open(path, "rb") as f: lib, why = hc.unpack_entry(f.read(), key)
    except FileNotFoundError: continue
    assert lib == want, why
  print("ok", c.cache_misses)
""")

def test_concurrent_writers_never_leave_a_half_written_entry(cache):
  import time
  script = WRITER.format(root=ROOT, start=time.time() + 1.5)
  env = {**os.environ, "BAREGRAD_CACHE": str(cache)}
  procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
  outs = [p.communicate(timeout=120) for p in procs]
  for p, (out, err) in zip(procs, outs):
    assert p.returncode == 0 and out.startswith("ok"), err
    assert "CompileCacheWarning" not in err, err
  assert os.listdir(cache / "compile") == [Compiler("slow").cache_key("same source")]

RUN = textwrap.dedent("""
  import sys; sys.path.insert(0, {root!r})
  from baregrad import Tensor
  print((Tensor([1.0, 2.0, 3.0]) * 2 + 1).numpy().tolist())
""")

def test_damaged_kernel_in_the_cache_is_rebuilt_not_run(tmp_path):
  """End to end on the CPU device: a real kernel's entry with flipped code bytes (before: SIGILL or a wrong value), cut
  short or replaced by garbage (before: an ElfLoadError without the file's name, on every later run)."""
  env = {**os.environ, "BAREGRAD_CACHE": str(tmp_path)}
  env.pop("BAREGRAD_NOCACHE", None)
  def run() -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", RUN.format(root=ROOT)], env=env, capture_output=True, text=True, timeout=120)
  first = run()
  assert first.returncode == 0 and first.stdout.strip() == "[3.0, 5.0, 7.0]", first.stderr
  entries = sorted((tmp_path / "compile").iterdir())
  assert entries
  for mangle in (lambda d: bytes(b ^ 0xFF for b in d[:hc._HEAD.size]) + d[hc._HEAD.size:],   # header
                 lambda d: d[:hc._HEAD.size] + bytes(b ^ 0xFF for b in d[hc._HEAD.size:]),   # every code byte
                 lambda d: d[:len(d) // 2], lambda d: b"garbage" * 9):
    for p in entries: rewrite(str(p), mangle)
    r = run()
    assert r.returncode == 0 and r.stdout.strip() == "[3.0, 5.0, 7.0]", r.stderr
    assert "CompileCacheWarning" in r.stderr and all(str(p) in r.stderr for p in entries), r.stderr
    again = run()   # healed: no warning the next time
    assert again.returncode == 0 and "CompileCacheWarning" not in again.stderr, again.stderr

def test_entries_of_the_earlier_format_are_not_read(cache):
  """Before the checked format an entry was the bare code at sha256(key, version, source): such files are never looked
  at (the format is part of the key), so an upgrade brings no warnings, and they cannot be loaded unchecked."""
  import hashlib
  h = hashlib.sha256()
  for part in ("toy", "", "int g;"): h.update(part.encode()); h.update(b"\0")
  os.makedirs(cache / "compile")
  (cache / "compile" / h.hexdigest()).write_bytes(b"stale code")
  c = Toy()
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert c.compile_cached("int g;") == b";g tni" * 50 and c.n == 1
  assert Toy().cache_key("int g;") != h.hexdigest()

def test_debug_1_reports_the_compile_time_of_a_schedule(monkeypatch, capsys):
  # a model's first run spends its time compiling: DEBUG=1 says how many kernels and how long, per realize
  from baregrad import Tensor, knobs
  monkeypatch.setenv("DEBUG", "1"); knobs.reset()
  try:
    n = 37 + time.time_ns() % 1000   # a shape no other test compiles
    (Tensor.ones(n, 3) * 3).sum(0).numpy()
  finally:
    monkeypatch.delenv("DEBUG"); knobs.reset()
  err = capsys.readouterr().err
  assert re.search(r"\*\*\* compiled \d+ of \d+ kernels in \d+\.\d\d s", err), err
