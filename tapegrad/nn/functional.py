"""``tg.nn.functional`` (PyTorch's ``F``): the functional NN ops of ``tapegrad.ops``.

Most names are the ops themselves; the activations that take ``inplace=`` are thin
wrappers here, so that ``inplace=True`` writes into the input and returns it, as in
PyTorch.

>>> import tapegrad as tg
>>> import tapegrad.nn.functional as F
>>> F.relu(tg.tensor([-1.0, 2.0]))
tensor([0., 2.])
"""
from .. import ops as _ops
from ..grad_mode import is_grad_enabled
from ..ops import (
    adaptive_avg_pool2d,
    avg_pool2d,
    batch_norm,
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    conv1d,
    conv2d,
    conv_transpose2d,
    cross_entropy,
    embedding,
    fold,
    gelu,
    group_norm,
    interpolate,
    l1_loss,
    layer_norm,
    linear,
    log_softmax,
    logsigmoid,
    max_pool2d,
    mse_loss,
    nll_loss,
    one_hot,
    pad,
    scaled_dot_product_attention,
    sigmoid,
    softmax,
    softplus,
    tanh,
    unfold,
)
from ..ops.compat import dropout2d, huber_loss, smooth_l1_loss
from ..ops.guard import checked
from ..ops.nn import activation as _act
from ..ops.nn.activation import (
    glu,
    gumbel_softmax,
    hardshrink,
    prelu,
    softmin,
    softshrink,
    softsign,
    tanhshrink,
)
from ..ops.nn.affine import bilinear
from ..ops.nn.attention import multi_head_attention_forward
from ..ops.nn.conv_nd import conv3d, conv_tbc, conv_transpose1d, conv_transpose3d
from ..ops.nn.distance import (
    channel_shuffle,
    cosine_similarity,
    normalize,
    pairwise_distance,
    pdist,
    pixel_shuffle,
    pixel_unshuffle,
)
from ..ops.nn.loss import (
    cosine_embedding_loss,
    gaussian_nll_loss,
    hinge_embedding_loss,
    kl_div,
    linear_cross_entropy,
    margin_ranking_loss,
    multi_margin_loss,
    multilabel_margin_loss,
    multilabel_soft_margin_loss,
    poisson_nll_loss,
    soft_margin_loss,
    triplet_margin_loss,
    triplet_margin_with_distance_loss,
)
from ..ops.nn.loss_ctc import ctc_loss
from ..ops.nn.norm import instance_norm, local_response_norm, rms_norm
from ..ops.nn.pool_fractional import fractional_max_pool2d, fractional_max_pool3d
from ..ops.nn.pool_nd import (
    adaptive_avg_pool1d,
    adaptive_avg_pool3d,
    adaptive_max_pool1d,
    adaptive_max_pool2d,
    adaptive_max_pool3d,
    avg_pool1d,
    avg_pool3d,
    lp_pool1d,
    lp_pool2d,
    lp_pool3d,
    max_pool1d,
    max_pool3d,
    max_unpool1d,
    max_unpool2d,
    max_unpool3d,
)
from ..ops.nn.regularization import alpha_dropout, dropout1d, dropout3d, feature_alpha_dropout
from ..ops.nn.sparse import embedding_bag
from ..ops.nn.spatial import affine_grid, grid_sample, upsample, upsample_bilinear, upsample_nearest

__all__ = [
    # layers and losses
    "linear", "conv1d", "conv2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d",
    "softmax", "log_softmax", "cross_entropy", "nll_loss", "mse_loss", "l1_loss",
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "layer_norm",
    "batch_norm", "dropout", "embedding", "scaled_dot_product_attention", "one_hot", "pad",
    "conv_transpose2d", "group_norm", "interpolate", "unfold", "fold",
    "smooth_l1_loss", "huber_loss", "dropout2d",
    # activations
    "relu", "leaky_relu", "elu", "gelu", "silu", "mish", "softplus", "tanh", "sigmoid",
    "logsigmoid",
    # activations (their in-place forms too), losses, pooling, norms, distances and
    # rearrangements, dropouts, layers
    "celu", "selu", "hardshrink", "hardsigmoid", "hardswish", "hardtanh", "relu6",
    "softshrink", "softsign", "tanhshrink", "threshold", "glu", "softmin", "prelu", "rrelu",
    "relu_", "elu_", "celu_", "selu_", "leaky_relu_", "hardtanh_", "threshold_", "rrelu_",
    "cosine_similarity", "pairwise_distance", "pdist", "normalize", "pixel_shuffle",
    "pixel_unshuffle", "channel_shuffle",
    "cosine_embedding_loss", "gaussian_nll_loss", "hinge_embedding_loss", "kl_div",
    "margin_ranking_loss", "multi_margin_loss", "multilabel_margin_loss",
    "multilabel_soft_margin_loss", "poisson_nll_loss", "soft_margin_loss",
    "triplet_margin_loss", "triplet_margin_with_distance_loss", "linear_cross_entropy",
    "avg_pool1d", "max_pool1d", "adaptive_avg_pool1d", "adaptive_max_pool1d",
    "adaptive_max_pool2d", "lp_pool1d", "lp_pool2d", "avg_pool3d", "max_pool3d",
    "adaptive_avg_pool3d", "adaptive_max_pool3d", "lp_pool3d", "max_unpool1d", "max_unpool2d",
    "max_unpool3d",
    "instance_norm", "local_response_norm", "rms_norm", "dropout1d", "dropout3d",
    "alpha_dropout", "feature_alpha_dropout", "gumbel_softmax",
    "bilinear", "conv_transpose1d", "conv_tbc", "upsample", "upsample_nearest",
    "upsample_bilinear", "embedding_bag", "affine_grid",
    "conv3d", "conv_transpose3d", "grid_sample", "ctc_loss", "fractional_max_pool2d",
    "fractional_max_pool3d", "multi_head_attention_forward",
]


def _into(input, fn, **attrs):
    """``fn(input)`` written into ``input``, which is returned (``inplace=True``).

    While recording, ``fn`` runs on a copy: what it saves for its adjoint must not be
    the buffer being overwritten. The write is an in-place op, so PyTorch's rules hold
    (a leaf that requires grad refuses; the result's gradient flows to the old value).
    """
    out = fn(input.clone() if is_grad_enabled() else input, **attrs)
    return input if out is input else input.copy_(out)


def relu(input, inplace=False):
    """``max(x, 0)``; ``inplace=True`` overwrites ``input`` (``input.relu_()``)."""
    return input.relu_() if inplace else _ops.relu(input)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    """``x`` where positive, ``negative_slope * x`` elsewhere, as
    ``torch.nn.functional.leaky_relu``."""
    if inplace:
        return _into(input, _ops.leaky_relu, negative_slope=negative_slope)
    return _ops.leaky_relu(input, negative_slope)


def elu(input, alpha=1.0, inplace=False):
    """ELU, ``x`` where positive, ``alpha * (exp(x) - 1)`` elsewhere, as
    ``torch.nn.functional.elu``."""
    if inplace:
        return _into(input, _ops.elu, alpha=alpha)
    return _ops.elu(input, alpha)


def silu(input, inplace=False):
    """``x * sigmoid(x)``, elementwise, as ``torch.nn.functional.silu``."""
    return _into(input, _ops.silu) if inplace else _ops.silu(input)


def mish(input, inplace=False):
    """``x * tanh(softplus(x))``, elementwise, as ``torch.nn.functional.mish``."""
    return _into(input, _ops.mish) if inplace else _ops.mish(input)


def dropout(input, p=0.5, training=True, inplace=False):
    """Zeroes elements with probability ``p`` and scales the rest by ``1 / (1 - p)`` when
    ``training``, as ``torch.nn.functional.dropout``."""
    if inplace:
        return _into(input, _ops.dropout, p=p, training=training)
    return _ops.dropout(input, p, training)


def celu(input, alpha=1.0, inplace=False):
    """CELU, ``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``, as
    ``torch.nn.functional.celu``."""
    return _into(input, _act.celu, alpha=alpha) if inplace else _act.celu(input, alpha)


def selu(input, inplace=False):
    """SELU, ``scale * elu(x, alpha)`` with the self-normalizing constants, as
    ``torch.nn.functional.selu``."""
    return _into(input, _act.selu) if inplace else _act.selu(input)


def hardsigmoid(input, inplace=False):
    """``relu6(x + 3) / 6``, elementwise, as ``torch.nn.functional.hardsigmoid``."""
    return _into(input, _act.hardsigmoid) if inplace else _act.hardsigmoid(input)


def hardswish(input, inplace=False):
    """``x * relu6(x + 3) / 6``, elementwise, as ``torch.nn.functional.hardswish``."""
    return _into(input, _act.hardswish) if inplace else _act.hardswish(input)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    """Each element clamped to ``[min_val, max_val]``, as
    ``torch.nn.functional.hardtanh``."""
    if inplace:
        return _into(input, _act.hardtanh, min_val=min_val, max_val=max_val)
    return _act.hardtanh(input, min_val, max_val)


def relu6(input, inplace=False):
    """``min(max(x, 0), 6)``, elementwise, as ``torch.nn.functional.relu6``."""
    return _into(input, _act.relu6) if inplace else _act.relu6(input)


def threshold(input, threshold, value, inplace=False):
    """``x`` where greater than ``threshold``, ``value`` elsewhere, as
    ``torch.nn.functional.threshold``."""
    if inplace:
        return _into(input, _act.threshold, threshold=threshold, value=value)
    return _act.threshold(input, threshold, value)


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    """Randomized leaky ReLU: a slope drawn from ``[lower, upper]`` per element when
    ``training``, their mean otherwise, as ``torch.nn.functional.rrelu``."""
    if inplace:
        return _into(input, _act.rrelu, lower=lower, upper=upper, training=training)
    return _act.rrelu(input, lower, upper, training)


# the in-place spellings (PyTorch's F.relu_ ...)
def relu_(input):
    """relu in place, as ``torch.nn.functional.relu_``."""
    return relu(input, inplace=True)


def elu_(input, alpha=1.0):
    """ELU in place, as ``torch.nn.functional.elu_``."""
    return elu(input, alpha, inplace=True)


def celu_(input, alpha=1.0):
    """CELU in place, as ``torch.nn.functional.celu_``."""
    return celu(input, alpha, inplace=True)


def selu_(input):
    """SELU in place, as ``torch.nn.functional.selu_``."""
    return selu(input, inplace=True)


def leaky_relu_(input, negative_slope=0.01):
    """leaky_relu in place, as ``torch.nn.functional.leaky_relu_``."""
    return leaky_relu(input, negative_slope, inplace=True)


def hardtanh_(input, min_val=-1.0, max_val=1.0):
    """hardtanh in place, as ``torch.nn.functional.hardtanh_``."""
    return hardtanh(input, min_val, max_val, inplace=True)


def threshold_(input, threshold, value):
    """threshold in place, as ``torch.nn.functional.threshold_``."""
    return globals()["threshold"](input, threshold, value, inplace=True)


def rrelu_(input, lower=1.0 / 8, upper=1.0 / 3, training=False):
    """rrelu in place, as ``torch.nn.functional.rrelu_``."""
    return rrelu(input, lower, upper, training, inplace=True)


def _check_inputs():
    """Each function's ``input`` is checked first, as the ``tg.*`` ones (ops.guard)."""
    names = globals()
    for name in __all__:
        names[name] = checked(names[name])


_check_inputs()
