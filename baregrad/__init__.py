"""baregrad: a deep-learning stack that drives GPUs from userspace. Drivers load lazily: importing this is cheap."""
from baregrad.ir.dtype import dtypes
from baregrad.hal import Device
from baregrad.tensor import Tensor
from baregrad.tensor.jit import jit

__all__ = ["Tensor", "dtypes", "Device", "jit"]
