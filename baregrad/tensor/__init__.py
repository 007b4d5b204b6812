from baregrad.tensor.tensor import Tensor
from baregrad.tensor import functional
from baregrad.tensor import linalg  # noqa: F401  (the torch.linalg namespace)
from baregrad.tensor.functional import cat, concat, stack, where, einsum
__all__ = ["Tensor", "functional", "cat", "concat", "stack", "where", "einsum"]
