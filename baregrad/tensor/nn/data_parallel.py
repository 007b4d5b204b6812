"""Data parallel training in one process: a model replicated on several devices, each batch split across them, the
gradients averaged by an allreduce (tensor/collectives.py) so every replica takes the same update and keeps
bit-identical weights."""
from __future__ import annotations
import copy
from typing import Any, Callable, Sequence
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

class DataParallel:
  """`DataParallel(model, ["CPU:0", "CPU:1"], lambda ps: optim.Adam(ps, lr=1e-3))`: one replica of the model and one
  optimizer per device. `step(loss_fn, x, y)` splits the batch along axis 0, runs loss_fn(replica, x_part, y_part)
  and its backward pass on every device, averages the gradients weighted by each part's share of the batch (the
  gradient of the mean loss over the whole batch), and steps every optimizer. Returns the mean loss (a Tensor on the
  first device)."""
  def __init__(self, model: Any, devices: Sequence[str], make_optimizer: Callable[[list[Tensor]], Any]):
    self.devices = collectives.check_devices(devices)
    self.replicas = [replicate(model, d) for d in self.devices]
    self.params = [get_parameters(r) for r in self.replicas]
    counts = {len(p) for p in self.params}
    if len(counts) != 1: raise RuntimeError(f"DataParallel: replicas have different parameter counts {sorted(counts)}")
    self.optimizers = [make_optimizer(p) for p in self.params]

  def step(self, loss_fn: Callable[[Any, Tensor, Tensor], Tensor], x: Tensor, y: Tensor) -> Tensor:
    if x.shape[0] != y.shape[0]: raise ValueError(f"DataParallel.step: x has {x.shape[0]} samples (shape {x.shape}), y has {y.shape[0]} (shape {y.shape})")
    xs, ys = x.shard(self.devices, 0).parts, y.shard(self.devices, 0).parts
    n = x.shape[0]
    losses = []
    for rep, opt, xp, yp in zip(self.replicas, self.optimizers, xs, ys):
      loss = loss_fn(rep, xp, yp)
      opt.zero_grad()
      loss.backward()
      losses.append(loss * (xp.shape[0] / n))
    for i in range(len(self.params[0])):
      grads = [ps[i].grad * (xp.shape[0] / n) for ps, xp in zip(self.params, xs)]
      for ps, g in zip(self.params, collectives.allreduce(grads, "sum")): ps[i].grad = g
    total = collectives.allreduce(losses, "sum")
    for opt, t in zip(self.optimizers, total): opt.step(t)
    return total[0]

  @property
  def model(self) -> Any:
    """The replica on the first device (all replicas hold the same weights)."""
    return self.replicas[0]
