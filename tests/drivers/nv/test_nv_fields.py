"""NV method values split into the fields the class headers define (hw.method_fields): each decoded field checked
against the header's own BitField and enumerant constants; the QMD view's arrays (constant buffers, releases)."""
from __future__ import annotations
import pytest
from baregrad.ctypes_autogen.nv import nv_580 as nv
from baregrad.drivers.nv import hw

def _d(fields):
  return {n: (v, e) for n, v, e in fields}

def test_sem_execute_fields_match_the_header():
  f = _d(hw.method_fields(None, hw.SEM_EXECUTE, hw.SEM_EXEC_ACQUIRE_GEQ))
  assert f["OPERATION"] == (nv.NVC56F_SEM_EXECUTE_OPERATION_ACQ_STRICT_GEQ, "ACQ_STRICT_GEQ")
  assert f["ACQUIRE_SWITCH_TSG"] == (nv.NVC56F_SEM_EXECUTE_ACQUIRE_SWITCH_TSG_EN, "EN")
  assert f["PAYLOAD_SIZE"] == (nv.NVC56F_SEM_EXECUTE_PAYLOAD_SIZE_64BIT, "64BIT")
  r = _d(hw.method_fields(None, hw.SEM_EXECUTE, hw.SEM_EXEC_RELEASE))
  assert r["OPERATION"][1] == "RELEASE" and r["RELEASE_WFI"][1] == "EN" and r["RELEASE_TIMESTAMP"][1] == "EN"

def test_every_field_round_trips_through_its_bitfield():
  """Any value: each field equals the header BitField's decode, and the fields cover the word they came from."""
  for cls, meth in [(None, hw.SEM_EXECUTE), (nv.HOPPER_DMA_COPY_A, hw.LAUNCH_DMA), (None, hw.MEM_OP_A + 12)]:
    for value in (0, 0xFFFFFFFF, 0x01001002, 0xA5A5A5A5):
      fs = hw.method_fields(cls, meth, value)
      assert fs, (cls, meth)
      prefix = "NVC8B5_" if cls else "NVC56F_"
      name = hw.method_name(cls, meth)
      rebuilt = 0
      for n, v, e in fs:
        bf = getattr(nv, f"{prefix}{name}_{n}", None) or getattr(nv, f"NVC86F_{name}_{n}")
        assert bf.decode(value) == v
        if e is not None: assert getattr(nv, f"{prefix}{name}_{n}_{e}", getattr(nv, f"NVC86F_{name}_{n}_{e}", None)) == v
        rebuilt |= bf.encode(v)
      assert rebuilt & ~value == 0

def test_copy_launch_and_compute_window_fields():
  f = _d(hw.method_fields(nv.HOPPER_DMA_COPY_A, hw.LAUNCH_DMA, hw.LAUNCH_DMA_COPY))
  assert f["DATA_TRANSFER_TYPE"] == (nv.NVC8B5_LAUNCH_DMA_DATA_TRANSFER_TYPE_NON_PIPELINED, "NON_PIPELINED")
  assert f["SRC_MEMORY_LAYOUT"][1] == "PITCH" and f["FLUSH_ENABLE"][0] == 1
  w = _d(hw.method_fields(nv.HOPPER_COMPUTE_A, nv.NVC6C0_SET_SHADER_SHARED_MEMORY_WINDOW_A, 0x1_2345))
  assert w == {"BASE_ADDRESS_UPPER": (nv.NVC6C0_SET_SHADER_SHARED_MEMORY_WINDOW_A_BASE_ADDRESS_UPPER.decode(0x1_2345), None)}
  assert hw.method_fields(nv.HOPPER_COMPUTE_A, 0x3ffc, 1) == []   # no method there, no fields

def test_format_methods_shows_the_fields():
  words = hw.sem_words(0x1000, 7, hw.SEM_EXEC_RELEASE)
  text = hw.format_methods(words)
  assert "SEM_EXECUTE" in text and "OPERATION=RELEASE" in text and "RELEASE_WFI=EN" in text and "PAYLOAD_SIZE=64BIT" in text, text

def test_gpfifo_view_has_no_spurious_empty_entry():
  """With GP_GET == GP_PUT and the whole ring shown, the empty slot at GP_GET is not listed as an entry; a zero entry
  the GPU is still to fetch is."""
  e = [hw.gp_entry(0x1000, 4), hw.gp_entry(0x2000, 6)] + [0] * 6
  text = hw.format_gpfifo(e, 2, 2, last=len(e))
  assert "pushbuffer 0x0 0 words" not in text and "[    0] done    pushbuffer 0x1000 4 words" in text, text
  assert "[    2] pending pushbuffer 0x0 0 words" in hw.format_gpfifo(e, 2, 3, last=len(e))
  assert hw.format_gpfifo(e, 1, 2).splitlines()[1:] == ["  [    0] done    pushbuffer 0x1000 4 words",
                                                        "  [    1] pending pushbuffer 0x2000 6 words"]

def _memory(regions: dict[int, bytes]):
  def read(addr: int, n: int) -> bytes:
    for base, data in regions.items():
      if base <= addr and addr + n <= base + len(data): return data[addr - base:addr - base + n]
    raise KeyError(hex(addr))
  return read

def test_exec_is_followed_by_its_launch():
  """An EXEC in the commands view is followed by the launch its QMD describes: the kernel's name from the program image,
  and grid, block, shared size and registers each equal to the QMD header field (clcbc0qmd.h via qmd.py) at its bits."""
  from baregrad.ctypes_autogen.nv import qmd
  image, code_off = hw.pack_image(".entry kern() {}", "kern", b"\0" * 32)
  prog_base, qmd_addr = 0x10_0000, 0x20_0000
  q = hw.build_qmd(prog_base + code_off, 0x30_0000, 0x100, (3, 2, 1), (64, 2, 1), 4096, 40, max_shared=228 << 10)
  read = _memory({prog_base: image, qmd_addr: b"".join(x.to_bytes(4, "little") for x in q)})
  words = hw.exec_words(qmd_addr)
  text = hw.format_commands(words, {hw.SUBC_COMPUTE: nv.HOPPER_COMPUTE_A}, read=read)
  P = "NVCBC0_QMDV04_00_"
  f = lambda n: hw.nv_bits(q, *getattr(qmd, P + n))
  want = (f"launch 'kern' grid=({f('GRID_WIDTH')}, {f('GRID_HEIGHT')}, {f('GRID_DEPTH')}) "
          f"block=({f('CTA_THREAD_DIMENSION0')}, {f('CTA_THREAD_DIMENSION1')}, {f('CTA_THREAD_DIMENSION2')}) "
          f"shared={f('SHARED_MEMORY_SIZE')} regs={f('REGISTER_COUNT')}")
  assert want == "launch 'kern' grid=(3, 2, 1) block=(64, 2, 1) shared=4096 regs=40"
  assert want in text and f"program={prog_base + code_off:#x}" in text, text
  # no image there: the name comes from the driver's QMD -> kernel table, and an unreadable QMD is said so
  read2 = _memory({qmd_addr: b"".join(x.to_bytes(4, "little") for x in q)})
  assert "launch 'other' grid=(3, 2, 1)" in hw.format_commands(words, None, read=read2, names={qmd_addr: "other"})
  assert "cannot read the QMD at 0x200000" in hw.format_commands(words, None, read=_memory({}))

def test_driver_queue_state_names_the_launch():
  """The driver's own queue state (what HCQTimeout, HANG? and channel errors print) follows each EXEC to its launch."""
  from baregrad.drivers.port import make_port
  from baregrad.drivers.mock.nv import MockNVGPU
  from baregrad.drivers.nv import NVDevice
  from baregrad.drivers.nv.testkernels import KERNELS
  mock = MockNVGPU()
  dev = NVDevice("NV", port=make_port(mock))
  try:
    prg = dev.runtime(dev, "idx", KERNELS.encode())
    out = dev.allocator.alloc(4 * 64)
    prg(out, vals=(64,), global_size=(2, 1, 1), local_size=(32, 1, 1))
    dev.synchronize()
    assert "launch 'idx' grid=(2, 1, 1) block=(32, 1, 1) shared=0" in dev.queue_state()
    assert "launch 'idx' grid=(2, 1, 1)" in mock.dump_channel(dev.channels["compute"].token)
  finally: dev.close()


# per QMD version: the qmd header's class prefix for its arrays, and how it names a release's address/payload fields
_QMD_HDR = {3: ("NVC6C0_QMDV03_00_", "RELEASE{i}_ADDRESS", "RELEASE{i}_"), 4: ("NVCBC0_QMDV04_00_", "RELEASE_SEMAPHORE{i}_ADDR", "RELEASE_"),
            5: ("NVCEC0_QMDV05_00_", "RELEASE_SEMAPHORE{i}_ADDR", "RELEASE_")}

@pytest.mark.parametrize("version", [3, 4, 5])
def test_qmd_view_shows_every_constant_buffer_and_release(version):
  """format_qmd / read_qmd show the QMD's arrays: constant buffer 5 and release 2 are written here with the qmd
  header's own macros (CONSTANT_BUFFER_*(i), RELEASE_*(i) / RELEASE<i>_*, RELEASE_SEMAPHORE<i>_*), and each comes back
  under its index with its address, size, payload and enumerated values by the header's names."""
  from baregrad.ctypes_autogen.nv import qmd
  P, addr_name, rel = _QMD_HDR[version]
  w = hw.build_qmd(0x2000317f00, 0x2000010200, 0x220, (2, 1, 1), (32, 1, 1), 0, 16, (0x1000, 9), version=version)
  F = lambda n, i=None: (getattr(qmd, P + n)(i) if i is not None else getattr(qmd, P + n))
  sh = 6 if version >= 4 else 0
  lo_n, hi_n = ("ADDR_LOWER_SHIFTED6", "ADDR_UPPER_SHIFTED6") if version >= 4 else ("ADDR_LOWER", "ADDR_UPPER")
  cb5 = 0x7f00001c0
  hw.set_bits(w, *F("CONSTANT_BUFFER_VALID", 5), 1)
  hw.set_bits(w, *F("CONSTANT_BUFFER_" + lo_n, 5), (cb5 >> sh) & 0xFFFFFFFF)
  hw.set_bits(w, *F("CONSTANT_BUFFER_" + hi_n, 5), cb5 >> sh >> 32)
  hw.set_bits(w, *F("CONSTANT_BUFFER_SIZE_SHIFTED4", 5), 0x40 >> 4)
  ri = lambda n: F(rel.format(i=2) + n) if version == 3 else F(rel + n, 2)
  hw.set_bits(w, *ri("ENABLE"), 1)
  hw.set_bits(w, *ri("STRUCTURE_SIZE"), getattr(qmd, P + rel.format(i=2) + "STRUCTURE_SIZE_SEMAPHORE_ONE_WORD"))
  hw.set_bits(w, *F(addr_name.format(i=2) + "_LOWER"), 0x5000)
  hw.set_bits(w, *F(addr_name.format(i=2) + "_UPPER"), 0x12)
  hw.set_bits(w, *F(addr_name.format(i=2).replace("_ADDRESS", "_ADDR").replace("_ADDR", "_PAYLOAD") + "_LOWER"), 77)
  q = hw.read_qmd(w, version)
  assert q["cbanks"] == {0: (0x2000010200, 0x220), 5: (cb5, 0x40)}, q["cbanks"]
  assert set(q["releases"]) == {0, 2} and q["releases"][0][:3] == (0x1000, 9, 1), q["releases"]
  assert q["releases"][2] == (0x12_00005000, 77, 0, getattr(qmd, P + rel.format(i=2) + "STRUCTURE_SIZE_SEMAPHORE_ONE_WORD"))
  text = hw.format_qmd(w, version)
  cbs = [l for l in text.splitlines() if l.startswith("    [")]
  assert len(cbs) == 8 + 3, text   # 8 constant buffers and 3 release semaphores in each of these layouts
  assert "    [5] VALID=TRUE" in text and f"ADDR={cb5:#x}" in text and "SIZE=0x40" in text, text
  assert "STRUCTURE_SIZE=SEMAPHORE_ONE_WORD" in text and "ADDR=0x1200005000" in text.replace("ADDRESS=", "ADDR=") and "PAYLOAD=0x4d" in text, text
  assert "    [3] VALID=0 (all fields 0)" in text and "RELEASE_SEMAPHORE2_ADDR_LOWER" not in text and "RELEASE2_ADDRESS_LOWER" not in text
  # the element count stops where the header's next field starts: a ninth constant buffer's bits belong to another field
  assert len(hw.qmd_element_fields(version)["CONSTANT_BUFFER"]) == 8 and len(hw.qmd_element_fields(version)["RELEASE"]) == 3
