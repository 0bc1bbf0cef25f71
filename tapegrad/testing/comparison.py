"""``assert_close``, as ``torch.testing.assert_close``: tensors (tapegrad's, PyTorch's or
array-likes), Python numbers, and sequences and mappings of them, equal within
PyTorch's default tolerances for their dtypes, with PyTorch's failure messages."""
import collections.abc as _abc
import numbers

import numpy as np

from .. import dtypes as _dtypes
from ..tensor import Tensor
from .gradcheck import _host

__all__ = ["assert_close"]

# PyTorch's default (rtol, atol) per dtype; any other dtype compares exactly
_TOLERANCES = {np.dtype(np.float16): (1e-3, 1e-5), np.dtype(np.float32): (1.3e-6, 1e-5),
               np.dtype(np.float64): (1e-7, 1e-7), np.dtype(np.complex64): (1.3e-6, 1e-5),
               np.dtype(np.complex128): (1e-7, 1e-7)}
_BF16_TOLERANCE = (1.6e-2, 1e-5)  # (bfloat16's NumPy dtype, ml_dtypes', by its name:
#                                    not imported before a bfloat16 is first needed)


def _tolerance(dtype):
    dtype = np.dtype(dtype)
    if dtype.name == "bfloat16":
        return _BF16_TOLERANCE
    return _TOLERANCES.get(dtype, (0.0, 0.0))


def assert_close(actual, expected, *, allow_subclasses=True, rtol=None, atol=None,
                 equal_nan=False, check_device=True, check_dtype=True, check_layout=True,
                 check_stride=False, msg=None):
    """Raise AssertionError unless ``actual`` and ``expected`` are close: for each
    element ``|actual - expected| <= atol + rtol * |expected|``, with PyTorch's default
    tolerances for the dtypes (the looser of the two) unless both ``rtol`` and ``atol``
    are given; integers and bools compare exactly. Sequences and mappings compare item
    by item, and a failure names the item. ``msg``: a string, or a callable taking the
    generated message and returning one.

    >>> tg.testing.assert_close(tg.tensor([1.0, 2.0]), tg.tensor([1.0, 2.0 + 1e-7]))
    """
    if (rtol is None) != (atol is None):
        raise ValueError(f"Both 'rtol' and 'atol' must be either specified or omitted, but "
                         f"got no {'rtol' if rtol is None else 'atol'}.")
    _compare(actual, expected, "", dict(rtol=rtol, atol=atol, equal_nan=equal_nan,
                                        check_device=check_device, check_dtype=check_dtype,
                                        check_stride=check_stride, msg=msg))


def _fail(text, where, opts):
    if where:
        text += f"\n\nThe failure occurred for item {where}"
    msg = opts["msg"]
    if msg is not None:
        text = msg(text) if callable(msg) else msg
    raise AssertionError(text)


def _is_tensor(x):
    return isinstance(x, (Tensor, np.ndarray, np.generic)) or (
        hasattr(x, "detach") and hasattr(x, "numpy"))


def _compare(a, e, where, opts):
    if _is_tensor(a) or _is_tensor(e):
        return _compare_tensors(a, e, where, opts)
    if isinstance(a, (str, bytes)) or isinstance(e, (str, bytes)):
        if a != e:
            _fail(f"{a!r} != {e!r}", where, opts)
        return
    if isinstance(a, _abc.Mapping) and isinstance(e, _abc.Mapping):
        ka, ke = list(a.keys()), list(e.keys())
        if set(ka) != set(ke):
            missing = [k for k in ke if k not in a]
            extra = [k for k in ka if k not in e]
            _fail(f"The keys of the mappings do not match:\nMissing keys in the actual "
                  f"mapping: {sorted(missing, key=repr)}\nAdditional keys in the actual "
                  f"mapping: {sorted(extra, key=repr)}", where, opts)
        for k in ke:
            _compare(a[k], e[k], f"{where}[{k!r}]", opts)
        return
    if isinstance(a, _abc.Sequence) and isinstance(e, _abc.Sequence):
        if len(a) != len(e):
            _fail(f"The length of the sequences mismatch: {len(a)} != {len(e)}", where, opts)
        for i, (x, y) in enumerate(zip(a, e)):
            _compare(x, y, f"{where}[{i}]", opts)
        return
    if isinstance(a, (numbers.Number, type(None))) and isinstance(e, (numbers.Number,
                                                                      type(None))):
        return _compare_scalars(a, e, where, opts)
    raise TypeError(f"No comparison pair was able to handle inputs of type {type(a)} and "
                    f"{type(e)}.")


def _compare_scalars(a, e, where, opts):
    if a is None or e is None:
        if a is not e:
            _fail(f"None mismatch: {a} is not {e}", where, opts)
        return
    if opts["check_dtype"] and type(a) is not type(e) and not (
            isinstance(a, bool) or isinstance(e, bool)):  # (as PyTorch's number pair)
        _fail(f"The (d)types do not match: {type(a)} != {type(e)}.", where, opts)
    if isinstance(a, bool) or isinstance(e, bool) or (
            isinstance(a, numbers.Integral) and isinstance(e, numbers.Integral)):
        exact, rtol, atol = True, 0.0, 0.0
    else:
        exact = False
        rtol, atol = (1e-7, 1e-7) if opts["rtol"] is None else (opts["rtol"], opts["atol"])
    if a == e or (not exact and _close(complex(a), complex(e), rtol, atol, opts["equal_nan"])):
        return
    diff = abs(a - e)
    rel = diff / abs(e) if e else float("inf")
    word = "equal" if exact else "close"
    up = "" if exact else f" (up to {atol} allowed)"
    upr = "" if exact else f" (up to {rtol} allowed)"
    _fail(f"Scalars are not {word}!\n\nExpected {e} but got {a}.\nAbsolute difference: "
          f"{diff}{up}\nRelative difference: {rel}{upr}", where, opts)


def _close(a, e, rtol, atol, equal_nan):
    if a != a or e != e:  # (NaN)
        return equal_nan and (a != a) == (e != e)
    return abs(a - e) <= atol + rtol * abs(e)


def _np(x):
    if isinstance(x, Tensor):
        return _host(x)
    if hasattr(x, "detach") and hasattr(x, "numpy"):  # a torch tensor
        x = x.detach().cpu()
        try:
            return x.numpy()
        except TypeError:  # (a dtype NumPy lacks: bfloat16 through ml_dtypes)
            import torch
            if x.dtype == torch.bfloat16:
                return x.view(torch.int16).numpy().view(_dtypes.bfloat16.np)
            raise
    return np.asarray(x)


def _stride(x, arr):
    """``x``'s strides in elements (a tensor's ``stride()``, an array's)."""
    st = getattr(x, "stride", None)
    if callable(st):
        return tuple(st())
    x = np.asarray(x)
    return tuple(s // x.itemsize for s in x.strides) if x.itemsize else arr.strides


def _dtype_name(x, arr):
    return str(x.dtype) if hasattr(x, "dtype") and not isinstance(x, np.ndarray) \
        else str(arr.dtype)


def _compare_tensors(actual, expected, where, opts):
    a, e = _np(actual), _np(expected)
    if a.shape != e.shape:
        _fail(f"The values for attribute 'shape' do not match: {a.shape} != {e.shape}.",
              where, opts)
    if opts["check_dtype"] and a.dtype != e.dtype:
        _fail(f"The values for attribute 'dtype' do not match: "
              f"{_dtype_name(actual, a)} != {_dtype_name(expected, e)}.", where, opts)
    if opts["check_device"] and isinstance(actual, Tensor) and isinstance(expected, Tensor) \
            and str(actual.device) != str(expected.device):
        _fail(f"The values for attribute 'device' do not match: {actual.device} != "
              f"{expected.device}.", where, opts)
    if opts["check_stride"] and a.size > 0:
        sa, se = _stride(actual, a), _stride(expected, e)
        if sa != se:
            _fail(f"The values for attribute 'stride()' do not match: {sa} != {se}.",
                  where, opts)
    exact = a.dtype.kind in "biu" and e.dtype.kind in "biu"
    if opts["rtol"] is not None:
        rtol, atol = opts["rtol"], opts["atol"]
    else:
        tols = [_tolerance(d) for d in (a.dtype, e.dtype)]
        rtol, atol = max(t[0] for t in tols), max(t[1] for t in tols)
    if exact:
        a64, e64 = a.astype(np.int64), e.astype(np.int64)
        bad = a64 != e64
    else:
        kind = np.complex128 if "c" in (a.dtype.kind, e.dtype.kind) else np.float64
        a64, e64 = a.astype(kind), e.astype(kind)
        with np.errstate(invalid="ignore", over="ignore"):
            bad = ~np.isclose(a64, e64, rtol=rtol, atol=atol, equal_nan=opts["equal_nan"])
    if not bad.any():
        return
    if not exact:  # (the differences in the inputs' common dtype, as PyTorch's)
        try:
            common = np.result_type(a.dtype, e.dtype)
            a64, e64 = a.astype(common), e.astype(common)
        except TypeError:
            pass
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        diff = np.array(np.abs(a64 - e64))
        diff[~bad] = 0   # (only the mismatched elements count)
        if exact:  # (an integer quotient in the default float dtype, as PyTorch's)
            rel = np.array(diff.astype(np.float32) / np.abs(e64).astype(np.float32))
        else:
            rel = np.array(diff / np.abs(e64))
        rel[~bad] = 0
    word = "equal" if exact else "close"
    up = "" if exact else f" (up to {atol} allowed)"
    upr = "" if exact else f" (up to {rtol} allowed)"
    if a.ndim == 0:
        _fail(f"Scalars are not {word}!\n\nExpected {e.item()} but got {a.item()}.\n"
              f"Absolute difference: {diff.item()}{up}\nRelative difference: "
              f"{float(rel)}{upr}", where, opts)
    n = int(bad.sum())
    i = _worst(diff)
    j = _worst(rel)
    _fail(f"Tensor-likes are not {word}!\n\nMismatched elements: {n} / {a.size} "
          f"({100.0 * n / a.size:.1f}%)\nGreatest absolute difference: {diff[i].item()} at "
          f"index {i}{up}\nGreatest relative difference: {float(rel[j])} at index {j}{upr}",
          where, opts)


def _worst(d):
    """The index of the largest value (of the first NaN, as torch.max)."""
    flat = d.reshape(-1)
    nan = np.isnan(flat) if flat.dtype.kind == "f" else np.zeros(flat.shape, bool)
    k = int(np.argmax(nan)) if nan.any() else int(np.argmax(flat))
    return tuple(int(i) for i in np.unravel_index(k, d.shape))
