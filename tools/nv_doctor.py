#!/usr/bin/env python3
"""NV doctor: bring an NVIDIA GPU up through the RM/UVM ioctls stage by stage and say what was seen at each one.

Stages: open (RM objects, classes, generation, windows, constant bank layout; told apart into its steps, RM client, UVM,
VA space, memory, channels and scheduling, each passed, failed at its call or not reached), memory (device and host-visible),
channels (GPFIFO, UVM registration, scheduling), copy (DMA engine both ways), launch (a multi-block grid),
shared and local memory (a shared-memory reduction, generic shared pointers, a 1 KiB private array, register spills,
dynamic shared memory at the generation's limit),
signals (GPU -> host, host -> GPU, timestamps), graph (dependent launches replayed). After every stage the new
kernel-log lines (/dev/kmsg) are printed and Xid lines decoded (class method by name, fault address against the
device's allocations); where the log cannot be read it says why. A channel error fails the stage, the device
recovers, the next stage runs.

  python tools/nv_doctor.py [--mock [--arch sm_90]] [--device NV:0] [--replays 200]
IOCTL_TRACE=1 prints every ioctl decoded. Exit status 0 when every stage passed."""
from __future__ import annotations
import argparse, os, sys, time
from typing import Any, Callable
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from doctor_steps import StepPort, nv_step, NV_STEPS  # noqa: E402

def main(argv: list[str] | None = None, mock: Any = None) -> int:
  """`mock`: a MockNVGPU to run on (tests hand in one that misbehaves); --mock makes a fresh one."""
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--mock", action="store_true", help="use the mock GPU instead of /dev/nvidia*")
  ap.add_argument("--arch", default=None, help="with --mock: the generation to emulate (sm_80 .. sm_120)")
  ap.add_argument("--device", default="NV")
  ap.add_argument("--replays", type=int, default=200, help="graph replays in the last stage")
  a = ap.parse_args(argv)
  import numpy as np
  from baregrad.drivers.port import make_port
  from baregrad.drivers.nv import NVDevice, hw
  from baregrad.drivers.nv.faults import KernelLog, parse_xid, decode
  from baregrad.drivers.nv.testkernels import KERNELS, spill_ptx, dynamic_shared_ptx
  from baregrad.hcq import HCQSignal
  from baregrad.hcq.graph import HCQGraph
  t0 = time.perf_counter()
  if a.mock and mock is None:
    from baregrad.drivers.mock.nv import MockNVGPU
    mock = MockNVGPU(arch=a.arch)
  port = make_port(mock)
  log = KernelLog(port)   # our own reader: what the kernel says while we go
  results: list[tuple[str, bool]] = []
  dev: Any = None

  def klog(memories: Any = ()) -> None:
    if log.unreadable: print(f"  kernel log: unreadable ({log.unreadable})"); return
    lines = log.new_lines(lambda s: "NVRM" in s or "nvidia" in s.lower())
    for line in lines:
      r = parse_xid(line)
      print(f"  kernel log: {line}" + (f"\n    -> {decode(r, memories)}" if r is not None else ""))
    if not lines: print("  kernel log: no new lines")

  def stage(name: str, fn: Callable[[], str]) -> None:
    print(f"\n== {name}", flush=True)
    t = time.perf_counter()
    try:
      print(fn())
      ok = True
    except Exception as e:
      print(f"FAILED: {type(e).__name__}: {e}")
      ok = False
    print(f"  {'ok' if ok else 'FAILED'} in {time.perf_counter() - t:.3f} s")
    klog(getattr(dev, "memories", ()))
    results.append((name, ok))

  def open_dev() -> str:
    nonlocal dev
    steps = StepPort(port, nv_step, NV_STEPS)   # the open told apart into its steps by the calls each makes
    try: dev = NVDevice(a.device, port=steps)
    except Exception as e:
      print(steps.report(e))
      raise
    finally: steps.recording = False
    w, L = dev.windows, dev.cb_layout
    return "\n".join([steps.report(),
      f"{'MOCK ' if mock else ''}GPU {dev.index}: {dev.family} {dev.arch}, {dev.sm_count} SMs (GPC x TPC x SM), arch id {dev.arch_id:#x}, "
      f"driver {dev.driver_version}, uuid {dev.uuid.hex()}",
      f"classes: gpfifo {hw.class_name(dev.gpfifo_class)}, compute {hw.class_name(dev.compute_class)} (QMD v0{dev.qmd_version}), "
      f"copy {hw.class_name(dev.dma_class)}",
      f"shader windows: shared {w.shared:#x}, local {w.local:#x}; constant bank 0: ntid {L.ntid:#x}, nctaid {L.nctaid:#x}, "
      f"local window {L.local_window:#x}, stack {L.stack:#x}, parameters {L.params:#x}",
      f"kernel log: {'readable' if dev.klog and dev.klog.fd is not None else 'unreadable: ' + str(dev.klog.unreadable if dev.klog else '?')}"])
  stage("open", open_dev)
  if dev is None:
    print("\nthe device did not open; nothing else to try")
    return 1

  n = 1 << 16
  bufs: dict[str, Any] = {}
  def memory() -> str:
    bufs["a"], bufs["b"] = dev.allocator.alloc(4 * n), dev.allocator.alloc(4 * n)
    host = dev._alloc_shared(4096)
    return (f"device buffers at {bufs['a'].va_addr:#x}, {bufs['b'].va_addr:#x} ({4 * n} bytes each); host-visible page at "
            f"GPU VA {host.va_addr:#x} = CPU {host.cpu_addr:#x}\n" + "\n".join(f"  {m!r}" for m in dev.memories[-4:]))
  stage("memory", memory)

  def channels() -> str:
    lines = [f"  {c.name}: RM handle {c.handle:#x}, work-submit token {c.token}, UVM-registered range {c.uvm_va:#x}+"
             f"{64 << 20:#x}, {c.entries}-entry GPFIFO" for c in dev.channels.values()]
    return "\n".join(lines) + "\n" + dev.queue_state()
  stage("channels", channels)

  def copy() -> str:
    x = np.random.default_rng(0).integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    t = time.perf_counter()
    dev.allocator._copyin(bufs["a"], memoryview(x).cast("B"))
    y = np.zeros_like(x)
    dev.allocator._copyout(memoryview(y).cast("B"), bufs["a"])
    dt = time.perf_counter() - t
    if not (x == y).all(): raise AssertionError(f"round trip differs in {int((x != y).sum())} of {n} words")
    return f"{4 * n} bytes in and out in {dt:.4f} s; round trip exact"
  stage("copy (DMA engine)", copy)

  def run(name: str, *args: Any, src: str = KERNELS, **kw: Any) -> Any:
    prg = dev.runtime(dev, name, src.encode())
    prg(*args, **kw)
    dev.synchronize()
    return prg

  def get(b: Any, count: int) -> Any:
    out = np.zeros(count, np.uint32)
    dev.allocator._copyout(memoryview(out).cast("B"), b)
    return out

  def launch() -> str:
    total = 64 * 32 * 16 * 2
    prg = run("idx", bufs["a"], global_size=(64, 16, 1), local_size=(32, 2, 1), vals=(total,))
    got = get(bufs["a"], total)
    bad = int((got != np.arange(total)).sum())
    if bad: raise AssertionError(f"{bad} of {total} elements wrong (first block's only? %ntid/%nctaid from constant bank 0): {got[:8]}")
    return f"1024 blocks of 64 threads: all {total} elements right (regs {prg.regs}, code at {prg.code_va:#x})"
  stage("multi-block launch", launch)

  def shared_local() -> str:
    x = np.random.default_rng(1).integers(0, 1000, 96 * 128).astype(np.uint32)
    dev.allocator._copyin(bufs["b"], memoryview(x).cast("B"))
    prg = run("blocksum", bufs["a"], bufs["b"], global_size=(96, 1, 1), local_size=(128, 1, 1))
    if not (get(bufs["a"], 96) == x.reshape(96, 128).sum(1)).all(): raise AssertionError("shared-memory reduction wrong")
    out = [f"shared reduction: 96 blocks right ({prg.shared_total} bytes of shared memory per block)"]
    run("generic_shared", bufs["a"], global_size=(8, 1, 1), local_size=(64, 1, 1))
    want = (np.arange(8)[:, None] * 64 + np.arange(63, -1, -1)[None, :]).reshape(-1)
    if not (get(bufs["a"], 512) == want).all(): raise AssertionError("generic pointers into shared memory wrong")
    out.append("generic shared pointers: right")
    prg = run("local_array", bufs["a"], global_size=(4, 1, 1), local_size=(64, 1, 1), vals=(5,))
    gid = np.arange(256)
    if not (get(bufs["a"], 256) == (2 * ((5 + gid % 64) % 256) * gid).astype(np.uint32)).all(): raise AssertionError("local array wrong")
    out.append(f"1 KiB private array (and cvta.local): right ({prg.local_bytes} bytes of local memory per thread)")
    xs = np.random.default_rng(2).integers(0, 1 << 32, 104, dtype=np.uint64).astype(np.uint32)
    dev.allocator._copyin(bufs["b"], memoryview(xs).cast("B"))
    prg = run("spill", bufs["a"], bufs["b"], src=spill_ptx(), global_size=(2, 1, 1), local_size=(32, 1, 1))
    want64, g64, M = np.zeros(64, np.uint64), np.arange(64, dtype=np.uint64), np.uint64(0xFFFFFFFF)
    for i in reversed(range(40)): want64 = ((want64 * np.uint64(31)) & M) ^ ((xs[np.arange(64) + i].astype(np.uint64) + g64) & M)
    if not (get(bufs["a"], 64) == want64.astype(np.uint32)).all(): raise AssertionError("register spills wrong")
    out.append(f"register spills: right ({prg.local_bytes} bytes of local memory per thread)")
    nbytes = dev.max_shared_mem   # dynamic shared memory at the generation's limit (QMD SHARED_MEMORY_SIZE, SM_CONFIG)
    prg = run("dynsmem", bufs["a"], src=dynamic_shared_ptx(nbytes), global_size=(2, 1, 1), local_size=(128, 1, 1))
    if not (get(bufs["a"], 256) == nbytes // 4 - 1 - np.arange(256) % 128 + nbytes).all():
      raise AssertionError(f"dynamic shared memory ({nbytes} bytes a block) wrong")
    out.append(f"dynamic shared memory: right ({nbytes} bytes a block, {prg.shared_total} in the launch)")
    return "\n".join(out)
  stage("shared and local memory", shared_local)

  def signals() -> str:
    s, t = HCQSignal(dev), HCQSignal(dev)
    dev.compute_queue_t().wait(dev.timeline_signal, dev.timeline_value - 1).signal(s, 42).submit(dev)
    s.wait(42, timeout_ms=10000)
    dev.copy_queue_t().wait(s, 43).signal(t, 1).submit(dev)
    s.value = 43   # the host releases what the copy channel waits on
    t.wait(1, timeout_ms=10000)
    return f"GPU -> host: {s.va_addr:#x} = {s.value}; host -> GPU -> host: {t.va_addr:#x} = {t.value}; timestamps {s.timestamp} <= {t.timestamp}"
  stage("signals", signals)

  def graph() -> str:
    m = 256
    S = dev.runtime(dev, "step", KERNELS.encode())
    a0 = bufs["a"].offset(0, 4 * m)
    dev.allocator._copyin(a0, memoryview(np.arange(m, dtype=np.uint32)).cast("B"))
    b, c = bufs["b"].offset(0, 4 * m), bufs["b"].offset(4 * m, 4 * m)
    g = HCQGraph(dev, [(S, [b, a0], (3, 1), (2, 1, 1), (128, 1, 1)), (S, [c, b], (5, 2), (2, 1, 1), (128, 1, 1)),
                       (S, [a0, c], (1, 7), (2, 1, 1), (128, 1, 1))])
    want = np.arange(m, dtype=np.uint64)
    t = time.perf_counter()
    for _ in range(a.replays):
      g.replay()
      want = ((want * np.uint64(3) + np.uint64(1)) * np.uint64(5) + np.uint64(9)) & np.uint64(0xFFFFFFFF)
    dev.synchronize()
    dt = time.perf_counter() - t
    got = get(a0, m)
    if not (got == want.astype(np.uint32)).all(): raise AssertionError(f"{int((got != want).sum())} of {m} wrong after {a.replays} replays")
    return f"3 dependent launches (barriers between), {a.replays} replays: right; {dt / a.replays * 1e6:.0f} us per replay"
  stage("replayed graph", graph)

  dev.close()
  log.close()
  failed = [n for n, ok in results if not ok]
  print(f"\n{'OK' if not failed else 'FAILED: ' + ', '.join(failed)} in {time.perf_counter() - t0:.2f} s")
  return 0 if not failed else 1

if __name__ == "__main__": sys.exit(main())
