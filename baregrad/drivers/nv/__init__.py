from baregrad.drivers.nv.device import NVDevice, NVComputeQueue, NVCopyQueue, RMError
from baregrad.drivers.nv.faults import NVChannelError

__all__ = ["NVDevice", "NVComputeQueue", "NVCopyQueue", "RMError", "NVChannelError"]
