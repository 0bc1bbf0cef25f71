"""The public op functions' first check: ``input`` must be a Tensor (or an array).

PyTorch's functions refuse anything else as ``input`` (a Python number only when
another argument is a Tensor: ``torch.sub(1.0, t)``) with a TypeError naming the
function and the argument; tapegrad's wrappers would otherwise read ``.shape`` of a
None or a string and fail with an AttributeError from inside. ``checked(fn)`` puts
that check in front of a function whose first parameter is ``input``; the package
applies it to the public ``tg.*`` and ``tg.nn.functional`` names. The ops namespace
the adjoints compute with (``ctx.m``) keeps the unchecked functions.
"""
import functools
import inspect

import numpy as np

from ..tensor import subclasses as _TT

__all__ = ["checked"]

# a number is an input next to a Tensor (torch.add(2, t), as PyTorch), not alone
_NUMBERS = (int, float, bool)


_wrapped = {}  # fn -> its checked version: tg.linear is tg.nn.functional.linear


def checked(fn):
    """``fn`` with its ``input`` checked first (``fn`` itself if it takes no ``input``)."""
    if fn in _wrapped:
        return _wrapped[fn]
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return fn
    if not params or params[0] != "input" or getattr(fn, "_checked", False):
        return fn
    name = fn.__name__

    @functools.wraps(fn)
    def f(input, *args, **kwargs):
        if type(input) not in _TT and not isinstance(input, np.ndarray) \
                and not type(input).__module__.startswith("cupy") and not (
                    type(input) in _NUMBERS and any(type(a) in _TT for a in args)):
            raise TypeError(f"{name}: argument 'input' must be a Tensor, not "
                            f"{'None' if input is None else type(input).__name__}")
        return fn(input, *args, **kwargs)
    f._checked = True
    _wrapped[fn] = f
    return f
