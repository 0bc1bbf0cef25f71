"""Reads of a composite's argument values: a check (a negative variance, an index out
of range) or a size that follows from them (``one_hot``'s class count).

A composite runs once, under ``tg.compile``'s capture; a read of its arguments' raw
arrays is invisible to the capture, so a replay would skip the check (and return a
wrong result where the eager call raises) or keep the captured size. Where an
observer watches (the capture), these helpers read through ops instead: the read is
then a guarded one that each replay repeats (a comparison's outcome or the exact
number), and a replay whose arguments change it runs the call eagerly, which raises
or captures again. Eager calls read the raw array, as before: no dispatch.
"""
import numpy as np

from .._util import distinct_values
from ..grad_mode import no_grad
from ..tape import state as _state
from ..tensor import Tensor, buffer

__all__ = ["whole", "host", "any_value", "int_value"]


def whole(t):
    """The array of all of ``t``'s values: inside vmap, the whole batch's (a check
    over every example, e.g. "all finite", "all in [0, 1]", reads it)."""
    t = _unbatched(t)
    return buffer(t) if isinstance(t, Tensor) else t


def host(t):
    """``whole(t)`` as a NumPy array (a CuPy one copied to the host): for an error
    message naming the value that failed a check."""
    a = whole(t)
    return a.get() if hasattr(a, "get") else np.asarray(a)


def _unbatched(t):
    """The tensor under ``t``'s vmap levels (``t`` outside vmap)."""
    while getattr(t, "_vlevel", None) is not None:
        t = t._value
    return t


def any_value(t, test, by_position=False):
    """Whether ``test`` holds for any of ``t``'s values (inside vmap, any of the
    batch's): ``test`` maps an array, or a tensor, to a bool one (``lambda v: v < 0``).
    Under a capture, read through ops as a guarded outcome. An eager read scans the
    distinct memory of a broadcast array (``distinct_values``), not its broadcast
    size, unless ``by_position`` (``test`` picks values by their place). ``t`` may be
    a tuple of tensors, ``test`` then taking one value of each (by position)."""
    ts = tuple(_unbatched(x) for x in t) if isinstance(t, tuple) else (_unbatched(t),)
    if _state.observers and all(isinstance(x, Tensor) for x in ts):
        with no_grad():
            return bool(test(*ts).any())
    arrays = [whole(x) for x in ts]
    if len(arrays) == 1 and not by_position:
        arrays = [distinct_values(arrays[0])]
    return bool(test(*arrays).any())


def int_value(t, reduce, by_position=False):
    """``int(reduce(t))`` for a reduction ``reduce`` of all of ``t``'s values
    (``lambda v: v.max()``; inside vmap, the batch's). Under a capture, read through
    ops as a guarded number (a new value captures again). ``by_position``: as
    ``any_value``'s."""
    t = _unbatched(t)
    if isinstance(t, Tensor) and _state.observers:
        with no_grad():
            return int(reduce(t))
    a = whole(t)
    return int(reduce(a if by_position else distinct_values(a)))
