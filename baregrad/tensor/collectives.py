"""In-process collectives over one tensor per device: allreduce, allgather, reduce-scatter, broadcast.

Each is built as a lazy graph of COPY nodes and elementwise kernels and realized in one schedule. Small tensors use
a direct exchange (every device reads every other's part and combines them in rank order); large ones a ring
(reduce-scatter then allgather over n chunks, 2(n-1)/n of the data sent per device). In both every element is
combined in the same order on every device, or combined once and copied, so all devices end bit-identical.
Copies between devices are the engine's COPY items: queued on both HCQ devices' queues, each waiting on the other's
signals, where the devices can (hcq/peer.py), else through the host (docs/ARCHITECTURE.md, Several devices)."""
from __future__ import annotations
from typing import Sequence
from baregrad import knobs
from baregrad.hal.device import parse_device
from baregrad.tensor.tensor import Tensor

OPS = ("sum", "max", "min", "mean")

def check_devices(devices: Sequence[str]) -> tuple[str, ...]:
  """Canonical names of a device list for a multi-device tensor or collective; ValueError naming the offenders when
  it is empty, repeats a device or mixes kinds that cannot exchange (the same base kind is required: NV with NV)."""
  from baregrad.hal.device import Device
  if isinstance(devices, str) or not devices: raise ValueError(f"expected a non-empty list of device names, got {devices!r}")
  names = tuple(Device.canonicalize(d) for d in devices)
  if len(set(names)) != len(names):
    raise ValueError(f"device list names a device twice: {list(names)}; each device may hold one part")
  kinds = {n: parse_device(n)[0] for n in names}
  if len(set(kinds.values())) > 1:
    raise ValueError("device list mixes kinds that cannot exchange: " + ", ".join(f"{n} ({k})" for n, k in kinds.items()) +
                     "; expected devices of one kind")
  return names

def _check_parts(ts: Sequence[Tensor], what: str, same_shape: bool = True) -> None:
  if not ts: raise ValueError(f"{what}: expected one tensor per device, got none")
  check_devices([t.device for t in ts])
  for i, t in enumerate(ts):
    if t.dtype != ts[0].dtype: raise TypeError(f"{what}: dtypes disagree: part 0 on {ts[0].device} is {ts[0].dtype}, part {i} on {t.device} is {t.dtype}")
    if same_shape and t.shape != ts[0].shape:
      raise ValueError(f"{what}: shapes disagree: part 0 on {ts[0].device} has {ts[0].shape}, part {i} on {t.device} has {t.shape}")

def _combine(a: Tensor, b: Tensor, op: str) -> Tensor:
  if op in ("sum", "mean"): return (a | b) if a.dtype.name == "bool" else a + b
  return a.maximum(b) if op == "max" else a.minimum(b)

def uses_ring(nbytes: int, n: int) -> bool:
  """Whether an allreduce of nbytes over n devices takes the ring (large) rather than the direct exchange (small)."""
  return n > 2 and nbytes >= knobs.get("RING_MIN_BYTES")

def allreduce(ts: Sequence[Tensor], op: str = "sum") -> list[Tensor]:
  """Combine one tensor per device elementwise (op: sum, max, min, mean); every device gets the result (lazy)."""
  if op not in OPS: raise ValueError(f"allreduce: unknown op {op!r}; expected one of {OPS}")
  _check_parts(ts, "allreduce")
  n = len(ts)
  if op == "mean" and not ts[0].dtype.name.startswith(("float", "half", "bfloat")):
    raise TypeError(f"allreduce: op='mean' needs a float dtype, got {ts[0].dtype}")
  if n == 1: return [ts[0]]
  if uses_ring(ts[0].numel() * ts[0].dtype.itemsize, n) and ts[0].numel() >= n: out = _ring(ts, op)
  else:
    out = []
    for t in ts:   # rank order on every device: the same sums, bit for bit
      acc = ts[0].to(t.device)
      for s in ts[1:]: acc = _combine(acc, s.to(t.device), op)
      out.append(acc)
  return [o / n for o in out] if op == "mean" else out

def _ring(ts: Sequence[Tensor], op: str) -> list[Tensor]:
  n, shape = len(ts), ts[0].shape
  flat = [t.reshape(-1) for t in ts]
  size = flat[0].shape[0]
  bounds = [(size * i // n, size * (i + 1) // n) for i in range(n + 1)][:n]
  chunk = [[f[lo:hi] for lo, hi in bounds] for f in flat]   # chunk[dev][c]
  # reduce-scatter: at step s device d sends its partial of chunk (d - s) % n to device d + 1, which combines it
  for s in range(n - 1):
    sent = [(d, (d - s) % n, chunk[d][(d - s) % n]) for d in range(n)]
    for d, c, part in sent:
      nd = (d + 1) % n
      chunk[nd][c] = _combine(part.to(ts[nd].device), chunk[nd][c], op).contiguous()
  # device d now holds the whole reduction of chunk (d + 1) % n; allgather passes them around the ring by copies
  done = {(d, (d + 1) % n): chunk[d][(d + 1) % n] for d in range(n)}
  for s in range(n - 1):
    for d in range(n):
      c = (d + 1 - s) % n
      nd = (d + 1) % n
      done[(nd, c)] = done[(d, c)].to(ts[nd].device)
  return [Tensor.cat(*[done[(d, c)] for c in range(n)]).reshape(shape) for d in range(n)]

def allgather(ts: Sequence[Tensor], axis: int = 0) -> list[Tensor]:
  """Every device gets the parts concatenated along axis, in device order (lazy)."""
  _check_parts(ts, "allgather", same_shape=False)
  nd = ts[0].ndim
  ax = axis + nd if axis < 0 else axis
  for i, t in enumerate(ts):
    if t.ndim != nd or any(a != b for k, (a, b) in enumerate(zip(t.shape, ts[0].shape)) if k != ax):
      raise ValueError(f"allgather: shapes disagree off axis {axis}: part 0 on {ts[0].device} has {ts[0].shape}, part {i} on {t.device} has {t.shape}")
  return [Tensor.cat(*[s.to(t.device) for s in ts], dim=ax) for t in ts]

def reduce_scatter(ts: Sequence[Tensor], axis: int = 0, op: str = "sum") -> list[Tensor]:
  """Combine the parts elementwise and give device i the i-th of n near-equal slices along axis (lazy)."""
  _check_parts(ts, "reduce_scatter")
  n, ax = len(ts), axis + ts[0].ndim if axis < 0 else axis
  size = ts[0].shape[ax]
  if size < n: raise ValueError(f"reduce_scatter: axis {axis} has {size} elements, fewer than the {n} devices {[t.device for t in ts]}")
  out = []
  for i, t in enumerate(ts):
    lo, hi = size * i // n, size * (i + 1) // n
    sl = [s._shrink(tuple((lo, hi) if k == ax else (0, d) for k, d in enumerate(s.shape))) for s in ts]
    acc = sl[0].to(t.device)
    for s in sl[1:]: acc = _combine(acc, s.to(t.device), op)
    out.append(acc / n if op == "mean" else acc)
  return out

def broadcast(t: Tensor, devices: Sequence[str]) -> list[Tensor]:
  """A copy of t on every device of the list (t itself where it is there already)."""
  return [t.to(d) for d in check_devices(devices)]

def realize(ts: Sequence[Tensor]) -> list[Tensor]:
  """Realize the parts together (one schedule over all devices)."""
  if ts: ts[0].realize(*ts[1:])
  return list(ts)
