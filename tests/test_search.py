"""BEAM search picks opts by timing them; the result is cached and computes the same values."""
import numpy as np
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import Ops
from baregrad.codegen.astbuild import load, store, reduce, sink
from baregrad.codegen.kernel import Kernel
from baregrad.engine.search import beam_search, candidate_actions
from baregrad.engine.runner import compile_ast
from baregrad.hal import Buffer

def test_beam_search_finds_applicable_opts_and_same_result(tmp_path, monkeypatch):
  monkeypatch.setenv("BAREGRAD_CACHE", str(tmp_path))
  ast = sink(store(0, (16, 1), reduce(load(1, dtypes.float32, (16, 64)) * 2, Ops.ADD, (1,))))
  assert candidate_actions(Kernel(ast))
  opts = beam_search(ast, "CPU", width=2, rounds=1)
  k = Kernel(ast)
  for o in opts: k.apply_opt(o)  # every chosen opt applies
  assert beam_search(ast, "CPU", width=2, rounds=1) == opts  # cached
  x = np.random.rand(16, 64).astype(np.float32)
  bo, bi = Buffer("CPU", 16, dtypes.float32).allocate(), Buffer("CPU", 16 * 64, dtypes.float32).allocate()
  bi.copyin(memoryview(x).cast("B"))
  compile_ast(ast, "CPU", opts)([bo, bi])
  out = np.empty(16, np.float32); bo.copyout(memoryview(out).cast("B"))
  np.testing.assert_allclose(out, (x * 2).sum(1), rtol=1e-5)
