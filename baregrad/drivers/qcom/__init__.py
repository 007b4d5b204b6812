"""Qualcomm Adreno through KGSL: the device (device.py), PM4 streams (pm4.py), dispatch state (dispatch.py), the KGSL
ioctl layer (kgsl.py), chips (chips.py), ir3 compile (ir3_compile.py) and disassembly (ir3_disasm.py)."""
from baregrad.drivers.qcom.device import QCOMDevice, QCOMAllocator, QCOMProgram, QCOMComputeQueue, QCOMFault

__all__ = ["QCOMDevice", "QCOMAllocator", "QCOMProgram", "QCOMComputeQueue", "QCOMFault"]
