"""The PTX of a TMA pipeline (codegen/tma.py's BARRIERs): tensor maps built on the device, mbarriers, tensor bulk
copies. Used by PTXRenderer.render; each function emits through the renderer's `emit` and `reg`.

- ("tma_setup", buffers, specs), sources (mbarriers, then per map: the global buffer, the element index the tensor
  starts at): thread 0 of the block zeroes its maps' 128 bytes each in the launch's scratch (`tmap_scratch` + the
  block's linear index x maps x 128), writes every field with tensormap.replace.tile (PTX ISA 9.7.9.28; rank is the
  rank minus one, global_stride[0] the bytes between rows, element strides 1, no interleave, the 128-byte swizzle, zero
  fill), releases them to the tensormap proxy (fence.proxy.tensormap::generic.release.gpu) and acquires each
  (fence.proxy.tensormap::generic.acquire.gpu [map], 128: 9.7.12.4), and initializes the mbarriers with one arrival
  each (9.7.13.15.9); then a barrier, so every thread sees them initialized.
- ("tma_issue", bytes), sources (the tile pool, mbarriers, buffer slot, issue-or-not, then per map: the tile's element
  offset in the pool, x, y): thread 0 arrives on the slot's mbarrier expecting `bytes` (mbarrier.arrive.expect_tx,
  9.7.13.15.13) and issues each map's box into its tile (cp.async.bulk.tensor.2d ... mbarrier::complete_tx::bytes,
  9.7.9.25.5.2).
- ("tma_wait",), sources (mbarriers, slot, parity): every thread polls mbarrier.try_wait.parity until the slot's
  phase of that parity completed (9.7.13.15.16), then bar.sync.

With a producer warpgroup (the setup's `ws`): the setup also initializes the empty mbarriers (one arrival per
consumer warp, its lane 0) and emits the producer's branch (`_producer`: setmaxnreg.dec, its first thread's loop over every step,
then ret) before the consumers go on (setmaxnreg.inc); issues in the consumers' code are dropped, a wait has no
bar.sync, the end of each stage step arrives on the step's empty mbarrier (`end_step`), and every later block-wide
barrier is the consumers' named barrier 1 for their thread count (`TmaState.barrier`): the producer has left. The
kernel gets .minnctapersm 1 so ptxas gives each thread the 384-thread share of the register file at the start, which
`register_split` then moves (PTX ISA 9.7.17.1)."""
from __future__ import annotations
from typing import Any, Callable
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import UOp, Ops

TMA_PTX_VERSION = "8.3"   # tensormap.replace and fence.proxy.tensormap: PTX ISA 8.3
MAP_BYTES = 128
_FIELDS = ("box_dim", "global_dim", "element_stride")


PRODUCER_THREADS = 128
REGISTER_FILE = 65536   # 32-bit registers of an SM, all of them the one block's (.minnctapersm 1)


def register_split(consumers: int) -> tuple[int, int, int]:
  """(registers a thread starts with, the producer's after setmaxnreg.dec, the consumers' after setmaxnreg.inc) for a
  block of `consumers` + 128 threads alone on an SM: the start is the register file shared out, down to a multiple of 8
  (what ptxas gives a kernel with .maxntid and .minnctapersm 1); the producer keeps 40; the consumers take what it
  gives up, whole multiples of 8 (PTX ISA 9.7.17.1: counts in [24, 256], multiples of 8). setmaxnreg.inc waits until
  the block has released the registers it asks for, so the consumers' rise may not exceed the producer's drop: the
  kernel would hang there otherwise."""
  start = min(REGISTER_FILE // (consumers + PRODUCER_THREADS) // 8 * 8, 248)
  prod = 40
  cons = min(256, start + PRODUCER_THREADS * (start - prod) // consumers // 8 * 8)
  assert PRODUCER_THREADS * (start - prod) >= consumers * (cons - start) and cons >= start >= prod
  return start, prod, cons


class TmaState:
  """What the setup leaves for the issues: thread 0's predicate and the register holding the block's first map; with
  a producer warpgroup (`ws`): the consumers' thread count, the stage loop, its slot register."""
  def __init__(self) -> None:
    self.first: str | None = None
    self.maps: list[str] = []   # each map's address (a register: a tensor copy's map operand takes no offset)
    self.ws: tuple | None = None
    self.consumers = 0
    self.stage: UOp | None = None
    self.bars: str | None = None
    self.slot: str | None = None

  def barrier(self) -> str:
    """A block-wide barrier: after the producer warpgroup left, the consumers' own (named barrier 1, PTX ISA 9.7.13.1)."""
    return f"bar.sync 1, {self.consumers};" if self.ws else "bar.sync 0;"


def _i32(r: Any, u: UOp, reg: Callable, emit: Callable, have: str | None = None) -> str:
  """The 32-bit register of integer u (its register `have`, or r[u]), narrowed where u is 64-bit."""
  v = r[u] if have is None else have
  if u.dtype.itemsize == 4: return v
  x = reg(dtypes.int32)
  emit(f"cvt.u32.u64 {x}, {v};")
  return x


def _bar_addr(r: Any, bars: UOp, slot: UOp, reg: Callable, emit: Callable) -> str:
  s, a = reg(dtypes.uint32), reg(dtypes.uint32)
  emit(f"shl.b32 {s}, {_i32(r, slot, reg, emit)}, 3;")
  emit(f"add.u32 {a}, {r[bars]}, {s};")
  return a


def setup(u: UOp, r: Any, reg: Callable, emit: Callable, label: Callable[[str], None], st: TmaState, param: str, n: int,
          expr: Callable[[UOp, dict], str]) -> None:
  _, nbuf, specs, ws = u.arg
  bars, rest = u.src[0], u.src[1:]
  tid = [reg(dtypes.uint32) for _ in range(3)]
  for x, d in zip(tid, "xyz"): emit(f"mov.u32 {x}, %tid.{d};")
  emit(f"or.b32 {tid[0]}, {tid[0]}, {tid[1]};"); emit(f"or.b32 {tid[0]}, {tid[0]}, {tid[2]};")
  first = reg(dtypes.bool)
  emit(f"setp.eq.u32 {first}, {tid[0]}, 0;")
  # the block's linear index: (ctaid.z * nctaid.y + ctaid.y) * nctaid.x + ctaid.x
  c = [reg(dtypes.uint32) for _ in range(5)]
  for x, sr in zip(c, ("%ctaid.x", "%ctaid.y", "%ctaid.z", "%nctaid.x", "%nctaid.y")): emit(f"mov.u32 {x}, {sr};")
  emit(f"mad.lo.u32 {c[2]}, {c[2]}, {c[4]}, {c[1]};"); emit(f"mad.lo.u32 {c[2]}, {c[2]}, {c[3]}, {c[0]};")
  sc, off, maps = reg(dtypes.uint64), reg(dtypes.uint64), reg(dtypes.uint64)
  emit(f"ld.param.u64 {sc}, [{param}];")
  emit(f"cvta.to.global.u64 {sc}, {sc};")
  emit(f"mul.wide.u32 {off}, {c[2]}, {len(specs) * MAP_BYTES};")
  emit(f"add.s64 {maps}, {sc}, {off};")
  st.first, st.maps = first, [maps]
  for i in range(1, len(specs)):
    st.maps.append(reg(dtypes.uint64))
    emit(f"add.s64 {st.maps[i]}, {maps}, {i * MAP_BYTES};")
  emit(f"@!{first} bra $Ltma_setup{n};")
  z = reg(dtypes.uint32)
  emit(f"mov.b32 {z}, 0;")
  for j in range(len(specs) * MAP_BYTES // 16): emit(f"st.global.v4.b32 [{maps}+{16 * j}], {{{z}, {z}, {z}, {z}}};")
  for i, (elemtype, esz, gd0, gd1, pitch, bx, by) in enumerate(specs):
    buf, base = rest[2 * i], rest[2 * i + 1]
    m = st.maps[i]
    ga, t = reg(dtypes.uint64), reg(dtypes.uint64)
    if base.dtype.itemsize == 8: emit(f"mul.lo.s64 {t}, {r[base]}, {esz};")
    else: emit(f"mul.wide.s32 {t}, {r[base]}, {esz};")
    emit(f"add.s64 {ga}, {r[buf]}, {t};")
    rep = "tensormap.replace.tile"
    emit(f"{rep}.global_address.global.b1024.b64 [{m}], {ga};")
    emit(f"{rep}.rank.global.b1024.b32 [{m}], 1;")
    for f, vals in zip(_FIELDS, ((bx, by), (gd0, gd1), (1, 1))):
      for o, v in enumerate(vals): emit(f"{rep}.{f}.global.b1024.b32 [{m}], {o}, {v};")
    emit(f"{rep}.global_stride.global.b1024.b64 [{m}], 0, {pitch};")
    for f, v in (("elemtype", elemtype), ("interleave_layout", 0), ("swizzle_mode", 3), ("fill_mode", 0)):
      emit(f"{rep}.{f}.global.b1024.b32 [{m}], {v};")
  emit("fence.proxy.tensormap::generic.release.gpu;")
  for m in st.maps: emit(f"fence.proxy.tensormap::generic.acquire.gpu [{m}], 128;")
  b = reg(dtypes.uint32)
  for j in range(nbuf * (2 if ws else 1)):   # full: one arrival (the issuing thread's); empty: each consumer warp's
    emit(f"add.u32 {b}, {r[bars]}, {8 * j};")
    emit(f"mbarrier.init.shared::cta.b64 [{b}], {1 if j < nbuf else ws[0] // 32};")
  label(f"$Ltma_setup{n}:")
  emit("bar.sync 0;")
  st.bars = r[bars]
  if ws: _producer(u, r, reg, emit, label, st, n, expr)


def _producer(u: UOp, r: Any, reg: Callable, emit: Callable, label: Callable[[str], None], st: TmaState, n: int,
              expr: Callable[[UOp, dict], str]) -> None:
  """The producer warpgroup (threads `consumers` .. +127): registers down, then its first thread copies every step t
  into buffer t % S, after waiting for the consumers to be done with the step t - S that buffer held (the empty
  mbarrier's phase t // S - 1), and leaves; the consumers take registers up and go on."""
  nc, pv, slot, per, nstage, nb, copies = u.arg[3]
  pool = u.src[-1]
  st.ws, st.consumers = u.arg[3], nc
  tx, prod, el = reg(dtypes.uint32), reg(dtypes.bool), reg(dtypes.bool)
  emit(f"mov.u32 {tx}, %tid.x;")
  emit(f"setp.ge.u32 {prod}, {tx}, {nc};")
  emit(f"@!{prod} bra $Lws_consumer{n};")
  _, preg, creg = register_split(nc)
  emit(f"setmaxnreg.dec.sync.aligned.u32 {preg};")
  emit(f"setp.ne.u32 {el}, {tx}, {nc};")
  emit(f"@{el} bra $Lws_done{n};")
  t = reg(pv.dtype)
  emit(f"mov.u32 {t}, 0;" if pv.dtype.itemsize == 4 else f"mov.u64 {t}, 0;")
  label(f"$Lws_loop{n}:")
  memo: dict = {pv: t}
  sl = _i32(r, slot, reg, emit, expr(slot, memo))
  q, par, e = reg(dtypes.bool), reg(dtypes.uint32), reg(dtypes.uint32)
  t32 = _i32(r, pv, reg, emit, t)
  emit(f"setp.lt.u32 {q}, {t32}, {nb};")
  emit(f"@{q} bra $Lws_nowait{n};")
  emit(f"div.u32 {par}, {t32}, {nb};")
  emit(f"add.u32 {par}, {par}, 1;")
  emit(f"and.b32 {par}, {par}, 1;")
  emit(f"add.u32 {e}, {sl}, {nb};")
  emit(f"shl.b32 {e}, {e}, 3;")
  emit(f"add.u32 {e}, {e}, {st.bars};")
  w = reg(dtypes.bool)
  label(f"$Lws_wait{n}:")
  emit(f"mbarrier.try_wait.parity.shared::cta.b64 {w}, [{e}], {par};")
  emit(f"@!{w} bra $Lws_wait{n};")
  label(f"$Lws_nowait{n}:")
  f = reg(dtypes.uint32)
  emit(f"shl.b32 {f}, {sl}, 3;")
  emit(f"add.u32 {f}, {f}, {st.bars};")
  emit(f"mbarrier.arrive.expect_tx.shared::cta.b64 _, [{f}], {_step_bytes(u)};")
  esz = pool.dtype.base.itemsize  # type: ignore[attr-defined]
  for i, mi in enumerate(copies):
    m = st.maps[mi]
    off, x, y = (_i32(r, v, reg, emit, expr(v, memo)) for v in per[3 * i:3 * i + 3])
    d, tt = reg(dtypes.uint32), reg(dtypes.uint32)
    emit(f"mul.lo.u32 {tt}, {off}, {esz};")
    emit(f"add.u32 {d}, {r[pool]}, {tt};")
    emit(f"cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [{d}], [{m}, {{{x}, {y}}}], [{f}];")
  emit(f"add.u32 {t}, {t}, 1;" if pv.dtype.itemsize == 4 else f"add.u64 {t}, {t}, 1;")
  emit(f"setp.lt.u32 {q}, {_i32(r, pv, reg, emit, t)}, {nstage};")
  emit(f"@{q} bra $Lws_loop{n};")
  label(f"$Lws_done{n}:")
  emit("ret;")
  label(f"$Lws_consumer{n}:")
  emit(f"setmaxnreg.inc.sync.aligned.u32 {creg};")


def _step_bytes(u: UOp) -> int:
  """The bytes of one step's boxes (each copy's map's box)."""
  return sum(u.arg[2][mi][1] * u.arg[2][mi][5] * u.arg[2][mi][6] for mi in u.arg[3][6])


def issue(u: UOp, r: Any, reg: Callable, emit: Callable, label: Callable[[str], None], st: TmaState, n: int) -> None:
  if st.first is None: raise ValueError("PTX: a tma_issue before the tma_setup")
  if st.ws: return   # the producer warpgroup issues every step
  pool, bars, slot, ok = u.src[:4]
  copies = u.arg[2]
  per = u.src[4:4 + 3 * len(copies)]
  p = st.first
  if not (ok.op is Ops.CONST and ok.arg):
    p = reg(dtypes.bool)
    emit(f"and.pred {p}, {st.first}, {r[ok]};")
  emit(f"@!{p} bra $Ltma_issue{n};")
  bar = _bar_addr(r, bars, slot, reg, emit)
  emit(f"mbarrier.arrive.expect_tx.shared::cta.b64 _, [{bar}], {u.arg[1]};")
  esz = pool.dtype.base.itemsize  # type: ignore[attr-defined]
  for i, mi in enumerate(copies):
    m, (off, x, y) = st.maps[mi], per[3 * i:3 * i + 3]
    d, t = reg(dtypes.uint32), reg(dtypes.uint32)
    emit(f"mul.lo.u32 {t}, {_i32(r, off, reg, emit)}, {esz};")
    emit(f"add.u32 {d}, {r[pool]}, {t};")
    emit(f"cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [{d}], [{m}, "
         f"{{{_i32(r, x, reg, emit)}, {_i32(r, y, reg, emit)}}}], [{bar}];")
  label(f"$Ltma_issue{n}:")


def wait(u: UOp, r: Any, reg: Callable, emit: Callable, label: Callable[[str], None], st: TmaState, n: int) -> None:
  bars, slot, parity = u.src[:3]
  bar = _bar_addr(r, bars, slot, reg, emit)
  par, p = _i32(r, parity, reg, emit), reg(dtypes.bool)
  label(f"$Ltma_wait{n}:")
  emit(f"mbarrier.try_wait.parity.shared::cta.b64 {p}, [{bar}], {par};")
  emit(f"@!{p} bra $Ltma_wait{n};")
  if st.ws: st.stage, st.slot = u.src[3], _i32(r, slot, reg, emit)   # (end_step releases the buffer)
  else: emit("bar.sync 0;")


def end_step(rng: UOp, reg: Callable, emit: Callable, st: TmaState) -> None:
  """At the end of a consumer's stage step (its wgmmas waited for already: wgmma.wait_group is warpgroup-wide, so every
  lane of the warp is past it): lane 0 of each consumer warp arrives on the buffer's empty mbarrier (9.7.13.15.13),
  letting the producer refill it."""
  if not st.ws or rng is not st.stage or st.slot is None or st.bars is None: return
  e, ln, p = reg(dtypes.uint32), reg(dtypes.uint32), reg(dtypes.bool)
  emit(f"add.u32 {e}, {st.slot}, {st.ws[5]};")
  emit(f"shl.b32 {e}, {e}, 3;")
  emit(f"add.u32 {e}, {e}, {st.bars};")
  emit(f"mov.u32 {ln}, %laneid;")
  emit(f"setp.eq.u32 {p}, {ln}, 0;")
  emit(f"@{p} mbarrier.arrive.shared::cta.b64 _, [{e}];")
