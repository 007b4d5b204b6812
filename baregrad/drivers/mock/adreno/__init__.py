"""Mock Adreno: a conformance model of the a6xx command processor (PM4 decode, signals, waits, IBs, timestamps).

Not built yet: the virtual /dev/kgsl-3d0 ioctl layer and the ir3 shader executor (CP_EXEC_CS is refused until one
is attached as `CP.dispatch`).
"""
