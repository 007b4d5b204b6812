"""ctypes bindings generated from C headers by tools/autogen.py (layer 1: imports only ctypes).

Each module names its sources and the command that made it in its first lines.
"""
