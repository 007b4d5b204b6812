"""Memory instructions of PTXKernel (`MemoryOps`): cvta, ld/ldu/st in every state space (global, shared, local,
param, const, generic through the windows), atom and red; a fault names the first faulting thread and block."""
from __future__ import annotations
import re
import numpy as np
from baregrad.drivers.mock.ptx.dtypes import _DT, _SPACES, _is_float
from baregrad.drivers.mock.ptx.errors import GPUFault, PTXError
from baregrad.drivers.mock.ptx.launch import _Ctx
from baregrad.drivers.mock.ptx.memory import _gather, _scatter
from baregrad.drivers.mock.ptx.parser import _split_operands, _Ins

def _fault_thread(c: _Ctx, e, a, m: np.ndarray | None, span):
  """Name the first faulting thread (and its block) in a GPUFault's message."""
  if getattr(e, "thread", None) is not None or e.address is None:
    return e
  act = np.ones(c.n, bool) if m is None else m
  bad = int(e.address)
  for base in (0, c.win.shared, c.win.local):
    lo = a.astype(np.uint64) - np.uint64(base)
    hit = act & (lo <= np.uint64(bad)) & (np.uint64(bad) < lo + np.uint64(span))
    if hit.any():
      lane = int(np.argmax(hit))
      t = tuple(int(c.special(f"tid.{x}")[lane]) for x in "xyz")
      b = tuple(int(c.special(f"ctaid.{x}")[lane]) for x in "xyz")
      e.thread, e.block = t, b
      e.msg = f"{e.msg} (thread {t} of block {b})"
      e.args = (e._fmt(),)
      break
  return e


def _atomic(aop, off, vals, dt: np.dtype, ld, st: str):
  """Apply an atomic op for the active lanes in lane order; returns the old values."""
  uniq, inv = np.unique(off, return_inverse=True)
  inv = inv.reshape(-1)
  b = vals[0]
  if uniq.size == off.size:  # no two lanes on one address: one vector read-modify-write
    old = ld(off)
    st(off, _atom_apply(aop, old, b, vals[1] if aop == "cas" else None, dt))
    return old
  if aop == "add":  # several lanes per address: exclusive prefix sums within each address
    order = np.argsort(inv, kind="stable")
    sv = np.asarray(b)[order].astype(dt)
    cs = np.cumsum(sv, dtype=dt)
    gi = inv[order]
    starts = np.r_[0, np.flatnonzero(gi[1:] != gi[:-1]) + 1]
    gstart_cs = np.zeros(uniq.size, dt)
    gstart_cs[1:] = cs[starts[1:] - 1]
    base = ld(uniq)
    excl = cs - sv - gstart_cs[gi]
    old_sorted = (base[gi] + excl).astype(dt)
    old = np.empty_like(old_sorted)
    old[order] = old_sorted
    tot = cs[np.r_[starts[1:] - 1, cs.size - 1]] - gstart_cs
    st(uniq, (base + tot).astype(dt))
    return old
  # general case: sequential in lane order
  cur = dict(zip(uniq.tolist(), ld(uniq)))
  old = np.empty(off.size, dt)
  cv = vals[1] if aop == "cas" else None
  for i, a in enumerate(off.tolist()):
    o = cur[a]
    old[i] = o
    cur[a] = _atom_apply(aop, np.array([o], dt), np.array([b[i]], dt),
                         None if cv is None else np.array([cv[i]], dt), dt)[0]
  st(uniq, np.array([cur[a] for a in uniq.tolist()], dt))
  return old


def _atom_apply(aop, old, b, c: _Ctx, dt: np.dtype):
  if aop == "add":
    return (old + b).astype(dt)
  if aop == "min":
    return np.minimum(old, b)
  if aop == "max":
    return np.maximum(old, b)
  if aop == "and":
    return old & b
  if aop == "or":
    return old | b
  if aop == "xor":
    return old ^ b
  if aop == "exch":
    return np.broadcast_to(b, old.shape).astype(dt)
  if aop == "cas":  # atom.cas d, [a], b, c: store c if old == b
    return np.where(old == b, c, old).astype(dt)
  if aop == "inc":  # ((old >= b) ? 0 : old + 1)
    return np.where(old >= b, dt.type(0), old + dt.type(1)).astype(dt)
  if aop == "dec":  # ((old == 0) | (old > b)) ? b : old - 1
    return np.where((old == 0) | (old > b), b, old - dt.type(1)).astype(dt)
  raise PTXError(f"unsupported atomic op {aop}")


class MemoryOps:
  """Instruction compilers for address conversion, loads, stores and atomics."""

  def _c_cvta(self, ins: _Ins) -> None:
    self._need(ins, 2)
    t = self._one_type(ins)
    dt = _DT[t]
    to = "to" in ins.mods
    space = next((m for m in ins.mods if m in _SPACES), None)
    if space is None:
      raise self._err(ins, "cvta needs a state space")
    src = self._src(ins, ins.ops[1], dt)
    wd = self._dst(ins, ins.ops[0])
    if space not in ("shared", "local"):
      ins.fn = lambda c, m: wd(c, src(c), False, m)
      return
    mask = (1 << (8 * dt.itemsize)) - 1
    attr = "cvta_" + space

    def fn(c, m):
      b = dt.type(getattr(c.win, attr) & mask)
      v = np.asarray(src(c))
      wd(c, (v - b if to else v + b).astype(dt), False, m)
    ins.fn = fn

  # memory
  def _space(self, ins: _Ins):
    sp = next((m for m in ins.mods if m in _SPACES), "generic")
    if sp == "param" and self.call_params:
      a = ins.ops[1] if ins.op in ("ld", "ldu") else ins.ops[0]
      base = re.sub(r"[\[\]\s]", "", a).split("+")[0]
      if base in self.call_params:
        return "local"
    return sp

  def _vec(self, ins: _Ins):
    v = next((m for m in ins.mods if m in ("v2", "v4", "v8")), None)
    return int(v[1:]) if v else 1

  def _c_ld(self, ins: _Ins) -> None:
    self._need(ins, 2)
    t = self._one_type(ins)
    dt = _DT[t]
    space = self._space(ins)
    nv = self._vec(ins)
    addr = self._addr(ins, ins.ops[1], space)
    d = ins.ops[0]
    if nv > 1:
      if not d.startswith("{"):
        raise self._err(ins, f"ld.v{nv} needs a vector destination {{...}}")
      dsts = [self._dst(ins, p, tname=t) for p in _split_operands(d.strip()[1:-1])]
      if len(dsts) != nv:
        raise self._err(ins, f"ld.v{nv} needs {nv} destination registers")
    else:
      dsts = [self._dst(ins, d, tname=t)]
    sg = dt.kind == "i"
    w = dt.itemsize
    load = self._mem_access(ins, space, dt, nv, "load")

    def fn(c, m):
      a = addr(c)
      if np.ndim(a) == 0:
        a = np.full(c.n, a, np.uint64)
      try:
        vals = load(c, a, m)
      except GPUFault as e:
        raise _fault_thread(c, e, a, m, nv * w)
      for k, wd in enumerate(dsts):
        wd(c, vals[k], sg, m)
    ins.fn = fn

  _c_ldu = _c_ld

  def _c_st(self, ins: _Ins) -> None:
    self._need(ins, 2)
    t = self._one_type(ins)
    dt = _DT[t]
    space = self._space(ins)
    nv = self._vec(ins)
    addr = self._addr(ins, ins.ops[0], space)
    s = ins.ops[1].strip()
    if nv > 1:
      if not s.startswith("{"):
        raise self._err(ins, f"st.v{nv} needs a vector source {{...}}")
      srcs = [self._src(ins, p, dt, tname=t) for p in _split_operands(s[1:-1])]
      if len(srcs) != nv:
        raise self._err(ins, f"st.v{nv} needs {nv} source operands")
    else:
      srcs = [self._src(ins, s, dt, tname=t)]
    store = self._mem_access(ins, space, dt, nv, "store")

    def fn(c, m):
      a = addr(c)
      if np.ndim(a) == 0:
        a = np.full(c.n, a, np.uint64)
      vals = []
      for f in srcs:
        v = f(c)
        if np.ndim(v) == 0:
          v = np.full(c.n, v, dt)
        vals.append(v)
      try:
        store(c, a, m, vals)
      except GPUFault as e:
        raise _fault_thread(c, e, a, m, nv * dt.itemsize)
    ins.fn = fn

  def _mem_access(self, ins: _Ins, space: str, dt: np.dtype, nv, kind: str):
    """fn(c, addrs, mask[, vals]) for a state space; loads return a list of nv arrays."""
    w = dt.itemsize
    what = f"{space} {kind}"

    def route(c, a, lanes):
      """Split generic addresses into (global, shared, local) selections."""
      if space == "generic":
        sh, lo = c.win.route(a)
        if not sh.any() and not lo.any():
          return [("global", None, a, lanes)]
        out = []
        g = ~(sh | lo)
        if g.any():
          out.append(("global", g, a[g], lanes[g]))
        if sh.any():
          out.append(("shared", sh, a[sh] - np.uint64(c.win.shared), lanes[sh]))
        if lo.any():
          out.append(("local", lo, a[lo] - np.uint64(c.win.local), lanes[lo]))
        return out
      sp = "global" if space in ("global", "const") else space
      return [(sp, None, a, lanes)]

    def backend(c, sp):
      return {"global": c.mem, "shared": c.shared, "local": c.local}[sp]

    if kind == "load":
      def load(c, a, m):
        if space == "param":
          return self._param_load(c, a, dt, nv, m)
        lanes = c.lanes
        if m is not None:
          a, lanes = a[m], lanes[m]
        outs = [np.zeros(a.shape, dt) for _ in range(nv)]
        for sp, sel, aa, ll in route(c, a, lanes):
          for k in range(nv):
            ak = aa + np.uint64(k * w) if k else aa
            if sp == "global":
              v = c.mem.load(ak, dt, what)
            else:
              v = backend(c, sp).load(ak, ll, dt, what)
            if sel is None:
              outs[k] = v
            else:
              outs[k][sel] = v
        if m is not None:
          full = []
          for o in outs:
            f = np.zeros(c.n, dt)
            f[m] = o
            full.append(f)
          outs = full
        return outs
      return load

    def store(c, a, m, vals):
      if space == "param":
        raise self._err(ins, "st.param (call arguments) is not supported")
      if space == "const":
        raise self._err(ins, "st.const: the constant space is read-only")
      lanes = c.lanes
      if m is not None:
        a, lanes, vals = a[m], lanes[m], [v[m] for v in vals]
      for sp, sel, aa, ll in route(c, a, lanes):
        for k in range(nv):
          ak = aa + np.uint64(k * w) if k else aa
          v = vals[k] if sel is None else vals[k][sel]
          if sp == "global":
            c.mem.store(ak, v, dt, what)
          else:
            backend(c, sp).store(ak, ll, v, dt, what)
    return store

  def _param_load(self, c: _Ctx, a, dt: np.dtype, nv, m: np.ndarray | None):
    outs = []
    w = dt.itemsize
    for k in range(nv):
      offs = (a + np.uint64(k * w)).astype(np.int64)
      o0 = int(offs[0])
      if (offs == o0).all():
        if o0 < 0 or o0 + w > len(c.params):
          raise GPUFault(f"ld.param of {w} bytes at param offset {o0} is outside the "
                         f"{len(c.params)}-byte parameter buffer", o0)
        v = np.frombuffer(c.params, dt, count=1, offset=o0)[0]
        outs.append(np.full(c.n, v, dt))
      else:
        raise GPUFault("ld.param with a per-thread address is not supported", o0)
    return outs

  # atomics
  def _c_atom(self, ins: _Ins, red: bool = False) -> None:
    ts = self._types(ins)
    if len(ts) != 1:
      raise self._err(ins, "atom needs exactly one type")
    t = ts[0]
    dt = _DT[t]
    ops = ("add", "min", "max", "inc", "dec", "and", "or", "xor", "exch", "cas")
    aop = next((m for m in ins.mods if m in ops), None)
    if aop is None:
      raise self._err(ins, f"{ins.op} needs an operation ({', '.join(ops)})")
    if any(m in ("v2", "v4", "v8") for m in ins.mods):
      raise self._err(ins, f"vector {ins.op} is not supported")
    space = self._space(ins)
    if space not in ("global", "shared", "generic"):
      raise self._err(ins, f"{ins.op} on the .{space} space is not supported")
    nsrc = 2 if aop == "cas" else 1
    need = (1 if red else 2) + nsrc
    self._need(ins, need)
    base = 0 if red else 1
    wd = None if red else self._dst(ins, ins.ops[0])
    addr = self._addr(ins, ins.ops[base], space)
    srcs = [self._src(ins, o, dt) for o in ins.ops[base + 1:]]
    if t == "f16x2" or t == "bf16x2" or t == "bf16":
      raise self._err(ins, f"{ins.op}.{t} is not supported")
    if aop in ("and", "or", "xor") and _is_float(dt):
      raise self._err(ins, f"{ins.op}.{aop} needs a bit type")
    what = f"{space} {ins.op}"
    sg = dt.kind == "i"

    def run(c, a, m):
      vals = [np.broadcast_to(np.asarray(f(c)), (c.n,)) for f in srcs]
      lanes = c.lanes
      if m is not None:
        a, lanes, vals = a[m], lanes[m], [v[m] for v in vals]
      if a.size == 0:
        return None
      # resolve the memory each address lives in, as (load, store) on that backend
      if space == "shared" or (space == "generic" and c.win.route(a)[0].all()):
        off = a - np.uint64(c.win.shared) if space == "generic" else a
        off = c.shared._flat(off, lanes, dt.itemsize, what)
        ld = lambda x: _gather(c.shared.data, x, dt)
        st = lambda x, v: _scatter(c.shared.data, x, np.asarray(v).astype(dt), dt)
      else:
        off = a
        ld = lambda x: c.mem.load(x, dt, what)
        st = lambda x, v: c.mem.store(x, v, dt, what)
      return _atomic(aop, off, vals, dt, ld, st)

    def fn(c, m):
      a = addr(c)
      if np.ndim(a) == 0:
        a = np.full(c.n, a, np.uint64)
      try:
        old = run(c, a, m)
      except GPUFault as e:
        raise _fault_thread(c, e, a, m, dt.itemsize)
      if old is None:
        return
      if wd is not None:
        if m is not None:
          full = np.zeros(c.n, dt)
          full[m] = old
          old = full
        wd(c, old, sg, m)
    ins.fn = fn

  def _c_red(self, ins: _Ins) -> None:
    self._c_atom(ins, red=True)
