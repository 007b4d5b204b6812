"""Renderer: a linear program -> source text for one language. Each renderer declares what it supports."""
from __future__ import annotations
from baregrad.ir.dtype import DType, ALL
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
  mem_vector_bytes: int = 0        # vectorized=False: loads/stores of contiguous aligned lanes stay vectors of up to this
  # ---- what a CPU target declares (the CPU device sets them from the host: drivers/cpu_compile.host_simd)
  simd_lanes: int = 16             # float32 lanes in one vector register (AVX-512: 16, AVX2: 8, NEON/SSE: 4)
  vector_registers: int = 32       # vector registers (x86 without AVX-512: 16): a register tile must fit in them
  stream_bytes: int = 0            # vector stores spanning at least this many bytes bypass the caches (0: never)
  stream_fence: str = ""           # what orders such stores before the kernel returns (LLVM IR)
  # ---- what a GPU target declares (the heuristic and the opts read these; 0 or () where there is nothing)
  warp_size: int = 0               # threads that execute in lockstep (a tensor-core fragment is spread over one)
  shared_max: int = 0              # bytes of workgroup (shared) memory one kernel may declare statically
  regs_per_thread: int = 0         # 32-bit registers one thread may use
  compute_units: int = 0           # multiprocessors of the device (the device sets it when it knows): grid-wide splits
  tensor_cores: tuple = ()         # codegen.tc.TensorCore shapes and dtypes the target's matrix instructions take
  has_async_copy: bool = False     # global -> shared copies that run behind the compute (cp.async)
  has_images: bool = False         # OptOps.IMAGE: float input buffers read through the texture unit (render(images=...))
  image_max_bytes: int = 0         # the largest buffer an image may cover
  supported_dtypes: tuple[DType, ...] = ALL
  extra_matcher: PatternMatcher | None = None   # device-specific decomposition run before linearizing
  def supports_dtype(self, d: DType) -> bool: return d.scalar in self.supported_dtypes
  def render(self, name: str, uops: list[UOp]) -> str: raise NotImplementedError
