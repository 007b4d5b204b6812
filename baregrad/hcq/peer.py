"""Copies from one HCQ device to another queued on both devices' queues, with no host wait: each device's queue waits
on the other device's timeline signal.

A `PeerLink` (source device -> destination device) copies through staging slots in the source's host-visible memory
("pinned host memory": the memory the kernel driver keeps pinned for the GPU), which the destination maps too
(`HCQDevice.import_host`), as it maps both devices' signal pools. Per chunk:
  source copy queue:      wait own timeline; wait dest timeline >= (when the slot was last emptied);
                          copy buffer -> slot; signal own timeline tv_s
  destination copy queue: wait own timeline; wait source timeline >= tv_s; copy slot -> buffer; signal own timeline
Two slots alternate, so the source fills one while the destination empties the other. Every wait is a queue's wait
on a signal in memory both GPUs map: the host only submits. Needed of a driver: `_import_host(buf)` mapping another
device's host-visible memory (`cpu_addr`) into this device's GPU VA space at the same address (`va_addr` ==
`cpu_addr`, which NV and AMD host memory keep), and a copy queue whose copy may read and write host memory.

Peer mappings of device memory (one GPU's copy engine reading the other's VRAM over PCIe or NVLink) are not used:
they need one kernel-driver instance to know both GPUs' memory objects (RM peer mappings through UVM_ENABLE_PEER_ACCESS,
KFD MAP_MEMORY_TO_GPU naming the other GPU), which this driver's one-client-per-GPU structure does not have yet."""
from __future__ import annotations
import threading
from typing import Any
from baregrad.hcq.queue import HWQueue

class PeerLinkUnavailable(RuntimeError):
  """A device pair cannot be linked (a driver without import_host, memory whose VA is not its host address)."""

class PeerLink:
  """Copies src -> dst: through `slots` staging buffers of `chunk` bytes in src's host-visible memory, or, where src's
  queues can address dst's memory (`dst.peer_direct(src)`: CPU devices, whose memory is all host memory), directly:
  src's copy queue copies into dst's buffer once dst's work so far is done, and dst's queue waits for it."""
  def __init__(self, src: Any, dst: Any, chunk: int = 2 << 20, slots: int = 2) -> None:
    self.src, self.dst, self.chunk = src, dst, chunk
    self.direct = dst.peer_direct(src)
    self.stage = [] if self.direct else [src._alloc_shared(chunk) for _ in range(slots)]
    for b in self.stage: _import(dst, b, src)
    _import(dst, src.signal_pool_mem, src)   # dst's queue waits on src's timeline
    _import(src, dst.signal_pool_mem, dst)   # src's queue waits on dst's timeline (a slot emptied, dst's work before a direct copy)
    dst.peers[src.device], src.peers[dst.device] = src, dst   # (named in timeout messages: HCQDevice.peer_state)
    self.free_at = [0] * slots           # dst timeline value after which slot i may be overwritten
    self.lock = threading.Lock()         # one copy at a time uses the slots
    self.copies = 0                      # chunks copied (tests)

  def copy(self, dest: Any, src: Any, nbytes: int) -> None:
    """Queue the copy of nbytes from HCQBuffer src (on self.src) into HCQBuffer dest (on self.dst)."""
    s, d = self.src, self.dst
    if self.direct:
      with self.lock:
        d_last = d.timeline_value - 1   # dst's work so far (a kernel may still read the memory dest reuses)
        with s.submit_lock:
          tv_s = s.next_timeline()
          q = _copy_queue(s).wait(s.timeline_signal, tv_s - 1)
          if d_last > 0: q.wait(d.timeline_signal, d_last)
          q.copy(dest.va_addr, src.va_addr, nbytes).signal(s.timeline_signal, tv_s).submit(s)
        with d.submit_lock:
          tv_d = d.next_timeline()
          _copy_queue(d).wait(d.timeline_signal, tv_d - 1).wait(s.timeline_signal, tv_s).signal(d.timeline_signal, tv_d).submit(d)
        self.copies += 1
      return
    with self.lock:
      for n, off in enumerate(range(0, nbytes, self.chunk)):
        k, size = n % len(self.stage), min(self.chunk, nbytes - off)
        slot = self.stage[k]
        with s.submit_lock:
          tv_s = s.next_timeline()
          q = _copy_queue(s).wait(s.timeline_signal, tv_s - 1)
          if self.free_at[k]: q.wait(d.timeline_signal, self.free_at[k])
          q.copy(slot.va_addr, src.va_addr + off, size).signal(s.timeline_signal, tv_s).submit(s)
        with d.submit_lock:
          tv_d = d.next_timeline()
          (_copy_queue(d).wait(d.timeline_signal, tv_d - 1).wait(s.timeline_signal, tv_s)
           .copy(dest.va_addr + off, slot.va_addr, size).signal(d.timeline_signal, tv_d).submit(d))
        self.free_at[k] = tv_d
        self.copies += 1

def _copy_queue(dev: Any) -> HWQueue: return (dev.copy_queue_t or dev.compute_queue_t)()

def _import(dev: Any, buf: Any, owner: Any) -> None:
  if buf.cpu_addr is None or buf.cpu_addr != buf.va_addr:
    raise PeerLinkUnavailable(f"host memory at VA {buf.va_addr:#x} is mapped for the CPU at "
                              f"{'no address' if buf.cpu_addr is None else hex(buf.cpu_addr)}; a peer link needs the same address")
  dev.import_host(buf, owner)
