"""NIR renderer: a linear program -> Mesa NIR built through tinymesa's C API (codegen/renderer/mesa.py), for Mesa's ir3
compiler (Qualcomm Adreno a6xx; drivers/qcom/ir3_compile.py compiles what this returns).

render() builds the NIR shader with Mesa's own nir_builder (one compute shader, scalar: vectorized=False) and returns it
as text: a header line `nir-ir3 <gpu_id> <param dwords> <offset:size,... of each parameter>` and the shader serialized by nir_serialize, base64-encoded, so
the compile cache keys on the exact NIR and the compiler can rebuild it (nir_deserialize) in a process of its own.

Kernel parameters (the const file): the PTX parameter layout (ptx.param_layout: one 8-byte GPU address per buffer slot
0..max, then each DEFINE_VAR sorted by name, naturally aligned) placed at the start of the constant file, c0.x
onwards, read with load_const_ir3 (base in dwords). The compiler reserves that many vec4s as the shader's push-constant
allocation, so ir3 puts its own immediates after them.

Values in registers: loop counters and accumulators are NIR registers (decl_reg/load_reg/store_reg, lowered to SSA by
nir_lower_reg_intrinsics_to_ssa before serializing); ranges are loops that break when the counter reaches the bound.

Semantics (ir/alu.py) and how they are kept where NIR leaves them open:
- integer division and modulo by zero give 0, INT_MIN // -1 wraps: the divisor is replaced by 1 where it is 0 (or -1
  for signed types) and the result selected afterwards;
- shift amounts modulo the width: NIR's ishl/ishr/ushr take the amount modulo the bit size (nir_opcodes.py);
- float -> int casts saturate and NaN gives 0: clamped in float first, NaN selected to 0;
- MAX on floats propagates NaN (a + b where either is NaN);
- comparisons: flt/feq ordered, fneu unordered;
- bool is a 1-bit NIR boolean in registers and a byte (0/1) in memory;
- bfloat16 is its bits (16-bit): its arithmetic and casts are float32 through cpu_float_matcher, an accumulator is
  widened and rounded back at each step (bf2f / f2bf).
Precision: EXP2/LOG2/SIN/SQRT/RECIP are ir3's SFU instructions (approximations, as PTX's .approx forms); SIN's argument
is first reduced to [-pi, pi] by 2*pi in three steps (reduce_2pi), as the PTX renderer does.
"""
from __future__ import annotations

import base64
import ctypes
import functools
import struct
from typing import Any

from baregrad.ir.dtype import DType, PtrDType, dtypes, float_to_bf16
from baregrad.ir.ops import UOp, Ops, GroupOp
from baregrad.codegen.renderer import Renderer, RenderError
from baregrad.codegen.renderer import mesa as M
from baregrad.codegen.rewrites import cpu_float_matcher
from baregrad.codegen.renderer.ptx import param_layout, param_name
from baregrad.codegen.renderer import adreno_image as T

NIR_HEADER = "nir-ir3"
SUPPORTED = (dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64,
             dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32)


def _bits(d: DType) -> int: return 1 if d.scalar == dtypes.bool else 8 * d.scalar.itemsize
def _signed(d: DType) -> bool: return d.scalar in (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64)

_KEEP: list = []   # ctypes objects whose addresses Mesa keeps (ir3_compiler_create holds its dev id and options)

@functools.cache
def ir3_compiler(gpu_id: int) -> int:
  """One ir3_compiler per chip (ir3_compiler_create), shared by the renderer (its NIR options) and the compiler.
  The compiler's disk cache is off: it keys a variant without its shader options (our const reservation)."""
  L = M.lib()
  dev = M.FdDevId(gpu_id, M.CHIP_IDS.get(gpu_id, 0))
  info = L.fd_dev_info_raw(ctypes.byref(dev))
  if not info: raise RenderError(f"Mesa has no device record for Adreno gpu_id {gpu_id}")
  opts = M.Ir3CompilerOptions(disable_cache=True, storage_16bit=True, storage_8bit=True)
  _KEEP.extend([dev, opts])   # (the compiler keeps these pointers: alive as long as the process)
  comp = L.ir3_compiler_create(None, ctypes.byref(dev), info, ctypes.byref(opts))
  if not comp: raise RenderError(f"ir3_compiler_create failed for gpu_id {gpu_id}")
  return comp


class NirBuild:
  """A NIR compute shader under construction: constants, ALU ops and intrinsics appended at the builder's cursor."""
  def __init__(self, gpu_id: int, name: str) -> None:
    self.L, self.ops, self.intr = M.lib(), M.nir_ops(), M.nir_intrinsics()
    nopts = self.L.ir3_get_compiler_options(ir3_compiler(gpu_id))
    self.b = self.L.nir_builder_init_simple_shader(M.MESA_SHADER_COMPUTE, nopts, name.encode())
    self.b.exact = True   # no contraction or reassociation: a*b+c stays a multiply and an add, as on the CPU
    self.bp = ctypes.byref(self.b)
    self.shader = self.b.shader

  def op(self, name: str) -> int:
    if (n := self.ops.get(name)) is None: raise RenderError(f"NIR has no opcode {name!r}")
    return n

  def const(self, bits: int, value: int | float, is_float: bool = False) -> int:
    ins = self.L.nir_load_const_instr_create(self.shader, 1, bits)
    if is_float: data = struct.pack({16: "<e", 32: "<f", 64: "<d"}[bits], value)
    elif bits == 1: data = bytes([1 if value else 0])
    else: data = (int(value) & ((1 << bits) - 1)).to_bytes(max(bits // 8, 1), "little")
    ctypes.memmove(ins + M.LOAD_CONST_VALUE, data, len(data))
    self.L.nir_builder_instr_insert(self.bp, ins)
    return ins + M.LOAD_CONST_DEF

  def alu(self, name: str, *srcs: int) -> int:
    return getattr(self.L, f"nir_build_alu{len(srcs)}")(self.bp, self.op(name), *srcs)

  def chan(self, d: int, c: int) -> int:
    """Component c of a vector value (a mov with a swizzle)."""
    a = self.L.nir_alu_instr_create(self.shader, self.op("mov"))
    ctypes.c_void_p.from_address(a + M.ALU_SRC + M.NIR_SRC_SSA).value = d
    ctypes.c_uint8.from_address(a + M.ALU_SRC + M.ALU_SRC_SWIZZLE).value = c
    self.L.nir_def_init(a, a + M.ALU_DEF, 1, self.bit_size(d))
    self.L.nir_builder_instr_insert(self.bp, a)
    return a + M.ALU_DEF

  def bit_size(self, d: int) -> int: return ctypes.c_uint8.from_address(d + M.DEF_BIT_SIZE).value

  def intrinsic(self, name: str, srcs: list[int], ncomp: int = 0, bits: int = 0, top: bool = False, **idx: int) -> int:
    op = self.intr[name]
    inf = M.intrinsic_info(op)
    ins = self.L.nir_intrinsic_instr_create(self.shader, op)
    has_dest = inf[M.INTR_INFO_HAS_DEST]
    if has_dest: self.L.nir_def_init(ins, ins + M.INTR_DEF, ncomp, bits)
    # num_components is set for intrinsics whose dest or a source has a variable count (nir.h nir_intrinsic_instr)
    if (has_dest and inf[M.INTR_INFO_DEST_COMPONENTS] == 0) or \
       any(inf[M.INTR_INFO_SRC_COMPONENTS + i] == 0 for i in range(inf[M.INTR_INFO_NUM_SRCS])):
      ctypes.c_uint8.from_address(ins + M.INTR_NUM_COMPONENTS).value = max(ncomp, 1)
    for k, v in idx.items():
      slot = inf[M.INTR_INFO_INDEX_MAP + getattr(M, "IDX_" + k.upper())]
      if not slot: raise RenderError(f"NIR intrinsic {name} has no index {k}")
      ctypes.c_int.from_address(ins + M.INTR_CONST_INDEX + 4 * (slot - 1)).value = v
    for i, s in enumerate(srcs): ctypes.c_void_p.from_address(ins + M.INTR_SRC + M.NIR_SRC_SIZE * i + M.NIR_SRC_SSA).value = s
    (self.L.nir_builder_instr_insert_at_top if top else self.L.nir_builder_instr_insert)(self.bp, ins)
    return ins + M.INTR_DEF if has_dest else 0

  # registers (nir_intrinsics.py decl_reg/load_reg/store_reg)
  def reg(self, bits: int) -> int: return self.intrinsic("decl_reg", [], 1, 32, top=True, num_components=1, bit_size=bits, num_array_elems=0)
  def load_reg(self, reg: int, bits: int) -> int: return self.intrinsic("load_reg", [reg], 1, bits, base=0)
  def store_reg(self, reg: int, v: int) -> None: self.intrinsic("store_reg", [v, reg], 1, base=0, write_mask=1)

  def brk(self) -> None: self.L.nir_builder_instr_insert(self.bp, self.L.nir_jump_instr_create(self.shader, M.NIR_JUMP_BREAK))

  def serialize(self) -> bytes:
    self.L.nir_lower_reg_intrinsics_to_ssa(self.shader)
    blob = M.Blob()
    self.L.blob_init(ctypes.byref(blob))
    self.L.nir_serialize(ctypes.byref(blob), self.shader, False)
    if blob.out_of_memory: raise RenderError("nir_serialize ran out of memory")
    data = ctypes.string_at(blob.data, blob.size)
    ptr, size = ctypes.c_void_p(), ctypes.c_size_t()
    self.L.blob_finish_get_buffer(ctypes.byref(blob), ctypes.byref(ptr), ctypes.byref(size))
    M.libc_free(ptr.value)
    self.L.ralloc_free(self.shader)
    return data


class NIRRenderer(Renderer):
  """Linear program -> serialized NIR for ir3 on the Adreno with Mesa gpu_id `gpu_id` (630, 660, ...)."""
  name = "NIR"
  has_local = True
  vectorized = False
  global_max = (65535, 65535, 65535)
  local_max = 1024
  warp_size = 64
  shared_max = 32768
  supported_dtypes = SUPPORTED
  has_images = True   # OptOps.IMAGE: float buffers read through the texture unit (isam)
  image_max_bytes = 16384 * 4096   # an image of 4096-byte rows is at most 16384 rows (drivers/qcom/texture.py)
  extra_matcher = cpu_float_matcher

  def __init__(self, gpu_id: int = 630) -> None:
    self.gpu_id = gpu_id
    # images on a6xx only: on a7xx ir3 passes texture sources through `alias.tex` register aliases, which the mock
    # Adreno does not model yet, so that path would run untested
    self.has_images = gpu_id < 700

  def render(self, name: str, uops: list[UOp], images: frozenset[int] = frozenset()) -> str:
    """`images`: buffer slots whose loads read through a texture (image_load, which ir3 compiles to isam); the
    layout is drivers/qcom/texture.py's (four elements a texel, IMAGE_ROW_BYTES a row)."""
    bufs = sorted((u for u in uops if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg)
    nslots = max((b.arg for b in bufs), default=-1) + 1
    varu = sorted({u.arg[0]: u for u in uops if u.op is Ops.DEFINE_VAR}.values(), key=lambda u: u.arg[0])
    layout = param_layout(bufs, varu)
    param_dwords = max((off + size for _, off, size in layout), default=0) // 4
    nb = NirBuild(self.gpu_id, name)
    _check_image_slots(bufs, images)
    body = _Body(nb, layout, nslots, images)
    body.run(uops)
    img = body.image_list   # (buffer slot, a6xx_format) of each NIR image index, in index order
    if img:
      ctypes.c_uint8.from_address(nb.shader + M.SHADER_INFO + M.INFO_NUM_IMAGES).value = len(img)
      ctypes.c_uint64.from_address(nb.shader + M.SHADER_INFO + M.INFO_IMAGES_USED).value = (1 << len(img)) - 1
    wg = [1, 1, 1]
    for u in uops:
      if u.op is Ops.SPECIAL and u.arg[0].startswith("lidx"): wg[int(u.arg[0][4:])] = u.arg[1]
    for i, v in enumerate(wg): ctypes.c_uint16.from_address(nb.shader + M.SHADER_INFO + M.INFO_WORKGROUP_SIZE + 2 * i).value = v
    shared = sum(_round_up(u.dtype.base.scalar.itemsize * u.arg[1], 16) for u in uops if u.op is Ops.DEFINE_LOCAL)  # type: ignore[attr-defined, misc]  # (a local's dtype is a PtrDType)
    ctypes.c_uint.from_address(nb.shader + M.SHADER_INFO + M.INFO_SHARED_SIZE).value = shared
    data = nb.serialize()
    params = ",".join(f"{off}:{size}" for _, off, size in layout) or "-"
    imgs = (" img=" + ",".join(f"{slot}:{fmt}" for slot, fmt in img)) if img else ""
    return f"{NIR_HEADER} {self.gpu_id} {param_dwords} {params}{imgs}\n" + base64.b64encode(data).decode() + "\n"


def _round_up(x: int, a: int) -> int: return (x + a - 1) // a * a


def _check_image_slots(bufs: list[UOp], images: frozenset[int]) -> None:
  """Every image slot is a float32/float16 buffer of the kernel."""
  have = {b.arg: (b.dtype.base.scalar if isinstance(b.dtype, PtrDType) else b.dtype.scalar) for b in bufs}
  for slot in images:
    if slot not in have: raise RenderError(f"image slot {slot} is not a buffer of the kernel (buffers {sorted(have)})")
    if have[slot] not in (dtypes.float32, dtypes.float16): raise RenderError(f"buffer {slot} of {have[slot]} cannot be an image (float32/float16 only)")


class _Body:
  """Walks the linear program once, building NIR at the cursor."""
  def __init__(self, nb: NirBuild, layout: list[tuple[str, int, int]], nslots: int, images: frozenset[int] = frozenset()) -> None:
    self.nb, self.layout, self.nslots = nb, layout, nslots
    self.images = images
    self.image_list: list[tuple[int, int]] = []         # (buffer slot, a6xx_format) per NIR image index
    self._image_index: dict[tuple[int, int], int] = {}
    self._texels: dict[tuple[int, UOp, int, UOp | None], int] = {}   # (image, base index, texel offset, gate) -> the texel read
    self.r: dict[UOp, Any] = {}
    self.regs: dict[UOp, tuple[int, int]] = {}     # DEFINE_ACC / ASSIGN -> (register, bits)
    self.loops: list[tuple[int, int, int]] = []      # (loop, counter register, counter bits)
    self.ifs: list[int] = []
    self.local_off = 0
    self._wg: int | None = None
    self._lid: int | None = None

  def val(self, u: UOp) -> int:
    if u in self.regs:
      reg, bits = self.regs[u]
      return self.nb.load_reg(reg, bits)
    return self.r[u]

  def param(self, off: int, size: int) -> int:
    nb = self.nb
    d = nb.intrinsic("load_const_ir3", [nb.const(32, 0)], max(size // 4, 1), 32, base=off // 4)
    if size == 8: return nb.alu("pack_64_2x32", d)
    return d

  def run(self, uops: list[UOp]) -> None:
    nb = self.nb
    for u in uops:
      d = u.dtype
      if u.op is Ops.CONST:
        if d.scalar == dtypes.bfloat16: self.r[u] = nb.const(16, float_to_bf16(u.arg))   # bfloat16 values are their bits
        else: self.r[u] = nb.const(_bits(d), u.arg if dtypes.is_float(d) else int(u.arg), dtypes.is_float(d))
      elif u.op is Ops.DEFINE_GLOBAL:
        if u.arg in self.images: self.r[u] = ("image", u.arg)   # read through its texture; the address is not loaded
        else: self.r[u] = ("global", self.param(8 * u.arg, 8))
      elif u.op is Ops.DEFINE_VAR:
        _, off, size = next(x for x in self.layout if x[0] == param_name(u))
        v = self.param(off, max(size, 4))
        if _bits(d) < 32: v = nb.alu(f"u2u{_bits(d)}", v)
        self.r[u] = v
      elif u.op is Ops.DEFINE_LOCAL:
        self.r[u] = ("shared", self.local_off)
        self.local_off += _round_up(d.base.scalar.itemsize * u.arg[1], 16)  # type: ignore[attr-defined]  # (a PtrDType)
      elif u.op is Ops.SPECIAL:
        kind, n = u.arg[0][:4], int(u.arg[0][4:])
        if kind == "gidx":
          if self._wg is None: self._wg = nb.intrinsic("load_workgroup_id", [], 3, 32)
          v = nb.chan(self._wg, n)
        elif kind == "lidx":
          if self._lid is None: self._lid = nb.intrinsic("load_local_invocation_id", [], 3, 32)
          v = nb.chan(self._lid, n)
        else: raise RenderError(f"NIR renderer: unknown SPECIAL {u.arg[0]}")
        self.r[u] = nb.alu("u2u64", v) if _bits(d) == 64 else v
      elif u.op is Ops.RANGE:
        bits = _bits(d)
        reg = nb.reg(bits)
        nb.store_reg(reg, nb.const(bits, 0))
        end = self.val(u.src[0])
        loop = nb.L.nir_push_loop(nb.bp)
        i = nb.load_reg(reg, bits)
        nif = nb.L.nir_push_if(nb.bp, nb.alu("ige" if _signed(d) else "uge", i, end))
        nb.brk()
        nb.L.nir_pop_if(nb.bp, nif)
        self.loops.append((loop, reg, bits))
        self.r[u] = i
      elif u.op is Ops.ENDRANGE:
        loop, reg, bits = self.loops.pop()
        nb.store_reg(reg, nb.alu("iadd", nb.load_reg(reg, bits), nb.const(bits, 1)))
        nb.L.nir_pop_loop(nb.bp, loop)
      elif u.op is Ops.IF:
        self.ifs.append(nb.L.nir_push_if(nb.bp, self.val(u.src[0])))
      elif u.op is Ops.ENDIF:
        nb.L.nir_pop_if(nb.bp, self.ifs.pop())
      elif u.op is Ops.BARRIER:
        nb.intrinsic("barrier", [], execution_scope=M.SCOPE_WORKGROUP, memory_scope=M.SCOPE_WORKGROUP,
                     memory_semantics=M.NIR_MEMORY_ACQ_REL, memory_modes=M.NIR_VAR_MEM_SHARED | M.NIR_VAR_MEM_GLOBAL)
      elif u.op is Ops.DEFINE_ACC:
        reg = nb.reg(_bits(d))
        nb.store_reg(reg, self.val(u.src[0]))
        self.regs[u] = (reg, _bits(d))
      elif u.op is Ops.ASSIGN:
        reg, bits = self.regs[u.src[0]]
        acc, val = nb.load_reg(reg, bits), u.src[1]
        if u.arg[0] is Ops.ADD and val.op is Ops.MUL and d.scalar == dtypes.float32:
          new = nb.alu("ffma", self.val(val.src[0]), self.val(val.src[1]), acc)
        elif d.scalar == dtypes.float16:   # accumulate in float32, round after each step
          new = nb.alu("f2f16_rtne", self.binop(u.arg[0], dtypes.float32, nb.alu("f2f32", acc), nb.alu("f2f32", self.val(val))))
        elif d.scalar == dtypes.bfloat16:   # the same, through the bits (NIR has no bfloat16 arithmetic here)
          new = self.f2bf(self.binop(u.arg[0], dtypes.float32, self.bf2f(acc), self.bf2f(self.val(val))))
        else: new = self.binop(u.arg[0], d, acc, self.val(val))
        nb.store_reg(reg, new)
        self.regs[u] = (reg, bits)
      elif u.op is Ops.REDUCE: self.r[u] = self.val(u.src[0])
      elif u.op is Ops.INDEX: self.r[u] = ("index", u)
      elif u.op is Ops.LOAD: self.r[u] = self.load(u)
      elif u.op is Ops.STORE: self.store(u)
      elif u.op is Ops.CAST: self.r[u] = self.cast(u.src[0].dtype, d, self.val(u.src[0]))
      elif u.op is Ops.BITCAST:
        if u.src[0].dtype.itemsize != d.itemsize: raise RenderError(f"BITCAST from {u.src[0].dtype} to {d}: sizes differ")
        self.r[u] = self.val(u.src[0])   # NIR values are untyped bits
      elif u.op in GroupOp.ALU: self.r[u] = self.alu(u)
      elif u.op in (Ops.SINK, Ops.NOOP): pass
      else: raise RenderError(f"NIR renderer: cannot render {u.op}")
    if self.loops or self.ifs: raise RenderError("NIR renderer: unbalanced RANGE/ENDRANGE or IF/ENDIF in the program")

  # ---- memory
  def _addr(self, idx: UOp) -> tuple[str, int, DType, int | None]:
    nb = self.nb
    buf = idx.src[0]
    kind, base = self.r[buf]
    el = buf.dtype.base.scalar if isinstance(buf.dtype, PtrDType) else buf.dtype.scalar
    i = self.val(idx.src[1])
    mask = self.val(idx.src[2]) if len(idx.src) > 2 else None
    ibits = nb.bit_size(i)
    if kind == "image": return kind, 0, el, mask   # (image_load makes the coordinates from the index)
    if mask is not None: i = nb.alu("bcsel", mask, i, nb.const(ibits, 0))   # never form an out-of-range address
    if kind == "global":
      i64 = i if ibits == 64 else nb.alu("i2i64", i)
      return kind, nb.alu("iadd", base, nb.alu("imul", i64, nb.const(64, el.itemsize))), el, mask
    i32 = i if ibits == 32 else nb.alu("i2i32", i)
    return kind, nb.alu("iadd", nb.const(32, base), nb.alu("imul", i32, nb.const(32, el.itemsize))), el, mask

  def load(self, u: UOp) -> int:
    nb = self.nb
    kind, addr, el, mask = self._addr(u.src[0])
    mbits = 8 if el == dtypes.bool else _bits(el)
    if kind == "image": v = self.image_load(u.src[0].src[0].arg, u.src[0].src[1], el, u.src[0].src[2] if len(u.src[0].src) > 2 else None)
    elif kind == "global": v = nb.intrinsic("load_global", [addr], 1, mbits, access=0, align_mul=el.itemsize, align_offset=0)
    else: v = nb.intrinsic("load_shared", [addr], 1, mbits, base=0, align_mul=el.itemsize, align_offset=0)
    if el == dtypes.bool: v = nb.alu("ine", v, nb.const(8, 0))
    if mask is not None: v = nb.alu("bcsel", mask, v, nb.const(_bits(el), 0))
    return v

  def _image(self, slot: int, fmt: int) -> int:
    """The NIR image index of buffer `slot` viewed in format `fmt` (made on first use)."""
    key = (slot, fmt)
    if key not in self._image_index:
      self._image_index[key] = len(self.image_list)
      self.image_list.append(key)
    return self._image_index[key]

  def _fetch(self, image: int, texel: int, row: int, fmt: int) -> int:
    """image_load of texel number `texel` (int32) at (x, y) = (texel % row, texel // row): readable only, CAN_REORDER,
    so ir3 emits isam through the texture cache; RGBA float32 comes back (a float16 texel exactly widened)."""
    nb = self.nb
    x = nb.alu("iand", texel, nb.const(32, row - 1))
    y = nb.alu("ushr", texel, nb.const(32, row.bit_length() - 1))
    coord = nb.alu("vec4", x, y, nb.const(32, 0), nb.const(32, 0))
    pipe = {T.FMT_F32: M.PIPE_FORMAT_R32G32B32A32_FLOAT, T.FMT_F16: M.PIPE_FORMAT_R16G16B16A16_FLOAT,
            T.FMT_R32: M.PIPE_FORMAT_R32_FLOAT, T.FMT_R16: M.PIPE_FORMAT_R16_FLOAT}[fmt]
    return nb.intrinsic("image_load", [nb.const(32, image), coord, nb.const(32, 0), nb.const(32, 0)], 4, 32, image_dim=M.GLSL_SAMPLER_DIM_2D,
                        access=M.ACCESS_CAN_REORDER | M.ACCESS_NON_WRITEABLE, dest_type=M.NIR_TYPE_FLOAT32, format=pipe)

  def _i32(self, u: UOp) -> int:
    v = self.val(u)
    return v if self.nb.bit_size(v) == 32 else self.nb.alu("u2u32", v)

  def image_load(self, slot: int, idx: UOp, el: DType, gate: UOp | None) -> int:
    """Element `idx` of the image buffer `slot` (drivers/qcom/texture.py's layouts). Where the index is a multiple of 4
    plus a constant, the element is a known component of an RGBA texel, and the loads of one texel share one isam;
    other indices read the buffer as a one-channel image (a texel per element), so a load costs one register, not four
    and a select (ir3 hoists texture reads, and four registers a load made a small conv spill). Where `gate` is false
    the texel read is texel 0, in every image (the caller selects 0 there), as the plain path reads element 0."""
    nb = self.nb
    base, off = (idx.src[0], idx.src[1].arg) if idx.op is Ops.ADD and idx.src[1].op is Ops.CONST else (idx, 0)
    if isinstance(off, int) and (base.op is Ops.CONST or base.divides(4) is not None):
      fmt = T.FMT_F32 if el == dtypes.float32 else T.FMT_F16
      image = self._image(slot, fmt)
      if (key := (image, base, off >> 2, gate)) not in self._texels:
        t = nb.alu("iadd", nb.alu("ishr", self._i32(base), nb.const(32, 2)), nb.const(32, off >> 2))
        if gate is not None: t = nb.alu("bcsel", self.val(gate), t, nb.const(32, 0))
        self._texels[key] = self._fetch(image, t, T.row_texels(fmt), fmt)
      r = nb.chan(self._texels[key], off & 3)
    else:
      fmt = T.FMT_R32 if el == dtypes.float32 else T.FMT_R16
      t = self._i32(idx) if gate is None else nb.alu("bcsel", self.val(gate), self._i32(idx), nb.const(32, 0))
      r = nb.chan(self._fetch(self._image(slot, fmt), t, T.row_texels(fmt), fmt), 0)
    return r if el == dtypes.float32 else nb.alu("f2f16", r)

  def store(self, u: UOp) -> None:
    nb = self.nb
    kind, addr, el, mask = self._addr(u.src[0])
    if kind == "image": raise RenderError(f"a store to buffer {u.src[0].src[0].arg}, which the kernel reads as an image")
    v = self.val(u.src[1])
    if el == dtypes.bool:
      # the byte is made from the bool widened to 32 bits, not with b2i8: ir3 keeps bools in half registers, and its
      # conversion folding (ir3_cf.c) takes a 16->8 conversion for a half->full one, so a bool that is stored and is
      # also a 32-bit select's condition compiled to `mov.u8u8 hr, r` and failed ir3_validate (Mesa 25.2). The shift
      # pair (a no-op on 0/1) keeps NIR from folding u2u8(b2i32(b)) back into b2i8(b).
      w = nb.alu("ushr", nb.alu("ishl", nb.alu("b2i32", v), nb.const(32, 1)), nb.const(32, 1))
      v = nb.alu("u2u8", w)
    nif = nb.L.nir_push_if(nb.bp, mask) if mask is not None else None
    if kind == "global": nb.intrinsic("store_global", [v, addr], 1, write_mask=1, access=0, align_mul=el.itemsize, align_offset=0)
    else: nb.intrinsic("store_shared", [v, addr], 1, base=0, write_mask=1, align_mul=el.itemsize, align_offset=0)
    if nif is not None: nb.L.nir_pop_if(nb.bp, nif)

  # ---- arithmetic
  def binop(self, op: Ops, d: DType, a: int, b: int) -> int:
    nb = self.nb
    if d.scalar == dtypes.bool: return nb.alu({Ops.ADD: "ior", Ops.MUL: "iand", Ops.MAX: "ior"}[op], a, b)
    f = dtypes.is_float(d)
    if op is Ops.ADD: return nb.alu("fadd" if f else "iadd", a, b)
    if op is Ops.MUL: return nb.alu("fmul" if f else "imul", a, b)
    if op is Ops.MAX:
      if not f: return nb.alu("imax" if _signed(d) else "umax", a, b)
      nan = nb.alu("ior", nb.alu("fneu", a, a), nb.alu("fneu", b, b))
      return nb.alu("bcsel", nan, nb.alu("fadd", a, b), nb.alu("fmax", a, b))
    raise RenderError(f"NIR renderer: no reduction {op}")

  def alu(self, u: UOp) -> int:
    nb, op, d = self.nb, u.op, u.dtype
    s = [self.val(x) for x in u.src]
    sd = u.src[0].dtype if u.src else d
    f, sf = dtypes.is_float(d), dtypes.is_float(sd)
    if op in (Ops.ADD, Ops.MUL, Ops.MAX): return self.binop(op, d, s[0], s[1])
    if op is Ops.SUB: return nb.alu("fsub" if f else "isub", s[0], s[1])
    if op is Ops.NEG:
      if d.scalar == dtypes.bool: return nb.alu("inot", s[0])
      return nb.alu("fneg" if f else "ineg", s[0])
    if op is Ops.FDIV: return nb.alu("fdiv", s[0], s[1])
    if op is Ops.RECIP: return nb.alu("frcp", s[0])
    if op in (Ops.IDIV, Ops.MOD):
      if d.scalar == dtypes.bool:   # bools divide as 0/1: a // b is a where b is 1, else 0; a % b is 0
        return nb.alu("iand", s[0], s[1]) if op is Ops.IDIV else nb.const(1, 0)
      bits = _bits(d)
      zero, one = nb.const(bits, 0), nb.const(bits, 1)
      z = nb.alu("ieq", s[1], zero)
      if _signed(d):
        m1 = nb.alu("ieq", s[1], nb.const(bits, -1))
        safe = nb.alu("bcsel", nb.alu("ior", z, m1), one, s[1])
        if op is Ops.IDIV: return nb.alu("bcsel", z, zero, nb.alu("bcsel", m1, nb.alu("ineg", s[0]), nb.alu("idiv", s[0], safe)))
        return nb.alu("bcsel", nb.alu("ior", z, m1), zero, nb.alu("irem", s[0], safe))
      safe = nb.alu("bcsel", z, one, s[1])
      return nb.alu("bcsel", z, zero, nb.alu("udiv" if op is Ops.IDIV else "umod", s[0], safe))
    if op is Ops.CMPLT:
      if sd.scalar == dtypes.bool: return nb.alu("iand", nb.alu("inot", s[0]), s[1])
      return nb.alu("flt" if sf else ("ilt" if _signed(sd) else "ult"), s[0], s[1])
    if op is Ops.CMPNE: return nb.alu("fneu" if sf else "ine", s[0], s[1])
    if op is Ops.CMPEQ: return nb.alu("feq" if sf else "ieq", s[0], s[1])
    if op in (Ops.AND, Ops.OR, Ops.XOR): return nb.alu({Ops.AND: "iand", Ops.OR: "ior", Ops.XOR: "ixor"}[op], s[0], s[1])
    if op in (Ops.SHL, Ops.SHR):
      amt = s[1] if _bits(u.src[1].dtype) == 32 else nb.alu("u2u32", s[1])
      return nb.alu("ishl" if op is Ops.SHL else ("ishr" if _signed(d) else "ushr"), s[0], amt)
    if op is Ops.WHERE: return nb.alu("bcsel", s[0], s[1], s[2])
    if op is Ops.MULACC:
      return nb.alu("ffma", s[0], s[1], s[2]) if f else nb.alu("iadd", nb.alu("imul", s[0], s[1]), s[2])
    if op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.TRUNC):
      if not f: raise RenderError(f"{op.name} on {d}: only floats reach the NIR renderer")
      if op is Ops.SIN and _bits(d) == 32: return nb.alu("fsin", self.reduce_2pi(s[0]))
      return nb.alu({Ops.EXP2: "fexp2", Ops.LOG2: "flog2", Ops.SIN: "fsin", Ops.SQRT: "fsqrt", Ops.TRUNC: "ftrunc"}[op], s[0])
    raise RenderError(f"NIR renderer: cannot render {op} for {d}")

  def bf2f(self, v: int) -> int:
    """bfloat16 bits (16-bit) -> float32: the bits moved to the top half."""
    return self.nb.alu("ishl", self.nb.alu("u2u32", v), self.nb.const(32, 16))

  def f2bf(self, f: int) -> int:
    """float32 -> bfloat16 bits, rounded to nearest even; a NaN stays a (quiet) NaN (codegen/rewrites.py _to_bf16)."""
    nb = self.nb
    c = lambda v: nb.const(32, v)  # noqa: E731
    rounded = nb.alu("ushr", nb.alu("iadd", nb.alu("iadd", f, c(0x7FFF)), nb.alu("iand", nb.alu("ushr", f, c(16)), c(1))), c(16))
    nan = nb.alu("ior", nb.alu("ushr", f, c(16)), c(0x40))
    return nb.alu("u2u16", nb.alu("bcsel", nb.alu("fneu", f, f), nan, rounded))

  def reduce_2pi(self, x: int) -> int:
    """x - 2*pi*round(x / (2*pi)), in [-pi, pi] (Cody-Waite: 2*pi split in three float32 parts, the first with few
    enough bits that k * part is exact for |k| < 2^15). ir3 lowers fsin to its SFU as sin(2*pi*fract(x/(2*pi) + 0.5) - pi)
    (the code it emits), and x/(2*pi) in float32 throws away the low bits of a large x: sin(1e4) was off by 7e-4.
    Inf and NaN give NaN, as on the CPU; past |x| ~ 1e5 the reduction itself loses digits."""
    nb = self.nb
    c = lambda bits: nb.const(32, struct.unpack("<f", struct.pack("<I", bits))[0], True)  # noqa: E731
    nk = nb.alu("fneg", nb.alu("fround_even", nb.alu("fmul", x, c(0x3E22F983))))   # -round(x / (2*pi))
    r = nb.alu("ffma", nk, c(0x40C90000), x)
    r = nb.alu("ffma", nk, c(0x3AFDAA22), r)
    return nb.alu("ffma", nk, c(0x2D34611A), r)

  def cast(self, fr: DType, to: DType, v: int) -> int:
    nb = self.nb
    f, t = fr.scalar, to.scalar
    if f == t: return v
    tb = _bits(to)
    if t == dtypes.bool: return nb.alu("fneu", v, nb.const(_bits(fr), 0.0, True)) if dtypes.is_float(f) else nb.alu("ine", v, nb.const(_bits(fr), 0))
    if f == dtypes.bool: return nb.alu(f"b2f{tb}" if dtypes.is_float(t) else f"b2i{tb}", v)
    if dtypes.is_float(t):
      if dtypes.is_float(f): return nb.alu("f2f16_rtne" if tb == 16 else f"f2f{tb}", v)
      return nb.alu(f"{'i' if _signed(fr) else 'u'}2f{tb}", v)
    if not dtypes.is_float(f): return nb.alu(f"{'i' if _signed(fr) else 'u'}2{'i' if _signed(fr) else 'u'}{tb}", v)
    # float -> int: saturate in float, NaN -> 0, then convert (through 32 bits for narrower ints)
    x = v if _bits(fr) == 32 else nb.alu("f2f32", v)
    lo, hi = (-(2 ** (tb - 1)), 2 ** (tb - 1) - 1) if _signed(to) else (0, 2 ** tb - 1)
    flo, fhi = float(lo), _f32_below(hi)
    cb = 64 if tb == 64 else 32
    r = nb.alu(f"f2{'i' if _signed(to) else 'u'}{cb}", nb.alu("fmin", nb.alu("fmax", x, nb.const(32, flo, True)), nb.const(32, fhi, True)))
    if fhi != hi: r = nb.alu("bcsel", nb.alu("fge", x, nb.const(32, float(hi + 1), True)), nb.const(cb, hi), r)   # (hi is no float32)
    r = nb.alu("bcsel", nb.alu("fneu", v, v), nb.const(cb, 0), r)
    return r if cb == tb else nb.alu(f"{'i' if _signed(to) else 'u'}2{'i' if _signed(to) else 'u'}{tb}", r)


def _f32_below(x: int) -> float:
  """The largest float32 not above integer x."""
  f = struct.unpack("<f", struct.pack("<f", float(x)))[0]
  while f > x: f = struct.unpack("<f", struct.pack("<I", struct.unpack("<I", struct.pack("<f", f))[0] - 1))[0]
  return f
