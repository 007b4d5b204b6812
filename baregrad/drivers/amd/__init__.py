"""AMD GPUs through amdkfd: the device (device.py), its queues (queues.py), command formats (hw.py), code objects
(program.py) and the KFD topology (topology.py)."""
from baregrad.drivers.amd.device import AMDDevice, AMDAllocator, AMDMemory
from baregrad.drivers.amd.faults import AMDFault, AMDDeviceLost, AMDQueueTimeout
from baregrad.drivers.amd.program import AMDProgram, AMDArgsState, CodeObjectError, code_object_metadata
from baregrad.drivers.amd.queues import AMDComputeQueue, AMDCopyQueue

__all__ = ["AMDDevice", "AMDAllocator", "AMDFault", "AMDDeviceLost", "AMDQueueTimeout", "AMDMemory", "AMDProgram", "AMDArgsState",
           "CodeObjectError", "code_object_metadata", "AMDComputeQueue", "AMDCopyQueue"]
