"""dropout, drawing its mask from tapegrad's seeded generator."""
import numpy as np

from ...devices import xp_of
from ... import devices as _devices
from ..._util import op_error, require_floating
from ..creation import generator, _next_draw
from .._decl import composite, Sample, TensorSpec, rand
from ._common import np_dtype, whole


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
        return input * xp.zeros((), dtype=dt)
    keep = generator().random(shape) >= p
    mask = xp.asarray((keep / (1.0 - p)).astype(dt))
    return input * mask


def _dropout_infer(x, p=0.5, training=True):
    if not 0.0 <= p <= 1.0:
        raise op_error("dropout", f"dropout probability has to be between 0 and 1, but got {p}")
    if training and p > 0.0 and np.dtype(x.dtype).kind != "f":
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
