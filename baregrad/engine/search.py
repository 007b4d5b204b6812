"""BEAM search over optimization actions: time candidate opt lists on the device, keep the fastest `width`.

Actions are data (codegen.kernel.Opt), so the search is: start from no opts, extend every kept list by every
action that applies, compile and time each, keep the best, repeat a few rounds. Results are cached on disk
by (AST, device) so a kernel is searched once. BEAM=n in the environment turns it on for every kernel."""
from __future__ import annotations
import hashlib, json, os, sys
from baregrad.helpers import cache_dir, DEBUG, Progress
from baregrad.ir.ops import UOp, Ops
from baregrad.hal import Device, Buffer
from baregrad.codegen.kernel import Kernel, Opt, OptOps, OptError
from baregrad.codegen.program import get_program

AMOUNTS = (2, 4, 8, 16, 32)

def candidate_actions(k: Kernel) -> list[Opt]:
  acts: list[Opt] = []
  for n, i in enumerate(k.loop_axes()):
    kind = k.axes[i].kind
    for a in AMOUNTS:
      if kind in ("loop", "global"): acts.append(Opt(OptOps.UPCAST, n, a))
      if kind == "reduce": acts.append(Opt(OptOps.UNROLL, n, a))
    if kind == "loop": acts.append(Opt(OptOps.PARALLEL, n))
  return acts

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

def _time(ast: UOp, device: str, opts: list[Opt], bufs: list[Buffer], reps: int = 3) -> float:
  from baregrad.engine.runner import CompiledRunner
  spec = get_program(ast, Device[device].renderer, opts)
  r = CompiledRunner(spec, device)
  return min(r(bufs, wait=True) or 0.0 for _ in range(reps))

def _key(ast: UOp, device: str, width: int) -> str:
  return hashlib.sha256(f"{device}|{width}|{ast!r}|{sorted((u.op.name, str(u.arg)) for u in ast.toposort())}".encode()).hexdigest()

def beam_search(ast: UOp, device: str, width: int, rounds: int = 3) -> list[Opt]:
  device = Device.canonicalize(device)
  path = os.path.join(cache_dir(), "beam", _key(ast, device, width) + ".json")
  if os.path.exists(path):
    with open(path) as f: return [Opt(OptOps[o], a, m) for o, a, m in json.load(f)]
  sizes = _buffer_sizes(ast)
  bufs = [Buffer(device, max(1, sizes[i][0]), sizes[i][1]).allocate() for i in range(max(sizes) + 1)] if sizes else []
  # fresh device memory is zeros: fine for timing, and no denormals or NaNs to skew it
  best: list[tuple[float, list[Opt]]] = [(_time(ast, device, [], bufs), [])]
  beam = [[]]
  fastest, bar = best[0][0], Progress(desc=f"BEAM {width}", unit="candidates", delay=0.5)  # a bar on a terminal
  for _ in range(rounds):
    cands: list[tuple[float, list[Opt]]] = []
    for opts in beam:
      k = Kernel(ast)
      try:
        for o in opts: k.apply_opt(o)
      except OptError: continue
      for a in candidate_actions(k):
        new = opts + [a]
        try:
          k2 = Kernel(ast)
          for o in new: k2.apply_opt(o)
          cands.append((_time(ast, device, new, bufs), new))
          fastest = min(fastest, cands[-1][0])
          bar.update(1, f"best {fastest * 1e6:.1f} us")
        except Exception as e:  # a candidate that fails to apply or build is simply not a candidate
          if DEBUG() >= 3: print(f"beam: {new} failed: {e}", file=sys.stderr)
    if not cands: break
    cands.sort(key=lambda c: c[0])
    beam = [c[1] for c in cands[:width]]
    best = sorted(best + cands[:width], key=lambda c: c[0])[:width]
  bar.close()
  chosen = best[0][1]
  if DEBUG() >= 2: print(f"beam: {best[0][0] * 1e6:.1f} us with {chosen}", file=sys.stderr)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path + ".tmp", "w") as f: json.dump([(o.op.name, o.axis, o.amt) for o in chosen], f)
  os.replace(path + ".tmp", path)
  return chosen
