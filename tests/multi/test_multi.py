"""Multi-device tensors (tensor/multi.py) and in-process collectives (tensor/collectives.py) on CPU devices, and on
mock GPUs when MULTI_TEST_DEVICES names them (e.g. MOCKGPU=1 MOCKGPU_COUNT=2 with NV:0,NV:1)."""
import numpy as np
import pytest
from baregrad import Tensor, dtypes, knobs
from baregrad.tensor import collectives as C

D2, D3 = ["CPU:0", "CPU:1"], ["CPU:0", "CPU:1", "CPU:2"]
rng = np.random.default_rng(0)

def f32(*s): return rng.standard_normal(s).astype(np.float32)

@pytest.mark.parametrize("dim", [0, 1, -1])
def test_shard_gather_round_trip(dim):
  x = f32(7, 5)
  m = Tensor(x).shard(D3, dim)
  assert m.shape == (7, 5) and [p.device for p in m.parts] == D3
  assert sum(p.shape[dim] for p in m.parts) == x.shape[dim]
  np.testing.assert_array_equal(m.to("CPU:1").numpy(), x)
  assert m.to("CPU:1").device == "CPU:1"

def test_replicate_and_elementwise():
  x, y = f32(6, 4), f32(6, 4)
  m = Tensor(x).shard(D2, 0)
  r = Tensor(y).to(D2)
  assert r.axis is None and r.shape == (6, 4)
  assert r.to("cpu:1") is r.parts[1]   # gathering a replicated tensor takes the part already there
  np.testing.assert_allclose(((m + r) * 2 - 1).relu().numpy(), np.maximum((x + y) * 2 - 1, 0), rtol=1e-6)
  np.testing.assert_allclose((m + Tensor(y[0]).to(D2)).numpy(), x + y[0], rtol=1e-6)   # broadcast replicated row

@pytest.mark.parametrize("axis", [None, 0, 1])
def test_reductions(axis):
  x = f32(8, 6)
  m = Tensor(x).shard(D3, 0)
  np.testing.assert_allclose(m.sum(axis).numpy(), x.sum(axis), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(m.max(axis).numpy(), x.max(axis))
  np.testing.assert_allclose(m.mean(axis).numpy(), x.mean(axis), rtol=1e-5, atol=1e-6)
  if axis in (None, 0): assert m.sum(axis).axis is None   # over the split axis: an allreduce, every device holds all

def test_matmul_sharded_vs_one_device():
  x, w = f32(9, 12), f32(12, 5)
  ref = Tensor(x) @ Tensor(w)
  ref = ref.numpy()
  cases = [(Tensor(x).shard(D3, 0), Tensor(w).to(D3), 0), (Tensor(x).shard(D3, 1), Tensor(w).shard(D3, 0), None),
           (Tensor(x).shard(D3, 1), Tensor(w).to(D3), None), (Tensor(x).to(D3), Tensor(w).shard(D3, 1), 1)]
  for a, b, ax in cases:
    out = a @ b
    assert out.axis == ax
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-5)

def test_conv_sharded_vs_one_device():
  x, w, b = f32(4, 3, 9, 9), f32(5, 3, 3, 3), f32(5)
  ref = Tensor(x).conv2d(Tensor(w), Tensor(b), padding=1).numpy()
  out = Tensor(x).shard(D2, 0).conv2d(Tensor(w).to(D2), Tensor(b).to(D2), padding=1)
  np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-5)

DTYPES = [dtypes.float32, dtypes.float16, dtypes.float64, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32, dtypes.int64,
          dtypes.uint32, dtypes.bool]

@pytest.mark.parametrize("ring", [False, True], ids=["direct", "ring"])
@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_allreduce_every_dtype(dt, ring):
  ints = rng.integers(0, 4, (3, 40))
  ts = [Tensor(ints[i].tolist(), dtype=dt, device=d) for i, d in enumerate(D3)]
  host = [t.numpy() for t in ts]
  with knobs.Context(RING_MIN_BYTES=0 if ring else 1 << 40):
    assert C.uses_ring(40 * dt.itemsize, 3) == ring
    for op, fn in (("sum", np.sum), ("max", np.max), ("min", np.min)):
      out = C.realize(C.allreduce(ts, op))
      want = fn(np.stack(host), axis=0)
      if dt == dtypes.bool and op == "sum": want = np.any(np.stack(host), axis=0)
      for o, d in zip(out, D3):
        assert o.device == d
        np.testing.assert_array_equal(o.numpy(), want.astype(o.numpy().dtype))

def test_allreduce_bit_identical_and_mean():
  ts = [Tensor(f32(1000), device=d) for d in D3]
  for ring in (0, 1 << 40):
    with knobs.Context(RING_MIN_BYTES=ring):
      out = [o.numpy() for o in C.realize(C.allreduce(ts, "mean"))]
    np.testing.assert_allclose(out[0], np.mean([t.numpy() for t in ts], axis=0), rtol=1e-5, atol=1e-6)
    for o in out[1:]: np.testing.assert_array_equal(o, out[0])

def test_allgather_reduce_scatter_broadcast():
  parts = [f32(2, 3), f32(3, 3), f32(1, 3)]
  ts = [Tensor(p, device=d) for p, d in zip(parts, D3)]
  for o, d in zip(C.realize(C.allgather(ts, 0)), D3):
    assert o.device == d
    np.testing.assert_array_equal(o.numpy(), np.concatenate(parts))
  xs = [f32(6, 2) for _ in D3]
  rs = C.reduce_scatter([Tensor(x, device=d) for x, d in zip(xs, D3)], 0)
  np.testing.assert_allclose(np.concatenate([r.numpy() for r in rs]), sum(xs), rtol=1e-5, atol=1e-6)
  assert [r.device for r in rs] == D3
  b = C.broadcast(Tensor(parts[0], device="CPU:0"), D3)
  assert [t.device for t in b] == D3 and all((t.numpy() == parts[0]).all() for t in b)

def test_bad_input_named():
  with pytest.raises(ValueError, match=r"mixes kinds.*CPU:0 \(CPU\).*NV:0 \(NV\)"): Tensor(f32(4)).shard(["CPU:0", "NV:0"])
  with pytest.raises(ValueError, match="names a device twice"): Tensor(f32(4)).to(["CPU:0", "CPU:0"])
  with pytest.raises(ValueError, match=r"mixes kinds.*CPU:1 \(CPU\).*AMD:0 \(AMD\)"): C.broadcast(Tensor(f32(4)), ["CPU:1", "AMD:0"])
  with pytest.raises(ValueError, match=r"part 0 on CPU:0 has \(3,\), part 1 on CPU:1 has \(4,\)"):
    C.allreduce([Tensor(f32(3), device="CPU:0"), Tensor(f32(4), device="CPU:1")])
  with pytest.raises(TypeError, match="dtypes disagree"):
    C.allreduce([Tensor(f32(3), device="CPU:0"), Tensor([1, 2, 3], dtype=dtypes.int32, device="CPU:1")])
  with pytest.raises(ValueError, match=r"shapes \(4, 3\) and \(4, 2\) disagree"): Tensor(f32(4, 3)).shard(D2) @ Tensor(f32(4, 2)).to(D2)
  with pytest.raises(TypeError, match="with a tensor on CPU only"): Tensor(f32(4)).shard(D2) + Tensor(f32(4))
  with pytest.raises(ValueError, match="different devices"): Tensor(f32(4)).shard(D2) + Tensor(f32(4)).shard(D3)
  with pytest.raises(ValueError, match="fewer elements than the 3 devices"): Tensor(f32(2)).shard(D3)

def test_a_constant_computed_on_one_device_is_not_read_on_another():
  # ones(4) is the same hash-consed graph on every device (it reads no buffer): its value realized on CPU must not
  # stand in for it in a kernel on CPU:1 (a data-parallel replica's loss backward met one from an earlier test)
  w = Tensor.zeros(4, requires_grad=True)
  w.sum().backward()
  w.grad.realize()                        # the gradient of a sum: ones(4) as a constant expanded, computed on CPU
  w1 = Tensor.zeros(4, requires_grad=True, device="CPU:1")
  w1.sum().backward()                     # the same constant graph, on CPU:1
  y = Tensor(np.arange(4, dtype=np.float32), device="CPU:1")
  np.testing.assert_array_equal((y + w1.grad).numpy(), np.arange(4) + 1)

def test_copy_of_a_reshaped_buffer_reads_the_buffer():
  """A COPY whose source is a reshape of a whole realized buffer (a gradient in its parameter's shape, a flat view)
  copies the buffer's bytes: one copy item, no kernel making the source contiguous first; a view that is not the whole
  buffer in order (a permute, a slice) still gets its kernel."""
  a = Tensor(np.arange(24, dtype=np.float32), device="CPU:0").realize()
  for src, want in ((a.reshape(4, 6), np.arange(24).reshape(4, 6)), (a.reshape(2, 3, 4).reshape(6, 4), np.arange(24).reshape(6, 4))):
    items = src.to("CPU:1").schedule()
    assert [it.kind for it in items] == ["copy"], [it.kind for it in items]
    np.testing.assert_array_equal(src.to("CPU:1").numpy(), want)
  for src, want in ((a.reshape(4, 6).permute(1, 0), np.arange(24).reshape(4, 6).T), (a[2:10], np.arange(2, 10))):
    assert [it.kind for it in src.to("CPU:1").schedule()] == ["kernel", "copy"]
    np.testing.assert_array_equal(src.to("CPU:1").numpy(), want)
