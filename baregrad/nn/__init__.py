"""baregrad.nn: layers, losses, optimizers and model state (`import baregrad.nn as nn`; `import baregrad.nn.functional as F`;
`from baregrad.nn import optim, state`; `from baregrad.nn.optim import lr_scheduler`).
The code lives in baregrad.tensor.nn (the tensor layer); this package re-exports it."""
import sys as _sys
from baregrad.tensor.nn import *  # noqa: F401,F403
from baregrad.tensor.nn import __all__ as _layers, optim, state, init  # noqa: F401
from baregrad.tensor.nn import functional, losses  # noqa: F401
from baregrad.tensor.nn.losses import *  # noqa: F401,F403
from baregrad.tensor.nn.optim import lr_scheduler
__all__ = [*_layers, *losses.__all__, "functional"]
_sys.modules[__name__ + ".optim"] = optim
_sys.modules[__name__ + ".optim.lr_scheduler"] = lr_scheduler
_sys.modules[__name__ + ".state"] = state
_sys.modules[__name__ + ".init"] = init
_sys.modules[__name__ + ".functional"] = functional
