"""instance_norm, local_response_norm and rms_norm (composites, PyTorch's formulas), and
the channel dropouts of ``nn.functional``: dropout1d, dropout3d, alpha_dropout,
feature_alpha_dropout, and gumbel_softmax (their noise from tapegrad's generator,
checked against its next draw)."""
import numpy as np

from ..._util import op_error
from ... import devices as _devices
from ...devices import xp_of
from ...grad_mode import no_grad
from ..elementwise import rsqrt, log
from ..reduce import mean, sum as _sum
from ..shape import reshape, unsqueeze, squeeze, pad as _pad
from ..creation import generator, _next_draw  # noqa: F401
from .pool import avg_pool2d
from .activation import softmax
from ._common import whole as _whole, np_dtype as _np_dtype
from .._decl import composite, Sample, TensorSpec, rand

__all__ = ["instance_norm", "local_response_norm", "rms_norm", "dropout1d", "dropout3d",
           "alpha_dropout", "feature_alpha_dropout", "gumbel_softmax"]


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    """Each (example, channel) normalised over its spatial dims (biased variance);
    with running statistics given, they are updated as PyTorch does (the batch's mean
    of the per-instance means and unbiased variances); ``use_input_stats=False``
    normalises with the running statistics instead."""
    for arg, t in (("weight", weight), ("bias", bias)):
        _need_floating("instance_norm", arg, t)
    if input.ndim < 3:
        raise op_error("instance_norm", f"expected an input of at least 3 dims (N, C, *), got "
                                        f"shape {tuple(input.shape)}", ValueError)
    C = input.shape[1]
    for name, p in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):
        if p is not None and tuple(p.shape) != (C,):
            raise op_error("instance_norm", f"{name} of shape {tuple(p.shape)} must be ({C},)",
                           RuntimeError)
    bshape = (1, C) + (1,) * (input.ndim - 2)
    dims = tuple(range(2, input.ndim))
    if use_input_stats:
        n = int(np.prod(input.shape[2:]))
        if n <= 1:
            raise op_error("instance_norm", f"Expected more than 1 spatial element when "
                                            f"training, got input size {tuple(input.shape)}",
                           ValueError)
        mu = mean(input, dim=dims, keepdim=True)
        xc = input - mu
        var = mean(xc * xc, dim=dims, keepdim=True)
        out = xc * rsqrt(var + eps)
        if running_mean is not None or running_var is not None:
            with no_grad():
                m = mu.detach().reshape((input.shape[0], C))
                v = var.detach().reshape((input.shape[0], C)) * (n / (n - 1))
                if running_mean is not None:
                    running_mean.copy_(running_mean * (1 - momentum) + mean(m, 0) * momentum)
                if running_var is not None:
                    running_var.copy_(running_var * (1 - momentum) + mean(v, 0) * momentum)
    else:
        if running_mean is None or running_var is None:
            raise op_error("instance_norm", "Expected running_mean and running_var to be "
                                            "defined when use_input_stats is false",
                           RuntimeError)
        out = (input - reshape(running_mean, bshape)) * rsqrt(reshape(running_var, bshape) + eps)
    if weight is not None:
        out = out * reshape(weight, bshape)
    if bias is not None:
        out = out + reshape(bias, bshape)
    return out


def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """``x / (k + alpha * mean of x^2 over size neighbouring channels)^beta`` (PyTorch's
    formula: the window padded with zeros, averaged over ``size``)."""
    if input.ndim < 3:
        raise op_error("local_response_norm", f"Expected 3D or higher dimensionality input "
                                              f"(got {input.ndim} dimensions)", ValueError)
    if input.numel() == 0:
        return input
    s = tuple(input.shape)
    div = reshape(input * input, (s[0], 1, s[1], -1))
    div = _pad(div, (0, 0, size // 2, (size - 1) // 2))
    div = squeeze(avg_pool2d(div, (size, 1), stride=1), 1)
    div = reshape(div, s)
    return input / (div * alpha + k) ** beta


def _eps_of(x):
    """``torch.finfo(x.dtype).eps`` for a tapegrad or torch tensor."""
    name = str(x.dtype)
    for bits, dt in (("16", np.float16), ("32", np.float32), ("64", np.float64)):
        if bits in name:
            return float(np.finfo(dt).eps)
    return float(np.finfo(np.float32).eps)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """``x / sqrt(mean(x^2 over the last dims) + eps) * weight``; ``eps`` None: the
    dtype's machine epsilon, as PyTorch."""
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(input.shape[input.ndim - len(ns):]) != ns or len(ns) > input.ndim:
        raise op_error("rms_norm", f"Given normalized_shape={list(ns)}, expected input with "
                                   f"shape [*, {', '.join(map(str, ns))}], but got input of "
                                   f"size{list(input.shape)}", RuntimeError)
    if weight is not None and tuple(weight.shape) != ns:
        raise op_error("rms_norm", f"weight of shape {tuple(weight.shape)} must be {ns}",
                       RuntimeError)
    e = _eps_of(input) if eps is None else eps
    dims = tuple(range(input.ndim - len(ns), input.ndim))
    out = input * rsqrt(mean(input * input, dim=dims, keepdim=True) + e)
    return out * weight if weight is not None else out


# ------------------------------------------------------------------ dropouts
def _check_p(name, p):
    if not 0.0 <= p <= 1.0:
        raise op_error(name, f"dropout probability has to be between 0 and 1, but got {p}")


def _channel_mask_shape(name, input, batched_ndim):
    """The mask's shape: one value per (example, channel), or per channel for an
    unbatched input (one dim fewer)."""
    nd = input.ndim
    if nd not in (batched_ndim - 1, batched_ndim):
        raise op_error(name, f"Expected {batched_ndim - 1}D or {batched_ndim}D input, but "
                             f"received a {nd}D input", RuntimeError)
    s = tuple(input.shape)
    lead = 2 if nd == batched_ndim else 1
    return s[:lead] + (1,) * (nd - lead)


def _keep_mask(name, input, shape, p):
    xs, dt = tuple(input.shape), _np_dtype(input)
    xp = xp_of(_whole(input))
    _devices.check_alloc(name, xs, dt)
    if p == 1.0:
        return xp.zeros(shape, dtype=dt)
    return xp.asarray((generator().random(shape) >= p).astype(dt))


def _need_floating(name, arg, x):
    """PyTorch's refusal of an integer or bool tensor (its noise and scaling are
    floating point)."""
    if hasattr(x, "is_floating_point") and not x.is_floating_point():
        raise op_error(name, f"expected a floating point {arg}, got {x.dtype}", RuntimeError)


def _channel_dropout(name, input, p, training, inplace, batched_ndim):
    _check_p(name, p)
    if not training or p == 0.0:
        return input
    _need_floating(name, "input", input)
    shape = _channel_mask_shape(name, input, batched_ndim)
    mask = _keep_mask(name, input, shape, p)
    if p < 1.0:
        mask = mask / (1.0 - p)
    from ...tensor import Tensor
    return input.mul_(Tensor(mask)) if inplace else input * mask


def dropout1d(input, p=0.5, training=True, inplace=False):
    """Zero whole channels of (N, C, L) (or (C, L)) with probability ``p``."""
    return _channel_dropout("dropout1d", input, p, training, inplace, 3)


def dropout3d(input, p=0.5, training=True, inplace=False):
    """Zero whole channels of (N, C, D, H, W) (or (C, D, H, W)) with probability ``p``."""
    return _channel_dropout("dropout3d", input, p, training, inplace, 5)


_ALPHA = 1.7580993408473766  # SELU's -scale * alpha


def _alpha(name, input, p, training, feature):
    _check_p(name, p)
    if not training or p == 0.0 or input.numel() == 0:
        return input
    _need_floating(name, "input", input)
    if p == 1.0:
        return input * 0.0
    if feature:
        if input.ndim < 2:
            raise op_error(name, "Feature dropout requires at least 2 dimensions in the input",
                           RuntimeError)
        shape = tuple(input.shape[:2]) + (1,) * (input.ndim - 2)
    else:
        shape = tuple(input.shape)
    keep = _keep_mask(name, input, shape, p)
    a = float(1.0 / np.sqrt((_ALPHA * _ALPHA * p + 1) * (1 - p)))
    b = (keep - 1) * (_ALPHA * a) + _ALPHA * a * p
    return input * (keep * a) + b


def alpha_dropout(input, p=0.5, training=False, inplace=False):
    """Dropout that keeps SELU's self-normalising mean and variance: dropped values set
    to SELU's negative saturation, then an affine correction (PyTorch's constants)."""
    out = _alpha("alpha_dropout", input, p, training, False)
    return input.copy_(out) if inplace and out is not input else out


def feature_alpha_dropout(input, p=0.5, training=False, inplace=False):
    """alpha_dropout of whole channels."""
    out = _alpha("feature_alpha_dropout", input, p, training, True)
    return input.copy_(out) if inplace and out is not input else out


def gumbel_softmax(logits, tau=1.0, hard=False, eps=1e-10, dim=-1):
    """``softmax((logits + g) / tau)`` with Gumbel noise ``g = -log(E)``, ``E`` exponential
    draws; ``hard``: the one-hot of the argmax, with the soft sample's gradient
    (straight-through)."""
    _need_floating("gumbel_softmax", "logits", logits)
    xp = xp_of(_whole(logits))
    e = generator().exponential(size=tuple(logits.shape))
    g = -log(logits.new_tensor(xp.asarray(e.astype(_np_dtype(logits)))))
    y = softmax((logits + g) / tau, dim)
    if not hard:
        return y
    index = y.argmax(dim, keepdim=True)
    y_hard = y.detach() * 0.0
    y_hard = y_hard.scatter(dim, index, 1.0)
    return y_hard - y.detach() + y


# ------------------------------------------------------------------ the registry
def _same_infer(x, *a, **k):
    return TensorSpec(tuple(x.shape), x.dtype)


def _torch(name):
    def oracle(torch, *a, **kw):
        return getattr(torch.nn.functional, name)(*a, **kw)
    return oracle


composite(instance_norm, infer=_same_infer, args=("input", "running_mean", "running_var",
                                                  "weight", "bias"),
          by_name=True, optional=("running_mean", "running_var", "weight", "bias"),
          samples=lambda dtype=np.float64: [
              Sample((rand((2, 3, 5), dtype), None, None, None, None), {}),
              Sample((rand((2, 3, 4, 4), dtype), None, None, rand((3,), dtype, seed=1),
                      rand((3,), dtype, seed=2)), {"eps": 1e-3}),
              Sample((rand((2, 3, 5), dtype), rand((3,), dtype, seed=3),
                      rand((3,), dtype, 0.5, 1.5, seed=4), None, None),
                     {"use_input_stats": False}, False)],
          error_samples=lambda: [((rand((2, 3)), None, None, None, None), {}, ValueError)],
          torch=_torch("instance_norm"))
composite(local_response_norm, infer=_same_infer,
          samples=lambda dtype=np.float64: [
              Sample((rand((2, 4, 3, 3), dtype),), {"size": 3}),
              Sample((rand((2, 5, 4), dtype),), {"size": 2, "alpha": 0.1, "beta": 0.5,
                                                 "k": 2.0})],
          error_samples=lambda: [((rand((2, 4)),), {"size": 3}, ValueError)],
          torch=_torch("local_response_norm"))
composite(rms_norm, infer=_same_infer, args=("input", "weight"), optional=("weight",),
          by_name=True,
          samples=lambda dtype=np.float64: [
              Sample((rand((2, 3, 4), dtype), None), {"normalized_shape": (4,)}),
              Sample((rand((2, 3, 4), dtype), rand((3, 4), dtype, seed=1)),
                     {"normalized_shape": (3, 4), "eps": 1e-3})],
          error_samples=lambda: [((rand((2, 3, 4)), None), {"normalized_shape": (3,)},
                                  RuntimeError)],
          torch=lambda torch, x, w, **kw: torch.nn.functional.rms_norm(x, weight=w, **kw))


def _channel_draw(batched_ndim):
    def draw(g, x, p=0.5, training=True, inplace=False):
        if not training or p == 0.0:
            return x
        lead = 2 if x.ndim == batched_ndim else 1
        shape = x.shape[:lead] + (1,) * (x.ndim - lead)
        if p == 1.0:
            return np.zeros_like(x)
        return x * ((g.random(shape) >= p) / (1.0 - p)).astype(x.dtype)
    return draw


def _alpha_draw(feature):
    def draw(g, x, p=0.5, training=False, inplace=False):
        if not training or p == 0.0:
            return x
        shape = x.shape[:2] + (1,) * (x.ndim - 2) if feature else x.shape
        keep = (g.random(shape) >= p).astype(x.dtype)
        a = float(1.0 / np.sqrt((_ALPHA * _ALPHA * p + 1) * (1 - p)))
        b = (keep - 1) * (_ALPHA * a) + _ALPHA * a * p
        return (x * (keep * a) + b).astype(x.dtype)
    return draw


for _fn, _nd, _draw in ((dropout1d, 3, _channel_draw(3)), (dropout3d, 5, _channel_draw(5)),
                        (alpha_dropout, 3, _alpha_draw(False)),
                        (feature_alpha_dropout, 4, _alpha_draw(True))):
    composite(_fn, infer=_same_infer,
              samples=(lambda nd: lambda dtype=np.float64: [
                  Sample((rand((2, 3) + (2,) * (nd - 2), dtype),), {"p": 0.5, "training": True},
                         False),
                  Sample((rand((3,) + (2,) * (nd - 2), dtype),), {"p": 0.3, "training": False})])(
                  _nd),
              error_samples=lambda: [((rand((2, 3, 4)),), {"p": 1.5, "training": True},
                                      ValueError)],
              reference=_next_draw(_draw))


# gumbel_softmax is not in the registry: its noise is drawn anew at each call, so no
# sample of it can be differentiated by finite differences (tests/surface/
# test_nn_census_ops.py checks it against the generator's next draw, and its gradient
# against softmax's at that draw)


del _fn, _nd, _draw, _sum, unsqueeze
