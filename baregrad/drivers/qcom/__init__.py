"""Qualcomm Adreno over KGSL (work in progress: packet streams and the chip table; no device class yet)."""
