"""torch.nn.functional's counterpart (F.conv2d(x, w), F.cross_entropy(logits, y), ...), by family: shape (joins, splits,
gathers, scatters, einsum, where), conv (convolution, pooling, resampling), norm (dropout, normalizations), attention,
loss. Every function that is also a Tensor method is that method (one definition, in tensor/ops/)."""
from baregrad.tensor.functional.shape import (cat, concat, concatenate, stack, meshgrid, pad, einsum, split, chunk,
  repeat, roll, tril, triu, diagonal, diag, gather, scatter, scatter_add,
  scatter_reduce, index_select, repeat_interleave, masked_fill, one_hot,
  where)
from baregrad.tensor.functional.conv import (unfold, fold, conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d,
  conv_transpose3d, max_pool1d, max_pool2d, max_pool3d, avg_pool1d,
  avg_pool2d, avg_pool3d, adaptive_avg_pool1d, adaptive_avg_pool2d,
  interpolate, max_unpool1d, max_unpool2d)
from baregrad.tensor.functional.norm import (dropout, layer_norm, rms_norm, batch_norm, group_norm, normalize, softmin,
  softsign, logsigmoid)
from baregrad.tensor.functional.attention import scaled_dot_product_attention
from baregrad.tensor.functional.loss import (cross_entropy, nll_loss, binary_cross_entropy,
  binary_cross_entropy_with_logits, mse_loss, l1_loss, smooth_l1_loss,
  huber_loss)

__all__ = ["cat", "concat", "concatenate", "stack", "split", "chunk", "repeat", "roll", "tril", "triu", "gather",
           "scatter", "scatter_add", "masked_fill", "diagonal", "diag", "einsum", "where", "conv1d", "conv2d", "conv3d",
           "conv_transpose1d", "conv_transpose2d", "max_pool2d", "avg_pool2d", "max_pool1d", "avg_pool1d", "max_pool3d",
           "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "interpolate", "dropout", "layer_norm",
           "batch_norm", "group_norm", "rms_norm", "scaled_dot_product_attention", "cross_entropy", "nll_loss",
           "binary_cross_entropy", "binary_cross_entropy_with_logits", "mse_loss", "l1_loss", "smooth_l1_loss",
           "huber_loss", "one_hot", "pad", "scatter_reduce", "index_select", "repeat_interleave", "meshgrid", "unfold",
           "fold", "max_unpool1d", "max_unpool2d", "conv_transpose3d", "normalize", "softmin", "softsign", "logsigmoid"]
