"""What the NVIDIA GPU defines (not the driver): pushbuffer method encoding, GPFIFO entries, the host/copy/compute
class methods the stack uses, and decoders that print a command stream in words.

Shared by the driver (encoding, timeout messages), the mock GPU (which executes what it decodes) and
tools/nv_decode.py. Method numbers and field positions come from the generated bindings (open-gpu-doc class
headers, via ctypes_autogen.nv); the few the bindings lack are named here with the header they come from."""
from __future__ import annotations
import ctypes, re, struct
from dataclasses import dataclass
from typing import Any, Iterable, Sequence
from baregrad.ctypes_autogen.nv import nv_580 as nv
from baregrad.drivers.vmem import round_up

M32 = 0xFFFFFFFF

# ---------------------------------------------------------------- classes (cl*.h numbers; those missing from the bindings)
HOPPER_USERMODE_A = 0xc661          # clc661.h
TURING_USERMODE_A = 0xc461          # clc461.h
FERMI_CONTEXT_SHARE_A = 0x9067      # cl9067.h
NV01_MEMORY_SYSTEM_OS_DESCRIPTOR = 0x71  # cl0071.h
NV2080_ENGINE_TYPE_GRAPHICS = 1     # cl2080_notification.h engine types
NV2080_ENGINE_TYPE_COPY0 = 9
NVC361_NOTIFY_CHANNEL_PENDING = 0x90  # clc361.h: usermode doorbell register (write the work-submit token)
USERMODE_SIZE = 0x10000

AMPERE_USERMODE_A = 0xc561         # clc561.h (open-gpu-kernel-modules src/common/sdk/nvidia/inc/class)
BLACKWELL_USERMODE_A = 0xc761      # clc761.h (same place)
USERMODE_CLASSES = (HOPPER_USERMODE_A, TURING_USERMODE_A)  # what the driver allocates, in order of preference

CLASS_NAMES = {
  nv.NV01_ROOT_CLIENT: "NV01_ROOT_CLIENT", nv.NV01_DEVICE_0: "NV01_DEVICE_0", nv.NV20_SUBDEVICE_0: "NV20_SUBDEVICE_0",
  HOPPER_USERMODE_A: "HOPPER_USERMODE_A", TURING_USERMODE_A: "TURING_USERMODE_A", AMPERE_USERMODE_A: "AMPERE_USERMODE_A",
  BLACKWELL_USERMODE_A: "BLACKWELL_USERMODE_A", nv.FERMI_VASPACE_A: "FERMI_VASPACE_A",
  nv.KEPLER_CHANNEL_GROUP_A: "KEPLER_CHANNEL_GROUP_A", FERMI_CONTEXT_SHARE_A: "FERMI_CONTEXT_SHARE_A",
  nv.AMPERE_CHANNEL_GPFIFO_A: "AMPERE_CHANNEL_GPFIFO_A", nv.HOPPER_CHANNEL_GPFIFO_A: "HOPPER_CHANNEL_GPFIFO_A",
  nv.BLACKWELL_CHANNEL_GPFIFO_A: "BLACKWELL_CHANNEL_GPFIFO_A", nv.BLACKWELL_CHANNEL_GPFIFO_B: "BLACKWELL_CHANNEL_GPFIFO_B",
  nv.AMPERE_COMPUTE_A: "AMPERE_COMPUTE_A", nv.AMPERE_COMPUTE_B: "AMPERE_COMPUTE_B", nv.ADA_COMPUTE_A: "ADA_COMPUTE_A",
  nv.HOPPER_COMPUTE_A: "HOPPER_COMPUTE_A", nv.BLACKWELL_COMPUTE_A: "BLACKWELL_COMPUTE_A", nv.BLACKWELL_COMPUTE_B: "BLACKWELL_COMPUTE_B",
  nv.AMPERE_DMA_COPY_A: "AMPERE_DMA_COPY_A", nv.AMPERE_DMA_COPY_B: "AMPERE_DMA_COPY_B",
  nv.HOPPER_DMA_COPY_A: "HOPPER_DMA_COPY_A", nv.BLACKWELL_DMA_COPY_A: "BLACKWELL_DMA_COPY_A", nv.BLACKWELL_DMA_COPY_B: "BLACKWELL_DMA_COPY_B",
  nv.NV01_MEMORY_SYSTEM: "NV01_MEMORY_SYSTEM", nv.NV01_MEMORY_LOCAL_USER: "NV01_MEMORY_LOCAL_USER",
  NV01_MEMORY_SYSTEM_OS_DESCRIPTOR: "NV01_MEMORY_SYSTEM_OS_DESCRIPTOR",
}
def sm_from_version(smv: int) -> str:
  """GR_GET_INFO SM_VERSION (0x806, 0xa00, ...) -> 'sm_86', 'sm_100'."""
  return f"sm_{smv >> 8}{(smv & 0xFF) >> 4 if (smv & 0xFF) >= 0x10 else smv & 0xF}"

def launch_words(compute_class: int, qmd_addr: int) -> list[int]:
  """The launch method sequence of a compute class. AMPERE_COMPUTE_A through BLACKWELL_COMPUTE_B take the same one:
  INVALIDATE_SHADER_CACHES_NO_WFI (0x1698), SEND_PCAS_A (0x2b4: the QMD address >> 8), SEND_SIGNALING_PCAS2_B (0x2c0:
  PCAS_ACTION PREFETCH_SCHEDULE). Offsets from clc6c0.h (the bindings); open-gpu-doc's clc7c0.h and clcec0.h define
  the same methods at the same offsets (the bindings carry NVC7C0_SEND_SIGNALING_PCAS2_B_* too), and tinygrad's
  ops_nv.py launches Ampere through Blackwell with this sequence. What differs per class is the QMD (QMD_VERSION).
  Kept per class so a class that needs another sequence gets its own branch here."""
  if compute_class not in QMD_VERSION: raise ValueError(f"no launch sequence for {class_name(compute_class)}")
  return exec_words(qmd_addr)

# parameter blocks the kernel driver's unix layer wraps around NVOS structs (nv-unix-nvos-params-wrappers.h)
class nv_ioctl_nvos33_parameters_with_fd(ctypes.Structure):
  _fields_ = [("params", nv.NVOS33_PARAMETERS), ("fd", ctypes.c_int32)]
class nv_ioctl_nvos02_parameters_with_fd(ctypes.Structure):
  _fields_ = [("params", nv.NVOS02_PARAMETERS), ("fd", ctypes.c_int32)]

# class/cl0071.h: system memory described by the process's own pages (NV_ESC_RM_ALLOC_MEMORY, escape.c RmAllocOsDescriptor)
NV01_MEMORY_SYSTEM_OS_DESCRIPTOR = 0x71

class NVNotification(ctypes.Structure):
  """A channel's error notifier entry (nvos.h NvNotification): status 0xffff when RM reports an error, info32 = Xid."""
  _fields_ = [("timeStamp", ctypes.c_uint64), ("info32", ctypes.c_uint32), ("info16", ctypes.c_uint16), ("status", ctypes.c_uint16)]

def class_name(c: int) -> str: return CLASS_NAMES.get(c, f"class {c:#x}")

# ---------------------------------------------------------------- RM status codes
STATUS_NAMES: dict[int, str] = {}
for _k, _v in vars(nv).items():
  if (_k.startswith("NV_ERR_") or _k == "NV_OK") and isinstance(_v, int): STATUS_NAMES.setdefault(_v, _k)
def status_name(s: int) -> str: return STATUS_NAMES.get(s, f"NV status {s:#x}")

# robust-channel (Xid) codes written into a channel's error notifier (nverror.h)
XID_NAMES = {13: "ROBUST_CHANNEL_GR_EXCEPTION", 31: "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", 32: "ROBUST_CHANNEL_PBDMA_ERROR",
             43: "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", 45: "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL",
             69: "ROBUST_CHANNEL_GR_CLASS_ERROR",
             109: "CTX SWITCH TIMEOUT"}  # 109: not in nverror.h; the name is the errorString of the kernel log's line

# ---------------------------------------------------------------- pushbuffer method headers (clc56f.h NVC56F_DMA_*)
SEC_OP_INC, SEC_OP_NON_INC, SEC_OP_IMMD, SEC_OP_ONE_INC, SEC_OP_END_SEG = (nv.NVC56F_DMA_SEC_OP_INC_METHOD, nv.NVC56F_DMA_SEC_OP_NON_INC_METHOD,
  nv.NVC56F_DMA_SEC_OP_IMMD_DATA_METHOD, nv.NVC56F_DMA_SEC_OP_ONE_INC, nv.NVC56F_DMA_SEC_OP_END_PB_SEGMENT)
_F_SEC_OP, _F_COUNT, _F_SUBC, _F_ADDR = nv.NVC56F_DMA_SEC_OP, nv.NVC56F_DMA_METHOD_COUNT, nv.NVC56F_DMA_METHOD_SUBCHANNEL, nv.NVC56F_DMA_METHOD_ADDRESS

def mthd(subc: int, method: int, count: int, op: int = SEC_OP_INC) -> int:
  """A method header: `count` data words follow for `method` (a byte offset in the class) on subchannel `subc`."""
  return _F_SEC_OP.encode(op) | _F_COUNT.encode(count) | _F_SUBC.encode(subc) | _F_ADDR.encode(method >> 2)

# subchannels the stack binds (SET_OBJECT) on every channel
SUBC_COMPUTE, SUBC_COPY = 1, 4

# ---------------------------------------------------------------- host class (NVC56F / NVC86F) semaphores
SEM_ADDR_LO, SEM_EXECUTE = nv.NVC56F_SEM_ADDR_LO, nv.NVC56F_SEM_EXECUTE
F_SEM_OP, F_SEM_SWITCH, F_SEM_WFI = nv.NVC56F_SEM_EXECUTE_OPERATION, nv.NVC56F_SEM_EXECUTE_ACQUIRE_SWITCH_TSG, nv.NVC56F_SEM_EXECUTE_RELEASE_WFI
F_SEM_SIZE, F_SEM_TS, F_SEM_RED, F_SEM_FMT = (nv.NVC56F_SEM_EXECUTE_PAYLOAD_SIZE, nv.NVC56F_SEM_EXECUTE_RELEASE_TIMESTAMP,
                                             nv.NVC56F_SEM_EXECUTE_REDUCTION, nv.NVC56F_SEM_EXECUTE_REDUCTION_FORMAT)
SEM_OP_NAMES = {0: "ACQUIRE", 1: "RELEASE", 2: "ACQ_STRICT_GEQ", 3: "ACQ_CIRC_GEQ", 4: "ACQ_AND", 5: "ACQ_NOR", 6: "REDUCTION"}
SEM_RED_NAMES = {0: "IMIN", 1: "IMAX", 2: "IXOR", 3: "IAND", 4: "IOR", 5: "IADD", 6: "INC", 7: "DEC"}

SEM_EXEC_ACQUIRE_GEQ = (F_SEM_OP.encode(nv.NVC56F_SEM_EXECUTE_OPERATION_ACQ_STRICT_GEQ) | F_SEM_SWITCH.encode(1) | F_SEM_SIZE.encode(1))
SEM_EXEC_RELEASE = (F_SEM_OP.encode(nv.NVC56F_SEM_EXECUTE_OPERATION_RELEASE) | F_SEM_WFI.encode(1) | F_SEM_SIZE.encode(1) | F_SEM_TS.encode(1))
# a timestamp without touching the value: a 64-bit reduction "add 0" that also writes the release timestamp
SEM_EXEC_TIMESTAMP = (F_SEM_OP.encode(nv.NVC56F_SEM_EXECUTE_OPERATION_REDUCTION) | F_SEM_RED.encode(nv.NVC56F_SEM_EXECUTE_REDUCTION_IADD)
                      | F_SEM_FMT.encode(1) | F_SEM_WFI.encode(1) | F_SEM_SIZE.encode(1) | F_SEM_TS.encode(1))

_SEM_HDR = mthd(0, SEM_ADDR_LO, 5)
def sem_words(addr: int, payload: int, execute: int) -> list[int]:
  """SEM_ADDR_LO..SEM_EXECUTE as one 5-method incrementing burst: addr lo/hi, payload lo/hi, execute."""
  return [_SEM_HDR, addr & M32, addr >> 32, payload & M32, payload >> 32, execute]

MEM_OP_A, WFI, NOP, SET_OBJECT = nv.NVC86F_MEM_OP_A, nv.NVC56F_WFI, nv.NVC56F_NOP, nv.NVC56F_SET_OBJECT
def wfi_words() -> list[int]:
  """WFI (scope all): the channel waits until the engines are idle, i.e. every grid launched before has finished."""
  return [mthd(0, WFI, 1), nv.NVC56F_WFI_SCOPE_ALL]

def membar_words() -> list[int]:
  """WFI, then MEM_OP_D MEMBAR (system-scope memory barrier)."""
  return [mthd(0, WFI, 1), nv.NVC56F_WFI_SCOPE_ALL, mthd(0, MEM_OP_A, 4), 0, 0,
          nv.NVC56F_MEM_OP_C_MEMBAR_TYPE.encode(nv.NVC86F_MEM_OP_C_MEMBAR_TYPE_SYS_MEMBAR),
          nv.NVC56F_MEM_OP_D_OPERATION.encode(nv.NVC86F_MEM_OP_D_OPERATION_MEMBAR)]

# ---------------------------------------------------------------- copy class (NVC8B5)
OFFSET_IN_UPPER, LINE_LENGTH_IN, LINE_COUNT, LAUNCH_DMA = nv.NVC8B5_OFFSET_IN_UPPER, nv.NVC8B5_LINE_LENGTH_IN, 0x41c, nv.NVC8B5_LAUNCH_DMA
SET_SEMAPHORE_A = nv.NVC8B5_SET_SEMAPHORE_A
LAUNCH_DMA_COPY = (nv.NVC8B5_LAUNCH_DMA_DATA_TRANSFER_TYPE.encode(nv.NVC8B5_LAUNCH_DMA_DATA_TRANSFER_TYPE_NON_PIPELINED)
                   | nv.NVC8B5_LAUNCH_DMA_FLUSH_ENABLE.encode(1) | nv.NVC8B5_LAUNCH_DMA_SRC_MEMORY_LAYOUT.encode(1)
                   | nv.NVC8B5_LAUNCH_DMA_DST_MEMORY_LAYOUT.encode(1))

def copy_words(dest: int, src: int, nbytes: int) -> list[int]:
  """OFFSET_IN_UPPER/LOWER, OFFSET_OUT_UPPER/LOWER (high word first), LINE_LENGTH_IN, LAUNCH_DMA (one pitch line)."""
  return [mthd(SUBC_COPY, OFFSET_IN_UPPER, 4), src >> 32, src & M32, dest >> 32, dest & M32,
          mthd(SUBC_COPY, LINE_LENGTH_IN, 1), nbytes, mthd(SUBC_COPY, LAUNCH_DMA, 1), LAUNCH_DMA_COPY]

# ---------------------------------------------------------------- compute class (NVC6C0 family) launch methods
SEND_PCAS_A, SEND_SIGNALING_PCAS2_B, INVALIDATE_SHADER_CACHES_NO_WFI = nv.NVC6C0_SEND_PCAS_A, 0x2c0, nv.NVC6C0_INVALIDATE_SHADER_CACHES_NO_WFI

# ---------------------------------------------------------------- method names (per class kind)
def _names(prefix: str, keep: Iterable[str] = ()) -> dict[int, str]:
  out: dict[int, str] = {}
  fields = {k.rsplit("_", 1)[0] for k, v in vars(nv).items() if k.startswith(prefix) and type(v).__name__ == "BitField"}
  for k, v in vars(nv).items():
    if not k.startswith(prefix) or not isinstance(v, int): continue
    rest = k[len(prefix):]
    # method offsets are 4-byte aligned and not enumerants: skip field values (ALL_CAPS_FALSE, _TRUE, ...)
    if v % 4 or v >= 0x4000 or any(rest.endswith(s) for s in ("_FALSE", "_TRUE")): continue
    # a long name is a method when the header defines bit fields under it (NAME_FIELD hi:lo), else an enumerant
    if rest.count("_") > 4 and rest not in keep and not any(f == k or f.startswith(k + "_") for f in fields): continue
    out.setdefault(v, rest)
  return out

HOST_METHODS = {0x0: "SET_OBJECT", 0x4: "ILLEGAL", 0x8: "NOP", 0x10: "SEMAPHOREA", 0x14: "SEMAPHOREB", 0x18: "SEMAPHOREC", 0x1c: "SEMAPHORED",
                0x20: "NON_STALL_INTERRUPT", 0x28: "MEM_OP_A", 0x2c: "MEM_OP_B", 0x30: "MEM_OP_C", 0x34: "MEM_OP_D", 0x50: "SET_REFERENCE",
                0x5c: "SEM_ADDR_LO", 0x60: "SEM_ADDR_HI", 0x64: "SEM_PAYLOAD_LO", 0x68: "SEM_PAYLOAD_HI", 0x6c: "SEM_EXECUTE", 0x78: "WFI",
                0x80: "YIELD", 0x84: "CLEAR_FAULTED"}
COPY_METHODS = {0x240: "SET_SEMAPHORE_A", 0x244: "SET_SEMAPHORE_B", 0x248: "SET_SEMAPHORE_PAYLOAD", 0x260: "SET_SRC_PHYS_MODE",
                0x264: "SET_DST_PHYS_MODE", 0x300: "LAUNCH_DMA", 0x400: "OFFSET_IN_UPPER", 0x404: "OFFSET_IN_LOWER",
                0x408: "OFFSET_OUT_UPPER", 0x40c: "OFFSET_OUT_LOWER", 0x410: "PITCH_IN", 0x414: "PITCH_OUT", 0x418: "LINE_LENGTH_IN",
                0x41c: "LINE_COUNT", 0x100: "NOP"}
COMPUTE_METHODS = _names("NVC6C0_")
COMPUTE_METHODS[SEND_SIGNALING_PCAS2_B] = "SEND_SIGNALING_PCAS2_B"

def _legal_methods(prefix: str, named: dict[int, str]) -> frozenset[int]:
  """Every method offset the class header defines: its scalar methods, and each array method NAME(i) from its base up
  to the next method the header defines (the header gives no count; 256 entries at most)."""
  legal = set(named)
  stops = sorted(named)
  for k, f in vars(nv).items():
    if not k.startswith(prefix) or not callable(f) or type(f).__name__ == "BitField": continue
    try: base, step = f(0), f(1) - f(0)
    except Exception: continue  # a helper that is not an indexed method
    if not isinstance(base, int) or step <= 0 or base % 4 or base >= 0x4000: continue
    nxt = next((s for s in stops if s > base), 0x4000)
    legal.update(a for a in range(base, min(nxt, base + 256 * step), step))
  return frozenset(legal)

# the compute methods the class header (clc6c0.h family) defines; a write to any other offset is an illegal method
COMPUTE_LEGAL_METHODS = _legal_methods("NVC6C0_", COMPUTE_METHODS)

def method_name(subc_class: int | None, method: int) -> str:
  if method < 0x100: return HOST_METHODS.get(method, f"HOST_{method:#x}")
  if subc_class in DMA_CLASSES or (subc_class is None and method in COPY_METHODS and method >= 0x240):
    return COPY_METHODS.get(method, f"COPY_{method:#x}")
  return COMPUTE_METHODS.get(method, f"{method:#x}")

# ---------------------------------------------------------------- pushbuffer decoding
class PushbufferError(ValueError):
  """A malformed pushbuffer (what a PBDMA would fault on)."""

@dataclass(frozen=True)
class Method:
  subc: int
  method: int    # byte offset in the class
  value: int
  pos: int       # word index of the data word (or of the header for immediates)

def decode_pushbuffer(words: Sequence[int]) -> list[Method]:
  """Every method write in a pushbuffer segment, in order."""
  out: list[Method] = []
  p, n = 0, len(words)
  while p < n:
    h = int(words[p])
    op, subc, addr = _F_SEC_OP.decode(h), _F_SUBC.decode(h), _F_ADDR.decode(h) << 2
    if op == SEC_OP_IMMD:
      out.append(Method(subc, addr, nv.NVC56F_DMA_IMMD_DATA.decode(h), p)); p += 1; continue
    if op == SEC_OP_END_SEG: break
    if op == 0 and h == 0: p += 1; continue  # NVC56F_DMA_NOP
    if op not in (SEC_OP_INC, SEC_OP_NON_INC, SEC_OP_ONE_INC):
      raise PushbufferError(f"bad method header {h:#010x} at word {p}: opcode {op}")
    count = _F_COUNT.decode(h)
    if p + 1 + count > n: raise PushbufferError(f"method header {h:#010x} at word {p} wants {count} data words, segment has {n - p - 1}")
    for i in range(count):
      m = addr + 4 * i if op == SEC_OP_INC else addr if op == SEC_OP_NON_INC else addr + (4 if i else 0)
      out.append(Method(subc, m, int(words[p + 1 + i]), p + 1 + i))
    p += 1 + count
  return out

def _sem_desc(execute: int) -> str:
  op = F_SEM_OP.decode(execute)
  s = SEM_OP_NAMES.get(op, f"op{op}")
  if op == 6: s += f" {SEM_RED_NAMES.get(F_SEM_RED.decode(execute), '?')}"
  s += " 64-bit" if F_SEM_SIZE.decode(execute) else " 32-bit"
  if F_SEM_TS.decode(execute): s += " +timestamp"
  return s

def summarize(methods: Sequence[Method], classes: dict[int, int] | None = None) -> list[tuple[int, str]]:
  """Methods grouped into the commands they form: (position of the first method, line). Semaphore acquires read as
  WAIT, releases as SIGNAL, a timestamp-only reduction as TIMESTAMP, LAUNCH_DMA as COPY, SEND_PCAS as EXEC."""
  classes = classes or {}
  st: dict[tuple[int, int], int] = {}
  out: list[tuple[int, str]] = []
  start: int | None = None
  pending: list[Method] = []
  for m in methods:
    if start is None: start = m.pos
    st[(m.subc if m.method >= 0x100 else 0, m.method)] = m.value
    g = lambda meth, subc=0: st.get((subc, meth), 0)
    line = None
    if m.method == SEM_EXECUTE:
      addr = g(SEM_ADDR_LO) | (g(SEM_ADDR_LO + 4) << 32)
      payload = g(SEM_ADDR_LO + 8) | (g(SEM_ADDR_LO + 12) << 32 if F_SEM_SIZE.decode(m.value) else 0)
      op = F_SEM_OP.decode(m.value)
      kind = "SIGNAL" if op == 1 else "TIMESTAMP" if op == 6 and payload == 0 and F_SEM_TS.decode(m.value) else "REDUCE" if op == 6 else "WAIT"
      if kind == "TIMESTAMP": line = f"TIMESTAMP addr={addr + 8:#x} (SEM_EXECUTE {_sem_desc(m.value)} at {addr:#x})"
      else: line = f"{kind:<9s} addr={addr:#x} value={payload} (SEM_EXECUTE {_sem_desc(m.value)})"
    elif m.method == LAUNCH_DMA and m.method >= 0x100 and classes.get(m.subc, nv.HOPPER_DMA_COPY_A) in DMA_CLASSES:
      s = m.subc
      src = (g(OFFSET_IN_UPPER, s) << 32) | g(OFFSET_IN_UPPER + 4, s)
      dst = (g(OFFSET_IN_UPPER + 8, s) << 32) | g(OFFSET_IN_UPPER + 12, s)
      line = f"COPY      dest={dst:#x} src={src:#x} nbytes={g(LINE_LENGTH_IN, s)} (LAUNCH_DMA {m.value:#x})"
    elif m.method == MEM_OP_A + 12: line = "BARRIER   (WFI, MEM_OP_D MEMBAR)"
    elif m.method == SEND_SIGNALING_PCAS2_B and m.method >= 0x100:
      line = f"EXEC      qmd={g(SEND_PCAS_A, m.subc) << 8:#x} (SEND_PCAS_A, SEND_SIGNALING_PCAS2_B {m.value:#x})"
    elif m.method == SET_OBJECT: line = f"SET_OBJECT subchannel {m.subc} = {class_name(m.value & 0xFFFF)}"
    if line is not None:
      out.append((start, line))
      start, pending = None, []
    else: pending.append(m)
  if pending:   # methods that form no launch, copy or semaphore (state setup, or an unknown offset): by name
    out.append((pending[0].pos, "METHODS   " + ", ".join(
      f"{method_name(classes.get(m.subc) if m.method >= 0x100 else None, m.method)}={m.value:#x}" for m in pending[:6])
      + (f", ... ({len(pending)} methods)" if len(pending) > 6 else "")))
  return out

# ---------------------------------------------------------------- method values split into their fields
_FIELD_PREFIX = {"host": ("NVC56F_", "NVC86F_"), "copy": ("NVC8B5_",), "compute": ("NVC6C0_",)}

def _bitfields(prefix: str) -> dict[str, Any]:
  return {k[len(prefix):]: v for k, v in vars(nv).items() if k.startswith(prefix) and type(v).__name__ == "BitField"}
_BITFIELDS = {kind: [(p, _bitfields(p)) for p in ps] for kind, ps in _FIELD_PREFIX.items()}

def method_fields(subc_class: int | None, method: int, value: int) -> list[tuple[str, int, str | None]]:
  """A method's data word split into the fields its class header defines (NAME_FIELD hi:lo): (field, value, the
  header's enumerant name for that value or None), low bit first. Empty when the header defines no fields for it."""
  kind = "host" if method < 0x100 else "copy" if subc_class in DMA_CLASSES else "compute"
  name = method_name(subc_class, method)
  methods = set((HOST_METHODS if kind == "host" else COPY_METHODS if kind == "copy" else COMPUTE_METHODS).values())
  for prefix, fields in _BITFIELDS[kind]:
    # a field of this method, not of a longer method name that starts the same (SEM_ADDR_LO vs SEM_ADDR_HI is fine;
    # SET_X vs SET_X_Y is not)
    mine = {k[len(name) + 1:]: f for k, f in fields.items() if k.startswith(name + "_")
            and not any(o != name and o.startswith(name + "_") and k.startswith(o + "_") for o in methods)}
    if not mine: continue
    out = []
    for fname, f in sorted(mine.items(), key=lambda kv: kv[1].lo):
      v = f.decode(value)
      longer = [f"{prefix}{name}_{o}_" for o in mine if o.startswith(fname + "_")]   # SEMAPHORE_REDUCTION vs .._SIGN
      enum = next((k[len(prefix) + len(name) + len(fname) + 2:] for k, e in vars(nv).items()
                   if k.startswith(f"{prefix}{name}_{fname}_") and type(e) is int and e == v
                   and not any(k.startswith(lp) for lp in longer)), None)
      out.append((fname, v, enum))
    return out
  return []

def format_fields(fields: Sequence[tuple[str, int, str | None]]) -> str:
  """`FIELD=VALUE` (or `FIELD=ENUM`) pairs of method_fields, space separated."""
  return " ".join(f"{n}={e}" if e is not None else f"{n}={v:#x}" for n, v, e in fields)

def format_methods(words: Sequence[int], classes: dict[int, int] | None = None, mark: int | None = None, base: int | None = None) -> str:
  """A pushbuffer segment in words: each method write, then the commands they form. `mark`: word index to flag."""
  classes = classes or {}
  try: ms = decode_pushbuffer(words)
  except PushbufferError as e: return f"    {e}"
  lines, marked = [], False
  for m in ms:
    where = f"{base + 4 * m.pos:#x}" if base is not None else f"@{m.pos}"
    here = mark is not None and not marked and m.pos >= mark
    marked |= here
    name = method_name(classes.get(m.subc) if m.method >= 0x100 else None, m.method)
    fields = format_fields(method_fields(classes.get(m.subc) if m.method >= 0x100 else None, m.method, m.value))
    lines.append(f"  {'->' if here else '  '}{where:>14s} subc{m.subc} {name:<34s} {m.value:#010x}" + (f"  {fields}" if fields else ""))
  return "\n".join(lines)

def format_commands(words: Sequence[int], classes: dict[int, int] | None = None, mark: int | None = None, read: Any = None,
                    names: dict[int, str] | None = None) -> str:
  """The commands a segment forms, one line each; `mark` (word index where the engine stopped) gets an arrow. With
  `read(addr, nbytes) -> bytes` each EXEC is followed by the launch its QMD describes (describe_launch; `names`: QMD
  address -> kernel name, for images the reader cannot reach)."""
  try: ms = decode_pushbuffer(words)
  except PushbufferError as e: return f"    {e}"
  cmds = summarize(ms, classes)
  out, marked = [], False
  ends = [p for p, _ in cmds[1:]] + [len(words)]
  version = QMD_VERSION.get((classes or {}).get(SUBC_COMPUTE, 0), 4)
  for (p, line), end in zip(cmds, ends):
    here = mark is not None and not marked and p <= mark < end
    marked |= here
    out.append(f"  {'->' if here else '  '}[@{p:5d}] {line}")
    if read is not None and line.startswith("EXEC ") and (m := re.match(r"EXEC\s+qmd=(0x[0-9a-f]+)", line)):
      out.append(f"             {describe_launch(int(m.group(1), 16), read, version, names)}")
  return "\n".join(out)

def kernel_name_at(program: int, read: Any) -> str | None:
  """The entry name a program image (pack_image) keeps before the code at `program`, or None where there is none."""
  try:
    tr = read_image_trailer(read(program - IMAGE_TRAILER, IMAGE_TRAILER))
    if tr is None: return None
    tlen, nlen, _ = tr
    start = program - image_prefix_bytes(tlen, nlen)
    return read(start + tlen + 1, nlen).decode(errors="replace")
  except Exception: return None

def describe_launch(qmd_addr: int, read: Any, version: int = 4, names: dict[int, str] | None = None) -> str:
  """The launch the QMD at `qmd_addr` describes, in one line: kernel name (from the program image the QMD points at,
  else `names`), grid, block, shared bytes, registers, program and constant bank 0; `read(addr, nbytes) -> bytes`."""
  L = QMD_LAYOUTS.get(version)
  if L is None: return f"(QMD v0{version}: no layout to read it with)"
  try: q = read_qmd(words_of(read(qmd_addr, L.nbytes)), version)
  except Exception as e: return f"(cannot read the QMD at {qmd_addr:#x}: {e})"
  name = kernel_name_at(q["program"], read) or (names or {}).get(qmd_addr)
  cb = f" cbank0={q['cbank0']:#x}+{q['cbank0_size']:#x}" if q["cbank0"] is not None else " cbank0=none"
  return (f"launch {name!r}" if name else "launch (kernel name unknown)") + (
    f" grid={q['grid']} block={q['block']} shared={q['shared']} regs={q['regs']} local={q['local']} program={q['program']:#x}{cb}")

# ---------------------------------------------------------------- GPFIFO entries (NVC56F_GP_ENTRY0/1)
def gp_entry(addr: int, nwords: int, sync: bool = False) -> int:
  """A 64-bit GPFIFO entry pointing at `nwords` pushbuffer words at `addr` (4-byte aligned, below 2**40)."""
  if addr & 3 or addr >> 40: raise ValueError(f"pushbuffer address {addr:#x} must be 4-byte aligned and below 2**40")
  if not 0 < nwords < (1 << 21): raise ValueError(f"pushbuffer segment of {nwords} words does not fit a GPFIFO entry")
  lo = nv.NVC56F_GP_ENTRY0_GET.encode((addr & M32) >> 2)
  hi = (nv.NVC56F_GP_ENTRY1_GET_HI.encode(addr >> 32) | nv.NVC56F_GP_ENTRY1_LEVEL.encode(nv.NVC56F_GP_ENTRY1_LEVEL_SUBROUTINE)
        | nv.NVC56F_GP_ENTRY1_LENGTH.encode(nwords) | nv.NVC56F_GP_ENTRY1_SYNC.encode(int(sync)))
  return lo | (hi << 32)

def decode_gp_entry(e: int) -> tuple[int, int, bool]:
  """(pushbuffer address, length in words, sync) of a GPFIFO entry."""
  lo, hi = e & M32, e >> 32
  addr = (nv.NVC56F_GP_ENTRY0_GET.decode(lo) << 2) | (nv.NVC56F_GP_ENTRY1_GET_HI.decode(hi) << 32)
  return addr, nv.NVC56F_GP_ENTRY1_LENGTH.decode(hi), bool(nv.NVC56F_GP_ENTRY1_SYNC.decode(hi))

# USERD (Nvc56fControl_struct): GP_GET / GP_PUT word offsets
USERD_GP_GET = nv.struct_Nvc56fControl_struct.GPGet.offset
USERD_GP_PUT = nv.struct_Nvc56fControl_struct.GPPut.offset
USERD_GET, USERD_GET_HI = nv.struct_Nvc56fControl_struct.Get.offset, nv.struct_Nvc56fControl_struct.GetHi.offset  # pushbuffer read pointer

def words_of(b: bytes) -> list[int]: return list(struct.unpack(f"<{len(b) // 4}I", b[:len(b) // 4 * 4]))

# ---------------------------------------------------------------- QMD
QMD_PREFIX = {3: "NVC6C0_QMDV03_00_", 4: "NVCBC0_QMDV04_00_", 5: "NVCEC0_QMDV05_00_"}  # Ampere/Ada, Hopper, Blackwell

def decode_qmd(words: Sequence[int], version: int = 4) -> dict[str, int]:
  """The QMD's nonzero fields (qmd.py names without the class/version prefix; version 4 = Hopper): name -> value."""
  from baregrad.ctypes_autogen.nv import qmd
  prefix = QMD_PREFIX[version]
  out: dict[str, int] = {}
  for k, v in vars(qmd).items():
    if not k.startswith(prefix) or not isinstance(v, tuple) or len(v) != 2: continue
    if v[0] // 32 >= len(words): continue
    if (val := nv_bits(words, v[0], v[1])): out[k[len(prefix):]] = val
  return out

def nv_bits(words: Sequence[int], hi: int, lo: int) -> int:
  v = 0
  for i in range(hi // 32, lo // 32 - 1, -1): v = (v << 32) | int(words[i])
  return (v >> (lo % 32)) & ((1 << (hi - lo + 1)) - 1)

# The QMD's arrays: the constant buffer table and the release semaphores. The qmd headers define a constant buffer's
# fields as indexed macros NAME(i) (CONSTANT_BUFFER_VALID(i), _ADDR_*(i), _SIZE_SHIFTED4(i)), a release's as indexed
# macros (v04/v05 RELEASE_ENABLE(i), RELEASE_STRUCTURE_SIZE(i), ...) plus numbered plain ones (v04/v05
# RELEASE_SEMAPHORE<i>_ADDR_LOWER, v03 RELEASE<i>_ENABLE, ..._ADDRESS_LOWER). The number of elements is where an
# indexed field would run past the structure or into a plain field the header defines there (8 constant buffers,
# 3 releases in every version here).
QMD_ARRAYS = ("CONSTANT_BUFFER", "RELEASE")
_QMD_NUMBERED = re.compile(r"^(RELEASE)(?:_SEMAPHORE)?(\d)_(\w+)$")
_QMD_ELEMENTS: dict[int, dict[str, list[dict[str, tuple[int, int]]]]] = {}

def qmd_element_fields(version: int) -> dict[str, list[dict[str, tuple[int, int]]]]:
  """Per QMD array (QMD_ARRAYS), per element, its fields' (hi, lo) bit ranges, from the qmd header's indexed and
  numbered definitions (names without the class/version prefix and the array name)."""
  if version in _QMD_ELEMENTS: return _QMD_ELEMENTS[version]
  from baregrad.ctypes_autogen.nv import qmd
  prefix, nbits = QMD_PREFIX[version], QMD_LAYOUTS[version].nbytes * 8
  plain = {k[len(prefix):]: tuple(f) for k, f in vars(qmd).items() if k.startswith(prefix) and isinstance(f, tuple) and len(f) == 2}
  indexed = {k[len(prefix):]: f for k, f in vars(qmd).items() if k.startswith(prefix) and callable(f) and not isinstance(f, tuple)}
  def count(f: Any) -> int:
    i = 0
    while True:
      hi, lo = f(i)
      if hi >= nbits or any(not (ph < lo or pl > hi) for ph, pl in plain.values()): return i
      i += 1
  out: dict[str, list[dict[str, tuple[int, int]]]] = {}
  for group in QMD_ARRAYS:
    members = {k[len(group) + 1:]: f for k, f in indexed.items() if k.startswith(group + "_")}
    n = min((count(f) for f in members.values()), default=0)
    elems: list[dict[str, tuple[int, int]]] = [{m: tuple(f(i)) for m, f in members.items()} for i in range(n)]
    for k, f in plain.items():
      if (m := _QMD_NUMBERED.match(k)) and m.group(1) == group:
        while len(elems) <= int(m.group(2)): elems.append({})
        elems[int(m.group(2))][m.group(3)] = f
    out[group] = elems
  _QMD_ELEMENTS[version] = out
  return out

def _qmd_enumerant(version: int, group: str, i: int, field: str, value: int) -> str | None:
  """The header's name for `value` of an array field (NVCBC0_QMDV04_00_RELEASE_STRUCTURE_SIZE_SEMAPHORE_ONE_WORD, v03's
  NVC6C0_QMDV03_00_RELEASE0_STRUCTURE_SIZE_...), or None."""
  from baregrad.ctypes_autogen.nv import qmd
  for head in (f"{QMD_PREFIX[version]}{group}_{field}_", f"{QMD_PREFIX[version]}{group}{i}_{field}_"):
    for k, v in vars(qmd).items():
      if k.startswith(head) and type(v) is int and v == value and not k[len(head):].startswith(("SHIFT", "LOWER", "UPPER")): return k[len(head):]
  return None

_QMD_PLANS: dict[int, list[tuple[str, int, str, int, int, int]]] = {}

def _qmd_element_plan(version: int) -> list[tuple[str, int, str, int, int, int]]:
  """(array, index, joined field name, hi, lo, shift to apply) per array field: LOWER/UPPER pairs join into one name
  (UPPER shifted by 32 more), a SHIFTEDn field is shifted back by n."""
  if version in _QMD_PLANS: return _QMD_PLANS[version]
  plan = []
  for group, elems in qmd_element_fields(version).items():
    for i, fields in enumerate(elems):
      for name, (hi, lo) in fields.items():
        m = re.match(r"^(\w+?)_(LOWER|UPPER)(?:_SHIFTED(\d+))?$", name)
        if m: plan.append((group, i, m.group(1), hi, lo, int(m.group(3) or 0) + (32 if m.group(2) == "UPPER" else 0)))
        else:
          sh = re.search(r"_SHIFTED(\d+)$", name)
          plan.append((group, i, name[:sh.start()] if sh else name, hi, lo, int(sh.group(1)) if sh else 0))
  _QMD_PLANS[version] = plan
  return plan

def read_qmd_elements(words: Sequence[int], version: int = 4, only: set[tuple[str, int]] | None = None) -> dict[str, list[dict[str, int]]]:
  """Every element of the QMD's arrays (QMD_ARRAYS) read with the header's fields: a LOWER/UPPER pair is joined and a
  SHIFTEDn field shifted back (ADDR_LOWER_SHIFTED6 + ADDR_UPPER_SHIFTED6 -> ADDR in bytes, SIZE_SHIFTED4 -> SIZE).
  `only`: the (array, index) elements to read (the others stay empty)."""
  out: dict[str, list[dict[str, int]]] = {g: [{} for _ in e] for g, e in qmd_element_fields(version).items()}
  for group, i, name, hi, lo, sh in _qmd_element_plan(version):
    if only is not None and (group, i) not in only: continue
    row = out[group][i]
    row[name] = row.get(name, 0) | ((nv_bits(words, hi, lo) if hi // 32 < len(words) else 0) << sh)
  return out

def format_qmd_elements(words: Sequence[int], version: int = 4) -> str:
  """The constant buffer table and the release semaphores, one element a line (enumerated values by the header's
  name), every element shown; the lines format_qmd adds after the scalar fields."""
  lines = []
  for group, rows in read_qmd_elements(words, version).items():
    lines.append(f"  {group.lower().replace('_', ' ')}s ({len(rows)}, {QMD_PREFIX[version]}{group}_*):")
    for i, row in enumerate(rows):
      if not any(row.values()):
        lines.append(f"    [{i}] {'VALID' if 'VALID' in row else 'ENABLE'}=0 (all fields 0)"); continue
      parts = []
      for k, v in sorted(row.items(), key=lambda kv: kv[0] not in ("VALID", "ENABLE")):  # the element's on/off bit first
        if k not in ("ADDR", "ADDRESS", "PAYLOAD", "SIZE") and (name := _qmd_enumerant(version, group, i, k, v)) is not None:
          parts.append(f"{k}={name}")
        else: parts.append(f"{k}={v:#x}" if v > 9 else f"{k}={v}")
      lines.append(f"    [{i}] " + " ".join(parts))
  return "\n".join(lines)

def format_qmd(words: Sequence[int], version: int = 4) -> str:
  """A QMD as text: its nonzero scalar fields, then every element of its arrays (constant buffers, releases)."""
  f = decode_qmd(words, version)
  in_arrays = {k for elems in qmd_element_fields(version).values() for e in elems for k in e} if version in QMD_LAYOUTS else set()
  f = {k: v for k, v in f.items() if not (_QMD_NUMBERED.match(k) and _QMD_NUMBERED.match(k).group(3) in in_arrays)}  # type: ignore[union-attr]
  text = "\n".join(f"  {k:<40s} {v:#x}" for k, v in sorted(f.items())) or "  (all scalar fields zero)"
  return text + ("\n" + format_qmd_elements(words, version) if version in QMD_LAYOUTS else "")

# ---------------------------------------------------------------- QMDs: v03 (Ampere/Ada), v04 (Hopper), v05 (Blackwell)
# Field positions come from qmd.py (open-gpu-doc classes/compute/clc6c0qmd.h, clcbc0qmd.h, clcdc0qmd.h); the indexed
# ones (constant buffers, releases) are function-like macros there, generated as functions and called with index 0.
# Which QMD a compute class takes: the newest version its own qmd header defines that the class's launch path uses:
# AMPERE_COMPUTE_A/B and ADA_COMPUTE_A define QMDV02_0x and QMDV03_00 (clc6c0qmd.h, clc7c0qmd.h, clc9c0qmd.h; CUDA
# launches with V03_00), HOPPER_COMPUTE_A defines V03_00 and V04_00 (clcbc0qmd.h; V04_00 is Hopper's new layout with
# QMD_TYPE and CGA grids), BLACKWELL_COMPUTE_A/B define V04_01, V05_00 and V05_01 (clcdc0qmd.h, clcec0qmd.h; we use V05_00).
def _qmd_field(prefix: str, name: str, idx: int | None = None) -> tuple[int, int]:
  from baregrad.ctypes_autogen.nv import qmd
  f = getattr(qmd, prefix + name)
  return tuple(f(idx) if idx is not None else f)  # type: ignore[return-value]

@dataclass(frozen=True)
class QMDLayout:
  """Where one QMD version keeps what a grid launch needs: (hi, lo) bit ranges of the structure, and value shifts."""
  version: int
  nbytes: int
  grid: tuple[tuple[int, int], ...]
  block: tuple[tuple[int, int], ...]
  shared: tuple[int, int]
  shared_shift: int
  regs: tuple[int, int]
  barriers: tuple[int, int]
  prog_lo: tuple[int, int]
  prog_hi: tuple[int, int]
  prog_shift: int
  cb0_valid: tuple[int, int]
  cb0_lo: tuple[int, int]
  cb0_hi: tuple[int, int]
  cb0_shift: int
  cb0_size4: tuple[int, int]
  rel0_enable: tuple[int, int]
  rel0_payload64: tuple[int, int]
  rel0_addr_lo: tuple[int, int]
  rel0_addr_hi: tuple[int, int]
  rel0_payload_lo: tuple[int, int]
  rel0_payload_hi: tuple[int, int]
  major: tuple[int, int]
  minor: tuple[int, int]
  qmd_type: tuple[int, int] | None   # v04+ (QMD_TYPE_GRID_CTA); v03 has none
  local_high: tuple[int, int] = (0, 0)  # SHADER_LOCAL_MEMORY_HIGH_SIZE: per-thread stack (local) bytes of the launch
  local_shift: int = 0
  smcfg: tuple[tuple[int, int], ...] = ()  # MIN/MAX/TARGET_SM_CONFIG_SHARED_MEM_SIZE

def _smcfg(f: Any) -> tuple[tuple[int, int], ...]:
  return tuple(f(f"{k}_SM_CONFIG_SHARED_MEM_SIZE") for k in ("MIN", "MAX", "TARGET"))

def _layout(version: int, prefix: str, grid: tuple[str, str, str], shared: str, shared_shift: int, regs: str,
            prog: tuple[str, str], prog_shift: int, cb0: tuple[str, str], cb0_shift: int,
            release: tuple[str, str, str, str, str, str], minor: str, qmd_type: str | None, local: str,
            local_shift: int) -> QMDLayout:
  """One version's layout from its field names in qmd.py (`prefix` names the header and version)."""
  f = lambda n, i=None: _qmd_field(prefix, n, i)
  rel = lambda n: f(n) if version == 3 else f(n, 0)   # v04+ index their release enables (RELEASE_ENABLE(i))
  return QMDLayout(
    version=version, nbytes=0x100 if version == 3 else 0x180, grid=tuple(f(n) for n in grid),
    block=tuple(f(f"CTA_THREAD_DIMENSION{i}") for i in range(3)), shared=f(shared), shared_shift=shared_shift,
    regs=f(regs), barriers=f("BARRIER_COUNT"), prog_lo=f(prog[0]), prog_hi=f(prog[1]), prog_shift=prog_shift,
    cb0_valid=f("CONSTANT_BUFFER_VALID", 0), cb0_lo=f(cb0[0], 0), cb0_hi=f(cb0[1], 0), cb0_shift=cb0_shift,
    cb0_size4=f("CONSTANT_BUFFER_SIZE_SHIFTED4", 0), rel0_enable=rel(release[0]), rel0_payload64=rel(release[1]),
    rel0_addr_lo=f(release[2]), rel0_addr_hi=f(release[3]), rel0_payload_lo=f(release[4]),
    rel0_payload_hi=f(release[5]), major=f("QMD_MAJOR_VERSION"), minor=f(minor),
    qmd_type=f(qmd_type) if qmd_type else None, local_high=f(local), local_shift=local_shift, smcfg=_smcfg(f))

_RELEASE_V04 = ("RELEASE_ENABLE", "RELEASE_PAYLOAD64B", "RELEASE_SEMAPHORE0_ADDR_LOWER",
                "RELEASE_SEMAPHORE0_ADDR_UPPER", "RELEASE_SEMAPHORE0_PAYLOAD_LOWER", "RELEASE_SEMAPHORE0_PAYLOAD_UPPER")
_LAYOUT_V03 = _layout(3, "NVC6C0_QMDV03_00_", grid=("CTA_RASTER_WIDTH", "CTA_RASTER_HEIGHT", "CTA_RASTER_DEPTH"),
                      shared="SHARED_MEMORY_SIZE", shared_shift=0, regs="REGISTER_COUNT_V",
                      prog=("PROGRAM_ADDRESS_LOWER", "PROGRAM_ADDRESS_UPPER"), prog_shift=0,
                      cb0=("CONSTANT_BUFFER_ADDR_LOWER", "CONSTANT_BUFFER_ADDR_UPPER"), cb0_shift=0,
                      release=("RELEASE0_ENABLE", "RELEASE0_PAYLOAD64B", "RELEASE0_ADDRESS_LOWER",
                               "RELEASE0_ADDRESS_UPPER", "RELEASE0_PAYLOAD_LOWER", "RELEASE0_PAYLOAD_UPPER"),
                      minor="QMD_VERSION", qmd_type=None, local="SHADER_LOCAL_MEMORY_HIGH_SIZE", local_shift=0)
_LAYOUT_V04 = _layout(4, "NVCBC0_QMDV04_00_", grid=("GRID_WIDTH", "GRID_HEIGHT", "GRID_DEPTH"),
                      shared="SHARED_MEMORY_SIZE", shared_shift=0, regs="REGISTER_COUNT",
                      prog=("PROGRAM_ADDRESS_LOWER", "PROGRAM_ADDRESS_UPPER"), prog_shift=0,
                      cb0=("CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6", "CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6"), cb0_shift=6,
                      release=_RELEASE_V04, minor="QMD_MINOR_VERSION", qmd_type="QMD_TYPE",
                      local="SHADER_LOCAL_MEMORY_HIGH_SIZE", local_shift=0)
_LAYOUT_V05 = _layout(5, "NVCDC0_QMDV05_00_", grid=("GRID_WIDTH", "GRID_HEIGHT", "GRID_DEPTH"),
                      shared="SHARED_MEMORY_SIZE_SHIFTED7", shared_shift=7, regs="REGISTER_COUNT",
                      prog=("PROGRAM_ADDRESS_LOWER_SHIFTED4", "PROGRAM_ADDRESS_UPPER_SHIFTED4"), prog_shift=4,
                      cb0=("CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6", "CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6"), cb0_shift=6,
                      release=_RELEASE_V04, minor="QMD_MINOR_VERSION", qmd_type="QMD_TYPE",
                      local="SHADER_LOCAL_MEMORY_HIGH_SIZE_SHIFTED4", local_shift=4)

QMD_LAYOUTS: dict[int, QMDLayout] = {L.version: L for L in (_LAYOUT_V03, _LAYOUT_V04, _LAYOUT_V05)}
QMD_BYTES = 0x180   # the largest (v04/v05); the driver reserves this much per launch, 256-byte aligned
QMD_TYPE_GRID_CTA = 2
PCAS_ACTION_PREFETCH_SCHEDULE = 9

def set_bits(words: list[int] | Any, hi: int, lo: int, value: int) -> None:
  n = hi - lo + 1
  if value < 0 or value >> n: raise ValueError(f"{value:#x} does not fit QMD bits {hi}:{lo}")
  v = 0
  for i in range(hi // 32, lo // 32 - 1, -1): v = (v << 32) | int(words[i])
  sh = lo % 32
  v = (v & ~(((1 << n) - 1) << sh)) | (value << sh)
  for i in range(lo // 32, hi // 32 + 1): words[i] = (v >> (32 * (i - lo // 32))) & M32

# A launch's shared memory (SHARED_MEMORY_SIZE) is a multiple of 128 bytes, and the SM_CONFIG fields name the SM's
# L1/shared split ("carveout") in KiB / 4 + 1, only carveouts the SM has. Both from the H100 (docs/hw/
# h100-580.159.04-findings.md#finding-8): SHARED_MEMORY_SIZE 0x6c0 and MIN/TARGET naming 4, 24 or 48 KiB (the old
# rounding to 4 KiB) failed with Xid 13 "SKEDCHECK14_SHARED_MEMORY_SIZE failed"; 0x680, and 8, 16, 32 or 64 KiB ran.
# Blackwell's QMD v05 keeps the size in 128-byte units (SHARED_MEMORY_SIZE_SHIFTED7). The carveouts per compute
# capability are the CUDA C Programming Guide's (shared memory capacity per SM: 0, 8, 16, 32, 64, 100, 132, 164, 196
# or 228 KB on 9.0/10.0, up to 164 on 8.0, up to 100 on 8.6/8.9/12.0); a block may use 1 KiB less than the largest.
# Launches above 48 KB (dynamic shared memory) use the same fields; their widths hold every per-block limit
# (GPUArch.max_shared, plus the 1 KiB reserved on sm_90+): SHARED_MEMORY_SIZE is 18 bits of bytes in QMD V03_00
# (clc6c0qmd.h, bits 561:544) and V04_00 (clcbc0qmd.h, 601:584), SHARED_MEMORY_SIZE_SHIFTED7 11 bits of 128-byte units
# in V05_00 (clcdc0qmd.h, 1162:1152): 256 KiB each; MIN/MAX/TARGET_SM_CONFIG_SHARED_MEM_SIZE are 6 bits each
# (228 KiB / 4 + 1 = 58). tests/drivers/nv/test_dynamic_shared.py round-trips the largest launch of every generation.
SHARED_GRANULE = 128
SM_CARVEOUTS_KIB = (8, 16, 32, 64, 100, 132, 164, 196, 228)

def sm_carveouts(max_shared: int) -> tuple[int, ...]:
  """The shared-memory carveouts (KiB) of an SM whose blocks may use up to `max_shared` bytes."""
  return tuple(k for k in SM_CARVEOUTS_KIB if k <= (max_shared >> 10) + 1)

def sm_shared_config(shared: int, max_shared: int) -> tuple[int, int]:
  """(MIN/TARGET, MAX) SM_CONFIG_SHARED_MEM_SIZE values for a launch of `shared` bytes: the smallest carveout that holds
  it, and the largest the SM has, each as KiB / 4 + 1."""
  ks = sm_carveouts(max_shared)
  need = next((k for k in ks if k << 10 >= shared), None)
  if need is None: raise ValueError(f"{shared} bytes of shared memory: no carveout of this SM holds them (largest {ks[-1]} KiB)")
  return need // 4 + 1, ks[-1] // 4 + 1

def build_qmd(program: int, cbank0: int, cbank0_size: int, grid: Sequence[int], block: Sequence[int], shared: int, regs: int,
              release: tuple[int, int] | None = None, version: int = 4, local: int = 0, max_shared: int = 0) -> list[int]:
  """A compute QMD of `version` (3: Ampere/Ada, 4: Hopper, 5: Blackwell) for one grid launch, as 96 words (v03 uses 64).
  `local`: per-thread local memory (stack) bytes the code needs (SHADER_LOCAL_MEMORY_HIGH_SIZE); `max_shared`: the most
  shared memory a block may use on this GPU (GPUArch.max_shared), which gives the SM's carveouts for the SM_CONFIG
  fields (sm_shared_config); a launch with shared memory needs it."""
  L = QMD_LAYOUTS.get(version)
  if L is None: raise ValueError(f"QMD version {version}: known versions are {sorted(QMD_LAYOUTS)}")
  w = [0] * (QMD_BYTES // 4)
  if L.qmd_type is not None: set_bits(w, *L.qmd_type, QMD_TYPE_GRID_CTA)
  set_bits(w, *L.major, version)
  for f, v in zip(L.grid, grid): set_bits(w, *f, v)
  for f, v in zip(L.block, block): set_bits(w, *f, v)
  sh = round_up(shared, SHARED_GRANULE)
  set_bits(w, *L.shared, sh >> L.shared_shift)
  if shared:
    if not max_shared: raise ValueError(f"a launch with {shared} bytes of shared memory needs the GPU's max_shared for its SM_CONFIG fields")
    need, top = sm_shared_config(sh, max_shared)
    for f, v in zip(L.smcfg, (need, top, need)): set_bits(w, *f, v)
  if local:
    set_bits(w, *L.local_high, round_up(local, 16) >> L.local_shift)
  set_bits(w, *L.regs, regs)
  set_bits(w, *L.barriers, 1)
  if program % (1 << L.prog_shift): raise ValueError(f"program at {program:#x} must be {1 << L.prog_shift}-byte aligned for QMD v0{version}")
  p = program >> L.prog_shift
  set_bits(w, *L.prog_lo, p & M32)
  set_bits(w, *L.prog_hi, p >> 32)
  if cbank0 % 64: raise ValueError(f"constant bank 0 at {cbank0:#x} must be 64-byte aligned")
  c = cbank0 >> L.cb0_shift
  set_bits(w, *L.cb0_valid, 1)
  set_bits(w, *L.cb0_lo, c & M32)
  set_bits(w, *L.cb0_hi, c >> 32)
  set_bits(w, *L.cb0_size4, round_up(cbank0_size, 16) >> 4)
  if release is not None:
    set_bits(w, *L.rel0_enable, 1)
    set_bits(w, *L.rel0_payload64, 1)
    set_bits(w, *L.rel0_addr_lo, release[0] & M32)
    set_bits(w, *L.rel0_addr_hi, release[0] >> 32)
    set_bits(w, *L.rel0_payload_lo, release[1] & M32)
    set_bits(w, *L.rel0_payload_hi, release[1] >> 32)
  return w[:L.nbytes // 4] if L.nbytes < QMD_BYTES else w


def read_qmd(words: Sequence[int], version: int = 4) -> dict[str, Any]:
  """The launch a QMD of `version` describes: grid, block, shared bytes, registers, program address, constant bank 0
  (addr, size), the major version the QMD itself states, its type (v04+), release 0, and from the QMD's arrays every
  valid constant buffer (`cbanks`) and enabled release (`releases`): read_qmd_arrays."""
  L = QMD_LAYOUTS[version]
  b = lambda f: nv_bits(words, *f)
  return {"grid": tuple(b(f) for f in L.grid), "block": tuple(b(f) for f in L.block),
          "shared": b(L.shared) << L.shared_shift, "regs": b(L.regs),
          "program": (b(L.prog_lo) | (b(L.prog_hi) << 32)) << L.prog_shift,
          "cbank0": ((b(L.cb0_lo) | (b(L.cb0_hi) << 32)) << L.cb0_shift) if b(L.cb0_valid) else None,
          "cbank0_size": b(L.cb0_size4) << 4, "type": b(L.qmd_type) if L.qmd_type is not None else QMD_TYPE_GRID_CTA,
          "local": b(L.local_high) << L.local_shift, "smcfg": tuple(b(f) for f in L.smcfg),
          "major": b(L.major), "version": version,
          "release0": (b(L.rel0_addr_lo) | (b(L.rel0_addr_hi) << 32), b(L.rel0_payload_lo) | (b(L.rel0_payload_hi) << 32),
                       b(L.rel0_payload64)) if b(L.rel0_enable) else None, **read_qmd_arrays(words, version)}

def read_qmd_arrays(words: Sequence[int], version: int = 4) -> dict[str, dict[int, Any]]:
  """The QMD's constant buffers that are VALID, as {index: (address, size in bytes)}, and its releases that are
  enabled, as {index: (address, payload, payload64b, structure size)} (read_qmd_elements has every field)."""
  fields = qmd_element_fields(version)
  on = lambda g, bit: [i for i, f in enumerate(fields[g]) if bit in f and nv_bits(words, *f[bit])]  # noqa: E731
  cbs, rels = on("CONSTANT_BUFFER", "VALID"), on("RELEASE", "ENABLE")
  if not cbs and not rels: return {"cbanks": {}, "releases": {}}
  el = read_qmd_elements(words, version, {("CONSTANT_BUFFER", i) for i in cbs} | {("RELEASE", i) for i in rels})
  return {"cbanks": {i: (el["CONSTANT_BUFFER"][i].get("ADDR", 0), el["CONSTANT_BUFFER"][i].get("SIZE", 0)) for i in cbs},
          "releases": {i: (r.get("ADDR", r.get("ADDRESS", 0)), r.get("PAYLOAD", 0), r.get("PAYLOAD64B", 0), r.get("STRUCTURE_SIZE", 0))
                       for i in rels for r in [el["RELEASE"][i]]}}

_INVALIDATE = (nv.NVC6C0_INVALIDATE_SHADER_CACHES_NO_WFI_INSTRUCTION.encode(1) | nv.NVC6C0_INVALIDATE_SHADER_CACHES_NO_WFI_GLOBAL_DATA.encode(1)
               | nv.NVC6C0_INVALIDATE_SHADER_CACHES_NO_WFI_CONSTANT.encode(1))
_EXEC_HEAD = (mthd(SUBC_COMPUTE, INVALIDATE_SHADER_CACHES_NO_WFI, 1), _INVALIDATE, mthd(SUBC_COMPUTE, SEND_PCAS_A, 1))
_EXEC_TAIL = (mthd(SUBC_COMPUTE, SEND_SIGNALING_PCAS2_B, 1), PCAS_ACTION_PREFETCH_SCHEDULE)

def exec_words(qmd_addr: int) -> list[int]:
  """Invalidate the shader caches, then SEND_PCAS_A (QMD address >> 8) + SEND_SIGNALING_PCAS2_B (prefetch and schedule)."""
  if qmd_addr % 256: raise ValueError(f"QMD at {qmd_addr:#x} must be 256-byte aligned")
  return [*_EXEC_HEAD, qmd_addr >> 8, *_EXEC_TAIL]

def relocate_qmd(words: list[int], version: int, program: int, cbank0: int) -> None:
  """Point a QMD of `version` (a list of its words, changed in place) at another program address and constant bank 0
  (what a replayed capture's launch needs: the rest of the QMD holds no address the driver sets)."""
  L = QMD_LAYOUTS[version]
  if program % (1 << L.prog_shift): raise ValueError(f"program at {program:#x} must be {1 << L.prog_shift}-byte aligned for QMD v0{version}")
  if cbank0 % 64: raise ValueError(f"constant bank 0 at {cbank0:#x} must be 64-byte aligned")
  p, c = program >> L.prog_shift, cbank0 >> L.cb0_shift
  set_bits(words, *L.prog_lo, p & M32)
  set_bits(words, *L.prog_hi, p >> 32)
  set_bits(words, *L.cb0_lo, c & M32)
  set_bits(words, *L.cb0_hi, c >> 32)

def qmd_cbank0_words(version: int, cbank0: int) -> tuple[int, int, int, int, int]:
  """Where constant bank 0's address goes in a QMD of `version`: (low word's index, its value, high word's index, the
  high part, its mask). The low part fills a word; the high part starts at bit 0 of the next one, which it shares with
  other fields (keep the bits outside the mask). Launches of one kernel differ only there (NVArgsState.write_qmd)."""
  L = QMD_LAYOUTS[version]
  if cbank0 % 64: raise ValueError(f"constant bank 0 at {cbank0:#x} must be 64-byte aligned")
  c = cbank0 >> L.cb0_shift
  assert L.cb0_lo[1] % 32 == 0 and L.cb0_lo[0] - L.cb0_lo[1] == 31 and L.cb0_hi[1] % 32 == 0
  mask = (1 << (L.cb0_hi[0] - L.cb0_hi[1] + 1)) - 1
  if c >> 32 > mask: raise ValueError(f"constant bank 0 at {cbank0:#x} does not fit QMD bits {L.cb0_hi[0]}:{L.cb0_lo[1]}")
  return L.cb0_lo[1] // 32, c & M32, L.cb0_hi[1] // 32, c >> 32, mask

# ---------------------------------------------------------------- program images
# The image the QMD's program address points into: [PTX text \0 entry name \0, padded][trailer 32 bytes][code...]
# [PROGRAM_GUARD]. The GPU runs the code at the program address; the mock GPU, which cannot run SASS, finds the PTX
# right before it, and the code's length in the trailer (the extent the real GPU learns by fetching the code).
IMAGE_MAGIC = b"BGPTX\0\2\0"
IMAGE_TRAILER = 32   # magic, u32 PTX length, u32 entry name length, u32 code length, 12 bytes 0
CODE_ALIGN = 256

def pack_image(ptx: str, name: str, code: bytes) -> tuple[bytes, int]:
  """(image bytes, offset of the code in it)."""
  t, nm = ptx.encode(), name.encode()
  block = t + b"\0" + nm + b"\0"
  block += b"\0" * (-len(block) % 16)
  head = block + IMAGE_MAGIC + struct.pack("<III12x", len(t), len(nm), len(code))
  pad = -len(head) % CODE_ALIGN
  return b"\0" * pad + head + code, pad + len(head)

def read_image_trailer(trailer: bytes) -> tuple[int, int, int] | None:
  """(PTX length, name length, code length) from the IMAGE_TRAILER bytes before the code, or None if there is none."""
  if len(trailer) != IMAGE_TRAILER or trailer[:8] != IMAGE_MAGIC: return None
  return struct.unpack_from("<III", trailer, 8)

def image_prefix_bytes(text_len: int, name_len: int) -> int:
  """How far before the code the PTX text starts (given the trailer's lengths)."""
  n = text_len + name_len + 2
  return n + (-n % 16) + IMAGE_TRAILER

def format_gpfifo(entries: Sequence[int], get: int, put: int, read: Any = None, classes: dict[int, int] | None = None, last: int = 8) -> str:
  """A GPFIFO ring in words: the entries between GP_GET and GP_PUT (pending) and up to `last` before GP_GET (done).
  `read(addr, nbytes) -> bytes`, when given, fetches each pushbuffer segment so its commands are decoded too."""
  n = len(entries)
  lines = [f"GPFIFO: {n} entries, GP_GET {get}, GP_PUT {put} ({(put - get) % n} pending)"]
  first = (get - min(last, (get - put) % n if put != get else last)) % n
  i = first
  while True:
    if i == put and i != first: break
    e = int(entries[i])
    pending = (i - get) % n < (put - get) % n
    # an empty slot is shown only when the GPU is to fetch it (a zero entry pending is a driver bug worth seeing)
    if e == 0 and not pending:
      i = (i + 1) % n
      if i == put: break
      continue
    addr, nw, sync = decode_gp_entry(e)
    state = "pending" if pending else "done"
    lines.append(f"  [{i:5d}] {state:<7s} pushbuffer {addr:#x} {nw} words{' SYNC' if sync else ''}")
    if read is not None and nw:
      try: lines.append(format_commands(words_of(read(addr, 4 * nw)), classes, read=read))
      except Exception as ex: lines.append(f"    (cannot read the segment: {ex})")
    i = (i + 1) % n
    if i == put: break
  return "\n".join(lines)

# ---------------------------------------------------------------- shader shared/local memory windows
# SET_SHADER_SHARED_MEMORY_WINDOW_A/B (0x2a0/0x2a4) and SET_SHADER_LOCAL_MEMORY_WINDOW_A/B (0x7b0/0x7b4) place the
# apertures through which generic addresses reach shared and local memory. The methods are the same in every compute
# class we drive (open-gpu-doc classes/compute/clc6c0.h, clc9c0.h, clcbc0.h, clcdc0.h, clcec0.h: a 17-bit
# BASE_ADDRESS_UPPER and a 32-bit BASE_ADDRESS at the same offsets); what differs is what the GPU accepts:
# - Ampere/Ada take 32-bit windows (shared 0xFE000000, local 0xFF000000: what Mesa's nvk/nouveau use on Volta..Ada).
# - Hopper refuses the 32-bit shared window (docs/hw/h100-580.159.04-findings.md#finding-3): Xid 69 GR class error at
#   offset 0x2a4, data 0xfe000000. The SASS ptxas emits for sm_90 and sm_100/sm_120 builds generic shared addresses from
#   the special register SR_SWINHI (the window's upper 32 bits: sass `S2R R5, SR_SWINHI` then a 64-bit pair (SWINHI,
#   offset)), so the shared window must be 4 GiB aligned. Mesa nvk (src/nouveau/vulkan/nvk_cmd_dispatch.c: "shared
#   memory window needs 4GB alignment on hopper+", applied for cls_compute >= HOPPER_COMPUTE_A, i.e. to
#   BLACKWELL_COMPUTE_A/B too) and nak's hw_runner.rs say the same. Neither NVIDIA's open kernel modules (580.x: no
#   window value anywhere under src/ or kernel-open/) nor open-gpu-doc state the alignment; for Blackwell it rests on
#   nvk and on SR_SWINHI in sm_100/sm_120 SASS, unconfirmed on Blackwell hardware. The 64-bit pair below is the one that
#   ran the H100 suite (finding 3).
SHADER_WINDOW_BYTES = 16 << 20   # each aperture; the 32-bit layout puts them 16 MiB apart (nvk's layout)

@dataclass(frozen=True)
class ShaderWindows:
  shared: int
  local: int
  def overlaps(self, va: int, size: int) -> bool:
    return any(va < w + SHADER_WINDOW_BYTES and w < va + size for w in (self.shared, self.local))

WINDOWS_32BIT = ShaderWindows(0xFE00_0000, 0xFF00_0000)
WINDOWS_64BIT = ShaderWindows(0x7294_0000_0000, 0x7293_0000_0000)
def shader_windows(compute_class: int) -> ShaderWindows:
  w = SHADER_WINDOWS.get(compute_class)
  if w is None: raise ValueError(f"no known shader memory windows for {class_name(compute_class)}")
  return w

# ---------------------------------------------------------------- constant bank 0 below the kernel parameters
# What ptxas's SASS reads from c[0x0][...] besides the parameters, per generation. Found by assembling our own kernels
# with ptxas 13.0 for sm_80, sm_89, sm_90, sm_100 and sm_120 and disassembling them with cuobjdump (nvidia-cuda-cuobjdump
# 13.5 wheel): a kernel reading %ntid/%nctaid in x, y, z; one with a 4 KiB .local array indexed at run time; generic
# pointers into .local (cvta.local) and into .shared (cvta.shared); extern dynamic .shared with %dynamic_smem_size and
# %total_smem_size; and ld/st with an L2::cache_hint policy (for the descriptor slot). The H100 findings agree for
# sm_90 (docs/hw/h100-580.159.04-findings.md#cbank0-sm90: 0x0..0x14, 0x20/0x24, 0x28, 0x208). Slots:
#   ntid.x/y/z      u32 x3   LDC R, c[0x0][RZ]/[0x4]/[0x8] (sm_80..90), c[0x0][0x360]/[0x364]/[0x368] (sm_100/120)
#   nctaid.x/y/z    u32 x3   c[0x0][0xc]/[0x10]/[0x14] (sm_80..90), c[0x0][0x370]/[0x374]/[0x378] (sm_100/120)
#   shared window   u64      IMAD.WIDE.U32 ..., c[0x0][0x18] for cvta.shared (sm_80/89). sm_90+ read SR_SWINHI instead;
#                            0x18 (sm_90) and 0x2f0 (sm_100+) are written with it all the same (tinygrad's NV backend
#                            writes them there; no SASS we compiled reads them)
#   local window    u64      IADD3 R2, P0, R1, c[0x0][0x20] / IADD3.X ..., c[0x0][0x24] for cvta.local (sm_80..90);
#                            c[0x0][0x2f8]/[0x2fc] (sm_100/120): generic <-> local conversion
#   stack pointer   u32      LDC R1, c[0x0][0x28] (sm_80..90) / c[0x0][0x37c] (sm_100/120), first instruction of every
#                            kernel; frames are R1 - frame size. The top of the per-thread local window less 0x240
#                            (0xfffdc0, what CUDA-launch replays and tinygrad write); SHADER_LOCAL_MEMORY_HIGH_SIZE
#                            covers frame + 0x240
#   dynamic shared  u32      %dynamic_smem_size = c[0x0][0x2c] (sm_80..90); on sm_100/120 it is c[0x0][0x2ac - 0xa0 *
#                            cluster size], i.e. 0x20c for a 1-CTA cluster (LDCU UR6, c[0x0][UR6+0x2ac])
#   reserved shared u32      %total_smem_size = SR_SMEMSZ - c[0x0][0x114] (sm_80..90) / c[0x0][0x16c] (sm_100/120):
#                            the shared bytes of the launch that are not the kernel's. On sm_90+ the CTA's shared data
#                            starts at 0x400 (SASS: LEA R0, SR_CgaCtaId, 0x400, 0x18) and ptxas counts that 1 KiB in the
#                            cubin's .nv.shared.<kernel> size (0x400 for a kernel without shared memory, 0x800 for one
#                            with a 1 KiB array; sm_80/89: 0 and 0x400), which is what the QMD gets (the H100 suite ran
#                            with it); so the slot holds 0x400 on sm_90+ and 0 on sm_80/89
#   memory desc     u64      ULDC.64 UR4, c[0x0][0x118] (sm_80/89) / [0x208] (sm_90) / LDCU.64
#                            [0x358] (sm_100/120), then LDG/STG desc[UR4][...]: the default memory-access descriptor of
#                            global loads and stores. With ld.global.L2::cache_hint the same desc[] pair is built from
#                            the createpolicy value instead (UMOV UR4, URZ; UR5 = policy bits << 20), so it is the
#                            default L2 cache policy. NVIDIA documents neither; the runs of finding 5
#                            (docs/hw/h100-580.159.04-findings.md#finding-5) had 0 there and every global access of the
#                            suite worked, so 0 is what we write. What CUDA itself writes there needs a CUDA launch on a
#                            GPU to read back (not done: no GPU in this work).
@dataclass(frozen=True)
class CBank0Layout:
  ntid: int
  nctaid: int
  shared_window: int
  local_window: int
  stack: int
  dyn_shared: int
  reserved_shared: int
  mem_desc: int
  params: int
  shared_base: int        # where the kernel's own shared data starts in the CTA's window (the reserved bytes before it)

STACK_TOP_RESERVE = 0x240           # bytes above the initial stack pointer at the top of the local window
INITIAL_STACK = SHADER_WINDOW_BYTES - STACK_TOP_RESERVE   # 0xfffdc0
# params: where the parameters start, what ptxas states per kernel in the cubin (EIATTR_PARAM_CBANK: 0x160 for
# sm_75..89, 0x210 for sm_90, 0x380 for sm_100/120) and what NVProgram checks a cubin against
CB_AMPERE = CBank0Layout(ntid=0x0, nctaid=0xc, shared_window=0x18, local_window=0x20, stack=0x28, dyn_shared=0x2c,
                         reserved_shared=0x114, mem_desc=0x118, params=0x160, shared_base=0)
CB_HOPPER = CBank0Layout(ntid=0x0, nctaid=0xc, shared_window=0x18, local_window=0x20, stack=0x28, dyn_shared=0x2c,
                         reserved_shared=0x114, mem_desc=0x208, params=0x210, shared_base=0x400)
CB_BLACKWELL = CBank0Layout(ntid=0x360, nctaid=0x370, shared_window=0x2f0, local_window=0x2f8, stack=0x37c,
                            dyn_shared=0x20c, reserved_shared=0x16c, mem_desc=0x358, params=0x380, shared_base=0x400)

def cbank0_layout(arch: str) -> CBank0Layout:
  L = CBANK0.get(arch)
  if L is None: raise ValueError(f"no known constant bank 0 layout for {arch}; known: {', '.join(CBANK0)}")
  return L

def cbank0_header(arch: str, grid: Sequence[int], block: Sequence[int], windows: ShaderWindows, dyn_shared: int) -> bytes:
  """Constant bank 0 up to the parameters, as the SASS of `arch` reads it (see the slot table above)."""
  L = cbank0_layout(arch)
  b = bytearray(L.params)
  struct.pack_into("<III", b, L.ntid, *block)
  struct.pack_into("<III", b, L.nctaid, *grid)
  struct.pack_into("<Q", b, L.shared_window, windows.shared)
  struct.pack_into("<Q", b, L.local_window, windows.local)
  struct.pack_into("<I", b, L.stack, INITIAL_STACK)
  struct.pack_into("<I", b, L.dyn_shared, dyn_shared)
  struct.pack_into("<I", b, L.reserved_shared, L.shared_base)
  struct.pack_into("<Q", b, L.mem_desc, 0)
  return bytes(b)

# ---------------------------------------------------------------- program images: instruction prefetch
# The GPC's instruction/constant cache (GPCCLIENT_GCC in the MMU fault) fetches ahead of the code it runs. Finding 4
# (docs/hw/h100-580.159.04-findings.md#finding-4): Xid 31 FAULT_PTE ACCESS_TYPE_VIRT_READ at the page right after
# program images that ended exactly at their code; 0x2000 more bytes per image and no such fault in the next suite run.
# How far ahead the fetch reaches is not public: it is below 0x2000 (the padding fixed it) and the faults needed an
# unmapped page right after the image (most images were followed by another allocation). The driver keeps PROGRAM_GUARD
# after every image; the mock GPU models the fetch as reaching INSTRUCTION_PREFETCH past the last instruction and faults
# when that leaves the image's allocation (any allocation, not only an unmapped page: stricter than the GPU, so the
# mistake shows on every run).
PROGRAM_GUARD = 0x2000
INSTRUCTION_PREFETCH = 0x1000

# ---------------------------------------------------------------- class methods by name
def class_method_name(cls: int, offset: int) -> str:
  """A method offset of class `cls` by name (the host class below 0x100; compute, copy from the class headers)."""
  if offset < 0x100 or cls in GPFIFO_CLASSES: return HOST_METHODS.get(offset, f"HOST_{offset:#x}")
  if cls in DMA_CLASSES: return COPY_METHODS.get(offset, f"COPY_{offset:#x}")
  if cls in COMPUTE_CLASSES: return COMPUTE_METHODS.get(offset, f"{offset:#x}")
  return f"{offset:#x}"

# ---------------------------------------------------------------- GPU generations: one record each
@dataclass(frozen=True)
class GPUArch:
  """One GPU generation: how RM names it, the classes its classlist offers, and what its hardware and ptxas's code
  expect. RM's side: the SM version (GR_GET_INFO SM_VERSION), the MC architecture and an implementation (MC_GET_ARCH_INFO,
  ctrl2080mc.h), the host/compute/copy/usermode classes (the engine classes RM's class tables register per chip,
  open-gpu-kernel-modules src/nvidia/generated/g_*_hal/g_engines_pb.c; the same pairing CUDA's and tinygrad's NV
  backends use). The hardware's side: the QMD version its compute class launches with (the QMD section), the shader
  windows it accepts, constant bank 0 as its SASS reads it (with the parameter offset), the shared memory a block may
  use and so the SM's carveouts."""
  sm: str              # the PTX target and ptxas arch
  family: str          # generation name (MC architecture), for the driver's check and messages
  name: str            # chip, for messages
  sm_version: int      # NV2080_CTRL_GR_INFO_SM_VERSION_*: major << 8 | minor
  architecture: int    # NV2080_CTRL_MC_ARCH_INFO_ARCHITECTURE_*
  implementation: int  # NV2080_CTRL_MC_ARCH_INFO_IMPLEMENTATION_*
  gpfifo: int
  compute: int
  dma: int
  usermode: tuple[int, ...]
  qmd_version: int     # the QMD layout `compute` reads (QMD_LAYOUTS)
  windows: ShaderWindows
  cbank0: CBank0Layout
  max_shared: int      # shared memory one block may opt in to (CUDA C Programming Guide, technical specifications per
                       # compute capability: 163 KB on 8.0, 99 KB on 8.6/8.9/12.0, 227 KB on 9.0/10.0)
  device_id: int       # PCI device id the mock reports (one board of the family)
  @property
  def qmd(self) -> QMDLayout: return QMD_LAYOUTS[self.qmd_version]
  @property
  def param_off(self) -> int:
    """Where this generation's compiled code reads kernel parameters in constant bank 0."""
    return self.cbank0.params
  @property
  def carveouts(self) -> tuple[int, ...]:
    """The SM's shared-memory carveouts in KiB (sm_shared_config)."""
    return sm_carveouts(self.max_shared)

_AMPERE_UM = (TURING_USERMODE_A, AMPERE_USERMODE_A)
_HOPPER_UM = _AMPERE_UM + (HOPPER_USERMODE_A,)
_BLACKWELL_UM = _HOPPER_UM + (BLACKWELL_USERMODE_A,)
_MC = lambda k: getattr(nv, f"NV2080_CTRL_MC_ARCH_INFO_{k}")
_SMV = lambda k: getattr(nv, f"NV2080_CTRL_GR_INFO_SM_VERSION_{k}")
GENERATIONS: tuple[GPUArch, ...] = (
  GPUArch(sm="sm_80", family="Ampere", name="GA100", sm_version=0x800, architecture=_MC("ARCHITECTURE_GA100"),
          implementation=_MC("IMPLEMENTATION_GA100"), gpfifo=nv.AMPERE_CHANNEL_GPFIFO_A,
          compute=nv.AMPERE_COMPUTE_A, dma=nv.AMPERE_DMA_COPY_A, usermode=_AMPERE_UM, qmd_version=3,
          windows=WINDOWS_32BIT, cbank0=CB_AMPERE, max_shared=163 << 10, device_id=0x20b0),
  GPUArch(sm="sm_86", family="Ampere", name="GA102", sm_version=_SMV("8_6"), architecture=_MC("ARCHITECTURE_GA100"),
          implementation=_MC("IMPLEMENTATION_GA102"), gpfifo=nv.AMPERE_CHANNEL_GPFIFO_A,
          compute=nv.AMPERE_COMPUTE_B, dma=nv.AMPERE_DMA_COPY_B, usermode=_AMPERE_UM, qmd_version=3,
          windows=WINDOWS_32BIT, cbank0=CB_AMPERE, max_shared=99 << 10, device_id=0x2204),
  GPUArch(sm="sm_89", family="Ada", name="AD102", sm_version=_SMV("8_9"), architecture=_MC("ARCHITECTURE_AD100"),
          implementation=_MC("IMPLEMENTATION_AD102"), gpfifo=nv.AMPERE_CHANNEL_GPFIFO_A,
          compute=nv.ADA_COMPUTE_A, dma=nv.AMPERE_DMA_COPY_B, usermode=_AMPERE_UM, qmd_version=3,
          windows=WINDOWS_32BIT, cbank0=CB_AMPERE, max_shared=99 << 10, device_id=0x2684),
  GPUArch(sm="sm_90", family="Hopper", name="GH100", sm_version=_SMV("9_0"), architecture=_MC("ARCHITECTURE_GH100"),
          implementation=_MC("IMPLEMENTATION_GH100"), gpfifo=nv.HOPPER_CHANNEL_GPFIFO_A,
          compute=nv.HOPPER_COMPUTE_A, dma=nv.HOPPER_DMA_COPY_A, usermode=_HOPPER_UM, qmd_version=4,
          windows=WINDOWS_64BIT, cbank0=CB_HOPPER, max_shared=227 << 10, device_id=0x2330),
  GPUArch(sm="sm_100", family="Blackwell", name="GB100", sm_version=_SMV("10_0"),
          architecture=_MC("ARCHITECTURE_GB100"), implementation=_MC("IMPLEMENTATION_GB100"), gpfifo=nv.BLACKWELL_CHANNEL_GPFIFO_A,
          compute=nv.BLACKWELL_COMPUTE_A, dma=nv.BLACKWELL_DMA_COPY_A, usermode=_BLACKWELL_UM, qmd_version=5,
          windows=WINDOWS_64BIT, cbank0=CB_BLACKWELL, max_shared=227 << 10, device_id=0x2901),
  GPUArch(sm="sm_120", family="Blackwell", name="GB202", sm_version=_SMV("12_00"),
          architecture=_MC("ARCHITECTURE_GB200"), implementation=_MC("IMPLEMENTATION_GB202"), gpfifo=nv.BLACKWELL_CHANNEL_GPFIFO_B,
          compute=nv.BLACKWELL_COMPUTE_B, dma=nv.BLACKWELL_DMA_COPY_B, usermode=_BLACKWELL_UM, qmd_version=5,
          windows=WINDOWS_64BIT, cbank0=CB_BLACKWELL, max_shared=99 << 10, device_id=0x2b85),
)

# ---------------------------------------------------------------- tables derived from the records
def _newest_first(field: str) -> tuple[int, ...]:
  return tuple(dict.fromkeys(getattr(g, field) for g in reversed(GENERATIONS)))

ARCHS: dict[str, GPUArch] = {g.sm: g for g in GENERATIONS}
ARCH_FAMILIES: dict[int, str] = {g.architecture: g.family for g in GENERATIONS}   # MC architecture -> generation name
# newest first: the driver takes the first one the GPU's classlist has
GPFIFO_CLASSES, COMPUTE_CLASSES, DMA_CLASSES = _newest_first("gpfifo"), _newest_first("compute"), _newest_first("dma")
QMD_VERSION: dict[int, int] = {g.compute: g.qmd_version for g in GENERATIONS}       # compute class -> QMD version
SHADER_WINDOWS: dict[int, ShaderWindows] = {g.compute: g.windows for g in GENERATIONS}   # compute class -> windows
SHARED_WINDOW_ALIGN = {c: (1 << 32 if w is WINDOWS_64BIT else 1 << 24) for c, w in SHADER_WINDOWS.items()}
CBANK0: dict[str, CBank0Layout] = {g.sm: g.cbank0 for g in GENERATIONS}               # PTX target -> constant bank 0
