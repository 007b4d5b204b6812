"""The optimizer steps of ai.onnx.preview.training (Adagrad, Adam, Momentum), each over one or several tensors:
inputs (R, T, X_1..X_n, G_1..G_n, state_1..), outputs the new X and states, with the ONNX formulas."""
from __future__ import annotations
from typing import Any
from baregrad.tensor import Tensor
from baregrad.onnx.registry import op

_D = "ai.onnx.preview.training"

def _groups(ctx, ins: tuple, k: int) -> tuple[Tensor, Tensor, list[list[Tensor]]]:
  r, t, rest = ctx.t(ins[0]), ctx.t(ins[1]), [ctx.t(v) for v in ins[2:]]
  n = len(rest) // k
  return r.float().reshape(()), t.reshape(()), [rest[j * n:(j + 1) * n] for j in range(k)]

@op("Adagrad", domain=_D)
def adagrad(ctx, n, *ins: Any):
  r, t, (xs, gs, hs) = _groups(ctx, ins, 3)
  decay, eps, norm = n.attrs.get("decay_factor", 0.0), n.attrs.get("epsilon", 0.0), n.attrs.get("norm_coefficient", 0.0)
  rr = r / (t.float() * decay + 1)
  outs_x, outs_h = [], []
  for x, g, h in zip(xs, gs, hs):
    gr = x * norm + g
    hn = h + gr * gr
    outs_x.append((x - rr * gr / (hn.sqrt() + eps)).cast(x.dtype)); outs_h.append(hn.cast(h.dtype))
  return tuple(outs_x + outs_h)

@op("Adam", domain=_D)
def adam(ctx, n, *ins: Any):
  r, t, (xs, gs, vs, hs) = _groups(ctx, ins, 4)
  a, b = n.attrs.get("alpha", 0.9), n.attrs.get("beta", 0.999)
  eps, norm, post = n.attrs.get("epsilon", 0.0), n.attrs.get("norm_coefficient", 0.0), n.attrs.get("norm_coefficient_post", 0.0)
  tf = t.float()
  radj = (t > 0).where(r * (1 - Tensor.full((), b).pow(tf)).sqrt() / (1 - Tensor.full((), a).pow(tf)), r)  # bias correction after step 0
  ox, ov, oh = [], [], []
  for x, g, v, h in zip(xs, gs, vs, hs):
    gr = x * norm + g
    vn, hn = v * a + gr * (1 - a), h * b + gr * gr * (1 - b)
    xn = (x - radj * (vn / (hn.sqrt() + eps))) * (1 - post)
    ox.append(xn.cast(x.dtype)); ov.append(vn.cast(v.dtype)); oh.append(hn.cast(h.dtype))
  return tuple(ox + ov + oh)

@op("Momentum", domain=_D)
def momentum(ctx, n, *ins: Any):
  r, t, (xs, gs, vs) = _groups(ctx, ins, 3)
  a, b, norm = n.attrs["alpha"], n.attrs["beta"], n.attrs["norm_coefficient"]
  nesterov = n.attrs.get("mode", "standard") == "nesterov"
  badj = (t > 0).where(b, 1.0)
  ox, ov = [], []
  for x, g, v in zip(xs, gs, vs):
    gr = x * norm + g
    vn = v * a + badj * gr
    xn = x - r * (gr + vn * a if nesterov else vn)
    ox.append(xn.cast(x.dtype)); ov.append(vn.cast(v.dtype))
  return tuple(ox + ov)
