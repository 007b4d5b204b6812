"""A native trampoline that runs a chain of tiny CPU kernels in one call.

A jit replay on the CPU is a command buffer of EXEC commands separated by BARRIERs (drivers/cpu_encoding.py). Run from
Python, every kernel costs one ctypes call (argument conversion, a GIL release and reacquire) plus the loop around
it: a few µs, more than a tiny kernel. The trampoline reads the same encoded commands straight from the ring and calls each
kernel the way the queue does (`fxn(args, 0, global_size[0])`, the whole parallel axis on this thread), so a chain of
N kernels is one ctypes call.

    int64_t baregrad_cpu_chain(const uint32_t *ws, int64_t p, int64_t end, const int64_t *chunks, void *pool,
                               void (*pool_run)(void *pool, void *fn, void *args, int64_t total, int64_t n))

runs the commands in words [p, end): an EXEC calls its kernel (skipped when its global size is 0), a BARRIER is a
no-op (the kernels run in order); it stops at the first other command, or an EXEC that does not fit before `end`, and
returns the word offset where it stopped (`end` when all ran). `chunks` (may be null: all 1) gives, per EXEC in order,
the chunks to split its parallel axis into: above 1 the kernel goes to the native thread pool (drivers/cpu_pool.py),
which returns when every chunk is done, so the order still holds. The caller decides which commands may run this way
(known costs; no profiling). It is LLVM IR compiled once per process with the CPU device's own compiler and mapped with
the ELF loader, like any kernel."""
from __future__ import annotations
import ctypes, threading
from typing import Any, Callable

CHAIN_SYMBOL = "baregrad_cpu_chain"
_CHAIN_FN = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                             ctypes.c_void_p)

def chain_ir(exec_hdr: int, barrier_hdr: int, exec_words: int, fxn_at: int, args_at: int, gx_at: int) -> str:
  """The trampoline's LLVM IR for a command encoding: header words of EXEC and BARRIER, the EXEC command's length in
  words and the word offsets (from its header) of its 64-bit kernel address, 64-bit args address and 32-bit gx.
  64-bit fields are (lo, hi) word pairs: one little-endian i64 load (x86-64 and arm64 are little-endian)."""
  return f"""
define i64 @{CHAIN_SYMBOL}(ptr %ws, i64 %p0, i64 %end, ptr %chunks, ptr %pool, ptr %pool_run) {{
entry:
  %haschunks = icmp ne ptr %chunks, null
  br label %loop
loop:
  %p = phi i64 [ %p0, %entry ], [ %p.exec, %next ], [ %p.bar, %bar ]
  %k = phi i64 [ 0, %entry ], [ %k1, %next ], [ %k, %bar ]
  %more = icmp slt i64 %p, %end
  br i1 %more, label %head, label %done
head:
  %hp = getelementptr inbounds i32, ptr %ws, i64 %p
  %h = load i32, ptr %hp, align 4
  switch i32 %h, label %done [ i32 {exec_hdr}, label %exec
                               i32 {barrier_hdr}, label %bar ]
bar:
  %p.bar = add i64 %p, 1
  br label %loop
exec:
  %p.exec = add i64 %p, {exec_words}
  %fits = icmp sle i64 %p.exec, %end
  br i1 %fits, label %load, label %done
load:
  %fp = getelementptr inbounds i32, ptr %hp, i64 {fxn_at}
  %fa = load i64, ptr %fp, align 4
  %ap = getelementptr inbounds i32, ptr %hp, i64 {args_at}
  %aa = load i64, ptr %ap, align 4
  %gp = getelementptr inbounds i32, ptr %hp, i64 {gx_at}
  %g32 = load i32, ptr %gp, align 4
  %gx = zext i32 %g32 to i64
  %any = icmp ne i64 %gx, 0
  br i1 %any, label %call, label %next
call:
  %f = inttoptr i64 %fa to ptr
  %a = inttoptr i64 %aa to ptr
  br i1 %haschunks, label %split, label %whole
split:
  %np = getelementptr inbounds i64, ptr %chunks, i64 %k
  %n = load i64, ptr %np, align 8
  %many = icmp sgt i64 %n, 1
  br i1 %many, label %pooled, label %whole
pooled:
  call void %pool_run(ptr %pool, ptr %f, ptr %a, i64 %gx, i64 %n)
  br label %next
whole:
  call void %f(ptr %a, i64 0, i64 %gx)
  br label %next
next:
  %k1 = add i64 %k, 1
  br label %loop
done:
  ret i64 %p
}}
"""

_lock = threading.Lock()
_loaded: dict[tuple, Any] = {}   # encoding -> (image, callable) or (None, reason): built once per process

def chain_runner(exec_hdr: int, barrier_hdr: int, exec_words: int, fxn_at: int, args_at: int, gx_at: int) -> Callable[..., int] | None:
  """The compiled trampoline for this encoding as a ctypes callable (ws address, p, end, chunks, pool context,
  pool run function) -> stop offset, or None where
  it cannot be built here (no llvmlite, a host the ELF loader does not map); `chain_unavailable()` says why."""
  key = (exec_hdr, barrier_hdr, exec_words, fxn_at, args_at, gx_at)
  if (got := _loaded.get(key)) is not None: return got[1]
  with _lock:
    if (got := _loaded.get(key)) is None:
      try:
        from baregrad.drivers.cpu_compile import LLVMCompiler
        from baregrad.drivers.elf_loader import load_elf
        image = load_elf(LLVMCompiler().compile(chain_ir(*key)))
        got = (image, _CHAIN_FN(image.symbol(CHAIN_SYMBOL)))
      except Exception as e:  # (ImportError, CompileError, ElfLoadError, OSError): the per-kernel path still runs everything
        got = (f"{type(e).__name__}: {e}", None)
      _loaded[key] = got
  return got[1]

def chain_unavailable() -> str | None:
  """Why a trampoline could not be built (None when every one asked for was)."""
  for img, fn in _loaded.values():
    if fn is None: return img
  return None
