"""NV method values split into the fields the class headers define (hw.method_fields): each decoded field checked
against the header's own BitField and enumerant constants."""
from __future__ import annotations
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
