"""HAL: device registry, Buffer, allocators, compiler cache, errors. Runs on the CPU device."""
from __future__ import annotations
import gc, sys, types
import numpy as np
import pytest
from baregrad.hal import (Device, Buffer, Compiled, Compiler, CompileError, DeviceUnavailable, OutOfMemory, LRUAllocator,
                          KNOWN_DEVICES)
from baregrad.ir.dtype import dtypes, DType

# ---------------------------------------------------------------- registry
def test_canonical_names():
  assert Device.canonicalize("cpu") == "CPU"
  assert Device.canonicalize("nv:1") == "NV:1"
  assert Device.canonicalize("Cpu:c") == "CPU:C"
  assert Device.canonicalize("amd:llvm:0") == "AMD:LLVM:0"

def test_same_instance_case_insensitive():
  assert Device["cpu"] is Device["CPU"]
  assert isinstance(Device["CPU"], Compiled)

def test_unknown_device_lists_known():
  with pytest.raises(ValueError) as e: Device["TPU"]
  for name in ("TPU",) + KNOWN_DEVICES: assert name in str(e.value)

def test_variant_is_separate_instance(monkeypatch):
  monkeypatch.delenv("DEV", raising=False)
  c = Device["CPU:C"]
  assert c is not Device["CPU"] and c is Device["cpu:c"]
  assert c.variant == "C" and Device["CPU"].variant == "LLVM"
  assert Device.variant("CPU") is None
  monkeypatch.setenv("DEV", "CPU:C")
  assert Device.variant("CPU") == "C"  # plain CPU follows DEV's variant

def test_unknown_cpu_variant():
  with pytest.raises(ValueError, match="FOO.*LLVM, C"): Device["CPU:foo"]

def test_unavailable_device_reraises_with_reason(monkeypatch):
  mod = types.ModuleType("baregrad.drivers.metal")
  class METALDevice(Compiled):
    def __init__(self, device: str) -> None: raise DeviceUnavailable("no Metal device here")
  mod.METALDevice = METALDevice  # type: ignore[attr-defined]
  monkeypatch.setitem(sys.modules, "baregrad.drivers.metal", mod)
  with pytest.raises(DeviceUnavailable, match="no Metal device"): Device["metal"]

def test_default_falls_back_to_cpu(monkeypatch, capsys):
  mod = types.ModuleType("baregrad.drivers.metal")
  class METALDevice(Compiled):
    def __init__(self, device: str) -> None: raise DeviceUnavailable("no Metal device here")
  mod.METALDevice = METALDevice  # type: ignore[attr-defined]
  monkeypatch.setitem(sys.modules, "baregrad.drivers.metal", mod)
  monkeypatch.setenv("DEV", "METAL")
  Device.reset_default()
  try:
    assert Device.DEFAULT == "CPU"
    err = capsys.readouterr().err
    assert "METAL" in err and "no Metal device" in err and "CPU" in err
  finally:
    monkeypatch.delenv("DEV"); Device.reset_default()
  assert Device.DEFAULT == "CPU"

def test_cpu_declares_limits_and_dtypes():
  d = Device["CPU"]
  assert d.has_threads and not d.has_local and d.max_shared_mem == 0
  for dt in (dtypes.bool, dtypes.int8, dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64):
    assert d.supports_dtype(dt)

# ---------------------------------------------------------------- buffers
@pytest.mark.parametrize("dt,npdt", [(dtypes.bool, np.bool_), (dtypes.int8, np.int8), (dtypes.uint16, np.uint16), (dtypes.int32, np.int32),
                                     (dtypes.uint64, np.uint64), (dtypes.float16, np.float16), (dtypes.float32, np.float32),
                                     (dtypes.float64, np.float64), (dtypes.bfloat16, np.uint16)])
def test_roundtrip(dt: DType, npdt):
  rng = np.random.default_rng(0)
  x = (rng.integers(0, 2, 37) if npdt is np.bool_ else rng.integers(-100, 100, 37) if dt != dtypes.uint64 else rng.integers(0, 2**63, 37)).astype(npdt)
  b = Buffer("CPU", 37, dt).copyin(memoryview(x).cast("B") if dt == dtypes.bfloat16 else memoryview(x))
  assert b.nbytes == 37 * dt.itemsize
  out = np.empty_like(x)
  b.copyout(memoryview(out))
  np.testing.assert_array_equal(out, x)
  assert bytes(b.as_memoryview()) == x.tobytes()

def test_large_roundtrip_crosses_staging():
  x = np.arange(3 << 20, dtype=np.uint8) * 7  # > 2 staging buffers of 2 MiB
  b = Buffer("CPU", x.size, dtypes.uint8).copyin(memoryview(x))
  assert bytes(b.as_memoryview()) == x.tobytes()

def test_copyin_mismatch_names_sizes():
  b = Buffer("CPU", 4, dtypes.float32)
  with pytest.raises(ValueError, match=r"12 bytes.*16 bytes"): b.copyin(memoryview(bytearray(12)))
  with pytest.raises(TypeError, match="format"): b.copyin(memoryview(np.zeros(2, np.float64)))

def test_views_share_memory():
  base = Buffer("CPU", 16, dtypes.int32).copyin(memoryview(np.arange(16, dtype=np.int32)))
  v = base.view(4, dtypes.int32, 8 * 4)
  assert "base offset 32" in repr(v)
  assert np.frombuffer(v.as_memoryview(), np.int32).tolist() == [8, 9, 10, 11]
  v.copyin(memoryview(np.full(4, -1, np.int32)))
  assert np.frombuffer(base.as_memoryview(), np.int32)[7:13].tolist() == [7, -1, -1, -1, -1, 12]
  vv = v.view(2, dtypes.int16, 4)  # view of a view points into the root allocation
  assert vv.base is base and vv.offset == 36
  assert np.frombuffer(vv.as_memoryview(), np.int16).tolist() == [-1, -1]

def test_base_outlives_views():
  base = Buffer("CPU", 8, dtypes.int32).allocate()
  v = base.view(2, dtypes.int32, 0).allocate()
  with pytest.raises(RuntimeError, match="1 allocated view"): base.deallocate()
  v.deallocate()
  base.deallocate()
  assert not base.is_allocated()

def test_view_out_of_range():
  base = Buffer("CPU", 16, dtypes.int32)
  with pytest.raises(ValueError, match="outside"): base.view(5, dtypes.int32, 48)
  with pytest.raises(ValueError, match="outside"): base.view(1, dtypes.int8, -1)

def test_allocator_cache_reuse_and_no_leak():
  alloc = Device["CPU"].allocator
  gc.collect()   # buffers of earlier tests' garbage cycles (nn modules) must not be freed inside the count below
  start = alloc.mem_used
  b = Buffer("CPU", 1000, dtypes.float32).allocate()
  addr = b._buf.va_addr
  assert alloc.mem_used == start + 4000
  del b; gc.collect()
  assert alloc.mem_used == start
  b2 = Buffer("CPU", 1000, dtypes.float32).allocate()
  assert b2._buf.va_addr == addr  # came back from the cache
  views = [b2.view(10, dtypes.float32, 4 * i) for i in range(5)]
  for v in views: v.allocate()
  assert alloc.mem_used == start + 4000  # views own no memory
  del b2, views, v; gc.collect()
  assert alloc.mem_used == start

def test_out_of_memory_then_device_still_works():
  alloc = Device["CPU"].allocator
  start = alloc.mem_used
  with pytest.raises(OutOfMemory) as e: Buffer("CPU", 1 << 60, dtypes.uint8).allocate()
  assert "CPU" in str(e.value) and str(1 << 60) in str(e.value) and "in use" in str(e.value)
  assert alloc.mem_used == start
  b = Buffer("CPU", 3, dtypes.int64).copyin(memoryview(np.array([1, 2, 3], np.int64)))
  assert np.frombuffer(b.as_memoryview(), np.int64).tolist() == [1, 2, 3]

class _Limited(LRUAllocator):
  """A toy device with 100 bytes: checks LRU frees its cache and retries once on OutOfMemory."""
  def __init__(self) -> None: super().__init__("TOY"); self.raw, self.frees = 0, 0
  def _alloc(self, size, options):
    if self.raw + size > 100: raise OutOfMemory("TOY", size, self.mem_used)
    self.raw += size
    return object()
  def _free(self, opaque, size, options): self.raw -= size; self.frees += 1

def test_lru_frees_cache_on_oom():
  a = _Limited()
  x = a.alloc(60)
  a.free(x, 60)
  assert a.mem_cached == 60 and a.alloc(60) is x  # reuse by (size, options)
  a.free(x, 60)
  a.alloc(80)  # raw alloc fails with 60 cached: cache is freed, retry succeeds
  assert a.frees == 1 and a.mem_cached == 0 and a.mem_used == 80
  with pytest.raises(OutOfMemory, match="TOY"): a.alloc(40)

# ---------------------------------------------------------------- compiler
class CountingCompiler(Compiler):
  def __init__(self, key: str | None = "toy", ver: str = "1") -> None: super().__init__(key); self.n, self.ver = 0, ver
  def version(self) -> str: return self.ver
  def compile(self, src: str) -> bytes:
    if "syntax error" in src: raise CompileError(src, "toy:2: error: expected ';'")
    self.n += 1
    return src.encode()[::-1]

def test_compiler_cache(tmp_path, monkeypatch):
  monkeypatch.setenv("BAREGRAD_CACHE", str(tmp_path))
  monkeypatch.delenv("BAREGRAD_NOCACHE", raising=False)
  c = CountingCompiler()
  assert c.compile_cached("int a;") == b";a tni"
  assert c.compile_cached("int a;") == b";a tni" and c.n == 1 and c.cache_hits == 1
  c.compile_cached("int b;"); assert c.n == 2
  assert CountingCompiler(ver="2").compile_cached("int a;") and CountingCompiler(ver="2").compile_cached("int a;")
  c2 = CountingCompiler(ver="2"); c2.compile_cached("int a;"); assert c2.n == 0  # cached under version 2 now
  c3 = CountingCompiler(key="other"); c3.compile_cached("int a;"); assert c3.n == 1
  assert not [p for p in (tmp_path / "compile").iterdir() if p.name.startswith(".tmp")]
  monkeypatch.setenv("BAREGRAD_NOCACHE", "1")
  c.compile_cached("int a;"); assert c.n == 3
  c4 = CountingCompiler(key=None); c4.compile_cached("x"); c4.compile_cached("x"); assert c4.n == 2

def test_compile_error_shows_source(tmp_path, monkeypatch):
  monkeypatch.setenv("BAREGRAD_CACHE", str(tmp_path))
  with pytest.raises(CompileError) as e: CountingCompiler().compile_cached("void f() {\n  syntax error\n}")
  s = str(e.value)
  assert "expected ';'" in s and "2 |   syntax error" in s and e.value.src.startswith("void f()")

def test_cpu_without_its_toolchain_names_what_is_missing(monkeypatch):
  """A CPU variant whose toolchain cannot be imported (llvmlite absent) still opens, to load objects; compiling a kernel
  on it raises a CompileError naming the import that failed and the way out, not an AttributeError on a None renderer."""
  import importlib
  from baregrad.drivers import cpu
  from baregrad.engine.runner import compile_ast
  from baregrad import Tensor
  from tests.helpers import registered
  real = importlib.import_module
  def no_llvmlite(name, *a, **k):
    if name == "baregrad.codegen.renderer.llvmir": raise ModuleNotFoundError("No module named 'llvmlite'")
    return real(name, *a, **k)
  ast = Tensor([1.0, 2.0]).add(1).schedule()[-1].ast
  monkeypatch.setattr(importlib, "import_module", no_llvmlite)
  dev = cpu.CPUDevice("CPU:7")
  monkeypatch.setattr(importlib, "import_module", real)
  assert dev.renderer is None
  with registered("CPU:7", dev), pytest.raises(CompileError, match=r"(?s)CPU:7 cannot compile.*llvmlite.*DEV=CPU:C"):
    compile_ast(ast, "CPU:7")
