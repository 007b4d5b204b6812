"""The state the kernel-driver model and the GPU engines share: RM objects, channels (RM creates them, the host
interface runs them), engine work in flight, and the errors (RMStatus: an RM call's status; GPUError: a channel error
with its Xid)."""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Any
from baregrad.drivers.nv import hw

class GPUError(Exception):
  """A channel error: the Xid, the rest of the kernel-log line RM prints after "name=...", and the mock's own why."""
  def __init__(self, xid: int, detail: str, why: str) -> None:
    super().__init__(f"Xid {xid}: {why}")
    self.xid, self.detail, self.why = xid, detail, why

@dataclass
class Work:
  """Engine work in flight on a channel: a grid launch or a copy, until the channel waits for idle."""
  kind: str
  what: str
  qmd: int = 0
  run: Any = None
  copy: tuple[int, int, int] | None = None
  sem: tuple[int, int, int] | None = None
  release: tuple[int, int, int] | None = None
  access: set = field(default_factory=set)   # {(allocation va, "r" | "w")} while running concurrently

def g(ch: Any, subc: int, method: int) -> int: return ch.regs.get((subc, method), 0)

@dataclass
class RMObject:
  handle: int
  cls: int
  parent: int | None
  children: list[int] = field(default_factory=list)
  data: Any = None

@dataclass
class Channel:
  obj: RMObject
  group: int
  token: int
  ring_va: int
  entries: int
  userd: int              # host address (the mock's view) of USERD
  error_notifier: int | None
  gp_get: int = 0
  subc_class: dict[int, int] = field(default_factory=dict)
  regs: dict[tuple[int, int], int] = field(default_factory=dict)
  cur: tuple[int, int, list] | None = None   # (GPFIFO index, pushbuffer address, decoded methods) being executed
  pos: int = 0                                # next method in cur
  blocked: str | None = None
  fault: str | None = None
  methods_done: int = 0
  client: int = 0
  vaspace: Any = None          # the VA space's data ({"flags": ...}) through the channel's context share
  bound: bool = False          # UVM_REGISTER_CHANNEL bound its buffers (RM's bIsContextBound)
  visible_put: int = 0         # GP_PUT as of the last doorbell: what the channel may run
  inflight: list = field(default_factory=list)     # Work launched since the last wait-for-idle
  snapshots: dict = field(default_factory=dict)    # (GPFIFO index, QMD) -> QMD + constant bank bytes at the doorbell

class RMStatus(Exception):
  def __init__(self, status: int, why: str = "") -> None:
    super().__init__(f"{hw.status_name(status)}: {why}")
    self.status = status
