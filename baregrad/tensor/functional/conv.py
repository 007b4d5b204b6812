"""torch.nn.functional's convolutions, pooling, unpooling, interpolation and unfold/fold: the Tensor methods themselves
(tensor/ops/conv.py) and that module's unfold/fold."""
from baregrad.tensor.tensor import Tensor
from baregrad.tensor.ops.conv import unfold, fold  # noqa: F401  (re-exported)

conv1d = Tensor.conv1d
conv2d = Tensor.conv2d
conv3d = Tensor.conv3d
conv_transpose1d = Tensor.conv_transpose1d
conv_transpose2d = Tensor.conv_transpose2d
conv_transpose3d = Tensor.conv_transpose3d
max_pool1d = Tensor.max_pool1d
max_pool2d = Tensor.max_pool2d
max_pool3d = Tensor.max_pool3d
avg_pool1d = Tensor.avg_pool1d
avg_pool2d = Tensor.avg_pool2d
avg_pool3d = Tensor.avg_pool3d
adaptive_avg_pool1d = Tensor.adaptive_avg_pool1d
adaptive_avg_pool2d = Tensor.adaptive_avg_pool2d
interpolate = Tensor.interpolate
max_unpool1d = Tensor.max_unpool1d
max_unpool2d = Tensor.max_unpool2d
