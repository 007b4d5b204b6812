"""AMD GPU hardware definitions generated from the amdgpu driver in Debian's linux-source-6.12,
and the AQL packet / kernel descriptor (hsa). gfx11 = RDNA3 (GC 11.0.0), gfx9_4_3 = CDNA3
(GC 9.4.3: MI300). pm4_* are the PM4 type-3 packets, sdma_* the SDMA packets used with each."""
