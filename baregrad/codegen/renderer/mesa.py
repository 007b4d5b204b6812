"""A small hand-written ctypes layer over Mesa's NIR builder and ir3 compiler in the tinymesa wheel (pinned: 25.2.7.2).

tinymesa ships libtinymesa.so (Mesa's NIR, ir3 and freedreno device tables) with DWARF debug info, so every
structure offset used here was read from that very library (`gdb -batch -ex 'ptype /o struct X' libtinymesa.so`)
and `tests/drivers/qcom/test_nir_renderer.py::test_layout_matches_dwarf` checks them again where gdb is installed.
The headers each piece mirrors are named beside it (Mesa 25.2: src/compiler/nir/nir.h, nir_builder.h,
src/freedreno/ir3/ir3_shader.h, ir3_compiler.h, src/freedreno/common/freedreno_dev_info.h, src/util/blob.h).

Opcode and intrinsic numbers are generated at Mesa build time (nir_opcodes.h, nir_intrinsics.h), so they are looked
up by name in the library's own `nir_op_infos` / `nir_intrinsic_infos` tables rather than written down.
"""
from __future__ import annotations

import ctypes
import functools
import struct
from ctypes import c_bool, c_char_p, c_int, c_uint, c_uint8, c_uint32, c_uint64, c_void_p, POINTER
from typing import Any

TINYMESA_VERSION = "25.2.7.2"


class MesaUnavailable(RuntimeError):
  """tinymesa (pip install tinymesa==25.2.7.2) is not installed or is not the pinned version."""


# ---- nir.h / shader_enums.h constants (values printed by gdb from the library's DWARF)
MESA_SHADER_COMPUTE = 5                    # gl_shader_stage
NIR_JUMP_BREAK = 2                         # nir_jump_type
# nir_intrinsic_index_flag
IDX_BASE, IDX_WRITE_MASK, IDX_RANGE, IDX_ACCESS, IDX_ALIGN_MUL, IDX_ALIGN_OFFSET, IDX_DEST_TYPE = 0, 1, 5, 17, 20, 21, 24
IDX_MEMORY_SEMANTICS, IDX_MEMORY_MODES, IDX_MEMORY_SCOPE, IDX_EXECUTION_SCOPE = 37, 38, 39, 40
IDX_IMAGE_DIM, IDX_IMAGE_ARRAY, IDX_FORMAT = 14, 15, 16
GLSL_SAMPLER_DIM_2D = 1                    # glsl_sampler_dim
ACCESS_NON_WRITEABLE, ACCESS_CAN_REORDER = 16, 64   # gl_access_qualifier
NIR_TYPE_FLOAT32 = 160                     # nir_alu_type: float | 32
PIPE_FORMAT_R32G32B32A32_FLOAT, PIPE_FORMAT_R16G16B16A16_FLOAT, PIPE_FORMAT_R32_FLOAT, PIPE_FORMAT_R16_FLOAT = 16, 83, 13, 80   # pipe_format
IDX_NUM_COMPONENTS, IDX_NUM_ARRAY_ELEMS, IDX_BIT_SIZE, IDX_RANGE_BASE = 55, 56, 57, 4
SCOPE_WORKGROUP = 4                        # mesa_scope
NIR_MEMORY_ACQ_REL = 3                     # nir_memory_semantics (ACQUIRE | RELEASE)
NIR_VAR_MEM_SHARED, NIR_VAR_MEM_GLOBAL = 1 << 19, 1 << 20   # nir_variable_mode
# nir_alu_type: base type | bit size
NIR_TYPE_INT, NIR_TYPE_UINT, NIR_TYPE_BOOL, NIR_TYPE_FLOAT = 2, 4, 6, 128

# ---- structure offsets (nir.h)
NIR_INSTR_SIZE = 32                        # struct nir_instr
ALU_DEF = 40                               # nir_alu_instr.def
INTR_DEF, INTR_NUM_COMPONENTS, INTR_CONST_INDEX, INTR_SRC = 40, 72, 76, 120   # nir_intrinsic_instr
ALU_SRC, ALU_SRC_SWIZZLE = 72, 32         # nir_alu_instr.src[0] (nir_alu_src: src, swizzle[16]; 48 bytes)
NIR_SRC_SIZE, NIR_SRC_SSA = 32, 24         # nir_src: _parent, use_link, ssa
LOAD_CONST_DEF, LOAD_CONST_VALUE = 32, 64  # nir_load_const_instr
DEF_NUM_COMPONENTS, DEF_BIT_SIZE = 28, 29  # nir_def
OP_INFO_SIZE, OP_INFO_NUM_INPUTS = 56, 8   # nir_op_info
INTR_INFO_SIZE, INTR_INFO_HAS_DEST, INTR_INFO_DEST_COMPONENTS, INTR_INFO_SRC_COMPONENTS = 112, 20, 21, 9
INTR_INFO_NUM_SRCS, INTR_INFO_INDEX_MAP = 8, 33
NUM_OPCODES, NUM_INTRINSICS = 489, 732
SHADER_INFO = 48                           # nir_shader.info (shader_info)
INFO_SHARED_SIZE, INFO_WORKGROUP_SIZE = 268, 280   # shader_info.shared_size, .workgroup_size[3]
INFO_NUM_IMAGES, INFO_IMAGES_USED = 0x39, 0xF0       # shader_info.num_images (uint8), .images_used (BITSET of 64)
# ir3_shader.h: struct ir3_shader_variant
V_BIN, V_CONST_STATE, V_INFO, V_BRANCHSTACK, V_LOOPS, V_INSTRLEN, V_CONSTLEN = 192, 200, 224, 564, 568, 572, 576
V_PVTMEM_SIZE, V_SHARED_SIZE, V_LOCAL_SIZE, V_HAS_BARRIER, V_MERGEDREGS, V_IMM_STATE = 580, 588, 1466, 1473, 1243, 208
V_IMAGE_MAPPING, IBO_IMAGE_TO_TEX, IBO_TEX_BASE = 1124, 32, 97   # .image_mapping (struct ir3_ibo_mapping): image_to_tex[32], tex_base
V_INPUTS_COUNT, V_INPUTS = 932, 936         # .inputs[]: 5-byte records {slot, regid, compmask, inloc, flags}
SO_CONST_ALLOCS, SO_RESERVED_VEC4 = 20, 216  # ir3_shader_options.const_allocs.consts[12] (16 bytes each), .reserved_vec4
CS_MAX_CONST_OFFSET_VEC4 = 236               # ir3_const_state.allocs.max_const_offset_vec4 (immediates start here)
# struct ir3_info
INFO_SIZE, INFO_SIZEDWORDS, INFO_INSTRS, INFO_MAX_REG, INFO_MAX_HALF_REG, INFO_MAX_CONST = 0, 8, 10, 24, 25, 26
INFO_SS, INFO_SY = 34, 36
SHADER_OPTIONS_SIZE, SHADER_KEY_SIZE = 228, 80


# Mesa's device table (freedreno_devices.py) lists these parts by KGSL chip id only (no gpu_id record): the compiler for
# them is created from the chip id
CHIP_IDS = {730: 0x07030001, 740: 0x43050A01, 750: 0x43051401}


class NirBuilder(ctypes.Structure):
  """nir_builder (nir_builder.h): cursor, exact, fp_fast_math, shader, impl."""
  _fields_ = [("cursor", c_uint8 * 16), ("exact", c_bool), ("fp_fast_math", c_uint32), ("shader", c_void_p), ("impl", c_void_p)]


class FdDevId(ctypes.Structure):
  """struct fd_dev_id (freedreno_dev_info.h)."""
  _fields_ = [("gpu_id", c_uint32), ("chip_id", c_uint64)]


class Ir3CompilerOptions(ctypes.Structure):
  """struct ir3_compiler_options (ir3_compiler.h)."""
  _fields_ = [("push_ubo_with_preamble", c_bool), ("disable_cache", c_bool), ("bindless_fb_read_descriptor", c_int),
              ("bindless_fb_read_slot", c_int), ("storage_16bit", c_bool), ("storage_8bit", c_bool), ("lower_base_vertex", c_bool),
              ("shared_push_consts", c_bool), ("dual_color_blend_by_location", c_bool), ("uche_trap_base", c_uint64)]


class Blob(ctypes.Structure):
  """struct blob (util/blob.h)."""
  _fields_ = [("data", c_void_p), ("allocated", ctypes.c_size_t), ("size", ctypes.c_size_t), ("fixed_allocation", c_bool),
              ("out_of_memory", c_bool)]


class BlobReader(ctypes.Structure):
  """struct blob_reader (util/blob.h)."""
  _fields_ = [("data", c_void_p), ("end", c_void_p), ("current", c_void_p), ("overrun", c_bool)]


def _sig(lib: Any, name: str, res: Any, *args: Any) -> None:
  f = getattr(lib, name)
  f.restype, f.argtypes = res, list(args)


@functools.cache
def lib() -> Any:
  """libtinymesa.so with the signatures used here declared (raises MesaUnavailable without the wheel)."""
  try:
    import tinymesa  # type: ignore[import-untyped]
    from importlib.metadata import version
  except ImportError as e:
    raise MesaUnavailable(f"the NIR/ir3 path needs the tinymesa wheel: pip install tinymesa=={TINYMESA_VERSION}") from e
  if (v := version("tinymesa")) != TINYMESA_VERSION:
    raise MesaUnavailable(f"tinymesa {v} is installed; the structure offsets here are for {TINYMESA_VERSION} (pip install tinymesa=={TINYMESA_VERSION})")
  L = ctypes.CDLL(str(tinymesa.libtinymesa))
  vp = c_void_p
  # nir_builder.h / nir.h
  _sig(L, "nir_builder_init_simple_shader", NirBuilder, c_int, vp, c_char_p)
  _sig(L, "nir_build_alu1", vp, POINTER(NirBuilder), c_uint, vp)
  _sig(L, "nir_build_alu2", vp, POINTER(NirBuilder), c_uint, vp, vp)
  _sig(L, "nir_build_alu3", vp, POINTER(NirBuilder), c_uint, vp, vp, vp)
  _sig(L, "nir_build_alu4", vp, POINTER(NirBuilder), c_uint, vp, vp, vp, vp)
  _sig(L, "nir_load_const_instr_create", vp, vp, c_uint, c_uint)
  _sig(L, "nir_alu_instr_create", vp, vp, c_uint)
  _sig(L, "nir_intrinsic_instr_create", vp, vp, c_uint)
  _sig(L, "nir_def_init", None, vp, vp, c_uint, c_uint)
  _sig(L, "nir_builder_instr_insert", None, POINTER(NirBuilder), vp)
  _sig(L, "nir_builder_instr_insert_at_top", None, POINTER(NirBuilder), vp)
  _sig(L, "nir_push_loop", vp, POINTER(NirBuilder))
  _sig(L, "nir_pop_loop", None, POINTER(NirBuilder), vp)
  _sig(L, "nir_push_if", vp, POINTER(NirBuilder), vp)
  _sig(L, "nir_pop_if", None, POINTER(NirBuilder), vp)
  _sig(L, "nir_jump_instr_create", vp, vp, c_int)
  _sig(L, "nir_validate_shader", None, vp, c_char_p)
  _sig(L, "nir_lower_reg_intrinsics_to_ssa", c_bool, vp)
  _sig(L, "nir_serialize", None, POINTER(Blob), vp, c_bool)
  _sig(L, "nir_deserialize", vp, vp, vp, POINTER(BlobReader))
  _sig(L, "blob_init", None, POINTER(Blob))
  _sig(L, "blob_finish_get_buffer", None, POINTER(Blob), POINTER(vp), POINTER(ctypes.c_size_t))
  _sig(L, "blob_reader_init", None, POINTER(BlobReader), vp, ctypes.c_size_t)
  _sig(L, "ralloc_free", None, vp)
  # ir3 (ir3_compiler.h, ir3_shader.h, ir3_nir.h) and freedreno_dev_info.h
  _sig(L, "fd_dev_info_raw", vp, POINTER(FdDevId))
  _sig(L, "ir3_compiler_create", vp, vp, POINTER(FdDevId), vp, POINTER(Ir3CompilerOptions))
  _sig(L, "ir3_get_compiler_options", vp, vp)
  _sig(L, "ir3_finalize_nir", None, vp, vp, vp)
  _sig(L, "ir3_shader_from_nir", vp, vp, vp, vp, vp)
  _sig(L, "ir3_shader_create_variant", vp, vp, vp, c_bool)
  _sig(L, "ir3_shader_destroy", None, vp)
  return L


@functools.cache
def _libc() -> Any:
  import ctypes.util
  c = ctypes.CDLL(ctypes.util.find_library("c"))
  c.free.argtypes, c.free.restype = [c_void_p], None
  return c


def libc_free(p: int | None) -> None:
  """free() a buffer Mesa allocated with malloc (blob_finish_get_buffer's)."""
  if p: _libc().free(p)


def _table(sym: str, count: int, size: int) -> dict[str, int]:
  base = ctypes.addressof(ctypes.c_uint8.in_dll(lib(), sym))
  out = {}
  for i in range(count):
    p = ctypes.c_void_p.from_address(base + i * size).value
    if p: out[ctypes.string_at(p).decode()] = i
  return out


@functools.cache
def nir_ops() -> dict[str, int]:
  """nir_op number by name, from the library's nir_op_infos."""
  return _table("nir_op_infos", NUM_OPCODES, OP_INFO_SIZE)


@functools.cache
def nir_intrinsics() -> dict[str, int]:
  """nir_intrinsic_op number by name, from the library's nir_intrinsic_infos."""
  return _table("nir_intrinsic_infos", NUM_INTRINSICS, INTR_INFO_SIZE)


def intrinsic_info(op: int) -> bytes:
  """The raw nir_intrinsic_info record of intrinsic `op`."""
  base = ctypes.addressof(ctypes.c_uint8.in_dll(lib(), "nir_intrinsic_infos"))
  return ctypes.string_at(base + op * INTR_INFO_SIZE, INTR_INFO_SIZE)


def rd(addr: int, fmt: str, off: int = 0) -> Any:
  """One value of struct format `fmt` at addr+off."""
  return struct.unpack(fmt, ctypes.string_at(addr + off, struct.calcsize(fmt)))[0]


def wr(addr: int, fmt: str, off: int, v: Any) -> None:
  """Write one value of struct format `fmt` at addr+off."""
  data = struct.pack(fmt, v)
  ctypes.memmove(addr + off, data, len(data))
