"""The CPU device's command encoding: the 32-bit words its queues write (WAIT, SIGNAL, TIMESTAMP, EXEC, COPY, BARRIER),
their decoders (for queue states and tests), and the compute and copy queues that encode them. The queue engine that
executes them is cpu_engine.py."""
from __future__ import annotations
from typing import Any, Sequence
from baregrad.hcq import HCQArgsState, HWQueue

# header: op << 16 | length in words (header included); 64-bit fields are (lo, hi)
OP_WAIT, OP_SIGNAL, OP_TIMESTAMP, OP_EXEC, OP_COPY, OP_BARRIER = 1, 2, 3, 4, 5, 6
OP_NAMES = {OP_WAIT: "WAIT", OP_SIGNAL: "SIGNAL", OP_TIMESTAMP: "TIMESTAMP", OP_EXEC: "EXEC", OP_COPY: "COPY", OP_BARRIER: "BARRIER"}
# field layout per op: (name, nwords) after the header
LAYOUT: dict[int, tuple[tuple[str, int], ...]] = {
  OP_WAIT: (("addr", 2), ("value", 2)), OP_SIGNAL: (("addr", 2), ("value", 2)), OP_TIMESTAMP: (("addr", 2),),
  OP_EXEC: (("fxn", 2), ("args", 2), ("gx", 1), ("gy", 1), ("gz", 1), ("lx", 1), ("ly", 1), ("lz", 1), ("min_chunk", 1)),
  OP_COPY: (("dest", 2), ("src", 2), ("nbytes", 2)), OP_BARRIER: ()}
_SIZE = {op: 1 + sum(n for _, n in lay) for op, lay in LAYOUT.items()}
_FIELDS = {op: {name: (1 + sum(k for _, k in lay[:i]), n) for i, (name, n) in enumerate(lay)} for op, lay in LAYOUT.items()}
_M32 = 0xFFFFFFFF
_EXEC_WORDS = _SIZE[OP_EXEC]
_EXEC_HDR, _BARRIER_HDR = (OP_EXEC << 16) | _SIZE[OP_EXEC], (OP_BARRIER << 16) | _SIZE[OP_BARRIER]

def _chain_runner() -> Any:
  from baregrad.drivers.cpu_chain import chain_runner
  f = _FIELDS[OP_EXEC]
  return chain_runner(_EXEC_HDR, _BARRIER_HDR, _EXEC_WORDS, f["fxn"][0], f["args"][0], f["gx"][0])

def _enc(op: int, *vals: int) -> tuple[list[int], dict[str, tuple[int, int]]]:
  """Words for one command; vals in LAYOUT order. Out-of-range values raise when they reach the uint32 array."""
  words = [(op << 16) | _SIZE[op]]
  for (name, n), v in zip(LAYOUT[op], vals):
    if n == 2: words += (v & _M32, v >> 32)
    else: words.append(v)
  return words, _FIELDS[op]

def decode_one(ws: Sequence[int], p: int) -> tuple[int, dict[str, int], int]:
  """Decode the command at word p: (op, fields, next p). Raises ValueError on a malformed header."""
  op, n = ws[p] >> 16, ws[p] & 0xFFFF
  if op not in LAYOUT or n != _SIZE[op] or p + n > len(ws):
    raise ValueError(f"bad command header {ws[p]:#010x} at word {p}: op {op}, length {n}")
  out, q = {}, p + 1
  for name, k in LAYOUT[op]:
    out[name] = ws[q] | (ws[q + 1] << 32) if k == 2 else ws[q]
    q += k
  return op, out, p + n

def decode_words(ws: Sequence[int], mark: int | None = None) -> str:
  """The command buffer in words, one line per command; `mark` (a word offset) gets an arrow."""
  lines, p, i = [], 0, 0
  while p < len(ws):
    try: op, f, nxt = decode_one(ws, p)
    except ValueError as e: lines.append(f"  [{i:3d}] @{p:5d} {e}"); break
    fs = " ".join(f"{k}={v:#x}" if k in ("addr", "dest", "src", "fxn", "args") else f"{k}={v}" for k, v in f.items())
    lines.append(f"{'->' if mark == p else '  '}[{i:3d}] @{p:5d} {OP_NAMES[op]:<9s} {fs}")
    p, i = nxt, i + 1
  return "\n".join(lines)

class CPUComputeQueue(HWQueue):
  engine = "compute"
  def _enc_wait(self, addr: int, value: int) -> Any: return _enc(OP_WAIT, addr, value)
  def _enc_signal(self, addr: int, value: int) -> Any: return _enc(OP_SIGNAL, addr, value)
  def _enc_timestamp(self, addr: int) -> Any: return _enc(OP_TIMESTAMP, addr)
  def _enc_copy(self, dest: int, src: int, nbytes: int) -> Any: return _enc(OP_COPY, dest, src, nbytes)
  def _enc_memory_barrier(self) -> Any: return _enc(OP_BARRIER)
  def _enc_exec(self, prg: Any, args_state: HCQArgsState, gs: tuple[int, int, int], ls: tuple[int, int, int]) -> Any:
    if gs[1] != 1 or gs[2] != 1: raise ValueError(f"the CPU runs one parallel axis: global_size must be (n, 1, 1), got {gs}")
    return _enc(OP_EXEC, prg.fxn_addr, args_state.va_addr, *gs, *ls, getattr(prg, "min_chunk", 0))
  def update_exec(self, i: int, global_size: Sequence[int] | None = None, local_size: Sequence[int] | None = None) -> HWQueue:
    if global_size is not None and tuple(global_size)[1:] not in ((), (1,), (1, 1)):
      raise ValueError(f"the CPU runs one parallel axis: global_size must be (n, 1, 1), got {tuple(global_size)}")
    return super().update_exec(i, global_size, local_size)
  def _submit(self, dev: Any) -> None: dev.engines[self.engine].submit(self.words)
  def decode(self) -> str: return decode_words(self.words)

class CPUCopyQueue(CPUComputeQueue):
  engine = "copy"
  def _enc_exec(self, *a: Any) -> Any: raise NotImplementedError("the copy queue cannot execute kernels; use the compute queue")

