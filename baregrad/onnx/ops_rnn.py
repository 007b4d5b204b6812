"""RNN, GRU and LSTM, unrolled over the sequence into one lazy graph: the input projections of every step are one
matmul up front, each step adds its recurrent matmul and gates. sequence_lens masks the steps past each batch row's
length (outputs 0 there, the state carried unchanged), as the ONNX specification says."""
from __future__ import annotations
from typing import Any, Callable
from baregrad import dtypes
from baregrad.tensor import Tensor, functional as F
from baregrad.onnx.errors import OnnxError, UnsupportedOperator
from baregrad.onnx.registry import op

def _activation(name: str, alpha: float | None, beta: float | None) -> Callable[[Tensor], Tensor]:
  a, b = alpha, beta
  fns: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": lambda x: x.relu(), "tanh": lambda x: x.tanh(), "sigmoid": lambda x: x.sigmoid(),
    "affine": lambda x: x * a + b, "leakyrelu": lambda x: x.leaky_relu(a), "thresholdedrelu": lambda x: (x > a).where(x, 0).cast(x.dtype),
    "scaledtanh": lambda x: (x * b).tanh() * a, "hardsigmoid": lambda x: (x * a + b).clip(0, 1), "elu": lambda x: x.elu(a),
    "softsign": lambda x: x.softsign(), "softplus": lambda x: x.softplus(),
  }
  f = fns.get(name.lower())
  if f is None: raise UnsupportedOperator(f"recurrent activation {name!r} is not supported")
  return f

_DEFAULT_AB = {"affine": (1.0, 0.0), "leakyrelu": (0.01, None), "thresholdedrelu": (1.0, None), "scaledtanh": (1.0, 1.0),
               "hardsigmoid": (0.2, 0.5), "elu": (1.0, None)}
_USES_ALPHA = {"affine", "leakyrelu", "thresholdedrelu", "scaledtanh", "hardsigmoid", "elu"}
_USES_BETA = {"affine", "scaledtanh", "hardsigmoid"}

def _activations(n: Any, defaults: list[str], dirs: int) -> list[list[Callable]]:
  names = n.attrs.get("activations") or defaults * dirs
  if len(names) == len(defaults) and dirs == 2: names = names * 2
  al, be = list(n.attrs.get("activation_alpha", [])), list(n.attrs.get("activation_beta", []))
  out, k = [], len(defaults)
  for d in range(dirs):
    fs = []
    for nm in names[d * k:(d + 1) * k]:
      lo = nm.lower()
      da, db = _DEFAULT_AB.get(lo, (None, None))
      a = al.pop(0) if lo in _USES_ALPHA and al else da
      b = be.pop(0) if lo in _USES_BETA and be else db
      fs.append(_activation(nm, a, b))
    out.append(fs)
  return out

def _setup(ctx, n, x, w, r, b, seq_lens, h0, gates: int):
  x, w, r = ctx.t(x), ctx.t(w), ctx.t(r)
  layout = n.attrs.get("layout", 0)
  if layout: x = x.transpose(0, 1)                     # -> [seq, batch, input]
  T, B = x.shape[:2]
  H = n.attrs.get("hidden_size", r.shape[-1])
  direction = n.attrs.get("direction", "forward")
  if direction not in ("forward", "reverse", "bidirectional"): raise OnnxError(f"{n.op}: direction {direction!r}")
  dirs = 2 if direction == "bidirectional" else 1
  if w.shape[0] != dirs: raise OnnxError(f"{n.op}: W has {w.shape[0]} directions, direction={direction!r} needs {dirs}")
  b = ctx.t(b) if b is not None else Tensor.full((dirs, 2 * gates * H), 0, dtype=x.dtype, device=x.device)
  h0 = ctx.t(h0)
  if h0 is not None and layout: h0 = h0.transpose(0, 1)
  if h0 is None: h0 = Tensor.full((dirs, B, H), 0, dtype=x.dtype, device=x.device)
  lens = ctx.t(seq_lens)
  mask = None
  if lens is not None:  # [T, B, 1]: which steps each batch row has
    t = Tensor.arange(T, device=x.device, dtype=dtypes.int64).reshape(T, 1, 1)
    mask = t < lens.cast(dtypes.int64).reshape(1, B, 1)
  return x, w, r, b, h0, mask, T, B, H, direction, dirs, layout

def _clip(n: Any, v: Tensor) -> Tensor:
  c = n.attrs.get("clip")
  return v if c is None else v.clip(-c, c)

def _steps(T: int, reverse: bool) -> range: return range(T - 1, -1, -1) if reverse else range(T)

def _finish(n: Any, ys: list[Tensor], hs: list[Tensor], layout: int, extra: list[Tensor] | None = None) -> tuple:
  y = F.stack(ys, 1)                                   # [seq, dirs, batch, hidden]
  yh = F.stack(hs, 0)                                  # [dirs, batch, hidden]
  if layout: y, yh = y.permute(2, 0, 1, 3), yh.transpose(0, 1)
  out = [y, yh]
  if extra is not None:
    yc = F.stack(extra, 0)
    out.append(yc.transpose(0, 1) if layout else yc)
  return tuple(out)

def _masked(mask: Tensor | None, t: int, new: Tensor, old: Tensor) -> tuple[Tensor, Tensor]:
  """(state to carry, output of the step): past a row's length the state is kept and the output is 0."""
  if mask is None: return new, new
  m = mask[t]
  return m.where(new, old), m.where(new, 0).cast(new.dtype)

@op("RNN")
def rnn(ctx, n, x, w, r, b=None, seq_lens=None, h0=None):
  x, w, r, b, h0, mask, T, B, H, direction, dirs, layout = _setup(ctx, n, x, w, r, b, seq_lens, h0, 1)
  acts = _activations(n, ["Tanh"], dirs)
  ys, hs = [], []
  for d in range(dirs):
    rev = direction == "reverse" or d == 1
    xw = x.matmul(w[d].T) + (b[d, :H] + b[d, H:])        # [T, B, H]
    h, out = h0[d], [None] * T
    for t in _steps(T, rev):
      hn = acts[d][0](_clip(n, xw[t] + h.matmul(r[d].T)))
      h, out[t] = _masked(mask, t, hn, h)
    ys.append(F.stack(out, 0)); hs.append(h)
  return _finish(n, ys, hs, layout)

@op("GRU")
def gru(ctx, n, x, w, r, b=None, seq_lens=None, h0=None):
  x, w, r, b, h0, mask, T, B, H, direction, dirs, layout = _setup(ctx, n, x, w, r, b, seq_lens, h0, 3)
  acts = _activations(n, ["Sigmoid", "Tanh"], dirs)
  lbr = n.attrs.get("linear_before_reset", 0)
  ys, hs = [], []
  for d in range(dirs):
    rev = direction == "reverse" or d == 1
    f, g = acts[d]
    wb, rb = b[d, :3 * H], b[d, 3 * H:]
    xw = x.matmul(w[d].T) + wb                            # [T, B, 3H]: z, r, h
    rz, rh = r[d][:2 * H], r[d][2 * H:]
    h, out = h0[d], [None] * T
    for t in _steps(T, rev):
      hr = h.matmul(rz.T) + rb[:2 * H]
      z = f(_clip(n, xw[t][:, :H] + hr[:, :H]))
      rr = f(_clip(n, xw[t][:, H:2 * H] + hr[:, H:]))
      if lbr: hh = g(_clip(n, xw[t][:, 2 * H:] + rr * (h.matmul(rh.T) + rb[2 * H:])))
      else: hh = g(_clip(n, xw[t][:, 2 * H:] + (rr * h).matmul(rh.T) + rb[2 * H:]))
      hn = (1 - z) * hh + z * h
      h, out[t] = _masked(mask, t, hn, h)
    ys.append(F.stack(out, 0)); hs.append(h)
  return _finish(n, ys, hs, layout)

@op("LSTM")
def lstm(ctx, n, x, w, r, b=None, seq_lens=None, h0=None, c0=None, p=None):
  x, w, r, b, h0, mask, T, B, H, direction, dirs, layout = _setup(ctx, n, x, w, r, b, seq_lens, h0, 4)
  acts = _activations(n, ["Sigmoid", "Tanh", "Tanh"], dirs)
  c0 = ctx.t(c0)
  if c0 is not None and layout: c0 = c0.transpose(0, 1)
  if c0 is None: c0 = Tensor.full((dirs, B, H), 0, dtype=x.dtype, device=x.device)
  p = ctx.t(p)
  couple = n.attrs.get("input_forget", 0)
  ys, hs, cs = [], [], []
  for d in range(dirs):
    rev = direction == "reverse" or d == 1
    f, g, hact = acts[d]
    xw = x.matmul(w[d].T) + (b[d, :4 * H] + b[d, 4 * H:])   # [T, B, 4H]: i, o, f, c
    pi, po, pf = (p[d, :H], p[d, H:2 * H], p[d, 2 * H:]) if p is not None else (None, None, None)
    h, c, out = h0[d], c0[d], [None] * T
    for t in _steps(T, rev):
      gates = xw[t] + h.matmul(r[d].T)
      gi, go, gf, gc = (gates[:, k * H:(k + 1) * H] for k in range(4))
      i = f(_clip(n, gi + c * pi if pi is not None else gi))
      fg = (1 - i) if couple else f(_clip(n, gf + c * pf if pf is not None else gf))
      cn = fg * c + i * g(_clip(n, gc))
      o = f(_clip(n, go + cn * po if po is not None else go))
      hn = o * hact(cn)
      if mask is not None: c = mask[t].where(cn, c)
      else: c = cn
      h, out[t] = _masked(mask, t, hn, h)
    ys.append(F.stack(out, 0)); hs.append(h); cs.append(c)
  return _finish(n, ys, hs, layout, cs)
