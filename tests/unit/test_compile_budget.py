"""Compile time is bounded by construction, checked on code size (never on wall time): every kernel of the README job
(one training step and the evaluation of examples/mnist_mlp.py's model, compiled with an empty cache) and kernels pushed
to the opt budgets render to IR whose vectors fit a register chunk (wide values are split before LLVM sees them: a 256-lane
accumulator cost LLVM 18 s) and whose instruction counts, in the IR and in the machine code, stay under generous bounds."""
from __future__ import annotations
import re
import numpy as np
import pytest
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import Ops
from baregrad.ir.view import ShapeTracker
from baregrad.codegen.astbuild import load, store, reduce, sink
from baregrad.codegen.kernel import Kernel, Opt, OptOps, OptError, VECTOR_LANES, CODE_BUDGET
from baregrad.codegen.program import get_program
from baregrad.drivers import cpu_compile
from baregrad.drivers.elf_loader import disassemble
from baregrad.hal import Device

IR_MAX, ASM_MAX, C_MAX = 3000, 4000, 4000   # the largest README kernel (threefry, 16 lanes) is ~650 IR / ~700 machine
f32 = dtypes.float32
U, R, P, PAD = OptOps.UPCAST, OptOps.UNROLL, OptOps.PARALLEL, OptOps.PADTO

def ir_instructions(src: str) -> int:
  return sum(1 for ln in src.splitlines() if ln.startswith("  ") and not ln.lstrip().startswith(";"))

def widest_vector(src: str) -> int: return max((int(n) for n in re.findall(r"<(\d+) x ", src)), default=1)

def asm_instructions(lib: bytes, name: str) -> int:
  return sum(1 for ln in disassemble(lib, name).splitlines() if re.match(r"\s+[0-9a-f]+:\s", ln))

def check_llvm(name: str, src: str, lib: bytes) -> None:
  assert widest_vector(src) <= VECTOR_LANES, f"{name}: a <{widest_vector(src)} x ...> vector reached LLVM (chunks are {VECTOR_LANES} lanes)"
  assert ir_instructions(src) <= IR_MAX, f"{name}: {ir_instructions(src)} IR instructions, bound {IR_MAX}"
  assert asm_instructions(lib, name) <= ASM_MAX, f"{name}: {asm_instructions(lib, name)} machine instructions, bound {ASM_MAX}"

def test_readme_job_kernels_compile_small(tmp_path, monkeypatch):
  import baregrad.nn as nn
  from baregrad import Tensor
  from baregrad.nn import optim
  from baregrad.engine import runner
  monkeypatch.setenv("BAREGRAD_CACHE", str(tmp_path))   # an empty compile cache...
  monkeypatch.setattr(runner, "_cache", {})             # ...and no program compiled earlier in this process
  compiled: list[tuple[str, str, bytes]] = []
  real = cpu_compile.LLVMCompiler.compile
  def record(self, src: str) -> bytes:
    lib = real(self, src)
    compiled.append((re.search(r"define void @(\w+)", src).group(1), src, lib))
    return lib
  monkeypatch.setattr(cpu_compile.LLVMCompiler, "compile", record)
  Tensor.manual_seed(0)
  l1, l2 = nn.Linear(784, 128), nn.Linear(128, 10)   # examples/mnist_mlp.py's model, its batch and optimizer
  opt = optim.Adam(nn.get_parameters([l1, l2]), lr=2e-3)
  rng = np.random.default_rng(0)
  with nn.train(True):
    loss = nn.cross_entropy(l2(l1(Tensor(rng.standard_normal((64, 784), dtype=np.float32))).relu()), Tensor(rng.integers(0, 10, 64).astype(np.int32)))
    opt.zero_grad(); loss.backward(); opt.step(loss)
    assert np.isfinite(loss.item())
  with nn.train(False): l2(l1(Tensor(rng.standard_normal((512, 784), dtype=np.float32))).relu()).argmax(-1).numpy()
  assert len(compiled) >= 20, f"only {len(compiled)} kernels compiled: the README job was not run through the compiler"
  for name, src, lib in compiled: check_llvm(name, src, lib)

def _matmul(M: int, K: int, N: int, transposed_b: bool = False):
  sa = ShapeTracker.from_shape((M, K)).reshape((M, 1, K)).expand((M, N, K))
  sb = (ShapeTracker.from_shape((N, K)).reshape((1, N, K)) if transposed_b else
        ShapeTracker.from_shape((K, N)).permute((1, 0)).reshape((1, N, K))).expand((M, N, K))
  return sink(store(0, (M, N, 1), reduce(load(1, f32, sa) * load(2, f32, sb), Ops.ADD, (2,))))

LARGE = {
  "matmul tile 8x32": (_matmul(256, 784, 128), [Opt(U, 1, 32), Opt(U, 0, 8), Opt(P, 0)]),
  "matmul x@W.T 4x4x16": (_matmul(64, 784, 128, True), [Opt(R, 2, 16), Opt(U, 0, 4), Opt(U, 1, 4), Opt(P, 0)]),
  "matmul 511 padded": (_matmul(511, 511, 511), [Opt(PAD, 1, 32), Opt(U, 1, 32), Opt(PAD, 0, 8), Opt(U, 0, 8)]),
  "reduce unroll 256": (sink(store(0, (1,), reduce(load(1, f32, (4099,)), Ops.ADD, (0,)))), [Opt(PAD, 0, 256), Opt(R, 0, 256)]),
  "transpose 16x16 lanes": (sink(store(0, (64, 64), load(1, f32, ShapeTracker.from_shape((64, 64)).permute((1, 0))) * 2)), [Opt(U, 0, 16), Opt(U, 1, 16)]),
  "heuristic matmul 1023x1025x1027": (_matmul(1023, 1025, 1027), None),
}

@pytest.mark.parametrize("case", list(LARGE))
def test_large_unroll_kernels_are_bounded(case):
  ast, opts = LARGE[case]
  cpu = Device["CPU"]
  try: spec = get_program(ast, cpu.renderer, opts)
  except OptError as e:  # refused by the budget: that is the bound working, it must say so
    assert "budget" in str(e) or "lanes" in str(e), str(e)
    return
  check_llvm(spec.name, spec.src, cpu.compiler.compile(spec.src))
  from baregrad.codegen.renderer.cstyle import CRenderer
  csrc = get_program(ast, CRenderer(), opts).src
  assert csrc.count("\n") <= C_MAX, f"{case}: {csrc.count(chr(10))} lines of C, bound {C_MAX}"

def test_budget_refuses_code_explosions():
  # a gather (a transposed view read through a reshape: the index is not affine in the lanes) costs a scalar load and
  # its own index arithmetic per lane: 256 such lanes are over the budget, and the refused opt leaves the kernel as it was
  k = Kernel(sink(store(0, (4096,), load(1, f32, ShapeTracker.from_shape((64, 64)).permute((1, 0)).reshape((4096,))) * 2)))
  k.apply_opt(Opt(U, 0, 64))
  before = (k.colored_shape(), k.code_estimate())
  with pytest.raises(OptError, match="budget"): k.apply_opt(Opt(U, 0, 4))
  assert (k.colored_shape(), k.code_estimate()) == before and before[1] <= CODE_BUDGET
  with pytest.raises(OptError, match="lanes"): Kernel(_matmul(1024, 64, 1024)).apply_opt(Opt(U, 1, 512))
