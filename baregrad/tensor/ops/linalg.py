"""Linear algebra built from Tensor ops, on the device.

qr: reduced QR by modified Gram-Schmidt with one re-orthogonalization pass per column ("twice is enough", Giraud
et al. 2005), so Q is orthogonal to working precision even for ill-conditioned inputs. The column being worked on
is picked by comparing an index held in a device buffer, so every column runs the very same kernels (compiled once)
instead of one set of kernels per column: m columns cost m rounds of a few small kernels.

det: LU factorization with partial pivoting (the row of largest magnitude in the column becomes the pivot), batched
over the leading axes; the determinant is the product of U's diagonal times the sign of the row permutation. The
step index lives in a device buffer too, so an n x n matrix runs n rounds of the same kernels. Every step is built
from differentiable Tensor ops (selections, products, one division), so autograd gives the gradient
det(A) * inv(A)^T of an invertible A."""
from __future__ import annotations
from typing import Any, TYPE_CHECKING
from baregrad.helpers import prod
from baregrad.ir.dtype import dtypes, promote
from baregrad.ir.ops import UOp, Ops
from baregrad.engine.graph import set_shape, permute_uop
from baregrad.tensor.common import broadcast_shape, _node
from baregrad.tensor.ops.shape import ShapeOps
if TYPE_CHECKING: from baregrad.tensor.tensor import Tensor

def qr(A: Tensor, mode: str = "reduced") -> tuple[Tensor, Tensor]:
  """Q (n, k), R (k, m) with A = Q R, k = min(n, m), Q's columns orthonormal and R upper triangular with a
  non-negative diagonal (the unique QR of a full-rank A; LAPACK, hence torch.linalg.qr, may flip signs of Q's columns
  and R's rows). A is 2-D float; only mode='reduced'. No gradient (the result is detached)."""
  from baregrad.tensor.tensor import Tensor
  if not isinstance(A, Tensor): raise TypeError(f"qr: A must be a Tensor, got {type(A).__name__}")
  if A.ndim != 2: raise RuntimeError(f"qr: A must be 2-D (n, m), got shape {A.shape}")
  if mode != "reduced": raise NotImplementedError(f"qr: mode={mode!r}: only 'reduced' is implemented")
  if not dtypes.is_float(A.dtype): raise TypeError(f"qr: A must be a float tensor, got {A.dtype}")
  n, m = A.shape
  k = min(n, m)
  a = A.detach().contiguous().realize()
  Q = Tensor.zeros(n, k, dtype=A.dtype, device=A.device)
  cols = Tensor.arange(k, device=A.device, dtype=dtypes.int32).contiguous().realize()
  j = Tensor.zeros(1, dtype=dtypes.int32, device=A.device)
  src = a._shrink(((0, n), (0, k)))   # the first k columns span what Q must
  for _ in range(k):
    e = cols.eq(j).cast(A.dtype)                          # (k,) one-hot of the column being worked on
    v = (src * e).sum(1)                                  # column j of A
    for _pass in range(2): v = v - Q.matmul(Q.T.matmul(v))  # Q's columns j.. are still zero
    v = v / (v * v).sum().sqrt()
    Q = (Q + v.reshape(n, 1) * e.reshape(1, k)).contiguous().realize()
    j = (j + 1).contiguous().realize()
  R = Q.T.matmul(a)
  rows = Tensor.arange(k, device=A.device, dtype=dtypes.int32).reshape(k, 1)
  colm = Tensor.arange(m, device=A.device, dtype=dtypes.int32).reshape(1, m)
  return Q, (colm >= rows).where(R, 0.0).cast(A.dtype).contiguous().realize()

def einsum(equation: str, *operands: Any) -> Tensor:
  """General einsum: repeated indices take diagonals, then every operand is permuted to one letter order and
  broadcast, multiplied, and the contracted letters (placed last) are summed."""
  ops = list(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) else list(operands)
  eq = equation.replace(" ", "")
  lhs, rhs = (eq.split("->") + [None])[:2] if "->" in eq else (eq, None)
  terms = lhs.split(",")
  if len(terms) != len(ops): raise RuntimeError(f"einsum {equation!r}: {len(terms)} operand terms but {len(ops)} tensors given")
  used = set(c for c in eq if c.isalpha())
  free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in used]
  ell_nd = 0
  for t, x in zip(terms, ops):
    if "..." in t: ell_nd = max(ell_nd, x.ndim - (len(t) - 3))
  ell = "".join(free[:ell_nd])
  norm: list[str] = []
  for i, (t, x) in enumerate(zip(terms, ops)):
    if "..." in t:
      k = x.ndim - (len(t) - 3)
      if k < 0: raise RuntimeError(f"einsum {equation!r}: operand {i} has {x.ndim} dimensions (shape {x.shape}), fewer than term {t!r} names")
      t = t.replace("...", ell[ell_nd - k:])
    if not all(c.isalpha() for c in t): raise RuntimeError(f"einsum {equation!r}: invalid subscript in {t!r}")
    if len(t) != x.ndim: raise RuntimeError(f"einsum {equation!r}: term {t!r} names {len(t)} dimensions but operand {i} has shape {x.shape}")
    norm.append(t)
  if rhs is None:
    counts: dict[str, int] = {}
    for t in norm:
      for c in t: counts[c] = counts.get(c, 0) + 1
    rhs = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
  else:
    rhs = rhs.replace("...", ell)
    if not all(c.isalpha() for c in rhs) or len(set(rhs)) != len(rhs): raise RuntimeError(f"einsum {equation!r}: invalid output subscripts {rhs!r}")
  # repeated letters within one operand: take the diagonal
  xs: list[Tensor] = []
  for t, x in zip(norm, ops):
    while len(set(t)) != len(t):
      c = next(c for c in t if t.count(c) > 1)
      p = t.index(c); q = t.index(c, p + 1)
      if x.shape[p] != x.shape[q]: raise RuntimeError(f"einsum {equation!r}: subscript {c!r} repeated with sizes {x.shape[p]} and {x.shape[q]}")
      x = ShapeOps.diagonal(x, 0, p, q)
      t = "".join(ch for k, ch in enumerate(t) if k not in (p, q)) + c
    xs.append(x); norm_t = t
    norm[len(xs) - 1] = norm_t
  sizes: dict[str, int] = {}
  for t, x in zip(norm, xs):
    for c, s in zip(t, x.shape):
      if c in sizes and sizes[c] != s and 1 not in (sizes[c], s):
        raise RuntimeError(f"einsum {equation!r}: subscript {c!r} has size {sizes[c]} in one operand and {s} in another")
      sizes[c] = max(sizes.get(c, s), s) if 1 in (sizes.get(c, s), s) else s
  for c in rhs:
    if c not in sizes: raise RuntimeError(f"einsum {equation!r}: output subscript {c!r} appears in no input")
  contracted = [c for t in norm for c in t if c not in rhs]
  order = list(rhs) + list(dict.fromkeys(contracted))
  aligned = []
  for t, x in zip(norm, xs):
    mine = [c for c in order if c in t]
    x = x.permute(*[t.index(c) for c in mine]) if mine else x
    aligned.append(x.reshape(tuple(x.shape[mine.index(c)] if c in t else 1 for c in order) if order else ()))
  out = aligned[0]
  for a in aligned[1:]: out = out * a
  full = tuple(sizes[c] for c in order)
  if out.shape != full: out = out.expand(full)
  dt = out.dtype
  nc = len(order) - len(rhs)
  if nc: out = out.sum(tuple(range(len(rhs), len(order))))
  return out.cast(dt)

def _matmul_fast(x: Tensor, w: Tensor) -> Tensor | None:
  """x @ w for two float tensors of one dtype with at least 2 axes: the graph the general path builds (the same
  hash-consed nodes), made from UOps directly instead of through eight intermediate tensors and their checks (a
  matmul's graph cost ~125 us of Python that way). None where the general path must decide (1-D promotion, casts,
  an empty or length-1 reduction, a one-element result)."""
  xs, ws = x.shape, w.shape
  dt = x.uop.dtype
  if len(xs) < 2 or len(ws) < 2 or w.uop.dtype is not dt or (dt is not dtypes.float32 and dt is not dtypes.float64): return None
  n, k, m = xs[-2], xs[-1], ws[-1]
  if k < 2 or w.device != x.device: return None
  bx, bw = xs[:-2], ws[:-2]
  batch = bx if bx == bw else broadcast_shape(bx, bw)   # (raises for batch axes that do not broadcast, as the general path)
  full = batch + (n, m, k)
  if prod(full) // k <= 1: return None
  # x (..., n, k) -> (..., n, 1, k); w (..., k, m) -> its transpose (..., m, k) -> (..., 1, m, k); both to `full`
  xu = _node(Ops.RESHAPE, dt, (x.uop,), bx + (n, 1, k), bx + (n, 1, k))
  wt = permute_uop(w.uop, tuple(range(len(bw))) + (len(bw) + 1, len(bw)))
  if wt._shape is None: set_shape(wt, bw + (m, k))
  wu = _node(Ops.RESHAPE, dt, (wt,), bw + (1, m, k), bw + (1, m, k))
  def to_full(u: UOp) -> UOp:   # (what _bcast does: leading ones, then the expand)
    if len(s := u._shape) < len(full): u = _node(Ops.RESHAPE, dt, (u,), ones := (1,) * (len(full) - len(s)) + s, ones)
    return u if u._shape == full else _node(Ops.EXPAND, dt, (u,), full, full)
  prodn = _node(Ops.MUL, dt, (to_full(xu), to_full(wu)), None, full)
  red = _node(Ops.REDUCE_AXIS, dt, (prodn,), (Ops.ADD, (len(full) - 1,)), full[:-1] + (1,))
  out = _node(Ops.RESHAPE, dt, (red,), full[:-1], full[:-1])
  return x._new(out, requires_grad=True if (x.requires_grad or w.requires_grad) else None)

class LinalgOps:
  """Linear algebra: Tensor methods (a @ b is a.matmul(b), x.linear(w, b), A.det(), Tensor.einsum(eq, a, b))."""
  __slots__ = ()   # (Tensor has slots: a base without them would give every tensor a __dict__)
  def det(A: Tensor) -> Tensor:
    """The determinant of each square matrix in A (..., n, n), shape A.shape[:-2]: LU with partial pivoting on the
    device. Floats only (float16/bfloat16 are factored in float32). A singular matrix gives 0 (a zero pivot column is
    skipped, as LAPACK does); gradients flow through the factorization."""
    from baregrad.tensor.tensor import Tensor
    if not isinstance(A, Tensor): raise TypeError(f"det: A must be a Tensor, got {type(A).__name__}")
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]: raise RuntimeError(f"det: A must be a batch of square matrices (..., n, n), got shape {A.shape}")
    if not dtypes.is_float(A.dtype): raise RuntimeError(f"det: expected a float tensor, got {A.dtype.name}")
    batch, n = A.shape[:-2], A.shape[-1]
    ct = A.dtype if A.dtype in (dtypes.float32, dtypes.float64) else dtypes.float32
    B = prod(batch)
    if n == 0 or B == 0: return (A.sum((-2, -1)) + 1).cast(A.dtype)  # det of a 0 x 0 matrix is 1 (kept in the graph: zero gradient)
    a = A.cast(ct).reshape(B, n, n)
    dev = A.device
    idx = Tensor.arange(n, device=dev, dtype=dtypes.int32).contiguous().realize()
    rows, cols = idx.reshape(1, n, 1), idx.reshape(1, 1, n)
    k = Tensor.zeros(1, dtype=dtypes.int32, device=dev).contiguous().realize()
    sign = Tensor.ones(B, dtype=ct, device=dev)
    for _ in range(n):
      ek_r, ek_c = rows.eq(k.reshape(1, 1, 1)), cols.eq(k.reshape(1, 1, 1))
      colk = ek_c.where(a, 0.0).sum(2)                                    # (B, n): column k
      cand = (idx.reshape(1, n) >= k.reshape(1, 1)).where(colk.detach().abs(), -1.0)
      p = cand.argmax(1).cast(dtypes.int32)                               # (B,): the pivot row
      ep = idx.reshape(1, n).eq(p.reshape(B, 1))                          # (B, n): its one-hot
      rowk = ek_r.where(a, 0.0).sum(1)                                    # (B, n): row k
      rowp = ep.reshape(B, n, 1).where(a, 0.0).sum(1)                     # (B, n): the pivot row
      swapped = p.ne(k)
      a = ek_r.where(rowp.reshape(B, 1, n), ep.reshape(B, n, 1).where(rowk.reshape(B, 1, n), a))
      sign = swapped.where(-sign, sign)
      piv = ek_c.reshape(1, n).where(rowp, 0.0).sum(1)                   # (B,)
      below = rows > k.reshape(1, 1, 1)
      colk = ek_c.where(a, 0.0).sum(2).reshape(B, n, 1)
      # a zero pivot (the column is zero from row k down): nothing to eliminate, and det is 0 through the diagonal
      nz = piv.ne(0).reshape(B, 1, 1)
      f = (below & nz).where(colk / nz.where(piv.reshape(B, 1, 1), 1.0), 0.0)
      a = (a - f * rowp.reshape(B, 1, n)).contiguous()
      k = (k + 1).contiguous()
      Tensor.realize(a, sign, k)
    diag = rows.eq(cols).where(a, 0.0).sum(2)
    return (sign * diag.prod(1)).reshape(batch).cast(A.dtype)
  # ---- matmul
  def dot(self, w: Tensor) -> Tensor:
    """matmul() (PyTorch's dot is 1-D only; this accepts any matmul shapes)."""
    return self.matmul(w)
  def matmul(self, w: Tensor) -> Tensor:
    """Matrix product with NumPy/PyTorch broadcasting of batch axes and 1-D promotion; half/bfloat16 multiply and accumulate in float32."""
    x = self
    if x.ndim == 0 or w.ndim == 0: raise RuntimeError(f"matmul of a 0-d tensor: shapes {x.shape} and {w.shape} (both arguments need at least 1 dimension)")
    if x.shape[-1] != w.shape[-2 if w.ndim > 1 else 0]:
      raise RuntimeError(f"matmul: inner dimensions differ: {x.shape} @ {w.shape} ({x.shape[-1]} vs {w.shape[-2 if w.ndim > 1 else 0]})")
    if (fast := _matmul_fast(x, w)) is not None: return fast
    xv = x.unsqueeze(0) if x.ndim == 1 else x
    wv = w.unsqueeze(-1) if w.ndim == 1 else w
    d = promote(x.dtype, w.dtype)
    xv, wv = xv.cast(d), wv.cast(d)
    # half/bfloat16: products and sums in float32, rounded once at the end, as PyTorch's matmuls accumulate
    if d in (dtypes.float16, dtypes.bfloat16): xv, wv = xv.float(), wv.float()
    # (..., n, 1, k) * (..., 1, m, k) summed over k
    out = (xv.unsqueeze(-2) * wv.transpose(-1, -2).unsqueeze(-3)).sum(-1, dtype=xv.dtype).cast(d)  # int32 @ int32 stays int32, as in PyTorch
    if x.ndim == 1: out = out.squeeze(-2)
    if w.ndim == 1: out = out.squeeze(-1)
    return out
  def linear(self, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """self @ weight.T + bias: (*, in) with weight (out, in) -> (*, out)."""
    out = self.matmul(weight.T if weight.ndim == 2 else weight)
    return out + bias if bias is not None else out
  einsum = staticmethod(einsum)   # (Tensor.einsum(eq, a, b), as torch.einsum)
