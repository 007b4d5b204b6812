"""Run kernel ASTs on a device: compile (cached by AST, device and opts), bind buffers, launch."""
from __future__ import annotations
import sys, threading, time
from typing import Sequence
from baregrad import helpers, knobs
from baregrad.helpers import DEBUG
from baregrad.ir.ops import UOp, Ops
from baregrad.ir.sint import smax, smin
from baregrad.hal import Device, Buffer, profile
from baregrad.hal.errors import CompileError
from baregrad.codegen.kernel import Opt, OptOps
from baregrad.codegen.program import ProgramSpec, get_program

def needed_elements(ast: UOp | None) -> dict[int, int]:
  """For each buffer number, how many elements the kernel's views may touch (the highest valid index + 1)."""
  need: dict[int, int] = {}
  for u in (ast.toposort() if ast is not None else ()):
    if u.op not in (Ops.LOAD, Ops.STORE): continue
    v = u.src[1].arg.views[0]  # the view that addresses the buffer
    rng = v.mask or tuple((0, s) for s in v.shape)
    if u.op is Ops.LOAD and len(u.src) == 3:   # a gather reads anywhere in its source's extent along its axis
      rng = tuple((0, u.arg[1]) if i == u.arg[0] else r for i, r in enumerate(rng))
    # (a symbolic size or offset at its largest value: the most any value of its variables touches)
    rng = tuple((smin(lo), smax(hi)) for lo, hi in rng)
    if any(lo >= hi for lo, hi in rng): continue  # nothing is valid: nothing is touched
    hi_idx = smax(v.offset) + sum(st * (hi - 1 if st > 0 else lo) for st, (lo, hi) in zip(v.strides, rng))
    need[u.src[0].arg] = max(need.get(u.src[0].arg, 0), hi_idx + 1)
  return need

class CompiledRunner:
  """A ProgramSpec compiled for one device."""
  def __init__(self, spec: ProgramSpec, device: str):
    self.spec, self.device = spec, Device.canonicalize(device)
    self.need = needed_elements(spec.ast)
    dev = Device[self.device]
    hits = dev.compiler.cache_hits
    self.lib = dev.compiler.compile_cached(spec.src)
    if spec.images and (why := getattr(dev.compiler, "image_build_unusable", lambda lib: None)(self.lib)):
      # the build that reads images cannot run (ir3: it spilled registers to private memory, as texture reads hoisted
      # ahead make it do): the same opts without IMAGE
      if DEBUG() >= 2: print(f"kernel {spec.name}: no images ({why})", file=sys.stderr)
      self.spec = spec = get_program(spec.ast, dev.renderer, [o for o in spec.opts if o.op is not OptOps.IMAGE], spec.name)  # type: ignore[arg-type]
      self.lib = dev.compiler.compile_cached(spec.src)
    self.cached = dev.compiler.cache_hits > hits
    self.prg = dev.runtime(dev, spec.name, self.lib)  # type: ignore[misc]  # (a device that compiles has a runtime)
    self._scalar: CompiledRunner | None = None
    # per argument: (buffer number, element type, elements it may touch, its dtype for errors), read on every launch
    # (type: ignore: a buffer's dtype is a PtrDType)
    self._args = [(g.arg, g.dtype.base.scalar, self.need.get(g.arg, 0), g.dtype.base) for g in spec.bufs]  # type: ignore[attr-defined]
    # a launch that needs no per-call alignment or variable handling, and the buffers it needs
    self._plain, self._nbufs = not spec.align and not spec.vars, max((g.arg for g in spec.bufs), default=-1) + 1
    self._gs, self._ls = spec.global_size, spec.local_size
    # a program that can run a plain launch on the calling thread at once (drivers/cpu.py CPUProgram.run_direct:
    # True where it did), tried before the general call
    self._direct = getattr(self.prg, "run_direct", None) if self._gs[0] > 0 and tuple(self._gs[1:]) == (1, 1) else None

  def __call__(self, bufs: Sequence[Buffer], vals: dict[str, int] | None = None, wait: bool = False) -> float | None:
    """bufs indexed by the kernel's buffer numbers (DEFINE_GLOBAL args)."""
    if self._plain and not wait and len(bufs) >= self._nbufs:
      # the common launch: each argument checked in one expression, the program called directly (the general path
      # below names what is wrong)
      raw = []
      dev = self.device
      for arg, dt, need, _ in self._args:
        b = bufs[arg]
        if b.device != dev or (b.dtype is not dt and b.dtype.scalar != dt) or b.size < need: break
        if b._buf is None: b.allocate()
        raw.append(b._buf)
      else:
        if DEBUG() < 1:
          if self._direct is not None and self._direct(raw, self._gs[0]): return None
          return self.prg(*raw, global_size=self._gs, local_size=self._ls)
    raw = []
    for arg, dt, need, want in self._args:
      if arg >= len(bufs): raise ValueError(f"kernel {self.spec.name} uses buffer {arg} but only {len(bufs)} were given")
      b = bufs[arg]
      if b.device != self.device: raise ValueError(f"kernel {self.spec.name} runs on {self.device} but buffer {arg} is on {b.device}")
      if b.dtype is not dt and b.dtype.scalar != dt:
        raise TypeError(f"kernel {self.spec.name} buffer {arg} wants {want}, got {b.dtype}")
      if b.size < need:
        raise ValueError(f"kernel {self.spec.name} touches buffer {arg} up to element {need - 1}, but it holds {b.size}")
      if b._buf is None: b.allocate()
      raw.append(b._buf)
    if self.spec.align and (any(bufs[i].offset % a for i, a in self.spec.align.items()) or
                            any(bufs[i].nbytes > Device[self.device].renderer.image_max_bytes for i in self.spec.images)):
      # a view at an offset the vector accesses cannot take: the same kernel with scalar accesses
      if self._scalar is None:
        # (type: ignore: get_program's specs hold their AST)
        self._scalar = CompiledRunner(get_program(self.spec.ast, Device[self.device].renderer, self.spec.opts, self.spec.name, vector_mem=False), self.device)  # type: ignore[arg-type]
      return self._scalar(bufs, vals, wait)
    if self.spec.vars:
      vals = vals or {}
      missing = [v.arg[0] for v in self.spec.vars if v.arg[0] not in vals]
      if missing: raise ValueError(f"kernel {self.spec.name} needs values for variables {missing}")
      for v in self.spec.vars:
        if not v.arg[1] <= vals[v.arg[0]] <= v.arg[2]: raise ValueError(f"variable {v.arg[0]}={vals[v.arg[0]]} is outside [{v.arg[1]}, {v.arg[2]}]")
      vt = tuple(vals[v.arg[0]] for v in self.spec.vars)
    else: vt = ()
    debug = DEBUG()
    t = self.prg(*raw, global_size=self.spec.global_size, local_size=self.spec.local_size, vals=vt, wait=wait or debug >= 1)
    if debug >= 1 and t is not None:
      print(f"*** {self.device:8s} {self.spec.name:30s} {t * 1e6:9.2f} us", file=sys.stderr)
    return t

_cache: dict[tuple, CompiledRunner] = {}
# Threads: a compiled kernel is found by one dict.get; building one holds _compile_lock, so two threads asking for the
# same new kernel compile it once (and code generation, with its own caches, runs on one thread at a time). Reentrant:
# a BEAM search compiles candidates through compile_ast.
_compile_lock = threading.RLock()

def cached_runner(ast: UOp, device: str) -> CompiledRunner | None:
  """compile_ast(ast, device) if it is compiled already, else None (a lookup only)."""
  return _cache.get((ast, Device[device], None, None))

def compile_ast(ast: UOp, device: str | None = None, opts: list[Opt] | None = None, name: str | None = None) -> CompiledRunner:
  dname = Device.canonicalize(device or Device.DEFAULT)
  # keyed by the device instance: programs of a closed and reopened device must not be handed out again
  key = (ast, Device[dname], tuple(opts) if opts is not None else None, name)
  if (r := _cache.get(key)) is not None: return r
  with _compile_lock:
    if (r := _cache.get(key)) is not None: return r   # (compiled by another thread while this one waited)
    if opts is None and (width := knobs.get("BEAM")) > 0:
      from baregrad.engine.search import beam_search
      with profile.span("beam", width=width): opts = beam_search(ast, dname, width)
    if (ren := Device[dname].renderer) is None:  # the device loads programs but cannot generate them (drivers/cpu.py)
      raise CompileError("", f"{dname} cannot compile kernels here: {getattr(Device[dname].compiler, 'reason', 'it has no renderer')}")
    st = time.perf_counter()
    with profile.span("codegen", device=dname): spec = get_program(ast, ren, opts, name)
    mid = time.perf_counter()
    with profile.span("compile", kernel=spec.name, device=dname): _cache[key] = r = CompiledRunner(spec, dname)
    if helpers.viz_sink is not None: helpers.viz_sink("binary", name=spec.name, device=dname, lib=r.lib, prg=r.prg)   # VIZ=1
    if DEBUG() >= 2:
      tool = Device[dname].compiler.describe()   # which toolchain built it (the system C compiler differs by machine)
      print(f"kernel {spec.name}: codegen {(mid - st) * 1e3:.1f} ms, compile {(time.perf_counter() - mid) * 1e3:.1f} ms"
            f"{' (cached)' if r.cached else ''}{f' by {tool}' if tool else ''}", file=sys.stderr)
  return r

def run_ast(ast: UOp, bufs: Sequence[Buffer], device: str | None = None, opts: list[Opt] | None = None,
            vals: dict[str, int] | None = None, wait: bool = True) -> float | None:
  """Compile (cached) and run one kernel AST on bufs; returns the kernel time in seconds when wait."""
  return compile_ast(ast, device or (bufs[0].device if bufs else None), opts)(bufs, vals, wait=wait)
