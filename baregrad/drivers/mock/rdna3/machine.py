"""The RDNA3 machine: runs one AQL dispatch of gfx11 wave32 machine code, knowing only the bytes in GPU memory.

`RDNA3Machine(memory).dispatch(kernel_object_va, grid_size, workgroup_size, kernarg_va, group_segment_size,
private_segment_size)` reads the 64-byte kernel descriptor at kernel_object_va, sets up every wave's registers as the
hardware does from the descriptor's enable bits, and runs every workgroup to s_endpgm.

Initial state (LLVM AMDGPUUsage, "Initial Kernel Execution State" and "Kernel Descriptor"):
- SGPRs: first the user SGPRs the descriptor enables, in this order: dispatch ptr (2), queue ptr (2), kernarg segment
  ptr (2), dispatch id (2), private segment size (1) (the private segment buffer and flat scratch init SGPRs that come
  first and sixth on other targets are "not supported and must be 0" with architected flat scratch); then, from
  SGPR number COMPUTE_PGM_RSRC2.USER_SGPR_COUNT on (which may be larger: LLVM pads it to 16 with the system SGPRs on
  gfx11, the "user SGPR init 16" hardware bug), the system SGPRs: work-group id X, Y, Z (each if
  ENABLE_SGPR_WORKGROUP_ID_*), work-group info (refused). ENABLE_PRIVATE_SEGMENT sets up FLAT_SCRATCH, not a
  wave-offset SGPR, with architected flat scratch (compute_pgm_rsrc2 table).
- VGPRs: v0 holds the work-item id packed as X in bits 9:0, Y in 19:10, Z in 29:20 on gfx11 (only the components
  ENABLE_VGPR_WORKITEM_ID says; 0: X, 1: X and Y, 2: X, Y, Z).
- EXEC: one bit per work-item of the wave (a partial last wave, or a partial workgroup at the edge of the grid, has
  fewer); the wave's work-items are consecutive in the workgroup's flattened order, X fastest.
- Modes from COMPUTE_PGM_RSRC1: IEEE mode (min/max NaN rules) is honoured; float round mode must be round-to-nearest-
  even and float denorm modes must be "preserve" (what LLVM sets), else the dispatch is refused by name.
Memory: global/flat accesses go to `memory` (ptx.Memory: an unmapped byte raises its GPUFault); unaligned
global accesses are allowed (KFD programs SH_MEM_CONFIG.ALIGNMENT_MODE = unaligned on gfx9+:
amdkfd/kfd_device_queue_manager_v11.c, set_cache_memory_policy_v11); LDS is per workgroup, group_segment_size bytes, and an
LDS access past that allocation is range-checked, not a fault: it reads 0 and writes nothing (the same rule as the
ISA guide's buffer range checking; GCN documented it for LDS with M0 as the limit); flat addresses in the shared
aperture (high 16 bits 1, as KFD sets it for gfx9+: amdkfd/kfd_flat_memory.c, MAKE_LDS_APP_BASE_V9) go to LDS.
Waves run until s_endpgm; s_barrier holds a wave until every wave of its workgroup that has not ended reaches one.
s_waitcnt, s_delay_alu, s_clause, s_nop and cache invalidations are no-ops for an in-order interpreter.

Scratch (architected flat scratch on gfx11, AMDGPUUsage processor table): when the descriptor enables the private
segment the dispatch must bring a `Scratch` (the CP's slots from the queue's amd_queue_t); each wave gets one slot, so a
batch holds at most as many waves as there are slots, and FLAT_SCRATCH = base + slot * wave bytes (AMDGPUUsage "Flat
Scratch": the queue's scratch base plus the wave's scratch offset). SCRATCH_* (private address = VGPR if SVE + SGPR +
offset) and FLAT accesses in the private aperture (the low 32 bits are the private address) go to
FLAT_SCRATCH + (addr / 4) * 128 + lane * 4 + addr % 4 (the dword interleave, AMDGPUUsage "Address Spaces"); an address
outside the wave's share of its slot is a GPUFault (see _scratch_addrs).

Not executed (refused with the instruction named): DPP/SDWA sources, image/buffer memory, scratch atomics,
wave64 code (gfx942/CDNA3 code objects: "cannot execute wave64 CDNA code"), traps, messages other than dealloc-VGPRs.

Waves are executed in batches: all waves at the same program counter run one instruction together, registers being
NumPy arrays over (wave, lane), so a kernel costs about one NumPy step per instruction it executes, not per work-item.
dispatch_steps() is the same as a generator yielding after every such step: the mock GPU interleaves concurrent
dispatches with it.
"""
from __future__ import annotations
import time
from dataclasses import dataclass
import numpy as np
from baregrad.ctypes_autogen.amdgpu import hsa
from baregrad.drivers.mock.ptx import Memory, GPUFault
from baregrad.drivers.amd.isa.rdna3_decode import Inst, Operand, decode, DecodeError, inline_value, vop_sig, _w
from baregrad.drivers.mock.rdna3 import fp, salu, valu

U16, U32, U64 = np.uint16, np.uint32, np.uint64
LANES = np.arange(32, dtype=U32)
SHARED_APERTURE = 1 << 48          # KFD's LDS aperture on gfx9+ (kfd_flat_memory.c: MAKE_LDS_APP_BASE_V9)
PRIVATE_APERTURE = 2 << 48         # and scratch (MAKE_SCRATCH_APP_BASE_V9)
VCC, NULL, M0, EXEC = 106, 124, 125, 126

class RDNA3Error(RuntimeError):
  """A kernel or dispatch the interpreter cannot run; names the instruction (offset, encoding, mnemonic) where one is
  to blame."""

def _where(i: Inst) -> str: return f"offset {i.offset:#x} [{i.encoding_hex}] `{i.text()}`"

@dataclass
class DispatchResult:
  workgroups: int
  waves: int
  steps: int            # instructions executed by batches of waves
  wave_instructions: int  # instructions executed, counted per wave

@dataclass(frozen=True)
class Scratch:
  """The scratch wave slots a dispatch may use (what the CP/SPI derive from the queue's amd_queue_t): slot i of this
  dispatch is `wave_bytes` bytes at base + (first_slot + i) * wave_bytes."""
  base: int
  wave_bytes: int
  slots: int
  first_slot: int = 0

class _Ctx:
  """What a VALU semantics function may need besides its sources."""
  __slots__ = ("mask", "ieee", "op_sel", "op_sel_hi", "mix_neg", "mix_abs")
  def __init__(self, ieee: bool) -> None:
    self.ieee, self.mask, self.op_sel, self.op_sel_hi, self.mix_neg, self.mix_abs = ieee, None, 0, 0, 0, 0

class _Batch:
  """Registers of a batch of waves (W waves, NV VGPRs): S (W, 128) uint32, V (W, NV, 32) uint32, SCC, PC (byte
  offsets from the code entry), live, barrier flags, the workgroup of each wave and the workgroups' LDS."""
  def __init__(self, nwaves: int, nvgpr: int, nwg: int, lds_size: int, ieee: bool) -> None:
    self.S = np.zeros((nwaves, 128), U32)
    self.V = np.zeros((nwaves, nvgpr, 32), U32)
    self.SCC = np.zeros(nwaves, bool)
    self.PC = np.zeros(nwaves, np.int64)
    self.live = np.ones(nwaves, bool)
    self.bar = np.zeros(nwaves, bool)
    self.wg = np.zeros(nwaves, np.int64)
    self.lds = np.zeros((nwg, max(lds_size, 4)), np.uint8)
    self.lds_size = lds_size
    self.ieee = ieee
    self.nvgpr = nvgpr
    self.ended_or_barrier = False
    self.flat_scratch: np.ndarray | None = None   # (W,) uint64: each wave's FLAT_SCRATCH (architected flat scratch)
    self.scratch_lane_bytes = 0                   # private bytes each work-item's slot share holds

  def exec_mask(self, w) -> np.ndarray: return ((self.S[w, EXEC][:, None] >> LANES) & U32(1)).astype(bool)

# ---- operand access
def _lit64(val: int, t: str) -> int:
  """A 32-bit literal for a 64-bit operand: float64 takes it as the high half; signed integers sign-extend and
  unsigned ones zero-extend it (LLVM SIInstrInfo::isOperandLegal and llvm-project PR 70274: the hardware extends by
  the operand's signedness)."""
  if t.startswith("f"): return val << 32
  if t.startswith("i") and val & 0x80000000: return val | 0xFFFFFFFF00000000
  return val

def _const(o: Operand, t: str) -> int:
  """The bits of an inline constant or literal operand of type t."""
  bits = _w(t)
  if o.kind == "c": return inline_value(o.val, bits)
  if o.kind == "l": return _lit64(o.val, t) if bits == 64 else o.val & ((1 << bits) - 1)
  return o.val

def s_read(b: _Batch, w, o: Operand, t: str = "b32") -> np.ndarray:
  """A scalar operand's value per wave as uint64 (32 or 64 bits of it)."""
  bits = max(32, _w(t)) if o.kind == "s" else _w(t)
  n = b.S[w, 0].shape[0]
  if o.kind in ("c", "l", "k"): return np.full(n, U64(_const(o, t) & 0xFFFFFFFFFFFFFFFF))
  c = o.val
  if c == NULL: return np.zeros(n, U64)
  if c == 253: return b.SCC[w].astype(U64)
  if c == 251: return (b.S[w, VCC] == 0).astype(U64)
  if c == 252: return (b.S[w, EXEC] == 0).astype(U64)
  if c in (235, 236, 237, 238):   # aperture bases/limits: the high 32 bits of the shared/private apertures
    base = SHARED_APERTURE if c in (235, 236) else PRIVATE_APERTURE
    # read as 64 bits the aperture sits in bits 63:32 (LLVM SIISelLowering getSegmentAperture: "the real value is in
    # the upper 32 bits"; an addrspacecast to flat takes the high SGPR of `s_mov_b64 s[..], src_private_base`)
    if bits == 64: return np.full(n, U64(base | (0xFFFFFFFF if c in (236, 238) else 0)))
    return np.full(n, U64((base >> 32) + (0xFFFF if c in (236, 238) else 0)))
  if c > 127: raise RDNA3Error(f"scalar operand code {c} is not readable")
  v = b.S[w, c].astype(U64)
  if bits == 64: v = v | (b.S[w, c + 1].astype(U64) << U64(32))
  return v

def s_write(b: _Batch, w, code: int, val: np.ndarray, bits: int = 32) -> None:
  if code == NULL: return
  if code > 127: raise RDNA3Error(f"scalar destination code {code} is not writable")
  b.S[w, code] = (val & U64(0xFFFFFFFF)).astype(U32)
  if bits == 64: b.S[w, code + 1] = (val >> U64(32)).astype(U32)

_SIGN = {16: U16(0x8000), 32: U32(0x80000000), 64: U64(0x8000000000000000)}
_DT = {16: U16, 32: U32, 64: U64}

def v_read(b: _Batch, w, o: Operand, t: str) -> np.ndarray:
  """A VALU source per (wave, lane) as raw bits of its width, with its abs/neg modifiers applied (float sources)."""
  bits = _w(t)
  dt = _DT.get(bits, U32)
  if o.kind == "v":
    if bits == 16: x = ((b.V[w, o.val] >> U32(16)) if o.hi else (b.V[w, o.val] & U32(0xFFFF))).astype(U16)
    elif bits == 64: x = b.V[w, o.val].astype(U64) | (b.V[w, o.val + 1].astype(U64) << U64(32))
    else: x = b.V[w, o.val].copy()
  else:
    s = s_read(b, w, o, t)
    if o.kind == "s" and bits == 16: s = s & U64(0xFFFF)
    x = np.repeat(s.astype(dt)[:, None], 32, axis=1)
  if o.abs or o.neg:
    if not (t.startswith("f") or t.startswith("b")): raise RDNA3Error(f"abs/neg modifier on an integer operand ({t})")
    if o.abs: x = x & ~_SIGN[bits]
    if o.neg: x = x ^ _SIGN[bits]
  return x

def lanes_to_bits(m: np.ndarray) -> np.ndarray:
  """(n, 32) bools -> (n,) uint64 lane masks."""
  return (m.astype(U64) << LANES.astype(U64)).sum(axis=1, dtype=U64)

def bits_to_lanes(v: np.ndarray) -> np.ndarray: return ((v[:, None] >> LANES.astype(U64)) & U64(1)).astype(bool)

def v_write(b: _Batch, w, o: Operand, val: np.ndarray, em: np.ndarray) -> None:
  """Write a VALU result to the active lanes of a VGPR destination (16-bit results to one half)."""
  if o.kind != "v": raise RDNA3Error(f"VALU destination is not a VGPR ({o.text()})")
  if o.bits == 16:
    old = b.V[w, o.val]
    v = val.astype(U32) & U32(0xFFFF)
    new = (old & U32(0x0000FFFF)) | (v << U32(16)) if o.hi else (old & U32(0xFFFF0000)) | v
    b.V[w, o.val] = np.where(em, new, old)
  elif o.bits == 64:
    v = val.astype(U64)
    b.V[w, o.val] = np.where(em, (v & U64(0xFFFFFFFF)).astype(U32), b.V[w, o.val])
    b.V[w, o.val + 1] = np.where(em, (v >> U64(32)).astype(U32), b.V[w, o.val + 1])
  else: b.V[w, o.val] = np.where(em, val.astype(U32), b.V[w, o.val])

def _omod_clamp(i: Inst, r: np.ndarray, t: str) -> np.ndarray:
  omod, clamp = i.mods.get("omod", 0), i.mods.get("clamp", 0)
  if not omod and not clamp: return r
  bits = _w(t)
  if not t.startswith("f"): raise RDNA3Error(f"{_where(i)}: clamp/omod on an integer result is not supported")
  x = fp.f(r, bits)
  with np.errstate(all="ignore"):
    if omod: x = (x * {1: 2.0, 2: 4.0, 3: 0.5}[omod]).astype(x.dtype)
    if clamp: x = np.where(np.isnan(x), 0, np.clip(x, 0, 1)).astype(x.dtype)
  return fp.u(x, bits)

# ---- compiling one instruction into a closure fn(batch, waves)
def _advance(b: _Batch, w, size: int) -> None: b.PC[w] += size

def compile_inst(i: Inst, code_va: int, mem: Memory):
  e = i.enc
  if e in ("SOP1", "SOP2", "SOPC"): return _c_salu(i, code_va)
  if e == "SOPK": return _c_sopk(i)
  if e == "SOPP": return _c_sopp(i)
  if e == "SMEM": return _c_smem(i, mem)
  if e in ("VOP1", "VOP2", "VOPC", "VOP3", "VOP3SD"): return _c_valu(i)
  if e == "VOP3P": return _c_vop3p(i)
  if e == "VOPD": return _c_vopd(i)
  if e == "DS": return _c_ds(i)
  if e in ("GLOBAL", "FLAT"): return _c_global(i, mem)
  if e == "SCRATCH": return _c_scratch(i, mem)
  if e == "MUBUF" and i.name in ("buffer_gl0_inv", "buffer_gl1_inv"): return lambda b, w: _advance(b, w, i.size)
  raise RDNA3Error(f"{_where(i)}: {e} instructions are not executed by the RDNA3 interpreter")

def _c_salu(i: Inst, code_va: int):
  n, size = i.name, i.size
  if n == "s_getpc_b64":
    d = i.dst[0]
    def getpc(b, w): s_write(b, w, d.val, U64(code_va) + b.PC[w].astype(U64) + U64(4), 64); _advance(b, w, size)
    return getpc
  if n in ("s_setpc_b64", "s_swappc_b64"):
    src = i.src[0]
    def setpc(b, w):
      tgt = s_read(b, w, src, "b64").astype(np.int64) - code_va
      if n == "s_swappc_b64": s_write(b, w, i.dst[0].val, U64(code_va) + b.PC[w].astype(U64) + U64(4), 64)
      b.PC[w] = tgt
    return setpc
  sem = salu.SOP.get(n)
  if sem is None: raise RDNA3Error(f"{_where(i)}: {n} is not executed by the RDNA3 interpreter")
  types = [("i64" if n.endswith("_i64") and o.bits == 64 else f"b{o.bits}") for o in i.src]
  srcs = list(zip(i.src, types))
  d = i.dst[0] if i.dst else None
  if isinstance(sem, tuple):
    kind = sem[0]
    if kind == "saveexec":
      fn = sem[1]
      def saveexec(b, w):
        s0 = s_read(b, w, srcs[0][0], srcs[0][1])
        old = b.S[w, EXEC].astype(U64)
        new = fn(s0, old) & U64(0xFFFFFFFF)
        b.S[w, EXEC] = new.astype(U32)
        s_write(b, w, d.val, old)
        b.SCC[w] = new != 0
        _advance(b, w, size)
      return saveexec
    if kind == "cmov":
      def cmov(b, w):
        s0 = s_read(b, w, srcs[0][0], srcs[0][1])
        s_write(b, w, d.val, np.where(b.SCC[w], s0, s_read(b, w, d, f"b{d.bits}")), d.bits); _advance(b, w, size)
      return cmov
    if kind == "bitset":
      bit = sem[1]
      def bitset(b, w):
        s0 = s_read(b, w, srcs[0][0], srcs[0][1]) & U64(31)
        cur = s_read(b, w, d, "b32")
        s_write(b, w, d.val, (cur | (U64(1) << s0)) if bit else (cur & ~(U64(1) << s0))); _advance(b, w, size)
      return bitset
  def run(b, w):
    a = s_read(b, w, srcs[0][0], srcs[0][1])
    c = s_read(b, w, srcs[1][0], srcs[1][1]) if len(srcs) > 1 else None
    r, scc = sem(a, c, b.SCC[w])
    if r is not None and d is not None: s_write(b, w, d.val, r, d.bits)
    if scc is not None: b.SCC[w] = scc
    _advance(b, w, size)
  return run

def _c_sopk(i: Inst):
  n, d, k, size = i.name, i.dst[0], i.src[0].val, i.size
  if n.startswith("s_waitcnt_"): return lambda b, w: _advance(b, w, size)    # counters: in order here, nothing to wait for
  if not (n.startswith(("s_movk", "s_cmovk", "s_addk", "s_mulk", "s_cmpk"))):
    raise RDNA3Error(f"{_where(i)}: {n} is not executed by the RDNA3 interpreter")
  def run(b, w):
    r, scc = salu.sopk(n, s_read(b, w, d, "b32"), k, b.SCC[w])
    if r is not None: s_write(b, w, d.val, r)
    if scc is not None: b.SCC[w] = scc
    _advance(b, w, size)
  return run

_NOOP_SOPP = {"s_nop", "s_waitcnt", "s_waitcnt_depctr", "s_delay_alu", "s_clause", "s_icache_inv", "s_set_inst_prefetch_distance",
              "s_sleep", "s_setprio", "s_waitcnt_vscnt", "s_waitcnt_vmcnt", "s_waitcnt_expcnt", "s_waitcnt_lgkmcnt", "s_wait_idle"}

def _c_sopp(i: Inst):
  n, size = i.name, i.size
  if n in _NOOP_SOPP: return lambda b, w: _advance(b, w, size)
  if n == "s_sendmsg" and i.src[0].val == 3: return lambda b, w: _advance(b, w, size)   # MSG_DEALLOC_VGPRS: a hint
  if n == "s_endpgm":
    def endpgm(b, w): b.live[w] = False; b.ended_or_barrier = True
    return endpgm
  if n == "s_barrier":
    def barrier(b, w): b.bar[w] = True; _advance(b, w, size); b.ended_or_barrier = True
    return barrier
  if "target" in i.mods:
    rel = i.mods["target"] - i.offset
    cond = {"s_branch": None, "s_cbranch_scc0": lambda b, w: ~b.SCC[w], "s_cbranch_scc1": lambda b, w: b.SCC[w],
            "s_cbranch_vccz": lambda b, w: b.S[w, VCC] == 0, "s_cbranch_vccnz": lambda b, w: b.S[w, VCC] != 0,
            "s_cbranch_execz": lambda b, w: b.S[w, EXEC] == 0, "s_cbranch_execnz": lambda b, w: b.S[w, EXEC] != 0}
    if n not in cond: raise RDNA3Error(f"{_where(i)}: {n} is not executed by the RDNA3 interpreter")
    c = cond[n]
    if c is None: return lambda b, w: _advance(b, w, rel)
    def branch(b, w): b.PC[w] += np.where(c(b, w), rel, size)
    return branch
  if n == "s_code_end": raise RDNA3Error(f"{_where(i)}: the wave ran past its last instruction into the s_code_end padding")
  raise RDNA3Error(f"{_where(i)}: {n} is not executed by the RDNA3 interpreter")

def _c_smem(i: Inst, mem: Memory):
  n, size = i.name, i.size
  if n in ("s_dcache_inv", "s_gl1_inv"): return lambda b, w: _advance(b, w, size)
  if not n.startswith("s_load_"): raise RDNA3Error(f"{_where(i)}: {n} is not executed by the RDNA3 interpreter")
  d, base = i.dst[0], i.src[0]
  nd, off, so = d.bits // 32, i.mods["offset"], i.mods["soffset"]
  def load(b, w):
    addr = s_read(b, w, base, "b64") & U64(0xFFFFFFFFFFFF)
    addr = addr + U64(off & 0xFFFFFFFFFFFFFFFF)
    if so != NULL: addr = addr + s_read(b, w, Operand("s", so, 32), "b32")
    addr = addr & ~U64(3)                            # scalar memory ignores the address's two low bits
    vals = mem.load((addr[:, None] + U64(4) * np.arange(nd, dtype=U64)).reshape(-1), np.uint32, "s_load").reshape(-1, nd)
    b.S[w, d.val:d.val + nd] = vals
    _advance(b, w, size)
  return load

# -- VALU
_MASK_SRC = {"v_cndmask_b32", "v_cndmask_b16", "v_add_co_ci_u32", "v_sub_co_ci_u32", "v_subrev_co_ci_u32"}
_FMAC = {"v_fmac_f32", "v_fmac_f16"}

def _c_valu(i: Inst):
  base = i.base
  if base == "v_readfirstlane_b32": return _c_readfirstlane(i)
  if base in ("v_readlane_b32", "v_writelane_b32"): return _c_lane(i)
  if base in ("v_nop", "v_pipeflush"): return lambda b, w: _advance(b, w, i.size)
  is_cmp, is_cmpx = base.startswith("v_cmp_"), base.startswith("v_cmpx_")
  sem_name = base.replace("v_cmpx_", "v_cmp_")
  sem = valu.OPS.get(sem_name)
  if sem is None: raise RDNA3Error(f"{_where(i)}: {i.name} is not executed by the RDNA3 interpreter")
  dt, st = vop_sig(base)
  srcs = list(i.src)
  types = list(st)
  if base in _MASK_SRC or base.startswith("v_div_fmas"):
    if base.startswith("v_div_fmas"): mask_op = Operand("s", VCC, 32)
    else: mask_op = srcs.pop(); types = types[:2]
  else: mask_op = None
  if base in ("v_fmamk_f32", "v_fmaak_f32"): types = ["f32"] * 3
  if base in _FMAC: srcs = srcs + [i.dst[0]]; types = [types[0]] * 3
  srcs_t = list(zip(srcs, types))
  vdst = i.dst[0] if i.dst and i.dst[0].kind == "v" else None
  sdst = None
  if is_cmp: sdst = i.dst[0]
  elif i.enc == "VOP3SD": sdst = i.dst[1]
  elif i.enc == "VOP2" and "_co_ci_" in base: sdst = i.dst[1]
  size = i.size
  def run(b, w):
    em = b.exec_mask(w)
    ctx = _Ctx(b.ieee)
    if mask_op is not None: ctx.mask = bits_to_lanes(s_read(b, w, mask_op, "b32"))
    vals = [v_read(b, w, o, t) for o, t in srcs_t]
    while len(vals) < 3: vals.append(None)
    r = sem(vals[0], vals[1], vals[2], ctx)
    if is_cmp or is_cmpx:
      bits = lanes_to_bits(r & em)
      if is_cmpx: b.S[w, EXEC] = bits.astype(U32)
      else: s_write(b, w, sdst.val, bits)
    else:
      carry = None
      if isinstance(r, tuple): r, carry = r
      if vdst is not None: v_write(b, w, vdst, _omod_clamp(i, r, dt or "b32"), em)
      if sdst is not None and carry is not None: s_write(b, w, sdst.val, lanes_to_bits(carry & em))
    _advance(b, w, size)
  return run

def _c_readfirstlane(i: Inst):
  d, s = i.dst[0], i.src[0]
  def run(b, w):
    ex = b.S[w, EXEC]
    lane = np.where(ex == 0, 0, np.argmax(bits_to_lanes(ex.astype(U64)), axis=1))
    x = v_read(b, w, s, "b32")
    s_write(b, w, d.val, x[np.arange(x.shape[0]), lane].astype(U64))
    _advance(b, w, i.size)
  return run

def _c_lane(i: Inst):
  read = i.base == "v_readlane_b32"
  def run(b, w):
    lane = (s_read(b, w, i.src[1], "u32") & U64(31)).astype(np.int64)
    if read:
      x = v_read(b, w, i.src[0], "b32")
      s_write(b, w, i.dst[0].val, x[np.arange(x.shape[0]), lane].astype(U64))
    else:
      val = s_read(b, w, i.src[0], "b32").astype(U32)
      idx = np.arange(b.S.shape[0])[w] if isinstance(w, slice) else w
      b.V[idx, i.dst[0].val, lane] = val
    _advance(b, w, i.size)
  return run

def _c_vop3p(i: Inst):
  if i.name not in valu.FMA_MIX: raise RDNA3Error(f"{_where(i)}: {i.name} is not executed by the RDNA3 interpreter")
  sem, d = valu.FMA_MIX[i.name], i.dst[0]
  m = i.mods
  def run(b, w):
    em = b.exec_mask(w)
    ctx = _Ctx(b.ieee)
    ctx.op_sel, ctx.op_sel_hi, ctx.mix_neg, ctx.mix_abs = m["op_sel"], m["op_sel_hi"], m["neg"], m["neg_hi"]
    srcs = [v_read(b, w, o, "b32") for o in i.src]
    r = sem(srcs, ctx)
    if i.name == "v_fma_mix_f32": b.V[w, d.val] = np.where(em, r, b.V[w, d.val])
    else: v_write(b, w, Operand("v", d.val, 16, hi=i.name.endswith("hi_f16"), t16=True), r, em)
    _advance(b, w, i.size)
  return run

_DUAL = {"v_dual_fmac_f32": "v_fmac_f32", "v_dual_fmaak_f32": "v_fmaak_f32", "v_dual_fmamk_f32": "v_fmamk_f32", "v_dual_mul_f32": "v_mul_f32",
         "v_dual_add_f32": "v_add_f32", "v_dual_sub_f32": "v_sub_f32", "v_dual_subrev_f32": "v_subrev_f32", "v_dual_mov_b32": "v_mov_b32",
         "v_dual_cndmask_b32": "v_cndmask_b32", "v_dual_max_f32": "v_max_f32", "v_dual_min_f32": "v_min_f32",
         "v_dual_add_nc_u32": "v_add_nc_u32", "v_dual_lshlrev_b32": "v_lshlrev_b32", "v_dual_and_b32": "v_and_b32"}

def _c_vopd(i: Inst):
  halves = []
  for h in (i, i.y):
    nm = _DUAL.get(h.name)
    if nm is None: raise RDNA3Error(f"{_where(i)}: {h.name} is not executed by the RDNA3 interpreter")
    srcs = list(h.src) + ([h.dst[0]] if nm == "v_fmac_f32" else [])
    t = "f32" if nm.endswith("_f32") else "b32"
    halves.append((valu.OPS[nm], srcs, t, h.dst[0], nm == "v_cndmask_b32"))
  def run(b, w):
    em = b.exec_mask(w)
    results = []
    for sem, srcs, t, d, cnd in halves:     # both halves read their sources before either writes
      ctx = _Ctx(b.ieee)
      if cnd: ctx.mask = bits_to_lanes(b.S[w, VCC].astype(U64))
      vals = [v_read(b, w, o, t) for o in srcs] + [None] * (3 - len(srcs))
      results.append((d, sem(vals[0], vals[1], vals[2], ctx)))
    for d, r in results: v_write(b, w, d, r, em)
    _advance(b, w, i.size)
  return run

# -- memory
def _load_bytes(read, addrs: np.ndarray, nbytes: int) -> np.ndarray:
  """(k,) addresses -> (k, ceil(nbytes/4)) uint32 words (little endian; a tail of 1 or 2 bytes is zero-extended).
  Dword-aligned accesses read dwords, others bytes (unaligned access is allowed, see the module docstring)."""
  k = addrs.shape[0]
  nw = (nbytes + 3) // 4
  if nbytes >= 4 and not (addrs % U64(4)).any():
    return read((addrs[:, None] + U64(4) * np.arange(nw, dtype=U64)).reshape(-1), np.uint32).reshape(k, nw)
  if nbytes == 2 and not (addrs % U64(2)).any(): return read(addrs, np.uint16).astype(U32).reshape(k, 1)
  by = read((addrs[:, None] + np.arange(nbytes, dtype=U64)).reshape(-1), np.uint8).reshape(k, nbytes)
  pad = np.zeros((k, nw * 4), np.uint8)
  pad[:, :nbytes] = by
  return pad.view(np.uint32).reshape(k, nw)

def _store_bytes(write, addrs: np.ndarray, words: np.ndarray, nbytes: int) -> None:
  k = addrs.shape[0]
  if nbytes >= 4 and not (addrs % U64(4)).any():
    write((addrs[:, None] + U64(4) * np.arange(nbytes // 4, dtype=U64)).reshape(-1), words[:, :nbytes // 4].reshape(-1), np.uint32)
  elif nbytes == 2 and not (addrs % U64(2)).any(): write(addrs, words[:, 0].astype(U16), np.uint16)
  else:
    by = np.ascontiguousarray(words).view(np.uint8).reshape(k, -1)[:, :nbytes]
    write((addrs[:, None] + np.arange(nbytes, dtype=U64)).reshape(-1), by.reshape(-1), np.uint8)

def _mem_kind(name: str) -> tuple[str, int, str]:
  """(load|store|atomic, bytes, extension) from a memory mnemonic's suffix."""
  kind = "store" if "_store" in name else ("atomic" if "_atomic_" in name else "load")
  suf = name.split("_")[-1]
  nbytes = {"u8": 1, "i8": 1, "b8": 1, "u16": 2, "i16": 2, "b16": 2, "b32": 4, "b64": 8, "b96": 12, "b128": 16}.get(suf, 4)
  return kind, nbytes, suf

def _gather_regs(b: _Batch, w, reg: int, nw: int) -> np.ndarray:
  """(n, 32, nw) uint32: VGPRs reg..reg+nw-1 per lane."""
  return np.stack([b.V[w, reg + k] for k in range(nw)], axis=-1)

def _write_loaded(b: _Batch, w, reg: int, words: np.ndarray, act: np.ndarray, name: str, suf: str) -> None:
  """Load results (n, 32, nw) uint32 into VGPRs of active lanes, with the d16 (half) and sign/zero extension rules."""
  if "_d16" in name:
    hi = "_hi" in name
    v = words[..., 0]
    if suf == "i8": v = v.astype(np.uint8).view(np.int8).astype(np.int16).view(U16).astype(U32)
    elif suf == "u8": v = v & U32(0xFF)
    v = v & U32(0xFFFF)
    old = b.V[w, reg]
    new = (old & U32(0xFFFF)) | (v << U32(16)) if hi else (old & U32(0xFFFF0000)) | v
    b.V[w, reg] = np.where(act, new, old)
    return
  if suf == "i8": words = words.astype(np.uint8).view(np.int8).astype(np.int32).view(U32)
  elif suf == "i16": words = (words & U32(0xFFFF)).astype(U16).view(np.int16).astype(np.int32).view(U32)
  elif suf in ("u8",): words = words & U32(0xFF)
  elif suf in ("u16",): words = words & U32(0xFFFF)
  for k in range(words.shape[-1]): b.V[w, reg + k] = np.where(act, words[..., k], b.V[w, reg + k])

def _c_global(i: Inst, mem: Memory):
  n, m = i.name, i.mods
  kind, nbytes, suf = _mem_kind(n)
  if kind == "atomic": return _c_global_atomic(i, mem)
  va, sb, off = m["vaddr"], m["sbase"], m["offset"]
  nw = (nbytes + 3) // 4
  def addresses(b, w) -> np.ndarray:
    if sb is not None: a = s_read(b, w, sb, "b64")[:, None] + b.V[w, va.val].astype(U64)
    else: a = b.V[w, va.val].astype(U64) | (b.V[w, va.val + 1].astype(U64) << U64(32))
    return a + U64(off & 0xFFFFFFFFFFFFFFFF)
  def split(b, w, a, act):
    """Active lanes' addresses, split into global ones and flat ones in the LDS and private (scratch) apertures (KFD's
    apertures for gfx9+: kfd_flat_memory.c, MAKE_LDS_APP_BASE_V9 / MAKE_SCRATCH_APP_BASE_V9, 4 GiB each)."""
    if i.enc != "FLAT": return act, np.zeros_like(act), np.zeros_like(act)
    lds = act & ((a >> U64(48)) == U64(SHARED_APERTURE >> 48))
    prv = act & ((a >> U64(32)) == U64(PRIVATE_APERTURE >> 32))
    return act & ~lds & ~prv, lds, prv
  if kind == "load":
    def load(b, w):
      act = b.exec_mask(w)
      a = addresses(b, w)
      g, l, pv = split(b, w, a, act)
      words = np.zeros(a.shape + (nw,), U32)
      if g.any(): words[g] = _load_bytes(lambda ad, dt: mem.load(ad, dt, n), a[g], nbytes)
      if l.any(): words[l] = _lds_read(b, w, l, (a - U64(SHARED_APERTURE)).astype(U64), nbytes)
      if pv.any(): words[pv] = _scratch_load(mem, b, w, i, (a & U64(0xFFFFFFFF)).astype(np.int64), pv, nbytes)
      _write_loaded(b, w, i.dst[0].val, words, act, n, suf)
      _advance(b, w, i.size)
    return load
  def store(b, w):
    act = b.exec_mask(w)
    a = addresses(b, w)
    g, l, pv = split(b, w, a, act)
    data = _gather_regs(b, w, i.src[0].val, nw)
    if "_d16_hi" in n: data = data >> U32(16)
    if g.any(): _store_bytes(lambda ad, v, dt: mem.store(ad, v, dt, n), a[g], data[g], nbytes)
    if l.any(): _lds_write(b, w, l, (a - U64(SHARED_APERTURE)), data, nbytes)
    if pv.any(): _scratch_store(mem, b, w, i, (a & U64(0xFFFFFFFF)).astype(np.int64), pv, data[pv], nbytes)
    _advance(b, w, i.size)
  return store

# -- scratch (the private segment), architected flat scratch
def _scratch_addrs(b: _Batch, w, i: Inst, p: np.ndarray, act: np.ndarray, nbytes: int) -> np.ndarray:
  """(k, nbytes) GPU addresses of each active lane's private bytes p..p+nbytes-1: the wave's FLAT_SCRATCH plus the
  dword interleave of AMDGPUUsage "Address Spaces" (Private): base + (addr / 4) * wave_size * 4 + lane * 4 + addr % 4.
  A private address outside the wave's slot share (COMPUTE_TMPRING_SIZE.WAVESIZE bytes per wave) is reported as a GPU
  fault at the address it would reach: on hardware it would read or write a neighbouring wave's slot, or fault past the
  backing memory."""
  if b.flat_scratch is None:
    raise RDNA3Error(f"{_where(i)}: a private (scratch) access in a kernel whose descriptor does not enable the private segment: "
                     f"FLAT_SCRATCH is not set up")
  lanes = np.broadcast_to(LANES.astype(np.int64), p.shape)[act]
  pa = p[act]
  base = np.broadcast_to(b.flat_scratch[w][:, None], p.shape)[act].astype(np.int64)
  q = pa[:, None] + np.arange(nbytes, dtype=np.int64)
  addr = base[:, None] + (q >> 2) * 128 + lanes[:, None] * 4 + (q & 3)
  bad = (pa < 0) | (pa + nbytes > b.scratch_lane_bytes)
  if bad.any():
    k = int(np.argmax(bad))
    raise GPUFault(f"scratch {'store' if '_store' in i.name else 'load'} of {nbytes} bytes at private address {int(pa[k]):#x} (lane {int(lanes[k])}) "
                   f"is outside the wave's scratch: its slot holds {b.scratch_lane_bytes} bytes per work-item", max(int(addr[k, 0]), 0))
  return addr.astype(U64)

def _scratch_load(mem: Memory, b: _Batch, w, i: Inst, p: np.ndarray, act: np.ndarray, nbytes: int) -> np.ndarray:
  """(k, ceil(nbytes/4)) words read from the active lanes' private addresses p."""
  ad = _scratch_addrs(b, w, i, p, act, nbytes)
  k, nw = ad.shape[0], (nbytes + 3) // 4
  if nbytes % 4 == 0 and not (p[act] & 3).any():
    return mem.load(ad[:, ::4].reshape(-1), np.uint32, i.name).reshape(k, nw)
  by = mem.load(ad.reshape(-1), np.uint8, i.name).reshape(k, nbytes)
  pad = np.zeros((k, nw * 4), np.uint8)
  pad[:, :nbytes] = by
  return pad.view(U32).reshape(k, nw)

def _scratch_store(mem: Memory, b: _Batch, w, i: Inst, p: np.ndarray, act: np.ndarray, words: np.ndarray, nbytes: int) -> None:
  """Write (k, nw) words of the active lanes to their private addresses p (lane order: lanes never share bytes)."""
  ad = _scratch_addrs(b, w, i, p, act, nbytes)
  if nbytes % 4 == 0 and not (p[act] & 3).any():
    mem.store(ad[:, ::4].reshape(-1), np.ascontiguousarray(words[:, :nbytes // 4]).reshape(-1), np.uint32, i.name)
  else:
    by = np.ascontiguousarray(words).view(np.uint8).reshape(ad.shape[0], -1)[:, :nbytes]
    mem.store(ad.reshape(-1), by.reshape(-1), np.uint8, i.name)

def _c_scratch(i: Inst, mem: Memory):
  """SCRATCH_LOAD/STORE: private address = VGPR (if SVE) + SGPR (unless off) + the signed 13-bit offset."""
  n, m = i.name, i.mods
  kind, nbytes, suf = _mem_kind(n)
  if kind == "atomic": raise RDNA3Error(f"{_where(i)}: {n} is not executed by the RDNA3 interpreter")
  va, sb, off = m["vaddr"], m["sbase"], m["offset"]
  nw = (nbytes + 3) // 4
  def private(b, w) -> np.ndarray:
    shape = b.V[w, 0].shape
    p = np.full(shape, off, np.int64)
    if va is not None: p = p + b.V[w, va.val].astype(np.int64)
    if sb is not None: p = p + s_read(b, w, sb, "b32").astype(np.int64)[:, None]
    return p
  if kind == "load":
    def load(b, w):
      act = b.exec_mask(w)
      words = np.zeros(act.shape + (nw,), U32)
      if act.any(): words[act] = _scratch_load(mem, b, w, i, private(b, w), act, nbytes)
      _write_loaded(b, w, i.dst[0].val, words, act, n, suf)
      _advance(b, w, i.size)
    return load
  def store(b, w):
    act = b.exec_mask(w)
    if act.any():
      data = _gather_regs(b, w, i.src[0].val, nw)
      if "_d16_hi" in n: data = data >> U32(16)
      _scratch_store(mem, b, w, i, private(b, w), act, data[act], nbytes)
    _advance(b, w, i.size)
  return store

_ATOM = {"add": lambda o, d: o + d, "sub": lambda o, d: o - d, "min": np.minimum, "max": np.maximum, "and": lambda o, d: o & d,
         "or": lambda o, d: o | d, "xor": lambda o, d: o ^ d, "swap": lambda o, d: d, "inc": lambda o, d: np.where(o >= d, 0, o + 1),
         "dec": lambda o, d: np.where((o == 0) | (o > d), d, o - 1)}
_ATOM_T = {"u32": np.uint32, "i32": np.int32, "f32": np.float32, "b32": np.uint32, "u64": np.uint64, "i64": np.int64, "b64": np.uint64}

def _atomic_parts(name: str) -> tuple[str, type]:
  parts = name.split("_")
  op = parts[parts.index("atomic") + 1] if "atomic" in parts else parts[1]
  return op, _ATOM_T[parts[-1]]

def _c_global_atomic(i: Inst, mem: Memory):
  op, dt = _atomic_parts(i.name)
  if op not in _ATOM and op != "cmpswap": raise RDNA3Error(f"{_where(i)}: {i.name} is not executed by the RDNA3 interpreter")
  m, nw = i.mods, np.dtype(dt).itemsize // 4
  def run(b, w):
    # lane by lane, in lane order: every lane sees the value the previous ones left (atomics to one address serialize)
    act = b.exec_mask(w)
    if m["sbase"] is not None: a = s_read(b, w, m["sbase"], "b64")[:, None] + b.V[w, m["vaddr"].val].astype(U64)
    else: a = b.V[w, m["vaddr"].val].astype(U64) | (b.V[w, m["vaddr"].val + 1].astype(U64) << U64(32))
    a = a + U64(m["offset"] & 0xFFFFFFFFFFFFFFFF)
    data = _gather_regs(b, w, i.src[0].val, nw * (2 if op == "cmpswap" else 1))
    ret = np.zeros(a.shape + (nw,), U32)
    for wi, li in zip(*np.nonzero(act)):
      addr = int(a[wi, li])
      old = mem.read(addr, dt)[0]
      dv = data[wi, li].view(dt)
      new = np.where(old == dv[1], dv[0], old) if op == "cmpswap" else _ATOM[op](old, dv[0])
      mem.write(addr, np.array([new], dt))
      ret[wi, li] = np.array([old], dt).view(U32)
    if i.dst: _write_loaded(b, w, i.dst[0].val, ret, act, "", "b32")
    _advance(b, w, i.size)
  return run

def _lds_read(b: _Batch, w, act: np.ndarray, addr: np.ndarray, nbytes: int) -> np.ndarray:
  """(k, nw) words read from each active lane's workgroup LDS; beyond the allocation reads 0."""
  wgs = np.broadcast_to(b.wg[w][:, None], act.shape)[act]
  ad = addr[act].astype(np.int64)
  nw = (nbytes + 3) // 4
  ok = ad + nbytes <= b.lds_size
  idx = np.where(ok, ad, 0)[:, None] + np.arange(nbytes)
  by = b.lds[wgs[:, None], idx]
  by = np.where(ok[:, None], by, 0).astype(np.uint8)
  pad = np.zeros((by.shape[0], nw * 4), np.uint8)
  pad[:, :nbytes] = by
  return pad.view(U32).reshape(-1, nw)

def _lds_write(b: _Batch, w, act: np.ndarray, addr: np.ndarray, words: np.ndarray, nbytes: int) -> None:
  """Write the active lanes' words (n, 32, nw) to LDS in lane order (a later lane wins on the same address)."""
  wgs = np.broadcast_to(b.wg[w][:, None], act.shape)[act]
  ad = addr[act].astype(np.int64)
  ok = ad + nbytes <= b.lds_size
  by = np.ascontiguousarray(words[act]).view(np.uint8).reshape(ad.shape[0], -1)[:, :nbytes]
  b.lds[wgs[ok][:, None], ad[ok][:, None] + np.arange(nbytes)] = by[ok]

def _c_ds(i: Inst):
  n, m = i.name, i.mods
  if n == "ds_nop": return lambda b, w: _advance(b, w, i.size)
  off = m["offset0"] | (m["offset1"] << 8)
  if "2addr" in n:
    width = 8 if n.endswith("b64") else 4
    stride = width * (64 if "stride64" in n else 1)
    o0, o1 = m["offset0"] * stride, m["offset1"] * stride
    if n.startswith("ds_load_2addr"):
      def load2(b, w):
        act = b.exec_mask(w)
        a = b.V[w, i.src[0].val].astype(U64)
        nw = width // 4
        out = np.zeros(act.shape + (2 * nw,), U32)
        out[act] = np.concatenate([_lds_read(b, w, act, a + U64(o0), width), _lds_read(b, w, act, a + U64(o1), width)], axis=1)
        for k in range(2 * nw): b.V[w, i.dst[0].val + k] = np.where(act, out[..., k], b.V[w, i.dst[0].val + k])
        _advance(b, w, i.size)
      return load2
    if n.startswith("ds_store_2addr"):
      def store2(b, w):
        act = b.exec_mask(w)
        a = b.V[w, i.src[0].val].astype(U64)
        nw = width // 4
        _lds_write(b, w, act, a + U64(o0), _gather_regs(b, w, i.src[1].val, nw), width)
        _lds_write(b, w, act, a + U64(o1), _gather_regs(b, w, i.src[2].val, nw), width)
        _advance(b, w, i.size)
      return store2
    raise RDNA3Error(f"{_where(i)}: {n} is not executed by the RDNA3 interpreter")
  if n.startswith("ds_load"):
    _, nbytes, suf = _mem_kind(n.replace("_d16_hi", "").replace("_d16", ""))
    nw = (nbytes + 3) // 4
    def load(b, w):
      act = b.exec_mask(w)
      a = b.V[w, i.src[0].val].astype(U64) + U64(off)
      words = np.zeros(act.shape + (nw,), U32)
      words[act] = _lds_read(b, w, act, a, nbytes)
      nm = n.replace("ds_load_u8_d16", "ds_load_d16_u8").replace("ds_load_i8_d16", "ds_load_d16_i8").replace("ds_load_u16_d16", "ds_load_d16_b16")
      _write_loaded(b, w, i.dst[0].val, words, act, nm, suf)
      _advance(b, w, i.size)
    return load
  if n.startswith("ds_store"):
    _, nbytes, _ = _mem_kind(n.replace("_d16_hi", ""))
    nw = (nbytes + 3) // 4
    def store(b, w):
      act = b.exec_mask(w)
      a = b.V[w, i.src[0].val].astype(U64) + U64(off)
      data = _gather_regs(b, w, i.src[1].val, nw)
      if "_d16_hi" in n: data = data >> U32(16)
      _lds_write(b, w, act, a, data, nbytes)
      _advance(b, w, i.size)
    return store
  parts = n.split("_")
  op = parts[1]
  if op in _ATOM and parts[-1] in ("u32", "i32", "f32", "b32"):
    dt = _ATOM_T[parts[-1]]
    def atomic(b, w):
      act = b.exec_mask(w)
      a = b.V[w, i.src[0].val].astype(np.int64) + off
      data = b.V[w, i.src[1].val]
      ret = np.zeros(act.shape, U32)
      for wi, li in zip(*np.nonzero(act)):       # lane order, as the LDS serializes them
        ad, g = int(a[wi, li]), int(b.wg[w][wi])
        if ad + 4 > b.lds_size: continue
        cell = b.lds[g, ad:ad + 4].view(dt)
        old = cell[0]
        ret[wi, li] = np.array([old], dt).view(U32)[0]
        cell[0] = _ATOM[op](np.array([old], dt), data[wi, li:li + 1].view(dt))[0]
      if i.dst: b.V[w, i.dst[0].val] = np.where(act, ret, b.V[w, i.dst[0].val])
      _advance(b, w, i.size)
    return atomic
  raise RDNA3Error(f"{_where(i)}: {n} is not executed by the RDNA3 interpreter")

# ---- the machine
class RDNA3Machine:
  """Runs dispatches of RDNA3 wave32 code from a GPU virtual address space (a ptx.Memory)."""
  def __init__(self, memory: Memory, *, max_steps: int = 20_000_000, timeout: float = 600.0, batch_lanes: int = 1 << 16) -> None:
    self.mem = memory
    self.max_steps, self.timeout, self.batch_lanes = max_steps, timeout, batch_lanes
    self._cache: dict[tuple[int, bytes], tuple[Inst, object]] = {}

  def _fetch(self, va: int, code_va: int):
    """The decoded and compiled instruction at GPU address va (cached by address and bytes)."""
    raw = b""
    for n in (12, 8, 4):
      try: raw = self.mem.read_bytes(va, n); break
      except GPUFault:
        if n == 4: raise
    key = (va, raw)
    hit = self._cache.get(key)
    if hit is None:
      try: inst = decode(raw + b"\0" * (12 - len(raw)), 0)
      except DecodeError as e: raise RDNA3Error(f"instruction at {va:#x} (code offset {va - code_va:#x}): {e}") from None
      inst.offset = va - code_va
      if "target" in inst.mods: inst.mods["target"] += inst.offset
      inst.words = inst.words[:max(1, inst.size // 4)]
      self._cache[key] = hit = (inst, compile_inst(inst, code_va, self.mem))
    return hit

  def read_descriptor(self, kernel_object_va: int):
    raw = self.mem.read_bytes(kernel_object_va, hsa.AMDHSA_KERNEL_DESCRIPTOR_SIZE)
    return hsa.amdhsa_kernel_descriptor_t.from_buffer_copy(raw)

  def dispatch(self, kernel_object_va: int, grid_size: tuple[int, int, int], workgroup_size: tuple[int, int, int], kernarg_va: int,
               group_segment_size: int, private_segment_size: int, *, dispatch_packet_va: int | None = None,
               queue_va: int | None = None, dispatch_id: int = 0, scratch: "Scratch | None" = None) -> DispatchResult:
    """Run one kernel dispatch (the AQL packet's fields: sizes in work-items) to completion. `scratch`: the wave slots
    the CP/SPI give this dispatch (required when the descriptor enables a private segment)."""
    gen = self.dispatch_steps(kernel_object_va, grid_size, workgroup_size, kernarg_va, group_segment_size, private_segment_size,
                              dispatch_packet_va=dispatch_packet_va, queue_va=queue_va, dispatch_id=dispatch_id, scratch=scratch, step=False)
    while True:
      try: next(gen)
      except StopIteration as e: return e.value

  def dispatch_steps(self, kernel_object_va: int, grid_size: tuple[int, int, int], workgroup_size: tuple[int, int, int], kernarg_va: int,
                     group_segment_size: int, private_segment_size: int, *, dispatch_packet_va: int | None = None,
                     queue_va: int | None = None, dispatch_id: int = 0, scratch: "Scratch | None" = None, step: bool = True):
    """dispatch() as a generator: with `step` it yields after every instruction a batch of waves executes, so a caller can
    interleave concurrent dispatches (the mock GPU's model of AQL packets without the barrier bit); returns the
    DispatchResult."""
    kd = self.read_descriptor(kernel_object_va)
    F = lambda word, name: getattr(hsa, name).decode(word)   # noqa: E731
    r1, r2, kcp = kd.compute_pgm_rsrc1, kd.compute_pgm_rsrc2, kd.kernel_code_properties
    where = f"kernel descriptor at {kernel_object_va:#x}"
    if not F(kcp, "AMDHSA_KCP_ENABLE_WAVEFRONT_SIZE32"):
      raise RDNA3Error(f"{where}: ENABLE_WAVEFRONT_SIZE32 is 0, a wave64 kernel: the RDNA3 interpreter cannot execute wave64 "
                       f"CDNA code (gfx942 code objects) or wave64 gfx11 code; it runs RDNA3 wave32 only")
    if F(r1, "AMDHSA_RSRC1_FLOAT_ROUND_MODE_32") or F(r1, "AMDHSA_RSRC1_FLOAT_ROUND_MODE_16_64"):
      raise RDNA3Error(f"{where}: float round mode other than round-to-nearest-even is not supported")
    if F(r1, "AMDHSA_RSRC1_FLOAT_DENORM_MODE_32") != 3 or F(r1, "AMDHSA_RSRC1_FLOAT_DENORM_MODE_16_64") != 3:
      raise RDNA3Error(f"{where}: float denorm modes other than 3 (preserve denormals) are not supported")
    gx, gy, gz = (int(v) for v in grid_size)
    lx, ly, lz = (int(v) for v in workgroup_size)
    if min(lx, ly, lz) < 1 or lx * ly * lz > 1024: raise RDNA3Error(f"workgroup size {workgroup_size}: each dimension >= 1 and at most 1024 work-items")
    if min(gx, gy, gz) < 0: raise RDNA3Error(f"grid size {grid_size} is negative")
    if group_segment_size < kd.group_segment_fixed_size:
      raise RDNA3Error(f"group_segment_size {group_segment_size} is smaller than the kernel's group_segment_fixed_size {kd.group_segment_fixed_size} "
                       f"({where}): its LDS accesses past the allocation would read 0")
    if F(kcp, "AMDHSA_KCP_USES_DYNAMIC_STACK"): raise RDNA3Error(f"{where}: USES_DYNAMIC_STACK (calls): not executed by the interpreter")
    # gfx11 has architected flat scratch (AMDGPUUsage processor table): the private segment buffer and flat scratch init
    # user SGPRs are "not supported and must be 0"; ENABLE_PRIVATE_SEGMENT makes the hardware set FLAT_SCRATCH
    for bit, nm in (("ENABLE_SGPR_PRIVATE_SEGMENT_BUFFER", "private segment buffer"), ("ENABLE_SGPR_FLAT_SCRATCH_INIT", "flat scratch init")):
      if F(kcp, f"AMDHSA_KCP_{bit}"):
        raise RDNA3Error(f"{where}: {bit} is set: gfx11 has architected flat scratch, where the {nm} SGPRs are not supported (AMDGPUUsage)")
    uses_scratch = bool(F(r2, "AMDHSA_RSRC2_ENABLE_PRIVATE_SEGMENT"))
    if kd.private_segment_fixed_size and not uses_scratch:
      raise RDNA3Error(f"{where}: private_segment_fixed_size {kd.private_segment_fixed_size} with ENABLE_PRIVATE_SEGMENT 0: FLAT_SCRATCH is not set up")
    if private_segment_size < kd.private_segment_fixed_size:
      raise RDNA3Error(f"private_segment_size {private_segment_size} is smaller than the kernel's {kd.private_segment_fixed_size}")
    if uses_scratch and scratch is None:
      raise RDNA3Error(f"{where}: the kernel needs scratch memory (ENABLE_PRIVATE_SEGMENT, private segment {kd.private_segment_fixed_size} bytes): "
                       f"the dispatch provides none")
    if gx * gy * gz == 0: return DispatchResult(0, 0, 0, 0)
    code_va = kernel_object_va + kd.kernel_code_entry_byte_offset
    nvgpr = (F(r1, "AMDHSA_RSRC1_GRANULATED_WORKITEM_VGPR_COUNT") + 1) * 8
    ieee = bool(F(r1, "AMDHSA_RSRC1_ENABLE_IEEE_MODE"))
    # user SGPRs, in the hardware's order
    user: list[tuple[str, int]] = []
    sg = 0
    for bit, nm, cnt in (("ENABLE_SGPR_DISPATCH_PTR", "dispatch ptr", 2), ("ENABLE_SGPR_QUEUE_PTR", "queue ptr", 2),
                         ("ENABLE_SGPR_KERNARG_SEGMENT_PTR", "kernarg segment ptr", 2), ("ENABLE_SGPR_DISPATCH_ID", "dispatch id", 2),
                         ("ENABLE_SGPR_PRIVATE_SEGMENT_SIZE", "private segment size", 1)):
      if F(kcp, f"AMDHSA_KCP_{bit}"): user.append((nm, sg)); sg += cnt
    nuser = F(r2, "AMDHSA_RSRC2_USER_SGPR_COUNT")
    if sg > nuser: raise RDNA3Error(f"{where}: the enabled user SGPRs need {sg}, USER_SGPR_COUNT says {nuser}")
    # the private segment size SGPR: the packet's size rounded up by CP to a multiple of DWORD (AMDGPUUsage)
    values = {"kernarg segment ptr": kernarg_va, "dispatch ptr": dispatch_packet_va, "queue ptr": queue_va, "dispatch id": dispatch_id,
              "private segment size": (private_segment_size + 3) & ~3}
    for nm, _ in user:
      if values.get(nm) is None: raise RDNA3Error(f"{where}: the kernel asks for the {nm} in SGPRs, which this dispatch does not provide")
    wgid_en = [bool(F(r2, f"AMDHSA_RSRC2_ENABLE_SGPR_WORKGROUP_ID_{a}")) for a in "XYZ"]
    if F(r2, "AMDHSA_RSRC2_ENABLE_SGPR_WORKGROUP_INFO"): raise RDNA3Error(f"{where}: ENABLE_SGPR_WORKGROUP_INFO is not supported")
    wi_en = F(r2, "AMDHSA_RSRC2_ENABLE_VGPR_WORKITEM_ID")
    ngx, ngy, ngz = -(-gx // lx), -(-gy // ly), -(-gz // lz)
    wgs = [(x, y, z) for z in range(ngz) for y in range(ngy) for x in range(ngx)]
    per_wg = -(-(lx * ly * lz) // 32)
    per_batch = max(1, self.batch_lanes // (32 * per_wg * max(1, nvgpr // 8)))
    if uses_scratch:
      assert scratch is not None
      # a wave launches only into a free scratch slot (the SPI's slots: COMPUTE_TMPRING_SIZE.WAVES per SE); the batch is at
      # most the slots this dispatch has, each wave its own slot
      if scratch.slots < per_wg:
        raise RDNA3Error(f"{where}: a workgroup of {per_wg} waves needs {per_wg} scratch wave slots; the queue's scratch has {scratch.slots}: "
                         f"the workgroup can never launch")
      per_batch = min(per_batch, scratch.slots // per_wg)
    steps = winst = nwaves = 0
    t0 = time.monotonic()
    for start in range(0, len(wgs), per_batch):
      chunk = wgs[start:start + per_batch]
      b = _Batch(len(chunk) * per_wg, nvgpr, len(chunk), group_segment_size, ieee)
      if uses_scratch:
        assert scratch is not None
        # FLAT_SCRATCH = the queue's scratch base + the wave's slot offset (AMDGPUUsage "Flat Scratch", architected)
        b.flat_scratch = U64(scratch.base) + (U64(scratch.first_slot) + np.arange(b.S.shape[0], dtype=U64)) * U64(scratch.wave_bytes)
        b.scratch_lane_bytes = scratch.wave_bytes // 32
      for k, (x, y, z) in enumerate(chunk):
        sx, sy, sz = min(lx, gx - x * lx), min(ly, gy - y * ly), min(lz, gz - z * lz)   # a partial workgroup at the grid's edge
        n = sx * sy * sz
        lin = np.arange(per_wg * 32)
        ix, iy, iz = lin % sx, (lin // sx) % sy, lin // (sx * sy)
        packed = (ix | (iy << 10) * (wi_en >= 1) | (iz << 20) * (wi_en >= 2)).astype(U32)
        for j in range(per_wg):
          wv = k * per_wg + j
          b.wg[wv] = k
          lanes = np.arange(j * 32, j * 32 + 32)
          nact = int(np.clip(n - j * 32, 0, 32))
          if nact == 0: b.live[wv] = False; continue
          b.S[wv, EXEC] = U32((1 << nact) - 1) if nact < 32 else U32(0xFFFFFFFF)
          for nm, at in user:
            v = values[nm]
            b.S[wv, at] = U32(v & 0xFFFFFFFF)
            if nm != "private segment size": b.S[wv, at + 1] = U32(v >> 32)
          s = nuser
          for en, idv in zip(wgid_en, (x, y, z)):
            if en: b.S[wv, s] = U32(idv); s += 1
          b.V[wv, 0] = packed[lanes]
      nwaves += int(b.live.sum())
      s, wi = yield from self._run(b, code_va, t0, step)
      steps += s; winst += wi
      if step: yield
    return DispatchResult(len(wgs), nwaves, steps, winst)

  def _run(self, b: _Batch, code_va: int, t0: float, step: bool = False):
    """Run a batch to the end (a generator: yields after each instruction when `step`); returns (steps, wave instructions)."""
    steps = winst = 0
    allw = slice(None)
    local: dict[int, tuple] = {}        # this dispatch's instructions by offset (code does not change under a dispatch)
    while True:
      run = b.live & ~b.bar
      if not run.any():
        if b.live.any():   # every live wave waits at a barrier that cannot release: cannot happen, see _release
          raise RDNA3Error("all live waves wait at s_barrier (deadlock)")
        return steps, winst
      pcs = b.PC[run]
      p = int(pcs.min())
      sel = run & (b.PC == p)
      w = allw if sel.all() else np.nonzero(sel)[0]
      hit = local.get(p)
      if hit is None: local[p] = hit = self._fetch(code_va + p, code_va)
      inst, fn = hit
      try: fn(b, w)
      except GPUFault as e:
        raise GPUFault(f"RDNA3 {_where(inst)}: {e.msg}", e.address) from None
      except (FloatingPointError, IndexError, ValueError, KeyError, TypeError) as e:
        raise RDNA3Error(f"{_where(inst)}: execution failed: {type(e).__name__}: {e}") from e
      steps += 1
      winst += int(sel.sum())
      if b.ended_or_barrier:
        b.ended_or_barrier = False
        self._release(b)
      if steps % 4096 == 0:
        if steps > self.max_steps: raise RDNA3Error(f"dispatch did not finish within {self.max_steps} steps (last at {_where(inst)})")
        if time.monotonic() - t0 > self.timeout: raise RDNA3Error(f"dispatch did not finish within {self.timeout} s (last at {_where(inst)})")
      if step: yield

  @staticmethod
  def _release(b: _Batch) -> None:
    """Release the waves of every workgroup whose live waves all wait at a barrier (ended waves do not count)."""
    if not b.bar.any(): return
    nwg = b.lds.shape[0]
    live = np.bincount(b.wg, weights=b.live, minlength=nwg)
    waiting = np.bincount(b.wg, weights=b.live & b.bar, minlength=nwg)
    done = (live == waiting) & (waiting > 0)
    b.bar &= ~done[b.wg]
