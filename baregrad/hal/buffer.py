"""Buffer: `size` elements of `dtype` on a device, or a view into another buffer's allocation."""
from __future__ import annotations
from typing import Any, Hashable
from baregrad.ir.dtype import DType
from baregrad.hal.device import Device

class Buffer:
  _base: Buffer | None; offset: int
  def __init__(self, device: str, size: int, dtype: DType, base: Buffer | None = None, offset: int = 0,
               options: Hashable | None = None) -> None:
    if size < 0: raise ValueError(f"Buffer size must be >= 0 elements, got {size}")
    self.device = (type(device) is str and Device.canonical_names.get(device)) or Device.canonicalize(device)   # (inline for a name met before)
    self.size, self.dtype, self.options = size, dtype, options
    self._buf: Any = None
    self._views = 0  # allocated views into this buffer: it must not be freed under them
    if base is not None:
      if base._base is not None: base, offset = base._base, base.offset + offset  # views always point at the root
      if Device.canonicalize(base.device) != self.device: raise ValueError(f"view on {self.device} of a buffer on {base.device}")
      if offset < 0 or offset + self.nbytes > base.nbytes:
        raise ValueError(f"view of {self.nbytes} bytes at offset {offset} is outside its base of {base.nbytes} bytes")
      self.options = base.options
    self._base, self.offset = base, offset
    self._owned = False

  @property
  def nbytes(self) -> int: return self.size * self.dtype.itemsize
  @property
  def base(self) -> Buffer: return self if self._base is None else self._base
  @property
  def allocator(self) -> Any: return Device[self.device].allocator

  def is_allocated(self) -> bool: return self._buf is not None

  def allocate(self, opaque: Any = None) -> Buffer:
    """Allocate device memory (or adopt `opaque`, an allocation the caller owns). Returns self."""
    if self._buf is not None: raise RuntimeError(f"{self!r} is already allocated")
    if self._base is not None:
      if not self._base.is_allocated(): self._base.allocate()
      self._buf = self.allocator._offset(self._base._buf, self.offset, self.nbytes)
      self._base._views += 1
    elif opaque is not None: self._buf, self._owned = opaque, False
    else:
      self._allocator = a = self.allocator  # free into the allocator we came from, even if the device is reopened
      self._buf, self._owned = a.alloc(self.nbytes, self.options), True
    return self

  def deallocate(self) -> None:
    if self._buf is None: raise RuntimeError(f"{self!r} is not allocated")
    if self._views: raise RuntimeError(f"cannot deallocate {self!r}: {self._views} allocated view(s) still use its memory")
    if self._base is None and getattr(self, "_owned", False): self._allocator.free(self._buf, self.nbytes, self.options)
    if self._base is not None: self._base._views -= 1
    self._buf = None

  def __del__(self) -> None:
    try:
      if (buf := self._buf) is None: return
      if self._base is not None: self._base._views -= 1
      elif self._owned:
        self._buf = None
        self._allocator.free(buf, self.nbytes, self.options)
    except Exception: pass  # at interpreter exit the device may already be gone

  def _check_mv(self, mv: memoryview, what: str) -> memoryview:
    mv = memoryview(mv)
    if mv.format not in ("B", "b", "c") and self.dtype.fmt is not None and mv.itemsize != self.dtype.itemsize:
      raise TypeError(f"{what}: memoryview of format {mv.format!r} ({mv.itemsize} bytes per item) does not match {self!r} "
                      f"({self.dtype.itemsize} bytes per item); expected format {self.dtype.fmt!r} or raw bytes")
    if mv.nbytes != self.nbytes:
      raise ValueError(f"{what}: size mismatch, memoryview has {mv.nbytes} bytes, {self!r} holds {self.nbytes} bytes "
                       f"({self.size} x {self.dtype.name})")
    return mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv

  def copyin(self, mv: memoryview) -> Buffer:
    mv = self._check_mv(mv, "copyin")
    if self._buf is None: self.allocate()
    if self.nbytes: self.allocator._copyin(self._buf, mv)
    return self

  def copyout(self, mv: memoryview) -> memoryview:
    out = self._check_mv(mv, "copyout")
    if out.readonly: raise ValueError("copyout: destination memoryview is read-only")
    if self._buf is None:
      if self._base is None or not self._base.is_allocated(): raise RuntimeError(f"copyout: {self!r} is not allocated")
      self.allocate()  # a view of allocated memory costs nothing to materialize
    if self.nbytes: self.allocator._copyout(out, self._buf)
    return mv

  def as_memoryview(self) -> memoryview:
    """A host copy of the contents as bytes (format 'B')."""
    return self.copyout(memoryview(bytearray(self.nbytes)))

  def view(self, size: int, dtype: DType, offset: int) -> Buffer:
    """A buffer of `size` x `dtype` at byte `offset` in this buffer's memory (no copy)."""
    if offset < 0 or offset + size * dtype.itemsize > self.nbytes:
      raise ValueError(f"view of {size} x {dtype.name} ({size * dtype.itemsize} bytes) at offset {offset} is outside "
                       f"{self!r} ({self.nbytes} bytes)")
    return Buffer(self.device, size, dtype, base=self, offset=offset)

  def __repr__(self) -> str:
    v = f", base offset {self.offset}" if self._base is not None else ""
    return f"<Buffer {self.device} {self.size} x {self.dtype.name}{v}{'' if self.is_allocated() else ' (not allocated)'}>"
