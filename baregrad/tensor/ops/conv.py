"""Convolutions, pooling, unpooling, interpolation and unfold/fold (im2col and back), built on the sliding windows of
ops/shape.py: lazy, fused and differentiable without a hand-written backward, no im2col copy."""
from __future__ import annotations
import math, struct
from typing import Any, TYPE_CHECKING
from baregrad.helpers import prod
from baregrad.ir.dtype import dtypes, promote
from baregrad.tensor.recipe import function_recipe
from baregrad.tensor.ops.indexing import IndexingOps, _onehot
from baregrad.tensor.ops.shape import _pad_crop, _pool, _tuple
from baregrad.tensor.ops import conv_gemm
if TYPE_CHECKING: from baregrad.tensor.tensor import Tensor

def _f32(v: float) -> float:
  """v rounded to float32 (index arithmetic the way PyTorch's float kernels do it)."""
  return struct.unpack("f", struct.pack("f", v))[0]

def unfold(input: Tensor, kernel_size: Any, dilation: Any = 1, padding: Any = 0, stride: Any = 1) -> Tensor:
  """torch.nn.functional.unfold (im2col): sliding blocks of a (N, C, H, W) or (C, H, W) input as columns,
  (N, C * kh * kw, L) with L the number of blocks; built from movement ops (no copy until used)."""
  x = input
  if x.ndim not in (3, 4): raise RuntimeError(f"unfold: input must be 3-D (C, H, W) or 4-D (N, C, H, W), got shape {x.shape}")
  unbatched = x.ndim == 3
  if unbatched: x = x.unsqueeze(0)
  k_, d_, p_, s_ = (_tuple(v, 2, nm) for v, nm in ((kernel_size, "kernel_size"), (dilation, "dilation"), (padding, "padding"), (stride, "stride")))
  if any(v <= 0 for v in k_ + d_ + s_) or any(v < 0 for v in p_):
    raise RuntimeError(f"unfold: kernel_size {k_}, dilation {d_} and stride {s_} must be positive and padding {p_} non-negative")
  N, C = x.shape[:2]
  xp = x._pad(((0, 0), (0, 0)) + tuple((p, p) for p in p_))
  win = _pool(xp, k_, s_, d_)                                              # (N, C, oh, ow, kh, kw)
  oh, ow = win.shape[2:4]
  out = win.permute(0, 1, 4, 5, 2, 3).reshape(N, C * k_[0] * k_[1], oh * ow)
  return out.squeeze(0) if unbatched else out

def fold(input: Tensor, output_size: Any, kernel_size: Any, dilation: Any = 1, padding: Any = 0, stride: Any = 1) -> Tensor:
  """torch.nn.functional.fold (col2im), the adjoint of unfold: columns (N, C * kh * kw, L) summed back into a
  (N, C, H, W) image where blocks overlap. Each kernel offset is a strided placement (pad + reshape) of its column."""
  x = input
  if x.ndim not in (2, 3): raise RuntimeError(f"fold: input must be 2-D or 3-D (N, C * kh * kw, L), got shape {x.shape}")
  unbatched = x.ndim == 2
  if unbatched: x = x.unsqueeze(0)
  o_, k_, d_, p_, s_ = (_tuple(v, 2, nm) for v, nm in ((output_size, "output_size"), (kernel_size, "kernel_size"), (dilation, "dilation"),
                                                      (padding, "padding"), (stride, "stride")))
  N, CK, L = x.shape
  K = k_[0] * k_[1]
  if CK % K: raise RuntimeError(f"fold: expected size of input's dimension 1 ({CK}) to be divisible by the product of kernel_size {k_} ({K})")
  H, W = o_[0] + 2 * p_[0], o_[1] + 2 * p_[1]
  bh, bw = (H - d_[0] * (k_[0] - 1) - 1) // s_[0] + 1, (W - d_[1] * (k_[1] - 1) - 1) // s_[1] + 1
  if bh * bw != L: raise RuntimeError(f"fold: expected L={bh * bw} blocks for output_size {o_}, kernel {k_}, dilation {d_}, padding {p_}, stride {s_}; got {L}")
  C = CK // K
  cols = x.reshape(N, C, k_[0], k_[1], bh, bw)
  out = None
  for i in range(k_[0]):
    for j in range(k_[1]):
      c = cols[:, :, i, j]                                                   # (N, C, bh, bw)
      # spread by the stride: (bh, bw) -> (bh * sh, bw * sw), then shift by the kernel offset times the dilation
      c = c.reshape(N, C, bh, 1, bw, 1)._pad(((0, 0), (0, 0), (0, 0), (0, s_[0] - 1), (0, 0), (0, s_[1] - 1))).reshape(N, C, bh * s_[0], bw * s_[1])
      c = _pad_crop(c, [(i * d_[0], H - i * d_[0] - bh * s_[0]), (j * d_[1], W - j * d_[1] - bw * s_[1])])
      out = c if out is None else out + c
  assert out is not None
  out = out._shrink(((0, N), (0, C), (p_[0], p_[0] + o_[0]), (p_[1], p_[1] + o_[1])))
  return out.squeeze(0) if unbatched else out

def _max_unpool(x: Tensor, indices: Tensor, kernel_size: Any, stride: Any, padding: Any, output_size: Any, nsp: int, name: str) -> Tensor:
  from baregrad.tensor.tensor import Tensor
  if not isinstance(indices, Tensor) or dtypes.is_float(indices.dtype) or indices.dtype == dtypes.bool:
    raise TypeError(f"{name}: indices must be an integer tensor, got {indices.dtype if isinstance(indices, Tensor) else type(indices).__name__}")
  if x.ndim not in (nsp + 1, nsp + 2): raise RuntimeError(f"{name}: input must have {nsp + 1} or {nsp + 2} dimensions, got shape {x.shape}")
  if indices.shape != x.shape: raise RuntimeError(f"{name}: indices of shape {indices.shape} must have the input's shape {x.shape}")
  k_ = _tuple(kernel_size, nsp, "kernel_size")
  s_ = k_ if stride is None else _tuple(stride, nsp, "stride")
  p_ = _tuple(padding, nsp, "padding")
  i_ = x.shape[-nsp:]
  if output_size is None: o_ = tuple((i - 1) * s - 2 * p + k for i, k, s, p in zip(i_, k_, s_, p_))
  else:
    o_ = tuple(int(v) for v in output_size)[-nsp:]
    if len(o_) != nsp: raise ValueError(f"{name}: output_size {tuple(output_size)} must name {nsp} spatial sizes")
  lead = x.shape[:-nsp]
  xf, idx = x.reshape(lead + (prod(i_),)), indices.reshape(lead + (prod(i_),))
  base = Tensor.zeros(*lead, prod(o_), dtype=x.dtype, device=x.device)
  out = IndexingOps.scatter(base, -1, idx, xf.detach())
  if xf.requires_grad:
    # PyTorch's gradient is grad_output gathered at the indices, for every input, duplicates included: the adjoint of
    # scatter_add, added here as a term that is exactly 0 in the forward
    xs = xf.isfinite().where(xf, 0.0)
    out = out + (IndexingOps.scatter_add(base, -1, idx, xs) - IndexingOps.scatter_add(base, -1, idx, xs.detach()))
  return out.reshape(lead + o_)

def _conv_padding(padding: Any, k_: tuple[int, ...], d_: tuple[int, ...], s_: tuple[int, ...], name: str) -> list[tuple[int, int]]:
  n = len(k_)
  if isinstance(padding, str):
    if padding == "valid": return [(0, 0)] * n
    if padding == "same":
      if any(s != 1 for s in s_): raise RuntimeError(f"{name}: padding='same' is not supported for strided convolutions (stride={s_})")
      tot = [d * (k - 1) for k, d in zip(k_, d_)]
      return [(t // 2, t - t // 2) for t in tot]
    raise RuntimeError(f"{name}: padding must be 'valid', 'same', an int or a tuple, got {padding!r}")
  p = _tuple(padding, n, "padding")
  if any(v < 0 for v in p): raise RuntimeError(f"{name}: negative padding {p}")
  return [(v, v) for v in p]

@function_recipe("convnd")   # (also the convolution inside a transposed one)
def _convnd(x: Tensor, w: Tensor, bias: Tensor | None, stride: Any, padding: Any, dilation: Any, groups: int, nsp: int, name: str) -> Tensor:
  if w.ndim != nsp + 2: raise RuntimeError(f"{name}: weight must have {nsp + 2} dimensions (out_channels, in_channels/groups, *kernel), got shape {w.shape}")
  unbatched = x.ndim == nsp + 1
  if unbatched: x = x.unsqueeze(0)
  if x.ndim != nsp + 2: raise RuntimeError(f"{name}: input must have {nsp + 1} or {nsp + 2} dimensions, got shape {x.shape}")
  if groups < 1: raise RuntimeError(f"{name}: groups must be positive, got {groups}")
  N, C = x.shape[:2]
  Cout, Cg = w.shape[:2]
  k_ = w.shape[2:]
  if C != Cg * groups:
    raise RuntimeError(f"{name}: input of shape {x.shape} has {C} channels but weight of shape {w.shape} with groups={groups} expects {Cg * groups} (= {Cg} x "
        f"{groups})")
  if Cout % groups: raise RuntimeError(f"{name}: out_channels {Cout} (weight shape {w.shape}) is not divisible by groups={groups}")
  if bias is not None and bias.shape != (Cout,): raise RuntimeError(f"{name}: bias must have shape ({Cout},), got {bias.shape}")
  s_, d_ = _tuple(stride, nsp, "stride"), _tuple(dilation, nsp, "dilation")
  if any(v <= 0 for v in s_ + d_): raise RuntimeError(f"{name}: stride {s_} and dilation {d_} must be positive")
  pads = _conv_padding(padding, k_, d_, s_, name)
  x = x._pad(((0, 0), (0, 0)) + tuple(pads))
  if _implicit_gemm(x, w, nsp, d_, groups) and not _needs_grad(x, w, bias):
    out = _conv2d_cpu(x, w, s_, groups)
    if bias is not None: out = out + bias.reshape((1, Cout, 1, 1))
    return out.squeeze(0) if unbatched else out
  if conv_gemm.takes(x, w, nsp, d_, groups):
    # a GPU with tensor cores: a channels-last implicit GEMM (ops/conv_gemm.py); for training with the output positions
    # one axis, so its gradients are GEMMs with one reduction axis too
    out = conv_gemm.conv2d_positions(x, w, s_) if _needs_grad(x, w, bias) else conv_gemm.conv2d(x, w, s_)
    if bias is not None: out = out + bias.reshape((1, Cout, 1, 1))
    return out.squeeze(0) if unbatched else out
  if _cpu_depthwise(x, w, groups, pads):
    # the padded input in a buffer of its own: the windows are then one strided view without masks (read through
    # the padding's masked view, each tap took a second view's index arithmetic and masked vector loads: MobileNetV2's
    # 3x3 depthwise layers 3-4x slower)
    x = x.contiguous()
  win = _pool(x, k_, s_, d_)                                   # (N, C, *o, *k)
  o_ = win.shape[2:2 + nsp]
  G, Cog = groups, Cout // groups
  # (N, G, 1, *o, Cg, *k): the channel axis moves on the input side, so the reduction's result needs no permute
  win = win.reshape((N, G, 1, Cg) + o_ + k_).permute(0, 1, 2, *range(4, 4 + nsp), 3, *range(4 + nsp, 4 + 2 * nsp))
  wr = w.reshape((1, G, Cog) + (1,) * nsp + (Cg,) + k_)
  red = tuple(range(3 + nsp, 4 + 2 * nsp))
  if promote(win.dtype, wr.dtype) in (dtypes.float16, dtypes.bfloat16):
    # products and sums in float32, one rounding at the end, as PyTorch's half/bfloat16 convolutions accumulate
    out = (win.float() * wr.float()).sum(red).cast(promote(win.dtype, wr.dtype)).reshape((N, Cout) + o_)
  else: out = (win * wr).sum(red).reshape((N, Cout) + o_)
  # elementwise work on the reshaped reduction (bias, an activation after) fuses into the same kernel
  if bias is not None: out = out + bias.reshape((1, Cout) + (1,) * nsp)
  return out.squeeze(0) if unbatched else out

# ---------------------------------------------------------------- CPU: 2-d convolutions as implicit GEMMs
# The general path above reduces over windows (c, kh, kw) of a view whose output axes are (oh, ow): the CPU's register
# tile (codegen/cpu_heuristic) then takes vector lanes along ow, rows short (7, 14, 28 wide) or strided (stride 2) and
# it runs at 10-45 GFLOPS where a matmul runs at 150+. Here each image is padded into its own contiguous buffer
# (one extra zero row) and flattened: output position p = oh * Wp + ow over the padded width Wp reads the input at
# p + kh * Wp + kw, a single contiguous axis of OH * Wp positions for every tap. The kernel is then a matmul whose
# lanes run along p (the Wp - OW columns past each row's end are computed and dropped), the weights broadcast per
# output channel: ResNet-18's 3x3 layers 40 -> 170 GFLOPS on a 2-core AVX-512 host. A strided convolution gathers its
# windows into columns for one GEMM (im2col) where the columns stay small (3x3 at stride 2: 2.25x the input; an RGB
# stem); otherwise it is split into its stride phases (the input's rows and columns of each residue mod the stride,
# with the kernel taps that read them): each phase is a stride-1 convolution of this kind, and their sum is the output
# (no zero taps: 0 * inf in an unread position would make a NaN). 1x1 convolutions are GEMMs over the input
# (subsampled first when strided).
# Half and bfloat16 multiply and add in float32 and round once at the end. For inference only (no input needs a
# gradient, _needs_grad): training keeps the general path. Measured (bench/models.py, 2 cores, batch 1): ResNet-18
# 103 -> 23 ms, ResNet-50 -> 63 ms.

def _cpu_fast_path(x: Tensor, w: Tensor) -> bool:
  """CPU_CONV=gemm and x, w on one CPU renderer: threads over the cores and vector lanes, no workgroups (GPUs and
  OpenCL plan their own tiles)."""
  from baregrad import knobs
  from baregrad.hal import Device
  if knobs.get("CPU_CONV") != "gemm" or w.device != x.device: return False
  ren = Device[x.device].renderer
  return not getattr(ren, "has_local", True) and getattr(ren, "has_threads", False)

def _implicit_gemm(x: Tensor, w: Tensor, nsp: int, d_: tuple[int, ...], groups: int) -> bool:
  """Whether a convolution takes the CPU implicit-GEMM path: 2-d, undilated, not depthwise, on a CPU renderer
  (CPU_CONV=generic: never). A depthwise one (one input channel per group) has no output channels sharing a load: the
  general path's lanes along each row of outputs do better (MobileNetV2's 3x3 at 56x56: 0.17 ms, here 1.2 ms)."""
  return nsp == 2 and d_ == (1, 1) and not (groups > 1 and w.shape[1] == 1) and _cpu_fast_path(x, w)

def _needs_grad(*ts: Tensor | None) -> bool:
  """Whether autograd will differentiate through the convolution. The implicit GEMM is for inference: its gradient,
  derived through the flat sliding window, runs 5x slower than the window reduction's (bench/train_cnn.py: 48x PyTorch
  against 9x), so training keeps the general path until the GEMM has a backward of its own (issue 33)."""
  from baregrad.tensor.grad_mode import is_grad_enabled
  return is_grad_enabled() and any(t is not None and t.requires_grad for t in ts)

def _cpu_depthwise(x: Tensor, w: Tensor, groups: int, pads: list[tuple[int, int]]) -> bool:
  """A padded depthwise convolution (one input channel per group) on a CPU renderer (CPU_CONV=gemm)."""
  return groups > 1 and w.shape[1] == 1 and any(p != (0, 0) for p in pads) and _cpu_fast_path(x, w)

def _gemm_taps(win: Tensor, w: Tensor, groups: int) -> Tensor:
  """sum over (c, kh, kw) of win (N, C, *P, kh, kw) times w (Cout, C/groups, kh, kw): (N, Cout, *P). For half and
  bfloat16 the products and sums are float32 and so is the result (the caller rounds once, after the phases' sum, as
  PyTorch's convolutions accumulate)."""
  N, C = win.shape[:2]
  P, (KH, KW) = win.shape[2:-2], win.shape[-2:]
  Cout, Cg = w.shape[:2]
  G, Cog, n = groups, Cout // groups, len(P)
  win = win.reshape((N, G, 1, Cg) + P + (KH, KW)).permute(0, 1, 2, *range(4, 4 + n), 3, 4 + n, 5 + n)   # (N, G, 1, *P, Cg, kh, kw)
  wr = w.reshape((1, G, Cog) + (1,) * n + (Cg, KH, KW))
  red, dt = (3 + n, 4 + n, 5 + n), promote(win.dtype, wr.dtype)
  if dt in (dtypes.float16, dtypes.bfloat16): return (win.float() * wr.float()).sum(red).reshape((N, Cout) + P)
  return (win * wr).sum(red).reshape((N, Cout) + P)

def _conv2d_flat(x: Tensor, w: Tensor, groups: int, own: bool = False) -> Tensor:
  """Stride-1 convolution of an already padded x (N, C, Hp, Wp) over the flattened padded width: (N, Cout, OH, OW).
  own: the GEMM's result in a buffer of its own (nothing after it fuses into its kernel)."""
  N, C, Hp, Wp = x.shape
  KH, KW = w.shape[2:]
  OH, OW = Hp - KH + 1, Wp - KW + 1
  # 1x1: a GEMM over x materialized first: the row tiles of output channels each read all of x, so an expression
  # fused into the GEMM's load (the bias, activation and residual add after the convolution before) would be
  # computed Cout / 8 times (ResNet-50's 1x1 layers at 13-40 GFLOPS). Its rows and columns merge into one axis
  # (codegen/merge_axes); flattened here, a view with gaps would take a division per element.
  if KH == KW == 1:
    y = _gemm_taps(x.contiguous().reshape(N, C, Hp, Wp, 1, 1), w, groups)
    return y.contiguous() if own else y
  P, span = OH * Wp, KH * Wp
  # positions rounded up to a whole number of register tiles (FLAT_POSITIONS) and zero rows below the image for
  # them: the last window's span ends (KW - 1) past the last row, and a tile's lanes past P read past that. Padded
  # by the codegen instead (PADTO), those lanes' windows wrap around (the sliding window is a view modulo the flat
  # length): a modulo per element and scalar loads (ResNet's stride-2 phases at 24-70 GFLOPS instead of 200+)
  Pp = -(-P // FLAT_POSITIONS) * FLAT_POSITIONS
  rows = -(-(Pp + span - 1) // Wp)
  xf = x._pad(((0, 0), (0, 0), (0, rows - Hp), (0, 0))).contiguous().reshape(N, C, rows * Wp)
  win = _pool(xf._shrink(((0, N), (0, C), (0, Pp + span - 1))), (span,), (1,), (1,))   # (N, C, Pp, KH * Wp)
  win = win.reshape(N, C, Pp, KH, Wp)._shrink(((0, N), (0, C), (0, Pp), (0, KH), (0, KW)))
  out = _gemm_taps(win, w, groups)
  if own: out = out.contiguous()
  out = out._shrink(((0, N), (0, w.shape[0]), (0, P))).reshape(N, w.shape[0], OH, Wp)
  return out._shrink(((0, N), (0, out.shape[1]), (0, OH), (0, OW)))

def _conv2d_cpu(x: Tensor, w: Tensor, s_: tuple[int, ...], groups: int) -> Tensor:
  """A 2-d convolution of an already padded x (N, C, Hp, Wp) with stride s_: (N, Cout, OH, OW) (see above)."""
  out = _conv2d_phases(x, w, s_, groups)
  dt = promote(x.dtype, w.dtype)
  return out.cast(dt) if out.dtype != dt else out

FLAT_POSITIONS = 32     # _conv2d_flat computes a multiple of this many positions (a register tile's lanes: 32 on AVX-512, 16 on AVX2; 64 would
                        # add 14% to a 14x14 layer's 224)
IM2COL_MAX_TERMS = 160   # a strided convolution with at most this many terms per output (C * KH * KW) gathers columns
# a strided convolution whose columns are at most this many times its input gathers them too: ResNet's 3x3 stride-2
# layers (2.25x) at 0.72-0.86 ms as one GEMM, against 1.1-1.3 ms as 4 phases' GEMMs, their padded copies and a sum
IM2COL_MAX_GROWTH = 3

def _im2col_gemm(win: Tensor, w: Tensor, groups: int) -> Tensor:
  """The convolution of windows win (N, C, OH, OW, KH, KW) with w (Cout, C/groups, KH, KW) as one GEMM over the
  columns gathered from them (im2col): (N, Cout, OH, OW)."""
  # (Gathered into panels of 32 positions, the stem's GEMM ran 955 -> 692 us, its rows no longer 50 KiB apart; the
  # gather, with a division per lane or masked lanes at each row's end, lost as much again)
  N, C, OH, OW, KH, KW = win.shape
  Cout, Cg = w.shape[:2]
  return _conv2d_flat(win.permute(0, 1, 4, 5, 2, 3).reshape(N, C * KH * KW, OH, OW), w.reshape(Cout, Cg * KH * KW, 1, 1), groups)

def _conv2d_phases(x: Tensor, w: Tensor, s_: tuple[int, ...], groups: int) -> Tensor:
  """_conv2d_cpu before the final rounding of half and bfloat16 (their float32 sums)."""
  N, C, Hp, Wp = x.shape
  KH, KW = w.shape[2:]
  sh, sw = s_
  OH, OW = (Hp - KH) // sh + 1, (Wp - KW) // sw + 1
  if s_ == (1, 1): return _conv2d_flat(x, w, groups)
  if C * KH * KW <= IM2COL_MAX_TERMS or KH * KW <= IM2COL_MAX_GROWTH * sh * sw:
    # few input channels (an RGB stem) or columns not much larger than the input (3x3 at stride 2): the phases' GEMMs
    # each write the whole output (short reductions for a stem) and a fifth kernel sums them; the padded input made
    # contiguous and gathered into columns once feeds one GEMM instead (MobileNetV2's 3x3 stem 0.7-0.8 -> 0.3 ms,
    # ResNet's 7x7 stem 3.0 -> 1.7 ms, its 3x3 stride-2 layers above)
    return _im2col_gemm(_pool(x.contiguous(), (KH, KW), s_, (1, 1)), w, groups)
  if (KH <= sh and KW <= sw) or min(sh, KH) * min(sw, KW) > 4:
    # windows that do not overlap (1x1 strided, a ViT's 16x16 patches) or many phases: the windows gathered once into
    # columns (im2col; a quarter of the input for a 1x1 at stride 2, the input itself for patches), then one GEMM
    return _im2col_gemm(_pool(x, (KH, KW), s_, (1, 1)), w, groups)
  # stride phases: phase (a, b) holds x[..., a::sh, b::sw] on a grid of Hq x Wq, read by taps w[..., a::sh, b::sw]
  Hq, Wq = OH + -(-KH // sh) - 1, OW + -(-KW // sw) - 1
  xq = _pad_crop(x, [(0, Hq * sh - Hp), (0, Wq * sw - Wp)]).reshape(N, C, Hq, sh, Wq, sw)
  out = None
  for a in range(min(sh, KH)):
    for b in range(min(sw, KW)):
      ka, kb = len(range(a, KH, sh)), len(range(b, KW, sw))
      xab = xq[:, :, :, a, :, b]._shrink(((0, N), (0, C), (0, OH + ka - 1), (0, OW + kb - 1)))
      # each phase's GEMM stores its own result, summed (with what follows the convolution) in one kernel after the
      # last: summed inside the next phase's kernel, the earlier result's cropped rows would be read there (a
      # division per element, and the register tile given up: 2-4x slower phases)
      y = _conv2d_flat(xab, w[:, :, a::sh, b::sw], groups, own=True)
      out = y if out is None else out + y
  assert out is not None
  return out

def _conv_transposend(x: Tensor, w: Tensor, bias: Tensor | None, stride: Any, padding: Any, output_padding: Any, groups: int, dilation: Any,
                      nsp: int, name: str) -> Tensor:
  if w.ndim != nsp + 2: raise RuntimeError(f"{name}: weight must have {nsp + 2} dimensions (in_channels, out_channels/groups, *kernel), got shape {w.shape}")
  unbatched = x.ndim == nsp + 1
  if unbatched: x = x.unsqueeze(0)
  if x.ndim != nsp + 2: raise RuntimeError(f"{name}: input must have {nsp + 1} or {nsp + 2} dimensions, got shape {x.shape}")
  Cin, Cog = w.shape[:2]
  k_ = w.shape[2:]
  if x.shape[1] != Cin: raise RuntimeError(f"{name}: input of shape {x.shape} has {x.shape[1]} channels but weight of shape {w.shape} expects {Cin}")
  if Cin % groups: raise RuntimeError(f"{name}: in_channels {Cin} (weight shape {w.shape}) is not divisible by groups={groups}")
  s_, d_ = _tuple(stride, nsp, "stride"), _tuple(dilation, nsp, "dilation")
  p_, op_ = _tuple(padding, nsp, "padding"), _tuple(output_padding, nsp, "output_padding")
  for op, s, d in zip(op_, s_, d_):
    if op >= max(s, d): raise RuntimeError(f"{name}: output_padding {op_} must be smaller than stride {s_} or dilation {d_}")
  N, i_ = x.shape[0], x.shape[2:]
  # zeros between the elements: (i) -> (i, 1) padded to (i, s) -> (i*s) cropped to (i-1)*s+1
  if any(s > 1 for s in s_):
    x = x.reshape((N, Cin) + tuple(v for i in i_ for v in (i, 1)))
    x = x._pad(((0, 0), (0, 0)) + tuple(v for s in s_ for v in ((0, 0), (0, s - 1))))
    x = x.reshape((N, Cin) + tuple(i * s for i, s in zip(i_, s_)))
    x = x._shrink(((0, N), (0, Cin)) + tuple((0, (i - 1) * s + 1) for i, s in zip(i_, s_)))
  x = _pad_crop(x, [(d * (k - 1) - p, d * (k - 1) - p + op) for k, d, p, op in zip(k_, d_, p_, op_)])
  G, Cig = groups, Cin // groups
  wt = w.reshape((G, Cig, Cog) + k_).transpose(1, 2).reshape((G * Cog, Cig) + k_).flip(*range(2, 2 + nsp))
  out = _convnd(x, wt, bias, 1, 0, d_, groups, nsp, name)
  return out.squeeze(0) if unbatched else out

def _pool_args(x: Tensor, kernel_size: Any, stride: Any, padding: Any, dilation: Any, ceil_mode: bool, nsp: int, name: str):
  if x.ndim not in (nsp + 1, nsp + 2): raise RuntimeError(f"{name}: input must have {nsp + 1} or {nsp + 2} dimensions, got shape {x.shape}")
  k_ = _tuple(kernel_size, nsp, "kernel_size")
  s_ = k_ if stride is None or (not isinstance(stride, int) and len(stride) == 0) else _tuple(stride, nsp, "stride")
  p_, d_ = _tuple(padding, nsp, "padding"), _tuple(dilation, nsp, "dilation")
  if any(v <= 0 for v in k_ + s_ + d_): raise RuntimeError(f"{name}: kernel_size {k_}, stride {s_} and dilation {d_} must be positive")
  for k, p, d in zip(k_, p_, d_):
    if p < 0 or p > (d * (k - 1) + 1) // 2: raise RuntimeError(f"{name}: padding {p_} must be non-negative and at most half the effective kernel size {k_}")
  i_ = x.shape[-nsp:]
  o_ = []
  for i, k, s, p, d in zip(i_, k_, s_, p_, d_):
    num = i + 2 * p - d * (k - 1) - 1
    o = (-(-num // s) if ceil_mode else num // s) + 1
    if ceil_mode and (o - 1) * s >= i + p: o -= 1
    if o <= 0: raise RuntimeError(f"{name}: input of shape {x.shape} is too small for kernel {k_}, padding {p_}, dilation {d_}: output size {o}")
    o_.append(o)
  # extra right padding so the last (ceil_mode) window fits
  extra = [max(0, (o - 1) * s + d * (k - 1) + 1 - (i + 2 * p)) for o, i, k, s, p, d in zip(o_, i_, k_, s_, p_, d_)]
  return k_, s_, p_, d_, tuple(o_), extra

def _max_pool(x: Tensor, kernel_size, stride, padding, dilation, ceil_mode, return_indices, nsp, name) -> Any:
  from baregrad.tensor.tensor import Tensor
  k_, s_, p_, d_, o_, extra = _pool_args(x, kernel_size, stride, padding, dilation, ceil_mode, nsp, name)
  fill = -math.inf if dtypes.is_float(x.dtype) else dtypes.min(x.dtype)
  flat = [v for p, e in zip(reversed(p_), reversed(extra)) for v in (p, p + e)]
  xp = x.pad(flat, value=fill) if any(flat) else x
  # on a CPU, a strided pool reads the padded input from a buffer of its own: unmasked, each row of outputs' windows
  # is one block of whole vectors (codegen/cpu_heuristic, _strided_window); through the padding's masks, every lane
  # loaded on its own (ResNet's 3x3 stride-2 pool: 520 us, now the copy and the pool take ~150)
  if any(flat) and any(s > 1 for s in s_) and _cpu_fast_path(x, x): xp = xp.contiguous()
  win = _pool(xp, k_, s_, d_)
  out = win.amax(tuple(range(-nsp, 0)))
  if not return_indices: return out
  # the flat spatial position of each window's first maximum (PyTorch's indices, for max_unpool)
  i_, K = x.shape[-nsp:], prod(k_)
  pos = Tensor.arange(prod(i_), device=x.device, dtype=dtypes.int32).reshape(i_)
  posw = _pool(pos.pad(flat, value=-1) if any(flat) else pos, k_, s_, d_).reshape(o_ + (K,))
  am = win.reshape(win.shape[:-nsp] + (K,)).argmax(-1)
  idx = _onehot(am, K).where(posw, 0).sum(-1)
  return out, idx.cast(dtypes.int64)

def _avg_pool(x: Tensor, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, nsp, name) -> Tensor:
  from baregrad.tensor.tensor import Tensor
  k_, s_, p_, d_, o_, extra = _pool_args(x, kernel_size, stride, padding, 1, ceil_mode, nsp, name)
  x = x._float()
  pads = tuple((p, p + e) for p, e in zip(p_, extra))
  win = _pool(x._pad(((0, 0),) * (x.ndim - nsp) + pads), k_, s_, d_)
  total = win.sum(tuple(range(-nsp, 0)))
  if divisor_override is not None: return total / divisor_override
  if not any(extra) and (count_include_pad or not any(p_)): return total / prod(k_)
  # a window's divisor: how many of its positions lie in the input (or in the padded input, count_include_pad)
  i_ = x.shape[-nsp:]
  if count_include_pad: ones = Tensor.full(tuple(i + 2 * p for i, p in zip(i_, p_)), 1.0, device=x.device)._pad(tuple((0, e) for e in extra))
  else: ones = Tensor.full(i_, 1.0, device=x.device)._pad(pads)
  div = _pool(ones, k_, s_, d_).sum(tuple(range(-nsp, 0)))
  return total / div

def _resample(x: Tensor, ax: int, m: list[list[float]]) -> Tensor:
  """x with axis ax replaced by m @ (that axis): a constant (out, in) matrix."""
  from baregrad.tensor.tensor import Tensor
  y = x.transpose(ax, -1).matmul(Tensor(m, device=x.device, dtype=x.dtype).T)
  return y.transpose(ax, -1)

def _adaptive_avg_pool(x: Tensor, output_size: Any, nsp: int, name: str) -> Tensor:
  from baregrad.tensor.tensor import Tensor
  if x.ndim not in (nsp + 1, nsp + 2): raise RuntimeError(f"{name}: input must have {nsp + 1} or {nsp + 2} dimensions, got shape {x.shape}")
  i_ = x.shape[-nsp:]
  req = (output_size,) * nsp if isinstance(output_size, int) or output_size is None else tuple(output_size)
  if len(req) != nsp: raise RuntimeError(f"{name}: output_size {output_size} must name {nsp} sizes")
  o_ = tuple(i if o is None else int(o) for i, o in zip(i_, req))
  if any(o < 0 for o in o_): raise RuntimeError(f"{name}: output_size {output_size} must be non-negative")
  x = x._float()
  if 0 in o_: return Tensor.zeros(*x.shape[:-nsp], *o_, dtype=x.dtype, device=x.device)  # an empty result, as PyTorch
  for j, (i, o) in enumerate(zip(i_, o_)):
    if i == o: continue
    ax = x.ndim - nsp + j
    if i % o == 0:  # equal windows: a reshape and a mean
      x = x.reshape(x.shape[:ax] + (o, i // o) + x.shape[ax + 1:]).mean(ax + 1)
      continue
    # bin r averages [floor(r*i/o), ceil((r+1)*i/o)), as PyTorch's adaptive pooling does
    m = [[0.0] * i for _ in range(o)]
    for r in range(o):
      lo, hi = (r * i) // o, -(-((r + 1) * i) // o)
      for c in range(lo, hi): m[r][c] = 1.0 / (hi - lo)
    x = _resample(x, ax, m)
  return x

def _resample_rows(i: int, o: int, scale: float | None, mode: str, align_corners: bool) -> list[list[tuple[int, float]]]:
  """For each output position: [(source index, weight), ...], computed in float32 as PyTorch's CPU kernels do."""
  if mode.startswith("nearest"):
    sc = _f32(1.0 / scale) if scale is not None and scale > 0 else _f32(i / o)
    if mode == "nearest": return [[(min(int(math.floor(_f32(r * sc))), i - 1), 1.0)] for r in range(o)]
    return [[(min(int(math.floor(_f32(_f32(r + 0.5) * sc))), i - 1), 1.0)] for r in range(o)]
  if align_corners: sc = _f32((i - 1) / (o - 1)) if o > 1 else 0.0
  else: sc = _f32(1.0 / scale) if scale is not None and scale > 0 else _f32(i / o)
  if mode == "bicubic": return _cubic_rows(i, o, sc, align_corners)
  rows = []
  for r in range(o):
    src = _f32(sc * r) if align_corners else max(0.0, _f32(_f32(sc * _f32(r + 0.5)) - 0.5))
    i0 = min(int(math.floor(src)), i - 1)
    i1 = min(i0 + 1, i - 1)
    l1 = _f32(src - i0)
    rows.append([(i0, _f32(1.0 - l1)), (i1, l1)])
  return rows

def _cubic_rows(i: int, o: int, sc: float, align_corners: bool) -> list[list[tuple[int, float]]]:
  """Keys' cubic convolution (A = -0.75) over the 4 nearest sources, clamped at the borders, in float32 as
  PyTorch's upsample_bicubic2d computes it (the source position is not clamped at 0, unlike the linear modes)."""
  A = -0.75
  def c1(t: float) -> float: return _f32(_f32(_f32(_f32((A + 2) * t) - (A + 3)) * t) * t + 1)
  def c2(t: float) -> float: return _f32(_f32(_f32(_f32(_f32(A * t) - 5 * A) * t) + 8 * A) * t - 4 * A)
  rows = []
  for r in range(o):
    src = _f32(sc * r) if align_corners else _f32(_f32(sc * _f32(r + 0.5)) - 0.5)
    i0 = math.floor(src)
    t = _f32(src - i0)
    ws = (c2(_f32(t + 1)), c1(t), c1(_f32(1 - t)), c2(_f32(2 - t)))
    rows.append([(min(max(i0 - 1 + k, 0), i - 1), w) for k, w in enumerate(ws)])
  return rows

class ConvOps:
  """Convolution, pooling and resampling: Tensor methods (x.conv2d(w), x.max_pool2d(2), x.interpolate(size=...))."""
  __slots__ = ()   # (Tensor has slots: a base without them would give every tensor a __dict__)
  def max_unpool1d(input: Tensor, indices: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, output_size: Any = None) -> Tensor:
    """Inverse of max_pool1d(return_indices=True): each value written at its index in a zero (N, C, L_out) tensor."""
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 1, "max_unpool1d")
  def max_unpool2d(input: Tensor, indices: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, output_size: Any = None) -> Tensor:
    """Inverse of max_pool2d(return_indices=True): each value written at its flat index in a zero (N, C, H_out, W_out) tensor."""
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 2, "max_unpool2d")
  def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    """2-D convolution (cross-correlation, as PyTorch). Pad, take sliding windows with movement ops, multiply by the
    weight and sum over (in-channels, kh, kw): one fused kernel (bias included) when the result is what is realized."""
    return _convnd(input, weight, bias, stride, padding, dilation, groups, 2, "conv2d")
  def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    """1-D convolution (cross-correlation): (N, C_in, L) with weight (C_out, C_in/groups, k) -> (N, C_out, L')."""
    if weight.ndim != 3: raise RuntimeError(f"conv1d: weight must have 3 dimensions (out_channels, in_channels/groups, k), got shape {weight.shape}")
    if input.ndim not in (2, 3): raise RuntimeError(f"conv1d: input must have 2 or 3 dimensions, got shape {input.shape}")
    return _convnd(input, weight, bias, stride, padding, dilation, groups, 1, "conv1d")
  def conv3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    """3-D convolution: (N, C_in, D, H, W) with weight (C_out, C_in/groups, kd, kh, kw) -> (N, C_out, D', H', W')."""
    return _convnd(input, weight, bias, stride, padding, dilation, groups, 3, "conv3d")
  def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0, output_padding: Any = 0,
                       groups: int = 1, dilation: Any = 1) -> Tensor:
    """Transposed convolution: spread the input with stride-1 zeros between elements, pad by dilation*(k-1)-padding,
    and run conv2d with the flipped, in/out-swapped weight."""
    return _conv_transposend(input, weight, bias, stride, padding, output_padding, groups, dilation, 2, "conv_transpose2d")
  def conv_transpose1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0, output_padding: Any = 0,
                       groups: int = 1, dilation: Any = 1) -> Tensor:
    """1-D transposed convolution: (N, C_in, L) with weight (C_in, C_out/groups, k) -> (N, C_out, L')."""
    return _conv_transposend(input, weight, bias, stride, padding, output_padding, groups, dilation, 1, "conv_transpose1d")
  def conv_transpose3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0, output_padding: Any = 0,
                       groups: int = 1, dilation: Any = 1) -> Tensor:
    """3-D transposed convolution: (N, C_in, D, H, W) with weight (C_in, C_out/groups, kd, kh, kw) -> (N, C_out, D', H', W')."""
    return _conv_transposend(input, weight, bias, stride, padding, output_padding, groups, dilation, 3, "conv_transpose3d")
  @function_recipe("max_pool2d")
  def max_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False,
      return_indices: bool = False) -> Tensor:
    """Max over sliding windows of the last two axes: (N, C, H, W) -> (N, C, H', W'); return_indices gives PyTorch's flat indices too."""
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 2, "max_pool2d")
  @function_recipe("max_pool1d")
  def max_pool1d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False,
      return_indices: bool = False) -> Tensor:
    """Max over sliding windows of the last axis: (N, C, L) -> (N, C, L'); return_indices gives PyTorch's flat indices too."""
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 1, "max_pool1d")
  def max_pool3d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False,
      return_indices: bool = False) -> Tensor:
    """Max over sliding windows of the last three axes: (N, C, D, H, W) -> (N, C, D', H', W')."""
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 3, "max_pool3d")
  def avg_pool3d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False, count_include_pad: bool = True,
                 divisor_override: int | None = None) -> Tensor:
    """Mean over sliding windows of the last three axes: (N, C, D, H, W) -> (N, C, D', H', W')."""
    return _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 3, "avg_pool3d")
  @function_recipe("avg_pool2d")
  def avg_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False, count_include_pad: bool = True,
                 divisor_override: int | None = None) -> Tensor:
    """Mean over sliding windows of the last two axes: (N, C, H, W) -> (N, C, H', W')."""
    return _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 2, "avg_pool2d")
  @function_recipe("avg_pool1d")
  def avg_pool1d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False, count_include_pad: bool = True) -> Tensor:
    """Mean over sliding windows of the last axis: (N, C, L) -> (N, C, L')."""
    return _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, None, 1, "avg_pool1d")
  def interpolate(input: Tensor, size: Any = None, scale_factor: Any = None, mode: str = "nearest", align_corners: bool | None = None,
                  recompute_scale_factor: bool | None = None, antialias: bool = False) -> Tensor:
    """Resize the spatial axes (all but the first two). Each axis is resampled by a small constant matrix (its rows
    are the nearest source position, or the two linear weights) built from the sizes; the data path is a matmul."""
    from baregrad.tensor.tensor import Tensor
    x = input
    nsp = x.ndim - 2
    # PyTorch raises NotImplementedError for an input rank or mode it has no kernel for
    if nsp < 1: raise NotImplementedError(f"interpolate: input must have at least 3 dimensions (N, C, *spatial), got shape {x.shape}")
    want = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}
    if mode in want and want[mode] != nsp: raise NotImplementedError(f"interpolate: mode {mode!r} needs {want[mode] + 2}-D input, got shape {x.shape}")
    if mode not in ("nearest", "nearest-exact", "area") and mode not in want:
      raise NotImplementedError(f"interpolate: mode must be one of 'nearest', 'nearest-exact', 'linear', 'bilinear', 'bicubic', 'trilinear', 'area', got "
          f"{mode!r}")
    if antialias: raise NotImplementedError("interpolate: antialias=True is not implemented")
    if mode.startswith("nearest") and align_corners is not None: raise ValueError("interpolate: align_corners only applies to the linear modes")
    i_ = x.shape[2:]
    if (size is None) == (scale_factor is None): raise ValueError("interpolate: give exactly one of size and scale_factor")
    if size is not None:
      o_ = (int(size),) * nsp if isinstance(size, int) else tuple(int(v) for v in size)
      if len(o_) != nsp: raise ValueError(f"interpolate: size {tuple(size)} must name {nsp} spatial sizes (input shape {x.shape})")
      scales: list[float | None] = [None] * nsp
    else:
      sf = (float(scale_factor),) * nsp if isinstance(scale_factor, (int, float)) else tuple(float(v) for v in scale_factor)
      if len(sf) != nsp: raise ValueError(f"interpolate: scale_factor {scale_factor} for {nsp} spatial dims")
      o_ = tuple(int(math.floor(i * s)) for i, s in zip(i_, sf))
      scales = [None if recompute_scale_factor else s for s in sf]
    if any(o <= 0 for o in o_): raise RuntimeError(f"interpolate: output size {o_} must be positive (input shape {x.shape})")
    if mode == "area": return _adaptive_avg_pool(x, o_, nsp, "interpolate")
    x = x._float() if mode in want else x
    for j, (i, o, sc) in enumerate(zip(i_, o_, scales)):
      if i == o and sc in (None, 1.0): continue
      rows = _resample_rows(i, o, sc, mode, bool(align_corners))
      ax = 2 + j
      xt = x.transpose(ax, -1)
      if mode.startswith("nearest"):
        idx = Tensor([r[0][0] for r in rows], device=x.device, dtype=dtypes.int32)
        y = xt[(Ellipsis, idx)]
      else:
        m = [[0.0] * i for _ in range(o)]
        for r, row in enumerate(rows):
          for src, wgt in row: m[r][src] += wgt
        y = xt.matmul(Tensor(m, device=x.device, dtype=x.dtype).T)
      x = y.transpose(ax, -1)
    return x
  def adaptive_avg_pool2d(input: Tensor, output_size: Any) -> Tensor:
    """Mean pooling of the last two axes to output_size (H', W') bins (PyTorch's bin edges)."""
    return _adaptive_avg_pool(input, output_size, 2, "adaptive_avg_pool2d")
  def adaptive_avg_pool1d(input: Tensor, output_size: Any) -> Tensor:
    """Mean pooling of the last axis to output_size bins (PyTorch's bin edges)."""
    return _adaptive_avg_pool(input, output_size, 1, "adaptive_avg_pool1d")
