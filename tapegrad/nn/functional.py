"""``tg.nn.functional`` (PyTorch's ``F``): the functional NN ops of ``tapegrad.ops``.

Most names are the ops themselves; the activations that take ``inplace=`` are thin
wrappers here, so that ``inplace=True`` writes into the input and returns it, as in
PyTorch.

>>> import tapegrad as tg
>>> import tapegrad.nn.functional as F
>>> F.relu(tg.tensor([-1.0, 2.0]))
tensor([0., 2.])
"""
from ..grad_mode import is_grad_enabled
from ..ops import (linear, conv1d, conv2d, max_pool2d, avg_pool2d, adaptive_avg_pool2d,
                   softmax, log_softmax, cross_entropy, nll_loss, mse_loss, l1_loss,
                   binary_cross_entropy, binary_cross_entropy_with_logits, layer_norm,
                   batch_norm, embedding, scaled_dot_product_attention, one_hot, pad,
                   gelu, softplus, tanh, sigmoid, logsigmoid, conv_transpose2d, group_norm,
                   interpolate, unfold, fold)
from .. import ops as _ops
from ..ops.compat import smooth_l1_loss, huber_loss, dropout2d
from ..ops.guard import checked

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
    if inplace:
        return _into(input, _ops.leaky_relu, negative_slope=negative_slope)
    return _ops.leaky_relu(input, negative_slope)


def elu(input, alpha=1.0, inplace=False):
    if inplace:
        return _into(input, _ops.elu, alpha=alpha)
    return _ops.elu(input, alpha)


def silu(input, inplace=False):
    return _into(input, _ops.silu) if inplace else _ops.silu(input)


def mish(input, inplace=False):
    return _into(input, _ops.mish) if inplace else _ops.mish(input)


def dropout(input, p=0.5, training=True, inplace=False):
    if inplace:
        return _into(input, _ops.dropout, p=p, training=training)
    return _ops.dropout(input, p, training)


def _check_inputs():
    """Each function's ``input`` is checked first, as the ``tg.*`` ones (ops.guard)."""
    names = globals()
    for name in __all__:
        names[name] = checked(names[name])


_check_inputs()
