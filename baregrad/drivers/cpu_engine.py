"""The CPU device's queue engine: a hardware queue modelled in memory (command ring, submission ring, doorbell, worker
thread) that executes the words of cpu_encoding.py, and the thread pool an EXEC's parallel axis is split over (Python
threads, or the native pool of cpu_pool.py)."""
from __future__ import annotations
import ctypes, itertools, threading, time
from array import array
from collections import deque
from typing import TYPE_CHECKING, Any
from baregrad import knobs
from baregrad.helpers import c_array
from baregrad.hal import profile
from baregrad.drivers.cpu_hostmem import host_map, host_unmap, sig_addr, _pages
from baregrad.drivers.cpu_encoding import (OP_COPY, OP_EXEC, OP_SIGNAL, OP_TIMESTAMP, OP_WAIT,
                                           _BARRIER_HDR, _EXEC_HDR, _EXEC_WORDS, _SIZE, _chain_runner, decode_one,
                                           decode_words)
if TYPE_CHECKING: from baregrad.drivers.cpu import CPUDevice

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
    self.pool = ThreadPool(dev.threads, int(knobs.read("CPU_SPLIT_US") * 1000),
                           native=knobs.read("CPU_NATIVE_POOL")) if name == "compute" else None
    # see _submit; the copy queue too: reading a loss after a step would otherwise wake its worker and wait to be woken
    # back, hundreds of µs on a busy machine for a 4-byte copy
    self.inline = knobs.read("CPU_INLINE")
    # the native runner of chains of tiny kernels (cpu_chain.py), built on first use; CPU_CHAIN=0 turns it off
    self.chain: Any = True if self.inline and self.pool is not None and knobs.read("CPU_CHAIN") else None   # True: not built yet
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
    """A chain is timed as a whole: where it ran far slower than its kernels' estimates, each estimate moves up by the
    chain's ratio (a sample counts at most 4x, as pool.learn), so a kernel that grew leaves the inline path; the
    verdict, made from the old estimates, is made again."""
    # only upward: a chain that ran faster than expected (a warm cache, an idle machine) halved every estimate in it,
    # and a few such replays left a model's matmuls looking tiny, each then run on one thread with no chance to learn
    # otherwise (ViT-tiny's replay settled at 218 of 223 kernels unsplit, 26 ms instead of 17); estimates still fall
    # where a kernel is timed alone (pool.learn, run_known)
    if expect <= 0 or (r := t / expect) <= 2.0: return
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
  INLINE_POOL_NS = 250_000_000  # up to this much expected pool time per submission runs there over the native pool
                                # (each kernel's one-thread ns over the threads it is split across). A model's jit
                                # replay past it went half to the worker thread and ran slower: ViT-tiny at ~20 ms
                                # expected 18 -> 27 ms when it crossed 20 ms, ResNet-50 (55 ms) 64 -> 58 ms at 250
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
