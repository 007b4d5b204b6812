"""BEAM search over optimization actions: time candidate opt lists on the device, keep the fastest `width`.

Actions are data (codegen.kernel.Opt), so the search is: start from no opts and from the heuristic's choice, extend every
kept list by every action that applies, build and time each, keep the best, repeat a few rounds. The heuristic's choice
is always a candidate and wins unless another is faster when timed again, so a search never makes a kernel slower.

Each round's candidates are built (codegen + compile) in parallel by worker processes, one per core, then timed one at a
time on the device with nothing else running. A candidate's time is its best of a few runs, cut short when its first run
is already far slower than the best so far; a build that takes longer than BEAM_BUILD_S is dropped. The result is cached
on disk per kernel AST and device (and the compiler's target), so a kernel is searched once. BEAM=n in the environment
turns the search on for every kernel; a progress bar shows candidates tried and the best time."""
from __future__ import annotations
import atexit, hashlib, json, os, pickle, struct, sys, time
from typing import Any
from baregrad.helpers import cache_dir, DEBUG, Progress, getenv
from baregrad.ir.dtype import dtypes
from baregrad.ir.ops import UOp, Ops
from baregrad.hal import Device, Buffer
from baregrad.codegen.kernel import Kernel, Opt, OptOps, OptError
from baregrad.codegen.program import ProgramSpec, get_program

AMOUNTS = (2, 4, 8, 16, 32)
SLOW = 3.0   # a candidate whose first run takes this many times the best so far is not run again

def candidate_actions(k: Kernel) -> list[list[Opt]]:
  """Actions that extend k: one or two opts each (an amount that does not divide the axis pads it first)."""
  acts: list[list[Opt]] = []
  loops = k.loop_axes()
  for n, i in enumerate(loops):
    ax = k.axes[i]
    unsplit = sum(a.orig == ax.orig for a in k.axes) == 1 and ax.orig not in k.pads
    op = OptOps.UPCAST if ax.kind in ("loop", "global") else OptOps.UNROLL if ax.kind == "reduce" else None
    if op is not None:
      for a in AMOUNTS:
        if a > ax.size: continue
        if ax.size % a == 0: acts.append([Opt(op, n, a)])
        elif unsplit and a >= 4: acts.append([Opt(OptOps.PADTO, n, a), Opt(op, n, a)])
    if ax.kind == "loop": acts.append([Opt(OptOps.PARALLEL, n)])
  return acts

def _applies(ast: UOp, opts: list[Opt], ren: Any) -> bool:
  k = Kernel(ast, max_parallel=len(ren.global_max) or 1, gpu=ren.has_local)
  try:
    for o in opts: k.apply_opt(o)
  except OptError: return False
  return True

def _buffer_sizes(ast: UOp) -> dict[int, tuple[int, object]]:
  """Elements each buffer needs: one past the largest index any view reaches."""
  out: dict[int, tuple[int, object]] = {}
  for u in ast.toposort():
    if u.op in (Ops.LOAD, Ops.STORE):
      g, st = u.src[0], u.src[1].arg
      idxs = [UOp.range(s, i) for i, s in enumerate(st.shape)]
      idx, _ = st.to_index(idxs)
      n = int(idx.vmax) + 1 if st.size else 0
      prev = out.get(g.arg, (0, g.dtype.base))[0]
      out[g.arg] = (max(prev, n), g.dtype.base)
  return out

def _fill(b: Buffer) -> None:
  """Ordinary values (fresh device memory is zero pages on a CPU, which no real input is; no NaNs or denormals)."""
  d = b.dtype.scalar
  if dtypes.is_float(d): pat = [0.5 + (i * 37 % 101) / 101 for i in range(256)]
  else: pat = [i * 37 % (2 if d == dtypes.bool else 7) for i in range(256)]
  fmt = {dtypes.float16: "e", dtypes.float32: "f", dtypes.float64: "d"}.get(d)
  if fmt is None:
    one = b"".join(int(v).to_bytes(d.itemsize, "little") for v in pat)
  else: one = struct.pack(f"<{len(pat)}{fmt}", *pat)
  if d == dtypes.bfloat16: one = b"".join(struct.pack("<f", v)[2:] for v in pat)
  data = (one * (b.nbytes // len(one) + 1))[:b.nbytes]
  b.copyin(memoryview(data))

# ---------------------------------------------------------------- building candidates in worker processes
def _build(ren: Any, compiler: Any, ast: UOp, opts: list[Opt]) -> tuple[ProgramSpec, bytes]:
  spec = get_program(ast, ren, opts)
  lib = compiler.compile_cached(spec.src)
  spec.uops = []  # not needed to run it; big to send back
  return spec, lib

def _send(f: Any, obj: Any) -> None:
  data = pickle.dumps(obj)
  f.write(struct.pack("<Q", len(data)) + data)
  f.flush()

def _recv(f: Any) -> Any:
  head = f.read(8)
  if len(head) < 8: raise EOFError("beam worker closed its pipe")
  return pickle.loads(f.read(struct.unpack("<Q", head)[0]))

def _serve() -> None:
  """A worker process (python -m baregrad.engine.search --worker): builds the candidates it is sent, one at a time."""
  out = os.fdopen(os.dup(1), "wb")
  sys.stdout = sys.stderr  # what the compiler prints must not reach the pipe
  inp = sys.stdin.buffer
  ren, compiler = _recv(inp)
  while True:
    try: ast, opts = _recv(inp)
    except EOFError: return
    try: _send(out, (True, _build(ren, compiler, ast, opts)))
    except Exception as e: _send(out, (False, f"{type(e).__name__}: {e}"))

class _Workers:
  """Processes that build candidates, one per core. Started as `python -m` (not multiprocessing: a spawned child would
  import the user's main script again); a build over its budget has its process killed."""
  def __init__(self, n: int, payload: bytes) -> None:
    self.n, self.payload, self.procs = n, payload, []
  def _start(self) -> Any:
    import subprocess
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))}
    p = subprocess.Popen([sys.executable, "-m", "baregrad.engine.search", "--worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    p.stdin.write(struct.pack("<Q", len(self.payload)) + self.payload); p.stdin.flush()
    return p
  def close(self) -> None:
    for p in self.procs:
      try: p.stdin.close(); p.kill(); p.wait(timeout=5)
      except Exception: pass
    self.procs = []
  def build(self, ast: UOp, cands: list[list[Opt]], budget: float) -> dict[int, tuple[ProgramSpec, bytes]]:
    import select
    while len(self.procs) < min(self.n, len(cands)): self.procs.append(self._start())
    todo, busy, res = list(range(len(cands))), {}, {}   # busy: proc -> (candidate, deadline)
    while todo or busy:
      for p in self.procs:
        if p not in busy and todo:
          i = todo.pop(0)
          _send(p.stdin, (ast, cands[i]))
          busy[p] = (i, time.perf_counter() + budget)
      ready, _, _ = select.select([p.stdout for p in busy], [], [], 0.05)
      for p in list(busy):
        i, deadline = busy[p]
        if p.stdout in ready:
          try: ok, val = _recv(p.stdout)
          except (EOFError, pickle.UnpicklingError): ok, val = False, "the worker died"
          del busy[p]
          if ok: res[i] = val
          elif DEBUG() >= 3: print(f"beam: {cands[i]} failed to build: {val}", file=sys.stderr)
          if val == "the worker died": self.procs[self.procs.index(p)] = self._start()
        elif time.perf_counter() > deadline:
          if DEBUG() >= 2: print(f"beam: {cands[i]} took over the build budget of {budget} s: dropped", file=sys.stderr)
          del busy[p]
          p.kill(); p.wait()
          self.procs[self.procs.index(p)] = self._start()
    return res

_pools: dict[bytes, _Workers] = {}

@atexit.register
def _shutdown() -> None:
  for w in _pools.values(): w.close()
  _pools.clear()

def _build_all(ast: UOp, cands: list[list[Opt]], ren: Any, compiler: Any) -> list[tuple[list[Opt], ProgramSpec, bytes]]:
  """Build every candidate (in worker processes where the renderer and compiler can be sent to one); those that fail or
  exceed the build budget (BEAM_BUILD_S seconds each) are left out."""
  budget = float(getenv("BEAM_BUILD_S", 20.0))
  n = int(getenv("BEAM_WORKERS", os.cpu_count() or 1))
  payload = None
  if n > 1 and len(cands) > 1:
    try: payload, _ = pickle.dumps((ren, compiler)), pickle.dumps(ast)   # (a very deep AST may not pickle)
    except Exception: payload = None
  if payload is not None:
    if payload not in _pools: _pools[payload] = _Workers(n, payload)
    res = _pools[payload].build(ast, cands, budget)
    return [(cands[i], *res[i]) for i in sorted(res)]
  out = []
  for c in cands:
    try: out.append((c, *_build(ren, compiler, ast, c)))
    except Exception as e:
      if DEBUG() >= 3: print(f"beam: {c} failed to build: {e}", file=sys.stderr)
  return out

# ---------------------------------------------------------------- timing
class _Timed:
  def __init__(self, device: str, spec: ProgramSpec, lib: bytes):
    self.spec, self.dev = spec, Device[device]
    self.prg = self.dev.runtime(self.dev, spec.name, lib)
  def run(self, raw: list) -> float:
    t = self.prg(*[raw[g.arg] for g in self.spec.bufs], global_size=self.spec.global_size, local_size=self.spec.local_size, wait=True)
    return t if t is not None else float("inf")

def _time(t: _Timed, raw: list, best: float, reps: int = 3) -> float:
  first = t.run(raw)
  if first > SLOW * best: return first   # the time budget: a slow candidate runs once
  return min([first] + [t.run(raw) for _ in range(reps - 1 if first < 0.02 else 1)])

def _key(ast: UOp, device: str, width: int, target: str) -> str:
  return hashlib.sha256(f"{device}|{target}|{width}|{ast!r}|{sorted((u.op.name, str(u.arg)) for u in ast.toposort())}".encode()).hexdigest()

def beam_search(ast: UOp, device: str, width: int, rounds: int = 3) -> list[Opt]:
  """The fastest opts found for `ast` on `device` (cached on disk), never slower than the heuristic's as timed here."""
  device = Device.canonicalize(device)
  dev = Device[device]
  ren, compiler = dev.renderer, dev.compiler
  path = os.path.join(cache_dir(), "beam", _key(ast, device, width, str(getattr(compiler, "cachekey", ""))) + ".json")
  if os.path.exists(path):
    with open(path) as f: return [Opt(OptOps[o], a, m) for o, a, m in json.load(f)]
  if any(u.op is Ops.DEFINE_VAR for u in ast.toposort()): return get_program(ast, ren).opts  # no values to time with
  sizes = _buffer_sizes(ast)
  bufs = [Buffer(device, max(1, sizes[i][0]) if i in sizes else 1, sizes[i][1] if i in sizes else dtypes.uint8).allocate()
          for i in range(max(sizes) + 1)] if sizes else []
  for b in bufs: _fill(b)
  raw = [b._buf for b in bufs]
  heur = get_program(ast, ren).opts
  timed: dict[tuple[Opt, ...], float] = {}
  built: dict[tuple[Opt, ...], _Timed] = {}
  best_t = float("inf")
  bar = Progress(desc=f"BEAM {width}", unit="candidates", delay=0.5)   # a bar on a terminal
  spent = [0.0, 0.0]   # building, timing
  def try_all(cands: list[list[Opt]]) -> None:
    nonlocal best_t
    new = [c for c in cands if tuple(c) not in timed]
    st = time.perf_counter()
    done = _build_all(ast, new, ren, compiler)
    spent[0] += time.perf_counter() - st
    for c, spec, lib in done:
      st = time.perf_counter()
      try: t = _time(built.setdefault(tuple(c), _Timed(device, spec, lib)), raw, best_t)
      except Exception as e:  # a candidate that fails to run is simply not a candidate
        if DEBUG() >= 3: print(f"beam: {c} failed to run: {e}", file=sys.stderr)
        continue
      finally: spent[1] += time.perf_counter() - st
      timed[tuple(c)], best_t = t, min(best_t, t)
      bar.update(1, f"best {best_t * 1e6:.1f} us")
  # seeds: the heuristic's choice and its prefixes, so each of its decisions gets alternatives (no opts at all is a
  # scalar single-core kernel: for a large one, a second per run spent on a candidate that cannot win)
  beam = [heur[:i] for i in range(1 if heur else 0, len(heur) + 1)]
  try_all(beam)   # the first round extends every seed
  for _ in range(rounds):
    cands = []
    for opts in beam:
      k = Kernel(ast, max_parallel=len(ren.global_max) or 1, gpu=ren.has_local)
      for o in opts: k.apply_opt(o)
      cands += [opts + a for a in candidate_actions(k) if _applies(ast, opts + a, ren)]
    if not cands: break
    try_all(cands)
    beam = [list(c) for c, _ in sorted(timed.items(), key=lambda x: x[1])[:width]]
  bar.close()
  chosen = min(timed, key=timed.get) if timed else tuple(heur)
  if chosen != tuple(heur) and tuple(heur) in timed:
    # the search's best must beat the heuristic when both are timed again, alternately (a noisy first timing is not enough)
    a, b = built[chosen], built[tuple(heur)]
    ta, tb = float("inf"), float("inf")
    for _ in range(5): ta, tb = min(ta, a.run(raw)), min(tb, b.run(raw))
    if ta >= tb: chosen = tuple(heur)
  if DEBUG() >= 2: print(f"beam: {len(timed)} candidates (building {spent[0]:.1f} s, timing {spent[1]:.1f} s), "
                         f"{timed.get(chosen, 0) * 1e6:.1f} us with {list(chosen)} (heuristic "
                         f"{timed.get(tuple(heur), float('nan')) * 1e6:.1f} us with {heur})", file=sys.stderr)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path + ".tmp", "w") as f: json.dump([(o.op.name, o.axis, o.amt) for o in chosen], f)
  os.replace(path + ".tmp", path)
  return list(chosen)

if __name__ == "__main__" and sys.argv[1:] == ["--worker"]: _serve()
