"""HCQGraph: a list of kernels recorded once into one queue; replay patches buffer addresses and the timeline
values in the encoded commands and submits once."""
from __future__ import annotations
from typing import Any, Sequence
from baregrad.hal import profile
from baregrad.hcq.device import HCQDevice

class HCQGraph:
  def __init__(self, dev: HCQDevice, kernels: Sequence[tuple[Any, list[Any], tuple, tuple, tuple]]):
    """kernels: (HCQProgram, raw buffers, vals, global_size, local_size) in launch order."""
    self.dev = dev
    self.args = []
    self.q = dev.compute_queue_t()
    self.q.wait(dev.timeline_signal, 0)
    self.wait_idx = self.q.last
    for prg, bufs, vals, gs, ls in kernels:
      mem = dev.alloc_args_memory(prg.kernargs_size(len(bufs), len(vals)))
      st = prg.fill_kernargs(bufs, vals, kernargs=mem)
      self.q.exec(prg, st, gs, ls)
      self.args.append(st)
    self.q.signal(dev.timeline_signal, 0)
    self.signal_idx = self.q.last

  def replay(self, patches: Sequence[tuple[int, int, int]] = ()) -> None:
    """patches: (kernel index, buffer argument index, new device address)."""
    for k, i, addr in patches: self.args[k].update_buffer(i, addr)
    dev = self.dev
    with dev.submit_lock:
      st = profile.stamp(dev)  # PROFILE=1: one timestamp before and one after the graph (None otherwise)
      self.q.update_wait(self.wait_idx, value=dev.timeline_value - 1)
      self.q.update_signal(self.signal_idx, value=dev.next_timeline())
      self.q.submit(dev)
      en = profile.stamp(dev)
    if st and en: profile.device_op(dev, self.q, f"graph of {len(self.args)} kernels", "graph", (st[0], en[0]), en[1])
