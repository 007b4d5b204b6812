"""The KV cache: per layer, keys and values for every position of the context, preallocated and written in place.

A step's keys and values (KV heads, T, head_dim) go to the slots its positions name through a one-hot matrix built
from the positions tensor (T, S): the write is the same kernel at every position (no shape or offset depends on it),
so the jit captures a decode step once. The cache keeps its storage (`assign`), as a KV cache in PyTorch or llama.cpp
does; `reset` empties it for a new sequence."""
from __future__ import annotations
from baregrad.tensor.tensor import Tensor

class KVCache:
  def __init__(self, n_layers: int, n_kv_heads: int, context: int, head_dim: int, device: str | None = None):
    self.shape = (n_kv_heads, context, head_dim)
    self.k = [Tensor.zeros(*self.shape, device=device).contiguous().realize() for _ in range(n_layers)]
    self.v = [Tensor.zeros(*self.shape, device=device).contiguous().realize() for _ in range(n_layers)]

  def reset(self) -> None:
    for t in self.k + self.v: t.assign(Tensor.zeros(*self.shape, device=t.device)).realize()

  def write(self, layer: int, k: Tensor, v: Tensor, onehot: Tensor, written: Tensor) -> tuple[Tensor, Tensor]:
    """Write k and v (KV, T, hd) at the positions of onehot (T, S) (`written`: (1, S, 1), the slots it names) into
    layer's cache; returns the caches as they are after the write (what this step's attention reads)."""
    out = []
    for cache, new in ((self.k[layer], k), (self.v[layer], v)):
      placed = onehot.T.unsqueeze(0).matmul(new)                        # (KV, S, hd): each new row at its slot
      cache.assign(written.where(placed, cache))
      out.append(cache)
    return out[0], out[1]
