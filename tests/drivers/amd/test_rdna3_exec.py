"""RDNA3 interpreter, end to end: kernels compiled by LLVM for gfx1100 run on RDNA3Machine and are compared with NumPy
(or with the CPU backend running the same kernel AST, itself checked against NumPy by the op tests).

The harness (test-only): run a kernel on the RDNA3 interpreter with buffers mapped in a mock GPU address space (what the
mock command processor does for an AQL dispatch, without the driver): code object image at a 256-aligned address,
one mapping per buffer, the kernarg segment in the renderer's layout, then RDNA3Machine.dispatch."""
from __future__ import annotations
import functools, struct
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from baregrad.ir.dtype import DType, dtypes
from baregrad.ir.ops import UOp, Ops
from baregrad.codegen.astbuild import load, store, sink
from baregrad.codegen.kernel import Opt, OptOps
from baregrad.codegen.program import ProgramSpec, get_program
from baregrad.codegen.renderer.amdgpu import AMDGPURenderer, kernarg_layout
from baregrad.drivers.amd_compile import AMDCompiler, load_code_object
from baregrad.drivers.mock.ptx import Memory, GPUFault
from baregrad.drivers.mock.rdna3.machine import RDNA3Machine, RDNA3Error, DispatchResult, Scratch
from baregrad.engine.runner import needed_elements, run_ast
from baregrad.hal import Buffer
from tests.helpers import random_values, special_values, to_storage, pairs
from tests.drivers.amd.test_amdgpu_renderer import tensor_corpus, lds_kernel, linear
from tests.drivers.nv.test_ptx_renderer import _ew, _matmul, _reduce
from baregrad.drivers.amd.testkernels import LOCAL_ARRAY, SCRATCHY, spill_ll, local_array_expected, spill_expected


@functools.cache
def _compiler() -> AMDCompiler: return AMDCompiler("gfx1100")

def dispatch_src(src: str, name: str, bufs: dict[int, np.ndarray], global_size, local_size, vals: dict[str, tuple[int, object]] | None = None,
                 group_segment_size: int | None = None, layout: list | None = None,
                 machine_kw: dict | None = None) -> tuple[dict[int, np.ndarray], DispatchResult]:
  """Compile `src` (AMDGPU LLVM IR), map `bufs` (buffer number -> array, contents copied in), fill the kernarg
  segment by `layout` ([(name, offset, size)], names data<i> / var_<name>), run global_size x local_size workgroups;
  returns the buffers read back (same dtypes and shapes) and the dispatch result."""
  co = load_code_object(_compiler().compile_cached(src))
  k = co.kernels[name]
  mem = Memory()
  code_va = mem.alloc(co.size + 256, 4096, name="code")
  mem.write_bytes(code_va, co.relocate(code_va))
  vas = {}
  for n, a in bufs.items():
    raw = np.ascontiguousarray(a).view(np.uint8).reshape(-1)
    vas[n] = mem.alloc(max(raw.size, 4), 256, name=f"buf{n}")
    if raw.size: mem.write_bytes(vas[n], raw.tobytes())
  layout = layout if layout is not None else [(f"data{n}", 8 * n, 8) for n in range(max(bufs, default=-1) + 1)]
  ksize = max([o + s for _, o, s in layout] + [k.descriptor.kernarg_size, 8])
  karg = bytearray((ksize + 15) // 16 * 16)
  for nm, off, size in layout:
    if nm.startswith("data"): v = vas.get(int(nm[4:]), 0)
    else: v = int(vals[nm][0]) if vals else 0
    karg[off:off + size] = (v & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
  kva = mem.alloc(len(karg), 64, name="kernarg")
  mem.write_bytes(kva, bytes(karg))
  grid = tuple(int(g) * int(l) for g, l in zip(global_size, local_size))
  gss = k.descriptor.group_segment_fixed_size if group_segment_size is None else group_segment_size
  res = RDNA3Machine(mem, **(machine_kw or {})).dispatch(code_va + k.kd_offset, grid, tuple(local_size), kva, gss, 0)
  out = {n: np.frombuffer(mem.read_bytes(vas[n], np.ascontiguousarray(a).nbytes), a.dtype).reshape(a.shape).copy() if a.nbytes else a.copy()
         for n, a in bufs.items()}
  return out, res

def run_spec(spec: ProgramSpec, bufs: dict[int, np.ndarray], vals: dict[str, int] | None = None) -> tuple[dict[int, np.ndarray], DispatchResult]:
  """Run a ProgramSpec rendered by AMDGPURenderer('gfx1100')."""
  layout = [(nm, o, s) for nm, o, s in kernarg_layout(spec.bufs, spec.vars)]
  v = {}
  for u in spec.vars: v["var_" + "".join(c if c.isalnum() or c == "_" else "_" for c in u.arg[0])] = (vals[u.arg[0]], u.dtype)
  return dispatch_src(spec.src, spec.name, bufs, spec.global_size, spec.local_size, v, layout=layout)

NP = {dtypes.bool: np.bool_, dtypes.int8: np.int8, dtypes.uint8: np.uint8, dtypes.int16: np.int16, dtypes.uint16: np.uint16,
      dtypes.int32: np.int32, dtypes.uint32: np.uint32, dtypes.int64: np.int64, dtypes.uint64: np.uint64, dtypes.float16: np.float16,
      dtypes.bfloat16: np.uint16, dtypes.float32: np.float32, dtypes.float64: np.float64}

# ---- running kernel ASTs
def renumber(ast: UOp) -> UOp:
  """Buffers numbered 0..n-1 (the CPU backend's argument array is filled in the order of the kernel's buffers)."""
  gs = sorted({u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL}, key=lambda u: u.arg)
  return ast.substitute({g: g.replace(arg=i) for i, g in enumerate(gs)})

def inputs_for(spec: ProgramSpec, ast: UOp, rng: np.random.Generator, special: bool = False) -> dict[int, np.ndarray]:
  outs = set(spec.outs)
  bufs = {}
  for g in spec.bufs:
    dt, n = g.dtype.base, max(needed_elements(ast).get(g.arg, 1), 1)
    if g.arg in outs: bufs[g.arg] = np.zeros(n, NP[dt.scalar])
    else:
      x = special_values(dt) if special else random_values(dt, n, rng)
      x = np.resize(x, n)
      bufs[g.arg] = np.ascontiguousarray(to_storage(x, dt)).astype(NP[dt.scalar])
  return bufs

def on_cpu(ast: UOp, spec: ProgramSpec, bufs: dict[int, np.ndarray], vals: dict[str, int] | None = None) -> dict[int, np.ndarray]:
  cb = []
  for n in range(max(bufs) + 1):
    g = next(g for g in spec.bufs if g.arg == n)
    b = Buffer("CPU", bufs[n].size, g.dtype.base).allocate()
    b.copyin(memoryview(np.ascontiguousarray(bufs[n]).view(np.uint8)))
    cb.append(b)
  run_ast(ast, cb, device="CPU", vals=vals)
  out = {}
  for n in spec.outs:
    out[n] = np.empty_like(bufs[n]); cb[n].copyout(memoryview(out[n].view(np.uint8)))
  return out

def assert_matches(got: np.ndarray, want: np.ndarray, dt: DType, what: str, rtol: float | None = None, atol: float | None = None) -> None:
  """Exact for integers and bools; floats within a tolerance of the dtype (relative to the largest value for sums),
  NaN where the reference has NaN."""
  if dt.scalar == dtypes.bfloat16: got, want = (got.astype(np.uint32) << 16).view(np.float32), (want.astype(np.uint32) << 16).view(np.float32)
  if got.dtype.kind != "f":
    bad = got != want
    assert not bad.any(), f"{what}: {int(bad.sum())}/{bad.size} differ, e.g. [{np.argmax(bad)}] got {got[bad][:4]} want {want[bad][:4]}"
    return
  with np.errstate(invalid="ignore"): g64, w64 = got.astype(np.float64), want.astype(np.float64)
  rt = rtol if rtol is not None else {dtypes.float16: 2e-3, dtypes.bfloat16: 1e-2, dtypes.float32: 1e-5, dtypes.float64: 1e-12}[dt.scalar]
  fin = np.isfinite(w64)
  scale = np.max(np.abs(w64[fin])) if fin.any() else 1.0
  at = atol if atol is not None else rt * scale * 0.01
  ok = np.isclose(g64, w64, rtol=rt, atol=at, equal_nan=True)
  assert ok.all(), f"{what}: {int((~ok).sum())}/{ok.size} differ, e.g. got {got[~ok][:4]} want {want[~ok][:4]}"

# ---- against NumPy
def test_float32_arithmetic_is_ieee_exact():
  """add/sub/mul/div/sqrt on special values (zeros, denormals, infinities, NaN, huge/tiny) give NumPy's bits: LLVM's
  division sequence (v_div_scale, v_rcp, v_fma, v_div_fmas, v_div_fixup) and sqrt expansion run as the ISA states."""
  a, b = pairs(special_values(dtypes.float32), special_values(dtypes.float32))
  sh = (a.size,)
  x, y = load(4, dtypes.float32, sh), load(5, dtypes.float32, sh)
  ast = sink(store(0, sh, x + y), store(1, sh, x * y), store(2, sh, x / y), store(3, sh, UOp(Ops.SQRT, dtypes.float32, (x,))),
             store(6, sh, x - y))
  spec = get_program(ast, AMDGPURenderer())
  z = np.zeros(a.size, np.float32)
  got, res = run_spec(spec, {0: z, 1: z, 2: z, 3: z, 4: a, 5: b, 6: z})
  with np.errstate(all="ignore"):
    want = {0: a + b, 1: a * b, 2: a / b, 3: np.sqrt(a), 6: a - b}
  for k, w in want.items():
    g = got[k]
    same = (g.view(np.uint32) == w.view(np.uint32)) | (np.isnan(g) & np.isnan(w))
    assert same.all(), f"buffer {k}: {int((~same).sum())} differ: a={a[~same][:4]} b={b[~same][:4]} got={g[~same][:4]} want={w[~same][:4]}"
  assert res.waves >= 1 and res.wave_instructions > res.steps

@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 2 ** 32 - 1), min_size=64, max_size=64), st.lists(st.integers(0, 2 ** 32 - 1), min_size=64, max_size=64))
def test_float32_division_random_bits(xs, ys):
  a, b = np.array(xs, np.uint32).view(np.float32), np.array(ys, np.uint32).view(np.float32)
  got, _ = run_spec(_div_spec(), {0: np.zeros(64, np.float32), 1: a, 2: b})
  with np.errstate(all="ignore"): want = a / b
  same = (got[0].view(np.uint32) == want.view(np.uint32)) | (np.isnan(got[0]) & np.isnan(want))
  assert same.all(), f"a={a[~same][:3]} b={b[~same][:3]} got={got[0][~same][:3]} want={want[~same][:3]}"

@functools.cache
def _div_spec() -> ProgramSpec:
  sh = (64,)
  return get_program(sink(store(0, sh, load(1, dtypes.float32, sh) / load(2, dtypes.float32, sh))), AMDGPURenderer())

def test_transcendentals_float32():
  """exp2/log2/sin: LLVM's expansions around v_exp_f32/v_log_f32/v_sin_f32 (range reduction, denormal scaling)."""
  x = np.concatenate([np.linspace(-140, 130, 301), np.linspace(-4, 4, 101), [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-42]]).astype(np.float32)
  pos = np.abs(x) + np.float32(1e-30)
  sh = (x.size,)
  ld = lambda i: load(i, dtypes.float32, sh)   # noqa: E731
  ast = sink(store(0, sh, UOp(Ops.EXP2, dtypes.float32, (ld(3),))), store(1, sh, UOp(Ops.LOG2, dtypes.float32, (ld(4),))),
             store(2, sh, UOp(Ops.SIN, dtypes.float32, (ld(3),))))
  z = np.zeros(x.size, np.float32)
  got, _ = run_spec(get_program(ast, AMDGPURenderer()), {0: z, 1: z, 2: z, 3: x, 4: pos})
  with np.errstate(all="ignore"):
    assert_matches(got[0], np.exp2(x.astype(np.float64)).astype(np.float32), dtypes.float32, "exp2", rtol=2e-7, atol=0)
    assert_matches(got[1], np.log2(pos.astype(np.float64)).astype(np.float32), dtypes.float32, "log2", rtol=2e-7, atol=1e-7)
    assert_matches(got[2], np.sin(x.astype(np.float64)).astype(np.float32), dtypes.float32, "sin", rtol=1e-5, atol=2e-6)

@pytest.mark.parametrize("dt", [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32, dtypes.uint32, dtypes.int64,
                                dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64])
def test_every_alu_op_and_cast_matches_the_cpu(dt):
  """The renderer test's elementwise kernel (every ALU op of dt and a cast to every dtype) on special values: integer
  and bool results exact (division by 0, INT_MIN // -1, shifts modulo the width, saturating casts), floats within the
  dtype's tolerance (float64 exp2/log2/sin carry float32 precision, see renderer/amdgpu.py)."""
  ast = renumber(_ew(dt))
  spec = get_program(ast, AMDGPURenderer())
  bufs = inputs_for(spec, ast, np.random.default_rng(1), special=True)
  got, _ = run_spec(spec, bufs)
  want = on_cpu(ast, spec, bufs)
  # SIN reduces its argument in float32: past |x| ~ 1e5 it parts from libm (see renderer/amdgpu.py)
  sin_outs = {st.src[0].arg for st in ast.src if any(u.op is Ops.SIN for u in st.src[2].toposort())}
  a = bufs[0].astype(np.float64) if dt != dtypes.bfloat16 else (bufs[0].astype(np.uint32) << 16).view(np.float32).astype(np.float64)
  for n in spec.outs:
    odt = next(g for g in spec.bufs if g.arg == n).dtype.base
    loose = dt == dtypes.float64 and odt == dtypes.float64
    sel = np.abs(a) < 1e5 if n in sin_outs else np.ones(a.shape, bool)
    assert_matches(got[n][sel], want[n][sel], odt, f"{dt} output {n}", rtol=1e-6 if loose else None, atol=1e-6 if loose else None)

@pytest.mark.parametrize("dt,op", [(dtypes.float32, Ops.ADD), (dtypes.float32, Ops.MAX), (dtypes.int32, Ops.ADD), (dtypes.float16, Ops.ADD),
                                   (dtypes.int8, Ops.MUL), (dtypes.float64, Ops.MAX), (dtypes.bool, Ops.MAX)])
def test_reductions(dt, op):
  for shape, axis in (((8, 45), 1), ((45, 8), 0), ((1, 300), 1)):
    ast = _reduce(dt, op, shape, axis)
    spec = get_program(ast, AMDGPURenderer())
    bufs = inputs_for(spec, ast, np.random.default_rng(2))
    got, _ = run_spec(spec, bufs)
    x = bufs[1].reshape(shape)
    if dt == dtypes.bool: want = x.any(axis=axis)
    elif op is Ops.ADD: want = x.astype(np.float64 if dtypes.is_float(dt) else x.dtype).sum(axis=axis).astype(x.dtype)
    elif op is Ops.MAX: want = x.max(axis=axis)
    else: want = np.prod(x, axis=axis, dtype=x.dtype)
    # float16 accumulates in float16 (rounded after every step, as on the CPU): allow a few roundings of the largest sum
    atol = 1e-2 * float(np.abs(want).max()) if dt == dtypes.float16 else None
    assert_matches(got[0], want.reshape(-1), dt, f"{op.name} over {shape} axis {axis}", atol=atol)

@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float16, dtypes.float64])
def test_matmul(dt):
  for opts in (None, [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 2, 4), Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.PARALLEL, 0)]):
    ast = _matmul(dt)
    spec = get_program(ast, AMDGPURenderer(), opts)
    rng = np.random.default_rng(3)
    bufs = {0: np.zeros(16 * 32, NP[dt]), 1: rng.standard_normal(16 * 24).astype(NP[dt]), 2: rng.standard_normal(24 * 32).astype(NP[dt])}
    got, _ = run_spec(spec, bufs)
    want = (bufs[1].astype(np.float64).reshape(16, 24) @ bufs[2].astype(np.float64).reshape(24, 32)).astype(bufs[0].dtype)
    atol = 1e-2 * float(np.abs(want).max()) if dt == dtypes.float16 else None     # float16 accumulates in float16
    assert_matches(got[0], want.reshape(-1), dt, f"matmul {dt} {opts}", rtol={dtypes.float16: 1e-2, dtypes.float32: 1e-5, dtypes.float64: 1e-12}[dt], atol=atol)

@pytest.mark.parametrize("dt,n", [(dtypes.float32, 64), (dtypes.float16, 128), (dtypes.int64, 32), (dtypes.float32, 256)])
def test_lds_and_barrier(dt, n):
  """Each workgroup stores into LDS, waits at s_barrier, reads another wave's value back: out[g*n+l] = 2*in[g*n+n-1-l]."""
  nm, prog = lds_kernel(dt, n)
  src = AMDGPURenderer().render(nm, prog)
  x = np.resize(random_values(dt, 4 * n, np.random.default_rng(4)), 4 * n).astype(NP[dt])
  got, res = dispatch_src(src, nm, {0: np.zeros(4 * n, NP[dt]), 1: x}, (4, 1, 1), (n, 1, 1))
  want = (x.reshape(4, n)[:, ::-1] * NP[dt](2)).reshape(-1)
  assert_matches(got[0], want, dt, f"LDS reverse {dt} x{n}")
  assert res.waves == 4 * (n // 32) and res.workgroups == 4

_LDS_OOB_IR = """
declare i32 @llvm.amdgcn.workitem.id.x()
declare void @llvm.amdgcn.s.barrier()
@t = internal unnamed_addr addrspace(3) global [64 x float] undef, align 16
define amdgpu_kernel void @oob(ptr addrspace(1) %out, i32 %k) #0 {
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %f = uitofp i32 %l to float
  %p = getelementptr float, ptr addrspace(3) @t, i32 %l
  store float %f, ptr addrspace(3) %p
  %lk = add i32 %l, %k
  %q = getelementptr float, ptr addrspace(3) @t, i32 %lk
  store float 9.0, ptr addrspace(3) %q
  fence syncscope("workgroup") release
  call void @llvm.amdgcn.s.barrier()
  fence syncscope("workgroup") acquire
  %v = load float, ptr addrspace(3) %q
  %w = load float, ptr addrspace(3) %p
  %s = fadd float %v, %w
  %o = getelementptr float, ptr addrspace(1) %out, i32 %l
  store float %s, ptr addrspace(1) %o
  ret void
}
attributes #0 = { nounwind "amdgpu-flat-work-group-size"="64,64" "amdgpu-no-implicitarg-ptr" "amdgpu-no-dispatch-ptr" "amdgpu-no-queue-ptr" }
"""

def test_lds_bounds_and_group_segment():
  """LDS accesses past the workgroup's allocation (group_segment_size) read 0 and write nothing; a packet smaller than
  the kernel's LDS is refused."""
  layout = [("data0", 0, 8), ("var_k", 8, 4)]
  got, _ = dispatch_src(_LDS_OOB_IR, "oob", {0: np.zeros(64, np.float32)}, (1, 1, 1), (64, 1, 1), {"var_k": (64, None)}, layout=layout)
  assert (got[0] == np.arange(64)).all()                  # t[l + 64] is past the 256 bytes: the 9.0 went nowhere, reads 0
  got, _ = dispatch_src(_LDS_OOB_IR, "oob", {0: np.zeros(64, np.float32)}, (1, 1, 1), (64, 1, 1), {"var_k": (0, None)}, layout=layout)
  assert (got[0] == 18).all()                             # in range: every lane overwrote its own value with 9.0
  nm, prog = lds_kernel(dtypes.float32, 64)
  src = AMDGPURenderer().render(nm, prog)
  x = np.arange(256, dtype=np.float32)
  with pytest.raises(RDNA3Error, match="group_segment_size 128 is smaller than the kernel's group_segment_fixed_size 256"):
    dispatch_src(src, nm, {0: np.zeros(256, np.float32), 1: x}, (4, 1, 1), (64, 1, 1), group_segment_size=128)

def test_workgroup_and_workitem_ids_3d():
  """Grid and workgroup ids in all three dimensions: v0 packs the work-item ids (10 bits each), s[USER_SGPR_COUNT..]
  the workgroup ids; out[linear] = gid.x + 10*gid.y + 100*gid.z + 1000*lid.x + 10000*lid.y + 100000*lid.z."""
  L, G = (4, 2, 3), (3, 2, 2)
  sp = lambda nm, sz: UOp(Ops.SPECIAL, dtypes.int32, (), (nm, sz))   # noqa: E731
  l = [sp(f"lidx{i}", L[i]) for i in range(3)]
  g = [sp(f"gidx{i}", G[i]) for i in range(3)]
  c = lambda v: UOp.const(dtypes.int32, v)   # noqa: E731
  gx = [g[i] * c(L[i]) + l[i] for i in range(3)]
  lin = gx[0] + (gx[1] + gx[2] * c(G[1] * L[1])) * c(G[0] * L[0])
  val = g[0] + g[1] * c(10) + g[2] * c(100) + l[0] * c(1000) + l[1] * c(10000) + l[2] * c(100000)
  buf = UOp(Ops.DEFINE_GLOBAL, dtypes.int32.ptr(), (), 0)
  prog = linear([buf.index(lin).store(val)])
  src = AMDGPURenderer().render("ids", prog)
  n = int(np.prod(L) * np.prod(G))
  got, res = dispatch_src(src, "ids", {0: np.full(n, -1, np.int32)}, G, L)
  z, y, x = np.meshgrid(np.arange(G[2] * L[2]), np.arange(G[1] * L[1]), np.arange(G[0] * L[0]), indexing="ij")
  want = x // L[0] + 10 * (y // L[1]) + 100 * (z // L[2]) + 1000 * (x % L[0]) + 10000 * (y % L[1]) + 100000 * (z % L[2])
  assert (got[0] == want.reshape(-1)).all()
  assert res.workgroups == 12 and res.waves == 12          # 24 work-items: one wave each

def test_partial_workgroups_at_the_grid_edge():
  """A grid that is no multiple of the workgroup: the last workgroup has fewer work-items (EXEC says which)."""
  sp = lambda nm, sz: UOp(Ops.SPECIAL, dtypes.int32, (), (nm, sz))   # noqa: E731
  i = sp("gidx0", 4) * UOp.const(dtypes.int32, 64) + sp("lidx0", 64)
  buf = UOp(Ops.DEFINE_GLOBAL, dtypes.int32.ptr(), (), 0)
  src = AMDGPURenderer().render("edge", linear([buf.index(i).store(i + UOp.const(dtypes.int32, 1))]))
  co = load_code_object(_compiler().compile_cached(src))
  mem = Memory()
  code = mem.alloc(co.size, 4096); mem.write_bytes(code, co.image)
  out = mem.alloc(256 * 4); kva = mem.alloc(16); mem.write(kva, np.array([out], np.uint64))
  res = RDNA3Machine(mem).dispatch(code + co.kernels["edge"].kd_offset, (200, 1, 1), (64, 1, 1), kva, 0, 0)
  got = mem.read(out, np.int32, 256)
  assert (got[:200] == np.arange(1, 201)).all() and (got[200:] == 0).all()
  assert (res.workgroups, res.waves) == (4, 7)               # 64+64+64+8 work-items: 2+2+2+1 waves

def test_kernel_variables():
  v = UOp.variable("n", 0, 100)
  sh = (37,)
  ast = sink(store(0, sh, load(1, dtypes.int32, sh) * v), store(2, sh, load(1, dtypes.int32, sh) + UOp.variable("a_b", -5, 5)))
  spec = get_program(ast, AMDGPURenderer())
  x = np.arange(37, dtype=np.int32)
  got, _ = run_spec(spec, {0: np.zeros(37, np.int32), 1: x, 2: np.zeros(37, np.int32)}, {"n": 7, "a_b": -3})
  assert (got[0] == 7 * x).all() and (got[2] == x - 3).all()

def test_tensor_corpus_matches_the_cpu():
  """A deterministic sample of the Tensor corpus (unary/binary/reduce/movement ops over dtypes, matmuls, convs,
  softmax, cumsum, indexing...) against the CPU backend on the same inputs."""
  corpus = tensor_corpus()
  rng = np.random.default_rng(5)
  ran = 0
  for nm, ast in corpus[::5]:
    spec = get_program(ast, AMDGPURenderer(), name=nm)
    bufs = inputs_for(spec, ast, rng)
    got, _ = run_spec(spec, bufs)
    want = on_cpu(ast, spec, bufs)
    f64_transcendental = any(u.op in (Ops.EXP2, Ops.LOG2, Ops.SIN) and u.dtype.scalar == dtypes.float64 for u in ast.toposort())
    for n in spec.outs:
      odt = next(g for g in spec.bufs if g.arg == n).dtype.base
      # float64 exp2/log2/sin carry float32 precision (renderer/amdgpu.py), and pow-like compositions amplify it
      tol = dict(rtol=1e-4, atol=1e-6) if f64_transcendental and odt == dtypes.float64 else {}
      if odt == dtypes.float32: tol = dict(rtol=1e-4)          # summation order differs from the CPU's
      assert_matches(got[n], want[n], odt, f"{nm} output {n}", **tol)
    ran += 1
  assert ran >= 100

# ---- bad dispatches, bad code
def _loaded(src: str, name: str) -> tuple[Memory, int, int]:
  co = load_code_object(_compiler().compile_cached(src))
  mem = Memory()
  code = mem.alloc(co.size, 4096)
  mem.write_bytes(code, co.image)
  return mem, code, code + co.kernels[name].kd_offset

def _simple() -> tuple[str, str]:
  sh = (64,)
  spec = get_program(sink(store(0, sh, load(1, dtypes.float32, sh) + 1.0)), AMDGPURenderer())
  return spec.src, spec.name

def test_gfx942_code_is_refused():
  """gfx942 (CDNA3) code objects compile and load; the interpreter says plainly it cannot run wave64 CDNA code."""
  src, name = _simple()
  co = load_code_object(AMDCompiler("gfx942").compile(src))
  mem = Memory()
  code = mem.alloc(co.size, 4096); mem.write_bytes(code, co.image)
  with pytest.raises(RDNA3Error, match="cannot execute wave64 CDNA code"):
    RDNA3Machine(mem).dispatch(code + co.kernels[name].kd_offset, (64, 1, 1), (64, 1, 1), 0, 0, 0)

def test_unmapped_buffer_faults_naming_the_instruction():
  src, name = _simple()
  mem, code, kd = _loaded(src, name)
  kva = mem.alloc(16); mem.write(kva, np.array([0x7000_0000_0000, 0x7100_0000_0000], np.uint64))   # nothing mapped there
  with pytest.raises(GPUFault, match=r"RDNA3 offset 0x[0-9a-f]+ \[[0-9a-f ]+\] `global_load_b\d+ .*page fault.*0x710000000000"):
    RDNA3Machine(mem).dispatch(kd, (64, 1, 1), (64, 1, 1), kva, 0, 0)

def _patched(word: int) -> tuple[Memory, int]:
  src, name = _simple()
  mem, code, kd = _loaded(src, name)
  entry = kd + struct.unpack("<q", mem.read_bytes(kd + 16, 8))[0]
  mem.write_bytes(entry, struct.pack("<I", word))
  return mem, kd

def test_instruction_it_cannot_execute_is_named():
  mem, kd = _patched(0xBF900000)         # s_trap 0
  with pytest.raises(RDNA3Error, match=r"offset 0x0 \[bf900000\] `s_trap 0`: s_trap is not executed"):
    RDNA3Machine(mem).dispatch(kd, (32, 1, 1), (32, 1, 1), 0, 0, 0)
  mem, kd = _patched(0xFFFFFFFF)         # no encoding
  with pytest.raises(RDNA3Error, match=r"code offset 0x0.*no RDNA3 encoding"):
    RDNA3Machine(mem).dispatch(kd, (32, 1, 1), (32, 1, 1), 0, 0, 0)

def test_runaway_kernel_stops():
  mem, kd = _patched(0xBFA0FFFF)         # s_branch -1: jumps to itself forever
  with pytest.raises(RDNA3Error, match="did not finish within 10000 steps"):
    RDNA3Machine(mem, max_steps=10000).dispatch(kd, (32, 1, 1), (32, 1, 1), 0, 0, 0)


_DISPATCH_PTR_IR = """
declare ptr addrspace(4) @llvm.amdgcn.dispatch.ptr()
define amdgpu_kernel void @dptr(ptr addrspace(1) %out) #0 {
  %d = call ptr addrspace(4) @llvm.amdgcn.dispatch.ptr()
  %g = getelementptr i8, ptr addrspace(4) %d, i64 12
  %x = load i32, ptr addrspace(4) %g
  store i32 %x, ptr addrspace(1) %out
  ret void
}
attributes #0 = { nounwind "amdgpu-flat-work-group-size"="32,32" "amdgpu-no-implicitarg-ptr" "amdgpu-no-queue-ptr" }
"""

def test_scratch_and_missing_sgpr_inputs_are_refused():
  mem, _, kd = _loaded(SCRATCHY, "scratchy")
  with pytest.raises(RDNA3Error, match="needs scratch memory"): RDNA3Machine(mem).dispatch(kd, (32, 1, 1), (32, 1, 1), 0, 0, 68)
  with pytest.raises(RDNA3Error, match="smaller than the kernel's 68"): RDNA3Machine(mem).dispatch(kd, (32, 1, 1), (32, 1, 1), 0, 0, 64)
  mem, _, kd = _loaded(_DISPATCH_PTR_IR, "dptr")
  out, kva = mem.alloc(4), mem.alloc(16)
  mem.write(kva, np.array([out], np.uint64))
  with pytest.raises(RDNA3Error, match="asks for the dispatch ptr in SGPRs"): RDNA3Machine(mem).dispatch(kd, (32, 1, 1), (32, 1, 1), kva, 0, 0)
  pkt = mem.alloc(64); mem.write(pkt + 12, np.array([32], np.uint32))    # an AQL packet's grid_size_x
  RDNA3Machine(mem).dispatch(kd, (32, 1, 1), (32, 1, 1), kva, 0, 0, dispatch_packet_va=pkt)
  assert mem.read(out, np.uint32)[0] == 32

# ---- atomics and divergent control flow (hand-written IR: the optimizer emits neither yet)
_ATOMIC_IR = """
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare void @llvm.amdgcn.s.barrier()
@acc = internal unnamed_addr addrspace(3) global [2 x i32] undef, align 4
define amdgpu_kernel void @atom(ptr addrspace(1) %ctr, ptr addrspace(1) %old, ptr addrspace(1) %fsum, ptr addrspace(1) %wgmax) #0 {
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %gl = mul i32 %g, 64
  %i = add i32 %gl, %l
  %first = icmp eq i32 %l, 0
  br i1 %first, label %init, label %go
init:
  store i32 0, ptr addrspace(3) @acc
  br label %go
go:
  fence syncscope("workgroup") release
  call void @llvm.amdgcn.s.barrier()
  fence syncscope("workgroup") acquire
  %o = atomicrmw add ptr addrspace(1) %ctr, i32 1 monotonic
  %op = getelementptr i32, ptr addrspace(1) %old, i32 %i
  store i32 %o, ptr addrspace(1) %op
  %f = uitofp i32 %i to float
  %r = atomicrmw fadd ptr addrspace(1) %fsum, float %f monotonic
  %v = mul i32 %i, 7
  %m = and i32 %v, 63
  %x = atomicrmw max ptr addrspace(3) @acc, i32 %m monotonic
  fence syncscope("workgroup") release
  call void @llvm.amdgcn.s.barrier()
  fence syncscope("workgroup") acquire
  br i1 %first, label %out, label %done
out:
  %mx = load i32, ptr addrspace(3) @acc
  %wp = getelementptr i32, ptr addrspace(1) %wgmax, i32 %g
  store i32 %mx, ptr addrspace(1) %wp
  br label %done
done:
  ret void
}
attributes #0 = { nounwind "amdgpu-flat-work-group-size"="64,64" "amdgpu-no-implicitarg-ptr" "amdgpu-no-dispatch-ptr" "amdgpu-no-queue-ptr" }
"""

def test_atomics_lds_and_divergence():
  """Global atomic add (returning the old value) from every lane of 3 workgroups, a float atomic add, an LDS atomic
  max per workgroup between barriers, and branches only some lanes take (EXEC masking, s_and_saveexec, v_cmpx)."""
  asm = _compiler().assembly(_ATOMIC_IR)
  # LLVM reduces across the wave first (v_mbcnt, v_readlane loops) and adds floats with a compare-and-swap loop
  assert all(x in asm for x in ("global_atomic_add_u32", "ds_max_i32", "global_atomic_cmpswap_b32", "v_cmpx_eq_u32", "s_and_saveexec_b32"))
  got, res = dispatch_src(_ATOMIC_IR, "atom", {0: np.zeros(1, np.int32), 1: np.full(192, -1, np.int32), 2: np.zeros(1, np.float32),
                                               3: np.zeros(3, np.int32)}, (3, 1, 1), (64, 1, 1))
  assert got[0][0] == 192 and sorted(got[1]) == list(range(192))      # every lane saw a distinct old value
  assert got[2][0] == np.float32(sum(range(192)))
  i = np.arange(192).reshape(3, 64)
  assert (got[3] == ((i * 7) & 63).max(axis=1)).all()

def test_if_endif_runs_only_the_lanes_that_take_it():
  g0 = UOp(Ops.DEFINE_GLOBAL, dtypes.int32.ptr(), (), 0)
  lid = UOp(Ops.SPECIAL, dtypes.int32, (), ("lidx0", 64))
  cond = lid < UOp.const(dtypes.int32, 37)
  iff = UOp(Ops.IF, dtypes.void, (cond,))
  st = g0.index(lid).store(lid * UOp.const(dtypes.int32, 3))
  src = AMDGPURenderer().render("ifk", linear([cond, iff, st]) + [UOp(Ops.ENDIF, dtypes.void, (iff,))])
  got, _ = dispatch_src(src, "ifk", {0: np.full(64, -1, np.int32)}, (1, 1, 1), (64, 1, 1))
  assert (got[0][:37] == 3 * np.arange(37)).all() and (got[0][37:] == -1).all()

# ---- scratch (the private segment): architected flat scratch, as the CP and SPI set it up

def _scratch_run(src: str, name: str, bufs: list[np.ndarray], vals: list[int], nwg: int, slots: int, per_lane: int | None = None,
                 machine_kw: dict | None = None) -> tuple[list[np.ndarray], DispatchResult, Memory, Scratch, int]:
  """Run `name` (64 work-items a workgroup) with a scratch of `slots` wave slots of `per_lane` bytes per work-item (the
  kernel's private segment, rounded to 8 bytes as for gfx11's 256-byte WAVESIZE unit, by default)."""
  co = load_code_object(_compiler().compile_cached(src))
  k = co.kernels[name]
  mem = Memory()
  code = mem.alloc(co.size, 4096)
  mem.write_bytes(code, co.image)
  vas = [mem.alloc(a.nbytes, 256) for a in bufs]
  for v, a in zip(vas, bufs): mem.write_bytes(v, a.tobytes())
  karg = mem.alloc(64, 64)
  mem.write_bytes(karg, b"".join(int(v).to_bytes(8, "little") for v in vas) + b"".join(int(v).to_bytes(4, "little") for v in vals))
  pss = k.descriptor.private_segment_fixed_size
  per_lane = per_lane if per_lane is not None else (pss + 7) // 8 * 8
  sc = Scratch(mem.alloc(per_lane * 32 * slots, 4096, name="scratch"), per_lane * 32, slots)
  res = RDNA3Machine(mem, **(machine_kw or {})).dispatch(code + k.kd_offset, (64 * nwg, 1, 1), (64, 1, 1), karg, 0, pss, scratch=sc)
  return [np.frombuffer(mem.read_bytes(v, a.nbytes), a.dtype).copy() for v, a in zip(vas, bufs)], res, mem, sc, pss

def test_private_array_indexed_at_run_time():
  """A 1 KiB private array per work-item filled in a loop (SCRATCH_STORE), read back at a run-time index directly
  (SCRATCH_LOAD) and through a generic pointer (FLAT in the private aperture, after src_private_base), against NumPy;
  then the scratch memory itself: lane l's dword i of wave w is at base + w * wave bytes + i * 128 + l * 4 (AMDGPUUsage
  "Address Spaces": the dword interleave)."""
  asm = _compiler().assembly(LOCAL_ARRAY)
  assert all(x in asm for x in ("scratch_store_b32", "scratch_load_b32", "flat_load_b32", "src_private_base", ".amdhsa_enable_private_segment 1"))
  assert ".amdhsa_user_sgpr_flat_scratch_init" not in asm and ".amdhsa_user_sgpr_private_segment_buffer" not in asm  # architected
  n, k = 4 * 64, 5
  (out,), res, mem, sc, pss = _scratch_run(LOCAL_ARRAY, "local_array", [np.zeros(n, np.uint32)], [k], 4, slots=64)
  assert pss == 1028 and res.waves == 8
  assert (out == np.array(local_array_expected(k, n), np.uint32)).all()
  raw = np.frombuffer(mem.read_bytes(sc.base, sc.wave_bytes * 8), np.uint32).reshape(8, -1)   # 8 waves, one slot each
  for w, i in ((0, 0), (0, 7), (3, 200), (7, 255)):
    gid = w * 32 + np.arange(32)
    assert (raw[w, i * 32:(i + 1) * 32] == (i * gid).astype(np.uint32)).all()

def test_register_spills():
  """More live values than "amdgpu-num-vgpr"="16" allows: LLVM spills them to scratch (SCRATCH_STORE/LOAD with
  immediate offsets and no address registers); the result matches NumPy."""
  asm = _compiler().assembly(spill_ll())
  assert "scratch_store_b32 off, v0, off offset:" in asm and "scratch_load_b32" in asm
  x = np.random.default_rng(1).integers(0, 1 << 32, 256 + 40, dtype=np.uint64).astype(np.uint32)
  (out, _), res, *_ = _scratch_run(spill_ll(), "spill", [np.zeros(256, np.uint32), x], [], 4, slots=8)
  assert (out == np.array(spill_expected(x.tolist(), 256), np.uint32)).all()

def test_waves_wait_for_scratch_slots():
  """A wave runs only in a free scratch slot: 2 slots for 16 waves of 2-wave workgroups run them a workgroup at a time,
  reusing the slots, and give the same result; fewer slots than one workgroup's waves can never launch it."""
  n, k = 8 * 64, 3
  (out,), res, *_ = _scratch_run(LOCAL_ARRAY, "local_array", [np.zeros(n, np.uint32)], [k], 8, slots=2)
  assert res.waves == 16 and (out == np.array(local_array_expected(k, n), np.uint32)).all()
  with pytest.raises(RDNA3Error, match="workgroup of 2 waves needs 2 scratch wave slots; the queue's scratch has 1"):
    _scratch_run(LOCAL_ARRAY, "local_array", [np.zeros(64, np.uint32)], [k], 1, slots=1)

def test_scratch_outside_the_wave_slot_faults():
  """A slot smaller than the kernel's private segment: the first access past its share faults at the address it
  would reach (the mock GPU reports a VM fault there)."""
  with pytest.raises(GPUFault, match="outside the wave's scratch: its slot holds 512 bytes per work-item") as e:
    _scratch_run(LOCAL_ARRAY, "local_array", [np.zeros(64, np.uint32)], [0], 1, slots=2, per_lane=512)
  assert "scratch_store_b32" in str(e.value)
