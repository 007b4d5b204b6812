"""The generated modules as a driver uses them, the runtime helpers, and the CLI."""
from __future__ import annotations

import ctypes
import importlib
import mmap
import os
import subprocess
import sys
import types

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # autogen_testlib, also under --import-mode=importlib

from autogen_testlib import ROOT, sources_matching
from autogen.cli import make, out_path
from autogen.gen import GENERATED_LINE, Source
from autogen.modules import MODULES
from autogen.rnn import XmlModule, generate_xml
from baregrad.ctypes_autogen import _support

HEADERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "headers")


@pytest.mark.parametrize("name", sorted(MODULES))
def test_generated_file_names_its_sources(name: str) -> None:
  lines = open(out_path(name)).read().splitlines()[:6]
  assert lines[0] == GENERATED_LINE
  assert lines[2].startswith("# Source: ") and any(l.startswith("# Command: python tools/autogen.py " + name) for l in lines)
  mod = importlib.import_module(f"baregrad.ctypes_autogen.{name}")
  assert mod.SOURCE in lines[2]


def test_generated_modules_import_only_ctypes() -> None:
  """Layer 1: the generated modules import ctypes and _support, nothing else."""
  for name in MODULES:
    for line in open(out_path(name)):
      if line.startswith(("import ", "from ")):
        assert line.strip() in ("import ctypes", "from baregrad.ctypes_autogen import _support"), (name, line)
  src = open(os.path.join(ROOT, "baregrad", "ctypes_autogen", "_support.py")).read()
  assert [l for l in src.splitlines() if l.startswith(("import ", "from "))] == [
    "from __future__ import annotations", "import ctypes", "from typing import Any, NamedTuple, Optional, Sequence"]


@pytest.mark.parametrize("name", ["kfd", "amdgpu.hsa", "libc", "adreno", "amdgpu.enum_gfx11", "amdgpu.enum_gfx9_4_3"])
def test_committed_module_is_what_the_generator_makes(name: str) -> None:
  src, why = sources_matching(name, importlib.import_module(f"baregrad.ctypes_autogen.{name}"))
  if src is None: pytest.skip(why)
  text, _ = make(name, src, [])
  assert text == open(out_path(name)).read(), f"{name} is stale: python tools/autogen.py {name}"


def test_check_command_runs() -> None:
  r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "autogen.py"), "--list"], capture_output=True, text=True)
  assert r.returncode == 0 and "nv.nv_580" in r.stdout
  r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "autogen.py"), "nosuchmodule"], capture_output=True, text=True)
  assert r.returncode == 2 and "unknown module nosuchmodule" in r.stderr


def test_libc_round_trip() -> None:
  from baregrad.ctypes_autogen import libc
  fd = libc.memfd_create(b"autogen-test", libc.MFD_CLOEXEC)
  assert fd >= 0
  try:
    assert os.ftruncate(fd, mmap.PAGESIZE) is None
    p = libc.mmap(None, mmap.PAGESIZE, libc.PROT_READ | libc.PROT_WRITE, libc.MAP_SHARED, fd, 0)
    assert p not in (None, ctypes.c_void_p(-1).value)
    ctypes.memmove(p, b"baregrad", 8)
    assert os.pread(fd, 8, 0) == b"baregrad"
    assert libc.madvise(p, mmap.PAGESIZE, libc.MADV_DONTNEED) == 0
    assert libc.munmap(p, mmap.PAGESIZE) == 0
  finally:
    assert libc.close(fd) == 0
  assert libc.ioctl(-1, 0) == -1 and ctypes.get_errno() == libc.EBADF
  assert libc.open(b"/nonexistent/autogen", libc.O_RDONLY) == -1 and ctypes.get_errno() == libc.ENOENT


def test_fallback_libraries_bind_lazily() -> None:
  from baregrad.ctypes_autogen import cuda, nvrtc, opencl  # importing never needs the library
  assert cuda.cuMemAlloc is cuda.cuMemAlloc_v2 and cuda.CUDA_SUCCESS == 0
  for f, lib in ((cuda.cuInit, "libcuda"), (nvrtc.nvrtcVersion, "libnvrtc"), (opencl.clGetPlatformIDs, "libOpenCL")):
    try:
      f.resolve()
    except _support.LibraryMissing as e:
      assert lib in str(e) and f.lib.hint in str(e)


def test_ioctl_numbers() -> None:
  from baregrad.ctypes_autogen import kfd
  assert kfd.AMDKFD_IOC_CREATE_QUEUE == _support.IOWR("K", 0x02, ctypes.sizeof(kfd.struct_kfd_ioctl_create_queue_args))
  assert kfd.AMDKFD_IOC_GET_VERSION == _support.IOR("K", 0x01, 8)
  with pytest.raises(ValueError):
    _support.IOC(3, "K", 256, 0)


def test_nv_module_pick() -> None:
  from baregrad.ctypes_autogen import nv
  m = nv.pick_nv_module("580.95.05")
  assert m.NV_ESC_RM_ALLOC == 0x2B and m.UVM_INITIALIZE == 0x30000001
  assert ctypes.sizeof(m.NVOS21_PARAMETERS) == 32 and m.NVC56F_GP_ENTRY1_LENGTH == (30, 10)
  assert ctypes.sizeof(nv.pick_nv_module("575.64.05").NV_VASPACE_ALLOCATION_PARAMETERS) == 48
  assert ctypes.sizeof(nv.pick_nv_module("580.142").NV_VASPACE_ALLOCATION_PARAMETERS) == 56
  for branch, (mod, tag) in nv.BRANCHES.items():
    assert nv.pick_nv_module(tag).__name__.endswith(mod) and f"at tag {tag}" in nv.pick_nv_module(tag).SOURCE
  for b in nv.BRANCHES: assert nv.pick_nv_module(b + ".1").NV_IOCTL_MAGIC == 0x46
  assert nv.rm_ioctl_number(m.NV_ESC_RM_ALLOC, m.NVOS21_PARAMETERS) == 0xC020462B  # _IOWR('F', 0x2B, 32)
  for bad in ("550.54.14", "999.1", "not a version"):
    with pytest.raises(nv.UnsupportedDriverVersion, match="no generated bindings|not an NVIDIA driver version"):
      nv.pick_nv_module(bad)


def test_qmd_fields_encode() -> None:
  from baregrad.ctypes_autogen.nv import qmd
  f = qmd.NVC6C0_QMDV03_00_CTA_RASTER_WIDTH
  assert f == (415, 384)  # clc6c0qmd.h: MW(415:384)
  words = (ctypes.c_uint32 * 64)()
  f.set(words, 1234)
  assert words[12] == 1234 and f.get(words) == 1234


def test_amd_register_fields() -> None:
  from baregrad.ctypes_autogen.amdgpu import gfx11, gfx9_4_3, hsa
  assert gfx11.COMPUTE_PGM_RSRC1__VGPRS == (5, 0) and gfx11.regCOMPUTE_PGM_LO != gfx9_4_3.regCOMPUTE_PGM_LO
  assert ctypes.sizeof(hsa.hsa_kernel_dispatch_packet_t) == 64 and hsa.hsa_kernel_dispatch_packet_t.kernel_object.offset == 32
  assert ctypes.sizeof(hsa.amdhsa_kernel_descriptor_t) == 64 and hsa.amdhsa_kernel_descriptor_t.compute_pgm_rsrc1.offset == 48


def test_register_xml_generator() -> None:
  spec = XmlModule("t", Source("test xml", lambda s: "(test)", None, "written by the tests"), files=["mini_rnn.xml"],
                   gens=["A6XX", "A7XX"], domains=["A6XX"], packet_enum="adreno_pm4_type3_packets")
  text, _ = generate_xml(spec, HEADERS, "CMD")
  mod = types.ModuleType("t")
  exec(compile(text, "<generated>", "exec"), mod.__dict__)
  assert mod.REGS_A6XX["MOVED"] == 0x200 and mod.REGS_A7XX["MOVED"] == 0x300
  assert mod.ARRAYS_A6XX["SLOT"] == (0x500, 4, 8) and mod.REGS_A6XX["SLOT_SIZE"] == 0x501
  assert mod.FIELDS_A6XX["CTRL"] == {"ENABLE": (0, 0), "MODE": (2, 1)}
  assert mod.FIELDS_A7XX["CTRL"]["LATE"] == (15, 8) and mod.FIELDS_A6XX["SLOT_SIZE"]["DWORDS"] == (19, 0)
  assert mod.PM4_A6XX == {"CP_NOP": 0x10, "CP_OLD": 0x20} and mod.PM4_A7XX == {"CP_NOP": 0x10, "CP_NEW": 0x21}
  assert mod.CP_NOP == 0x10 and not hasattr(mod, "CP_OLD")
  assert mod.PACKET_FIELDS_A6XX["CP_EXEC_CS"]["1"]["NGROUPS_X"] == (31, 0)
  assert mod.ENUMS["mini_mode"] == {"MODE_A": 0, "MODE_B": 3}


def test_adreno_and_kgsl_modules() -> None:
  from baregrad.ctypes_autogen import adreno, kgsl
  assert adreno.REGS_A6XX["SP_CS_CTRL_REG0"] == 0xA9B0 and adreno.PM4_A6XX["CP_EXEC_CS"] == 0x33
  assert adreno.FIELDS_A7XX["HLSQ_CS_NDRANGE_0"]["LOCALSIZEX"] == (11, 2)
  assert kgsl.IOCTL_KGSL_GPUOBJ_ALLOC == _support.IOWR(0x09, 0x45, ctypes.sizeof(kgsl.struct_kgsl_gpuobj_alloc))
