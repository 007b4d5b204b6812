"""The KV cache: per layer, keys and values for every position of the context, preallocated and written in place.

A step's keys and values (KV heads, T, head_dim) go to rows [start, start + T) of the layer's cache (one kernel over
those rows alone: Tensor.__setitem__ with basic indexing writes a region, tensor/inplace.py write_region), and the
step attends over rows [0, start + T). `start` is an int or a bound variable (ir/sint.py): in a decode step it is
symbolic, so the write and the attention are the same kernels at every position and the jit captures the step once.
Rows past the prefix are never read, so a new sequence needs no clearing; the cache keeps its storage, as a KV cache
in PyTorch or llama.cpp does."""
from __future__ import annotations
from baregrad.tensor.tensor import Tensor
from baregrad.ir.sint import sint

class KVCache:
  def __init__(self, n_layers: int, n_kv_heads: int, context: int, head_dim: int, device: str | None = None):
    self.shape = (n_kv_heads, context, head_dim)
    self.k = [Tensor.zeros(*self.shape, device=device).contiguous().realize() for _ in range(n_layers)]
    self.v = [Tensor.zeros(*self.shape, device=device).contiguous().realize() for _ in range(n_layers)]

  def reset(self) -> None:
    """A new sequence: nothing to clear (attention reads only the rows the sequence has written)."""

  def write(self, layer: int, k: Tensor, v: Tensor, start: sint) -> tuple[Tensor, Tensor]:
    """Write k and v (KV, T, hd) into rows [start, start + T) of layer's cache; returns the caches' rows
    [0, start + T) as they are after the write (what this step's attention reads)."""
    T = k.shape[1]
    out = []
    for cache, new in ((self.k[layer], k), (self.v[layer], v)):
      cache[:, start:start + T] = new
      out.append(cache[:, :start + T])
    return out[0], out[1]
