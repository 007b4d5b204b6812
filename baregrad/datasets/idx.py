"""MNIST-style idx files (the format of MNIST and Fashion-MNIST), plain or gzipped.

An idx file (http://yann.lecun.com/exdb/mnist/, "THE IDX FILE FORMAT"): two zero bytes, a type code, the number of
dimensions n, n big-endian uint32 sizes, then the elements big-endian, row-major; nothing after them."""
from __future__ import annotations
import gzip, os, struct, zlib
import numpy as np

# idx type codes -> big-endian NumPy dtypes
IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
IDX_NAMES = {0x08: "unsigned byte", 0x09: "signed byte", 0x0B: "int16", 0x0C: "int32", 0x0D: "float32", 0x0E: "float64"}

class DatasetFormatError(ValueError):
  """A dataset file that does not hold what its format says (cut short, corrupt, the wrong kind of file); the message
  names the file and what was expected."""

class IdxHeader:
  """What an idx file's header says: the type code, the shape, and the NumPy dtype of the elements."""
  def __init__(self, code: int, shape: tuple[int, ...]) -> None:
    self.code, self.shape, self.dtype = code, shape, np.dtype(IDX_DTYPES[code])
  @property
  def nbytes(self) -> int: return int(np.prod(self.shape, dtype=object)) * self.dtype.itemsize
  def describe(self) -> str:
    return f"{len(self.shape)}-dimensional {IDX_NAMES[self.code]} (type {self.code:#04x}) data of shape {self.shape}"

def _open(path: str):
  return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")

def _read_exactly(f, n: int, path: str, what: str) -> bytes:
  """n bytes from f, or DatasetFormatError naming the file (a short read, a corrupt or cut-short .gz). Read in chunks:
  a header's size is a claim, so memory grows with the bytes that are there, not with the claim."""
  parts, got = [], 0
  try:
    while got < n and (chunk := f.read(min(n - got, 1 << 24))):
      parts.append(chunk)
      got += len(chunk)
  except (EOFError, gzip.BadGzipFile, zlib.error) as e:
    raise DatasetFormatError(f"{path}: the compressed data is cut short or corrupt while reading {what} ({type(e).__name__}: {e})") from None
  if got < n: raise DatasetFormatError(f"{path}: cut short: {what} needs {n} bytes, the file has {got}")
  return b"".join(parts)

def _header(f, path: str) -> IdxHeader:
  head = _read_exactly(f, 4, path, "the idx header")
  zero, code, ndim = struct.unpack(">HBB", head)
  if zero != 0 or code not in IDX_DTYPES:
    raise DatasetFormatError(f"{path}: not an idx file (magic {head.hex()}; expected 0000 then a type code in "
                             f"{', '.join(f'{c:02x}' for c in IDX_DTYPES)} and the number of dimensions)")
  h = IdxHeader(code, struct.unpack(f">{ndim}I", _read_exactly(f, 4 * ndim, path, f"the sizes of {ndim} dimensions")))
  # NumPy's bound, which it applies to the non-zero sizes even of an empty array; also at most 64 dimensions
  if ndim > 64 or int(np.prod([d for d in h.shape if d], dtype=object)) * h.dtype.itemsize >= 2**63:
    raise DatasetFormatError(f"{path}: header says shape {h.shape}; expected at most 64 dimensions and fewer than 2**63 bytes")
  return h

def read_idx_header(path: str) -> IdxHeader:
  """The header of an idx file (plain or .gz), checked; reads only the header."""
  path = os.fspath(path)
  with _open(path) as f: return _header(f, path)

def read_idx(path: str) -> np.ndarray:
  """The array in an idx file (`.gz` is decompressed), in native byte order. A file that is not idx, is cut short,
  has bytes after its data, or whose compression is corrupt raises DatasetFormatError naming it; a plain file's size is
  checked against the header before anything is read, a .gz file is read no further than the header says."""
  path = os.fspath(path)
  with _open(path) as f:
    h = _header(f, path)
    n = h.nbytes
    if not path.endswith(".gz") and (have := os.fstat(f.fileno()).st_size - f.tell()) != n:
      raise DatasetFormatError(f"{path}: header says {h.describe()} ({n} bytes of data) but the file has {have}")
    data = _read_exactly(f, n, path, f"the data of {h.describe()}")
    try: extra = f.read(1)
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
      raise DatasetFormatError(f"{path}: the compressed data is cut short or corrupt after the {n} bytes of {h.describe()} ({type(e).__name__}: {e})") from None
    if extra: raise DatasetFormatError(f"{path}: header says {h.describe()} ({n} bytes of data) but more bytes follow")
  return np.frombuffer(data, h.dtype, count=n // h.dtype.itemsize).reshape(h.shape).astype(h.dtype.newbyteorder("="))

def write_idx(path: str, a: np.ndarray) -> None:
  """Write `a` as an idx file (gzipped if the name ends in .gz): for tests and for converting data."""
  code = next((c for c, d in IDX_DTYPES.items() if np.dtype(d).newbyteorder("=") == a.dtype.newbyteorder("=")), None)
  if code is None: raise ValueError(f"idx has no type code for {a.dtype}; use one of {sorted(set(IDX_DTYPES.values()))}")
  if a.ndim > 255 or any(s >= 2**32 for s in a.shape): raise ValueError(f"idx holds up to 255 dimensions of fewer than 2**32 elements; got shape {a.shape}")
  body = struct.pack(">HBB", 0, code, a.ndim) + struct.pack(f">{a.ndim}I", *a.shape) + a.astype(IDX_DTYPES[code]).tobytes()
  with (gzip.open(path, "wb") if path.endswith(".gz") else open(path, "wb")) as f: f.write(body)
