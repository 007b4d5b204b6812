"""torch.linalg's counterpart: the linear-algebra functions by name (baregrad.tensor.linalg.qr(A), .det(A)). They are
defined in tensor/ops/linalg.py (det is also the method A.det())."""
from baregrad.tensor.tensor import Tensor
from baregrad.tensor.ops.linalg import qr

det = Tensor.det
__all__ = ["qr", "det"]
