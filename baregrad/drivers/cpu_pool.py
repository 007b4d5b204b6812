"""A native thread pool for the CPU device: a parallel kernel's chunks run on threads that never touch Python.

The Python pool (drivers/cpu_engine.py ThreadPool) hands a launch to its threads through semaphores and events: every handoff
wakes a Python thread, which then needs the GIL before and after its chunk. On a 2-core machine that is 100-200 µs per
parallel launch (a 128x256x10 matmul ran in 24 µs on one thread and 190 µs split over two). Here the workers are
native threads (pthread_create) running LLVM IR compiled once per process, like the chain trampoline
(drivers/cpu_chain.py): they spin on a generation word for SPIN_US after their last launch (yielding the core now and
then), then sleep on it with futex(2); a launch publishes the
kernel in a shared context, wakes sleepers, runs chunks itself and spins until every chunk is done, all inside one
ctypes call (the GIL released).

    void baregrad_pool_run(ctx *c, void (*fn)(void *args, int64 start, int64 end), void *args, int64 total, int64 n)

splits [0, total) into n contiguous chunks taken by whichever thread is free (the caller included), so a worker the
OS wakes late does not hold the launch up: the caller runs the chunks nobody took.

Publishing is a seqlock on the generation word (odd while the fields are written; a worker reads them and checks the
generation again after). A chunk is claimed by a compare-and-swap on (generation << 32 | next chunk): a late worker
holding an older launch's fields claims nothing of a newer one, and no chunk runs twice. A launch returns only when all
its chunks are done, so its fields stay put while any claimed chunk runs. Sleeping and
waking use the Dekker pattern on (`sleepers`, generation), both sides sequentially consistent, so no wake-up is lost."""
from __future__ import annotations
import ctypes, os, threading, time
from baregrad import knobs
from typing import Any

RUN_SYMBOL, WORKER_SYMBOL, PAUSES_SYMBOL = "baregrad_pool_run", "baregrad_pool_worker", "baregrad_pool_pauses"
# context layout (bytes): hot fields on their own cache lines
GEN, FN, ARGS, TOTAL, N, NEXT, LEFT, SLEEPERS, STOP, SYSCALL, FUTEX_NR, SPIN = 0, 64, 72, 80, 88, 128, 192, 256, 260, 264, 272, 280
WAITER, TIMEOUT = 288, 296   # the caller sleeps on LEFT's low word (i32 flag); its wait's timespec (sec, nsec)
YIELD_NR = 312               # sched_yield's syscall number (a spinning worker yields now and then)
CTX_BYTES = 320   # (within the one page the context gets)
# a caller whose chunks are done spins this many pauses for the others' (~20-100 µs), then sleeps until the last one
# ends: on a machine with more runnable threads than cores (the host thread building the next graph while kernels
# run) a spinning caller takes the core the worker holding the last chunk needs (a 0.6 ms matmul took 6 ms)
FINISH_SPIN = 4096
FINISH_TIMEOUT_NS = 1_000_000   # a sleeping caller looks again after this long, woken or not
# futex(2) operations (include/uapi/linux/futex.h): FUTEX_WAIT | FUTEX_PRIVATE_FLAG, FUTEX_WAKE | FUTEX_PRIVATE_FLAG
FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 128, 129
SYS_FUTEX = {"x86_64": 202, "aarch64": 98}   # arch/x86/entry/syscalls/syscall_64.tbl; include/uapi/asm-generic/unistd.h
SYS_SCHED_YIELD = {"x86_64": 24, "aarch64": 124}   # (same tables)
# a worker whose launch is done spins this long for the next one before it sleeps (CPU_SPIN_US overrides; 0: sleep at
# once). Waking a sleeping worker costs a futex wake and the scheduler's latency: ~10-50 us on bare metal, 100-500 us
# in a VM whose idle vCPU the host has parked (a 70 us conv ran 0.6 ms after each idle gap of a few ms). BLAS and OpenMP
# runtimes spin likewise (OpenBLAS ~0.1 s, Intel's OpenMP 200 ms). The spin yields the core every YIELD_EVERY pauses,
# so on a machine with more runnable threads than cores it gives way instead of taking a time slice from them.
SPIN_US = 10_000
YIELD_EVERY = 1024

def pool_ir(arch: str) -> str:
  """The pool's LLVM IR for a host architecture ("x86_64" or "aarch64": the spin-wait hint differs)."""
  pause = "call void @llvm.x86.sse2.pause()" if arch == "x86_64" else 'call void asm sideeffect "yield", ""()'
  decl = "declare void @llvm.x86.sse2.pause()" if arch == "x86_64" else ""
  def f(name: str, off: int) -> str: return f"  %{name} = getelementptr inbounds i8, ptr %c, i64 {off}"
  fields = "\n".join(f(n, o) for n, o in (("genp", GEN), ("fnp", FN), ("argsp", ARGS), ("totp", TOTAL), ("np", N),
                                          ("nextp", NEXT), ("leftp", LEFT), ("sleepp", SLEEPERS),
                                          ("stopp", STOP), ("sysp", SYSCALL), ("nrp", FUTEX_NR), ("spinp", SPIN)))
  return f"""
{decl}

; run chunks of launch `gen` until none is left: a claim is a compare-and-swap on (generation << 32 | next chunk), so a
; worker holding fields of an older launch claims nothing of a newer one
define private void @chunks(ptr %c, ptr %fn, ptr %args, i64 %total, i64 %n, i32 %gen) {{
entry:
  %nextp = getelementptr inbounds i8, ptr %c, i64 {NEXT}
  %leftp = getelementptr inbounds i8, ptr %c, i64 {LEFT}
  br label %claim
claim:
  %v = load atomic i64, ptr %nextp seq_cst, align 8
  %tag64 = lshr i64 %v, 32
  %tag = trunc i64 %tag64 to i32
  %mine = icmp eq i32 %tag, %gen
  br i1 %mine, label %idx, label %out
idx:
  %i = and i64 %v, 4294967295
  %have = icmp slt i64 %i, %n
  br i1 %have, label %take, label %out
take:
  %v1 = add i64 %v, 1
  %cx = cmpxchg ptr %nextp, i64 %v, i64 %v1 seq_cst seq_cst
  %ok = extractvalue {{ i64, i1 }} %cx, 1
  br i1 %ok, label %run, label %claim
run:
  %a0 = mul i64 %total, %i
  %s = udiv i64 %a0, %n
  %i1 = add i64 %i, 1
  %a1 = mul i64 %total, %i1
  %e = udiv i64 %a1, %n
  call void %fn(ptr %args, i64 %s, i64 %e)
  %old = atomicrmw sub ptr %leftp, i64 1 seq_cst
  %last = icmp eq i64 %old, 1
  br i1 %last, label %last.chunk, label %claim
last.chunk:                               ; the caller may sleep on `left` (Dekker with its WAITER flag)
  %waitp = getelementptr inbounds i8, ptr %c, i64 {WAITER}
  %w = load atomic i32, ptr %waitp seq_cst, align 4
  %asleep = icmp ne i32 %w, 0
  br i1 %asleep, label %wake.caller, label %claim
wake.caller:
  call void @futex_at(ptr %c, ptr %leftp, i32 {FUTEX_WAKE_PRIVATE}, i32 1, ptr null)
  br label %claim
out:
  ret void
}}

define private void @futex(ptr %c, i32 %op, i32 %val) {{
entry:
  call void @futex_at(ptr %c, ptr %c, i32 %op, i32 %val, ptr null)
  ret void
}}

define private void @sched_yield(ptr %c) {{
entry:
  %sysp = getelementptr inbounds i8, ptr %c, i64 {SYSCALL}
  %nrp = getelementptr inbounds i8, ptr %c, i64 {YIELD_NR}
  %sys = load ptr, ptr %sysp, align 8
  %nr = load i64, ptr %nrp, align 8
  %r = call i64 (i64, ...) %sys(i64 %nr)
  ret void
}}

; n pauses: how many a microsecond holds is measured once per pool (a pause is ~1 ns on some cores, ~40 on others)
define void @{PAUSES_SYMBOL}(i64 %n) {{
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  {pause}
  %i1 = add i64 %i, 1
  %more = icmp slt i64 %i1, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}}

define private void @futex_at(ptr %c, ptr %addr, i32 %op, i32 %val, ptr %timeout) {{
entry:
  %sysp = getelementptr inbounds i8, ptr %c, i64 {SYSCALL}
  %nrp = getelementptr inbounds i8, ptr %c, i64 {FUTEX_NR}
  %sys = load ptr, ptr %sysp, align 8
  %nr = load i64, ptr %nrp, align 8
  %r = call i64 (i64, ...) %sys(i64 %nr, ptr %addr, i32 %op, i32 %val, ptr %timeout, ptr null, i32 0)
  ret void
}}

define void @{RUN_SYMBOL}(ptr %c, ptr %fn, ptr %args, i64 %total, i64 %n) {{
entry:
{fields}
  %g0 = load atomic i32, ptr %genp seq_cst, align 4
  %godd = add i32 %g0, 1
  store atomic i32 %godd, ptr %genp seq_cst, align 4
  store atomic ptr %fn, ptr %fnp monotonic, align 8
  store atomic ptr %args, ptr %argsp monotonic, align 8
  store atomic i64 %total, ptr %totp monotonic, align 8
  store atomic i64 %n, ptr %np monotonic, align 8
  store atomic i64 %n, ptr %leftp seq_cst, align 8
  %geven = add i32 %g0, 2
  %gtag = zext i32 %geven to i64
  %first = shl i64 %gtag, 32
  store atomic i64 %first, ptr %nextp seq_cst, align 8
  store atomic i32 %geven, ptr %genp seq_cst, align 4
  %sl = load atomic i32, ptr %sleepp seq_cst, align 4
  %anyone = icmp ne i32 %sl, 0
  br i1 %anyone, label %wake, label %work
wake:
  call void @futex(ptr %c, i32 {FUTEX_WAKE_PRIVATE}, i32 2147483647)
  br label %work
work:
  call void @chunks(ptr %c, ptr %fn, ptr %args, i64 %total, i64 %n, i32 %geven)
  br label %finish
finish:                                  ; chunks taken by others: spin a while, then sleep until they are done
  %j = phi i64 [ 0, %work ], [ %j1, %finish.pause ], [ 0, %finish.woke ]
  %left = load atomic i64, ptr %leftp seq_cst, align 8
  %done = icmp eq i64 %left, 0
  br i1 %done, label %out, label %finish.more
finish.more:
  %j1 = add i64 %j, 1
  %spinmore = icmp slt i64 %j1, {FINISH_SPIN}
  br i1 %spinmore, label %finish.pause, label %finish.sleep
finish.pause:
  {pause}
  br label %finish
finish.sleep:                            ; the flag first, then `left` again: a last chunk ending between the two wakes us
  %waitp = getelementptr inbounds i8, ptr %c, i64 {WAITER}
  %tsp = getelementptr inbounds i8, ptr %c, i64 {TIMEOUT}
  store atomic i32 1, ptr %waitp seq_cst, align 4
  %left2 = load atomic i64, ptr %leftp seq_cst, align 8
  %still = icmp ne i64 %left2, 0
  br i1 %still, label %finish.call, label %finish.woke
finish.call:                             ; (the kernel compares `left`'s low word with the value seen: no lost wake-up)
  %lo = trunc i64 %left2 to i32
  call void @futex_at(ptr %c, ptr %leftp, i32 {FUTEX_WAIT_PRIVATE}, i32 %lo, ptr %tsp)
  br label %finish.woke
finish.woke:
  store atomic i32 0, ptr %waitp seq_cst, align 4
  br label %finish
out:
  ret void
}}

define ptr @{WORKER_SYMBOL}(ptr %c) {{
entry:
{fields}
  %spin = load i64, ptr %spinp, align 8
  %g.start = load atomic i32, ptr %genp seq_cst, align 4
  br label %wait
wait:
  %seen = phi i32 [ %g.start, %entry ], [ %seen, %sleep.done ], [ %g1, %worked ], [ %seen, %retry ]
  br label %spinloop
spinloop:
  %k = phi i64 [ 0, %wait ], [ %k1, %spin.more ]
  %st = load atomic i32, ptr %stopp seq_cst, align 4
  %stop = icmp ne i32 %st, 0
  br i1 %stop, label %exit, label %spin.check
spin.check:
  %g = load atomic i32, ptr %genp seq_cst, align 4
  %odd = and i32 %g, 1
  %isodd = icmp ne i32 %odd, 0
  %same = icmp eq i32 %g, %seen
  %nothing = or i1 %isodd, %same
  br i1 %nothing, label %spin.next, label %enter
spin.next:
  {pause}
  %k1 = add i64 %k, 1
  %kk = and i64 %k1, {YIELD_EVERY - 1}
  %yieldnow = icmp eq i64 %kk, 0
  br i1 %yieldnow, label %spin.yield, label %spin.more
spin.yield:
  call void @sched_yield(ptr %c)
  br label %spin.more
spin.more:
  %more = icmp slt i64 %k1, %spin
  br i1 %more, label %spinloop, label %sleep
sleep:
  %s0 = atomicrmw add ptr %sleepp, i32 1 seq_cst
  %gs = load atomic i32, ptr %genp seq_cst, align 4
  %st2 = load atomic i32, ptr %stopp seq_cst, align 4
  %same2 = icmp eq i32 %gs, %seen
  %nostop = icmp eq i32 %st2, 0
  %block = and i1 %same2, %nostop
  br i1 %block, label %sleep.call, label %sleep.done
sleep.call:
  call void @futex(ptr %c, i32 {FUTEX_WAIT_PRIVATE}, i32 %seen)
  br label %sleep.done
sleep.done:
  %s1 = atomicrmw sub ptr %sleepp, i32 1 seq_cst
  br label %wait
enter:                                    ; a seqlock read of the launch's fields
  %fn = load atomic ptr, ptr %fnp monotonic, align 8
  %args = load atomic ptr, ptr %argsp monotonic, align 8
  %total = load atomic i64, ptr %totp monotonic, align 8
  %n = load atomic i64, ptr %np monotonic, align 8
  %g1 = load atomic i32, ptr %genp seq_cst, align 4
  %valid = icmp eq i32 %g1, %g
  br i1 %valid, label %dowork, label %retry
dowork:
  call void @chunks(ptr %c, ptr %fn, ptr %args, i64 %total, i64 %n, i32 %g)
  br label %worked
worked:
  br label %wait
retry:                                    ; the fields changed while read: look again
  br label %wait
exit:
  ret ptr null
}}
"""

_RUN_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)

class NativePool:
  """`threads - 1` native workers plus the calling thread. run() is one ctypes call per launch."""

  def __init__(self, threads: int, image: Any, arch: str) -> None:
    self.image, self.threads, self.pid = image, max(1, threads), os.getpid()
    from baregrad.drivers.cpu_hostmem import host_map
    # its own page, never unmapped: a worker may still read it while the interpreter tears Python objects down at exit
    self.ctx = host_map(4096)
    self.arch_name = arch
    self._libc = libc = ctypes.CDLL(None, use_errno=True)
    ctypes.c_void_p.from_address(self.ctx + SYSCALL).value = ctypes.cast(libc.syscall, ctypes.c_void_p).value
    ctypes.c_int64.from_address(self.ctx + FUTEX_NR).value = SYS_FUTEX[arch]
    ctypes.c_int64.from_address(self.ctx + YIELD_NR).value = SYS_SCHED_YIELD[arch]
    us = int(knobs.read("CPU_SPIN_US"))   # (KnobError, a ValueError, names an ill-typed setting)
    self.spin = self.spin_pauses(image, us)
    ctypes.c_int64.from_address(self.ctx + SPIN).value = self.spin
    ctypes.c_int64.from_address(self.ctx + TIMEOUT + 8).value = FINISH_TIMEOUT_NS   # (tv_sec stays 0)
    self.run_addr = image.symbol(RUN_SYMBOL)   # what native callers (the chain trampoline) call
    self._run = _RUN_FN(self.run_addr)
    worker = image.symbol(WORKER_SYMBOL)
    create = libc.pthread_create
    create.argtypes = [ctypes.POINTER(ctypes.c_ulong), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    detach = libc.pthread_detach
    detach.argtypes = [ctypes.c_ulong]
    for _ in range(self.threads - 1):
      tid = ctypes.c_ulong()
      if (err := create(ctypes.byref(tid), None, worker, self.ctx)) != 0:
        self.stop()   # the workers made so far exit
        raise OSError(err, f"pthread_create for a CPU pool worker failed: {os.strerror(err)}")
      detach(tid.value)   # nobody joins them: a worker's resources go back when it exits (stop)

  @staticmethod
  def spin_pauses(image: Any, us: int) -> int:
    """The pauses a worker spins for `us` microseconds on this machine (the pause rate is timed once per process)."""
    if us <= 0: return 1
    if not _pauses_per_us:
      pauses, n = ctypes.CFUNCTYPE(None, ctypes.c_int64)(image.symbol(PAUSES_SYMBOL)), 4096
      _pauses_per_us.append(n / max(min(_timed(pauses, n) for _ in range(3)) * 1e6, 1e-3))   # (the fastest of three runs)
    return max(1, min(int(us * _pauses_per_us[0]), 1 << 40))

  def run(self, fn_addr: int, args: int, total: int, nchunks: int) -> None:
    """Run fn(args, s, e) over [0, total) in `nchunks` chunks on the pool; returns when all are done."""
    self._run(self.ctx, fn_addr, args, total, nchunks)

  def stop(self) -> None:
    """Workers exit at their next look at the context (woken if asleep); the context page stays mapped."""
    ctypes.c_int32.from_address(self.ctx + STOP).value = 1
    g = ctypes.c_int32.from_address(self.ctx + GEN)
    g.value += 2   # a generation change wakes a sleeper's futex wait
    self._libc.syscall(ctypes.c_long(SYS_FUTEX[self.arch_name]), ctypes.c_void_p(self.ctx + GEN), FUTEX_WAKE_PRIVATE, 0x7FFFFFFF, None, None, 0)

  @staticmethod
  def arch() -> str:
    return os.uname().machine

_pauses_per_us: list[float] = []   # (measured on first use)

def _timed(f: Any, n: int) -> float:
  st = time.perf_counter()
  f(n)
  return time.perf_counter() - st

_lock = threading.Lock()
_image: list[Any] = []   # [image] once built, [None, reason] where it cannot be

def native_pool(threads: int) -> NativePool | None:
  """A native pool of `threads` threads (the caller counted), or None where it cannot be built here (no llvmlite, a
  host the ELF loader does not map, an architecture without a futex number here); `pool_unavailable()` says why."""
  arch = NativePool.arch()
  with _lock:
    if not _image:
      try:
        if arch not in SYS_FUTEX: raise OSError(f"no futex syscall number known for {arch}")
        from baregrad.drivers.cpu_compile import LLVMCompiler
        from baregrad.drivers.elf_loader import load_elf
        _image.append(load_elf(LLVMCompiler().compile(pool_ir(arch))))
      except Exception as e:   # (ImportError, CompileError, ElfLoadError, OSError): the Python pool runs everything
        _image.extend([None, f"{type(e).__name__}: {e}"])
  if _image[0] is None: return None
  try: return NativePool(threads, _image[0], arch)
  except OSError as e:
    _image[:] = [None, f"{type(e).__name__}: {e}"]
    return None

def pool_unavailable() -> str | None:
  """Why the native pool could not be built (None when it was, or was not asked for)."""
  return _image[1] if len(_image) > 1 else None
