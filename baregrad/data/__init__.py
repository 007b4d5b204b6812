"""baregrad.data: torch.utils.data's Dataset, TensorDataset, Subset, random_split, default_collate and DataLoader.

DataLoader batches a dataset's samples (batch_size, drop_last), in order or shuffled, and collates each batch into
Tensors (default_collate: Tensors and NumPy arrays stacked on a new first axis, Python ints to int64, floats to float64
and bools to bool tensors, as PyTorch's; tuples, lists and dicts collated field by field).
- A TensorDataset with the default collate is batched on the device: each tensor read at the batch's indices in one
  gather (a view where the indices are a run), not sample by sample.
- shuffle draws the order with baregrad.randperm (a kernel, seeded by baregrad.manual_seed), or with `generator` when
  one is given: a numpy.random.Generator, or an int seed for one; a new order every epoch.
- num_workers > 0 loads samples in that many background threads, up to prefetch_factor batches each ahead of the
  training loop: there `dataset[i]` and the default collation to NumPy run off the main thread (file reads, decoding and
  NumPy release the GIL); the conversion to Tensors, and a collate_fn, run on the main thread. Tensors are built on the main thread only (the
  frontend is not thread-safe), so a sample holding a Tensor is refused there, naming its index. Threads, not
  processes: a dataset need not pickle, and nothing forks a process that holds device threads. Every wait for a
  batch has a timeout (`timeout`, 300 s when 0)."""
from __future__ import annotations
import bisect, concurrent.futures, itertools, math, numbers
from typing import Any, Callable, Iterator, Sequence
import numpy as np
from baregrad.tensor import Tensor

class Dataset:
  """A map-style dataset: subclass it and define __getitem__(index) and __len__()."""
  def __getitem__(self, index: int) -> Any: raise NotImplementedError(f"{type(self).__name__} has no __getitem__")
  def __len__(self) -> int: raise NotImplementedError(f"{type(self).__name__} has no __len__")
  def __add__(self, other: Dataset) -> ConcatDataset: return ConcatDataset([self, other])

class TensorDataset(Dataset):
  """Samples are the tensors' rows: dataset[i] == tuple(t[i] for t in tensors); all share their first size."""
  def __init__(self, *tensors: Any):
    if not tensors: raise ValueError("TensorDataset needs at least one tensor")
    self.tensors = tuple(t if isinstance(t, Tensor) else Tensor(np.asarray(t)) for t in tensors)
    n = {t.shape[0] if t.ndim else None for t in self.tensors}
    if len(n) != 1 or None in n: raise ValueError(f"TensorDataset: tensors must share their first size, got shapes {[t.shape for t in self.tensors]}")
  def __getitem__(self, index: int) -> tuple[Tensor, ...]: return tuple(t[index] for t in self.tensors)
  def __len__(self) -> int: return self.tensors[0].shape[0]
  def _batch(self, idx: list[int]) -> tuple[Tensor, ...]:
    """The rows at idx of every tensor: a slice where idx is a run, else one gather per tensor."""
    if idx == list(range(idx[0], idx[0] + len(idx))) and idx[0] >= 0: return tuple(t[idx[0]:idx[0] + len(idx)] for t in self.tensors)
    ix = Tensor(np.asarray(idx, np.int32))
    return tuple(t[ix] for t in self.tensors)

class Subset(Dataset):
  """The samples of dataset at the given indices."""
  def __init__(self, dataset: Dataset, indices: Sequence[int]): self.dataset, self.indices = dataset, list(indices)
  def __getitem__(self, index: int) -> Any: return self.dataset[self.indices[index]]
  def __len__(self) -> int: return len(self.indices)

class ConcatDataset(Dataset):
  """Several datasets one after another."""
  def __init__(self, datasets: Sequence[Dataset]):
    self.datasets = list(datasets)
    self.cumulative_sizes = list(itertools.accumulate(len(d) for d in self.datasets))
  def __len__(self) -> int: return self.cumulative_sizes[-1] if self.cumulative_sizes else 0
  def __getitem__(self, index: int) -> Any:
    if index < 0: index += len(self)
    if not 0 <= index < len(self): raise IndexError(f"index {index} is out of range for a dataset of {len(self)} samples")
    d = bisect.bisect_right(self.cumulative_sizes, index)
    return self.datasets[d][index - (self.cumulative_sizes[d - 1] if d else 0)]

def random_split(dataset: Dataset, lengths: Sequence[int | float], generator: Any = None) -> list[Subset]:
  """Split into non-overlapping Subsets of the given lengths (or fractions summing to 1), in a random order."""
  n = len(dataset)
  if all(isinstance(x, float) for x in lengths) and math.isclose(sum(lengths), 1.0):
    sizes = [int(math.floor(n * f)) for f in lengths]
    for i in range(n - sum(sizes)): sizes[i % len(sizes)] += 1
  else: sizes = [int(x) for x in lengths]
  if sum(sizes) != n: raise ValueError(f"random_split: lengths {list(lengths)} do not add up to the dataset's {n} samples")
  order = _permutation(n, generator)
  return [Subset(dataset, order[o - s:o]) for s, o in zip(sizes, itertools.accumulate(sizes))]

def _permutation(n: int, generator: Any) -> list[int]:
  if generator is None:
    from baregrad.tensor.factories import randperm
    return randperm(n).tolist()
  if isinstance(generator, int) and not isinstance(generator, bool): generator = np.random.default_rng(generator)
  if not isinstance(generator, np.random.Generator):
    raise TypeError(f"generator must be None (baregrad's stream), an int seed or a numpy.random.Generator, got {type(generator).__name__}")
  return generator.permutation(n).tolist()

# ---- collation
def default_collate(batch: Sequence[Any]) -> Any:
  """Samples collated into a batch: Tensors stacked (torch.stack), NumPy arrays stacked into a Tensor, ints to int64,
  floats to float64, bools to bool tensors, strings left as a list; tuples, lists and dicts field by field."""
  return _to_tensors(_collate(batch, host=False))

def _collate(batch: Sequence[Any], host: bool, where: str = "") -> Any:
  """The collated batch; host=True (a worker thread): NumPy arrays instead of Tensors, and a Tensor is refused."""
  if not batch: raise ValueError("cannot collate an empty batch")
  e = batch[0]
  if isinstance(e, Tensor):
    if host: raise TypeError(f"DataLoader worker: a sample{where} is a baregrad Tensor; with num_workers > 0 the dataset must return NumPy "
                             f"arrays or numbers (Tensors are built on the main thread only), or use num_workers=0")
    shapes = {tuple(x.shape) for x in batch}
    if len(shapes) != 1: raise RuntimeError(f"default_collate: tensors{where} of different shapes {sorted(shapes)} cannot be stacked")
    return Tensor.stack(list(batch), 0)
  if isinstance(e, np.ndarray) or isinstance(e, np.generic):
    shapes = {np.shape(x) for x in batch}
    if len(shapes) != 1: raise RuntimeError(f"default_collate: arrays{where} of different shapes {sorted(shapes)} cannot be stacked")
    return _Host(np.stack([np.asarray(x) for x in batch]))
  if isinstance(e, bool): return _Host(np.array(batch, np.bool_))
  if isinstance(e, numbers.Integral): return _Host(np.array(batch, np.int64))
  if isinstance(e, numbers.Real): return _Host(np.array(batch, np.float64))
  if isinstance(e, (str, bytes)): return list(batch)
  if isinstance(e, dict): return {k: _collate([d[k] for d in batch], host, f"{where}[{k!r}]") for k in e}
  if isinstance(e, (tuple, list)):
    if len({len(s) for s in batch}) != 1: raise RuntimeError(f"default_collate: samples{where} have different numbers of fields")
    cols = [_collate([s[i] for s in batch], host, f"{where}[{i}]") for i in range(len(e))]
    return tuple(cols) if isinstance(e, tuple) else cols
  raise TypeError(f"default_collate: cannot collate samples{where} of type {type(e).__name__}: expected Tensors, NumPy arrays, numbers, "
                  f"strings, or tuples, lists and dicts of them (pass collate_fn=)")

class _Host:
  """A collated NumPy array waiting for its conversion to a Tensor on the main thread."""
  __slots__ = ("a",)
  def __init__(self, a: np.ndarray): self.a = a

def _to_tensors(x: Any) -> Any:
  if isinstance(x, _Host):
    return Tensor(np.ascontiguousarray(x.a)).reshape(x.a.shape)   # (a 0-d array would come back as shape (1,))
  if isinstance(x, dict): return {k: _to_tensors(v) for k, v in x.items()}
  if isinstance(x, tuple): return tuple(_to_tensors(v) for v in x)
  if isinstance(x, list): return [_to_tensors(v) for v in x]
  return x

class _Samples:
  """A worker's uncollated samples, for a collate_fn that runs on the main thread."""
  __slots__ = ("samples",)
  def __init__(self, samples: list): self.samples = samples

# ---- the loader
class DataLoader:
  """Batches of a dataset: `for x, y in DataLoader(ds, batch_size=64, shuffle=True): ...` (see the module's doc)."""
  def __init__(self, dataset: Dataset, batch_size: int | None = 1, shuffle: bool = False, sampler: Any = None, batch_sampler: Any = None,
               num_workers: int = 0, collate_fn: Callable[[list], Any] | None = None, pin_memory: bool = False, drop_last: bool = False,
               timeout: float = 0, worker_init_fn: Callable[[int], Any] | None = None, generator: Any = None, *,
               prefetch_factor: int | None = None, persistent_workers: bool = False):
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0):
      raise ValueError(f"DataLoader: batch_size must be a positive int (or None for unbatched samples), got {batch_size!r}")
    if not isinstance(num_workers, int) or num_workers < 0: raise ValueError(f"DataLoader: num_workers must be an int >= 0, got {num_workers!r}")
    if shuffle and sampler is not None: raise ValueError("DataLoader: sampler option is mutually exclusive with shuffle")
    if batch_sampler is not None and (batch_size != 1 or shuffle or sampler is not None or drop_last):
      raise ValueError("DataLoader: batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last")
    if prefetch_factor is not None and num_workers == 0: raise ValueError("DataLoader: prefetch_factor needs num_workers > 0 (it counts batches per worker)")
    if timeout < 0: raise ValueError(f"DataLoader: timeout must be >= 0, got {timeout}")
    self.dataset, self.batch_size, self.shuffle, self.sampler, self.batch_sampler = dataset, batch_size, shuffle, sampler, batch_sampler
    self.num_workers, self.collate_fn, self.drop_last, self.timeout = num_workers, collate_fn, drop_last, timeout
    self.worker_init_fn, self.generator, self.prefetch_factor = worker_init_fn, generator, prefetch_factor or 2
    if isinstance(generator, int) and not isinstance(generator, bool): self.generator = np.random.default_rng(generator)

  def _order(self) -> list[int]:
    if self.sampler is not None: return list(self.sampler)
    n = len(self.dataset)
    return _permutation(n, self.generator) if self.shuffle else list(range(n))

  def _index_batches(self) -> list[list[int]]:
    if self.batch_sampler is not None: return [list(b) for b in self.batch_sampler]
    order = self._order()
    if self.batch_size is None: return [[i] for i in order]
    bs = self.batch_size
    out = [order[i:i + bs] for i in range(0, len(order), bs)]
    if self.drop_last and out and len(out[-1]) < bs: out.pop()
    return out

  def __len__(self) -> int:
    if self.batch_sampler is not None: return len(self.batch_sampler)
    n = len(self.sampler) if self.sampler is not None else len(self.dataset)
    if self.batch_size is None: return n
    return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

  def _fetch(self, idx: list[int], host: bool) -> Any:
    if self.batch_size is None:
      s = self.dataset[idx[0]]
      return s if self.collate_fn is None else self.collate_fn(s)
    samples = [self.dataset[i] for i in idx]
    if self.collate_fn is not None:
      # a collate_fn may build Tensors: from a worker thread its samples go back to the main thread to be collated there
      return _Samples(samples) if host else self.collate_fn(samples)
    return _collate(samples, host, f" (batch indices {idx[:4]}{'...' if len(idx) > 4 else ''})" if host else "")

  def __iter__(self) -> Iterator[Any]:
    batches = self._index_batches()
    if isinstance(self.dataset, TensorDataset) and self.collate_fn is None and self.batch_size is not None:
      # batched on the device (the workers would only wait on it): one gather per tensor
      for idx in batches: yield self.dataset._batch(idx)
      return
    if self.num_workers == 0:
      for idx in batches: yield _to_tensors(self._fetch(idx, host=False))
      return
    yield from self._threaded(batches)

  def _threaded(self, batches: list[list[int]]) -> Iterator[Any]:
    ids = itertools.count()
    init = (lambda: self.worker_init_fn(next(ids))) if self.worker_init_fn is not None else None
    pool = concurrent.futures.ThreadPoolExecutor(self.num_workers, thread_name_prefix="baregrad-data", initializer=init)
    wait = self.timeout or 300.0
    try:
      ahead = self.num_workers * self.prefetch_factor
      pending: list[concurrent.futures.Future] = []
      it = iter(batches)
      for idx in itertools.islice(it, ahead): pending.append(pool.submit(self._fetch, idx, True))
      k = 0
      while pending:
        fut = pending.pop(0)
        try: out = fut.result(timeout=wait)
        except concurrent.futures.TimeoutError:
          raise TimeoutError(f"DataLoader: batch {k} took more than {wait} s in a worker thread (timeout={self.timeout})") from None
        nxt = next(it, None)
        if nxt is not None: pending.append(pool.submit(self._fetch, nxt, True))
        k += 1
        yield self.collate_fn(out.samples) if isinstance(out, _Samples) else _to_tensors(out)
    finally: pool.shutdown(wait=False, cancel_futures=True)

__all__ = ["Dataset", "TensorDataset", "Subset", "ConcatDataset", "random_split", "default_collate", "DataLoader"]
