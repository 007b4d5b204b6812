"""Ops whose gradient is given as a formula instead of being derived from how the forward is computed.

An accurate forward (range reductions, branches, polynomials) differentiates badly: each branch contributes its own
derivative, a branch not taken can still leak inf * 0 = NaN, and the result is rarely PyTorch's formula at the edges.
with_grad(value, (x, dvalue/dx), ...) returns `value` exactly and sends `grad * dvalue/dx` to x in backward, built
from Tensor ops only (no autograd hook): value.detach() - ((x' - x'.detach()) * d' + 0) with x', d' zeroed where x
or d is not finite; the subtracted term is exactly +0 in the forward (so even -0.0 values survive) and its gradient
is d. Where x or d is infinite or NaN the gradient is 0 (PyTorch's formula may give inf or NaN there)."""
from __future__ import annotations
from baregrad.tensor.grad_mode import is_grad_enabled

def with_grad(value, *pairs):
  """`value` (a Tensor) with gradient d_i with respect to each x_i, for (x_i, d_i) pairs of value's shape.
  For a reduction pass (x, d, axes): the gradient of value with respect to x is d (x's shape), value = f(x summed over axes)."""
  out = value.detach()
  if not is_grad_enabled(): return out
  for pair in pairs:
    x, d = pair[0], pair[1]
    if not x.requires_grad: continue
    d = d.detach().cast(x.dtype)
    if d.shape != x.shape: d = d._bcast(x.shape)
    fin = x.isfinite() & d.isfinite()
    xs = fin.where(x, 0.0)
    t = (xs.detach() - xs) * fin.where(d, 0.0)
    if len(pair) > 2: t = t.sum(pair[2], keepdim=True).reshape(value.shape)
    elif t.shape != value.shape: raise ValueError(f"with_grad: x of shape {x.shape} for a value of shape {value.shape}")
    out = out - (t.cast(value.dtype) + 0.0)
  return out
