"""A PTX interpreter: the compute engine of the mock NVIDIA GPU.

The mock GPU knows only what a GPU would know: the PTX text the driver uploaded, the kernel
parameter buffer, the launch geometry and its own memory (`Memory`).

    mod = PTXModule(ptx_text)               # parse + compile every .entry (errors name line and text)
    k = mod.kernel("name"); k.params        # [(param name, type)], in order
    k.launch(memory, [ptr, n, 2.5] or param_bytes, grid, block, shared_bytes=0)

Execution model
---------------
SIMT over a block: every register is a NumPy array with one element per thread (dtype = the
register's declared type; an instruction re-interprets the bits by its own type, as the
hardware does), predicates are bool arrays, and each instruction runs once for all the
threads it is active for (an active mask, narrowed by an `@%p` / `@!%p` guard; masked-off
threads neither write registers nor touch memory, so they cannot fault).  Several blocks
(CTAs) of the grid are run together as one longer vector (`PTXKernel.max_batch_lanes`
threads, 8192 by default): shared memory has one row per block, barriers and warps are per
block, %ctaid is per thread, and a batch of 1 block gives the same results.

Control flow (divergence and reconvergence): per-thread program counters with
*minimum-PC-first* scheduling.  Each step takes the smallest PC among the runnable threads
and executes that one instruction for exactly the threads sitting at it.  Compilers lay
code out so that the immediate post-dominator of a forward branch (the join of an if/else)
lies after both arms, and a loop's exit block lies after the loop, so the threads that went
ahead wait at the join while the late ones catch up, and the block reconverges there; a
backward branch sends the threads that keep looping to a smaller PC, so they run first
while threads that left the loop wait after it (per-thread loop exit).  Every thread still
executes exactly its own path (only the interleaving is chosen), so the scheme is correct
for any control flow, needs no CFG analysis, and costs a couple of NumPy reductions per
step; while all runnable threads share one PC (the usual case) a fast path skips them.
Minimum-PC-first alone would starve a thread that is ahead while others spin in a loop
waiting for it (an intra-warp spin lock, legal on sm_70+); after `livelock_steps` divergent
steps without reconvergence every other step goes to the *maximum* PC instead, for the rest
of the batch, so such code makes progress.

Barriers (`bar.sync` / `barrier.sync` / `bar.cta.sync`): a thread that reaches one waits;
when no runnable thread is left, the barrier opens.  Threads that exited count as arrived
(sm_70+ behaviour; `PTXKernel.strict_barriers = True` makes that an error).  Threads of one
block waiting at *different* barrier instructions, or a `@%p bar.sync` whose guard differs
inside a block, raise PTXError ("divergent barrier").  Warp-level instructions (shfl.sync,
vote.sync, activemask) need every thread of the warp active at that instruction.

Memory: `Memory` is a flat GPU virtual address space of mapped regions backed by NumPy byte
arrays; an access not entirely inside one mapped region, or misaligned, raises `GPUFault`
naming the address, the instruction and line, and the first faulting thread and block.
Generic addresses: global addresses are themselves; shared memory is the window
`SHARED_WINDOW + offset`, local memory `LOCAL_WINDOW + offset` (per thread); `cvta` converts.
A launch may place the windows elsewhere (`windows=Windows(...)`): the mock GPU passes the apertures the driver set
with SET_SHADER_*_MEMORY_WINDOW (which generic addresses reach shared/local memory) and, separately, the bases that
compiled code converts with (cvta), which SASS reads from constant bank 0 or SR_SWINHI: when the two disagree, a
converted pointer misses the aperture, as on the GPU. `specials=` overrides %ntid, %nctaid, %dynamic_smem_size and
%total_smem_size with the values the SASS would read from constant bank 0 rather than the launch geometry.
`launch_steps(...)` is launch() as a generator that yields before every instruction issue, so a caller can interleave
several grids instruction by instruction (the mock GPU's model of launches running concurrently).
.global/.const module variables (with initializers) are placed in `Memory` on first launch
(`PTXModule.load_globals(memory)` gives their addresses); `ld.const` reads them there.
`ld.param` reads the kernel's parameter buffer (natural alignment, as CUDA lays it out).

Numerics: f32 ops compute in float32, f64 in float64, f16 (and f16x2 halves) in float16
(NumPy rounds each f16 op through float32: correctly rounded for + - * / sqrt); bf16 via
float32 with round-to-nearest-even.  fma.f32 is computed exactly in float64 then rounded
(a double rounding: rarely 1 ulp off); fma.f64 is a*b+c in float64 (not fused).  .approx
functions (ex2 lg2 sin cos rsqrt rcp sqrt tanh) return the correctly rounded NumPy values.
Directed roundings .rz .rm .rp are honoured for cvt and f32 add/sub/mul/div/fma/rcp; .ftz
flushes f32 subnormals.  cvt float->int rounds (.rni .rzi .rmi .rpi; default .rzi),
saturates to the destination range and gives 0 for NaN; .sat on float results clamps to
[0, 1] with NaN -> 0.  Integer division truncates; x/0 gives all ones (unsigned) or -1
(signed); shifts clamp amounts >= the width (shr.s fills with the sign).

Device functions (.func, as in nvcc -G builds) are inlined at each `call` site: the callee's
registers, labels and local names get a per-site prefix, its formal .param names are bound
to the call site's .param variables (per-thread storage), `ret` jumps to the return point.

Not supported (PTXError naming the instruction): calls to external functions (vprintf,
malloc, __assertfail), indirect calls and recursion, texture/surface instructions, carry chains (add.cc/addc/mad.cc),
bar.arrive and barriers with a thread count, wmma and the mma/ldmatrix/cp.async forms matrix.py does not list, the wgmma
forms wgmma.py does not list (tf32, fp8, integer), the TMA forms tma.py does not list (im2col, multicast, other ranks,
host-encoded tensor maps), vector registers (.reg .v4), prmt modes other than the
default.

Modules: errors (PTXError, GPUFault), dtypes (PTX types as NumPy dtypes), memory (Memory, Windows, shared/local
stores), parser (text -> instructions, BodyParser), module (PTXModule), kernel (PTXKernel: the mixins below joined, the
opcode dispatch), operands, control (branches, barriers, warp-wide instructions), alu (arithmetic, logic, bit ops,
compares), convert (cvt, rounding helpers), memops (ld/st/atom/red/cvta), matrix (mma, ldmatrix, stmatrix, cp.async), wgmma
(sm_90a warpgroup mma_async with shared-memory descriptors and swizzles, fence/commit/wait, their checked rules;
setmaxnreg's checks; fence.proxy.async and elect.sync in control), mbarrier (mbarrier objects: phases, arrivals, transaction counts, hangs reported;
cp.async.bulk), tma (device-built tensor maps: tensormap.replace, cp_fenceproxy, fence.proxy.tensormap;
cp.async.bulk.tensor.2d), launch (parameters, geometry, the scheduler).
"""
from baregrad.drivers.mock.ptx.errors import PTXError, GPUFault
from baregrad.drivers.mock.ptx.kernel import PTXKernel
from baregrad.drivers.mock.ptx.memory import Memory, Windows, SHARED_WINDOW, LOCAL_WINDOW
from baregrad.drivers.mock.ptx.module import PTXModule

__all__ = ["PTXError", "GPUFault", "PTXModule", "PTXKernel", "Memory", "Windows", "SHARED_WINDOW", "LOCAL_WINDOW"]
