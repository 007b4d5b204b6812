"""PTX and CUDA C renderers: every kernel of a representative set renders, assembles with ptxas for sm_80, sm_89 and
sm_90 (nvcc -cubin for CUDA C), and the cubin's metadata reads back. No GPU here: numerical checks come from the PTX
interpreter (drivers/mock) later. ptxas takes ~0.1 s a call, so kernels are assembled many per module."""
from __future__ import annotations
import functools, re, struct
import pytest
from baregrad.ir.dtype import DType, dtypes, ALL
from baregrad.ir.ops import UOp, Ops
from baregrad.ir.view import ShapeTracker
from baregrad.codegen.astbuild import load, store, const, reduce, sink
from baregrad.codegen.kernel import Opt, OptOps
from baregrad.codegen.program import get_program
from baregrad.codegen.renderer import RenderError
from baregrad.codegen.renderer.ptx import PTXRenderer, param_layout
from baregrad.drivers.nv.hw import ARCHS as NV_ARCHS
from baregrad.drivers.nv_compile import PTXCompiler, CUDACompiler, find_ptxas, find_nvcc, parse_cubin, parse_nv_info, CubinError
from baregrad.hal import CompileError

ARCHS = ("sm_80", "sm_89", "sm_90")
need_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas not found ($PTXAS, PATH, /usr/local/cuda*/bin, nvidia-cuda-nvcc wheel)")
need_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found ($NVCC, PATH, /usr/local/cuda*/bin)")

INTS = [d for d in ALL if dtypes.is_int(d)]
FLOATS = [dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]
N = 37  # an awkward size: partial workgroups, odd loops

# ---- the kernel set
def _ew(dt: DType) -> UOp:
  """Every ALU op that takes dt, and a cast to every dtype, in one kernel (one STORE per result)."""
  sh = (N,)
  a, b, c = load(1, dt, sh), load(2, dt, sh), load(3, dt, sh)
  cond = load(4, dtypes.bool, sh)
  outs: list[UOp] = []
  if dt == dtypes.bool:
    outs += [a & b, a | c, a ^ b, a.ne(b), a.eq(b), a < b, -a, cond.where(a, b), a.maximum(b), a + b, a * b]
  else:
    outs += [a + b, a - b, a * b, a.maximum(b), a < b, a.ne(b), a.eq(b), cond.where(a, b), -a]
    if dtypes.is_int(dt): outs += [a // b, a % b, a & b, a | b, a ^ b, a << b, a >> b, UOp(Ops.MULACC, dt, (a, b, c))]
    else:
      outs += [a / b, UOp(Ops.RECIP, dt, (a,))] + [UOp(op, dt, (a,)) for op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.TRUNC)]
      outs += [UOp(Ops.MULACC, dt, (a, b, c))]
  outs += [a.cast(t) for t in ALL if t != dt]
  if dt.itemsize > 1 and dt != dtypes.bool:
    same = [t for t in ALL if t.itemsize == dt.itemsize and t != dt and t != dtypes.bool]
    outs += [UOp(Ops.BITCAST, t, (a,)) for t in same]
  return sink(*[store(5 + i, sh, o) for i, o in enumerate(outs)])

def _matmul(dt: DType = dtypes.float32, M: int = 16, K: int = 24, Nn: int = 32) -> UOp:
  sa = ShapeTracker.from_shape((M, K)).reshape((M, 1, K)).expand((M, Nn, K))
  sb = ShapeTracker.from_shape((K, Nn)).permute((1, 0)).reshape((1, Nn, K)).expand((M, Nn, K))
  return sink(store(0, (M, Nn, 1), reduce(load(1, dt, sa) * load(2, dt, sb), Ops.ADD, (2,))))

def _reduce(dt: DType, op: Ops, shape=(8, 45), axis=1) -> UOp:
  out = tuple(1 if i == axis else s for i, s in enumerate(shape))
  return sink(store(0, out, reduce(load(1, dt, shape), op, (axis,))))

def _pad() -> UOp:
  st = ShapeTracker.from_shape((5, 7)).pad(((1, 2), (3, 0))).shrink(((0, 7), (1, 9)))
  return sink(store(0, (7, 8), load(1, dtypes.float32, st) * const(dtypes.float32, 2.0, (7, 8)) + const(dtypes.float32, 1.0, st)))

def _two_reduces() -> UOp:  # softmax-like: max and sum over the same axis, then elementwise
  sh, out = (4, 33), (4, 1)
  x = load(1, dtypes.float32, sh)
  m = reduce(x, Ops.MAX, (1,))
  return sink(store(0, out, reduce(x * const(dtypes.float32, 1.5, sh), Ops.ADD, (1,)) + m))

def _var_kernel() -> UOp:
  v = UOp.variable("n", 0, 100)
  return sink(store(0, (N,), load(1, dtypes.int32, (N,)) * v), store(2, (N,), load(1, dtypes.int32, (N,)) + UOp.variable("a_b", -5, 5)))

def kernel_set() -> list[tuple[str, UOp, list[Opt] | None]]:
  ks: list[tuple[str, UOp, list[Opt] | None]] = [(f"ew_{d.name}", _ew(d), None) for d in ALL]
  ks += [(f"ew_noopt_{d.name}", _ew(d), []) for d in (dtypes.int8, dtypes.float16, dtypes.bfloat16, dtypes.float32)]
  for dt in (dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.float64, dtypes.int32, dtypes.int8, dtypes.uint64, dtypes.bool):
    for op in (Ops.ADD, Ops.MAX, Ops.MUL):
      if dt == dtypes.bool and op is Ops.MUL: continue
      ks.append((f"red_{op.name}_{dt.name}", _reduce(dt, op), None))
  ks.append(("red_full", _reduce(dtypes.float32, Ops.ADD, (1, 300), 1), None))
  ks.append(("red_axis0", _reduce(dtypes.float32, Ops.ADD, (45, 8), 0), None))
  ks += [("matmul", _matmul(), None), ("matmul_f16", _matmul(dtypes.float16), None), ("matmul_f64", _matmul(dtypes.float64), None),
         ("pad", _pad(), None), ("pad_noopt", _pad(), []), ("two_reduces", _two_reduces(), None), ("var", _var_kernel(), None)]
  # opts combos (GPU: PARALLEL = a grid axis, LOCAL = a workgroup axis, UPCAST/UNROLL = lanes, SPLIT = loops)
  combos = {
    "mm": (_matmul(), [[], [Opt(OptOps.PARALLEL, 0)], [Opt(OptOps.LOCAL, 1, 8), Opt(OptOps.PARALLEL, 0), Opt(OptOps.PARALLEL, 1)],
                       [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 2, 4), Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.PARALLEL, 0)],
                       [Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UNROLL, 2, 3), Opt(OptOps.LOCAL, 1, 2),
                        Opt(OptOps.LOCAL, 0, 8), Opt(OptOps.PARALLEL, 1)],
                       [Opt(OptOps.SPLIT, 2, 6), Opt(OptOps.LOCAL, 0, 16), Opt(OptOps.PARALLEL, 1)],
                       [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.LOCAL, 2, 4), Opt(OptOps.PARALLEL, 0), Opt(OptOps.PARALLEL, 2),
                        Opt(OptOps.SPLIT, 4, 2)]]),
    "red": (_reduce(dtypes.float32, Ops.ADD, (16, 64), 1), [[Opt(OptOps.UNROLL, 1, 8), Opt(OptOps.LOCAL, 0, 16)],
                                                           [Opt(OptOps.SPLIT, 1, 8), Opt(OptOps.UNROLL, 2, 4), Opt(OptOps.PARALLEL, 0)]]),
    "ewo": (_ew(dtypes.float32), [[Opt(OptOps.UPCAST, 0, 37)], [Opt(OptOps.LOCAL, 0, 37)], [Opt(OptOps.PARALLEL, 0)]]),
    "ew3d": (sink(store(0, (4, 6, 8), load(1, dtypes.float32, ShapeTracker.from_shape((8, 6, 4)).permute((2, 1, 0))) + 1.0)),
             [[Opt(OptOps.LOCAL, 2, 4), Opt(OptOps.PARALLEL, 0), Opt(OptOps.PARALLEL, 1), Opt(OptOps.PARALLEL, 2)],
              [Opt(OptOps.UPCAST, 2, 4), Opt(OptOps.LOCAL, 1, 2), Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.PARALLEL, 0)]]),
  }
  for nm, (ast, lists) in combos.items():
    for i, opts in enumerate(lists): ks.append((f"opt_{nm}_{i}", ast, opts))
  return ks

@functools.cache
def rendered() -> list[tuple[str, str, object]]:
  out = []
  for nm, ast, opts in kernel_set():
    p = get_program(ast, PTXRenderer(), opts, name=nm)
    out.append((nm, p.src, p))
  return out

def _combine(srcs: list[str]) -> str:
  """One PTX module holding many kernels (one ptxas run): the header once, then each .entry."""
  head = srcs[0][:srcs[0].index(".visible .entry")]
  return head + "\n".join(s[s.index(".visible .entry"):] for s in srcs)

# ---- tests
def test_renderer_flags_and_header():
  r = PTXRenderer("sm_89")
  assert (r.name, r.has_local, r.global_max, r.local_max, r.vectorized) == ("PTX", True, (2 ** 31 - 1, 65535, 65535), 1024, False)
  src = get_program(sink(store(0, (4096,), load(1, dtypes.float32, (4096,)) + 1.0)), r).src
  assert re.search(r"^\.version 8\.\d$", src, re.M) and ".target sm_89" in src and ".address_size 64" in src
  assert "%ctaid.x" in src and "%tid.x" in src
  with pytest.raises(ValueError): PTXRenderer("sm_70")

def test_params_in_buffer_then_var_order():
  p = [x for x in rendered() if x[0] == "var"][0]
  src = p[1]
  names = re.findall(r"\.param \.(\w+) (\w+)", src)
  assert names == [("u64", "data0"), ("u64", "data1"), ("u64", "data2"), ("s32", "var_a_b"), ("s32", "var_n")]
  spec = p[2]
  assert [x[:2] for x in param_layout(spec.bufs, spec.vars)] == [("data0", 0), ("data1", 8), ("data2", 16), ("var_a_b", 24), ("var_n", 28)]

def test_semantics_in_the_text():
  src = dict((nm, s) for nm, s, _ in rendered())
  i32 = src["ew_int"]
  assert "div.s32" in i32 and "setp.eq.s32" in i32 and ", -1;" in i32      # guarded division
  assert re.search(r"and\.b32 %r\d+, %r\d+, 31;", i32)                      # shift amount modulo 32
  f32 = src["ew_float"]
  assert "max.NaN.f32" in f32 and "setp.neu.f32" in f32 and "setp.num.f32" in f32 and "cvt.rzi.sat.s32.f32" in f32
  assert "ex2.approx.f32" in f32 and "lg2.approx.f32" in f32 and "sin.approx.f32" in f32 and "sqrt.rn.f32" in f32
  assert "rcp.rn.f32" in f32 and "div.rn.f32" in f32 and not re.search(r"\b(add|sub|mul)\.f32", f32)   # no contraction
  assert "fma.rn.f32" in src["matmul"]                                      # ASSIGN of ADD with MUL
  assert "cvt.s16.s8" in src["ew_char"]                                     # 8-bit results wrap
  assert re.search(r"@%p\d+ ld\.global", src["pad"]) and "st.global.u8" in src["ew_bool"]
  assert "%tid.x" in src["opt_ewo_1"] and "%ctaid" not in src["opt_ewo_1"] and "bra" not in src["opt_ewo_1"]  # LOCAL 37: no loop
  assert "bra" in src["opt_ewo_0"] or "%tid" not in src["opt_ewo_0"]

@need_ptxas
@pytest.mark.parametrize("arch", ARCHS)
def test_every_kernel_assembles(arch):
  srcs = [s for _, s, _ in rendered()]
  comp = PTXCompiler(arch)
  try: lib = comp.compile(_combine(srcs))
  except CompileError:
    for nm, s, _ in rendered(): comp.compile(s)  # find the culprit, with its name in the error
    raise
  info = parse_cubin(lib)
  assert info["arch"] == arch
  names = {nm for nm, _, _ in rendered()}
  assert names <= set(info["kernels"]), names - set(info["kernels"])
  off = NV_ARCHS[arch].param_off
  for nm, _, p in rendered():
    k = info["kernels"][nm]
    lay = param_layout(p.bufs, p.vars)
    assert k["regs"] > 0 and len(k["code"]) > 0
    assert k["text_regs"] in (0, k["regs"])   # sm_80/89 repeat EIATTR_REGCOUNT in .text's sh_info >> 24; sm_90 leaves it 0
    assert k["max_threads"] == p.local_size, nm
    assert k["param_cbank"] == (off, lay[-1][1] + lay[-1][2]), (nm, k["param_cbank"])
    assert [(o, s) for _, o, s in k["params"]] == [(o, s) for _, o, s in lay], nm

@need_ptxas
def test_single_kernel_cubin_metadata():
  nm, s, p = [x for x in rendered() if x[0] == "opt_mm_2"][0]
  for arch, off in (("sm_80", NV_ARCHS["sm_80"].param_off), ("sm_90", NV_ARCHS["sm_90"].param_off)):
    info = parse_cubin(PTXCompiler(arch).compile(s))
    k = info["kernels"][nm]
    assert 0 < k["regs"] <= 255 and k["shared"] == 0 and k["param_cbank"] == (off, 24)
    assert [n for n, _ in k["attrs"]].count("KPARAM_INFO") == 3 and "EXIT_INSTR_OFFSETS" in [n for n, _ in k["attrs"]]
    assert k["cbank0_size"] == off + 24
  # the workgroup size (.maxntid, from the thread indices) shows up as EIATTR_MAX_THREADS
  assert p.local_size == (8, 1, 1) and k["max_threads"] == p.local_size

def test_cubin_parse_errors():
  with pytest.raises(CubinError): parse_cubin(b"\x7fELF garbage")
  with pytest.raises(CubinError): parse_nv_info(struct.pack("<BBH", 4, 0x2f, 8) + b"\0" * 4)
  assert parse_nv_info(struct.pack("<BBH", 3, 0x19, 24) + struct.pack("<BBH", 1, 0x2a, 0)) == [(3, 0x19, 24), (1, 0x2a, None)]

@need_ptxas
def test_ptxas_error_is_a_compile_error():
  with pytest.raises(CompileError, match="ptxas"):
    PTXCompiler("sm_90").compile(".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k() { bogus.op; }\n")

def test_vectors_are_rejected():
  u = [UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 0), UOp(Ops.CONST, dtypes.float32.vec(4), (), 1.0)]
  with pytest.raises(RenderError): PTXRenderer().render("k", u)

# ---- CUDA C
def _cuda_rendered() -> list[tuple[str, str]]:
  from baregrad.codegen.renderer.cuda import CUDARenderer
  # not bfloat16 reductions: the C renderers keep a bfloat16 accumulator as its raw bits (a known gap, CPU too)
  ks = [k for k in kernel_set() if k[0].startswith(("ew_", "red_ADD", "red_MAX_float", "matmul", "pad", "two_reduces", "var", "opt_mm_4"))
        and not (k[0].startswith("red_") and k[0].endswith("bfloat16"))]
  return [(nm, get_program(ast, CUDARenderer(), opts, name=nm).src) for nm, ast, opts in ks]

def test_cuda_renderer_text():
  srcs = dict(_cuda_rendered())
  s = srcs["var"]
  assert 'extern "C" __global__ void var(int* __restrict__ data0, int* __restrict__ data1, int* __restrict__ data2, const int a_b, const int n)' in s
  assert "blockIdx.x" in s and "__device__" in s
  assert "threadIdx" in srcs["opt_mm_4"]

@need_nvcc
def test_cuda_renders_compile_with_nvcc():
  from baregrad.codegen.renderer.cuda import PRELUDE_END
  srcs = _cuda_rendered()
  # one nvcc run (~1 s each): the prelude once, then every kernel
  pre = srcs[0][1][:srcs[0][1].index(PRELUDE_END)]
  body = "\n".join(s[s.index(PRELUDE_END) + len(PRELUDE_END):] for _, s in srcs)
  comp = CUDACompiler("sm_80")
  try: lib = comp.compile(pre + PRELUDE_END + _dedup_sats(body))
  except CompileError:
    for nm, s in srcs: comp.compile(s)
    raise
  info = parse_cubin(lib)
  assert {nm for nm, _ in srcs} <= set(info["kernels"])
  assert info["kernels"]["var"]["param_cbank"] == (NV_ARCHS["sm_80"].param_off, 32)

def _dedup_sats(body: str) -> str:
  seen: set[str] = set()
  out = []
  for line in body.splitlines():
    if line.startswith("BG_SAT("):
      if line in seen: continue
      seen.add(line)
    out.append(line)
  return "\n".join(out)

def _var_loop_uops() -> list[UOp]:
  """sum of data1[0:n] into data0[0], a loop whose end is a kernel parameter (may run zero times)."""
  g0, g1 = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 0), UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 1)
  n = UOp.variable("n", 0, 100)
  c0, z = UOp.const(dtypes.float32, 0.0), UOp.const(dtypes.int32, 0)
  acc = UOp(Ops.DEFINE_ACC, dtypes.float32, (c0,), 0)
  r = UOp.range(n, 0, "reduce")
  ld = UOp(Ops.LOAD, dtypes.float32, (g1.index(r),))
  asg = UOp(Ops.ASSIGN, dtypes.float32, (acc, ld), (Ops.ADD, (r,)))
  red = UOp(Ops.REDUCE, dtypes.float32, (acc, asg), Ops.ADD)
  st = UOp(Ops.STORE, dtypes.void, (g0.index(z), red))
  return [g0, g1, n, c0, z, acc, r, ld.src[0], ld, asg, UOp(Ops.ENDRANGE, src=(r,)), red, st.src[0], st, UOp(Ops.SINK, src=(st,))]

def test_loop_with_a_variable_end():
  src = PTXRenderer().render("varloop", _var_loop_uops())
  assert re.search(r"setp\.ge\.s32 %p\d+, %r\d+, %r\d+;\n  @%p\d+ bra \$L6_exit;", src)   # tested before the first trip
  assert ".param .s32 var_n" in src and "bra $L6_head;" in src
  if find_ptxas() is not None:
    k = parse_cubin(PTXCompiler("sm_80").compile(src))["kernels"]["varloop"]
    assert k["param_cbank"] == (NV_ARCHS["sm_80"].param_off, 20) and [s for _, _, s in k["params"]] == [8, 8, 4]

@need_ptxas
def test_newer_target_bumps_the_ptx_version():
  src = get_program(sink(store(0, (64,), load(1, dtypes.float32, (64,)) * 3.0)), PTXRenderer("sm_80")).src
  try: lib = PTXCompiler("sm_100").compile(src)
  except CompileError as e:
    if "not defined" in str(e) or "Unknown" in str(e) or "unsupported" in str(e).lower(): pytest.skip(f"this ptxas has no sm_100: {e.msg[:200]}")
    raise
  k = parse_cubin(lib)
  assert k["arch"] == "sm_100" and k["kernels"][next(iter(k["kernels"]))]["param_cbank"][0] == NV_ARCHS["sm_100"].param_off == 0x380

from hypothesis import given, settings, strategies as st

@st.composite
def _nv_info_entries(draw):
  out = []
  for _ in range(draw(st.integers(0, 8))):
    fmt, attr = draw(st.sampled_from([1, 2, 3, 4])), draw(st.integers(0, 255))
    if fmt == 4: out.append((fmt, attr, draw(st.binary(min_size=0, max_size=24))))
    elif fmt in (2, 3): out.append((fmt, attr, draw(st.integers(0, 0xffff))))
    else: out.append((fmt, attr, None))
  return out

@settings(max_examples=200, deadline=None)
@given(_nv_info_entries())
def test_nv_info_round_trip(entries):
  raw = b"".join(struct.pack("<BBH", f, a, len(v) if f == 4 else (v or 0)) + (v if f == 4 else b"") for f, a, v in entries)
  assert parse_nv_info(raw) == entries
  if raw:  # a cut-off payload is an error, never a wrong answer
    last = entries[-1]
    if last[0] == 4 and last[2]:
      with pytest.raises(CubinError): parse_nv_info(raw[:-1])

def test_param_layout_aligns_each_var():
  g0 = UOp(Ops.DEFINE_GLOBAL, dtypes.int64.ptr(), (), 1)   # slot 0 unused: still a parameter
  a, b, c = UOp.variable("a", -3, 3, dtypes.int8), UOp.variable("b", 0, 9, dtypes.int64), UOp.variable("c", 0, 9, dtypes.int32)
  ca, cc = a.cast(dtypes.int64), c.cast(dtypes.int64)
  s1 = ca + b
  s2 = s1 + cc
  z = UOp.const(dtypes.int32, 0)
  st = UOp(Ops.STORE, dtypes.void, (g0.index(z), s2))
  uops = [g0, c, a, b, ca, cc, s1, s2, z, st.src[0], st, UOp(Ops.SINK, src=(st,))]
  lay = param_layout([g0], [a, b, c])
  assert lay == [("data0", 0, 8), ("data1", 8, 8), ("var_a", 16, 1), ("var_b", 24, 8), ("var_c", 32, 4)]
  src = PTXRenderer().render("mixed", uops)
  assert re.findall(r"\.param \.(\w+) (\w+)", src) == [("u64", "data0"), ("u64", "data1"), ("s8", "var_a"), ("s64", "var_b"), ("s32", "var_c")]
  if find_ptxas() is not None:
    k = parse_cubin(PTXCompiler("sm_90").compile(src))["kernels"]["mixed"]
    assert [(o, s) for _, o, s in k["params"]] == [(o, s) for _, o, s in lay]
    assert k["param_cbank"] == (NV_ARCHS["sm_90"].param_off, 36)

def test_division_by_a_positive_constant_is_unguarded():
  """x // c and x % c for a constant c > 0 need no guard for 0 or -1 (the only divisors it catches): signed for a value
  that may be negative, unsigned where it cannot be (an index: ptxas makes that a multiply-high and a shift, where the
  guarded register divisor of the general form became a division routine in a convolution's im2col loop)."""
  x = load(1, dtypes.int32, (N,))
  ast = sink(store(0, (N,), x // const(dtypes.int32, 7, (N,))), store(2, (N,), x % const(dtypes.int32, 7, (N,))))
  src = get_program(ast, PTXRenderer(), []).src
  assert re.search(r"div\.s32 %r\d+, %r\d+, 7;", src) and re.search(r"rem\.s32 %r\d+, %r\d+, 7;", src), src
  assert "setp.eq.s32" not in src, f"a guard around a constant divisor:\n{src}"
  # an index unravelled by a view stack (non-negative): unsigned
  st = ShapeTracker.from_shape((6, 7)).permute((1, 0)).reshape((42,))
  src = get_program(sink(store(0, (42,), load(1, dtypes.float32, st))), PTXRenderer(), []).src
  assert re.search(r"(div|rem)\.u32 %r\d+, %r\d+, [67];", src) and not re.search(r"(div|rem)\.s32", src), src
