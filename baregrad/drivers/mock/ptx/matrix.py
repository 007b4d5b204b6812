"""Warp-level matrix and asynchronous-copy instructions of the PTX interpreter (mixed into kernel.PTXKernel).

Each is modelled from the PTX ISA, independently of the code generator's own description of the layouts
(codegen/tc.py), so a wrong layout there shows up as a wrong result here:

- mma.sync.aligned (9.7.14.5.14): m16n8k16 .f16/.bf16 and m16n8k8 .f16/.bf16/.tf32, .row.col, f32 or f16 C/D. Fragment
  layouts from 9.7.14.5.7 (m16n8k8) and 9.7.14.5.8 (m16n8k16 with floating point type), with groupID = laneid >> 2 and
  threadID_in_group = laneid % 4. The products are exact and the sum is taken in float64, rounded once to the
  accumulator type (the hardware's internal order and rounding are unspecified; tests allow for it). A .tf32 input uses
  the upper 19 bits of its register (1 sign, 8 exponent, 10 mantissa), as the hardware does.
- ldmatrix.sync.aligned.m8n8.x1/.x2/.x4{.trans}.shared.b16 (9.7.14.6.1 "Warp-level matrix load instruction: ldmatrix"):
  threads 8j..8j+7 give the addresses of the 8 rows (16 bytes each, 16-byte aligned) of matrix j; thread l receives in
  register j the elements (row l/4, columns 2*(l%4), 2*(l%4)+1) of matrix j, the lower column in the lower half; .trans
  gives (row 2*(l%4) and 2*(l%4)+1, column l/4) instead.
- cp.async (9.7.9.25.3): cp.async.ca/.cg.shared.global [dst], [src], cp-size{, src-size}: cp-size 4, 8 or 16 bytes
  (.cg: 16), both addresses aligned to it; the first src-size bytes are read (none when it is 0, so a masked copy never
  faults) and the rest of the destination is zero-filled. The source is read when the instruction issues; the shared
  destination is written only when a cp.async.wait_group / wait_all lets the copy complete (the latest point the ISA
  allows), so a kernel that reads shared memory before waiting reads stale data here, as it may on hardware.
  cp.async.commit_group closes the thread's uncommitted copies into a group; cp.async.wait_group N waits until at most
  the N most recent groups are pending; cp.async.wait_all waits for every copy, committed or not.
- Shared-memory banks (an observer, PTXKernel.bank_conflicts; nothing else changes): 32 banks of 4-byte words,
  successive words in successive banks; a request needs as many wavefronts as the most distinct words any one bank must
  deliver (threads reading the same word share it) (CUDA C++ Programming Guide, "Shared Memory" under Compute
  Capability 5.x and later, which later architectures keep). A request moves at most 128 bytes: ldmatrix one 8x8 matrix
  (8 rows of 16 bytes) per request, a 16-byte cp.async 8 threads per request, a 4-byte one 32 (a whole warp).
- cvt.rna.tf32.f32: round to nearest, ties away from zero, to a 10-bit mantissa (the low 13 bits of the result are 0).
"""
from __future__ import annotations
from typing import Any
import numpy as np
from baregrad.drivers.mock.ptx.errors import GPUFault
from baregrad.drivers.mock.ptx.launch import _Ctx
from baregrad.drivers.mock.ptx.parser import _Ins

def _frag_m16n8k16(g, t):
  """(A, B, C) element -> (row, col) for mma.m16n8k16 .f16/.bf16 (PTX ISA 9.7.14.5.8)."""
  a = [(g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2)) for i in range(8)]
  b = [(2 * t + (i & 1) + 8 * (i >> 1), g) for i in range(4)]
  c = [(g + 8 * (i >> 1), 2 * t + (i & 1)) for i in range(4)]
  return a, b, c

def _frag_m16n8k8(g, t, tf32):
  """(A, B, C) element -> (row, col) for mma.m16n8k8 (PTX ISA 9.7.14.5.7): .f16/.bf16 or .tf32."""
  if tf32:
    a = [(g + 8 * (i & 1), t + 4 * (i >> 1)) for i in range(4)]
    b = [(t + 4 * i, g) for i in range(2)]
  else:
    a = [(g + 8 * (i >> 1), 2 * t + (i & 1)) for i in range(4)]
    b = [(2 * t + (i & 1), g) for i in range(2)]
  c = [(g + 8 * (i >> 1), 2 * t + (i & 1)) for i in range(4)]
  return a, b, c

_SHAPES = {"m16n8k16": (16, 8, 16), "m16n8k8": (16, 8, 8)}


def _elements(words, kind: str):
  """Registers (list of uint32 arrays) -> list of float64 element arrays in element order."""
  out = []
  for w in words:
    w = np.asarray(w).astype(np.uint32)
    if kind == "f16":
      out += [(w & 0xFFFF).astype(np.uint16).view(np.float16).astype(np.float64),
              (w >> 16).astype(np.uint16).view(np.float16).astype(np.float64)]
    elif kind == "bf16":
      out += [((w & 0xFFFF) << 16).astype(np.uint32).view(np.float32).astype(np.float64),
              (w & 0xFFFF0000).astype(np.uint32).view(np.float32).astype(np.float64)]
    elif kind == "tf32":
      out.append((w & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64))
    elif kind == "f32":
      out.append(w.view(np.float32).astype(np.float64))
    else:
      raise ValueError(kind)
  return out

def _m8n8_rows(addr: Any, n: int, num: int, name: str) -> np.ndarray:
  """The row addresses of an ldmatrix/stmatrix, (warps, 8 * num): threads 8j..8j+7 of each warp give matrix j's 8 rows;
  each must be 16-byte aligned (PTX ISA 9.7.14.6, ldmatrix/stmatrix: a misaligned row address is undefined; reported
  as a fault here)."""
  a = np.broadcast_to(np.asarray(addr), (n,)).astype(np.uint64).reshape(n // 32, 32)[:, :8 * num]
  if (a % np.uint64(16)).any():
    bad = int(a.reshape(-1)[np.argmax((a % np.uint64(16)).reshape(-1) != 0)])
    raise GPUFault(f"GPU fault: {name} row address {bad:#x} is not 16-byte aligned", bad)
  return a

class MatrixOps:
  """Instruction compilers for mma.sync, ldmatrix and cp.async (see the module docstring)."""

  def _warp_check(self, c: _Ctx, m: np.ndarray | None, ins: _Ins) -> None:
    if c.nthreads % 32:
      raise self._err(ins, f"{ins.op}: warp-wide instruction in a block of {c.nthreads} threads (not whole warps)")
    self._check_full_warps(c, m, ins)

  def _regs(self, ins: _Ins, s, n):
    s = s.strip()
    if not (s.startswith("{") and s.endswith("}")):
      if n == 1:
        return [s]
      raise self._err(ins, f"expected a vector of {n} registers, got `{s}`")
    parts = [p.strip() for p in s[1:-1].split(",")]
    if len(parts) != n:
      raise self._err(ins, f"expected {n} registers, got {len(parts)}")
    return parts

  def _c_mma(self, ins: _Ins) -> None:
    mods = ins.mods
    if "sync" not in mods or "aligned" not in mods:
      raise self._err(ins, "mma needs .sync.aligned")
    shape = next((x for x in mods if x in _SHAPES), None)
    if shape is None or "row" not in mods or "col" not in mods:
      raise self._err(ins, "only mma.sync.aligned.m16n8k16/.m16n8k8 .row.col are supported")
    types = [x for x in mods if x in ("f16", "bf16", "tf32", "f32")]
    if len(types) != 4:
      raise self._err(ins, f"mma needs four types (d, a, b, c), got {types}")
    dt, at, bt, ct = types
    if at != bt or at not in ("f16", "bf16", "tf32") or (shape == "m16n8k16" and at == "tf32"):
      raise self._err(ins, f"mma.{shape} with .{at}/.{bt} inputs is not supported")
    if at in ("bf16", "tf32") and (dt, ct) != ("f32", "f32"):
      raise self._err(ins, f".{at} inputs need .f32 C and D")
    M, N, K = _SHAPES[shape]
    per = {"f16": 2, "bf16": 2, "tf32": 1}[at]
    na, nb = M * K // 32 // per, K * N // 32 // per
    self._need(ins, 4)
    u32 = np.dtype(np.uint32)
    dregs = self._regs(ins, ins.ops[0], 4 if dt == "f32" else 2)
    a = [self._src(ins, x, u32) for x in self._regs(ins, ins.ops[1], na)]
    b = [self._src(ins, x, u32) for x in self._regs(ins, ins.ops[2], nb)]
    cr = [self._src(ins, x, u32) for x in self._regs(ins, ins.ops[3], 4 if ct == "f32" else 2)]
    wds = [self._dst(ins, x) for x in dregs]
    lane = np.arange(32)
    g, t = lane >> 2, lane & 3
    fa, fb, fc = _frag_m16n8k16(g, t) if shape == "m16n8k16" else _frag_m16n8k8(g, t, at == "tf32")

    def fn(c, m):
      self._warp_check(c, m, ins)
      W = c.n // 32
      def gather(srcs, kind, shp, frag):
        mat = np.zeros((W,) + shp)
        vals = _elements([np.broadcast_to(np.asarray(f(c)), (c.n,)) for f in srcs], kind)
        w = np.arange(W)[:, None]
        for i, v in enumerate(vals):
          r, col = frag[i]
          mat[w, r[None, :], col[None, :]] = v.reshape(W, 32)
        return mat
      A = gather(a, at, (M, K), fa)
      B = gather(b, bt, (K, N), fb)
      if ct == "f32":
        C = gather(cr, "f32", (M, N), fc)
      else:
        C = gather(cr, "f16", (M, N), fc)
      D = np.einsum("wmk,wkn->wmn", A, B) + C
      w = np.arange(W)[:, None]
      outs = [D[w, fc[i][0][None, :], fc[i][1][None, :]].reshape(-1) for i in range(4)]
      if dt == "f32":
        for wd, v in zip(wds, outs):
          wd(c, v.astype(np.float32).view(np.uint32), False, m)
      else:
        h = [v.astype(np.float16).view(np.uint16).astype(np.uint32) for v in outs]
        for j, wd in enumerate(wds):
          wd(c, h[2 * j] | (h[2 * j + 1] << np.uint32(16)), False, m)
    ins.fn = fn

  def _m8n8_form(self, ins: _Ins, name: str, verb: str) -> tuple[int, bool]:
    """(matrices, transposed) of an ldmatrix/stmatrix: only the .sync.aligned.m8n8.x{1,2,4}{.trans}.shared.b16 form."""
    mods = ins.mods
    if "sync" not in mods or "aligned" not in mods or "m8n8" not in mods or "b16" not in mods:
      raise self._err(ins, f"only {name}.sync.aligned.m8n8.x{{1,2,4}}{{.trans}}.shared.b16 is supported")
    num = next((int(x[1:]) for x in mods if x in ("x1", "x2", "x4")), None)
    if num is None:
      raise self._err(ins, f"{name} needs .x1, .x2 or .x4")
    if not any(x.startswith("shared") for x in mods):
      raise self._err(ins, f"{name} {verb} shared memory (.shared)")
    return num, "trans" in mods

  def _c_ldmatrix(self, ins: _Ins) -> None:
    num, trans = self._m8n8_form(ins, "ldmatrix", "reads")
    self._need(ins, 2)
    wds = [self._dst(ins, x) for x in self._regs(ins, ins.ops[0], num)]
    addr = self._addr(ins, ins.ops[1], "shared")
    lane = np.arange(32)

    def fn(c, m):
      self._warp_check(c, m, ins)
      W = c.n // 32
      a = _m8n8_rows(addr(c), c.n, num, "ldmatrix")
      if self.bank_conflicts is not None:
        words = (a.reshape(W * num, 8)[:, :, None] // np.uint64(4) + np.arange(4, dtype=np.uint64)).reshape(W * num, 32)
        self.bank_conflicts(ins.line, ins.text, shared_wavefronts(words), W * num)
      who = (np.arange(W)[:, None] * 32 + np.arange(8 * num)[None, :]).reshape(-1)   # providing threads
      rows = np.stack([c.shared.load(a.reshape(-1) + np.uint64(2 * e), c.lanes[who], np.dtype(np.uint16), "ldmatrix")
                       for e in range(8)], -1).reshape(W, num, 8, 8)
      for j, wd in enumerate(wds):
        if trans:
          lo, hi = rows[:, j, 2 * (lane % 4), lane // 4], rows[:, j, 2 * (lane % 4) + 1, lane // 4]
        else:
          lo, hi = rows[:, j, lane // 4, 2 * (lane % 4)], rows[:, j, lane // 4, 2 * (lane % 4) + 1]
        wd(c, (lo.astype(np.uint32) | (hi.astype(np.uint32) << np.uint32(16))).reshape(-1), False, m)
    ins.fn = fn

  def _c_stmatrix(self, ins: _Ins) -> None:
    """stmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared{::cta}.b16 [p], {r...} (PTX ISA 9.7.14.6.2, sm_90): ldmatrix's
    inverse. Threads 8j..8j+7 give the addresses of the 8 rows (16 bytes, 16-byte aligned) of matrix j; thread l's
    register j holds (row l/4, columns 2*(l%4), 2*(l%4)+1) of matrix j, the lower column in the lower half (.trans:
    rows 2*(l%4) and 2*(l%4)+1 of column l/4)."""
    num, trans = self._m8n8_form(ins, "stmatrix", "writes")
    self._need(ins, 2)
    addr = self._addr(ins, ins.ops[0], "shared")
    srcs = [self._src(ins, x, np.dtype(np.uint32)) for x in self._regs(ins, ins.ops[1], num)]
    lane = np.arange(32)

    def fn(c, m):
      self._warp_check(c, m, ins)
      W = c.n // 32
      a = _m8n8_rows(addr(c), c.n, num, "stmatrix")
      rows = np.zeros((W, num, 8, 8), np.uint16)
      for j, f in enumerate(srcs):
        v = np.broadcast_to(np.asarray(f(c)), (c.n,)).astype(np.uint32).reshape(W, 32)
        lo, hi = (v & 0xFFFF).astype(np.uint16), (v >> 16).astype(np.uint16)
        if trans:
          rows[:, j, 2 * (lane % 4), lane // 4], rows[:, j, 2 * (lane % 4) + 1, lane // 4] = lo, hi
        else:
          rows[:, j, lane // 4, 2 * (lane % 4)], rows[:, j, lane // 4, 2 * (lane % 4) + 1] = lo, hi
      who = (np.arange(W)[:, None] * 32 + np.arange(8 * num)[None, :]).reshape(-1)   # the threads giving row addresses
      for e in range(8):
        c.shared.store(a.reshape(-1) + np.uint64(2 * e), c.lanes[who], rows.reshape(W * num * 8, 8)[:, e],
                       np.dtype(np.uint16), "stmatrix")
    ins.fn = fn

  def _c_cp(self, ins: _Ins) -> None:
    mods = ins.mods
    if len(mods) > 1 and mods[:2] == ["async", "bulk"]:
      return self._c_cp_bulk(ins)   # mbarrier.py
    if not mods or mods[0] != "async":
      raise self._err(ins, f"cp.{'.'.join(mods)} is not supported (only cp.async)")
    if "commit_group" in mods:
      def commit(c, m):
        st = _cp_state(c)
        st["count"][slice(None) if m is None else m] += 1
      ins.fn = commit
      return
    if "wait_group" in mods or "wait_all" in mods:
      if "wait_all" in mods:
        keep = None
      else:
        self._need(ins, 1)
        lit = ins.ops[0].strip()
        if not lit.isdigit():
          raise self._err(ins, "cp.async.wait_group needs an immediate count")
        keep = int(lit)
      ins.fn = lambda c, m: _cp_complete(c, m, keep)
      return
    if "shared" not in [x.split("::")[0] for x in mods] or "global" not in mods:
      raise self._err(ins, "only cp.async.ca/.cg.shared.global is supported")
    if len(ins.ops) not in (3, 4):
      raise self._err(ins, "cp.async [dst], [src], cp-size{, src-size}")
    size = int(ins.ops[2], 0)
    if size not in (4, 8, 16) or ("cg" in mods and size != 16):
      raise self._err(ins, f"cp.async copies 4, 8 or 16 bytes (.cg: 16), got {size}")
    dst = self._addr(ins, ins.ops[0], "shared")
    src = self._addr(ins, ins.ops[1], "global")
    srcsz = self._src(ins, ins.ops[3], np.dtype(np.uint32)) if len(ins.ops) == 4 else (lambda c: np.uint32(size))

    def fn(c, m):
      sel = np.arange(c.n) if m is None else np.flatnonzero(m)
      d = np.broadcast_to(np.asarray(dst(c)), (c.n,)).astype(np.uint64)[sel]
      s = np.broadcast_to(np.asarray(src(c)), (c.n,)).astype(np.uint64)[sel]
      n = np.broadcast_to(np.asarray(srcsz(c)), (c.n,)).astype(np.int64)[sel]
      for what, x in (("shared destination", d), ("global source", s)):
        mis = (x % np.uint64(size)) != 0
        if mis.any():
          bad = int(x[np.argmax(mis)])
          raise GPUFault(f"GPU fault: misaligned cp.async {what} {bad:#x} for a {size}-byte copy", bad)
      if (n > size).any() or (n < 0).any():
        raise self._err(ins, f"cp.async src-size must be in [0, {size}]")
      data = np.zeros((sel.size, size), np.uint8)
      for byte in range(size):
        rd = n > byte
        if rd.any():
          data[rd, byte] = c.mem.load(s[rd] + np.uint64(byte), np.uint8, "cp.async global read")
      c.shared._flat(d, c.lanes[sel], size, "cp.async shared write")   # a bad destination faults now
      if self.bank_conflicts is not None:   # requests of 128 bytes: the issuing threads in order, by warp
        per, warp = 128 // size, c.lanes[sel] // 32
        wf = ideal = 0
        for w in np.unique(warp):
          dw = d[warp == w]
          for q in range(0, dw.size, per):
            ch = dw[q:q + per]
            words = (ch[:, None] // np.uint64(4) + np.arange(size // 4, dtype=np.uint64)).reshape(1, -1)
            wf, ideal = wf + shared_wavefronts(words), ideal + 1
        self.bank_conflicts(ins.line, ins.text, wf, ideal)
      st = _cp_state(c)
      st["pending"].append((sel, d, data, st["count"][sel].copy()))
    ins.fn = fn

  def _cvt_tf32(self, ins: _Ins) -> None:
    """cvt.rna.tf32.f32 d, a: the .b32 result keeps 19 bits (round to nearest, ties away from zero)."""
    if "rna" not in ins.mods:
      raise self._err(ins, "cvt to .tf32 is supported with .rna only")
    self._need(ins, 2)
    src = self._src(ins, ins.ops[1], np.dtype(np.float32))
    wd = self._dst(ins, ins.ops[0])

    def fn(c, m):
      v = np.broadcast_to(np.asarray(src(c), np.float32), (c.n,))
      u = v.view(np.uint32).astype(np.uint64)
      r = ((u + 0x1000) & 0xFFFFE000).astype(np.uint32)
      special = ~np.isfinite(v)
      wd(c, np.where(special, v.view(np.uint32), r).astype(np.uint32), False, m)
    ins.fn = fn


def shared_wavefronts(words: np.ndarray) -> int:
  """Wavefronts of shared-memory requests, one a row of `words` (4-byte word indices): per request the most distinct
  words one of the 32 banks holds (see the module docstring), summed."""
  eq = words[:, :, None] == words[:, None, :]
  first = ~np.tril(eq, -1).any(axis=2)                      # each distinct word counted once
  same_bank = (words[:, :, None] % np.uint64(32)) == (words[:, None, :] % np.uint64(32))
  return int((same_bank & first[:, None, :]).sum(axis=2).max(axis=1).sum())


def _cp_state(c: _Ctx):
  st = getattr(c, "cp_async", None)
  if st is None:
    st = c.cp_async = {"count": np.zeros(c.n, np.int64), "pending": []}
  return st


def _cp_complete(c: _Ctx, m: np.ndarray | None, keep) -> None:
  """Finish the copies of the active threads: all (keep None), or all but their `keep` most recent groups."""
  st = _cp_state(c)
  act = np.ones(c.n, bool) if m is None else np.asarray(m, bool)
  rest = []
  for sel, d, data, grp in st["pending"]:
    done = act[sel] & (True if keep is None else grp < st["count"][sel] - keep)
    if done.any():
      words = data[done].view(np.uint32)
      for w in range(words.shape[1]):
        c.shared.store(d[done] + np.uint64(4 * w), c.lanes[sel[done]], words[:, w], np.dtype(np.uint32), "cp.async")
    if not done.all():
      nd = ~done
      rest.append((sel[nd], d[nd], data[nd], grp[nd]))
  st["pending"] = rest
