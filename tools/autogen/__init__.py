"""The header generator behind tools/autogen.py.

cparse   gcc -E -dD, GCC extensions stripped, pycparser -> a declaration model and the #defines
probe    the C compiler evaluates integer constant expressions and lays out every record
emit     ctypes classes fitted to the compiler's layout (_pack_, padding, bitfield storage, overlays)
gen      one C-header module: selection, constants, hi:lo fields, macro functions, prototypes, text
rnn      the freedreno register database (XML) -> register/bitfield/opcode tables
modules  the list of modules, each pinned to its source (Debian package version, or repository tag/commit)
cli      the command line (regenerate one, --all, --check, --list)
headers/ amd_hsa.h, written for baregrad from the HSA and LLVM AMDGPU documents
shims/   drm/drm.h stand-in (Debian's linux-libc-dev leaves out drm/)
"""
