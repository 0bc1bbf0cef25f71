"""dropout, drawing its mask from tapegrad's seeded generator."""
from ...devices import xp_of
from ... import devices as _devices
from ..._util import op_error, require_floating
from ..creation import generator
from ._common import raw


def dropout(input, p=0.5, training=True):
    """Zero each element with probability ``p`` and scale the rest by ``1/(1-p)``,
    drawing from tapegrad's seeded generator (``tg.manual_seed``)."""
    if not 0.0 <= p <= 1.0:
        raise op_error("dropout", f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    # PyTorch: "result type Float can't be cast to the desired output type Long"
    require_floating("dropout", input, cls=RuntimeError)
    x = raw(input)
    _devices.check_alloc("dropout", tuple(x.shape), x.dtype)  # the mask, before drawing it
    if p == 1.0:
        return input * xp_of(x).zeros((), dtype=x.dtype)
    keep = generator().random(tuple(x.shape)) >= p
    mask = xp_of(x).asarray((keep / (1.0 - p)).astype(x.dtype))
    return input * mask
