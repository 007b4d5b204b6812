"""Errors the HAL raises; drivers raise these too so generic code can catch one type."""
from __future__ import annotations

class DeviceUnavailable(RuntimeError):
  """A device's driver cannot open it here (no hardware, no kernel driver, no permission)."""

class OutOfMemory(MemoryError):
  """An allocation failed; the message names the device, the request and what is in use."""
  def __init__(self, device: str, requested: int, in_use: int, detail: str = "") -> None:
    self.device, self.requested, self.in_use = device, requested, in_use
    super().__init__(f"{device}: out of memory allocating {requested} bytes ({_fmt(requested)}); "
                     f"{in_use} bytes ({_fmt(in_use)}) in use" + (f"; {detail}" if detail else ""))

class CompileError(Exception):
  """The compiler rejected a source; str() shows its message and the numbered source. CompileError(src, msg)."""
  def __init__(self, src: str, msg: str) -> None:
    self.msg, self.src = msg, src
    super().__init__(msg)
  def __str__(self) -> str:
    if not self.src: return self.msg
    lines = self.src.splitlines()
    w = len(str(len(lines)))
    numbered = "\n".join(f"{i:>{w}} | {l}" for i, l in enumerate(lines, 1))
    return f"{self.msg.rstrip()}\n--- source ---\n{numbered}"

def _fmt(n: int) -> str:
  for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
    if n < 1024 or unit == "TiB": return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
    n /= 1024  # type: ignore[assignment]
  return str(n)
