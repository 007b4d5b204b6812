"""Run a schedule: allocate buffers (reusing intermediates' memory once they are dead), compile, launch."""
from __future__ import annotations
import sys, threading, time
from baregrad import knobs, helpers
from baregrad.helpers import DEBUG, Progress
from baregrad.hal import Buffer, Device
from baregrad.engine.schedule import ScheduleItem
from baregrad.engine.graph import BufRef
from baregrad.engine.runner import compile_ast, cached_runner
from baregrad.ir.sint import unbind_ast
from baregrad.ir.dtype import dtypes

# observers of executed items (the jit captures through this): one may have `thread` (the thread recording; absent or
# None: it sees every thread's work) and `interleaved` (set when another thread launched work while it recorded: the
# recording is not the function's alone)
capturing: list = []

def _observe(runner: object, it: ScheduleItem) -> None:
  """Hand an executed item to the captures of this thread (runner None: a copy); tell the others it ran."""
  me = threading.get_ident()
  for c in capturing:
    t = getattr(c, "thread", None)
    if t is not None and t != me: c.interleaved = True
    elif runner is None: c.add_copy(it)
    else: c.add_kernel(runner, it)

ARENA_ALIGN = 256   # bytes: every intermediate's offset in its arena (a cache line; the alignment GPU loads assume)

def plan_memory(items: list[ScheduleItem], keep: set[int]) -> dict[int, tuple[BufRef, int]]:
  """Intermediate buffers (made by this schedule and not in keep) are placed in one arena per device, at offsets
  where their lifetimes do not overlap: returns, for each intermediate BufRef id, (its arena, byte offset).

  Each buffer takes the lowest offset free for its lifetime (first fit), so the arena stays near the largest set of
  buffers live at once. (Sharing only between buffers of one size, a model whose layers all differ in size shared
  little: ResNet-50 at batch 1 held 130.5 MB at its peak, 109.8 MB with the arena, 97.5 of them weights.)"""
  first: dict[int, int] = {}
  last: dict[int, int] = {}
  refs: dict[int, list[BufRef]] = {}
  for i, it in enumerate(items):
    for b in it.bufs:
      sid = b.storage.id
      first.setdefault(sid, i)
      last[sid] = i
      if b not in refs.setdefault(sid, []): refs[sid].append(b)
  # only memory this schedule itself allocates can be placed: a buffer that already holds data (a leaf, a tensor
  # realized earlier and still referenced by the graph) is left where it is, as is any version the caller keeps
  planned = [sid for sid, rs in refs.items() if all(r.buf is None and r.id not in keep for r in rs)
             and items[first[sid]].bufs[0].storage.id == sid]   # (first written, as an item's output)
  by_dev: dict[str, list[int]] = {}
  for sid in planned: by_dev.setdefault(refs[sid][0].device, []).append(sid)
  assign: dict[int, tuple[BufRef, int]] = {}
  for dev, sids in by_dev.items():
    if len(sids) < 2: continue   # nothing to share
    live: list[tuple[int, int, int]] = []   # (offset, end offset, last item) of the buffers placed so far
    place: dict[int, int] = {}
    size = 0
    for sid in sorted(sids, key=lambda s: first[s]):
      live = [x for x in live if x[2] >= first[sid]]
      r = refs[sid][0]
      need = -(-(r.size * r.dtype.itemsize) // ARENA_ALIGN) * ARENA_ALIGN
      off = 0
      for lo, hi, _ in sorted(live):
        if off + need <= lo: break
        off = max(off, hi)
      place[sid], size = off, max(size, off + need)
      live.append((off, off + need, last[sid]))
    arena = BufRef(dev, size, dtypes.uint8)
    for sid in sids:
      for r in refs[sid]: assign[r.id] = (arena, place[sid])
  return assign

# a schedule that allocates at least this much is checked against the memory its devices have left before it runs
CHECK_BYTES = 256 << 20

def check_memory(items: list[ScheduleItem], assign: dict[int, tuple[BufRef, int]]) -> None:
  """Raise OutOfMemory before anything runs when the buffers the schedule allocates (after the memory plan) exceed
  what a device can still give: a model too large for the machine fails with the size it needed, not half way."""
  need: dict[str, int] = {}
  seen: set[int] = set()
  for it in items:
    for b in it.bufs:
      if b.buf is None and b.storage.id not in seen:
        seen.add(b.storage.id)
        if b.id not in assign: need[b.device] = need.get(b.device, 0) + b.size * b.dtype.itemsize
  for arena in {id(a): a for a, _ in assign.values()}.values(): need[arena.device] = need.get(arena.device, 0) + arena.size
  for dev, n in need.items():
    if n < CHECK_BYTES: continue
    alloc = Device[dev].allocator
    if (avail := alloc.available()) is not None and n > avail:
      from baregrad.hal.errors import OutOfMemory
      raise OutOfMemory(dev, n, alloc.mem_used, f"the {sum(it.kind == 'kernel' for it in items)} kernels of this schedule need "
                        f"{n} bytes for their buffers and the device has {avail} bytes available: nothing was run")

def copy_buffer(dst: Buffer, src: Buffer) -> bool:
  """Copy src into dst (buffers of two devices): queued on both devices' queues where the destination can (each waits
  on the other's signals: no host wait; True), else through the host: wait for the source, copy out, copy in."""
  if peer := bool(not knobs.get("NO_PEER_COPY") and Device[dst.device].copy_from(dst, src)): pass
  else:
    Device[src.device].synchronize()
    data = src.copyout(memoryview(bytearray(src.nbytes)))
    dst.copyin(data)
  if DEBUG() >= 2: print(f"*** copy {src.device} -> {dst.device} {src.nbytes} bytes{' (queued, peer link)' if peer else ''}", file=sys.stderr)
  return peer

def run_schedule(items: list[ScheduleItem], keep: set[int] | None = None) -> None:
  if helpers.viz_sink is not None: helpers.viz_sink("schedule", items=items)
  # one item has no intermediate whose memory another could take
  assign = plan_memory(items, keep or set()) if len(items) > 1 and not knobs.get("NO_MEMPLAN") else {}
  check_memory(items, assign)
  bar: Progress | None = None  # made at the first kernel that is not compiled yet: shows if compiles take > 1 s
  ready, compiled, t_compile = 0, 0, 0.0
  for it in items:
    out = it.bufs[0]
    if out.buf is None and out.id in assign:
      arena, off = assign[out.id]
      out.buf = Buffer(out.device, out.size, out.dtype, base=arena.ensure(), offset=off)
    for b in it.bufs: b.ensure()
    if it.kind == "copy":
      dst, src = it.bufs[0].buf, it.bufs[1].buf
      assert dst is not None and src is not None   # (ensured above)
      copy_buffer(dst, src)
      if capturing: _observe(None, it)
      continue
    if out.size == 0: continue  # nothing to compute (a GPU can't launch an empty grid)
    # (type: ignore: a kernel item has its AST, and its buffers are ensured above)
    # bound variables (symbolic sizes, ir/sint.py) leave the AST: one kernel for every value, the values passed
    ast, vals = unbind_ast(it.ast)  # type: ignore[arg-type]
    if (runner := cached_runner(ast, out.device)) is None:
      if bar is None:
        bar = Progress(total=sum(it.kind == "kernel" for it in items), desc="compile", unit="kernels", delay=1.0)
        bar.n = ready  # the kernels before it were compiled already
      t0 = time.perf_counter()
      with bar.step(): runner = compile_ast(ast, out.device)
      compiled, t_compile = compiled + 1, t_compile + time.perf_counter() - t0
    elif bar is not None: bar.update(1)
    else: ready += 1
    runner([b.buf for b in it.bufs], vals or None)  # type: ignore[misc]
    if capturing: _observe(runner, it)
  if bar is not None: bar.close()
  if compiled and DEBUG() >= 1:   # (what a model's first run spends before its kernels run)
    print(f"*** compiled {compiled} of {len(items)} kernels in {t_compile:.2f} s (code generation and compiler, "
          f"compile cache included)", file=sys.stderr)
