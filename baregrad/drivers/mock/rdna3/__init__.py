"""An interpreter of RDNA3 (gfx1100, wave32) machine code for the mock AMD GPU.

- decode.py: the binary encodings -> Inst (operands, literal and inline constants, true16 halves), printed in LLVM's
  syntax (the tests check every instruction of a kernel corpus against LLVM's own assembly); opcodes.py the tables.
- machine.py: RDNA3Machine(memory).dispatch(kernel_object_va, grid_size, workgroup_size, kernarg_va,
  group_segment_size, private_segment_size, scratch=Scratch(base, wave_bytes, slots)): runs an AQL dispatch from the bytes in GPU memory (the kernel descriptor
  and the code), with salu.py / valu.py / fp.py the instruction semantics after the ISA guide's pseudocode.
Errors: RDNA3Error (a kernel or dispatch it cannot run, naming the instruction), ptx.GPUFault (an access to
unmapped GPU memory, naming the instruction and the address)."""
from baregrad.drivers.amd.isa.rdna3_decode import Inst, Operand, DecodeError, decode, disassemble
from baregrad.drivers.mock.rdna3.machine import RDNA3Machine, RDNA3Error, DispatchResult, Scratch

__all__ = ["Inst", "Operand", "DecodeError", "decode", "disassemble", "RDNA3Machine", "RDNA3Error", "DispatchResult", "Scratch"]
