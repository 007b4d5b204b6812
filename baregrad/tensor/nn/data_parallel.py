"""Data parallel training in one process: a model replicated on several devices, each batch split across them, the
gradients averaged by an allreduce (tensor/collectives.py) so every replica takes the same update and keeps
bit-identical weights."""
from __future__ import annotations
import copy, functools
import numpy as np
from typing import Any, Callable, Sequence, Union
from baregrad.tensor import collectives
from baregrad.tensor.tensor import Tensor
from baregrad.tensor.nn.state import get_parameters

def replicate(obj: Any, device: str) -> Any:
  """A copy of a model (nn.Modules, lists, dicts, tuples of Tensors) with every Tensor copied to device (leaves keep
  requires_grad); objects of other types are shared."""
  if isinstance(obj, Tensor):
    t = obj.to(device).contiguous().detach().realize()
    return t.requires_grad_(True) if obj.requires_grad else t
  if isinstance(obj, list): return [replicate(v, device) for v in obj]
  if isinstance(obj, tuple): return tuple(replicate(v, device) for v in obj)
  if isinstance(obj, dict): return {k: replicate(v, device) for k, v in obj.items()}
  if _is_module(obj):
    new = copy.copy(obj)
    for k, v in vars(obj).items(): object.__setattr__(new, k, replicate(v, device))
    return new
  return obj

def _is_module(obj: Any) -> bool:
  from baregrad.tensor.nn.module import Module
  return isinstance(obj, Module)

Part = Union[Tensor, np.ndarray, Sequence[Union[Tensor, np.ndarray]]]

class DataParallel:
  """`DataParallel(model, ["CPU:0", "CPU:1"], lambda ps: optim.Adam(ps, lr=1e-3))`: one replica of the model and one
  optimizer per device. `step(loss_fn, x, y)` splits the batch along axis 0 (x and y: Tensors or NumPy arrays, or
  lists of one part per device), runs loss_fn(replica, x_part, y_part) and its backward pass on every device,
  averages the gradients weighted by each part's share of the batch (the gradient of the mean loss over the whole
  batch), and steps every optimizer. Returns the mean loss (a Tensor on the
  first device)."""
  def __init__(self, model: Any, devices: Sequence[str], make_optimizer: Callable[[list[Tensor]], Any]):
    self.devices = collectives.check_devices(devices)
    self.replicas = [replicate(model, d) for d in self.devices]
    self.params = [get_parameters(r) for r in self.replicas]
    counts = {len(p) for p in self.params}
    if len(counts) != 1: raise RuntimeError(f"DataParallel: replicas have different parameter counts {sorted(counts)}")
    self.optimizers = [make_optimizer(p) for p in self.params]

  def step(self, loss_fn: Callable[[Any, Tensor, Tensor], Tensor], x: Part, y: Part) -> Tensor:
    if not isinstance(x, (list, tuple)) and not isinstance(y, (list, tuple)) and x.shape[0] != y.shape[0]:
      raise ValueError(f"DataParallel.step: x has {x.shape[0]} samples (shape {x.shape}), y has {y.shape[0]} (shape {y.shape})")
    xs, ys = self._split(x, "x"), self._split(y, "y")
    for i, (xp, yp) in enumerate(zip(xs, ys)):
      if xp.shape[0] != yp.shape[0]:
        raise ValueError(f"DataParallel.step: part {i} ({self.devices[i]}) of x has {xp.shape[0]} samples (shape {xp.shape}), "
                         f"of y {yp.shape[0]} (shape {yp.shape})")
    n = sum(xp.shape[0] for xp in xs)
    if len(self.devices) == 1:   # nothing to exchange: the loss, gradients and update in one schedule
      loss = loss_fn(self.replicas[0], xs[0], ys[0])
      self.optimizers[0].zero_grad()
      loss.backward()
      self.optimizers[0].step(loss)
      return loss
    losses, grads = [], []
    for rep, opt, ps, xp, yp in zip(self.replicas, self.optimizers, self.params, xs, ys):
      loss = loss_fn(rep, xp, yp)
      opt.zero_grad()
      loss.backward()
      w = xp.shape[0] / n
      losses.append((loss * w).detach())   # (detached: a realized value of autograd's keeps its graph, which the loss
      grads.append([(p.grad * w).detach() for p in ps if p.grad is not None])   # would then be computed from again)
    # (a live tensor reading a replica's weights is computed again before the optimizer writes them: the last loss)
    del loss
    totals = self._allreduce_buckets(losses, grads)
    # every replica's update (each optimizer one schedule on its device)
    for opt, t in zip(self.optimizers, totals): opt.step(t)
    return totals[0]

  def _split(self, v: Part, name: str) -> list[Tensor]:
    """v's parts along axis 0, one on each device: a tensor or array is split in near-equal parts (an array's made on
    their devices directly: no kernel slicing a host tensor, no copy between devices); a list gives one part (a tensor
    or an array) per device, as it is (a jitted step's array arguments must be the arrays Tensor() reads, tensor/jit.py)."""
    if isinstance(v, (list, tuple)):
      if len(v) != len(self.devices): raise ValueError(f"DataParallel.step: {name} has {len(v)} parts for the {len(self.devices)} devices {list(self.devices)}")
      return [p.to(d) if isinstance(p, Tensor) else Tensor(p, device=d) for p, d in zip(v, self.devices)]
    if isinstance(v, np.ndarray):
      k, m = len(self.devices), v.shape[0]
      return [Tensor(v[m * i // k:m * (i + 1) // k], device=d) for i, d in enumerate(self.devices)]
    return v.shard(self.devices, 0).parts

  BUCKET_BYTES = 1 << 20   # gradients smaller than this are packed together, one copy per device pair for the pack

  def _buckets(self, vals: list[Tensor]) -> list[list[int]]:
    """The exchange's buckets over one device's values (indices): a value of BUCKET_BYTES or more alone (copied as it
    is), smaller ones of one dtype packed in order up to BUCKET_BYTES. Each bucket is one copy per pair of devices;
    on CPU devices each copy is a handoff between the two devices' queue threads (~0.2 ms on 2 busy cores: 14 copies
    for an MLP's 7 values cost more than its forward pass), and a pack costs a kernel concatenating its values."""
    out: list[list[int]] = []
    open_: dict[Any, list[int]] = {}
    size: dict[Any, int] = {}
    for i, v in enumerate(vals):
      nb = v.numel() * v.dtype.itemsize
      if nb >= self.BUCKET_BYTES:
        out.append([i])
        continue
      if v.dtype in open_ and size[v.dtype] + nb > self.BUCKET_BYTES: out.append(open_.pop(v.dtype))
      if v.dtype not in open_: open_[v.dtype], size[v.dtype] = [], 0
      open_[v.dtype].append(i)
      size[v.dtype] += nb
    return out + list(open_.values())

  def _allreduce_buckets(self, losses: list[Tensor], grads: list[list[Tensor]]) -> list[Tensor]:
    """Sum the losses and each parameter's gradients over the devices (the summed gradients become each replica's
    p.grad); returns the summed loss per device. Each device's buckets are made with its loss and gradients (one
    schedule), then every copy between devices is made in one schedule, so each device's queues only copy until it has
    every part (no copy waits behind another device's sums); the sums, in rank order on every device as
    collectives.allreduce's (bit-identical replicas), stay lazy: each is computed in its optimizer's update kernels."""
    vals = [[lo.reshape(1), *gs] for lo, gs in zip(losses, grads)]   # per device: loss, then the gradients
    k, buckets = len(self.devices), self._buckets(vals[0])
    packs = [[Tensor.cat(*[v[i].reshape(-1) for i in b]) if len(b) > 1 else v[b[0]] for b in buckets] for v in vals]
    # 1. every device's loss, gradients and packs, with no exchange: one schedule whose items for one device do not wait
    # on another's (a loss combined in this schedule made each device's backward pass wait for the other's forward)
    # (the packed values too: a lazy one, still reading the weights, would be computed again before the update)
    collectives.realize([t for p in packs for t in p] + losses + [g for gs in grads for g in gs])
    # 2. the copies
    there = {(s, d, j): t.to(self.devices[d]) for s in range(k) for d in range(k) if s != d for j, t in enumerate(packs[s])}
    collectives.realize(list(there.values()))
    out = []
    for d in range(k):
      def part(s: int, j: int) -> Tensor: return packs[s][j] if s == d else there[(s, d, j)]
      summed = [functools.reduce(lambda acc, s: acc + part(s, j), range(1, k), part(0, j)) for j in range(len(buckets))]
      o: list[Any] = [None] * len(vals[d])
      for b, t in zip(buckets, summed):
        off = 0
        for i in b:
          n = vals[d][i].numel()
          o[i] = t if len(b) == 1 else t[off:off + n].reshape(vals[d][i].shape)
          off += n
      out.append(o)
    for ps, o in zip(self.params, out):
      for p, g in zip([p for p in ps if p.grad is not None], o[1:]): p.grad = g
    return [o[0].reshape(()) for o in out]

  @property
  def model(self) -> Any:
    """The replica on the first device (all replicas hold the same weights)."""
    return self.replicas[0]
