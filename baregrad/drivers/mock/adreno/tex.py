"""The mock Adreno's texture unit for isam: texture descriptors (A6XX_TEX_CONST) and samplers (A6XX_TEX_SAMP) decoded
and checked, and texels fetched from GPU memory.

Field layouts: a6xx.xml domains A6XX_TEX_CONST / A6XX_TEX_SAMP (ctypes_autogen/adreno.py DESCRIPTOR_FIELDS_A6XX), read
here independently of the driver's encoder (drivers/qcom/texture.py): a driver that writes a field wrongly fails here.
What a valid descriptor holds follows Mesa's fdl6_view_init (src/freedreno/fdl/fd6_view.cc: WIDTH and HEIGHT are the
size itself, PITCH in bytes, DEPTH the layers, 1 for a 2-D image) and turnip / freedreno, which build them with it.

Modelled: linear, single-sample, uncompressed 2-D images of RGBA or one-channel float32 or float16 (the image path's),
with the descriptor's swizzle. isam takes integer texel coordinates (x, y); coordinates outside [0, WIDTH) x
[0, HEIGHT) are resolved by the sampler's WRAP_S / WRAP_T: CLAMP_TO_EDGE clamps them, REPEAT wraps them. The other
wrap modes (border colours from the border-colour table, mirroring) are refused by name, not guessed.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from baregrad.ctypes_autogen import adreno
from baregrad.drivers.mock.adreno.cp import CPError, GpuMemory

D = adreno.DESCRIPTOR_FIELDS_A6XX
E = adreno.ENUMS
FMT = E["a6xx_format"]
# modelled formats -> (component type, components); a one-channel texel reads as (r, 0, 0, 1), as texture units fill the
# components a format lacks (OpenGL 4.6 section 15.2.1 / Vulkan "Format Conversion": missing G, B are 0, A is 1)
FORMATS = {FMT["FMT6_32_32_32_32_FLOAT"]: (np.dtype("<f4"), 4), FMT["FMT6_16_16_16_16_FLOAT"]: (np.dtype("<f2"), 4),
           FMT["FMT6_32_FLOAT"]: (np.dtype("<f4"), 1), FMT["FMT6_16_FLOAT"]: (np.dtype("<f2"), 1)}
SWIZ = E["a6xx_tex_swiz"]
CLAMP = E["a6xx_tex_clamp"]


class TextureError(CPError):
  """A texture descriptor or sampler the texture unit cannot use."""


def _get(domain: str, words: list[int] | np.ndarray, dword: int, field: str) -> int:
  return D[domain][str(dword)][field].decode(int(words[dword]))


@dataclass(frozen=True)
class Texture:
  """A decoded 2-D texture: base address, size in texels, row pitch in bytes, component type and count, the swizzle."""
  base: int
  width: int
  height: int
  pitch: int
  texel: np.dtype
  channels: int
  swizzle: tuple[int, int, int, int]


@dataclass(frozen=True)
class Sampler:
  """The parts of A6XX_TEX_SAMP an isam uses: how x and y outside the image are resolved."""
  wrap_s: int
  wrap_t: int


def decode_tex_const(words: list[int] | np.ndarray, slot: int) -> Texture:
  """A6XX_TEX_CONST (16 dwords) -> Texture, refusing what is malformed or not modelled (each check names its source)."""
  # a6xx.xml domain A6XX_TEX_CONST: 16 dwords (A6XX_TEX_CONST_0 .. _15)
  if len(words) < 16: raise TextureError(f"texture {slot}: descriptor of {len(words)} dwords, A6XX_TEX_CONST is 16")
  g = lambda dw, f: _get("A6XX_TEX_CONST", words, dw, f)  # noqa: E731
  where = f"texture {slot} (A6XX_TEX_CONST"
  # a6xx.xml A6XX_TEX_CONST_2.TYPE (a6xx_tex_type): the model reads 2-D images
  if (t := g(2, "TYPE")) != E["a6xx_tex_type"]["A6XX_TEX_2D"]: raise TextureError(f"{where}_2.TYPE) is {t}, expected A6XX_TEX_2D (1)")
  # a6xx.xml A6XX_TEX_CONST_0.FMT (a6xx_format): RGBA or one-channel float32 / float16 are modelled
  if (f := g(0, "FMT")) not in FORMATS:
    raise TextureError(f"{where}_0.FMT) is {f}, expected one of {sorted(FORMATS)} (RGBA or one-channel float32 / float16)")
  # a6xx.xml TILE_MODE (a6xx_tile_mode), SAMPLES (a3xx_msaa_samples), A6XX_TEX_CONST_3.FLAG (UBWC): linear, 1 sample, plain
  if (tm := g(0, "TILE_MODE")) != E["a6xx_tile_mode"]["TILE6_LINEAR"]: raise TextureError(f"{where}_0.TILE_MODE) is {tm}, expected TILE6_LINEAR (0)")
  # a6xx.xml A6XX_TEX_CONST_0.SAMPLES (a3xx_msaa_samples): MSAA_ONE
  if (s := g(0, "SAMPLES")) != 0: raise TextureError(f"{where}_0.SAMPLES) is {s}, expected MSAA_ONE (0)")
  # a6xx.xml A6XX_TEX_CONST_3.FLAG: UBWC flag buffer in use; model's own limit: uncompressed only
  if g(3, "FLAG"): raise TextureError(f"{where}_3.FLAG) is set (UBWC compressed), expected 0")
  # a6xx.xml MIPLVLS: mipmap levels past the first (fdl6_view_init: levels - 1); isam reads level 0 of one level
  if (m := g(0, "MIPLVLS")) != 0: raise TextureError(f"{where}_0.MIPLVLS) is {m}, expected 0 (one level)")
  # fdl6_view_init: WIDTH / HEIGHT are the size in texels (not minus one), so 0 is no image
  w, h = g(1, "WIDTH"), g(1, "HEIGHT")
  if w == 0 or h == 0: raise TextureError(f"{where}_1) is {w}x{h} texels, expected both at least 1")
  # a6xx.xml A6XX_TEX_CONST_2.PITCH (bytes) and PITCHALIGN (log2(pitchalign / 64)): a row holds its texels, at that alignment
  tb = FORMATS[f][1] * FORMATS[f][0].itemsize
  pitch, palign = g(2, "PITCH"), 64 << g(2, "PITCHALIGN")
  if pitch < w * tb or pitch % palign:
    raise TextureError(f"{where}_2.PITCH) is {pitch} bytes for {w} texels of {tb} bytes; expected at least {w * tb} and a multiple of {palign}")
  # a6xx.xml A6XX_TEX_CONST_4.BASE_LO is bits 31:5 (the address in 32-byte units): bits 4:0 are not part of it
  if int(words[4]) & 0x1F: raise TextureError(f"{where}_4) is {int(words[4]):#x}: bits 4:0 are not BASE_LO (bits 31:5), expected them 0")
  base = (int(words[4]) & 0xFFFFFFE0) | g(5, "BASE_HI") << 32
  # a6xx.xml A6XX_TEX_CONST_4/5 BASE_LO/BASE_HI; model's own: address 0 is never a mapped object (fdl6_view_init sets it)
  if base == 0: raise TextureError(f"{where}_4/5) has base address 0")
  # fdl6_view_init: DEPTH is the layer count, 1 for a 2-D image
  if (dp := g(5, "DEPTH")) != 1: raise TextureError(f"{where}_5.DEPTH) is {dp}, expected 1 for a 2-D image")
  sw = tuple(g(0, f"SWIZ_{c}") for c in "XYZW")
  # a6xx.xml A6XX_TEX_CONST_0.SWIZ_X..W (a6xx_tex_swiz): A6XX_TEX_X..A6XX_TEX_ONE are 0..5
  if any(x not in SWIZ.values() for x in sw): raise TextureError(f"{where}_0.SWIZ_*) is {sw}, expected a6xx_tex_swiz values 0..5")
  return Texture(base, w, h, pitch, FORMATS[f][0], FORMATS[f][1], sw)  # type: ignore[arg-type]


def decode_tex_samp(words: list[int] | np.ndarray, slot: int) -> Sampler:
  """A6XX_TEX_SAMP (4 dwords) -> Sampler; wrap modes the model does not resolve are refused by name."""
  # a6xx.xml domain A6XX_TEX_SAMP: 4 dwords (A6XX_TEX_SAMP_0 .. _3)
  if len(words) < 4: raise TextureError(f"sampler {slot}: {len(words)} dwords, A6XX_TEX_SAMP is 4")
  ws, wt = _get("A6XX_TEX_SAMP", words, 0, "WRAP_S"), _get("A6XX_TEX_SAMP", words, 0, "WRAP_T")
  names = {v: k for k, v in CLAMP.items()}
  for axis, v in (("WRAP_S", ws), ("WRAP_T", wt)):
    # a6xx.xml A6XX_TEX_SAMP_0.WRAP_S / WRAP_T (a6xx_tex_clamp); model's own limit: CLAMP_TO_EDGE and REPEAT are resolved
    if v not in (CLAMP["A6XX_TEX_CLAMP_TO_EDGE"], CLAMP["A6XX_TEX_REPEAT"]):
      raise TextureError(f"sampler {slot} (A6XX_TEX_SAMP_0.{axis}) is {names.get(v, v)}: the model resolves A6XX_TEX_CLAMP_TO_EDGE and A6XX_TEX_REPEAT")
  return Sampler(ws, wt)


def _wrap(c: np.ndarray, n: int, mode: int) -> np.ndarray:
  if mode == CLAMP["A6XX_TEX_REPEAT"]: return np.mod(c, n)
  return np.clip(c, 0, n - 1)


def fetch(mem: GpuMemory, tex: Texture, samp: Sampler, x: np.ndarray, y: np.ndarray) -> np.ndarray:
  """The texels at integer (x, y) per lane, as float32 RGBA after the swizzle: shape (4, lanes)."""
  xi, yi = _wrap(x.astype(np.int64), tex.width, samp.wrap_s), _wrap(y.astype(np.int64), tex.height, samp.wrap_t)
  nc = tex.channels
  tb = nc * tex.texel.itemsize
  addr = tex.base + yi * tex.pitch + xi * tb
  out = np.zeros((len(addr), 4), np.float32)
  out[:, 3] = 1.0   # (a one-channel texel's alpha)
  if len(addr):
    lo, hi = int(addr.min()), int(addr.max()) + tb
    for base, buf in mem.ranges:
      if base <= lo and hi <= base + len(buf):
        raw = np.frombuffer(buf, np.uint8)
        idx = (addr - base)[:, None] + np.arange(tb)
        out[:, :nc] = raw[idx].copy().view(tex.texel).reshape(len(addr), nc).astype(np.float32)
        break
    else:
      for i, a in enumerate(addr): out[i, :nc] = np.frombuffer(mem.read(int(a), tb), tex.texel).astype(np.float32)
  comps = [out[:, s] if s < 4 else np.full(len(addr), 0.0 if s == SWIZ["A6XX_TEX_ZERO"] else 1.0, np.float32) for s in tex.swizzle]
  return np.stack(comps)
