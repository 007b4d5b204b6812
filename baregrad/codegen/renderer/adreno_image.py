"""How a kernel buffer is laid out as an Adreno image (the NIR renderer's image loads and the QCOM driver's texture
descriptors agree on it; drivers/qcom/texture.py builds the descriptors).

The buffer's elements in order, IMAGE_ROW_BYTES to a row. Two views of one buffer: RGBA (four elements a texel:
element i is component i % 4 of texel i // 4) where the loads of a texel can share one isam, and one-channel (a texel
per element) for the other loads. Texel t of a view is at x = t % row_texels, y = t // row_texels. Rows of 4096 bytes
are a multiple of the 64-byte pitch alignment; formats are a6xx.xml's a6xx_format values.
"""
from __future__ import annotations

from baregrad.ctypes_autogen import adreno

_FMT = adreno.ENUMS["a6xx_format"]
FMT_F32, FMT_F16 = _FMT["FMT6_32_32_32_32_FLOAT"], _FMT["FMT6_16_16_16_16_FLOAT"]   # RGBA views
FMT_R32, FMT_R16 = _FMT["FMT6_32_FLOAT"], _FMT["FMT6_16_FLOAT"]                     # one-channel views
TEXEL_BYTES = {FMT_F32: 16, FMT_F16: 8, FMT_R32: 4, FMT_R16: 2}
IMAGE_ROW_BYTES = 4096
MAX_DIM = 16384   # a6xx's largest texture width / height (Mesa freedreno_dev_info, turnip maxImageDimension2D)


def row_texels(fmt: int) -> int:
  """Texels per row of an image of format `fmt`."""
  return IMAGE_ROW_BYTES // TEXEL_BYTES[fmt]
