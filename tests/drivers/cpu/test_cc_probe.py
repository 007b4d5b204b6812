"""The C backend's compiler probe (drivers/cpu_compile.probe_cc) and the C renderer's two ways to hold float16:
`_Float16` where the compiler has it, else its bits in an unsigned short with exact conversions (cstyle.HALF_BITS).

The fallback runs for real here: Debian 12's clang 14 has `_Float16` on x86-64 only for CPUs with AVX512-FP16, so
building for x86-64-v3 (CC_MARCH) is what it sees on most machines, whatever this CPU is. Its results must be the
native paths' (the LLVM renderer's half, gcc's `_Float16`) bit for bit, and NumPy's: casts from and to every
float16 pattern (NaN, infinities, -0, subnormals, ties to even, overflow to infinity), arithmetic, reductions (max
propagates NaN), loads and stores (padding, constants)."""
from __future__ import annotations
import math, os, platform, re, shutil, subprocess
import numpy as np
import pytest
from baregrad import knobs
from baregrad.ir.dtype import DType, dtypes
from baregrad.ir.ops import Ops
from baregrad.ir.view import ShapeTracker
from baregrad.codegen.astbuild import load, store, reduce, sink, const
from baregrad.codegen.kernel import Opt, OptOps
from baregrad.codegen.program import get_program
from baregrad.codegen.renderer.cstyle import CRenderer
from baregrad.codegen.renderer.opencl import OpenCLRenderer
from baregrad.drivers import cpu_compile
from baregrad.drivers.cpu_compile import ClangCompiler, probe_cc, cc_report
from baregrad.engine.runner import compile_ast
from baregrad.hal import CompileError
from tests.helpers import run, bits, special_values, random_values, np_dtype

h, f32, f64 = dtypes.float16, dtypes.float32, dtypes.float64
X86 = platform.machine() in ("x86_64", "AMD64")

def _major(cc: str) -> int:
  """The compiler's major version (0 if it is not installed or does not say)."""
  if shutil.which(cc) is None: return 0
  m = re.search(r"version (\d+)\.|\) (\d+)\.", subprocess.run([cc, "--version"], capture_output=True, text=True).stdout)
  return int(m.group(1) or m.group(2)) if m else 0

CLANG, GCC = _major("clang"), _major("gcc")

# name -> (knobs the device is opened with, whether float16 must be held as bits there: None where it depends)
CONFIGS = {
  "clang-v3": (dict(CC="clang", CC_MARCH="x86-64-v3"), True if CLANG == 14 else None),   # the fallback, found by the probe
  "gcc-bits": (dict(CC="gcc", CC_HALF="bits"), True),                                    # the fallback, forced
  "gcc-native": (dict(CC="gcc"), False if GCC >= 12 and X86 else None),                  # gcc 12's _Float16
}

@pytest.fixture(scope="module")
def devices():
  """get(config): a C-backend device opened with that CONFIGS entry's knobs, registered under a name of its own
  (CPU:C:40...) until the module's tests are done."""
  from baregrad.hal import Device
  from baregrad.drivers.cpu import CPUDevice
  opened: dict[str, CPUDevice] = {}
  def get(cfg: str) -> CPUDevice:
    if cfg not in opened:
      env, _ = CONFIGS[cfg]
      if shutil.which(env["CC"]) is None: pytest.skip(f"{env['CC']} is not installed")
      if cfg == "clang-v3" and not X86: pytest.skip("x86-64-v3 is an x86 target")
      with knobs.Context(**env): dev = opened[cfg] = CPUDevice(f"CPU:C:{40 + list(CONFIGS).index(cfg)}")
      Device._open[dev.device] = dev
    return opened[cfg]
  yield get
  for dev in opened.values(): dev.close()   # (which takes it out of the registry)

@pytest.fixture(params=list(CONFIGS))
def hdev(request, devices) -> str:
  """The name of a C-backend device of one CONFIGS entry."""
  dev = devices(request.param)
  want = CONFIGS[request.param][1]
  if want is not None: assert dev.renderer.half_native is not want, f"{request.param}: {dev.compiler.describe()}"
  return dev.device

def same_bits(got: np.ndarray, want: np.ndarray, what: str, inputs: np.ndarray | None = None, any_nan: bool = False) -> None:
  """Bit-identical; with any_nan a NaN may be any NaN (arithmetic: IEEE leaves a result NaN's sign and payload open,
  and which operand's NaN an x86 op passes on depends on operand order). Conversions and copies keep them exactly."""
  bg, bw = bits(got), bits(want)
  diff = (bg != bw) & ~(np.isnan(got) & np.isnan(want)) if any_nan else bg != bw
  if diff.any():
    i = np.nonzero(diff)[0][:6]
    src = f" inputs {inputs[i]!r} (bits {[hex(v) for v in bits(inputs[i])]})" if inputs is not None else ""
    raise AssertionError(f"{what}: differs at {list(i)}:{src} got {[hex(v) for v in bg[i]]}, expected {[hex(v) for v in bw[i]]}")

def numpy_agrees(got: np.ndarray, want: np.ndarray, what: str, inputs: np.ndarray | None = None) -> None:
  """Bit-exact where NumPy's answer is a number; NaN where it is NaN (NumPy keeps no quiet bit for NaN payloads)."""
  nan = np.isnan(want) if want.dtype.kind == "f" else np.zeros(want.shape, bool)
  assert (np.isnan(got[nan])).all(), f"{what}: NaN expected at {list(np.nonzero(nan & ~np.isnan(got))[0][:6])}"
  same_bits(got[~nan], want[~nan], what + " (against NumPy)", inputs[~nan] if inputs is not None else None)

def both(ast, outs, ins, dev, opts=None) -> tuple[list[np.ndarray], list[np.ndarray]]:
  """(the C device's outputs, the LLVM renderer's: native half) for the same kernel and opts. (CPU:LLVM: a plain "CPU"
  follows DEV's variant.)"""
  return run(ast, outs, ins, dev, opts=opts), run(ast, outs, ins, "CPU:LLVM", opts=opts)

ALL_HALVES = np.arange(1 << 16, dtype=np.uint16).view(np.float16)

# ---------------------------------------------------------------- the probe
@pytest.mark.skipif(CLANG != 14 or not X86, reason="what clang 14 lacks on x86-64 without AVX512-FP16")
def test_probe_finds_that_clang14_lacks_float16_without_avx512fp16():
  p = probe_cc("clang", "x86-64-v3")
  assert p.target == ("-march=x86-64-v3",) and "clang version 14" in p.version
  assert not p.float16 and "_Float16" in p.missing("_Float16") and "not supported" in p.missing("_Float16")
  assert "_Float16 no" in p.summary() and p.vectors

@pytest.mark.skipif(GCC < 12 or not X86, reason="gcc 12 has _Float16 on every x86-64")
def test_probe_finds_gcc12_float16_for_every_x86():
  for march in ("native", "x86-64-v3", "x86-64"):
    p = probe_cc("gcc", march)
    assert p.float16 and p.missing("_Float16") == "", (march, p)

def test_device_renders_for_what_the_probe_found(devices):
  for cfg, (env, _) in CONFIGS.items():
    if shutil.which(env["CC"]) is None or (cfg == "clang-v3" and not X86): continue
    dev = devices(cfg)
    forced = env.get("CC_HALF")
    assert dev.renderer.half_native == (dev.compiler.probe.float16 if forced is None else forced == "native"), cfg

@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_probe_is_cached_on_disk_keyed_by_compiler_and_flags(tmp_path, monkeypatch):
  monkeypatch.setenv("BAREGRAD_CACHE", str(tmp_path))
  monkeypatch.delenv("BAREGRAD_NOCACHE", raising=False)
  calls = []
  real = cpu_compile._probe
  monkeypatch.setattr(cpu_compile, "_probe", lambda *a: calls.append(a) or real(*a))
  uncached = probe_cc.__wrapped__   # (past the in-process cache: the disk's is what is checked)
  first = uncached("gcc", "x86-64-v3")
  assert len(calls) == 1 and len(os.listdir(tmp_path / "compile")) == 1
  assert uncached("gcc", "x86-64-v3") == first and len(calls) == 1, "the second probe must come from the disk"
  uncached("gcc", "x86-64")   # other flags: probed again, kept beside
  assert len(calls) == 2 and len(os.listdir(tmp_path / "compile")) == 2
  monkeypatch.setenv("BAREGRAD_NOCACHE", "1")
  uncached("gcc", "x86-64-v3")
  assert len(calls) == 3, "BAREGRAD_NOCACHE=1 probes again"

def test_a_compiler_that_does_not_run_or_refuses_the_target_is_named():
  with pytest.raises(CompileError, match=r"C compiler /nonexistent/cc does not run"): probe_cc.__wrapped__("/nonexistent/cc")
  cc = shutil.which("gcc") or shutil.which("clang")
  if cc is None: pytest.skip("needs gcc or clang")
  with pytest.raises(CompileError) as e: ClangCompiler(cc, march="no-such-cpu")
  msg = str(e.value)
  assert cc in msg and "-march=no-such-cpu" in msg and "CC_MARCH" in msg
  assert re.search(r"\(.*(gcc|clang).*\d+\.\d+", msg), f"the version must be named: {msg}"

# ---------------------------------------------------------------- what is rendered, and errors that name the compiler
HALF_AST = sink(store(0, (8,), (load(1, h, (8,)) * 2.0).cast(f32)), store(1, (8,), load(2, f64, (8,)).cast(h)))

def test_bits_rendering_has_no_float16_and_opencl_is_unchanged():
  native, fallback = get_program(HALF_AST, CRenderer()).src, get_program(HALF_AST, CRenderer(half_native=False)).src
  assert "_Float16" in native and "h2f(" not in native
  assert "_Float16" not in fallback and "unsigned short* restrict data1" in fallback and "d2h(" in fallback
  assert "h2f(" not in get_program(sink(store(0, (8,), load(1, f32, (8,)) * 2.0)), CRenderer(half_native=False)).src, \
    "kernels without half need no half helpers"
  cl = get_program(HALF_AST, OpenCLRenderer()).src
  assert "h2f(" not in cl and "f2h(" not in cl and "vload_half" in cl, "OpenCL keeps its own half"

@pytest.mark.skipif(CLANG != 14 or not X86, reason="needs a compiler without _Float16: clang 14 for x86-64-v3")
def test_a_kernel_needing_what_the_compiler_lacks_is_refused_naming_it(monkeypatch):
  monkeypatch.setenv("CC_HALF", "native")
  c = ClangCompiler("clang", march="x86-64-v3")
  assert c.half_native and not c.probe.float16
  with pytest.raises(CompileError) as e: c.compile(get_program(HALF_AST, CRenderer()).src)
  msg = e.value.msg
  assert "clang" in msg and "clang version 14" in msg and "has no _Float16" in msg and "-march=x86-64-v3" in msg and "CC_HALF" in msg
  c.compile(get_program(sink(store(0, (8,), load(1, f32, (8,)) * 2.0)), CRenderer()).src)   # what it has still compiles
  # a diagnostic is never shown alone: the compiler and its version come first
  with pytest.raises(CompileError) as e: c.compile("__bf16 f(__bf16 x) { return x; }")
  assert e.value.msg.startswith("the C compiler clang (Debian clang version 14") or "clang version 14" in e.value.msg.splitlines()[0]

@pytest.mark.skipif(CLANG != 14 or not X86, reason="the report of a compiler without _Float16: clang 14 for x86-64-v3")
def test_report_names_compiler_version_and_findings(monkeypatch):
  monkeypatch.setenv("CC", "clang")
  monkeypatch.setenv("CC_MARCH", "x86-64-v3")
  line = cc_report()
  assert line.startswith("clang ($CC)") and "clang version 14" in line and "-march=x86-64-v3" in line
  assert "_Float16 no" in line and "vector extensions yes" in line and "16-bit integers" in line and "not supported" in line
  monkeypatch.delenv("CC")
  assert "the first of clang, gcc, cc on PATH" in cc_report()

def test_debug2_names_the_compiler_per_compile(hdev, capsys):
  ast = sink(store(0, (13,), load(1, h, (13,)).cast(f32) * 3.0))   # (a kernel not compiled before)
  with knobs.Context(DEBUG=2): compile_ast(ast, hdev)
  from baregrad.hal import Device
  c = Device[hdev].compiler
  err = capsys.readouterr().err
  assert f"by {c.cc} ({c.version()}) {' '.join(c.probe.target)}, float16 as " in err, err

# ---------------------------------------------------------------- numerics: the fallback against the native paths
def sat_ref(a: np.ndarray, to: DType) -> np.ndarray:
  """ir/alu.py: float -> int casts truncate toward zero, saturate, NaN -> 0."""
  lo, hi = int(np.iinfo(np_dtype(to)).min), int(np.iinfo(np_dtype(to)).max)
  return np.array([0 if math.isnan(x) else hi if x >= hi else lo if x <= lo else int(x) for x in map(float, a)], np_dtype(to))

def test_every_half_converts_out_exactly(hdev):
  a, n = ALL_HALVES, len(ALL_HALVES)
  tos = [h, f32, f64, dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.int64, dtypes.uint64]
  x = load(len(tos), h, (n,))
  ast = sink(*[store(i, (n,), x.cast(t) if t != h else x) for i, t in enumerate(tos)])
  got, ref = both(ast, [(n, t) for t in tos], [(a, h)], hdev)
  for t, g, r in zip(tos, got, ref): same_bits(g, r, f"half -> {t.name} against the LLVM renderer", a)
  same_bits(got[0], a, "a half copied through a kernel keeps its bits (NaN payloads too)", a)
  with np.errstate(all="ignore"):
    numpy_agrees(got[1], a.astype(np.float32), "half -> float", a)
    numpy_agrees(got[2], a.astype(np.float64), "half -> double", a)
  assert (got[3] == (a != 0)).all(), "half -> bool: -0 is false, NaN true"
  for t, g in zip(tos[4:], got[4:]): assert (g == sat_ref(a, t)).all(), f"half -> {t.name} saturates, NaN -> 0"

def _tie_cases(dt: np.dtype) -> np.ndarray:
  """Every positive finite half, the midpoints to the next (ties: round to even), a step either side of each, the
  overflow threshold 65520, and their negatives: in dt (float32 or float64: a midpoint is exact in both)."""
  fin = ALL_HALVES[:0x7c00].astype(dt)
  nxt = ALL_HALVES[1:0x7c01].astype(dt)
  nxt[-1] = 65536.0   # (past the largest half: the midpoint 65520 is where infinity starts)
  mid = (fin + nxt) / 2
  step = np.finfo(dt).eps * np.maximum(np.abs(mid), np.finfo(dt).tiny)   # a relative step: below an ulp of dt only at the extremes
  v = np.concatenate([fin, mid, np.nextafter(mid, dt.type(np.inf)), np.nextafter(mid, dt.type(0)), mid + step * 64, mid - step * 64])
  return np.concatenate([v, -v])

def _nans_and_extremes(dt: np.dtype, rng: np.random.Generator, n: int) -> np.ndarray:
  ut = np.uint32 if dt == np.float32 else np.uint64
  width = 32 if dt == np.float32 else 64
  exp = (1 << (width - 1)) - (1 << (23 if dt == np.float32 else 52))   # the all-ones exponent
  payload = rng.integers(1, 1 << (23 if dt == np.float32 else 52), 64, dtype=np.uint64).astype(ut)
  nans = np.concatenate([payload | ut(exp), payload | ut(exp) | ut(1 << (width - 1))]).view(dt)   # quiet and signalling, both signs
  randbits = rng.integers(0, 2 ** width - 1, n, dtype=np.uint64, endpoint=True).astype(ut).view(dt)
  tiny = np.array([2.0 ** -24, 2.0 ** -25, 1.5 * 2.0 ** -25, 2.0 ** -26, 2.0 ** -14, 2.0 ** -14 - 2.0 ** -25, 1e-30, 1e-45, 0.0, -0.0,
                   np.inf, -np.inf, 65504.0, 65519.0, 65520.0, 65521.0, 1e10, -1e10, 3.4e38], dtype=dt)
  return np.concatenate([nans, randbits, tiny, -tiny])

@pytest.mark.parametrize("src", [f32, f64], ids=lambda d: d.name)
def test_floats_round_to_half_exactly(hdev, src):
  dt = np.dtype(np.float32 if src == f32 else np.float64)
  rng = np.random.default_rng(39)
  a = np.concatenate([_tie_cases(dt), _nans_and_extremes(dt, rng, 50_000)])
  if src == f64:  # just above and below a tie by less than a float32 ulp: a cast through float would round twice
    mid = _tie_cases(dt)[0x7c00:2 * 0x7c00]
    a = np.concatenate([a, mid * (1 + 2.0 ** -40), mid * (1 - 2.0 ** -40)])
  n = len(a)
  (got,), (ref,) = both(sink(store(0, (n,), load(1, src, (n,)).cast(h))), [(n, h)], [(a, src)], hdev)
  same_bits(got, ref, f"{src.name} -> half against the LLVM renderer", a)
  with np.errstate(all="ignore"): numpy_agrees(got, a.astype(np.float16), f"{src.name} -> half", a)

@pytest.mark.parametrize("src", [dtypes.int64, dtypes.int32, dtypes.uint64, dtypes.uint8, dtypes.bool], ids=lambda d: d.name)
def test_ints_round_to_half_exactly(hdev, src):
  info = np.iinfo(np_dtype(src)) if src != dtypes.bool else None
  v = [0, 1, 2, 3, 255] if src == dtypes.uint8 else [0, 1] if src == dtypes.bool else \
      [0, 1, 2, 2047, 2048, 2049, 2050, 2051, 4097, 4098, 4099, 65504, 65519, 65520, 65535, 65536, 2 ** 24 - 1, 2 ** 24 + 1,
       2 ** 31 - 1, info.max, info.max - 1, info.min, info.min + 1] + \
      ([-1, -2049, -2051, -65519, -65520, -(2 ** 31)] if info.min < 0 else [])
  a = np.array([x for x in v if src == dtypes.bool or info.min <= x <= info.max], dtype=np_dtype(src))
  n = len(a)
  (got,), (ref,) = both(sink(store(0, (n,), load(1, src, (n,)).cast(h))), [(n, h)], [(a, src)], hdev)
  same_bits(got, ref, f"{src.name} -> half against the LLVM renderer", a)
  with np.errstate(all="ignore"):
    want = np.array([np.float16(int(x)) if abs(int(x)) < 2 ** 24 else math.copysign(np.inf, int(x)) for x in a], np.float16)
  same_bits(got, want, f"{src.name} -> half against NumPy", a)

def test_half_arithmetic_is_float32_rounded_to_half(hdev):
  rng = np.random.default_rng(40)
  sv = special_values(h)
  a = np.concatenate([np.repeat(sv, len(sv)), random_values(h, 4000, rng)])
  b = np.concatenate([np.tile(sv, len(sv)), random_values(h, 4000, rng)])
  n = len(a)
  x, y = load(6, h, (n,)), load(7, h, (n,))
  exprs = [x + y, x * y, x / y, x.alu(Ops.MAX, y), -x + (x < y).where(x, y) * 0.5, (x.ne(y)).where(y, x - y)]
  got, ref = both(sink(*[store(i, (n,), e) for i, e in enumerate(exprs)]), [(n, h)] * len(exprs), [(a, h), (b, h)], hdev)
  for i, (g, r) in enumerate(zip(got, ref)): same_bits(g, r, f"expression {i} against the LLVM renderer", a, any_nan=True)
  fa, fb = a.astype(np.float32), b.astype(np.float32)
  with np.errstate(all="ignore"):
    for i, want in enumerate([fa + fb, fa * fb, fa / fb]): numpy_agrees(got[i], want.astype(np.float16), f"expression {i}", a)
    mx = np.where(np.isnan(fa) | np.isnan(fb), np.float32(np.nan), np.maximum(fa, fb)).astype(np.float16)
    numpy_agrees(np.where(mx == 0, np.abs(got[3]), got[3]), np.where(mx == 0, np.abs(mx), mx), "max", a)   # (+0 > -0: checked by LLVM above)

@pytest.mark.parametrize("opts", [None, [], [Opt(OptOps.UNROLL, 1, 5)], [Opt(OptOps.UPCAST, 0, 4)]], ids=str)
def test_half_reductions_agree_and_max_propagates_nan(hdev, opts):
  rng = np.random.default_rng(41)
  rows = random_values(h, 8 * 30, rng).reshape(8, 30)
  rows[1, 7] = np.nan                                     # max and sum: NaN
  rows[2] = -0.0; rows[2, 29] = 0.0                       # max(-0, ..., +0) is +0
  rows[3, 3], rows[3, 4] = np.inf, -np.inf                # sum: NaN, max: inf
  rows[4] = np.float16(6e-8)                              # subnormals add up exactly
  rows[5] = 60000                                         # the sum overflows to infinity
  rows[6] = -np.inf
  a = rows.reshape(-1)
  ld = load(3, h, (8, 30))
  ast = sink(*[store(i, (8, 1), reduce(ld, op, (1,))) for i, op in enumerate((Ops.ADD, Ops.MUL, Ops.MAX))])
  got, ref = both(ast, [(8, h)] * 3, [(a, h)], hdev, opts=opts)
  for g, r, op in zip(got, ref, ("sum", "prod", "max")): same_bits(g, r, f"{op} rows (opts {opts}) against the LLVM renderer", any_nan=True)
  mx = got[2]
  assert np.isnan(mx[1]) and bits(mx[2:3])[0] == 0x0000 and mx[3] == np.inf and mx[6] == -np.inf
  assert (mx[[0, 4, 5, 7]] == rows[[0, 4, 5, 7]].max(axis=1)).all()
  assert np.isnan(got[0][1]) and np.isnan(got[0][3]) and got[0][5] == np.inf and got[0][4] == np.float16(30 * 2.0 ** -24)

def test_half_loads_stores_padding_and_constants(hdev):
  a = ALL_HALVES[::7].copy()
  n = len(a)
  padded = ShapeTracker.from_shape((n,)).pad(((3, 5),))        # the padding reads as +0
  (got,), (ref,) = both(sink(store(0, (n + 8,), load(1, h, padded))), [(n + 8, h)], [(a, h)], hdev)
  same_bits(got, ref, "a padded view against the LLVM renderer")
  assert (bits(got[:3]) == 0).all() and (bits(got[-5:]) == 0).all()
  same_bits(got[3:-5], a, "a padded view's inner part is the input, bits and all")
  consts = [np.nan, -np.inf, np.inf, -0.0, 6e-8, 2.0 ** -25, 65504.0, 65520.0, 70000.0, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11]
  outs = [store(0, (n,), load(len(consts) + 1, h, ShapeTracker.from_shape((n,)).flip((True,))))]
  outs += [store(1 + i, (n,), const(h, c, (n,))) for i, c in enumerate(consts)]
  got, ref = both(sink(*outs), [(n, h)] * (len(consts) + 1), [(a, h)], hdev)
  for i, (g, r) in enumerate(zip(got, ref)): same_bits(g, r, f"output {i} against the LLVM renderer")
  same_bits(got[0], a[::-1], "a flipped view")
  with np.errstate(all="ignore"):
    for c, g in zip(consts, got[1:]): numpy_agrees(g[:1], np.array([c]).astype(np.float16), f"constant {c!r}")

def test_tensor_programs_in_half_match_native_c_bit_for_bit(hdev, devices):
  # whole programs: the kernels the scheduler fuses, with the heuristic's opts (the same for every C device, so the
  # same order of operations as on gcc's _Float16)
  from baregrad import Tensor
  ref = devices("gcc-native")
  if not ref.renderer.half_native: pytest.skip("gcc has no _Float16 here")
  if hdev == ref.device: pytest.skip("the reference itself")
  rng = np.random.default_rng(42)
  a, b = (rng.standard_normal((33, 40)) * 4).astype(np.float16), rng.standard_normal((40, 17)).astype(np.float16)
  a[3, 5], a[7], a[9, 9], a[10, :4] = np.nan, np.inf, -0.0, np.float16(6e-8)
  def program(dev: str) -> list[np.ndarray]:
    x, y = Tensor(a, device=dev), Tensor(b, device=dev)
    outs = [x @ y, (x * 2 - 1).sum(1), x.max(0).values, x.softmax(-1), (x.float() * 1.5).half(), x.int(), (x / 3).exp(), x.cast(dtypes.float64)]
    return [t.numpy() for t in outs]
  for i, (g, w) in enumerate(zip(program(hdev), program(ref.device))): same_bits(g.reshape(-1), w.reshape(-1), f"program output {i}", any_nan=True)
