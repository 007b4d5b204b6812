"""The RDNA3 decoder against LLVM's own view: for every kernel of a corpus, LLVM's assembly of the kernel (llvmlite's
emit_assembly, the same target machine) and our decoding of the object's bytes must agree instruction by instruction:
the same count (so every instruction length is right), the same mnemonic and operands as LLVM prints them, and every
branch landing on the instruction LLVM's label names.

The corpus here is the renderer test set, a sample of the Tensor corpus and the LDS kernels (about 20 s); RDNA3_XCHECK_ALL=1
checks the whole Tensor corpus (several hundred kernels, a few minutes)."""
from __future__ import annotations
import collections, os, re, struct
import pytest
from hypothesis import given, settings, strategies as st
from baregrad.ir.dtype import dtypes
from baregrad.codegen.program import get_program
from baregrad.codegen.renderer.amdgpu import AMDGPURenderer
from baregrad.drivers.amd_compile import AMDCompiler, load_code_object
from baregrad.drivers.amd.isa import rdna3_opcodes as opcodes
from baregrad.drivers.amd.isa.rdna3_decode import Inst, decode, disassemble, DecodeError, inline_value, vop_sig
from baregrad.drivers.mock.rdna3.machine import compile_inst
from baregrad.drivers.mock.ptx import Memory
from tests.drivers.nv.test_ptx_renderer import kernel_set
from tests.drivers.amd.test_amdgpu_renderer import tensor_corpus, lds_kernel

def parse_llvm_asm(asm: str, name: str) -> tuple[list[str | int], dict[str, int]]:
  """LLVM's instructions of kernel `name` (whitespace normalized; an int n is a `.p2align n` the assembler pads with
  s_nop) and its labels (name -> index in that list)."""
  lines = asm.splitlines()
  insts: list[str | int] = []
  labels: dict[str, int] = {}
  for l in lines[lines.index(f"{name}:") + 1:]:
    s = l.split(";")[0].strip()
    if s.startswith((".Lfunc_end", ".section")): break
    if not s: continue
    if s.endswith(":"): labels[s[:-1]] = len(insts); continue
    if s.startswith(".p2align"): insts.append(int(s.split()[1].split(",")[0])); continue
    assert not s.startswith("."), f"directive inside {name}: {s}"
    insts.append(re.sub(r"\s+", " ", s))
  return insts, labels

examples: dict[str, Inst] = {}

def cross_check(src: str, name: str, c: AMDCompiler, seen: collections.Counter) -> None:
  ref, labels = parse_llvm_asm(c.assembly(src), name)
  co = load_code_object(c.compile_cached(src))
  k = co.kernels[name]
  dec = iter(disassemble(co.image, k.code_offset, k.code_offset + k.code_size))
  mine, at = [], []      # our instruction for each of LLVM's, and the byte offset each entry of `ref` starts at
  for t in ref:
    nxt = next(dec, None)
    if isinstance(t, int):   # alignment: s_nop padding up to a 2**t boundary (none if already aligned)
      at.append(nxt.offset if nxt is not None else k.code_offset + k.code_size)
      while nxt is not None and (nxt.offset - k.code_offset) % (1 << t):
        assert nxt.name == "s_nop", f"{name}: {nxt} inside .p2align {t} padding"
        nxt = next(dec, None)
      dec = iter(([nxt] if nxt is not None else []) + list(dec))
      continue
    assert nxt is not None, f"{name}: we decode fewer instructions than LLVM printed"
    at.append(nxt.offset); mine.append((nxt, t))
  assert next(dec, None) is None, f"{name}: we decode more instructions than LLVM printed"
  offs = at + [k.code_offset + k.code_size]
  for i, t in mine:
    lab = {}
    if (m := re.search(r"(\.LBB\w+)$", t)) and "target" in i.mods: lab = {offs[labels[m.group(1)]]: m.group(1)}
    assert re.sub(r"\s+", " ", i.text(lab)) == t, f"{name} at {i.offset:#x} [{i.encoding_hex}]: we print {i.text(lab)!r}, LLVM {t!r}"
    seen[i.name] += 1
    if i.y is not None: seen[i.y.name] += 1
    examples.setdefault(i.name, i)
  # what follows the kernel is LLVM's s_code_end padding (instruction prefetch may read it)
  assert all(i.name == "s_code_end" for i in disassemble(co.image, k.code_offset + k.code_size, k.kd_offset if k.kd_offset > k.code_offset else len(co.image)))

def corpus_sources() -> list[tuple[str, str]]:
  ren = AMDGPURenderer("gfx1100")
  out = [(nm, ren.render(nm, prog)) for nm, prog in (lds_kernel(), lds_kernel(dtypes.float16, 128), lds_kernel(dtypes.int64, 32))]
  for nm, ast, opts in kernel_set():
    p = get_program(ast, ren, opts, name=nm); out.append((p.name, p.src))
  corpus = tensor_corpus()
  step = 1 if os.environ.get("RDNA3_XCHECK_ALL") else 6
  for nm, ast in corpus[::step]:
    p = get_program(ast, ren, name=nm); out.append((p.name, p.src))
  return out

def test_decoder_agrees_with_llvm():
  c, seen = AMDCompiler("gfx1100"), collections.Counter()
  srcs = corpus_sources()
  for nm, src in srcs: cross_check(src, nm, c, seen)
  print(f"\n{len(srcs)} kernels, {sum(seen.values())} instructions, {len(seen)} mnemonics agree with LLVM")
  assert len(seen) > 150 and any(n.startswith("ds_") for n in seen) and any(n.startswith("v_dual_") for n in seen)
  # and the interpreter executes every one of them (compile_inst refuses, naming it, what it cannot run)
  mem = Memory()
  for nm, i in examples.items(): compile_inst(i, 0, mem)

# ---- single instructions, bad input
def test_literals_and_constants():
  i = decode(bytes.fromhex("ff000836ff030000"))            # v_and_b32_e32 v4, 0x3ff, v0
  assert (i.text(), i.size, i.src[0].kind, i.src[0].val) == ("v_and_b32_e32 v4, 0x3ff, v0", 8, "l", 0x3FF)
  assert inline_value(242, 16) == 0x3C00 and inline_value(242, 32) == 0x3F800000 and inline_value(242, 64) == 0x3FF0000000000000
  assert inline_value(193, 64) == (1 << 64) - 1 and inline_value(208, 32) == (-16) & 0xFFFFFFFF and inline_value(192, 16) == 64
  assert decode(struct.pack("<I", 0xBF870091)).text() == "s_delay_alu instid0(VALU_DEP_1) | instskip(NEXT) | instid1(VALU_DEP_1)"
  assert decode(struct.pack("<I", 0xBF89FC07)).text() == "s_waitcnt lgkmcnt(0)"
  assert decode(struct.pack("<I", 0xBFB00000)).text() == "s_endpgm"

def test_bad_input_is_named():
  with pytest.raises(DecodeError, match=r"offset 0x0: instruction runs past the end"): decode(bytes.fromhex("ff000836"))
  with pytest.raises(DecodeError, match=r"SOP1 opcode 255"): decode(struct.pack("<I", 0xBE80FF00))
  with pytest.raises(DecodeError, match=r"offset 0x4: .*no RDNA3 encoding"): decode(b"\0\0\0\0" + struct.pack("<I", 0xF8000000), 4)
  with pytest.raises(DecodeError, match=r"FLAT segment 3"): decode(struct.pack("<II", 0xDC030000, 0))

def test_operand_types():
  assert vop_sig("v_cvt_f32_f16_e32") == ("f32", ("f16",)) and vop_sig("v_cmp_lt_i64_e64") == ("mask", ("i64", "i64"))
  assert vop_sig("v_lshlrev_b64") == ("b64", ("u32", "b64")) and vop_sig("v_mad_u64_u32") == ("u64", ("u32", "u32", "u64"))
  assert vop_sig("v_cvt_pk_rtz_f16_f32_e32") == ("b32", ("f32", "f32")) and vop_sig("v_add_nc_u16") == ("u16", ("u16",) * 3)

# ---- hypothesis: any word of a known opcode decodes to an instruction of the right size and prints
_FMT = [("SOP2", lambda op, r: (0b10 << 30) | (op << 23) | (r & 0x7FFFFF), opcodes.SOP2),
        ("SOP1", lambda op, r: 0xBE800000 | ((r & 0x7F) << 16) | (op << 8) | ((r >> 7) & 0xFF), opcodes.SOP1),
        ("SOPC", lambda op, r: 0xBF000000 | (op << 16) | (r & 0xFFFF), opcodes.SOPC),
        ("VOP2", lambda op, r: (op << 25) | (r & 0x1FFFFFF), opcodes.VOP2),
        ("VOP1", lambda op, r: 0x7E000000 | ((r & 0xFF) << 17) | (op << 9) | ((r >> 8) & 0x1FF), opcodes.VOP1)]

def _legal_src(v: int) -> bool:
  return v <= 127 or 128 <= v <= 208 or 240 <= v <= 248 or v in (235, 236, 237, 238, 251, 252, 253, 255) or v >= 256

@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_FMT), st.data(), st.integers(0, (1 << 32) - 1), st.integers(0, (1 << 32) - 1))
def test_random_words_decode(fmt, data, r, lit):
  enc, make, table = fmt
  op = data.draw(st.sampled_from(sorted(table)))
  w = make(op, r)
  try: i = decode(struct.pack("<II", w, lit))
  except DecodeError as e:   # only operand codes that name no register or constant may be refused
    assert "is not a" in str(e) or "no RDNA3" in str(e), e
    return
  assert i.enc == enc and i.op == op and i.words[0] == w
  uses_lit = any(o.kind == "l" for o in i.src) or (i.name.startswith(("v_fmamk", "v_fmaak")))
  assert i.size == (8 if uses_lit else 4) and (not uses_lit or i.words[1] == lit)
  try: i.text()
  except DecodeError as e: assert "is not a" in str(e)

# ---- a second opinion where Debian's llvm-objdump (16 or newer) is installed: instruction offsets, lengths, words
def _objdump() -> str | None:
  import shutil
  for v in range(25, 15, -1):
    if (p := shutil.which(f"llvm-objdump-{v}")) is not None: return p
  return None

@pytest.mark.skipif(_objdump() is None, reason="no llvm-objdump-16+ on PATH (apt-get install llvm-19)")
def test_encodings_agree_with_llvm_objdump(tmp_path):
  import subprocess
  c = AMDCompiler("gfx1100")
  n = 0
  for nm, src in corpus_sources()[:40]:
    lib = c.compile_cached(src)
    (tmp_path / "k.o").write_bytes(lib)
    out = subprocess.run([_objdump(), "-d", "--mcpu=gfx1100", str(tmp_path / "k.o")], capture_output=True, text=True, check=True).stdout
    co = load_code_object(lib)
    k = co.kernels[nm]
    mine = {i.offset: i for i in disassemble(co.image, k.code_offset, k.code_offset + k.code_size)}
    for line in out.splitlines():
      m = re.match(r"\s+(\S+).*//\s*([0-9A-Fa-f]+):\s*([0-9A-Fa-f ]+)$", line)
      if not m or int(m.group(2), 16) >= k.code_size: continue
      off, words = int(m.group(2), 16), tuple(int(x, 16) for x in m.group(3).split())
      assert off in mine, f"{nm}: llvm-objdump has an instruction at {off:#x}, we do not"
      i = mine[off]
      if m.group(1) == ".long": continue         # an encoding the older LLVM cannot decode (gfx11 true16 forms added later)
      assert i.words == words, f"{nm} at {off:#x}: words {i.encoding_hex} vs llvm-objdump {m.group(3)}"
      assert re.sub(r"_e(32|64)$", "", i.name) == re.sub(r"_e(32|64)$", "", m.group(1)), f"{nm} at {off:#x}: {i.name} vs {m.group(1)}"
      n += 1
  assert n > 1000
