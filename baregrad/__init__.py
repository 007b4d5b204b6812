"""baregrad: a deep-learning stack that drives GPUs from userspace. Drivers load lazily: importing this is cheap."""
import functools, os
from baregrad.ir.dtype import dtypes
from baregrad.hal import Device
from baregrad.tensor import Tensor
from baregrad.tensor.jit import jit
from baregrad.ir.sint import Variable
from baregrad.tensor.grad_mode import no_grad, enable_grad, inference_mode, set_grad_enabled, is_grad_enabled
from baregrad.tensor import functional
from baregrad.tensor.functional import (cat, concat, concatenate, stack, split, chunk, roll, tril, triu, gather, scatter, scatter_add,
  masked_fill, diagonal, diag, einsum, conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, max_pool1d, max_pool2d, max_pool3d, avg_pool1d,
  avg_pool2d, avg_pool3d, adaptive_avg_pool1d, adaptive_avg_pool2d, interpolate, dropout, layer_norm, rms_norm, batch_norm, group_norm,
  scaled_dot_product_attention, cross_entropy, nll_loss, binary_cross_entropy, binary_cross_entropy_with_logits, mse_loss, l1_loss,
  smooth_l1_loss, huber_loss, one_hot, pad, scatter_reduce,
  index_select, repeat_interleave, meshgrid, conv_transpose3d)
sort, argsort, msort, topk, kthvalue = Tensor.sort, Tensor.argsort, Tensor.msort, Tensor.topk, Tensor.kthvalue
nonzero, argwhere, masked_select, unique = Tensor.nonzero, Tensor.argwhere, Tensor.masked_select, Tensor.unique
cummax, cummin, logcumsumexp = Tensor.cummax, Tensor.cummin, Tensor.logcumsumexp
atan2, copysign, logaddexp, isclose, allclose = Tensor.atan2, Tensor.copysign, Tensor.logaddexp, Tensor.isclose, Tensor.allclose
# PyTorch's top-level factories and torch.where with one argument (tensor/factories.py), save/load (tensor/nn/checkpoint.py)
from baregrad.tensor.factories import (as_tensor, zeros, ones, empty, full, zeros_like, ones_like, empty_like, full_like, rand_like,
  randn_like, arange, linspace, eye, rand, randn, randint, randperm, manual_seed, initial_seed, where)
from baregrad.tensor.factories import tensor as _tensor_factory
from baregrad.tensor.nn.checkpoint import save, load

class _TensorPackage(type(functools)):
  """baregrad.tensor is both the package of the frontend (baregrad.tensor.Tensor, ...) and, called, torch.tensor's factory:
  `baregrad.tensor([1.0, 2.0])` (the factory is baregrad.tensor.factories.tensor)."""
  def __call__(self, data, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _tensor_factory(data, dtype=dtype, device=device, requires_grad=requires_grad)
import sys as _sys  # noqa: E402
from baregrad import knobs as _knobs  # noqa: E402
if _knobs.read("VIZ"):
  from baregrad.viz import record as _viz_record
  _viz_record.start(profile_timeline=bool(_knobs.read("VIZ_TIMELINE")))
_sys.modules["baregrad.tensor"].__class__ = _TensorPackage

__all__ = ["Tensor", "dtypes", "Device", "jit", "Variable", "no_grad", "enable_grad", "inference_mode", "set_grad_enabled", "is_grad_enabled", "functional",
           "cat", "concat", "concatenate", "stack", "split", "chunk", "roll", "tril", "triu", "gather", "scatter", "scatter_add", "masked_fill",
           "diagonal", "diag", "einsum", "where", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "max_pool1d", "max_pool2d",
           "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "interpolate", "dropout",
           "layer_norm", "rms_norm", "batch_norm", "group_norm", "scaled_dot_product_attention", "cross_entropy", "nll_loss", "binary_cross_entropy",
           "binary_cross_entropy_with_logits", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "one_hot", "pad", "scatter_reduce",
           "index_select", "repeat_interleave", "meshgrid", "conv_transpose3d", "sort", "argsort", "msort", "topk", "kthvalue", "nonzero", "argwhere",
           "masked_select", "unique", "cummax", "cummin", "logcumsumexp", "atan2", "copysign", "logaddexp", "isclose", "allclose", "tensor",
           "as_tensor", "zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "arange",
           "linspace", "eye", "rand", "randn", "randint", "randperm", "manual_seed", "initial_seed", "save", "load"]

@functools.cache
def _pyproject() -> dict:
  """The pyproject.toml beside this package when run from a source tree ({} when installed without one)."""
  import tomllib
  p = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pyproject.toml")
  try:
    with open(p, "rb") as f: d = tomllib.load(f)
  except (OSError, ValueError): return {}
  return d if d.get("project", {}).get("name") == "baregrad" else {}

def __getattr__(name: str):
  # __version__ is computed on first use (importing baregrad stays cheap): pyproject.toml is the one source, read
  # from the source tree this package runs from, else from the installed package's metadata
  if name == "__version__":
    v = _pyproject().get("project", {}).get("version")
    if v is None:
      import importlib.metadata
      try: v = importlib.metadata.version("baregrad")
      except importlib.metadata.PackageNotFoundError: v = "0+unknown"
    globals()["__version__"] = v
    return v
  # `baregrad.optim` (torch.optim's place; `from baregrad import optim`) is baregrad.nn.optim; `baregrad.nn` and
  # `baregrad.data` import on first use
  if name in ("nn", "data", "optim"):
    import importlib
    mod = importlib.import_module("baregrad.nn.optim" if name == "optim" else f"baregrad.{name}")
    globals()[name] = mod
    return mod
  raise AttributeError(f"module 'baregrad' has no attribute {name!r}")
