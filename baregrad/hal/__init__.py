"""Hardware abstraction layer: devices, buffers, allocators, compilers, programs."""
from baregrad.hal.errors import DeviceUnavailable, OutOfMemory, CompileError
from baregrad.hal.device import Device, Compiled, KNOWN_DEVICES, parse_device
from baregrad.hal.allocator import Allocator, LRUAllocator
from baregrad.hal.buffer import Buffer
from baregrad.hal.compiler import Compiler
from baregrad.hal.program import Program

__all__ = ["DeviceUnavailable", "OutOfMemory", "CompileError", "Device", "Compiled", "KNOWN_DEVICES", "parse_device",
           "Allocator", "LRUAllocator", "Buffer", "Compiler", "Program"]
