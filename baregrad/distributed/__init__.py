"""Training across processes and hosts on MPI (Open MPI through mpi4py, the optional extra `mpi`): processes started
by `mpirun -np N python3 prog.py` exchange Tensors. Every exchange first checks that all ranks agree on the shape and
dtype (naming each rank's), and every wait polls a nonblocking MPI request up to DIST_TIMEOUT_S, so a rank that died
or never arrives makes the others raise TimeoutError instead of hanging. Values travel through host memory."""
from __future__ import annotations
import hashlib, os, time, weakref
from typing import Any
import numpy as np
from baregrad import knobs
from baregrad.ir.dtype import dtypes
from baregrad.tensor.tensor import Tensor, _np_dtype

_comm: Any = None

def _mpi() -> Any:
  try: from mpi4py import MPI
  except ImportError as e: raise ImportError("baregrad.distributed needs mpi4py and Open MPI: pip install 'baregrad[mpi]' "
                                             "(and apt-get install openmpi-bin libopenmpi-dev)") from e
  return MPI

def init() -> None:
  """Join the MPI job (mpi4py initializes MPI on import); idempotent. Unless CPU_THREADS is set, the ranks on one host
  share its cores: each rank's CPU devices opened from now on get cores // ranks-on-this-host threads (2 ranks of all
  cores each on a 2-core host: 4 kernel threads on 2 cores, training at 0.73x of one process; a thread each, 1.05x)."""
  global _comm
  if _comm is None:
    _comm = _mpi().COMM_WORLD
    if knobs.raw("CPU_THREADS") is None and (local := int(_comm.Split_type(_mpi().COMM_TYPE_SHARED).Get_size())) > 1:
      knobs.set_env("CPU_THREADS", max(1, (os.cpu_count() or 1) // local))

def _c() -> Any:
  if _comm is None: raise RuntimeError("baregrad.distributed: call init() first")
  return _comm

def rank() -> int:
  """This process's rank, 0..world_size()-1."""
  return int(_c().Get_rank())

def world_size() -> int:
  """The number of processes in the job."""
  return int(_c().Get_size())

SPIN_S = 0.02   # a wait calls Test() back to back (yielding the core between calls) this long, then sleeps between them

def _wait(req: Any, what: str) -> None:
  # Open MPI moves a nonblocking collective on only inside MPI calls (no progress thread): a large allreduce is many
  # rounds of shared-memory fragments, each waiting for the next Test(). Sleeping between tests (doubling up to 1 ms)
  # made a 2.7 MB gradient allreduce between 2 ranks take 4.2 ms; testing back to back, 2.1 ms (bench/train_ddp.py's
  # step 15.4 -> 11.7 ms). sleep(0) yields the core to a runnable thread (this rank's queue worker) between tests.
  limit = knobs.get("DIST_TIMEOUT_S")
  now = time.monotonic()
  deadline, spin_end, delay = now + limit, now + SPIN_S, 1e-5
  while not req.Test():
    if (now := time.monotonic()) > deadline:
      raise TimeoutError(f"baregrad.distributed: {what} on rank {rank()} of {world_size()} did not complete within DIST_TIMEOUT_S={limit} s: "
                         "a rank died or never reached it")
    if now < spin_end: time.sleep(0)
    else: time.sleep(delay); delay = min(delay * 2, 1e-3)

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

class DistributedStep:
  """A training step whose device work is replayed by the jit on every rank: `step = DistributedStep(opt, loss_of)`,
  then `loss = step(x, y)` (any arguments loss_of takes: NumPy arrays, tensors). A jit capture cannot hold the exchange
  (MPI reads host memory, and reading a value to the host while capturing is refused), so each step is two jitted
  halves around it: (1) loss_of(*args) and its backward pass, the gradients read out into one host array per dtype;
  then one nonblocking allreduce per array on the host (DIST_TIMEOUT_S); (2) the averaged gradients in as arrays and
  the wrapped optimizer's step. An eager step costs the host its whole graph building every step (on 2 ranks each
  builds the graph of half a batch at the price of a whole one: DistributedOptimizer at 1.05x of one process); a
  replay costs it microseconds per kernel. Returns the loss of this rank's part (not averaged). On one rank the step is
  one replay (loss, backward pass, update), with no exchange."""
  def __init__(self, opt: Any, loss_of: Any):
    from baregrad.tensor.jit import jit
    self.opt, self.loss_of = opt, loss_of
    self.layout: list[tuple[Any, list[int]]] = []   # per bucket: dtype, the indices of opt.params in it
    self._grads, self._update, self._whole = jit(self._grads_fn), jit(self._update_fn), jit(self._whole_fn)

  def _whole_fn(self, *args: Any) -> Tensor:
    loss = self.loss_of(*args)
    self.opt.zero_grad()
    loss.backward()
    self.opt.step(loss)
    return loss.detach()

  def _grads_fn(self, *args: Any) -> tuple[Tensor, ...]:
    loss = self.loss_of(*args)
    self.opt.zero_grad()
    loss.backward()
    have = [i for i, p in enumerate(self.opt.params) if p.grad is not None]
    by: dict[Any, list[int]] = {}
    for i in have: by.setdefault(self.opt.params[i].dtype, []).append(i)
    self.layout = list(by.items())
    # each gradient as it is (read out into its place in the bucket's host array: no kernel concatenating them)
    out = (loss.detach(), *[self.opt.params[i].grad.detach() for _, idx in self.layout for i in idx])
    out[0].realize(*out[1:])
    return out

  def _update_fn(self, *avgs: np.ndarray) -> None:
    n = world_size()
    for (dt, idx), a in zip(self.layout, avgs):
      g, off = Tensor(a, device=self.opt.params[idx[0]].device).cast(dt) / n, 0   # (float16 travels as float32)
      for i in idx:
        p = self.opt.params[i]
        p.grad = g[off:off + p.numel()].reshape(p.shape)
        off += p.numel()
    self.opt.step()

  def __call__(self, *args: Any) -> Tensor:
    if world_size() == 1: return self._whole(*args)   # nothing to exchange: one replay, the update in it
    loss, *grads = self._grads(*args)
    # the layout must agree across ranks before the data moves (a mismatch names every rank's)
    _agree_text(" ".join(f"{dt.name}:{len(idx)}:{sum(self.opt.params[i].numel() for i in idx)}" for dt, idx in self.layout),
                "DistributedStep", "gradient buffers")
    sends, it = [], iter(grads)
    for dt, idx in self.layout:
      # (MPI has no 16-bit float sums: float16 and bfloat16 travel as float32, converted by numpy())
      wide = dt.itemsize == 2 and dtypes.is_float(dt)
      send = np.empty(sum(self.opt.params[i].numel() for i in idx), np.float32 if wide else _np_dtype(dt))
      off = 0
      for i in idx:
        g = next(it)
        if wide: send[off:off + g.numel()] = g.numpy().reshape(-1)
        else: g._realized().copyout(memoryview(send[off:off + g.numel()]).cast("B"))
        off += g.numel()
      sends.append(send)
    recvs = [np.empty_like(s) for s in sends]
    reqs = [_c().Iallreduce(s, r, op=_mpi().SUM) for s, r in zip(sends, recvs)]
    for k, req in enumerate(reqs): _wait(req, f"DistributedStep gradient allreduce (buffer {k} of {len(reqs)})")
    self._update(*recvs)
    return loss
