"""Training across processes and hosts on MPI (Open MPI through mpi4py, the optional extra `mpi`): processes started
by `mpirun -np N python3 prog.py` exchange Tensors. Every exchange first checks that all ranks agree on the shape and
dtype (naming each rank's), and every wait polls a nonblocking MPI request up to DIST_TIMEOUT_S, so a rank that died
or never arrives makes the others raise TimeoutError instead of hanging. Values travel through host memory."""
from __future__ import annotations
import time
from typing import Any
import numpy as np
from baregrad import knobs
from baregrad.tensor.tensor import Tensor

_comm: Any = None

def _mpi() -> Any:
  try: from mpi4py import MPI
  except ImportError as e: raise ImportError("baregrad.distributed needs mpi4py and Open MPI: pip install 'baregrad[mpi]' "
                                             "(and apt-get install openmpi-bin libopenmpi-dev)") from e
  return MPI

def init() -> None:
  """Join the MPI job (mpi4py initializes MPI on import); idempotent."""
  global _comm
  if _comm is None: _comm = _mpi().COMM_WORLD

def _c() -> Any:
  if _comm is None: raise RuntimeError("baregrad.distributed: call init() first")
  return _comm

def rank() -> int:
  """This process's rank, 0..world_size()-1."""
  return int(_c().Get_rank())

def world_size() -> int:
  """The number of processes in the job."""
  return int(_c().Get_size())

def _wait(req: Any, what: str) -> None:
  limit = knobs.get("DIST_TIMEOUT_S")
  deadline, delay = time.monotonic() + limit, 1e-5
  while not req.Test():
    if time.monotonic() > deadline:
      raise TimeoutError(f"baregrad.distributed: {what} on rank {rank()} of {world_size()} did not complete within DIST_TIMEOUT_S={limit} s: "
                         "a rank died or never reached it")
    time.sleep(delay); delay = min(delay * 2, 1e-3)

def _agree(t: Tensor, what: str) -> None:
  # each rank's shape and dtype as fixed-width text (small): exchanged before the data so a mismatch names every rank's
  mine = np.frombuffer(f"{t.shape} {t.dtype}".ljust(128)[:128].encode(), np.uint8).copy()
  every = np.zeros((world_size(), 128), np.uint8)
  _wait(_c().Iallgather(mine, every), what + " (shape check)")
  if len({bytes(row) for row in every}) > 1:
    names = ", ".join(f"rank {r}: {bytes(row).decode().strip()}" for r, row in enumerate(every))
    raise ValueError(f"baregrad.distributed.{what}: shapes or dtypes disagree across ranks: {names}")

_OPS = {"sum": "SUM", "max": "MAX", "min": "MIN", "prod": "PROD"}

def allreduce(t: Tensor, op: str = "sum") -> Tensor:
  """t combined elementwise over all ranks (op: sum, max, min, prod, mean), a new Tensor on t's device."""
  if op not in (*_OPS, "mean"): raise ValueError(f"allreduce: unknown op {op!r}; expected one of {(*_OPS, 'mean')}")
  _agree(t, "allreduce")
  a = np.ascontiguousarray(t.numpy())
  mop = "sum" if op == "mean" else op
  # MPI's reductions have no float16 (bfloat16 arrives as float32 already): combined in float32, cast back below.
  # A bool sum is a logical or (as in tensor/collectives.py): a max over 0/1 bytes
  if a.dtype == np.float16: a = a.astype(np.float32)
  elif a.dtype == np.bool_: a, mop = a.astype(np.uint8), {"sum": "max", "prod": "min"}.get(mop, mop)
  out = np.empty_like(a)
  _wait(_c().Iallreduce(a, out, op=getattr(_mpi(), _OPS[mop])), f"allreduce({op})")
  r = Tensor(out, device=t.device, dtype=t.dtype)
  return r / world_size() if op == "mean" else r

def broadcast(t: Tensor, src: int = 0) -> Tensor:
  """Rank src's value of t on every rank (a new Tensor on t's device)."""
  if not 0 <= src < world_size(): raise ValueError(f"broadcast: src {src} is not a rank of this job (0..{world_size() - 1})")
  _agree(t, "broadcast")
  a = np.ascontiguousarray(t.numpy())
  _wait(_c().Ibcast(a.reshape(-1).view(np.uint8), root=src), f"broadcast(src={src})")   # bytes: any dtype (float16 too)
  return Tensor(a, device=t.device, dtype=t.dtype)

def barrier() -> None:
  """Wait until every rank reaches it (or raise TimeoutError after DIST_TIMEOUT_S)."""
  _wait(_c().Ibarrier(), "barrier")

class DistributedOptimizer:
  """Wraps an optimizer: step() averages every parameter's gradient over the ranks, packed into buckets of about
  bucket_bytes (one allreduce each instead of one per parameter), then runs the wrapped step. The exchange runs after
  the backward pass (it does not overlap with it)."""
  def __init__(self, opt: Any, bucket_bytes: int = 4 << 20):
    self.opt, self.bucket_bytes = opt, bucket_bytes
  def zero_grad(self) -> None: self.opt.zero_grad()
  def buckets(self) -> list[list[Tensor]]:
    """The parameters with gradients, grouped in order into buckets of at most bucket_bytes (one dtype each)."""
    out: list[list[Tensor]] = []
    size = 0
    for p in self.opt.params:
      if p.grad is None: continue
      nb = p.numel() * p.dtype.itemsize
      if not out or size + nb > self.bucket_bytes or out[-1][0].dtype != p.dtype: out.append([]); size = 0
      out[-1].append(p); size += nb
    return out
  def step(self, *also: Tensor) -> None:
    for b in self.buckets():
      grads = [p.grad.reshape(-1) for p in b if p.grad is not None]   # (buckets() holds only parameters with one)
      flat = Tensor.cat(*grads) if len(grads) > 1 else grads[0]
      avg = allreduce(flat, "mean")
      off = 0
      for p in b:
        p.grad = avg[off:off + p.numel()].reshape(p.shape); off += p.numel()
    self.opt.step(*also)
