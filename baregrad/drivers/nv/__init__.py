"""NVIDIA GPUs through NVIDIA's open kernel modules (RM and UVM ioctls): the device (device.py), RM and UVM
calls (rm.py), memory (memory.py), queues and channels (queues.py), programs and launches (program.py), what each
GPU generation defines (hw.py) and channel errors (faults.py). The compiler and the library format are
drivers/nv_compile.py."""
from baregrad.drivers.nv.device import NVDevice
from baregrad.drivers.nv.rm import RMError
from baregrad.drivers.nv.queues import NVComputeQueue, NVCopyQueue
from baregrad.drivers.nv.faults import NVChannelError

__all__ = ["NVDevice", "NVComputeQueue", "NVCopyQueue", "RMError", "NVChannelError"]
