"""``Parameter``: a leaf Tensor that a Module registers as one of its weights.

``bind`` recognises operands by ``type(a) is Tensor`` (the dispatch fast path), so a
Parameter is a plain ``Tensor`` marked in a weak registry; ``isinstance(t,
Parameter)`` consults that registry.
"""
import weakref

import numpy as np

import tapegrad as _tg

__all__ = ["Parameter", "Buffer", "is_parameter"]

_marked = weakref.WeakValueDictionary()   # id(tensor) -> tensor


def is_parameter(t):
    return _marked.get(id(t)) is t


class _ParameterMeta(type):
    def __instancecheck__(cls, obj):
        return is_parameter(obj)


class Parameter(metaclass=_ParameterMeta):
    """``Parameter(data=None, requires_grad=True)`` marks a tensor as a module weight.

    Shares ``data``'s buffer (as ``torch.nn.Parameter``) and returns a leaf Tensor
    with ``requires_grad`` set:

    >>> import tapegrad as tg
    >>> w = tg.nn.Parameter(tg.zeros(2, 3))
    >>> isinstance(w, tg.nn.Parameter), w.requires_grad
    (True, True)
    """

    def __new__(cls, data=None, requires_grad=True):
        if data is None:
            data = _tg.empty(0)
        if not isinstance(data, _tg.Tensor):
            data = _tg.as_tensor(np.asarray(data))
        t = _tg.Tensor(data._data, requires_grad=requires_grad)
        _marked[id(t)] = t
        return t


class Buffer:
    """Marks a tensor as a module buffer when assigned as an attribute
    (``self.running_mean = tg.nn.Buffer(tg.zeros(3))``), as ``torch.nn.Buffer``."""

    def __init__(self, data, persistent=True):
        self.data = data
        self.persistent = persistent
