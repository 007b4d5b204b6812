"""The default choice of optimization actions for a kernel (a search can replace it: actions are data)."""
from __future__ import annotations
from baregrad.ir.ops import UOp, Ops
from baregrad.codegen.kernel import Kernel, Opt, OptOps, OptError
from baregrad.codegen.renderer import Renderer

def _strides(k: Kernel) -> list[tuple[UOp, tuple[int | None, ...]]]:
  """(buffer access, stride per full-shape axis) for every LOAD and STORE of the AST."""
  out = []
  for u in k.ast.toposort():
    if u.op in (Ops.LOAD, Ops.STORE):
      st = u.src[1].arg
      out.append((u, st.real_strides()))
  return out

def _loop_index(k: Kernel, orig: int) -> int | None:
  """The optimizer's axis number of the innermost loop part of full-shape axis `orig`."""
  loops = k.loop_axes()
  cands = [n for n, i in enumerate(loops) if k.axes[i].orig == orig]
  return cands[-1] if cands else None

def _try(k: Kernel, opt: Opt) -> bool:
  try: k.apply_opt(opt); return True
  except OptError: return False

def _largest_divisor(n: int, limit: int) -> int:
  for d in range(min(n, limit), 0, -1):
    if n % d == 0 and (d & (d - 1)) == 0: return d
  return 1

def heuristic_opts(k: Kernel, ren: Renderer) -> list[Opt]:
  """Apply and return a reasonable set of opts: register tiles for reductions with reuse, vector lanes along
  the contiguous axis, and one axis over the threads. CPUs (no workgroups): codegen/cpu_heuristic.py. Targets with
  workgroups that declare their GPU limits (a warp size, shared memory, ...) get GPU-shaped kernels (gpu_heuristic.gpu_opts)."""
  if not ren.has_local:
    from baregrad.codegen.cpu_heuristic import cpu_opts
    return cpu_opts(k, ren)
  if ren.warp_size:
    from baregrad.codegen.gpu_heuristic import gpu_opts
    return gpu_opts(k, ren)
  acc = _strides(k)
  itemsize = max((u.src[0].dtype.base.itemsize for u, _ in acc), default=4)  # type: ignore[attr-defined]  # (a pointer: PtrDType)
  vec = max(1, 64 // itemsize)   # one 512-bit register of elements
  if not ren.vectorized: vec = min(vec, 4)  # scalar code: lanes become separate registers
  out_axes = [a.orig for a in k.axes if a.kind == "loop"]
  red_axes = [a.orig for a in k.axes if a.kind == "reduce"]
  stores = [s for u, s in acc if u.op is Ops.STORE]
  loads = [s for u, s in acc if u.op is Ops.LOAD]
  def contiguous_in(ss: list, o: int) -> bool: return any(s[o] == 1 for s in ss)
  if red_axes and out_axes:
    # reuse: an output axis along which some load does not move (stride 0) is worth keeping in registers
    reuse = [o for o in out_axes if any(s[o] == 0 for s in loads) and k.full_shape[o] > 1]
    inner = [o for o in reuse if contiguous_in(loads, o) or contiguous_in(stores, o)]
    if inner and len(reuse) > 1:
      j = inner[-1]
      amt_j = _largest_divisor(k.full_shape[j], 2 * vec)
      if amt_j > 1 and (n := _loop_index(k, j)) is not None: _try(k, Opt(OptOps.UPCAST, n, amt_j))
      for i in reuse:
        if i == j: continue
        amt_i = min(_largest_divisor(k.full_shape[i], max(1, 256 // max(k.lanes, 1)) if k.lanes > 1 else 8), 8 if ren.vectorized else 4)
        if amt_i > 1 and (n := _loop_index(k, i)) is not None: _try(k, Opt(OptOps.UPCAST, n, amt_i))
        break
    elif any(contiguous_in(loads, r) for r in red_axes):
      r = red_axes[-1]
      amt = _largest_divisor(k.full_shape[r], vec)
      if amt > 1 and (n := _loop_index(k, r)) is not None: _try(k, Opt(OptOps.UNROLL, n, amt))
  elif red_axes:
    r = red_axes[-1]
    amt = _largest_divisor(k.full_shape[r], vec)
    if amt > 1 and (n := _loop_index(k, r)) is not None: _try(k, Opt(OptOps.UNROLL, n, amt))
  else:
    # elementwise: lanes along the innermost axis the stores walk contiguously
    cont = [o for o in out_axes if contiguous_in(stores, o)] or out_axes[-1:]
    if cont:
      o = cont[-1]
      amt = _largest_divisor(k.full_shape[o], vec)
      if amt > 1 and (n := _loop_index(k, o)) is not None: _try(k, Opt(OptOps.UPCAST, n, amt))
  if ren.has_local:
    # a GPU target that declares no warp size (so none of the GPU limits gpu_opts reads): the innermost output axes
    # become the grid (x innermost), the innermost one also split into a workgroup
    outs = [n for n, i in enumerate(k.loop_axes()) if k.axes[i].kind == "loop"]
    if outs:
      last = outs[-1]
      sz = k.axes[k.loop_axes()[last]].size
      lsz = _largest_divisor(sz, min(ren.local_max or 128, 128))
      if lsz > 1 and lsz < sz: _try(k, Opt(OptOps.LOCAL, last, lsz))
      elif lsz == sz and sz > 1: _try(k, Opt(OptOps.LOCAL, last, sz))
    loops = k.loop_axes()
    cand = [n for n, i in enumerate(loops) if k.axes[i].kind == "loop"]
    for dim, n in enumerate(reversed(cand[-len(ren.global_max):] if ren.global_max else [])):
      i = k.loop_axes()[n]
      if k.axes[i].size <= ren.global_max[dim]: _try(k, Opt(OptOps.PARALLEL, n))
  elif ren.has_threads:
    loops = k.loop_axes()
    for n, i in enumerate(loops):
      if k.axes[i].kind == "loop" and 2 <= k.axes[i].size < 2 ** 32:  # the CPU queue's EXEC carries a 32-bit extent
        _try(k, Opt(OptOps.PARALLEL, n)); break
  return list(k.applied)
