"""Neural-network ops (``tg.nn.functional``), one module per family.

- ``activation``: softmax, log_softmax; celu, selu, hardshrink, hardsigmoid, hardswish,
  hardtanh, relu6, softshrink, softsign, tanhshrink, threshold, glu, softmin, prelu,
  rrelu, gumbel_softmax (gelu, silu, mish and the other Tensor-level activations are
  ``ops/activations.py``)
- ``affine``: linear, bilinear
- ``conv``: conv2d (and its gradient ops), conv1d, conv_transpose2d
- ``conv_nd``: conv3d, conv_transpose3d (one conv2d / conv_transpose2d over the depth
  taps folded into the channels), conv_transpose1d, conv_tbc
- ``pool``: max_pool2d (and its gradient ops), avg_pool2d, adaptive_avg_pool2d
- ``pool_nd``: the 1-d and 3-d pools, adaptive max pools, lp pools, max_unpool
- ``pool_fractional``: fractional_max_pool2d, fractional_max_pool3d
- ``loss``: cross_entropy, nll_loss, mse_loss, l1_loss, the binary cross-entropies, the
  margin, embedding, ranking and divergence losses, linear_cross_entropy
- ``loss_ctc``: ctc_loss (the alpha recursion in log space, with ops)
- ``norm``: layer_norm, batch_norm, group_norm, instance_norm, local_response_norm,
  rms_norm
- ``regularization``: dropout, dropout1d, dropout3d, alpha_dropout, feature_alpha_dropout
- ``spatial``: interpolate, unfold, fold, upsample, upsample_nearest, upsample_bilinear,
  grid_sample, affine_grid
- ``sparse``: embedding, one_hot, embedding_bag (PyTorch's "sparse functions")
- ``distance``: cosine_similarity, pairwise_distance, pdist, normalize; pixel_shuffle,
  pixel_unshuffle, channel_shuffle
- ``attention``: scaled_dot_product_attention, multi_head_attention_forward (PyTorch's,
  step for step, a composite)
- ``rnn``: lstm_layer, gru_layer, rnn_layer, one recurrent direction over a sequence
  (``tg.nn.LSTM``/``GRU``/``RNN``'s ops, not public)

No module is named after a function it exports: the package binds the functions,
and ``import tapegrad.ops.nn.softmax as m`` would then give the function, not the
module.

Compiled CPU kernels (Numba loops, generated source) live in the CPU device layer,
``tapegrad/devices/cpu_kernels/``.

Each op's ``infer`` makes all its argument checks, and both ``bind`` and the
raw-array ``ops_registry.compute`` run it before the kernel (bind's path for the
library's own adjoints on raw arrays runs it only to explain a failure), so kernels
assume valid arguments and check only what depends on the data: index values
(embedding's rows, one_hot's classes), read after the shape rule accepted the shapes
and over the index's distinct memory (``_util.value_range``: a broadcast index is not
scanned element by element). One repeat is left, conv's workspace rules' ndim check: a workspace
rule also runs alone, in ``ops_registry.workspace_bytes``.
"""
# Import order matters here: the families register their ops in this order, which is the
# registry's order.
# isort: skip_file
from .activation import log_softmax, softmax
from .affine import linear
from .conv import conv1d, conv2d, conv_transpose2d
from .pool import adaptive_avg_pool2d, avg_pool2d, max_pool2d
from .loss import (binary_cross_entropy, binary_cross_entropy_with_logits, cross_entropy,
                   l1_loss, mse_loss, nll_loss)
from .norm import batch_norm, group_norm, layer_norm
from .spatial import fold, interpolate, unfold
from .regularization import dropout
from .sparse import embedding, one_hot
from .attention import scaled_dot_product_attention
from .rnn import lstm_layer, gru_layer, rnn_layer  # noqa: F401  (tg.nn's recurrent ops; not public)
from . import distance, conv_nd, pool_nd, pool_fractional, loss_ctc  # noqa: F401  (their functions: tg.nn.functional)

__all__ = ["log_softmax", "softmax", "linear", "conv1d", "conv2d", "max_pool2d", "avg_pool2d",
           "adaptive_avg_pool2d", "cross_entropy", "nll_loss", "mse_loss", "l1_loss",
           "binary_cross_entropy", "binary_cross_entropy_with_logits", "layer_norm",
           "batch_norm", "dropout", "embedding", "scaled_dot_product_attention", "one_hot",
           "conv_transpose2d", "group_norm", "interpolate", "unfold", "fold"]
