"""Mock Adreno: a conformance model of an a6xx behind KGSL: the virtual /dev/kgsl-3d0 (kgsl.py), the command
processor (cp.py: PM4 decode, signals, waits, IBs, timestamps), the shader processor behind CP_EXEC_CS (sp.py: the
compute state checked against the code) and the ir3 executor (ir3_exec.py).
"""
