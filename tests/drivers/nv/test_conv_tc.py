"""Convolutions on the NV mock as channels-last implicit GEMMs on tensor cores (tensor/ops/conv_gemm.py, issue 34):
results against PyTorch's CPU convolution at small shapes (the mock interprets PTX), which kernels the heuristic gives
them (mma.sync tiles), the fallbacks (groups, depthwise, dilation, training), and a static check of the real-size
kernel (32x64x56x56 3x3 half) assembled by ptxas: tensor cores in the main loop, no spills, registers bounded."""
from __future__ import annotations
import re
from collections import Counter
import numpy as np
import pytest
import torch
from baregrad.hal import Device
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import Ops
from baregrad.codegen.kernel import Kernel, OptOps
from baregrad.codegen.heuristic import heuristic_opts
from baregrad.codegen.program import get_program
from baregrad.drivers.nv_compile import find_ptxas
from baregrad.tensor import Tensor
from baregrad.tensor.ops import conv_gemm
import baregrad.tensor.nn.functional as F
from tests.helpers import mock_nv_device

@pytest.fixture(scope="module", autouse=True)
def nv():
  with mock_nv_device() as dev: yield dev

def _gemm_item(out: Tensor):
  """The schedule's reduction kernel (the GEMM) of out."""
  return next(it for it in out.schedule() if it.kind == "kernel" and any(u.op is Ops.REDUCE_AXIS for u in it.ast.toposort()))

def _opts(ast) -> list:
  ren = Device["NV"].renderer
  return heuristic_opts(Kernel(ast, max_parallel=len(ren.global_max), gpu=True, ren=ren), ren)

def _rnd(*shape, dt=np.float16, seed=0):
  # small integers over 4: exact in half, so products and float32 sums are exact and the tensor cores' order of
  # additions cannot change the result
  return (np.random.default_rng(seed + len(shape)).integers(-4, 5, size=shape) / 4).astype(dt)

CASES = [  # (N, C, H, W), (Cout, KH, KW), stride, padding
  ((2, 16, 8, 16), (32, 3, 3), 1, 1),
  ((1, 16, 9, 17), (16, 3, 3), 2, 1),        # strided, odd sizes: the tiles padded
  ((2, 32, 4, 16), (32, 1, 1), 1, 0),        # 1x1: the plain GEMM
  ((1, 16, 7, 8), (16, 2, 2), 1, "same"),    # uneven padding (0 before, 1 after)
]

@pytest.mark.parametrize("xs,ws,stride,padding", CASES, ids=["3x3", "3x3s2", "1x1", "2x2same"])
@pytest.mark.parametrize("dt", [np.float16, np.float32], ids=["half", "float"])
def test_forward_matches_torch(xs, ws, stride, padding, dt):
  x, w, b = _rnd(*xs, dt=dt), _rnd(ws[0], xs[1], *ws[1:], dt=dt, seed=1), _rnd(ws[0], dt=dt, seed=2)
  tx, tw, tb = (Tensor(a, device="NV") for a in (x, w, b))
  assert conv_gemm.takes(tx, tw, 2, (1, 1), 1)
  out = F.conv2d(tx, tw, tb, stride=stride, padding=padding)
  ref = torch.nn.functional.conv2d(*(torch.tensor(a, dtype=torch.float64) for a in (x, w, b)), stride=stride, padding=padding)
  assert out.shape == tuple(ref.shape) and out.dtype == Tensor(x).dtype
  np.testing.assert_allclose(out.numpy().astype(np.float64), ref.numpy(), rtol=1e-3 if dt == np.float16 else 1e-6, atol=1e-3)

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16])
def test_the_gemm_is_a_tensor_core_kernel_with_one_reduction(dt):
  x, w = Tensor.empty(2, 64, 16, 16, dtype=dt, device="NV"), Tensor.empty(64, 64, 3, 3, dtype=dt, device="NV")
  item = _gemm_item(F.conv2d(x, w, padding=1))
  (red,) = [u for u in item.ast.toposort() if u.op is Ops.REDUCE_AXIS]
  assert len(red.arg[1]) == 1, f"the reduction over (kh, kw, c) should be one axis: {red.arg}"
  col = [u.src[1].arg for u in item.ast.toposort() if u.op is Ops.LOAD and len(u.src[1].arg.views) > 1]
  # the im2col operand: the windows as one View (no masks: the copy padded them) under the reshape into one axis
  assert len(col) == 1 and len(col[0].views) == 2 and all(v.mask is None for v in col[0].views), col
  assert any(o.op is OptOps.TC for o in _opts(item.ast)), _opts(item.ast)

def test_1x1_is_one_gemm_over_the_input_as_it_is():
  x, w = Tensor.empty(2, 64, 8, 16, dtype=dtypes.float16, device="NV"), Tensor.empty(32, 64, 1, 1, dtype=dtypes.float16, device="NV")
  (item,) = F.conv2d(x, w).schedule()   # no channels-last copy, no weight copy
  assert any(o.op is OptOps.TC for o in _opts(item.ast)), _opts(item.ast)

def test_tensor_cores_run_on_the_mock():
  # a shape the heuristic gives mma.sync tiles, run on the mock's PTX interpreter
  x, w = _rnd(1, 32, 4, 32), _rnd(32, 32, 3, 3, seed=1)
  tx, tw = Tensor(x, device="NV"), Tensor(w, device="NV")
  out = F.conv2d(tx, tw, padding=1)
  assert any(o.op is OptOps.TC for o in _opts(_gemm_item(out).ast))
  ref = torch.nn.functional.conv2d(torch.tensor(x, dtype=torch.float64), torch.tensor(w, dtype=torch.float64), padding=1).numpy()
  np.testing.assert_allclose(out.numpy().astype(np.float64), ref, rtol=1e-3, atol=1e-3)

@pytest.mark.parametrize("groups,dilation", [(2, 1), (16, 1), (1, 2)], ids=["grouped", "depthwise", "dilated"])
def test_other_convolutions_fall_back_correctly(groups, dilation):
  x, w = _rnd(1, 16, 7, 9), _rnd(16, 16 // groups, 3, 3, seed=1)
  tx, tw = Tensor(x, device="NV"), Tensor(w, device="NV")
  assert not conv_gemm.takes(tx, tw, 2, (dilation, dilation), groups)
  out = F.conv2d(tx, tw, padding=1, groups=groups, dilation=dilation)
  ref = torch.nn.functional.conv2d(torch.tensor(x, dtype=torch.float64), torch.tensor(w, dtype=torch.float64), padding=1, groups=groups,
                                   dilation=dilation).numpy()
  np.testing.assert_allclose(out.numpy().astype(np.float64), ref, rtol=1e-3, atol=1e-3)

@pytest.mark.parametrize("xs,ws,stride,padding", CASES, ids=["3x3", "3x3s2", "1x1", "2x2same"])
@pytest.mark.parametrize("dt", [np.float16, np.float32], ids=["half", "float"])
def test_training_gradients_match_torch(xs, ws, stride, padding, dt):
  # training: the output positions one axis (conv_gemm.conv2d_positions), the data and weight gradients GEMMs
  x, w, g = _rnd(*xs, dt=dt), _rnd(ws[0], xs[1], *ws[1:], dt=dt, seed=1), None
  tx, tw = Tensor(x, device="NV", requires_grad=True), Tensor(w, device="NV", requires_grad=True)
  out = F.conv2d(tx, tw, stride=stride, padding=padding)
  g = _rnd(*out.shape, dt=dt, seed=2)
  (out * Tensor(g, device="NV")).sum().backward()
  rx, rw = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, w))
  ref = torch.nn.functional.conv2d(rx, rw, stride=stride, padding=padding)
  (ref * torch.tensor(g, dtype=torch.float64)).sum().backward()
  tol = dict(rtol=1e-3, atol=1e-3) if dt == np.float16 else dict(rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(out.numpy().astype(np.float64), ref.detach().numpy(), **tol)
  np.testing.assert_allclose(tx.grad.numpy().astype(np.float64), rx.grad.numpy(), **tol)
  np.testing.assert_allclose(tw.grad.numpy().astype(np.float64), rw.grad.numpy(), **tol)

def _grad_gemms(x: Tensor, w: Tensor, **kw) -> list:
  """The reduction kernels of conv2d(x, w) in training: the forward, the data gradient's, the weight gradient's."""
  out = F.conv2d(x, w, **kw)
  items = [it for it in out.schedule() if any(u.op is Ops.REDUCE_AXIS for u in it.ast.toposort())]
  (out * Tensor.empty(*out.shape, dtype=out.dtype, device="NV")).sum().backward()
  for t in (x.grad, w.grad): items += [it for it in t.schedule() if any(u.op is Ops.REDUCE_AXIS for u in it.ast.toposort())]
  return items

def test_training_gemms_are_tensor_core_kernels():
  x = Tensor.empty(2, 64, 16, 16, dtype=dtypes.float16, device="NV", requires_grad=True)
  w = Tensor.empty(64, 64, 3, 3, dtype=dtypes.float16, device="NV", requires_grad=True)
  gemms = [it for it in _grad_gemms(x, w, padding=1) if len([u for u in it.ast.toposort() if u.op is Ops.LOAD]) == 2]
  # forward (Cout x positions), data gradient (positions x taps*channels, over Cout), weight gradient (over positions);
  # the data gradient's window sums (col2im) are a third reduction, of one load
  assert len(gemms) == 3, [it.ast.src[0].src[1].arg.shape for it in gemms]
  for it in gemms: assert any(o.op is OptOps.TC for o in _opts(it.ast)), (it.ast.src[0].src[1].arg.shape, _opts(it.ast))

def test_grouped_training_falls_back_correctly():
  x, w = _rnd(1, 8, 5, 6, dt=np.float32), _rnd(8, 4, 3, 3, dt=np.float32, seed=1)
  tx, tw = Tensor(x, device="NV", requires_grad=True), Tensor(w, device="NV", requires_grad=True)
  F.conv2d(tx, tw, padding=1, groups=2).square().sum().backward()
  rx, rw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
  torch.nn.functional.conv2d(rx, rw, padding=1, groups=2).square().sum().backward()
  np.testing.assert_allclose(tx.grad.numpy(), rx.grad.numpy(), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(tw.grad.numpy(), rw.grad.numpy(), rtol=1e-5, atol=1e-5)

# ---- static check at the real size (no GPU: the PTX the heuristic's opts give, assembled by ptxas)

@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not found")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_resnet_3x3_half_kernel_assembles_to_tensor_cores_without_spills(arch):
  from tools.sass_report import renderer_for, assemble, innermost_loop, disassemble, sass_ops, sass_main_loop
  x, w = Tensor.empty(32, 64, 56, 56, dtype=dtypes.float16, device="NV"), Tensor.empty(64, 64, 3, 3, dtype=dtypes.float16, device="NV")
  ast = _gemm_item(F.conv2d(x, w, padding=1)).ast
  ren = renderer_for(arch)
  opts = heuristic_opts(Kernel(ast, max_parallel=len(ren.global_max), gpu=True, ren=ren), ren)
  src = get_program(ast, ren, opts).src
  loop = innermost_loop(src)
  assert sum(n for op, n in loop.items() if op.startswith("mma.sync")) >= 8, f"{arch}: PTX main loop {loop}"
  assert not any(op.startswith(("div.", "rem.", "ld.local", "st.local")) for op in loop), f"{arch}: PTX main loop {loop}"
  cubin, v = assemble(src, arch)
  regs = int(re.search(r"Used (\d+) registers", v).group(1))
  sp = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", v)
  assert sp is not None and sp.group(1) == sp.group(2) == "0", f"{arch}: spills\n{v}"
  # (the window reduction it replaces: 255 and spills; the 4096^3 half matmul: 168)
  assert regs <= 192, f"{arch}: {regs} registers"
  if (text := disassemble(cubin)) is not None:
    # (ptxas may unroll the 18 k steps of C*9 = 576 whole: then there is no SASS loop, and the counts are the kernel's)
    ops = Counter(op for _, op, _ in sass_ops(text))
    main = sass_main_loop(sass_ops(text)) or ops
    assert main["HMMA"] >= 8 and not ops["LDL"] and not ops["STL"], f"{arch}: SASS {Counter(main).most_common(12)}"
    # both operands copied by cp.async, the im2col operand 16 bytes (8 channels) a copy: no element-wise global loads
    assert ops["LDGSTS"] >= 16 and not ops["LDG"], f"{arch}: SASS {ops.most_common(16)}"

@pytest.mark.parametrize("c", [16, 64])
def test_padded_one_pixel_image_on_the_general_path(c):
  # ResNet-18's last stage on 8x8 CIFAR-sized inputs: 3x3 windows over a 1x1 image padded by 1. Its input is staged in
  # shared memory (SMEM) and reads 0 at every tap but the centre through the padding's mask alone (the taps' stride
  # is 0): the tile left those axes out and every tap read the centre pixel (off by up to 27 at 64 channels)
  x, w = _rnd(4, c, 1, 1, dt=np.float32), _rnd(c, c, 3, 3, dt=np.float32, seed=1)
  out = F.conv2d(Tensor(x, device="NV"), Tensor(w, device="NV", requires_grad=True), padding=1)
  item = _gemm_item(out)
  assert any(o.op is OptOps.SMEM for o in _opts(item.ast)), _opts(item.ast)
  ref = torch.nn.functional.conv2d(torch.tensor(x, dtype=torch.float64), torch.tensor(w, dtype=torch.float64), padding=1).numpy()
  np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-5)

@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not found")
def test_resnet_3x3_half_training_gemms_assemble_to_tensor_cores_without_spills():
  from tools.sass_report import renderer_for, assemble, disassemble, sass_ops, sass_main_loop
  x = Tensor.empty(32, 64, 56, 56, dtype=dtypes.float16, device="NV", requires_grad=True)
  w = Tensor.empty(64, 64, 3, 3, dtype=dtypes.float16, device="NV", requires_grad=True)
  gemms = [it for it in _grad_gemms(x, w, padding=1) if len([u for u in it.ast.toposort() if u.op is Ops.LOAD]) == 2]
  assert len(gemms) == 3
  ren = renderer_for("sm_90")
  for it, name in zip(gemms, ("forward", "data gradient", "weight gradient")):
    opts = heuristic_opts(Kernel(it.ast, max_parallel=len(ren.global_max), gpu=True, ren=ren), ren)
    assert any(o.op is OptOps.TC for o in opts), f"{name}: {opts}"
    cubin, v = assemble(get_program(it.ast, ren, opts).src, "sm_90")
    regs, sp = int(re.search(r"Used (\d+) registers", v).group(1)), re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", v)
    assert sp is not None and sp.group(1) == sp.group(2) == "0" and regs <= 232, f"{name}: {regs} registers, spills\n{v}"
    if (text := disassemble(cubin)) is not None:
      ops = sass_ops(text)
      assert sum(op == "HMMA" for _, op, _ in ops) >= 16, f"{name}: {Counter(op for _, op, _ in ops).most_common(12)}"
      # (the data gradient reduces over Cout = 64 only: its k steps unrolled, no loop)
      if name != "data gradient": assert sass_main_loop(ops)["HMMA"] >= 16 and not sass_main_loop(ops)["LDL"], name
