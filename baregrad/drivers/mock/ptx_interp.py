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
malloc, __assertfail), indirect calls and recursion, texture/surface instructions, carry chains (add.cc/addc/mad.cc), bar.arrive
and barriers with a thread count, wmma and the mma/ldmatrix/cp.async forms ptx_matrix.py does not list, TMA and
wgmma (sm_90 asynchronous matrix instructions), vector registers (.reg .v4), prmt modes other than the default.
"""
from __future__ import annotations

import re
import struct
import numpy as np
from baregrad.drivers.mock.ptx_matrix import MatrixOps

__all__ = ["PTXError", "GPUFault", "PTXModule", "PTXKernel", "Memory", "Windows", "SHARED_WINDOW", "LOCAL_WINDOW"]

SHARED_WINDOW = 0x0000_7F00_0000_0000
LOCAL_WINDOW = 0x0000_7E00_0000_0000
WINDOW_SIZE = 1 << 32


class Windows:
    """Where generic addresses reach shared and local memory (the apertures, `size` bytes each) and the bases cvta
    converts with (default: the apertures)."""
    __slots__ = ("shared", "local", "size", "cvta_shared", "cvta_local")

    def __init__(self, shared=SHARED_WINDOW, local=LOCAL_WINDOW, size=WINDOW_SIZE, cvta_shared=None, cvta_local=None):
        self.shared, self.local, self.size = int(shared), int(local), int(size)
        self.cvta_shared = self.shared if cvta_shared is None else int(cvta_shared)
        self.cvta_local = self.local if cvta_local is None else int(cvta_local)

    def route(self, a):
        """(shared mask, local mask) of generic addresses `a` (uint64 array)."""
        sh = (a >= np.uint64(self.shared)) & (a < np.uint64(self.shared + self.size))
        lo = (a >= np.uint64(self.local)) & (a < np.uint64(self.local + self.size))
        return sh, lo


_DEFAULT_WINDOWS = Windows()


class PTXError(Exception):
    """A PTX program the interpreter cannot run: names the line and instruction."""

    def __init__(self, msg, line=None, text=None):
        self.msg, self.line, self.text = msg, line, text
        super().__init__(self._fmt())

    def _fmt(self):
        if self.line is None:
            return self.msg
        return f"line {self.line}: `{self.text}`: {self.msg}"

    def locate(self, line, text):
        if self.line is None:
            self.line, self.text = line, text
            self.args = (self._fmt(),)
        return self


class GPUFault(PTXError):
    """A GPU page fault (access outside every mapped region) or a misaligned access."""

    def __init__(self, msg, address, line=None, text=None):
        self.address = address
        self.thread = self.block = None
        super().__init__(msg, line, text)


# ----------------------------------------------------------------------------- types

_DT = {
    "b8": np.uint8, "u8": np.uint8, "s8": np.int8,
    "b16": np.uint16, "u16": np.uint16, "s16": np.int16, "f16": np.float16, "bf16": np.uint16,
    "b32": np.uint32, "u32": np.uint32, "s32": np.int32, "f32": np.float32,
    "f16x2": np.uint32, "bf16x2": np.uint32,
    "b64": np.uint64, "u64": np.uint64, "s64": np.int64, "f64": np.float64,
    "pred": np.bool_,
}
_DT = {k: np.dtype(v) for k, v in _DT.items()}
_UINT = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}
_SINT = {1: np.dtype(np.int8), 2: np.dtype(np.int16), 4: np.dtype(np.int32), 8: np.dtype(np.int64)}
_TYPES = set(_DT)
_ROUND = {"rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi", "rna", "rs"}
_SPACES = {"global", "shared", "local", "param", "const", "generic"}
_SPECIAL = {"tid", "ntid", "ctaid", "nctaid", "laneid", "warpid", "nwarpid", "smid", "nsmid",
            "gridid", "clock", "clock64", "lanemask_eq", "lanemask_lt", "lanemask_le",
            "lanemask_gt", "lanemask_ge", "warpsize", "WARP_SZ", "globaltimer", "globaltimer_lo",
            "globaltimer_hi", "dynamic_smem_size", "total_smem_size", "is_explicit_cluster",
            "clusterid", "nclusterid", "cluster_ctaid", "cluster_nctaid", "cluster_ctarank",
            "cluster_nctarank", "envreg"}


def _is_float(dt):
    return dt.kind == "f"


def _kind(tname):
    """'f' float, 's' signed, 'u' unsigned/bits, 'p' pred."""
    if tname == "pred":
        return "p"
    if tname in ("f16", "f32", "f64", "bf16", "f16x2", "bf16x2"):
        return "f"
    return tname[0] if tname[0] in "su" else "u"


def _bits(arr, dt, signed=False):
    """Re-interpret / resize the bits of `arr` to dtype `dt` (register <-> instruction type).

    Same size: a bit view.  Narrower destination: truncation.  Wider destination: sign
    extension when `signed`, zero extension otherwise."""
    src = arr.dtype
    if src == dt:
        return arr
    if src == np.bool_:
        return arr.astype(dt)
    if dt == np.bool_:
        return arr.view(_UINT[src.itemsize]) != 0
    if src.itemsize == dt.itemsize:
        return arr.view(dt) if arr.ndim else np.asarray(arr).view(dt)[()]
    a = np.asarray(arr)
    if dt.itemsize < src.itemsize:
        r = a.view(_UINT[src.itemsize]).astype(_UINT[dt.itemsize]).view(dt)
    elif signed:
        r = a.view(_SINT[src.itemsize]).astype(_SINT[dt.itemsize]).view(dt)
    else:
        r = a.view(_UINT[src.itemsize]).astype(_UINT[dt.itemsize]).view(dt)
    return r if arr.ndim else r[()]


def _bf16_to_f32(u16):
    return (np.asarray(u16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def _f32_to_bf16(f, mode="rn"):
    f = np.asarray(f, np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    nan = np.isnan(f)
    if mode == "rz":
        r = u >> 16
    else:
        r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    r = np.where(nan, 0x7FFF, r)
    return r.astype(np.uint16)


def _round_f32(x64, mode):
    """Round float64 values to float32 with a PTX rounding mode."""
    r = x64.astype(np.float32)
    if mode in ("rn", None, "rni"):
        return r
    r64 = r.astype(np.float64)
    fin = np.isfinite(x64)
    if mode == "rz":
        fix = fin & (np.abs(r64) > np.abs(x64))
        return np.where(fix, np.nextafter(r, np.float32(0)), r).astype(np.float32)
    if mode == "rm":
        fix = fin & (r64 > x64)
        return np.where(fix, np.nextafter(r, np.float32(-np.inf)), r).astype(np.float32)
    if mode == "rp":
        fix = fin & (r64 < x64)
        return np.where(fix, np.nextafter(r, np.float32(np.inf)), r).astype(np.float32)
    return r


def _round_int(x, mode):
    if mode in ("rni", "rn"):
        return np.rint(x)
    if mode in ("rzi", "rz"):
        return np.trunc(x)
    if mode in ("rmi", "rm"):
        return np.floor(x)
    if mode in ("rpi", "rp"):
        return np.ceil(x)
    return x


def _ftz(x):
    if x.dtype != np.float32:
        return x
    tiny = np.float32(1.1754944e-38)
    return np.where(np.abs(x) < tiny, np.copysign(np.float32(0), x), x).astype(np.float32)


def _float_to_int(x, dt, mode):
    """cvt float -> int: round (default rzi), saturate to the destination range, NaN -> 0."""
    x = _round_int(np.asarray(x, np.float64) if x.dtype != np.float64 else x, mode or "rzi")
    info = np.iinfo(dt)
    nan = np.isnan(x)
    x = np.where(nan, 0.0, x)
    if dt.itemsize == 8:
        hi = float(info.max)  # 2**63 or 2**64 (not representable max): compare >=
        over = x >= hi
        under = x < float(info.min)
        safe = np.where(over | under, 0.0, x)
        r = safe.astype(dt)
        r = np.where(over, info.max, r)
        r = np.where(under, info.min, r)
        return r.astype(dt)
    return np.clip(x, info.min, info.max).astype(dt)


def _int_wide(a):
    """An integer array widened to int64 (or uint64 for u64) exactly."""
    if a.dtype.itemsize == 8:
        return a
    return a.astype(np.int64)


def _mulhi_u64(a, b):
    a = a.astype(np.uint64)
    b = b.astype(np.uint64)
    m = np.uint64(0xFFFFFFFF)
    s = np.uint64(32)
    al, ah, bl, bh = a & m, a >> s, b & m, b >> s
    t = al * bl
    m1 = ah * bl + (t >> s)
    m2 = al * bh + (m1 & m)
    return ah * bh + (m1 >> s) + (m2 >> s)


def _mulhi(a, b, dt):
    if dt.itemsize == 8:
        if dt.kind == "u":
            return _mulhi_u64(a, b)
        hu = _mulhi_u64(a.view(np.uint64) if a.ndim else np.uint64(a.view(np.uint64)),
                        b.view(np.uint64) if b.ndim else np.uint64(b.view(np.uint64)))
        hu = hu - np.where(a < 0, b.astype(np.int64).view(np.uint64) if b.ndim else np.uint64(np.int64(b).view(np.uint64)), np.uint64(0)) \
            - np.where(b < 0, a.astype(np.int64).view(np.uint64) if a.ndim else np.uint64(np.int64(a).view(np.uint64)), np.uint64(0))
        return hu.astype(np.uint64).view(np.int64)
    w = np.int64 if dt.kind == "i" else np.uint64
    p = np.asarray(a).astype(w) * np.asarray(b).astype(w)
    return (p >> (8 * dt.itemsize)).astype(dt)


def _divmod_trunc(a, b, dt):
    """C-style (truncating) integer division and remainder; x/0 gives all-ones / x."""
    a = np.asarray(a)
    b = np.asarray(b)
    if dt.kind == "u":
        bz = b == 0
        bb = np.where(bz, 1, b).astype(dt)
        q = np.where(bz, np.iinfo(dt).max, a // bb).astype(dt)
        r = np.where(bz, a, a % bb).astype(dt)
        return q, r
    U = _UINT[dt.itemsize]
    ua = np.where(a < 0, -a, a).astype(dt).view(U)
    ub = np.where(b < 0, -b, b).astype(dt).view(U)
    bz = ub == 0
    ubb = np.where(bz, 1, ub).astype(U)
    uq = (ua // ubb).astype(U)
    ur = (ua % ubb).astype(U)
    neg = (a < 0) ^ (b < 0)
    q = np.where(neg, (-(uq.view(dt))), uq.view(dt)).astype(dt)
    r = np.where(a < 0, -(ur.view(dt)), ur.view(dt)).astype(dt)
    q = np.where(bz, np.array(-1, dt), q).astype(dt)
    r = np.where(bz, a, r).astype(dt)
    return q, r


def _clz(a, width):
    u = np.asarray(a).view(_UINT[width // 8]).astype(np.uint64)
    n = np.zeros(u.shape, np.uint32)
    s = width // 2
    while s:
        top = (u >> np.uint64(width - s)) == 0
        hi_mask = np.uint64((1 << width) - 1) if width < 64 else np.uint64(0xFFFFFFFFFFFFFFFF)
        n = n + np.where(top, s, 0).astype(np.uint32)
        u = np.where(top, (u << np.uint64(s)) & hi_mask, u)
        s //= 2
    n = n + np.where((u >> np.uint64(width - 1)) == 0, 1, 0).astype(np.uint32)
    return n


def _brev(a, width):
    u = np.asarray(a).view(_UINT[width // 8]).astype(np.uint64)
    r = np.zeros(u.shape, np.uint64)
    for i in range(width):
        r |= ((u >> np.uint64(i)) & np.uint64(1)) << np.uint64(width - 1 - i)
    return r.astype(_UINT[width // 8])


# ----------------------------------------------------------------------------- memory

class _Region:
    __slots__ = ("va", "size", "data", "name")

    def __init__(self, va, size, data, name):
        self.va, self.size, self.data, self.name = va, size, data, name


class Memory:
    """A flat GPU virtual address space: mapped regions backed by NumPy byte arrays.

    Any access that is not entirely inside one mapped region raises `GPUFault`."""

    def __init__(self):
        self._regions: list[_Region] = []
        self._starts = np.zeros(0, np.uint64)
        self._next = 0x0000_0001_0000_0000
        self.module_globals = {}  # id(PTXModule) -> {name: va}
        self.recorder = None      # a set: device loads/stores add (region va, "r" | "w") to it

    # -- mapping
    def map(self, va: int, size: int, data=None, name: str = "") -> np.ndarray:
        """Map [va, va+size) backed by a new zeroed byte array (or `data`, a uint8 array)."""
        va, size = int(va), int(size)
        if size <= 0:
            raise ValueError("map: size must be positive")
        for w in (SHARED_WINDOW, LOCAL_WINDOW):
            if va < w + WINDOW_SIZE and w < va + size:
                raise ValueError(f"map: [{va:#x}, {va + size:#x}) overlaps a shared/local window")
        for r in self._regions:
            if va < r.va + r.size and r.va < va + size:
                raise ValueError(f"map: [{va:#x}, {va + size:#x}) overlaps mapping at {r.va:#x}")
        if data is None:
            data = np.zeros(size, np.uint8)
        else:
            data = np.asarray(data)
            if data.dtype != np.uint8 or data.ndim != 1 or data.size != size:
                raise ValueError("map: data must be a flat uint8 array of `size` bytes")
        self._regions.append(_Region(va, size, data, name))
        self._regions.sort(key=lambda r: r.va)
        self._starts = np.array([r.va for r in self._regions], np.uint64)
        self._next = max(self._next, (va + size + 0xFFFF) & ~0xFFFF)
        return data

    def unmap(self, va: int) -> None:
        for i, r in enumerate(self._regions):
            if r.va == va:
                del self._regions[i]
                self._starts = np.array([r.va for r in self._regions], np.uint64)
                return
        raise ValueError(f"unmap: nothing mapped at {va:#x}")

    def alloc(self, size: int, align: int = 256, name: str = "") -> int:
        """Map `size` bytes at a fresh address (above everything mapped so far)."""
        va = (self._next + align - 1) // align * align
        self.map(va, max(int(size), 1), name=name)
        return va

    def regions(self):
        return [(r.va, r.size, r.name) for r in self._regions]

    # -- host access
    def _find(self, va, size):
        for r in self._regions:
            if r.va <= va and va + size <= r.va + r.size:
                return r
        raise GPUFault(f"GPU page fault: host access of {size} bytes at {va:#x} is not mapped", va)

    def read_bytes(self, va: int, size: int) -> bytes:
        r = self._find(va, size)
        return r.data[va - r.va: va - r.va + size].tobytes()

    def write_bytes(self, va: int, data) -> None:
        b = np.frombuffer(bytes(data), np.uint8)
        r = self._find(va, b.size)
        r.data[va - r.va: va - r.va + b.size] = b

    def read(self, va: int, dtype, count: int = 1) -> np.ndarray:
        dt = np.dtype(dtype)
        return np.frombuffer(self.read_bytes(va, dt.itemsize * count), dt).copy()

    def write(self, va: int, values, dtype=None) -> None:
        a = np.ascontiguousarray(values if dtype is None else np.asarray(values, dtype))
        self.write_bytes(va, a.tobytes())

    # -- device access (vectorized)
    def _locate(self, addrs, size, what):
        """Region index for each address; raises GPUFault for the first unmapped one."""
        if not self._regions:
            if addrs.size:
                raise GPUFault(f"GPU page fault: {what} of {size} bytes at {int(addrs[0]):#x}: "
                               f"address not mapped", int(addrs[0]))
            return np.zeros(0, np.int64)
        idx = np.searchsorted(self._starts, addrs, side="right").astype(np.int64) - 1
        ok = idx >= 0
        ends = np.array([r.va + r.size for r in self._regions], np.uint64)
        ci = np.clip(idx, 0, None)
        ok &= (addrs + np.uint64(size)) <= ends[ci]
        ok &= addrs >= self._starts[ci]
        if not ok.all():
            bad = int(addrs[np.argmin(ok)])
            raise GPUFault(f"GPU page fault: {what} of {size} bytes at {bad:#x}: address not mapped", bad)
        return idx

    def _check_align(self, addrs, size, what):
        if size > 1:
            mis = (addrs % np.uint64(size)) != 0
            if mis.any():
                bad = int(addrs[np.argmax(mis)])
                raise GPUFault(f"GPU fault: misaligned {what} of {size} bytes at {bad:#x}", bad)

    def _groups(self, idx):
        if idx.size == 0:
            return []
        first = idx[0]
        if (idx == first).all():
            return [(self._regions[first], None)]
        return [(self._regions[i], idx == i) for i in np.unique(idx)]

    def load(self, addrs, dtype, what="load") -> np.ndarray:
        dt = np.dtype(dtype)
        addrs = np.asarray(addrs, np.uint64)
        self._check_align(addrs, dt.itemsize, what)
        idx = self._locate(addrs, dt.itemsize, what)
        out = np.empty(addrs.shape, dt)
        groups = self._groups(idx)
        if self.recorder is not None:
            self.recorder.update((r.va, "r") for r, _ in groups)
        for r, sel in groups:
            a = addrs if sel is None else addrs[sel]
            off = (a - np.uint64(r.va)).astype(np.int64)
            v = _gather(r.data, off, dt)
            if sel is None:
                out = v
            else:
                out[sel] = v
        return out

    def store(self, addrs, values, dtype, what="store") -> None:
        dt = np.dtype(dtype)
        addrs = np.asarray(addrs, np.uint64)
        values = np.asarray(values).astype(dt, copy=False)
        self._check_align(addrs, dt.itemsize, what)
        idx = self._locate(addrs, dt.itemsize, what)
        groups = self._groups(idx)
        if self.recorder is not None:
            self.recorder.update((r.va, "w") for r, _ in groups)
        for r, sel in groups:
            a = addrs if sel is None else addrs[sel]
            v = values if sel is None else values[sel]
            _scatter(r.data, (a - np.uint64(r.va)).astype(np.int64), v, dt)


def _gather(data, off, dt):
    w = dt.itemsize
    if w == 1:
        return data[off].view(dt)
    if data.ctypes.data % w == 0 and data.size % w == 0 and not (off % w).any():
        return data.view(dt)[off // w]
    return data[off[:, None] + np.arange(w)].reshape(-1).view(dt)


def _scatter(data, off, v, dt):
    w = dt.itemsize
    if w == 1:
        data[off] = v.view(np.uint8)
        return
    if data.ctypes.data % w == 0 and data.size % w == 0 and not (off % w).any():
        data.view(dt)[off // w] = v
        return
    data[(off[:, None] + np.arange(w)).reshape(-1)] = np.ascontiguousarray(v).view(np.uint8)


class _Local:
    """Per-thread memory (.local): `n` rows of `size` bytes; addresses are offsets."""

    def __init__(self, n, size, space):
        self.n, self.size, self.space = n, size, space
        self.data = np.zeros(max(n * size, 1), np.uint8)

    def _flat(self, offs, lanes, w, what):
        offs = np.asarray(offs, np.uint64)
        bad = offs + np.uint64(w) > np.uint64(self.size)
        if bad.any():
            b = int(offs[np.argmax(bad)])
            raise GPUFault(f"GPU fault: {what} of {w} bytes at {self.space} offset {b:#x} is outside "
                           f"the {self.size}-byte {self.space} window", b)
        if w > 1 and (offs % np.uint64(w)).any():
            b = int(offs[np.argmax((offs % np.uint64(w)) != 0)])
            raise GPUFault(f"GPU fault: misaligned {what} of {w} bytes at {self.space} offset {b:#x}", b)
        return offs.astype(np.int64) + lanes * self.size

    def load(self, offs, lanes, dt, what):
        return _gather(self.data, self._flat(offs, lanes, dt.itemsize, what), dt)

    def store(self, offs, lanes, v, dt, what):
        _scatter(self.data, self._flat(offs, lanes, dt.itemsize, what), np.asarray(v).astype(dt, copy=False), dt)


class _Shared(_Local):
    """Per-CTA memory: one row per block of the batch, shared by that block's threads."""

    def __init__(self, nblocks, size, nthreads):
        super().__init__(nblocks, size, "shared")
        self.nthreads = nthreads

    def _flat(self, offs, lanes, w, what):
        return super()._flat(offs, np.asarray(lanes) // self.nthreads, w, what)


# ----------------------------------------------------------------------------- parsing

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_LABEL = re.compile(r"^\s*([A-Za-z_$%][\w$]*)\s*:(?!:)")
_REG_DECL = re.compile(r"^%?[\w$]+<(\d+)>$")
_INT = re.compile(r"^[-+]?(0[xX][0-9a-fA-F]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)[uU]?$")


_LINE_DIRECTIVE = re.compile(r"^[ \t]*\.(?:loc|file|version|target|address_size)\b[^\n;]*;?", re.M)


class _Renamer:
    """Renames a device function's registers, labels and names when it is inlined."""

    _IDENT = re.compile(r"(?<![\w$%.])([A-Za-z_$][\w$]*)")
    _REG = re.compile(r"%([A-Za-z_$][\w$]*)")

    def __init__(self, reg_prefix=None, names=None, ret_label=None):
        self.reg_prefix, self.names, self.ret_label = reg_prefix, names or {}, ret_label

    def label(self, name):
        return self.names.get(name, name)

    def __call__(self, st):
        if self.reg_prefix is None:
            return st
        pre = self.reg_prefix

        def reg(m):
            base = m.group(1)
            return m.group(0) if base in _SPECIAL else pre + base
        st = self._REG.sub(reg, st)
        names = self.names
        return self._IDENT.sub(lambda m: names.get(m.group(1), m.group(1)), st)


def _strip_comments(text):
    # keep newlines so line numbers stay right
    return _COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def _line_directives(src):
    """Line-terminated directives (.version/.target/.address_size/.loc/.file): collect and blank."""
    found = []

    def sub(m):
        found.append((m.group(0).strip().rstrip(";"), src.count("\n", 0, m.start()) + 1))
        return " " * len(m.group(0))
    return _LINE_DIRECTIVE.sub(sub, src), found


def _split_operands(s):
    out, depth, cur = [], 0, []
    for ch in s:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    last = "".join(cur).strip()
    if last:
        out.append(last)
    return out


def _parse_int(s):
    s = s.strip()
    neg = s.startswith("-")
    if s[0] in "+-":
        s = s[1:]
    s = s.rstrip("uU")
    if s[:2] in ("0x", "0X"):
        v = int(s[2:], 16)
    elif s[:2] in ("0b", "0B"):
        v = int(s[2:], 2)
    elif len(s) > 1 and s[0] == "0":
        v = int(s, 8)
    else:
        v = int(s)
    return -v if neg else v


def _literal(s):
    """('i', int) | ('f32', bits) | ('f64', bits) | ('f', float) | None."""
    s = s.strip()
    m = re.fullmatch(r"([-+]?)0([fFdD])([0-9a-fA-F]+)", s)
    if m:
        sign, kind, hexd = m.groups()
        bits = int(hexd, 16)
        if kind in "fF":
            if len(hexd) != 8:
                return None
            return ("f32", bits ^ (0x80000000 if sign == "-" else 0))
        if len(hexd) != 16:
            return None
        return ("f64", bits ^ (0x8000000000000000 if sign == "-" else 0))
    if _INT.match(s):
        return ("i", _parse_int(s))
    if re.fullmatch(r"[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?", s):
        return ("f", float(s))
    return None


def _lit_value(lit, dt):
    kind, v = lit
    if dt == np.bool_:
        return np.bool_(bool(v))
    if _is_float(dt):
        if kind == "i" or kind == "f":
            return dt.type(v)
        if kind == "f32":
            return np.array(v, np.uint32).view(np.float32)[()].astype(dt) if dt.itemsize != 4 \
                else np.array(v, np.uint32).view(np.float32)[()]
        return np.array(v, np.uint64).view(np.float64)[()].astype(dt)
    if kind == "f":
        raise PTXError(f"floating-point literal {v} used with integer type {dt}")
    w = dt.itemsize * 8
    if kind == "f32" and w == 64:
        v = struct.unpack("<Q", struct.pack("<d", struct.unpack("<f", struct.pack("<I", v))[0]))[0]
    return np.array(v & ((1 << w) - 1), _UINT[dt.itemsize]).view(dt)[()]


class _Var:
    """A variable declared with a state space (.global/.const/.shared/.local) or a param."""

    def __init__(self, space, tname, name, size, align, init=None, extern=False):
        self.space, self.tname, self.name, self.size, self.align = space, tname, name, size, align
        self.init, self.extern, self.offset = init, extern, 0


def _parse_var(decl, line, text):
    """`.shared .align 4 .b8 name[1024] = {...}` (without the trailing ';')."""
    init = None
    if "=" in decl:
        decl, init_s = decl.split("=", 1)
        init = init_s.strip()
    toks = decl.split()
    space, align, tname, extern, vec = None, None, None, False, 1
    name = None
    ptr = False
    i = 0
    while i < len(toks):
        t = toks[i]
        if ptr and (t == ".align" or t[1:] in _SPACES):  # `.ptr .global .align 1`: the pointee's
            i += 2 if t == ".align" else 1
            continue
        if t == ".ptr":
            ptr = True
        elif t in (".extern",):
            extern = True
        elif t in (".visible", ".weak", ".common"):
            pass
        elif t == ".align":
            align = int(toks[i + 1])
            i += 1
        elif t.startswith(".v") and t[2:].isdigit():
            vec = int(t[2:])
        elif t.startswith(".") and t[1:] in _SPACES | {"tex", "surf", "sampler"}:
            space = t[1:]
        elif t.startswith(".") and t[1:] in _TYPES:
            tname = t[1:]
        elif t.startswith(".ptr") or t.startswith("."):
            pass
        else:
            name = "".join(toks[i:])
            break
        i += 1
    if name is None or tname is None:
        raise PTXError("cannot parse declaration", line, text)
    dims = [d for d in re.findall(r"\[(\d*)\]", name)]
    base = re.sub(r"\[.*$", "", name)
    elt = _DT[tname].itemsize * vec
    count = 1
    unsized = False
    for d in dims:
        if d == "":
            unsized = True
        else:
            count *= int(d)
    if unsized and init is not None:
        count = max(1, len(_split_operands(init.strip().strip("{}").replace("{", "").replace("}", ""))))
        unsized = False
    v = _Var(space, tname, base, 0 if unsized else elt * count, align or elt, init, extern or unsized)
    return v


def _init_bytes(var, line, text):
    data = np.zeros(var.size, np.uint8)
    if var.init is None:
        return data
    items = [x for x in _split_operands(var.init.replace("{", "").replace("}", "")) if x]
    dt = _DT[var.tname]
    vals = []
    for it in items:
        lit = _literal(it)
        if lit is None:
            raise PTXError(f"unsupported initializer `{it}` (only literals)", line, text)
        vals.append(_lit_value(lit, dt))
    b = np.array(vals, dt).tobytes()
    data[:len(b)] = np.frombuffer(b, np.uint8)[:var.size]
    return data


class _Ins:
    __slots__ = ("line", "text", "pred", "pneg", "op", "mods", "ops", "fn", "kind", "target", "barid")

    def __repr__(self):
        return f"<{self.line}: {self.text}>"


class PTXModule:
    """A parsed PTX module: its kernels (.entry) and module-scope variables."""

    def __init__(self, ptx_text: str):
        self.text = ptx_text
        self.version = None
        self.target = None
        self.address_size = 64
        self.globals: dict[str, _Var] = {}  # .global / .const
        self.shared: dict[str, _Var] = {}  # module-scope .shared (incl. extern)
        self.kernels: dict[str, PTXKernel] = {}
        self.funcs: set[str] = set()
        self.func_defs: dict[str, tuple] = {}
        self._entries: list[tuple] = []
        src, lined = _line_directives(_strip_comments(ptx_text))
        for stmt, line in lined:
            self._directive(stmt, line)
        self._parse(src)
        for name, params, body, body_off, line in self._entries:
            self.kernels[name] = PTXKernel(self, name, params, body, body_off, line)

    def kernel(self, name: str) -> "PTXKernel":
        try:
            return self.kernels[name]
        except KeyError:
            raise PTXError(f"no kernel named {name!r} in module (have: {', '.join(self.kernels) or 'none'})") from None

    # -- parsing
    def _parse(self, src):
        lines_at = np.cumsum([0] + [1 if c == "\n" else 0 for c in src])  # char index -> line-1
        self._lines_at = lines_at
        self._src = src
        i, n = 0, len(src)
        while i < n:
            while i < n and src[i].isspace():
                i += 1
            if i >= n:
                break
            # find end of statement: ';' or a '{' opening a function body
            j = i
            depth = 0
            while j < n:
                c = src[j]
                if c == "(":
                    depth += 1
                elif c == ")":
                    depth -= 1
                elif c == ";" and depth == 0:
                    break
                elif c == "{" and depth == 0:
                    stmt = src[i:j]
                    if re.search(r"\.(entry|func)\b", stmt):
                        break
                    if stmt.lstrip().startswith(".section"):  # debug sections: skipped whole
                        j = self._match_brace(j)
                        break
                    # initializer braces: skip to matching '}'
                    k = self._match_brace(j)
                    j = k
                elif c == "}" and depth == 0:
                    break
                j += 1
            stmt = src[i:j].strip()
            line = int(lines_at[i]) + 1
            if stmt.startswith(".section"):
                i = j + 1
                continue
            if j < n and src[j] == "{":
                end = self._match_brace(j)
                self._parse_function(stmt, src[j + 1:end], j + 1, line)
                i = end + 1
                continue
            if j < n and src[j] == "}" and not stmt:
                raise PTXError("unbalanced '}'", line, "}")
            i = j + 1
            if stmt:
                self._directive(stmt, line)

    def _match_brace(self, j):
        src, depth = self._src, 0
        for k in range(j, len(src)):
            if src[k] == "{":
                depth += 1
            elif src[k] == "}":
                depth -= 1
                if depth == 0:
                    return k
        raise PTXError("unbalanced '{'", int(self._lines_at[j]) + 1, src[j:j + 40].strip())

    def _directive(self, stmt, line):
        text = " ".join(stmt.split())
        toks = stmt.split()
        head = toks[0]
        if head == ".version":
            self.version = toks[1]
        elif head == ".target":
            self.target = stmt.split(None, 1)[1].strip()
        elif head == ".address_size":
            self.address_size = int(toks[1])
            if self.address_size != 64:
                raise PTXError("only .address_size 64 is supported", line, text)
        elif head in (".file", ".loc", ".section", ".pragma"):
            pass
        elif re.search(r"\.(entry|func)\b", stmt):  # prototype without body
            m = re.search(r"\.(?:entry|func)\s+(?:\([^)]*\)\s*)?([\w$]+)", stmt)
            if m:
                self.funcs.add(m.group(1))
        elif any(t in (".global", ".const", ".shared", ".local") for t in toks):
            v = _parse_var(stmt, line, text)
            if v.space in ("global", "const"):
                v.init_data = _init_bytes(v, line, text)
                self.globals[v.name] = v
            elif v.space == "shared":
                self.shared[v.name] = v
            else:
                raise PTXError("module-scope .local variables are not supported", line, text)
        else:
            raise PTXError(f"unsupported module-level directive `{head}`", line, text)

    def _parse_function(self, head, body, body_off, line):
        text = " ".join(head.split())
        m = re.search(r"\.(entry|func)\s+(?:\(([^)]*)\)\s*)?([\w$]+)\s*(\(([^)]*)\))?", head, re.S)
        if not m:
            raise PTXError("cannot parse function header", line, text)
        kind, name = m.group(1), m.group(3)
        if kind == "func":  # device function: inlined at each call site
            self.funcs.add(name)
            rets = [_parse_var(p, line, text).name for p in _split_operands(m.group(2) or "")]
            fparams = [_parse_var(p, line, text).name for p in _split_operands(m.group(5) or "")]
            self.func_defs[name] = (rets, fparams, body, body_off, line)
            return
        params = []
        for p in _split_operands(m.group(5) or ""):
            pv = _parse_var(p, line, text)
            params.append(pv)
        self._entries.append((name, params, body, body_off, line))

    def load_globals(self, memory: "Memory", base: int | None = None) -> dict:
        """Place this module's .global/.const variables in `memory` (once per memory)."""
        key = id(self)
        if key in memory.module_globals:
            return memory.module_globals[key]
        addrs = {}
        vs = list(self.globals.values())
        if vs:
            off = 0
            layout = []
            for v in vs:
                off = (off + v.align - 1) // v.align * v.align
                layout.append((v, off))
                off += max(v.size, 1)
            va = memory.alloc(off, 256, name="ptx module globals") if base is None else base
            if base is not None:
                memory.map(base, off, name="ptx module globals")
            for v, o in layout:
                addrs[v.name] = va + o
                if v.size:
                    memory.write_bytes(va + o, v.init_data.tobytes())
        memory.module_globals[key] = addrs
        return addrs


# ----------------------------------------------------------------------------- kernel

class _Ctx:
    __slots__ = ("regs", "n", "mem", "shared", "local", "params", "gaddr", "special", "lanes", "ins",
                 "clock", "nthreads", "nblocks", "tlin", "bidx", "warp_gid", "nwarp_groups", "warp_size", "win", "step",
                 "cp_async")


class PTXKernel(MatrixOps):
    """One `.entry` of a module: parsed and compiled to per-instruction closures. Warp-level matrix instructions
    (mma.sync, ldmatrix) and cp.async live in ptx_matrix.py."""

    strict_barriers = False  # True: a barrier that some threads exited before reaching raises
    max_batch_lanes = 8192  # blocks are run together in batches of up to this many threads
    max_steps = 20_000_000  # instructions issued per batch of blocks before we call it a hang
    livelock_steps = 4096  # divergent steps without reconvergence before leading threads get turns
    trace = None  # a callable(line, text, active_threads, threads): called per issued instruction

    def __init__(self, module, name, params, body, body_off, line):
        self.module, self.name = module, name
        self._pvars = params
        self.params: list[tuple[str, str]] = [(p.name, p.tname if p.size == _DT[p.tname].itemsize
                                               else f"{p.tname}[{p.size // _DT[p.tname].itemsize}]")
                                              for p in params]
        off = 0
        self.param_offsets = {}
        for p in params:
            off = (off + p.align - 1) // p.align * p.align
            p.offset = off
            self.param_offsets[p.name] = off
            off += p.size
        self.param_size = off
        self.reg_types: dict[str, np.dtype] = {}
        self.reg_tnames: dict[str, str] = {}
        self.shared_vars: dict[str, _Var] = {}
        self.local_vars: dict[str, _Var] = {}
        self.code: list[_Ins] = []
        self.labels: dict[str, int] = {}
        self.call_params: set[str] = set()
        self._ncalls = 0
        self._parse_body(body, body_off)
        self._layout()
        for ins in self.code:
            self._compile(ins)

    # -- parsing the body
    def _parse_body(self, body, body_off, rename=None, depth=0):
        mod = self.module
        lines_at = mod._lines_at
        pos = 0
        if rename is None:
            rename = _Renamer()
        for chunk in body.split(";"):
            start = pos
            pos += len(chunk) + 1
            s = chunk
            # scope braces and labels in front of the statement
            while True:
                st = s.lstrip()
                if st.startswith("{") or st.startswith("}"):
                    s = st[1:]
                    continue
                m = _LABEL.match(s)
                if m:
                    self.labels[rename.label(m.group(1))] = len(self.code)
                    s = s[m.end():]
                    continue
                break
            st = s.strip()
            while st.endswith("}") and st.count("}") > st.count("{"):  # a closing scope brace
                st = st[:-1].rstrip()
            if not st:
                continue
            lead = len(chunk) - len(chunk.lstrip()) if chunk.strip() else 0
            idx = body_off + start + (chunk.find(st[:8]) if st[:8] in chunk else lead)
            line = int(lines_at[min(idx, len(lines_at) - 1)]) + 1
            st = rename(st)
            text = " ".join(st.split())
            if st.startswith("."):
                self._body_directive(st, line, text)
                continue
            ins = self._parse_ins(st, line, text)
            if ins.op == "call":
                self._inline_call(ins, depth)
                continue
            if ins.op in ("ret", "exit") and rename.ret_label is not None:
                if ins.op == "exit":
                    raise PTXError("`exit` inside a device function is not supported", line, text)
                ins.op, ins.mods, ins.ops = "bra", ["uni"], [rename.ret_label]
            self.code.append(ins)

    def _inline_call(self, ins, depth):
        """`call (ret), f, (args)`: inline f's body here, its registers, labels and local
        names prefixed, its formal params bound to the call site's .param variables."""
        ops = ins.ops
        if ops and ops[0].startswith("("):
            rets, ops = [x.strip() for x in ops[0][1:-1].split(",") if x.strip()], ops[1:]
        else:
            rets = []
        if not ops:
            raise PTXError("call without a function", ins.line, ins.text)
        fname = ops[0].strip()
        args = [x.strip() for x in ops[1][1:-1].split(",") if x.strip()] if len(ops) > 1 and ops[1].startswith("(") else []
        if len(ops) > 2 or fname.startswith("%"):
            raise PTXError("indirect calls (through a register / prototype) are not supported", ins.line, ins.text)
        fd = self.module.func_defs.get(fname)
        if fd is None:
            raise PTXError(f"call to external function {fname} (no body in this module) is not supported",
                           ins.line, ins.text)
        if depth >= 16:
            raise PTXError(f"call depth > 16 (recursion through {fname}?) is not supported", ins.line, ins.text)
        frets, fparams, body, body_off, _ = fd
        if len(frets) != len(rets) or len(fparams) != len(args):
            raise PTXError(f"call of {fname}: {len(rets)} returns / {len(args)} arguments, the function "
                           f"takes {len(frets)} / {len(fparams)}", ins.line, ins.text)
        self._ncalls += 1
        k = self._ncalls
        done = f"$__ret{k}_{fname}"
        if ins.pred is not None:  # @p call f  ->  @!p bra done
            skip = _Ins()
            skip.line, skip.text = ins.line, ins.text
            skip.pred, skip.pneg = ins.pred, not ins.pneg
            skip.op, skip.mods, skip.ops = "bra", [], [done]
            skip.fn, skip.kind, skip.target, skip.barid = None, "op", None, 0
            self.code.append(skip)
        names = dict(zip(frets, rets))
        names.update(zip(fparams, args))
        for lab in re.findall(r"([A-Za-z_$][\w$]*)\s*:(?!:)", body):
            names.setdefault(lab, f"$__f{k}_{lab.lstrip('$')}")
        for decl in re.findall(r"(?:^|[;{}])\s*\.(?:param|local|shared)\b[^;]*?([A-Za-z_$][\w$]*)\s*"
                               r"(?:\[[^\]]*\]\s*)*(?:;|=)", body):
            names.setdefault(decl, f"__f{k}_{decl}")
        self._parse_body(body, body_off, _Renamer(f"%__f{k}_", names, done), depth + 1)
        self.labels[done] = len(self.code)

    def _body_directive(self, st, line, text):
        toks = st.split()
        head = toks[0]
        if head == ".reg":
            tname = None
            vec = None
            rest = []
            for i, t in enumerate(toks[1:], 1):
                if t.startswith(".v") and t[2:].isdigit():
                    vec = t
                elif t.startswith(".") and t[1:] in _TYPES:
                    tname = t[1:]
                elif t == ".align" or (t.isdigit() and toks[i - 1] == ".align"):
                    pass
                else:
                    rest = toks[i:]
                    break
            if tname is None:
                raise PTXError("cannot parse .reg declaration", line, text)
            if vec:
                raise PTXError("vector registers (.reg .v2/.v4) are not supported", line, text)
            dt = _DT[tname]
            for name in _split_operands(" ".join(rest)):
                m = _REG_DECL.match(name)
                if m:
                    base = name[:name.index("<")]
                    for k in range(int(m.group(1))):
                        self.reg_types[f"{base}{k}"] = dt
                        self.reg_tnames[f"{base}{k}"] = tname
                else:
                    self.reg_types[name] = dt
                    self.reg_tnames[name] = tname
        elif head in (".shared", ".local") or (head == ".align" and len(toks) > 2):
            v = _parse_var(st, line, text)
            if v.space == "shared":
                self.shared_vars[v.name] = v
            elif v.space == "local":
                self.local_vars[v.name] = v
            else:
                raise PTXError(f"unsupported declaration in kernel body", line, text)
        elif head in (".pragma", ".loc", ".file", ".maxntid", ".reqntid", ".minnctapersm",
                      ".maxnreg", ".maxnctapersm", ".noreturn", ".explicitcluster", ".reqnctapercluster",
                      ".maxclusterrank"):
            pass
        elif head == ".param":  # call-site parameter: per-thread storage (local memory)
            v = _parse_var(st, line, text)
            old = self.local_vars.get(v.name)
            if old is None or old.size < v.size or old.align < v.align:
                v.space = "local"
                self.local_vars[v.name] = v
            self.call_params.add(v.name)
        elif head in (".global", ".const"):
            v = _parse_var(st, line, text)
            v.init_data = _init_bytes(v, line, text)
            self.module.globals[v.name] = v
        else:
            raise PTXError(f"unsupported directive `{head}` in kernel body", line, text)

    def _parse_ins(self, st, line, text):
        ins = _Ins()
        ins.line, ins.text = line, text
        ins.pred, ins.pneg = None, False
        s = st.strip()
        if s.startswith("@"):
            m = re.match(r"@(!?)\s*(%?[\w$]+)\s+", s)
            if not m:
                raise PTXError("bad predicate guard", line, text)
            ins.pneg = m.group(1) == "!"
            ins.pred = m.group(2)
            s = s[m.end():]
        parts = s.split(None, 1)
        opfull = parts[0]
        pieces = opfull.split(".")
        ins.op = pieces[0]
        ins.mods = pieces[1:]
        ins.ops = _split_operands(parts[1]) if len(parts) > 1 else []
        ins.fn, ins.kind, ins.target, ins.barid = None, "op", None, 0
        return ins

    def _layout(self):
        off = 0
        self.shared_offsets = {}
        allshared = list(self.module.shared.values()) + list(self.shared_vars.values())
        for v in allshared:
            if v.extern:
                continue
            off = (off + v.align - 1) // v.align * v.align
            self.shared_offsets[v.name] = off
            off += v.size
        self.static_shared = off
        dyn = (off + 15) // 16 * 16
        for v in allshared:
            if v.extern:
                self.shared_offsets[v.name] = (dyn + v.align - 1) // v.align * v.align
        off = 0
        self.local_offsets = {}
        for v in self.local_vars.values():
            off = (off + v.align - 1) // v.align * v.align
            self.local_offsets[v.name] = off
            off += v.size
        self.local_size = off

    # -- operands
    def _err(self, ins, msg):
        return PTXError(msg, ins.line, ins.text)

    def _reg_dtype(self, ins, name):
        try:
            return self.reg_types[name]
        except KeyError:
            raise self._err(ins, f"undeclared register {name}") from None

    _RELAXED = {"ld", "ldu", "st", "cvt"}  # a register wider than the instruction type is allowed

    def _check_type(self, ins, reg, tname):
        """PTX operand type rules: same type; or the same size where either is a bit type (.bNN)
        or both are integers; ld/st/cvt also take a register wider than the instruction type."""
        rt = self.reg_tnames.get(reg)
        if rt is None or tname is None or rt == tname or "pred" in (rt, tname):
            return
        rs, ts = _DT[rt].itemsize, _DT[tname].itemsize
        rk, tk = _kind(rt), _kind(tname)
        relaxed = ins.op in self._RELAXED
        size_ok = rs == ts or (relaxed and rs > ts and rt[0] in "bsu")
        if rt[0] == "b" or tname[0] == "b" and tname not in ("bf16", "bf16x2"):
            compatible = True
        elif rk in "su" and tk in "su":
            compatible = True
        elif rt in ("b16",) and tname in ("bf16",):
            compatible = True
        else:
            compatible = False
        if not (compatible and size_ok):
            raise self._err(ins, f"wrong operand type: register {reg} is .{rt}, the instruction "
                                 f"type is .{tname}")

    def _src(self, ins, s, dt, signed=None, tname=None):
        """Compile a source operand into fn(ctx) -> array or scalar of dtype dt."""
        s = s.strip()
        if s.startswith("%") and tname is not None:
            self._check_type(ins, s, tname)
        if signed is None:
            signed = dt.kind == "i"
        if s.startswith("!"):
            inner = self._src(ins, s[1:], np.dtype(np.bool_))
            return lambda c: ~inner(c)
        if s.startswith("{"):
            raise self._err(ins, f"vector operand {s} not allowed here")
        if s.startswith("%"):
            base = s.split(".")[0][1:]
            if s not in self.reg_types and base in _SPECIAL:
                return self._special(ins, s, dt)
            rdt = self._reg_dtype(ins, s)
            if rdt == dt:
                return lambda c: c.regs[s]
            if rdt == np.bool_ and dt != np.bool_:
                raise self._err(ins, f"predicate register {s} used as {dt}")
            if dt == np.bool_ and rdt != np.bool_:
                raise self._err(ins, f"register {s} ({rdt}) used as a predicate")
            return lambda c: _bits(c.regs[s], dt, signed)
        lit = _literal(s)
        if lit is not None:
            try:
                v = _lit_value(lit, dt)
            except PTXError as e:
                raise e.locate(ins.line, ins.text)
            return lambda c: v
        m = re.fullmatch(r"([\w$]+)(?:\s*\+\s*(\d+))?", s)
        if m and (m.group(1) in self.module.globals or m.group(1) in self.shared_offsets
                  or m.group(1) in self.local_offsets or m.group(1) in self.param_offsets):
            return self._symbol(ins, m.group(1), int(m.group(2) or 0), dt)
        raise self._err(ins, f"cannot understand operand `{s}`")

    def _symbol(self, ins, name, add, dt):
        if name in self.shared_offsets:
            v = dt.type(self.shared_offsets[name] + add)
            return lambda c: v
        if name in self.local_offsets:
            v = dt.type(self.local_offsets[name] + add)
            return lambda c: v
        if name in self.param_offsets:
            v = dt.type(self.param_offsets[name] + add)
            return lambda c: v
        return lambda c: dt.type(c.gaddr[name] + add)

    def _special(self, ins, s, dt):
        name = s[1:]
        if name.split(".")[0] not in ("tid", "ntid", "ctaid", "nctaid", "laneid", "warpid", "nwarpid",
                                      "smid", "nsmid", "gridid", "clock", "clock64", "lanemask_eq",
                                      "lanemask_lt", "lanemask_le", "lanemask_gt", "lanemask_ge",
                                      "dynamic_smem_size", "total_smem_size", "warpsize", "WARP_SZ"):
            raise self._err(ins, f"special register {s} is not supported")
        return lambda c: _bits(c.special(name), dt, False)

    def _dst(self, ins, s, tname=None):
        """Compile a destination register into fn(ctx, value, value_dtype_signed, mask)."""
        s = s.strip()
        if s == "_":
            return lambda c, v, sg, m: None
        if tname is not None and s.startswith("%"):
            self._check_type(ins, s, tname)
        if not s.startswith("%"):
            raise self._err(ins, f"destination `{s}` is not a register")
        rdt = self._reg_dtype(ins, s)

        def w(c, v, sg, m):
            v = _bits(v, rdt, sg) if getattr(v, "dtype", None) != rdt else v
            if np.ndim(v) == 0:
                v = np.full(c.n, v, rdt)
            if m is None:
                c.regs[s] = v
            else:
                c.regs[s] = np.where(m, v, c.regs[s])
        return w

    def _addr(self, ins, s, space):
        """[reg+off] / [sym+off] / [imm] -> fn(ctx) -> uint64 address (in `space`)."""
        s = s.strip()
        if not (s.startswith("[") and s.endswith("]")):
            raise self._err(ins, f"expected an address operand [..], got `{s}`")
        inner = s[1:-1].strip()
        m = re.fullmatch(r"([^+\-]+?)\s*(?:([+\-])\s*([+\-]?\s*(?:0[xX][0-9a-fA-F]+|\d+)))?", inner)
        if not m:
            raise self._err(ins, f"cannot parse address `{s}`")
        base, sign, off = m.group(1).strip(), m.group(2), m.group(3)
        offv = 0
        if off:
            offv = _parse_int(off.replace(" ", ""))
            if sign == "-":
                offv = -offv
        u64 = np.dtype(np.uint64)
        if base.startswith("%"):
            rdt = self._reg_dtype(ins, base)
            if rdt == np.bool_ or _is_float(rdt):
                raise self._err(ins, f"address register {base} has type {rdt}")
            if rdt.itemsize == 8:
                if offv == 0:
                    return lambda c: c.regs[base].view(np.uint64)
                o = np.uint64(offv & 0xFFFFFFFFFFFFFFFF)
                return lambda c: c.regs[base].view(np.uint64) + o
            # 32-bit register address (shared/local windows, or .address_size 32 style)
            o = np.uint64(offv & 0xFFFFFFFFFFFFFFFF)
            return lambda c: _bits(c.regs[base], np.dtype(np.uint32)).astype(np.uint64) + o
        lit = _literal(base)
        if lit is not None and lit[0] == "i":
            v = np.uint64((lit[1] + offv) & 0xFFFFFFFFFFFFFFFF)
            return lambda c: v
        f = self._symbol(ins, base, 0, u64) if (base in self.module.globals or base in self.shared_offsets
                                                 or base in self.local_offsets or base in self.param_offsets) else None
        if f is None:
            raise self._err(ins, f"unknown symbol `{base}` in address")
        if space == "generic" or space is None:
            if base in self.shared_offsets:
                v = self.shared_offsets[base] + offv
                return lambda c: np.uint64(c.win.cvta_shared + v)
            if base in self.local_offsets:
                v = self.local_offsets[base] + offv
                return lambda c: np.uint64(c.win.cvta_local + v)
        o = np.uint64(offv & 0xFFFFFFFFFFFFFFFF)
        return lambda c: f(c) + o

    # -- compile instructions
    def _types(self, ins):
        return [m for m in ins.mods if m in _TYPES]

    def _compile(self, ins):
        op = ins.op
        try:
            h = getattr(self, "_c_" + op, None)
            if h is None:
                raise self._err(ins, f"unsupported instruction `{op}`")
            h(ins)
        except PTXError as e:
            raise e.locate(ins.line, ins.text)
        except (KeyError, IndexError, ValueError) as e:
            raise self._err(ins, f"malformed instruction ({type(e).__name__}: {e})") from e
        if ins.pred is not None:
            if ins.pred not in self.reg_types or self.reg_types[ins.pred] != np.bool_:
                raise self._err(ins, f"guard {ins.pred} is not a declared .pred register")

    def _need(self, ins, n):
        if len(ins.ops) != n:
            raise self._err(ins, f"expected {n} operands, got {len(ins.ops)}")

    def _one_type(self, ins):
        ts = self._types(ins)
        if len(ts) != 1:
            raise self._err(ins, f"expected exactly one type modifier, got {ts or 'none'}")
        return ts[0]

    # control flow
    def _c_bra(self, ins):
        self._need(ins, 1)
        tgt = ins.ops[0]
        if tgt not in self.labels:
            raise self._err(ins, f"unknown branch target {tgt}")
        ins.kind, ins.target = "bra", self.labels[tgt]

    def _c_ret(self, ins):
        ins.kind = "exit"

    _c_exit = _c_ret

    def _c_trap(self, ins):
        ins.kind = "trap"

    def _c_brkpt(self, ins):
        ins.kind = "trap"

    def _c_call(self, ins):
        raise self._err(ins, "`call` is not supported (call-free code only)")

    def _c_bar(self, ins):
        mods = ins.mods
        if "warp" in mods:  # bar.warp.sync: all threads of the warp converge -> no-op here
            ins.fn = lambda c, m: None
            return
        if "arrive" in mods or "red" in mods:
            raise self._err(ins, f"bar.{'.'.join(mods)} is not supported")
        if len(ins.ops) > 1:
            raise self._err(ins, "bar.sync with a thread count is not supported")
        lit = _literal(ins.ops[0]) if ins.ops else ("i", 0)
        if lit is None or lit[0] != "i":
            raise self._err(ins, "barrier id must be an immediate")
        ins.kind, ins.barid = "bar", lit[1]

    _c_barrier = _c_bar

    def _nop(self, ins):
        ins.fn = lambda c, m: None

    _c_membar = _nop
    _c_fence = _nop
    _c_nanosleep = _nop
    _c_pmevent = _nop
    _c_prefetch = _nop
    _c_prefetchu = _nop
    _c_discard = _nop
    _c_griddepcontrol = _nop

    # moves
    def _c_mov(self, ins):
        self._need(ins, 2)
        t = self._one_type(ins)
        dt = _DT[t]
        d, a = ins.ops
        if a.startswith("{"):  # pack
            parts = _split_operands(a[1:-1])
            srcs = []
            pw = dt.itemsize // len(parts)
            for p in parts:
                rdt = self._reg_dtype(ins, p) if p.startswith("%") else _UINT[pw]
                srcs.append(self._src(ins, p, _UINT[pw]))
            W = _UINT[dt.itemsize]
            wd = self._dst(ins, d)

            def fn(c, m):
                acc = np.zeros(c.n, W)
                for k, f in enumerate(srcs):
                    acc |= np.asarray(f(c)).astype(W) << W.type(8 * pw * k)
                wd(c, acc.view(dt), False, m)
            ins.fn = fn
            return
        if d.startswith("{"):  # unpack
            parts = _split_operands(d[1:-1])
            pw = dt.itemsize // len(parts)
            src = self._src(ins, a, _UINT[dt.itemsize])
            dsts = [self._dst(ins, p) for p in parts]
            W = _UINT[dt.itemsize]

            def fn(c, m):
                v = np.asarray(src(c)).astype(W)
                for k, wd in enumerate(dsts):
                    wd(c, ((v >> W.type(8 * pw * k)) & W.type((1 << (8 * pw)) - 1)).astype(_UINT[pw]), False, m)
            ins.fn = fn
            return
        src = self._src(ins, a, dt, tname=t)
        wd = self._dst(ins, d, tname=t)
        sg = dt.kind == "i"
        ins.fn = lambda c, m: wd(c, src(c), sg, m)

    def _c_cvta(self, ins):
        self._need(ins, 2)
        t = self._one_type(ins)
        dt = _DT[t]
        to = "to" in ins.mods
        space = next((m for m in ins.mods if m in _SPACES), None)
        if space is None:
            raise self._err(ins, "cvta needs a state space")
        src = self._src(ins, ins.ops[1], dt)
        wd = self._dst(ins, ins.ops[0])
        if space not in ("shared", "local"):
            ins.fn = lambda c, m: wd(c, src(c), False, m)
            return
        mask = (1 << (8 * dt.itemsize)) - 1
        attr = "cvta_" + space

        def fn(c, m):
            b = dt.type(getattr(c.win, attr) & mask)
            v = np.asarray(src(c))
            wd(c, (v - b if to else v + b).astype(dt), False, m)
        ins.fn = fn

    # arithmetic
    def _arith(self, ins, nsrc, f, res_t=None, src_t=None):
        t = self._one_type(ins) if src_t is None else src_t
        dt = _DT[t]
        self._need(ins, nsrc + 1)
        srcs = [self._src(ins, o, dt, tname=t) for o in ins.ops[1:]]
        wd = self._dst(ins, ins.ops[0], tname=res_t or t)
        rdt = _DT[res_t] if res_t else dt
        sg = rdt.kind == "i"
        ftz = "ftz" in ins.mods and dt == np.float32
        sat = "sat" in ins.mods and _is_float(dt)
        if len(srcs) == 1:
            s0 = srcs[0]
            if ftz:
                g = lambda c: _ftz(f(_ftz(np.asarray(s0(c)))))
            else:
                g = lambda c: f(s0(c))
        elif len(srcs) == 2:
            s0, s1 = srcs
            if ftz:
                g = lambda c: _ftz(f(_ftz(np.asarray(s0(c))), _ftz(np.asarray(s1(c)))))
            else:
                g = lambda c: f(s0(c), s1(c))
        else:
            if ftz:
                g = lambda c: _ftz(f(*[_ftz(np.asarray(s(c))) for s in srcs]))
            else:
                g = lambda c: f(*[s(c) for s in srcs])
        if sat:
            g0 = g
            one = dt.type(1)
            zero = dt.type(0)
            g = lambda c: np.where(np.isnan(v := np.asarray(g0(c))), zero, np.clip(v, zero, one)).astype(dt)

        def fn(c, m):
            v = g(c)
            if getattr(v, "dtype", None) != rdt:
                v = np.asarray(v).astype(rdt) if _is_float(rdt) or np.asarray(v).dtype.kind == "f" \
                    else _bits(np.asarray(v), rdt, sg)
            wd(c, v, sg, m)
        ins.fn = fn
        return dt

    def _float_round_op(self, ins, t, op2):
        """f32 add/sub/mul/div with a directed rounding mode: compute in f64, round."""
        mode = next((m for m in ins.mods if m in ("rz", "rm", "rp")), None)
        if t == "f32" and mode:
            return lambda a, b: _round_f32(op2(np.float64(a) if np.ndim(a) == 0 else a.astype(np.float64),
                                               np.float64(b) if np.ndim(b) == 0 else b.astype(np.float64)), mode)
        return None

    def _c_add(self, ins):
        t = self._one_type(ins)
        if t == "pred" or "cc" in ins.mods:
            raise self._err(ins, "add.cc / addc carry chains are not supported")
        dt = _DT[t]
        if t in ("f16x2", "bf16x2"):
            return self._packed(ins, t, lambda a, b: a + b)
        if t == "bf16":
            return self._bf16(ins, lambda a, b: a + b)
        if "sat" in ins.mods and dt.kind == "i":
            info = np.iinfo(dt)
            return self._arith(ins, 2, lambda a, b: np.clip(np.asarray(a).astype(np.int64) + b, info.min, info.max).astype(dt))
        f = self._float_round_op(ins, t, np.add) or (lambda a, b: a + b)
        self._arith(ins, 2, f)

    def _c_sub(self, ins):
        t = self._one_type(ins)
        dt = _DT[t]
        if "cc" in ins.mods:
            raise self._err(ins, "sub.cc / subc carry chains are not supported")
        if t in ("f16x2", "bf16x2"):
            return self._packed(ins, t, lambda a, b: a - b)
        if t == "bf16":
            return self._bf16(ins, lambda a, b: a - b)
        if "sat" in ins.mods and dt.kind == "i":
            info = np.iinfo(dt)
            return self._arith(ins, 2, lambda a, b: np.clip(np.asarray(a).astype(np.int64) - b, info.min, info.max).astype(dt))
        f = self._float_round_op(ins, t, np.subtract) or (lambda a, b: a - b)
        self._arith(ins, 2, f)

    def _c_mul(self, ins):
        t = self._one_type(ins)
        dt = _DT[t]
        if t in ("f16x2", "bf16x2"):
            return self._packed(ins, t, lambda a, b: a * b)
        if t == "bf16":
            return self._bf16(ins, lambda a, b: a * b)
        if _is_float(dt):
            f = self._float_round_op(ins, t, np.multiply) or (lambda a, b: a * b)
            return self._arith(ins, 2, f)
        if "wide" in ins.mods:
            if dt.itemsize == 8:
                raise self._err(ins, "mul.wide is only defined for 16- and 32-bit types")
            w = ("s" if dt.kind == "i" else "u") + str(dt.itemsize * 16)
            wdt = _DT[w]
            return self._arith(ins, 2, lambda a, b: np.asarray(a).astype(wdt) * np.asarray(b).astype(wdt), res_t=w)
        if "hi" in ins.mods:
            return self._arith(ins, 2, lambda a, b: _mulhi(np.asarray(a), np.asarray(b), dt))
        if "lo" not in ins.mods:
            raise self._err(ins, "integer mul needs .lo, .hi or .wide")
        self._arith(ins, 2, lambda a, b: a * b)

    def _c_mul24(self, ins):
        t = self._one_type(ins)
        dt = _DT[t]
        def f(a, b):
            a = np.asarray(a).astype(np.int64)
            b = np.asarray(b).astype(np.int64)
            if dt.kind == "i":
                a = (a << 40) >> 40
                b = (b << 40) >> 40
            else:
                a &= 0xFFFFFF
                b &= 0xFFFFFF
            p = a * b
            return (p >> 16) if "hi" in ins.mods else p
        self._arith(ins, 2, lambda a, b: _bits(f(a, b), dt))

    def _c_mad(self, ins):
        t = self._one_type(ins)
        dt = _DT[t]
        if _is_float(dt) or t in ("f16x2", "bf16x2"):
            return self._c_fma(ins)
        if "cc" in ins.mods:
            raise self._err(ins, "mad.cc / madc carry chains are not supported")
        self._need(ins, 4)
        if "wide" in ins.mods:
            w = ("s" if dt.kind == "i" else "u") + str(dt.itemsize * 16)
            wdt = _DT[w]
            sa, sb = self._src(ins, ins.ops[1], dt), self._src(ins, ins.ops[2], dt)
            sc = self._src(ins, ins.ops[3], wdt)
            wd = self._dst(ins, ins.ops[0])
            sg = wdt.kind == "i"
            ins.fn = lambda c, m: wd(c, (np.asarray(sa(c)).astype(wdt) * np.asarray(sb(c)).astype(wdt) + sc(c)).astype(wdt), sg, m)
            return
        if "hi" in ins.mods:
            return self._arith(ins, 3, lambda a, b, cc: (_mulhi(np.asarray(a), np.asarray(b), dt) + cc).astype(dt))
        if "lo" not in ins.mods:
            raise self._err(ins, "integer mad needs .lo, .hi or .wide")
        self._arith(ins, 3, lambda a, b, cc: a * b + cc)

    def _c_fma(self, ins):
        t = self._one_type(ins)
        dt = _DT[t]
        mode = next((m for m in ins.mods if m in ("rn", "rz", "rm", "rp")), "rn")
        if t in ("f16x2", "bf16x2"):
            return self._packed(ins, t, lambda a, b, c: (a.astype(np.float64) * b + c), nargs=3)
        if t == "bf16":
            return self._bf16(ins, lambda a, b, c: a.astype(np.float64) * b + c, nargs=3)
        if dt == np.float32:
            def f(a, b, c):
                return _round_f32(np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64), mode)
        elif dt == np.float16:
            def f(a, b, c):
                return (np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)).astype(np.float16)
        elif dt == np.float64:
            def f(a, b, c):
                return a * b + c
        else:
            raise self._err(ins, f"fma needs a float type, got .{t}")
        self._arith(ins, 3, f)

    def _c_div(self, ins):
        t = self._one_type(ins)
        dt = _DT[t]
        if _is_float(dt):
            f = self._float_round_op(ins, t, np.divide) or (lambda a, b: a / b)
            return self._arith(ins, 2, f)
        self._arith(ins, 2, lambda a, b: _divmod_trunc(a, b, dt)[0])

    def _c_rem(self, ins):
        t = self._one_type(ins)
        dt = _DT[t]
        if _is_float(dt):
            raise self._err(ins, "rem is integer-only")
        self._arith(ins, 2, lambda a, b: _divmod_trunc(a, b, dt)[1])

    def _c_min(self, ins):
        t = self._one_type(ins)
        dt = _DT[t]
        if t in ("f16x2", "bf16x2"):
            return self._packed(ins, t, np.minimum if "NaN" in ins.mods else np.fmin)
        if _is_float(dt):
            return self._arith(ins, 2, np.minimum if "NaN" in ins.mods else np.fmin)
        self._arith(ins, 2, np.minimum)

    def _c_max(self, ins):
        t = self._one_type(ins)
        dt = _DT[t]
        if t in ("f16x2", "bf16x2"):
            return self._packed(ins, t, np.maximum if "NaN" in ins.mods else np.fmax)
        if _is_float(dt):
            return self._arith(ins, 2, np.maximum if "NaN" in ins.mods else np.fmax)
        self._arith(ins, 2, np.maximum)

    def _c_neg(self, ins):
        t = self._one_type(ins)
        if t in ("f16x2", "bf16x2"):
            return self._packed(ins, t, lambda a: -a, nargs=1)
        self._arith(ins, 1, lambda a: -a)

    def _c_abs(self, ins):
        t = self._one_type(ins)
        if t in ("f16x2", "bf16x2"):
            return self._packed(ins, t, np.abs, nargs=1)
        self._arith(ins, 1, np.abs)

    def _c_sad(self, ins):
        t = self._one_type(ins)
        dt = _DT[t]
        self._arith(ins, 3, lambda a, b, c: (np.where(a > b, a - b, b - a) + c).astype(dt))

    def _packed(self, ins, t, f, nargs=2):
        """f16x2 / bf16x2 ops: two halves of a 32-bit register, computed in f32 and rounded."""
        self._need(ins, nargs + 1)
        u32 = np.dtype(np.uint32)
        srcs = [self._src(ins, o, u32) for o in ins.ops[1:]]
        wd = self._dst(ins, ins.ops[0])
        bf = t == "bf16x2"

        def unpack(v):
            v = np.atleast_1d(np.asarray(v, np.uint32))
            h = v.view(np.uint16)
            return _bf16_to_f32(h) if bf else h.view(np.float16).astype(np.float32)

        def fn(c, m):
            args = [unpack(s(c)) for s in srcs]
            n = max(a.size for a in args)
            args = [np.broadcast_to(a, (n,)) if a.size == n else np.tile(a, n // a.size) for a in args]
            r = np.asarray(f(*args))
            if "sat" in ins.mods:
                r = np.where(np.isnan(r), 0, np.clip(r, 0, 1))
            h = _f32_to_bf16(r.astype(np.float32)) if bf else r.astype(np.float16).view(np.uint16)
            wd(c, np.ascontiguousarray(h).view(np.uint32), False, m)
        ins.fn = fn

    def _bf16(self, ins, f, nargs=2):
        self._need(ins, nargs + 1)
        u16 = np.dtype(np.uint16)
        srcs = [self._src(ins, o, u16) for o in ins.ops[1:]]
        wd = self._dst(ins, ins.ops[0])
        ins.fn = lambda c, m: wd(c, _f32_to_bf16(np.asarray(f(*[_bf16_to_f32(s(c)) for s in srcs])).astype(np.float32)), False, m)

    # float math
    def _math(self, ins, f):
        t = self._one_type(ins)
        if t in ("f16x2", "bf16x2"):
            return self._packed(ins, t, lambda a: f(a.astype(np.float32)), nargs=1)
        dt = _DT[t]
        if not _is_float(dt):
            raise self._err(ins, f"{ins.op} needs a float type, got .{t}")
        self._arith(ins, 1, lambda a: np.asarray(f(a)).astype(dt))

    def _c_sqrt(self, ins):
        self._math(ins, np.sqrt)

    def _c_rsqrt(self, ins):
        self._math(ins, lambda a: 1 / np.sqrt(a))

    def _c_rcp(self, ins):
        t = self._one_type(ins)
        mode = next((m for m in ins.mods if m in ("rz", "rm", "rp")), None)
        if mode and t == "f32":
            return self._math(ins, lambda a: _round_f32(1.0 / np.asarray(a, np.float64), mode))
        self._math(ins, lambda a: np.asarray(1, a.dtype) / a)

    def _c_ex2(self, ins):
        self._math(ins, np.exp2)

    def _c_lg2(self, ins):
        self._math(ins, np.log2)

    def _c_sin(self, ins):
        self._math(ins, np.sin)

    def _c_cos(self, ins):
        self._math(ins, np.cos)

    def _c_tanh(self, ins):
        self._math(ins, np.tanh)

    def _c_copysign(self, ins):
        # copysign.f32 d, a, b: d = |b| with the sign of a
        self._arith(ins, 2, lambda a, b: np.copysign(b, a))

    def _c_testp(self, ins):
        self._need(ins, 2)
        t = self._one_type(ins)
        dt = _DT[t]
        tests = {"finite": np.isfinite, "infinite": np.isinf, "number": lambda x: ~np.isnan(x),
                 "notanumber": np.isnan,
                 "normal": lambda x: np.isfinite(x) & (np.abs(x) >= np.finfo(dt).tiny),
                 "subnormal": lambda x: (x != 0) & (np.abs(x) < np.finfo(dt).tiny)}
        which = next((m for m in ins.mods if m in tests), None)
        if which is None:
            raise self._err(ins, "testp needs .finite/.infinite/.number/.notanumber/.normal/.subnormal")
        src = self._src(ins, ins.ops[1], dt)
        wd = self._dst(ins, ins.ops[0])
        f = tests[which]
        ins.fn = lambda c, m: wd(c, np.asarray(f(np.asarray(src(c)))), False, m)

    # logic
    def _logic(self, ins, f):
        t = self._one_type(ins)
        dt = _DT[t]
        if _is_float(dt) and t not in ("f16x2", "bf16x2"):
            raise self._err(ins, f"{ins.op} needs a bit type, got .{t}")
        if t in ("f16x2", "bf16x2"):
            ins.mods = [m if m != t else "b32" for m in ins.mods]
        self._arith(ins, len(ins.ops) - 1, f)

    def _c_and(self, ins):
        self._logic(ins, lambda a, b: a & b)

    def _c_or(self, ins):
        self._logic(ins, lambda a, b: a | b)

    def _c_xor(self, ins):
        self._logic(ins, lambda a, b: a ^ b)

    def _c_not(self, ins):
        self._logic(ins, lambda a: ~a)

    def _c_cnot(self, ins):
        t = self._one_type(ins)
        dt = _DT[t]
        self._logic(ins, lambda a: (np.asarray(a) == 0).astype(dt))

    def _c_lop3(self, ins):
        self._need(ins, 5)
        u32 = np.dtype(np.uint32)
        srcs = [self._src(ins, o, u32) for o in ins.ops[1:4]]
        lut = _literal(ins.ops[4])
        if lut is None or lut[0] != "i":
            raise self._err(ins, "lop3 LUT must be an immediate")
        lut = lut[1] & 0xFF
        wd = self._dst(ins, ins.ops[0])

        def fn(c, m):
            a, b, cc = (np.asarray(s(c), np.uint32) for s in srcs)
            r = np.zeros(np.broadcast(a, b, cc).shape, np.uint32)
            for k in range(8):
                if lut >> k & 1:
                    ta = a if k & 4 else ~a
                    tb = b if k & 2 else ~b
                    tc = cc if k & 1 else ~cc
                    r |= ta & tb & tc
            wd(c, r, False, m)
        ins.fn = fn

    def _shift(self, ins, left):
        self._need(ins, 3)
        t = self._one_type(ins)
        dt = _DT[t]
        if _is_float(dt) or dt == np.bool_:
            raise self._err(ins, f"{ins.op} needs an integer type, got .{t}")
        width = dt.itemsize * 8
        a = self._src(ins, ins.ops[1], dt)
        b = self._src(ins, ins.ops[2], np.dtype(np.uint32))
        wd = self._dst(ins, ins.ops[0])
        sg = dt.kind == "i"

        def fn(c, m):
            x = np.asarray(a(c))
            s = np.minimum(np.asarray(b(c)), width)
            big = s >= width
            sd = np.minimum(s, width - 1).astype(dt)
            if left:
                r = np.where(big, dt.type(0), x << sd)
            else:
                r = x >> sd
                if not sg:
                    r = np.where(big, dt.type(0), r)
            wd(c, np.asarray(r).astype(dt), sg, m)
        ins.fn = fn

    def _c_shl(self, ins):
        self._shift(ins, True)

    def _c_shr(self, ins):
        self._shift(ins, False)

    def _c_popc(self, ins):
        t = self._one_type(ins)
        self._arith(ins, 1, lambda a: np.bitwise_count(np.asarray(a)).astype(np.uint32), res_t="u32")

    def _c_clz(self, ins):
        t = self._one_type(ins)
        w = _DT[t].itemsize * 8
        self._arith(ins, 1, lambda a: _clz(a, w), res_t="u32")

    def _c_brev(self, ins):
        t = self._one_type(ins)
        w = _DT[t].itemsize * 8
        self._arith(ins, 1, lambda a: _brev(a, w))

    def _c_bfind(self, ins):
        t = self._one_type(ins)
        dt = _DT[t]
        w = dt.itemsize * 8
        shamt = "shiftamt" in ins.mods

        def f(a):
            a = np.asarray(a)
            x = np.where(a < 0, ~a, a) if dt.kind == "i" else a
            z = _clz(x.astype(dt), w).astype(np.int64)
            pos = (w - 1 - z)
            if shamt:
                pos = w - 1 - pos
            return np.where(z == w, 0xFFFFFFFF, pos).astype(np.uint32)
        self._arith(ins, 1, f, res_t="u32")

    def _c_bfe(self, ins):
        self._need(ins, 4)
        t = self._one_type(ins)
        dt = _DT[t]
        w = dt.itemsize * 8
        a = self._src(ins, ins.ops[1], dt)
        b = self._src(ins, ins.ops[2], np.dtype(np.uint32))
        cc = self._src(ins, ins.ops[3], np.dtype(np.uint32))
        wd = self._dst(ins, ins.ops[0])
        sg = dt.kind == "i"

        def fn(c, m):
            x = np.asarray(a(c)).view(_UINT[dt.itemsize]).astype(np.uint64)
            pos = np.asarray(b(c)).astype(np.uint64) & np.uint64(0xFF)
            ln = np.asarray(cc(c)).astype(np.uint64) & np.uint64(0xFF)
            pos_c = np.minimum(pos, np.uint64(w - 1))
            ln_c = np.minimum(ln, np.uint64(w))
            field = x >> pos_c
            field = np.where(pos >= w, np.uint64(0), field)
            mask = np.where(ln_c >= 64, np.uint64(0xFFFFFFFFFFFFFFFF),
                            (np.uint64(1) << np.minimum(ln_c, np.uint64(63))) - np.uint64(1))
            r = field & mask
            if sg:
                msb = np.minimum(pos + ln_c, np.uint64(w)) - np.uint64(1)
                sbit = np.where(ln_c == 0, np.uint64(0), (x >> np.minimum(msb, np.uint64(w - 1))) & np.uint64(1))
                ext = np.where(sbit == 1, ~mask, np.uint64(0))
                r = r | ext
            r = r.astype(_UINT[dt.itemsize]).view(dt)
            wd(c, r, sg, m)
        ins.fn = fn

    def _c_bfi(self, ins):
        self._need(ins, 5)
        t = self._one_type(ins)
        dt = _DT[t]
        w = dt.itemsize * 8
        a = self._src(ins, ins.ops[1], dt)
        b = self._src(ins, ins.ops[2], dt)
        pc = self._src(ins, ins.ops[3], np.dtype(np.uint32))
        lc = self._src(ins, ins.ops[4], np.dtype(np.uint32))
        wd = self._dst(ins, ins.ops[0])

        def fn(c, m):
            x = np.asarray(a(c)).view(_UINT[dt.itemsize]).astype(np.uint64)
            y = np.asarray(b(c)).view(_UINT[dt.itemsize]).astype(np.uint64)
            pos = np.asarray(pc(c)).astype(np.uint64) & np.uint64(0xFF)
            ln = np.asarray(lc(c)).astype(np.uint64) & np.uint64(0xFF)
            ln = np.minimum(ln, np.uint64(w))
            fmask = np.where(ln >= 64, np.uint64(0xFFFFFFFFFFFFFFFF),
                             (np.uint64(1) << np.minimum(ln, np.uint64(63))) - np.uint64(1))
            ok = pos < w
            ps = np.minimum(pos, np.uint64(w - 1))
            mask = np.where(ok, fmask << ps, np.uint64(0))
            r = (y & ~mask) | ((x << ps) & mask)
            wd(c, r.astype(_UINT[dt.itemsize]).view(dt), False, m)
        ins.fn = fn

    def _c_prmt(self, ins):
        self._need(ins, 4)
        if any(m in ins.mods for m in ("f4e", "b4e", "rc8", "ecl", "ecr", "rc16")):
            raise self._err(ins, "prmt modes other than the default are not supported")
        u32 = np.dtype(np.uint32)
        a, b, s = (self._src(ins, o, u32) for o in ins.ops[1:4])
        wd = self._dst(ins, ins.ops[0])

        def fn(c, m):
            x = np.asarray(a(c)).astype(np.uint64) | (np.asarray(b(c)).astype(np.uint64) << np.uint64(32))
            sel = np.asarray(s(c)).astype(np.uint64)
            r = np.zeros(np.broadcast(x, sel).shape, np.uint64)
            for i in range(4):
                nib = (sel >> np.uint64(4 * i)) & np.uint64(0xF)
                byte = (x >> (np.uint64(8) * (nib & np.uint64(7)))) & np.uint64(0xFF)
                rep = (nib & np.uint64(8)) != 0
                byte = np.where(rep, np.where(byte & np.uint64(0x80), np.uint64(0xFF), np.uint64(0)), byte)
                r |= byte << np.uint64(8 * i)
            wd(c, r.astype(np.uint32), False, m)
        ins.fn = fn

    # comparisons
    _CMP = {"eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs",
            "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan"}

    def _cmp_fn(self, ins, cmp, dt):
        fl = _is_float(dt)
        base = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
                "gt": np.greater, "ge": np.greater_equal, "lo": np.less, "ls": np.less_equal,
                "hi": np.greater, "hs": np.greater_equal}
        if cmp in ("lo", "ls", "hi", "hs") and dt.kind == "i":
            raise self._err(ins, f"unsigned comparison .{cmp} with signed type")
        if cmp in base:
            f = base[cmp]
            if fl and cmp == "ne":  # ordered: false if either is NaN
                return lambda a, b: (a != b) & ~np.isnan(a) & ~np.isnan(b)
            return f
        if not fl:
            raise self._err(ins, f"comparison .{cmp} needs a float type")
        if cmp == "num":
            return lambda a, b: ~np.isnan(a) & ~np.isnan(b)
        if cmp == "nan":
            return lambda a, b: np.isnan(a) | np.isnan(b)
        f = base[cmp[:-1]]
        return lambda a, b: f(a, b) | np.isnan(a) | np.isnan(b)

    def _c_setp(self, ins):
        mods = ins.mods
        cmp = next((m for m in mods if m in self._CMP), None)
        if cmp is None:
            raise self._err(ins, "setp needs a comparison operator")
        t = self._one_type(ins)
        dt = _DT[t]
        if t in ("f16x2", "bf16x2", "bf16"):
            raise self._err(ins, f"setp .{t} is not supported")
        boolop = next((m for m in mods if m in ("and", "or", "xor")), None)
        ftz = "ftz" in mods and dt == np.float32
        f = self._cmp_fn(ins, cmp, dt)
        need = 4 if boolop else 3
        self._need(ins, need)
        dsts = ins.ops[0].split("|")
        wp = self._dst(ins, dsts[0])
        wq = self._dst(ins, dsts[1]) if len(dsts) > 1 else None
        sa = self._src(ins, ins.ops[1], dt, tname=t)
        sb = self._src(ins, ins.ops[2], dt, tname=t)
        sc = self._src(ins, ins.ops[3], np.dtype(np.bool_)) if boolop else None
        bop = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}.get(boolop)

        def fn(c, m):
            a, b = np.asarray(sa(c)), np.asarray(sb(c))
            if ftz:
                a, b = _ftz(a), _ftz(b)
            r = np.asarray(f(a, b))
            if bop is not None:
                cv = sc(c)
                p, q = bop(r, cv), bop(~r, cv)
            else:
                p, q = r, ~r
            wp(c, np.asarray(p), False, m)
            if wq is not None:
                wq(c, np.asarray(q), False, m)
        ins.fn = fn

    def _c_set(self, ins):
        mods = ins.mods
        cmp = next((m for m in mods if m in self._CMP), None)
        ts = self._types(ins)
        if cmp is None or len(ts) != 2:
            raise self._err(ins, "set needs a comparison and two types (set.CmpOp.dtype.stype)")
        ddt, sdt = _DT[ts[0]], _DT[ts[1]]
        boolop = next((m for m in mods if m in ("and", "or", "xor")), None)
        f = self._cmp_fn(ins, cmp, sdt)
        sa, sb = self._src(ins, ins.ops[1], sdt), self._src(ins, ins.ops[2], sdt)
        sc = self._src(ins, ins.ops[3], np.dtype(np.bool_)) if boolop else None
        bop = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}.get(boolop)
        wd = self._dst(ins, ins.ops[0])
        true = ddt.type(1.0) if _is_float(ddt) else np.array(-1).astype(ddt)[()]

        def fn(c, m):
            r = np.asarray(f(np.asarray(sa(c)), np.asarray(sb(c))))
            if bop is not None:
                r = bop(r, sc(c))
            wd(c, np.where(r, true, ddt.type(0)).astype(ddt), False, m)
        ins.fn = fn

    def _c_selp(self, ins):
        self._need(ins, 4)
        t = self._one_type(ins)
        dt = _DT[t]
        a, b = self._src(ins, ins.ops[1], dt, tname=t), self._src(ins, ins.ops[2], dt, tname=t)
        p = self._src(ins, ins.ops[3], np.dtype(np.bool_))
        wd = self._dst(ins, ins.ops[0], tname=t)
        sg = dt.kind == "i"
        ins.fn = lambda c, m: wd(c, np.where(p(c), a(c), b(c)).astype(dt), sg, m)

    def _c_slct(self, ins):
        self._need(ins, 4)
        ts = self._types(ins)
        dt, ct = _DT[ts[0]], _DT[ts[1]]
        a, b = self._src(ins, ins.ops[1], dt), self._src(ins, ins.ops[2], dt)
        cc = self._src(ins, ins.ops[3], ct)
        wd = self._dst(ins, ins.ops[0])
        ins.fn = lambda c, m: wd(c, np.where(np.asarray(cc(c)) >= 0, a(c), b(c)).astype(dt), dt.kind == "i", m)

    # conversions
    def _c_cvt(self, ins):
        if "tf32" in ins.mods:
            return self._cvt_tf32(ins)
        ts = self._types(ins)
        if len(ts) != 2:
            raise self._err(ins, "cvt needs a destination and a source type")
        dn, sn = ts
        if "f16x2" in ts or "bf16x2" in ts:
            return self._cvt_pack(ins, dn, sn)
        self._need(ins, 2)
        ddt, sdt = _DT[dn], _DT[sn]
        mode = next((m for m in ins.mods if m in _ROUND), None)
        sat = "sat" in ins.mods
        ftz = "ftz" in ins.mods
        src = self._src(ins, ins.ops[1], sdt, tname=sn)
        wd = self._dst(ins, ins.ops[0], tname=dn)
        dk, sk = _kind(dn), _kind(sn)
        sg = dk == "s"
        if sk == "p" or dk == "p":
            raise self._err(ins, "cvt does not convert predicates (use selp / setp)")

        def as_float(v):  # source value as a float array (f32 or f64)
            v = np.asarray(v)
            if sn == "bf16":
                return _bf16_to_f32(v)
            if sn == "f16":
                return v.astype(np.float32)
            return v

        if sk == "f" and dk == "f":
            if mode in ("rni", "rzi", "rmi", "rpi") and dn != sn and not (dn in ("f32", "f64") and sn != "f64"):
                pass

            def f(v):
                x = as_float(v)
                if ftz:
                    x = _ftz(x)
                if mode in ("rni", "rzi", "rmi", "rpi"):
                    x = _round_int(x, mode)
                if dn == "f64":
                    r = x.astype(np.float64)
                elif dn == "f32":
                    r = _round_f32(x.astype(np.float64), mode) if (sn == "f64" and mode in ("rz", "rm", "rp")) \
                        else x.astype(np.float32)
                elif dn == "f16":
                    r = _to_f16(x, mode)
                else:  # bf16
                    r = x.astype(np.float32)
                if sat:
                    r = np.where(np.isnan(r), 0, np.clip(r, 0, 1)).astype(r.dtype)
                if ftz and dn == "f32":
                    r = _ftz(r)
                if dn == "bf16":
                    return _f32_to_bf16(r, "rz" if mode == "rz" else "rn")
                return r
        elif sk == "f":  # float -> int: rounding, saturation to the range, NaN -> 0
            def f(v):
                x = as_float(v)
                if ftz:
                    x = _ftz(x)
                return _float_to_int(x.astype(np.float64), ddt, mode or "rzi")
        elif dk == "f":  # int -> float
            def f(v):
                v = np.asarray(v)
                if dn == "f64":
                    r = v.astype(np.float64)
                elif dn == "f32":
                    if v.dtype.itemsize == 8 or mode in ("rz", "rm", "rp"):
                        r = _round_f32(v.astype(np.float64), mode) if v.dtype.itemsize < 8 else v.astype(np.float32)
                    else:
                        r = v.astype(np.float32)
                elif dn == "f16":
                    r = _to_f16(v.astype(np.float64), mode)
                else:
                    r = v.astype(np.float32)
                if sat:
                    r = np.where(np.isnan(r), 0, np.clip(r, 0, 1)).astype(r.dtype)
                if dn == "bf16":
                    return _f32_to_bf16(r)
                return r
        else:  # int -> int
            dinfo = np.iinfo(ddt)

            def f(v):
                v = np.asarray(v)
                if sat:
                    if v.dtype == np.uint64 or ddt == np.uint64:
                        lo = np.where(v < 0, 0, v) if v.dtype.kind == "i" else v
                        if ddt == np.uint64:
                            return np.asarray(lo).astype(np.uint64)
                        return np.minimum(np.asarray(lo).astype(np.uint64), np.uint64(dinfo.max)).astype(ddt)
                    return np.clip(v.astype(np.int64), dinfo.min, dinfo.max).astype(ddt)
                # sign/zero extend from the source type, then truncate to the destination
                if ddt.itemsize >= v.dtype.itemsize:
                    return v.astype(ddt)
                return _bits(v, ddt)

        ins.fn = lambda c, m: wd(c, f(src(c)), sg, m)

    def _cvt_pack(self, ins, dn, sn):
        # cvt.rn.f16x2.f32 d, a, b: d = {cvt(a) in the high half, cvt(b) in the low half}
        if dn not in ("f16x2", "bf16x2") or sn != "f32" or len(ins.ops) != 3:
            raise self._err(ins, "only cvt.rn.f16x2.f32 / cvt.rn.bf16x2.f32 d, a, b are supported")
        f32 = np.dtype(np.float32)
        a, b = self._src(ins, ins.ops[1], f32), self._src(ins, ins.ops[2], f32)
        wd = self._dst(ins, ins.ops[0])
        bf = dn == "bf16x2"
        relu = "relu" in ins.mods

        def h(v):
            v = np.asarray(v, np.float32)
            if relu:
                v = np.where(np.isnan(v), v, np.maximum(v, 0))
            return (_f32_to_bf16(v) if bf else v.astype(np.float16).view(np.uint16)).astype(np.uint32)

        ins.fn = lambda c, m: wd(c, (h(a(c)) << np.uint32(16)) | h(b(c)), False, m)

    def _c_cvt_pack(self, ins):
        raise self._err(ins, "cvt.pack is not supported")

    # memory
    def _space(self, ins):
        sp = next((m for m in ins.mods if m in _SPACES), "generic")
        if sp == "param" and self.call_params:
            a = ins.ops[1] if ins.op in ("ld", "ldu") else ins.ops[0]
            base = re.sub(r"[\[\]\s]", "", a).split("+")[0]
            if base in self.call_params:
                return "local"
        return sp

    def _vec(self, ins):
        v = next((m for m in ins.mods if m in ("v2", "v4", "v8")), None)
        return int(v[1:]) if v else 1

    def _c_ld(self, ins):
        self._need(ins, 2)
        t = self._one_type(ins)
        dt = _DT[t]
        space = self._space(ins)
        nv = self._vec(ins)
        addr = self._addr(ins, ins.ops[1], space)
        d = ins.ops[0]
        if nv > 1:
            if not d.startswith("{"):
                raise self._err(ins, f"ld.v{nv} needs a vector destination {{...}}")
            dsts = [self._dst(ins, p, tname=t) for p in _split_operands(d.strip()[1:-1])]
            if len(dsts) != nv:
                raise self._err(ins, f"ld.v{nv} needs {nv} destination registers")
        else:
            dsts = [self._dst(ins, d, tname=t)]
        sg = dt.kind == "i"
        w = dt.itemsize
        load = self._mem_access(ins, space, dt, nv, "load")

        def fn(c, m):
            a = addr(c)
            if np.ndim(a) == 0:
                a = np.full(c.n, a, np.uint64)
            try:
                vals = load(c, a, m)
            except GPUFault as e:
                raise _fault_thread(c, e, a, m, nv * w)
            for k, wd in enumerate(dsts):
                wd(c, vals[k], sg, m)
        ins.fn = fn

    _c_ldu = _c_ld

    def _c_st(self, ins):
        self._need(ins, 2)
        t = self._one_type(ins)
        dt = _DT[t]
        space = self._space(ins)
        nv = self._vec(ins)
        addr = self._addr(ins, ins.ops[0], space)
        s = ins.ops[1].strip()
        if nv > 1:
            if not s.startswith("{"):
                raise self._err(ins, f"st.v{nv} needs a vector source {{...}}")
            srcs = [self._src(ins, p, dt, tname=t) for p in _split_operands(s[1:-1])]
            if len(srcs) != nv:
                raise self._err(ins, f"st.v{nv} needs {nv} source operands")
        else:
            srcs = [self._src(ins, s, dt, tname=t)]
        store = self._mem_access(ins, space, dt, nv, "store")

        def fn(c, m):
            a = addr(c)
            if np.ndim(a) == 0:
                a = np.full(c.n, a, np.uint64)
            vals = []
            for f in srcs:
                v = f(c)
                if np.ndim(v) == 0:
                    v = np.full(c.n, v, dt)
                vals.append(v)
            try:
                store(c, a, m, vals)
            except GPUFault as e:
                raise _fault_thread(c, e, a, m, nv * dt.itemsize)
        ins.fn = fn

    def _mem_access(self, ins, space, dt, nv, kind):
        """fn(c, addrs, mask[, vals]) for a state space; loads return a list of nv arrays."""
        w = dt.itemsize
        what = f"{space} {kind}"

        def route(c, a, lanes):
            """Split generic addresses into (global, shared, local) selections."""
            if space == "generic":
                sh, lo = c.win.route(a)
                if not sh.any() and not lo.any():
                    return [("global", None, a, lanes)]
                out = []
                g = ~(sh | lo)
                if g.any():
                    out.append(("global", g, a[g], lanes[g]))
                if sh.any():
                    out.append(("shared", sh, a[sh] - np.uint64(c.win.shared), lanes[sh]))
                if lo.any():
                    out.append(("local", lo, a[lo] - np.uint64(c.win.local), lanes[lo]))
                return out
            sp = "global" if space in ("global", "const") else space
            return [(sp, None, a, lanes)]

        def backend(c, sp):
            return {"global": c.mem, "shared": c.shared, "local": c.local}[sp]

        if kind == "load":
            def load(c, a, m):
                if space == "param":
                    return self._param_load(c, a, dt, nv, m)
                lanes = c.lanes
                if m is not None:
                    a, lanes = a[m], lanes[m]
                outs = [np.zeros(a.shape, dt) for _ in range(nv)]
                for sp, sel, aa, ll in route(c, a, lanes):
                    for k in range(nv):
                        ak = aa + np.uint64(k * w) if k else aa
                        if sp == "global":
                            v = c.mem.load(ak, dt, what)
                        else:
                            v = backend(c, sp).load(ak, ll, dt, what)
                        if sel is None:
                            outs[k] = v
                        else:
                            outs[k][sel] = v
                if m is not None:
                    full = []
                    for o in outs:
                        f = np.zeros(c.n, dt)
                        f[m] = o
                        full.append(f)
                    outs = full
                return outs
            return load

        def store(c, a, m, vals):
            if space == "param":
                raise self._err(ins, "st.param (call arguments) is not supported")
            if space == "const":
                raise self._err(ins, "st.const: the constant space is read-only")
            lanes = c.lanes
            if m is not None:
                a, lanes, vals = a[m], lanes[m], [v[m] for v in vals]
            for sp, sel, aa, ll in route(c, a, lanes):
                for k in range(nv):
                    ak = aa + np.uint64(k * w) if k else aa
                    v = vals[k] if sel is None else vals[k][sel]
                    if sp == "global":
                        c.mem.store(ak, v, dt, what)
                    else:
                        backend(c, sp).store(ak, ll, v, dt, what)
        return store

    def _param_load(self, c, a, dt, nv, m):
        outs = []
        w = dt.itemsize
        for k in range(nv):
            offs = (a + np.uint64(k * w)).astype(np.int64)
            o0 = int(offs[0])
            if (offs == o0).all():
                if o0 < 0 or o0 + w > len(c.params):
                    raise GPUFault(f"ld.param of {w} bytes at param offset {o0} is outside the "
                                   f"{len(c.params)}-byte parameter buffer", o0)
                v = np.frombuffer(c.params, dt, count=1, offset=o0)[0]
                outs.append(np.full(c.n, v, dt))
            else:
                raise GPUFault("ld.param with a per-thread address is not supported", o0)
        return outs

    # atomics
    def _c_atom(self, ins, red=False):
        ts = self._types(ins)
        if len(ts) != 1:
            raise self._err(ins, "atom needs exactly one type")
        t = ts[0]
        dt = _DT[t]
        ops = ("add", "min", "max", "inc", "dec", "and", "or", "xor", "exch", "cas")
        aop = next((m for m in ins.mods if m in ops), None)
        if aop is None:
            raise self._err(ins, f"{ins.op} needs an operation ({', '.join(ops)})")
        if any(m in ("v2", "v4", "v8") for m in ins.mods):
            raise self._err(ins, f"vector {ins.op} is not supported")
        space = self._space(ins)
        if space not in ("global", "shared", "generic"):
            raise self._err(ins, f"{ins.op} on the .{space} space is not supported")
        nsrc = 2 if aop == "cas" else 1
        need = (1 if red else 2) + nsrc
        self._need(ins, need)
        base = 0 if red else 1
        wd = None if red else self._dst(ins, ins.ops[0])
        addr = self._addr(ins, ins.ops[base], space)
        srcs = [self._src(ins, o, dt) for o in ins.ops[base + 1:]]
        if t == "f16x2" or t == "bf16x2" or t == "bf16":
            raise self._err(ins, f"{ins.op}.{t} is not supported")
        if aop in ("and", "or", "xor") and _is_float(dt):
            raise self._err(ins, f"{ins.op}.{aop} needs a bit type")
        what = f"{space} {ins.op}"
        sg = dt.kind == "i"

        def run(c, a, m):
            vals = [np.broadcast_to(np.asarray(f(c)), (c.n,)) for f in srcs]
            lanes = c.lanes
            if m is not None:
                a, lanes, vals = a[m], lanes[m], [v[m] for v in vals]
            if a.size == 0:
                return None
            # resolve the memory each address lives in, as (load, store) on that backend
            if space == "shared" or (space == "generic" and c.win.route(a)[0].all()):
                off = a - np.uint64(c.win.shared) if space == "generic" else a
                off = c.shared._flat(off, lanes, dt.itemsize, what)
                ld = lambda x: _gather(c.shared.data, x, dt)
                st = lambda x, v: _scatter(c.shared.data, x, np.asarray(v).astype(dt), dt)
            else:
                off = a
                ld = lambda x: c.mem.load(x, dt, what)
                st = lambda x, v: c.mem.store(x, v, dt, what)
            return _atomic(aop, off, vals, dt, ld, st)

        def fn(c, m):
            a = addr(c)
            if np.ndim(a) == 0:
                a = np.full(c.n, a, np.uint64)
            try:
                old = run(c, a, m)
            except GPUFault as e:
                raise _fault_thread(c, e, a, m, dt.itemsize)
            if old is None:
                return
            if wd is not None:
                if m is not None:
                    full = np.zeros(c.n, dt)
                    full[m] = old
                    old = full
                wd(c, old, sg, m)
        ins.fn = fn

    def _c_red(self, ins):
        self._c_atom(ins, red=True)

    # warp-level
    def _c_shfl(self, ins):
        if "sync" not in ins.mods:
            raise self._err(ins, "shfl without .sync is not supported")
        mode = next((m for m in ins.mods if m in ("up", "down", "bfly", "idx")), None)
        if mode is None:
            raise self._err(ins, "shfl.sync needs .up/.down/.bfly/.idx")
        self._need(ins, 5)
        u32 = np.dtype(np.uint32)
        dsts = ins.ops[0].split("|")
        wd = self._dst(ins, dsts[0])
        wp = self._dst(ins, dsts[1]) if len(dsts) > 1 else None
        a, b, cc = (self._src(ins, o, u32) for o in ins.ops[1:4])

        def fn(c, m):
            self._check_full_warps(c, m, ins)
            v = np.broadcast_to(np.asarray(a(c)), (c.n,))
            lane = c.tlin % 32
            wbase = c.lanes - lane
            wstart = c.tlin - lane
            bb = np.broadcast_to(np.asarray(b(c)), (c.n,)).astype(np.int64) & 31
            cv = np.broadcast_to(np.asarray(cc(c)), (c.n,)).astype(np.int64)
            clamp = cv & 31
            segmask = (cv >> 8) & 31
            maxl = (lane & segmask) | (clamp & ~segmask)
            minl = lane & segmask
            if mode == "up":
                j = lane - bb
                ok = j >= maxl
            elif mode == "down":
                j = lane + bb
                ok = j <= maxl
            elif mode == "bfly":
                j = lane ^ bb
                ok = j <= maxl
            else:
                j = minl | (bb & ~segmask)
                ok = j <= maxl
            j = np.where(ok, j, lane)
            src = np.where(wstart + j < c.nthreads, wbase + j, c.lanes)
            wd(c, v[src], False, m)
            if wp is not None:
                wp(c, ok, False, m)
        ins.fn = fn

    def _c_vote(self, ins):
        if "sync" not in ins.mods:
            raise self._err(ins, "vote without .sync is not supported")
        mode = next((m for m in ins.mods if m in ("all", "any", "uni", "ballot")), None)
        self._need(ins, 3)
        p = self._src(ins, ins.ops[1], np.dtype(np.bool_))
        wd = self._dst(ins, ins.ops[0])

        def fn(c, m):
            self._check_full_warps(c, m, ins)
            v = np.broadcast_to(np.asarray(p(c)), (c.n,))
            act = np.ones(c.n, bool) if m is None else m
            gid, ng = c.warp_gid, c.nwarp_groups
            pv = v & act
            npos = np.bincount(gid, weights=pv, minlength=ng)
            nact = np.bincount(gid, weights=act, minlength=ng)
            if mode == "ballot":
                w = (pv.astype(np.float64) * np.exp2((c.tlin % 32).astype(np.float64)))
                r = np.bincount(gid, weights=w, minlength=ng).astype(np.uint64).astype(np.uint32)[gid]
            elif mode == "all":
                r = (npos == nact)[gid]
            elif mode == "any":
                r = (npos > 0)[gid]
            else:
                r = ((npos == nact) | (npos == 0))[gid]
            wd(c, r, False, m)
        ins.fn = fn

    def _check_full_warps(self, c, m, ins):
        if m is None:
            return
        nact = np.bincount(c.warp_gid, weights=m, minlength=c.nwarp_groups)
        if ((nact > 0) & (nact < c.warp_size)).any():
            raise self._err(ins, "warp-level instruction executed by a partial warp (divergent lanes) "
                                 "is not supported by the mock")

    def _c_activemask(self, ins):
        self._need(ins, 1)
        wd = self._dst(ins, ins.ops[0])

        def fn(c, m):
            act = np.ones(c.n, bool) if m is None else m
            w = act.astype(np.float64) * np.exp2((c.tlin % 32).astype(np.float64))
            bits = np.bincount(c.warp_gid, weights=w, minlength=c.nwarp_groups).astype(np.uint64).astype(np.uint32)
            wd(c, bits[c.warp_gid], False, m)
        ins.fn = fn

    # ------------------------------------------------------------------------- launch
    def pack_params(self, params) -> bytes:
        """Lay out a list of values (ints, floats, or bytes per param) as the param buffer."""
        if len(params) != len(self._pvars):
            raise PTXError(f"kernel {self.name} takes {len(self._pvars)} params, got {len(params)}")
        buf = bytearray(self.param_size)
        for p, v in zip(self._pvars, params):
            dt = _DT[p.tname]
            if isinstance(v, (bytes, bytearray)):
                b = bytes(v)
                if len(b) != p.size:
                    raise PTXError(f"param {p.name}: expected {p.size} bytes, got {len(b)}")
            elif p.size != dt.itemsize:
                raise PTXError(f"param {p.name} is an aggregate of {p.size} bytes: pass bytes")
            elif _is_float(dt):
                b = np.array(v, dt).tobytes()
            else:
                b = np.array(int(v) & ((1 << (8 * dt.itemsize)) - 1), _UINT[dt.itemsize]).tobytes()
            buf[p.offset:p.offset + p.size] = b
        return bytes(buf)

    def launch(self, memory: Memory, params, grid, block, shared_bytes: int = 0, specials=None, windows=None) -> None:
        for _ in self.launch_steps(memory, params, grid, block, shared_bytes, specials, windows, step=False):
            pass

    def launch_steps(self, memory: Memory, params, grid, block, shared_bytes: int = 0, specials=None, windows=None,
                     step: bool = True):
        """launch() as a generator: yields before each instruction issue (`step`) and between batches of blocks."""
        grid = tuple(int(x) for x in (tuple(grid) + (1, 1, 1))[:3])
        block = tuple(int(x) for x in (tuple(block) + (1, 1, 1))[:3])
        if min(grid) < 1 or min(block) < 1:
            raise PTXError(f"launch of {self.name}: empty grid {grid} or block {block}")
        n = block[0] * block[1] * block[2]
        if n > 1024:
            raise PTXError(f"launch of {self.name}: {n} threads per block > 1024")
        if isinstance(params, (bytes, bytearray, memoryview)):
            pbuf = bytes(params)
            if len(pbuf) < self.param_size:
                raise PTXError(f"launch of {self.name}: param buffer has {len(pbuf)} bytes, "
                               f"kernel needs {self.param_size}")
        else:
            pbuf = self.pack_params(list(params))
        gaddr = self.module.load_globals(memory)
        shared_size = self.static_shared + (15 if shared_bytes else 0) + int(shared_bytes)
        nblocks = grid[0] * grid[1] * grid[2]
        per = max(1, min(nblocks, self.max_batch_lanes // n))
        if shared_size * per > (64 << 20):
            per = max(1, (64 << 20) // max(shared_size, 1))
        t1 = np.arange(n, dtype=np.int64)
        tid1 = [t1 % block[0], (t1 // block[0]) % block[1], t1 // (block[0] * block[1])]
        nw1 = (n + 31) // 32
        with np.errstate(all="ignore"):
            for start in range(0, nblocks, per):
                nb = min(per, nblocks - start)
                N = nb * n
                c = _Ctx()
                c.n, c.nthreads, c.nblocks = N, n, nb
                c.mem, c.params, c.gaddr = memory, pbuf, gaddr
                c.lanes = np.arange(N, dtype=np.int64)
                c.tlin = np.tile(t1, nb)
                c.bidx = c.lanes // n
                c.warp_gid = c.bidx * nw1 + c.tlin // 32
                c.nwarp_groups = nb * nw1
                ws = np.minimum(32, n - np.arange(nw1) * 32)
                c.warp_size = np.tile(ws, nb)
                bl = np.arange(start, start + nb, dtype=np.int64)
                cta = [bl % grid[0], (bl // grid[0]) % grid[1], bl // (grid[0] * grid[1])]
                tid = [np.tile(a, nb).astype(np.uint32) for a in tid1]
                ctaid = [np.repeat(a, n).astype(np.uint32) for a in cta]
                c.regs = {}
                zero = {}
                for r, dt in self.reg_types.items():
                    z = zero.get(dt)
                    if z is None:
                        z = zero[dt] = np.zeros(N, dt)
                        z.flags.writeable = False
                    c.regs[r] = z
                c.shared = _Shared(nb, shared_size, n)
                c.local = _Local(N, self.local_size, "local")
                c.clock = 0
                c.cp_async = None
                c.special = _special_fn(c, tid, block, ctaid, grid, shared_size, shared_bytes, specials or {})
                c.win = windows or _DEFAULT_WINDOWS
                c.step = step
                first = (int(cta[0][0]), int(cta[1][0]), int(cta[2][0]))
                yield from self._run_block(c, first)
                yield

    def _run_block(self, c, ctaid):
        code = self.code
        ncode = len(code)
        n = c.n
        live = np.ones(n, bool)
        conv = True  # all runnable threads at one pc
        pc = 0
        pcs = None
        waiting = None  # bool array of threads blocked at a barrier
        waitpc = None
        exited_any = False
        steps = 0
        div_steps = 0
        trace = self.trace
        budget = self.max_steps
        step = c.step
        while True:
            if step:
                yield
            steps += 1
            if steps > budget:
                raise PTXError(f"kernel {self.name}: more than {budget} instruction issues in one batch of "
                               f"blocks (an infinite loop?); raise PTXKernel.max_steps if intended")
            if conv:
                if pc >= ncode:
                    raise PTXError(f"kernel {self.name}: fell off the end of the code without ret/exit")
                ins = code[pc]
                if trace is not None:
                    trace(ins.line, ins.text, int(live.sum()) if exited_any else n, n)
                act = None if not exited_any else live
                # guard
                if ins.pred is not None:
                    pv = c.regs[ins.pred]
                    g = ~pv if ins.pneg else pv
                    if act is not None:
                        g = g & act
                    gall = bool(g.all()) if act is None else bool((g == act).all())
                    gnone = not g.any()
                else:
                    g = act
                    gall, gnone = True, False
                k = ins.kind
                try:
                    if k == "op":
                        if not gnone:
                            ins.fn(c, None if (gall and act is None) else g)
                        pc += 1
                    elif k == "bra":
                        if gall:
                            pc = ins.target
                        elif gnone:
                            pc += 1
                        else:
                            conv = False
                            pcs = np.full(n, pc + 1, np.int64)
                            pcs[g] = ins.target
                            waiting = np.zeros(n, bool)
                            waitpc = np.zeros(n, np.int64)
                    elif k == "exit":
                        if gall:
                            return
                        if not gnone:
                            live = live & ~g
                            exited_any = True
                        pc += 1
                    elif k == "bar":
                        if gnone:
                            pc += 1
                        elif not gall:
                            # a guard may differ between blocks of the batch, never inside a block
                            a0 = live if act is None else act
                            if _mixed_blocks(c, a0, g):
                                raise PTXError("divergent barrier: bar.sync under a guard that is "
                                               "false for some threads of a block")
                            conv = False
                            pcs = np.full(n, pc + 1, np.int64)
                            waiting = g.copy()
                            waitpc = np.full(n, pc, np.int64)
                        else:
                            if exited_any and self.strict_barriers:
                                wb = np.zeros(c.nblocks, bool)
                                wb[c.bidx[live]] = True
                                if (~live & wb[c.bidx]).any():
                                    raise PTXError("barrier reached after some threads of the block exited")
                            pc += 1
                    elif k == "trap":
                        if not gnone:
                            raise PTXError("trap executed")
                        pc += 1
                except PTXError as e:
                    raise e.locate(ins.line, ins.text) from None
                continue

            # divergent: minimum pc first
            runnable = live & ~waiting
            if not runnable.any():
                if not (waiting & live).any():
                    return
                wl = waiting & live
                bp = waitpc[wl]
                if (bp != bp[0]).any():
                    bb = c.bidx[wl]
                    mn = np.full(c.nblocks, ncode + 1, np.int64)
                    mx = np.full(c.nblocks, -1, np.int64)
                    np.minimum.at(mn, bb, bp)
                    np.maximum.at(mx, bb, bp)
                    bad = (mx >= 0) & (mn != mx)
                    if bad.any():
                        b0 = int(np.argmax(bad))
                        lines = sorted({code[int(p)].line for p in np.unique(bp[bb == b0])})
                        raise PTXError(f"divergent barrier: threads of one block wait at different "
                                       f"barriers (lines {lines})")
                if self.strict_barriers and exited_any:
                    wb = np.zeros(c.nblocks, bool)
                    wb[c.bidx[wl]] = True
                    if (~live & wb[c.bidx]).any():
                        i0 = code[int(bp[0])]
                        raise PTXError("barrier reached after some threads of the block exited",
                                       i0.line, i0.text)
                waiting[:] = False
                runnable = live.copy()
            div_steps += 1
            if div_steps > self.livelock_steps and div_steps & 1:
                # long without reconverging (a spin loop waiting on a thread that is further
                # ahead, e.g. a lock): let the leading threads run too, as sm_70+ scheduling does
                cur = int(np.where(runnable, pcs, -1).max())
                act = runnable & (pcs == cur)
            else:
                rp = np.where(runnable, pcs, ncode + 1)
                cur = int(rp.min())
                act = rp == cur
            if cur >= ncode:
                raise PTXError(f"kernel {self.name}: fell off the end of the code without ret/exit")
            ins = code[cur]
            if trace is not None:
                trace(ins.line, ins.text, int(act.sum()), n)
            if ins.pred is not None:
                pv = c.regs[ins.pred]
                g = act & (~pv if ins.pneg else pv)
            else:
                g = act
            k = ins.kind
            try:
                if k == "op":
                    if g.any():
                        ins.fn(c, g)
                    pcs[act] = cur + 1
                elif k == "bra":
                    pcs[act] = cur + 1
                    pcs[g] = ins.target
                elif k == "exit":
                    live &= ~g
                    exited_any = exited_any or bool(g.any())
                    pcs[act & ~g] = cur + 1
                elif k == "bar":
                    if (act & ~g).any() and g.any() and _mixed_blocks(c, act, g):
                        raise PTXError("divergent barrier: bar.sync under a guard that is false for "
                                       "some threads of a block")
                    pcs[act] = cur + 1
                    if g.any():
                        waiting |= g
                        waitpc[g] = cur
                elif k == "trap":
                    if g.any():
                        raise PTXError("trap executed")
                    pcs[act] = cur + 1
            except PTXError as e:
                raise e.locate(ins.line, ins.text) from None
            # reconverged?
            if not waiting.any():
                lp = pcs[live]
                if lp.size == 0:
                    return
                if (lp == lp[0]).all():
                    conv = True
                    pc = int(lp[0])
                    if div_steps <= self.livelock_steps:  # once a spin loop was seen, stay fair
                        div_steps = 0


def _mixed_blocks(c, act, g):
    """Whether some block has active threads on both sides of the guard g."""
    yes = np.bincount(c.bidx, weights=act & g, minlength=c.nblocks)
    no = np.bincount(c.bidx, weights=act & ~g, minlength=c.nblocks)
    return bool(((yes > 0) & (no > 0)).any())


def _fault_thread(c, e, a, m, span):
    """Name the first faulting thread (and its block) in a GPUFault's message."""
    if getattr(e, "thread", None) is not None or e.address is None:
        return e
    act = np.ones(c.n, bool) if m is None else m
    bad = int(e.address)
    for base in (0, c.win.shared, c.win.local):
        lo = a.astype(np.uint64) - np.uint64(base)
        hit = act & (lo <= np.uint64(bad)) & (np.uint64(bad) < lo + np.uint64(span))
        if hit.any():
            lane = int(np.argmax(hit))
            t = tuple(int(c.special(f"tid.{x}")[lane]) for x in "xyz")
            b = tuple(int(c.special(f"ctaid.{x}")[lane]) for x in "xyz")
            e.thread, e.block = t, b
            e.msg = f"{e.msg} (thread {t} of block {b})"
            e.args = (e._fmt(),)
            break
    return e


def _to_f16(x, mode):
    x = np.asarray(x)
    if mode in ("rz", "rm", "rp"):
        x64 = x.astype(np.float64)
        r = x64.astype(np.float16)
        r64 = r.astype(np.float64)
        fin = np.isfinite(x64)
        if mode == "rz":
            fix = fin & (np.abs(r64) > np.abs(x64))
            return np.where(fix, np.nextafter(r, np.float16(0)), r).astype(np.float16)
        if mode == "rm":
            fix = fin & (r64 > x64)
            return np.where(fix, np.nextafter(r, np.float16(-np.inf)), r).astype(np.float16)
        fix = fin & (r64 < x64)
        return np.where(fix, np.nextafter(r, np.float16(np.inf)), r).astype(np.float16)
    if x.dtype == np.float64:
        # avoid double rounding f64 -> f32 -> f16: NumPy converts f64 -> f16 directly
        return x.astype(np.float16)
    return x.astype(np.float16)


def _special_fn(c, tid, block, ctaid, grid, shared_size, dyn, over):
    n = c.n
    cache = {}
    axis = {"x": 0, "y": 1, "z": 2}

    def get(name):
        v = cache.get(name)
        if v is not None:
            if name.startswith("clock"):
                c.clock += 1
            return v
        base, _, ax = name.partition(".")
        i = axis.get(ax, 0)
        u32 = np.uint32
        if base == "tid":
            v = tid[i]
        elif base == "ntid":
            v = np.full(n, (over["ntid"] if "ntid" in over else block)[i], u32)
        elif base == "ctaid":
            v = ctaid[i]
        elif base == "nctaid":
            v = np.full(n, (over["nctaid"] if "nctaid" in over else grid)[i], u32)
        elif base == "laneid":
            v = (c.tlin % 32).astype(u32)
        elif base == "warpid":
            v = (c.tlin // 32).astype(u32)
        elif base == "nwarpid":
            v = np.full(n, (c.nthreads + 31) // 32, u32)
        elif base in ("smid", "gridid"):
            v = np.zeros(n, u32)
        elif base in ("nsmid",):
            v = np.ones(n, u32)
        elif base in ("warpsize", "WARP_SZ"):
            v = np.full(n, 32, u32)
        elif base == "dynamic_smem_size":
            v = np.full(n, over.get("dynamic_smem_size", dyn), u32)
        elif base == "total_smem_size":
            v = np.full(n, over.get("total_smem_size", shared_size), u32)
        elif base.startswith("lanemask_"):
            lane = (c.tlin % 32).astype(np.uint64)
            one = np.uint64(1)
            kind = base[9:]
            if kind == "eq":
                r = one << lane
            elif kind == "lt":
                r = (one << lane) - one
            elif kind == "le":
                r = (one << (lane + one)) - one
            elif kind == "gt":
                r = ~((one << (lane + one)) - one)
            else:
                r = ~((one << lane) - one)
            v = r.astype(np.uint32)
        elif base in ("clock", "clock64"):
            c.clock += 1
            return np.full(n, c.clock * 4, np.uint64 if base == "clock64" else u32)
        else:
            raise PTXError(f"special register %{name} is not supported")
        v.flags.writeable = False
        cache[name] = v
        return v
    return get


def _atomic(aop, off, vals, dt, ld, st):
    """Apply an atomic op for the active lanes in lane order; returns the old values."""
    uniq, inv = np.unique(off, return_inverse=True)
    inv = inv.reshape(-1)
    b = vals[0]
    if uniq.size == off.size:  # no two lanes on one address: one vector read-modify-write
        old = ld(off)
        st(off, _atom_apply(aop, old, b, vals[1] if aop == "cas" else None, dt))
        return old
    if aop == "add":  # several lanes per address: exclusive prefix sums within each address
        order = np.argsort(inv, kind="stable")
        sv = np.asarray(b)[order].astype(dt)
        cs = np.cumsum(sv, dtype=dt)
        gi = inv[order]
        starts = np.r_[0, np.flatnonzero(gi[1:] != gi[:-1]) + 1]
        gstart_cs = np.zeros(uniq.size, dt)
        gstart_cs[1:] = cs[starts[1:] - 1]
        base = ld(uniq)
        excl = cs - sv - gstart_cs[gi]
        old_sorted = (base[gi] + excl).astype(dt)
        old = np.empty_like(old_sorted)
        old[order] = old_sorted
        tot = cs[np.r_[starts[1:] - 1, cs.size - 1]] - gstart_cs
        st(uniq, (base + tot).astype(dt))
        return old
    # general case: sequential in lane order
    cur = dict(zip(uniq.tolist(), ld(uniq)))
    old = np.empty(off.size, dt)
    cv = vals[1] if aop == "cas" else None
    for i, a in enumerate(off.tolist()):
        o = cur[a]
        old[i] = o
        cur[a] = _atom_apply(aop, np.array([o], dt), np.array([b[i]], dt),
                             None if cv is None else np.array([cv[i]], dt), dt)[0]
    st(uniq, np.array([cur[a] for a in uniq.tolist()], dt))
    return old


def _atom_apply(aop, old, b, c, dt):
    if aop == "add":
        return (old + b).astype(dt)
    if aop == "min":
        return np.minimum(old, b)
    if aop == "max":
        return np.maximum(old, b)
    if aop == "and":
        return old & b
    if aop == "or":
        return old | b
    if aop == "xor":
        return old ^ b
    if aop == "exch":
        return np.broadcast_to(b, old.shape).astype(dt)
    if aop == "cas":  # atom.cas d, [a], b, c: store c if old == b
        return np.where(old == b, c, old).astype(dt)
    if aop == "inc":  # ((old >= b) ? 0 : old + 1)
        return np.where(old >= b, dt.type(0), old + dt.type(1)).astype(dt)
    if aop == "dec":  # ((old == 0) | (old > b)) ? b : old - 1
        return np.where((old == 0) | (old > b), b, old - dt.type(1)).astype(dt)
    raise PTXError(f"unsupported atomic op {aop}")
