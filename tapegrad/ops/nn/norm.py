"""Normalization composites: layer_norm and batch_norm (biased variance to
normalize; batch_norm's running variance is updated unbiased, as PyTorch)."""
import numpy as np

from ...grad_mode import no_grad
from ..._util import op_error
from ..elementwise import rsqrt
from ..reduce import mean
from ..shape import reshape
from ._common import raw


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalize over the trailing ``normalized_shape`` dims (biased variance)."""
    if isinstance(normalized_shape, (int, np.integer)):
        normalized_shape = (int(normalized_shape),)
    ns = tuple(int(s) for s in normalized_shape)
    if not ns or tuple(input.shape[len(input.shape) - len(ns):]) != ns:
        raise op_error("layer_norm", f"normalized_shape {ns} does not match the trailing dims "
                                     f"of input {tuple(input.shape)}", RuntimeError)
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and tuple(p.shape) != ns:
            raise op_error("layer_norm", f"{name} of shape {tuple(p.shape)} must be {ns}",
                           RuntimeError)
    dims = tuple(range(len(input.shape) - len(ns), len(input.shape)))
    xc = input - mean(input, dim=dims, keepdim=True)
    out = xc * rsqrt(mean(xc * xc, dim=dims, keepdim=True) + eps)
    if weight is not None:
        out = out * weight
    return out if bias is None else out + bias


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """Batch normalization over dim 1 of (N, C, ...). In training, batch statistics
    normalize and the running ones are updated in place (unbiased variance), as
    PyTorch; otherwise the running statistics normalize."""
    if len(input.shape) < 2:
        raise op_error("batch_norm", f"expected an input of at least 2 dims (N, C, ...), got "
                                     f"{tuple(input.shape)}", RuntimeError)
    C = input.shape[1]
    for name, p in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):
        if p is not None and tuple(p.shape) != (C,):
            raise op_error("batch_norm", f"{name} of shape {tuple(p.shape)} must be ({C},)",
                           RuntimeError)
    bshape = (1, C) + (1,) * (len(input.shape) - 2)
    dims = (0,) + tuple(range(2, len(input.shape)))
    n = int(np.prod([input.shape[d] for d in dims]))
    if training and n == 0:
        out = input  # nothing to normalize, no statistics to update (PyTorch)
    elif training:
        if n == 1:
            raise op_error("batch_norm", f"expected more than 1 value per channel when "
                                         f"training, got input {tuple(input.shape)}", ValueError)
        mu = mean(input, dim=dims, keepdim=True)
        xc = input - mu
        var = mean(xc * xc, dim=dims, keepdim=True)
        out = xc * rsqrt(var + eps)
        _update_running_stats(running_mean, running_var, raw(mu).reshape(C),
                              raw(var).reshape(C), n, momentum)
    else:
        if running_mean is None or running_var is None:
            raise op_error("batch_norm", "running_mean and running_var are needed when not "
                                         "training", RuntimeError)
        out = (input - reshape(running_mean, bshape)) * rsqrt(reshape(running_var, bshape) + eps)
    if weight is not None:
        out = out * reshape(weight, bshape)
    return out if bias is None else out + reshape(bias, bshape)


def _update_running_stats(running_mean, running_var, mu, var, n, momentum):
    """Moving averages of the batch mean and the unbiased batch variance (of ``n``
    values per channel), in place and unrecorded."""
    with no_grad():
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(mu * momentum)
        if running_var is not None:
            running_var.mul_(1 - momentum).add_(var * (momentum * n / (n - 1)))
