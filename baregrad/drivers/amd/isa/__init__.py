"""The RDNA3 (gfx11) instruction set as data and a decoder: what DEBUG=7 disassembles and the mock GPU executes."""
