"""Bad input gets a clear error naming what was wrong, and nothing is lost: after every error a normal kernel still
runs and the CPU allocator's mem_used is back where it was (no leak)."""
from __future__ import annotations
import gc
import numpy as np
import pytest
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import UOp, Ops
from baregrad.ir.view import ShapeTracker
from baregrad.codegen.astbuild import load, store, reduce, sink, gbuf, view
from baregrad.codegen.kernel import Opt, OptOps, OptError, KernelError
from baregrad.codegen.program import get_program
from baregrad.codegen.renderer.cstyle import CRenderer
from baregrad.engine.runner import run_ast, compile_ast
from baregrad.hal import Device, Buffer, CompileError, OutOfMemory
from tests.helpers import DEVICES, run

f32, i32 = dtypes.float32, dtypes.int32

def good_kernel_works(device: str = "CPU") -> None:
  x = np.arange(8, dtype=np.float32)
  (got,) = run(sink(store(0, (8,), load(1, f32, (8,)) * 2.0 + 1.0)), [(8, f32)], [(x, f32)], device)
  np.testing.assert_array_equal(got, x * 2 + 1)

@pytest.fixture(scope="module", autouse=True)
def module_leaks_nothing():
  """Over the whole module (gc.collect is slow: once, not per test): CPU memory use ends where it started."""
  good_kernel_works(); good_kernel_works("CPU:C")  # warm: compiles and caches what a normal kernel needs
  gc.collect()
  before = Device["CPU"].allocator.mem_used
  yield
  gc.collect()
  assert Device["CPU"].allocator.mem_used <= before, f"leaked {Device['CPU'].allocator.mem_used - before} bytes"

@pytest.fixture
def no_leak():
  """After the test's error, normal kernels still run on both renderers."""
  yield
  good_kernel_works()
  good_kernel_works("CPU:C")

def mem_used_after_gc() -> int:
  gc.collect()
  return Device["CPU"].allocator.mem_used

# ---------------------------------------------------------------- malformed ASTs
BAD_ASTS = {
  "sink_of_load": (lambda: UOp(Ops.SINK, src=(load(1, f32, (4,)),)), "SINK source must be STORE"),
  "empty_sink": (lambda: UOp(Ops.SINK), "SINK of STOREs"),
  "not_a_sink": (lambda: store(0, (4,), load(1, f32, (4,))), "must be a SINK"),
  "views_of_different_ndim": (lambda: sink(store(0, (4,), load(1, f32, (4, 1)))), "same number of axes"),
  "shapes_do_not_fit": (lambda: sink(store(0, (4,), load(1, f32, (5,)))), r"does not fit the iteration space"),
  "mixed_dtypes": (lambda: sink(store(0, (4,), load(1, f32, (4,)) + load(2, i32, (4,)))), "different dtypes"),
  "where_cond_not_bool": (lambda: sink(store(0, (4,), UOp(Ops.WHERE, f32, (load(1, f32, (4,)),) * 3))), "WHERE condition must be bool"),
  "idiv_of_floats": (lambda: sink(store(0, (4,), load(1, f32, (4,)) // load(2, f32, (4,)))), "IDIV needs an integer"),
  "shift_of_floats": (lambda: sink(store(0, (4,), load(1, f32, (4,)).alu(Ops.SHL, load(2, f32, (4,))))), "SHL needs an integer"),
  "exp2_of_ints": (lambda: sink(store(0, (4,), load(1, i32, (4,)).alu(Ops.EXP2))), "EXP2 needs a float"),
  "recip_of_ints": (lambda: sink(store(0, (4,), load(1, i32, (4,)).alu(Ops.RECIP))), "RECIP needs a float"),
  "fdiv_of_ints": (lambda: sink(store(0, (4,), load(1, i32, (4,)) / load(2, i32, (4,)))), "FDIV needs a float"),
  "reduce_with_sub": (lambda: sink(store(0, (1,), UOp(Ops.REDUCE_AXIS, f32, (load(1, f32, (4,)),), (Ops.SUB, (0,))))), "ADD/MUL/MAX"),
  "reduce_axis_out_of_range": (lambda: sink(store(0, (1,), reduce(load(1, f32, (4,)), Ops.ADD, (3,)))), "axes"),
  "reduced_axis_stored_full": (lambda: sink(store(0, (4,), reduce(load(1, f32, (4,)), Ops.ADD, (0,)))), "must have size 1"),
  "view_arg_not_shapetracker": (lambda: sink(UOp(Ops.STORE, src=(gbuf(0, f32), UOp(Ops.VIEW, arg=(4,)), load(1, f32, (4,))))), "ShapeTracker"),
  "load_without_view": (lambda: sink(store(0, (4,), UOp(Ops.LOAD, f32, (gbuf(1, f32),)))), "LOAD must be LOAD"),
  "store_value_dtype_differs_from_buffer": (lambda: sink(UOp(Ops.STORE, src=(gbuf(0, i32), view((4,)), load(1, f32, (4,))))), "cast first"),
  "load_dtype_differs_from_buffer": (lambda: sink(store(0, (4,), UOp(Ops.LOAD, f32, (gbuf(1, i32), view((4,)))))), "LOAD of"),
  "define_global_not_pointer": (lambda: sink(UOp(Ops.STORE, src=(UOp(Ops.DEFINE_GLOBAL, f32, (), 0), view((4,)), load(1, f32, (4,))))), "pointer"),
}

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(BAD_ASTS))
def test_malformed_ast_raises_kernel_error_naming_the_problem(no_leak, device, name):
  mk, msg = BAD_ASTS[name]
  with pytest.raises(KernelError, match=msg):
    compile_ast(mk(), device)

def test_store_of_a_void_cast_is_a_kernel_error(no_leak):
  with pytest.raises(KernelError, match="cast first"):
    compile_ast(sink(UOp(Ops.STORE, src=(gbuf(0, f32), view((4,)), load(1, f32, (4,)).cast(dtypes.void)))), "CPU")

def test_bitcast_of_bool_is_refused_clearly(no_leak):
  # was: passed verify_ast, then the LLVM renderer emitted 'bitcast <N x i1> to <N x i8>' (CompileError)
  for ast in (sink(store(0, (4,), load(1, dtypes.bool, (4,)).bitcast(dtypes.uint8))),
              sink(store(0, (4,), load(1, dtypes.int8, (4,)).bitcast(dtypes.bool)))):
    for device in DEVICES:
      with pytest.raises(KernelError, match="BITCAST.*use CAST"): compile_ast(ast, device)

# ---------------------------------------------------------------- opts
OPT_CASES = [(Opt(OptOps.UPCAST, 0, 3), "does not divide"), (Opt(OptOps.UPCAST, 5, 2), "out of range"),
             (Opt(OptOps.UNROLL, 0, 2), "UNROLL needs a reduce axis"), (Opt(OptOps.UPCAST, 2, 2), "UPCAST needs an output axis"),
             (Opt(OptOps.SPLIT, 1, 7), "does not divide"), (Opt(OptOps.PARALLEL, 2), "output loop axis"),
             (Opt(OptOps.UPCAST, 0, -2), "does not divide")]

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opt,msg", OPT_CASES, ids=[str(o) for o, _ in OPT_CASES])
def test_opt_that_does_not_apply_raises_opt_error(no_leak, device, opt, msg):
  # (a transposed load: axes 0 and 1 stay apart, codegen/merge_axes would make one axis of contiguous ones)
  ast = sink(store(0, (4, 6, 1), reduce(load(1, f32, ShapeTracker.from_shape((6, 4, 8)).permute((1, 0, 2))), Ops.ADD, (2,))))
  with pytest.raises(OptError, match=msg): compile_ast(ast, device, [opt])

def test_too_many_lanes_is_an_opt_error(no_leak):
  ast = sink(store(0, (32, 32), load(1, f32, (32, 32))))
  with pytest.raises(OptError, match="256 lanes"): compile_ast(ast, "CPU", [Opt(OptOps.UPCAST, 0, 32), Opt(OptOps.UPCAST, 0, 32)])

def test_second_parallel_axis_is_an_opt_error(no_leak):
  ast = sink(store(0, (4, 6), load(1, f32, ShapeTracker.from_shape((6, 4)).permute((1, 0)))))
  with pytest.raises(OptError, match="parallel"): compile_ast(ast, "CPU", [Opt(OptOps.PARALLEL, 0), Opt(OptOps.PARALLEL, 1)])

# ---------------------------------------------------------------- renderers, compilers
class NoDoubleC(CRenderer):
  name = "C-without-float64"
  supported_dtypes = tuple(d for d in CRenderer.supported_dtypes if d != dtypes.float64)

def test_unsupported_dtype_for_a_renderer_is_refused_clearly(no_leak):
  ast = sink(store(0, (4,), load(1, dtypes.float64, (4,)) * 2.0))
  with pytest.raises(KernelError, match=r"dtype.*double.*not supported by the C-without-float64 renderer"):
    get_program(ast, NoDoubleC())
  get_program(sink(store(0, (4,), load(1, f32, (4,)) * 2.0)), NoDoubleC())  # other dtypes still fine

def test_c_compile_error_shows_source_and_compiler_message(no_leak):
  src = "int f( { this is not C"
  with pytest.raises(CompileError) as ei: Device["CPU:C"].compiler.compile(src)
  text = str(ei.value)
  assert "this is not C" in text, "the source must be in the error"
  assert "error" in text.lower() and ("expected" in text or "before" in text), f"the compiler's message must be in the error: {text}"
  assert "1 | int f(" in text, "the source is shown with line numbers"

def test_llvm_compile_error_shows_source_and_message(no_leak):
  src = "define void @f() {\n  garbage\n}"
  with pytest.raises(CompileError) as ei: Device["CPU"].compiler.compile(src)
  text = str(ei.value)
  assert "garbage" in text and "LLVM" in text and "2 |" in text

# ---------------------------------------------------------------- devices, memory
def test_unknown_device_raises_value_error_listing_devices():
  for name in ("FOO", "GPU", "CPUX:1"):
    with pytest.raises(ValueError, match=r"known devices: .*CPU") as ei: Device[name]
    assert name in str(ei.value)
  with pytest.raises(ValueError, match="known devices"): Buffer("NOPE", 4, f32)
  with pytest.raises(ValueError, match="known devices"): compile_ast(sink(store(0, (4,), load(1, f32, (4,)))), "WHAT")

def test_allocation_beyond_memory_raises_out_of_memory(no_leak):
  for n in (1 << 60, 1 << 46):
    with pytest.raises(OutOfMemory, match=r"CPU: out of memory allocating") as ei: Buffer("CPU", n, dtypes.uint8).allocate()
    assert ei.value.requested == n

def test_negative_or_bad_sizes_are_value_errors(no_leak):
  with pytest.raises(ValueError, match=">= 0"): Buffer("CPU", -1, f32)

# ---------------------------------------------------------------- launching
AST_VAR = sink(store(0, (4,), load(1, i32, (4,)) * UOp.variable("n", 1, 3)))

def test_missing_variable_value_is_named(no_leak):
  bufs = [Buffer("CPU", 4, i32).allocate() for _ in range(2)]
  with pytest.raises(ValueError, match=r"needs values for variables \['n'\]"): run_ast(AST_VAR, bufs)

def test_variable_out_of_bounds_is_refused(no_leak):
  bufs = [Buffer("CPU", 4, i32).allocate() for _ in range(2)]
  with pytest.raises(ValueError, match=r"n=9 is outside \[1, 3\]"): run_ast(AST_VAR, bufs, vals={"n": 9})

def test_too_few_buffers_is_refused(no_leak):
  with pytest.raises(ValueError, match="uses buffer 1 but only 1"):
    run_ast(sink(store(0, (4,), load(1, f32, (4,)))), [Buffer("CPU", 4, f32).allocate()])

def test_buffer_of_wrong_dtype_is_refused(no_leak):
  with pytest.raises(TypeError, match="wants dtypes.float, got dtypes.int"):
    run_ast(sink(store(0, (4,), load(1, f32, (4,)))), [Buffer("CPU", 4, f32).allocate(), Buffer("CPU", 4, i32).allocate()])

def test_buffer_on_another_device_is_refused(no_leak):
  with pytest.raises(ValueError, match="runs on CPU but buffer 1 is on CPU:C"):
    run_ast(sink(store(0, (4,), load(1, f32, (4,)))), [Buffer("CPU", 4, f32).allocate(), Buffer("CPU:C", 4, f32).allocate()], device="CPU")

def test_buffer_too_small_for_the_kernel_is_refused(no_leak):
  # was: accepted, and the kernel read past the end of the 2-element buffer
  with pytest.raises(ValueError, match="touches buffer 1 up to element 3, but it holds 2"):
    run_ast(sink(store(0, (4,), load(1, f32, (4,)))), [Buffer("CPU", 4, f32).allocate(), Buffer("CPU", 2, f32).allocate()])
  with pytest.raises(ValueError, match="touches buffer 0 up to element 22"):  # a store through a shrunk view of a 6x6 output
    run_ast(sink(store(0, ShapeTracker.from_shape((6, 6)).shrink(((1, 4), (2, 5))), load(1, f32, (3, 3)))),
            [Buffer("CPU", 22, f32).allocate(), Buffer("CPU", 9, f32).allocate()])
  # a padded or expanded view needs only what it really reads
  run_ast(sink(store(0, (3, 8), load(1, f32, ShapeTracker.from_shape((3, 4)).pad(((0, 0), (2, 2)))))),
          [Buffer("CPU", 24, f32).allocate(), Buffer("CPU", 12, f32).allocate()])
  run_ast(sink(store(0, (5, 4), load(1, f32, ShapeTracker.from_shape((4,)).reshape((1, 4)).expand((5, 4))))),
          [Buffer("CPU", 20, f32).allocate(), Buffer("CPU", 4, f32).allocate()])

def test_copyin_of_wrong_size_is_refused(no_leak):
  b = Buffer("CPU", 4, f32).allocate()
  with pytest.raises(ValueError, match="size mismatch"): b.copyin(memoryview(np.zeros(3, np.float32)).cast("B"))

def test_errors_in_a_row_leave_everything_working(no_leak):
  # a burst of different failures, then normal kernels on both renderers and no memory held
  before = mem_used_after_gc()
  for name, (mk, _) in BAD_ASTS.items():
    with pytest.raises(KernelError): compile_ast(mk(), "CPU")
  for _ in range(3):
    with pytest.raises(OutOfMemory): Buffer("CPU", 1 << 60, dtypes.uint8).allocate()
    with pytest.raises(CompileError): Device["CPU:C"].compiler.compile("nope(")
    good_kernel_works()
    with pytest.raises(ValueError): run_ast(AST_VAR, [Buffer("CPU", 4, i32).allocate() for _ in range(2)])
  assert mem_used_after_gc() <= before, "memory leaked by failed launches"
