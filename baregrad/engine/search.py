"""BEAM search over optimization actions: time candidate opt lists on the device, keep the fastest `width`.

Actions are data (codegen.kernel.Opt), so the search is: start from the heuristic's choice and its prefixes (and, where
the target has workgroups, from no opts too), extend every kept list by every action that applies, build and time each,
keep the best, repeat a few rounds. The heuristic's choice is always a candidate and wins unless another is faster when
timed again, so a search never makes a kernel slower. On targets with workgroups the actions are the GPU ones as well:
LOCAL and GROUP amounts up to the declared threads per workgroup, PADTO to round tiles, SPLIT of a reduction (a loop to
stage over), SMEM for each stageable input (with a 3- or 4-stage cp.async pipeline where the target has one), TC for each
tensor core the target declares; a PADTO also comes with the UPCAST or UNROLL it pads for.

On the CPU each round's candidates are built (codegen + compile) in parallel by worker processes, one per core, then
timed one at a time on the device with nothing else running. Timing is the device's own (two timestamps the queue writes
around the launch). A candidate's time is its best of a few runs, cut short when its first run is already far slower than
the best so far; a build that takes longer than BEAM_BUILD_S is dropped. The result is cached on disk per kernel AST and
device (and the compiler's target), so a kernel is searched once. BEAM=n in the environment turns the search on for
every kernel; a progress bar shows candidates tried and the best time."""
from __future__ import annotations
import atexit, hashlib, json, os, pickle, struct, sys, time
from typing import Any
from baregrad import knobs
from baregrad.helpers import cache_dir, DEBUG, Progress
from baregrad.ir.dtype import DType, dtypes
from baregrad.ir.ops import UOp, Ops
from baregrad.hal import Device, Buffer
from baregrad.codegen.kernel import Kernel, Opt, OptOps, OptError
from baregrad.codegen.program import ProgramSpec, get_program
from baregrad.engine.runner import needed_elements

AMOUNTS = (2, 4, 8, 16, 32)
SLOW = 3.0   # a candidate whose first run takes this many times the best so far is not run again

GPU_THREADS = (2, 4, 8, 16, 32, 64, 128, 256)

def candidate_actions(k: Kernel) -> list[Opt]:
  """Opts that may extend k (beam_search also tries each PADTO with the UPCAST or UNROLL of its amount)."""
  acts: list[Opt] = []
  for n, i in enumerate(k.loop_axes()):
    ax = k.axes[i]
    kind = ax.kind
    if ax.tc is not None: continue
    for a in AMOUNTS:
      if kind in ("loop", "global"): acts.append(Opt(OptOps.UPCAST, n, a))
      if kind == "reduce": acts.append(Opt(OptOps.UNROLL, n, a))
    if kind == "loop": acts.append(Opt(OptOps.PARALLEL, n))
    if sum(b.orig == ax.orig for b in k.axes) == 1 and ax.orig not in k.pads:
      acts += [Opt(OptOps.PADTO, n, a) for a in ((16, 32, 64, 128) if k.gpu else (4, 8, 16, 32)) if a < ax.size and ax.size % a]
    if not k.gpu: continue
    for a in GPU_THREADS:
      if kind in ("loop", "global") and ax.size % a == 0: acts.append(Opt(OptOps.LOCAL, n, a))
      if kind == "reduce" and ax.size % a == 0: acts += [Opt(OptOps.GROUP, n, a), Opt(OptOps.SPLIT, n, a)]
  if k.gpu:
    # staging, and where the target copies asynchronously the pipeline's depth (2..4 shared buffers, as shared memory allows)
    depths = (0, 3, 4) if k.async_copy else (0,)
    acts += [Opt(OptOps.SMEM, j, d) for j in range(len(k.stage_candidates())) if j not in k.staged for d in depths
             if not (d and k.stages and d != k.stages)]
    if k.tc is None: acts += [Opt(OptOps.TC, j) for j in range(len(k.tensor_cores))]
    if k.has_images: acts += [Opt(OptOps.IMAGE, j) for j, b in enumerate(k.image_candidates()) if b not in k.images]
  return acts

def _extensions(k: Kernel, opts: list[Opt]) -> list[list[Opt]]:
  out = []
  for a in candidate_actions(k):
    out.append(opts + [a])
    if a.op is OptOps.PADTO:   # a pad is worth something with the split it makes possible
      kind = k.axes[k.loop_axes()[a.axis]].kind
      out.append(opts + [a, Opt(OptOps.UNROLL if kind == "reduce" else OptOps.UPCAST, a.axis, a.amt)])
  return out

def _kernel(ast: UOp, device: str) -> Kernel:
  ren = Device[device].renderer
  return Kernel(ast, max_parallel=len(ren.global_max) or 1, gpu=ren.has_local, ren=ren)

def _applies(ast: UOp, opts: list[Opt], ren: Any) -> bool:
  k = Kernel(ast, max_parallel=len(ren.global_max) or 1, gpu=ren.has_local, ren=ren)
  try:
    for o in opts: k.apply_opt(o)
  except OptError: return False
  return True

def _buffer_sizes(ast: UOp) -> dict[int, tuple[int, DType]]:
  """Elements each buffer needs (runner.needed_elements: one past the largest index any view, or gather, reaches) and
  its dtype."""
  need = needed_elements(ast)
  # (type: ignore: a buffer's dtype is a PtrDType)
  return {g.arg: (need.get(g.arg, 0), g.dtype.base) for g in ast.toposort() if g.op is Ops.DEFINE_GLOBAL}  # type: ignore[attr-defined]

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
  procs: list[Any]   # subprocess.Popen
  def __init__(self, n: int, payload: bytes) -> None:
    self.n, self.payload, self.procs = n, payload, []
  def _start(self) -> Any:
    import subprocess
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = knobs.child_env(prepend={"PYTHONPATH": root})
    p = subprocess.Popen([sys.executable, "-m", "baregrad.engine.search", "--worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert p.stdin is not None   # (stdin=PIPE)
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
    busy: dict[Any, tuple[int, float]]
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
  budget = float(knobs.get("BEAM_BUILD_S"))
  n = knobs.get("BEAM_WORKERS") or os.cpu_count() or 1
  payload = None
  if n > 1 and len(cands) > 1 and not ren.has_local:   # (GPU candidates are built here, one at a time)
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
  """A built candidate, loaded on the device."""
  def __init__(self, device: str, spec: ProgramSpec, lib: bytes):
    self.spec, self.dev = spec, Device[device]
    self.prg = self.dev.runtime(self.dev, spec.name, lib)  # type: ignore[misc]  # (a device that compiles has a runtime)
  def run(self, bufs: list[Buffer]) -> float:
    t = self.prg(*[bufs[g.arg]._buf for g in self.spec.bufs], global_size=self.spec.global_size, local_size=self.spec.local_size, wait=True)
    return t if t is not None else float("inf")

def _time(ast: UOp, device: str, opts: list[Opt], bufs: list[Buffer], reps: int = 3, cutoff: float = float("inf"),
          built: _Timed | None = None) -> float:
  """The best of `reps` device-timed runs of the candidate (`built`, or built here); the time budget: a candidate slower
  than `cutoff` on its first run is not run again, and a long one (over 20 ms) runs twice at most."""
  if built is None:
    spec = get_program(ast, Device[device].renderer, opts)
    built = _Timed(device, spec, Device[device].compiler.compile_cached(spec.src))
  first = built.run(bufs)
  if first > cutoff: return first
  return min([first] + [built.run(bufs) for _ in range(reps - 1 if first < 0.02 else 1)])

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
  for buf in bufs: _fill(buf)
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
      try: t = _time(ast, device, list(c), bufs, cutoff=SLOW * best_t, built=built.setdefault(tuple(c), _Timed(device, spec, lib)))
      except Exception as e:  # a candidate that fails to run is simply not a candidate
        if DEBUG() >= 3: print(f"beam: {c} failed to run: {e}", file=sys.stderr)
        continue
      finally: spent[1] += time.perf_counter() - st
      timed[tuple(c)], best_t = t, min(best_t, t)
      bar.update(1, f"best {best_t * 1e6:.1f} us")
  # seeds: the heuristic's choice and its prefixes, so each of its decisions gets alternatives. On a CPU no opts at all is
  # a scalar single-core kernel: for a large one, a second per run spent on a candidate that cannot win; on a GPU no opts
  # is one thread per output and the GPU actions start from it
  beam: list[list[Opt]] = ([[]] if ren.has_local else []) + [heur[:i] for i in range(1 if heur else 0, len(heur) + 1)]
  try_all(beam)   # the first round extends every seed
  if tuple(heur) not in timed:   # the baseline is always timed (its build here, if a worker's was dropped)
    try:
      spec = get_program(ast, ren, heur)
      b = built.setdefault(tuple(heur), _Timed(device, spec, compiler.compile_cached(spec.src)))
      timed[tuple(heur)] = _time(ast, device, heur, bufs, built=b)
    except Exception as e:
      if DEBUG() >= 2: print(f"beam: the heuristic's {heur} failed: {e}", file=sys.stderr)
  for _ in range(rounds):
    cands = []
    for opts in beam:
      k = _kernel(ast, device)
      try:
        for o in opts: k.apply_opt(o)
      except OptError: continue
      cands += [c for c in _extensions(k, opts) if _applies(ast, c, ren)]
    if not cands: break
    try_all(cands)
    beam = [list(c) for c, _ in sorted(timed.items(), key=lambda x: x[1])[:width]]
  bar.close()
  chosen = min(timed, key=timed.__getitem__) if timed else tuple(heur)
  if chosen != tuple(heur) and tuple(heur) in timed:
    # the search's best must beat the heuristic when both are timed again, alternately (a noisy first timing is not enough)
    a, b = built[chosen], built[tuple(heur)]
    ta, tb = float("inf"), float("inf")
    for _ in range(5): ta, tb = min(ta, a.run(bufs)), min(tb, b.run(bufs))
    if ta >= tb: chosen = tuple(heur)
  if DEBUG() >= 2: print(f"beam: {len(timed)} candidates (building {spent[0]:.1f} s, timing {spent[1]:.1f} s), "
                         f"{timed.get(chosen, 0) * 1e6:.1f} us with {list(chosen)} (heuristic "
                         f"{timed.get(tuple(heur), float('nan')) * 1e6:.1f} us with {heur})", file=sys.stderr)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path + ".tmp", "w") as f: json.dump([(o.op.name, o.axis, o.amt) for o in chosen], f)
  os.replace(path + ".tmp", path)
  return list(chosen)

if __name__ == "__main__" and sys.argv[1:] == ["--worker"]: _serve()
