"""The interpreter's errors: PTXError (a program it cannot run, naming line and instruction) and GPUFault (an access
outside every mapped region, or misaligned)."""
from __future__ import annotations

class PTXError(Exception):
  """A PTX program the interpreter cannot run: names the line and instruction."""

  def __init__(self, msg: str, line: int | None = None, text: str | None = None) -> None:
    self.msg, self.line, self.text = msg, line, text
    super().__init__(self._fmt())

  def _fmt(self) -> str:
    if self.line is None:
      return self.msg
    return f"line {self.line}: `{self.text}`: {self.msg}"

  def locate(self, line: int, text: str) -> PTXError:
    """Name the line and instruction, unless the error already names them."""
    if self.line is None:
      self.line, self.text = line, text
      self.args = (self._fmt(),)
    return self


class GPUFault(PTXError):
  """A GPU page fault (access outside every mapped region) or a misaligned access."""

  def __init__(self, msg: str, address: int | None, line: int | None = None, text: str | None = None, space: str = "") -> None:
    self.address = address
    self.space = space   # "shared" or "local": an offset past the block's (thread's) window; "": a global address
    self.thread: tuple[int, int, int] | None = None
    self.block: tuple[int, int, int] | None = None
    super().__init__(msg, line, text)
