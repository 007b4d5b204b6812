"""baregrad.datasets: MNIST, Fashion-MNIST and CIFAR-10 as Tensors, from a local folder or downloaded once.

    from baregrad import datasets
    d = datasets.mnist()                       # downloaded once into $BAREGRAD_CACHE/datasets (~/.cache/baregrad)
    d = datasets.mnist("~/data/mnist")         # a folder with the idx files (plain or .gz)
    d = datasets.mnist("https://mirror/mnist/")  # another mirror: the file names are appended to the URL
    d.x_train.shape, d.x_train.dtype           # (60000, 28, 28) uint8; labels: (60000,) uint8

Each returns Data(x_train, y_train, x_test, y_test), Tensors holding the files' values unchanged (uint8 images
and labels). To draw random minibatches, index the host copy (`x = d.x_train.numpy(); x[idx]`): indexing a Tensor
with an integer Tensor is a one-hot compare and sum whose work grows with the dataset (see README)."""
from __future__ import annotations
import gzip, os, pickle, tarfile, zlib
from typing import Any, NamedTuple
import numpy as np
from baregrad.tensor import Tensor
from baregrad.datasets.download import fetch, is_url, cache_path, DownloadError
from baregrad.datasets.idx import read_idx, read_idx_header, write_idx, DatasetFormatError

MNIST_URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"
FASHION_MNIST_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CLASSES = 10   # MNIST's digits, Fashion-MNIST's and CIFAR-10's classes
IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")

class Data(NamedTuple):
  x_train: Tensor
  y_train: Tensor
  x_test: Tensor
  y_test: Tensor

def mnist(source: str | os.PathLike | None = None, device: str | None = None) -> Data:
  """MNIST: 60000 training and 10000 test images (28x28 uint8) with labels 0..9 (uint8). `source`: a folder with
  the four idx files (each plain or .gz), or a base URL to download them from (default: a public mirror)."""
  return _idx_dataset("MNIST", source if source is not None else MNIST_URL, device)

def fashion_mnist(source: str | os.PathLike | None = None, device: str | None = None) -> Data:
  """Fashion-MNIST: MNIST's format and shapes, pictures of clothing (labels 0..9). `source` as for mnist()."""
  return _idx_dataset("Fashion-MNIST", source if source is not None else FASHION_MNIST_URL, device)

def cifar10(source: str | os.PathLike | None = None, device: str | None = None) -> Data:
  """CIFAR-10: 50000 training and 10000 test images (N, 3, 32, 32) uint8 with labels 0..9 (uint8), from "CIFAR-10
  python version": `source` is a folder holding data_batch_1..5 and test_batch (directly or in cifar-10-batches-py/)
  or cifar-10-python.tar.gz, or the URL of that archive (default: the dataset's home page)."""
  source = source if source is not None else CIFAR10_URL
  names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
  if is_url(source): batches = _tar_batches(fetch(str(source)), names)
  else:
    d = os.path.expanduser(os.fspath(source))
    found = next((b for b in (d, os.path.join(d, "cifar-10-batches-py")) if all(os.path.isfile(os.path.join(b, n)) for n in names)), None)
    if found is not None: batches = {n: _unpickle_file(os.path.join(found, n)) for n in names}
    elif os.path.isfile(tgz := os.path.join(d, "cifar-10-python.tar.gz")): batches = _tar_batches(tgz, names)
    else: raise FileNotFoundError(_missing("CIFAR-10", d, [f"{n} (in the folder or in cifar-10-batches-py/)" for n in names] + ["or cifar-10-python.tar.gz"]))
  def split(ns: list[str]) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for n in ns:
      b = batches[n]
      if not isinstance(b, dict): raise DatasetFormatError(f"CIFAR-10 batch {n} holds a {type(b).__name__}; expected a dict with 'data' and 'labels'")
      x, y = b.get(b"data", b.get("data")), b.get(b"labels", b.get("labels"))
      if x is None or y is None: raise DatasetFormatError(f"CIFAR-10 batch {n}: expected the keys 'data' and 'labels', found {sorted(map(str, b))}")
      x, y = _uint8s(x, n, "data"), _uint8s(y, n, "labels")
      if x.ndim != 2 or x.shape[1] != 3 * 32 * 32 or y.ndim != 1 or len(y) != len(x):
        raise DatasetFormatError(f"CIFAR-10 batch {n}: data {x.shape} and labels {y.shape}; expected (N, 3072) and (N,)")
      if y.size and (m := int(y.max())) >= CLASSES: raise DatasetFormatError(f"CIFAR-10 batch {n} holds label {m}; expected labels 0..{CLASSES - 1}")
      xs.append(x.reshape(-1, 3, 32, 32)); ys.append(y)
    return np.concatenate(xs), np.concatenate(ys)
  return _tensors(*split(names[:5]), *split(names[5:]), device=device)

# ---- helpers
def _idx_dataset(what: str, source: Any, device: str | None) -> Data:
  if is_url(source):
    base = str(source).rstrip("/") + "/"
    paths = [_fetch_first([base + n + ".gz", base + n]) for n in IDX_FILES]
  else:
    d = os.path.expanduser(os.fspath(source))
    paths, missing = [], []
    for n in IDX_FILES:
      cands = [n, n + ".gz", n.replace("-idx", ".idx"), n.replace("-idx", ".idx") + ".gz"]  # some mirrors write t10k-images.idx3-ubyte
      p = next((os.path.join(d, c) for c in cands if os.path.isfile(os.path.join(d, c))), None)
      if p is None: missing.append(" or ".join(cands))
      paths.append(p)
    if missing: raise FileNotFoundError(_missing(what, d, missing))
  try: return _read_idx_set(what, paths, device)
  except DatasetFormatError as e:
    if not is_url(source): raise
    raise DatasetFormatError(f"{e} (downloaded from {base}: delete the file to download it again)") from None

def _read_idx_set(what: str, paths: list[str], device: str | None) -> Data:
  """The four idx files checked as a set: images and labels where each belongs, counts that match, labels 0..9."""
  # the headers first: a labels file given as images (or the reverse) is refused before megabytes are read
  heads = [read_idx_header(p) for p in paths]
  for i, (p, h) in enumerate(zip(paths, heads)):
    images = i % 2 == 0
    want = "images: a 3-dimensional idx file (count, rows, columns)" if images else "labels: a 1-dimensional idx file"
    if h.code != 0x08 or len(h.shape) != (3 if images else 1):
      raise DatasetFormatError(f"{what}: {p} holds {h.describe()}; expected {want} of unsigned bytes (type 0x08)")
  for (x, y), (px, py) in ((heads[:2], paths[:2]), (heads[2:], paths[2:])):
    if x.shape[0] != y.shape[0]: raise DatasetFormatError(f"{what}: {px} has {x.shape[0]} images but {py} has {y.shape[0]} labels; expected as many of each")
  if heads[0].shape[1:] != heads[2].shape[1:]:
    raise DatasetFormatError(f"{what}: {paths[0]} has images of {heads[0].shape[1:]} but {paths[2]} of {heads[2].shape[1:]}; expected one size")
  arrays = [read_idx(p) for p in paths]
  for p, y in zip(paths[1::2], arrays[1::2]):
    if y.size and (m := int(y.max())) >= CLASSES:
      raise DatasetFormatError(f"{what}: {p} holds label {m} at index {int(y.argmax())}; expected labels 0..{CLASSES - 1}")
  return _tensors(*arrays, device=device)

def _fetch_first(urls: list[str]) -> str:
  """The first of `urls` the server has (a .gz, else the plain file)."""
  for u in urls:
    try: return fetch(u)
    except FileNotFoundError: continue
  raise FileNotFoundError(f"none of these is on the server: {', '.join(urls)}")

def _missing(what: str, folder: str, looked_for: list[str]) -> str:
  have = sorted(os.listdir(folder))[:12] if os.path.isdir(folder) else None
  where = f"folder {folder}" + (" (which does not exist)" if have is None else f" (it holds: {', '.join(have) or 'nothing'})")
  return f"{what}: the {where} lacks " + "; ".join(looked_for)

def _tensors(*arrays: np.ndarray, device: str | None) -> Data:
  return Data(*(Tensor(np.ascontiguousarray(a), device=device) for a in arrays))

def _uint8s(v: Any, batch: str, key: str) -> np.ndarray:
  """v (an array or a list of ints) as uint8, each value checked to fit."""
  try: a = np.asarray(v)
  except (ValueError, TypeError, OverflowError) as e: raise DatasetFormatError(f"CIFAR-10 batch {batch}: {key} is not an array ({e})") from None
  if a.dtype == np.uint8: return a
  if a.dtype.kind not in "iu" or (a.size and (a.min() < 0 or a.max() > 255)):
    raise DatasetFormatError(f"CIFAR-10 batch {batch}: {key} is {a.dtype} {a.shape}"
                             + (f" with values {a.min()}..{a.max()}" if a.size and a.dtype.kind in "iu" else "")
                             + "; expected integers 0..255")
  return a.astype(np.uint8)

class UnsafePickleError(DatasetFormatError, pickle.UnpicklingError):
  """A dataset pickle that asks to build something other than NumPy arrays (a pickle can run code): refused."""

class _NumpyOnly(pickle.Unpickler):
  """CIFAR's pickles hold dicts, lists, bytes and NumPy arrays: nothing else may be built (a pickle can run code)."""
  ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"), ("numpy", "ndarray"),
             ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar")}
  def find_class(self, module: str, name: str) -> Any:
    if (module, name) in self.ALLOWED: return super().find_class(module, name)
    raise UnsafePickleError(f"CIFAR-10 batch refers to {module}.{name}: only NumPy arrays are accepted in a dataset pickle")

def _unpickle(f: Any, where: str) -> dict:
  """The pickled batch in f; a damaged or unsafe pickle raises DatasetFormatError naming `where`."""
  try:
    with f: return _NumpyOnly(f, encoding="bytes").load()
  except UnsafePickleError as e: raise UnsafePickleError(f"{where}: {e}") from None
  except (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError,
          MemoryError, RecursionError, UnicodeDecodeError, zlib.error, tarfile.TarError, SystemError) as e:
    # what the restricted unpickler (and NumPy's array rebuilding) raise on damaged bytes (SystemError: numpy's
    # dtype.__setstate__ given a malformed state tuple "returned NULL without setting an exception", found by the fuzz)
    raise DatasetFormatError(f"{where}: not a readable CIFAR-10 batch pickle ({type(e).__name__}: {str(e)[:200]})") from None

def _unpickle_file(path: str) -> dict: return _unpickle(open(path, "rb"), path)

def _tar_batches(path: str, names: list[str]) -> dict[str, dict]:
  try:
    with tarfile.open(path, "r:gz") as t:
      members = {os.path.basename(m.name): m for m in t.getmembers() if m.isfile()}
      if missing := [n for n in names if n not in members]: raise FileNotFoundError(f"CIFAR-10: {path} lacks {', '.join(missing)}")
      return {n: _unpickle(t.extractfile(members[n]), f"{path} ({members[n].name})") for n in names}
  except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as e:
    raise DatasetFormatError(f"{path}: not a readable .tar.gz archive ({type(e).__name__}: {e})") from None

__all__ = ["Data", "mnist", "fashion_mnist", "cifar10", "fetch", "cache_path", "DownloadError", "read_idx", "read_idx_header",
           "write_idx", "DatasetFormatError", "UnsafePickleError",
           "MNIST_URL", "FASHION_MNIST_URL", "CIFAR10_URL"]
