"""The operator table: ONNX (domain, op_type) -> a function that builds Tensor ops for one node.

An operator function is called as fn(ctx, node, *inputs): inputs are Tensors, host NumPy arrays (initializers,
constants, shapes: converted with ctx.t() where a Tensor is needed, read with ctx.ints()/ctx.host() where a value must
be known on the host) or None for an omitted optional input. It returns one value or a tuple, one per node output.
FOLD holds host versions of the shape-arithmetic operators, used only when every input is a small host constant."""
from __future__ import annotations
from typing import Any, Callable

OPS: dict[tuple[str, str], Callable[..., Any]] = {}
FOLD: dict[str, Callable[..., Any]] = {}

def op(*names: str, domain: str = "") -> Callable:
  def deco(fn: Callable) -> Callable:
    for nm in names: OPS[(domain, nm)] = fn
    return fn
  return deco

def fold(*names: str) -> Callable:
  def deco(fn: Callable) -> Callable:
    for nm in names: FOLD[nm] = fn
    return fn
  return deco

def lookup(domain: str, name: str) -> Callable | None:
  return OPS.get(("" if domain == "ai.onnx" else domain, name))
