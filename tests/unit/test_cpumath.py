"""The CPU's vector float32 EXP2, LOG2 and SIN (codegen/renderer/cpumath.py) against float64 references, in ulps of
the float32 result, over ranges that cover each function's special cases: subnormal results and inputs, overflow,
signed zeros, infinities, NaN, arguments near multiples of pi/2 and past the fast reduction's limit."""
import numpy as np
import pytest
from baregrad import Tensor
from baregrad.codegen.renderer import cpumath
from baregrad.engine.runner import compile_ast

DEV = "CPU:LLVM"   # the LLVM renderer, whatever DEV says; the C renderer computes the same functions
devices = pytest.mark.parametrize("dev", [DEV, "CPU:C"])
rng = np.random.default_rng(7)

def _ours(fn: str, x: np.ndarray, dev: str = DEV) -> np.ndarray:
  return getattr(Tensor(x, device=dev), fn)().numpy()

def _ulps(got: np.ndarray, want64: np.ndarray) -> np.ndarray:
  """|got - want| in units of the float32 spacing at want (0 where both are the same non-finite value or NaN)."""
  with np.errstate(over="ignore"): want32 = want64.astype(np.float32)
  same = (got == want32) | (np.isnan(got) & np.isnan(want32))
  with np.errstate(invalid="ignore", over="ignore"):
    err = np.abs(got.astype(np.float64) - want64) / np.spacing(np.abs(want32)).astype(np.float64)
  return np.where(same, 0.0, err)

def _check(fn: str, x: np.ndarray, ref, bound: float, dev: str) -> None:
  x = x.astype(np.float32)
  with np.errstate(all="ignore"): want = ref(x.astype(np.float64))
  got = _ours(fn, x, dev)
  e = _ulps(got, want)
  worst = int(np.argmax(e))
  assert e[worst] <= bound, f"{fn}({x[worst]!r}) = {got[worst]!r}, float64 says {want[worst]!r}: {e[worst]:.2f} ulp (bound {bound})"

def _special(*vals: float) -> np.ndarray: return np.array(vals, dtype=np.float32)

@devices
def test_exp2_within_1_ulp_from_underflow_to_overflow(dev):
  x = np.concatenate([rng.uniform(-160, 140, 200_000), rng.uniform(-1, 1, 50_000), rng.uniform(-150, -125, 50_000),
                      _special(0.0, -0.0, -149, -150, -151, -126, -125.5, 127, 127.99, 128, 1e-30, -1e-30, 3e38, -3e38)])
  _check("exp2", x, np.exp2, 1.0, dev)

@devices
def test_exp2_special_values_are_libms(dev):
  got = _ours("exp2", _special(np.inf, -np.inf, np.nan, 0.0, -0.0, 128.0, -200.0), dev)
  assert np.isposinf(got[0]) and got[1] == 0.0 and np.isnan(got[2]) and got[3] == 1.0 and got[4] == 1.0
  assert np.isposinf(got[5]) and got[6] == 0.0 and not np.signbit(got[6])

@devices
def test_log2_within_1_5_ulp_over_every_exponent_and_subnormals(dev):
  bits = rng.integers(1, 0x7F800000, 300_000, dtype=np.uint32)   # every positive finite float, subnormals included
  x = np.concatenate([bits.view(np.float32), rng.uniform(0.99, 1.01, 50_000).astype(np.float32),
                      rng.uniform(0.5, 2.0, 50_000).astype(np.float32),
                      _special(1.0, 2.0, 0.5, 1.4142135, 1.4142137, 0.70710677, 1e-45, 1.1754942e-38, 1.1754944e-38, 3.4028235e38)])
  _check("log2", x, np.log2, 1.5, dev)

@devices
def test_log2_special_values_are_libms(dev):
  got = _ours("log2", _special(0.0, -0.0, -1.0, -np.inf, np.inf, np.nan, 1.0), dev)
  assert np.isneginf(got[0]) and np.isneginf(got[1]) and np.isnan(got[2]) and np.isnan(got[3])
  assert np.isposinf(got[4]) and np.isnan(got[5]) and got[6] == 0.0

@devices
def test_sin_within_2_ulp_in_the_fast_range_and_past_it(dev):
  # (numpy's float32 sin, libm's sinf, measured 1.37 ulp on [-10, 10] here; ours 1.45 over these ranges)
  k = rng.integers(-40000, 40000, 50_000)
  near = (k * (np.pi / 2)).astype(np.float32)   # the float32s nearest multiples of pi/2: r cancels most of x
  x = np.concatenate([rng.uniform(-10, 10, 200_000), rng.uniform(-65536, 65536, 100_000), near,
                      rng.uniform(-1e6, 1e6, 2_000), _special(1e10, -1e30, 3e38, 65535.996, 65536.0, 1e-30, -1e-30, 1e-45, 1.5707964, 3.1415927)])
  _check("sin", x, np.sin, 2.0, dev)

@devices
def test_sin_special_values_are_libms(dev):
  got = _ours("sin", _special(0.0, -0.0, np.inf, -np.inf, np.nan), dev)
  assert got[0] == 0.0 and not np.signbit(got[0]) and got[1] == 0.0 and np.signbit(got[1])
  assert np.isnan(got[2:]).all()

@pytest.mark.parametrize("fn", ["exp2", "log2", "sin"])
def test_a_lane_gives_the_same_result_in_a_vector_and_alone(fn):
  """The loop's vector body and its scalar tail compute the same function: each element alone (a 1-element tensor,
  scalar code) equals the same element inside a long tensor (vector code). For sin, some lanes lie past its fast range
  (libm takes those lanes only, the others of their vector keep the fast path's values)."""
  x = rng.uniform(-50, 50, 4099).astype(np.float32)
  if fn == "log2": x = np.abs(x) + np.float32(1e-3)
  if fn == "sin": x[::7] *= np.float32(1e5)
  whole = _ours(fn, x)
  picks = list(range(0, 4099, 257)) + [1, 2, 3, 8, 9]   # (lanes next to a slow-path one too)
  alone = np.concatenate([_ours(fn, x[i:i + 1]) for i in picks])
  assert np.array_equal(whole[picks], alone)

def test_helpers_are_used_only_where_asked():
  """The CPU renderers (LLVM IR and C) call the helpers for float32, and for float64 exp2 and log2; float64 sin keeps
  libm, and the GPU dialects built on them (AMDGPU's LLVM IR, CUDA C, OpenCL C) keep their own functions."""
  from baregrad.codegen.renderer.llvmir import LLVMRenderer
  from baregrad.codegen.renderer.amdgpu import AMDGPURenderer
  from baregrad.codegen.renderer.cstyle import CRenderer
  from baregrad.codegen.renderer.cuda import CUDARenderer
  from baregrad.codegen.renderer.opencl import OpenCLRenderer
  assert LLVMRenderer.own_math and CRenderer.own_math
  assert not AMDGPURenderer.own_math and not CUDARenderer.own_math and not OpenCLRenderer.own_math
  for dev, f32_call, f64_call, libm_exp2, libm_sin in ((DEV, "@bg_exp2_v", "f64(", "llvm.exp2.", "llvm.sin."),
                                                       ("CPU:C", "bg_exp2f(", "bg_exp2(", "__builtin_exp2(", "__builtin_sin(")):
    x32, x64 = Tensor(np.ones(64, np.float32), device=dev), Tensor(np.ones(64, np.float64), device=dev)
    src32 = compile_ast(x32.exp2().schedule()[-1].ast, dev).spec.src
    src64 = compile_ast(x64.exp2().schedule()[-1].ast, dev).spec.src
    sin64 = compile_ast(x64.sin().schedule()[-1].ast, dev).spec.src
    assert f32_call in src32 and libm_exp2 not in src32, dev
    assert f64_call in src64 and libm_exp2 not in src64, dev
    assert libm_sin in sin64, dev
  name, defs = cpumath.helper("sin", 8)
  assert name == "@bg_sin_v8f32" and any("@sinf" in d for d in defs)

# ---- float64 exp2 and log2 (float32 pow computes in them): against mpmath's exact values, in float64 ulps
def _ulps64(got: np.ndarray, x: np.ndarray, fn) -> float:
  import mpmath
  mpmath.mp.prec = 120
  worst = 0.0
  for g, v in zip(got, x):
    want = float(fn(mpmath.mpf(float(v))))
    if g == want or (np.isnan(g) and np.isnan(want)): continue
    if not np.isfinite(want) or want == 0: return float("inf")   # (a finite result where libm overflows, or the converse)
    worst = max(worst, abs(float(mpmath.mpf(float(g)) - fn(mpmath.mpf(float(v))))) / float(np.spacing(abs(want))))
  return worst

@devices
def test_float64_exp2_and_log2_within_1_ulp(dev):
  pytest.importorskip("mpmath")
  import mpmath
  r = np.random.default_rng(11)
  x = np.concatenate([r.uniform(-1080, 1030, 1500), r.uniform(-2, 2, 1500), [-1074.0, -1075.0, -1022.5, 1023.99, 0.5, -0.5]])
  assert _ulps64(Tensor(x, device=dev).exp2().numpy(), x, lambda v: mpmath.power(2, v)) <= 1.0
  y = np.concatenate([np.abs(r.standard_normal(1500)) * np.exp2(r.uniform(-1074, 1023, 1500)), r.uniform(0.5, 2.0, 1500),
                      [5e-324, 2.2e-308, 1.0 - 2 ** -53, 1.0 + 2 ** -52, 0.7071067811865476, 1.4142135623730951]])
  assert _ulps64(Tensor(y, device=dev).log2().numpy(), y, lambda v: mpmath.log(v, 2)) <= 1.0

@devices
def test_float64_special_values_are_libms(dev):
  with np.errstate(all="ignore"):
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1024.0, 2000.0, -1075.0, -1100.0, 3.0])
    np.testing.assert_array_equal(Tensor(x, device=dev).exp2().numpy(), np.exp2(x))
    y = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, -1.0, 1.0, 5e-324, 8.0, 2.0 ** 1023])
    np.testing.assert_array_equal(Tensor(y, device=dev).log2().numpy(), np.log2(y))

def test_float64_lane_alone_equals_lane_in_a_vector():
  x = rng.uniform(-60, 60, 1027)
  whole, picks = Tensor(x).exp2().numpy(), [0, 1, 2, 500, 1026]
  assert np.array_equal(whole[picks], np.concatenate([Tensor(x[i:i + 1]).exp2().numpy() for i in picks]))
  y = np.abs(x) + 1e-3
  whole = Tensor(y).log2().numpy()
  assert np.array_equal(whole[picks], np.concatenate([Tensor(y[i:i + 1]).log2().numpy() for i in picks]))
