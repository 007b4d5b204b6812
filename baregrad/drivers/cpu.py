"""CPU device on the HCQ core: two hardware queues (compute, copy), each a worker thread that reads
encoded command buffers from memory, so ordering, signals, the timeline and patching run for real.

Kernel ABI: void NAME(const uint64_t *args, int64_t start, int64_t end); args = buffer addresses,
then int64 variable values; the kernel covers [start, end) of global_size[0]."""
from __future__ import annotations
import atexit, ctypes, errno, itertools, mmap, os, threading, time
from array import array
from collections import deque
from typing import Any, Hashable, Sequence
from baregrad.helpers import DEBUG, c_array
from baregrad.hal import Device, OutOfMemory, Compiler, CompileError, profile
from baregrad.hcq import HCQArgsState, HCQBuffer, HCQDevice, HCQProgram, HCQAllocator, HWQueue, HCQSignal

# ---------------------------------------------------------------- host memory (anonymous mmap)
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype, _libc.mmap.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.restype, _libc.munmap.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t]
PAGE = mmap.PAGESIZE
_MAP_FAILED = ctypes.c_void_p(-1).value
_EXITING = False  # at interpreter exit nothing is drained: a stuck queue must not stall exit in __del__

@atexit.register
def _at_exit() -> None:
  global _EXITING
  _EXITING = True

def _phys_bytes() -> int:
  try: return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
  except (ValueError, OSError): return 1 << 62

def host_map(size: int) -> int:
  """Page-aligned zeroed anonymous memory; OSError(ENOMEM) if the kernel refuses."""
  addr = _libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
  if addr in (None, _MAP_FAILED):
    e = ctypes.get_errno()
    raise OSError(e, f"mmap of {size} bytes failed: {os.strerror(e)}")
  return addr

def host_unmap(addr: int, size: int) -> None:
  if _libc.munmap(addr, size) != 0: raise OSError(ctypes.get_errno(), f"munmap({addr:#x}, {size}) failed")

HUGE, MADV_HUGEPAGE = 2 << 20, 14   # x86-64 and arm64 transparent huge pages; madvise(2)
_libc.madvise.restype, _libc.madvise.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

def host_map_huge(size: int) -> int:
  """Like host_map, 2 MiB aligned and marked for transparent huge pages (where the kernel's THP mode is madvise, as
  NumPy does for its large arrays): a matmul walking rows of a large matrix then misses the TLB once per 2 MiB, not
  once per 4 KiB page. `size` must be a multiple of HUGE; free with host_unmap(addr, size)."""
  raw = host_map(size + HUGE)
  addr = (raw + HUGE - 1) // HUGE * HUGE
  if addr > raw: host_unmap(raw, addr - raw)
  if (tail := raw + size + HUGE - (addr + size)) > 0: host_unmap(addr + size, tail)
  _libc.madvise(addr, size, MADV_HUGEPAGE)  # advice only: an error (THP off) leaves ordinary pages
  return addr

def sig_addr(c: ctypes.c_uint64) -> int: return ctypes.addressof(c)

def _pages(size: int) -> int:
  if size >= HUGE: return (size + HUGE - 1) // HUGE * HUGE
  return max(PAGE, (size + PAGE - 1) // PAGE * PAGE)

class CPUAllocator(HCQAllocator):
  def _alloc(self, size: int, options: Hashable | None) -> HCQBuffer:
    if size > _phys_bytes():
      raise OutOfMemory(self.device, size, self.mem_used, f"the machine has {_phys_bytes()} bytes of physical memory")
    try: addr = host_map_huge(_pages(size)) if size >= HUGE else host_map(_pages(size))
    except OSError as e:
      if e.errno != errno.ENOMEM: raise
      raise OutOfMemory(self.device, size, self.mem_used, f"mmap: {e.strerror}") from None
    return HCQBuffer(addr, size, addr)
  def _free(self, opaque: HCQBuffer, size: int, options: Hashable | None) -> None:
    self.dev.synchronize()  # a queued kernel or copy may still touch it (no-op once the device is closed)
    host_unmap(opaque.va_addr, _pages(size))
  # Device memory is host memory: while nothing is queued or running on the device (its timeline has reached the last
  # value submitted), a copy is a memmove here, not a copy command through a staging buffer and a wait on its signal
  # (a 400 KB batch took ~370 us that way, most of it thread handoffs). With work in flight the copy queue orders it.
  # PROFILE=1 keeps the copy commands (their timestamps are the trace's copy events).
  def _idle(self) -> bool:
    dev = self.dev
    return not profile.ON and dev.timeline_signal.value >= dev.timeline_value - 1
  def _copyin(self, dest: HCQBuffer, src: memoryview) -> None:
    with self._copy_lock:
      if self._idle():
        ctypes.memmove(dest.va_addr, c_array(ctypes.c_char, src.nbytes).from_buffer_copy(src) if src.readonly else
                       c_array(ctypes.c_char, src.nbytes).from_buffer(src), src.nbytes)
        return
      self._copyin_locked(dest, src)
  def _copyout(self, dest: memoryview, src: HCQBuffer) -> None:
    with self._copy_lock:
      if dest.nbytes <= self.DIRECT_READ and self._idle():
        if dest.nbytes: ctypes.memmove(c_array(ctypes.c_char, dest.nbytes).from_buffer(dest), src.va_addr, dest.nbytes)
        return
      self._copyout_locked(dest, src)
  DIRECT_READ = 1 << 20   # bytes; larger reads go through the copy queue (staged, overlapped)

# ---------------------------------------------------------------- command encoding (32-bit words)
# header: op << 16 | length in words (header included); 64-bit fields are (lo, hi)
OP_WAIT, OP_SIGNAL, OP_TIMESTAMP, OP_EXEC, OP_COPY, OP_BARRIER = 1, 2, 3, 4, 5, 6
OP_NAMES = {OP_WAIT: "WAIT", OP_SIGNAL: "SIGNAL", OP_TIMESTAMP: "TIMESTAMP", OP_EXEC: "EXEC", OP_COPY: "COPY", OP_BARRIER: "BARRIER"}
# field layout per op: (name, nwords) after the header
LAYOUT: dict[int, tuple[tuple[str, int], ...]] = {
  OP_WAIT: (("addr", 2), ("value", 2)), OP_SIGNAL: (("addr", 2), ("value", 2)), OP_TIMESTAMP: (("addr", 2),),
  OP_EXEC: (("fxn", 2), ("args", 2), ("gx", 1), ("gy", 1), ("gz", 1), ("lx", 1), ("ly", 1), ("lz", 1), ("min_chunk", 1)),
  OP_COPY: (("dest", 2), ("src", 2), ("nbytes", 2)), OP_BARRIER: ()}
_SIZE = {op: 1 + sum(n for _, n in lay) for op, lay in LAYOUT.items()}
_FIELDS = {op: {name: (1 + sum(k for _, k in lay[:i]), n) for i, (name, n) in enumerate(lay)} for op, lay in LAYOUT.items()}
_M32 = 0xFFFFFFFF
_EXEC_WORDS = _SIZE[OP_EXEC]
_EXEC_HDR, _BARRIER_HDR = (OP_EXEC << 16) | _SIZE[OP_EXEC], (OP_BARRIER << 16) | _SIZE[OP_BARRIER]

def _chain_runner() -> Any:
  from baregrad.drivers.cpu_chain import chain_runner
  f = _FIELDS[OP_EXEC]
  return chain_runner(_EXEC_HDR, _BARRIER_HDR, _EXEC_WORDS, f["fxn"][0], f["args"][0], f["gx"][0])

def _enc(op: int, *vals: int) -> tuple[list[int], dict[str, tuple[int, int]]]:
  """Words for one command; vals in LAYOUT order. Out-of-range values raise when they reach the uint32 array."""
  words = [(op << 16) | _SIZE[op]]
  for (name, n), v in zip(LAYOUT[op], vals):
    if n == 2: words += (v & _M32, v >> 32)
    else: words.append(v)
  return words, _FIELDS[op]

def decode_one(ws: Sequence[int], p: int) -> tuple[int, dict[str, int], int]:
  """Decode the command at word p: (op, fields, next p). Raises ValueError on a malformed header."""
  op, n = ws[p] >> 16, ws[p] & 0xFFFF
  if op not in LAYOUT or n != _SIZE[op] or p + n > len(ws):
    raise ValueError(f"bad command header {ws[p]:#010x} at word {p}: op {op}, length {n}")
  out, q = {}, p + 1
  for name, k in LAYOUT[op]:
    out[name] = ws[q] | (ws[q + 1] << 32) if k == 2 else ws[q]
    q += k
  return op, out, p + n

def decode_words(ws: Sequence[int], mark: int | None = None) -> str:
  """The command buffer in words, one line per command; `mark` (a word offset) gets an arrow."""
  lines, p, i = [], 0, 0
  while p < len(ws):
    try: op, f, nxt = decode_one(ws, p)
    except ValueError as e: lines.append(f"  [{i:3d}] @{p:5d} {e}"); break
    fs = " ".join(f"{k}={v:#x}" if k in ("addr", "dest", "src", "fxn", "args") else f"{k}={v}" for k, v in f.items())
    lines.append(f"{'->' if mark == p else '  '}[{i:3d}] @{p:5d} {OP_NAMES[op]:<9s} {fs}")
    p, i = nxt, i + 1
  return "\n".join(lines)

class CPUArgsState(HCQArgsState):
  def __init__(self, cpu_addr: int, va_addr: int, prg: Any, bufs: Sequence[Any], vals: Sequence[int]) -> None:
    super().__init__(cpu_addr, va_addr, prg, bufs, vals)
    self.slots = c_array(ctypes.c_uint64, len(self.bufs) + len(self.vals)).from_address(cpu_addr)
    for i, b in enumerate(self.bufs): self.slots[i] = b.va_addr
    for i, v in enumerate(self.vals): self.slots[len(self.bufs) + i] = v & 0xFFFFFFFFFFFFFFFF  # int64, two's complement
  def update_buffer(self, i: int, addr: int) -> None:
    if not 0 <= i < len(self.bufs): raise IndexError(f"buffer {i} out of range: kernel has {len(self.bufs)} buffers")
    self.slots[i] = addr
  def update_var(self, i: int, value: int) -> None:
    if not 0 <= i < len(self.vals): raise IndexError(f"var {i} out of range: kernel has {len(self.vals)} vars")
    self.slots[len(self.bufs) + i] = value & 0xFFFFFFFFFFFFFFFF

class CPUComputeQueue(HWQueue):
  engine = "compute"
  def _enc_wait(self, addr: int, value: int) -> Any: return _enc(OP_WAIT, addr, value)
  def _enc_signal(self, addr: int, value: int) -> Any: return _enc(OP_SIGNAL, addr, value)
  def _enc_timestamp(self, addr: int) -> Any: return _enc(OP_TIMESTAMP, addr)
  def _enc_copy(self, dest: int, src: int, nbytes: int) -> Any: return _enc(OP_COPY, dest, src, nbytes)
  def _enc_memory_barrier(self) -> Any: return _enc(OP_BARRIER)
  def _enc_exec(self, prg: Any, args_state: HCQArgsState, gs: tuple[int, int, int], ls: tuple[int, int, int]) -> Any:
    if gs[1] != 1 or gs[2] != 1: raise ValueError(f"the CPU runs one parallel axis: global_size must be (n, 1, 1), got {gs}")
    return _enc(OP_EXEC, prg.fxn_addr, args_state.va_addr, *gs, *ls, getattr(prg, "min_chunk", 0))
  def update_exec(self, i: int, global_size: Sequence[int] | None = None, local_size: Sequence[int] | None = None) -> HWQueue:
    if global_size is not None and tuple(global_size)[1:] not in ((), (1,), (1, 1)):
      raise ValueError(f"the CPU runs one parallel axis: global_size must be (n, 1, 1), got {tuple(global_size)}")
    return super().update_exec(i, global_size, local_size)
  def _submit(self, dev: Any) -> None: dev.engines[self.engine].submit(self.words)
  def decode(self) -> str: return decode_words(self.words)

class CPUCopyQueue(CPUComputeQueue):
  engine = "copy"
  def _enc_exec(self, *a: Any) -> Any: raise NotImplementedError("the copy queue cannot execute kernels; use the compute queue")

# ---------------------------------------------------------------- thread pool for exec
_KFN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)

class _Job:
  """One kernel launch split into chunks of its parallel axis, taken by whichever thread is free: a thread the OS
  wakes late (a loaded machine) finds the chunks done by the others instead of holding the launch up."""
  __slots__ = ("fxn", "args", "bounds", "next", "left", "lock", "done")
  def __init__(self, fxn: Any, args: int, bounds: list[int]) -> None:
    self.fxn, self.args, self.bounds = fxn, args, bounds
    self.next, self.left = itertools.count(), len(bounds) - 1   # next(count) is atomic under the GIL
    self.lock, self.done = threading.Lock(), threading.Event()
  def work(self) -> int:
    """Run chunks until none are left; returns the items this thread ran."""
    n, last = 0, len(self.bounds) - 1
    while (i := next(self.next)) < last:
      s, e = self.bounds[i], self.bounds[i + 1]
      try: self.fxn(self.args, s, e)
      finally:
        n += e - s
        with self.lock:
          self.left -= 1
          if self.left == 0: self.done.set()
    return n

class _PoolThread(threading.Thread):
  def __init__(self, pool: ThreadPool, i: int) -> None:
    super().__init__(name=f"baregrad-cpu-pool-{i}", daemon=True)
    self.pool, self.go = pool, threading.Semaphore(0)
  def run(self) -> None:
    while not self.pool.stopped:
      if not self.go.acquire(timeout=0.5): continue
      if (job := self.pool.job) is not None: job.work()

class ThreadPool:
  """Persistent threads; the calling (queue) thread works on the launch too.

  Handing a chunk to another thread costs tens of µs in CPython (lock handoffs, the GIL), so with no
  cost hint (min_chunk=0) the pool learns each kernel's ns per item from the chunks it runs itself and
  uses only as many threads as have at least `split_ns` of work each. min_chunk=k>0 forces chunks of >= k items.
  The parallel axis is cut into a few chunks per thread, taken dynamically (see _Job)."""
  CHUNKS_PER_THREAD = 4
  NATIVE_SPLIT_NS = 10_000   # a native handoff costs ~2 µs (a sleeping worker ~30 µs, while the caller works on)
  def __init__(self, n: int, split_ns: int = 50_000, native: bool = False) -> None:
    self.n, self.stopped, self.split_ns = max(1, n), False, split_ns
    self.cost: dict[int, float] = {}  # kernel address -> measured ns per item
    self.job: _Job | None = None
    # native kernels (run(..., addr=)) go to native threads where they can be built (drivers/cpu_pool.py)
    self.native = None
    if native and self.n > 1:
      from baregrad.drivers.cpu_pool import native_pool
      self.native = native_pool(self.n)
      if self.native is not None: self.split_ns = min(split_ns, self.NATIVE_SPLIT_NS)
    self.threads = [_PoolThread(self, i) for i in range(self.n - 1)] if self.native is None else []
    for t in self.threads: t.start()
  def chunks(self, key: int, total: int, min_chunk: int) -> int:
    """How many threads a launch of `total` items is worth."""
    if total < 2 or self.n == 1: return 1
    if min_chunk > 0: return max(1, min(self.n, total // min_chunk))
    est = self.cost.get(key)
    if est is None or self.split_ns <= 0: return min(self.n, total)  # unknown cost: assume it is worth splitting
    return max(1, min(self.n, total, int(total * est) // self.split_ns))
  def nchunks(self, total: int, nthreads: int, min_chunk: int) -> int:
    """The chunks a launch split over `nthreads` is cut into: a few per thread, none under min_chunk items."""
    return min(total, self.CHUNKS_PER_THREAD * nthreads, total // min_chunk if min_chunk > 0 else total)
  def learn(self, key: int, per_item: float) -> None:
    """Fold a measured ns per item (one thread's) into the kernel's estimate; a sample counts at most 4x the estimate
    (see the queue's inline path: one preempted run must not move a tiny kernel off it)."""
    old = self.cost.get(key)
    self.cost[key] = per_item if old is None else 0.5 * (old + min(per_item, 4 * old))
  def run(self, key: int, fxn: Any, args: int, total: int, min_chunk: int = 0, addr: int | None = None) -> None:
    """fxn(args, s, e) over [0, total); `addr`: fxn is native code at that address (the native pool may run it)."""
    nthreads = self.chunks(key, total, min_chunk)
    st = time.perf_counter_ns()
    if nthreads <= 1:
      if total: fxn(args, 0, total)
      mine = total
    elif addr is not None and self.native is not None:
      self.native.run(addr, args, total, self.nchunks(total, nthreads, min_chunk))
      # ns per item of one thread: the launch's time spread over the threads that shared it
      self.learn(key, (time.perf_counter_ns() - st) * nthreads / total)
      return
    else:
      nchunks = self.nchunks(total, nthreads, min_chunk)
      job = _Job(fxn, args, [total * i // nchunks for i in range(nchunks + 1)])
      self.job = job
      for t in self.threads[:nthreads - 1]: t.go.release()
      mine = job.work()
    if mine: self.learn(key, (time.perf_counter_ns() - st) / mine)
    if nthreads > 1:
      while not job.done.wait(timeout=1.0):
        if self.stopped: return
  def stop(self) -> None:
    self.stopped = True
    self.job = None
    for t in self.threads: t.go.release()
    if self.native is not None: self.native.stop()

# ---------------------------------------------------------------- a hardware queue: ring + doorbell + worker
class QueueEngine:
  """Host side writes command words into a ring in memory and an (address, length) entry into a
  submission ring, then rings the doorbell (a Condition). The worker thread reads both from memory."""
  def __init__(self, dev: CPUDevice, name: str, ring_bytes: int = 1 << 20, nentries: int = 4096) -> None:
    self.dev, self.name, self.ring_bytes, self.nentries = dev, name, ring_bytes, nentries
    self.ring = host_map(ring_bytes)
    # the ring as bytes: a submission is copied in by a slice assignment, which holds the GIL (ctypes.memmove gives it
    # up and takes it back, a wait of its own when another thread wants it)
    self._ring_mv = memoryview((ctypes.c_char * ring_bytes).from_address(self.ring)).cast("B")
    self.entries = (ctypes.c_uint64 * (2 * nentries)).from_address(host_map(_pages(16 * nentries)))
    self.wptr = self.rptr = 0             # submissions written by the host / finished by the worker
    self.inlined = 0                      # submissions run whole on the submitting thread (see _submit)
    self.woff = 0                         # host's write offset in the command ring (bytes)
    self.inflight: deque[tuple[int, int, int]] = deque()  # (entry index, ring offset, bytes) not yet finished
    self._bell = threading.RLock()   # the doorbell's lock, entered directly on the host's path (a Condition's with is Python)
    self.doorbell = threading.Condition(self._bell)
    self._host_lock = threading.Lock()
    self.stopped, self.fault = False, None
    self.state = "idle"
    self.cur: tuple[int, int, int] | None = None  # (addr, nwords, word offset) of the command being executed
    self._fxns: dict[int, Any] = {}
    self.pool = ThreadPool(dev.threads, int(float(os.environ.get("CPU_SPLIT_US", "50")) * 1000),
                           native=os.environ.get("CPU_NATIVE_POOL", "1") != "0") if name == "compute" else None
    # see _submit; the copy queue too: reading a loss after a step would otherwise wake its worker and wait to be woken
    # back, hundreds of µs on a busy machine for a 4-byte copy
    self.inline = os.environ.get("CPU_INLINE", "1") != "0"
    # the native runner of chains of tiny kernels (cpu_chain.py), built on first use; CPU_CHAIN=0 turns it off
    self.chain: Any = True if self.inline and self.pool is not None and os.environ.get("CPU_CHAIN", "1") != "0" else None   # True: not built yet
    self.chains = 0                       # chains run by it (one native call each)
    self.pooled_chains = 0                # of which run by the worker with big kernels on the native pool
    self.last_pooled: Any = None          # the chunk counts of the last one (per kernel)
    # (first kernel address, its args address) -> [words, the words' bytes, kernels, expected ns, uses]: see _execute
    self._chain_plans: dict[tuple[int, int], list[Any]] = {}
    self._pool_plans: dict[tuple[int, int], list[Any]] = {}   # the same for the worker's pooled chains (_pooled_chain)
    self.thread = threading.Thread(target=self._run, name=f"baregrad-cpu-{name}", daemon=True)
    self.thread.start()

  # --- host side
  direct = True   # an idle queue runs a submission's words where they are (see _submit); tests compare both paths

  def submit(self, words: Any) -> None:
    with self._host_lock: self._submit(words)  # host threads must not claim the same ring space

  def _fault(self, ex: Exception) -> None:
    """The queue stops taking work (a malformed buffer, a failed launch); host waits raise with the reason."""
    self.fault = f"{type(ex).__name__}: {ex}"
    self.state = f"FAULTED: {self.fault}"
    self.dev._signal_written()

  def _submit(self, words: Any) -> None:
    if self.stopped: raise RuntimeError(f"{self.dev.device} {self.name} queue is closed")
    if self.fault: raise RuntimeError(f"{self.dev.device} {self.name} queue faulted: {self.fault}")
    nbytes = len(words) * 4
    if nbytes > self.ring_bytes: raise ValueError(f"command buffer of {nbytes} bytes exceeds the {self.name} ring ({self.ring_bytes} bytes)")
    inline = self.rptr == self.wptr and self.inline
    if inline and self.direct and type(words) is array:
      # an idle queue: this thread plays the hardware (below) on the words where they are, without placing them in the
      # ring and reading them back from it (a jit replay's 20-kernel chain spent a third of its time there); what it
      # stops at goes to the worker, not tried here again
      try: done = self._execute(words.buffer_info()[0], len(words), inline=True)
      except Exception as ex:
        self._fault(ex)
        return
      finally: self.cur = None
      self.state = "idle"
      if done == len(words):
        self.inlined += 1
        return
      words, nbytes, inline = words[done:], nbytes - 4 * done, False
    deadline = time.perf_counter() + self.dev.default_timeout_ms / 1000
    with self._bell:  # wait for ring space and a free entry: the worker must have finished what we overwrite
      while (off := self._place(nbytes)) is None or self.wptr - self.rptr >= self.nentries:
        if self.fault or time.perf_counter() > deadline:
          raise RuntimeError(f"{self.dev.device} {self.name} queue: no ring space for {nbytes} bytes\n{self.dev.queue_state()}")
        self.doorbell.wait(0.05)
    addr = self.ring + off
    self._ring_mv[off:off + nbytes] = memoryview(words).cast("B")
    done, reserved = 0, False
    if inline:
      # an idle queue: this thread plays the hardware, reading the same words from the ring in order (nothing is queued
      # before them), up to the first command that would block or take long (a wait not yet satisfied, a kernel of
      # unknown or large cost, a large copy); the worker thread takes the rest. Handing a tiny launch to the worker
      # and waiting for its signal costs two thread switches: tens of µs, more than the kernel.
      with self._bell: self.inflight.append((self.wptr, off, nbytes)); self.woff = off + nbytes
      reserved = True
      try: done = self._execute(addr, nbytes // 4, inline=True)
      except Exception as ex:
        self._fault(ex)
        done = nbytes // 4
      self.cur, self.state = None, "idle"
      if done == nbytes // 4:
        with self._bell: self.wptr += 1; self.rptr += 1
        self.inlined += 1
        return
    e = self.wptr % self.nentries
    self.entries[2 * e], self.entries[2 * e + 1] = addr + 4 * done, nbytes - 4 * done
    with self._bell:
      if not reserved: self.inflight.append((self.wptr, off, nbytes)); self.woff = off + nbytes
      self.wptr += 1
      self.doorbell.notify_all()

  def _pooled_chain(self, addr: int, ws: Any, p: int, nwords: int, limit: float = float("inf")) -> tuple[int, float]:
    """Run the leading EXEC/BARRIER commands from word p whose kernels all have known costs in one trampoline call
    (GIL released throughout), each kernel split over the native pool as pool.run would split it (on the worker
    thread, or on the submitting one for an idle queue). Returns the word offset after them (p: fewer than two such
    kernels, nothing ran) and their expected ns. `limit`: the most expected ns the chain may take."""
    pool, plans, key = self.pool, self._pool_plans, (ws[p + 1] | ws[p + 2] << 32, ws[p + 3] | ws[p + 4] << 32)
    if (plan := self._kept_plan(plans, key, addr, p, nwords)) is not None and plan[3] > limit: return p, 0.0
    if plan is None:
      q, chunks, expect = p, [], 0.0
      while q + _EXEC_WORDS <= nwords and ws[q] == _EXEC_HDR:
        fa, gx, mc = ws[q + 1] | ws[q + 2] << 32, ws[q + 5], ws[q + 11]
        if (est := pool.cost.get(fa)) is None: break   # unknown cost: pool.run learns it
        nt = pool.chunks(fa, gx, mc)
        if expect + est * gx / nt > limit: break
        chunks.append(1 if nt <= 1 else pool.nchunks(gx, nt, mc))
        expect += est * gx / nt
        q += _EXEC_WORDS
        while q < nwords and ws[q] == _BARRIER_HDR: q += 1
      if len(chunks) < 2: return p, 0.0
      plan = self._keep_plan(plans, key, addr, p, q, c_array(ctypes.c_int64, len(chunks))(*chunks), expect)
    if self.chain is True: self.chain = _chain_runner()
    if self.chain is None: return p, 0.0
    q, arr, expect = p + plan[0], plan[2], plan[3]
    self.state, self.last_pooled = ("chain", key[0], len(arr)), arr
    st = time.perf_counter_ns()
    if (stop := self.chain(addr, p, q, ctypes.addressof(arr), pool.native.ctx, pool.native.run_addr)) != q:
      raise RuntimeError(f"the chain trampoline stopped at word {stop}, expected {q}:\n{decode_words(ws, mark=stop)}")
    self.chains += 1
    self.pooled_chains += 1
    self._rescale(ws, p, q, time.perf_counter_ns() - st, expect, plans, key)
    return q, expect

  # a replay submits the same chain every time: its verdict is kept, keyed by its first launch (kernel, args) and
  # checked against the words byte for byte (a C compare instead of a Python pass over every kernel's cost).
  # A plan is [words, the words' bytes, what the runner needs, expected ns, uses].
  def _kept_plan(self, plans: dict, key: tuple[int, int], addr: int, p: int, nwords: int) -> list[Any] | None:
    if (plan := plans.get(key)) is not None and plan[4] < self.PLAN_USES and p + plan[0] <= nwords \
       and ctypes.string_at(addr + 4 * p, 4 * plan[0]) == plan[1]:
      plan[4] += 1
      return plan
    return None
  def _keep_plan(self, plans: dict, key: tuple[int, int], addr: int, p: int, q: int, what: Any, expect: float) -> list[Any]:
    if len(plans) >= 256: plans.clear()
    plans[key] = plan = [q - p, ctypes.string_at(addr + 4 * p, 4 * (q - p)), what, expect, 0]
    return plan
  def _rescale(self, ws: Any, p: int, q: int, t: float, expect: float, plans: dict, key: tuple[int, int]) -> None:
    """A chain is timed as a whole: where it ran far from its kernels' estimates, each estimate moves by the chain's
    ratio (a sample counts at most 4x, as pool.learn), so a kernel that grew leaves the inline path; the verdict, made
    from the old estimates, is made again."""
    if expect <= 0 or 0.5 <= (r := t / expect) <= 2.0: return
    r, cost, j = min(r, 4.0), self.pool.cost, p
    while j < q:
      if ws[j] == _EXEC_HDR:
        if (c := cost.get(k := ws[j + 1] | ws[j + 2] << 32)) is not None: cost[k] = 0.5 * c * (1.0 + r)
        j += _EXEC_WORDS
      else: j += 1
    plans.pop(key, None)

  def _fxn(self, fa: int) -> Any:
    """The kernel at address fa as a callable (made once per address)."""
    return self._fxns.get(fa) or self._fxns.setdefault(fa, _KFN(fa))

  def run_known(self, fa: int, args: int, gx: int, min_chunk: int, est: float) -> None:
    """Run a kernel of known cost (`est` ns per item) on this thread: a tiny one whole, a bigger one split over the pool
    with it."""
    if est * gx > self.INLINE_NS:
      self.pool.run(fa, self._fxn(fa), args, gx, min_chunk, addr=fa)
      return
    if not gx: return
    fxn = self._fxn(fa)
    st = time.perf_counter_ns()
    fxn(args, 0, gx)
    # a sample counts at most 4x the estimate: on a loaded machine one preempted run would otherwise push a tiny kernel
    # past INLINE_NS, and every launch behind it (a replay's, an eager loop's) to the worker thread
    t = (time.perf_counter_ns() - st) / gx
    self.pool.cost[fa] = 0.5 * (est + (t if t < 4 * est else 4 * est))

  INLINE_NS = 30_000   # the most work one command may be to run on the submitting thread (known kernel costs only)
  INLINE_POOL_NS = 20_000_000   # up to this much expected pool time per submission runs there over the native pool
                                # (each kernel's one-thread ns over the threads it is split across)
  PLAN_USES = 64       # a kept chain verdict is made again from the current estimates after this many uses

  def unmap(self) -> None:
    host_unmap(self.ring, self.ring_bytes)
    host_unmap(ctypes.addressof(self.entries), _pages(16 * self.nentries))

  def _place(self, n: int) -> int | None:
    """Ring offset for n bytes, or None while unfinished submissions occupy it. In-flight buffers lie
    between the oldest one's offset (head) and the write offset (tail), possibly wrapped."""
    while self.inflight and self.inflight[0][0] < self.rptr: self.inflight.popleft()
    tail = self.woff
    if not self.inflight: return tail if tail + n <= self.ring_bytes else 0
    head = self.inflight[0][1]
    if tail > head: return tail if tail + n <= self.ring_bytes else 0 if n <= head else None
    return tail if tail + n <= head else None

  def stop(self) -> None:
    self.stopped = True
    with self.doorbell: self.doorbell.notify_all()
    if self.pool: self.pool.stop()

  # --- device side
  def _run(self) -> None:
    while not self.stopped:
      with self.doorbell:
        while self.rptr == self.wptr and not self.stopped: self.doorbell.wait(0.5)
      if self.stopped: return
      e = self.rptr % self.nentries
      addr, nbytes = self.entries[2 * e], self.entries[2 * e + 1]
      try: self._execute(addr, nbytes // 4)
      except Exception as ex:  # a malformed buffer: stop this queue, host waits raise with the reason
        self._fault(ex)
        return
      self.cur, self.state = None, "idle"
      with self.doorbell:
        self.rptr += 1
        self.doorbell.notify_all()

  def _execute(self, addr: int, nwords: int, inline: bool = False) -> int:
    """Run the buffer's commands; inline (on the submitting thread): stop before one that would block or take long
    and return its word offset (nwords when all ran)."""
    # a view of the ring, not a copy: the words stay put until this submission is finished (see _place)
    ws = memoryview(c_array(ctypes.c_uint32, nwords).from_address(addr)).cast("B").cast("I")
    p = 0
    budget = self.INLINE_POOL_NS   # (inline) the expected ns of parallel kernels this thread may still run for this buffer
    while p < nwords and not self.stopped:
      h = ws[p]
      op = h >> 16
      if (h & 0xFFFF) != _SIZE.get(op) or p + (h & 0xFFFF) > nwords: decode_one(ws, p)  # raises, naming the bad header
      self.cur = (addr, nwords, p)
      if op == OP_WAIT or op == OP_SIGNAL:
        sig = ctypes.c_uint64.from_address(ws[p + 1] | ws[p + 2] << 32)
        value = ws[p + 3] | ws[p + 4] << 32
        if op == OP_SIGNAL:
          sig.value = value
          self.dev._signal_written()
        elif sig.value < value:
          if inline: return p
          self.state = f"waiting for signal {sig_addr(sig):#x} >= {value} (value now {sig.value})"
          cv = self.dev.sig_cv
          with cv:
            self.dev.sig_sleepers += 1
            try:
              while sig.value < value and not self.stopped: cv.wait(0.05)
            finally: self.dev.sig_sleepers -= 1
      elif op == OP_EXEC:
        # fields read straight off the words (LAYOUT[OP_EXEC]); the state in words is made only when asked (describe)
        if self.pool is None: raise RuntimeError("EXEC on a queue without a thread pool (the copy queue)")
        fa, gx = ws[p + 1] | ws[p + 2] << 32, ws[p + 5]
        if inline:
          # tiny kernels of known cost run whole on this thread (what pool.run decides for them too), timed as pool.run
          # times them, without the pool's bookkeeping; a run of them (a jit replay: exec, barrier, exec, ...) in one
          # tight loop. This is most of an eager op's or a jit replay's launch cost.
          cost, limit, clock = self.pool.cost, self.INLINE_NS, time.perf_counter_ns
          if self.chain is not None and self.pool.native is not None and p + 2 * _EXEC_WORDS <= nwords and not profile.ON \
             and (ran := self._pooled_chain(addr, ws, p, nwords, budget))[0] > p:
            # a run of kernels of known cost (a jit replay) in one native call, here rather than on the worker
            # thread for the reason big single kernels run here (below); the same call the worker makes
            p, budget = ran[0], budget - ran[1]
            if self.stopped or p >= nwords: break
            continue
          if self.chain is not None and p + 2 * _EXEC_WORDS <= nwords and not profile.ON:
            # the leading run of tiny kernels of known cost goes to the native trampoline in one call (cpu_chain.py);
            # PROFILE=1 keeps the per-kernel path (its timestamps), as do a single kernel and one of unknown cost
            # (a replay's verdict is kept: _kept_plan)
            plans, key = self._chain_plans, (fa, ws[p + 3] | ws[p + 4] << 32)
            if (plan := self._kept_plan(plans, key, addr, p, nwords)) is not None: q, n, expect = p + plan[0], plan[2], plan[3]
            else:
              q, n, expect = p, 0, 0.0
              while q + _EXEC_WORDS <= nwords and ws[q] == _EXEC_HDR:
                if (est := cost.get(ws[q + 1] | ws[q + 2] << 32)) is None or est * ws[q + 5] > limit: break
                expect += est * ws[q + 5]
                n += 1
                q += _EXEC_WORDS
                while q < nwords and ws[q] == _BARRIER_HDR: q += 1
              if n >= 2: self._keep_plan(plans, key, addr, p, q, n, expect)
            if n >= 2 and self.chain is True: self.chain = _chain_runner()   # (None where it cannot be built here)
            if n >= 2 and self.chain is not None:
              self.state = ("chain", fa, n)
              st = clock()
              if (stop := self.chain(addr, p, q, None, None, None)) != q:
                raise RuntimeError(f"the chain trampoline stopped at word {stop}, expected {q}:\n{decode_words(ws, mark=stop)}")
              self.chains += 1
              self._rescale(ws, p, q, clock() - st, expect, plans, key)
              p = q
              if self.stopped or p >= nwords: break
              continue
          while True:
            # a bigger kernel of known cost runs here too, split over the native pool (this thread working with it):
            # the pool spans every core, so handing the kernel to the worker while this thread goes on in Python
            # only puts three threads on the cores, and a pool thread preempted holding a chunk stalls the kernel
            # for a scheduler time slice (a 0.6 ms matmul took 2.5-6 ms while the host built the next graph)
            if (est := cost.get(fa)) is None or est * gx > limit:
              if est is None or est * gx > budget or self.pool.native is None:
                self.cur = (addr, nwords, p)
                return p
              budget -= est * gx
            self.state = ("exec", fa, gx)
            self.run_known(fa, ws[p + 3] | ws[p + 4] << 32, gx, ws[p + 11], est)
            p += _EXEC_WORDS
            while p < nwords and ws[p] == _BARRIER_HDR: p += 1  # commands run in order here: a barrier is a no-op
            if p + _EXEC_WORDS > nwords or ws[p] != _EXEC_HDR or self.stopped: break
            fa, gx = ws[p + 1] | ws[p + 2] << 32, ws[p + 5]
          continue
        self.state = ("exec", fa, gx)
        if self.chain is not None and self.pool.native is not None and p + 2 * _EXEC_WORDS <= nwords and not profile.ON:
          # a run of kernels of known cost (a jit replay) in one native call, big ones split over the native pool
          if (q := self._pooled_chain(addr, ws, p, nwords)[0]) > p:
            p = q
            if self.stopped or p >= nwords: break
            continue
        self.pool.run(fa, self._fxn(fa), ws[p + 3] | ws[p + 4] << 32, gx, ws[p + 11], addr=fa)
      elif op == OP_TIMESTAMP: ctypes.c_uint64.from_address(ws[p + 1] | ws[p + 2] << 32).value = time.perf_counter_ns()
      elif op == OP_COPY:
        if inline and (ws[p + 5] | ws[p + 6] << 32) > 10 * self.INLINE_NS: return p   # ~10 bytes per ns
        _, f, _ = decode_one(ws, p)
        self.state = f"copying {f['nbytes']} bytes {f['src']:#x} -> {f['dest']:#x}"
        ctypes.memmove(f["dest"], f["src"], f["nbytes"])
      # OP_BARRIER: commands already execute in order on one thread and ctypes writes are visible to the host
      p += h & 0xFFFF
    return p

  def describe(self) -> str:
    st = (self.state if isinstance(self.state, str) else f"executing kernel {self.state[1]:#x} over {self.state[2]} items"
          if self.state[0] == "exec" else f"executing a chain of {self.state[2]} kernels from {self.state[1]:#x} natively")
    s = f"  {self.name} queue: {st}; submissions written {self.wptr}, finished {self.rptr} ({self.inlined} on the host thread)"
    if self.cur is not None:
      addr, nwords, p = self.cur
      s += f"\n  current command buffer at {addr:#x} ({nwords} words):\n" + decode_words((ctypes.c_uint32 * nwords).from_address(addr)[:], mark=p)
    return s

# ---------------------------------------------------------------- program and device
class CPUProgram(HCQProgram):
  args_state_t = CPUArgsState
  direct = True   # run a tiny launch on an idle queue without writing its words (see run_direct); tests compare both paths
  def __init__(self, dev: CPUDevice, name: str, lib: bytes, min_chunk: int = 0) -> None:
    super().__init__(dev, name, lib)
    from baregrad.drivers.elf_loader import load_elf, disassemble
    if DEBUG() >= 7: print(disassemble(lib, name))
    self.image = load_elf(lib)
    # min_chunk: cost hint, at least this many items per thread; 0 lets the pool learn the kernel's cost
    self.fxn_addr, self.min_chunk = self.image.symbol(name), min_chunk
    self._launch_words = None  # the commands of a plain launch, encoded once (see __call__)
    self._direct_args: Any = None   # the arguments of a direct launch (see run_direct)

  def __call__(self, *bufs: Any, global_size: tuple[int, int, int] = (1, 1, 1), local_size: tuple[int, int, int] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    """A launch that is neither timed nor profiled writes the same commands HCQProgram's does (wait for the timeline,
    exec, signal it) straight into words encoded once, patched here: building a queue object per launch costs more
    than a tiny kernel."""
    if wait or profile.ON or type(global_size) is not tuple or len(global_size) != 3 or type(local_size) is not tuple or len(local_size) != 3:
      return super().__call__(*bufs, global_size=global_size, local_size=local_size, vals=vals, wait=wait)
    dev = self.dev
    if global_size[1] != 1 or global_size[2] != 1:
      raise ValueError(f"the CPU runs one parallel axis: global_size must be (n, 1, 1), got {global_size}")
    if global_size[0] and self.run_direct(bufs, global_size[0], vals): return None
    n = len(bufs) + len(vals)
    cpu, va = dev.alloc_kernargs(8 * n)
    slots = c_array(ctypes.c_uint64, n).from_address(cpu)
    for i, b in enumerate(bufs): slots[i] = (b._buf if hasattr(b, "_buf") else b).va_addr
    for i, v in enumerate(vals): slots[len(bufs) + i] = v & 0xFFFFFFFFFFFFFFFF
    if (ws := self._launch_words) is None:
      q = CPUComputeQueue()
      q.wait(dev.timeline_signal, 0).exec(self, CPUArgsState(cpu, va, self, [], []), global_size, local_size).signal(dev.timeline_signal, 0)
      self._launch_words = ws = q.words
      self._at = (q.cmds[0].start + q.cmds[0].fields["value"][0], q.cmds[1].start + q.cmds[1].fields["args"][0],
                  q.cmds[1].start + q.cmds[1].fields["gx"][0], q.cmds[1].start + q.cmds[1].fields["lx"][0],
                  q.cmds[2].start + q.cmds[2].fields["value"][0])
    wv, ar, gx, lx, sv = self._at
    with dev.submit_lock:
      ws[ar], ws[ar + 1] = va & _M32, va >> 32
      ws[gx], ws[lx], ws[lx + 1], ws[lx + 2] = global_size[0], local_size[0], local_size[1], local_size[2]
      w = dev.timeline_value - 1
      ws[wv], ws[wv + 1] = w & _M32, w >> 32
      tv = dev.next_timeline()
      ws[sv], ws[sv + 1] = tv & _M32, tv >> 32
      dev.engines["compute"].submit(ws)  # (the ring takes a copy of the words)
    return None
  def run_direct(self, bufs: Sequence[Any], n_items: int, vals: Sequence[int] = ()) -> bool:
    """Run a launch of n_items (> 0) on this thread now, if the queue is idle, its wait met and the kernel's cost known
    and small (what submitting its words would do: QueueEngine._submit runs them on this thread, the wait passes, the
    kernel runs, whole or over the native pool, the signal is written), without writing the words into the ring and
    reading them back: half of an eager op's launch. False where it cannot (nothing ran: submit the words). The
    arguments go in this program's own block, not the kernel-args ring: the run is over before the lock is released,
    so nothing reads them later. CompiledRunner calls this first, then __call__."""
    if not self.direct or profile.ON: return False
    dev = self.dev
    eng = dev.engines["compute"]
    with dev.submit_lock:  # (the direct arguments are shared by this program's launches from every host thread)
      if not (eng.rptr == eng.wptr and eng.inline and not eng.stopped and not eng.fault
              and (est := eng.pool.cost.get(fa := self.fxn_addr)) is not None
              and (est * n_items <= eng.INLINE_NS or (est * n_items <= eng.INLINE_POOL_NS and eng.pool.native is not None))
              and dev.timeline_signal._v.value >= dev.timeline_value - 1): return False
      n = len(bufs) + len(vals)
      if (da := self._direct_args) is None or len(da) != n: self._direct_args = da = c_array(ctypes.c_uint64, n)()
      for i, b in enumerate(bufs): da[i] = (b._buf if hasattr(b, "_buf") else b).va_addr
      for i, v in enumerate(vals): da[len(bufs) + i] = v & 0xFFFFFFFFFFFFFFFF
      with eng._host_lock:
        eng.state = ("exec", fa, n_items)
        try: eng.run_known(fa, ctypes.addressof(da), n_items, self.min_chunk, est)
        except Exception as ex:   # as a fault while running the words: the queue takes nothing more
          eng._fault(ex)
          raise
        eng.state = "idle"
        tv = dev.timeline_value   # (next_timeline and _signal_written inline)
        dev.timeline_value = tv + 1
        dev.timeline_signal._v.value = tv
        if dev.sig_sleepers: dev._signal_written()
        eng.inlined += 1
    return True

  def __del__(self) -> None:
    # unmapping code a queued exec may still run would crash the process: drain first. The GC may run
    # this on a queue or pool thread, which must not wait for itself: then the host closes it later.
    if _EXITING: return  # the process is going away: leave the image mapped
    try:
      for e in self.dev.engines.values():  # the address may host another kernel later: forget what we learned
        e._fxns.pop(self.fxn_addr, None)
        e._chain_plans.clear()   # a kept chain verdict may name this address
        e._pool_plans.clear()
        if e.pool: e.pool.cost.pop(self.fxn_addr, None)
      if self.dev.closed: self.image.close()
      elif threading.current_thread().name.startswith("baregrad-cpu"): self.dev._zombies.append(self.image)
      else:
        self.dev.synchronize()
        self.image.close()
    except Exception: pass

class MissingCompiler(Compiler):
  """Stands in when a variant's toolchain cannot be set up here; the device still runs loaded objects."""
  def __init__(self, reason: str) -> None:
    super().__init__(None)
    self.reason = reason
  def compile(self, src: str) -> bytes: raise CompileError(src, f"no compiler for this CPU variant: {self.reason}")

def _toolchain(variant: str) -> tuple[Any, Compiler]:
  """Renderer and compiler for a CPU variant (imported on first use: codegen is heavy)."""
  import importlib
  mods = {"LLVM": ("baregrad.codegen.renderer.llvmir", "LLVMRenderer", "LLVMCompiler"),
          "C": ("baregrad.codegen.renderer.cstyle", "CRenderer", "ClangCompiler")}
  if variant not in mods: raise ValueError(f"unknown CPU variant {variant!r}; expected one of {', '.join(mods)} (e.g. DEV=CPU:C)")
  rmod, rname, cname = mods[variant]
  try:
    r, c = importlib.import_module(rmod), importlib.import_module("baregrad.drivers.cpu_compile")
    ren = getattr(r, rname)()
    ren.simd_lanes, ren.vector_registers = c.host_simd()   # register tiles sized for this CPU
    if variant == "LLVM": ren.stream_bytes, ren.stream_fence = c.host_stream()
    return ren, getattr(c, cname)()
  except (ImportError, CompileError, OSError) as e:  # e.g. llvmlite or a C compiler missing on this machine
    hint = "install llvmlite (python3 -m pip install -e .) or use DEV=CPU:C" if variant == "LLVM" else "install gcc or clang, or use DEV=CPU"
    return None, MissingCompiler(f"CPU:{variant} toolchain unavailable ({type(e).__name__}: {e}); {hint}")

class CPUDevice(HCQDevice):
  has_local, has_threads, max_local_size, max_shared_mem = False, True, (1, 1, 1), 0
  ticks_per_us = 1000.0  # timestamps are perf_counter_ns
  ring_bytes = 1 << 20   # command ring per queue

  def __init__(self, device: str) -> None:
    self.variant = Device.variant(device) or "LLVM"
    renderer, compiler = _toolchain(self.variant)
    self.threads = int(os.environ.get("CPU_THREADS", "0")) or os.cpu_count() or 1
    self.sig_cv = threading.Condition()
    self.sig_sleepers = 0  # threads waiting on sig_cv (see _signal_written)
    self.closed = False
    self.engines: dict[str, QueueEngine] = {}
    self._shared: list[tuple[int, int]] = []
    self._zombies: list[Any] = []  # images of programs freed on a device thread, closed at the next synchronize
    # (the threads a parallel axis is split over: long reductions with few outputs are split into that many partials
    # and more, codegen/gridreduce.py)
    if renderer is not None: renderer.compute_units = self.threads
    super().__init__(device, None, renderer, compiler, CPUProgram, CPUComputeQueue, CPUCopyQueue)
    self.allocator = CPUAllocator(self)
    self.engines = {n: QueueEngine(self, n, self.ring_bytes) for n in ("compute", "copy")}

  def _alloc_shared(self, size: int) -> HCQBuffer:
    addr = host_map(_pages(size))
    self._shared.append((addr, _pages(size)))
    return HCQBuffer(addr, size, addr)

  def _signal_written(self) -> None:
    # nobody asleep on signal memory (the common case: an inline launch whose host waits spin first): no lock to take.
    # A sleeper counts itself under the lock before it reads the value; a writer stores the value before it reads the
    # count (both under the GIL, in order): either the writer sees the sleeper, or the sleeper sees the new value
    if self.sig_sleepers:
      with self.sig_cv: self.sig_cv.notify_all()

  def _check_fault(self) -> None:
    for e in self.engines.values():
      if e.fault: raise RuntimeError(f"{self.device}: {e.name} queue faulted: {e.fault}\n{self.queue_state()}")

  def _wait_signal(self, sig: HCQSignal, value: int, timeout_s: float) -> bool:
    deadline = time.perf_counter() + timeout_s
    for _ in range(50):  # short kernels finish within a few µs: spin before sleeping on the condition
      if sig._v.value >= value: return True
    with self.sig_cv:
      self.sig_sleepers += 1
      try:
        while sig._v.value < value:
          self._check_fault()
          left = deadline - time.perf_counter()
          if left <= 0: return False
          self.sig_cv.wait(min(left, 0.05))
      finally: self.sig_sleepers -= 1
    return True

  def queue_state(self) -> str:
    return (f"{self.device}: timeline {self.timeline_signal.va_addr:#x} value {self.timeline_signal.value}, last submitted "
            f"{self.timeline_value - 1}\n" + "\n".join(e.describe() for e in self.engines.values()))

  def synchronize(self, timeout_ms: int | None = None) -> None:
    if self.closed: return  # nothing runs on a closed device
    super().synchronize(timeout_ms)
    while self._zombies: self._zombies.pop().close()

  def close(self) -> None:
    """Drain (briefly), stop the queue workers and give back their rings and the allocator's cache.
    Signal and kernel-args memory stays mapped: Python objects may still read it. Exiting without
    close never hangs: the workers are daemon threads."""
    if self.closed: return
    try: self.synchronize(timeout_ms=1000)
    except Exception: pass  # a stuck queue is not drained; close anyway
    self.closed = True
    for e in self.engines.values(): e.stop()
    for e in self.engines.values():
      e.thread.join(timeout=1.0)
      if not e.thread.is_alive(): e.unmap()
    self.allocator.free_cache()
    Device.forget(self.device, self)
