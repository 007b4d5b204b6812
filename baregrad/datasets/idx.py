"""MNIST-style idx files (the format of MNIST and Fashion-MNIST), plain or gzipped."""
from __future__ import annotations
import gzip, struct
import numpy as np

# idx type codes -> big-endian NumPy dtypes (http://yann.lecun.com/exdb/mnist/, "THE IDX FILE FORMAT")
IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}

def read_idx(path: str) -> np.ndarray:
  """The array in an idx file (`.gz` is decompressed), in native byte order."""
  with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f: data = f.read()
  if len(data) < 4: raise ValueError(f"{path}: {len(data)} bytes is too short for an idx header")
  zero, code, ndim = struct.unpack(">HBB", data[:4])
  if zero != 0 or code not in IDX_DTYPES:
    raise ValueError(f"{path}: not an idx file (magic {data[:4].hex()}; expected 0000 then a type code in "
                     f"{', '.join(hex(c) for c in IDX_DTYPES)} and the number of dimensions)")
  if len(data) < 4 + 4 * ndim: raise ValueError(f"{path}: header for {ndim} dimensions is cut short")
  shape = struct.unpack(f">{ndim}I", data[4:4 + 4 * ndim])
  dt = np.dtype(IDX_DTYPES[code])
  n = int(np.prod(shape, dtype=np.int64))
  if len(data) - 4 - 4 * ndim != n * dt.itemsize:
    raise ValueError(f"{path}: header says shape {shape} ({n * dt.itemsize} bytes of data) but the file has {len(data) - 4 - 4 * ndim}")
  return np.frombuffer(data, dt, count=n, offset=4 + 4 * ndim).reshape(shape).astype(dt.newbyteorder("="))

def write_idx(path: str, a: np.ndarray) -> None:
  """Write `a` as an idx file (gzipped if the name ends in .gz): for tests and for converting data."""
  code = next((c for c, d in IDX_DTYPES.items() if np.dtype(d).newbyteorder("=") == a.dtype.newbyteorder("=")), None)
  if code is None: raise ValueError(f"idx has no type code for {a.dtype}; use one of {sorted(set(IDX_DTYPES.values()))}")
  body = struct.pack(">HBB", 0, code, a.ndim) + struct.pack(f">{a.ndim}I", *a.shape) + a.astype(IDX_DTYPES[code]).tobytes()
  with (gzip.open(path, "wb") if path.endswith(".gz") else open(path, "wb")) as f: f.write(body)
