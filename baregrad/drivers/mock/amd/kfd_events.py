"""amdkfd's events (kfd_events.c): CREATE/DESTROY/SET/RESET/WAIT_EVENTS, the event page, and the interrupts the GPU
engines raise that signal them (end-of-pipe and SDMA trap interrupts)."""
from __future__ import annotations
import ctypes, errno, time
from typing import Any, Callable
from baregrad.ctypes_autogen import kfd
from baregrad.drivers.mock.amd.state import (Backing, Event, KFD_FIRST_NONSIGNAL_EVENT_ID, KFD_MMAP_TYPE_EVENTS,
  KFD_SIGNAL_EVENT_LIMIT, KFDErr, UNSIGNALED_EVENT_SLOT)

class KFDEvents:
  """Event ioctls, signalling and the interrupts that set events."""

  def _create_event(self, a: Any) -> int:
    if a.event_page_offset:  # kfd_kmap_event_page
      w = "kfd_kmap_event_page"
      if self.signal_page is not None: raise KFDErr(errno.EINVAL, w, "the event page is already set")
      bo, pdd = self._bo(a.event_page_offset, w)
      self._bind(pdd, w)
      if bo.domain == "userptr": raise KFDErr(errno.EINVAL, "amdgpu_amdkfd_gpuvm_map_gtt_bo_to_kernel", "a userptr BO cannot be the event page")
      if bo.domain != "gtt": raise KFDErr(errno.EINVAL, "amdgpu_amdkfd_gpuvm_map_gtt_bo_to_kernel", f"the event page must be a GTT BO, not {bo.domain}")
      if bo.size < KFD_SIGNAL_EVENT_LIMIT * 8:
        raise KFDErr(errno.EINVAL, "kfd_event_page_set", f"event page of {bo.size:#x} bytes; at least {KFD_SIGNAL_EVENT_LIMIT * 8:#x}")
      assert bo.backing is not None
      ctypes.memset(bo.backing.view, 0xFF, KFD_SIGNAL_EVENT_LIMIT * 8)
      self.signal_page = (bo.backing.view, bo.size, a.event_page_offset)
    a.event_page_offset = 0
    t = a.event_type
    if t in (kfd.KFD_IOC_EVENT_SIGNAL, kfd.KFD_IOC_EVENT_DEBUG_EVENT):
      if self.signal_page is None:  # allocate_signal_page: the kernel's own page, 256 slots mapped by default
        b = Backing(KFD_SIGNAL_EVENT_LIMIT * 8, "events")
        ctypes.memset(b.view, 0xFF, KFD_SIGNAL_EVENT_LIMIT * 8)
        self.signal_page = (b.view, 256 * 8, 0)
        self._kernel_event_page = b
      limit = self.signal_page[1] // 8
      if self.signal_event_count >= limit: raise KFDErr(errno.ENOSPC, "create_signal_event", f"all {limit} signal event slots are in use")
      eid = next((i for i in range(1, limit) if i not in self.events), None)
      if eid is None: raise KFDErr(errno.ENOSPC, "allocate_event_notification_slot", "no free slot")
      self.signal_event_count += 1
      ctypes.c_uint64.from_address(self.signal_page[0] + 8 * eid).value = UNSIGNALED_EVENT_SLOT
      a.event_page_offset, a.event_slot_index = KFD_MMAP_TYPE_EVENTS, eid
    else: eid = next(i for i in range(KFD_FIRST_NONSIGNAL_EVENT_ID, KFD_FIRST_NONSIGNAL_EVENT_ID + (1 << 20)) if i not in self.events)
    self.events[eid] = Event(eid, t, bool(a.auto_reset))
    a.event_id = a.event_trigger_data = eid
    return 0

  def _destroy_event(self, a: Any) -> int:
    ev = self.events.get(a.event_id)
    if ev is None or a.event_id == 0: raise KFDErr(errno.EINVAL, "kfd_event_destroy", f"no event {a.event_id}")
    del self.events[a.event_id]
    if ev.type in (kfd.KFD_IOC_EVENT_SIGNAL, kfd.KFD_IOC_EVENT_DEBUG_EVENT): self.signal_event_count -= 1
    self._cond.notify_all()
    return 0

  def _set_event(self, a: Any) -> int:
    ev = self.events.get(a.event_id)
    if ev is None or ev.type != kfd.KFD_IOC_EVENT_SIGNAL: raise KFDErr(errno.EINVAL, "kfd_set_event", f"no CPU-signalable event {a.event_id}")
    self._signal(ev)
    return 0

  def _reset_event(self, a: Any) -> int:
    ev = self.events.get(a.event_id)
    if ev is None or ev.type != kfd.KFD_IOC_EVENT_SIGNAL: raise KFDErr(errno.EINVAL, "kfd_reset_event", f"no CPU-signalable event {a.event_id}")
    ev.signaled = False
    return 0

  def _signal(self, ev: Event, data: bytes = b"") -> None:
    """kfd_events.c: set_event: an auto-reset event that wakes a waiter does not stay signalled."""
    with self._cond:
      ev.signaled = not ev.auto_reset or ev.waiters == 0
      ev.age += 1
      ev.pulses += 1
      if data: ev.data = data
      self._cond.notify_all()

  def _wait_events(self, a: Any) -> int:
    """kfd_events.c: kfd_wait_on_events (timeout in ms; 0 immediate, 0xffffffff infinite)."""
    n = a.num_events
    evdata = (kfd.struct_kfd_event_data * n).from_address(a.events_ptr) if n else []
    deadline = None if a.timeout == 0xFFFFFFFF else time.monotonic() + min(a.timeout, 0x7FFFFFFF) / 1000
    with self._cond:
      evs, activated, start = [], [], []
      for d in evdata:
        ev = self.events.get(d.event_id)
        if ev is None or d.event_id == 0:
          a.wait_result = kfd.KFD_IOC_WAIT_RESULT_FAIL
          raise KFDErr(errno.EINVAL, "init_event_waiter", f"no event {d.event_id}")
        evs.append(ev)
        act = ev.signaled
        ev.signaled = ev.signaled and not ev.auto_reset
        age = ctypes.c_uint64.from_buffer(d, 0).value if ev.type == kfd.KFD_IOC_EVENT_SIGNAL else 0  # signal_event_data.last_event_age
        if age and ev.age != age: act = True
        activated.append(act)
        start.append(ev.pulses)
      for ev in evs: ev.waiters += 1
      try:
        while True:
          for i, ev in enumerate(evs):
            if ev.pulses != start[i]: activated[i] = True
          if any(ev.id not in self.events for ev in evs):
            a.wait_result = kfd.KFD_IOC_WAIT_RESULT_FAIL
            raise KFDErr(errno.EIO, "kfd_wait_on_events", "an event was destroyed while waiting")
          done = all(activated) if a.wait_for_all else any(activated)
          if done: break
          left = None if deadline is None else deadline - time.monotonic()
          if left is not None and left <= 0: break
          self._cond.wait(left)
      finally:
        for ev in evs: ev.waiters -= 1
      a.wait_result = kfd.KFD_IOC_WAIT_RESULT_COMPLETE if done else kfd.KFD_IOC_WAIT_RESULT_TIMEOUT
      if done:  # copy_signaled_event_data: memory exceptions carry the fault
        for i, ev in enumerate(evs):
          if activated[i] and ev.type in (kfd.KFD_IOC_EVENT_MEMORY, kfd.KFD_IOC_EVENT_HW_EXCEPTION) and ev.data:
            ctypes.memmove(ctypes.addressof(evdata[i]), ev.data, len(ev.data))
      return 0

  def _interrupt(self, ctx: int, bits: int) -> None:
    """kfd_events.c: kfd_signal_event_interrupt: the event whose id the interrupt carries is set only if its slot in the
    event page was written (is not UNSIGNALED_EVENT_SLOT); a bad id falls back to scanning every slot."""
    if self.signal_page is None: return
    slots = self.signal_page[0]
    def slot(i: int) -> int: return ctypes.c_uint64.from_address(slots + 8 * i).value
    def fire(ev: Event) -> None:
      if ev.type in (kfd.KFD_IOC_EVENT_SIGNAL, kfd.KFD_IOC_EVENT_DEBUG_EVENT):
        ctypes.c_uint64.from_address(slots + 8 * ev.id).value = UNSIGNALED_EVENT_SLOT  # acknowledge_signal
        self._signal(ev)
    ev = None
    if bits and ctx < KFD_SIGNAL_EVENT_LIMIT and (bits > 31 or (1 << bits) >= KFD_SIGNAL_EVENT_LIMIT):
      if slot(ctx) != UNSIGNALED_EVENT_SLOT: ev = self.events.get(ctx)
    if ev is not None and ev.id: fire(ev)
    else:
      for e in list(self.events.values()):
        if 0 < e.id < KFD_SIGNAL_EVENT_LIMIT and slot(e.id) != UNSIGNALED_EVENT_SLOT: fire(e)

  _ioctls: dict[int, tuple[str, type, int, Callable]] = {}
