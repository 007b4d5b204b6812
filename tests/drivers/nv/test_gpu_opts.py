"""GPU opts on the mock NVIDIA GPU (its PTX interpreter runs what ptxas assembles): GROUP reductions through shared
memory, PADTO for awkward sizes, many workgroup axes in one thread index, 128-bit vector accesses (and the scalar build
for a misaligned view), the GPU heuristic on awkward shapes, and grid-wide reductions split into two kernels.
Everything is compared with NumPy. The mock device is opened here (no MOCKGPU needed); shapes stay small because the
interpreter is slow."""
from __future__ import annotations
import re
import numpy as np
import pytest
from baregrad.hal import Buffer
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import Ops
from baregrad.ir.view import ShapeTracker
from baregrad.codegen.astbuild import load, store, reduce, sink, const
from baregrad.codegen.kernel import Kernel, Opt, OptOps, OptError
from baregrad.codegen.program import get_program
from baregrad.codegen.gridreduce import split_reduce
from baregrad.codegen.renderer.ptx import PTXRenderer
from baregrad.codegen.renderer.cuda import CUDARenderer
from baregrad.engine.runner import compile_ast
from tests.helpers import mock_nv_device
from baregrad.drivers.nv_compile import find_ptxas

f32, f16 = dtypes.float32, dtypes.float16

@pytest.fixture(scope="module", autouse=True)
def nv():
  """One mock Hopper registered as Device["NV"] for the module."""
  with mock_nv_device() as dev: yield dev

def run(ast, opts, outs: list[tuple[int, object]], ins: list[np.ndarray], bufs=None):
  """Compile ast with opts (None: the heuristic) for the mock NV, run it; returns the outputs and the runner."""
  k = compile_ast(ast, "NV", opts)
  if bufs is None:
    bufs = [Buffer("NV", n, dt).allocate() for n, dt in outs]
    for x in ins:
      b = Buffer("NV", x.size, dtypes.from_name(str(x.dtype)) if x.dtype != np.float32 else f32).allocate()
      b.copyin(memoryview(np.ascontiguousarray(x)).cast("B")); bufs.append(b)
  k(bufs, wait=True)
  res = []
  for b in bufs[:len(outs)]:
    o = np.empty(b.size, {f32: np.float32, f16: np.float16, dtypes.int32: np.int32}[b.dtype]); b.copyout(memoryview(o).cast("B")); res.append(o)
  return res, k

def _sum_ast(r, c, op=Ops.ADD, axis=1, scale=2.0):
  shp = (r, 1) if axis == 1 else (1, c)
  return sink(store(0, shp, reduce(load(1, f32, (r, c)) * const(f32, scale), op, (axis,))))

def _matmul_ast(m, n, k, dt=f32):
  sa = ShapeTracker.from_shape((m, k)).reshape((m, 1, k)).expand((m, n, k))
  sb = ShapeTracker.from_shape((k, n)).permute((1, 0)).reshape((1, n, k)).expand((m, n, k))
  return sink(store(0, (m, n, 1), reduce(load(1, dt, sa) * load(2, dt, sb), Ops.ADD, (2,))))

# ---------------------------------------------------------------- GROUP
@pytest.mark.parametrize("opts", [
  [Opt(OptOps.GROUP, 1, 8), Opt(OptOps.PARALLEL, 0)],
  [Opt(OptOps.UNROLL, 1, 4), Opt(OptOps.GROUP, 1, 25), Opt(OptOps.PARALLEL, 0)],                      # 25 threads, not a power of 2
  [Opt(OptOps.PADTO, 1, 64), Opt(OptOps.GROUP, 1, 64), Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.PARALLEL, 0)],  # 1000 -> 1024, 2 outputs a block
  [Opt(OptOps.GROUP, 1, 10), Opt(OptOps.GROUP, 1, 4), Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.LOCAL, 0, 2)],    # 4 workgroup axes: one flat index
])
@pytest.mark.parametrize("op", [Ops.ADD, Ops.MAX])
def test_group_reduction(opts, op):
  x = np.random.default_rng(0).standard_normal((4, 1000)).astype(np.float32)
  (out,), k = run(_sum_ast(4, 1000, op, scale=-1.0), opts, [(4, f32)], [x])
  ref = (-x).sum(1) if op is Ops.ADD else (-x).max(1)
  np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-4)
  assert "bar.sync 0;" in k.spec.src and ".shared .align 16 .b8 smem0" in k.spec.src
  assert re.search(r"@%p\d+ st\.global\.f32", k.spec.src), "one thread of the group stores"

def test_group_two_reductions_softmax_denominator():
  # sum(exp(x - max(x))): two reductions over the same grouped axis, each combined through its own shared buffer
  r, c = 3, 300
  x = np.random.default_rng(1).standard_normal((r, c)).astype(np.float32)
  v = load(1, f32, (r, c))
  mx = reduce(v, Ops.MAX, (1,))
  ast = sink(store(0, (r, 1), reduce(((v - mx) * const(f32, 1.4426950408889634)).alu(Ops.EXP2), Ops.ADD, (1,))))
  (out,), k = run(ast, [Opt(OptOps.PADTO, 1, 32), Opt(OptOps.GROUP, 1, 32), Opt(OptOps.PARALLEL, 0)], [(r, f32)], [x])
  np.testing.assert_allclose(out, np.exp(x - x.max(1, keepdims=True)).sum(1), rtol=1e-5)
  assert "smem1" in k.spec.src

def test_group_needs_every_output_axis_off_loops_and_a_gpu():
  ast = _sum_ast(4, 64)
  with pytest.raises(OptError, match="grid, the workgroup or lanes"): get_program(ast, PTXRenderer(), [Opt(OptOps.GROUP, 1, 8)])
  with pytest.raises(OptError, match="workgroups and shared memory"): Kernel(ast).apply_opt(Opt(OptOps.GROUP, 1, 8))
  k = Kernel(_sum_ast(64, 64), gpu=True, ren=PTXRenderer())
  k.apply_opt(Opt(OptOps.GROUP, 1, 64))
  with pytest.raises(OptError, match="2048 threads per workgroup"): k.apply_opt(Opt(OptOps.LOCAL, 0, 32))

def _row_softmax_ast(r, c):
  # a row-fused kernel as the scheduler builds it (engine/schedule.py row fusion): the reductions read each row along an
  # appended axis 2, the elementwise tail writes it along axis 1
  from baregrad.ir.view import View
  row = ShapeTracker((View((r, 1, c), (c, 0, 1), 0, None),))
  mx = reduce(load(1, f32, row), Ops.MAX, (2,))
  e = lambda v: ((v - mx) * const(f32, 1.4426950408889634)).alu(Ops.EXP2)
  den = reduce(e(load(1, f32, row)), Ops.ADD, (2,))
  return sink(store(0, (r, c, 1), e(load(1, f32, (r, c, 1))) / den))

def _np_softmax(x): e = np.exp(x - x.max(1, keepdims=True)); return e / e.sum(1, keepdims=True)

def test_share_runs_a_row_fused_tail_on_the_groups_threads():
  r, c = 3, 256
  x = np.random.default_rng(4).standard_normal((r, c)).astype(np.float32)
  (out,), k = run(_row_softmax_ast(r, c), [Opt(OptOps.GROUP, 2, 32), Opt(OptOps.SHARE, 1, 32), Opt(OptOps.PARALLEL, 0)], [(r * c, f32)], [x])
  np.testing.assert_allclose(out.reshape(r, c), _np_softmax(x), rtol=1e-5, atol=1e-7)
  assert k.spec.local_size == (32, 1, 1) and k.spec.global_size == (r, 1, 1), "one workgroup of 32 threads per row"
  assert "smem1" in k.spec.src and not re.search(r"@%p\d+ st\.global\.f32", k.spec.src), "every thread stores its own elements"

def test_heuristic_takes_a_workgroup_per_row_for_row_fused_kernels():
  r, c = 4, 512
  x = np.random.default_rng(5).standard_normal((r, c)).astype(np.float32)
  (out,), k = run(_row_softmax_ast(r, c), None, [(r * c, f32)], [x])
  np.testing.assert_allclose(out.reshape(r, c), _np_softmax(x), rtol=1e-5, atol=1e-7)
  assert k.spec.global_size == (r, 1, 1), f"the tail's axis went on the grid (each workgroup recomputes the row): {k.spec.global_size}"
  assert {OptOps.GROUP, OptOps.SHARE} <= {o.op for o in k.spec.opts}

def test_share_needs_a_group_and_a_tail_no_reduction_reads():
  k = Kernel(_row_softmax_ast(4, 64), gpu=True, ren=PTXRenderer())
  with pytest.raises(OptError, match="exactly one GROUP"): k.apply_opt(Opt(OptOps.SHARE, 1, 8))
  k.apply_opt(Opt(OptOps.GROUP, 2, 8))
  with pytest.raises(OptError, match="the GROUP's 8 threads"): k.apply_opt(Opt(OptOps.SHARE, 1, 16))
  k2 = Kernel(_sum_ast(64, 64), gpu=True, ren=PTXRenderer())   # axis 0 is read by the reduction
  k2.apply_opt(Opt(OptOps.GROUP, 1, 8))
  with pytest.raises(OptError, match="a reduction reads along axis 0"): k2.apply_opt(Opt(OptOps.SHARE, 0, 8))
  k.apply_opt(Opt(OptOps.SHARE, 1, 8))
  with pytest.raises(OptError, match="shared with the GROUP's threads"): k.apply_opt(Opt(OptOps.PARALLEL, 1))

def test_padto_masks_loads_stores_and_feeds_the_identity():
  x = np.random.default_rng(2).standard_normal((5, 37)).astype(np.float32) - 3   # all negative: MAX over padding must not see 0
  (out,), _ = run(_sum_ast(5, 37, Ops.MAX, scale=1.0), [Opt(OptOps.PADTO, 1, 16), Opt(OptOps.PADTO, 0, 4), Opt(OptOps.LOCAL, 0, 4),
                                                         Opt(OptOps.PARALLEL, 0)], [(5, f32)], [x])
  np.testing.assert_array_equal(out, x.max(1))
  with pytest.raises(OptError, match="before splitting"):
    k = Kernel(_sum_ast(5, 37)); k.apply_opt(Opt(OptOps.UNROLL, 1, 37)); k.apply_opt(Opt(OptOps.PADTO, 0, 8)); k.apply_opt(Opt(OptOps.PADTO, 0, 8))

# ---------------------------------------------------------------- vector memory
def test_vector_loads_and_stores_and_a_misaligned_view():
  n = 1024
  rng = np.random.default_rng(3)
  x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
  ast = sink(store(0, (n,), load(1, f32, (n,)) * load(2, f32, (n,))))
  opts = [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.LOCAL, 0, 64), Opt(OptOps.PARALLEL, 0)]
  (out,), k = run(ast, opts, [(n, f32)], [x, y])
  np.testing.assert_array_equal(out, x * y)
  assert k.spec.src.count("ld.global.v4.f32") == 2 and "st.global.v4.f32" in k.spec.src and k.spec.align == {0: 16, 1: 16, 2: 16}
  big = Buffer("NV", 2 * n + 8, f32).allocate()
  bx, by, bo = big.view(n, f32, 4), big.view(n, f32, 4 * (n + 2)), Buffer("NV", n, f32).allocate()   # 4-byte aligned only
  bx.copyin(memoryview(x).cast("B")); by.copyin(memoryview(y).cast("B"))
  (out,), k2 = run(ast, opts, [(n, f32)], [], bufs=[bo, bx, by])
  np.testing.assert_array_equal(out, x * y)
  assert k2._scalar is not None and "ld.global.v4" not in k2._scalar.spec.src

def test_vector_width_follows_the_proven_alignment():
  # a view starting at element 2: two lanes are aligned (8 bytes), four are not
  st = ShapeTracker.from_shape((2 + 64,)).shrink(((2, 66),))
  spec = get_program(sink(store(0, (64,), load(1, f32, st) + const(f32, 1.0))), PTXRenderer(), [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.LOCAL, 0, 16)])
  assert "ld.global.v2.f32" in spec.src and "ld.global.v4" not in spec.src and "st.global.v4.f32" in spec.src
  spec = get_program(sink(store(0, (64,), load(1, f16, (64,)) * const(f16, 2.0))), PTXRenderer(), [Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.LOCAL, 0, 8)])
  assert spec.src.count("ld.global.v4.b32") == 1 and "st.global.v4.b32" in spec.src   # 8 halves: one 128-bit access each way

# ---------------------------------------------------------------- the heuristic on awkward shapes
@pytest.mark.parametrize("m,n,k", [(17, 33, 65), (127, 129, 31), (64, 64, 64)])
def test_heuristic_matmul_edges(m, n, k):
  rng = np.random.default_rng(m)
  a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
  (out,), kr = run(_matmul_ast(m, n, k), None, [(m * n, f32)], [a, b])
  np.testing.assert_allclose(out.reshape(m, n), a @ b, rtol=1e-4, atol=1e-4)
  assert any(o.op is OptOps.LOCAL for o in kr.spec.opts)

@pytest.mark.parametrize("shape,axis,op", [((8, 1000), 1, Ops.ADD), ((3000, 16), 0, Ops.MAX), ((1, 100), 1, Ops.ADD), ((257, 33), 1, Ops.MAX)])
def test_heuristic_reductions(shape, axis, op):
  x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
  nout = shape[1 - axis]
  (out,), _ = run(_sum_ast(*shape, op=op, axis=axis, scale=1.0), None, [(nout, f32)], [x])
  np.testing.assert_allclose(out, x.sum(axis) if op is Ops.ADD else x.max(axis), rtol=1e-5, atol=1e-4)

@pytest.mark.parametrize("shape", [(1009,), (3, 5, 7), (17, 33), (4, 2048)])
def test_heuristic_elementwise(shape):
  x = np.random.default_rng(5).standard_normal(int(np.prod(shape))).astype(np.float32)
  (out,), _ = run(sink(store(0, shape, load(1, f32, shape) * const(f32, 3.0))), None, [(x.size, f32)], [x])
  np.testing.assert_array_equal(out, x * np.float32(3.0))

# ---------------------------------------------------------------- grid-wide reductions
def test_split_plan_shapes():
  ren = PTXRenderer(compute_units=132)
  plan = split_reduce(_sum_ast(1, 1 << 20, axis=1), ren)
  assert plan is not None and len(plan.kernels) == 2 and plan.temps == [(512, f32)]
  (a1, ids1), (a2, ids2) = plan.kernels
  assert ids1 == (2, 1) and ids2 == (0, 2)   # stage 1 writes the temp from the input; stage 2 reads it into the output
  assert split_reduce(_sum_ast(1, 1 << 20, axis=1), PTXRenderer()) is None          # no compute units declared
  assert split_reduce(_sum_ast(4096, 4096, axis=1), ren) is None                       # outputs fill the device
  assert split_reduce(_sum_ast(2, 1000, axis=1), ren) is None                          # short: one workgroup each
  v = load(1, f32, (2, 1 << 16))
  soft = sink(store(0, (2, 1), reduce((v - reduce(v, Ops.MAX, (1,))).alu(Ops.EXP2), Ops.ADD, (1,))))
  plan = split_reduce(soft, ren)
  assert plan is not None and len(plan.kernels) == 4 and len(plan.temps) == 3

def test_grid_reduction_of_an_awkward_length_through_tensor():
  from baregrad.tensor import Tensor
  x = np.random.default_rng(6).standard_normal((1 << 20) + 3).astype(np.float32)
  t = Tensor(x, device="NV")
  assert len(t.sum().schedule()) == 2
  np.testing.assert_allclose(t.sum().numpy(), x.astype(np.float64).sum(), rtol=1e-4)
  assert t.max().numpy() == x.max()

def test_softmax_and_norm_of_long_rows_spread_over_the_device():
  from baregrad.tensor import Tensor
  x = np.random.default_rng(8).standard_normal((2, (1 << 15) + 5)).astype(np.float32)
  t = Tensor(x, device="NV")
  sm = t.softmax(-1)
  assert len(sm.schedule()) >= 5    # max and sum each in two stages, then the division
  e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
  np.testing.assert_allclose(sm.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-4, atol=1e-9)
  mu = t.mean(-1, keepdim=True)
  ln = (t - mu) / ((t - mu) * (t - mu)).mean(-1, keepdim=True).add(1e-5).sqrt()
  x64 = x.astype(np.float64)
  ref = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
  np.testing.assert_allclose(ln.numpy(), ref, rtol=1e-4, atol=1e-4)

# ---------------------------------------------------------------- every new form assembles
def kernel_set() -> list[tuple[str, object]]:
  ren = PTXRenderer()
  out = [get_program(_sum_ast(4, 1000, op), ren, [Opt(OptOps.UNROLL, 1, 4), Opt(OptOps.GROUP, 1, 25), Opt(OptOps.PARALLEL, 0)]) for op in (Ops.ADD, Ops.MAX)]
  out.append(get_program(_sum_ast(4, 1000), ren, [Opt(OptOps.GROUP, 1, 10), Opt(OptOps.GROUP, 1, 4), Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.LOCAL, 0, 2)]))
  out.append(get_program(sink(store(0, (64,), load(1, f16, (64,)) * const(f16, 2.0))), ren, [Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.LOCAL, 0, 8)]))
  out.append(get_program(_matmul_ast(17, 33, 65), ren))
  bsum = sink(store(0, (4, 1), reduce(load(1, dtypes.bool, (4, 256)).cast(dtypes.int32), Ops.ADD, (1,)).ne(0)))
  out.append(get_program(bsum, ren, [Opt(OptOps.GROUP, 1, 64), Opt(OptOps.PARALLEL, 0)]))
  return [(s.name, s.src) for s in out]

@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not found")
@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_90"])
def test_new_forms_assemble(arch):
  from baregrad.drivers.nv_compile import PTXCompiler
  for name, src in kernel_set(): PTXCompiler(arch).compile(src)

def test_cuda_renderer_shared_memory_text():
  spec = get_program(_sum_ast(4, 1000), CUDARenderer(), [Opt(OptOps.GROUP, 1, 8), Opt(OptOps.PARALLEL, 0)])
  assert "__shared__ __align__(16) float smem0[8];" in spec.src and "__syncthreads();" in spec.src

# ---------------------------------------------------------------- BEAM on the GPU
def test_beam_on_the_mock_gpu(tmp_path, monkeypatch):
  from baregrad.engine.search import beam_search, candidate_actions, _kernel
  monkeypatch.setenv("BAREGRAD_CACHE", str(tmp_path))
  ast = _sum_ast(8, 256)
  acts = candidate_actions(_kernel(ast, "NV"))
  assert {a.op for a in acts} >= {OptOps.LOCAL, OptOps.GROUP, OptOps.SPLIT, OptOps.UPCAST, OptOps.UNROLL, OptOps.PARALLEL}
  mm = candidate_actions(_kernel(_matmul_ast(16, 16, 16, f16), "NV"))
  assert {a.op for a in mm} >= {OptOps.TC}
  assert {a.amt for a in mm if a.op is OptOps.SMEM} == {0, 3, 4}   # staging, and the cp.async pipeline's depth
  calls = []
  from baregrad.engine import search
  real = search._time
  monkeypatch.setattr(search, "_time", lambda *a, **kw: calls.append(a[2]) or real(*a, **kw))
  monkeypatch.setattr(search, "candidate_actions", lambda k: [a for a in acts if a.op in (OptOps.GROUP, OptOps.LOCAL)][:6] if not k.applied else [])
  opts = beam_search(ast, "NV", width=2, rounds=1)
  assert [] in calls and any(c and c[0].op is OptOps.GROUP for c in calls)   # no opts, the heuristic's, and GROUP candidates timed
  x = np.random.default_rng(7).standard_normal((8, 256)).astype(np.float32)
  (out,), _ = run(ast, opts, [(8, f32)], [x])
  np.testing.assert_allclose(out, (x * 2).sum(1), rtol=1e-5)
  assert beam_search(ast, "NV", width=2, rounds=1) == opts   # cached on disk
