"""The image path on a6xx: a kernel buffer of float32/float16 read as a 2-D texture (isam through a texture descriptor
and a sampler), in the layout of codegen/renderer/adreno_image.py (RGBA texels, or one channel a texel). The buffer's
address must be 64-byte aligned (A6XX_TEX_CONST_4.BASE_LO holds bits 31:5, and Mesa's fdl6 layouts start textures at
64-byte alignment).

Descriptor and sampler fields: a6xx.xml domains A6XX_TEX_CONST (16 dwords) and A6XX_TEX_SAMP (4 dwords), generated
into ctypes_autogen/adreno.py (DESCRIPTOR_FIELDS_A6XX). What goes where follows Mesa's turnip (tu_image.cc through
fdl6_view_init: FMT, SWIZ, WIDTH/HEIGHT, PITCH, TYPE, DEPTH 1 for a 2-D view) and freedreno's fd6_texture.cc.
"""
from __future__ import annotations

from baregrad.ctypes_autogen import adreno
from baregrad.codegen.renderer.adreno_image import FMT_F16, FMT_F32, FMT_R16, FMT_R32, IMAGE_ROW_BYTES, MAX_DIM, TEXEL_BYTES, row_texels

__all__ = ["FMT_F16", "FMT_F32", "FMT_R16", "FMT_R32", "IMAGE_ROW_BYTES", "MAX_DIM", "TEXEL_BYTES", "row_texels", "image_shape", "tex_const", "tex_samp"]
D = adreno.DESCRIPTOR_FIELDS_A6XX
E = adreno.ENUMS
BASE_ALIGN = 64
TEX_CONST_DWORDS, TEX_SAMP_DWORDS = 16, 4


def _enc(domain: str, dword: int, **fields: int) -> int:
  v = 0
  for k, x in fields.items(): v |= D[domain][str(dword)][k].encode(x)
  return v


def image_shape(nbytes: int, fmt: int) -> tuple[int, int]:
  """(width, height) in texels of the image over a buffer of `nbytes`; one too large for a6xx is refused."""
  w = row_texels(fmt)
  h = max(1, -(-nbytes // IMAGE_ROW_BYTES))
  if h > MAX_DIM: raise ValueError(f"a {nbytes}-byte buffer as an image needs {h} rows of {IMAGE_ROW_BYTES} bytes; a6xx allows {MAX_DIM}")
  return w, h


def tex_const(va: int, nbytes: int, fmt: int) -> list[int]:
  """The 16 dwords of A6XX_TEX_CONST for the image over `nbytes` at GPU address `va` (64-byte aligned)."""
  if va % BASE_ALIGN: raise ValueError(f"an image at {va:#x} is not {BASE_ALIGN}-byte aligned (A6XX_TEX_CONST_4.BASE_LO)")
  if fmt not in TEXEL_BYTES: raise ValueError(f"image format {fmt} is not float32/float16, RGBA or one channel (adreno_image.TEXEL_BYTES)")
  w, h = image_shape(nbytes, fmt)
  sw = E["a6xx_tex_swiz"]
  words = [0] * TEX_CONST_DWORDS
  words[0] = _enc("A6XX_TEX_CONST", 0, TILE_MODE=E["a6xx_tile_mode"]["TILE6_LINEAR"], SWIZ_X=sw["A6XX_TEX_X"], SWIZ_Y=sw["A6XX_TEX_Y"],
                  SWIZ_Z=sw["A6XX_TEX_Z"], SWIZ_W=sw["A6XX_TEX_W"], FMT=fmt)
  words[1] = _enc("A6XX_TEX_CONST", 1, WIDTH=w, HEIGHT=h)
  words[2] = _enc("A6XX_TEX_CONST", 2, PITCHALIGN=0, PITCH=IMAGE_ROW_BYTES, TYPE=E["a6xx_tex_type"]["A6XX_TEX_2D"])
  words[4] = va & 0xFFFFFFE0
  words[5] = _enc("A6XX_TEX_CONST", 5, BASE_HI=va >> 32, DEPTH=1)
  return words


def tex_samp() -> list[int]:
  """The 4 dwords of the A6XX_TEX_SAMP the image loads use: nearest, clamp to edge, unnormalized coordinates."""
  c = E["a6xx_tex_clamp"]["A6XX_TEX_CLAMP_TO_EDGE"]
  n = E["a6xx_tex_filter"]["A6XX_TEX_NEAREST"]
  return [_enc("A6XX_TEX_SAMP", 0, XY_MAG=n, XY_MIN=n, WRAP_S=c, WRAP_T=c, WRAP_R=c),
          _enc("A6XX_TEX_SAMP", 1, UNNORM_COORDS=1), 0, 0]
