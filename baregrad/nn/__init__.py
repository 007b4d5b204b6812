"""baregrad.nn: layers, optimizers and model state (`import baregrad.nn as nn`; `from baregrad.nn import optim, state`).
The code lives in baregrad.tensor.nn (the tensor layer); this package re-exports it."""
import sys as _sys
from baregrad.tensor.nn import *  # noqa: F401,F403
from baregrad.tensor.nn import __all__, optim, state, init  # noqa: F401
_sys.modules[__name__ + ".optim"] = optim
_sys.modules[__name__ + ".state"] = state
_sys.modules[__name__ + ".init"] = init
