"""Linear algebra built from Tensor ops, on the device.

qr: reduced QR by modified Gram-Schmidt with one re-orthogonalization pass per column ("twice is enough", Giraud
et al. 2005), so Q is orthogonal to working precision even for ill-conditioned inputs. The column being worked on
is picked by comparing an index held in a device buffer, so every column runs the very same kernels (compiled once)
instead of one set of kernels per column: m columns cost m rounds of a few small kernels."""
from __future__ import annotations
from baregrad.ir.dtype import dtypes
from baregrad.tensor.tensor import Tensor

def qr(A: Tensor, mode: str = "reduced") -> tuple[Tensor, Tensor]:
  """Q (n, k), R (k, m) with A = Q R, k = min(n, m), Q's columns orthonormal and R upper triangular with a
  non-negative diagonal (the unique QR of a full-rank A; LAPACK, hence torch.linalg.qr, may flip signs of Q's columns
  and R's rows). A is 2-D float; only mode='reduced'. No gradient (the result is detached)."""
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
