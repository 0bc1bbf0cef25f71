"""Argument helpers shared by the nn op families."""
import numpy as np

from ... import dtypes as _dt, tape as _tape
from ..._util import op_error
from ...tensor import Tensor, buffer
from .._decl import TensorSpec


def pair(name, v, what):
    """An int or a 1- or 2-sequence of ints as a pair of ints (``what`` names the
    argument in the error)."""
    if is_int_pair(v):  # already canonical: the common case, kept cheap
        return v
    if _is_int(v):
        return (int(v), int(v))
    if isinstance(v, (tuple, list)) and all(_is_int(i) for i in v):
        if len(v) in (1, 2):
            return (int(v[0]), int(v[-1]))
        # PyTorch: a sequence of ints of the wrong length is a RuntimeError
        raise op_error(name, f"{what} must be a single int or a pair of ints, got {len(v)} "
                             f"values {tuple(v)}", RuntimeError)
    raise op_error(name, f"{what} must be an int or a pair of ints, got {v!r}", TypeError)


def _is_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def is_int_pair(v):
    return type(v) is tuple and len(v) == 2 and type(v[0]) is int and type(v[1]) is int


def raw(t):
    """The array behind a Tensor (a raw array passes through), for the composites'
    checks on data and their constant coefficient arrays."""
    return buffer(t) if isinstance(t, Tensor) else t


def np_dtype(t):
    """The NumPy dtype of a Tensor (batched ones inside vmap too) or array."""
    dt = getattr(t, "dtype", None)
    return None if dt is None else np.dtype(getattr(dt, "np", dt))




def need_float(name, allow_bool=False, **tensors):
    """Refuse a non-floating-point tensor argument (PyTorch refuses them before
    promoting), naming the op and the argument."""
    for arg, t in tensors.items():
        dt = getattr(t, "dtype", None)
        if t is None or dt is None:
            continue
        d = dt.np if hasattr(dt, "np") else np.dtype(dt)
        kind = "f" if _dt.is_float(d) else d.kind
        if kind != "f" and not (allow_bool and kind == "b"):
            raise op_error(name, f"expected a floating point {arg}, got "
                                 f"{getattr(dt, 'name', dt)}", RuntimeError)


def same_dtype(name, **tensors):
    """PyTorch's refusal of a contraction's operands of two dtypes (a bfloat16 input
    and a float32 weight), before any op computes a half-width input in float32; under
    ``tg.autocast`` the op's policy casts them to one dtype instead."""
    (n0, a), (n1, b) = tensors.items()
    if _tape.state.autocast:
        return
    if a is not None and b is not None and a.dtype != b.dtype:
        raise op_error(name, f"expected {n0} and {n1} to have the same dtype, but got "
                             f"{a.dtype.name} != {b.dtype.name}", RuntimeError)


def tap_slices(k, s, p, L, Lo):
    """For a kernel tap at offset k along a dim (stride s, padding p, input length L,
    Lo blocks): the blocks whose tap lies inside the input and the input elements
    they see, as two slices; None where no block's does."""
    lo = max(0, -((k - p) // s))  # ceil((p - k) / s)
    hi = min(Lo, (L - 1 + p - k) // s + 1) if L - 1 + p - k >= 0 else 0
    if lo >= hi:
        return None
    start = lo * s + k - p
    return slice(lo, hi), slice(start, start + (hi - lo - 1) * s + 1, s)


def same_infer(x, *a, **k):
    """Shape rule of an op whose result has its first input's shape and dtype."""
    return TensorSpec(tuple(x.shape), x.dtype)


def need_floating(name, arg, x):
    """PyTorch's refusal of an integer or bool tensor (its noise and scaling are
    floating point)."""
    if hasattr(x, "is_floating_point") and not x.is_floating_point():
        raise op_error(name, f"expected a floating point {arg}, got {x.dtype}", RuntimeError)


def torch_functional(name):
    """The PyTorch oracle ``torch.nn.functional.<name>`` called with the op's arguments."""
    def oracle(torch, *a, **kw):
        return getattr(torch.nn.functional, name)(*a, **kw)
    return oracle
