"""The OpenCL C renderer keeps the C renderer's semantics: on the CL device (PoCL in CI) the same kernels give the
CPU's C-renderer results bit for bit (casts of every dtype pair on special values, integer chains, float chains without
transcendentals, half and bfloat16 reductions that round every step); OpenCL's exp2/log2/sin are within their spec's
ulps. One kernel per case with many outputs: PoCL compiles each kernel with LLVM (about half a second)."""
from __future__ import annotations
import numpy as np
import pytest
from baregrad.hal import Device, DeviceUnavailable
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import Ops
from baregrad.codegen.astbuild import load, store, reduce, sink
from baregrad.codegen.kernel import KernelError
from baregrad.codegen.program import get_program
from baregrad.codegen.renderer.opencl import OpenCLRenderer
from baregrad.codegen.renderer.cstyle import CRenderer, PRELUDE
from tests.helpers import run, random_values, special_values, bits, ulp_diff, FLOATS, INTS, ALL

f32 = dtypes.float32

@pytest.fixture(scope="module")
def cl():
  try: return Device["CL"].device
  except DeviceUnavailable as e: pytest.skip(f"no OpenCL device here: {e}")

def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  return (bits(a) == bits(b)) | (np.isnan(a) & np.isnan(b)) if a.dtype.kind == "f" else a == b

def assert_agree(got: list[np.ndarray], want: list[np.ndarray], what: str, ulps: dict[int, int] | None = None) -> None:
  for i, (x, y) in enumerate(zip(got, want)):
    ok = _same(x, y)
    if (u := (ulps or {}).get(i)) is not None and x.dtype.kind == "f":
      fin = np.isfinite(x) & np.isfinite(y) & (np.signbit(x) == np.signbit(y))
      ok |= fin & (ulp_diff(np.where(fin, x, 0), np.where(fin, y, 0)) <= u)
    if not ok.all():
      idx = np.nonzero(~ok)[0][:6]
      raise AssertionError(f"{what}: output {i}: CL and C differ at {list(idx)}: CL {x[idx]} C {y[idx]}")

def both(cl, ast, outs, ins, opts=None):
  return run(ast, outs, ins, cl, opts=opts), run(ast, outs, ins, "CPU:C", opts=opts)

@pytest.mark.parametrize("fr", ALL, ids=lambda d: d.name)
def test_casts_agree_with_c(cl, fr):
  rng = np.random.default_rng(12)
  a = np.concatenate([special_values(fr), random_values(fr, 200, rng)])
  n = len(a)
  x = load(len(ALL), fr, (n,))
  ast = sink(*[store(i, (n,), x.cast(to)) for i, to in enumerate(ALL)])
  assert_agree(*both(cl, ast, [(n, to) for to in ALL], [(a, fr)]), f"casts from {fr.name}")

@pytest.mark.parametrize("dt", INTS + [dtypes.bool], ids=lambda d: d.name)
def test_int_chains_agree_with_c(cl, dt):
  rng = np.random.default_rng(11)
  a = np.concatenate([special_values(dt), random_values(dt, 300, rng)])
  b = np.concatenate([random_values(dt, 300, rng), special_values(dt)])
  n = len(a)
  x, y = load(3, dt, (n,)), load(4, dt, (n,))
  if dt == dtypes.bool: es = [(x ^ y) | (x & y), (x < y).where(x, y), x.alu(Ops.MAX, y) * y]
  else:
    es = [(x * y - x) // (y | 1) + x % (y + 3), (x << y) ^ (x >> (y + 1)) & y,
          (x < y).where(x.alu(Ops.MAX, y), -x) + (x.ne(y)).cast(dt)]
  ast = sink(*[store(i, (n,), e) for i, e in enumerate(es)])
  assert_agree(*both(cl, ast, [(n, dt)] * 3, [(a, dt), (b, dt)]), f"int chain {dt.name}")

@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_float_chains_agree_with_c(cl, dt):
  if not Device[cl].supports_dtype(dt): pytest.skip(f"{cl} has no {dt.name}")
  rng = np.random.default_rng(10)
  a = np.concatenate([special_values(dt), random_values(dt, 300, rng)])
  b = np.concatenate([random_values(dt, 300, rng), special_values(dt)])
  n = len(a)
  x, y = load(5, dt, (n,)), load(6, dt, (n,))
  es = [(x * y + x) / (y.alu(Ops.SQRT) + 1.0) - x.alu(Ops.TRUNC),   # exact: IEEE division and sqrt on both sides
        (x < y).where(x.alu(Ops.RECIP), -y).alu(Ops.MAX, x * 0.5),
        x.alu(Ops.MULACC, y, x) if dt.itemsize >= 4 else x * y + x,
        (x * 0.25).alu(Ops.EXP2), y.alu(Ops.LOG2) + x.alu(Ops.SIN)]   # OpenCL C 1.2 7.4: exp2 3 ulp, log2 3 ulp, sin 4 ulp
  ast = sink(*[store(i, (n,), e) for i, e in enumerate(es)])
  # bfloat16 and half round the float32 result, so a few float32 ulps are at most one of theirs
  assert_agree(*both(cl, ast, [(n, dt)] * 5, [(a, dt), (b, dt)]), f"float chain {dt.name}", ulps={3: 4, 4: 8 if dt.itemsize >= 4 else 1})

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16, f32], ids=lambda d: d.name)
def test_reductions_agree_with_c(cl, dt):
  # sum, product and max in the order of one loop (no opts): half and bfloat16 accumulators round after every step
  rng = np.random.default_rng(15)
  x = np.concatenate([special_values(dt)[:40], random_values(dt, 200, rng)])[:240]
  ld = load(3, dt, (8, 30))
  ast = sink(*[store(i, (8, 1), reduce(ld, op, (1,))) for i, op in enumerate((Ops.ADD, Ops.MUL, Ops.MAX))])
  assert_agree(*both(cl, ast, [(8, dt)] * 3, [(x, dt)], opts=[]), f"{dt.name} reductions")

def test_matmul_with_the_gpu_heuristic_matches_numpy(cl):
  from tests.unit.test_renderers_agree import matmul_ast
  M, K, N = 33, 20, 40
  rng = np.random.default_rng(13)
  a, b = rng.standard_normal(M * K).astype(np.float32), rng.standard_normal(K * N).astype(np.float32)
  (out,) = run(matmul_ast(M, K, N), [(M * N, f32)], [(a, f32), (b, f32)], cl)
  np.testing.assert_allclose(out.reshape(M, N), a.reshape(M, K) @ b.reshape(K, N), rtol=1e-5, atol=1e-5)

# ---- rendering alone (no device)
def test_a_device_without_fp64_is_refused_float64_and_gets_no_double_in_its_source():
  ren = OpenCLRenderer(fp64=False)
  with pytest.raises(KernelError, match=r"dtype dtypes.double is not supported by the OpenCL renderer \(used by DEFINE_GLOBAL\)"):
    get_program(sink(store(0, (4,), load(1, dtypes.float64, (4,)) + 1.0)), ren)
  src = get_program(sink(store(0, (4,), load(1, dtypes.float16, (4,)).cast(f32).alu(Ops.SQRT))), ren).src
  assert "double" not in src and "cl_khr_fp64" not in src
  assert "__global half* restrict data1" in src and "vload_half(0, " in src   # half storage needs no extension

def test_kernel_signature_bool_buffers_and_variables():
  from baregrad.ir.ops import UOp
  n = UOp.variable("n", 0, 100)
  ast = sink(store(0, (4,), load(1, dtypes.bool, (4,)) & (load(2, dtypes.int64, (4,)) < n.cast(dtypes.int64))))
  src = get_program(ast, OpenCLRenderer()).src
  assert "__kernel void" in src and "__global uchar* restrict data0, __global uchar* restrict data1, __global long* restrict data2, const long n_arg" in src
  assert "const int n = (int)n_arg;" in src and "#pragma OPENCL FP_CONTRACT OFF" in src

def test_c_renderer_output_is_untouched_by_the_shared_code():
  # the C prelude still opens with the CPU's own typedef and uses the GCC builtins
  assert PRELUDE.startswith("\ntypedef unsigned long long u64;\n") and "__builtin_signbit(a)" in PRELUDE
  src = get_program(sink(store(0, (4,), load(1, f32, (4,)).alu(Ops.EXP2))), CRenderer()).src
  # (float32 exp2 is the CPU's own function, the LLVM renderer's in C: codegen/renderer/cpumath.py)
  assert "bg_exp2f(" in src and "static inline float bg_exp2f(float x)" in src and "__builtin_exp2f(" not in src
