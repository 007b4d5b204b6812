"""Channel errors in words: the kernel log's Xid lines read and decoded, and the exception the NV driver raises.

RM reports a channel error twice: the Xid number in the channel's error notifier (status 0xffff, info32 = Xid), which
the driver polls, and a line in the kernel log with what the GPU said (docs/hw/h100-580.159.04-findings.md#xid-lines):

  NVRM: Xid (PCI:0000:00:06): 69, name=python3, Class Error: channel 0x0000000a, Class 0000cbc0, Offset 000002a4, Data fe000000, ErrorCode 00000004
  NVRM: Xid (PCI:0000:00:06): 31, name=python3, channel 0x0000000a, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_GCC
        faulted @ 0x20_00326000. Fault is of type FAULT_PTE ACCESS_TYPE_VIRT_READ     (one line in the log, wrapped here)
  NVRM: Xid (PCI:0000:00:06): 109, name=python3, channel 0x0000000b, errorString CTX SWITCH TIMEOUT, Info 0xdc008

KernelLog reads /dev/kmsg through the driver's port (the mock GPU serves its own), from the position it had when the
device opened; where the log cannot be read (kernel.dmesg_restrict=1 without CAP_SYSLOG) it says so and why."""
from __future__ import annotations
import errno, os, re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence
from baregrad.drivers.nv import hw
from baregrad.hcq import where_is  # (re-exported: the NV and AMD fault messages share it)

_XID = re.compile(r"NVRM: Xid \((?P<pci>[^)]*)\): (?P<xid>\d+), (?P<rest>.*)")
_CLASS_ERR = re.compile(r"channel 0x(?P<ch>[0-9a-fA-F]+), Class (?P<cls>[0-9a-fA-F]+), Offset (?P<off>[0-9a-fA-F]+), "
                        r"Data (?P<data>[0-9a-fA-F]+)(?:, ErrorCode (?P<code>[0-9a-fA-F]+))?")
_MMU = re.compile(r"channel 0x(?P<ch>[0-9a-fA-F]+).*MMU Fault: ENGINE (?P<engine>\S+) (?P<unit>.*?) faulted @ "
                  r"0x(?P<hi>[0-9a-fA-F]+)_(?P<lo>[0-9a-fA-F]+)\. Fault is of type (?P<type>\S+) (?P<access>\S+)")
_ERRSTR = re.compile(r"channel 0x(?P<ch>[0-9a-fA-F]+), errorString (?P<what>[^,]+)(?:, Info (?P<info>\S+))?")

_CHANNEL = re.compile(r"channel 0x(?P<ch>[0-9a-fA-F]+)")
_ESR_QMD = re.compile(r"ESR .*0x40702c=0x(?P<q>[0-9a-fA-F]+)")

@dataclass
class XidReport:
  """One Xid line of the kernel log, parsed."""
  xid: int
  line: str
  channel: int | None = None
  fields: dict[str, Any] = field(default_factory=dict)

def parse_xid(line: str) -> XidReport | None:
  m = _XID.search(line)
  if m is None: return None
  r, rest = XidReport(int(m.group("xid")), line.strip()), m.group("rest")
  # a "Graphics Exception" line has no ErrorCode; with Offset 0 it names no method (a SKED check), only the channel
  if (c := _CLASS_ERR.search(rest)) is not None and (c.group("code") or int(c.group("off"), 16)):
    r.channel = int(c.group("ch"), 16)
    r.fields = {"class": int(c.group("cls"), 16), "offset": int(c.group("off"), 16), "data": int(c.group("data"), 16),
                "code": int(c.group("code"), 16) if c.group("code") else None}
  elif (c := _MMU.search(rest)) is not None:
    r.channel = int(c.group("ch"), 16)
    r.fields = {"address": (int(c.group("hi"), 16) << 32) | int(c.group("lo"), 16), "engine": c.group("engine"),
                "unit": c.group("unit"), "type": c.group("type"), "access": c.group("access")}
  elif (c := _ERRSTR.search(rest)) is not None:
    r.channel = int(c.group("ch"), 16)
    r.fields = {"error": c.group("what").strip(), "info": c.group("info")}
  elif (c := _CHANNEL.search(rest)) is not None:   # "Graphics Exception: channel 0x.., Class .., Offset 0, Data 0"
    r.channel = int(c.group("ch"), 16)
  elif (c := _ESR_QMD.search(rest)) is not None:    # the SKED's ESR: 0x40702c holds the failing QMD's address >> 8
    r.fields = {"esr_qmd": int(c.group("q"), 16) << 8}
  return r

def attribute(lines: Sequence[str], channels: set[int]) -> tuple[list[XidReport], list[str]]:
  """The Xid reports of `lines` that belong to `channels`, and the lines that are no Xid report. RM prints an error as
  several lines of which only the last names the channel (the H100, docs/hw/h100-580.159.04-2026-11-28.md: "Graphics
  Exception: SKEDCHECK14_SHARED_MEMORY_SIZE failed", "Graphics Exception: ESR ...", then "Graphics Exception: channel
  0x00000012, Class ..."); their pid= is the process RM interrupted, not always the channel's owner. So lines without a
  channel go with the next line that names one; those still waiting for one at the end are kept."""
  mine: list[XidReport] = []
  other: list[str] = []
  waiting: list[XidReport] = []
  for line in lines:
    r = parse_xid(line)
    if r is None: other.append(line)
    elif r.channel is None: waiting.append(r)
    else:
      if r.channel in channels: mine += waiting + [r]
      waiting = []
  return mine + waiting, other

def _method_words(cls: int, offset: int) -> str:
  name = hw.class_method_name(cls, offset)
  if cls in hw.COMPUTE_CLASSES and offset >= 0x100 and offset not in hw.COMPUTE_LEGAL_METHODS: return "(no method the class header defines)"
  return name

def decode(r: XidReport, memories: Sequence[Any] = (), qmds: dict[int, str] | None = None) -> str:
  """An Xid line in words: the class method by name, the fault address against the device's allocations, a QMD
  address against the kernels last launched with it (`qmds`)."""
  name = hw.XID_NAMES.get(r.xid, "unknown Xid")
  head = f"Xid {r.xid} ({name})" + (f" on channel {r.channel:#x}" if r.channel is not None else "")
  f = r.fields
  if "offset" in f:
    return (f"{head}: {hw.class_name(f['class'])} ({f['class']:#06x}) refused method {f['offset']:#x} "
            f"{_method_words(f['class'], f['offset'])} with data {f['data']:#x}"
            + (f" (error code {f['code']:#x})" if f["code"] is not None else ""))
  if "address" in f:
    return (f"{head}: MMU fault, {f['engine']} {f['unit']} {f['access']} ({f['type']}) at {f['address']:#x}: "
            f"{where_is(f['address'], memories)}")
  if "error" in f: return f"{head}: {f['error']}" + (f" (info {f['info']})" if f.get("info") else "")
  if "esr_qmd" in f:
    k = (qmds or {}).get(f["esr_qmd"])
    return f"{head}: {r.line}: QMD {f['esr_qmd']:#x}" + (f", last launched with kernel {k}" if k else "")
  return f"{head}: {r.line}"

class KernelLog:
  """New lines of the kernel log since this object was made, read from /dev/kmsg through `port` (records are
  "prio,seq,usec,flags;message"). `unreadable` names why, when the log cannot be read."""
  def __init__(self, port: Any, path: str = "/dev/kmsg") -> None:
    self.port, self.path, self.fd, self.unreadable = port, path, None, None
    try:
      self.fd = port.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
      why = errno.errorcode.get(e.errno or 0, str(e.errno))
      hint = " (kernel.dmesg_restrict=1 needs CAP_SYSLOG: run as root or `sysctl kernel.dmesg_restrict=0`)" if e.errno in (errno.EPERM, errno.EACCES) else ""
      self.unreadable = f"{path}: {why}{hint}"
      return
    seek = getattr(port, "lseek", None)
    if seek is not None:
      try: seek(self.fd, 0, os.SEEK_END); return
      except OSError: pass
    for _ in range(1 << 16):  # no lseek: read the old records away
      if self._read_one() is None: break

  def _read_one(self) -> str | None:
    while True:
      try: rec = self.port.read(self.fd, 8192)
      except BlockingIOError: return None
      except OSError as e:
        if e.errno == errno.EPIPE: continue        # records overwritten since the last read: go on with the next
        if e.errno == errno.EAGAIN: return None
        self.unreadable = f"{self.path}: read failed: {errno.errorcode.get(e.errno or 0, e.errno)}"
        return None
      if not rec: return None
      text = rec.decode(errors="replace")
      return text.split(";", 1)[1].rstrip("\n") if ";" in text.split("\n", 1)[0] else text.rstrip("\n")

  def new_lines(self, keep: Callable[[str], bool] = lambda s: True) -> list[str]:
    if self.fd is None: return []
    out: list[str] = []
    while (line := self._read_one()) is not None:
      if keep(line): out.append(line)
    return out

  def close(self) -> None:
    if self.fd is not None:
      try: self.port.close(self.fd)
      except OSError: pass
      self.fd = None

class NVChannelError(RuntimeError):
  """A channel error RM reported (an Xid in the error notifier): the Xid, the kernel log's lines decoded, the queue
  state when it was seen. The device recovers before this is raised: its channels are new, its buffers are valid."""
  def __init__(self, device: str, xid: int, reports: list[str], log_note: str, queue_state: str) -> None:
    self.device, self.xid, self.reports = device, xid, reports
    lines = [f"{device}: channel error Xid {xid} ({hw.XID_NAMES.get(xid, 'unknown Xid')}) reported in the error notifier"]
    lines += [f"  kernel log: {r}" for r in reports] or [f"  kernel log: {log_note}"]
    lines.append(f"  {device} recovered: channels rebuilt, buffers kept; the work in flight was lost")
    super().__init__("\n".join(lines) + "\n" + queue_state)
