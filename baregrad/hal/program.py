"""Program: a compiled kernel made callable on a device."""
from __future__ import annotations
from typing import Any

class Program:
  """`Program(device, name, lib)`; calling it launches the kernel.

  bufs are the allocators' opaque buffers (Buffer._buf), in the kernel's buffer order;
  vals are the integer variable values. With wait=True the call blocks and returns seconds."""
  def __init__(self, device: Any, name: str, lib: bytes) -> None:
    self.device, self.name, self.lib = device, name, lib
  def __call__(self, *bufs: Any, global_size: tuple[int, int, int] = (1, 1, 1), local_size: tuple[int, int, int] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    raise NotImplementedError(f"{type(self).__name__}.__call__")
