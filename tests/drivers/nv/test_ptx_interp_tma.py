"""The PTX interpreter's device-built tensor maps and 2-d tensor bulk copies (drivers/mock/ptx/tma.py) on hand-written
PTX: a map built field by field with tensormap.replace in shared memory, copied out and released with
tensormap.cp_fenceproxy, acquired with fence.proxy.tensormap, then a box copied (edges past the tensor zero-filled,
rows swizzled as wgmma reads them) against NumPy; what the map or the copy gets wrong reported by name. Every kernel
also assembles with ptxas for sm_90a where ptxas is installed."""
from __future__ import annotations
import numpy as np
import pytest
from baregrad.drivers.mock.ptx import PTXModule, Memory, PTXError, GPUFault
from baregrad.drivers.nv_compile import find_ptxas

HDR = ".version 8.3\n.target sm_90a\n.address_size 64\n"


def _ptxas(src: str) -> None:
  if find_ptxas() is None: return
  from baregrad.drivers.nv_compile import PTXCompiler
  PTXCompiler("sm_90a").compile(src)


def kernel(fields: dict[str, int], box_bytes: int, x: int, y: int, acquire: bool = True, dst_off: int = 0,
           map_space: str = "shared") -> str:
  """32 threads: thread 0 sets `fields` (name or name[ord] -> value) of a map (in shared memory, then copied to the
  global scratch; or straight in global memory), the box at (x, y) is copied into `tile` and each thread stores
  words tid, tid + 32, ... of it to out."""
  sp = "shared::cta" if map_space == "shared" else "global"
  reg = "%r2" if map_space == "shared" else "%rd3"
  sets = []
  for k, v in fields.items():
    name, _, o = k.partition("[")
    wide = name in ("global_address", "global_stride")
    ordv = f"{o[:-1]}, " if o else ""
    val = "%rd1" if name == "global_address" else str(v)
    sets.append(f"  @%p1 tensormap.replace.tile.{name}.{sp}.b1024.{'b64' if wide else 'b32'} [{reg}], {ordv}{val};")
  words = box_bytes // 4
  copies = "\n".join(f"  ld.shared.b32 %r20, [%r6+{128 * i}];\n  st.global.b32 [%rd8+{128 * i}], %r20;"
                     for i in range(words // 32))
  publish = ("  tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%rd3], [%r2], 128;"
             if map_space == "shared" else "")
  return HDR + f""".visible .entry tm(.param .u64 inp, .param .u64 out, .param .u64 gmap) {{
  .shared .align 128 .b8 tmap[128];
  .shared .align 8 .b64 bar;
  .shared .align 1024 .b8 tile[{box_bytes + 1024}];
  .reg .b32 %r<40>; .reg .b64 %rd<20>; .reg .pred %p<8>;
  ld.param.u64 %rd1, [inp]; ld.param.u64 %rd2, [out]; ld.param.u64 %rd3, [gmap];
  cvta.to.global.u64 %rd1, %rd1; cvta.to.global.u64 %rd2, %rd2; cvta.to.global.u64 %rd3, %rd3;
  mov.u32 %r1, %tid.x; mov.u32 %r2, tmap; mov.u32 %r3, bar; mov.u32 %r4, tile;
  add.u32 %r4, %r4, {dst_off};
  setp.eq.u32 %p1, %r1, 0;
{chr(10).join(sets)}
  bar.sync 0;
{publish}
{"  fence.proxy.tensormap::generic.acquire.gpu [%rd3], 128;" if acquire else ""}
  @%p1 mbarrier.init.shared::cta.b64 [%r3], 1;
  bar.sync 0;
  @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd10, [%r3], {box_bytes};
  @%p1 cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r4], [%rd3, {{{x}, {y}}}], [%r3];
W:
  mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r3], 0;
  @!%p2 bra W;
  shl.b32 %r5, %r1, 2; add.u32 %r6, %r4, %r5;
  mul.wide.u32 %rd7, %r1, 4; add.s64 %rd8, %rd2, %rd7;
{copies}
  ret;
}}
"""


def run(src: str, data: np.ndarray, box_bytes: int, map_off: int = 0) -> np.ndarray:
  """Launch `src` with the global map at a 128-byte aligned address plus `map_off`."""
  mem = Memory()
  i = mem.alloc(data.nbytes); mem.write(i, data)
  o = mem.alloc(box_bytes)
  g = mem.alloc(512)
  PTXModule(src).kernel("tm").launch(mem, [i, o, g + (-g % 128) + map_off], (1, 1, 1), (32, 1, 1))
  return mem.read(o, np.uint8, box_bytes)


def fields2d(cols: int, rows: int, pitch: int, bx: int, by: int, elemtype: int, swz: int, **kw) -> dict[str, int]:
  f = {"global_address": 0, "rank": 1, "box_dim[0]": bx, "box_dim[1]": by, "global_dim[0]": cols, "global_dim[1]": rows,
       "global_stride[0]": pitch, "element_stride[0]": 1, "element_stride[1]": 1, "elemtype": elemtype,
       "interleave_layout": 0, "swizzle_mode": swz, "fill_mode": 0}
  f.update(kw)
  return f


def expected_box(mat: np.ndarray, cols: int, rows: int, x: int, y: int, bx: int, by: int, span: int) -> np.ndarray:
  """The box's bytes as shared memory holds them: rows of bx elements (zeros past the tensor), then 16-byte chunks
  XORed by the row of 128 bytes they fall in (bits [4, 4+b) ^= bits [7, 7+b) of the offset in a 1024-aligned tile)."""
  box = np.zeros((by, bx), mat.dtype)
  for j in range(by):
    for i in range(bx):
      if 0 <= x + i < cols and 0 <= y + j < rows: box[j, i] = mat[y + j, x + i]
  raw = box.view(np.uint8).reshape(-1)
  if not span: return raw
  out = np.zeros_like(raw)
  for off in range(0, raw.size, 16):
    out[off ^ (((off >> 7) & (span // 16 - 1)) << 4):][:16] = raw[off:off + 16]
  return out


def test_tensor_copy_of_an_edge_box_with_128_byte_swizzle():
  """A 64 x 16 half box at (64, 32) of a 40 x 100 tensor (rows 208 bytes apart): columns from 100 and rows from 40 are
  zeros; the rows land 128-byte swizzled."""
  rows, cols, pitch = 40, 100, 208
  mat = (np.arange(rows * pitch // 2) % 1000).astype(np.float16).reshape(rows, pitch // 2)
  bx, by = 64, 16
  src = kernel(fields2d(cols, rows, pitch, bx, by, 6, 3), bx * by * 2, 64, 32)
  got = run(src, mat, bx * by * 2)
  np.testing.assert_array_equal(got, expected_box(mat, cols, rows, 64, 32, bx, by, 128))
  _ptxas(src)


def test_tensor_copy_unswizzled_with_negative_coordinates():
  """An 8 x 32 box of u32 at (-4, -8) without swizzle: the part before the tensor's start is zeros."""
  rows, cols = 20, 16
  mat = np.arange(rows * cols, dtype=np.uint32).reshape(rows, cols) + 1
  src = kernel(fields2d(cols, rows, cols * 4, 8, 32, 2, 0), 8 * 32 * 4, -4, -8)
  got = run(src, mat, 8 * 32 * 4)
  np.testing.assert_array_equal(got, expected_box(mat, cols, rows, -4, -8, 8, 32, 0))
  _ptxas(src)


def test_a_map_replaced_in_global_memory_needs_the_acquire_fence():
  mat = np.zeros((16, 16), np.uint32)
  f = fields2d(16, 16, 64, 8, 8, 2, 0)
  with pytest.raises(PTXError, match=r"no fence.proxy.tensormap::generic.acquire"):
    run(kernel(f, 256, 0, 0, acquire=False, map_space="global"), mat, 256)
  src = kernel(f, 256, 0, 0, map_space="global")
  np.testing.assert_array_equal(run(src, mat + 7, 256), expected_box(mat + 7, 16, 16, 0, 0, 8, 8, 0))
  _ptxas(src)


def test_bad_maps_and_copies_are_reported():
  mat = np.zeros((16, 64), np.float16)
  f = fields2d(64, 16, 128, 64, 8, 6, 3)
  missing = {k: v for k, v in f.items() if k != "box_dim[1]"}
  with pytest.raises(PTXError, match=r"fields never set by tensormap.replace: box_dim\[1\]"):
    run(kernel(missing, 1024, 0, 0), mat, 1024)
  with pytest.raises(PTXError, match=r"inner box \(128 bytes\) is wider than the 64-byte swizzle"):
    run(kernel({**f, "swizzle_mode": 2}, 1024, 0, 0), mat, 1024)
  with pytest.raises(PTXError, match=r"global stride 120 is not a multiple of 16"):
    run(kernel({**f, "global_stride[0]": 120}, 1024, 0, 0), mat, 1024)
  with pytest.raises(GPUFault, match=r"shared destination 0x[0-9a-f]+ is not 128-byte aligned"):
    run(kernel(f, 1024, 0, 0, dst_off=64), mat, 1024)
  host = kernel(f, 1024, 0, 0).replace("[%rd3, {", "[%rd9, {").replace("  @%p1 mbarrier.init", "  add.u64 %rd9, %rd3, 64;\n  @%p1 mbarrier.init")
  with pytest.raises(PTXError, match=r"no tensor map built by tensormap.replace at global address"):
    run(host, mat, 1024)


@pytest.mark.parametrize("space", ["shared", "global"])
def test_a_map_built_at_an_address_not_128_byte_aligned_faults(space):
  """tensormap.replace (and cp_fenceproxy's global destination) address a 128-byte .b1024 object (PTX ISA 9.7.9.28,
  9.7.9.29): a global map 64 bytes past a 128-byte boundary is refused, however a copy would read it."""
  mat = np.zeros((16, 16), np.uint32)
  f = fields2d(16, 16, 64, 8, 8, 2, 0)
  with pytest.raises(GPUFault, match=r"tensor map address 0x[0-9a-f]+ is not 128-byte aligned \((tensormap|tensormap.replace)"):
    run(kernel(f, 256, 0, 0, map_space=space), mat, 256, map_off=64)
