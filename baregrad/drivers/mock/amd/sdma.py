"""The SDMA engine: SDMA rings decoded packet by packet (copy, fence, trap, poll, timestamp), for the generation's
SDMA version."""
from __future__ import annotations
from baregrad.drivers.amd import hw
from baregrad.drivers.mock.amd.state import _ts, Queue, QueueStop

class SDMAEngine:
  """SDMA ring processing."""

  # --- SDMA
  def _run_sdma(self, q: Queue) -> bool:
    g, fam, progress = q.gpu, q.gpu.family, False
    mod = hw.SDMA[fam]
    wr = 0 if q.db is None else min(self.u64(g, q.wptr), q.db)  # bytes: the doorbell carries the write pointer
    def dword(i: int) -> int: return self.u32(g, q.ring + (q.rd + 4 * i) % q.ring_size)
    while q.rd < wr:
      head = dword(0)
      try: n = hw.sdma_packet_len(fam, [head], 0)
      except ValueError as e: raise QueueStop(f"SDMA illegal packet at ring offset {q.rd % q.ring_size:#x}: {e}") from None
      if q.rd + 4 * n > wr: raise QueueStop(f"SDMA packet at ring offset {q.rd % q.ring_size:#x} runs past the write pointer")
      w = [dword(i) for i in range(n)]
      op = head & 0xFF
      if op == mod.SDMA_OP_COPY:
        f = hw.sdma_unpack(fam, "COPY_LINEAR", w)
        self._copy(g, f["dst_addr_31_0"] | (f["dst_addr_63_32"] << 32), f["src_addr_31_0"] | (f["src_addr_63_32"] << 32), f["count"] + 1, "SDMA")
      elif op == mod.SDMA_OP_FENCE:
        f = hw.sdma_unpack(fam, "FENCE", w)
        self.gpu_write(g, (f["addr_31_0"] & ~3) | (f["addr_63_32"] << 32), f["data"].to_bytes(4, "little"), "SDMA")
      elif op == mod.SDMA_OP_TRAP: self._interrupt(hw.sdma_unpack(fam, "TRAP", w)["int_context"] & 0xFFFFFFF, 28)  # SDMA_TRAP: 28 id bits
      elif op == mod.SDMA_OP_POLL_REGMEM:
        f = hw.sdma_unpack(fam, "POLL_REGMEM", w)
        if not f["mem_poll"]: raise QueueStop("SDMA POLL_REGMEM on a register is not modelled")
        addr = (f["addr_31_0"] & ~3) | (f["addr_63_32"] << 32)
        cur = self.u32(g, addr) & f["mask"]
        ok = {0: True, 1: cur < f["value"], 2: cur <= f["value"], 3: cur == f["value"],
              4: cur != f["value"], 5: cur >= f["value"], 6: cur > f["value"]}.get(f["func"])
        if ok is None: raise QueueStop(f"SDMA POLL_REGMEM function {f['func']} is reserved")
        if not ok:
          q.blocked = f"POLL_REGMEM mem[{addr:#x}] & {f['mask']:#x} {hw.WAIT_FUNCS[f['func']]} value={f['value']} (now {cur})"
          break
      elif op == mod.SDMA_OP_TIMESTAMP:
        f = hw.sdma_unpack(fam, "TIMESTAMP_GET_GLOBAL", w)
        self.gpu_write(g, (f["write_addr_31_3"] << 3) | (f["write_addr_63_32"] << 32), _ts().to_bytes(8, "little"), "SDMA")
      q.blocked = None
      q.rd += 4 * n
      q.done_packets += 1
      self.gpu_write(g, q.rptr, q.rd.to_bytes(8, "little"), "SDMA")
      progress = True
    return progress
