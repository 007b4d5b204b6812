"""BEAM search over optimization actions: time candidate opt lists on the device, keep the fastest `width`.

Actions are data (codegen.kernel.Opt), so the search is: start from no opts (and, where the target has workgroups, from
the heuristic's choice too, so the search never ends worse than it), extend every kept list by every action that
applies, compile and time each, keep the best, repeat a few rounds. Results are cached on disk by (AST, device) so a
kernel is searched once. BEAM=n in the environment turns it on for every kernel.

Timing is the device's own: CompiledRunner(wait=True) brackets the launch with two timestamps the queue writes (on an
HCQ GPU, the GPU's global timer through its signals), not host time. On targets with workgroups the actions are the
GPU ones as well: LOCAL and GROUP amounts up to the declared threads per workgroup, PADTO to round tiles, SPLIT of a
reduction (a loop to stage over), SMEM for each stageable input, TC for each tensor core the target declares."""
from __future__ import annotations
import hashlib, json, os, sys
from baregrad.helpers import cache_dir, DEBUG, Progress
from baregrad.ir.ops import UOp, Ops
from baregrad.hal import Device, Buffer
from baregrad.codegen.kernel import Kernel, Opt, OptOps, OptError
from baregrad.codegen.program import get_program

AMOUNTS = (2, 4, 8, 16, 32)

GPU_THREADS = (2, 4, 8, 16, 32, 64, 128, 256)

def candidate_actions(k: Kernel) -> list[Opt]:
  acts: list[Opt] = []
  for n, i in enumerate(k.loop_axes()):
    ax = k.axes[i]
    kind = ax.kind
    if ax.tc is not None: continue
    for a in AMOUNTS:
      if kind in ("loop", "global"): acts.append(Opt(OptOps.UPCAST, n, a))
      if kind == "reduce": acts.append(Opt(OptOps.UNROLL, n, a))
    if kind == "loop": acts.append(Opt(OptOps.PARALLEL, n))
    if not k.gpu: continue
    for a in GPU_THREADS:
      if kind in ("loop", "global") and ax.size % a == 0: acts.append(Opt(OptOps.LOCAL, n, a))
      if kind == "reduce" and ax.size % a == 0: acts += [Opt(OptOps.GROUP, n, a), Opt(OptOps.SPLIT, n, a)]
    if sum(b.orig == ax.orig for b in k.axes) == 1 and ax.orig not in k.pads:
      acts += [Opt(OptOps.PADTO, n, a) for a in (16, 32, 64, 128) if ax.size % a]
  if k.gpu:
    acts += [Opt(OptOps.SMEM, j) for j in range(len(k.stage_candidates())) if j not in k.staged]
    if k.tc is None: acts += [Opt(OptOps.TC, j) for j in range(len(k.tensor_cores))]
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

def _time(ast: UOp, device: str, opts: list[Opt], bufs: list[Buffer], reps: int = 3, cutoff: float = float("inf")) -> float:
  """The best of `reps` device-timed runs; a candidate slower than `cutoff` on its first run is not run again."""
  from baregrad.engine.runner import CompiledRunner
  spec = get_program(ast, Device[device].renderer, opts)
  r = CompiledRunner(spec, device)
  best = r(bufs, wait=True) or 0.0
  for _ in range(reps - 1):
    if best > cutoff: break
    best = min(best, r(bufs, wait=True) or 0.0)
  return best

def _kernel(ast: UOp, device: str) -> Kernel:
  ren = Device[device].renderer
  return Kernel(ast, max_parallel=len(ren.global_max) or 1, gpu=ren.has_local, ren=ren)

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
  beam: list[list[Opt]] = [[]]
  if Device[device].renderer.has_local:
    # on a GPU no opts is one thread: start from the heuristic's kernel as well
    from baregrad.codegen.heuristic import heuristic_opts
    h = heuristic_opts(_kernel(ast, device), Device[device].renderer)
    try: best.append((_time(ast, device, h, bufs), h)); beam.append(h)
    except Exception as e:
      if DEBUG() >= 3: print(f"beam: heuristic {h} failed: {e}", file=sys.stderr)
  fastest, bar = min(t for t, _ in best), Progress(desc=f"BEAM {width}", unit="candidates", delay=0.5)  # a bar on a terminal
  for _ in range(rounds):
    cands: list[tuple[float, list[Opt]]] = []
    cutoff = 3 * min(t for t, _ in best)
    for opts in beam:
      k = _kernel(ast, device)
      try:
        for o in opts: k.apply_opt(o)
      except OptError: continue
      for a in candidate_actions(k):
        new = opts + [a]
        try:
          k2 = _kernel(ast, device)
          for o in new: k2.apply_opt(o)
          cands.append((_time(ast, device, new, bufs, cutoff=cutoff), new))
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
