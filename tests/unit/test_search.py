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

def test_beam_sizes_a_gather_source_by_its_extent(tmp_path, monkeypatch):
  """A gather's view has the output's extent along its axis, but its index reaches the source's: the test buffers a
  search times candidates on are that large (a smaller one would be read past its end)."""
  monkeypatch.setenv("BAREGRAD_CACHE", str(tmp_path))
  from baregrad import Tensor
  from baregrad.engine.search import _buffer_sizes
  w = Tensor(np.random.rand(500, 8).astype(np.float32))
  for idx in (np.array([3, 499, 0], dtype=np.int32), np.array([7], dtype=np.int32)):   # (one index: the view's extent is 1)
    ast = next(it.ast for it in w[Tensor(idx)].schedule() if any(u.op is Ops.LOAD and len(u.src) == 3 for u in it.ast.toposort()))
    loads = [u for u in ast.toposort() if u.op is Ops.LOAD and len(u.src) == 3]
    assert len(loads) == 1 and _buffer_sizes(ast)[loads[0].src[0].arg][0] == 500 * 8
    opts = beam_search(ast, "CPU", width=2, rounds=1)
    k = Kernel(ast)
    for o in opts: k.apply_opt(o)

def _matmul_ast(n: int):
  from baregrad.ir.view import ShapeTracker
  sa = ShapeTracker.from_shape((n, n)).reshape((n, 1, n)).expand((n, n, n))
  sb = ShapeTracker.from_shape((n, n)).permute((1, 0)).reshape((1, n, n)).expand((n, n, n))
  return sink(store(0, (n, n, 1), reduce(load(1, dtypes.float32, sa) * load(2, dtypes.float32, sb), Ops.ADD, (2,))))

def _fake_times(monkeypatch, times):
  """Device times by opts (the heuristic's choice gets times[None], anything unlisted 1 ms): deterministic searches."""
  import baregrad.engine.search as search
  from baregrad.codegen.program import get_program
  from baregrad.hal import Device
  heur = tuple(get_program(_matmul_ast(64), Device["CPU"].renderer).opts)
  seen = []
  def run(self, bufs):
    o = tuple(self.spec.opts)
    seen.append(o)
    return times.get(o, times[None] if o == heur else 1e-3)
  monkeypatch.setattr(search._Timed, "run", run)
  return heur, seen

def test_beam_keeps_the_heuristic_unless_beaten(tmp_path, monkeypatch):
  monkeypatch.setenv("BAREGRAD_CACHE", str(tmp_path))
  heur, seen = _fake_times(monkeypatch, {None: 1e-4})
  assert beam_search(_matmul_ast(64), "CPU", 2, rounds=2) == list(heur)   # every other candidate is slower
  assert heur in seen and len(set(seen)) > 5                              # it was a candidate among many
  # a candidate faster when timed again wins (a fresh cache: a new search, the same candidates)
  monkeypatch.setenv("BAREGRAD_CACHE", str(tmp_path / "2"))
  fast = next(o for o in seen if o != heur and len(o) >= 2)
  _fake_times(monkeypatch, {None: 1e-4, fast: 5e-5})
  assert beam_search(_matmul_ast(64), "CPU", 2, rounds=2) == list(fast)

def test_beam_builds_in_worker_processes_with_a_budget(tmp_path, monkeypatch):
  import baregrad.engine.search as search
  from baregrad.helpers import Context
  monkeypatch.setenv("BAREGRAD_CACHE", str(tmp_path))
  heur, _ = _fake_times(monkeypatch, {None: 1e-4})
  with Context(BEAM_WORKERS=2):
    assert beam_search(_matmul_ast(64), "CPU", 1, rounds=1) == list(heur)
    assert any(p.poll() is None for w in search._pools.values() for p in w.procs)   # candidates were built by workers
  # builds over the budget are dropped (their workers killed): the search still answers, with the heuristic's choice
  monkeypatch.setenv("BAREGRAD_CACHE", str(tmp_path / "2"))
  with Context(BEAM_WORKERS=2, BEAM_BUILD_S="0.000001"):
    assert beam_search(_matmul_ast(48), "CPU", 1, rounds=1) == get_heur(_matmul_ast(48))

def get_heur(ast):
  from baregrad.codegen.program import get_program
  from baregrad.hal import Device
  return get_program(ast, Device["CPU"].renderer).opts
