"""The image path on the mock Adreno: buffers read through texture descriptors and samplers with isam give the values
of plain loads; the state loads and the descriptors are checked by the mock (mock/adreno/sp.py, tex.py)."""
from __future__ import annotations

import struct

import numpy as np
import pytest

pytest.importorskip("tinymesa")
from baregrad.ir.dtype import dtypes  # noqa: E402
from baregrad.ir.ops import Ops  # noqa: E402
from baregrad.ir.view import ShapeTracker  # noqa: E402
from baregrad.codegen.astbuild import load, store, reduce, sink  # noqa: E402
from baregrad.codegen.kernel import Kernel, Opt, OptOps, OptError  # noqa: E402
from baregrad.codegen.program import get_program  # noqa: E402
from baregrad.codegen.renderer.nir import NIRRenderer  # noqa: E402
from baregrad.drivers.qcom.ir3_compile import IR3Compiler, Ir3Program  # noqa: E402
from baregrad.drivers.qcom.dispatch import emit_dispatch, shader_bytes, texture_block  # noqa: E402
from baregrad.drivers.qcom.pm4 import CommandStream  # noqa: E402
from baregrad.drivers.qcom import texture as T  # noqa: E402
from baregrad.drivers.mock.adreno.cp import CP, CPError, GpuMemory  # noqa: E402
from baregrad.drivers.mock.adreno.ir3_exec import Executor  # noqa: E402
from baregrad.drivers.mock.adreno.sp import ShaderProcessor, R  # noqa: E402
from baregrad.drivers.mock.adreno import tex as MT  # noqa: E402

f32, f16 = dtypes.float32, dtypes.float16
CODE_VA, TEX_VA, BUF_VA = 0x10000, 0x20000, 0x100000
RNG = np.random.default_rng(1)


def run(ast, arrays, opts, patch=None):
  """Compile with `opts`, dispatch through the mock CP (texture state from memory at TEX_VA), return the buffers, the
  program and the executor. patch(words, tex_words) may alter the stream and the descriptors first."""
  p = get_program(ast, NIRRenderer(630), opts=opts)
  prg = Ir3Program.unpack(IR3Compiler(630).compile(p.src))
  mem = GpuMemory()
  mem.map(CODE_VA, bytearray(shader_bytes(prg)))
  bufs, va = [], BUF_VA
  for a in arrays:
    data = bytearray(a.tobytes()) + bytearray(16)
    mem.map(va, data)
    bufs.append((va, data))
    va += (len(data) + 0xFFFF) & ~0xFFFF
  tw = texture_block(prg, [(b[0], len(b[1])) for b in bufs]) if prg.images else []
  params = b"".join(struct.pack("<Q", b[0]) for b in bufs)
  words = emit_dispatch(CommandStream(), prg, CODE_VA, params, p.global_size, tex_va=TEX_VA if prg.images else None).words
  if patch: words, tw = patch(words, tw)
  mem.map(TEX_VA, bytearray(struct.pack(f"<{len(tw)}I", *tw)) + bytearray(64))
  ex = Executor(mem)
  cp = CP(mem, dispatch=ShaderProcessor(ex))
  cp.submit(words)
  assert cp.run()
  return [np.frombuffer(bytes(b[1][:a.nbytes]), a.dtype) for b, a in zip(bufs, arrays)], prg, ex


def images_of(ast):
  return [Opt(OptOps.IMAGE, j) for j in range(len(Kernel(ast, "k", gpu=True, ren=NIRRenderer(630)).image_candidates()))]


@pytest.mark.parametrize("upcast", [0, 4], ids=["one_channel", "rgba"])
@pytest.mark.parametrize("dt", [f32, f16], ids=["float32", "float16"])
def test_elementwise_through_images_equals_plain_loads(dt, upcast):
  # 5120 elements: 5 rows of float32 texels (3 of float16), so x and y both vary; the shifted read is a padded view
  n = 5120
  npdt = np.float32 if dt == f32 else np.float16
  a, b = (RNG.standard_normal(n) * 4).astype(npdt), RNG.standard_normal(n).astype(npdt)
  shifted = ShapeTracker.from_shape((n,)).pad(((1, 0),)).shrink(((0, n),))   # b[i - 1], 0 at i = 0
  ast = sink(store(0, (n,), load(1, dt, (n,)) * load(2, dt, shifted) + load(1, dt, (n,))))
  plain, prg0, ex0 = run(ast, [np.zeros(n, npdt), a, b], [Opt(OptOps.LOCAL, 0, 64)])
  img, prg1, ex1 = run(ast, [np.zeros(n, npdt), a, b], images_of(ast) + ([Opt(OptOps.UPCAST, 0, upcast)] if upcast else []) + [Opt(OptOps.LOCAL, 0, 64)])
  assert not prg0.images and {x[0] for x in prg1.images} == {1, 2}
  # the loads at 4k + c share RGBA texels (the unshifted a; b[i - 1] reads across texels); the others read one channel
  rgba, one = {T.FMT_F32, T.FMT_F16}, {T.FMT_R32, T.FMT_R16}
  assert {f for p_, _, f in prg1.images if p_ == 1} <= (rgba if upcast else one)
  assert "isam.1d" in ex1.executed and "isam.1d" not in ex0.executed
  assert not any(f.startswith("ldg") for f in ex1.executed)   # every input came through the texture unit
  np.testing.assert_array_equal(img[0], plain[0])


@pytest.fixture
def qcom(monkeypatch):
  from baregrad.hal import Device
  monkeypatch.setenv("MOCKGPU", "1")
  return Device["QCOM"]


def conv(dev: str, x: np.ndarray, w: np.ndarray) -> np.ndarray:
  from baregrad import Tensor
  return Tensor(x, device=dev).conv2d(Tensor(w, device=dev), padding=1).relu().numpy()


def test_heuristic_reads_conv_weights_and_activations_as_images_with_plain_load_values(qcom, monkeypatch):
  from baregrad import Tensor
  x, w = RNG.standard_normal((2, 8, 12, 12)).astype(np.float32), RNG.standard_normal((16, 8, 3, 3)).astype(np.float32)
  items = [si for si in Tensor(x, device="QCOM").conv2d(Tensor(w, device="QCOM"), padding=1).schedule() if si.ast.op is Ops.SINK]
  spec = get_program(items[-1].ast, qcom.renderer)
  assert len(spec.images) == 2 and sum(o.op is OptOps.IMAGE for o in spec.opts) == 2   # both operands of the conv
  img = conv("QCOM", x, w)
  monkeypatch.setattr(NIRRenderer, "has_images", False)   # the same conv with plain loads
  plain = conv("QCOM", x, w)
  np.testing.assert_array_equal(img, plain)
  np.testing.assert_allclose(img, conv("CPU", x, w), rtol=1e-5, atol=1e-5)


def test_image_opt_refused_where_it_cannot_apply():
  ast = sink(store(0, (8,), load(1, dtypes.int32, (8,)) + load(2, f32, (8,)).cast(dtypes.int32)))
  k = Kernel(ast, "k", gpu=True, ren=NIRRenderer(630))
  assert k.image_candidates() == [2]   # int32 is no RGBA float image
  k.apply_opt(Opt(OptOps.IMAGE, 0))
  with pytest.raises(OptError, match="already read as an image"): k.apply_opt(Opt(OptOps.IMAGE, 0))
  with pytest.raises(OptError, match="1 buffers"): k.apply_opt(Opt(OptOps.IMAGE, 1))
  from baregrad.codegen.renderer.ptx import PTXRenderer
  with pytest.raises(OptError, match="no texture path"): Kernel(ast, "k", gpu=True, ren=PTXRenderer("sm_80")).apply_opt(Opt(OptOps.IMAGE, 0))


# ---- the mock's checks of the texture state and of the descriptors

def _img_ast(n=64):
  return sink(store(0, (n,), load(1, f32, (n,)) + 1.0))


def _img_run(patch):
  n = 64
  return run(_img_ast(n), [np.zeros(n, np.float32), np.arange(n, dtype=np.float32)], images_of(_img_ast(n)), patch=patch)


def _reg_patch(name, value):
  """Rewrite the payload of the type-4 write of register `name` in a stream."""
  def patch(words, tw):
    words = list(words)
    for i, h in enumerate(words):
      if h >> 28 == 4 and (h >> 8) & 0x7FFFF == R[name]: words[i + 1] = value; break
    else: raise AssertionError(f"{name} not written")
    return words, tw
  return patch


def test_state_loads_checked():
  o = _img_run(None)[0][0]
  np.testing.assert_array_equal(o, np.arange(64, dtype=np.float32) + 1)
  # a6xx.xml SP_CS_TEX_COUNT: the slots the shader may sample
  with pytest.raises(CPError, match="SP_CS_TEX_COUNT is 0"): _img_run(_reg_patch("SP_CS_TEX_COUNT", 0))
  # fd6_emit_textures: SP_CS_TEX_CONST / SP_CS_TEX_SAMP name the state the CP_LOAD_STATE6 brought in
  with pytest.raises(CPError, match="SP_CS_TEX_CONST is 0x20040"): _img_run(_reg_patch("SP_CS_TEX_CONST", TEX_VA + 64))
  with pytest.raises(CPError, match="SP_CS_TEX_SAMP is 0x20000"): _img_run(_reg_patch("SP_CS_TEX_SAMP", TEX_VA))


def test_missing_texture_load_refused():
  def drop(words, tw):   # the CP_LOAD_STATE6 of the descriptors becomes NOPs of the same length
    words = list(words)
    for i, h in enumerate(words):
      if h >> 28 == 7 and (h >> 16) & 0x7F == 0x34 and (words[i + 1] >> 18) & 0xF == 5 and (words[i + 1] >> 14) & 3 == 1:
        words[i] = CommandStream().pkt7("CP_NOP", 0, 0, 0).words[0]
        break
    return words, tw
  with pytest.raises(CPError, match="reads texture 0, but no CP_LOAD_STATE6"): _img_run(drop)


def _desc(over: dict | None = None):
  """A valid descriptor (the driver's) for 8 KiB at BUF_VA with the fields in `over` rewritten (dword, field) -> value."""
  words = T.tex_const(BUF_VA, 8192, T.FMT_F32)
  for (dw, name), v in (over or {}).items():
    f = MT.D["A6XX_TEX_CONST"][str(dw)][name]
    words[dw] = (words[dw] & ~f.encode(f.decode(0xFFFFFFFF))) | f.encode(v)
  return words


@pytest.mark.parametrize("over, match", [
  ({(2, "TYPE"): 3}, r"TYPE\) is 3, expected A6XX_TEX_2D"),
  ({(0, "FMT"): 103}, r"FMT\) is 103"),
  ({(0, "TILE_MODE"): 3}, r"TILE_MODE\) is 3"),
  ({(0, "SAMPLES"): 2}, r"SAMPLES\) is 2"),
  ({(3, "FLAG"): 1}, r"FLAG\) is set"),
  ({(0, "MIPLVLS"): 2}, r"MIPLVLS\) is 2"),
  ({(1, "WIDTH"): 0}, r"is 0x2 texels"),
  ({(2, "PITCH"): 1024}, r"PITCH\) is 1024 bytes for 256 texels"),
  ({(2, "PITCH"): 4096 + 32}, r"multiple of 64"),
  ({(5, "DEPTH"): 0}, r"DEPTH\) is 0"),
  ({(0, "SWIZ_X"): 7}, r"SWIZ_\*\) is \(7"),
], ids=["type", "format", "tiled", "msaa", "ubwc", "mips", "empty", "pitch_short", "pitch_align", "depth", "swizzle"])
def test_malformed_descriptor_refused(over, match):
  MT.decode_tex_const(_desc(), 0)   # the unaltered one is accepted
  with pytest.raises(MT.TextureError, match=match): MT.decode_tex_const(_desc(over), 0)


def test_descriptor_base_low_bits_and_zero_base_refused():
  w = _desc()
  w[4] |= 0x10
  with pytest.raises(MT.TextureError, match="bits 4:0 are not BASE_LO"): MT.decode_tex_const(w, 0)
  w = _desc()
  w[4] = 0; w[5] &= ~0x1FFFF
  with pytest.raises(MT.TextureError, match="base address 0"): MT.decode_tex_const(w, 0)


def test_descriptor_fields_decoded_and_coordinates_outside_follow_the_sampler():
  mem = GpuMemory()
  data = bytearray(np.arange(2 * 4096 // 4, dtype=np.float32).tobytes())   # 2 rows of 256 RGBA float32 texels
  mem.map(BUF_VA, data)
  t = MT.decode_tex_const(T.tex_const(BUF_VA, len(data), T.FMT_F32), 0)
  assert (t.base, t.width, t.height, t.pitch, t.texel) == (BUF_VA, 256, 2, 4096, np.dtype("<f4"))
  edge = MT.decode_tex_samp(T.tex_samp(), 0)
  x, y = np.array([0, 255, 300, -4]), np.array([1, 0, 1, 0])
  got = MT.fetch(mem, t, edge, x, y)   # clamp to edge: x 300 -> 255, -4 -> 0
  want = np.array([(4 * (256 * yy + xx) + np.arange(4)) for xx, yy in [(0, 1), (255, 0), (255, 1), (0, 0)]], np.float32).T
  np.testing.assert_array_equal(got, want)
  rep = T.tex_samp()
  rep[0] = (rep[0] & ~(7 << 5)) | (MT.CLAMP["A6XX_TEX_REPEAT"] << 5)
  got = MT.fetch(mem, t, MT.decode_tex_samp(rep, 0), np.array([257]), np.array([0]))   # repeat in x: 257 -> 1
  np.testing.assert_array_equal(got[:, 0], np.arange(4, 8, dtype=np.float32))
  border = T.tex_samp()
  border[0] = (border[0] & ~(7 << 8)) | (MT.CLAMP["A6XX_TEX_CLAMP_TO_BORDER"] << 8)
  with pytest.raises(MT.TextureError, match=r"WRAP_T\) is A6XX_TEX_CLAMP_TO_BORDER"): MT.decode_tex_samp(border, 0)
  # a half image: texels of four float16, read back as float32
  h = np.arange(16, dtype=np.float16) / 4
  mem.map(0x400000, bytearray(h.tobytes()))
  th = MT.decode_tex_const(T.tex_const(0x400000, 32, T.FMT_F16), 1)
  np.testing.assert_array_equal(MT.fetch(mem, th, edge, np.array([1]), np.array([0]))[:, 0], h[4:8].astype(np.float32))


def test_driver_descriptor_rules():
  with pytest.raises(ValueError, match="not 64-byte aligned"): T.tex_const(BUF_VA + 32, 64, T.FMT_F32)
  with pytest.raises(ValueError, match="a6xx allows 16384"): T.image_shape(16385 * 4096, T.FMT_F32)
  assert T.image_shape(4097, T.FMT_F16) == (512, 2)


def test_build_with_images_that_spills_runs_without_them(qcom):
  # an 8x8 reduction NIR unrolls: 128 texture reads ir3 hoists, and the registers spill to private memory, which the
  # dispatch does not set up; the runner builds the same opts without IMAGE and runs that
  from baregrad.engine.runner import CompiledRunner
  from baregrad.hal import Buffer
  sw = ShapeTracker.from_shape((8, 8)).reshape((1, 8, 8)).expand((16, 8, 8))
  ast = sink(store(0, (16, 1, 1), reduce(load(1, f32, (16, 8, 8)) * load(2, f32, sw), Ops.ADD, (1, 2))))
  spec = get_program(ast, qcom.renderer, opts=[Opt(OptOps.LOCAL, 0, 16)] + images_of(ast))
  assert spec.images == (1, 2) and Ir3Program.unpack(qcom.compiler.compile_cached(spec.src)).pvtmem_size > 0
  r = CompiledRunner(spec, "QCOM")
  assert r.spec.images == () and OptOps.IMAGE not in {o.op for o in r.spec.opts}
  a, w = RNG.standard_normal((16, 8, 8)).astype(np.float32), RNG.standard_normal((8, 8)).astype(np.float32)
  bufs = [Buffer("QCOM", n, dtypes.float32).allocate() for n in (16, 16 * 64, 64)]
  bufs[1].copyin(memoryview(a.ravel())); bufs[2].copyin(memoryview(w.ravel()))
  r(bufs, wait=True)
  got = np.frombuffer(bufs[0].as_memoryview(), np.float32)
  np.testing.assert_allclose(got, (a * w).sum((1, 2)), rtol=1e-5, atol=1e-5)


def test_image_whose_loads_were_optimized_away_gets_no_slot():
  # image 1 is declared but never read (its loads were dead code to NIR): ir3 leaves it IBO_INVALID, the program lists
  # only image 0 (a descriptor for the other would be for nothing)
  import base64
  import ctypes
  from baregrad.codegen.renderer import mesa as M
  from baregrad.codegen.renderer.nir import NirBuild
  from baregrad.drivers.qcom.ir3_compile import compile_nir
  nb = NirBuild(630, "img")
  x = nb.chan(nb.intrinsic("load_local_invocation_id", [], 3, 32), 0)
  coord = nb.alu("vec4", x, nb.const(32, 0), nb.const(32, 0), nb.const(32, 0))
  v = nb.intrinsic("image_load", [nb.const(32, 0), coord, nb.const(32, 0), nb.const(32, 0)], 4, 32, image_dim=M.GLSL_SAMPLER_DIM_2D,
                   access=M.ACCESS_CAN_REORDER | M.ACCESS_NON_WRITEABLE, dest_type=M.NIR_TYPE_FLOAT32, format=M.PIPE_FORMAT_R32_FLOAT)
  addr = nb.alu("pack_64_2x32", nb.intrinsic("load_const_ir3", [nb.const(32, 0)], 2, 32, base=0))
  nb.intrinsic("store_global", [nb.chan(v, 0), nb.alu("iadd", addr, nb.alu("imul", nb.alu("u2u64", x), nb.const(64, 4)))], 1,
               write_mask=1, access=0, align_mul=4, align_offset=0)
  ctypes.c_uint8.from_address(nb.shader + M.SHADER_INFO + M.INFO_NUM_IMAGES).value = 2
  ctypes.c_uint64.from_address(nb.shader + M.SHADER_INFO + M.INFO_IMAGES_USED).value = 3
  ctypes.c_uint16.from_address(nb.shader + M.SHADER_INFO + M.INFO_WORKGROUP_SIZE).value = 64
  for i in (1, 2): ctypes.c_uint16.from_address(nb.shader + M.SHADER_INFO + M.INFO_WORKGROUP_SIZE + 2 * i).value = 1
  src = f"nir-ir3 630 2 0:8 img=1:{T.FMT_R32},2:{T.FMT_R32}\n" + base64.b64encode(nb.serialize()).decode() + "\n"
  prg = Ir3Program.unpack(compile_nir(src))
  assert prg.images == ((1, 0, T.FMT_R32),) and prg.tex_count == 1
