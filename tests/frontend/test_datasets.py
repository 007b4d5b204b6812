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

# ---- issue 31: strict readers; every error a DatasetFormatError (a ValueError) naming the file and what was expected
from baregrad.datasets import DatasetFormatError, read_idx_header
import struct, pickle as _pickle

def test_truncated_or_corrupt_gz_is_named(tmp_path):
  a = rng.integers(0, 256, (50, 28, 28), dtype=np.uint8)
  good = idx_bytes(a, gz=True)
  p = tmp_path / "x-idx3-ubyte.gz"
  for data, pat in ((good[:len(good) // 2], "cut short"), (good[:-4], "cut short or corrupt"), (good[:12], "cut short"),
                    (good[:20] + bytes(b ^ 0x55 for b in good[20:200]) + good[200:], "corrupt"),
                    (b"not gzip at all", "corrupt")):
    p.write_bytes(data)
    with pytest.raises(DatasetFormatError, match=pat) as e: read_idx(str(p))
    assert str(p) in str(e.value)
  p.write_bytes(good)
  np.testing.assert_array_equal(read_idx(str(p)), a)

def test_idx_sizes_are_checked_before_reading(tmp_path):
  p = tmp_path / "a-idx"
  p.write_bytes(struct.pack(">HBB3I", 0, 8, 3, 60000, 28, 28) + b"\0" * 100)
  with pytest.raises(DatasetFormatError,
                     match=rf"{p}: header says 3-dimensional unsigned byte .* shape \(60000, 28, 28\) \(47040000 bytes of data\) but the file has 100"):
    read_idx(str(p))
  p.write_bytes(struct.pack(">HBB3I", 0, 8, 3, 2, 2, 2) + b"\0" * 9)
  with pytest.raises(DatasetFormatError, match="8 bytes of data.*has 9"): read_idx(str(p))
  g = tmp_path / "b.gz"
  g.write_bytes(gzip.compress(struct.pack(">HBB2I", 0, 0x0E, 2, 2**31, 4) + b"\0" * 64))   # claims 64 GiB: not allocated
  with pytest.raises(DatasetFormatError, match=rf"{g}: cut short: the data of .* needs 68719476736 bytes, the file has 64"): read_idx(str(g))
  g.write_bytes(gzip.compress(struct.pack(">HBB2I", 0, 8, 2, 1, 2) + b"\1\2\3"))
  with pytest.raises(DatasetFormatError, match="more bytes follow"): read_idx(str(g))
  g.write_bytes(gzip.compress(struct.pack(">HBB4I", 0, 0x0E, 4, 0, 2**32 - 1, 2**32 - 1, 2**32 - 1)))
  with pytest.raises(DatasetFormatError, match=r"fewer than 2\*\*63 bytes"): read_idx(str(g))
  g.write_bytes(gzip.compress(struct.pack(">HBB", 0, 8, 70) + struct.pack(">70I", *[0] * 70)))
  with pytest.raises(DatasetFormatError, match="at most 64 dimensions"): read_idx(str(g))
  g.write_bytes(gzip.compress(struct.pack(">HBB", 0, 0x0C, 2)))
  with pytest.raises(DatasetFormatError, match="the sizes of 2 dimensions needs 8 bytes, the file has 0"): read_idx(str(g))
  g.write_bytes(gzip.compress(b"\x1f\x8b\x08\x00"))
  with pytest.raises(DatasetFormatError, match="not an idx file"): read_idx(str(g))
  assert issubclass(DatasetFormatError, ValueError)

def _mnist_folder(d, arrays):
  d.mkdir(exist_ok=True)
  for n, a in zip(datasets.IDX_FILES, arrays): write_idx(str(d / n), a)

def test_mnist_refuses_the_wrong_kind_of_file(tmp_path):
  """An images file given as the labels file (or the reverse), labels of another type, counts that differ, labels
  out of 0..9: each refused, naming the file and what was expected."""
  x, y, xt, yt = mnist_arrays()
  cases = [((x, x, xt, yt), "train-labels-idx1-ubyte holds 3-dimensional unsigned byte .*; expected labels: a 1-dimensional idx file of unsigned bytes"),
           ((y, y, xt, yt), "train-images-idx3-ubyte holds 1-dimensional unsigned byte .*; expected images: a 3-dimensional"),
           ((x, y.astype(np.int32), xt, yt), r"train-labels-idx1-ubyte holds 1-dimensional int32 \(type 0x0c\)"),
           ((x, y, xt, y), r"t10k-images-idx3-ubyte has 3 images but .*t10k-labels-idx1-ubyte has 6 labels"),
           ((x, y, xt[:, :20], yt), r"has images of \(28, 28\) but .*t10k-images-idx3-ubyte of \(20, 28\)"),
           ((x, np.where(y == y[2], 10, y).astype(np.uint8), xt, yt), r"train-labels-idx1-ubyte holds label 10 at index 2; expected labels 0..9")]
  for i, (arrays, pat) in enumerate(cases):
    _mnist_folder(tmp_path / str(i), arrays)
    with pytest.raises(DatasetFormatError, match=pat) as e: datasets.mnist(str(tmp_path / str(i)))
    assert str(tmp_path / str(i)) in str(e.value)
  assert read_idx_header(str(tmp_path / "0" / datasets.IDX_FILES[0])).shape == (6, 28, 28)

def test_cifar10_damaged_files_are_named(tmp_path):
  batches = cifar_batches()
  d = tmp_path / "c"; d.mkdir()
  for n, b in batches.items(): (d / n).write_bytes(_pickle.dumps(b))
  full = (d / "data_batch_3").read_bytes()
  for data, pat in ((full[:len(full) // 2], "not a readable CIFAR-10 batch pickle"), (b"garbage", "not a readable"),
                    (_pickle.dumps([1, 2]), "holds a list; expected a dict"),
                    (_pickle.dumps({b"data": np.zeros((4, 3072), np.uint8), b"labels": [1, 2, 300, 4]}), r"labels is int64 \(4,\) with values 1..300"),
                    (_pickle.dumps({b"data": np.zeros((4, 3072), np.uint8), b"labels": [1, 2, 11, 4]}), "label 11; expected labels 0..9"),
                    (_pickle.dumps({b"data": np.zeros((4, 3071), np.uint8), b"labels": [1, 2, 3, 4]}), r"data \(4, 3071\).*expected \(N, 3072\)")):
    (d / "data_batch_3").write_bytes(data)
    with pytest.raises(DatasetFormatError, match=pat) as e: datasets.cifar10(str(d))
    assert "data_batch_3" in str(e.value)
  (d / "data_batch_3").write_bytes(full)
  check_cifar(datasets.cifar10(str(d)), batches)
  t = tmp_path / "t"; t.mkdir()
  tgz = make_tar(batches)
  (t / "cifar-10-python.tar.gz").write_bytes(tgz[:len(tgz) // 2])
  with pytest.raises(DatasetFormatError, match=r"cifar-10-python.tar.gz.*not a readable"): datasets.cifar10(str(t))

def test_a_bad_download_names_its_url(server):
  x, y, xt, yt = mnist_arrays()
  for n, a in zip(datasets.IDX_FILES, (x, x, xt, yt)): server.files[f"/m/{n}.gz"] = idx_bytes(a, gz=True)
  with pytest.raises(DatasetFormatError, match=rf"train-labels-idx1-ubyte.gz holds 3-dimensional .*downloaded from {server.url}/m/: delete the file"):
    datasets.mnist(server.url + "/m")
