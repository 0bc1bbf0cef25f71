"""The dropouts of ``nn.functional``: dropout, dropout1d, dropout3d, alpha_dropout and
feature_alpha_dropout, drawing their masks from tapegrad's seeded generator (each
checked against its next draw)."""
import numpy as np

from ... import devices as _devices
from ..._util import op_error, require_floating
from ...devices import xp_of
from ...dispatch import bind, notify, observing
from ...dtypes import is_float as _isf
from ...ops_registry.opdef import OpDef
from ...tape import state as _state
from .._checks import whole, whole as _whole
from .._decl import Sample, TensorSpec, composite, rand
from ..creation import _drawing_from, _next_draw, draw_step, generator, zeros
from ._common import (
    need_floating as _need_floating,
    np_dtype,
    np_dtype as _np_dtype,
    same_infer as _same_infer,
)


def dropout(input, p=0.5, training=True):
    """Zero each element with probability ``p`` and scale the rest by ``1/(1-p)``,
    drawing from tapegrad's seeded generator (``tg.manual_seed``)."""
    if not 0.0 <= p <= 1.0:
        raise op_error("dropout", f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    # PyTorch: "result type Float can't be cast to the desired output type Long"
    require_floating("dropout", input, cls=RuntimeError)
    # an example's shape (inside vmap, randomness="same": one mask for the batch)
    shape, dt, xp = tuple(input.shape), np_dtype(input), xp_of(whole(input))
    _devices.check_alloc("dropout", shape, dt)  # the mask, before drawing it
    if p == 1.0:
        return input * 0.0
    if observing() and not _state.vmap_levels and getattr(_drawing_from, "g", None) is None \
            and notify("random_step"):
        # (tg.compile's capture watching, which hears random_step: the draw is a step
        # of the program, which a replay runs again, drawing the next mask as this
        # call would)
        return input * bind(DROPOUT_MASK, input, p=p)
    keep = generator().random(shape) >= p
    mask = xp.asarray((keep / (1.0 - p)).astype(dt))
    return input * mask


def _mask_kernel(x, p):
    """The mask of ``dropout(x, p)``: the global generator's next uniform draw of
    ``x``'s shape, kept where >= p and scaled by ``1/(1-p)``, in ``x``'s dtype."""
    keep = generator().random(tuple(x.shape)) >= p
    return xp_of(x).asarray((keep / (1.0 - p)).astype(np_dtype(x)))


# The mask as an op of kind "random", not registered: it is bound only while an
# observer that hears ``random_step`` watches (tg.compile's capture), which records it
# as a step that draws from the global generator on every replay (never folded,
# hoisted or recomputed).
DROPOUT_MASK = OpDef(name="dropout_mask", kernel=_mask_kernel,
                     infer=lambda x, p=0.5: TensorSpec(tuple(x.shape), x.dtype),
                     args=("x",), kind="random", differentiable=False, draws=True,
                     onnx="dropout in training mode draws its mask from tapegrad's random "
                          "generator: no ONNX operator reproduces it (eval mode exports)")


def _dropout_infer(x, p=0.5, training=True):
    if not 0.0 <= p <= 1.0:
        raise op_error("dropout", f"dropout probability has to be between 0 and 1, but got {p}")
    if training and p > 0.0 and not _isf(np.dtype(x.dtype)):
        raise op_error("dropout", f"expected a floating point input, got {np.dtype(x.dtype)}",
                       RuntimeError)
    return TensorSpec(tuple(x.shape), x.dtype)


def _dropout_draw(g, x, p=0.5, training=True):
    """The mask the generator draws next: keep where uniform >= p, scaled by 1/(1-p)."""
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return np.zeros_like(x)
    return x * ((g.random(x.shape) >= p) / (1.0 - p)).astype(x.dtype)


# a random mask: compared with the generator's next draw; a sample with p in (0, 1)
# is forward-only (each call draws a new mask, finite differences cannot follow)
composite(dropout, infer=_dropout_infer,
          samples=lambda dtype=np.float64: [Sample((rand((4, 5), dtype),), {"p": 0.3}, False),
                                            Sample((rand((3, 4), dtype),), {"p": 0.5,
                                                                            "training": False}),
                                            Sample((rand((2, 3), dtype),), {"p": 0.0}),
                                            Sample((rand((2, 3), dtype),), {"p": 1.0})],
          error_samples=lambda: [((rand((3,)),), {"p": 1.5}, ValueError),
                                 ((np.arange(3),), {"p": 0.5}, RuntimeError)],
          reference=_next_draw(_dropout_draw))


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
        return zeros(shape, dtype=input.dtype, device=input.device)
    keep = draw_step(dist="keep", shape=tuple(shape), dtype=np.dtype(dt), device=input.device,
                     low=float(p))  # (a Tensor where tg.compile's capture watches)
    return xp.asarray((generator().random(shape) >= p).astype(dt)) if keep is None else keep


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
    if not isinstance(mask, Tensor):
        mask = Tensor(mask)
    return input.mul_(mask) if inplace else input * mask


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


# ------------------------------------------------------------------ the registry
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


del _fn, _nd, _draw
