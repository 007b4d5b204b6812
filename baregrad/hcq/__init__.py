"""HCQ core: signals, hardware queues, and the generic device the NV/AMD/QCOM/CPU drivers build on."""
from baregrad.hcq.signal import HCQSignal, HCQTimeout, SignalPool
from baregrad.hcq.queue import HWQueue, HCQArgsState, Cmd
from baregrad.hcq.device import HCQBuffer, HCQDevice, HCQProgram, HCQAllocator, mapped_reader, where_is

__all__ = ["HCQSignal", "HCQTimeout", "SignalPool", "HWQueue", "HCQArgsState", "Cmd", "HCQBuffer", "HCQDevice",
           "HCQProgram", "HCQAllocator", "mapped_reader", "where_is"]
