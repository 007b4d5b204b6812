"""The compute engine: a QMD launch (the QMD version of the generation's compute class, constant bank 0 as the SASS
reads it, the shader windows, shared- and local-memory checks), the PTX found before the program run by the PTX
interpreter (drivers/mock/ptx), launches in flight interleaved and their hazards reported."""
from __future__ import annotations
import ctypes, struct, time
from typing import Any
from baregrad.ctypes_autogen.nv import nv_580 as nv
from baregrad.drivers.mock.common import rup, MMUFault
from baregrad.drivers.mock.nv.state import Channel, g, GPUError, Work
from baregrad.drivers.nv import hw

class ComputeEngine:
  """QMD launches, their checks, and the work in flight on a channel."""

  def _check_shared_window(self, ch: Channel, cls: int, window: int, m: hw.Method) -> None:
    # docs/hw/h100-580.159.04-findings.md finding 3 (shared window not 4 GiB aligned, Xid 69): HOPPER_COMPUTE_A refused
    # a shared window of 0xFE000000 with Xid 69 GR class error at offset 0x2a4,
    # ErrorCode 4. The SASS of sm_90+ builds generic shared addresses from SR_SWINHI (the window's upper 32 bits), so
    # the window must be 4 GiB aligned; Mesa nvk (nvk_cmd_dispatch.c) applies the same alignment to every class from
    # HOPPER_COMPUTE_A on, Blackwell included (hw.SHARED_WINDOW_ALIGN, hw.SHADER_WINDOWS)
    if cls in (nv.HOPPER_COMPUTE_A, nv.BLACKWELL_COMPUTE_A, nv.BLACKWELL_COMPUTE_B) and window % (1 << 32):
      raise GPUError(69, f"Class Error: channel 0x{ch.token:08x}, Class {cls:08x}, Offset {m.method:08x}, Data {m.value:08x}, ErrorCode 00000004",
                     f"{hw.class_name(cls)} refused shared memory window {window:#x} (SET_SHADER_SHARED_MEMORY_WINDOW_B): not 4 GiB aligned")

  def _launch(self, ch: Channel, subc: int, qmd_addr: int) -> None:
    """Check and queue the grid a QMD describes; it runs when the channel next waits for idle (_drain). What the GPU
    takes from where: geometry, shared/local sizes and the program from the QMD; %ntid, %nctaid, the windows compiled
    code converts with, the stack pointer and %dynamic_smem_size from constant bank 0 at the offsets the SASS of this
    generation reads (hw.CBANK0; docs/hw/h100-580.159.04-findings.md finding 5, launch values in
    constant bank 0); the code from the program address (the PTX before it: this mock runs PTX)."""
    from baregrad.drivers.mock.ptx import PTXModule, PTXError, Windows
    # docs/hw/h100-580.159.04-findings.md finding 6a (a QMD relaunched in flight, Xid 109): one QMD launched again while
    # its previous launch was still in flight (three times in one GPFIFO
    # entry) took the H100's channel down with Xid 109 CTX SWITCH TIMEOUT
    if any(w.qmd == qmd_addr for w in ch.inflight):
      raise GPUError(109, f"channel 0x{ch.token:08x}, errorString CTX SWITCH TIMEOUT, Info 0x0",
                     f"QMD {qmd_addr:#x} launched again while its previous launch is in flight (no wait-for-idle between)")
    # a launch whose QMD or constant bank changed between the doorbell and now ran with what the host wrote later
    snap = ch.snapshots.pop((ch.gp_get, qmd_addr), None)
    if snap is not None and snap != self._launch_bytes(qmd_addr):
      msg = f"QMD {qmd_addr:#x} or its constant bank 0 was rewritten after the launch was submitted, before it ran (patched under a queued launch)"
      self.violations.append(msg)
      self.log.append(f"mock GPU: {msg}")
    ver = hw.QMD_VERSION[self.arch_info.compute]  # the QMD layout this GPU's compute class reads
    q = hw.read_qmd(hw.words_of(self.read_gpu(qmd_addr, hw.QMD_LAYOUTS[ver].nbytes)), ver)
    self.launches.append({"qmd": qmd_addr, **q})
    bad = lambda why: GPUError(13, f"Graphics Exception: channel 0x{ch.token:08x}, Class {ch.subc_class[subc]:08x}: {why}", why)
    if q["type"] != hw.QMD_TYPE_GRID_CTA or q["major"] != ver:
      raise bad(f"QMD at {qmd_addr:#x}: type {q['type']} major version {q['major']} ({hw.class_name(self.arch_info.compute)} launches QMD v0{ver} grids)")
    if q["cbank0"] is None: raise bad(f"QMD at {qmd_addr:#x}: constant bank 0 not valid (no kernel parameters)")
    # the code: the PTX right before it, and its length (IMAGE_TRAILER)
    gcc = lambda e, why: self._mmu(ch, e, "GRAPHICS GPC0", "GPCCLIENT_GCC", why)
    try: tr = hw.read_image_trailer(self.read_gpu(q["program"] - hw.IMAGE_TRAILER, hw.IMAGE_TRAILER))
    except MMUFault as e: raise gcc(e, f"program at {q['program']:#x} is not mapped") from None
    if tr is None: raise bad(f"program at {q['program']:#x}: no PTX before the code; this mock runs PTX only, not SASS")
    tlen, nlen, code_len = tr
    # docs/hw/h100-580.159.04-findings.md finding 4 (instruction prefetch past the image, Xid 31): the
    # instruction/constant cache (GPCCLIENT_GCC) fetches past the code it runs; an image that ended at
    # its code faulted (Xid 31 FAULT_PTE ACCESS_TYPE_VIRT_READ at the next page). The mock faults whenever the fetch
    # (hw.INSTRUCTION_PREFETCH past the code) leaves the image's allocation; the GPU only where that page is unmapped.
    span = self._mapping_of(q["program"])
    reach = q["program"] + code_len + hw.INSTRUCTION_PREFETCH
    if span is not None and reach > span[0] + span[1]:
      raise gcc(MMUFault(span[0] + span[1], "", "ACCESS_TYPE_VIRT_READ"),
                f"instruction prefetch of the program at {q['program']:#x} ({code_len:#x} bytes of code) reaches {reach:#x}, "
                f"past the end of its allocation {span[0]:#x}+{span[1]:#x}")
    start = q["program"] - hw.image_prefix_bytes(tlen, nlen)
    text = self.read_gpu(start, tlen).decode()
    name = self.read_gpu(start + tlen + 1, nlen).decode()
    mod = self._ptx_cache.get(text)
    try:
      if mod is None: mod = self._ptx_cache[text] = PTXModule(text)
      k = mod.kernel(name)
    except PTXError as e: raise bad(f"kernel {name}: {e}") from None
    # constant bank 0 as the SASS of this generation reads it (docs/hw/h100-580.159.04-findings.md finding 5)
    L = hw.cbank0_layout(self.arch)
    try: cb = self.read_gpu(q["cbank0"], max(q["cbank0_size"], L.params + k.param_size))
    except MMUFault as e: raise gcc(e, f"constant bank 0 at {q['cbank0']:#x} is not mapped") from None
    u32 = lambda off: int.from_bytes(cb[off:off + 4], "little")
    u64 = lambda off: int.from_bytes(cb[off:off + 8], "little")
    sw = (g(ch, subc, nv.NVC6C0_SET_SHADER_SHARED_MEMORY_WINDOW_A) << 32) | g(ch, subc, nv.NVC6C0_SET_SHADER_SHARED_MEMORY_WINDOW_B)
    lw = (g(ch, subc, nv.NVC6C0_SET_SHADER_LOCAL_MEMORY_WINDOW_A) << 32) | g(ch, subc, nv.NVC6C0_SET_SHADER_LOCAL_MEMORY_WINDOW_B)
    # generic <-> shared: sm_80/89 SASS adds c[0x0][0x18]; sm_90+ takes the window's upper half from SR_SWINHI
    cvta_shared = u64(L.shared_window) if self.arch_info.sm_version < 0x900 else sw & ~0xFFFFFFFF
    win = Windows(shared=sw, local=lw, size=hw.SHADER_WINDOW_BYTES, cvta_shared=cvta_shared, cvta_local=u64(L.local_window))
    if q["shared"]: self._check_sm_config(ch, ch.subc_class[subc], qmd_addr, name, q)
    # shared memory: the kernel's data starts at L.shared_base in the CTA's allocation (0x400 on sm_90+)
    dyn = 0
    if k.static_shared or q["shared"]:
      dyn = q["shared"] - L.shared_base - k.static_shared
      if dyn < 0:
        raise bad(f"Out Of Range Address: kernel {name} uses {k.static_shared} bytes of shared memory from offset {L.shared_base:#x}, the launch "
                  f"allocates {q['shared']} (SHARED_MEMORY_SIZE)")
    # local memory: a frame needs the stack pointer at the top of the per-thread window and a local memory big enough
    if q["local"]:
      sp = u32(L.stack)
      if not hw.INITIAL_STACK <= sp <= hw.SHADER_WINDOW_BYTES:
        raise bad(f"Out Of Range Address: kernel {name} has {q['local']} bytes of local memory per thread, its stack pointer "
                  f"c[0x0][{L.stack:#x}] = {sp:#x} puts the frame outside the thread's local window")
      self._check_local_memory(ch, subc, q["local"], name)
    specials = {"ntid": struct.unpack_from("<III", cb, L.ntid), "nctaid": struct.unpack_from("<III", cb, L.nctaid),
                "dynamic_smem_size": u32(L.dyn_shared), "total_smem_size": q["shared"] - u32(L.reserved_shared)}
    # the registers a thread gets (QMD REGISTER_COUNT), where the image carries compiled code (the driver's stand-in
    # for a missing cubin is 16 zero bytes, with a nominal count): the budget setmaxnreg moves (mock/ptx/wgmma.py)
    if code_len > 16 or any(self.read_gpu(q["program"], code_len)): specials["regs"] = q["regs"]
    params = cb[L.params:L.params + k.param_size]
    ch.inflight.append(Work("launch", f"kernel {name}", qmd=qmd_addr, release=q["release0"],
                            run=(k, params, q["grid"], q["block"], max(dyn, 0), specials, win)))

  def _check_sm_config(self, ch: Channel, cls: int, qmd: int, name: str, q: dict[str, Any]) -> None:
    """SHARED_MEMORY_SIZE and the SM_CONFIG fields of a launch with shared memory (docs/hw/h100-580.159.04-2026-11-28.md,
    finding 8): on the H100, a size of 0x6c0 bytes, and MIN/TARGET naming 4, 24 or 48 KiB, failed with Xid 13
    SKEDCHECK14_SHARED_MEMORY_SIZE; 0x680, and carveouts the SM has (8..64 KiB), ran. The carveouts per generation, and
    that a block's shared memory fits the carveout it runs in, are the CUDA C Programming Guide's (hw.sm_carveouts);
    MIN <= TARGET <= MAX is what the clcbc0qmd.h field names say."""
    mn, mx, tg = q["smcfg"]
    ok = {k // 4 + 1: k for k in hw.sm_carveouts(self.arch_info.max_shared)}
    why = None
    base = hw.cbank0_layout(self.arch).shared_base
    if q["shared"] % 128: why = f"SHARED_MEMORY_SIZE {q['shared']:#x} is not a multiple of 128 bytes"
    # a block's own shared memory (past the reserved bytes, CBank0Layout.shared_base) is capped per generation: the CUDA
    # C Programming Guide's "maximum amount of shared memory per thread block" (opt-in: 163 KB on 8.0, 99 KB on
    # 8.6/8.9/12.0, 227 KB on 9.0/10.0; hw.GPUArch.max_shared). How the SM reports a QMD above it is not observed; this
    # mock reports it as the SKEDCHECK14 failure finding 8 saw for the other shared-size errors.
    elif q["shared"] - base > self.arch_info.max_shared:
      why = (f"SHARED_MEMORY_SIZE {q['shared']} leaves {q['shared'] - base} bytes for the block, above the "
             f"{self.arch_info.max_shared} a block may use on {self.arch}")
    elif mn not in ok or tg not in ok:
      why = f"MIN/TARGET_SM_CONFIG_SHARED_MEM_SIZE {mn}/{tg} are not carveouts of this SM (KiB / 4 + 1 of {sorted(ok.values())})"
    elif ok[tg] << 10 < q["shared"]:
      why = f"SHARED_MEMORY_SIZE {q['shared']} does not fit the {ok[tg]} KiB carveout TARGET_SM_CONFIG_SHARED_MEM_SIZE {tg} names"
    elif not mn <= tg <= mx: why = f"SM_CONFIG_SHARED_MEM_SIZE MIN {mn} TARGET {tg} MAX {mx} out of order"
    if why is not None:   # the three lines the H100 prints for it; ESR 0x40702c holds the QMD's address >> 8
      raise GPUError(13, "Graphics Exception: SKEDCHECK14_SHARED_MEMORY_SIZE failed\n"
                     f"Graphics Exception: ESR 0x407020=0x200000 0x407028=0x3f 0x40702c={qmd >> 8:#x} 0x407030=0x0\n"
                     f"Graphics Exception: channel 0x{ch.token:08x}, Class {cls:08x}, Offset 00000000, Data 00000000", f"kernel {name}: {why}")

  def _check_local_memory(self, ch: Channel, subc: int, per_thread: int, name: str) -> None:
    """SET_SHADER_LOCAL_MEMORY_A/B (base) and _NON_THROTTLED_A/B (bytes per TPC) must cover every thread of every TPC."""
    base = (g(ch, subc, nv.NVC6C0_SET_SHADER_LOCAL_MEMORY_A) << 32) | g(ch, subc, nv.NVC6C0_SET_SHADER_LOCAL_MEMORY_B)
    per_tpc = (g(ch, subc, nv.NVC6C0_SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A) << 32) | g(ch, subc, nv.NVC6C0_SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_B)
    need = rup(per_thread * 32, 0x200) * 64 * self.sm_per_tpc
    if per_tpc < need:
      raise GPUError(13, f"Graphics Exception: channel 0x{ch.token:08x}: local memory of {per_tpc:#x} bytes per TPC, kernel {name} needs {need:#x}",
                     f"kernel {name}: {per_thread} bytes of local memory per thread need {need:#x} bytes per TPC; the channel set {per_tpc:#x}")
    end = base + per_tpc * self.gpcs * self.tpc_per_gpc
    span = self._mapping_of(base) if base else None
    if span is None or end > span[0] + span[1]:
      raise self._mmu(ch, MMUFault(base if span is None else span[0] + span[1], "", "ACCESS_TYPE_VIRT_WRITE"), "GRAPHICS GPC0", "GPCCLIENT_T1_0",
                      f"kernel {name}: shader local memory [{base:#x}, {end:#x}) is not mapped")

  def _drain(self, ch: Channel) -> None:
    """Finish the work in flight on a channel: what was launched (or copied) since the last wait-for-idle runs
    concurrently, as on the GPU (docs/hw/h100-580.159.04-findings.md finding 6b, overlapping launches:
    a consumer launched right after its producer read 100% stale values).
    The grids are interleaved instruction by instruction, the most recently launched first; every work item records
    the allocations it reads and writes, and a read or write of what an earlier concurrent item writes (or a write
    of what it reads) is reported as a hazard."""
    if not ch.inflight: return
    from baregrad.drivers.mock.ptx import PTXError, GPUFault
    work, ch.inflight = ch.inflight, []
    mem = self._ptx_memory()
    concurrent = len(work) > 1
    steps = []
    for w in reversed(work):
      if w.kind == "launch":
        k, params, grid, block, dyn, specials, win = w.run
        steps.append((w, k.launch_steps(mem, params, grid, block, dyn, specials, win, step=concurrent)))
      else: steps.append((w, self._copy_steps(w)))
    try:
      while steps:
        for item in list(steps):
          w, gen = item
          mem.recorder = w.access if concurrent else None
          try: next(gen)
          except StopIteration: steps.remove(item)
    except GPUFault as e:
      # shared or local memory past what the launch provides is no MMU fault: the SM raises a warp exception (cuda-gdb
      # documentation, "GPU Error Reporting": CUDA_EXCEPTION_5 Warp Out-of-range Address, "any thread within a warp
      # accesses an address that is outside the valid range of local or shared memory regions"), which the kernel
      # log shows as Xid 13 "Graphics SM Warp Exception ... Out Of Range Address"
      if e.space in ("shared", "local"):
        raise GPUError(13, f"Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address\n"
                           f"Graphics Exception: channel 0x{ch.token:08x}: {w.what}", f"{w.what}: {e}") from None
      raise self._mmu(ch, MMUFault(int(e.address or 0), "", "ACCESS_TYPE_VIRT_WRITE" if "store" in str(e) or "atom" in str(e) or "red" in str(e)
                                   else "ACCESS_TYPE_VIRT_READ"), "GRAPHICS GPC0", "GPCCLIENT_T1_0", f"MMU fault in {w.what}: {e}") from None
    except MMUFault as e: raise self._mmu(ch, e, "GRAPHICS", "HUBCLIENT_CE0", f"{w.what}: {e}") from None
    except PTXError as e:
      raise GPUError(13, f"Graphics Exception: channel 0x{ch.token:08x}: {w.what}: {e}", f"{w.what}: {e} (the mock's PTX interpreter)") from None
    finally: mem.recorder = None
    if concurrent: self._report_hazards(work)
    for w in work:  # completions: QMD releases and copy semaphores
      if w.release is not None:
        addr, payload, wide = w.release
        self.write_gpu(addr, payload.to_bytes(8 if wide else 4, "little"))
      if w.sem is not None:
        sa, payload, st = w.sem
        self.write_gpu(sa, payload.to_bytes(4, "little"))
        if st == nv.NVC8B5_LAUNCH_DMA_SEMAPHORE_TYPE_RELEASE_SEMAPHORE_WITH_TIMESTAMP:
          self.write_gpu(sa + 8, time.perf_counter_ns().to_bytes(8, "little"))

  def _report_hazards(self, work: list[Work]) -> None:
    regions = {va: f"{m.kind} memory at {va:#x}+{n:#x}" for va, n, m, _ in self.va_map}
    for i, a in enumerate(work):
      for b in work[i + 1:]:
        ar, aw = {v for v, k in a.access if k == "r"}, {v for v, k in a.access if k == "w"}
        br, bw = {v for v, k in b.access if k == "r"}, {v for v, k in b.access if k == "w"}
        for kind, hit in (("read-after-write", aw & br), ("write-after-write", aw & bw), ("write-after-read", ar & bw)):
          for va in sorted(hit):
            msg = (f"{kind} hazard: {b.what} and {a.what} ran concurrently (no wait-for-idle between them) and both touch "
                   f"{regions.get(va, hex(va))}")
            self.hazards.append(msg)
            self.log.append(f"mock GPU: {msg}")

  def _ptx_memory(self) -> Any:
    """The interpreter's view of the GPU VA space: every mapping, backed by the same host pages (no copies)."""
    from baregrad.drivers.mock.ptx import Memory as PTXMemory
    import numpy as np
    key = tuple((va, n, id(m), off) for va, n, m, off in self.va_map)
    if self._ptx_mem is None or self._ptx_mem[0] != key:
      pm = PTXMemory()
      for va, n, m, off in self.va_map:
        pm.map(va, n, data=np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(m.view + off)), name=m.kind)
      self._ptx_mem = (key, pm)
    return self._ptx_mem[1]
