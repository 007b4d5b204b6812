#!/usr/bin/env python3
"""AMD bring-up, stage by stage: /dev/kfd and the KFD version, the topology (and the queue sizes the kernel derives from
it, next to ours), opening the device (told apart into its steps: KFD, VM and apertures, memory, events, queues, each
passed, failed at its call or not reached), memory of each kind, SDMA copies, the compute
queue's PM4 signals and timestamps (and the GPU timestamp rate measured against the host clock), a host thread asleep
in AMDKFD_IOC_WAIT_EVENTS woken by the GPU, a kernel dispatch, and a graph of dependent kernels replayed. Each stage
says what it saw; a failing stage prints the error and the last ioctls, and the later stages that can still run do.

Runs on a machine with an AMD GPU (amdgpu + amdkfd loaded, the user in the 'render' group), or with --mock on the mock
GPU (baregrad.drivers.mock.amd; --arch gfx1100|gfx942). IOCTL_TRACE=1 prints every call as it happens.

  python tools/amd_doctor.py [--mock] [--arch gfx1100] [--device AMD:0] [--n 65536]"""
from __future__ import annotations
import argparse, os, sys, time, traceback
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from doctor_steps import StepPort, amd_step, AMD_STEPS  # noqa: E402

ADD_ONE_LL = r"""
define amdgpu_kernel void @add_one(ptr addrspace(1) %out, ptr addrspace(1) %inp, i32 %n) "amdgpu-flat-work-group-size"="256,256" {
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %b = mul i32 %wg, 256
  %i = add i32 %b, %tid
  %ok = icmp slt i32 %i, %n
  br i1 %ok, label %body, label %done
body:
  %pi = getelementptr i32, ptr addrspace(1) %inp, i32 %i
  %v = load i32, ptr addrspace(1) %pi, align 4
  %v1 = add i32 %v, 1
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %v1, ptr addrspace(1) %po, align 4
  br label %done
done:
  ret void
}
declare i32 @llvm.amdgcn.workgroup.id.x()
declare i32 @llvm.amdgcn.workitem.id.x()
"""

class Recorder:
  """Keeps the last calls a TracingPort reports (printed when a stage fails)."""
  def __init__(self, echo: bool) -> None: self.lines, self.echo = [], echo
  def __call__(self, s: str) -> None:
    self.lines = (self.lines + [s])[-12:]
    if self.echo: print("   " + s, file=sys.stderr)

def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--mock", action="store_true", help="use the mock GPU instead of /dev/kfd")
  ap.add_argument("--arch", default="gfx1100", help="the mock GPU's target (gfx1100 or gfx942)")
  ap.add_argument("--device", default="AMD")
  ap.add_argument("--n", type=int, default=65536, help="int32 elements to move and compute on")
  a = ap.parse_args(argv)
  import numpy as np
  from baregrad.drivers.port import TracingPort, MockPort, RealPort
  from baregrad.helpers import getenv
  rec = Recorder(bool(getenv("IOCTL_TRACE", 0)))
  mock = None
  if a.mock:
    from baregrad.drivers.mock.amd import MockAMDGPU
    mock = MockAMDGPU(arch=a.arch)
  port = TracingPort(MockPort(mock) if mock is not None else RealPort(), out=rec)
  results: list[tuple[str, bool, str]] = []
  state: dict = {}

  def stage(name: str):
    def run(fn):
      print(f"\n== {name}", flush=True)
      t = time.perf_counter()
      try:
        msg = fn() or ""
        ok = True
      except Exception as e:
        ok, msg = False, f"{type(e).__name__}: {e}"
        print(f"FAILED: {msg}")
        if os.environ.get("DOCTOR_TRACEBACK"): traceback.print_exc()
        if rec.lines and not msg.startswith("RuntimeError: skipped"): print("last calls:\n" + "\n".join("  " + l for l in rec.lines[-8:]))
        rec.lines = []
      dt = time.perf_counter() - t
      print(f"-> {'ok' if ok else 'FAILED'} ({dt:.3f} s){': ' + msg if ok and msg else ''}")
      results.append((name, ok, msg))
      return ok
    return run

  @stage("1. /dev/kfd and the KFD ioctl version")
  def _kfd():
    from baregrad.ctypes_autogen import kfd
    if mock is None:
      st = os.stat("/dev/kfd") if os.path.exists("/dev/kfd") else None
      print(f"/dev/kfd: {'mode ' + oct(st.st_mode & 0o777) if st else 'missing (amdgpu/amdkfd not loaded?)'}; "
            f"user groups {os.getgroups()}")
    fd = port.open("/dev/kfd", os.O_RDWR)
    v = kfd.struct_kfd_ioctl_get_version_args()
    port.ioctl(fd, kfd.AMDKFD_IOC_GET_VERSION, v, "AMDKFD_IOC_GET_VERSION")
    port.close(fd)
    return f"KFD ioctl interface {v.major_version}.{v.minor_version} (this driver speaks major 1)"

  @stage("2. topology (sysfs) and queue sizes")
  def _topo():
    from baregrad.drivers.amd.topology import read_topology, queue_sizes, TARGETS
    nodes = read_topology(port)
    for n in nodes:
      p = n.props
      if not n.is_gpu:
        print(f"node {n.index}: CPU, {p.get('cpu_cores_count')} cores")
        continue
      t = TARGETS.get(p["gfx_target_version"])
      qs = queue_sizes(dict(p, ctl_stack_size=0, cwsr_size=0))
      print(f"node {n.index}: gpu_id {n.gpu_id:#x} {n.name or '?'} {n.target} ({'supported' if t else 'NOT supported'}), "
            f"{p['simd_count'] // max(p['simd_per_cu'], 1)} CUs, {p['simd_count']} SIMDs, wave{p['wave_front_size']}, LDS {p['lds_size_in_kb']} KiB, "
            f"{p.get('num_xcc', 1)} XCC(s), {p['num_sdma_engines']} SDMA engines x {p['num_sdma_queues_per_engine']} queues, renderD{p['drm_render_minor']}")
      if p.get("cwsr_size"):
        same = (qs.ctl_stack_size, qs.cwsr_size) == (p["ctl_stack_size"], p["cwsr_size"])
        print(f"  kernel's ctl_stack_size {p['ctl_stack_size']:#x} cwsr_size {p['cwsr_size']:#x}; ours {qs.ctl_stack_size:#x} {qs.cwsr_size:#x}"
              f" ({'agree' if same else 'DIFFER: the kernel wins'})")
      else: print(f"  (kernel older than 6.12: no cwsr_size in sysfs) ours: ctl_stack_size {qs.ctl_stack_size:#x} cwsr_size {qs.cwsr_size:#x}")
    gpus = [n for n in nodes if n.is_gpu]
    if not gpus: raise RuntimeError("no GPU node in the topology")
    return f"{len(nodes)} nodes, {len(gpus)} GPU(s)"

  @stage("3. open the device (render node, ACQUIRE_VM, apertures, memory window, queues, events)")
  def _open():
    from baregrad.drivers.amd import AMDDevice
    steps = StepPort(port, amd_step, AMD_STEPS)   # the open told apart into its steps by the calls each makes
    try: dev = AMDDevice(a.device, port=steps)
    except Exception as e:
      print(steps.report(e))
      raise
    finally: steps.recording = False
    print(steps.report())
    state["dev"] = dev
    ap_ = dev.apertures
    print(f"{dev.target.name} gpu_id {dev.gpu_id:#x} via {dev.render_path}; GPUVM {ap_['gpuvm_base']:#x}-{ap_['gpuvm_limit']:#x}, "
          f"LDS aperture {ap_['lds_base']:#x}, scratch aperture {ap_['scratch_base']:#x}")
    print(f"address window {dev.window[0]:#x}+{dev.window[1]:#x}; queues {dev.queue_ids}; doorbells mapped at {dev.doorbells:#x} "
          f"(kfd offset {dev.doorbell_mmap_offset:#x}); events: signal {dev.event_id} (mailbox {dev.event_mailbox:#x}), memory "
          f"{dev.memory_event}, hw exception {dev.hw_event}")
    s = dev.sizes
    return f"CWSR {s.cwsr_total:#x} bytes ({s.num_xcc} XCC), EOP {s.eop_buffer_size:#x}"

  def need_dev():
    if "dev" not in state: raise RuntimeError("skipped: the device did not open")
    return state["dev"]

  @stage("4. memory: VRAM (GPU only and CPU-visible), host userptr, GTT")
  def _mem():
    import ctypes
    dev = need_dev()
    out = []
    for dom, cpu in (("vram", False), ("vram", True), ("userptr", True), ("gtt", True)):
      m = dev._gpu_alloc(1 << 20, dom, cpu_access=cpu)
      if m.cpu is not None:
        ctypes.c_uint32.from_address(m.cpu).value = 0x600DF00D
        assert ctypes.c_uint32.from_address(m.cpu).value == 0x600DF00D
      out.append(f"{dom}{'+cpu' if cpu else ''}@{m.va:#x}")
      dev._gpu_free(m)
    return ", ".join(out)

  @stage("5. SDMA copies (host -> VRAM -> host)")
  def _sdma():
    dev = need_dev()
    x = (np.arange(a.n, dtype=np.int64) * 2654435761 % (1 << 31)).astype(np.int32)
    buf = dev.allocator.alloc(4 * a.n)
    t = time.perf_counter()
    dev.allocator._copyin(buf, memoryview(x).cast("B"))
    y = np.zeros_like(x)
    dev.allocator._copyout(memoryview(y).cast("B"), buf)
    dt = time.perf_counter() - t
    state["buf"], state["x"] = buf, x
    if not (x == y).all(): raise RuntimeError(f"round trip differs at {int(np.argmax(x != y))}")
    return f"{2 * 4 * a.n} bytes moved in {dt * 1e3:.1f} ms"

  @stage("6. compute queue: PM4 signals, timestamps, GPU timestamp rate")
  def _pm4():
    from baregrad.hcq import HCQSignal
    dev = need_dev()
    s, t0, t1 = HCQSignal(dev), HCQSignal(dev), HCQSignal(dev)
    dev.compute_queue_t().timestamp(t0).signal(s, 1).submit(dev)
    s.wait(1, timeout_ms=10000)
    h0 = time.perf_counter_ns()
    time.sleep(0.05)
    dev.compute_queue_t().timestamp(t1).signal(s, 2).submit(dev)
    s.wait(2, timeout_ms=10000)
    h1 = time.perf_counter_ns()
    rate = (t1.timestamp - t0.timestamp) / max((h1 - h0) / 1000, 1)
    msg = f"timestamps {t0.timestamp} -> {t1.timestamp}: {rate:.1f} ticks/us measured, driver assumes {dev.ticks_per_us}"
    if not 0.5 * dev.ticks_per_us < rate < 2 * dev.ticks_per_us: raise RuntimeError(msg + " (ticks_per_us is wrong for this GPU)")
    return msg

  @stage("7. a host thread asleep in AMDKFD_IOC_WAIT_EVENTS, woken by the GPU")
  def _events():
    import threading
    from baregrad.hcq import HCQSignal
    dev = need_dev()
    gate, done = HCQSignal(dev), HCQSignal(dev)
    dev.copy_queue_t().wait(gate, 1).signal(done, 1).submit(dev)
    threading.Timer(0.02, lambda: setattr(gate, "value", 1)).start()
    t = time.perf_counter()
    done.wait(1, timeout_ms=10000)
    return f"woke {(time.perf_counter() - t) * 1e3:.1f} ms after starting to wait (the gate opened at 20 ms)"

  @stage("8. kernel dispatch (LLVM IR -> code object -> AQL dispatch packet)")
  def _kernel():
    from baregrad.drivers.amd_compile import AMDCompiler
    dev = need_dev()
    lib = AMDCompiler(dev.target.name).compile(ADD_ONE_LL)
    prg = dev.runtime(dev, "add_one", lib)
    kd = prg.descriptor
    print(f"kernel descriptor at {prg.kd_va:#x}: kernarg {kd.kernarg_size} bytes, user SGPRs {kd.user_sgprs}, LDS {kd.group_segment_fixed_size}, "
          f"wave{32 if kd.wavefront_size32 else 64}")
    out = dev.allocator.alloc(4 * a.n)
    secs = prg(out, state.get("buf") or out, global_size=((a.n + 255) // 256, 1, 1), local_size=(256, 1, 1), vals=(a.n,), wait=True)
    y = np.zeros(a.n, np.int32)
    dev.allocator._copyout(memoryview(y).cast("B"), out)
    if "x" in state and not (y == state["x"] + 1).all(): raise RuntimeError(f"wrong result at {int(np.argmax(y != state['x'] + 1))}")
    state["prg"], state["out"] = prg, out
    return f"kernel time {secs * 1e6:.1f} us (GPU timestamps)"

  @stage("9. graph: 2 dependent launches (a barrier between them), replayed 20 times, one submit each")
  def _graph():
    from baregrad.hcq.graph import HCQGraph
    dev = need_dev()
    if "prg" not in state: raise RuntimeError("skipped: no kernel")
    prg, out, buf = state["prg"], state["out"], state["buf"]
    g = HCQGraph(dev, [(prg, [out, buf], (a.n,), ((a.n + 255) // 256, 1, 1), (256, 1, 1)),
                       (prg, [buf, out], (a.n,), ((a.n + 255) // 256, 1, 1), (256, 1, 1))])
    for _ in range(20): g.replay()
    dev.synchronize()
    y = np.zeros(a.n, np.int32)
    dev.allocator._copyout(memoryview(y).cast("B"), buf)
    want = state["x"] + 40
    if not (y == want).all(): raise RuntimeError(f"wrong result at {int(np.argmax(y != want))}: {y[:4]} vs {want[:4]}")
    return "each replay saw the previous one's results"

  @stage("10. scratch: a 1 KiB private array per work-item and register spills (the queue's amd_queue_t scratch fields)")
  def _scratch():
    from baregrad.drivers.amd_compile import AMDCompiler
    from baregrad.drivers.amd import scratch
    from baregrad.drivers.amd.testkernels import LOCAL_ARRAY, spill_ll, local_array_expected, spill_expected
    dev = need_dev()
    la = dev.runtime(dev, "local_array", AMDCompiler(dev.target.name).compile(LOCAL_ARRAY))
    sp = dev.runtime(dev, "spill", AMDCompiler(dev.target.name).compile(spill_ll()))
    print(f"private segment: local_array {la.descriptor.private_segment_fixed_size} bytes, spill {sp.descriptor.private_segment_fixed_size} bytes; "
          f"{scratch.describe(dev.scratch[0], dev.scratch[1].va)}")
    n = 16 * 64
    out, inp = dev.allocator.alloc(4 * n), dev.allocator.alloc(4 * (n + 40))
    x = (np.arange(n + 40, dtype=np.int64) * 2654435761 % (1 << 32)).astype(np.uint32)
    dev.allocator._copyin(inp, memoryview(x).cast("B"))
    y = np.zeros(n, np.uint32)
    la(out, global_size=(16, 1, 1), local_size=(64, 1, 1), vals=(5,), wait=True)
    dev.allocator._copyout(memoryview(y).cast("B"), out)
    want = np.array(local_array_expected(5, n), np.uint32)
    if not (y == want).all(): raise RuntimeError(f"private array: wrong at {int(np.argmax(y != want))}")
    sp(out, inp, global_size=(16, 1, 1), local_size=(64, 1, 1), wait=True)
    dev.allocator._copyout(memoryview(y).cast("B"), out)
    if not (y == np.array(spill_expected(x.tolist(), n), np.uint32)).all(): raise RuntimeError("spills: wrong result")
    return "both right"

  print("\n== queue state")
  if "dev" in state:
    print(state["dev"].queue_state())
  if mock is not None: print("mock dmesg:\n" + "\n".join("  " + l for l in (mock.log[-8:] or ["(empty)"])))
  if "dev" in state: state["dev"].close()
  bad = [n for n, ok, _ in results if not ok]
  print(f"\n{len(results) - len(bad)}/{len(results)} stages ok" + (f"; failed: {', '.join(bad)}" if bad else ""))
  return 1 if bad else 0

if __name__ == "__main__": sys.exit(main())
