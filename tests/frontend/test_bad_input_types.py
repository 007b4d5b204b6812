"""Bad input raises PyTorch's exception type (issue 9): each case runs the same invalid call on PyTorch and on baregrad
and asserts baregrad's error is an instance of the class PyTorch raises, with a message naming the argument or value.
A second list pins the documented exception (README, Known differences): an op given a dtype it does not take raises
TypeError where PyTorch raises RuntimeError."""
from types import SimpleNamespace
import numpy as np
import pytest
import baregrad
import baregrad.nn as bnn
import baregrad.tensor.functional as BF
from baregrad import Tensor, dtypes
from baregrad.tensor import linalg as blinalg

torch = pytest.importorskip("torch")

def _r(*shape: int) -> np.ndarray: return np.random.default_rng(0).standard_normal(shape).astype(np.float32)

# the same calls on both libraries: `L.T` the tensor class (factories), `L.r(2, 3)` a float32 tensor, `L.i(2, 3)` int64 zeros, `L.l([...])` int64 data
TL = SimpleNamespace(T=torch, r=lambda *s: torch.tensor(_r(*s)), i=lambda *s: torch.zeros(s, dtype=torch.int64),
                     l=lambda v: torch.tensor(v, dtype=torch.int64), M=torch, F=torch.nn.functional, nn=torch.nn, linalg=torch.linalg)
BL = SimpleNamespace(T=Tensor, r=lambda *s: Tensor(_r(*s)), i=lambda *s: Tensor.zeros(*s, dtype=dtypes.int64),
                     l=lambda v: Tensor(np.array(v, dtype=np.int64)), M=baregrad, F=BF, nn=bnn, linalg=blinalg)

X4 = lambda L: L.r(1, 2, 5, 5)
W4 = lambda L: L.r(3, 2, 3, 3)

# name -> (call on L, a word the message must contain)
CASES = {
  # joining, splitting, tiling
  "cat_empty": (lambda L: L.M.cat([]), "non-empty"),
  "cat_shapes": (lambda L: L.M.cat([L.r(2, 3), L.r(3, 4)]), "(2, 3)"),
  "cat_dim": (lambda L: L.M.cat([L.r(2, 3)], 2), "2"),
  "stack_shapes": (lambda L: L.M.stack([L.r(2), L.r(3)]), "shape"),
  "split_zero": (lambda L: L.M.split(L.r(4), 0), "0"),
  "split_sections": (lambda L: L.M.split(L.r(4), [1, 2]), "[1, 2]"),
  "chunk_zero": (lambda L: L.M.chunk(L.r(4), 0), "chunks"),
  "repeat_few": (lambda L: L.r(2, 3).repeat(2), "(2,)"),
  "repeat_negative": (lambda L: L.r(2, 3).repeat(2, -1), "-1"),
  "roll_no_dims": (lambda L: L.M.roll(L.r(2, 3), (1, 2)), "(1, 2)"),
  "roll_lengths": (lambda L: L.M.roll(L.r(2, 3), (1, 2), (0,)), "dims"),
  "tril_1d": (lambda L: L.M.tril(L.r(3)), "tril"),
  "triu_1d": (lambda L: L.M.triu(L.r(3)), "triu"),
  "diagonal_same_dims": (lambda L: L.M.diagonal(L.r(3, 3), 0, 1, 1), "dim1"),
  "diag_3d": (lambda L: L.M.diag(L.r(2, 2, 2)), "(2, 2, 2)"),
  "meshgrid_indexing": (lambda L: L.M.meshgrid(L.r(3), indexing="foo"), "'foo'"),
  "meshgrid_2d": (lambda L: L.M.meshgrid(L.r(2, 2), indexing="ij"), "(2, 2)"),
  "unfold_dim_size": (lambda L: L.r(3).unfold(0, 4, 1), "size is 4"),
  "unfold_dim_step": (lambda L: L.r(3).unfold(0, 2, 0), "step"),
  # shapes and views
  "reshape_numel": (lambda L: L.r(2, 3).reshape(4, 2), "(4, 2)"),
  "reshape_two_infer": (lambda L: L.r(2, 3).reshape(-1, -1), "-1"),
  "permute_bad": (lambda L: L.r(2, 3).permute(0, 0), "(0, 0)"),
  "expand_bad": (lambda L: L.r(2, 3).expand(4, 3), "(4, 3)"),
  "dim_out_of_range": (lambda L: L.r(2, 3).sum(2), "2"),
  "flip_repeated": (lambda L: L.r(2, 3).flip(0, 0), "dim"),
  "broadcast": (lambda L: L.r(2, 3) + L.r(4), "(2, 3)"),
  "matmul_inner": (lambda L: L.r(2, 3) @ L.r(4, 2), "3"),
  "matmul_0d": (lambda L: L.r(2, 3).matmul(L.r()), "0-d"),
  "max_empty": (lambda L: L.r(0, 3).max(), "empty"),
  "max_dim_empty": (lambda L: L.r(0, 3).max(0), "non-zero size"),
  "amax_dim_empty": (lambda L: L.r(0, 3).amax(0), "non-zero size"),
  "index_too_many": (lambda L: L.r(2, 3)[0, 0, 0], "too many"),
  "index_out_of_range": (lambda L: L.r(2, 3)[5], "5"),
  "slice_step_zero": (lambda L: L.r(3)[::0], "step"),
  "item_many": (lambda L: L.r(3).item(), "3"),
  "pad_odd": (lambda L: L.F.pad(X4(L), (1,)), "(1,)"),
  "pad_mode": (lambda L: L.F.pad(X4(L), (1, 1), mode="foo"), "'foo'"),
  "pad_reflect_value": (lambda L: L.F.pad(X4(L), (1, 1), mode="reflect", value=1.0), "value"),
  "pad_reflect_big": (lambda L: L.F.pad(L.r(1, 2, 3), (5, 5), mode="reflect"), "5"),
  # gather / scatter / indexing ops
  "gather_ndim": (lambda L: L.M.gather(L.r(3, 3), 0, L.i(3)), "dimensions"),
  "scatter_reduce_arg": (lambda L: L.r(3).scatter(0, L.i(1), L.r(1), reduce="foo"), "'foo'"),
  "scatter_reduce_op": (lambda L: L.r(3).scatter_reduce(0, L.i(1), L.r(1), "foo"), "'foo'"),
  "index_select_2d": (lambda L: L.M.index_select(L.r(3), 0, L.i(2, 2)), "(2, 2)"),
  "repeat_interleave_negative": (lambda L: L.M.repeat_interleave(L.r(3), -1), "-1"),
  "arange_step_zero": (lambda L: L.T.arange(0, 3, 0), "step"),
  "eye_negative": (lambda L: L.T.eye(-1), "-1"),
  # einsum
  "einsum_operands": (lambda L: L.M.einsum("ij,jk", L.r(2, 3)), "operand"),
  "einsum_ellipsis_dims": (lambda L: L.M.einsum("ij...k", L.r(2, 3)), "(2, 3)"),
  "einsum_subscript": (lambda L: L.M.einsum("i1", L.r(2, 3)), "subscript"),
  "einsum_term_dims": (lambda L: L.M.einsum("ijk", L.r(2, 3)), "'ijk'"),
  "einsum_output_twice": (lambda L: L.M.einsum("ij->ii", L.r(2, 3)), "'ii'"),
  "einsum_repeated_sizes": (lambda L: L.M.einsum("ii", L.r(2, 3)), "'i'"),
  "einsum_sizes": (lambda L: L.M.einsum("ij,jk", L.r(2, 3), L.r(4, 5)), "'j'"),
  "einsum_output_missing": (lambda L: L.M.einsum("ij->k", L.r(2, 3)), "'k'"),
  # convolution, pooling, (un)folding
  "conv_tuple_length": (lambda L: L.F.conv2d(X4(L), W4(L), stride=(1, 1, 1)), "stride"),
  "conv_same_strided": (lambda L: L.F.conv2d(X4(L), W4(L), stride=2, padding="same"), "same"),
  "conv_padding_string": (lambda L: L.F.conv2d(X4(L), W4(L), padding="foo"), "'foo'"),
  "conv_negative_padding": (lambda L: L.F.conv2d(X4(L), W4(L), padding=-1), "-1"),
  "conv_stride_zero": (lambda L: L.F.conv2d(X4(L), W4(L), stride=0), "stride"),
  "conv_dilation_zero": (lambda L: L.F.conv2d(X4(L), W4(L), dilation=0), "dilation"),
  "conv_groups_zero": (lambda L: L.F.conv2d(X4(L), W4(L), groups=0), "groups"),
  "conv_channels": (lambda L: L.F.conv2d(L.r(1, 3, 5, 5), W4(L)), "channels"),
  "conv_bias": (lambda L: L.F.conv2d(X4(L), W4(L), bias=L.r(2)), "bias"),
  "conv_input_dims": (lambda L: L.F.conv2d(L.r(5, 5), W4(L)), "(5, 5)"),
  "conv1d_weight_dims": (lambda L: L.F.conv1d(L.r(1, 2, 5), W4(L)), "weight"),
  "conv_transpose_output_padding": (lambda L: L.F.conv_transpose2d(X4(L), L.r(2, 3, 3, 3), output_padding=1), "output_padding"),
  "conv_transpose_channels": (lambda L: L.F.conv_transpose2d(X4(L), L.r(3, 3, 3, 3)), "channels"),
  "max_pool_dims": (lambda L: L.F.max_pool2d(L.r(5), 2), "(5,)"),
  "max_pool_kernel_zero": (lambda L: L.F.max_pool2d(X4(L), 0), "kernel_size"),
  "max_pool_stride_zero": (lambda L: L.F.max_pool2d(X4(L), 2, 0), "stride"),
  "avg_pool_kernel_zero": (lambda L: L.F.avg_pool2d(X4(L), 0), "kernel_size"),
  "max_pool_padding_big": (lambda L: L.F.max_pool2d(X4(L), 2, padding=2), "padding"),
  "avg_pool_padding_big": (lambda L: L.F.avg_pool2d(X4(L), 2, padding=2), "padding"),
  "max_pool_padding_negative": (lambda L: L.F.max_pool2d(X4(L), 2, padding=-1), "padding"),
  "max_pool_too_small": (lambda L: L.F.max_pool2d(L.r(1, 1, 2, 2), 3), "too small"),
  "avg_pool_too_small": (lambda L: L.F.avg_pool2d(L.r(1, 1, 2, 2), 3), "too small"),
  "max_pool1d_too_small": (lambda L: L.F.max_pool1d(L.r(1, 1, 2), 3), "too small"),
  "adaptive_pool_dims": (lambda L: L.F.adaptive_avg_pool2d(L.r(5), 2), "(5,)"),
  "adaptive_pool_size_length": (lambda L: L.F.adaptive_avg_pool2d(X4(L), (2, 2, 2)), "output_size"),
  "adaptive_pool_size_negative": (lambda L: L.F.adaptive_avg_pool2d(X4(L), -1), "output_size"),
  "unfold_kernel_zero": (lambda L: L.F.unfold(X4(L), 0), "kernel_size"),
  "unfold_padding_negative": (lambda L: L.F.unfold(X4(L), 2, padding=-1), "padding"),
  "unfold_input_5d": (lambda L: L.F.unfold(L.r(1, 1, 2, 5, 5), 2), "(1, 1, 2, 5, 5)"),
  "fold_input_dims": (lambda L: L.F.fold(X4(L), 4, 2), "(1, 2, 5, 5)"),
  "fold_channels": (lambda L: L.F.fold(L.r(1, 5, 16), 5, 2), "kernel_size"),
  "fold_blocks": (lambda L: L.F.fold(L.r(1, 4, 15), 5, 2), "15"),
  "max_unpool_dims": (lambda L: L.F.max_unpool2d(L.r(5, 5), L.i(5, 5), 2), "(5, 5)"),
  "max_unpool_indices_shape": (lambda L: L.F.max_unpool2d(X4(L), L.i(1, 2, 5, 4), 2), "(1, 2, 5, 4)"),
  "max_unpool_output_size": (lambda L: L.F.max_unpool2d(X4(L), L.i(1, 2, 5, 5), 2, output_size=(10,)), "output_size"),
  # interpolate
  "interpolate_dims": (lambda L: L.F.interpolate(L.r(3, 3), size=2), "(3, 3)"),
  "interpolate_mode_dims": (lambda L: L.F.interpolate(X4(L), size=2, mode="linear"), "'linear'"),
  "interpolate_mode": (lambda L: L.F.interpolate(X4(L), size=2, mode="foo"), "'foo'"),
  "interpolate_align_corners": (lambda L: L.F.interpolate(X4(L), size=2, align_corners=True), "align_corners"),
  "interpolate_no_size": (lambda L: L.F.interpolate(X4(L)), "scale_factor"),
  "interpolate_both": (lambda L: L.F.interpolate(X4(L), size=2, scale_factor=2), "scale_factor"),
  "interpolate_scale_length": (lambda L: L.F.interpolate(X4(L), scale_factor=(2, 2, 2)), "scale_factor"),
  "interpolate_size_length": (lambda L: L.F.interpolate(X4(L), size=(2, 2, 2)), "size"),
  "interpolate_output_zero": (lambda L: L.F.interpolate(X4(L), scale_factor=0.1), "output size"),
  # normalization, dropout, attention
  "dropout_p": (lambda L: L.F.dropout(X4(L), 1.5), "1.5"),
  "layer_norm_shape": (lambda L: L.F.layer_norm(X4(L), (4,)), "(4,)"),
  "layer_norm_weight": (lambda L: L.F.layer_norm(X4(L), (5,), weight=L.r(4)), "weight"),
  "rms_norm_shape": (lambda L: L.F.rms_norm(X4(L), (4,)), "(4,)"),
  "batch_norm_running_mean": (lambda L: L.F.batch_norm(X4(L), L.r(3), L.r(3)), "running_mean"),
  "batch_norm_weight": (lambda L: L.F.batch_norm(X4(L), L.r(2), L.r(2), weight=L.r(3)), "weight"),
  "batch_norm_one_value": (lambda L: L.F.batch_norm(L.r(1, 2), None, None, training=True), "(1, 2)"),
  "batch_norm_eval_no_stats": (lambda L: L.F.batch_norm(X4(L), None, None, training=False), "running_mean"),
  "group_norm_dims": (lambda L: L.F.group_norm(L.r(3), 1), "(3,)"),
  "group_norm_groups": (lambda L: L.F.group_norm(X4(L), 3), "num_groups=3"),
  "group_norm_weight": (lambda L: L.F.group_norm(X4(L), 1, weight=L.r(3)), "weight"),
  "sdpa_dims": (lambda L: L.F.scaled_dot_product_attention(L.r(3), L.r(3), L.r(3)), "(3,)"),
  "sdpa_embedding": (lambda L: L.F.scaled_dot_product_attention(L.r(2, 3), L.r(2, 4), L.r(2, 4)), "(2, 4)"),
  "sdpa_sequence": (lambda L: L.F.scaled_dot_product_attention(L.r(2, 3), L.r(2, 3), L.r(3, 3)), "(3, 3)"),
  "sdpa_gqa_heads": (lambda L: L.F.scaled_dot_product_attention(L.r(1, 3, 2, 4), L.r(1, 2, 2, 4), L.r(1, 2, 2, 4), enable_gqa=True), "heads"),
  "sdpa_mask_and_causal": (lambda L: L.F.scaled_dot_product_attention(L.r(2, 3), L.r(2, 3), L.r(2, 3), attn_mask=L.r(2, 2), is_causal=True), "is_causal"),
  # losses
  "mse_reduction": (lambda L: L.F.mse_loss(L.r(3), L.r(3), reduction="foo"), "'foo'"),
  "nll_reduction": (lambda L: L.F.nll_loss(L.r(3, 4), L.l([0, 1, 2]), reduction="foo"), "'foo'"),
  "cross_entropy_probs_reduction": (lambda L: L.F.cross_entropy(L.r(3, 4), L.r(3, 4).softmax(1), reduction="foo"), "'foo'"),
  "cross_entropy_smoothing_reduction": (lambda L: L.F.cross_entropy(L.r(3, 4), L.l([0, 1, 2]), reduction="foo", label_smoothing=0.1), "'foo'"),
  "nll_batch": (lambda L: L.F.nll_loss(L.r(3, 4), L.l([0, 1])), "3"),
  "cross_entropy_batch": (lambda L: L.F.cross_entropy(L.r(3, 4), L.l([0, 1])), "3"),
  "nll_spatial_target": (lambda L: L.F.nll_loss(L.r(2, 4, 5), L.i(2, 4)), "(2, 4)"),
  "nll_weight": (lambda L: L.F.nll_loss(L.r(3, 4), L.l([0, 1, 2]), weight=L.r(3)), "weight"),
  "cross_entropy_weight": (lambda L: L.F.cross_entropy(L.r(3, 4), L.l([0, 1, 2]), weight=L.r(3)), "weight"),
  "cross_entropy_label_smoothing": (lambda L: L.F.cross_entropy(L.r(3, 4), L.l([0, 1, 2]), label_smoothing=1.5), "1.5"),
  "cross_entropy_probs_shape": (lambda L: L.F.cross_entropy(L.r(3, 4), L.r(3, 5)), "(3, 5)"),
  "bce_shape": (lambda L: L.F.binary_cross_entropy(L.r(3).sigmoid(), L.r(4).sigmoid()), "(4,)"),
  "bce_logits_shape": (lambda L: L.F.binary_cross_entropy_with_logits(L.r(3), L.r(4)), "(4,)"),
  "mse_shape": (lambda L: L.F.mse_loss(L.r(3), L.r(4)), "(3,)"),
  # math
  "norm_p": (lambda L: L.r(3).norm(p="foo"), "'foo'"),
  "qr_1d": (lambda L: L.linalg.qr(L.r(3)), "(3,)"),
  "clamp_no_bounds": (lambda L: L.r(3).clamp(), "min"),
  "int_negative_power": (lambda L: L.l([2]) ** -1, "negative"),
  "div_rounding_mode": (lambda L: L.r(3).div(2, rounding_mode="foo"), "'foo'"),
  "gelu_approximate": (lambda L: L.r(3).gelu(approximate="foo") if L is BL else L.F.gelu(L.r(3), approximate="foo"), "'foo'"),
  "topk_k": (lambda L: L.r(3).topk(4), "k=4"),
  "kthvalue_k": (lambda L: L.r(3).kthvalue(4), "k=4"),
  # nn layers and init
  "Conv2d_groups": (lambda L: L.nn.Conv2d(3, 2, 3, groups=2), "groups"),
  "Conv2d_padding": (lambda L: L.nn.Conv2d(2, 2, 3, padding="foo"), "'foo'"),
  "Conv2d_same_strided": (lambda L: L.nn.Conv2d(2, 2, 3, padding="same", stride=2), "same"),
  "BatchNorm_channels": (lambda L: L.nn.BatchNorm2d(3)(X4(L)), "3"),
  "LayerNorm_shape": (lambda L: L.nn.LayerNorm(4)(X4(L)), "(4,)"),
  "RMSNorm_shape": (lambda L: L.nn.RMSNorm(4)(X4(L)), "(4,)"),
  "GroupNorm_divisible": (lambda L: L.nn.GroupNorm(3, 4), "num_groups"),
  "GroupNorm_channels": (lambda L: L.nn.GroupNorm(1, 3)(X4(L)), "3"),
  "GELU_approximate": (lambda L: L.nn.GELU(approximate="foo")(L.r(3)), "'foo'"),
  "Dropout_p": (lambda L: L.nn.Dropout(1.5), "1.5"),
  "Module_train_mode": (lambda L: L.nn.Linear(2, 2).train("x"), "mode"),
  "init_fan": (lambda L: L.nn.init.kaiming_uniform_(L.r(3)), "(3,)"),
  "init_mode": (lambda L: L.nn.init.kaiming_uniform_(L.r(3, 3), mode="foo"), "'foo'"),
  "init_gain": (lambda L: L.nn.init.calculate_gain("foo"), "'foo'"),
  "init_eye": (lambda L: L.nn.init.eye_(L.r(3, 3, 3)), "(3, 3, 3)"),
  "init_orthogonal": (lambda L: L.nn.init.orthogonal_(L.r(3)), "(3,)"),
}

def _raised(fn, L) -> BaseException | None:
  try: fn(L)
  except Exception as e: return e
  return None

@pytest.mark.parametrize("name", CASES)
def test_bad_input_raises_pytorch_type(name: str) -> None:
  fn, word = CASES[name]
  want = _raised(fn, TL)
  assert want is not None, f"{name}: PyTorch accepts this call, so it is not bad input"
  got = _raised(fn, BL)
  assert got is not None, f"{name}: baregrad accepted what PyTorch refuses with {type(want).__name__}: {want}"
  assert isinstance(got, type(want)), f"{name}: baregrad raised {type(got).__name__} ({got}), PyTorch {type(want).__name__} ({want})"
  assert word in str(got), f"{name}: the message {str(got)!r} does not name {word!r}"

# an op given a dtype it does not take: TypeError here, RuntimeError in PyTorch (README, Known differences)
DTYPE_CASES = {
  "gather_float_index": lambda L: L.M.gather(L.r(3, 3), 0, L.r(3, 3)),
  "masked_fill_int_mask": lambda L: L.r(3).masked_fill(L.i(3), 1.0),
  "one_hot_float": lambda L: L.F.one_hot(L.r(3)),
  "nll_float_target": lambda L: L.F.nll_loss(L.r(3, 4), L.r(3)),
  "embedding_float": lambda L: L.nn.Embedding(3, 2)(L.r(2)),
  "bitwise_float": lambda L: L.r(3) & L.r(3),
  "neg_bool": lambda L: -(L.r(3) > 0),
}

@pytest.mark.parametrize("name", DTYPE_CASES)
def test_wrong_dtype_raises_type_error(name: str) -> None:
  fn = DTYPE_CASES[name]
  assert isinstance(_raised(fn, TL), RuntimeError)
  assert isinstance(_raised(fn, BL), TypeError)

def test_load_state_dict_errors_are_runtime_errors() -> None:
  # PyTorch raises RuntimeError for missing keys and for shape mismatches; baregrad's are also KeyError / ValueError
  for L in (TL, BL):
    with pytest.raises(RuntimeError, match="bias"): L.nn.Linear(2, 3).load_state_dict({"weight": L.r(3, 2)})
    with pytest.raises(RuntimeError, match="weight"): L.nn.Linear(2, 3).load_state_dict({"weight": L.r(3, 3), "bias": L.r(3)})
  with pytest.raises(KeyError): BL.nn.Linear(2, 3).load_state_dict({"weight": BL.r(3, 2)})
  with pytest.raises(ValueError): BL.nn.Linear(2, 3).load_state_dict({"weight": BL.r(3, 3), "bias": BL.r(3)})
