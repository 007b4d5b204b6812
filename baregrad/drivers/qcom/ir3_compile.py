"""Serialized NIR (codegen/renderer/nir.py) -> an ir3 program for Adreno a6xx, through Mesa's ir3 compiler in tinymesa.

The compile runs in a forked child: Mesa reports a shader it cannot compile with an assertion that aborts the process
(ir3_context_error), and that must not take the caller with it. The child deserializes the NIR (nir_deserialize with
the ir3 compiler's NIR options), runs ir3_finalize_nir, ir3_shader_from_nir with the kernel parameters reserved as the
push-constant allocation at c0 (ir3_shader_options.const_allocs), and ir3_shader_create_variant, and sends back the code
and what a dispatch needs to know (Ir3Program). The variant fields are read at the offsets in codegen/renderer/mesa.py.
"""
from __future__ import annotations

import base64
import ctypes
import os
import selectors
import struct
import time
from dataclasses import dataclass

from baregrad.hal.compiler import Compiler
from baregrad.hal.errors import CompileError
from baregrad.codegen.renderer import mesa as M
from baregrad.codegen.renderer.nir import NIR_HEADER, ir3_compiler

MAGIC = b"BGI3"
_HDR = struct.Struct("<4s21I")
FORMAT_VERSION = 3
SYSTEM_VALUE_LOCAL_INVOCATION_ID, SYSTEM_VALUE_WORKGROUP_ID = 42, 47   # shader_enums.h gl_system_value
IR3_CONST_ALLOC_PUSH_CONSTS = 0                                         # ir3_shader.h ir3_const_alloc_type
IR3_DBG_NOPREAMBLE = 0x2000   # ir3_compiler.h enum ir3_shader_debug
REGID_NONE = 0xFC                                                       # ir3.h regid(63, 0): no register


@dataclass(frozen=True)
class Ir3Program:
  """A compiled ir3 compute program and the state its dispatch needs.

  code: the instructions (64 bits each); max_reg / max_half_reg: highest full / half vec4 register used (-1: none);
  constlen: vec4s of the const file the shader reads; branchstack: the branch stack depth (SP_CS_CTRL_REG0); shared_size:
  workgroup (local) memory bytes; params: (offset, size) of each kernel parameter (buffer addresses, then variables);
  instrlen: the code in 128-byte units; param_vec4: vec4s at c0 that hold the kernel
  parameters; imm_base_vec4 / imms: where ir3's immediates live in the const file and their values (dwords);
  wgid_regid / lid_regid: the registers (regid: 4 * register + component) the hardware fills with the workgroup id and
  the local invocation id (0xfc: not read); local_size: the workgroup shape; has_barrier: the code waits at a barrier.
  images: (kernel parameter, texture slot, a6xx_format) of each buffer the code reads as an image (isam t#slot s#slot;
  drivers/qcom/texture.py)."""
  gpu_id: int
  code: bytes
  max_reg: int
  max_half_reg: int
  constlen: int
  branchstack: int
  shared_size: int
  instrlen: int
  param_vec4: int
  imm_base_vec4: int
  imms: tuple[int, ...]
  wgid_regid: int
  lid_regid: int
  local_size: tuple[int, int, int]
  has_barrier: bool
  pvtmem_size: int
  params: tuple[tuple[int, int], ...] = ()   # (byte offset, size) of each kernel parameter in the const file at c0
  images: tuple[tuple[int, int, int], ...] = ()

  @property
  def tex_count(self) -> int:
    """Texture (and sampler) slots the program's isam instructions name."""
    return max((t for _, t, _ in self.images), default=-1) + 1

  def pack(self) -> bytes:
    """The bytes the compile cache stores."""
    hdr = _HDR.pack(MAGIC, FORMAT_VERSION, self.gpu_id, len(self.code), self.max_reg & 0xFFFFFFFF, self.max_half_reg & 0xFFFFFFFF, self.constlen,
                    self.branchstack, self.shared_size, self.instrlen, self.param_vec4, self.imm_base_vec4, len(self.imms),
                    self.wgid_regid, self.lid_regid, *self.local_size, int(self.has_barrier), self.pvtmem_size, len(self.params), len(self.images))
    return (hdr + self.code + struct.pack(f"<{len(self.imms)}I", *self.imms) + struct.pack(f"<{2 * len(self.params)}I", *(x for p in self.params for x in p))
            + struct.pack(f"<{3 * len(self.images)}I", *(x for i in self.images for x in i)))

  @staticmethod
  def unpack(lib: bytes) -> Ir3Program:
    """Parse pack()'s bytes; anything else is refused with what was wrong."""
    if len(lib) < _HDR.size or lib[:4] != MAGIC: raise ValueError(f"not an ir3 program: {len(lib)} bytes starting {lib[:4]!r}, expected magic {MAGIC!r}")
    (_, ver, gpu, ncode, mr, mhr, constlen, bs, shared, instrlen, pv, ib, nimm, wg, lid, lx, ly, lz, bar, pvt, npar, nimg) = _HDR.unpack_from(lib)
    if ver != FORMAT_VERSION: raise ValueError(f"ir3 program format {ver}, expected {FORMAT_VERSION}")
    if len(lib) != (want := _HDR.size + ncode + 4 * nimm + 8 * npar + 12 * nimg): raise ValueError(f"ir3 program is {len(lib)} bytes, header says {want}")
    code = lib[_HDR.size:_HDR.size + ncode]
    imms = struct.unpack_from(f"<{nimm}I", lib, _HDR.size + ncode)
    pw = struct.unpack_from(f"<{2 * npar}I", lib, _HDR.size + ncode + 4 * nimm)
    params = tuple((pw[2 * i], pw[2 * i + 1]) for i in range(npar))
    iw = struct.unpack_from(f"<{3 * nimg}I", lib, _HDR.size + ncode + 4 * nimm + 8 * npar)
    images = tuple((iw[3 * i], iw[3 * i + 1], iw[3 * i + 2]) for i in range(nimg))
    s8 = lambda x: x - (1 << 32) if x >= 1 << 31 else x  # noqa: E731
    return Ir3Program(gpu, code, s8(mr), s8(mhr), constlen, bs, shared, instrlen, pv, ib, tuple(imms), wg, lid, (lx, ly, lz), bool(bar), pvt, params, images)

  def words(self) -> list[int]:
    """The code as 32-bit words."""
    return list(struct.unpack(f"<{len(self.code) // 4}I", self.code))


def parse_source(src: str) -> tuple[int, int, tuple[tuple[int, int], ...], bytes, tuple[tuple[int, int], ...]]:
  """(gpu_id, parameter dwords, (offset, size) of each parameter, serialized NIR, (parameter, a6xx_format) of each
  image in NIR image index order) of the NIR renderer's text."""
  head, _, body = src.partition("\n")
  parts = head.split()
  if len(parts) not in (4, 5) or parts[0] != NIR_HEADER or (len(parts) == 5 and not parts[4].startswith("img=")):
    raise CompileError(src[:200], f"not NIR renderer output: first line {head[:80]!r}, "
                                  f"expected '{NIR_HEADER} <gpu_id> <param dwords> <params> [img=<param:format,...>]'")
  params = tuple((int(a), int(b)) for a, b in (x.split(":") for x in parts[3].split(","))) if parts[3] != "-" else ()
  images = tuple((int(a), int(b)) for a, b in (x.split(":") for x in parts[4][4:].split(","))) if len(parts) == 5 else ()
  return int(parts[1]), int(parts[2]), params, base64.b64decode(body), images


def _compile_here(gpu_id: int, param_dwords: int, params: tuple[tuple[int, int], ...], nir: bytes, images: tuple[tuple[int, int], ...] = ()) -> bytes:
  L = M.lib()
  # no shader preamble (shps/getone/stc computing uniform values into the const file once): one straight program,
  # whose const file is exactly what the dispatch loads (set in the forked child only)
  dbg = ctypes.c_uint32.in_dll(L, "ir3_shader_debug")
  dbg.value |= IR3_DBG_NOPREAMBLE
  comp = ir3_compiler(gpu_id)
  nopts = L.ir3_get_compiler_options(comp)
  buf = ctypes.create_string_buffer(nir, len(nir))
  reader = M.BlobReader()
  L.blob_reader_init(ctypes.byref(reader), ctypes.addressof(buf), len(nir))
  shader = L.nir_deserialize(None, nopts, ctypes.byref(reader))
  if not shader or reader.overrun: raise CompileError("", "nir_deserialize could not read the shader")
  nir_opts = ctypes.c_uint32(0)   # ir3_shader_nir_options: robust_modes
  L.ir3_finalize_nir(comp, ctypes.byref(nir_opts), shader)
  sopts = (ctypes.c_uint8 * M.SHADER_OPTIONS_SIZE)()
  pvec4 = (param_dwords + 3) // 4
  # const_allocs.consts[PUSH_CONSTS] = {offset 0, size 0, reserved_size pvec4, reserved_align 1}; reserved_vec4 = pvec4
  struct.pack_into("<4I", sopts, M.SO_CONST_ALLOCS + 16 * IR3_CONST_ALLOC_PUSH_CONSTS, 0, 0, pvec4, 1)
  struct.pack_into("<I", sopts, M.SO_RESERVED_VEC4, pvec4)
  sh = L.ir3_shader_from_nir(comp, shader, sopts, None)
  key = (ctypes.c_uint8 * M.SHADER_KEY_SIZE)()
  v = L.ir3_shader_create_variant(sh, key, False)
  if not v: raise CompileError("", "ir3_shader_create_variant failed")
  rd = M.rd
  size = rd(v, "<I", M.V_INFO + M.INFO_SIZE)
  code = ctypes.string_at(rd(v, "<Q", M.V_BIN), size)
  cs = rd(v, "<Q", M.V_CONST_STATE)
  imm_count, imm_ptr = rd(v, "<I", M.V_IMM_STATE + 4), rd(v, "<Q", M.V_IMM_STATE + 8)
  imms = struct.unpack(f"<{imm_count}I", ctypes.string_at(imm_ptr, 4 * imm_count)) if imm_count else ()
  regs = {SYSTEM_VALUE_WORKGROUP_ID: REGID_NONE, SYSTEM_VALUE_LOCAL_INVOCATION_ID: REGID_NONE}
  for i in range(rd(v, "<I", M.V_INPUTS_COUNT)):
    slot, regid = rd(v, "<B", M.V_INPUTS + 5 * i), rd(v, "<B", M.V_INPUTS + 5 * i + 1)
    if slot in regs: regs[slot] = regid
  # ir3_shader.h ir3_ibo_mapping: image i is read through texture slot image_to_tex[i] + tex_base (ir3_image.c); an
  # image whose loads NIR optimized away keeps IBO_INVALID (0xff) and needs no descriptor
  tex_base = rd(v, "<B", M.V_IMAGE_MAPPING + M.IBO_TEX_BASE)
  slots = [rd(v, "<B", M.V_IMAGE_MAPPING + M.IBO_IMAGE_TO_TEX + i) for i in range(len(images))]
  imgs = tuple((p, t + tex_base, f) for (p, f), t in zip(images, slots) if t != 0xFF)
  prog = Ir3Program(gpu_id, code, rd(v, "<b", M.V_INFO + M.INFO_MAX_REG), rd(v, "<b", M.V_INFO + M.INFO_MAX_HALF_REG), rd(v, "<I", M.V_CONSTLEN),
                    rd(v, "<I", M.V_BRANCHSTACK), rd(v, "<I", M.V_SHARED_SIZE), rd(v, "<I", M.V_INSTRLEN), pvec4,
                    rd(cs, "<I", M.CS_MAX_CONST_OFFSET_VEC4), tuple(imms), regs[SYSTEM_VALUE_WORKGROUP_ID],
                    regs[SYSTEM_VALUE_LOCAL_INVOCATION_ID], tuple(rd(v, "<H", M.V_LOCAL_SIZE + 2 * i) for i in range(3)),
                    bool(rd(v, "<B", M.V_HAS_BARRIER)), rd(v, "<I", M.V_PVTMEM_SIZE), params, imgs)
  L.ir3_shader_destroy(sh)
  return prog.pack()


COMPILE_TIMEOUT_S = 120.0   # one kernel's ir3 compile takes well under a second; a child that runs longer is stuck


def _drain(chunks: dict[int, list[bytes]], timeout_s: float) -> dict[int, list[bytes]]:
  """Read every fd in `chunks` until each reaches end of file, all at once (the child may fill its stderr pipe before
  it writes the program: reading one pipe to the end first would wait on a child that waits on us); TimeoutError after
  `timeout_s` seconds."""
  deadline = time.monotonic() + timeout_s
  with selectors.DefaultSelector() as sel:
    for fd in chunks: sel.register(fd, selectors.EVENT_READ)
    while sel.get_map():
      if (left := deadline - time.monotonic()) <= 0:
        raise TimeoutError(f"the compiler child did not finish its output within {timeout_s:g} s "
                           f"({sum(len(b) for c in chunks.values() for b in c)} bytes read; expected both pipes closed)")
      for key, _ in sel.select(left):
        if data := os.read(key.fd, 1 << 16): chunks[key.fd].append(data)
        else: sel.unregister(key.fd)
  return chunks


def compile_nir(src: str) -> bytes:
  """Compile the NIR renderer's text in a forked child; Mesa's aborts become a CompileError with its messages."""
  gpu_id, param_dwords, params, nir, images = parse_source(src)
  ir3_compiler(gpu_id)   # load the library and the compiler before forking (the child inherits both)
  rfd, wfd = os.pipe()
  efd_r, efd_w = os.pipe()
  pid = os.fork()
  if pid == 0:   # child: compile, write the program, exit without running the parent's cleanup
    code = 1
    try:
      import faulthandler
      faulthandler.disable()   # (Mesa's abort is the expected way out; the parent reports it)
      os.dup2(efd_w, 2)
      out = _compile_here(gpu_id, param_dwords, params, nir, images)
      with os.fdopen(wfd, "wb") as f: f.write(out)
      code = 0
    except BaseException as e:  # noqa: BLE001 (reported to the parent through stderr)
      os.write(2, f"{type(e).__name__}: {e}\n".encode())
    finally:
      os._exit(code)
  os.close(wfd)
  os.close(efd_w)
  try: chunks = _drain({rfd: [], efd_r: []}, COMPILE_TIMEOUT_S)
  except TimeoutError as e:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise CompileError("", f"ir3 compile for a{gpu_id}: {e}") from None
  finally:
    os.close(rfd)
    os.close(efd_r)
  out, err = b"".join(chunks[rfd]), b"".join(chunks[efd_r]).decode(errors="replace")
  _, status = os.waitpid(pid, 0)
  if status != 0 or not out:
    why = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit status {os.WEXITSTATUS(status)}"
    raise CompileError("", f"ir3 compile for a{gpu_id} failed ({why}); Mesa said:\n{err[-4000:]}")
  return out


class IR3Compiler(Compiler):
  """NIR renderer text -> Ir3Program bytes (Ir3Program.pack), cached on disk like every compiler."""
  def __init__(self, gpu_id: int = 630) -> None:
    super().__init__(f"ir3_a{gpu_id}")
    self.gpu_id = gpu_id

  def version(self) -> str: return f"tinymesa {M.TINYMESA_VERSION} no-preamble format-{FORMAT_VERSION}"
  def describe(self) -> str: return f"Mesa ir3 (tinymesa {M.TINYMESA_VERSION}) for a{self.gpu_id}"
  def compile(self, src: str) -> bytes: return compile_nir(src)

  def image_build_unusable(self, lib: bytes) -> str | None:
    """Why a program that reads images cannot run here (None: it can): one that spills registers to private memory
    (the dispatch sets up no private memory); the runner then builds the kernel without images."""
    p = Ir3Program.unpack(lib)
    return f"ir3 spilled {p.pvtmem_size} bytes a fiber to private memory" if p.pvtmem_size else None
