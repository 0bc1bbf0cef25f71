"""Helpers of ``torch.distributions.utils``: ``broadcast_all``, ``probs_to_logits``,
``logits_to_probs``, ``clamp_probs``, ``lazy_property``."""
from numbers import Number

import numpy as np

from .. import dtypes as _dt, ops as O
from ..tensor import Tensor

__all__ = ["broadcast_all", "broadcast_shape", "clamp_probs", "lazy_property",
           "logits_to_probs", "probs_to_logits", "finfo", "xlogy"]


class _Finfo:
    def __init__(self, dtype):
        info = np.finfo(dtype.np if hasattr(dtype, "np") else dtype)
        self.eps, self.tiny, self.min, self.max = (float(info.eps), float(info.tiny),
                                                   float(info.min), float(info.max))


def finfo(dtype):
    return _Finfo(dtype)


def broadcast_shape(*shapes):
    try:
        return tuple(np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise ValueError(f"shapes {', '.join(str(tuple(s)) for s in shapes)} cannot be "
                         f"broadcast together") from None


def broadcast_all(*values):
    """Numbers become tensors (of the tensors' dtype and device, else the default
    dtype) and everything is expanded to one broadcast shape, as PyTorch."""
    if not all(isinstance(v, (Tensor, Number)) for v in values):
        raise ValueError("Input arguments must all be instances of numbers.Number or "
                         "tapegrad.Tensor.")
    tensors = [v for v in values if isinstance(v, Tensor)]
    if tensors:
        ref = tensors[0]
        dtype = ref.dtype if ref.dtype.np.kind == "f" else _dt.get_default_dtype()
        values = [v if isinstance(v, Tensor) else O.tensor(float(v), dtype=dtype,
                                                           device=ref.device)
                  for v in values]
    else:
        values = [O.tensor(float(v), dtype=_dt.get_default_dtype()) for v in values]
    shape = broadcast_shape(*[v.shape for v in values])
    return tuple(v if tuple(v.shape) == shape else O.expand(v, shape) for v in values)


def clamp_probs(probs):
    eps = finfo(probs.dtype).eps
    return O.clamp(probs, min=eps, max=1 - eps)


def logits_to_probs(logits, is_binary=False):
    return O.sigmoid(logits) if is_binary else O.softmax(logits, dim=-1)


def probs_to_logits(probs, is_binary=False):
    ps = clamp_probs(probs)
    return O.log(ps) - O.log1p(-ps) if is_binary else O.log(ps)


def xlogy(x, y):
    """``x * log(y)``, 0 where ``x == 0`` (with a finite gradient there)."""
    zero = x == 0
    return O.where(zero, 0.0, x * O.log(O.where(zero, 1.0, y)))


class lazy_property:
    """Computed on first access and stored on the instance (``Categorical.probs`` from
    its logits); on the class, the constraint placeholder ``dependent``."""

    def __init__(self, wrapped):
        self.wrapped = wrapped
        self.__doc__ = wrapped.__doc__

    def __get__(self, instance, obj_type=None):
        if instance is None:
            from .constraints import dependent
            return dependent
        value = self.wrapped(instance)
        setattr(instance, self.wrapped.__name__, value)
        return value
