"""Control flow (If, Loop, Scan), sequences and optionals.

If and Loop are unrolled while the graph is built: If takes the branch its condition names when that is known on
the host (a constant, or a value computed from shapes); otherwise both branches are built and, when their outputs
agree in shape and type, selected elementwise with where (no sync); only branches of different shapes read the
condition back (a data-dependent sync). Loop runs its body once per iteration on the host; its condition must be
known on the host after each iteration (a sync when it comes from the data). Sequences are Python lists of values."""
from __future__ import annotations
from typing import Any
import numpy as np
from baregrad import dtypes
from baregrad.tensor import Tensor, functional as F
from baregrad.onnx.errors import OnnxError, UnsupportedOperator
from baregrad.onnx.registry import op
from baregrad.onnx.proto import dtype_of_np

MAX_LOOP_ITERATIONS = 1 << 16

def _cond_value(ctx, c: Any, what: str) -> bool | None:
  """The condition on the host when that needs no data-dependent sync, else None."""
  if c is None: return True
  if isinstance(c, np.ndarray) or ctx.is_const(c): return bool(ctx.host(c, what).reshape(-1)[0])
  return None

def _same_kind(a: Any, b: Any) -> bool:
  if isinstance(a, list) or isinstance(b, list) or a is None or b is None: return False
  return tuple(a.shape) == tuple(b.shape) and (a.dtype if isinstance(a, Tensor) else dtype_of_np(a)) == (b.dtype if isinstance(b, Tensor) else dtype_of_np(b))

@op("If")
def if_(ctx, n, cond):
  then_g, else_g = n.attrs["then_branch"], n.attrs["else_branch"]
  c = _cond_value(ctx, cond, "If's condition")
  if c is not None: return tuple(ctx.run_graph(then_g if c else else_g, ctx.scope, {}))
  try:
    a, b = ctx.run_graph(then_g, ctx.scope, {}), ctx.run_graph(else_g, ctx.scope, {})
    if len(a) == len(b) and all(_same_kind(x, y) for x, y in zip(a, b)):
      ct = ctx.t(cond).reshape(()).cast(dtypes.bool)
      return tuple(ct.where(ctx.t(x), ctx.t(y)) for x, y in zip(a, b))
  except OnnxError: pass
  c = bool(ctx.host(cond, "If's condition").reshape(-1)[0])
  return tuple(ctx.run_graph(then_g if c else else_g, ctx.scope, {}))

def _stack(vals: list[Any], ctx) -> Any:
  if all(isinstance(v, np.ndarray) for v in vals): return np.stack(vals)
  return F.stack([ctx.t(v) for v in vals], 0)

@op("Loop")
def loop(ctx, n, m=None, cond=None, *carried):
  body = n.attrs["body"]
  trips = None if m is None else int(ctx.scalar(m, "Loop's trip count M"))
  c = _cond_value(ctx, cond, "Loop's condition")
  if c is None: c = bool(ctx.host(cond, "Loop's condition").reshape(-1)[0])
  state = list(carried)
  nb_in = len(body.inputs)
  if nb_in != 2 + len(state): raise OnnxError(f"Loop body takes {nb_in} inputs for {len(state)} loop-carried values (+ iteration, condition)")
  scans: list[list[Any]] = [[] for _ in range(len(body.outputs) - 1 - len(state))]
  i = 0
  while c and (trips is None or i < trips):
    if i >= MAX_LOOP_ITERATIONS: raise OnnxError(f"Loop ran {MAX_LOOP_ITERATIONS} iterations without stopping")
    binds = {body.inputs[0].name: np.array(i, np.int64), body.inputs[1].name: np.array(c, np.bool_)}
    binds.update({vi.name: v for vi, v in zip(body.inputs[2:], state)})
    outs = ctx.run_graph(body, ctx.scope, binds)
    cv = _cond_value(ctx, outs[0], "Loop body's condition")
    c = cv if cv is not None else bool(ctx.host(outs[0], "Loop body's condition").reshape(-1)[0])
    state = list(outs[1:1 + len(state)])
    for k, v in enumerate(outs[1 + len(state):]): scans[k].append(v)
    i += 1
  res = list(state)
  for k, s in enumerate(scans):
    if s: res.append(_stack(s, ctx))
    else:
      vi = body.outputs[1 + len(state) + k]
      d = ctx.dtype(vi.elem_type) if vi.elem_type else dtypes.float32
      shp = (0,) + tuple(x if isinstance(x, int) else 0 for x in (vi.shape or ()))
      res.append(Tensor.full(shp, 0, dtype=d, device=ctx.device))
  return tuple(res)

@op("Scan")
def scan(ctx, n, *ins):
  body = n.attrs["body"]
  if n.opset < 9: return _scan8(ctx, n, body, *ins)
  k = n.attrs["num_scan_inputs"]
  state, xs = list(ins[:len(ins) - k]), [ctx.t(x) for x in ins[len(ins) - k:]]
  in_axes = n.attrs.get("scan_input_axes", [0] * k)
  in_dirs = n.attrs.get("scan_input_directions", [0] * k)
  nout = len(body.outputs) - len(state)
  out_axes = n.attrs.get("scan_output_axes", [0] * nout)
  out_dirs = n.attrs.get("scan_output_directions", [0] * nout)
  xs = [x.transpose(0, a % x.ndim) if a % x.ndim else x for x, a in zip(xs, in_axes)]
  xs = [x.flip(0) if d else x for x, d in zip(xs, in_dirs)]
  T = xs[0].shape[0] if xs else 0
  outs: list[list[Any]] = [[] for _ in range(nout)]
  for t in range(T):
    binds = {vi.name: v for vi, v in zip(body.inputs, state + [x[t] for x in xs])}
    r = ctx.run_graph(body, ctx.scope, binds)
    state = list(r[:len(state)])
    for j, v in enumerate(r[len(state):]): outs[j].append(ctx.t(v))
  res = list(state)
  for j, o in enumerate(outs):
    y = F.stack(o, 0)
    if out_dirs[j]: y = y.flip(0)
    a = out_axes[j] % y.ndim
    if a: y = y.permute(*range(1, a + 1), 0, *range(a + 1, y.ndim))
    res.append(y)
  return tuple(res)

def _scan8(ctx, n, body, seq_lens, *ins):
  """Scan of opset 8: every input has a batch axis first and the scan axis second; batch element b runs
  sequence_lens[b] steps (all of them when omitted), and its scan outputs are padded with zeros after them."""
  k = n.attrs["num_scan_inputs"]
  state, xs = [ctx.t(v) for v in ins[:len(ins) - k]], [ctx.t(x) for x in ins[len(ins) - k:]]
  dirs = n.attrs.get("directions", [0] * k)
  nout = len(body.outputs) - len(state)
  B = (state + xs)[0].shape[0]
  T = xs[0].shape[1] if xs else 0
  lens = ctx.ints(seq_lens, "Scan's sequence_lens") if seq_lens is not None else []
  lens = lens or [T] * B  # omitted or empty: every batch element runs the whole sequence
  if len(lens) != B or any(not 0 <= t <= T for t in lens): raise OnnxError(f"Scan: sequence_lens {lens} must hold {B} lengths in [0, {T}]")
  finals: list[list[Tensor]] = [[] for _ in state]
  outs: list[list[Tensor]] = [[] for _ in range(nout)]
  for b in range(B):
    st = [s[b] for s in state]
    seq = [x[b, :lens[b]] for x in xs]
    seq = [x.flip(0) if d else x for x, d in zip(seq, dirs)]
    steps: list[list[Tensor]] = [[] for _ in range(nout)]
    for t in range(lens[b]):
      r = ctx.run_graph(body, ctx.scope, {vi.name: v for vi, v in zip(body.inputs, st + [x[t] for x in seq])})
      st = [ctx.t(v) for v in r[:len(st)]]
      for j, v in enumerate(r[len(st):]): steps[j].append(ctx.t(v))
    for j, v in enumerate(st): finals[j].append(v)
    for j, o in enumerate(steps):
      if not o: raise UnsupportedOperator("Scan (opset 8): a batch element with no steps leaves its scan outputs' shape unknown")
      y = F.stack(o, 0)
      outs[j].append(y.pad((0, 0) * (y.ndim - 1) + (0, T - lens[b])) if lens[b] < T else y)
  return tuple([F.stack(f, 0) for f in finals] + [F.stack(o, 0) for o in outs])

# ---------------------------------------------------------------- sequences

def _pos(ctx, p: Any, n_items: int, insert: bool = False) -> int:
  i = int(ctx.scalar(p, "sequence position"))
  if i < 0: i += n_items
  if not 0 <= i <= (n_items if insert else n_items - 1): raise OnnxError(f"sequence position {i} is out of range for a sequence of {n_items}")
  return i

@op("SequenceEmpty")
def sequence_empty(ctx, n): return []
@op("SequenceConstruct")
def sequence_construct(ctx, n, *xs): return list(xs)
@op("SequenceInsert")
def sequence_insert(ctx, n, seq, x, pos=None):
  s = list(seq)
  s.insert(len(s) if pos is None else _pos(ctx, pos, len(s), True), x)
  return s
@op("SequenceAt")
def sequence_at(ctx, n, seq, pos): return seq[_pos(ctx, pos, len(seq))]
@op("SequenceErase")
def sequence_erase(ctx, n, seq, pos=None):
  s = list(seq)
  del s[len(s) - 1 if pos is None else _pos(ctx, pos, len(s))]
  return s
@op("SequenceLength")
def sequence_length(ctx, n, seq): return np.array(len(seq), np.int64)

@op("ConcatFromSequence")
def concat_from_sequence(ctx, n, seq):
  ts = [ctx.t(x) for x in seq]
  a = n.attrs["axis"]
  if n.attrs.get("new_axis", 0): return F.stack(ts, a % (ts[0].ndim + 1))
  return F.cat(ts, a % ts[0].ndim)

@op("SplitToSequence")
def split_to_sequence(ctx, n, x, split=None):
  x = ctx.t(x)
  a = n.attrs.get("axis", 0) % x.ndim
  if split is None:
    parts = F.split(x, 1, a)
    return [p.squeeze(a) for p in parts] if not n.attrs.get("keepdims", 1) else list(parts)
  sp = ctx.ints(split, "SplitToSequence's split")
  if len(ctx.host(split, "").shape) == 0: return list(F.split(x, sp[0], a))
  return list(F.split(x, sp, a))

@op("SequenceMap")
def sequence_map(ctx, n, seq, *extra):
  body = n.attrs["body"]
  outs: list[list[Any]] = [[] for _ in body.outputs]
  L = len(seq)
  for i in range(L):
    binds = {body.inputs[0].name: seq[i]}
    for vi, e in zip(body.inputs[1:], extra): binds[vi.name] = e[i] if isinstance(e, list) else e
    for j, v in enumerate(ctx.run_graph(body, ctx.scope, binds)): outs[j].append(v)
  return tuple(outs)

@op("Optional")
def optional(ctx, n, x=None): return x
@op("OptionalHasElement")
def optional_has_element(ctx, n, x=None): return np.array(x is not None, np.bool_)
@op("OptionalGetElement")
def optional_get_element(ctx, n, x):
  if x is None: raise OnnxError("OptionalGetElement of an empty optional")
  return x
