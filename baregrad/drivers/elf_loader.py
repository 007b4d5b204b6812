"""In-process loader for ELF64 relocatable objects (.o) built by LLVM or the C compiler.

Why our own loader: the CPU backend gets one .o per kernel; dlopen of a temporary .so needs a
link step and a file on disk, and MCJIT drags in a whole execution engine. A .o is small: we
lay its allocated sections out in one anonymous mapping, resolve symbols, apply relocations,
then flip page protections (code R+X, constants R, data R+W; never W and X at once).

Image layout (offsets from `base`, each region page aligned so it can get its own protection):

    [ exec sections | call stubs ]  R+X
    [ read-only sections | GOT  ]   R
    [ writable sections | .bss | SHN_COMMON ]  R+W

`link_image` does everything except the mapping, so a foreign-architecture object (AArch64 on
this x86-64 host) can be relocated at any address and checked without being run.

Relocations: x86-64 64, PC32, PLT32, 32, 32S, PC64, GOTPCREL, GOTPCRELX, REX_GOTPCRELX (GOT slots
are built in the image; no relaxation). AArch64 ABS64, ABS32, PREL64, PREL32, ADR_PREL_LO21,
ADR_PREL_PG_HI21(_NC), ADD_ABS_LO12_NC, LDST8/16/32/64/128_ABS_LO12_NC, CALL26, JUMP26, CONDBR19,
TSTBR14, ADR_GOT_PAGE, LD64_GOT_LO12_NC. Calls to externals beyond the branch range go through
a stub in the image. Not supported (clear error): TLS, SHT_REL, IFUNC resolution, other types.
Objects with R_X86_64_32/32S (gcc -fno-pic) are mapped with MAP_32BIT so absolute addresses fit.
"""
from __future__ import annotations

import contextlib
import ctypes
import io
import mmap
import os
import platform
import struct
from typing import Callable

from baregrad.drivers.vmem import round_up

__all__ = ["ElfLoadError", "ElfSymbolError", "LoadedImage", "load_elf", "link_image", "disassemble"]


class ElfLoadError(Exception):
    """The object cannot be loaded; the message names the offending section/relocation/symbol."""


class ElfSymbolError(ElfLoadError, KeyError):
    """A symbol asked of a LoadedImage is not defined there (also a KeyError, for dict-like use)."""
    __str__ = Exception.__str__   # KeyError would repr() the message


@contextlib.contextmanager
def _naming(name: str | None, obj: object):
    """ElfLoadErrors raised inside start with what was being loaded: `name` (a file, a kernel) and its size."""
    try:
        yield
    except ElfLoadError as e:
        size = f"{len(obj)} bytes" if isinstance(obj, (bytes, bytearray, memoryview)) else type(obj).__name__
        what = f"{name} ({size})"
        if name and e.args and isinstance(e.args[0], str) and not e.args[0].startswith(what):
            e.args = (f"{what}: {e.args[0]}",) + e.args[1:]
        raise


# ---------------------------------------------------------------------------------------------
# ELF constants (pyelftools' enums lack some newer relocation numbers, e.g. GOTPCRELX, LDST128)

EM_X86_64, EM_AARCH64 = 62, 183
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR, SHF_TLS = 0x1, 0x2, 0x4, 0x400
SHN_UNDEF, SHN_ABS, SHN_COMMON = 0, 0xFFF1, 0xFFF2
STB_LOCAL, STB_GLOBAL, STB_WEAK = 0, 1, 2
STT_NOTYPE, STT_OBJECT, STT_FUNC, STT_SECTION, STT_FILE, STT_TLS, STT_GNU_IFUNC = 0, 1, 2, 3, 4, 6, 10

_BIND = {"STB_LOCAL": STB_LOCAL, "STB_GLOBAL": STB_GLOBAL, "STB_WEAK": STB_WEAK}
_TYPE = {"STT_NOTYPE": STT_NOTYPE, "STT_OBJECT": STT_OBJECT, "STT_FUNC": STT_FUNC, "STT_SECTION": STT_SECTION,
         "STT_FILE": STT_FILE, "STT_TLS": STT_TLS, "STT_LOOS": STT_GNU_IFUNC, "STT_GNU_IFUNC": STT_GNU_IFUNC}

X86_RELOCS = {0: "R_X86_64_NONE", 1: "R_X86_64_64", 2: "R_X86_64_PC32", 4: "R_X86_64_PLT32",
              9: "R_X86_64_GOTPCREL", 10: "R_X86_64_32", 11: "R_X86_64_32S", 24: "R_X86_64_PC64",
              41: "R_X86_64_GOTPCRELX", 42: "R_X86_64_REX_GOTPCRELX"}
A64_RELOCS = {256: "R_AARCH64_NONE", 257: "R_AARCH64_ABS64", 258: "R_AARCH64_ABS32",
              260: "R_AARCH64_PREL64", 261: "R_AARCH64_PREL32",
              274: "R_AARCH64_ADR_PREL_LO21", 275: "R_AARCH64_ADR_PREL_PG_HI21",
              276: "R_AARCH64_ADR_PREL_PG_HI21_NC", 277: "R_AARCH64_ADD_ABS_LO12_NC",
              278: "R_AARCH64_LDST8_ABS_LO12_NC", 279: "R_AARCH64_TSTBR14", 280: "R_AARCH64_CONDBR19",
              282: "R_AARCH64_JUMP26", 283: "R_AARCH64_CALL26", 284: "R_AARCH64_LDST16_ABS_LO12_NC",
              285: "R_AARCH64_LDST32_ABS_LO12_NC", 286: "R_AARCH64_LDST64_ABS_LO12_NC",
              299: "R_AARCH64_LDST128_ABS_LO12_NC", 311: "R_AARCH64_ADR_GOT_PAGE",
              312: "R_AARCH64_LD64_GOT_LO12_NC"}
_X86_GOT = {9, 41, 42}
_X86_CALL = {2, 4}                      # PC32 too: gcc -fno-pic may emit `call f` as PC32
_A64_GOT = {311, 312}
_A64_CALL = {282, 283}
_A64_LDST_SHIFT = {278: 0, 284: 1, 285: 2, 286: 3, 299: 4}

# jmp qword [rip+0]; .quad addr -- needs no scratch register, so it is safe for tail calls too.
_X86_STUB = b"\xff\x25\x00\x00\x00\x00"
# ldr x16, #8; br x16; .quad addr -- x16 (IP0) is the register the AAPCS64 reserves for veneers.
_A64_STUB = struct.pack("<II", 0x58000050, 0xD61F0200)
_STUB_SIZE = 16
_GOT_SLOT = 8
_MAX_IMAGE = 1 << 30   # a kernel object this large is a corrupt header, not a kernel


def _page_size() -> int:
    return mmap.PAGESIZE


def _reloc_name(machine: int, rtype: int) -> str:
    table = X86_RELOCS if machine == EM_X86_64 else A64_RELOCS
    if rtype in table:
        return table[rtype]
    try:
        from elftools.elf.enums import ENUM_RELOC_TYPE_AARCH64, ENUM_RELOC_TYPE_x64
        enum = ENUM_RELOC_TYPE_x64 if machine == EM_X86_64 else ENUM_RELOC_TYPE_AARCH64
        for k, v in enum.items():
            if v == rtype and not k.startswith("_"):
                return f"{k} ({rtype})"
    except ImportError:
        pass
    return f"relocation type {rtype}"


# ---------------------------------------------------------------------------------------------
# Process symbol resolution (libc/libm), cached lazily so that importing this module is cheap.

_proc_libs: list[ctypes.CDLL] | None = None


def _process_libs() -> list[ctypes.CDLL]:
    global _proc_libs
    if _proc_libs is None:
        import ctypes.util  # spawns nothing at import, but pulls in subprocess: keep it lazy
        libs = [ctypes.CDLL(None)]
        # libm for the math functions; libgcc_s for the runtime helpers compilers emit calls to (float16
        # conversions such as __truncdfhf2/__extendhfdf2, __eqhf2, 128-bit division, ...)
        for name in (ctypes.util.find_library("m"), "libgcc_s.so.1"):
            if name:
                try:
                    libs.append(ctypes.CDLL(name))
                except OSError:
                    pass
        _proc_libs = libs
    return _proc_libs


def _resolve_process(name: str) -> int | None:
    for lib in _process_libs():
        try:
            return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
        except AttributeError:
            continue
    return None


# ---------------------------------------------------------------------------------------------
# Parsing and layout (independent of the final address)

# Plain slotted classes rather than dataclasses: building dataclasses costs milliseconds at
# import, and this module is imported on the CPU device's hot start path.
class _Sym:
    __slots__ = ("name", "bind", "type", "shndx", "value", "size")

    def __init__(self, name: str, bind: int, type: int, shndx: int | str, value: int, size: int) -> None:
        self.name, self.bind, self.type, self.shndx, self.value, self.size = name, bind, type, shndx, value, size


class _Reloc:
    __slots__ = ("sec", "secname", "relsec", "offset", "type", "sym", "addend")

    def __init__(self, sec: int, secname: str, relsec: str, offset: int, type: int, sym: int, addend: int) -> None:
        self.sec, self.secname, self.relsec = sec, secname, relsec   # patched section, its name, the RELA's name
        self.offset, self.type, self.sym, self.addend = offset, type, sym, addend

    def __repr__(self) -> str:
        return f"_Reloc({self.secname}+{self.offset:#x} type={self.type} sym={self.sym} addend={self.addend:+#x})"


class _Layout:
    """Where everything goes, as offsets from the image base; independent of the final address."""

    def __init__(self, machine: int) -> None:
        self.machine = machine
        self.sec_off: dict[int, int] = {}        # section index -> image offset
        self.sec_names: dict[int, str] = {}
        self.contents: dict[int, bytes] = {}     # PROGBITS data to copy
        self.syms: list[_Sym] = []
        self.common_off: dict[int, int] = {}     # symbol index -> offset
        self.got_off: dict[int, int] = {}        # symbol index -> GOT slot offset
        self.stub_off: dict[int, int] = {}       # symbol index -> call stub offset
        self.relocs: list[_Reloc] = []
        self.regions: list[tuple[int, int, int]] = []   # page-aligned (start, end, prot) for mprotect
        self.size = 0
        self.init_size = 0       # bytes up to the last initialized byte; the rest is zero-fill
        self.max_align = 1       # the base must be aligned to this (it may exceed a page)
        self.needs_low = False   # has absolute 32-bit relocations: image must sit in the low 2 GiB


def _check_align(a: int, what: str) -> None:
    if a & (a - 1) or a > _MAX_IMAGE:
        raise ElfLoadError(f"{what} asks for alignment {a:#x}: expected 0 or a power of two up to {_MAX_IMAGE:#x}")


def _sym_key(s: _Sym, idx: int) -> str:
    return s.name or f"<symbol #{idx}>"


def _parse(obj: bytes) -> _Layout:
    try:
        from elftools.elf.elffile import ELFFile
    except ImportError as e:  # pragma: no cover
        raise ElfLoadError("pyelftools is required to load ELF objects") from e
    if not isinstance(obj, (bytes, bytearray, memoryview)):
        raise ElfLoadError(f"expected the object's bytes, got {type(obj).__name__}")
    obj = bytes(obj)
    if len(obj) < 64 or obj[:4] != b"\x7fELF":
        raise ElfLoadError(f"not an ELF file: expected magic 7f 45 4c 46, got {obj[:4].hex(' ') or 'nothing'}"
                           f" ({len(obj)} bytes)")
    if obj[4] != 2:
        raise ElfLoadError(f"ELF class {obj[4]} not supported: expected ELFCLASS64 (2)")
    if obj[5] != 1:
        raise ElfLoadError(f"ELF data encoding {obj[5]} not supported: expected little-endian (ELFDATA2LSB=1)")
    try:
        elf = ELFFile(io.BytesIO(obj))
        return _layout(elf, obj)
    except ElfLoadError:
        raise
    except Exception as e:
        # Parsing is pure, so any failure here means bad input: pyelftools reports truncation
        # and garbage as struct/construct/ELFError/ZeroDivisionError/...; give one error type.
        raise ElfLoadError(f"malformed or truncated ELF object ({len(obj)} bytes): {type(e).__name__}: {e}") from e


def _layout(elf, obj: bytes) -> _Layout:
    hdr = elf.header
    if hdr["e_type"] != "ET_REL":
        raise ElfLoadError(f"ELF type {hdr['e_type']} not supported: expected ET_REL (a relocatable .o from "
                           f"`cc -c` or TargetMachine.emit_object), not an executable or shared library")
    machine = elf["e_machine"]
    mnum = {"EM_X86_64": EM_X86_64, "EM_AARCH64": EM_AARCH64}.get(machine)
    if mnum is None:
        raise ElfLoadError(f"machine {machine} not supported: expected EM_X86_64 or EM_AARCH64")
    lay = _Layout(machine=mnum)
    nsec = elf.num_sections()
    sections = [elf.get_section(i) for i in range(nsec)]
    for i, s in enumerate(sections):
        if s["sh_type"] != "SHT_NOBITS" and s["sh_size"] and s["sh_offset"] + s["sh_size"] > len(obj):
            raise ElfLoadError(f"section {s.name or i!s} [{s['sh_offset']:#x}, +{s['sh_size']:#x}) lies past the "
                               f"end of the object ({len(obj)} bytes): truncated?")

    def loadable(s) -> bool:
        if not (s["sh_flags"] & SHF_ALLOC):
            return False
        # Unwind tables are only needed by a C++ unwinder or a debugger; skipping them (and their
        # relocations) keeps the image small. Notes (.note.gnu.property) are metadata.
        if s.name == ".eh_frame" or s["sh_type"] in ("SHT_NOTE", "SHT_X86_64_UNWIND"):
            return False
        return True

    alloc = [i for i, s in enumerate(sections) if loadable(s)]
    for i in alloc:
        if sections[i]["sh_flags"] & SHF_WRITE and sections[i]["sh_flags"] & SHF_EXECINSTR:
            raise ElfLoadError(f"section {sections[i].name} is both writable and executable: expected W^X "
                               f"(code in SHF_EXECINSTR sections, mutable data elsewhere)")
        if sections[i]["sh_flags"] & SHF_TLS:
            raise ElfLoadError(f"section {sections[i].name} is thread-local (SHF_TLS): TLS is not supported; "
                               f"expected kernels without thread_local storage")

    def kind(s) -> int:
        f = s["sh_flags"]
        return 0 if f & SHF_EXECINSTR else (2 if f & SHF_WRITE or s["sh_type"] == "SHT_NOBITS" else 1)

    # symbols
    symtabs = [s for s in sections if s["sh_type"] == "SHT_SYMTAB"]
    if symtabs:
        for sym in symtabs[0].iter_symbols():
            info = sym["st_info"]
            lay.syms.append(_Sym(sym.name, _BIND.get(info["bind"], -1), _TYPE.get(info["type"], -1),
                                 sym["st_shndx"], sym["st_value"], sym["st_size"]))
    sh_of = {"SHN_UNDEF": SHN_UNDEF, "SHN_ABS": SHN_ABS, "SHN_COMMON": SHN_COMMON}
    for s in lay.syms:
        if isinstance(s.shndx, str):
            if s.shndx not in sh_of:
                raise ElfLoadError(f"symbol {s.name!r} has section index {s.shndx}: not supported")
            s.shndx = sh_of[s.shndx]
        if s.type == STT_TLS:
            raise ElfLoadError(f"symbol {s.name!r} is thread-local (STT_TLS): TLS is not supported")
        if s.type == STT_GNU_IFUNC and s.shndx != SHN_UNDEF:
            # its value is the resolver, not the function: using it as the address would be wrong
            raise ElfLoadError(f"symbol {s.name!r} is an indirect function (STT_GNU_IFUNC): not supported; "
                               f"expected plain STT_FUNC definitions")

    # relocations; only those that patch a section we load
    for rs in sections:
        if rs["sh_type"] == "SHT_REL":
            tgt = rs["sh_info"]
            if tgt in alloc:
                raise ElfLoadError(f"section {rs.name} is SHT_REL (implicit addends): expected SHT_RELA, "
                                   f"which ELF64 x86-64/AArch64 compilers emit")
            continue
        if rs["sh_type"] != "SHT_RELA" or rs["sh_info"] not in alloc:
            continue
        tgt = rs["sh_info"]
        tname = sections[tgt].name
        for r in rs.iter_relocations():
            rt, si = r["r_info_type"], r["r_info_sym"]
            if si >= len(lay.syms):
                raise ElfLoadError(f"relocation at {tname}+{r['r_offset']:#x} in {rs.name} names symbol #{si}, "
                                   f"but the symbol table has {len(lay.syms)} entries")
            lay.relocs.append(_Reloc(tgt, tname, rs.name, r["r_offset"], rt, si, r["r_addend"]))

    # which symbols need a GOT slot or a call stub
    got_syms, stub_syms = [], []
    for r in lay.relocs:
        if (mnum == EM_X86_64 and r.type in _X86_GOT) or (mnum == EM_AARCH64 and r.type in _A64_GOT):
            if r.sym not in got_syms:
                got_syms.append(r.sym)
        call = _X86_CALL if mnum == EM_X86_64 else _A64_CALL
        if r.type in call and lay.syms[r.sym].shndx == SHN_UNDEF and r.sym not in stub_syms:
            stub_syms.append(r.sym)
        if mnum == EM_X86_64 and r.type in (10, 11):
            lay.needs_low = True

    page = _page_size()
    off = 0
    # Within the writable region PROGBITS come before NOBITS, so the zero-fill tail (.bss,
    # COMMON) is never copied: the anonymous mapping is already zero.
    order = sorted(alloc, key=lambda i: sections[i]["sh_type"] == "SHT_NOBITS")
    for k in (0, 1, 2):
        start = off
        for i in order:
            s = sections[i]
            if kind(s) != k:
                continue
            _check_align(s["sh_addralign"], f"section {s.name}")
            off = round_up(off, max(1, s["sh_addralign"]))
            lay.max_align = max(lay.max_align, s["sh_addralign"])
            lay.sec_off[i] = off
            lay.sec_names[i] = s.name
            if s["sh_type"] != "SHT_NOBITS":
                lay.contents[i] = obj[s["sh_offset"]:s["sh_offset"] + s["sh_size"]]
                lay.init_size = off + s["sh_size"]
            off += s["sh_size"]
        if k == 0:
            off = round_up(off, _STUB_SIZE)
            for si in stub_syms:
                lay.stub_off[si] = off
                off += _STUB_SIZE
            lay.init_size = off
        elif k == 1:
            off = round_up(off, _GOT_SLOT)
            for si in got_syms:
                lay.got_off[si] = off
                off += _GOT_SLOT
            lay.init_size = off
        else:
            for idx, s in enumerate(lay.syms):
                if s.shndx == SHN_COMMON:
                    # for SHN_COMMON st_value holds the alignment
                    _check_align(s.value, f"COMMON symbol {s.name!r}")
                    off = round_up(off, max(1, s.value))
                    lay.max_align = max(lay.max_align, s.value)
                    lay.common_off[idx] = off
                    off += s.size
        off = round_up(off, page)
        if off > start:
            prot = (mmap.PROT_READ | mmap.PROT_EXEC, mmap.PROT_READ, mmap.PROT_READ | mmap.PROT_WRITE)[k]
            lay.regions.append((start, off, prot))
    lay.size = max(off, page)
    if lay.size > _MAX_IMAGE:
        raise ElfLoadError(f"image would be {lay.size:#x} bytes (sections + .bss + COMMON): expected at most "
                           f"{_MAX_IMAGE:#x} for a kernel object")
    return lay


# ---------------------------------------------------------------------------------------------
# Relocation

def _sym_addr(lay: _Layout, idx: int, base: int, ext: Callable[[str], int | None]) -> int:
    s = lay.syms[idx]
    if s.shndx == SHN_UNDEF:
        if idx == 0:
            return 0
        addr = ext(s.name)
        if addr is None:
            if s.bind == STB_WEAK:
                return 0       # an undefined weak symbol is NULL by definition
            raise ElfLoadError(f"undefined symbol {s.name!r}: not in externals and not found in the process "
                               f"(libc/libm); pass its address in externals={{{s.name!r}: addr}}")
        return addr
    if s.shndx == SHN_ABS:
        return s.value
    if s.shndx == SHN_COMMON:
        return base + lay.common_off[idx]
    if s.shndx not in lay.sec_off:
        raise ElfLoadError(f"symbol {_sym_key(s, idx)!r} lives in section #{s.shndx}, which is not loaded "
                           f"(not SHF_ALLOC or skipped)")
    return base + lay.sec_off[s.shndx] + s.value


def _fits(v: int, bits: int, signed: bool) -> bool:
    return -(1 << (bits - 1)) <= v < (1 << (bits - 1)) if signed else 0 <= v < (1 << bits)


def link_image(obj: bytes, base_address: int, externals: dict[str, int] | None = None, *,
               symbols_out: dict[str, int] | None = None, name: str | None = None) -> bytes:
    """Lay out and relocate `obj` as if mapped at `base_address`; return the image bytes.

    Works for any supported machine regardless of the host, which is how AArch64 objects are
    checked on an x86-64 machine. Undefined symbols come from `externals`, then the process.
    `symbols_out`, if given, receives the addresses of the defined global symbols. `name` (the
    file or kernel the object came from) starts every ElfLoadError's message."""
    with _naming(name, obj):
        lay = _parse(obj)
        img = _link(lay, base_address, externals)
    if symbols_out is not None:
        symbols_out.update(_exported(lay, base_address))
    return bytes(img) + bytes(lay.size - len(img))


def _link(lay: _Layout, base: int, externals: dict[str, int] | None) -> bytearray:
    if base % max(1, lay.max_align):
        raise ElfLoadError(f"base address {base:#x} is not aligned to {lay.max_align:#x}, the largest section/"
                           f"COMMON alignment in the object")
    externals = externals or {}
    cache: dict[str, int | None] = {}

    def ext(name: str) -> int | None:
        if name in externals:
            a = externals[name]
            if not isinstance(a, int) or not 0 <= a < 1 << 64:
                raise ElfLoadError(f"externals[{name!r}] = {a!r}: expected an address as an int "
                                   f"(e.g. ctypes.cast(f, ctypes.c_void_p).value)")
            return a
        if name not in cache:
            cache[name] = _resolve_process(name)
        return cache[name]

    img = bytearray(lay.init_size)
    for i, data in lay.contents.items():
        img[lay.sec_off[i]:lay.sec_off[i] + len(data)] = data
    addrs = {}

    def addr(idx: int) -> int:
        if idx not in addrs:
            addrs[idx] = _sym_addr(lay, idx, base, ext)
        return addrs[idx]

    for si, off in lay.got_off.items():
        struct.pack_into("<Q", img, off, addr(si))
    stub = _X86_STUB if lay.machine == EM_X86_64 else _A64_STUB
    for si, off in lay.stub_off.items():
        img[off:off + len(stub)] = stub
        struct.pack_into("<Q", img, off + 8 if lay.machine == EM_AARCH64 else off + len(stub), addr(si))

    apply = _reloc_x86 if lay.machine == EM_X86_64 else _reloc_a64
    for r in lay.relocs:
        sec_size = len(lay.contents.get(r.sec, b""))
        width = 8 if r.type in (1, 24, 257, 260) else 4
        if r.offset + width > sec_size and r.type not in (0, 256):
            raise ElfLoadError(f"{_reloc_name(lay.machine, r.type)} in {r.relsec} patches {r.secname}+{r.offset:#x}, "
                               f"outside the section ({sec_size} bytes)")
        apply(lay, img, base, r, addr)
    return img


def _where(lay: _Layout, r: _Reloc) -> str:
    s = lay.syms[r.sym]
    name = s.name or (lay.sec_names.get(s.shndx, f"section #{s.shndx}") if s.type == STT_SECTION else f"#{r.sym}")
    return f"{_reloc_name(lay.machine, r.type)} at {r.secname}+{r.offset:#x} against {name}{r.addend:+#x}"


def _put(img: bytearray, off: int, v: int, bits: int, signed: bool, lay: _Layout, r: _Reloc) -> None:
    if bits < 64 and not _fits(v, bits, signed):
        raise ElfLoadError(f"{_where(lay, r)}: value {v:#x} does not fit in a {'signed' if signed else 'unsigned'} "
                           f"{bits}-bit field")
    struct.pack_into({32: "<I", 64: "<Q"}[bits], img, off, v & ((1 << bits) - 1))


def _reloc_x86(lay: _Layout, img: bytearray, base: int, r: _Reloc, addr: Callable[[int], int]) -> None:
    t, off = r.type, lay.sec_off[r.sec] + r.offset
    P = base + off
    if t == 0:
        return
    if t not in X86_RELOCS:
        raise ElfLoadError(f"unsupported {_reloc_name(lay.machine, t)} in {r.relsec} at {r.secname}+{r.offset:#x}; "
                           f"supported: {', '.join(sorted(set(X86_RELOCS.values()) - {'R_X86_64_NONE'}))}")
    if t in _X86_GOT:
        _put(img, off, base + lay.got_off[r.sym] + r.addend - P, 32, True, lay, r)
        return
    S = addr(r.sym)
    if t == 1:
        _put(img, off, S + r.addend, 64, False, lay, r)
    elif t == 24:
        _put(img, off, S + r.addend - P, 64, False, lay, r)
    elif t == 10:
        _put(img, off, S + r.addend, 32, False, lay, r)
    elif t == 11:
        _put(img, off, S + r.addend, 32, True, lay, r)
    else:  # PC32 / PLT32: a call/jump out of +-2 GiB goes through the stub
        v = S + r.addend - P
        if not _fits(v, 32, True) and r.sym in lay.stub_off and (t == 4 or _x86_is_branch(img, off)):
            v = base + lay.stub_off[r.sym] + r.addend - P
        _put(img, off, v, 32, True, lay, r)


def _x86_is_branch(img: bytearray, off: int) -> bool:
    """Whether the rel32 at `off` is the operand of call/jmp/jcc. Non-PIC code uses PC32 for
    both calls and data loads; redirecting a data load to a stub would silently read code."""
    return (off >= 1 and img[off - 1] in (0xE8, 0xE9)) or \
        (off >= 2 and img[off - 2] == 0x0F and 0x80 <= img[off - 1] <= 0x8F)


def _a64_patch(img: bytearray, off: int, mask: int, bits: int) -> None:
    ins = struct.unpack_from("<I", img, off)[0]
    struct.pack_into("<I", img, off, (ins & ~mask) | (bits & mask))


def _reloc_a64(lay: _Layout, img: bytearray, base: int, r: _Reloc, addr: Callable[[int], int]) -> None:
    t, off = r.type, lay.sec_off[r.sec] + r.offset
    P = base + off
    if t == 256:
        return
    if t not in A64_RELOCS:
        raise ElfLoadError(f"unsupported {_reloc_name(lay.machine, t)} in {r.relsec} at {r.secname}+{r.offset:#x}; "
                           f"supported: {', '.join(sorted(set(A64_RELOCS.values()) - {'R_AARCH64_NONE'}))}")
    if t in _A64_GOT:
        X = base + lay.got_off[r.sym] + r.addend
    else:
        X = addr(r.sym) + r.addend
    page = lambda a: a & ~0xFFF  # noqa: E731
    if t == 257:
        _put(img, off, X, 64, False, lay, r)
    elif t == 258:
        if not (-(1 << 31) <= X < (1 << 32)):
            raise ElfLoadError(f"{_where(lay, r)}: value {X:#x} does not fit in 32 bits")
        struct.pack_into("<I", img, off, X & 0xFFFFFFFF)
    elif t == 260:
        _put(img, off, X - P, 64, False, lay, r)
    elif t == 261:
        _put(img, off, X - P, 32, True, lay, r)
    elif t in (275, 276, 311):
        v = (page(X) - page(P)) >> 12
        if t != 276 and not _fits(v, 21, True):
            raise ElfLoadError(f"{_where(lay, r)}: page delta {v:#x} does not fit ADRP's signed 21 bits (+-4 GiB)")
        _a64_patch(img, off, (3 << 29) | (0x7FFFF << 5), ((v & 3) << 29) | (((v >> 2) & 0x7FFFF) << 5))
    elif t == 274:
        v = X - P
        if not _fits(v, 21, True):
            raise ElfLoadError(f"{_where(lay, r)}: offset {v:#x} does not fit ADR's signed 21 bits (+-1 MiB)")
        _a64_patch(img, off, (3 << 29) | (0x7FFFF << 5), ((v & 3) << 29) | (((v >> 2) & 0x7FFFF) << 5))
    elif t == 277:
        _a64_patch(img, off, 0xFFF << 10, (X & 0xFFF) << 10)
    elif t in _A64_LDST_SHIFT:
        sh = _A64_LDST_SHIFT[t]
        if X & ((1 << sh) - 1):
            raise ElfLoadError(f"{_where(lay, r)}: address {X:#x} is not {1 << sh}-byte aligned for this load/store")
        _a64_patch(img, off, 0xFFF << 10, ((X & 0xFFF) >> sh) << 10)
    elif t == 312:
        if X & 7:
            raise ElfLoadError(f"{_where(lay, r)}: GOT slot {X:#x} not 8-byte aligned")
        _a64_patch(img, off, 0xFFF << 10, ((X & 0xFFF) >> 3) << 10)
    elif t in _A64_CALL:
        v = X - P
        if not _fits(v, 28, True) and r.sym in lay.stub_off:
            v = base + lay.stub_off[r.sym] + r.addend - P
        if not _fits(v, 28, True):
            raise ElfLoadError(f"{_where(lay, r)}: branch offset {v:#x} out of range (+-128 MiB)")
        _a64_patch(img, off, 0x3FFFFFF, v >> 2)
    elif t == 280:
        v = X - P
        if not _fits(v, 21, True):
            raise ElfLoadError(f"{_where(lay, r)}: branch offset {v:#x} out of range (+-1 MiB)")
        _a64_patch(img, off, 0x7FFFF << 5, ((v >> 2) & 0x7FFFF) << 5)
    elif t == 279:
        v = X - P
        if not _fits(v, 16, True):
            raise ElfLoadError(f"{_where(lay, r)}: branch offset {v:#x} out of range (+-32 KiB)")
        _a64_patch(img, off, 0x3FFF << 5, ((v >> 2) & 0x3FFF) << 5)


# ---------------------------------------------------------------------------------------------
# Mapping

_libc: ctypes.CDLL | None = None


def _lc() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        lib = ctypes.CDLL(None, use_errno=True)
        lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        lib.mmap.restype = ctypes.c_void_p
        lib.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        lib.mprotect.restype = ctypes.c_int
        lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.munmap.restype = ctypes.c_int
        _libc = lib
    return _libc


def _oserror(call: str) -> OSError:
    import errno
    e = ctypes.get_errno()
    return OSError(e, f"{call} failed: {errno.errorcode.get(e, '?')} ({os.strerror(e)})")


_MAP_FAILED = ctypes.c_void_p(-1).value
_MAP_32BIT = 0x40  # x86-64 Linux: place the mapping in the low 2 GiB (for R_X86_64_32/32S)


def _host_machine() -> int | None:
    m = platform.machine().lower()
    return EM_X86_64 if m in ("x86_64", "amd64") else EM_AARCH64 if m in ("aarch64", "arm64") else None


def _flush_icache(start: int, size: int) -> None:
    """AArch64 has no coherent I-cache: make the freshly written code visible to instruction fetch.

    libgcc's `__clear_cache` is not exported everywhere; try the outlined helper first, then
    `__clear_cache` from the process or libgcc_s. If none exists, rely on the arm64 kernel, which
    syncs the I-cache when a user page becomes executable (set_pte_at -> __sync_icache_dcache),
    which our mprotect to R+X triggers."""
    cands: list[ctypes.CDLL] = [ctypes.CDLL(None)]
    try:
        cands.append(ctypes.CDLL("libgcc_s.so.1"))
    except OSError:
        pass
    for name in ("__aarch64_sync_cache_range", "__clear_cache"):
        for lib in cands:
            fn = getattr(lib, name, None)
            if fn is None:
                continue
            # both take (begin, end): __builtin___clear_cache lowers to the first on AArch64
            fn.restype = None
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
            fn(start, start + size)
            return


class LoadedImage:
    """A relocated object mapped in this process. Call `close()` when no code from it can run."""

    def __init__(self, base: int, size: int, symbols: dict[str, int], machine: int, name: str | None = None) -> None:
        self.base = base
        self.size = size
        self._symbols = symbols
        self.machine = machine
        self.name = name   # what it was loaded from (a file, a kernel), for messages
        self._closed = False

    @property
    def symbols(self) -> dict[str, int]:
        return dict(self._symbols)

    def symbol(self, name: str) -> int:
        what = f"image of {self.name}" if self.name else "image"
        if self._closed:
            raise ElfLoadError(f"{what} at {self.base:#x} is closed; cannot look up {name!r}")
        try:
            return self._symbols[name]
        except KeyError:
            raise ElfSymbolError(f"no defined global symbol {name!r} in the {what}; available: "
                               f"{', '.join(sorted(self._symbols)) or '(none)'}") from None

    def close(self) -> None:
        # No __del__: a function pointer from this image may outlive the Python object, and
        # unmapping under running code crashes the process. Freeing is the owner's decision.
        if self._closed:
            return
        if _lc().munmap(self.base, self.size) != 0:
            raise _oserror(f"munmap({self.base:#x}, {self.size})")
        self._closed = True

    def __enter__(self) -> "LoadedImage":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._symbols)} symbols"
        return f"<LoadedImage {self.base:#x}+{self.size:#x} {state}>"


def _exported(lay: _Layout, base: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for idx, s in enumerate(lay.syms):
        if s.bind not in (STB_GLOBAL, STB_WEAK) or not s.name or s.type not in (STT_FUNC, STT_OBJECT, STT_NOTYPE):
            continue
        if s.shndx == SHN_COMMON:
            out[s.name] = base + lay.common_off[idx]
        elif s.shndx in lay.sec_off:
            out[s.name] = base + lay.sec_off[s.shndx] + s.value
    return out


def load_elf(obj: bytes, externals: dict[str, int] | None = None, *, address_hint: int | None = None,
             name: str | None = None) -> LoadedImage:
    """Map, relocate and protect an ET_REL object for execution in this process.

    Static constructors (.init_array) are laid out but not run: kernels have none.
    `externals` maps undefined symbol names to addresses and wins over libc/libm.
    `address_hint` asks mmap for a placement (no MAP_FIXED); tests use it to force far calls.
    `name` (the file or kernel the object came from) starts every ElfLoadError's message and is
    named by the image's symbol lookups."""
    with _naming(name, obj):
        return _load(obj, externals, address_hint, name)


def _load(obj: bytes, externals: dict[str, int] | None, address_hint: int | None, name: str | None) -> LoadedImage:
    lay = _parse(obj)
    host = _host_machine()
    if lay.machine != host:
        raise ElfLoadError(f"object is for e_machine {lay.machine} but this host is {platform.machine()}: "
                           f"use link_image() to relocate a foreign object without running it")
    lc = _lc()
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    if lay.needs_low and address_hint is None:
        flags |= _MAP_32BIT
    # mmap only guarantees page alignment: over-allocate for larger alignments and trim
    slack = round_up(lay.max_align, _page_size()) - _page_size() if lay.max_align > _page_size() else 0
    raw = lc.mmap(address_hint, lay.size + slack, mmap.PROT_READ | mmap.PROT_WRITE, flags, -1, 0)
    if raw in (None, _MAP_FAILED) and flags & _MAP_32BIT:
        # low 2 GiB exhausted: map anywhere; relocation then names the field that cannot reach
        flags &= ~_MAP_32BIT
        raw = lc.mmap(address_hint, lay.size + slack, mmap.PROT_READ | mmap.PROT_WRITE, flags, -1, 0)
    if raw in (None, _MAP_FAILED):
        raise _oserror(f"mmap({lay.size + slack})")
    base = round_up(raw, lay.max_align) if slack else raw
    if slack:
        if base > raw:
            lc.munmap(raw, base - raw)
        if raw + slack > base:
            lc.munmap(base + lay.size, raw + slack - base)
    try:
        img = _link(lay, base, externals)
        ctypes.memmove(base, bytes(img), len(img))
        for start, end, prot in lay.regions:
            if lc.mprotect(base + start, end - start, prot) != 0:
                raise _oserror(f"mprotect({base + start:#x}, {end - start}, {prot})")
        if lay.machine == EM_AARCH64:
            _flush_icache(base, lay.size)
    except BaseException:
        lc.munmap(base, lay.size)
        raise
    return LoadedImage(base, lay.size, _exported(lay, base), lay.machine, name)


# ---------------------------------------------------------------------------------------------
# Disassembly for DEBUG=7

def disassemble(obj: bytes, symbol: str | None = None, *, name: str | None = None) -> str:
    """Capstone listing of the object's executable sections, one block per function symbol,
    with relocations noted where they patch an instruction (addresses are section offsets).
    `name` (the file or kernel) starts every ElfLoadError's message."""
    with _naming(name, obj):
        return _disassemble(obj, symbol)


def _disassemble(obj: bytes, symbol: str | None) -> str:
    lay = _parse(obj)
    import capstone
    if lay.machine == EM_X86_64:
        md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    else:
        md = capstone.Cs(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM)
    md.skipdata = True   # constant islands in code must not end the listing
    relocs: dict[tuple[int, int], list[str]] = {}
    for r in lay.relocs:
        s = lay.syms[r.sym]
        tname = s.name or lay.sec_names.get(s.shndx, f"#{r.sym}")
        relocs.setdefault((r.sec, r.offset), []).append(f"{_reloc_name(lay.machine, r.type)} {tname}{r.addend:+#x}")
    out: list[str] = []
    found = False
    for sec, data in lay.contents.items():
        if not any(start <= lay.sec_off[sec] < end and prot & mmap.PROT_EXEC for start, end, prot in lay.regions):
            continue
        # '$x'/'$d' are AArch64 mapping symbols, not functions
        funcs = sorted((s.value, s.size, s.name) for s in lay.syms
                       if s.shndx == sec and s.type in (STT_FUNC, STT_NOTYPE) and s.name and s.name[0] != "$")
        if not funcs:
            funcs = [(0, len(data), lay.sec_names[sec])]
        for n, (start, size, name) in enumerate(funcs):
            if symbol is not None and name != symbol:
                continue
            found = True
            end = start + size if size else (funcs[n + 1][0] if n + 1 < len(funcs) else len(data))
            out.append(f"{lay.sec_names[sec]}:{name}:")
            for ins in md.disasm(data[start:end], start):
                notes = [n_ for o in range(ins.address, ins.address + ins.size) for n_ in relocs.get((sec, o), [])]
                line = f"  {ins.address:6x}:  {ins.bytes.hex():<20} {ins.mnemonic:<8} {ins.op_str}"
                out.append(line.rstrip() + (f"    ; {'; '.join(notes)}" if notes else ""))
    if symbol is not None and not found:
        names = sorted({s.name for s in lay.syms if s.type == STT_FUNC and s.name})
        raise ElfLoadError(f"no function {symbol!r} in the object's code; available: {', '.join(names) or '(none)'}")
    return "\n".join(out) + "\n"
