"""Tensor cores as data: a shape, the dtypes it takes, and where each element of each operand's fragment lives.

A warp-wide matrix instruction D = A @ B + C (A: M x K, B: K x N, C and D: M x N) spreads every operand over the
warp's lanes: each lane holds a few elements (its fragment). For the shapes here every coordinate bit of an element
(row/column bit b) is either a bit of the lane id or a bit of the element's index in the fragment, so a layout is two
tuples: which coordinate bit each lane-id bit is, and which each fragment-index bit is ("m0" = bit 0 of the row of A
and C, "n2" = bit 2 of the column of B and C, "k3" = bit 3 of the reduction index). The kernel lowering builds every
operand index from these (codegen/tc_lower.py), so a renderer declares its instructions and nothing else changes.

NVIDIA mma.sync (PTX ISA 9.7.14.5.7 "Matrix Fragments for mma.m16n8k8" and 9.7.14.5.8 "... mma.m16n8k16 with floating
point type"; groupID = laneid >> 2, threadID_in_group = laneid % 4):
- m16n8k16 .f16/.bf16: A a0..a7: row = groupID (+8 for a2,a3,a6,a7), col = threadID_in_group*2 + (i & 1) (+8 for
  i >= 4); B b0..b3: row = threadID_in_group*2 + (i & 1) (+8 for i >= 2), col = groupID; C c0..c3: row = groupID (+8
  for c2,c3), col = threadID_in_group*2 + (i & 1).
- m16n8k8 .tf32: A a0..a3: row = groupID (+8 for a1,a3), col = threadID_in_group (+4 for a2,a3); B b0,b1: row =
  threadID_in_group (+4 for b1), col = groupID; C as above.

TF32 (10-bit mantissa inputs) changes float32 results, so it is off by default, like PyTorch's
torch.backends.cuda.matmul.allow_tf32: turn it on with the environment variable ALLOW_TF32=1 or set_allow_tf32(True)
(read when a kernel is compiled; kernels already compiled keep their choice)."""
from __future__ import annotations
from baregrad import knobs
from dataclasses import dataclass
from typing import Any
from baregrad.ir.dtype import DType, dtypes

@dataclass(frozen=True)
class TensorCore:
  name: str                       # the instruction, as the renderer spells it
  dims: tuple[int, int, int]      # M, N, K
  dtype_in: DType                 # A and B (float32 here means tf32: the inputs are rounded to 10-bit mantissas)
  dtype_acc: DType                # C and D
  a_lane: tuple[str, ...]; a_elem: tuple[str, ...]
  b_lane: tuple[str, ...]; b_elem: tuple[str, ...]
  c_lane: tuple[str, ...]; c_elem: tuple[str, ...]
  threads: int = 32
  split: int = 1                  # instructions one unit issues side by side along N (each N / split columns wide)
  desc: bool = False              # A and B are read from staged shared tiles through matrix descriptors (sm_90a wgmma)
  def coord_bits(self, layout: str, coord: str) -> list[tuple[str, int]]:
    """For coordinate `coord` of operand `layout` ('a', 'b', 'c'): per bit (low first), ('lane', j) or ('elem', j)."""
    lane, elem = getattr(self, f"{layout}_lane"), getattr(self, f"{layout}_elem")
    bits = {int(x[1:]): ("lane", j) for j, x in enumerate(lane) if x[0] == coord}
    bits.update({int(x[1:]): ("elem", j) for j, x in enumerate(elem) if x[0] == coord})
    return [bits[b] for b in range(len(bits))]

_A16: dict[str, Any] = dict(a_lane=("k1", "k2", "m0", "m1", "m2"), a_elem=("k0", "m3", "k3"), b_lane=("k1", "k2", "n0", "n1", "n2"), b_elem=("k0", "k3"))
_A8: dict[str, Any] = dict(a_lane=("k0", "k1", "m0", "m1", "m2"), a_elem=("m3", "k2"), b_lane=("k0", "k1", "n0", "n1", "n2"), b_elem=("k2",))
_C: dict[str, Any] = dict(c_lane=("n1", "n2", "m0", "m1", "m2"), c_elem=("n0", "m3"))

MMA_SM80 = (
  TensorCore("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", (16, 8, 16), dtypes.float16, dtypes.float32, **_A16, **_C),
  TensorCore("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", (16, 8, 16), dtypes.bfloat16, dtypes.float32, **_A16, **_C),
  TensorCore("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", (16, 8, 8), dtypes.float32, dtypes.float32, **_A8, **_C),
)

# Two m16n8k16 side by side along N as one m16n16k16 unit (split=2): the B fragment's and the C fragment's top element
# bit is n3 (elements 0..3 are the first instruction's, 4..7 the second's), so B of both is one ldmatrix.x4 (.trans where
# N is contiguous) and a 64x64 warp tile reads 4 A and 4 B fragments for 32 instructions: 4 mma.sync per ldmatrix.
_B16: dict[str, Any] = dict(b_lane=("k1", "k2", "n0", "n1", "n2"), b_elem=("k0", "k3", "n3"))
_C16: dict[str, Any] = dict(c_lane=("n1", "n2", "m0", "m1", "m2"), c_elem=("n0", "m3", "n3"))
MMA_SM80_PAIRS = tuple(
  TensorCore(f"mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32", (16, 16, 16), dt, dtypes.float32,
             a_lane=_A16["a_lane"], a_elem=_A16["a_elem"], **_B16, **_C16, split=2)
  for t, dt in (("f16", dtypes.float16), ("bf16", dtypes.bfloat16)))

# sm_90a wgmma.mma_async m64nNk16 (PTX ISA 9.7.15): a warpgroup of 128 threads (4 warps) computes a 64 x N tile. A and
# B are not in registers: each is a 64-bit matrix descriptor of a staged shared tile (codegen/tc_lower.py wgmma_desc);
# the 128B-swizzled tile layout is the one stage.py's swizzle already gives rows of 64 16-bit values. D fragments
# (9.7.15.5.1.1): warp w holds rows 16w..16w+15 and lane l (groupID g = l >> 2, t = l % 4) holds d[4j + i] = (16w + g +
# 8 (i >> 1), 8j + 2t + (i & 1)): lane bits t0 t1 -> n1 n2, g0..g2 -> m0..m2, the warp's bits -> m4 m5; element bits
# i0 -> n0, i1 -> m3, j's bits -> n3 and up.
def _wgmma(n: int, t: str, dt: DType) -> TensorCore:
  nb = n.bit_length() - 1
  return TensorCore(f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t}", (64, n, 16), dt, dtypes.float32,
                    a_lane=(), a_elem=(), b_lane=(), b_elem=(), c_lane=("n1", "n2", "m0", "m1", "m2", "m4", "m5"),
                    c_elem=("n0", "m3") + tuple(f"n{b}" for b in range(3, nb)), threads=128, desc=True)
# N = 64 first (either operand layout), then N = 128 (a B stored k-contiguous: its 128-row tile is 128-byte swizzled rows)
WGMMA_SM90A = tuple(_wgmma(n, t, dt) for n in (64, 128) for t, dt in (("f16", dtypes.float16), ("bf16", dtypes.bfloat16)))

_allow_tf32: bool | None = None
def set_allow_tf32(flag: bool | None) -> None:
  """Let float32 matmuls run on tf32 tensor cores (True), forbid it (False), or follow $ALLOW_TF32 again (None)."""
  global _allow_tf32
  _allow_tf32 = flag
def allow_tf32() -> bool:
  """Whether float32 matmuls may run on tf32 tensor cores (default: no)."""
  return _allow_tf32 if _allow_tf32 is not None else bool(knobs.read("ALLOW_TF32"))

def usable(tc: TensorCore) -> bool:
  """A tensor core the optimizer may pick: tf32 ones only when allowed."""
  return tc.dtype_in != dtypes.float32 or allow_tf32()
