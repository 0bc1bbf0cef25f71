"""Shape helpers and the one error formatter every op uses."""
import functools
import operator

import numpy as np

from . import dtypes as _dt


class ShapeError(ValueError, RuntimeError):
    """Shapes that do not fit together: NumPy's class (ValueError) and PyTorch's
    (RuntimeError), so code written against either catches it."""


class DtypeError(TypeError, RuntimeError):
    """A dtype the op has no meaning for (an integer ``mean``, a float ``where``
    condition): TypeError, and RuntimeError as PyTorch raises."""


class NoKernelError(TypeError, NotImplementedError):
    """No kernel for that dtype (a bitwise op on floats): TypeError, and
    NotImplementedError as PyTorch raises."""


class ArgumentError(ValueError, RuntimeError):
    """A bad argument value where PyTorch raises RuntimeError: ValueError as well."""


def op_error(op, msg, cls=ValueError):
    """An exception of ``cls`` whose message starts with the op's name."""
    return cls(f"{op}: {msg}")


def dtype_kind(x):
    """The NumPy kind letter of a Tensor's or an array's dtype (None for anything else)."""
    dt = getattr(x, "dtype", None)
    if dt is None:
        return None
    d = getattr(dt, "np", dt)
    return "f" if d is _dt.BF16 else d.kind


def require_floating(op, x, what="input", cls=NotImplementedError):
    """``x`` itself when it is a floating point Tensor or array (or not an array at
    all: the caller's other checks speak); else PyTorch's error for an op with no
    integer or bool kernel (``"GeluKernelImpl" not implemented for 'Long'``)."""
    kind = dtype_kind(x)
    if kind is not None and kind != "f":
        dt = getattr(x.dtype, "np", x.dtype)
        raise op_error(op, f"not implemented for {dt.name} {what} (a floating point "
                           f"{what} is expected)", cls)
    return x


def broadcast_shapes(op, *shapes):
    """Broadcast shapes as NumPy does, raising a clear error naming op and shapes."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        shown = " and ".join(str(tuple(s)) for s in shapes)
        raise op_error(op, f"shapes {shown} cannot be broadcast together", ShapeError) from None


def normalize_dim(op, dim, ndim):
    """One dim (negative allowed) to a non-negative int, or an IndexError naming op."""
    if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool):
        raise op_error(op, f"dim must be an int, got {dim!r}", TypeError)
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise op_error(op, f"dim {dim} out of range for a tensor of {ndim} dims "
                       f"(expected in [{-n}, {n - 1}])", IndexError)
    return int(dim) % n


def normalize_dims(op, dim, ndim):
    """None, an int or a sequence of ints to a sorted tuple of non-negative dims."""
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, (list, tuple)):
        out = tuple(sorted({normalize_dim(op, d, ndim) for d in dim}))
        if len(out) != len(dim):
            raise op_error(op, f"dim {tuple(dim)} repeats a dimension", RuntimeError)
        return out
    return (normalize_dim(op, dim, ndim),)


def distinct_values(a):
    """``a`` without the repeats that broadcasting makes: each stride-0 dim cut to
    length 1 (a view), so a scan of the values (an index's bounds) costs what the
    array's memory holds, not its broadcast size."""
    strides = getattr(a, "strides", None)
    if not strides or 0 not in strides:
        return a
    return a[tuple(slice(0, 1) if st == 0 else slice(None) for st in strides)]


def value_range(a):
    """``(min, max)`` of an integer array as Python ints (None when it is empty), in
    one pass over its distinct memory (see ``distinct_values``)."""
    a = distinct_values(a)
    if a.size == 0:
        return None
    return int(a.min()), int(a.max())


def alias(op, value, alias_value, name, alias_name, default=None):
    """Resolve a PyTorch keyword and its NumPy alias (dim/axis, keepdim/keepdims)."""
    if alias_value is not None:
        if value is not None and value != default:
            raise op_error(op, f"pass either {name} or {alias_name}, not both", TypeError)
        return alias_value
    return value


def shape_arg(op, shape, what="shape"):
    """`*ints` or one tuple/list to a tuple of ints (``what`` names the argument in
    the error)."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    elif (len(shape) == 1 and not hasattr(shape[0], "__index__")
          and hasattr(shape[0], "__iter__")):
        shape = tuple(shape[0])
    out = []
    for s in shape:
        n = _size_element(s)
        if n is None:
            raise op_error(op, f"{what} must be ints, got {shape!r}", TypeError)
        out.append(n)
    return tuple(out)


def _size_element(s):
    """An element of a size as an int: an int, or (as PyTorch takes them) an integer
    tensor or array of one element; None for anything else (bools included). A tensor is
    read through ``__index__``, so a capture guards the value."""
    if isinstance(s, (int, np.integer)):
        return None if isinstance(s, bool) else int(s)
    a = getattr(s, "_data", s)
    kind = getattr(getattr(a, "dtype", None), "kind", None)
    if kind not in ("i", "u") or getattr(a, "size", 0) != 1:
        return None
    return operator.index(s) if a is not s else int(a.reshape(()))


def fmt_spec(x):
    return f"{tuple(x.shape)} {_dt.from_np(x.dtype).name}"


class Size(tuple):
    """A tensor's shape, as ``torch.Size``: a tuple of ints (equal to and hashing as the
    plain tuple) that prints as ``tapegrad.Size([2, 3])``, stays a Size when sliced,
    added to or repeated, and has ``numel()``. ``Tensor.shape`` and ``Tensor.size()``
    return one."""
    __slots__ = ()

    def __new__(cls, sizes=()):
        sizes = tuple(sizes)
        for k, s in enumerate(sizes):
            if isinstance(s, (bool, np.bool_)) or not hasattr(s, "__index__"):
                raise TypeError(f"Size() takes an iterable of 'int' (item {k} is "
                                f"'{type(s).__name__}')")
        return tuple.__new__(cls, (int(s) for s in sizes))

    def __repr__(self):
        return f"tapegrad.Size({list(self)})"

    __str__ = __repr__

    def __getitem__(self, k):
        r = tuple.__getitem__(self, k)
        return tuple.__new__(Size, r) if type(k) is slice else r

    def __add__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return tuple.__new__(Size, tuple.__add__(self, other))

    def __radd__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return tuple.__new__(Size, tuple.__add__(other, self))

    def __mul__(self, n):
        return tuple.__new__(Size, tuple.__mul__(self, n))

    __rmul__ = __mul__

    def numel(self):
        """The number of elements of a tensor of this shape."""
        n = 1
        for s in self:
            n *= s
        return n

    def __reduce__(self):
        return (Size, (tuple(self),))


Size.__module__ = "tapegrad"   # tg.Size: pickles and prints its type by its public path


# Kernels (dispatch) and raw adjoints (walker) run with NumPy's floating-point
# warnings off, as PyTorch's ops are silent
# (log(0) is -inf, 1/0 inf, sqrt(-1) nan, no RuntimeWarning): NumPy keeps its error
# state in a context variable, set around each kernel call (a kernel's own errstate
# inside still applies). Without that variable (another NumPy): np.errstate.
try:
    from numpy._core._ufunc_config import _extobj_contextvar as _NP_ERRSTATE
    with np.errstate(all="ignore"):
        _QUIET = _NP_ERRSTATE.get()
except (ImportError, AttributeError):  # pragma: no cover
    _NP_ERRSTATE = None


def quiet_numpy():
    """A token for ``loud_numpy``: NumPy's floating-point warnings off until then."""
    cm = np.errstate(all="ignore")
    cm.__enter__()
    return cm


def loud_numpy(token):
    token.__exit__(None, None, None)


if _NP_ERRSTATE is not None:  # (the common case: the context variable's own methods,
    # called directly, no Python frame around them: this runs twice per op)
    quiet_numpy = functools.partial(_NP_ERRSTATE.set, _QUIET)
    loud_numpy = _NP_ERRSTATE.reset
