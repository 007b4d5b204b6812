"""Shared helpers for the compiler-core numerical tests: run kernel ASTs on NumPy data, NumPy references with
baregrad's documented semantics (ir/alu.py), bfloat16 conversions, ulp distances."""
from __future__ import annotations
import contextlib, ctypes
import numpy as np
from baregrad.ir.dtype import DType, dtypes
from baregrad.hal import Buffer
from baregrad.engine.runner import run_ast

DEVICES = ["CPU", "CPU:C"]   # LLVM renderer, C renderer

INTS = [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64]
FLOATS = [dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]
ALL = [dtypes.bool] + INTS + FLOATS

def np_dtype(dt: DType) -> np.dtype:
  """The NumPy storage dtype (bfloat16 is stored as its uint16 bits)."""
  if dt.scalar == dtypes.bfloat16: return np.dtype(np.uint16)
  return np.dtype({"bool": np.bool_, "char": np.int8, "uchar": np.uint8, "short": np.int16, "ushort": np.uint16,
                   "int": np.int32, "uint": np.uint32, "long": np.int64, "ulong": np.uint64, "half": np.float16,
                   "float": np.float32, "double": np.float64}[dt.scalar.name])

def ref_dtype(dt: DType) -> np.dtype:
  """The NumPy dtype values of dt are computed in by the reference (bfloat16: float32)."""
  return np.dtype(np.float32) if dt.scalar == dtypes.bfloat16 else np_dtype(dt)

# ---- bfloat16 <-> float32 (round to nearest even, NaN stays NaN: what the CPU renderers do)
def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
  u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
  rounded = ((u + 0x7fff + ((u >> 16) & 1)) >> 16) & 0xffff
  isnan = np.isnan(np.asarray(x, dtype=np.float32))
  return np.where(isnan, (u >> 16) | 0x40, rounded).astype(np.uint16)

def bf16_bits_to_f32(b: np.ndarray) -> np.ndarray:
  return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)

def round_bf16(x: np.ndarray) -> np.ndarray: return bf16_bits_to_f32(f32_to_bf16_bits(x))

def to_storage(x: np.ndarray, dt: DType) -> np.ndarray:
  """Reference values (ref_dtype) -> what lies in a Buffer of dt."""
  if dt.scalar == dtypes.bfloat16: return f32_to_bf16_bits(np.asarray(x, dtype=np.float32))
  return np.ascontiguousarray(x, dtype=np_dtype(dt))

def from_storage(x: np.ndarray, dt: DType) -> np.ndarray:
  """Buffer contents of dt -> values in ref_dtype."""
  return bf16_bits_to_f32(x) if dt.scalar == dtypes.bfloat16 else x

# ---- running kernels
def make_buffer(device: str, x: np.ndarray | None, dt: DType, size: int | None = None) -> Buffer:
  n = int(x.size) if x is not None else int(size or 0)
  b = Buffer(device, n, dt).allocate()
  if x is not None and n: b.copyin(memoryview(np.ascontiguousarray(to_storage(x.reshape(-1), dt))).cast("B"))
  return b

def read_buffer(b: Buffer) -> np.ndarray:
  out = np.empty(b.size, dtype=np_dtype(b.dtype))
  if b.size: b.copyout(memoryview(out).cast("B"))
  return from_storage(out, b.dtype)

def run(ast, outs: list[tuple[int, DType]], ins: list[tuple[np.ndarray, DType]], device: str = "CPU", opts=None,
        vals=None) -> list[np.ndarray]:
  """Run ast with output buffers 0..len(outs)-1 (sizes, dtypes) and input buffers after them; returns the outputs
  as flat arrays in their reference dtypes (bfloat16 as float32)."""
  # outputs start zeroed: a buffer the allocator hands out again holds what its last user left (a kernel storing through
  # a shrunk view leaves the rest as it was)
  bufs = [make_buffer(device, None, dt, size) for size, dt in outs] + [make_buffer(device, x, dt) for x, dt in ins]
  for b in bufs[:len(outs)]:
    if b.size: b.copyin(memoryview(bytearray(b.size * b.dtype.itemsize)))
  run_ast(ast, bufs, device=device, opts=opts, vals=vals)
  return [read_buffer(b) for b in bufs[:len(outs)]]

# ---- comparisons
def bits(x: np.ndarray) -> np.ndarray:
  x = np.ascontiguousarray(x)
  return x.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])

def ulp_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """Distance in units in the last place between two float arrays of the same dtype (finite, same sign or zero)."""
  a, b = np.asarray(a), np.asarray(b)
  it = {2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize]
  def ordered(x):
    i = np.ascontiguousarray(x).view(it).astype(np.int64)
    return np.where(i < 0, np.iinfo(it).min - i, i)
  return np.abs(ordered(a) - ordered(b))

def assert_float_equal(got: np.ndarray, want: np.ndarray, what: str, ulps: int = 0, check_zero_sign: bool = True,
                       inputs: tuple = ()) -> None:
  """NaN positions equal; infinities equal; finite values within `ulps`; signs of zeros equal when asked."""
  got, want = np.asarray(got), np.asarray(want).astype(got.dtype)
  gn, wn = np.isnan(got), np.isnan(want)
  def show(mask):
    idx = np.nonzero(mask)[0][:8]
    return "; ".join(f"[{i}] in={tuple(x[i] for x in inputs)} got={got[i]!r} want={want[i]!r}" for i in idx)
  assert (gn == wn).all(), f"{what}: NaN positions differ: {show(gn != wn)}"
  ok = ~wn
  if ulps == 0:
    same = (got == want) | wn
  else:
    fin = np.isfinite(want) & np.isfinite(got)
    same = (got == want) | wn | (fin & (ulp_diff(got, want) <= ulps))
  assert same.all(), f"{what}: values differ (max {ulps} ulp): {show(~same)}"
  if check_zero_sign:
    z = ok & (want == 0)
    sg = np.signbit(got) != np.signbit(want)
    assert not (z & sg).any(), f"{what}: sign of zero differs: {show(z & sg)}"

def assert_equal(got: np.ndarray, want: np.ndarray, what: str, inputs: tuple = ()) -> None:
  got, want = np.asarray(got), np.asarray(want)
  if got.dtype.kind == "f": return assert_float_equal(got, want, what, inputs=inputs)
  want = want.astype(got.dtype)
  bad = got != want
  if bad.any():
    idx = np.nonzero(bad.reshape(-1))[0][:8]
    g, w = got.reshape(-1), want.reshape(-1)
    detail = "; ".join(f"[{i}] in={tuple(x.reshape(-1)[i] for x in inputs)} got={g[i]!r} want={w[i]!r}" for i in idx)
    raise AssertionError(f"{what}: {int(bad.sum())} of {bad.size} differ: {detail}")

# ---- input values
def special_values(dt: DType) -> np.ndarray:
  """Interesting values of dt, in ref_dtype."""
  if dt.scalar == dtypes.bool: return np.array([False, True])
  if dtypes.is_int(dt):
    info = np.iinfo(np_dtype(dt))
    v = [0, 1, 2, 3, 7, info.max, info.max - 1, info.min, info.min + 1, 5, 8, 31, 32, 33, 63, 64, 100]
    if info.min < 0: v += [-1, -2, -3, -7, -8, -31, -32, -33, -64, -100]
    return np.array(sorted(set(v)), dtype=np_dtype(dt))
  rd = ref_dtype(dt)
  if dt.scalar == dtypes.bfloat16:
    tiny, big, den = 1.1754944e-38, 3.3895314e38, 9.2e-41
  else:
    fi = np.finfo(rd)
    tiny, big, den = float(fi.tiny), float(fi.max), float(fi.smallest_subnormal)
  v = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 3.0, 0.1, -0.1, 100.25, -100.25, 1e4, -1e4, 65504.0, 70000.0,
       tiny, -tiny, den, -den, den * 3, big, -big, np.inf, -np.inf, np.nan, 3.14159, -2.71828, 1e-3, 255.5, 256.0, -128.5,
       2.0 ** 31, -2.0 ** 31, 2.0 ** 32, 2.0 ** 63, -2.0 ** 63, 2.0 ** 64, 1e20, -1e20, 0.999, 7.0, 8.0, 4.5]
  x = np.array(v, dtype=np.float64)
  with np.errstate(all="ignore"):
    out = x.astype(rd)
  if dt.scalar == dtypes.bfloat16: out = round_bf16(out)
  return out

def random_values(dt: DType, n: int, rng: np.random.Generator) -> np.ndarray:
  if dt.scalar == dtypes.bool: return rng.integers(0, 2, n).astype(bool)
  if dtypes.is_int(dt):
    info = np.iinfo(np_dtype(dt))
    return rng.integers(info.min, info.max, n, dtype=np_dtype(dt), endpoint=True)
  x = (rng.standard_normal(n) * rng.choice([0.01, 1.0, 10.0, 1000.0], n)).astype(ref_dtype(dt))
  return round_bf16(x) if dt.scalar == dtypes.bfloat16 else x

def pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Every (a[i], b[j])."""
  return np.repeat(a, len(b)), np.tile(b, len(a))

# ---- a mock NVIDIA GPU registered as Device["NV"] (default generation, one GPU), for tests that run kernels on it
from contextlib import contextmanager
@contextmanager
def mock_nv_device():
  import os
  from baregrad.hal import Device
  from baregrad.drivers.port import make_port
  from baregrad.drivers.mock.nv import MockNVGPU
  from baregrad.drivers.nv import NVDevice
  saved = {v: os.environ.pop(v) for v in ("MOCKGPU_ARCH", "MOCKGPU_COUNT", "ALLOW_TF32") if v in os.environ}
  dev = NVDevice("NV", port=make_port(MockNVGPU()))
  prev = Device._open.get("NV")
  Device._open["NV"] = dev
  try: yield dev
  finally:
    dev.close()
    if prev is not None: Device._open["NV"] = prev
    else: Device.forget("NV")
    os.environ.update(saved)

# LLVM IR for amdgcn shared by the AMD mock tests: @gid (workgroup id * workgroup size + work-item id, the size from the
# hidden argument hidden_group_size_x, 12 bytes into the implicit arguments) and @fill(out, val): out[i] = val + i
AMDGCN_FILL_LL = r"""
define internal i32 @gid() alwaysinline {
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %ia = call ptr addrspace(4) @llvm.amdgcn.implicitarg.ptr()
  %lsp = getelementptr i8, ptr addrspace(4) %ia, i64 12
  %ls16 = load i16, ptr addrspace(4) %lsp, align 4
  %ls = zext i16 %ls16 to i32
  %base = mul i32 %wg, %ls
  %i = add i32 %base, %tid
  ret i32 %i
}
define amdgpu_kernel void @fill(ptr addrspace(1) %out, i64 %val) {
  %i = call i32 @gid()
  %v32 = trunc i64 %val to i32
  %r = add i32 %v32, %i
  %p = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %r, ptr addrspace(1) %p, align 4
  ret void
}
declare i32 @llvm.amdgcn.workgroup.id.x()
declare i32 @llvm.amdgcn.workitem.id.x()
declare ptr addrspace(4) @llvm.amdgcn.implicitarg.ptr()
"""

def raw_aql(dev, packet: list[int]) -> None:
  """Write one AQL packet to the device's ring by hand (to present the CP with what the driver would never send)."""
  r = dev.aql
  with r.lock:
    slot = r.ring.cpu + 64 * (r.put % r.nslots)
    (ctypes.c_uint32 * 15).from_address(slot + 4)[:] = packet[1:]
    ctypes.c_uint32.from_address(slot).value = packet[0]
    r.put += 1
    r.wptr_p.value = r.put
    dev.port.doorbell(r.doorbell, r.put - 1, 8)

@contextlib.contextmanager
def registered(name: str, dev):
  """`dev` as Device[name] (so Buffers and Tensors find it) for the block; closed and the previous one put back after."""
  from baregrad.hal import Device
  prev = Device._open.get(name)
  Device._open[name] = dev
  try: yield dev
  finally:
    dev.close()
    if prev is not None: Device._open[name] = prev
    else: Device._open.pop(name, None)
