"""baregrad.datasets: MNIST/Fashion-MNIST idx files and CIFAR-10 pickles from a folder, or downloaded once (from a
local HTTP server on 127.0.0.1 serving small generated files); broken downloads retried once, then reported with
nothing partial left in the cache; a folder without the files names the files it looked for."""
import gzip, http.server, io, os, pickle, tarfile, threading
import numpy as np
import pytest
from baregrad import datasets
from baregrad.datasets import read_idx, write_idx, DownloadError

rng = np.random.default_rng(0)
def mnist_arrays():
  return (rng.integers(0, 256, (6, 28, 28), dtype=np.uint8), rng.integers(0, 10, 6, dtype=np.uint8),
          rng.integers(0, 256, (3, 28, 28), dtype=np.uint8), rng.integers(0, 10, 3, dtype=np.uint8))

def idx_bytes(a, gz):
  import struct
  body = struct.pack(">HBB", 0, 8, a.ndim) + struct.pack(f">{a.ndim}I", *a.shape) + a.tobytes()
  return gzip.compress(body) if gz else body

def check(d, arrays):
  for t, a in zip(d, arrays):
    assert t.shape == a.shape and t.dtype.name == "uchar"
    np.testing.assert_array_equal(t.numpy(), a)

# ---- a local HTTP server: path -> bytes, with faults on demand
class Server:
  def __init__(self):
    self.files, self.hits, self.faults = {}, {}, {}  # faults: path -> list of "short" | "500" | "garbage", one per request
    srv = self
    class H(http.server.BaseHTTPRequestHandler):
      def log_message(self, *a): pass
      def do_GET(self):
        srv.hits[self.path] = srv.hits.get(self.path, 0) + 1
        fault = srv.faults.get(self.path, []).pop(0) if srv.faults.get(self.path) else None
        if fault == "500": self.send_error(500, "boom"); return
        if self.path not in srv.files: self.send_error(404); return
        data = srv.files[self.path]
        if fault == "garbage": data = b"\x1f\x8b" + b"\0" * (len(data) - 2)  # a gzip header, then junk of the same size
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[:len(data) // 2] if fault == "short" else data)  # "short": the connection ends early
    self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
    threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
  def close(self): self.httpd.shutdown(); self.httpd.server_close()

@pytest.fixture
def server():
  s = Server()
  yield s
  s.close()

@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
  monkeypatch.setenv("BAREGRAD_CACHE", str(tmp_path / "cache"))
  return tmp_path / "cache"

def cached_files(cache):
  d = cache / "datasets"
  return sorted(os.listdir(d)) if d.exists() else []

# ---- MNIST / Fashion-MNIST
def test_mnist_from_a_folder_plain_gz_and_dotted_names(tmp_path):
  arrays = mnist_arrays()
  d = tmp_path / "mnist"; d.mkdir()
  names = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte", "t10k-images.idx3-ubyte", "t10k-labels-idx1-ubyte.gz"]
  for n, a in zip(names, arrays): write_idx(str(d / n), a)
  check(datasets.mnist(str(d)), arrays)

def test_idx_round_trip_other_dtypes(tmp_path):
  for a in (np.arange(6, dtype=np.int32).reshape(2, 3) - 3, np.linspace(0, 1, 5, dtype=np.float32), np.arange(4, dtype=np.float64)):
    write_idx(str(tmp_path / "a.gz"), a)
    np.testing.assert_array_equal(read_idx(str(tmp_path / "a.gz")), a)

def test_a_folder_without_the_files_names_them(tmp_path):
  (tmp_path / "x").mkdir(); (tmp_path / "x" / "readme.txt").write_text("hi")
  with pytest.raises(FileNotFoundError) as e: datasets.mnist(str(tmp_path / "x"))
  msg = str(e.value)
  for n in datasets.IDX_FILES: assert n in msg and n + ".gz" in msg
  assert str(tmp_path / "x") in msg and "readme.txt" in msg
  with pytest.raises(FileNotFoundError, match="does not exist"): datasets.fashion_mnist(str(tmp_path / "nowhere"))

def test_a_bad_idx_file_is_named(tmp_path):
  arrays = mnist_arrays()
  for n, a in zip(datasets.IDX_FILES, arrays): write_idx(str(tmp_path / n), a)
  (tmp_path / datasets.IDX_FILES[1]).write_bytes(b"\0\0\x08\x01\0\0\0\x09" + b"\1" * 4)  # header says 9 labels, 4 follow
  with pytest.raises(ValueError, match="train-labels-idx1-ubyte.*9"): datasets.mnist(str(tmp_path))

def test_download_once_into_the_cache(server, cache):
  arrays = mnist_arrays()
  for n, a in zip(datasets.IDX_FILES, arrays): server.files[f"/fashion/{n}.gz"] = idx_bytes(a, gz=True)
  check(datasets.fashion_mnist(server.url + "/fashion"), arrays)
  assert sum(server.hits.values()) == 4 and len(cached_files(cache)) == 4
  check(datasets.fashion_mnist(server.url + "/fashion/"), arrays)  # second time: from the cache
  assert sum(server.hits.values()) == 4

def test_download_takes_the_plain_files_when_there_is_no_gz(server):
  arrays = mnist_arrays()
  for n, a in zip(datasets.IDX_FILES, arrays): server.files[f"/m/{n}"] = idx_bytes(a, gz=False)
  check(datasets.mnist(server.url + "/m"), arrays)

def test_a_broken_download_is_retried_once(server, cache):
  server.files["/f.gz"] = gzip.compress(b"x" * 5000)
  server.faults["/f.gz"] = ["short"]
  p = datasets.fetch(server.url + "/f.gz")
  assert server.hits["/f.gz"] == 2 and gzip.open(p).read() == b"x" * 5000
  assert cached_files(cache) == [os.path.basename(p)]  # no leftover temporary file

@pytest.mark.parametrize("faults", [["short", "short"], ["500", "garbage"]])
def test_broken_twice_is_reported_and_nothing_is_kept(server, cache, faults):
  server.files["/f.gz"] = gzip.compress(b"y" * 5000)
  server.faults["/f.gz"] = list(faults)
  with pytest.raises(DownloadError) as e: datasets.fetch(server.url + "/f.gz")
  assert server.url + "/f.gz" in str(e.value) and "2 times" in str(e.value)
  assert server.hits["/f.gz"] == 2 and cached_files(cache) == []
  server.faults["/f.gz"] = []
  assert gzip.open(datasets.fetch(server.url + "/f.gz")).read() == b"y" * 5000  # a later try starts clean

def test_missing_on_the_server(server):
  with pytest.raises(FileNotFoundError, match="404"): datasets.fetch(server.url + "/nope.gz")
  with pytest.raises(FileNotFoundError, match="none of these"): datasets.mnist(server.url + "/empty")

# ---- CIFAR-10
def cifar_batches():
  return {n: {b"batch_label": n.encode(), b"labels": list(rng.integers(0, 10, 4)), b"data": rng.integers(0, 256, (4, 3072), dtype=np.uint8)}
          for n in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]}

def check_cifar(d, batches):
  assert d.x_train.shape == (20, 3, 32, 32) and d.y_train.shape == (20,) and d.x_test.shape == (4, 3, 32, 32)
  np.testing.assert_array_equal(d.x_train.numpy()[4:8], batches["data_batch_2"][b"data"].reshape(4, 3, 32, 32))
  np.testing.assert_array_equal(d.y_test.numpy(), batches["test_batch"][b"labels"])

def make_tar(batches) -> bytes:
  buf = io.BytesIO()
  with tarfile.open(fileobj=buf, mode="w:gz") as t:
    for n, b in batches.items():
      data = pickle.dumps(b)
      info = tarfile.TarInfo(f"cifar-10-batches-py/{n}"); info.size = len(data)
      t.addfile(info, io.BytesIO(data))
  return buf.getvalue()

def test_cifar10_from_a_folder_an_archive_and_a_url(tmp_path, server):
  batches = cifar_batches()
  d = tmp_path / "c" / "cifar-10-batches-py"; d.mkdir(parents=True)
  for n, b in batches.items(): (d / n).write_bytes(pickle.dumps(b))
  check_cifar(datasets.cifar10(str(tmp_path / "c")), batches)
  (tmp_path / "t").mkdir(); (tmp_path / "t" / "cifar-10-python.tar.gz").write_bytes(make_tar(batches))
  check_cifar(datasets.cifar10(str(tmp_path / "t")), batches)
  server.files["/cifar-10-python.tar.gz"] = make_tar(batches)
  check_cifar(datasets.cifar10(server.url + "/cifar-10-python.tar.gz"), batches)

def test_cifar10_missing_files_and_unsafe_pickles(tmp_path):
  with pytest.raises(FileNotFoundError) as e: datasets.cifar10(str(tmp_path))
  assert "data_batch_1" in str(e.value) and "test_batch" in str(e.value) and "cifar-10-python.tar.gz" in str(e.value)
  class Evil:
    def __reduce__(self): return (os.system, ("true",))
  for i in range(1, 6): (tmp_path / f"data_batch_{i}").write_bytes(pickle.dumps({b"data": Evil(), b"labels": []}))
  (tmp_path / "test_batch").write_bytes(pickle.dumps({}))
  with pytest.raises(pickle.UnpicklingError, match="only NumPy arrays"): datasets.cifar10(str(tmp_path))

def test_download_shows_progress_on_a_terminal(server, monkeypatch, capfd):
  import baregrad.datasets.download as fetch_mod
  from baregrad.helpers import Progress
  class Now(Progress):
    def __init__(self, *a, **kw): super().__init__(*a, **{**kw, "delay": 0.0})
  monkeypatch.setattr(fetch_mod, "Progress", Now)
  monkeypatch.setenv("PROGRESS", "1")
  server.files["/big.bin"] = b"z" * 300000
  datasets.fetch(server.url + "/big.bin")
  err = capfd.readouterr().err
  assert "download big.bin:" in err and "100%" in err
