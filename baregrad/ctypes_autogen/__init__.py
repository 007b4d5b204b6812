"""ctypes bindings generated from the real C headers by tools/autogen.py (layer 1: imports only ctypes).

Every module's first lines name its sources (package or repository, and version or tag) and
the exact command that made it; never edit one by hand. Layouts are the C compiler's: the
generator asks gcc for every sizeof/offsetof/bitfield and fits ctypes to it, and
tests/autogen/test_layouts.py checks each record again (through cffi where the headers are
on the machine, else against the layout recorded at generation, `_LAYOUT`).

  libc              open/close/ioctl/mmap/munmap/madvise/mremap/memfd_create, flags, errno names
  kfd               AMD KFD ioctls and argument structs (linux/kfd_ioctl.h, Debian linux-libc-dev)
  amdgpu.gfx11      GC 11 (RDNA3) compute registers and fields   } Debian linux-source-6.12,
  amdgpu.gfx9_4_3   GC 9.4.3 (CDNA3) compute registers and fields } drivers/gpu/drm/amd
  amdgpu.pm4_*      PM4 type-3 packets; amdgpu.sdma_*: SDMA packets (per generation)
  amdgpu.hsa        AQL dispatch/barrier packets, AMDHSA kernel descriptor (tools/autogen/headers/amd_hsa.h)
  nv.nv_5xx         NVIDIA RM/UVM interface per driver branch; nv.pick_nv_module(version) chooses
  nv.qmd            compute QMD v03/v04/v05 fields (open-gpu-doc)
  kgsl              Qualcomm KGSL ioctls (qualcomm-linux/kgsl)
  adreno            Adreno A6xx/A7xx registers, bitfields, CP opcodes (freedreno register XML)
  opencl, cuda, nvrtc   function prototypes and constants of the fallback APIs, bound lazily

Regenerate one module: `python tools/autogen.py MODULE [--src PATH]`; all whose sources are
here: `python tools/autogen.py --all`; compare with what is committed: `python tools/autogen.py --check`.
Hand-written here: this file, `_support.py` (runtime helpers), `amdgpu/__init__.py`, `nv/__init__.py`.
"""
