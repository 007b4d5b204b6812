from baregrad.tensor.tensor import Tensor
from baregrad.tensor import functional
from baregrad.tensor import linalg, mathfn, scan, sorting  # noqa: F401  (they add their methods to Tensor)
from baregrad.tensor.functional import cat, concat, stack, where, einsum
__all__ = ["Tensor", "functional", "cat", "concat", "stack", "where", "einsum"]
