"""CPU convolutions as implicit GEMMs (tensor/ops/conv.py): values and gradients against PyTorch and against the
general window reduction, the exact handling of inf and NaN, and the kernels' shape (the register tile the CPU
heuristic gives a matmul: rows of output channels times lanes along the flattened padded width)."""
import numpy as np
import pytest
from baregrad import Tensor, dtypes, knobs
from baregrad.ir.ops import Ops
import baregrad.tensor.functional as F

rng = np.random.default_rng(7)

@pytest.fixture
def conv_mode(monkeypatch):
  def set_mode(mode: str) -> None:
    monkeypatch.setenv("CPU_CONV", mode); knobs.reset()
  yield set_mode
  monkeypatch.delenv("CPU_CONV", raising=False); knobs.reset()

# (x shape, w shape, stride, padding, groups): 3x3 and 1x1, strided, rectangular and asymmetric, grouped, batched
CASES = [((2, 8, 9, 11), (6, 8, 3, 3), 1, 1, 1), ((1, 8, 9, 11), (6, 4, 3, 3), 2, 1, 2), ((2, 6, 7, 8), (5, 6, 1, 1), 1, 0, 1),
         ((2, 6, 7, 8), (5, 6, 1, 1), 2, 0, 1), ((1, 3, 13, 12), (4, 3, 5, 3), (3, 2), (2, 1), 1), ((1, 3, 6, 6), (2, 3, 2, 4), (2, 3), 0, 1),
         ((1, 2, 5, 5), (3, 2, 5, 5), 2, 2, 1), ((1, 3, 20, 20), (8, 3, 7, 7), 2, 3, 1), ((3, 4, 5, 6), (4, 4, 3, 3), 1, ((1, 0), (2, 1)), 1),
         ((1, 24, 9, 11), (6, 24, 3, 3), 2, 1, 1)]   # (the last: stride phases; few input channels gather columns)

def _pad_arg(p):
  return p if not (isinstance(p, tuple) and isinstance(p[0], tuple)) else None

def _conv(F_, x, w, b, stride, padding, groups):
  """F_.conv2d (F_: torch.nn.functional or baregrad's F) with the case's padding."""
  if _pad_arg(padding) is None:   # asymmetric: padded by hand on both sides
    (t, b_), (l, r) = padding
    return F_.conv2d(F_.pad(x, (l, r, t, b_)), w, b, stride=stride, groups=groups)
  return F_.conv2d(x, w, b, stride=stride, padding=padding, groups=groups)

@pytest.mark.parametrize("xs,ws,stride,padding,groups", CASES)
def test_values_match_pytorch(xs, ws, stride, padding, groups):
  # (tensors without gradients: the implicit GEMM is the inference path)
  torch = pytest.importorskip("torch")
  xn, wn, bn = rng.standard_normal(xs, dtype=np.float32), rng.standard_normal(ws, dtype=np.float32), rng.standard_normal(ws[0], dtype=np.float32)
  ref = _conv(torch.nn.functional, *(torch.tensor(a) for a in (xn, wn, bn)), stride, padding, groups)
  out = _conv(F, *(Tensor(a) for a in (xn, wn, bn)), stride, padding, groups)
  np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("xs,ws,stride,padding,groups", CASES[:4])
def test_training_keeps_the_general_path_and_its_gradients(xs, ws, stride, padding, groups):
  # the GEMM's gradient through the flat window is 5x slower than the window reduction's: tensors that need gradients
  # take the general path (one kernel for the convolution and its bias), values and gradients as PyTorch's
  torch = pytest.importorskip("torch")
  xn, wn, bn = rng.standard_normal(xs, dtype=np.float32), rng.standard_normal(ws, dtype=np.float32), rng.standard_normal(ws[0], dtype=np.float32)
  xt, wt, bt = (torch.tensor(a, requires_grad=True) for a in (xn, wn, bn))
  xb, wb, bb = (Tensor(a, requires_grad=True) for a in (xn, wn, bn))
  ref, out = _conv(torch.nn.functional, xt, wt, bt, stride, padding, groups), _conv(F, xb, wb, bb, stride, padding, groups)
  assert len(out.schedule()) == 1
  np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-4, atol=1e-4)
  g = rng.standard_normal(tuple(ref.shape), dtype=np.float32)
  (ref * torch.tensor(g)).sum().backward()
  (out * Tensor(g)).sum().backward()
  for a, b_ in ((xb, xt), (wb, wt), (bb, bt)): np.testing.assert_allclose(a.grad.numpy(), b_.grad.numpy(), rtol=1e-4, atol=1e-4)

def test_agrees_with_the_general_path(conv_mode):
  x, w = rng.standard_normal((2, 16, 14, 14), dtype=np.float32), rng.standard_normal((24, 16, 3, 3), dtype=np.float32)
  outs = {}
  for mode in ("gemm", "generic"):
    conv_mode(mode)
    outs[mode] = [F.conv2d(Tensor(x), Tensor(w), padding=1, stride=s).numpy() for s in (1, 2)]
  for a, b in zip(outs["gemm"], outs["generic"]): np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)

def test_half_accumulates_in_float32():
  torch = pytest.importorskip("torch")
  x, w = rng.standard_normal((1, 32, 10, 10), dtype=np.float32), rng.standard_normal((8, 32, 3, 3), dtype=np.float32)
  out = F.conv2d(Tensor(x).cast(dtypes.float16), Tensor(w).cast(dtypes.float16), padding=1, stride=2)
  ref = torch.nn.functional.conv2d(torch.tensor(x).half().float(), torch.tensor(w).half().float(), padding=1, stride=2).half()
  assert out.dtype == dtypes.float16
  np.testing.assert_allclose(out.numpy().astype(np.float32), ref.numpy().astype(np.float32), rtol=2e-3, atol=2e-3)

def test_inf_and_nan_reach_exactly_the_outputs_that_read_them():
  # strided convolutions run as stride phases with their own taps (no zero taps): an inf read by no window of the
  # original convolution makes no NaN, and one that is read gives what PyTorch gives
  torch = pytest.importorskip("torch")
  x = rng.standard_normal((1, 2, 9, 9), dtype=np.float32)
  x[0, 0, 8, 8] = np.inf       # 3x3 stride 2 without padding reads rows/columns 0..8: read by the last window
  x[0, 1, 3, 4] = np.nan
  w = rng.standard_normal((3, 2, 3, 3), dtype=np.float32)
  for s, p in ((2, 0), (2, 1), (1, 1), (3, 0)):
    ref = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), stride=s, padding=p).numpy()
    out = F.conv2d(Tensor(x), Tensor(w), stride=s, padding=p).numpy()
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(out), np.isinf(ref))
  x2 = np.zeros((1, 1, 8, 8), np.float32); x2[0, 0, 7, :] = np.inf   # row 7: no window of a 3x3 stride-2 conv reads it
  assert np.isfinite(F.conv2d(Tensor(x2), Tensor(np.ones((1, 1, 3, 3), np.float32)), stride=2).numpy()).all()

def _kernels(t: Tensor) -> list:
  from baregrad.codegen.kernel import Kernel
  from baregrad.codegen.heuristic import heuristic_opts
  from baregrad.hal import Device
  ren = Device[t.device].renderer
  out = []
  for it in t.schedule():
    if it.ast.op is not Ops.SINK: continue
    k = Kernel(it.ast, max_parallel=len(ren.global_max) or 1, gpu=ren.has_local, ren=ren)
    heuristic_opts(k, ren)
    out.append(k)
  return out

def test_3x3_kernel_is_a_matmul_tile_over_the_flat_width():
  # ResNet's 3x3 layer at 28x28: the GEMM kernel reduces over (c, kh, kw) with one output axis of 28 * 30 positions
  # (rounded up to whole tiles: 864), vector lanes along it and a row tile of output channels (the weights broadcast)
  x, w = Tensor(rng.standard_normal((1, 128, 28, 28), dtype=np.float32)), Tensor(rng.standard_normal((128, 128, 3, 3), dtype=np.float32))
  ks = [k for k in _kernels(F.conv2d(x, w, padding=1)) if k.reduce_axes]
  assert len(ks) == 1
  k = ks[0]
  loops = [a for a in k.axes if a.kind != "reduce"]
  assert 864 in {k.full_shape[a.orig] for a in loops}, k.full_shape
  assert not any(o.op.name == "PADTO" for o in k.applied), k.applied
  ups = [o for o in k.applied if o.op.name == "UPCAST"]
  assert len(ups) == 2 and {k.full_shape[k.axes[o.axis].orig] if o.axis < len(k.axes) else None for o in ups} >= {128}, k.applied

@pytest.mark.parametrize("cin,size", [(64, 28), (96, 14)])
def test_stride_phases_read_whole_vectors(cin, size):
  # a 5x5 stride-2 layer (its columns would be 6x the input): each phase's positions (14 x 16 at 28x28) are rounded up
  # to whole tiles with zero rows below, so no lane's window wraps around the flat buffer. Padded by the codegen
  # instead, the window view kept a modulo per element and the loads went lane by lane (24-70 GFLOPS instead of 200+)
  from baregrad.codegen.program import get_program
  from baregrad.hal import Device
  xn, wn = rng.standard_normal((1, cin, size, size), dtype=np.float32), rng.standard_normal((cin, cin, 5, 5), dtype=np.float32)
  out = F.conv2d(Tensor(xn), Tensor(wn), stride=2, padding=2)
  ks = [k for k in _kernels(out) if k.reduce_axes]
  assert len(ks) == 4, [k.full_shape for k in ks]   # the four phases
  for k in ks:
    assert not any(o.op.name == "PADTO" for o in k.applied), k.applied
    prg = get_program(k.ast, Device[out.device].renderer, opts=list(k.applied))
    assert not any(u.op is Ops.MOD for u in prg.uops), k.full_shape
  torch = pytest.importorskip("torch")
  ref = torch.nn.functional.conv2d(torch.tensor(xn), torch.tensor(wn), stride=2, padding=2).numpy()
  np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("cin,size", [(128, 28), (256, 14)])
def test_3x3_stride_2_is_one_gemm_over_columns(cin, size):
  # ResNet's stride-2 3x3 layers: the windows gathered into columns (2.25x the input) feed one GEMM, instead of four
  # phases' GEMMs, their padded copies and a sum (0.72-0.86 ms against 1.1-1.3 at these sizes, 2 cores)
  from baregrad.codegen.program import get_program
  from baregrad.hal import Device
  xn, wn = rng.standard_normal((1, cin, size, size), dtype=np.float32), rng.standard_normal((2 * cin, cin, 3, 3), dtype=np.float32)
  out = F.conv2d(Tensor(xn), Tensor(wn), stride=2, padding=1)
  ks = [k for k in _kernels(out) if k.reduce_axes]
  assert len(ks) == 1 and cin * 9 in ks[0].full_shape, [k.full_shape for k in ks]
  prg = get_program(ks[0].ast, Device[out.device].renderer, opts=list(ks[0].applied))
  assert not any(u.op in (Ops.MOD, Ops.IDIV) for u in prg.uops), ks[0].full_shape
  torch = pytest.importorskip("torch")
  ref = torch.nn.functional.conv2d(torch.tensor(xn), torch.tensor(wn), stride=2, padding=1).numpy()
  np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4)

def test_1x1_kernel_merges_rows_and_columns():
  x, w = Tensor(rng.standard_normal((1, 64, 14, 14), dtype=np.float32)), Tensor(rng.standard_normal((32, 64, 1, 1), dtype=np.float32))
  ks = [k for k in _kernels(F.conv2d(x.relu(), w)) if k.reduce_axes]
  assert len(ks) == 1 and 196 in ks[0].full_shape, ks[0].full_shape

@pytest.mark.parametrize("width", [28, 112])
def test_depthwise_row_is_not_padded_to_masked_lanes(width):
  # MobileNetV2's 3x3 depthwise layers at 28x28 and 112x112: a window reduction with no rows of a tile to share a padded
  # register's masked loads: a 28-wide row is taken whole and a 112-wide one in 4 x 28 lanes (no PADTO; 16 lanes padded
  # to 32 ran 4-5x slower, 112 padded to 4 x 32 10x), and the values hold
  xn, wn = rng.standard_normal((1, 24, width, width), dtype=np.float32), rng.standard_normal((24, 1, 3, 3), dtype=np.float32)
  out = F.conv2d(Tensor(xn), Tensor(wn), padding=1, groups=24)
  ks = [k for k in _kernels(out) if k.reduce_axes]
  assert len(ks) == 1 and not any(o.op.name == "PADTO" for o in ks[0].applied), ks[0].applied
  assert 28 in [a.size for a in ks[0].axes if a.kind == "upcast"], ks[0].axes
  torch = pytest.importorskip("torch")
  ref = torch.nn.functional.conv2d(torch.tensor(xn), torch.tensor(wn), padding=1, groups=24).numpy()
  np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-5)

_THREADS_PROG = """
import sys, numpy as np
from baregrad import Tensor
import baregrad.tensor.functional as F
r = np.random.default_rng(3)
x = Tensor(r.standard_normal((2, 16, 30, 30), dtype=np.float32))
w1, w2 = Tensor(r.standard_normal((32, 16, 3, 3), dtype=np.float32)), Tensor(r.standard_normal((32, 32, 3, 3), dtype=np.float32))
w3, fc = Tensor(r.standard_normal((64, 32, 1, 1), dtype=np.float32)), Tensor(r.standard_normal((64, 10), dtype=np.float32))
y = F.conv2d(F.conv2d(x, w1, padding=1).relu(), w2, stride=2, padding=1).relu()
y = F.conv2d(y, w3).relu()
out = F.layer_norm(y.mean((2, 3)) @ fc, (10,))
sys.stdout.buffer.write(out.numpy().tobytes())
"""

def test_results_are_the_same_for_any_thread_count():
  # (threads split output axes, never a reduction: the order of the additions does not depend on their number)
  import os, subprocess, sys
  from tests.paths import REPO
  outs = []
  for n in ("1", "2", "3"):
    env = {**os.environ, "CPU_THREADS": n, "PYTHONPATH": str(REPO)}
    env.pop("DEV", None)
    outs.append(subprocess.run([sys.executable, "-c", _THREADS_PROG], capture_output=True, env=env, timeout=300, check=True).stdout)
  assert len(outs[0]) == 2 * 10 * 4 and outs[0] == outs[1] == outs[2]

def test_strided_max_pool_reads_whole_vectors():
  # ResNet's 3x3 stride-2 max pool: the padded input in a buffer of its own, then lanes along the output row with the
  # window's taps unrolled: together they read one contiguous block (no scalar loads, no masks); 520 -> 121 us
  from baregrad.codegen.program import get_program
  from baregrad.hal import Device
  xn = rng.standard_normal((1, 16, 28, 28), dtype=np.float32)
  out = F.max_pool2d(Tensor(xn), 3, 2, 1)
  (k,) = [k for k in _kernels(out) if k.reduce_axes]
  assert any(o.op.name == "UPCAST" for o in k.applied) and any(o.op.name == "UNROLL" and o.amt == 3 for o in k.applied), k.applied
  prg = get_program(k.ast, Device[out.device].renderer, opts=list(k.applied))
  loads = [u for u in prg.uops if u.op is Ops.LOAD]
  assert loads and all(u.dtype.count > 1 for u in loads), [u.dtype for u in loads]
  assert not any(len(u.src[0].src) > 2 for u in loads), "masked loads"
  torch = pytest.importorskip("torch")
  np.testing.assert_array_equal(out.numpy(), torch.nn.functional.max_pool2d(torch.tensor(xn), 3, 2, 1).numpy())
