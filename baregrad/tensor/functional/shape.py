"""torch.nn.functional's joins, splits, gathers and scatters (and einsum, where): the functions are the Tensor methods
themselves (tensor/ops/shape.py, ops/indexing.py, ops/linalg.py), or those modules' functions of several tensors."""
from __future__ import annotations
from typing import Any
from baregrad.tensor.tensor import Tensor
from baregrad.tensor.ops.shape import cat, concat, concatenate, stack, meshgrid, pad  # noqa: F401  (re-exported)
from baregrad.tensor.ops.linalg import einsum  # noqa: F401  (re-exported)

split = Tensor.split
chunk = Tensor.chunk
repeat = Tensor.repeat
roll = Tensor.roll
tril = Tensor.tril
triu = Tensor.triu
diagonal = Tensor.diagonal
diag = Tensor.diag
gather = Tensor.gather
scatter = Tensor.scatter
scatter_add = Tensor.scatter_add
scatter_reduce = Tensor.scatter_reduce
index_select = Tensor.index_select
repeat_interleave = Tensor.repeat_interleave
masked_fill = Tensor.masked_fill
one_hot = Tensor.one_hot

def where(condition: Tensor, input: Any, other: Any) -> Tensor:
  """input where condition (bool) is True, other elsewhere; the three broadcast and input/other promote."""
  if not isinstance(condition, Tensor): raise TypeError(f"where: condition must be a Tensor, got {type(condition).__name__}")
  return condition.where(input, other)
