"""Per-launch global scratch of the NV driver: memory a kernel writes and reads during one launch only, for its
tensor maps built on the device (an sm_90a TMA kernel: codegen/stage.py, the PTX renderer's tensor-map setup).

A kernel that wants it declares, in its PTX, a last parameter `.param .u64 tmap_scratch` and a note line
(`TMAP_SCRATCH_NOTE` with the bytes each block uses, codegen/renderer/ptx.py). Each launch gets its own
`blocks x bytes` region, 128-byte aligned: a tensor map is a 128-byte object that tensormap.replace addresses as
`.b1024` (PTX ISA 9.7.9.28 "tensormap.replace"; CUDA's CUtensorMap is declared 128-byte aligned), and each block
writes only its own maps, so blocks never race on a map another block's copies read. A launch through the ring (the
eager path) takes it from a video-memory ring that is handed out again once it wraps, after the device is synchronized
(like the kernel-args ring); a launch recorded for replay (a graph's args memory) gets memory of its own."""
from __future__ import annotations
import threading
from typing import TYPE_CHECKING
from baregrad.drivers.vmem import round_up
if TYPE_CHECKING:
  from baregrad.drivers.nv.device import NVDevice
  from baregrad.drivers.nv.memory import NVMemory

ALIGN = 128          # a tensor map's alignment (PTX ISA 9.7.9.28: a .b1024 object; CUtensorMap: 128-byte aligned)
RING_MIN = 8 << 20   # the ring's smallest size; a launch needing more grows it (after a synchronize)


class LaunchScratch:
  """The device's ring of per-launch scratch in video memory."""
  def __init__(self, dev: NVDevice) -> None:
    self.dev = dev
    self.mem: NVMemory | None = None
    self.off = 0
    self.lock = threading.Lock()

  def alloc(self, size: int) -> int:
    """The GPU address of `size` bytes (ALIGN-aligned) no launch still in flight uses."""
    size = round_up(max(size, ALIGN), ALIGN)
    dev = self.dev
    with self.lock:
      if self.mem is None or size > self.mem.size:
        old = self.mem
        if old is not None: dev.synchronize()   # (launches in flight may still read the old ring)
        self.mem, self.off = dev._gpu_alloc(max(RING_MIN, round_up(size, 2 << 20)), what="launch scratch ring"), 0
        if old is not None: dev._gpu_free(old)
      if self.off + size > self.mem.size:
        dev.synchronize()
        self.off = 0
      va = self.mem.va + self.off
      self.off += size
    assert va % ALIGN == 0, "the ring's memory is page aligned"
    return va

  def reset(self) -> None:
    """After a channel error (the work in flight is lost): the whole ring is free again."""
    with self.lock: self.off = 0


def dedicated(dev: NVDevice, size: int) -> int:
  """The GPU address of `size` bytes (ALIGN-aligned) of scratch never handed out again: for a launch recorded for
  replay, whose constant bank keeps the address."""
  _, va = dev.alloc_args_memory(round_up(max(size, ALIGN), ALIGN) + ALIGN)
  return round_up(va, ALIGN)
