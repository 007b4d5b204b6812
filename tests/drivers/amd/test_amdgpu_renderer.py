"""AMDGPU renderer and compiler: kernels render to LLVM IR for amdgcn, compile in-process for gfx1100 and gfx942, and the
code object reads back (kernel descriptors, image layout, relocations). Numerical checks run the gfx1100 code on the
RDNA3 interpreter (tests/test_rdna3*.py); here the checks are structural.

The Tensor corpus (`tensor_corpus`) is several hundred kernels the Tensor ops build (unary/binary/reduce/movement over
dtypes, matmul, conv, softmax, cumsum, indexing...), scheduled without running; all of them compile for both targets.
The whole op suite compiles for both targets under `MOCKGPU=1 DEV=AMD AMD_CHECK_ARCHS=gfx942` (the driver's CI line)."""
from __future__ import annotations
import functools, re, struct, time
import numpy as np
import pytest
from baregrad.ir.dtype import DType, dtypes
from baregrad.ir.ops import UOp, Ops
from baregrad.codegen.astbuild import load, store, sink
from baregrad.codegen.program import get_program
from baregrad.codegen.renderer import RenderError
from baregrad.codegen.renderer.amdgpu import AMDGPURenderer, AMDGPU_ARCHS, kernarg_layout
from baregrad.drivers.amd_compile import (AMDCompiler, CodeObjectError, KernelDescriptor, load_code_object, read_kernel_descriptors,
                                          code_object_arch)
from baregrad.hal import CompileError
from tests.drivers.nv.test_ptx_renderer import kernel_set

ARCHS = AMDGPU_ARCHS

# ---- corpora
@functools.cache
def tensor_corpus() -> list[tuple[str, UOp]]:
  """Kernel ASTs of Tensor ops (scheduled, not run), deduplicated: several hundred kernels."""
  from baregrad.tensor import Tensor
  import baregrad.tensor.functional as F
  rng = np.random.default_rng(0)
  out: dict[UOp, str] = {}
  def add(name: str, t) -> None:
    for i, si in enumerate(t.schedule()):
      if si.kind == "kernel": out.setdefault(si.ast, f"{name}_{i}")
  def T(shape, dt: DType) -> Tensor:
    x = rng.standard_normal(shape).astype(np.float32) * 3
    return Tensor(x).cast(dt) if dt != dtypes.float32 else Tensor(x)
  floats = [dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.float64]
  ints = [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32, dtypes.uint32, dtypes.int64]
  for dt in floats:
    a, b = T((5, 7), dt), T((7,), dt)
    for nm in ("exp", "log", "sin", "cos", "sqrt", "relu", "sigmoid", "tanh", "abs", "neg", "floor", "ceil", "round", "gelu",
               "silu", "erf", "reciprocal", "softplus", "isnan", "sign", "square", "log1p", "rsqrt", "trunc"):
      add(f"{nm}_{dt.name}", getattr(a, nm)())
    for nm in ("add", "sub", "mul", "div", "maximum", "minimum", "pow", "eq", "ne", "le", "ge"):
      add(f"{nm}_{dt.name}", getattr(a, nm)(b))
    for ax in (0, 1, None):
      for nm in ("sum", "amax", "amin", "mean", "prod", "std", "logsumexp"):
        add(f"{nm}{ax}_{dt.name}", getattr(a, nm)(ax) if ax is not None else getattr(a, nm)())
    add(f"softmax_{dt.name}", a.softmax(1)); add(f"cumsum_{dt.name}", a.cumsum(1)); add(f"argmax_{dt.name}", a.argmax(1))
    add(f"matmul_{dt.name}", a @ T((7, 9), dt)); add(f"where_{dt.name}", (a > 0).where(a, b))
    add(f"clip_{dt.name}", a.clip(-1, 1)); add(f"lerp_{dt.name}", a.lerp(b, 0.25))
    for t in floats + ints + [dtypes.bool]:
      if t != dt: add(f"cast_{dt.name}_{t.name}", a.cast(t))
  for dt in ints:
    a, b = T((6, 5), dt), T((6, 5), dt) + 1
    for nm in ("add", "sub", "mul", "maximum", "minimum", "floor_divide", "remainder", "eq", "ne", "le"):
      add(f"{nm}_{dt.name}", getattr(a, nm)(b))
    for nm in ("neg", "abs", "sign", "bitwise_not"): add(f"{nm}_{dt.name}", getattr(a, nm)())
    add(f"shl_{dt.name}", a << 3); add(f"shr_{dt.name}", a >> 2); add(f"and_{dt.name}", a & b); add(f"xor_{dt.name}", a ^ b)
    for ax in (0, 1): add(f"sum{ax}_{dt.name}", a.sum(ax)); add(f"max{ax}_{dt.name}", a.amax(ax))
    add(f"cumsum_{dt.name}", a.cumsum(0)); add(f"matmul_{dt.name}", a @ T((5, 4), dt))
  x = T((2, 3, 9, 9), dtypes.float32)
  for dt in (dtypes.float32, dtypes.float16):
    xx, w = x.cast(dt), T((4, 3, 3, 3), dt)
    add(f"conv2d_{dt.name}", F.conv2d(xx, w, padding=1)); add(f"conv2d_s2_{dt.name}", F.conv2d(xx, w, stride=2))
    add(f"maxpool_{dt.name}", F.max_pool2d(xx, 2)); add(f"avgpool_{dt.name}", F.avg_pool2d(xx, 3))
    add(f"layernorm_{dt.name}", F.layer_norm(xx, (9,))); add(f"bn_{dt.name}", F.batch_norm(xx, None, None, training=True))
  for shp in ((1, 1, 1), (3, 17, 5), (8, 64, 32), (33, 65, 7), (128, 128, 128), (1, 300, 1)):
    m, k, n = shp
    add(f"mm_{m}x{k}x{n}", T((m, k), dtypes.float32) @ T((k, n), dtypes.float32))
  y = T((4, 6, 5), dtypes.float32)
  add("permute", y.permute(2, 0, 1).contiguous()); add("flip", y.flip(1).contiguous()); add("pad", y.pad((3, 1, 0, 0, 1, 2)) + 1)
  add("getitem", y[1:3, ::2, -1] * 2); add("expand", y[:, :1, :].expand(4, 6, 5) + y); add("cat", Tensor.cat(y, y * 2, dim=1))
  add("gather", y.gather(2, Tensor(rng.integers(0, 5, (4, 6, 3)).astype(np.int32)))); add("tril", y.tril())
  add("sdpa", F.scaled_dot_product_attention(T((2, 4, 8), dtypes.float32), T((2, 4, 8), dtypes.float32), T((2, 4, 8), dtypes.float32)))
  add("xent", F.cross_entropy(T((6, 10), dtypes.float32), Tensor(rng.integers(0, 10, 6).astype(np.int32))))
  add("big_sum", T((4096,), dtypes.float32).sum()); add("big_ew", T((1 << 16,), dtypes.float32) * 2 + 1)
  add("arange", Tensor.arange(100) * 3); add("onehot", F.one_hot(Tensor(np.arange(7).astype(np.int32)), 9))
  return [(nm, ast) for ast, nm in out.items()]

def lds_kernel(dt: DType = dtypes.float32, n: int = 64) -> tuple[str, list[UOp]]:
  """A hand-built linear program (the optimizer does not emit shared memory yet): each workgroup of n work-items
  stores its inputs into LDS, waits at a barrier, and writes them back reversed. out[g*n+l] = in[g*n + n-1-l] * 2."""
  lid, gid = UOp(Ops.SPECIAL, dtypes.int32, (), ("lidx0", n)), UOp(Ops.SPECIAL, dtypes.int32, (), ("gidx0", 4))
  g0, g1 = UOp(Ops.DEFINE_GLOBAL, dt.ptr(), (), 0), UOp(Ops.DEFINE_GLOBAL, dt.ptr(), (), 1)
  lds = UOp(Ops.DEFINE_LOCAL, dt.ptr(local=True), (), ("tile", n))
  i = gid * n + lid
  st = lds.index(lid).store(g1.index(i).load())
  bar = UOp(Ops.BARRIER, dtypes.void, (st,))
  ld = lds.index(UOp.const(dtypes.int32, n - 1) - lid).load()
  two = ld * UOp.const(dt, 2)
  out = g0.index(i).store(two)
  return "lds_rev", linear([st, bar, out])

def linear(roots: list[UOp]) -> list[UOp]:
  """Roots in the given order, each after the sources it needs (a linear program for hand-built kernels)."""
  prog: dict[UOp, None] = {}
  def visit(u: UOp) -> None:
    if u in prog: return
    for s in u.src: visit(s)
    prog[u] = None
  for r in roots: visit(r)
  return list(prog)

@functools.cache
def compiled(arch: str) -> dict[str, tuple[object, bytes]]:
  c = AMDCompiler(arch)
  out = {}
  for nm, ast, opts in kernel_set():
    p = get_program(ast, AMDGPURenderer(arch), opts, name=nm)
    out[nm] = (p, c.compile(p.src))
  return out

# ---- tests
def test_renderer_flags_and_refusals():
  r = AMDGPURenderer("gfx942")
  assert (r.name, r.has_local, r.local_max, r.vectorized, r.arch) == ("AMDGPU", True, 1024, False, "gfx942")
  with pytest.raises(ValueError, match="gfx906.*not supported.*gfx1100, gfx942"): AMDGPURenderer("gfx906")
  with pytest.raises(CompileError, match="gfx90a.*not supported"): AMDCompiler("gfx90a")

def test_ir_shape():
  src = get_program(sink(store(0, (4096,), load(1, dtypes.float32, (4096,)) + 1.0)), AMDGPURenderer()).src
  assert re.search(r"define amdgpu_kernel void @\w+\(ptr addrspace\(1\) %data0, ptr addrspace\(1\) %data1\)", src)
  assert "@llvm.amdgcn.workitem.id.x" in src and "@llvm.amdgcn.workgroup.id.x" in src
  assert '"amdgpu-flat-work-group-size"="' in src and '"amdgpu-no-implicitarg-ptr"' in src and '"amdgpu-no-workgroup-id-y"' in src
  assert "%args" not in src and "ptr %" not in src     # every pointer carries its address space

@pytest.mark.parametrize("arch", ARCHS)
def test_kernel_set_compiles_and_descriptors_read_back(arch):
  for nm, (p, lib) in compiled(arch).items():
    assert code_object_arch(lib) == arch
    co = load_code_object(lib)
    assert list(co.kernels) == [nm] and co.position_independent
    k = co.kernels[nm]
    d = k.descriptor
    assert k.code_offset == k.kd_offset + d.kernel_code_entry_byte_offset and k.code_offset % 256 == 0 and k.kd_offset % 64 == 0
    assert co.image[k.kd_offset:k.kd_offset + 64] == d.raw and co.size % 256 == 0
    lay = kernarg_layout(p.bufs, p.vars)
    assert d.kernarg_size == (max((o + s for _, o, s in lay), default=0) + 7) // 8 * 8 or d.kernarg_size == max((o + s for _, o, s in lay), default=0)
    assert d.private_segment_fixed_size == 0 and not d.enable_private_segment and d.group_segment_fixed_size == 0, nm
    assert d.user_sgprs == (["kernarg_segment_ptr"] if lay else []), (nm, d.user_sgprs)
    assert d.wavefront_size32 == (arch == "gfx1100")
    used = {u.arg[0] for u in p.uops if u.op is Ops.SPECIAL}
    # y and z exactly as used; LLVM always enables x (the hardware sets it up for free)
    assert d.enable_workgroup_id[1:] == tuple(f"gidx{i}" in used for i in (1, 2)) and (d.enable_workgroup_id[0] or "gidx0" not in used), (nm, used)
    nl = max([int(x[4:]) + 1 for x in used if x.startswith("lidx")], default=0)
    assert d.enable_vgpr_workitem_id == max(nl - 1, 0), (nm, used)
    assert 1 <= d.vgpr_count(arch) <= (512 if arch == "gfx942" else 256)   # gfx942 counts VGPRs and AGPRs together

def test_kernarg_layout_is_llvms():
  """The layout we write arguments by is the one LLVM's metadata states for the kernel (offsets and sizes)."""
  p = compiled("gfx1100")["var"][0]
  asm = AMDCompiler("gfx1100").assembly(p.src)
  meta = re.findall(r"\.name:\s+(\w+)\s+\.offset:\s+(\d+)\s+\.size:\s+(\d+)", asm)
  assert [(n, int(o), int(s)) for n, o, s in meta] == kernarg_layout(p.bufs, p.vars) == \
    [("data0", 0, 8), ("data1", 8, 8), ("data2", 16, 8), ("var_a_b", 24, 4), ("var_n", 28, 4)]

@pytest.mark.parametrize("arch", ARCHS)
def test_lds_and_barrier(arch):
  nm, prog = lds_kernel(n=128)    # two waves of 64 on gfx942 (LLVM drops a barrier within one wave)
  src = AMDGPURenderer(arch).render(nm, prog)
  assert "addrspace(3) global [128 x float]" in src and "@llvm.amdgcn.s.barrier" in src and 'syncscope("workgroup")' in src
  c = AMDCompiler(arch)
  d = load_code_object(c.compile(src)).kernels[nm].descriptor
  assert d.group_segment_fixed_size == 128 * 4 and d.granulated_lds_size == 0   # the size is the packet's business
  asm = c.assembly(src)
  assert "s_barrier" in asm and re.search(r"ds_(store|write)_b32", asm) and re.search(r"ds_(load|read)_b32", asm), asm
  with pytest.raises(RenderError, match="DEFINE_LOCAL needs"):
    AMDGPURenderer(arch).render("bad", [UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(local=True), (), "tile")])

def test_if_endif():
  g0 = UOp(Ops.DEFINE_GLOBAL, dtypes.int32.ptr(), (), 0)
  lid = UOp(Ops.SPECIAL, dtypes.int32, (), ("lidx0", 32))
  cond = lid < UOp.const(dtypes.int32, 5)
  iff = UOp(Ops.IF, dtypes.void, (cond,))
  st = g0.index(lid).store(lid * UOp.const(dtypes.int32, 3))
  prog = linear([cond, iff, st]) + [UOp(Ops.ENDIF, dtypes.void, (iff,))]
  src = AMDGPURenderer().render("ifk", prog)
  assert re.search(r"br i1 %v\d+, label %v\d+\.then, label %v\d+\.end", src)
  load_code_object(AMDCompiler().compile(src))

@pytest.mark.parametrize("arch", ARCHS)
def test_tensor_corpus_compiles(arch):
  """Several hundred Tensor-op kernels compile; none needs scratch memory. Prints the time it took."""
  corpus = tensor_corpus()
  assert len(corpus) >= 300, len(corpus)
  c, t0 = AMDCompiler(arch), time.perf_counter()
  for nm, ast in corpus:
    p = get_program(ast, AMDGPURenderer(arch), name=nm)
    d = load_code_object(c.compile(p.src)).kernels[p.name].descriptor
    assert d.private_segment_fixed_size == 0 and not d.uses_dynamic_stack, nm
  print(f"\n{len(corpus)} kernels rendered and compiled for {arch} in {time.perf_counter() - t0:.1f} s")

def test_check_archs(monkeypatch):
  monkeypatch.setenv("AMD_CHECK_ARCHS", "gfx942")
  c = AMDCompiler("gfx1100")
  assert c.check_archs == ["gfx942"] and c.cachekey == "amdgpu_gfx1100+gfx942"
  monkeypatch.setenv("AMD_CHECK_ARCHS", "gfx1030")
  with pytest.raises(CompileError, match="AMD_CHECK_ARCHS.*gfx1030"): AMDCompiler("gfx1100")

def test_bad_ir_is_a_compile_error():
  with pytest.raises(CompileError, match="LLVM rejected the IR"): AMDCompiler().compile("define amdgpu_kernel void @k() { ret i32 0 }")

# ---- the code object reader on bad input
def _lib() -> bytes: return compiled("gfx1100")["var"][1]

def _patch_elf(lib: bytes, fn) -> bytes:
  from elftools.elf.elffile import ELFFile
  import io
  b = bytearray(lib)
  fn(b, ELFFile(io.BytesIO(lib)))
  return bytes(b)

def test_code_object_errors():
  with pytest.raises(CodeObjectError, match="not an ELF"): load_code_object(b"\x7fELF" + b"\0" * 10)
  with pytest.raises(CodeObjectError, match="not an AMDGPU code object"):
    load_code_object(_patch_elf(_lib(), lambda b, e: struct.pack_into("<H", b, 18, 62)))   # e_machine = EM_X86_64
  with pytest.raises(CodeObjectError, match="EF_AMDGPU_MACH 0x2f"):
    load_code_object(_patch_elf(_lib(), lambda b, e: struct.pack_into("<I", b, 48, (e["e_flags"] & ~0xff) | 0x2f)))  # gfx906
  def undef_reloc(b, e):   # point the descriptor's REL64 at the null symbol (index 0, SHN_UNDEF)
    rs = e.get_section_by_name(".rela.rodata")
    struct.pack_into("<Q", b, rs["sh_offset"] + 8, struct.unpack_from("<Q", b, rs["sh_offset"] + 8)[0] & 0xffffffff)
  with pytest.raises(CodeObjectError, match="undefined.*needs a link step"): load_code_object(_patch_elf(_lib(), undef_reloc))
  def got_reloc(b, e):
    rs = e.get_section_by_name(".rela.rodata")
    info = struct.unpack_from("<Q", b, rs["sh_offset"] + 8)[0]
    struct.pack_into("<Q", b, rs["sh_offset"] + 8, (info & ~0xffffffff) | 7)
  with pytest.raises(CodeObjectError, match="R_AMDGPU_GOTPCREL.*not supported"): load_code_object(_patch_elf(_lib(), got_reloc))
  with pytest.raises(CodeObjectError, match="not 256-byte aligned"): load_code_object(_lib()).relocate(0x1080)
  with pytest.raises(CodeObjectError, match="64 bytes"): KernelDescriptor.from_bytes(b"\0" * 63)

def test_read_kernel_descriptors_and_relocate():
  lib = _lib()
  kds = read_kernel_descriptors(lib)
  co = load_code_object(lib)
  assert list(kds) == ["var"] and kds["var"].kernarg_size == 32
  assert co.relocate(0x7f0000001000 - 0x1000 + 0x100 * 0) == co.image      # position independent: same bytes at any base
  assert kds["var"].kernel_code_entry_byte_offset == co.kernels["var"].code_offset - co.kernels["var"].kd_offset
