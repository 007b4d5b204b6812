"""The UOp: one immutable, hash-consed IR node for the tensor graph, the kernel AST and the linear program."""
from __future__ import annotations
import itertools
from typing import TYPE_CHECKING, Any, Iterator
import functools, math, struct, threading, weakref
from baregrad.ir.dtype import DType, dtypes, truncate

_next_op = itertools.count(1)
def auto() -> Ops:
  # an int in Ops' body, replaced by its Op below: typed as the member it becomes (an Op counts as an Ops, see _OpsType)
  return next(_next_op)  # type: ignore[return-value]

class Op:
  """One kind of operation (Ops.ADD): a singleton, equal only to itself and hashed by identity in C, with a name and a
  number as an Enum member has."""
  __slots__ = ("name", "value")
  def __init__(self, name: str, value: int) -> None: self.name, self.value = name, value
  def __repr__(self) -> str: return f"Ops.{self.name}"
  def __reduce__(self) -> tuple: return (getattr, (Ops, self.name))   # (unpickled as the same singleton)

class _OpsType(type):
  """The enumeration's class protocol (iteration, lookup by name, isinstance) without Enum's metaclass: EnumType
  defines __getattr__, which makes every class attribute read (`Ops.BUFFER`) a Python-level hook, ~4x a plain one, on
  the path of every node built and matched."""
  _members: list[Ops]
  def __iter__(cls) -> Iterator[Ops]: return iter(cls._members)
  def __len__(cls) -> int: return len(cls._members)
  def __getitem__(cls, name: str) -> Ops:
    op = cls.__dict__.get(name)
    if not isinstance(op, Op): raise KeyError(name)
    return op  # type: ignore[return-value]  # (an Op is an Ops: __instancecheck__)
  def __instancecheck__(cls, x: Any) -> bool: return isinstance(x, Op)

class Ops(metaclass=_OpsType):
  # each member is an Op (set below), which isinstance counts as an Ops: annotations say `op: Ops` as for an Enum
  if TYPE_CHECKING:
    name: str; value: int
  # kernel structure
  SINK = auto(); STORE = auto(); LOAD = auto(); INDEX = auto(); VIEW = auto()
  DEFINE_GLOBAL = auto(); DEFINE_VAR = auto(); DEFINE_ACC = auto(); DEFINE_LOCAL = auto()
  # BIND(DEFINE_VAR, CONST value): a symbolic size with the value it has in this call (tensor graph only: the
  # scheduler replaces it by its variable in the kernel and passes the value as a kernel argument, ir/sint.py)
  BIND = auto()
  CONST = auto(); VCONST = auto()
  REDUCE_AXIS = auto(); REDUCE = auto(); RANGE = auto(); ENDRANGE = auto(); ASSIGN = auto()
  IF = auto(); ENDIF = auto(); BARRIER = auto(); SPECIAL = auto(); NOOP = auto()
  # tensor graph
  BUFFER = auto(); COPY = auto(); CONTIGUOUS = auto(); DETACH = auto()
  # 0, 1, ..., n-1 (arange): in the tensor graph a leaf, arg n; in a kernel AST IOTA(VIEW), the view's index into those n
  IOTA = auto()
  # GATHER(src, index), arg (dim,): out[..., j, ...] = src[..., index[..., j, ...], ...] along dim (torch.gather; src
  # has index's shape on every other axis). In a kernel AST it becomes a LOAD(DEFINE_GLOBAL, VIEW, index value) with
  # arg (dim, src's extent along dim): the view's index along dim is that value, clamped into [0, extent)
  GATHER = auto()
  RESHAPE = auto(); PERMUTE = auto(); EXPAND = auto(); PAD = auto(); SHRINK = auto(); FLIP = auto()
  # vectors
  VECTORIZE = auto(); GEP = auto()
  # type changes
  CAST = auto(); BITCAST = auto()
  # unary ALU
  NEG = auto(); EXP2 = auto(); LOG2 = auto(); SIN = auto(); SQRT = auto(); RECIP = auto(); TRUNC = auto()
  # binary ALU
  ADD = auto(); SUB = auto(); MUL = auto(); FDIV = auto(); IDIV = auto(); MOD = auto(); MAX = auto()
  CMPLT = auto(); CMPNE = auto(); CMPEQ = auto(); AND = auto(); OR = auto(); XOR = auto(); SHL = auto(); SHR = auto()
  # ternary ALU
  WHERE = auto(); MULACC = auto()
  # Threefry-2x32-20 (counter x0, x1; key k0, k1) -> the first output word: random bits as one node of the tensor graph
  # (ir/alu.py threefry2x32); the scheduler expands it into its rounds where it builds a kernel
  THREEFRY = auto()
  # a warp-wide matrix multiply-accumulate (tensor cores): WMMA(a, b, c), arg = (TensorCore, lanes of a, b, c fragments)
  WMMA = auto()

Ops._members = []
for _name, _v in list(vars(Ops).items()):
  if isinstance(_v, int) and _name.isupper():
    setattr(Ops, _name, _m := Op(_name, _v))
    Ops._members.append(_m)  # type: ignore[arg-type]  # (an Op is an Ops: __instancecheck__)
del _name, _v, _m

class GroupOp:
  Unary = {Ops.NEG, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.TRUNC}
  Binary = {Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ,
            Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR}
  Ternary = {Ops.WHERE, Ops.MULACC}
  Quaternary = {Ops.THREEFRY}
  ALU = Unary | Binary | Ternary | Quaternary
  Comparison = {Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ}
  Commutative = {Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR}
  Associative = {Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.XOR, Ops.MAX}
  Transcendental = {Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT}
  Reduce = {Ops.ADD, Ops.MUL, Ops.MAX}
  Movement = {Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP}

# key -> weak reference to the live node: a plain dict of weak references read inline (a WeakValueDictionary's get and set are
# Python calls of their own, on the path of every node built). Only a BUFFER's entry leaves with its node (its key holds
# the BufRef, and so device memory); the others carry no callback (a Python call per node freed, 4 of an eager op's) and
# are swept when the table has doubled since the last sweep: a dead entry is small, and a node built again replaces it
_ucache: dict = {}
_UCACHE_MIN = 4096
_swept = [_UCACHE_MIN]   # entries left by the last sweep

# Threads: a lookup is one dict.get and an insertion one dict.setdefault, each atomic under the GIL, so two threads
# building the same node at once get one object (the second finds the first's entry) without a lock on the eager path.
# Replacing a dead entry and sweeping hold _ulock (reentrant: the collector may run a Buffer's __del__, which builds
# nothing but may free, on a thread that holds it). A BUFFER's callback takes no lock (it may run on any thread, in the
# middle of anything) and only ever removes its own dead reference.
_ulock = threading.RLock()

def _uop_gone(key: tuple, wr: weakref.ref, _cache: dict = _ucache) -> None:
  if _cache.get(key) is wr: _cache.pop(key, None)   # (a newer node under the same key stays; pop: a sweep may be first)

def _sweep_ucache() -> None:
  """Drop the entries of nodes that are gone (called with _ulock held)."""
  # over a copy (dict.copy is one C call: no callback or other thread changes the table while it is walked)
  for k, r in _ucache.copy().items():
    if r() is None and _ucache.get(k) is r and (v := _ucache.pop(k, None)) is not None and v is not r:
      _ucache.setdefault(k, v)   # (a thread's setdefault came between the get and the pop: its live entry goes back)
  _swept[0] = max(_UCACHE_MIN, len(_ucache))

class UOpMeta(type):
  """Hash-consing: constructing a node equal to a live one returns that very object."""
  def __call__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None) -> UOp:
    # sources by id: a live node holds its sources, so the ids in a live entry's key name live nodes (no Python
    # __hash__ call per source)
    key = (op, dtype, tuple(map(id, src)), _argkey(arg) if isinstance(arg, _KEYED) else arg)
    try: r = _ucache.get(key)
    except TypeError as e: raise TypeError(f"UOp arg must be hashable, got {type(arg).__name__} for {op}") from e
    if r is not None and (hit := r()) is not None: return hit
    return _create(key, op, dtype, _srcs_ok(tuple(src)), arg)

def make_keyed(op: Ops, dtype: DType, src: tuple, arg: Any, argkey: Any) -> UOp:
  """UOp(op, dtype, src, arg) for a builder that kept the node's `_argkey(arg)` (or arg itself) and knows src is a
  tuple of UOps (tensor/recipe.py replays recorded nodes): the hash-consed node, without recomputing either."""
  key = (op, dtype, tuple(map(id, src)), argkey)
  if (r := _ucache.get(key)) is not None and (hit := r()) is not None: return hit
  return _create(key, op, dtype, src, arg)

def fresh_node(op: Ops, dtype: DType, src: tuple, arg: Any) -> UOp:
  """UOp(op, dtype, src, arg) where no node can equal it yet (its arg is an object just made, e.g. the BufRef of a
  result): hash-consed without the lookup that cannot hit. arg must be its own key (not a float or tuple)."""
  return _create((op, dtype, tuple(map(id, src)), arg), op, dtype, src, arg)

def _create(key: tuple, op: Ops, dtype: DType, src: tuple, arg: Any) -> UOp:
  # built in the mutable layout, then made a UOp (same slots): plain slot stores instead of six object.__setattr__
  # calls past UOp's immutability guard (a third of the cost of a new node)
  ret = _new(_UOpSlots)
  ret.op, ret.dtype, ret.src, ret.arg, ret._bounds, ret._shape, ret.argkey, ret._realized = op, dtype, src, arg, None, None, key[3], None
  ret.__class__ = UOp
  wr = weakref.ref(ret, functools.partial(_uop_gone, key)) if op is Ops.BUFFER else weakref.ref(ret)   # (partial and ref are C)
  if (r := _ucache.setdefault(key, wr)) is not wr:
    # an entry is there: another thread's node built since this one looked (that one is the node), or a dead one
    if (hit := r()) is not None: return hit
    with _ulock:
      if (r := _ucache.setdefault(key, wr)) is not wr:
        if (hit := r()) is not None: return hit
        _ucache[key] = wr
  if len(_ucache) > 2 * _swept[0]:
    with _ulock:
      if len(_ucache) > 2 * _swept[0]: _sweep_ucache()
  return ret  # type: ignore[return-value]  # (its class is UOp now)

_KEYED = (float, tuple)   # the args _argkey may change; any other arg is its own key

def _argkey(arg: Any) -> Any:
  # 0.0 == -0.0 and nan != nan: key those floats by their bits so equal nodes really are equal (any other float equals
  # only itself: tagged, so it never equals an int)
  if isinstance(arg, float): return ("f", arg) if arg == arg and arg != 0.0 else ("f", struct.pack("<d", arg))
  if isinstance(arg, tuple):
    # (loops, not any(...): no generator made for every shape-tuple arg; two levels cover pads, shrinks and a
    # reduction's (op, axes) without a recursive call)
    for a in arg:
      if isinstance(a, float): return tuple(_argkey(x) for x in arg)
      if isinstance(a, tuple):
        for b in a:
          if isinstance(b, _KEYED): return tuple(_argkey(x) for x in arg)
  return arg

def _srcs_ok(src: tuple) -> tuple:
  for s in src:
    if not isinstance(s, UOp): raise TypeError(f"UOp src must be UOps, got {type(s).__name__}: {s!r}")
  return src

class _UOpSlots:
  """UOp's storage, without its immutability guard: what UOpMeta fills in before the object becomes a UOp."""
  # _shape: engine.graph.shape_of's cache; argkey: the arg as the hash-consing key holds it (_argkey), for keys built
  # from nodes (the schedule cache's, recipes') without recomputing it; _realized: the buffer view holding the node's
  # computed value (engine/lazy.py: kept as long as the node lives, as a weak dictionary keyed by nodes would, without
  # its Python-level get, set and removal callback on the path of every eager op)
  __slots__ = ("op", "dtype", "src", "arg", "__weakref__", "_bounds", "_shape", "argkey", "_realized")
  op: Ops; dtype: DType; src: tuple[UOp, ...]; arg: Any
  _bounds: tuple | None; _shape: tuple | None; argkey: Any; _realized: Any
_new = object.__new__

class UOp(_UOpSlots, metaclass=UOpMeta):
  __slots__ = ()
  op: Ops; dtype: DType; src: tuple[UOp, ...]; arg: Any

  # (built by UOpMeta.__call__(op, dtype, src, arg): no __init__; this one declares that signature to type checkers)
  if TYPE_CHECKING:
    def __init__(self, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None) -> None: ...
  def __setattr__(self, *a: object) -> None: raise AttributeError("UOp is immutable")
  # identity is equality, and the hash is the identity's (object's, computed in C): hash-consing makes structurally
  # equal nodes the same object, so nothing structural is left to compare
  def __reduce__(self) -> tuple: return (UOp, (self.op, self.dtype, self.src, self.arg))
  def replace(self, **kw: Any) -> UOp:
    return UOp(kw.get("op", self.op), kw.get("dtype", self.dtype), kw.get("src", self.src), kw.get("arg", self.arg))

  # ---- graph walking
  def toposort(self) -> dict[UOp, None]:
    """Every node reachable from self, children before parents (iterative: graphs can be deep)."""
    out: dict[UOp, None] = {}
    stack: list[tuple[UOp, bool]] = [(self, False)]
    while stack:
      u, done = stack.pop()
      if u in out: continue
      if done: out[u] = None; continue
      stack.append((u, True))
      for s in reversed(u.src):
        if s not in out: stack.append((s, False))
    return out
  def substitute(self, mapping: dict[UOp, UOp], memo: dict[UOp, UOp] | None = None, same_shapes: bool = False) -> UOp:
    """self with the nodes of `mapping` replaced. `memo` (node -> its substitution, mapping's entries included) may be
    kept by a caller substituting several roots: each walk stops at the nodes an earlier one did. `same_shapes`: each
    replacement has the tensor shape of what it replaces (a buffer read for the expression it computed), so a rebuilt
    node keeps its old node's shape (engine.graph.shape_of's slot) instead of having it inferred again."""
    if not mapping: return self
    if memo is None: memo = dict(mapping)
    stack: list[UOp] = [self]
    while stack:   # post-order: a node stays on the stack until its sources are done
      u = stack[-1]
      if u in memo: stack.pop(); continue
      if (pending := [x for x in u.src if x not in memo]): stack += pending; continue
      stack.pop()
      nsrc = tuple([memo[x] for x in u.src])
      if nsrc == u.src: memo[u] = u
      else:
        memo[u] = n = make_keyed(u.op, u.dtype, nsrc, u.arg, u.argkey)   # (sources are nodes; the arg's key is kept)
        if same_shapes and n._shape is None and u._shape is not None: object.__setattr__(n, "_shape", u._shape)
    return memo[self]
  def sparents(self) -> set[UOp]: return set(self.toposort())

  def __repr__(self) -> str:
    # a symbolic size (an expression of bound variables, ir/sint.py) reads as the expression: shapes print as (2, sp=3+1)
    if self.op is Ops.BIND or (self.dtype.count == 1 and self.op in _INFIX and any(u.op is Ops.BIND for u in self.toposort())): return render_expr(self)
    return pretty(self)

  # ---- constructors
  @staticmethod
  def const(dtype: DType, b: Any) -> UOp:
    if isinstance(b, UOp): return b
    if dtype.count > 1: return UOp(Ops.VECTORIZE, dtype, (UOp.const(dtype.scalar, b),) * dtype.count)
    return UOp(Ops.CONST, dtype, (), _const_arg(dtype, b))
  def const_like(self, b: Any) -> UOp: return UOp.const(self.dtype, b)
  @staticmethod
  def variable(name: str, vmin: int, vmax: int, dtype: DType = dtypes.int32) -> UOp:
    return UOp(Ops.DEFINE_VAR, dtype, (), (name, vmin, vmax))
  def bind(self, val: int) -> UOp:
    """This variable (a DEFINE_VAR) with its value for one call: BIND(var, val), val inside the variable's range."""
    if self.op is not Ops.DEFINE_VAR: raise TypeError(f"bind: only a variable (DEFINE_VAR) takes a value, this is {self.op.name}")
    if not isinstance(val, int) or isinstance(val, bool): raise TypeError(f"bind: variable {self.arg[0]} takes an int, got {type(val).__name__}")
    if not self.arg[1] <= val <= self.arg[2]:
      raise ValueError(f"bind: {self.arg[0]}={val} is outside its range [{self.arg[1]}, {self.arg[2]}]")
    return UOp(Ops.BIND, self.dtype, (self, UOp.const(self.dtype, val)))
  def unbind(self) -> tuple[UOp, int]:
    """(variable, value) of a BIND."""
    if self.op is not Ops.BIND: raise TypeError(f"unbind: {self.op.name} is not a bound variable")
    return self.src[0], self.src[1].arg
  @staticmethod
  def range(end: int | UOp, axis: int, kind: str = "loop", dtype: DType = dtypes.int32) -> UOp:
    """A loop index in [0, end). kind: 'global' (parallel), 'loop', 'reduce', 'upcast', 'unroll', 'local'."""
    e = end if isinstance(end, UOp) else UOp.const(dtype, end)
    return UOp(Ops.RANGE, dtype, (e,), (axis, kind))
  def alu(self, op: Ops, *src: UOp | int | float | bool) -> UOp:
    srcs = (self,) + tuple(s if isinstance(s, UOp) else self._cl(s, op) for s in src)
    out_dtype = srcs[-1].dtype if op is Ops.WHERE else self.dtype
    if op in GroupOp.Comparison: out_dtype = dtypes.bool.vec(self.dtype.count)
    return UOp(op, out_dtype, srcs)
  def _cl(self, x: Any, op: Ops) -> UOp:
    return UOp.const(self.dtype, x)
  def cast(self, dtype: DType) -> UOp: return self if self.dtype == dtype else UOp(Ops.CAST, dtype, (self,))
  def bitcast(self, dtype: DType) -> UOp: return UOp(Ops.BITCAST, dtype, (self,))
  def where(self, a: UOp | int | float, b: UOp | int | float) -> UOp:
    x = a if isinstance(a, UOp) else (b.const_like(a) if isinstance(b, UOp) else None)
    if x is None: raise TypeError("where needs at least one UOp branch to know the dtype")
    y = b if isinstance(b, UOp) else x.const_like(b)
    return UOp(Ops.WHERE, x.dtype, (self, x, y))
  # (type: ignore: self is a pointer: its dtype is a PtrDType)
  def load(self, *src: UOp, dtype: DType | None = None) -> UOp: return UOp(Ops.LOAD, dtype or self.dtype.base, (self,) + src)  # type: ignore[attr-defined]
  def store(self, *src: UOp) -> UOp: return UOp(Ops.STORE, dtypes.void, (self,) + src)
  def index(self, idx: UOp, valid: UOp | None = None) -> UOp:
    return UOp(Ops.INDEX, self.dtype, (self, idx) + ((valid,) if valid is not None else ()))
  def sink(self, *srcs: UOp) -> UOp: return UOp(Ops.SINK, dtypes.void, (self,) + srcs)
  def gep(self, i: int | tuple[int, ...]) -> UOp:
    idx = (i,) if isinstance(i, int) else tuple(i)
    if self.dtype.count == 1 and all(j == 0 for j in idx): return self if len(idx) == 1 else UOp(Ops.VECTORIZE, self.dtype.vec(len(idx)), (self,) * len(idx))
    return UOp(Ops.GEP, self.dtype.scalar.vec(len(idx)), (self,), idx)
  def broadcast(self, n: int) -> UOp:
    if n == 1 or self.dtype.count == n: return self
    return UOp(Ops.VECTORIZE, self.dtype.vec(n), (self,) * n)

  # ---- operators build ALU nodes (Python semantics are NOT implied: // and % are C's truncating ones)
  def __add__(self, x: Any) -> UOp: return self.alu(Ops.ADD, x)
  def __radd__(self, x: Any) -> UOp: return self._cl(x, Ops.ADD).alu(Ops.ADD, self)
  def __sub__(self, x: Any) -> UOp: return self.alu(Ops.SUB, x)
  def __rsub__(self, x: Any) -> UOp: return self._cl(x, Ops.SUB).alu(Ops.SUB, self)
  def __mul__(self, x: Any) -> UOp: return self.alu(Ops.MUL, x)
  def __rmul__(self, x: Any) -> UOp: return self._cl(x, Ops.MUL).alu(Ops.MUL, self)
  def __floordiv__(self, x: Any) -> UOp: return self.alu(Ops.IDIV, x)
  def __mod__(self, x: Any) -> UOp: return self.alu(Ops.MOD, x)
  def __truediv__(self, x: Any) -> UOp: return self.alu(Ops.FDIV, x)
  def __neg__(self) -> UOp: return self.alu(Ops.NEG)
  def __lt__(self, x: Any) -> UOp: return self.alu(Ops.CMPLT, x)
  def __gt__(self, x: Any) -> UOp: return (x if isinstance(x, UOp) else self._cl(x, Ops.CMPLT)).alu(Ops.CMPLT, self)
  def __ge__(self, x: Any) -> UOp: return (self < x).logical_not()
  def __le__(self, x: Any) -> UOp: return (self > x).logical_not()
  def __and__(self, x: Any) -> UOp: return self.alu(Ops.AND, x)
  def __or__(self, x: Any) -> UOp: return self.alu(Ops.OR, x)
  def __xor__(self, x: Any) -> UOp: return self.alu(Ops.XOR, x)
  def __lshift__(self, x: Any) -> UOp: return self.alu(Ops.SHL, x)
  def __rshift__(self, x: Any) -> UOp: return self.alu(Ops.SHR, x)
  def ne(self, x: Any) -> UOp: return self.alu(Ops.CMPNE, x)
  def eq(self, x: Any) -> UOp: return self.alu(Ops.CMPEQ, x)
  def maximum(self, x: Any) -> UOp: return self.alu(Ops.MAX, x)
  def minimum(self, x: Any) -> UOp: return -((-self).maximum(-x if isinstance(x, UOp) else -x))
  def logical_not(self) -> UOp: return self.ne(True)

  # ---- values
  @property
  def vmin(self) -> int | float: return self._bounds_get()[0]
  @property
  def vmax(self) -> int | float: return self._bounds_get()[1]
  def _bounds_get(self) -> tuple:
    if (b := self._bounds) is not None: return b
    if not _reads_src_bounds(self) or all(s._bounds is not None for s in self.src): b = _bounds(self)
    else:
      # sources first, by an explicit stack: _bounds asks for its sources' bounds, which would recurse once per level
      # of a deep expression (a fused chain of integer ops)
      stack = [self]
      while stack:
        n = stack[-1]
        if n._bounds is not None: stack.pop(); continue
        if _reads_src_bounds(n) and (pending := [x for x in n.src if x._bounds is None]): stack += pending; continue
        stack.pop()
        object.__setattr__(n, "_bounds", _bounds(n))
      b = self._bounds
      assert b is not None   # (the stack ends with self's bounds set)
      return b
    object.__setattr__(self, "_bounds", b)
    return b
  def const_factor(self) -> int:
    """The largest integer known to divide this expression (for div/mod folding)."""
    if self.op is Ops.CONST and isinstance(self.arg, int): return abs(self.arg) or 1
    if self.op is Ops.ADD: return math.gcd(self.src[0].const_factor(), self.src[1].const_factor())
    if self.op is Ops.MUL:
      a, b = self.src
      return a.const_factor() * b.const_factor() if (a.op is Ops.CONST or b.op is Ops.CONST) else max(a.const_factor(), b.const_factor())
    return 1
  def divides(self, v: int) -> UOp | None:
    """self // v exactly, if every term is divisible by v."""
    if v == 1: return self
    if self.op is Ops.CONST and isinstance(self.arg, int): return self.const_like(self.arg // v) if self.arg % v == 0 else None
    if self.op is Ops.ADD:
      a, b = self.src[0].divides(v), self.src[1].divides(v)
      return a + b if a is not None and b is not None else None
    if self.op is Ops.MUL:
      if (a := self.src[0].divides(v)) is not None: return a * self.src[1]
      if (b := self.src[1].divides(v)) is not None: return self.src[0] * b
    return None
  def simplify(self) -> UOp:
    from baregrad.ir.symbolic import simplify
    return simplify(self)
  def ssimplify(self) -> UOp | int:
    s = self.simplify()
    return s.arg if s.op is Ops.CONST else s
  def render(self) -> str:
    """A compact infix string for an integer expression (for debugging and names)."""
    return render_expr(self)

def _const_arg(dtype: DType, b: Any) -> Any:
  if isinstance(b, tuple): return tuple(_const_arg(dtype, x) for x in b)
  if dtype == dtypes.void: return None
  return truncate(dtype, b)

def _reads_src_bounds(u: UOp) -> bool:
  """_bounds(u) asks for its sources' bounds (a scalar integer or bool expression with sources)."""
  d = u.dtype
  return bool(u.src) and d.count == 1 and (dtypes.is_int(d) or dtypes.is_bool(d)) and u.op not in (Ops.RANGE, Ops.SPECIAL)

def _bounds(u: UOp) -> tuple:
  """Interval bounds of an integer/bool expression (floats: -inf..inf)."""
  d = u.dtype
  if u.op is Ops.CONST: return (u.arg, u.arg)
  if u.op is Ops.DEFINE_VAR: return (u.arg[1], u.arg[2])
  if u.op is Ops.BIND: return (u.src[0].arg[1], u.src[0].arg[2])   # (a size's bound is its variable's, not this call's value)
  if u.op is Ops.RANGE: return (0, max(0, u.src[0].vmax - 1))
  if u.op is Ops.SPECIAL: return (0, u.arg[1] - 1)
  if d.count > 1 or not (dtypes.is_int(d) or dtypes.is_bool(d)) or not u.src: return (dtypes.min(d), dtypes.max(d))
  s = u.src
  if u.op is Ops.CAST and (dtypes.is_int(s[0].dtype) or dtypes.is_bool(s[0].dtype)):
    lo, hi = s[0].vmin, s[0].vmax
    return (lo, hi) if dtypes.min(d) <= lo and hi <= dtypes.max(d) else (dtypes.min(d), dtypes.max(d))
  if len(s) >= 1 and any(x.dtype.count > 1 for x in s): return (dtypes.min(d), dtypes.max(d))
  a0, a1 = (s[0].vmin, s[0].vmax)
  if u.op is Ops.NEG: return (not a1, not a0) if dtypes.is_bool(d) else _clip(d, -a1, -a0)  # NEG of a bool is NOT
  if len(s) < 2: return (dtypes.min(d), dtypes.max(d))
  b0, b1 = (s[1].vmin, s[1].vmax)
  if u.op is Ops.ADD: return _clip(d, a0 + b0, a1 + b1)
  if u.op is Ops.SUB: return _clip(d, a0 - b1, a1 - b0)
  if u.op is Ops.MUL:
    vals = (a0 * b0, a0 * b1, a1 * b0, a1 * b1)
    return _clip(d, min(vals), max(vals))
  if u.op is Ops.MAX: return (max(a0, b0), max(a1, b1))
  if u.op is Ops.MOD and b0 > 0:
    if a0 >= 0: return (0, min(a1, b1 - 1)) if a1 >= b1 or a0 < b0 else (0, b1 - 1)
    return (-(b1 - 1), b1 - 1) if a1 > 0 else (-(b1 - 1), 0)
  if u.op is Ops.IDIV and b0 > 0:
    def tdiv(x: int | float, y: int | float) -> int | float: return abs(x) // y * (1 if x >= 0 else -1)
    vals = (tdiv(a0, b0), tdiv(a0, b1), tdiv(a1, b0), tdiv(a1, b1))
    return (min(vals), max(vals))
  if u.op is Ops.CMPLT: return (bool(a1 < b0), bool(a0 < b1))
  if u.op is Ops.CMPNE:
    if a1 < b0 or b1 < a0: return (True, True)
    if a0 == a1 == b0 == b1: return (False, False)
    return (False, True)
  if u.op is Ops.CMPEQ:
    if a1 < b0 or b1 < a0: return (False, False)
    if a0 == a1 == b0 == b1: return (True, True)
    return (False, True)
  if u.op is Ops.AND and dtypes.is_bool(d): return (bool(a0 and b0), bool(a1 and b1))
  if u.op is Ops.OR and dtypes.is_bool(d): return (bool(a0 or b0), bool(a1 or b1))
  if u.op is Ops.AND and a0 >= 0 and b0 >= 0: return (0, min(a1, b1))
  if u.op is Ops.WHERE and len(s) == 3:
    c0, c1 = s[1].vmin, s[1].vmax
    e0, e1 = s[2].vmin, s[2].vmax
    if a0 == a1: return (c0, c1) if a0 else (e0, e1)
    return (min(c0, e0), max(c1, e1))
  return (dtypes.min(d), dtypes.max(d))

def _clip(d: DType, lo: int | float, hi: int | float) -> tuple:
  # an interval that leaves the dtype wraps: we know nothing then
  if dtypes.is_int(d) and (lo < dtypes.min(d) or hi > dtypes.max(d)): return (dtypes.min(d), dtypes.max(d))
  return (lo, hi)

_INFIX = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.IDIV: "//", Ops.MOD: "%", Ops.FDIV: "/", Ops.CMPLT: "<",
          Ops.CMPNE: "!=", Ops.CMPEQ: "==", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>"}
def render_expr(u: UOp) -> str:
  if u.op is Ops.CONST: return str(u.arg)
  if u.op is Ops.DEFINE_VAR: return u.arg[0]
  if u.op is Ops.BIND: return f"{u.src[0].arg[0]}={u.src[1].arg}"
  if u.op is Ops.RANGE: return f"r{u.arg[0]}"
  if u.op is Ops.SPECIAL: return u.arg[0]
  if u.op in _INFIX: return f"({render_expr(u.src[0])}{_INFIX[u.op]}{render_expr(u.src[1])})"
  if u.op is Ops.NEG: return f"(-{render_expr(u.src[0])})"
  if u.op is Ops.MAX: return f"max({render_expr(u.src[0])}, {render_expr(u.src[1])})"
  if u.op is Ops.WHERE: return f"({render_expr(u.src[0])} ? {render_expr(u.src[1])} : {render_expr(u.src[2])})"
  if u.op is Ops.CAST: return f"({u.dtype.name}){render_expr(u.src[0])}"
  return f"<{u.op.name}>"

def pretty(u: UOp, limit: int = 60) -> str:
  """Multi-line listing of a graph, shared nodes named once."""
  nodes = list(u.toposort())
  if len(nodes) > limit: return f"UOp({u.op}, {u.dtype}, arg={u.arg!r}, <{len(nodes)} nodes>)"
  names = {n: f"x{i}" for i, n in enumerate(nodes)}
  lines = [f"{names[n]} = {n.op.name} {n.dtype!r} [{', '.join(names[s] for s in n.src)}] {n.arg!r}" for n in nodes]
  return "\n".join(lines)

def identity_element(op: Ops, dt: DType) -> int | float | bool:
  """The starting value of a reduction."""
  if op is Ops.ADD: return truncate(dt, 0)
  if op is Ops.MUL: return truncate(dt, 1)
  if op is Ops.MAX: return dtypes.min(dt.scalar)
  raise ValueError(f"{op} is not a reduction op; expected one of ADD, MUL, MAX")

