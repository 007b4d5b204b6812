"""Packed matmul operands on CPUs (codegen/pack.py): which kernels are packed, the two kernels of the plan, the panel
axis over the cores, and results equal to NumPy's through the Tensor API (awkward widths, batches, broadcast rows,
offset views, fused elementwise work, gradients) on both CPU renderers."""
from __future__ import annotations
import numpy as np
import pytest
from baregrad import Tensor, jit
from baregrad.hal import Device
from baregrad.helpers import Context
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import Ops
from baregrad.ir.view import ShapeTracker
from baregrad.codegen.astbuild import load, store, reduce, sink
from baregrad.codegen.kernel import Kernel
from baregrad.codegen.cpu_heuristic import cpu_opts
from baregrad.codegen.pack import pack_operand, panel_width, PANEL
from baregrad.codegen.renderer.ptx import PTXRenderer
from tests.helpers import DEVICES

f32 = dtypes.float32

def matmul(M: int, K: int, N: int, transposed_b: bool = False, op: Ops = Ops.ADD):
  sa = ShapeTracker.from_shape((M, K)).reshape((M, 1, K)).expand((M, N, K))
  sb = (ShapeTracker.from_shape((N, K)).reshape((1, N, K)) if transposed_b else
        ShapeTracker.from_shape((K, N)).permute((1, 0)).reshape((1, N, K))).expand((M, N, K))
  return sink(store(0, (M, N, 1), reduce(load(1, f32, sa) * load(2, f32, sb), op, (2,))))

def test_plan_of_a_big_matmul():
  plan = pack_operand(matmul(256, 512, 1000), Device["CPU"].renderer)
  pw = panel_width(Device["CPU"].renderer)
  assert plan is not None and len(plan.kernels) == 2
  # P: ceil(1000 / pw) panels of 512 x pw, zero past column 1000
  nb = -(-1000 // pw)
  assert plan.temps == [(nb * 512 * pw, f32)]
  (pack, ids1), (mm, ids2) = plan.kernels
  assert ids1 == (3, 2) and ids2 == (0, 1, 3)   # the pack reads B and writes P; the matmul reads A and P
  assert [u.arg.shape for u in pack.toposort() if u.op is Ops.VIEW][-1] == (512, nb, pw)
  assert [u.arg for u in mm.toposort() if u.op is Ops.REDUCE_AXIS] == [(Ops.ADD, (3,))]

@pytest.mark.parametrize("ast,why", [
  (matmul(256, 256, 256), "B of 256 KiB stays in the L2 unpacked"),
  (matmul(48, 256, 1024), "48 rows read B too few times"),
  (matmul(48, 3072, 768), "48 rows read even a B past the L2 too few times"),
  (matmul(256, 8192, 8200), "a copy of a 256 MiB B is not made"),
  (matmul(8, 1024, 1024, transposed_b=True), "8 rows of x @ W.T read W too few times"),
  (matmul(256, 1024, 1024, op=Ops.MAX), "not a sum of products"),
  (sink(store(0, (1024, 1024), load(1, f32, (1024, 1024)) * 2)), "no reduction"),
], ids=lambda x: x if isinstance(x, str) else "")
def test_kernels_that_stay_whole(ast, why):
  assert pack_operand(ast, Device["CPU"].renderer) is None, why

@pytest.mark.parametrize("shape", [(128, 768, 768), (197, 192, 768)], ids=str)
def test_transformer_weights_are_packed(shape):
  # BERT-base's and ViT-tiny's projections at 128-197 rows: their weight panels are made once per model under the
  # jit (JIT_HOIST), so 64 rows pay (ViT-tiny 16.8 -> 15.7 ms, BERT-base 96.5 -> 88.4 ms per call, 2 cores)
  assert pack_operand(matmul(*shape), Device["CPU"].renderer) is not None

def test_a_transposed_b_is_packed():
  # x @ W.T (a Linear layer's weight, contiguous along the reduction): no operand is contiguous along an output axis,
  # so unpacked it is the dot form; packed, P holds W.T's panels and the matmul is the outer-product tile
  plan = pack_operand(matmul(64, 1024, 1024, transposed_b=True), Device["CPU"].renderer)
  assert plan is not None and len(plan.kernels) == 2
  x, w = np.random.default_rng(0).random((64, 300), dtype=np.float32), np.random.default_rng(1).random((700, 300), dtype=np.float32)
  np.testing.assert_allclose((Tensor(x) @ Tensor(w).T).numpy(), x @ w.T, rtol=1e-4)

def test_a_b_past_the_l2_packs_for_fewer_rows():
  # BERT-base's MLP at sequence 128: 9 MiB of B, 128 rows
  assert pack_operand(matmul(128, 3072, 768), Device["CPU"].renderer) is not None
  assert pack_operand(matmul(128, 768, 3072), Device["CPU"].renderer) is not None

def test_only_cpus_pack():
  assert pack_operand(matmul(256, 1024, 1024), PTXRenderer()) is None   # GPUs: workgroups, shared memory
  with Context(PACK=0): assert pack_operand(matmul(256, 1024, 1024), Device["CPU"].renderer) is None

def test_panels_run_over_the_cores():
  # one 16-column panel of P per core at a time (it stays in that core's L2 while the rows of A stream past); the
  # register tile stays 6 rows x 16 lanes
  ren = Device["CPU:LLVM"].renderer
  plan = pack_operand(matmul(384, 1024, 1024), ren)
  k = Kernel(plan.kernels[1][0], max_parallel=1, ren=ren)
  cpu_opts(k, ren)
  assert [a.orig for a in k.axes if a.kind == "global"] == [1], k.axes   # (i, jb, c, k): jb
  assert [(a.orig, a.size) for a in k.axes if a.kind == "upcast"] == [(0, 6 if ren.vector_registers <= 16 else 8), (2, panel_width(ren))], k.axes

def test_panel_is_two_vector_registers():
  class Ren:
    def __init__(self, lanes: int): self.simd_lanes = lanes
  assert [panel_width(Ren(n)) for n in (4, 8, 16)] == [PANEL, 16, 32]   # NEON, AVX2, AVX-512 (floats per register)

def _kernels(t: Tensor) -> int: return sum(it.kind == "kernel" for it in t.schedule())

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("M,K,N", [(256, 256, 528), (260, 300, 1000), (300, 131, 1031)], ids=str)
def test_packed_matmul_equals_numpy(device, M, K, N):
  rng = np.random.default_rng(M + K + N)
  a, b = rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal((K, N), dtype=np.float32)
  out = Tensor(a, device=device) @ Tensor(b, device=device)
  assert _kernels(out) == 2
  np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("device", DEVICES)
def test_batched_and_broadcast_operands(device):
  rng = np.random.default_rng(1)
  a, b = rng.standard_normal((3, 256, 200), dtype=np.float32), rng.standard_normal((3, 200, 700), dtype=np.float32)
  out = Tensor(a, device=device) @ Tensor(b, device=device)   # P has a batch axis
  assert _kernels(out) == 2
  np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-4)
  out = Tensor(a, device=device) @ Tensor(b[0], device=device)   # one B for every batch: no batch axis in P
  assert _kernels(out) == 2
  np.testing.assert_allclose(out.numpy(), a @ b[0], rtol=1e-4, atol=1e-4)

def test_an_offset_view_and_fused_work():
  # B a window of a bigger buffer (an offset, rows longer than N), scaled in the kernel; bias and relu after
  rng = np.random.default_rng(2)
  a, big = rng.standard_normal((256, 300), dtype=np.float32), rng.standard_normal((310, 1100), dtype=np.float32)
  bias = rng.standard_normal(1000, dtype=np.float32)
  tb = Tensor(big)[5:305, 7:1007]
  out = (Tensor(a) @ (tb * 2) + Tensor(bias)).relu()
  assert _kernels(out) == 2
  np.testing.assert_allclose(out.numpy(), np.maximum(a @ (big[5:305, 7:1007] * 2) + bias, 0), rtol=1e-4, atol=1e-4)

def test_gradients_through_a_packed_matmul():
  rng = np.random.default_rng(3)
  a, b = rng.standard_normal((256, 256), dtype=np.float32), rng.standard_normal((256, 520), dtype=np.float32)
  g = rng.standard_normal((256, 520), dtype=np.float32)
  ta, tb = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
  ((ta @ tb) * Tensor(g)).sum().backward()
  np.testing.assert_allclose(ta.grad.numpy(), g @ b.T, rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(tb.grad.numpy(), a.T @ g, rtol=1e-4, atol=1e-3)

def test_jit_replays_the_packed_kernels():
  rng = np.random.default_rng(4)
  @jit
  def f(x: Tensor, y: Tensor) -> Tensor: return (x @ y).realize()
  for i in range(4):
    a, b = rng.standard_normal((256, 256), dtype=np.float32), rng.standard_normal((256, 520), dtype=np.float32)
    np.testing.assert_allclose(f(Tensor(a), Tensor(b)).numpy(), a @ b, rtol=1e-4, atol=1e-4)
