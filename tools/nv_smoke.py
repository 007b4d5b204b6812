#!/usr/bin/env python3
"""NV smoke test: open the GPU through the RM/UVM ioctls, allocate, copy in, launch a kernel, signal, copy out, and
print what was seen at each step. Runs on a machine with an NVIDIA GPU and its open kernel modules, or with --mock on
the mock GPU (baregrad.drivers.mock.nvgpu). IOCTL_TRACE=1 prints every ioctl decoded.

  python tools/nv_smoke.py [--mock] [--n 4096] [--device NV:0]"""
from __future__ import annotations
import argparse, os, sys, time
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

KERNEL = r"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry add_one(.param .u64 out, .param .u64 inp, .param .s64 n) {
  .reg .b32 %r<8>; .reg .b64 %rd<10>; .reg .pred %p<2>;
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [inp]; ld.param.s64 %rd7, [n];
  cvta.to.global.u64 %rd1, %rd1; cvta.to.global.u64 %rd2, %rd2;
  mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x;
  mad.lo.s32 %r4, %r1, %r2, %r3;
  cvt.s64.s32 %rd8, %r4;
  setp.ge.s64 %p1, %rd8, %rd7;
  @%p1 bra DONE;
  mul.wide.s32 %rd3, %r4, 4;
  add.s64 %rd4, %rd2, %rd3; add.s64 %rd5, %rd1, %rd3;
  ld.global.u32 %r5, [%rd4];
  add.s32 %r5, %r5, 1;
  st.global.u32 [%rd5], %r5;
DONE:
  ret;
}
"""

def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--mock", action="store_true", help="use the mock GPU instead of /dev/nvidia*")
  ap.add_argument("--n", type=int, default=4096, help="int32 elements to move")
  ap.add_argument("--device", default="NV")
  a = ap.parse_args(argv)
  import numpy as np
  from baregrad.drivers.port import make_port
  from baregrad.drivers.nv import NVDevice
  from baregrad.hcq import HCQSignal
  step = lambda s: print(f"\n== {s}", flush=True)
  t0 = time.perf_counter()
  step("open")
  mock = None
  if a.mock:
    from baregrad.drivers.mock.nvgpu import MockNVGPU
    mock = MockNVGPU()
  try: dev = NVDevice(a.device, port=make_port(mock))
  except Exception as e:
    print(f"cannot open {a.device}: {type(e).__name__}: {e}")
    return 1
  print(f"{'MOCK ' if mock else ''}GPU {dev.index}: {dev.arch}, {dev.sm_count} SMs (GPC x TPC x SM), arch id {dev.arch_id:#x}, driver {dev.driver_version}, "
        f"uuid {dev.uuid.hex()}")
  print(f"classes: gpfifo {dev.gpfifo_class:#x} compute {dev.compute_class:#x} dma {dev.dma_class:#x}; tokens "
        + ", ".join(f"{n}={c.token}" for n, c in dev.channels.items()) + f"; doorbell at {dev.doorbell_addr:#x}")
  print(f"opened in {time.perf_counter() - t0:.3f} s")

  step("allocate")
  nbytes = 4 * a.n
  inp, out = dev.allocator.alloc(nbytes), dev.allocator.alloc(nbytes)
  print(f"device buffers: in {inp.va_addr:#x}, out {out.va_addr:#x} ({nbytes} bytes each)")

  step("copy in (DMA copy engine, through staging)")
  x = np.arange(a.n, dtype=np.int32) * 3
  t = time.perf_counter()
  dev.allocator._copyin(inp, memoryview(x).cast("B"))
  dev.synchronize()
  print(f"{nbytes} bytes in {time.perf_counter() - t:.4f} s; timeline {dev.timeline_signal.value}")

  step("launch (QMD)")
  try:
    prg = dev.runtime(dev, "add_one", KERNEL.encode())
    print(f"program: image {prg.image.va:#x}, code {prg.code_va:#x}, regs {prg.regs}, params at cbank0+{prg.param_off:#x} {prg.params}")
    secs = prg(out, inp, global_size=((a.n + 127) // 128, 1, 1), local_size=(128, 1, 1), vals=(a.n,), wait=True)
    print(f"kernel time {secs * 1e6:.1f} us (GPU timestamps)")
    launched = True
  except Exception as e:
    print(f"launch failed: {type(e).__name__}: {e}")
    launched = False

  step("signal")
  s = HCQSignal(dev)
  dev.compute_queue_t().wait(dev.timeline_signal, dev.timeline_value - 1).signal(s, 42).submit(dev)
  s.wait(42, timeout_ms=10000)
  print(f"signal {s.va_addr:#x} = {s.value}, timestamp {s.timestamp} ticks")

  step("copy out")
  y = np.zeros(a.n, np.int32)
  dev.allocator._copyout(memoryview(y).cast("B"), out if launched else inp)
  want = x + 1 if launched else x
  ok = bool((y == want).all())
  print(f"first values {y[:6].tolist()}; {'matches' if ok else 'MISMATCH with'} the expected result")

  step("queue state")
  print(dev.queue_state())
  if mock is not None:
    print("\nmock log:", *(mock.log[-5:] or ["(empty)"]), sep="\n  ")
  dev.close()
  print(f"\n{'OK' if ok and launched else 'FAILED'} in {time.perf_counter() - t0:.2f} s")
  return 0 if ok and launched else 1

if __name__ == "__main__": sys.exit(main())
