"""Rewrite rules as data: UPat patterns, a PatternMatcher, and graph_rewrite to a fixed point."""
from __future__ import annotations
from itertools import permutations
from typing import Any, Callable, Iterable
from baregrad.ir.dtype import DType
from baregrad.ir.ops import UOp, Ops, GroupOp

class UPat:
  """Matches a UOp. op/dtype may be sets; src a tuple (in order), a list (any order) or a single UPat (every src);
  name binds the matched node; arg must be equal if given."""
  __slots__ = ("ops", "dtypes", "src", "arg", "name", "any_len", "pred")
  def __init__(self, op: Ops | Iterable[Ops] | None = None, dtype: DType | Iterable[DType] | None = None,
               src: tuple[UPat, ...] | list[UPat] | UPat | None = None, arg: Any = None, name: str | None = None,
               allow_any_len: bool = False, pred: Callable[[UOp], bool] | None = None):
    self.ops = None if op is None else (frozenset((op,)) if isinstance(op, Ops) else frozenset(op))
    self.dtypes = None if dtype is None else (frozenset((dtype,)) if isinstance(dtype, DType) else frozenset(dtype))
    self.src, self.arg, self.name, self.any_len, self.pred = src, arg, name, allow_any_len, pred

  @staticmethod
  def var(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat: return UPat(dtype=dtype, name=name)
  @staticmethod
  def cvar(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
    return UPat(Ops.CONST, dtype=dtype, name=name)
  @staticmethod
  def const(dtype: DType | Iterable[DType] | None, b: Any) -> UPat: return UPat(Ops.CONST, dtype=dtype, arg=b)
  @staticmethod
  def any(*pats: UPat) -> UPatAny: return UPatAny(pats)

  def _alu(self, op: Ops, *srcs: UPat | int | float) -> UPat:
    ss = [self] + [s if isinstance(s, UPat) else UPat.const(None, s) for s in srcs]
    return UPat(op, src=ss if op in GroupOp.Commutative else tuple(ss))
  def __add__(self, x: UPat | int | float) -> UPat: return self._alu(Ops.ADD, x)
  def __mul__(self, x: UPat | int | float) -> UPat: return self._alu(Ops.MUL, x)
  def __sub__(self, x: UPat | int | float) -> UPat: return self._alu(Ops.SUB, x)
  def __floordiv__(self, x: UPat | int | float) -> UPat: return self._alu(Ops.IDIV, x)
  def __mod__(self, x: UPat | int | float) -> UPat: return self._alu(Ops.MOD, x)
  def __lt__(self, x: UPat | int | float) -> UPat: return self._alu(Ops.CMPLT, x)
  def ne(self, x: UPat | int | float) -> UPat: return self._alu(Ops.CMPNE, x)
  def maximum(self, x: UPat | int | float) -> UPat: return self._alu(Ops.MAX, x)
  def where(self, a: UPat, b: UPat) -> UPat: return UPat(Ops.WHERE, src=(self, a, b))
  def cast(self, dtype: DType | None = None) -> UPat: return UPat(Ops.CAST, dtype=dtype, src=(self,))

  def match(self, u: UOp, store: dict[str, UOp]) -> list[dict[str, UOp]]:
    """All ways u matches, each a dict of bindings (extending store)."""
    if self.ops is not None and u.op not in self.ops: return []
    if self.dtypes is not None and u.dtype not in self.dtypes and u.dtype.scalar not in self.dtypes: return []
    if self.arg is not None and not _arg_eq(self.arg, u.arg): return []
    if self.pred is not None and not self.pred(u): return []
    if self.name is not None:
      if self.name in store and store[self.name] is not u: return []
      store = {**store, self.name: u}
    if self.src is None: return [store]
    if isinstance(self.src, UPat):
      outs = [store]
      for s in u.src: outs = [o2 for o in outs for o2 in self.src.match(s, o)]
      return outs
    pats = self.src
    if len(pats) != len(u.src) and not (self.any_len and len(u.src) >= len(pats)): return []
    orders = permutations(pats) if isinstance(pats, list) else (pats,)
    res: list[dict[str, UOp]] = []
    for order in orders:
      outs = [store]
      for p, s in zip(order, u.src):
        outs = [o2 for o in outs for o2 in p.match(s, o)]
        if not outs: break
      res.extend(outs)
      if res: break  # first order that matches is enough
    return res

  def __repr__(self) -> str:
    return f"UPat({None if self.ops is None else sorted(o.name for o in self.ops)}, name={self.name!r})"

class UPatAny(UPat):
  def __init__(self, pats: tuple[UPat, ...]):
    super().__init__()
    self.alts = pats
  def match(self, u: UOp, store: dict[str, UOp]) -> list[dict[str, UOp]]:
    for p in self.alts:
      if r := p.match(u, store): return r
    return []

def _arg_eq(want: Any, got: Any) -> bool:
  if isinstance(want, float) and isinstance(got, float) and want != want: return got != got
  return type(want) is type(got) and want == got or (isinstance(want, (int, float)) and not isinstance(want, bool) and
                                                     isinstance(got, (int, float)) and not isinstance(got, bool) and want == got)

Rule = tuple[UPat, Callable[..., UOp | None]]

class PatternMatcher:
  """An ordered list of (pattern, function) rules. The function gets the bindings as keyword arguments (and
  `ctx` if it asks for it) and returns a replacement UOp, or None to decline."""
  def __init__(self, rules: list[Rule]):
    self.rules = list(rules)
    self.by_op: dict[Ops, list[tuple[UPat, Callable, bool]]] = {}
    self.anyop: list[tuple[UPat, Callable, bool]] = []
    for pat, fn in self.rules:
      wants_ctx = "ctx" in fn.__code__.co_varnames[:fn.__code__.co_argcount]
      entry = (pat, fn, wants_ctx)
      ops = pat.ops if not isinstance(pat, UPatAny) else _alt_ops(pat)
      if ops is None: self.anyop.append(entry)
      else:
        for op in ops: self.by_op.setdefault(op, []).append(entry)
    for op in self.by_op: self.by_op[op] += self.anyop  # keep rule order simple: specific first, then wildcards
  def __add__(self, other: PatternMatcher) -> PatternMatcher: return PatternMatcher(self.rules + other.rules)

  def rewrite(self, u: UOp, ctx: Any = None) -> UOp | None:
    for pat, fn, wants_ctx in self.by_op.get(u.op, self.anyop):
      for store in pat.match(u, {}):
        ret = fn(ctx=ctx, **store) if wants_ctx else fn(**store)
        if ret is not None and ret is not u: return ret
    return None

def _alt_ops(p: UPatAny) -> frozenset | None:
  out: set = set()
  for a in p.alts:
    if a.ops is None: return None
    out |= a.ops
  return frozenset(out)

class RewriteError(RuntimeError): pass

def graph_rewrite(sink: UOp, pm: PatternMatcher, ctx: Any = None, max_steps: int = 1_000_000) -> UOp:
  """Rewrite every node bottom-up (sources first); each replacement is itself rewritten, to a fixed point."""
  done: dict[UOp, UOp] = {}
  steps = 0
  def rw(root: UOp) -> UOp:
    nonlocal steps
    stack: list[tuple[UOp, UOp | None, int]] = [(root, None, 0)]
    # entries: (node, the node whose replacement this is, stage); stage 0 visits sources, stage 1 applies rules
    while stack:
      u, owner, stage = stack.pop()
      if stage == 0:
        if u in done:
          if owner is not None: done[owner] = done[u]
          continue
        stack.append((u, owner, 1))
        for s in reversed(u.src):
          if s not in done: stack.append((s, None, 0))
        continue
      # stage 1: sources are done
      nsrc = tuple(done[s] for s in u.src)
      cur = u if nsrc == u.src else u.replace(src=nsrc)
      new = pm.rewrite(cur, ctx)
      steps += 1
      if steps > max_steps: raise RewriteError(f"graph_rewrite did not reach a fixed point in {max_steps} steps at {cur.op}")
      if new is None:
        done[u] = cur
        if cur is not u and cur not in done: done[cur] = cur
        if owner is not None: done[owner] = cur
        continue
      # rewrite the replacement; whatever it becomes is what u (and owner) become
      stack.append((new, u if owner is None else owner, 0))
      if owner is not None: stack.append((new, u, 0))
    return done[root]
  return rw(sink)

