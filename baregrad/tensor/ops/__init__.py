"""Tensor's methods by family, each a mixin class Tensor inherits (tensor.py keeps the core). A mixin module imports
tensor.py only inside the methods that need the class at run time, so the package has no import cycle at load time."""
