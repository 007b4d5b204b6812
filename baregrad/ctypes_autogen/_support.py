"""Runtime helpers shared by the generated modules. Written by hand; imports only ctypes.

- `Lib` / `Lib.fn`: C functions bound lazily, so importing a binding never needs the library.
- `BitField`: a `hi:lo` field of a register, packet or QMD (data), with encode/decode.
- `IOC`, `IO`, `IOR`, `IOW`, `IOWR`: Linux's generic ioctl number encoding (asm-generic/ioctl.h),
  for numbers that the headers leave to the caller (the NVIDIA escapes take the size of
  the parameter struct).
"""
from __future__ import annotations

import ctypes
from typing import Any, NamedTuple, Optional, Sequence


class LibraryMissing(OSError):
  """The shared library behind a binding is not on this machine."""


class Lib:
  """A shared library opened on first use; `hint` says how to get it when it is missing."""

  def __init__(self, name: str, candidates: Sequence[Optional[str]], hint: str = "", use_errno: bool = False):
    self.name, self.candidates, self.hint, self.use_errno = name, tuple(candidates), hint, use_errno
    self._dll: Optional[ctypes.CDLL] = None

  @property
  def dll(self) -> ctypes.CDLL:
    if self._dll is None:
      errors = []
      for c in self.candidates:
        try:
          self._dll = ctypes.CDLL(c, use_errno=self.use_errno)
          break
        except OSError as e:
          errors.append(f"{c}: {e}")
      else:
        raise LibraryMissing(f"{self.name} is not available (tried {', '.join(map(str, self.candidates))})"
                             + (f"; {self.hint}" if self.hint else "") + f" [{'; '.join(errors)}]")
    return self._dll

  def fn(self, name: str, restype: Any, argtypes: Sequence[Any], variadic: bool = False) -> "LazyFunction":
    return LazyFunction(self, name, restype, list(argtypes), variadic)


class LazyFunction:
  """A C function prototype; the symbol is looked up on the first call."""

  def __init__(self, lib: Lib, name: str, restype: Any, argtypes: list, variadic: bool):
    self.lib, self.name, self.restype, self.argtypes, self.variadic = lib, name, restype, argtypes, variadic
    self._f: Any = None

  def resolve(self) -> Any:
    if self._f is None:
      try:
        f = getattr(self.lib.dll, self.name)
      except AttributeError:
        raise LibraryMissing(f"{self.lib.name} has no symbol {self.name} (a different version of the library?)") from None
      f.restype = self.restype
      # a variadic function keeps its fixed parameters typed; extra arguments are passed as given
      f.argtypes = None if self.variadic else self.argtypes
      self._f = f
    return self._f

  def __call__(self, *args: Any) -> Any:
    f = self.resolve()
    if self.variadic:
      fixed = [t.from_param(a) if hasattr(t, "from_param") else a for t, a in zip(self.argtypes, args)]
      return f(*fixed, *args[len(self.argtypes):])
    return f(*args)

  def __repr__(self) -> str:
    return f"<C function {self.name} from {self.lib.name}>"


class BitField(NamedTuple):
  """Bits hi..lo (inclusive) of a word, or of a multi-word structure for the MW(hi:lo) form."""
  hi: int
  lo: int

  @property
  def width(self) -> int:
    return self.hi - self.lo + 1

  @property
  def mask(self) -> int:
    return ((1 << self.width) - 1) << self.lo

  def encode(self, value: int) -> int:
    """`value` shifted into place; raises if it does not fit."""
    if value < 0 or value >> self.width:
      raise ValueError(f"{value:#x} does not fit in {self.width} bits ({self.hi}:{self.lo})")
    return value << self.lo

  def decode(self, word: int) -> int:
    return (word >> self.lo) & ((1 << self.width) - 1)

  def get(self, words: Sequence[int], word_bits: int = 32) -> int:
    """Read the field from a sequence of words (a ctypes array or a list), little-endian."""
    v = 0
    for i in range(self.hi // word_bits, self.lo // word_bits - 1, -1): v = (v << word_bits) | int(words[i])
    return (v >> (self.lo % word_bits)) & ((1 << self.width) - 1)

  def set(self, words: Any, value: int, word_bits: int = 32) -> None:
    """Write the field into a mutable sequence of words, leaving other bits as they were."""
    if value < 0 or value >> self.width:
      raise ValueError(f"{value:#x} does not fit in {self.width} bits ({self.hi}:{self.lo})")
    first, last = self.lo // word_bits, self.hi // word_bits
    v = 0
    for i in range(last, first - 1, -1): v = (v << word_bits) | int(words[i])
    sh = self.lo % word_bits
    m = ((1 << self.width) - 1) << sh
    v = (v & ~m) | (value << sh)
    for i in range(first, last + 1):
      words[i] = (v >> ((i - first) * word_bits)) & ((1 << word_bits) - 1)


# Linux asm-generic/ioctl.h (x86, arm64, riscv): nr 8 bits, type 8, size 14, dir 2
IOC_NONE, IOC_WRITE, IOC_READ = 0, 1, 2


def IOC(dir: int, type: int | str, nr: int, size: int) -> int:
  t = ord(type) if isinstance(type, str) else type
  if not (0 <= nr < 256 and 0 <= t < 256 and 0 <= size < (1 << 14)):
    raise ValueError(f"ioctl fields out of range: type={t} nr={nr} size={size}")
  return (dir << 30) | (size << 16) | (t << 8) | nr


def IO(type: int | str, nr: int) -> int: return IOC(IOC_NONE, type, nr, 0)
def IOR(type: int | str, nr: int, size: int) -> int: return IOC(IOC_READ, type, nr, size)
def IOW(type: int | str, nr: int, size: int) -> int: return IOC(IOC_WRITE, type, nr, size)
def IOWR(type: int | str, nr: int, size: int) -> int: return IOC(IOC_READ | IOC_WRITE, type, nr, size)
