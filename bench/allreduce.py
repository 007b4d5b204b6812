#!/usr/bin/env python3
"""In-process allreduce bandwidth, reported as nccl-tests does: algbw = bytes / time, busbw = algbw * 2(n-1)/n (the
bytes each device's link carries), against the copy bandwidth of one device-to-device copy of the same size measured
in the same run. Every timed call reduces fresh tensors (new values each time: nothing reused). Each size is measured
over the path the devices' copies take (path: direct for CPU devices, peer-mapped where a GPU reads the other's memory
through its page tables) and again staged through pinned host pages (NO_PEER_MAP=1), where those differ.

  python3 bench/allreduce.py --devices CPU:0,CPU:1,CPU:2,CPU:3 --mib 1,16,64
  MOCKGPU=1 MOCKGPU_COUNT=2 DEV=AMD python3 bench/allreduce.py --devices AMD:0,AMD:1 --mib 1"""
from __future__ import annotations
import argparse, pathlib, sys, time
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from baregrad import Tensor, knobs
from baregrad.hal.device import Device
from baregrad.tensor import collectives as C

def fresh(n: int, devices: list[str]) -> list[Tensor]:
  return [Tensor.rand(n, device=d).realize() for d in devices]

def sync(devices: list[str]) -> None:
  for d in devices: Device[d].synchronize()

def timed(fn, make, reps: int) -> float:
  C.realize(fn(make()))   # compiles (not timed)
  best = float("inf")
  for _ in range(reps):
    args = make()
    sync(DEVS)
    t0 = time.perf_counter()
    out = fn(args)
    C.realize(out)
    sync(DEVS)
    best = min(best, time.perf_counter() - t0)
  return best

def path(devices: list[str]) -> str:
  """How the last copy between the first two devices went: the peer link's path (direct, peer-mapped, staged) or host."""
  link = Device[devices[1]].peer_links.get(devices[0])
  return "host" if link is None or isinstance(link, str) or knobs.get("NO_PEER_COPY") else link.path

if __name__ == "__main__":
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--devices", default="CPU:0,CPU:1,CPU:2,CPU:3")
  ap.add_argument("--mib", default="1,16,64", help="comma-separated sizes in MiB")
  ap.add_argument("--reps", type=int, default=3)
  a = ap.parse_args()
  DEVS = a.devices.split(",")
  n = len(DEVS)
  print(f"{'size':>10} {'path':>11} {'algo':>6} {'time ms':>9} {'algbw GB/s':>11} {'busbw GB/s':>11} {'copy GB/s':>10} {'busbw/copy':>10}")
  for mib in (float(x) for x in a.mib.split(",")):
    elems = int(mib * (1 << 20)) // 4
    nbytes = elems * 4
    seen: set[str] = set()
    # the copies as the devices can make them (a peer mapping where the kernel driver allows one), then staged through
    # pinned host pages (NO_PEER_MAP=1): each path's busbw against its own copy bandwidth
    for no_map in (0, 1):
      with knobs.Context(NO_PEER_MAP=no_map):
        t_copy = timed(lambda ts: [ts[0].to(DEVS[1]).contiguous()], lambda: fresh(elems, DEVS[:1]), a.reps)
        if (p := path(DEVS)) in seen: continue   # (CPU devices: direct either way)
        seen.add(p)
        copy_bw = nbytes / t_copy / 1e9
        for algo, ring in (("direct", 1 << 62), ("ring", 0)):
          if ring == 0 and n < 3: continue
          with knobs.Context(RING_MIN_BYTES=ring): t = timed(C.allreduce, lambda: fresh(elems, DEVS), a.reps)
          alg = nbytes / t / 1e9
          bus = alg * 2 * (n - 1) / n
          print(f"{mib:>7.4g}MiB {p:>11} {algo:>6} {t * 1e3:>9.4g} {alg:>11.4g} {bus:>11.4g} {copy_bw:>10.4g} {bus / copy_bw:>10.4g}")
