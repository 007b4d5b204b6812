"""An interpreter of RDNA3 (gfx1100, wave32) machine code for the mock AMD GPU: decode.py (binary encodings ->
instructions, printed as LLVM prints them), and the machine that runs a dispatch from the bytes in GPU memory."""
