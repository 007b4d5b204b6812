"""Activation functions built from elementwise ops, with PyTorch's formulas and gradients."""
from __future__ import annotations
import math
from baregrad.ir.dtype import dtypes
from baregrad.tensor.gradfn import with_grad
from baregrad.tensor.recipe import method_recipe
from baregrad.tensor.ops import mathfn as _mathfn
from typing import TYPE_CHECKING
if TYPE_CHECKING: from baregrad.tensor.tensor import Tensor

class ActivationOps:
  """Activations: Tensor methods (x.relu(), x.gelu(), x.silu(), x.softplus())"""
  __slots__ = ()   # (Tensor has slots: a base without them would give every tensor a __dict__)
  @method_recipe("sigmoid")
  def sigmoid(self) -> Tensor:
    """1 / (1 + exp(-x)), from exp(-|x|) so nothing overflows; gradient s (1 - s), finite for any x."""
    x = self._float()
    xd = x.detach()
    e = (-xd.abs()).exp()
    r = (1 + e).reciprocal()
    s = (xd >= 0).where(r, e * r)
    return with_grad(s, (x, s * (1 - s)))
  @method_recipe("tanh")
  def tanh(self) -> Tensor:
    """Hyperbolic tangent, accurate near 0 (through expm1); gradient 1 - tanh^2, finite for any x."""
    return _mathfn.tanh(self)
  @method_recipe("relu")
  def relu(self) -> Tensor:
    """max(x, 0); as PyTorch: NaN and -0.0 stay, the gradient at 0 is 0."""
    if not dtypes.is_float(self.dtype): return (self > 0).where(self, self.zeros_like_uop())
    # self * 0: a zero with x's sign and no gradient; NaN passes with gradient 1, as PyTorch's threshold_backward gives
    return (self < 0).where(self.zeros_like_uop(), ((self > 0) | self.isnan()).where(self, self * 0))
  @method_recipe("leaky_relu")
  def leaky_relu(self, neg_slope: float = 0.01) -> Tensor:
    """x for x > 0, neg_slope * x elsewhere (gradient neg_slope at 0, as PyTorch)."""
    return (self > 0).where(self, self * neg_slope)
  @method_recipe("elu")
  def elu(self, alpha: float = 1.0) -> Tensor:
    """x for x > 0, alpha (exp(x) - 1) elsewhere; the exponential sees only x <= 0, so no inf * 0 reaches the gradient."""
    pos = self > 0
    return pos.where(self, alpha * pos.where(0.0, self).expm1())
  def selu(self) -> Tensor:
    """scale * elu(x, alpha) with the self-normalizing constants."""
    return 1.0507009873554805 * self.elu(1.6732632423543772)
  def celu(self, alpha: float = 1.0) -> Tensor:
    """max(0, x) + min(0, alpha (exp(x / alpha) - 1))."""
    pos = self > 0
    return pos.where(self, alpha * (pos.where(0.0, self) / alpha).expm1())
  @method_recipe("gelu")
  def gelu(self, approximate: str = "none") -> Tensor:
    """x * Phi(x) with the erf form, or approximate='tanh' for the tanh formula."""
    if approximate not in ("none", "tanh"): raise RuntimeError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    if approximate == "tanh": return 0.5 * self * (1 + (math.sqrt(2 / math.pi) * (self + 0.044715 * self * self * self)).tanh())
    return 0.5 * self * (1 + (self * (1 / math.sqrt(2))).erf())
  def quick_gelu(self) -> Tensor:
    """x * sigmoid(1.702 x)."""
    return self * (self * 1.702).sigmoid()
  @method_recipe("silu")
  def silu(self) -> Tensor:
    """x * sigmoid(x)."""
    return self * self.sigmoid()
  @method_recipe("mish")
  def mish(self) -> Tensor:
    """x * tanh(softplus(x))."""
    return self * self.softplus().tanh()
  @method_recipe("softplus")
  def softplus(self, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta x)) / beta, x itself where beta x > threshold; gradient sigmoid(beta x) (1 past the threshold)."""
    x = self._float()
    bx = x.detach() * beta
    soft = (-bx.abs()).exp().log1p() + bx.maximum(0)
    over = bx > threshold
    return with_grad(over.where(x.detach(), soft / beta), (x, over.where(1.0, bx.sigmoid())))
  def hardtanh(self, min_val: float = -1, max_val: float = 1) -> Tensor:
    """Values clipped to [min_val, max_val]."""
    return self.clip(min_val, max_val)
  def hardsigmoid(self) -> Tensor:
    """clip(x / 6 + 1/2, 0, 1)."""
    return (self / 6 + 0.5).clip(0, 1)
  def hardswish(self) -> Tensor:
    """x * clip(x + 3, 0, 6) / 6."""
    return self * (self + 3).clip(0, 6) / 6
  def relu6(self) -> Tensor:
    """clip(x, 0, 6)."""
    return self.clip(0, 6)
  def logsigmoid(self) -> Tensor:
    """log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)), finite for any x; gradient sigmoid(-x)."""
    x = self._float()
    xd = x.detach()
    return with_grad(xd.minimum(0) - (-xd.abs()).exp().log1p(), (x, (-xd).sigmoid()))
  swish = silu
