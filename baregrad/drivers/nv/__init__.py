from baregrad.drivers.nv.device import NVDevice, NVComputeQueue, NVCopyQueue, RMError

__all__ = ["NVDevice", "NVComputeQueue", "NVCopyQueue", "RMError"]
