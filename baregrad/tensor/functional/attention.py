"""torch.nn.functional's attention: the Tensor method itself (tensor/ops/attention.py)."""
from baregrad.tensor.tensor import Tensor

scaled_dot_product_attention = Tensor.scaled_dot_product_attention
