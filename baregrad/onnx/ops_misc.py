"""Less common operators: BitCast, SwiGLU, TensorScatter, CausalConvWithState, LinearAttention, AffineGrid,
GridSample, Col2Im, the window functions, MelWeightMatrix, DFT and STFT (as matmuls/convolutions with cos/sin
matrices built by Tensor ops from the sizes), Binarizer."""
from __future__ import annotations
import math
from typing import Any
import numpy as np
from baregrad import dtypes
from baregrad.tensor import Tensor, functional as F
from baregrad.onnx.errors import OnnxError, UnsupportedOperator
from baregrad.onnx.registry import op

@op("BitCast")
def bitcast(ctx, n, x):
  x = ctx.t(x)
  d = ctx.dtype(n.attrs["to"])
  if d.itemsize != x.dtype.itemsize: raise OnnxError(f"BitCast from {x.dtype.name} to {d.name}: bit widths differ")
  if x.dtype == dtypes.bool or d == dtypes.bool: return x.cast(d)  # a bool's byte is 0 or 1: the cast is the bitcast
  return x.bitcast(d)

@op("SwiGLU")
def swiglu(ctx, n, a, b):
  a, b = ctx.t(a), ctx.t(b)
  return a * (a * n.attrs.get("alpha", 1.0)).sigmoid() * b

@op("TensorScatter")
def tensor_scatter(ctx, n, cache, upd, idx=None):
  cache, upd = ctx.t(cache), ctx.t(upd)
  a = n.attrs.get("axis", -2) % cache.ndim
  S, L = cache.shape[a], upd.shape[a]
  B = cache.shape[0]
  start = ctx.t(idx).cast(dtypes.int64) if idx is not None else Tensor.full((B,), 0, dtype=dtypes.int64, device=ctx.device)
  # target row of cache position s along axis: s - start[b] (mod S when circular); it is written when in [0, L)
  s = Tensor.arange(S, device=ctx.device, dtype=dtypes.int64).reshape(1, S)
  rel = s - start.reshape(B, 1)
  if n.attrs.get("mode", "linear") == "circular": rel = rel.remainder(S)
  hit = (rel >= 0) & (rel < L)                                  # (B, S)
  src = F.gather(upd, a, hit.where(rel, 0).reshape((B,) + (1,) * (a - 1) + (S,) + (1,) * (cache.ndim - a - 1))
                 .expand(cache.shape[:a] + (S,) + cache.shape[a + 1:])) if L else cache
  h = hit.reshape((B,) + (1,) * (a - 1) + (S,) + (1,) * (cache.ndim - a - 1))
  return h.where(src, cache)

@op("CausalConvWithState")
def causal_conv_with_state(ctx, n, x, w, b=None, state=None):
  x, w, b, state = ctx.t(x), ctx.t(w), ctx.t(b), ctx.t(state)
  B, C, _ = x.shape
  k = w.shape[2]
  pad = state if state is not None else Tensor.full((B, C, k - 1), 0, dtype=x.dtype, device=ctx.device)
  xp = F.cat([pad, x], 2)
  y = F.conv1d(xp, w, b, groups=C).cast(x.dtype)
  if n.attrs.get("activation", "none") in ("silu", "swish"): y = (y.float() * y.float().sigmoid()).cast(x.dtype)
  return y, xp[:, :, xp.shape[2] - (k - 1):]

@op("LinearAttention")
def linear_attention(ctx, n, q, k, v, state=None, decay=None, beta=None):
  q, k, v, state, decay, beta = (ctx.t(t) for t in (q, k, v, state, decay, beta))
  rule = n.attrs.get("update_rule", "gated_delta")
  hq, hk = n.attrs["q_num_heads"], n.attrs["kv_num_heads"]
  B, T, _ = q.shape
  dk, dv = q.shape[2] // hq, v.shape[2] // hk
  heads = lambda t, h: t.reshape(B, T, h, t.shape[2] // h).transpose(1, 2).float()
  q4, k4, v4 = heads(q, hq), heads(k, hk), heads(v, hk)
  gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
  if gated: g4 = decay.reshape(B, T, hk, 1).transpose(1, 2).float() if decay.shape[-1] == hk else heads(decay, hk)
  if delta: b4 = beta.reshape(B, T, beta.shape[-1], 1).transpose(1, 2).float()
  S = state.float() if state is not None else Tensor.full((B, hk, dk, dv), 0.0, device=ctx.device)
  sc = n.attrs.get("scale", 0.0) or 1.0 / math.sqrt(dk)
  outs = []
  for t in range(T):  # the recurrence, unrolled: every step is a few small fused kernels
    kt, vt = k4[:, :, t], v4[:, :, t]
    if gated: S = S * g4[:, :, t].exp().unsqueeze(-1)
    if delta: vt = b4[:, :, t] * (vt - (S * kt.unsqueeze(-1)).sum(2))
    S = S + kt.unsqueeze(-1) * vt.unsqueeze(-2)
    Sr = S if hq == hk else S.unsqueeze(2).expand(B, hk, hq // hk, dk, dv).reshape(B, hq, dk, dv)
    outs.append((q4[:, :, t].unsqueeze(-1) * Sr).sum(2) * sc)
  y = F.stack(outs, 2).transpose(1, 2).reshape(B, T, hq * dv).cast(q.dtype)
  return y, S.cast(state.dtype if state is not None else q.dtype)

# ---------------------------------------------------------------- sampling grids

def _base_coords(size: int, align: bool, dev: str) -> Tensor:
  i = Tensor.arange(size, device=dev, dtype=dtypes.float32)
  if align: return i * (2.0 / (size - 1)) - 1.0 if size > 1 else i * 0 - 1.0
  return (i * 2.0 + 1.0) / size - 1.0

@op("AffineGrid")
def affine_grid(ctx, n, theta, size):
  theta = ctx.t(theta)
  sz = ctx.ints(size, "AffineGrid's size")
  sp = sz[2:]
  align = bool(n.attrs.get("align_corners", 0))
  axes = [_base_coords(s, align, ctx.device) for s in sp]           # D/H/W order
  nd = len(sp)
  cols = []
  for j in range(nd - 1, -1, -1):                                     # x (last spatial) first
    shp = tuple(sp[k] if k == j else 1 for k in range(nd))
    cols.append(axes[j].reshape(shp).expand(tuple(sp)))
  cols.append(Tensor.full(tuple(sp), 1.0, device=ctx.device))
  base = F.stack(cols, -1).reshape(-1, nd + 1)                        # (P, nd+1)
  g = base.cast(theta.dtype).matmul(theta.transpose(1, 2))           # (N, P, nd)
  return g.reshape((theta.shape[0],) + tuple(sp) + (nd,))

def _reflect(x: Tensor, lo: float, hi: float) -> Tensor:
  rng = hi - lo
  if rng <= 0: return x * 0 + lo
  def fold(d: Tensor, below: bool) -> Tensor:  # reflect a distance d past the border, bouncing between lo and hi
    k = (d / rng).trunc()
    r = d - k * rng
    even = k.fmod(2).eq(0)
    return even.where(lo + r, hi - r) if below else even.where(hi - r, lo + r)
  return (x < lo).where(fold(lo - x, True), (x > hi).where(fold(x - hi, False), x))

def _cubic(t: Tensor) -> list[Tensor]:
  a = -0.75
  t1, t2, t3 = t + 1, 1 - t, 2 - t
  return [((a * t1 - 5 * a) * t1 + 8 * a) * t1 - 4 * a, ((a + 2) * t - (a + 3)) * t * t + 1,
          ((a + 2) * t2 - (a + 3)) * t2 * t2 + 1, ((a * t3 - 5 * a) * t3 + 8 * a) * t3 - 4 * a]

@op("GridSample")
def grid_sample(ctx, n, x, grid):
  x, grid = ctx.t(x), ctx.t(grid)
  mode = {"bilinear": "linear", "bicubic": "cubic"}.get(n.attrs.get("mode", "linear"), n.attrs.get("mode", "linear"))
  pad = n.attrs.get("padding_mode", "zeros")
  align = bool(n.attrs.get("align_corners", 0))
  N, C = x.shape[:2]
  dims = x.shape[2:]
  nd = len(dims)
  osp = grid.shape[1:-1]
  P, Q = int(np.prod(osp)), int(np.prod(dims))
  g = grid.float().reshape(N, P, nd)
  taps_per_dim = []
  for j in range(nd):                            # dim j of x is grid component nd-1-j
    d = dims[j]
    c = g[:, :, nd - 1 - j]
    c = (c + 1) / 2.0 * (d - 1) if align else ((c + 1) * d - 1) / 2.0
    lo, hi = (0.0, d - 1.0) if align else (-0.5, d - 0.5)
    if mode == "nearest": c = c.round()
    if pad == "border": c = ((c < lo) | (c > hi)).where(c.clip(0, d - 1), c)
    elif pad == "reflection": c = _reflect(c, lo, hi)
    if mode == "nearest": taps = [(c, None)]
    else:
      f = c.floor()
      t = c - f
      if mode == "linear": taps = [(f, 1 - t), (f + 1, t)]
      elif mode == "cubic": taps = [(f + (o - 1), w) for o, w in enumerate(_cubic(t))]
      else: raise UnsupportedOperator(f"GridSample mode {mode!r} is not supported")
    res = []
    for idx, w in taps:
      if pad == "zeros":
        ok = (idx >= 0) & (idx <= d - 1)
        w = ok.cast(dtypes.float32) if w is None else ok.where(w, 0.0)
        idx = ok.where(idx, 0)
      elif pad == "border": idx = idx.clip(0, d - 1)
      else: idx = _reflect(idx, lo, hi).trunc().clip(0, d - 1)
      res.append((idx.cast(dtypes.int64), w))
    taps_per_dim.append(res)
  # the sampling matrix M[n, p, q]: the weight with which output point p reads input point q
  M = None
  def combos(j: int, flat: Tensor | None, w: Tensor | None):
    nonlocal M
    if j == nd:
      hit = flat.unsqueeze(-1).eq(Tensor.arange(Q, device=ctx.device, dtype=dtypes.int64).reshape(1, 1, Q))
      term = hit.where((w if w is not None else Tensor.full((N, P), 1.0, device=ctx.device)).unsqueeze(-1), 0.0)
      M = term if M is None else M + term
      return
    stride = int(np.prod(dims[j + 1:]))
    for idx, tw in taps_per_dim[j]:
      combos(j + 1, idx * stride if flat is None else flat + idx * stride, tw if w is None else (w if tw is None else w * tw))
  combos(0, None, None)
  y = x.float().reshape(N, C, Q).matmul(M.transpose(1, 2))          # (N, C, P)
  return y.reshape((N, C) + tuple(osp)).cast(x.dtype)

@op("Col2Im")
def col2im(ctx, n, x, image_shape, block_shape):
  x = ctx.t(x)
  img, k_ = ctx.ints(image_shape, "Col2Im's image_shape"), ctx.ints(block_shape, "Col2Im's block_shape")
  nsp = len(img)
  if nsp not in (1, 2, 3): raise UnsupportedOperator(f"Col2Im over {nsp} spatial axes is not supported (1 to 3)")
  s_ = n.attrs.get("strides", [1] * nsp)
  d_ = n.attrs.get("dilations", [1] * nsp)
  p = n.attrs.get("pads", [0] * 2 * nsp)
  K = int(np.prod(k_))
  N, CK, L = x.shape
  C = CK // K
  blocks = [(i + p[j] + p[j + nsp] - d_[j] * (k_[j] - 1) - 1) // s_[j] + 1 for j, i in enumerate(img)]
  # col2im is the transposed convolution of the columns with a one-hot kernel per (channel, kernel offset)
  eye = Tensor.eye(K, device=ctx.device, dtype=x.dtype).reshape((K, 1) + tuple(k_))
  wt = eye.reshape((1, K, 1) + tuple(k_)).expand((C, K, 1) + tuple(k_)).reshape((C * K, 1) + tuple(k_))
  fn = getattr(F, f"conv_transpose{nsp}d", None) or getattr(Tensor, f"conv_transpose{nsp}d")  # AttributeError names a missing Tensor op
  y = fn(x.reshape((N, C * K) + tuple(blocks)), wt, None, stride=s_, padding=0, groups=C, dilation=d_)
  crop = [(-p[j], -(y.shape[2 + j] - p[j] - img[j])) for j in range(nsp)]
  return F.pad(y, [v for b, e in reversed(crop) for v in (b, e)], "constant", 0)

# ---------------------------------------------------------------- signal processing

def _window_n(ctx, n, size: Any) -> tuple[Tensor, int, int]:
  N = int(ctx.scalar(size, f"{n.op}'s size"))
  N1 = N if n.attrs.get("periodic", 1) else N - 1
  return Tensor.arange(N, device=ctx.device, dtype=dtypes.float32), N, N1

@op("HannWindow", "HammingWindow", "BlackmanWindow")
def window(ctx, n, size):
  i, N, N1 = _window_n(ctx, n, size)
  t = i * (2 * math.pi / N1) if N1 else i * 0
  if n.op == "HannWindow": w = 0.5 - 0.5 * t.cos()
  elif n.op == "HammingWindow": w = 25 / 46 - 21 / 46 * t.cos()
  else: w = 0.42 - 0.5 * t.cos() + 0.08 * (t * 2).cos()
  return w.cast(ctx.dtype(n.attrs.get("output_datatype", 1)))

@op("MelWeightMatrix")
def mel_weight_matrix(ctx, n, num_mel_bins, dft_length, sample_rate, lower_hz, upper_hz):
  """(dft_length//2+1, num_mel_bins) triangular filters: num_mel_bins+2 edges evenly spaced in mel (2595 log10(1 +
  f/700)) from lower_hz to upper_hz in steps of 1/(num_mel_bins+2) of the range, each mapped to the spectrogram bin
  floor((dft_length+1) f / sample_rate); filter i rises from edge i to edge i+1 and falls to edge i+2 (ONNX's
  definition, as its reference computes it; in float64)."""
  M = int(ctx.scalar(num_mel_bins, "MelWeightMatrix's num_mel_bins"))
  L = int(ctx.scalar(dft_length, "MelWeightMatrix's dft_length"))
  S, dev, f64 = L // 2 + 1, ctx.device, dtypes.float64
  sr, lo, hi = (ctx.t(v).cast(f64).reshape(()) for v in (sample_rate, lower_hz, upper_hz))
  mel = lambda hz: (hz / 700.0).log1p() * (2595.0 / math.log(10))  # noqa: E731
  lo_m, hi_m = mel(lo), mel(hi)
  edges = Tensor.arange(M + 2, device=dev, dtype=f64) * ((hi_m - lo_m) / (M + 2)) + lo_m
  hz = ((edges / 2595.0) * math.log(10)).expm1() * 700.0
  b = ((L + 1) * hz / sr).floor()
  l, c, r = (b[k:k + M].reshape(1, M) for k in range(3))
  j = Tensor.arange(S, device=dev, dtype=f64).reshape(S, 1)
  up = (j >= l) & (j <= c) & (c > l)
  peak = c.eq(l) & j.eq(c)
  down = (j >= c) & (j < r) & (r > c)
  w = down.where((r - j) / (r > c).where(r - c, 1.0), up.where((j - l) / (c > l).where(c - l, 1.0), peak.where(1.0, 0.0)))
  return w.cast(ctx.dtype(n.attrs.get("output_datatype", 1)))

def _twiddles(L: int, rows: int, dev: str, inverse: bool) -> tuple[Tensor, Tensor]:
  """cos and sin of 2*pi*k*m/L for k < rows, m < L, with k*m reduced mod L first (exact angles)."""
  k = Tensor.arange(rows, device=dev, dtype=dtypes.int64).reshape(rows, 1)
  m = Tensor.arange(L, device=dev, dtype=dtypes.int64).reshape(1, L)
  ang = (k * m).remainder(L).cast(dtypes.float64) * (2 * math.pi / L)
  return ang.cos().float(), ang.sin().float()

def _dft_last(re: Tensor, im: Tensor | None, L: int, inverse: bool, onesided: bool) -> tuple[Tensor, Tensor | None]:
  """DFT along the last axis (already L long)."""
  dev = re.device
  if inverse and onesided:  # one-sided spectrum in, L real samples out (Hermitian symmetry)
    kn = re.shape[-1]
    c, s = _twiddles(L, kn, dev, True)
    coef = Tensor([1.0 if (k == 0 or (L % 2 == 0 and k == L // 2)) else 2.0 for k in range(kn)], device=dev).reshape(kn, 1)
    out = re.matmul(c * coef) - (im.matmul(s * coef) if im is not None else 0)
    return out / L, None
  rows = L // 2 + 1 if onesided else L
  c, s = _twiddles(L, rows, dev, inverse)
  sg = 1.0 if inverse else -1.0
  ore = re.matmul(c.T) - (sg * im).matmul(s.T) if im is not None else re.matmul(c.T)
  oim = (re * sg).matmul(s.T) + (im.matmul(c.T) if im is not None else 0)
  if inverse: ore, oim = ore / L, oim / L
  return ore, oim

@op("DFT")
def dft(ctx, n, x, length=None, axis_in=None):
  x = ctx.t(x)
  inverse, onesided = bool(n.attrs.get("inverse", 0)), bool(n.attrs.get("onesided", 0))
  axis = n.attrs.get("axis", 1) if n.opset < 20 else (-2 if axis_in is None else int(ctx.scalar(axis_in, "DFT's axis")))
  a = axis % x.ndim
  if a == x.ndim - 1: raise OnnxError("DFT axis cannot be the last (real/imaginary) axis")
  xf = x.float()
  re = xf[..., 0]
  im = xf[..., 1] if x.shape[-1] == 2 else None
  n_in = x.shape[a]
  L = int(ctx.scalar(length, "DFT's dft_length")) if length is not None else (2 * (n_in - 1) if inverse and onesided else n_in)
  mv = lambda t: t.transpose(a, -1) if t is not None and a != t.ndim - 1 else t
  re, im = mv(re), mv(im)
  want = L if not (inverse and onesided) else L // 2 + 1
  fit = lambda t: None if t is None else F.pad(t, [0, want - t.shape[-1]], "constant", 0) if t.shape[-1] != want else t
  re, im = fit(re), fit(im)
  ore, oim = _dft_last(re, im, L, inverse, onesided)
  if oim is None: oim = ore * 0
  out = mv(ore).unsqueeze(-1) if inverse and onesided else F.stack([mv(ore), mv(oim)], -1)  # irfft: real samples only
  return out.cast(x.dtype)

@op("STFT")
def stft(ctx, n, sig, step, win=None, length=None):
  sig = ctx.t(sig)
  hop = int(ctx.scalar(step, "STFT's frame_step"))
  win = ctx.t(win)
  fl = int(ctx.scalar(length, "STFT's frame_length")) if length is not None else win.shape[0]
  onesided = bool(n.attrs.get("onesided", 1))
  B, Ls = sig.shape[:2]
  w = win.float() if win is not None else Tensor.full((fl,), 1.0, device=ctx.device)
  rows = fl // 2 + 1 if onesided else fl
  c, s = _twiddles(fl, rows, ctx.device, False)
  # each frame's DFT is a strided convolution whose kernels are the windowed cos/sin rows
  kr, ki = (c * w.reshape(1, fl)).reshape(rows, 1, fl), (s * w.reshape(1, fl)).reshape(rows, 1, fl)
  conv = lambda t, k: F.conv1d(t.reshape(B, 1, Ls), k, stride=hop)     # (B, rows, frames)
  xr = sig[..., 0].float()
  re, im = conv(xr, kr), -conv(xr, ki)
  if sig.shape[-1] == 2:
    xi = sig[..., 1].float()
    re, im = re + conv(xi, ki), im + conv(xi, kr)
  return F.stack([re.transpose(1, 2), im.transpose(1, 2)], -1).cast(sig.dtype)

@op("Det")
def det(ctx, n, x): return ctx.t(x).det()

@op("Binarizer", domain="ai.onnx.ml")
def binarizer(ctx, n, x):
  x = ctx.t(x)
  return (x > n.attrs.get("threshold", 0.0)).cast(x.dtype)
