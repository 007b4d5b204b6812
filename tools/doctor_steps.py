"""The doctors' device-open stage told apart into its bring-up steps: StepPort wraps the port the device opens through
and files every ioctl under the step its name belongs to (NV: RM client, UVM, VA space, memory, channels, scheduling;
AMD: KFD, VM and apertures, memory, events, queues), so the stage reports each step as passed, failed (at which call,
with the error) or not reached."""
from __future__ import annotations
import time
from collections import Counter
from typing import Any, Callable, Sequence

def nv_step(name: str) -> str:
  """The NV bring-up step an RM/UVM call (as the driver names it, e.g. NV_ESC_RM_ALLOC(FERMI_VASPACE_A)) belongs to."""
  if "GPFIFO_SCHEDULE" in name: return "scheduling"
  if any(k in name for k in ("CHANNEL_GROUP", "CONTEXT_SHARE", "CHANNEL_GPFIFO", "_COMPUTE_", "DMA_COPY", "WORK_SUBMIT_TOKEN",
                             "UVM_REGISTER_CHANNEL", "UVM_UNREGISTER_CHANNEL")): return "channels"
  if "VASPACE" in name: return "VA space"
  if name in ("UVM_INITIALIZE", "UVM_MM_INITIALIZE", "UVM_REGISTER_GPU"): return "UVM"
  if "MEMORY" in name or "EXTERNAL" in name or name == "UVM_FREE": return "memory"
  return "RM client"
NV_STEPS = ("RM client", "UVM", "VA space", "memory", "channels", "scheduling")

def amd_step(name: str) -> str:
  """The AMD bring-up step a KFD call (AMDKFD_IOC_*) belongs to."""
  if "QUEUE" in name: return "queues"
  if "EVENT" in name: return "events"
  if any(k in name for k in ("ACQUIRE_VM", "APERTURES", "AVAILABLE_MEMORY")): return "VM and apertures"
  if "MEMORY" in name: return "memory"
  return "KFD"
AMD_STEPS = ("KFD", "VM and apertures", "memory", "events", "queues")

class StepPort:
  """A port that records each ioctl (name, step, error, duration) on its way to the wrapped port; everything else
  passes through. `recording = False` once the stage is over."""
  def __init__(self, inner: Any, classify: Callable[[str], str], steps: Sequence[str]) -> None:
    self.inner, self.classify, self.steps, self.recording = inner, classify, tuple(steps), True
    self.calls: list[tuple[str, str, str | None, float]] = []
  def ioctl(self, fd: int, request: int, arg: Any, name: str | None = None) -> int:
    # after the first failure only the clean-up runs: it is not a step of the bring-up
    if not self.recording or any(c[2] is not None for c in self.calls): return self.inner.ioctl(fd, request, arg, name)
    from baregrad.drivers.port import ioctl_name, _rm_status, _status_name
    nm = name or ioctl_name(request)
    t = time.perf_counter()
    try: r = self.inner.ioctl(fd, request, arg, name)
    except Exception as e:
      self.calls.append((self.classify(nm), nm, f"{type(e).__name__}: {e}", time.perf_counter() - t))
      raise
    st = _rm_status(arg)   # RM answers most refusals with ioctl() = 0 and a status in the struct
    self.calls.append((self.classify(nm), nm, f"RM status {_status_name(st)}" if st else None, time.perf_counter() - t))
    return r
  def __getattr__(self, k: str) -> Any: return getattr(self.inner, k)

  def report(self, error: BaseException | None = None) -> str:
    """One line per step: ok with its calls, FAILED at its failing call (the ioctl's error, or `error` raised after the
    step's last call: an RM status, a refused reply), or not reached."""
    failed = None
    if (bad := next((c for c in self.calls if c[2] is not None), None)) is not None:
      failed = (bad[0], bad[1], f"{type(error).__name__}: {error}" if error is not None else bad[2])
    elif error is not None and self.calls: failed = (self.calls[-1][0], self.calls[-1][1], f"{type(error).__name__}: {error}")
    lines, reached = [], True
    for i, step in enumerate(self.steps):
      mine = [c for c in self.calls if c[0] == step]
      names = Counter(c[1] for c in mine)
      calls = ", ".join(f"{n}" + (f" x{k}" if k > 1 else "") for n, k in list(names.items())[:6]) + (", ..." if len(names) > 6 else "")
      head = f"  step {i + 1}/{len(self.steps)} {step}:"
      if failed is not None and failed[0] == step:
        lines.append(f"{head} FAILED at {failed[1]}: {failed[2].splitlines()[0]}" + (f" (after {calls})" if calls else ""))
        reached = False
      elif not mine: lines.append(f"{head} {'no calls' if reached and failed is None else 'not reached'}")
      else: lines.append(f"{head} ok, {len(mine)} calls in {sum(c[3] for c in mine) * 1e3:.2f} ms: {calls}")
    return "\n".join(lines)
