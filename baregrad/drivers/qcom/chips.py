"""Adreno chips the driver knows, one record each (data), and the lookup from KGSL's chip id.

KGSL reports chip_id in kgsl_devinfo as bytes core.major.minor.patch (0x06030001 is an a630 patch 1); the marketing
name is core*100 + major*10 + minor. GMEM sizes and generations are Mesa's freedreno_devices.py facts.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AdrenoChip:
  """One Adreno part: its name, KGSL chip id with the patch byte cleared, generation, GMEM bytes, threads per wave."""
  name: str
  chip_id: int
  gen: int
  gmem_bytes: int
  wave_size: int


CHIPS: tuple[AdrenoChip, ...] = (
  AdrenoChip("a630", 0x06030000, 6, 1 << 20, 64),
  AdrenoChip("a640", 0x06040000, 6, 1 << 20, 64),
  AdrenoChip("a650", 0x06050000, 6, 3 << 19, 64),
  AdrenoChip("a660", 0x06060000, 6, 3 << 19, 64),
)


class UnknownChip(LookupError):
  """KGSL reported a chip id that is not in CHIPS."""


def chip_name(chip_id: int) -> str:
  """'aNNN' from a core.major.minor.patch chip id."""
  return f"a{(chip_id >> 24 & 0xFF) * 100 + (chip_id >> 16 & 0xFF) * 10 + (chip_id >> 8 & 0xFF)}"


def lookup(chip_id: int) -> AdrenoChip:
  """The record for `chip_id` (patch byte ignored); an unknown chip is refused by name."""
  for c in CHIPS:
    if c.chip_id == chip_id & 0xFFFFFF00: return c
  raise UnknownChip(f"Adreno chip id {chip_id:#010x} ({chip_name(chip_id)}) is not supported; "
                    f"known: {', '.join(f'{c.name} ({c.chip_id:#010x})' for c in CHIPS)}")
