from baregrad.tensor.tensor import Tensor
__all__ = ["Tensor"]
