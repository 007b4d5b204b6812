"""baregrad.data: Dataset, TensorDataset, DataLoader (batching, shuffle, drop_last, collate, worker threads)."""
import threading, time
import numpy as np
import pytest
import baregrad
from baregrad import Tensor, dtypes
from baregrad.data import Dataset, TensorDataset, DataLoader, Subset, random_split, default_collate

try: import torch
except ImportError: torch = None

X = np.arange(20, dtype=np.float32).reshape(10, 2)
Y = np.arange(10)

def test_tensor_dataset_batches_in_order():
  ds = TensorDataset(Tensor(X), Tensor(Y))
  assert len(ds) == 10 and [t.tolist() for t in ds[3]] == [[6.0, 7.0], 3]
  batches = list(DataLoader(ds, batch_size=4))
  assert len(batches) == 3 == len(DataLoader(ds, batch_size=4))
  np.testing.assert_array_equal(np.concatenate([b[0].numpy() for b in batches]), X)
  assert [b[1].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
  dl = DataLoader(ds, batch_size=4, drop_last=True)
  assert len(dl) == 2 and [b[1].shape for b in dl] == [(4,), (4,)]

def test_shuffle_is_a_new_permutation_each_epoch_and_seeded():
  ds = TensorDataset(Tensor(X), Tensor(Y))
  def epoch(dl): return sum((b[1].tolist() for b in dl), [])
  baregrad.manual_seed(1)
  dl = DataLoader(ds, batch_size=3, shuffle=True)
  e1, e2 = epoch(dl), epoch(dl)
  assert sorted(e1) == sorted(e2) == list(range(10)) and e1 != e2 and e1 != list(range(10))
  baregrad.manual_seed(1)
  assert epoch(DataLoader(ds, batch_size=3, shuffle=True)) == e1
  # a NumPy generator (or its seed) gives its own reproducible order; rows stay paired with their labels
  g1, g2 = epoch(DataLoader(ds, batch_size=3, shuffle=True, generator=5)), epoch(DataLoader(ds, batch_size=3, shuffle=True, generator=np.random.default_rng(5)))
  assert g1 == g2 and sorted(g1) == list(range(10))
  for x, y in DataLoader(ds, batch_size=4, shuffle=True): np.testing.assert_array_equal(x.numpy(), X[y.numpy()])

class Pairs(Dataset):
  """Samples of NumPy arrays, ints, floats, strings and dicts (what a file-backed dataset returns)."""
  def __init__(self, n=7, delay=0.0): self.n, self.delay, self.threads = n, delay, set()
  def __len__(self): return self.n
  def __getitem__(self, i):
    self.threads.add(threading.current_thread().name)
    if self.delay: time.sleep(self.delay)
    return np.full((2,), i, np.float32), i, {"w": float(i) / 2, "name": f"s{i}", "ok": i % 2 == 0}

@pytest.mark.parametrize("workers", [0, 2])
def test_default_collate_of_mixed_samples(workers):
  ds = Pairs()
  out = list(DataLoader(ds, batch_size=3, num_workers=workers))
  assert len(out) == 3
  x, i, d = out[0]
  assert x.dtype == dtypes.float32 and x.shape == (3, 2) and x.numpy()[:, 0].tolist() == [0, 1, 2]
  assert i.dtype == dtypes.int64 and i.tolist() == [0, 1, 2]
  assert d["w"].dtype == dtypes.float64 and d["w"].tolist() == [0.0, 0.5, 1.0]   # Python floats to float64, as PyTorch
  assert d["name"] == ["s0", "s1", "s2"] and d["ok"].dtype == dtypes.bool
  assert out[2][1].tolist() == [6]
  assert any(t.startswith("baregrad-data") for t in ds.threads) == (workers > 0)

@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
def test_default_collate_matches_torch_dtypes():
  batch = [(np.ones(2, np.float32), 1, 2.5, True), (np.zeros(2, np.float32), 2, 3.5, False)]
  ours, theirs = default_collate(batch), torch.utils.data.default_collate(batch)
  for a, b in zip(ours, theirs):
    short = str(a.dtype).removeprefix("dtypes.")
    assert str(b.dtype).removeprefix("torch.") in (a.dtype.name if hasattr(a.dtype, "name") else "", short,
                                                   {"float": "float32", "long": "int64", "double": "float64", "bool": "bool"}[short])
    np.testing.assert_array_equal(a.numpy(), b.numpy())

def test_workers_prefetch_in_parallel():
  """Four worker threads load 8 slow samples in about two sample-times, not eight."""
  ds = Pairs(n=8, delay=0.1)
  t = time.perf_counter()
  assert [b[1].tolist() for b in DataLoader(ds, batch_size=2, num_workers=4)] == [[0, 1], [2, 3], [4, 5], [6, 7]]
  assert time.perf_counter() - t < 0.6

def test_worker_sample_holding_a_tensor_is_refused():
  class T(Dataset):
    def __len__(self): return 2
    def __getitem__(self, i): return Tensor([float(i)])
  with pytest.raises(TypeError, match="num_workers > 0"): list(DataLoader(T(), batch_size=2, num_workers=1))
  assert [b.tolist() for b in DataLoader(T(), batch_size=2)] == [[[0.0], [1.0]]]   # fine on the main thread

def test_worker_timeout_names_the_batch():
  with pytest.raises(TimeoutError, match="batch 0"): list(DataLoader(Pairs(n=2, delay=1.0), batch_size=2, num_workers=1, timeout=0.2))

def test_collate_fn_and_unbatched():
  ds = Pairs(n=4)
  got = list(DataLoader(ds, batch_size=2, collate_fn=lambda s: [x[1] for x in s], num_workers=1))
  assert got == [[0, 1], [2, 3]]
  assert [x[1] for x in DataLoader(ds, batch_size=None)] == [0, 1, 2, 3]

def test_subset_and_random_split():
  ds = TensorDataset(Tensor(X), Tensor(Y))
  a, b = random_split(ds, [7, 3], generator=0)
  assert len(a) == 7 and len(b) == 3 and sorted(a.indices + b.indices) == list(range(10))
  assert Subset(ds, [4, 2])[1][1].tolist() == 2
  with pytest.raises(ValueError, match="do not add up"): random_split(ds, [5, 6])

def test_bad_arguments():
  ds = TensorDataset(Tensor(X), Tensor(Y))
  with pytest.raises(ValueError, match="batch_size"): DataLoader(ds, batch_size=0)
  with pytest.raises(ValueError, match="mutually exclusive"): DataLoader(ds, shuffle=True, sampler=[0, 1])
  with pytest.raises(ValueError, match="first size"): TensorDataset(Tensor(X), Tensor(Y[:5]))
  with pytest.raises(TypeError, match="generator"): list(DataLoader(ds, shuffle=True, generator="x"))
  with pytest.raises(RuntimeError, match="different shapes"): default_collate([np.zeros(2), np.zeros(3)])
