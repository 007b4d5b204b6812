"""torch.nn.functional's losses: the Tensor methods themselves (tensor/ops/loss.py)."""
from baregrad.tensor.tensor import Tensor

cross_entropy = Tensor.cross_entropy
nll_loss = Tensor.nll_loss
binary_cross_entropy = Tensor.binary_cross_entropy
binary_cross_entropy_with_logits = Tensor.binary_cross_entropy_with_logits
mse_loss = Tensor.mse_loss
l1_loss = Tensor.l1_loss
smooth_l1_loss = Tensor.smooth_l1_loss
huber_loss = Tensor.huber_loss
