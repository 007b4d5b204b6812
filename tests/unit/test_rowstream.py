"""Row-streamed reductions (codegen/rowstream.py): a sum down the rows of a large matrix into contiguous outputs is
computed pass by pass over the rows into a chunk of columns per core, and the kernel rules that keep such an
accumulating kernel correct."""
from __future__ import annotations
import numpy as np
import pytest
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import Ops
from baregrad.ir.view import ShapeTracker
from baregrad.codegen import rowstream
from baregrad.codegen.astbuild import load, store, reduce, sink
from baregrad.codegen.kernel import Kernel, Opt, OptOps, OptError
from baregrad.codegen.program import get_program
from baregrad.hal import Device
from tests.helpers import DEVICES

f32 = dtypes.float32

def vecmat(M: int, K: int, N: int, xbuf: int = 1):
  """x (M, K) @ W (K, N), both row-major: W is read down its rows (stride N along the reduction); x in buffer xbuf."""
  sa = ShapeTracker.from_shape((M, K)).reshape((M, 1, K)).expand((M, N, K))
  sb = ShapeTracker.from_shape((K, N)).permute((1, 0)).reshape((1, N, K)).expand((M, N, K))
  return sink(store(0, (M, N, 1), reduce(load(xbuf, f32, sa) * load(2, f32, sb), Ops.ADD, (2,))))

def test_plans_split_columns_over_cores_or_rows_into_partials():
  # 2 cores, 4096 columns: a chunk of 2048 per core, written straight into the output (no tail, one pass per chunk)
  cols = rowstream._plan_cached(vecmat(1, 1024, 4096), 2)
  assert cols is not None and len(cols.kernels) == 1 and not cols.temps
  # 1024 columns: chunks of 512 would be short runs of each row: the rows are split instead, two partials summed after
  rows = rowstream._plan_cached(vecmat(1, 2048, 1024), 2)
  assert rows is not None and len(rows.kernels) == 2 and rows.temps == [(2 * 1024, f32)]
  # a kernel that also reads the buffer it writes: the passes add into a temporary, not into what later passes read
  own = rowstream._plan_cached(vecmat(1, 1024, 1024 * 4, xbuf=0), 2)
  assert own is not None and len(own.kernels) == 2 and own.temps

@pytest.mark.parametrize("ast", [vecmat(1, 1024, 1024),   # 4 MiB: read from the cache, strips cost about as much
                                 vecmat(1, 1026, 1024),   # rows not a multiple of the pass (4)
                                 vecmat(1, 1024, 1000),   # columns not whole vectors
                                 vecmat(64, 1024, 1024)], # many rows of outputs: the matmul tiling (and packing) is better
                         ids=["small", "odd_k", "odd_n", "matmul"])
def test_other_shapes_keep_the_default_tiling(ast):
  assert rowstream._plan_cached(ast, 2) is None

def test_an_accumulating_axis_stays_a_serial_loop():
  """The first kernel of a plan stores with stride 0 along the passes: running them on two threads (or as lanes, which
  read the chunk once for all of them) would lose sums. Kernel.apply_opt refuses; the CPU heuristic puts the cores on
  the chunks."""
  plan = rowstream._plan_cached(vecmat(1, 1024, 4096), 2)
  ast = plan.kernels[0][0]
  k = Kernel(ast)
  assert k.acc_axes == {2}   # (S, C, KB, JC, U, M): the passes
  passes = [n for n, i in enumerate(k.loop_axes()) if k.axes[i].orig == 2][0]
  for op in (OptOps.PARALLEL, OptOps.UPCAST, OptOps.PADTO):
    with pytest.raises(OptError, match="accumulates"): Kernel(ast).apply_opt(Opt(op, passes, 3 if op is OptOps.PADTO else 2))
  opts = get_program(ast, Device["CPU"].renderer).opts
  assert [o.axis for o in opts if o.op is OptOps.PARALLEL] == [0], opts
  assert not any(o.op is OptOps.UNROLL for o in opts), opts

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("M,K,N", [(1, 1024, 4096), (1, 2048, 1024), (3, 2048, 1024), (2, 4096, 2048)], ids=str)
def test_vector_matrix_products_are_right(device, M, K, N):
  from baregrad import Tensor
  rng = np.random.default_rng(M * K + N)
  a, w, b = rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal((K, N), dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
  x, W = Tensor(a, device=device), Tensor(w, device=device)
  assert any(len(it.ast.src[0].src[1].arg.shape) > 3 for it in (x @ W).schedule()), "not row-streamed"
  np.testing.assert_allclose((x @ W).numpy(), a @ w, rtol=1e-4, atol=1e-3)
  # an elementwise tail after the reduction: computed from the summed partials
  np.testing.assert_allclose(((x @ W) + Tensor(b, device=device)).relu().numpy(), np.maximum(a @ w + b, 0), rtol=1e-4, atol=1e-3)

@pytest.mark.parametrize("device", DEVICES)
def test_column_sums_are_right(device):
  from baregrad import Tensor
  a = np.random.default_rng(5).standard_normal((8192, 256)).astype(np.float32)
  a64 = a.astype(np.float64)
  np.testing.assert_allclose(Tensor(a, device=device).sum(0).numpy(), a64.sum(0), rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(Tensor(a64, device=device).sum(0).numpy(), a64.sum(0), rtol=1e-10)

def test_rowstream_off_keeps_the_strips():
  # ROWSTREAM=0 (a knob read once per process: Context clears it) schedules the plain kernel; the values agree
  from baregrad import Tensor
  from baregrad.helpers import Context
  rng = np.random.default_rng(9)
  a, w = rng.standard_normal((1, 1536), dtype=np.float32), rng.standard_normal((1536, 2048), dtype=np.float32)
  with Context(ROWSTREAM=0):
    x, W = Tensor(a), Tensor(w)
    items = (x @ W).schedule()
    assert len(items) == 1 and len(items[0].ast.src[0].src[1].arg.shape) == 3, [it.ast.src[0].src[1].arg.shape for it in items]
    np.testing.assert_allclose((x @ W).numpy(), a @ w, rtol=1e-4, atol=1e-3)

def test_rowstream_switch_is_part_of_the_schedule_cache_key():
  # the same graph scheduled with ROWSTREAM on, then off, then on again in one process: each gets the schedule of its
  # own setting (the cache key holds the knobs that change how a graph is cut; ROWSTREAM and PACK were missing)
  from baregrad import Tensor
  from baregrad.helpers import Context
  rng = np.random.default_rng(10)
  a, w = rng.standard_normal((1, 1536), dtype=np.float32), rng.standard_normal((1536, 2048), dtype=np.float32)
  counts = []
  for on in (1, 0, 1):
    with Context(ROWSTREAM=on):
      x, W = Tensor(a), Tensor(w)
      items = (x @ W).schedule()
      counts.append((len(items), len(items[0].ast.src[0].src[1].arg.shape)))
      np.testing.assert_allclose((x @ W).numpy(), a @ w, rtol=1e-4, atol=1e-3)
  assert counts[1] == (1, 3) and counts[0] == counts[2] != counts[1], counts

def test_a_jit_replays_row_streamed_kernels_on_new_inputs():
  from baregrad import Tensor
  from baregrad.tensor.jit import jit
  @jit
  def f(x, W): return ((x @ W).relu() + W.sum(0)).realize()
  rng = np.random.default_rng(12)
  for _ in range(3):
    a, w = rng.standard_normal((1, 2048), dtype=np.float32), rng.standard_normal((2048, 2048), dtype=np.float32)
    np.testing.assert_allclose(f(Tensor(a), Tensor(w)).numpy(), np.maximum(a @ w, 0) + w.sum(0), rtol=1e-4, atol=1e-3)
  # the capture holds the row-streamed kernels (their stores have the plan's 6 axes); JIT=0 captures nothing
  for cap in f.captured.values():
    assert any(len(l.runner.spec.ast.src[0].src[1].arg.shape) == 6 for l in cap.launches)
