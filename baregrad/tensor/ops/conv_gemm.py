"""2-d convolutions on GPUs with tensor cores as implicit GEMMs (issue 34): channels-last windows, the reduction over
(kh, kw, c) one axis, so the kernel is the matmul the tensor-core path of codegen/gpu_heuristic.py already plans.

The input, padded, is copied once into a channels-last buffer (N, Hp, Wp, C) (the padding and the layout change are
one elementwise kernel; the user's tensor keeps its layout). Its windows (N, OH, OW, KH, KW, C) are then one View
(strides Hp*Wp*C, sh*Wp*C, sw*C, Wp*C, C, 1: ir/view.py ShapeTracker.merged folds the expand-and-reshape stack that
builds them), and (KH, KW, C) reshaped into one reduction axis R = KH*KW*C leaves a two-View stack whose index is the
im2col addressing: r -> (r // (KW*C), r // C % KW, r % C), constant divisions in the operand loader. The weights,
(Cout, KH, KW, C) contiguous, are the other operand, R-contiguous. The kernel is
  out[n, co, oh, ow] = sum_r col[n, oh, ow, r] * wr[co, r]
one reduction axis, A = wr moving along Cout, B = col along the output positions: the heuristic's tensor-core tiles
(mma.sync, or wgmma on sm_90a) take it, with the operands staged in shared memory by cp.async. A 1x1 convolution of
stride 1 is, for inference, the plain GEMM over the input as it is (no copy). Half and bfloat16 multiply on the tensor cores and accumulate in
float32, one rounding at the end, as PyTorch's convolutions do.

Taken for inference on a renderer that declares tensor cores (tensor_cores) and workgroups: 2-d, one group, no
dilation (any padding and stride: the copy pads, the window view strides). Grouped, depthwise and dilated
convolutions, and convolutions autograd will differentiate, keep the general window reduction (ops/conv.py)."""
from __future__ import annotations
from typing import TYPE_CHECKING
from baregrad.ir.dtype import dtypes, promote
from baregrad.ir.ops import UOp, Ops
from baregrad.tensor.ops.shape import _pool
if TYPE_CHECKING: from baregrad.tensor.tensor import Tensor

def takes(x: Tensor, w: Tensor, nsp: int, d_: tuple[int, ...], groups: int) -> bool:
  """Whether a convolution of x by w (stride any, dilation d_, groups) runs as a channels-last implicit GEMM: 2-d, one
  group, undilated, x and w on one device whose renderer has workgroups and tensor cores."""
  from baregrad.hal import Device
  if nsp != 2 or groups != 1 or d_ != (1, 1) or w.device != x.device or not isinstance(x.device, str): return False
  ren = Device[x.device].renderer
  return bool(getattr(ren, "has_local", False) and getattr(ren, "tensor_cores", ()))

def conv2d(x: Tensor, w: Tensor, s_: tuple[int, ...]) -> Tensor:
  """The convolution of an already padded x (N, C, Hp, Wp) by w (Cout, C, KH, KW) with stride s_: (N, Cout, OH, OW)
  in promote(x.dtype, w.dtype), as one implicit-GEMM kernel over a channels-last copy of x (see the module docstring)."""
  N, C = x.shape[:2]
  Cout, _, KH, KW = w.shape
  if KH == KW == 1 and s_ == (1, 1):
    # 1x1: the plain GEMM over x as it is, out[n, co, p] = sum_c w[co, c] x[n, c, p] (no channels-last copy: B is read
    # along p, the tensor-core path's transposed operand)
    H, W = x.shape[2:]
    return _dot(x.reshape(N, 1, C, H * W).permute(0, 1, 3, 2), w.reshape(1, Cout, 1, C), 3).reshape(N, Cout, H, W)
  xh = x.permute(0, 2, 3, 1).contiguous()                                    # (N, Hp, Wp, C): padding and layout, one copy
  win = _pool(xh.permute(0, 3, 1, 2), (KH, KW), s_, (1, 1))                 # (N, C, OH, OW, KH, KW) over channels-last memory
  OH, OW = win.shape[2:4]
  R = KH * KW * C
  col = win.permute(0, 2, 3, 4, 5, 1).reshape(N, 1, OH, OW, R)
  wr = w.permute(0, 2, 3, 1).contiguous().reshape(1, Cout, 1, 1, R)
  return _dot(col, wr, 4)

def _dot(a: Tensor, b: Tensor, axis: int) -> Tensor:
  """sum over axis of a * b; half and bfloat16 multiplied and summed in float32, rounded once."""
  dt = promote(a.dtype, b.dtype)
  if dt in (dtypes.float16, dtypes.bfloat16): return (a.float() * b.float()).sum(axis).cast(dt)
  return (a * b).sum(axis)

def conv2d_positions(x: Tensor, w: Tensor, s_: tuple[int, ...]) -> Tensor:
  """conv2d with the output positions (n, oh, ow) as one axis P: out[co, p] = sum_r wr[co, r] * col[p, r], returned as
  the (N, Cout, OH, OW) view of that (Cout, P) result. For training: autograd's gradients of this product are again
  products with one reduction axis each (the weights' over P: g[co, p] * col[p, r]; the columns' over Cout: g[co, p] *
  wr[co, r], then summed back over the overlapping windows), the shape the tensor-core tiles take, where the NCHW form
  reduces the weights' gradient over three axes (n, oh, ow)."""
  N, C = x.shape[:2]
  Cout, _, KH, KW = w.shape
  xh = x.permute(0, 2, 3, 1).contiguous()
  win = _pool(xh.permute(0, 3, 1, 2), (KH, KW), s_, (1, 1))
  OH, OW = win.shape[2:4]
  P, R = N * OH * OW, KH * KW * C
  col = win.permute(0, 2, 3, 4, 5, 1).reshape(1, P, R)
  wr = w.permute(0, 2, 3, 1).contiguous().reshape(Cout, 1, R)
  out = _dot(wr, col, 2)
  # its gradient (Cout, P) in a buffer: both gradient GEMMs then read it as a plain load, which the tensor-core path
  # takes (fused in, the gradient's elementwise expression, a norm's or an activation's backward, makes them not a
  # product of two loads: register tiles)
  out = out._new(UOp(Ops.CONTIGUOUS, out.dtype, (out.uop,), "grad"))
  return out.reshape(Cout, N, OH, OW).permute(1, 0, 2, 3)
