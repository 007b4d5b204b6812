#!/usr/bin/env python3
"""Python cost per kernel: eager (build graph + schedule + launch one elementwise op) and jit replay (one
recorded queue, patched and submitted once), on the default device, each call on a fresh input. Targets (issue 10):
eager <= 20 us per op, replay <= 3 us per kernel.

Results (DEV=CPU, the 2-core AMD EPYC box shared with other jobs, load average 1.5-8 during the runs; before = main at
61104ba and after = branch ovh, run back to back in the same minutes, so compare within a row, not across rows):

  | run                                   | eager us/op   | jit us/kernel  | relu(x*y+z) 16M+3 vs copy bw (wall / kernel) |
  |---------------------------------------|---------------|----------------|----------------------------------------------|
  | bench/jit_overhead.py, load ~2        | 446 -> 168    | 13.9 -> 7.9    |                                              |
  | bench/jit_overhead.py, load ~2        | 573 -> 310    | 11.4 -> 8.5    |                                              |
  | bench/jit_overhead.py, load ~1.5      | 428 -> 236    | 13.8 -> 12.3   |                                              |
  | thread CPU time (min of 5), load ~8   | 346 -> 159    | 8.4 -> 7.9     |                                              |
  | bench/compiler_core.py --only ew, ~1.5|               |                | 0.67x / 0.66x -> 1.29x / 1.40x               |
  | bench/compiler_core.py --only ew, ~7  |               |                | 0.31x / 0.30x -> 0.83x / 0.86x               |
  | bench/train_mlp.py, load ~4           | 577 -> 212 (its own tiny-op line) | eager step 21.6x -> 9.6x PyTorch, jit step 3.37x -> 2.82x |

Host-sized register tiles, the native thread pool and leaner graph building (main at 0938d7d -> this branch, DEV=CPU,
same box, load average ~1-1.5 but a noisy VM: the same command varies up to 2x between minutes; before and after
alternated in the same minutes; bench/compiler_core.py and bench/train_mlp.py ratios are against NumPy and PyTorch
measured in the same run):

  | run                                  | before                        | after                          |
  |--------------------------------------|-------------------------------|--------------------------------|
  | train_mlp.py: jit step vs PyTorch    | 2.45x, 3.16x (6.56, 7.84 ms)  | 1.24x, 1.14x (3.15, 3.24 ms)   |
  | train_mlp.py: eager step vs PyTorch  | 12.1x, 14.0x (32.5, 34.9 ms)  | 7.81x, 7.20x (19.9, 20.4 ms)   |
  | jit_overhead.py: eager us/op         | 167, 171                      | 129, 118                       |
  | jit_overhead.py: jit us/kernel       | 6.24, 5.38                    | 3.82, 5.75 (3.44 best seen)    |
  | compiler_core.py: matmul 1024^3      | 0.42x (61 GFLOPS in kernels)  | 0.58x (94)                     |
  | compiler_core.py: matmul 1000^3      | 0.67x (63)                    | 1.06x (104)                    |
  | compiler_core.py: matmul 511^3       | 0.33x (32)                    | 0.46x (99 in kernels, 0.64x)   |
  | compiler_core.py: matmul 257^3       | 0.15x (19)                    | 0.29x (64 in kernels, 0.59x)   |
  | compiler_core.py: matmul 64x4096x64  | 0.24x (29)                    | 0.54x (54)                     |
  | compiler_core.py: bmm 16x128^3       | 0.44x (26)                    | 0.57x (69)                     |
  | compiler_core.py: conv1 (wall/kern)  | 0.17x / 0.60x                 | 0.24x / 0.94x                  |
  | compiler_core.py: conv2 (wall/kern)  | 0.11x / 0.35x                 | 0.13x / 0.55x                  |

- register tiles from the host's register file (Renderer.simd_lanes / vector_registers from the CPU's features): the
  8x32 outer-product tile and the 4x4x16 dot-form tile were sized for AVX-512's 32 registers and spilled on this AVX2
  box (16); now 6x16 and 4x2x8; a short output axis of a dot form is taken whole (h @ W2.T with 10 classes: 10x faster);
- kernels of under 32K iterations stay on one core; parallel kernels go to a native pool (drivers/cpu_pool.py: ~2 us a
  handoff instead of 100-200 us of Python thread wake-ups); a replay's kernels of known cost run on the worker as one
  trampoline call with the big ones split over that pool;
- the scheduler realizes an expensive value (exp, division) broadcast into a reduction instead of recomputing it per
  output (softmax's gradient inside the next matmul); an awkward axis takes a divisor of at least half the lanes
  instead of padding every tile (a conv's 26-wide rows);
- fewer Python calls per node built (12.5 instead of 23.5: interned dtypes, identity hashing of hash-consed UOps, a
  plain dict of weak references, shapes in a slot, movement shapes read off their args), an optimizer step's values
  substituted in one shared walk, host copies as a memmove while the device is idle (a 400 KB batch in: 370 -> ~100
  us; loss.item(): 200-300 -> 30-50 us), a linear layer's weight gradient stored by its reduction (two cancelling
  permutes no longer force a copy kernel). The jit MLP step was seen at 0.92x PyTorch in one run (1.76 ms).
Kernels on the submitting thread, the optimizer's update built once, multi-output kernels (main at 3c2ff4b -> this
round, DEV=CPU, same box; before and after alternated in the same minutes; bench/train_mlp.py now interleaves eager,
jit and PyTorch in 5 rounds of 10 steps and reports the median per-round ratio, every round's in brackets):

  | run                                  | before                                  | after                                    |
  |--------------------------------------|-----------------------------------------|------------------------------------------|
  | train_mlp.py: eager vs PyTorch       | 7.66x (4.81-9.04), 4.71x (3.61-7.20)    | 4.38x (3.12-4.88), 4.19x (3.45-5.13)     |
  | train_mlp.py: jit vs PyTorch         | 1.37x (1.10-1.50), 0.98x (0.83-1.61)    | 0.87x (0.56-0.91), 0.87x (0.67-0.99)     |
  | jit_overhead.py: eager us/op         | 138, 141                                | 140, 125                                 |
  | jit_overhead.py: jit us/kernel       | 3.62, 3.93 (21 kernels)                 | 3.78, 3.61 (20 kernels)                  |
  | compiler_core.py: conv1 wall/kern    | 0.16x/0.87x, 0.17x/0.66x                | 0.49x/1.69x, 0.32x/1.52x                 |
  | compiler_core.py: conv2 wall/kern    | 0.15x/0.33x, 0.14x/0.44x                | 0.24x/0.79x, 0.24x/0.69x                 |
  | compiler_core.py: matmul 512^3 wall  | 0.29x, 0.38x                            | 0.39x, 0.59x                             |
  | compiler_core.py: matmul 1x4096x4096 | 0.48x, 0.32x                            | 0.61x, 0.62x                             |
  | compiler_core.py: matmul 128^3 wall  | 0.05x, 0.05x                            | 0.10x, 0.07x                             |
  | compiler_core.py: 1024^3, 1000^3     | 0.62x/0.67x, 0.63x/0.74x                | 0.59x/0.63x, 0.64x/0.64x (unchanged)     |

- the eager MLP step's kernels took 4-5 ms instead of ~1.7: the worker thread ran them split over the native pool
  while the host thread went on building the next graph, three busy threads on two cores, and a pool thread preempted
  holding a chunk stalled each kernel for a scheduler time slice (a 0.6 ms matmul measured 2.5-9 ms). An idle queue
  now runs a kernel of known cost (up to 20 ms) on the submitting thread, split over the pool with it, and a jit
  replay's chain there too; the pool's caller sleeps on a futex for the last chunk instead of spinning;
- optimizers build their update graph with tensor ops once per structure and substitute each step's parameters,
  gradients and state into it (4.3 ms of Python per Adam step -> ~0.5);
- an elementwise kernel whose output the next kernel reads element for element is merged into it: Adam's m, v and
  parameter updates are one kernel per parameter (three reads of the gradient and moments fewer);
- an awkward-width conv row over a long reduction takes 8 output channels per tile (conv2 1.4x);
- fewer Python calls per node and op: UOps filled in a mutable layout before becoming immutable, reshape/expand record
  the shape they checked, op results made without Tensor.__init__'s checks, the schedule key in one walk.
Not reached: eager <= 20 us per op (~120-140 us: about 320 Python calls per op remain, spread over graph building,
scheduling and launching), jit <= 3 us per kernel (3.6-3.8: ~75 us of Python per replay call), MLP eager <= 3x
(~4.2-4.4x), every matmul shape >= 0.5x wall (128^3 0.07-0.10x and 257^3 ~0.3x are the ~0.3 ms of Python around one
matmul; 64x4096x64 ~0.3x), conv2d >= 0.5x wall (~0.25-0.5x: building and scheduling a conv is ~0.5 ms of Python).
The jit MLP step is now at or under PyTorch's time in every round measured (0.56-0.99x).

Graph recipes (main at 71e9c85 -> this round, DEV=CPU, same box; before and after alternated in the same minutes, the
before side run with this round's scripts; this script now reports the best of 9 alternating rounds of 200 calls and
the calling thread's CPU time beside wall, which on an idle round are equal):

  | run                                       | before                      | after                        |
  |-------------------------------------------|-----------------------------|------------------------------|
  | jit_overhead.py: jit us/kernel (20)       | 4.46, 3.58, 3.61 (72-89/call)| 2.86, 2.97, 2.98 (57-60/call)|
  | jit_overhead.py: eager us/op              | 131, 114, 125               | 107, 107, 114                |
  | train_mlp.py (15 rounds): eager vs PyTorch| 5.03x, 3.82x                | 2.62x, 2.83x                 |
  | train_mlp.py (15 rounds): jit vs PyTorch  | 0.89x, 0.82x                | 0.75x, 0.75x                 |
  | eager MLP step, main thread CPU (fwd/bwd/step) | ~2.9 / 1.8 / 7.4 ms   | ~0.8 / 0.75 / 6.0 ms         |
  | conv2d build (conv1, conv2), thread CPU   | 354, 410 us                 | 79, 108 us                   |
  | a @ b build (128x128 floats)              | 125 us                      | 45 us                        |

- tensor/recipe.py: a function whose graph depends only on its inputs' shapes, dtypes and flags and its arguments is
  run once over placeholders and its nodes recorded; later calls rebuild them node by node (hash-consing: the very
  nodes the function builds). Used by conv, cross_entropy, pooling, norms and losses (function_recipe), activations
  and softmaxes (method_recipe), the optimizer's
  update together with the ASSIGNs write() makes of it (inplace.assign_nodes), and loss.backward(), whose gradient
  graph is kept per loss-graph structure (the schedule cache's key). Small subgraphs that read no input are kept.
- a float matmul builds its UOps directly; shapes are set as nodes are built (autograd, substitutions that keep
  shapes), so nothing is inferred again; shape inference, the schedule key's walk and substitute are tighter loops;
- jit replay: no imports or Tensor.__init__ per call, a whole-buffer input taken without substitution; the CPU queue
  copies a submission by slice assignment (no GIL release) and patches two-word fields without a loop.
Not reached: eager <= 20 us per op (~107-114: graph building ~25, schedule key and instantiation ~25, launch ~20 (of
which the queue ~9), the rest bookkeeping), conv2d >= 0.5x wall (build is now ~80-110 us; the VM's kernel times for
these small convolutions swing 4x between runs: conv1 0.12-0.77 ms), matmul 128^3 >= 0.5x wall (~0.35-0.44 ms against
NumPy's ~0.05-0.08: ~0.25 ms of host work per eager matmul remains).

What made the difference (profiled with cProfile and pyinstrument on `(x + 1).realize()` and a 20-kernel replay):
- the schedule cache's key is a tuple of plain tuples: building placeholder UOps (hash-consed: a weak-dictionary
  lookup and insert per node) cost more than the rest of scheduling a cached op;
- DType caches its hash and compares by identity first, Ops hash by identity in C (Enum hashes its name in Python on
  every UOp built and every `op in GroupOp...`), dtype membership tests use sets, device names are canonicalized once;
- a Python scalar operand is broadcast to the RESHAPE+EXPAND nodes directly (the same graph, no tensors and view
  arithmetic per step); shape_of reads its weak dictionary directly;
- launching: no progress bar or memory plan for a single cached kernel, per-argument checks from precomputed tuples,
  the CPU launch patches words encoded once instead of building a queue per launch, tiny inline kernels run without
  the pool's bookkeeping, a replay runs its chain of exec/barrier commands in one loop, signal writes notify only
  when a thread sleeps on them, and HCQGraph.replay compares only the arguments patched since a recording's last use;
- relu(x*y+z): every iteration of the padded loop used masked loads and stores (AVX2 vmaskmov; a masked store is
  microcoded on Zen); a lane-masked access now takes the plain load/store when all lanes are valid.

Native chain trampoline (branch jitc against main at cde1c18, DEV=CPU, same box, load average 3.4-5.8; before and
after alternated in the same minutes; best of 3 rounds of 300 calls each, wall (process CPU time); "graph alone" is
HCQGraph.replay of the recorded 21 kernels with the input patched, the driver's share of a replay):

  | run                            | eager us/op               | jit us/kernel                | graph alone us/kernel      |
  |--------------------------------|---------------------------|------------------------------|----------------------------|
  | bench/jit_overhead.py, load ~4 | 225 (225) -> 153 (153)    | 11.32 (9.05) -> 4.60 (4.60)  | 5.25 (3.50) -> 1.95 (1.32) |
  | bench/jit_overhead.py, load ~5 | 220 (150) -> 278 (178)    | 14.89 (9.75) -> 6.44 (5.52)  | 4.87 (3.29) -> 2.80 (2.16) |
  | bench/jit_overhead.py, load ~5 | 273 (182) -> 252 (176)    | 10.64 (7.24) -> 4.57 (4.56)  | 4.48 (3.01) -> 2.21 (1.87) |
  | bench/jit_overhead.py, load ~4 | 297 (267) -> 299 (291)    | 9.42 (9.41) -> 7.61 (7.50)   |                            |
  | bench/jit_overhead.py, load ~4 | 205 (195) -> 251 (237)    | 8.49 (8.48) -> 6.60 (6.55)   |                            |
  | bench/jit_overhead.py, load ~4 | 157 (147) -> 368 (240)    | 9.15 (9.14) -> 6.69 (4.82)   |                            |
  | bench/jit_overhead.py, load ~5 | 313 (200) -> 240 (189)    | 10.11 (6.85) -> 7.92 (5.04)  |                            |
  | bench/jit_overhead.py, load ~5 | 370 (251) -> 341 (215)    | 9.54 (8.08) -> 7.87 (5.00)   |                            |
  | bench/jit_overhead.py, load ~6 | 324 (212) -> 262 (161)    | 8.17 (6.93) -> 12.47 (7.29)  |                            |

(newest runs first; eager is not changed by this work, its spread is the machine's. Rows 4-6 predate the guard that
keeps single launches off the chain path.)
- drivers/cpu_chain.py: a trampoline in LLVM IR, compiled once per process with the CPU device's compiler and mapped
  with the ELF loader, reads the replay's EXEC/BARRIER commands from the ring and calls each kernel as the queue does:
  a chain of tiny kernels of known cost is one ctypes call (PROFILE=1, single launches and kernels of unknown or large
  cost keep the per-kernel path);
- the queue reads a submission's words through a memoryview instead of copying them, and keeps a replay's chain
  verdict (which kernels may run natively) per recording, checked against the words byte for byte.
Still short of the goal: the driver part of a 21-kernel replay is now about 2 us per kernel on this box (graph alone);
the rest is the jit front end per call (tensor/jit.py _replay: input signature, fresh output buffers, state versions,
HCQGraph.replay's patching), spread over the kernels. An eager op still builds ~6 UOps and 2 tensors.

Direct launches (main at 9363596 -> this round, DEV=CPU, same VM; before and after alternated, each side's own copy of
this script, which did not change):

  | run                                        | before                | after                 |
  |--------------------------------------------|-----------------------|-----------------------|
  | jit_overhead.py: eager us/op               | 105, 104, 128         | 92, 89, 89            |
  | jit_overhead.py: eager us/op, 30 min later | 135, 104, 157         | 84, 105, 82           |
  | jit_overhead.py: jit us/kernel             | 3.68, 3.23, 3.13      | 2.94, 2.95, 3.31      |
  | train_mlp.py: eager vs PyTorch (15 rounds) | 2.71x, 2.60x          | 2.27x, 2.25x          |
  | an eager op's launch (phase, min of 25)    | 39.8 us               | 20.9 us               |

- drivers/cpu.py: a launch of known cost on an idle queue whose timeline wait is already met runs at once on the
  calling thread (whole, or over the native pool) and writes the timeline signal, instead of patching its words,
  copying them into the ring and interpreting them back: the same wait, run and signal (CPUProgram.direct);
- engine/lazy.py: a cached schedule of one kernel computing the one result (most eager ops) is launched without
  ScheduleItems and run_schedule's loop (~6 us: 89-90 -> 82-84 us min in an in-process A/B).
- drivers/cpu.py: an idle queue runs any submission (a jit replay's recorded chain) where its words are, instead of
  copying them into the ring first; what would block goes to the worker as before. Against the commit before it
  (4a801fe), alternated three times: jit 2.99, 3.05, 2.99 -> 2.85, 2.78, 2.68 us per kernel (60-61 -> 54-57 us per
  20-kernel call); the queue's submit path for a replay, min of 20 rounds: 26.2 -> 20.2 us.

Reference cycles and per-op imports (main at b2895d8 -> this round, DEV=CPU, same VM; before and after alternated,
each side's own copy of this script, which did not change; "paired" is a separate process per run, 10 pairs, each
timing 1000 fresh `(x + 1).realize()`, 150 fresh 128^3 matmuls and 500 fresh `(x.sum(1) * 2)` of 64x64, best of 5
rounds each, the median of the per-pair ratios):

  | run                                        | before                | after                 |
  |--------------------------------------------|-----------------------|-----------------------|
  | jit_overhead.py: eager us/op               | 84.3, 86.3, 83.6      | 70.3, 72.2, 87.2      |
  | jit_overhead.py: jit us/kernel             | 2.97, 3.59, 2.62      | 2.54, 2.68, 2.64      |
  | paired: x + 1, median us (ratio)           | 91.1                  | 74.0 (0.83)           |
  | paired: 128^3 matmul, median us (ratio)    | 170.7                 | 163.1 (0.94)          |
  | paired: (x.sum(1) * 2) 64x64 (ratio)       | 151.6                 | 119.6 (0.86)          |
  | train_mlp.py: eager vs PyTorch (15 rounds) | 2.49x, 2.31x          | 2.33x, 2.57x          |

- a launch wrote its arguments through `ctypes.c_uint64 * n`: ctypes keeps array types only weakly, so after each
  collection the next launch made the class again (~13 us) and left it as cyclic garbage (helpers.c_array keeps them);
- the scheduler's reshape-to-reduce walk was a recursive closure (a reference cycle holding every graph it walked, and
  the buffers they read, until the next collection); Tensor.realize imported inplace.bind on every call (~4 us);
  float32 roundings of Python constants are remembered; the scalar operand of `x + 1` is not filed among live tensors
  (it reads no buffer); an idle profiler span is not entered per schedule.
Eager is still ~4x the 20 us goal: what remains is spread over ~250 Python calls per op (building 4-5 hash-consed
nodes, the schedule key's walk, the launch, the result's buffer and bookkeeping), none above ~10% of it.

Random draws, ranges and a reduction that loads nothing (main at 5576cb2 -> this round, DEV=CPU, same VM; both sides
ran this script, alternated twice; PyTorch's same calls timed in the same rounds):

  | run (us per call)                          | before                | after                 |
  |--------------------------------------------|-----------------------|-----------------------|
  | Tensor.rand(1024)                          | 4927, 3410            | 503, 580              |
  | Tensor.uniform(1024)                       | 4895, 4069            | 524, 527              |
  | Tensor.randn(1024)                         | 10182, 7790           | 1302, 1481            |
  |   ... against torch's same call            | 495-1430x its time    | 63-212x its time      |
  | Tensor.arange(1024)                        | 467, 390              | 60, 61                |
  | (arange(16M) * 1e-6).sum() (PyTorch ~70 ms)| 9190, 7541            | 733, 835              |
  | eager us/op (the VM's spread: no claim)   | 93.6, 101.1           | 77.6, 79.5            |
  | jit us/kernel (the VM's spread: no claim) | 3.46, 2.82            | 2.72, 2.72            |

- Threefry was ~130 tensor ops per draw (a graph of ~200 nodes built, keyed and lowered on every Tensor.rand, ~5 ms of
  Python); it is one THREEFRY node now, expanded into the same integer ops where the scheduler builds the kernel (the
  kernel and the stream per seed are the ones before);
- arange was a window sum of ones (n^2 adds up to n = 1024, a*i + j from two such ranges above): it is one IOTA leaf,
  the index a load through its view would read, computed in the kernel that reads it;
- uniform's scaling and randn's Box-Muller are computed in the draw's own kernel (one kernel and realize fewer, the
  same values); a reduction that loads nothing takes lanes along its axis and its partials over the threads
  (codegen/cpu_heuristic.py), as a row sum does.
A draw is still ~8 eager ops of Python (the counter, the key read from the RNG state, the state's in-place update).

Recipes for the draws, the scalar operand's node cached (main at edc4cf8 -> this round, DEV=CPU, a 2-core Zen 4 VM, a
different machine from the rounds above; this script on both sides, alternated):

  | run (us per call)                          | before                | after                 |
  |--------------------------------------------|-----------------------|-----------------------|
  | Tensor.rand(1024)                          | 283                   | 154                   |
  | Tensor.uniform(1024)                       | 300                   | 153                   |
  | Tensor.randn(1024)                         | 689                   | 336                   |
  | eager us/op                                | 34.6, 34.9            | 30.5, 30.0            |

- a draw's graph (the counter, Threefry's inputs, the finishing ops) and the state's step are built from recipes
  (tensor/recipe.py) keyed by the kind of draw and its size, after the first draw of a kind: the same nodes, ~30 tensor
  ops fewer per draw; the streams per seed are unchanged (tests/unit/test_recipe.py);
- a Python scalar operand (x + 1) takes its broadcast constant's nodes from a cache per (dtype, shape, value): the graph
  of x + 1 builds in ~6 us instead of ~11 (float zeros and NaN are built each time: -0.0 would find 0.0's node).

Less Python per eager op (main at 904e523 -> this round, DEV=CPU, the same 2-core Zen 4 VM; each side ran its own copy
of this script and bench/train_mlp.py, alternated twice):

  | run                                   | before                  | after                   |
  |---------------------------------------|-------------------------|-------------------------|
  | eager us/op                           | 29.4, 29.0              | 18.2, 18.4              |
  | jit us/kernel                         | 1.19, 1.18              | 1.06, 1.07              |
  | Tensor.rand(1024) / randn(1024) us    | 153 / 341, 151 / 328    | 126 / 268, 124 / 271    |
  | Tensor.arange(1024) us                | 27.0, 27.0              | 19.8, 19.7              |
  | train_mlp.py: eager step vs PyTorch   | 1.71x, 1.72x            | 1.50x, 1.49x            |
  | train_mlp.py: its tiny-op line        | 32 us                   | 19 us                   |

- ir/ops.py: Ops is a plain class of Op singletons, not an Enum. Python 3.11's EnumType defines __getattr__, so every
  `Ops.X` read went through a Python-level attribute hook: 76 ns against 19 for a class attribute, and an eager op
  (and the compiler, everywhere) reads dozens. (.ci/run on a clean clone: 8 min 0 s at 904e523, 6 min 55 s after;
  one run each.)
- engine/lazy.py: one walk makes the schedule key and finds nodes computed already (the substitution walk ran first on
  every realize); a computed node keeps its buffer view in a slot (`_realized`) instead of a WeakKeyDictionary (a
  Python-level get, set and removal callback per op); the schedule cache evicts by the clock algorithm (a hit sets a
  flag; move_to_end hashed the whole nested key again); a single kernel's result gets its BUFFER (and RESHAPE) node
  without a hash-consing lookup that cannot hit.
- drivers/cpu.py, engine/runner.py: CompiledRunner tries CPUProgram.run_direct first (no *args/**kwargs launch call,
  the arguments in the program's own block instead of the kernel-args ring).
- tensor/: a Python scalar's promotion looked up per (dtype, type), x + y and x @ w build their nodes without UOp()'s
  argument checks and with their shapes set, realize() of one tensor without tuples and zips; Device[name] answers an
  open device by its canonical name first.
- The review of this round put back shared calls where the first version had inlined copies of them (run_known's cost
  learning, whole_buffer and track, BufRef's constructor): eager 19.1-19.7 us per op after it, in five runs.
"""
import os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from baregrad import Tensor, jit, Device, dtypes

def _timed(run, xs: list) -> tuple[float, float]:
  """(wall, this thread's CPU) seconds of run(x) over xs, the device drained after. The thread's CPU time leaves out
  what a loaded or oversubscribed VM takes from it (steal, other jobs); tiny kernels run on this thread (drivers/cpu.py
  runs an idle queue's known-cheap work inline), so it still counts them."""
  Device[Device.DEFAULT].synchronize()
  w, c = time.perf_counter(), time.thread_time()
  for x in xs: run(x)
  Device[Device.DEFAULT].synchronize()
  return time.perf_counter() - w, time.thread_time() - c

def main(n_kernels: int = 20, reps: int = 200, rounds: int = 9) -> None:
  """Each workload is timed `rounds` times on fresh inputs, rounds of eager and jit alternating; the best round is
  reported, as wall time and as the calling thread's CPU time."""
  dev = Device.DEFAULT
  # every call reads a fresh input, made before the clock starts: nothing realized before can be reused
  fresh = lambda: [Tensor.rand(16).realize() for _ in range(reps)]
  @jit
  def f(t):
    # each kernel reads the one before reversed: not element for element, so no two merge (engine/merge.py)
    for _ in range(n_kernels): t = (t.flip(0) + 1).contiguous()
    return t
  xs = fresh()
  for x in xs[:5]: (x + 1).realize()
  for x in xs[5:8]: f(x)
  cap = next(iter(f.captured.values()))
  k = len(cap.launches)
  eager, replay, graph = [], [], []
  for _ in range(rounds):
    eager.append(_timed(lambda x: (x + 1).realize(), fresh()))
    replay.append(_timed(f, fresh()))
    # the recorded graph alone (HCQ devices): the driver's share of a replay, the input patched to a fresh buffer
    if cap.graph is not None:
      graph.append(_timed(lambda x: cap.graph.replay([(kk, j, x._realized()._buf.va_addr) for kk, j in cap.input_slots[0]]), fresh()))
  # a random draw and a range: graphs that read no input (each draw advances the RNG state, so no two are alike), with
  # PyTorch's same calls timed in the same rounds where it is installed
  try: import torch
  except ImportError: torch = None
  nd = reps // 4
  big = 1 << 24
  no_input = [("Tensor.rand(1024)", lambda: Tensor.rand(1024).realize(), lambda: torch.rand(1024), nd),
              ("Tensor.uniform(1024)", lambda: Tensor.uniform(1024, low=-1.0, high=1.0).realize(), lambda: torch.empty(1024).uniform_(-1.0, 1.0), nd),
              ("Tensor.randn(1024)", lambda: Tensor.randn(1024).realize(), lambda: torch.randn(1024), nd),
              ("Tensor.arange(1024)", lambda: Tensor.arange(1024).realize(), lambda: torch.arange(1024), nd),
              # a reduction that loads nothing (codegen/cpu_heuristic.py): waited for, it is the kernel that counts
              ("(arange(16M) * 1e-6).sum()", lambda: (Tensor.arange(big, dtype=dtypes.float32) * 1e-6).sum().item(),
               lambda: (torch.arange(big, dtype=torch.float32) * 1e-6).sum().item(), 4)]
  times: dict[str, tuple[list, list]] = {name: ([], []) for name, *_ in no_input}
  for _ in range(rounds):
    for name, ours, ref, m in no_input:
      times[name][0].append(_timed(lambda _: ours(), [None] * m)[0] / m)
      if torch is not None: times[name][1].append(_timed(lambda _: ref(), [None] * m)[0] / m)
  best = lambda ts: (min(t[0] for t in ts) / reps, min(t[1] for t in ts) / reps)
  (ew, ec), (jw, jc) = best(eager), best(replay)
  print(f"device {dev}, best of {rounds} rounds of {reps} calls; wall (thread CPU)")
  print(f"eager: {ew * 1e6:8.1f} us per op ({ec * 1e6:.1f}) (graph, schedule, launch, one tiny kernel)")
  print(f"jit replay: {jw * 1e6:8.1f} us per call of {k} kernels ({jc * 1e6:.1f}) = {jw / k * 1e6:6.2f} us per kernel "
        f"({jc / k * 1e6:.2f}) (target <= 3)")
  if graph:
    gw, gc = best(graph)
    print(f"graph replay alone (HCQGraph.replay): {gw * 1e6:8.1f} us per call ({gc * 1e6:.1f}) = {gw / k * 1e6:6.2f} us per kernel ({gc / k * 1e6:.2f})")
  print(f"ratio eager/jit per kernel: {ew / (jw / k):.1f}x")
  for name, (ours, ref) in times.items():
    ow = min(ours)
    rs = f", PyTorch {min(ref) * 1e6:.1f} us ({ow / min(ref):.3g}x its time)" if ref else ""
    print(f"{name + ':':28s} {ow * 1e6:8.1f} us per call{rs}")

if __name__ == "__main__":
  main()
