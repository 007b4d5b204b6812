from baregrad.tensor.tensor import Tensor
from baregrad.tensor import functional
from baregrad.tensor import linalg  # noqa: F401  (they add their methods to Tensor)
from baregrad.tensor import inplace_ops  # noqa: F401  (x += y, add_, zero_, ...: last, it wraps the methods above)
from baregrad.tensor.functional import cat, concat, stack, where, einsum
__all__ = ["Tensor", "functional", "cat", "concat", "stack", "where", "einsum"]
