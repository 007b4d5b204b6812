"""repr() of a Tensor the way PyTorch prints one: `tensor([[ 1.5000, -2.0000]], dtype=dtypes.float16, requires_grad=True)`.

The values are realized (the tensor's graph runs, as in PyTorch, where values always exist) and formatted on the
host with PyTorch's default print options: 4 digits of precision, scientific notation when the magnitudes span more
than 1000x (or exceed 1e8, or fall under 1e-4), a line width of 80, and more than 1000 elements summarized with 3
edge items per axis. The dtype suffix names baregrad's dtype (`dtypes.float16`); the device is shown unless it is the default
device (PyTorch shows it unless it is the CPU)."""
from __future__ import annotations
import math
from typing import Any
import numpy as np

PRECISION, THRESHOLD, EDGEITEMS, LINEWIDTH = 4, 1000, 3, 80

class _Formatter:
  """Chooses one format (int-valued floats, fixed point or scientific) and one width for all the printed values."""
  def __init__(self, vals: np.ndarray, floating: bool):
    self.floating, self.int_mode, self.sci_mode, self.max_width = floating, True, False, 1
    flat = vals.reshape(-1)
    if not floating:
      for v in flat.tolist(): self.max_width = max(self.max_width, len(str(v)))
      return
    nz = flat[np.isfinite(flat) & (flat != 0)].astype(np.float64)
    if nz.size == 0: return
    amin, amax = float(np.abs(nz).min()), float(np.abs(nz).max())
    self.int_mode = bool((nz == np.ceil(nz)).all())
    if self.int_mode:
      if amax / amin > 1000.0 or amax > 1.0e8:
        self.sci_mode = True
        for v in nz.tolist(): self.max_width = max(self.max_width, len(f"{v:.{PRECISION}e}"))
      else:
        for v in nz.tolist(): self.max_width = max(self.max_width, len(f"{v:.0f}") + 1)
    else:
      self.sci_mode = amax / amin > 1000.0 or amax > 1.0e8 or amin < 1.0e-4
      fmt = f"{{:.{PRECISION}{'e' if self.sci_mode else 'f'}}}"
      for v in nz.tolist(): self.max_width = max(self.max_width, len(fmt.format(v)))

  def format(self, v: Any) -> str:
    if not self.floating: s = f"{v}"
    elif self.sci_mode: s = f"{v:{self.max_width}.{PRECISION}e}"
    elif self.int_mode:
      s = f"{v:.0f}"
      if not (math.isinf(v) or math.isnan(v)): s += "."
    else: s = f"{v:.{PRECISION}f}"
    return (self.max_width - len(s)) * " " + s

def _summarized(a: np.ndarray) -> np.ndarray:
  """The elements that will be printed (edge items of every axis), for choosing the format."""
  if a.ndim == 0: return a
  if a.shape[0] > 2 * EDGEITEMS: a = np.concatenate([a[:EDGEITEMS], a[-EDGEITEMS:]])
  if a.ndim == 1: return a
  return np.stack([_summarized(x) for x in a])

def _vector(a: np.ndarray, indent: int, summarize: bool, f: _Formatter) -> str:
  per_line = max(1, int(math.floor((LINEWIDTH - indent) / (f.max_width + 2))))
  if summarize and a.shape[0] > 2 * EDGEITEMS:
    data = [f.format(v) for v in a[:EDGEITEMS].tolist()] + [" ..."] + [f.format(v) for v in a[-EDGEITEMS:].tolist()]
  else: data = [f.format(v) for v in a.tolist()]
  lines = [", ".join(data[i:i + per_line]) for i in range(0, len(data), per_line)]
  return "[" + ("," + "\n" + " " * (indent + 1)).join(lines) + "]"

def _nested(a: np.ndarray, indent: int, summarize: bool, f: _Formatter) -> str:
  if a.ndim == 0: return f.format(a.item())
  if a.ndim == 1: return _vector(a, indent, summarize, f)
  n = a.shape[0]
  if summarize and n > 2 * EDGEITEMS:
    parts = [_nested(a[i], indent + 1, summarize, f) for i in range(EDGEITEMS)] + ["..."] + \
            [_nested(a[i], indent + 1, summarize, f) for i in range(n - EDGEITEMS, n)]
  else: parts = [_nested(a[i], indent + 1, summarize, f) for i in range(n)]
  return "[" + ("," + "\n" * (a.ndim - 1) + " " * (indent + 1)).join(parts) + "]"

def tensor_repr(t: Any) -> str:
  from baregrad.ir.dtype import dtypes, torch_name
  prefix, suffixes = "tensor(", []
  from baregrad.hal import Device
  if t.device != Device.canonicalize(Device.DEFAULT): suffixes.append(f"device='{t.device}'")
  if t.numel() == 0:
    if t.ndim != 1: suffixes.append(f"size={tuple(t.shape)}")
    if t.dtype != dtypes.float32: suffixes.append(f"dtype=dtypes.{torch_name(t.dtype)}")
    body = "[]"
  else:
    if t.dtype not in (dtypes.float32, dtypes.int64, dtypes.bool): suffixes.append(f"dtype=dtypes.{torch_name(t.dtype)}")
    a = t.numpy()
    floating = dtypes.is_float(t.dtype)
    if floating: a = a.astype(np.float64)
    summarize = a.size > THRESHOLD
    body = _nested(a, len(prefix), summarize, _Formatter(_summarized(a) if summarize else a, floating))
  if t.requires_grad: suffixes.append("requires_grad=True")
  out, last = [prefix + body], len(prefix + body) - (prefix + body).rfind("\n") + 1
  for s in suffixes:
    if last + len(s) + 2 > LINEWIDTH:
      out.append(",\n" + " " * len(prefix) + s)
      last = len(prefix) + len(s)
    else:
      out.append(", " + s)
      last += len(s) + 2
  return "".join(out) + ")"
