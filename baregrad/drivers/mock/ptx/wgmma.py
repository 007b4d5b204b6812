"""Warpgroup-level asynchronous matrix multiply (sm_90a wgmma) of the PTX interpreter (mixed into kernel.PTXKernel).

Modelled from the PTX ISA (8.x, section 9.7.15 "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions"),
independently of the code generator, so a wrong descriptor or layout there shows up as a wrong result or an error here:

- A warpgroup is 4 contiguous warps of a CTA whose first warp's rank is a multiple of 4 (128 threads) (9.7.15.1). Every
  wgmma instruction is `.sync.aligned`: all 128 threads of the warpgroup execute the same instruction together; a
  partial warpgroup (some threads elsewhere, or a block that is not whole warpgroups) is an error here.
- wgmma.mma_async.sync.aligned.m64nNk16.{f32,f16}.{f16,bf16}.{f16,bf16} d, a-desc | {a0..a3}, b-desc, scale-d,
  imm-scale-a, imm-scale-b{, imm-trans-a}, imm-trans-b (9.7.15.5.2): N a multiple of 8 in [8, 256]; .bf16 needs .f32
  D. D = A*B + (scale-d ? D : 0); imm-scale-a/b of -1 negate A/B; imm-trans 1 reads the operand MN-major. The products
  are exact and summed in float64, rounded once to D's type (the hardware's order is unspecified; tests allow for it).
  D fragments (9.7.15.5.1.1): warp w of the warpgroup holds rows 16w..16w+15; for columns 8j..8j+7 lane l (g = l >> 2,
  t = l % 4) holds d[4j + i] = (16w + g + 8*(i >> 1), 8j + 2t + (i & 1)) (.f32), or those pairs packed in d[2j + h]
  (.f16). An A fragment in registers is the m16n8k16 A fragment of the warp's 16 rows.
- Matrix descriptors (9.7.15.5.1.2, "Matrix Descriptor Format"), a 64-bit value: bits 0-13 start address >> 4, 16-29
  leading-dimension byte offset (LBO) >> 4, 32-45 stride-dimension byte offset (SBO) >> 4, 49-51 base offset, 62-63
  swizzle (0 none, 1 128B, 2 64B, 3 32B); the other bits are reserved (0). Core matrices are 8 rows of 16 bytes
  (9.7.15.5.1.2 "Shared Memory Matrix Layout"). K-major (no transpose), element (r, k) of a 16-bit operand lies at
  start + (r // 8) * SBO + (r % 8) * 16 + (k // 8) * LBO + (k % 8) * 2 without swizzle, and at
  start + (r // 8) * SBO + (r % 8) * W + 2k for a W-byte swizzle (rows W bytes apart, LBO unused). MN-major (transposed):
  (k // 8) * LBO + (k % 8) * 16 + (r // 8) * SBO + 2 * (r % 8) without swizzle; (r // 8W') * LBO + 2 * (r % 8W') + (k % 8)
  * W + (k // 8) * SBO with W' = W / 16 for a W-byte swizzle. A swizzle XORs address bits [4, 4 + log2(W / 16)) with
  bits [7, 7 + log2(W / 16)) of the shared-memory address. The mock requires base offset 0 (a pattern that starts on
  its repeat boundary) and the same descriptor in all threads of the warpgroup.
- Asynchrony (9.7.15.6 wgmma.fence, 9.7.15.7 wgmma.commit_group, 9.7.15.8 wgmma.wait_group): the descriptors are
  checked when the instruction issues; the shared-memory operands are read and D is written only when a
  wgmma.wait_group lets its group complete (the latest point the ISA allows), so shared memory overwritten before that
  wait (a pipeline refilling a buffer a pending wgmma still reads) gives a wrong result here, as it may on hardware.
  commit_group closes the warpgroup's uncommitted wgmma.mma_async into a group; wait_group N waits until at most N
  groups are pending. Checked (each an error naming the register or rule):
  * wgmma.fence must come before the first wgmma.mma_async, and between any other instruction's write of an
    accumulator or A-fragment register and a wgmma.mma_async that uses it (9.7.15.6);
  * an instruction that reads or writes an accumulator (or A register) of a pending wgmma.mma_async, before the
    wait_group that completes it (9.7.15.8: accessing them earlier is undefined);
  * shared memory written through the generic proxy (st.shared, cp.async) and then read by wgmma.mma_async without a
    fence.proxy.async between them (9.7.15.3 "Async Proxy": wgmma reads shared memory in the async proxy, and crossing
    proxies needs a proxy fence).
"""
from __future__ import annotations
import re
import numpy as np
from baregrad.drivers.mock.ptx.errors import PTXError
from baregrad.drivers.mock.ptx.launch import _Ctx
from baregrad.drivers.mock.ptx.parser import _literal, _Ins

_SWIZZLE = {0: 0, 1: 128, 2: 64, 3: 32}   # descriptor bits 62-63 -> swizzle width in bytes (9.7.15.5.1.2)
_RESERVED = sum(((1 << b) - 1) << a for a, b in ((14, 2), (30, 2), (46, 3), (52, 10)))   # descriptor bits that are 0
_REG = re.compile(r"%[\w$.]+")


def operand_offsets(rows: int, desc: dict, trans: bool) -> np.ndarray:
  """Byte offsets from the start address of the (rows, 16) 16-bit elements of a wgmma operand (A: rows = 64, (m, k);
  B: rows = N, (n, k)) under a descriptor's LBO, SBO and swizzle width (see the module docstring), before the swizzle."""
  r = np.arange(rows)[:, None]
  k = np.arange(16)[None, :]
  lbo, sbo, w = desc["lbo"], desc["sbo"], desc["swizzle"]
  if not trans:
    if w == 0:
      return (r // 8) * sbo + (r % 8) * 16 + (k // 8) * lbo + (k % 8) * 2
    return (r // 8) * sbo + (r % 8) * w + 2 * k
  if w == 0:
    return (k // 8) * lbo + (k % 8) * 16 + (r // 8) * sbo + 2 * (r % 8)
  span = 8 * (w // 16)   # elements along MN in one swizzle row
  return (r // span) * lbo + 2 * (r % span) + (k % 8) * w + (k // 8) * sbo


def swizzle(addr: np.ndarray, width: int) -> np.ndarray:
  """A shared-memory byte address under a `width`-byte swizzle: bits [4, 4+b) ^= bits [7, 7+b), b = log2(width / 16)."""
  if width == 0:
    return addr
  mask = width // 16 - 1
  return addr ^ (((addr >> 7) & mask) << 4)


def decode_descriptor(v: int) -> dict:
  """A wgmma matrix descriptor's fields (9.7.15.5.1.2): start, lbo, sbo in bytes; base offset; swizzle width in bytes."""
  return {"start": (v & 0x3FFF) << 4, "lbo": ((v >> 16) & 0x3FFF) << 4, "sbo": ((v >> 32) & 0x3FFF) << 4,
          "base": (v >> 49) & 7, "swizzle": _SWIZZLE[(v >> 62) & 3], "reserved": v & _RESERVED}


def _d_frag(n: int, f16: bool) -> tuple[np.ndarray, np.ndarray]:
  """(rows, cols) of shape (128, registers, elements per register) of D for m64nNk16 (9.7.15.5.1.1)."""
  q = np.arange(128)[:, None, None]
  w, lane = q // 32, q % 32
  g, t = lane >> 2, lane & 3
  if f16:   # register 2j + h holds (row g + 8h, cols 8j + 2t, +1)
    i = np.arange(n // 4)[None, :, None]
    e = np.arange(2)[None, None, :]
    j, h = i >> 1, i & 1
    return 16 * w + g + 8 * h + 0 * e, 8 * j + 2 * t + e
  i = np.arange(n // 2)[None, :, None]
  j, e = i >> 2, i & 3
  return 16 * w + g + 8 * (e >> 1), 8 * j + 2 * t + (e & 1)


def _a_frag() -> tuple[np.ndarray, np.ndarray]:
  """(rows, cols) of shape (128, 4, 2) of an A fragment in registers: the m16n8k16 A fragment per warp (9.7.15.5.1.1)."""
  q = np.arange(128)[:, None, None]
  w, lane = q // 32, q % 32
  g, t = lane >> 2, lane & 3
  i = np.arange(4)[None, :, None] * 2 + np.arange(2)[None, None, :]
  return 16 * w + g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2)


def _to_f64(h: np.ndarray, kind: str) -> np.ndarray:
  h = np.asarray(h, np.uint16)
  if kind == "f16":
    return h.view(np.float16).astype(np.float64)
  return (h.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)


class _Pending:
  """An issued wgmma.mma_async: its lanes, the group each lane's copy belongs to, the registers it writes or reads,
  and the completion (per warpgroup) that reads shared memory and writes D."""
  __slots__ = ("lanes", "group", "regs", "complete", "left")

  def __init__(self, lanes: np.ndarray, group: np.ndarray, regs: frozenset, complete, nwg: int) -> None:
    self.lanes, self.group, self.regs, self.complete = lanes, group, regs, complete
    self.left = np.ones(nwg, bool)   # warpgroups not complete yet


class _WgState:
  """Per-launch-batch wgmma state: fences, committed groups, pending results, generic-proxy shared writes."""

  def __init__(self, n: int) -> None:
    self.fenced = np.zeros(n, bool)      # wgmma.fence since the last non-wgmma write of a wgmma register
    self.count = np.zeros(n, np.int64)   # groups committed per thread
    self.pending: list[_Pending] = []


def _state(c: _Ctx) -> _WgState:
  st = c.wgmma
  if st is None:
    st = c.wgmma = _WgState(c.n)
  return st


class WgmmaOps:
  """Instruction compilers for wgmma.fence / mma_async / commit_group / wait_group (see the module docstring)."""

  def _need_sm90a(self, ins: _Ins) -> None:
    """wgmma, setmaxnreg and tensormap.replace exist on sm_90a only (PTX ISA 9.7.15, 9.7.17.1, 9.7.9.28 "Target ISA
    notes": "Requires sm_90a"): a module that targets anything else is refused, as ptxas refuses it."""
    tgt = (self.module.target or "").split(",")[0].strip()
    if tgt and tgt != "sm_90a":
      raise self._err(ins, f"{ins.op}.{'.'.join(ins.mods)} needs .target sm_90a, the module targets {tgt}")

  def _warpgroups(self, c: _Ctx, m: np.ndarray | None, ins: _Ins) -> np.ndarray:
    """The active lanes as (warpgroups, 128), or an error when some warpgroup is not whole (9.7.15.1, .aligned)."""
    act = np.ones(c.n, bool) if m is None else np.asarray(m, bool)
    if c.nthreads % 128:
      last = c.tlin >= c.nthreads // 128 * 128
      if (act & last).any():
        raise self._err(ins, f"{ins.op}.{ins.mods[0]}: executed by threads of an incomplete warpgroup (block of "
                             f"{c.nthreads} threads; a warpgroup is 4 whole warps, 128 threads: PTX ISA 9.7.15.1)")
    wg = c.bidx * ((c.nthreads + 127) // 128) + c.tlin // 128
    cnt = np.bincount(wg, weights=act, minlength=int(wg.max()) + 1)
    if ((cnt > 0) & (cnt < 128)).any():
      g0 = int(np.argmax((cnt > 0) & (cnt < 128)))
      raise self._err(ins, f"{ins.op}.{ins.mods[0]}: executed by {int(cnt[g0])} of the 128 threads of a warpgroup "
                           f"(.sync.aligned: all threads of the warpgroup execute the same wgmma: PTX ISA 9.7.15)")
    return np.flatnonzero(act).reshape(-1, 128)

  def _c_wgmma(self, ins: _Ins) -> None:
    self._need_sm90a(ins)
    mods = ins.mods
    if not mods or "sync" not in mods or "aligned" not in mods:
      raise self._err(ins, "wgmma instructions are .sync.aligned (PTX ISA 9.7.15)")
    kind = mods[0]
    if kind == "fence":
      def fence(c, m):
        sel = self._warpgroups(c, m, ins)
        _state(c).fenced[sel.reshape(-1)] = True
      ins.fn = fence
    elif kind == "commit_group":
      def commit(c, m):
        sel = self._warpgroups(c, m, ins)
        _state(c).count[sel.reshape(-1)] += 1
      ins.fn = commit
    elif kind == "wait_group":
      self._need(ins, 1)
      lit = _literal(ins.ops[0])
      if lit is None or lit[0] != "i":
        raise self._err(ins, "wgmma.wait_group needs an immediate count (PTX ISA 9.7.15.8)")
      keep = lit[1]

      def wait(c, m):
        sel = self._warpgroups(c, m, ins).reshape(-1)
        _wg_complete(c, sel, keep)
      ins.fn = wait
    elif kind == "mma_async":
      self._c_wgmma_mma(ins)
    else:
      raise self._err(ins, f"wgmma.{kind} is not supported (fence, mma_async, commit_group, wait_group)")

  def _c_setmaxnreg(self, ins: _Ins) -> None:
    """setmaxnreg.{inc,dec}.sync.aligned.u32 n (PTX ISA 9.7.17.1): n a multiple of 8 in [24, 256], executed by whole
    warpgroups (.aligned). Where the launch states its register count (the NV mock passes the QMD's REGISTER_COUNT when
    it runs compiled code), each warpgroup starts at that count rounded up to 8, .inc must not lower it and .dec not
    raise it, and the block's warpgroups together may not end above what the launch gave it (`_register_budget`):
    .inc waits for registers other warpgroups released, so asking for more is a hang."""
    self._need_sm90a(ins)
    mods = ins.mods
    if not mods or mods[0] not in ("inc", "dec") or "sync" not in mods or "aligned" not in mods:
      raise self._err(ins, "setmaxnreg.{inc,dec}.sync.aligned.u32 n (PTX ISA 9.7.17.1)")
    self._need(ins, 1)
    lit = _literal(ins.ops[0])
    if lit is None or lit[0] != "i" or lit[1] % 8 or not 24 <= lit[1] <= 256:
      raise self._err(ins, f"setmaxnreg: the count is an immediate multiple of 8 in [24, 256], got `{ins.ops[0].strip()}` "
                           f"(PTX ISA 9.7.17.1)")
    inc, n = mods[0] == "inc", lit[1]

    def fn(c, m):
      groups = self._warpgroups(c, m, ins)
      for g in groups:
        key = (int(c.bidx[g[0]]), int(c.tlin[g[0]]) // 128)
        cur = c.maxnreg.get(key, -(-c.regs_launch // 8) * 8 if c.regs_launch else None)
        if cur is not None and (n < cur if inc else n > cur):
          raise self._err(ins, f"setmaxnreg.{mods[0]} {n}: warpgroup {key[1]} of block {key[0]} has {cur} registers a "
                               f"thread (.inc may not lower the count, .dec not raise it: PTX ISA 9.7.17.1)")
        c.maxnreg[key] = n
    ins.fn = fn

  def _register_budget(self, c, start: int) -> None:
    """At the end of a batch of blocks: each block's warpgroups' final register counts (setmaxnreg, else the launch's)
    within the registers the launch gave the block; otherwise some setmaxnreg.inc never gets its registers (9.7.17.1)."""
    base = -(-c.regs_launch // 8) * 8
    nwg = -(-c.nthreads // 128)
    for b in range(c.nblocks):
      counts = [c.maxnreg.get((b, w), base) for w in range(nwg)]
      if 128 * sum(counts) > base * c.nthreads:
        raise PTXError(f"hang: block {start + b}'s warpgroups hold {counts} registers a thread after setmaxnreg, "
                       f"{128 * sum(counts)} in all; the launch gave it {base} x {c.nthreads} = {base * c.nthreads} "
                       f"(REGISTER_COUNT {c.regs_launch}): a setmaxnreg.inc waits for registers no warpgroup releases "
                       f"(PTX ISA 9.7.17.1)")

  def _c_wgmma_mma(self, ins: _Ins) -> None:
    mods = ins.mods
    shape = next((x for x in mods if re.fullmatch(r"m64n\d+k16", x)), None)
    if shape is None:
      raise self._err(ins, "only wgmma.mma_async m64nNk16 (.f16/.bf16 inputs) is supported")
    n = int(shape[4:-3])
    if n % 8 or not 8 <= n <= 256:
      raise self._err(ins, f"wgmma.mma_async .{shape}: N must be a multiple of 8 in [8, 256] (PTX ISA 9.7.15.5.2)")
    types = [x for x in mods if x in ("f16", "bf16", "f32")]
    if len(types) != 3 or types[1] != types[2] or types[1] not in ("f16", "bf16"):
      raise self._err(ins, f"wgmma.mma_async needs .dtype.atype.btype with f16/bf16 inputs, got {types}")
    dt, at = types[0], types[1]
    if at == "bf16" and dt != "f32":
      raise self._err(ins, "wgmma.mma_async with .bf16 inputs accumulates in .f32 (PTX ISA 9.7.15.5.2)")
    a_regs = ins.ops[1].strip().startswith("{") if len(ins.ops) > 1 else False
    nops = 7 if a_regs else 8
    self._need(ins, nops)
    nd = n // 2 if dt == "f32" else n // 4
    u32, u64 = np.dtype(np.uint32), np.dtype(np.uint64)
    dnames = self._regs(ins, ins.ops[0], nd)
    for r in dnames:
      if self._reg_dtype(ins, r).itemsize != 4:
        raise self._err(ins, f"wgmma.mma_async: accumulator {r} is not a 32-bit register (PTX ISA 9.7.15.5.2)")
    anames = self._regs(ins, ins.ops[1], 4) if a_regs else []
    a_src = [self._src(ins, x, u32) for x in anames] if a_regs else self._src(ins, ins.ops[1], u64)
    b_src = self._src(ins, ins.ops[2], u64)
    sd = ins.ops[3].strip()
    sdl = _literal(sd)
    if sdl is not None:
      if sdl[0] != "i" or sdl[1] not in (0, 1):
        raise self._err(ins, "scale-d is a predicate or 0/1 (PTX ISA 9.7.15.5.2)")
      scale_d = (lambda c, v=bool(sdl[1]): np.full(c.n, v))
    else:
      scale_d = self._src(ins, sd, np.dtype(np.bool_))
    imms = []
    for x in ins.ops[4:]:
      lit = _literal(x)
      if lit is None or lit[0] != "i":
        raise self._err(ins, f"wgmma.mma_async: `{x.strip()}` must be an immediate (imm-scale-a/b, imm-trans-a/b)")
      imms.append(lit[1])
    if imms[0] not in (1, -1) or imms[1] not in (1, -1) or any(v not in (0, 1) for v in imms[2:]):
      raise self._err(ins, f"imm-scale-a/b are 1 or -1 and imm-trans-a/b 0 or 1 (PTX ISA 9.7.15.5.2), got {imms}")
    sa, sb = imms[0], imms[1]
    ta, tb = (False, bool(imms[2])) if a_regs else (bool(imms[2]), bool(imms[3]))
    dr, dc = _d_frag(n, dt == "f16")
    ar, ac = _a_frag()
    wgregs = getattr(self, "_wgmma_regs", None)
    if wgregs is None:
      wgregs = self._wgmma_regs = set()
    wgregs.update(dnames + anames)

    def decode(c, sel, src, what) -> list[dict]:
      """The warpgroups' descriptors, checked when the instruction issues."""
      v = np.broadcast_to(np.asarray(src(c)), (c.n,)).astype(np.uint64)[sel]
      if (v != v[:, :1]).any():
        raise self._err(ins, f"wgmma.mma_async: the {what} descriptor differs between threads of one warpgroup "
                             f"(one descriptor per warpgroup: PTX ISA 9.7.15.5.1.2)")
      out = []
      for gi in range(sel.shape[0]):
        d = decode_descriptor(int(v[gi, 0]))
        if d["reserved"]:
          raise self._err(ins, f"wgmma.mma_async: {what} descriptor {int(v[gi, 0]):#018x} sets reserved bits "
                               f"{d['reserved']:#x} (bits 14-15, 30-31, 46-48, 52-61 are 0: PTX ISA 9.7.15.5.1.2)")
        if d["base"]:
          raise self._err(ins, f"wgmma.mma_async: {what} descriptor base offset {d['base']} is not modelled by the "
                               f"mock (a swizzle pattern that starts on its repeat boundary has base offset 0)")
        out.append(d)
      return out

    def read(c, lanes, descs, rows, trans, what):
      """(G, rows, 16) float64 from the shared-memory matrices the descriptors name (read when the wgmma completes)."""
      out = np.empty((len(descs), rows, 16))
      for gi, d in enumerate(descs):
        offs = swizzle(np.uint64(d["start"]) + operand_offsets(rows, d, trans).astype(np.uint64), d["swizzle"])
        h = c.shared.load(offs.reshape(-1), np.full(offs.size, lanes[gi]), np.dtype(np.uint16), f"wgmma {what} read")
        out[gi] = _to_f64(h, at).reshape(rows, 16)
      return out

    def fn(c, m):
      sel = self._warpgroups(c, m, ins)
      st = _state(c)
      flat = sel.reshape(-1)
      if not st.fenced[flat].all():
        raise self._err(ins, "wgmma.mma_async without a wgmma.fence since the warpgroup last wrote its accumulator or "
                             "A registers (or before its first wgmma.mma_async) (PTX ISA 9.7.15.6)")
      if c.shared.generic_dirty[c.bidx[sel[:, 0]]].any():
        raise self._err(ins, "wgmma.mma_async reads shared memory written through the generic proxy (st.shared, "
                             "cp.async) with no fence.proxy.async since (PTX ISA 9.7.15.3, async proxy)")
      G = sel.shape[0]
      da = None if a_regs else decode(c, sel, a_src, "A")
      db = decode(c, sel, b_src, "B")
      if a_regs:   # (read at issue: writing them before the wait is an error, so the value cannot change)
        words = np.stack([np.broadcast_to(np.asarray(f(c)), (c.n,)).astype(np.uint32)[sel] for f in a_src], -1)
        halves = np.stack([words & 0xFFFF, words >> 16], -1).astype(np.uint16)   # (G, 128, 4, 2)
        A_regs = np.zeros((G, 64, 16))
        A_regs[:, ar, ac] = _to_f64(halves, at)
      keep = np.broadcast_to(np.asarray(scale_d(c)), (c.n,))[sel][:, 0].copy()
      first = sel[:, 0].copy()

      def complete(c, gm: np.ndarray) -> None:
        """The warpgroups `gm` of this wgmma complete: shared memory read now, D computed and written."""
        idx = np.flatnonzero(gm)
        A = A_regs[idx] if a_regs else read(c, first[idx], [da[i] for i in idx], 64, ta, "A")
        B = read(c, first[idx], [db[i] for i in idx], n, tb, "B")   # (g, N, 16): (n, k)
        lanes = sel[idx].reshape(-1)
        acc = np.stack([c.regs[r].view(np.uint32)[lanes] for r in dnames], -1).reshape(idx.size, 128, nd)
        D = np.zeros((idx.size, 64, n))
        if dt == "f32":
          D[:, dr[..., 0], dc[..., 0]] = acc.view(np.float32).astype(np.float64)
        else:
          D[:, dr, dc] = np.stack([acc & 0xFFFF, acc >> 16], -1).astype(np.uint16).view(np.float16).astype(np.float64)
        D = np.einsum("gmk,gnk->gmn", A * sa, B * sb) + D * keep[idx][:, None, None]
        if dt == "f32":
          vals = D[:, dr[..., 0], dc[..., 0]].astype(np.float32).view(np.uint32)
        else:
          h = D[:, dr, dc].astype(np.float16).view(np.uint16).astype(np.uint32)
          vals = h[..., 0] | (h[..., 1] << np.uint32(16))
        vals = vals.reshape(idx.size * 128, nd)
        for i, r in enumerate(dnames):
          cur = c.regs[r].copy()
          cur.view(np.uint32)[lanes] = vals[:, i]
          c.regs[r] = cur

      st.pending.append(_Pending(flat, st.count[flat].copy(), frozenset(dnames + anames), complete, G))
    ins.fn = fn

  def _wgmma_hooks(self) -> None:
    """Wrap every other instruction that touches a wgmma register: reads/writes of a pending result are errors, a write
    needs a wgmma.fence before the next wgmma.mma_async (PTX ISA 9.7.15.6, 9.7.15.8)."""
    regs = getattr(self, "_wgmma_regs", None)
    if not regs:
      return
    for ins in self.code:
      if ins.op == "wgmma" or ins.fn is None:
        continue
      first = ins.ops[0] if ins.ops else ""
      dst = [] if first.strip().startswith("[") else [r for r in _REG.findall(first) if r in regs]
      src = [r for x in ins.ops[1:] + ([first] if first.strip().startswith("[") else []) for r in _REG.findall(x)
             if r in regs]
      if dst or src:
        ins.fn = self._wgmma_guard(ins, ins.fn, dst, src)

  def _wgmma_guard(self, ins: _Ins, fn, dst: list[str], src: list[str]):
    def guarded(c, m):
      st = c.wgmma
      if st is not None and st.pending:
        act = np.ones(c.n, bool) if m is None else m
        for p in st.pending:
          for what, names in (("reads", src), ("writes", dst)):
            hit = [r for r in names if r in p.regs]
            if hit and (act[p.lanes] & np.repeat(p.left, 128)).any():
              raise PTXError(f"{what} {hit[0]} while a wgmma.mma_async that writes it is pending (wgmma.wait_group "
                             f"first: PTX ISA 9.7.15.8)", ins.line, ins.text)
      fn(c, m)
      if dst and st is not None:
        st.fenced[slice(None) if m is None else m] = False
    return guarded


def _wg_complete(c: _Ctx, lanes: np.ndarray, keep: int) -> None:
  """Complete the pending wgmma groups of `lanes` but their `keep` newest, oldest first: each reads its shared-memory
  operands now and writes its D registers."""
  st = _state(c)
  act = np.zeros(c.n, bool)
  act[lanes] = True
  rest = []
  for p in st.pending:
    done = (act[p.lanes] & (p.group < st.count[p.lanes] - keep)).reshape(-1, 128)[:, 0] & p.left
    if done.any():
      p.complete(c, done)
      p.left &= ~done
    if p.left.any():
      rest.append(p)
  st.pending = rest
