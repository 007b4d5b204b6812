"""HWQueue: abstract commands recorded into an encoded command buffer that can be patched and resubmitted.

A driver subclass encodes each command into 32-bit words (`_enc_*`) and names the words that hold
each patchable field (offset, nwords[, high word first]); the base class keeps the index so update_*
can rewrite those words in place. Command i is the i-th recorded command (`q.last` right after it)."""
from __future__ import annotations
from array import array
from dataclasses import dataclass, field
from typing import Any, Sequence
from baregrad import helpers
from baregrad.hal import profile

@dataclass
class Cmd:
  kind: str
  start: int                  # first word of the command in HWQueue.words
  nwords: int
  # name -> (word offset in the command, nwords) or (offset, nwords, True) for a field stored high word first
  fields: dict[str, tuple] = field(default_factory=dict)

def args_struct_format(args: Sequence[tuple[int, int]]) -> str | None:
  """The struct format of kernel arguments (offset, size) from offset 0 through the last one, gaps as pad bytes (the
  drivers' fast launch paths pack them in one call); None where they are not in offset order or of a size other than
  1, 2, 4 or 8 bytes."""
  fmt, pos = "", 0
  for off, sz in args:
    if off < pos or sz not in (1, 2, 4, 8): return None
    fmt += "x" * (off - pos) + {1: "B", 2: "H", 4: "I", 8: "Q"}[sz]
    pos = off + sz
  return fmt

class HCQArgsState:
  """Kernel arguments written into argument memory; patch them in place for replays."""
  def __init__(self, cpu_addr: int, va_addr: int, prg: Any, bufs: Sequence[Any], vals: Sequence[int]) -> None:
    self.cpu_addr, self.va_addr, self.prg, self.bufs, self.vals = cpu_addr, va_addr, prg, list(bufs), list(vals)
  def _put(self, i: int, v: int) -> None:
    """Write argument slot i (the buffers' addresses first, then the variables) into the argument memory."""
    raise NotImplementedError
  def update_buffer(self, i: int, addr: int) -> None:
    if not 0 <= i < len(self.bufs): raise IndexError(f"buffer {i} out of range: kernel has {len(self.bufs)} buffers")
    self._put(i, addr)
  def update_var(self, i: int, value: int) -> None:
    if not 0 <= i < len(self.vals): raise IndexError(f"var {i} out of range: kernel has {len(self.vals)} vars")
    self._put(len(self.bufs) + i, value)

class HWQueue:
  def __init__(self) -> None:
    self.words = array("I")
    self.cmds: list[Cmd] = []
    self._refs: dict[tuple[int, str], Any] = {}  # (command, role) -> signal/program/args the words point at: kept alive

  def __len__(self) -> int: return len(self.cmds)
  @property
  def last(self) -> int:
    """Index of the most recently recorded command (what update_* take)."""
    return len(self.cmds) - 1

  # --- recording (each returns self so commands chain)
  def wait(self, signal: Any, value: int) -> HWQueue:
    self._refs[(len(self.cmds), "signal")] = signal
    return self._add("wait", *self._enc_wait(signal.va_addr, value))
  def signal(self, signal: Any, value: int) -> HWQueue:
    self._refs[(len(self.cmds), "signal")] = signal
    return self._add("signal", *self._enc_signal(signal.va_addr, value))
  def timestamp(self, signal: Any) -> HWQueue:
    self._refs[(len(self.cmds), "signal")] = signal
    return self._add("timestamp", *self._enc_timestamp(signal.timestamp_va_addr))
  def exec(self, prg: Any, args_state: HCQArgsState, global_size: Sequence[int], local_size: Sequence[int] = (1, 1, 1)) -> HWQueue:
    self._refs[(len(self.cmds), "prg")], self._refs[(len(self.cmds), "args")] = prg, args_state
    return self._add("exec", *self._enc_exec(prg, args_state, _dims(global_size, "global_size"), _dims(local_size, "local_size")))
  def copy(self, dest: int, src: int, nbytes: int) -> HWQueue: return self._add("copy", *self._enc_copy(dest, src, nbytes))
  def memory_barrier(self) -> HWQueue: return self._add("barrier", *self._enc_memory_barrier())

  def submit(self, dev: Any) -> HWQueue:
    if self.cmds:
      if profile.ON: profile.instant("submit", "hcq", device=dev.device, queue=type(self).__name__,
                                     commands=" ".join(c.kind for c in self.cmds[:32]) + (" ..." if len(self.cmds) > 32 else ""))
      if (viz := helpers.viz_sink) is None: self._submit(dev)
      else:   # VIZ=1: the command stream, and what the submission wrote to the device's ring (read back after it)
        tok = viz("submit", queue=self, dev=dev)
        self._submit(dev)
        viz("submitted", token=tok)
    return self

  def prepare_replay(self, dev: Any) -> None:
    """The queue is recorded in full and will be submitted to `dev` again and again, patched between submissions (a
    graph's recording): a driver may make its submission's form once here (AMD: the AQL packets and PM4 IBs) and keep
    it patched along with the words. Nothing to do where a submission is the words themselves (NV: the pushbuffer)."""

  # --- patching
  def update_wait(self, i: int, signal: Any = None, value: int | None = None) -> HWQueue:
    self._check(i, "wait")
    if signal is not None: self._refs[(i % len(self.cmds), "signal")] = signal; self._put(i, "addr", signal.va_addr)
    if value is not None: self._put(i, "value", value)
    return self
  def update_signal(self, i: int, signal: Any = None, value: int | None = None) -> HWQueue:
    self._check(i, "signal")
    if signal is not None: self._refs[(i % len(self.cmds), "signal")] = signal; self._put(i, "addr", signal.va_addr)
    if value is not None: self._put(i, "value", value)
    return self
  def update_exec(self, i: int, global_size: Sequence[int] | None = None, local_size: Sequence[int] | None = None) -> HWQueue:
    self._check(i, "exec")
    if global_size is not None:
      for n, g in zip(("gx", "gy", "gz"), _dims(global_size, "global_size")): self._put(i, n, g)
    if local_size is not None:
      for n, l in zip(("lx", "ly", "lz"), _dims(local_size, "local_size")): self._put(i, n, l)
    return self
  def update_copy(self, i: int, dest: int | None = None, src: int | None = None, nbytes: int | None = None) -> HWQueue:
    self._check(i, "copy")
    for n, v in (("dest", dest), ("src", src), ("nbytes", nbytes)):
      if v is not None: self._put(i, n, v)
    return self

  def field(self, i: int, name: str) -> int:
    """Read a field of command i back from the encoded words."""
    c = self.cmds[i]
    off, n, *hi_first = c.fields[name]
    off += c.start
    return sum(self.words[off + j] << (32 * (n - 1 - j if hi_first and hi_first[0] else j)) for j in range(n))

  def decode(self) -> str:
    """The encoded buffer in words: one line per command, fields read back from the words."""
    out = []
    for i, c in enumerate(self.cmds):
      fs = " ".join(f"{k}={self.field(i, k):#x}" if k in ("addr", "dest", "src", "fxn", "args") else f"{k}={self.field(i, k)}"
                    for k in c.fields)
      out.append(f"[{i:3d}] @{c.start:5d} {c.kind:<9s} {fs}")
    return "\n".join(out)

  # --- internals
  def _add(self, kind: str, words: Sequence[int], fields: dict[str, tuple[int, int]]) -> HWQueue:
    start = len(self.words)
    try: self.words.extend(words)
    except OverflowError:
      raise ValueError(f"{kind}: a field does not fit its 32-bit words (negative, or too large): {list(words)}") from None
    self.cmds.append(Cmd(kind, start, len(words), fields))  # fields is usually a shared per-op table: never mutate it
    return self
  def _check(self, i: int, kind: str) -> None:
    if not -len(self.cmds) <= i < len(self.cmds): raise IndexError(f"command {i} out of range: queue has {len(self.cmds)} commands")
    if self.cmds[i].kind != kind: raise ValueError(f"command {i} is a {self.cmds[i].kind}, not a {kind}")
  def _put(self, i: int, name: str, value: int) -> None:
    c = self.cmds[i]
    f = c.fields[name]
    off, n, hi_first = f[0] + c.start, f[1], len(f) > 2 and f[2]
    if value < 0 or value >> (32 * n): raise ValueError(f"{name}={value} does not fit in {32 * n} bits")
    w = self.words
    if n == 1: w[off] = value
    elif n == 2:   # (every address and timeline value: a graph replay patches two of them)
      if hi_first: w[off], w[off + 1] = value >> 32, value & 0xFFFFFFFF
      else: w[off], w[off + 1] = value & 0xFFFFFFFF, value >> 32
    else:
      for j in range(n): w[off + j] = (value >> (32 * (n - 1 - j if hi_first else j))) & 0xFFFFFFFF

  # --- what a driver implements: return (words, {field: (offset in command, nwords)})
  def _enc_wait(self, addr: int, value: int) -> tuple[list[int], dict[str, tuple[int, int]]]: raise NotImplementedError
  def _enc_signal(self, addr: int, value: int) -> tuple[list[int], dict[str, tuple[int, int]]]: raise NotImplementedError
  def _enc_timestamp(self, addr: int) -> tuple[list[int], dict[str, tuple[int, int]]]: raise NotImplementedError
  def _enc_exec(self, prg: Any, args_state: HCQArgsState, gs: tuple[int, int, int], ls: tuple[int, int, int]) -> tuple[list[int], dict[str, tuple[int, int]]]:
    raise NotImplementedError(f"{type(self).__name__} cannot execute kernels")
  def _enc_copy(self, dest: int, src: int, nbytes: int) -> tuple[list[int], dict[str, tuple[int, int]]]:
    raise NotImplementedError(f"{type(self).__name__} cannot copy")
  def _enc_memory_barrier(self) -> tuple[list[int], dict[str, tuple[int, int]]]: return [], {}
  def _submit(self, dev: Any) -> None: raise NotImplementedError

def _dims(x: Sequence[int], what: str) -> tuple[int, int, int]:
  if type(x) is tuple and len(x) == 3: return x  # the common case, kept cheap
  t = tuple(int(v) for v in x) + (1,) * (3 - len(x))
  if len(t) != 3 or any(v < 0 for v in t): raise ValueError(f"{what} must be up to 3 non-negative ints, got {tuple(x)}")
  return t
