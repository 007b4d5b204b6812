"""torch.nn.functional's dropout, normalizations and the activations defined by one (softmin, softsign, logsigmoid):
the Tensor methods themselves (tensor/ops/norm.py) or thin functions over them."""
from __future__ import annotations
from typing import Any
from baregrad.tensor.tensor import Tensor
from baregrad.tensor.ops.norm import dropout  # noqa: F401  (re-exported)

layer_norm = Tensor.layer_norm
rms_norm = Tensor.rms_norm
batch_norm = Tensor.batch_norm
group_norm = Tensor.group_norm
normalize = Tensor.normalize

def softmin(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
  """softmax(-input) along dim."""
  return input.softmin(dim, dtype)

def softsign(input: Tensor) -> Tensor:
  """input / (1 + |input|)."""
  return input.softsign()

def logsigmoid(input: Tensor) -> Tensor:
  """log(sigmoid(input)), finite for any input."""
  return input.logsigmoid()
