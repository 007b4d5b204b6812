"""Ops whose gradient is given as a formula instead of being derived from how the forward is computed.

An accurate forward (range reductions, branches, polynomials) differentiates badly: each branch contributes its own
derivative, a branch not taken can still leak inf * 0 = NaN, and the result is rarely PyTorch's formula at the edges.
with_grad(value, (x, dvalue/dx), ...) returns `value` exactly and sends `grad * dvalue/dx` to x in backward, built
from Tensor ops only (no autograd hook). With u = x' - x'.detach() (x' = x where x is finite, else 0; u is exactly 0
in the forward and du/dx = 1), the result is value.detach() - (T + 0.0), where T is a sum of terms that are all
exactly 0 in the forward (so the + 0.0 makes T +0 and even a -0.0 value survives) and whose derivatives are:
  -u * d        for finite d          (gradient d)
  -sqrt(u)      where d is +inf       (sqrt's derivative at 0 is +inf: gradient +inf * grad, as PyTorch's grad * d)
  +sqrt(u)      where d is -inf
  sqrt(u)^2     where d is NaN        (inf * 0 + 0 * inf: gradient NaN)
each sqrt taken of 1 where its term does not apply, so no 0/0 leaks into the others. Where x itself is infinite or
NaN the gradient is 0 (the forward would be poisoned by inf - inf)."""
from __future__ import annotations
from baregrad.tensor.grad_mode import is_grad_enabled

def _special(u, where, sign: float):
  """A term that is 0 in the forward and has derivative sign * inf (sign 0: NaN) where `where` holds, 0 elsewhere."""
  r = where.where(u, 1.0).sqrt()
  t = r * r if sign == 0 else r * sign
  return where.where(t, 0.0)

def with_grad(value, *pairs):
  """`value` (a Tensor) with gradient d_i with respect to each x_i, for (x_i, d_i) pairs of value's shape.
  For a reduction pass (x, d, axes): the gradient of value with respect to x is d (x's shape), value = f(x summed over axes)."""
  out = value.detach()
  if not is_grad_enabled(): return out
  terms = None
  for pair in pairs:
    x, d = pair[0], pair[1]
    if not x.requires_grad: continue
    d = d.detach().cast(x.dtype)
    if d.shape != x.shape: d = d._bcast(x.shape)
    xs = x.isfinite().where(x, 0.0)
    u = xs - xs.detach()
    fin = d.isfinite()
    t = -u * fin.where(d, 0.0)
    inf = fin.logical_not() & d.eq(d)
    t = t + _special(u, inf & (d > 0), -1.0) + _special(u, inf & (d < 0), 1.0) + _special(u, d.isnan(), 0)
    if len(pair) > 2: t = t.sum(pair[2], keepdim=True).reshape(value.shape)
    elif t.shape != value.shape: raise ValueError(f"with_grad: x of shape {x.shape} for a value of shape {value.shape}")
    t = t.cast(value.dtype)
    terms = t if terms is None else terms + t
  return out if terms is None else out - (terms + 0.0)
