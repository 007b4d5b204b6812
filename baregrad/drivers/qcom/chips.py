"""Adreno chips the driver knows, one record each (data), and the lookup from KGSL's chip id.

KGSL reports chip_id in kgsl_devinfo. On a6xx it is bytes core.major.minor.patch (0x06030001 is an a630 patch 1) and
the patch byte is ignored; a7xx parts are matched on the whole id, as Mesa's device table lists them (0x07030001 is
an a730, 0x07030002 an a725; 0x43050a01 an a740, 0x43050a00 another part). Facts from Mesa's
src/freedreno/common/freedreno_devices.py: the chip ids, the generation, the register file (reg_size_vec4: vec4
registers per fiber of the sub-generation's template), the threads per wave (threadsize_base) and the "magic"
registers (chicken and debug-ECO bits turnip writes at init, tu6_init_hw / the magic_regs of each part). GMEM sizes
are KGSL's (adreno-gpulist.h, gmem_size of each core).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class AdrenoChip:
  """One Adreno part: its name, Mesa gpu_id, KGSL chip id (and which bits of it identify the part), generation, GMEM
  bytes, threads per wave, vec4 registers per fiber, and the magic registers turnip sets for it (name, value)."""
  name: str
  gpu_id: int
  chip_id: int
  gen: int
  gmem_bytes: int
  wave_size: int
  reg_size_vec4: int
  magic_regs: tuple[tuple[str, int], ...] = field(default=(), repr=False)
  id_mask: int = 0xFFFFFF00   # a6xx: the patch byte varies between steppings of one part

  def matches(self, chip_id: int) -> bool:
    """Whether KGSL's `chip_id` is this part."""
    return chip_id & self.id_mask == self.chip_id


_A630_MAGIC = (("PC_POWER_CNTL", 1), ("TPL1_DBG_ECO_CNTL", 0x00108000), ("GRAS_DBG_ECO_CNTL", 0x00000880), ("SP_CHICKEN_BITS", 0x00001430),
               ("UCHE_CLIENT_PF", 0x00000004), ("PC_MODE_CNTL", 0x1F), ("SP_DBG_ECO_CNTL", 0), ("RB_DBG_ECO_CNTL", 0x04100000),
               ("HLSQ_DBG_ECO_CNTL", 0x00080000), ("VPC_DBG_ECO_CNTL", 0), ("UCHE_UNKNOWN_0E12", 0x10000001))
_A640_MAGIC = (("PC_POWER_CNTL", 1), ("TPL1_DBG_ECO_CNTL", 0x00008000), ("GRAS_DBG_ECO_CNTL", 0), ("SP_CHICKEN_BITS", 0x00000420),
               ("UCHE_CLIENT_PF", 0x00000004), ("PC_MODE_CNTL", 0x1F), ("SP_DBG_ECO_CNTL", 0), ("RB_DBG_ECO_CNTL", 0x04100000),
               ("HLSQ_DBG_ECO_CNTL", 0), ("VPC_DBG_ECO_CNTL", 0x02000000), ("UCHE_UNKNOWN_0E12", 0x00000001))
_A650_MAGIC = (("PC_POWER_CNTL", 2), ("TPL1_DBG_ECO_CNTL", 0x01008000), ("GRAS_DBG_ECO_CNTL", 0), ("SP_CHICKEN_BITS", 0x00001400),
               ("UCHE_CLIENT_PF", 0x00000004), ("PC_MODE_CNTL", 0x1F), ("SP_DBG_ECO_CNTL", 0x01000000), ("RB_DBG_ECO_CNTL", 0x04100000),
               ("HLSQ_DBG_ECO_CNTL", 0), ("VPC_DBG_ECO_CNTL", 0x02000000), ("UCHE_UNKNOWN_0E12", 0x00000001))
_A660_MAGIC = (("PC_POWER_CNTL", 2), ("TPL1_DBG_ECO_CNTL", 0x05008000), ("GRAS_DBG_ECO_CNTL", 0), ("SP_CHICKEN_BITS", 0x00001400),
               ("UCHE_CLIENT_PF", 0x00000084), ("PC_MODE_CNTL", 0x1F), ("SP_DBG_ECO_CNTL", 0x01000000), ("RB_DBG_ECO_CNTL", 0x04100000),
               ("HLSQ_DBG_ECO_CNTL", 0), ("VPC_DBG_ECO_CNTL", 0x02000000), ("UCHE_UNKNOWN_0E12", 0x00000001))
_A730_MAGIC = (("TPL1_DBG_ECO_CNTL", 0x1000000), ("GRAS_DBG_ECO_CNTL", 0x800), ("SP_CHICKEN_BITS", 0x1440), ("UCHE_CLIENT_PF", 0x00000084),
               ("PC_MODE_CNTL", 0x3F), ("SP_DBG_ECO_CNTL", 0x10000000), ("RB_DBG_ECO_CNTL", 0), ("VPC_DBG_ECO_CNTL", 0x02000000),
               ("UCHE_UNKNOWN_0E12", 0x3200000), ("RB_UNKNOWN_8E06", 0x02080000))
_A740_MAGIC = (("TPL1_DBG_ECO_CNTL", 0x11100000), ("GRAS_DBG_ECO_CNTL", 0x00004800), ("SP_CHICKEN_BITS", 0x10001400), ("UCHE_CLIENT_PF", 0x00000084),
               ("PC_MODE_CNTL", 0x3F), ("SP_DBG_ECO_CNTL", 0x10000000), ("RB_DBG_ECO_CNTL", 0), ("VPC_DBG_ECO_CNTL", 0x02000000),
               ("UCHE_UNKNOWN_0E12", 0), ("RB_UNKNOWN_8E06", 0x02080000))
_A750_MAGIC = (("TPL1_DBG_ECO_CNTL", 0x11100000), ("GRAS_DBG_ECO_CNTL", 0x00004800), ("SP_CHICKEN_BITS", 0x10000400), ("PC_MODE_CNTL", 0x00003F1F),
               ("SP_DBG_ECO_CNTL", 0x10000000), ("RB_DBG_ECO_CNTL", 0x00000001), ("VPC_DBG_ECO_CNTL", 0x02000000),
               ("UCHE_UNKNOWN_0E12", 0x40000000), ("RB_UNKNOWN_8E06", 0x02082000))

CHIPS: tuple[AdrenoChip, ...] = (
  AdrenoChip("a630", 630, 0x06030000, 6, 1 << 20, 64, 96, _A630_MAGIC),
  AdrenoChip("a640", 640, 0x06040000, 6, 1 << 20, 64, 96, _A640_MAGIC),
  AdrenoChip("a650", 650, 0x06050000, 6, 3 << 19, 64, 64, _A650_MAGIC),
  AdrenoChip("a660", 660, 0x06060000, 6, 3 << 19, 64, 64, _A660_MAGIC),
  AdrenoChip("a730", 730, 0x07030001, 7, 2 << 20, 64, 96, _A730_MAGIC, 0xFFFFFFFF),
  AdrenoChip("a740", 740, 0x43050A01, 7, 3 << 20, 64, 96, _A740_MAGIC, 0xFFFFFFFF),
  AdrenoChip("a750", 750, 0x43051401, 7, 3 << 20, 64, 96, _A750_MAGIC, 0xFFFFFFFF),
)


class UnknownChip(LookupError):
  """KGSL reported a chip id that is not in CHIPS."""


def chip_name(chip_id: int) -> str:
  """The part's name: from CHIPS, else 'aNNN' read as core.major.minor.patch (a6xx-style ids)."""
  for c in CHIPS:
    if c.matches(chip_id): return c.name
  return f"a{(chip_id >> 24 & 0xFF) * 100 + (chip_id >> 16 & 0xFF) * 10 + (chip_id >> 8 & 0xFF)}"


def lookup(chip_id: int) -> AdrenoChip:
  """The record for `chip_id`; an unknown chip is refused by name."""
  for c in CHIPS:
    if c.matches(chip_id): return c
  raise UnknownChip(f"Adreno chip id {chip_id:#010x} ({chip_name(chip_id)}) is not supported; "
                    f"known: {', '.join(f'{c.name} ({c.chip_id:#010x})' for c in CHIPS)}")


def by_name(name: str) -> AdrenoChip:
  """The record of part `name` ('a630', 'a740', ...); an unknown name is refused listing the known ones."""
  for c in CHIPS:
    if c.name == name: return c
  raise UnknownChip(f"no Adreno part named {name!r}; known: {', '.join(c.name for c in CHIPS)}")
