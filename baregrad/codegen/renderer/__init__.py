"""Renderer: a linear program -> source text for one language. Each renderer declares what it supports."""
from __future__ import annotations
from baregrad.ir.dtype import DType, dtypes, ALL
from baregrad.ir.ops import UOp
from baregrad.ir.pattern import PatternMatcher

class RenderError(ValueError): pass

class Renderer:
  name: str = "base"
  has_local: bool = False          # workgroups with shared memory (GPUs)
  has_threads: bool = False        # a parallel axis split over CPU threads
  global_max: tuple[int, ...] = ()   # GPUs: grid limits per dimension (x, y, z); empty for the CPU
  local_max: int = 0                 # GPUs: threads per workgroup
  vectorized: bool = True          # keeps vector lanes; False: every vector op becomes scalar ops
  supported_dtypes: tuple[DType, ...] = ALL
  extra_matcher: PatternMatcher | None = None   # device-specific decomposition run before linearizing
  def supports_dtype(self, d: DType) -> bool: return d.scalar in self.supported_dtypes
  def render(self, name: str, uops: list[UOp]) -> str: raise NotImplementedError
