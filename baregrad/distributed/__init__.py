"""Training across processes and hosts on MPI (Open MPI through mpi4py, the optional extra `mpi`): processes started
by `mpirun -np N python3 prog.py` exchange Tensors. Every exchange first checks that all ranks agree on the shape and
dtype (naming each rank's), and every wait polls a nonblocking MPI request up to DIST_TIMEOUT_S, so a rank that died
or never arrives makes the others raise TimeoutError instead of hanging. Values travel through host memory."""
from __future__ import annotations
import hashlib, time, weakref
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

def _agree_text(text: str, what: str, about: str) -> None:
  # each rank's description as fixed-width text (small): exchanged before the data so a mismatch names every rank's
  mine = np.frombuffer(text.ljust(128)[:128].encode(), np.uint8).copy()
  every = np.zeros((world_size(), 128), np.uint8)
  _wait(_c().Iallgather(mine, every), what + " (shape check)")
  if len({bytes(row) for row in every}) > 1:
    names = ", ".join(f"rank {r}: {bytes(row).decode().strip()}" for r, row in enumerate(every))
    raise ValueError(f"baregrad.distributed.{what}: {about} disagree across ranks: {names}")

def _agree(t: Tensor, what: str) -> None: _agree_text(f"{t.shape} {t.dtype}", what, "shapes or dtypes")

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

class _Exchange:
  """One bucket's gradient allreduce in flight: the host arrays MPI reads and writes stay alive until it is done."""
  def __init__(self, params: list[Tensor], send: np.ndarray, recv: np.ndarray, req: Any) -> None:
    self.params, self.send, self.recv, self.req = params, send, recv, req

class DistributedOptimizer:
  """Wraps an optimizer so every rank steps with the gradients averaged over the ranks. The parameters are packed into
  buckets of about bucket_bytes (one dtype each, one allreduce per bucket), taken in reverse parameter order, the
  order the backward pass produces gradients in: last layers first.

  With overlap (the default) the exchange starts inside loss.backward(): a hook on gradient creation
  (tensor/autograd.py grad_hooks) computes the gradients bucket by bucket and starts each bucket's nonblocking
  allreduce as soon as its gradients are computed, so the exchange of one bucket runs while the next bucket's part of
  the backward pass is computed. step() waits for them (up to DIST_TIMEOUT_S each) and runs the wrapped step.
  `events` records the last exchange's order: ("ready", k) when bucket k's gradients were computed, ("start", k)
  when its allreduce began, ("done", k) when it completed. Without overlap, step() exchanges everything then.
  Before each exchange the ranks check that their buckets agree (a mismatch names every rank's layout)."""
  def __init__(self, opt: Any, bucket_bytes: int = 4 << 20, overlap: bool = True):
    self.opt, self.bucket_bytes, self.overlap = opt, bucket_bytes, overlap
    self._pending: list[_Exchange] = []
    self.events: list[tuple[str, int]] = []
    if overlap:
      from baregrad.tensor import autograd
      autograd.grad_hooks.append(weakref.WeakMethod(self._grads_created))

  def zero_grad(self) -> None:
    self._finish(keep=False)   # an exchange still in flight is of gradients being dropped
    self.opt.zero_grad()

  def buckets(self) -> list[list[Tensor]]:
    """The parameters with gradients, in reverse order (as backward produces them), grouped into buckets of at most
    bucket_bytes (one dtype each; a parameter larger than that is a bucket of its own)."""
    out: list[list[Tensor]] = []
    size = 0
    for p in reversed(self.opt.params):
      if p.grad is None: continue
      nb = p.numel() * p.dtype.itemsize
      if not out or size + nb > self.bucket_bytes or out[-1][0].dtype != p.dtype: out.append([]); size = 0
      out[-1].append(p); size += nb
    return out

  def _grads_created(self, leaves: list[Tensor]) -> None:
    mine = {id(p) for p in self.opt.params}
    if not any(id(t) in mine for t in leaves): return   # another model's backward
    self._finish(keep=False)   # a second backward before step(): the exchange of the first one's sums is stale
    self._launch()

  def _launch(self) -> None:
    buckets = self.buckets()
    layout = " ".join(f"{len(b)}x{b[0].dtype.name}:{sum(p.numel() for p in b)}" for b in buckets)
    _agree_text(f"{len(buckets)} buckets {hashlib.sha1(layout.encode()).hexdigest()[:10]} {sum(p.numel() for b in buckets for p in b)} elements",
                "DistributedOptimizer", "gradient buckets")
    self.events = []
    from baregrad.tensor.autograd import shared_values
    uops = [[p.grad.uop for p in b if p.grad is not None] for b in buckets]   # (buckets() holds only parameters with one)
    for k, b in enumerate(buckets):
      grads = [p.grad.reshape(-1) for p in b if p.grad is not None]
      flat = Tensor.cat(*grads) if len(grads) > 1 else grads[0]
      # this bucket's part of the backward pass, with the values later buckets read too (computed once, not per bucket)
      also = [Tensor(u, device=b[0].device) for u in shared_values(uops[k], [u for later in uops[k + 1:] for u in later])]
      flat.realize(*also)
      send = np.ascontiguousarray(flat.numpy())
      self.events.append(("ready", k))
      if send.dtype == np.float16: send = send.astype(np.float32)   # (MPI has no float16 sum; bfloat16 arrives as float32)
      recv = np.empty_like(send)
      self._pending.append(_Exchange(b, send, recv, _c().Iallreduce(send, recv, op=_mpi().SUM)))
      self.events.append(("start", k))

  def _finish(self, keep: bool = True) -> None:
    pending, self._pending = self._pending, []
    n = world_size() if pending else 1
    for k, ex in enumerate(pending):
      _wait(ex.req, f"DistributedOptimizer gradient allreduce (bucket {k} of {len(pending)})")
      self.events.append(("done", k))
      if not keep: continue
      p0 = ex.params[0]
      avg = Tensor(ex.recv, device=p0.device, dtype=p0.dtype) / n
      off = 0
      for p in ex.params:
        p.grad = avg[off:off + p.numel()].reshape(p.shape); off += p.numel()

  def step(self, *also: Tensor) -> None:
    if not self._pending: self._launch()   # no backward() announced gradients (overlap off, or set by hand)
    self._finish()
    self.opt.step(*also)
