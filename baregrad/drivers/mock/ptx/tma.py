"""Tensor maps built on the device and tensor bulk copies (TMA) of the PTX interpreter (mixed into kernel.PTXKernel).

A tensor map's 128-byte format is opaque (CUDA Driver API, cuTensorMapEncodeTiled: "an opaque value"); the PTX ISA
sets its fields one by one with tensormap.replace (PTX ISA 8.3+, 9.7.9.28 "tensormap.replace", sm_90a). The mock
keeps each map's fields beside memory, keyed by the map's address, so only maps built by tensormap.replace exist here
(a host-encoded map is refused by name: its layout is not public):

- tensormap.replace.tile.<field>.<global|shared::cta>.b1024.<b32|b64> [map], {ord,} value: fields global_address,
  rank (the rank minus one), box_dim[ord], global_dim[ord], global_stride[ord] (bytes between elements of dimension
  ord + 1), element_stride[ord], elemtype (PTX's table: .u8 0, .u16 1, .u32 2, .s32 3, .u64 4, .s64 5, .f16 6, .f32 7,
  .f32.ftz 8, .f64 9, .bf16 10, .tf32 11, .tf32.ftz 12), interleave_layout (0: none), swizzle_mode (0 none, 1 32B, 2
  64B, 3 128B), fill_mode (0 zeros, 1 NaN). The map that tensormap.replace and tensormap.cp_fenceproxy address is a
  128-byte .b1024 object, 128-byte aligned (9.7.9.28, 9.7.9.29; CUDA's CUtensorMap is declared 128-byte aligned); the
  map a tensor copy reads, 64-byte aligned (cuTensorMapEncodeTiled).
- tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [global], [shared], 128:
  copies a map from shared to global memory and releases it to the tensormap proxy (9.7.9.29). A map modified in
  global memory by tensormap.replace is in the generic proxy until a fence.proxy.tensormap::generic.acquire on it
  (9.7.12.4): a tensor copy through it before then is an error here.
- cp.async.bulk.tensor.2d.shared::cluster|shared::cta.global{.tile}.mbarrier::complete_tx::bytes [dst], [map, {x, y}],
  [mbar] (9.7.9.25.5.2): the box of box_dim[0] x box_dim[1] elements at coordinates (x, y) (x the contiguous
  dimension; signed, out-of-bounds elements filled with zeros, or NaN for fill_mode 1), rows of box_dim[0] elements one
  after another in shared memory, the swizzle applied to the shared address as wgmma reads it (bits [4, 4+b) ^= bits
  [7, 7+b)); complete-tx of the whole box's bytes on the mbarrier, landing when a thread waits on it (mbarrier.py).
  Checked (cuTensorMapEncodeTiled's requirements, which the map format carries, and the ISA's): dst 128-byte aligned,
  global address 16-byte aligned, global strides multiples of 16, box dims 1..256 with the inner box a multiple of 16
  bytes and, with a swizzle, at most its span; element strides 1; every field set; the map's rank 2.
"""
from __future__ import annotations
import numpy as np
from baregrad.drivers.mock.ptx.errors import GPUFault
from baregrad.drivers.mock.ptx.launch import _Ctx
from baregrad.drivers.mock.ptx.parser import _literal, _Ins

ELEM_BYTES = {0: 1, 1: 2, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 4, 9: 8, 10: 2, 11: 4, 12: 4}
SWIZZLE_SPAN = {0: 0, 1: 32, 2: 64, 3: 128}
_SCALAR = ("global_address", "rank", "elemtype", "interleave_layout", "swizzle_mode", "fill_mode")
_ORD = ("box_dim", "global_dim", "global_stride", "element_stride")


def _maps(c: _Ctx) -> dict:
  """(space, block or -1, address) -> {"fields": {...}, "acquired": bool} for the batch's tensor maps."""
  if c.tmaps is None:
    c.tmaps = {}
  return c.tmaps


class TmaOps:
  """Instruction compilers for tensormap.replace / cp_fenceproxy and cp.async.bulk.tensor (see the module docstring)."""

  def _tmap_key(self, c: _Ctx, space: str, lane: int, a: int, ins: _Ins, align: int = 64) -> tuple:
    if a % align:
      why = "a .b1024 tensor-map object: PTX ISA 9.7.9.28 tensormap.replace, 9.7.9.29 tensormap.cp_fenceproxy" if align == 128 \
        else "cuTensorMapEncodeTiled"
      raise GPUFault(f"GPU fault: tensor map address {a:#x} is not {align}-byte aligned ({ins.op}; {why})", a)
    if space == "shared":
      c.shared._flat(np.array([a], np.uint64), np.array([lane]), 1, "tensor map")   # inside the block's shared memory
      return ("shared", int(c.bidx[lane]), a)
    return ("global", -1, a)

  def _c_tensormap(self, ins: _Ins) -> None:
    self._need_sm90a(ins)   # wgmma.py
    mods = ins.mods
    if mods and mods[0] == "cp_fenceproxy":
      if "global" not in mods or "shared::cta" not in mods or "release" not in mods:
        raise self._err(ins, "only tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.* is supported")
      self._need(ins, 3)
      dst, src = self._addr(ins, ins.ops[0], "global"), self._addr(ins, ins.ops[1], "shared")

      def cp(c, m):
        maps = _maps(c)
        for lane in (np.arange(c.n) if m is None else np.flatnonzero(m)):
          d = int(np.broadcast_to(np.asarray(dst(c)), (c.n,))[lane])
          s = int(np.broadcast_to(np.asarray(src(c)), (c.n,))[lane])
          sk = self._tmap_key(c, "shared", lane, s, ins, 128)
          if sk not in maps:
            raise self._err(ins, f"tensormap.cp_fenceproxy: no tensor map at shared offset {s:#x} (build it with "
                                 f"tensormap.replace first)")
          maps[self._tmap_key(c, "global", lane, d, ins, 128)] = {"fields": dict(maps[sk]["fields"]), "acquired": True}
      ins.fn = cp
      return
    if not mods or mods[0] != "replace" or "tile" not in mods:
      raise self._err(ins, "only tensormap.replace.tile and tensormap.cp_fenceproxy are supported")
    field = next((f for f in _SCALAR + _ORD if f in mods), None)
    if field is None:
      raise self._err(ins, f"tensormap.replace: unknown field in .{'.'.join(mods)}")
    space = "shared" if "shared::cta" in mods else "global"
    has_ord = field in _ORD
    self._need(ins, 3 if has_ord else 2)
    addr = self._addr(ins, ins.ops[0], space)
    if has_ord:
      lit = _literal(ins.ops[1])
      if lit is None or lit[0] != "i" or not 0 <= lit[1] < 5:
        raise self._err(ins, "tensormap.replace: the ordinal is an immediate 0..4 (PTX ISA 9.7.9.28)")
      name = f"{field}[{lit[1]}]"
    else:
      name = field
    val = self._src(ins, ins.ops[-1], np.dtype(np.uint64 if "b64" in mods else np.uint32))

    def replace(c, m):
      maps = _maps(c)
      v = np.broadcast_to(np.asarray(val(c)), (c.n,))
      a = np.broadcast_to(np.asarray(addr(c)), (c.n,))
      for lane in (np.arange(c.n) if m is None else np.flatnonzero(m)):
        key = self._tmap_key(c, space, lane, int(a[lane]), ins, 128)
        e = maps.setdefault(key, {"fields": {}, "acquired": space == "shared"})
        e["fields"][name] = int(v[lane])
        if space == "global":
          e["acquired"] = False   # a generic-proxy write: the tensormap proxy sees it after an acquire fence
    ins.fn = replace

  def _tmap_acquire(self, c: _Ctx, m, addr) -> None:
    """fence.proxy.tensormap::generic.acquire [map], 128: the map's replaced fields are visible to tensor copies."""
    maps = _maps(c)
    a = np.broadcast_to(np.asarray(addr(c)), (c.n,))
    for lane in (np.arange(c.n) if m is None else np.flatnonzero(m)):
      e = maps.get(("global", -1, int(a[lane])))
      if e is not None:
        e["acquired"] = True

  def _tmap_fields(self, c: _Ctx, key: tuple, ins: _Ins) -> dict:
    e = _maps(c).get(key)
    where = f"{key[0]} address {key[2]:#x}"
    if e is None:
      raise self._err(ins, f"no tensor map built by tensormap.replace at {where} (a host-encoded map's layout is "
                           f"not public: the mock runs device-built maps only)")
    if not e["acquired"]:
      raise self._err(ins, f"tensor map at {where} changed by tensormap.replace with no "
                           f"fence.proxy.tensormap::generic.acquire before this copy (PTX ISA 9.7.12.4)")
    f = e["fields"]
    need = list(_SCALAR) + [f"{n}[{i}]" for n in ("box_dim", "global_dim", "element_stride") for i in range(2)] + \
      ["global_stride[0]"]
    missing = [n for n in need if n not in f]
    if missing:
      raise self._err(ins, f"tensor map at {where}: fields never set by tensormap.replace: {', '.join(missing)}")
    esz = ELEM_BYTES.get(f["elemtype"])
    span = SWIZZLE_SPAN.get(f["swizzle_mode"])
    bd = (f["box_dim[0]"], f["box_dim[1]"])
    problems = []
    if f["rank"] != 1: problems.append(f"rank field {f['rank']} (rank - 1; a .2d copy needs 1)")
    if esz is None: problems.append(f"elemtype {f['elemtype']} is not one of PTX's 0..12")
    if span is None: problems.append(f"swizzle_mode {f['swizzle_mode']} (0 none, 1 32B, 2 64B, 3 128B)")
    if f["interleave_layout"] != 0: problems.append("interleave_layout other than 0 (none) is not modelled")
    if f["fill_mode"] not in (0, 1): problems.append(f"fill_mode {f['fill_mode']} (0 zeros, 1 NaN)")
    if f["global_address"] % 16: problems.append(f"global address {f['global_address']:#x} is not 16-byte aligned")
    if f["global_stride[0]"] % 16: problems.append(f"global stride {f['global_stride[0]']} is not a multiple of 16")
    if any(not 1 <= b <= 256 for b in bd): problems.append(f"box {bd} outside 1..256")
    if (f["element_stride[0]"], f["element_stride[1]"]) != (1, 1): problems.append("element strides other than 1")
    if esz is not None and span is not None and bd[0] * esz % 16: problems.append(
      f"the inner box ({bd[0]} x {esz} bytes) is not a multiple of 16 bytes")
    if esz is not None and span and bd[0] * esz > span: problems.append(
      f"the inner box ({bd[0] * esz} bytes) is wider than the {span}-byte swizzle")
    if problems:
      raise self._err(ins, f"tensor map at {where}: " + "; ".join(problems) + " (cuTensorMapEncodeTiled's requirements)")
    return {**f, "esz": esz, "span": span}

  def _c_cp_bulk_tensor(self, ins: _Ins) -> None:
    mods = ins.mods
    if "2d" not in mods or "global" not in mods or "mbarrier::complete_tx::bytes" not in mods or \
       not any(x in ("shared::cluster", "shared::cta") for x in mods) or any(x in mods for x in ("im2col", "multicast::cluster")):
      raise self._err(ins, "only cp.async.bulk.tensor.2d.shared::{cluster,cta}.global{.tile}.mbarrier::complete_tx::bytes "
                           "is supported")
    self._need(ins, 3)
    dst = self._addr(ins, ins.ops[0], "shared")
    inner = ins.ops[1].strip()
    if not (inner.startswith("[") and inner.endswith("]") and "{" in inner):
      raise self._err(ins, "cp.async.bulk.tensor: [tensorMap, {x, y}] expected")
    tm_s, coords = inner[1:-1].split(",", 1)
    cs = [x.strip() for x in coords.strip().strip("{}").split(",")]
    if len(cs) != 2:
      raise self._err(ins, f"cp.async.bulk.tensor.2d takes 2 coordinates, got {len(cs)}")
    tmap = self._addr(ins, f"[{tm_s.strip()}]", "generic")
    cx, cy = (self._src(ins, x, np.dtype(np.int32)) for x in cs)
    bar = self._addr(ins, ins.ops[2], "shared")

    def fn(c, m):
      sel, keys, inv = self._mbar_keys(c, m, bar, ins)
      d = np.broadcast_to(np.asarray(dst(c)), (c.n,)).astype(np.uint64)
      ta = np.broadcast_to(np.asarray(tmap(c)), (c.n,)).astype(np.uint64)
      xs = np.broadcast_to(np.asarray(cx(c)), (c.n,)).astype(np.int64)
      ys = np.broadcast_to(np.asarray(cy(c)), (c.n,)).astype(np.int64)
      for i, lane in enumerate(sel):
        if int(d[lane]) % 128:
          raise GPUFault(f"GPU fault: cp.async.bulk.tensor shared destination {int(d[lane]):#x} is not 128-byte "
                         f"aligned (PTX ISA 9.7.9.25.5.2)", int(d[lane]))
        f = self._tmap_fields(c, self._tmap_key(c, "global", lane, int(ta[lane]), ins), ins)
        b = self._mbar(c, keys[inv[i]], ins)
        esz, (bx, by) = f["esz"], (f["box_dim[0]"], f["box_dim[1]"])
        gx = xs[lane] + np.arange(bx)[None, :]
        gy = ys[lane] + np.arange(by)[:, None]
        ok = (gx >= 0) & (gx < f["global_dim[0]"]) & (gy >= 0) & (gy < f["global_dim[1]"])
        base = np.uint64(f["global_address"])
        src = (base + (np.where(ok, gx, 0) * esz + np.where(ok, gy, 0) * f["global_stride[0]"]).astype(np.uint64))
        data = np.zeros((by, bx, esz), np.uint8)
        if ok.any():
          data[ok] = c.mem.load((src[ok][:, None] + np.arange(esz, dtype=np.uint64)).reshape(-1), np.uint8,
                                "cp.async.bulk.tensor global read").reshape(-1, esz)
        if f["fill_mode"] == 1 and (~ok).any():   # NaN fill: all ones (a NaN of every float type)
          data[~ok] = 0xFF
        offs = (int(d[lane]) + np.arange(by * bx * esz, dtype=np.uint64))
        if f["span"]:
          offs = offs ^ (((offs >> np.uint64(7)) & np.uint64(f["span"] // 16 - 1)) << np.uint64(4))
        c.shared._flat(offs, np.full(offs.size, lane), 1, "cp.async.bulk.tensor shared write")   # faults now
        b.copies.append((offs, int(lane), data.reshape(-1)))
    ins.fn = fn
