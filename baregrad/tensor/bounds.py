"""Bounds checks for ops that index with tensors (engine/checks.py): the check runs on the device in the schedule that
computes the op and is reported at the next host read, as an IndexError naming the op, the index and the size."""
from __future__ import annotations
from baregrad import knobs
from baregrad.ir.dtype import dtypes
from baregrad.engine import checks
from typing import TYPE_CHECKING
if TYPE_CHECKING: from baregrad.tensor.tensor import Tensor

def checked(value: Tensor, index: Tensor, lo: int, hi: int, message: str) -> Tensor:
  """value, computed from index: whenever it is computed, an element of index outside [lo, hi) raises
  checks.IndexOutOfBounds(message with {index} filled in) at the next host read. BOUNDS=0 turns it off."""
  if not knobs.get("BOUNDS") or index.numel() == 0: return value
  i = index.cast(dtypes.int64)
  payload = ((i < lo) | (i >= hi)).where(i, checks.NO_ERROR).max()
  checks.add(value.uop, payload.uop, message)
  return value
