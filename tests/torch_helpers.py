"""Compare baregrad Tensor ops against PyTorch (CPU): forward values and dtypes, and gradients through autograd."""
from __future__ import annotations
from typing import Any, Callable
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from baregrad import Tensor, dtypes  # noqa: E402
from baregrad.ir.dtype import torch_name  # noqa: E402

def tdtype(d) -> Any: return getattr(torch, torch_name(d))
def bdtype(td) -> Any: return dtypes.from_name(str(td).removeprefix("torch."))

def rnd(shape, dtype: str = "float32", low: float = -2.0, high: float = 2.0, seed: int = 0) -> np.ndarray:
  """Random NumPy data of a dtype: uniform floats in [low, high), integers in [low, high), or bools."""
  rng = np.random.default_rng(seed)
  if dtype == "bool": return rng.random(shape) < 0.5
  if np.issubdtype(np.dtype(dtype), np.floating): return rng.uniform(low, high, shape).astype(dtype)
  return rng.integers(int(low), int(high), shape).astype(dtype)

def _is_float(a: np.ndarray) -> bool: return np.issubdtype(a.dtype, np.floating)

def assert_same(ob: Tensor, ot: Any, rtol: float = 1e-5, atol: float = 1e-6, check_dtype: bool = True, what: str = "") -> None:
  """A baregrad result equals a torch result: shape, dtype and values (exact for ints and bools)."""
  assert isinstance(ob, Tensor), f"{what}: expected a Tensor, got {type(ob).__name__}"
  assert ob.shape == tuple(ot.shape), f"{what}: shape {ob.shape} != torch {tuple(ot.shape)}"
  if check_dtype: assert torch_name(ob.dtype) == str(ot.dtype).removeprefix("torch."), f"{what}: dtype {ob.dtype} != torch {ot.dtype}"
  nb, nt = ob.numpy(), ot.detach().float().numpy() if ot.dtype == torch.bfloat16 else ot.detach().numpy()
  if ot.dtype.is_floating_point:
    np.testing.assert_allclose(nb.astype(np.float64), nt.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True, err_msg=what)
  else: np.testing.assert_array_equal(nb, nt.astype(nb.dtype) if not check_dtype else nt, err_msg=what)

def check(fn: Callable, *inputs: np.ndarray, tfn: Callable | None = None, rtol: float = 1e-5, atol: float = 1e-6,
          grad: bool = True, grad_rtol: float | None = None, grad_atol: float | None = None, check_dtype: bool = True,
          seed: int = 1, what: str = "") -> tuple[Tensor, Any]:
  """Run fn on baregrad tensors and tfn (default fn) on torch tensors made from the same NumPy inputs; compare the
  outputs, then (for float outputs) the gradients of sum(out * w) for random weights w with respect to every float input."""
  tfn = tfn or fn
  want = [grad and _is_float(a) for a in inputs]
  bt = [Tensor(a, requires_grad=True if w else None) for a, w in zip(inputs, want)]
  tt = [torch.tensor(a, requires_grad=w) for a, w in zip(inputs, want)]
  ob, ot = fn(*bt), tfn(*tt)
  assert_same(ob, ot, rtol, atol, check_dtype, what=f"{what} forward")
  if any(want) and ot.dtype.is_floating_point and ot.requires_grad:
    w = np.random.default_rng(seed).normal(size=tuple(ot.shape)).astype(np.float32)
    (ob * Tensor(w).cast(ob.dtype)).sum().backward()
    (ot * torch.tensor(w).to(ot.dtype)).sum().backward()
    for i, (b, t) in enumerate(zip(bt, tt)):
      if not t.requires_grad: continue
      tg = t.grad if t.grad is not None else torch.zeros_like(t)
      assert b.grad is not None or not tg.abs().sum().item(), f"{what} input {i}: no gradient, torch has one"
      if b.grad is None: continue
      assert_same(b.grad, tg, grad_rtol or max(rtol, 1e-5) * 10, grad_atol or max(atol, 1e-6) * 10, check_dtype=False, what=f"{what} grad of input {i}")
  return ob, ot
