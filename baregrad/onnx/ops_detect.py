"""NonMaxSuppression for detection models, on the device.

Greedy NMS keeps a box unless a kept box that precedes it (higher score, or equal score and lower index) overlaps it by
more than the IoU threshold. That rule depends only on predecessors, so it has one fixed point, which
keep <- valid & not any(precedes & overlaps & keep) reaches from keep = valid in at most (longest suppression chain + 1)
steps: each step is one fused kernel, and the loop stops when a step changes nothing (read back on the host). The
output's length depends on the data, so the model is data-dependent (no jitted replay); the final (batch, class, box)
rows are assembled on the host from the kept mask and each kept box's rank."""
from __future__ import annotations
import numpy as np
from baregrad import dtypes
from baregrad.tensor import Tensor
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
