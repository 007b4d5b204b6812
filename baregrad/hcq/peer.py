"""Copies from one HCQ device to another queued on both devices' queues, with no host wait: each device's queue waits
on a signal the other device's queue writes.

A `PeerLink` (source device -> destination device) copies through pinned host memory: `slots` staging buffers in
anonymous pages of the process, which both devices map at their host address (`HCQDevice.import_host`: NV an
OS-descriptor memory object, AMD a userptr BO), beside two counters on the same pages, `filled` and `emptied`.
For the c-th chunk, in slot (c - 1) % slots:
  source copy queue:      wait own timeline; wait emptied >= c - slots (the slot's last chunk was read);
                          copy buffer -> slot; signal own timeline; signal filled = c
  destination copy queue: wait own timeline; wait filled >= c; copy slot -> buffer; signal own timeline;
                          signal emptied = c
The source fills one slot while the destination empties the other, and the host only submits. Needed of a driver:
`_import_host(buf)` mapping host pages into its GPU VA space at their own address, and a copy queue whose copies may
read and write host memory.

Where the source's queues can write the destination's memory (`dst.peer_direct(src)`: CPU devices, whose memory is
all host memory) the link copies directly: the source's copy queue writes the destination's buffer once the
destination's work so far is done (it waits on the destination's timeline), and the destination's queue waits for
the source's timeline before anything reads it.

Where the destination can map the source's device memory into its own GPU VA space (`dst.peer_map(src)`: AMD GPUs of
one KFD process whose topology lists a p2p link, drivers/amd/process.py; NV GPUs of one kernel between which UVM
enables PCIe peer access, drivers/nv/peer.py) the link copies through that peer mapping, with
no staging: the destination's copy engine reads the source's video memory over PCIe. The destination's copy queue waits for
the source's work so far (its timeline), copies and signals its own timeline; then the source's queue waits for that
copy, so later work of the source cannot overwrite the buffer before it was read. Each queue waits on the other's
timeline signal, which the driver maps for both GPUs."""
from __future__ import annotations
import ctypes, mmap, threading, warnings
from typing import Any
from baregrad.hcq.queue import HWQueue

class _Counter:
  """A 64-bit value in the link's pages: what queue wait/signal commands point at (`va_addr`, the host address)."""
  def __init__(self, addr: int) -> None:
    self.va_addr = self.cpu_addr = addr
    self._v = ctypes.c_uint64.from_address(addr)
  @property
  def value(self) -> int: return self._v.value

class PeerLink:
  """Copies src -> dst (staged through `slots` buffers of `chunk` bytes, directly, or through a peer mapping: module
  docstring)."""
  def __init__(self, src: Any, dst: Any, chunk: int = 2 << 20, slots: int = 2, no_map: bool = False) -> None:
    self.src, self.dst, self.chunk, self.slots = src, dst, chunk, slots
    self.direct = dst.peer_direct(src)
    self.no_map = no_map   # (NO_PEER_MAP: staged even where a peer mapping is possible)
    self.mapped = not self.direct and not no_map and dst.peer_map(src)   # dst reads src's memory through a peer mapping
    self.lock = threading.Lock()   # one copy at a time uses the slots and counters
    self.copies = 0                # chunks copied (tests)
    self._dst_only: tuple[int, int] | None = None   # (direct) dst's timeline value of the last copy's wait, dst's work before it
    self.imports: list[tuple[Any, int]] = []
    if not self.direct and not self.mapped: self._staging()
    dst.peers[src.device], src.peers[dst.device] = src, dst   # (named in timeout messages: HCQDevice.peer_state)

  def _staging(self) -> None:
    """The link's staging pages: the counters' page, then the slots (page aligned: what both drivers map), mapped for
    both devices."""
    from baregrad.hcq.device import HCQBuffer
    size = 4096 + self.slots * self.chunk
    self._pages = mmap.mmap(-1, size)   # anonymous: the pages stay as long as the link (the drivers pin them)
    base = ctypes.addressof(ctypes.c_char.from_buffer(self._pages))
    self.buf = HCQBuffer(base, size, base)
    self.filled, self.emptied = _Counter(base), _Counter(base + 16)
    self.stage = [base + 4096 + i * self.chunk for i in range(self.slots)]
    for dev in (self.src, self.dst):
      dev.import_host(self.buf, self)
      self.imports.append((dev, base))

  @property
  def path(self) -> str:
    """How the link copies: "direct", "peer-mapped" or "staged"."""
    return "direct" if self.direct else "peer-mapped" if self.mapped else "staged"

  def close(self) -> None:
    """Unmap the link's pages from both devices (those still open) before they are released."""
    for dev, addr in self.imports:
      if not getattr(dev, "closed", False): dev.unimport_host(addr)
    self.imports.clear()

  def copy(self, dest: Any, src: Any, nbytes: int) -> None:
    """Queue the copy of nbytes from HCQBuffer src (on self.src) into HCQBuffer dest (on self.dst)."""
    s, d = self.src, self.dst
    with self.lock:
      if self.direct:
        d_last = d.timeline_value - 1   # dst's work so far (a kernel may still read the memory dest reuses)
        # where dst's last entry is this link's own wait for its previous copy (nothing else was queued on dst since),
        # that entry touches no memory and only waits for src's copy queue, which runs this copy after it anyway: wait
        # for dst's work before it instead. Without this, each copy of a run (a gradient exchange's buckets) waited for
        # dst's copy thread to see the one before, two thread handoffs per copy
        if self._dst_only is not None and self._dst_only[0] == d_last: d_last = self._dst_only[1]
        with s.submit_lock:
          tv_s = s.next_timeline()
          q = _copy_queue(s).wait(s.timeline_signal, tv_s - 1)
          if d_last > 0: q.wait(d.timeline_signal, d_last)
          q.copy(dest.va_addr, src.va_addr, nbytes).signal(s.timeline_signal, tv_s).submit(s)
        with d.submit_lock:
          tv_d = d.next_timeline()
          _copy_queue(d).wait(d.timeline_signal, tv_d - 1).wait(s.timeline_signal, tv_s).signal(d.timeline_signal, tv_d).submit(d)
        self._dst_only = (tv_d, d_last)
        self.copies += 1
        return
      if self.mapped:
        try: d.map_peer(s, src.view_of or src)
        except OSError as e:   # the kernel driver refused the mapping after all: this link stages from now on (said once)
          warnings.warn(f"{s.device} -> {d.device}: the kernel driver refused a peer mapping ({e}); copies are staged through host pages",
                        stacklevel=3)
          self.mapped = False
          self._staging()
      if self.mapped:
        s_last = s.timeline_value - 1   # the source's work so far (what writes the buffer)
        with d.submit_lock:
          tv_d = d.next_timeline()
          q = _copy_queue(d).wait(d.timeline_signal, tv_d - 1)
          if s_last > 0: q.wait(s.timeline_signal, s_last)
          q.copy(dest.va_addr, src.va_addr, nbytes).signal(d.timeline_signal, tv_d).submit(d)
        with s.submit_lock:   # later work of the source waits for the copy to have read the buffer
          tv_s = s.next_timeline()
          _copy_queue(s).wait(s.timeline_signal, tv_s - 1).wait(d.timeline_signal, tv_d).signal(s.timeline_signal, tv_s).submit(s)
        self.copies += 1
        return
      for off in range(0, nbytes, self.chunk):
        c, size = self.copies + 1, min(self.chunk, nbytes - off)
        slot = self.stage[(c - 1) % self.slots]
        with s.submit_lock:
          tv_s = s.next_timeline()
          q = _copy_queue(s).wait(s.timeline_signal, tv_s - 1)
          if c > self.slots: q.wait(self.emptied, c - self.slots)
          q.copy(slot, src.va_addr + off, size).signal(s.timeline_signal, tv_s).signal(self.filled, c).submit(s)
        with d.submit_lock:
          tv_d = d.next_timeline()
          (_copy_queue(d).wait(d.timeline_signal, tv_d - 1).wait(self.filled, c).copy(dest.va_addr + off, slot, size)
           .signal(d.timeline_signal, tv_d).signal(self.emptied, c).submit(d))
        self.copies = c

def _copy_queue(dev: Any) -> HWQueue: return (dev.copy_queue_t or dev.compute_queue_t)()
