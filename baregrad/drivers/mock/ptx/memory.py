"""Memory of the interpreted GPU: the flat virtual address space (`Memory`, regions backed by NumPy byte arrays: an
access outside them or misaligned raises GPUFault), the generic-address windows of shared and local memory (`Windows`),
and the per-block shared and per-thread local stores a launch allocates."""
from __future__ import annotations
import numpy as np
import numpy.typing as npt
from baregrad.drivers.mock.ptx.errors import GPUFault

SHARED_WINDOW = 0x0000_7F00_0000_0000


LOCAL_WINDOW = 0x0000_7E00_0000_0000


WINDOW_SIZE = 1 << 32


class Windows:
  """Where generic addresses reach shared and local memory (the apertures, `size` bytes each) and the bases cvta
  converts with (default: the apertures)."""
  __slots__ = ("shared", "local", "size", "cvta_shared", "cvta_local")

  def __init__(self, shared: int = SHARED_WINDOW, local: int = LOCAL_WINDOW, size: int = WINDOW_SIZE,
               cvta_shared: int | None = None, cvta_local: int | None = None) -> None:
    self.shared, self.local, self.size = int(shared), int(local), int(size)
    self.cvta_shared = self.shared if cvta_shared is None else int(cvta_shared)
    self.cvta_local = self.local if cvta_local is None else int(cvta_local)

  def route(self, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(shared mask, local mask) of generic addresses `a` (uint64 array)."""
    sh = (a >= np.uint64(self.shared)) & (a < np.uint64(self.shared + self.size))
    lo = (a >= np.uint64(self.local)) & (a < np.uint64(self.local + self.size))
    return sh, lo


_DEFAULT_WINDOWS = Windows()


class _Region:
  __slots__ = ("va", "size", "data", "name")

  def __init__(self, va, size, data, name) -> None:
    self.va, self.size, self.data, self.name = va, size, data, name


class Memory:
  """A flat GPU virtual address space: mapped regions backed by NumPy byte arrays.

  Any access that is not entirely inside one mapped region raises `GPUFault`."""

  def __init__(self) -> None:
    self._regions: list[_Region] = []
    self._starts = np.zeros(0, np.uint64)
    self._next = 0x0000_0001_0000_0000
    self.module_globals = {}  # id(PTXModule) -> {name: va}
    self.recorder = None      # a set: device loads/stores add (region va, "r" | "w") to it

  # -- mapping
  def map(self, va: int, size: int, data: np.ndarray | bytes | None = None, name: str = "") -> np.ndarray:
    """Map [va, va+size) backed by a new zeroed byte array (or `data`, a uint8 array)."""
    va, size = int(va), int(size)
    if size <= 0:
      raise ValueError("map: size must be positive")
    for w in (SHARED_WINDOW, LOCAL_WINDOW):
      if va < w + WINDOW_SIZE and w < va + size:
        raise ValueError(f"map: [{va:#x}, {va + size:#x}) overlaps a shared/local window")
    for r in self._regions:
      if va < r.va + r.size and r.va < va + size:
        raise ValueError(f"map: [{va:#x}, {va + size:#x}) overlaps mapping at {r.va:#x}")
    if data is None:
      data = np.zeros(size, np.uint8)
    else:
      data = np.asarray(data)
      if data.dtype != np.uint8 or data.ndim != 1 or data.size != size:
        raise ValueError("map: data must be a flat uint8 array of `size` bytes")
    self._regions.append(_Region(va, size, data, name))
    self._regions.sort(key=lambda r: r.va)
    self._starts = np.array([r.va for r in self._regions], np.uint64)
    self._next = max(self._next, (va + size + 0xFFFF) & ~0xFFFF)
    return data

  def unmap(self, va: int) -> None:
    for i, r in enumerate(self._regions):
      if r.va == va:
        del self._regions[i]
        self._starts = np.array([r.va for r in self._regions], np.uint64)
        return
    raise ValueError(f"unmap: nothing mapped at {va:#x}")

  def alloc(self, size: int, align: int = 256, name: str = "") -> int:
    """Map `size` bytes at a fresh address (above everything mapped so far)."""
    va = (self._next + align - 1) // align * align
    self.map(va, max(int(size), 1), name=name)
    return va

  def regions(self) -> list[tuple[int, int, str]]:
    return [(r.va, r.size, r.name) for r in self._regions]

  # -- host access
  def _find(self, va, size):
    for r in self._regions:
      if r.va <= va and va + size <= r.va + r.size:
        return r
    raise GPUFault(f"GPU page fault: host access of {size} bytes at {va:#x} is not mapped", va)

  def read_bytes(self, va: int, size: int) -> bytes:
    r = self._find(va, size)
    return r.data[va - r.va: va - r.va + size].tobytes()

  def write_bytes(self, va: int, data: bytes | bytearray | memoryview | np.ndarray) -> None:
    b = np.frombuffer(bytes(data), np.uint8)
    r = self._find(va, b.size)
    r.data[va - r.va: va - r.va + b.size] = b

  def read(self, va: int, dtype: npt.DTypeLike, count: int = 1) -> np.ndarray:
    dt = np.dtype(dtype)
    return np.frombuffer(self.read_bytes(va, dt.itemsize * count), dt).copy()

  def write(self, va: int, values: npt.ArrayLike, dtype: npt.DTypeLike = None) -> None:
    a = np.ascontiguousarray(values if dtype is None else np.asarray(values, dtype))
    self.write_bytes(va, a.tobytes())

  # -- device access (vectorized)
  def _locate(self, addrs, size, what: str):
    """Region index for each address; raises GPUFault for the first unmapped one."""
    if not self._regions:
      if addrs.size:
        raise GPUFault(f"GPU page fault: {what} of {size} bytes at {int(addrs[0]):#x}: "
                       f"address not mapped", int(addrs[0]))
      return np.zeros(0, np.int64)
    idx = np.searchsorted(self._starts, addrs, side="right").astype(np.int64) - 1
    ok = idx >= 0
    ends = np.array([r.va + r.size for r in self._regions], np.uint64)
    ci = np.clip(idx, 0, None)
    ok &= (addrs + np.uint64(size)) <= ends[ci]
    ok &= addrs >= self._starts[ci]
    if not ok.all():
      bad = int(addrs[np.argmin(ok)])
      raise GPUFault(f"GPU page fault: {what} of {size} bytes at {bad:#x}: address not mapped", bad)
    return idx

  def _check_align(self, addrs, size, what: str) -> None:
    if size > 1:
      mis = (addrs % np.uint64(size)) != 0
      if mis.any():
        bad = int(addrs[np.argmax(mis)])
        raise GPUFault(f"GPU fault: misaligned {what} of {size} bytes at {bad:#x}", bad)

  def _groups(self, idx):
    if idx.size == 0:
      return []
    first = idx[0]
    if (idx == first).all():
      return [(self._regions[first], None)]
    return [(self._regions[i], idx == i) for i in np.unique(idx)]

  def load(self, addrs: np.ndarray, dtype: npt.DTypeLike, what: str = "load") -> np.ndarray:
    dt = np.dtype(dtype)
    addrs = np.asarray(addrs, np.uint64)
    self._check_align(addrs, dt.itemsize, what)
    idx = self._locate(addrs, dt.itemsize, what)
    out = np.empty(addrs.shape, dt)
    groups = self._groups(idx)
    if self.recorder is not None:
      self.recorder.update((r.va, "r") for r, _ in groups)
    for r, sel in groups:
      a = addrs if sel is None else addrs[sel]
      off = (a - np.uint64(r.va)).astype(np.int64)
      v = _gather(r.data, off, dt)
      if sel is None:
        out = v
      else:
        out[sel] = v
    return out

  def store(self, addrs: np.ndarray, values: np.ndarray, dtype: npt.DTypeLike, what: str = "store") -> None:
    dt = np.dtype(dtype)
    addrs = np.asarray(addrs, np.uint64)
    values = np.asarray(values).astype(dt, copy=False)
    self._check_align(addrs, dt.itemsize, what)
    idx = self._locate(addrs, dt.itemsize, what)
    groups = self._groups(idx)
    if self.recorder is not None:
      self.recorder.update((r.va, "w") for r, _ in groups)
    for r, sel in groups:
      a = addrs if sel is None else addrs[sel]
      v = values if sel is None else values[sel]
      _scatter(r.data, (a - np.uint64(r.va)).astype(np.int64), v, dt)


def _gather(data, off, dt: np.dtype):
  w = dt.itemsize
  if w == 1:
    return data[off].view(dt)
  if data.ctypes.data % w == 0 and data.size % w == 0 and not (off % w).any():
    return data.view(dt)[off // w]
  return data[off[:, None] + np.arange(w)].reshape(-1).view(dt)


def _scatter(data, off, v, dt: np.dtype) -> None:
  w = dt.itemsize
  if w == 1:
    data[off] = v.view(np.uint8)
    return
  if data.ctypes.data % w == 0 and data.size % w == 0 and not (off % w).any():
    data.view(dt)[off // w] = v
    return
  data[(off[:, None] + np.arange(w)).reshape(-1)] = np.ascontiguousarray(v).view(np.uint8)


class _Local:
  """Per-thread memory (.local): `n` rows of `size` bytes; addresses are offsets."""

  def __init__(self, n, size, space: str) -> None:
    self.n, self.size, self.space = n, size, space
    self.data = np.zeros(max(n * size, 1), np.uint8)

  def _flat(self, offs, lanes, w, what: str):
    offs = np.asarray(offs, np.uint64)
    bad = offs + np.uint64(w) > np.uint64(self.size)
    if bad.any():
      b = int(offs[np.argmax(bad)])
      raise GPUFault(f"GPU fault: {what} of {w} bytes at {self.space} offset {b:#x} is outside "
                     f"the {self.size}-byte {self.space} window", b, space=self.space)
    if w > 1 and (offs % np.uint64(w)).any():
      b = int(offs[np.argmax((offs % np.uint64(w)) != 0)])
      raise GPUFault(f"GPU fault: misaligned {what} of {w} bytes at {self.space} offset {b:#x}", b)
    return offs.astype(np.int64) + lanes * self.size

  def load(self, offs, lanes, dt: np.dtype, what: str):
    return _gather(self.data, self._flat(offs, lanes, dt.itemsize, what), dt)

  def store(self, offs, lanes, v, dt: np.dtype, what: str) -> None:
    _scatter(self.data, self._flat(offs, lanes, dt.itemsize, what), np.asarray(v).astype(dt, copy=False), dt)


class _Shared(_Local):
  """Per-CTA memory: one row per block of the batch, shared by that block's threads."""

  def __init__(self, nblocks, size, nthreads) -> None:
    super().__init__(nblocks, size, "shared")
    self.nthreads = nthreads
    # blocks whose shared memory the generic proxy wrote since their last fence.proxy.async (read by wgmma.py)
    self.generic_dirty = np.zeros(nblocks, bool)

  def store(self, offs, lanes, v, dt: np.dtype, what: str) -> None:
    super().store(offs, lanes, v, dt, what)
    self.generic_dirty[np.asarray(lanes) // self.nthreads] = True

  def _flat(self, offs, lanes, w, what: str):
    return super()._flat(offs, np.asarray(lanes) // self.nthreads, w, what)
