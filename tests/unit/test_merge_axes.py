"""codegen/merge_axes: adjacent axes every view walks as one become one axis of a CPU kernel; the rest stay."""
import numpy as np
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import Ops
from baregrad.ir.view import ShapeTracker
from baregrad.codegen.astbuild import load, store, reduce, sink
from baregrad.codegen.kernel import Kernel, verify_ast
from baregrad.codegen.merge_axes import merge_axes
from tests.helpers import run

f32 = dtypes.float32

def _shape(ast):
  m = merge_axes(ast, verify_ast(ast))
  return verify_ast(m), m

def test_contiguous_axes_merge_and_transposed_ones_do_not():
  assert _shape(sink(store(0, (4, 6, 8), load(1, f32, (4, 6, 8)))))[0] == (192,)
  t = ShapeTracker.from_shape((6, 4, 8)).permute((1, 0, 2))   # (4, 6, 8) with axes 0 and 1 swapped in memory
  assert _shape(sink(store(0, (4, 6, 8), load(1, f32, t))))[0] == (4, 6, 8)   # (strides 8, 32, 1: no pair is one run)

def test_reduced_axes_merge_with_each_other_not_with_outputs():
  ast = sink(store(0, (5, 1, 1), reduce(load(1, f32, (5, 6, 7)), Ops.ADD, (1, 2))))
  shape, m = _shape(ast)
  assert shape == (5, 42)
  assert [u.arg[1] for u in m.toposort() if u.op is Ops.REDUCE_AXIS] == [(1,)]

def test_nested_reductions_keep_their_steps():
  inner = reduce(load(1, f32, (4, 5, 6)), Ops.ADD, (2,))
  ast = sink(store(0, (4, 1, 1), reduce(inner, Ops.MAX, (1,))))
  assert _shape(ast)[0] == (4, 5, 6)

def test_padded_view_keeps_the_axes_its_mask_splits():
  t = ShapeTracker.from_shape((4, 6)).pad(((0, 0), (1, 1)))   # (4, 8), columns 0 and 7 masked
  assert _shape(sink(store(0, (4, 8), load(1, f32, t))))[0] == (4, 8)

def test_kernel_of_merged_axes_computes_the_same_values():
  x = np.arange(5 * 6 * 7, dtype=np.float32).reshape(5, 6, 7)
  ast = sink(store(0, (5, 1, 1), reduce(load(1, f32, (5, 6, 7)), Ops.ADD, (1, 2))))
  assert Kernel(ast).full_shape == (5, 42)
  out = run(ast, [(5, f32)], [(x, f32)], "CPU")[0]
  np.testing.assert_array_equal(out, x.sum((1, 2)))
  # GPU kernels keep the tensors' axes (their grids are planned on them)
  assert Kernel(ast, gpu=True).full_shape == (5, 6, 7)
