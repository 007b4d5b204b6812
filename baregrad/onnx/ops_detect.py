"""NonMaxSuppression and RoiAlign for detection models, on the device.

Greedy NMS keeps a box unless a kept box that precedes it (higher score, or equal score and lower index) overlaps it by
more than the IoU threshold. That rule depends only on predecessors, so it has one fixed point, which
keep <- valid & not any(precedes & overlaps & keep) reaches from keep = valid in at most (longest suppression chain + 1)
steps: each step is one fused kernel, and the loop stops when a step changes nothing (read back on the host). The
output's length depends on the data, so the model is data-dependent (no jitted replay); the final (batch, class, box)
rows are assembled on the host from the kept mask and each kept box's rank."""
from __future__ import annotations
import numpy as np
from baregrad import dtypes
from baregrad.tensor import Tensor, functional as F
from baregrad.onnx.errors import OnnxError
from baregrad.onnx.registry import op

MAX_STEPS = 1 << 14

def _corners(b: Tensor, center: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
  """(x_min, x_max, y_min, y_max) of boxes [..., 4]."""
  if center:
    xc, yc, w, h = (b[..., k] for k in range(4))
    return xc - w / 2, xc + w / 2, yc - h / 2, yc + h / 2
  y1, x1, y2, x2 = (b[..., k] for k in range(4))
  return x1.minimum(x2), x1.maximum(x2), y1.minimum(y2), y1.maximum(y2)

@op("NonMaxSuppression")
def non_max_suppression(ctx, n, boxes, scores, max_out=None, iou_thr=None, score_thr=None):
  boxes, scores = ctx.t(boxes), ctx.t(scores)
  B, N = boxes.shape[:2]
  C = scores.shape[1]
  m = 0 if max_out is None or np.asarray(ctx.host(max_out, "NonMaxSuppression's max_output_boxes_per_class")).size == 0 else \
      max(int(ctx.scalar(max_out, "NonMaxSuppression's max_output_boxes_per_class")), 0)
  t = 0.0 if iou_thr is None else float(ctx.scalar(iou_thr, "NonMaxSuppression's iou_threshold"))
  ctx.runner.data_dependent = ctx.runner.data_dependent or f"{n.label()}: the number of selected boxes depends on the data"
  if m == 0 or N == 0 or C == 0: return np.zeros((0, 3), np.int64)
  x0, x1, y0, y1 = _corners(boxes.float(), bool(n.attrs.get("center_point_box", 0)))
  # overlaps[b, j, i]: IoU(j, i) > t, zero-area boxes and empty intersections never suppress
  ix = x1.unsqueeze(2).minimum(x1.unsqueeze(1)) - x0.unsqueeze(2).maximum(x0.unsqueeze(1))
  iy = y1.unsqueeze(2).minimum(y1.unsqueeze(1)) - y0.unsqueeze(2).maximum(y0.unsqueeze(1))
  inter = (ix > 0).where(ix, 0.0) * (iy > 0).where(iy, 0.0)
  area = (x1 - x0) * (y1 - y0)
  union = area.unsqueeze(2) + area.unsqueeze(1) - inter
  ok = (inter > 0) & (area.unsqueeze(2) > 0) & (area.unsqueeze(1) > 0) & (union > 0)
  overlaps = (ok & (inter / ok.where(union, 1.0) > t)).unsqueeze(1)              # (B, 1, N, N)
  s = scores.float()
  valid = s > float(ctx.scalar(score_thr, "NonMaxSuppression's score_threshold")) if score_thr is not None else s.eq(s) | s.ne(s)
  idx = Tensor.arange(N, device=ctx.device, dtype=dtypes.int32)
  sj, si = s.unsqueeze(3), s.unsqueeze(2)                                          # (B, C, N, 1), (B, C, 1, N)
  precedes = (sj > si) | (sj.eq(si) & (idx.reshape(N, 1) < idx.reshape(1, N)))   # [b, c, j, i]: j before i
  blocks = (precedes & overlaps).contiguous().realize()
  keep = valid.contiguous().realize()
  prev = keep.numpy()
  for _ in range(MAX_STEPS):
    keep = (valid & (blocks & keep.unsqueeze(3)).any(2).logical_not()).contiguous().realize()
    cur = keep.numpy()
    if np.array_equal(cur, prev): break
    prev = cur
  else: raise OnnxError(f"NonMaxSuppression did not settle in {MAX_STEPS} steps")
  # each kept box's rank among the kept boxes of its class, in score order
  rank = (precedes & keep.unsqueeze(3)).cast(dtypes.int32).sum(2).numpy()
  rows = []
  for b in range(B):
    for c in range(C):
      kept = np.nonzero(cur[b, c])[0]
      order = kept[np.argsort(rank[b, c][kept], kind="stable")][:m]
      rows += [(b, c, int(i)) for i in order]
  return np.array(rows, np.int64).reshape(-1, 3)

def _axis_samples(start: Tensor, bin_: Tensor, grid: Tensor, pooled: int, S: int, size: int, dev: str):
  """Sample coordinates along one image axis for every roi (R,): (R, pooled, S) tensors of the lower and upper pixel
  index, the weights of each, and whether the sample lies inside the roi's own grid and inside the image (the
  bilinear rule of RoiAlign: a sample more than one pixel outside the image reads nothing; one on the last row or
  column reads that row or column only)."""
  R = start.shape[0]
  p = Tensor.arange(pooled, device=dev, dtype=dtypes.float32).reshape(1, pooled, 1)
  i = Tensor.arange(S, device=dev, dtype=dtypes.float32).reshape(1, 1, S)
  g = grid.reshape(R, 1, 1)
  c = start.reshape(R, 1, 1) + p * bin_.reshape(R, 1, 1) + (i + 0.5) * bin_.reshape(R, 1, 1) / g.maximum(1.0)
  inside = (c >= -1.0) & (c <= float(size))
  c = c.maximum(0.0)
  lo = c.floor()
  last = lo >= size - 1
  lo = last.where(float(size - 1), lo)
  c = last.where(lo, c)
  hi = last.where(lo, lo + 1)
  frac = c - lo
  return lo.cast(dtypes.int32), hi.cast(dtypes.int32), 1.0 - frac, frac, inside, (i < g).expand(R, pooled, S)

@op("RoiAlign")
def roi_align(ctx, n, x, rois, batch_indices):
  x, rois, bi = ctx.t(x), ctx.t(rois), ctx.t(batch_indices)
  if x.ndim != 4: raise OnnxError(f"RoiAlign: X must be (N, C, H, W), got shape {x.shape}")
  if rois.ndim != 2 or rois.shape[1] != 4: raise OnnxError(f"RoiAlign: rois must be (num_rois, 4), got shape {rois.shape}")
  N, C, H, W = x.shape
  R = rois.shape[0]
  oh, ow = n.attrs.get("output_height", 1), n.attrs.get("output_width", 1)
  sr, scale = n.attrs.get("sampling_ratio", 0), n.attrs.get("spatial_scale", 1.0)
  half = n.attrs.get("coordinate_transformation_mode", "half_pixel" if ctx.opset >= 16 else "output_half_pixel") == "half_pixel"
  mode = n.attrs.get("mode", "avg")
  if mode not in ("avg", "max"): raise OnnxError(f"RoiAlign: mode {mode!r} is not 'avg' or 'max'")
  if R == 0 or C == 0: return Tensor.zeros(R, C, oh, ow, dtype=x.dtype, device=ctx.device)
  dev = ctx.device
  r = rois.cast(dtypes.float32) * scale - (0.5 if half else 0.0)
  x1, y1, x2, y2 = (r[:, k] for k in range(4))
  rw, rh = x2 - x1, y2 - y1
  if not half: rw, rh = rw.maximum(1.0), rh.maximum(1.0)
  bh, bw = rh / oh, rw / ow
  if sr > 0:
    gh = gw = Tensor.full((R,), float(sr), device=dev)
    Sh = Sw = sr
  else:  # as many samples per bin as the bin is pixels long, rounded up: the largest count sets the grid (read on the host)
    gh, gw = (rh / oh).ceil().maximum(0.0), (rw / ow).ceil().maximum(0.0)
    Sh, Sw = ctx.ints(F.stack([gh.amax(), gw.amax()]).cast(dtypes.int64), "RoiAlign's sampling grid")
    Sh, Sw = max(Sh, 1), max(Sw, 1)
  ylo, yhi, wylo, wyhi, yin, yok = _axis_samples(y1, bh, gh, oh, Sh, H, dev)   # (R, oh, Sh)
  xlo, xhi, wxlo, wxhi, xin, xok = _axis_samples(x1, bw, gw, ow, Sw, W, dev)   # (R, ow, Sw)
  ys, xs = (R, oh, Sh, 1, 1), (R, 1, 1, ow, Sw)
  inside = yin.reshape(ys) & xin.reshape(xs)                                    # (R, oh, Sh, ow, Sw)
  used = yok.reshape(ys) & xok.reshape(xs)
  P = oh * Sh * ow * Sw
  img = x[bi.cast(dtypes.int64)].reshape(R, C, H * W).cast(dtypes.float32)
  vals = []
  for yi, wy in ((ylo, wylo), (yhi, wyhi)):
    for xi, wx in ((xlo, wxlo), (xhi, wxhi)):
      pos = (yi.reshape(ys) * W + xi.reshape(xs)).reshape(R, 1, P).expand(R, C, P)
      w = inside.where(wy.reshape(ys) * wx.reshape(xs), 0.0).reshape(R, 1, P)
      vals.append(w * F.gather(img, 2, pos))
  vals = [v.reshape(R, C, oh, Sh, ow, Sw) for v in vals]
  used6 = used.reshape(R, 1, oh, Sh, ow, Sw)
  if mode == "avg":
    s = used6.where(vals[0] + vals[1] + vals[2] + vals[3], 0.0).sum((3, 5))
    out = s / (gh * gw).maximum(1.0).reshape(R, 1, 1, 1)
  else:
    m = vals[0].maximum(vals[1]).maximum(vals[2]).maximum(vals[3])
    out = used6.where(m, float("-inf")).amax((3, 5))
    out = out.eq(float("-inf")).where(0.0, out)  # a roi with no samples
  return out.cast(x.dtype)
