"""Tensor-core lowering (OptOps.TC), a step of lowering (codegen/lower.py): the values the operands' indices take in
the fragments' lane/element layouts (`tc_lanes`), and a staged operand's whole fragment read by one ldmatrix
(`ldmatrix`), or for sm_90a wgmma a staged operand's matrix descriptor (`wgmma_desc`). The layouts themselves are the
renderer's TensorCore records (codegen/tc.py)."""
from __future__ import annotations
from typing import Any, TYPE_CHECKING
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import UOp, Ops
from baregrad.codegen.kernel import Axis, OptError
if TYPE_CHECKING:
  from baregrad.codegen.lower import Lowering
  from baregrad.codegen.stage import StagedTile

def _lane_id(lw: Lowering) -> UOp:
  """The warp's lane id from the lane parts of the tile (each its lane bits)."""
  lane = UOp.const(lw.it, 0)
  for i, a in enumerate(lw.axes):
    if a.tc is not None and a.tc[0] == "lane": lane = lane + lw.rng[i] * (1 << a.tc[2])
  return lane

def _split_coord(axes: list[Axis], o: int, c: UOp, out: dict[int, UOp]) -> None:
  """Write into `out` the value of each tensor-core part of full-shape axis o for coordinate value c (inner part
  last)."""
  stride = 1
  for i in reversed([i for i, a in enumerate(axes) if a.orig == o and a.tc is not None]):
    out[i] = (c // stride % axes[i].size).simplify()
    stride *= axes[i].size

class _Fragments:
  """TC: the coordinates of the fragments' elements from the lane id and element bits. An element bit the output tile
  has as an upcast part is that part's range; the others (the k bits, one operand's bits) get fresh 2-ranges."""
  def __init__(self, lw: Lowering):
    self.lw, self.tc = lw, lw.k.tc[0]  # type: ignore[index]
    m = lw.k.tc[1]  # type: ignore[index]
    self.celem: dict[tuple[str, int], UOp] = {}
    for i, a in enumerate(lw.axes):
      if a.tc is None or a.kind == "tc" or a.tc[0] == "lane": continue
      if a.size != 2: raise OptError(f"TC: fragment element parts must be single bits, got {a.size}")
      self.celem[("m" if a.orig == m else "n", a.tc[1])] = lw.rng[i]
    self.lane = _lane_id(lw).simplify()
    self.fresh: dict[tuple[str, int], UOp] = {}

  def elem(self, coord: str, b: int) -> UOp:
    """The range of element bit b of coordinate `coord` (m, n or k)."""
    if (coord, b) in self.celem: return self.celem[(coord, b)]
    if (coord, b) not in self.fresh:
      self.fresh[(coord, b)] = UOp.range(2, 300_000 + len(self.fresh), "upcast", self.lw.it)
    return self.fresh[(coord, b)]

  def coord(self, layout: str, coord: str) -> UOp:
    """Coordinate `coord` of fragment `layout` (a, b or c) in a lane: its bits from element bits and runs of lane
    bits."""
    e: UOp = UOp.const(self.lw.it, 0)
    bits = self.tc.coord_bits(layout, coord)
    b = 0
    while b < len(bits):
      src, j = bits[b]
      if src == "elem": e, b = e + self.elem(coord, b) * (1 << b), b + 1; continue
      ln = 1
      while b + ln < len(bits) and bits[b + ln] == ("lane", j + ln): ln += 1
      e, b = e + (self.lane // (1 << j)) % (1 << ln) * (1 << b), b + ln
    return e.simplify()

  def values(self, layout: str, coords: str) -> dict[int, UOp]:
    """The axis parts' values where an operand of `layout` is read: the ranges, its coordinates' parts replaced."""
    _, m, n, k, _, _ = self.lw.k.tc  # type: ignore[misc]
    out = dict(self.lw.rng)
    for coord in coords: _split_coord(self.lw.axes, {"m": m, "n": n, "k": k}[coord], self.coord(layout, coord), out)
    return out

def tc_lanes(lw: Lowering) -> dict[str, Any]:
  """TC: per operand ("a", "b"), the values its index takes for the tile's parts (from the lane id and fragment
  element bits, per the tensor core's layout), and the element ranges of the A, B and C fragments ("ea", "eb", "ec",
  bit 0 first)."""
  fr = _Fragments(lw)
  res: dict[str, Any] = {"a": fr.values("a", "mk"), "b": fr.values("b", "kn")}
  for x in "abc": res["e" + x] = tuple(fr.elem(e[0], int(e[1:])) for e in getattr(fr.tc, f"{x}_elem"))
  return res

def ldmatrix(lw: Lowering, t: StagedTile, rv: dict[int, UOp], rbuf: UOp, after: UOp) -> UOp | None:
  """TC operand staged with rows of 8 16-bit k values contiguous: the whole fragment in one warp-wide ldmatrix (the
  renderer declares it, TensorCore.ldmatrix), read from tile t at buffer offset rbuf after barrier `after`. Lane 8j + r
  gives the address of row r of 8x8 matrix j, whose origin is where fragment element 2j lies for lane 0; the row
  coordinate is the one the lane bits 2..4 give. None where the layout does not fit."""
  k_ = lw.k
  tc, m, n, k, la, _ = k_.tc  # type: ignore[misc]
  axes, ld, tile, sstride = lw.axes, t.ld, t.parts, t.sstride
  if not k_.has_ldmatrix or ld.dtype.itemsize != 2: return None
  x, row = ("a", "m") if ld is la else ("b", "n")
  lane_l, elem = getattr(tc, f"{x}_lane"), getattr(tc, f"{x}_elem")
  if lane_l[:2] != ("k1", "k2") or elem[0] != "k0" or lane_l[2:] != (f"{row}0", f"{row}1", f"{row}2"): return None
  kt = [i for i in tile if axes[i].kind == "tc"]
  rorig = m if row == "m" else n
  rparts = [i for i in tile if axes[i].tc is not None and axes[i].orig == rorig]
  def roff(c: int) -> int:   # shared-memory offset of row coordinate c within the tile
    off, st = 0, 1
    for i in reversed(rparts): off, st = off + (c // st) % axes[i].size * sstride[i], st * axes[i].size
    return off
  if len(kt) == 1 and sstride[kt[0]] == 1: trans = False          # rows of 8 k values: the fragment's pairs as stored
  elif all(roff(c) == c for c in range(8)): trans = True           # rows of 8 row-coordinate values: transposed on load
  else: return None
  nmat = (1 << len(elem)) // 2
  lane = _lane_id(lw)
  mat, r = (lane // 8) % nmat, lane % 8
  # origin of matrix j: the coordinates of fragment element 2j (its bits 1.. are elem bits 1..) at lane 0
  org = {row: UOp.const(lw.it, 0), "k": UOp.const(lw.it, 0)}
  for b, name in enumerate(elem[1:], 1):
    org[name[0]] = org[name[0]] + (mat // (1 << (b - 1))) % 2 * (1 << int(name[1:]))
  # lane r addresses the stored row r past the origin: along k where the rows hold row-coordinate values (trans)
  coords = {row: org[row].simplify(), "k": (org["k"] + r).simplify()} if trans else \
           {row: (org[row] + r).simplify(), "k": org["k"].simplify()}
  vals = dict(rv)
  for coord, o in ((row, rorig), ("k", k)): _split_coord(axes, o, coords[coord], vals)
  addr: UOp = rbuf
  for i in tile: addr = addr + vals[i] * sstride[i]
  return UOp(Ops.LOAD, ld.dtype.vec(1 << len(elem)), (t.at(t.swz(addr.simplify())), after),
             ("ldmatrix", nmat, trans))

def tc_desc_lanes(lw: Lowering) -> dict[str, Any]:
  """TC through matrix descriptors (TensorCore.desc, sm_90a wgmma): the operands are read whole from their staged tiles
  (wgmma_desc), so they take the ranges' own values; only C has fragment elements."""
  fr = _Fragments(lw)
  return {"a": dict(lw.rng), "b": dict(lw.rng), "ea": (), "eb": (),
          "ec": tuple(fr.elem(e[0], int(e[1:])) for e in fr.tc.c_elem)}

WGMMA_SW128 = 1   # descriptor bits 62-63: the 128-byte swizzle (PTX ISA 9.7.15.5.1.2 "Matrix Descriptor Format")

def wgmma_desc(lw: Lowering, t: StagedTile, rbuf: UOp, after: UOp) -> UOp:
  """TC through matrix descriptors: the 64-bit shared-memory matrix descriptor of the operand tile t's 64-row (A) or
  N-row (B) block and k16 step at the current ranges, as a LOAD the renderer turns into the descriptor (arg ("wgdesc",
  LBO, SBO, swizzle, transpose)). The tile must be one the hardware reads with the 128-byte swizzle (PTX ISA
  9.7.15.5.1.2): rows of 64 16-bit values (128 bytes) swizzled by stage.py's _swizzler (16-byte chunk ^= row % 8: address
  bits 4-6 ^= bits 7-9 on a tile 1024-byte aligned), and the operand's rows in order. K-major (k contiguous): row r of
  the block at r * 128 bytes, 8-row groups 1024 bytes apart (SBO), the k step 32 bytes on. MN-major (its row
  coordinate contiguous, a block exactly one 64-value row wide): k row j at j * 128 bytes, 8-k groups 1024 bytes apart
  (SBO), read transposed (imm-trans 1). Anything else raises OptError (the kernel falls back)."""
  k_ = lw.k
  _, m, n, _, la, _ = k_.tc  # type: ignore[misc]
  axes, tile, sstride = lw.axes, t.parts, t.sstride
  if t.ld.dtype.itemsize != 2 or t.rowlen != 64:
    raise OptError(f"TC wgmma: a staged operand needs rows of 64 16-bit values (128-byte swizzle), got rows of {t.rowlen}")
  rorig = m if t.ld is la else n
  kt = [i for i in tile if axes[i].kind == "tc"]
  rows = [i for i in tile if axes[i].tc is not None and axes[i].kind != "tc" and axes[i].orig == rorig]
  if len(kt) != 1: raise OptError("TC wgmma: the operand tile has no k16 part")
  if sstride[kt[0]] == 1 and all(sstride[i] == 64 << (axes[i].tc or (0, 0))[1] for i in rows): lbo, sbo, trans = 16, 1024, 0
  # MN-major: SBO steps over 8 k rows; LBO (between 64-value chunks of the row coordinate) is unused with one chunk, and
  # set to the same 1024 so a reading that swaps the two (CUTLASS's and the ISA's wording differ) still gets 1024
  elif sstride[kt[0]] == 64 and all(sstride[i] == 1 << (axes[i].tc or (0, 0))[1] for i in rows): lbo, sbo, trans = 1024, 1024, 1
  else: raise OptError("TC wgmma: the operand tile's rows are not in the canonical 128-byte swizzle layout")
  vals = dict(lw.rng)
  for i in rows + kt: vals[i] = UOp.const(lw.it, 0)
  addr: UOp = rbuf
  for i in tile: addr = addr + vals[i] * sstride[i]
  return UOp(Ops.LOAD, dtypes.uint64, (t.at(addr.simplify()), after), ("wgdesc", lbo, sbo, WGMMA_SW128, trans))
